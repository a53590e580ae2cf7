"""The shortcuts that make a first plan's compressor evaluations fast change no answer
(issue 18 item 7, issue 20 item 10): a searched knob's two bounds evaluated in one round,
a compressor asked twice in a round evaluated once, the lines of a batch made without
their zero fixed costs, the buckets with a compressed tensor told from their sums, the
uncompressed wire bits summed once, and in the compressors: the knob set without ``attrs.evolve``, the
converters' common case, PowerSGD's phases written in place and its matrices found by
identity, the kernel calls per tensor made once. Each is compared with the general code,
bit for bit."""

import math

import attrs
import numpy as np
import pytest

import scalemodel as sm
import scalemodel.compressors as cm
import scalemodel.planner as pl
from scalemodel.compressors import (IMPLEMENTATIONS, IntQuantizer, PowerSGD, RandomK, TopK,
                                    get_compressor)
from scalemodel.exceptions import ScalemodelError
from scalemodel.model import Scenario, clear_caches
from scalemodel.overlap import _lines_stacked
from test_plan_speed_paths import _cluster  # a calibrated cluster, with or without intervals

NODE = dict(gpus_per_node=8, nics_per_node=8)

# plans over models, line rates, worker counts, tensor and pipeline parallelism,
# implementations, fusions, sharding, a fixed setting and fitted clusters
_PLANS = [
    (("llama-2-13b", 10e9), dict(n=256, tp=2, **NODE)),
    (("llama-2-13b", 100e9), dict(n=256, tp=2, **NODE)),
    (("llama-2-13b", 400e9), dict(n=256, tp=2, **NODE)),
    (("llama-2-13b", 100e9), dict(n=256, tp=2, pp=4, microbatches=8, **NODE)),
    (("llama-2-70b", 25e9), dict(n=1024, tp=8, pp=4, microbatches=32, **NODE)),
    (("llama-2-7b", 10e9), dict(n=64, tp=2, activation_checkpointing="full",
                                offload="optimizer", **NODE)),
    (("bert", 10e9), dict(n=64)),
    (("bert", 1e9), dict(n=64, gpus_per_node=8)),
    (("resnet50", 10e9), dict(n=8)),
    (("resnet50", 25e9), dict(n=32, fusion="mg-wfbp")),
    (("gpt2", 25e9), dict(n=32, gpus_per_node=8, nics_per_node=1)),
    (("resnet50", 3e9), dict(n=128, implementation="grace-tf")),
    (("bert", 10e9), dict(n=64, implementation="deepspeed")),
    (("vgg16", 25e9), dict(n=32, target=0.8, algorithm="tree")),
    (("gpt2", 10e9), dict(n=64, sharding="zero2")),
    (("bert", 10e9), dict(n=64, compressors=["topk:0.01", "powersgd", "randomk", "int8",
                                             "none", "topk"])),
]


_PLANS += [(("bert", 10e9), dict(n=64, cluster=_cluster(False))),
           (("llama-2-13b", 25e9), dict(n=64, cluster=_cluster(False))),
           (("bert", 10e9), dict(n=64, cluster=_cluster(True)))]


def _fields(plan):
    return repr(plan), str(plan), plan.ideal_ratio, plan.message


def _old_lines(ready, latency, overhead, bits, backward_time):
    lines = _lines_stacked(np.broadcast_to(ready, latency.shape), latency, overhead, bits,
                           backward_time)
    return lines, np.array([one.intercept for one in lines])


def _general(m):
    """Every shortcut of this file in the planner off."""
    m.setattr(pl, "_BOTH_BOUNDS", False)
    m.setattr(pl, "_lines_of_rows", _old_lines)
    m.setattr(pl, "_extremes", lambda intercepts: [None] * len(intercepts))
    m.setattr(pl, "_SUMS_TELL_COMPRESSED", False)
    m.setattr(pl, "_raw_bits", lambda sc, n, raw: float(raw.bits.sum()))


@pytest.mark.parametrize("args, kw", _PLANS)
def test_plans_equal_the_general_codes(args, kw, monkeypatch):
    """Each plan, asked first (caches emptied) and again, equals the plan of the code
    without these shortcuts, field by field."""
    clear_caches()
    fast = [_fields(sm.plan_compression(*args, **kw)) for _ in range(2)]
    with monkeypatch.context() as m:
        _general(m)
        clear_caches()
        slow = [_fields(sm.plan_compression(*args, **kw)) for _ in range(2)]
    assert fast == slow


