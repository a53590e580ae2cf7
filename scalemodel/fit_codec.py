r"""Codec costs fitted from measured compressed runs: the second step of
:func:`~scalemodel.fit_cluster`.

A compressed run (a run with ``compressor``, :mod:`scalemodel.runs`) measures the
iteration time of the compressed model on the cluster. With the cluster fitted from the
uncompressed runs and held, the only unknown left is what the compressor's kernels cost
on this GPU in this implementation. One run gives one number, so each family gets
**one** parameter: a factor :math:`m` on its starting per-element costs (encode,
decode and the per-rank terms of :class:`~scalemodel.compressors.CodecCost`; the
starting costs are those the cluster or the defaults give,
:func:`~scalemodel.compressors.codec_costs_for`), so that

.. math::
   :label: codec-fit

   T^\text{model}_i\big(c_e = m\,c_e^0,\; c_d = m\,c_d^0,\; L = L^0\big)
   = T^\text{measured}_i ,

and the per-call launch :math:`L^0` stays the starting one (the GPU's kernel launch and
dispatch). The model's iteration time does not fall as :math:`m` grows (the codec time is
added to the communication channel, eq. :eq:`compressed-bucket`, or to the compute stream,
eq. :eq:`compute-stream`), so the root is unique
where it exists and is found by bracketing. With two or more compressed runs of one
family whose times the two parameters can tell apart (e.g. two worker counts: the
all-gathered families decode :math:`n` contributions, the launches do not grow), both
:math:`m` and :math:`L` are fitted by least squares on the relative errors in units of
the runs' uncertainties.

**Interval.** The run's time within :math:`\pm z\,s` (its relative uncertainty
:math:`s`, :math:`z` of the confidence level) on the pessimistic and the optimistic
corner of the fitted cluster (:meth:`~scalemodel.ClusterProfile.corners`): the lowest
and highest :math:`m` that reach it. The fitted cluster carries the value in
``codec_costs`` (keyed ``"<implementation>/<family>"`` when the runs name an
implementation, e.g. ``"grace-tf/topk"``, else by the family: see
:mod:`scalemodel.codec_costs`) and the interval of the per-element encode cost in
``intervals["codec.<key>"]`` [s/element], so every planner answer
(:func:`~scalemodel.plan_compression`, :func:`~scalemodel.compressed_scaling_factor`,
:func:`~scalemodel.breakeven_bandwidth`) uses it and the answers' intervals range over it.

**Not used** (said in the result's message and status): a cost that would have to be
negative (the model without any codec time is already slower than the run, beyond its
noise: something else is mis-modelled) and a cost the run does not bound (a run on one
worker, or a codec hidden behind the compute, or more than :data:`MAX_SCALE` times the
starting costs).
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .compressors import CodecCost, codec_costs_for, for_implementation
from .exceptions import InvalidParameterError, ParameterTypeError

__all__ = ["fit_codec", "CodecFit", "CodecFitResult", "MAX_SCALE", "compressed_runs"]

MAX_SCALE = 1e4
"""Largest factor on the starting per-element codec costs a fit accepts: a cost that
needs more is reported as unbounded and not used [-]."""

_ROOT_TOL = 1e-10


@attrs.frozen
class CodecFit:
    """The codec cost of one compressor family fitted from compressed runs.

    Attributes
    ----------
    family : str
        The ``codec_costs`` key: the compressor family, or
        ``"<implementation>/<family>"`` when the runs name an implementation.
    runs : tuple of str
        Labels of the runs it was fitted from.
    status : str
        ``"fitted"`` (used), ``"negative"`` or ``"unbounded"`` (not used).
    used : bool
        Whether the fitted cluster carries it.
    scale : float
        Factor on the starting per-element costs [-] (NaN when not fitted).
    scale_interval : tuple
        Its interval ``(lo, hi)`` [-].
    cost : CodecCost or None
        The fitted per-element costs [s/element] and launch [s].
    start : CodecCost
        The costs it started from.
    launch_fitted : bool
        Whether the launch was fitted too (two or more runs that tell it apart).
    message : str
        One line for people.
    residuals : tuple
        Per run ``(label, measured, fitted)`` iteration times with the fitted cost [s]
        (empty when not used).
    """

    family: str
    runs: tuple
    status: str
    used: bool
    scale: float
    scale_interval: tuple
    cost: object
    start: object
    launch_fitted: bool
    message: str
    residuals: tuple = ()

    @property
    def encode_interval(self):
        """Interval of the per-element encode cost [s/element]."""
        lo, hi = self.scale_interval
        e = self.start.encode
        return (None if lo is None else lo * e, None if hi is None else hi * e)

    def to_dict(self) -> dict:
        """JSON-ready data: a scale that was not fitted (NaN) is None, as JSON has no
        NaN (a cluster file holding one is not JSON to strict readers)."""
        return {"family": self.family, "runs": list(self.runs), "status": self.status,
                "used": self.used,
                "scale": self.scale if math.isfinite(self.scale) else None,
                "scale_interval": list(self.scale_interval),
                "cost": None if self.cost is None else _cost_dict(self.cost),
                "start": _cost_dict(self.start), "launch_fitted": self.launch_fitted,
                "message": self.message, "residuals": [list(r) for r in self.residuals]}


@attrs.frozen(eq=False)
class CodecFitResult:
    """Result of :func:`fit_codec`.

    Attributes
    ----------
    cluster : ClusterProfile
        The cluster with the fitted (used) codec costs in ``codec_costs`` and their
        intervals.
    fits : dict
        ``{key: CodecFit}``, keyed as in ``cluster.codec_costs``.
    message : str
        One line per family.
    """

    cluster: object
    fits: dict
    message: str


def _cost_dict(c: CodecCost) -> dict:
    return {"encode": c.encode, "decode": c.decode, "encode_per_rank": c.encode_per_rank,
            "decode_per_rank": c.decode_per_rank, "launch": c.launch}


def _scaled(c: CodecCost, m: float, launch: float | None = None, source="") -> CodecCost:
    return CodecCost(encode=m * c.encode, decode=m * c.decode,
                     encode_per_rank=m * c.encode_per_rank,
                     decode_per_rank=m * c.decode_per_rank,
                     launch=c.launch if launch is None else launch, source=source)


# --------------------------------------------------------------------------- runs


def compressed_runs(runs):
    """Split validated runs into ``(uncompressed, [(index, run), ...] compressed)``.

    Parameters
    ----------
    runs : list of Run
        Validated runs (:func:`~scalemodel.runs.load_runs`) [-].
    """
    plain, comp = [], []
    for i, r in enumerate(runs):
        if getattr(r, "compressor", None) is None:
            plain.append(r)
        else:
            comp.append((i, r))
    return plain, comp


def _start_costs(sc, cluster, implementation):
    """The codec costs the planner would use for this scenario: the implementation's
    table scaled to the profile's GPU, the cluster's measured entries first."""
    try:
        from .codec_costs import profile_gpu
    except ImportError:  # pragma: no cover - before per-GPU costs
        return codec_costs_for(cluster)
    return codec_costs_for(cluster, gpu=profile_gpu(sc.profile, None),
                           implementation=implementation)


class _RunModel:
    """One compressed run on one cluster: its model time as a function of the family's
    codec cost."""

    def __init__(self, i, run, cluster, comp, settings, implementation=None):
        from .model import Scenario, effective_utilization

        self.i, self.run, self.comp = i, run, comp
        fusion = run.fusion or settings["fusion"]
        try:
            sc = Scenario.build(run.profile, algorithm=run.algorithm or settings["algorithm"],
                                fusion=fusion, cluster=cluster, sharding=run.sharding,
                                shard_group=getattr(run, "shard_group", None),
                                ps_servers=settings.get("ps_servers"))
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise InvalidParameterError(
                f"runs[{i}].fusion", fusion, f"does not describe run {run.label!r} "
                f"(sharding {run.sharding!r}): {exc}") from None
        x = 1.0 / (effective_utilization(sc, run.bw, 1.0) * run.bw)
        self.sc, self.x = sc.planned(run.n, x), x
        self.codec = dict(_start_costs(sc, cluster, implementation))
        try:
            self.time(self.codec[comp.family])  # can the compressor be applied at all?
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise InvalidParameterError(
                f"runs[{i}].compressor", comp.describe(),
                f"cannot be applied to run {run.label!r} (fusion {fusion!r}, sharding "
                f"{run.sharding!r}): {exc}",
                "Give the run's fusion and sharding as the compressor's implementation "
                "sends it, or leave the run out of the fit") from None
        p = run.profile
        if run.iteration_time is not None:
            self.measured = float(run.iteration_time)
        else:  # a scaling factor: the model's single-worker time over it
            self.measured = float(p.iteration_time / run.scaling_factor)
        self.uncertainty = float(run.uncertainty)

    def time(self, cost: CodecCost) -> float:
        """Model iteration time with ``cost`` for the compressor's family [s]."""
        from .planner import _evaluate, _sf

        codec = self.codec.copy()
        codec[self.comp.family] = cost
        ev = _evaluate(self.sc, self.comp, self.run.n, codec)
        return float(self.sc.profile.iteration_time / _sf(self.sc, ev, self.x))


