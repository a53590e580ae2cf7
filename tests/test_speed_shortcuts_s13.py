"""Shortcuts of the first question on a fitted ZeRO-3 cluster (issue 17, item 10) answer
what the long paths answer, bit for bit:

- ``UpperEnvelope._rising_rows``: the rows of :func:`scalemodel.sharding._zero3_chains`
  checked for their slopes' strict rise alone (the rest holds by construction) are
  :meth:`UpperEnvelope.of_convex_rows`'s envelopes;
- ``_zero3_chains`` (flat gathers, masks without ``grows`` when every line grows) equals
  the construction it replaced, kept here as the reference;
- ``UpperEnvelope.max_x_below`` / ``_lowest_gap`` kept per level equal a fresh
  computation, a -0.0 level apart from a 0.0 one."""

import math

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import scalemodel as sm
from scalemodel import sharding
from scalemodel.model import Scenario, clear_caches
from scalemodel.overlap import UpperEnvelope
from scalemodel.sharding import zero3_envelopes
from test_zero3_corner_envelope import _sharded_fit


def _same_env(a, b):
    assert a.index.tolist() == b.index.tolist()
    for name in ("intercept", "slope", "breaks"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name


def _rows(chains):
    """Padded rows (line 0 flat, slopes >= 0, breaks > 0 ascending) of ``chains``:
    ``(floor, c1, slopes, breaks)`` each; intercepts that make the chain continuous."""
    L = [len(br) for _, _, _, br in chains]
    W = max(L)
    c = np.full((len(chains), W + 2), 7.0)  # padding both constructions must ignore
    m = np.full((len(chains), W + 2), -1.0)
    br = np.full((len(chains), W), np.nan)
    for r, (floor, c1, slopes, b) in enumerate(chains):
        ci = [floor, c1]
        for k, x in enumerate(b):  # each next line meets the last one at its break
            ci.append(ci[-1] + (slopes[k] - slopes[k + 1]) * x)
        c[r, :len(ci)], m[r, :L[r] + 2], br[r, :L[r]] = ci, [0.0, *slopes], b
    return c, m, br, L


_CHAIN = st.tuples(
    st.floats(0, 30), st.floats(-3, 30),
    st.lists(st.floats(0, 5), min_size=1, max_size=12),
    st.floats(0.01, 3)).map(
        lambda t: (t[0], t[1], sorted(t[2]),
                   [t[3] * (k + 1) for k in range(len(t[2]) - 1)]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_CHAIN, min_size=1, max_size=6))
def test_rising_rows_are_of_convex_rows(chains):
    # sorted slopes, ties included (a slope that does not rise: the general construction)
    c, m, br, L = _rows(chains)
    with np.errstate(all="ignore"):
        ref = UpperEnvelope.of_convex_rows(c, m, br, L)
        got = UpperEnvelope._rising_rows(c, m, br, L)
    for a, b in zip(got, ref):
        _same_env(a, b)


def test_rising_rows_edge_cases():
    # a row on top, one under its constant, one flat below it, one whose slope stalls
    # within its lines (tie: the general hull), one that stalls only in its padding,
    # and a row of no breaks
    c = np.array([[0.0, 1.0, 0.5, 0.0, 9.0], [5.0, 1.0, 0.0, -2.0, 9.0],
                  [5.0, 1.0, 0.0, 9.0, 9.0], [5.0, 1.0, 1.0, 0.5, 9.0],
                  [5.0, 1.0, 0.0, 3.0, 3.0], [5.0, 6.0, 9.0, 9.0, 9.0]])
    m = np.array([[0.0, 0.5, 1.0, 2.0, 0.0], [0.0, 0.5, 1.5, 2.5, 0.0],
                  [0.0, 0.0, 9.0, 9.0, 9.0], [0.0, 1.0, 1.0, 2.0, 0.0],
                  [0.0, 0.5, 1.5, 1.5, 1.5], [0.0, 2.0, 1.0, 0.0, 0.0]])
    br = np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 0.0],
                   [1.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    L = [2, 2, 0, 2, 1, 0]
    ref = UpperEnvelope.of_convex_rows(c, m, br, L)
    got = UpperEnvelope._rising_rows(c, m, br, L)
    for a, b in zip(got, ref):
        _same_env(a, b)
    assert len(got[3].intercept) != 4  # the stalled row took the general hull
    # rows of no chain lines to compare
    c2, m2 = np.array([[3.0, 1.0]]), np.array([[0.0, 1.0]])
    _same_env(UpperEnvelope._rising_rows(c2, m2, np.zeros((1, 0)), [0])[0],
              UpperEnvelope.of_convex_rows(c2, m2, np.zeros((1, 0)), [0])[0])


def _old_zero3_chains(profile, fc, s, sigma, sync, cb):
    """The construction before the shortcuts (sharding._zero3_chains at e8057b3)."""
    base_c, base_m, tb_c, tb_m = fc.comm_lines
    units = fc.units
    K = len(units)
    compute = np.concatenate((units.forward[:-1], units.backward[::-1]))
    ca = sigma[:, None] * compute
    ca[:, K - 1:] += cb[:, None]
    grows = tb_m > 0
    dc = tb_c - ca
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = -dc / np.where(grows, tb_m, 1.0)
    live = grows & (cross > 0) & (cross < np.inf)
    rising = grows & (cross <= 0)
    top = rising | (~grows & (dc > 0))
    c0 = (base_c + sync + sigma * units.forward[-1] + ca.sum(axis=1)
          + np.where(top, dc, 0.0).sum(axis=1))
    m0 = base_m + np.where(rising, tb_m, 0.0).sum(axis=1)
    order = np.argsort(np.where(live, cross, np.inf), axis=1, kind="stable")
    count = live.sum(axis=1)
    rows = np.arange(len(order))[:, None]
    step_c = np.cumsum(dc[rows, order], axis=1)
    step_m = np.cumsum(tb_m[order], axis=1)
    breaks = cross[rows, order]
    acc = profile.grad_accum
    f = sigma * profile.forward_time
    floor = acc * (f + sigma * profile.backward_time) + acc * K * cb
    offset = profile.update_time / s - profile.update_time - f
    intercept = np.empty((step_c.shape[0], step_c.shape[1] + 2))
    slope = np.empty(intercept.shape)
    intercept[:, 1], slope[:, 1] = c0, m0
    intercept[:, 2:] = step_c + c0[:, None]
    slope[:, 2:] = step_m + m0[:, None]
    if acc > 1:
        intercept[:, 1:] *= acc
        slope[:, 1:] *= acc
    intercept[:, 0], slope[:, 0] = floor, 0.0
    intercept += offset[:, None]
    return UpperEnvelope.of_convex_rows(intercept, slope, breaks, count.tolist())


@pytest.mark.parametrize("model,strategy,acc", [
    ("llama-2-7b", "zero3", 1), ("gpt2", "zero3", 1), ("bert", "hybrid_shard", 1),
    ("gpt2", "zero3", 4)])
def test_zero3_chains_equal_the_construction_they_replaced(monkeypatch, model, strategy,
                                                           acc):
    clear_caches()
    sc = Scenario.build(model, sharding=strategy, fusion="module",
                        **({"gpus_per_node": 8} if strategy == "hybrid_shard" else {}))
    profile = sc.profile
    if acc > 1:
        import attrs
        profile = attrs.evolve(profile, grad_accum=acc)
    seen = []
    real = sharding._zero3_chains

    def spy(*a):
        seen.append(a)
        return real(*a)

    monkeypatch.setattr(sharding, "_PY_PIECES", 0)  # the rows' path for every length
    monkeypatch.setattr(sharding, "_zero3_chains", spy)
    numbers = [(1.0, 0.0, 0.0, 0.0), (1.3, 0.0, 2e-3, 1e-4), (0.7, 0.0, 0.0, 5e-3),
               (1.0, 0.0, 0.0, 1.0), (2.5, 0.0, 1.0, 0.0)]
    zero3_envelopes(profile, 64, numbers, sharding=sc.sharding, wrap=sc.fusion,
                    algorithm=sc.algorithm, options=sc.options)
    assert seen
    for args in seen:
        for a, b in zip(real(*args), _old_zero3_chains(*args)):
            _same_env(a, b)


def test_zero3_chains_where_a_line_does_not_grow():
    # comm lines without wire bits (grows False for some): the masks with grows
    clear_caches()
    sc = Scenario.build("gpt2", sharding="zero3", fusion="module")
    n = 64
    seen = []
    real = sharding._zero3_chains
    sharding._zero3_chains = lambda *a: seen.append(a) or real(*a)
    try:
        zero3_envelopes(sc.profile, n, [(1.0, 0.0, 0.0, 0.0)], sharding=sc.sharding,
                        wrap=sc.fusion, algorithm=sc.algorithm, options=sc.options)
    finally:
        sharding._zero3_chains = real
    profile, fc, s, sigma, sync, cb = seen[0]
    import attrs
    tb_m = fc.comm_lines[3].copy()
    tb_m[::3] = 0.0  # every third term sends nothing
    fc2 = attrs.evolve(fc, comm_lines=(*fc.comm_lines[:3], tb_m))
    sig, syn, hook = np.array([1.0, 0.8]), np.array([0.0, 1e-3]), np.array([0.0, 2e-4])
    with np.errstate(all="ignore"):
        for a, b in zip(real(profile, fc2, s, sig, syn, hook),
                        _old_zero3_chains(profile, fc2, s, sig, syn, hook)):
            _same_env(a, b)


def test_max_x_below_kept_per_level_is_computed_again():
    env = UpperEnvelope(np.array([1.0, 0.0, -3.0]), np.array([0.0, 1.0, 2.5]))
    for level in (2.0, 0.5, 2.0, np.float64(2.0), 7.25, 0.5):
        fresh = UpperEnvelope(env.intercept.copy(), env.slope.copy())
        assert env.max_x_below(level) == fresh.max_x_below(level)
        assert env._lowest_gap(level) == fresh._lowest_gap(level)
    # a -0.0 level is not a 0.0 one: x = (level - 0) / 1 keeps the level's sign
    one = UpperEnvelope(np.array([0.0]), np.array([1.0]))
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        fresh = UpperEnvelope(np.array([0.0]), np.array([1.0]))
        one.max_x_below(first)
        got, ref = one.max_x_below(second), fresh.max_x_below(second)
        assert got == ref and math.copysign(1.0, got[0]) == math.copysign(1.0, ref[0])
        assert math.copysign(1.0, one._lowest_gap(second)) == \
            math.copysign(1.0, fresh._lowest_gap(second))
    # numpy envelopes (many lines) too, and a sweep of levels stays bounded
    c = -np.arange(60.0) * 0.5
    m = np.arange(60.0) * 0.1
    big = UpperEnvelope(c, m)
    for level in np.linspace(0.0, 50.0, 200):
        fresh = UpperEnvelope(c, m)
        assert big.max_x_below(float(level)) == fresh.max_x_below(float(level))
    assert len(big._kept) <= 32


def test_first_question_answers_as_warm():
    # one fitted-like question twice cold and once warm: the same answer, kept levels
    # included
    cl = sm.ClusterProfile(intervals={"alpha": (0.0, 1e-4)},
                           provenance={"source": "example"})
    answers = []
    for warm in (False, False, True):
        if not warm:
            clear_caches()
        r = sm.min_compression("gpt2", 10e9, n=64, target=0.9, cluster=cl,
                               sharding="zero3", fusion="module")
        answers.append((r.ratio, r.interval, r.message))
    assert answers[0] == answers[1] == answers[2]


def _old_sum_of_maxima(base, a, b, breaks=False):
    """sum_of_maxima before the shortcuts (e8057b3): every selection made."""
    base = np.asarray(base, float)
    w = base.shape[-1]
    a = np.asarray(a, float).reshape(-1, w)
    b = np.asarray(b, float).reshape(-1, w)
    ca, cb = a[:, :4].sum(axis=1), b[:, :4].sum(axis=1)
    ma, mb = a[:, 4], b[:, 4]
    swap = (ma > mb) | ((ma == mb) & (ca < cb))
    lo = np.where(swap[:, None], b, a)
    step = np.where(swap[:, None], a, b) - lo
    dm = step[:, 4]
    grows = dm > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = np.where(swap, cb - ca, ca - cb) / np.where(grows, dm, 1.0)
    live = grows & (cross > 0) & (cross < np.inf)
    first = base + lo.sum(axis=0) + step[grows & (cross <= 0)].sum(axis=0)
    at = np.flatnonzero(live)
    order = at[np.argsort(cross[at], kind="stable")]
    pieces = np.empty((len(order) + 1, w))
    pieces[0] = first
    np.cumsum(step[order], axis=0, out=pieces[1:])
    pieces[1:] += first
    return (pieces, cross[order]) if breaks else pieces


_PART = st.floats(-5, 5) | st.sampled_from([0.0, -0.0, 1.0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(_PART, min_size=6, max_size=6),
                          st.lists(_PART, min_size=6, max_size=6)),
                min_size=1, max_size=30),
       st.lists(_PART, min_size=6, max_size=6), st.booleans())
