"""The PyTorch profiler (Kineto) trace reader, ``scalemodel.calibrate.trace``.

Real traces (``tests/data/traces``, four schema variants from HolisticTraceAnalysis' test
data) are checked against counts made here from the raw JSON with plain loops; synthetic
traces generated from known parameters (latency, bandwidth, bucket sizes, timeline) are
read back and the parameters recovered; bad input fails with one clear error.
"""

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.calibrate import read_trace
from scalemodel.calibrate import trace_read as trr

DATA = Path(__file__).parent / "data" / "traces"
TRACES = sorted(DATA.glob("*.json.gz"))
ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")

SIZE = {"float": 4, "Float": 4, "double": 8, "Double": 8, "c10::Half": 2, "Half": 2,
        "c10::BFloat16": 2, "BFloat16": 2, "long int": 8, "Long": 8, "int": 4, "Int": 4}
KIND = {"allreduce": "all_reduce", "broadcast": "broadcast", "all_reduce": "all_reduce",
        "all_to_all": "all_to_all", "allgather": "all_gather",
        "_allgather_base": "all_gather", "_reduce_scatter_base": "reduce_scatter"}


@pytest.fixture(scope="module")
def reports():
    return {p.name.split(".")[0]: read_trace(p) for p in TRACES}


def raw(path):
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as fh:
        return json.load(fh)


def step_spans(events):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))


def step_durations(events):
    return [e["dur"] for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]


def independent_count(path):
    """Calls and input bytes per collective kind issued inside ProfilerSteps, from the
    CPU side only: record_param_comms where it has sizes, else the nccl:/gloo:
    annotations' Input Dims (the reader prefers the kernels' args)."""
    events = raw(path)["traceEvents"]
    spans = step_spans(events)

    def in_step(t):
        return any(a <= t < b for a, b in spans)

    rpc = [e for e in events if e.get("name") == "record_param_comms"
           and "In msg nelems" in e.get("args", {}) and in_step(e["ts"])]
    calls, nbytes = {}, {}
    if rpc:
        for e in rpc:
            a = e["args"]
            if a["Collective name"] == "wait":
                continue
            k = KIND[a["Collective name"]]
            calls[k] = calls.get(k, 0) + 1
            nbytes[k] = nbytes.get(k, 0) + a["In msg nelems"] * SIZE[a["dtype"]]
        return calls, nbytes
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") != "X" or not in_step(e["ts"]):
            continue
        if name.startswith(("nccl:", "gloo:")):
            k = KIND[name.split(":", 1)[1]]
            calls[k] = calls.get(k, 0) + 1
            a = e.get("args", {})
            if "Input Dims" in a:
                n = 1
                for d in a["Input Dims"][0]:
                    n *= d
                nbytes[k] = nbytes.get(k, 0) + n * SIZE[a["Input type"][0]]
            else:
                nbytes[k] = None
    return calls, nbytes


# --------------------------------------------------------------------------- real traces

@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_world_size_and_step_time_agree_with_the_trace(path, reports):
    rep = reports[path.name.split(".")[0]]
    doc = raw(path)
    assert rep.world_size == doc["distributedInfo"]["world_size"]
    assert rep.backend == doc["distributedInfo"]["backend"]
    assert rep.ranks == (doc["distributedInfo"]["rank"],)
    durations = step_durations(doc["traceEvents"])
    # every ProfilerStep counts (none dropped), times in seconds
    assert rep.step_count == len(durations)
    np.testing.assert_allclose(rep.step_time, np.median(durations) * 1e-6, rtol=1e-12)
    np.testing.assert_allclose(rep.step_time_spread["min"], min(durations) * 1e-6)
    np.testing.assert_allclose(sorted(rep.step_times), sorted(np.array(durations) * 1e-6))
    names = {p["name"] for p in doc["deviceProperties"]}
    assert set(rep.gpus) <= names and rep.gpus


def test_step_times_match_the_table_of_the_shared_readme(reports):
    # the medians the data's README gives (ms), a number read by someone else
    readme = {"ddp_1rank": 95.55, "ddp_2ranks_allreduce_a": 345.77,
              "ddp_2ranks_allreduce_b": 222.44, "mixed_2ranks_alltoall_allreduce": 114.69}
    for name, ms in readme.items():
        assert abs(reports[name].step_time * 1e3 - ms) <= 0.01 * ms


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_byte_totals_per_kind_agree_with_an_independent_count(path, reports):
    rep = reports[path.name.split(".")[0]]
    calls, nbytes = independent_count(path)
    assert set(calls) <= set(rep.collectives)
    for kind, n in calls.items():
        c = rep.collectives[kind]
        assert c.calls == n, kind
        assert c.count_per_step == n / rep.step_count
        if nbytes.get(kind) is None:
            assert c.total_bytes is None and f"bytes.{kind}" in rep.undetermined
        else:
            assert c.total_bytes == nbytes[kind], kind
            assert c.sizes_known == n


