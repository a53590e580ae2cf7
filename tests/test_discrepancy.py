"""Model discrepancy (issue 17 item 2, "intervals that warn"): a fit that misses its own
calibration runs beyond their noise records the miss (eq. model-discrepancy), and every
interval on the cluster widens by it; a fit that reaches its runs changes nothing."""

import json
import math
import subprocess
import sys
import warnings

import attrs
import pytest

import scalemodel as sm
from scalemodel.discrepancy import (KEY, MAX_FACTOR, discrepancy_factor, discrepancy_record,
                                    miss_factor, widen_scaling, widen_time, widened_targets)
from scalemodel.intervals import iteration_time_interval, scaling_factor_interval

F = 1.25
RECORD = {"factor": F, "run": "bert 64 GPUs", "miss": 0.25, "runs_missed": 1}


def plain():
    """A fitted-like cluster: a ceiling with its interval and a second explanation."""
    return sm.ClusterProfile(
        name="plain", ceiling=8e9, intervals={"ceiling": (6e9, 10e9)},
        topology=sm.Topology(gpus_per_node=8),
        alternatives=[
            {"free": ["ceiling"], "values": {"ceiling": 8e9},
             "intervals": {"ceiling": [6e9, 10e9]}, "score": 0.0},
            {"free": ["collective_overhead"], "values": {"collective_overhead": 2e-3},
             "intervals": {"collective_overhead": [1e-3, 3e-3]}, "score": 0.8}],
        provenance={"source": "test"})


def discrepant(factor=F):
    c = plain()
    return attrs.evolve(c, extra=dict(c.extra, **{KEY: dict(RECORD, factor=factor,
                                                            miss=factor - 1.0)}))


# ------------------------------------------------------------------ the fit records it


def test_a_fit_that_reaches_its_runs_records_nothing():
    truth = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8), ceiling=12e9,
                              provenance={"source": "test"})
    runs = [dict(model="resnet50", n=n, bw=25e9, uncertainty=0.01, label=str(n),
                 scaling_factor=sm.scaling_factor("resnet50", n, 25e9, fusion="horovod",
                                                  cluster=truth)) for n in (16, 64)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.CalibrationWarning)
        fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=8)
    assert KEY not in fit.cluster.extra and miss_factor(fit.cluster) == 1.0
    assert "model_discrepancy" not in fit.message
    res = sm.iteration_time("bert", 64, "10Gbps", cluster=fit.cluster, fusion="horovod")
    assert "missed" not in res.model_discrepancy  # only the runs' noise (test_run_noise)
    # a starting cluster's record is not carried into a fit that reaches its runs
    again = sm.fit_cluster(runs, fusion="horovod", cluster=attrs.evolve(
        truth, extra={KEY: RECORD}))
    assert KEY not in again.cluster.extra


def test_a_missed_run_is_recorded_as_the_largest_miss():
    # one configuration measured twice, 0.9 and 0.3: no explanation reaches both
    runs = [{"model": "resnet50", "n": 64, "bw": 1e11, "scaling_factor": 0.9, "label": "a"},
            {"model": "resnet50", "n": 64, "bw": 1e11, "scaling_factor": 0.3, "label": "b"}]
    with pytest.warns(sm.CalibrationWarning, match="run 'a'|run 'b'"):
        fit = sm.fit_cluster(runs, fusion="horovod", fit=["sync_overhead"])
    rec = fit.cluster.extra[KEY]
    worst = max(fit.residuals, key=lambda r: abs(math.log1p(r.error)))
    assert rec["run"] == worst.label and rec["runs_missed"] == 2
    assert rec["miss"] == pytest.approx(worst.error, rel=1e-12)
    assert rec["factor"] == pytest.approx(math.exp(abs(math.log1p(worst.error))), rel=1e-12)
    assert f"run {worst.label!r}" in fit.message and "model_discrepancy" in fit.message
    # it survives the cluster file
    back = sm.ClusterProfile.from_dict(json.loads(json.dumps(fit.cluster.to_dict())))
    assert back.extra[KEY] == rec


