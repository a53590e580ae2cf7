"""Memory per GPU under data parallelism, plain (DDP) or sharded (ZeRO / FSDP).

:func:`memory` adds up, per GPU,

* **model state**, persistent: ``parameters``, ``gradients`` and ``optimizer`` state,
  divided among the GPUs as each strategy divides it (Rajbhandari et al., "ZeRO: Memory
  Optimizations Toward Training Trillion Parameter Models", SC'20, arXiv:1910.02054,
  Sec. 5 and Fig. 1). Mixed-precision Adam keeps :math:`2\\Psi` bytes of 16-bit
  parameters, :math:`2\\Psi` of 16-bit gradients and :math:`K\\Psi = 12\\Psi` of
  optimizer state (fp32 master weights, momentum and variance) for :math:`\\Psi`
  parameters: 16 bytes per parameter.

  ================ =============== =============== ===================
  strategy         parameters      gradients       optimizer
  ================ =============== =============== ===================
  ``none`` (DDP)   2Ψ              2Ψ              12Ψ
  ``zero1``        2Ψ              2Ψ              12Ψ / n
  ``zero2``        2Ψ              2Ψ / n          12Ψ / n
  ``zero3``        2Ψ / n          2Ψ / n          12Ψ / n
  ``hybrid_shard`` 2Ψ / g          2Ψ / g          12Ψ / g
  ================ =============== =============== ===================

  ``g`` is the number of GPUs in a node (``gpus_per_node``): hybrid sharding shards
  fully inside a node and replicates across nodes. With ``shard_group=g``
  (``zero1`` / ``zero2`` / ``zero3`` sharded over groups of ``g`` GPUs and replicated
  across the ``n / g`` groups: InternLM's ``zero1=8``, MiCS, HSDP with any group) every
  ``n`` of the table is ``g``.
* **activations**, from the transformer's shape (Korthikanti et al., "Reducing
  Activation Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198,
  Sec. 4.1, no tensor or sequence parallelism): per layer
  :math:`sbh(34 + 5as/h)` bytes with 16-bit activations for their GPT layer, counted
  tensor by tensor for the layer the config describes (SwiGLU, grouped-query attention,
  dropout or not: eq. :eq:`layer-activations`, :func:`scalemodel.checkpointing.activation_units`;
  :math:`37.5 sbh` for a Llama 2 layer); no score term with
  ``flash_attention=True``, the default (unless the profile was built without flash
  attention), which keeps no score matrix. ``s`` is the sequence,
  ``b`` the micro-batch, ``h`` the width and ``a`` the heads. With full activation
  checkpointing only each layer's input, :math:`2sbh` bytes, is kept, plus one layer's
  full activations while it is recomputed (Sec. 4.2); ``"selective"`` and fractions of
  layers as in :mod:`scalemodel.checkpointing`. The loss's backward peak is added
  (vocabulary ``V``; ``loss=``, :func:`scalemodel.checkpointing.loss_bytes`):
  :math:`12sbV` with PyTorch's unfused ``cross_entropy`` (``"unfused"``, the default:
  three fp32 tensors of the logits' size; Korthikanti et al. count the stored fp32
  logits, :math:`4sbV`), :math:`4sbV + 16sb` with a fused kernel that keeps the 16-bit
  logits and returns a 16-bit gradient (``"fused"``: flash-attention's
  ``CrossEntropyLoss``, which LLM Foundry's MPT uses by default).
* **offload** (:mod:`scalemodel.offload`): the optimizer state (and the parameter and
  gradient shards) move to host memory, reported as ``host_per_gpu``.
* **accounting** (``accounting=``): ``"zero"`` (the default) is the table above with every
  part at its largest at once: the persistent state of ZeRO's accounting, the activations
  with the loss's backward peak *and* the recomputed layer (an upper bound).
  ``"fsdp"`` is what a PyTorch FSDP training step holds at its largest moment, read from
  torchtitan's ``train.py`` and FSDP2 (``fully_shard`` with
  ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``;
  ``zero2`` is ``reshard_after_forward=False``, ``zero3`` / ``hybrid_shard``
  resharding after forward):

  - the sharded parameters are fp32 and are the optimizer's master weights
    (:math:`4\\Psi/n`; the 16-bit copies exist only once all-gathered, in the buffers;
    torchtitan logs "CUDA memory usage for model: 3.77GiB" after sharding Llama 3 8B over
    8 GPUs, PR #822 at ``5940ddeb5``: :math:`4 \\cdot 8.03\\cdot 10^9/8` bytes is 3.74 GiB);
    under ``zero2`` the 16-bit unsharded parameters, :math:`2\\Psi`, are held from the
    forward to the backward besides;
  - the optimizer state is :math:`4K\\Psi/n` (no separate master copy);
  - the sharded gradients (fp32, :math:`4\\Psi/n`) are created by each unit's
    reduce-scatter in backward and freed by ``optimizer.zero_grad()`` (``set_to_none``,
    PyTorch's default) before the next forward (``train.py``), so none is alive at the
    forward/backward peak;
  - the activations take the larger of the loss's backward and the first recompute
    (:func:`scalemodel.checkpointing.activation_bytes` with ``phases=True``);
  - ``per_gpu`` is the larger of that forward/backward peak and the optimizer step's
    (the sharded parameters, gradients and optimizer state and one bucket); ``parts``
    are the larger moment's.

  ``"fsdp"`` applies to ``zero2``, ``zero3`` and ``hybrid_shard`` without offload.
* **buffers**, transient: under ``zero3`` / ``hybrid_shard`` the all-gathered parameters
  of the unit being computed and of the one prefetched, the unsharded gradients of one
  unit before its reduce-scatter, and the root unit (embeddings and head) that FSDP keeps
  gathered; under every strategy one communication bucket (``bucket_bytes``).

**What is measured** (``measure=``). The parts above are the tensors alive at the peak:
PyTorch's ``torch.cuda.max_memory_allocated`` (``"allocated"``). Training
logs usually report the caching allocator's *reserved* memory instead (torchtitan logs
``memory_stats()["reserved_bytes.all.peak"]``: ``torchtitan/metrics.py``,
``DeviceMemoryMonitor.get_peak_stats``, at the commit of its 2024-12 benchmarks,
9dec370); ``measure="reserved"``, the default, adds what the allocator holds besides the
live tensors, each term listed in ``MemoryEstimate.overheads``:

* ``rounding``: every request is rounded up to 512 bytes, and one of 10 MiB or more to a
  2 MiB multiple (``c10/cuda/CUDACachingAllocator.cpp``: ``kMinBlockSize = 512``,
  ``kMinLargeAlloc = 10485760``, ``kRoundLarge = 2097152``; smaller requests share 2 MiB
  and 20 MiB segments, so only their 512-byte rounding is counted), over the tensors
  the estimate knows: the activations as ``2sbh``-byte tensors, the loss's tensors
  (three of ``4sbV`` unfused; two of ``2sbV`` and three per-token ones fused;
  :func:`scalemodel.checkpointing.loss_tensor_bytes`; :func:`allocator_block_bytes`; the all-gather outputs' rounding is in
  ``side_stream_pool``; model state and the other buffers are not rounded).
* ``side_stream_pool``: the caching allocator keeps one pool per CUDA stream and a
  block freed on one stream is reused only by that stream. FSDP2 allocates each unit's
  all-gather output on its all-gather copy-in stream
  (``torch/distributed/_composable/fsdp/_fsdp_collectives.py``, ``foreach_all_gather``)
  and copies it out into the unsharded parameters on the default stream, keeping the
  previous output until the next all-gather; so under ``zero3`` / ``hybrid_shard``
  that stream's pool holds the two largest units' all-gather outputs (the root unit and
  the largest block), reserved at the default stream's peak though no tensor lives
  there (:func:`side_stream_pool_bytes`). With ``accounting="fsdp"`` also under
  ``zero2`` (``reshard_after_forward=False`` all-gathers in forward on the same stream).
* ``reduce_scatter_pool`` (``accounting="fsdp"`` only): FSDP2 allocates each unit's
  reduce-scatter output on its reduce-scatter stream and the sharded gradients are views
  of it (``foreach_reduce``: ``with torch.cuda.stream(reduce_scatter_stream): ...
  reduce_output = reduce_scatter_input.new_empty(...)``, then ``torch.as_strided
  (reduce_output, ...)``; "Since the GPU sharded gradient is allocated in the RS
  stream"), so once ``zero_grad`` frees them their blocks stay cached in that stream's
  pool, which the default stream does not reuse: through the next forward and backward
  the pool holds every unit's output, :math:`4\\Psi/n` rounded per unit
  (:func:`reduce_scatter_pool_bytes`). Versions that also allocate the reduce-scatter
  *input* on that stream add the largest unit's unsharded fp32 gradients: not counted.
* ``fragmentation``: free space inside reserved segments. It depends on the allocation
  order and the allocator settings, so it is a fraction of reserved memory given by the
  user (``fragmentation=``, 0 by default, as with ``expandable_segments:True``, which
  torchtitan's launcher sets; or the setting by name,
  :data:`~scalemodel.memory.FRAGMENTATION`); Guo et al. (GMLake, ASPLOS'24, arXiv:2401.08156) removed
  on average 15 % (at most 33 %) of the memory of eight LLM training runs with PyTorch's
  default (non-expandable) segments by defragmenting, a range for this fraction.

Not in either view: the CUDA context and NCCL's own buffers (``NCCL_BUFFSIZE``, 4 MiB per
channel and peer by default), which ``nvidia-smi`` shows but PyTorch's counters do not.

For a plain :class:`~scalemodel.WorkloadProfile` without a transformer config the
parameter count is the gradient bytes over the gradient element size; activations are
unknown (``None``) and ``per_gpu`` counts the known parts only (``complete`` is False).
"""

from __future__ import annotations

import functools
import inspect
import weakref
import math
import types
import typing
import warnings

import attrs
import numpy as np

from .checkpointing import (activation_bytes, activation_units, canonical_loss,
                            resolve_checkpointing)
from .exceptions import (HostMemoryError, InvalidParameterError, ModelWarning,
                         ParameterTypeError, ScalemodelError, UnknownNameError, renamed)
from .hardware import DTYPE_BYTES, GPUSpec, canonical_dtype, get_gpu
from .offload import canonical_offload, check_offload_sharding, default_host_memory
from .fusion import MAX_BUCKET_CAP_MB
from .units import MAX_COUNT

MAX_BUCKET_BYTES = MAX_BUCKET_CAP_MB * 2.0**20
"""The largest communication bucket :func:`memory` counts [bytes]: DDP's largest
``bucket_cap_mb`` here (:data:`~scalemodel.fusion.MAX_BUCKET_CAP_MB`)."""

__all__ = ["memory", "MemoryEstimate", "canonical_sharding", "SHARDING_STRATEGIES",
           "SHARDING_ALIASES", "OPTIMIZER_STATES", "MEASURES", "ACCOUNTINGS",
           "allocator_block_bytes", "side_stream_pool_bytes", "reduce_scatter_pool_bytes",
           "FRAGMENTATION"]