@pytest.mark.parametrize("flag, off", [("_BOTH_BOUNDS", False),
                                       ("_SUMS_TELL_COMPRESSED", False)])
def test_each_switch_reaches_the_plan(flag, off, monkeypatch):
    """The switches the plan check turns off are read by a plan (so that the plans
    compared differ in them): each changes what is evaluated, or how, on a first
    tensor-parallel plan."""
    seen = []
    if flag == "_BOTH_BOUNDS":  # the batches evaluated
        real = pl._batch_evaluations
        monkeypatch.setattr(pl, "_batch_evaluations",
                            lambda *a: seen.append(len(a[3])) or real(*a))
    else:
        real = pl._compressed_tensors
        monkeypatch.setattr(pl, "_compressed_tensors", lambda *a: seen.append(1) or real(*a))
    clear_caches()
    sm.plan_compression("llama-2-13b", 100e9, n=256, tp=2, **NODE)
    on = list(seen)
    seen.clear()
    monkeypatch.setattr(pl, flag, off)
    clear_caches()
    sm.plan_compression("llama-2-13b", 100e9, n=256, tp=2, **NODE)
    assert on != seen
    if flag == "_BOTH_BOUNDS":  # one batch fewer, the bounds in the first
        assert len(on) == len(seen) - 1 and on[0] == seen[0] + seen[1] and on[1:] == seen[2:]


def test_both_bounds_are_asked_in_the_first_round():
    """The first round holds each searched knob's lower bound (without views), so the
    rows find it in the cache; a fixed setting and a knob-less compressor ask one."""
    clear_caches()
    rounds = []
    real = pl._evaluate_round
    try:
        pl._evaluate_round = lambda *a: rounds.append(list(a[4])) or real(*a)
        sm.plan_compression("bert", 10e9, n=64, compressors=["topk:0.01", "powersgd", "int8",
                                                             "none"])
    finally:
        pl._evaluate_round = real
    first = {(c.name, c.setting) for c in rounds[0]}
    assert ("powersgd", 1) in first and ("int8", 1) in first and ("int8", 8) in first
    assert ("topk", 0.01) in first and not any(c.name == "topk" and c.setting != 0.01
                                               for c in rounds[0])


def test_a_compressor_asked_twice_in_a_round_is_evaluated_once(monkeypatch):
    """The first round asks for "none" twice (the uncompressed answer and its row): one
    evaluation, found under its key by both."""
    made = []
    real = pl._batch_evaluations
    monkeypatch.setattr(pl, "_batch_evaluations",
                        lambda sc, n, codec, comps, *a: made.append(list(comps))
                        or real(sc, n, codec, comps, *a))
    clear_caches()
    sc = Scenario.build("bert")
    codec = pl._codec(sc, None, IMPLEMENTATIONS["pytorch"])
    comps = [get_compressor(c) for c in ("none", "fp16", "none", "topk:0.01", "fp16")]
    pl._evaluate_many(sc, comps, 64, codec)
    assert [c.name for c in made[0]] == ["none", "fp16", "topk"]
    for c in comps:
        assert sc._cache[("evaluate", c, 64, id(codec))][1] is pl._evaluate(sc, c, 64, codec)


@pytest.mark.parametrize("m", [1, 2, 7])
def test_lines_of_rows_are_the_stacked_lines(m):
    """:func:`pl._lines_of_rows` equals ``overlap._lines_stacked`` of the ready times
    broadcast, every field bit for bit."""
    rng = np.random.default_rng(m)
    for k in (1, 5, 300):
        ready = np.cumsum(rng.random(k))
        lat, ovh = rng.random((m, k)) * 1e-4, rng.random((m, k)) * 1e-3
        bits = rng.random((m, k)) * 1e9
        bits[:, rng.random(k) < 0.2] = 0.0
        got, intercepts = pl._lines_of_rows(ready, lat, ovh, bits, 0.7)
        want = _lines_stacked(np.broadcast_to(ready, lat.shape), lat, ovh, bits, 0.7)
        assert np.array_equal(intercepts, [w.intercept for w in want])
        for g, w in zip(got, want, strict=True):
            for f in attrs.fields(type(w)):
                assert np.array_equal(getattr(g, f.name), getattr(w, f.name)), f.name
                assert getattr(g, f.name).dtype == getattr(w, f.name).dtype


