r"""Fit a cluster from measured training runs.

A user rarely can run our calibration on a rented cluster, but usually has a few measured
runs: throughput (or iteration time) at some worker counts and line rates. From those,
:func:`~scalemodel.fit_cluster` estimates the terms that make a real cluster slower than the ideal
model (:mod:`scalemodel.cluster`):

=========================  =======================================  ==================
parameter                  meaning                                  default (ideal)
=========================  =======================================  ==================
``compute_slowdown``       forward/backward slower in a               1 (no slowdown)
                           distributed run, :math:`\sigma`
``ceiling``                most bandwidth the transport achieves      none
``utilization``            achieved fraction of the line rate         1
``sync_overhead``          fixed cost per iteration after the         0 s
                           last collective, :math:`t_s`
``collective_overhead``    fixed cost per collective, :math:`c_0`     0 s
``alpha``                  per-step network latency                   0 s
``overlap``                overlap efficiency :math:`\eta`            1 (full overlap)
``host_overhead``          host cost per reduced byte                 0 s/byte
=========================  =======================================  ==================

**Runs.** Each run names its ``model`` (built-in name, profile file or profile), the
worker count ``n`` and line rate ``bw`` [bits/s] and either its ``scaling_factor`` or its
``iteration_time`` [s] (with ``single_worker_time`` [s] when known: then the scaling factor
is their ratio). Optional: ``compute_time`` [s] (forward + backward measured inside the
run, per iteration: all micro-batches' with gradient accumulation), ``fusion``,
``algorithm`` (frameworks differ between runs), ``uncertainty`` (relative
standard uncertainty of the measured time, default 2 %) and ``label``. A run with ``n = 1``
and a ``compute_time`` gives the single-worker compute that the others' compute times are
compared with.

**What is measured, what is fitted.** Compute times measure the slowdown directly:
:math:`\sigma = \text{median}(t_\text{compute}(n) / t_\text{compute}(1))` over the
distributed runs (the single-worker compute from a run with ``n = 1``, else the profile's
forward + backward scaled to ``single_worker_time``). The other parameters are fitted to
the runs' iteration times. With :math:`k` runs, every subset :math:`S` of at most
:math:`k` free parameters (held parameters and those given by keyword excluded) is fitted
by robust least squares on the residuals

.. math::
   :label: fit-residual

   \rho_i = \frac{\ln \mathrm{SF}_i^\text{model}(\theta) - \ln \mathrm{SF}_i^\text{measured}}
                 {s_i} ,

(the relative error of the iteration time in units of the run's uncertainty
:math:`s_i`) plus weakly informative priors that pull each free parameter towards its ideal
default, :math:`\big((g(\theta_p) - g(\theta_p^0))/w_p\big)^2`, with the scales
:math:`w_p` of :data:`~scalemodel.fitting.PRIORS`. The subset with the smallest
:math:`\sum \rho_i^2 + \text{prior} + 2|S|` (Akaike's penalty) wins: so one run fits the
single parameter that explains it at the least surprise, and more runs free more
parameters when they are needed. Intervals come from the Jacobian at the optimum
(Laplace approximation, scaled up by :math:`\chi^2/\text{dof}` when the runs scatter more
than their uncertainties say), transformed back through :math:`g`.
"""

from __future__ import annotations

import itertools
import math
import warnings

import attrs
import numpy as np

from .cluster import ClusterProfile, load_cluster
from .collectives import ReductionCost
from .exceptions import (CalibrationError, CalibrationWarning, InvalidParameterError,
                         ParameterTypeError)
from .model import Scenario
from .runs import DEFAULT_UNCERTAINTY, Run, _renamed, load_runs
from .topology import resolve_topology

__all__ = ["fit_cluster", "ClusterFit", "FittedParameter", "RunResidual", "Run",
           "load_runs", "PRIORS", "DEFAULT_UNCERTAINTY"]