def test_the_record_of_hand_made_misses():
    assert discrepancy_record(["a", "b"], [1.0, 1.0], [1.1, 0.8], []) is None
    rec = discrepancy_record(["a", "b", "c"], [1.0, 1.0, 1.0], [1.1, 0.8, 2.0], [0, 1])
    # |ln(1/0.8)| = 0.223 beats |ln(1/1.1)| = 0.095; run c was not missed
    assert rec == {"factor": pytest.approx(1.25), "run": "b", "miss": pytest.approx(0.25),
                   "runs_missed": 2}
    assert discrepancy_record(["a"], [1.0], [1e6], [0])["factor"] == MAX_FACTOR


# ------------------------------------------------------------------ every interval widens


def test_iteration_time_intervals_widen_by_the_factor():
    kw = dict(fusion="horovod")
    a = sm.iteration_time("bert", 64, "10Gbps", cluster=plain(), **kw)
    b = sm.iteration_time("bert", 64, "10Gbps", cluster=discrepant(), **kw)
    assert (b.total, b.scaling_factor) == (a.total, a.scaling_factor)  # point answers stay
    assert b.total_interval == pytest.approx((a.total_interval[0] / F,
                                              a.total_interval[1] * F), rel=1e-12)
    lo, hi = a.scaling_factor_interval
    assert b.scaling_factor_interval == pytest.approx((lo / F, hi * F), rel=1e-12)
    # the scaling factor's ends are the single-worker time over the time's ends
    t1 = b.scaling_factor * b.total
    assert b.scaling_factor_interval == pytest.approx(
        (t1 / b.total_interval[1], t1 / b.total_interval[0]), rel=1e-9)
    assert "1.25 times" in b.model_discrepancy and "'bert 64 GPUs'" in b.model_discrepancy
    # the CLI's helpers give the same ends
    t = iteration_time_interval("bert", 64, 10e9, cluster=discrepant(), **kw)
    s = scaling_factor_interval("bert", 64, 10e9, cluster=discrepant(), **kw)
    assert t.pair == pytest.approx(b.total_interval, rel=1e-12)
    assert s.pair == pytest.approx(b.scaling_factor_interval, rel=1e-12)
    assert "widened 1.25 times" in s.describe(lambda v: f"{v:.3f}")


def test_the_widening_functions():
    assert widen_scaling(0.5, 0.9, 1.25) == (0.4, 1.125)  # as the time's ends move
    assert widen_scaling(0.5, 1.02, 1.25) == (0.4, pytest.approx(1.275))  # sharded: > 1
    assert widen_scaling(None, 0.9, 2.0) == (None, 1.8)
    assert widen_time(1.0, None, 2.0) == (0.5, None)  # unbounded stays unbounded
    assert widen_time(1.0, 2.0, 1.0) == (1.0, 2.0)
    assert widened_targets(0.9, 1.25) == (pytest.approx(0.72), None)  # 1.125: unreachable
    assert widened_targets(0.6, 1.25) == (pytest.approx(0.48), pytest.approx(0.75))
    # bounded: no worker of an unsharded job beats one worker alone
    assert widen_scaling(0.5, 0.9, 1.25, 1.0) == (0.4, 1.0)
    assert widen_scaling(0.5, 0.7, 1.25, 1.0) == (0.4, 0.875)  # the bound not reached
    assert widen_scaling(0.5, 1.02, 1.25, 1.0) == (0.4, 1.02)  # never narrowed
    assert widen_time(1.0, 2.0, 1.25, 0.9) == (0.9, 2.5)
    assert widen_time(1.0, 2.0, 1.25, 0.5) == (0.8, 2.5)
    assert widen_time(0.8, 2.0, 1.25, 0.9) == (0.8, 2.5)  # never narrowed


