"""Analysing one rank's trace, and several ranks of one job, once it is read.

Part of :mod:`scalemodel.calibrate.trace` (which re-exports the public names; the method
is described there): from the columns a :class:`~scalemodel.calibrate.trace_read._Collector`
kept, the steps, the collective calls with their sizes, kernels, algorithm and protocol,
the phases, the per-step breakdown, the compute slowdown, the gradient buckets (the
workload profile), the transport fits (the cluster profile) and the replay check.
"""

from __future__ import annotations

import math
import re

import attrs
import numpy as np

from ..exceptions import CalibrationError, ProfileFormatError
from ..units import MAX_COUNT
from .trace_read import _C_BACKWARD, _C_OPTIM, _C_OTHER, _Collector

__all__ = ["collective_kind", "COLLECTIVE_KINDS"]

#: The collective kinds the reader names; anything else is reported under its own name.
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all",
                    "send_recv", "reduce", "gather", "scatter", "barrier")


# element sizes of the dtype names in traces (kernel args: "Float", "BFloat16"; CPU
# annotations: "float", "c10::BFloat16", "long int"; kernel names: "f32", "bf16")
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "double": 8, "float64": 8, "f64": 8,
    "half": 2, "float16": 2, "f16": 2, "bfloat16": 2, "bf16": 2, "__nv_bfloat16": 2,
    "long": 8, "longint": 8, "int64": 8, "int64_t": 8, "longlong": 8, "u64": 8, "i64": 8,
    "int": 4, "int32": 4, "int32_t": 4, "i32": 4, "u32": 4, "uint32": 4, "uint32_t": 4,
    "short": 2, "shortint": 2, "int16": 2, "int16_t": 2, "uint16": 2,
    "char": 1, "signedchar": 1, "int8": 1, "int8_t": 1, "i8": 1, "byte": 1,
    "unsignedchar": 1, "uint8": 1, "uint8_t": 1, "u8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "e4m3": 1, "e5m2": 1, "complexfloat": 8, "complex<float>": 8, "complexdouble": 16,
    "complex<double>": 16, "complexhalf": 4, "complex<half>": 4,
}

_ALGO = re.compile(r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)"
                   r"(?=_|$)")
_PROTO = re.compile(r"_(LL128|LL|SIMPLE)(?=_|$)")

# the bus factor of nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor(n)
_BUS_FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n,
               "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
               "all_to_all": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
               "reduce": lambda n: 1.0, "send_recv": lambda n: 1.0}


