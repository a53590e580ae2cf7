r"""Fit the collectives' latency and achieved bandwidth to measured times.

The model is the library's own (:func:`scalemodel.collectives.collective_cost`), so a
fitted latency and bandwidth mean exactly what :func:`scalemodel.scaling_factor` uses. For
a collective of :math:`m` bytes per worker among :math:`n` workers,

.. math::
   :label: fit-model

   t(m) = L_n\,\alpha + \frac{b_n(m)}{B} + R_n(m)\,\gamma ,

where :math:`L_n` is the number of sequential messages (ring all-reduce: :math:`2(n-1)`),
:math:`b_n(m)` the bits each worker sends (ring all-reduce: :math:`2\frac{n-1}{n}8m`),
:math:`R_n(m)` the bytes it sums, :math:`\alpha` [s] the latency, :math:`B` [bits/s] the
achieved bandwidth and :math:`\gamma` [s/byte] the reduction cost (Hockney's
alpha-beta model [H94]_, extended with gamma as in Thakur et al. [TRG05]_). Point-to-point (``send_recv``) is one message,
:math:`t = \alpha + 8m/B`; a broadcast a pipelined chain, :math:`t = (n-1)\alpha + 8m/B`;
a reduce-scatter moves what a ring all-gather moves (its sums folded into :math:`B`).
With these, the fitted :math:`B` is nccl-tests' large-message bus bandwidth.

**With a topology** (``topology=``, :class:`~scalemodel.topology.Topology`: :math:`g`
GPUs and :math:`\nu` NICs per node, so :math:`n` ranks span :math:`M = \lceil n/g
\rceil` nodes) the coefficients are those of the library's topology-aware collective.
For NCCL's flat ring all-reduce, which crosses each node boundary once per direction,

.. math::
   :label: fit-model-topology

   t(m) = 2(n - M)\,\alpha_\text{intra} + 2(M - 1)\,\alpha
          + \frac{2\frac{n-1}{n}\,8m}{\nu B} ,

with :math:`\alpha_\text{intra}` known (fitted inside one node beforehand), :math:`\alpha`
the latency of a step that crosses nodes and :math:`B` the achieved bandwidth of **one
NIC**. A node's NICs carry :math:`2\frac{n-1}{n} 8m` bits together, as much as each
worker's link in the flat model, so with one NIC per node :math:`B` is the same number
as without a topology (nccl-tests' bus bandwidth), and with :math:`\nu` NICs it is the
bus bandwidth over :math:`\nu`. What changes is the latency: the flat model counts
:math:`2(n-1)` steps at :math:`\alpha`, the topology only the :math:`2(M-1)` that cross
nodes. The fit assumes the NICs, not the intra-node links, bind (the wire time is the
larger of the two, eq. :eq:`wire-max`); it warns when the fitted bandwidth says
otherwise.

The fit minimises *relative* residuals :math:`(t_\text{model} - t)/t` (times span five
orders of magnitude over a sweep; absolute residuals would ignore the small messages that
determine :math:`\alpha`) with a robust soft-L1 loss (a few slow outliers, common on
shared networks, do not drag it), under bounds :math:`\alpha \ge 0`, :math:`B > 0`,
:math:`\gamma \ge 0`. Fits at several line rates make a cluster profile whose achieved
bandwidth may stop growing, as measured by Zhang et al. [Z20]_. Confidence intervals come from the Jacobian at the solution,
:math:`\operatorname{cov} = s^2 (J^\top J)^{-1}` with Student's t quantile; :math:`R^2` is
computed on the log of the times.

References
----------
.. [H94] R. W. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko
   CS-2", Parallel Computing 20(3), 389-398, 1994. doi:10.1016/S0167-8191(06)80021-9
.. [TRG05] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
   Communication Operations in MPICH", IJHPCA 19(1), 2005. doi:10.1177/1094342005051521
.. [Z20] Z. Zhang et al., "Is Network the Bottleneck of Distributed Training?",
   arXiv:2006.10103, 2020 (the transport does not fill fast links: the ceiling).
"""

from __future__ import annotations

import math
import warnings

import attrs
import numpy as np

from ..cluster import ClusterProfile
from ..collectives import CollectiveOptions, ReductionCost, collective_cost, resolve_algorithm
from ..exceptions import (CalibrationError, CalibrationWarning, InvalidParameterError,
                          ParameterTypeError)
from ..topology import Topology
from ..units import check_nonnegative, format_bandwidth, one_rate

__all__ = ["CollectiveFit", "fit_collective", "cluster_from_fits", "intra_node_topology",
           "unmeasured_intra_topology",
           "COLLECTIVE_MODELS"]

#: the model algorithm of each measured collective: library algorithms
#: (:data:`scalemodel.ALGORITHMS`) where one fits, else a one-message point-to-point
#: model (``"p2p"``: :math:`L=1`, :math:`b=8m`) or a pipelined chain (``"chain"``:
#: :math:`L=n-1`, :math:`b=8m`, nccl-tests' ring broadcast). Reduce-scatter moves what an
#: all-gather moves; its sums are folded into the bandwidth.
COLLECTIVE_MODELS = {"all_reduce": "ring", "all_gather": "allgather", "send_recv": "p2p",
                     "reduce_scatter": "allgather", "broadcast": "chain"}

_LOCAL_MODELS = ("p2p", "chain")
_PARAMS = ("alpha", "bandwidth", "gamma")


def _coefficients(collective, algorithm, nbytes, n):
    """Per-size coefficients ``(L, bits, R)`` of eq. :eq:`fit-model` without a topology:
    sequential messages [-], bits sent per worker [bit] and bytes summed [bytes]."""
    return _columns(collective, algorithm, nbytes, n)[:3]


_UNIT_SUM = ReductionCost(gamma=2.0 ** -10)
"""A reduction whose cost divided by its gamma is the bytes summed [s/byte]: a power of
two, so the division is exact, within :data:`scalemodel.collectives.MAX_GAMMA`."""


