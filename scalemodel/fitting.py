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
from .exceptions import CalibrationWarning, InvalidParameterError, ParameterTypeError
from .fit_priors import _ORDER, AUTO, PRIORS
from .fit_problem import MAX_RUNS, _Problem, _solve
from .model import Scenario
from .runs import DEFAULT_UNCERTAINTY, Run, _renamed, load_runs
from .topology import resolve_topology

__all__ = ["fit_cluster", "ClusterFit", "FittedParameter", "RunResidual", "Run",
           "load_runs", "PRIORS", "DEFAULT_UNCERTAINTY", "MAX_RUNS"]

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
    _check_keywords(given, confidence, fit, hold)
    runs, base = _load_and_check(runs, cluster=cluster, name=name, algorithm=algorithm,
                                 fusion=fusion, gpus_per_node=gpus_per_node,
                                 nics_per_node=nics_per_node, intra_bw=intra_bw,
                                 intra_alpha=intra_alpha)
    fixed, statuses, sigma = _fixed_values(runs, given, base, from_cluster=cluster is not None)
    settings = dict(algorithm=algorithm, fusion=fusion, ps_servers=ps_servers)
    subsets, fixed_all = _candidate_sets(runs, fixed, fit=fit, hold=hold, max_free=max_free)
    problem = _Problem(runs, base, settings, fixed_all)
    solutions = _solve_each(problem, subsets)
    best = solutions[0]
    params = _parameters(problem, best, fixed_all, statuses, sigma, base,
                         confidence=confidence, from_cluster=cluster is not None)
    residuals = _residuals(problem, best.values)
    alternatives = _alternatives(solutions)
    fitted = _fitted_cluster(problem, best, params, algorithm=algorithm, fusion=fusion)
    return ClusterFit(cluster=fitted, parameters=params, residuals=residuals,
                      free=tuple(best.free), chi2=best.chi2,
                      message=_message(best, params, residuals, alternatives),
                      alternatives=alternatives)


# --------------------------------------------------------------------------- the steps


@attrs.frozen(eq=False)
class _Solution:
    """One candidate set of free parameters, fitted."""

    score: float  # chi2 + prior + 2 |free| (Akaike)
    free: tuple
    values: dict
    g: np.ndarray
    jac: object
    chi2: float
    prior: float
    bounds: object


def _check_keywords(given, confidence, fit, hold):
    """Unknown parameter names and a confidence outside (0, 1) are errors."""
    unknown = set(given) - set(PRIORS)
    if unknown:
        raise InvalidParameterError("fit_cluster", sorted(unknown), "unknown keywords",
                                    f"Parameters: {', '.join(PRIORS)}")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    for option, names in (("hold", hold), ("fit", fit)):
        bad = set(names or ()) - set(PRIORS)
        if bad:
            raise InvalidParameterError(option, sorted(bad), "unknown parameters",
                                        f"Parameters: {', '.join(PRIORS)}")


def _load_and_check(runs, *, cluster, name, algorithm, fusion, gpus_per_node,
                    nics_per_node, intra_bw, intra_alpha):
    """The validated runs and the cluster to start from (with the topology)."""
    if isinstance(runs, (list, tuple)) and len(runs) > MAX_RUNS:
        _too_many(len(runs))
    runs = load_runs(runs)
    if len(runs) > MAX_RUNS:
        _too_many(len(runs))
    base = load_cluster(cluster) if cluster is not None else ClusterProfile(
        name=name, provenance={"source": "fit_cluster"})
    if gpus_per_node is _GPUS_PER_NODE and base.topology is not None:
        gpus_per_node = None  # not given: keep the starting cluster's topology
    topo = resolve_topology(base.topology, gpus_per_node=gpus_per_node,
                            nics_per_node=nics_per_node, intra_bw=intra_bw,
                            intra_alpha=intra_alpha)
    base = attrs.evolve(base, name=name, topology=None if topo.flat else topo)
    Scenario.build(runs[0].profile, algorithm=algorithm, fusion=fusion)  # validate names
    for i, r in enumerate(runs):
        if r.fusion is not None or r.algorithm is not None:
            try:
                Scenario.build(r.profile, algorithm=r.algorithm or algorithm,
                               fusion=r.fusion or fusion)
            except (InvalidParameterError, ParameterTypeError) as exc:
                raise _renamed(exc, f"runs[{i}].{exc.parameter}") from None
    if not any(r.n > 1 for r in runs):
        raise InvalidParameterError("runs", [r.label for r in runs],
                                    "needs at least one run with n > 1")
    return runs, base


