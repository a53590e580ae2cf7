r"""Host effects fitted from one measured DDP run: overlap efficiency and per-byte overhead.

On a GPU cluster the element-wise sums of an all-reduce run on the GPU and cost what
the reduction table says. On CPUs (and on hosts whose cores also drive the network) the
communication takes CPU time that compute would otherwise use: DDP copies gradients into
and out of its buckets, gloo sums them, and the kernel's TCP stack moves every byte. On
the 2-core machine where the emulated cluster runs, compute and communication threads
share the cores. Rather than hide that, the calibration measures it: the per-byte host
cost :math:`\gamma_h` [s/byte] is the one value that makes the model's iteration time
equal the measured DDP iteration time at the calibration setting,

.. math::
   :label: host-overhead

   T_n(\gamma_h) = \tilde T_n ,

solved by bisection (the iteration time grows monotonically with :math:`\gamma_h`). It
enters the model as a linear reduction cost of the cluster (the ``overhead`` of every
collective), and predictions at other line rates and for other models reuse it.

Both fits keep every other term of the cluster they are given, in particular its
compute slowdown :math:`\sigma` (eq. :eq:`iteration-cluster`): they explain what is left
once the measured slowdown is in the model. :func:`fit_host_effects` does the three in
order, as the calibration's scaling step does: :math:`\sigma` measured from the DDP
run's backward spans (:func:`scalemodel.calibrate.scaling.estimate_slowdown`), then the
overlap efficiency :math:`\eta` on top of it, then, only where even :math:`\eta = 0`
predicts a faster run than measured, the per-byte host cost :math:`\gamma_h`.
:func:`transport_only` strips these terms again, for the check of the transport fit
alone.
"""

from __future__ import annotations

import math

import attrs

from ..collectives import ReductionCost
from ..exceptions import InvalidParameterError
from ..model import iteration_time
from ..profiles import load_profile
from ..cluster import load_cluster

__all__ = ["HostOverheadFit", "fit_host_overhead", "OverlapFit", "fit_overlap",
           "HostEffectsFit", "fit_host_effects", "fit_with_transport", "transport_only"]


@attrs.frozen
class HostOverheadFit:
    """Result of :func:`fit_host_overhead`.

    Parameters
    ----------
    gamma : float
        Host cost per byte handed to a collective's reduction [s/byte].
    measured : float
        The measured iteration time it reproduces [s].
    predicted_without : float
        The model's iteration time with no host overhead [s].
    clipped : bool
        True when the model without overhead was already slower than measured, so
        ``gamma`` is 0 [-].
    """

    gamma: float
    measured: float
    predicted_without: float
    clipped: bool

    def __str__(self):
        return (f"host overhead {self.gamma * 1e9:.3g} ns/byte (model without it: "
                f"{self.predicted_without * 1e3:.1f} ms, measured {self.measured * 1e3:.1f} ms"
                f"{'; clipped at 0' if self.clipped else ''})")


def fit_host_overhead(model, n, bw, measured, *, cluster, algorithm="ring", fusion="ddp",
                      gamma_max=1e-6) -> HostOverheadFit:
    """The host cost per byte that makes the model match one measured iteration time.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured iteration time, median [s].
    cluster : ClusterProfile or path
        The cluster calibrated at the same setting; its reduction cost is replaced [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].
    gamma_max : float
        Upper end of the search [s/byte].

    Returns
    -------
    HostOverheadFit
        ``gamma`` is eq. :eq:`host-overhead`'s solution, 0 when the model is already slower.
    """
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise InvalidParameterError("measured", measured, "a finite time > 0 [s]")

    def total(gamma):
        c = attrs.evolve(cl, reduction=ReductionCost(gamma=gamma, name="host overhead"))
        return iteration_time(profile, n, bw, cluster=c, algorithm=algorithm,
                              fusion=fusion).total

    base = total(0.0)
    if base >= measured:
        return HostOverheadFit(0.0, float(measured), base, True)
    if total(gamma_max) < measured:
        raise InvalidParameterError("measured", measured,
                                    f"even {gamma_max} s/byte of host overhead does not "
                                    "explain it; is the run's line rate right?")
    from scipy.optimize import brentq  # imported on use: the package loads faster

    gamma = brentq(lambda g: total(g) - measured, 0.0, gamma_max, xtol=1e-15, rtol=1e-10)
    return HostOverheadFit(float(gamma), float(measured), base, False)


