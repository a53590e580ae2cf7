"""plan_compression, compressed_scaling_factor, breakeven_bandwidth, snippets, CLI, plot."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import scalemodel as sm
from conftest import make_profile
from des_reference import simulate_compressed_iteration
from scalemodel.codec_costs import profile_gpu
from scalemodel.compressors import DEFAULT_CODEC_COSTS

FREE = {f: {"encode": 0.0, "decode": 0.0} for f in DEFAULT_CODEC_COSTS}


def free_cluster(**kw):
    return sm.ClusterProfile(provenance={"source": "test"}, codec_costs=FREE, **kw)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving-doubling", "ps"])
@pytest.mark.parametrize("fusion", ["ddp", "horovod", "none"])
def test_none_is_the_core_model(algorithm, fusion):
    bw = np.logspace(9, 11.5, 7)
    for model in ("resnet50", "bert"):
        got = sm.compressed_scaling_factor(model, "none", 48, bw, algorithm=algorithm,
                                           fusion=fusion, alpha=2e-6)
        ref = sm.scaling_factor(model, 48, bw, algorithm=algorithm, fusion=fusion, alpha=2e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_fp16_without_codec_cost_is_compression_2():
    # free reduction and free codec: fp16 is exactly the core model at ratio 2
    prof = make_profile(np.full(40, 4_000_000), np.full(40, 1e-3),
                        reduction=sm.ReductionCost(name="free"))
    bw = np.array([1e9, 3e9, 10e9])
    got = sm.compressed_scaling_factor(prof, "fp16", 32, bw, cluster=free_cluster())
    ref = sm.scaling_factor(prof, 32, bw, compression=2.0)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert ref[0] < 0.5  # bandwidth-bound case
    plan = sm.plan_compression(prof, 1e9, n=32, compressors=["fp16"], cluster=free_cluster())
    assert plan.rows[0].scaling_factor == pytest.approx(ref[0], rel=1e-12)
    assert plan.rows[0].ratio == 2 and plan.rows[0].effective_ratio == pytest.approx(2)


def test_topk_allgather_bytes_grow_with_n():
    rows = {n: sm.plan_compression("bert", "10Gbps", n=n, compressors=["signsgd"]).rows[0]
            for n in (4, 16, 64)}
    assert [rows[n].ratio for n in rows] == [pytest.approx(rows[4].ratio)] * 3  # 32x each
    # the ring sends 2(n-1)/n S, the all-gather (n-1) S/32: effective 64/n
    for n, row in rows.items():
        assert row.effective_ratio == pytest.approx(64 / n, rel=2e-3)
    assert "all-gather traffic grows with n" in rows[64].note


def test_bert_10gbps_plan():
    plan = sm.plan_compression("bert", "10Gbps")
    assert not plan.no_compression_needed
    assert plan.best is plan.rows[0] and plan.best.compressor == "powersgd"
    assert plan.best.feasible and plan.best.scaling_factor >= 0.9
    assert plan.uncompressed_scaling_factor == pytest.approx(
        sm.scaling_factor("bert", 64, 10e9))
    assert plan.ideal_ratio == pytest.approx(sm.min_compression("bert", "10Gbps").ratio)
    # minimal: one rank more no longer reaches the target
    k = plan.best.setting
    assert sm.compressed_scaling_factor("bert", sm.PowerSGD(rank=k), 64, 10e9) >= 0.9
    assert sm.compressed_scaling_factor("bert", sm.PowerSGD(rank=k + 1), 64, 10e9) < 0.9
    topk = next(r for r in plan.rows if r.compressor == "topk")
    assert topk.feasible
    assert sm.compressed_scaling_factor("bert", sm.TopK(density=topk.setting * 1.01), 64,
                                        10e9) < 0.9
    fp16 = next(r for r in plan.rows if r.compressor == "fp16")
    assert not fp16.feasible and "not enough" in fp16.note
    # ranking: feasible first, the fastest (predicted speedup) first
    feas = [r for r in plan.rows if r.feasible]
    assert plan.rows[: len(feas)] == tuple(feas)
    assert [r.speedup for r in feas] == sorted((r.speedup for r in feas), reverse=True)
    for r in plan.rows:
        assert r.speedup == pytest.approx(r.scaling_factor / plan.uncompressed_scaling_factor,
                                          rel=1e-12)
    text = str(plan)
    for name in sm.COMPRESSORS:
        assert name in text
    ideal = sm.min_compression("bert", "10Gbps").ratio
    assert "powersgd" in plan.message and f"{ideal:.3g}x" in plan.message


def test_int8_bits_search_is_minimal():
    plan = sm.plan_compression("bert", "10Gbps", n=4, compressors=["int8"])
    row = plan.rows[0]
    assert row.feasible and 1 <= row.setting < 8
    more = sm.IntQuantizer(bits=int(row.setting) + 1)
    assert sm.compressed_scaling_factor("bert", more, 4, 10e9) < 0.9


@pytest.mark.parametrize("name", ["topk", "randomk", "int8"])
def test_scaling_factor_monotone_in_the_knob(name):
    comp = sm.get_compressor(name)
    values = ([1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0] if name != "int8"
              else list(range(1, 9)))
    bw = np.array([1e9, 10e9, 100e9])
    sf = np.array([sm.compressed_scaling_factor("bert", comp.with_setting(v), 16, bw)
                   for v in values])
    assert np.all(np.diff(sf, axis=0) <= 1e-15)  # less aggressive: never faster


def test_no_compression_needed():
    plan = sm.plan_compression("resnet50", "100Gbps")
    assert plan.no_compression_needed and plan.best is None
    assert plan.message.startswith("no compression needed")
    assert plan.rows[0].compressor == "none"
    assert "no communication hook" in plan.snippet()


def test_latency_bound_says_so():
    plan = sm.plan_compression("bert", "1Gbps", alpha=1e-3)
    assert plan.best is None and not plan.no_compression_needed
    assert "latency-bound" in plan.message


def test_codec_cost_too_high_says_so():
    slow = sm.ClusterProfile(provenance={"source": "test"}, codec_costs={
        f: {"encode": 1e-8, "decode": 1e-8} for f in DEFAULT_CODEC_COSTS})
    plan = sm.plan_compression("bert", "10Gbps", cluster=slow,
                               compressors=["fp16", "powersgd", "none"])
    assert plan.best is None
    assert "encode/decode" in plan.message and "no compressor reaches" in plan.message



def test_plan_says_where_codec_costs_come_from():
    v100 = sm.plan_compression("bert", "10Gbps")
    assert "measured on an NVIDIA H100" in v100.codec_note
    assert "Tesla V100-PCIE-32GB" in v100.codec_note and "codec_bench" in v100.codec_note
    assert str(v100).endswith(v100.codec_note)
    h100 = sm.plan_compression("bert-base-h100", "10Gbps")
    assert "H100" in h100.codec_note and "ran on" not in h100.codec_note
    # a cluster with some families measured: those from the cluster, the rest defaults
    lab = sm.ClusterProfile(name="lab", provenance={"source": "test"},
                            codec_costs={"fp16": {"encode": 1e-12, "decode": 1e-12}})
    both = sm.plan_compression("bert", "10Gbps", cluster=lab, compressors=["fp16", "topk"])
    assert both.codec_note.startswith("codec costs: cluster lab for fp16, else the defaults")
    only = sm.plan_compression("bert", "10Gbps", cluster=lab, compressors=["fp16"])
    assert only.codec_note == "codec costs: measured, cluster lab"
    assert sm.plan_compression("bert", "10Gbps", compressors=["none"]).codec_note == ""


def test_planner_matches_discrete_event_reference():
    """Random compressors, models, algorithms and fusions: the planner's scaling factor
    against the discrete-event reference with the same per-tensor codec costs."""
    rng = np.random.default_rng(7)
    for trial in range(24):
        model = ["resnet50", "bert", "vgg16"][trial % 3]
        prof = sm.load_profile(model)
        comp = [sm.PowerSGD(rank=int(rng.integers(1, 64))),
                sm.TopK(density=float(10 ** rng.uniform(-4, -1))),
                sm.get_compressor("fp16"), sm.SignSGD(), sm.IntQuantizer(bits=4, chunk=512),
                sm.RandomK(density=0.01, shared_seed=True)][trial % 6]
        n = int(rng.integers(2, 129))
        bw = float(10 ** rng.uniform(9, 11))
        alg = ["ring", "tree", "halving-doubling"][trial % 3]
        fusion = ["ddp", "horovod", "none"][(trial // 3) % 3]
        alpha = float(rng.uniform(0, 2e-5))
        u = float(rng.uniform(0.3, 1))
        got = sm.compressed_scaling_factor(prof, comp, n, bw, algorithm=alg, fusion=fusion,
                                           alpha=alpha, utilization=u)
        # the defaults scaled to the profile's GPU (scalemodel.codec_costs)
        codec = sm.compressors.codec_costs_for(None, gpu=profile_gpu(prof))
        tc = comp.tensor_costs(prof, n, codec=codec)
        c = codec[comp.family]
        per_tensor = tc.encode_time + tc.decode_time + c.launch * tc.calls
        t = simulate_compressed_iteration(
            prof, n, bw, phase_bytes=tc.phase_bytes.tolist(),
            phase_algorithms=tc.phase_collectives, tensor_codec=per_tensor.tolist(),
            bucket_codec=c.launch * comp.calls_per_bucket, utilization=u, algorithm=alg,
            fusion=fusion, alpha=alpha)
        assert got == pytest.approx(prof.iteration_time / t, rel=1e-9), (trial, comp)


def test_breakeven_is_exact():
    for comp in ("topk", "powersgd", "fp16"):
        be = sm.breakeven_bandwidth("resnet50", comp, n=32)
        assert 1e9 < be < 1e13
        below = sm.compressed_scaling_factor("resnet50", comp, 32, be * (1 - 1e-6))
        above = sm.compressed_scaling_factor("resnet50", comp, 32, be * (1 + 1e-6))
        assert below > sm.scaling_factor("resnet50", 32, be * (1 - 1e-6))
        assert above <= sm.scaling_factor("resnet50", 32, be * (1 + 1e-6)) * (1 + 1e-12)
    arr = sm.breakeven_bandwidth("resnet50", "signsgd", n=[16, 32, 64])
    assert arr.shape == (3,) and arr[2] == 0.0  # at 64 the all-gather sends as much as the ring
    assert sm.breakeven_bandwidth("resnet50", "int8", n=64) == 0.0


def test_breakeven_with_zero_codec_cost_is_always():
    assert math.isinf(sm.breakeven_bandwidth("bert", "fp16", n=8, cluster=free_cluster()))


def test_snippets():
    plan = sm.plan_compression("bert", "10Gbps")
    text = plan.snippet("pytorch")
    assert f"matrix_approximation_rank={plan.best.setting}" in text
    assert "powerSGD_hook.PowerSGDState(" in text and "bucket_cap_mb=25" in text
    assert "start_powerSGD_iter=" in text and "powerSGD_hook.powerSGD_hook" in text
    fp16 = next(r for r in plan.rows if r.compressor == "fp16")
    assert "default_hooks.fp16_compress_hook" in fp16.snippet("pytorch")
    assert "hvd.Compression.fp16" in fp16.snippet("horovod")
    topk = next(r for r in plan.rows if r.compressor == "topk")
    assert "no stock PyTorch DDP hook" in topk.snippet() and "GRACE" in topk.snippet()
    hv = sm.plan_compression("bert", "10Gbps", fusion=sm.HorovodFusion(threshold_bytes=2**25,
                                                                        cycle_time=2e-3))
    text = hv.snippet("horovod")
    assert "HOROVOD_FUSION_THRESHOLD=33554432" in text and "HOROVOD_CYCLE_TIME=2" in text
    with pytest.raises(sm.UnknownNameError, match="framework='tf'"):
        plan.snippet("tf")


def test_bad_input():
    with pytest.raises(sm.InvalidParameterError, match="target=1.5"):
        sm.plan_compression("bert", "10Gbps", target=1.5)
    with pytest.raises(sm.InvalidParameterError, match="bw=-1"):
        sm.plan_compression("bert", -1)
    with pytest.raises(sm.ParameterTypeError, match="compressors"):
        sm.plan_compression("bert", "10Gbps", compressors=3)


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "scalemodel", *args], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_plan_and_breakeven():
    code, out, err = run("plan", "--model", "bert", "--bw", "10Gbps")
    assert code == 0, err
    assert "powersgd" in out and "matrix_approximation_rank" in out
    code, out, _ = run("plan", "--model", "bert", "--bw", "10Gbps", "--json",
                       "--framework", "horovod", "--compressors", "fp16,powersgd")
    data = json.loads(out)
    assert data["best"] == "powersgd" and len(data["rows"]) == 2
    assert "HOROVOD_FUSION_THRESHOLD" in data["rows"][0]["snippet"]
    code, out, _ = run("breakeven", "--model", "resnet50", "--n", "16,32,64", "--json",
                       "--compressors", "topk:0.01,powersgd:4")
    rows = json.loads(out)["results"]
    assert "V100" in json.loads(out)["codec_note"]
    assert rows[1]["breakeven_bw"][0] == pytest.approx(
        sm.breakeven_bandwidth("resnet50", sm.PowerSGD(rank=4), n=16))
    code, out, _ = run("breakeven", "--model", "resnet50", "--n", "16,64")
    assert code == 0 and "never" in out and "codec costs: the defaults" in out
    code, _, err = run("plan", "--model", "bert", "--bw", "10Gbps", "--compressors", "gzip")
    assert code == 2 and "--compressors='gzip'" in err and "Traceback" not in err
    code, _, err = run("breakeven", "--model", "bert", "--compressors", "topk:2")
    assert code == 2 and "--compressors='topk:2'" in err and "density must be in" in err
    code, _, err = run("plan", "--model", "bert", "--bw", "10Gbps", "--codec-cost", "1e-9")
    assert code == 2 and "--codec-cost=1e-09" in err


def test_plot_breakeven():
    pytest.importorskip("matplotlib")
    from scalemodel.plot import plot_breakeven, plot_scaling

    fig = plot_breakeven("resnet50", ["fp16", "topk"], n=32, target=0.9,
                         bw=np.logspace(9, 11, 30))
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.lines]
    assert {"none", "fp16", "topk density 0.01"} <= set(labels)
    assert ax.get_xscale() == "log"
    fig = plot_scaling("bert", [8, 64], bw=np.logspace(9, 11, 20))
    assert len(fig.axes[0].lines) == 2
