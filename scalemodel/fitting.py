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
``bucket_overhead``        framework work per bucket on the           0 s
                           compute path, :math:`c_b`
``iteration_overhead``     the wrapper's work per iteration on the    0 s
                           compute path, :math:`t_w`
``straggler_spread``       relative spread of a worker's compute,     0
                           :math:`s` (the wait for the slowest)
``efficiency``             compute efficiency of a FLOP-derived       the profile's
                           profile (runs with absolute times)
=========================  =======================================  ==================

**Runs** (:mod:`scalemodel.runs`). Each run names its ``model`` (built-in name, profile
file or profile), the worker count ``n`` and line rate ``bw`` [bits/s] and its
``scaling_factor``, ``iteration_time`` [s] or ``tokens_per_second_per_gpu`` (with
``single_worker_time`` [s] when known: then the scaling factor is their ratio, and the
profile is rescaled to it). Optional: ``compute_time`` [s], ``fusion``, ``algorithm``,
``sharding``, ``grad_accum``, ``bucket_cap_mb`` (runs with different bucket sizes
identify the per-bucket cost), ``wrapped`` (a single-worker run with the DDP wrapper:
it pays :math:`t_w + K c_b`), ``uncertainty`` (relative standard uncertainty of the
measured time, default 2 %) and ``label``. A run with ``n = 1`` and a ``compute_time``
gives the single-worker compute that the others' compute times are compared with.
A run with ``compressor`` (and ``implementation``) is a compressed run: the cluster is
fitted from the uncompressed runs, then each compressed family's codec cost on top of it
(:mod:`scalemodel.fit_codec`; ``ClusterFit.codec``, the cluster's ``codec_costs``).

**Transport data** (``transport=``, :mod:`scalemodel.fit_transport`) fixes what a
microbenchmark sees (latency, achieved bandwidth, intra-node link, with their
intervals); the runs then fit only the rest. Without it, ``network=`` centres the
priors of the achieved bandwidth on published figures of the transport
(:data:`~scalemodel.fit_priors.NETWORKS`).

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
:math:`w_p` of :data:`~scalemodel.fitting.PRIORS` (for ``bucket_overhead`` those of
:data:`~scalemodel.fit_priors.UNIT_PRIORS` when every run is sharded per unit: the cost is
then the wrapper's hooks per unit and micro-batch, not DDP's per bucket). The subset with
the smallest
:math:`\sum \rho_i^2 + \text{prior} + 2|S|` (Akaike's penalty) wins: so one run fits the
single parameter that explains it at the least surprise, and more runs free more
parameters when they are needed. Holding a parameter the runs see at its default is
charged as a choice too: a FLOP-derived profile's ``efficiency`` without an absolute
time, and ``bucket_overhead`` when the runs hold their gradients in different numbers of
buckets (``_solve_each``). With ``network=`` naming a transport that reaches its
line rate (NCCL over InfiniBand or RoCE), a fitted ceiling also pays the network's
ranking penalty (``fit_problem._Problem.rank_penalty``, scales
in :data:`~scalemodel.fit_priors.NETWORKS`): a compute or framework explanation that fits
the runs as well ranks first, the slow network stays an alternative. Intervals come from the Jacobian at the optimum
(Laplace approximation, scaled up by :math:`\chi^2/\text{dof}` when the runs scatter more
than their uncertainties say), transformed back through :math:`g`; an end the runs do
not constrain is ``None``. Every subset within :data:`ALTERNATIVE_SCORE` of the best, or
whose misfit is within the runs' noise (:math:`\chi^2` at most the number of runs), is kept
as an alternative explanation on the fitted cluster (at most :data:`MAX_ALTERNATIVES`,
best first), whose answers then range over all of them.
"""

from __future__ import annotations

import itertools
import math
import numbers
import warnings
from collections.abc import Iterable

import attrs
import numpy as np

from .cluster import ClusterProfile, load_cluster
from .discrepancy import (KEY as DISCREPANCY_KEY, NOISE_KEY, discrepancy_record,
                          miss_factor, noise_record)
from .exceptions import (CalibrationWarning, InvalidParameterError, ModelWarning,
                         ParameterTypeError, ScalemodelError, UnknownNameError)
from . import fit_priors as _priors
from . import fit_problem as _fit_problem
from .fit_priors import _ORDER, NCCL_HOP_LATENCY, NCCL_NETWORKS, NETWORKS, TRANSPORT_SEES
from .fit_problem import _Problem, _solve
from .model import Scenario
from .runs import DEFAULT_UNCERTAINTY, Run, _renamed, load_runs
from .topology import resolve_topology

__all__ = ["fit_cluster", "ClusterFit", "FittedParameter", "RunResidual", "Run",
           "load_runs", "PRIORS", "DEFAULT_UNCERTAINTY", "MAX_RUNS"]

PRIORS = _priors.PRIORS
"""Weakly informative priors of the fitted parameters (defined in
:mod:`scalemodel.fit_priors`): ideal default, scale of the penalty (in the log of the
value for ``log`` parameters, in the value's unit otherwise), bounds and their source.
``ceiling`` bounds are fractions of the largest line rate."""

AUTO = _priors.AUTO
"""Parameters :func:`~scalemodel.fit_cluster` chooses among by itself (``straggler_spread``
only when the runs have at least three worker counts above one, or two with a measured
compute slowdown; ``ceiling`` and ``utilization`` only without transport data). The others
(``alpha``, ``overlap``, ``host_overhead``) come from the transport or ``fit=``."""

MAX_RUNS = _fit_problem.MAX_RUNS
"""Most runs :func:`~scalemodel.fit_cluster` takes: 10^5 [runs]. A fit evaluates all runs in
one pass per parameter vector, vectorized over each configuration's runs (model, worker
count, settings), so its time grows with the distinct configurations, about 0.5 s each on
one core (10^4 runs of 18 configurations in about 4 s, ``benchmarks/bench_fit.py``; 60
worker counts of one model 30 s); beyond this many runs a random sample tells as much."""

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
        ``"fitted"``, ``"measured"`` (from compute times), ``"given"`` (a keyword),
        ``"transport"`` (from transport data), ``"from cluster"``, ``"default"`` (held at
        the ideal value) or ``"prior"`` (held at the ideal value, which the runs did not
        see, with the network prior's range as its interval:
        :data:`~scalemodel.fitting.UNSEEN`).
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
        Every explanation (choice of free parameters) that fits the runs within their
        noise, best first (the first is the chosen one): ``{"free", "values",
        "intervals", "score", "chi2"}``, ``score`` the Akaike-penalised misfit minus the
        best one's (within :data:`~scalemodel.fitting.ALTERNATIVE_SCORE`, or any score when
        the misfit is within the runs' noise; at most
        :data:`~scalemodel.fitting.MAX_ALTERNATIVES`), unbounded
        interval ends None. The cluster carries them
        (:attr:`~scalemodel.ClusterProfile.alternatives`) and its predictions range over
        them; the message says which run would tell them apart.
    codec : dict
        ``{key: CodecFit}``: the codec costs fitted from the compressed runs
        (:mod:`scalemodel.fit_codec`), keyed as in ``cluster.codec_costs``; empty
        without compressed runs.
    """

    cluster: ClusterProfile
    parameters: dict
    residuals: list
    free: tuple
    chi2: float
    message: str
    alternatives: list = attrs.field(factory=list)
    codec: dict = attrs.field(factory=dict)

    def save(self, path):
        """Write the fitted cluster as JSON, atomically [path]."""
        from .cluster import save_cluster
        return save_cluster(self.cluster, path)

    def to_dict(self) -> dict:
        """Everything as JSON-ready data; a value or interval end that is not finite (no
        ceiling, an unbounded end) is None, as in the cluster file."""
        return {"cluster": self.cluster.to_dict(),
                "parameters": {k: _finite_or_none(attrs.asdict(v))
                               for k, v in self.parameters.items()},
                "residuals": [attrs.asdict(r) for r in self.residuals],
                "free": list(self.free), "chi2": self.chi2, "message": self.message,
                "alternatives": self.alternatives,
                "codec": {k: v.to_dict() for k, v in self.codec.items()}}

    def __str__(self):
        return self.message


def _finite_or_none(obj):
    """``obj`` (dicts, lists, numbers) with every float that is not finite as None."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


class _Default(int):
    """An int default that knows it was not passed (its repr is the number)."""


_GPUS_PER_NODE = _Default(8)


def fit_cluster(runs, *, transport=None, network=None, algorithm="ring", fusion=None,
                gpus_per_node=_GPUS_PER_NODE, nics_per_node=None, intra_bw=None,
                intra_alpha=None, ps_servers=None, cluster=None, fit=None, hold=None,
                confidence=0.95, max_free=None, name="fitted", allow_folder=None,
                implementation=None, wrapper=None, progress=None, **given) -> ClusterFit:
    """Fit a cluster's real-world terms from measured runs (see the module).

    Parameters
    ----------
    runs : list of dict, str or os.PathLike
        Measured runs, or a CSV file of them (see the module for the keys); at most
        :data:`~scalemodel.fitting.MAX_RUNS` [-].
    transport : str, os.PathLike, list of them, ClusterProfile or TraceReport, optional
        Transport data (:mod:`scalemodel.fit_transport`): nccl-tests logs (intra- and
        inter-node), the cluster JSON of ``python -m scalemodel.calibrate`` or
        ``from-nccl-tests``, a trace report. It fixes the latency, the achieved
        bandwidth (utilization, table, ceiling) and the intra-node link with their
        intervals (status ``"transport"``); the runs then fit only what it cannot see [-].
    network : str or None
        The transport the runs used, for the priors of the achieved bandwidth without
        transport data: ``"nccl-ib"``, ``"nccl-roce"``, ``"nccl-socket"``, ``"gloo"``,
        ``"mpi"`` (:data:`~scalemodel.fit_priors.NETWORKS`, each with its published
        figures) or None (generic priors). A utilization or ceiling held at the ideal
        value that the runs do not see (:data:`~scalemodel.fitting.UNSEEN`) then takes
        the prior's central ``confidence`` range as its interval (status ``"prior"``),
        and on an NCCL transport so does the latency ``alpha``, from 0 to NCCL's own
        per-hop network latency (:data:`~scalemodel.fit_priors.NCCL_HOP_LATENCY`) [-].
    algorithm : str
        Collective of the runs that do not name one [-].
    fusion : str, fusion policy or None
        Fusion of the runs that do not name one; None (the default): ``"ddp"`` for
        unsharded runs, and for sharded runs the strategy's default wrapping
        (:func:`~scalemodel.sharding.resolve_wrap`: ``"block"`` where the profile's
        tensors have numbered blocks, else ``"none"``), as every question takes it [-].
    gpus_per_node : int or None
        GPUs per node of the cluster (its topology; ``None``: every worker its own link);
        default 8, or with ``transport`` or ``cluster`` theirs (every worker its own link
        when they have no topology, as the CLI's ``scalemodel fit`` takes them), or every
        worker its own link when all runs' profiles were measured on CPUs by
        ``scalemodel.calibrate`` (gloo's processes talk over TCP, not NVLink) [workers].
    nics_per_node : int or None
        NICs per node; ``None``: 1 [NICs].
    intra_bw : float, str or None
        Intra-node link rate; ``None``: the transport's or starting cluster's, else that of
        the one built-in GPU the runs' FLOP-derived profiles compute on (its spec's rate per
        direction, and its architecture for NCCL's choice;
        :func:`~scalemodel.efficiency.gpu_topology`), else 2.4e12 [bits/s].
    intra_alpha : float or None
        Intra-node step latency; ``None``: 0 [s].
    ps_servers : int or None
        As in :func:`~scalemodel.scaling_factor` [servers].
    cluster : ClusterProfile, str or os.PathLike, optional
        A cluster to start from: its values are held (status ``"from cluster"``) unless
        ``fit=`` names them; prefer ``transport=`` for a transport calibration [-].
    fit : sequence of str, optional
        Fit exactly these parameters instead of choosing [-].
    hold : sequence of str, optional
        Never fit these (they stay at their default or given value). With ``network=``, a
        utilization or ceiling held at its default that the runs do not see still takes the
        network prior's range as its interval (status ``"prior"``); one given by a starting
        ``cluster=`` or transport data keeps its value as a point [-].
    confidence : float
        Confidence level of the intervals, in (0, 1) [-].
    max_free : int, optional
        Most parameters to fit at once; default the number of runs (at most 4, at most
        3 when more than six parameters are candidates) [-].
    name : str
        Name of the fitted cluster [-].
    allow_folder : str, os.PathLike, list of them, or None
        Folders that the runs' ``model`` paths may lead into besides the CSV's own folder
        (as :func:`~scalemodel.runs.load_runs`); None: a CSV's model paths stay in its
        folder [path].
    implementation : str or None
        Implementation preset of the compressed runs that name none (their wire format
        and the ``codec_costs`` key, :mod:`scalemodel.fit_codec`) [-].
    wrapper : HostCosts, WrapperMeasurement, str or os.PathLike, optional
        The data-parallel wrapper's costs measured on one GPU (the ``<stem>.wrapper.json``
        of ``python -m scalemodel.calibrate --steps compute,wrapper``, or its
        :class:`~scalemodel.calibrate.wrapper.WrapperMeasurement`, or
        :class:`~scalemodel.hostcosts.HostCosts`): the cluster's ``host`` (eq.
        :eq:`host-lead`), which the runs' predictions then include with each profile's
        ``host_time``; ``bucket_overhead`` and ``iteration_overhead`` are held at 0 unless
        ``fit=`` names them [-].
    progress : callable, optional
        Called as ``progress(done, total)`` after each candidate explanation is fitted
        (``scalemodel fit`` prints from it when a fit takes more than 2 s) [-].
    **given
        Values to hold for any parameter of :data:`~scalemodel.fitting.PRIORS`, e.g.
        ``compute_slowdown=1.1`` [unit of the parameter].

    Returns
    -------
    ClusterFit
        The cluster (with its ``alternatives`` and ``fit_settings``), the parameters with
        intervals, the per-run residuals.

    Raises
    ------
    InvalidParameterError, ParameterTypeError, UnknownNameError
        Bad runs or keywords (the message names the run and the value), more than
        :data:`~scalemodel.fitting.MAX_RUNS` runs, a transport that contradicts the
        runs' topology or line rate (the message names both), or an efficiency to fit
        from FLOP-derived runs on more than one GPU class (it is kept per class: fit each
        class's runs in its own call).
    CalibrationError
        The fit cannot start (the model cannot be evaluated at any starting values). Runs
        that no explanation reaches are not an error: a
        :class:`~scalemodel.exceptions.CalibrationWarning` names each run and its miss,
        and the cluster records the model discrepancy that widens its intervals.

    Examples
    --------
    >>> import scalemodel
    >>> runs = [{"model": "resnet50", "n": 64, "bw": "100Gbps", "scaling_factor": 0.8}]
    >>> fit = scalemodel.fit_cluster(runs, fusion="horovod", gpus_per_node=8)
    >>> fit.free
    ('ceiling',)
    """
    _check_keywords(given, confidence, fit, hold, network, transport, cluster)
    _check_max_free_and_name(max_free, name)
    if progress is not None and not callable(progress):  # (a TypeError at the first call)
        raise ParameterTypeError("progress", progress, "a callable progress(done, total) "
                                 "or None")
    if implementation is not None:  # checked even when no run is compressed (was ignored)
        from .compressors import resolve_implementation
        resolve_implementation(implementation, "implementation")
    runs, base, source = _load_and_check(
        runs, cluster=cluster, transport=transport, name=name, algorithm=algorithm,
        fusion=fusion, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
        intra_bw=intra_bw, intra_alpha=intra_alpha, allow_folder=allow_folder)
    if wrapper is not None:  # the wrapper step sees the wrapper's host work directly
        base, hold = _with_wrapper(base, runs, wrapper, hold, fit)
    all_runs, runs = runs, _uncompressed(runs)
    fixed, statuses, sigma = _fixed_values(runs, given, base, source=source)
    settings = dict(algorithm=algorithm, fusion=fusion, ps_servers=ps_servers)
    subsets, fixed_all = _candidate_sets(runs, fixed, fit=fit, hold=hold, max_free=max_free)
    problem = _Problem(runs, base, settings, fixed_all)
    problem.network = None if network is None else NETWORKS[network]
    if fit is not None and "efficiency" in fit:
        problem.efficiency_everywhere()
    try:
        solutions = _solve_each(problem, subsets, progress)
    except InvalidParameterError as exc:
        raise _naming_the_run(exc, all_runs) from None
    best = solutions[0]
    params = _parameters(problem, best, fixed_all, statuses, sigma, base,
                         confidence=confidence, source=source)
    params = _prior_intervals(problem, best, params, network, confidence)
    alternatives = _alternatives(problem, solutions, confidence)
    residuals, discrepancy = _residuals(problem, best.values, [
        s.values for s in solutions if s.score <= best.score + ALTERNATIVE_SCORE])
    fit_settings = _fit_settings(runs, algorithm, _recorded_fusion(runs, fusion), source)
    fitted = _with_discrepancy(
        _fitted_cluster(problem, best, params, alternatives, fit_settings), discrepancy,
        noise_record([r.uncertainty for r in runs], confidence))
    notes = _what_tells_them_apart(problem, fitted, runs, settings)
    notes = list(notes) + _efficiency_notes(fitted) + _discrepancy_notes(fitted)
    message = _message(best, params, residuals, alternatives, notes)
    if fitted.host is not None and wrapper is not None:  # what wrapper= fixed
        message += _host_line(fitted.host)
    result = ClusterFit(cluster=fitted, parameters=params, residuals=residuals,
                        free=tuple(best.free), chi2=best.chi2, message=message,
                        alternatives=alternatives)
    if len(all_runs) > len(runs):  # the second step: codec costs from the compressed runs
        from .fit_codec import fit_codec
        codec = fit_codec(fitted, all_runs, implementation=implementation, **settings,
                          confidence=confidence)
        cl = _with_codec_misses(codec.cluster, codec.fits, all_runs)
        result = attrs.evolve(result, cluster=cl, codec=codec.fits,
                              message=result.message + "\ncodec costs (from the compressed "
                              "runs, on the fitted cluster):\n  "
                              + codec.message.replace("\n", "\n  ")
                              + ("\n" + "\n".join(_discrepancy_notes(cl))
                                 if cl is not codec.cluster else ""))
    return result


def _with_wrapper(base, runs, wrapper, hold, fit):
    """``(base, hold)`` with the wrapper step's host costs (``wrapper=``, read by
    :func:`~scalemodel.calibrate.wrapper.load_host_costs`) in the starting cluster and
    ``bucket_overhead`` and ``iteration_overhead`` held unless ``fit`` names them; one
    CalibrationWarning when runs are sharded (not modelled there)."""
    from .calibrate.wrapper import load_host_costs
    base = attrs.evolve(base, host=load_host_costs(wrapper, "wrapper"))
    hold = [*(hold or ()), *(k for k in ("bucket_overhead", "iteration_overhead")
                             if k not in (fit or ()))]
    sharded = [r.label for r in runs if (getattr(r, "sharding", None) or "none") != "none"]
    if sharded:  # said once here, not by every scenario the fit builds
        warnings.warn(CalibrationWarning(
            f"wrapper=: the host costs are not modelled under sharding, so the sharded "
            f"runs ({', '.join(sharded[:3])}{' ...' if len(sharded) > 3 else ''}) do "
            "not see them; the cluster keeps them for unsharded questions"))
    return base, hold


def _host_line(h):
    """The fit message's line for the host costs ``wrapper=`` fixed."""
    return (f"\n  host costs           {h.per_tensor * 1e6:.3g} us per tensor, "
            f"{h.per_bucket * 1e6:.3g} us per bucket, {h.device_time * 1e3:.3g} ms "
            f"on the GPU  wrapper ({h.source or 'given'})")


def _uncompressed(runs):
    """The runs without a compressor (the cluster is fitted from them; the compressed
    ones fit the codec costs on top, :mod:`scalemodel.fit_codec`)."""
    plain = [r for r in runs if getattr(r, "compressor", None) is None]
    if len(plain) < len(runs) and not any(r.n > 1 for r in plain):
        raise InvalidParameterError(
            "runs", [r.label for r in runs], "needs at least one uncompressed run with "
            "n > 1: the cluster is fitted from the uncompressed runs, the codec costs of the "
            "compressed ones on top of it", "Add a run without compressor")
    return plain


# --------------------------------------------------------------------------- the steps


@attrs.frozen(eq=False)
class _Solution:
    """One candidate set of free parameters, fitted."""

    score: float  # chi2 + prior (+ the network's ranking penalty) + 2 |free| (Akaike)
    free: tuple
    values: dict
    g: np.ndarray
    jac: object
    chi2: float
    prior: float
    bounds: object


@attrs.frozen
class _Source:
    """Where the starting values come from: ``kind`` is ``"ideal"``, ``"cluster"`` (the
    ``cluster=`` keyword) or ``"transport"``; ``text`` names a transport."""

    kind: str
    text: str = ""


def _check_keywords(given, confidence, fit, hold, network, transport, cluster):
    """Unknown parameter or network names, a confidence outside (0, 1), contradicting
    options are errors."""
    unknown = set(given) - set(PRIORS)
    if unknown:
        raise InvalidParameterError("fit_cluster", sorted(unknown), "unknown keywords",
                                    f"Parameters: {', '.join(PRIORS)}")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise ParameterTypeError("confidence", confidence, "a number in (0, 1)")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "must be in (0, 1)")
    for option, names in (("hold", hold), ("fit", fit)):
        if isinstance(names, str) or not (names is None or isinstance(names, Iterable)):
            raise ParameterTypeError(option, names, "a list of parameter names")
        names = None if names is None else list(names)
        odd = [k for k in names or () if not isinstance(k, str)]
        if odd:
            raise ParameterTypeError(option, names, "a list of parameter names (strings)")
        bad = set(names or ()) - set(PRIORS)
        if bad:
            raise InvalidParameterError(option, sorted(bad), "unknown parameters",
                                        f"Parameters: {', '.join(PRIORS)}")
    both = set(fit or ()) & set(hold or ())
    if both:
        raise InvalidParameterError("hold", sorted(both), "names parameters that fit= "
                                    "asks to fit; give each in one of them")
    if network is not None and not isinstance(network, str):
        raise ParameterTypeError("network", network, f"one of {', '.join(NETWORKS)}")
    if network is not None and network not in NETWORKS:
        raise UnknownNameError("network", network, list(NETWORKS))
    if transport is not None and cluster is not None:
        raise InvalidParameterError("cluster", cluster, "give transport= or cluster=, not "
                                    "both (transport= fixes what the transport sees)")
    if transport is not None:
        seen = set(TRANSPORT_SEES) & (set(fit or ()) | set(given))
        if seen:
            raise InvalidParameterError("fit", sorted(seen), "are fixed by transport=; "
                                        "leave them out, or leave out transport=")


