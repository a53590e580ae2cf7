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
  the torch thread count the host gives (or ``--threads``): parameters updated per second.

Usage, from the repository root::

    python calibration/host_offload_bench.py --out host_offload.json

The JSON is written atomically (a temporary file in the same folder, then renamed).
Without a GPU only the CPU step is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time


def _atomic_write(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".host_offload.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON to write")
    ap.add_argument("--sizes-mib", default="16,64,256,1024",
                    help="copy sizes, comma-separated [MiB]")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per point")
    ap.add_argument("--adam-params", type=float, default=2.5e8,
                    help="parameters of the CPU AdamW step [-]")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    args = ap.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "torch": torch.__version__, "python": platform.python_version(),
              "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    if torch.cuda.is_available():
        sizes = [int(float(s) * 2**20) for s in args.sizes_mib.split(",") if s.strip()]
        result["copies"] = copy_rates(torch, sizes, args.repeats)
    result["adam"] = adam_rates(torch, int(args.adam_params), max(3, args.repeats // 2))
    result["adam_params"] = int(args.adam_params)
    _atomic_write(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
