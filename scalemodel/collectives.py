r"""Closed-form cost models of collective operations (alpha-beta-gamma form).

Every collective's time on a message of :math:`S` bytes among :math:`n` workers is written

.. math::
   :label: alpha-beta-gamma

   T(S, n) = \underbrace{\lambda(n)\,\alpha}_{\text{latency}}
           + \underbrace{\Gamma(S, n)}_{\text{overhead}}
           + \underbrace{W(S, n)\;\frac{1}{u \, B \, r}}_{\text{wire}}

with :math:`\alpha` the per-message latency [s], :math:`W` the bits each worker's link
carries [bit], :math:`B` the line rate [bits/s], :math:`u \in (0, 1]` the achieved
utilization of that line rate, :math:`r \ge 1` the compression ratio that divides the
bytes on the wire, and :math:`\Gamma` the time of the element-wise reductions (a linear
:math:`\gamma S` or a measured size-to-time curve, see :class:`ReductionCost`) plus any
intra-node transfers. A collective that reduces in :math:`k` steps pays a reduction's
launch latency :math:`t_0` once and every step its per-byte part,
:math:`t_0 + k\,\gamma\,s` (:meth:`~scalemodel.ReductionCost.steps`, :math:`\gamma` the per-byte
cost): NCCL reduces inside its one communication kernel, at memory bandwidth. Writing :math:`x = 1/(u B r)` [s/bit], every collective is a straight
line :math:`T = a + W x` in :math:`x`; the overlap model builds on exactly that.

The step counts and the bytes per step are those of the ring [3]_ and the recursive
halving-doubling [1]_ all-reduce, NCCL's double binary tree [2]_, the two-level
(hierarchical) all-reduce [4]_ and the parameter server [5]_.

The coefficient functions return the three parts separately as a :class:`CollectiveCost`
(``latency`` [s], ``overhead`` [s], ``bits`` [bit]), vectorized over the message size.

References
----------
.. [1] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
   Operations in MPICH", IJHPCA 19(1), 2005. doi:10.1177/1094342005051521
.. [2] P. Sanders, J. Speck, J. L. Traeff, "Two-tree algorithms for full bandwidth
   broadcast, reduction and scan", Parallel Computing 35(12), 2009.
   doi:10.1016/j.parco.2009.09.001 (the double binary tree NCCL uses)
.. [3] P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
   workstations", JPDC 69(2), 2009. doi:10.1016/j.jpdc.2008.09.002
.. [4] A. Sergeev, M. Del Balso, "Horovod: fast and easy distributed deep learning in
   TensorFlow", arXiv:1802.05799, 2018 (hierarchical all-reduce).
.. [5] M. Li et al., "Scaling Distributed Machine Learning with the Parameter Server",
   OSDI 2014.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Callable

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .nccl import NCCL_ARCHS
from .topology import DEFAULT_INTRA_BW, HIERARCHICAL_GPUS_PER_NODE, Topology
from .units import (MAX_COUNT, MAX_DURATION, MIN_TEXT_BANDWIDTH, broadcast_shape, check_count,
                    check_fraction, check_nonnegative, check_ratio, parse_bandwidth,
                    parse_duration, scalar_converter)

__all__ = [
    "ReductionCost",
    "CollectiveCost",
    "KINDS",
    "CollectiveOptions",
    "ALGORITHMS",
    "collective_cost",
    "collective_time",
    "ring_allreduce_time",
    "tree_allreduce_time",
    "halving_doubling_allreduce_time",
    "hierarchical_allreduce_time",
    "allgather_time",
    "parameter_server_time",
]


# --------------------------------------------------------------------------- reduction


def _as_1d_float(value, name):
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 1:
        raise InvalidParameterError(name, value, "must be a one-dimensional sequence")
    return arr


MAX_BYTES = 1e18
"""Largest message a collective takes [bytes]: an exabyte, the limit of a profile's
gradients (:data:`scalemodel.profiles.MAX_GRADIENT_BYTES`); 1e308 overflowed to inf."""

MAX_GAMMA = 1e-3
"""Largest :attr:`ReductionCost.gamma` accepted [s/byte]: summing at 1 kB/s, eight
orders of magnitude slower than a GPU's vector add (about 1e-11 s/byte); more is a unit
slip, and 1e308 made every answer inf or 0."""


@attrs.frozen(eq=False)
class ReductionCost:
    r"""Time of one element-wise reduction (sum) of a buffer, as a function of its size.

    Either linear, :math:`t(s) = t_0 + \gamma s`, or a measured table of (size, time)
    pairs, interpolated linearly and clamped at both ends (as the measured V100
    vector-add curve is used in Zhang et al., arXiv:2006.10103).

    Parameters
    ----------
    gamma : float
        Time per byte of the linear form, at most 1e-3 (``collectives.MAX_GAMMA``)
        [s/byte].
    latency : float
        Fixed time per reduction call (kernel launch) of the linear form [s].
    table_bytes, table_seconds : numpy.ndarray or None
        Measured sizes [bytes] (increasing) and times [s]; when given they replace the
        linear form.
    name : str
        Label for reports.
    per_step : bool
        How a collective that reduces in :math:`k` steps is charged (:meth:`steps`).
        ``False`` (the default, NCCL's way): one launch per collective and every step its
        bytes, :math:`t_0 + k\,\gamma\,s`; NCCL sums inside its one communication kernel.
        ``True``: the whole cost of one reduction, launch included, at each step,
        :math:`k\,t(s)`, as if every step launched its own vector-add kernel; this is how
        the simulator of Zhang et al. (``simulation/sim_with_compression_comm.py`` in
        netx-repo/training-bottleneck) charges a ring all-reduce,
        :math:`(N-1)\,t(S/N)` with :math:`t` the measured V100 vector-add curve and its
        ~10 us floor, and what :mod:`scalemodel.whatif` uses to reproduce it [-].

    Examples
    --------
    A 64 MiB ring all-reduce among 64 workers: 63 steps of 1 MiB, on the floor of the
    measured V100 curve (about 10 us each) when every step is charged its launch:

    >>> from scalemodel.collectives import collective_cost
    >>> from scalemodel.profiles import load_profile
    >>> red = load_profile("resnet50").reduction          # measured V100 vector add
    >>> once = collective_cost("ring", 64 * 2**20, 64, reduction=red).overhead
    >>> steps = collective_cost("ring", 64 * 2**20, 64,
    ...                         reduction=red.with_per_step(True)).overhead
    >>> round(float(once) * 1e3, 3), round(float(steps) * 1e3, 3)  # [ms]
    (0.248, 0.664)
    """

    gamma: float = attrs.field(default=0.0, converter=scalar_converter("gamma"))
    latency: float = attrs.field(default=0.0, converter=scalar_converter("latency",
                                                                          parse_duration))
    table_bytes: np.ndarray | None = attrs.field(default=None)
    table_seconds: np.ndarray | None = attrs.field(default=None)
    name: str = "linear"
    per_step: bool = attrs.field(default=False, kw_only=True)
    _floor: float = attrs.field(init=False, default=0.0, repr=False)
    _per_byte: float = attrs.field(init=False, default=0.0, repr=False)

    def __attrs_post_init__(self):
        if not isinstance(self.per_step, (bool, np.bool_)):
            raise ParameterTypeError("per_step", self.per_step, "True or False")
        object.__setattr__(self, "per_step", bool(self.per_step))
        check_nonnegative(self.gamma, "gamma")
        if np.any(np.asarray(self.gamma) > MAX_GAMMA):
            raise InvalidParameterError("gamma", self.gamma, f"must be at most {MAX_GAMMA:g} "
                                        "s/byte (a sum at 1 kB/s); a GPU sums about 1e-11 "
                                        "s/byte: a unit slip?")
        check_nonnegative(self.latency, "latency")
        if (self.table_bytes is None) != (self.table_seconds is None):
            raise InvalidParameterError("table_seconds", self.table_seconds,
                                        "table_bytes and table_seconds come together")
        if self.table_bytes is not None:
            xb = _as_1d_float(self.table_bytes, "table_bytes")
            ys = _as_1d_float(self.table_seconds, "table_seconds")
            if xb.size < 1 or xb.size != ys.size:
                raise InvalidParameterError("table_seconds", self.table_seconds,
                                            f"needs as many entries as table_bytes ({xb.size})")
            if not (np.all(np.isfinite(xb)) and np.all(np.diff(xb) > 0) and xb[0] >= 0):
                raise InvalidParameterError("table_bytes", self.table_bytes,
                                            "sizes must be finite, >= 0 and increasing")
            if not (np.all(np.isfinite(ys)) and np.all(ys >= 0)):
                raise InvalidParameterError("table_seconds", self.table_seconds,
                                            "times must be finite and >= 0")
            if np.any(ys > MAX_DURATION):  # as the linear form's latency
                i = int(np.argmax(ys > MAX_DURATION))
                raise InvalidParameterError(f"table_seconds[{i}]", float(ys[i]),
                                            f"must be at most {MAX_DURATION:g} s (a day): "
                                            "a unit slip?")
            object.__setattr__(self, "table_bytes", xb)
            object.__setattr__(self, "table_seconds", ys)
            floor = float(np.min(ys))
            b, t = xb[-1], ys[-1]
            per_byte = float(max(t - floor, 0.0) / b) if b > 0 else 0.0
            if per_byte > MAX_GAMMA:  # its extrapolation, as the linear form's gamma
                raise InvalidParameterError(
                    f"table_seconds[{ys.size - 1}]", float(t), f"rises {per_byte:.3g} s/byte to "
                    f"its largest size, more than {MAX_GAMMA:g} s/byte (a sum at 1 kB/s): "
                    "a unit slip?")
        else:
            floor, per_byte = float(self.latency), float(self.gamma)
        object.__setattr__(self, "_floor", floor)  # read by every collective: once here
        object.__setattr__(self, "_per_byte", per_byte)

    @classmethod
    def from_table(cls, nbytes, seconds, name="table", *, per_step=False):
        """A reduction cost measured as (size [bytes], time [s]) pairs [-]."""
        return cls(table_bytes=nbytes, table_seconds=seconds, name=name, per_step=per_step)

    def with_per_step(self, per_step=True) -> "ReductionCost":
        """This cost with its steps charged one launch each (``True``) or one launch per
        collective (``False``); see the class docs [-].

        Parameters
        ----------
        per_step : bool
            Charge the whole reduction, launch included, at every step [-].
        """
        return attrs.evolve(self, per_step=per_step)

    def to_dict(self) -> dict:
        """The cost as the ``reduction`` object of a profile or cluster file [-]."""
        if self.table_bytes is not None:
            out = {"kind": "table", "name": self.name, "bytes": self.table_bytes.tolist(),
                   "seconds": self.table_seconds.tolist()}
        else:
            out = {"kind": "linear", "latency": self.latency, "gamma": self.gamma}
        if self.per_step:
            out["per_step"] = True
        return out

    @property
    def floor(self) -> float:
        """The fixed part of one call, its kernel launch [s]: the linear form's
        ``latency``, or the table's smallest time (the flat part of a measured curve)."""
        return self._floor

    @property
    def per_byte(self) -> float:
        """The marginal time per byte [s/byte]: ``gamma``, or a table's slope from its
        floor to its largest size (memory bandwidth, once the launch no longer hides it)."""
        return self._per_byte

    def steps(self, chunk, count):
        r"""Time of ``count`` reductions of ``chunk`` bytes each inside one collective [s]:
        by default the launch is paid once and every step its bytes,
        :math:`t_0 + k\,\gamma\,s` (NCCL reduces inside its one communication kernel, at
        memory bandwidth; the launch latency of a separately measured reduction is not paid
        per step); with ``per_step=True`` every step pays a whole reduction,
        :math:`k\,t(s)` (the measured curve interpolated at ``chunk``, its floor included).

        Parameters
        ----------
        chunk : float or array_like
            Bytes reduced per step [bytes].
        count : int
            Steps [-].
        """
        chunk = np.asarray(chunk, dtype=float)
        if count <= 0:
            return np.zeros_like(chunk)
        if self.per_step:
            return count * self(chunk)
        return np.where(chunk > 0, self._floor + count * self._per_byte * chunk, 0.0)

    def __call__(self, nbytes):
        """Time of one reduction of ``nbytes`` bytes [s] (vectorized; 0 for 0 bytes)."""
        s = np.asarray(nbytes, dtype=float)
        if self.table_bytes is not None:
            t = np.interp(s, self.table_bytes, self.table_seconds)
        else:
            t = self.latency + self.gamma * s
        return np.where(s > 0, t, 0.0)


NO_REDUCTION_COST = ReductionCost(name="free")


# --------------------------------------------------------------------------- options


@attrs.frozen(cache_hash=True)
class CollectiveOptions:
    """Network constants the collective models use besides the line rate.

    Parameters
    ----------
    alpha : float
        Per-message latency of the inter-node network [s].
    gpus_per_node : int or None
        Workers per node; ``None`` means no topology: every worker has its own link (the
        two-level all-reduce then assumes
        :data:`~scalemodel.topology.HIERARCHICAL_GPUS_PER_NODE`) [workers].
    intra_bw : float
        Intra-node link rate (NVLink, PCIe) per GPU and direction [bits/s]. The default,
        2.4e12, is 300 GB/s, the V100's NVLink 2.0 aggregate.
    intra_alpha : float
        Per-step latency inside a node [s].
    ps_servers : int or None
        Number of dedicated parameter servers; ``None`` means one server shard co-located
        with every worker (the bytes are evenly sharded) [servers].
    nics_per_node : int
        Network interfaces per node, each at the line rate; used with ``gpus_per_node``
        [NICs].
    arch, intra_link : str
        GPU architecture and intra-node link kind, for NCCL's choice of algorithm [-].
    """

    alpha: float = attrs.field(default=0.0, converter=scalar_converter("alpha", parse_duration))
    gpus_per_node: int | None = None
    intra_bw: float = DEFAULT_INTRA_BW
    intra_alpha: float = attrs.field(default=0.0,
                                     converter=scalar_converter("intra_alpha", parse_duration))
    ps_servers: int | None = None
    nics_per_node: int = 1
    arch: str = "volta"
    intra_link: str = "nvlink"

    def __attrs_post_init__(self):
        check_nonnegative(self.alpha, "alpha")
        if not _canonical_topology(self):  # validated (and converted) by a Topology
            topo = Topology(self.gpus_per_node, self.nics_per_node, self.intra_bw,
                            self.intra_alpha, self.arch, self.intra_link)
            for name in ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha", "arch",
                         "intra_link"):
                object.__setattr__(self, name, getattr(topo, name))
        if self.ps_servers is not None:
            object.__setattr__(self, "ps_servers", check_count(self.ps_servers, "ps_servers"))
            if isinstance(self.ps_servers, np.ndarray):
                raise ParameterTypeError("ps_servers", self.ps_servers, "a scalar")

    @classmethod
    def from_topology(cls, topology, *, alpha=0.0, ps_servers=None):
        """Options from a :class:`~scalemodel.topology.Topology` [-]."""
        if cls is CollectiveOptions:
            try:  # validated once per distinct question (the type keeps 8 and 8.0 apart)
                return _options_from(topology, type(alpha), alpha, type(ps_servers),
                                     ps_servers)
            except TypeError:  # an unhashable value: validated, and refused, uncached
                pass
        return cls(alpha=alpha, gpus_per_node=topology.gpus_per_node,
                   intra_bw=topology.intra_bw, intra_alpha=topology.intra_alpha,
                   ps_servers=ps_servers, nics_per_node=topology.nics_per_node,
                   arch=topology.arch, intra_link=topology.intra_link)

    def evolve(self, **changes):
        """These options with ``changes`` (validated values of its fields), cached [-]."""
        try:
            return _options_evolved(self, tuple(sorted(
                (k, type(v), v) for k, v in changes.items())))
        except TypeError:
            return _replaced(self, changes)

    @property
    def topology(self) -> Topology:
        """The topology part of the options."""
        return Topology(self.gpus_per_node, self.nics_per_node, self.intra_bw,
                        self.intra_alpha, self.arch, self.intra_link)


