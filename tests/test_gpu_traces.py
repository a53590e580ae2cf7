"""The trace reader on traces of PyTorch 2.11 on a GPU (``calibration/results/h200/traces``,
recorded by ``calibration/gpu_traces.py`` on one H200; its README has the provenance).

The reader's other real traces come from older PyTorch versions. These check, against
the recording's own summary and counts made here from the raw JSON, what the reader says
of DDP over NCCL in a world of one rank (NCCL launches nothing: times unknown, said so)
and of two ranks on one GPU over Gloo with CUDA tensors, where a call runs on Gloo's
worker threads between a copy to the host and one back, two at a time.
"""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from scalemodel.calibrate import read_trace

HERE = Path(__file__).resolve().parents[1] / "calibration" / "results" / "h200" / "traces"
GLOO = [HERE / "ddp-gloo2.rank0.json.gz", HERE / "ddp-gloo2.rank1.json.gz"]
NCCL = HERE / "ddp-nccl.rank0.json.gz"


def summary(job):
    return json.loads((HERE / f"{job}.summary.json").read_text())


def events(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def cpu_steps(evs):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                  if e.get("cat") == "user_annotation"
                  and str(e.get("name", "")).startswith("ProfilerStep#"))


@pytest.fixture(scope="module")
def gloo():
    return read_trace(GLOO)


@pytest.fixture(scope="module")
def nccl():
    return read_trace(NCCL)


def test_one_rank_nccl_ddp(nccl):
    s = summary("ddp-nccl")
    assert (nccl.world_size, nccl.backend, nccl.nccl_version) == (1, "nccl", s["nccl"])
    assert nccl.gpus == (s["gpu"],) and nccl.timeline == "gpu"
    spans = cpu_steps(events(NCCL))
    assert nccl.step_count == len(spans) == s["profiled_steps"]
    assert nccl.step_time == pytest.approx(np.median([b - a for a, b in spans]) * 1e-6,
                                           rel=1e-7)
    ar = nccl.collectives["all_reduce"]
    # one all-reduce per DDP bucket, the whole fp32 model per step
    assert ar.count_per_step == s["ddp_buckets"] == 4
    assert ar.bytes_per_step == 4 * s["parameters"]
    assert ar.time_total is None and "single rank" in nccl.undetermined["time.all_reduce"]
    assert sum(nccl.buckets["bytes"]) == 4 * s["parameters"]
    # nothing to communicate: the replay is the compute timeline itself
    assert abs(nccl.replay.error) < 0.02 * nccl.step_time


def test_gloo_two_ranks_with_cuda_tensors(gloo):
    s = summary("ddp-gloo2")
    assert (gloo.world_size, gloo.backend, gloo.ranks) == (2, "gloo", (0, 1))
    assert gloo.timeline == "gpu"
    ar = gloo.collectives["all_reduce"]
    assert ar.count_per_step == s["ddp_buckets"] == 13
    assert ar.bytes_per_step == 4 * s["parameters"]
    # every call has a time (Gloo launches no kernel: its copies and worker thread say it)
    assert ar.sizes_known == ar.calls and ar.time_total is not None
    assert "time.all_reduce" not in gloo.undetermined
    # the calls' shares add up to the time the link was busy (two worker threads at once)
    busy = gloo.per_step["median"]["communication"]
    shared = ar.time_per_step + gloo.collectives["broadcast"].time_per_step
    assert shared == pytest.approx(busy, rel=0.05)
    # the fitted link, and the model replays the measured step
    assert gloo.cluster is not None
    assert abs(gloo.replay.error) < 0.05 * gloo.step_time
    assert abs(gloo.replay.overlap_only_error) < 0.02 * gloo.step_time


