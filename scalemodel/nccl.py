r"""NCCL's own choice of collective algorithm and protocol, as NCCL computes it.

NCCL does not run the all-reduce it is asked for with one fixed algorithm. At
communicator creation it builds, from *its own view* of the hardware (the link speeds it
detects and per-channel speed tables), a latency :math:`L_{a,p}` [us] and an algorithm
bandwidth :math:`B_{a,p}` [GB/s] for every algorithm :math:`a` (ring, tree, ...) and
protocol :math:`p` (LL, LL128, Simple); at every call it picks

.. math::

   (a, p)^\star = \arg\min_{a,p}\; L_{a,p}\,c_L(S) + \frac{S}{10^3\,B_{a,p}\,c_B(a, p, S)}

with :math:`S` the message size [bytes] and :math:`c_L`, :math:`c_B` per-call corrections
(the ring "plateau" on the latency, the tree correction table on the bandwidth). NCCL
2.4 decided differently: one size threshold between tree and ring and one between LL and
Simple. This module re-implements those decisions, vectorized over :math:`S`, for:

========  ============================  =================================================
version   tags                          what decides
========  ============================  =================================================
``2.4``   v2.4.2-1 ... v2.4.8-1         ``ncclTreeThreshold`` (src/init.cc) and the LL
                                        threshold of ``getKernelInfo`` (src/enqueue.cc)
``2.5``   v2.5.6-1, v2.5.7-1            ``ncclSetThresholds`` (src/graph/tuning.cc) +
                                        ``getAlgoInfo`` (src/enqueue.cc)
``2.6``   v2.6.4-1                      ``ncclTopoSetThresholds`` + ``ncclTopoGetAlgoTime``
``2.7``   v2.7.3-1 ... v2.7.8-1         ``ncclTopoTuneModel`` + ``ncclTopoGetAlgoTime``
                                        (v2.7.8-1; 2.7.3-2.7.6 differ on Ampere only)
``2.30``  v2.30.3-1 ... v2.30.7-1       ``ncclTopoTuneModel`` (src/graph/tuning.cc) +
                                        ``ncclTopoGetAlgoTime`` (v2.30.7-1)
========  ============================  =================================================

All line numbers below are of the named tag of github.com/NVIDIA/nccl. Constants keep
NCCL's units (latency [us], bandwidth [GB/s] = 1e9 bytes/s) inside the module; the public
functions return seconds and bytes per second.

What NCCL sees (:func:`nccl_topology`) comes from an idealized replay of its topology
search (src/graph/search.cc ``ncclTopoCompute``): the per-channel speed is the largest
entry of the version's speed table that the NIC, its PCIe path and the NVLinks can carry,
the number of channels the largest the links can carry at that speed, trees on two nodes
get twice the inter-node speed inside the node, and the version's channel duplication
rules apply. It assumes every node is alike, one ring visits all GPUs of a node (a
Hamiltonian path of the NVLink graph exists, as on DGX-1/p3dn hybrid cube meshes and
NVSwitch systems), and the NIC speed is what NCCL reads from the system, *not* a rate a
user later imposes with ``tc``: NCCL 2.6+ reads ``/sys/class/net/<if>/speed`` for sockets
and falls back to 10 Gbit/s when it cannot (AWS ENA interfaces report no speed, see
github.com/amzn/amzn-drivers issues 61 and 289); NCCL 2.5 assumed 12 GB/s (100 Gbit/s)
for every NIC; NCCL 2.4 had no bandwidth model at all. ``n_channels=`` and ``inter_bw=``
override the search where the real system differs. The search keeps the largest channels
x speed the NIC carries, while a two-node tree's bandwidth is channels x its intra-node
speed, so below about 8 Gbit/s per NIC a faster NIC can get fewer, faster channels and a
slower prediction on two nodes, as NCCL itself would (``tests/test_nccl.py`` shows one);
from 10 Gbit/s up a faster NIC never predicts slower there.

Not modelled: CollNet (SHARP), NVLS / NVLS-Tree (NVLink SHARP, Hopper and later with
NVSwitch), tuner plugins, ``NCCL_ALGO`` / ``NCCL_PROTO`` / ``NCCL_*THRESHOLD*`` environment
overrides, and the channel and thread reduction NCCL applies after its choice (it does
not change the choice). PAT (reduce-scatter / all-gather with one GPU per node) is
modelled for 2.30.
"""

from __future__ import annotations

import functools
import math
import numbers

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .units import parse_bandwidth

__all__ = [
    "NCCL_VERSIONS",
    "NCCL_COLLECTIVES",
    "NCCL_ALGORITHMS",
    "NCCL_PROTOCOLS",
    "NCCL_ARCHS",
    "PROTOCOL_EFFICIENCY",
    "NcclTopology",
    "NcclChoice",
    "protocol_efficiency",
    "nccl_topology",
    "nccl_latency",
    "nccl_bandwidth",
    "nccl_choice",
]

# --------------------------------------------------------------------------- names

#: Modelled NCCL versions (families) and the release tags each stands for.
NCCL_VERSIONS = {
    "2.4": ("2.4.2", "2.4.6", "2.4.7", "2.4.8"),
    "2.5": ("2.5.6", "2.5.7"),
    "2.6": ("2.6.4",),
    "2.7": ("2.7.3", "2.7.5", "2.7.6", "2.7.8"),
    "2.30": ("2.30.3", "2.30.4", "2.30.7"),
}
_ORDER = ("2.4", "2.5", "2.6", "2.7", "2.30")

NCCL_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
#: In NCCL's enum order (src/include/device.h): ties go to the first.
NCCL_ALGORITHMS = ("tree", "ring", "pat")
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_ARCHS = ("volta", "ampere", "hopper", "blackwell")
_INTRA = ("nvlink", "pci")
_NIC_PATHS = ("PIX", "PXB", "PXN", "PHB", "SYS")
_CPUS = ("intel", "amd")

# Architectures each version knows (NCCL 2.4-2.6 predate Ampere; 2.7 added sm80).
_ARCHS_OF = {"2.4": ("volta",), "2.5": ("volta",), "2.6": ("volta",),
             "2.7": ("volta", "ampere"), "2.30": NCCL_ARCHS}
_COMPCAP = {"volta": 70, "ampere": 80, "hopper": 90, "blackwell": 100}

#: Fraction of the bytes a protocol puts on the wire that are payload.
#: LL: each 16-byte line ``union ncclLLFifoLine`` holds 2 x 4 bytes of data and 2 x 4
#: bytes of flags (src/include/device.h:75-88 at v2.30.7-1; the same line since 2.3).
#: LL128: 128-byte lines of 16 8-byte elements, 15 of them data
#: (``NCCL_LL128_DATAELEMS = NCCL_LL128_LINEELEMS - 1``, src/include/device.h:110-112 at
#: v2.30.7-1; LL128 exists since 2.5). Simple: data only.
PROTOCOL_EFFICIENCY = {"LL": 8 / 16, "LL128": 120 / 128, "Simple": 1.0}

_TREE_RING = np.array(["tree", "ring"])  # nccl_choice's names by index (read only)
_PROTOCOL_NAMES = np.array(NCCL_PROTOCOLS)
_PROTOCOL_FRACTIONS = np.array([PROTOCOL_EFFICIENCY[p] for p in NCCL_PROTOCOLS])
for _a in (_TREE_RING, _PROTOCOL_NAMES, _PROTOCOL_FRACTIONS):
    _a.flags.writeable = False
del _a

_GB = 1e9   # NCCL's bandwidth unit: GB/s = 1e9 bytes/s ("Bandwidths in GB/s", tuning.cc)
_US = 1e-6  # NCCL's latency unit: us

# --------------------------------------------------------------------------- NCCL's view

