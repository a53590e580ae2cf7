r"""Prediction intervals over a fitted cluster: its parameters' intervals and its
alternative explanations.

A fit (:func:`~scalemodel.fit_cluster`) leaves two kinds of doubt. Each fitted parameter
has an interval, and the answers are monotone in each, so over the box of intervals an
answer's extremes sit at the cluster's two corners
(:meth:`~scalemodel.ClusterProfile.corners`). And several explanations may fit the runs
within their noise (:attr:`~scalemodel.ClusterProfile.alternatives`: a bandwidth ceiling
or a per-collective cost, say), which predict alike on the runs but differently on other
models, worker counts or bucket sizes. The interval of an answer :math:`a` is therefore

.. math::
   :label: answer-interval

   \big[\min_{i,\,c} a(\text{corner}_c(\text{alternative}_i)),\;
        \max_{i,\,c} a(\text{corner}_c(\text{alternative}_i))\big],

over every alternative :math:`i` (the best is the cluster itself) and both corners
:math:`c`, together with the point answer. An end that is infinite (no ratio or line rate
reaches the target at the pessimistic end) is ``None``: unbounded, printed as such.
:func:`answer_interval` computes it for any answer; the solvers and
:func:`~scalemodel.iteration_time` report it (``.interval``, ``.scaling_factor_interval``),
and say when the width comes from explanations the runs cannot tell apart, and which run
would. A third doubt: an achieved bandwidth the runs did not see at all takes its
network prior's range as its interval (status ``"prior"``,
:data:`~scalemodel.fitting.UNSEEN`, listed in ``cluster.provenance["prior_intervals"]``);
the corners span it and :meth:`AnswerInterval.describe` says so. A fourth: a fit that
misses its own calibration runs beyond their noise records the miss, and every interval
widens by it (:func:`discrepant`, :func:`discrepant_solution`; eq.
:eq:`model-discrepancy` of :mod:`scalemodel.discrepancy`).
"""

from __future__ import annotations

import math

import attrs

from .discrepancy import (discrepancy_factor, discrepancy_text, run_noise, widen_scaling,
                          widen_time, widened_targets)
from .efficiency import MEMORY_PRESSURE_SLOWDOWN
from .units import _format_one, format_bandwidth

__all__ = ["AnswerInterval", "answer_interval", "scaling_factor_interval",
           "iteration_time_interval", "corner_clusters", "discrepant",
           "discrepant_solution", "ALTERNATIVE_WIDENING"]

ALTERNATIVE_WIDENING = 0.01
"""An interval counts as widened by the alternatives when an alternative's answers reach
more than this fraction of the point answer beyond the best explanation's own interval
[-]."""


