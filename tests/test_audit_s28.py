"""Findings of session 28's audits, each fixed: a test per finding that fails on the code
before the fix."""

import pytest

import scalemodel as sm


def test_mg_wfbp_solvers_find_a_rate_the_curve_reaches_before_it_falls():
    """MG-WFBP plans for the communication channel; with a per-bucket cost on the compute
    path its plan splits into more buckets on faster links, and the scaling factor falls
    (0.993 at 25 Gbit/s, 0.944 unlimited). The solvers said no rate or ratio reaches 0.97."""
    cl = sm.ClusterProfile(bucket_overhead=80e-6, provenance={"source": "test"})
    kw = dict(cluster=cl, fusion="mg-wfbp")
    assert sm.scaling_factor("resnet50", 64, "25Gbps", **kw) > 0.97
    assert sm.scaling_factor("resnet50", 64, "1Tbps", **kw) < 0.97
    rb = sm.required_bandwidth("resnet50", n=64, target=0.97, **kw)
    assert rb.feasible and 10e9 < rb.bw <= 25e9
    assert sm.scaling_factor("resnet50", 64, rb.bw, **kw) >= 0.97
    assert sm.scaling_factor("resnet50", 64, rb.bw * (1 - 1e-6), **kw) < 0.97
    mc = sm.min_compression("resnet50", "10Gbps", n=64, target=0.97, **kw)
    assert mc.feasible and 1 < mc.ratio <= 2.5
    assert sm.scaling_factor("resnet50", 64, "10Gbps", compression=mc.ratio, **kw) >= 0.97
    # beyond what any rate reaches: still no answer
    assert not sm.required_bandwidth("resnet50", n=64, target=0.999, **kw).feasible


@pytest.mark.parametrize("kw", [dict(target=0.01, compression=1e6),
                                dict(target=0.9, compression=1e12)])
def test_a_needed_rate_below_1_mbit_is_the_floor_and_can_be_asked_again(kw):
    rb = sm.required_bandwidth("bert", n=64, **kw)
    assert rb.feasible and rb.bw == 1e6
    assert "any line rate from 1 Mbit/s" in rb.message
    assert sm.scaling_factor("bert", 64, rb.bw, compression=kw["compression"]) >= kw["target"]


def test_a_ratio_just_above_one_is_not_printed_as_one():
    res = sm.min_compression("bert", "59.1Gbps")
    assert 1.0 < res.ratio < 1.001 and res.uncompressed_scaling_factor < 0.9
    assert "needs 1x" not in res.message and "(uncompressed: 0.900)" not in res.message
    assert "needs 1.0001x" in res.message


@pytest.mark.parametrize("bw, said", [("500 kbps", "from 1 Mbit/s"), (5e5, "from 1 Mbit/s"),
                                      (10, "did you mean 10Gbps")])
def test_rates_below_1_mbit_get_a_hint_that_holds(bw, said):
    with pytest.raises(sm.InvalidParameterError) as info:
        sm.parse_bandwidth(bw)
    text = str(info.value)
    assert said in text and "to go lower" not in text and "500000Gbps" not in text


def test_a_compressor_that_wins_on_fast_links_only_is_not_said_to_never_win():
    """An all-gather compressor pays n - 1 latencies against the ring's 2(n - 1): at 4096
    workers top-k loses on slow links and wins on fast ones; breakeven said 'wins never'."""
    b = sm.breakeven_bandwidth("resnet50", "topk:0.001", n=4096, alpha=5e-6, detail=True)
    assert b.bw == 0.0 and b.wins_above is not None and "only above" in b.message
    gain = [sm.compressed_scaling_factor("resnet50", "topk:0.001", 4096, bw, alpha=5e-6)
            - sm.compressed_scaling_factor("resnet50", "none", 4096, bw, alpha=5e-6)
            for bw in (b.wins_above * 0.99, b.wins_above * 1.01)]
    assert gain[0] < 0 < gain[1]
    # one that wins below a rate keeps its answer and no wins_above
    fp16 = sm.breakeven_bandwidth("resnet50", "fp16", n=64, detail=True)
    assert fp16.bw > 400e9 and fp16.wins_above is None


