"""What makes a first question on a fitted cluster fast changes no answer: corners that
differ only in fixed costs share the lines (the fixed costs added to the intercepts), the
corners' collective costs are computed in one vectorized call, and each bucket's cost is
the same alone or among others; the corners' scenarios are made together from the best
cluster's, their lines in one vectorized pass, and each corner is answered without what
only the point answer prints (the ratio alone, the time and scaling factor without their
breakdown). Every check is exact (bit for bit)."""

import warnings

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.collectives import ALGORITHMS, collective_cost
from scalemodel.model import Scenario, clear_caches

P = {"source": "test"}


def _fitted():
    base = sm.ClusterProfile(name="fitted", topology=sm.Topology(gpus_per_node=8),
                             ceiling=21e9, compute_slowdown=1.14, sync_overhead=0.022,
                             collective_overhead=1e-4, bucket_overhead=2e-5, provenance=P)
    return attrs.evolve(base, intervals={
        "ceiling": (18e9, 23e9), "sync_overhead": (0.015, 0.028),
        "compute_slowdown": (1.1, 1.18)}, alternatives=[
        {"free": ["ceiling", "sync_overhead"], "values": {"ceiling": 21e9,
                                                          "sync_overhead": 0.022},
         "intervals": {"ceiling": [18e9, 23e9], "sync_overhead": [0.015, 0.028]},
         "score": 0.0},
        {"free": ["collective_overhead", "sync_overhead"],
         "values": {"collective_overhead": 8e-4, "sync_overhead": 0.015},
         "intervals": {"collective_overhead": [5e-4, 1e-3], "sync_overhead": [0.01, 0.02]},
         "score": 1.1}])


def _bare(c):
    """The same cluster without intervals and alternatives (its own answer only)."""
    return attrs.evolve(c, intervals={}, alternatives=[])


def _assert_lines_made_afresh(sc, lines):
    """``lines`` (64 workers, uncompressed) equal, field by field, those
    :meth:`Scenario.make_lines` makes from the scenario's own buckets and collective cost;
    returns that envelope."""
    b = sc.buckets
    cost = collective_cost(sc.algorithm, b.nbytes, 64, reduction=sc.profile.reduction,
                           options=sc.options)
    ref, ref_env, _ = sc.make_lines(64, b.ready, cost)
    for f in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
        assert np.array_equal(getattr(lines, f), getattr(ref, f)), f
    return ref_env


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_each_bucket_costs_the_same_alone_or_among_others(algorithm):
    opts = Scenario.build("resnet50", cluster=_fitted(), algorithm="ring").options
    a = np.array([55040.0, 281600.0, 2.6e7, 3.9e7])
    b = np.array([37888.0, 1383424.0, 7626752.0])
    for n in (8, 64):
        both = collective_cost(algorithm, np.concatenate((a, b)), n, options=opts)
        for part, sl in ((a, slice(0, 4)), (b, slice(4, 7))):
            alone = collective_cost(algorithm, part, n, options=opts)
            for f in ("latency", "overhead", "bits", "intra_bits"):
                assert np.array_equal(getattr(both, f)[sl], getattr(alone, f)), (f, n)


@pytest.mark.parametrize("fusion, algorithm", [("horovod", "nccl-2.4"), ("ddp", "ring"),
                                               ("horovod", "tree"), ("none", "nccl")])
def test_interval_ends_are_each_corner_answered_alone(fusion, algorithm):
    """The interval over corners and alternatives, computed with shared lines and primed
    costs, equals each corner's own answer computed from nothing (caches emptied)."""
    cl = _fitted()
    clear_caches()
    got = sm.min_compression("resnet50", 10e9, target=0.7, fusion=fusion,
                             algorithm=algorithm, cluster=cl)
    alone = []
    for f in [cl, cl.with_alternative(1)]:
        for c in (f, *f.corners()):
            clear_caches()
            alone.append(sm.min_compression("resnet50", 10e9, target=0.7, fusion=fusion,
                                            algorithm=algorithm, cluster=_bare(c)).ratio)
    hi = max(alone)
    assert got.interval == (min(alone), None if hi == np.inf else hi)  # None: unbounded
    clear_caches()
    assert got.ratio == sm.min_compression("resnet50", 10e9, target=0.7, fusion=fusion,
                                           algorithm=algorithm, cluster=_bare(cl)).ratio