def test_sum_of_maxima_without_selections_is_the_old_one(terms, base, unswapped):
    a = np.array([t[0] for t in terms])
    b = np.array([t[1] for t in terms])
    if unswapped:  # the shortcut's case: a's slopes below b's (no term swaps)
        a[:, 4] = np.minimum(a[:, 4], b[:, 4]) - 1.0
    got = sharding.sum_of_maxima(np.array(base), a, b, breaks=True)
    ref = _old_sum_of_maxima(np.array(base), a, b, breaks=True)
    for x, y in zip(got, ref):
        assert x.tobytes() == y.tobytes()


def test_compute_intercept_is_its_part_plus_zero():
    # _zero3_chain passes compute + 0.0 as sum_of_maxima's a[:, :4].sum(axis=1) of rows
    # whose other parts are +0.0: bit for bit, a -0.0 (made +0.0), NaN and inf included
    vals = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0,
                     1e308, 3.3e-310, 0.1, 1 / 3])
    rng = np.random.default_rng(0)
    vals = np.concatenate((vals, rng.standard_normal(1000) * 10.0 ** rng.integers(
        -30, 30, 1000)))
    ta = np.zeros((len(vals), 6))
    ta[:, 0] = vals
    assert ta[:, :4].sum(axis=1).tobytes() == (vals + 0.0).tobytes()