def test_the_plans_ideal_ratio_under_mg_wfbp_is_min_compressions():
    """The plan's ideal ratio is documented as min_compression's; under MG-WFBP it was
    solved on the buckets planned for the uncompressed network (14.4x against 4.81x)."""
    p = sm.plan_compression("bert", "10Gbps", fusion="mg-wfbp")
    mc = sm.min_compression("bert", "10Gbps", fusion="mg-wfbp")
    assert p.ideal_ratio == pytest.approx(mc.ratio, rel=1e-12)
    assert "4.81x" in p.message


def test_a_single_mg_wfbp_comparison_is_refused_for_what_it_is():
    with pytest.raises(sm.InvalidParameterError) as info:
        sm.compressed_scaling_factor("bert", "fp16", 64, 1e10, fusion="mg-wfbp")
    assert "a grid" not in str(info.value) and "one fixed bucketing" in str(info.value)


def test_a_per_unit_cost_fitted_with_one_wrapper_is_not_charged_to_another():
    """A cost per FSDP unit (an explanation of a ZeRO-3 fit, 7 ms per transformer block)
    was charged per 25 MB DDP bucket of another question on the cluster (its interval
    went down to 0.18 for Llama under DDP)."""
    cl = sm.ClusterProfile(
        name="fsdp-fit", fit_settings={"sharding": "zero3"},
        alternatives=[{"free": ["compute_slowdown"], "values": {"compute_slowdown": 1.05},
                       "intervals": {}, "score": 0.0},
                      {"free": ["bucket_overhead"], "values": {"bucket_overhead": 7e-3},
                       "intervals": {"bucket_overhead": [5e-3, 9e-3]}, "score": 0.5}],
        compute_slowdown=1.05, provenance={"source": "test"})
    with pytest.warns(sm.ModelWarning, match="work per wrapped unit of the wrapper the runs used"):
        ddp = sm.iteration_time("resnet50", 64, "400Gbps", cluster=cl, sharding="none")
    lo, hi = ddp.scaling_factor_interval
    assert lo > 0.9 * hi
    # the wrapper the runs used keeps it: an explanation charges it per unit
    fsdp = sm.iteration_time("resnet50", 64, "400Gbps", cluster=cl)
    assert fsdp.settings["sharding"] == "zero3"
    assert fsdp.scaling_factor_interval[0] < 0.8 * fsdp.scaling_factor_interval[1]


def test_tensor_parallelism_beyond_the_gpus_usual_server_is_refused_without_a_topology():
    """tp=16 on H100s without gpus_per_node was taken as NVLink inside one node; with
    gpus_per_node=8 it was refused. The GPU's usual server is the node now, as memory's."""
    for call in (lambda: sm.iteration_time("llama-2-7b", 16, "10Gbps", tp=16),
                 lambda: sm.memory("llama-2-7b", n=16, tp=16)):
        with pytest.raises(sm.InvalidParameterError, match="usual server"):
            call()
    assert sm.iteration_time("llama-2-7b", 16, "10Gbps", tp=8).total > 0


def test_a_refusal_says_the_sharding_came_from_the_cluster():
    cl = sm.ClusterProfile(fit_settings={"sharding": "zero3"}, provenance={"source": "t"})
    with pytest.raises(sm.InvalidParameterError, match="the cluster's fit setting"):
        sm.iteration_time("llama-2-7b", 16, "100Gbps", cluster=cl, pp=2, microbatches=4)


def test_printed_rates_and_scaling_factors_keep_their_meaning():
    assert sm.format_bandwidth(999.9996e9) == "1 Tbit/s"
    assert sm.format_bandwidth(999999.6) == "1 Mbit/s"
    res = sm.min_compression("llama-3-70b", 1e6, n=100000, utilization=1e-9)
    assert "(uncompressed: 0.000" not in res.message