@attrs.frozen
class _Prior:
    default: float
    scale: float
    lower: float
    upper: float
    unit: str
    source: str
    log: bool = False  # transform g = ln(value / reference) (value > 0)


PRIORS = {
    "compute_slowdown": _Prior(1.0, math.log(1.15), 1.0, 3.0, "-", "Zhang et al. "
                               "(arXiv:2006.10103) Fig. 2: distributed compute up to 15 % "
                               "slower; scale ln 1.15", log=True),
    "ceiling": _Prior(math.inf, math.log(4.0), 0.02, 1.0, "bits/s", "transports reach "
                      "1/4 to all of the line rate (Zhang et al. Fig. 4); scale ln 4 below "
                      "the largest line rate of the runs", log=True),
    "utilization": _Prior(1.0, math.log(1 / 0.9), 0.02, 1.0, "-", "transports fill a "
                          "slow link (Zhang et al. Fig. 4: 95 % of 1 Gbit/s used); scale "
                          "ln(1/0.9) below full line rate", log=True),
    "sync_overhead": _Prior(0.0, 1e-2, 0.0, 0.5, "s", "scale 10 ms: twice Horovod's "
                            "cycle time (5 ms, HOROVOD_CYCLE_TIME), which the last "
                            "gradients wait for before their negotiation"),
    "collective_overhead": _Prior(0.0, 5e-4, 0.0, 0.02, "s", "scale 0.5 ms: kernel launch "
                                  "(~10 us) up to per-tensor framework negotiation"),
    "alpha": _Prior(0.0, 5e-5, 0.0, 2e-3, "s", "scale 50 us: NCCL's network hop latency "
                    "(14 us, Simple protocol) plus its base (8.4 us), from its tuning model"),
    "overlap": _Prior(1.0, 0.25, 0.0, 1.0, "-", "GPUs overlap fully (own copy and "
                      "compute engines); scale 0.25"),
    "host_overhead": _Prior(0.0, 2e-10, 0.0, 5e-9, "s/byte", "scale 0.2 ns/byte (a "
                            "memory copy at 5 GB/s)"),
}
"""Weakly informative priors of the fitted parameters: ideal default, scale of the
penalty (in the log of the value for ``log`` parameters, in the value's unit otherwise),
bounds and their source. ``ceiling`` bounds are fractions of the largest line rate."""

_ORDER = ("ceiling", "utilization", "sync_overhead", "collective_overhead",
          "compute_slowdown", "alpha", "overlap", "host_overhead")
"""Tie-break order of parameters of equal evidence."""

AUTO = ("ceiling", "utilization", "sync_overhead", "collective_overhead", "compute_slowdown")
"""Parameters :func:`~scalemodel.fit_cluster` chooses among by itself. The others (``alpha``,
``overlap``, ``host_overhead``) come from the transport calibration or ``fit=``: their
signatures in a few scaling runs are too close to the ones above to tell apart."""

_ROBUST_SCALE = 3.0
"""Normalized residual beyond which a run's pull grows linearly, not quadratically (soft
L1 loss): one wild run cannot drag the fit [-]."""

# --------------------------------------------------------------------------- results


@attrs.frozen
class FittedParameter:
    """One parameter of a :class:`ClusterFit`.

    Attributes
    ----------
    name : str
        Parameter name (a :class:`~scalemodel.ClusterProfile` field).
    value : float
        Its value [unit].
    interval : tuple of float
        Confidence interval ``(lo, hi)`` [unit]; ``(value, value)`` when held.
    unit : str
        Unit of the value.
    status : str
        ``"fitted"``, ``"measured"`` (from compute times), ``"given"`` (a keyword) or
        ``"default"`` (held at the ideal value).
    at_bound : bool
        Whether a fitted value sits at its bound [-].
    source : str
        Where the value (or its prior) comes from.
    """

    name: str
    value: float
    interval: tuple
    unit: str
    status: str
    at_bound: bool
    source: str


