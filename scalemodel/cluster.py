r"""Cluster (network) profiles: what the transport really achieves on a cluster.

Zhang et al. (arXiv:2006.10103) found that measured scaling stops improving above about
25 Gbit/s because the transport does not fill the link. A :class:`ClusterProfile`
captures that: a per-message latency :math:`\alpha` [s], a utilization :math:`u_0` of the
line rate, optionally measured utilizations at several line rates, and optionally a
ceiling on the achieved bandwidth [bits/s]. The achieved bandwidth at line rate
:math:`B` is

.. math::
   :label: achieved

   B_\text{eff}(B) = \min\big(u(B)\,B,\; C\big),

with :math:`u(B)` from measured points (:math:`u_0` when there are none) and :math:`C` the
ceiling (none by default). Between measured line rates :math:`B_i` the *achieved* bandwidth
:math:`A_i = \max_{k \le i} u_k B_k` (a running maximum, so that more line rate never
achieves less) is interpolated linearly in :math:`(\log B, \log A)`; outside the table the
end utilization holds. :math:`B_\text{eff}` is therefore non-decreasing in :math:`B`, and
the inverse solvers invert it exactly (:meth:`~scalemodel.ClusterProfile.line_rate_for`). Pass a cluster to
:func:`~scalemodel.scaling_factor`, :func:`~scalemodel.min_compression` or
:func:`~scalemodel.required_bandwidth` as ``cluster=`` (an object or a JSON file);
calibration writes such files.

Where compute and communication share CPU cores (CPU training, or hosts whose cores
also drive the network), communication cannot fully progress while backward computes.
The cluster's overlap efficiency :math:`\eta` models that: the gradient ready at
:math:`r_k` within a backward pass of length :math:`T_b` is treated as ready at

.. math::
   :label: overlap-efficiency

   r_k' = r_k + (1 - \eta)\,(T_b - r_k),

so :math:`\eta = 1` is the full overlap of the model and :math:`\eta = 0` none (every
all-reduce starts after backward). Calibration fits :math:`\eta` from one measured DDP
run (:func:`scalemodel.calibrate.overhead.fit_overlap`).

What real clusters add to the ideal model (Zhang et al. measured them on AWS p3dn), each
a field of the cluster and a closed-form term of :mod:`scalemodel.model`:

- ``topology`` (:class:`~scalemodel.topology.Topology`): GPUs and NICs per node and the
  intra-node link; the collectives then move each node's traffic through its NICs.
- ``compute_slowdown`` :math:`\sigma \ge 1`: forward and backward take :math:`\sigma`
  times longer in a distributed run (communication kernels, memory traffic and hooks
  compete with compute; Zhang et al.'s Fig. 2 measured up to 15 %).
- ``collective_overhead`` :math:`c_0` [s]: a fixed cost of every collective that does not
  grow with :math:`n` (kernel launch, framework bookkeeping), paid on the channel.
- ``sync_overhead`` :math:`t_s` [s]: a fixed cost paid once per iteration after the last
  collective (the framework's final negotiation and synchronization: Horovod's cycle,
  waiting for every handle), on the critical path only when communication ends last.
- ``bucket_overhead`` :math:`c_b` [s]: the framework's work per bucket (per tensor when
  the fusion is per tensor) on the *compute* path of a distributed run (DDP's autograd
  hook, the copy into the bucket, the launch): it delays the rest of the backward pass
  and every later bucket, so backward does not hide it.
- ``iteration_overhead`` :math:`t_w` [s]: the data-parallel wrapper's work once per
  iteration (optimizer step) on the compute path (DDP's forward/prepare work); a
  single-worker run with the wrapper pays it too
  (:meth:`~scalemodel.Scenario.wrapped_single_worker_time`).
- ``straggler_spread`` :math:`s` [-]: relative standard deviation of one worker's
  per-iteration compute time; synchronous collectives wait for the slowest of the
  :math:`n` workers, whose compute is :math:`1 + s\,e_n` times the mean (:math:`e_n`
  the expected maximum of :math:`n` standard normals, Blom's approximation).
- ``host`` (:class:`~scalemodel.hostcosts.HostCosts`): the wrapper's work on the host per
  gradient tensor and per bucket, and on the GPU per iteration, as measured on one GPU;
  the GPU pays the host work only past the host's lead (eq. :eq:`host-lead`, with the
  profile's ``host_time`` (:class:`~scalemodel.WorkloadProfile`)). In addition to
  ``bucket_overhead`` and ``iteration_overhead`` (a fit given ``host`` holds them at 0).

File format (JSON): ``format`` = ``"scalemodel-cluster"``, ``format_version`` = 1,
``name``, ``provenance`` (object with ``source``), ``alpha`` [s], ``utilization`` [-],
optional ``ceiling`` [bits/s], optional ``utilization_table`` =
``{"line_rate": [bits/s ...], "utilization": [...]}``, optional ``reduction`` (as in a
workload profile: it replaces the workload's reduction cost), optional ``overlap`` (the
overlap efficiency :math:`\eta` in [0, 1], eq. :eq:`overlap-efficiency`), optional ``intervals``
(``{"alpha": [lo, hi], "utilization": [lo, hi], "ceiling": [lo, hi], ...}``, confidence
intervals of the fitted values), optional ``topology`` (``{"gpus_per_node", "nics_per_node",
"intra_bw", "intra_alpha"}``), optional ``compute_slowdown`` [-], ``collective_overhead`` [s]
and ``sync_overhead`` [s], optional ``bucket_overhead`` [s], ``iteration_overhead`` [s]
and ``straggler_spread`` [-], optional ``host`` (``{"per_tensor": s, "per_bucket": s,
"device_time": s, "source": text}``), optional ``codec_costs`` (``{family: {"encode": s/element,
"decode": s/element}}``, measured compression costs, see :mod:`scalemodel.compressors`),
optional ``model_discrepancy`` (``{"factor": F, "run": label, "miss": m}``, the fit's
largest miss of its own runs, which widens every interval: :mod:`scalemodel.discrepancy`),
optional ``run_noise`` (the half-width of a measured run's noise, relative, from the
calibration runs' uncertainties, which widens every interval too: the same module),
and any extra keys (kept in ``extra``; a key that misspells one of the format's is
refused, one that nothing reads is kept with a warning: :data:`WRITTEN_EXTRA_KEYS`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import attrs
import numpy as np

from .collectives import ReductionCost
from ._jsonfile import check_keys
from .exceptions import InvalidParameterError, ParameterTypeError, ProfileFormatError
from .discrepancy import KEY, NOISE_KEY, check_discrepancy, check_run_noise
from .hostcosts import HostCosts
from .topology import Topology
from .units import (MIN_UTILIZATION, check_fraction, check_nonnegative, check_positive,
                    format_bandwidth, parse_duration, scalar_converter)

__all__ = ["ClusterProfile", "load_cluster", "save_cluster"]

FORMAT = "scalemodel-cluster"
FORMAT_VERSION = 1

WRITTEN_EXTRA_KEYS = frozenset({
    "description", "notes", "comment", "efficiency", "fits", "confidence", "collective",
    "fitted_bandwidth", "achieved_bandwidth", "intra_node_fit", "compute_slowdown_fit",
    "overlap_fit", "host_overhead", "host_overhead_note", "transport_fit_note",
    "collective_fits", "sweep", "intra_node_sweep", "codec_sweep", "codec_fit"})
"""Keys outside the format that a cluster file keeps in ``extra`` without a word: those
the library's fits and calibration write (and ``description``, ``notes``, ``comment``).
Another unknown key is kept with a :class:`~scalemodel.exceptions.ModelWarning` (nothing
reads it), and one that misspells a key of the format is refused
(``scalemodel._jsonfile.check_keys``)."""


def _opt_positive(value, name):
    return None if value is None else _one(check_positive(value, name), value, name)


def _opt_rate(value, name):
    """A line rate or None: at least 1 Mbit/s, as every rate (a smaller one is a slip)."""
    from .units import parse_bandwidth
    return None if value is None else _one(parse_bandwidth(value, name), value, name)


def _one(checked, value, name):
    """A checked value as one float; [] or a list raised a bare TypeError from float()."""
    if np.ndim(checked) != 0:
        raise ParameterTypeError(name, value, "one number or None")
    return float(checked)


PARAMETER_BOUNDS = {
    "alpha": (0.0, 2e-3), "utilization": (0.02, 1.0), "compute_slowdown": (1.0, 3.0),
    "collective_overhead": (0.0, 0.02), "sync_overhead": (0.0, 0.5), "overlap": (0.0, 1.0),
    "bucket_overhead": (0.0, 0.01), "iteration_overhead": (0.0, 0.5),
    "straggler_spread": (0.0, 1.0), "intra_alpha": (0.0, 2e-3), "intra_bw": (1.0, 1e15),
    "ceiling": (0.02, None), "efficiency": (0.05, 1.0),
}
"""Where :meth:`~scalemodel.ClusterProfile.corners` puts an interval end that is ``None`` (the runs do
not constrain it): ``{name: (lower, upper)}`` in the parameter's unit ([s], [-], [bits/s]).
They are the bounds of the fit's priors (:data:`scalemodel.fitting.PRIORS`: latency up to
2 ms, utilization from 2 %, compute slowdown up to 3, per-collective cost up to 20 ms,
synchronization up to 0.5 s); the ceiling's lower bound is a fraction of the largest line
rate of the runs the cluster was fitted to (``provenance["runs"]``; of the ceiling itself
when none are recorded), and its upper end ``None`` means no ceiling. ``bucket_overhead``
(up to 10 ms per bucket), ``iteration_overhead`` (up to 0.5 s) and ``straggler_spread``
(up to 1) bound the framework terms; ``intra_bw`` up to 10^15 bits/s; a FLOP-derived
workload's fitted ``efficiency`` (``extra["efficiency"]``) from 5 % to 1."""

