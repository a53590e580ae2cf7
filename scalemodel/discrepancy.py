r"""Model discrepancy: a fit that misses its own calibration runs, and the intervals it
widens.

A fit (:func:`~scalemodel.fit_cluster`) either reaches each calibration run (and each
compressed run, with the codec cost it fits) within its noise or warns (:class:`~scalemodel.exceptions.CalibrationWarning`) that its best
explanation, and every alternative within the runs' noise, misses a run by more than
three of that run's uncertainties. Such a run says that the model lacks something this
cluster does (a cost it has no term for), or that the run contradicts the others. The
fitted parameters' intervals and the alternatives do not cover it: they are ranges of
explanations that all reach the runs. A prediction on that cluster can be off by as much
as the fit is off on its own runs, so the fit records its largest such miss as a factor
on the iteration time,

.. math::
   :label: model-discrepancy

   F = \exp\Big(\max_{i\,\in\,\text{missed}} \big|\ln(\hat t_i / t_i)\big|\Big) \;\ge\; 1,

with :math:`\hat t_i` the best explanation's time of run :math:`i` and :math:`t_i` the
measured one (``cluster.extra["model_discrepancy"]``, a cluster file's
``model_discrepancy``), and every interval of an answer on the cluster widens by it,
both ways, since the sign of the next miss is unknown:

- an iteration time's :math:`[t_\text{lo}, t_\text{hi}]` becomes
  :math:`[t_\text{lo}/F,\; t_\text{hi} F]`, its low end not below the single worker's
  step :math:`t_1` for a job without sharding (each worker runs the whole step and waits
  for the others: :math:`\max(t_\text{lo}/F, \min(t_\text{lo}, t_1))`; with the run
  noise below, :math:`t_1/(1 + \nu)`: a measured run scatters below it too);
- a scaling factor's :math:`[s_\text{lo}, s_\text{hi}]` becomes
  :math:`[s_\text{lo}/F,\; s_\text{hi} F]`: the scaling factor is the single-worker time
  over the iteration time, so it moves inversely; without sharding its high end stops at
  1, :math:`\min(s_\text{hi} F, \max(s_\text{hi}, 1))` (a sharded job's may pass 1: its
  step on each GPU is smaller; with the run noise, at :math:`1 + \nu`);
- a minimum compression ratio or required line rate for a target scaling factor
  :math:`s^*` is solved again at :math:`s^* F` over the pessimistic corners (taken as
  unbounded when :math:`s^* F > 1`, which only a sharded job could reach) and at
  :math:`s^* / F` over the optimistic ones;
- a compression plan's rows take their scaling factors' intervals so widened, and a row
  is feasible when the low end reaches the target; speedups over no compression and
  break-even line rates do not change: compressed and uncompressed times move by the
  same factor (nor does the run noise below widen them: they compare two expected
  times, not two measured runs).

The point answers stay the fit's. A fit that reaches all its runs records no miss,
:math:`F = 1`. Nor is an answer for one data-parallel worker widened: it has no traffic
for the cluster's terms to act on, and no compression or line rate changes it.

A second widening is the noise of a measured run. The fit's intervals are ranges of the
*expected* iteration time; a run that a user then measures scatters about it by its own
run-to-run noise, as the calibration runs did (each run's ``uncertainty``, a relative
standard uncertainty, 2 % unless it says). So that an interval is one a measured run
falls in, a fit records the half-width of that noise at its confidence,

.. math::
   :label: run-noise

   \nu = z_{c}\,\operatorname{median}_i u_i, \qquad z_c = \Phi^{-1}\big(\tfrac{1 + c}{2}\big)

over its calibration runs :math:`i` (``cluster.extra["run_noise"]``, a cluster file's
``run_noise``; :math:`c` the fit's ``confidence``, 1.96 at 95 %), and the factor on every
interval above is :math:`F\,(1 + \nu)`, the model discrepancy's and the noise's
together. Where the answer has a point :math:`a` on its own scale (an iteration time, a
scaling factor, a plan row's scaling factor) the noise, independent of the fit's doubt,
adds in quadrature to the interval's half-widths in the logarithm, after the model
discrepancy's factor:

.. math::
   :label: run-noise-quadrature

   \ln\frac{a_\text{hi}'}{a} = \sqrt{\ln^2\frac{a_\text{hi}}{a} + \ln^2(1 + \nu)},
   \qquad
   \ln\frac{a}{a_\text{lo}'} = \sqrt{\ln^2\frac{a}{a_\text{lo}} + \ln^2(1 + \nu)},

so an interval the fit pins adds about :math:`\nu` and one its doubt already makes wide
adds little. A solver's ratio or line rate has no point on the scaling factor's scale:
its target moves by the whole factor (the noise added at the ends, the conservative sum).
A cluster without runs (a transport fit alone, or built by hand) records none.
"""