@attrs.frozen
class RunResidual:
    """Measured against fitted for one run.

    Attributes
    ----------
    label : str
        The run.
    n : int
        Workers [workers].
    bw : float
        Line rate [bits/s].
    measured : float
        Measured iteration time in the model's units: :math:`T_1^\\text{model} /
        \\mathrm{SF}` when a scaling factor is known, else the measured time [s].
    fitted : float
        The fitted model's iteration time [s].
    error : float
        fitted / measured - 1 [-].
    measured_scaling_factor, fitted_scaling_factor : float
        Scaling factors [-] (measured is NaN-free: the model's when only a time is known).
    """

    label: str
    n: int
    bw: float
    measured: float
    fitted: float
    error: float
    measured_scaling_factor: float
    fitted_scaling_factor: float


@attrs.frozen(eq=False)
class ClusterFit:
    """Result of :func:`~scalemodel.fit_cluster`.

    Attributes
    ----------
    cluster : ClusterProfile
        The fitted cluster, usable as ``cluster=`` everywhere; :meth:`save` writes it.
    parameters : dict
        ``{name: FittedParameter}`` for every parameter, fitted or held.
    residuals : list of RunResidual
        Per run: measured, fitted, error.
    free : tuple of str
        The parameters fitted.
    chi2 : float
        Sum of squared normalized residuals at the optimum [-].
    message : str
        One paragraph for people.
    alternatives : list of dict
        Other choices of free parameters that explain the runs almost as well (score
        within 2 of the best: ``{"free", "values", "chi2", "score"}``): when there are
        some, the runs cannot tell these explanations apart, and predictions far from the
        runs differ between them; more runs (other worker counts, other line rates)
        would.
    """

    cluster: ClusterProfile
    parameters: dict
    residuals: list
    free: tuple
    chi2: float
    message: str
    alternatives: list = attrs.field(factory=list)

    def save(self, path):
        """Write the fitted cluster as JSON, atomically [path]."""
        from .cluster import save_cluster
        return save_cluster(self.cluster, path)

    def to_dict(self) -> dict:
        """Everything as JSON-ready data."""
        return {"cluster": self.cluster.to_dict(),
                "parameters": {k: attrs.asdict(v) for k, v in self.parameters.items()},
                "residuals": [attrs.asdict(r) for r in self.residuals],
                "free": list(self.free), "chi2": self.chi2, "message": self.message,
                "alternatives": self.alternatives}

    def __str__(self):
        return self.message


# --------------------------------------------------------------------------- model