@attrs.frozen
class AnswerInterval:
    """The range of one answer over a cluster's intervals and alternatives.

    Attributes
    ----------
    value : float
        The answer on the cluster itself (the best explanation) [unit of the answer].
    low, high : float or None
        Ends of the interval; ``None`` where the answer is unbounded (infinite at a
        corner) [unit of the answer].
    from_alternatives : bool
        Whether the alternatives widen the interval beyond the best explanation's own
        (by more than :data:`ALTERNATIVE_WIDENING` of the value): the calibration runs
        cannot tell the explanations apart.
    per_alternative : tuple
        ``(alternative dict, point answer, low, high)`` for each alternative, best first
        (empty without alternatives); the point answers of the others are evaluated only
        when the alternatives widen the interval (None otherwise).
    discriminating_run : str
        A run that would tell the widest-apart explanations apart; empty when the
        alternatives do not widen the interval.
    unseen : tuple of str
        Parameters whose interval on the cluster is its network prior's range, not seen
        by the calibration runs (``cluster.provenance["prior_intervals"]``,
        :data:`~scalemodel.fitting.UNSEEN`); the interval spans them [-].
    memory_pressure : str
        Why the slow end is :data:`~scalemodel.efficiency.MEMORY_PRESSURE_SLOWDOWN` times
        the fit's, when the job is memory-pressured; empty otherwise [-].
    discrepancy : str
        Why both ends are widened by the fit's miss of its own calibration runs
        (:mod:`scalemodel.discrepancy`); empty when they are not [-].
    """

    value: float
    low: float | None
    high: float | None
    from_alternatives: bool = False
    per_alternative: tuple = ()
    discriminating_run: str = ""
    unseen: tuple = ()
    memory_pressure: str = ""
    discrepancy: str = ""

    @property
    def pair(self):
        """``(low, high)`` [unit of the answer]."""
        return self.low, self.high

    def describe(self, fmt, unbounded_high="") -> str:
        """The interval in words: ``"over the fit's intervals 2.1x to 3.4x"``, an
        unbounded end as ``"unbounded"`` (with ``unbounded_high`` saying why), and when
        the alternatives widen it, which explanations and which run would tell them apart.

        Parameters
        ----------
        fmt : callable
            Formats one finite answer [-].
        unbounded_high : str
            Why the upper end is unbounded, e.g. "no ratio reaches the target" (the text
            adds where) [-].
        """
        lo = "unbounded" if self.low is None else fmt(self.low)
        hi = "unbounded" if self.high is None else fmt(self.high)
        if self.low is None and self.high is None:
            text = "over the fit's intervals unbounded at both ends"
            if unbounded_high:
                text += f" ({unbounded_high} at either end)"
        else:
            text = f"over the fit's intervals {lo} to {hi}"
            if self.high is None and unbounded_high:
                text += f" ({unbounded_high} at the pessimistic end)"
        if self.from_alternatives:
            parts = []
            for alt, point, a, b in self.per_alternative:
                say = [("unbounded" if v is None else fmt(v)) for v in (point, a, b)]
                parts.append(f"{_explanation(alt)} (answers {say[0]}"
                             + ("" if say[1] == say[2] == say[0] else
                                f", {say[1]} to {say[2]}") + ")")
            text += ("; wide because the calibration runs cannot tell apart "
                     + "; ".join(parts[:-1]) + " and " + parts[-1])
            if self.discriminating_run:
                text += f"; to tell them apart, measure {self.discriminating_run}"
        if self.memory_pressure:
            text += (f"; its slow end taken {MEMORY_PRESSURE_SLOWDOWN:g} times for memory pressure "
                     "(efficiency.MEMORY_PRESSURE_SLOWDOWN)")
        if self.discrepancy:
            text += "; " + self.discrepancy
        if self.unseen and self.low != self.high:
            rate = [k for k in self.unseen if k != "alpha"]
            runs = ([] if not rate else ["a run where the network decides the time, at a "
                                         "lower line rate"]) + (
                [] if "alpha" not in self.unseen else
                ["one at more workers or with smaller buckets, where NCCL's per-hop latency "
                 "shows"])
            text += (f"; it spans the network prior's range of {', '.join(self.unseen)}, "
                     f"which the calibration runs did not see ({' or '.join(runs)} would "
                     "narrow it)")
        return text


def _end(v):
    return None if v is None or math.isinf(v) else float(v)