def _check_max_free_and_name(max_free, name):
    """``max_free`` an integer >= 1 (or None), ``name`` a string."""
    if max_free is not None:
        if isinstance(max_free, bool) or not isinstance(max_free, numbers.Integral):
            raise ParameterTypeError("max_free", max_free, "an integer >= 1 (or None)")
        if max_free < 1:
            raise InvalidParameterError("max_free", max_free, "must be >= 1 (parameters "
                                        "fitted at once)", "To fit nothing, pass fit=[]")
    if not isinstance(name, str):
        raise ParameterTypeError("name", name, "a string (the fitted cluster's name)")


def _naming_the_run(exc, runs):
    """An error about a worker count (``n=12`` with a hierarchical all-reduce of 8 GPUs per
    node), renamed to the first run with that count: ``runs[i].n``, the value the user
    wrote."""
    if exc.parameter != "n":
        return exc
    for i, r in enumerate(runs):
        if r.n == exc.value:
            return _renamed(exc, f"runs[{i}].n")
    return exc


def _too_many(count):
    raise InvalidParameterError("runs", f"{count} runs", f"at most {MAX_RUNS} runs "
                                "(scalemodel.fitting.MAX_RUNS)", "Fit a random sample of "
                                "them: a few hundred runs per configuration tell as much")