@pytest.mark.parametrize("fit, ask, drops", [
    ("none", "zero1", False), ("zero1", "zero2", False), ("zero2", "none", False),
    ("zero3", "hybrid_shard", False), ("zero3", "none", True), ("none", "zero3", True)])
def test_the_per_unit_cost_follows_the_kind_of_unit(fit, ask, drops):
    """Gradient buckets (DDP, ZeRO-1/2) and wrapped units (ZeRO-3, HSDP) are the two
    kinds the fit counts; the cost moves between strategies of one kind."""
    import warnings

    cl = sm.ClusterProfile(fit_settings={"sharding": fit}, bucket_overhead=2e-4,
                           provenance={"source": "t"})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        sm.iteration_time("resnet50", 64, "100Gbps", cluster=cl, sharding=ask)
    assert any("bucket_overhead" in str(w.message) for w in said) == drops


def test_mg_wfbp_answers_are_the_first_rate_or_ratio_reaching_the_target():
    """The audit's cases: a window above the target narrower than a factor of two, one
    that opens and closes, and a target reached only below 1 Mbit/s."""
    cl = sm.ClusterProfile(bucket_overhead=300e-6, provenance={"source": "test"})
    kw = dict(cluster=cl, fusion="mg-wfbp")
    rb = sm.required_bandwidth("resnet50", n=64, target=0.95, **kw)
    assert rb.feasible and rb.bw < 25e9
    assert sm.scaling_factor("resnet50", 64, rb.bw, **kw) >= 0.95
    assert sm.min_compression("resnet50", "10Gbps", n=64, target=0.95, **kw).feasible
    cl = sm.ClusterProfile(bucket_overhead=80e-6, provenance={"source": "test"})
    kw = dict(cluster=cl, fusion="mg-wfbp")
    assert sm.required_bandwidth("bert", n=64, target=0.9131, **kw).bw < 66.1e9
    assert sm.min_compression("bert", "20Gbps", n=64, target=0.9131, **kw).ratio < 3.31
    cl = sm.ClusterProfile(bucket_overhead=5e-3, provenance={"source": "test"})
    low = sm.required_bandwidth("resnet50", n=64, target=0.3, compression=1e6,
                                cluster=cl, fusion="mg-wfbp")
    assert not low.feasible and "from 1 Mbit/s" in low.message


def test_the_floor_answer_says_what_binds_at_the_floor():
    rb = sm.required_bandwidth("bert", n=64, target=0.01, compression=1e6)
    assert rb.bw == 1e6 and rb.critical_parts["bandwidth"] < 0.01


def test_the_cli_breakeven_says_above_which_rate_a_latency_saver_wins(tmp_path):
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "scalemodel", "breakeven", "--model", "resnet50",
           "--compressors", "topk:0.001", "--n", "4096", "--alpha", "5e-6"]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "> 112.8 Gbit/s" in text.stdout
    assert "never" not in text.stdout
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120)
    row = json.loads(out.stdout)["results"][0]
    assert row["breakeven_bw"] == [0.0] and row["wins_above"][0] == pytest.approx(112.77e9,
                                                                                   rel=1e-3)


def test_a_refit_on_a_fitted_cluster_builds_the_runs_as_they_ran():
    """A cluster given as fit_cluster's starting point keeps its fit_settings; the runs
    were built under them (DDP runs as the earlier fit's ZeRO-3), and fitted otherwise."""
    base = sm.ClusterProfile(name="b", fit_settings={"sharding": "zero3"},
                             provenance={"source": "t"})
    runs = [dict(model="resnet50", n=16, bw="25Gbps", iteration_time=0.20),
            dict(model="resnet50", n=64, bw="25Gbps", iteration_time=0.23)]
    on_base = sm.fit_cluster(runs, cluster=base)
    fresh = sm.fit_cluster(runs)
    assert [r.fitted for r in on_base.residuals] == pytest.approx(
        [r.fitted for r in fresh.residuals], rel=1e-12)