def test_sizes_come_from_where_the_trace_has_them(reports):
    assert reports["ddp_2ranks_allreduce_b"].collectives["all_reduce"].size_source == \
        "kernel args"
    assert reports["ddp_1rank"].collectives["all_reduce"].size_source == \
        "record_param_comms"
    mixed = reports["mixed_2ranks_alltoall_allreduce"].collectives
    assert mixed["all_to_all"].size_source == "annotation Input Dims"
    a = reports["ddp_2ranks_allreduce_a"]
    assert a.collectives["all_reduce"].size_source is None
    assert "record_shapes" in a.undetermined["bytes.all_reduce"]
    assert "nccl_version" in a.undetermined and a.nccl_version is None


def test_kernel_times_algorithm_and_protocol():
    path = DATA / "ddp_2ranks_allreduce_b.json.gz"
    rep = read_trace(path)
    events = raw(path)["traceEvents"]
    spans = step_spans(events)
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime"}
    busy = {}
    for e in events:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel"):
            t = launch.get(e["args"]["correlation"])
            if t is not None and any(a <= t < b for a, b in spans):
                k = "all_reduce" if "AllReduce" in e["name"] else "broadcast"
                busy[k] = busy.get(k, 0.0) + e["dur"] * 1e-6
    for k, t in busy.items():
        np.testing.assert_allclose(rep.collectives[k].time_total, t, rtol=1e-9)
    ar = rep.collectives["all_reduce"]
    assert ar.algorithms == {"RING": 15} and ar.protocols == {"LL": 15}
    # bus bandwidth of a 2-rank all-reduce equals the algorithm bandwidth (2(n-1)/n = 1)
    assert ar.group_size == 2 and ar.busbw == pytest.approx(ar.algbw)
    assert ar.algbw == pytest.approx(8 * ar.total_bytes / ar.time_total)
    mixed = read_trace(DATA / "mixed_2ranks_alltoall_allreduce.json.gz")
    assert mixed.collectives["all_to_all"].protocols == {"SIMPLE": 42}
    # the kernels that ran before the profiler window have no launch: left out, said so
    assert any("before the profiler started" in n for n in mixed.notes)


def test_per_step_breakdown_is_consistent(reports):
    for rep in reports.values():
        med = rep.per_step["median"]
        for st in rep.per_step["steps"]:
            assert 0 <= st["exposed_communication"] <= st["communication"] + 1e-12
            assert st["compute"] <= st["forward"] + st["backward"] + st["optimizer"] \
                + st["other"] + 1e-9
        assert med["backward"] > 0 and med["forward"] > 0
    # one rank: NCCL runs no kernel, nothing to expose
    assert reports["ddp_1rank"].per_step["median"]["communication"] == 0
    # the compiled backward of trace a issues its all-reduces after its compute: all exposed
    a = reports["ddp_2ranks_allreduce_a"].per_step["median"]
    assert a["exposed_communication"] == pytest.approx(a["communication"])


def test_gradient_buckets_and_profiles(reports, tmp_path):
    rep = reports["ddp_2ranks_allreduce_b"]
    p = rep.profile
    # one tensor per DDP bucket, in the order the all-reduces were issued
    assert p.tensor_bytes.tolist() == [4 * n for n in (2049000, 7875584, 6563840, 6637568,
                                                       2431040)]
    assert np.all(np.diff(p.tensor_ready) >= 0) and p.backward_time >= p.tensor_ready[-1]
    assert "DDP bucket" in p.provenance["derivation"]
    assert rep.collectives["all_reduce"].gradient == 15
    again = sm.load_profile(sm.save_profile(p, tmp_path / "w.json"))
    np.testing.assert_allclose(again.tensor_ready, p.tensor_ready)
    c = sm.load_cluster(sm.save_cluster(rep.cluster, tmp_path / "c.json"))
    assert c.alpha == rep.cluster.alpha and "alpha" in c.intervals
    assert c.compute_slowdown == pytest.approx(rep.compute_slowdown["value"])
    bw = rep.cluster.extra["fitted_bandwidth"]
    sf = sm.scaling_factor(str(tmp_path / "w.json"), n=2, bw=bw, cluster=str(tmp_path /
                                                                            "c.json"),
                           fusion="none")
    assert 0 < sf <= 1


def test_replay_check(reports):
    for name in ("ddp_1rank", "ddp_2ranks_allreduce_b", "mixed_2ranks_alltoall_allreduce"):
        r = reports[name].replay
        assert r.predicted is not None and r.measured == reports[name].step_time
        assert r.error == pytest.approx(r.predicted - r.measured)
        assert abs(r.relative_error) < 0.1, name
    # the all_to_all of the embedding tables is outside the model, and it says how much
    u = reports["mixed_2ranks_alltoall_allreduce"].replay.uncovered["all_to_all"]
    assert u["calls_per_step"] == 7 and 0.1 < u["share"] < 0.5
    # no sizes: no model prediction, but a reason, and the overlap-only replay
    a = reports["ddp_2ranks_allreduce_a"].replay
    assert a.predicted is None and "profile" in a.reason
    assert abs(a.overlap_only_error) < 0.05 * a.measured
    assert reports["ddp_1rank"].replay.iteration["n_buckets"] == 5