MEASURES = ("allocated", "reserved")
"""What ``memory(measure=...)`` reports: the live tensors' peak
(``torch.cuda.max_memory_allocated``) or the caching allocator's reserved peak
(``torch.cuda.max_memory_reserved``, what torchtitan logs)."""

FRAGMENTATION = {"expandable_segments": 0.0, "default_segments": 0.15}
"""``memory(fragmentation=...)`` by the allocator's setting [-]: with
``PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`` a segment grows in place, so no
free space is stranded inside segments (0); with PyTorch's default segments, the mean
that Guo et al. (GMLake, ASPLOS'24, arXiv:2401.08156) removed by defragmenting eight LLM
training runs, 15 % of the memory (at most 33 %). torchtitan's runs on default segments
(``benchmarks/data/published_memory.md``, rows 14-16) hold 8.3 GiB more reserved than
active at row 16's peak, of which the allocator's rounding and the two stream pools
counted here are 4.05 GiB: the rest, 13.5 % of the reserved peak, is of that order."""

ACCOUNTINGS = ("zero", "fsdp")
"""How ``memory(accounting=...)`` counts the model state and the peak: ZeRO's persistent
state with every activation term at once, or what a PyTorch FSDP step holds at its
largest moment (the module docstring)."""

FSDP_SHARDINGS = ("zero2", "zero3", "hybrid_shard")
"""The strategies ``accounting="fsdp"`` applies to (FSDP's ``reshard_after_forward=False``
and ``True``; hybrid sharding)."""

ALLOCATOR_MIN_BLOCK = 512
"""Every caching-allocator request is rounded up to a multiple of this
(``kMinBlockSize``, ``c10/cuda/CUDACachingAllocator.cpp``) [bytes]."""

ALLOCATOR_MIN_LARGE_ALLOC = 10 * 2**20
"""Requests of at least this get a segment of their own (``kMinLargeAlloc``) [bytes]."""

ALLOCATOR_ROUND_LARGE = 2 * 2**20
"""Such a segment is rounded up to a multiple of this (``kRoundLarge``) [bytes]."""

SHARDING_STRATEGIES = ("none", "zero1", "zero2", "zero3", "hybrid_shard")
"""The data-parallel strategies, by their canonical names."""

SHARDING_ALIASES = {"ddp": "none", "no_shard": "none", "no-shard": "none",
                    "zero-1": "zero1", "zero-2": "zero2", "zero-3": "zero3",
                    "shard_grad_op": "zero2", "shard-grad-op": "zero2",
                    "full_shard": "zero3", "full-shard": "zero3", "fsdp": "zero3",
                    "hybrid-shard": "hybrid_shard", "hsdp": "hybrid_shard"}
"""Other names: PyTorch FSDP's ``ShardingStrategy`` names and DeepSpeed's stages."""

OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd": 0, "sgd_momentum": 1}
"""fp32 state tensors per parameter of each optimizer (Adam: momentum and variance)."""

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""One communication bucket: PyTorch DDP's default ``bucket_cap_mb=25`` [bytes]."""


def canonical_sharding(sharding) -> str:
    """The canonical name of a sharding strategy (``"full_shard"`` -> ``"zero3"``).

    Parameters
    ----------
    sharding : str
        ``"none"``, ``"zero1"``, ``"zero2"``, ``"zero3"``, ``"hybrid_shard"`` or an alias
        in ``SHARDING_ALIASES`` (case-insensitive) [-].

    Raises
    ------
    UnknownNameError
        Not a strategy; suggests the closest.
    """
    if not isinstance(sharding, str):
        raise ParameterTypeError("sharding", sharding, "a strategy name such as 'zero3'")
    key = sharding.strip().lower()
    key = SHARDING_ALIASES.get(key, key)
    if key not in SHARDING_STRATEGIES:
        raise UnknownNameError("sharding", sharding, SHARDING_STRATEGIES,
                               aliases=SHARDING_ALIASES)
    return key


@attrs.frozen(eq=False)
class MemoryEstimate:
    """Memory needed per GPU.

    Attributes
    ----------
    per_gpu : float or numpy.ndarray
        Total of the known parts per GPU [bytes]; an array when ``n`` is one.
    parts : mapping of str to float, numpy.ndarray or None
        ``parameters``, ``gradients``, ``optimizer`` (persistent model state),
        ``activations`` (None when unknown) and ``buffers`` [bytes].
    fits : bool or numpy.ndarray
        ``per_gpu`` is at most the GPU's memory.
    gpu : GPUSpec
        The GPU checked against.
    sharding : str
        Canonical strategy name.
    n : int or numpy.ndarray
        GPUs [-].
    parameter_count : float
        Parameters of the model [-].
    complete : bool
        False when a part is unknown (activations of a profile without a config).
    notes : str
        What was assumed.
    host_per_gpu : float or numpy.ndarray
        Host (CPU) memory per GPU for what is offloaded; 0 without offload [bytes].
    settings : mapping of str to object
        The settings the estimate assumed: sharding, activation checkpointing, flash
        attention, offload, optimizer, dtypes, micro-batch, sequence, GPU.
    suggestions : tuple of (str, float)
        When it does not fit: the options that would (or the closest one, marked "still
        does not fit"), each with its memory per GPU [bytes]; empty when it fits.
    measure : str
        What ``per_gpu`` and ``fits`` count: ``"allocated"`` (the live tensors, the sum
        of ``parts``) or ``"reserved"`` (``reserved_per_gpu``).
    allocated_per_gpu : float, numpy.ndarray or None
        The live tensors' peak, the sum of the known ``parts`` [bytes].
    reserved_per_gpu : float, numpy.ndarray or None
        The caching allocator's reserved peak: ``allocated_per_gpu`` plus
        ``overheads`` [bytes].
    overheads : mapping of str to float or numpy.ndarray
        What the allocator reserves besides the live tensors: ``rounding``,
        ``side_stream_pool``, ``reduce_scatter_pool``, ``fragmentation`` (the docstring
        of ``scalemodel.memory``;
        :func:`scalemodel.memory.allocator_block_bytes`,
        :func:`scalemodel.memory.side_stream_pool_bytes`,
        :func:`scalemodel.memory.reduce_scatter_pool_bytes`) [bytes].
    """

    per_gpu: object
    parts: types.MappingProxyType
    fits: object
    gpu: GPUSpec
    sharding: str
    n: object
    parameter_count: float
    complete: bool
    notes: str
    host_per_gpu: object = 0.0
    settings: types.MappingProxyType = attrs.field(
        factory=lambda: types.MappingProxyType({}))
    suggestions: tuple = ()
    measure: str = "allocated"
    allocated_per_gpu: object = None
    reserved_per_gpu: object = None
    overheads: types.MappingProxyType = attrs.field(
        factory=lambda: types.MappingProxyType({}))

    @property
    def model_state(self):
        """Parameters + gradients + optimizer state per GPU [bytes]."""
        return self.parts["parameters"] + self.parts["gradients"] + self.parts["optimizer"]

    def message(self) -> str:
        """One line: does it fit, and how much it needs."""
        per = np.atleast_1d(self.per_gpu)
        gib = ", ".join(f"{v / 2**30:.1f}" for v in per)
        verdict = ("fits" if np.all(self.fits) else
                   "does not fit" if not np.any(self.fits) else "fits for some n")
        tail = "" if self.complete else " (activations unknown: not counted)"
        st = self.settings
        extra = ""
        if st.get("tp", 1) > 1 or st.get("pp", 1) > 1:  # the layout the GiB are for
            extra += f", tp={st.get('tp', 1)} x pp={st.get('pp', 1)}"
            if st.get("virtual_stages", 1) > 1:
                extra += f" ({st['virtual_stages']} chunks per stage)"
        if st.get("activation_checkpointing", "none") != "none":
            extra += f", activation_checkpointing {st['activation_checkpointing']}"
        if st.get("offload", "none") != "none":
            host = np.atleast_1d(self.host_per_gpu)
            extra += (f", offload={st['offload']!r} (host: "
                      + ", ".join(f"{v / 2**30:.1f}" for v in host) + " GiB per GPU)")
        if self.measure != "allocated":
            extra += f", {self.measure} memory"
        text = (f"{gib} GiB per GPU with sharding={self.sharding!r}{extra}: {verdict} on "
                f"{self.gpu.name} ({self.gpu.hbm_bytes / 2**30:.0f} GiB){tail}")
        return text + suggestions_text(self.suggestions)


def suggestions_text(suggestions) -> str:
    """``"; would fit with: ..."`` for :attr:`MemoryEstimate.suggestions`, or
    ``"; nothing tried fits, closest: ..."`` when the one entry is the closest that
    still does not fit; ``""`` without suggestions."""
    if not suggestions:
        return ""
    items = [(label.removesuffix(_CLOSEST), v, label.endswith(_CLOSEST))
             for label, v in suggestions]
    if len(items) == 1 and items[0][2]:
        return (f"; nothing tried fits, closest: {items[0][0]} "
                f"({items[0][1] / 2**30:.1f} GiB)")
    return "; would fit with: " + "; ".join(f"{label} ({v / 2**30:.1f} GiB)"
                                            for label, v, _ in items)


_CLOSEST = " (still does not fit)"


def _check_n(n, sharding):
    if type(n) is int and (1 if sharding == "none" else 2) <= n <= MAX_COUNT:  # common
        return np.asarray(n)
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_COUNT:  # 10**30 too
        raise InvalidParameterError("n", n, f"must be at most {MAX_COUNT:,} GPUs")
    arr = np.asarray(n)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            raise ParameterTypeError("n", n, "an integer number of GPUs (n=8, not 8.0)")
        raise ParameterTypeError("n", n, "an integer number of GPUs >= 1, or an array of them")
    if np.any(arr < 1):
        raise InvalidParameterError("n", n, "must be >= 1")
    if np.any(arr > MAX_COUNT):
        raise InvalidParameterError("n", n, f"must be at most {MAX_COUNT:,} GPUs")
    if sharding != "none" and np.any(arr < 2):
        raise InvalidParameterError("n", n, f"sharding={sharding!r} needs at least 2 GPUs "
                                    "to shard over", "Use sharding='none' for one GPU")
    return arr


