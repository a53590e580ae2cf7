"""Codec costs fitted from compressed runs (scalemodel.fit_codec, fit_cluster's second
step): a known cost is recovered from a generated run, bad input is refused, costs that
would be negative or unbounded are said and not used, the planner uses what was fitted."""

import math

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.compressors import CodecCost, codec_costs_for
from scalemodel.fit_codec import MAX_SCALE, fit_codec
from scalemodel.runs import load_runs

BW = 10e9
T1 = 0.156  # single-worker step [s] (the GRACE ResNet-50 V100 runs: 64 / 409.5 img/s)


@pytest.fixture(scope="module")
def profile():
    return sm.load_profile("resnet50").scaled_to(T1)


def _start(profile, family, implementation="grace-tf"):
    from scalemodel.codec_costs import profile_gpu
    return codec_costs_for(None, gpu=profile_gpu(profile, None),
                           implementation=implementation)[family]


def _cluster_with(cost, key):
    return sm.ClusterProfile(name="truth", utilization=0.9, codec_costs={key: {
        "encode": cost.encode, "decode": cost.decode, "encode_per_rank": cost.encode_per_rank,
        "decode_per_rank": cost.decode_per_rank, "launch": cost.launch}})


def _sf(profile, spec, n, cluster, implementation="grace-tf"):
    return sm.compressed_scaling_factor(profile, spec, n, BW, cluster=cluster,
                                        fusion="horovod", gpus_per_node=1,
                                        implementation=implementation)


def _run(profile, n, sf, spec, implementation="grace-tf", **kw):
    return {"model": profile, "n": n, "bw": BW, "iteration_time": T1 / sf,
            "single_worker_time": T1, "compressor": spec,
            "implementation": implementation, "label": f"{spec} n={n}", **kw}


@pytest.mark.parametrize("spec,family,factor", [("topk:0.01", "topk", 7.0),
                                                ("powersgd:1", "powersgd", 30.0),
                                                ("signsgd", "signsgd", 3.0)])
def test_recovers_a_known_codec_cost(profile, spec, family, factor):
    start = _start(profile, family)
    true = CodecCost(encode=factor * start.encode, decode=factor * start.decode,
                     encode_per_rank=factor * start.encode_per_rank,
                     decode_per_rank=factor * start.decode_per_rank, launch=start.launch)
    truth = _cluster_with(true, f"grace-tf/{family}")
    sf = _sf(profile, spec, 8, truth)
    base = sm.ClusterProfile(name="held", utilization=0.9)
    res = fit_codec(base, [_run(profile, 8, sf, spec)], fusion="horovod")
    fit = res.fits[f"grace-tf/{family}"]
    assert fit.status == "fitted" and fit.used
    assert fit.scale == pytest.approx(factor, rel=1e-6)
    assert fit.cost.encode == pytest.approx(true.encode, rel=1e-6)
    assert fit.cost.launch == start.launch  # held: one run fits one parameter
    lo, hi = fit.scale_interval
    assert lo < factor < hi
    # the fitted cluster reproduces the run, and the planner uses the fitted cost
    assert _sf(profile, spec, 8, res.cluster) == pytest.approx(sf, rel=1e-6)
    assert res.cluster.intervals[f"codec.grace-tf/{family}"][0] < true.encode


def test_two_runs_of_one_family_fit_the_launch_too(profile):
    start = _start(profile, "topk")
    true = CodecCost(encode=5 * start.encode, decode=5 * start.decode,
                     launch=4 * start.launch)
    truth = _cluster_with(true, "grace-tf/topk")
    runs = [_run(profile, n, _sf(profile, "topk:0.01", n, truth), "topk:0.01",
                 uncertainty=0.002) for n in (2, 8)]
    runs.append(_run(profile, 8, _sf(profile, "topk:0.1", 8, truth), "topk:0.1",
                     uncertainty=0.002))
    res = fit_codec(sm.ClusterProfile(utilization=0.9), runs, fusion="horovod")
    fit = res.fits["grace-tf/topk"]
    assert fit.used and fit.launch_fitted and "fitted too" in fit.message
    assert fit.cost.launch == pytest.approx(true.launch, rel=0.02)
    assert fit.scale == pytest.approx(5.0, rel=0.02)
    assert fit.scale_interval[0] < 5.0 < fit.scale_interval[1]
    assert len(fit.residuals) == 3
    for label, measured, fitted in fit.residuals:
        assert fitted == pytest.approx(measured, rel=0.01), label
    # one run of the family: the launch stays the starting one
    one = fit_codec(sm.ClusterProfile(utilization=0.9), runs[:1], fusion="horovod")
    assert not one.fits["grace-tf/topk"].launch_fitted
    assert one.fits["grace-tf/topk"].cost.launch == start.launch


