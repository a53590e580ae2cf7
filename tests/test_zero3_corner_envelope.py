"""An interval's corner under ZeRO-3 evaluates and inverts the schedule's envelope alone
(:func:`scalemodel.sharding.zero3_envelope`, :meth:`Scenario.corner_envelope`): the same
function as the whole schedule's envelope (to rounding), and the intervals it gives equal
each corner answered alone, from nothing, with its whole schedule."""

import itertools

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.model import Scenario, clear_caches
from scalemodel import model as model_mod
from scalemodel.sharding import zero3_envelope, zero3_envelopes

XS = np.concatenate(([0.0], np.logspace(-14, -7, 50)))

NUMBERS = [(1.0, 0.0, 0.0, 0.0), (1.2, 1e-4, 0.01, 0.003), (0.9, 0.0, 0.02, 0.0)]


def _envelope_of(sc, n, numbers, compressed=False):
    sigma, c0, sync, cb = numbers
    return zero3_envelope(sc.profile, n, sharding=sc.sharding, wrap=sc.fusion,
                          algorithm=sc.algorithm, options=sc.options, slowdown=sigma,
                          collective_overhead=c0, sync_overhead=sync,
                          codec_cost=sc.codec_cost, compressed=compressed,
                          bucket_overhead=cb)


def _assert_same_function(env, ref):
    """Equal values (to rounding) on a grid of x, and inverses at levels taken from it
    that each function takes back to the level (to rounding: where the function is nearly
    flat, the inverse itself is ill-conditioned and the two may differ more)."""
    a, b = ref(XS), env(XS)
    np.testing.assert_allclose(b, a, rtol=1e-13, atol=0.0)
    for level in a[[3, 15, 30, -1]]:
        xa, xb = ref.max_x_below(level)[0], env.max_x_below(level)[0]
        assert xb > 0 and xa > 0
        for f in (ref, env):
            assert float(f(xb)) == pytest.approx(level, rel=1e-13)
            assert float(f(xa)) == pytest.approx(level, rel=1e-13)


@pytest.mark.parametrize("model, strategy, n", list(itertools.product(
    ["bert", "llama-2-7b", "resnet50"], ["zero3", "hybrid_shard"], [16, 64, 256])))
def test_the_envelope_alone_is_the_schedules(model, strategy, n):
    clear_caches()
    sc = Scenario.build(model, sharding=strategy, gpus_per_node=8, nics_per_node=4)
    for numbers in NUMBERS:
        ref = sc._sharded_schedule(n, False, numbers)
        env, xmap = _envelope_of(sc, n, numbers)
        _assert_same_function(env, ref.envelope)
        assert xmap == ref.xmap


def test_with_accumulation_and_a_codec_cost():
    """Every micro-batch gathers and reduce-scatters again (the pieces times the
    accumulation, the hooks per round), and the codec cost of a compressed question."""
    clear_caches()
    prof = attrs.evolve(sm.load_profile("llama-2-7b"), grad_accum=4)
    sc = Scenario.build(prof, sharding="zero3", gpus_per_node=8, codec_cost=1e-10)
    for numbers, compressed in itertools.product(NUMBERS, (False, True)):
        ref = sc._sharded_schedule(64, compressed, numbers)
        env, xmap = _envelope_of(sc, 64, numbers, compressed)
        _assert_same_function(env, ref.envelope)


def test_several_corners_at_once_are_each_alone():
    """zero3_envelopes: corners of several fixed costs per collective (one pass each)
    and of equal numbers, in order, each the envelope made for it alone."""
    clear_caches()
    sc = Scenario.build("llama-2-7b", sharding="zero3", gpus_per_node=8)
    numbers = NUMBERS + [NUMBERS[1], (1.05, 2e-4, 0.0, 1e-3), (1.0, 0.0, 0.005, 0.0)]
    got = zero3_envelopes(sc.profile, 64, numbers, sharding=sc.sharding, wrap=sc.fusion,
                          algorithm=sc.algorithm, options=sc.options)
    assert len(got) == len(numbers)
    for (env, xmap), nb in zip(got, numbers):
        alone, xmap_alone = _envelope_of(sc, 64, nb)
        _assert_same_function(env, alone)
        _assert_same_function(env, sc._sharded_schedule(64, False, nb).envelope)
        assert xmap == xmap_alone