def _check_model_parallel(tp, pp, microbatches, cfg, ns, strategy, ck, label,
                          virtual_stages=1, sequence_parallel=False):
    """The checked :class:`~scalemodel.parallel.ModelParallel`, or None without it."""
    from .parallel import check_config, check_pipeline_layers, resolve_model_parallel

    if (type(tp) is int and tp == 1 and type(pp) is int and pp == 1 and microbatches is None
            and type(virtual_stages) is int and virtual_stages == 1
            and sequence_parallel is False):  # the default: none (what the checks find)
        return None
    if cfg is not None:  # what the model cannot do is said before micro-batches are asked
        _check_pipeline_sharding(pp, strategy)
        check_pipeline_layers(pp, cfg.layers, label)
    mp = resolve_model_parallel(tp, pp, microbatches, virtual_stages=virtual_stages,
                                sequence_parallel=sequence_parallel)
    if not mp.active:
        return None
    name, value = ("tp", mp.tp) if mp.tp > 1 else ("pp", mp.pp)
    if cfg is None:
        raise InvalidParameterError(name, value, f"{label} has no transformer config: its "
                                    "layers and activations are unknown")
    _check_pipeline_sharding(mp.pp, strategy)
    if ((ck.mode == "selective" and ck.flash_attention)
            or (ck.mode == "full" and ck.fraction < 1.0)):
        raise InvalidParameterError(
            "activation_checkpointing", ck.describe(), "with tensor or pipeline parallelism "
            "only 'none', 'full' and, without flash attention, 'selective' (Korthikanti et "
            "al.'s, the attention core) are modelled; "
            + ("the op-level policy with flash attention is not" if ck.mode == "selective"
               else "a fraction of the layers checkpointed is not"))
    check_config(mp, cfg.layers, cfg.heads, label, cfg.kv_heads, cfg.ffn)
    dp = np.asarray(mp.dp(ns))  # n a multiple of tp * pp
    _check_sharded_replicas(mp, strategy, ns, dp)
    return mp


def _count_or_none(value):
    """``value`` when it is an integer >= 1 (not a bool), else None (left to the checks
    that name it) [-]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return value if value >= 1 else None


def _check_pipeline_sharding(pp, strategy):
    """Raise for sharding with pipeline parallelism (not modelled): ``pp`` an integer
    > 1 (anything else in it is left to the checks of the pipeline)."""
    if (strategy != "none" and isinstance(pp, (int, np.integer))
            and not isinstance(pp, (bool, np.bool_)) and pp > 1):
        raise InvalidParameterError("pp", pp, f"sharding={strategy!r} with pipeline "
                                    "parallelism is not modelled (with tensor parallelism "
                                    "alone, pp=1, it is)", "Use sharding='none' or pp=1")


def _check_sharded_replicas(mp, strategy, ns, dp):
    """Raise for sharding over fewer than 2 data-parallel replicas (``dp`` of ``ns``)."""
    if strategy != "none" and np.any(dp < 2):
        raise InvalidParameterError(
            "n", int(np.asarray(ns)[dp < 2].flat[0]), f"sharding={strategy!r} with "
            f"tp={mp.tp} shards over the data-parallel group of n / tp GPUs, which needs "
            f"at least 2: n a multiple of {mp.tp} from {2 * mp.tp}",
            "Use sharding='none' for one replica")


def _model_parallel_checker(tp, pp, microbatches, cfg, ns, label, virtual_stages,
                            sequence_parallel, seed):
    """``check(t, strategy, ck)``: :func:`_check_model_parallel` of the other arguments
    with ``tp=t``, for the alternatives of one :func:`~scalemodel.memory` call: what does
    not depend on the strategy is checked once per ``(t, ck)`` (and a refusal remembered),
    the strategy's two conditions each time; it raises exactly when
    :func:`_check_model_parallel` does (which of the errors may differ: the suggestions
    only skip an alternative that raises). ``seed``: ``((t, ck), result)`` known already."""
    base = dict([seed])

    def check(t, strategy, ck):
        key = (t, ck)
        if key not in base:
            try:
                base[key] = _check_model_parallel(t, pp, microbatches, cfg, ns, "none", ck,
                                                  label, virtual_stages, sequence_parallel)
            except ScalemodelError as exc:
                base[key] = exc
        mp = base[key]
        if isinstance(mp, ScalemodelError):
            raise mp
        if mp is not None and strategy != "none":
            _check_pipeline_sharding(mp.pp, strategy)
            _check_sharded_replicas(mp, strategy, ns, np.asarray(mp.dp(ns)))
        return mp

    return check


def model_parallel_activations(cfg, ck, mp, loss="unfused") -> float:
    r"""Activation bytes per GPU at the peak of a TP x PP (1F1B) job [bytes].

    Per layer, 16-bit activations (Korthikanti et al., "Reducing Activation Recomputation
    in Large Transformer Models", MLSys 2023, arXiv:2205.05198, Sec. 4.2.1-4.2.2 and
    Table 2; the score term :math:`5as/(ht)` is dropped under flash attention, which
    stores no score matrix, as without tensor parallelism). The table's numbers are
    their GPT layer's; for the layer at hand the :math:`10` is the replicated part
    :math:`R`, the :math:`24` the split part :math:`S` and the :math:`5` the score bytes
    :math:`A` of eq. :eq:`layer-activations`
    (:func:`scalemodel.checkpointing.activation_units`):

    ========================== ================================= ===========================
    checkpointing              tensor parallelism :math:`t`      with sequence parallelism
    ========================== ================================= ===========================
    ``"none"``                 :math:`sbh(10 + 24/t + 5as/(ht))` :math:`sbh(34/t + 5as/(ht))`
    ``"selective"`` (no flash) :math:`sbh(10 + 24/t)`            :math:`34\,sbh/t`
    ``"full"`` (stored input)  :math:`2sbh`                      :math:`2sbh/t`
    ========================== ================================= ===========================

    The :math:`10\,sbh` of tensor parallelism alone are the layer-norm inputs
    (:math:`4sbh`), the dropout masks (:math:`2sbh`) and the dropout outputs
    (:math:`4sbh`) that each tensor-parallel rank keeps whole; sequence parallelism splits
    them along the sequence over the :math:`t` ranks (Sec. 4.2.2). Megatron-LM's
    ``theoretical_memory_usage.py`` (``compute_activation_memory``, "formula in Table 2")
    implements the sequence-parallel selective row, :math:`sbh(18 + 4F/h)/t`, i.e.
    :math:`34\,sbh/t` for :math:`F = 4h`. The full checkpoint keeps each layer's input,
    which with sequence parallelism is the sequence shard (Megatron checkpoints the
    sequence-parallel hidden state): :math:`2sbh/t`; Table 2's :math:`2sbh` is without
    it. ``"selective"`` with flash attention (the op-level policy,
    :mod:`scalemodel.checkpointing`) is not modelled with tensor parallelism (refused by
    :func:`~scalemodel.memory`). With checkpointing one layer's activations exist while
    it is recomputed: a ``"none"`` layer under ``"full"``, the difference (the score term)
    under ``"selective"``. The first stage keeps :math:`\min(p, m)` micro-batches of
    its :math:`L/p` layers in flight (1F1B); the last stage one micro-batch and the loss
    over the vocabulary-parallel logits (:math:`12sbV/t` unfused, :math:`4sbV/t + 16sb`
    fused: :func:`scalemodel.checkpointing.loss_bytes`); the larger of the two. Under
    interleaved 1F1B (``virtual_stages`` :math:`v > 1`) each stage keeps the chunks of
    :math:`L/(p v)` layers its schedule holds
    (:func:`~scalemodel.parallel.in_flight_chunks`): the first stage
    :math:`p v + p - 1` for :math:`m > p`, i.e. :math:`L(1 + \frac{p-1}{p v})` layers,
    Korthikanti et al.'s factor (Sec. 4.2.3; Megatron-LM's
    ``interleaved_schedule_memory_penalty``), and :math:`p v` (:math:`L` layers) for
    :math:`m = p`; the last stage :math:`(v - 1) p + 1` (:math:`m > p`).

    Parameters
    ----------
    cfg : TransformerConfig
        The model and its batch [-].
    ck : Checkpointing
        ``"none"``, ``"full"`` of every layer, or ``"selective"`` without flash
        attention [-].
    mp : ModelParallel
        The parallelism [-].
    loss : str
        ``"unfused"`` or ``"fused"`` cross-entropy
        (:data:`scalemodel.checkpointing.LOSS_KERNELS`) [-].
    """
    from .checkpointing import ACTIVATION_BYTES, loss_bytes
    from .parallel import in_flight_chunks

    t = mp.tp
    s, b, h, a = float(cfg.seq), float(cfg.micro_batch), float(cfg.hidden), float(cfg.heads)
    sbh = s * b * h
    r, split, per_score = activation_units(cfg)
    score = 0.0 if ck.flash_attention else per_score * a * s / (h * t)
    # Table 2 (GPT: 34/t with sequence parallelism, else 10 + 24/t), eq. (layer-activations)
    kept = (r + split) / t if mp.sequence_parallel else r + split / t
    none = sbh * (kept + score)
    layers = cfg.layers // mp.pp
    if ck.mode == "none":
        stage, recompute = none * layers, 0.0
    elif ck.mode == "selective":  # Korthikanti's: the score term recomputed (no flash)
        stage, recompute = sbh * kept * layers, none - sbh * kept
    else:  # full: the inputs kept (sequence shards with SP), one layer recomputed
        split = t if mp.sequence_parallel else 1
        stage, recompute = ACTIVATION_BYTES * sbh / split * layers, none
    logits = loss_bytes(cfg, loss, t)
    if mp.pp == 1:
        return stage + recompute + logits
    chunk = stage / mp.virtual_stages  # L / (p v) layers; scalemodel.parallel
    first = in_flight_chunks(mp, 0) * chunk + recompute
    last = in_flight_chunks(mp, mp.pp - 1) * chunk + recompute + logits
    return max(first, last)


def _check_shard_group(shard_group, strategy, ns):
    """``shard_group`` checked against the strategy and every ``n`` [GPUs]."""
    if shard_group is None:
        return None
    from .sharding import Sharding, _divisors

    if strategy in ("zero1", "zero2", "zero3"):
        shard_group = Sharding(strategy, shard_group=shard_group).shard_group
    else:  # Sharding says why it does not apply
        Sharding(strategy, shard_group=shard_group)
    # n <= MAX_COUNT (_check_n): a larger group divides none (and overflows numpy)
    bad = (np.asarray(ns) % shard_group != 0 if shard_group <= MAX_COUNT
           else np.ones(np.shape(ns), bool))
    if np.any(bad):
        first = int(np.asarray(ns)[bad].flat[0])
        raise InvalidParameterError("shard_group", shard_group, f"must divide n={first}: "
                                    f"valid shard groups are {_divisors(first)}")
    return shard_group


def _resolve_model(model, micro_batch, seq):
    """(config or None, parameter count, profile grad element bytes or None, label)."""
    from .profiles import WorkloadProfile, load_profile
    from .workloads import TransformerConfig, _llm_key, llm_config, llm_names

    if isinstance(model, TransformerConfig):
        cfg = model
    elif isinstance(model, str) and _llm_key(model) in llm_names():
        cfg = llm_config(model)
    else:
        prof = load_profile(model)
        if isinstance(prof, WorkloadProfile) and isinstance(prof.provenance.get("config"), dict):
            cfg = _CONFIGS.get(prof)
            if cfg is None:  # kept with the profile while it lives
                cfg = _CONFIGS[prof] = _config_from(prof.provenance["config"])
        else:
            elem = DTYPE_BYTES.get(_precision(prof.precision), 4)
            return None, prof.total_bytes / elem, elem, prof.name
    changes = {}
    if micro_batch is not None:
        changes["micro_batch"] = micro_batch
    if seq is not None:
        changes["seq"] = seq
    if changes:
        cfg = attrs.evolve(cfg, **changes)
    return cfg, _parameter_count(cfg), None, cfg.name or "transformer"


@functools.lru_cache(maxsize=64)
def _parameter_count(cfg):
    """``float(cfg.parameter_count)``, once per config (a sum over its tensors) [-]."""
    return float(cfg.parameter_count)


_CONFIGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _config_from(fields):
    """The :class:`~scalemodel.TransformerConfig` a derived profile records, validated once
    per distinct record."""
    from .workloads import TransformerConfig

    check_config_fields(fields)
    try:
        try:
            return _config_cached(tuple(sorted((k, type(v), v) for k, v in fields.items())))
        except TypeError:  # an unhashable field (a file's list): validated, and refused
            return TransformerConfig(**fields)
    except (InvalidParameterError, ParameterTypeError) as exc:  # named where it is: the
        # profile's record, not a keyword the caller passed
        raise renamed(exc, f"profile.provenance['config']['{exc.parameter}']") from None


def check_config_fields(fields):
    """Raise when a profile's recorded config (``provenance["config"]``) names a field a
    :class:`~scalemodel.TransformerConfig` does not have (a profile file's, edited or from
    another version), naming them; the values are checked where the config is built.

    Raises
    ------
    InvalidParameterError
        Unknown fields, listed with the ones a config has.
    """
    from .workloads import TransformerConfig

    known = attrs.fields_dict(TransformerConfig)
    unknown = sorted(str(k) for k in fields if k not in known)
    if unknown:
        raise InvalidParameterError(
            "profile.provenance['config']", unknown, "names fields a TransformerConfig "
            f"does not have (it has {', '.join(known)})",
            "Remove them, or derive the profile again with scalemodel.transformer_profile")


@functools.lru_cache(maxsize=64)
def _config_cached(items):
    from .workloads import TransformerConfig

    return TransformerConfig(**{k: v for k, _, v in items})


def _precision(text):
    try:
        return canonical_dtype(str(text))
    except Exception:  # a label such as "mixed": assume fp32 gradients
        return "fp32"


def _real(value):
    """``value`` as a float when it is a real number (numpy's too, not a bool), inf for
    an integer beyond a float, else None [-]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                       np.floating)):
        return None
    try:
        return float(value)
    except OverflowError:  # 10**400 (math.isfinite raised it before)
        return math.inf