_IDEAL = {"alpha": 0.0, "utilization": 1.0, "ceiling": None, "compute_slowdown": 1.0,
          "collective_overhead": 0.0, "sync_overhead": 0.0, "overlap": 1.0,
          "bucket_overhead": 0.0, "iteration_overhead": 0.0, "straggler_spread": 0.0}
"""Values of the ideal model: what :meth:`ClusterProfile.with_alternative` gives a
parameter the best explanation fitted and the chosen one does not."""

_RISES = ("utilization", "overlap", "ceiling", "intra_bw")
"""Parameters with which the scaling factor rises (the others make it fall)."""

FIT_SETTINGS_KEYS = ("fusion", "algorithm", "sharding", "transport")
"""Keys of :attr:`~scalemodel.ClusterProfile.fit_settings`: the fusion, collective algorithm and
sharding the cluster was fitted under, and a short text naming the transport source."""


def _end(value, where):
    """One interval end: a finite float, or None for an end the runs do not constrain
    (``inf`` is read as None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                          np.integer)):
        raise InvalidParameterError(where, value, "must be a number or None (unbounded)")
    try:
        v = float(value)
    except OverflowError:  # an integer beyond 1.8e308 (a JSON file can hold one)
        raise InvalidParameterError(where, value, "too large for a float: give a number "
                                    "or None (unbounded)") from None
    if math.isnan(v):
        raise InvalidParameterError(where, value, "must be a number or None (unbounded)")
    return None if math.isinf(v) else v


def _check_spread(value, where):
    """A relative standard deviation of iteration times above 1 has no meaning here (the
    order-statistics form would give negative times); refuse it, whatever its source."""
    if value is not None and np.any(np.asarray(value) > PARAMETER_BOUNDS["straggler_spread"][1]):
        raise InvalidParameterError(where, value, "must be in [0, 1] (a relative standard "
                                    "deviation of one worker's iteration time: 0.05 is 5 %)")


def _pair_of_ends(pair, where):
    try:
        lo, hi = pair
    except (TypeError, ValueError):
        raise InvalidParameterError(where, pair, "must be a pair [lo, hi] (None for an "
                                    "end the runs do not constrain)") from None
    lo, hi = _end(lo, f"{where}[0]"), _end(hi, f"{where}[1]")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidParameterError(where, pair, "needs lo <= hi")
    if "'straggler_spread'" in where:
        _check_spread(hi, f"{where}[1]")
    return lo, hi


_PARAMETER_NAMES = tuple(sorted(set(_IDEAL) | {"table_utilization", "intra_bw",
                                                "intra_alpha", "host_overhead",
                                                "efficiency"}))
"""Names an interval or an alternative explanation may give a value: the fitted
parameters [-]."""


def _check_name(name, where):
    """Refuse a parameter name that misspells one of :data:`_PARAMETER_NAMES` (its
    interval or value would be ignored without a word); other names pass."""
    import difflib

    name = str(name)
    if name in _PARAMETER_NAMES or name.startswith("codec."):
        return name
    close = difflib.get_close_matches(name, _PARAMETER_NAMES, n=1, cutoff=0.8)
    if close:
        raise InvalidParameterError(where, name, f"is not a parameter; did you mean "
                                    f"{close[0]!r}? (known: {', '.join(_PARAMETER_NAMES)})")
    return name


def _check_intervals(intervals, where="intervals") -> dict:
    """``{name: (lo, hi)}`` with float or None ends (the table's pair of lists as is)."""
    if not isinstance(intervals, dict):
        raise InvalidParameterError(where, intervals, "must be a dict {name: [lo, hi]}")
    for k in intervals:
        _check_name(k, f"{where} key")
    return {str(k): (tuple(v) if k == "table_utilization" else
                     _pair_of_ends(v, f"{where}[{k!r}]")) for k, v in intervals.items()}


_CHECKED = {}  # id -> alternatives tuple already validated (attrs.evolve passes it on)


def _check_alternatives(alternatives) -> tuple:
    """Validate ``alternatives``: a sequence of ``{"free", "values", "intervals",
    "score"}`` dicts (other keys kept), scores finite and >= 0."""
    if alternatives is None or alternatives == ():
        return ()
    if _CHECKED.get(id(alternatives)) is alternatives:
        return alternatives
    out = _validate_alternatives(alternatives)
    if len(_CHECKED) > 256:
        _CHECKED.clear()
    _CHECKED[id(out)] = out
    return out


def _validate_alternatives(alternatives) -> tuple:
    if isinstance(alternatives, (str, bytes, dict)) or not hasattr(alternatives, "__iter__"):
        raise InvalidParameterError("alternatives", alternatives, "must be a list of dicts")
    out = []
    for i, alt in enumerate(alternatives):
        where = f"alternatives[{i}]"
        if not isinstance(alt, dict) or not {"free", "values", "score"} <= set(alt):
            raise InvalidParameterError(where, alt, "must be a dict with 'free', 'values', "
                                        "'intervals' and 'score'")
        free = alt["free"]
        if isinstance(free, str) or not all(isinstance(f, str) for f in free):
            raise InvalidParameterError(f"{where}.free", free, "must be a list of names")
        for f in free:
            _check_name(f, f"{where}.free")
        values = alt["values"]
        if not isinstance(values, dict):
            raise InvalidParameterError(f"{where}.values", values, "must be a dict")
        vals = {}
        for k, v in values.items():
            if str(k) not in _PARAMETER_NAMES:  # a value no answer would apply, unsaid
                raise InvalidParameterError(f"{where}.values key", k, "is not a fitted "
                                            f"parameter (known: {', '.join(_PARAMETER_NAMES)})")
            v = _end(v, f"{where}.values[{k!r}]")
            if v is None and k != "ceiling":
                raise InvalidParameterError(f"{where}.values[{k!r}]", values[k],
                                            "must be a finite number")
            if k == "straggler_spread":
                _check_spread(v, f"{where}.values[{k!r}]")
            _check_alternative_value(str(k), v, f"{where}.values[{k!r}]")
            vals[str(k)] = v
        score = alt["score"]
        if isinstance(score, int) and not isinstance(score, bool) and abs(score) > 2**1023:
            score = math.inf  # an integer beyond a float (a JSON file can hold one)
        if (isinstance(score, bool) or not isinstance(score, (int, float, np.floating))
                or not (math.isfinite(score) and score >= 0)):
            raise InvalidParameterError(f"{where}.score", score, "must be a finite number "
                                        ">= 0 (the misfit over the best explanation's)")
        out.append({**alt, "free": [str(f) for f in free], "values": vals,
                    "intervals": _check_intervals(alt.get("intervals") or {},
                                                  f"{where}.intervals"),
                    "score": float(score)})
    return tuple(out)


_VALUE_FIELDS = ("alpha", "utilization", "ceiling", "compute_slowdown",
                 "collective_overhead", "sync_overhead", "bucket_overhead",
                 "iteration_overhead", "overlap")
"""An alternative's values that are fields of :class:`ClusterProfile`, checked as its
constructor checks them."""


def _check_alternative_value(name, value, where):
    """Refuse an alternative's value that the cluster would refuse once applied (a
    negative ceiling, a slowdown beyond its bound, an efficiency above 1), naming where it
    is in the file: it was refused only when an answer applied it, without the file's
    field."""
    if value is None:
        return
    if name in _VALUE_FIELDS:
        try:
            ClusterProfile(**{name: value}, provenance={"source": "check"})
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise InvalidParameterError(where, value, getattr(
                exc, "requirement", str(exc))) from None
    elif name == "efficiency" and not 0.0 < value <= 1.0:
        raise InvalidParameterError(where, value, "must be in (0, 1] (a fraction of the "
                                    "GPU's peak)")
    elif name in ("host_overhead", "intra_alpha") and value < 0:
        raise InvalidParameterError(where, value, "must be >= 0")
    elif name == "intra_bw" and not value > 0:
        raise InvalidParameterError(where, value, "must be > 0 [bits/s]")


def _check_fit_settings(settings) -> dict:
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise InvalidParameterError("fit_settings", settings, "must be a dict with keys "
                                    f"among {list(FIT_SETTINGS_KEYS)}")
    unknown = set(settings) - set(FIT_SETTINGS_KEYS)
    if unknown:
        raise InvalidParameterError("fit_settings", sorted(unknown), "unknown keys; known: "
                                    f"{list(FIT_SETTINGS_KEYS)}")
    out = {}
    for k, v in settings.items():
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip():
            raise InvalidParameterError(f"fit_settings.{k}", v, "must be a non-empty text")
        _check_setting_name(k, v)
        out[k] = v
    return out


def _check_setting_name(key, value):
    """Refuse a recorded algorithm, sharding or fusion that no question could use, naming
    the record (it was refused later as if the caller had passed ``fusion=``): a fusion is
    a fusion name or, under sharding, a wrapping policy."""
    from .collectives import resolve_algorithm
    from .fusion import resolve_fusion
    from .sharding import is_wrap_name, resolve_sharding

    check = {"algorithm": resolve_algorithm, "sharding": resolve_sharding,
             "fusion": lambda v: is_wrap_name(v) or resolve_fusion(v)}.get(key)
    if check is None:
        return
    try:
        check(value)
    except (InvalidParameterError, ParameterTypeError) as exc:
        raise InvalidParameterError(f"fit_settings.{key}", value, getattr(
            exc, "requirement", str(exc))) from None


def _jsonable_intervals(intervals) -> dict:
    return {k: ([list(map(float, x)) for x in v] if k == "table_utilization" else list(v))
            for k, v in intervals.items()}


@attrs.frozen(eq=False)
class ClusterProfile:
    r"""Latency and achieved bandwidth of a cluster's transport.

    Parameters
    ----------
    name : str
        Label.
    alpha : float
        Per-message latency [s].
    utilization : float
        Fraction of the line rate achieved when no table is given, in (0, 1] [-].
    ceiling : float or None
        Largest achieved bandwidth whatever the line rate [bits/s].
    table_line_rate, table_utilization : numpy.ndarray or None
        Measured utilization [-] at line rates [bits/s]; interpolated in log line rate,
        clamped at the ends.
    reduction : ReductionCost or None
        Reduction cost on this cluster's devices; replaces the workload's when given.
    overlap : float
        Overlap efficiency :math:`\eta` in [0, 1]: the fraction of the backward pass
        during which communication can progress [-]. 1 (the default) on GPUs, where
        compute and communication have their own engines; below 1 where they share CPU
        cores, so a gradient ready at :math:`r_k` effectively starts its communication at
        :math:`r_k + (1 - \eta)(T_b - r_k)` (eq. :eq:`overlap-efficiency`).
    topology : Topology or None
        GPUs and NICs per node and the intra-node link; ``None`` means every worker has
        its own link (no topology) [-].
    compute_slowdown : float
        Factor :math:`\sigma \ge 1` by which forward and backward are slower in a
        distributed run than alone [-].
    collective_overhead : float
        Fixed cost of every collective, independent of its size and of n [s].
    sync_overhead : float
        Fixed cost paid once per iteration after the last collective [s].
    bucket_overhead : float
        Framework work per bucket (per tensor for per-tensor fusion) on the compute path
        of a distributed run: it delays the backward pass and every later bucket [s].
    iteration_overhead : float
        The data-parallel wrapper's work once per iteration (optimizer step) on the
        compute path, also on one worker with the wrapper [s].
    straggler_spread : float
        Relative standard deviation of one worker's per-iteration compute time; the
        n-worker compute is that of the slowest worker [-].
    host : HostCosts or None
        The data-parallel wrapper's host work per tensor and per bucket and its GPU work
        per iteration; the GPU pays the host work past the host's lead only (eq.
        :eq:`host-lead`). ``None``: not measured [s].
    intervals : dict
        Confidence intervals ``{field: (lo, hi)}`` of fitted values, an end the runs do
        not constrain ``None`` (never inf); for the table,
        ``"table_utilization": ([lo per row], [hi per row])``.
    codec_costs : dict
        Measured compression costs ``{family: {"encode": s/element, "decode": s/element,
        ...}}`` [s/element]; :func:`~scalemodel.plan_compression` uses them instead of the
        published defaults. Empty when not measured.
    provenance : dict
        Where the numbers come from.
    extra : dict
        Other fields of the file (fits, residuals, measured points), kept as read; a
        ``"model_discrepancy"`` record and a ``"run_noise"`` half-width
        (:mod:`scalemodel.discrepancy`) are checked and widen every answer's interval.
    alternatives : tuple of dict
        The explanations a fit could not tell apart, best first, each ``{"free": [names],
        "values": {name: value}, "intervals": {name: [lo, hi]}, "score": float}``: the
        parameters it fitted, their values and intervals (an end the runs do not constrain
        is None), and its Akaike-penalised misfit minus the best one's (>= 0; the best has
        0). Empty for a cluster that was not fitted. Predictions range over all of them
        (:mod:`scalemodel.intervals`); :meth:`with_alternative` gives one [-].
    fit_settings : dict
        What the cluster was fitted under: keys among ``"fusion"``, ``"algorithm"``,
        ``"sharding"`` (used by every call that passes none) and ``"transport"`` (a short
        text naming the transport source) [-].
    ring_share : float
        The share of each NIC's line rate that one data-parallel ring of a tensor-parallel
        job gets: 1 for the cluster as fitted, else the view :meth:`ring_view` makes (its
        ceiling and utilization table scaled to the ring's line rate). Not written to
        files [-].
    """

    name: str = "cluster"
    alpha: float = attrs.field(default=0.0, converter=scalar_converter("alpha", parse_duration))
    utilization: float = attrs.field(default=1.0, converter=scalar_converter("utilization"))
    ceiling: float | None = None
    table_line_rate: np.ndarray | None = None
    table_utilization: np.ndarray | None = None
    reduction: ReductionCost | None = None
    overlap: float = attrs.field(default=1.0, converter=scalar_converter("overlap"))
    topology: Topology | None = None
    compute_slowdown: float = attrs.field(default=1.0,
                                          converter=scalar_converter("compute_slowdown"))
    collective_overhead: float = attrs.field(
        default=0.0, converter=scalar_converter("collective_overhead", parse_duration))
    sync_overhead: float = attrs.field(default=0.0, converter=scalar_converter(
        "sync_overhead", parse_duration))
    bucket_overhead: float = attrs.field(default=0.0, converter=scalar_converter(
        "bucket_overhead", parse_duration))
    iteration_overhead: float = attrs.field(default=0.0, converter=scalar_converter(
        "iteration_overhead", parse_duration))
    straggler_spread: float = attrs.field(default=0.0,
                                          converter=scalar_converter("straggler_spread"))
    host: HostCosts | None = None
    intervals: dict = attrs.field(factory=dict)
    codec_costs: dict = attrs.field(factory=dict)
    provenance: dict = attrs.field(factory=dict)
    extra: dict = attrs.field(factory=dict)
    alternatives: tuple = attrs.field(default=())
    fit_settings: dict = attrs.field(factory=dict)
    ring_share: float = attrs.field(default=1.0, repr=False,
                                    converter=scalar_converter("ring_share"))
    _derived: dict = attrs.field(factory=dict, init=False, repr=False)

    def __attrs_post_init__(self):
        if not isinstance(self.name, str):  # name=5 or None was kept, and saved as such
            raise ParameterTypeError("name", self.name, "a string (the cluster's name)")
        check_nonnegative(self.alpha, "alpha")
        check_fraction(self.utilization, "utilization")
        if not 0.0 <= self.overlap <= 1.0:
            raise InvalidParameterError("overlap", self.overlap, "must be in [0, 1]")
        if not (math.isfinite(self.compute_slowdown) and 1.0 <= self.compute_slowdown <= 100.0):
            raise InvalidParameterError("compute_slowdown", self.compute_slowdown,
                                        "must be in [1, 100] (1 means no slowdown)")
        if not (math.isfinite(self.ring_share) and self.ring_share > 0.0):
            raise InvalidParameterError("ring_share", self.ring_share, "must be > 0")
        check_nonnegative(self.collective_overhead, "collective_overhead")
        check_nonnegative(self.sync_overhead, "sync_overhead")
        for name in ("bucket_overhead", "iteration_overhead", "straggler_spread"):
            check_nonnegative(getattr(self, name), name)
        _check_spread(self.straggler_spread, "straggler_spread")
        if self.topology is not None and not isinstance(self.topology, Topology):
            raise ParameterTypeError("topology", self.topology, "a Topology or None")
        if self.host is not None and not isinstance(self.host, HostCosts):
            raise ParameterTypeError("host", self.host, "a HostCosts or None")
        object.__setattr__(self, "ceiling", _opt_rate(self.ceiling, "ceiling"))
        if (self.table_line_rate is None) != (self.table_utilization is None):
            raise ProfileFormatError("<object>", "utilization_table",
                                     "line_rate and utilization come together")
        if self.table_line_rate is not None:
            rate = np.asarray(check_positive(np.atleast_1d(self.table_line_rate),
                                             "table_line_rate"), dtype=float)
            util = np.asarray(check_fraction(np.atleast_1d(self.table_utilization),
                                             "table_utilization"), dtype=float)
            if np.any(util < MIN_UTILIZATION):  # as the scalar utilization's floor
                k = int(np.argmax(util < MIN_UTILIZATION))
                raise ProfileFormatError("<object>", f"utilization_table.utilization[{k}]",
                                         f"{util[k]:g} must be at least {MIN_UTILIZATION:g} "
                                         "(a smaller one gives infinite times)")
            if rate.shape != util.shape or rate.ndim != 1:
                raise ProfileFormatError("<object>", "utilization_table",
                                         f"needs one utilization per line rate: {rate.size} "
                                         f"line rates, {util.size} utilizations")
            if np.any(np.diff(rate) <= 0):
                k = int(np.flatnonzero(np.diff(rate) <= 0)[0])
                raise ProfileFormatError("<object>", "utilization_table",
                                         f"needs increasing line rates: row {k + 1} has "
                                         f"{rate[k + 1]:g} bits/s after {rate[k]:g} (sort "
                                         "the rows by line rate)")
            object.__setattr__(self, "table_line_rate", rate)
            object.__setattr__(self, "table_utilization", util)
        object.__setattr__(self, "codec_costs", _check_codec_costs(self.codec_costs))
        object.__setattr__(self, "intervals", _check_intervals(self.intervals))
        object.__setattr__(self, "alternatives", _check_alternatives(self.alternatives))
        object.__setattr__(self, "fit_settings", _check_fit_settings(self.fit_settings))
        if isinstance(self.extra, dict) and self.extra.get(KEY) is not None:  # a factor on every answer's interval
            check_discrepancy(self.extra[KEY])
        if isinstance(self.extra, dict) and self.extra.get(NOISE_KEY) is not None:
            # the noise of a run on every interval, kept as a float (a file holds it)
            object.__setattr__(self, "extra", dict(self.extra, **{
                NOISE_KEY: check_run_noise(self.extra[NOISE_KEY])}))

    def _table_achieved(self):
        """Table line rates and their non-decreasing achieved bandwidths [bits/s]."""
        rate = self.table_line_rate
        return rate, np.maximum.accumulate(self.table_utilization * rate)

    def utilization_at(self, bw):
        """Achieved fraction of the line rate ``bw`` [bits/s], eq. :eq:`achieved` [-]."""
        u = self._uncapped_utilization(bw)
        if self.ceiling is not None:
            u = np.minimum(u, self.ceiling / np.asarray(bw, dtype=float))
        return u

    def _uncapped_utilization(self, bw):
        """:meth:`utilization_at` without the ceiling [-]."""
        bw = np.asarray(bw, dtype=float)
        if self.table_line_rate is not None:
            rate, ach = self._table_achieved()
            lb = np.log(bw)
            inside = np.exp(np.interp(lb, np.log(rate), np.log(ach))) / bw
            u = np.where(bw < rate[0], ach[0] / rate[0],
                         np.where(bw > rate[-1], ach[-1] / rate[-1], inside))
        else:
            u = np.full_like(bw, self.utilization)
        return u

    def ceiling_binds(self, bw):
        """Whether the ceiling, not the utilization, limits the achieved bandwidth at line
        rate ``bw`` [bits/s] [-]."""
        if self.ceiling is None:
            return np.zeros(np.shape(bw), dtype=bool) if np.ndim(bw) else False
        c = self.ceiling / np.asarray(bw, dtype=float)
        free = self._uncapped_utilization(bw)
        out = c < free
        return bool(out) if np.ndim(out) == 0 else out

    def achieved_elasticity(self, bw):
        r""":math:`d \ln B_\text{eff} / d \ln B` at line rate ``bw`` [bits/s]: 1 where
        the utilization is constant, the log-log slope inside the table, 0 where the
        ceiling binds (one-sided, from the right, at table points) [-]."""
        bw = np.asarray(bw, dtype=float)
        e = np.ones_like(bw)
        if self.table_line_rate is not None:
            rate, ach = self._table_achieved()
            slopes = np.diff(np.log(ach)) / np.diff(np.log(rate))
            i = np.searchsorted(rate, bw, side="right") - 1
            inside = (i >= 0) & (i < rate.size - 1)
            e = np.where(inside, slopes[np.clip(i, 0, max(rate.size - 2, 0))]
                         if slopes.size else 1.0, 1.0)
        if self.ceiling is not None:
            e = np.where(self.ceiling_binds(bw), 0.0, e)
        return float(e) if e.ndim == 0 else e

    def achieved_bandwidth(self, bw):
        """Achieved bandwidth at line rate ``bw`` [bits/s], eq. :eq:`achieved` [bits/s]."""
        return self.utilization_at(bw) * np.asarray(bw, dtype=float)

    def max_achieved_bandwidth(self) -> float:
        """Supremum of the achieved bandwidth over all line rates [bits/s] (inf if none)."""
        if self.ceiling is not None:
            return self.ceiling
        return math.inf

    def line_rate_for(self, needed: float) -> float:
        """Smallest line rate whose achieved bandwidth is at least ``needed`` [bits/s]
        (exact inverse of eq. :eq:`achieved`; ``inf`` when the ceiling is lower).

        Parameters
        ----------
        needed : float
            Achieved bandwidth wanted [bits/s].
        """
        needed = float(needed)
        if not needed > 0:
            return 0.0
        if needed > self.max_achieved_bandwidth():
            return math.inf
        if self.table_line_rate is None:
            return needed / self.utilization
        rate, ach = self._table_achieved()
        if needed <= ach[0]:
            return needed * rate[0] / ach[0]
        if needed > ach[-1]:
            return needed * rate[-1] / ach[-1]
        i = int(np.searchsorted(ach, needed, side="left"))  # ach[i-1] < needed <= ach[i]
        if ach[i] == needed:
            return float(rate[i])
        t = (math.log(needed) - math.log(ach[i - 1])) / (math.log(ach[i]) - math.log(ach[i - 1]))
        return float(math.exp(math.log(rate[i - 1]) + t * (math.log(rate[i])
                                                          - math.log(rate[i - 1]))))

    def corners(self):
        """The (pessimistic, optimistic) clusters at the ends of the fitted intervals.

        The scaling factor falls with the latency, the compute slowdown, the fixed
        costs and the framework terms (per-bucket, per-iteration, straggler spread), and
        rises with the utilization (every table row) and the ceiling, so over
        the box of ``intervals`` its extremes sit at these two corners (see
        :mod:`scalemodel.calibrate.uncertainty`). Fields without an interval stay as they
        are. Returns ``(self, self)`` when there are no intervals. An end that is ``None``
        (the runs do not constrain it) takes the parameter's bound from
        :data:`~scalemodel.cluster.PARAMETER_BOUNDS`; a ceiling's upper end ``None`` gives
        the optimistic corner no ceiling. Fitted codec costs (``intervals["codec.<key>"]``,
        :mod:`scalemodel.fit_codec`) and the wrapper's host costs (``host.intervals``) go
        to their slow and fast ends. The pair is computed once per cluster object.
        """
        cached = self._derived.get("corners")
        if cached is None:
            cached = self._derived["corners"] = self._corners()
        return cached

    def _ceiling_floor(self):
        """The ceiling's bound below [bits/s]: 2 % of the largest line rate of the runs
        the cluster was fitted to (of the ceiling when none are recorded)."""
        runs = self.provenance.get("runs") if isinstance(self.provenance, dict) else None
        rates = [float(r["bw"]) for r in runs or () if isinstance(r, dict)
                 and isinstance(r.get("bw"), (int, float)) and r["bw"] > 0]
        top = max(rates) * self.ring_share if rates else self.ceiling
        return None if top is None else PARAMETER_BOUNDS["ceiling"][0] * top

    def _corners(self):
        iv = self.intervals

        def pair(name, value):
            lo, hi = iv.get(name, (value, value))
            lower, upper = PARAMETER_BOUNDS.get(name, (value, value))
            if upper is not None and value is not None:  # never a corner past the fit itself
                lower, upper = min(lower, value), max(upper, value)
            return (float(lower if lo is None else lo),
                    float(upper if hi is None else hi))

        worst, best = {}, {}
        for name, rises in (("alpha", False), ("compute_slowdown", False),
                            ("collective_overhead", False), ("sync_overhead", False),
                            ("bucket_overhead", False), ("iteration_overhead", False),
                            ("straggler_spread", False),
                            ("utilization", True), ("overlap", True)):
            if name in iv:
                lo, hi = pair(name, getattr(self, name))
                if name == "compute_slowdown":
                    lo = max(1.0, lo)
                if name in ("utilization", "overlap"):
                    lo, hi = max(lo, 1e-9 if name == "utilization" else 0.0), min(hi, 1.0)
                if name in ("alpha", "collective_overhead", "sync_overhead",
                            "bucket_overhead", "iteration_overhead", "straggler_spread"):
                    lo = max(lo, 0.0)
                worst[name], best[name] = (lo, hi) if rises else (hi, lo)
        if "ceiling" in iv and (self.ceiling is not None or iv["ceiling"][0] is not None):
            lo, hi = iv["ceiling"]
            worst["ceiling"] = self._ceiling_floor() if lo is None else lo
            best["ceiling"] = hi  # None: no ceiling at the optimistic end
        if self.table_line_rate is not None and "table_utilization" in iv:
            lo, hi = (np.clip(np.asarray(v, dtype=float), 1e-9, 1.0)
                      for v in iv["table_utilization"])
            worst["table_utilization"], best["table_utilization"] = lo, hi
        elif self.table_line_rate is not None and "utilization" in iv and self.utilization > 0:
            scale_lo = worst["utilization"] / self.utilization
            scale_hi = best["utilization"] / self.utilization
            worst["table_utilization"] = np.clip(self.table_utilization * scale_lo, 1e-9, 1)
            best["table_utilization"] = np.clip(self.table_utilization * scale_hi, 1e-9, 1)
        if self.topology is not None and ("intra_bw" in iv or "intra_alpha" in iv):
            t = self.topology
            bw_lo, bw_hi = pair("intra_bw", t.intra_bw)
            a_lo, a_hi = pair("intra_alpha", t.intra_alpha)
            bw_lo, a_lo = max(bw_lo, 1.0), max(a_lo, 0.0)
            worst["topology"] = attrs.evolve(t, intra_bw=bw_lo, intra_alpha=a_hi)
            best["topology"] = attrs.evolve(t, intra_bw=bw_hi, intra_alpha=a_lo)
        eff = self.extra.get("efficiency") if isinstance(self.extra, dict) else None
        if isinstance(eff, dict) and eff.get("interval") is not None:
            # a fitted workload efficiency (scalemodel.efficiency): faster compute hides
            # less communication, so its upper end is the pessimistic corner
            lo, hi = (list(eff["interval"]) + [None, None])[:2]
            lower, upper = PARAMETER_BOUNDS["efficiency"]
            lo, hi = lower if lo is None else lo, upper if hi is None else hi
            # "end" lets a workload the runs did not show widen it (efficiency.fitted_efficiency)
            worst["extra"] = dict(self.extra, efficiency=dict(eff, value=float(hi), end="high"))
            best["extra"] = dict(self.extra, efficiency=dict(eff, value=float(lo), end="low"))
        codec = self._codec_corners()
        if codec is not None:
            worst["codec_costs"], best["codec_costs"] = codec
        if self.host is not None:  # more host work (and a host-bound profile): slower
            worst["host"], best["host"] = self.host.ends()
        if not worst:
            return self, self
        return attrs.evolve(self, **worst), attrs.evolve(self, **best)

    def _codec_corners(self):
        """``codec_costs`` at the ends of their fitted intervals (``intervals["codec.<key>"]``,
        the per-element encode cost [s/element], :mod:`scalemodel.fit_codec`; the other
        per-element costs in proportion, the launch kept): (slowest, fastest) or None."""
        keys = [k for k in self.intervals
                if k.startswith("codec.") and k[len("codec."):] in self.codec_costs]
        if not keys:
            return None
        worst, best = dict(self.codec_costs), dict(self.codec_costs)
        per = ("encode", "decode", "encode_per_rank", "decode_per_rank")
        for k in keys:
            name = k[len("codec."):]
            entry, (lo, hi) = self.codec_costs[name], self.intervals[k]
            e = entry.get("encode", 0.0)
            if e <= 0:
                continue
            for out, v in ((worst, hi), (best, 0.0 if lo is None else lo)):
                if v is not None:
                    out[name] = {f: (x * v / e if f in per else x) for f, x in entry.items()}
        return worst, best

    def ring_view(self, share):
        """This cluster as one data-parallel ring of a tensor-parallel job sees it.

        The NICs of a node carry the rings of its :math:`t` tensor-parallel ranks at once,
        so one ring runs at ``share`` (:math:`\\nu/t`) times a NIC's line rate
        (:func:`~scalemodel.parallel.dp_options`). What the runs fitted is the NIC's: its
        achieved fraction of its own line rate (the utilization, or the table's at the
        NIC's rate) and its ceiling, which the rings on it share. In the ring's view the
        ceiling, the ceilings of the intervals and alternatives, and the line rates of the
        utilization table are ``share`` times theirs; the other terms (compute slowdown,
        framework and fixed costs, latency, host costs) are per GPU or per collective and
        stay. A ceiling that is a limit per connection (TCP sockets: one thread per
        communicator) rather than per NIC would let each ring reach it alone; that is not
        modelled.

        Parameters
        ----------
        share : float
            The ring's share of a NIC, :math:`\\nu/t` [-].

        Returns
        -------
        ClusterProfile
            ``self`` when ``share`` is 1 or this is already that view; else the view.

        Raises
        ------
        InvalidParameterError
            ``share`` not a number > 0, or this cluster already the view of another share.
        """
        share = float(share)
        if not (math.isfinite(share) and share > 0.0):
            raise InvalidParameterError("share", share, "must be a number > 0")
        if share == self.ring_share:
            return self
        if self.ring_share != 1.0:
            raise InvalidParameterError("share", share, "this cluster is already one "
                                        f"ring's view at a share of {self.ring_share:g}")

        kept = self._derived.get(("ring_view", share))  # one view per share and object
        if kept is None:  # (with its own corners, computed once)
            kept = self._derived[("ring_view", share)] = self._ring_view(share)
        return kept

    def _ring_view(self, share):
        """:meth:`ring_view`, computed."""
        def scaled(v):
            return None if v is None else float(v) * share

        intervals = dict(self.intervals)
        if "ceiling" in intervals:
            intervals["ceiling"] = tuple(scaled(v) for v in intervals["ceiling"])
        alts = []
        for alt in self.alternatives:
            values, iv = dict(alt.get("values") or {}), dict(alt.get("intervals") or {})
            if "ceiling" in values:
                values["ceiling"] = scaled(values["ceiling"])
            if "ceiling" in iv:
                iv["ceiling"] = tuple(scaled(v) for v in iv["ceiling"])
            alts.append(dict(alt, values=values, intervals=iv))
        return attrs.evolve(
            self, ceiling=scaled(self.ceiling), intervals=intervals, alternatives=tuple(alts),
            table_line_rate=(None if self.table_line_rate is None
                             else self.table_line_rate * share),
            ring_share=share)

    def settings_defaults(self, algorithm=None, fusion=None, sharding=None):
        """``(algorithm, fusion, sharding)`` with each one the caller left ``None`` taken
        from :attr:`fit_settings` (still ``None`` when the fit did not record it; the
        callers then use ring, their default fusion and no sharding). The fit's fusion
        applies only under the sharding it was fitted under.

        Parameters
        ----------
        algorithm, fusion, sharding : str, object or None
            The caller's choices; ``None`` means the cluster's [-].
        """
        fs = self.fit_settings
        if not fs:
            return algorithm, fusion, sharding
        if algorithm is None:
            algorithm = fs.get("algorithm")
        if sharding is None:
            sharding = fs.get("sharding")
        if fusion is None and "fusion" in fs:
            from .sharding import resolve_sharding

            if (resolve_sharding(sharding).strategy
                    == resolve_sharding(fs.get("sharding")).strategy):
                fusion = fs["fusion"]
        return algorithm, fusion, sharding

    def with_alternative(self, i):
        """The cluster under alternative ``i`` of :attr:`alternatives` (0 is the best):
        its values and intervals applied, the parameters the best explanation fitted and
        this one does not back at the ideal model's values, no alternatives of its own.
        Values of parameters that are not the cluster's (a workload's ``efficiency``) are
        left out; codec costs fitted under this explanation (its ``"codec_costs"`` and
        ``"codec_intervals"``, :mod:`scalemodel.fit_codec`) replace the cluster's.
        Computed once per cluster object and index.

        Parameters
        ----------
        i : int
            Index into :attr:`alternatives` [-].

        Returns
        -------
        ClusterProfile
            The cluster of that explanation.
        """
        alts = self.alternatives
        if (isinstance(i, bool) or not isinstance(i, (int, np.integer))
                or not -len(alts) <= int(i) < len(alts)):
            raise InvalidParameterError("i", i, f"must index the {len(alts)} alternatives "
                                        "of the cluster" if alts else "the cluster has no "
                                        "alternatives (it was not fitted, or the runs told "
                                        "the explanations apart)")
        i = int(i) % len(alts)
        key = ("alternative", i)
        if key not in self._derived:
            self._derived[key] = self._apply_alternative(alts[i])
        return self._derived[key]

    def _apply_alternative(self, alt):
        best = self.alternatives[0]
        touched = set(best["free"]) | set(best["values"]) | set(alt["free"]) | set(alt["values"])
        values = {k: _IDEAL[k] for k in set(best["free"]) | set(best["values"]) if k in _IDEAL}
        values.update(alt["values"])
        changes, topo = {}, {}
        for name, v in values.items():
            if name in ("intra_bw", "intra_alpha"):
                topo[name] = v
            elif name == "host_overhead":
                from .collectives import ReductionCost as _Reduction
                changes["reduction"] = (_Reduction(gamma=v, latency=0.0,
                                                   name="fitted host overhead")
                                        if v > 0 else None)
            elif name in _IDEAL or isinstance(getattr(self, name, None), float):
                changes[name] = v
        if topo and self.topology is not None:
            changes["topology"] = attrs.evolve(self.topology, **topo)
        intervals = {k: v for k, v in self.intervals.items() if k not in touched}
        intervals.update(alt["intervals"])
        eff = self.extra.get("efficiency") if isinstance(self.extra, dict) else None
        if isinstance(eff, dict):  # a workload's efficiency: this explanation's, or none
            extra = {k: v for k, v in self.extra.items() if k != "efficiency"}
            if "efficiency" in alt["values"]:
                extra["efficiency"] = dict(eff, value=alt["values"]["efficiency"], interval=list(
                    alt["intervals"].get("efficiency", eff.get("interval"))))
            intervals.pop("efficiency", None)
            changes["extra"] = extra
        if isinstance(alt.get("codec_costs"), dict):  # codec costs fitted under it
            changes["codec_costs"] = alt["codec_costs"]
            intervals = {k: v for k, v in intervals.items() if not k.startswith("codec.")}
            intervals.update(alt.get("codec_intervals") or {})
        return attrs.evolve(self, intervals=intervals, alternatives=(), **changes)

    def __repr__(self):
        parts = [f"name={self.name!r}", f"alpha={self.alpha:.3g} s"]
        if self.table_line_rate is not None:
            parts.append(f"utilization table ({self.table_line_rate.size} line rates)")
        else:
            parts.append(f"utilization={self.utilization:.3g}")
        if self.ceiling is not None:
            parts.append(f"ceiling={format_bandwidth(self.ceiling)}")
        if self.topology is not None:
            t = self.topology
            parts.append(f"{t.gpus_per_node} GPUs x {t.nics_per_node} NIC per node, "
                         f"intra {format_bandwidth(t.intra_bw)}")
        for name, unit in (("compute_slowdown", ""), ("collective_overhead", " s"),
                           ("sync_overhead", " s"), ("bucket_overhead", " s"),
                           ("iteration_overhead", " s"), ("straggler_spread", ""),
                           ("overlap", "")):
            v = getattr(self, name)
            if v != (1.0 if name in ("compute_slowdown", "overlap") else 0.0):
                parts.append(f"{name}={v:.4g}{unit}")
        if self.reduction is not None:
            parts.append(f"reduction={self.reduction.name!r}")
        if self.host is not None:
            h = self.host
            parts.append(f"host={h.per_tensor * 1e6:.3g} us/tensor, "
                         f"{h.per_bucket * 1e6:.3g} us/bucket, {h.device_time * 1e3:.3g} ms "
                         "on the GPU")
        if self.codec_costs:
            parts.append(f"codec_costs for {sorted(self.codec_costs)}")
        if self.fit_settings:
            parts.append(f"fitted under {self.fit_settings}")
        if len(self.alternatives) > 1:
            parts.append(f"{len(self.alternatives)} alternative explanations")
        return f"ClusterProfile({', '.join(parts)})"

    __str__ = __repr__

    def to_dict(self) -> dict:
        """The cluster as a JSON-ready dict in the file format."""
        out = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": self.name,
               "provenance": self.provenance, "alpha": self.alpha,
               "utilization": self.utilization, "ceiling": self.ceiling}
        if self.table_line_rate is not None:
            out["utilization_table"] = {"line_rate": self.table_line_rate.tolist(),
                                        "utilization": self.table_utilization.tolist()}
        if self.reduction is not None:
            out["reduction"] = self.reduction.to_dict()
        if self.overlap != 1.0:
            out["overlap"] = self.overlap
        if self.topology is not None:
            out["topology"] = self.topology.to_dict()
        for name, default in (("compute_slowdown", 1.0), ("collective_overhead", 0.0),
                              ("sync_overhead", 0.0), ("bucket_overhead", 0.0),
                              ("iteration_overhead", 0.0), ("straggler_spread", 0.0)):
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        if self.host is not None:
            out["host"] = self.host.to_dict()
        if self.intervals:
            out["intervals"] = _jsonable_intervals(self.intervals)
        if self.alternatives:
            out["alternatives"] = [{**a, "free": list(a["free"]), "values": dict(a["values"]),
                                    "intervals": _jsonable_intervals(a["intervals"])}
                                   for a in self.alternatives]
        if self.fit_settings:
            out["fit_settings"] = dict(self.fit_settings)
        if self.codec_costs:
            out["codec_costs"] = {k: dict(v) for k, v in self.codec_costs.items()}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data, source="<object>") -> "ClusterProfile":
        """Build from a dict in the file format; errors name the field and call the file
        a cluster (:class:`~scalemodel.exceptions.ProfileFormatError`)."""
        try:
            return cls._from_dict(data, source)
        except ProfileFormatError as exc:
            raise exc.called("cluster") from None

    @classmethod
    def _from_dict(cls, data, source="<object>") -> "ClusterProfile":
        from .profiles import _reduction_from  # one parser for reduction specs

        if not isinstance(data, dict):
            raise ProfileFormatError(source, "<top>", "a cluster profile is a JSON object")
        if data.get("format") != FORMAT:
            raise ProfileFormatError(source, "format",
                                     f"expected {FORMAT!r}, got {data.get('format')!r}")
        if data.get("format_version") != FORMAT_VERSION or \
                isinstance(data.get("format_version"), bool):  # JSON true is not 1
            raise ProfileFormatError(source, "format_version",
                                     f"expected {FORMAT_VERSION}, got {data.get('format_version')!r}")
        prov = data.get("provenance")
        if not isinstance(prov, dict) or not prov.get("source"):
            raise ProfileFormatError(source, "provenance.source",
                                     "every profile must say where its numbers come from")
        known = {"format", "format_version", "name", "provenance", "alpha", "utilization",
                 "ceiling", "utilization_table", "reduction", "intervals", "codec_costs",
                 "overlap", "topology", "compute_slowdown", "collective_overhead",
                 "sync_overhead", "bucket_overhead", "iteration_overhead",
                 "straggler_spread", "alternatives", "fit_settings", "host", KEY,
                 NOISE_KEY}
        check_keys(source, data, known, kind="cluster profile", kept=WRITTEN_EXTRA_KEYS)
        topo = data.get("topology")
        if topo is not None:
            keys = {"gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha", "arch",
                    "intra_link"}
            if not isinstance(topo, dict) or set(topo) - keys:
                raise ProfileFormatError(source, "topology", "must be an object with "
                                         f"the keys {sorted(keys)}")
            try:
                topo = Topology(**{k: v for k, v in topo.items() if v is not None})
            except (ValueError, TypeError) as exc:
                field = getattr(exc, "parameter", "<value>")
                raise ProfileFormatError(source, f"topology.{field}", str(exc)) from None
        table = data.get("utilization_table")
        if table is not None and not (isinstance(table, dict)
                                      and {"line_rate", "utilization"} <= set(table)):
            raise ProfileFormatError(source, "utilization_table", "must be an object "
                                     "{\"line_rate\": [bits/s ...], \"utilization\": [...]}")
        try:
            return cls(
                name=str(data.get("name", "cluster")), alpha=data.get("alpha", 0.0),
                utilization=data.get("utilization", 1.0), ceiling=data.get("ceiling"),
                table_line_rate=None if table is None else table.get("line_rate"),
                table_utilization=None if table is None else table.get("utilization"),
                reduction=(None if data.get("reduction") is None
                           else _reduction_from(data["reduction"], source)),
                overlap=data.get("overlap", 1.0), topology=topo,
                compute_slowdown=data.get("compute_slowdown", 1.0),
                collective_overhead=data.get("collective_overhead", 0.0),
                sync_overhead=data.get("sync_overhead", 0.0),
                bucket_overhead=data.get("bucket_overhead", 0.0),
                iteration_overhead=data.get("iteration_overhead", 0.0),
                straggler_spread=data.get("straggler_spread", 0.0),
                host=(None if data.get("host") is None
                      else HostCosts.from_dict(data["host"], source)),
                intervals=_or_empty(data, "intervals", {}),
                alternatives=_or_empty(data, "alternatives", ()),
                fit_settings=_or_empty(data, "fit_settings", {}),
                codec_costs=_or_empty(data, "codec_costs", {}),
                provenance=prov, extra={k: v for k, v in data.items()
                                        if k not in known
                                        or k in (KEY, NOISE_KEY) and v is not None})
        except ProfileFormatError as exc:
            prefix = f"profile {exc.source}: field {exc.field!r}: "
            if exc.source == "<object>" and source != "<object>" and \
                    str(exc).startswith(prefix):   # name the file, not "<object>"
                raise ProfileFormatError(source, exc.field, str(exc)[len(prefix):]) from None
            raise
        except (ValueError, TypeError, AttributeError) as exc:
            field = getattr(exc, "parameter", "<value>")
            raise ProfileFormatError(source, str(field), str(exc)) from None