class _Problem:
    """Runs, the fixed setting and how parameters map to a cluster."""

    def __init__(self, runs, base, settings, fixed):
        self.runs = runs
        self.base = base
        self.settings = settings
        self.fixed = fixed  # name -> value (given or measured)
        self.bw_max = max(r.bw for r in runs)
        groups = {}
        for i, r in enumerate(runs):
            key = (id(r.profile), r.fusion or settings["fusion"],
                   r.algorithm or settings["algorithm"])
            groups.setdefault(key, []).append(i)
        self.groups = groups
        self.measured_t = np.empty(len(runs))
        self.sigma_t = np.array([r.uncertainty for r in runs])
        for i, r in enumerate(runs):
            sf = r.measured_sf
            t1 = r.profile.iteration_time
            self.measured_t[i] = t1 / sf if sf is not None else r.iteration_time

    # parameter transforms: g(value) in fitting coordinates
    def to_g(self, name, value):
        p = PRIORS[name]
        if name == "ceiling":
            return math.log(self.bw_max / value) if math.isfinite(value) else 0.0
        if p.log:
            return math.log(value / p.default) if name != "utilization" else -math.log(value)
        return value

    def from_g(self, name, g):
        p = PRIORS[name]
        if name == "ceiling":
            return self.bw_max * math.exp(-g)
        if name == "utilization":
            return math.exp(-g)
        if p.log:
            return p.default * math.exp(g)
        return g

    def g_bounds(self, name):
        p = PRIORS[name]
        if name == "ceiling":
            return 0.0, -math.log(p.lower)
        if name == "utilization":
            return 0.0, -math.log(p.lower)
        if p.log:
            return 0.0, math.log(p.upper / p.default)
        return p.lower, p.upper

    def g_default(self, name):
        if name == "ceiling":
            return 0.0
        p = PRIORS[name]
        return 0.0 if p.log or name == "utilization" else p.default

    def cluster(self, values):
        """A ClusterProfile with ``values`` (name -> value) over the base."""
        v = dict(self.fixed)
        v.update(values)
        changes = {}
        for name, value in v.items():
            if name == "ceiling":
                changes["ceiling"] = None if not math.isfinite(value) else value
            elif name == "host_overhead":
                red = self.base.reduction
                if value > 0 or red is not None:
                    gamma = (red.gamma if red is not None and red.table_bytes is None
                             else 0.0) + value
                    latency = red.latency if red is not None and red.table_bytes is None else 0.0
                    changes["reduction"] = ReductionCost(gamma=gamma, latency=latency,
                                                         name="fitted host overhead")
            else:
                changes[name] = value
        return attrs.evolve(self.base, **changes)

    _FAST = ("ceiling", "utilization", "sync_overhead", "collective_overhead")

    def predict(self, values):
        """Model iteration times of every run [s] (in the profile's units).

        Ceiling, utilization and the fixed costs change only :math:`x` and the lines'
        intercepts (eq. :eq:`iteration-cluster`), so the lines are built once per value of
        the other parameters and the envelope is evaluated directly."""
        cl = self.cluster(values)
        slow_key = tuple((k, v) for k, v in sorted({**self.fixed, **values}.items())
                         if k not in self._FAST)
        cache = self.__dict__.setdefault("_lines", {})
        if slow_key not in cache:
            if len(cache) > 64:
                cache.clear()
            bare = attrs.evolve(cl, ceiling=None, utilization=1.0, table_line_rate=None,
                                table_utilization=None, sync_overhead=0.0,
                                collective_overhead=0.0)
            entry = {}
            for (gkey, fusion, algorithm), idx in self.groups.items():
                prof = self.runs[idx[0]].profile
                sc = Scenario.build(prof, algorithm=algorithm, fusion=fusion,
                                    cluster=bare, ps_servers=self.settings["ps_servers"])
                for i in idx:
                    n = self.runs[i].n
                    if sc.needs_plan:
                        entry[i] = ("scenario", sc)
                        continue
                    lines = sc.lines(n, False)[0]
                    k = len(lines.intercept) - 1
                    count = np.concatenate(([0.0], np.arange(k, 0, -1, dtype=float)))
                    last = np.concatenate(([0.0], np.ones(k)))
                    entry[i] = ("lines", sc, lines, count if n > 1 else 0 * count,
                                last if n > 1 else 0 * last)
            cache[slow_key] = entry
        entry = cache[slow_key]
        out = np.empty(len(self.runs))
        for i, r in enumerate(self.runs):
            e = entry[i]
            u = float(cl.utilization_at(r.bw))
            x = 1.0 / (u * r.bw)
            if e[0] == "scenario":
                sc = attrs.evolve(e[1], cluster=cl)
                out[i] = float(sc.planned(r.n, x).iteration_times(r.n, x, 1.0))
                continue
            _, sc, lines, count, last = e
            xe = float(sc.x_effective(r.n, x, 1.0))
            c = (lines.intercept + cl.collective_overhead * count + cl.sync_overhead * last
                 + lines.slope * xe)
            out[i] = sc.forward(r.n) + float(np.max(c)) + r.profile.update_time
        return out

    def residuals(self, values):
        return (np.log(self.predict(values)) - np.log(self.measured_t)) / self.sigma_t


