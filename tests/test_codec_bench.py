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


def test_fit_line_recovers_a_known_line_and_a_per_rank_term():
    n = np.array([1e4, 1e5, 1e6, 1e7])
    a, b, worst = codec_bench.fit_line(n, 5e-6 + 2e-11 * n)
    assert a == pytest.approx(5e-6, rel=1e-9) and b == pytest.approx(2e-11, rel=1e-9)
    assert worst < 1e-9
    r = np.array([1, 4, 1, 4, 1, 4, 1, 4])
    nn = np.repeat(n, 2)
    a, b, c, worst = codec_bench.fit_line(nn, 3e-6 + 1e-11 * nn + 4e-12 * nn * r, per_rank=r)
    assert (a, b, c) == pytest.approx((3e-6, 1e-11, 4e-12), rel=1e-9)
    # no negative fixed cost even when the data would prefer one
    a, b, _ = codec_bench.fit_line(n, 2e-11 * n - 1e-7)
    assert a == 0.0 and b > 0


def test_sweep_fits_every_family_and_is_stored(tmp_path, capsys):
    pytest.importorskip("torch", reason="the codec benchmark measures with torch")
    with pytest.raises(sm.InvalidParameterError, match="sizes"):
        codec_bench.measure_codec_sweep(sizes=(4096,))
    out = tmp_path / "sweep.json"
    rc = codec_bench.main(["--out", str(out), "--sizes", "4096,16384", "--repeats", "2",
                           "--device", "cpu"])
    assert rc == 0 and "worst fit error" in capsys.readouterr().out
    cl = sm.load_cluster(out)
    assert set(cl.codec_costs) == set(codec_bench.FAMILIES)
    sweep = cl.extra["codec_sweep"]
    assert sweep["sizes"] == [4096, 16384]
    assert set(sweep["times"]["powersgd"]) == {"encode@1", "encode@4", "decode@1", "decode@4"}
    # topk decodes the k = density * n received elements
    assert [m for m, _ in sweep["times"]["topk"]["decode"]] == [41, 164]
    assert "sweep 4096..16384" in json.loads(out.read_text())["provenance"]["codec_costs"]
