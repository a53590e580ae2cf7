r"""Scaling factor and iteration time of data-parallel training.

The scaling factor of :math:`n` workers is the single-worker iteration time over the
:math:`n`-worker iteration time at a fixed per-worker batch (weak scaling):

.. math::
   :label: scaling-factor

   \mathrm{SF}(n) = \frac{T_1}{T_n}
   = \frac{\text{throughput}(n)}{n \cdot \text{throughput}(1)} ,
   \qquad T_1 = T_f + T_b + T_u ,

with :math:`T_n` from equation :eq:`iteration`. Zhang et al. (arXiv:2006.10103) define it as
:math:`t_\text{iter} / (t_\text{iter} + \text{overhead})` where the overhead is how far the
last all-reduce ends past the end of backward; since :math:`T_n = T_1 + \max(0, F_K - T_b)`
the two are the same number.
"""

from __future__ import annotations

import attrs
import numpy as np

from .collectives import CollectiveOptions, collective_cost, resolve_algorithm
from .cluster import load_cluster
from .exceptions import InvalidParameterError, ParameterTypeError
from .fusion import resolve_fusion
from .overlap import UpperEnvelope, overlap_lines
from .profiles import WorkloadProfile, load_profile
from .units import (check_count, check_fraction, check_nonnegative, check_ratio,
                    parse_bandwidth)

__all__ = ["scaling_factor", "iteration_time", "IterationTime", "Scenario"]

BINDINGS = ("compute", "latency", "bandwidth", "overhead")
"""What can bind an iteration: hidden communication (``compute``), or the largest part of
the communication on the critical path: message ``latency``, wire time (``bandwidth``),
or ``overhead`` (reductions, encode/decode, intra-node copies)."""


@attrs.frozen(eq=False)
class Scenario:
    """A workload with its fusion, collective and network constants, ready to evaluate.

    Build it with :meth:`Scenario.build`; it caches one line set (and its envelope) per
    worker count, so repeated evaluations cost one binary search per point.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload.
    algorithm : str
        Collective algorithm name.
    fusion : object
        Fusion policy.
    options : CollectiveOptions
        Latency and topology constants.
    codec_cost : float
        Encode plus decode time per byte of uncompressed gradient, paid on the
        critical path whenever the compression ratio exceeds 1 [s/byte].
    cluster : ClusterProfile or None
        Calibrated transport: its latency, achieved bandwidth and reduction cost.
    """

    profile: WorkloadProfile
    algorithm: str
    fusion: object
    options: CollectiveOptions
    codec_cost: float = 0.0
    cluster: object = None
    _buckets: object = attrs.field(default=None, init=False)
    _cache: dict = attrs.field(factory=dict, init=False)

    @classmethod
    def build(cls, model, *, algorithm="ring", fusion="ddp", alpha=0.0, codec_cost=0.0,
              gpus_per_node=8, intra_bw=2.4e12, intra_alpha=0.0, ps_servers=None,
              cluster=None):
        """Validate the arguments and make a scenario; see :func:`scaling_factor`."""
        profile = load_profile(model)
        if cluster is not None:
            cluster = load_cluster(cluster)
            if alpha:
                raise InvalidParameterError("alpha", alpha, "give alpha or cluster, not both",
                                            "The cluster profile carries the latency")
            alpha = cluster.alpha
            if cluster.reduction is not None:
                profile = attrs.evolve(profile, reduction=cluster.reduction)
            if cluster.overlap < 1.0:  # eq. (overlap-efficiency) of scalemodel.cluster
                eta, r = cluster.overlap, profile.tensor_ready
                late = np.maximum.accumulate(eta * r + (1.0 - eta) * profile.backward_time)
                profile = attrs.evolve(profile, tensor_ready=np.minimum(
                    late, profile.backward_time))
        return cls(
            cluster=cluster,
            profile=profile,
            algorithm=resolve_algorithm(algorithm),
            fusion=resolve_fusion(fusion),
            options=CollectiveOptions(alpha=alpha, gpus_per_node=gpus_per_node,
                                      intra_bw=intra_bw, intra_alpha=intra_alpha,
                                      ps_servers=ps_servers),
            codec_cost=float(check_nonnegative(codec_cost, "codec_cost")),
        )

    @property
    def buckets(self):
        """The buckets the fusion policy makes of the profile's gradients."""
        if self._buckets is None:
            p = self.profile
            object.__setattr__(self, "_buckets",
                               self.fusion.buckets(p.tensor_bytes, p.tensor_ready))
        return self._buckets

    def lines(self, n: int, compressed: bool = False):
        """:class:`~scalemodel.overlap.OverlapLines` and their envelope for ``n`` workers.

        ``compressed`` adds the encode/decode cost (paid only when the ratio is > 1).
        """
        key = (int(n), bool(compressed) and self.codec_cost > 0)
        if key not in self._cache:
            b = self.buckets
            cost = collective_cost(self.algorithm, b.nbytes, key[0],
                                   reduction=self.profile.reduction, options=self.options)
            overhead = cost.overhead
            if key[1] and key[0] > 1:
                overhead = overhead + self.codec_cost * b.nbytes
            lines = overlap_lines(b.ready, cost.latency, overhead, cost.bits,
                                  self.profile.backward_time)
            self._cache[key] = (lines, UpperEnvelope(lines.intercept, lines.slope))
        return self._cache[key]

    def iteration_times(self, n, x, compressed):
        """:math:`T_n` [s] at ``x = 1/(u bw r)`` [s/bit], vectorized.

        ``n`` (int array), ``x`` and ``compressed`` (bool array) broadcast together; one
        envelope is evaluated per distinct ``n`` (and compressed flag, when encoding costs
        time).
        """
        n = np.asarray(n)
        compressed = np.asarray(compressed) & (self.codec_cost > 0)
        shape = np.broadcast_shapes(n.shape, np.shape(x), compressed.shape)
        x = np.broadcast_to(x, shape)
        out = np.empty(shape)
        for nv in np.unique(n):
            for flag in np.unique(compressed):
                env = self.lines(int(nv), bool(flag))[1]
                part = (n == nv) & (compressed == flag)
                if part.all():
                    out[...] = env(x)
                else:
                    part = np.broadcast_to(part, shape)
                    out[part] = env(x[part])
        p = self.profile
        return p.forward_time + out + p.update_time