def answer_interval(fn, cluster, value=None, *, swap_efficiency=False) -> AnswerInterval:
    """The interval of an answer over every alternative's corners, eq.
    :eq:`answer-interval`.

    Parameters
    ----------
    fn : callable
        ``fn(cluster) -> float``: the answer on a given cluster [unit of the answer].
    cluster : ClusterProfile or None
        The fitted cluster; without intervals and alternatives (or None) the interval is
        the point [-].
    value : float, optional
        The answer on ``cluster`` when already known (saves one evaluation) [unit of the
        answer].
    swap_efficiency : bool
        Also evaluate each pair of corners with their fitted efficiencies swapped: for an
        answer that the efficiency moves against the network terms (a time: slow network
        and slow compute are the longest step, where the scaling factor's pessimistic
        corner pairs a slow network with fast compute) [-].

    Returns
    -------
    AnswerInterval
        The point answer, the ends (None where unbounded), and whether the alternatives
        widen it.

    Examples
    --------
    >>> import scalemodel
    >>> from scalemodel.intervals import answer_interval
    >>> cl = scalemodel.ClusterProfile(intervals={"alpha": (0.0, 1e-4)},
    ...                                provenance={"source": "example"})
    >>> iv = answer_interval(lambda c: c.alpha * 1e3, cl)
    >>> iv.low, iv.high
    (0.0, 0.1)
    """
    if value is None:
        value = fn(cluster)
    value = float(value)
    if cluster is None or not (cluster.intervals or cluster.alternatives
                               or "efficiency" in cluster.extra):
        return AnswerInterval(value, _end(value), _end(value))
    alts = cluster.alternatives
    rows, clusters = [], []
    for i, c, ends_at in corner_clusters(cluster, swap_efficiency=swap_efficiency):
        # the answer is monotone in every parameter: its extremes are at the corners
        ends = ([value] if i == 0 else []) + [float(fn(e)) for e in ends_at
                                              if not (i == 0 and e is c)]
        rows.append([alts[i] if alts else None, value if i == 0 else None, min(ends),
                     max(ends)])
        clusters.append(c)
    low = min(r[2] for r in rows)
    high = max(r[3] for r in rows)
    own_lo, own_hi = rows[0][2], rows[0][3]
    tol = ALTERNATIVE_WIDENING * abs(value) if math.isfinite(value) else 0.0
    wide = len(rows) > 1 and (low < own_lo - tol or high > own_hi + tol
                              or (math.isinf(high) and not math.isinf(own_hi)))
    if not wide and len(rows) > 1 and math.isinf(own_hi) and math.isfinite(value):
        # the best explanation's own end is unbounded already: the others widen nothing,
        # but one whose own answer is unbounded (no line rate, no ratio at all) where the
        # best's is finite is the runs failing to tell them apart, and is said
        _points(rows, clusters, fn)
        wide = any(math.isinf(r[1]) for r in rows[1:])
    run = ""
    if wide:  # the message names each explanation's own answer: evaluate them now
        _points(rows, clusters, fn)
        far = max(rows[1:], key=lambda r: abs(_gap(r[1], value)))
        run = _kept_discriminating_run(rows[0][0], far[0], cluster)
    per = tuple((alt, None if p is None else _end(p), _end(a), _end(b))
                for alt, p, a, b in rows) if alts else ()
    prov = cluster.provenance if isinstance(cluster.provenance, dict) else {}
    unseen = tuple(str(k) for k in prov.get("prior_intervals") or ()
                   if k in cluster.intervals)
    return AnswerInterval(value, _end(low), _end(high), wide, per, run, unseen)


def discrepant(iv, cluster, kind, n=None, bound=None) -> AnswerInterval:
    """``iv`` widened by the model discrepancy of ``cluster`` (eq.
    :eq:`model-discrepancy`), unchanged when its fit reached every run.

    Parameters
    ----------
    iv : AnswerInterval
        An iteration time's [s] or a scaling factor's [-] interval.
    cluster : ClusterProfile or None
        The cluster it was computed on [-].
    kind : {"time", "scaling"}
        What ``iv`` is: a time widens to ``[low / F, high F]``, a scaling factor to
        ``[low / F, high F]`` [-].
    n : int, optional
        Data-parallel workers of the answer: one is not widened [workers].
    bound : float, optional
        What the job cannot pass (:func:`~scalemodel.discrepancy.widen_scaling`,
        :func:`~scalemodel.discrepancy.widen_time`): for a job without sharding a scaling
        factor of 1 and its single worker's step; None: no bound [-] or [s].

    Returns
    -------
    AnswerInterval
        In the unit of ``iv``.
    """
    f = discrepancy_factor(cluster, n)
    if f <= 1.0:
        return iv
    low, high = (widen_time if kind == "time" else widen_scaling)(
        iv.low, iv.high, f, bound, run_noise(cluster, n), iv.value)
    return attrs.evolve(iv, low=low, high=high, discrepancy=discrepancy_text(cluster))