def test_an_unsharded_job_is_not_widened_past_one_worker():
    # DDP on a few fast links scales near 1: widened both ways its interval passed 1
    # (0.7044 to 1.0646 in a user's calibration), a step faster than one worker's alone
    kw = dict(fusion="horovod")
    for cluster in (discrepant(), discrepant(3.0)):
        it = sm.iteration_time("resnet50", 16, "400Gbps", cluster=cluster, **kw)
        t1 = it.scaling_factor * it.total
        assert it.scaling_factor_interval[1] == 1.0
        assert it.total_interval[0] == pytest.approx(t1, rel=1e-12)
        s = scaling_factor_interval("resnet50", 16, 400e9, cluster=cluster, **kw)
        t = iteration_time_interval("resnet50", 16, 400e9, cluster=cluster, **kw)
        assert s.pair == pytest.approx(it.scaling_factor_interval, rel=1e-12)
        assert t.pair == pytest.approx(it.total_interval, rel=1e-12)
        plan = sm.plan_compression("resnet50", "400Gbps", n=16, cluster=cluster,
                                   compressors=["none", "fp16"], **kw)
        assert all(r.interval[1] <= 1.0 for r in plan.rows)
    # a sharded job's sharded optimizer step may beat one worker: not bounded
    z = sm.iteration_time("llama-2-7b", 16, "400Gbps", cluster=discrepant(3.0),
                          sharding="zero3", gpus_per_node=8)
    assert z.scaling_factor_interval[1] == pytest.approx(
        sm.iteration_time("llama-2-7b", 16, "400Gbps", cluster=plain(), sharding="zero3",
                          gpus_per_node=8).scaling_factor_interval[1] * 3.0, rel=1e-9)


@pytest.mark.parametrize("solver, field", [(sm.min_compression, "ratio"),
                                           (sm.required_bandwidth, "bw")])
def test_solver_intervals_are_solved_again_at_the_moved_targets(solver, field):
    args = ("bert",) + (("10Gbps",) if field == "ratio" else ())
    kw = dict(n=64, fusion="horovod")
    t = 0.6
    at = {x: solver(*args, target=x, cluster=plain(), **kw).interval
          for x in (t, t / F, t * F)}
    res = solver(*args, target=t, cluster=discrepant(), **kw)
    assert getattr(res, field) == getattr(solver(*args, target=t, cluster=plain(), **kw),
                                          field)
    low = min(at[t][0], at[t / F][0])
    high = None if None in (at[t][1], at[t * F][1]) else max(at[t][1], at[t * F][1])
    assert res.interval[0] == pytest.approx(low, rel=1e-9)
    assert (res.interval[1] is None) == (high is None)
    if high is not None:
        assert res.interval[1] == pytest.approx(high, rel=1e-9)
    assert "widened 1.25 times" in res.message
    # a target the factor moves beyond linear scaling: the pessimistic end is unbounded
    assert solver(*args, target=0.85, cluster=discrepant(), **kw).interval[1] is None


def test_a_plan_widens_its_rows_but_not_their_speedups():
    kw = dict(n=64, bw="10Gbps", fusion="horovod", compressors=["none", "fp16", "topk"],
              target=0.5)
    a = sm.plan_compression("bert", cluster=plain(), **kw)
    b = sm.plan_compression("bert", cluster=discrepant(), **kw)
    for ra, rb in zip(a.rows, b.rows):
        assert rb.compressor == ra.compressor
        if ra.setting == rb.setting:  # the same configuration: the same views, widened
            lo, hi = ra.interval
            assert rb.interval == pytest.approx(widen_scaling(lo, hi, F), rel=1e-9)
            assert rb.speedup_interval == pytest.approx(ra.speedup_interval, rel=1e-9)
        assert rb.feasible == (rb.interval[0] >= 0.5)  # the widened low end decides
    assert "widened 1.25 times" in b.message and "widened" not in a.message
    # no compression needed only when the uncompressed low end, widened, reaches it
    kw = dict(n=16, bw="100Gbps", fusion="horovod", compressors=["none", "fp16"],
              target=0.35)
    a = sm.plan_compression("resnet50", cluster=plain(), **kw)
    b = sm.plan_compression("resnet50", cluster=discrepant(), **kw)
    none_a, none_b = (next(r for r in x.rows if r.compressor == "none") for x in (a, b))
    assert a.no_compression_needed and none_a.interval[0] >= 0.35
    assert none_b.interval[0] == pytest.approx(none_a.interval[0] / F, rel=1e-9)
    assert not b.no_compression_needed and not none_b.feasible
    # break-even line rates do not move: both sides of the crossing move together
    x = sm.breakeven_bandwidth("bert", "fp16", n=64, fusion="horovod", cluster=plain())
    y = sm.breakeven_bandwidth("bert", "fp16", n=64, fusion="horovod", cluster=discrepant())
    assert x == y


