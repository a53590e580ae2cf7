"""What makes a first plan_compression question fast changes no answer (issue 20 item 10):
evaluations keyed by what they depend on (two knob values with the same tensor costs share
one), the collective cost called past its checks, the phases of one algorithm costed in one
call, PowerSGD's rank-free matrix parts kept per profile, the envelope built only when
needed (a search reads the highest line at one point), the planner's lines from the
scenario's part kept per n, the rows run in lockstep with each round's compressors
evaluated at once (on a cluster too, and on each view of a fitted cluster's interval, the
uncompressed evaluation in the first round), and the knob search's first crossing in
Python floats (on arrays for many lines). Each shortcut is checked against the general
code, bit for bit."""

import math

import numpy as np
import pytest

import scalemodel as sm
import scalemodel.planner as pl
from test_interval_speedups import _bare, _fitted
from scalemodel.collectives import (ALGORITHMS, CollectiveCost, CollectiveOptions,
                                    collective_cost)
from scalemodel.compressors import (ALLREDUCE, DEFAULT_CODEC_COSTS, IMPLEMENTATIONS, PowerSGD,
                                    get_compressor)
from scalemodel.model import Scenario, clear_caches
from scalemodel.overlap import UpperEnvelope


def _general(monkeypatch):
    """Every shortcut of this file off: the code as it was before them."""
    monkeypatch.setattr(pl, "_same_costs_key", lambda *a: None)
    monkeypatch.setattr(pl, "_shared_channel", lambda *a: None)
    monkeypatch.setattr(pl, "_raw_cost", lambda sc, n: collective_cost(  # each its own
        sc.algorithm, sc.buckets.nbytes, n, reduction=sc.profile.reduction,
        options=sc.options))
    monkeypatch.setattr(pl, "_TOP_GAP", math.inf)
    monkeypatch.setattr(pl, "_MANY_LINES", math.inf)  # the first crossing in Python floats
    monkeypatch.setattr(pl, "_collective", lambda alg, nb, n, red, opt: collective_cost(
        alg, nb, n, reduction=red, options=opt))

    def one_by_one(sc, n, phases):
        return [pl.alltoall_cost(e, n, sc.options) if alg == "alltoall" else
                collective_cost(alg, e, n, reduction=sc.profile.reduction, options=sc.options)
                for alg, _, e in phases]

    monkeypatch.setattr(pl, "_phase_collectives", one_by_one)
    monkeypatch.setattr(pl, "_one_algorithm_costs", lambda sc, n, tc, starts: (
        _phase_costs_reference(sc, PowerSGD(), n, tc, starts)))  # (not per tensor)
    monkeypatch.setattr(pl, "_make_lines", _make_lines_reference)
    monkeypatch.setattr(pl, "_evaluate_many", lambda *a: None)  # each row alone
    built = Scenario.make_lines  # the envelope built with the lines, as before

    def make_lines(self, *args, envelope=True, **kw):
        return built(self, *args, **kw)

    monkeypatch.setattr(Scenario, "make_lines", make_lines)


def _make_lines_reference(sc, n, ready, lat, ovh, bits, intra, intra_bw, delay, extra):
    """The planner's lines as it made them before :func:`pl._make_lines`: by
    ``Scenario.make_lines``, the wire map as Python floats."""
    cost = CollectiveCost(latency=lat, overhead=ovh, bits=bits, intra_bits=intra,
                          intra_bw=intra_bw)
    lines, _, xmap = sc.make_lines(n, ready, cost, overhead=ovh, delay=delay,
                                   backward_extra=extra)
    return lines, (float(xmap[0]), float(xmap[1]))

    def ideal(model, sc, n, bw, target, u, memory_args, **kw):  # min_compression, whole
        return sm.min_compression(model, bw, n=n, target=target, utilization=u, **kw)

    monkeypatch.setattr(pl, "_ideal_compression", ideal)