@attrs.frozen
class OverlapFit:
    """Result of :func:`fit_overlap`.

    Parameters
    ----------
    overlap : float
        Overlap efficiency :math:`\\eta` in [0, 1] [-].
    measured : float
        The measured scaling factor it reproduces (when not clipped) [-].
    predicted_full, predicted_none : float
        The model's scaling factor at :math:`\\eta = 1` and :math:`\\eta = 0` [-].
    clipped : bool
        True when the measurement lies outside the two, so :math:`\\eta` is 0 or 1 [-].
    """

    overlap: float
    measured: float
    predicted_full: float
    predicted_none: float
    clipped: bool

    def __str__(self):
        return (f"overlap efficiency {self.overlap:.2f} (model with full overlap "
                f"{self.predicted_full:.3f}, with none {self.predicted_none:.3f}, measured "
                f"{self.measured:.3f}{'; clipped' if self.clipped else ''})")


def fit_overlap(model, n, bw, measured, *, cluster, algorithm="ring",
                fusion="ddp") -> OverlapFit:
    """The overlap efficiency that makes the model match one measured scaling factor.

    Where compute and communication share CPU cores, communication cannot fully progress
    while backward runs. The cluster's overlap efficiency :math:`\\eta`
    (eq. :eq:`overlap-efficiency` of :mod:`scalemodel.cluster`) captures that; this
    solves :math:`S(\\eta) = \\tilde S` by bisection (the scaling factor grows with
    :math:`\\eta`), clipped to [0, 1].

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured scaling factor [-].
    cluster : ClusterProfile or path
        The cluster calibrated at the same setting; its ``overlap`` is replaced [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].

    Returns
    -------
    OverlapFit
        :math:`\\eta` and the two bounding predictions.
    """
    from ..model import scaling_factor
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured)
            and 0 < measured):
        raise InvalidParameterError("measured", measured, "a finite scaling factor > 0 [-]")

    def s(eta):
        return scaling_factor(profile, n, bw, cluster=attrs.evolve(cl, overlap=eta),
                              algorithm=algorithm, fusion=fusion)

    full, none = s(1.0), s(0.0)
    if measured >= full:
        return OverlapFit(1.0, float(measured), full, none, measured > full)
    if measured <= none:
        return OverlapFit(0.0, float(measured), full, none, measured < none)
    from scipy.optimize import brentq  # imported on use: the package loads faster

    eta = brentq(lambda e: s(e) - measured, 0.0, 1.0, xtol=1e-6)
    return OverlapFit(float(eta), float(measured), full, none, False)


_TERMS = ("compute_slowdown", "overlap", "collective_overhead", "sync_overhead")
_FITTED_EXTRA = ("host_overhead", "host_overhead_note", "overlap_fit", "compute_slowdown_fit",
                 "transport_fit_note")


def transport_only(cluster):
    """The cluster without the terms fitted on top of its transport: no compute slowdown,
    full overlap, no fixed costs and no fitted host overhead (a reduction cost that the
    calibration stored as ``extra["host_overhead"]``). Latency, achieved bandwidth,
    ceiling, topology and a measured reduction cost stay.

    Parameters
    ----------
    cluster : ClusterProfile or path
        A calibrated cluster [-].

    Returns
    -------
    ClusterProfile
        The transport part, named ``<name> (transport only)``.
    """
    cl = load_cluster(cluster)
    extra = {k: v for k, v in cl.extra.items()
             if k not in _FITTED_EXTRA}
    reduction = None if "host_overhead" in cl.extra else cl.reduction
    intervals = {k: v for k, v in cl.intervals.items() if k not in _TERMS}
    return attrs.evolve(cl, compute_slowdown=1.0, overlap=1.0, collective_overhead=0.0,
                        sync_overhead=0.0, reduction=reduction, intervals=intervals,
                        extra=extra)


@attrs.frozen(eq=False)
class HostEffectsFit:
    """Result of :func:`fit_host_effects`.

    Parameters
    ----------
    cluster : ClusterProfile
        The given cluster with the compute slowdown, and (when fitted) the overlap
        efficiency and the host overhead, set [-].
    compute_slowdown : float
        :math:`\\sigma` put in the cluster [-].
    overlap : OverlapFit or None
        The overlap fit made on top of :math:`\\sigma`, when asked [-].
    host : HostOverheadFit or None
        The host-overhead fit, when even :math:`\\eta = 0` was faster than measured
        (None, with a :class:`~scalemodel.CalibrationWarning` and
        ``cluster.extra["host_overhead_note"]``, when no per-byte cost up to
        :func:`fit_host_overhead`'s ``gamma_max`` explains the run) [-].
    cluster_fit : ClusterFit or None
        The :func:`~scalemodel.fit_cluster` behind the overlap efficiency, when
        :func:`fit_with_transport` made it [-].
    """

    cluster: object
    compute_slowdown: float
    overlap: OverlapFit | None = None
    host: HostOverheadFit | None = None
    cluster_fit: object = None

    def lines(self) -> list:
        """What was fitted, one line each."""
        out = []
        if self.overlap is not None:
            out.append(str(self.overlap))
        if self.host is not None:
            out.append(f"and {self.host}")
        elif "host_overhead_note" in self.cluster.extra:
            out.append(self.cluster.extra["host_overhead_note"])
        return out