# NVLink bandwidth per link [GB/s] in NCCL's topology.
#   2.5-2.7: VOLTA_NVLINK_WIDTH 21 (src/graph/topo.h:15 at v2.5.6-1, :16 at v2.7.8-1); 2.7
#   uses it for sm80 too (src/graph/topo.cc:445 at v2.7.8-1).
#   2.30: SM70/SM80 20.0, SM90 20.6, SM100 40.1 (src/graph/topo.h:20-24 at v2.30.7-1).
_NVLINK_BW = {
    "2.5": {"volta": 21.0},
    "2.6": {"volta": 21.0},
    "2.7": {"volta": 21.0, "ampere": 21.0},
    "2.30": {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1},
}
# NVLinks of one GPU, as groups of links to one peer (multiplicity of each group).
#   volta: V100 SXM2 in the DGX-1/p3dn hybrid cube mesh, 6 links, two peers over 2 links and
#   two over 1 (NVIDIA DGX-1 with Tesla V100 system architecture, WP-08437-002, 2017).
#   ampere/hopper/blackwell: 12/18/18 links into NVSwitch (A100 SXM4, H100 SXM5, B200
#   datasheets), one aggregated link to the switch in NCCL's graph.
_NVLINK_GROUPS = {"volta": (2, 2, 1, 1), "ampere": (12,), "hopper": (18,), "blackwell": (18,)}
# PCIe x16 bandwidth [GB/s] in NCCL's topology: link width * kvDictPciGen / 80
# (src/graph/topo.cc:361-363 at v2.6.4-1, :545 and :657 at v2.30.7-1; Gen3 60, Gen4 120,
# Gen5 240 [100 Mbit/s per lane]); 2.5 used the constant PCI_WIDTH 12 (src/graph/topo.h:16
# at v2.5.6-1). Generation by GPU: V100 Gen3, A100 Gen4, H100/B200 Gen5.
_PCI_BW = {"volta": 12.0, "ampere": 24.0, "hopper": 48.0, "blackwell": 48.0}
# NIC speed NCCL 2.5 assumes for every NIC: NET_WIDTH 12 GB/s "100Gbit"
# (src/graph/topo.h:20 at v2.5.6-1, used by ncclTopoGetNetWidth, src/graph/topo.cc:164).
_NET_WIDTH_25 = 12.0
# NIC speed NCCL 2.6+ assumes when the speed cannot be read: 10000 Mbit/s
# (src/transport/net_socket.cc:88 and src/graph/topo.cc:272 at v2.6.4-1;
# net_socket.cc:158-159 and topo.cc:417-418 at v2.30.7-1), converted as mbps / 8000 GB/s.
_DEFAULT_NIC_MBPS = 10000

