r"""Sharded data parallelism (ZeRO-1/2/3, PyTorch FSDP, hybrid shard) in closed form.

Plain data parallelism (DDP) all-reduces gradients while backward runs
(:mod:`scalemodel.overlap`). Sharded data parallelism splits the model state over the
:math:`s` GPUs of a shard group (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020, arXiv:1910.02054; Zhao et al., "PyTorch FSDP:
Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023, arXiv:2304.11277) and
replaces the all-reduce by its two halves, a reduce-scatter of gradients and an
all-gather of parameters, scheduled around the compute:

=================== ======================================================================
strategy            communication per iteration (one *unit* = one wrapped module)
=================== ======================================================================
``zero1``/``zero2`` reduce-scatter each gradient bucket when backward has produced it;
                    after the optimizer step on the local shard, all-gather the updated
                    parameters (DeepSpeed ZeRO stages 1 and 2: both move the bytes of one
                    all-reduce)
``zero3``           before each unit's forward, all-gather its parameters (prefetched one
                    unit ahead); again before its backward (prefetched one unit ahead,
                    PyTorch FSDP's ``BACKWARD_PRE``); reduce-scatter its gradients when
                    its backward ends (FSDP ``FULL_SHARD``)
``hybrid_shard``    as ``zero3`` with the shard group a node: all-gathers and
                    reduce-scatters stay inside the node, and each reduce-scattered shard
                    is then all-reduced across the nodes (FSDP ``HYBRID_SHARD``)
=================== ======================================================================

The model
---------

Two resources run one iteration: the compute stream (forward of the units in order, then
backward in reverse order, then the optimizer step on the local shard of the state,
:math:`T_u / s`) and one communication channel that serves collectives first in, first
out, in the order the program issues them. A collective of :math:`S` bytes costs
:math:`a + b\,x` as in :mod:`scalemodel.collectives`, with :math:`x` the time per wire bit.
Let the units be :math:`k = 0 \dots K-1` in forward order with forward times :math:`f_k`,
parameter all-gathers :math:`g_k` and, counting :math:`i = 0 \dots K-1` in *backward*
order (:math:`i = 0` is the last unit of forward), backward times :math:`b_i`, backward
all-gathers :math:`a_i` and reduce-scatters :math:`r_i`. Under ``zero3``:

* forward: :math:`g_0` is issued at time 0; unit :math:`k` computes once unit
  :math:`k-1` has and :math:`g_k` has arrived; when it starts, :math:`g_{k+1}` is
  issued;
* backward: the last unit of forward stays gathered (FSDP keeps its root and the last
  unit, which backward needs first); when unit :math:`i` starts its backward,
  :math:`a_{i+1}` is issued, and when it ends, :math:`r_i`.

Every start is the max of the end of what it waits for, every end a start plus a
duration: a max-plus linear system whose completion times are longest paths, each a sum
of durations and so a line in :math:`x`. Because prefetching is one unit ahead and the
channel is FIFO, the system telescopes. In forward, :math:`g_{k+1}` always starts when
unit :math:`k` starts (the channel has finished :math:`g_k`, which unit :math:`k` waited
for), so the start :math:`S_k` of unit :math:`k` obeys :math:`S_{k+1} = S_k +
\max(f_k, g_{k+1})`. In backward, :math:`r_{i-1}` always starts exactly when unit
:math:`i` starts (its backward start :math:`S'_i` is the later of the end of unit
:math:`i-1` and of :math:`a_i`, which precedes :math:`r_{i-1}` on the channel), so
:math:`a_{i+1}` arrives at :math:`S'_i + r_{i-1} + a_{i+1}` and
:math:`S'_{i+1} = S'_i + \max(b_i, r_{i-1} + a_{i+1})`. Adding the tail,

.. math::
   :label: zero3

   T_n = g_0 + \sum_{k=0}^{K-2} \max(f_k,\, g_{k+1}) + f_{K-1}
         + \sum_{i=0}^{K-2} \max(b_i,\, r_{i-1} + a_{i+1})
         + \max(b_{K-1},\, r_{K-2}) + r_{K-1} + \frac{T_u}{s},
   \qquad r_{-1} = 0 .

Under ``zero1`` / ``zero2`` forward needs no communication, the reduce-scatters of the
buckets :math:`j` (ready at :math:`R_j`) follow equation :eq:`iteration`, and the
all-gathers :math:`g_j` of the updated parameters run back to back after the step:

.. math::
   :label: zero12

   T_n = T_f + \max\Big(T_b,\; \max_j \big(R_j + \sum_{i \ge j} r_i\big)\Big)
         + \frac{T_u}{n} + \sum_j g_j .

**Parameter return by broadcast.** DeepSpeed's ZeRO-1/2 all-gather the updated
parameters bucket by bucket, as :eq:`zero12` says. PyTorch's ``ZeroRedundancyOptimizer``
instead broadcasts each rank's shard from that rank (``_sync_params`` calls
``_broadcast_params_from_rank(rank)`` for every rank of the group, which issues one
``dist.broadcast`` per rank with ``parameters_as_bucket_view=True``, else one per
parameter; ``torch/distributed/optim/zero_redundancy_optimizer.py``, pytorch/pytorch at
013a31b), and so does
InternLM's hybrid ZeRO (one broadcast per rank that owns parameters; with more ranks
than large tensors, the last ranks own none: :func:`broadcast_owners`). NCCL runs a
broadcast only as a ring, a chain from the root through the other :math:`s - 1` ranks,
pipelined in steps of :math:`c` bytes per channel (:data:`NCCL_SIMPLE_STEP_BYTES`; the
channels' chunks together, :math:`C`, travel side by side). A chunk is forwarded once it
has arrived, so the chain is a flow shop of :math:`k = \lceil S/C \rceil` equal chunks
of :math:`C' = S/k` bytes over the hops :math:`h`, each taking :math:`t_h = 8C'/r_h`
(:math:`r_h` the hop's rate: the node's NICs, :math:`N/x`, for the :math:`m - 1` hops
between the :math:`m` nodes, which bind, and ``intra_bw`` for the :math:`s - m` others)
plus its latency :math:`\ell_h` (``alpha`` or ``intra_alpha``). Its last chunk arrives
after

.. math::
   :label: broadcast

   B(S) = (k - 1) \max_h t_h + \sum_h (t_h + \ell_h)
        = \frac{8\,x}{N}\,(k - 1 + m - 1)\,C' + (s - m)\Big(\frac{8C'}{r_{intra}}
          + \ell_{intra}\Big) + (m - 1)\,\ell_{net} + c_0 ,

the bytes of the buffer at the NIC rate plus the *pipeline fill*: one chunk over every
hop. The fill grows with :math:`s`, and a group that returns its parameters in
:math:`b` broadcasts pays it :math:`b` times, where all-gathers pay :math:`s - 1` step
latencies once per bucket. Under ``param_return="broadcast"`` the all-gathers
:math:`g_j` of :eq:`zero12` are replaced by :math:`b` such broadcasts of :math:`P/b`
bytes each (:math:`P` the parameter bytes; the sum depends on how :math:`P` is split
among the owners only through :math:`k`). Without a topology every hop is a network
hop (:math:`m = s`, :math:`N = 1`); inside one node the intra-node links are the wire.
:math:`C` defaults to :data:`NCCL_SIMPLE_STEP_BYTES` on each of
:func:`nccl_ring_channels` channels. Not modelled: InternLM's ``overlap_sync_param``,
which lets the next step's forward start on the blocks whose broadcasts have arrived
(the model charges the broadcasts before it, an upper bound).

Each term of :eq:`zero3` is a line or the max of two lines, so :math:`T_n` is convex and
piecewise linear in :math:`x`: the sum of :math:`2K - 1` two-piece functions has at most
:math:`2K` pieces, found by sorting the :math:`2K - 1` breakpoints and taking cumulative
sums (:func:`sum_of_maxima`). The pieces' lines are the upper envelope the rest of
scalemodel works with (:class:`~scalemodel.overlap.UpperEnvelope`), so the scaling
factor, the exact inverse solvers and "what binds" apply unchanged. The compute slowdown
:math:`\sigma` of a cluster multiplies :math:`f, b, T_f, T_b`; its per-collective cost
:math:`c_0` is part of every collective and its per-iteration cost :math:`t_s` of the
last one; its per-bucket cost :math:`c_b` (eq. :eq:`compute-path-ready`) ends each unit's
(each bucket's) backward before its reduce-scatter is issued, :math:`b_i + c_b` in
:eq:`zero3` and :math:`R_j + j\,c_b`, :math:`T_b + K c_b` in :eq:`zero12`.
``tests/des_sharding.py`` plays the same schedules event by event, collective
step by step, and the property tests hold :eq:`zero3` and :eq:`zero12` to it (relative
1e-9).

**Bytes.** A reduce-scatter or all-gather of :math:`S` bytes on a ring of :math:`s` GPUs
moves :math:`(s-1)/s \cdot S` per GPU, half an all-reduce. ZeRO-1/2 therefore move the
bytes of an all-reduce (with parameters and gradients of one dtype), ZeRO-3 1.5 times
that, less the last unit's backward all-gather that FSDP skips. Parameters travel in
``param_dtype`` and gradients in ``reduce_dtype`` (:class:`Sharding`; both default to
the profile's gradient dtype, bf16 for the built-in LLMs, as LLM Foundry's "PURE" mixed
precision).

**Wrapping.** Under sharding ``fusion=`` is the wrapping policy: ``"block"`` (the
default when the profile's tensor names have numbered blocks, ``layers.3.``,
``encoder.layer.3.``, ``h.3.``, ``layer4.2.``: one unit per block, and one per run of
tensors outside blocks, such as the embeddings and the head: FSDP's transformer
auto-wrap), ``"module"`` (one unit per module, the tensors whose names differ only after
their last dot: a Linear's weight and bias; DeepSpeed ZeRO-3 all-gathers each submodule's
own parameters as it runs and prefetches the next), ``"none"`` (one unit per tensor; the
default for profiles without names; with biases it is pessimistic: a bias between two
weights is a unit with almost no compute, and the next weight's all-gather, one unit
ahead, waits behind it) or :class:`SizeWrap` (FSDP's ``size_based_auto_wrap_policy``). ``zero1`` / ``zero2`` also take the fusions of
plain data parallelism (``"ddp"`` buckets, DeepSpeed's reduce buckets; ``"horovod"``,
``"bsp"``), which say how gradients are bucketed for the reduce-scatter.
A unit's forward time is the profile's forward time split in proportion to the units'
backward times (exact for the FLOP-derived profiles, whose backward is twice the forward
everywhere).

**Topology.** With ``gpus_per_node`` the rings of ``zero1/2/3`` span all GPUs as NCCL's
flat ring does (:mod:`scalemodel.collectives`). ``hybrid_shard`` shards over the
``gpus_per_node`` GPUs of a node (when none is given: the profile's GPU's usual server,
else 8 for a device that is not built in, as :func:`scalemodel.memory` counts a node) and
its all-reduce across nodes uses ``algorithm`` among the nodes,
the node's GPUs running one such all-reduce each over its NICs. Collectives that stay
inside a node while others cross the network cost a constant time (their intra-node
bits at ``intra_bw``, uncompressed); when nothing crosses the network the intra-node
link is the wire, as for plain data parallelism.

**Compression.** ``compression=`` divides the bytes of every collective of the
schedule, parameters and gradients alike (as ZeRO++, arXiv:2306.10209, quantizes both).
The planner (:func:`~scalemodel.plan_compression`) instead compresses gradients only,
with the compressors that compose with a reduce-scatter (:data:`SHARDING_COMPRESSORS`).
"""

