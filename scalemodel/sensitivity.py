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

With a calibrated cluster, :math:`x = 1/(u\, B_\text{eff}(B)\, r)`, so the bandwidth
derivative carries the elasticity of the achieved bandwidth,
:math:`\varepsilon_B = \varepsilon_u \cdot d\ln B_\text{eff}/d\ln B` (0 where the transport's
ceiling binds); where the intra-node link is the slowest (eq. :eq:`wire-max`), neither the
line rate nor the utilization matters (:math:`\varepsilon_B = \varepsilon_u = 0`) while the
ratio still does. The compute slowdown enters :math:`T_n` as a constant.
"""

from __future__ import annotations

import attrs
import numpy as np

from .model import Scenario, _prepare, effective_utilization, warn_unused_codec_cost

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
    settings : dict
        What the answer assumed (``Scenario.settings``: collective, fusion, sharding,
        tensor and pipeline parallelism, checkpointing, offload, topology, cluster) [-].
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
    settings: dict = attrs.field(factory=dict)


def sensitivities(model, n, bw, *, utilization=1.0, compression=1.0, alpha=None,
                  algorithm=None, fusion=None, codec_cost=0.0, gpus_per_node=None,
                  nics_per_node=None, intra_bw=None, intra_alpha=None, ps_servers=None,
                  cluster=None, sharding=None, activation_checkpointing=None, offload=None,
                  shard_group=None, tp=1, pp=1, microbatches=None,
                  virtual_stages=1, sequence_parallel=False) -> Sensitivities:
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
    alpha : float or None
        Per-message latency; ``None`` means the cluster's, else 0 [s].
    algorithm, fusion, codec_cost, gpus_per_node, nics_per_node, intra_bw, intra_alpha, ps_servers, cluster, sharding
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [s/byte], [workers], [NICs],
        [bits/s], [s], [servers], a cluster profile or file, [-].
    activation_checkpointing, offload, shard_group, tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [GPUs], [GPUs], [stages],
        [micro-batches], [chunks], [-]. With ``tp`` or ``pp``, ``n`` counts all GPUs and the answer is
        for the data-parallel dimension of ``n / (tp pp)`` replicas, as the scaling
        factor's; ``d_bw`` is per bit/s of the NIC line rate ``bw`` asked
        (:mod:`scalemodel.parallel`).

    Returns
    -------
    Sensitivities
        SF, its derivatives and elasticities, shaped like the broadcast inputs, and the
        settings assumed.

    Examples
    --------
    >>> import scalemodel
    >>> s = scalemodel.sensitivities("bert", 64, "10Gbps")
    >>> round(s.elasticity_bw, 3), s.elasticity_bw == s.elasticity_compression
    (0.811, True)
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    warn_unused_codec_cost(codec_cost, r)
    kw = dict(algorithm=algorithm, fusion=fusion, codec_cost=codec_cost,
              gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, intra_bw=intra_bw,
              ps_servers=ps_servers, cluster=cluster, sharding=sharding,
              activation_checkpointing=activation_checkpointing, offload=offload,
              shard_group=shard_group, tp=tp, pp=pp, microbatches=microbatches,
              virtual_stages=virtual_stages, sequence_parallel=sequence_parallel)
    sc = Scenario.build(model, alpha=alpha, intra_alpha=intra_alpha, **kw)
    counts = Scenario.build(model, alpha=1.0, intra_alpha=0.0, warn=False,  # latency counts
                            **kw)
    n, bw = sc.data_parallel(n, bw)  # scalemodel.parallel: replicas, one ring's rate
    alpha = sc.options.alpha
    p = sc.profile
    shape = np.broadcast_shapes(*(np.shape(v) for v in (n, bw, u, r)))
    nn, bb, uu, rr = (np.broadcast_to(np.asarray(v), shape) for v in (n, bw, u, r))
    u_eff = np.broadcast_to(np.asarray(effective_utilization(sc, bb, uu), float), shape)
    e_ach = (np.ones(shape) if sc.cluster is None
             else np.broadcast_to(np.asarray(sc.cluster.achieved_elasticity(bb)), shape))
    # in logs, so that extreme line rates (1e-300 bits/s) give finite, correct numbers
    log_x = -(np.log(u_eff) + np.log(bb) + np.log(rr))
    log_xe = np.empty(shape)
    net = np.empty(shape)  # 1 where the network (not the intra-node link) is the wire
    m = np.empty(shape)
    lam = np.empty(shape)
    rest = np.empty(shape)  # the critical line's constant part plus forward and update
    flags = (rr > 1) & (sc.codec_cost > 0)
    for nv in np.unique(nn):
        k1, k2 = sc.wire_map(int(nv))
        for flag in np.unique(flags):
            part = (nn == nv) & (flags == flag)
            if not part.any():
                continue
            lines, env = sc.lines(int(nv), bool(flag))
            if sc.sharding is not None:  # its lines depend on alpha: count on the same ones
                lat_count = sc.schedule(int(nv), bool(flag), alpha_counts=True).alpha_count
            else:
                lat_count = counts.lines(int(nv), bool(flag))[0].latency
            with np.errstate(divide="ignore"):
                l_net = np.log(k1) + log_x[part]
                l_intra = np.log(k2) - np.log(rr[part])
            lxe = np.maximum(l_net, l_intra)
            with np.errstate(over="ignore"):
                j = env.argmax(np.exp(lxe))
            log_xe[part] = lxe
            net[part] = np.where(l_net >= l_intra, 1.0, 0.0)
            m[part] = lines.slope[j]
            lam[part] = lat_count[j]
            rest[part] = sc.forward(int(nv)) + lines.intercept[j] + sc.update(int(nv))
    with np.errstate(divide="ignore"):
        log_wire = np.where(m > 0, np.log(np.where(m > 0, m, 1.0)) + log_xe, -np.inf)
        log_t = np.logaddexp(np.log(rest), log_wire)
    sf = np.exp(np.log(p.iteration_time) - log_t)
    share = np.exp(log_wire - log_t)  # wire share of the iteration on the critical path
    share_net = share * net
    inv_t = np.exp(-log_t)
    e_alpha = -lam * float(alpha) * inv_t + 0.0  # + 0.0: no negative zero

    def scaled(factor, per):
        """sf * factor / per, in logs (zero where factor is zero) [-]."""
        with np.errstate(divide="ignore"):
            return np.where(factor > 0, np.exp(np.log(sf) + np.log(np.where(
                factor > 0, factor, 1.0)) - np.log(per)), 0.0)

    def out(v):
        v = np.asarray(v, dtype=float)
        return float(v) if v.ndim == 0 else v

    return Sensitivities(
        scaling_factor=out(sf), d_bw=out(scaled(share_net * e_ach, bb) * sc.bw_scale),
        d_alpha=out(-sf * lam * inv_t + 0.0), d_utilization=out(scaled(share_net, uu)),
        d_compression=out(scaled(share, rr)), elasticity_bw=out(share_net * e_ach),
        elasticity_alpha=out(e_alpha), elasticity_utilization=out(share_net),
        elasticity_compression=out(share), settings=sc.settings())
