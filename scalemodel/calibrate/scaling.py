"""Scaling check: real DistributedDataParallel training at the full world size.

:func:`measure_ddp` trains the model with ``torch.nn.parallel.DistributedDataParallel``
(gradients fused into buckets and all-reduced while backward runs) for a few iterations
and returns the per-iteration times, each the slowest rank's. Each DDP iteration is paired
with a local one, run just before it under ``DDP.no_sync()`` (no all-reduce) on every rank
at once, so the single-worker time :math:`T_1` is measured on the same machine in the same
state (on a shared host, compute speed drifts by 10 % or more between processes). The
measured scaling factor is

.. math::

   S_\\text{measured} = \\frac{\\tilde T_1}{\\tilde T_n},

medians over iterations (weak scaling, the definition of Zhang et al., arXiv:2006.10103,
and of :func:`scalemodel.scaling_factor`).

**Compute slowdown.** In every iteration, DDP and local alike, each gradient's moment of
readiness is recorded (``Tensor.register_post_accumulate_grad_hook``; the hooks fire
when the autograd engine *dispatches* the accumulation, so on a GPU each hook records a
CUDA event on the current stream, read after the iteration's synchronization, and on
the CPU the wall clock). The *backward span* is the time from the start of backward to
the last gradient ready: backward's compute, without the wait for the last all-reduce
that ``loss.backward()`` includes under DDP. The compute slowdown of
:class:`~scalemodel.ClusterProfile` (eq. :eq:`iteration-cluster`) is

.. math::
   :label: slowdown-measured

   \\sigma = \\frac{\\operatorname{median}_i (f_i + b_i)^\\text{DDP}}
                  {\\operatorname{median}_i (f_i + b_i)^\\text{local}} ,

with :math:`f_i` the forward time and :math:`b_i` the backward span (to the last gradient
ready), the sum because the model stretches forward and backward alike (the quantity of
Zhang et al.'s Fig. 2); the spans those of the rank whose ratio is the largest (each
rank's own iterations: the largest over the ranks iteration by iteration would mix
their stalls), with a bootstrap interval over the paired iterations
(:func:`estimate_slowdown`). What it measures depends on the hardware:

- on **GPUs** (nccl), backward and the all-reduces run on different streams; what slows
  backward is NCCL's kernels taking SMs and memory bandwidth, and DDP's copies into its
  buckets. Zhang et al. (Fig. 2) measured up to 15 %;
- on **CPUs** (gloo), there are no separate engines: gloo's threads, DDP's bucket copies
  and the kernel's TCP stack take CPU time from backward on the same cores, so
  :math:`\\sigma` is the share of the cores communication takes while backward runs
  (tens of per cent on a 2-core host). The other side of the same sharing, how little
  communication progresses while backward runs, is the overlap efficiency
  :math:`\\eta`, fitted on top of :math:`\\sigma` by
  :func:`~scalemodel.calibrate.overhead.fit_host_effects`. On CPUs :math:`\\sigma`
  depends on how much communication runs during backward, hence on the line rate.
"""

from __future__ import annotations

import math
import sys
import time

import attrs
import numpy as np

from ..exceptions import CalibrationError, InvalidParameterError
from .compute import autocast_context
from .models import load_model, loss_function
from .transport import distributed_context, peer_failure

__all__ = ["DDPMeasurement", "measure_ddp", "SlowdownEstimate", "estimate_slowdown"]