def _canonical_topology(o) -> bool:
    """True when the topology fields are already what :class:`Topology` would make of
    them (plain ints, a finite positive float rate, a finite latency >= 0, known names):
    options evolved from valid ones need no second conversion."""
    g, k, bw, a = o.gpus_per_node, o.nics_per_node, o.intra_bw, o.intra_alpha
    return ((g is None or (type(g) is int and 1 <= g <= MAX_COUNT))
            and type(k) is int and 1 <= k <= MAX_COUNT
            and type(bw) is float and MIN_TEXT_BANDWIDTH <= bw < math.inf
            and type(a) is float and 0.0 <= a < math.inf
            and o.arch in NCCL_ARCHS and o.intra_link in ("nvlink", "pci"))


@functools.lru_cache(maxsize=256)
def _options_from(topology, _ta, alpha, _tp, ps_servers):
    return CollectiveOptions(alpha=alpha, gpus_per_node=topology.gpus_per_node,
                             intra_bw=topology.intra_bw, intra_alpha=topology.intra_alpha,
                             ps_servers=ps_servers, nics_per_node=topology.nics_per_node,
                             arch=topology.arch, intra_link=topology.intra_link)


@functools.lru_cache(maxsize=256)
def _options_evolved(options, changes):
    return _replaced(options, {k: v for k, _, v in changes})


