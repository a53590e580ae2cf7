"""NCCL's algorithm and protocol choice (scalemodel.nccl) against numbers computed by hand
from NCCL's source, a line NCCL itself logged, and its structural properties.

Sources are the tags of github.com/NVIDIA/nccl named next to each number.
"""

import inspect
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalemodel import nccl
from scalemodel.exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from scalemodel.nccl import (nccl_bandwidth, nccl_choice, nccl_latency, nccl_topology,
                             protocol_efficiency)

KiB, MiB = 2**10, 2**20
P3DN = dict(arch="volta", intra="nvlink")  # 8 V100 SXM2 with NVLink per node


# --------------------------------------------------------------------------- protocols


def test_protocol_efficiency_is_the_wire_format():
    # union ncclLLFifoLine: 4 data + 4 flag + 4 data + 4 flag bytes; LL128: 15 of 16 words
    assert protocol_efficiency("LL") == 8 / 16
    assert protocol_efficiency("LL128") == 120 / 128
    assert protocol_efficiency("Simple") == 1.0
    assert protocol_efficiency("simple") == 1.0
    with pytest.raises(UnknownNameError, match="LL64"):
        protocol_efficiency("LL64")


# --------------------------------------------------------------------------- NCCL 2.4


def test_24_reproduces_the_threshold_nccl_logged():
    # netx-repo/training-bottleneck measurement/dt-autorun/log.example (NCCL 2.4.8, two
    # nodes x 4 GPUs without NVLink): "Trees enabled up to size 149999". By hand
    # (src/init.cc:354-378 at v2.4.8-1): ringbw 5000, treebw 5000*2/3, ringlat 6*7 = 42,
    # treelat 15*1 + 4*3 = 27: 10000 * 15 = 150000, 149999 after float rounding.
    kw = dict(intra="pci", version="2.4.8")
    assert nccl_choice("all_reduce", 149_999, 8, 2, **kw).algorithm == "tree"
    assert nccl_choice("all_reduce", 150_000, 8, 2, **kw).algorithm == "ring"


@pytest.mark.parametrize("nodes, threshold", [(4, 3_840_000), (8, 9_150_000)])
def test_24_p3dn_tree_threshold_by_hand(nodes, threshold):
    # 2 rings (1 NIC, doubled on NVLink): ringbw = 10000, treebw = 7500,
    # 10000*7500/2500 = 30000 bytes/us; ringlat - treelat = 6(n-1) - (15 log2 N + 4*7):
    # 4 nodes 186 - 58 = 128, 8 nodes 378 - 73 = 305.
    below = nccl_choice("all_reduce", [threshold, threshold + 1], 8 * nodes, nodes,
                        version="2.4", **P3DN)
    assert below.algorithm.tolist() == ["tree", "ring"]
    assert below.topology.n_channels == 2


def test_24_two_nodes_tree_for_every_size_one_node_never():
    # 2 nodes: treebw = 2 * 7500 > ringbw 10000 -> "enabled for all sizes"
    sizes = np.logspace(1, 10, 40)
    assert set(nccl_choice("all_reduce", sizes, 16, 2, version="2.4", **P3DN).algorithm) == {"tree"}
    assert set(nccl_choice("all_reduce", sizes, 8, 1, version="2.4", **P3DN).algorithm) == {"ring"}
    # reduce-scatter and all-gather always ran rings
    assert set(nccl_choice("all_gather", sizes, 16, 2, version="2.4").algorithm) == {"ring"}


def test_24_two_nodes_of_eight_without_nvlink_tree_only_below_470kB():
    # Li et al.'s 16 GPUs (2 servers x 8) if NCCL 2.4.8 does not detect NVLink
    # (getNvlinkGpu, src/include/nvlink.h:70-131 at v2.4.8-1, returns 0 when NVML reports no
    # P2P-capable active link): ncclTreeThreshold (src/init.cc:354-378) takes ringbw 5000,
    # treebw 5000*2/3, ringlat 6*15 = 90, treelat 15*1 + 4*7 = 43: 10000 * 47 = 470000,
    # 469999 after float rounding; every DDP bucket of 1 MB or more then runs the ring.
    kw = dict(intra="pci", version="2.4.8")
    c = nccl_choice("all_reduce", [469_999, 470_000, 25 * MiB], 16, 2, **kw)
    assert c.algorithm.tolist() == ["tree", "ring", "ring"]
    # with NVLink detected (getPatternInfo, src/enqueue.cc:236): the tree for every bucket
    c = nccl_choice("all_reduce", [469_999, 470_000, 25 * MiB, 200 * MiB], 16, 2,
                    version="2.4.8", **P3DN)
    assert set(c.algorithm.tolist()) == {"tree"}