@attrs.frozen(eq=False)
class SlowdownEstimate:
    """The compute slowdown of DDP iterations over local ones, eq.
    :eq:`slowdown-measured`.

    Parameters
    ----------
    value : float
        The slowdown to use: ``measured`` when significantly above 1, else 1 [-].
    measured : float
        Median DDP backward span over median local backward span [-].
    interval : tuple of float
        Bootstrap interval of ``measured`` at ``confidence`` [-].
    significant : bool
        Whether the interval lies above 1 [-].
    confidence : float
        Level of the interval [-].
    iterations : int
        Paired iterations behind it [-].
    forward_ratio : float or None
        Median DDP forward over median local forward, for comparison (the model applies
        :math:`\\sigma` to forward too) [-].
    """

    value: float
    measured: float
    interval: tuple
    significant: bool
    confidence: float
    iterations: int
    forward_ratio: float | None = None

    @property
    def cluster_interval(self) -> tuple:
        """The interval to store with ``value`` in a cluster profile: the measured one,
        clipped at 1 (the model has no speed-up) [-]."""
        return (max(1.0, self.interval[0]), max(1.0, self.interval[1]))

    def __str__(self):
        lo, hi = self.interval
        text = (f"compute slowdown {self.measured:.3f} [{lo:.3f}, {hi:.3f}] "
                f"({self.confidence:.0%}, {self.iterations} paired iterations; backward "
                "with DDP over without)")
        if not self.significant:
            text += ": not significantly above 1, so 1 is used"
        if self.forward_ratio is not None:
            text += f"; forward {self.forward_ratio:.3f}"
        return text

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"value": self.value, "measured": self.measured,
                "interval": list(self.interval), "significant": self.significant,
                "confidence": self.confidence, "iterations": self.iterations,
                "forward_ratio": self.forward_ratio}


def estimate_slowdown(ddp, local, *, forward=None, local_forward=None, confidence=0.95,
                      resamples=4000, seed=0) -> SlowdownEstimate:
    """The compute slowdown from paired backward spans, eq. :eq:`slowdown-measured`.

    The interval is the percentile bootstrap of the ratio of medians over the pairs
    (``resamples`` resamples of the pairs, with a fixed ``seed``: the same data give
    the same interval). The slowdown is used only when the interval's low end is above
    1; otherwise the run gives no evidence of one and ``value`` is 1.

    Parameters
    ----------
    ddp, local : array_like
        Compute spans (forward + backward to the last gradient, or backward alone) of the
        DDP iterations and of their paired local iterations [s].
    forward, local_forward : array_like, optional
        Forward times of the same iterations, for the forward ratio [s].
    confidence : float
        Level of the interval, in (0, 1) [-].
    resamples : int
        Bootstrap resamples [-].
    seed : int
        Seed of the resampling [-].

    Returns
    -------
    SlowdownEstimate
        The slowdown, its interval and whether it is significant.

    Examples
    --------
    >>> from scalemodel.calibrate.scaling import estimate_slowdown
    >>> est = estimate_slowdown([1.10, 1.12, 1.11, 1.09, 1.13], [1.0, 1.01, 0.99, 1.0, 1.02])
    >>> round(est.measured, 3), est.significant, est.value == est.measured
    (1.11, True, True)
    """
    d = np.asarray(ddp, dtype=float)
    lo_ = np.asarray(local, dtype=float)
    if d.ndim != 1 or d.shape != lo_.shape or d.size < 2:
        raise InvalidParameterError("ddp", f"{d.size} spans against {lo_.size}",
                                    "one backward span per DDP iteration and one per "
                                    "paired local iteration, at least 2 pairs")
    if not (np.all(np.isfinite(d)) and np.all(d > 0) and np.all(np.isfinite(lo_))
            and np.all(lo_ > 0)):
        raise InvalidParameterError("local", lo_.tolist(), "finite spans > 0 [s]")
    if not 0 < confidence < 1:
        raise InvalidParameterError("confidence", confidence, "in (0, 1)")
    measured = float(np.median(d) / np.median(lo_))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(int(resamples), d.size))
    ratios = np.median(d[idx], axis=1) / np.median(lo_[idx], axis=1)
    tail = 50.0 * (1.0 - confidence)
    lo, hi = (float(v) for v in np.percentile(ratios, [tail, 100.0 - tail]))
    lo, hi = min(lo, measured), max(hi, measured)
    significant = bool(lo > 1.0)
    fwd = None
    if forward is not None and local_forward is not None:
        f, lf = np.asarray(forward, float), np.asarray(local_forward, float)
        if f.size and lf.size and np.median(lf) > 0:
            fwd = float(np.median(f) / np.median(lf))
    return SlowdownEstimate(value=measured if significant else 1.0, measured=measured,
                            interval=(lo, hi), significant=significant,
                            confidence=float(confidence), iterations=int(d.size),
                            forward_ratio=fwd)