def _load_and_check(runs, *, cluster, transport, name, algorithm, fusion, gpus_per_node,
                    nics_per_node, intra_bw, intra_alpha, allow_folder=None):
    """The validated runs, the cluster to start from (with the topology) and its source;
    a transport is read and checked against the runs here."""
    if isinstance(runs, (list, tuple)) and len(runs) > MAX_RUNS:
        _too_many(len(runs))
    runs = load_runs(runs, allow_folder=allow_folder)
    if len(runs) > MAX_RUNS:
        _too_many(len(runs))
    given_g = None if gpus_per_node is _GPUS_PER_NODE else gpus_per_node
    asked_flat = gpus_per_node is None  # (given as None: every worker its own link)
    source = _Source("ideal")
    if transport is not None:
        from .fit_transport import check_against_runs, load_transport, without_line_rate
        bw_max = max(r.bw for r in runs)
        t = load_transport(transport, line_rate=bw_max, gpus_per_node=given_g,
                           nics_per_node=nics_per_node)
        check_against_runs(t, runs, gpus_per_node=given_g, nics_per_node=nics_per_node)
        base = without_line_rate(t.cluster, bw_max)
        source = _Source("transport", t.text)
    elif cluster is not None:
        base = load_cluster(cluster)
        source = _Source("cluster")
    else:
        base = ClusterProfile(name=name, provenance={"source": "fit_cluster"})
    if gpus_per_node is _GPUS_PER_NODE and (base.topology is not None
                                            or transport is not None or cluster is not None
                                            or all(_measured_on_cpu(r.profile)
                                                   for r in runs)):
        # not given: keep the starting cluster's (the transport's) topology, flat when it
        # has none (a calibration whose ranks shared one node measured each rank's own
        # link: 8 GPUs per node would put every run inside an invented node; so too for
        # CPU processes, which gloo connects over TCP, never NVLink)
        gpus_per_node = None
    topo = resolve_topology(_runs_gpu_topology(runs) if base.topology is None
                            else base.topology, gpus_per_node=gpus_per_node,
                            nics_per_node=nics_per_node, intra_bw=intra_bw,
                            intra_alpha=intra_alpha)
    base = attrs.evolve(base, name=name, topology=None if topo.flat else topo)
    if topo.flat and (nics_per_node is not None or intra_bw is not None):
        unused = [f"{k}={v!r}" for k, v in (("nics_per_node", nics_per_node),
                                              ("intra_bw", intra_bw)) if v is not None]
        warnings.warn(ModelWarning(
            f"fit_cluster: {', '.join(unused)} has no effect: every worker is its own "
            "link here (" + ("the transport has no topology" if transport is not None else
                             "the starting cluster has none" if cluster is not None else
                             "gpus_per_node=None" if asked_flat else
                             "the runs' profiles were measured on CPUs") +
            "); give gpus_per_node= for workers that share nodes"),
            stacklevel=4)
    if isinstance(base.extra, dict) and "efficiency" in base.extra:
        # a starting cluster's fitted efficiency would rescale the runs' profiles in
        # every scenario of this fit: the runs decide it again (or the profiles' own)
        base = attrs.evolve(base, extra={k: v for k, v in base.extra.items()
                                         if k != "efficiency"})
    # validate names; a sharded run's fusion is its wrapping policy ("block", "module")
    r0 = runs[0]
    Scenario.build(r0.profile, algorithm=algorithm, fusion=fusion,
                   sharding=getattr(r0, "sharding", "none") or "none")
    for i, r in enumerate(runs):
        if r.fusion is not None or r.algorithm is not None:
            try:
                Scenario.build(r.profile,  # 0 or [] checked too, never read as blank
                               algorithm=algorithm if r.algorithm is None else r.algorithm,
                               fusion=fusion if r.fusion is None else r.fusion,
                               sharding=getattr(r, "sharding", "none") or "none")
            except (InvalidParameterError, ParameterTypeError) as exc:
                raise _renamed(exc, f"runs[{i}].{exc.parameter}") from None
    if not any(r.n > 1 or r.wrapped for r in runs):  # a wrapped one sees the framework
        raise InvalidParameterError("runs", [r.label for r in runs],
                                    "needs at least one run with n > 1 or one wrapped "
                                    "single-worker run")
    return runs, base, source


