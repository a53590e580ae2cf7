"""The closed form against the discrete-event reference, and its properties."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from conftest import make_profile
from des_reference import simulate_iteration
from scalemodel.overlap import UpperEnvelope, comm_finish_time

ALGS = ["ring", "tree", "halving-doubling", "hierarchical", "allgather", "ps"]


@st.composite
def profiles(draw):
    k = draw(st.integers(1, 40))
    sizes = draw(st.lists(st.integers(4, 200_000_000), min_size=k, max_size=k))
    waits = draw(st.lists(st.floats(0, 0.02), min_size=k, max_size=k))
    table = draw(st.booleans())
    red = (sm.ReductionCost.from_table([40, 1e6, 6.7e8], [1e-5, 1e-5, 2.4e-3]) if table
           else sm.ReductionCost(gamma=draw(st.floats(0, 1e-10)), latency=draw(st.floats(0, 1e-4))))
    return make_profile(sizes, waits, forward=draw(st.floats(1e-4, 0.1)),
                        extra_backward=draw(st.floats(0, 0.01)), update=draw(st.floats(0, 0.02)),
                        reduction=red)


@st.composite
def settings_(draw):
    alg = draw(st.sampled_from(ALGS))
    if alg == "hierarchical":
        g = draw(st.sampled_from([1, 2, 4, 8]))
        n = g * draw(st.integers(1, 16)) if draw(st.booleans()) else draw(st.integers(1, g))
        topo = dict(gpus_per_node=g, intra_bw=draw(st.floats(1e10, 3e12)),
                    intra_alpha=draw(st.floats(0, 1e-5)))
    elif alg in ("ring", "tree", "allgather") and draw(st.booleans()):
        # a topology: GPUs and NICs per node, the intra-node link (slow ones included, so
        # that it sometimes is the slowest link)
        g = draw(st.sampled_from([1, 2, 4, 8]))
        n = draw(st.integers(1, 80))
        topo = dict(gpus_per_node=g, nics_per_node=draw(st.sampled_from([1, 2, 4])),
                    intra_bw=draw(st.floats(1e9, 3e12)), intra_alpha=draw(st.floats(0, 1e-5)))
    else:
        n = draw(st.integers(1, 300))
        topo = {}
        if alg == "ps" and draw(st.booleans()):
            topo["ps_servers"] = draw(st.integers(1, 16))
    return dict(
        n=n, bw=draw(st.floats(1e8, 1e12)), utilization=draw(st.floats(0.05, 1.0)),
        compression=(ratio := draw(st.one_of(st.just(1.0), st.floats(1.0, 200.0)))),
        algorithm=alg,
        fusion=draw(st.sampled_from(["ddp", "horovod", "none"])),
        alpha=draw(st.floats(0, 1e-4)),  # a codec cost is paid only when compressing
        codec_cost=draw(st.floats(0, 1e-9)) if ratio > 1 else 0.0, **topo)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), settings_())
def test_closed_form_equals_discrete_event_reference(profile, cfg):
    sf = sm.scaling_factor(profile, **cfg)
    t_des = simulate_iteration(profile, **cfg)
    assert sf == pytest.approx(profile.iteration_time / t_des, rel=1e-9)
    it = sm.iteration_time(profile, **cfg)
    assert it.total == pytest.approx(t_des, rel=1e-9)
    assert it.total == pytest.approx(it.forward + it.backward + it.exposed_communication
                                     + it.update, rel=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), settings_(), st.integers(2, 9), st.floats(1.0, 1.5))
def test_gradient_accumulation_equals_discrete_event_reference(profile, cfg, k, sigma):
    # k micro-batches per step: DDP communicates on the last one only (no_sync)
    p = profile.with_grad_accum(k)
    assert p.iteration_time == pytest.approx(k * (profile.forward_time
                                                  + profile.backward_time)
                                             + profile.update_time, rel=1e-12)
    cl = sm.ClusterProfile(compute_slowdown=sigma, provenance={"source": "test"})
    t_des = simulate_iteration(p, grad_accum=k, slowdown=sigma, **cfg)
    it = sm.iteration_time(p, cluster=cl, **cfg)
    assert it.total == pytest.approx(t_des, rel=1e-9)
    assert it.total == pytest.approx(it.forward + it.backward + it.exposed_communication
                                     + it.update, rel=1e-9)
    assert sm.scaling_factor(p, cluster=cl, **cfg) == pytest.approx(
        p.iteration_time / t_des, rel=1e-9)
    if cfg["n"] == 1:
        assert it.total == pytest.approx(p.iteration_time, rel=1e-12)


@st.composite
def cluster_terms(draw):
    """The terms a calibrated cluster adds: compute slowdown and fixed costs, with a
    topology in the cluster (resolved by the call) or none."""
    terms = dict(compute_slowdown=draw(st.floats(1.0, 1.5)),
                 collective_overhead=draw(st.floats(0, 5e-3)),
                 sync_overhead=draw(st.floats(0, 3e-2)))
    topo = None
    if draw(st.booleans()):
        topo = sm.Topology(gpus_per_node=draw(st.sampled_from([1, 4, 8])),
                           nics_per_node=draw(st.sampled_from([1, 2])),
                           intra_bw=draw(st.floats(5e9, 3e12)))
    return terms, topo


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), settings_(), cluster_terms())
def test_cluster_terms_equal_discrete_event_reference(profile, cfg, terms):
    terms, topo = terms
    if cfg["algorithm"] == "hierarchical" or (topo is not None and "gpus_per_node" in cfg):
        topo = None  # hierarchical and explicit topologies are covered above
    cl = sm.ClusterProfile(topology=topo, provenance={"source": "test"}, **terms)
    sf = sm.scaling_factor(profile, cluster=cl, **cfg)
    des_topo = {} if topo is None else dict(gpus_per_node=topo.gpus_per_node,
                                            nics_per_node=topo.nics_per_node,
                                            intra_bw=topo.intra_bw)
    if topo is not None and cfg["algorithm"] in ("halving-doubling", "ps"):
        des_topo = {}  # these keep per-worker links
    t_des = simulate_iteration(profile, slowdown=terms["compute_slowdown"],
                               collective_overhead=terms["collective_overhead"],
                               sync_overhead=terms["sync_overhead"], **des_topo, **cfg)
    assert sf == pytest.approx(profile.iteration_time / t_des, rel=1e-9)
    it = sm.iteration_time(profile, cluster=cl, **cfg)
    assert it.total == pytest.approx(t_des, rel=1e-9)
    assert it.binding in sm.BINDINGS


@settings(max_examples=150, deadline=None)
@given(profiles(), st.integers(2, 256), st.sampled_from(ALGS[:3]),
       st.sampled_from(["ddp", "horovod", "none"]))
def test_scaling_factor_is_monotone(profile, n, alg, fusion):
    grid = np.logspace(8, 12, 25)
    kw = dict(algorithm=alg, fusion=fusion, alpha=1e-6)
    by_bw = sm.scaling_factor(profile, n, grid, **kw)
    by_u = sm.scaling_factor(profile, n, 1e10, utilization=np.linspace(0.05, 1, 25), **kw)
    by_r = sm.scaling_factor(profile, n, 1e10, compression=np.linspace(1, 100, 25), **kw)
    for seq in (by_bw, by_u, by_r):
        assert np.all(np.diff(seq) >= -1e-12)
        assert np.all((seq > 0) & (seq <= 1 + 1e-12))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1, 1), st.floats(0, 10)), min_size=1, max_size=30),
       st.lists(st.floats(0, 5), min_size=1, max_size=20))
def test_envelope_equals_brute_force_max(lines, xs):
    c = np.array([a for a, _ in lines])
    m = np.array([b for _, b in lines])
    env = UpperEnvelope(c, m)
    x = np.array(xs)
    brute = np.max(c[:, None] + m[:, None] * x[None, :], axis=0)
    np.testing.assert_allclose(env(x), brute, rtol=1e-12, atol=1e-12)
    j = env.argmax(x)
    np.testing.assert_allclose(c[j] + m[j] * x, brute, rtol=1e-12, atol=1e-12)


def test_envelope_inverse_is_exact():
    env = UpperEnvelope([1.0, 0.0, -2.0], [0.0, 1.0, 3.0])
    x, j = env.max_x_below(4.0)
    assert x == pytest.approx(2.0) and j == 2  # -2 + 3x = 4 first
    assert env.max_x_below(0.5)[0] < 0  # 1.0 > 0.5 even at x = 0
    assert math.isinf(UpperEnvelope([1.0], [0.0]).max_x_below(2.0)[0])


def test_max_plus_recurrence_closed_form():
    rng = np.random.default_rng(1)
    for _ in range(100):
        k = rng.integers(1, 30)
        ready = np.sort(rng.uniform(0, 1, k))
        c = rng.uniform(0, 0.2, k)
        f = -math.inf
        for r_k, c_k in zip(ready, c):
            f = max(f, r_k) + c_k
        assert comm_finish_time(ready, c) == pytest.approx(f, rel=1e-12)


def test_hand_computed_iteration():
    # two tensors, ring among 4, 8 Gbit/s: each bucket 1e6 bytes -> 2*3/4*8e6 bits = 1.2e7
    # bits -> 1.5 ms on the wire; no reduction cost.
    p = make_profile([1_000_000, 1_000_000], [1e-3, 1e-3], forward=0.01, update=0.0,
                     reduction=sm.ReductionCost())
    it = sm.iteration_time(p, n=4, bw=8e9, fusion="none")
    # bucket 1 ready 1 ms, done 2.5 ms; bucket 2 ready 2 ms, starts 2.5, done 4.0 ms
    assert it.total == pytest.approx(0.01 + 4.0e-3)
    assert it.exposed_communication == pytest.approx(2.0e-3)
    assert it.communication == pytest.approx(3.0e-3)
    assert it.binding == "bandwidth"
    assert sm.scaling_factor(p, 4, 8e9, fusion="none") == pytest.approx(0.012 / 0.014)
    assert sm.scaling_factor(p, 1, 8e9) == 1.0
    one = sm.iteration_time(p, n=1, bw=8e9, fusion="none")
    assert one.binding == "compute" and one.exposed_communication == 0.0
    # a fast network hides everything but the last bucket's 1.5 ms / 1000
    fast = sm.iteration_time(p, n=4, bw=8e12, fusion="none")
    assert fast.binding == "bandwidth"
    slow_compute = make_profile([1_000, 1_000], [1e-1, 1e-1], forward=0.01, update=0.0,
                                reduction=sm.ReductionCost())
    assert sm.iteration_time(slow_compute, n=4, bw=8e9).binding == "bandwidth"


def test_scalar_and_array_outputs(synthetic):
    assert isinstance(sm.scaling_factor(synthetic, 8, 1e10), float)
    out = sm.scaling_factor(synthetic, np.array([[8], [16]]), np.array([1e9, 1e10, 1e11]),
                            compression=[[1.0], [2.0]])
    assert out.shape == (2, 3)
    for i, n in enumerate((8, 16)):
        for j, bw in enumerate((1e9, 1e10, 1e11)):
            assert out[i, j] == pytest.approx(
                sm.scaling_factor(synthetic, n, bw, compression=[1.0, 2.0][i]), rel=1e-14)


def test_codec_cost_applies_only_when_compressing(synthetic):
    base = sm.scaling_factor(synthetic, 16, 1e9)
    with pytest.warns(sm.ModelWarning, match="codec_cost=1e-09 has no effect"):
        assert sm.scaling_factor(synthetic, 16, 1e9, codec_cost=1e-9) == base
    cheap = sm.scaling_factor(synthetic, 16, 1e9, compression=4)
    costly = sm.scaling_factor(synthetic, 16, 1e9, compression=4, codec_cost=1e-9)
    assert costly < cheap


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 5)), min_size=0, max_size=40),
       st.floats(0, 30), st.floats(0, 3), st.floats(0, 2),
       st.lists(st.floats(0, 10), min_size=1, max_size=20))
def test_envelope_of_a_convex_chain_and_a_constant(terms, floor, c0, m0, xs):
    # the sharded schedule's lines: a constant (compute alone) and the pieces of a sum of
    # maxima of a constant and a rising line; built without a hull, it is the maximum
    from scalemodel.sharding import sum_of_maxima

    a = np.zeros((len(terms), 6))
    b = np.zeros((len(terms), 6))
    for t, (ct, mt) in enumerate(terms):
        a[t, 0] = 0.5
        b[t, 1], b[t, 4] = ct, mt
    base = np.array([c0, 0, 0, 0, m0, 0])
    pieces, breaks = sum_of_maxima(base, a, b, breaks=True)
    c = np.concatenate(([floor], pieces[:, :4].sum(axis=1)))
    m = np.concatenate(([0.0], pieces[:, 4]))
    env = UpperEnvelope.of_convex(c, m, breaks)
    x = np.asarray(xs)
    brute = np.max(c[:, None] + m[:, None] * x[None, :], axis=0)
    np.testing.assert_allclose(env(x), brute, rtol=1e-12, atol=1e-12)
    j = env.argmax(x)
    np.testing.assert_allclose(c[j] + m[j] * x, brute, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(env(x), UpperEnvelope(c, m)(x), rtol=1e-12, atol=1e-12)


def test_envelope_walk_and_scan_find_the_same_lines():
    # hundreds of lines with a handful on top (DDP's buckets): the walk from x = 0 and
    # the hull scan (forced by more lines on top than the walk takes) agree
    rng = np.random.default_rng(3)
    top_m = np.array([0.0, 1.0, 2.5, 4.0, 7.0])
    top_c = np.array([10.0, 8.5, 5.0, 0.0, -12.0])
    m = rng.uniform(0, 7, 500)
    lo = np.max(top_c[:, None] + top_m[:, None] * np.linspace(0, 10, 50)[None, :], axis=0)
    c = -100.0 - rng.uniform(0, 1, 500)  # far below the top lines
    env = UpperEnvelope(np.concatenate((top_c, c)), np.concatenate((top_m, m)))
    assert env.index.tolist() == [0, 1, 2, 3, 4]
    x = np.linspace(0, 10, 50)
    np.testing.assert_allclose(env(x), lo, rtol=1e-12)
    # a parabola's tangents: 40 lines on top, more than the walk takes
    mt = np.linspace(0, 10, 40)
    many = UpperEnvelope(np.concatenate((-mt**2 / 4, c)), np.concatenate((mt, m)))
    assert many.index.tolist() == list(range(40))