def _columns(collective, algorithm, nbytes, n, topology=None):
    """Per-size coefficients ``(L, bits, R, offset)`` of eq. :eq:`fit-model`: sequential
    network messages [-], bits on each network link [bit], bytes summed [bytes] and the
    known part of the time [s] (with a topology: the intra-node steps at its
    ``intra_alpha``, eq. :eq:`fit-model-topology`; else 0)."""
    m = np.asarray(check_nonnegative(nbytes, "nbytes"), dtype=float)
    zero = np.zeros_like(m)
    if algorithm == "p2p":
        return np.ones_like(m), 8.0 * m, zero, zero.copy()
    if algorithm == "chain":
        return np.full_like(m, float(n - 1)), 8.0 * m, zero, zero.copy()
    if topology is None or topology.flat:
        lat = collective_cost(algorithm, m, n, options=CollectiveOptions(alpha=1.0)).latency
        bits = collective_cost(algorithm, m, n).bits
        red = collective_cost(algorithm, m, n, reduction=_UNIT_SUM).overhead / _UNIT_SUM.gamma
        return (np.broadcast_to(np.asarray(lat, float), m.shape).copy(),
                np.asarray(bits, float), np.asarray(red, float), zero.copy())
    opt = CollectiveOptions.from_topology(topology, alpha=0.0)
    unit = attrs.evolve(opt, alpha=1.0, intra_alpha=0.0)
    lat = collective_cost(algorithm, m, n, options=unit).latency
    known = collective_cost(algorithm, m, n, options=opt)  # intra-node steps, copies
    red = (collective_cost(algorithm, m, n, options=opt, reduction=_UNIT_SUM).overhead
           - known.overhead) / _UNIT_SUM.gamma
    offset = np.asarray(known.latency, float) + np.asarray(known.overhead, float)
    return (np.broadcast_to(np.asarray(lat, float), m.shape).copy(),
            np.asarray(known.bits, float), np.asarray(red, float),
            np.broadcast_to(offset, m.shape).copy())


def _array(value):
    return np.asarray(value, dtype=float)


@attrs.frozen(eq=False)
class CollectiveFit:
    """A fitted latency / bandwidth (/ reduction cost) model of one collective,
    eq. :eq:`fit-model`.

    Parameters
    ----------
    collective : str
        ``"all_reduce"``, ``"all_gather"``, ``"send_recv"`` or another nccl-tests name [-].
    algorithm : str
        The model algorithm of eq. :eq:`fit-model` (``"ring"``, ``"allgather"``,
        ``"p2p"``, ...) [-].
    n : int
        Workers in the measurement [workers].
    alpha : float
        Latency per sequential message [s].
    bandwidth : float
        Achieved bandwidth [bits/s].
    gamma : float or None
        Reduction cost, when it was fitted (or fixed) separately [s/byte]; ``None`` when
        it is folded into ``bandwidth``.
    intervals : dict
        Confidence intervals ``{"alpha": (lo, hi), "bandwidth": ..., "gamma": ...}`` in
        the units of the values [s], [bits/s], [s/byte]; a fixed value has a zero-width
        interval.
    confidence : float
        Level of the intervals [-].
    r2 : float
        Coefficient of determination of the log times [-].
    nbytes : numpy.ndarray
        Sizes [bytes].
    seconds : numpy.ndarray
        Median measured time per size [s].
    residuals : numpy.ndarray
        Relative residuals (model - measured) / measured per size [-].
    line_rate : float or None
        NIC line rate [bits/s].
    loss : str
        Loss of the fit [-].
    f_scale : float
        Relative residual where the robust loss flattens [-].
    repetitions : int
        Repetitions per size behind each median [-].
    topology : Topology or None
        The topology the coefficients were computed with (eq.
        :eq:`fit-model-topology`): ``alpha`` is then the latency of a step across nodes
        and ``bandwidth`` that of one NIC; ``None`` for the flat model [-].
    """

    collective: str
    algorithm: str
    n: int
    alpha: float
    bandwidth: float
    gamma: float | None
    intervals: dict
    confidence: float
    r2: float
    nbytes: np.ndarray = attrs.field(converter=_array)
    seconds: np.ndarray = attrs.field(converter=_array)
    residuals: np.ndarray = attrs.field(converter=_array)
    line_rate: float | None = None
    loss: str = "soft_l1"
    f_scale: float | None = None
    repetitions: int = 1
    topology: Topology | None = None

    @property
    def utilization(self):
        """Achieved bandwidth over line rate, at most 1 [-] (None without a line rate)."""
        if self.line_rate is None:
            return None
        return min(1.0, self.bandwidth / self.line_rate)

    def predict(self, nbytes):
        """Modelled time of the collective, eq. :eq:`fit-model`.

        Parameters
        ----------
        nbytes : float or array_like
            Message size per worker [bytes].

        Returns
        -------
        float or numpy.ndarray
            Time [s].
        """
        lat, bits, red, known = _columns(self.collective, self.algorithm, nbytes, self.n,
                                         self.topology)
        t = known + lat * self.alpha + bits / self.bandwidth + red * (self.gamma or 0.0)
        return float(t) if np.ndim(t) == 0 else t

    def to_dict(self) -> dict:
        """JSON-ready form (plain floats and lists)."""
        return {"collective": self.collective, "algorithm": self.algorithm, "n": self.n,
                "alpha": self.alpha, "bandwidth": self.bandwidth, "gamma": self.gamma,
                "intervals": {k: [float(a), float(b)] for k, (a, b) in self.intervals.items()},
                "confidence": self.confidence, "r2": self.r2,
                "nbytes": self.nbytes.tolist(), "seconds": self.seconds.tolist(),
                "residuals": self.residuals.tolist(), "line_rate": self.line_rate,
                "utilization": self.utilization, "loss": self.loss, "f_scale": self.f_scale,
                "repetitions": self.repetitions,
                "topology": None if self.topology is None else self.topology.to_dict()}

    @classmethod
    def from_dict(cls, d) -> "CollectiveFit":
        """Inverse of :meth:`to_dict`.

        Parameters
        ----------
        d : dict
            As written by :meth:`to_dict` [-].
        """
        try:
            return cls(collective=str(d["collective"]), algorithm=str(d["algorithm"]),
                       n=int(d["n"]), alpha=float(d["alpha"]), bandwidth=float(d["bandwidth"]),
                       gamma=None if d.get("gamma") is None else float(d["gamma"]),
                       intervals={k: (float(v[0]), float(v[1]))
                                  for k, v in (d.get("intervals") or {}).items()},
                       confidence=float(d.get("confidence", 0.95)), r2=float(d["r2"]),
                       nbytes=d["nbytes"], seconds=d["seconds"], residuals=d["residuals"],
                       line_rate=None if d.get("line_rate") is None else float(d["line_rate"]),
                       loss=str(d.get("loss", "soft_l1")),
                       f_scale=None if d.get("f_scale") is None else float(d["f_scale"]),
                       repetitions=int(d.get("repetitions", 1)),
                       topology=None if d.get("topology") is None else Topology(
                           **{k: v for k, v in d["topology"].items() if v is not None}))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise InvalidParameterError("d", "<dict>", f"not a CollectiveFit dict ({exc!r})") \
                from None

    def __str__(self):
        pct = f"{self.confidence:.0%}"
        a_lo, a_hi = self.intervals.get("alpha", (self.alpha, self.alpha))
        b_lo, b_hi = self.intervals.get("bandwidth", (self.bandwidth, self.bandwidth))
        high = ("unbounded" if b_hi >= BANDWIDTH_CAP * self.bandwidth * (1 - 1e-9)
                else f"{b_hi / 1e9:.4g}")  # (the stored cap, not a measured end)
        text = (f"{self.collective} ({self.algorithm}, n={self.n}): alpha "
                f"{self.alpha * 1e6:.2f} us [{a_lo * 1e6:.2f}, {a_hi * 1e6:.2f}], bandwidth "
                f"{self.bandwidth / 1e9:.4g} Gbit/s [{b_lo / 1e9:.4g}, {high}]")
        if self.gamma is not None:
            g_lo, g_hi = self.intervals.get("gamma", (self.gamma, self.gamma))
            text += (f", gamma {self.gamma * 1e12:.3g} ps/byte [{g_lo * 1e12:.3g}, "
                     f"{g_hi * 1e12:.3g}]")
        text += f" ({pct}), R^2 {self.r2:.4f} (log times)"
        if self.topology is not None:
            t = self.topology
            text += (f", {t.gpus_per_node} per node x {t.nics_per_node} NIC (alpha across "
                     f"nodes, bandwidth per NIC; intra-node {t.intra_bw / 1e9:.4g} Gbit/s, "
                     f"{t.intra_alpha * 1e6:.2f} us)")
        if self.line_rate is not None:
            text += f", utilization {self.utilization:.3f} of {self.line_rate / 1e9:g} Gbit/s"
        return text


