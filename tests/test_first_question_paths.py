"""The shortcuts that make a first question on a fitted cluster fast give exactly what the
general code gives (bit for bit): the envelope of a few lines built in Python floats, the
NCCL 2.4 protocol choice of rings and trees in one pass, and the checked NCCL setup kept by
argument (an argument of another type is still checked)."""

import math
import warnings

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalemodel import load_profile, overlap, sharding
from scalemodel.exceptions import ParameterTypeError
from scalemodel.nccl import _SETUPS, _ll_24, nccl_choice
from scalemodel.overlap import UpperEnvelope, overlap_lines

FIELDS = ("index", "intercept", "slope", "breaks")


def _general(c, m):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(overlap, "_SMALL", 0)  # every size through the numpy construction
        return UpperEnvelope(c, m)


def _same(a, b):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f


values = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e-310]),
                   st.floats(-1e300, 1e300))
slopes = st.one_of(st.floats(0, 1e10), st.sampled_from([0.0, 1.0, 3.0, 5e-324]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(values, slopes), min_size=1, max_size=64))
def test_small_envelope_is_the_general_one(lines):
    c = np.array([a for a, _ in lines])
    m = np.array([b for _, b in lines])
    _same(UpperEnvelope(c, m), _general(c, m))


def test_small_envelope_walks_and_scans_as_the_general_one():
    rng = np.random.default_rng(5)
    for k in (17, 30, 64):  # more than 16 lines left: the walk, or the chords and the scan
        mt = np.linspace(0, 10, k)
        for c in (-mt**2 / 4, np.sort(rng.uniform(0, 1, k))[::-1]):
            m = mt if c[0] == 0 else np.sort(rng.uniform(0, 1, k))
            _same(UpperEnvelope(c, m), _general(c, m))
    # lines crossing exactly at x = 0, equal slopes, huge and tiny values
    for c, m in (([1.0, 1.0], [0.0, 1.0]), ([2.0, 1.0, 1.0, 0.5], [0.0, 0.0, 2.0, 2.0]),
                 ([1.7e308, -1.7e308], [0.0, 1e308]), ([0.0, -1e-300], [0.0, 5e-324]),
                 ([5e-324, 0.0], [0.0, 1e300])):  # the last: a break at 0.0 (underflow)
        _same(UpperEnvelope(c, m), _general(np.array(c), np.array(m)))
    assert UpperEnvelope([5e-324, 0.0], [0.0, 1e300]).index.tolist() == [1]


def _ll_24_as_nccl(nbytes, n_channels, nchunks, threshold):
    """getKernelInfo's LL choice written as NCCL 2.4.8 has it (src/enqueue.cc:267-300),
    one size at a time."""
    out = []
    for b in nbytes:
        nt = 64.0
        while math.ceil(b / (nt * nchunks)) > 8 and nt * 2 <= 256:
            nt *= 2
        nc = min(max(math.ceil(b / (nt * nchunks * 8)), 1), n_channels)
        out.append(b <= nc * nt * nchunks * threshold)
    return np.array(out)


def test_ring_and_tree_protocols_in_one_pass_are_each_as_nccl():
    s = np.floor(np.geomspace(1.0, 1e10, 300))
    k = 256 * np.arange(1, 4097.0)  # every boundary of the thread and channel counts
    s = np.concatenate((s, k - 1, k, k + 1))
    for ch in (1, 2, 12):
        both = _ll_24(s, ch, np.array([[64.0], [1.0]]), np.array([[128.0], [512.0]]))
        assert np.array_equal(both[0], _ll_24_as_nccl(s, ch, 64, 128))
        assert np.array_equal(both[1], _ll_24_as_nccl(s, ch, 1, 512))


def test_kept_nccl_setup_answers_as_a_fresh_one_and_checks_other_types():
    s = np.geomspace(1e3, 1e9, 40)
    kept = nccl_choice("all_reduce", s, 16, 2, version="2.4")
    kept = nccl_choice("all_reduce", s, 16, 2, version="2.4")
    _SETUPS.clear()
    fresh = nccl_choice("all_reduce", s, 16, 2, version="2.4")
    for f in ("algorithm", "protocol", "time", "latency", "algbw", "payload_fraction"):
        assert np.array_equal(getattr(kept, f), getattr(fresh, f)), f
    assert kept.topology == fresh.topology
    with pytest.raises(ParameterTypeError, match="n_ranks"):
        nccl_choice("all_reduce", s, 16.0, 2, version="2.4")  # 16 == 16.0, still checked
    with pytest.raises(ParameterTypeError, match="n_nodes"):
        nccl_choice("all_reduce", s, 16, np.True_, version="2.4")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(values, slopes), min_size=1, max_size=20),
       st.lists(st.one_of(st.floats(0, 1e3), st.sampled_from([0.0, 1e-12, 1e199])),
                min_size=1, max_size=8),
       st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=8))