@pytest.mark.parametrize("model,strategy", [("llama-2-7b", "zero3"), ("gpt2", "zero3"),
                                            ("bert", "hybrid_shard")])
def test_sharded_schedule_chain_is_the_old_construction(monkeypatch, model, strategy):
    # the schedule's chain (_zero3_chain with the collectives' intercepts made already)
    # equals sum_of_maxima of its rows as it was
    clear_caches()
    sc = Scenario.build(model, sharding=strategy, fusion="module",
                        **({"gpus_per_node": 8} if strategy == "hybrid_shard" else {}))
    made = []
    real = sharding._maxima
    monkeypatch.setattr(sharding, "_maxima",
                        lambda *a, **k: made.append((a, k)) or real(*a, **k))
    sharding.sharded_schedule(sc.profile, 64, sharding=sc.sharding, wrap=sc.fusion,
                              algorithm=sc.algorithm, options=sc.options, slowdown=1.3,
                              bucket_overhead=2e-4, sync_overhead=1e-3)
    assert made
    args, kw = made[-1]
    assert kw.get("a_sum") is not None  # (the compute's column sums made already)
    got = real(*args, **kw)
    base, a, b = args[:3]
    ref = _old_sum_of_maxima(base, a, b, breaks=True)
    for x, y in zip(got, ref):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 7, 8, 9, 17, 581, 1162, 20000])
def test_intercepts_are_the_row_sums(rows):
    # sharding._intercepts adds a row's four parts as numpy's row sum does: bit for bit
    # (signed zeros, subnormals, infinities and values of every magnitude)
    rng = np.random.default_rng(rows)
    p = rng.standard_normal((rows, 6)) * 10.0 ** rng.integers(-300, 300, (rows, 6))
    p[rng.random((rows, 6)) < 0.2] = 0.0
    p[rng.random((rows, 6)) < 0.1] = -0.0
    p[rng.random((rows, 6)) < 0.02] = 5e-324
    p[rng.random((rows, 6)) < 0.01] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        got, ref = sharding._intercepts(p), p[:, :4].sum(axis=1)
        scale = np.abs(p[:, :4]).sum(axis=1)
    _same_sums(got, ref, scale)


def _same_sums(got, ref, scale):
    """Bit for bit on the numpy these shortcuts were checked with (2.4); a numpy that sums
    in another order may differ by rounding (within 4 ulp of ``scale``, the sum of the
    terms' magnitudes; the same infinities and NaNs), which moves no answer beyond it."""
    if np.lib.NumpyVersion(np.__version__) < "2.5.0":
        assert got.tobytes() == ref.tobytes()
    finite = np.isfinite(scale)
    assert np.array_equal(got[~finite], ref[~finite], equal_nan=True)
    assert np.all(np.abs(got[finite] - ref[finite]) <= 4 * np.finfo(float).eps * scale[finite])


