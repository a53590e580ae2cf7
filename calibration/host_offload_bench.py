"""Measure what offloading rests on: the GPU's host link and the CPU's Adam step.

scalemodel's offload time (:mod:`scalemodel.offload`) moves the gradient shard to the
host and the parameters back over the GPU's host link at ``HOST_LINK`` (the PCIe
generation's theoretical rate per direction) and runs the optimizer step on the CPU at
``CPU_ADAM_PARAMS_PER_S`` (DeepSpeed's CPU-Adam, ZeRO-Offload's Table 4). This script
measures both on the machine it runs on, to set beside those defaults:

- copies between the GPU and pinned (page-locked) and pageable host memory, each
  direction alone and both at once, at sizes from 16 MiB to 1 GiB (CUDA events around
  ``Tensor.copy_(non_blocking=True)``, the median of ``--repeats``);
- ``torch.optim.AdamW`` on fp32 CPU tensors (``fused=True`` where this torch has the CPU
  kernel, and ``foreach=True``) over ``--adam-params`` parameters in 64 tensors, with
  the torch thread count the host gives (or ``--threads``): parameters updated per second;
- with ``--host-sharing K1,K2,...``: K processes at once, as the K GPUs of a node each
  step their own shard on the one host (eq. ``offload-host``), each with
  ``cpu_count // K`` threads and ``--sharing-params`` parameters (fused AdamW, started
  together at a barrier): each process's median step and the host's total parameters
  per second. The library's model is a total that does not grow with K (one host's
  rate, shared).

Usage, from the repository root::

    python calibration/host_offload_bench.py --out host_offload.json

The JSON is written atomically (a temporary file in the same folder, then renamed).
Without a GPU only the CPU step is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time


def _count(text):
    """An ``argparse`` type: a whole number >= 1 (``2.5e8`` is accepted) [-]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number >= 1")
    return int(value)


def _sizes(text):
    """``--sizes-mib``: positive sizes, comma-separated [MiB]."""
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers") from None
    if not sizes or not all(math.isfinite(s) and s > 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r} must list sizes > 0")
    return sizes


def copy_rates(torch, sizes, repeats):
    """Per size: host-to-device, device-to-host and both at once [bytes/s], for pinned
    and pageable host memory (medians of ``repeats``)."""
    dev = torch.device("cuda")
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        gpu_a = torch.empty(n, dtype=torch.float32, device=dev)
        gpu_b = torch.empty(n, dtype=torch.float32, device=dev)
        row = {"bytes": nbytes}
        for kind in ("pinned", "pageable"):
            host_a = torch.empty(n, dtype=torch.float32, pin_memory=kind == "pinned")
            host_b = torch.empty(n, dtype=torch.float32, pin_memory=kind == "pinned")
            host_a.fill_(1.0)
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
            for what in ("h2d", "d2h", "both"):
                times = []
                for _ in range(repeats + 1):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    if what in ("h2d", "both"):
                        with torch.cuda.stream(s1):
                            gpu_a.copy_(host_a, non_blocking=True)
                    if what in ("d2h", "both"):
                        with torch.cuda.stream(s2):
                            host_b.copy_(gpu_b, non_blocking=True)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                med = statistics.median(times[1:])
                moved = nbytes * (2 if what == "both" else 1)
                row[f"{kind}_{what}"] = moved / med
            del host_a, host_b
        rows.append(row)
        del gpu_a, gpu_b
        torch.cuda.empty_cache()
        print(f"copy {nbytes / 2**20:.0f} MiB: " + ", ".join(
            f"{k} {v / 1e9:.1f} GB/s" for k, v in row.items() if k != "bytes"), flush=True)
    return rows


