"""Collective models against hand-computed values and textbook identities."""

import math

import numpy as np
import pytest

import scalemodel as sm

S = 100e6  # bytes
BW = 10e9  # bits/s


def test_ring_hand_computed():
    # 2(n-1)/n * S * 8 / bw + 2(n-1) alpha
    t = sm.ring_allreduce_time(S, 4, BW, alpha=1e-5)
    assert t == pytest.approx(1.5 * 8e8 / 1e10 + 6e-5)


def test_ring_with_reduction_and_compression():
    red = sm.ReductionCost(gamma=1e-11, latency=1e-5)
    t = sm.ring_allreduce_time(S, 8, BW, compression=4, utilization=0.5, reduction=red)
    wire = 2 * 7 / 8 * 8 * S / (0.5 * BW * 4)
    # 7 reduction steps inside one kernel: its 10 us launch once, every step its bytes
    reductions = 1e-5 + 7 * 1e-11 * S / 8
    assert t == pytest.approx(wire + reductions)


def test_reduction_launch_is_paid_once_per_collective():
    # the V100 vector-add curve is flat at ~10 us (its launch) up to ~1 MB: on 4096
    # workers the ring's 4095 steps of tiny chunks must not pay 4095 launches
    red = sm.load_profile("resnet50").reduction
    t = sm.ring_allreduce_time(25e6, 4096, 100e9, reduction=red)
    wire = 2 * 4095 / 4096 * 8 * 25e6 / 100e9
    assert t == pytest.approx(wire + red.floor + 4095 / 4096 * 25e6 * red.per_byte)
    assert t < wire + 2e-4  # 4095 launches would add 38 ms
    assert red.steps(1e3, 4095) == pytest.approx(red.floor + 4095 * 1e3 * red.per_byte)
    assert 1 / red.per_byte == pytest.approx(277e9, rel=0.01)  # the V100's ~275 GB/s


def test_tree_and_halving_doubling():
    assert sm.tree_allreduce_time(S, 16, BW, alpha=1e-6) == pytest.approx(
        2 * 8 * S / BW + 2 * 4 * 1e-6)
    # power of two: bandwidth-optimal like the ring, 2 log2 n latency steps
    assert sm.halving_doubling_allreduce_time(S, 16, BW, alpha=1e-6) == pytest.approx(
        2 * 15 / 16 * 8 * S / BW + 8 * 1e-6)
    # 12 = 8 + 4 extra ranks: two more steps of S
    assert sm.halving_doubling_allreduce_time(S, 12, BW) == pytest.approx(
        (2 * 7 / 8 + 2) * 8 * S / BW)


def test_tree_on_two_and_three_ranks_is_the_tree_of_one_gpu_nodes():
    """The flat tree is NCCL's double binary tree over one-GPU nodes: on two ranks each
    is the other's only child (S per direction, the ring's traffic), on three the busiest
    carries 1.5 S, from four on 2 S."""
    for n, f in ((2, 1.0), (3, 1.5), (4, 2.0), (64, 2.0)):
        flat = sm.collective_time("tree", S, n, BW)
        assert flat == pytest.approx(f * 8 * S / BW)
        assert flat == pytest.approx(sm.collective_time("tree", S, n, BW, gpus_per_node=1))
    assert sm.collective_time("tree", S, 2, BW) == pytest.approx(
        sm.collective_time("ring", S, 2, BW))
    assert sm.scaling_factor("bert", 2, "10Gbps", algorithm="tree") == pytest.approx(
        sm.scaling_factor("bert", 2, "10Gbps", algorithm="tree", gpus_per_node=1))


def test_hierarchical_reduces_to_ring_across_nodes():
    # infinitely fast, free intra-node links: the node link carries 2(m-1)/m S
    t = sm.hierarchical_allreduce_time(S, 64, BW, gpus_per_node=8, intra_bw=1e30)
    assert t == pytest.approx(2 * 7 / 8 * 8 * S / BW)
    # one node: only the intra-node ring
    t1 = sm.hierarchical_allreduce_time(S, 8, BW, gpus_per_node=8, intra_bw=2.4e12)
    assert t1 == pytest.approx(2 * 7 / 8 * 8 * S / 2.4e12)


