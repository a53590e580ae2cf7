"""Speed of the closed-form model against the discrete-event reference.

Prints configurations per second of ``scalemodel.scaling_factor`` over a 10^6-point grid
(bandwidth x workers x utilization x ratio) for resnet50, the discrete-event reference's
rate on a sample of the same grid, the speed-up, and the largest relative difference
between the two on that sample; then the same grid on a fitted real cluster, and single
solves (warm: the scenario cached from an earlier question; first: a question never asked,
every cache of questions and arguments emptied by :func:`scalemodel.model.clear_caches`,
the profile loaded). Run:
``python benchmarks/bench_scaling.py``; it also writes the figures to
``benchmarks/results/bench_scaling.txt``, which the README and the guide quote.
"""

import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one core

import numpy as np  # noqa: E402

import scalemodel as sm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from des_reference import simulate_iteration  # noqa: E402


def grid():
    bw = np.logspace(9, 11, 100)[:, None, None, None]
    n = np.array([2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])[None, :, None, None]
    u = np.linspace(0.1, 1.0, 25)[None, None, :, None]
    r = np.linspace(1.0, 100.0, 40)[None, None, None, :]
    return bw, n, u, r


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


LINES = []


def print(*args, **kw):  # noqa: A001 - also keep every line for the results file
    import builtins
    text = " ".join(str(a) for a in args)
    LINES.append(text)
    builtins.print(text, **kw)


def main(model="resnet50", fusion="horovod", repeat=5, des_samples=300):
    import datetime
    import platform
    print(f"measured {datetime.date.today().isoformat()} on {platform.machine()} "
          f"({os.cpu_count()} cores; one thread), Python {platform.python_version()}, "
          f"numpy {np.__version__}, scalemodel {sm.__version__}")
    bw, n, u, r = grid()
    size = np.broadcast(bw, n, u, r).size
    profile = sm.load_profile(model)
    print(f"model {model}, fusion {fusion}, ring all-reduce; grid of {size:,} configurations "
          f"(100 bandwidths x 10 worker counts x 25 utilizations x 40 ratios)")
    dt, sf = best_of(lambda: sm.scaling_factor(profile, n, bw, utilization=u, compression=r,
                                               fusion=fusion), repeat)
    rate = size / dt
    print(f"closed form: {dt * 1e3:8.1f} ms per grid  -> {rate:12.3e} configurations/s")

    rng = np.random.default_rng(0)
    idx = rng.integers(0, size, des_samples)
    B, N, U, R = (np.broadcast_to(a, sf.shape).reshape(-1)[idx] for a in (bw, n, u, r))
    t0 = time.perf_counter()
    ref = np.array([profile.iteration_time / simulate_iteration(
        profile, int(nn), bb, utilization=uu, compression=rr, fusion=fusion)
        for bb, nn, uu, rr in zip(B, N, U, R)])
    des_dt = (time.perf_counter() - t0) / des_samples
    print(f"discrete-event reference: {des_dt * 1e3:8.3f} ms per configuration "
          f"-> {1 / des_dt:12.3e} configurations/s")
    print(f"speed-up: {rate * des_dt:,.0f}x")
    diff = np.max(np.abs(sf.reshape(-1)[idx] / ref - 1))
    print(f"largest relative difference closed form vs reference on {des_samples} samples: "
          f"{diff:.2e}")

    # the same grid on a fitted real cluster: topology (8 GPUs per node), NCCL's choice,
    # compute slowdown, per-iteration fixed cost, a transport ceiling
    cluster = sm.ClusterProfile(
        name="p3dn-like", topology=sm.Topology(gpus_per_node=8), ceiling=21e9,
        compute_slowdown=1.14, sync_overhead=0.022, collective_overhead=1e-4,
        provenance={"source": "benchmark"})
    n8 = np.array([8, 16, 24, 32, 64, 128, 256, 512, 1024, 2048])[None, :, None, None]
    dt, _ = best_of(lambda: sm.scaling_factor(profile, n8, bw, utilization=u, compression=r,
                                              fusion=fusion, algorithm="nccl-2.4",
                                              cluster=cluster), repeat)
    print(f"closed form on a fitted cluster (topology, NCCL 2.4 choice, slowdown, fixed "
          f"costs, ceiling): {dt * 1e3:8.1f} ms per grid -> {size / dt:12.3e} "
          f"configurations/s")

    # one solve: a single question, everything included (profile cached)
    from scalemodel.model import clear_caches

    # the same cluster as a fit leaves it: intervals, and two explanations the runs cannot
    # tell apart (a ceiling, or a per-collective cost); the answer carries the interval
    # over both explanations' corners (scalemodel.intervals)
    import attrs
    fitted = attrs.evolve(cluster, intervals={
        "ceiling": (18e9, 23e9), "sync_overhead": (0.015, 0.028),
        "compute_slowdown": (1.1, 1.18)}, alternatives=[
        {"free": ["ceiling", "sync_overhead"], "values": {"ceiling": 21e9,
                                                          "sync_overhead": 0.022},
         "intervals": {"ceiling": [18e9, 23e9], "sync_overhead": [0.015, 0.028]},
         "score": 0.0},
        {"free": ["collective_overhead", "sync_overhead"],
         "values": {"collective_overhead": 8e-4, "sync_overhead": 0.015},
         "intervals": {"collective_overhead": [5e-4, 1e-3], "sync_overhead": [0.01, 0.02]},
         "score": 1.1}])
    for name, kw in (("resnet50", dict(fusion=fusion)), ("bert", {}),
                     ("resnet50 on the fitted cluster",
                      dict(fusion=fusion, algorithm="nccl-2.4", cluster=cluster,
                           target=0.7)),
                     ("resnet50 on the fitted cluster, interval over 2 alternatives",
                      dict(fusion=fusion, algorithm="nccl-2.4", cluster=fitted,
                           target=0.7)),
                     ("llama-2-7b", {})):
        model_name = name.split()[0]
        sm.min_compression(model_name, 10e9, **kw)  # load and cache the profile
        dt_solve, _ = best_of(lambda: sm.min_compression(model_name, 10e9, **kw), 20)
        dt_bw, _ = best_of(lambda: sm.required_bandwidth(
            model_name, **{k: v for k, v in kw.items()}), 20)

        def cold():
            clear_caches()
            return sm.min_compression(model_name, 10e9, **kw)

        dt_cold, _ = best_of(cold, 20)
        print(f"one solve, {name}: min_compression {dt_solve * 1e3:.3f} ms warm, "
              f"{dt_cold * 1e3:.3f} ms first; required_bandwidth {dt_bw * 1e3:.3f} ms warm")
    out = Path(__file__).resolve().parent / "results" / "bench_scaling.txt"
    out.parent.mkdir(exist_ok=True)
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(out, "\n".join(LINES) + "\n")


if __name__ == "__main__":
    main()