def test_shared_lines_are_the_lines_with_their_fixed_costs():
    cl = _fitted()
    clear_caches()
    first = Scenario.build("resnet50", cluster=cl, fusion="ddp")
    first.lines(64)
    other = attrs.evolve(_bare(cl), sync_overhead=0.03, collective_overhead=3e-4)
    sc = Scenario.build("resnet50", cluster=other, fusion="ddp")
    lines, env = sc.lines(64)
    ref_env = _assert_lines_made_afresh(sc, lines)
    assert np.array_equal(env.intercept, ref_env.intercept)
    assert lines.latency is first.lines(64)[0].latency  # shared, not rebuilt


def test_corners_of_terms_outside_the_lines_share_lines_and_envelope():
    """Corners that move only the ceiling, the utilization or the wrapper's per-iteration
    work reuse the best cluster's lines and envelope (the same objects), and their
    answers are still each corner's own."""
    base = sm.ClusterProfile(name="fitted", topology=sm.Topology(gpus_per_node=8),
                             ceiling=21e9, iteration_overhead=3e-3, sync_overhead=0.01,
                             provenance=P)
    cl = attrs.evolve(base, intervals={"ceiling": (18e9, 23e9),
                                       "iteration_overhead": (1e-3, 5e-3)})
    clear_caches()
    got = sm.min_compression("resnet50", 10e9, target=0.7, cluster=cl, fusion="ddp")
    own = Scenario.build("resnet50", cluster=cl, fusion="ddp").lines(64)
    for c in cl.corners():
        sc = Scenario.build("resnet50", cluster=c, fusion="ddp")
        assert sc.lines(64)[0] is own[0] and sc.lines(64)[1] is own[1]
    alone = []
    for c in (cl, *cl.corners()):
        clear_caches()
        alone.append(sm.min_compression("resnet50", 10e9, target=0.7, cluster=_bare(c),
                                        fusion="ddp").ratio)
    assert got.interval == (min(alone), max(alone))


def _built_alone(model, cluster, **kw):
    clear_caches()
    return Scenario.build(model, cluster=cluster, **kw)


@pytest.mark.parametrize("kw", [dict(fusion="horovod", algorithm="nccl-2.4"),
                                dict(fusion="ddp", activation_checkpointing="full")])
def test_corner_scenarios_reuse_the_build_and_equal_one_built_alone(kw):
    """A corner's scenario is the best cluster's build with the corner's cluster (the
    build reads nothing the corners change); every field equals a build from nothing."""
    model = "resnet50" if "activation_checkpointing" not in kw else "llama-2-7b"
    cl = _fitted()
    clear_caches()
    own = Scenario.build(model, cluster=cl, **kw)
    for f in (cl, cl.with_alternative(1)):
        for c in f.corners():
            sc = Scenario.build(model, cluster=c, **kw)
            assert sc.profile is own.profile and sc.cluster is c  # shared, not rebuilt
            ref = _built_alone(model, c, **kw)
            for a in attrs.fields(Scenario):
                if a.init and a.name not in ("profile", "cluster"):
                    assert getattr(sc, a.name) == getattr(ref, a.name), a.name
            for a in ("iteration_time", "forward_time", "backward_time", "update_time"):
                assert getattr(sc.profile, a) == getattr(ref.profile, a), a
            assert np.array_equal(sc.profile.tensor_ready, ref.profile.tensor_ready)
            assert np.array_equal(sc.lines(64)[0].intercept, ref.lines(64)[0].intercept)
            own = Scenario.build(model, cluster=cl, **kw)  # (the loop emptied the caches)


