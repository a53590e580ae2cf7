"""Time ``fit_cluster`` on 10, 100, 1000 and 10^4 generated runs (issue 19, item 2).

Runs are generated on a known cluster (ceiling, per-iteration and per-collective costs,
compute slowdown) over three models, six worker counts and five line rates, each with a
little multiplicative noise; the fit chooses its parameters by itself. Prints the time of
each fit, the time per run and the fitted values, so that linear time (and "10^4 runs in
seconds") can be read off. No assertion: this is a measurement.

    python benchmarks/bench_fit.py [--sizes 10,100,1000,10000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import scalemodel as sm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import positive  # noqa: E402  (the option types the scripts share)

MODELS = ("resnet50", "bert", "vgg16")
NS = (2, 4, 8, 16, 32, 64)
BWS = (1e9, 10e9, 25e9, 40e9, 100e9)


def generated_runs(count, seed=0, noise=0.01):
    """``count`` runs measured on a known cluster, with log-normal noise."""
    truth = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8), ceiling=20e9,
                              sync_overhead=5e-3, collective_overhead=2e-4,
                              compute_slowdown=1.08, provenance={"source": "bench_fit"})
    rng = np.random.default_rng(seed)
    model = rng.choice(len(MODELS), count)
    n = np.asarray(NS)[rng.choice(len(NS), count)]
    bw = np.asarray(BWS)[rng.choice(len(BWS), count)]
    sf = np.empty(count)
    for m, name in enumerate(MODELS):
        sel = model == m
        if sel.any():
            sf[sel] = sm.scaling_factor(name, n[sel], bw[sel], fusion="ddp", cluster=truth)
    sf = np.minimum(1.0, sf * rng.lognormal(0.0, noise, count))
    return [{"model": MODELS[m], "n": int(k), "bw": float(b), "scaling_factor": float(s),
             "uncertainty": 0.02} for m, k, b, s in zip(model, n, bw, sf)]


def main(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    p.add_argument("--sizes", type=positive((int,)), default=[10, 100, 1000, 10000],
                   help="numbers of generated runs, comma-separated (default: "
                        "10,100,1000,10000)")
    p.add_argument("--repeat", type=positive(int), default=1,
                   help="fits per size; the best time is printed (default: 1)")
    args = p.parse_args(argv)
    print(f"{'runs':>7} {'fit [s]':>9} {'per run [ms]':>13}  fitted")
    for size in args.sizes:
        runs = generated_runs(size)
        best = float("inf")
        for _ in range(args.repeat):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                fit = sm.fit_cluster(runs, fusion="ddp", gpus_per_node=8)
                best = min(best, time.perf_counter() - t0)
        values = ", ".join(f"{k}={fit.parameters[k].value:.4g}" for k in fit.free)
        print(f"{size:>7} {best:>9.2f} {1e3 * best / size:>13.3f}  {values}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_fit"))
