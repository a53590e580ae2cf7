"""benchmarks/validate_transfer.py (issue 17, item 9): the protocol's structure on a small
subset, and that its errors are computed from the data, not written in."""

import math

import numpy as np
import pytest

from helpers_benchmarks import load_benchmark


@pytest.fixture(scope="module")
def vt():
    return load_benchmark("validate_transfer")


@pytest.fixture(scope="module")
def source(vt):
    """The DDP benchmark source, cut to a few held-out runs and bucket pairs."""
    src = vt.ddp_benchmark_source()
    keep = [r for r in src.heldout if r.n in (1, 8)][:6]
    src.heldout = keep
    src.sign_pairs = src.sign_pairs[:3]
    src.setup = dict(src.setup, fit=("compute_slowdown",))  # one fitted term: fast
    return src


@pytest.fixture(scope="module")
def evaluated(vt, source):
    return vt.evaluate(source, vt.features(), lambda *a: None)


def test_calibration_is_one_model_at_most_two_runs(vt):
    for make in vt.SOURCES.values():
        for src in make():
            if isinstance(src, dict):  # the LLM sources: rows of validate_sharded
                assert len(src["calibration"]) == 2
                assert len({r["model"] for r in src["calibration"]}) == 1
                assert not any(r in src["rows"] for r in src["calibration"])
                assert all(r["time"] > 0 for r in src["calibration"] + src["rows"])
                continue
            assert 1 <= len(src.calibration) <= 2
            models = {r.model if isinstance(r.model, str) else r.model.name
                      for r in src.calibration}
            assert len(models) == 1
            labels = {r.label for r in src.calibration}
            assert not labels & {r.label for r in src.heldout}  # held out means held out
            assert all(r.time > 0 and r.t1 > 0 for r in src.calibration + src.heldout)


def test_ddp_benchmark_rows(vt):
    src = vt.ddp_benchmark_source()
    # four models x (1, 2, 4, 8, 16 GPUs) x (25 MB, 1 MB), less the two calibration runs
    assert len(src.heldout) == 4 * 5 * 2 - 2
    assert {r.n for r in src.heldout} == {1, 2, 4, 8, 16}
    assert all(r.wrapped == (r.n == 1) for r in src.heldout)
    # every (model, n) with both bucket sizes except the calibration one
    assert len(src.sign_pairs) == 4 * 5 - 1
    for _, small, ref, _ in src.sign_pairs:
        assert small.bucket_mb == 1 and ref.bucket_mb == 25 and small.n == ref.n


def test_errors_are_computed(vt, source, evaluated):
    fit, rows, signs = evaluated
    assert [r["label"] for r in rows] == [r.label for r in source.heldout]
    for row, r in zip(rows, source.heldout):
        assert row["measured"] == r.time
        assert row["error"] == pytest.approx(row["predicted"] / r.time - 1, rel=1e-12)
        assert row["low"] <= row["predicted"] * (1 + 1e-9)
        assert row["predicted"] <= row["high"] * (1 + 1e-9)
        assert row["inside"] == (row["low"] * (1 - 1e-12) <= r.time
                                 <= row["high"] * (1 + 1e-12))
        # the carry-over baseline: the calibration run's measured scaling factor
        cal = min(source.calibration, key=lambda c: abs(c.n - r.n))
        assert row["carried"] == pytest.approx(r.t1 / cal.sf / r.time - 1, rel=1e-12)
    s = vt.summary(rows, signs)
    err = np.abs([r["error"] for r in rows])
    assert s["runs"] == len(rows)
    assert s["median"] == pytest.approx(float(np.median(err)))
    assert s["largest"] == pytest.approx(float(err.max()))
    assert s["inside"] == pytest.approx(np.mean([r["inside"] for r in rows]))
    assert s["sign_pairs"] == len(signs) and 0 <= s["sign_right"] <= len(signs)
    for g in signs:
        assert g["measured"] > 0  # 1 MB is measured slower in every row
        assert g["right"] == (g["predicted"] > 0)


def test_errors_follow_the_measurements(vt, source, evaluated, monkeypatch):
    """Slowing every held-out measurement by 10 % moves every error accordingly, and no
    prediction (the fit is made from the calibration runs only: reused here)."""
    fit, rows, _ = evaluated
    monkeypatch.setattr(vt, "calibrate", lambda src, feats: fit)
    slower = vt.Source(source.key, source.title, source.setup, source.calibration,
                       [vt.Row(**{**r.__dict__, "time": 1.1 * r.time}) for r in source.heldout],
                       source.notes, [], source.single)
    _, rows2, _ = vt.evaluate(slower, vt.features(), lambda *a: None)
    for a, b in zip(rows, rows2):
        assert b["predicted"] == pytest.approx(a["predicted"], rel=1e-9)
        assert 1 + b["error"] == pytest.approx((1 + a["error"]) / 1.1, rel=1e-9)


@pytest.mark.parametrize("name", ["resnext50_32x4d", "resnext101_32x8d"])
def test_resnext_profile(vt, name):
    p = vt.resnext_profile(name, 0.2, "test")
    blocks, _, _, count = vt.RESNEXT[name]
    assert int(p.tensor_bytes.sum()) == 4 * count
    assert p.iteration_time == pytest.approx(0.2)
    assert p.backward_time == pytest.approx(2 * p.forward_time)
    assert p.tensor_ready[-1] == p.backward_time and np.all(np.diff(p.tensor_ready) >= 0)
    assert p.tensor_names[0] == "fc.bias" and p.tensor_names[-1] == "conv1.weight"
    # grouped 3x3 convolution of the first block: width / groups input channels
    i = p.tensor_names.index("layer1.0.conv2.weight")
    width = 64 * (4 if name == "resnext50_32x4d" else 8) // 64 * 32
    assert p.tensor_shapes[i] == (width, width // 32, 3, 3)
    # 9 tensors a block, 3 a downsample, 3 in the stem, 2 in fc: 161 and 314 as ResNet
    assert len(p.tensor_names) == 9 * sum(blocks) + 3 * 4 + 3 + 2


def test_unbounded_is_none_in_json(vt):
    assert vt._finite({"a": [math.inf, 1.0, math.nan]}) == {"a": [None, 1.0, None]}
