"""benchmarks/validate_blocks.py: the recorded H200 block sweep is read as documented
(every full-checkpointing block has its block without checkpointing; the early-stop
and replay counts are the library's), and the script runs."""

import pytest

from helpers_benchmarks import load_benchmark


@pytest.fixture(scope="module")
def vb():
    return load_benchmark("validate_blocks")


def test_every_checkpointed_block_is_compared(vb):
    rows = vb.recompute_rows(vb.h200_sweeps())
    assert {r["sweep"] for r in rows} == {"sweep", "repeat", "replay"}
    assert len([r for r in rows if r["sweep"] == "sweep"]) == 24  # 6 widths x 4 mb
    for r in rows:
        assert r["mode"] == ("full" if r["sweep"] == "replay" else "full-early-stop")
        assert r["measured"] > 0 and r["forward"] > 0
    replay = [r for r in rows if r["sweep"] == "replay"]
    assert all(r["model"] == pytest.approx(r["forward"]) for r in replay)


def test_the_kernel_counts_are_the_librarys(vb):
    rows = vb.kernel_rows(vb.load("blocks-repeat.json")["kernels"],
                          vb.load("blocks-no-early-stop.json")["kernels"])
    assert {(r["mode"], round(r["model"], 3)) for r in rows} == {
        ("early stop", 0.667), ("replay", 1.0)}
    # the measured ratios bracket the counts (an MPT block skips 4 of its 12 h^2)
    stop = [r["measured"] for r in rows if r["mode"] == "early stop"]
    replay = [r["measured"] for r in rows if r["mode"] == "replay"]
    assert max(stop) < min(replay)


def test_the_script_runs(vb, capsys):
    vb.main(["--no-write"])
    out = capsys.readouterr().out
    assert "full-early-stop: 32 blocks" in out and "FSDP2" in out
    assert "memory pressure on one GPU" in out and out.count("OOM") == 8
    assert "the same sweep on one NVIDIA H100 80GB HBM3" in out


def test_the_h100_sweep_is_compared_as_the_h200_one(vb):
    """The H100's 24 checkpointed blocks against its own sweep's, the replay against the
    same sweep (one call), and its profiled blocks with the library's early-stop count."""
    rows = vb.recompute_rows(vb.h100_sweeps())
    assert len([r for r in rows if r["sweep"] == "sweep"]) == 24
    assert len([r for r in rows if r["sweep"] == "replay"]) == 4
    for r in rows:  # the 1B block at one sequence is launch-bound: its difference is noise
        assert r["forward"] > 0 and (r["measured"] > 0 or r["name"] == "mpt-1b")
    kernels = vb.kernel_rows(vb.load("blocks.json", vb.H100)["kernels"])
    assert len(kernels) == 4 and {round(r["model"], 3) for r in kernels} == {0.667}
    assert all(0.5 < r["measured"] < 0.8 for r in kernels)