def _nonneg_bytes(value, name):
    v = _real(value)
    if v is None or not math.isfinite(v) or v < 0:
        raise InvalidParameterError(name, value, "must be a finite number of bytes >= 0")
    return v


def memory(model, n, *, sharding="none", gpu="h100-sxm", optimizer="adam", param_dtype=None,
           grad_dtype=None, activation_checkpointing=False, micro_batch=None, seq=None,
           gpus_per_node=None, bucket_bytes=DEFAULT_BUCKET_BYTES,
           flash_attention=None, offload="none", host_memory=None,
           suggest=True, shard_group=None, tp=1, pp=1, microbatches=None,
           measure="reserved", fragmentation=0.0, virtual_stages=1,
           loss="unfused", accounting="zero", sequence_parallel=False) -> MemoryEstimate:
    """Memory per GPU to train ``model`` data-parallel on ``n`` GPUs.

    Parameters
    ----------
    model : str, TransformerConfig or WorkloadProfile
        A built-in LLM (``"llama-2-7b"``, see :func:`scalemodel.list_profiles`), any
        built-in or file profile, or a config [-].
    n : int or array_like of int
        Data-parallel GPUs; an array gives an array of answers [-].
    sharding : str, Sharding or None
        ``"none"`` (DDP; also None), ``"zero1"``, ``"zero2"`` (``"shard_grad_op"``),
        ``"zero3"`` (``"full_shard"``) or ``"hybrid_shard"``, or a
        :class:`~scalemodel.sharding.Sharding` as the time calls take it (its strategy
        and ``shard_group``) [-].
    gpu : str or GPUSpec
        The GPU whose memory is checked (:func:`~scalemodel.get_gpu`) [-].
    optimizer : str
        ``"adam"`` / ``"adamw"`` (2 fp32 states), ``"sgd_momentum"`` (1) or ``"sgd"``
        (0) [-].
    param_dtype : str or None
        Dtype of the working parameters; None: bf16 for a 16-bit compute dtype (then an
        fp32 master copy is part of the optimizer state), else fp32 [-].
    grad_dtype : str or None
        Dtype of the gradients; None: ``param_dtype`` [-].
    activation_checkpointing : str, bool, float or Checkpointing
        ``"none"`` (or False), ``"selective"``, ``"full"`` (or True), or a fraction of the
        layers checkpointed fully; see :mod:`scalemodel.checkpointing` [-].
    micro_batch : int or None
        Sequences per GPU per step; None: the config's [samples].
    seq : int or None
        Sequence length; None: the config's [tokens].
    gpus_per_node : int or None
        GPUs per node for ``"hybrid_shard"`` and for the host memory of a node; None:
        the GPU's usual server [-].
    bucket_bytes : float
        One communication bucket [bytes].
    flash_attention : bool or None
        Attention that does not store the ``s x s`` score matrix (FlashAttention, PyTorch's
        ``scaled_dot_product_attention``): drops the ``5as/h`` term. None (the default):
        the profile's own (False for one built with ``transformer_profile(...,
        flash_attention=False)``), else True, as in current LLM training code; False gives
        Korthikanti et al.'s formula as printed [-].
    offload : str or None
        ``"none"``, ``"optimizer"`` (ZeRO-Offload) or ``"optimizer+parameters"`` (FSDP
        ``CPUOffload``; ``zero3`` / ``hybrid_shard`` only); see :mod:`scalemodel.offload`
        [-].
    host_memory : float or None
        Host memory of one node, for ``offload``; None: the GPU's usual server's
        (:data:`scalemodel.offload.HOST_MEMORY`) [bytes].
    suggest : bool
        When it does not fit, also try the options that would (checkpointing, offload,
        more sharding) and list them in ``suggestions`` [-].
    shard_group : int or None
        ``zero1`` / ``zero2`` / ``zero3``: the state is sharded over groups of this many
        GPUs (dividing every ``n``) and replicated across the groups; None: over all
        ``n`` [GPUs].
    tp : int
        Tensor-parallel GPUs per replica (Megatron-style, no sequence parallelism): each
        GPU holds ``1/(tp pp)`` of the model state (with a pipeline, ``1/tp`` of its
        heaviest stage's: ``scalemodel.memory.gpu_params``), and its activations follow
        Korthikanti et al. with tensor parallelism
        (``scalemodel.memory.model_parallel_activations``);
        ``n`` counts all GPUs. With ``sharding`` (``pp=1``) the ``1/tp`` slice is sharded
        over the data-parallel group of ``n / tp`` GPUs (``shard_group`` counts
        data-parallel GPUs; ``hybrid_shard``: the ``gpus_per_node / tp`` of a node), as
        FSDP x TP and Megatron-LM's distributed optimizer do (:mod:`scalemodel.parallel`)
        [GPUs].
    pp : int
        Pipeline stages per replica, 1F1B [stages].
    microbatches : int or None
        Micro-batches per step (the first stage keeps ``min(pp, microbatches)`` in
        flight); required with ``pp > 1`` [micro-batches].
    virtual_stages : int
        Model chunks per pipeline stage, > 1 for Megatron's interleaved 1F1B, as in
        :func:`~scalemodel.scaling_factor`: the stages keep the chunks their schedule
        holds in flight, the first ``pp * virtual_stages + pp - 1`` chunks of
        ``layers / (pp * virtual_stages)`` layers when ``microbatches > pp``
        (Korthikanti et al.'s factor ``1 + (pp - 1) / (pp * virtual_stages)`` on 1F1B's
        activations; ``scalemodel.parallel.in_flight_chunks``) [chunks].
    sequence_parallel : bool
        Megatron-style sequence parallelism over the ``tp`` ranks (as in
        :func:`~scalemodel.scaling_factor`): each layer's layer-norm, dropout and
        residual activations, and the full checkpoint's stored input, split along the
        sequence over the ``tp`` ranks (Korthikanti et al., Sec. 4.2.2, Table 2;
        ``scalemodel.memory.model_parallel_activations``). Ignored, with a
        :class:`~scalemodel.exceptions.ModelWarning`, at ``tp == 1`` [-].
    measure : str
        ``"reserved"`` (the default): what the caching allocator holds
        (``max_memory_reserved``, what torchtitan logs as "memory", and what runs out
        first), the allocated peak plus the allocator's ``overheads`` (module docstring);
        ``"allocated"``: the live tensors at the peak (``max_memory_allocated``).
        ``per_gpu`` and ``fits`` follow it; both views are in the result [-].
    fragmentation : float or str
        Fraction of the reserved memory that is free space inside segments, for
        ``measure="reserved"``: 0 (``expandable_segments:True``) to about 0.33 (GMLake's
        largest with default segments; 0.15 its mean); or the allocator's setting by name,
        ``"expandable_segments"`` (0) or ``"default_segments"`` (0.15,
        :data:`~scalemodel.memory.FRAGMENTATION`) [-].
    loss : str
        How the cross-entropy loss is computed, which sets its backward peak
        (:func:`scalemodel.checkpointing.loss_bytes`): ``"unfused"`` (the default,
        PyTorch's ``cross_entropy``: :math:`12sbV` bytes) or ``"fused"`` (a fused kernel
        on the 16-bit logits, flash-attention's ``CrossEntropyLoss`` as LLM Foundry's
        MPT uses it: :math:`4sbV + 16sb`) or ``"unfused+logits"`` (``cross_entropy`` on
        fp32 logits the loop keeps through backward, torchtitan before 2024-12:
        :math:`16sbV`) [-].
    accounting : str
        ``"zero"`` (the default: ZeRO's persistent model state, every activation term at
        once) or ``"fsdp"`` (what a PyTorch FSDP step holds at its largest moment: fp32
        sharded parameters as the master, no gradients before backward, the loss's peak
        and the recompute apart, FSDP2's reduce-scatter stream pool in the reserved view;
        ``zero2`` / ``zero3`` / ``hybrid_shard`` without offload; module docstring) [-].

    Returns
    -------
    MemoryEstimate
        ``per_gpu`` [bytes], ``parts``, ``fits``, the GPU, the host memory per GPU, the
        settings assumed and, when it does not fit, the options that would.

    Warns
    -----
    ModelWarning
        ``activation_checkpointing`` or ``loss="fused"`` on a profile without a
        transformer config (its activations are unknown, so they are left out).

    Raises
    ------
    UnknownNameError
        Unknown strategy, optimizer, GPU, model or ``measure`` (``"allocated"``,
        ``"reserved"``); suggests the closest.
    HostMemoryError
        Offload whose host part does not fit in ``host_memory`` (given: the parameter
        named), or in the GPU's usual server's (``offload`` named).
    InvalidParameterError
        Sharding with ``n=1``; ``"hybrid_shard"`` without ``gpus_per_node`` on a GPU with
        no usual server; a negative bucket; ``activation_checkpointing`` or ``offload``
        outside the documented values; parameter offload without ``zero3`` /
        ``hybrid_shard``; no ``host_memory`` known for the GPU with offload;
        ``shard_group`` below 2, not dividing
        ``n`` (the message lists the valid groups) or with a strategy other than
        ``zero1`` / ``zero2`` / ``zero3``; ``tp`` / ``pp`` not dividing the heads / layers
        (the message lists the valid values), ``n`` not a multiple of ``tp * pp``, ``pp > 1``
        without ``microbatches``, or with sharding, selective or partial checkpointing, or
        a profile without a transformer config, or with ``"selective"`` under flash
        attention; ``tp > 1`` with sharding and ``n / tp``
        below 2, a ``shard_group`` not dividing ``n / tp``, ``hybrid_shard`` with
        ``gpus_per_node / tp`` below 2, or ``accounting="fsdp"``; ``virtual_stages`` below 1, not dividing
        a stage's layers, above 1 without ``pp > 1`` or with ``microbatches`` not a
        multiple of ``pp`` (as :func:`~scalemodel.iteration_time`); ``fragmentation``
        outside [0, 1); ``loss`` outside ``"unfused"``, ``"fused"``, ``"unfused+logits"``
        (the message names the value and the valid ones); ``accounting`` outside
        ``"zero"``, ``"fsdp"``, or ``"fsdp"`` with a strategy other than ``zero2`` /
        ``zero3`` / ``hybrid_shard`` or with offload; ``hybrid_shard`` on ``n`` GPUs
        beyond a node that is not a multiple of ``gpus_per_node`` (as the time model).
    """
    return _memory(model, n, sharding, gpu, optimizer, param_dtype, grad_dtype,
                   activation_checkpointing, micro_batch, seq, gpus_per_node, bucket_bytes,
                   flash_attention, offload, host_memory, suggest, shard_group, tp, pp,
                   microbatches, measure, fragmentation, virtual_stages, loss, accounting,
                   sequence_parallel)


