r"""Exact inverses of the scaling model: minimum compression ratio, required bandwidth.

For one worker count the iteration time is the upper envelope :math:`E(x)` of straight
lines in :math:`x = 1/(u B r)` (equation :eq:`iteration`). A target scaling factor
:math:`s^*` asks for :math:`T_f + E(x) + T_u \le T_1 / s^*`, i.e. :math:`E(x) \le L` with
:math:`L = T_1/s^* - T_f - T_u`. Since every line is non-decreasing in :math:`x`,

.. math::
   :label: x-star

   x^* = \min_{j:\,B_j > 0} \frac{L - R_j - A_j}{B_j},

feasible exactly when every line's intercept is at most :math:`L` (then :math:`x^* > 0`).
Hence

.. math::
   :label: inverses

   r_\min = \max\Big(1, \frac{1}{u B x^*}\Big), \qquad
   B_\min = \frac{1}{u r x^*} .

No root finding is needed; the results are exact up to rounding. When compression costs
encode/decode time (``codec_cost``), the lines for :math:`r > 1` include it, and
:math:`r = 1` (no encoding) is checked first.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .exceptions import ParameterTypeError
from .model import Scenario, _binding, effective_utilization
from .units import (check_count, check_fraction, check_ratio, format_bandwidth,
                    parse_bandwidth)

__all__ = ["min_compression", "required_bandwidth", "CompressionResult", "BandwidthResult",
           "DEFAULT_N", "DEFAULT_TARGET"]

DEFAULT_N = 64
"""Default worker count of the solvers: 64, the largest cluster in Zhang et al. [workers]."""

DEFAULT_TARGET = 0.9
"""Default target scaling factor of the solvers: 90 % of linear scaling [-]."""

_NUDGE = 1.0 + 1e-12  # step past the exact root so the target is met despite rounding


@attrs.frozen
class CompressionResult:
    """Result of :func:`min_compression`.

    Attributes
    ----------
    ratio : float
        Smallest compression ratio that reaches the target; 1.0 when none is needed,
        ``math.inf`` when no ratio does [-].
    feasible : bool
        Whether some ratio reaches the target.
    scaling_factor : float
        Scaling factor reached at ``ratio`` (at infinite compression when infeasible) [-].
    binding : str
        What binds at that point: ``"compute"``, ``"latency"``, ``"bandwidth"`` or
        ``"overhead"``.
    message : str
        One sentence for people.
    uncompressed_scaling_factor : float
        Scaling factor without compression [-].
    max_scaling_factor : float
        Limit of the scaling factor as the ratio grows without bound [-].
    critical_parts : dict
        Latency, bandwidth and overhead time on the critical path at ``ratio`` [s].
    n, bw, target, utilization : float
        The question asked: [workers], [bits/s], [-], [-].
    """

    ratio: float
    feasible: bool
    scaling_factor: float
    binding: str
    message: str
    uncompressed_scaling_factor: float
    max_scaling_factor: float
    critical_parts: dict
    n: int
    bw: float
    target: float
    utilization: float


@attrs.frozen
class BandwidthResult:
    """Result of :func:`required_bandwidth`.

    Attributes
    ----------
    bw : float
        Smallest line rate that reaches the target; ``math.inf`` when none does, 0.0 when
        any does (a single worker) [bits/s].
    feasible : bool
        Whether some line rate reaches the target.
    scaling_factor : float
        Scaling factor reached at ``bw`` (at infinite bandwidth when infeasible) [-].
    binding : str
        What binds at that point.
    message : str
        One sentence for people.
    max_scaling_factor : float
        Limit as the bandwidth grows without bound [-].
    critical_parts : dict
        Latency, bandwidth and overhead time on the critical path [s].
    n, target, compression, utilization : float
        The question asked: [workers], [-], [-], [-].
    """

    bw: float
    feasible: bool
    scaling_factor: float
    binding: str
    message: str
    max_scaling_factor: float
    critical_parts: dict
    n: int
    target: float
    compression: float
    utilization: float


def _scalar(name, value):
    if np.ndim(value):
        raise ParameterTypeError(name, value, "a scalar (the solvers answer one question; "
                                 "loop or use scaling_factor for grids)")
    return value


def _sf_at(sc, n, x, compressed):
    p = sc.profile
    lines, env = sc.lines(n, compressed)
    end = float(env(x))
    sf = p.iteration_time / (p.forward_time + end + p.update_time)
    binding, parts = _binding(lines, int(env.argmax(x)), x)
    return sf, binding, parts


def _why_not(binding, parts, limit, target):
    detail = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in parts.items() if k != "bandwidth")
    return (f"even unlimited {{what}} reaches only {limit:.3f} < target {target:g}: "
            f"{binding} binds ({detail} on the critical path)")


def _line_rate_for(sc, needed):
    """Line rate [bits/s] whose achieved bandwidth equals ``needed`` [bits/s] (``needed``
    itself without a cluster; inf when the cluster's ceiling is lower)."""
    cl = sc.cluster
    if cl is None:
        return needed
    if cl.max_achieved_bandwidth() < needed:
        return math.inf
    if cl.table_line_rate is None:
        return needed / cl.utilization  # below the ceiling the fraction is constant
    from scipy.optimize import brentq  # fallback: the table makes it piecewise in log(bw)

    def gap(t):
        return math.log(float(cl.achieved_bandwidth(math.exp(t)))) - math.log(needed)

    lo, hi = math.log(needed), math.log(needed / float(cl.table_utilization.min()))
    if gap(hi) < 0:  # ceiling reached just there
        hi = math.log(needed) + 50
    if gap(hi) < 0:
        return math.inf
    return math.exp(brentq(gap, lo, hi, xtol=1e-14, rtol=1e-13)) * _NUDGE


def min_compression(model, bw, *, n=DEFAULT_N, target=DEFAULT_TARGET, utilization=1.0,
                    algorithm="ring", fusion="ddp", alpha=0.0, codec_cost=0.0,
                    gpus_per_node=8, intra_bw=2.4e12, intra_alpha=0.0,
                    ps_servers=None, cluster=None) -> CompressionResult:
    """Smallest compression ratio whose scaling factor reaches ``target``, eq. :eq:`inverses`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Built-in profile name, profile file or profile [-].
    bw : float or str
        Line rate of each worker's link, e.g. ``10e9`` or ``"10Gbps"`` [bits/s].
    n : int
        Number of workers; default :data:`~scalemodel.solvers.DEFAULT_N` (64) [workers].
    target : float
        Scaling factor to reach, in (0, 1]; default
        :data:`~scalemodel.solvers.DEFAULT_TARGET` (0.9) [-].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    algorithm, fusion, alpha, codec_cost, gpus_per_node, intra_bw, intra_alpha, ps_servers, cluster
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [s], [s/byte], [workers],
        [bits/s], [s], [servers], a cluster profile or file.

    Returns
    -------
    CompressionResult
        ``ratio`` >= 1 (``math.inf`` with ``feasible=False`` when no ratio reaches the
        target), the scaling factor reached, and what binds.

    Examples
    --------
    >>> import scalemodel
    >>> res = scalemodel.min_compression("resnet50", "10Gbps", n=64, fusion="horovod")
    >>> res.feasible, res.ratio > 1
    (True, True)
    """
    n = _scalar("n", check_count(n, "n"))
    bw = _scalar("bw", parse_bandwidth(bw, "bw"))
    target = _scalar("target", check_fraction(target, "target"))
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    sc = Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                        codec_cost=codec_cost, gpus_per_node=gpus_per_node, intra_bw=intra_bw,
                        intra_alpha=intra_alpha, ps_servers=ps_servers, cluster=cluster)
    p = sc.profile
    u = effective_utilization(sc, bw, u)
    sf1, bind1, parts1 = _sf_at(sc, n, 1.0 / (u * bw), False)
    sf_inf, bind_inf, parts_inf = _sf_at(sc, n, 0.0, True)
    common = dict(uncompressed_scaling_factor=sf1, max_scaling_factor=sf_inf, n=n, bw=bw,
                  target=target, utilization=u)
    if sf1 >= target:
        return CompressionResult(
            ratio=1.0, feasible=True, scaling_factor=sf1, binding=bind1,
            message=(f"no compression needed: {p.name} on {n} workers at "
                     f"{format_bandwidth(bw)} already scales {sf1:.3f} >= {target:g}"),
            critical_parts=parts1, **common)
    level = p.iteration_time / target - p.forward_time - p.update_time
    x_star, _ = sc.lines(n, True)[1].max_x_below(level)
    if not x_star > 0:
        msg = _why_not(bind_inf, parts_inf, sf_inf, target).format(what="compression")
        return CompressionResult(ratio=math.inf, feasible=False, scaling_factor=sf_inf,
                                 binding=bind_inf, message="no compression ratio is enough: "
                                 + msg, critical_parts=parts_inf, **common)
    ratio = max(1.0, _NUDGE / (u * bw * x_star))
    sf, bind, parts = _sf_at(sc, n, 1.0 / (u * bw * ratio), True)
    return CompressionResult(
        ratio=ratio, feasible=True, scaling_factor=sf, binding=bind,
        message=(f"{p.name} on {n} workers at {format_bandwidth(bw)} needs {ratio:.3g}x "
                 f"compression to scale {target:g} (uncompressed: {sf1:.3f})"),
        critical_parts=parts, **common)


