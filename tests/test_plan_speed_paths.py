"""The shortcuts that make a first tensor-parallel plan fast change no answer (issue 20
item 10, issue 18 item 7): the memory check's "does not fit" suggestions share what one
``memory()`` call computed (the model-parallel checks per tensor-parallel size and
checkpointing, the activations, the allocator's rounding, the dtypes), the data-parallel
replicas of one count without numpy, and the plan's ideal compression solved on the plan's
own scenario for its finite ratio alone. Each is compared with the general code, bit for
bit."""

import importlib
import warnings

import attrs
import numpy as np
import pytest

import scalemodel as sm
import scalemodel.planner as pl
from scalemodel.checkpointing import Checkpointing
from scalemodel.exceptions import ScalemodelError
from scalemodel.model import Scenario, clear_caches
from scalemodel.parallel import ModelParallel

mem = importlib.import_module("scalemodel.memory")  # (the package's "memory" is a function)

# a config whose layer tensors are not a multiple of the allocator's blocks: its rounding
# changes with the checkpointing
_ODD = attrs.evolve(sm.llm_config("llama-2-70b"), hidden=8256, seq=4001, name="odd-70b")

# (model, n, gpu, settings): suggestions of every kind (sharding, offload, checkpointing,
# tensor parallelism, "still does not fit") and model-parallel refusals among them
_MEMORY_CASES = [
    ("llama-2-13b", 256, "h100-sxm", dict(tp=2)),
    ("llama-2-13b", 256, "h100-sxm", dict(tp=2, sequence_parallel=True)),
    ("llama-2-13b", 256, "h100-sxm", dict(tp=2, loss="fused")),
    ("llama-2-13b", 256, "h100-sxm", dict(tp=2, activation_checkpointing="selective",
                                          flash_attention=False)),
    ("llama-2-70b", 64, "h100-sxm", dict()),
    ("llama-2-70b", 64, "h100-sxm", dict(tp=2, gpus_per_node=8)),
    ("llama-2-70b", 64, "h100-sxm", dict(pp=2, microbatches=4)),
    ("llama-2-70b", 64, "h100-sxm", dict(pp=4, microbatches=8, tp=2)),
    ("llama-2-70b", 16, "a100-40gb", dict(sharding="zero1")),
    ("llama-2-70b", 8, "a100-40gb", dict(sharding="zero3",
                                         activation_checkpointing="selective")),
    ("llama-2-13b", 32, "a100-40gb", dict()),
    ("llama-2-13b", 8, "a100-40gb", dict(sharding="zero3", accounting="fsdp")),
    ("llama-2-70b", 16, "h100-sxm", dict(sharding="zero2", accounting="fsdp")),
    ("llama-2-70b", np.array([16, 64, 256]), "h100-sxm", dict(tp=2)),
    ("llama-2-70b", np.array([2, 4, 8]), "a100-40gb", dict(sharding="zero3",
                                                           activation_checkpointing="selective")),
    ("llama-2-13b", np.array([2, 128]), "h100-sxm", dict()),  # some n fit, some do not
    (_ODD, 64, "h100-sxm", dict(tp=2)),
    (_ODD, 64, "h100-sxm", dict(sharding="zero1")),
]


def _alternative(label):
    """The settings a suggestion's label names (``"sharding='zero3'"`` ...) [-]."""
    label = label.removesuffix(" (still does not fit)")
    return eval(f"dict({label})")  # noqa: S307  (the labels are the library's own)


@pytest.mark.parametrize("model, n, gpu, kw", _MEMORY_CASES)
def test_each_suggestion_is_the_estimate_of_its_settings_alone(model, n, gpu, kw):
    """Every suggestion's bytes are those of ``memory()`` asked with its settings alone
    (no shared work): a memo keyed on too little would give another alternative's; and it
    fits at every ``n`` unless said "still does not fit"."""
    clear_caches()
    est = sm.memory(model, n, gpu=gpu, **kw)
    assert not np.all(est.fits) and est.suggestions  # (else the case checks nothing)
    for label, worst in est.suggestions:
        alone = sm.memory(model, n, gpu=gpu, suggest=False, **{**kw, **_alternative(label)})
        assert float(np.max(alone.per_gpu)) == worst, label
        assert bool(np.all(alone.fits)) != label.endswith("(still does not fit)"), label