def discrepant_solution(iv, cluster, solve_at, target, n=None) -> AnswerInterval:
    """A solver's interval ``iv`` (an answer that grows with the target scaling factor: a
    compression ratio or a line rate) widened by the model discrepancy of ``cluster``:
    solved again over every corner at the target times the factor (the pessimistic end,
    unbounded above a scaling factor of 1) and divided by it (the optimistic end), eq.
    :eq:`model-discrepancy`.

    Parameters
    ----------
    iv : AnswerInterval
        The answer's interval at ``target`` [unit of the answer].
    cluster : ClusterProfile
        The fitted cluster [-].
    solve_at : callable
        ``solve_at(t)`` gives ``fn(cluster) -> answer`` at target scaling factor ``t``
        [-].
    target : float
        The target scaling factor [-].
    n : int, optional
        Data-parallel workers of the answer: one is not widened [workers].

    Returns
    -------
    AnswerInterval
        In the unit of ``iv``.
    """
    f = discrepancy_factor(cluster, n)
    if f <= 1.0:
        return iv
    optimistic, pessimistic = widened_targets(target, f)
    lows = [v for v in (iv.low, answer_interval(solve_at(optimistic), cluster).low)
            if v is not None]
    high = None
    if iv.high is not None and pessimistic is not None:
        far = answer_interval(solve_at(pessimistic), cluster).high
        high = None if far is None else max(iv.high, far)
    return attrs.evolve(iv, low=min(lows) if lows else None, high=high,
                        discrepancy=discrepancy_text(cluster, solver=True))


def corner_clusters(cluster, *, swap_efficiency=False):
    """Where an answer's interval over ``cluster`` is evaluated, eq.
    :eq:`answer-interval`: for each alternative ``i`` (0 the cluster itself), that
    explanation's cluster and the clusters at which its answers are extreme.

    Parameters
    ----------
    cluster : ClusterProfile
        A fitted cluster [-].
    swap_efficiency : bool
        Add the two corners with their fitted efficiencies swapped (as
        :func:`answer_interval`) [-].

    Returns
    -------
    list of tuple
        ``(i, explanation, clusters)``: the explanation's two corners (and the swapped
        pair), or the explanation itself when it has no intervals [-].
    """
    key = ("corner clusters", bool(swap_efficiency))  # made once per cluster object, as
    derived = getattr(cluster, "_derived", None)  # its corners and alternatives are
    made = None if derived is None else derived.get(key)
    if made is None:
        made = []
        for i in range(max(1, len(cluster.alternatives))):
            c = cluster if i == 0 else cluster.with_alternative(i)
            worst, best = c.corners()
            ends = [c] if worst is c and best is c else [worst, best]
            if swap_efficiency and "efficiency" in worst.extra and "efficiency" in best.extra:
                ends += _swapped(c, worst, best)
            made.append((i, c, tuple(ends)))
        made = tuple(made)
        if derived is not None:
            derived[key] = made
    return [(i, c, list(ends)) for i, c, ends in made]


def _swapped(c, worst, best):
    """The corners ``worst`` and ``best`` of ``c`` with their fitted efficiencies
    swapped, made once per cluster object (as its corners are,
    :meth:`~scalemodel.ClusterProfile.corners`) [-]."""
    made = c._derived.get("swapped corners")
    if made is None or made[0] is not worst or made[1] is not best:
        made = c._derived["swapped corners"] = (
            worst, best, [attrs.evolve(worst, extra=best.extra),
                          attrs.evolve(best, extra=worst.extra)])
    return list(made[2])


def _points(rows, clusters, fn):
    """Each alternative's own answer into its row (index 1), once [unit of the answer]."""
    for row, c in zip(rows[1:], clusters[1:]):
        if row[1] is None:
            row[1] = float(fn(c)) if row[2] != row[3] else row[2]