def _check_bounds(bounds):
    """Natural-unit bounds ``{"alpha": (lo, hi) [s], "bandwidth": (lo, hi) [bits/s],
    "gamma": (lo, hi) [s/byte]}`` -> bounds on (alpha, 1/B, gamma)."""
    lower = np.array([0.0, 0.0, 0.0])
    upper = np.array([np.inf, np.inf, np.inf])
    if bounds is None:
        return lower, upper
    if not isinstance(bounds, dict):
        raise ParameterTypeError("bounds", bounds, "a dict {'alpha': (lo, hi), "
                                 "'bandwidth': (lo, hi), 'gamma': (lo, hi)}")
    unknown = set(bounds) - set(_PARAMS)
    if unknown:
        raise InvalidParameterError("bounds", bounds, f"unknown parameter(s) "
                                    f"{sorted(unknown)}; known: {', '.join(_PARAMS)}")
    for i, name in enumerate(_PARAMS):
        if name not in bounds:
            continue
        try:
            lo, hi = (float(v) for v in bounds[name])
        except (TypeError, ValueError):
            raise InvalidParameterError(f"bounds[{name!r}]", bounds[name],
                                        "a pair (lo, hi) of numbers") from None
        if not (0 <= lo < hi) or math.isnan(hi):
            raise InvalidParameterError(f"bounds[{name!r}]", bounds[name],
                                        "needs 0 <= lo < hi")
        if name == "bandwidth":
            if lo <= 0 and math.isinf(hi):
                continue
            lower[i] = 0.0 if math.isinf(hi) else 1.0 / hi
            upper[i] = np.inf if lo <= 0 else 1.0 / lo
        else:
            lower[i], upper[i] = lo, hi
    return lower, upper