# --------------------------------------------------------------------------- one parameter


def _root(f, target, hi=MAX_SCALE):
    """The smallest m in [0, hi] with f(m) >= target (f non-decreasing); None when even
    f(hi) < target; 0.0 when f(0) >= target."""
    if f(0.0) >= target:
        return 0.0
    if f(hi) < target:
        return None
    lo, up = 0.0, hi
    # bisection in log space above a small floor: the factors span decades
    floor = 1e-6
    if f(floor) >= target:
        up = floor
    else:
        lo = floor
        while up / lo > 1 + _ROOT_TOL:
            mid = math.sqrt(lo * up)
            if f(mid) >= target:
                up = mid
            else:
                lo = mid
        return up
    while up - lo > _ROOT_TOL * floor:
        mid = 0.5 * (lo + up)
        if f(mid) >= target:
            up = mid
        else:
            lo = mid
    return up


def _fit_one_parameter(models, start, corners, z):
    """(status, scale, (lo, hi)) for one family with the launch held at the start's."""
    def logerr(ms, m):
        # the runs' misfit in units of their uncertainties: mean over the runs
        return float(np.mean([(math.log(r.time(_scaled(start, m))) - math.log(r.measured))
                              / r.uncertainty for r in ms]))

    best = _root(lambda m: logerr(models, m), 0.0)
    f0 = logerr(models, 0.0)
    zs = z / math.sqrt(len(models))  # the mean of k runs' errors: z / sqrt(k)
    if best is None:
        return "unbounded", math.nan, (None, None)
    if best == 0.0 and f0 > zs:
        return "negative", math.nan, (None, None)
    lo = _root(lambda m: logerr(corners[0], m), -zs)  # pessimistic cluster: least codec
    hi = _root(lambda m: logerr(corners[1], m), zs)  # optimistic cluster: most codec
    lo = 0.0 if lo is None else lo
    if hi is None:
        return "unbounded", best, (lo, None)
    if not (_slope(models, start, best) > 0):  # the time does not move with the cost
        return "unbounded", best, (lo, None)
    return "fitted", best, (min(lo, best), max(hi, best))