def _solve(problem, free):
    """Fit ``free`` parameters (MAP with priors); returns (values, g, J, chi2, prior)."""
    from scipy.optimize import least_squares

    names = list(free)
    lo = np.array([problem.g_bounds(k)[0] for k in names])
    hi = np.array([problem.g_bounds(k)[1] for k in names])
    g0 = np.array([problem.g_default(k) for k in names])
    scale = np.array([PRIORS[k].scale for k in names])

    def values(g):
        return {k: problem.from_g(k, float(x)) for k, x in zip(names, g)}

    f2 = _ROBUST_SCALE ** 2

    def fun(g):
        # robust (soft L1) on the runs, quadratic on the priors: sqrt of the loss per run
        r = problem.residuals(values(g))
        robust = np.sign(r) * np.sqrt(2.0 * f2 * (np.sqrt(1.0 + r * r / f2) - 1.0))
        return np.concatenate((robust, (g - g0) / scale))

    # the cost is flat where a parameter has no effect (a ceiling above what is needed)
    # and kinked where the critical path changes: start from the best points of a grid
    per = max(3, int(round(40 ** (1.0 / len(names)))))
    axes = [np.linspace(a, b, per) for a, b in zip(lo, hi)]
    grid = np.array(list(itertools.product(*axes))) if len(names) > 1 else axes[0][:, None]
    costs = np.array([float(np.sum(fun(gp) ** 2)) for gp in grid])
    best = None
    for start in grid[np.argsort(costs)[:2]]:
        try:
            res = least_squares(fun, start, bounds=(lo, hi), x_scale=scale, diff_step=1e-3,
                                max_nfev=200)
        except ValueError:
            continue
        cost = float(np.sum(res.fun ** 2))
        if best is None or cost < best[0]:
            best = (cost, res)
    if best is None:
        raise CalibrationError(f"the fit of {', '.join(names)} failed to start")
    res = best[1]
    k = len(problem.runs)
    r = problem.residuals(values(res.x))
    prior = res.fun[k:]
    return values(res.x), res.x, res.jac, float(np.sum(r ** 2)), float(np.sum(prior ** 2)), \
        (lo, hi)


class _Default(int):
    """An int default that knows it was not passed (its repr is the number)."""


_GPUS_PER_NODE = _Default(8)


