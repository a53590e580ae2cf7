"""Speed of the answers for the data-parallel dimension of TP x PP jobs (issue 20 item 10).

For a few jobs with ``tp=`` / ``pp=`` / ``microbatches=`` (one with activation
checkpointing and offload, one on a fitted cluster whose answers carry intervals), the
time of one question: *first* (every cache of questions
and arguments emptied by :func:`scalemodel.model.clear_caches`, the profile loaded, as
``bench_scaling.py`` counts it), *warm* (the scenario cached), and *cold profile* (also the
loaded and derived profiles forgotten: ``clear_caches(profiles=True)``, so the LLM's
profile is built again from its configuration). Best of 20 each; one thread. The target is
a first question within 1 ms for scaling_factor, iteration_time, min_compression,
required_bandwidth and sensitivities; the plan (a knob search per compressor) is shown
beside them. Run: ``python benchmarks/bench_parallel.py``; it writes
``benchmarks/results/bench_parallel.txt``.
"""

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one core

import scalemodel as sm  # noqa: E402
from scalemodel.model import clear_caches  # noqa: E402

NET = dict(gpus_per_node=8, nics_per_node=8)
JOBS = (
    ("llama-2-13b, 256 GPUs, tp=2", "llama-2-13b", 256, dict(tp=2)),
    ("llama-2-13b, 256 GPUs, tp=2 pp=4, 8 micro-batches", "llama-2-13b", 256,
     dict(tp=2, pp=4, microbatches=8)),
    ("llama-2-70b, 1024 GPUs, tp=8 pp=4, 32 micro-batches", "llama-2-70b", 1024,
     dict(tp=8, pp=4, microbatches=32)),
    ("llama-2-7b, 64 GPUs, tp=2, full checkpointing, optimizer offload", "llama-2-7b", 64,
     dict(tp=2, activation_checkpointing="full", offload="optimizer")),
)
BW = 100e9


def fitted_cluster():
    """A cluster fitted (slowdown and ceiling) to four TP x PP runs generated with a
    known one (as ``tests/test_parallel_cluster.py`` does): its answers carry intervals
    over the fit's corners."""
    import warnings

    truth = sm.ClusterProfile(compute_slowdown=1.08, ceiling=30e9,
                              provenance={"source": "bench_parallel"})
    runs = []
    for n, tp, pp, m, bw in ((16, 2, 1, None, 10e9), (64, 2, 1, None, 100e9),
                             (32, 2, 2, 8, 25e9), (64, 4, 1, None, 100e9)):
        t = sm.iteration_time("llama-2-13b", n, bw, cluster=truth, tp=tp, pp=pp,
                              microbatches=m, **NET).total
        runs.append(dict(model="llama-2-13b", n=n, bw=bw, iteration_time=t, tp=tp, pp=pp,
                         microbatches=m))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster(runs, fit=["compute_slowdown", "ceiling"], **NET).cluster


JOBS = JOBS + (
    ("llama-2-13b, 256 GPUs, tp=2 pp=4, 8 micro-batches, on a fitted cluster (interval)",
     "llama-2-13b", 256, dict(tp=2, pp=4, microbatches=8, cluster="fitted")),
)


def questions(model, n, kw):
    plan = not ({"activation_checkpointing", "offload"} & kw.keys())  # (not on the plan)
    kw = dict(NET, **kw)
    if kw.get("cluster") == "fitted":
        kw["cluster"] = fitted_cluster()
    out = {
        "scaling_factor": lambda: sm.scaling_factor(model, n, BW, **kw),
        "iteration_time": lambda: sm.iteration_time(model, n, BW, **kw),
        "min_compression": lambda: sm.min_compression(model, BW, n=n, **kw),
        "required_bandwidth": lambda: sm.required_bandwidth(model, n=n, **kw),
        "sensitivities": lambda: sm.sensitivities(model, n, BW, **kw),
    }
    if plan:
        out["plan_compression"] = lambda: sm.plan_compression(model, BW, n=n, **kw)
    return out


def best_of(fn, repeat, before=None):
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None, repeat=20):
    from _report import plain_parser

    args = plain_parser(__doc__, "results/bench_parallel.txt").parse_args(argv)
    import datetime
    import platform

    import numpy as np

    lines = [f"measured {datetime.date.today().isoformat()} on {platform.machine()} "
             f"({os.cpu_count()} cores; one thread), Python {platform.python_version()}, "
             f"numpy {np.__version__}, scalemodel {sm.__version__}; best of {repeat}; "
             f"{BW / 1e9:g} Gbit/s, 8 GPUs and 8 NICs per node",
             f"{'job / question':<44}{'first ms':>10}{'warm ms':>10}{'cold profile ms':>17}"]
    worst = 0.0
    for label, model, n, kw in JOBS:
        lines.append(label)
        for name, fn in questions(model, n, kw).items():
            fn()  # load the profile
            first = best_of(fn, repeat, clear_caches)
            warm = best_of(fn, repeat)
            cold = best_of(fn, max(3, repeat // 4), lambda: clear_caches(profiles=True))
            if name != "plan_compression":
                worst = max(worst, first)
            lines.append(f"  {name:<42}{first * 1e3:10.3f}{warm * 1e3:10.3f}"
                         f"{cold * 1e3:17.3f}")
    lines.append(f"slowest first question (plan aside): {worst * 1e3:.3f} ms "
                 f"({'within' if worst <= 1e-3 else 'over'} the 1 ms target)")
    for line in lines:
        print(line)
    if args.no_write:
        return 0
    out = Path(__file__).resolve().parent / "results" / "bench_parallel.txt"
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_parallel"))