def test_fit_cluster_fits_the_codec_on_top_and_keeps_the_uncompressed_fit(profile):
    plain = {"model": profile, "n": 8, "bw": BW, "iteration_time": T1 / 0.7,
             "single_worker_time": T1, "label": "none n=8"}
    alone = sm.fit_cluster([plain], fusion="horovod", gpus_per_node=1)
    start = _start(profile, "topk")
    true = CodecCost(encode=9 * start.encode, decode=9 * start.decode, launch=start.launch)
    truth = sm.ClusterProfile(**{k: getattr(alone.cluster, k) for k in
                                 ("utilization", "ceiling", "compute_slowdown",
                                  "sync_overhead")},
                              codec_costs={"grace-tf/topk": {"encode": true.encode,
                                                             "decode": true.decode,
                                                             "launch": true.launch}})
    sf = _sf(profile, "topk:0.01", 8, truth)
    both = sm.fit_cluster([plain, _run(profile, 8, sf, "topk:0.01", implementation=None)],
                          fusion="horovod", gpus_per_node=1, implementation="grace-tf")
    # the uncompressed fit is unchanged by the compressed run
    assert both.free == alone.free
    for k, p in alone.parameters.items():
        assert both.parameters[k].value == p.value
    assert both.codec["grace-tf/topk"].scale == pytest.approx(9.0, rel=1e-3)
    assert "grace-tf/topk" in both.cluster.codec_costs
    assert "codec costs" in both.message
    # every planner answer uses it: the plan and the break-even rate move with it
    plan = sm.plan_compression(profile, BW, n=8, cluster=both.cluster, fusion="horovod",
                               gpus_per_node=1, implementation="grace-tf",
                               compressors=["topk:0.01"])
    row = next(r for r in plan.rows if r.compressor == "topk")
    assert row.scaling_factor == pytest.approx(sf, rel=1e-3)
    kw = dict(n=8, fusion="horovod", gpus_per_node=1, implementation="grace-tf")
    slower = sm.breakeven_bandwidth(profile, "topk:0.01", cluster=both.cluster, **kw)
    default = sm.breakeven_bandwidth(profile, "topk:0.01", cluster=alone.cluster, **kw)
    assert slower < default  # a 9x dearer codec wins only on slower links


def test_negative_cost_is_said_and_not_used(profile):
    # faster than the model without any codec time: the cost would be negative
    slow = sm.ClusterProfile(utilization=0.1)  # the compressed run is network-bound
    sf0 = _sf(profile, "topk:0.01", 8, sm.ClusterProfile(utilization=0.1, codec_costs={
        "grace-tf/topk": {"encode": 0.0, "decode": 0.0, "launch": 0.0}}))
    assert sf0 < 0.85
    res = fit_codec(slow, [_run(profile, 8, sf0 * 1.15, "topk:0.01", uncertainty=0.01)],
                    fusion="horovod")
    fit = res.fits["grace-tf/topk"]
    assert fit.status == "negative" and not fit.used
    assert "not used" in fit.message and "negative" in fit.message
    assert "grace-tf/topk" not in res.cluster.codec_costs


def test_unbounded_cost_is_said_and_not_used(profile):
    # a compressed run on one worker: no codec runs, nothing bounds its cost
    res = fit_codec(sm.ClusterProfile(), [_run(profile, 1, 1.0, "topk:0.01")],
                    fusion="horovod")
    fit = res.fits["grace-tf/topk"]
    assert not fit.used and fit.status in ("unbounded", "negative")
    assert "not used" in fit.message
    # a run slower than MAX_SCALE times the starting costs can explain
    start = _start(profile, "topk")
    huge = CodecCost(encode=3 * MAX_SCALE * start.encode,
                     decode=3 * MAX_SCALE * start.decode, launch=start.launch)
    sf = _sf(profile, "topk:0.01", 8, _cluster_with(huge, "grace-tf/topk"))
    res = fit_codec(sm.ClusterProfile(), [_run(profile, 8, sf, "topk:0.01")],
                    fusion="horovod")
    fit = res.fits["grace-tf/topk"]
    assert fit.status == "unbounded" and not fit.used
    assert "grace-tf/topk" not in res.cluster.codec_costs