def test_json_report_has_the_documented_keys(reports):
    d = json.loads(json.dumps(reports["ddp_2ranks_allreduce_b"].to_dict()))
    for key in ("world_size", "backend", "nccl_version", "gpus", "step_time",
                "step_time_spread", "step_count", "per_step", "collectives",
                "undetermined", "replay", "profiles"):
        assert key in d
    assert d["collectives"]["all_reduce"]["calls"] == 15
    sm.WorkloadProfile.from_dict(d["profiles"]["workload"])
    sm.ClusterProfile.from_dict(d["profiles"]["cluster"])


# --------------------------------------------------------------------------- synthetic

def ring(m, n, alpha, bw):
    """Ring all-reduce time of m bytes per rank among n [s] (2(n-1) steps)."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * 8 * m / bw


def write_trace(path, *, rank=0, world=4, steps=4, first_step=10, buckets=None,
                alpha=20e-6, bw=100e9, wait=0.0, nf=20, df=300e-6, nb=40, db=400e-6,
                opt=500e-6, gap=2e-3, extra=(), meta=None, nccl=True):
    """A Kineto-like trace of a DDP step from known parameters; returns the step period
    [s]. Rank r's NCCL kernels start ``wait`` earlier (they wait for the others) and end
    when rank 0's do."""
    if buckets is None:
        buckets = [(3, 1 << 16), (11, 1 << 20), (19, 8 << 20), (27, 25 << 20),
                   (35, 40 << 20), (39, 64 << 20)]   # (after backward kernel j, bytes)
    us = 1e6
    ev = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "ts": 0,
           "args": {"name": "python"}}]
    corr = [1000]

    def span(cat, name, tid, t0, t1, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid,
                   "ts": round(t0 * us, 3), "dur": round((t1 - t0) * us, 3), "args": args})

    def kernel(name, stream, t0, dur, launch, tid, **args):
        corr[0] += 1
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                   "ts": round(t0 * us, 3), "dur": round(dur * us, 3),
                   "args": {"device": 0, "stream": stream, "correlation": corr[0],
                            "External id": corr[0], **args}})
        span("cuda_runtime", "cudaLaunchKernel", tid, launch, launch + 2e-6,
             correlation=corr[0])

    s0 = 1000.0
    period = None
    for s in range(steps):
        g0 = s0 + 30e-6
        t = g0
        for j in range(nf):   # forward on the main thread
            kernel("sm80_xmma_gemm_fwd", 7, t, df, t - 20e-6, 1)
            span("cpu_op", "aten::mm", 1, t - 21e-6, t - 17e-6)
            t += df
        comm_end = -math.inf
        for j in range(nb):   # backward on the autograd thread
            launch = t - 20e-6
            span("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 2,
                 launch - 5e-6, launch + 5e-6)
            kernel("sm80_xmma_gemm_bwd", 7, t, db, launch, 2)
            t += db
            for k, (after, m) in enumerate(buckets):
                if after != j:
                    continue
                issue = launch + 6e-6
                dur = ring(m, world, alpha, bw)
                start = max(t, comm_end)
                comm_end = start + dur
                span("user_annotation", "nccl:all_reduce", 2, issue, issue + 4e-6)
                span("cpu_op", "record_param_comms", 2, issue + 0.5e-6, issue + 3.5e-6,
                     **{"Collective name": "allreduce", "In msg nelems": m // 4,
                        "dtype": "Float", "Group size": world})
                kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage"
                       "<4096ul>)" if nccl else "allreduce_gloo", 20,
                       start - wait, dur + wait, issue + 1e-6, 2,
                       **{"Collective name": "allreduce", "In msg nelems": m // 4,
                          "Out msg nelems": m // 4, "Group size": world, "dtype": "Float"})
        b1 = t
        o0 = max(b1, comm_end) + 10e-6
        span("user_annotation", "Optimizer.step#SGD.step", 1, o0 - 25e-6, o0 - 15e-6)
        kernel("multi_tensor_apply_kernel", 7, o0, opt, o0 - 20e-6, 1)
        g1 = o0 + opt + gap
        period = g1 - g0
        span("user_annotation", f"ProfilerStep#{first_step + s}", 1, s0, s0 + period)
        s0 += period
    for e in extra:
        ev.append(e)
    doc = {"schemaVersion": 1,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                               "nccl_version": "2.21.5"},
           **(meta or {}), "traceEvents": ev, "displayTimeUnit": "ms"}
    text = json.dumps(doc)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        Path(path).write_text(text)
    return period