def _or_empty(data, key, empty):
    """``data[key]``, or ``empty`` when absent or null; a falsy value of another type
    (``0``, ``""``, ``false``, or ``[]`` for an object) is passed on for the field's own
    check to refuse rather than read as empty."""
    value = data.get(key)
    if value is None or (not value and type(value) is type(empty)):
        return empty
    if not value and isinstance(empty, tuple) and isinstance(value, list):
        return empty  # [] for a list of alternatives
    return value


_CODEC_KEYS = ("encode", "decode", "encode_per_rank", "decode_per_rank", "launch")


CODEC_FAMILIES = ("fp16", "bf16", "int8", "signsgd", "topk", "randomk", "powersgd", "none")
"""The compressor families a cluster's ``codec_costs`` may name (the names of
:data:`scalemodel.compressors.COMPRESSORS`, a layer above) [-]."""


def _check_codec_costs(costs) -> dict:
    """Validate ``codec_costs``: ``{family: {"encode": s/element, "decode": s/element}}``
    with optional ``encode_per_rank``, ``decode_per_rank`` [s/(element rank)] and
    ``launch`` [s per call]; every value finite and >= 0; a family of
    :data:`CODEC_FAMILIES`, optionally after ``"<implementation>/"`` (a fit's per
    implementation costs, ``"grace-tf/topk"``)."""
    if not isinstance(costs, dict):
        raise ProfileFormatError("<object>", "codec_costs",
                                 "must be an object {family: {encode, decode}}")
    out = {}
    for family, entry in costs.items():
        name = str(family).rpartition("/")[2]  # "<implementation>/<family>" too
        if name not in CODEC_FAMILIES or str(family).startswith("/"):  # a misspelling
            import difflib  # would be kept and never used
            near = difflib.get_close_matches(name.lower(), CODEC_FAMILIES, n=1)
            raise ProfileFormatError("<object>", f"codec_costs.{family}",
                                     "is not a compressor family"
                                     + (f" (did you mean {near[0]!r}?)" if near else "")
                                     + f"; known: {', '.join(CODEC_FAMILIES)}, each "
                                     "optionally after '<implementation>/'")
        if not isinstance(entry, dict) or not {"encode", "decode"} <= set(entry):
            raise ProfileFormatError("<object>", f"codec_costs.{family}",
                                     "needs 'encode' and 'decode' [s/element]")
        unknown = set(entry) - set(_CODEC_KEYS)
        if unknown:
            raise ProfileFormatError("<object>", f"codec_costs.{family}",
                                     f"unknown keys {sorted(unknown)}; known: {list(_CODEC_KEYS)}")
        out[str(family)] = {k: float(check_nonnegative(v, f"codec_costs.{family}.{k}"))
                            for k, v in entry.items()}
    return out


