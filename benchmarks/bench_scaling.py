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


def grid_speed(profile, fusion, repeat):
    """The 10^6-point grid in one call; returns (seconds per grid, the answers)."""
    bw, n, u, r = grid()
    size = np.broadcast(bw, n, u, r).size
    print(f"model {profile.name}, fusion {fusion}, ring all-reduce; grid of {size:,} "
          f"configurations (100 bandwidths x 10 worker counts x 25 utilizations x 40 ratios)")
    dt, sf = best_of(lambda: sm.scaling_factor(profile, n, bw, utilization=u, compression=r,
                                               fusion=fusion), repeat)
    print(f"closed form: {dt * 1e3:8.1f} ms per grid  -> {size / dt:12.3e} configurations/s")
    return dt, sf


def reference_check(profile, fusion, sf, grid_dt, des_samples):
    """The discrete-event reference on a sample of the grid: its speed and the largest
    difference from the closed form."""
    bw, n, u, r = grid()
    size = sf.size
    idx = np.random.default_rng(0).integers(0, size, des_samples)
    B, N, U, R = (np.broadcast_to(a, sf.shape).reshape(-1)[idx] for a in (bw, n, u, r))
    t0 = time.perf_counter()
    ref = np.array([profile.iteration_time / simulate_iteration(
        profile, int(nn), bb, utilization=uu, compression=rr, fusion=fusion)
        for bb, nn, uu, rr in zip(B, N, U, R)])
    des_dt = (time.perf_counter() - t0) / des_samples
    print(f"discrete-event reference: {des_dt * 1e3:8.3f} ms per configuration "
          f"-> {1 / des_dt:12.3e} configurations/s")
    print(f"speed-up: {size / grid_dt * des_dt:,.0f}x")
    diff = np.max(np.abs(sf.reshape(-1)[idx] / ref - 1))
    print(f"largest relative difference closed form vs reference on {des_samples} samples: "
          f"{diff:.2e}")


CLUSTER = sm.ClusterProfile(
    name="p3dn-like", topology=sm.Topology(gpus_per_node=8), ceiling=21e9,
    compute_slowdown=1.14, sync_overhead=0.022, collective_overhead=1e-4,
    provenance={"source": "benchmark"})
"""A fitted real cluster's settings: topology (8 GPUs per node), NCCL's choice, compute
slowdown, per-iteration fixed cost, a transport ceiling."""


def fitted_grid_speed(profile, fusion, repeat):
    """The same grid on :data:`CLUSTER`."""
    bw, _, u, r = grid()
    n8 = np.array([8, 16, 24, 32, 64, 128, 256, 512, 1024, 2048])[None, :, None, None]
    dt, _ = best_of(lambda: sm.scaling_factor(profile, n8, bw, utilization=u, compression=r,
                                              fusion=fusion, algorithm="nccl-2.4",
                                              cluster=CLUSTER), repeat)
    print(f"closed form on a fitted cluster (topology, NCCL 2.4 choice, slowdown, fixed "
          f"costs, ceiling): {dt * 1e3:8.1f} ms per grid -> "
          f"{np.broadcast(bw, n8, u, r).size / dt:12.3e} configurations/s")
    host = with_host()
    dt, _ = best_of(lambda: sm.scaling_factor(profile, n8, bw, utilization=u, compression=r,
                                              fusion="ddp", algorithm="nccl-2.4",
                                              cluster=host), repeat)
    print(f"the same with the wrapper's host costs (DDP buckets, eq. host-lead): "
          f"{dt * 1e3:8.1f} ms per grid -> "
          f"{np.broadcast(bw, n8, u, r).size / dt:12.3e} configurations/s")


def with_host():
    """:data:`CLUSTER` with the DDP wrapper's host costs measured on an H200
    (``calibration/results/h200/framework-repeat/resnet50-fp32.wrapper.json``, with their
    bootstrap intervals): eq. host-lead on every bucket, and an interval over the costs'
    ends and, for a profile without a host time, down to the GPU-bound end."""
    import attrs
    from scalemodel.calibrate.wrapper import load_host_costs
    path = (Path(__file__).resolve().parent.parent / "calibration" / "results" / "h200"
            / "framework-repeat" / "resnet50-fp32.wrapper.json")
    return attrs.evolve(CLUSTER, host=load_host_costs(path))