from __future__ import annotations

import functools
import math
import re
import weakref
from collections import OrderedDict

import attrs
import numpy as np

from .collectives import (ALGORITHMS, NO_REDUCTION_COST, CollectiveOptions, _ring_half_cost,
                          collective_cost, resolve_algorithm)
from .exceptions import (InvalidParameterError, ParameterTypeError, ScalemodelError,
                         UnknownNameError)
from .hardware import DTYPE_BYTES, canonical_dtype
from .memory import SHARDING_ALIASES, SHARDING_STRATEGIES, canonical_sharding
from .overlap import OverlapLines, UpperEnvelope
from .topology import HIERARCHICAL_GPUS_PER_NODE

__all__ = ["Sharding", "SizeWrap", "ShardUnits", "ShardedSchedule", "resolve_sharding",
           "resolve_wrap", "shard_units", "unit_buckets", "sharded_schedule", "zero3_envelope",
           "zero3_envelopes",
           "sum_of_maxima", "SHARDING_STRATEGIES",
           "broadcast_owners", "nccl_ring_channels", "PARAM_RETURNS",
           "NCCL_SIMPLE_STEP_BYTES",
           "SHARDING_ALIASES", "WRAP_POLICIES", "SHARDING_COMPRESSORS"]

WRAP_POLICIES = ("block", "module", "none")
"""Named wrapping policies: ``"block"`` (numbered blocks from the tensor names: FSDP's
transformer auto-wrap), ``"module"`` (the tensors of each module, a name's part before
its last dot: DeepSpeed ZeRO-3, which gathers each submodule's own parameters when the
submodule runs and prefetches the next ones) and ``"none"`` (one unit per tensor);
:class:`SizeWrap` for size-based wrapping."""

_WRAP_ALIASES = {"transformer": "block", "blocks": "block", "layer": "block",
                 "modules": "module", "submodule": "module", "per-module": "module",
                 "per-tensor": "none", "per_tensor": "none", "tensor": "none",
                 "wfbp": "none"}

def is_wrap_name(name) -> bool:
    """Whether ``name`` is a wrapping policy (:data:`WRAP_POLICIES`) or one of its aliases
    (``"transformer"``, ``"per-module"``, ...), as :func:`resolve_wrap` reads it [-].

    Parameters
    ----------
    name : object
        A fusion as given [-].
    """
    if not isinstance(name, str):
        return False
    key = name.strip().lower().replace("_", "-")
    return _WRAP_ALIASES.get(key, key) in WRAP_POLICIES


_BUCKET_FUSIONS = ("ddp", "horovod", "bsp", "none")
"""Fusions of plain data parallelism that ``zero1`` / ``zero2`` accept as gradient
buckets for the reduce-scatter."""

SHARDING_COMPRESSORS = {
    "fp16": "composes: FSDP's reduce_dtype / fp16_compress_hook reduce-scatter 16-bit "
            "gradients",
    "bf16": "composes: FSDP's reduce_dtype / bf16_compress_hook reduce-scatter 16-bit "
            "gradients",
    "int8": "composes as a low-precision reduce-scatter (ZeRO++ qgZ, arXiv:2306.10209)",
    "signsgd": "does not compose: its all-gather of signs replaces the reduce-scatter, "
               "which FSDP's hooks cannot do",
    "topk": "does not compose: a sparse all-gather of (index, value) pairs replaces the "
            "reduce-scatter, which FSDP's communication hooks do not support",
    "randomk": "does not compose: a sparse all-gather replaces the reduce-scatter, which "
               "FSDP's communication hooks do not support",
    "powersgd": "does not compose: PowerSGD all-reduces low-rank factors of whole "
                "matrices; FSDP's hooks see flattened shards (torch's PowerSGD hook is "
                "DDP-only)",
}
"""Which compressors compose with a reduce-scatter under sharding, and why: the
low-precision ones do (they only change the dtype of the reduce), the sparse, 1-bit and
low-rank ones do not (FSDP's ``register_comm_hook`` supports only reduce-dtype casts;
torch.distributed.algorithms._comm_hooks.default_hooks)."""


# --------------------------------------------------------------------------- sharding

def _opt_dtype(name):
    def convert(value):
        if value is None:
            return None
        d = canonical_dtype(value, name)
        return "fp32" if d == "tf32" else d
    return convert


def _strategy(value):
    return canonical_sharding(value)


PARAM_RETURNS = ("allgather", "broadcast")
"""How ``zero1`` / ``zero2`` return the updated parameters after the optimizer step:
``"allgather"`` (DeepSpeed ZeRO stages 1 and 2: one all-gather per bucket) or
``"broadcast"`` (one broadcast per owning rank of the shard group: PyTorch's
``ZeroRedundancyOptimizer``, InternLM's hybrid ZeRO); see :class:`Sharding`."""

NCCL_SIMPLE_STEP_BYTES = 512 * 1024
"""Bytes one NCCL channel forwards per pipeline step of a ring broadcast under the Simple
protocol: ``NCCL_BUFFSIZE`` (4 MiB by default) / ``NCCL_STEPS`` (8), with
``BROADCAST_CHUNKSTEPS = BROADCAST_SLICESTEPS = 1`` (NVIDIA/nccl ``src/include/
collectives.h``, ``src/enqueue.cc``) [bytes]."""


def _param_return(value):
    if not isinstance(value, str):
        raise ParameterTypeError("param_return", value, f"one of {PARAM_RETURNS}")
    key = value.strip().lower().replace("_", "").replace("-", "")
    if key not in PARAM_RETURNS:
        raise UnknownNameError("param_return", value, PARAM_RETURNS)
    return key


def _broadcasts(value):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ParameterTypeError("broadcasts", value, "an integer number of broadcasts "
                                 ">= 1, or None for one per rank of the shard group")
    if value < 1:
        raise InvalidParameterError("broadcasts", value, "at least one broadcast returns "
                                    "the parameters")
    return int(value)


def _chunk(value):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not math.isfinite(value) \
            or value <= 0:
        raise InvalidParameterError("broadcast_chunk", value, "must be a finite number of "
                                    "bytes > 0", f"NCCL's Simple step is "
                                    f"{NCCL_SIMPLE_STEP_BYTES} bytes per channel")
    return float(value)


def _group(value):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ParameterTypeError("shard_group", value, "an integer number of GPUs >= 2")
    if value < 2:
        raise InvalidParameterError("shard_group", value, "a shard group has at least 2 "
                                    "GPUs", "Use sharding='none' for no sharding")
    return int(value)


@attrs.frozen(cache_hash=True)
class Sharding:
    """A sharding strategy and the dtypes its collectives carry.

    Parameters
    ----------
    strategy : str
        ``"none"`` (plain DDP), ``"zero1"``, ``"zero2"`` (alias ``"shard_grad_op"``),
        ``"zero3"`` (aliases ``"full_shard"``, ``"fsdp"``) or ``"hybrid_shard"``
        (``"hsdp"``); case-insensitive [-].
    param_dtype : str or None
        Dtype of the parameters as all-gathered; None: the profile's gradient dtype [-].
    reduce_dtype : str or None
        Dtype of the gradients as reduce-scattered (FSDP ``MixedPrecision.reduce_dtype``;
        ``"fp32"`` for a bf16 model reduced in fp32); None: ``param_dtype`` [-].
    shard_group : int or None
        ``zero1`` / ``zero2`` / ``zero3`` only: shard the state over groups of this many
        consecutive GPUs, replicated across the ``n / shard_group`` groups, whose
        reduce-scattered gradient shards are then all-reduced across the groups
        (InternLM's ``zero1=8``, MiCS, HSDP with any group; equation
        :eq:`shard-group`); it must divide ``n``. None: one group of all ``n`` GPUs
        [GPUs].
    param_return : str
        ``zero1`` / ``zero2`` only: how the updated parameters come back after the
        optimizer step. ``"allgather"`` (default): one all-gather per gradient bucket
        (DeepSpeed ZeRO stages 1 and 2). ``"broadcast"``: one ring broadcast per rank of
        the shard group that owns parameters, each of its own parameters (PyTorch's
        ``ZeroRedundancyOptimizer._broadcast_params_from_rank``, one per rank with
        ``parameters_as_bucket_view=True``; InternLM's hybrid ZeRO
        ``broadcast_params``), equation :eq:`broadcast` [-].
    broadcasts : int or None
        With ``param_return="broadcast"``: broadcasts per step, of equal size; None:
        one per rank of the shard group (``ZeroRedundancyOptimizer`` with
        ``parameters_as_bucket_view=True``; without it, one per parameter tensor: give
        the number of tensors). For InternLM, the ranks that own parameters:
        :func:`~scalemodel.sharding.broadcast_owners` [broadcasts].
    broadcast_chunk : float or None
        With ``param_return="broadcast"``: the bytes the ring moves per pipeline step
        across all its channels, whose passage over every hop is the broadcast's fill.
        None: NCCL's Simple step, :data:`~scalemodel.sharding.NCCL_SIMPLE_STEP_BYTES`, on each of
        :func:`~scalemodel.sharding.nccl_ring_channels` channels [bytes].

    Raises
    ------
    UnknownNameError
        An unknown strategy or dtype; suggests the closest.
    InvalidParameterError
        ``shard_group`` below 2 or with a strategy other than ``zero1`` / ``zero2`` /
        ``zero3``; ``param_return="broadcast"`` with a strategy other than ``zero1`` /
        ``zero2``; ``broadcasts`` below 1; ``broadcast_chunk`` not a positive number.
    ParameterTypeError
        ``shard_group`` or ``broadcasts`` not an integer.
    """

    strategy: str = attrs.field(default="zero3", converter=_strategy)
    param_dtype: str | None = attrs.field(default=None, converter=_opt_dtype("param_dtype"))
    reduce_dtype: str | None = attrs.field(default=None,
                                           converter=_opt_dtype("reduce_dtype"))
    shard_group: int | None = attrs.field(default=None, converter=_group, kw_only=True)
    param_return: str = attrs.field(default="allgather", converter=_param_return,
                                    kw_only=True)
    broadcasts: int | None = attrs.field(default=None, converter=_broadcasts, kw_only=True)
    broadcast_chunk: float | None = attrs.field(default=None, converter=_chunk,
                                                kw_only=True)

    def __attrs_post_init__(self):
        if self.param_return == "broadcast" and self.strategy not in ("zero1", "zero2"):
            raise InvalidParameterError(
                "param_return", self.param_return,
                f"applies to zero1 and zero2, not to sharding={self.strategy!r} (which "
                "gathers the parameters of each unit before it runs)",
                "Use param_return='allgather'")
        if self.shard_group is not None and self.strategy not in ("zero1", "zero2",
                                                                   "zero3"):
            raise InvalidParameterError(
                "shard_group", self.shard_group,
                f"applies to zero1, zero2 and zero3, not to sharding={self.strategy!r}"
                + (" (hybrid_shard's group is one node)"
                   if self.strategy == "hybrid_shard" else ""),
                "Use sharding='zero3', shard_group=g for HSDP / MiCS with any group")

    def spec(self) -> str:
        """This sharding as text that :func:`resolve_sharding` reads back: the strategy
        alone when every other field has its default, else
        ``"zero1(param_return=broadcast, broadcasts=16)"`` (how a fitted cluster records it
        in ``fit_settings``) [-]."""
        parts = []
        for a in attrs.fields(type(self))[1:]:
            value = getattr(self, a.name)
            if value != a.default:
                parts.append(f"{a.name}={value:g}" if isinstance(value, float)
                             else f"{a.name}={value}")
        return self.strategy + (f"({', '.join(parts)})" if parts else "")

    @property
    def sharded(self) -> bool:
        """True unless the strategy is ``"none"``."""
        return self.strategy != "none"

    @property
    def full_shard(self) -> bool:
        """True for ``"zero3"`` and ``"hybrid_shard"`` (parameters gathered per unit)."""
        return self.strategy in ("zero3", "hybrid_shard")

    def element_bytes(self, profile) -> tuple:
        """Bytes per element of the profile's gradients, of the all-gathered parameters
        and of the reduce-scattered gradients [bytes]."""
        elem = _profile_element_bytes(profile)
        p = DTYPE_BYTES[self.param_dtype] if self.param_dtype else elem
        r = DTYPE_BYTES[self.reduce_dtype] if self.reduce_dtype else p
        return elem, p, r