def _memory_lean(model, n, **kw):
    """:func:`memory` of ``model``, ``n`` and the keywords ``kw`` (the others at its
    defaults) as ``(estimate, GPUSpec)``: the estimate only ``(per_gpu, fits)`` when it
    fits (:class:`_Fit`, the same values), what a solver's memory check reads; the full
    :class:`MemoryEstimate` when it does not [-]."""
    args = dict(_MEMORY_DEFAULTS, **kw)
    if len(args) != len(_MEMORY_DEFAULTS):  # (as memory() refuses an unknown keyword)
        raise TypeError(f"memory() got unexpected keywords "
                        f"{sorted(set(kw) - set(_MEMORY_DEFAULTS))}")
    return _memory(model, n, *[args[k] for k in _MEMORY_DEFAULTS], lean=True)


def _sharding_parts(sharding, shard_group):
    """``(strategy, shard_group)`` of memory's ``sharding`` as the time calls take it:
    None is ``"none"``; a :class:`~scalemodel.sharding.Sharding` gives its strategy and
    its ``shard_group`` (unless the call gives one: a different one is an error)."""
    from .sharding import Sharding

    if sharding is None:
        return "none", shard_group
    if not isinstance(sharding, Sharding):
        return sharding, shard_group
    own = sharding.shard_group
    if own is not None and shard_group is not None and own != shard_group:
        raise InvalidParameterError("shard_group", shard_group, f"differs from the "
                                    f"sharding's shard_group={own!r}", "Give it once")
    return sharding.strategy, own if shard_group is None else shard_group


def _memory(model, n, sharding, gpu, optimizer, param_dtype, grad_dtype,
            activation_checkpointing, micro_batch, seq, gpus_per_node, bucket_bytes,
            flash_attention, offload, host_memory, suggest, shard_group, tp, pp,
            microbatches, measure, fragmentation, virtual_stages, loss, accounting,
            sequence_parallel, lean=False):
    """:func:`memory` of its arguments, in its order; ``lean``: ``(estimate, GPUSpec)``,
    the estimate only ``(per_gpu, fits)`` (:class:`_Fit`, the same values) when it fits
    (the same checks, warnings and errors first; a full estimate when it does not) [-]."""
    sharding, shard_group = _sharding_parts(sharding, shard_group)
    strategy = canonical_sharding(sharding)
    ns = _check_n(n, strategy)
    spec = get_gpu(gpu)
    if not isinstance(optimizer, str) or optimizer.strip().lower() not in OPTIMIZER_STATES:
        raise UnknownNameError("optimizer", optimizer, OPTIMIZER_STATES)
    if flash_attention is None:  # the profile's own attention, else flash attention
        prov = getattr(model, "provenance", None)
        flash_attention = not (isinstance(prov, dict) and "attention_scores" in prov)
    for name, flag in (("flash_attention", flash_attention), ("suggest", suggest)):
        if not isinstance(flag, (bool, np.bool_)):  # "no" would be read as True
            raise ParameterTypeError(name, flag, "True or False")
    ck = resolve_checkpointing(activation_checkpointing, bool(flash_attention))
    mode = canonical_offload(offload)
    check_offload_sharding(mode, strategy)
    bucket = _nonneg_bytes(bucket_bytes, "bucket_bytes")
    if bucket > MAX_BUCKET_BYTES:  # (1e300 gave a 1e300-byte answer)
        raise InvalidParameterError("bucket_bytes", bucket_bytes, f"must be at most "
                                    f"{MAX_BUCKET_BYTES:.3g} bytes (a bucket_cap_mb of "
                                    f"{MAX_BUCKET_CAP_MB:g}, DDP's largest here)")
    view = _check_measure(measure, fragmentation)
    kind = canonical_loss(loss)
    acc = _check_accounting(accounting, strategy, mode)
    cfg, psi, prof_elem, label = _resolve_model(model, micro_batch, seq)
    if cfg is None and ck.mode != "none":  # said, not silently dropped
        warnings.warn(ModelWarning(
            f"activation_checkpointing={activation_checkpointing!r} is left out of the "
            f"memory of {label}: it has no transformer config, so its activations are "
            "unknown and not counted (pass a TransformerConfig or a built-in LLM)"),
            stacklevel=3)
    if cfg is None and kind != "unfused":
        warnings.warn(ModelWarning(
            f"loss={loss!r} is left out of the memory of {label}: it has no transformer "
            "config, so its activations (the loss among them) are unknown and not counted"),
            stacklevel=3)
    ignored = [(name, value, f"{label} has no transformer config, so its activations "
                "are unknown and not counted") for name, value, given in (
                    ("seq", seq, seq is not None), ("micro_batch", micro_batch,
                                                    micro_batch is not None),
                    ("flash_attention", flash_attention, flash_attention is False))
               if cfg is None and given]
    if host_memory is not None and mode == "none":
        ignored.append(("host_memory", host_memory, "nothing is offloaded (offload='none')"))
    for name, value, why in ignored:  # said, not silently dropped (an audit's finding)
        warnings.warn(ModelWarning(f"{name}={value!r} has no effect: {why}"), stacklevel=3)
    group = _check_shard_group(shard_group, strategy, ns)
    mp = _check_model_parallel(tp, pp, microbatches, cfg, ns, strategy, ck, label,
                               virtual_stages, sequence_parallel)
    node = _count_or_none(gpus_per_node)
    if mp is not None and (node is not None or spec.gpus_per_server):  # as the time model
        from .parallel import check_tp_in_node

        check_tp_in_node(mp, cfg.heads, int(node or spec.gpus_per_server),
                         usual=node is None)
    if sequence_parallel and (mp is None or mp.tp == 1):  # said, not silently dropped
        from .parallel import SEQUENCE_PARALLEL_IGNORED

        warnings.warn(ModelWarning(f"sequence_parallel=True has no effect: "
                                   f"{SEQUENCE_PARALLEL_IGNORED}"), stacklevel=3)
    if mp is not None and strategy != "none":  # the data-parallel group of n / tp GPUs
        dp = np.asarray(mp.dp(ns))
        if group is not None and np.any(dp % group):
            from .sharding import _divisors as divisors

            first = int(dp[dp % group != 0].flat[0])
            raise InvalidParameterError(
                "shard_group", group, f"with tp={mp.tp} a shard group counts data-parallel "
                f"GPUs and must divide n / tp = {first}: valid are {divisors(first)}")
        if acc == "fsdp":
            raise InvalidParameterError("accounting", accounting, f"'fsdp' with tp={mp.tp} "
                                        "is not modelled", "Use accounting='zero'")
    acts = {}  # per call: what the suggestions' estimates share with this one
    if lean:  # (per_gpu, fits) alone: what a solver's memory note needs when it fits
        fit = _estimate(cfg, gpu_params(cfg, psi, mp), prof_elem, label, ns,
                        strategy, spec, optimizer, param_dtype, grad_dtype, ck, gpus_per_node,
                        bucket, mode, host_memory, group, mp, view, kind, acc, acts, True)
        if fit.fits is True:
            return fit, spec
    est = _estimate(cfg, gpu_params(cfg, psi, mp), prof_elem, label, ns, strategy,
                    spec, optimizer, param_dtype, grad_dtype, ck, gpus_per_node, bucket, mode,
                    host_memory, group, mp, view, kind, acc, acts)
    if suggest and est.fits is not True and not np.all(est.fits):
        check = _model_parallel_checker(tp, pp, microbatches, cfg, ns, label, virtual_stages,
                                        sequence_parallel, ((tp, ck), mp))

        def estimate(strat, checkpointing, off, t=tp):
            m = check(t, strat, checkpointing)
            return _estimate(cfg, gpu_params(cfg, psi, m), prof_elem, label,
                             _check_n(n, strat), strat, spec, optimizer, param_dtype,
                             grad_dtype, checkpointing, gpus_per_node, bucket, off,
                             host_memory, _check_shard_group(shard_group, strat, ns), m,
                             view, kind, _check_accounting(acc, strat, off), acts, True)

        est = attrs.evolve(est, suggestions=_suggestions(
            est, ck, estimate, 1 if mp is None else mp.tp, gpus_per_node or 8))
    return (est, spec) if lean else est


_MEMORY_DEFAULTS = {name: par.default for name, par in
                    inspect.signature(memory).parameters.items()
                    if par.kind is inspect.Parameter.KEYWORD_ONLY}
""":func:`memory`'s keywords and their defaults, in its (and :func:`_memory`'s) order."""


def _dtypes(cfg, prof_elem, param_dtype, grad_dtype):
    from .workloads import _grad_dtype

    if param_dtype is None:
        pd = _grad_dtype(cfg, None) if cfg is not None else \
            ("bf16" if prof_elem == 2 else "fp32")
    else:
        pd = canonical_dtype(param_dtype, "param_dtype")
    pd = "fp32" if pd == "tf32" else pd
    gd = pd if grad_dtype is None else canonical_dtype(grad_dtype, "grad_dtype")
    gd = "fp32" if gd == "tf32" else gd
    return pd, gd