@pytest.mark.parametrize("version", ["2.6", "2.7"])
def test_26_27_two_nodes_of_eight_ring_below_32MiB_tree_from_it(version):
    # 2 nodes x 8 V100 (NVLink) x one 100 Gbit/s NIC. Ring/Simple (src/graph/tuning.cc:96-148
    # at v2.7.8-1): 1 channel x 12 GB/s x 16/30 = 6.4 GB/s; 8.4 + 28 x 3.4 + 2 x 9.6 =
    # 122.8 us, x1.9 plateau (tuning.cc:261-262) = 233.32 us. Tree/Simple: 24 GB/s inside
    # (search.cc:752-758: speedIntra raised to 2 x speedInter), min(0.9 x 24, 110) / 2 =
    # 10.8 GB/s; 2 x (7 x 28 + 1 x 50) = 492 us. treeCorrectionFactor (tuning.cc:247-251)
    # for Simple is .6 at log2(S/64) = 18 (16-32 MiB): 6.48 GB/s, the ring wins up to
    # 134 MB; .7 at 19 (32-64 MiB): 7.56 GB/s, the tree wins from 10.8 MB on. 2.6.4
    # (tuning.cc at v2.6.4-1) has the same bandwidths and tree latency and no plateau, its
    # ring 8.4 + 30 x 6.6 = 206.4 us (:125-134, the network's 6.6 us on every step), and the
    # same Simple corrections (:232-237): the same bins. LL128 stays off (NIC path PHB).
    c = nccl_choice("all_reduce", [2**25 - 1, 2**25, 200 * MiB], 16, 2, version=version,
                    inter_bw=100e9, **P3DN)
    assert c.algorithm.tolist() == ["ring", "tree", "tree"]
    assert c.protocol.tolist() == ["Simple"] * 3
    ring_lat = 233.32e-6 if version == "2.7" else 206.4e-6
    assert c.time[0] == pytest.approx(ring_lat + (2**25 - 1) / 6.4e9, rel=1e-6)
    assert c.time[1] == pytest.approx(492e-6 + 2**25 / 7.56e9, rel=1e-6)