@pytest.mark.parametrize("model, n, gpu, kw", _MEMORY_CASES)
def test_suggestions_equal_those_without_the_shared_work(model, n, gpu, kw, monkeypatch):
    """The whole estimate, its suggestions included, equals the one made with every
    shortcut off (each alternative checked, and its activations, rounding and dtypes
    computed, afresh)."""
    clear_caches()
    fast = sm.memory(model, n, gpu=gpu, **kw)

    def general(tp, pp, microbatches, cfg, ns, label, virtual_stages, sequence_parallel,
                seed):
        return lambda t, strategy, ck: mem._check_model_parallel(
            t, pp, microbatches, cfg, ns, strategy, ck, label, virtual_stages,
            sequence_parallel)

    estimate = mem._estimate
    monkeypatch.setattr(mem, "_model_parallel_checker", general)
    # acts=None, lean=False: every estimate whole, afresh
    monkeypatch.setattr(mem, "_estimate", lambda *a: estimate(*a[:20]))
    clear_caches()
    slow = sm.memory(model, n, gpu=gpu, **kw)
    assert repr(slow) == repr(fast)
    assert slow.suggestions == fast.suggestions


_STRATEGIES = ("none", "zero1", "zero2", "zero3", "hybrid_shard")
_CHECKPOINTS = (Checkpointing("none"), Checkpointing("selective"),
                Checkpointing("selective", flash_attention=False), Checkpointing("full"),
                Checkpointing("full", 0.5))


@pytest.mark.parametrize("pp, microbatches, ns", [(1, None, 256), (2, 4, 64), (1, None, 2),
                                                  (2, 8, 4), (1, None, 6)])
def test_the_shared_model_parallel_check_raises_exactly_when_the_full_one_does(
        pp, microbatches, ns):
    """:func:`_model_parallel_checker` (strategy-free part once per ``(tp, ck)``) against
    :func:`_check_model_parallel` on every strategy, checkpointing and tensor-parallel
    size, in an order that reuses what it remembered: the same result, or both raise."""
    cfg = sm.llm_config("llama-2-13b")
    ns = np.asarray(ns)
    seed_ck = Checkpointing("none")
    seed = mem._check_model_parallel(2, pp, microbatches, cfg, ns, "none", seed_ck, "m")
    check = mem._model_parallel_checker(2, pp, microbatches, cfg, ns, "m", 1, False,
                                        ((2, seed_ck), seed))
    tried = raised = 0
    for _ in range(2):  # the second pass from what the first remembered
        for t in (1, 2, 3, 4, 8):
            for strategy in _STRATEGIES:
                for ck in _CHECKPOINTS:
                    try:
                        want = mem._check_model_parallel(t, pp, microbatches, cfg, ns,
                                                         strategy, ck, "m")
                    except ScalemodelError:
                        with pytest.raises(ScalemodelError):
                            check(t, strategy, ck)
                        raised += 1
                    else:
                        assert check(t, strategy, ck) == want
                    tried += 1
    assert 0 < raised < tried  # both kinds were compared


@pytest.mark.parametrize("n", [8, 64, 256, 1024, np.int64(64), np.asarray(64),
                               np.asarray(512), np.asarray(8, np.int32),
                               np.asarray(np.uint16(16)), np.array([8, 16, 64]), 0, -8,
                               np.asarray(-16)])
@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (2, 2), (8, 1)])
def test_replicas_of_one_count_as_numpy_counts_them(n, tp, pp):
    """``ModelParallel.dp`` of one count (a Python or 0-d numpy integer) without numpy
    equals the array path's answer, and a count that is not a multiple raises alike."""
    mp = ModelParallel(tp, pp, 4)
    arr = np.asarray(n)
    out = arr // mp.size
    want = int(out) if out.ndim == 0 else out
    got = mp.dp(n)
    assert type(got) is type(want) and np.array_equal(got, want)
    for bad in (np.asarray(n) * mp.size + 1, int(np.max(n)) * mp.size + 1):
        if mp.size > 1:
            with pytest.raises(ScalemodelError, match="multiple"):
                mp.dp(bad)