NODE = dict(gpus_per_node=8, nics_per_node=8)
QUESTIONS = [
    ("bert", 10e9, dict(n=64)),
    ("resnet50", 10e9, dict(n=8)),
    ("vgg16", 25e9, dict(n=32, target=0.8, algorithm="tree")),
    ("resnet50", 3e9, dict(n=128, implementation="grace-tf")),
    ("bert", 40e9, dict(n=16, implementation="deepspeed", fusion="horovod")),
    ("gpt2", 10e9, dict(n=256, compressors=["powersgd", "topk:0.01"], algorithm="nccl",
                        gpus_per_node=8)),
    ("llama-2-7b", 100e9, dict(n=64, tp=2, **NODE)),
    ("llama-2-7b", 50e9, dict(n=128, tp=2, pp=4, microbatches=8,
                              activation_checkpointing="full", **NODE)),
    ("llama-3-8b", 200e9, dict(n=64, sharding="zero1", **NODE)),
    ("llama-2-13b", 100e9, dict(n=256, tp=2, gpu="h100-sxm", **NODE)),
    ("llama-2-7b", 100e9, dict(n=64, tp=2, loss="fused", target=0.99, **NODE)),
    ("vgg16", 1e9, dict(n=1024, target=0.99, compressors=["fp16", "int8"])),  # none reaches
    ("bert", 1e9, dict(n=1024, target=0.999, gpus_per_node=8)),  # nor ideal compression
    ("resnet50", 400e9, dict(n=4)),  # no compression needed
    ("resnet50", 10e9, dict(n=8, cluster="FITTED")),  # corners and alternatives
    ("bert", 10e9, dict(n=64, cluster="FITTED", fusion="horovod", target=0.8)),
    ("vgg16", 25e9, dict(n=16, cluster="FITTED", implementation="grace-torch")),
    ("gpt2", 10e9, dict(n=64, cluster="PLAIN", algorithm="nccl")),  # no interval
    ("resnet50", 10e9, dict(n=16, cluster="HOST")),  # the wrapper's host delays
    ("bert", 10e9, dict(n=64, cluster="HOST", fusion="horovod", target=0.8)),
    ("resnet50", 10e9, dict(n=8, cluster="PLAIN", compressors=["topk", "topk:0.01",
                                                               "powersgd", "fp16"])),
    ("llama-2-7b", 100e9, dict(n=64, tp=2, activation_checkpointing="full",
                               offload="optimizer", **NODE)),
    ("gpt2", 10e9, dict(n=64, sharding="zero3")),
]


def _answers():
    out = []
    for model, bw, kw in QUESTIONS:
        if kw.get("cluster") == "FITTED":
            kw = dict(kw, cluster=_fitted())
        elif kw.get("cluster") == "PLAIN":
            kw = dict(kw, cluster=_bare(_fitted()))
        elif kw.get("cluster") == "HOST":
            import attrs
            from scalemodel.hostcosts import HostCosts
            kw = dict(kw, cluster=attrs.evolve(_fitted(), host=HostCosts(
                per_tensor=60e-6, per_bucket=80e-6, device_time=1e-3,
                intervals={"per_tensor": (40e-6, 90e-6)})))
        clear_caches()
        plan = sm.plan_compression(model, bw, **kw)
        out.append((repr(plan), str(plan), plan.snippet()))
        comp = "fp16" if kw.get("sharding") or kw.get("implementation") == "deepspeed" \
            else "topk:0.01"
        job = {k: v for k, v in kw.items()
               if k not in ("target", "compressors", "gpu", "loss")}
        clear_caches()
        out.append(repr(sm.breakeven_bandwidth(model, comp, **job)))
        clear_caches()
        out.append(repr(sm.compressed_scaling_factor(model, comp, bw=[bw / 4, bw, 4 * bw],
                                                     **job)))
    return out


def test_plans_are_those_of_the_general_code(monkeypatch):
    fast = _answers()
    with monkeypatch.context() as m:
        _general(m)
        general = _answers()
    assert len(fast) == len(general)
    for a, b in zip(fast, general):
        assert a == b


def test_the_general_code_is_what_the_check_compares_with(monkeypatch):
    """The switch above reaches the shortcuts: with them off, an evaluation is computed
    again for a density whose tensor costs equal another's."""
    sc = Scenario.build("bert")
    codec = pl._codec(sc, None, IMPLEMENTATIONS["pytorch"])
    a = pl._evaluate(sc, get_compressor("topk").with_setting(1e-6), 64, codec)
    b = pl._evaluate(sc, get_compressor("topk").with_setting(math.exp(math.log(1e-6))), 64,
                     codec)
    assert a is b  # the same tensor costs: one evaluation
    with monkeypatch.context() as m:
        _general(m)
        clear_caches()
        sc = Scenario.build("bert")
        a = pl._evaluate(sc, get_compressor("topk").with_setting(1e-6), 64, codec)
        b = pl._evaluate(sc, get_compressor("topk").with_setting(1.0000000000000004e-06),
                         64, codec)
        assert a is not b
        assert np.array_equal(a.lines.intercept, b.lines.intercept)