def _gap(a, b):
    if math.isinf(a) or math.isinf(b):
        return math.inf if a != b else 0.0
    return a - b


def scaling_factor_interval(model, n, bw, *, cluster, utilization=1.0, compression=1.0,
                            value=None, **kwargs) -> AnswerInterval:
    """The scaling factor of one configuration and its interval over the cluster's
    intervals and alternatives, eq. :eq:`answer-interval`, widened by the fit's model
    discrepancy when it has one (:func:`discrepant`).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        The workload [-].
    n : int
        Workers [workers].
    bw : float or str
        Line rate [bits/s].
    cluster : ClusterProfile, str or os.PathLike
        The fitted cluster [-].
    utilization : float
        Fraction of the line rate achieved [-].
    compression : float
        Compression ratio [-].
    value : float, optional
        The scaling factor on ``cluster`` when already known [-].
    **kwargs
        The other arguments of :func:`~scalemodel.scaling_factor` [-].

    Returns
    -------
    AnswerInterval
        Scaling factors [-].
    """
    from .cluster import load_cluster
    from .model import scaling_factor

    cl = load_cluster(cluster)

    def fn(c):
        return scaling_factor(model, n, bw, utilization=utilization,
                              compression=compression, cluster=c, **kwargs)

    bound = 1.0 if _scenario(model, cl, kwargs).sharding is None else None
    return _pressured(discrepant(answer_interval(fn, cl, value), cl, "scaling",
                                 _dp(n, kwargs), bound), model, n, cl, kwargs, slow="low")


def iteration_time_interval(model, n, bw, *, cluster, utilization=1.0, compression=1.0,
                            value=None, **kwargs) -> AnswerInterval:
    """The iteration time of one configuration and its interval over the cluster's
    intervals, its alternatives and its fitted efficiency (eq. :eq:`answer-interval`,
    the corners also taken with their efficiencies swapped: a slow network with slow
    compute is the longest step), widened by the fit's model discrepancy when it has one
    (:func:`discrepant`).

    Parameters
    ----------
    model, n, bw, cluster, utilization, compression
        As in :func:`scaling_factor_interval`: ``n`` [workers], ``bw`` [bits/s], the
        others [-].
    value : float, optional
        The iteration time on ``cluster`` when already known [s].
    **kwargs
        The other arguments of :func:`~scalemodel.iteration_time` [-].

    Returns
    -------
    AnswerInterval
        Iteration times [s].
    """
    from .cluster import load_cluster
    from .model import _iteration_total

    from .model import scaling_factor

    cl = load_cluster(cluster)

    def fn(c):
        return _iteration_total(model, n, bw, utilization=utilization,
                                compression=compression, cluster=c, **kwargs)

    iv = answer_interval(fn, cl, value, swap_efficiency=True)
    floor = None  # the single worker's step, which a job without sharding cannot beat
    if discrepancy_factor(cl, _dp(n, kwargs)) > 1.0 and \
            _scenario(model, cl, kwargs).sharding is None:
        floor = iv.value * float(scaling_factor(model, n, bw, utilization=utilization,
                                                compression=compression, cluster=cl,
                                                **kwargs))
    return _pressured(discrepant(iv, cl, "time", _dp(n, kwargs), floor), model, n, cl,
                      kwargs, slow="high")


def _scenario(model, cluster, kwargs):
    """The scenario of a question's ``kwargs`` on ``cluster`` (cached by
    :meth:`~scalemodel.model.Scenario.build`) [-]."""
    from .model import Scenario

    return Scenario.build(model, cluster=cluster, warn=False, **{
        k: v for k, v in kwargs.items() if k not in ("utilization", "compression")})


def _dp(n, kwargs):
    """The data-parallel workers of ``n`` GPUs under the ``tp`` and ``pp`` of ``kwargs``
    [workers]."""
    return int(n) // (int(kwargs.get("tp") or 1) * int(kwargs.get("pp") or 1))


