"""The envelope of a constant and a convex chain built in Python floats
(:meth:`UpperEnvelope.of_convex` given lists, ``UpperEnvelope._convex_py``) is the numpy
construction's envelope bit for bit: the same lines, breaks and answers; and the ZeRO-3
corner envelopes built that way (:func:`scalemodel.sharding._zero3_chains`, a few pieces)
equal the numpy rows'."""

import math

import attrs
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import scalemodel as sm
from scalemodel import sharding
from scalemodel.model import Scenario, clear_caches
from scalemodel.overlap import UpperEnvelope
from scalemodel.sharding import sum_of_maxima, zero3_envelopes


def _chain(terms, floor, c0, m0):
    a = np.zeros((len(terms), 6))
    b = np.zeros((len(terms), 6))
    for t, (ct, mt) in enumerate(terms):
        a[t, 0] = 0.5
        b[t, 1], b[t, 4] = ct, mt
    pieces, breaks = sum_of_maxima(np.array([c0, 0, 0, 0, m0, 0]), a, b, breaks=True)
    c = np.concatenate(([floor], pieces[:, :4].sum(axis=1)))
    m = np.concatenate(([0.0], pieces[:, 4]))
    return c, m, breaks


def _assert_same(py, ref, xs, levels):
    """Equal lines, breaks and answers, bit for bit."""
    assert py.index.tolist() == ref.index.tolist()
    for name in ("intercept", "slope", "breaks"):
        assert getattr(py, name).tolist() == getattr(ref, name).tolist(), name
    for x in xs:
        a, b = py(float(x)), ref(float(x))
        assert type(a) is type(b) and (a == b or (math.isnan(a) and math.isnan(b)))
        assert py.argmax(float(x)) == ref.argmax(float(x))
    np.testing.assert_array_equal(py(np.asarray(xs)), ref(np.asarray(xs)))
    for level in levels:
        assert py.max_x_below(float(level)) == ref.max_x_below(float(level))
        if (ref.slope > 0).any():
            assert py._lowest_gap(float(level)) == ref._lowest_gap(float(level))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 5)), min_size=0, max_size=40),
       st.floats(0, 30), st.floats(-3, 3), st.floats(0, 2),
       st.lists(st.floats(0, 10), min_size=1, max_size=10),
       st.lists(st.floats(-5, 60), min_size=1, max_size=5))
def test_python_floats_build_the_numpy_envelope(terms, floor, c0, m0, xs, levels):
    c, m, br = _chain(terms, floor, c0, m0)
    ref = UpperEnvelope.of_convex(c, m, br)
    py = UpperEnvelope.of_convex(c.tolist(), m.tolist(), br.tolist())
    with np.errstate(all="ignore"):  # subnormal slopes: crossings at +inf, both ways
        _assert_same(py, ref, xs, levels)


@pytest.mark.parametrize("c, m, br, on_python", [
    ([5.0, 1.0, 2.0, 3.0], [0.0, 0.5, 1.0, 2.0], [1.0, 2.0], True),  # crosses the floor
    ([1.0, 2.0, 2.5], [0.0, 1.0, 2.0], [0.5], True),  # the chain on top from x = 0
    ([5.0, 1.0, 1.5], [0.0, 0.0, 0.0], [], False),  # not a chain: the general hull
    ([5.0, 1.0], [0.0, 0.0], [], False),  # a flat chain below the constant
    ([5.0, 1.0], [0.0, 1.0], [], True),  # one piece crossing the constant
    ([5.0, 6.0], [0.0, 1.0], [], False),  # one piece on top: one line, numpy's arrays
    ([5.0, 1.0, 2.0], [0.0, 0.5, 1.0], [-1.0], False),  # a break below 0: general hull
    ([5.0, 1.0, 2.0], [0.0, 1.0, 0.5], [1.0], False),  # slopes not rising: general hull
    ([5.0, math.inf, 2.0], [0.0, 0.5, 1.0], [1.0], False),  # not finite: numpy answers
    ([5.0, 1.0, 2.0], [0.0, 0.5, 1.0], [math.nan], False),
    ([5.0, 1.0, 2.0], [0.0, 1e-320, 1.0], [1.0], True),  # a subnormal slope
])
def test_edge_cases_answer_as_numpy(c, m, br, on_python):
    ref = UpperEnvelope.of_convex(np.array(c), np.array(m), np.array(br))
    py = UpperEnvelope.of_convex(list(c), list(m), list(br))
    assert (UpperEnvelope._convex_py(list(c), list(m), list(br)) is not None) is on_python
    xs = [0.0, 0.3, 1.0, 1.7, 5.0, 1e3]
    with np.errstate(all="ignore"):
        _assert_same(py, ref, xs, [0.0, 4.0, 5.5, 9.0])