@pytest.mark.parametrize("impl", ["pytorch", "grace-tf", "deepspeed"])
def test_compressed_buckets_from_their_sums_are_those_of_their_tensors(impl, monkeypatch):
    """The kernels per bucket charged where a bucket's sums tell it holds a compressed
    tensor equal those charged from each tensor; a negative time (a compressor of one's
    own) takes the tensors' path."""
    sc = Scenario.build("resnet50")
    codec = pl._codec(sc, None, IMPLEMENTATIONS[impl])
    e, numel = pl._elements(sc)
    starts = sc.buckets.starts
    comps = [pl._as_implemented(get_compressor(c), IMPLEMENTATIONS[impl], False)
             for c in ("fp16", "int8", "powersgd:1", "powersgd:300", "topk")]
    comps = [c for c in comps if not c.after_backward]
    tcs = [c._costs(numel, sc.profile.tensor_shapes, 8, codec[c.family], e) for c in comps]
    neg = attrs.evolve(tcs[0], encode_time=-tcs[0].encode_time)
    for cases in (tcs, tcs + [neg]):
        ovh = np.zeros((len(cases), len(starts)))
        cs = (comps + comps[:1])[:len(cases)]
        fast = pl._batch_codec(cs, codec, cases, starts, ovh)
        with monkeypatch.context() as m:
            m.setattr(pl, "_SUMS_TELL_COMPRESSED", False)
            slow = pl._batch_codec(cs, codec, cases, starts, ovh)
        assert np.array_equal(fast[1], slow[1])
        assert [fast[0](i) for i in range(len(cases))] == [slow[0](i)
                                                           for i in range(len(cases))]


_VALUES = {"rank": [1, 2, 7, 2251, 3.0, 2.5, True, np.int64(5), 0, -1, "4", None],
           "density": [1e-6, 0.01, 1.0, 1, 0.5, np.float64(0.2), np.float32(0.5), 0.0, 1.5,
                       -0.1, math.nan, math.inf, True, "0.1", None],
           "bits": [1, 8, 16, 4.0, np.int32(3), 0, 17, 2.5, True, "8", None]}


@pytest.mark.parametrize("comp", [PowerSGD(), PowerSGD(rank=3, min_compression_rate=0,
                                                       matrix_view="tensorflow"),
                                  TopK(), TopK(density=0.3, index_bytes=8, dense_decode=True,
                                               codec_stream="compute"),
                                  RandomK(shared_seed=True), IntQuantizer(),
                                  IntQuantizer(chunk=512, packed=False, scale_bytes=4),
                                  IntQuantizer(after_backward=True)])
def test_with_setting_is_attrs_evolve(comp):
    """The knob set directly (and its converter's common case) gives what
    ``attrs.evolve`` gives: an equal object, the same hash, repr and attribute types, or
    the same error."""
    for value in _VALUES[comp.knob]:
        try:
            want, werr = attrs.evolve(comp, **{comp.knob: value}), None
        except Exception as exc:  # noqa: BLE001
            want, werr = None, (type(exc), str(exc))
        try:
            got, gerr = comp.with_setting(value), None
        except Exception as exc:  # noqa: BLE001
            got, gerr = None, (type(exc), str(exc))
        assert gerr == werr, value
        if want is None:
            assert issubclass(werr[0], ScalemodelError), value
            continue
        assert type(got) is type(want) and got == want and hash(got) == hash(want)
        assert repr(got) == repr(want) and got.describe() == want.describe()
        for f in attrs.fields(type(want)):
            assert type(getattr(got, f.name)) is type(getattr(want, f.name)), f.name
        assert got.with_setting(comp.setting) == comp


def test_a_compressor_class_of_ones_own_is_evolved():
    """A subclass (its own fields, converters or checks) goes through ``attrs.evolve``:
    its ``__attrs_post_init__`` runs on the new knob."""
    @attrs.frozen
    class Picky(TopK):
        def __attrs_post_init__(self):
            if self.density > 0.5:
                raise ValueError("too dense")

    with pytest.raises(ValueError, match="too dense"):
        Picky(density=0.1).with_setting(0.9)
    assert Picky(density=0.1).with_setting(0.2) == Picky(density=0.2)