def _slope(models, start, m):
    """d ln T / d ln m at m, summed over the runs [-] (0 when the codec is hidden)."""
    m1 = max(m, 1e-6) * 1.01
    m0 = max(m, 1e-6) / 1.01
    return sum(math.log(r.time(_scaled(start, m1))) - math.log(r.time(_scaled(start, m0)))
               for r in models)


# --------------------------------------------------------------------------- two parameters


def _fit_two_parameters(models, start, z):
    """(scale, launch, ok, why, scale interval) fitted by least squares over >= 2 runs of
    one family (in the logs of both); ok False when the runs cannot tell the launch from
    the per-element cost."""
    from scipy.optimize import least_squares

    def resid(v):
        m, launch = math.exp(v[0]), math.exp(v[1])
        return np.array([(math.log(r.time(_scaled(start, m, launch))) - math.log(r.measured))
                         / r.uncertainty for r in models])

    l0 = start.launch if start.launch > 0 else 1e-5
    sol = least_squares(resid, x0=[0.0, math.log(l0)], bounds=([math.log(1e-6),
                                                               math.log(1e-9)],
                                                              [math.log(MAX_SCALE),
                                                               math.log(1.0)]),
                        diff_step=1e-3)
    m, launch = math.exp(sol.x[0]), math.exp(sol.x[1])
    jac = sol.jac
    jtj = jac.T @ jac
    try:
        cov = np.linalg.inv(jtj)
    except np.linalg.LinAlgError:
        return m, launch, False, "the runs cannot tell the launch from the per-element " \
            "cost", None
    dof = max(1, len(models) - 2)
    cov = cov * max(1.0, 2 * sol.cost / dof)
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    if not np.all(np.isfinite(sd)) or np.any(z * sd > 1.0) or not sol.success:
        return m, launch, False, ("the runs constrain the launch and the per-element cost "
                                  "only together (an interval wider than a factor e)"), None
    return m, launch, True, "", (m * math.exp(-z * sd[0]), m * math.exp(z * sd[0]))