def _dtype_bytes(name):
    """Element size of a dtype name from a trace [bytes], or None."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower().replace("c10::", "").replace("at::", "").replace(" ", "")
    return _DTYPE_BYTES.get(key)


def collective_kind(name):
    """Canonical kind of a collective's name (``"nccl:_allgather_base"`` ->
    ``"all_gather"``); names that are no known collective come back lower-cased."""
    text = str(name).lower()
    for prefix in ("c10d::", "nccl:", "gloo:", "ucc:", "mpi:", "xccl:", "hccl:", "rccl:"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    s = text.replace("_", "").replace(" ", "")
    if "alltoall" in s:
        return "all_to_all"
    if "reducescatter" in s:
        return "reduce_scatter"
    if "allgather" in s:
        return "all_gather"
    if "allreduce" in s:
        return "all_reduce"
    if "broadcast" in s or s == "bcast":
        return "broadcast"
    if "sendrecv" in s or s.startswith("send") or s.startswith("recv"):
        return "send_recv"
    if "barrier" in s:
        return "barrier"
    if s.startswith("gather"):
        return "gather"
    if s.startswith("scatter"):
        return "scatter"
    if s.startswith("reduce"):
        return "reduce"
    return text.strip("_") or "unknown"


def _parse_kernel_name(name):
    """(collective, algorithm, protocol) from an NCCL kernel name, each None if absent."""
    base = name.split("(", 1)[0]
    tokens = base.split("_")
    coll = collective_kind(tokens[1]) if len(tokens) > 1 else None
    if coll in ("generic", "unknown") or (coll and coll.isdigit()):
        coll = None
    algo = _ALGO.search(base)
    proto = _PROTO.search(base)
    return coll, algo.group(1) if algo else None, proto.group(1) if proto else None

# =========================================================================== intervals

def _union(start, end):
    """Disjoint sorted intervals covering [start, end) (vectorized merge)."""
    start = np.asarray(start, float)
    end = np.asarray(end, float)
    if start.size == 0:
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _length(iv):
    return float(np.sum(iv[1] - iv[0])) if iv[0].size else 0.0


def _inside(x, iv):
    """Whether each point of ``x`` lies in one of the disjoint sorted intervals ``iv``."""
    x = np.asarray(x, float)
    if iv[0].size == 0:
        return np.zeros(x.shape, bool)
    i = np.searchsorted(iv[0], x, side="right") - 1
    ok = i >= 0
    out = np.zeros(x.shape, bool)
    out[ok] = x[ok] <= iv[1][i[ok]]
    return out


def _overlap_length(a, b):
    """Length of the intersection of two disjoint interval sets [s]."""
    if a[0].size == 0 or b[0].size == 0:
        return 0.0
    pts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    mid = 0.5 * (pts[:-1] + pts[1:])
    both = _inside_open(mid, a) & _inside_open(mid, b)
    return float(np.sum(np.diff(pts)[both]))


def _inside_open(x, iv):
    i = np.searchsorted(iv[0], x, side="right") - 1
    ok = i >= 0
    out = np.zeros(x.shape, bool)
    out[ok] = x[ok] < iv[1][i[ok]]
    return out


def _overlap_each(start, end, iv):
    """Length of each interval [start_i, end_i) that ``iv`` covers [s] (vectorized)."""
    start = np.asarray(start, float)
    end = np.asarray(end, float)
    if iv[0].size == 0 or start.size == 0:
        return np.zeros(start.shape)
    cum = np.concatenate(([0.0], np.cumsum(iv[1] - iv[0])))

    def covered_before(t):
        i = np.searchsorted(iv[0], t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        part = np.where(i > 0, np.clip(t - iv[0][np.maximum(i - 1, 0)], 0.0,
                                       (iv[1] - iv[0])[np.maximum(i - 1, 0)]), 0.0)
        return np.where(i > 0, full + part, 0.0)

    return covered_before(end) - covered_before(start)


def _per_thread_union(ts, dur, tid, mask):
    out = {}
    for t in np.unique(tid[mask]):
        m = mask & (tid == t)
        out[int(t)] = _union(ts[m], ts[m] + dur[m])
    return out


def _inside_thread(x, tid, ivs):
    out = np.zeros(np.shape(x), bool)
    for t, iv in ivs.items():
        m = tid == t
        if m.any():
            out[m] = _inside(x[m], iv)
    return out


# =========================================================================== one rank

@attrs.define
class _Calls:
    """Collective calls of one rank (columns)."""

    kind: list
    issue: np.ndarray      # CPU issue time [s] (NaN if unknown)
    start: np.ndarray      # first kernel / execution start [s] (NaN if none)
    end: np.ndarray
    dur: np.ndarray        # busy time of its kernels [s] (NaN if none)
    nbytes: np.ndarray     # input bytes per rank (NaN unknown)
    out_bytes: np.ndarray  # output bytes per rank (NaN unknown)
    size_source: list
    group: np.ndarray      # ranks taking part (0 unknown)
    algo: list
    proto: list
    lane: np.ndarray
    step: np.ndarray       # index of the step it was issued in (-1: none)
    kernels: list          # per call: [(start, end), ...]


@attrs.define
class _Rank:
    source: str
    rank: int | None
    world_size: int
    backend: str | None
    nccl_version: str | None
    pg_config: object
    gpus: list
    timeline: str
    step_start: np.ndarray
    step_end: np.ndarray
    step_number: np.ndarray
    calls: _Calls
    gradient: np.ndarray          # bool per call: a gradient bucket all-reduce
    per_step: list                # dict per step
    slowdown: dict
    notes: list
    undetermined: dict
    file_bytes: int
    bytes_read: int


def _step_index(t, start, end):
    """Index of the step whose span holds each time in ``t``, -1 for none."""
    t = np.asarray(t, float)
    i = np.searchsorted(start, t, side="right") - 1
    ok = (i >= 0) & np.isfinite(t)
    ok[ok] &= t[ok] < end[i[ok]]
    return np.where(ok, i, -1)


def _shape_bytes(dims, types):
    """Bytes of the tensors in an annotation's ``Input Dims`` / ``Input type``, or None."""
    try:
        return _shape_bytes_or_raise(dims, types)
    except (TypeError, ValueError):
        return None


def _shape_bytes_or_raise(dims, types):
    if not isinstance(dims, list) or not isinstance(types, list) or not dims:
        return None
    total, seen = 0, False
    for d, t in zip(dims, types):
        size = _dtype_bytes(t)
        if size is None or not isinstance(d, list):
            continue
        if d and isinstance(d[0], list):   # a TensorList: a list of shapes
            n = sum(math.prod(int(v) for v in sh) for sh in d if isinstance(sh, list))
        else:
            n = math.prod(int(v) for v in d)
        total += n * size
        seen = True
    return total if seen else None


_MAX_NELEMS = 2**53
"""Largest element count a trace's collective may give (beyond it the size is unknown:
no collective moves 9e15 elements, and the bytes must stay exact in a float) [-]."""


def _nelems_bytes(args, key):
    n = args.get(key)
    size = _dtype_bytes(args.get("dtype"))
    try:
        whole = int(n)
    except (TypeError, ValueError, OverflowError):  # int(inf) overflows
        return None
    if isinstance(n, bool) or (isinstance(n, float) and n != whole):
        return None  # 1.5 elements: not a count (an unknown size, as an absurd one)
    n = whole
    if size is None or not 0 <= n <= _MAX_NELEMS:  # an absurd count is an unknown size
        return None
    return n * size


def _innermost(spans_by_tid, tid, t):
    """Index of the innermost span on thread ``tid`` holding time ``t`` (or None): the
    latest-starting one, looking back over at most 64 spans."""
    lst = spans_by_tid.get(tid)
    if not lst:
        return None
    starts, items = lst
    i = int(np.searchsorted(starts, t, side="right")) - 1
    for j in range(i, max(-1, i - 64), -1):
        s, e, idx = items[j]
        if s <= t <= e:
            return idx
    return None


def _by_tid(spans):
    """{tid: (sorted starts, [(start, end, index)])} of (ts, dur, tid, ...) tuples."""
    out = {}
    for i, sp in enumerate(spans):
        out.setdefault(sp[2], []).append((sp[0], sp[0] + sp[1], i))
    res = {}
    for tid, items in out.items():
        items.sort()
        res[tid] = (np.array([s for s, _, _ in items]), items)
    return res