@attrs.frozen(eq=False)
class DDPMeasurement:
    """Per-iteration times of a real DDP run.

    Parameters
    ----------
    seconds : numpy.ndarray
        Iteration times, the slowest rank's per iteration [s].
    local_seconds : numpy.ndarray
        Iteration times without communication (``DDP.no_sync()``), interleaved with the
        DDP iterations on every rank at once, the slowest rank's [s].
    world_size : int
        Workers [workers].
    batch_size : int
        Per-worker batch [samples].
    bucket_cap_mb : float
        DDP's bucket cap [MiB].
    backend : str
        The process group's backend [-].
    backward : numpy.ndarray or None
        Backward spans of the DDP iterations (start of backward to the last gradient
        ready), every iteration of one rank: the one whose compute is the most slowed
        (``_with_slowest_compute``) [s].
    local_backward : numpy.ndarray or None
        The same for the local iterations [s].
    forward, local_forward : numpy.ndarray or None
        Forward times (with the loss) of the DDP and local iterations, of the same rank
        [s].
    timer : str
        What timed the spans (``"CUDA events"`` or ``"time.perf_counter"``) [-].
    """

    seconds: np.ndarray
    local_seconds: np.ndarray
    world_size: int
    batch_size: int
    bucket_cap_mb: float
    backend: str
    backward: np.ndarray | None = None
    local_backward: np.ndarray | None = None
    forward: np.ndarray | None = None
    local_forward: np.ndarray | None = None
    timer: str = "time.perf_counter"
    trace_text: str | None = attrs.field(default=None, repr=False)

    @property
    def median(self) -> float:
        """Median iteration time [s]."""
        return float(np.median(self.seconds))

    @property
    def local_median(self) -> float:
        """Median iteration time without communication [s]."""
        return float(np.median(self.local_seconds))

    @property
    def scaling_factor(self) -> float:
        """Measured scaling factor, local over DDP median iteration time [-]."""
        return self.local_median / self.median

    def interval(self, q=(10, 90)) -> tuple:
        """Percentiles of the iteration time [s]."""
        return tuple(float(v) for v in np.percentile(self.seconds, q))

    def subset(self, index) -> "DDPMeasurement":
        """The measurement of some of the iterations only.

        Parameters
        ----------
        index : slice or array_like
            Which iterations (a slice, indices or a boolean mask) [-].
        """
        def take(a):
            return None if a is None else np.asarray(a)[index]
        return attrs.evolve(self, seconds=take(self.seconds),
                            local_seconds=take(self.local_seconds),
                            backward=take(self.backward),
                            local_backward=take(self.local_backward),
                            forward=take(self.forward), local_forward=take(self.local_forward))

    def compute_slowdown(self, confidence=0.95) -> SlowdownEstimate | None:
        """The compute slowdown of these iterations, :func:`estimate_slowdown`; None when
        the backward spans were not recorded.

        Parameters
        ----------
        confidence : float
            Level of the interval [-].
        """
        if self.backward is None or self.local_backward is None:
            return None
        ddp, local = np.asarray(self.backward, float), np.asarray(self.local_backward, float)
        if self.forward is not None and self.local_forward is not None and \
                np.size(self.forward) == ddp.size and np.size(self.local_forward) == local.size:
            # the model stretches forward and backward by sigma (as Zhang et al.'s Fig. 2
            # measured forward + backward): the same sum here
            ddp = ddp + np.asarray(self.forward, float)
            local = local + np.asarray(self.local_forward, float)
        return estimate_slowdown(ddp, local, forward=self.forward,
                                 local_forward=self.local_forward, confidence=confidence)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        out = {"seconds": self.seconds.tolist(), "median": self.median,
               "local_seconds": self.local_seconds.tolist(),
               "local_median": self.local_median,
               "world_size": self.world_size, "batch_size": self.batch_size,
               "bucket_cap_mb": self.bucket_cap_mb, "backend": self.backend,
               "timer": self.timer}
        for name in ("backward", "local_backward", "forward", "local_forward"):
            v = getattr(self, name)
            out[name] = None if v is None else np.asarray(v).tolist()
        return out


