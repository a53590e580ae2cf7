r"""The data-parallel wrapper's work on the host, and the delay it puts on the GPU.

DDP's autograd hook of every parameter tensor (marking it ready, copying its gradient into
its bucket) and the launch of every bucket's collective run on the host, the CPU thread
that issues the GPU's kernels. The GPU waits for them only when the host falls behind it.
A cluster's :class:`HostCosts` hold what that work costs: :math:`h_p` per tensor,
:math:`h_b` per bucket, and :math:`g`, the wrapper's own work on the GPU per iteration
(measured on one GPU by ``python -m scalemodel.calibrate --steps wrapper``,
:mod:`scalemodel.calibrate.wrapper`).

On the timeline of one iteration (eq. :eq:`iteration-cluster`) the host's lead over the
GPU is what the GPU takes for the step without the wrapper, minus what the host takes to
issue it (:math:`H`, ``host_time`` (:class:`~scalemodel.WorkloadProfile`)):

.. math::
   :label: host-lead

   L_n = \sigma_n\,G + T_u + g - H, \qquad
   d_k = \max\Big(0,\; \sum_{j \le k} (p_j\,h_p + h_b) - L_n\Big),

where :math:`G = g_a (T_f + T_b)` is the GPU's forward and backward of the step's
:math:`g_a` micro-batches and :math:`T_u` its update (which the slowdown does not
stretch; :math:`L_1 = T + g - H` with :math:`T` the whole iteration), :math:`p_j` the
gradient tensors of bucket :math:`j` (in
communication order) and :math:`d_k` the delay of bucket :math:`k` and of everything
after it on the compute stream. The host work is spent first against the lead; what is
left delays the GPU. Backward then ends :math:`d_K` later and the wrapper's GPU work
:math:`g` is paid once per iteration, so one worker takes

.. math::

   T + g + d_K = \max\big(T + g,\; H + P h_p + K h_b\big),

eq. :eq:`host-bound` of :mod:`scalemodel.framework`. Every worker pays the same host
work; a slower GPU (compute slowdown :math:`\sigma_n`, the wait for the slowest worker)
gives the host more lead. Spending the whole lead before the first bucket is the
optimistic end (the host's lead is largest at the end of the iteration, when it waits
for the GPU): a lower bound of the delay, exact where the lead covers all the host work
and where there is none (``tests/test_framework_host.py`` plays the two streams kernel
by kernel).

:math:`H` unknown (``host_time=None``) is taken as the host-bound limit :math:`H = T`:
then :math:`L_1 = g` and the wrapper costs its whole host work, as the cluster's constant
``bucket_overhead`` and ``iteration_overhead`` do. An answer's interval then reaches down
to the GPU-bound end, :math:`H = 0` (:meth:`HostCosts.ends`), as far as the runs cannot
tell.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, ProfileFormatError
from .units import parse_duration

__all__ = ["HostCosts", "HOST_COST_TRANSFER", "host_delays", "tensors_per_bucket"]

HOST_COST_MAX = 1.0
"""Largest host cost per tensor or bucket, and wrapper GPU time per iteration, accepted:
one second [s] (the measured ones are tens of microseconds; more is a unit slip)."""


HOST_COST_TRANSFER = 2.0
r"""How far, as a factor either way, the wrapper's costs measured on one model may lie
from another model's on the same machine: the largest ratio of the highest to the lowest
:math:`h_p`, :math:`h_b` and (where seen) :math:`g` across the eight models of the H200
repeat sweep (``calibration/results/h200/framework-repeat``, PyTorch 2.11 DDP on one
H200: :math:`h_p` 28-50 us, ratio 1.75; :math:`h_b` 25-50 us, ratio 2.00; :math:`g` 1.4-2.5
ms on the three GPU-bound models, ratio 1.83; ``tests/test_host_timeline.py`` recomputes
it from the files). The per-tensor work differs between models (tensor sizes, hook
and copy paths); one sitting's bootstrap sees none of that, so an answer's interval on a
cluster with host costs takes each cost down to its value over this factor and up to
its value times it, or to its interval's end where that is wider (:meth:`HostCosts.ends`).
Checked with the pair held out (``benchmarks/validate_framework.py``, section 4): with the
spread of the six models that are neither the calibration nor the predicted one, 98.9 %
of the 280 held-out DDP iterations fall inside (median width 30.6 % of the measured
time); with the bootstrap alone, 64.3 % [-]."""


def _cost(name):
    def convert(value):
        if isinstance(value, (bool, np.bool_)) or value is None:
            raise ParameterTypeError(name, value, "a time in seconds")
        if isinstance(value, str):
            value = parse_duration(value, name)
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ParameterTypeError(name, value, "a time in seconds") from None
        if not (math.isfinite(v) and 0.0 <= v <= HOST_COST_MAX):
            raise InvalidParameterError(name, value, f"must be a time in [0, {HOST_COST_MAX:g}] s")
        return v
    return convert


_INTERVAL_NAMES = ("per_tensor", "per_bucket", "device_time")


def _intervals(value):
    """``{name: (lo, hi)}`` (or the stored tuple) as a sorted tuple of ``(name, lo, hi)``,
    each end a time in [0, 1] s with lo <= hi."""
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 3 for v in value):
        value = {v[0]: (v[1], v[2]) for v in value}
    if not isinstance(value, dict):
        raise ParameterTypeError("intervals", value, "a dict {name: (low, high)} of "
                                 f"{', '.join(_INTERVAL_NAMES)}")
    out = []
    for name, pair in sorted(value.items()):
        if name not in _INTERVAL_NAMES:
            raise InvalidParameterError("intervals", name, "names one of "
                                        f"{', '.join(_INTERVAL_NAMES)}")
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ParameterTypeError(f"intervals.{name}", pair, "a (low, high) pair")
        lo, hi = (_cost(f"intervals.{name}")(v) for v in pair)
        if lo > hi:
            raise InvalidParameterError(f"intervals.{name}", pair, "low must not exceed high")
        out.append((name, lo, hi))
    return tuple(out)


@attrs.frozen
class HostCosts:
    r"""The data-parallel wrapper's work per iteration, on the host and on the GPU.

    Parameters
    ----------
    per_tensor : float
        Host work per gradient tensor, :math:`h_p` (autograd hook, copy into the bucket)
        [s].
    per_bucket : float
        Host work per bucket (launch of its collective), :math:`h_b` [s].
    device_time : float
        The wrapper's own work on the GPU per iteration, :math:`g` [s].
    source : str
        Where the numbers come from (a measurement file, a fit) [-].
    intervals : dict
        Confidence intervals ``{name: (low, high)}`` of ``per_tensor``, ``per_bucket``
        and ``device_time`` (the wrapper step's bootstrap, and for ``device_time`` the
        range the step saw, from 0 where it could not see it); an answer's interval on a
        cluster with them ranges over their ends, widened by :data:`HOST_COST_TRANSFER`
        (:meth:`ends`, :meth:`~scalemodel.ClusterProfile.corners`) [s]. Kept as a tuple
        of ``(name, low, high)``; :meth:`interval` reads one.
    gpu_bound_end : bool
        The optimistic end of an answer's interval (:meth:`ends`): a profile without a
        measured ``host_time`` is taken as GPU-bound (:math:`H = 0`) instead of
        host-bound (:math:`H = T`, the point). Not written to files [-].

    Examples
    --------
    >>> from scalemodel.hostcosts import HostCosts
    >>> HostCosts(per_tensor="40 us", per_bucket=35e-6).per_tensor
    4e-05
    """

    per_tensor: float = attrs.field(converter=_cost("per_tensor"))
    per_bucket: float = attrs.field(converter=_cost("per_bucket"))
    device_time: float = attrs.field(default=0.0, converter=_cost("device_time"))
    source: str = ""
    intervals: tuple = attrs.field(default=(), converter=_intervals)
    gpu_bound_end: bool = attrs.field(default=False, repr=False)

    def __attrs_post_init__(self):
        if not isinstance(self.source, str):
            raise ParameterTypeError("source", self.source, "a string")

    def interval(self, name):
        """``(low, high)`` of ``name`` (``"per_tensor"``, ``"per_bucket"``,
        ``"device_time"``), or None without one [s]."""
        for n, lo, hi in self.intervals:
            if n == name:
                return lo, hi
        return None

    def ends(self, transfer=None):
        """``(slowest, fastest)``: each cost at the high and at the low end of its
        interval, widened to its value times and over ``transfer`` (default
        :data:`HOST_COST_TRANSFER`, the spread between models; 1 keeps the intervals);
        the fastest also takes a profile without a measured host time as GPU-bound
        (``gpu_bound_end``: its host hides what its lead covers) [-]."""
        f = HOST_COST_TRANSFER if transfer is None else transfer
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, float, np.number)) \
                or not (math.isfinite(f) and f >= 1):
            raise InvalidParameterError("transfer", transfer, "must be a factor >= 1")
        slow, fast = {}, {}
        for name in _INTERVAL_NAMES:
            value = getattr(self, name)
            lo, hi = self.interval(name) or (value, value)
            slow[name] = min(max(hi, value * f), HOST_COST_MAX)
            fast[name] = min(lo, value / f)
        return (attrs.evolve(self, **slow),
                attrs.evolve(self, **fast, gpu_bound_end=True))

    def to_dict(self) -> dict:
        """The costs as the cluster file's ``host`` object [-]."""
        out = {"per_tensor": self.per_tensor, "per_bucket": self.per_bucket,
               "device_time": self.device_time}
        if self.source:
            out["source"] = self.source
        if self.intervals:
            out["intervals"] = {n: [lo, hi] for n, lo, hi in self.intervals}
        return out

    @classmethod
    def from_dict(cls, data, source="<object>") -> "HostCosts":
        """From the cluster file's ``host`` object; errors name the field."""
        keys = {"per_tensor", "per_bucket", "device_time", "source", "intervals"}
        if not isinstance(data, dict) or not {"per_tensor", "per_bucket"} <= set(data) \
                or set(data) - keys:
            raise ProfileFormatError(source, "host", "must be an object with per_tensor [s] "
                                     "and per_bucket [s], optional device_time [s], "
                                     "source and intervals")
        try:
            return cls(per_tensor=data["per_tensor"], per_bucket=data["per_bucket"],
                       device_time=data.get("device_time", 0.0),
                       source=data.get("source", ""),
                       intervals=data.get("intervals") or {})
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise ProfileFormatError(source, f"host.{exc.parameter}", str(exc)) from None