def test_envelope_answers_in_python_floats_as_numpy(lines, xs, levels):
    c = np.array([a for a, _ in lines])
    m = np.array([b for _, b in lines])
    env = UpperEnvelope(c, m)
    bare = UpperEnvelope(c, m)
    for f in FIELDS:  # made from the Python floats when first read
        getattr(bare, f)
    bare._py = None  # numpy's evaluation
    for x in xs + env.breaks.tolist():
        (a, wa), (b, wb) = _outcome(env, x), _outcome(bare, x)
        assert wa == wb and type(a) is type(b)
        assert np.float64(a).tobytes() == np.float64(b).tobytes()
    for level in levels + c.tolist():
        (a, wa), (b, wb) = _outcome(env.max_x_below, level), _outcome(bare.max_x_below, level)
        assert wa == wb and [type(v) for v in a] == [type(v) for v in b]
        assert a == b or (a[0] != a[0] and b[0] != b[0] and a[1] == b[1])

    tie = UpperEnvelope([1.0, 0.0], [1.0, 2.0])  # both cross 2.0 at x = 1: the first binds
    assert tie._py is not None and tie.max_x_below(2.0) == (1.0, 0)


def _outcome(f, arg):
    """``f(arg)`` and the warnings it gave (numpy's overflow among them)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = f(arg)
    return got, [str(w.message) for w in said]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 1e-4, "array"]))
def test_lines_in_one_array_are_the_lines_field_by_field(k, seed, fixed):
    rng = np.random.default_rng(seed)
    ready, lat, ovh = rng.random(k), rng.random(k) * 1e-4, rng.random(k) * 1e-5
    bits = np.floor(rng.random(k) * 1e9)
    fix = rng.random(k) * 1e-4 if fixed == "array" else fixed
    fast = overlap_lines(ready, lat, ovh, bits, 0.3, fixed=fix)
    each = overlap_lines(ready.tolist(), lat.tolist(), ovh.tolist(), bits.tolist(), 0.3,
                         fixed=fix.tolist() if fixed == "array" else fix)  # field by field
    for f in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
        x, y = getattr(fast, f), getattr(each, f)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(values, slopes), min_size=1, max_size=20),
       st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=8))
def test_lowest_gap_in_python_floats_is_numpys(lines, levels):
    c = np.array([a for a, _ in lines])
    m = np.array([b for _, b in lines])
    env = UpperEnvelope(c, m)
    if not (env.slope > 0).any():
        return
    for level in levels + env.intercept.tolist():
        want = float(np.min(level - env.intercept[env.slope > 0]))
        got = env._lowest_gap(level)
        assert type(got) is float and np.float64(got).tobytes() == np.float64(want).tobytes()


def test_lines_with_fixed_costs_are_attrs_evolve_field_by_field():
    import attrs

    from scalemodel.overlap import OverlapLines, _with_fixed
    base = overlap_lines(np.arange(5.0), np.full(5, 1e-5), np.zeros(5), np.arange(5.0) * 1e8,
                         4.5)
    fix = np.concatenate(([0.0], np.arange(5.0)[::-1] * 1e-4))
    got, want = _with_fixed(base, fix), attrs.evolve(base, intercept=base.intercept + fix,
                                                     fixed=fix)
    for f in attrs.fields(OverlapLines):  # every field, those added later too
        assert np.array_equal(getattr(got, f.name), getattr(want, f.name)), f.name


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(values, slopes), min_size=1, max_size=20), min_size=1,
                max_size=6), st.sampled_from([1, 2, 3, 30, 70]))
def test_envelopes_of_rows_are_each_rows_own(rows, width):
    """Envelopes made row by row together (overlap._envelopes: the sorts in one call)
    equal each row's own, non-finite rows and rows of more than _SMALL lines included."""
    from scalemodel.overlap import _envelopes

    rows = [(r * width)[:width] for r in rows]  # one width for all rows
    c = np.array([[a for a, _ in r] for r in rows])
    m = np.array([[b for _, b in r] for r in rows])
    if width == 2 and len(rows) > 1:
        c[1, 0] = math.inf  # a row the Python floats cannot take
    for got, ci, mi in zip(_envelopes(c, m), c, m):
        want = UpperEnvelope(ci.copy(), mi.copy())
        _same(got, want)
        with np.errstate(all="ignore"):  # overflowing crossings: the same either way
            for x in (0.0, 1e-9, 1.0, 1e9):
                a, b = got(x), want(x)
                assert np.float64(a).tobytes() == np.float64(b).tobytes()
            for level in (0.0, 1.0, 1e6):
                (xa, ja), (xb, jb) = got.max_x_below(level), want.max_x_below(level)
                assert ja == jb and np.float64(xa).tobytes() == np.float64(xb).tobytes()


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_lines_sharing_their_costs_are_each_sets_own(k, sets, seed):
    """Line sets of one collective cost made together (overlap._lines_shared: the tail
    sums once, shared) equal each set made alone (overlap_lines), field by field."""
    from scalemodel.overlap import _lines_shared

    rng = np.random.default_rng(seed)
    lat, ovh = rng.random(k) * 1e-4, rng.random(k) * 1e-5
    bits = np.floor(rng.random(k) * 1e9)
    ready = np.sort(rng.random((sets, k)), axis=1)
    bwd = ready[:, -1] + rng.random(sets) * 1e-3
    for i, got in enumerate(_lines_shared(ready, lat, ovh, bits, bwd)):
        want = overlap_lines(ready[i], lat, ovh, bits, bwd[i])
        for f in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
            x, y = getattr(got, f), getattr(want, f)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f