@pytest.mark.parametrize("attr, value", [("per_tensor", True), ("codec_stream", "compute")])
def test_the_key_tells_apart_what_the_evaluation_reads(attr, value):
    sc = Scenario.build("resnet50")
    codec = pl._codec(sc, None, IMPLEMENTATIONS["pytorch"])
    base = get_compressor("fp16")
    other = base.__class__(dtype="fp16", **{attr: value})
    e, numel = pl._elements(sc)
    keys = [pl._same_costs_key(c, c._costs(numel, sc.profile.tensor_shapes, 8,
                                           codec[c.family], e), 8, codec)
            for c in (base, other)]
    assert None not in keys and keys[0] != keys[1]
    evs = [pl._evaluate(sc, c, 8, codec) for c in (base, other)]
    assert evs[0] is not evs[1]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("n", [1, 2, 16, 96])
def test_the_collective_past_its_checks_is_collective_cost(algorithm, n):
    rng = np.random.default_rng(n)
    sizes = np.concatenate(([0.0, 1.0, 4096.0], rng.uniform(0, 3e8, 20)))
    for opts in (CollectiveOptions(), Scenario.build("resnet50", gpus_per_node=8).options):
        red = Scenario.build("resnet50").profile.reduction
        want = collective_cost(algorithm, sizes, n, reduction=red, options=opts)
        got = pl._collective(algorithm, sizes, n, red, opts)
        for f in ("latency", "overhead", "bits", "intra_bits"):
            assert np.array_equal(np.broadcast_to(getattr(got, f), sizes.shape),
                                  np.broadcast_to(getattr(want, f), sizes.shape)), f
        assert got.intra_bw == want.intra_bw
    with pytest.raises(sm.InvalidParameterError):  # bad bytes still go to the checks
        pl._collective(algorithm, np.array([1.0, -1.0]), n, None, None)


def _phase_costs_reference(sc, comp, n, tc, starts):
    """_phase_costs as it was: one collective per phase, np.where on every part."""
    p = sc.profile
    k = len(starts)
    lat, ovh, bits, intra = np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k)
    intra_bw, ncoll, main, biggest = None, 0, "", -1.0
    for j, coll in enumerate(tc.phase_collectives):
        nbytes = np.add.reduceat(tc.phase_bytes[:, j], starts)
        alg = sc.algorithm if coll == ALLREDUCE else coll
        each = tc.phase_bytes[:, j] if comp.per_tensor else nbytes
        if alg == "alltoall":
            cost = pl.alltoall_cost(each, n, sc.options)
        else:
            cost = collective_cost(alg, each, n, reduction=p.reduction, options=sc.options)
        used = each > 0

        def add(part):
            part = np.where(used, part, 0.0)
            return np.add.reduceat(part, starts) if comp.per_tensor else part

        lat += add(cost.latency)
        ovh += add(cost.overhead)
        bits += add(cost.bits)
        intra += add(cost.intra_bits)
        intra_bw = cost.intra_bw
        ncoll += int(used.sum())
        if nbytes.sum() > biggest:
            biggest, main = float(nbytes.sum()), alg
    return lat, ovh, bits, intra, intra_bw, ncoll, main


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nccl", "nccl-2.4"])
@pytest.mark.parametrize("impl", ["pytorch", "grace-tf", "deepspeed"])
def test_phase_costs_are_those_of_one_collective_per_phase(algorithm, impl):
    sc = Scenario.build("resnet50", algorithm=algorithm, gpus_per_node=8)
    codec = pl._codec(sc, None, IMPLEMENTATIONS[impl])
    e, numel = pl._elements(sc)
    names = [c for c in ("powersgd:1", "powersgd:8", "powersgd:300", "int8", "signsgd",
                         "topk:0.01", "randomk:0.1", "fp16", "none")
             if c.split(":")[0] in IMPLEMENTATIONS[impl].families or impl == "pytorch"]
    for name in names:
        comp = pl._as_implemented(get_compressor(name), IMPLEMENTATIONS[impl], True) \
            if name.split(":")[0] in IMPLEMENTATIONS[impl].families else get_compressor(name)
        for n in (2, 64):
            tc = comp._costs(numel, sc.profile.tensor_shapes, n, codec[comp.family], e)
            got = pl._phase_costs(sc, comp, n, tc, sc.buckets.starts)
            want = _phase_costs_reference(sc, comp, n, tc, sc.buckets.starts)
            for g, w in zip(got, want):
                if isinstance(w, np.ndarray):
                    assert np.array_equal(g, w), (name, n)
                else:
                    assert g == w, (name, n)