def _estimate(cfg, psi, prof_elem, label, ns, strategy, spec, optimizer, param_dtype,
              grad_dtype, ck, gpus_per_node, bucket, mode, host_memory, shard_group=None,
              mp=None, view=("allocated", 0.0), loss="unfused", accounting="zero",
              acts=None, lean=False):
    """The estimate, once every argument is checked; ``acts``: a dict of the activation
    bytes already computed in this call (the suggestions' estimates share them), or None;
    ``lean``: only ``(per_gpu, fits)`` (:class:`_Fit`), what a suggestion reads."""
    states = OPTIMIZER_STATES[optimizer.strip().lower()]
    if acts is not None and all(d is None or type(d) is str for d in (param_dtype, grad_dtype)):
        key = ("dtypes", param_dtype, grad_dtype)  # the same call's: the same config
        if key not in acts:
            acts[key] = _dtypes(cfg, prof_elem, param_dtype, grad_dtype)
        pd, gd = acts[key]
    else:
        pd, gd = _dtypes(cfg, prof_elem, param_dtype, grad_dtype)
    pb, gb = DTYPE_BYTES[pd], DTYPE_BYTES[gd]
    master = 4 if pb < 4 else 0
    ob = master + 4 * states

    scalar = ns.ndim == 0  # one answer: Python floats (the array path gives the same)
    node, one, div_p, div_g, div_o = _divisors(ns, scalar, strategy, spec, gpus_per_node,
                                               shard_group)
    if mp is not None and strategy != "none":  # 1/tp of the state, over n / tp ranks
        _, _, div_p, div_g, div_o = _divisors(ns // mp.tp, scalar, strategy, spec,
                                              _dp_node(node, mp, strategy), shard_group)
    params, grads, optim = pb * psi / div_p, gb * psi / div_g, ob * psi / div_o

    fsdp = accounting == "fsdp"
    if fsdp:
        notes = []
        params, grads, optim, shard = _fsdp_state(psi, pb, states, strategy, div_o, one,
                                                  notes)
    else:
        notes = [f"{pd} parameters, {gd} gradients, {optimizer} with "
                 f"{'an fp32 master copy and ' if master else ''}{states} fp32 state(s) "
                 f"({pb + gb + ob} bytes per parameter unsharded; ZeRO, arXiv:1910.02054)"]
    host = 0.0 * one
    if mode != "none":  # scalemodel.offload: the host holds these instead
        params, grads, optim, host = _offloaded(params, grads, optim, psi, div_o, one, mode,
                                                notes)
        _check_host(host, mode, spec, node, ns, host_memory)
    buffers = bucket * one
    act = None
    if cfg is not None:
        act = _activation_total(cfg, ck, mp, loss, fsdp, acts)
        activations, buffers = _activations_and_buffers(cfg, ck, mp, strategy, pb, gb, one,
                                                        buffers, notes, loss, fsdp, act)
    else:
        activations = None
        notes.append(f"{label}: no transformer config, so activations are unknown and not "
                     "counted; parameters from the gradient bytes")
    pool = 0.0 * one
    if fsdp:  # the larger of the forward/backward peak and the optimizer step
        params, grads, optim, buffers, activations, pool = _fsdp_peak(
            params, grads, optim, buffers, activations, shard, bucket * one, scalar,
            reduce_scatter_pool_bytes(cfg if cfg is not None else psi, div_o))
    total = params + grads + optim + buffers + (activations if activations is not None else 0)
    overheads = _reserved_overheads(cfg, ck, mp, strategy, pb, total, one, view[1], loss,
                                    accounting, pool, act, acts)
    reserved = total + sum(overheads.values())
    if view[0] == "reserved":
        notes.append("reserved = allocated + allocator rounding + FSDP copy-in stream "
                     + ("pool + reduce-scatter stream pool " if fsdp else "pool ")
                     + f"+ fragmentation ({view[1]:g} of reserved)")

    def out(x):
        return None if x is None else (float(x) if scalar else x)

    counted = reserved if view[0] == "reserved" else total
    fits = counted <= spec.hbm_bytes
    if lean:
        return _Fit(out(counted), bool(fits) if scalar else fits)
    parts = {"parameters": out(params), "gradients": out(grads), "optimizer": out(optim),
             "activations": out(activations), "buffers": out(buffers)}
    settings = _settings(strategy, shard_group, mp, ck, loss, mode, optimizer, accounting,
                         pd, gd, cfg, spec, view)
    return MemoryEstimate(per_gpu=out(counted), parts=types.MappingProxyType(parts),
                          fits=bool(fits) if scalar else fits, gpu=spec,
                          sharding=strategy, n=int(ns) if scalar else ns,
                          parameter_count=psi, complete=activations is not None,
                          notes="; ".join(notes), host_per_gpu=out(host),
                          settings=settings, measure=view[0], allocated_per_gpu=out(total),
                          reserved_per_gpu=out(reserved),
                          overheads=types.MappingProxyType(
                              {k: out(v) for k, v in overheads.items()}))


class _Fit(typing.NamedTuple):
    """What a suggestion reads of an estimate (:func:`_suggestions`): ``per_gpu``
    [bytes] and ``fits``, as :class:`MemoryEstimate` has them."""

    per_gpu: object
    fits: object


def _settings(strategy, shard_group, mp, ck, loss, mode, optimizer, accounting, pd, gd,
              cfg, spec, view):
    """What an estimate assumed, as :attr:`MemoryEstimate.settings` shows it [-]."""
    return types.MappingProxyType({
        "sharding": strategy, "shard_group": shard_group,
        **({} if mp is None else {"tp": mp.tp, "pp": mp.pp,
                                  "microbatches": mp.microbatches,
                                  "virtual_stages": mp.virtual_stages,
                                  "sequence_parallel": mp.sequence_parallel}),
        "activation_checkpointing": ck.describe(),
        "flash_attention": bool(ck.flash_attention), "loss": loss, "offload": mode,
        "optimizer": optimizer, "accounting": accounting,
        "param_dtype": pd, "grad_dtype": gd,
        "micro_batch": None if cfg is None else cfg.micro_batch,
        "seq": None if cfg is None else cfg.seq, "gpu": spec.name,
        "measure": view[0], "fragmentation": view[1]})


def _dp_node(node, mp, strategy):
    """GPUs of one data-parallel group in a node of ``node`` GPUs, ``node / tp``: the
    shard group of ``hybrid_shard`` with tensor parallelism [GPUs]."""
    if strategy != "hybrid_shard":
        return None
    if node is None or node % mp.tp or node // mp.tp < 2:
        raise InvalidParameterError(
            "sharding", strategy, f"with tp={mp.tp} hybrid_shard shards over the "
            f"gpus_per_node / tp data-parallel GPUs of a node, which needs gpus_per_node a "
            f"multiple of {2 * mp.tp} (got {node})",
            "Use shard_group= (counted in data-parallel GPUs), or another sharding")
    return node // mp.tp


def _divisors(ns, scalar, strategy, spec, gpus_per_node, shard_group):
    """GPUs per node, a one of the answer's shape, and what the parameters, gradients
    and optimizer state are divided by under ``strategy`` (1 or the shard group) [-]."""
    group = float(ns) if scalar else ns.astype(float)
    node = spec.gpus_per_server if gpus_per_node is None else gpus_per_node
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or not isinstance(
            gpus_per_node, (int, np.integer)) or not 1 <= gpus_per_node <= MAX_COUNT):
        raise InvalidParameterError("gpus_per_node", gpus_per_node,
                                    f"must be an integer in [1, {MAX_COUNT:,}]")
    if strategy == "hybrid_shard":
        if node is None:
            raise InvalidParameterError("gpus_per_node", None, f"the {spec.name} has no usual "
                                        "server recorded", "Pass gpus_per_node=")
        if node < 2:  # as the time model refuses it (and zero3 with shard_group=1)
            raise InvalidParameterError(
                "gpus_per_node", node, "hybrid_shard shards over the GPUs of a node, so it "
                "needs at least 2 of them", "Use sharding='none' to replicate, or a larger "
                "gpus_per_node")
        split = (group > node) & (np.fmod(group, node) != 0)  # as the time model refuses
        if np.any(split):  # (sharding._hybrid_group): PyTorch's mesh needs whole nodes
            first = group if scalar else group[split].flat[0]
            raise InvalidParameterError(
                "n", int(first), f"hybrid_shard needs n to be a multiple of "
                f"gpus_per_node={node} (a full shard group per node)")
        group = min(group, float(node)) if scalar else np.minimum(group, float(node))
    if shard_group is not None:  # sharded over the group, replicated across groups
        group = float(shard_group) if scalar else np.full_like(group, float(shard_group))
    one = 1.0 if scalar else np.ones_like(group)
    div_p = group if strategy in ("zero3", "hybrid_shard") else one
    div_g = group if strategy in ("zero2", "zero3", "hybrid_shard") else one
    div_o = one if strategy == "none" else group
    return node, one, div_p, div_g, div_o


def _check_accounting(accounting, strategy, mode) -> str:
    """``accounting`` checked against the strategy and the offload mode [-]."""
    if not isinstance(accounting, str) or accounting.strip().lower() not in ACCOUNTINGS:
        raise InvalidParameterError("accounting", accounting, "must be one of "
                                    + ", ".join(repr(a) for a in ACCOUNTINGS))
    acc = accounting.strip().lower()
    if acc == "fsdp" and strategy not in FSDP_SHARDINGS:
        raise InvalidParameterError("accounting", accounting, f"'fsdp' applies to sharding "
                                    f"{', '.join(FSDP_SHARDINGS)}, not {strategy!r}")
    if acc == "fsdp" and mode != "none":
        raise InvalidParameterError("accounting", accounting, f"'fsdp' with offload={mode!r} "
                                    "is not modelled", "Use accounting='zero'")
    return acc


def _fsdp_state(psi, pb, states, strategy, group, one, notes):
    """PyTorch FSDP's model state at the forward/backward peak: (parameters, gradients,
    optimizer, the fp32 shard) [bytes] (module docstring, ``accounting="fsdp"``)."""
    shard = 4.0 * psi / group  # fp32 sharded parameters: the master weights
    params = shard + (pb * psi * one if strategy == "zero2" else 0.0 * one)
    notes.append("accounting='fsdp': fp32 sharded parameters as the master (4 bytes), "
                 f"{states} fp32 optimizer state(s), no gradient before backward "
                 "(zero_grad(set_to_none) before the forward; 4 bytes at the optimizer step)"
                 + ("; the 16-bit unsharded parameters held from forward to backward "
                    "(reshard_after_forward=False)" if strategy == "zero2" else ""))
    return params, 0.0 * one, 4.0 * states * psi / group, shard