def test_plots_the_audit_looked_at():
    pytest.importorskip("matplotlib")
    import numpy as np
    from matplotlib.figure import Figure

    from scalemodel.plot import plot_breakeven, plot_scaling
    from test_intervals import two_explanations

    # a narrow range labels its minor ticks in Gbit/s too (they read 2e10 under [Gbit/s])
    ax = plot_scaling("bert", [8], bw=np.logspace(10, 10.5, 20)).axes[0]
    assert ax.xaxis.get_minor_formatter()(2e10, 0) in ("20", "")
    assert ax.xaxis.get_minor_formatter().__class__.__name__ == "Gbps"
    # sharding passes 1: the axis follows it
    ax = plot_scaling("llama-2-7b", [64], bw=["100Gbps", "1Tbps"], sharding="zero3",
                      gpus_per_node=8, nics_per_node=8).axes[0]
    assert ax.get_ylim()[1] > max(ax.lines[0].get_ydata())
    # a fitted cluster's interval as a band; line rates drawn in order
    ax = plot_scaling("bert", [16], bw=["100Gbps", "10Gbps", "40Gbps"],
                      cluster=two_explanations()).axes[0]
    assert ax.collections and list(ax.lines[0].get_xdata()) == [10e9, 40e9, 100e9]
    # a compressor that wins only on fast links gets its (hollow) dot
    ax = plot_breakeven("resnet50", ["topk:0.001"], n=4096, alpha=5e-6,
                        bw=np.logspace(9, 12, 40)).axes[0]
    dots = [ln for ln in ax.lines if len(ln.get_xdata()) == 1]
    assert len(dots) == 1 and dots[0].get_markerfacecolor() == "white"
    # refused arguments draw nothing on the caller's axes
    ax = Figure().add_subplot()
    for bad in (dict(n=[16, 64]), dict(n=64, target=1.5)):
        with pytest.raises(sm.ScalemodelError):
            plot_breakeven("bert", ["fp16"], ax=ax, **bad)
    assert not ax.lines
    plot_scaling("bert", 1, bw="10Gbps")  # one point: no warning (they are errors here)


def test_cli_text_says_per_nic_and_long_times_in_seconds():
    import subprocess
    import sys

    def run(*args):
        out = subprocess.run([sys.executable, "-m", "scalemodel", *args],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "per NIC:" in run("required-bandwidth", "--model", "gpt2", "--n", "64",
                             "--gpus-per-node", "8")
    assert "any (no data-parallel traffic" in run("required-bandwidth", "--model", "bert",
                                                  "--n", "1")
    text = run("min-compression", "--model", "bert", "--bw", "1Gbps", "--n", "4096",
               "--alpha", "50us")
    assert "latency 5.73 s" in text and "e+03 ms" not in text


@pytest.mark.slow
def test_a_reused_profile_is_rescaled_to_the_runs_local_speed(tmp_path):
    """The scaling step with --profile (reused) fitted to the profile's old compute time,
    so its report said 'measured 30.6 ms' beside 'T2 36.6 ms'. It is rescaled to the
    paired local iterations now, as the compute step's own is."""
    import os
    import re
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np

    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # an mlp profile with a compute time far from the machine's (a drift)
    p = sm.WorkloadProfile(name="mlp", tensor_bytes=np.array([2e5, 2e5]),
                           tensor_ready=np.array([1e-4, 2e-4]), forward_time=1e-4,
                           backward_time=2e-4, update_time=1e-5,
                           provenance={"source": "test"})
    sm.save_profile(p, tmp_path / "p.json")
    sm.save_cluster(sm.ClusterProfile(name="c", alpha=1e-5, provenance={"source": "test"}),
                    tmp_path / "c.json")
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           "-m", "scalemodel.calibrate", "--backend", "gloo", "--model", "mlp",
           "--batch-size", "8", "--steps", "scaling", "--profile", "p.json",
           "--cluster", "c.json", "--line-rate", "10Gbps", "--iterations", "4",
           "--warmup", "1", "--threads", "1", "--out", "cl.json"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                                  PYTHONPATH=str(root)))
    assert out.returncode == 0, out.stderr[-3000:]
    t2 = re.search(r"T2 ([0-9.]+) ms", out.stdout)
    host = re.search(r"model without it: [0-9.]+ ms, measured ([0-9.]+) ms", out.stdout)
    assert t2 is not None
    if host is not None:  # (a host overhead was fitted)
        assert host.group(1) == t2.group(1)
    report = __import__("json").loads((tmp_path / "cl.report.json").read_text())
    fitted = [c for c in report["checks"] if c["fitted_to_these_iterations"]]
    assert fitted and all(abs(c["iteration_time_error"]) < 0.5 for c in fitted)