def fit_cluster(runs, *, algorithm="ring", fusion="ddp", gpus_per_node=_GPUS_PER_NODE,
                nics_per_node=None,
                intra_bw=None, intra_alpha=None, ps_servers=None, cluster=None, fit=None,
                hold=None, confidence=0.95, max_free=None, name="fitted", **given
                ) -> ClusterFit:
    """Fit a cluster's real-world terms from measured runs (see the module).

    Parameters
    ----------
    runs : list of dict, str or os.PathLike
        Measured runs, or a CSV file of them (see the module for the keys) [-].
    algorithm : str
        Collective of the runs that do not name one [-].
    fusion : str or fusion policy
        Fusion of the runs that do not name one [-].
    gpus_per_node : int or None
        GPUs per node of the cluster (its topology; ``None``: every worker its own link);
        default 8, or the starting ``cluster``'s when it has a topology [workers].
    nics_per_node : int or None
        NICs per node; ``None``: 1 [NICs].
    intra_bw : float, str or None
        Intra-node link rate; ``None``: 2.4e12 [bits/s].
    intra_alpha : float or None
        Intra-node step latency; ``None``: 0 [s].
    ps_servers : int or None
        As in :func:`~scalemodel.scaling_factor` [servers].
    cluster : ClusterProfile, str or os.PathLike, optional
        A cluster to start from (for example one from the transport calibration, with its
        latency and utilization table): its values are the defaults of the parameters
        fitted here [-].
    fit : sequence of str, optional
        Fit exactly these parameters instead of choosing [-].
    hold : sequence of str, optional
        Never fit these (they stay at their default or given value) [-].
    confidence : float
        Confidence level of the intervals, in (0, 1) [-].
    max_free : int, optional
        Most parameters to fit at once; default the number of runs (at most 4) [-].
    name : str
        Name of the fitted cluster [-].
    **given
        Values to hold for any parameter of :data:`~scalemodel.fitting.PRIORS`, e.g. ``compute_slowdown=1.1``
        [unit of the parameter].

    Returns
    -------
    ClusterFit
        The cluster, the parameters with intervals, the per-run residuals.

    Raises
    ------
    InvalidParameterError, ParameterTypeError, UnknownNameError
        Bad runs or keywords; the message names the run and the value.
    CalibrationError
        The runs cannot be reached by any parameter values.

    Examples
    --------
    >>> import scalemodel
    >>> runs = [{"model": "resnet50", "n": 64, "bw": "100Gbps", "scaling_factor": 0.8}]
    >>> fit = scalemodel.fit_cluster(runs, fusion="horovod", gpus_per_node=8)
    >>> fit.free
    ('ceiling',)
    """
    from scipy.stats import norm

    unknown = set(given) - set(PRIORS)
    if unknown:
        raise InvalidParameterError("fit_cluster", sorted(unknown), "unknown keywords",
                                    f"Parameters: {', '.join(PRIORS)}")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    runs = load_runs(runs)
    base = load_cluster(cluster) if cluster is not None else ClusterProfile(
        name=name, provenance={"source": "fit_cluster"})
    if gpus_per_node is _GPUS_PER_NODE and base.topology is not None:
        gpus_per_node = None  # not given: keep the starting cluster's topology
    topo = resolve_topology(base.topology, gpus_per_node=gpus_per_node,
                            nics_per_node=nics_per_node, intra_bw=intra_bw,
                            intra_alpha=intra_alpha)
    base = attrs.evolve(base, name=name, topology=None if topo.flat else topo)
    settings = dict(algorithm=algorithm, fusion=fusion, ps_servers=ps_servers)
    Scenario.build(runs[0].profile, algorithm=algorithm, fusion=fusion)  # validate names
    for i, r in enumerate(runs):
        if r.fusion is not None or r.algorithm is not None:
            try:
                Scenario.build(r.profile, algorithm=r.algorithm or algorithm,
                               fusion=r.fusion or fusion)
            except (InvalidParameterError, ParameterTypeError) as exc:
                raise _renamed(exc, f"runs[{i}].{exc.parameter}") from None
    fixed, statuses = {}, {}
    for k, v in given.items():
        fixed[k] = float(v)
        statuses[k] = "given"
    sigma = _measured_slowdown(runs)
    if sigma is not None and "compute_slowdown" not in fixed:
        fixed["compute_slowdown"] = sigma[0]
        statuses["compute_slowdown"] = "measured"
    for k in ("alpha", "utilization", "overlap", "compute_slowdown", "collective_overhead",
              "sync_overhead"):
        if k not in fixed and cluster is not None:
            fixed.setdefault(k, getattr(base, k))
            statuses.setdefault(k, "from cluster")
    problem = _Problem(runs, base, settings, {})
    informative = [r for r in runs if r.n > 1]
    if not informative:
        raise InvalidParameterError("runs", [r.label for r in runs],
                                    "needs at least one run with n > 1")
    hold = set(hold or ())
    bad = hold - set(PRIORS)
    if bad:
        raise InvalidParameterError("hold", sorted(bad), "unknown parameters",
                                    f"Parameters: {', '.join(PRIORS)}")
    candidates = [k for k in AUTO if k not in fixed and k not in hold]
    fixed_all = dict(fixed)
    if fit is not None:
        fit = tuple(fit)
        bad = set(fit) - set(PRIORS)
        if bad:
            raise InvalidParameterError("fit", sorted(bad), "unknown parameters",
                                        f"Parameters: {', '.join(PRIORS)}")
        for k in fit:
            fixed_all.pop(k, None)
        subsets = [fit]
    else:
        top = min(len(informative), len(candidates), 4 if max_free is None else max_free)
        subsets = [s for p in range(1, top + 1) for s in itertools.combinations(candidates, p)]
    problem.fixed = fixed_all
    if not subsets:
        subsets = [()]
    results = []
    for subset in subsets:
        if not subset:
            r = problem.residuals({})
            results.append((float(np.sum(r ** 2)), subset, {}, np.zeros(0), None, float(
                np.sum(r ** 2)), 0.0, None))
            continue
        vals, g, jac, chi2, prior, bounds = _solve(problem, subset)
        score = chi2 + prior + 2.0 * len(subset)
        results.append((score, subset, vals, g, jac, chi2, prior, bounds))
    order = {k: i for i, k in enumerate(_ORDER)}
    results.sort(key=lambda t: (round(t[0], 6), len(t[1]), [order[k] for k in t[1]]))
    score, free, vals, g, jac, chi2, prior, bounds = results[0]
    # intervals (Laplace), inflated when the runs scatter more than their uncertainty
    z = float(norm.ppf(0.5 + confidence / 2))
    params = {}
    k_runs = len(runs)
    dof = k_runs - len(free)
    inflate = math.sqrt(max(1.0, chi2 / dof)) if dof > 0 else 1.0
    cov = None
    if len(free):
        try:
            cov = np.linalg.pinv(jac.T @ jac) * inflate ** 2
        except np.linalg.LinAlgError:
            cov = None
    for i, k in enumerate(free):
        lo_g, hi_g = bounds[0][i], bounds[1][i]
        sd = math.sqrt(max(cov[i, i], 0.0)) if cov is not None else math.inf
        a = max(lo_g, g[i] - z * sd)
        b = min(hi_g, g[i] + z * sd)
        ends = sorted((float(problem.from_g(k, a)), float(problem.from_g(k, b))))
        # the lower bound is the ideal value (no effect); the upper one is a real limit
        at_bound = bool(g[i] >= hi_g - 1e-3 * (hi_g - lo_g))
        params[k] = FittedParameter(k, vals[k], tuple(ends), PRIORS[k].unit, "fitted",
                                    at_bound, f"fitted to {k_runs} run(s); prior: "
                                    f"{PRIORS[k].source}")
        if at_bound:
            warnings.warn(CalibrationWarning(
                f"fit_cluster: {k} = {vals[k]:.4g} {PRIORS[k].unit} sits at its bound: the "
                f"runs ask for more than the model's range allows"), stacklevel=2)
    for k in _ORDER:
        if k in params:
            continue
        if k in fixed_all:
            v = fixed_all[k]
            st = statuses.get(k, "given")
            iv = (v, v)
            src = {"given": "given by keyword", "from cluster": "from the starting cluster",
                   "measured": "compute times of the runs"}.get(st, st)
            if k == "compute_slowdown" and st == "measured":
                iv = sigma[1]
                src = (f"measured: median of compute_time(n) / compute_time(1) over "
                       f"{sigma[2]} run(s)")
            params[k] = FittedParameter(k, v, tuple(iv), PRIORS[k].unit, st, False, src)
        else:
            v = PRIORS[k].default if cluster is None else _base_value(base, k)
            params[k] = FittedParameter(k, v, (v, v), PRIORS[k].unit, "default", False,
                                        "held at the ideal model's value (no evidence "
                                        "needed it)" if cluster is None else
                                        "from the starting cluster")
    fitted_cluster = problem.cluster(vals)
    pred = problem.predict(vals)
    residuals = []
    for i, r in enumerate(runs):
        t1 = r.profile.iteration_time
        m_sf = r.measured_sf if r.measured_sf is not None else t1 / problem.measured_t[i]
        residuals.append(RunResidual(r.label, r.n, r.bw, float(problem.measured_t[i]),
                                     float(pred[i]), float(pred[i] / problem.measured_t[i] - 1),
                                     float(m_sf), float(t1 / pred[i])))
    worst = max(residuals, key=lambda x: abs(x.error))
    contradict = [x for x, r in zip(residuals, runs)
                  if abs(math.log1p(x.error)) > 3 * r.uncertainty]
    for x in contradict:
        warnings.warn(CalibrationWarning(
            f"fit_cluster: run {x.label!r} (n={x.n}, bw={x.bw:g}) is missed by "
            f"{100 * x.error:+.1f} %: it contradicts the others or the model"), stacklevel=2)
    intervals = dict(base.intervals)
    for k, p in params.items():
        if p.status in ("fitted", "measured") and k in ("alpha", "utilization", "ceiling",
                                                         "compute_slowdown",
                                                         "collective_overhead",
                                                         "sync_overhead", "overlap"):
            intervals[k] = p.interval
    provenance = dict(base.provenance)
    provenance.update({
        "source": "scalemodel.fit_cluster from measured runs",
        "runs": [{"label": r.label, "model": r.profile.name, "n": r.n, "bw": r.bw,
                  "measured_iteration_time": float(problem.measured_t[i]),
                  "uncertainty": r.uncertainty} for i, r in enumerate(runs)],
        "settings": {"algorithm": algorithm, "fusion": str(fusion)},
        "free": list(free), "chi2": chi2,
    })
    fitted_cluster = attrs.evolve(fitted_cluster, intervals=intervals, provenance=provenance)
    lines = [f"fitted {', '.join(free) if free else 'nothing'} to {k_runs} run(s); "
             f"largest miss {100 * worst.error:+.1f} % ({worst.label})"]
    for k in _ORDER:
        p = params[k]
        if p.status == "default":
            continue
        lines.append(f"  {k:20s} {_fmt(p.value, p.unit)}  [{_fmt(p.interval[0], p.unit)}, "
                     f"{_fmt(p.interval[1], p.unit)}]  {p.status}")
    alternatives = [{"free": list(t[1]), "values": dict(t[2]), "chi2": t[5], "score": t[0]}
                    for t in results[1:] if t[0] <= score + 2.0 and t[1]]
    if alternatives:
        lines.append("  the runs fit about as well with: " + "; ".join(
            ", ".join(f"{k}={_fmt(v, PRIORS[k].unit)}" for k, v in a["values"].items())
            for a in alternatives[:3]) + " (more runs would tell them apart)")
    return ClusterFit(cluster=fitted_cluster, parameters=params, residuals=residuals,
                      free=tuple(free), chi2=chi2, message="\n".join(lines),
                      alternatives=alternatives)