def measure_ddp(model="mlp", *, batch_size=32, warmup=3, iterations=10, bucket_cap_mb=25.0,
                device=None, threads=None, lr=0.01, group=None, progress=True,
                timeout=None, amp=None, trace=None) -> DDPMeasurement:
    """Train ``model`` with DDP on every rank of the process group and time it.

    Parameters
    ----------
    model : str
        Model spec (see :mod:`scalemodel.calibrate.models`) [-].
    batch_size : int
        Per-worker batch [samples].
    warmup : int
        Untimed iterations first (DDP rebuilds its buckets after the first) [-].
    iterations : int
        Timed iterations, at least 3 [-].
    bucket_cap_mb : float
        DDP's ``bucket_cap_mb`` [MiB].
    device : str or torch.device, optional
        The rank's device; its CUDA device under nccl, else the CPU [-].
    threads : int, optional
        CPU threads torch may use [threads].
    lr : float
        SGD learning rate [-].
    group : ProcessGroup, optional
        The process group; the default one when omitted [-].
    progress : bool
        Print a progress line per iteration on rank 0 [-].
    timeout : datetime.timedelta, optional
        The process group's timeout, only to word error messages [s].
    amp : {None, "bf16", "fp16"}
        Mixed precision for forward and loss, as in
        :func:`~scalemodel.calibrate.compute.measure_compute` [-].
    trace : str or os.PathLike, optional
        After the timed iterations, record a few more DDP iterations with
        ``torch.profiler``; this rank's trace is returned as ``trace_text``, for the
        caller to write as ``<stem>.rank<r>.json`` with its other outputs
        (:func:`scalemodel.calibrate.trace.record_trace`), readable with
        :func:`scalemodel.calibrate.trace.read_trace` [path].

    Returns
    -------
    DDPMeasurement
        On every rank.
    """
    torch, dist, backend, device, sync = distributed_context(
        "measure_ddp", group, device, warmup=(warmup, 1), iterations=(iterations, 3))
    if threads is not None:
        torch.set_num_threads(int(threads))
    autocast = autocast_context(amp, device)
    net, x, y, _ = load_model(model, batch_size)
    net, x, y = net.to(device), x.to(device), y.to(device)
    ddp = _wrap_ddp(torch, net, device, bucket_cap_mb, group, timeout)
    loss_fn = loss_function(y)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    rank = dist.get_rank(group)
    from .compute import _Clock
    clock = _Clock(device)
    marks = {}

    def hook(p):  # fires when the accumulation is dispatched: a CUDA event on a GPU
        marks[id(p)] = clock.mark()

    handles = [p.register_post_accumulate_grad_hook(hook) for p in net.parameters()
               if p.requires_grad]
    rows = {k: [] for k in ("ddp", "local", "bwd", "local_bwd", "fwd", "local_fwd")}
    trace_text = None
    step = _step_function(dist, group, sync, opt, ddp, autocast, loss_fn, x, y, clock, marks)
    try:
        _timed_iterations(step, warmup, iterations, rows, progress and rank == 0)
        mine = torch.tensor([rows[k] for k in rows], dtype=torch.float64,
                            device=device if backend == "nccl" else "cpu")
        worst = mine.clone()
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(every, mine, group=group)
        if trace is not None:  # kept in memory: the caller writes it with its outputs
            from .trace import record_trace
            trace_text = record_trace(trace, lambda: step(True), rank=rank,
                                      cuda=device.type == "cuda", stage=True)
    except CalibrationError:
        raise
    except RuntimeError as exc:
        raise peer_failure(f"DDP training at iteration {len(rows['ddp']) + 1}", exc,
                           timeout) from exc
    finally:
        for h in handles:
            h.remove()
    worst = _with_slowest_compute(dict(zip(rows, worst.cpu().numpy())),
                                  [dict(zip(rows, r.cpu().numpy())) for r in every])
    return DDPMeasurement(seconds=worst["ddp"], local_seconds=worst["local"],
                          world_size=dist.get_world_size(group),
                          batch_size=batch_size, bucket_cap_mb=float(bucket_cap_mb),
                          backend=backend, backward=worst["bwd"],
                          local_backward=worst["local_bwd"], forward=worst["fwd"],
                          local_forward=worst["local_fwd"],
                          timer="CUDA events" if clock.cuda else "time.perf_counter",
                          trace_text=trace_text)


