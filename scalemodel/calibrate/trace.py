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

**How the trace is read** (``scalemodel.calibrate.trace_read``). A Kineto trace is
Chrome-trace JSON: metadata keys (``distributedInfo``, ``deviceProperties``, ...) and
``traceEvents``, a list of events. The file, a regular file, possibly gzip-compressed, is
**streamed** through ijson's C parser: time linear in its size whatever it holds, each
event decoded on its own and only the few numbers the analysis needs kept, in typed
arrays (8 bytes per number), so memory stays below the file's size
(``benchmarks/bench_trace.py`` measures it and the speed against ``json.load``) and there
is no size limit. Only a regular file is read (a FIFO or a device is refused at once);
nesting deeper than ``MAX_DEPTH`` (256) and a string or number longer than 1 MB are
refused, and no message quotes the file's content. The analysis of one rank is in
``scalemodel.calibrate.trace_analysis``, the job's report, the command line and the
recording in ``scalemodel.calibrate.trace_report``.

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
execution, and the ``c10d::`` operator that queued it (matched in order) its issue. On
CUDA tensors a gloo call runs from its copy to the host (launched by that operator; or
from when the worker takes it, if later) to its copy back, and calls that ran at once on
gloo's worker threads share their time (eq. :eq:`trace-shared` in the guide).

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

import sys

from .trace_analysis import COLLECTIVE_KINDS, collective_kind
from .trace_read import MAX_DEPTH
from .trace_report import (CollectiveSummary, ReplayCheck, TraceReport, main, rank_trace_path,
                           read_trace, record_trace)

__all__ = ["TraceReport", "CollectiveSummary", "ReplayCheck", "read_trace", "main",
           "record_trace", "rank_trace_path", "collective_kind", "COLLECTIVE_KINDS",
           "MAX_DEPTH"]

for _obj in (TraceReport, CollectiveSummary, ReplayCheck, read_trace, main, record_trace,
             rank_trace_path, collective_kind):
    _obj.__module__ = __name__   # documented, and long known, under this module
del _obj


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