def _analyse(col: _Collector) -> _Rank:
    """One rank's analysis: its job (world size, rank, backend), steps, device work and
    phases, collective calls, gradient all-reduces, per-step breakdown and slowdown."""
    src = col.source
    meta = col.meta
    notes, undetermined = [], {}
    dist, world, rank, backend, nccl_version = _job_info(src, meta, undetermined)
    steps, step_start, step_end, step_number = _steps_of(col, src)
    cts, cdur, ctid, ccode = _cpu_columns(col)
    bwd_mask = ccode == _C_BACKWARD
    opt_iv = _per_thread_union(cts, cdur, ctid, ccode == _C_OPTIM)
    bw_lo, bw_hi = _backward_windows(cts, cdur, bwd_mask, step_start, step_end,
                                     undetermined)
    launch = _launch_lookup(col)
    timeline = "gpu" if (_column(col.gpu["ts"], float).size or col.comm) else "cpu"
    gloo_copies = {"out": {}, "back": {}, "mask": None}
    if timeline == "gpu":
        gloo_copies = _gloo_copies(col, launch)
        op_start, op_end, op_lane, op_name, op_issue, op_tid, gpus = \
            _gpu_ops(col, meta, launch, notes, gloo_copies["mask"])
    else:
        op_start, op_end, op_lane, op_name, op_issue, op_tid, gpus = \
            _cpu_ops(col, meta, steps, cts, cdur, ctid, ccode, bwd_mask)
    op_step = _step_index(op_issue, step_start, step_end)
    phase = _phases(op_issue, op_tid, op_step, bw_lo, bw_hi, opt_iv)
    calls = _build_calls(col, timeline, launch, step_start, step_end, notes, gloo_copies)
    gradient = _gradient_calls(calls, bw_lo, opt_iv, step_end)
    per_step = _per_step(timeline, step_start, step_end, op_start, op_end, op_issue, op_step,
                         phase, op_lane, calls, gradient)
    slowdown = _slowdown(op_start, op_end, op_name, op_step, calls, timeline)
    if col.malformed:
        notes.append(f"{col.malformed} event(s) with fields of the wrong type or out of "
                     "range (a time that is negative, not finite or over a day) were skipped")
    return _Rank(source=src, rank=rank, world_size=world, backend=backend,
                 nccl_version=None if nccl_version is None else str(nccl_version),
                 pg_config=dist.get("pg_config"), gpus=gpus, timeline=timeline,
                 step_start=step_start, step_end=step_end, step_number=step_number,
                 calls=calls, gradient=gradient, per_step=per_step, slowdown=slowdown,
                 notes=notes, undetermined=undetermined,
                 file_bytes=getattr(col, "file_bytes", 0), bytes_read=col.bytes_read)


def _default_group_size(pg_config):
    """The ``pg_size`` of the default process group in a trace's ``pg_config`` (a list of
    groups, or a mapping of them, as PyTorch versions write it), or None when not
    recorded as a whole number."""
    groups = pg_config.values() if isinstance(pg_config, dict) else pg_config
    if not isinstance(groups, (list, tuple, type({}.values()))):
        return None
    for g in groups:
        if isinstance(g, dict) and (g.get("pg_desc") == "default_pg" or
                                    g.get("pg_name") == "0"):
            size = g.get("pg_size")
            return size if isinstance(size, int) and not isinstance(size, bool) else None
    return None


def _job_info(src, meta, undetermined):
    """Check and read ``distributedInfo``: (the dict, world size, rank or None, backend,
    NCCL version or None); notes an unrecorded NCCL version in ``undetermined``."""
    dist = meta.get("distributedInfo")
    if not isinstance(dist, dict) or dist.get("world_size") is None:
        raise ProfileFormatError(src, "distributedInfo.world_size",
                                 "missing: the trace does not say the world size (start "
                                 "torch.distributed before the profiler, and profile a "
                                 "distributed run)")
    world = dist["world_size"]
    # an integer as Kineto writes it: "2", 2.5 or true were read as 2, 2 and 1, and 10**30
    # was refused later as n=..., a parameter the user never wrote
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= MAX_COUNT:
        raise ProfileFormatError(src, "distributedInfo.world_size",
                                 f"must be an integer in [1, {MAX_COUNT}], got {world!r}")
    default_pg = _default_group_size(dist.get("pg_config"))
    if default_pg is not None and default_pg != world:  # the whole world's group
        raise ProfileFormatError(src, "distributedInfo.world_size",
                                 f"{world} contradicts the default process group's "
                                 f"pg_size {default_pg} (pg_config): the file is corrupt or "
                                 "was edited")
    rank = dist.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)
                             or not 0 <= rank < world):
        raise ProfileFormatError(src, "distributedInfo.rank", f"must be an integer in [0, "
                                 f"world_size) = [0, {world}), got {rank!r}")
    backend = dist.get("backend")
    nccl_version = dist.get("nccl_version")
    if nccl_version is None and (backend or "").startswith("nccl"):
        undetermined["nccl_version"] = ("distributedInfo has no nccl_version (this PyTorch "
                                        "version does not record it)")
    return dist, world, rank, backend, nccl_version


