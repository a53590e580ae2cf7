r"""Calibrate from PyTorch profiler (Kineto) traces of real distributed training runs.

Most teams already have a ``torch.profiler`` trace of their training job, taken on the
real cluster at the real scale. :func:`read_trace` reads one (``.json`` or ``.json.gz``,
one file per rank, one or several ranks of one job) and returns a :class:`TraceReport`:

- the job: ``world_size``, ``backend``, ``nccl_version`` (``distributedInfo``), the GPUs
  (``deviceProperties``);
- ``step_time`` [s]: the median duration of all ``ProfilerStep#N`` spans (none dropped),
  with their spread and count;
- per step: forward, backward and optimizer time on the compute stream(s), communication
  time on the communication stream(s), and the part of it not hidden behind compute;
- ``collectives``: per kind (all_reduce, reduce_scatter, all_gather, broadcast,
  all_to_all, send_recv, ...) the calls per step, bytes, time, NCCL algorithm and
  protocol, achieved algorithm and bus bandwidth;
- ``undetermined``: what the trace does not say, and why, instead of a guess;
- a workload profile (:class:`~scalemodel.WorkloadProfile`: the gradient buckets in
  communication order, their sizes and ready times, forward, backward and update
  times), a cluster profile (:class:`~scalemodel.ClusterProfile`: latency and achieved
  bandwidth fitted to the collectives' sizes and durations with
  :func:`~scalemodel.calibrate.fit.fit_collective`, with intervals, and the compute
  slowdown), and the **replay check**: the model's prediction of the traced
  configuration itself next to the measured step time.

The command line twin is ``python -m scalemodel.calibrate from-trace TRACE [TRACE ...]
[--json] [--out PREFIX]`` (:func:`main`).

**How the trace is read.** A Kineto trace is Chrome-trace JSON: metadata keys
(``distributedInfo``, ``deviceProperties``, ...) and ``traceEvents``, a list of events.
The file is **streamed**: each event is decoded on its own (by the C scanner behind
``json.loads``, on a sliding window of the, possibly gzip-compressed, byte stream) and only
the few numbers the analysis needs are kept, in typed arrays (8 bytes per number), so
memory stays below the file's size (``benchmarks/bench_trace.py`` measures about 0.2 times
it) and there is no size limit.

Events used (complete events, ``"ph": "X"``; timestamps in µs, converted to s):

- CPU spans (``cpu_op``, ``user_annotation``): ``ProfilerStep#N`` (the steps),
  ``autograd::engine::evaluate_function: ...`` (backward), ``Optimizer.step#...`` and
  ``Optimizer.zero_grad#...`` (optimizer), ``<backend>:<collective>`` annotations
  (``nccl:all_reduce``, ``gloo:all_reduce``, with ``Input Dims`` / ``Input type`` when
  the trace has shapes), ``record_param_comms`` (``In msg nelems``, ``dtype``,
  ``Group size``, ``Collective name`` in newer PyTorch) and ``c10d::`` operators;
- GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``) with ``stream`` and
  ``correlation``, linked to its CPU launch (``cuda_runtime`` / ``cuda_driver`` events with
  the same ``correlation``). NCCL kernels are recognised by name (``ncclKernel_...``,
  ``ncclDevKernel_...``); the name carries the collective, the algorithm (``RING``,
  ``TREE``, ``NVLS``, ``COLLNET...``, ``PAT``) and the protocol (``LL``, ``LL128``,
  ``SIMPLE``); newer traces add ``Collective name``, ``In msg nelems``, ``dtype`` and
  ``Group size`` to the kernel's args.

A collective call is a ``<backend>:<op>`` annotation (or, without one, a lone NCCL
kernel) together with the NCCL kernels launched inside it. Its size comes from the
kernel's args, else from ``record_param_comms``, else from the annotation's ``Input Dims``
(the first that the trace has; the source is reported). It belongs to the step in whose
``ProfilerStep`` span it was issued (CPU time); kernels launched before the profiler
started (no CPU launch in the trace) are left out. With gloo (CPU training) there are no
kernels: the ``gloo:<op>`` span, recorded on gloo's worker thread, is the collective's
execution, and the ``c10d::`` operator that queued it (matched in order) its issue.

**Phases.** Within a step, work is *backward* when issued between the first and the last
``autograd::engine::evaluate_function`` span of the step, *optimizer* when issued inside
an ``Optimizer.`` span, *forward* when issued before backward, else *other*. Busy times
are unions of the work's intervals on the device (overlapping kernels count once);
exposed communication is the communication time during which no compute runs.

**The workload profile**, on the device's clock (GPU timestamps; CPU on gloo). The step
starts on the device with the first work, issued in it, of the *main* lane (the stream,
or on CPUs the thread, that runs most of the backward). Let :math:`g_0` be that start,
:math:`b_0, b_1` the start of the step's first and the end of its last backward work,
:math:`c_1` the end of its last gradient all-reduce and :math:`g_1` the start of the next
step (the end of the step's last work for the last step). Then

.. math::
   :label: trace-times

   T_f = b_0 - g_0, \quad T_b = b_1 - b_0, \quad
   T_u = g_1 - \max(b_1, c_1), \quad
   R_k = \max\{\text{end of compute launched before all-reduce } k\} - b_0 ,

so :math:`T_f + T_b + \max(0, c_1 - b_1) + T_u = g_1 - g_0`, the step's period on the
device. The gradient buckets are the all-reduces issued during backward: one per DDP
bucket, in communication order; bucket :math:`k` is ready (:math:`R_k`) when the compute
stream has finished everything launched before the all-reduce (NCCL's stream waits for
exactly that), clipped to the all-reduce's start; on the CPU (gloo) it is ready when it
is issued. Medians over the steps (and ranks) make the profile. Forward and backward
times and ready times are divided by the compute slowdown :math:`\sigma` (below), so that
the profile holds compute without communication, as ``scalemodel.model`` expects
(:math:`T_n = \sigma T_f + \max(\sigma T_b, \dots) + T_u`).

**Compute slowdown** :math:`\sigma`: compute kernels that ran while communication did are
compared with kernels of the same name that ran alone,

.. math::
   :label: trace-slowdown

   \sigma = \frac{\sum_i d_i}
                {\sum_{i \notin O} d_i + \sum_{i \in O} \tilde d_{\text{name}(i)}},

where :math:`O` are the kernels overlapping communication and :math:`\tilde d` the median
duration of the same kernel without overlap (leaf CPU operators on gloo). It is reported
when kernels covering at least half of the overlapped compute time also ran alone.

**Cluster profile**: ``fit_collective`` on the all-reduces' (bytes, duration) with the ring
model (``n`` = group size), ``cluster_from_fits`` without a line rate (the fitted bandwidth
is the line rate, utilization 1) unless one is given. A kernel's duration includes the
time it waits for the slowest rank; with every rank's trace, each collective's shortest
duration across ranks is fitted. Other collectives with at least three distinct sizes are
fitted too (``extra["collective_fits"]``).

**Replay check** (:class:`ReplayCheck`): :func:`scalemodel.iteration_time` with the profile
(``fusion="none"``: the buckets are the trace's), ``n`` = world size and the fitted
cluster, against the measured ``step_time``. Beside it, the same recurrence with each
bucket's *measured* duration (:func:`scalemodel.overlap.comm_finish_time`), which checks the
overlap model without the transport fit. Collectives the model does not describe (anything
but the gradient all-reduces: all_to_all of embedding tables, broadcasts of buffers,
all-reduces outside backward) are listed with their time per step and share of the step.
"""

from __future__ import annotations

import argparse
import codecs
import gzip
import json
import math
import os
import re
import sys
import warnings
import zlib
from array import array
from pathlib import Path

import attrs
import numpy as np

from ..exceptions import (CalibrationError, CalibrationWarning, ProfileFormatError,
                          ScalemodelError)

__all__ = ["TraceReport", "CollectiveSummary", "ReplayCheck", "read_trace", "main",
           "record_trace", "rank_trace_path", "collective_kind", "COLLECTIVE_KINDS"]

#: The collective kinds the reader names; anything else is reported under its own name.
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all",
                    "send_recv", "reduce", "gather", "scatter", "barrier")

_BACKENDS = frozenset({"nccl", "gloo", "ucc", "mpi", "xccl", "hccl", "rccl", "custom"})
_CHUNK = 1 << 20           # bytes read from the file at a time
_MAX_TOKEN = 1 << 20       # longest string or number expected inside one event [chars]
_US = 1e-6                 # trace timestamps are in microseconds

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
_WS = re.compile(r"[ \t\n\r]*")
_SEP = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
_DECODER = json.JSONDecoder()

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


# =========================================================================== streaming