def test_fixed_costs_added_together_are_each_corners_own():
    """model._with_fixed_costs_stacked (the intercepts of all corners in one call, their
    envelopes together) gives each entry the lines and envelope of _with_fixed_costs,
    shares one pair between equal fixed costs, and keeps the lines without fixed costs
    where there are none."""
    from scalemodel.model import _with_fixed_costs, _with_fixed_costs_stacked

    rng = np.random.default_rng(3)
    k = 6
    bases = [overlap_lines(np.sort(rng.random(k)), rng.random(k) * 1e-4, rng.random(k) * 1e-5,
                           np.floor(rng.random(k) * 1e9), 1.2) for _ in range(3)]
    fixed = np.zeros((5, k))
    fixed[0] += 1e-4
    fixed[0, -1] += 0.02
    fixed[1] = fixed[0]  # the same fixed costs on the same lines: one pair
    fixed[3, -1] = 0.01
    fix = np.zeros((5, k + 1))
    np.cumsum(fixed[:, ::-1], axis=1, out=fix[:, :0:-1])
    which = [0, 0, 1, 2, 2]  # row 2 and 4: no fixed costs
    hits = [("p", "b", "c", bases[i], (1.0, 0.0), {}) for i in range(3)]
    got = _with_fixed_costs_stacked([hits[i] for i in which], fixed, fix)
    assert got[0] is got[1]
    assert got[2][0] is bases[1] and got[4][0] is bases[2]
    fresh = [("p", "b", "c", bases[i], (1.0, 0.0), {}) for i in range(3)]
    for (lines, env), i, f, t in zip(got, which, fixed, fix):
        want, want_env = _with_fixed_costs(fresh[i], f, t)
        for name in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
            x, y = getattr(lines, name), getattr(want, name)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
        _same(env, want_env)
    assert all(len(h[5]) == n for h, n in zip(hits, (1, 1, 2)))  # kept as the one by one


def test_clear_caches_forgets_nccl_setups_so_a_first_question_pays_for_them():
    from scalemodel import nccl
    from scalemodel.model import clear_caches

    nccl_choice("all_reduce", np.geomspace(1e3, 1e9, 8), 16, 2, version="2.4")
    assert _SETUPS and nccl._tree_threshold_24.cache_info().currsize
    clear_caches()
    assert not _SETUPS and nccl._tree_threshold_24.cache_info().currsize == 0


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-3, 1.0), st.one_of(st.none(), st.floats(1e6, 1e12),
                                       st.integers(10**6, 10**12)),
       st.floats(1e-3, 1.0), st.floats(1e3, 1e13))