@pytest.mark.parametrize("model", ["resnet50", "bert", "vgg16"])
@pytest.mark.parametrize("view", ["pytorch", "tensorflow"])
def test_powersgd_costs_with_kept_matrix_parts_are_the_formula(model, view):
    p = sm.load_profile(model)
    e = 4
    numel = np.round(p.tensor_bytes / e)
    c = DEFAULT_CODEC_COSTS["powersgd"]
    for shapes in (p.tensor_shapes, None):
        for rank, rate in ((1, 2.0), (4, 2.0), (37, 2.0), (500, 2.0), (8, 0.0)):
            comp = PowerSGD(rank=rank, min_compression_rate=rate, matrix_view=view)
            got = comp._costs(numel, shapes, 16, c, e)
            rows, cols = comp._matrices(numel, shapes)
            matrix = (np.array([len(sh) >= 2 for sh in shapes]) if shapes is not None
                      else np.minimum(rows, cols) > 1)
            k = np.minimum(float(rank), np.minimum(rows, cols))
            cmp = matrix & (rows * cols >= (rows + cols) * k * rate)
            assert np.array_equal(got.phase_bytes, np.stack(
                [np.where(cmp, 0.0, numel * e), np.where(cmp, rows * k * e, 0.0),
                 np.where(cmp, cols * k * e, 0.0)], axis=1))
            assert np.array_equal(got.encode_time, np.where(
                cmp, numel * (c.encode + c.encode_per_rank * k), 0.0))
            assert np.array_equal(got.decode_time, np.where(
                cmp, numel * (c.decode + c.decode_per_rank * k), 0.0))
            assert np.array_equal(got.calls, np.where(cmp, 6.0, 0.0))


class _Lines:
    def __init__(self, c, m):
        self.intercept, self.slope = np.asarray(c, float), np.asarray(m, float)


def _random_lines(rng, k):
    c = np.sort(rng.uniform(0.01, 1.0, k))[::-1]
    m = np.sort(rng.uniform(0.0, 3e8, k))
    m[0] = 0.0
    return c, m


@pytest.mark.parametrize("k", [1, 2, 5, 15, 33, 64, 163, 400])
def test_the_highest_line_at_a_point_is_the_envelope_there(k):
    rng = np.random.default_rng(k)
    fast = 0
    for trial in range(60):
        c, m = _random_lines(rng, k)
        if trial % 5 == 0 and k > 2:  # duplicated lines and exact ties
            c[1], m[1] = c[2], m[2]
        ev = pl._Evaluated(lines=_Lines(c, m), n_collectives=0, collective="ring")
        env = UpperEnvelope(c, m)
        xs = list(rng.uniform(0, 3e-9, 20)) + [0.0, float(env.breaks[0])
                                               if len(env.breaks) else 1e-9]
        for x in xs:
            x = float(x)
            value, j = pl._top_line(ev, x)
            assert value == env(x) and type(value) is np.float64
            assert j == int(env.argmax(x))
            fast += ev._env is None
    assert fast > 0  # the shortcut answered some of them


def test_the_highest_line_is_kept_for_the_same_point_only():
    c, m = np.array([1.0, 0.5, 0.1]), np.array([0.0, 1e9, 5e9])
    ev = pl._Evaluated(lines=_Lines(c, m), n_collectives=0, collective="ring")
    env = UpperEnvelope(c, m)
    for x in (1e-10, 1e-10):  # the same point: the line kept
        value, j = pl._top_line(ev, x)
        assert value == env(x) and j == int(env.argmax(x)) and ev._top[0] == x
        assert ev._env is None
    for x in (6e-10, 1e-10, 3e-9, 3e-9):  # another point: the envelope from then on
        value, j = pl._top_line(ev, x)
        assert value == env(x) and j == int(env.argmax(x)) and ev._env is not None