class _Stream:
    """A JSON document read piecewise from a binary stream (plain or gzip)."""

    def __init__(self, raw, source):
        self.raw = raw
        self.source = source
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self.buf = ""
        self.pos = 0
        self.offset = 0          # characters dropped from the front of buf
        self.eof = False
        self.bytes_read = 0

    def _fill(self) -> bool:
        """Append the next chunk; False at the end of the stream."""
        if self.eof:
            return False
        try:
            data = self.raw.read(_CHUNK)
        except EOFError:
            raise ProfileFormatError(self.source, "<gzip>",
                                     "the gzip stream is truncated (it ends before its "
                                     "end-of-stream marker): copy the file again") from None
        except (OSError, zlib.error) as exc:
            raise ProfileFormatError(self.source, "<gzip>",
                                     f"not a readable gzip stream: {exc}") from None
        self.bytes_read += len(data)
        try:
            text = self.dec.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise ProfileFormatError(self.source, "<file>", "not UTF-8 text (a binary "
                                     f"file?): {exc.reason}") from None
        if not data:
            self.eof = True
        if self.pos:
            self.offset += self.pos
            self.buf = self.buf[self.pos:] + text
            self.pos = 0
        else:
            self.buf += text
        return bool(data) or bool(text)

    def peek(self) -> str:
        """The next non-blank character ('' at the end), without consuming it."""
        while True:
            m = _WS.match(self.buf, self.pos)
            self.pos = m.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, chars, where):
        c = self.peek()
        if c == "" or c not in chars:
            got = "the end of the file" if c == "" else repr(c)
            raise ProfileFormatError(self.source, where,
                                     f"expected {' or '.join(map(repr, chars))} at character "
                                     f"{self.offset + self.pos}, got {got}"
                                     + (" (truncated?)" if c == "" else ""))
        self.pos += 1
        return c

    def value(self, where):
        """Decode the JSON value at the current position."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # an error near the end of the buffer may only mean the value goes on
                if exc.pos + _MAX_TOKEN >= len(self.buf) and self._fill():
                    continue
                raise ProfileFormatError(
                    self.source, where,
                    f"not valid JSON at character {self.offset + exc.pos}: {exc.msg}"
                    + (" (the file ends there: truncated?)"
                       if self.eof and exc.pos + 16 >= len(self.buf) else "")) from None
            if end >= len(self.buf) and self._fill():
                continue  # a number or literal may go on in the next chunk
            self.pos = end
            return obj


def _open(path, source):
    """The file as a binary stream, gunzipped when it starts with the gzip magic."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ProfileFormatError(source, "<file>", f"cannot be read: {exc.strerror}") from None
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb"), fh
    return fh, fh


def _iter_document(stream, meta):
    """Yield the trace events of a Chrome-trace document; other keys go into ``meta``."""
    src = stream.source
    c = stream.peek()
    if c == "[":  # the JSON-array form of the Chrome trace format: events only
        meta["_array_form"] = True
        yield from _iter_array(stream, "traceEvents")
        return
    if c != "{":
        first = " (it is empty)" if c == "" else f" (first character {c!r})"
        raise ProfileFormatError(src, "<top>", "not a Kineto/Chrome trace: the file does not "
                                 "start with a JSON object" + first)
    stream.expect("{", "<top>")
    if stream.peek() == "}":
        stream.pos += 1
        return
    while True:
        key = stream.value("<top>")
        if not isinstance(key, str):
            raise ProfileFormatError(src, "<top>", f"expected a key, got {key!r}")
        stream.expect(":", key)
        if key == "traceEvents":
            meta["_has_events"] = True
            if stream.peek() != "[":
                raise ProfileFormatError(src, "traceEvents", "must be a list of events")
            yield from _iter_array(stream, "traceEvents")
        else:
            meta[key] = stream.value(key)
        c = stream.expect(",}", "<top>")
        if c == "}":
            return
        if stream.peek() == "}":  # a trailing comma
            stream.pos += 1
            return


def _iter_array(stream, where):
    """Yield the elements of the JSON array at the stream's position."""
    stream.expect("[", where)
    if stream.peek() == "]":
        stream.pos += 1
        return
    scan = _DECODER.scan_once   # the C scanner behind json.loads: (text, index) -> (obj, end)
    sep = _SEP.match
    buf, pos, i = stream.buf, stream.pos, 0
    while True:
        errpos = None
        try:
            obj, end = scan(buf, pos)
            m = sep(buf, end)
            ok = m is not None and m.end() < len(buf)
        except StopIteration as exc:
            ok, errpos = False, exc.value
        except json.JSONDecodeError as exc:
            ok, errpos = False, exc.pos
        if not ok:
            # the element or its separator may go on in the next chunk
            stream.pos = pos
            if (errpos is None or errpos + _MAX_TOKEN >= len(buf)) and stream._fill():
                buf, pos = stream.buf, stream.pos
                continue
            # broken (this raises, naming where), or the last element of the file
            yield stream.value(f"{where}[{i}]")
            i += 1
            c = stream.expect(",]", f"{where}[{i}]")
            if c == "]" or stream.peek() == "]":
                stream.pos += c != "]"
                return
            buf, pos = stream.buf, stream.pos
            continue
        yield obj
        i += 1
        if m.group(1) == "]":
            stream.pos = m.end()
            return
        pos = m.end()
        if buf[pos] == "]":   # a trailing comma
            stream.pos = pos + 1
            return


# =========================================================================== collection

_CATS = {"kernel": 0, "gpu_memcpy": 1, "memcpy": 1, "gpu_memset": 1, "memset": 1,
         "cuda_runtime": 2, "runtime": 2, "cuda_driver": 2, "cpu_op": 3, "operator": 3,
         "user_annotation": 3}
_KERNEL_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                "Process Group Name", "Process Group Description")
_ANN_ARGS = ("Input Dims", "Input type")
# CPU span codes
_C_OTHER, _C_BACKWARD, _C_OPTIM, _C_COMM, _C_ISSUE, _C_STEP = 0, 1, 2, 3, 4, 5


class _Collector:
    """The numbers of one rank's trace that the analysis needs, in compact columns."""

    def __init__(self, source):
        self.source = source
        self.meta = {}
        self.threads = {}
        self.kernel_names = {}
        self.cpu = {k: array("d") for k in ("ts", "dur")}
        self.cpu_tid = array("q")
        self.cpu_code = array("b")
        self.cpu_name = array("q")
        self.cpu_names = {}
        self.steps = []        # (ts, dur, tid, number)
        self.ann = []          # (ts, dur, tid, backend, op, args)
        self.rpc = []          # (ts, dur, tid, args)
        self.c10d = []         # (ts, dur, tid, name)
        self.gpu = {k: array("d") for k in ("ts", "dur")}
        self.gpu_lane = array("q")
        self.gpu_corr = array("q")
        self.gpu_name = array("q")
        self.comm = []         # NCCL kernels: dict
        self.rt = {k: array("d") for k in ("ts", "dur")}
        self.rt_corr = array("q")
        self.rt_tid = array("q")
        self.lanes = {}
        self.device_of_lane = {}
        self.events = 0
        self.malformed = 0
        self.base = None

    def _tid(self, ev):
        key = (ev.get("pid"), ev.get("tid"))
        t = self.threads.get(key)
        if t is None:
            t = self.threads[key] = len(self.threads)
        return t

    def add(self, ev):
        """Keep what the analysis needs of one event; count it malformed if it cannot be
        read (a field of the wrong type)."""
        self.events += 1
        if ev.__class__ is not dict or ev.get("ph") != "X":
            return
        try:
            self._add(ev)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
            self.malformed += 1

    def _add(self, ev):
        cat = ev.get("cat")
        kind = _CATS.get(cat)
        if kind is None:
            if cat.__class__ is not str:
                return
            kind = _CATS.get(cat.lower())
            if kind is None:
                return
        try:
            ts = float(ev["ts"])
            if self.base is None:
                self.base = ts
            # relative to the first event: the difference of close floats is exact, so
            # sub-microsecond digits survive (absolute µs since 1970 need 51 bits)
            ts = (ts - self.base) * _US
            dur = float(ev.get("dur", 0.0)) * _US
        except (KeyError, TypeError, ValueError):
            self.malformed += 1
            return
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
            self.malformed += 1
            return
        name = ev.get("name")
        if name.__class__ is not str:
            name = str(name)
        if kind == 3:
            self._cpu(ev, name, ts, dur)
        elif kind == 2:
            args = ev.get("args")
            if args.__class__ is not dict:
                return
            corr = args.get("correlation")
            if corr is None:
                return
            self.rt["ts"].append(ts)
            self.rt["dur"].append(dur)
            self.rt_corr.append(int(corr))
            self.rt_tid.append(self._tid(ev))
        else:
            args = ev.get("args")
            if args.__class__ is not dict:
                args = {}
            dev = args.get("device", ev.get("pid"))
            key = (dev, args.get("stream", ev.get("tid")))
            lane = self.lanes.get(key)
            if lane is None:
                lane = self.lanes[key] = len(self.lanes)
                self.device_of_lane[lane] = dev
            corr = args.get("correlation")
            corr = -1 if corr is None else int(corr)
            if kind == 0 and "nccl" in name.lower():
                self.comm.append({"ts": ts, "dur": dur, "lane": lane, "corr": corr,
                                  "name": name, "device": dev,
                                  **{k: args[k] for k in _KERNEL_ARGS if k in args}})
                return
            nid = self.kernel_names.get(name)
            if nid is None:
                nid = self.kernel_names[name] = len(self.kernel_names)
            self.gpu["ts"].append(ts)
            self.gpu["dur"].append(dur)
            self.gpu_lane.append(lane)
            self.gpu_corr.append(corr)
            self.gpu_name.append(nid)

    def _cpu(self, ev, name, ts, dur):
        tid = self._tid(ev)
        code = _C_OTHER
        if name.startswith("autograd::engine::evaluate_function"):
            code = _C_BACKWARD
        elif name.startswith("Optimizer."):
            code = _C_OPTIM
        elif name.startswith("ProfilerStep#"):
            code = _C_STEP
            try:
                number = int(name[len("ProfilerStep#"):])
            except ValueError:
                number = -1
            self.steps.append((ts, dur, tid, number))
        elif name == "record_param_comms":
            code = _C_ISSUE
            args = ev.get("args") or {}
            self.rpc.append((ts, dur, tid, {k: args[k] for k in _KERNEL_ARGS if k in args}))
        elif name.startswith("c10d::"):
            code = _C_ISSUE
            self.c10d.append((ts, dur, tid, name))
        else:
            head, sep, tail = name.partition(":")
            if sep and head in _BACKENDS and tail and not tail.startswith(":"):
                code = _C_COMM
                args = ev.get("args") or {}
                self.ann.append((ts, dur, tid, head, tail,
                                 {k: args[k] for k in _ANN_ARGS if k in args}))
        nid = self.cpu_names.get(name)
        if nid is None:
            nid = self.cpu_names[name] = len(self.cpu_names)
        self.cpu["ts"].append(ts)
        self.cpu["dur"].append(dur)
        self.cpu_tid.append(tid)
        self.cpu_code.append(code)
        self.cpu_name.append(nid)