def load_cluster(cluster) -> ClusterProfile:
    """A :class:`ClusterProfile` from an object (passed through) or a JSON file path.

    Parameters
    ----------
    cluster : ClusterProfile, str or os.PathLike
        The cluster profile or the path of its JSON file [-].
    """
    if isinstance(cluster, ClusterProfile):
        return cluster
    if not isinstance(cluster, (str, os.PathLike)):
        raise ParameterTypeError("cluster", cluster, "a ClusterProfile or a path to a "
                                 "cluster JSON file")
    path = Path(cluster)
    if not os.fspath(cluster).strip() or not os.path.lexists(path):
        from .exceptions import InvalidParameterError
        raise InvalidParameterError("cluster", os.fspath(cluster), "no such file",
                                    "Write one with the calibration (python -m "
                                    "scalemodel.calibrate) or build a ClusterProfile")
    from ._jsonfile import read_json_file  # regular files only; size, depth, UTF-8 checked
    data = read_json_file(path, what="cluster profile")
    return ClusterProfile.from_dict(data, str(path))


def save_cluster(cluster: ClusterProfile, path) -> Path:
    """Write ``cluster`` to ``path`` as JSON, atomically (never half written).

    Parameters
    ----------
    cluster : ClusterProfile
        The cluster profile [-].
    path : str or os.PathLike
        Destination file [path].

    Returns
    -------
    pathlib.Path
        The path written.
    """
    from .profiles import atomic_write_text, check_destination_path

    if not isinstance(cluster, ClusterProfile):
        raise ParameterTypeError("cluster", cluster, "a ClusterProfile (a fit's .cluster, "
                                 "or load_cluster(path))")
    check_destination_path(path)
    atomic_write_text(path, json.dumps(cluster.to_dict(), indent=1))
    return Path(path)