def fit_host_effects(model, n, bw, measured, *, cluster, compute_slowdown=1.0,
                     slowdown_interval=None, fit_overhead=True, algorithm="ring",
                     fusion="ddp", fitted_from=None) -> HostEffectsFit:
    """The compute slowdown, then the overlap efficiency and the host overhead on top of
    it, from one measured DDP run (see the module).

    The cluster's own slowdown, overlap and fitted host overhead are replaced (a
    measured reduction table and the fixed costs stay): :math:`\\sigma` is set to
    ``compute_slowdown``; with ``fit_overhead``, :func:`fit_overlap` solves for
    :math:`\\eta` with that :math:`\\sigma` in the model, and when the run is slower than
    even :math:`\\eta = 0` predicts, :func:`fit_host_overhead` the per-byte cost of the
    rest.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured; its iteration time is the single-worker time of the run
        [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured scaling factor [-].
    cluster : ClusterProfile or path
        The transport calibrated at the same setting [-].
    compute_slowdown : float
        Measured :math:`\\sigma \\ge 1` (e.g.
        the ``value`` of a :class:`~scalemodel.calibrate.scaling.SlowdownEstimate`) [-].
    slowdown_interval : tuple of float, optional
        Its interval, stored in the cluster's ``intervals`` [-].
    fit_overhead : bool
        Also fit the overlap efficiency and the host overhead [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].
    fitted_from : dict, optional
        What the fits were made from (model, line rate, ...), kept in the cluster's
        ``extra`` [-].

    Returns
    -------
    HostEffectsFit
        The cluster with the terms and the fits behind them.
    """
    from ..collectives import ReductionCost
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise InvalidParameterError("measured", measured, "a finite scaling factor > 0 [-]")
    sigma = float(compute_slowdown)
    if not (math.isfinite(sigma) and sigma >= 1.0):
        raise InvalidParameterError("compute_slowdown", compute_slowdown, "a factor >= 1")
    fitted_from = dict(fitted_from or {}, measured_scaling_factor=float(measured))
    extra = {k: v for k, v in cl.extra.items() if k not in _FITTED_EXTRA}
    extra["compute_slowdown_fit"] = {"compute_slowdown": sigma, "interval": (
        None if slowdown_interval is None else [float(v) for v in slowdown_interval]),
        "fitted_from": fitted_from}
    intervals = {k: v for k, v in cl.intervals.items() if k not in ("compute_slowdown",
                                                                     "overlap")}
    if slowdown_interval is not None:
        lo, hi = (float(v) for v in slowdown_interval)
        intervals["compute_slowdown"] = (max(1.0, min(lo, sigma)), max(hi, sigma))
    cl = attrs.evolve(cl, compute_slowdown=sigma, overlap=1.0, intervals=intervals,
                      reduction=None if "host_overhead" in cl.extra else cl.reduction,
                      extra=extra)
    if not fit_overhead:
        return HostEffectsFit(cl, sigma)
    kw = dict(algorithm=algorithm, fusion=fusion)
    o = fit_overlap(profile, n, bw, measured, cluster=cl, **kw)
    cl = attrs.evolve(cl, overlap=o.overlap, extra=dict(cl.extra, overlap_fit={
        "overlap": o.overlap, "predicted_full": o.predicted_full,
        "predicted_none": o.predicted_none, "clipped": o.clipped,
        "fitted_from": fitted_from}))
    h = None
    if o.clipped and measured < o.predicted_none:
        # slower than even no overlap: the rest is a per-byte host cost
        try:
            h = fit_host_overhead(profile, n, bw, profile.iteration_time / measured,
                                  cluster=cl, **kw)
        except InvalidParameterError as exc:  # no per-byte cost explains it
            import warnings

            from ..exceptions import CalibrationWarning
            note = (f"no host overhead fitted: {exc} (a cost that does not grow with the "
                    "bytes, such as the framework's per-iteration work on a small model?)")
            warnings.warn(note, CalibrationWarning, stacklevel=2)
            cl = attrs.evolve(cl, extra=dict(cl.extra, host_overhead_note=note))
            return HostEffectsFit(cl, sigma, o, None)
        cl = attrs.evolve(cl, reduction=ReductionCost(gamma=h.gamma, name="host overhead"),
                          extra=dict(cl.extra, host_overhead={"gamma": h.gamma,
                                                              "fitted_from": fitted_from}))
    return HostEffectsFit(cl, sigma, o, h)