def _collect(path) -> _Collector:
    source = os.fspath(path)
    if not os.path.isfile(source):
        raise ProfileFormatError(source, "<file>", "no such file")
    raw, fh = _open(source, source)
    col = _Collector(source)
    try:
        stream = _Stream(raw, source)
        add = col.add
        for ev in _iter_document(stream, col.meta):
            add(ev)
        # the rest of the stream must be readable too (a truncated gzip says so at the end)
        while stream._fill():
            pass
        col.bytes_read = stream.bytes_read
        col.file_bytes = os.path.getsize(source)
    finally:
        raw.close()
        fh.close()
    if not col.meta.pop("_has_events", False) and not col.meta.pop("_array_form", False):
        raise ProfileFormatError(source, "traceEvents", "missing: this JSON is not a Kineto "
                                 "(torch.profiler) trace; export one with "
                                 "prof.export_chrome_trace() or tensorboard_trace_handler")
    return col


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


def _nelems_bytes(args, key):
    n = args.get(key)
    size = _dtype_bytes(args.get("dtype"))
    try:
        n = int(n)
    except (TypeError, ValueError):
        return None
    if size is None or n < 0:
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
    src = col.source
    meta = col.meta
    notes, undetermined = [], {}
    dist = meta.get("distributedInfo")
    if not isinstance(dist, dict) or dist.get("world_size") is None:
        raise ProfileFormatError(src, "distributedInfo.world_size",
                                 "missing: the trace does not say the world size (start "
                                 "torch.distributed before the profiler, and profile a "
                                 "distributed run)")
    try:
        world = int(dist["world_size"])
        if world < 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ProfileFormatError(src, "distributedInfo.world_size",
                                 f"must be an integer >= 1, got {dist['world_size']!r}") \
            from None
    rank = dist.get("rank")
    rank = int(rank) if isinstance(rank, (int, float)) and not isinstance(rank, bool) else None
    backend = dist.get("backend")
    nccl_version = dist.get("nccl_version")
    if nccl_version is None and (backend or "").startswith("nccl"):
        undetermined["nccl_version"] = ("distributedInfo has no nccl_version (this PyTorch "
                                        "version does not record it)")
    if not col.steps:
        raise CalibrationError(f"{src}: no ProfilerStep#N span: the trace does not mark "
                               "training iterations; profile with torch.profiler.profile("
                               "schedule=...) and call prof.step() once per iteration")
    steps = sorted(set(col.steps))
    step_start = np.array([s[0] for s in steps])
    step_end = np.array([s[0] + s[1] for s in steps])
    step_number = np.array([s[3] for s in steps])

    cts = np.frombuffer(col.cpu["ts"], float) if col.cpu["ts"] else np.zeros(0)
    cdur = np.frombuffer(col.cpu["dur"], float) if col.cpu["dur"] else np.zeros(0)
    ctid = np.frombuffer(col.cpu_tid, np.int64) if col.cpu_tid else np.zeros(0, np.int64)
    ccode = np.frombuffer(col.cpu_code, np.int8) if col.cpu_code else np.zeros(0, np.int8)
    bwd_mask = ccode == _C_BACKWARD
    opt_iv = _per_thread_union(cts, cdur, ctid, ccode == _C_OPTIM)
    # backward window of each step: first to last evaluate_function issued in the step
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

    # -------------------------------------------------- device work and its CPU launch
    gts = np.frombuffer(col.gpu["ts"], float) if col.gpu["ts"] else np.zeros(0)
    gdur = np.frombuffer(col.gpu["dur"], float) if col.gpu["dur"] else np.zeros(0)
    glane = np.frombuffer(col.gpu_lane, np.int64) if col.gpu_lane else np.zeros(0, np.int64)
    gcorr = np.frombuffer(col.gpu_corr, np.int64) if col.gpu_corr else np.zeros(0, np.int64)
    gname = np.frombuffer(col.gpu_name, np.int64) if col.gpu_name else np.zeros(0, np.int64)
    rcorr = np.frombuffer(col.rt_corr, np.int64) if col.rt_corr else np.zeros(0, np.int64)
    rts = np.frombuffer(col.rt["ts"], float) if col.rt["ts"] else np.zeros(0)
    rtid = np.frombuffer(col.rt_tid, np.int64) if col.rt_tid else np.zeros(0, np.int64)
    ro = np.argsort(rcorr, kind="stable")
    rcorr_s, rts_s, rtid_s = rcorr[ro], rts[ro], rtid[ro]

    def launch(corr):
        corr = np.asarray(corr, np.int64)
        if rcorr_s.size == 0:
            return np.full(corr.shape, np.nan), np.full(corr.shape, -1)
        i = np.clip(np.searchsorted(rcorr_s, corr), 0, rcorr_s.size - 1)
        hit = (rcorr_s[i] == corr) & (corr >= 0)
        return np.where(hit, rts_s[i], np.nan), np.where(hit, rtid_s[i], -1)

    timeline = "gpu" if (gts.size or col.comm) else "cpu"
    comm_lanes = {k["lane"] for k in col.comm}
    if timeline == "gpu":
        keep = ~np.isin(glane, list(comm_lanes)) if comm_lanes else np.ones(gts.size, bool)
        op_start, op_end = gts[keep], gts[keep] + gdur[keep]
        op_lane = glane[keep]
        op_name = gname[keep]
        op_issue, op_tid = launch(gcorr[keep])
        if rcorr_s.size == 0 or np.all(np.isnan(op_issue)):
            notes.append("no CPU launch events (cuda_runtime) link the GPU work to the "
                         "steps: it is assigned by its GPU start time")
            op_issue = op_start.copy()
        gpus = _gpu_names(meta, {col.device_of_lane[int(x)] for x in np.unique(glane)}
                          | {k["device"] for k in col.comm})
    else:
        # CPU training: operators on the threads that train (steps, backward) are compute
        train = {s[2] for s in steps} | set(np.unique(ctid[bwd_mask]).tolist())
        m = np.isin(ctid, list(train)) & np.isin(ccode, [_C_OTHER, _C_BACKWARD, _C_OPTIM])
        op_start, op_end = cts[m], cts[m] + cdur[m]
        op_issue, op_tid = op_start.copy(), ctid[m]
        op_lane = op_tid
        # leaves only (an operator holding no other on its thread) for the slowdown
        cname = np.frombuffer(col.cpu_name, np.int64)
        op_name = _leaf_names(op_start, op_end, op_tid, cname[m])
        gpus = _gpu_names(meta, None)
    op_step = _step_index(op_issue, step_start, step_end)
    phase = np.full(op_start.size, 0, np.int8)     # 0 forward, 1 backward, 2 opt, 3 other
    in_opt = _inside_thread(op_issue, op_tid, opt_iv)
    has_bw = op_step >= 0
    has_bw[has_bw] &= np.isfinite(bw_lo[op_step[has_bw]])
    lo = np.where(has_bw, bw_lo[np.maximum(op_step, 0)], np.inf)
    hi = np.where(has_bw, bw_hi[np.maximum(op_step, 0)], np.inf)
    phase[(op_issue >= lo) & (op_issue <= hi)] = 1
    phase[(op_issue > hi) & has_bw] = 3
    phase[in_opt] = 2

    calls = _build_calls(col, timeline, launch, step_start, step_end, notes, undetermined)
    gradient = np.array([k == "all_reduce" for k in calls.kind], bool)
    if gradient.any():
        st = calls.step
        ok = st >= 0
        inwin = np.zeros(gradient.size, bool)
        if np.isfinite(bw_lo).any():
            s = np.maximum(st, 0)
            # issued from the first backward op to the first optimizer step after it
            opt_after = _first_optimizer_after(bw_lo, opt_iv, step_end)
            inwin = ok & (calls.issue >= bw_lo[s]) & (calls.issue < opt_after[s])
        gradient &= inwin

    per_step = _per_step(timeline, step_start, step_end, op_start, op_end, op_issue, op_step,
                         phase, op_lane, calls, gradient)
    slowdown = _slowdown(op_start, op_end, op_name, op_step, calls, timeline)
    if col.malformed:
        notes.append(f"{col.malformed} event(s) with fields of the wrong type were skipped")
    return _Rank(source=src, rank=rank, world_size=world, backend=backend,
                 nccl_version=None if nccl_version is None else str(nccl_version),
                 pg_config=dist.get("pg_config"), gpus=gpus, timeline=timeline,
                 step_start=step_start, step_end=step_end, step_number=step_number,
                 calls=calls, gradient=gradient, per_step=per_step, slowdown=slowdown,
                 notes=notes, undetermined=undetermined,
                 file_bytes=getattr(col, "file_bytes", 0), bytes_read=col.bytes_read)


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