def _fsdp_peak(params, grads, optim, buffers, activations, shard, bucket, scalar, pool):
    """The parts at the larger of FSDP's forward/backward peak and its optimizer step
    (the sharded parameters, gradients and state and one bucket), and the part of the
    reduce-scatter stream's pool ``pool`` that is not among them (the gradients, live at
    the step) [bytes]."""
    fwd = params + grads + optim + buffers + (activations if activations is not None else 0)
    step = shard + shard + optim + bucket
    at_step = np.asarray(step > fwd)
    if not at_step.any():
        return params, grads, optim, buffers, activations, pool

    def pick(a, b):
        res = np.where(at_step, a, b)
        return float(res) if scalar else res

    act = None if activations is None else pick(0.0, activations)
    grads = pick(shard, grads)
    return (pick(shard, params), grads, optim, pick(bucket, buffers), act, pool - grads)


def _offloaded(params, grads, optim, psi, div_o, one, mode, notes):
    """Move the offloaded state to the host: (parameters, gradients, optimizer, host)
    per GPU [bytes]; notes what moved."""
    host = optim + 4.0 * psi / div_o
    optim = 0.0 * one
    if mode == "optimizer+parameters":
        host = host + params
        params, grads = 0.0 * one, 0.0 * one
    notes.append(f"offload={mode!r}: optimizer state and fp32 gradient shard"
                 + (", parameter shard" if mode == "optimizer+parameters" else "")
                 + " in host memory")
    return params, grads, optim, host


def _activation_total(cfg, ck, mp, loss, phases, acts=None):
    """Activation bytes of one GPU (:func:`~scalemodel.checkpointing.activation_bytes`, or
    :func:`model_parallel_activations` with ``mp``), looked up in ``acts`` (a dict, or
    None) when an earlier estimate of the same call computed them [bytes]."""
    key = (ck, mp, loss, phases)
    hit = None if acts is None else acts.get(key)
    if hit is not None:
        return hit
    act = _activations_of(cfg, ck, mp, loss, phases)
    if acts is not None:
        acts[key] = act
    return act


@functools.lru_cache(maxsize=256, typed=True)
def _activations_of(cfg, ck, mp, loss, phases):
    """:func:`~scalemodel.checkpointing.activation_bytes`, or
    :func:`model_parallel_activations` with ``mp``, once per config and settings (pure
    functions of them) [bytes]."""
    return (activation_bytes(cfg, ck, loss=loss, phases=phases) if mp is None
            else model_parallel_activations(cfg, ck, mp, loss))


def _activations_and_buffers(cfg, ck, mp, strategy, pb, gb, one, buffers, notes,
                             loss="unfused", phases=False, act=None):
    """Activations of a transformer config (``act`` when computed already), and the
    buffers with the all-gathered blocks under zero3 / hybrid_shard [bytes]; notes the
    formulas."""
    if act is None:
        act = _activation_total(cfg, ck, mp, loss, phases)
    if mp is not None:
        from .parallel import in_flight_chunks

        notes.append(f"tp={mp.tp} x pp={mp.pp}: "
                     + (f"1/{mp.size} of the model state per GPU;" if mp.pp == 1 else
                        f"1/{mp.tp} of the heaviest stage's model state per GPU (the first "
                        "with the embedding or the last with the head, and "
                        f"{cfg.layers // mp.pp} layers);")
                     + (" activations sbh((R + S)/t + A as/(ht)) per layer (Korthikanti et "
                        "al., Table 2, with sequence parallelism; GPT: R + S = 34, A = 5)"
                        if mp.sequence_parallel else
                        " activations sbh(R + S/t + A as/(ht)) per layer (Korthikanti et "
                        "al., Table 2, no sequence parallelism; GPT: R = 10, S = 24, A = 5)")
                     + ", the first stage keeping "
                     + (f"{min(mp.pp, mp.microbatches)} micro-batch(es) of its layers"
                        if mp.virtual_stages == 1 else
                        f"{in_flight_chunks(mp)} chunks of "
                        f"{cfg.layers // (mp.pp * mp.virtual_stages)} layers in flight "
                        f"(interleaved 1F1B, {mp.virtual_stages} chunks per stage)"))
    r, split, score = activation_units(cfg)
    notes.append("activations: Korthikanti et al. arXiv:2205.05198 counted for this layer, "
                 f"sbh({r + split:g} + {score:g}as/h) per layer"
                 + (f" without the {score:g}as/h score term (flash attention)"
                    if ck.flash_attention else "")
                 + f"; checkpointing {ck.describe()} (scalemodel.checkpointing)"
                 + {"unfused": "; loss peak 12sbV (unfused cross_entropy: three fp32 sbV "
                               "tensors)",
                    "fused": "; loss peak 4sbV + 16sb (fused cross-entropy: 16-bit logits "
                             "and their gradient)",
                    "unfused+logits": "; loss peak 16sbV (unfused cross_entropy and the "
                                      "fp32 logits kept through backward)"}[loss]
                 + ("; the loss's peak and the recompute apart (the larger)" if phases
                    else ""))
    if strategy in ("zero3", "hybrid_shard"):
        biggest, root = _block_and_root(cfg)
        gathered = pb * (2 * biggest + root) + gb * biggest * one
        if mp is not None:  # each GPU gathers its tensor-parallel slice
            gathered = gathered / mp.tp
        buffers = buffers + gathered
        notes.append("buffers: two all-gathered blocks (current + prefetched), one "
                     "block's unsharded gradients, the gathered root unit (embeddings, "
                     "head) and one bucket")
    return act * one, buffers


def _check_host(host, mode, spec, node, ns, host_memory):
    """Raise unless a node's host memory holds its GPUs' offloaded state."""
    if host_memory is None:
        cap = default_host_memory(spec)
        if cap is None:
            raise InvalidParameterError(
                "host_memory", None, f"offload={mode!r} needs the host memory of a node, "
                f"and none is recorded for the {spec.name}'s servers",
                "Pass host_memory= (bytes per node)")
    else:
        cap = _nonneg_bytes(host_memory, "host_memory")
    gpus = np.minimum(np.asarray(ns, float), float(node or 1))  # a node's GPUs in the job
    host, gpus = np.broadcast_arrays(np.asarray(host, float), gpus)
    per_node = host * gpus
    worst = int(np.argmax(per_node))
    need = float(per_node.flat[worst])
    if need > cap:  # named as given: host_memory, or offload against the default node
        given = host_memory is not None
        raise HostMemoryError(
            "host_memory" if given else "offload", host_memory if given else mode,
            f"offload={mode!r} needs {need / 2**30:.1f} GiB of host memory per node "
            f"({int(gpus.flat[worst])} GPU(s) x {float(host.flat[worst]) / 2**30:.1f} GiB), "
            "more than the "
            + (f"node's {cap / 2**30:.1f} GiB" if given else
               f"{cap / 2**30:.1f} GiB of a usual {spec.name} server (the default "
               "host_memory)"),
            "Shard over more GPUs, offload less, or pass a larger host_memory=")


_MORE_SHARDING = {"none": "zero1", "zero1": "zero2", "zero2": "zero3"}


def _suggestions(est, ck, estimate, tp=1, node=8):
    """(label, per-GPU bytes) of the options that would fit, smallest change first (at
    most four): one setting changed (more checkpointing, more sharding, offload), then
    two (more sharding or the optimizer's offload, each with more checkpointing), then
    all three, each only where no part of it fits alone; tensor parallelism
    (``sharding="none"`` only, inside a node of ``node`` GPUs) is tried at 2, 4, ...
    times ``tp`` after the others, and the smallest that fits is listed besides them (a
    fifth entry at most). When none fits, the one that comes closest, if it needs less
    than the job as asked. ``estimate(strategy, checkpointing, offload, tp)`` is the
    estimate with the other arguments as asked."""
    found, closest, tried, fitting = [], None, [], []
    current = float(np.max(est.per_gpu))
    for group in _suggestion_tries(est, ck, tp, node):
        for changes, t in group:
            if t is None and (changes in tried or any(f.items() <= changes.items()
                                                      for f in fitting)):
                continue  # (the same option again, or one whose part already fits)
            tried.append(changes)
            label = ", ".join(f"{k}={v!r}" for k, v in changes.items()) or f"tp={t}"
            try:
                alt = estimate(changes.get("sharding", est.sharding),
                               _ck_of(changes, ck), changes.get("offload",
                                                                 est.settings["offload"]),
                               *((t,) if t else ()))
            except ScalemodelError:  # the host memory would not hold it; tp not dividing
                continue
            per, fits = alt.per_gpu, alt.fits  # (one answer: a float and a bool)
            worst = per if type(per) is float else float(np.max(per))
            if fits if type(fits) is bool else np.all(fits):
                found.append((label, worst))
                fitting.append(changes)
                if len(found) == 4 or t:  # (the smallest tensor-parallel size is enough)
                    break
            elif worst < current and (closest is None or worst < closest[1]):
                closest = (label, worst)
    if not found and closest is not None:
        return ((closest[0] + _CLOSEST, closest[1]),)
    return tuple(found)


def _ck_of(changes, ck):
    """The Checkpointing a suggestion's ``changes`` name (``ck`` when they name none)."""
    from .checkpointing import Checkpointing

    mode = changes.get("activation_checkpointing")
    return ck if mode is None else Checkpointing(mode, None, ck.flash_attention)


def _suggestion_tries(est, ck, tp, node):
    """The options :func:`_suggestions` tries, as two groups (the others, then tensor
    parallelism) of ``(changes, tp or None)``: ``changes`` maps ``activation_checkpointing``,
    ``offload`` and ``sharding`` (in that order) to the values that differ from the job
    as asked; empty for tensor parallelism alone."""
    asked = {"activation_checkpointing": ck.mode if ck.fraction >= 1.0 else None,
             "offload": est.settings["offload"], "sharding": est.sharding}
    more_ck = []  # more checkpointing than asked (none < selective < full)
    if est.complete:
        more_ck = {"none": ["selective", "full"], "selective": ["full"]}.get(
            ck.mode, ["full"] if ck.fraction < 1.0 else [])
    more_shard, s = [], est.sharding
    while s in _MORE_SHARDING and bool(np.all(np.asarray(est.n) >= 2)):
        s = _MORE_SHARDING[s]
        more_shard.append(s)
    full = est.sharding in ("zero3", "hybrid_shard")
    opt = [] if asked["offload"] != "none" else ["optimizer"]
    everything = "optimizer+parameters"
    tries = [dict(activation_checkpointing=c) for c in more_ck]
    tries += [dict(sharding=s) for s in more_shard]
    tries += [dict(offload=o) for o in opt]
    tries.append(dict(offload=everything) if full else
                 dict(offload=everything, sharding="zero3"))
    tries += [dict(activation_checkpointing=c, sharding=s) for s in more_shard
              for c in more_ck]  # two settings changed
    tries += [dict(activation_checkpointing=c, offload=o) for o in opt for c in more_ck]
    if est.complete:
        tries.append(dict(activation_checkpointing="full", offload=everything,
                          sharding="zero3"))
    out = []
    for changes in tries:  # what differs from the job as asked, in the labels' order
        changes = {k: changes[k] for k in asked if k in changes and changes[k] != asked[k]}
        if changes:
            out.append((changes, None))
    t, tp_tries = 2 * tp, []
    while est.complete and est.sharding == "none" and t <= node:
        tp_tries.append(({}, t))
        t *= 2
    return out, tp_tries