def test_schedule_keys_compare_as_their_settings_and_numbers():
    # Scenario._schedule_key: the settings as one number per distinct settings (made once
    # per scenario, the corners taking their root's), the numbers with their signs
    import attrs

    from scalemodel.model import _corner_siblings

    clear_caches()
    sc = Scenario.build("gpt2", sharding="zero3", fusion="module")
    twin = attrs.evolve(sc)  # the same settings, another scenario
    other = attrs.evolve(sc, sharding=sharding.Sharding("zero3", param_dtype="fp32"))
    nums = (1.0, 0.0, 0.0, 0.0)
    assert sc._schedule_key(64, False, nums) == twin._schedule_key(64, False, nums)
    assert sc._schedule_key(64, False, nums) != other._schedule_key(64, False, nums)
    assert sc._schedule_key(64, False, nums) != sc._schedule_key(32, False, nums)
    assert sc._schedule_key(64, False, nums) != sc._schedule_key(64, True, nums)
    for i in range(4):  # a -0.0 is not a 0.0, in every number
        neg = list(nums)
        neg[i] = -nums[i] if nums[i] else -0.0
        assert sc._schedule_key(64, False, nums) != sc._schedule_key(64, False, tuple(neg))
    assert sc._schedule_key(64, False, (np.float64(1.0), 0.0, 0.0, 0.0)) == \
        sc._schedule_key(64, False, nums)
    codec = attrs.evolve(sc, codec_cost=-0.0)  # the codec cost's sign too
    assert codec._schedule_key(64, False, nums) != sc._schedule_key(64, False, nums)
    held = sc._schedule_key(64, False, nums)
    clear_caches()  # a head is never reused: a key kept past a clear matches no new one
    fresh = Scenario.build("gpt2", sharding="zero3", fusion="module", alpha=1e-6)
    assert fresh._schedule_key(64, False, nums) != held
    # the corners of a fitted cluster take their root's head: equal keys for equal numbers
    cl = sm.ClusterProfile(intervals={"alpha": (0.0, 1e-4)},
                           provenance={"source": "example"})
    root = Scenario.build("gpt2", sharding="zero3", fusion="module", cluster=cl)
    for s in _corner_siblings(root).values():
        assert s._schedule_key(64, False, nums) == root._schedule_key(64, False, nums)


def _zero3_fit():
    """The corner-envelope tests' fitted ZeRO-3 cluster with a third explanation."""
    import attrs

    cl = _sharded_fit()
    return attrs.evolve(cl, alternatives=[
        *cl.alternatives, {"free": ["bucket_overhead"], "values": {"bucket_overhead": 5e-3},
                           "intervals": {"bucket_overhead": [4e-3, 7e-3]}, "score": 1.5}])


def _answers(cl, model, cold=True):
    out = []
    for q in ("it", "mc", "rb", "mc2", "it"):
        if cold:
            clear_caches()
        if q == "it":
            r = sm.iteration_time(model, 64, 10e9, cluster=cl)
            out.append((r.total, r.scaling_factor_interval, r.total_interval, str(r)))
        elif q.startswith("mc"):
            r = sm.min_compression(model, 10e9, n=64, target=0.95 if q == "mc" else 0.6,
                                   cluster=cl)
            out.append((r.ratio, r.interval, r.message))
        else:
            r = sm.required_bandwidth(model, n=64, target=0.9, cluster=cl)
            out.append((r.bw, r.interval, r.message))
    return out


@pytest.mark.parametrize("model", ["bert", "llama-2-7b", "gpt2"])
def test_corner_batches_answer_as_each_corner_alone(monkeypatch, model):
    # Scenario._prime_corner_envelopes makes the corners a question asks in one batch and
    # the others when asked: every row of a batch is its envelope alone, so the answers
    # (cold, and warm where a second question finds the first's batch) are those of
    # envelopes made one corner at a time
    from scalemodel import model as model_mod

    cl = _zero3_fit()
    batched, warm = _answers(cl, model), _answers(cl, model, cold=False)
    calls = []

    def alone(profile, n, numbers, **kw):
        calls.append(len(numbers))
        return [zero3_envelopes(profile, n, [x], **kw)[0] for x in numbers]

    monkeypatch.setattr(model_mod, "zero3_envelopes", alone)
    assert _answers(cl, model) == batched
    assert _answers(cl, model, cold=False) == warm == batched
    assert calls  # the corners' envelopes came through the batches


def _old_max_x_below(env, level):
    c, m = env.intercept, env.slope
    if c[0] > level:
        return -1.0, int(env.index[0])
    grows = m > 0
    if not grows.any():
        return float("inf"), -1
    xs = (level - c[grows]) / m[grows]
    k = int(np.argmin(xs))
    return float(xs[k]), int(env.index[np.flatnonzero(grows)[k]])


def test_growing_envelopes_answer_as_the_selection_did():
    # max_x_below on a numpy envelope whose every line grows (a chain on top of its
    # constant): no selection, its gaps kept for _lowest_gap at the same level
    rng = np.random.default_rng(3)
    c1, m = -np.cumsum(rng.random(300)), np.cumsum(rng.random(300)) + 0.1
    br = (c1[:-1] - c1[1:]) / (m[1:] - m[:-1])
    c = np.concatenate(([-1e9], c1))
    env = UpperEnvelope.of_convex_rows(c[None, :], np.concatenate(([0.0], m))[None, :],
                                       br[None, :], [len(br)])[0]
    assert env._py is None and (env.slope > 0).all()
    for level in (0.0, -0.0, 3.5, 1e-300, -2.0, 40.0, np.float64(7.0), 3.5):
        fresh = UpperEnvelope.of_convex_rows(
            c[None, :], np.concatenate(([0.0], m))[None, :], br[None, :], [len(br)])[0]
        got = env.max_x_below(level)
        assert got == _old_max_x_below(fresh, level)
        assert math.copysign(1.0, got[0]) == math.copysign(1.0, _old_max_x_below(
            fresh, level)[0])
        ref_gap = float(np.min(level - fresh.intercept[fresh.slope > 0]))
        gap = env._lowest_gap(level)
        assert gap == ref_gap and math.copysign(1.0, gap) == math.copysign(1.0, ref_gap)
    # a gap asked at another level than the last max_x_below is computed afresh
    env.max_x_below(5.0)
    assert env._lowest_gap(6.0) == float(np.min(6.0 - env.intercept))


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 8, 9, 100, 581, 5000])
def test_column_sums_are_running_sums_from_zero(rows):
    # _zero3_chain gives _maxima the compute rows' column sums as 0.0 + the running
    # sum's end (and +0.0 for the zero columns): numpy's sum over the rows of a C-ordered
    # array adds them in order from 0.0, bit for bit (signed zeros and every magnitude)
    rng = np.random.default_rng(rows)
    col = rng.standard_normal(rows) * 10.0 ** rng.integers(-200, 200, rows)
    col[rng.random(rows) < 0.2] = -0.0
    for c in (col, -np.abs(col), np.full(rows, -0.0)):
        ta = np.zeros((rows, 6))
        ta[:, 0] = c
        made = np.zeros(6)
        made[0] = 0.0 + c.cumsum()[-1]
        _same_sums(made, ta.sum(axis=0), np.abs(ta).sum(axis=0))