def test_a_near_tie_is_left_to_the_envelope():
    c = np.array([1.0, 1.0 - 1e-13, 0.5])
    m = np.array([0.0, 1e-3, 2e8])
    ev = pl._Evaluated(lines=_Lines(c, m), n_collectives=0, collective="ring")
    x = 1e-10 * 0.999
    value, j = pl._top_line(ev, x)
    assert ev._env is not None  # built: the two top lines are too close
    env = UpperEnvelope(c, m)
    assert value == env(x) and j == int(env.argmax(x))


@pytest.mark.parametrize("name", ["none", "topk:0.01", "powersgd:4", "signsgd"])
def test_the_envelope_built_when_read_is_the_one_made_with_the_lines(name, monkeypatch):
    sc = Scenario.build("resnet50", gpus_per_node=8)
    codec = pl._codec(sc, None, IMPLEMENTATIONS["pytorch"])
    ev = pl._evaluate_uncached(sc, get_compressor(name), 32, codec)
    assert ev._env is None
    with monkeypatch.context() as m:
        _general(m)
        made = []
        built = Scenario.make_lines
        m.setattr(Scenario, "make_lines", lambda self, *a, **kw: made.append(
            built(self, *a, **kw)) or made[-1])
        clear_caches()
        old = pl._evaluate_uncached(Scenario.build("resnet50", gpus_per_node=8),
                                    get_compressor(name), 32, codec)
    assert len(made) == 1 and made[0][1] is not None  # the envelope made with the lines
    for f in ("intercept", "slope", "breaks", "index"):
        assert np.array_equal(getattr(ev.env, f), getattr(made[0][1], f))
    for x in (0.0, 1e-11, 1e-10, 1e-9, 1e-8):
        assert ev.env(x) == made[0][1](x) == old.env(x)


_CLUSTERS = {
    "none": None,
    "slow": sm.ClusterProfile(ceiling=21e9, compute_slowdown=1.1, sync_overhead=0.02,
                              collective_overhead=1e-4, topology=sm.Topology(gpus_per_node=8),
                              provenance={"source": "test"}),
    "buckets": sm.ClusterProfile(compute_slowdown=1.3, bucket_overhead=3e-5,
                                 iteration_overhead=1e-3, straggler_spread=0.05,
                                 provenance={"source": "test"}),
}


@pytest.mark.parametrize("cluster", sorted(_CLUSTERS))
@pytest.mark.parametrize("model, kw", [("resnet50", {}), ("bert", dict(gpus_per_node=8)),
                                       ("vgg16", dict(fusion="horovod", gpus_per_node=4)),
                                       ("gpt2", dict(fusion="none"))])
def test_the_planner_lines_are_those_of_make_lines(cluster, model, kw):
    """:func:`pl._make_lines` (the scenario's part kept per ``n``) against
    ``Scenario.make_lines``, field by field: compressors on the channel and on the compute
    stream, one flat buffer after backward, one worker, one node, many nodes."""
    clear_caches()
    sc = Scenario.build(model, cluster=_CLUSTERS[cluster], **kw)
    e, numel = pl._elements(sc)
    for impl, names in (("pytorch", ["none", "fp16", "powersgd:4", "topk:0.01"]),
                        ("grace-tf", ["signsgd", "topk:0.01", "int8"]),
                        ("deepspeed", ["signsgd"])):
        codec = pl._codec(sc, None, IMPLEMENTATIONS[impl])
        for name in names:
            comp = pl._as_implemented(get_compressor(name), IMPLEMENTATIONS[impl], False)
            for n in (1, 2, 8, 64):
                ready = sc.buckets.ready
                if comp.after_backward:
                    ready = np.array([float(np.max(ready))])
                    starts = np.array([0])
                    flat = np.array([numel.sum()])
                    tc = comp._costs(flat, [(int(flat[0]),)], n, codec[comp.family], e)
                else:
                    starts = sc.buckets.starts
                    tc = comp._costs(numel, sc.profile.tensor_shapes, n, codec[comp.family], e)
                phases, (_, extra, delay, ovh) = pl._channel_terms(sc, comp, n, codec, tc,
                                                                   starts)
                lat, _, bits, intra, intra_bw, _, _ = phases
                intra_bw = pl._raw_cost(sc, n).intra_bw if intra_bw is None else intra_bw
                args = (sc, n, ready, lat, ovh, bits, intra, intra_bw, delay, extra)
                for _ in range(2):  # the scenario's part computed, then kept
                    got, want = pl._make_lines(*args), _make_lines_reference(*args)
                    assert got[1] == want[1], (name, n)
                    for f in ("intercept", "slope", "latency", "overhead", "bits", "ready",
                              "fixed"):
                        assert np.array_equal(getattr(got[0], f), getattr(want[0], f)), f
                        assert getattr(got[0], f).dtype == getattr(want[0], f).dtype