# --------------------------------------------------------------------------- the fit


def fit_codec(cluster, runs, *, implementation=None, algorithm="ring", fusion="ddp",
              ps_servers=None, confidence=0.95) -> CodecFitResult:
    """Fit the codec cost of each compressor family from measured compressed runs, on a
    cluster held as it is (see the module).

    Parameters
    ----------
    cluster : ClusterProfile, str or os.PathLike
        The cluster, usually fitted from uncompressed runs (:func:`~scalemodel.fit_cluster`
        does both steps) [-].
    runs : list of dict or Run, str or os.PathLike
        Runs (:mod:`scalemodel.runs`); those without ``compressor`` are ignored here [-].
    implementation : str or None
        Implementation preset of the runs that name none
        (:data:`~scalemodel.compressors.IMPLEMENTATIONS`); None: the compressors as
        given [-].
    algorithm : str
        Collective of the runs that do not name one [-].
    fusion : str or fusion policy
        Fusion of the runs that do not name one [-].
    ps_servers : int or None
        As in :func:`~scalemodel.scaling_factor` [servers].
    confidence : float
        Confidence level of the intervals, in (0, 1) [-].

    Returns
    -------
    CodecFitResult
        The cluster with the fitted costs, one :class:`CodecFit` per family, a message.

    Raises
    ------
    InvalidParameterError
        A compressed run whose compressor cannot be applied to its fusion or sharding
        (the message names the run), or a bad run.

    Examples
    --------
    >>> import scalemodel
    >>> from scalemodel.fit_codec import fit_codec
    >>> runs = [{"model": "resnet50", "n": 8, "bw": "10Gbps", "scaling_factor": 0.5,
    ...          "compressor": "topk:0.01", "implementation": "grace-tf"}]
    >>> res = fit_codec(scalemodel.ClusterProfile(), runs, fusion="horovod")
    >>> fit = res.fits["grace-tf/topk"]  # the run names its implementation
    >>> fit.status, fit.used, "grace-tf/topk" in res.cluster.codec_costs
    ('fitted', True, True)
    """
    from statistics import NormalDist

    from .cluster import load_cluster
    from .runs import Run, load_runs

    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    cluster = load_cluster(cluster)
    if not (isinstance(runs, (list, tuple)) and runs and all(isinstance(r, Run)
                                                             for r in runs)):
        runs = load_runs(runs)
    _, comp = compressed_runs(runs)
    settings = {"algorithm": algorithm, "fusion": fusion, "ps_servers": ps_servers}
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    families = {}
    for i, r in comp:
        c, impl = r.compressor, r.implementation or implementation
        if implementation is not None and r.implementation is None:
            c = for_implementation(c, implementation, f"runs[{i}].compressor")
        key = f"{impl}/{c.family}" if impl else c.family
        families.setdefault(key, []).append((i, r, c, impl))
    fits, costs, intervals = _fit_on(cluster, families, settings, z)
    lines = [f.message for f in fits.values()]
    alternatives = cluster.alternatives
    if len(alternatives) > 1 and fits:  # each explanation of the runs gets its own costs
        alternatives, spread = _fit_alternatives(cluster, families, settings, z, fits,
                                                 costs, intervals)
        lines += [f"  {k}: over the {len(alternatives)} explanations of the uncompressed "
                  f"runs {lo:.3g}x to {hi:.3g}x" for k, (lo, hi) in spread.items()]
    extra = dict(cluster.extra)
    if fits:
        extra["codec_fit"] = {k: f.to_dict() for k, f in fits.items()}
    out = attrs.evolve(cluster, codec_costs=costs, intervals=intervals, extra=extra,
                       alternatives=alternatives)
    return CodecFitResult(cluster=out, fits=fits, message="\n".join(lines))