@pytest.mark.parametrize("model", ["resnet50", "bert", "vgg16", "llama-2-13b"])
def test_powersgd_costs_are_the_stacked_phases(model):
    """PowerSGD's tensor costs (the phases written into one array, the matrices found by
    the profile's identity) equal those of its phases stacked, at every rank, view and
    rate; the kernel calls of a simple compressor are ``np.full``'s and read-only."""
    sc = Scenario.build(model)
    e, numel = pl._elements(sc)
    shapes = sc.profile.tensor_shapes
    c = cm.DEFAULT_CODEC_COSTS["powersgd"]
    for comp in (PowerSGD(rank=1), PowerSGD(rank=7), PowerSGD(rank=10**6),
                 PowerSGD(rank=4, min_compression_rate=0, matrix_view="tensorflow")):
        for copy in (numel, numel.copy()):  # (a writeable copy: found by its bytes)
            tc = comp._costs(copy, shapes, 8, c, e)
            rows, cols = comp._matrices(copy, shapes)
            k = np.minimum(float(comp.rank), np.minimum(rows, cols))
            matrix = np.array([len(s) >= 2 for s in shapes])
            comp_ = matrix & (rows * cols >= (rows + cols) * k * comp.min_compression_rate)
            want = np.stack([np.where(comp_, 0.0, copy * e), np.where(comp_, rows * k * e, 0.0),
                             np.where(comp_, cols * k * e, 0.0)], axis=1)
            assert np.array_equal(tc.phase_bytes, want) and tc.phase_bytes.flags.c_contiguous
    for name in ("fp16", "topk", "signsgd"):
        comp = get_compressor(name)
        tc = comp._costs(numel, shapes, 8, cm.DEFAULT_CODEC_COSTS[comp.family], e)
        assert np.array_equal(tc.calls, np.full(numel.shape, float(comp.calls_per_tensor)))
        assert not tc.calls.flags.writeable


def test_the_uncompressed_wire_bits_are_summed_once_per_scenario():
    """:func:`pl._raw_bits` is the sum of the uncompressed all-reduce's bits, kept per
    scenario and ``n`` for the cost it was summed from."""
    sc = Scenario.build("bert")
    raw = pl._raw_cost(sc, 16)
    assert pl._raw_bits(sc, 16, raw) == float(raw.bits.sum())
    other = attrs.evolve(raw, bits=raw.bits * 2)
    assert pl._raw_bits(sc, 16, other) == float(other.bits.sum())


@pytest.mark.parametrize("model, kw", [("llama-2-13b", dict(tp=2, **NODE)), ("bert", {}),
                                       ("gpt2", dict(algorithm="nccl", **NODE))])
def test_the_top_line_with_a_batchs_extremes_is_its_own(model, kw):
    """:func:`pl._top_line` of an evaluation made in a batch (its intercepts' extremes
    found with the batch's) equals ``_top_line`` of the same lines without them, at many
    points, value and line; the extremes are the intercepts' own."""
    comps = [get_compressor(c) for c in ("none", "fp16", "int8", "signsgd", "topk:0.001",
                                         "randomk:0.05", "powersgd:4", "powersgd:64")]
    clear_caches()
    sc = Scenario.build(model, **kw)
    codec = pl._codec(sc, None, IMPLEMENTATIONS["pytorch"])
    pl._evaluate_many(sc, comps, 16, codec)
    evs = [pl._evaluate(sc, c, 16, codec) for c in comps]
    assert all(ev._cext is not None for ev in evs)
    for ev in evs:
        c = ev.lines.intercept
        assert ev._cext == (float(c.max()), float(c.min()))
        bare = pl._Evaluated(lines=ev.lines, n_collectives=ev.n_collectives,
                             collective=ev.collective, n=ev.n, xmap=ev.xmap)
        for x in (0.0, 1e-12, 1e-11, 1e-10, 3e-9, 1e-6):
            for e in (ev, bare):
                object.__setattr__(e, "_top", None)
                object.__setattr__(e, "_env", None)
            assert pl._top_line(ev, x) == pl._top_line(bare, x)
            assert ev._top == bare._top