def gpu_params(cfg, psi, mp):
    r"""Parameters one GPU of the job holds [-]: ``psi`` without model parallelism,
    :math:`\psi/t` with tensor parallelism alone; with a pipeline, :math:`1/t` of its
    heaviest stage's, the first (the embedding and :math:`L/p` layers) or the last
    (:math:`L/p` layers, the final norm and the head; with tied embeddings the copy of
    the word embeddings that Megatron-LM keeps there for the output layer), as Megatron-LM
    places them (its layers split evenly, ``--num-layers`` / ``--pipeline-model-parallel-
    size``). Counted as :math:`\psi/(t p)` it was 28 % low for Llama-3-8B at
    :math:`p = 8` (its 128k-token embedding holds the parameters of 2.4 layers).

    Parameters
    ----------
    cfg : TransformerConfig or None
        The model [-].
    psi : float
        The model's parameters [-].
    mp : ModelParallel or None
        The parallelism [-].
    """
    if mp is None:
        return psi
    if mp.pp == 1 or cfg is None:
        return psi / mp.size
    from .workloads import end_stage_params, stage_parts

    return psi * end_stage_params(stage_parts(cfg), mp.pp)[1] / mp.tp


@functools.lru_cache(maxsize=64)
def _block_and_root(cfg):
    """Parameters of the largest block and of the root unit (embeddings, head) [-]."""
    from .workloads import transformer_units

    u = transformer_units(cfg, "h100-sxm", efficiency=1.0)
    blocks = np.array(u.kind) == "block"
    biggest = float(u.param_count[blocks].max()) if blocks.any() else 0.0
    return biggest, float(u.param_count[~blocks].sum())


def _check_measure(measure, fragmentation):
    """(measure, fragmentation) checked, a named allocator setting as its fraction [-]."""
    if not isinstance(measure, str) or measure.strip().lower() not in MEASURES:
        raise UnknownNameError("measure", measure, MEASURES)
    if isinstance(fragmentation, str):
        key = fragmentation.strip().lower().replace("-", "_")
        if key not in FRAGMENTATION:
            raise UnknownNameError("fragmentation", fragmentation, tuple(FRAGMENTATION))
        fragmentation = FRAGMENTATION[key]
    f = _real(fragmentation)
    if f is None or not 0.0 <= f < 1.0:
        raise InvalidParameterError("fragmentation", fragmentation, "must be a fraction of "
                                    "the reserved memory in [0, 1)")
    return measure.strip().lower(), f


def allocator_block_bytes(nbytes):
    """Bytes PyTorch's CUDA caching allocator reserves for one request of ``nbytes``.

    Rounded up to a multiple of 512 bytes (``kMinBlockSize``); a request of 10 MiB or
    more (``kMinLargeAlloc``) gets a segment of its own, rounded up to a multiple of
    2 MiB (``kRoundLarge``). Smaller requests are packed into shared 2 MiB / 20 MiB
    segments whose rest serves other requests, so only their 512-byte rounding is
    counted (``c10/cuda/CUDACachingAllocator.cpp``, ``round_size`` and
    ``get_allocation_size``).

    Parameters
    ----------
    nbytes : float or array_like
        Requested sizes, >= 0 [bytes].

    Returns
    -------
    float or numpy.ndarray
        Reserved bytes per request [bytes].

    Raises
    ------
    InvalidParameterError
        A negative or non-finite size.

    Examples
    --------
    >>> from scalemodel.memory import allocator_block_bytes
    >>> allocator_block_bytes(1), allocator_block_bytes(10 * 2**20 + 1) / 2**20
    (512.0, 12.0)
    """
    if type(nbytes) is float and math.isfinite(nbytes) and nbytes >= 0:  # the common case
        block = max(math.ceil(nbytes / ALLOCATOR_MIN_BLOCK), 1) * float(ALLOCATOR_MIN_BLOCK)
        if nbytes >= ALLOCATOR_MIN_LARGE_ALLOC:
            return math.ceil(block / ALLOCATOR_ROUND_LARGE) * float(ALLOCATOR_ROUND_LARGE)
        return block
    arr = np.asarray(nbytes, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InvalidParameterError("nbytes", nbytes, "must be finite sizes >= 0 [bytes]")
    block = np.maximum(np.ceil(arr / ALLOCATOR_MIN_BLOCK), 1.0) * ALLOCATOR_MIN_BLOCK
    large = np.ceil(block / ALLOCATOR_ROUND_LARGE) * ALLOCATOR_ROUND_LARGE
    res = np.where(arr >= ALLOCATOR_MIN_LARGE_ALLOC, large, block)
    return float(res) if res.ndim == 0 else res


def side_stream_pool_bytes(cfg, param_bytes=2) -> float:
    """All-gather outputs cached in FSDP2's copy-in stream pool under ``zero3`` [bytes].

    FSDP2 allocates a unit's all-gather output on its all-gather copy-in stream and keeps
    the previous one until the next all-gather starts, so two outputs are alive at once;
    blocks freed on that stream are not reused by the default stream. The pool holds the
    two largest units' outputs: the root unit (embeddings, final norm, head) and the
    largest transformer block, or two blocks when a block is larger than the root.

    Parameters
    ----------
    cfg : TransformerConfig
        The model [-].
    param_bytes : float
        Bytes per all-gathered parameter (2 for bf16) [bytes].

    Examples
    --------
    >>> import scalemodel
    >>> from scalemodel.memory import side_stream_pool_bytes
    >>> round(side_stream_pool_bytes(scalemodel.llm_config("llama-3-8b")) / 2**30, 2)
    2.37
    """
    biggest, root = _block_and_root(cfg)
    units = sorted([root, biggest, biggest if cfg.layers > 1 else 0.0], reverse=True)
    return float(allocator_block_bytes(param_bytes * units[0])
                 + allocator_block_bytes(param_bytes * units[1]))


def _reserved_overheads(cfg, ck, mp, strategy, pb, total, one, fragmentation,
                        loss="unfused", accounting="zero", pool=0.0, act=None, acts=None):
    """The caching allocator's reserve besides the live tensors: rounding, the FSDP
    copy-in stream's pool, the reduce-scatter stream's pool (``pool``, FSDP accounting),
    fragmentation [bytes] (module docstring); ``act``: the activation bytes, when computed
    already; ``acts``: the dict of :func:`_estimate`'s, where the rounding is kept too."""
    rounding, side = 0.0 * one, 0.0 * one
    fsdp = accounting == "fsdp"
    if cfg is not None:
        t = 1 if mp is None else mp.tp
        key = ("rounding", ck, mp, loss, fsdp)
        blocks = None if acts is None else acts.get(key)
        if blocks is None:
            if act is None:
                act = _activation_total(cfg, ck, mp, loss, fsdp, acts)
            blocks = _rounding_of(cfg, t, loss, act)
            if acts is not None:
                acts[key] = blocks
        rounding = rounding + blocks
        if strategy in ("zero3", "hybrid_shard") or (fsdp and strategy == "zero2"):
            side = side + _side_pool_of(cfg, pb / t)
    pool = pool * one
    live = total + rounding + side + pool
    frag = live * (fragmentation / (1.0 - fragmentation))
    return {"rounding": rounding, "side_stream_pool": side, "reduce_scatter_pool": pool,
            "fragmentation": frag}


@functools.lru_cache(maxsize=256, typed=True)
def _rounding_of(cfg, t, loss, act):
    """:func:`_rounding_bytes`, once per config and arguments (a pure function of
    them) [bytes]."""
    return _rounding_bytes(cfg, t, loss, act)


@functools.lru_cache(maxsize=256, typed=True)
def _side_pool_of(cfg, param_bytes):
    """:func:`side_stream_pool_bytes`, once per config and parameter bytes [bytes]."""
    return side_stream_pool_bytes(cfg, param_bytes)


def _rounding_bytes(cfg, t, loss, act):
    """The allocator's rounding of the activations ``act`` [bytes] of ``cfg`` with tensor
    parallelism ``t`` [GPUs]: the layer tensors and the loss's [bytes]."""
    from .checkpointing import ACTIVATION_BYTES, loss_tensor_bytes

    s, b = float(cfg.seq), float(cfg.micro_batch)
    layer_tensor = ACTIVATION_BYTES * s * b * cfg.hidden
    tensors = [float(x) for x in loss_tensor_bytes(s, b, cfg.vocab, loss, t)]
    count = max(act - sum(tensors), 0.0) / layer_tensor
    return (count * (allocator_block_bytes(layer_tensor) - layer_tensor)
            + sum(allocator_block_bytes(x) - x for x in tensors))


@functools.lru_cache(maxsize=64)
def _unit_params(cfg):
    """Parameters of each FSDP unit: every block, and the root (all else) [-]."""
    from .workloads import transformer_units

    u = transformer_units(cfg, "h100-sxm", efficiency=1.0)
    blocks = np.array(u.kind) == "block"
    counts = np.asarray(u.param_count, float)
    return np.append(counts[blocks], counts[~blocks].sum())


def reduce_scatter_pool_bytes(model, group):
    """FSDP2's reduce-scatter stream pool: every unit's fp32 sharded gradients [bytes].

    Each unit's reduce-scatter output is allocated on the reduce-scatter stream and the
    sharded gradients are views of it, so after ``zero_grad`` frees them the blocks stay
    in that stream's pool (module docstring): one fp32 output of
    :math:`4 P_u / g` bytes per unit (every block, and the root with the embeddings and
    head), each rounded as the allocator does (:func:`allocator_block_bytes`).

    Parameters
    ----------
    model : TransformerConfig or float
        The model, or its parameter count (then :math:`4\\Psi/g`, unrounded) [-].
    group : float or array_like
        GPUs the state is sharded over [GPUs].

    Returns
    -------
    float or numpy.ndarray
        [bytes]

    Examples
    --------
    >>> import scalemodel
    >>> from scalemodel.memory import reduce_scatter_pool_bytes
    >>> cfg = scalemodel.llm_config("llama-3-8b")
    >>> round(reduce_scatter_pool_bytes(cfg, 8) / 2**30, 2)  # 33 units, each to 2 MiB
    3.8
    >>> round(reduce_scatter_pool_bytes(cfg.parameter_count, 8) / 2**30, 2)
    3.74
    """
    g = np.asarray(group, dtype=float)
    if isinstance(model, (int, float, np.floating)):
        res = 4.0 * float(model) / g
    else:
        units = _unit_params(model)
        res = allocator_block_bytes(4.0 * units[None, :] / g.reshape(-1, 1)).sum(axis=1)
        res = res.reshape(g.shape)
    return float(res) if np.ndim(res) == 0 else res