def _fit_on(cluster, families, settings, z):
    """Every family's fit on one cluster: (fits, codec_costs, intervals) with the used
    costs and their intervals added to the cluster's."""
    pess, opt = cluster.corners()
    fits, costs, intervals = {}, dict(cluster.codec_costs), dict(cluster.intervals)
    for key, items in families.items():
        fit = _fit_family(key, items, cluster, pess, opt, settings, z)
        fits[key] = fit
        if fit.used:
            costs[key] = {k: v for k, v in _cost_dict(fit.cost).items()
                          if v or k in ("encode", "decode")}
            intervals[f"codec.{key}"] = fit.encode_interval
    return fits, costs, intervals


def _fit_alternatives(cluster, families, settings, z, fits, costs, intervals):
    """The cluster's alternatives, each with the codec costs that reproduce the compressed
    runs under that explanation (``"codec_costs"`` and ``"codec_intervals"`` keys, which
    :meth:`~scalemodel.ClusterProfile.with_alternative` applies), and the range of each
    family's factor over them."""
    best = dict(cluster.alternatives[0], codec_costs=costs,
                codec_intervals={k: v for k, v in intervals.items() if k.startswith("codec.")})
    out = [best]
    spread = {k: (f.scale, f.scale) for k, f in fits.items() if f.used}
    for i in range(1, len(cluster.alternatives)):
        alt_fits, alt_costs, alt_iv = _fit_on(cluster.with_alternative(i), families,
                                              settings, z)
        out.append(dict(cluster.alternatives[i], codec_costs=alt_costs, codec_intervals={
            k: v for k, v in alt_iv.items() if k.startswith("codec.")}))
        for key, fit in alt_fits.items():
            if fit.used and key in spread:
                lo, hi = spread[key]
                spread[key] = (min(lo, fit.scale), max(hi, fit.scale))
    return tuple(out), spread


def _fit_family(family, items, cluster, pess, opt, settings, z) -> CodecFit:
    """One family's :class:`CodecFit` from its runs ``[(index, run, compressor)]``."""
    models = [_RunModel(i, r, cluster, c, settings, impl) for i, r, c, impl in items]
    start = models[0].codec[items[0][2].family]
    corners = [[_RunModel(i, r, cl, c, settings, impl) for i, r, c, impl in items]
               for cl in (pess, opt)]
    labels = tuple(r.label for _, r, _, _ in items)
    src = f"fitted from {len(labels)} compressed run(s): {', '.join(labels)}"
    status, m, iv = _fit_one_parameter(models, start, corners, z)
    launch, launch_fitted, why2 = None, False, ""
    if status == "fitted" and len(models) >= 2 and _distinct(items):
        m2, l2, ok, why2, iv2 = _fit_two_parameters(models, start, z)
        if ok:
            m, launch, launch_fitted, iv = m2, l2, True, iv2
    where = f"{family}: from {', '.join(labels)}"
    if status == "negative":
        msg = (f"{where}: not used: the model without any codec time is already slower "
               "than the run(s) beyond their noise (a negative cost); the starting costs "
               "stay")
        return CodecFit(family, labels, status, False, math.nan, (None, None), None, start,
                        False, msg)
    if status == "unbounded":
        msg = (f"{where}: not used: the run(s) do not bound the cost (a single worker, a "
               f"codec hidden behind the compute, or more than {MAX_SCALE:g}x the starting "
               "costs); the starting costs stay")
        return CodecFit(family, labels, status, False, m, iv, None, start, False, msg)
    cost = _scaled(start, m, launch, source=src)
    res = tuple((r.run.label, r.measured, r.time(cost)) for r in models)
    worst = max(res, key=lambda t: abs(t[2] / t[1] - 1))
    lo, hi = iv
    msg = (f"{where}: {m:.3g}x the starting per-element costs [{lo:.3g}, {hi:.3g}]: encode "
           f"{cost.encode * 1e12:.3g} ps/element, decode {cost.decode * 1e12:.3g} ps/element, "
           f"launch {cost.launch * 1e6:.3g} us per call "
           + ("(fitted too)" if launch_fitted else "(held at the starting one"
              + (f": {why2})" if why2 else ")"))
           + (f"; largest miss {100 * (worst[2] / worst[1] - 1):+.1f} % ({worst[0]})"
              if len(res) > 1 else ""))
    return CodecFit(family, labels, "fitted", True, m, iv, cost, start, launch_fitted, msg,
                    res)


def _distinct(items) -> bool:
    """Whether the runs differ in what splits launch from per-element cost: the worker
    count or the compressor's setting."""
    return len({(r.n, c.setting) for _, r, c, _ in items}) >= 2