def _steps_of(col, src):
    """The ``ProfilerStep#N`` spans, sorted: (spans, starts, ends, numbers); raises when
    the trace has none."""
    if not col.steps:
        skipped = (f" ({col.malformed} event(s) with fields of the wrong type or out of "
                   "range were skipped: a time that is negative, not finite or over a day; "
                   "is the trace corrupt or edited?)") if col.malformed else ""
        raise CalibrationError(f"{src}: no ProfilerStep#N span{skipped}: the trace does not "
                               "mark training iterations; profile with torch.profiler."
                               "profile(schedule=...) and call prof.step() once per "
                               "iteration")
    steps = sorted(set(col.steps))
    step_start = np.array([s[0] for s in steps])
    step_end = np.array([s[0] + s[1] for s in steps])
    step_number = np.array([s[3] for s in steps])
    return steps, step_start, step_end, step_number


def _column(buf, dtype):
    """A collected column as a numpy array (empty when nothing was collected)."""
    return np.frombuffer(buf, dtype) if buf else np.zeros(0, dtype)


def _cpu_columns(col):
    """The CPU operators' columns: (start, duration, thread, category code)."""
    return (_column(col.cpu["ts"], float), _column(col.cpu["dur"], float),
            _column(col.cpu_tid, np.int64), _column(col.cpu_code, np.int8))


def _backward_windows(cts, cdur, bwd_mask, step_start, step_end, undetermined):
    """Backward window of each step: first to last ``evaluate_function`` issued in the
    step (NaN where there is none); notes in ``undetermined`` a trace without backward."""
    bstep = _step_index(cts[bwd_mask], step_start, step_end)
    nstep = step_start.size
    bw_lo = np.full(nstep, np.nan)
    bw_hi = np.full(nstep, np.nan)
    if bwd_mask.any():
        bts, bend = cts[bwd_mask], cts[bwd_mask] + cdur[bwd_mask]
        for i in range(nstep):
            m = bstep == i
            if m.any():
                bw_lo[i], bw_hi[i] = bts[m].min(), bend[m].max()
    else:
        undetermined["backward"] = ("no autograd::engine::evaluate_function spans: the "
                                    "trace does not show the backward pass")
    return bw_lo, bw_hi


def _launch_lookup(col):
    """A function mapping correlation ids to their CPU launch (time, thread): NaN and -1
    where the trace has no launch event for an id."""
    rcorr = _column(col.rt_corr, np.int64)
    rts = _column(col.rt["ts"], float)
    rtid = _column(col.rt_tid, np.int64)
    ro = np.argsort(rcorr, kind="stable")
    rcorr_s, rts_s, rtid_s = rcorr[ro], rts[ro], rtid[ro]

    def launch(corr):
        corr = np.asarray(corr, np.int64)
        if rcorr_s.size == 0:
            return np.full(corr.shape, np.nan), np.full(corr.shape, -1)
        i = np.clip(np.searchsorted(rcorr_s, corr), 0, rcorr_s.size - 1)
        hit = (rcorr_s[i] == corr) & (corr >= 0)
        return np.where(hit, rts_s[i], np.nan), np.where(hit, rtid_s[i], -1)

    return launch


def _gloo_copies(col, launch):
    """Gloo with CUDA tensors: the copies each call makes between the GPU and host memory.

    Gloo reduces in host memory on its worker threads. The ``c10d::`` operator that queues
    a call launches the copy to the host (on a stream of the call's own, which waits for
    the gradient); the worker thread takes the call (its ``gloo:<op>`` span starts), waits
    for that copy, runs the algorithm and launches the copy back, on the same stream.
    Returns ``{"out": {c10d index: (start, end, stream lane)}, "back": {annotation index:
    (start, end, stream lane)}, "mask": the GPU events that are such copies, or None}``:
    the copies' windows per span."""
    res = {"out": {}, "back": {}, "mask": None}
    gloo = {sp[2] for sp in col.ann if sp[3] == "gloo"}
    gcorr = _column(col.gpu_corr, np.int64)
    if not gloo or gcorr.size == 0:
        return res
    issue, tid = launch(gcorr)
    threads = gloo | {sp[2] for sp in col.c10d}
    cand = np.flatnonzero(np.isin(tid, list(threads)) & np.isfinite(issue))
    gts = _column(col.gpu["ts"], float)
    gend = gts + _column(col.gpu["dur"], float)
    glane = _column(col.gpu_lane, np.int64)
    ann_by, c10d_by = _by_tid(col.ann), _by_tid(col.c10d)
    mask = np.zeros(gcorr.size, bool)
    for j in cand:
        t, th = issue[j], int(tid[j])
        a = _innermost(ann_by, th, t)
        if a is not None and col.ann[a][3] == "gloo":
            where, key = res["back"], a
        else:
            c = _innermost(c10d_by, th, t)
            if c is None:
                continue
            where, key = res["out"], c
        mask[j] = True
        lo, hi, _ = where.get(key, (np.inf, -np.inf, None))
        where[key] = (min(lo, gts[j]), max(hi, gend[j]), int(glane[j]))
    res["mask"] = mask if mask.any() else None
    return res