from __future__ import annotations

import math
import numbers
import statistics

from .exceptions import InvalidParameterError

__all__ = ["KEY", "NOISE_KEY", "MAX_FACTOR", "MAX_NOISE", "discrepancy_factor",
           "miss_factor", "discrepancy_record", "check_discrepancy", "check_run_noise",
           "noise_record", "run_noise", "discrepancy_text", "widen_time", "widen_scaling",
           "widened_targets"]

KEY = "model_discrepancy"
"""The key of the record in ``ClusterProfile.extra`` and in a cluster file [-]."""

MAX_FACTOR = 100.0
"""Largest factor a record holds: a fit that misses its own runs by more records this
(``"capped": true``) and its message says so; a file with a larger factor is refused
[-]."""

NOISE_KEY = "run_noise"
"""The key of the run-noise half-width :math:`\\nu` (eq. :eq:`run-noise`) in
``ClusterProfile.extra`` and in a cluster file [-]."""

MAX_NOISE = 10.0
"""Largest run-noise half-width a cluster holds: a run's uncertainty is at most 100 %
(``runs.MAX_UNCERTAINTY``) and the confidence's :math:`z` below 10 [-]."""

_FIELDS = ("factor", "run", "miss", "runs_missed", "capped")


def noise_record(uncertainties, confidence=0.95):
    """The run-noise half-width :math:`\\nu` of eq. :eq:`run-noise` [-], or None
    without runs.

    Parameters
    ----------
    uncertainties : sequence of float
        The calibration runs' relative standard uncertainties [-].
    confidence : float
        The fit's confidence, in (0, 1) [-].
    """
    from scipy.stats import norm

    u = [float(x) for x in uncertainties]
    if not u:
        return None
    z = float(norm.ppf(0.5 + float(confidence) / 2.0))
    return min(MAX_NOISE, z * statistics.median(u))