def _pressured(iv, model, n, cluster, kwargs, *, slow):
    """``iv`` with its slow end (``"low"`` for a scaling factor, ``"high"`` for a time)
    taken :data:`~scalemodel.efficiency.MEMORY_PRESSURE_SLOWDOWN` times when the job is
    memory-pressured (``scalemodel.model._job_pressure``, which warns), as
    :func:`~scalemodel.iteration_time` takes its intervals' [-]."""
    from .model import _job_pressure

    f = MEMORY_PRESSURE_SLOWDOWN
    p = _job_pressure(_scenario(model, cluster, kwargs), n)
    if p is None:
        return iv
    if slow == "low":
        low = None if iv.low is None else min(iv.low, iv.value) / f
        return attrs.evolve(iv, low=low, memory_pressure=p.text)
    high = None if iv.high is None else max(iv.high, iv.value) * f
    return attrs.evolve(iv, high=high, memory_pressure=p.text)


# ------------------------------------------------------------------ which run tells them apart

_BYTES = ("ceiling", "utilization", "host_overhead", "table_utilization")
_PER_BUCKET = ("collective_overhead", "bucket_overhead")
_PER_ITERATION = ("sync_overhead", "iteration_overhead")
_COMPUTE = ("compute_slowdown", "overlap")
_GROWS_WITH_N = ("alpha", "straggler_spread")

_UNITS = {"ceiling": "bits/s", "alpha": "s", "collective_overhead": "s",
          "sync_overhead": "s", "bucket_overhead": "s", "iteration_overhead": "s",
          "intra_alpha": "s", "intra_bw": "bits/s", "host_overhead": "s/byte"}


def _fmt_value(name, v):
    unit = _UNITS.get(name, "-")
    if v is None:
        return "none" if name == "ceiling" else "unbounded"
    if unit == "bits/s":
        return _bw_text(v)
    if unit == "s":
        return f"{v * 1e3:.3g} ms"
    if unit == "s/byte":
        return f"{v * 1e9:.3g} ns/byte"
    return f"{v:.4g}"


def _bw_text(v) -> str:
    """:func:`~scalemodel.format_bandwidth` of ``v`` [bits/s]; a Python float formatted
    directly (what format_bandwidth does with it after its checks)."""
    return _format_one(v) if type(v) is float else format_bandwidth(v)


def _explanation(alt) -> str:
    if alt is None:
        return "the fit"
    vals = alt.get("values") or {}
    if not vals:
        return "the ideal model"
    hit = _EXPLAINED.get(id(alt))  # made once per alternative (a cluster's, asked again)
    if hit is not None and hit[0] is alt:
        try:
            same = hit[1] == vals
        except (TypeError, ValueError):  # (values that do not compare: made again)
            same = False
        if same is True:
            return hit[2]
    text = ", ".join(f"{k}={_fmt_value(k, v)}" for k, v in vals.items())
    if len(_EXPLAINED) >= 256:
        _EXPLAINED.clear()
    _EXPLAINED[id(alt)] = (alt, dict(vals), text)
    return text


_EXPLAINED: dict = {}
""":func:`_explanation`'s text per alternative (the dict, by identity, with a copy of its
values that a later call compares: a changed value is formatted again) [-]."""


def _kinds(alt):
    names = set((alt or {}).get("free") or ()) | set((alt or {}).get("values") or ())
    return {kind for kind, group in (("bytes", _BYTES), ("bucket", _PER_BUCKET),
                                     ("iteration", _PER_ITERATION), ("compute", _COMPUTE),
                                     ("n", _GROWS_WITH_N)) if names & set(group)}


_BYTES_TEXT: dict = {}
""":func:`_with_bytes`'s text per model name: a name that is no loadable profile (a
calibration run's own label) is looked up once, not at every question; forgotten by
``clear_caches(profiles=True)``."""