def with_alternatives():
    """:data:`CLUSTER` as a fit leaves it: intervals, and two explanations the runs cannot
    tell apart (a ceiling, or a per-collective cost); an answer carries the interval over
    both explanations' corners (scalemodel.intervals)."""
    import attrs
    return attrs.evolve(CLUSTER, intervals={
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


def generated_fit():
    """A real fit with six explanations: :func:`scalemodel.fit_cluster` on ten runs that
    ``benchmarks/bench_fit.py`` generates from a known cluster (DDP, ring)."""
    import warnings
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_fit import generated_runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster(generated_runs(10), gpus_per_node=8, fusion="ddp",
                              algorithm="ring").cluster


def generated_sharded_fit():
    """A real fit of sharded runs: :func:`scalemodel.fit_cluster` on four ZeRO-3 runs (bert
    and gpt2, 16 to 128 GPUs, FSDP's per-block wrapping) generated from a known cluster
    with 1 % log-normal noise; its corners each need their own ZeRO-3 schedule."""
    import warnings
    truth = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8, nics_per_node=4),
                              ceiling=80e9, sync_overhead=5e-3, bucket_overhead=2e-3,
                              compute_slowdown=1.05, provenance={"source": "bench_scaling"})
    rng = np.random.default_rng(0)
    runs = []
    for model, n, bw in (("bert", 16, 100e9), ("bert", 64, 25e9), ("gpt2", 32, 100e9),
                         ("gpt2", 128, 50e9)):
        sf = float(sm.scaling_factor(model, n, bw, sharding="zero3", fusion="block",
                                     cluster=truth)) * rng.lognormal(0.0, 0.01)
        runs.append(dict(model=model, n=n, bw=bw, scaling_factor=min(1.0, sf),
                         uncertainty=0.02, sharding="zero3"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster(runs, gpus_per_node=8, nics_per_node=4,
                              fusion="block").cluster


def solve_speed(fusion):
    """One question at a time, warm (the scenario cached by an earlier question) and first
    (every cache emptied by :func:`scalemodel.model.clear_caches`, the profile loaded)."""
    from scalemodel.model import clear_caches

    fitted, generated, sharded = with_alternatives(), generated_fit(), generated_sharded_fit()
    cases = (("resnet50", dict(fusion=fusion)), ("bert", {}),
             ("resnet50 on the fitted cluster",
              dict(fusion=fusion, algorithm="nccl-2.4", cluster=CLUSTER, target=0.7)),
             ("resnet50 on the fitted cluster, interval over 2 alternatives",
              dict(fusion=fusion, algorithm="nccl-2.4", cluster=fitted, target=0.7)),
             ("resnet50 on the fitted cluster with the wrapper's host costs (interval)",
              dict(fusion="ddp", algorithm="nccl-2.4", cluster=with_host(), target=0.7)),
             (f"resnet50 on a fit of 10 generated runs, interval over "
              f"{len(generated.alternatives)} alternatives",
              dict(n=64, fusion="ddp", algorithm="ring", cluster=generated, target=0.7)),
             (f"bert on a ZeRO-3 fit of 4 generated runs, interval over "
              f"{len(sharded.alternatives)} alternatives",
              dict(n=64, cluster=sharded, target=0.9)),
             ("llama-2-7b", {}))
    for name, kw in cases:
        model_name = name.split()[0]
        sm.min_compression(model_name, 10e9, **kw)  # load and cache the profile
        dt_solve, _ = best_of(lambda: sm.min_compression(model_name, 10e9, **kw), 20)
        dt_bw, _ = best_of(lambda: sm.required_bandwidth(
            model_name, **{k: v for k, v in kw.items()}), 20)

        def cold():
            clear_caches()
            return sm.min_compression(model_name, 10e9, **kw)

        def cold_time():
            clear_caches()
            return sm.iteration_time(model_name, kw.get("n", 64), 10e9, **{
                k: v for k, v in kw.items() if k not in ("n", "target")})

        dt_cold, _ = best_of(cold, 20)
        dt_time, _ = best_of(cold_time, 20)
        print(f"one solve, {name}: min_compression {dt_solve * 1e3:.3f} ms warm, "
              f"{dt_cold * 1e3:.3f} ms first; required_bandwidth {dt_bw * 1e3:.3f} ms warm; "
              f"iteration_time {dt_time * 1e3:.3f} ms first")


def main(argv=None, model="resnet50", fusion="horovod", repeat=5, des_samples=300):
    from _report import plain_parser

    args = plain_parser(__doc__, "results/bench_scaling.txt").parse_args(argv)
    import datetime
    import platform
    print(f"measured {datetime.date.today().isoformat()} on {platform.machine()} "
          f"({os.cpu_count()} cores; one thread), Python {platform.python_version()}, "
          f"numpy {np.__version__}, scalemodel {sm.__version__}")
    profile = sm.load_profile(model)
    dt, sf = grid_speed(profile, fusion, repeat)
    reference_check(profile, fusion, sf, dt, des_samples)
    fitted_grid_speed(profile, fusion, repeat)
    solve_speed(fusion)
    if args.no_write:
        return 0
    out = Path(__file__).resolve().parent / "results" / "bench_scaling.txt"
    out.parent.mkdir(exist_ok=True)
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(out, "\n".join(LINES) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_scaling"))