def check_run_noise(value, where=NOISE_KEY):
    """Refuse a run-noise half-width that is not a finite number in [0, MAX_NOISE] (a
    file's ``run_noise``), naming the field and the value [-]."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        ok = ok and math.isfinite(value) and 0.0 <= value <= MAX_NOISE
    except OverflowError:
        ok = False
    if not ok:
        raise InvalidParameterError(where, value, f"must be a number in [0, {MAX_NOISE:g}] "
                                    "(the half-width of a measured run's noise, relative: "
                                    "scalemodel.discrepancy)")
    return float(value)


def run_noise(cluster, n=None) -> float:
    """The run-noise half-width :math:`\\nu` of eq. :eq:`run-noise` of a cluster: 0 for
    no cluster, one without a fit, and for one data-parallel worker [-].

    Parameters
    ----------
    cluster : ClusterProfile or None
        The cluster [-].
    n : int, optional
        Data-parallel workers of the answer; at most 1 gives 0 [workers].
    """
    return 0.0 if cluster is None or (n is not None and n <= 1) else _noise(cluster)


def _noise(cluster):
    """The checked run-noise half-width of ``cluster``, 0 without one [-]."""
    extra = getattr(cluster, "extra", None)
    v = extra.get(NOISE_KEY) if isinstance(extra, dict) else None
    return 0.0 if v is None else check_run_noise(v, f"cluster.extra[{NOISE_KEY!r}]")


def discrepancy_record(labels, predicted, measured, missed):
    """The record of eq. :eq:`model-discrepancy` for the runs a fit misses, or None.

    Parameters
    ----------
    labels : sequence of str
        The runs' labels [-].
    predicted, measured : sequence of float
        The best explanation's and the measured iteration times of every run [s].
    missed : sequence of int
        Indices of the runs that no explanation reaches within three uncertainties [-].

    Returns
    -------
    dict or None
        ``{"factor": F, "run": label, "miss": relative miss, "runs_missed": count}``
        (the miss as fitted / measured - 1) [-]; None when no run is missed.
    """
    missed = [int(i) for i in missed]
    if not missed:
        return None
    logs = {i: abs(math.log(float(predicted[i]) / float(measured[i]))) for i in missed}
    worst = max(missed, key=logs.get)
    capped = logs[worst] > math.log(MAX_FACTOR)
    out = {"factor": MAX_FACTOR if capped else float(math.exp(logs[worst])),
           "run": str(labels[worst]),
           "miss": float(predicted[worst]) / float(measured[worst]) - 1.0,
           "runs_missed": len(missed)}
    if capped:
        out["capped"] = True
    return out


def _number(record, key, where):
    """``record[key]`` as a finite float, refused by name when it is not one."""
    v = record[key]
    try:
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an integer beyond a float (JSON holds 10**400)
        ok = False
    if not ok:
        raise InvalidParameterError(f"{where}.{key}", v, "must be a finite number")
    return float(v)


def check_discrepancy(record, where=KEY):
    """Refuse a record that is not one of :func:`discrepancy_record` (a file's
    ``model_discrepancy``), naming the field and the value [-]."""
    if not isinstance(record, dict):
        raise InvalidParameterError(where, record, 'must be an object {"factor": F >= 1, '
                                    '"run": label, "miss": relative miss}')
    unknown = sorted(str(k) for k in record if k not in _FIELDS)
    if unknown:
        raise InvalidParameterError(f"{where}.{unknown[0]}", record[unknown[0]] if unknown[0]
                                    in record else None, f"is not a field of the record "
                                    f"(its fields: {', '.join(_FIELDS)})")
    if "factor" not in record:
        raise InvalidParameterError(f"{where}.factor", None, "is missing")
    f = _number(record, "factor", where)
    if not 1.0 <= f <= MAX_FACTOR:
        raise InvalidParameterError(f"{where}.factor", f, f"must be in [1, {MAX_FACTOR:g}] "
                                    "(the fit's largest miss of its own runs as a factor "
                                    "on the time)")
    if "miss" in record:
        miss = _number(record, "miss", where)
        if not -1.0 < miss <= 1e6:
            raise InvalidParameterError(f"{where}.miss", miss, "must be in (-1, 1e6] "
                                        "(fitted / measured - 1)")
        said = abs(math.log1p(miss))  # the factor is the miss, or the cap below it
        if not (math.isclose(math.log(f), said, rel_tol=1e-6, abs_tol=1e-9)
                or f == MAX_FACTOR and said > math.log(f)):
            raise InvalidParameterError(f"{where}.factor", f, f"must be exp(|ln(1 + miss)|) "
                                        f"= {math.exp(min(said, 700.0)):.6g} for the miss of "
                                        f"{miss:g} it states (or {MAX_FACTOR:g}, capped)")
    if not isinstance(record.get("run", ""), str):
        raise InvalidParameterError(f"{where}.run", record.get("run"), "must be a string "
                                    "(the run's label)")
    k = record.get("runs_missed", 1)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise InvalidParameterError(f"{where}.runs_missed", k, "must be an integer >= 1")
    if not isinstance(record.get("capped", False), bool):
        raise InvalidParameterError(f"{where}.capped", record.get("capped"),
                                    "must be true or false")
    return record


def _record(cluster):
    """The checked record of ``cluster``, or None (checked again on every read: ``extra``
    is a dict a caller can change after the cluster was made)."""
    extra = getattr(cluster, "extra", None)
    rec = extra.get(KEY) if isinstance(extra, dict) else None
    return None if rec is None else check_discrepancy(rec, f"cluster.extra[{KEY!r}]")


def miss_factor(cluster, n=None) -> float:
    """The factor :math:`F` of eq. :eq:`model-discrepancy` of a cluster alone: 1 when its
    fit reached every run, for no cluster, and for one data-parallel worker.

    Parameters
    ----------
    cluster : ClusterProfile or None
        The cluster [-].
    n : int, optional
        Data-parallel workers of the answer; at most 1 gives 1 [workers].
    """
    rec = _record(cluster)
    if rec is None or (n is not None and n <= 1):
        return 1.0
    return float(rec["factor"])


def discrepancy_factor(cluster, n=None) -> float:
    """The factor every interval on a cluster widens by, both ways: the model
    discrepancy's :math:`F` (eq. :eq:`model-discrepancy`) times the run noise's
    :math:`1 + \\nu` (eq. :eq:`run-noise`); 1 for no cluster, a cluster without a fit,
    and for one data-parallel worker.

    Parameters
    ----------
    cluster : ClusterProfile or None
        The cluster [-].
    n : int, optional
        Data-parallel workers of the answer; at most 1 gives 1 [workers].
    """
    if cluster is None or (n is not None and n <= 1):
        return 1.0
    return miss_factor(cluster, n) * (1.0 + _noise(cluster))


def discrepancy_text(cluster, solver=False) -> str:
    """Why an answer's interval is widened, in words: the model discrepancy and the
    run noise; empty when it is not [-].

    Parameters
    ----------
    cluster : ClusterProfile or None
        The cluster [-].
    solver : bool
        Whether the answer is a solver's (its target moved by the noise) rather than one
        with a point (the noise in quadrature, eq. :eq:`run-noise-quadrature`) [-].
    """
    miss, nu = _miss_text(cluster), _noise(cluster)
    if nu <= 0.0:
        return miss
    noise = (f"widened {1 + nu:.3g} times both ways for the noise of a measured run"
             if solver else "with the noise of a measured run, in quadrature") + (
        f" (+-{100 * nu:.3g} %, the calibration runs' uncertainties: the cluster's "
        "run_noise)")
    return noise if not miss else f"{noise}; and {miss}"


def _miss_text(cluster) -> str:
    """The model-discrepancy part of :func:`discrepancy_text` [-]."""
    rec = _record(cluster)
    if rec is None or float(rec["factor"]) <= 1.0:
        return ""
    f, run = float(rec["factor"]), rec.get("run")
    miss = (f"by {100 * float(rec['miss']):+.1f} %" if "miss" in rec
            else f"by a factor {f:.3g}")
    return (f"widened {f:.3g} times both ways: the fit missed its own calibration "
            f"run{f' {run!r}' if run else ''} {miss}"
            + (f" (the factor capped at {MAX_FACTOR:g})" if rec.get("capped") else "")
            + ", beyond its noise and every explanation, so the model lacks something "
            "this cluster does (the cluster's model_discrepancy, scalemodel.discrepancy)")


def _in_quadrature(value, low, high, noise):
    """``(low, high)`` about ``value`` with the run noise :math:`\\nu` added in quadrature
    in the logarithm, eq. :eq:`run-noise-quadrature` (an end None stays None) [unit of
    the ends]."""
    if not math.isfinite(value):  # (no point to widen about: the ends stay)
        return low, high
    e = math.log1p(noise)
    lo = low if low is None or low <= 0.0 else value * math.exp(
        -math.hypot(math.log(value / low), e))
    hi = None if high is None else value * math.exp(math.hypot(math.log(high / value), e))
    return lo, hi


def widen_time(low, high, factor, floor=None, noise=0.0, value=None):
    """An iteration time's interval widened by ``factor`` [s]; an end None (unbounded)
    stays None. ``floor``: a time the job cannot beat, the single worker's step for a job
    whose workers each run the whole step (no sharding); the widening does not take the
    low end below it [s], but for the noise of a measured run, ``noise`` (:math:`\\nu`
    of eq. :eq:`run-noise`, part of ``factor``), which may: a measured run scatters below
    the single worker's expected step as it does above [-]. With the point ``value``
    [s] the noise adds in quadrature (eq. :eq:`run-noise-quadrature`), else at the ends."""
    if factor <= 1.0:
        return low, high
    if value is not None and noise > 0.0 and value > 0.0:
        lo, hi = widen_time(low, high, factor / (1.0 + noise), floor)
        return _in_quadrature(value, None if lo is None else min(lo, value),
                              None if hi is None else max(hi, value), noise)
    lo = None if low is None else low / factor
    if lo is not None and floor is not None:
        lo = max(lo, min(low, floor / (1.0 + noise)))
    return lo, None if high is None else high * factor


def widen_scaling(low, high, factor, bound=None, noise=0.0, value=None):
    """A scaling factor's interval widened by ``factor``: the low end divided by it, the
    high end multiplied, as the iteration time's ends move (:func:`widen_time`: the
    scaling factor is the single-worker time over it) [-]; an end None stays None.
    ``bound``: 1 for a job whose workers each run the whole step (no sharding: none of
    them is faster than one worker alone), the widening does not take the high end above
    it, but for the noise of a measured run, ``noise`` (part of ``factor``), which may;
    None under sharding, whose sharded optimizer step can beat one worker [-]. With the
    point ``value`` [-] the noise adds in quadrature (eq. :eq:`run-noise-quadrature`),
    else at the ends."""
    if factor <= 1.0:
        return low, high
    if value is not None and noise > 0.0 and value > 0.0:
        lo, hi = widen_scaling(low, high, factor / (1.0 + noise), bound)
        return _in_quadrature(value, None if lo is None else min(lo, value),
                              None if hi is None else max(hi, value), noise)
    hi = None if high is None else high * factor
    if hi is not None and bound is not None:
        hi = min(hi, max(high, bound * (1.0 + noise)))
    return None if low is None else low / factor, hi


def widened_targets(target, factor):
    """``(optimistic, pessimistic)`` target scaling factors at which a solver's answer is
    solved again: ``target / factor`` and ``target * factor``, the latter None when above
    1 (no configuration reaches it: the answer's pessimistic end is unbounded) [-]."""
    hi = target * factor
    return target / factor, (None if hi > 1.0 else hi)
