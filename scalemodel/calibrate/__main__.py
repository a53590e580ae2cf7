"""``python -m scalemodel.calibrate``: calibrate scalemodel on a cluster, in one command.

Under torchrun, on every node::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29500 \\
        -m scalemodel.calibrate --model resnet50 --line-rate 100Gbps --out cluster.json

It runs three steps (``--steps``; all by default) and writes its files atomically on
rank 0:

1. ``compute``: every rank trains the model alone for a few iterations and records when
   each gradient is ready; rank 0's medians become the workload profile
   (``<out stem>.<model>.json``).
2. ``transport``: all-reduce, all-gather and send/recv over message sizes; fits of
   latency and achieved bandwidth become the cluster profile (``--out``).
3. ``scaling``: real DDP at the full world size, each iteration paired with a local one
   (``DDP.no_sync()``) for the single-worker time; the measured scaling factor, the
   calibrated model's prediction with its interval, and the error, side by side
   (``<out stem>.report.json``). The per-byte host overhead that makes the model match
   this run is fitted and stored in the cluster profile (``--fit-host-overhead``).

Without torchrun it runs as a single process (compute only). A second form reads
nccl-tests output instead of measuring::

    python -m scalemodel.calibrate from-nccl-tests all_reduce_perf.log \\
        --line-rate 100Gbps --out cluster.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

from ..exceptions import CalibrationError, ScalemodelError
from ..units import parse_bandwidth

STEPS = ("compute", "transport", "scaling")


def _log(msg):
    print(f"[scalemodel.calibrate] {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scalemodel.calibrate",
        description="Measure this cluster (run under torchrun), fit scalemodel's constants "
                    "and write a workload profile, a cluster profile and a report.",
        epilog="Then: scalemodel.scaling_factor('<profile>.json', n=64, bw=..., "
               "cluster='cluster.json'). Other form: python -m scalemodel.calibrate "
               "from-nccl-tests FILE --line-rate RATE --out cluster.json")
    p.add_argument("--model", default="resnet50",
                   help="torchvision name, built-in (mlp, convnet) or package.module:function")
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch [samples]")
    p.add_argument("--out", default="cluster.json", help="cluster profile to write")
    p.add_argument("--profile-out", help="workload profile to write "
                   "(default: <out stem>.<model>.json)")
    p.add_argument("--report-out", help="scaling report (default: <out stem>.report.json)")
    p.add_argument("--profile", help="use this workload profile instead of the compute step")
    p.add_argument("--cluster", help="use this cluster profile instead of the transport step")
    p.add_argument("--steps", default=",".join(STEPS),
                   help="comma-separated subset of compute,transport,scaling")
    p.add_argument("--line-rate", help="NIC line rate per worker, e.g. 100Gbps; needed for "
                   "the utilization and the prediction (default: the fitted bandwidth)")
    p.add_argument("--min-size", default="4KiB", help="smallest message [bytes]")
    p.add_argument("--max-size", default="256MiB", help="largest message [bytes]")
    p.add_argument("--collectives", default="all_reduce,all_gather,send_recv")
    p.add_argument("--repeats", type=int, default=10, help="timed repetitions per size")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations / repetitions")
    p.add_argument("--iterations", type=int, default=20, help="timed training iterations")
    p.add_argument("--algorithm", default="ring", help="all-reduce model for predictions")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket cap [MiB]")
    p.add_argument("--fit-host-overhead", action=argparse.BooleanOptionalAction, default=None,
                   help="fit how compute and communication share the host (overlap "
                   "efficiency, then a per-byte cost) from the DDP run (default: on CPUs)")
    p.add_argument("--amp", choices=("bf16", "fp16"), help="mixed precision: forward and "
                   "loss under torch.autocast with this dtype (gradients stay fp32)")
    p.add_argument("--threads", type=int, help="CPU threads per rank")
    p.add_argument("--pin-cpu", type=int, help="pin this rank to one CPU (index)")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="nccl (one GPU per rank, the default where CUDA is) or gloo (CPUs, "
                   "TCP)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds before a stuck collective fails [s]")
    p.add_argument("--name", help="cluster name (default: host name and backend)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _paths(args, model_name):
    out = Path(args.out)
    stem = out.with_suffix("")
    profile = Path(args.profile_out) if args.profile_out else Path(f"{stem}.{model_name}.json")
    report = Path(args.report_out) if args.report_out else Path(f"{stem}.report.json")
    return out, profile, report


def _init(args):
    import torch
    import torch.distributed as dist
    timeout = dt.timedelta(seconds=args.timeout)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", 0))
        gpus = torch.cuda.device_count()
        if local >= gpus:
            raise CalibrationError(
                f"backend nccl needs one GPU per rank, but this node has {gpus} GPU(s) and "
                f"this rank has LOCAL_RANK {local}: start at most {gpus} rank(s) per node "
                "(torchrun --nproc-per-node), or pass --backend gloo to calibrate the CPUs")
        torch.cuda.set_device(local)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, timeout=timeout)
    else:  # a single process: compute step only
        store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
    return dist, timeout


def _write_json(path, data):
    from ..profiles import atomic_write_text
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def run(args) -> int:
    import numpy as np

    from .. import scaling_factor
    from ..cluster import load_cluster, save_cluster
    from ..profiles import load_profile, save_profile

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        raise CalibrationError(f"--steps {args.steps!r}: unknown step(s) {bad}; use a "
                               f"comma-separated subset of {','.join(STEPS)}")
    if "scaling" in steps and "compute" not in steps and not args.profile:
        raise CalibrationError("the scaling step needs the compute step or --profile")
    if "scaling" in steps and "transport" not in steps and not args.cluster:
        raise CalibrationError("the scaling step needs the transport step or --cluster")
    line_rate = parse_bandwidth(args.line_rate) if args.line_rate else None
    dist, timeout = _init(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    # the compute step runs where the DDP step does: the rank's GPU under nccl, else the CPU
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    progress = not args.quiet and rank == 0
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    try:
        from .models import load_model
        model_name = args.model.partition(":")[2] or args.model
        out, profile_path, report_path = _paths(args, model_name)
        profile = compute = None
        if args.profile:
            profile = load_profile(args.profile)
            recorded = profile.provenance.get("model_spec")
            if recorded and recorded != args.model:
                raise CalibrationError(
                    f"--profile {args.profile} was recorded for model {recorded!r}, not "
                    f"{args.model!r}: pass --model {recorded} or measure this model (drop "
                    "--profile)")
        if "compute" in steps:
            from .compute import measure_compute
            if progress:
                _log(f"compute: {args.model}, batch {args.batch_size}, on all {world} ranks")
            compute = measure_compute(args.model, batch_size=args.batch_size,
                                      warmup=args.warmup, iterations=args.iterations,
                                      name=model_name, amp=args.amp, device=device,
                                      progress=None)
            medians = [None] * world
            dist.all_gather_object(medians, compute.spread()["median"])
            profile = compute.profile
            if rank == 0:
                prov = dict(profile.provenance, rank_iteration_medians=medians,
                            world_size=world)
                import attrs
                profile = attrs.evolve(profile, provenance=prov)
                save_profile(profile, profile_path)
                if progress:
                    _log(f"compute: {compute}")
                    _log(f"wrote workload profile {profile_path}")
                spread = max(medians) / min(medians)
                if spread > 1.1:
                    import warnings
                    from ..exceptions import CalibrationWarning
                    warnings.warn(f"ranks differ: their iteration medians span {spread:.2f}x "
                                  f"({min(medians) * 1e3:.1f} to {max(medians) * 1e3:.1f} ms); "
                                  "the slowest rank sets the pace", CalibrationWarning)
        cluster = load_cluster(args.cluster) if args.cluster else None
        if "transport" in steps:
            if world < 2:
                raise CalibrationError("the transport step needs at least 2 ranks: run under "
                                       "torchrun --nproc-per-node 2 (or more nodes)")
            from .transport import default_sizes, run_sweep
            colls = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
            sweep = run_sweep(default_sizes(args.min_size, args.max_size),
                              collectives=colls, warmup=args.warmup, repeats=args.repeats,
                              progress=progress, timeout=timeout)
            if rank == 0:
                cluster = _fit_cluster(args, sweep, line_rate, progress)
                save_cluster(cluster, out)
                if progress:
                    _log(f"wrote cluster profile {out}")
        if "scaling" in steps:
            if world < 2:
                raise CalibrationError("the scaling step needs at least 2 ranks: run under "
                                       "torchrun")
            from .scaling import measure_ddp
            if progress:
                _log(f"scaling: DDP on {world} ranks, bucket cap {args.bucket_cap_mb} MiB")
            ddp = measure_ddp(args.model, batch_size=args.batch_size, warmup=args.warmup,
                              iterations=args.iterations, bucket_cap_mb=args.bucket_cap_mb,
                              progress=progress, timeout=timeout, amp=args.amp)
            if rank == 0:
                if compute is not None:
                    # the compute step's shape, the speed of the paired local iterations
                    profile = _rescaled(profile, ddp.local_median)
                    save_profile(profile, profile_path)
                report = _report(args, profile, compute, cluster, ddp, world, line_rate)
                fitted_cluster = report.pop("_cluster")
                if fitted_cluster is not None:
                    save_cluster(fitted_cluster, out)
                _write_json(report_path, report)
                print(report["text"])
                if progress:
                    _log(f"wrote report {report_path}")
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def _fit_cluster(args, sweep, line_rate, progress):
    import socket

    from .fit import cluster_from_fits, fit_collective
    algorithms = {"all_reduce": args.algorithm, "all_gather": "allgather",
                  "send_recv": "p2p"}
    fits = {}
    for coll in sweep.seconds:
        fits[coll] = fit_collective(sweep.nbytes, sweep.seconds[coll], collective=coll,
                                    n=sweep.world_size, line_rate=line_rate,
                                    algorithm=algorithms.get(coll, args.algorithm))
        if progress:
            _log(f"fit {fits[coll]}")
    name = args.name or f"{socket.gethostname()}-{sweep.backend}"
    prov = {"source": "measured by python -m scalemodel.calibrate",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "backend": sweep.backend, "world_size": sweep.world_size, "device": sweep.device,
            "line_rate": line_rate, "host": socket.gethostname()}
    cluster = cluster_from_fits([fits["all_reduce"]], name=name, line_rate=line_rate,
                                provenance=prov)
    import attrs
    extra = dict(cluster.extra)
    extra["collective_fits"] = {k: f.to_dict() for k, f in fits.items()}
    extra["sweep"] = sweep.to_dict()
    return attrs.evolve(cluster, extra=extra)


def _rescaled(profile, iteration):
    """``profile`` with its compute times scaled to a total of ``iteration`` [s]."""
    import attrs
    f = iteration / profile.iteration_time
    prov = dict(profile.provenance, rescaled={
        "factor": f, "reason": "compute times scaled to the median of the scaling step's "
        "local iterations (DDP.no_sync, every rank computing), measured where the DDP "
        "iterations were; the shape is the compute step's"})
    return attrs.evolve(profile, tensor_ready=profile.tensor_ready * f,
                        forward_time=profile.forward_time * f,
                        backward_time=profile.backward_time * f,
                        update_time=profile.update_time * f, provenance=prov)


def _report(args, profile, compute, cluster, ddp, world, line_rate):
    import attrs
    import numpy as np

    from .. import scaling_factor
    from ..cluster import load_cluster
    cluster = load_cluster(cluster)
    bw = line_rate if line_rate is not None else cluster.extra.get("fitted_bandwidth")
    if bw is None:
        raise CalibrationError("no line rate: pass --line-rate")
    t1 = ddp.local_median  # paired with the DDP iterations (see measure_ddp)
    measured = ddp.scaling_factor
    kw = dict(algorithm=args.algorithm, fusion="ddp")
    fit_overhead = args.fit_host_overhead
    if fit_overhead is None:
        fit_overhead = ddp.backend == "gloo"
    report = {"model": args.model, "world_size": world, "line_rate": bw,
              "t1_median": t1, "tn_median": ddp.median, "tn_p10_p90": ddp.interval(),
              "t1_compute_step": (compute.spread()["median"] if compute is not None
                                  else None),
              "measured_scaling_factor": measured, "ddp": ddp.to_dict()}
    predicted = scaling_factor(profile, world, bw, cluster=cluster, **kw)
    report["predicted_scaling_factor"] = predicted
    lines = [f"scaling check: {args.model}, {world} workers, line rate {bw / 1e9:g} Gbit/s",
             f"  measured:  T1 {t1 * 1e3:.1f} ms, T{world} {ddp.median * 1e3:.1f} ms, "
             f"scaling factor {measured:.3f}",
             f"  predicted: scaling factor {predicted:.3f} (transport fit only), "
             f"error {predicted - measured:+.3f}"]
    try:
        from .uncertainty import scaling_factor_interval
        spread = (profile.provenance.get("spread") or {})
        ci = scaling_factor_interval(profile, world, bw, cluster=cluster,
                                     compute_interval=(spread.get("rel_lo", 1.0),
                                                       spread.get("rel_hi", 1.0)), **kw)
        report["predicted_interval"] = [ci.lo, ci.hi]
        lines[-1] += f", interval [{ci.lo:.3f}, {ci.hi:.3f}]"
    except ImportError:  # pragma: no cover
        pass
    report["overlap"] = report["host_overhead"] = None
    report["_cluster"] = None
    if fit_overhead:
        from .overhead import fit_host_overhead, fit_overlap
        o = fit_overlap(profile, world, bw, measured, cluster=cluster, **kw)
        report["overlap"] = {"overlap": o.overlap, "predicted_full": o.predicted_full,
                             "predicted_none": o.predicted_none, "clipped": o.clipped}
        fitted = {"model": args.model, "line_rate": bw, "world_size": world,
                  "measured_scaling_factor": measured}
        cluster = attrs.evolve(cluster, overlap=o.overlap,
                               extra=dict(cluster.extra, overlap_fit=dict(
                                   report["overlap"], fitted_from=fitted)))
        lines.append(f"  {o}")
        if o.clipped and measured < o.predicted_none:
            # slower than even no overlap: the rest is a per-byte host cost
            from ..collectives import ReductionCost
            h = fit_host_overhead(profile, world, bw, profile.iteration_time / measured,
                                  cluster=cluster, **kw)
            report["host_overhead"] = {"gamma": h.gamma}
            cluster = attrs.evolve(cluster, reduction=ReductionCost(gamma=h.gamma,
                                                                     name="host overhead"),
                                   extra=dict(cluster.extra, host_overhead={
                                       "gamma": h.gamma, "fitted_from": fitted}))
            lines.append(f"  and {h}")
        report["_cluster"] = cluster
        lines.append("  stored in the cluster profile, so predictions at other line rates "
                     "and for other models include it")
    report["text"] = "\n".join(lines)
    return report


def from_nccl_tests(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m scalemodel.calibrate from-nccl-tests",
                                description="Fit a cluster profile from nccl-tests output.")
    p.add_argument("files", nargs="+", help="stdout of all_reduce_perf (and friends)")
    p.add_argument("--line-rate", help="NIC line rate per GPU, e.g. 400Gbps")
    p.add_argument("--out", default="cluster.json")
    p.add_argument("--name", default="nccl-tests")
    args = p.parse_args(argv)
    from ..cluster import save_cluster
    from .fit import cluster_from_fits
    from .nccl_tests import read_nccl_tests
    line_rate = parse_bandwidth(args.line_rate) if args.line_rate else None
    fits = []
    for f in args.files:
        res = read_nccl_tests(Path(f))
        fit = res.fit(line_rate=line_rate)
        print(fit)
        fits.append(fit)
    ar = [f for f in fits if f.collective == "all_reduce"] or fits
    cluster = cluster_from_fits(ar, name=args.name, line_rate=line_rate,
                                provenance={"source": "nccl-tests output: " +
                                            ", ".join(args.files)})
    save_cluster(cluster, args.out)
    print(f"wrote {args.out}")
    return 0


def _format_warning(message, category, *args, **kwargs):
    return f"[scalemodel.calibrate] {category.__name__}: {message}\n"


def main(argv=None) -> int:
    import warnings
    warnings.formatwarning = _format_warning
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] == "from-nccl-tests":
            return from_nccl_tests(argv[1:])
        return run(build_parser().parse_args(argv))
    except (ScalemodelError, ValueError, TypeError) as exc:
        print(f"scalemodel.calibrate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("scalemodel.calibrate: interrupted; no file was half written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