def test_the_general_code_reaches_the_lines_and_phases(monkeypatch):
    """The switch of the plan check replaces the planner's own lines and one-algorithm
    phases (so that the plans compared differ in them)."""
    with monkeypatch.context() as m:
        _general(m)
        assert pl._make_lines is _make_lines_reference
        assert pl._one_algorithm_costs is not _ONE_ALGORITHM


_ONE_ALGORITHM = pl._one_algorithm_costs


def test_corners_share_the_channel_terms_and_answer_as_alone(monkeypatch):
    """A fitted cluster's corners (the same collectives, other slowdown and fixed costs)
    share each evaluation's channel terms; each evaluation equals the corner's own,
    computed from nothing."""
    cl = _fitted()
    comp = get_compressor("topk:0.01")
    clear_caches()
    scs = [Scenario.build("resnet50", cluster=c) for c in (cl, *cl.corners())]
    codecs = [pl._codec(s, None, IMPLEMENTATIONS["pytorch"]) for s in scs]
    made = []
    terms_of = pl._channel_terms
    monkeypatch.setattr(pl, "_channel_terms", lambda *a: made.append(1) or terms_of(*a))
    evs = [pl._evaluate(s, comp, 8, c) for s, c in zip(scs, codecs)]
    assert len(scs) > 2 and len(made) == 1
    monkeypatch.undo()
    e, numel = pl._elements(scs[0])
    tc = comp._costs(numel, scs[0].profile.tensor_shapes, 8, codecs[0]["topk"], e)
    same = pl._same_costs_key(comp, tc, 8, codecs[0])
    key, terms = pl._shared_channel(scs[0], 8, scs[0].buckets.starts, same)
    assert key in terms  # kept once for all of them
    for c, ev in zip((cl, *cl.corners()), evs):
        clear_caches()
        alone = Scenario.build("resnet50", cluster=_bare(c))
        own = pl._evaluate(alone, comp, 8, pl._codec(alone, None, IMPLEMENTATIONS["pytorch"]))
        for f in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
            assert np.array_equal(getattr(ev.lines, f), getattr(own.lines, f)), f
        assert (ev.bits, ev.encode, ev.decode, ev.xmap) == (own.bits, own.encode,
                                                            own.decode, own.xmap)


_BATCH = ["none", "fp16", "bf16", "int8", "int8:2", "signsgd", "topk", "topk:1e-6",
          "topk:0.01", "randomk:0.05", "powersgd:1", "powersgd:4", "powersgd:300"]


@pytest.mark.parametrize("model, kw", [("resnet50", {}), ("bert", dict(gpus_per_node=8)),
                                       ("vgg16", dict(fusion="horovod", algorithm="tree")),
                                       ("gpt2", dict(algorithm="nccl", gpus_per_node=8,
                                                     nics_per_node=8)),
                                       ("resnet50", dict(fusion="none", gpus_per_node=4))])