def _wrap_ddp(torch, net, device, bucket_cap_mb, group, timeout):
    """``net`` in DistributedDataParallel; a peer failing in its constructor (which
    broadcasts the parameters and checks their shapes on all ranks) is reported as such."""
    try:
        return torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=float(bucket_cap_mb), process_group=group)
    except CalibrationError:
        raise
    except RuntimeError as exc:
        raise peer_failure("setting up DDP (its constructor syncs the parameters of all "
                           "ranks)", exc, timeout) from exc


def _step_function(dist, group, sync, opt, ddp, autocast, loss_fn, x, y, clock, marks):
    """The function running one iteration, with (``True``) or without the gradients'
    all-reduce; ``marks`` are filled by the gradient hooks."""
    import contextlib

    def step(sync_grads):
        """One iteration: (iteration time, forward time, backward span) [s]."""
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        marks.clear()
        with contextlib.nullcontext() if sync_grads else ddp.no_sync():
            f0 = clock.mark()
            with autocast():
                loss = loss_fn(ddp(x), y)
            b0 = clock.mark()
            loss.backward()
            b1 = clock.mark()
        opt.step()
        sync()
        elapsed = time.perf_counter() - t0
        clock.sync()
        # the last gradient ready, not the end of loss.backward(): under DDP that waits
        # for the last all-reduce as well
        ends = list(marks.values()) or [b1]
        span = max(clock.elapsed(b0, m) for m in ends)
        return elapsed, clock.elapsed(f0, b0), max(span, 1e-9)

    return step


_COMPUTE_ROWS = ("bwd", "local_bwd", "fwd", "local_fwd")


def _with_slowest_compute(worst, ranks):
    """``worst`` (each row the largest over the ranks, iteration by iteration) with its
    compute spans replaced by the iterations of one rank, the one whose compute is the
    most slowed (the largest median DDP over median local span, forward + backward).

    An iteration time is the slowest rank's, iteration by iteration: the others wait for
    it at the all-reduce. A compute span is not: taking each iteration's largest over
    the ranks mixes their stalls, so that one stall per rank in different iterations
    (a busy machine) raised the median DDP span of three iterations 500 times above the
    local one; one rank's own iterations keep the median's robustness [s]."""
    def ratio(r):  # a rank whose spans cannot give one is taken: its spans are refused
        ddp = np.asarray(r["bwd"]) + np.asarray(r["fwd"])  # by name (estimate_slowdown)
        local = np.asarray(r["local_bwd"]) + np.asarray(r["local_fwd"])
        if not (np.all(np.isfinite(ddp)) and np.all(np.isfinite(local))
                and np.median(local) > 0):
            return math.inf
        return float(np.median(ddp) / np.median(local))

    slowest = max(ranks, key=ratio)
    return dict(worst, **{k: slowest[k] for k in _COMPUTE_ROWS})


def _timed_iterations(step, warmup, iterations, rows, progress):
    """Run the warm-up and timed iterations, each a local one then a DDP one; append the
    timed ones' times to ``rows`` [s]; ``progress``: print a line per iteration."""
    for it in range(warmup + iterations):
        # a local iteration (no all-reduce) and a DDP one, back to back, so both see
        # the same machine: the single-worker time is measured where it is used
        t_local, f_local, b_local = step(False)
        t_ddp, f_ddp, b_ddp = step(True)
        if it >= warmup:
            for k, v in (("ddp", t_ddp), ("local", t_local), ("bwd", b_ddp),
                         ("local_bwd", b_local), ("fwd", f_ddp), ("local_fwd", f_local)):
                rows[k].append(v)
        if progress:
            print(f"[scalemodel.calibrate] DDP iteration {it + 1}/{warmup + iterations}"
                  f"{' (warm-up)' if it < warmup else ''}: {t_ddp * 1e3:.1f} ms "
                  f"(without communication {t_local * 1e3:.1f} ms; backward "
                  f"{b_ddp * 1e3:.1f} vs {b_local * 1e3:.1f} ms)", file=sys.stderr,
                  flush=True)
