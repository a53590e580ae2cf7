r"""Analytic sensitivities of the scaling factor to bandwidth, latency, utilization and
compression.

On the active piece of the envelope (equation :eq:`iteration`) the iteration time is one
line, :math:`T_n = T_f + c_j + \lambda_j \alpha + m_j x + T_u` with
:math:`x = 1/(u B r)`, :math:`m_j` its wire bits [bit] and :math:`\lambda_j` the number of
message latencies on it. With :math:`\mathrm{SF} = T_1 / T_n`:

.. math::
   :label: sensitivities

   \frac{\partial\,\mathrm{SF}}{\partial B} = \frac{T_1\, m_j\, x}{T_n^2\, B}, \quad
   \frac{\partial\,\mathrm{SF}}{\partial u} = \frac{T_1\, m_j\, x}{T_n^2\, u}, \quad
   \frac{\partial\,\mathrm{SF}}{\partial r} = \frac{T_1\, m_j\, x}{T_n^2\, r}, \quad
   \frac{\partial\,\mathrm{SF}}{\partial \alpha} = -\frac{T_1\, \lambda_j}{T_n^2},

and the elasticities :math:`\varepsilon_p = \partial \ln \mathrm{SF} / \partial \ln p`,
which compare knobs of different units:

.. math::
   :label: elasticities

   \varepsilon_B = \varepsilon_u = \varepsilon_r = \frac{m_j\, x}{T_n}, \qquad
   \varepsilon_\alpha = -\frac{\lambda_j\, \alpha}{T_n} .

So doubling the bandwidth, the utilization or the ratio helps equally, by the share of
the iteration spent on the wire on the critical path. At a breakpoint of the envelope the
derivatives are those of the line that is highest just to the right (slower network): one
sided. Where communication is hidden (``compute`` binds) they are 0.
"""

from __future__ import annotations

import attrs
import numpy as np

from .model import Scenario, _prepare

__all__ = ["sensitivities", "Sensitivities"]


@attrs.frozen(eq=False)
class Sensitivities:
    """Result of :func:`sensitivities`: floats for scalar input, else arrays.

    Attributes
    ----------
    scaling_factor : float or numpy.ndarray
        SF [-].
    d_bw : float or numpy.ndarray
        dSF/dB [1/(bits/s)].
    d_alpha : float or numpy.ndarray
        dSF/dalpha [1/s].
    d_utilization : float or numpy.ndarray
        dSF/du [-].
    d_compression : float or numpy.ndarray
        dSF/dr [-].
    elasticity_bw, elasticity_utilization, elasticity_compression : float or numpy.ndarray
        d ln SF / d ln p (equal to each other: the wire share of the iteration) [-].
    elasticity_alpha : float or numpy.ndarray
        d ln SF / d ln alpha (<= 0) [-].
    """

    scaling_factor: object
    d_bw: object
    d_alpha: object
    d_utilization: object
    d_compression: object
    elasticity_bw: object
    elasticity_alpha: object
    elasticity_utilization: object
    elasticity_compression: object


def sensitivities(model, n, bw, *, utilization=1.0, compression=1.0, alpha=0.0,
                  algorithm="ring", fusion="ddp", codec_cost=0.0, gpus_per_node=8,
                  intra_bw=2.4e12, intra_alpha=0.0, ps_servers=None) -> Sensitivities:
    """Derivatives and elasticities of the scaling factor, eqs. :eq:`sensitivities` and
    :eq:`elasticities`; vectorized like :func:`~scalemodel.scaling_factor`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    n : int or array_like of int
        Number of workers [workers].
    bw : float, str or array_like
        Line rate [bits/s].
    utilization : float or array_like
        Fraction of the line rate achieved, in (0, 1] [-].
    compression : float or array_like
        Compression ratio >= 1 [-].
    alpha : float
        Per-message latency [s].
    algorithm, fusion, codec_cost, gpus_per_node, intra_bw, intra_alpha, ps_servers
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [s/byte], [workers],
        [bits/s], [s], [servers].

    Returns
    -------
    Sensitivities
        SF, its derivatives and elasticities, shaped like the broadcast inputs.

    Examples
    --------
    >>> import scalemodel
    >>> s = scalemodel.sensitivities("bert", 64, "10Gbps")
    >>> round(s.elasticity_bw, 3), s.elasticity_bw == s.elasticity_compression
    (0.804, True)
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    kw = dict(algorithm=algorithm, fusion=fusion, codec_cost=codec_cost,
              gpus_per_node=gpus_per_node, intra_bw=intra_bw, ps_servers=ps_servers)
    sc = Scenario.build(model, alpha=alpha, intra_alpha=intra_alpha, **kw)
    counts = Scenario.build(sc.profile, alpha=1.0, intra_alpha=0.0, **kw)  # latency counts
    p = sc.profile
    shape = np.broadcast_shapes(*(np.shape(v) for v in (n, bw, u, r)))
    nn, bb, uu, rr = (np.broadcast_to(np.asarray(v), shape) for v in (n, bw, u, r))
    x = 1.0 / (uu * bb * rr)
    m = np.empty(shape)
    lam = np.empty(shape)
    end = np.empty(shape)
    flags = (rr > 1) & (sc.codec_cost > 0)
    for nv in np.unique(nn):
        for flag in np.unique(flags):
            part = (nn == nv) & (flags == flag)
            if not part.any():
                continue
            lines, env = sc.lines(int(nv), bool(flag))
            lat_lines = counts.lines(int(nv), bool(flag))[0]
            j = env.argmax(x[part])
            m[part] = lines.slope[j]
            lam[part] = lat_lines.latency[j]
            end[part] = env(x[part])
    t = p.forward_time + end + p.update_time
    t1 = p.iteration_time
    sf = t1 / t
    wire = t1 * m * x / t**2
    share = m * x / t
    e_alpha = -lam * float(alpha) / t + 0.0  # + 0.0: no negative zero

    def out(v):
        v = np.asarray(v, dtype=float)
        return float(v) if v.ndim == 0 else v

    return Sensitivities(
        scaling_factor=out(sf), d_bw=out(wire / bb), d_alpha=out(-t1 * lam / t**2),
        d_utilization=out(wire / uu), d_compression=out(wire / rr),
        elasticity_bw=out(share), elasticity_alpha=out(e_alpha),
        elasticity_utilization=out(share), elasticity_compression=out(share))
