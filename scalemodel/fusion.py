"""Gradient fusion: how gradient tensors are grouped into buckets (fused messages).

A fusion policy takes the gradient tensors in the order they become ready during the
backward pass (sizes [bytes] and ready times [s]) and returns, for every bucket, its size
and the time it is ready to be communicated (when its last gradient is ready).

Policies
--------
:class:`DDPBuckets`
    PyTorch ``DistributedDataParallel``: tensors in reverse registration order (about the
    backward order) are packed into buckets that close once they reach a size cap: 1 MiB
    for the first bucket (``dist._DEFAULT_FIRST_BUCKET_BYTES``), then ``bucket_cap_mb``
    (25 MiB) for the rest; a bucket may exceed its cap by its last tensor
    (``torch/nn/parallel/distributed.py`` and ``compute_bucket_assignment_by_size`` in
    ``torch/csrc/distributed/c10d/reducer.cpp``). PyTorch 2.x keeps the 1 MiB first
    bucket only when ``bucket_cap_mb`` is not given (``BucketCapacityConfig.create``);
    with a cap given, ``DDPBuckets(cap, first_bucket_bytes=cap)`` is what it does: 40 of
    40 bucket counts DDP reported on an H200 (``benchmarks/validate_framework.py``).
:class:`HorovodFusion`
    Horovod tensor fusion as modelled by Zhang et al. (arXiv:2006.10103): a fused buffer
    is sent once at least ``cycle_time`` (5 ms, ``HOROVOD_CYCLE_TIME``) of backward compute
    or at least ``threshold_bytes`` (64 MiB, ``HOROVOD_FUSION_THRESHOLD``) of gradients
    have accumulated since the last send, and the rest when backward ends.
:class:`PerTensor`
    No fusion: one message per gradient tensor, sent as soon as it is ready: wait-free
    backpropagation (WFBP, Zhang et al., "Poseidon", USENIX ATC 2017); ``"wfbp"``.
:class:`~scalemodel.fusion.AfterBackward`
    All gradients in one message after backward ends: bulk synchronous (BSP) without
    overlap; ``"bsp"``.
:class:`~scalemodel.fusion.MGWFBP`
    Merged-gradient WFBP (S. Shi, X. Chu, B. Li, "MG-WFBP: Efficient Data Communication
    for Distributed Synchronous SGD Algorithms", INFOCOM 2019, arXiv:1811.11141): walking
    the gradients in backward order, merge a gradient into the next one when the next is
    ready before the current one's all-reduce would end and either the all-reduce could
    not start before the next one is ready or waiting for it costs less than the
    all-reduce start-up time :math:`a` it saves. The all-reduce of :math:`s` bytes is
    modelled as :math:`a + b s`; the implementation of the authors
    (github.com/HKBU-HPML/MG-WFBP, ``distributed_optimizer.py``,
    ``_generate_groups_mgwfbp``) measures :math:`a, b` before training. That code also
    merges any tensor of fewer than 8192 elements whatever the timing, a rule outside
    the paper's algorithm that scalemodel leaves out (plans differ on models with many
    small tensors, biases and norms).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .units import check_positive

__all__ = ["Buckets", "DDPBuckets", "HorovodFusion", "PerTensor", "AfterBackward", "MGWFBP",
           "FUSIONS", "resolve_fusion", "bucket_ready_times", "MAX_BUCKET_CAP_MB"]

MiB = 2**20

MAX_BUCKET_CAP_MB = 1e6
"""Largest accepted bucket cap (a run's ``bucket_cap_mb``,
:func:`~scalemodel.best_bucket_size`'s candidates): a terabyte, far beyond any model's
gradients [MB]."""


@attrs.frozen(eq=False)
class Buckets:
    """The messages a fusion policy makes.

    Attributes
    ----------
    nbytes : numpy.ndarray
        Size of each bucket [bytes], in communication order.
    ready : numpy.ndarray
        Time each bucket is ready, from the start of backward [s].
    members : sequence of numpy.ndarray
        Indices of the tensors in each bucket (made when read).
    """

    nbytes: np.ndarray
    ready: np.ndarray
    members: Sequence

    def __len__(self):
        return len(self.nbytes)

    @property
    def starts(self) -> np.ndarray:
        """Index of each bucket's first tensor [-]."""
        if isinstance(self.members, _Ranges):
            return self.members.starts
        return np.asarray([int(m[0]) for m in self.members], dtype=np.int64)


class _Ranges(Sequence):
    """Consecutive index ranges ``[start, end)``, each made into an array when read (a
    model with hundreds of buckets reads none of them)."""

    def __init__(self, starts, ends):
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return np.arange(self.starts[i], self.ends[i])


def _from_boundaries(sizes, ready, ends):
    """Group tensors [start, end) into buckets; a bucket is ready at its latest tensor."""
    starts = np.concatenate(([0], ends[:-1]))
    nbytes = np.add.reduceat(sizes, starts).astype(float)
    rdy = np.maximum.reduceat(ready, starts)
    return Buckets(nbytes, rdy, _Ranges(starts, ends))


def _check_size(value, name):
    v = check_positive(value, name)
    if np.ndim(v) != 0:  # float() of a list raised a bare TypeError
        raise ParameterTypeError(name, value, "a single number")
    return float(v)


@attrs.frozen
class DDPBuckets:
    """PyTorch DDP gradient buckets.

    Parameters
    ----------
    cap_bytes : float
        Bucket size cap, ``bucket_cap_mb`` x 2^20 (default 25 MiB) [bytes].
    first_bucket_bytes : float
        Cap of the first bucket (default 1 MiB) [bytes].
    """

    cap_bytes: float = attrs.field(default=25 * MiB, converter=lambda v: _check_size(v, "cap_bytes"))
    first_bucket_bytes: float = attrs.field(
        default=1 * MiB, converter=lambda v: _check_size(v, "first_bucket_bytes"))

    def buckets(self, sizes, ready) -> Buckets:
        """Assign tensors (in backward order) to buckets; see the module docs."""
        ends, acc, limit = [], 0.0, self.first_bucket_bytes
        for i, s in enumerate(np.asarray(sizes, dtype=float).tolist()):
            acc += s
            if acc >= limit:
                ends.append(i + 1)
                acc, limit = 0.0, self.cap_bytes
        if not ends or ends[-1] != len(sizes):
            ends.append(len(sizes))
        return _from_boundaries(sizes, ready, np.asarray(ends))


@attrs.frozen
class HorovodFusion:
    """Horovod tensor fusion (threshold and cycle time), as in arXiv:2006.10103.

    Parameters
    ----------
    threshold_bytes : float
        Fusion buffer threshold, ``HOROVOD_FUSION_THRESHOLD`` (default 64 MiB) [bytes].
    cycle_time : float
        Backward compute that closes a buffer, ``HOROVOD_CYCLE_TIME`` (default 5 ms) [s].
    """

    threshold_bytes: float = attrs.field(
        default=64 * MiB, converter=lambda v: _check_size(v, "threshold_bytes"))
    cycle_time: float = attrs.field(default=5e-3, converter=lambda v: _check_size(v, "cycle_time"))

    def buckets(self, sizes, ready) -> Buckets:
        """Close a buffer when ``cycle_time`` of backward has passed since the last send
        or ``threshold_bytes`` have accumulated; see the module docs."""
        ends, acc, last_send = [], 0.0, 0.0
        for i, (s, t) in enumerate(zip(sizes, ready)):
            acc += s
            if t - last_send >= self.cycle_time or acc >= self.threshold_bytes:
                ends.append(i + 1)
                acc, last_send = 0.0, t
        if not ends or ends[-1] != len(sizes):
            ends.append(len(sizes))
        return _from_boundaries(sizes, ready, np.asarray(ends))


@attrs.frozen
class PerTensor:
    """No fusion: every gradient tensor is its own message."""

    def buckets(self, sizes, ready) -> Buckets:
        """One bucket per tensor."""
        return _from_boundaries(sizes, ready, np.arange(1, len(sizes) + 1))


@attrs.frozen
class AfterBackward:
    """All gradients in one message, sent when the last one is ready (BSP, no overlap)."""

    def buckets(self, sizes, ready) -> Buckets:
        """One bucket holding every tensor."""
        return _from_boundaries(sizes, ready, np.asarray([len(sizes)]))


def _nonneg_float(value, name):
    from .units import check_nonnegative
    v = check_nonnegative(value, name)
    if not isinstance(v, float):
        raise ParameterTypeError(name, value, "a single number")
    return v


@attrs.frozen
class MGWFBP:
    """MG-WFBP's merged buckets for an all-reduce that costs ``a + b s`` (see the module).

    Parameters
    ----------
    startup : float
        All-reduce start-up time :math:`a` (latency and fixed costs of one message) [s].
    per_byte : float
        All-reduce time per byte :math:`b` [s/byte].
    """

    startup: float = attrs.field(converter=lambda v: _nonneg_float(v, "startup"))
    per_byte: float = attrs.field(converter=lambda v: _nonneg_float(v, "per_byte"))

    def buckets(self, sizes, ready) -> Buckets:
        """Merge tensors (in backward order) by the MG-WFBP rule; see the module docs."""
        sizes = np.asarray(sizes, dtype=float)
        ready = np.asarray(ready, dtype=float)
        k = len(sizes)
        a, b = self.startup, self.per_byte
        acc = 0.0  # bytes merged into the current tensor so far
        tau = ready[0] if k else 0.0  # when the current tensor's all-reduce can start
        ends = []
        for i in range(k - 1):
            acc += sizes[i]
            tc = a + b * acc  # its all-reduce time, were it sent now
            nxt = ready[i + 1]
            merge = False
            if nxt < tau + tc:  # the next gradient is ready before this one is sent
                merge = tau > nxt or nxt - tau < a  # cannot start earlier, or waiting
                # costs less than the start-up time saved
            if merge:  # the merged message starts with the next tensor
                tau = max(tau, nxt)
            else:
                ends.append(i + 1)
                tau, acc = max(tau + tc, nxt), 0.0
        ends.append(k)
        return _from_boundaries(sizes, ready, np.asarray(ends))


FUSIONS = {"ddp": DDPBuckets, "horovod": HorovodFusion, "none": PerTensor,
           "bsp": AfterBackward, "mg-wfbp": MGWFBP}
"""Fusion policies by name; ``"per-tensor"`` and ``"wfbp"`` are aliases of ``"none"``.
``"mg-wfbp"`` needs the all-reduce's start-up and per-byte times: the model plans it for
the configuration asked (see :func:`~scalemodel.scaling_factor`), or pass
``MGWFBP(startup, per_byte)``."""


def resolve_fusion(fusion):
    """Return a fusion policy object for a name or an instance."""
    if isinstance(fusion, (DDPBuckets, HorovodFusion, PerTensor, AfterBackward, MGWFBP)):
        return fusion
    if not isinstance(fusion, str):
        raise ParameterTypeError("fusion", fusion,
                                 "a name (ddp, horovod, none, bsp, mg-wfbp) or a DDPBuckets, "
                                 "HorovodFusion, PerTensor, AfterBackward or MGWFBP object")
    key = fusion.strip().lower().replace("_", "-")
    key = {"per-tensor": "none", "pertensor": "none", "pytorch": "ddp", "wfbp": "none",
           "mgwfbp": "mg-wfbp", "after-backward": "bsp"}.get(key, key)
    if key not in FUSIONS:
        raise UnknownNameError("fusion", fusion, FUSIONS)
    if key == "mg-wfbp":
        return PLANNED_MGWFBP
    return FUSIONS[key]()


PLANNED_MGWFBP = "mg-wfbp"
"""Marker for an MG-WFBP fusion that the model plans for each configuration."""


def bucket_ready_times(sizes, ready, fusion="ddp") -> Buckets:
    """Buckets (sizes [bytes], ready times [s]) that ``fusion`` makes of these tensors.

    Parameters
    ----------
    sizes : array_like
        Gradient sizes in backward order [bytes].
    ready : array_like
        When each gradient is ready, from the start of backward [s].
    fusion : str or policy
        ``"ddp"``, ``"horovod"``, ``"none"``, or a policy object [-].
    """
    given = ready
    sizes = _per_tensor(sizes, "sizes")
    ready = _per_tensor(ready, "ready")
    if len(ready) != len(sizes):
        raise InvalidParameterError("ready", given, f"has {len(ready)} values; needs one "
                                    f"per gradient tensor, as sizes ({len(sizes)})")
    return resolve_fusion(fusion).buckets(sizes, ready)


def _per_tensor(value, name):
    """``value`` as a non-empty 1-D array of finite numbers >= 0, one per gradient
    tensor (:func:`bucket_ready_times`), or a documented error naming ``name`` [-]."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ParameterTypeError(name, value, "a list of numbers, one per gradient "
                                 "tensor") from None
    if a.ndim != 1 or a.size == 0:
        raise InvalidParameterError(name, value, "must be a non-empty list of numbers, "
                                    "one per gradient tensor")
    if not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        raise InvalidParameterError(name, value, "must be finite and >= 0")
    return a
