"""Speed of the questions on the built-in LLMs, plain and sharded.

For each built-in LLM and strategy: one ``min_compression`` call (64 GPUs, 8 per node,
100 Gbit/s), the whole call as a user makes it, at three temperatures:

* **first**: a question never asked before. Every cache of questions and arguments is
  emptied before each call (:func:`scalemodel.model.clear_caches`: the scenario, its
  schedule and envelope, the validated topology and options, the line rate read from
  text); only the loaded profile and what it is made of (its units by block, its DDP
  buckets) are kept. Loading a built-in LLM the first time takes 3-10 ms.
* **new n**: a question on a scenario asked before at another worker count (the
  schedule for this count is new; the scenario and its arguments are not).
* **warm**: the same question again (only the inverse and the result are computed).

Reported: the best of several repeats of the mean over a batch of calls, on one core.
Also the closed form against the discrete-event reference of ``tests/des_sharding.py``
on one configuration.

Run: ``python benchmarks/bench_sharding.py``; it also writes the figures to
``benchmarks/results/bench_sharding.txt``, which the guide quotes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import scalemodel as sm

MODELS = ("llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
          "mistral-7b")
STRATEGIES = ("none", "zero2", "zero3", "hybrid_shard")
NODE = dict(gpus_per_node=8, intra_bw=sm.get_gpu("h100-sxm").intra_node_bw)
LINES = []


def print(*args, **kw):  # noqa: A001 - also keep every line for the results file
    import builtins
    text = " ".join(str(a) for a in args)
    LINES.append(text)
    builtins.print(text, **kw)


def best_of(fn, calls=40, repeats=5):
    """Seconds per call: the best of ``repeats`` batches of ``calls`` [s]."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main(argv=None):
    from _report import plain_parser

    args = plain_parser(__doc__, "results/bench_sharding.txt").parse_args(argv)
    import datetime
    import os
    import platform

    from scalemodel.model import clear_caches

    print(f"measured {datetime.date.today().isoformat()} on {platform.machine()} "
          f"({os.cpu_count()} cores; one thread), Python {platform.python_version()}, "
          f"scalemodel {sm.__version__}")

    for m in MODELS:
        sm.load_profile(m)  # built once per process, then cached
    counts = iter(range(8, 10**6, 8))  # a worker count not asked before, every call
    for label in ("first", "new n", "warm"):
        print(f"min_compression, 64 GPUs (8 per node), 100 Gbit/s, {label} [ms per call]")
        print(f"{'model':<14}" + "".join(f"{s:>14}" for s in STRATEGIES))
        worst = 0.0
        for m in MODELS:
            cells = []
            for s in STRATEGIES:
                def call():
                    n = 64
                    if label == "first":
                        clear_caches()
                    elif label == "new n":
                        n = 64 + next(counts)
                    sm.min_compression(m, "100Gbps", n=n, sharding=s, **NODE)
                t = best_of(call)
                worst = max(worst, t)
                cells.append(f"{t * 1e3:>14.3f}")
            print(f"{m:<14}" + "".join(cells))
        print(f"slowest: {worst * 1e3:.3f} ms\n")

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from des_sharding import simulate_sharded

    p = sm.load_profile("llama-2-7b")
    t_closed = best_of(lambda: sm.scaling_factor(p, 64, 100e9, sharding="zero3", **NODE))
    t0 = time.perf_counter()
    t_des = simulate_sharded(p, 64, 100e9, strategy="zero3", wrap="block", fusion=None,
                             element_bytes=2, **NODE)
    des = time.perf_counter() - t0
    closed = sm.iteration_time(p, 64, 100e9, sharding="zero3", **NODE).total
    print(f"llama-2-7b zero3 on 64 GPUs: closed form {t_closed * 1e3:.3f} ms per call, "
          f"discrete-event reference {des * 1e3:.0f} ms; relative difference "
          f"{abs(closed / t_des - 1):.1e}")
    if args.no_write:
        return 0
    out = Path(__file__).resolve().parent / "results" / "bench_sharding.txt"
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(out, "\n".join(LINES) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_sharding"))
