"""Compute profile from a short measured run: when each gradient is ready during backward.

:func:`measure_compute` trains the model for a few iterations on one device, with no
communication, and records for each parameter the moment its gradient has been
accumulated (``Tensor.register_post_accumulate_grad_hook``; CUDA events on a GPU, the
wall clock on the CPU), together with the forward, backward and optimizer-step times.
Medians over the measured iterations become a :class:`~scalemodel.WorkloadProfile` in
the same format as the built-in ones; the spread across iterations is kept in its
provenance (``spread``) and feeds the uncertainty of predictions. The provenance also
keeps the host's time to issue an iteration (``host_issue_time``, the median from the
iteration's start to the optimizer step's return, before the closing synchronisation;
the gradient hooks' event records included) and the number of gradient tensors
(``gradient_tensors``), and the profile carries the host time as ``host_time`` (capped at
the iteration): with a cluster's host costs the model then says how much of the
data-parallel wrapper's host work shows (:mod:`scalemodel.framework`).

It also measures the device's element-wise sum (the reduction in an all-reduce) at a
few sizes, which becomes the profile's reduction cost table.
"""

from __future__ import annotations

import datetime as _dt
import platform
import time

import attrs
import numpy as np

from ..collectives import ReductionCost
from ..exceptions import CalibrationError, InvalidParameterError
from ..profiles import WorkloadProfile
from .models import _torch, load_model, loss_function

__all__ = ["ComputeMeasurement", "measure_compute", "measure_reduction", "pick_device",
           "device_problem", "autocast_context", "AMP_DTYPES"]


def pick_device(device=None):
    """``device`` as a torch.device; CUDA when present and none is asked for."""
    torch = _torch()
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
    return torch.device(device)


def device_problem(text) -> str:
    """What is wrong with a ``--device`` the user typed, in one line ("" when torch knows
    the device and, for CUDA, sees one): what the calibration scripts check before they
    measure anything [-].

    Parameters
    ----------
    text : str or None
        The device as typed; None (the default device) is never a problem [-].
    """
    if text is None:
        return ""
    torch = _torch()
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError) as exc:
        return (f"--device {text!r} is not a torch device "
                f"({str(exc).splitlines()[0][:120]})")
    if dev.type == "cuda" and not torch.cuda.is_available():
        return (f"--device {text!r}: this torch ({torch.__version__}) sees no CUDA device; "
                "run where a GPU is, or give --device cpu")
    return ""


def device_name(device) -> str:
    """A readable name of the device (GPU model, or the CPU and thread count)."""
    torch = _torch()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU {cpu} ({torch.get_num_threads()} threads)"