def test_gloo_calls_run_inside_their_worker_spans(gloo):
    """Each call's window (from the copy to the host to the copy back) lies inside the
    span of its gloo:all_reduce on the worker thread, counted here from the raw JSON:
    the busy time the reader reports is at most the union of those spans."""
    evs = events(GLOO[0])
    steps = cpu_steps(evs)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                   if e.get("cat") == "user_annotation" and e.get("name") == "gloo:all_reduce")
    per_step = []
    for a, b in steps:
        iv = [(x, y) for x, y in spans if a <= x < b]
        total, hi = 0.0, -np.inf
        for x, y in iv:
            total += max(0.0, y - max(x, hi))
            hi = max(hi, y)
        per_step.append(total * 1e-6)
    assert gloo.collectives["all_reduce"].time_per_step <= np.median(per_step)


def test_a_call_cut_off_by_the_profilers_window_leaves_the_others_as_they_are(gloo, tmp_path):
    """Each gloo call on CUDA tensors is matched to the c10d operator that queued it by the
    stream of its copies: without one c10d operator (the profiler's window cut it), the
    other calls keep their times (matched in order, every call moved: +30 %)."""
    cut = []
    for path in GLOO:
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh)
        first = min((e for e in doc["traceEvents"] if e.get("name") == "c10d::allreduce_"),
                    key=lambda e: e["ts"])
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e is not first]
        out = tmp_path / path.name.replace(".gz", "")
        out.write_text(json.dumps(doc))
        cut.append(out)
    rep = read_trace(cut)
    got = rep.collectives["all_reduce"].time_per_step
    assert got == pytest.approx(gloo.collectives["all_reduce"].time_per_step, rel=0.02)
    assert abs(rep.replay.overlap_only_error) < 0.02 * rep.step_time


def test_calls_without_a_time_are_counted_not_said_to_have_no_gpu_activity(tmp_path):
    """When some calls of a kind have times and some not, the reader said 'the trace has
    no GPU activity for these calls' while fitting and replaying on the timed ones."""
    from test_trace import write_trace

    write_trace(tmp_path / "t.json", steps=3, world=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    nccl = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                   and "nccl" in e["name"].lower()), key=lambda e: e["ts"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e is not nccl[8]]
    (tmp_path / "cut.json").write_text(json.dumps(doc))
    rep = read_trace(tmp_path / "cut.json")
    said = rep.undetermined.get("time.all_reduce", "")
    assert said.startswith("1 of ") and "no GPU activity" not in said


def test_a_sharded_step_is_said_not_to_be_replayed(tmp_path):
    """A step with all-gathers (FSDP, ZeRO-3) is replayed as DDP's all-reduces alone; the
    report says so instead of only listing the all-gathers as not modelled."""
    from test_trace import write_trace

    write_trace(tmp_path / "t.json", steps=3, world=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    steps = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"]
                   if str(e.get("name", "")).startswith("ProfilerStep#"))
    for k, (ts, _) in enumerate(steps):
        t = ts + 5.0  # µs into the step, on the main thread
        doc["traceEvents"] += [
            {"ph": "X", "cat": "user_annotation", "name": "nccl:_all_gather_base", "pid": 100,
             "tid": 1, "ts": t, "dur": 4.0, "args": {"Input Dims": [[1024]],
                                                     "Input type": ["float"]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
             "tid": 1, "ts": t + 1.0, "dur": 2.0, "args": {"correlation": 990000 + k}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "pid": 0,
             "tid": 21, "ts": t + 3.0, "dur": 20.0,
             "args": {"device": 0, "stream": 21, "correlation": 990000 + k}}]
    (tmp_path / "fsdp.json").write_text(json.dumps(doc))
    rep = read_trace(tmp_path / "fsdp.json")
    assert "all_gather" in rep.replay.uncovered
    assert any("sharded data parallelism" in n for n in rep.notes)


def test_the_recording_script_without_a_gpu_says_so_in_one_line():
    import subprocess
    import sys

    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    script = Path(__file__).resolve().parents[1] / "calibration" / "gpu_traces.py"
    out = subprocess.run([sys.executable, str(script), "--out", "unused"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no CUDA GPU here" in out.stderr
    assert "Traceback" not in out.stderr