def _measured_on_cpu(profile) -> bool:
    """Whether a profile was measured on a CPU by ``scalemodel.calibrate`` (its
    provenance's ``device``, or, in files written before that was recorded, its timer)."""
    prov = getattr(profile, "provenance", None)
    if not isinstance(prov, dict) or prov.get("source") != \
            "measured by scalemodel.calibrate.compute":
        return False
    device = prov.get("device")
    if isinstance(device, str):
        return device.lower().startswith("cpu")
    return prov.get("timer") == "time.perf_counter"


def _runs_gpu_topology(runs):
    """The intra-node link and architecture of the one built-in GPU every run's
    FLOP-derived profile computes on (:func:`~scalemodel.efficiency.gpu_topology`), as a
    prediction on such a profile takes them; None (the topology's defaults) otherwise."""
    from .efficiency import gpu_topology

    topologies = {gpu_topology(r.profile) for r in runs}
    return topologies.pop() if len(topologies) == 1 else None


def _fixed_values(runs, given, base, *, source):
    """Values not fitted: given by keyword, measured (the compute slowdown from compute
    times), fixed by the transport, or taken from the starting cluster. Returns (values,
    statuses, measured slowdown or None)."""
    fixed, statuses = {}, {}
    for k, v in given.items():
        fixed[k] = float(v)
        statuses[k] = "given"
    sigma = _measured_slowdown(runs)
    if sigma is not None and "compute_slowdown" not in fixed:
        fixed["compute_slowdown"] = sigma[0]
        statuses["compute_slowdown"] = "measured"
    if source.kind == "transport":
        for k in ("alpha", "utilization", "ceiling"):
            fixed[k] = _base_value(base, k)
            statuses[k] = "transport"
    elif source.kind == "cluster":
        for k in ("alpha", "utilization", "overlap", "compute_slowdown",
                  "collective_overhead", "sync_overhead"):
            if k not in fixed:
                fixed[k] = getattr(base, k)
                statuses[k] = "from cluster"
    return fixed, statuses, sigma


SINGLE_WORKER_SEES = ("iteration_overhead", "bucket_overhead", "efficiency")
"""What runs on one worker each can fit (DDP on one GPU, a FLOP-derived profile's absolute
time): the network's parameters and the waits between workers have no effect on them."""


def _candidate_sets(runs, fixed, *, fit, hold, max_free):
    """The sets of free parameters to try, and the values held in all of them."""
    hold = set(hold or ())
    fixed_all = dict(fixed)
    if fit is not None:
        fit = tuple(fit)
        for k in fit:
            fixed_all.pop(k, None)
        if "efficiency" in fit:
            _check_one_gpu_class(runs)
        return [fit], fixed_all
    candidates = [k for k in AUTO if k not in fixed and k not in hold]
    if "efficiency" in candidates and not any(
            not getattr(r, "compute_known", True) and r.measured_sf is None for r in runs):
        candidates.remove("efficiency")  # no absolute time on a FLOP-derived profile
    if "efficiency" in candidates:
        _check_one_gpu_class(runs)
    if all(r.n == 1 for r in runs):  # one worker each: no collective moves a byte, and
        # nothing waits for another worker (Scenario._fixed, _sigma_n at n = 1): only the
        # wrapper's costs on one worker and an absolute compute time are seen
        candidates = [k for k in candidates if k in SINGLE_WORKER_SEES]
    if "straggler_spread" in candidates:
        # the wait for the slowest worker grows with n: it needs the runs' n to vary
        counts = len({r.n for r in runs if r.n > 1})
        if counts < (2 if "compute_slowdown" in fixed else 3):
            candidates.remove("straggler_spread")
    informative = sum(r.n > 1 for r in runs) + sum(
        bool(getattr(r, "wrapped", False)) for r in runs if r.n == 1)
    cap = 4 if len(candidates) <= 6 else 3
    top = min(informative, len(candidates), cap if max_free is None else max_free)
    subsets = [s for p in range(1, top + 1) for s in itertools.combinations(candidates, p)]
    return subsets or [()], fixed_all


def _check_one_gpu_class(runs):
    """Refuse to fit one efficiency to FLOP-derived runs on several GPU classes: the
    efficiency is kept per GPU class (a cluster's applies to the GPU its runs computed on),
    and one number fitted across an A100 and an H100 would be neither's."""
    classes = {}
    for i, r in enumerate(runs):
        if not getattr(r, "compute_known", True):
            classes.setdefault(str(r.profile.device) or r.profile.name, []).append(i)
    if len(classes) > 1:
        said = "; ".join(f"run{'s' if len(i) > 1 else ''} {', '.join(map(str, i))} on {d}"
                         for d, i in classes.items())
        raise InvalidParameterError(
            "runs", [r.label for r in runs], "their FLOP-derived profiles compute on "
            f"{len(classes)} GPU classes ({said}), and the efficiency is fitted per GPU "
            "class", "Fit each class's runs in its own fit_cluster call (one cluster "
            "each), or give those runs their single_worker_time")