# plan_compression questions: tensor and pipeline parallelism, no compression needed,
# an infeasible target, sharding, offload, checkpointing, MG-WFBP (not shared: it plans its
# buckets), a setting the scenario ignores (not shared: its build would warn again)
_PLAN_CASES = [
    (("llama-2-13b", 100e9), dict(n=256, tp=2, gpus_per_node=8, nics_per_node=8)),
    (("llama-2-13b", 100e9), dict(n=256, tp=2, gpus_per_node=8, gpu="h100-sxm",
                                  loss="fused")),
    (("llama-2-7b", 100e9), dict(n=64, pp=2, microbatches=4)),
    (("llama-2-7b", 25e9), dict(n=64, pp=2, tp=2, microbatches=8, gpus_per_node=8)),
    (("bert", 10e9), dict(n=64)),
    (("bert", 10e9), dict(n=64, target=0.999)),
    (("bert", 1e12), dict(n=8)),
    (("resnet50", 25e9), dict(n=32)),
    (("resnet50", 25e9), dict(n=32, fusion="mg-wfbp")),
    (("resnet50", 1e9), dict(n=32, target=0.99, alpha=1e-3)),
    (("llama-2-13b", 100e9), dict(n=64, sharding="zero3",
                                  activation_checkpointing="selective")),
    (("llama-2-13b", 100e9), dict(n=64, sharding="zero2", offload="optimizer")),
    (("llama-2-70b", 100e9), dict(n=64, tp=2, gpus_per_node=8)),
    (("llama-2-13b", 50e9), dict(n=128, tp=4, gpus_per_node=8,
                                 activation_checkpointing="full")),
]


def _plan_fields(plan):
    return repr(plan), str(plan), plan.ideal_ratio, plan.message


def _cluster(intervals):
    """A calibrated cluster (slowdown, fixed costs, a ceiling), with or without intervals
    (without: the plan's scenario is shared; with: min_compression over the corners)."""
    base = sm.ClusterProfile(name="c", topology=sm.Topology(gpus_per_node=8), ceiling=21e9,
                             compute_slowdown=1.05, sync_overhead=1e-4,
                             collective_overhead=1e-5, bucket_overhead=2e-6)
    if not intervals:
        return base
    return attrs.evolve(base, intervals={"ceiling": (18e9, 23e9),
                                         "compute_slowdown": (1.1, 1.18)})


_PLAN_CASES += [(("bert", 10e9), dict(n=64, cluster=_cluster(False))),
                (("llama-2-13b", 25e9), dict(n=64, cluster=_cluster(False))),
                (("resnet50", 10e9), dict(n=32, target=0.999, cluster=_cluster(False))),
                (("bert", 10e9), dict(n=64, cluster=_cluster(True)))]


@pytest.mark.parametrize("args, kw", _PLAN_CASES)
def test_plan_with_the_ideal_on_its_own_scenario_equals_the_general_one(args, kw,
                                                                       monkeypatch):
    """The plan whose ideal compression is solved on the plan's own scenario (its finite
    ratio alone) equals the plan whose ideal is :func:`_min_compression` on a scenario
    built afresh, as before; and its ratio is :func:`~scalemodel.min_compression`'s."""
    clear_caches()
    fast = sm.plan_compression(*args, **kw)
    monkeypatch.setattr(pl, "_SHARE_BUILT", False)
    clear_caches()
    slow = sm.plan_compression(*args, **kw)
    assert _plan_fields(fast) == _plan_fields(slow)
    mc_kw = {k: v for k, v in kw.items() if k not in ("gpu", "loss")}
    assert fast.ideal_ratio == sm.min_compression(*args, **mc_kw).ratio