def _build_calls(col, timeline, launch, step_start, step_end, notes, undetermined) -> _Calls:
    """Collective calls: annotations with their NCCL kernels, or lone kernels, or (gloo)
    execution spans."""
    ann, rpc = col.ann, col.rpc
    ann_by = _by_tid(ann)
    rpc_by = _by_tid(rpc)
    rows = {}       # key -> dict
    order = []

    def row(key):
        r = rows.get(key)
        if r is None:
            r = rows[key] = {"kernels": [], "kargs": None, "kname": None, "issue": np.nan,
                             "ann": None, "rpc": None, "lane": -1}
            order.append(key)
        return r

    kernels = col.comm
    if kernels:
        k_issue, k_tid = launch([k["corr"] for k in kernels])
        unlinked = 0
        for i, k in enumerate(kernels):
            t, tid = k_issue[i], int(k_tid[i])
            a = _innermost(ann_by, tid, t) if np.isfinite(t) else None
            key = ("ann", a) if a is not None else ("kernel", i)
            r = row(key)
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
    gloo_exec = timeline == "cpu"
    for a, sp in enumerate(ann):
        if ("ann", a) in rows:
            continue
        r = row(("ann", a))
        r["ann"] = a
        r["issue"] = sp[0]
        r["rpc"] = _innermost(rpc_by, sp[2], sp[0])
        if gloo_exec and sp[3] != "nccl":
            r["kernels"].append((sp[0], sp[0] + sp[1]))
            r["lane"] = -2 - sp[2]     # the worker thread is the lane
            r["exec"] = True
    if gloo_exec:
        _issue_from_c10d(rows, ann, col.c10d, notes)

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
        b = src = None
        if ka:
            b, src = _nelems_bytes(ka, "In msg nelems"), "kernel args"
            ob = _nelems_bytes(ka, "Out msg nelems")
            if ob is not None:
                out_bytes[j] = ob
        if b is None and ra:
            b, src = _nelems_bytes(ra, "In msg nelems"), "record_param_comms"
            ob = _nelems_bytes(ra, "Out msg nelems")
            if ob is not None:
                out_bytes[j] = ob
        if b is None and sp is not None:
            b, src = _shape_bytes(sp[5].get("Input Dims"), sp[5].get("Input type")), \
                "annotation Input Dims"
        if b is not None:
            nbytes[j] = b
        size_source.append(src if b is not None else None)
        g = ka.get("Group size", ra.get("Group size"))
        try:
            group[j] = int(g) if g is not None else 0
        except (TypeError, ValueError):
            group[j] = 0
    step = _step_index(issue, step_start, step_end)
    return _Calls(kind=kind, issue=issue, start=start, end=end, dur=dur, nbytes=nbytes,
                  out_bytes=out_bytes, size_source=size_source, group=group, algo=algo,
                  proto=proto, lane=lane, step=step, kernels=kern)


def _issue_from_c10d(rows, ann, c10d, notes):
    """Gloo runs a collective on a worker thread; its issue is the ``c10d::`` operator that
    queued it, matched in order per kind."""
    ops = {}
    for ts, dur, tid, name in sorted(c10d):
        k = collective_kind(name)
        if k in ("unknown",) or k.endswith("wait"):
            continue
        ops.setdefault(k, []).append(ts)
    execs = {}
    for key, r in rows.items():
        if r.get("exec"):
            sp = ann[r["ann"]]
            execs.setdefault(collective_kind(sp[4]), []).append((sp[0], key))
    for k, lst in execs.items():
        lst.sort()
        issued = ops.get(k, [])
        if len(issued) == len(lst):
            for (t0, key), ti in zip(lst, issued):
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


# =========================================================================== results