def _gpu_ops(col, meta, launch, notes, gloo_copy=None):
    """GPU compute (kernels off the communication lanes, and not Gloo's copies) with their
    CPU launch: (start, end, lane, name id, issue, launching thread, GPU names)."""
    gts = _column(col.gpu["ts"], float)
    gdur = _column(col.gpu["dur"], float)
    glane = _column(col.gpu_lane, np.int64)
    gcorr = _column(col.gpu_corr, np.int64)
    gname = _column(col.gpu_name, np.int64)
    comm_lanes = {k["lane"] for k in col.comm}
    keep = ~np.isin(glane, list(comm_lanes)) if comm_lanes else np.ones(gts.size, bool)
    if gloo_copy is not None:
        keep &= ~gloo_copy
    op_start, op_end = gts[keep], gts[keep] + gdur[keep]
    op_lane = glane[keep]
    op_name = gname[keep]
    op_issue, op_tid = launch(gcorr[keep])
    if np.all(np.isnan(op_issue)):     # no launch events, or none links
        notes.append("no CPU launch events (cuda_runtime) link the GPU work to the "
                     "steps: it is assigned by its GPU start time")
        op_issue = op_start.copy()
    gpus = _gpu_names(meta, {col.device_of_lane[int(x)] for x in np.unique(glane)}
                      | {k["device"] for k in col.comm})
    return op_start, op_end, op_lane, op_name, op_issue, op_tid, gpus


def _cpu_ops(col, meta, steps, cts, cdur, ctid, ccode, bwd_mask):
    """CPU training: operators on the threads that train (steps, backward) are compute:
    (start, end, lane = thread, leaf name id, issue = start, thread, GPU names)."""
    train = {s[2] for s in steps} | set(np.unique(ctid[bwd_mask]).tolist())
    m = np.isin(ctid, list(train)) & np.isin(ccode, [_C_OTHER, _C_BACKWARD, _C_OPTIM])
    op_start, op_end = cts[m], cts[m] + cdur[m]
    op_issue, op_tid = op_start.copy(), ctid[m]
    op_lane = op_tid
    # leaves only (an operator holding no other on its thread) for the slowdown
    cname = np.frombuffer(col.cpu_name, np.int64)
    op_name = _leaf_names(op_start, op_end, op_tid, cname[m])
    gpus = _gpu_names(meta, None)
    return op_start, op_end, op_lane, op_name, op_issue, op_tid, gpus


def _phases(op_issue, op_tid, op_step, bw_lo, bw_hi, opt_iv):
    """Phase of each operator by its issue time: 0 forward, 1 backward, 2 optimizer,
    3 other (after the backward window)."""
    phase = np.full(op_issue.size, 0, np.int8)
    in_opt = _inside_thread(op_issue, op_tid, opt_iv)
    has_bw = op_step >= 0
    has_bw[has_bw] &= np.isfinite(bw_lo[op_step[has_bw]])
    lo = np.where(has_bw, bw_lo[np.maximum(op_step, 0)], np.inf)
    hi = np.where(has_bw, bw_hi[np.maximum(op_step, 0)], np.inf)
    phase[(op_issue >= lo) & (op_issue <= hi)] = 1
    phase[(op_issue > hi) & has_bw] = 3
    phase[in_opt] = 2
    return phase


def _gradient_calls(calls, bw_lo, opt_iv, step_end):
    """Which calls are gradient all-reduces: all-reduces issued from the first backward op
    to the first optimizer step after it."""
    gradient = np.array([k == "all_reduce" for k in calls.kind], bool)
    if gradient.any():
        st = calls.step
        ok = st >= 0
        inwin = np.zeros(gradient.size, bool)
        if np.isfinite(bw_lo).any():
            s = np.maximum(st, 0)
            opt_after = _first_optimizer_after(bw_lo, opt_iv, step_end)
            inwin = ok & (calls.issue >= bw_lo[s]) & (calls.issue < opt_after[s])
        gradient &= inwin
    return gradient


def _first_optimizer_after(bw_lo, opt_iv, step_end):
    """For each step, the start of its first optimizer span after backward starts (the
    step's end when there is none) [s]."""
    starts = np.sort(np.concatenate([iv[0] for iv in opt_iv.values()])) \
        if opt_iv else np.zeros(0)
    out = step_end.copy()
    for i, lo in enumerate(bw_lo):
        if np.isfinite(lo) and starts.size:
            j = np.searchsorted(starts, lo, side="right")
            if j < starts.size and starts[j] < step_end[i]:
                out[i] = starts[j]
    return out


def _leaf_names(start, end, tid, names):
    """Name ids of CPU operators that hold no other operator on their thread; -1 for the
    others (used for the compute slowdown on CPUs)."""
    out = np.full(start.size, -1, np.int64)
    for t in np.unique(tid):
        idx = np.flatnonzero(tid == t)
        o = idx[np.lexsort((-end[idx], start[idx]))]
        nxt = np.append(start[o][1:], np.inf)
        leaf = nxt >= end[o]
        out[o[leaf]] = names[o[leaf]]
    return out


def _gpu_names(meta, devices):
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    by_id = {}
    for p in props:
        if isinstance(p, dict) and "name" in p:
            by_id[p.get("id")] = str(p["name"])
    if devices:
        named = [by_id[d] for d in sorted(devices, key=str) if d in by_id]
        if named:
            return named
    return list(dict.fromkeys(by_id.values()))


