r"""Intervals on predictions from the calibration's confidence intervals.

The scaling factor is monotone in every calibrated quantity: it falls with the latency
:math:`\alpha` and rises with the utilization (hence the achieved bandwidth), with the
ceiling :math:`C`, and with a common scale :math:`c` on all compute times (only
communication does not scale with :math:`c`, so :math:`S = T_1/T_n` rises with it). The
property tests of the suite check the monotonicity in bandwidth and utilization;
``tests/test_uncertainty.py`` checks all four by sampling the box. Over the box of
intervals the extremes are therefore at two corners, exactly:

.. math::
   :label: interval-corners

   S_\text{lo} = S(\alpha_\text{hi}, u_\text{lo}, C_\text{lo}, c_\text{lo}), \qquad
   S_\text{hi} = S(\alpha_\text{lo}, u_\text{hi}, C_\text{hi}, c_\text{hi}),

and the minimum compression ratio, which falls as :math:`S` rises, takes its bounds at
the same corners the other way round. A utilization table moves row by row to the ends
of its per-row intervals (``intervals["table_utilization"]``, written by
:func:`~scalemodel.calibrate.fit.cluster_from_fits`), or, without them, in proportion to
the ``utilization`` interval. The terms a calibration fits on top of the transport go
the same way: the scaling factor falls with the compute slowdown :math:`\sigma` and the
fixed costs and rises with the overlap efficiency :math:`\eta`. The cluster's two
corners are :meth:`scalemodel.ClusterProfile.corners` (one rule for every caller); this
module adds the compute scale :math:`c`. Two extra evaluations, vectorized over ``n``
and ``bw`` like :func:`scalemodel.scaling_factor`.

The level of the result is that of each parameter's interval (the cluster's
``extra["confidence"]``); the box's joint coverage is at least that of its least certain
side and can be lower, so read the interval as the range the fitted uncertainties allow,
not as a joint confidence region.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..cluster import load_cluster
from ..exceptions import InvalidParameterError
from ..model import scaling_factor
from ..profiles import load_profile
from ..solvers import min_compression

__all__ = ["PredictionInterval", "scaling_factor_interval", "min_compression_interval",
           "corner_inputs"]

def _fmt(v):
    return "inf" if np.isinf(v) else f"{v:.3f}"


@attrs.frozen(eq=False)
class PredictionInterval:
    """A prediction and its interval.

    Parameters
    ----------
    value : float or numpy.ndarray
        The prediction at the fitted values [-].
    lo, hi : float or numpy.ndarray
        Its lower and upper bounds over the calibration's intervals [-].
    what : str
        What is predicted [-].
    confidence : float or None
        Level of the calibration's intervals, when known [-].
    """

    value: object
    lo: object
    hi: object
    what: str = "scaling factor"
    confidence: float | None = None

    def __str__(self):
        level = "" if self.confidence is None else f" ({self.confidence * 100:.0f} %)"
        if np.ndim(self.value) == 0:
            return (f"{self.what} {_fmt(float(self.value))} [{_fmt(float(self.lo))}, "
                    f"{_fmt(float(self.hi))}]{level}")
        v, lo, hi = (np.ravel(np.asarray(x, dtype=float)) for x in (self.value, self.lo,
                                                                   self.hi))
        cells = [f"{_fmt(a)} [{_fmt(b)}, {_fmt(c)}]" for a, b, c in zip(v, lo, hi)]
        if len(cells) > 8:
            cells = cells[:4] + ["..."] + cells[-2:]
        return f"{self.what}{level}: " + "; ".join(cells)


def _scaled(profile, c):
    """The profile with every compute time multiplied by ``c`` [-]."""
    if c == 1.0:
        return profile
    return attrs.evolve(profile, tensor_ready=profile.tensor_ready * c,
                        forward_time=profile.forward_time * c,
                        backward_time=profile.backward_time * c,
                        update_time=profile.update_time * c)


def _pair(iv, name, default):
    if iv is None:
        return default
    try:
        lo, hi = iv
    except (TypeError, ValueError):
        raise InvalidParameterError(f"cluster.intervals[{name!r}]", iv, "a pair (lo, hi)") \
            from None
    return lo, hi


def corner_inputs(model, cluster, compute_interval=None):
    """The (pessimistic, optimistic) pairs of (profile, cluster) of eq.
    :eq:`interval-corners`.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload [-].
    cluster : ClusterProfile or path
        A calibrated cluster with ``intervals`` for ``alpha`` / ``utilization`` /
        ``table_utilization`` / ``ceiling`` / ``compute_slowdown`` / ``overlap`` /
        ``collective_overhead`` / ``sync_overhead`` (missing ones count as exact); its
        corners are :meth:`~scalemodel.ClusterProfile.corners` [-].
    compute_interval : tuple of float, optional
        ``(lo, hi)`` relative scale of the compute times, e.g. the 10th and 90th
        percentile of measured iteration times over the median, with
        ``lo <= 1 <= hi``; by default the profile's ``provenance["spread"]``
        (``rel_lo``, ``rel_hi``, written by the compute step) when it has one, else
        exact [-].

    Returns
    -------
    tuple
        ``((profile_lo, cluster_lo), (profile_hi, cluster_hi))``: the inputs that give
        the lowest and the highest scaling factor.
    """
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if compute_interval is None:
        spread = profile.provenance.get("spread") or {}
        compute_interval = (spread.get("rel_lo", 1.0), spread.get("rel_hi", 1.0))
    try:
        c_lo, c_hi = (float(v) for v in compute_interval)
    except (TypeError, ValueError):
        raise InvalidParameterError("compute_interval", compute_interval,
                                    "a pair (lo, hi) of relative scales") from None
    if not (0 < c_lo <= 1 <= c_hi and np.isfinite(c_hi)):
        raise InvalidParameterError("compute_interval", compute_interval,
                                    "(lo, hi) with 0 < lo <= 1 <= hi")
    _check_intervals(cl)
    worst, best = cl.corners()  # the cluster side: one rule, ClusterProfile's
    return (_scaled(profile, c_lo), worst), (_scaled(profile, c_hi), best)


_CORNER_FIELDS = ("alpha", "utilization", "ceiling", "compute_slowdown", "overlap",
                  "collective_overhead", "sync_overhead")


def _check_intervals(cl):
    """Every interval that :meth:`~scalemodel.ClusterProfile.corners` reads is a pair of
    numbers (an end the runs do not constrain is None: corners() then uses the parameter's
    documented bound), and the table's interval holds one bound per row."""
    iv = cl.intervals
    for name in _CORNER_FIELDS:
        if iv.get(name) is None:
            continue
        lo, hi = _pair(iv[name], name, None)
        try:
            for end in (lo, hi):
                if end is not None:
                    float(end)
        except (TypeError, ValueError):
            raise InvalidParameterError(f"cluster.intervals[{name!r}]", iv[name],
                                        "a pair (lo, hi) of numbers") from None
    table = cl.table_utilization
    if table is not None and iv.get("table_utilization") is not None:
        t_lo, t_hi = (np.asarray(x, dtype=float) for x in
                      _pair(iv["table_utilization"], "table_utilization", None))
        if t_lo.shape != table.shape or t_hi.shape != table.shape:
            raise InvalidParameterError("cluster.intervals['table_utilization']",
                                        iv["table_utilization"],
                                        f"two lists of {table.size} bounds, one per row")