def _solve_each(problem, subsets, progress=None):
    """Every candidate set fitted, best (lowest score) first; ties go to fewer parameters,
    then to :data:`_ORDER`.

    When ``efficiency`` is a candidate (a FLOP-derived profile with no absolute time), a set
    without it holds the efficiency at the profile's default, which is as much a choice as
    fitting it: such a set is charged as if it had that parameter too (2 in score), so one
    run of a FLOP-derived profile is explained by its efficiency first, and a per-unit or
    per-run cost that reaches the same time stays an alternative.

    The same holds for ``bucket_overhead`` when the runs hold their gradients in different
    numbers of buckets (:meth:`~scalemodel.fit_problem._Problem.sees_bucket_counts`):
    every DDP bucket costs host work (hooks, copy, launch), which such runs see, so a set
    that holds it at 0 is charged for that choice too. Without it, two runs at 25 MB and
    1 MB whose difference is about one uncertainty (ResNeXt in PyTorch's DDP benchmark)
    kept no per-bucket cost and predicted smaller buckets faster, the wrong sign."""
    unknown_rate = any("efficiency" in s for s in subsets)
    held_buckets = (any("bucket_overhead" in s for s in subsets)
                    and problem.sees_bucket_counts())
    solutions = []
    for k, subset in enumerate(subsets):
        if progress is not None and k:
            progress(k, len(subsets))
        if not subset:
            chi2 = float(np.sum(problem.residuals({}) ** 2))
            solutions.append(_Solution(chi2 + 2.0 * (unknown_rate + held_buckets), (), {},
                                       np.zeros(0), None, chi2, 0.0, None))
            continue
        vals, g, jac, chi2, prior, bounds = _solve(problem, subset)
        rank = problem.rank_penalty(vals)
        charged = (len(subset) + (unknown_rate and "efficiency" not in subset)
                   + (held_buckets and "bucket_overhead" not in subset))
        solutions.append(_Solution(chi2 + prior + rank + 2.0 * charged, tuple(subset),
                                   vals, g, jac, chi2, prior, bounds))
    if progress is not None and subsets:
        progress(len(subsets), len(subsets))  # (all tried)
    order = {k: i for i, k in enumerate(_ORDER)}
    solutions.sort(key=lambda s: (round(s.score, 6), len(s.free), [order[k] for k in s.free]))
    return solutions


_SOURCES = {"given": "given by keyword", "from cluster": "from the starting cluster",
            "measured": "compute times of the runs"}


def _parameters(problem, best, fixed_all, statuses, sigma, base, *, confidence, source):
    """Every parameter with its value, interval and status: the fitted ones with Laplace
    intervals (inflated when the runs scatter more than their uncertainty), the others
    as held."""
    params = _fitted_parameters(problem, best, confidence, warn=True)
    for k in _ORDER:
        if k in params:
            continue
        if k in fixed_all:
            v = fixed_all[k]
            st = statuses.get(k, "given")
            iv = (v, v)
            src = _SOURCES.get(st, st)
            if k == "compute_slowdown" and st == "measured":
                iv = sigma[1]
                src = (f"measured: median of compute_time(n) / compute_time(1) over "
                       f"{sigma[2]} run(s)")
            if st == "transport":
                iv = tuple(base.intervals.get(k, (v, v)))
                if k == "ceiling" and not math.isfinite(v):
                    iv = (None, None)
                src = f"transport: {source.text}"
            params[k] = FittedParameter(k, v, tuple(iv), PRIORS[k].unit, st, False, src)
        elif k == "efficiency":
            params[k] = FittedParameter(k, problem.e0, (problem.e0, problem.e0), "-",
                                        "default", False, "the profile's own")
        else:
            v = PRIORS[k].default if source.kind == "ideal" else _base_value(base, k)
            params[k] = FittedParameter(k, v, (v, v), PRIORS[k].unit, "default", False,
                                        "held at the ideal model's value (no evidence "
                                        "needed it)" if source.kind == "ideal" else
                                        "from the starting cluster")
    return params


UNSEEN = 1.0
"""Sensitivity below which the runs did not see a parameter: the change of their
normalised residuals :math:`\\|\\rho(\\theta_\\text{end}) - \\rho(\\hat\\theta)\\|_2`
(:math:`\\rho_i` the log of the run's predicted over measured time, divided by its
uncertainty) when the parameter moves from its held value to the pessimistic end of its
network prior's range: at most one standard uncertainty of the runs. Such a parameter
(``utilization``, ``ceiling``; ``alpha`` on an NCCL transport,
:data:`~scalemodel.fit_priors.NCCL_HOP_LATENCY`) held at its ideal value takes that range
as its interval (status ``"prior"``) when ``fit_cluster`` is given ``network=`` [-]."""

_PRIOR_RANGE = ("utilization", "ceiling")
"""Parameters whose range a network prior states (:data:`~scalemodel.fit_priors.NETWORKS`):
the achieved bandwidth of the transport."""


def _network_range(problem, k, z):
    """The network prior's central range of ``k`` as (pessimistic value, optimistic
    value or None), clipped to the parameter's bounds: :math:`g_0 \\pm z\\,w` in the
    fitting coordinate :math:`g` (:meth:`~scalemodel.fit_problem._Problem.g_default`,
    :meth:`~scalemodel.fit_problem._Problem.prior_scale`; the ceiling's always the
    network's :attr:`ceiling_scale`), with :math:`g` growing towards
    the pessimistic end for both; an optimistic end at :math:`g \\le 0` is the ideal
    value (utilization 1, no ceiling: None)."""
    g0, w = problem.g_default(k), problem.prior_scale(k)
    if k == "ceiling":  # a transport that reaches its line rate: the network's own scale
        w = problem.network.ceiling_scale  # (as the ranking's, _Problem.rank_penalty)
    g_lo, g_hi = problem.g_bounds(k)
    worst = float(problem.from_g(k, min(g_hi, g0 + z * w)))
    g_best = g0 - z * w
    best = None if g_best <= g_lo else float(problem.from_g(k, g_best))
    if k == "utilization" and best is None:
        best = 1.0
    return worst, best


def _prior_intervals(problem, best, params, network, confidence):
    """Step: the achieved bandwidth (and on NCCL the latency) the runs did not see takes
    its network prior's range.

    For each parameter of :data:`_PRIOR_RANGE` (and ``alpha`` on an NCCL transport, from
    0 to :data:`~scalemodel.fit_priors.NCCL_HOP_LATENCY`'s network hop) held at the ideal
    value (status
    ``"default"``) when ``network=`` names a transport, the prior's central
    ``confidence`` range (:func:`_network_range`) becomes its interval, status
    ``"prior"``, if the runs do not see it: moving it (together with the ones already
    taken) to the pessimistic end of that range changes the runs' normalised residuals
    by at most :data:`UNSEEN` (the runs' noise). A parameter the runs see keeps its point
    interval: they constrain it. Corners and the intervals of every answer then span the
    range (:meth:`~scalemodel.ClusterProfile.corners`)."""
    if network is None:
        return params
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2))
    rho0 = problem.residuals(best.values)
    trial = dict(best.values)
    out = dict(params)
    for k in (*_PRIOR_RANGE, *(("alpha",) if network in NCCL_NETWORKS else ())):
        p = params.get(k)
        if p is None or p.status != "default" or k not in problem._fields:
            continue
        worst, hi = ((NCCL_HOP_LATENCY["net"], 0.0) if k == "alpha"
                     else _network_range(problem, k, z))
        moved = dict(trial, **{k: worst})
        shift = float(np.linalg.norm(problem.residuals(moved) - rho0))
        if not shift <= UNSEEN:
            continue  # the runs see it: they constrain it
        trial = moved
        iv = (hi, worst) if k == "alpha" else (worst, hi)  # (alpha: low, high)
        out[k] = FittedParameter(
            k, p.value, iv, p.unit, "prior", False,
            (f"the ideal model's 0 to NCCL's own per-hop network latency "
             f"(fit_priors.NCCL_HOP_LATENCY), not seen by the runs (their residuals move "
             f"by {shift:.2g} of their uncertainty over that range)") if k == "alpha" else
            (f"from the network prior, not seen by the runs (their residuals move by "
             f"{shift:.2g} of their uncertainty over its range): "
             f"{NETWORKS[network].source}"))
    return out


_PHYSICAL_LOW = {"compute_slowdown", "sync_overhead", "collective_overhead", "alpha",
                 "host_overhead", "bucket_overhead", "iteration_overhead",
                 "straggler_spread", "overlap"}
"""Parameters whose lower g-bound is a physical limit (0, or 1 for the slowdown): an
interval clipped there ends at that number; clipped at the other bound it is unbounded."""

_PHYSICAL_HIGH = {"overlap"}
"""Parameters whose upper g-bound is a physical limit too (full overlap, 1): an interval
clipped there ends at that number, not unbounded."""