def _f(x):
    """A float for JSON, None for NaN / None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@attrs.frozen
class CollectiveSummary:
    """One kind of collective in a trace.

    Attributes
    ----------
    kind : str
        ``"all_reduce"``, ``"all_gather"``, ``"all_to_all"``, ... [-].
    calls : int
        Calls issued in the profiled steps, over all ranks read [-].
    count_per_step : float
        Calls per step and rank [-].
    total_bytes : float or None
        Input bytes per rank, summed over the calls (None when a size is missing) [bytes].
    bytes_per_step : float or None
        Median over steps of the bytes per rank [bytes].
    sizes_known : int
        Calls whose size the trace gives [-].
    size_source : str or None
        Where the sizes come from (``"kernel args"``, ``"record_param_comms"``,
        ``"annotation Input Dims"``) [-].
    time_total : float or None
        Busy time of the calls' kernels (gloo: executions), summed [s].
    time_per_step : float or None
        Median over steps of that time [s].
    algorithms, protocols : dict
        NCCL algorithm and protocol from the kernel names, with their call counts [-].
    algbw : float or None
        Achieved algorithm bandwidth, nccl-tests' :math:`S/t` over the calls with size and
        time (:math:`S` the whole buffer: :math:`n` times the input for all-gather) [bits/s].
    busbw : float or None
        Bus bandwidth, ``algbw`` times nccl-tests' bus factor (all-reduce
        :math:`2(n-1)/n`; all-gather, reduce-scatter, all-to-all :math:`(n-1)/n`) [bits/s].
    group_size : int or None
        Ranks taking part (from the trace, else the world size) [-].
    gradient : int
        Calls that are gradient buckets (all-reduces issued during backward) [-].
    """

    kind: str
    calls: int
    count_per_step: float
    total_bytes: float | None
    bytes_per_step: float | None
    sizes_known: int
    size_source: str | None
    time_total: float | None
    time_per_step: float | None
    algorithms: dict
    protocols: dict
    algbw: float | None
    busbw: float | None
    group_size: int | None
    gradient: int

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {k: (_f(v) if isinstance(v, float) else v)
                for k, v in attrs.asdict(self).items()}


@attrs.frozen
class ReplayCheck:
    """The model's prediction of the traced configuration next to the measured step.

    Attributes
    ----------
    world_size : int
        Workers [workers].
    measured : float
        Median ProfilerStep duration [s].
    predicted : float or None
        :func:`scalemodel.iteration_time` with the trace's profile and fitted cluster [s];
        None when it cannot be made (``reason``).
    error : float or None
        ``predicted - measured`` [s].
    relative_error : float or None
        ``error / measured`` [-].
    predicted_overlap_only : float or None
        The same recurrence with every bucket's measured duration instead of the fitted
        transport [s].
    overlap_only_error : float or None
        ``predicted_overlap_only - measured`` [s].
    buckets : int
        Gradient buckets per step in the model [-].
    uncovered : dict
        Collectives the model does not describe: ``{kind: {"calls_per_step", "time_per_step"
        [s], "share" [-]}}`` (time on the communication stream per step and its share of
        the step).
    iteration : dict
        The prediction's breakdown (:class:`~scalemodel.IterationTime` fields) [s].
    reason : str or None
        Why there is no prediction, or what limits it [-].
    """

    world_size: int
    measured: float
    predicted: float | None
    error: float | None
    relative_error: float | None
    predicted_overlap_only: float | None
    overlap_only_error: float | None
    buckets: int
    uncovered: dict
    iteration: dict
    reason: str | None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        d = attrs.asdict(self)
        for k in ("measured", "predicted", "error", "relative_error",
                  "predicted_overlap_only", "overlap_only_error"):
            d[k] = _f(d[k])
        return d


@attrs.frozen(eq=False)
class TraceReport:
    """What :func:`read_trace` found in one job's trace(s).

    Attributes
    ----------
    files : tuple of str
        The traces read, one per rank [-].
    ranks : tuple
        Their ranks (None where the trace does not say) [-].
    world_size : int
        Ranks in the job, from ``distributedInfo`` [workers].
    backend : str or None
        Process-group backend (``nccl``, ``gloo``) [-].
    nccl_version : str or None
        NCCL version [-].
    gpus : tuple of str
        GPU names of the ranks read (empty on CPUs) [-].
    timeline : str
        ``"gpu"`` (device times from GPU activity) or ``"cpu"`` (gloo, CPU operators) [-].
    step_time : float
        Median duration of all ProfilerStep spans of all ranks read [s].
    step_time_spread : dict
        ``min``, ``p25``, ``p75``, ``max`` of those durations [s].
    step_count : int
        ProfilerStep spans [-].
    step_times : numpy.ndarray
        Every ProfilerStep duration, rank by rank [s].
    per_step : dict
        ``{"median": {...}, "steps": [...]}``: forward, backward, optimizer, other,
        compute (busy time on the compute streams), communication (busy time on the
        communication streams) and exposed_communication (communication while no compute
        runs), per step and their medians [s].
    collectives : dict
        ``{kind: CollectiveSummary}``.
    undetermined : dict
        ``{what: why}``: what the trace does not say [-].
    notes : tuple of str
        Remarks on the reading (left-out events, fit warnings) [-].
    buckets : dict
        Gradient buckets, medians over steps: ``bytes`` [bytes], ``ready`` [s],
        ``duration`` [s] per bucket, in communication order.
    profile : WorkloadProfile or None
        The workload profile (see the module notes) [-].
    cluster : ClusterProfile or None
        The fitted cluster profile [-].
    fits : dict
        ``{kind: CollectiveFit}`` of every collective that could be fitted [-].
    compute_slowdown : dict
        ``value`` (eq. :eq:`trace-slowdown`, or None), ``coverage``, ``reason`` [-].
    replay : ReplayCheck or None
        The replay check [-].
    file_bytes : int
        Size of the files read [bytes].
    """

    files: tuple
    ranks: tuple
    world_size: int
    backend: str | None
    nccl_version: str | None
    gpus: tuple
    timeline: str
    step_time: float
    step_time_spread: dict
    step_count: int
    step_times: np.ndarray
    per_step: dict
    collectives: dict
    undetermined: dict
    notes: tuple
    buckets: dict
    profile: object
    cluster: object
    fits: dict
    compute_slowdown: dict
    replay: ReplayCheck | None
    file_bytes: int

    def to_dict(self) -> dict:
        """The report as one JSON-ready object (what ``from-trace --json`` prints)."""
        return {
            "files": list(self.files), "ranks": list(self.ranks),
            "world_size": self.world_size, "backend": self.backend,
            "nccl_version": self.nccl_version, "gpus": list(self.gpus),
            "timeline": self.timeline, "step_time": self.step_time,
            "step_time_spread": self.step_time_spread, "step_count": self.step_count,
            "step_times": self.step_times.tolist(), "per_step": self.per_step,
            "collectives": {k: v.to_dict() for k, v in self.collectives.items()},
            "buckets": self.buckets, "compute_slowdown": self.compute_slowdown,
            "replay": None if self.replay is None else self.replay.to_dict(),
            "fits": {k: v.to_dict() for k, v in self.fits.items()},
            "profiles": {"workload": None if self.profile is None else self.profile.to_dict(),
                         "cluster": None if self.cluster is None else self.cluster.to_dict()},
            "undetermined": self.undetermined, "notes": list(self.notes),
        }

    def summary(self) -> str:
        """A few lines for people."""
        ms = 1e3
        sp = self.step_time_spread
        lines = [f"trace: {', '.join(self.files)}",
                 f"  job: world size {self.world_size}, backend {self.backend}, "
                 + (f"NCCL {self.nccl_version or '?'}, " if self.backend == "nccl" else "")
                 + f"{', '.join(sorted(set(self.gpus))) or 'no GPU'} "
                 f"(ranks read: {', '.join(str(r) for r in self.ranks)})",
                 f"  step time: {self.step_time * ms:.2f} ms (median of {self.step_count} "
                 f"ProfilerSteps; {sp['min'] * ms:.2f} to {sp['max'] * ms:.2f} ms)"]
        med = self.per_step["median"]
        where = "the GPU" if self.timeline == "gpu" else "the CPU threads"
        lines.append(f"  per step (median, busy time on {where}): "
                     + ", ".join(f"{k} {med[k] * ms:.2f}" for k in
                                 ("forward", "backward", "optimizer", "communication",
                                  "exposed_communication") if med.get(k) is not None)
                     + " ms")
        for k, c in self.collectives.items():
            size = (f"{c.bytes_per_step / 1e6:.3f} MB/step" if c.bytes_per_step is not None
                    else f"size unknown ({c.calls - c.sizes_known} of {c.calls})")
            t = f"{c.time_per_step * ms:.2f} ms/step" if c.time_per_step is not None \
                else "time unknown"
            bw = f", busbw {c.busbw / 1e9:.3g} Gbit/s" if c.busbw else ""
            how = ", ".join(f"{a} {n}" for a, n in c.algorithms.items())
            how += (" / " if how and c.protocols else "") + ", ".join(
                f"{p} {n}" for p, n in c.protocols.items())
            lines.append(f"  {k}: {c.count_per_step:g}/step, {size}, {t}{bw}"
                         + (f" ({how})" if how else ""))
        if self.cluster is not None:
            fit = self.fits.get("all_reduce")
            if fit is not None:
                lines.append(f"  fit: {fit}")
        sd = self.compute_slowdown
        if sd.get("value") is not None and sd.get("overlapped_time", 1.0) == 0:
            lines.append("  compute slowdown: 1 (no compute ran during communication)")
        elif sd.get("value") is not None:
            lines.append(f"  compute slowdown: {sd['value']:.3f} "
                         f"(kernels covering {sd.get('coverage', 1):.0%} of the overlapped "
                         "compute)")
        r = self.replay
        if r is not None:
            if r.predicted is not None:
                lines.append(f"  replay: predicted {r.predicted * ms:.2f} ms, measured "
                             f"{r.measured * ms:.2f} ms, error {r.error * ms:+.2f} ms "
                             f"({r.relative_error:+.1%}), {r.buckets} bucket(s)")
            else:
                lines.append(f"  replay: no prediction: {r.reason}")
            if r.predicted_overlap_only is not None:
                lines.append(f"  replay with the measured bucket durations: "
                             f"{r.predicted_overlap_only * ms:.2f} ms "
                             f"(error {r.overlap_only_error * ms:+.2f} ms)")
            for k, u in r.uncovered.items():
                t = (f"{u['time_per_step'] * ms:.2f} ms/step ({u['share']:.1%} of the step)"
                     if u.get("time_per_step") is not None else "time unknown")
                lines.append(f"  not in the model: {k} x{u['calls_per_step']:g}/step, {t}")
        for k, v in self.undetermined.items():
            lines.append(f"  undetermined: {k}: {v}")
        return "\n".join(lines)

    __str__ = summary


# =========================================================================== combining

def _check_same_job(ranks):
    first = ranks[0]
    for r in ranks[1:]:
        if r.world_size != first.world_size:
            raise CalibrationError(
                f"{first.source} has world size {first.world_size} but {r.source} has "
                f"{r.world_size}: ranks of one job share the world size; give the traces "
                "of one job only")
    seen = {}
    for r in ranks:
        if r.rank is not None:
            if r.rank in seen:
                raise CalibrationError(f"{seen[r.rank]} and {r.source} are both rank "
                                       f"{r.rank}: the same rank twice, or two jobs")
            seen[r.rank] = r.source
            if r.rank >= r.world_size:
                raise CalibrationError(f"{r.source}: rank {r.rank} is not below the world "
                                       f"size {r.world_size}")
    for r in ranks[1:]:
        common = set(first.step_number.tolist()) & set(r.step_number.tolist())
        if not common:
            raise CalibrationError(
                f"{first.source} (steps {_steps_text(first)}) and {r.source} (steps "
                f"{_steps_text(r)}) share no ProfilerStep: traces of different jobs, or of "
                "different windows; profile the same steps on every rank")
        for key in ("backend", "nccl_version"):
            a, b = getattr(first, key), getattr(r, key)
            if a is not None and b is not None and a != b:
                raise CalibrationError(f"{first.source} has {key} {a} but {r.source} has "
                                       f"{b}: traces of different jobs")
        ca, cb = _kind_counts(first, common), _kind_counts(r, common)
        if ca != cb:
            raise CalibrationError(
                f"{first.source} and {r.source} issue different collectives in the same "
                f"steps ({_counts_text(ca)} against {_counts_text(cb)}): traces of "
                "different jobs")


def _steps_text(r):
    n = r.step_number
    return f"#{n.min()}..#{n.max()}" if n.size else "none"


def _kind_counts(r, steps):
    """Calls per kind (send/recv excluded: ranks differ) in the given step numbers."""
    want = np.isin(r.step_number, list(steps))
    out = {}
    for k, s in zip(r.calls.kind, r.calls.step):
        if s >= 0 and want[s] and k != "send_recv":
            out[k] = out.get(k, 0) + 1
    return out


def _counts_text(c):
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def _median(values):
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    return float(np.median(v)) if v.size else None


def _summaries(ranks, world):
    kinds = []
    for r in ranks:
        for k in r.calls.kind:
            if k not in kinds:
                kinds.append(k)
    nsteps = sum(r.step_start.size for r in ranks)
    out = {}
    for k in sorted(kinds, key=lambda x: (COLLECTIVE_KINDS.index(x)
                                          if x in COLLECTIVE_KINDS else 99, x)):
        if not any(np.any(np.array([x == k for x in r.calls.kind]) & (r.calls.step >= 0))
                   for r in ranks):
            continue   # only outside the profiled steps
        calls = known = grad = 0
        total = 0.0
        ttotal = 0.0
        tknown = 0
        sources, algos, protos = {}, {}, {}
        per_step_bytes, per_step_time = [], []
        s_sum = t_sum = 0.0
        groups = set()
        for r in ranks:
            c = r.calls
            sel = np.array([x == k for x in c.kind]) & (c.step >= 0)
            idx = np.flatnonzero(sel)
            calls += idx.size
            grad += int(np.sum(r.gradient[idx]))
            b = c.nbytes[idx]
            known += int(np.isfinite(b).sum())
            total += float(np.nansum(b))
            t = c.dur[idx]
            tknown += int(np.isfinite(t).sum())
            ttotal += float(np.nansum(t))
            for j in idx:
                if c.size_source[j]:
                    sources[c.size_source[j]] = sources.get(c.size_source[j], 0) + 1
                if c.algo[j]:
                    algos[c.algo[j]] = algos.get(c.algo[j], 0) + 1
                if c.proto[j]:
                    protos[c.proto[j]] = protos.get(c.proto[j], 0) + 1
                n = int(c.group[j]) or world
                groups.add(n)
                if np.isfinite(c.nbytes[j]) and np.isfinite(c.dur[j]) and c.dur[j] > 0:
                    s = c.nbytes[j]
                    if k == "all_gather":
                        s = c.out_bytes[j] if np.isfinite(c.out_bytes[j]) else n * s
                    s_sum += s
                    t_sum += c.dur[j]
            for i in range(r.step_start.size):
                m = c.step[idx] == i
                bb = b[m]
                per_step_bytes.append(float(bb.sum()) if np.all(np.isfinite(bb)) else None)
                tt = t[m]
                per_step_time.append(float(tt.sum()) if np.all(np.isfinite(tt)) else None)
        n = groups.pop() if len(groups) == 1 else None
        algbw = 8.0 * s_sum / t_sum if t_sum > 0 else None
        busbw = None
        if algbw is not None and n and k in _BUS_FACTOR and n > 1:
            busbw = algbw * _BUS_FACTOR[k](n)
        out[k] = CollectiveSummary(
            kind=k, calls=calls, count_per_step=round(calls / nsteps, 6),
            total_bytes=total if known == calls and calls else None,
            bytes_per_step=(_median(per_step_bytes) if known == calls and calls else None),
            sizes_known=known,
            size_source=(max(sources, key=sources.get) if sources else None),
            time_total=ttotal if tknown == calls and calls else None,
            time_per_step=_median(per_step_time) if tknown == calls and calls else None,
            algorithms=algos, protocols=protos, algbw=algbw, busbw=busbw, group_size=n,
            gradient=grad)
    return out


def _fit_points(ranks, kind, gradient_only):
    """(bytes per rank for the fit, seconds, group size) of one kind's calls; with several
    ranks whose calls line up, each call's shortest duration across ranks."""
    seqs = []
    for r in ranks:
        c = r.calls
        sel = np.array([x == kind for x in c.kind]) & (c.step >= 0)
        if gradient_only:
            sel &= r.gradient
        idx = np.flatnonzero(sel)
        idx = idx[np.lexsort((c.issue[idx], c.step[idx]))]
        nums = r.step_number[c.step[idx]]
        seqs.append((nums, c.nbytes[idx], c.dur[idx], c.group[idx], c.out_bytes[idx]))
    if len(seqs) > 1:
        common = set.intersection(*(set(s[0].tolist()) for s in seqs))
        cut = [tuple(a[np.isin(s[0], list(common))] for a in s) for s in seqs]
        if len({len(s[0]) for s in cut}) == 1 and all(
                np.array_equal(np.nan_to_num(s[1]), np.nan_to_num(cut[0][1])) for s in cut):
            dur = np.nanmin(np.vstack([s[2] for s in cut]), axis=0) \
                if cut[0][0].size else np.zeros(0)
            seqs = [(cut[0][0], cut[0][1], dur, cut[0][3], cut[0][4])]
    nums = np.concatenate([s[0] for s in seqs])
    b = np.concatenate([s[1] for s in seqs])
    t = np.concatenate([s[2] for s in seqs])
    g = np.concatenate([s[3] for s in seqs])
    ok = np.isfinite(b) & (b > 0) & np.isfinite(t) & (t > 0)
    del nums
    return b[ok], t[ok], g[ok]