class _Clock:
    """Timestamps on the device's own clock: CUDA events on a GPU, perf_counter else."""

    def __init__(self, device):
        self.torch = _torch()
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def elapsed(self, a, b) -> float:
        """Seconds from mark ``a`` to mark ``b`` (after :meth:`sync`)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


@attrs.frozen
class ComputeMeasurement:
    """What :func:`measure_compute` measured.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload profile (medians).
    forward, backward, update : numpy.ndarray
        Per measured iteration: forward (with loss), backward and optimizer-step times [s].
    ready : numpy.ndarray
        Per iteration and gradient (backward order of the profile): ready time from the
        start of backward [s].
    """

    profile: WorkloadProfile
    forward: np.ndarray
    backward: np.ndarray
    update: np.ndarray
    ready: np.ndarray

    @property
    def iteration(self) -> np.ndarray:
        """Per-iteration total time [s]."""
        return self.forward + self.backward + self.update

    def spread(self) -> dict:
        """Median, 10th and 90th percentile of the iteration time [s], and their ratios
        to the median [-]."""
        it = self.iteration
        med = float(np.median(it))
        lo, hi = (float(v) for v in np.percentile(it, [10, 90]))
        return {"median": med, "p10": lo, "p90": hi, "rel_lo": lo / med, "rel_hi": hi / med,
                "iterations": int(it.size)}

    def __str__(self):
        p, s = self.profile, self.spread()
        return (f"{p.name}: batch {p.batch_size} on {p.device}: forward "
                f"{p.forward_time * 1e3:.2f} ms, backward {p.backward_time * 1e3:.2f} ms, "
                f"update {p.update_time * 1e3:.2f} ms, iteration {s['median'] * 1e3:.2f} ms "
                f"[p10 {s['p10'] * 1e3:.2f}, p90 {s['p90'] * 1e3:.2f}] over "
                f"{s['iterations']} iterations; {p.tensor_bytes.size} gradients, "
                f"{p.total_bytes / 1e6:.2f} MB")


AMP_DTYPES = ("bf16", "fp16")
"""The mixed-precision modes of ``amp=`` (``torch.autocast`` dtypes)."""


def autocast_context(amp, device):
    """A factory of ``torch.autocast`` contexts for ``amp`` on ``device`` (a no-op for None).

    Parameters
    ----------
    amp : {None, "bf16", "fp16"}
        Mixed-precision dtype [-].
    device : torch.device
        Where the model runs [-].
    """
    import contextlib
    if amp is None:
        return contextlib.nullcontext
    if amp not in AMP_DTYPES:
        raise InvalidParameterError("amp", amp, f"one of {AMP_DTYPES} or None")
    torch = _torch()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return lambda: torch.autocast(device.type, dtype=dtype)


def _math_modes(torch, dev):
    """The TF32 switches that change fp32 speed on NVIDIA GPUs (recorded as provenance)."""
    if dev.type != "cuda":
        return {}
    return {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32)}


_BACK_TO_BACK = 20  # sums queued per timed round on a GPU


def measure_reduction(device=None, sizes=None, repeats=5) -> ReductionCost:
    """Measured element-wise sum ``a += b`` of fp32 buffers on ``device``.

    On a GPU each repetition queues 20 sums back to back between two CUDA events and keeps
    the mean, so the time is the GPU's and not the host's launch of a lone kernel.

    Parameters
    ----------
    device : str or torch.device, optional
        Where to measure; CUDA when present, else the CPU [-].
    sizes : sequence of int, optional
        Buffer sizes [bytes]; 4 KiB to 1 GiB in powers of 4 by default.
    repeats : int
        Timed repetitions per size; the median is kept [-].

    Returns
    -------
    ReductionCost
        A table of (size, median time).
    """
    torch = _torch()
    dev = pick_device(device)
    clock = _Clock(dev)
    sizes = [4096 * 4 ** k for k in range(10)] if sizes is None else list(sizes)
    out = []
    for nbytes in sizes:
        a = torch.ones(max(1, int(nbytes) // 4), device=dev)
        b = torch.ones_like(a)
        a.add_(b)  # warm-up
        times = []
        for _ in range(int(repeats)):
            clock.sync()
            if clock.cuda:
                # back to back, as inside a collective: a lone kernel after a
                # synchronization would time the host's launch, not the GPU's sum
                t0 = clock.mark()
                for _ in range(_BACK_TO_BACK):
                    a.add_(b)
                t1 = clock.mark()
                clock.sync()
                times.append(clock.elapsed(t0, t1) / _BACK_TO_BACK)
            else:
                t0 = clock.mark()
                a.add_(b)
                times.append(clock.elapsed(t0, clock.mark()))
        out.append(float(np.median(times)))
    return ReductionCost.from_table(np.asarray(sizes, float), np.maximum.accumulate(out),
                                    name=f"measured sum on {dev.type}")


def measure_compute(model="mlp", *, batch_size=32, warmup=3, iterations=10, device=None,
                    threads=None, lr=0.01, name=None, reduction=True, amp=None,
                    progress=None) -> ComputeMeasurement:
    """Train ``model`` for a few iterations on one device and record its timeline.

    Parameters
    ----------
    model : str
        Model spec: built-in name, torchvision name or ``package.module:function`` (see
        :mod:`scalemodel.calibrate.models`) [-].
    batch_size : int
        Samples per iteration [samples].
    warmup : int
        Iterations run first and not recorded [-].
    iterations : int
        Recorded iterations (at least 3); the profile holds their medians [-].
    device : str or torch.device, optional
        Where to run; CUDA when present, else the CPU [-].
    threads : int, optional
        CPU threads torch may use (``torch.set_num_threads``) [threads].
    lr : float
        SGD learning rate (the values do not matter; the step's cost does) [-].
    name : str, optional
        Profile name; the model's name by default [-].
    reduction : bool
        Also measure the device's element-wise sum for the reduction cost [-].
    amp : {None, "bf16", "fp16"}
        Run forward and loss under ``torch.autocast`` with this dtype (mixed precision);
        parameters and gradients stay fp32, so the bytes on the wire do not change [-].
    progress : callable, optional
        Called as ``progress(done, total)`` after each iteration [-].

    Returns
    -------
    ComputeMeasurement
        The profile and the per-iteration measurements.
    """
    torch = _torch()
    for pname, v, least in (("warmup", warmup, 0), ("iterations", iterations, 3)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise InvalidParameterError(pname, v, f"an integer >= {least}")
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = pick_device(device)
    autocast = autocast_context(amp, dev)
    net, x, y, default_name = load_model(model, batch_size)
    net, x, y = net.to(dev), x.to(dev), y.to(dev)
    loss_fn = loss_function(y)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    clock = _Clock(dev)
    params = [p for p in net.parameters() if p.requires_grad]
    names = {id(p): n for n, p in net.named_parameters()}
    fwd, bwd, upd, ready, host = _record_iterations(model, net, x, y, loss_fn, opt,
                                                    autocast, clock, params, names, warmup,
                                                    iterations, progress)
    med_ready = np.median(ready, axis=0)
    order = np.argsort(med_ready, kind="stable")
    nbytes = np.array([p.numel() * p.element_size() for p in params], dtype=float)[order]
    ready_sorted = np.maximum.accumulate(np.maximum(med_ready[order], 0.0))
    backward_time = max(float(np.median(bwd)), float(ready_sorted[-1]))
    red = measure_reduction(dev) if reduction else ReductionCost(name="free")
    dtype = str(params[0].dtype).replace("torch.", "") if params else "float32"
    provenance = _compute_provenance(torch, dev, model, warmup, iterations, amp,
                                     fwd + bwd + upd)
    # the host's issue time (scalemodel.framework: DDP's host work shows only past it)
    provenance["host_issue_time"] = float(np.median(host))
    provenance["gradient_tensors"] = len(params)
    profile = WorkloadProfile(
        name=name or default_name, tensor_bytes=nbytes, tensor_ready=ready_sorted,
        tensor_names=tuple(names[id(params[i])] for i in order),
        tensor_shapes=tuple(tuple(int(d) for d in params[i].shape) for i in order),
        forward_time=float(np.median(fwd)), backward_time=backward_time,
        update_time=float(np.median(upd)), reduction=red, batch_size=batch_size,
        description=(f"{default_name}, batch {batch_size}"
                     f"{f', {amp} autocast' if amp else ''}, measured on {device_name(dev)}"),
        device=device_name(dev), framework=f"PyTorch {torch.__version__}",
        precision={"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(dtype, dtype),
        provenance=provenance, source="<measured>",
        # medians of the parts may sum below the host's median: capped at the iteration
        host_time=min(float(np.median(host)),
                      float(np.median(fwd) + backward_time + np.median(upd))))
    return ComputeMeasurement(profile=profile, forward=fwd, backward=bwd, update=upd,
                              ready=ready[:, order])


def _record_iterations(model, net, x, y, loss_fn, opt, autocast, clock, params, names,
                       warmup, iterations, progress):
    """Train for ``warmup`` + ``iterations`` iterations; per recorded one its forward,
    backward and update times, every parameter's gradient ready time and the host's time
    to issue the iteration (to the optimizer step's return, before the closing
    synchronisation) [s] (arrays)."""
    marks = {}

    def hook(p):
        marks[id(p)] = clock.mark()

    handles = [p.register_post_accumulate_grad_hook(hook) for p in params]
    fwd, bwd, upd, ready, host = [], [], [], [], []
    total = warmup + iterations
    try:
        for it in range(total):
            marks.clear()
            opt.zero_grad(set_to_none=True)
            clock.sync()
            h0 = time.perf_counter()
            t0 = clock.mark()
            with autocast():
                loss = loss_fn(net(x), y)
            t1 = clock.mark()
            loss.backward()
            t2 = clock.mark()
            opt.step()
            t3 = clock.mark()
            issued = time.perf_counter() - h0
            clock.sync()
            if it >= warmup:
                _check_every_gradient(model, params, names, marks)
                fwd.append(clock.elapsed(t0, t1))
                bwd.append(clock.elapsed(t1, t2))
                upd.append(clock.elapsed(t2, t3))
                ready.append([clock.elapsed(t1, marks[id(p)]) for p in params])
                host.append(issued)
            if progress is not None:
                progress(it + 1, total)
    finally:
        for h in handles:
            h.remove()
    return tuple(np.asarray(v, dtype=float) for v in (fwd, bwd, upd, ready, host))


def _check_every_gradient(model, params, names, marks):
    """Raise when a parameter received no gradient in this iteration (no ready time)."""
    missing = [names[id(p)] for p in params if id(p) not in marks]
    if missing:
        raise CalibrationError(
            f"model {model!r}: {len(missing)} parameter(s) received no gradient "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
            "set requires_grad=False on them or make the loss use them, so "
            "every gradient tensor has a ready time")


def _compute_provenance(torch, dev, model, warmup, iterations, amp, it_total):
    """The measured profile's provenance: what was run where, with the spread of the
    iteration times ``it_total`` [s]."""
    med = float(np.median(it_total))
    return {
        "source": "measured by scalemodel.calibrate.compute",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model_spec": model, "torch": torch.__version__, "host": platform.node(),
        "warmup": warmup, "iterations": iterations, "threads": torch.get_num_threads(),
        "timer": "CUDA events" if dev.type == "cuda" else "time.perf_counter",
        "device": (f"cuda ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda"
                   else dev.type),
        "autocast": amp, **_math_modes(torch, dev),
        "spread": {"median": med, "p10": float(np.percentile(it_total, 10)),
                   "p90": float(np.percentile(it_total, 90)),
                   "rel_lo": float(np.percentile(it_total, 10)) / med,
                   "rel_hi": float(np.percentile(it_total, 90)) / med},
    }