_HELD = ("collective_overhead", "sync_overhead", "bucket_overhead", "iteration_overhead",
         "straggler_spread")


def fit_with_transport(model, n, bw, measured, *, transport, compute_slowdown=1.0,
                       slowdown_interval=None, uncertainty=0.01, fit_overhead=True,
                       algorithm="ring", fusion="ddp", fitted_from=None) -> HostEffectsFit:
    """:func:`fit_host_effects` through :func:`~scalemodel.fit_cluster` with the transport:
    the transport calibration fixes the latency, the achieved bandwidth and the topology
    (``fit_cluster(runs, transport=...)``), the measured slowdown :math:`\\sigma` is held,
    and the run fits only the overlap efficiency :math:`\\eta`, with its interval.

    Where the run lies between what no overlap and full overlap predict,
    :func:`~scalemodel.fit_cluster` with the transport makes the cluster and the run
    decides :math:`\\eta`: the value reaching it exactly, its interval the values
    reaching its iteration time within :math:`\\pm 1.96` ``uncertainty``.
    Outside that range :math:`\\eta` is clipped at 1 or 0 and, slower than
    even :math:`\\eta = 0`, the rest is the per-byte host cost of
    :func:`fit_host_overhead`, as :func:`fit_host_effects` does: a transport calibration
    sees the collectives alone, not the host work that DDP adds around them on CPUs. Fixed
    costs of the given cluster (fitted elsewhere) are held.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured; its iteration time is the single-worker time of the run
        [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured scaling factor [-].
    transport : ClusterProfile or path
        The transport calibrated at the same setting (terms fitted on top of it are
        stripped, :func:`transport_only`; its fixed costs are held) [-].
    compute_slowdown : float
        Measured :math:`\\sigma \\ge 1` [-].
    slowdown_interval : tuple of float, optional
        Its interval, stored in the cluster's ``intervals`` [-].
    uncertainty : float
        Relative standard uncertainty of the measured iteration time [-].
    fit_overhead : bool
        Also fit the overlap efficiency and the host overhead [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].
    fitted_from : dict, optional
        What the fits were made from, kept in the cluster's ``extra`` [-].

    Returns
    -------
    HostEffectsFit
        The cluster with the terms (its ``fit_settings`` naming the algorithm, the fusion
        and the transport, on every path: the bisected overlap too), the fits
        behind them and, when made, the :class:`~scalemodel.fitting.ClusterFit`.
    """
    out = _fit_with_transport(model, n, bw, measured, transport=transport,
                              compute_slowdown=compute_slowdown,
                              slowdown_interval=slowdown_interval, uncertainty=uncertainty,
                              fit_overhead=fit_overhead, algorithm=algorithm, fusion=fusion,
                              fitted_from=fitted_from)
    cl = out.cluster
    if out.cluster_fit is not None:  # fit_cluster recorded this call's settings
        return out
    # bisected: the cluster started from the given one, whose settings are not this fit's
    name = getattr(load_cluster(transport), "name", None)
    settings = {"transport": f"the transport calibration {name!r}" if name
                else "the transport calibration"}
    if isinstance(algorithm, str):
        settings["algorithm"] = algorithm
    if isinstance(fusion, str):
        settings["fusion"] = fusion
    return attrs.evolve(out, cluster=attrs.evolve(cl, fit_settings=settings))


