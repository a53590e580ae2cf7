"""The compression microbenchmark, run for real with torch on the CPU on small tensors."""

import json

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.calibrate import codec_bench


def test_bad_arguments_fail_before_torch():
    with pytest.raises(sm.InvalidParameterError, match="numel=10"):
        codec_bench.measure_codec_costs(numel=10)
    with pytest.raises(sm.InvalidParameterError, match="density=0"):
        codec_bench.measure_codec_costs(numel=4096, density=0)


def test_measure_and_write_cluster(tmp_path, capsys):
    pytest.importorskip("torch", reason="the codec benchmark measures with torch")
    costs = codec_bench.measure_codec_costs(numel=8192, device="cpu", repeats=2)
    assert set(costs) == set(codec_bench.FAMILIES)
    for family, c in costs.items():
        assert {"encode", "decode", "launch"} <= set(c)
        assert all(np.isfinite(v) and v >= 0 for v in c.values()), family
    assert costs["fp16"]["encode"] > 0 and costs["topk"]["encode"] > 0
    assert "encode_per_rank" in costs["powersgd"]

    base = tmp_path / "base.json"
    sm.save_cluster(sm.ClusterProfile(name="lab", alpha=2e-6, provenance={"source": "test"}),
                    base)
    out = tmp_path / "cluster.json"
    rc = codec_bench.main(["--out", str(out), "--cluster", str(base), "--numel", "4096",
                           "--repeats", "2", "--device", "cpu"])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    cl = sm.load_cluster(out)
    assert cl.alpha == 2e-6 and cl.name == "lab"  # kept from the existing profile
    assert set(cl.codec_costs) == set(codec_bench.FAMILIES)
    assert "codec_bench" in json.loads(out.read_text())["provenance"]["codec_costs"]
    # the planner uses the measured costs
    plan = sm.plan_compression("bert", "10Gbps", cluster=cl, compressors=["fp16"])
    row = plan.rows[0]
    numel = sm.load_profile("bert").total_bytes / 4
    launches = cl.codec_costs["fp16"]["launch"] * len(sm.Scenario.build("bert").buckets)
    assert row.encode_time == pytest.approx(numel * cl.codec_costs["fp16"]["encode"]
                                            + launches, rel=1e-9)


def test_main_reports_errors(tmp_path, capsys):
    rc = codec_bench.main(["--out", str(tmp_path / "x.json"), "--cluster",
                           str(tmp_path / "missing.json")])
    assert rc == 2 and "no such file" in capsys.readouterr().err


def test_roofline_fit_recovers_floor_and_slope():
    n = np.array([1e4, 1e5, 1e6, 1e7, 1e8])
    a, b, worst = codec_bench.fit_roofline(n, np.maximum(20e-6, 2e-12 * n))
    assert a == pytest.approx(20e-6, rel=1e-9) and b == pytest.approx(2e-12, rel=1e-9)
    assert worst < 1e-9
    # all on the floor, or all proportional
    assert codec_bench.fit_roofline(n, np.full(5, 7e-6))[:2] == pytest.approx((7e-6, 0.0))
    assert codec_bench.fit_roofline(n, 3e-12 * n)[:2] == pytest.approx((0.0, 3e-12))
    # noise: the worst relative error says how far the fit is from the points
    t = np.maximum(20e-6, 2e-12 * n) * np.array([1.3, 1.0, 1.0, 1.0, 1.0])
    assert codec_bench.fit_roofline(n, t)[2] > 0.1


def test_costs_from_sweep_by_hand():
    n = [1e4, 1e6, 1e8]
    line = lambda a, b: [[m, max(a, b * m)] for m in n]  # noqa: E731
    times = {f: {"encode": line(10e-6, 2e-12), "decode": line(6e-6, 1e-12)}
             for f in codec_bench.FAMILIES if f != "powersgd"}
    times["powersgd"] = {"encode@1": line(30e-6, 5e-12), "encode@4": line(30e-6, 11e-12),
                         "decode@1": line(8e-6, 3e-12), "decode@4": line(8e-6, 6e-12)}
    costs, worst = codec_bench.costs_from_sweep({"rank": 4, "times": times})
    fp16 = sm.get_compressor("fp16")
    calls = fp16.calls_per_tensor + fp16.calls_per_bucket
    assert costs["fp16"]["encode"] == pytest.approx(2e-12)
    assert costs["fp16"]["decode"] == pytest.approx(1e-12)
    assert costs["fp16"]["launch"] == pytest.approx(16e-6 / calls)
    p = costs["powersgd"]  # 5 + 2 r and 3 + 1 r [ps/element]
    assert (p["encode"], p["encode_per_rank"]) == pytest.approx((3e-12, 2e-12))
    assert (p["decode"], p["decode_per_rank"]) == pytest.approx((2e-12, 1e-12))
    assert max(worst.values()) < 1e-9


def test_sweep_fits_every_family_and_is_stored(tmp_path, capsys):
    pytest.importorskip("torch", reason="the codec benchmark measures with torch")
    with pytest.raises(sm.InvalidParameterError, match="sizes"):
        codec_bench.measure_codec_sweep(sizes=(4096,))
    out = tmp_path / "sweep.json"
    rc = codec_bench.main(["--out", str(out), "--sizes", "4096,16384", "--repeats", "2",
                           "--device", "cpu"])
    captured = capsys.readouterr()
    assert rc == 0 and "worst fit error" in captured.out
    assert "measured 16384 elements (2/2)" in captured.err  # progress
    cl = sm.load_cluster(out)
    assert set(cl.codec_costs) == set(codec_bench.FAMILIES)
    sweep = cl.extra["codec_sweep"]
    assert sweep["sizes"] == [4096, 16384]
    assert set(sweep["times"]["powersgd"]) == {"encode@1", "encode@4", "decode@1", "decode@4"}
    # topk decodes the k = density * n received elements
    assert [m for m, _ in sweep["times"]["topk"]["decode"]] == [41, 164]
    assert set(sweep["worst_relative_error"]) == set(codec_bench.FAMILIES)
    assert "sweep 4096..16384" in json.loads(out.read_text())["provenance"]["codec_costs"]