@pytest.mark.parametrize("impl", ["pytorch", "grace-tf", "deepspeed"])
def test_evaluations_in_a_batch_are_those_made_one_by_one(model, kw, impl, monkeypatch):
    """:func:`pl._evaluate_many` (the rows' compressors at once, as :func:`pl._rows` asks
    for them) against each evaluation made alone by the general code, field by field."""
    for n in (2, 8, 64):
        comps = [pl._as_implemented(get_compressor(c), IMPLEMENTATIONS[impl], False)
                 for c in _BATCH]
        comps += comps[:3]  # asked twice in one round
        clear_caches()
        sc = Scenario.build(model, **kw)
        codec = pl._codec(sc, None, IMPLEMENTATIONS[impl])
        alone = []
        real = pl._evaluate_uncached
        with monkeypatch.context() as m:
            m.setattr(pl, "_evaluate_uncached", lambda *a: alone.append(a[1]) or real(*a))
            pl._evaluate_many(sc, comps, n, codec)
            batched = [pl._evaluate(sc, c, n, codec) for c in comps]
        # what the batch leaves to _evaluate: a flat buffer after backward, per-tensor
        # collectives, a codec on the compute stream, phases of several algorithms
        e, numel = pl._elements(sc)
        for c in alone:
            colls = set(c._costs(numel, sc.profile.tensor_shapes, n, codec[c.family],
                                 e).phase_collectives)
            assert (c.after_backward or c.per_tensor or c.codec_stream != "channel"
                    or len(colls) > 1 or "alltoall" in colls), c
        assert len(alone) < len(comps)
        with monkeypatch.context() as m:
            _general(m)
            for c, ev in zip(comps, batched):
                clear_caches()
                s = Scenario.build(model, **kw)
                own = pl._evaluate_uncached(s, c, n, pl._codec(s, None, IMPLEMENTATIONS[impl]))
                for f in ("intercept", "slope", "latency", "overhead", "bits", "ready",
                          "fixed"):
                    assert np.array_equal(getattr(ev.lines, f), getattr(own.lines, f)), (c, f)
                assert (ev.n_collectives, ev.collective, ev.xmap, ev.n) == (
                    own.n_collectives, own.collective, own.xmap, own.n), c
                assert (ev.bits, ev.raw_bits, ev.encode, ev.decode, ev.per_worker_ratio) == (
                    own.bits, own.raw_bits, own.encode, own.decode, own.per_worker_ratio), c



@pytest.mark.parametrize("model, kw", [("resnet50", {}),
                                       ("bert", dict(fusion="horovod", algorithm="tree")),
                                       ("gpt2", dict(algorithm="nccl", nics_per_node=8))])
@pytest.mark.parametrize("impl", ["pytorch", "grace-tf"])
def test_a_clusters_views_in_a_batch_are_those_made_one_by_one(model, kw, impl, monkeypatch):
    """:func:`pl._evaluate_many` on a cluster: a fitted cluster's point, corners and
    alternatives (a plan's views, each round's compressors batched on each, their channel
    terms shared and their tensor costs made once for all), and a cluster without an
    interval, against each evaluation made alone by the general code, field by field."""
    comps = [pl._as_implemented(get_compressor(c), IMPLEMENTATIONS[impl], False)
             for c in _BATCH]
    comps += comps[:3]  # asked twice in one round
    for n in (8, 64):
        for cluster in (_fitted(), _bare(_fitted())):
            clear_caches()
            clusters = [cluster] + pl._interval_clusters(cluster)
            scs = [Scenario.build(model, cluster=c, **kw) for c in clusters]
            codecs = [pl._codec(s, None, IMPLEMENTATIONS[impl]) for s in scs]
            alone, memo, phased = [], {}, []
            real, phases = pl._evaluate_uncached, pl._batch_phases
            with monkeypatch.context() as m:
                m.setattr(pl, "_evaluate_uncached", lambda *a: alone.append(a[1]) or real(*a))
                m.setattr(pl, "_batch_phases", lambda *a: phased.append(a[0]) or phases(*a))
                for s, c in zip(scs, codecs):
                    pl._evaluate_many(s, comps, n, c, memo)
                batched = [[pl._evaluate(s, comp, n, c) for comp in comps]
                           for s, c in zip(scs, codecs)]
            assert len(alone) < len(comps) * len(scs)
            # a view with the point's collectives takes the channel terms the point made
            same = [s for s in scs[1:] if s.options == scs[0].options and np.array_equal(
                s.buckets.starts, scs[0].buckets.starts)]
            assert phased and not set(map(id, same)) & set(map(id, phased))
            if not kw and len(scs) > 1:  # (DDP's buckets: a view shares them)
                assert same
            assert all(c.per_tensor or c.codec_stream != "channel" or c.after_backward
                       for c in alone)
            with monkeypatch.context() as m:
                _general(m)
                for c, evs in zip(clusters, batched):
                    for comp, ev in zip(comps, evs):
                        clear_caches()
                        s = Scenario.build(model, cluster=_bare(c), **kw)
                        own = pl._evaluate_uncached(s, comp, n, pl._codec(
                            s, None, IMPLEMENTATIONS[impl]))
                        for f in ("intercept", "slope", "latency", "overhead", "bits",
                                  "ready", "fixed"):
                            assert np.array_equal(getattr(ev.lines, f),
                                                  getattr(own.lines, f)), (comp, f)
                        assert (ev.n_collectives, ev.collective, ev.xmap, ev.n) == (
                            own.n_collectives, own.collective, own.xmap, own.n), comp
                        assert (ev.bits, ev.raw_bits, ev.encode, ev.decode,
                                ev.per_worker_ratio) == (own.bits, own.raw_bits, own.encode,
                                                         own.decode, own.per_worker_ratio)