def fit_collective(nbytes, seconds, *, collective="all_reduce", n, algorithm=None,
                   line_rate=None, alpha0=None, bandwidth0=None, fit_gamma=False,
                   gamma0=None, bounds=None, loss="soft_l1", f_scale=None, confidence=0.95,
                   min_points=4, r2_warn=0.95, topology=None, **overrides) -> CollectiveFit:
    r"""Fit eq. :eq:`fit-model` to measured collective times.

    The fit minimises :math:`\sum_i \rho\big(((t_\text{model}(m_i) - t_i)/t_i)^2\big)`
    with ``scipy.optimize.least_squares`` (trust region reflective, bounds
    :math:`\alpha \ge 0`, :math:`B > 0`, :math:`\gamma \ge 0`). The unknowns are
    :math:`\alpha`, :math:`1/B` and :math:`\gamma`, in which the model is linear; the
    start values come from the linear least-squares solution of the same relative
    problem. With several repetitions per size the fit is made to the per-size medians
    (robust to slow repetitions, and it weighs every size equally).

    Parameters
    ----------
    nbytes : array_like
        Message size per worker of each measurement [bytes].
    seconds : array_like
        Measured times, one per size or ``(sizes, repetitions)``; repetitions are reduced
        to their median [s].
    collective : str
        What was measured (``"all_reduce"``, ``"all_gather"``, ``"send_recv"``,
        ``"reduce_scatter"``, ``"broadcast"``) [-].
    n : int
        Workers taking part [workers].
    algorithm : str, optional
        Model algorithm: a name of :data:`scalemodel.ALGORITHMS` (``"ring"``,
        ``"tree"``, ...) or ``"p2p"`` / ``"chain"``; ``COLLECTIVE_MODELS`` by
        default [-].
    line_rate : float or str, optional
        NIC line rate, to report the utilization [bits/s].
    alpha0 : float, optional
        Start value of the latency [s].
    bandwidth0 : float or str, optional
        Start value of the bandwidth [bits/s].
    fit_gamma : bool
        Fit the reduction cost separately [-]. In every all-reduce model the bytes summed
        and the bits sent both grow linearly with the size, so :math:`\gamma` and
        :math:`1/B` cannot be told apart from one sweep: fix the bandwidth at the value
        fitted on a collective that does not reduce (all-gather, send/recv) with
        ``bandwidth=``. Without ``fit_gamma``, :math:`\gamma` is folded into the
        bandwidth (the fitted :math:`B` is then the all-reduce's effective bandwidth).
    gamma0 : float, optional
        Start value of gamma [s/byte].
    bounds : dict, optional
        ``{"alpha": (lo, hi), "bandwidth": (lo, hi), "gamma": (lo, hi)}`` [s], [bits/s],
        [s/byte]; defaults :math:`[0, \infty)` each.
    loss : str
        ``scipy.optimize.least_squares`` loss (``"soft_l1"``, ``"huber"``,
        ``"cauchy"``, ``"linear"``) [-].
    f_scale : float, optional
        Relative residual where the robust loss starts to flatten [-]; by default two
        passes, the first at 0.05, the second at 1.4826 times the median absolute
        deviation of the first pass's relative residuals (at least 0.01).
    confidence : float
        Level of the confidence intervals, in (0, 1) [-].
    min_points : int
        Fewest distinct sizes accepted [-].
    r2_warn : float
        Warn (:class:`~scalemodel.CalibrationWarning`) below this :math:`R^2` of the log
        times [-].
    topology : Topology, optional
        Where the ``n`` workers sit (GPUs and NICs per node, the intra-node link's
        latency and rate, e.g. from :func:`intra_node_topology`): the model is then the
        library's topology-aware one, eq. :eq:`fit-model-topology`, ``alpha`` the latency
        of a step across nodes and ``bandwidth`` that of one NIC. The workers must span
        more than one node. Library algorithms only (not ``"p2p"`` / ``"chain"``) [-].
    **overrides
        Hold a parameter fixed instead of fitting it: ``alpha`` [s], ``bandwidth``
        [bits/s] or ``gamma`` [s/byte]. Other keywords are rejected.

    Returns
    -------
    CollectiveFit
        The fit, its confidence intervals (from the Jacobian:
        :math:`\operatorname{cov} = s^2 (J^\top J)^{-1}`, :math:`s^2` the mean squared
        relative residual, Student's t quantile; conservative when outliers are present),
        :math:`R^2` of the log times and the relative residuals.

    Raises
    ------
    CalibrationError
        Fewer than ``min_points`` distinct sizes, or ``fit_gamma`` without a fixed
        bandwidth.
    InvalidParameterError
        Non-finite or non-positive sizes or times, mismatched shapes, bad ``n``,
        ``confidence``, ``bounds``, an unknown override, or a ``topology`` in which the
        ``n`` workers fit in one node (no NIC carries anything).
    ParameterTypeError
        ``topology`` is not a :class:`~scalemodel.topology.Topology`.

    Warns
    -----
    CalibrationWarning
        :math:`R^2 < r2\_warn`; the bandwidth exceeds ``line_rate`` even at its
        interval's low end (the utilization is clipped to 1); or, with a topology, the
        intra-node links would be slower than the fitted NIC bandwidth (then they, not
        the NICs, bound the measured times).

    Examples
    --------
    >>> import numpy as np
    >>> from scalemodel.calibrate.fit import fit_collective
    >>> m = 2.0 ** np.arange(12, 27)                  # 4 KiB .. 64 MiB
    >>> t = 2 * 7 * 25e-6 + 2 * 7 / 8 * 8 * m / 20e9  # ring, n=8, 25 us, 20 Gbit/s
    >>> fit = fit_collective(m, t, n=8, line_rate="25Gbps")
    >>> round(fit.alpha * 1e6, 3), round(fit.bandwidth / 1e9, 3), round(fit.utilization, 3)
    (25.0, 20.0, 0.8)
    """
    _reject_unknown(overrides)
    m, t, reps = _measurements(nbytes, seconds)
    n, algorithm = _check_setup(n, confidence, f_scale, collective, algorithm, m, min_points)
    if line_rate is not None:
        line_rate = one_rate(line_rate, "line_rate")
    topology = _check_topology(topology, algorithm, n)
    lat, bits, red, known = _columns(collective, algorithm, m, n, topology)
    X = np.column_stack([lat, bits, red])
    fixed, free = _held_fixed(overrides, fit_gamma, collective, algorithm, bits, red)
    lower, upper = _check_bounds(bounds)
    start = {0: alpha0, 1: None if bandwidth0 is None else
             1.0 / one_rate(bandwidth0, "bandwidth0"), 2: gamma0}
    p, cov, fun, f_used = _solve(t, X, fixed, free, start, lower, upper, loss, f_scale,
                                 known)
    intervals, gamma_interval = _intervals(p, cov, fixed, free, lower, upper, t.size,
                                           confidence)
    gamma = None
    if fit_gamma or "gamma" in overrides:
        gamma = p[2]
        intervals["gamma"] = gamma_interval
    fitted = known + X @ p
    if topology is not None:
        _check_nic_binds(collective, topology, 1.0 / p[1])
    return _finish(collective, algorithm, n, p[0], 1.0 / p[1], gamma, intervals, confidence,
                   m, t, fitted, line_rate, r2_warn, loss, f_used, reps, topology)


def _reject_unknown(overrides):
    """Raise on a keyword of fit_collective that names no parameter to hold fixed."""
    unknown = set(overrides) - set(_PARAMS)
    if unknown:
        raise ParameterTypeError(sorted(unknown)[0], overrides[sorted(unknown)[0]],
                                 f"no such keyword of fit_collective; parameters to hold "
                                 f"fixed are {', '.join(_PARAMS)}")


def _measurements(nbytes, seconds):
    """Check the sizes [bytes] and times [s]: (sizes, per-size median times,
    repetitions per size)."""
    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if m.ndim != 1 or m.size == 0:
        raise InvalidParameterError("nbytes", nbytes, "a non-empty 1-D list of sizes [bytes]")
    if not (np.all(np.isfinite(m)) and np.all(m > 0)):
        raise InvalidParameterError("nbytes", nbytes, "every size must be finite and > 0")
    if t.shape[:1] != m.shape or t.ndim > 2 or t.size == 0:
        raise InvalidParameterError("seconds", f"shape {t.shape}",
                                    f"one time (or one row of repetitions) per size ({m.size})")
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        raise InvalidParameterError("seconds", seconds, "every time must be finite and > 0")
    reps = 1
    if t.ndim == 2:
        reps = int(t.shape[1])
        t = np.median(t, axis=1)
    return m, t, reps