def _replaced(o, changes):
    """``attrs.evolve`` for :class:`CollectiveOptions`, without its introspection."""
    fields = dict(alpha=o.alpha, gpus_per_node=o.gpus_per_node, intra_bw=o.intra_bw,
                  intra_alpha=o.intra_alpha, ps_servers=o.ps_servers,
                  nics_per_node=o.nics_per_node, arch=o.arch, intra_link=o.intra_link)
    fields.update(changes)
    return CollectiveOptions(**fields)


# --------------------------------------------------------------------------- coefficients


@attrs.frozen(eq=False)
class CollectiveCost:
    r"""The parts of a collective's time, see equation :eq:`alpha-beta-gamma`.

    The wire part is that of the slowest link: each NIC carries ``bits`` at the achieved
    network rate and each GPU's intra-node link carries ``intra_bits`` at ``intra_bw``;
    pipelined collectives (ring, tree) run at the slower of the two,

    .. math::
       :label: wire-max

       T_\text{wire} = \max\Big(\frac{W}{u B r},\; \frac{W_\text{intra}}{r B_\text{intra}}\Big).

    Attributes
    ----------
    latency : numpy.ndarray
        Message-latency part [s].
    overhead : numpy.ndarray
        Reductions and serial intra-node transfers [s]: does not depend on the network.
    bits : numpy.ndarray
        Bits on each network link (a NIC, or each worker's link without a topology)
        before compression [bit].
    intra_bits : numpy.ndarray
        Bits on each GPU's intra-node link that run concurrently with the network
        transfer (pipelined), before compression [bit].
    intra_bw : float
        Intra-node link rate [bits/s].
    """

    latency: np.ndarray
    overhead: np.ndarray
    bits: np.ndarray
    intra_bits: np.ndarray = None
    intra_bw: float = DEFAULT_INTRA_BW

    def __attrs_post_init__(self):
        if self.intra_bits is None:
            object.__setattr__(self, "intra_bits", np.zeros_like(self.bits))

    def time(self, bw, utilization=1.0, compression=1.0):
        """Total time [s] at line rate ``bw`` [bits/s], eq. :eq:`wire-max`."""
        wire = np.maximum(self.bits / (utilization * bw * compression),
                          self.intra_bits / (compression * self.intra_bw))
        return self.latency + self.overhead + wire