def _fit_all(ranks, world, line_rate, notes, undetermined):
    from .fit import COLLECTIVE_MODELS, fit_collective
    fits = {}
    kinds = {k for r in ranks for k in r.calls.kind}
    for kind in sorted(kinds):
        if kind not in COLLECTIVE_MODELS:
            continue
        b, t, g = _fit_points(ranks, kind, gradient_only=False)
        groups = set((g[g > 0]).tolist()) or {world}
        n = max(groups)
        if n < 2:
            if kind == "all_reduce":
                undetermined["cluster"] = (f"world size {world}: one rank communicates "
                                           "nothing, there is no transport to fit")
            continue
        if b.size == 0:
            if kind == "all_reduce":
                undetermined["cluster"] = ("no all-reduce with both a size and a time: "
                                           + ("the trace has no sizes for them"
                                              if not _any_sizes(ranks, kind) else
                                              "the trace has no kernel times for them"))
            continue
        if kind == "reduce_scatter":
            b = b / n
        distinct = np.unique(b).size
        if distinct < 3:
            msg = (f"{distinct} distinct {kind} size(s) in the trace; at least 3 are "
                   "needed to separate latency from bandwidth")
            if kind == "all_reduce":
                undetermined["cluster"] = msg
            else:
                notes.append(f"{kind}: not fitted: {msg}")
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CalibrationWarning)
            try:
                fits[kind] = fit_collective(b, t, collective=kind, n=int(n), min_points=3,
                                            line_rate=line_rate)
            except CalibrationError as exc:
                msg = f"{kind}: the fit failed: {exc}"
                if kind == "all_reduce":
                    undetermined["cluster"] = msg
                else:
                    notes.append(msg)
        for w in caught:
            notes.append(f"fit {kind}: {w.message}")
    return fits


def _any_sizes(ranks, kind):
    return any(np.isfinite(r.calls.nbytes[i]) for r in ranks
               for i, k in enumerate(r.calls.kind) if k == kind)


def _bucket_stats(ranks, notes):
    """Per-step bucket samples of every rank pooled: modal count, medians per bucket."""
    samples = [d for r in ranks for d in r.per_step]
    counts = [d["bucket_calls"].size for d in samples]
    with_buckets = [c for c in counts if c]
    if not with_buckets:
        return None, samples
    values, freq = np.unique(with_buckets, return_counts=True)
    k = int(values[np.argmax(freq)])
    use = [d for d in samples if d["bucket_calls"].size == k]
    if len(use) < len(samples):
        notes.append(f"{len(samples) - len(use)} of {len(samples)} step(s) have another "
                     f"number of gradient buckets than {k}: left out of the profile")
    return k, use