def _check_setup(n, confidence, f_scale, collective, algorithm, m, min_points):
    """Check the workers, confidence, loss scale, model and number of distinct sizes:
    (n, model algorithm)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InvalidParameterError("n", n, "an integer >= 2 (workers in the measurement)")
    n = int(n)
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "in (0, 1)")
    if f_scale is not None and not (np.isfinite(f_scale) and f_scale > 0):
        raise InvalidParameterError("f_scale", f_scale, "a relative residual > 0")
    if algorithm is None:
        algorithm = COLLECTIVE_MODELS.get(collective)
        if algorithm is None:
            raise InvalidParameterError("collective", collective,
                                        f"one of {', '.join(COLLECTIVE_MODELS)} or pass "
                                        "algorithm=")
    elif algorithm not in _LOCAL_MODELS:
        algorithm = resolve_algorithm(algorithm)
    distinct = np.unique(m).size
    if distinct < min_points:
        raise CalibrationError(
            f"{collective}: {distinct} distinct message size(s) given, at least {min_points} "
            "needed to separate latency from bandwidth; widen the sweep (--min-size / "
            "--max-size) or add sizes")
    return n, algorithm


def _check_topology(topology, algorithm, n):
    """The topology to fit with: None for none or a flat one; raises for a local model or
    ``n`` workers inside one node."""
    if topology is not None:
        if not isinstance(topology, Topology):
            raise ParameterTypeError("topology", topology, "a scalemodel Topology or None")
        if topology.flat:
            topology = None
        elif algorithm in _LOCAL_MODELS:
            raise InvalidParameterError("topology", topology, f"the {algorithm!r} model "
                                        "has no topology; fit it without one")
        elif topology.nodes(n) < 2:
            raise InvalidParameterError(
                "topology", topology, f"{n} workers at {topology.gpus_per_node} per node "
                "fit in one node, so no NIC carries anything", "Fit a run inside one node "
                "without a topology: it measures the intra-node link (intra_node_topology)")
    return topology


def _held_fixed(overrides, fit_gamma, collective, algorithm, bits, red):
    """The unknowns (0 alpha, 1 1/B, 2 gamma) held fixed, {index: value}, and the free
    ones; gamma is held at 0 unless fitted."""
    fixed = {}
    if "alpha" in overrides:
        fixed[0] = float(_nonneg(overrides["alpha"], "alpha"))
    if "bandwidth" in overrides:
        fixed[1] = 1.0 / one_rate(overrides["bandwidth"], "bandwidth")
    if "gamma" in overrides:
        fixed[2] = float(_nonneg(overrides["gamma"], "gamma"))
    if fit_gamma:
        if not np.any(red > 0):
            raise InvalidParameterError("fit_gamma", fit_gamma,
                                        f"{collective} ({algorithm}) sums nothing; there is "
                                        "no gamma to fit")
        if 1 not in fixed and _collinear(bits, red):
            raise CalibrationError(
                f"{collective}: gamma and the bandwidth both scale with the message size, "
                "so one sweep cannot separate them; pass bandwidth= from an all-gather or "
                "send/recv fit, or leave fit_gamma off (gamma is then part of the "
                "bandwidth)")
    elif 2 not in fixed:
        fixed[2] = 0.0
    free = [i for i in range(3) if i not in fixed]
    if not free:
        raise InvalidParameterError("overrides", overrides, "leave at least one parameter "
                                    "to fit")
    return fixed, free


BANDWIDTH_CAP = 1e3
"""A bandwidth interval whose reciprocal reaches 0 (unbounded above) is stored ending at
this many times the fitted bandwidth, and printed as unbounded [-]."""


def _intervals(p, cov, fixed, free, lower, upper, points, confidence):
    """Student-t confidence intervals {alpha [s], bandwidth [bits/s]} and that of gamma
    [s/byte] from the covariance of the free unknowns (a held one's is its value)."""
    dof = max(1, points - len(free))
    from scipy import stats  # imported on use: scipy.stats takes ~1 s to import

    q = float(stats.t.ppf(0.5 + confidence / 2, dof))
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    iv = {}
    for k, i in enumerate(free):
        iv[i] = (max(lower[i], p[i] - q * se[k]), min(upper[i], p[i] + q * se[k]))
    for i in fixed:
        iv[i] = (p[i], p[i])
    inv_lo = max(iv[1][0], p[1] / BANDWIDTH_CAP)  # reaching 1/B = 0: capped (printed as
    # "unbounded")
    return {"alpha": iv[0], "bandwidth": (1.0 / iv[1][1], 1.0 / inv_lo)}, iv[2]


def _check_nic_binds(collective, topology, bandwidth):
    """Warn when the intra-node links would be slower than the fitted NICs: in a flat
    ring each GPU's link carries what the node's NICs carry together, so the NICs bind
    only while ``intra_bw > nics_per_node * bandwidth`` (eq. :eq:`wire-max`)."""
    nics = topology.nics_per_node * bandwidth
    if topology.intra_bw < nics:
        warnings.warn(f"{collective}: with {topology.nics_per_node} NIC(s) per node at the "
                      f"fitted {bandwidth / 1e9:.4g} Gbit/s each, the intra-node links "
                      f"({topology.intra_bw / 1e9:.4g} Gbit/s) are the slower ones, so the "
                      "measured times do not tell the NICs' bandwidth (only that it is at "
                      "least this); check the intra-node rate and --nics-per-node",
                      CalibrationWarning, stacklevel=3)


def _nonneg(value, name):
    v = float(value)
    if not (np.isfinite(v) and v >= 0):
        raise InvalidParameterError(name, value, "finite and >= 0")
    return v


def _collinear(a, b):
    """Whether columns ``a`` and ``b`` are proportional (cannot be separated)."""
    keep = (a > 0) | (b > 0)
    if not np.any(keep):
        return True
    ratio = b[keep] / np.maximum(a[keep], 1e-300)
    return bool(np.ptp(ratio) <= 1e-9 * np.max(np.abs(ratio)))


def _solve(t, X, fixed, free, start, lower, upper, loss, f_scale, known=None):
    """Robust bounded least squares of the relative residuals, eq. :eq:`fit-model` is
    linear in ``p = (alpha, 1/B, gamma)`` (``known`` [s] is the part of the times that
    does not depend on them); returns ``p``, the covariance of the free parameters, the
    residuals and the f_scale used."""
    from scipy import optimize  # imported on use, as scipy.stats is

    base = sum((X[:, i] * v for i, v in fixed.items()), np.zeros_like(t))
    if known is not None:
        base = base + known
    A = X[:, free] / t[:, None]
    rhs = 1.0 - base / t
    guess = np.linalg.lstsq(A, rhs, rcond=None)[0]
    # a positive scale per unknown: its start value, or the value that would explain the
    # median time on its own
    alone = np.median(t[:, None] / np.maximum(X[:, free], 1e-300), axis=0)
    p0 = np.empty(len(free))
    for k, i in enumerate(free):
        p0[k] = start[i] if start[i] is not None else guess[k]
        if not p0[k] > 0:
            p0[k] = alone[k] * 1e-2
    lo, hi = lower[free], upper[free]
    p0 = np.clip(p0, np.where(lo > 0, lo, 0.0), hi)
    scales = np.where(p0 > 0, p0, alone)
    scales = np.where(scales > 0, scales, 1.0)
    x0 = p0 / scales
    xl, xu = lo / scales, hi / scales
    x0 = np.clip(x0, xl + 1e-12 * np.maximum(1.0, np.abs(xl)), np.where(np.isinf(xu), np.inf,
                                                                       xu * (1 - 1e-12)))

    def resid(x):
        return A @ (x * scales) - rhs

    def run(x_start, fs):
        return optimize.least_squares(resid, x_start, jac=lambda x: A * scales,
                                      bounds=(xl, xu), loss=loss, f_scale=fs, x_scale="jac",
                                      method="trf")

    if f_scale is None:
        # two passes: at 5 %, then at the robust spread (1.4826 MAD) of its residuals
        first = run(x0, 0.05)
        r1 = first.fun
        f_scale = max(0.01, 1.4826 * float(np.median(np.abs(r1 - np.median(r1)))))
        res = run(first.x, f_scale)
    else:
        res = run(x0, f_scale)
    p_free = res.x * scales
    p = np.zeros(3)
    for i, v in fixed.items():
        p[i] = v
    p[free] = p_free
    if p[1] <= 0:  # the bandwidth has no upper bound: 1/B = 0 would be infinite
        raise CalibrationError("the fit drove 1/B to 0 (infinite bandwidth): the times do "
                               "not grow with the message size; sweep larger messages")
    fun = A @ p_free - rhs
    dof = max(1, t.size - len(free))
    s2 = float(np.sum(fun ** 2) / dof)
    return p, s2 * _normal_inverse(A), fun, float(f_scale)


def _normal_inverse(A):
    r""":math:`(A^\top A)^{-1}` (pseudo-inverse where singular), computed on the columns
    scaled to unit norm: the latency and bandwidth columns differ by up to ten orders of
    magnitude, and the pseudo-inverse of the unscaled product would drop the latency's
    direction as numerically null (a zero-width interval)."""
    norm = np.linalg.norm(A, axis=0)
    norm = np.where(norm > 0, norm, 1.0)
    scaled = A / norm
    return np.linalg.pinv(scaled.T @ scaled) / np.outer(norm, norm)


def _finish(collective, algorithm, n, alpha, bandwidth, gamma, intervals, confidence, m, t,
            fitted, line_rate, r2_warn, loss, f_scale, reps, topology=None):
    lt, lf = np.log(t), np.log(np.maximum(fitted, 1e-300))
    ss_res = float(np.sum((lt - lf) ** 2))
    ss_tot = float(np.sum((lt - lt.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    intervals = {k: (float(a), float(b)) for k, (a, b) in intervals.items()}
    fit = CollectiveFit(collective=collective, algorithm=algorithm, n=n, alpha=float(alpha),
                        bandwidth=float(bandwidth),
                        gamma=None if gamma is None else float(gamma), intervals=intervals,
                        confidence=float(confidence), r2=float(r2), nbytes=m, seconds=t,
                        residuals=(fitted - t) / t, line_rate=line_rate, loss=str(loss),
                        f_scale=f_scale, repetitions=reps, topology=topology)
    if r2 < r2_warn:
        warnings.warn(f"{collective}: the fit explains the measured times poorly (R^2 "
                      f"{r2:.3f} < {r2_warn}); the largest relative residual is "
                      f"{np.max(np.abs(fit.residuals)):.0%}. Check for a noisy network or "
                      "too few repetitions before trusting predictions",
                      CalibrationWarning, stacklevel=3)
    if line_rate is not None and intervals["bandwidth"][0] > line_rate:
        hint = ("is the line rate right?" if topology is not None else
                "if the ranks span several nodes, the flat ring's bandwidth is not one "
                "NIC's (NVLink carries most steps): give the nodes' GPUs and NICs "
                "(gpus_per_node=, nics_per_node=; --gpus-per-node, --nics-per-node); else "
                "is the line rate right?")
        warnings.warn(f"{collective}: fitted bandwidth {format_bandwidth(bandwidth)} is above "
                      f"the line rate {format_bandwidth(line_rate)} even at the interval's low "
                      f"end; {hint} The utilization is clipped to 1",
                      CalibrationWarning, stacklevel=3)
    return fit


def unmeasured_intra_topology(devices, *, gpus_per_node, nics_per_node=1):
    """``(topology, note)`` of nodes whose intra-node link no log measured: the link of
    the GPU the logs ran on (:func:`scalemodel.hardware.gpu_of_device` of every device
    name; its spec's rate per direction, NVLink or PCIe, and its architecture) when they
    all name one built-in GPU, the :class:`~scalemodel.topology.Topology` defaults (V100
    NVLink) otherwise; a 0 s intra-node latency either way.

    Parameters
    ----------
    devices : iterable of str
        The device names of the logs' ranks (nccl-tests' ``# Rank ... device`` lines) [-].
    gpus_per_node : int
        Workers per node [workers].
    nics_per_node : int
        Network interfaces per node [NICs].

    Returns
    -------
    tuple
        The :class:`~scalemodel.topology.Topology` and a sentence saying where its link
        comes from [-].
    """
    from ..hardware import get_gpu, gpu_of_device

    if isinstance(devices, str):
        devices = [devices]
    try:
        devices = list(devices)
    except TypeError:
        raise ParameterTypeError("devices", devices, "device names (strings), as the logs' "
                                 "'# Rank ... device' lines give them") from None
    names = {gpu_of_device(d) for d in devices}
    how = ("and 0 s latency; give a log of all_reduce_perf on the "
           f"{gpus_per_node} GPUs of one node to measure it")
    if len(names) != 1 or None in names:
        topology = Topology(gpus_per_node=gpus_per_node, nics_per_node=nics_per_node)
        seen = ", ".join(sorted({str(d) for d in devices})) or "none named"
        return topology, (f"no all-reduce log inside one node: the intra-node link is taken "
                          f"at {topology.intra_bw / 1e9:g} Gbit/s (the default; the logs' "
                          f"devices, {seen}, are not one built-in GPU) {how}")
    spec = get_gpu(names.pop())
    topology = Topology(gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                        **spec.node_link())
    return topology, (f"no all-reduce log inside one node: the intra-node link is taken at "
                      f"the {spec.full_name}'s ({spec.intra_node_link}), "
                      f"{topology.intra_bw / 1e9:g} Gbit/s per direction from its spec, "
                      f"not measured, {how}")


def intra_node_topology(fit, *, gpus_per_node=None, nics_per_node=1,
                        devices=None) -> Topology:
    r"""The topology of nodes whose intra-node link was measured by ``fit``.

    ``fit`` is a ring all-reduce among ranks of **one** node, fitted without a topology
    (the transport step's intra-node sweep, or nccl-tests run inside one node). A ring
    inside one node moves :math:`2\frac{g-1}{g} 8m` bits over every GPU's link in
    :math:`2(g-1)` steps, which is eq. :eq:`fit-model` itself, so its latency is the
    intra-node step latency and its bandwidth the rate of one GPU's intra-node link per
    direction: exactly :class:`~scalemodel.topology.Topology`'s ``intra_alpha`` and
    ``intra_bw``.

    Parameters
    ----------
    fit : CollectiveFit
        An all-reduce fitted with the ring model and no topology [-].
    gpus_per_node : int, optional
        Workers per node; the fit's ``n`` by default (a sweep over every GPU of the
        node) [workers].
    nics_per_node : int
        Network interfaces per node [NICs].
    devices : iterable of str, optional
        The device names of the logs' ranks: when they all name one built-in GPU, its
        architecture and link type are the topology's (NCCL's latencies depend on them);
        else the :class:`~scalemodel.topology.Topology` defaults [-].

    Returns
    -------
    Topology
        With ``intra_bw`` = the fitted bandwidth [bits/s] and ``intra_alpha`` = the
        fitted latency [s].
    """
    from ..hardware import get_gpu, gpu_of_device

    if not isinstance(fit, CollectiveFit):
        raise ParameterTypeError("fit", fit, "a CollectiveFit of an intra-node all-reduce")
    if fit.collective != "all_reduce" or fit.algorithm != "ring" or fit.topology is not None:
        raise InvalidParameterError("fit", f"{fit.collective} ({fit.algorithm}"
                                    f"{', with a topology' if fit.topology else ''})",
                                    "a ring all-reduce inside one node, fitted without a "
                                    "topology")
    g = fit.n if gpus_per_node is None else gpus_per_node
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < fit.n:
        raise InvalidParameterError("gpus_per_node", gpus_per_node,
                                    f"an integer >= the {fit.n} ranks of the intra-node fit")
    names = {gpu_of_device(d) for d in ([devices] if isinstance(devices, str)
                                        else devices or ())}
    kind = {}
    if len(names) == 1 and None not in names:  # its architecture and link, not its rate
        link = get_gpu(names.pop()).node_link()
        kind = {k: link[k] for k in ("arch", "intra_link") if k in link}
    return Topology(gpus_per_node=int(g), nics_per_node=nics_per_node,
                    intra_bw=fit.bandwidth, intra_alpha=fit.alpha, **kind)


def cluster_from_fits(fits, *, name, line_rate=None, provenance=None,
                      collective="all_reduce", reduction=None,
                      saturation=0.05, intra=None) -> ClusterProfile:
    r"""A cluster profile from one fit, or from fits at several line rates.

    Parameters
    ----------
    fits : CollectiveFit or sequence of CollectiveFit
        Fits of the transport; with several line rates, one per rate [-].
    name : str
        Cluster name [-].
    line_rate : float or str, optional
        Line rate of fits that carry none [bits/s]. Without any line rate the fitted
        bandwidth is taken as the line rate (utilization 1) and the profile says so.
    provenance : dict, optional
        Where the measurements come from [-].
    collective : str
        Which fits to use when ``fits`` mixes collectives [-]; the all-reduce by default,
        as the gradients travel in all-reduces. When none of the fits is of this
        collective, all fits are used (they must then share one collective).
    reduction : ReductionCost, optional
        Reduction cost to store with the cluster [-].
    saturation : float
        Relative gain of achieved bandwidth below which the two fastest line rates count
        as saturated (see Notes) [-].
    intra : CollectiveFit, optional
        The all-reduce fitted inside one node (see :func:`intra_node_topology`), when
        the world spans nodes [-].

    Returns
    -------
    ClusterProfile
        With ``intervals`` and ``extra["fits"]`` (every fit's dict: its measured sizes,
        median times and residuals), ``extra["confidence"]`` and, with several rates,
        ``extra["achieved_bandwidth"]``. Fits made with a topology give the cluster that
        topology (they must share it); ``intra`` adds ``extra["intra_node_fit"]`` and the
        intervals ``intra_bw`` [bits/s] and ``intra_alpha`` [s], and gives the topology
        when the fits have none.

    Notes
    -----
    - ``alpha`` is the median of the fits' latencies; its interval the hull of theirs.
    - One line rate :math:`B`: ``utilization`` :math:`u = \min(1, B_\text{eff}/B)`, its
      interval from the bandwidth's.
    - Several line rates :math:`B_1 < \dots < B_k`: a utilization table
      :math:`u_j = \min(1, B_{\text{eff},j}/B_j)` (interpolated in :math:`\log B` by
      :class:`~scalemodel.ClusterProfile`), with per-row intervals in
      ``intervals["table_utilization"] = ([lo_1, ...], [hi_1, ...])``; ``utilization``
      is :math:`u_k`. The table is clamped at its ends, so above :math:`B_k` the achieved
      bandwidth would keep growing as :math:`u_k B`. When it has stopped growing
      already, :math:`B_{\text{eff},k} < (1 + \text{saturation})\,B_{\text{eff},k-1}`,
      the profile also gets a ``ceiling`` :math:`C = \max(B_{\text{eff},k-1},
      B_{\text{eff},k})`, with the hull of the two fits' bandwidth intervals as its
      interval: the transport, not the link, binds (Zhang et al., arXiv:2006.10103).
    """
    fits = _chosen_fits(fits, collective)
    if not (0 <= saturation < 1):
        raise InvalidParameterError("saturation", saturation, "in [0, 1)")
    prov = dict(provenance or {})
    prov.setdefault("source", "scalemodel.calibrate.fit.cluster_from_fits")
    if line_rate is not None:
        line_rate = one_rate(line_rate, "line_rate")
        fits = [f if f.line_rate is not None else attrs.evolve(f, line_rate=line_rate)
                for f in fits]
    extra = {"fits": [f.to_dict() for f in fits], "confidence": fits[0].confidence,
             "collective": fits[0].collective}
    topology = _shared_topology(fits)
    a_extra = {}
    if intra is not None:
        topology, a_extra = _with_intra(intra, topology, extra)
    alpha = float(np.median([f.alpha for f in fits]))
    a_iv = (float(min(f.intervals["alpha"][0] for f in fits)),
            float(max(f.intervals["alpha"][1] for f in fits)))
    rated = [f for f in fits if f.line_rate is not None]
    if not rated:
        f = fits[0]
        extra["fitted_bandwidth"] = f.bandwidth
        prov["note"] = ("no line rate was given: the fitted bandwidth is taken as the line "
                        "rate (utilization 1); pass bw=fitted_bandwidth or give --line-rate")
        # the bandwidth's interval kept, as a utilization of that line rate (below 1 only)
        u_lo = max(1e-9, min(1.0, f.intervals["bandwidth"][0] / f.bandwidth))
        return ClusterProfile(name=name, alpha=alpha, utilization=1.0, reduction=reduction,
                              intervals={"alpha": a_iv, "utilization": (u_lo, 1.0),
                                         **a_extra}, provenance=prov,
                              extra=extra, topology=topology)
    rated.sort(key=lambda f: f.line_rate)
    rates = np.array([f.line_rate for f in rated])
    if np.any(np.diff(rates) <= 0):
        raise InvalidParameterError("fits", [f.line_rate for f in rated],
                                    "one fit per line rate (two share a rate)")
    if len(rated) == 1:
        f = rated[0]
        extra["fitted_bandwidth"] = f.bandwidth
        return ClusterProfile(name=name, alpha=alpha, utilization=f.utilization,
                              reduction=reduction, topology=topology,
                              intervals={"alpha": a_iv, "utilization": _u_interval(f),
                                         **a_extra},
                              provenance=prov, extra=extra)
    return _rate_table_cluster(rated, rates, name, alpha, a_iv, a_extra, saturation,
                               reduction, prov, extra, topology)


def _chosen_fits(fits, collective):
    """The fits of ``collective`` (all of them when none is, if they share one
    collective); raises on anything but CollectiveFits."""
    if isinstance(fits, CollectiveFit):
        fits = [fits]
    fits = list(fits)
    if not fits or not all(isinstance(f, CollectiveFit) for f in fits):
        raise InvalidParameterError("fits", fits, "one CollectiveFit or a list of them")
    chosen = [f for f in fits if f.collective == collective]
    if not chosen:
        kinds = sorted({f.collective for f in fits})
        if len(kinds) > 1:
            raise InvalidParameterError("collective", collective,
                                        f"no fit of it among {kinds}; pick one of those")
        chosen = fits
    return chosen


def _shared_topology(fits):
    """The one topology the fits were made with (None: without); raises when they
    differ."""
    topos = {f.topology for f in fits}
    if len(topos) > 1:
        raise InvalidParameterError("fits", [f.topology for f in fits],
                                    "fits made with one topology (or all without)")
    return topos.pop()


def _with_intra(intra, topology, extra):
    """Add the intra-node fit: (topology, its intervals); it gives the topology when the
    fits have none and must match theirs otherwise; stores its dict in ``extra``."""
    made = intra_node_topology(intra, **({} if topology is None else {
        "gpus_per_node": topology.gpus_per_node,
        "nics_per_node": topology.nics_per_node}))
    if topology is None:
        topology = made
    elif not (math.isclose(topology.intra_bw, made.intra_bw, rel_tol=1e-9)
              and math.isclose(topology.intra_alpha, made.intra_alpha, rel_tol=1e-9,
                               abs_tol=1e-15)):
        raise InvalidParameterError("intra", str(intra), "the fit the topology of "
                                    "fits was made from (its intra_bw and intra_alpha)")
    extra["intra_node_fit"] = intra.to_dict()
    a_extra = {"intra_bw": tuple(intra.intervals["bandwidth"]),
               "intra_alpha": tuple(intra.intervals["alpha"])}
    return topology, a_extra


def _u_interval(f):
    """A fit's utilization interval, its bandwidth interval over its line rate, in
    [1e-9, 1] [-]."""
    lo, hi = f.intervals["bandwidth"]
    return (max(1e-9, min(1.0, lo / f.line_rate)), min(1.0, hi / f.line_rate))


def _rate_table_cluster(rated, rates, name, alpha, a_iv, a_extra, saturation, reduction,
                        prov, extra, topology):
    """The cluster of fits at several line rates: a utilization table, and a ceiling
    when the two fastest rates are saturated."""
    achieved = np.array([f.bandwidth for f in rated])
    util = np.minimum(1.0, achieved / rates)
    u_ivs = [_u_interval(f) for f in rated]
    intervals = {"alpha": a_iv, "utilization": u_ivs[-1],
                 "table_utilization": ([lo for lo, _ in u_ivs], [hi for _, hi in u_ivs]),
                 **a_extra}
    ceiling = None
    if achieved[-1] < (1.0 + saturation) * achieved[-2]:
        ceiling = float(max(achieved[-1], achieved[-2]))
        intervals["ceiling"] = (
            float(min(rated[-1].intervals["bandwidth"][0], rated[-2].intervals["bandwidth"][0])),
            float(max(rated[-1].intervals["bandwidth"][1], rated[-2].intervals["bandwidth"][1])))
    extra["achieved_bandwidth"] = {"line_rate": rates.tolist(), "bandwidth": achieved.tolist()}
    return ClusterProfile(name=name, alpha=alpha, utilization=float(util[-1]), ceiling=ceiling,
                          table_line_rate=rates, table_utilization=util, reduction=reduction,
                          intervals=intervals, provenance=prov, extra=extra,
                          topology=topology)