def _confidence(cluster):
    value = load_cluster(cluster).extra.get("confidence")
    return None if value is None else float(value)


def scaling_factor_interval(model, n, bw, *, cluster, compute_interval=None,
                            **kwargs) -> PredictionInterval:
    """The scaling factor and its interval over the calibration's intervals, eq.
    :eq:`interval-corners`, with the compute interval. On a fitted cluster with
    alternatives or a model discrepancy it also holds the interval every answer carries
    (:func:`scalemodel.intervals.scaling_factor_interval`, what
    ``iteration_time(...).scaling_factor_interval`` says), so the two never disagree.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload [-].
    n : int or array_like
        Workers [workers].
    bw : float, str or array_like
        Line rate [bits/s].
    cluster : ClusterProfile or path
        The calibrated cluster [-].
    compute_interval : tuple of float, optional
        Relative interval of the compute times (see :func:`corner_inputs`) [-].
    **kwargs
        Passed to :func:`scalemodel.scaling_factor` (``algorithm``, ``fusion``, ...).

    Returns
    -------
    PredictionInterval
        ``value``, ``lo``, ``hi`` [-], arrays where ``n`` or ``bw`` are.

    Examples
    --------
    >>> import scalemodel as sm
    >>> from scalemodel.calibrate.uncertainty import scaling_factor_interval
    >>> cl = sm.ClusterProfile(name="lab", alpha=20e-6, utilization=0.6,
    ...                        intervals={"alpha": (15e-6, 25e-6),
    ...                                   "utilization": (0.55, 0.65)},
    ...                        extra={"confidence": 0.95})
    >>> ci = scaling_factor_interval("resnet50", 64, "10Gbps", cluster=cl)
    >>> bool(ci.lo < ci.value < ci.hi)
    True
    """
    (pw, cw), (pb, cb) = corner_inputs(model, cluster, compute_interval)
    value = scaling_factor(model, n, bw, cluster=cluster, **kwargs)
    lo = scaling_factor(pw, n, bw, cluster=cw, **kwargs)
    hi = scaling_factor(pb, n, bw, cluster=cb, **kwargs)
    lo, hi = np.minimum(lo, value), np.maximum(hi, value)
    lo, hi = _with_the_answers_interval(model, n, bw, cluster, value, lo, hi, kwargs)
    if np.ndim(value) == 0:
        value, lo, hi = float(value), float(lo), float(hi)
    return PredictionInterval(value, lo, hi, confidence=_confidence(cluster))