def test_corner_clusters_made_once_per_cluster_object():
    # intervals.corner_clusters keeps its answer on the cluster object (as its corners
    # and alternatives are): the same clusters on every call, each flag its own, and the
    # lists returned are the caller's (changing one changes no later answer)
    import attrs

    from scalemodel.intervals import corner_clusters

    cl = _zero3_fit()
    eff = {"value": 0.5, "interval": [0.4, 0.6], "gpu": ["V100"], "profiles": ["x"]}
    fitted = attrs.evolve(cl, extra={"efficiency": eff},
                          intervals=dict(cl.intervals, efficiency=(0.4, 0.6)))
    for c in (cl, fitted):
        for swap in (False, True):
            first = corner_clusters(c, swap_efficiency=swap)
            ref = []  # what the function computes, by hand
            for i in range(max(1, len(c.alternatives))):
                x = c if i == 0 else c.with_alternative(i)
                worst, best = x.corners()
                ends = [x] if worst is x and best is x else [worst, best]
                if swap and "efficiency" in worst.extra and "efficiency" in best.extra:
                    from scalemodel.intervals import _swapped
                    ends += _swapped(x, worst, best)
                ref.append((i, x, ends))
            assert [(i, id(x), [id(e) for e in ends]) for i, x, ends in first] == \
                [(i, id(x), [id(e) for e in ends]) for i, x, ends in ref]
            first[0][2].append("changed")
            again = corner_clusters(c, swap_efficiency=swap)
            assert "changed" not in again[0][2]
            assert [id(e) for e in again[0][2]] == [id(e) for e in ref[0][2]]
    assert len(corner_clusters(fitted, swap_efficiency=True)[0][2]) == 4
    assert len(corner_clusters(fitted, swap_efficiency=False)[0][2]) == 2


# Python-float envelopes: max_x_below in one pass (the gaps kept for _lowest_gap), against
# the line-by-line loop it replaced (kept as _max_x_below_loop)

_PY_ENV = st.lists(st.tuples(st.floats(-50, 50),
                             st.one_of(st.just(0.0), st.floats(1e-3, 20))),
                   min_size=1, max_size=40)  # (no crossing beyond the floats: numpy's)


def _py_envelopes(lines):
    c = [a for a, _ in lines]
    m = [b for _, b in lines]
    env = UpperEnvelope(c, m)
    out = [env] if env._py is not None else []
    if len(c) > 2:  # a chain: line 0 flat, slopes rising, breaks ascending (of_convex)
        slopes = sorted(set(m[1:]))
        if len(slopes) >= 2:
            ci = [c[0], c[1]]
            br = [0.5 * (k + 1) for k in range(len(slopes) - 1)]
            for k, x in enumerate(br):
                ci.append(ci[-1] + (slopes[k] - slopes[k + 1]) * x)
            chain = UpperEnvelope.of_convex(ci, [0.0, *slopes], br)
            if chain._py is not None:
                out.append(chain)
    return out


def _fresh(env):
    fresh = UpperEnvelope.__new__(UpperEnvelope)
    fresh._py = env._py
    return fresh


@settings(max_examples=300, deadline=None)
@given(_PY_ENV, st.lists(st.floats(-60, 200), min_size=1, max_size=4))
def test_max_x_below_in_one_pass_is_the_loop(lines, levels):
    for env in _py_envelopes(lines):
        for level in levels + [0.0, -0.0]:
            got = _fresh(env)
            one = got.max_x_below(level)
            ref = _fresh(env)._max_x_below_loop(float(level)) \
                if not _fresh(env)._py[0][0] > level else (-1.0, env._py[3][0])
            if ref is None:  # a crossing not finite: numpy's answer
                ref = UpperEnvelope._max_x_below(
                    type("E", (), {"_py": None, "intercept": env.intercept,
                                   "slope": env.slope, "index": env.index,
                                   "_gaps": None})(), level)
            assert type(one[0]) is type(ref[0]) and one[1] == ref[1]
            assert one[0] == ref[0] and math.copysign(1.0, one[0]) == \
                math.copysign(1.0, ref[0])
            if not any(mi > 0 for mi in env._py[1]):
                continue  # no gap to take (_x_star asks none: x is inf)
            # the gap at the same level: the kept list, as made afresh
            gap, ref_gap = got._lowest_gap(level), _fresh(env)._lowest_gap(level)
            assert gap == ref_gap and math.copysign(1.0, gap) == math.copysign(1.0, ref_gap)