def _build_profile(ranks, report_name, world, slowdown, notes, undetermined):
    """The workload profile (eq. :eq:`trace-times`) and the per-bucket medians."""
    from ..profiles import WorkloadProfile
    k, use = _bucket_stats(ranks, notes)
    if k is None:
        undetermined["workload"] = ("no gradient all-reduce was issued during backward in "
                                    "any step: no buckets to make a profile of")
        return None, {}, None
    tf = _median([d["b0"] - d["g0"] for d in use])
    tb = _median([d["b1"] - d["b0"] for d in use])
    tu = _median([d["g1"] - max(d["b1"], d["c1"]) if np.isfinite(d["c1"])
                  else d["g1"] - d["b1"] for d in use])
    if tu is not None and tu < 0:
        notes.append(f"the next step's device work starts {-tu * 1e3:.3g} ms before this "
                     "step's gradient all-reduces end (a pipelined loop): update time 0")
        tu = 0.0
    ready = np.array([d["bucket_ready"] for d in use])
    nbytes = np.array([d["bucket_bytes"] for d in use])
    dur = np.array([d["bucket_dur"] for d in use])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN columns
        r_med = np.nanmedian(ready, axis=0) if ready.size else np.zeros(0)
        b_med = np.nanmedian(nbytes, axis=0) if nbytes.size else np.zeros(0)
        d_med = np.nanmedian(dur, axis=0) if dur.size else np.zeros(0)
    buckets = {"count": k, "steps_used": len(use),
               "bytes": [_f(v) for v in b_med], "ready": [_f(v) for v in r_med],
               "duration": [_f(v) for v in d_med],
               "forward_time": tf, "backward_time": tb, "update_time": tu}
    measured = {"forward": tf, "backward": tb, "update": tu, "ready": r_med,
                "duration": d_med}
    if tf is None or tb is None or tu is None or not np.all(np.isfinite(r_med)):
        undetermined["workload"] = ("the device timeline of backward is incomplete (no "
                                    "backward compute linked to the steps)")
        return None, buckets, measured
    if not np.all(np.isfinite(b_med)):
        undetermined["workload"] = ("the gradient buckets' sizes are not in the trace "
                                    "(no In msg nelems in kernel args or "
                                    "record_param_comms, no Input Dims on the annotation: "
                                    "this PyTorch version, or record_shapes=False)")
        return None, buckets, measured
    sigma = slowdown if slowdown is not None else 1.0
    r = np.maximum.accumulate(np.clip(r_med, 0.0, tb)) / sigma
    first = ranks[0]
    prov = {
        "source": "PyTorch profiler trace: " + ", ".join(Path(x.source).name for x in ranks),
        "derivation": (
            "scalemodel.calibrate.trace: one tensor per gradient bucket (each all-reduce "
            "issued during backward is one DDP bucket), in communication order; ready = "
            "when the compute stream had finished everything launched before the "
            "all-reduce was issued (the NCCL stream waits for exactly that; on CPUs: when "
            "it was issued), from the start of the first backward kernel; forward = first "
            "device work of the step to the start of backward; update = end of backward "
            "and of the gradient all-reduces to the next step's first device work; medians "
            "over steps and ranks; forward, backward and ready times divided by the "
            "compute slowdown so that the profile is compute without communication"),
        "world_size": world, "ranks": [x.rank for x in ranks],
        "steps_used": len(use), "compute_slowdown": sigma,
        "timeline": first.timeline,
    }
    profile = WorkloadProfile(
        name=report_name, tensor_bytes=b_med, tensor_ready=r, forward_time=tf / sigma,
        backward_time=max(tb / sigma, float(r[-1]) if r.size else 0.0), update_time=tu,
        description=f"from a profiler trace ({world} ranks, {k} gradient buckets)",
        device=", ".join(sorted(set(first.gpus))) or "CPU", framework="PyTorch",
        precision="trace", provenance=prov)
    return profile, buckets, measured


def _replay(profile, cluster, fits, world, step_time, measured, ranks, gradient_k, notes):
    from .. import iteration_time
    from ..overlap import comm_finish_time
    uncovered = _uncovered(ranks, step_time)
    reason = None
    predicted = None
    it = {}
    if profile is None:
        reason = "no workload profile (see undetermined.workload)"
    elif world == 1:
        res = iteration_time(profile, n=1, bw=1e12, fusion="none")
        predicted, it = res.total, attrs.asdict(res)
        reason = "one rank: nothing is communicated; the check covers the compute timeline"
    elif cluster is None:
        reason = "no fitted cluster (see undetermined.cluster)"
    else:
        bw = (cluster.extra.get("fitted_bandwidth") if cluster.utilization == 1.0
              and "fitted_bandwidth" in cluster.extra else None)
        if bw is None:
            bw = fits["all_reduce"].line_rate or fits["all_reduce"].bandwidth
        res = iteration_time(profile, n=world, bw=bw, cluster=cluster, fusion="none",
                             algorithm="ring")
        predicted, it = res.total, attrs.asdict(res)
    overlap_only = None
    if measured and measured.get("backward") is not None and world > 1:
        d = np.asarray(measured["duration"], float)
        r = np.asarray(measured["ready"], float)
        if d.size and np.all(np.isfinite(d)) and np.all(np.isfinite(r)):
            r = np.maximum.accumulate(np.clip(r, 0.0, measured["backward"]))
            end = max(measured["backward"], comm_finish_time(r, d))
            overlap_only = measured["forward"] + end + measured["update"]
    err = None if predicted is None else predicted - step_time
    return ReplayCheck(
        world_size=world, measured=step_time, predicted=predicted, error=err,
        relative_error=None if err is None else err / step_time,
        predicted_overlap_only=overlap_only,
        overlap_only_error=None if overlap_only is None else overlap_only - step_time,
        buckets=int(gradient_k or 0), uncovered=uncovered,
        iteration={k: (_f(v) if isinstance(v, float) else v) for k, v in it.items()},
        reason=reason)


def _uncovered(ranks, step_time):
    """Collectives outside the model (everything but gradient all-reduces) per step."""
    out = {}
    nsteps = sum(r.step_start.size for r in ranks)
    for r in ranks:
        c = r.calls
        for j, k in enumerate(c.kind):
            if c.step[j] < 0 or r.gradient[j]:
                continue
            name = k if k != "all_reduce" else "all_reduce (outside backward)"
            u = out.setdefault(name, {"calls": 0, "times": {}})
            u["calls"] += 1
            key = (id(r), int(c.step[j]))
            u["times"][key] = u["times"].get(key, 0.0) + c.dur[j]
    res = {}
    for name, u in out.items():
        per_step = [u["times"].get((id(r), i), 0.0) for r in ranks
                    for i in range(r.step_start.size)]
        t = _median(per_step) if all(np.isfinite(per_step)) else None
        res[name] = {"calls_per_step": round(u["calls"] / nsteps, 6), "time_per_step": t,
                     "share": None if t is None else t / step_time}
    return res


# =========================================================================== public API