def _fitted_parameters(problem, best, confidence, *, warn):
    """The free parameters of ``best`` with their intervals (Laplace approximation); an
    end the runs do not constrain (clipped at a bound that is not a physical limit) is
    None."""
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
        a_open = not g[i] - z * sd > lo_g  # clipped at the lower g bound
        b_open = not g[i] + z * sd < hi_g
        a = max(lo_g, g[i] - z * sd)
        b = min(hi_g, g[i] + z * sd)
        va, vb = float(problem.from_g(k, a)), float(problem.from_g(k, b))
        if k in ("ceiling", "utilization"):  # decreasing in g
            # ceiling: g = 0 is "no ceiling" (unbounded above); utilization: g = 0 is 1
            lo = None if b_open else vb
            hi = None if (a_open and k == "ceiling") else va
        else:
            lo = None if (a_open and k not in _PHYSICAL_LOW) else va
            hi = None if (b_open and k not in _PHYSICAL_HIGH) else vb
        # the lower bound is the ideal value (no effect); the upper one is a real limit
        at_bound = bool(g[i] >= hi_g - 1e-3 * (hi_g - lo_g))
        params[k] = FittedParameter(k, vals[k], (lo, hi), PRIORS[k].unit, "fitted",
                                    at_bound, f"fitted to {k_runs} run(s); prior: "
                                    f"{problem.prior(k).source}")
        if at_bound and warn:
            warnings.warn(CalibrationWarning(
                f"fit_cluster: {k} = {vals[k]:.4g} {PRIORS[k].unit} sits at its bound: the "
                f"runs ask for more than the model's range allows"), stacklevel=4)
    return params


def _residuals(problem, values, others=()):
    """``(residuals, record)``: measured against fitted per run, and the record of the
    model discrepancy (:func:`~scalemodel.discrepancy.discrepancy_record`, None when
    every run is reached); a warning names each run that no explanation (the best, or one
    of ``others`` within the runs' noise) reaches within three of its uncertainties."""
    runs = problem.runs
    pred = problem.predicted(values)
    measured = problem.measured_t
    err = pred / measured - 1
    closest = np.abs(np.log1p(err))
    for v in others:
        closest = np.minimum(closest, np.abs(np.log(problem.predicted(v) / measured)))
    t1 = np.array([r.profile.iteration_time for r in runs])
    residuals = []
    for i, r in enumerate(runs):
        m_sf = r.measured_sf if r.measured_sf is not None else t1[i] / measured[i]
        residuals.append(RunResidual(r.label, r.n, r.bw, float(measured[i]), float(pred[i]),
                                     float(err[i]), float(m_sf), float(t1[i] / pred[i])))
    missed = np.flatnonzero(closest > 3 * problem.sigma_t)
    for i in missed[:20]:
        x = residuals[i]
        warnings.warn(CalibrationWarning(
            f"fit_cluster: run {x.label!r} (n={x.n}, bw={x.bw:g}) is missed by "
            f"{100 * x.error:+.1f} % (and by every other explanation within the runs' "
            "noise): it contradicts the others or the model"),
            stacklevel=3)
    if len(missed) > 20:
        warnings.warn(CalibrationWarning(
            f"fit_cluster: {len(missed) - 20} more runs are missed by more than three of "
            "their uncertainties"), stacklevel=3)
    return residuals, discrepancy_record([r.label for r in runs], pred, measured, missed)


def _with_discrepancy(cluster, record, noise=None):
    """``cluster`` with this fit's model-discrepancy record and run-noise half-width
    (eqs. :eq:`model-discrepancy` and :eq:`run-noise`) in ``extra`` (a record only when
    the fit missed a run: a starting cluster's are not this fit's) [-]."""
    extra = {k: v for k, v in cluster.extra.items() if k not in (DISCREPANCY_KEY, NOISE_KEY)}
    if record is not None:
        extra[DISCREPANCY_KEY] = record
    if noise is not None:
        extra[NOISE_KEY] = noise
    return cluster if extra == cluster.extra else attrs.evolve(cluster, extra=extra)


def _with_codec_misses(cluster, fits, runs):
    """``cluster`` with the compressed runs that the codec fit misses by more than three
    of their uncertainties in its model-discrepancy record (the larger miss of the two
    steps), each named in a :class:`~scalemodel.exceptions.CalibrationWarning`; the
    compressed runs of a family whose cost was not used have no fitted time and are not
    counted [-]."""
    sigma = {r.label: r.uncertainty for r in runs}
    rows = [row for f in fits.values() for row in f.residuals]
    missed = [i for i, (label, measured, fitted) in enumerate(rows)
              if abs(math.log(fitted / measured)) > 3 * sigma.get(label, DEFAULT_UNCERTAINTY)]
    for i in missed[:20]:
        label, measured, fitted = rows[i]
        warnings.warn(CalibrationWarning(
            f"fit_cluster: compressed run {label!r} is missed by "
            f"{100 * (fitted / measured - 1):+.1f} % with the fitted codec cost: it "
            "contradicts the others or the model"), stacklevel=3)
    rec = discrepancy_record([r[0] for r in rows], [r[2] for r in rows],
                             [r[1] for r in rows], missed)
    if rec is None:
        return cluster
    old = cluster.extra.get(DISCREPANCY_KEY)
    if old is not None:
        if old["factor"] >= rec["factor"]:
            rec = old
        rec = dict(rec, runs_missed=old.get("runs_missed", 1) + len(missed))
    return attrs.evolve(cluster, extra=dict(cluster.extra, **{DISCREPANCY_KEY: rec}))


def _discrepancy_notes(cluster):
    """A line for the fit's message when the fit missed its own runs: every prediction's
    interval on the cluster widens by the miss (:mod:`scalemodel.discrepancy`)."""
    f = miss_factor(cluster)
    if f <= 1.0:
        return []
    rec = cluster.extra[DISCREPANCY_KEY]
    return [f"  the fit misses run {rec['run']!r} by {100 * rec['miss']:+.1f} % beyond its "
            f"noise: every prediction's interval on this cluster is widened {f:.3g} times "
            "both ways for it (model_discrepancy)"]


ALTERNATIVE_SCORE = 2.0
"""Explanations whose score is within this of the best one's are kept as alternatives:
the runs cannot tell them apart (Akaike weight at least e^-1 of the best's) [-]."""

MAX_ALTERNATIVES = 6
"""Most explanations kept (the best included); each costs its corners in every
prediction's interval [-]."""


def _within_noise(solution, n_runs) -> bool:
    """Whether an explanation reaches the runs within their noise: its misfit
    :math:`\\sum \\rho_i^2` (eq. :eq:`fit-residual`) is at most the number of runs, as
    when every run is missed by about one standard uncertainty. Such an explanation is
    kept whatever its prior penalty: the runs cannot rule it out; the priors only rank
    it [-]."""
    return bool(solution.free) and solution.chi2 <= max(1.0, float(n_runs))


_NESTED_GAIN = 0.5
"""An explanation that adds parameters to a kept one must lower the misfit by this much
to be kept as an alternative of its own [-]."""


def _alternatives(problem, solutions, confidence):
    """Every explanation within :data:`ALTERNATIVE_SCORE` of the best or within the runs'
    noise (at most :data:`MAX_ALTERNATIVES`), best first, in the
    format of :attr:`~scalemodel.ClusterProfile.alternatives` (score relative to the
    best's, unbounded interval ends None)."""
    best = solutions[0].score
    n_runs = len(problem.runs)
    out, kept = [], []
    for s in solutions:
        if len(kept) >= MAX_ALTERNATIVES:
            break
        close = s.score <= best + ALTERNATIVE_SCORE or _within_noise(s, n_runs)
        if not close or (kept and not s.free):
            continue
        if any(set(k.free) < set(s.free) and s.chi2 >= k.chi2 - _NESTED_GAIN for k in kept):
            continue  # a kept explanation plus parameters that explain nothing more
        if kept and _idle(problem, s):
            continue  # every parameter at its ideal value: the ideal model again
        kept.append(s)
        params = _fitted_parameters(problem, s, confidence, warn=False)
        values = {k: (None if k == "ceiling" and not math.isfinite(v) else float(v))
                  for k, v in s.values.items()}
        out.append({"free": list(s.free), "values": values,
                    "intervals": {k: list(p.interval) for k, p in params.items()},
                    "score": max(0.0, float(s.score - best)), "chi2": float(s.chi2)})
    return out


def _idle(problem, solution):
    """Whether every free parameter of ``solution`` sits at its ideal value (no effect)."""
    for k, g in zip(solution.free, solution.g):
        p = problem.prior(k)
        ideal = p.default if not p.log and k != "utilization" else 0.0
        if abs(float(g) - ideal) > 1e-3 * p.scale:
            return False
    return True


