"""Speed of the compression planner: plan_compression and compressed_scaling_factor.

Prints, for BERT-Base (64 workers) and ResNet-50 (8 workers): a plan asked again (warm:
every evaluation cached on the scenario), a plan at a line rate not asked before (the
scenario and the profile cached, the knob searches partly new), the first plan after
:func:`scalemodel.model.clear_caches` (the profile file kept loaded; 20 repeats like the
others), a plan on a fitted
cluster with intervals and two alternative explanations, and compressed scaling factors
per second over a 10^6-point grid (line rate x workers x utilization, and line rate at
one worker count). One core (the BLAS threads pinned). Run:
``python benchmarks/bench_plan.py``; it writes ``benchmarks/results/bench_plan.txt``.
"""

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one core

import numpy as np  # noqa: E402

import scalemodel as sm  # noqa: E402
from scalemodel.model import clear_caches  # noqa: E402

LINES = []


def say(text):
    print(text)
    LINES.append(text)


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), float(np.median(times))


def plans(model, n, repeat=20):
    sm.plan_compression(model, "10Gbps", n=n)
    best, med = timed(lambda: sm.plan_compression(model, "10Gbps", n=n), repeat)
    say(f"{model}, n={n}, plan asked again:        best {best * 1e3:7.2f} ms, median "
        f"{med * 1e3:7.2f} ms")
    rates = iter(np.logspace(9.3, 10.7, 1000))
    best, med = timed(lambda: sm.plan_compression(model, float(next(rates)), n=n), repeat)
    say(f"{model}, n={n}, plan at a new line rate:  best {best * 1e3:7.2f} ms, median "
        f"{med * 1e3:7.2f} ms")

    def first():
        clear_caches()
        sm.plan_compression(model, "10Gbps", n=n)

    best, med = timed(first, repeat)  # as many as the others: the best is what is compared
    say(f"{model}, n={n}, first plan (caches cleared): best {best * 1e3:7.2f} ms, median "
        f"{med * 1e3:7.2f} ms")


def fitted_plan(repeat=5):
    cluster = sm.ClusterProfile(
        name="fitted", ceiling=5e9, sync_overhead=0.01,
        intervals={"ceiling": (4e9, 6.5e9), "sync_overhead": (0.005, 0.015)},
        alternatives=[
            {"free": ["ceiling", "sync_overhead"], "values": {"ceiling": 5e9,
                                                              "sync_overhead": 0.01},
             "intervals": {"ceiling": [4e9, 6.5e9], "sync_overhead": [0.005, 0.015]},
             "score": 0.0},
            {"free": ["collective_overhead"], "values": {"collective_overhead": 5e-4},
             "intervals": {"collective_overhead": [3e-4, 7e-4]}, "score": 0.8}],
        provenance={"source": "bench_plan", "runs": [{"bw": 10e9, "n": 8}]})
    sm.plan_compression("resnet50", "10Gbps", n=8, cluster=cluster)
    best, med = timed(lambda: sm.plan_compression("resnet50", "10Gbps", n=8, cluster=cluster),
                      repeat)
    rates = iter(np.logspace(9.3, 10.7, 1000))
    nbest, nmed = timed(lambda: sm.plan_compression("resnet50", float(next(rates)), n=8,
                                                    cluster=cluster), repeat)
    say(f"resnet50, n=8, fitted cluster (2 alternatives, corners): asked again best "
        f"{best * 1e3:.2f} ms (median {med * 1e3:.2f}); new line rate best "
        f"{nbest * 1e3:.2f} ms (median {nmed * 1e3:.2f})")


def grids(repeat=3):
    bw = np.logspace(9, 11, 1000)[:, None, None]
    n = np.array([2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])[None, :, None]
    u = np.linspace(0.1, 1.0, 100)[None, None, :]
    one_n = np.logspace(9, 11, 10**6)
    for comp in ("topk:0.01", "powersgd:4", "fp16"):
        sm.compressed_scaling_factor("resnet50", comp, n, bw, utilization=u)
        best, _ = timed(lambda: sm.compressed_scaling_factor("resnet50", comp, n, bw,
                                                             utilization=u), repeat)
        best1, _ = timed(lambda: sm.compressed_scaling_factor("resnet50", comp, 8, one_n),
                         repeat)
        say(f"compressed_scaling_factor resnet50 {comp:11s}: {1e6 / best:10.3e}/s over "
            f"bw x n x u (10^6), {1e6 / best1:10.3e}/s over 10^6 line rates at n=8")


def main(argv=None):
    from _report import plain_parser

    args = plain_parser(__doc__, "results/bench_plan.txt").parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say(f"bench_plan on {os.cpu_count()} cores (one used), numpy {np.__version__}, load "
        f"average {load:.2f} at the start (other processes on the cores slow every figure)")
    plans("bert", 64)
    plans("resnet50", 8)
    fitted_plan()
    grids()
    if hasattr(os, "getloadavg"):
        say(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.no_write:
        return 0
    out = Path(__file__).resolve().parent / "results" / "bench_plan.txt"
    out.parent.mkdir(exist_ok=True)
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(out, "\n".join(LINES) + "\n")  # never half written


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_plan"))