def _with_bytes(model):
    """``"resnet50 (97.5 MB of gradients)"`` when the profile loads, else the name."""
    text = _BYTES_TEXT.get(model) if isinstance(model, str) else None
    if text is not None:
        return text
    from .exceptions import ScalemodelError
    from .profiles import load_profile

    try:
        text = f"{model} ({load_profile(model).total_bytes / 1e6:.3g} MB of gradients)"
    except (ScalemodelError, OSError, ValueError, TypeError):
        text = model
    if isinstance(model, str):
        if len(_BYTES_TEXT) >= 256:
            _BYTES_TEXT.clear()
        _BYTES_TEXT[model] = text
    return text


def _kept_discriminating_run(best, other, cluster) -> str:
    """:func:`discriminating_run`, made once per cluster object and pair of its
    explanations (compared by identity; kept in the cluster's ``_derived``, as its
    corners are: what it reads of them does not change) [-]."""
    derived = getattr(cluster, "_derived", None)
    if derived is None:
        return discriminating_run(best, other, cluster)
    kept = derived.setdefault(("discriminating runs",), {})
    hit = kept.get((id(best), id(other)))
    if hit is not None and hit[0] is best and hit[1] is other:
        return hit[2]
    run = discriminating_run(best, other, cluster)
    if len(kept) >= 64:
        kept.clear()
    kept[(id(best), id(other))] = (best, other, run)
    return run


def discriminating_run(best, other, cluster) -> str:
    """A run that would tell two explanations apart, in words, from the kinds of their
    parameters (bandwidth-like ones grow with the bytes, per-bucket ones with the bucket
    count, per-iteration ones with neither, latency and stragglers with n) and the runs
    the cluster was fitted to (``provenance["runs"]``).

    Parameters
    ----------
    best, other : dict or None
        Two entries of :attr:`~scalemodel.ClusterProfile.alternatives` [-].
    cluster : ClusterProfile
        The fitted cluster [-].
    """
    a, b = _kinds(best), _kinds(other)
    differ = a ^ b if a ^ b else a | b
    runs = [r for r in (cluster.provenance.get("runs") or ()) if isinstance(r, dict)]
    models = sorted({str(r["model"]) for r in runs if r.get("model")})
    counts = [r["n"] for r in runs if isinstance(r.get("n"), int)]
    rates = sorted({float(r["bw"]) for r in runs if isinstance(r.get("bw"), (int, float))})
    def of():  # the models' gradient bytes: loaded only when a run names them
        return (f" than {', '.join(_with_bytes(m) for m in models)}" if models
                else " than the calibration runs'")

    ideas = []
    if "bytes" in differ and differ & {"bucket", "iteration", "n", "compute"}:
        ideas.append(f"a run of a model with several times more gradient bytes{of()}")
    if "bucket" in differ:
        settings = cluster.fit_settings if isinstance(cluster.fit_settings, dict) else {}
        if str(settings.get("sharding") or "none") in ("zero3", "hybrid_shard"):
            # under ZeRO-3 / FSDP the per-bucket cost is per unit and micro-batch: a
            # micro-batch of another size moves the compute, not that cost
            ideas.append("a run with another micro-batch size (more or fewer sequences "
                         "per micro-batch)")
        else:
            ideas.append("a run with 1 MB buckets (bucket_cap_mb=1)")
    if "iteration" in differ and "bucket" not in differ and "bytes" not in differ:
        ideas.append(f"a run of a model with several times more gradient bytes{of()}")
    if "n" in differ:
        top = max(counts) if counts else None
        ideas.append("a run on several times more workers"
                     + (f" than {top}" if top else ""))
    if "compute" in differ:
        ideas.append("a run whose compute time is measured (compute_time, e.g. from a "
                     "trace)")
    if not ideas and differ == {"bytes"}:
        ideas.append("a run at another line rate"
                     + (f" than {', '.join(_bw_text(r) for r in rates)}"
                        if rates else ""))
    if not ideas:
        ideas.append("a run that differs from the calibration runs in model, worker count "
                     "or bucket size")
    return ", or ".join(dict.fromkeys(ideas))