_INTERVAL_FIELDS = ("alpha", "utilization", "ceiling", "compute_slowdown",
                    "collective_overhead", "sync_overhead", "overlap", "bucket_overhead",
                    "iteration_overhead", "straggler_spread")


def _sharding_text(sharding):
    """A run's sharding as ``fit_settings`` records it: the strategy name, or the
    :meth:`~scalemodel.Sharding.spec` of a :class:`~scalemodel.Sharding` with other fields."""
    from .sharding import Sharding

    if isinstance(sharding, Sharding):
        return sharding.spec()
    return str(sharding or "none")


def _recorded_fusion(runs, fusion):
    """The fusion a fitted cluster records (:func:`_fit_settings`): the one given, or by
    default ``"ddp"`` when no run is sharded (what the runs were then fitted under);
    None (nothing recorded) for sharded runs under their default wrapping, which every
    question makes again for its own profile [-]."""
    if fusion is not None:
        return fusion
    from .sharding import resolve_sharding

    if any(resolve_sharding(getattr(r, "sharding", None) or "none").sharded for r in runs):
        return None
    return "ddp"


def _fit_settings(runs, algorithm, fusion, source):
    """What the cluster was fitted under (:attr:`~scalemodel.ClusterProfile.fit_settings`):
    the fusion and algorithm when they are names, the runs' sharding when they share one,
    and the transport source."""
    out = {}
    if isinstance(fusion, str):
        out["fusion"] = fusion
    if isinstance(algorithm, str):
        out["algorithm"] = algorithm
    shardings = {_sharding_text(getattr(r, "sharding", None)) for r in runs}
    if len(shardings) == 1:
        out["sharding"] = shardings.pop()
    if source.kind == "transport":
        out["transport"] = source.text or "transport data"
    return out


def _fitted_cluster(problem, best, params, alternatives, fit_settings):
    """The cluster of the best solution, with its intervals, alternatives, fit settings
    and provenance."""
    base, runs = problem.base, problem.runs
    intervals = dict(base.intervals)
    for k, p in params.items():
        if p.status in ("fitted", "measured", "transport", "prior") \
                and k in _INTERVAL_FIELDS \
                and k in problem._fields:
            if k == "ceiling" and p.status == "transport" and base.ceiling is None:
                continue
            intervals[k] = p.interval
    provenance = dict(base.provenance)
    provenance.update({
        "source": "scalemodel.fit_cluster from measured runs",
        "runs": [{"label": r.label, "model": r.profile.name, "n": r.n, "bw": r.bw,
                  "measured_iteration_time": float(problem.measured_t[i]),
                  "uncertainty": r.uncertainty} for i, r in enumerate(runs[:1000])],
        "settings": dict(fit_settings),
        "free": list(best.free), "chi2": best.chi2,
    })
    if len(runs) > 1000:
        provenance["runs_omitted"] = len(runs) - 1000
    provenance.pop("prior_intervals", None)  # a starting cluster's: not this fit's
    unseen = [k for k, p in params.items() if p.status == "prior" and k in intervals]
    if unseen:  # intervals from the network prior, not seen by the runs (UNSEEN)
        provenance["prior_intervals"] = unseen
    extra = {}
    if "alternatives" in problem._fields and len(alternatives) > 1:
        extra["alternatives"] = alternatives
    elif len(alternatives) > 1:
        provenance["alternatives"] = alternatives
    if "fit_settings" in problem._fields:
        extra["fit_settings"] = fit_settings
    if "efficiency" in params and params["efficiency"].status == "fitted":
        from .efficiency import model_key
        p = params["efficiency"]
        gpus = sorted({str(r.profile.device) for r in runs
                       if not getattr(r, "compute_known", True)} - {""})
        flop_runs = [r for r in runs if not getattr(r, "compute_known", True)]
        extra["extra"] = dict(base.extra, efficiency={
            "value": p.value, "interval": list(p.interval), "gpu": gpus,
            "profiles": sorted({r.profile.name for r in flop_runs}),
            "models": sorted({model_key(r.profile, _run_tp(r)) for r in flop_runs}),
            "micro_batches": _micro_batches(flop_runs),
            "recompute_shares": _recompute_shares(flop_runs),
            "pressured": _pressured_profiles(flop_runs, base)})
    return attrs.evolve(problem.cluster(best.values), intervals=intervals,
                        provenance=provenance, **extra)


def _efficiency_notes(cluster):
    """Lines for the fit's message on a fitted efficiency: how it is carried to other
    models, and which models' runs were memory-pressured."""
    eff = cluster.extra.get("efficiency") if isinstance(cluster.extra, dict) else None
    if not isinstance(eff, dict):
        return []
    from .efficiency import EFFICIENCY_TRANSFER, calibration_pressured
    out = [f"  the fitted efficiency applies to FLOP-derived profiles on "
           f"{', '.join(eff.get('gpu') or ()) or 'the same GPU'}; for another model its "
           f"interval widens by a factor {EFFICIENCY_TRANSFER:g} either way (the spread of "
           "MFU between models in published tables, efficiency.EFFICIENCY_TRANSFER); for "
           "the same model at a larger (smaller) tensor-parallel degree than its runs', its "
           "slow (fast) end only, at a larger (smaller) micro-batch its fast (slow) end "
           "only (efficiency.carried_ends), with more (less) activation recompute than "
           "its runs' its fast (slow) end only (efficiency.recompute_factor)"]
    if eff.get("pressured"):
        out.append("  memory-pressured calibration runs (model state >= "
                   "efficiency.MEMORY_PRESSURE_SHARE of the GPU): their model's "
                   "predictions get the same wider interval"
                   + (", and, as every run was, every prediction's fast end is "
                      "widened efficiency.MEMORY_PRESSURE_SLOWDOWN times more "
                      "(efficiency.calibration_pressured)"
                      if calibration_pressured(cluster) else "")
                   + "; a run with more room (more GPUs, or a smaller model state) "
                   "would calibrate it better")
    return out


def _micro_batches(runs):
    """The micro-batches of the runs of each model (:func:`scalemodel.efficiency.model_key`),
    sorted; a run whose profile records none is left out
    (:func:`scalemodel.efficiency.micro_batch_side` reads them) [sequences]."""
    from .efficiency import micro_batch_of, model_key

    out = {}
    for r in runs:
        mb = micro_batch_of(r.profile)
        if mb is not None:
            out.setdefault(model_key(r.profile, _run_tp(r)), set()).add(mb)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _recompute_shares(runs):
    """The distinct shares of activation recompute in the runs' compute
    (:func:`scalemodel.efficiency.recompute_share`, rounded to 1e-6), sorted: what
    :func:`scalemodel.efficiency.recompute_factor` compares a job's with [-]."""
    from .efficiency import recompute_share

    return sorted({round(recompute_share(r.profile), 6) for r in runs})


def _run_tp(run):
    """A run's tensor-parallel degree (1 for a plain data-parallel run) [GPUs]."""
    mp = getattr(run, "model_parallel", None)
    return 1 if mp is None else int(mp.tp)


def _pressured_profiles(runs, base):
    """Models (:func:`scalemodel.efficiency.model_key`) whose every run was memory-pressured
    (one :class:`~scalemodel.CalibrationWarning` per distinct state, naming its runs);
    their fitted efficiency is carried to other runs of them with a wider interval
    (:func:`scalemodel.efficiency.carried_over`)."""
    from .efficiency import CALIBRATION_PRESSURE_NOTE, job_memory_pressure, model_key

    gpn = base.topology.gpus_per_node if base.topology is not None else None
    pressured, relieved, full = set(), set(), {}
    for r in runs:
        mp = getattr(r, "model_parallel", None)  # a GPU holds 1/(tp pp) of the model,
        try:
            p = job_memory_pressure(  # sharded over the data-parallel GPUs
                r.profile, r.n, r.sharding or "none",
                shard_group=getattr(r, "shard_group", None),
                tp=1 if mp is None else mp.tp, pp=1 if mp is None else mp.pp,
                gpus_per_node=gpn)
        except ScalemodelError:
            p = None  # a sharding it does not count
        if p is None:
            continue  # not a transformer configuration on a built-in GPU
        (pressured if p.pressured else relieved).add(model_key(r.profile, _run_tp(r)))
        if p.pressured:
            full.setdefault(p.text, []).append(r.label)
    for text, labels in full.items():  # one warning per state, not one per run
        more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
        warnings.warn(f"calibration run{'s' if len(labels) > 1 else ''} "
                      f"{', '.join(labels[:3])}{more}: {text}{CALIBRATION_PRESSURE_NOTE}",
                      CalibrationWarning, stacklevel=3)
    return sorted(pressured - relieved)