def _base_value(base, k):
    if k == "ceiling":
        return math.inf if base.ceiling is None else base.ceiling
    if k == "host_overhead":
        return 0.0
    return getattr(base, k)


def _fmt(v, unit):
    if unit == "bits/s":
        from .units import format_bandwidth
        return format_bandwidth(v)
    if unit == "s":
        return f"{v * 1e3:.3g} ms"
    if unit == "s/byte":
        return f"{v * 1e9:.3g} ns/byte"
    return f"{v:.4g}"


def _measured_slowdown(runs):
    """(sigma, interval, count) from the runs' compute times, or None."""
    refs = [r.compute_time for r in runs if r.n == 1 and r.compute_time is not None]
    ratios = []
    for r in runs:
        if r.n <= 1 or r.compute_time is None:
            continue
        if refs:
            ref = float(np.median(refs))
        else:
            p = r.profile
            ref = p.grad_accum * (p.forward_time + p.backward_time)  # per step
            if r.single_worker_time is not None:
                ref *= r.single_worker_time / p.iteration_time
        ratios.append(r.compute_time / ref)
    if not ratios:
        return None
    ratios = np.asarray(ratios)
    sigma = float(max(1.0, min(np.median(ratios), PRIORS["compute_slowdown"].upper)))
    unc = np.array([r.uncertainty for r in runs if r.n > 1 and r.compute_time is not None])
    sd = float(np.sqrt(np.mean(unc ** 2) * 2 / len(ratios)))
    spread = float(np.std(ratios)) if len(ratios) > 1 else 0.0
    half = 1.96 * max(sd, spread) * sigma
    return sigma, (max(1.0, sigma - half), sigma + half), len(ratios)