def test_the_cli_says_why_its_intervals_are_wide(tmp_path):
    path = sm.save_cluster(discrepant(), tmp_path / "c.json")
    out = subprocess.run([sys.executable, "-m", "scalemodel", "iteration", "--model",
                          "bert", "--n", "64", "--bw", "10Gbps", "--fusion", "horovod",
                          "--cluster", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "widened 1.25 times both ways" in out and "'bert 64 GPUs'" in out
    data = json.loads(subprocess.run(
        [sys.executable, "-m", "scalemodel", "scaling", "--model", "bert", "--n", "64",
         "--bw", "10Gbps", "--fusion", "horovod", "--cluster", str(path), "--json"],
        capture_output=True, text=True, check=True).stdout)
    lo, hi = data["results"][0]["scaling_factor_interval"]
    ref = scaling_factor_interval("bert", 64, 10e9, cluster=discrepant(), fusion="horovod")
    assert (lo, hi) == pytest.approx(ref.pair, rel=1e-9)


def test_the_cli_explains_its_widest_interval(tmp_path):
    # several rows: the note is the widest row's (it was the first wide row's, whose
    # explanations' answers did not apply to the much wider rows below it)
    path = sm.save_cluster(plain(), tmp_path / "c.json")
    out = subprocess.run([sys.executable, "-m", "scalemodel", "scaling", "--model", "bert",
                          "--n", "16,256", "--bw", "100Gbps", "--fusion", "horovod",
                          "--cluster", str(path)],
                         capture_output=True, text=True, check=True).stdout
    widths = {n: scaling_factor_interval("bert", n, 100e9, cluster=plain(),
                                         fusion="horovod") for n in (16, 256)}
    widest = max(widths, key=lambda n: (widths[n].high - widths[n].low) / widths[n].value)
    notes = [line for line in out.splitlines() if line.startswith("n=")]
    assert len(notes) == 1 and notes[0].startswith(f"n={widest}, ")


# ------------------------------------------------------------------ bad records


@pytest.mark.parametrize("record, field", [
    ({"factor": 0.5}, "factor"), ({"factor": math.nan}, "factor"),
    ({"factor": 1e308}, "factor"), ({"factor": "2"}, "factor"), ({"factor": True}, "factor"),
    ({}, "factor"), ({"factor": 1.2, "miss": -2.0}, "miss"),
    ({"factor": 1.2, "run": 5}, "run"), ([1.2], "model_discrepancy"),
    ({"factor": 10**400}, "factor"), ({"factor": 1.2, "miss": 10**400}, "miss"),
    ({"factor": 2.0, "mis": 1.0}, "mis"), ({"factor": 2.0, "runs_missed": 0}, "runs_missed"),
    ({"factor": 2.0, "runs_missed": "many"}, "runs_missed"),
    ({"factor": 2.0, "miss": 0.0}, "factor"),  # the miss says 1
    ({"factor": 1.0, "miss": 5.0}, "factor"), ({"factor": 2.0, "capped": "yes"}, "capped"),
])
def test_a_bad_record_is_refused_by_name(record, field):
    with pytest.raises(sm.InvalidParameterError, match=field):
        sm.ClusterProfile(provenance={"source": "test"}, extra={KEY: record})
    data = dict(sm.ClusterProfile(provenance={"source": "test"}).to_dict(), **{KEY: record})
    with pytest.raises(sm.ProfileFormatError, match=field):
        sm.ClusterProfile.from_dict(json.loads(json.dumps(data)))


def test_a_record_is_checked_where_it_is_read():
    # numpy numbers are numbers; a capped record states a larger miss than its factor
    import numpy as np
    sm.ClusterProfile(provenance={"source": "t"}, extra={KEY: {"factor": np.float32(2.0)}})
    sm.ClusterProfile(provenance={"source": "t"}, extra={
        KEY: {"factor": MAX_FACTOR, "miss": 500.0, "capped": True}})
    c = plain()
    c.extra[KEY] = {"factor": math.nan}  # changed after the cluster was made
    with pytest.raises(sm.InvalidParameterError, match="factor"):
        sm.iteration_time("bert", 64, "10Gbps", cluster=c, fusion="horovod")


def test_one_data_parallel_worker_is_not_widened():
    kw = dict(fusion="horovod")
    a = sm.iteration_time("resnet50", 1, "10Gbps", cluster=plain(), **kw)
    b = sm.iteration_time("resnet50", 1, "10Gbps", cluster=discrepant(), **kw)
    assert (b.total_interval, b.scaling_factor_interval) == (a.total_interval,
                                                             a.scaling_factor_interval)
    assert b.model_discrepancy == ""
    m = sm.min_compression("resnet50", "10Gbps", n=1, target=0.9, cluster=discrepant(), **kw)
    assert m.ratio == 1.0 and m.interval[1] is not None and "widened" not in m.message
    p = sm.plan_compression("resnet50", "10Gbps", n=1, target=0.9, cluster=discrepant(),
                            compressors=["none", "fp16"], **kw)
    assert p.no_compression_needed and "widened" not in p.message
    # a tensor-parallel job of tp GPUs is one data-parallel replica too
    t = sm.iteration_time("llama-2-7b", 8, "100Gbps", tp=8, cluster=discrepant())
    assert t.model_discrepancy == ""


def test_a_plan_recommends_the_compressor_that_reaches_the_target_where_none_does_not():
    kw = dict(n=16, fusion="horovod", target=0.35, compressors=["none", "fp16"])
    p = sm.plan_compression("resnet50", "100Gbps", cluster=discrepant(), **kw)
    none = next(r for r in p.rows if r.compressor == "none")
    assert not none.feasible and not p.no_compression_needed
    assert p.best is not None and p.best.compressor == "fp16" and p.best.feasible
    assert p.best_interval == pytest.approx(p.best.interval, rel=1e-9)
    assert "no compressor reaches" not in p.message


def test_compressed_runs_that_the_codec_fit_misses_are_recorded():
    truth = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8), ceiling=12e9,
                              provenance={"source": "test"})
    runs = []
    for n in (16, 64):
        for comp in (None, "fp16"):
            sf = (sm.scaling_factor("resnet50", n, 25e9, fusion="horovod", cluster=truth)
                  if comp is None else sm.compressed_scaling_factor(
                      "resnet50", comp, n, 25e9, fusion="horovod", cluster=truth))
            runs.append(dict(model="resnet50", n=n, bw=25e9, scaling_factor=sf,
                             uncertainty=0.01, label=f"{comp or 'none'}{n}",
                             **({"compressor": comp} if comp else {})))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.CalibrationWarning)
        fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=8)
    assert KEY not in fit.cluster.extra  # the codec fit reaches its runs
    bad = dict(runs[-1], scaling_factor=runs[-1]["scaling_factor"] / 2, label="fp16-bad")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = sm.fit_cluster(runs + [bad], fusion="horovod", gpus_per_node=8)
    assert any("compressed run 'fp16-bad'" in str(w.message) for w in caught)
    rec = fit.cluster.extra[KEY]
    row = next(r for f in fit.codec.values() for r in f.residuals if r[0] == "fp16-bad")
    assert rec["run"] == "fp16-bad" and rec["miss"] == pytest.approx(row[2] / row[1] - 1)
    assert "model_discrepancy" in fit.message