def required_bandwidth(model, *, n=DEFAULT_N, target=DEFAULT_TARGET, compression=1.0,
                       utilization=1.0, algorithm="ring", fusion="ddp", alpha=0.0,
                       codec_cost=0.0, gpus_per_node=8, intra_bw=2.4e12, intra_alpha=0.0,
                       ps_servers=None, cluster=None) -> BandwidthResult:
    """Smallest line rate whose scaling factor reaches ``target``, eq. :eq:`inverses`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Built-in profile name, profile file or profile [-].
    n : int
        Number of workers; default 64 [workers].
    target : float
        Scaling factor to reach, in (0, 1]; default 0.9 [-].
    compression : float
        Compression ratio >= 1 [-].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    algorithm, fusion, alpha, codec_cost, gpus_per_node, intra_bw, intra_alpha, ps_servers, cluster
        As in :func:`~scalemodel.scaling_factor`. With a cluster, ``bw`` is the line rate
        whose achieved bandwidth (eq. :eq:`achieved`) is enough; when the transport's
        ceiling is below what is needed, no line rate is.

    Returns
    -------
    BandwidthResult
        ``bw`` [bits/s] (``math.inf`` with ``feasible=False`` when no bandwidth is enough).

    Examples
    --------
    >>> import scalemodel
    >>> res = scalemodel.required_bandwidth("resnet50", n=64, target=0.9, fusion="horovod")
    >>> print(scalemodel.format_bandwidth(res.bw))
    24.39 Gbit/s
    """
    n = _scalar("n", check_count(n, "n"))
    target = _scalar("target", check_fraction(target, "target"))
    r = _scalar("compression", check_ratio(compression, "compression"))
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    sc = Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                        codec_cost=codec_cost, gpus_per_node=gpus_per_node, intra_bw=intra_bw,
                        intra_alpha=intra_alpha, ps_servers=ps_servers, cluster=cluster)
    p = sc.profile
    compressed = r > 1
    sf_inf, bind_inf, parts_inf = _sf_at(sc, n, 0.0, compressed)
    common = dict(max_scaling_factor=sf_inf, n=n, target=target, compression=r, utilization=u)
    level = p.iteration_time / target - p.forward_time - p.update_time
    x_star, _ = sc.lines(n, compressed)[1].max_x_below(level)
    if math.isinf(x_star):
        return BandwidthResult(bw=0.0, feasible=True, scaling_factor=sf_inf, binding=bind_inf,
                               message="any bandwidth reaches the target (nothing to "
                               "communicate)", critical_parts=parts_inf, **common)
    if not x_star > 0:
        msg = _why_not(bind_inf, parts_inf, sf_inf, target).format(what="bandwidth")
        return BandwidthResult(bw=math.inf, feasible=False, scaling_factor=sf_inf,
                               binding=bind_inf, message="no bandwidth is enough: " + msg,
                               critical_parts=parts_inf, **common)
    bw = _line_rate_for(sc, _NUDGE / (u * r * x_star))
    if math.isinf(bw):
        ceiling = sc.cluster.max_achieved_bandwidth()
        return BandwidthResult(
            bw=math.inf, feasible=False, scaling_factor=_sf_at(sc, n, 1 / (u * ceiling * r),
                                                               compressed)[0],
            binding="bandwidth", message=(
                f"no line rate is enough: the transport's ceiling "
                f"{format_bandwidth(ceiling)} is below the {format_bandwidth(1 / (u * r * x_star))}"
                f" achieved bandwidth needed"), critical_parts={}, **common)
    u_eff = effective_utilization(sc, bw, u)
    sf, bind, parts = _sf_at(sc, n, 1.0 / (u_eff * bw * r), compressed)
    return BandwidthResult(
        bw=bw, feasible=True, scaling_factor=sf, binding=bind,
        message=(f"{p.name} on {n} workers needs {format_bandwidth(bw)} per worker to scale "
                 f"{target:g} (compression {r:g}x, utilization {u:g})"),
        critical_parts=parts, **common)