def test_synthetic_trace_round_trip(tmp_path):
    """Known latency, bandwidth and bucket sizes: the reader recovers them, and the
    model replays the synthetic step exactly (it was generated by the model's FIFO)."""
    alpha, bw, world = 20e-6, 100e9, 4
    period = write_trace(tmp_path / "r0.json.gz", alpha=alpha, bw=bw, world=world)
    rep = read_trace(tmp_path / "r0.json.gz")
    assert rep.world_size == world and rep.nccl_version == "2.21.5"
    assert rep.step_time == pytest.approx(period, abs=2e-9)
    fit = rep.fits["all_reduce"]
    assert fit.alpha == pytest.approx(alpha, rel=1e-3)
    assert fit.bandwidth == pytest.approx(bw, rel=1e-4)
    assert rep.cluster.alpha == pytest.approx(alpha, rel=1e-3)
    assert rep.compute_slowdown["value"] == pytest.approx(1.0)
    assert rep.profile.tensor_bytes.tolist() == [1 << 16, 1 << 20, 8 << 20, 25 << 20,
                                                 40 << 20, 64 << 20]
    np.testing.assert_allclose(rep.profile.tensor_ready,
                               [(j + 1) * 400e-6 for j in (3, 11, 19, 27, 35, 39)],
                               atol=1e-8)
    assert rep.profile.forward_time == pytest.approx(20 * 300e-6, abs=1e-8)
    assert rep.profile.backward_time == pytest.approx(40 * 400e-6, abs=1e-8)
    assert rep.replay.error == pytest.approx(0.0, abs=1e-7)
    assert rep.replay.overlap_only_error == pytest.approx(0.0, abs=1e-7)
    assert rep.replay.uncovered == {}
    ar = rep.collectives["all_reduce"]
    assert ar.count_per_step == 6 and ar.algorithms == {"RING": 24}
    assert ar.total_bytes == 4 * sum(m for _, m in [(0, 1 << 16), (0, 1 << 20),
                                                    (0, 8 << 20), (0, 25 << 20),
                                                    (0, 40 << 20), (0, 64 << 20)])


def test_every_rank_of_a_job_gives_the_true_transfer_time(tmp_path):
    """Ranks that arrive early wait inside the kernel; with every rank's trace each
    collective's shortest time is fitted, so the waiting does not bias the bandwidth."""
    paths = []
    for r in range(4):
        paths.append(tmp_path / f"rank{r}.json")
        write_trace(paths[-1], rank=r, wait=r * 300e-6)
    late = read_trace(paths[3])
    everyone = read_trace(paths)
    assert everyone.ranks == (0, 1, 2, 3) and everyone.step_count == 16
    assert everyone.fits["all_reduce"].bandwidth == pytest.approx(100e9, rel=1e-4)
    assert late.fits["all_reduce"].alpha > 2 * everyone.fits["all_reduce"].alpha
    assert everyone.collectives["all_reduce"].calls == 4 * 24


def test_streaming_is_independent_of_chunk_boundaries(tmp_path, monkeypatch):
    """Names with multi-byte characters, escapes, numbers and literals cut by chunk
    boundaries, trailing commas: any chunk size reads the same events as json.load."""
    extra = [{"ph": "X", "cat": "cpu_op", "name": "aten::ünïcødé \"q\" \\ 🚀", "pid": 1,
              "tid": 1, "ts": 1000.5, "dur": 1e-3,
              "args": {"x": [True, False, None, -1.5e-7]}}]
    write_trace(tmp_path / "t.json", steps=2, extra=extra, nb=8, nf=2,
                buckets=[(2, 4096), (5, 1 << 20), (7, 4 << 20)])
    text = (tmp_path / "t.json").read_text()
    (tmp_path / "comma.json").write_text(text.replace('"displayTimeUnit": "ms"}',
                                                      '"displayTimeUnit": "ms",}')
                                         .replace("}], \"displayTimeUnit\"",
                                                  "},], \"displayTimeUnit\""))
    want = json.loads(text)["traceEvents"]
    for chunk in (1, 3, 64, 4093):
        monkeypatch.setattr(trr, "_CHUNK", chunk)
        for name in ("t.json", "comma.json"):
            meta, stats = {}, {}
            got = list(trr._events(str(tmp_path / name), meta, stats))
            assert got == want, (chunk, name)
            assert meta["distributedInfo"]["world_size"] == 4
            assert stats["events_open"] == "["


# --------------------------------------------------------------------------- bad input

def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "scalemodel.calibrate", "from-trace",
                           *map(str, args)], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=dict(ENV, PYTHONPATH=str(ROOT)), timeout=300)


def bad(tmp_path, *paths, match, cli=True):
    """read_trace raises, the CLI exits 2 with one line naming the problem and writes
    nothing."""
    with pytest.raises((sm.ProfileFormatError, sm.CalibrationError), match=match):
        read_trace(list(paths))
    if not cli:
        return
    from scalemodel.calibrate.trace import main
    out = tmp_path / "out" / "job"
    before = set(tmp_path.rglob("*"))
    assert main([*map(str, paths), "--out", str(out)]) == 2
    assert set(tmp_path.rglob("*")) == before