# Per-channel speed tables [GB/s] of the topology search.
#   2.6: speedArray, src/graph/search.cc:624 at v2.6.4-1.
#   2.7: speedArray, src/graph/search.cc:626 at v2.7.8-1.
#   2.30: speedArrayIntra/Inter and the sm90/sm100 variants, src/graph/search.cc:1051-1065
#   at v2.30.7-1.
_SPEEDS = {
    "2.6": (24.0, 21.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "2.7": (42.0, 24.0, 21.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
            0.24, 0.12),
}
_SPEEDS_230 = {
    ("intra", 70): (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    ("inter", 70): (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0,
                    4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    ("intra", 90): (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    ("inter", 90): (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                    2.4, 1.2, 0.24, 0.12),
    ("intra", 100): (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    ("inter", 100): (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                     15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}
# Channels a ring graph may have: MAXCHANNELS/2 (src/graph/search.cc:209 at v2.5.6-1 and
# src/init.cc:625 at v2.6.4-1, MAXCHANNELS 32 in src/include/devcomm.h; src/init.cc:1177
# at v2.30.7-1, MAXCHANNELS 64 in src/include/device.h:91). 2.4: MAXCHANNELS 16
# (src/include/comm.h:21 at v2.4.8-1).
_MAX_GRAPH_CHANNELS = {"2.5": 16, "2.6": 16, "2.7": 16, "2.30": 32}
_MAXCHANNELS = {"2.4": 16, "2.5": 32, "2.6": 32, "2.7": 32, "2.30": 64}
_EPS = 1e-9


@attrs.frozen
class NcclTopology:
    """What NCCL sees: channels and per-channel speeds of its ring and tree graphs.

    Attributes
    ----------
    version : str
        NCCL version family (a key of ``NCCL_VERSIONS``).
    n_channels : int
        Channels of the ring and tree graphs (the ``nChannels`` the tuning model
        multiplies the per-channel speed by; NCCL 2.4: its number of rings) [-].
    comm_channels : int
        Channels of the communicator (the graph's duplicated, src/graph/connect.cc) [-].
    ring_bw_intra, ring_bw_inter : float
        Per-channel speed of the ring graph inside and between nodes [bytes/s].
    tree_bw_intra, tree_bw_inter : float
        Per-channel speed of the tree graph inside and between nodes [bytes/s].
    nic_bw : float
        NIC speed NCCL assumes, per NIC (0 on one node and for 2.4, which has no
        bandwidth model) [bytes/s].
    nvlink : bool
        Whether the intra-node paths are NVLink (NCCL's ``typeIntra == NVL``).
    """

    version: str
    n_channels: int
    comm_channels: int
    ring_bw_intra: float
    ring_bw_inter: float
    tree_bw_intra: float
    tree_bw_inter: float
    nic_bw: float
    nvlink: bool


@attrs.frozen(eq=False)
class NcclChoice:
    """NCCL's choice for each message size, and the time its model predicts.

    Attributes
    ----------
    collective : str
        ``"all_reduce"``, ``"reduce_scatter"`` or ``"all_gather"``.
    version : str
        NCCL version family.
    nbytes : float or numpy.ndarray
        Message size [bytes] (the input buffer of all-reduce, NCCL's ``nBytes``).
    algorithm : str or numpy.ndarray
        ``"ring"``, ``"tree"`` or ``"pat"`` per size.
    protocol : str or numpy.ndarray
        ``"LL"``, ``"LL128"`` or ``"Simple"`` per size.
    time : float or numpy.ndarray
        NCCL's predicted time of the chosen pair [s] (NCCL 2.4: the time on the two lines
        its threshold formula intersects, see :func:`nccl_latency`).
    latency : float or numpy.ndarray
        Its latency term, per-call corrections included [s].
    algbw : float or numpy.ndarray
        Its algorithm bandwidth, per-call corrections included [bytes/s]:
        ``time = latency + nbytes / algbw``.
    payload_fraction : float or numpy.ndarray
        Fraction of the wire bytes that are payload for the chosen protocol [-].
    topology : NcclTopology
        NCCL's view of the hardware the choice was made on.
    """

    collective: str
    version: str
    nbytes: object
    algorithm: object
    protocol: object
    time: object
    latency: object
    algbw: object
    payload_fraction: object
    topology: NcclTopology


# --------------------------------------------------------------------------- checking


_LOOKUPS: dict = {}  # _name's tables by (known names, aliases): static, as the constants


def _lookup(known, aliases):
    """Lower-case name or alias -> canonical name, made once per (known, aliases)."""
    try:
        key = (known, tuple(aliases.items()) if aliases else ())
        table = _LOOKUPS.get(key)
    except (TypeError, AttributeError):  # a list of names, say: made each time
        key = table = None
    if table is None:
        table = {k.lower(): k for k in known}
        for alias, target in (aliases or {}).items():
            table[alias.lower()] = target
        if key is not None:
            _LOOKUPS[key] = table
    return table


def _name(value, parameter, known, aliases=None):
    if not isinstance(value, str):
        raise ParameterTypeError(parameter, value, "a string")
    key = value.strip()
    lookup = _lookup(known, aliases)  # read only
    norm = key.lower().replace("-", "_").replace(" ", "_")
    if norm in lookup:
        return lookup[norm]
    if key.lower() in lookup:
        return lookup[key.lower()]
    raise UnknownNameError(parameter, value, known, aliases)


def _version(version):
    if not isinstance(version, str):
        raise ParameterTypeError("version", version, "a string such as '2.30' or '2.4.8'")
    text = version.strip().lstrip("vV")
    text = text.split("-")[0].split("+")[0]
    if text in NCCL_VERSIONS:
        return text
    for family, tags in NCCL_VERSIONS.items():
        if text in tags:
            return family
    known = list(NCCL_VERSIONS) + [t for tags in NCCL_VERSIONS.values() for t in tags]
    raise UnknownNameError("version", version, known,
                           extra="versions 2.8-2.29 are not modelled")


def _collective(collective):
    return _name(collective, "collective", NCCL_COLLECTIVES,
                 {"allreduce": "all_reduce", "reducescatter": "reduce_scatter",
                  "allgather": "all_gather"})


def _count(value, parameter, minimum=1):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ParameterTypeError(parameter, value, f"an integer >= {minimum}")
    if value < minimum or value > 2**31 - 1:
        raise InvalidParameterError(parameter, value, f"must be an integer >= {minimum}")
    return int(value)


def _ranks(n_ranks, n_nodes):
    n_ranks = _count(n_ranks, "n_ranks", 2)
    n_nodes = _count(n_nodes, "n_nodes", 1)
    if n_ranks < n_nodes or n_ranks % n_nodes:
        raise InvalidParameterError(
            "n_ranks", n_ranks, f"must be a multiple of n_nodes={n_nodes} "
            "(NCCL's model assumes the same number of GPUs on every node)")
    return n_ranks, n_nodes


def _arch(arch, version):
    arch = _name(arch, "arch", NCCL_ARCHS,
                 {"v100": "volta", "sm70": "volta", "a100": "ampere", "sm80": "ampere",
                  "h100": "hopper", "h200": "hopper", "sm90": "hopper", "b200": "blackwell",
                  "sm100": "blackwell"})
    if arch not in _ARCHS_OF[version]:
        raise InvalidParameterError(
            "arch", arch, f"NCCL {version} predates it (it knows {', '.join(_ARCHS_OF[version])})",
            "pass a later version=")
    return arch


def _nic_gbps(inter_bw, version):
    """NIC speed as NCCL sees it [GB/s]."""
    if version == "2.5":
        return _NET_WIDTH_25
    if inter_bw is None:
        return _DEFAULT_NIC_MBPS / 8000.0
    bits = parse_bandwidth(inter_bw, "inter_bw")
    if np.ndim(bits) != 0:
        raise InvalidParameterError("inter_bw", inter_bw, "must be one NIC speed, not an array")
    return float(bits) / 1e6 / 8000.0  # Mbit/s -> GB/s as NCCL: mbps / 8000


# --------------------------------------------------------------------------- topology search


def _nvlink_cap(version, arch, speed):
    """Channels the NVLinks of one GPU carry at ``speed`` [GB/s] per channel (each channel
    leaves every GPU once over one of its link groups)."""
    per_link = _NVLINK_BW[version][arch]
    groups = _NVLINK_GROUPS[arch]
    return sum(int(g * per_link / speed + _EPS) for g in groups)


def _intra(version, arch, intra, ppn):
    """(total bw per GPU, widest path, channel capacity function) inside a node [GB/s]."""
    if ppn == 1:  # one GPU per node: no intra-node hop constrains the search
        return math.inf, math.inf, lambda s: 10**6
    if intra == "nvlink":
        per_link = _NVLINK_BW[version][arch]
        groups = _NVLINK_GROUPS[arch]
        total = sum(groups) * per_link
        widest = max(groups) * per_link
        return total, widest, lambda s: _nvlink_cap(version, arch, s)
    pci = 12.0 if version == "2.5" else _PCI_BW[arch]
    return pci, pci, lambda s: int(pci / s + _EPS)


def _best(speeds, start_cap, cap, stop_total, max_ch=16):
    """Pass 1 of ncclTopoCompute: the first speed not above ``start_cap``, then lower ones
    while the next is more than 0.49 of the best found; keep the largest nCh*speed (first
    on ties). Returns (nChannels, speed, index)."""
    idx = 0
    while idx < len(speeds) - 1 and speeds[idx] > start_cap + _EPS:
        idx += 1
    best = (0, 0.0, idx)
    while True:
        s = speeds[idx]
        n = min(cap(s), max_ch) if s <= start_cap + _EPS else 0
        if n > 0 and n * s > best[0] * best[1] + _EPS:
            best = (n, s, idx)
        if best[0] and best[0] * best[1] >= stop_total - _EPS:
            break
        if idx < len(speeds) - 1 and (best[0] == 0 or speeds[idx + 1] / best[1] > 0.49):
            idx += 1
            continue
        break
    if best[0] == 0:  # NCCL's fallback: one channel at the lowest speed
        return 1, speeds[-1], len(speeds) - 1
    return best


def _search(version, arch, intra, n_nodes, ppn, nics, nic):
    """Idealized ncclTopoCompute: (n, ring_intra, ring_inter, tree_intra, tree_inter) [GB/s]."""
    total, widest, cap_intra = _intra(version, arch, intra, ppn)
    multi = n_nodes > 1
    if version == "2.5":
        return _search_25(intra, multi, nics, nic, total, widest, cap_intra)
    if version in ("2.6", "2.7"):
        return _search_26_27(version, arch, intra, multi, nics, nic, total, widest, cap_intra)
    return _search_230(arch, multi, nics, nic, total, widest, cap_intra)


def _search_25(intra, multi, nics, nic, total, widest, cap_intra):
    """The 2.5 search: one ring speed from the NVLink (or PCI) width down in steps of
    3 GB/s, trees raised by 3 while within twice the ring's (GB/s figures)."""
    # Speeds from the NVLink (or PCI) width down in steps of 3 GB/s
    # (src/graph/search.cc:538 at v2.5.6-1); one channel per NET (search.cc:295).
    start = _NVLINK_BW["2.5"]["volta"] if intra == "nvlink" else 12.0
    speeds = tuple(float(s) for s in range(int(start), 2, -3))
    if multi:
        path = min(nic, 12.0)  # NIC width and its PCIe path
        n, s, _ = _best(speeds, path, lambda s: min(nics, cap_intra(s)), math.inf,
                        max_ch=_MAX_GRAPH_CHANNELS["2.5"])
    else:
        n, s, _ = _best(speeds, start, cap_intra, total, max_ch=_MAX_GRAPH_CHANNELS["2.5"])
    tree_intra = s
    # Trees: raise the intra-node speed by 3 while <= 2x inter (search.cc:550).
    while tree_intra + 3 <= 2 * s + _EPS and tree_intra + 3 <= widest + _EPS \
            and cap_intra(tree_intra + 3) >= n:
        tree_intra += 3
    return n, s, s, tree_intra, s


def _search_26_27(version, arch, intra, multi, nics, nic, total, widest, cap_intra):
    """The 2.6 and 2.7 search: pass 1 over the version's speed list, pass 2 raising the
    trees' intra-node speed, and (2.7) channel duplication (GB/s figures)."""
    speeds = _SPEEDS[version]
    max_ch = _MAX_GRAPH_CHANNELS[version]
    if multi:
        path = min(nic, _PCI_BW[arch])
        start = path
        cap = lambda s: min(nics * int(path / s + _EPS), cap_intra(s))  # noqa: E731
        stop = math.inf
    else:
        # 2.6 caps an NVLink path at one link (search.cc:16-21 at v2.6.4-1); 2.7 not.
        start = (_NVLINK_BW[version][arch] if version == "2.6" and intra == "nvlink"
                 else widest)
        cap, stop = cap_intra, total
    n, s, idx = _best(speeds, start, cap, stop, max_ch=max_ch)
    tree_intra = s
    # Pass 2, trees only: raise bwIntra while it is below twice bwInter
    # (search.cc:750 at v2.6.4-1, :755 at v2.7.8-1).
    while idx > 0 and tree_intra < 2 * s - _EPS:
        cand = speeds[idx - 1]
        if cand > widest + _EPS or cap_intra(cand) < n:
            break
        tree_intra, idx = cand, idx - 1
    ring = [n, s, s]
    tree = [n, tree_intra, s]
    if version == "2.7":
        # Duplicate channels when bwIntra >= 25 (search.cc:773-779 at v2.7.8-1).
        for g in (ring, tree):
            if g[1] >= 25.0:
                dup = min(2 * g[0], max_ch)
                div = -(-dup // g[0])
                g[0], g[1], g[2] = dup, g[1] / div, g[2] / div
    n = min(ring[0], tree[0])
    return n, ring[1], ring[2], tree[1], tree[2]


def _search_230(arch, multi, nics, nic, total, widest, cap_intra):
    """The 2.30 search: pass 1, ncclTopoDupChannels, then pass 2 for rings (higher speeds
    with as many channels) and trees (raised intra-node speed) (GB/s figures)."""
    cc = _COMPCAP[arch]
    cc_key = 100 if cc >= 100 else 90 if cc >= 90 else 70
    speeds = _SPEEDS_230[("inter" if multi else "intra", cc_key)]
    max_ch = _MAX_GRAPH_CHANNELS["2.30"]
    if multi:
        path = min(nic, _PCI_BW[arch])
        start = path
        cap = lambda s: min(nics * int(path / s + _EPS), cap_intra(s))  # noqa: E731
    else:
        start, cap = widest, cap_intra
    n, s, idx = _best(speeds, start, cap, total, max_ch=max_ch)
    # ncclTopoDupChannels after pass 1 (search.cc:1036-1049 at v2.30.7-1).
    if s >= 25.0 and not (cc > 80 and s < 50.0 and n > 4):
        dup = min(2 * n, max_ch)
        s = s / -(-dup // n)
        n = dup
        idx = 0
        while idx < len(speeds) - 1 and speeds[idx] > s + _EPS:
            idx += 1
    # Pass 2, ring: try every higher speed with at least as many channels (search.cc:1271).
    ring_n, ring_s = n, s
    for cand in speeds[:idx]:
        c = min(cap(cand), max_ch) if cand <= start + _EPS else 0
        if c >= n and c * cand > ring_n * ring_s + _EPS:
            ring_n, ring_s = c, cand
    # Pass 2, tree: raise bwIntra while below twice bwInter (search.cc:1280).
    tree_intra, j = s, idx
    while j > 0 and tree_intra < 2 * s - _EPS:
        cand = speeds[j - 1]
        if cand > widest + _EPS or cap_intra(cand) < n:
            break
        tree_intra, j = cand, j - 1
    n = min(ring_n, n)
    return n, ring_s, ring_s, tree_intra, s


def _topology(version, arch, intra, n_ranks, n_nodes, nics, nic, n_channels):
    nvlink = intra == "nvlink"
    ppn = n_ranks // n_nodes
    if version == "2.4":
        # Rings: one per NIC (src/transport/net.cc:202 at v2.4.8-1), doubled on multi-node
        # NVLink systems (src/misc/rings.cc:357); on one node the NVLink ring search finds
        # 6 rings on a DGX-1/p3dn hybrid cube mesh and doubles them (src/transport/p2p.cc:269),
        # PCI gives 1 (p2p.cc p2pComputeRingsPci).
        if n_nodes > 1:
            n = nics * (2 if nvlink else 1)
        else:
            n = 12 if nvlink else 1
        n = min(n, _MAXCHANNELS["2.4"])
        if n_channels is not None:
            n = n_channels
        # ringbw / treebw of ncclTreeThreshold [MB/s = bytes/us] (src/init.cc:357-367).
        ring = 5000.0 * n if nvlink else 5000.0
        tree = ring * (3 / 4 if nvlink else 2 / 3) * (2 if nvlink and n_nodes == 2 else 1)
        return NcclTopology("2.4", n, n, ring * 1e6, ring * 1e6, tree * 1e6, tree * 1e6,
                            0.0, nvlink)
    n, ri, rx, ti, tx = _search(version, arch, intra, n_nodes, ppn, nics, nic)
    if n_channels is not None:
        n = n_channels
    comm = min(_MAXCHANNELS[version], 2 * n)
    return NcclTopology(version, n, comm, ri * _GB, rx * _GB, ti * _GB, tx * _GB,
                        0.0 if n_nodes == 1 else nic * _GB, nvlink)


def nccl_topology(n_ranks, n_nodes, *, arch="volta", intra="nvlink", n_channels=None,
                  inter_bw=None, nics_per_node=1, version="2.30"):
    """NCCL's view of the hardware: channels and per-channel speeds of its graphs.

    Parameters
    ----------
    n_ranks : int
        GPUs in the communicator [-].
    n_nodes : int
        Nodes they span (``n_ranks`` must be a multiple) [-].
    arch : str
        GPU architecture: ``"volta"``, ``"ampere"``, ``"hopper"``, ``"blackwell"`` [-].
    intra : str
        Link between GPUs of a node: ``"nvlink"`` or ``"pci"`` [-].
    n_channels : int or None
        Override of the number of channels NCCL's search finds [-].
    inter_bw : float, str or None
        NIC speed as NCCL detects it (not a rate imposed later with ``tc``) [bits/s];
        None: what NCCL assumes when it cannot read one (10 Gbit/s since 2.6; 2.5 always
        assumed 100 Gbit/s, 2.4 had no bandwidth model).
    nics_per_node : int
        NICs per node NCCL uses [-].
    version : str
        NCCL version, a family such as ``"2.4"`` or a release such as ``"2.4.8"`` [-].

    Returns
    -------
    NcclTopology
        Channels and per-channel speeds [bytes/s].

    Raises
    ------
    UnknownNameError
        For an unknown version, architecture or intra-node link.
    InvalidParameterError
        For counts below 1, ``n_ranks`` not a multiple of ``n_nodes``, or an architecture
        the version predates.

    Examples
    --------
    >>> from scalemodel.nccl import nccl_topology
    >>> t = nccl_topology(16, 2, version="2.30", inter_bw=100e9)
    >>> t.n_channels, t.ring_bw_inter / 1e9, t.tree_bw_intra / 1e9
    (1, 12.0, 24.0)
    """
    version = _version(version)
    n_ranks, n_nodes = _ranks(n_ranks, n_nodes)
    arch = _arch(arch, version)
    intra = _name(intra, "intra", _INTRA, {"nvl": "nvlink", "pcie": "pci"})
    nics = _count(nics_per_node, "nics_per_node", 1)
    if n_channels is not None:
        n_channels = _count(n_channels, "n_channels", 1)
    nic = _nic_gbps(inter_bw, version)
    return _topology(version, arch, intra, n_ranks, n_nodes, nics, nic, n_channels)


# --------------------------------------------------------------------------- tuning tables

# 2.5/2.6 (src/graph/tuning.cc at v2.5.6-1 lines 60-77, identical numbers at v2.6.4-1
# lines 60-77) and 2.7 (lines 56-74 at v2.7.8-1). Latency [us]; index [algo][proto] with
# algo 0 tree, 1 ring and proto 0 LL, 1 LL128, 2 Simple.
_BASE_LAT = {
    "2.5": ((4.4, 4.4, 0.0), (3.6, 3.6, 8.4)),
    "2.7": ((4.4, 4.4, 0.0), (3.6, 10.0, 8.4)),
}
_HW_LAT = {  # [hw: nvlink, pci, net][algo][proto]
    "2.5": (((0.5, 1.9, 28.0), (0.4, 2.5, 5.7)),
            ((1.0, 1.9, 28.0), (1.0, 2.5, 5.7)),
            ((5.0, 7.5, 50.0), (0.9, 2.5, 6.6))),
    "2.7": (((0.52, 1.2, 28.0), (0.47, 1.9, 3.4)),
            ((1.0, 1.9, 28.0), (1.0, 2.5, 5.7)),
            ((5.0, 8.5, 50.0), (2.7, 4.0, 9.6))),
}
# LL128 caps per collective [GB/s], order all_reduce, reduce_scatter, all_gather:
# 2.5/2.6 total ll128MaxBw (line 77), 2.7 per channel ll128MaxBwPerCh (line 74).
_LL128_MAX = {"2.5": {"all_reduce": 100.0, "reduce_scatter": 91.0, "all_gather": 110.0},
              "2.7": {"all_reduce": 16.7, "reduce_scatter": 15.2, "all_gather": 18.3}}
# Tree correction factors by log2(nBytes/64): enqueue.cc:232-236 at v2.5.6-1 (also
# tuning.cc:232 at v2.6.4-1), tuning.cc:247-251 at v2.7.8-1, tuning.cc:623-628 at v2.30.7-1.
_TREE_CORR = {
    "2.5": ((1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .5, .5, .6, .7, .8, .9, .9, 1.0,
             1.0, 1.0),
            (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .8, .7, .7, .7, .6, .6, .7, .7, .8, .8, .9,
             .9, 1.0),
            (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8,
             .9)),
    "2.7": ((1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
             1.0, 1.0),
            (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9,
             .9, 1.0),
            (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8,
             .9)),
    "2.30": ((1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
              1.0, 1.0, 1.0, 1.0, 1.0),
             (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
             (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8,
              .9, .9, .9)),
}
_TREE_CORR["2.6"] = _TREE_CORR["2.5"]

# 2.30 tuner constants (src/graph/tuning.cc:146-211 at v2.30.7-1), algorithms tree, ring,
# PAT; compute-capability index volta 0, ampere 1, hopper 2, blackwell 3; node index 1, 2, >2.
_BASE_LAT_230 = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "pat": (8.0, 8.0, 8.0)}
_HW_LAT_230 = {  # [hw][algo] -> (LL, LL128, Simple)
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "pat": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "pat": (0.0, 0.0, 14.0)},
}
_LL_MAX_230 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_RING_LL128_230 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
_TREE_LL128_230 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
_TREE_MAX_230 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
# Network post overhead per ring step [us]: 1 Intel, 2 AMD, x3 for Simple
# (src/graph/tuning.cc:228-233 and :406-409 at v2.30.7-1).
_NET_OVERHEAD_230 = {"intel": 1.0, "amd": 2.0}
# LL128 default-enable limits on the NIC path (path type order of src/graph/topo.h).
_PATH_RANK = {"PIX": 0, "PXB": 1, "PXN": 2, "PHB": 3, "SYS": 4}


def _log2i(x):
    """floor(log2(x)) for integers x >= 1, as an int array."""
    _, e = np.frexp(np.maximum(x, 1.0))
    return e.astype(np.int64) - 1


def _nsteps(coll, n_ranks):
    return 2 * (n_ranks - 1) if coll == "all_reduce" else n_ranks - 1


def _ll128_enabled(version, arch, intra, nic_path, n_nodes):
    nvlink = intra == "nvlink"
    rank = _PATH_RANK[nic_path] if n_nodes > 1 else 0
    cc = _COMPCAP[arch]
    if version == "2.5":  # type <= LINK_PCI && nvlink && sm70 (tuning.cc:154 at v2.5.6-1)
        return nvlink and rank <= _PATH_RANK["PHB"] and cc == 70
    if version == "2.6":  # typeInter <= PATH_PIX && NVL && sm70 (tuning.cc:165 at v2.6.4-1)
        return nvlink and rank <= _PATH_RANK["PIX"] and cc == 70
    if version == "2.7":  # typeInter <= PATH_PXB && NVL && sm70/sm80 (tuning.cc:176 at v2.7.8-1)
        return nvlink and rank <= _PATH_RANK["PXB"] and cc in (70, 80)
    # 2.30: <= PXN on sm90+, else <= PXB; intra <= NVB (tuning.cc:517-534 at v2.30.7-1)
    limit = _PATH_RANK["PXN"] if cc >= 90 else _PATH_RANK["PXB"]
    return nvlink and rank <= limit


def _tables(version, coll, n_ranks, n_nodes, topo, arch, intra, nic_path, cpu):
    """NCCL's init-time cost table: {(algo, proto): (latency [us], bandwidth [GB/s])}."""
    if version == "2.4":
        return _tables_24(coll, n_ranks, n_nodes, topo, intra)
    ll128 = _ll128_enabled(version, arch, intra, nic_path, n_nodes)
    ring_speed = (topo.ring_bw_intra if n_nodes <= 2 else topo.ring_bw_inter) / _GB
    tree_speed = (topo.tree_bw_intra if n_nodes <= 2 else topo.tree_bw_inter) / _GB
    if version in ("2.5", "2.6", "2.7"):
        return _tables_25_27(version, coll, n_ranks, n_nodes, topo.n_channels, arch, intra,
                             ring_speed, tree_speed, ll128)
    return _tables_230(coll, n_ranks, n_nodes, topo.n_channels, arch, intra, cpu,
                       ring_speed, tree_speed, ll128)


def _tables_24(coll, n_ranks, n_nodes, topo, intra):
    """The 2.4 table: ring and tree latencies of ncclTreeThreshold, no LL128, trees only
    for multi-node all-reduce (latency [us], bandwidth [GB/s])."""
    ppn = n_ranks // n_nodes
    out = {}
    ring_lat = 6.0 * (n_ranks - 1)
    tree_lat = 15.0 * int(math.log2(n_nodes)) + 4.0 * (ppn - 1)
    ringbw = topo.ring_bw_intra / _GB
    treebw = topo.tree_bw_intra / _GB
    for proto in NCCL_PROTOCOLS:
        ok = proto != "LL128"
        out[("ring", proto)] = (ring_lat, ringbw if ok else 0.0)
        tree_ok = ok and coll == "all_reduce" and n_nodes > 1
        out[("tree", proto)] = (tree_lat, treebw if tree_ok else 0.0)
    return out


def _tables_25_27(version, coll, n_ranks, n_nodes, n, arch, intra, ring_speed, tree_speed,
                  ll128):
    """The 2.5-2.7 table over tree (all-reduce only) and ring and the three protocols
    (latency [us], bandwidth [GB/s])."""
    ppn = n_ranks // n_nodes
    nsteps = _nsteps(coll, n_ranks)
    out = {}
    key = "2.7" if version == "2.7" else "2.5"
    base, hw = _BASE_LAT[key], _HW_LAT[key]
    intra_hw = 0 if intra == "nvlink" else 1
    cap80 = version == "2.7" and _COMPCAP[arch] == 80
    for a, algo in enumerate(("tree", "ring")):
        if algo == "tree" and coll != "all_reduce":
            continue
        for p, proto in enumerate(NCCL_PROTOCOLS):
            bus = _bus_25_27(version, coll, algo, proto, n,
                             tree_speed if algo == "tree" else ring_speed, ppn, n_nodes,
                             cap80)
            ratio = 0.5 if algo == "tree" else n_ranks / nsteps
            bw = bus * ratio
            if proto == "LL128" and not ll128:
                bw = 0.0
            lat = _lat_25_27(version, coll, algo, proto, base[a][p], hw[intra_hw][a][p],
                             hw[2][a][p], hw[2 if n_nodes > 1 else intra_hw][a][p], n_nodes,
                             ppn, nsteps)
            out[(algo, proto)] = (lat, bw)
    return out


def _bus_25_27(version, coll, algo, proto, n, speed, ppn, n_nodes, cap80):
    """2.5-2.7 bus bandwidth of one algorithm and protocol over ``n`` channels of
    ``speed``, with the protocol's factors and caps [GB/s]."""
    bus = n * speed
    if cap80:
        bus = min(bus, 235.0)  # tuning.cc:112 at v2.7.8-1
    if algo == "ring" and proto == "LL":
        if version == "2.7" and not (n_nodes > 1 or coll == "all_reduce"):
            bus *= 1 / 3
        else:
            bus *= 1 / 4
    if algo == "ring" and proto == "LL128":
        if version == "2.7":
            bus = min(bus * (0.7 if ppn < 2 else 0.92), _LL128_MAX["2.7"][coll] * n)
        else:
            bus = min(bus * 120 / 128, _LL128_MAX["2.5"][coll])
    if algo == "tree":
        if version == "2.5":
            cap = 70.0 if n_nodes > 1 else 90.0
        elif version == "2.6":
            cap = 80.0 if n_nodes > 2 else 110.0
        else:
            big = cap80 and proto == "LL128"
            cap = (105.0 if big else 80.0) if n_nodes > 2 else (130.0 if big else 110.0)
        bus = min(bus * 0.9, cap)
        if proto == "LL":
            bus *= 1 / 3.8 if version == "2.7" else 1 / 3
        if proto == "LL128":
            if version == "2.7":
                bus = min(bus * (7 / 9 if n_nodes == 1 else 0.915),
                          _LL128_MAX["2.7"][coll] * n * 7 / 9)
            else:
                bus *= 7 / 9
    return bus


def _lat_25_27(version, coll, algo, proto, lat, intra_lat, inter_lat, hop_lat, n_nodes, ppn,
               nsteps):
    """2.5-2.7 latency of one algorithm and protocol: the base ``lat`` plus its hops
    (``hop_lat``: the 2.5/2.6 ring's per-step latency) [us]."""
    if algo == "ring":
        if version == "2.7":
            if n_nodes > 1 and proto == "LL":
                intra_lat *= 1.8  # tuning.cc:132 at v2.7.8-1
            n_inter = (2 * (n_nodes - 1) if coll == "all_reduce" else n_nodes - 1)
            lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
        else:
            lat += nsteps * hop_lat
    else:
        if version == "2.7" and n_nodes > 1 and proto == "LL":
            intra_lat *= 1.8
        lat += 2 * ((ppn - 1) * intra_lat + int(math.log2(n_nodes)) * inter_lat)
    return lat


def _pairs_230(coll, ppn, n_nodes):
    """The (algorithm, protocol index, protocol) pairs 2.30 tunes: tree for all-reduce
    only, PAT for the others with one GPU per node on several nodes, Simple only."""
    for algo in NCCL_ALGORITHMS:
        if coll == "all_reduce" and algo == "pat":
            continue
        if coll != "all_reduce" and algo == "tree":
            continue
        pat_ok = algo == "pat" and ppn == 1 and n_nodes > 1  # ncclPatEnable, tuning.cc:215-222
        if algo == "pat" and not pat_ok:
            continue
        for p, proto in enumerate(NCCL_PROTOCOLS):
            if algo == "pat" and proto != "Simple":
                continue
            yield algo, p, proto


def _tables_230(coll, n_ranks, n_nodes, n, arch, intra, cpu, ring_speed, tree_speed, ll128):
    """The 2.30 table (latency [us], bandwidth [GB/s])."""
    ppn = n_ranks // n_nodes
    nsteps = _nsteps(coll, n_ranks)
    out = {}
    cci = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}[arch]
    i2 = n_nodes - 1 if n_nodes <= 2 else 2
    i1 = cci if n_nodes == 1 else (1 if cpu == "amd" else 0)
    ll_max = _LL_MAX_230[i1][i2]
    intra_key = "nvlink" if intra == "nvlink" else "pci"
    for algo, p, proto in _pairs_230(coll, ppn, n_nodes):
        graph_speed = tree_speed if algo in ("tree", "pat") else ring_speed
        bw = _bus_230(coll, algo, proto, n * graph_speed, n, ll_max, cci, i2, ppn, n_nodes,
                      n_ranks, nsteps)
        if proto == "LL128" and not ll128:
            bw = 0.0
        lat = _lat_230(coll, algo, p, proto, intra_key, cpu, ppn, n_nodes, n_ranks, nsteps)
        out[(algo, proto)] = (lat, bw)
    return out


def _bus_230(coll, algo, proto, bus, n, ll_max, cci, i2, ppn, n_nodes, n_ranks, nsteps):
    """2.30 bandwidth of one algorithm and protocol from the graph's ``bus`` (channels x
    speed), with the protocol's caps and the algorithm's ratio [GB/s]."""
    if algo == "ring" and proto == "LL":
        bus = min(ll_max, bus * 0.5)
    if algo == "ring" and proto == "LL128":
        bus = min(bus * 0.92, n * _RING_LL128_230[cci][i2])
    if algo == "tree" and coll == "all_reduce":
        bus = min(bus * 0.92, n * _TREE_MAX_230[cci][i2])
    if algo == "tree" and proto == "LL":
        bus = min(bus / 3.8, ll_max)
    if algo == "tree" and proto == "LL128":
        bus = min(bus * (7 / 9 if n_nodes == 1 else 120 / 128),
                  n * _TREE_LL128_230[cci][i2])
    if algo == "tree" and ppn == 1 and n_nodes > 1:
        bus *= 0.85  # maxTreePattern == TREE with one GPU per node
    if algo == "pat":
        bus *= 0.75
    if algo == "ring":
        bus *= n_ranks / nsteps
    elif coll == "all_reduce":
        bus *= 0.5
    return bus


def _lat_230(coll, algo, p, proto, intra_key, cpu, ppn, n_nodes, n_ranks, nsteps):
    """2.30 latency of one algorithm and protocol: base plus its intra- and inter-node
    hops (ring: at least the network post overhead per step) [us]."""
    lat = _BASE_LAT_230[algo][p]
    intra_lat = _HW_LAT_230[intra_key][algo][p]
    inter_lat = _HW_LAT_230["net"]["tree" if ppn == 1 else algo][p]
    if algo == "ring":
        overhead = 0.0
        if n_nodes > 1:
            overhead = _NET_OVERHEAD_230[cpu] * (3 if proto == "Simple" else 1)
        intra_lat = max(intra_lat, overhead)
        n_inter = (0 if n_nodes == 1 else
                   2 * (n_nodes - 1) if coll == "all_reduce" else n_nodes - 1)
        lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
    elif algo == "tree":
        lat += 2 * ((ppn - 1) * intra_lat + int(math.log2(n_nodes)) * inter_lat)
    else:
        lat += int(math.log2(n_nodes)) * (inter_lat / 3.5) + n_ranks * 2.8
    return lat


@functools.lru_cache(maxsize=256)  # a pure function of four counts: asked again and again
def _tree_threshold_24(n_nodes, n_ranks, n_channels, nvlink):
    """ncclTreeThreshold, src/init.cc:354-378 at v2.4.8-1, in C float arithmetic [bytes]."""
    f = np.float32
    ringbw = f(5000 * n_channels) if nvlink else f(5000)
    ringlatinter, treelatintra, treelatinter = f(6), f(4), f(15)
    if not nvlink:
        treebw = ringbw * f(2) / f(3)
    else:
        treebw = ringbw * f(3) / f(4)
        if n_nodes == 2:
            treebw = treebw * f(2)
    ringlat = ringlatinter * f(n_ranks - 1)
    treelat = treelatinter * f(int(math.log2(n_nodes))) + treelatintra * f(n_ranks // n_nodes - 1)
    if n_nodes < 2 or ringlat <= treelat:
        return 0
    if treebw > ringbw:
        return 2**63 - 1
    return int((ringbw * treebw / (ringbw - treebw)) * (ringlat - treelat))


def _ll_24(nbytes, n_channels, nchunks, thread_threshold):
    """Whether getKernelInfo (src/enqueue.cc:267-300 at v2.4.8-1) picks LL, per size."""
    nt = np.full(nbytes.shape, 64.0)  # NCCL_LL_MIN_NTHREADS
    for _ in range(2):  # up to NCCL_LL_MAX_NTHREADS = 256 (comm->nThreads 256): from 64,
        grow = nbytes / (nt * nchunks) > 8  # two doublings stay within it; ceil(y) > 8
        nt = np.where(grow, nt * 2, nt)     # exactly when y > 8
    nc = np.minimum(np.maximum(np.ceil(nbytes / (nt * nchunks * 8)), 1), n_channels)
    return nbytes <= nc * nt * nchunks * thread_threshold


# --------------------------------------------------------------------------- public model


_SETUPS: dict = {}  # _setup's answers by its arguments' types and values (at most 256)


def _setup_key(args):
    """A key of _setup's arguments when each is a str, an int, a float or None (its type
    in the key, and a float by its bits: ``64`` and ``64.0``, ``0.0`` and ``-0.0`` are
    told apart, so a key never stands for an argument that would be checked otherwise);
    None for anything else (not kept)."""
    key = []
    for a in args:
        t = type(a)
        if t is float:
            key.append((t, a.hex()))
        elif t is str or t is int or a is None:
            key.append((t, a))
        else:
            return None
    return tuple(key)


def _setup(collective, n_ranks, n_nodes, arch, intra, n_channels, inter_bw, version,
           nics_per_node, nic_path, cpu):
    """The checked arguments, NCCL's topology and its tables; kept by argument (they are
    read only), as a first question on a fitted cluster asks the same choice again."""
    args = (collective, n_ranks, n_nodes, arch, intra, n_channels, inter_bw, version,
            nics_per_node, nic_path, cpu)
    key = _setup_key(args)
    hit = None if key is None else _SETUPS.get(key)
    if hit is None:
        hit = _setup_checked(*args)
        if key is not None:
            if len(_SETUPS) >= 256:
                _SETUPS.clear()
            _SETUPS[key] = hit
    return hit


def _setup_checked(collective, n_ranks, n_nodes, arch, intra, n_channels, inter_bw, version,
                   nics_per_node, nic_path, cpu):
    version = _version(version)
    coll = _collective(collective)
    n_ranks, n_nodes = _ranks(n_ranks, n_nodes)
    arch = _arch(arch, version)
    intra = _name(intra, "intra", _INTRA, {"nvl": "nvlink", "pcie": "pci"})
    nics = _count(nics_per_node, "nics_per_node", 1)
    nic_path = _name(nic_path, "nic_path", _NIC_PATHS)
    cpu = _name(cpu, "cpu", _CPUS)
    if n_channels is not None:
        n_channels = _count(n_channels, "n_channels", 1)
    nic = _nic_gbps(inter_bw, version)
    topo = _topology(version, arch, intra, n_ranks, n_nodes, nics, nic, n_channels)
    table = _tables(version, coll, n_ranks, n_nodes, topo, arch, intra, nic_path, cpu)
    return version, coll, n_ranks, n_nodes, arch, intra, topo, table


def _pair(algorithm, protocol):
    algo = _name(algorithm, "algorithm", NCCL_ALGORITHMS)
    proto = _name(protocol, "protocol", NCCL_PROTOCOLS)
    return algo, proto


def protocol_efficiency(protocol):
    """Fraction of the bytes a protocol puts on the wire that are payload.

    Parameters
    ----------
    protocol : str
        ``"LL"`` (0.5: 8 data bytes per 16-byte line), ``"LL128"`` (120/128) or
        ``"Simple"`` (1) [-].

    Returns
    -------
    float
        Payload bytes per wire byte [-].

    Examples
    --------
    >>> from scalemodel.nccl import protocol_efficiency
    >>> protocol_efficiency("LL128")
    0.9375
    """
    return PROTOCOL_EFFICIENCY[_name(protocol, "protocol", NCCL_PROTOCOLS)]


_PAIR_PARAMETERS = """Parameters
    ----------
    collective : str
        ``"all_reduce"``, ``"reduce_scatter"`` or ``"all_gather"`` [-].
    algorithm : str
        ``"ring"``, ``"tree"`` or ``"pat"`` [-].
    protocol : str
        ``"LL"``, ``"LL128"`` or ``"Simple"`` [-].
    n_ranks : int
        GPUs in the communicator [-].
    n_nodes : int
        Nodes they span [-].
    arch : str
        As in :func:`nccl_choice` [-].
    intra : str
        As in :func:`nccl_choice` [-].
    n_channels : int or None
        As in :func:`nccl_choice` [-].
    inter_bw : float, str or None
        As in :func:`nccl_choice` [bits/s].
    version : str
        As in :func:`nccl_choice` [-].
    nics_per_node : int
        As in :func:`nccl_choice` [-].
    nic_path : str
        As in :func:`nccl_choice` [-].
    cpu : str
        As in :func:`nccl_choice` [-]."""
"""The parameters :func:`nccl_latency` and :func:`nccl_bandwidth` share."""


def nccl_latency(collective, algorithm, protocol, n_ranks, n_nodes, *, arch="volta",
                 intra="nvlink", n_channels=None, inter_bw=None, version="2.30",
                 nics_per_node=1, nic_path="PHB", cpu="intel"):
    """NCCL's latency of one (algorithm, protocol) for a collective, as set at init.

    {parameters}

    Returns
    -------
    float
        Latency [s], before the per-call ring plateau factor that :func:`nccl_choice`
        applies (x1.9 from 2.7 on for multi-node ring/Simple all-reduce, x1.4 on Ampere
        and later in 2.30). NCCL 2.4 had no latency table: its values are the
        ``ringlat`` = 6 us (n - 1) and ``treelat`` = 15 us log2(nodes) + 4 us (ppn - 1) of
        ``ncclTreeThreshold``, protocol-independent.

    Raises
    ------
    UnknownNameError
        For an unknown collective, algorithm, protocol or option name.
    InvalidParameterError
        If the pair does not exist for that collective and version.

    Notes
    -----
    Ring all-reduce in 2.30 (src/graph/tuning.cc:396-412 at v2.30.7-1):

    .. math::

       L = L_0 + (2(n-1) - 2(N-1))\\max(\\ell_\\text{intra}, o) + 2(N-1)\\,\\ell_\\text{net}

    with :math:`n` ranks, :math:`N` nodes, per-hop latencies :math:`\\ell` and the network
    post overhead :math:`o` (1 us Intel, 2 us AMD, x3 for Simple, 0 on one node).
    Tree all-reduce: :math:`L_0 + 2((n/N - 1)\\ell_\\text{intra} + \\lfloor\\log_2
    N\\rfloor \\ell_\\text{net})`.

    Examples
    --------
    >>> from scalemodel.nccl import nccl_latency
    >>> round(nccl_latency("all_reduce", "ring", "Simple", 16, 2) * 1e6, 1)
    131.6
    """
    version, coll, *_rest, table = _setup(collective, n_ranks, n_nodes, arch, intra,
                                          n_channels, inter_bw, version, nics_per_node,
                                          nic_path, cpu)
    algo, proto = _pair(algorithm, protocol)
    if (algo, proto) not in table:
        raise InvalidParameterError(
            "algorithm", algorithm,
            f"NCCL {version} has no {algo}/{proto} for {coll} on this topology")
    return table[(algo, proto)][0] * _US


def nccl_bandwidth(collective, algorithm, protocol, n_ranks, n_nodes, *, arch="volta",
                   intra="nvlink", n_channels=None, inter_bw=None, version="2.30",
                   nics_per_node=1, nic_path="PHB", cpu="intel"):
    """NCCL's algorithm bandwidth of one (algorithm, protocol), as set at init.

    {parameters}

    Returns
    -------
    float
        Algorithm bandwidth [bytes/s] (message bytes per second of the whole operation),
        0.0 where NCCL disables the pair (LL128 off by default on that path, no tree on
        one node in 2.4); before the per-size tree correction factor.

    Raises
    ------
    UnknownNameError
        For an unknown collective, algorithm, protocol or option name.
    InvalidParameterError
        If the pair does not exist for that collective and version.

    Notes
    -----
    From the graph's channels :math:`c` and per-channel speed :math:`b` (intra-node speed
    on up to two nodes, inter-node beyond), the bus bandwidth :math:`cb` is capped and
    scaled per algorithm and protocol (src/graph/tuning.cc:320-382 at v2.30.7-1), then
    converted: ring all-reduce :math:`\\times n/(2(n-1))`, ring all-gather and
    reduce-scatter :math:`\\times n/(n-1)`, tree all-reduce :math:`\\times 1/2`.

    Examples
    --------
    >>> from scalemodel.nccl import nccl_bandwidth
    >>> round(nccl_bandwidth("all_reduce", "ring", "Simple", 16, 2, inter_bw=100e9) / 1e9, 2)
    6.4
    """
    version, coll, *_rest, table = _setup(collective, n_ranks, n_nodes, arch, intra,
                                          n_channels, inter_bw, version, nics_per_node,
                                          nic_path, cpu)
    algo, proto = _pair(algorithm, protocol)
    if (algo, proto) not in table:
        raise InvalidParameterError(
            "algorithm", algorithm,
            f"NCCL {version} has no {algo}/{proto} for {coll} on this topology")
    return table[(algo, proto)][1] * _GB


def _sizes(nbytes):
    if isinstance(nbytes, (str, bytes, bool, np.bool_)) or nbytes is None:
        raise ParameterTypeError("nbytes", nbytes, "a number of bytes or an array of them")
    try:
        arr = np.asarray(nbytes, dtype=float)
    except (TypeError, ValueError):
        raise ParameterTypeError("nbytes", nbytes, "a number of bytes or an array of them")
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        first = arr[bad].flat[0] if arr.ndim else float(arr)
        raise InvalidParameterError("nbytes", first, "must be finite and > 0 bytes",
                                    "NCCL returns at once for empty buffers")
    return arr


def nccl_choice(collective, nbytes, n_ranks, n_nodes, *, arch="volta", intra="nvlink",
                n_channels=None, inter_bw=None, version="2.30", nics_per_node=1,
                nic_path="PHB", cpu="intel"):
    """The algorithm and protocol NCCL picks for each message size, and its predicted time.

    Parameters
    ----------
    collective : str
        ``"all_reduce"``, ``"reduce_scatter"`` or ``"all_gather"`` [-].
    nbytes : float or array_like
        Message size, NCCL's ``nBytes``: the send buffer of all-reduce, the receive
        buffer of all-gather, the send buffer of reduce-scatter [bytes].
    n_ranks : int
        GPUs in the communicator [-].
    n_nodes : int
        Nodes they span (``n_ranks`` must be a multiple of it) [-].
    arch : str
        GPU architecture: ``"volta"``, ``"ampere"``, ``"hopper"``, ``"blackwell"`` [-].
    intra : str
        Link between GPUs of a node: ``"nvlink"`` or ``"pci"`` [-].
    n_channels : int or None
        Override of the number of channels NCCL's search finds [-].
    inter_bw : float, str or None
        NIC speed as NCCL detects it, not a rate imposed later with ``tc`` [bits/s];
        None: what NCCL assumes when it cannot read one (10 Gbit/s from 2.6 on, the
        case of AWS ENA sockets; 2.5 always assumed 100 Gbit/s; 2.4 has no use for it).
    version : str
        NCCL version: ``"2.4"``, ``"2.5"``, ``"2.6"``, ``"2.7"``, ``"2.30"`` or a release
        such as ``"2.4.8"`` [-].
    nics_per_node : int
        NICs per node NCCL uses [-].
    nic_path : str
        PCIe distance between a GPU and its NIC as NCCL classifies it (``"PIX"``,
        ``"PXB"``, ``"PXN"``, ``"PHB"``, ``"SYS"``); it decides whether LL128 is on by
        default on multi-node runs [-].
    cpu : str
        Host CPU vendor, ``"intel"`` or ``"amd"``; 2.30 charges AMD hosts more per network
        step [-].

    Returns
    -------
    NcclChoice
        ``algorithm``, ``protocol``, ``time`` [s], ``latency`` [s], ``algbw`` [bytes/s]
        and ``payload_fraction`` [-] per size (scalars for a scalar ``nbytes``), and the
        :class:`NcclTopology` NCCL saw.

    Raises
    ------
    UnknownNameError
        For an unknown collective, version, architecture or option name.
    InvalidParameterError
        For sizes that are not finite and positive, counts below their minimum
        (``n_ranks`` >= 2), ``n_ranks`` not a multiple of ``n_nodes``, or an architecture
        the version predates.
    ParameterTypeError
        For a non-numeric size or a non-integer count.

    Notes
    -----
    From 2.5 on NCCL takes the pair of least

    .. math::

       t_{a,p}(S) = L_{a,p}\\,c_L + \\frac{S}{10^3\\,B_{a,p}\\,c_B(S)}\\quad[\\mu s]

    over the enabled (algorithm, protocol) pairs, in NCCL's order (tree before ring, LL
    before LL128 before Simple; ties go to the first): :math:`c_B` is the tree correction
    factor indexed by :math:`\\lfloor\\log_2(S/64)\\rfloor`, :math:`c_L` the ring plateau
    (2.7: x1.9 when :math:`S \\ge 4096\\,n` on several nodes; 2.30: x1.9 before Ampere,
    x1.4 after, when :math:`S \\ge 64\\,n\\,c_\\text{comm}`). NCCL 2.4 picks the tree for
    all-reduce when :math:`S` is at most ``ncclTreeThreshold`` and LL when :math:`S` is at
    most :math:`c \\cdot 256 \\cdot k \\cdot \\theta` (``getKernelInfo``: :math:`c`
    channels, 256 threads, :math:`k` chunks per loop, :math:`n` for rings and 1 for trees,
    :math:`\\theta` bytes per thread, 64 on one node, 128 on several, x4 for trees).

    Examples
    --------
    >>> from scalemodel.nccl import nccl_choice
    >>> c = nccl_choice("all_reduce", [2**20, 64 * 2**20], 16, 2, version="2.4")
    >>> c.algorithm.tolist(), c.protocol.tolist()
    (['tree', 'tree'], ['Simple', 'Simple'])
    >>> nccl_choice("all_reduce", 64 * 2**20, 32, 4, version="2.4.8").algorithm
    'ring'
    """
    version, coll, n_ranks, n_nodes, arch, intra, topo, table = _setup(
        collective, n_ranks, n_nodes, arch, intra, n_channels, inter_bw, version,
        nics_per_node, nic_path, cpu)
    sizes = _sizes(nbytes)
    s = np.atleast_1d(sizes).astype(float).ravel()
    whole = np.floor(s)

    if version == "2.4":
        nvlink = intra == "nvlink"
        # thread threshold: 64 bytes (Volta), x2 on several nodes (init.cc:145-155)
        theta = 64 * (2 if n_nodes > 1 else 1)
        if coll == "all_reduce":
            thr = _tree_threshold_24(n_nodes, n_ranks, topo.n_channels, nvlink)
            tree = (whole <= thr) & (thr > 0)
        else:
            tree = np.zeros(s.shape, bool)
        # the ring's and the tree's at once (each element as alone: the same operations)
        ll_ring, ll_tree = _ll_24(whole, topo.n_channels, np.array([[n_ranks], [1.0]]),
                                  np.array([[theta], [4.0 * theta]]))
        algo_idx = np.where(tree, 0, 1)
        proto_idx = np.where(np.where(tree, ll_tree, ll_ring), 0, 2)
        lat = np.where(tree, table[("tree", "Simple")][0], table[("ring", "Simple")][0])
        tbw = table[("tree", "LL")][1] if coll == "all_reduce" and n_nodes > 1 else 0.0
        bw = np.where(tree, tbw, table[("ring", "Simple")][1])
        names_a = _TREE_RING[algo_idx]
    else:
        pairs = [(a, p) for a in NCCL_ALGORITHMS for p in NCCL_PROTOCOLS if (a, p) in table]
        lats = np.empty((len(pairs), s.size))
        bws = np.empty((len(pairs), s.size))
        log_size = _log2i(np.floor(whole / 64))
        if version == "2.30":
            log_size = np.where(whole < 64, -1, log_size)
        corr = _TREE_CORR[version]
        for i, (a, p) in enumerate(pairs):
            lat0, bw0 = table[(a, p)]
            lat_i = np.full(s.shape, lat0)
            bw_i = np.full(s.shape, bw0)
            pi = NCCL_PROTOCOLS.index(p)
            if a == "tree" and coll == "all_reduce":
                limit = 23 if version == "2.30" else 22
                ok = (log_size >= 0) & (log_size < limit)
                factor = np.asarray(corr[pi])[np.clip(log_size, 0, len(corr[pi]) - 1)]
                bw_i = np.where(ok, bw_i * factor, bw_i)
            if a == "ring" and p == "Simple" and n_nodes > 1 and coll == "all_reduce":
                if version == "2.7":
                    plateau = whole >= n_ranks / 16.0 * 65536
                    lat_i = np.where(plateau, lat_i * 1.9, lat_i)
                elif version == "2.30":
                    plateau = np.floor(whole / (topo.comm_channels * n_ranks)) >= 64
                    lat_i = np.where(plateau, lat_i * (1.9 if _COMPCAP[arch] < 80 else 1.4),
                                     lat_i)
            lats[i], bws[i] = lat_i, bw_i
        with np.errstate(divide="ignore"):
            times = np.where(bws > 0, lats + s / (1000.0 * np.where(bws > 0, bws, 1.0)),
                             np.inf)
        best = np.argmin(times, axis=0)
        cols = np.arange(s.size)
        lat = lats[best, cols]
        bw = bws[best, cols]
        names_a = np.array([a for a, _ in pairs])[best]
        proto_idx = np.array([NCCL_PROTOCOLS.index(p) for _, p in pairs])[best]
    names_p = _PROTOCOL_NAMES[proto_idx]
    time = lat * _US + s / (bw * _GB)
    eff = _PROTOCOL_FRACTIONS[proto_idx]

    if np.ndim(sizes) == 0:
        return NcclChoice(coll, version, float(sizes), str(names_a[0]), str(names_p[0]),
                          float(time[0]), float(lat[0] * _US), float(bw[0] * _GB),
                          float(eff[0]), topo)
    shape = sizes.shape
    return NcclChoice(coll, version, sizes, names_a.reshape(shape), names_p.reshape(shape),
                      time.reshape(shape), (lat * _US).reshape(shape),
                      (bw * _GB).reshape(shape), eff.reshape(shape), topo)


for _fn in (nccl_latency, nccl_bandwidth):
    _fn.__doc__ = _fn.__doc__.replace("{parameters}", _PAIR_PARAMETERS.strip())