def test_a_users_model_function_that_fails_is_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from scalemodel.calibrate.__main__ import main

    (tmp_path / "usermod_s28.py").write_text(
        "def raises(b):\n    raise KeyError('missing dataset')\n"
        "def notmodule(b):\n    import torch\n"
        "    return ('model', torch.zeros(b, 4), torch.zeros(b, dtype=torch.long))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for fn, said in (("raises", "raised KeyError: 'missing dataset'"),
                     ("notmodule", "torch.nn.Module")):
        rc = main(["--model", f"usermod_s28:{fn}", "--steps", "compute", "--iterations", "3",
                   "--warmup", "0", "--out", "o.json", "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and "Traceback" not in err


def test_from_nccl_tests_does_not_replace_a_calibrations_cluster(tmp_path, monkeypatch):
    from pathlib import Path

    from scalemodel.calibrate.__main__ import main

    log = Path(__file__).parent / "data" / "nccl_tests_all_reduce_2x8_h100.txt"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.json").write_text("{}")
    assert main(["from-nccl-tests", str(log), "--line-rate", "3.2Tbps"]) == 2
    assert (tmp_path / "cluster.json").read_text() == "{}"
    assert main(["from-nccl-tests", str(log), "--line-rate", "3.2Tbps",
                 "--out", "cluster.json"]) == 0


def test_fit_out_does_not_replace_a_profile_its_runs_name(tmp_path, monkeypatch, capsys):
    from scalemodel.cli import main

    monkeypatch.chdir(tmp_path)
    sm.save_profile(sm.load_profile("resnet50"), tmp_path / "prof.json")
    (tmp_path / "runs.csv").write_text("model,n,bw,iteration_time\n"
                                       "prof.json,16,25Gbps,0.2\nprof.json,64,25Gbps,0.23\n")
    before = (tmp_path / "prof.json").read_text()
    assert main(["fit", "runs.csv", "--out", "prof.json"]) == 2
    assert "is an input of this command" in capsys.readouterr().err
    assert (tmp_path / "prof.json").read_text() == before


def test_a_transport_fit_without_a_line_rate_keeps_its_bandwidth_interval():
    """Without a line rate the fitted bandwidth is taken as the line rate; its interval
    was dropped (the cluster had the latency's alone), so answers were narrower than the
    same transport gives with a line rate."""
    import numpy as np

    from scalemodel.calibrate.fit import cluster_from_fits, fit_collective

    rng = np.random.default_rng(3)
    sizes = np.repeat(np.geomspace(1e4, 1e8, 9), 5)
    times = 2 * 15 / 16 * 8 * sizes / 40e9 * (1 + 0.25 * rng.standard_normal(sizes.size))
    fit = fit_collective(sizes, np.abs(times) + 20e-6, n=16, r2_warn=0.0)
    cl = cluster_from_fits([fit], name="t")
    lo, hi = cl.intervals["utilization"]
    assert lo == pytest.approx(fit.intervals["bandwidth"][0] / fit.bandwidth) and hi == 1.0
    it = sm.iteration_time("bert", 16, cl.extra["fitted_bandwidth"], cluster=cl)
    assert it.scaling_factor_interval[0] < it.scaling_factor