def _build_calls(col, timeline, launch, step_start, step_end, notes, gloo_copies) -> _Calls:
    """Collective calls: annotations with their NCCL kernels, or lone kernels, or (gloo)
    execution spans (with CUDA tensors, from the copy to the host to the copy back)."""
    rows, order = {}, []        # key -> dict, keys in order of first sight
    rpc_by = _by_tid(col.rpc)
    _rows_from_kernels(col, launch, rows, order, rpc_by, notes)
    gloo_exec = timeline == "cpu"
    _rows_from_annotations(col.ann, rows, order, rpc_by, gloo_exec, gloo_copies["back"])
    if gloo_copies["back"]:  # CUDA tensors: each call's copies share its stream
        _issue_from_copies(rows, col.ann, col.c10d, notes, gloo_copies)
    elif any(r.get("exec") for r in rows.values()):
        _issue_from_c10d(rows, col.ann, col.c10d, notes)
    calls = _calls_from_rows(rows, order, col.ann, col.rpc, step_start, step_end)
    _share_concurrent(calls, [j for j, key in enumerate(order) if rows[key].get("exec")])
    return calls


def _share_concurrent(calls, idx):
    """Gloo executions that ran at once (its worker threads, two by default) shared the
    link: each one's duration becomes the integral over its span of one over the number
    of executions running then, so that the durations add up to the time the link was
    busy, the serial channel of the model (eq. :eq:`trace-shared`)."""
    ok = [j for j in idx if np.isfinite(calls.start[j]) and calls.end[j] > calls.start[j]]
    if len(ok) < 2:
        return
    events = sorted([(calls.start[j], 1, j) for j in ok] + [(calls.end[j], -1, j) for j in ok])
    share = dict.fromkeys(ok, 0.0)
    active, last = set(), events[0][0]
    for t, kind, j in events:
        if active and t > last:
            for a in active:
                share[a] += (t - last) / len(active)
        last = t
        if kind > 0:
            active.add(j)
        else:
            active.discard(j)
    for j, v in share.items():
        calls.dur[j] = v


def _row(rows, order, key):
    """The call row of ``key``, created empty (and ``key`` appended to ``order``) when
    new."""
    r = rows.get(key)
    if r is None:
        r = rows[key] = {"kernels": [], "kargs": None, "kname": None, "issue": np.nan,
                         "ann": None, "rpc": None, "lane": -1}
        order.append(key)
    return r


def _rows_from_kernels(col, launch, rows, order, rpc_by, notes):
    """Attach each NCCL kernel to the annotation innermost at its CPU launch (or to a row
    of its own); notes the kernels with no launch in the trace."""
    kernels, ann = col.comm, col.ann
    if not kernels:
        return
    ann_by = _by_tid(ann)
    k_issue, k_tid = launch([k["corr"] for k in kernels])
    unlinked = 0
    for i, k in enumerate(kernels):
        t, tid = k_issue[i], int(k_tid[i])
        a = _innermost(ann_by, tid, t) if np.isfinite(t) else None
        key = ("ann", a) if a is not None else ("kernel", i)
        r = _row(rows, order, key)
        if np.isnan(t):
            unlinked += 1
        r["kernels"].append((k["ts"], k["ts"] + k["dur"]))
        r["lane"] = k["lane"]
        if r["kargs"] is None and "In msg nelems" in k:
            r["kargs"] = k
        if r["kname"] is None:
            r["kname"] = k["name"]
        if a is not None:
            r["ann"] = a
            r["issue"] = ann[a][0]
        elif np.isfinite(t):
            r["issue"] = t
        if r["rpc"] is None and np.isfinite(t):
            r["rpc"] = _innermost(rpc_by, tid, t)
    if unlinked:
        notes.append(f"{unlinked} NCCL kernel(s) have no CPU launch in the trace "
                     "(launched before the profiler started): left out")


def _rows_from_annotations(ann, rows, order, rpc_by, gloo_exec, gloo_back):
    """A row for each annotation no kernel was attached to; under gloo (``gloo_exec``) a
    non-NCCL annotation is the execution itself, on its worker thread's lane, as is a gloo
    call on CUDA tensors (``gloo_back``: its copy back to the GPU, by annotation)."""
    for a, sp in enumerate(ann):
        if ("ann", a) in rows:
            continue
        r = _row(rows, order, ("ann", a))
        r["ann"] = a
        r["issue"] = sp[0]
        r["rpc"] = _innermost(rpc_by, sp[2], sp[0])
        if a in gloo_back or (gloo_exec and sp[3] != "nccl"):
            # on CUDA tensors it ends with its copy back (the start: _issue_from_c10d)
            r["kernels"].append((sp[0], gloo_back[a][1] if a in gloo_back else sp[0] + sp[1]))
            r["lane"] = -2 - sp[2]     # the worker thread is the lane
            r["exec"] = True