def _ll_reference(nbytes, n_channels, nchunks, thread_threshold):
    """getKernelInfo (src/enqueue.cc:267-300 at v2.4.8-1), literally, for one size."""
    per_thread_ll = min(thread_threshold, 8)
    nt = 64
    while -(-nbytes // (nt * nchunks)) > per_thread_ll and nt * 2 <= 256:
        nt *= 2
    nc = -(-nbytes // (nt * nchunks * per_thread_ll))
    nc = min(max(nc, 1), n_channels)
    return nbytes <= nc * nt * nchunks * thread_threshold


def test_24_ll_threshold_matches_the_kernel_info_loop():
    rng = np.random.default_rng(1)
    sizes = np.unique(np.concatenate([rng.integers(1, 8 * MiB, 400),
                                      [2_097_152, 2_097_153, 1, 63, 64, 65]]))
    got = nccl_choice("all_gather", sizes, 32, 4, version="2.4", **P3DN).protocol
    expected = ["LL" if _ll_reference(int(s), 2, 32, 128) else "Simple" for s in sizes]
    assert got.tolist() == expected
    # by hand: rings on 4 nodes use LL up to 2 channels * 256 threads * 32 chunks * 128 B
    c = nccl_choice("all_gather", [2_097_152, 2_097_153], 32, 4, version="2.4", **P3DN)
    assert c.protocol.tolist() == ["LL", "Simple"]


def test_24_tree_ll_threshold_by_hand():
    # trees: 1 chunk per loop, 4 x 128 bytes per thread: 2 * 256 * 512 = 262144
    c = nccl_choice("all_reduce", [262_144, 262_145], 16, 2, version="2.4", **P3DN)
    assert c.protocol.tolist() == ["LL", "Simple"]
    # one node: 12 rings (6 NVLink rings, doubled), 64 B per thread: 12*256*8*64
    c = nccl_choice("all_reduce", [1_572_864, 1_572_865], 8, 1, version="2.4", **P3DN)
    assert c.protocol.tolist() == ["LL", "Simple"]


def test_24_time_is_on_the_threshold_lines():
    # The threshold is where ringlat + S/ringbw meets treelat + S/treebw.
    thr = 3_840_000
    ring = nccl_choice("all_reduce", thr + 1, 32, 4, version="2.4", **P3DN)
    tree = nccl_choice("all_reduce", thr, 32, 4, version="2.4", **P3DN)
    assert ring.latency == pytest.approx(6 * 31e-6)
    assert ring.algbw == pytest.approx(10_000e6)
    assert tree.latency == pytest.approx((15 * 2 + 4 * 7) * 1e-6)
    assert tree.algbw == pytest.approx(7_500e6)
    assert tree.time == pytest.approx(ring.time, rel=1e-6)


# --------------------------------------------------------------------------- 2.5 - 2.7


def test_25_tables_by_hand():
    # src/graph/tuning.cc at v2.5.6-1; NCCL 2.5 assumes 12 GB/s per NIC, 1 channel per NIC,
    # trees on 2 nodes get 2 x 12 inside the node.
    kw = dict(version="2.5", **P3DN)
    bw = lambda a, p: nccl_bandwidth("all_reduce", a, p, 16, 2, **kw)  # noqa: E731
    assert bw("ring", "Simple") == pytest.approx(12e9 * 16 / 30)
    assert bw("tree", "Simple") == pytest.approx(24e9 * 0.9 * 0.5)
    assert bw("tree", "LL") == pytest.approx(24e9 * 0.9 / 3 * 0.5)
    assert nccl_bandwidth("all_reduce", "ring", "LL128", 16, 2, **kw) == pytest.approx(
        12e9 * 120 / 128 * 16 / 30)
    # ring: base 8.4 + 30 steps * NET 6.6; tree: 2 * (7 * 28 + 1 * 50)
    assert nccl_latency("all_reduce", "ring", "Simple", 16, 2, **kw) == pytest.approx(206.4e-6)
    assert nccl_latency("all_reduce", "tree", "Simple", 16, 2, **kw) == pytest.approx(492e-6)
    # the NIC speed NCCL 2.5 assumed did not depend on the machine
    a = nccl_choice("all_reduce", 64 * MiB, 16, 2, inter_bw=1e9, **kw)
    b = nccl_choice("all_reduce", 64 * MiB, 16, 2, inter_bw=100e9, **kw)
    assert (a.algorithm, a.protocol, a.time) == (b.algorithm, b.protocol, b.time)


def test_26_and_27_read_the_nic_speed_and_fall_back_to_10_gbit():
    for v in ("2.6", "2.7", "2.30"):
        default = nccl_topology(16, 2, version=v)
        assert default.nic_bw == pytest.approx(10e9 / 8)
        assert default.ring_bw_inter == pytest.approx(1.2e9)      # speed table entry <= 1.25
        assert default.tree_bw_intra == pytest.approx(2.4e9)      # trees: 2x inside the node
        fast = nccl_topology(16, 2, version=v, inter_bw="100Gbps")
        assert fast.ring_bw_inter == pytest.approx(12e9)          # limited by PCIe Gen3 x16
        assert fast.tree_bw_intra == pytest.approx(24e9)


def test_27_ring_plateau_latency():
    # x1.9 on multi-node ring/Simple all-reduce once nBytes >= nRanks/16 * 65536
    # (src/graph/tuning.cc:262 at v2.7.8-1)
    kw = dict(version="2.7", inter_bw=100e9, **P3DN)
    base = nccl_latency("all_reduce", "ring", "Simple", 32, 4, **kw)
    c = nccl_choice("all_reduce", 64 * MiB, 32, 4, **kw)
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.latency == pytest.approx(1.9 * base)
    # ring on 4 nodes: 62 steps, 6 of them inter-node: 8.4 + 56 * 3.4 + 6 * 9.6
    assert base == pytest.approx((8.4 + 56 * 3.4 + 6 * 9.6) * 1e-6)


# --------------------------------------------------------------------------- 2.30


def test_230_two_nodes_by_hand():
    # p3dn, NIC read as 100 Gbit/s: 1 channel, ring 12 GB/s, tree 24 GB/s inside the node.
    kw = dict(version="2.30", inter_bw=100e9, **P3DN)
    # ring Simple: 8.4 + (30 - 2) * max(3.4, 3 * 1.0) + 2 * 14
    assert nccl_latency("all_reduce", "ring", "Simple", 16, 2, **kw) == pytest.approx(131.6e-6)
    # ring LL: 6.6 + 28 * max(0.6, 1.0) + 2 * 2.7
    assert nccl_latency("all_reduce", "ring", "LL", 16, 2, **kw) == pytest.approx(40.0e-6)
    # tree Simple: 8.4 + 2 * (7 * 4.0 + 1 * 14)
    assert nccl_latency("all_reduce", "tree", "Simple", 16, 2, **kw) == pytest.approx(92.4e-6)
    ring_bw = nccl_bandwidth("all_reduce", "ring", "Simple", 16, 2, **kw)
    tree_bw = nccl_bandwidth("all_reduce", "tree", "Simple", 16, 2, **kw)
    assert ring_bw == pytest.approx(12e9 * 16 / 30)
    assert tree_bw == pytest.approx(min(24 * 0.92, 18.5) * 0.5 * 1e9)   # Volta N2 cap 18.5
    # LL128 is off by default beyond a PCIe switch before Hopper (PHB > PXB)
    assert nccl_bandwidth("all_reduce", "ring", "LL128", 16, 2, **kw) == 0.0
    assert nccl_bandwidth("all_reduce", "ring", "LL128", 16, 2, nic_path="PXB", **kw) > 0
    # at 64 MiB: log2(2^26 / 64) = 20 -> tree Simple correction 0.8; ring x1.9 plateau
    c = nccl_choice("all_reduce", 64 * MiB, 16, 2, **kw)
    tree_time = 92.4e-6 + 64 * MiB / (tree_bw * 0.8)
    ring_time = 1.9 * 131.6e-6 + 64 * MiB / ring_bw
    assert tree_time < ring_time
    assert (c.algorithm, c.protocol) == ("tree", "Simple")
    assert c.time == pytest.approx(tree_time)
    assert c.algbw == pytest.approx(tree_bw * 0.8)
    assert c.latency == pytest.approx(92.4e-6)
    assert c.time == pytest.approx(c.latency + c.nbytes / c.algbw)


def test_230_amd_hosts_pay_more_per_network_step():
    # netOverhead 2 us on AMD, x3 for Simple = 6 > 3.4 us NVLink hop: 8.4 + 28 * 6 + 2 * 14
    kw = dict(version="2.30", inter_bw=100e9, **P3DN)
    assert nccl_latency("all_reduce", "ring", "Simple", 16, 2, cpu="amd", **kw) == pytest.approx(
        204.4e-6)
    # and a lower LL cap on multi-node AMD hosts (llMaxBws[1][2] = 19.0 GB/s)
    assert nccl_bandwidth("all_reduce", "ring", "LL", 32, 4, cpu="amd", n_channels=8,
                          **kw) == pytest.approx(19.0e9 * 32 / 62)


def test_230_four_nodes_caps_the_tree():
    kw = dict(version="2.30", inter_bw=100e9, **P3DN)
    # > 2 nodes: tree uses the inter-node speed 12, capped at 10 per channel (Volta N4)
    assert nccl_bandwidth("all_reduce", "tree", "Simple", 32, 4, **kw) == pytest.approx(5e9)
    assert nccl_bandwidth("all_reduce", "ring", "Simple", 32, 4, **kw) == pytest.approx(
        12e9 * 32 / 62)
    assert nccl_choice("all_reduce", 128 * MiB, 32, 4, **kw).algorithm == "ring"


def test_230_pat_with_one_gpu_per_node():
    kw = dict(version="2.30", inter_bw=100e9)
    # PAT latency 8 + log2(8) * 14 / 3.5 + 8 * 2.8; busBw 12 * 0.75, no conversion
    assert nccl_latency("all_gather", "pat", "Simple", 8, 8, **kw) == pytest.approx(42.4e-6)
    assert nccl_bandwidth("all_gather", "pat", "Simple", 8, 8, **kw) == pytest.approx(9e9)
    # ring with ppn 1: every step on the network, at Tree's NET latency 14
    assert nccl_latency("all_gather", "ring", "Simple", 8, 8, **kw) == pytest.approx(
        (8.4 + 7 * 14) * 1e-6)
    assert nccl_bandwidth("all_gather", "ring", "Simple", 8, 8, **kw) == pytest.approx(12e9 * 8 / 7)
    c = nccl_choice("all_gather", [64 * KiB, 128 * MiB], 8, 8, **kw)
    assert c.algorithm.tolist() == ["pat", "ring"]
    with pytest.raises(InvalidParameterError, match="pat"):
        nccl_latency("all_reduce", "pat", "Simple", 8, 8, **kw)
    with pytest.raises(InvalidParameterError):
        nccl_latency("all_gather", "pat", "Simple", 16, 2, **kw)  # 8 GPUs per node


def test_230_hopper_ll128_on_pxn_volta_not():
    kw = dict(version="2.30", inter_bw=400e9, nic_path="PXN")
    assert nccl_bandwidth("all_reduce", "ring", "LL128", 16, 2, arch="hopper", **kw) > 0
    assert nccl_bandwidth("all_reduce", "ring", "LL128", 16, 2, arch="volta", **kw) == 0


# --------------------------------------------------------------------------- crossover


@pytest.mark.parametrize("version", ["2.4", "2.5", "2.6", "2.7", "2.30"])
@pytest.mark.parametrize("inter_bw", [None, 100e9])
def test_two_nodes_tree_four_and_eight_nodes_ring_at_large_sizes(version, inter_bw):
    # The structural reason in every version: on <= 2 nodes trees are rated with the
    # intra-node speed (twice the NIC's) and rings are not.
    big = [64 * MiB, 128 * MiB]
    assert set(nccl_choice("all_reduce", big, 16, 2, version=version, inter_bw=inter_bw,
                           **P3DN).algorithm) == {"tree"}
    for nodes in (4, 8):
        assert set(nccl_choice("all_reduce", big, 8 * nodes, nodes, version=version,
                               inter_bw=inter_bw, **P3DN).algorithm) == {"ring"}


@pytest.mark.parametrize("version", ["2.4", "2.5", "2.6", "2.7", "2.30"])
@pytest.mark.parametrize("nodes", [4, 8])
def test_one_crossover_to_ring_simple_on_many_nodes(version, nodes):
    # Once ring/Simple wins on 4 or 8 nodes it keeps winning at every larger size, and
    # trees win somewhere below.
    sizes = 2.0 ** np.arange(10, 33)
    c = nccl_choice("all_reduce", sizes, 8 * nodes, nodes, version=version,
                    inter_bw=100e9, **P3DN)
    pairs = list(zip(c.algorithm.tolist(), c.protocol.tolist()))
    first = pairs.index(("ring", "Simple"))
    assert set(pairs[first:]) == {("ring", "Simple")}
    assert "tree" in c.algorithm[:first]


@pytest.mark.parametrize("version", ["2.4", "2.5", "2.6", "2.7", "2.30"])
def test_time_grows_over_doublings(version):
    # Corrections make NCCL's predicted time jump at table boundaries, but adjacent
    # factors never differ by 2x, so it grows on a grid of doublings.
    sizes = 2.0 ** np.arange(6, 34)
    for nodes in (1, 2, 4):
        t = nccl_choice("all_reduce", sizes, 8 * nodes, nodes, version=version,
                        inter_bw=100e9, **P3DN).time
        assert np.all(np.diff(t) > 0)


@settings(max_examples=40, deadline=None)
@given(size=st.floats(1e3, 1e9), slow=st.floats(10e9, 50e9), factor=st.floats(1.0, 8.0),
       nodes=st.sampled_from([2, 4, 8]), version=st.sampled_from(["2.6", "2.7", "2.30"]))
def test_a_faster_nic_never_makes_nccl_predict_slower(size, slow, factor, nodes, version):
    # from 10 Gbit/s up (below it, see the next test)
    a = nccl_choice("all_reduce", size, 8 * nodes, nodes, version=version, inter_bw=slow, **P3DN)
    b = nccl_choice("all_reduce", size, 8 * nodes, nodes, version=version,
                    inter_bw=slow * factor, **P3DN)
    assert b.time <= a.time * (1 + 1e-12)


def test_below_10_gbits_a_faster_nic_can_make_nccl_predict_slower():
    # NCCL's own search and tuning, not a defect of their model here: on two nodes a tree's
    # bandwidth is nChannels x bwIntra, and the search keeps the largest nChannels x speed
    # on the NIC. A 6.6 Gbit/s NIC gets 3 channels of 0.24 GB/s (trees raised to 1.2 GB/s
    # inside the node), a 13.8 Gbit/s one a single channel of 1.2 GB/s (trees at 2.4): the
    # faster NIC predicts a 47 MB all-reduce 1.5 times slower. Rare (11 in 30,000 random
    # draws from 1 to 400 Gbit/s, all on two nodes below 7.7 Gbit/s) and below
    # data-center rates.
    kw = dict(n_ranks=16, n_nodes=2, version="2.30", **P3DN)
    slow = nccl_choice("all_reduce", 47e6, inter_bw=6.593e9, **kw)
    fast = nccl_choice("all_reduce", 47e6, inter_bw=13.822e9, **kw)
    assert (slow.topology.n_channels, fast.topology.n_channels) == (3, 1)
    assert fast.time > 1.4 * slow.time


def test_choice_is_the_minimum_of_the_tables():
    # With no per-call correction in force (2.5, ring only for all-gather) the chosen
    # time is the least latency + size / bandwidth over the enabled pairs.
    sizes = 2.0 ** np.arange(8, 30)
    kw = dict(version="2.5", **P3DN)
    c = nccl_choice("all_gather", sizes, 32, 4, **kw)
    best = np.full(sizes.shape, np.inf)
    for p in nccl.NCCL_PROTOCOLS:
        bw = nccl_bandwidth("all_gather", "ring", p, 32, 4, **kw)
        if bw > 0:
            best = np.minimum(best, nccl_latency("all_gather", "ring", p, 32, 4, **kw)
                              + sizes / bw)
    np.testing.assert_allclose(c.time, best, rtol=1e-12)


# --------------------------------------------------------------------------- vectorization


def test_scalar_in_scalar_out_array_in_array_out():
    c = nccl_choice("all_reduce", 1 * MiB, 16, 2)
    assert isinstance(c.algorithm, str) and isinstance(c.protocol, str)
    assert isinstance(c.time, float) and isinstance(c.algbw, float)
    grid = np.array([[64 * KiB, MiB], [25 * MiB, 128 * MiB]])
    g = nccl_choice("all_reduce", grid, 16, 2)
    assert g.algorithm.shape == g.time.shape == g.latency.shape == (2, 2)
    assert g.payload_fraction.shape == g.protocol.shape == (2, 2)
    for idx in np.ndindex(grid.shape):
        one = nccl_choice("all_reduce", int(grid[idx]), 16, 2)
        assert g.algorithm[idx] == one.algorithm and g.protocol[idx] == one.protocol
        assert g.time[idx] == one.time
    assert np.all(np.isfinite(g.time)) and np.all(g.algbw > 0)
    assert g.payload_fraction[0, 0] == protocol_efficiency(g.protocol[0, 0])


def test_topology_overrides():
    t = nccl_topology(16, 2, n_channels=4, inter_bw=100e9)
    assert t.n_channels == 4 and t.comm_channels == 8
    assert nccl_bandwidth("all_reduce", "ring", "Simple", 16, 2, n_channels=4,
                          inter_bw=100e9) == pytest.approx(4 * 12e9 * 16 / 30)
    # more NICs, more channels
    assert nccl_topology(16, 2, nics_per_node=4, inter_bw=100e9).n_channels == 4


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, name", [
    (dict(version="2.12"), "version"),
    (dict(version="3.0"), "version"),
    (dict(arch="pascal"), "arch"),
    (dict(intra="infiniband"), "intra"),
    (dict(nic_path="NODE"), "nic_path"),
    (dict(cpu="arm"), "cpu"),
])
def test_unknown_names(kwargs, name):
    with pytest.raises(UnknownNameError, match=name):
        nccl_choice("all_reduce", MiB, 16, 2, **kwargs)