def test_a_compressor_that_cannot_be_applied_names_the_run(profile):
    # sign, sparse and low-rank compressors do not compose with a reduce-scatter
    run = _run(profile, 8, 0.5, "topk:0.01", implementation=None, sharding="zero2")
    run["label"] = "the sharded one"
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.compressor.*"
                                                       r"the sharded one.*compose"):
        fit_codec(sm.ClusterProfile(), [run], fusion="ddp")
    # GRACE's per-tensor collectives cannot go through the sharding's reduce-scatters
    run = _run(profile, 8, 0.5, "fp16", implementation="grace-tf", sharding="zero2")
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.compressor.*"
                                                       r"per tensor"):
        fit_codec(sm.ClusterProfile(), [run], fusion="ddp")
    # a fusion that does not describe the run is named as the fusion
    run = _run(profile, 8, 0.5, "fp16", implementation=None, sharding="zero3")
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.fusion"):
        fit_codec(sm.ClusterProfile(), [run], fusion="ddp")


def test_fit_cluster_needs_an_uncompressed_distributed_run(profile):
    with pytest.raises(sm.InvalidParameterError, match="uncompressed run"):
        sm.fit_cluster([_run(profile, 8, 0.5, "topk:0.01")], fusion="horovod",
                       gpus_per_node=1)


@pytest.mark.parametrize("bad,match", [({"compressor": "topkk"}, r"runs\[0\]\.compressor"),
                                       ({"implementation": "gracey"},
                                        r"runs\[0\]\.implementation"),
                                       ({"compressor": "bf16", "implementation": "grace-tf"},
                                        "not provided by")])
def test_bad_compressor_keys_name_the_run_field(bad, match):
    run = {"model": "resnet50", "n": 8, "bw": "10Gbps", "iteration_time": 0.3, **bad}
    with pytest.raises((sm.InvalidParameterError, sm.UnknownNameError), match=match):
        load_runs([run])


def test_run_keys_read_from_a_csv(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("model,n,bw,iteration_time,compressor,implementation\n"
                    "resnet50,8,10Gbps,0.3,,\n"
                    "resnet50,8,10Gbps,0.4,topk:0.01,grace-tf\n")
    runs = load_runs(path)
    assert runs[0].compressor is None and runs[0].implementation is None
    assert runs[1].compressor.density == 0.01 and runs[1].compressor.per_tensor
    assert runs[1].implementation == "grace-tf"


def test_the_interval_widens_the_answers(profile):
    start = _start(profile, "topk")
    true = CodecCost(encode=7 * start.encode, decode=7 * start.decode, launch=start.launch)
    sf = _sf(profile, "topk:0.01", 8, _cluster_with(true, "grace-tf/topk"))
    res = fit_codec(sm.ClusterProfile(utilization=0.9),
                    [_run(profile, 8, sf, "topk:0.01", uncertainty=0.05)], fusion="horovod")
    slow, fast = res.cluster.corners()
    s_slow, s_fast = (_sf(profile, "topk:0.01", 8, c) for c in (slow, fast))
    assert s_slow < sf < s_fast
    assert math.isfinite(s_slow) and np.isfinite(s_fast)


@pytest.mark.parametrize("name", ["fit_codec", "compressed_runs"])
def test_public_functions_document_every_parameter_with_a_unit(name):
    import inspect
    import re

    from scalemodel import fit_codec as module
    from test_docstrings import documented_parameters

    fn = getattr(module, name)
    documented = documented_parameters(fn.__doc__)
    for p in inspect.signature(fn).parameters.values():
        assert re.search(r"\[[^\]]+\]", documented[p.name]), (name, p.name)


def test_every_explanation_of_the_uncompressed_runs_reproduces_the_compressed_run(
        profile, tmp_path):
    plain = {"model": profile, "n": 8, "bw": BW, "iteration_time": T1 / 0.67,
             "single_worker_time": T1, "label": "none n=8"}
    sf = 0.45
    fit = sm.fit_cluster([plain, _run(profile, 8, sf, "topk:0.01")], fusion="horovod",
                         gpus_per_node=1)
    cluster = fit.cluster
    assert len(cluster.alternatives) > 1  # one run: several explanations
    scales = set()
    for i in range(len(cluster.alternatives)):
        alt = cluster.with_alternative(i)
        assert _sf(profile, "topk:0.01", 8, alt) == pytest.approx(sf, rel=1e-4)
        scales.add(round(alt.codec_costs["grace-tf/topk"]["encode"], 20))
        assert "codec.grace-tf/topk" in alt.intervals
    assert len(scales) > 1  # the explanations need different codec costs
    # the costs of every explanation survive the cluster's JSON
    again = sm.load_cluster(sm.save_cluster(cluster, tmp_path / "c.json"))
    for i in range(len(cluster.alternatives)):
        assert _sf(profile, "topk:0.01", 8, again.with_alternative(i)) == \
            pytest.approx(sf, rel=1e-4)