def resolve_sharding(sharding) -> Sharding:
    """A :class:`Sharding` from a strategy name or a :class:`Sharding` [-].

    Parameters
    ----------
    sharding : str or Sharding
        A strategy name (see :class:`Sharding`) or a :class:`Sharding` [-].

    Raises
    ------
    UnknownNameError
        Unknown strategy; suggests the closest.
    ParameterTypeError
        Neither a string nor a :class:`Sharding`.
    """
    if isinstance(sharding, Sharding):
        return sharding
    if sharding is None:
        return Sharding("none")
    if not isinstance(sharding, str):
        raise ParameterTypeError("sharding", sharding,
                                 "a strategy name such as 'zero3' or a Sharding")
    if "(" in sharding:
        return _from_spec(sharding)
    return Sharding(sharding)


_SPEC = re.compile(r"\s*([A-Za-z0-9_-]+)\s*\((.*)\)\s*")
_SPEC_FIELDS = {"param_dtype": str, "reduce_dtype": str, "shard_group": int,
                "param_return": str, "broadcasts": int, "broadcast_chunk": float}


def _from_spec(text):
    """A :class:`Sharding` from :meth:`Sharding.spec`'s text (a cluster file's
    ``fit_settings``: untrusted, read strictly)."""
    m = _SPEC.fullmatch(text) if len(text) <= 400 else None
    if m is None:
        raise InvalidParameterError("sharding", text[:80], "is not a strategy name or "
                                    "'strategy(key=value, ...)'")
    kwargs = {}
    for item in filter(None, (x.strip() for x in m.group(2).split(","))):
        key, sep, value = (x.strip() for x in item.partition("="))
        if not sep or key not in _SPEC_FIELDS or key in kwargs:
            raise InvalidParameterError(
                "sharding", text[:80], f"{item!r} is not one of key=value with the keys "
                f"{', '.join(_SPEC_FIELDS)} (each once)")
        kind = _SPEC_FIELDS[key]
        try:
            if value == "None" or kind is str:
                kwargs[key] = None if value == "None" else value
            elif len(value) > 40:
                raise ValueError(value)
            else:
                kwargs[key] = kind(value)
        except ValueError:
            raise InvalidParameterError("sharding", text[:80],
                                        f"{key}={value[:40]!r} is not a number") from None
    return Sharding(m.group(1), **kwargs)


def _profile_element_bytes(profile) -> int:
    try:
        d = canonical_dtype(str(profile.precision))
    except ScalemodelError:  # a label such as "mixed": fp32 gradients
        return 4
    return DTYPE_BYTES["fp32" if d == "tf32" else d]


# --------------------------------------------------------------------------- wrapping