def test_unknown_collective_and_pair_names():
    with pytest.raises(UnknownNameError, match="broadcast"):
        nccl_choice("broadcast", MiB, 16, 2)
    with pytest.raises(UnknownNameError, match="nvls"):
        nccl_latency("all_reduce", "nvls", "Simple", 16, 2)
    with pytest.raises(UnknownNameError, match="LL256"):
        nccl_bandwidth("all_reduce", "ring", "LL256", 16, 2)


@pytest.mark.parametrize("nbytes", [0, -1, float("nan"), float("inf"), [MiB, 0]])
def test_bad_sizes(nbytes):
    with pytest.raises(InvalidParameterError, match="nbytes"):
        nccl_choice("all_reduce", nbytes, 16, 2)


@pytest.mark.parametrize("args, parameter, exc", [
    ((1, 1), "n_ranks", InvalidParameterError),
    ((12, 8), "n_ranks", InvalidParameterError),
    ((16, 0), "n_nodes", InvalidParameterError),
    ((16.0, 2), "n_ranks", ParameterTypeError),
    ((16, True), "n_nodes", ParameterTypeError),
])
def test_bad_counts(args, parameter, exc):
    with pytest.raises(exc, match=parameter):
        nccl_choice("all_reduce", MiB, *args)


def test_bad_options():
    with pytest.raises(InvalidParameterError, match="n_channels=0"):
        nccl_choice("all_reduce", MiB, 16, 2, n_channels=0)
    with pytest.raises(InvalidParameterError, match="inter_bw"):
        nccl_choice("all_reduce", MiB, 16, 2, inter_bw=-1)
    with pytest.raises(InvalidParameterError, match="hopper"):
        nccl_choice("all_reduce", MiB, 16, 2, arch="hopper", version="2.7")
    with pytest.raises(ParameterTypeError, match="nbytes"):
        nccl_choice("all_reduce", "1MB", 16, 2)
    with pytest.raises(ParameterTypeError, match="version"):
        nccl_choice("all_reduce", MiB, 16, 2, version=2.4)