def test_none_where_the_schedule_is_not_a_full_shard():
    clear_caches()
    for strategy in ("zero1", "zero2"):
        sc = Scenario.build("llama-2-7b", sharding=strategy, gpus_per_node=8)
        assert _envelope_of(sc, 64, NUMBERS[0]) is None
        assert sc.corner_envelope(64) is sc.lines(64)[1]  # the schedule's own


def _sharded_fit():
    base = sm.ClusterProfile(
        name="fitted", topology=sm.Topology(gpus_per_node=8, nics_per_node=4),
        ceiling=80e9, sync_overhead=0.02, bucket_overhead=2e-3,
        fit_settings={"sharding": "zero3"}, provenance={"source": "test"})
    return attrs.evolve(base, intervals={
        "ceiling": (60e9, 95e9), "bucket_overhead": (1e-3, 4e-3),
        "compute_slowdown": (1.0, 1.15)}, alternatives=[
        {"free": ["ceiling", "bucket_overhead"], "values": {"ceiling": 80e9,
                                                            "bucket_overhead": 2e-3},
         "intervals": {"ceiling": [60e9, 95e9], "bucket_overhead": [1e-3, 4e-3]},
         "score": 0.0},
        {"free": ["collective_overhead", "sync_overhead"],
         "values": {"collective_overhead": 3e-4, "sync_overhead": 0.01},
         "intervals": {"collective_overhead": [1e-4, 6e-4], "sync_overhead": [0.0, 0.03]},
         "score": 0.8}])


def _alone(cl):
    """Each corner of ``cl``'s explanations without its intervals and alternatives."""
    return [attrs.evolve(c, intervals={}, alternatives=[])
            for f in (cl, cl.with_alternative(1)) for c in (f, *f.corners())]


@pytest.mark.parametrize("model", ["bert", "llama-2-7b"])
@pytest.mark.parametrize("bw", [10e9, 100e9])
def test_intervals_are_each_corner_answered_alone(model, bw, monkeypatch):
    """iteration_time's, min_compression's and required_bandwidth's intervals on a
    ZeRO-3 fit equal (to rounding) the ends of each corner's whole answer from nothing;
    and the corners made no schedule of their own (only the envelopes alone, all in one
    call)."""
    cl = _sharded_fit()
    made, batches = [], []
    orig = Scenario._sharded_schedule
    monkeypatch.setattr(Scenario, "_sharded_schedule",
                        lambda self, *a, **k: made.append(1) or orig(self, *a, **k))
    monkeypatch.setattr(model_mod, "zero3_envelopes", lambda *a, **k: batches.append(
        len(a[2])) or zero3_envelopes(*a, **k))
    clear_caches()
    it = sm.iteration_time(model, 64, bw, cluster=cl)
    assert len(made) == 1  # the best explanation's, for its breakdown
    # every corner it asks in one call (its corners: the explanations' own ones come
    # in a second call only when a question asks them, Scenario._prime_corner_envelopes)
    assert len(batches) == 1 and batches[0] >= 4
    clear_caches()
    mc = sm.min_compression(model, bw, n=64, target=0.9, cluster=cl)
    clear_caches()
    rb = sm.required_bandwidth(model, n=64, target=0.8, cluster=cl)
    monkeypatch.undo()
    times, sfs, ratios, rates = [], [], [], []
    for c in _alone(cl):
        clear_caches()
        one = sm.iteration_time(model, 64, bw, cluster=c)
        times.append(one.total)
        sfs.append(one.scaling_factor)
        ratios.append(sm.min_compression(model, bw, n=64, target=0.9, cluster=c).ratio)
        rates.append(sm.required_bandwidth(model, n=64, target=0.8, cluster=c).bw)
    assert len(set(times)) > 2  # the corners differ
    assert it.total_interval == pytest.approx((min(times), max(times)), rel=1e-12)
    assert it.scaling_factor_interval == pytest.approx((min(sfs), max(sfs)), rel=1e-12)
    for got, values in ((mc.interval, ratios), (rb.interval, rates)):
        hi = max(values)  # unbounded (no ratio or rate reaches it): None
        assert got[0] == pytest.approx(min(values), rel=1e-9)
        assert got[1] == (None if hi == np.inf else pytest.approx(hi, rel=1e-9))
