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
    ``torch/csrc/distributed/c10d/reducer.cpp``).
:class:`HorovodFusion`
    Horovod tensor fusion as modelled by Zhang et al. (arXiv:2006.10103): a fused buffer
    is sent once at least ``cycle_time`` (5 ms, ``HOROVOD_CYCLE_TIME``) of backward compute
    or at least ``threshold_bytes`` (64 MiB, ``HOROVOD_FUSION_THRESHOLD``) of gradients
    have accumulated since the last send, and the rest when backward ends.
:class:`PerTensor`
    No fusion: one message per gradient tensor.
"""

from __future__ import annotations

import attrs
import numpy as np

from .exceptions import ParameterTypeError, UnknownNameError
from .units import check_positive

__all__ = ["Buckets", "DDPBuckets", "HorovodFusion", "PerTensor", "FUSIONS", "resolve_fusion",
           "bucket_ready_times"]

MiB = 2**20


@attrs.frozen(eq=False)
class Buckets:
    """The messages a fusion policy makes.

    Attributes
    ----------
    nbytes : numpy.ndarray
        Size of each bucket [bytes], in communication order.
    ready : numpy.ndarray
        Time each bucket is ready, from the start of backward [s].
    members : tuple of numpy.ndarray
        Indices of the tensors in each bucket.
    """

    nbytes: np.ndarray
    ready: np.ndarray
    members: tuple

    def __len__(self):
        return len(self.nbytes)


def _from_boundaries(sizes, ready, ends):
    """Group tensors [start, end) into buckets; a bucket is ready at its latest tensor."""
    starts = np.concatenate(([0], ends[:-1]))
    nbytes = np.add.reduceat(sizes, starts).astype(float)
    rdy = np.maximum.reduceat(ready, starts)
    members = tuple(np.arange(a, b) for a, b in zip(starts, ends))
    return Buckets(nbytes, rdy, members)


def _check_size(value, name):
    return float(check_positive(value, name))


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
        for i, s in enumerate(sizes):
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


FUSIONS = {"ddp": DDPBuckets, "horovod": HorovodFusion, "none": PerTensor}
"""Fusion policies by name; ``"per-tensor"`` is an alias of ``"none"``."""


def resolve_fusion(fusion):
    """Return a fusion policy object for a name or an instance."""
    if isinstance(fusion, (DDPBuckets, HorovodFusion, PerTensor)):
        return fusion
    if not isinstance(fusion, str):
        raise ParameterTypeError("fusion", fusion,
                                 "a name (ddp, horovod, none) or a DDPBuckets, HorovodFusion "
                                 "or PerTensor object")
    key = fusion.strip().lower()
    key = {"per-tensor": "none", "pertensor": "none", "pytorch": "ddp"}.get(key, key)
    if key not in FUSIONS:
        raise UnknownNameError("fusion", fusion, FUSIONS)
    return FUSIONS[key]()


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
    sizes = np.asarray(sizes, dtype=float)
    ready = np.asarray(ready, dtype=float)
    return resolve_fusion(fusion).buckets(sizes, ready)