def test_not_a_trace(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"schemaVersion": 1, "foo": [1, 2]}')
    bad(tmp_path, tmp_path / "x.json", match=r"x\.json.*traceEvents.*not a Kineto")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.json" in err[0]
    (tmp_path / "y.json").write_text("this is not json at all")
    bad(tmp_path, tmp_path / "y.json", match=r"y\.json.*not a Kineto")
    (tmp_path / "z.bin").write_bytes(bytes(range(256)) * 8)
    bad(tmp_path, tmp_path / "z.bin", match=r"z\.bin")
    bad(tmp_path, tmp_path / "missing.json", match=r"missing\.json.*no such file")


def test_truncated_files(tmp_path):
    whole = (DATA / "ddp_2ranks_allreduce_b.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    bad(tmp_path, tmp_path / "cut.json.gz", match=r"cut\.json\.gz.*truncated")
    write_trace(tmp_path / "t.json", steps=2)
    text = (tmp_path / "t.json").read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) * 2 // 3])
    bad(tmp_path, tmp_path / "cut.json", match=r"cut\.json.*truncated")


def test_trace_without_steps_world_size_or_collectives(tmp_path):
    write_trace(tmp_path / "t.json", steps=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    no_steps = dict(doc, traceEvents=[e for e in doc["traceEvents"]
                                      if not e["name"].startswith("ProfilerStep")])
    (tmp_path / "nosteps.json").write_text(json.dumps(no_steps))
    bad(tmp_path, tmp_path / "nosteps.json", match=r"nosteps\.json.*ProfilerStep")
    no_world = {k: v for k, v in doc.items() if k != "distributedInfo"}
    (tmp_path / "noworld.json").write_text(json.dumps(no_world))
    bad(tmp_path, tmp_path / "noworld.json",
        match=r"noworld\.json.*distributedInfo\.world_size.*missing")
    quiet = dict(doc, traceEvents=[e for e in doc["traceEvents"]
                                   if "nccl" not in e["name"]
                                   and e["name"] != "record_param_comms"])
    (tmp_path / "quiet.json").write_text(json.dumps(quiet))
    bad(tmp_path, tmp_path / "quiet.json", match=r"quiet\.json.*no collective")


@pytest.mark.slow
def test_traces_of_different_jobs(tmp_path):
    one = DATA / "ddp_1rank.json.gz"
    b = DATA / "ddp_2ranks_allreduce_b.json.gz"
    a = DATA / "ddp_2ranks_allreduce_a.json.gz"
    mixed = DATA / "mixed_2ranks_alltoall_allreduce.json.gz"
    bad(tmp_path, one, b, match=r"ddp_1rank.*world size 1.*ddp_2ranks_allreduce_b.*2",
        cli=False)
    bad(tmp_path, b, mixed, match=r"share no ProfilerStep")
    # same world size and overlapping step numbers, but other collectives: other jobs
    bad(tmp_path, a, b, match=r"different collectives", cli=False)
    bad(tmp_path, b, b, match=r"both rank 0", cli=False)
    write_trace(tmp_path / "r0.json", rank=0, steps=2)
    write_trace(tmp_path / "r1.json", rank=1, steps=2, first_step=50)
    bad(tmp_path, tmp_path / "r0.json", tmp_path / "r1.json", match="share no ProfilerStep")


def test_what_is_not_a_regular_file_is_refused_without_waiting(tmp_path):
    """A FIFO, a device, a folder, a link to a device: "not a regular file", at once; a
    link to a regular trace is followed."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    bad(tmp_path, fifo, match=r"pipe\.json.*not a regular file.*FIFO")
    bad(tmp_path, Path("/dev/zero"), match=r"/dev/zero.*not a regular file.*device", cli=False)
    (tmp_path / "folder.json").mkdir()
    bad(tmp_path, tmp_path / "folder.json", match=r"folder\.json.*not a regular file.*folder")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    bad(tmp_path, tmp_path / "zero.json", match=r"zero\.json.*not a regular file")
    write_trace(tmp_path / "t.json", steps=2)
    (tmp_path / "link.json").symlink_to(tmp_path / "t.json")
    assert read_trace(tmp_path / "link.json").step_count == 2


@pytest.mark.parametrize("gz", [False, True])
def test_deep_nesting_is_a_clear_error(tmp_path, gz):
    """100k nested arrays, in the events or in a metadata value: refused naming the file,
    no RecursionError, nothing built."""
    for i, where in enumerate(("events", "meta")):
        deep = "[" * 100_000 + "]" * 100_000
        text = ('{"traceEvents": [' + deep + "]}" if where == "events"
                else '{"deviceProperties": ' + deep + ', "traceEvents": []}')
        path = tmp_path / f"deep{i}.json{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
        bad(tmp_path, path, match=rf"deep{i}\.json.*nests more than {trr.MAX_DEPTH} ")
    # brackets inside strings (escaped quotes included) do not count
    ok = {"name": '[[[[\\"[[[' * 100, "ph": "i"}
    write_trace(tmp_path / "s.json", steps=2, extra=[ok] * 3)
    assert read_trace(tmp_path / "s.json").step_count == 2


def test_no_message_quotes_the_content_of_a_file_that_is_not_a_trace(tmp_path):
    secret = "SECRET-TOKEN-c2VjcmV0"
    for i, text in enumerate([secret, f'{{"a": {secret}}}', f'{{"a": "{secret}"}} {secret}',
                              f'[{{"x": 1}}, {secret}]', f'{{"traceEvents": {secret}}}',
                              f'{{"a": "{secret}", "b": [1, 2,', f'{{"{secret}": 1}}']):
        path = tmp_path / f"f{i}.json"
        path.write_text(text)
        with pytest.raises(sm.ProfileFormatError) as err:
            read_trace(path)
        assert secret not in str(err.value) and f"f{i}.json" in str(err.value)
        assert "SECRET" not in str(err.value)


def test_trailing_commas_and_a_byte_order_mark_are_read(tmp_path):
    write_trace(tmp_path / "t.json", steps=2)
    text = (tmp_path / "t.json").read_text()
    want = read_trace(tmp_path / "t.json")
    doc = json.loads(text)
    doc["deviceProperties"] = [{"id": 0, "name": "X,]"}]
    body = json.dumps(doc).replace('"X,]"}]', '"X,]",},]')
    (tmp_path / "c.json").write_bytes(b"\xef\xbb\xbf" + body.encode())
    got = read_trace(tmp_path / "c.json")
    assert got.step_time == want.step_time and got.step_count == want.step_count


def test_metadata_after_the_events_and_array_form(tmp_path):
    """The keys may come in any order; the array form (events only) reads too."""
    write_trace(tmp_path / "t.json", steps=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    events = doc.pop("traceEvents")
    (tmp_path / "late.json").write_text(json.dumps({"traceEvents": events, **doc}))
    assert read_trace(tmp_path / "late.json").world_size == 4
    (tmp_path / "arr.json").write_text(json.dumps(events))
    bad(tmp_path, tmp_path / "arr.json", match=r"arr\.json.*world_size.*missing")
    (tmp_path / "obj.json").write_text(json.dumps(dict(doc, traceEvents={"a": 1})))
    bad(tmp_path, tmp_path / "obj.json", match=r"obj\.json.*traceEvents.*list of events")
    (tmp_path / "empty.json").write_text("  \n")
    bad(tmp_path, tmp_path / "empty.json", match=r"empty\.json.*empty")


def test_integers_beyond_64_bits(tmp_path):
    """An event arg of 2**64 - 1 (yajl's integers stop at 63 bits): read all the same;
    an integer of 5000 digits: a clear error naming the file (not Python's ValueError,
    nor ijson 3.6's crash on it when it makes Python ints)."""
    write_trace(tmp_path / "t.json", steps=2)
    want = read_trace(tmp_path / "t.json")
    big = {"ph": "i", "name": "x", "args": {"id": 2 ** 64 - 1}}
    write_trace(tmp_path / "u.json", steps=2, extra=[big])
    got = read_trace(tmp_path / "u.json")
    assert got.step_time == want.step_time and got.step_count == 2
    text = (tmp_path / "t.json").read_text()
    (tmp_path / "huge.json").write_text(text[:-1] + ', "x": ' + "7" * 5000 + "}")
    bad(tmp_path, tmp_path / "huge.json", match=r"huge\.json.*number longer than 1000")


def test_a_huge_metadata_value_streams(tmp_path):
    """A 4 MB number array as a metadata value, before the events, plain and gzip: read
    (the reader does not keep it); the events after it are all there."""
    write_trace(tmp_path / "t.json", steps=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    events = doc.pop("traceEvents")
    text = json.dumps(doc)[:-1] + ', "padding": [' + "1.5, " * 800_000 + '0], "traceEvents": ' \
        + json.dumps(events) + "}"
    (tmp_path / "pad.json.gz").write_bytes(gzip.compress(text.encode()))
    assert read_trace(tmp_path / "pad.json.gz").step_count == 2


# --------------------------------------------------------------------------- command line

@pytest.mark.slow
def test_cli_json_and_out(tmp_path):
    res = cli(DATA / "ddp_2ranks_allreduce_b.json.gz", "--json", "--out", tmp_path / "b")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["world_size"] == 2 and d["step_count"] == 3
    assert {p.name for p in tmp_path.iterdir()} == {"b.workload.json", "b.cluster.json",
                                                     "b.report.json"}
    p = sm.load_profile(tmp_path / "b.workload.json")
    assert p.tensor_bytes.size == 5
    sm.load_cluster(tmp_path / "b.cluster.json")
    # partial: no sizes in trace a, but world size and step time: exit 0, report only
    res = cli(DATA / "ddp_2ranks_allreduce_a.json.gz", "--out", tmp_path / "a")
    assert res.returncode == 0, res.stderr
    assert "undetermined: bytes.all_reduce" in res.stdout
    assert (tmp_path / "a.report.json").exists()
    assert not (tmp_path / "a.workload.json").exists()
    res = cli(tmp_path / "nothing.json")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "nothing.json" in res.stderr


@pytest.mark.slow
def test_large_trace_streams_in_bounded_memory(tmp_path):
    """A ~25 MB trace: Python memory while reading stays below the file's size (the
    events are decoded one at a time and only a few numbers per event are kept)."""
    import tracemalloc
    path = tmp_path / "big.json"
    write_trace(path, steps=60, nf=400, nb=600, db=100e-6, df=100e-6,
                buckets=[(50, 1 << 20), (200, 8 << 20), (400, 25 << 20), (599, 25 << 20)])
    size = path.stat().st_size
    assert size > 20e6
    # modules the reader imports lazily (scipy's fit...) are imported by a small trace
    # first: run alone, their import counted ~9 MB towards the peak and the test failed
    write_trace(tmp_path / "small.json")
    read_trace(tmp_path / "small.json")
    tracemalloc.start()
    rep = read_trace(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rep.step_count == 60
    assert peak < 1.0 * size, (peak, size)


# --------------------------------------------------------------------------- our own trace

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_calibration_records_a_trace_that_the_reader_reads(tmp_path):
    """``python -m scalemodel.calibrate --trace``: two gloo ranks on the CPU train a
    convnet with DDP under torch.profiler; torch writes one trace per rank and the reader
    reads the job back (sizes counted here from the c10d operators' own shapes)."""
    pytest.importorskip("torch")
    p = sm.WorkloadProfile(name="convnet", tensor_bytes=np.array([1e6, 2e6]),
                           tensor_ready=np.array([1e-3, 2e-3]), forward_time=0.01,
                           backward_time=0.02, update_time=1e-3,
                           provenance={"source": "test"})
    sm.save_profile(p, tmp_path / "p.json")
    sm.save_cluster(sm.ClusterProfile(name="c", alpha=1e-5, provenance={"source": "test"}),
                    tmp_path / "c.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "scalemodel.calibrate", "--backend", "gloo", "--model", "convnet",
           "--batch-size", "8", "--steps", "scaling", "--profile", "p.json",
           "--cluster", "c.json", "--line-rate", "10Gbps", "--iterations", "3",
           "--warmup", "1", "--bucket-cap-mb", "0.25", "--threads", "1",
           "--trace", "traces/ddp.json", "--out", "cl.json"]
    out = subprocess.run(cmd, cwd=tmp_path, env=dict(ENV, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    files = sorted((tmp_path / "traces").iterdir())
    assert [f.name for f in files] == ["ddp.rank0.json", "ddp.rank1.json"]  # no temp left
    rep = read_trace(files)
    assert rep.world_size == 2 and rep.backend == "gloo" and rep.ranks == (0, 1)
    assert rep.timeline == "cpu"
    durations, nbytes, calls = [], 0, 0
    for f in files:
        events = raw(f)["traceEvents"]
        durations += step_durations(events)
        spans = step_spans(events)
        for e in events:
            if e.get("name") == "c10d::allreduce_" and any(a <= e["ts"] < b
                                                           for a, b in spans):
                calls += 1
                for shape in e["args"]["Input Dims"][0]:   # a TensorList of float32
                    nbytes += 4 * math.prod(shape)
    assert rep.step_count == len(durations) == 10
    assert rep.step_time == pytest.approx(np.median(durations) * 1e-6, rel=1e-9)
    ar = rep.collectives["all_reduce"]
    assert ar.calls == calls and ar.total_bytes == nbytes
    assert ar.size_source == "annotation Input Dims" and ar.time_total > 0
    assert rep.profile is not None and rep.profile.tensor_bytes.size == calls / 10
    assert rep.replay.measured == rep.step_time
    # the calibration's barrier before each step is outside the model, and said so
    assert "barrier" in rep.replay.uncovered


# --------------------------------------------------------------------------- the scan

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as hst  # noqa: E402

_TEXT = hst.text(alphabet=hst.sampled_from(list('ab"\\[]{},:é🚀 \n\t')), max_size=12)
_JSON = hst.recursive(
    hst.none() | hst.booleans() | hst.integers(-10**6, 10**6)
    | hst.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: hst.lists(inner, max_size=4) | hst.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=25)


def _depth(value):
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_JSON, commas=hst.booleans(), cuts=hst.lists(hst.integers(1, 40), max_size=30))
def test_the_scan_keeps_the_json_and_counts_its_depth(value, commas, cuts):
    """Any JSON text, cut anywhere (escapes, multi-byte characters and runs of
    backslashes across the cuts), with trailing commas added: the text the scan hands
    the parser is the same JSON, and its depth is the value's nesting, independently
    computed (one deeper than the limit is refused, the depth itself accepted)."""
    text = json.dumps({"k": value}, ensure_ascii=False)
    if commas:   # a trailing comma before every closing bracket outside strings
        text = json.dumps({"k": value}, ensure_ascii=False, indent=1)
        text = text.replace("\n]", ",\n]").replace("\n}", ",\n}")
    data = text.encode()
    depth = _depth({"k": value})
    for limit, ok in ((depth, True), (depth - 1, False)):
        scan = trr._Scan("t", max_depth=limit, top=False)
        out, pos = [], 0
        try:
            for n in [*cuts, len(data)]:
                out.append(scan.feed(data[pos:pos + n]))
                pos += n
                if pos >= len(data):
                    break
            if scan.comma:
                out.append(b",")
        except sm.ProfileFormatError as exc:
            assert not ok and f"more than {limit} " in str(exc)
            continue
        assert ok, (limit, depth)
        assert json.loads(b"".join(out)) == {"k": value}
        assert scan.depth == 0 and not scan.in_string


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_long_strings_and_numbers_are_refused_wherever_the_cuts_fall(tmp_path, monkeypatch,
                                                                      chunk):
    """With a 10 kB token limit: a 20 kB string (plain, or full of brackets, escapes and
    commas) or a 2000-digit number is refused naming the file; a 9 kB string is read."""
    monkeypatch.setattr(trr, "_CHUNK", chunk)
    monkeypatch.setattr(trr, "_MAX_TOKEN", 10_000)
    write_trace(tmp_path / "t.json", steps=2)
    doc = json.loads((tmp_path / "t.json").read_text())
    for name, value, ok in (("plain", "x" * 20_000, False),
                            ("brackets", '[{,\\"}]' * 3000, False),
                            ("short", "[x]" * 3000, True)):
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(doc, note=value)))
        if ok:
            assert read_trace(tmp_path / f"{name}.json").step_count == 2
        else:
            bad(tmp_path, tmp_path / f"{name}.json",
                match=rf"{name}\.json.*string longer than", cli=False)
    text = json.dumps(doc)
    (tmp_path / "num.json").write_text(text[:-1] + ', "n": 0.' + "5" * 2000 + "}")
    bad(tmp_path, tmp_path / "num.json", match=r"num\.json.*number longer than 1000",
        cli=False)


def test_kernels_without_a_duration_are_skipped_not_read_as_instant(tmp_path):
    # a complete ('X') event must have 'dur': one without it was read as 0 s, so the
    # all-reduces took '0.00 ms/step' and the replay used zero-length kernels, unsaid
    write_trace(tmp_path / "r0.json")
    doc = json.loads((tmp_path / "r0.json").read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            del e["dur"]
    (tmp_path / "nodur.json").write_text(json.dumps(doc))
    rep = read_trace(tmp_path / "nodur.json")
    assert "all_reduce" not in rep.fits  # no kernel times: nothing to fit
    assert "time.all_reduce" in rep.undetermined


@pytest.mark.parametrize("field", ["dur", "ts"])
def test_times_written_as_text_are_malformed_not_read_as_numbers(tmp_path, field):
    # '"dur": "123"' is no time a profiler writes: float() read it as 123 us, unsaid
    write_trace(tmp_path / "r0.json")
    doc = json.loads((tmp_path / "r0.json").read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and field in e:
            e[field] = str(e[field])
    (tmp_path / "text.json").write_text(json.dumps(doc))
    rep = read_trace(tmp_path / "text.json")
    assert "all_reduce" not in rep.fits  # no kernel times: nothing to fit
    assert "time.all_reduce" in rep.undetermined


def test_message_sizes_that_make_no_workload_name_the_trace(tmp_path):
    # negative sizes in the annotations' Input Dims were refused as 'profile <object>:
    # field tensors.bytes', naming neither the trace nor where in it
    doc = raw(DATA / "mixed_2ranks_alltoall_allreduce.json.gz")
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("nccl:") and "Input Dims" in e.get("args", {}):
            e["args"]["Input Dims"] = [[-1000]]
    (tmp_path / "neg.json").write_text(json.dumps(doc))
    with pytest.raises(sm.ProfileFormatError) as exc:
        read_trace(tmp_path / "neg.json")
    assert str(exc.value).startswith("trace ") and "neg.json" in str(exc.value)
    assert "Input Dims" in str(exc.value)


def test_nan_in_a_trace_is_said_to_be_no_json(tmp_path):
    # Python's json.dump writes NaN; the error said only 'lexical error: invalid char'
    # and called the trace a 'profile'
    write_trace(tmp_path / "r0.json")
    text = (tmp_path / "r0.json").read_text()
    i = text.index('"dur": ') + len('"dur": ')
    (tmp_path / "nan.json").write_text(text[:i] + "NaN" + text[text.index(",", i):])
    with pytest.raises(sm.ProfileFormatError, match=r"^trace .*nan\.json.*holds NaN"):
        read_trace(tmp_path / "nan.json")