def test_rows_in_lockstep_raise_the_error_of_the_first_row_to_fail(monkeypatch):
    """A later row that fails in an earlier round does not hide the error the first row
    raises when the rows are made one by one."""
    monkeypatch.setattr(pl, "_evaluate_many", lambda *a: None)

    def row(i):
        for _ in range(3 - 2 * i):  # row 0 fails in round 4, row 1 in round 2
            yield None
        raise ValueError(f"row {i}")

    with pytest.raises(ValueError, match="row 0"):
        pl._rows(None, 8, None, row, 2)

    def fine(i):
        yield None
        return i

    assert pl._rows(None, 8, None, fine, 3) == [0, 1, 2]


def test_a_plan_that_fails_fails_as_the_general_code_does(monkeypatch):
    bad = dict(n=64, sharding="zero2",
               compressors=["powersgd", "fp16", pl.get_compressor("bf16").__class__(
                   dtype="bf16", per_tensor=True)])
    with pytest.raises(sm.InvalidParameterError) as fast:
        sm.plan_compression("bert", 10e9, **bad)
    with monkeypatch.context() as m:
        _general(m)
        with pytest.raises(sm.InvalidParameterError) as general:
            sm.plan_compression("bert", 10e9, **bad)
    assert str(fast.value) == str(general.value) and "per_tensor" in str(fast.value)


def _first_crossing_reference(lines, a, b, lin, level):
    """_first_crossing as it was, on arrays."""
    ua, ub = lin(a), lin(b)
    la, lb = np.array(lines(a)), np.array(lines(b))
    if la.shape != lb.shape or ub <= ua:
        return None
    slope = (lb - la) / (ub - ua)
    rising = slope > 0
    if not rising.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = ua + (level - la[rising]) / slope[rising]
    u = float(np.min(cross))
    if not ua < u < ub:
        return None
    return math.log(u)


@pytest.mark.parametrize("k", [1, 3, 15, 40])
def test_the_first_crossing_in_python_floats_is_that_of_the_arrays(k):
    rng = np.random.default_rng(k)
    found = 0
    for _ in range(300):
        at = {v: list(rng.uniform(0.0, 1.0, k) * rng.choice([1e-3, 1.0, 1e3])) for v in
              (math.log(1e-4), math.log(0.3))}
        if rng.uniform() < 0.2:  # lines that do not rise
            at[math.log(0.3)] = list(np.array(at[math.log(1e-4)]) - 1e-3)
        level = float(rng.uniform(0.0, 1.0))
        args = (at.get, math.log(1e-4), math.log(0.3), math.exp, level)
        got, want = pl._first_crossing(*args), _first_crossing_reference(*args)
        assert got == want
        if rng.uniform() < 0.1:  # a line at infinity: the Python floats' minimum
            at[math.log(0.3)][0] = math.inf
        arrays = {v: np.array(ls) for v, ls in at.items()}  # (many lines: given as arrays)
        args = (arrays.get, math.log(1e-4), math.log(0.3), math.exp, level)
        assert pl._first_crossing(*args) == pl._first_crossing(
            lambda v: arrays[v].tolist(), *args[1:])
        found += got is not None
    assert found > 0