def tensors_per_bucket(buckets) -> np.ndarray:
    """Gradient tensors in each bucket of ``buckets`` (a
    :class:`~scalemodel.fusion.Buckets`), in communication order [-]."""
    members = buckets.members
    ends = getattr(members, "ends", None)
    if ends is not None:
        return (np.asarray(ends) - np.asarray(members.starts)).astype(float)
    return np.array([len(m) for m in members], dtype=float)


def host_delays(tensors, costs, lead):
    """Delay of each bucket on the compute stream, :math:`d_k` of eq. :eq:`host-lead` [s].

    Parameters
    ----------
    tensors : array_like
        Gradient tensors of each bucket, in communication order, :math:`p_k` [-].
    costs : HostCosts
        The wrapper's host work per tensor and per bucket [s].
    lead : float
        The host's lead over the GPU, :math:`L_n` (negative is taken as 0) [s].

    Returns
    -------
    numpy.ndarray
        Non-decreasing delays, one per bucket [s].

    Examples
    --------
    >>> from scalemodel.hostcosts import HostCosts, host_delays
    >>> c = HostCosts(per_tensor=40e-6, per_bucket=35e-6)
    >>> [round(float(d) * 1e6) for d in host_delays([10, 10, 5], c, lead=500e-6)]
    [0, 370, 605]
    """
    p = np.asarray(tensors, dtype=float)
    work = np.cumsum(p * costs.per_tensor + costs.per_bucket)
    return np.maximum(work - max(float(lead), 0.0), 0.0)