def test_allgather_and_parameter_server():
    assert sm.allgather_time(1e6, 8, BW, alpha=1e-6) == pytest.approx(7 * 8e6 / BW + 7e-6)
    assert sm.parameter_server_time(S, 8, BW) == pytest.approx(2 * 7 / 8 * 8 * S / BW)
    # one dedicated server for 8 workers: its link carries 8 S each way
    assert sm.parameter_server_time(S, 8, BW, ps_servers=1) == pytest.approx(2 * 8 * 8 * S / BW)


@pytest.mark.parametrize("alg", sorted(sm.ALGORITHMS))
def test_single_worker_costs_nothing(alg):
    assert sm.collective_time(alg, S, 1, BW, alpha=1e-3,
                              reduction=sm.ReductionCost(latency=1.0)) == 0.0


@pytest.mark.parametrize("alg", sorted(sm.ALGORITHMS))
def test_vectorized_over_sizes(alg):
    sizes = np.array([1e3, 1e6, 1e9])
    out = sm.collective_time(alg, sizes, 16, BW, alpha=1e-6)
    assert out.shape == (3,)
    for s, t in zip(sizes, out):
        assert t == pytest.approx(sm.collective_time(alg, s, 16, BW, alpha=1e-6))
    assert np.all(np.diff(out) > 0)


def test_reduction_table_interpolates_and_clamps():
    red = sm.ReductionCost.from_table([100, 1000], [1e-5, 2e-5])
    np.testing.assert_allclose(red([10, 100, 550, 1000, 1e6]), [1e-5, 1e-5, 1.5e-5, 2e-5, 2e-5])
    assert red(0) == 0.0


def test_bandwidth_strings():
    assert sm.parse_bandwidth("10Gbps") == 10e9
    assert sm.parse_bandwidth("100 Gbit/s") == 100e9
    assert sm.parse_bandwidth("25GB/s") == 200e9
    assert sm.parse_bandwidth("400 Mb/s") == 400e6
    assert sm.parse_bandwidth("1 GiB/s") == 8 * 2**30
    assert sm.parse_bandwidth("1e9") == 1e9
    np.testing.assert_array_equal(sm.parse_bandwidth(["1Gbps", 2e9]), [1e9, 2e9])
    assert sm.format_bandwidth(2.5e10) == "25 Gbit/s"
    assert math.isclose(sm.ring_allreduce_time(S, 4, "10Gbps"), sm.ring_allreduce_time(S, 4, 1e10))


def test_large_worker_counts_are_not_lost_to_reduction_launches():
    # issue 11: resnet50 at 100 Gbit/s fell to 0.455 at n=4096, "overhead binds", because
    # every one of the ring's n-1 steps paid the measured reduction's 10 us launch
    sf = sm.scaling_factor("resnet50", [64, 1024, 4096], 100e9, fusion="horovod")
    assert np.all(sf > 0.99)
    assert sm.iteration_time("resnet50", 4096, 100e9, fusion="horovod").binding != "overhead"


def test_options_evolve_keeps_every_field_and_validates():
    import attrs

    from scalemodel.collectives import CollectiveOptions

    o = CollectiveOptions(alpha=2e-6, gpus_per_node=4, intra_bw=1e12, intra_alpha=1e-6,
                          ps_servers=2, nics_per_node=2, arch="hopper", intra_link="pci")
    e = o.evolve(gpus_per_node=8)
    for f in attrs.fields(CollectiveOptions):  # a new field must be carried over too
        want = 8 if f.name == "gpus_per_node" else getattr(o, f.name)
        assert getattr(e, f.name) == want, f.name
    assert o.evolve(gpus_per_node=8) is e  # kept: validated once per distinct change
    with pytest.raises(sm.InvalidParameterError, match="gpus_per_node"):
        o.evolve(gpus_per_node=0)
    with pytest.raises(sm.ParameterTypeError, match="gpus_per_node"):
        o.evolve(gpus_per_node=8.0)  # the type is part of the question: not the cached 8