def test_clusters_that_change_the_build_do_not_share_it():
    """Another topology, latency, overlap or fit settings, or another fitted efficiency
    (its own ``extra``), builds its own scenario."""
    cl = _fitted()
    clear_caches()
    own = Scenario.build("resnet50", cluster=cl, fusion="ddp")
    for other in (attrs.evolve(cl, topology=sm.Topology(gpus_per_node=4)),
                  attrs.evolve(cl, alpha=5e-6), attrs.evolve(cl, overlap=0.8),
                  attrs.evolve(cl, fit_settings={"algorithm": "tree"}),
                  attrs.evolve(cl, extra={"note": "another fit"})):
        sc = Scenario.build("resnet50", cluster=other, fusion="ddp")
        assert sc.profile is not own.profile or sc.options != own.options \
            or sc.algorithm != own.algorithm or other.extra is not cl.extra
        ref = _built_alone("resnet50", other, fusion="ddp")
        assert sc.options == ref.options and sc.algorithm == ref.algorithm
        assert sc.profile.iteration_time == ref.profile.iteration_time
        assert np.array_equal(sc.profile.tensor_ready, ref.profile.tensor_ready)
        own = Scenario.build("resnet50", cluster=cl, fusion="ddp")


def _with_efficiency(cl, gpu):
    """``cl`` carrying a fitted efficiency for ``gpu``'s FLOP-derived profiles: each
    corner then has its own ``extra`` (its efficiency's end)."""
    eff = {"value": 0.5, "interval": [0.45, 0.55], "gpu": [gpu], "profiles": ["x"]}
    return attrs.evolve(cl, extra={"efficiency": eff})


@pytest.mark.parametrize("model", ["resnet50", "llama-2-7b"])
def test_corners_whose_efficiency_does_not_apply_share_the_build(model):
    """Corners that differ in a fitted efficiency (their own ``extra``) build what the
    best cluster builds when that efficiency does not apply to the profile (a measured
    profile, or a FLOP-derived one of another GPU): the corner's scenario is the best
    one's with the corner's cluster, equal to its build from nothing in every field;
    where it applies, each corner is built alone (its own profile). So are the corners
    with their efficiencies swapped that the iteration time's interval evaluates."""
    from scalemodel.efficiency import fitted_efficiency
    from scalemodel.intervals import _swapped
    from scalemodel.model import _corner_scenario

    prof = sm.load_profile(model)
    for gpu, applies in (("no such GPU", False), (str(prof.device), True)):
        cl = _with_efficiency(_fitted(), gpu)
        corners = [c for c in cl.corners() if c.extra is not cl.extra]
        assert corners  # the efficiency's ends are corners of their own
        corners += _swapped(cl, *cl.corners())  # (the time's interval asks them too)
        clear_caches()
        own = Scenario.build(model, cluster=cl, fusion="ddp")
        for c in corners:
            applied = fitted_efficiency(c, prof) is not None
            assert applied == (applies and model != "resnet50")
            sc = _corner_scenario(own, c)
            if applied:
                assert sc is None
                continue
            assert sc is not None and sc.cluster is c and sc.profile is own.profile
            ref = _built_alone(model, c, fusion="ddp")
            own = Scenario.build(model, cluster=cl, fusion="ddp")  # (emptied caches)
            for a in attrs.fields(Scenario):
                if a.init and a.name not in ("profile", "cluster"):
                    assert getattr(sc, a.name) == getattr(ref, a.name), a.name
            for a in ("iteration_time", "forward_time", "backward_time", "update_time"):
                assert getattr(sc.profile, a) == getattr(ref.profile, a), a
            assert np.array_equal(sc.lines(64)[0].intercept, ref.lines(64)[0].intercept)


def _family(cl):
    return [c for f in (cl, cl.with_alternative(1)) for c in (f, *f.corners())]