def test_max_x_below_in_one_pass_edge_cases():
    # ties (the first smallest crossing), signed zeros, the flat head of a chain
    env = UpperEnvelope.__new__(UpperEnvelope)
    env._py = ([1.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 1.0], [0, 3, 5])
    assert env.max_x_below(1.0) == (0.0, 3)  # 0.0 / 1 and 1.0 / 2 ...
    fresh = UpperEnvelope.__new__(UpperEnvelope)
    fresh._py = env._py
    assert fresh._max_x_below_loop(1.0) == (0.0, 3)
    tie = UpperEnvelope.__new__(UpperEnvelope)
    tie._py = ([0.0, -1.0], [1.0, 2.0], [1.0], [4, 7])  # both cross at x = 1: the first
    assert tie.max_x_below(1.0) == (1.0, 4)
    assert tie._lowest_gap(1.0) == 1.0
    neg = UpperEnvelope.__new__(UpperEnvelope)  # gaps kept per level and sign
    neg._py = ([0.0, 0.0], [1.0, 2.0], [0.0], [0, 1])
    x, j = neg.max_x_below(0.0)
    assert (x, j) == (0.0, 0) and math.copysign(1.0, x) == 1.0
    assert math.copysign(1.0, neg._lowest_gap(0.0)) == 1.0
    # the gaps kept at 0.0 are not -0.0's: -0.0 - 0.0 is -0.0
    assert math.copysign(1.0, neg._lowest_gap(-0.0)) == -1.0
    x, _ = neg.max_x_below(-0.0)
    assert math.copysign(1.0, x) == math.copysign(1.0, (-0.0 - 0.0) / 1.0)
    flat = UpperEnvelope.__new__(UpperEnvelope)  # no line grows
    flat._py = ([1.0, 2.0], [0.0, 0.0], [0.0], [0, 1])
    assert flat.max_x_below(3.0) == (math.inf, -1)


# memory(): what depends on the config alone made once per config (_parameter_count,
# _activations_of, _rounding_of, _side_pool_of) and the default model parallelism
# recognized without its checks: the same estimates as made afresh

def _memory_afresh(monkeypatch, *args, **kw):
    mem = __import__("scalemodel.memory", fromlist=["x"])
    for name in ("_parameter_count", "_activations_of", "_rounding_of", "_side_pool_of"):
        monkeypatch.setattr(mem, name, getattr(mem, name).__wrapped__)
    try:
        return sm.memory(*args, **kw)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3-8b", "gpt2", "bert"])
@pytest.mark.parametrize("kw", [
    {}, {"sharding": "zero3"}, {"sharding": "hybrid_shard", "gpus_per_node": 8},
    {"sharding": "zero2", "accounting": "fsdp", "loss": "fused"},
    {"activation_checkpointing": "full", "sharding": "zero1"},
    {"tp": 2, "sharding": "zero3"}, {"fragmentation": 0.2, "measure": "reserved"},
    {"sequence_parallel": False, "virtual_stages": 1, "tp": 1, "pp": 1}])
def test_memory_made_once_per_config_is_made_afresh(monkeypatch, model, kw):
    import warnings

    def answer(fn, n):
        try:
            m = fn(model, n, **kw)
        except sm.ScalemodelError as exc:  # (a profile without a config and tp=2)
            return f"{type(exc).__name__}: {exc}"
        return repr(m), m.per_gpu, m.fits

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [answer(sm.memory, n) for n in (8, 64)]
        again = [answer(sm.memory, n) for n in (8, 64)]  # from the caches
        ref = [answer(lambda *a, **k: _memory_afresh(monkeypatch, *a, **k), n)
               for n in (8, 64)]
    assert got == again == ref


def test_default_model_parallelism_is_what_the_checks_find():
    mem = __import__("scalemodel.memory", fromlist=["x"])
    cfg = sm.llm_config("llama-2-7b")
    ck = mem.resolve_checkpointing(False, True)
    ns = np.asarray(8)
    assert mem._check_model_parallel(1, 1, None, cfg, ns, "zero3", ck, "x") is None
    # anything else takes the checks: a bool, numpy integers, a pipeline
    with pytest.raises(sm.ScalemodelError):
        mem._check_model_parallel(True, 1, None, cfg, ns, "zero3", ck, "x")
    assert mem._check_model_parallel(np.int64(1), 1, None, cfg, ns, "zero3", ck, "x") is None
    with pytest.raises(sm.InvalidParameterError, match="microbatches"):
        mem._check_model_parallel(1, 2, None, cfg, ns, "none", ck, "x")
    with pytest.raises(sm.ScalemodelError):
        mem._check_model_parallel(1, 1, None, cfg, ns, "none", ck, "x",
                                  sequence_parallel="yes")


# the corner scenarios' clusters (_sibling_clusters) and an interval's discriminating run
# kept per cluster object: per profile and per pair of explanations, as made afresh

def test_sibling_clusters_kept_per_cluster_and_profile(monkeypatch):
    import attrs

    from scalemodel import model as model_mod
    from scalemodel.model import _sibling_clusters

    cl = _zero3_fit()
    eff = {"value": 0.5, "interval": [0.4, 0.6], "gpu": ["V100"], "profiles": ["x"]}
    cl = attrs.evolve(cl, extra={"efficiency": eff},
                      intervals=dict(cl.intervals, efficiency=(0.4, 0.6)))
    # the efficiency applies to one profile only: its siblings are fewer
    monkeypatch.setattr(model_mod, "fitted_efficiency",
                        lambda c, p: (0.5, (None, None)) if p is not None and p.name ==
                        "llama-2-7b" and "efficiency" in c.extra else None)
    raws = [sm.load_profile(m) for m in ("bert", "llama-2-7b")] + [None]
    fresh = {}
    for raw in raws:
        cl._derived.pop(("sibling clusters",), None)
        fresh[id(raw)] = [id(c) for c in _sibling_clusters(cl, raw)]
    assert len(fresh[id(raws[0])]) > len(fresh[id(raws[1])])
    cl._derived.pop(("sibling clusters",), None)
    for raw in raws + raws[::-1] + raws:
        assert [id(c) for c in _sibling_clusters(cl, raw)] == fresh[id(raw)]
    # the corner scenarios are made of them, each marked with its root
    for m, raw in zip(("bert", "llama-2-7b"), raws):
        clear_caches()
        root = Scenario.build(m, cluster=cl)
        near = model_mod._corner_siblings(root)
        assert list(near)[1:] == fresh[id(raw)]
        assert all(s._cache[("root",)] is root for s in list(near.values())[1:])