def _calls_from_rows(rows, order, ann, rpc, step_start, step_end) -> _Calls:
    """Assemble the :class:`_Calls` columns from the rows: kind, algorithm, protocol,
    issue, kernel union, bytes with their source, group size and step."""
    n = len(order)
    kind, size_source, algo, proto = [], [], [], []
    issue = np.full(n, np.nan)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    dur = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    out_bytes = np.full(n, np.nan)
    group = np.zeros(n, np.int64)
    lane = np.zeros(n, np.int64)
    kern = []
    for j, key in enumerate(order):
        r = rows[key]
        sp = ann[r["ann"]] if r["ann"] is not None else None
        ra = rpc[r["rpc"]][3] if r["rpc"] is not None else {}
        ka = r["kargs"] or {}
        kcoll = kalgo = kproto = None
        if r["kname"]:
            kcoll, kalgo, kproto = _parse_kernel_name(r["kname"])
        name = (sp[4] if sp is not None else None) or ka.get("Collective name") \
            or ra.get("Collective name") or kcoll or "unknown"
        kind.append(collective_kind(name))
        algo.append(kalgo)
        proto.append(kproto)
        issue[j] = r["issue"]
        lane[j] = r["lane"]
        ks = sorted(r["kernels"])
        kern.append(ks)
        if ks:
            iv = _union([a for a, _ in ks], [b for _, b in ks])
            start[j], end[j], dur[j] = iv[0][0], iv[1][-1], _length(iv)
        b, src, ob = _call_bytes(ka, ra, sp)
        if ob is not None:
            out_bytes[j] = ob
        if b is not None:
            nbytes[j] = b
        size_source.append(src if b is not None else None)
        g = ka.get("Group size", ra.get("Group size"))
        try:
            g = int(g) if g is not None else 0
        except (TypeError, ValueError, OverflowError):
            g = 0
        group[j] = g if 0 < g < 2**31 else 0  # an absurd group size is an unknown one
    step = _step_index(issue, step_start, step_end)
    return _Calls(kind=kind, issue=issue, start=start, end=end, dur=dur, nbytes=nbytes,
                  out_bytes=out_bytes, size_source=size_source, group=group, algo=algo,
                  proto=proto, lane=lane, step=step, kernels=kern)


def _call_bytes(ka, ra, sp):
    """A call's input bytes, where they come from, and its output bytes (None where
    unknown) [bytes]: the kernel args, else record_param_comms, else the annotation's
    input shape."""
    b = src = out = None
    if ka:
        b, src = _nelems_bytes(ka, "In msg nelems"), "kernel args"
        ob = _nelems_bytes(ka, "Out msg nelems")
        if ob is not None:
            out = ob
        other = _nelems_bytes(ra, "In msg nelems") if ra and b is not None else None
        if other is not None and other != b:  # the call's two records disagree: unknown
            return None, None, None
    if b is None and ra:
        b, src = _nelems_bytes(ra, "In msg nelems"), "record_param_comms"
        ob = _nelems_bytes(ra, "Out msg nelems")
        if ob is not None:
            out = ob
    if b is None and sp is not None:
        b, src = _shape_bytes(sp[5].get("Input Dims"), sp[5].get("Input type")), \
            "annotation Input Dims"
    return b, src, out


def _issue_from_copies(rows, ann, c10d, notes, copies):
    """Gloo on CUDA tensors: each call copies to the host and back on a stream of its own;
    the ``c10d::`` operator whose copy to the host is the latest on the stream of the
    call's copy back, before it, queued the call. Its issue is that operator's start, and
    the call starts when both its worker thread has taken it and that copy has started.
    Matched by stream and time, so a call cut off by the profiler's window leaves the
    others as they are; a call with no such copy keeps its span's start (noted)."""
    out = {}
    for i, (s0, _, lane) in copies["out"].items():
        out.setdefault(lane, []).append((s0, i))
    starts = {lane: np.array([s for s, _ in sorted(v)]) for lane, v in out.items()}
    out = {lane: [i for _, i in sorted(v)] for lane, v in out.items()}
    alone = 0
    for r in rows.values():
        if not r.get("exec") or r["ann"] not in copies["back"] or not r["kernels"]:
            continue
        b0, _, lane = copies["back"][r["ann"]]
        k = int(np.searchsorted(starts.get(lane, np.zeros(0)), b0, side="right")) - 1
        if k < 0:
            alone += 1
            continue
        i = out[lane][k]
        if c10d[i][0] <= ann[r["ann"]][0]:
            r["issue"] = c10d[i][0]
        s0, e0 = r["kernels"][0]
        r["kernels"][0] = (min(max(s0, copies["out"][i][0]), e0), e0)
    if alone:
        notes.append(f"{alone} gloo call(s) on CUDA tensors without their copy to the host "
                     "in the trace (the profiler's window cut it): each is taken as issued, "
                     "and started, when its worker thread took it")


def _issue_from_c10d(rows, ann, c10d, notes):
    """Gloo runs a collective on a worker thread; its issue is the ``c10d::`` operator that
    queued it, matched in order per kind."""
    ops = {}
    for i in sorted(range(len(c10d)), key=lambda i: c10d[i][:3]):
        ts, dur, tid, name = c10d[i]
        k = collective_kind(name)
        if k in ("unknown",) or k.endswith("wait"):
            continue
        ops.setdefault(k, []).append((ts, i))
    execs = {}
    for key, r in rows.items():
        if r.get("exec"):
            sp = ann[r["ann"]]
            execs.setdefault(collective_kind(sp[4]), []).append((sp[0], key))
    for k, lst in execs.items():
        lst.sort()
        issued = ops.get(k, [])
        if len(issued) == len(lst):
            for (t0, key), (ti, _) in zip(lst, issued):
                if ti <= t0:
                    rows[key]["issue"] = ti
        else:
            notes.append(f"{k}: {len(lst)} gloo executions but {len(issued)} c10d calls; "
                         "each is taken as issued when it starts")


