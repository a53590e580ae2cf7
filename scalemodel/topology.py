r"""Cluster topology: GPUs and NICs per node, and the intra-node link.

Real data-parallel clusters put :math:`g` GPUs in a node that share :math:`\nu` network
interfaces (NICs) and talk to each other over a faster intra-node link (NVLink, PCIe,
Infinity Fabric). A :class:`Topology` says so; every collective in
:mod:`scalemodel.collectives` uses it:

- *No topology* (``gpus_per_node=None``, the default without a cluster): every worker has
  its own link at the line rate, as in the what-if analysis of Zhang et al.
  (arXiv:2006.10103). This was scalemodel's only model before topologies existed.
- *A topology*: ``bw`` is **one NIC's** line rate. A run of :math:`n` workers spans
  :math:`m = \lceil n / g \rceil` nodes; a run that fits in one node (:math:`m = 1`) never
  touches a NIC.

The keywords ``gpus_per_node``, ``nics_per_node``, ``intra_bw`` and ``intra_alpha`` of every
call default to ``None``, meaning "the cluster's value, else the default below": a
prediction with a fitted ``cluster=`` uses that cluster's topology unless the caller
passes one explicitly (:func:`resolve_topology`). Without a cluster topology, a profile
derived from FLOPs for a built-in GPU starts from that GPU's link and architecture
(:meth:`~scalemodel.GPUSpec.node_link`, :func:`~scalemodel.efficiency.gpu_topology`)
in place of the V100 defaults below.
"""

from __future__ import annotations

import functools
import math

import attrs

from .exceptions import ParameterTypeError, UnknownNameError
from .nccl import NCCL_ARCHS
from .units import check_count, check_nonnegative, parse_bandwidth, parse_duration

__all__ = ["Topology", "resolve_topology", "DEFAULT_INTRA_BW", "HIERARCHICAL_GPUS_PER_NODE"]

DEFAULT_INTRA_BW = 2.4e12
"""Default intra-node link rate: 2.4e12 bits/s = 300 GB/s, the aggregate NVLink 2.0
bandwidth of a V100 SXM2 (NVIDIA Tesla V100 datasheet) [bits/s]."""

HIERARCHICAL_GPUS_PER_NODE = 8
"""GPUs per node the two-level all-reduce assumes when no topology is given: 8, as on the
p3dn / DGX-1 servers of Zhang et al. [workers]."""


def _scalar_int(value, name):
    v = check_count(value, name)
    if not isinstance(v, int):
        raise ParameterTypeError(name, value, "a single integer >= 1")
    return v


def _opt_count(value, name):
    return None if value is None else _scalar_int(value, name)


def _bw(value):
    v = parse_bandwidth(value, "intra_bw")
    if not isinstance(v, float):
        raise ParameterTypeError("intra_bw", value, "a single line rate")
    return v


def _choice(value, name, known):
    if not isinstance(value, str):
        raise ParameterTypeError(name, value, "a string")
    key = value.strip().lower()
    if key not in known:
        raise UnknownNameError(name, value, known)
    return key


def _alpha(value):
    v = parse_duration(value, "intra_alpha")  # seconds, or with a unit ('2us'), as alpha
    if not isinstance(v, float):
        raise ParameterTypeError("intra_alpha", value, "a single latency [s]")
    return v


@attrs.frozen
class Topology:
    """Where the workers sit: GPUs and NICs per node and the intra-node link.

    Parameters
    ----------
    gpus_per_node : int or None
        Workers (GPUs) per node; ``None`` means every worker has its own network link
        (no topology) [workers].
    nics_per_node : int
        Network interfaces per node, each at the line rate ``bw``; the node's traffic is
        spread evenly over them [NICs].
    intra_bw : float or str
        Achieved rate of one GPU's intra-node link, per direction [bits/s].
    intra_alpha : float
        Latency of one intra-node step [s].
    arch : str
        GPU architecture (``"volta"``, ``"ampere"``, ``"hopper"``, ``"blackwell"``), for
        NCCL's choice of algorithm (``algorithm="nccl"``) [-].
    intra_link : str
        ``"nvlink"`` or ``"pci"``, for NCCL's choice of algorithm [-].
    """

    gpus_per_node: int | None = attrs.field(
        default=None, converter=lambda v: _opt_count(v, "gpus_per_node"))
    nics_per_node: int = attrs.field(default=1,
                                     converter=lambda v: _scalar_int(v, "nics_per_node"))
    intra_bw: float = attrs.field(default=DEFAULT_INTRA_BW, converter=_bw)
    intra_alpha: float = attrs.field(default=0.0, converter=_alpha)
    arch: str = attrs.field(default="volta", converter=lambda v: _choice(v, "arch", NCCL_ARCHS))
    intra_link: str = attrs.field(default="nvlink",
                                  converter=lambda v: _choice(v, "intra_link", ("nvlink", "pci")))

    @property
    def flat(self) -> bool:
        """True when every worker has its own link (no topology)."""
        return self.gpus_per_node is None

    def nodes(self, n: int) -> int:
        """Nodes a run of ``n`` workers spans: :math:`\\lceil n/g \\rceil`, or ``n`` when
        flat [nodes]."""
        if self.gpus_per_node is None:
            return int(n)
        return int(math.ceil(n / self.gpus_per_node))

    def to_dict(self) -> dict:
        """The topology as JSON-ready fields."""
        return {"gpus_per_node": self.gpus_per_node, "nics_per_node": self.nics_per_node,
                "intra_bw": self.intra_bw, "intra_alpha": self.intra_alpha,
                "arch": self.arch, "intra_link": self.intra_link}


def resolve_topology(cluster_topology=None, *, gpus_per_node=None, nics_per_node=None,
                     intra_bw=None, intra_alpha=None) -> Topology:
    """The topology of a call: explicit keywords, else the cluster's, else the defaults.

    Parameters
    ----------
    cluster_topology : Topology or None
        The calibrated cluster's topology, if any [-].
    gpus_per_node : int or None
        Workers per node; ``None`` keeps the cluster's (or no topology) [workers].
    nics_per_node : int or None
        NICs per node; ``None`` keeps the cluster's (or 1) [NICs].
    intra_bw : float, str or None
        Intra-node link rate; ``None`` keeps the cluster's (or
        :data:`DEFAULT_INTRA_BW`) [bits/s].
    intra_alpha : float or None
        Intra-node step latency; ``None`` keeps the cluster's (or 0) [s].

    Returns
    -------
    Topology
        The resolved topology.
    """
    base = cluster_topology if cluster_topology is not None else _DEFAULT
    if not isinstance(base, Topology):
        raise ParameterTypeError("topology", base, "a Topology")
    changes = tuple((k, type(v), v) for k, v in (
        ("gpus_per_node", gpus_per_node), ("nics_per_node", nics_per_node),
        ("intra_bw", intra_bw), ("intra_alpha", intra_alpha)) if v is not None)
    if not changes:
        return base
    try:
        return _evolved(base, changes)
    except TypeError:  # an unhashable value (an array): validated, and refused, uncached
        return attrs.evolve(base, **{k: v for k, _, v in changes})


_DEFAULT = Topology()


@functools.lru_cache(maxsize=256)
def _evolved(base, changes):
    """``base`` with ``changes`` (``(name, type, value)`` triples: the type keeps ``8`` and
    ``8.0`` apart), validated once per distinct question."""
    return attrs.evolve(base, **{k: v for k, _, v in changes})