def test_discriminating_run_kept_per_pair():
    from scalemodel.intervals import _kept_discriminating_run, discriminating_run

    cl = _zero3_fit()
    alts = cl.alternatives
    pairs = [(alts[0], alts[1]), (alts[0], alts[2]), (alts[1], alts[2]), (None, alts[1])]
    texts = [discriminating_run(a, b, cl) for a, b in pairs]
    assert len(set(texts)) > 1
    for _ in range(2):
        for (a, b), text in zip(pairs, texts):
            assert _kept_discriminating_run(a, b, cl) == text
    other = _zero3_fit()  # another cluster object: its own
    assert _kept_discriminating_run(*pairs[0], other) == discriminating_run(*pairs[0], other)


# the solvers' memory check through memory._memory_lean: (per_gpu, fits) alone when the
# estimate fits, the full estimate when not; what memory() answers

def test_memory_lean_is_memory():
    import inspect
    import warnings

    mem = __import__("scalemodel.memory", fromlist=["x"])
    assert list(mem._MEMORY_DEFAULTS) == list(inspect.signature(mem._memory).parameters)[2:-1]
    cases = [("llama-2-7b", 64, {"sharding": "zero3"}), ("llama-2-7b", 8, {}),
             ("llama-2-7b", 8, {"gpu": "a100-40gb"}),  # does not fit: the full estimate
             ("llama-3-8b", 16, {"sharding": "hybrid_shard", "gpus_per_node": 8,
                                 "loss": "fused", "accounting": "fsdp"}),
             ("bert", 8, {"gpu": "v100-16gb", "param_dtype": "fp16"}),
             ("llama-2-7b", 16, {"tp": 2, "sharding": "zero3", "offload": "optimizer"})]
    seen = set()
    for model, n, kw in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = sm.memory(model, n, **kw)
            got, spec = mem._memory_lean(model, n, **kw)
        seen.add(bool(ref.fits))
        assert spec == ref.gpu
        assert got.per_gpu == ref.per_gpu and got.fits is ref.fits
        if not ref.fits:
            assert repr(got) == repr(ref)
    assert seen == {True, False}
    with pytest.raises(TypeError):
        mem._memory_lean("llama-2-7b", 8, shardin="zero3")


def test_solver_memory_note_is_memory():
    import itertools

    from scalemodel.solvers import memory_check

    seen = set()
    for gpu, n, strategy in itertools.product((None, "a100-40gb", "h100-sxm"), (8, 64),
                                              ("zero3", None)):
        clear_caches()
        sc = Scenario.build("llama-2-7b", sharding=strategy)
        with warnings.catch_warnings():  # another GPU's memory: said (ModelWarning)
            warnings.simplefilter("ignore", sm.ModelWarning)
            per, fits, name, note = memory_check(sc, n, gpu)
        kw = {} if strategy is None else dict(param_dtype=sc.sharding.param_dtype,
                                              grad_dtype=sc.sharding.reduce_dtype)
        ref = sm.memory(sc.profile, n, sharding=strategy or "none",
                        gpu=gpu or sc.profile.provenance.get("gpu") or "h100-sxm", **kw)
        assert (per, fits, name) == (ref.per_gpu, ref.fits, ref.gpu.name)
        assert (note == "") is ref.fits
        seen.add(fits)
    assert seen == {True, False}


# _zero3_chains' short rows (Python floats): the breaks' order and the slopes' rise
# checked for every row at once (_holds_within), then of_convex_checked: each row's
# envelope as of_convex makes it, the Python-float representation included

@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=0, max_size=8), min_size=1, max_size=5),
       st.data())
def test_holds_within_is_all_of_the_first(rows, data):
    W = max(len(r) for r in rows)
    holds = np.ones((len(rows), W), dtype=bool)
    for i, r in enumerate(rows):
        holds[i, :len(r)] = r
    limit = np.array([data.draw(st.integers(-1, W + 1)) for _ in rows])
    got = sharding._holds_within(holds, limit)
    assert got.tolist() == [all(holds[i, :max(k, 0)]) for i, k in enumerate(limit)]


@settings(max_examples=200, deadline=None)
@given(st.lists(_CHAIN, min_size=1, max_size=6))
def test_of_convex_checked_is_of_convex(chains):
    c, m, br, L = _rows(chains)
    for r, n in enumerate(L):
        ci, mi, bi = c[r, :n + 2].tolist(), m[r, :n + 2].tolist(), br[r, :n].tolist()
        fine = all(a <= b for a, b in zip(bi, bi[1:])) and \
            all(a < b for a, b in zip(mi[1:], mi[2:]))
        if not fine:
            continue  # (the caller takes of_convex then)
        a, b = UpperEnvelope.of_convex_checked(ci, mi, bi), UpperEnvelope.of_convex(ci, mi, bi)
        assert (a._py is None) == (b._py is None)
        _same_env(a, b)


@pytest.mark.parametrize("model,strategy", [("gpt2", "zero3"), ("bert", "hybrid_shard"),
                                            ("llama-2-7b", "zero3")])
