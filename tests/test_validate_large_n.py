"""benchmarks/validate_large_n.py (issue 17, item 4): the transcribed table, the protocol
on one series, and the diagnosis computed from the data."""

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vn():
    spec = importlib.util.spec_from_file_location(
        "validate_large_n", ROOT / "benchmarks" / "validate_large_n.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_are_the_published_tables(vn):
    """Spot checks typed by hand from InternLM's doc/en/train_performance.md."""
    rows = vn.load_rows()
    assert len(rows) == 54
    tgs = {(r["series"], r["gpus"], r["micro_batch"], r["grad_accum"]): r["tgs"]
           for r in rows}
    assert tgs[("tp1-zero1=-1", 8, 2, 4)] == 4062
    assert tgs[("tp1-zero1=-1", 1024, 2, 4)] == 2271
    assert tgs[("tp1-zero1=8", 1024, 2, 4)] == 3625
    assert tgs[("tp2-zero1=4", 512, 4, 4)] == 3589
    assert tgs[("flops-ckpt", 64, 8, 1)] == 3217
    assert tgs[("flops-nockpt-batch", 1024, 2, 1)] == 2346
    # the figure: ZeRO-1 over all GPUs loses 44 % from 8 to 1024 GPUs
    assert 1 - tgs[("tp1-zero1=-1", 1024, 2, 4)] / tgs[("tp1-zero1=-1", 8, 2, 4)] == \
        pytest.approx(0.44, abs=0.005)
    for r in rows:
        assert (r["shard_group"] is None) == (r["zero1"] == "-1")


def test_two_runs_calibrate_and_every_other_row_is_predicted(vn):
    rows = [r for r in vn.load_rows() if r["series"] == "tp1-zero1=8"]
    cal = [r for r in rows if r["gpus"] in vn.CALIBRATION_N]
    assert [r["gpus"] for r in cal] == [8, 64]
    fit = vn.calibrate(cal, None)
    assert max(abs(x.error) for x in fit.residuals) < 0.05
    for r in rows:
        pred, (lo, hi) = vn.predict(r, fit.cluster)
        assert lo <= pred * (1 + 1e-9) and pred <= hi * (1 + 1e-9)
        assert 0.5 * r["tgs"] < pred < 1.5 * r["tgs"]


def test_diagnosis_is_computed_from_the_rows(vn):
    ns, gap = vn.broadcast_gap(vn.load_rows())
    assert list(ns) == [16, 32, 64, 128, 256, 512, 1024]
    assert gap[-1] == pytest.approx(16384 / 2271 - 16384 / 3625, rel=1e-12)
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vn.diagnose(vn.load_rows(), lambda *text: lines.extend(text))
    miss = {}
    for line in lines:
        if "least-squares" in line:
            name = line.split("least-squares")[1].split(":")[0].strip()
            miss[name] = float(line.split("rms miss")[1].split("s")[0])
    assert min(miss, key=miss.get) == "c (n - 1)"
    assert np.isfinite(list(miss.values())).all()


def test_broadcast_owners_follow_internlms_allocation(vn):
    """Every rank owns parameters while shares are larger than the tensors; from about
    160 ranks on, each large tensor (5 per block, embedding, head) is one rank's; the
    script's zero1 rows broadcast from that many ranks of their group."""
    from scalemodel.sharding import broadcast_owners

    elems = vn.internlm_tensors()
    assert sum(elems) == pytest.approx(7.32e9, rel=1e-3)
    assert broadcast_owners(elems, 8) == 8 and broadcast_owners(elems, 16) == 16
    big = sum(e >= 4096 * 4096 for e in elems)
    assert big == 5 * 32 + 2
    assert broadcast_owners(elems, 1024) == broadcast_owners(elems, 4096) == big
    rows = {(r["series"], r["gpus"]): r for r in vn.load_rows()}
    assert vn.sharding_for(rows[("tp1-zero1=-1", 1024)]).broadcasts == big
    assert vn.sharding_for(rows[("tp1-zero1=8", 1024)]).broadcasts == 8
    assert vn.sharding_for(rows[("tp1-zero1=8", 1024)], "allgather").param_return == \
        "allgather"


def test_broadcast_return_calibrates_and_grows_with_n(vn):
    """The zero1=-1 series calibrated with InternLM's broadcasts at 8 and 64 GPUs fits
    both runs, and its predicted per-GPU throughput falls with n, where the all-gather
    model's stays nearly flat."""
    rows = [r for r in vn.load_rows() if r["series"] == "tp1-zero1=-1"]
    cal = [r for r in rows if r["gpus"] in vn.CALIBRATION_N]
    bc = vn.calibrate(cal, None, "broadcast")
    ag = vn.calibrate(cal, None, "allgather")
    assert max(abs(x.error) for x in bc.residuals) < 0.05
    by_n = {r["gpus"]: r for r in rows}
    drop_bc = vn.predict(by_n[1024], bc.cluster)[0] / vn.predict(by_n[64], bc.cluster)[0]
    drop_ag = (vn.predict(by_n[1024], ag.cluster, "allgather")[0]
               / vn.predict(by_n[64], ag.cluster, "allgather")[0])
    assert drop_bc < 0.8 < 0.98 < drop_ag
