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
"""

from __future__ import annotations

import sys
import time

import attrs
import numpy as np

from ..exceptions import CalibrationError
from .compute import autocast_context
from .models import load_model, loss_function
from .transport import distributed_context, peer_failure

__all__ = ["DDPMeasurement", "measure_ddp"]


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
    """

    seconds: np.ndarray
    local_seconds: np.ndarray
    world_size: int
    batch_size: int
    bucket_cap_mb: float
    backend: str

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

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"seconds": self.seconds.tolist(), "median": self.median,
                "local_seconds": self.local_seconds.tolist(),
                "local_median": self.local_median,
                "world_size": self.world_size, "batch_size": self.batch_size,
                "bucket_cap_mb": self.bucket_cap_mb, "backend": self.backend}


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
        ``torch.profiler`` and save each rank's trace as ``<stem>.rank<r>.json``
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
    try:  # the constructor broadcasts the parameters and checks their shapes on all ranks
        ddp = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=float(bucket_cap_mb), process_group=group)
    except CalibrationError:
        raise
    except RuntimeError as exc:
        raise peer_failure("setting up DDP (its constructor syncs the parameters of all "
                           "ranks)", exc, timeout) from exc
    loss_fn = loss_function(y)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    rank = dist.get_rank(group)
    import contextlib
    times, local = [], []

    def step(sync_grads):
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync_grads else ddp.no_sync():
            with autocast():
                loss = loss_fn(ddp(x), y)
            loss.backward()
        opt.step()
        sync()
        return time.perf_counter() - t0

    try:
        for it in range(warmup + iterations):
            # a local iteration (no all-reduce) and a DDP one, back to back, so both see
            # the same machine: the single-worker time is measured where it is used
            t_local = step(False)
            t_ddp = step(True)
            if it >= warmup:
                local.append(t_local)
                times.append(t_ddp)
            if progress and rank == 0:
                print(f"[scalemodel.calibrate] DDP iteration {it + 1}/{warmup + iterations}"
                      f"{' (warm-up)' if it < warmup else ''}: {t_ddp * 1e3:.1f} ms "
                      f"(without communication {t_local * 1e3:.1f} ms)", file=sys.stderr,
                      flush=True)
        worst = torch.tensor([times, local], dtype=torch.float64,
                             device=device if backend == "nccl" else "cpu")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
        if trace is not None:
            from .trace import record_trace
            record_trace(trace, lambda: step(True), rank=rank, cuda=device.type == "cuda")
    except CalibrationError:
        raise
    except RuntimeError as exc:
        raise peer_failure(f"DDP training at iteration {len(times) + 1}", exc,
                           timeout) from exc
    worst = worst.cpu().numpy()
    return DDPMeasurement(seconds=worst[0], local_seconds=worst[1],
                          world_size=dist.get_world_size(group),
                          batch_size=batch_size, bucket_cap_mb=float(bucket_cap_mb),
                          backend=backend)