@pytest.mark.parametrize("kw, n, compressed", [
    (dict(fusion="horovod", algorithm="nccl-2.4"), 64, False),
    (dict(fusion="ddp", algorithm="ring"), 64, False),
    (dict(fusion="ddp", algorithm="ring", codec_cost=1e-10), 64, True),
    (dict(fusion="none", algorithm="nccl"), 256, False),
    (dict(fusion="ddp", algorithm="ring"), 8, False)])  # one node: the intra link's bits
def test_primed_corner_lines_are_each_corners_own(kw, n, compressed, monkeypatch):
    """The lines of every corner, made for all corners in one vectorized pass when the
    first corner's are asked for, equal :meth:`Scenario.make_lines` of that corner (field
    by field, bit for bit), and no corner makes its own; a question without an interval
    makes nothing for the corners."""
    cl = _fitted()
    clear_caches()
    own = Scenario.build("resnet50", cluster=cl, **kw)
    own.lines(n, compressed)
    assert ("siblings",) not in own._cache
    made = []
    orig = Scenario.make_lines
    monkeypatch.setattr(Scenario, "make_lines", lambda self, *a, **k: made.append(1)
                        or orig(self, *a, **k))
    got = {id(c): Scenario.build("resnet50", cluster=c, **kw) for c in _family(cl)}
    got = {i: (sc, sc.lines(n, compressed), sc.wire_map(n)) for i, sc in got.items()}
    assert not made  # every corner's lines were primed
    monkeypatch.undo()
    for sc, (lines, env), xmap in got.values():
        b = sc.buckets
        cost = collective_cost(sc.algorithm, b.nbytes, n, reduction=sc.profile.reduction,
                               options=sc.options)
        ovh = cost.overhead + sc.codec_cost * b.nbytes if compressed else cost.overhead
        ref, ref_env, ref_xmap = sc.make_lines(n, b.ready, cost, ovh)
        for f in ("intercept", "slope", "latency", "overhead", "bits", "ready", "fixed"):
            assert np.array_equal(getattr(lines, f), getattr(ref, f)), f
        assert np.array_equal(env.intercept, ref_env.intercept)
        assert np.array_equal(env.breaks, ref_env.breaks)
        assert xmap == ref_xmap


@pytest.mark.parametrize("bw", [1e6, 1e9, 10e9, 100e9])
@pytest.mark.parametrize("target", [0.5, 0.7, 0.9, 1.0])
def test_a_corners_ratio_is_the_whole_solves(bw, target):
    """The ratio alone (what a corner of an interval needs) equals the whole solve's, in
    every branch: none needed, a finite ratio, none reaches the target, the limit."""
    from scalemodel.solvers import _builder, _corner_ratio, _min_compression

    cl = _fitted()
    build = _builder("resnet50", fusion="horovod", algorithm="nccl-2.4")
    for c in _family(cl):
        for n in (8, 64):
            clear_caches()
            assert _corner_ratio(build(c), bw, n, target, 1.0) == _min_compression(
                build(c), bw, n, target, 1.0).ratio