def adam_rates(torch, params, repeats):
    """Parameters per second of ``torch.optim.AdamW`` on fp32 CPU tensors, per
    implementation this torch has [1/s]."""
    chunks = 64
    per = max(1, params // chunks)
    ps = [torch.zeros(per, dtype=torch.float32) for _ in range(chunks)]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    out = {}
    for impl in ("fused", "foreach"):
        try:
            opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
            opt.step()  # creates the state
        except (RuntimeError, TypeError, ValueError) as exc:
            out[impl] = {"error": str(exc).splitlines()[0][:200]}
            continue
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        out[impl] = {"seconds": med, "params_per_s": per * chunks / med}
        print(f"CPU AdamW ({impl}) over {per * chunks:.3g} parameters: {med:.3f} s, "
              f"{per * chunks / med:.3g} parameters/s", flush=True)
        del opt
    return out


def _sharing_worker(params, threads, repeats, barrier, queue):
    """One process of :func:`sharing_rates`: its median fused-AdamW step [s]."""
    import torch

    torch.set_num_threads(threads)
    chunks = 64
    per = max(1, params // chunks)
    ps = [torch.zeros(per, dtype=torch.float32) for _ in range(chunks)]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    try:
        opt = torch.optim.AdamW(ps, lr=1e-4, fused=True)
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(ps, lr=1e-4, foreach=True)
    opt.step()  # the state
    times = []
    for _ in range(repeats):
        barrier.wait()  # every process steps at once, as a node's ranks do
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    queue.put(statistics.median(times))


def sharing_rates(counts, params, repeats):
    """Per process count K: K processes each stepping ``params`` parameters at once with
    ``cpu_count // K`` threads; their median steps [s] and the host's total rate
    [parameters/s]."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    cores = os.cpu_count() or 1
    out = []
    for k in counts:
        threads = max(1, cores // k)
        barrier, queue = ctx.Barrier(k), ctx.Queue()
        procs = [ctx.Process(target=_sharing_worker,
                             args=(params, threads, repeats, barrier, queue))
                 for _ in range(k)]
        _start_ignoring_sigint(procs)
        try:
            steps = sorted(_collect(queue, procs))
        except BaseException:  # a Ctrl-C (the children ignore it) or a failure: end them
            for proc in procs:
                proc.terminate()
            raise
        for proc in procs:
            proc.join()
        total = sum(params / t for t in steps)
        out.append({"processes": k, "threads_each": threads, "params_each": params,
                    "step_seconds": steps, "host_params_per_s": total})
        print(f"CPU AdamW, {k} process(es) x {threads} thread(s), {params:.3g} parameters "
              f"each: steps {min(steps):.3f}-{max(steps):.3f} s, host {total:.3g} "
              "parameters/s", flush=True)
    return out


def _start_ignoring_sigint(procs):
    """Start the processes with Ctrl-C ignored (a spawned interpreter keeps an ignored
    SIGINT): the parent alone answers it, in one line, and ends them."""
    import signal

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for proc in procs:
            proc.start()
    finally:
        signal.signal(signal.SIGINT, before)


def _collect(queue, procs, limit=600.0):
    """The processes' results; a process that dies (or a limit [s] passed) ends them all
    with an error rather than leaving the others at the barrier."""
    import queue as queues

    out, start = [], time.monotonic()
    while len(out) < len(procs):
        try:
            out.append(queue.get(timeout=0.5))
            continue
        except queues.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead or time.monotonic() - start > limit:
            for p in procs:
                p.terminate()
            raise RuntimeError(f"a --host-sharing process failed (exit code {dead[0]})"
                               if dead else f"--host-sharing took over {limit:g} s")
    return out


def _counts(text):
    """``--host-sharing``: process counts, comma-separated [-]."""
    return [_count(t) for t in text.split(",") if t.strip()] or _count("")


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    ap.add_argument("--out", required=True, help="JSON to write")
    ap.add_argument("--sizes-mib", type=_sizes, default=_sizes("16,64,256,1024"),
                    help="copy sizes, comma-separated [MiB]")
    ap.add_argument("--repeats", type=_count, default=10, help="timed repeats per point")
    ap.add_argument("--adam-params", type=_count, default=250_000_000,
                    help="parameters of the CPU AdamW step, at least 64 (one per tensor) [-]")
    ap.add_argument("--threads", type=_count, help="torch CPU threads (default: torch's)")
    ap.add_argument("--host-sharing", type=_counts, default=None,
                    help="also step K processes at once for each K, e.g. 1,2,4,8 [-]")
    ap.add_argument("--sharing-params", type=_count, default=50_000_000,
                    help="parameters each process steps with --host-sharing [-]")
    args = ap.parse_args(argv)
    from scalemodel.profiles import atomic_write_text, output_problem

    problem = output_problem(args.out)
    if problem:
        ap.error(f"--out {args.out!r} {problem}")
    if args.adam_params < 64:
        ap.error(f"--adam-params {args.adam_params}: at least 64 (64 tensors of one or more)")
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "torch": torch.__version__, "python": platform.python_version(),
              "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    if torch.cuda.is_available():
        sizes = [int(s * 2**20) for s in args.sizes_mib]
        result["copies"] = copy_rates(torch, sizes, args.repeats)
    result["adam"] = adam_rates(torch, args.adam_params, max(3, args.repeats // 2))
    result["adam_params"] = args.adam_params
    if args.host_sharing:
        result["host_sharing"] = sharing_rates(args.host_sharing, args.sharing_params,
                                               max(3, args.repeats // 2))
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", flush=True)


class _Stopped(BaseException):
    """SIGTERM or SIGHUP, raised where the process is, so that the --host-sharing
    workers are ended (a default-action signal left them running, orphaned)."""


def _stop(signum, frame):
    raise _Stopped(signum)


if __name__ == "__main__":
    import signal
    from scalemodel.profiles import WRITTEN
    _written_at = len(WRITTEN)
    for _sig in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, _sig):
            signal.signal(getattr(signal, _sig), _stop)
    try:
        main()
    except (KeyboardInterrupt, _Stopped) as _exc:  # the JSON: written once, at the end
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback at exit
        _done = WRITTEN[_written_at:]  # (a signal held by the write comes after it)
        _code = 130 if isinstance(_exc, KeyboardInterrupt) else 128 + int(_exc.args[0])
        print(("host_offload_bench: interrupted; " if _code == 130 else
               f"host_offload_bench: stopped by {signal.Signals(_code - 128).name}; ")
              + (f"{_done[-1]} was written before it stopped" if _done else
                 "--out not written"), file=sys.stderr)
        sys.exit(_code)