def _probe_profiles(runs, settings):
    """Questions far from the runs that tell explanations apart: (text, profile, n, bw,
    fusion, sharding, job) of the largest run's model with 5x its bytes, with 1 MB
    buckets, and on four times its workers (of 2 workers when every run is a single
    worker's); ``job`` the run's tensor and pipeline parallelism as keywords (empty for a
    plain data-parallel run)."""
    from .fusion import DDPBuckets
    big = max(runs, key=lambda r: (r.n, r.bw))
    n = big.n if big.n > 1 else 2  # wrapped single-worker runs only: probe 2 workers
    p = big.profile
    fusion = big.fusion or settings["fusion"]
    sharding = getattr(big, "sharding", None) or "none"
    mp = getattr(big, "model_parallel", None)
    job = {} if mp is None else dict(tp=mp.tp, pp=mp.pp, microbatches=mp.microbatches,
                                     virtual_stages=mp.virtual_stages,
                                     sequence_parallel=mp.sequence_parallel)
    on = "workers" if mp is None else (f"GPUs (tp={mp.tp}, pp={mp.pp}, "
                                       f"{mp.microbatches} micro-batches)")
    probes = []
    try:
        heavier = attrs.evolve(p, tensor_bytes=np.asarray(p.tensor_bytes) * 5.0,
                               tensor_shapes=None, name=f"{p.name} x5 bytes")
        # (without shapes: 5x the bytes contradict them, and every built-in profile has
        # them, so the probe was refused and never named)
        probes.append((f"a model with 5x the bytes of {p.name} on {n} {on}",
                       heavier, n, big.bw, fusion, sharding, job))
    except (TypeError, ValueError, ScalemodelError):
        pass
    if sharding == "none":
        probes.append((f"{p.name} with 1 MB buckets (bucket_cap_mb=1) on {n} {on}",
                       p, n, big.bw, DDPBuckets(cap_bytes=2.0**20), sharding, job))
    probes.append((f"{p.name} on {4 * n} {on}", p, 4 * n, big.bw, fusion,
                   sharding, job))
    return probes


WIDE = 0.10
"""Relative spread of the explanations' predicted iteration times above which the
message names the question they disagree on and the run that would tell them apart [-]."""


def _what_tells_them_apart(problem, cluster, runs, settings):
    """Lines for the message: where the alternatives' predictions differ by more than
    :data:`WIDE`, and which run would tell them apart."""
    alts = _alternatives_of(cluster, problem)
    if len(alts) < 2:
        return []
    from .model import iteration_time
    worst = None
    for text, prof, n, bw, fusion, sharding, job in _probe_profiles(runs, settings):
        # (host costs are not modelled under sharding: fit_cluster said so once)
        near = [c if sharding in (None, "none") or c.host is None
                else attrs.evolve(c, host=None) for c in alts]
        try:
            its = [iteration_time(prof, n, bw, fusion=fusion, sharding=sharding,
                                  algorithm=settings["algorithm"], cluster=c, **job)
                   for c in near]
        except ScalemodelError:
            continue
        # what a run measures is its time: with a fitted efficiency the explanations'
        # single-worker times differ too, and their scaling factors can differ where
        # their times agree (a run would then tell nothing)
        t = np.array([it.total for it in its])
        sf = np.array([it.scaling_factor for it in its])
        spread = float(t.max() / t.min() - 1)
        if worst is None or spread > worst[0]:
            worst = (spread, text, float(sf.min()), float(sf.max()))
    if worst is None or worst[0] <= WIDE:
        return []
    return [f"  the {len(alts)} explanations predict {worst[1]} between scaling factors "
            f"{worst[2]:.3g} and {worst[3]:.3g} (iteration times {100 * worst[0]:.0f} % "
            f"apart): a run of {worst[1]}{_like(worst[1], runs)} would tell them apart"]


def _like(text, runs) -> str:
    """For the '5x the bytes' probe, a built-in model of 3 to 12 times the bytes, nearest
    5x, that a user could run instead (``" (such as vgg16: 5.3x)"``), else ``""``."""
    if "with 5x the bytes of" not in text:
        return ""
    from .profiles import list_profiles, load_profile
    base = float(np.sum(max(runs, key=lambda r: (r.n, r.bw)).profile.tensor_bytes))
    best = None
    for name in list_profiles():
        try:
            ratio = float(np.sum(load_profile(name).tensor_bytes)) / base
        except ScalemodelError:
            continue
        if 3.0 <= ratio <= 12.0 and (best is None or abs(math.log(ratio / 5.0))
                                     < abs(math.log(best[1] / 5.0))):
            best = (name, ratio)
    return "" if best is None else f" (such as {best[0]}: {best[1]:.1f}x)"


def _alternatives_of(cluster, problem):
    """The clusters of every alternative explanation (the best first)."""
    if "alternatives" in problem._fields:
        return [cluster.with_alternative(i) for i in range(len(cluster.alternatives))]
    alts = cluster.provenance.get("alternatives") or []
    return [problem.cluster({k: (math.inf if v is None else v)
                             for k, v in a["values"].items()}) for a in alts]


def _message(best, params, residuals, alternatives, notes=()):
    """One paragraph for people: what was fitted, the largest miss, the values, the other
    explanations and the run that would tell them apart."""
    worst = max(residuals, key=lambda x: abs(x.error))
    free = best.free
    lines = [f"fitted {', '.join(free) if free else 'nothing'} to {len(residuals)} run(s); "
             f"largest miss {100 * worst.error:+.1f} % ({worst.label})"]
    for k in _ORDER:
        p = params[k]
        if p.status == "prior":
            lines.append(f"  {k:20s} {_fmt(p.value, p.unit)}  [{_fmt(p.interval[0], p.unit)}"
                         f", {_fmt(p.interval[1], p.unit)}]  from the network prior, not "
                         "seen by the runs")
            continue
        if p.status == "default" or not math.isfinite(p.value):
            continue  # held at the ideal value, or no ceiling
        value, where = p.value, ""
        if p.at_bound:
            where = "at its bound"
        elif p.status == "fitted" and not PRIORS[k].log and \
                abs(p.value - PRIORS[k].lower) <= 1e-3 * PRIORS[k].scale:
            value, where = PRIORS[k].lower, "at its bound"  # the ideal value: no effect
        lines.append(f"  {k:20s} {_fmt(value, p.unit)}{f' ({where})' if where else ''}  "
                     f"[{_fmt(p.interval[0], p.unit)}, {_fmt(p.interval[1], p.unit)}]  "
                     f"{p.status}")
    others = []
    for a in alternatives[1:]:  # (each once: not the best again, nor one listed)
        if not any(_same_explanation(a, b) for b in [alternatives[0], *others]):
            others.append(a)
    if others:
        lines.append("  the runs fit about as well with: " + "; ".join(
            ", ".join(f"{k}={_fmt(math.inf if v is None else v, PRIORS[k].unit)}"
                      for k, v in a["values"].items()) or "the ideal model"
            for a in others[:3]) + " (more runs would tell them apart)")
    lines.extend(notes)
    return "\n".join(lines)


_IDEAL_VALUE = {"overlap": 1.0}
"""A term's value of no effect where it is not its prior's lower bound [-]."""


def _same_explanation(a, best, rel=1e-2):
    """Whether alternative ``a`` is explanation ``best`` again: the same values (within
    ``rel``) once the terms fitted at (within 1 % of their prior's scale of) their value
    of no effect (a fixed cost at 0, full overlap) are left out on both sides (then the
    report would list it as another explanation)."""
    def effective(values):
        return {k: v for k, v in values.items()
                if v is None or PRIORS[k].log
                or abs(v - _IDEAL_VALUE.get(k, PRIORS[k].lower)) > 1e-2 * PRIORS[k].scale}

    mine, theirs = effective(best["values"]), effective(a["values"])
    if mine.keys() != theirs.keys():
        return False
    return all((u is None and v is None) or (u is not None and v is not None and
                                             abs(u - v) <= rel * max(abs(u), abs(v), 1e-300))
               for u, v in ((mine[k], theirs[k]) for k in mine))


def _base_value(base, k):
    if k == "ceiling":
        return math.inf if base.ceiling is None else base.ceiling
    if k == "host_overhead":
        return 0.0
    return getattr(base, k)


def _fmt(v, unit):
    if v is None:
        return "unbounded"
    if unit == "bits/s":
        if not math.isfinite(v):
            return "none"
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