@pytest.mark.parametrize("target", [0.3, 0.7, 0.9, 0.99, 1.0, "limit"])
@pytest.mark.parametrize("compression", [1.0, 8.0])
def test_a_corners_line_rate_is_the_whole_solves(target, compression):
    """The line rate alone (what a corner of an interval needs) equals the whole solve's,
    in every branch: any line rate (one node), a finite one, none below the limit, the
    transport's ceiling too low, the limit, and MG-WFBP's fixed point."""
    from scalemodel.solvers import _builder, _corner_bw, _solve_bandwidth

    cl = _fitted()
    low_ceiling = attrs.evolve(_bare(cl), ceiling=2e8)  # no line rate is enough
    ideal = sm.ClusterProfile(name="ideal", provenance=P)  # target 1: the limit
    for fusion in ("horovod", "mg-wfbp"):
        build = _builder("resnet50", fusion=fusion, algorithm="nccl-2.4",
                         codec_cost=1e-10 if compression > 1 else 0.0)
        # (MG-WFBP's solves scan the line rates, 0.3-0.8 s each: the fit, one corner and
        # the two special clusters, at 8 and 64 workers, keep every branch)
        family = _family(cl) if fusion == "horovod" else _family(cl)[:2]
        for c in (*family, low_ceiling, ideal):
            for n in ((8, 64, 512) if fusion == "horovod" else (8, 64)):
                clear_caches()
                t = target
                if t == "limit":  # what unlimited bandwidth reaches
                    t = _solve_bandwidth(build(c), n, 0.5, compression, 1.0).max_scaling_factor
                want = _solve_bandwidth(build(c), n, t, compression, 1.0).bw
                clear_caches()
                assert _corner_bw(build(c), n, t, compression, 1.0) == want, (c, n)


@pytest.mark.parametrize("kw", [dict(fusion="horovod", algorithm="nccl-2.4"),
                                dict(fusion="ddp", algorithm="ring", compression=4.0,
                                     codec_cost=1e-10)])
def test_iteration_time_interval_is_each_corner_answered_alone(kw):
    """The iteration time's and the scaling factor's intervals (each corner's time and
    scaling factor alone, without its breakdown) equal the ends of each corner's whole
    answer, computed from nothing."""
    cl = _fitted()
    clear_caches()
    got = sm.iteration_time("resnet50", 64, 10e9, cluster=cl, **kw)
    alone = []
    for c in _family(cl):
        clear_caches()
        alone.append(sm.iteration_time("resnet50", 64, 10e9, cluster=_bare(c), **kw))
    assert got.total_interval == (min(a.total for a in alone), max(a.total for a in alone))
    assert got.scaling_factor_interval == (min(a.scaling_factor for a in alone),
                                           max(a.scaling_factor for a in alone))


@pytest.mark.parametrize("kw", [dict(fusion="horovod", algorithm="nccl-2.4"),
                                dict(fusion="ddp", ps_servers=2)])  # ps_servers: ignored
def test_a_corners_scenario_is_the_one_built_alone(kw):
    """The scenario of a corner taken from those made with the best cluster's
    (model._corner_scenario) equals the corner's build from nothing in every field, warns
    of the ignored settings as the build does, and is None for a cluster that is not a
    corner and under MG-WFBP (planned per question)."""
    from scalemodel.exceptions import ModelWarning
    from scalemodel.model import _corner_scenario

    cl = _fitted()
    clear_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModelWarning)
        own = Scenario.build("resnet50", cluster=cl, **kw)
    for c in _family(cl)[1:]:
        if "ps_servers" in kw:
            with pytest.warns(ModelWarning, match="ps_servers"):
                sc = _corner_scenario(own, c)
        else:
            sc = _corner_scenario(own, c)
        assert sc.cluster is c
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModelWarning)
            ref = _built_alone("resnet50", c, **kw)
            own = Scenario.build("resnet50", cluster=cl, **kw)  # (emptied caches)
        for a in attrs.fields(Scenario):
            if a.init and a.name not in ("profile", "cluster"):
                assert getattr(sc, a.name) == getattr(ref, a.name), a.name
        assert np.array_equal(sc.lines(64)[0].intercept, ref.lines(64)[0].intercept)
    assert _corner_scenario(own, _bare(cl)) is None
    planned = Scenario.build("resnet50", cluster=cl, fusion="mg-wfbp")
    assert _corner_scenario(planned, cl.corners()[0]) is None