def _too_many(count):
    raise InvalidParameterError("runs", f"{count} runs", f"at most {MAX_RUNS} runs "
                                "(scalemodel.fitting.MAX_RUNS)", "Fit a random sample of "
                                "them: a few hundred runs per configuration tell as much")


def _fixed_values(runs, given, base, *, from_cluster):
    """Values not fitted: given by keyword, measured (the compute slowdown from compute
    times) or taken from the starting cluster. Returns (values, statuses, measured
    slowdown or None)."""
    fixed, statuses = {}, {}
    for k, v in given.items():
        fixed[k] = float(v)
        statuses[k] = "given"
    sigma = _measured_slowdown(runs)
    if sigma is not None and "compute_slowdown" not in fixed:
        fixed["compute_slowdown"] = sigma[0]
        statuses["compute_slowdown"] = "measured"
    if from_cluster:
        for k in ("alpha", "utilization", "overlap", "compute_slowdown",
                  "collective_overhead", "sync_overhead"):
            if k not in fixed:
                fixed[k] = getattr(base, k)
                statuses[k] = "from cluster"
    return fixed, statuses, sigma


def _candidate_sets(runs, fixed, *, fit, hold, max_free):
    """The sets of free parameters to try, and the values held in all of them."""
    hold = set(hold or ())
    candidates = [k for k in AUTO if k not in fixed and k not in hold]
    fixed_all = dict(fixed)
    if fit is not None:
        fit = tuple(fit)
        for k in fit:
            fixed_all.pop(k, None)
        return [fit], fixed_all
    informative = sum(r.n > 1 for r in runs)
    top = min(informative, len(candidates), 4 if max_free is None else max_free)
    subsets = [s for p in range(1, top + 1) for s in itertools.combinations(candidates, p)]
    return subsets or [()], fixed_all


def _solve_each(problem, subsets):
    """Every candidate set fitted, best (lowest score) first; ties go to fewer parameters,
    then to :data:`_ORDER`."""
    solutions = []
    for subset in subsets:
        if not subset:
            chi2 = float(np.sum(problem.residuals({}) ** 2))
            solutions.append(_Solution(chi2, (), {}, np.zeros(0), None, chi2, 0.0, None))
            continue
        vals, g, jac, chi2, prior, bounds = _solve(problem, subset)
        solutions.append(_Solution(chi2 + prior + 2.0 * len(subset), tuple(subset), vals, g,
                                   jac, chi2, prior, bounds))
    order = {k: i for i, k in enumerate(_ORDER)}
    solutions.sort(key=lambda s: (round(s.score, 6), len(s.free), [order[k] for k in s.free]))
    return solutions


def _parameters(problem, best, fixed_all, statuses, sigma, base, *, confidence,
                from_cluster):
    """Every parameter with its value, interval and status: the fitted ones with Laplace
    intervals (inflated when the runs scatter more than their uncertainty), the others
    as held."""
    params = _fitted_parameters(problem, best, confidence)
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
            v = PRIORS[k].default if not from_cluster else _base_value(base, k)
            params[k] = FittedParameter(k, v, (v, v), PRIORS[k].unit, "default", False,
                                        "held at the ideal model's value (no evidence "
                                        "needed it)" if not from_cluster else
                                        "from the starting cluster")
    return params