def test_the_ideal_is_solved_on_the_plans_scenario_where_it_builds_the_same(monkeypatch):
    """The shortcut is taken where it applies (the ideal's build is not made again) and
    not with MG-WFBP, whose ideal is built with the buckets it planned."""
    builds = []
    build = Scenario.build.__func__
    monkeypatch.setattr(Scenario, "build", classmethod(
        lambda cls, *a, **k: builds.append(k.get("codec_cost")) or build(cls, *a, **k)))
    clear_caches()
    sm.plan_compression("llama-2-13b", 100e9, n=256, tp=2, gpus_per_node=8)
    assert 0.0 not in builds  # (the plan's own build leaves codec_cost to its default)
    builds.clear()
    clear_caches()
    sm.plan_compression("resnet50", 25e9, n=32, fusion="mg-wfbp")
    assert 0.0 in builds


@pytest.mark.parametrize("kw", [dict(ps_servers=4), dict(intra_bw=100e9)])
def test_a_plan_with_an_ignored_setting_warns_as_the_general_one(kw, monkeypatch):
    """A setting the scenario ignores is warned of by the ideal's build too, as before:
    the shortcut is not taken there, and the plan warns as often as the general code."""
    def count():
        clear_caches()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = sm.plan_compression("bert", 10e9, n=64, **kw)
        return len(caught), _plan_fields(plan)

    fast = count()
    monkeypatch.setattr(pl, "_SHARE_BUILT", False)
    assert count() == fast and fast[0] >= 2


def test_the_slowest_links_time_per_bit_of_one_point_is_numpys_maximum():
    """``_x_eff`` of a Python float (without numpy) equals numpy's maximum of the two
    terms, and is a float; a point it does not cover (a nan, an infinity, a negative) is
    numpy's, its warnings included."""
    rng = np.random.default_rng(7)
    specials = [0.0, 1e-300, np.inf, np.nan, 5e-12]
    for k1 in [1.0, 0.0, 0.5, *rng.uniform(0, 2, 5)]:
        for k2 in [1e-12, 3e-11, *rng.uniform(1e-13, 1e-10, 5)]:
            ev = pl._Evaluated(lines=None, n_collectives=0, collective="ring",
                               xmap=(float(k1), float(k2)))
            for x in [*specials, *rng.uniform(0, 1e-10, 10)]:
                x = float(x)
                with np.errstate(all="ignore"):
                    got, want = pl._x_eff(ev, x), np.maximum(k1 * np.asarray(x, float), k2)
                assert type(got) is (float if 0 <= x < np.inf else np.float64)
                assert got == want or (np.isnan(got) and np.isnan(want))
    ev = pl._Evaluated(lines=None, n_collectives=0, collective="ring", xmap=(0.0, 1e-11))
    with pytest.raises(RuntimeWarning):  # 0 x inf: numpy's warning, as before
        pl._x_eff(ev, np.inf)
    arr = np.array([1e-12, 1e-10])  # arrays: numpy's, as before
    ev = pl._Evaluated(lines=None, n_collectives=0, collective="ring", xmap=(1.0, 5e-11))
    assert np.array_equal(pl._x_eff(ev, arr), np.maximum(arr, 5e-11))


@pytest.mark.parametrize("model, kw", [("llama-2-13b", dict(tp=2, gpus_per_node=8)),
                                       ("bert", dict()), ("resnet50", dict(alpha=1e-5))])
def test_the_planners_uncompressed_cost_is_the_collectives(model, kw):
    """``_raw_cost``, now shared with the scenario's own lines, is
    :func:`~scalemodel.collectives.collective_cost` of the buckets, field for field."""
    from scalemodel.collectives import collective_cost

    clear_caches()
    sc = Scenario.build(model, **kw)
    for n in (2, 16, 128):
        got = pl._raw_cost(sc, n)
        want = collective_cost(sc.algorithm, sc.buckets.nbytes, n,
                               reduction=sc.profile.reduction, options=sc.options)
        for field in ("latency", "overhead", "bits", "intra_bits", "intra_bw"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), field
        assert sc.lines(n)[0] is not None  # (the scenario's lines find it in the cache)