def test_zero3_chains_in_python_floats_are_of_convex(monkeypatch, model, strategy):
    clear_caches()
    sc = Scenario.build(model, sharding=strategy, fusion="module",
                        **({"gpus_per_node": 8} if strategy == "hybrid_shard" else {}))
    seen = []
    real = sharding._zero3_chains
    monkeypatch.setattr(sharding, "_PY_PIECES", 10**6)  # Python floats for every length
    monkeypatch.setattr(sharding, "_zero3_chains", lambda *a: seen.append(a) or real(*a))
    numbers = [(1.0, 0.0, 0.0, 0.0), (1.3, 0.0, 2e-3, 1e-4), (0.7, 0.0, 0.0, 5e-3),
               (1.0, 0.0, 0.0, 1.0), (2.5, 0.0, 1.0, 0.0)]
    zero3_envelopes(sc.profile, 64, numbers, sharding=sc.sharding, wrap=sc.fusion,
                    algorithm=sc.algorithm, options=sc.options)
    assert seen
    profile, fc, s, sigma, sync, cb = seen[0]
    # a row whose chain slopes tie (a step that adds nothing: of_convex's general case)
    import attrs
    tb_m = fc.comm_lines[3].copy()
    tb_m[1] = tb_m[2] * 1e-17
    fc2 = attrs.evolve(fc, comm_lines=(*fc.comm_lines[:3], tb_m))
    for args in seen + [(profile, fc2, s, sigma, sync, cb)]:
        got = real(*args)
        ref = _old_zero3_chains(*args)  # numpy rows: the values
        for a, b in zip(got, ref):
            _same_env(a, b)
        # the representation: of_convex of each row's lists, as before
        monkeypatch.setattr(UpperEnvelope, "of_convex_checked", UpperEnvelope.of_convex)
        for a, b in zip(got, real(*args)):
            assert (a._py is None) == (b._py is None)
            _same_env(a, b)
        monkeypatch.undo()
        monkeypatch.setattr(sharding, "_PY_PIECES", 10**6)


def test_carried_note_kept_per_cluster_and_profile():
    # the note that a fitted efficiency is carried to another model: kept per cluster
    # object and profile, as computed afresh (differs between the profiles asked)
    from scalemodel.efficiency import gpu_name_of, model_key
    from scalemodel.solvers import _carried_note, _carried_text

    p7 = sm.load_profile("llama-2-7b")
    eff = {"value": 0.5, "interval": [0.4, 0.6], "gpu": [gpu_name_of(p7)],
           "profiles": [model_key(p7)]}
    cl = sm.ClusterProfile(extra={"efficiency": eff}, intervals={"efficiency": (0.4, 0.6)},
                           provenance={"source": "test"})
    models = ["llama-2-7b", "llama-2-13b", "bert", "llama-2-13b", "llama-2-7b"]
    fresh = [_carried_text(cl, sm.load_profile(m)) for m in models]
    assert fresh[0] == "" and "carried to" in fresh[1] and fresh[2] == ""
    for _ in range(2):
        assert [_carried_note(cl, m) for m in models] == fresh
    assert _carried_note(cl, None) == ""
    other = sm.ClusterProfile(provenance={"source": "test"})  # its own: no efficiency
    assert _carried_note(other, "llama-2-13b") == ""


def test_codec_cost_zero_without_the_bytes():
    # codec_cost 0 on a WorkloadProfile: returned without its gradient bytes (finite, at
    # most MAX_GRADIENT_BYTES, so 0 x them is within a day), as the long path returns it
    import types

    from scalemodel.model import _codec_cost
    from scalemodel.profiles import MAX_GRADIENT_BYTES

    big = sm.WorkloadProfile(name="big", tensor_bytes=np.array([MAX_GRADIENT_BYTES]),
                             tensor_ready=np.array([0.1]), forward_time=0.1,
                             backward_time=0.2, update_time=0.0)
    for profile in (sm.load_profile("llama-2-7b"), big):
        duck = types.SimpleNamespace(total_bytes=profile.total_bytes)  # the long path
        for c in (0.0, -0.0, 0, np.float64(0.0), 1e-12, "0"):
            try:
                ref = _codec_cost(c, duck)
            except sm.ScalemodelError as exc:
                ref = repr(exc)
            try:
                got = _codec_cost(c, profile)
            except sm.ScalemodelError as exc:
                got = repr(exc)
            assert got == ref and type(got) is type(ref)
            if got == 0.0:
                assert math.copysign(1.0, got) == math.copysign(1.0, ref)
    with pytest.raises(sm.InvalidParameterError, match="codec_cost"):
        _codec_cost(1.0, big)  # (the check itself is still made when it costs time)


def test_explanation_text_kept_per_alternative():
    # an interval's words for an explanation: kept per alternative dict, made again when
    # its values changed (as computed afresh)
    from scalemodel import intervals

    cl = _zero3_fit()
    alts = list(cl.alternatives)
    fresh = []
    for alt in alts:
        intervals._EXPLAINED.clear()
        fresh.append(intervals._explanation(alt))
    assert len(set(fresh)) == len(alts)
    for _ in range(2):
        assert [intervals._explanation(a) for a in alts] == fresh
    changed = {"values": dict(alts[0]["values"])}
    first = intervals._explanation(changed)
    changed["values"]["ceiling"] = 1e9  # the same dict, another value: its own words
    ref = intervals._explanation({"values": dict(changed["values"])})  # (another dict)
    assert intervals._explanation(changed) == ref != first
    assert intervals._explanation(None) == "the fit"
    assert intervals._explanation({"values": {}}) == "the ideal model"


@settings(max_examples=150, deadline=None)
@given(st.lists(_CHAIN, min_size=1, max_size=6))
def test_rows_on_top_are_of_convex_with_its_dtypes(chains):
    # _checked_rows' rows on top from x = 0: views of one arange and of the rows, the
    # values and dtypes of of_convex's arrays for that row alone
    c, m, br, L = _rows(chains)
    for r, env in enumerate(UpperEnvelope._rising_rows(c, m, br, L)):
        ref = UpperEnvelope.of_convex(c[r, :L[r] + 2], m[r, :L[r] + 2], br[r, :L[r]])
        _same_env(env, ref)
        assert env.index.dtype == ref.index.dtype
