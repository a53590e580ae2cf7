"""The shortcuts that make a first question on a fitted cluster fast give exactly what the
general code gives (bit for bit): the envelope of a few lines built in Python floats, the
NCCL 2.4 protocol choice of rings and trees in one pass, and the checked NCCL setup kept by
argument (an argument of another type is still checked)."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalemodel import overlap
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