def _per_step(timeline, step_start, step_end, op_start, op_end, op_issue, op_step, phase,
              op_lane, calls, gradient):
    """Busy times per phase and the timeline of eq. :eq:`trace-times`, one dict per step.

    A step starts on the device with the first work, issued in it, of the *main* lane (the
    stream, or on CPUs the thread, that runs most of the backward): work on other lanes
    (input copies, the next batch's data exchange) may run alongside the previous step."""
    nstep = step_start.size
    main = -1
    bm = (phase == 1) & (op_step >= 0)
    if bm.any():
        lanes, inv = np.unique(op_lane[bm], return_inverse=True)
        main = lanes[np.argmax(np.bincount(inv, weights=(op_end - op_start)[bm]))]
    c_ok = (calls.step >= 0) & np.isfinite(calls.dur)
    # the main lane's work finished before each issue time (NCCL's stream waits for the
    # stream that computed the gradients): running max of ends in launch order
    on_main = op_lane == main if (op_lane == main).any() else np.ones(op_lane.size, bool)
    lo = np.flatnonzero(on_main)[np.argsort(op_issue[on_main], kind="stable")]
    l_sorted = op_issue[lo]
    end_max = np.maximum.accumulate(op_end[lo]) if lo.size else np.zeros(0)
    first = np.full(nstep + 1, np.nan)
    for i in range(nstep):
        m = (op_step == i) & (op_lane == main)
        if not m.any():
            m = op_step == i
        if m.any():
            first[i] = op_start[m].min()
    out = []
    for i in range(nstep):
        m = op_step == i
        d = {"number": None}
        comp = _union(op_start[m], op_end[m])
        for ph, name in enumerate(("forward", "backward", "optimizer", "other")):
            pm = m & (phase == ph)
            d[name] = _length(_union(op_start[pm], op_end[pm]))
        d["compute"] = _length(comp)
        cm = (calls.step == i) & c_ok
        ks = [iv for j in np.flatnonzero(cm) for iv in calls.kernels[j]]
        comm = _union([a for a, _ in ks], [b for _, b in ks])
        d["communication"] = _length(comm)
        d["exposed_communication"] = d["communication"] - _overlap_length(comm, comp)
        # the step's timeline on the device clock
        bm = m & (phase == 1)
        g0 = first[i]
        b0 = float(op_start[bm].min()) if bm.any() else np.nan
        b1 = float(op_end[bm].max()) if bm.any() else np.nan
        gm = (calls.step == i) & gradient
        gmd = gm & c_ok
        c1 = float(np.nanmax(calls.end[gmd])) if gmd.any() else np.nan
        nxt = first[i + 1] if i + 1 < nstep and step_start[i + 1] - step_end[i] < 1e-3 \
            else np.nan
        if np.isfinite(nxt):
            g1 = nxt
        else:
            ends = [op_end[m].max()] if m.any() else []
            if (cm).any():
                ends.append(np.nanmax(calls.end[cm]))
            g1 = max(ends) if ends else np.nan
        d.update(g0=g0, b0=b0, b1=b1, c1=c1, g1=g1)
        # gradient buckets: sizes, issue, ready, measured durations
        gi = np.flatnonzero(gm)
        gi = gi[np.argsort(calls.issue[gi], kind="stable")]
        ready = np.full(gi.size, np.nan)
        if gi.size and np.isfinite(b0):
            if timeline == "gpu":
                k = np.searchsorted(l_sorted, calls.issue[gi], side="left") - 1
                ready = np.where(k >= 0, end_max[np.maximum(k, 0)], b0)
                ready = np.minimum(ready, np.where(np.isfinite(calls.start[gi]),
                                                   calls.start[gi], np.inf))
            else:
                ready = calls.issue[gi].copy()
            ready = ready - b0
        d["bucket_calls"] = gi
        d["bucket_ready"] = ready
        d["bucket_bytes"] = calls.nbytes[gi]
        d["bucket_dur"] = calls.dur[gi]
        out.append(d)
    return out


def _slowdown(op_start, op_end, op_name, op_step, calls, timeline):
    """Compute slowdown, eq. :eq:`trace-slowdown`, with what it rests on."""
    m = op_step >= 0
    ks = [iv for j in np.flatnonzero((calls.step >= 0) & np.isfinite(calls.dur))
          for iv in calls.kernels[j]]
    if not ks:
        return {"value": None, "reason": "no communication with known times to compare with"}
    comm = _union([a for a, _ in ks], [b for _, b in ks])
    s, e, nm = op_start[m], op_end[m], op_name[m]
    keep = nm >= 0
    s, e, nm = s[keep], e[keep], nm[keep]
    d = e - s
    over = _overlap_each(s, e, comm) > 0
    if not over.any():
        return {"value": 1.0, "coverage": 1.0, "reason": None, "overlapped_time": 0.0}
    base = {}
    for name in np.unique(nm[~over]):
        base[int(name)] = float(np.median(d[(~over) & (nm == name)]))
    matched = np.array([int(x) in base for x in nm]) & over
    coverage = float(d[matched].sum() / d[over].sum()) if d[over].sum() > 0 else 1.0
    if coverage < 0.5:
        return {"value": None, "coverage": coverage,
                "reason": f"only {coverage:.0%} of the compute time that overlapped "
                "communication ran also without it (same kernels): too little to compare"}
    ref = np.array([base.get(int(x), np.nan) for x in nm])
    actual = d[~over].sum() + d[matched].sum()
    alone = d[~over].sum() + ref[matched].sum()
    return {"value": float(actual / alone), "coverage": coverage, "reason": None,
            "overlapped_time": float(d[over].sum())}