def _zeros_like(s):
    z = np.zeros_like(s)
    return CollectiveCost(z, z.copy(), z.copy(), z.copy())


def _nodes(n, opt):
    """Nodes a run of ``n`` workers spans, as ``Topology.nodes`` (without building one)."""
    return -(-int(n) // opt.gpus_per_node) if opt.gpus_per_node else int(n)


def _split_latency(n, opt, inter_steps_per_node, steps):
    """Latency of ``steps`` pipeline steps of which ``inter_steps_per_node * (m - 1)`` cross
    nodes (NCCL's ring: nInter = 2(nNodes - 1) for all-reduce); flat: all cross."""
    if opt.gpus_per_node is None:
        return steps * opt.alpha
    m = _nodes(n, opt)
    inter = inter_steps_per_node * (m - 1)
    return (steps - inter) * opt.intra_alpha + inter * opt.alpha


def _ring_cost(s, n, red, opt):
    """Ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of S/n bytes [3].

    With a topology it is NCCL's flat ring over all GPUs: it crosses each node boundary
    once per direction, so each node's NICs carry :math:`2(n-1)/n \\cdot S` together,
    every GPU's intra-node link the same, and a run inside one node uses no NIC.
    """
    per_link = 2.0 * (n - 1) / n * 8.0 * s
    nic, intra = _on_links(per_link, n, opt)
    return CollectiveCost(
        latency=np.full_like(s, _split_latency(n, opt, 2, 2.0 * (n - 1))),
        overhead=red.steps(s / n, n - 1),
        bits=nic, intra_bits=intra, intra_bw=opt.intra_bw,
    )


def _on_links(per_link, n, opt):
    """Split a flat ring's per-link bits into NIC bits and intra-node bits."""
    if opt.gpus_per_node is None:
        return per_link, np.zeros_like(per_link)
    m = _nodes(n, opt)
    intra = per_link if min(opt.gpus_per_node, n) > 1 else np.zeros_like(per_link)
    nic = per_link / opt.nics_per_node if m > 1 else np.zeros_like(per_link)
    return nic, intra


def tree_link_factor(m):
    """Bytes per direction on the busiest link of NCCL's double binary tree over ``m``
    ranks (or nodes), in units of the buffer: 0 on one, 1 on two, 1.5 on three, 2 on four
    or more [-]."""
    return {1: 0.0, 2: 1.0, 3: 1.5}.get(int(m), 2.0)


def _tree_cost(s, n, red, opt):
    """NCCL double binary tree: each half of the buffer goes up and down one tree [2].

    Every rank is an inner node of one tree and a leaf of the other, so on four or more
    ranks the busiest sends and receives 2 S bytes in all (1.5 S on three ranks, S on
    two, where each is the other's only child: the ring's traffic); pipelining makes the
    latency 2 ceil(log2 n) steps.

    With a topology the trees span the nodes and a chain links the GPUs inside each
    node (as in NCCL): on two nodes each is the other's only child, so a NIC carries
    S per direction (half the ring's traffic); on three nodes the busiest carries 1.5 S;
    on four or more the busiest node, an inner node with two children in one tree and a
    leaf in the other, carries 2 S (NCCL's ``ncclGetDtree``, ``src/graph/trees.cc``).
    Each GPU's chain link carries S per direction; the latency is
    :math:`2\\big((g-1)\\,\\alpha_\\text{intra} + \\lceil\\log_2 m\\rceil\\,\\alpha\\big)`.
    """
    if opt.gpus_per_node is None:
        depth = math.ceil(math.log2(n))
        return CollectiveCost(
            latency=np.full_like(s, 2.0 * depth * opt.alpha),
            overhead=red.steps(s, 1),
            bits=tree_link_factor(n) * 8.0 * s,
        )
    m = _nodes(n, opt)
    g = min(opt.gpus_per_node, n)
    factor = tree_link_factor(m)
    depth = math.ceil(math.log2(m)) if m > 1 else 0
    return CollectiveCost(
        latency=np.full_like(s, 2.0 * ((g - 1) * opt.intra_alpha + depth * opt.alpha)),
        overhead=red.steps(s, 1),
        bits=factor * 8.0 * s / opt.nics_per_node,
        intra_bits=(8.0 * s if g > 1 else np.zeros_like(s)), intra_bw=opt.intra_bw,
    )


def _halving_doubling_cost(s, n, red, opt):
    """Rabenseifner's recursive halving (reduce-scatter) and doubling (all-gather) [1].

    For n not a power of two, the n - p extra ranks first fold their data into partners
    and get the result back at the end (p = 2^floor(log2 n)): 2 more steps of S bytes.
    Every worker's traffic is counted on its own link (the topology is not used).
    """
    k = int(math.floor(math.log2(n)))
    p = 2**k
    reduced = s * (1.0 - 0.5**k)  # bytes reduced over the halving steps: s/2 + s/4 + ...
    steps, factor = 2.0 * k, 2.0 * (p - 1) / p
    if p != n:
        steps += 2.0
        factor += 2.0
        reduced = reduced + s
    if red.per_step:  # every halving step (and the fold) launches its own reduction
        overhead = sum(red(s * 0.5**i) for i in range(1, k + 1)) + (red(s) if p != n else 0.0)
    else:
        overhead = np.where(s > 0, red.floor + red.per_byte * reduced, 0.0)
    return CollectiveCost(np.full_like(s, steps * opt.alpha), overhead, factor * 8.0 * s)


def _hierarchical_cost(s, n, red, opt):
    """Two-level all-reduce: intra-node reduce-scatter, inter-node ring, intra-node
    all-gather [4].

    g = ``gpus_per_node`` workers share one node and its network links; m = n / g nodes.
    Each worker all-reduces S/g bytes across nodes, and the g concurrent rings share the
    node's NICs, so they carry 2 (m-1)/m S bytes together: the line rate, utilization and
    compression apply to this inter-node part only. The intra-node phases run at
    ``intra_bw`` with ``intra_alpha``, one after the other, and are uncompressed.
    """
    g = min(opt.gpus_per_node or HIERARCHICAL_GPUS_PER_NODE, n)
    if n % g:
        raise InvalidParameterError(
            "n", n, f"the hierarchical all-reduce needs n to be a multiple of gpus_per_node={g}")
    m = n // g
    intra_bits = 2.0 * (g - 1) / g * 8.0 * s
    overhead = (intra_bits / opt.intra_bw + red.steps(s / g, g - 1)
                + red.steps(s / (g * m), m - 1))
    latency = 2.0 * (g - 1) * opt.intra_alpha + 2.0 * (m - 1) * opt.alpha
    return CollectiveCost(np.full_like(s, latency), overhead,
                          2.0 * (m - 1) / m * 8.0 * s / opt.nics_per_node)


def _allgather_cost(s, n, red, opt):
    """Ring all-gather of S bytes from every worker: n-1 steps, (n-1) S bytes received.

    With a topology it is a flat ring as for the ring all-reduce: each node's NICs carry
    (n-1) S together, each GPU's intra-node link the same.
    """
    nic, intra = _on_links((n - 1) * 8.0 * s, n, opt)
    return CollectiveCost(
        latency=np.full_like(s, _split_latency(n, opt, 1, n - 1.0)),
        overhead=np.zeros_like(s),
        bits=nic, intra_bits=intra, intra_bw=opt.intra_bw,
    )


def _parameter_server_cost(s, n, red, opt):
    """Push gradients to and pull parameters from parameter servers [5].

    Co-located (``ps_servers=None``): each worker holds a 1/n shard, so its link carries
    (n-1)/n S each way and it sums n-1 shards of S/n. Dedicated servers p: a worker's link
    carries S each way and a server's n S/p; the busier of the two binds.
    """
    p = opt.ps_servers
    if p is None:
        bits = 2.0 * (n - 1) / n * 8.0 * s
        overhead = red.steps(s / n, n - 1)
    else:
        bits = 2.0 * max(1.0, n / p) * 8.0 * s
        overhead = red.steps(s / p, n)
    return CollectiveCost(np.full_like(s, 2.0 * opt.alpha), overhead, bits)


def _nccl(version):
    def cost(s, n, red, opt):
        """NCCL's own choice, per message size, between its ring and its double binary
        tree, and of the protocol (:mod:`scalemodel.nccl`, which models the choice of the
        given NCCL version from its source); each message then costs what the topology-aware
        ring or tree of this module says, its wire bits divided by the protocol's payload
        fraction (LL carries 8 bytes of data per 16). NCCL chooses with its own view of
        the hardware, not with the line rate a user throttles, so the choice depends on
        the size, the node count and the GPUs but not on ``bw``. Without a topology every
        worker is a node of one GPU.
        """
        from .nccl import nccl_choice

        g = opt.gpus_per_node or 1
        m = -(-n // g)
        if m > 1 and n % g:
            raise InvalidParameterError(
                "n", n, f"NCCL's choice needs n to be a multiple of gpus_per_node={g} "
                "when it spans nodes")
        sizes = np.atleast_1d(s)
        choice = nccl_choice("all_reduce", np.maximum(sizes, 1.0), n, m, arch=opt.arch,
                             intra=opt.intra_link, version=version,
                             nics_per_node=opt.nics_per_node)
        tree = np.asarray(choice.algorithm) == "tree"
        eff = choice.payload_fraction  # PROTOCOL_EFFICIENCY of each size's protocol
        topo = opt if opt.gpus_per_node else opt.evolve(gpus_per_node=1)
        ring, tr = _ring_cost(sizes, n, red, topo), _tree_cost(sizes, n, red, topo)

        def pick(a, b, per=None):  # the chosen algorithm's, then per payload (per element)
            chosen = np.where(tree, b, a)
            return (chosen if per is None else chosen / per).reshape(np.shape(s))

        return CollectiveCost(
            latency=pick(ring.latency, tr.latency), overhead=pick(ring.overhead, tr.overhead),
            bits=pick(ring.bits, tr.bits, eff),
            intra_bits=pick(ring.intra_bits, tr.intra_bits, eff), intra_bw=opt.intra_bw)

    cost.__name__ = f"_nccl_{version.replace('.', '_')}_cost"
    return cost


ALGORITHMS: dict[str, Callable] = {
    "ring": _ring_cost,
    "tree": _tree_cost,
    "halving-doubling": _halving_doubling_cost,
    "hierarchical": _hierarchical_cost,
    "allgather": _allgather_cost,
    "ps": _parameter_server_cost,
    "nccl": _nccl("2.30"),
    "nccl-2.4": _nccl("2.4"),
    "nccl-2.5": _nccl("2.5"),
    "nccl-2.6": _nccl("2.6"),
    "nccl-2.7": _nccl("2.7"),
}
"""The collective algorithms by name: ``"ring"``, ``"tree"`` (NCCL double binary tree),
``"halving-doubling"`` (Rabenseifner), ``"hierarchical"`` (two-level), ``"allgather"``
(what sparse compressors need), ``"ps"`` (parameter server), and ``"nccl"`` (NCCL's own
choice of ring or tree and of the protocol per message, as NCCL 2.30 makes it;
``"nccl-2.4"`` ... ``"nccl-2.7"`` for older releases, see :mod:`scalemodel.nccl`)."""

_ALIASES = {"hd": "halving-doubling", "rabenseifner": "halving-doubling",
            "parameter-server": "ps", "all-gather": "allgather", "2d": "hierarchical",
            "double-binary-tree": "tree", "nccl-2.30": "nccl", "auto": "nccl"}


def resolve_algorithm(algorithm: str) -> str:
    """Return the canonical algorithm name, or raise :class:`UnknownNameError`."""
    if not isinstance(algorithm, str):
        raise ParameterTypeError("algorithm", algorithm, "a string")
    key = algorithm.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key.startswith("nccl-") and key not in ALGORITHMS:  # a release: "nccl-2.4.8"
        from .nccl import _version
        try:
            family = _version(key[5:])
        except (InvalidParameterError, UnknownNameError):
            raise UnknownNameError("algorithm", algorithm, ALGORITHMS) from None
        key = "nccl" if family == "2.30" else f"nccl-{family}"
    if key not in ALGORITHMS:
        raise UnknownNameError("algorithm", algorithm, ALGORITHMS)
    return key


KINDS = ("all_reduce", "reduce_scatter", "all_gather")
"""Collective kinds :func:`collective_cost` models: the all-reduce of a buffer, its
reduce-scatter (every rank ends with its 1/n shard, summed) and the all-gather of a
sharded buffer (every rank contributes 1/n and ends with all of it)."""


def _ring_half_cost(s, n, red, opt, reduce):
    """One ring phase (reduce-scatter or all-gather) of an ``s``-byte buffer: n-1 steps of
    s/n bytes; with a topology the NICs and intra-node links carry (n-1)/n s each."""
    nic, intra = _on_links((n - 1) / n * 8.0 * s, n, opt)
    return CollectiveCost(
        latency=np.full_like(s, _split_latency(n, opt, 1, n - 1.0)),
        overhead=red.steps(s / n, n - 1) if reduce else np.zeros_like(s),
        bits=nic, intra_bits=intra, intra_bw=opt.intra_bw,
    )


def collective_cost(algorithm, nbytes, n, *, reduction=None, options=None,
                    kind="all_reduce") -> CollectiveCost:
    """Latency, overhead and wire bits of one collective, vectorized over ``nbytes``.

    Parameters
    ----------
    algorithm : str
        A name from :data:`~scalemodel.ALGORITHMS` [-].
    nbytes : array_like
        Message size per worker before compression; for ``kind="all_gather"`` and
        ``"reduce_scatter"`` the size of the whole (unsharded) buffer [bytes].
    n : int
        Number of workers [workers].
    reduction : ReductionCost, optional
        Cost of the element-wise sums; free when omitted [-].
    options : CollectiveOptions, optional
        Latency and topology constants; defaults to ``CollectiveOptions()`` [-].
    kind : str
        ``"all_reduce"`` (with ``algorithm``), ``"reduce_scatter"`` or ``"all_gather"``
        (rings, as NCCL runs them: each half of the ring all-reduce) [-].

    Returns
    -------
    CollectiveCost
        Zero for ``n == 1`` (a single worker communicates nothing).
    """
    fn = ALGORITHMS[resolve_algorithm(algorithm)]
    if kind not in KINDS:
        raise UnknownNameError("kind", kind, KINDS)
    n = check_count(n, "n")
    if isinstance(n, np.ndarray):
        raise ParameterTypeError("n", n, "a single integer here")
    s = check_nonnegative(nbytes, "nbytes")
    if not (s <= MAX_BYTES if type(s) is float else np.all(np.less_equal(s, MAX_BYTES))):
        raise InvalidParameterError("nbytes", nbytes, f"must be at most {MAX_BYTES:g} bytes "
                                    "(an exabyte, the largest gradient a profile may hold): "
                                    "a unit slip?")
    s = np.asarray(s, dtype=float)
    if n == 1:
        return _zeros_like(s)
    red = reduction or NO_REDUCTION_COST
    if not isinstance(red, ReductionCost):
        raise ParameterTypeError("reduction", reduction, "a ReductionCost (a profile's "
                                 "reduction, or ReductionCost.from_points) or None")
    opt = options or CollectiveOptions()
    if kind != "all_reduce":
        return _ring_half_cost(s, n, red, opt, kind == "reduce_scatter")
    return fn(s, n, red, opt)


def collective_time(algorithm, nbytes, n, bw, *, alpha=0.0, utilization=1.0,
                    compression=1.0, reduction=None, **topology):
    bw = parse_bandwidth(bw)
    u = check_fraction(utilization, "utilization")
    r = check_ratio(compression)
    if sum(type(v) is not float for v in (bw, u, r)) + (np.ndim(nbytes) > 0) > 1:
        broadcast_shape(nbytes=nbytes, bw=bw, utilization=u, compression=r)  # names a mismatch
    cost = collective_cost(algorithm, nbytes, n, reduction=reduction,
                           options=_options(alpha, topology))
    t = cost.time(bw, u, r)
    return float(t) if np.ndim(t) == 0 else t


def _options(alpha, topology):
    """CollectiveOptions of the collective_time keywords; an unknown one (a misspelt
    ``gpus_per_nod``) is named with the known ones, not a TypeError from
    ``CollectiveOptions.__init__``."""
    known = [a.name for a in attrs.fields(CollectiveOptions) if a.name != "alpha"]
    for key in topology:
        if key not in known:
            raise UnknownNameError("topology keyword", key, known)
    return CollectiveOptions(alpha=alpha, **topology)


def _named(algorithm, summary, name):
    def fn(nbytes, n, bw, *, alpha=0.0, utilization=1.0, compression=1.0, reduction=None,
           **topology):
        return collective_time(algorithm, nbytes, n, bw, alpha=alpha, utilization=utilization,
                               compression=compression, reduction=reduction, **topology)

    fn.__doc__ = "\n\n".join([summary, inspect.cleandoc(ALGORITHMS[algorithm].__doc__),
                               inspect.cleandoc(_NAMED_PARAMETERS)])
    fn.__name__ = fn.__qualname__ = name
    return fn


_NAMED_PARAMETERS = """

    Parameters
    ----------
    nbytes : float or array_like
        Message size per worker before compression [bytes].
    n : int
        Number of workers [workers].
    bw : float or str
        Line rate of each worker's (node's) network link [bits/s].
    alpha : float
        Per-message latency [s].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    compression : float
        Ratio dividing the bytes on the wire, >= 1 [-].
    reduction : ReductionCost, optional
        Cost of the element-wise sums; free when omitted [s].
    **topology
        ``gpus_per_node``, ``intra_bw``, ``intra_alpha``, ``ps_servers``: see
        :class:`CollectiveOptions`.

    Returns
    -------
    float or numpy.ndarray
        Time [s].
    """


collective_time.__doc__ = inspect.cleandoc(_NAMED_PARAMETERS).replace(
    "Parameters\n----------\n",
    "Parameters\n----------\nalgorithm : str\n    A name from :data:`ALGORITHMS` [-].\n", 1)
collective_time.__doc__ = ("Time of one collective [s]; see equation :eq:`alpha-beta-gamma`."
                           "\n\n" + collective_time.__doc__)

ring_allreduce_time = _named("ring", "Time of a ring all-reduce [s].", "ring_allreduce_time")
tree_allreduce_time = _named("tree", "Time of a double-binary-tree all-reduce [s].",
                             "tree_allreduce_time")
halving_doubling_allreduce_time = _named(
    "halving-doubling", "Time of a recursive halving-doubling all-reduce [s].",
    "halving_doubling_allreduce_time")
hierarchical_allreduce_time = _named("hierarchical", "Time of a two-level all-reduce [s].",
                                     "hierarchical_allreduce_time")
allgather_time = _named("allgather", "Time of a ring all-gather [s].", "allgather_time")
parameter_server_time = _named("ps", "Time of a parameter-server push and pull [s].",
                               "parameter_server_time")