def _fit_with_transport(model, n, bw, measured, *, transport, compute_slowdown=1.0,
                        slowdown_interval=None, uncertainty=0.01, fit_overhead=True,
                        algorithm="ring", fusion="ddp", fitted_from=None) -> HostEffectsFit:
    """The body of :func:`fit_with_transport` (its cluster without ``fit_settings`` on
    the bisected paths)."""
    import warnings

    from ..exceptions import CalibrationWarning, ScalemodelError
    from ..fitting import fit_cluster
    from ..model import scaling_factor
    profile = load_profile(model)
    given = load_cluster(transport)
    sigma_only = fit_host_effects(profile, n, bw, measured, cluster=given,
                                  compute_slowdown=compute_slowdown,
                                  slowdown_interval=slowdown_interval, fit_overhead=False,
                                  algorithm=algorithm, fusion=fusion, fitted_from=fitted_from)
    if not fit_overhead:
        return sigma_only
    cl = sigma_only.cluster
    kw = dict(algorithm=algorithm, fusion=fusion)

    def s(eta):
        return scaling_factor(profile, n, bw, cluster=attrs.evolve(cl, overlap=eta), **kw)

    full, none = s(1.0), s(0.0)
    if not none < measured < full:  # clipped: eta at a bound, maybe a host cost
        return fit_host_effects(profile, n, bw, measured, cluster=given,
                                compute_slowdown=compute_slowdown,
                                slowdown_interval=slowdown_interval, fit_overhead=True,
                                fitted_from=fitted_from, **kw)
    run = {"model": profile, "n": int(n), "bw": float(bw), "scaling_factor": float(measured),
           "uncertainty": float(uncertainty), "label": f"DDP on {n} workers"}
    held = {k: getattr(given, k) for k in _HELD if getattr(given, k)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CalibrationWarning)  # one run: the report says
            fit = fit_cluster([run], transport=transport_only(given), fit=["overlap"],
                              compute_slowdown=cl.compute_slowdown, gpus_per_node=None,
                              name=given.name, **held, **kw)
    except ScalemodelError as exc:  # e.g. a transport that contradicts the run: bisect
        note = f"overlap bisected, not fitted with the transport: {exc}"
        warnings.warn(note, CalibrationWarning, stacklevel=2)
        out = fit_host_effects(profile, n, bw, measured, cluster=given,
                               compute_slowdown=compute_slowdown,
                               slowdown_interval=slowdown_interval, fit_overhead=True,
                               fitted_from=fitted_from, **kw)
        return attrs.evolve(out, cluster=attrs.evolve(out.cluster, extra=dict(
            out.cluster.extra, transport_fit_note=note)))
    eta, eta_interval = _solved_overlap(profile, n, bw, measured, fit.cluster,
                                        uncertainty, kw)
    o = OverlapFit(eta, float(measured), full, none, False)
    fitted_from = dict(fitted_from or {}, measured_scaling_factor=float(measured))
    intervals = dict(fit.cluster.intervals, overlap=eta_interval)
    if "compute_slowdown" in cl.intervals:
        intervals["compute_slowdown"] = cl.intervals["compute_slowdown"]
    extra = dict(fit.cluster.extra, compute_slowdown_fit=cl.extra["compute_slowdown_fit"],
                 overlap_fit={
        "overlap": o.overlap, "interval": list(eta_interval),
        "predicted_full": full, "predicted_none": none, "clipped": False,
        "fitted_from": fitted_from, "by": "fit_cluster with the transport"})
    provenance = dict(fit.cluster.provenance, source=cl.provenance.get(
        "source", fit.cluster.provenance.get("source")), fit_cluster=fit.cluster.provenance.get(
        "source"))
    out = attrs.evolve(fit.cluster, overlap=eta, intervals=intervals, extra=extra,
                       provenance=provenance)
    solved = attrs.evolve(fit.parameters["overlap"], value=eta, interval=eta_interval)
    fit = attrs.evolve(fit, cluster=out, parameters={**fit.parameters, "overlap": solved})
    return HostEffectsFit(out, sigma_only.compute_slowdown, o, None, fit)


def _solved_overlap(profile, n, bw, measured, cluster, uncertainty, kw):
    r"""The overlap efficiency that reaches one run exactly on ``cluster`` (the transport
    fit's), and its interval: the efficiencies reaching the run's iteration time
    :math:`\pm 1.96\,u` (``uncertainty`` :math:`u`), clipped to [0, 1].

    With one run and one parameter the run decides: weighed against the parameter's
    prior (centre 1) under a robust loss, a run a little above what no overlap gives
    fitted :math:`\eta \approx 1` and missed the run by several of its uncertainties,
    while one a little below it gave :math:`\eta = 0` (the calibration audit of
    session 29)."""
    from scipy.optimize import brentq

    from ..model import scaling_factor

    def s(eta):
        return scaling_factor(profile, n, bw, cluster=attrs.evolve(cluster, overlap=eta), **kw)

    full, none = s(1.0), s(0.0)

    def solve(target):
        if target >= full:
            return 1.0
        if target <= none:
            return 0.0
        return float(brentq(lambda e: s(e) - target, 0.0, 1.0, xtol=1e-7))

    half = 1.96 * float(uncertainty)  # on the iteration time: T_n (1 -+ half)
    return solve(measured), (solve(measured / (1.0 + half)),
                             solve(measured / max(1.0 - half, 1e-9)))