@pytest.mark.parametrize("model, strategy, n, accum", [
    ("bert", "zero3", 64, 1), ("bert", "hybrid_shard", 256, 1), ("llama-2-7b", "zero3", 16, 1),
    ("bert", "zero3", 64, 4), ("llama-2-7b", "hybrid_shard", 64, 3)])
def test_zero3_corner_envelopes_in_python_floats_are_numpys(model, strategy, n, accum,
                                                             monkeypatch):
    clear_caches()
    prof = sm.load_profile(model)
    if accum > 1:
        prof = attrs.evolve(prof, grad_accum=accum)
    sc = Scenario.build(prof, sharding=strategy, gpus_per_node=8, nics_per_node=4)
    numbers = [(1.0, 0.0, 0.0, 0.0), (1.2, 0.0, 0.01, 0.003), (0.9, 0.0, 0.02, 0.0),
               (1.05, 0.0, 0.0, 0.05)]
    kw = dict(sharding=sc.sharding, wrap=sc.fusion, algorithm=sc.algorithm,
              options=sc.options)
    py = zero3_envelopes(sc.profile, n, numbers, **kw)
    assert all(e[0]._py is not None for e in py)  # the few-piece path was taken
    monkeypatch.setattr(sharding, "_PY_PIECES", 0)
    ref = zero3_envelopes(sc.profile, n, numbers, **kw)
    xs = np.concatenate(([0.0], np.logspace(-14, -7, 30)))
    for (a, wa), (b, wb) in zip(py, ref):
        assert wa == wb
        _assert_same(a, b, xs, b(xs)[[0, 5, 15, -1]])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 5)), min_size=0,
                                   max_size=12),
                          st.floats(0, 30), st.floats(-3, 3), st.floats(0, 2)),
                min_size=1, max_size=6),
       st.lists(st.floats(0, 10), min_size=1, max_size=6),
       st.lists(st.floats(-5, 60), min_size=1, max_size=4))
def test_rows_at_once_are_each_rows_envelope(chains, xs, levels):
    # UpperEnvelope.of_convex_rows: padded rows of different lengths, each the envelope
    # of_convex makes of that row's arrays alone (lines, breaks and answers bit for bit)
    made = [_chain(*ch) for ch in chains]
    L = [len(br) for _, _, br in made]
    W = max(L)
    c = np.full((len(made), W + 2), 7.0)  # padding the rows must ignore
    m = np.full((len(made), W + 2), -1.0)
    br = np.full((len(made), W), np.nan)
    for r, (ci, mi, bi) in enumerate(made):
        c[r, :len(ci)], m[r, :len(mi)], br[r, :len(bi)] = ci, mi, bi
    got = UpperEnvelope.of_convex_rows(c, m, br, L)
    with np.errstate(all="ignore"):
        for (ci, mi, bi), env in zip(made, got):
            _assert_same(env, UpperEnvelope.of_convex(ci, mi, bi), xs, levels)


def test_rows_at_once_fall_back_as_of_convex_does():
    c = np.array([[5.0, 1.0, 1.5, 0.0], [5.0, 1.0, 2.0, 3.0], [1.0, 2.0, 2.5, 0.0],
                  [5.0, 1.0, 0.0, 0.0]])
    m = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 1.0, 2.0], [0.0, 1.0, 2.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0]])
    br = np.array([[9.0, 9.0], [1.0, 2.0], [0.5, 0.0], [0.0, 0.0]])
    L = [1, 2, 1, 0]  # not a chain (general hull); crossing; on top; a flat chain
    for r, env in enumerate(UpperEnvelope.of_convex_rows(c, m, br, L)):
        ref = UpperEnvelope.of_convex(c[r, :L[r] + 2], m[r, :L[r] + 2], br[r, :L[r]])
        _assert_same(env, ref, [0.0, 0.7, 1.5, 4.0], [0.0, 3.0, 5.5])