def test_release_names_map_to_their_family():
    a = nccl_choice("all_reduce", MiB, 32, 4, version="v2.4.8-1", **P3DN)
    b = nccl_choice("all_reduce", MiB, 32, 4, version="2.4", **P3DN)
    assert (a.version, a.algorithm, a.time) == ("2.4", b.algorithm, b.time)


# --------------------------------------------------------------------------- docs


PUBLIC = [getattr(nccl, n) for n in nccl.__all__ if inspect.isfunction(getattr(nccl, n))]


def _documented(doc):
    doc = inspect.cleandoc(doc or "")
    m = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[\w ]*\n-+\n|\Z)", doc, re.S | re.M)
    out, current = {}, None
    for line in (m.group(1) if m else "").splitlines():
        if line and not line.startswith(" "):
            current = [n.strip() for n in line.split(" : ")[0].split(",")]
            out.update({n: "" for n in current})
        elif current:
            for n in current:
                out[n] += " " + line.strip()
    return out


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda f: f.__name__)
def test_every_parameter_documented_with_unit(fn):
    documented = _documented(fn.__doc__)
    for p in inspect.signature(fn).parameters.values():
        assert p.name in documented, (fn.__name__, p.name)
        assert re.search(r"\[[^\]]+\]", documented[p.name]), (fn.__name__, p.name)
        assert not isinstance(p.default, (list, dict, set))


def test_every_version_has_its_tags_and_sources_in_the_module():
    src = inspect.getsource(nccl)
    for family, tags in nccl.NCCL_VERSIONS.items():
        assert any(f"v{t}-1" in src for t in tags), family
    assert math.isclose(sum(nccl.PROTOCOL_EFFICIENCY.values()), 0.5 + 0.9375 + 1.0)