@pytest.mark.parametrize("mp", [dict(tp=2), dict(tp=8, pp=2, microbatches=8)])
def test_tensor_parallel_intervals_agree_between_answers(mp):
    # the plan's interval clusters are built with the job's tp and pp (they were built as
    # pure data parallelism), and a required line rate's interval is per NIC, as its point
    kw = dict(cluster=plain(), **mp)
    it = sm.iteration_time("llama-2-7b", 32, "25Gbps", **kw)
    p = sm.plan_compression("llama-2-7b", "25Gbps", n=32, compressors=["none"], **kw)
    assert p.rows[0].interval == pytest.approx(it.scaling_factor_interval, rel=1e-9)
    r = sm.required_bandwidth("llama-2-7b", n=32, target=1e-3, **kw)
    assert r.interval[0] <= r.bw <= r.interval[1]


def test_scaling_json_says_why_the_interval_is_wide(tmp_path):
    path = sm.save_cluster(discrepant(), tmp_path / "c.json")
    data = json.loads(subprocess.run(
        [sys.executable, "-m", "scalemodel", "scaling", "--model", "bert", "--n", "64",
         "--bw", "10Gbps", "--fusion", "horovod", "--cluster", str(path), "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert "widened 1.25 times" in data["results"][0]["model_discrepancy"]