def test_swapped_efficiency_corners_are_made_once_and_equal_a_fresh_swap():
    """corner_clusters(swap_efficiency=True) keeps the corners with their efficiencies
    swapped with the cluster (as its corners): the same objects on each call, equal to
    the swap made afresh."""
    from scalemodel.intervals import corner_clusters

    eff = {"value": 0.52, "interval": [0.47, 0.57], "gpu": ["h100-sxm"],
           "profiles": ["gpt2"]}
    cl = attrs.evolve(_fitted(), extra={"efficiency": eff})
    first = corner_clusters(cl, swap_efficiency=True)
    again = corner_clusters(cl, swap_efficiency=True)
    assert any(len(ends) == 4 for _, _, ends in first)
    for (i, c, ends), (_, _, ends2) in zip(first, again):
        worst, best = c.corners()
        assert all(a is b for a, b in zip(ends, ends2))
        if len(ends) == 2:  # an explanation without the efficiency: nothing to swap
            assert "efficiency" not in worst.extra
            continue
        for got, want in zip(ends[2:], (attrs.evolve(worst, extra=best.extra),
                                        attrs.evolve(best, extra=worst.extra))):
            for a in attrs.fields(type(cl)):
                if a.init:
                    assert getattr(got, a.name) == getattr(want, a.name), a.name


@pytest.mark.parametrize("kw", [dict(fusion="ddp", algorithm="ring"),
                                dict(fusion="horovod", algorithm="nccl-2.4")])
def test_iteration_time_primes_the_corners_and_the_alternatives_own_lines_when_asked(kw):
    """iteration_time asks only the corners: their lines are primed first; an
    alternative's own explanation primes the rest when it asks (a later min_compression),
    and every answer equals the one asked from nothing."""
    from scalemodel.model import _LINES

    cl = _fitted()
    clear_caches()
    it = sm.iteration_time("resnet50", 64, 10e9, cluster=cl, **kw)
    sc = Scenario.build("resnet50", cluster=cl, **kw)
    alt = cl.with_alternative(1)
    own = sc._cache[("siblings",)][id(alt)]
    assert own.cluster is alt and (64, False) not in own._cache  # not primed yet
    assert sc._cache.get(("primed rest", (64, False)))
    lines, env = own.lines(64)  # primes the rest
    assert ("primed rest", (64, False)) not in sc._cache
    assert id(own) in sc._cache[("primed", (64, False))]
    ref_env = _assert_lines_made_afresh(own, lines)
    assert np.array_equal(env.breaks, ref_env.breaks)
    assert len(_LINES) > 0
    for ask in (lambda: sm.min_compression("resnet50", 10e9, n=64, target=0.9, cluster=cl,
                                           **kw),
                lambda: sm.required_bandwidth("resnet50", n=64, target=0.9, cluster=cl,
                                              **kw)):
        warm = ask()
        clear_caches()
        cold = ask()
        assert repr(warm) == repr(cold) and str(warm) == str(cold)
    clear_caches()
    again = sm.iteration_time("resnet50", 64, 10e9, cluster=cl, **kw)
    assert repr(again) == repr(it)


def test_discriminating_run_text_looks_each_model_up_once(monkeypatch):
    # a calibration run's own label (no loadable profile) is looked up once, not at every
    # question; the text is the same as looked up afresh; clear_caches(profiles=True)
    # forgets it
    from scalemodel import intervals, profiles
    from scalemodel.model import clear_caches

    clear_caches(profiles=True)
    assert intervals._with_bytes("no-such-model-xyz") == "no-such-model-xyz"
    fresh = intervals._with_bytes("resnet50")
    assert fresh.startswith("resnet50 (") and "MB of gradients" in fresh
    calls = []
    real = profiles.load_profile
    monkeypatch.setattr(profiles, "load_profile", lambda m: calls.append(m) or real(m))
    assert intervals._with_bytes("no-such-model-xyz") == "no-such-model-xyz"
    assert intervals._with_bytes("resnet50") == fresh
    assert calls == []
    clear_caches(profiles=True)
    assert intervals._BYTES_TEXT == {}
    assert intervals._with_bytes("resnet50") == fresh
    assert calls == ["resnet50"]