def effective_utilization(scenario, bw, utilization):
    """Utilization [-] times the cluster's achieved fraction of line rate ``bw`` [bits/s]."""
    if scenario.cluster is None:
        return utilization
    u = utilization * scenario.cluster.utilization_at(bw)
    return float(u) if np.ndim(u) == 0 else u


def _prepare(n, bw, utilization, compression):
    n = check_count(n, "n")
    bw = parse_bandwidth(bw, "bw")
    u = check_fraction(utilization, "utilization")
    r = check_ratio(compression, "compression")
    return n, bw, u, r


def scaling_factor(model, n, bw, *, utilization=1.0, compression=1.0, algorithm="ring",
                   fusion="ddp", alpha=0.0, codec_cost=0.0, gpus_per_node=8,
                   intra_bw=2.4e12, intra_alpha=0.0, ps_servers=None, cluster=None):
    r"""Scaling factor of data-parallel training, equation :eq:`scaling-factor`.

    Any of ``n``, ``bw``, ``utilization`` and ``compression`` may be an array; they
    broadcast together (numpy rules) and the result is an array of their shape, computed
    in one vectorized pass (one envelope per distinct ``n``).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        A built-in profile name (:func:`~scalemodel.list_profiles`), a profile file, or a
        profile object [-].
    n : int or array_like of int
        Number of workers, >= 1 [workers].
    bw : float, str or array_like
        Line rate of each worker's network link; strings such as ``"10Gbps"`` are
        accepted (see :func:`~scalemodel.parse_bandwidth`) [bits/s].
    utilization : float or array_like
        Fraction of the line rate the transport achieves, in (0, 1] [-].
    compression : float or array_like
        Compression ratio r >= 1 dividing the bytes on the wire [-].
    algorithm : str
        Collective: ``"ring"``, ``"tree"``, ``"halving-doubling"``, ``"hierarchical"``,
        ``"allgather"`` or ``"ps"`` [-].
    fusion : str or fusion policy
        ``"ddp"`` (PyTorch DDP buckets, the default), ``"horovod"`` or ``"none"`` [-].
    alpha : float
        Per-message network latency; 0 as in the paper's what-if analysis [s].
    codec_cost : float
        Encode + decode time per uncompressed gradient byte when compression > 1 [s/byte].
    gpus_per_node : int
        Workers per node, for ``"hierarchical"`` [workers].
    intra_bw : float or str
        Intra-node link rate, for ``"hierarchical"`` [bits/s].
    intra_alpha : float
        Intra-node latency, for ``"hierarchical"`` [s].
    ps_servers : int or None
        Dedicated parameter servers for ``"ps"``; None means co-located shards [servers].
    cluster : ClusterProfile, str or os.PathLike, optional
        A calibrated cluster (object or JSON file): supplies the latency ``alpha``, the
        achieved fraction of each line rate (which ``utilization`` then multiplies) and,
        when it has one, the reduction cost. See :mod:`scalemodel.cluster`.

    Returns
    -------
    float or numpy.ndarray
        Scaling factor in (0, 1] [-].

    Examples
    --------
    >>> import scalemodel
    >>> round(scalemodel.scaling_factor("resnet50", n=64, bw="100Gbps", fusion="horovod"), 3)
    0.99...
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    sc = Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                        codec_cost=codec_cost, gpus_per_node=gpus_per_node, intra_bw=intra_bw,
                        intra_alpha=intra_alpha, ps_servers=ps_servers, cluster=cluster)
    u = effective_utilization(sc, bw, u)
    x = 1.0 / (np.multiply(np.multiply(u, bw), r))
    t = sc.iteration_times(n, x, np.asarray(r) > 1)
    sf = sc.profile.iteration_time / t
    return float(sf) if sf.ndim == 0 else sf


@attrs.frozen
class IterationTime:
    """Where the time of one iteration goes.

    Attributes
    ----------
    forward : float
        Forward pass and everything before backward [s].
    backward : float
        Backward pass [s].
    exposed_communication : float
        Communication that ends after backward, i.e. not hidden by it [s].
    update : float
        Optimizer step [s].
    total : float
        forward + backward + exposed_communication + update [s].
    communication : float
        Total time the channel is busy, hidden or not [s].
    scaling_factor : float
        Single-worker over this iteration time [-].
    n_buckets : int
        Messages per iteration [-].
    binding : str
        ``"compute"`` when communication is hidden, else the largest part of the
        communication on the critical path: ``"latency"``, ``"bandwidth"`` or
        ``"overhead"``.
    critical_parts : dict
        The critical path's communication split into latency, bandwidth (wire) and
        overhead [s]; empty when communication is hidden.
    """

    forward: float
    backward: float
    exposed_communication: float
    update: float
    total: float
    communication: float
    scaling_factor: float
    n_buckets: int
    binding: str
    critical_parts: dict


def _binding(lines, j, x):
    """What binds when line ``j`` of ``lines`` is the critical one at ``x``."""
    value = lines.intercept[j] + lines.slope[j] * x
    if j == 0 or value <= lines.intercept[0] * (1 + 1e-12):
        # the backward pass itself ends last (ties included, e.g. n = 1): compute binds
        return "compute", {}
    parts = {"latency": float(lines.latency[j]), "bandwidth": float(lines.bits[j] * x),
             "overhead": float(lines.overhead[j])}
    return max(parts, key=parts.get), parts


def iteration_time(model, n, bw, *, utilization=1.0, compression=1.0, algorithm="ring",
                   fusion="ddp", alpha=0.0, codec_cost=0.0, gpus_per_node=8,
                   intra_bw=2.4e12, intra_alpha=0.0, ps_servers=None,
                   cluster=None) -> IterationTime:
    """Breakdown of one iteration for one configuration (scalars only).

    Parameters
    ----------
    model, n, bw, utilization, compression, algorithm, fusion, alpha, codec_cost, gpus_per_node, intra_bw, intra_alpha, ps_servers, cluster
        As in :func:`scaling_factor`, scalars only: ``n`` [workers], ``bw`` [bits/s],
        ``utilization`` [-], ``compression`` [-], ``alpha`` [s], ``codec_cost``
        [s/byte], ``gpus_per_node`` [workers], ``intra_bw`` [bits/s], ``intra_alpha``
        [s], ``ps_servers`` [servers].

    Returns
    -------
    IterationTime
        Forward, backward, exposed communication and update [s], and what binds.
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    for name, v in (("n", n), ("bw", bw), ("utilization", u), ("compression", r)):
        if np.ndim(v):
            raise ParameterTypeError(name, v, "a scalar (iteration_time describes one "
                                     "configuration; use scaling_factor for arrays)")
    sc = Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                        codec_cost=codec_cost, gpus_per_node=gpus_per_node, intra_bw=intra_bw,
                        intra_alpha=intra_alpha, ps_servers=ps_servers, cluster=cluster)
    p = sc.profile
    u = effective_utilization(sc, bw, u)
    x = 1.0 / (u * bw * r)
    lines, env = sc.lines(n, r > 1)
    end = float(env(x))
    j = int(env.argmax(x))
    binding, parts = _binding(lines, j, x)
    busy = float(lines.latency[1] + lines.overhead[1] + lines.bits[1] * x) if n > 1 else 0.0
    total = p.forward_time + end + p.update_time
    return IterationTime(
        forward=p.forward_time, backward=p.backward_time,
        exposed_communication=max(0.0, end - p.backward_time), update=p.update_time,
        total=total, communication=busy, scaling_factor=p.iteration_time / total,
        n_buckets=len(sc.buckets), binding=binding, critical_parts=parts)