def test_one_questions_utilization_in_floats_is_the_arrays(util, ceiling, asked, bw):
    """The achieved fraction of one line rate on a cluster, computed in Python floats,
    equals :meth:`~scalemodel.ClusterProfile.utilization_at`'s array answer times the
    asked utilization (bit for bit), a ceiling that binds or not, given as an int or not."""
    import scalemodel as sm
    from scalemodel.model import Scenario, effective_utilization

    cl = sm.ClusterProfile(utilization=util, ceiling=ceiling, provenance={"source": "test"})
    sc = Scenario.build("resnet50", cluster=cl)
    got = effective_utilization(sc, bw, asked)
    assert type(got) is float
    assert got == float(asked * cl.utilization_at(np.asarray(bw)))
    assert got == float(effective_utilization(sc, np.asarray([bw]), asked)[0])


def _same_schedule(a, b):
    for f in attrs.fields(type(a)):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "envelope":
            _same(x, y)
        elif f.name == "lines":
            for g in attrs.fields(type(x)):
                u, v = np.asarray(getattr(x, g.name)), np.asarray(getattr(y, g.name))
                assert u.dtype == v.dtype and u.tobytes() == v.tobytes(), (f.name, g.name)
        else:
            u, v = np.asarray(x), np.asarray(y)
            assert u.dtype == v.dtype and u.tobytes() == v.tobytes(), f.name


def test_sharded_schedules_of_equal_inputs_are_one_and_each_scenarios_own():
    """Scenarios whose inputs to the sharded schedule are equal (a fitted cluster's corners
    differ mostly in what never enters it: here the utilization) share one schedule;
    other numbers (a bucket overhead, a collective overhead of -0.0) make their own; each
    is bit for bit the schedule made for that scenario alone."""
    from scalemodel import ClusterProfile, Scenario
    from scalemodel.model import _SCHEDULES, clear_caches

    clear_caches()
    kinds = [dict(utilization=0.9), dict(utilization=0.5), dict(bucket_overhead=1e-3),
             dict(collective_overhead=-0.0), dict(collective_overhead=0.0)]
    scs = [Scenario.build("bert", sharding="zero3", fusion="module",
                          cluster=ClusterProfile(alpha=2e-5, **k)) for k in kinds]
    got = [sc.schedule(64) for sc in scs]
    assert got[0] is got[1] and got[4] is got[0]
    assert got[2] is not got[0] and got[3] is not got[0]
    # the collectives: one for the numbers that enter them (not the bucket overhead)
    assert len(sharding._COMM) == 2
    for sc, sched in zip(scs, got):
        _SCHEDULES.clear()
        sharding._COMM.clear()
        sc._cache.clear()
        own = sc.schedule(64)
        assert own is not sched
        _same_schedule(own, sched)
    clear_caches()
    assert not _SCHEDULES and not sharding._COMM


def test_zero3_collectives_shared_leave_each_schedule_its_own():
    """Schedules that share their collectives (:data:`~scalemodel.sharding._COMM`) are
    bit for bit those made without sharing, with micro-batches, in any order; a
    gradient compressor's scale makes its own."""
    from scalemodel.sharding import Sharding, sharded_schedule

    p = load_profile("bert")
    p4 = attrs.evolve(p, grad_accum=4)
    z3 = Sharding("zero3")
    asks = [(p, 1.0, 0.0), (p, 1.3, 0.0), (p, 1.0, 2e-3), (p4, 1.3, 2e-3), (p4, 1.0, 0.0)]
    for order in (asks, asks[::-1]):
        sharding._COMM.clear()
        shared = [sharded_schedule(q, 64, sharding=z3, wrap="module", slowdown=sig,
                                   bucket_overhead=cb, collective_overhead=1e-5,
                                   sync_overhead=3e-4) for q, sig, cb in order]
        assert len(sharding._COMM) == 2
        for (q, sig, cb), sched in zip(order, shared):
            sharding._COMM.clear()
            _same_schedule(sched, sharded_schedule(
                q, 64, sharding=z3, wrap="module", slowdown=sig, bucket_overhead=cb,
                collective_overhead=1e-5, sync_overhead=3e-4))
    sharding._COMM.clear()
    sharded_schedule(p, 64, sharding=z3, wrap="module", gradient_scale=0.5)
    assert not sharding._COMM