def _fitted_parameters(problem, best, confidence):
    """The free parameters of ``best`` with their intervals (Laplace approximation)."""
    from scipy.stats import norm

    free, g, jac, bounds, vals = best.free, best.g, best.jac, best.bounds, best.values
    z = float(norm.ppf(0.5 + confidence / 2))
    k_runs = len(problem.runs)
    dof = k_runs - len(free)
    inflate = math.sqrt(max(1.0, best.chi2 / dof)) if dof > 0 else 1.0
    cov = None
    if len(free):
        try:
            cov = np.linalg.pinv(jac.T @ jac) * inflate ** 2
        except np.linalg.LinAlgError:
            cov = None
    params = {}
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
                f"runs ask for more than the model's range allows"), stacklevel=4)
    return params


def _residuals(problem, values):
    """Measured against fitted per run; a warning names each run missed by more than
    three of its uncertainties."""
    runs = problem.runs
    pred = problem.predict(values)
    residuals = []
    for i, r in enumerate(runs):
        t1 = r.profile.iteration_time
        m_sf = r.measured_sf if r.measured_sf is not None else t1 / problem.measured_t[i]
        residuals.append(RunResidual(r.label, r.n, r.bw, float(problem.measured_t[i]),
                                     float(pred[i]), float(pred[i] / problem.measured_t[i] - 1),
                                     float(m_sf), float(t1 / pred[i])))
    for x, r in zip(residuals, runs):
        if abs(math.log1p(x.error)) > 3 * r.uncertainty:
            warnings.warn(CalibrationWarning(
                f"fit_cluster: run {x.label!r} (n={x.n}, bw={x.bw:g}) is missed by "
                f"{100 * x.error:+.1f} %: it contradicts the others or the model"),
                stacklevel=3)
    return residuals


def _alternatives(solutions):
    """The other candidate sets that explain the runs almost as well (score within 2 of
    the best)."""
    best = solutions[0].score
    return [{"free": list(s.free), "values": dict(s.values), "chi2": s.chi2, "score": s.score}
            for s in solutions[1:] if s.score <= best + 2.0 and s.free]


_INTERVAL_FIELDS = ("alpha", "utilization", "ceiling", "compute_slowdown",
                    "collective_overhead", "sync_overhead", "overlap")


def _fitted_cluster(problem, best, params, *, algorithm, fusion):
    """The cluster of the best solution, with its intervals and provenance."""
    base, runs = problem.base, problem.runs
    intervals = dict(base.intervals)
    for k, p in params.items():
        if p.status in ("fitted", "measured") and k in _INTERVAL_FIELDS:
            intervals[k] = p.interval
    provenance = dict(base.provenance)
    provenance.update({
        "source": "scalemodel.fit_cluster from measured runs",
        "runs": [{"label": r.label, "model": r.profile.name, "n": r.n, "bw": r.bw,
                  "measured_iteration_time": float(problem.measured_t[i]),
                  "uncertainty": r.uncertainty} for i, r in enumerate(runs)],
        "settings": {"algorithm": algorithm, "fusion": str(fusion)},
        "free": list(best.free), "chi2": best.chi2,
    })
    return attrs.evolve(problem.cluster(best.values), intervals=intervals,
                        provenance=provenance)


def _message(best, params, residuals, alternatives):
    """One paragraph for people: what was fitted, the largest miss, the values."""
    worst = max(residuals, key=lambda x: abs(x.error))
    free = best.free
    lines = [f"fitted {', '.join(free) if free else 'nothing'} to {len(residuals)} run(s); "
             f"largest miss {100 * worst.error:+.1f} % ({worst.label})"]
    for k in _ORDER:
        p = params[k]
        if p.status == "default":
            continue
        lines.append(f"  {k:20s} {_fmt(p.value, p.unit)}  [{_fmt(p.interval[0], p.unit)}, "
                     f"{_fmt(p.interval[1], p.unit)}]  {p.status}")
    if alternatives:
        lines.append("  the runs fit about as well with: " + "; ".join(
            ", ".join(f"{k}={_fmt(v, PRIORS[k].unit)}" for k, v in a["values"].items())
            for a in alternatives[:3]) + " (more runs would tell them apart)")
    return "\n".join(lines)

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