def _with_the_answers_interval(model, n, bw, cluster, value, lo, hi, kwargs):
    """``(lo, hi)`` widened to the interval every answer on a fitted cluster carries
    (:func:`scalemodel.intervals.scaling_factor_interval`: its alternatives, prior
    intervals and model discrepancy as well), so that this interval and
    ``iteration_time(...).scaling_factor_interval`` never disagree: this one adds the
    compute interval to it. Nothing changes on a cluster without them."""
    from ..discrepancy import discrepancy_factor
    from ..intervals import scaling_factor_interval as answer

    cl = load_cluster(cluster)
    if not (cl.alternatives or discrepancy_factor(cl) > 1.0):
        return lo, hi
    from ..units import parse_bandwidth

    shape = np.broadcast(np.asarray(n), np.asarray(parse_bandwidth(bw))).shape
    ns = np.broadcast_to(np.asarray(n), shape).ravel()
    bws = np.broadcast_to(np.asarray(parse_bandwidth(bw), float), shape).ravel()
    vs = np.broadcast_to(np.asarray(value, float), shape).ravel()
    lo = np.array(np.broadcast_to(lo, shape), float).ravel()
    hi = np.array(np.broadcast_to(hi, shape), float).ravel()
    for i, (ni, bi, vi) in enumerate(zip(ns, bws, vs)):
        iv = answer(model, int(ni), float(bi), cluster=cl, value=float(vi), **kwargs)
        if iv.low is not None:
            lo[i] = min(lo[i], iv.low)
        if iv.high is not None:
            hi[i] = max(hi[i], iv.high)
    return lo.reshape(shape), hi.reshape(shape)


def min_compression_interval(model, bw, *, cluster, compute_interval=None,
                             **kwargs) -> PredictionInterval:
    """The minimum compression ratio and its interval (eq. :eq:`interval-corners`, the
    corners swapped: the ratio falls as the scaling factor rises).

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload [-].
    bw : float or str
        Line rate [bits/s].
    cluster : ClusterProfile or path
        The calibrated cluster [-].
    compute_interval : tuple of float, optional
        Relative interval of the compute times (see :func:`corner_inputs`) [-].
    **kwargs
        Passed to :func:`scalemodel.min_compression` (``n``, ``target``, ...).

    Returns
    -------
    PredictionInterval
        Ratios [-]; ``inf`` where no ratio reaches the target.
    """
    (pw, cw), (pb, cb) = corner_inputs(model, cluster, compute_interval)
    value = min_compression(model, bw, cluster=cluster, **kwargs).ratio
    hi = min_compression(pw, bw, cluster=cw, **kwargs).ratio
    lo = min_compression(pb, bw, cluster=cb, **kwargs).ratio
    lo, hi = np.minimum(lo, value), np.maximum(hi, value)
    if np.ndim(value) == 0:
        value, lo, hi = float(value), float(lo), float(hi)
    return PredictionInterval(value, lo, hi, what="minimum compression ratio",
                              confidence=_confidence(cluster))