def read_trace(path_or_paths, *, line_rate=None, name=None) -> TraceReport:
    """Read a PyTorch profiler (Kineto) trace of a distributed run.

    Parameters
    ----------
    path_or_paths : str, os.PathLike or sequence of them
        One ``.json`` or ``.json.gz`` trace per rank, of one job [path].
    line_rate : float or str, optional
        NIC line rate, so that the cluster profile holds a utilization; without it the
        fitted bandwidth is taken as the line rate [bits/s].
    name : str, optional
        Name of the profiles (default: the first file's stem) [-].

    Returns
    -------
    TraceReport
        World size, step time, per-step breakdown, collectives, what is undetermined,
        the workload and cluster profiles and the replay check.

    Raises
    ------
    ProfileFormatError
        A file that is not a trace (not JSON, no ``traceEvents``), a truncated or corrupt
        ``.gz``, no world size; the message names the file and what is missing.
    CalibrationError
        No ``ProfilerStep`` span, no collective at all, or traces that are not of one job
        (different world sizes, the same rank twice, no common step, different
        collectives).

    Examples
    --------
    >>> from pathlib import Path
    >>> import scalemodel
    >>> from scalemodel.calibrate import read_trace
    >>> data = Path(scalemodel.__file__).parents[1] / "tests" / "data" / "traces"
    >>> rep = read_trace(data / "ddp_2ranks_allreduce_b.json.gz")
    >>> rep.world_size, rep.step_count, round(rep.step_time * 1e3, 2)
    (2, 3, 222.44)
    >>> rep.collectives["all_reduce"].count_per_step, rep.collectives["all_reduce"].algorithms
    (5.0, {'RING': 15})
    """
    from ..units import parse_bandwidth
    if isinstance(path_or_paths, (str, os.PathLike)):
        paths = [path_or_paths]
    else:
        try:
            paths = list(path_or_paths)
        except TypeError:
            from ..exceptions import ParameterTypeError
            raise ParameterTypeError("path_or_paths", path_or_paths,
                                     "a path or a list of paths") from None
    if not paths:
        from ..exceptions import InvalidParameterError
        raise InvalidParameterError("path_or_paths", path_or_paths, "give at least one trace")
    if line_rate is not None:
        line_rate = float(parse_bandwidth(line_rate, "line_rate"))
    ranks = [_analyse(_collect(p)) for p in paths]
    for r in ranks:
        if not r.calls.kind:
            raise CalibrationError(
                f"{r.source}: no collective in the trace (no nccl:/gloo: annotation, no NCCL "
                "kernel): it does not show a distributed training step; profile the "
                "training loop of the distributed job (DDP, FSDP)")
    if len(ranks) > 1:
        _check_same_job(ranks)
    world = ranks[0].world_size
    notes = [n for r in ranks for n in r.notes]
    undetermined = {}
    for r in ranks:
        for k, v in r.undetermined.items():
            undetermined.setdefault(k, v)
    durations = np.concatenate([r.step_end - r.step_start for r in ranks])
    step_time = float(np.median(durations))
    spread = {"min": float(durations.min()), "p25": float(np.percentile(durations, 25)),
              "p75": float(np.percentile(durations, 75)), "max": float(durations.max())}
    collectives = _summaries(ranks, world)
    for k, c in collectives.items():
        if c.sizes_known < c.calls and k != "barrier":   # a barrier has no size
            undetermined[f"bytes.{k}"] = (
                f"{c.calls - c.sizes_known} of {c.calls} calls have no size: neither the "
                "kernel args (In msg nelems, dtype), record_param_comms nor the annotation "
                "(Input Dims, Input type) give it in this trace (PyTorch version, or "
                "record_shapes=False)")
        if c.time_total is None and c.calls:
            undetermined[f"time.{k}"] = (
                "no kernel times: " + ("NCCL launches no kernel for a single rank"
                                       if world == 1 else
                                       "the trace has no GPU activity for these calls"))
        if not c.algorithms and ranks[0].timeline == "gpu" and c.calls and \
                c.time_total is not None:
            undetermined[f"algorithm.{k}"] = "the kernel names do not say it"
    if ranks[0].timeline == "cpu":
        undetermined.setdefault("algorithm", f"{ranks[0].backend} traces do not name the "
                                "collective algorithm or protocol")
    slow = _pool_slowdown(ranks)
    sigma = slow.get("value")
    if sigma is None and world > 1:
        undetermined["compute_slowdown"] = slow.get("reason")
    elif sigma is not None and sigma < 1.0:
        notes.append(f"compute slowdown measured {sigma:.4f} < 1 (noise): 1 is used")
        sigma = 1.0
    label = name or _stem(paths[0])
    profile, buckets, measured = _build_profile(ranks, label, world, sigma, notes,
                                                undetermined)
    fits = _fit_all(ranks, world, line_rate, notes, undetermined)
    cluster = None
    if "all_reduce" in fits:
        from .fit import cluster_from_fits
        prov = {"source": "PyTorch profiler trace: " + ", ".join(Path(r.source).name
                                                                 for r in ranks),
                "derivation": ("scalemodel.calibrate.trace: ring all-reduce model fitted "
                               "to every all-reduce's (bytes per rank, kernel time); a "
                               "kernel's time includes waiting for the slowest rank (with "
                               "every rank's trace the shortest time of each call is "
                               "used)"),
                "world_size": world, "backend": ranks[0].backend,
                "nccl_version": ranks[0].nccl_version, "gpus": sorted(set(ranks[0].gpus))}
        cluster = cluster_from_fits([fits["all_reduce"]], name=label, line_rate=line_rate,
                                    provenance=prov)
        extra = dict(cluster.extra)
        extra["collective_fits"] = {k: f.to_dict() for k, f in fits.items()}
        cluster = attrs.evolve(cluster, extra=extra,
                               compute_slowdown=sigma if sigma is not None else 1.0)
    replay = _replay(profile, cluster, fits, world, step_time, measured, ranks,
                     buckets.get("count") if buckets else 0, notes)
    if replay.predicted is None:
        undetermined["replay"] = replay.reason
    per_rank_steps = [d for r in ranks for d in r.per_step]
    keys = ("forward", "backward", "optimizer", "other", "compute", "communication",
            "exposed_communication")
    per_step = {"median": {k: _median([d[k] for d in per_rank_steps]) for k in keys},
                "steps": [{"rank": r.rank, "number": int(r.step_number[i]),
                           "duration": float(r.step_end[i] - r.step_start[i]),
                           **{k: _f(d[k]) for k in keys},
                           "device_period": _f(d["g1"] - d["g0"])}
                          for r in ranks for i, d in enumerate(r.per_step)]}
    gpus = tuple(g for r in ranks for g in r.gpus)
    return TraceReport(
        files=tuple(r.source for r in ranks), ranks=tuple(r.rank for r in ranks),
        world_size=world, backend=ranks[0].backend, nccl_version=ranks[0].nccl_version,
        gpus=gpus, timeline=ranks[0].timeline, step_time=step_time,
        step_time_spread=spread, step_count=int(durations.size), step_times=durations,
        per_step=per_step, collectives=collectives, undetermined=undetermined,
        notes=tuple(notes), buckets=buckets, profile=profile, cluster=cluster, fits=fits,
        compute_slowdown=slow, replay=replay, file_bytes=sum(r.file_bytes for r in ranks))


def _pool_slowdown(ranks):
    vals = [r.slowdown for r in ranks if r.slowdown.get("value") is not None]
    if not vals:
        return dict(ranks[0].slowdown)
    return {"value": float(np.median([v["value"] for v in vals])),
            "coverage": float(min(v.get("coverage", 1.0) for v in vals)), "reason": None,
            "overlapped_time": float(sum(v.get("overlapped_time", 0.0) for v in vals)),
            "ranks": len(vals)}


def _stem(path):
    name = Path(path).name
    for suffix in (".gz", ".json", ".pt.trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


# =========================================================================== recording

def rank_trace_path(path, rank):
    """Where rank ``rank`` saves its trace: ``<path stem>.rank<rank>.json``.

    Parameters
    ----------
    path : str or os.PathLike
        The path given to ``--trace`` (a ``.json`` or ``.json.gz`` suffix is dropped) [path].
    rank : int
        The rank [-].

    Returns
    -------
    pathlib.Path
        The rank's file.
    """
    p = Path(path)
    name = p.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name(f"{name or 'trace'}.rank{int(rank)}.json")


def record_trace(path, step, *, rank, cuda=False, iterations=5, warmup=1, stage=False):
    """Run ``step`` under ``torch.profiler`` and save the trace of this rank, atomically.

    The profiler records CPU operators with their input shapes (so the collectives' sizes
    are in the trace) and, with ``cuda``, the GPU kernels; ``prof.step()`` after each call
    marks it as one ``ProfilerStep``. The trace is exported to a temporary file in the
    destination's folder and renamed into place.

    Parameters
    ----------
    path : str or os.PathLike
        The ``--trace`` path; the file written is :func:`rank_trace_path` of it [path].
    step : callable
        One training iteration, called ``warmup + iterations`` times [-].
    rank : int
        This process's rank [-].
    cuda : bool
        Record GPU activity too [-].
    iterations : int
        Iterations recorded [-].
    warmup : int
        Iterations run under the profiler first and not recorded [-].
    stage : bool
        Return the trace's text instead of writing it, for a caller that writes all its
        outputs together at the end (the calibration) [-].

    Returns
    -------
    pathlib.Path or str
        The file written, or with ``stage`` the trace's text.
    """
    import shutil
    import tempfile

    from torch.profiler import ProfilerActivity, profile, schedule
    if stage:
        folder = tempfile.mkdtemp(prefix="scalemodel-trace-")
        try:
            written = record_trace(Path(folder) / "trace.json", step, rank=rank, cuda=cuda,
                                   iterations=iterations, warmup=warmup)
            return written.read_text(encoding="utf-8")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    out = rank_trace_path(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities, record_shapes=True,
                     schedule=schedule(wait=0, warmup=int(warmup), active=int(iterations),
                                       repeat=1),
                     on_trace_ready=lambda prof: prof.export_chrome_trace(tmp)) as prof:
            for _ in range(int(warmup) + int(iterations)):
                step()
                prof.step()
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return out


# =========================================================================== command line

def main(argv=None) -> int:
    """``python -m scalemodel.calibrate from-trace TRACE [TRACE ...] [--json] [--out PREFIX]``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments after ``from-trace`` (default: ``sys.argv[1:]``) [-].

    Returns
    -------
    int
        0 when the world size and the step time were read; 2 on bad input (one line on
        standard error, nothing written) [-].
    """
    p = argparse.ArgumentParser(
        prog="python -m scalemodel.calibrate from-trace",
        description="Read PyTorch profiler (Kineto) traces of one distributed job (one file "
                    "per rank, .json or .json.gz): world size, step time, per-step compute "
                    "and communication, collectives, and a workload and cluster profile "
                    "with a replay check.")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s) of one job")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--out", metavar="PREFIX", help="write PREFIX.workload.json, "
                   "PREFIX.cluster.json (those that could be made) and PREFIX.report.json")
    p.add_argument("--line-rate", help="NIC line rate, e.g. 100Gbps (default: the fitted "
                   "bandwidth is taken as the line rate)")
    p.add_argument("--name", help="profile name (default: the first file's stem)")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        report = read_trace(args.traces, line_rate=args.line_rate, name=args.name)
        outputs = {}
        if args.out:
            texts = {}
            if report.profile is not None:
                texts[f"{args.out}.workload.json"] = json.dumps(report.profile.to_dict(),
                                                                indent=1)
            if report.cluster is not None:
                texts[f"{args.out}.cluster.json"] = json.dumps(report.cluster.to_dict(),
                                                               indent=1)
            texts[f"{args.out}.report.json"] = json.dumps(report.to_dict(), indent=1)
            outputs = texts
    except (ScalemodelError, ValueError, TypeError) as exc:
        print(f"scalemodel.calibrate from-trace: error: {exc}", file=sys.stderr)
        return 2
    from ..profiles import atomic_write_text
    for path, text in outputs.items():
        atomic_write_text(path, text + "\n")
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.summary())
        for path in outputs:
            print(f"wrote {path}")
    for n in report.notes:
        print(f"[scalemodel.calibrate] note: {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