def _finite_number(v) -> bool:
    """Whether a number is finite as a float (an integer beyond a float's range is not)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


@attrs.frozen
class SizeWrap:
    """Size-based wrapping, as FSDP's ``size_based_auto_wrap_policy``: consecutive tensors
    (in forward order) form a unit once they hold at least ``min_params`` parameters; the
    rest forms the last unit.

    Parameters
    ----------
    min_params : float
        Parameters per unit, at least; FSDP's default is 1e8 [-].
    """

    min_params: float = attrs.field(default=1e8)

    def __attrs_post_init__(self):
        v = self.min_params
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not _finite_number(v) or v < 1:
            raise InvalidParameterError("min_params", v, "must be a finite number >= 1 "
                                        "of parameters per unit")
        object.__setattr__(self, "min_params", float(v))


_BLOCK_KEY = re.compile(r"^(.*?(?:^|\.)\d+)\.")


@functools.lru_cache(maxsize=128)
def _block_keys(names):
    """The block of each tensor name (``"layers.3"``), or None outside numbered blocks
    (cached: profiles keep their names tuple)."""
    out = []
    for name in names:
        m = _BLOCK_KEY.match(name)
        out.append(m.group(1) if m else None)
    return tuple(out)


def _module_keys(names):
    """The module of each tensor name: the name before its last dot (``"layers.3.attn.q"``
    for ``"layers.3.attn.q.weight"``)."""
    return tuple(name.rsplit(".", 1)[0] for name in names)


def _runs(keys):
    """Start indices of the maximal runs of equal keys."""
    starts = [0]
    for i in range(1, len(keys)):
        if keys[i] != keys[i - 1]:
            starts.append(i)
    return starts


def resolve_wrap(fusion, strategy, profile):
    """The wrapping policy (``"block"``, ``"module"``, ``"none"`` or a :class:`SizeWrap`)
    or, for
    ``zero1`` / ``zero2``, a bucket fusion of :mod:`scalemodel.fusion`, for ``fusion``
    under ``strategy`` [-].

    Parameters
    ----------
    fusion : str, SizeWrap, fusion policy or None
        None: ``"block"`` when the profile's tensor names have numbered blocks, else
        ``"none"`` [-].
    strategy : str
        Canonical strategy name [-].
    profile : WorkloadProfile
        The workload [-].

    Raises
    ------
    InvalidParameterError
        A fusion that is not a wrapping policy under ``zero3`` / ``hybrid_shard`` (DDP
        buckets, Horovod's fusion, MG-WFBP), ``"block"`` on a profile without numbered
        blocks, or ``"module"`` on a profile without tensor names.
    """
    from .fusion import FUSIONS, MGWFBP, PLANNED_MGWFBP, resolve_fusion

    names = profile.tensor_names
    if fusion is None:
        if names is not None and any(k is not None for k in _block_keys(tuple(names))):
            return "block"
        return "none"
    if isinstance(fusion, SizeWrap):
        return fusion
    if isinstance(fusion, str):
        key = fusion.strip().lower().replace("_", "-")
        key = _WRAP_ALIASES.get(key, key)
        if key == "block":
            if names is None or not any(k is not None for k in _block_keys(tuple(names))):
                raise InvalidParameterError(
                    "fusion", fusion, f"the profile {profile.name!r} has no numbered "
                    "blocks in its tensor names (layers.<i>., h.<i>., ...) to wrap",
                    "Pass fusion='none' (one unit per tensor) or SizeWrap(min_params)")
            return "block"
        if key == "module":
            if names is None:
                raise InvalidParameterError(
                    "fusion", fusion, f"the profile {profile.name!r} has no tensor names "
                    "to find its modules in",
                    "Pass fusion='none' (one unit per tensor) or SizeWrap(min_params)")
            return "module"
        if key == "none":
            return "none"
    if strategy in ("zero1", "zero2"):
        policy = resolve_fusion(fusion)
        if policy is PLANNED_MGWFBP or isinstance(policy, MGWFBP):
            raise InvalidParameterError(
                "fusion", fusion, f"MG-WFBP plans all-reduce buckets; it is not modelled "
                f"under sharding={strategy!r}", "Use 'block', 'ddp', 'horovod' or 'none'")
        return policy
    known = tuple(WRAP_POLICIES) + ("SizeWrap(min_params)",)
    if isinstance(fusion, str) and fusion.strip().lower().replace("_", "-") not in FUSIONS:
        raise UnknownNameError("fusion", fusion, WRAP_POLICIES, aliases=_WRAP_ALIASES,
                               extra="or SizeWrap(min_params)")
    raise InvalidParameterError(
        "fusion", fusion, f"is not a wrapping policy: under sharding={strategy!r} fusion= "
        "says how parameters are wrapped into units that are all-gathered and "
        "reduce-scattered one at a time",
        f"Use one of {', '.join(known)}")


# --------------------------------------------------------------------------- units

@attrs.frozen(eq=False)
class ShardUnits:
    """The units of wrapping of a profile, in forward order.

    Attributes
    ----------
    names : tuple of str
        A label per unit (its block, or its first tensor).
    members : tuple of numpy.ndarray
        Indices of each unit's tensors in the profile's (backward-order) arrays.
    params : numpy.ndarray
        Parameters per unit [-].
    forward : numpy.ndarray
        Forward compute per unit, no slowdown [s].
    backward : numpy.ndarray
        Backward compute per unit, no slowdown [s].
    ready : numpy.ndarray
        Time from the start of backward at which the unit's last gradient is ready, no
        slowdown [s].
    """

    names: tuple
    members: tuple
    params: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    ready: np.ndarray

    def __len__(self):
        return len(self.names)


_UNITS_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def shard_units(profile, wrap="block") -> ShardUnits:
    """Split a profile's tensors into units of wrapping.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload; its tensors are in backward order [-].
    wrap : str or SizeWrap
        ``"block"``, ``"module"``, ``"none"`` or a :class:`SizeWrap` [-].

    Returns
    -------
    ShardUnits
        Units in forward order. A unit's backward time is the span of the profile's ready
        times its tensors cover (the last unit also takes the backward time after the last
        gradient); its forward time is the profile's forward time in the same proportion.

    Raises
    ------
    InvalidParameterError
        A :class:`SizeWrap` asking for units larger than the model.
    """
    key = wrap if isinstance(wrap, str) else ("size", wrap.min_params)
    per = _UNITS_CACHE.setdefault(profile, {})
    if key in per:
        return per[key]
    sizes = np.asarray(profile.tensor_bytes, float)
    count = sizes / _profile_element_bytes(profile)
    k = len(sizes)
    names = profile.tensor_names
    if wrap == "none":
        starts = np.arange(k)
    elif wrap == "block":
        starts = np.asarray(_runs(_block_keys(tuple(names))))
    elif wrap == "module":
        starts = np.asarray(_runs(_module_keys(names)))
    else:
        total = float(count.sum())
        if wrap.min_params > total:
            raise InvalidParameterError(
                "min_params", wrap.min_params, f"a wrapping unit larger than the model "
                f"({profile.name!r} has {total:.6g} parameters)",
                "Pass a smaller SizeWrap(min_params)")
        fwd_counts = count[::-1]
        ends, acc = [], 0.0
        for i, c in enumerate(fwd_counts.tolist()):
            acc += c
            if acc >= wrap.min_params:
                ends.append(i + 1)
                acc = 0.0
        if not ends or ends[-1] != k:
            ends.append(k)
        starts = np.sort(k - np.asarray(ends))  # forward-order ends -> backward starts
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.append(starts[1:], k)
    ready = np.asarray(profile.tensor_ready, float)
    done = ready[ends - 1]
    bwd = np.diff(np.concatenate(([0.0], done)))
    bwd[-1] += max(0.0, profile.backward_time - float(done[-1]))
    plain = bwd  # the forward splits by the backward times without recompute
    redo = profile.provenance.get("recompute") if isinstance(profile.provenance, dict) \
        else None
    if redo is not None and len(redo) == k:  # scalemodel.checkpointing.with_recompute
        plain = bwd - np.add.reduceat(np.asarray(redo, float), starts)
    plain = negligible_zeroed(plain, profile.forward_time + profile.backward_time
                              - (0.0 if redo is None or len(redo) != k else float(sum(redo))))
    tb = float(plain.sum())
    fwd = profile.forward_time * (plain / tb if tb > 0 else
                                  np.full(len(bwd), 1 / len(bwd)))
    params = np.add.reduceat(count, starts)
    if wrap == "block":
        keys = _block_keys(tuple(names))
        labels = [keys[s] or names[s] for s in starts.tolist()]
    elif wrap == "module":
        keys = _module_keys(names)
        labels = [keys[s] for s in starts.tolist()]
    elif names is not None:
        labels = [names[s] for s in starts.tolist()]
    else:
        labels = [f"tensor {s}" for s in starts.tolist()]
    members = tuple(np.arange(a, b) for a, b in zip(starts.tolist(), ends.tolist()))
    out = ShardUnits(names=tuple(labels[::-1]), members=members[::-1],
                     params=params[::-1].copy(), forward=fwd[::-1].copy(),
                     backward=bwd[::-1].copy(), ready=done[::-1].copy())
    per[key] = out
    return out


NEGLIGIBLE = 1e-12
"""A unit's backward time at most this fraction of the profile's compute (forward plus
backward, without recompute) counts as none when the forward time is split in
proportion to the backward times (:func:`shard_units`,
:func:`scalemodel.checkpointing.with_recompute`): below it a time is rounding (the
recompute taken off again), and a split by it would put the whole forward on one unit
[-]."""


def negligible_zeroed(times, scale):
    """``times`` with the values within :data:`NEGLIGIBLE` of ``scale`` set to 0 [s].

    Parameters
    ----------
    times : numpy.ndarray
        Per-unit times [s].
    scale : float
        The profile's compute time they are part of [s].
    """
    times = np.asarray(times, dtype=float)
    small = np.abs(times) <= NEGLIGIBLE * abs(float(scale))
    if not small.any():
        return times
    return np.where(small, 0.0, times)


def unit_buckets(profile, wrap, slowdown=1.0):
    """The reduce-scatters of a wrapping as buckets (backward order): each unit's gradient
    bytes (the profile's dtype), ready when its last gradient is, on the distributed
    timeline (times ``slowdown`` [-]).

    Parameters
    ----------
    profile : WorkloadProfile
        The workload [-].
    wrap : str or SizeWrap
        The wrapping policy [-].
    slowdown : float
        Compute slowdown applied to the ready times [-].

    Returns
    -------
    Buckets
    """
    from .fusion import Buckets

    units = shard_units(profile, wrap)
    elem = _profile_element_bytes(profile)
    return Buckets(nbytes=units.params[::-1] * elem, ready=slowdown * units.ready[::-1],
                   members=units.members[::-1])


# --------------------------------------------------------------------------- envelopes

# columns of a line's parts: compute, latency, overhead, fixed [s], wire bits [bit] and
# the number of network latencies alpha on it (carried along, not part of the line)
_C, _LAT, _OVH, _FIX, _BITS, _NALPHA = range(6)
_W = 6


def sum_of_maxima(base, a, b, *, breaks=False):
    r"""The pieces of :math:`\ell_0(x) + \sum_t \max(\ell^a_t(x), \ell^b_t(x))` on
    :math:`x \ge 0`, a convex piecewise-linear function.

    Each line is given by its parts (columns: compute, latency, overhead, fixed [s] and
    wire bits [bit], then any columns carried along); its intercept is the sum of the
    first four, its slope the bits.

    Parameters
    ----------
    base : array_like
        Parts of :math:`\ell_0`, shape (w,) with w >= 5 [s, s, s, s, bit, ...].
    a, b : array_like
        Parts of the two lines of each term, shape (T, w) [s, s, s, s, bit, ...].
    breaks : bool
        Also return the breakpoints [-].

    Returns
    -------
    numpy.ndarray
        Parts of the piece lines, shape (P + 1, w) with P <= T the number of breakpoints
        on :math:`x > 0`: piece 0 holds near :math:`x = 0`, each next piece past the next
        breakpoint. Their upper envelope is the function. With ``breaks=True``, also
        the P breakpoints in ascending order (the value of :math:`x` where each next piece
        takes over) [s/bit].

    Notes
    -----
    For each term let :math:`\ell^-` be the line of smaller slope and :math:`\ell^+` the
    other; :math:`\max(\ell^-, \ell^+)` is :math:`\ell^-` up to the breakpoint
    :math:`X_t = (c^- - c^+)/(m^+ - m^-)` and :math:`\ell^+` after it. With the
    breakpoints sorted, piece :math:`p` is :math:`\ell_0 + \sum_t \ell^-_t +
    \sum_{q \le p} (\ell^+_{(q)} - \ell^-_{(q)})`.
    """
    base = np.asarray(base, float)
    w = base.shape[-1]
    a = np.asarray(a, float).reshape(-1, w)
    b = np.asarray(b, float).reshape(-1, w)
    return _maxima(base, a, b, _intercepts(a), _intercepts(b), breaks)


def _intercepts(parts):
    """Each row's intercept, the sum of its first four parts [s]: ``parts[:, :4].sum(
    axis=1)`` bit for bit, in the order numpy's row sum of four adds them (from 0.0,
    left to right; tests/test_speed_shortcuts_s13.py holds the two equal), without its
    per-row reduction cost (a third of the time on a chain's hundreds of rows)."""
    return (((0.0 + parts[:, 0]) + parts[:, 1]) + parts[:, 2]) + parts[:, 3]


def _maxima(base, a, b, ca, cb, breaks=False, a_sum=None):
    """:func:`sum_of_maxima` of the checked arrays ``base``, ``a``, ``b`` and the
    intercepts ``ca``, ``cb`` of ``a`` and ``b`` (``x[:, :4].sum(axis=1)``, or the same
    values made already); ``a_sum``: ``a.sum(axis=0)`` when made already [-]."""
    w = base.shape[-1]
    ma, mb = a[:, _BITS], b[:, _BITS]
    swap = (ma > mb) | ((ma == mb) & (ca < cb))
    if swap.any() or not (a.flags.c_contiguous and b.flags.c_contiguous):
        lo = np.where(swap[:, None], b, a)
        step = np.where(swap[:, None], a, b) - lo  # l+ - l-, as parts
        gap = np.where(swap, cb - ca, ca - cb)  # c- - c+
        lo_sum = lo.sum(axis=0)
    else:  # no term swaps (ZeRO-3's compute against its collectives): the same values
        step, gap = b - a, ca - cb
        lo_sum = a.sum(axis=0) if a_sum is None else a_sum
    dm = step[:, _BITS]  # m+ - m- >= 0
    grows = dm > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = gap / (dm if grows.all() else np.where(grows, dm, 1.0))  # (c- - c+)/..
    # l+ is on top for every x >= 0 (X_t <= 0); l- when l+ never overtakes it (equal
    # slopes, or a breakpoint beyond the floats); otherwise the term changes at X_t
    live = grows & (cross > 0) & (cross < np.inf)
    # (rows gathered with take: the same rows in the same order as indexing, faster)
    first = base + lo_sum + step.take((grows & (cross <= 0)).nonzero()[0], axis=0).sum(axis=0)
    at = live.nonzero()[0]  # (live is 1-d: flatnonzero's answer)
    order = at[cross[at].argsort(kind="stable")]
    pieces = np.empty((len(order) + 1, w))
    pieces[0] = first
    step.take(order, axis=0).cumsum(axis=0, out=pieces[1:])
    pieces[1:] += first
    return (pieces, cross[order]) if breaks else pieces


# --------------------------------------------------------------------------- schedule

@attrs.frozen(eq=False)
class ShardedSchedule:
    """One sharded iteration on ``n`` GPUs in closed form (equations :eq:`zero3`,
    :eq:`zero12`).

    Attributes
    ----------
    strategy : str
        Canonical strategy name.
    n : int
        GPUs [-].
    group : int
        GPUs a shard is split over: ``n``, or a node's GPUs under ``hybrid_shard`` [-].
    units : int
        Units (``zero3``, ``hybrid_shard``) or gradient buckets (``zero1``, ``zero2``) [-].
    lines : OverlapLines
        Lines whose upper envelope is :math:`T_n - \\sigma T_f - T_u` in the time per wire
        bit :math:`x_\\text{eff}`; line 0 is the compute alone (slope 0), a lower bound
        that communication only lengthens.
    envelope : UpperEnvelope
        Their upper envelope.
    xmap : tuple
        ``(k1, k2)``: :math:`x_\\text{eff} = \\max(k_1 x, k_2 / r)` [-], [s/bit].
    update : float
        Optimizer step on the local shard, :math:`T_u / s` [s].
    op_constant : numpy.ndarray
        Each collective's time besides its wire bits (latency, overhead, fixed costs,
        constant intra-node time) [s].
    op_bits : numpy.ndarray
        Each collective's wire bits (the slope in :math:`x_\\text{eff}`) [bit].
    op_count : numpy.ndarray
        How many times each collective runs per iteration (optimizer step): the
        profile's ``grad_accum`` for those of every micro-batch, else 1 [-].
    param_bytes : float
        Parameter bytes all-gathered per iteration, summed over the all-gathers [bytes].
    grad_bytes : float
        Gradient bytes reduce-scattered per iteration [bytes].
    nic_bits : float
        Bits each NIC (each GPU's link without a topology) carries per iteration,
        uncompressed [bit].
    intra_bits : float
        Bits each GPU's intra-node link carries per iteration, uncompressed [bit].
    alpha_count : numpy.ndarray or None
        Network latencies on each line, when asked for (``alpha_counts=True``) [-].
    gradient_rounds : int
        Micro-batches whose gradients are reduce-scattered per iteration: the profile's
        ``grad_accum`` under ``zero2``, ``zero3`` and ``hybrid_shard``, 1 under ``zero1``
        [-].
    """

    strategy: str
    n: int
    group: int
    units: int
    lines: OverlapLines
    envelope: UpperEnvelope
    xmap: tuple
    update: float
    op_constant: np.ndarray
    op_bits: np.ndarray
    op_count: np.ndarray
    param_bytes: float
    grad_bytes: float
    nic_bits: float
    intra_bits: float
    alpha_count: np.ndarray | None = None
    gradient_rounds: int = 1

    @property
    def n_collectives(self) -> int:
        """Collectives per iteration (a hybrid reduce-scatter and its all-reduce are
        one op of the channel, counted once) [-]."""
        return int(self.op_count.sum())

    @property
    def wire_bits(self) -> float:
        """Wire bits of all the iteration's collectives (the envelope's slope when the
        channel is never idle) [bit]."""
        return float(self.op_count @ self.op_bits)

    def channel_time(self, x_eff):
        """Time the communication channel is busy per iteration at ``x_eff`` [s/bit]
        [s]."""
        return float(self.op_count @ (self.op_constant + self.op_bits * float(x_eff)))


class _Ops:
    """Collective costs of one kind for a vector of buffers, as parts rows."""

    def __init__(self, cost, fixed, codec, nalpha=0.0):
        self.lat = cost.latency  # latency, fixed cost and latency count: a scalar or one
        self.nalpha = nalpha  # value per op
        self.ovh = np.asarray(cost.overhead, float) + codec
        self.bits = np.asarray(cost.bits, float)
        self.intra = np.asarray(cost.intra_bits, float)
        self.intra_bw = float(cost.intra_bw)
        self.fix = fixed

    def parts(self, mode, intra_bw):
        """(k, 6) parts with the wire ``mode``: ``"nic"`` (NIC bits are the slope; an
        op with intra-node bits only costs them as a constant), ``"intra"`` (the
        intra-node bits are the slope) or ``"flat"``."""
        p = np.zeros((len(self.bits), _W))
        p[:, _LAT], p[:, _FIX] = self.lat, self.fix
        p[:, _NALPHA] = self.nalpha
        p[:, _OVH] = self.ovh
        if mode == "intra":
            p[:, _BITS] = self.intra
        else:
            p[:, _BITS] = self.bits
            if mode == "nic":
                alone = (self.bits == 0) & (self.intra > 0)
                if alone.any():
                    p[:, _OVH] += np.where(alone, self.intra / intra_bw, 0.0)
        return p


_ONE_BYTE = np.ones(1)


@functools.lru_cache(maxsize=256)
def _ring_half_per_byte(n, options):
    """NIC bits and intra-node bits per byte of one ring phase (reduce-scatter or
    all-gather) on ``n`` ranks, its latency [s] and the intra-node rate [bits/s]."""
    one = _ring_half_cost(_ONE_BYTE, n, NO_REDUCTION_COST, options, False)
    return (float(one.bits[0]), float(one.intra_bits[0]), float(one.latency[0]),
            float(one.intra_bw))


@functools.lru_cache(maxsize=256)
def _ring_per_byte(n, options):
    """NIC bits per byte of a ring all-reduce on ``n`` ranks without its reductions (see
    :func:`_ring_half_per_byte`), its latency [s] and the intra-node rate [bits/s]."""
    one = ALGORITHMS["ring"](_ONE_BYTE, n, NO_REDUCTION_COST, options)
    return (float(one.bits[0]), float(one.intra_bits[0]), float(one.latency[0]),
            float(one.intra_bw))


def _broadcast_ops(nbytes, s, opt, chunk, fixed, codec):
    """Ring broadcasts of ``nbytes`` each over a shard group of ``s`` GPUs, equation
    :eq:`broadcast`, as parts rows (see :class:`_Ops`), and the bits each NIC and each
    intra-node link carries per broadcast [bit]."""
    size = np.asarray(nbytes, float)
    k = np.maximum(np.ceil(size / chunk), 1.0)  # pipeline steps of equal chunks
    c8 = 8.0 * size / k  # bits of one chunk
    gpn = opt.gpus_per_node
    m = s if gpn is None else -(-s // gpn)  # nodes the chain passes
    hops, inter = s - 1, m - 1
    ops = _Ops.__new__(_Ops)
    ops.intra_bw, ops.fix = float(opt.intra_bw), fixed
    ops.ovh = codec * size
    zero = np.zeros_like(size)
    if gpn is None:  # every GPU its own link: every hop crosses
        ops.bits, ops.intra = (k - 1.0 + hops) * c8, zero
        ops.lat, ops.nalpha = hops * opt.alpha, float(hops)
        carried = (8.0 * size, zero)
    elif m > 1:  # the NIC hops bind; the intra-node hops' fill is a constant
        ops.bits = (k - 1.0 + inter) * c8 / opt.nics_per_node
        ops.intra = 8.0 * size
        ops.ovh = ops.ovh + (hops - inter) * c8 / ops.intra_bw
        ops.lat = (hops - inter) * opt.intra_alpha + inter * opt.alpha
        ops.nalpha = float(inter)
        carried = (8.0 * size / opt.nics_per_node, 8.0 * size)
    else:  # one node: the intra-node links are the wire
        ops.bits, ops.intra = zero, (k - 1.0 + hops) * c8
        ops.lat, ops.nalpha = hops * opt.intra_alpha, 0.0
        carried = (zero, 8.0 * size)
    return ops, carried


def nccl_ring_channels(nics_per_node=1) -> int:
    """NCCL's ring channels on nodes with ``nics_per_node`` NICs: its topology search
    finds one ring channel per NIC (each channel leaves the node through its own NIC),
    and ``ncclTopoPostset`` doubles them, ``nChannels = min(MAXCHANNELS, nChannels*2)``
    (NVIDIA/nccl ``src/graph/connect.cc``) [channels].

    Parameters
    ----------
    nics_per_node : int
        Network interfaces per node [NICs].

    Examples
    --------
    >>> from scalemodel.sharding import nccl_ring_channels
    >>> nccl_ring_channels(4)
    8
    """
    if isinstance(nics_per_node, (bool, np.bool_)) or not isinstance(
            nics_per_node, (int, np.integer)) or nics_per_node < 1:
        raise InvalidParameterError("nics_per_node", nics_per_node,
                                    "must be an integer number of NICs >= 1")
    return min(2 * int(nics_per_node), 32)


def broadcast_owners(params, s, *, slack=0.01) -> int:
    """How many ranks of a shard group own parameters, hence broadcast them, under
    InternLM's allocation: walking the tensors in model order, a tensor goes to the
    current rank, and the next tensor to the next rank once the current one holds more
    than ``(1 + slack)`` times the average, ``total // s`` elements; the tensor that
    takes a rank past it already goes to the next rank, which counts from zero
    (``ParamBcastSyncHandler.__init__``, ``internlm/solver/optimizer/utils.py``,
    InternLM/InternLM; with ``overlap_sync_param=True`` the hybrid ZeRO optimizer's
    ``_partition_param_list`` takes each tensor's rank from it, and ``broadcast_params``
    broadcasts from every rank that owns one) [ranks].

    Parameters
    ----------
    params : array_like
        Elements of each parameter tensor, in the model's (forward) order [-].
    s : int
        Ranks in the shard group [GPUs].
    slack : float
        How far above the average a rank may fill before the next one starts [-].

    Raises
    ------
    InvalidParameterError
        ``s`` below 1, ``slack`` negative or ``params`` empty or negative.

    Examples
    --------
    >>> from scalemodel.sharding import broadcast_owners
    >>> broadcast_owners([4, 4, 4, 4], 2)
    2
    >>> broadcast_owners([100, 1, 1, 1], 4)  # the tensor that overflows rank 0 opens rank 1
    1
    """
    sizes = np.asarray(params, float).ravel()
    if sizes.size == 0 or (sizes < 0).any() or not np.isfinite(sizes).all():
        raise InvalidParameterError("params", params, "must be a non-empty list of "
                                    "element counts >= 0")
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or s < 1:
        raise InvalidParameterError("s", s, "must be an integer number of ranks >= 1")
    if not math.isfinite(slack) or slack < 0:
        raise InvalidParameterError("slack", slack, "must be a finite number >= 0")
    avg = float(sizes.sum() // s)
    alloc, rank, owners = 0.0, 0, set()
    for e in sizes:
        alloc += e
        if alloc > avg * (1.0 + slack) and rank < s - 1:
            rank, alloc = rank + 1, 0.0
        owners.add(rank)
    return len(owners)


def _linear_wire_mode(kb, ki, intra_bw, network_ops):
    """The wire of a schedule and its x_eff map (see ``Scenario.x_effective``), for
    collectives whose NIC and intra-node bits are ``kb`` and
    ``ki`` per byte [bit/byte], and, with ``network_ops``, all-reduces with NIC bits only
    (hybrid_shard across nodes)."""
    if kb > 0.0:
        return "nic", (1.0, (ki / kb) / intra_bw if ki > 0.0 else 0.0)
    if network_ops:  # the NIC carries only the all-reduces: intra-node bits are constants
        return "nic", (1.0, 0.0)
    if ki > 0.0:
        return "intra", (0.0, 1.0 / intra_bw)
    return "flat", (1.0, 0.0)


def _check_n(n, strategy):
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise ParameterTypeError("n", n, "a single integer number of GPUs")
    n = int(n)
    if n < 2:
        raise InvalidParameterError("n", n, f"sharding={strategy!r} needs at least 2 GPUs "
                                    "to shard over", "Use sharding='none' for one GPU")
    return n


def _hybrid_group(n, options):
    g = options.gpus_per_node or HIERARCHICAL_GPUS_PER_NODE
    if n > g and n % g:
        raise InvalidParameterError(
            "n", n, f"hybrid_shard needs n to be a multiple of gpus_per_node={g} "
            "(a full shard group per node)")
    return min(n, g), (n // g if n > g else 1), g


def _divisors(n):
    return [d for d in range(2, n + 1) if n % d == 0]


@attrs.frozen
class _Layout:
    """Where a schedule's collectives run: ``s`` GPUs per shard group, ``m`` groups; the
    shard ring's options; the all-reduce across groups on ``m`` ranks with ``ar_opt``,
    its NIC bits multiplied by ``conc`` (the rings that share a node's NICs);
    ``ring_only``: the all-reduce's ranks share nodes, so only a ring is modelled."""

    s: int
    m: int
    ring_opt: object
    ar_opt: object = None
    conc: float = 1.0
    ring_only: bool = False


def _group_layout(n, sharding, options) -> _Layout:
    """The shard group and the all-reduce across groups, equation :eq:`shard-group`."""
    if sharding.strategy == "hybrid_shard":
        s, m, g = _hybrid_group(n, options)
        return _Layout(s, m, options.evolve(gpus_per_node=g),
                       options.evolve(gpus_per_node=None, nics_per_node=1),
                       g / options.nics_per_node)
    sg = sharding.shard_group
    if sg is None or sg == n:
        return _Layout(n, 1, options)
    if n % sg:
        raise InvalidParameterError(
            "shard_group", sg, f"must divide n={n}: valid shard groups are "
            f"{_divisors(n)}")
    gpn = options.gpus_per_node
    m = n // sg
    if gpn is None:  # every GPU its own node and NIC: flat rings
        return _Layout(sg, m, options, options, 1.0)
    if (sg < gpn and gpn % sg) or (sg > gpn and sg % gpn):
        raise InvalidParameterError(
            "shard_group", sg, f"with gpus_per_node={gpn} a shard group must divide a "
            f"node or span whole nodes: valid are {[d for d in _divisors(n) if (d <= gpn and gpn % d == 0) or (d > gpn and d % gpn == 0)]}")
    if n <= gpn:  # one node: every collective on the intra-node links
        return _Layout(sg, m, options, options, 1.0, ring_only=True)
    if n % gpn:
        raise InvalidParameterError(
            "n", n, f"shard_group={sg} with gpus_per_node={gpn} needs whole nodes: n a "
            f"multiple of {gpn}")
    if sg >= gpn:  # one rank of each all-reduce per node; a node's GPUs run one each
        return _Layout(sg, m, options, options.evolve(gpus_per_node=None, nics_per_node=1),
                       gpn / options.nics_per_node)
    # gpn / sg ranks of each all-reduce share a node; the node's sg all-reduces its NICs
    return _Layout(sg, m, options, options.evolve(gpus_per_node=gpn // sg), float(sg),
                   ring_only=True)


def _group_wire_mode(kb, ki, akb, aki, intra_bw):
    """The wire map with all-reduces across groups: shard-ring bits ``kb`` (NIC) and
    ``ki`` (intra-node) per byte, the all-reduce's ``akb``, ``aki`` [bit/byte]. A shard
    ring that crosses nodes sets the map (the all-reduce is then charged at the same
    pace: exact while the NICs bind); else the all-reduce does, and the shard ring's
    intra-node bits are constants."""
    if kb > 0.0:
        return "nic", (1.0, (ki / kb) / intra_bw if ki > 0.0 else 0.0)
    if akb > 0.0:
        return "nic", (1.0, (aki / akb) / intra_bw if aki > 0.0 else 0.0)
    if ki > 0.0 or aki > 0.0:
        return "intra", (0.0, 1.0 / intra_bw)
    return "flat", (1.0, 0.0)


@attrs.frozen(eq=False)
class _Channel:
    """What every collective of one schedule shares: the ``layout``; ``name``, the
    canonical algorithm of the all-reduce across groups (None with one group) and
    ``algorithm`` as asked; the profile's ``reduction`` cost; ``c0`` [s], the fixed cost
    of every collective; ``codec`` [s/byte] per uncompressed byte; ``scale`` [-], the
    factor on the gradient collectives' wire bits; ``gradient_overhead`` [s] on each
    gradient collective (or None); ``alpha_counts``, whether latencies are counted."""

    layout: _Layout
    name: object
    algorithm: object
    reduction: object
    c0: float
    codec: float
    scale: np.ndarray
    gradient_overhead: object
    alpha_counts: bool


def _group_algorithm(algorithm, strategy, lay):
    """The canonical name of the all-reduce across the shard groups, None with one group;
    an algorithm not modelled there raises :class:`InvalidParameterError` [-]."""
    m = lay.m
    if m == 1:
        return None
    name = resolve_algorithm(algorithm)
    if name == "hierarchical" or (lay.ring_only and name != "ring"):
        raise InvalidParameterError(
            "algorithm", algorithm, f"sharding={strategy!r} with {m} shard groups "
            "all-reduces each shard across the groups"
            + (" with ranks that share a node: only a ring is modelled there"
               if lay.ring_only else ", one GPU per node in each all-reduce: a "
               "two-level all-reduce makes no sense there"),
            "Use 'ring'" if lay.ring_only else "Use 'ring', 'tree' or 'nccl'")
    return name


def _alpha_count(ch, kind, nbytes, ranks, opts, algorithm="ring"):
    """Network latencies per collective: its latency with alpha 1, intra_alpha 0; 0 when
    the schedule does not count them [-]."""
    if not ch.alpha_counts:
        return 0.0
    unit = opts.evolve(alpha=1.0, intra_alpha=0.0)
    return collective_cost(algorithm, nbytes, ranks, options=unit, kind=kind).latency


def _shard_ring_ops(ch, gathered, scattered):
    """The shard ring's all-gathers of ``gathered`` bytes, then its reduce-scatters of
    ``scattered`` bytes (with their reductions and the gradient compressor), as
    :class:`_Ops`; and the ring's NIC and intra-node bits per byte [bit/byte]."""
    k = len(gathered)
    s, intra_opt = ch.layout.s, ch.layout.ring_opt
    sizes = np.concatenate((gathered, scattered))
    # a ring phase's wire bits are linear in the size and its latency is constant:
    # its cost per byte, once per ring and topology
    ops = _Ops.__new__(_Ops)
    kb, ki, ops.lat, ops.intra_bw = _ring_half_per_byte(s, intra_opt)
    ops.bits, ops.intra = kb * sizes, ki * sizes
    ops.ovh = ch.codec * sizes
    ops.fix, ops.nalpha = ch.c0, _alpha_count(ch, "all_gather", sizes, s, intra_opt)
    rows = slice(k, None)  # the reduce-scatters: their reduction and compressor
    ops.ovh[rows] += ch.reduction.steps(scattered / s, s - 1)
    if ch.gradient_overhead is not None:
        ops.ovh[rows] += np.asarray(ch.gradient_overhead, float)
    scale = ch.scale
    if scale.ndim or float(scale) != 1.0:
        ops.bits[rows] *= scale
        ops.intra[rows] *= scale
    return ops, kb, ki


def _group_allreduce_ops(ch, scattered):
    """The all-reduce of each reduce-scattered shard across the shard groups, equation
    :eq:`shard-group`, as :class:`_Ops` (NIC bits times the rings that share a node's
    NICs, wire bits times the gradient scale); and its NIC and intra-node bits per byte,
    of which only the ratio and sign matter [bit/byte]."""
    lay = ch.layout
    m, flat, shard = lay.m, lay.ar_opt, scattered / lay.s
    ar_kb, ar_ki = 1.0, 0.0  # per byte: only their ratio and sign matter
    if ch.name == "ring":  # linear in the size but for its reductions: per byte
        ar = _Ops.__new__(_Ops)
        ar_kb, ar_ki, ar.lat, ar.intra_bw = _ring_per_byte(m, flat)
        ar.bits, ar.intra = ar_kb * shard, ar_ki * shard
        ar.ovh = ch.reduction.steps(shard / m, m - 1)
        ar.fix, ar.nalpha = ch.c0, _alpha_count(ch, "all_reduce", shard, m, flat,
                                                ch.algorithm)
    else:
        ar = _Ops(ALGORITHMS[ch.name](shard, m, ch.reduction, flat), ch.c0, 0.0,
                  _alpha_count(ch, "all_reduce", shard, m, flat, ch.algorithm))
    ar.bits = ar.bits * lay.conc * ch.scale
    ar.intra = ar.intra * ch.scale
    return ar, ar_kb, ar_ki


def _ring_ops(ch, gathered, scattered):
    """All the iteration's collectives as parts rows: the all-gathers of ``gathered``
    bytes, then the reduce-scatters of ``scattered`` (and, across shard groups, the
    all-reduce of each shard: one op of the channel with its reduce-scatter). Returns the
    parts [s, s, s, s, bit, -], the NIC and intra-node bits of each row [bit], the wire
    map and the row where the reduce-scatters start [-]."""
    k = len(gathered)
    ops, kb, ki = _shard_ring_ops(ch, gathered, scattered)
    ibw = ops.intra_bw
    if ch.layout.m == 1:  # one linear family of ops
        mode, xmap = _linear_wire_mode(kb, ki, ibw, False)
        return ops.parts(mode, ibw), ops.bits, ops.intra, xmap, k
    ar, ar_kb, ar_ki = _group_allreduce_ops(ch, scattered)
    rows = slice(k, None)
    mode, xmap = _group_wire_mode(kb, ki, ar_kb * ch.layout.conc, ar_ki, ibw)
    rows_parts = ops.parts(mode, ibw)
    rows_parts[rows] += ar.parts(mode, ibw)
    bits, intra = ops.bits.copy(), ops.intra.copy()
    bits[rows] += ar.bits
    intra[rows] += ar.intra
    return rows_parts, bits, intra, xmap, k


@attrs.frozen(eq=False)
class _Pieces:
    """One iteration's envelope pieces before the compute floor (parts rows [s, s, s, s,
    bit, -]) and their ``breaks`` (the chain's breakpoints [s/bit] under ``zero3``, else
    None); the wire map ``xmap``; each collective's parts ``ops_parts`` and
    ``op_count`` per iteration [-]; the bytes all-gathered and reduce-scattered [bytes];
    the bits per NIC and per intra-node link [bit]; the ``units`` (or buckets) and the
    micro-batches whose gradients are reduce-scattered, ``rounds`` [-]; each
    collective's constant time and wire bits when made already, ``op_constant`` [s] and
    ``op_bits`` [bit] (else None: made from ``ops_parts``)."""

    pieces: np.ndarray
    breaks: object
    xmap: tuple
    ops_parts: np.ndarray
    op_count: np.ndarray
    param_bytes: float
    grad_bytes: float
    nic: float
    intra: float
    units: int
    rounds: int
    op_constant: object = None
    op_bits: object = None


def _zero3_comm(gp, ap, rp):
    """The communication of equation :eq:`zero3`'s chain: its base line without the
    compute and the second line of each of its terms (parts rows, from the all-gathers
    ``gp``, ``ap`` and reduce-scatters ``rp`` as :func:`_zero3_chain` takes them)."""
    K = len(gp)
    base = gp[0] + rp[-1]
    tb = np.empty((2 * K - 1, _W))
    tb[:K - 1] = gp[1:]
    tb[K - 1:2 * K - 2] = ap[1:]
    tb[K:2 * K - 2] += rp[:K - 2]  # r_{i-1}, with r_{-1} = 0
    tb[2 * K - 2] = rp[K - 2] if K > 1 else 0.0  # r_{K-2} alone on the last term
    return base, tb


def _zero3_chain(gp, ap, rp, fc, bc, comm=None, comm_lines=None):
    """Equation :eq:`zero3` as :func:`sum_of_maxima` of compute against communication,
    from the forward all-gathers ``gp`` (forward order), the backward ones ``ap`` and the
    reduce-scatters ``rp`` (backward order) as parts rows, the forward compute ``fc`` and
    backward compute with its hook ``bc`` [s]: the pieces and their breakpoints
    [s/bit]. ``comm``: :func:`_zero3_comm` of the same rows when made already (left
    unchanged), and ``comm_lines`` its intercepts and slopes (:class:`_FullShardComm`)."""
    base, tb = _zero3_comm(gp, ap, rp) if comm is None else (comm[0].copy(), comm[1])
    base[_C] += fc[-1]
    ta = np.zeros((len(tb), _W))
    ta[:, _C] = compute = np.concatenate((fc[:-1], bc))
    # the intercepts of sum_of_maxima: the compute's is its only part plus the zeros
    # after it (+ 0.0: what the row sum gives, a -0.0 included); the collectives' as
    # _full_shard_comm made them (comm_lines) when given. ta's column sums: numpy adds
    # the rows of a C-ordered array in order from 0.0, so the compute's is 0.0 + its
    # running sum's end, the others +0.0
    tb_c = _intercepts(tb) if comm_lines is None else comm_lines[2]
    ta_sum = np.zeros(_W)
    ta_sum[_C] = 0.0 + compute.cumsum()[-1]
    return _maxima(base, ta, tb, compute + 0.0, tb_c, breaks=True, a_sum=ta_sum)


_COMM: "OrderedDict" = OrderedDict()  # zero3 collectives shared by schedules (corners)
_COMM_SIZE = 64  # schedules' collectives kept [-]


@attrs.frozen(eq=False)
class _FullShardComm:
    """What a ``zero3`` / ``hybrid_shard`` schedule's collectives are, whatever its
    compute: the shard ``units`` and their parameter and gradient bytes ``P``, ``G``
    [bytes]; every collective's parts rows ``every`` (the sync overhead on the last),
    their NIC and intra-node ``bits``, ``ibits`` [bit] and the wire map ``xmap``; the
    chain's communication ``comm`` (:func:`_zero3_comm`); ``rest``, the fields of
    :class:`_Pieces` besides the pieces and breakpoints. Read, never changed."""

    units: object
    P: np.ndarray
    G: np.ndarray
    every: np.ndarray
    bits: np.ndarray
    ibits: np.ndarray
    xmap: tuple
    comm: tuple
    rest: dict
    comm_lines: tuple = None


def _full_shard_comm(profile, wrap, ch, pb, rb, sync_overhead) -> _FullShardComm:
    """:class:`_FullShardComm` of a schedule (arguments as :func:`_full_shard_pieces`)."""
    units = shard_units(profile, wrap)
    K = len(units)
    P = units.params * pb
    G = units.params * rb
    # forward all-gathers (forward order), backward ones and reduce-scatters
    # (backward order), in one call
    every, bits, ibits, xmap, _ = _ring_ops(ch, np.concatenate((P, P[::-1])), G[::-1])
    gp, ap, rp = every[:K], every[K:2 * K], every[2 * K:]
    rp[-1, _FIX] += float(sync_overhead)
    comm = _zero3_comm(gp, ap, rp)
    acc = profile.grad_accum  # micro-batches per optimizer step
    # backward all-gathers: all but the first, of the unit kept gathered (row K)
    ops_parts = np.concatenate((every[:K], every[K + 1:]))
    rest = dict(
        xmap=xmap, ops_parts=ops_parts, op_count=np.full(len(ops_parts), float(acc)),
        param_bytes=acc * float(2.0 * P.sum() - P[-1]), grad_bytes=acc * float(G.sum()),
        nic=acc * float(bits.sum() - bits[K]), intra=acc * float(ibits.sum() - ibits[K]),
        units=K, rounds=acc, op_constant=_intercepts(ops_parts),
        op_bits=ops_parts[:, _BITS].copy())
    base, tb = comm
    comm_lines = (float(base[:4].sum()), float(base[_BITS]), _intercepts(tb),
                  tb[:, _BITS].copy())
    return _FullShardComm(units=units, P=P, G=G, every=every, bits=bits, ibits=ibits,
                          xmap=xmap, comm=comm, rest=rest, comm_lines=comm_lines)


def _shared_full_shard_comm(key, profile, wrap, ch, pb, rb, sync_overhead):
    """:func:`_full_shard_comm`, one for the schedules of the same ``key`` (the numbers
    and settings that enter it, the profile and wrap compared by identity; None: not
    shared)."""
    if key is None:
        return _full_shard_comm(profile, wrap, ch, pb, rb, sync_overhead)
    hit = _COMM.get(key)
    if hit is not None and hit[0] is profile and hit[1] is wrap:
        _COMM.move_to_end(key)
        return hit[2]
    fc = _full_shard_comm(profile, wrap, ch, pb, rb, sync_overhead)
    _COMM[key] = (profile, wrap, fc)
    while len(_COMM) > _COMM_SIZE:
        _COMM.popitem(last=False)
    return fc


def _full_shard_pieces(profile, wrap, ch, pb, rb, sigma, cb, sync_overhead,
                       key=None) -> _Pieces:
    """``zero3`` / ``hybrid_shard``: every unit all-gathered before its forward and its
    backward, reduce-scattered after its backward, equation :eq:`zero3`, with ``pb`` and
    ``rb`` [bytes] per parameter and gradient element, the slowdown ``sigma`` [-], the
    per-unit hook ``cb`` [s] and the ``sync_overhead`` [s] after the last collective;
    the collectives shared by the schedules of the same ``key`` (see
    :func:`_shared_full_shard_comm`)."""
    acc = profile.grad_accum  # micro-batches per optimizer step
    sc = _shared_full_shard_comm(key, profile, wrap, ch, pb, rb, sync_overhead)
    units, every = sc.units, sc.every
    K = len(units)
    gp, ap, rp = every[:K], every[K:2 * K], every[2 * K:]
    fc = sigma * units.forward  # forward compute, forward order
    bc = sigma * units.backward[::-1] + cb  # backward compute and its hook
    pieces, chain_breaks = _zero3_chain(gp, ap, rp, fc, bc, sc.comm, sc.comm_lines)
    if acc > 1:  # every micro-batch gathers and reduce-scatters again
        pieces *= acc
    return _Pieces(pieces=pieces, breaks=chain_breaks, **sc.rest)


def _bucket_sizes(profile, wrap, buckets, elem, sigma):
    """``zero1`` / ``zero2``: the gradient buckets in backward order, their parameters
    [-] and ready times on the distributed timeline [s]."""
    if isinstance(wrap, (str, SizeWrap)):
        units = shard_units(profile, wrap)
        return units.params[::-1], sigma * units.ready[::-1]
    if buckets is None:
        raise ScalemodelError("zero1/zero2 with a bucket fusion need its buckets")
    return np.asarray(buckets.nbytes, float) / elem, np.asarray(buckets.ready, float)


def _broadcast_return(ch, sharding, P, G):
    """``param_return="broadcast"``, equation :eq:`broadcast`, once per step: the
    broadcasts of the ``P`` parameter bytes, then the reduce-scatters of the ``G``
    gradient bytes [bytes], as :func:`_ring_ops` returns them (parts, NIC and intra-node
    bits [bit], wire map, the number of broadcasts [-])."""
    s, intra_opt = ch.layout.s, ch.layout.ring_opt
    every, bits, ibits, xmap, _ = _ring_ops(ch, np.zeros(0), G)
    k = sharding.broadcasts or s
    chunk = sharding.broadcast_chunk or (
        NCCL_SIMPLE_STEP_BYTES * nccl_ring_channels(intra_opt.nics_per_node))
    bc, (bc_nic, bc_intra) = _broadcast_ops(
        np.full(k, float(P.sum()) / k), s, intra_opt, chunk, ch.c0, ch.codec)
    mode = "intra" if xmap[0] == 0.0 else "nic"
    every = np.concatenate((bc.parts(mode, bc.intra_bw), every))
    bits = np.concatenate((bc_nic, bits))
    ibits = np.concatenate((bc_intra, ibits))
    return every, bits, ibits, xmap, k


def _zero12_chain(profile, gp, rp, ready, sigma, cb, rounds):
    """Equation :eq:`zero12` as pieces (parts rows): the micro-batches that
    reduce-scatter (``rounds`` of them) each end with their reduce-scatters ``rp`` after
    the buckets' ``ready`` times and hooks ``cb`` [s]; the others are compute alone; the
    updated parameters ``gp`` are all-gathered once, after the step."""
    acc = profile.grad_accum
    tails = np.cumsum(rp[::-1], axis=0)[::-1]
    hooks = cb * np.arange(1, len(ready) + 1)  # eq. (compute-path-ready)
    tails[:, _C] += ready + hooks
    end_b = np.zeros((1, _W))
    end_b[0, _C] = sigma * profile.backward_time + len(ready) * cb
    pieces = rounds * np.concatenate((end_b, tails)) + gp.sum(axis=0)[None, :]
    pieces[:, _C] += (rounds * sigma * profile.forward_time
                      + (acc - rounds) * sigma * (profile.forward_time
                                                  + profile.backward_time))
    return pieces


def _zero12_pieces(profile, wrap, buckets, sharding, ch, elem, pb, rb, sigma, cb,
                   sync_overhead) -> _Pieces:
    """``zero1`` / ``zero2``: each gradient bucket reduce-scattered when backward has
    produced it, the updated parameters returned after the step, equation
    :eq:`zero12`; arguments as :func:`_full_shard_pieces`, with the profile's gradient
    ``elem`` [bytes] per element and the ``buckets`` of a bucket fusion."""
    acc = profile.grad_accum
    params, ready = _bucket_sizes(profile, wrap, buckets, elem, sigma)
    G, P = params * rb, params * pb
    if sharding.param_return == "broadcast":
        every, bits, ibits, xmap, k = _broadcast_return(ch, sharding, P, G)
    else:
        every, bits, ibits, xmap, k = _ring_ops(ch, P, G)
    gp, rp = every[:k], every[k:]
    gp[-1, _FIX] += float(sync_overhead)
    # every micro-batch reduce-scatters under zero2, the last one under zero1
    rounds = acc if sharding.strategy == "zero2" else 1
    pieces = _zero12_chain(profile, gp, rp, ready, sigma, cb, rounds)
    return _Pieces(
        pieces=pieces, breaks=None, xmap=xmap, ops_parts=np.concatenate((rp, gp)),
        op_count=np.concatenate((np.full(len(rp), float(rounds)), np.ones(len(gp)))),
        param_bytes=float(P.sum()), grad_bytes=rounds * float(G.sum()),
        nic=float(bits[:k].sum() + rounds * bits[k:].sum()),
        intra=float(ibits[:k].sum() + rounds * ibits[k:].sum()), units=len(params),
        rounds=rounds)


def _schedule_lines(profile, pc, s, sigma, cb):
    """Line 0, the compute alone with the hooks of the rounds, over the pieces ``pc``:
    the parts of every line [s, s, s, s, bit, -], the :class:`OverlapLines` of
    :math:`T_n - \\sigma T_f - T_u` in :math:`x_\\text{eff}` and their upper envelope."""
    fwd = sigma * profile.forward_time
    offset = profile.update_time / s - profile.update_time - fwd
    floor = np.zeros((1, _W))
    floor[0, _C] = (profile.grad_accum * (fwd + sigma * profile.backward_time)
                    + pc.rounds * pc.units * cb)
    every = np.concatenate((floor, pc.pieces))
    intercept = _intercepts(every) + offset
    slope = every[:, _BITS].copy()
    if pc.breaks is not None:  # zero3's pieces are a convex chain: no hull to build
        envelope = UpperEnvelope.of_convex(intercept, slope, pc.breaks)
    else:
        envelope = UpperEnvelope(intercept, slope)
    lines = OverlapLines(intercept=intercept, slope=slope, latency=every[:, _LAT],
                         overhead=every[:, _OVH], bits=slope, ready=every[:, _C] - fwd,
                         fixed=every[:, _FIX])
    return every, lines, envelope


def _comm_key(profile, n, sharding, wrap, algorithm, options, c0, codec, sync, ch):
    """The key of a ``zero3`` schedule's collectives in :data:`_COMM`: what enters them
    (floats with their signs), the profile and wrap by identity; None when a gradient
    compressor's scale or overhead is given or a setting cannot be hashed."""
    scale = ch.scale
    if ch.gradient_overhead is not None or scale.ndim or float(scale) != 1.0:
        return None
    sync = float(sync)
    key = (id(profile), id(wrap), n, sharding, algorithm, options, c0, codec, sync,
           ch.alpha_counts, math.copysign(1.0, c0), math.copysign(1.0, codec),
           math.copysign(1.0, sync))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _channel_of(profile, n, sharding, algorithm, options, collective_overhead, codec_cost,
                compressed, gradient_scale=1.0, gradient_overhead=None, alpha_counts=False):
    """What every collective of a sharded schedule shares (arguments as
    :func:`sharded_schedule`): ``n`` checked, the options, where the collectives run
    (the shard groups' layout) and the :class:`_Channel` [-]."""
    n = _check_n(n, sharding.strategy)
    options = options or CollectiveOptions()
    codec = float(codec_cost) if compressed else 0.0
    lay = _group_layout(n, sharding, options)
    ch = _Channel(lay, _group_algorithm(algorithm, sharding.strategy, lay), algorithm,
                  profile.reduction, float(collective_overhead), codec,
                  np.asarray(gradient_scale, float), gradient_overhead, alpha_counts)
    return n, options, lay, ch


def zero3_envelope(profile, n, *, sharding, wrap, algorithm="ring", options=None,
                   slowdown=1.0, collective_overhead=0.0, sync_overhead=0.0, codec_cost=0.0,
                   compressed=False, bucket_overhead=0.0):
    r"""The envelope of :func:`sharded_schedule` alone, and its wire map, for a
    ``zero3`` / ``hybrid_shard`` schedule (arguments as :func:`sharded_schedule`, no
    gradient compressor): what an interval's corner evaluates and inverts. Equation
    :eq:`zero3` on the lines' intercepts and slopes only, the compute lines flat: each
    term :math:`\max(c^a_t, c^b_t + m^b_t x)` adds :math:`c^a_t` up to its breakpoint
    :math:`(c^a_t - c^b_t)/m^b_t` and the rest of the communication line after it; the
    same function as the schedule's envelope (to rounding), without the parts of each
    line that only a breakdown reads. None when the schedule is not a full shard.

    Parameters
    ----------
    profile, n, sharding, wrap, algorithm, options, slowdown, collective_overhead, sync_overhead, codec_cost, compressed, bucket_overhead
        As in :func:`sharded_schedule`: the workload, ``n`` [GPUs], the strategy, the
        wrapping policy, the algorithm and the latency constants [-], the compute slowdown
        [-], the fixed costs of every collective and of the iteration [s], the codec's
        time per byte [s/byte] when ``compressed`` [-], and the per-unit hook [s].

    Returns
    -------
    tuple or None
        ``(UpperEnvelope, wire map)`` [s], [-].
    """
    numbers = [(slowdown, collective_overhead, sync_overhead, bucket_overhead)]
    return zero3_envelopes(profile, n, numbers, sharding=sharding, wrap=wrap,
                           algorithm=algorithm, options=options, codec_cost=codec_cost,
                           compressed=compressed)[0]


def zero3_envelopes(profile, n, numbers, *, sharding, wrap, algorithm="ring", options=None,
                    codec_cost=0.0, compressed=False):
    """:func:`zero3_envelope` for several corners at once, in one vectorized pass per
    fixed cost of the collectives (which enters every collective's time).

    Parameters
    ----------
    profile, n, sharding, wrap, algorithm, options, codec_cost, compressed
        As in :func:`zero3_envelope` [-].
    numbers : sequence of tuple
        ``(slowdown, collective_overhead, sync_overhead, bucket_overhead)`` of each
        corner [-], [s], [s], [s].

    Returns
    -------
    list
        :func:`zero3_envelope`'s answer for each corner, in order (None for all when the
        schedule is not a full shard) [-].
    """
    if not sharding.full_shard:
        return [None] * len(numbers)
    out = [None] * len(numbers)
    groups = {}  # the collectives depend on their fixed cost alone (the sync: one line)
    for i, (_, c0, _, _) in enumerate(numbers):
        groups.setdefault((float(c0), math.copysign(1.0, float(c0))), []).append(i)
    for (c0, _), rows in groups.items():
        n_, options_, lay, ch = _channel_of(profile, n, sharding, algorithm, options, c0,
                                            codec_cost, compressed)
        elem, pb, rb = sharding.element_bytes(profile)
        fc = _shared_full_shard_comm(
            _comm_key(profile, n_, sharding, wrap, algorithm, options_, ch.c0, ch.codec,
                      0.0, ch), profile, wrap, ch, pb, rb, 0.0)
        if (fc.comm_lines[3] < 0).any():  # (no wire bits are negative)
            continue
        picked = np.asarray([numbers[i] for i in rows], float)
        for i, env in zip(rows, _zero3_chains(profile, fc, lay.s, picked[:, 0],
                                              picked[:, 2], picked[:, 3])):
            out[i] = (env, fc.xmap)
    return out


def _zero3_chains(profile, fc, s, sigma, sync, cb):
    """The envelopes of :func:`zero3_envelopes` for the corners of one set of collectives
    ``fc`` (:class:`_FullShardComm` without a sync cost) and group size ``s``, with their
    slowdowns ``sigma`` [-], sync costs ``sync`` [s] and hooks ``cb`` [s] (arrays of one
    value per corner): equation :eq:`zero3` in rows, one per corner [-]."""
    base_c, base_m, tb_c, tb_m = fc.comm_lines
    units = fc.units
    K = len(units)
    compute = np.concatenate((units.forward[:-1], units.backward[::-1]))
    R, N = len(sigma), len(compute)
    ca = sigma[:, None] * compute
    ca[:, K - 1:] += cb[:, None]  # the hook ends each unit's backward
    grows = tb_m > 0
    dc = tb_c - ca  # each communication line's intercept over the compute's
    every = bool(grows.all())  # (then the masks below need no grows)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = -dc / (tb_m if every else np.where(grows, tb_m, 1.0))
    if every:
        live = (cross > 0) & (cross < np.inf)
        top = rising = cross <= 0  # the communication on top from x = 0
    else:
        live = grows & (cross > 0) & (cross < np.inf)
        rising = grows & (cross <= 0)
        top = rising | (~grows & (dc > 0))
    c0 = (base_c + sync + sigma * units.forward[-1] + ca.sum(axis=1)
          + np.where(top, dc, 0.0).sum(axis=1))
    m0 = base_m + np.where(rising, tb_m, 0.0).sum(axis=1)
    order = np.where(live, cross, np.inf).argsort(axis=1, kind="stable")
    count = live.sum(axis=1)
    at = (order + (np.arange(R) * N)[:, None]).ravel()  # the rows' orders, flat
    acc = profile.grad_accum  # every micro-batch gathers and reduce-scatters again
    f = sigma * profile.forward_time
    floor = acc * (f + sigma * profile.backward_time) + acc * K * cb
    offset = profile.update_time / s - profile.update_time - f
    # every row's lines at once: the constant, the chain's first line and the rest
    # (step + first), times the micro-batches, all shifted by the offset
    intercept = np.empty((R, N + 2))
    slope = np.empty((R, N + 2))
    intercept[:, 1], slope[:, 1] = c0, m0
    dc.ravel().take(at).reshape(R, N).cumsum(axis=1, out=intercept[:, 2:])
    intercept[:, 2:] += c0[:, None]
    tb_m.take(order).cumsum(axis=1, out=slope[:, 2:])
    slope[:, 2:] += m0[:, None]
    breaks = cross.ravel().take(at).reshape(R, N)
    if acc > 1:
        intercept[:, 1:] *= acc
        slope[:, 1:] *= acc
    intercept[:, 0], slope[:, 0] = floor, 0.0
    intercept += offset[:, None]
    if N > _PY_PIECES:  # long chains: numpy, every row at once
        if base_m >= 0:  # every slope >= 0, the breaks > 0 and ascending: as made
            return UpperEnvelope._rising_rows(intercept, slope, breaks, count.tolist())
        return UpperEnvelope.of_convex_rows(intercept, slope, breaks, count.tolist())
    # few: Python floats; each row's breaks ascending and chain slopes rising strictly
    # checked for every row at once (of_convex's two checks, the same comparisons)
    ok = (_holds_within(slope[:, 2:] > slope[:, 1:-1], count)
          & _holds_within(breaks[:, 1:] >= breaks[:, :-1], count - 1)).tolist()
    return [(UpperEnvelope.of_convex_checked if fine else UpperEnvelope.of_convex)(
        c[:L + 2], m[:L + 2], br[:L])
        for fine, L, c, m, br in zip(ok, count.tolist(), intercept.tolist(), slope.tolist(),
                                     breaks.tolist())]


def _holds_within(holds, limit):
    """Per row of the boolean ``holds``, whether its first ``limit[row]`` entries are all
    true (``limit`` an integer array; at most 0: true) [-]."""
    if holds.shape[1] == 0:
        return np.ones(len(holds), dtype=bool)
    fails = ~holds
    first = fails.argmax(axis=1)  # (0 where none fails)
    return ~(fails[np.arange(len(holds)), first] & (first < limit))


_PY_PIECES = 128
"""Chains of at most this many pieces (two per unit) are built and evaluated in Python
floats (:meth:`~scalemodel.overlap.UpperEnvelope.of_convex` given lists), longer ones
with numpy, whose per-call cost they outweigh [-]."""


def sharded_schedule(profile, n, *, sharding, wrap, algorithm="ring", options=None,
                     slowdown=1.0, collective_overhead=0.0, sync_overhead=0.0,
                     codec_cost=0.0, compressed=False, buckets=None, bucket_overhead=0.0,
                     gradient_scale=1.0, gradient_overhead=None,
                     alpha_counts=False) -> ShardedSchedule:
    """The closed form of one sharded iteration, equations :eq:`zero3` and :eq:`zero12`.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload [-].
    n : int
        GPUs, >= 2 [-].
    sharding : Sharding
        Strategy and dtypes [-].
    wrap : str, SizeWrap or fusion policy
        From :func:`resolve_wrap` [-].
    algorithm : str
        All-reduce across nodes under ``hybrid_shard`` [-].
    options : CollectiveOptions or None
        Latency and topology constants [-].
    slowdown : float
        Compute slowdown :math:`\\sigma` [-].
    collective_overhead : float
        Fixed cost of every collective [s].
    sync_overhead : float
        Fixed cost once per iteration, after the last collective [s].
    bucket_overhead : float
        The framework's work per gradient collective (reduce-scatter) on the compute
        path: it ends the backward of its unit or bucket before the reduce-scatter is
        issued (eq. :eq:`compute-path-ready`) [s].
    codec_cost : float
        Encode + decode time per uncompressed byte of each collective's buffer, when
        ``compressed`` [s/byte].
    compressed : bool
        Whether the codec cost applies [-].
    buckets : Buckets or None
        Gradient buckets for ``zero1`` / ``zero2`` when ``wrap`` is a bucket fusion
        (ready times on the distributed timeline, slowdown included) [-].
    gradient_scale : float or array_like
        Factor on the wire bits of the gradient collectives only (a gradient compressor
        of the planner: 1/ratio), per reduce-scatter or scalar [-].
    gradient_overhead : array_like or None
        Extra time on each gradient collective (encode and decode) [s].
    alpha_counts : bool
        Also count the network latencies on each line (``alpha_count``), for
        :func:`~scalemodel.sensitivities` [-].

    Returns
    -------
    ShardedSchedule
    """
    strategy = sharding.strategy
    n, options, lay, ch = _channel_of(profile, n, sharding, algorithm, options,
                                      collective_overhead, codec_cost, compressed,
                                      gradient_scale, gradient_overhead, alpha_counts)
    elem, pb, rb = sharding.element_bytes(profile)
    sigma, c0, cb = float(slowdown), ch.c0, float(bucket_overhead)
    codec = ch.codec
    # the envelope's pieces, eq. (zero3) or eq. (zero12), then line 0 beneath them
    if sharding.full_shard:
        pc = _full_shard_pieces(profile, wrap, ch, pb, rb, sigma, cb, sync_overhead,
                                _comm_key(profile, n, sharding, wrap, algorithm, options,
                                          c0, codec, sync_overhead, ch))
    else:
        pc = _zero12_pieces(profile, wrap, buckets, sharding, ch, elem, pb, rb, sigma, cb,
                            sync_overhead)
    every, lines, envelope = _schedule_lines(profile, pc, lay.s, sigma, cb)
    return ShardedSchedule(
        strategy=strategy, n=n, group=lay.s, units=pc.units, lines=lines,
        envelope=envelope, xmap=pc.xmap,
        update=profile.update_time / lay.s,
        op_constant=(pc.ops_parts[:, :4].sum(axis=1) if pc.op_constant is None
                     else pc.op_constant),
        op_bits=pc.ops_parts[:, _BITS].copy() if pc.op_bits is None else pc.op_bits,
        op_count=pc.op_count,
        param_bytes=pc.param_bytes, grad_bytes=pc.grad_bytes, nic_bits=pc.nic,
        intra_bits=pc.intra,
        alpha_count=every[:, _NALPHA].copy() if alpha_counts else None,
        gradient_rounds=pc.rounds)
