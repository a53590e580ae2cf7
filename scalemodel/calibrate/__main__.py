"""``python -m scalemodel.calibrate``: calibrate scalemodel on a cluster, in one command.

Under torchrun, on every node::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29500 \\
        -m scalemodel.calibrate --model resnet50 --line-rate 100Gbps --out cluster.json

It runs three steps (``--steps``; all by default). Everything is checked before anything
is measured (the options, the model, ``--profile`` and ``--cluster``, and that rank 0 can
write every output); the outputs are held in memory and written together at the end,
on rank 0, each atomically, so a run that fails or is stopped (SIGINT, or the SIGTERM
torchrun sends every rank when one fails) writes nothing and leaves no temporary file,
and each rank says why in one line:

1. ``compute``: every rank trains the model alone for a few iterations and records when
   each gradient is ready; rank 0's medians become the workload profile
   (``<out stem>.<model>.json``).
2. ``transport``: all-reduce, all-gather and send/recv over message sizes; fits of
   latency and achieved bandwidth become the cluster profile (``--out``). When the world
   spans nodes with several ranks each (torchrun's ``LOCAL_WORLD_SIZE`` > 1), every node
   also sweeps all-reduce among its own ranks, all nodes at once: that fit is the
   intra-node link, the cluster gets the topology (``gpus_per_node`` =
   ``LOCAL_WORLD_SIZE``, ``--nics-per-node``, the intra-node rate and latency), and the
   world's all-reduce is fitted with it (the latency of a step across nodes, the
   bandwidth of one NIC).
3. ``scaling``: real DDP at the full world size, each iteration paired with a local one
   (``DDP.no_sync()``) for the single-worker time. The backward spans of the two give
   the compute slowdown (stored in the cluster profile, 1 when not significantly above
   1); the overlap efficiency and the per-byte host overhead are fitted on top of it
   (``--fit-host-overhead``). The report (``<out stem>.report.json``) sets the measured
   scaling factor and iteration time beside the predictions of the transport fit alone
   and of the fully fitted cluster, and, as a check of generalization, of the cluster
   fitted on half of the iterations for the other half (and of a ``--cluster`` given
   with fitted terms, which were fitted elsewhere).
4. ``wrapper`` (only when ``--steps`` names it, in a single process): the model trained
   on this one worker plain and under DDP at each ``--bucket-caps`` size, in rounds;
   the line through the wrapped-minus-plain times against DDP's bucket count is the
   framework's work per iteration and per bucket
   (:mod:`scalemodel.calibrate.wrapper`), written with the runs that
   :func:`scalemodel.fit_cluster` takes for the same terms (``<out stem>.wrapper.json``,
   ``<out stem>.wrapper-runs.csv``, whose ``model`` is the workload profile).

Without torchrun it runs as a single process: the compute step, and a line saying it
skipped the other two, which need at least two ranks (asking for them with ``--steps``
is an error before anything is measured). A second form reads nccl-tests output
instead of measuring::

    python -m scalemodel.calibrate from-nccl-tests all_reduce_perf.log \\
        --line-rate 100Gbps --out cluster.json

With ``--gpus-per-node`` (or ``--nodes``) and two all-reduce logs, one inside a node and
one across nodes, it fits both as the transport step does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

from ..exceptions import CalibrationError, InvalidParameterError, ScalemodelError
from ..units import parse_bandwidth
from ._parser import OneLineParser
from .models import SPEC_HELP

STEPS = ("compute", "transport", "scaling")

OPTIONAL_STEPS = ("wrapper",)
"""Steps run only when ``--steps`` names them."""

MAX_TIMEOUT = 1e6
"""Largest ``--timeout`` accepted [s] (11.6 days)."""

NEEDS_RANKS = ("transport", "scaling")
"""Steps that need at least two ranks."""


def _log(msg):
    print(f"[scalemodel.calibrate] {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scalemodel.calibrate",
        description="Measure this cluster (run under torchrun), fit scalemodel's constants "
                    "and write a workload profile, a cluster profile and a report.",
        epilog="Then: scalemodel.scaling_factor('<profile>.json', n=64, bw=..., "
               "cluster='cluster.json'). Other forms: python -m scalemodel.calibrate "
               "from-nccl-tests FILE --line-rate RATE --out cluster.json (an nccl-tests "
               "log); python -m scalemodel.calibrate from-trace TRACE (a PyTorch profiler "
               "trace); each takes --help")
    p.add_argument("--model", default="resnet50",
                   help=f"what to train: {SPEC_HELP} (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch [samples] "
                   "(default: %(default)s)")
    p.add_argument("--out", default="cluster.json", help="cluster profile to write "
                   "(default: %(default)s)")
    p.add_argument("--profile-out", help="workload profile to write "
                   "(default: <out stem>.<model>.json)")
    p.add_argument("--report-out", help="scaling report (default: <out stem>.report.json)")
    p.add_argument("--profile", help="use this workload profile instead of the compute step")
    p.add_argument("--cluster", help="use this cluster profile instead of the transport step")
    p.add_argument("--steps", default=None,
                   help="comma-separated subset of compute,transport,scaling,wrapper "
                   "(default: the first three under torchrun; a single process runs "
                   "compute and says it skipped the others, which need at least 2 ranks; "
                   "wrapper, in a single process, measures DDP's own costs on one worker)")
    p.add_argument("--line-rate", help="line rate of one NIC, e.g. 100Gbps (with several "
                   "ranks per node, one of the node's --nics-per-node NICs); needed for "
                   "the utilization and the prediction (default: the fitted bandwidth)")
    p.add_argument("--nics-per-node", type=int, default=1, help="NICs per node, when the "
                   "world spans nodes with several ranks each (default: %(default)s)")
    p.add_argument("--min-size", default="4KiB", help="smallest message [bytes] "
                   "(default: %(default)s)")
    p.add_argument("--max-size", default="256MiB", help="largest message [bytes] "
                   "(default: %(default)s)")
    p.add_argument("--collectives", default="all_reduce,all_gather,send_recv",
                   help="the transport step's collectives, comma-separated; all_reduce is "
                        "required (the cluster profile is fitted to it) [-] "
                        "(default: %(default)s)")
    p.add_argument("--repeats", type=int, default=10, help="timed repetitions per size "
                   "(default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations / repetitions "
                   "(default: %(default)s)")
    p.add_argument("--iterations", type=int, default=20, help="timed training iterations "
                   "(default: %(default)s)")
    p.add_argument("--algorithm", default="ring", help="all-reduce model for predictions, "
                   "a scalemodel algorithm (ring, tree, hierarchical, nccl, nccl-2.4, ...) "
                   "(default: %(default)s)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket cap [MiB] "
                   "(default: %(default)s)")
    p.add_argument("--bucket-caps", default="0,1,5,25,100",
                   help="the wrapper step's DDP bucket caps, comma-separated (0: one bucket "
                   "per tensor) [MiB] (default: %(default)s)")
    p.add_argument("--wrapper", default=None, metavar="FILE",
                   help="the <stem>.wrapper.json of an earlier `--steps compute,wrapper` run "
                   "on one GPU of this cluster: the cluster written here carries its host "
                   "costs (the DDP wrapper's work per tensor and per bucket; "
                   "scalemodel.hostcosts), which the scaling step's check then includes "
                   "(default: none)")
    p.add_argument("--fit-host-overhead", action=argparse.BooleanOptionalAction, default=None,
                   help="fit how compute and communication share the host (overlap "
                   "efficiency, then a per-byte cost) from the DDP run (default: on CPUs)")
    p.add_argument("--amp", choices=("bf16", "fp16"), help="mixed precision: forward and "
                   "loss under torch.autocast with this dtype (gradients stay fp32)")
    p.add_argument("--threads", type=int, help="CPU threads per rank (default: "
                   "torch's)")
    p.add_argument("--pin-cpu", type=int, help="pin this rank to one CPU (index)")
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="nccl (one GPU per rank, the default where CUDA is) or gloo (CPUs, "
                   "TCP)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help=f"seconds before a stuck collective fails, in (0, {MAX_TIMEOUT:g}] "
                   "[s] (default: %(default)s)")
    p.add_argument("--name", help="cluster name (default: host name and backend)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--trace", help="also save a torch.profiler trace of the DDP step, one "
                   "file per rank (<stem>.rank<r>.json); read it with from-trace")
    return p


_WRITTEN: list = []  # the files this run has written, for the message on an interrupt


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
    try:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend, timeout=timeout)
        else:  # a single process: the compute step only
            store = dist.HashStore()
            dist.init_process_group(backend, store=store, rank=0, world_size=1,
                                    timeout=timeout)
    except (RuntimeError, ValueError) as exc:  # rendezvous timeout, bad MASTER_ADDR, ...
        from .transport import peer_failure
        raise peer_failure(f"joining the process group ({backend}, "
                           f"MASTER_ADDR={os.environ.get('MASTER_ADDR')}, "
                           f"MASTER_PORT={os.environ.get('MASTER_PORT')})", exc,
                           timeout) from exc
    return dist, timeout


def _check_args(args):
    """The steps to run; every number and name checked before anything is measured."""
    import math

    from ..exceptions import InvalidParameterError
    given = args.steps
    steps = [s.strip() for s in (given or ",".join(STEPS)).split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS + OPTIONAL_STEPS]
    if bad or not steps:
        raise CalibrationError(f"--steps {given!r}: unknown step(s) {bad}; use a "
                               "comma-separated subset of "
                               f"{','.join(STEPS + OPTIONAL_STEPS)}")
    if "wrapper" in steps:
        if "compute" not in steps and not args.profile:
            raise CalibrationError("the wrapper step needs the compute step or --profile "
                                   "(its runs name the workload profile)")
        from .wrapper import _check_caps
        args.bucket_caps_list = _check_caps(
            [c for c in str(args.bucket_caps).split(",") if c.strip()], "--bucket-caps")
    if "scaling" in steps and "compute" not in steps and not args.profile:
        raise CalibrationError("the scaling step needs the compute step or --profile")
    args.host_costs = None
    if args.wrapper is not None:  # read (and refused) before anything is measured
        if "transport" not in steps and "scaling" not in steps:
            raise CalibrationError("--wrapper goes with the transport or scaling step (it "
                                   "puts host costs in the cluster they write)")
        from .wrapper import load_host_costs
        args.host_costs = load_host_costs(args.wrapper, "--wrapper")
    if "scaling" in steps and "transport" not in steps and not args.cluster:
        raise CalibrationError("the scaling step needs the transport step or --cluster")
    t = args.timeout
    if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT):
        raise InvalidParameterError("--timeout", t, f"a number of seconds in (0, "
                                    f"{MAX_TIMEOUT:g}]", "For example --timeout 300")
    for option, value, least in (("--batch-size", args.batch_size, 1),
                                 ("--repeats", args.repeats, 3),
                                 ("--iterations", args.iterations, 3),
                                 ("--warmup", args.warmup, 1 if "scaling" in steps else 0),
                                 ("--threads", args.threads, 1),
                                 ("--nics-per-node", args.nics_per_node, 1),
                                 ("--pin-cpu", args.pin_cpu, 0)):
        if value is not None and value < least:
            raise InvalidParameterError(option, value, f"an integer >= {least}")
    if not (math.isfinite(args.bucket_cap_mb) and args.bucket_cap_mb > 0):
        raise InvalidParameterError("--bucket-cap-mb", args.bucket_cap_mb,
                                    "a finite number of MiB > 0")
    if args.pin_cpu is not None and hasattr(os, "sched_getaffinity") \
            and args.pin_cpu not in os.sched_getaffinity(0):
        raise InvalidParameterError("--pin-cpu", args.pin_cpu, "a CPU this process may run "
                                    f"on: {sorted(os.sched_getaffinity(0))}")
    if "transport" in steps:
        from .transport import COLLECTIVES, default_sizes, local_world_size
        local_world_size()  # LOCAL_WORLD_SIZE, when torchrun set it, is a count
        colls = [c.strip() for c in args.collectives.split(",") if c.strip()]
        unknown = [c for c in colls if c not in COLLECTIVES]
        if unknown or "all_reduce" not in colls:
            raise InvalidParameterError("--collectives", args.collectives,
                                        f"a comma-separated subset of {','.join(COLLECTIVES)} "
                                        "that includes all_reduce (the cluster profile's fit)")
        sizes = default_sizes(args.min_size, args.max_size)
        if sizes.size < 4:
            raise InvalidParameterError("--max-size", args.max_size,
                                        f"--min-size {args.min_size} to --max-size "
                                        f"{args.max_size} gives {sizes.size} message size(s); "
                                        "the fits need at least 4 (sizes double)")
    if "transport" in steps or "scaling" in steps:
        from ..collectives import resolve_algorithm
        resolve_algorithm(args.algorithm)
    if "compute" in steps or "scaling" in steps or "wrapper" in steps:
        from .models import check_model_spec
        check_model_spec(args.model)
    return steps


def _unwritable(path, option):
    """Why ``path`` (given as ``option``) cannot be written, or None when it can."""
    import tempfile

    from ..profiles import _ends_with_separator
    p = Path(path)
    if p.is_dir():
        return f"{option} {path} is a folder; name a file, e.g. {p / 'cluster.json'}"
    if _ends_with_separator(path):  # Path("new/") would drop the separator
        return (f"{option} {path} ends with a path separator but is no folder; name a "
                f"file, e.g. {p / 'cluster.json'}")
    if os.path.lexists(p) and not p.is_file():
        return f"{option} {path} exists and is not a regular file"
    ancestor = p.absolute().parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{option} {path}: {ancestor} is a file, not a folder"
    try:  # the only sure test (root ignores permission bits, not read-only mounts)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=ancestor)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"{option} {path}: cannot write in folder {ancestor} ({exc.strerror or exc})"
    return None


def _check_outputs(outputs):
    """The first reason why one of ``outputs`` ([(path, option)]) cannot be written."""
    seen = {}
    for path, option in outputs:
        key = os.path.realpath(path)
        if key in seen:
            return f"{option} and {seen[key]} name the same file {path}"
        seen[key] = option
        why = _unwritable(path, option)
        if why:
            return why
    return None


def _collective(what, fn, *args, timeout=None, **kwargs):
    """``fn(*args, **kwargs)``; a failure (a peer died, a timeout) as one CalibrationError."""
    from .transport import peer_failure
    try:
        return fn(*args, **kwargs)
    except CalibrationError:
        raise
    except RuntimeError as exc:  # DistBackendError, DistStoreError, gloo's errors
        raise peer_failure(what, exc, timeout) from exc


def _final_barrier(dist, timeout):
    _collective("the final barrier (every rank done measuring)", dist.barrier,
                timeout=timeout)


def run(args) -> int:
    from .. import profiles
    from ..cluster import load_cluster

    _WRITTEN.clear()
    steps = _check_args(args)
    line_rate = parse_bandwidth(args.line_rate, "--line-rate") if args.line_rate else None
    from .models import model_name as _model_name
    model_name = _model_name(args.model)
    out, profile_path, report_path = _paths(args, model_name)
    # inputs are read before anything is measured
    profile = load_profile_for(args) if args.profile else None
    cluster = load_cluster(args.cluster) if args.cluster else None
    if cluster is not None and args.host_costs is not None:
        import attrs
        cluster = attrs.evolve(cluster, host=args.host_costs)
    if ("scaling" in steps and line_rate is None and "transport" not in steps
            and cluster.extra.get("fitted_bandwidth") is None):
        raise CalibrationError(f"the scaling step needs a line rate for its prediction: pass "
                               f"--line-rate (the --cluster file {args.cluster} has no "
                               "fitted bandwidth)")
    dist, timeout = _init(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    skipped = []
    try:
        if world > 1 and "wrapper" in steps:
            raise CalibrationError(
                f"--steps wrapper measures one worker with and without DDP, and this world "
                f"has {world} ranks: run it as a single process (python -m "
                "scalemodel.calibrate --steps compute,wrapper), not under torchrun")
        if world < 2:
            need = [s for s in steps if s in NEEDS_RANKS]
            if need and args.steps is not None:
                raise CalibrationError(
                    f"--steps {','.join(need)} needs at least 2 ranks, and this is a single "
                    "process: run under torchrun --nproc-per-node 2 (or more nodes), or pass "
                    "--steps compute")
            skipped = need
            steps = [s for s in steps if s not in need]
        # --out as typed (its Path drops a final separator), checked even where only its
        # stem names the others
        outputs = [(args.out, "--out")]
        if "compute" in steps:
            outputs.append((profile_path, "--profile-out" if args.profile_out else
                            "the workload profile (--profile-out)"))
        if "wrapper" in steps:
            outputs += [(p, f"the wrapper step's output ({p.name})")
                        for p in _wrapper_paths(out)]
        if "scaling" in steps:
            outputs.append((report_path, "--report-out" if args.report_out else
                            "the report (--report-out)"))
            if args.trace:
                from .trace import rank_trace_path
                outputs.append((rank_trace_path(args.trace, 0), "--trace"))
        why = [_check_outputs(outputs) if rank == 0 else None]
        _collective("sharing the output check", dist.broadcast_object_list, why, src=0,
                    timeout=timeout)
        if why[0]:
            raise CalibrationError(f"{why[0]}; nothing was measured"
                                   + ("" if rank == 0 else " (checked on rank 0)"))
        staged = _measure(args, steps, dist, timeout, profile, cluster, line_rate,
                          model_name, out, profile_path, report_path)
        _final_barrier(dist, timeout)
        texts = {path: text for path, (_, text) in staged.items()}
        if texts:  # rank 0 its files, every rank its own trace (--trace)
            with profiles._signals_held():  # an interrupt now comes after the last rename
                profiles.atomic_write_files(texts)
                _WRITTEN.extend(str(p) for p in texts)
        if rank == 0:
            ran = ", ".join(steps)
            wrote = "; ".join(f"{label} {path}" for path, (label, _) in staged.items())
            msg = f"ran {ran}; wrote {wrote or 'nothing'}"
            if skipped:
                msg += (f"; skipped {', '.join(skipped)}: they need at least 2 ranks (run "
                        "under torchrun --nproc-per-node 2, or on more nodes)")
            _log(msg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def load_profile_for(args):
    """The ``--profile`` file, checked against ``--model``."""
    from ..profiles import load_profile
    profile = load_profile(args.profile)
    recorded = profile.provenance.get("model_spec")
    if recorded and recorded != args.model:
        raise CalibrationError(
            f"--profile {args.profile} was recorded for model {recorded!r}, not "
            f"{args.model!r}: pass --model {recorded} or measure this model (drop "
            "--profile)")
    return profile


def _measure(args, steps, dist, timeout, profile, cluster, line_rate, model_name, out,
             profile_path, report_path):
    """Run the steps; return the files to write, ``{path: (label, text)}`` (rank 0)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # the compute step runs where the DDP step does: the rank's GPU under nccl, else the CPU
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    progress = not args.quiet and rank == 0
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    staged = {}
    compute = None
    if "compute" in steps:
        compute, profile = _compute_step(args, dist, world, rank, timeout, model_name, device,
                                         progress, staged, profile_path)
    if "transport" in steps:
        cluster = _transport_step(args, world, rank, timeout, line_rate, progress, staged,
                                  out, cluster)
    if "scaling" in steps:
        _scaling_step(args, world, rank, timeout, profile, compute, cluster, line_rate,
                      progress, staged, out, profile_path, report_path)
    if "wrapper" in steps:
        _wrapper_step(args, device, progress, staged, out,
                      profile_path if "compute" in steps else Path(args.profile), line_rate)
    return staged


def _wrapper_paths(out):
    """The wrapper step's two files beside ``out``."""
    stem = Path(out).with_suffix("")
    return Path(f"{stem}.wrapper.json"), Path(f"{stem}.wrapper-runs.csv")


def _wrapper_step(args, device, progress, staged, out, profile_path, line_rate):
    """The wrapper step (a single process): stages the measurement with its fit, and the
    runs for :func:`scalemodel.fit_cluster` as CSV, ``model`` the profile's path relative
    to the CSV's folder."""
    import csv
    import io

    from .wrapper import measure_wrapper
    if progress:
        _log(f"wrapper: {args.model}, batch {args.batch_size}, plain and under DDP at "
             f"bucket_cap_mb {', '.join(f'{c:g}' for c in args.bucket_caps_list)}")
    meas = measure_wrapper(args.model, batch_size=args.batch_size,
                           bucket_caps=args.bucket_caps_list, warmup=max(args.warmup, 1),
                           iterations=args.iterations, device=device, amp=args.amp,
                           progress=progress)
    js, runs_csv = _wrapper_paths(out)
    _stage(staged, js, "wrapper measurement", meas.to_dict())
    model = os.path.relpath(os.path.abspath(profile_path),
                            os.path.dirname(os.path.abspath(runs_csv)))
    rows = meas.runs(model, bw=line_rate or 100e9)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    staged[runs_csv] = ("runs for fit_cluster", buf.getvalue())
    if progress:
        _log(f"wrapper: {meas}")
        _log(f"wrapper: give {js.name} to the multi-worker calibration (torchrun ... -m "
             f"scalemodel.calibrate --wrapper {js.name}) or to the fit of measured runs "
             f"(scalemodel fit RUNS.csv --wrapper {js.name}): the cluster then carries "
             "the wrapper's host costs")


def _stage(staged, path, label, obj):
    """Stage ``obj`` (a dict, or anything with ``to_dict``) as indented JSON for
    ``path``."""
    data = obj if isinstance(obj, dict) else obj.to_dict()
    staged[path] = (label, json.dumps(data, indent=1) + "\n")


def _compute_step(args, dist, world, rank, timeout, model_name, device, progress, staged,
                  profile_path):
    """The compute step on every rank: (the measurement, its workload profile); rank 0
    stages the profile with every rank's median and warns when they differ by > 10 %."""
    import attrs

    from .compute import measure_compute
    if progress:
        _log(f"compute: {args.model}, batch {args.batch_size}, on all {world} ranks")
    compute = measure_compute(args.model, batch_size=args.batch_size,
                              warmup=args.warmup, iterations=args.iterations,
                              name=model_name, amp=args.amp, device=device,
                              progress=None)
    medians = [None] * world
    _collective("gathering the compute medians (all_gather_object)",
                dist.all_gather_object, medians, compute.spread()["median"],
                timeout=timeout)
    profile = compute.profile
    if rank == 0:
        prov = dict(profile.provenance, rank_iteration_medians=medians,
                    world_size=world)
        profile = attrs.evolve(profile, provenance=prov)
        _stage(staged, profile_path, "workload profile", profile)
        if progress:
            _log(f"compute: {compute}")
        spread = max(medians) / min(medians)
        if spread > 1.1:
            import warnings
            from ..exceptions import CalibrationWarning
            warnings.warn(f"ranks differ: their iteration medians span {spread:.2f}x "
                          f"({min(medians) * 1e3:.1f} to {max(medians) * 1e3:.1f} ms); "
                          "the slowest rank sets the pace", CalibrationWarning)
    return compute, profile


def _transport_step(args, world, rank, timeout, line_rate, progress, staged, out, cluster):
    """The transport step: the sweep of the world and, when it spans nodes of several
    ranks, inside each node; rank 0 fits and stages the cluster (returned; the given
    ``cluster`` on the other ranks)."""
    from .transport import default_sizes, local_world_size, run_intra_node_sweep, run_sweep
    colls = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
    sizes = default_sizes(args.min_size, args.max_size)
    sweep = run_sweep(sizes, collectives=colls, warmup=args.warmup, repeats=args.repeats,
                      progress=progress, timeout=timeout)
    local = local_world_size()
    intra = None
    if 1 < local < world:  # the world spans nodes of several ranks each
        if progress:
            _log(f"transport: all-reduce inside each node ({local} ranks per node, "
                 "every node at once)")
        intra = run_intra_node_sweep(sizes, warmup=args.warmup, repeats=args.repeats,
                                     progress=progress, timeout=timeout)
        if intra is None and rank == 0:
            import warnings
            from ..exceptions import CalibrationWarning
            warnings.warn("the nodes hold different numbers of ranks: no intra-node "
                          "sweep, the cluster has no topology", CalibrationWarning)
    if rank == 0:
        cluster = _fit_cluster(args, sweep, line_rate, progress, intra=intra,
                               local=local)
        if args.host_costs is not None:  # --wrapper: measured on one GPU beforehand
            import attrs
            cluster = attrs.evolve(cluster, host=args.host_costs)
        _stage(staged, out, "cluster profile", cluster)
    return cluster


def _scaling_step(args, world, rank, timeout, profile, compute, cluster, line_rate,
                  progress, staged, out, profile_path, report_path):
    """The scaling step: a DDP run (every rank stages its --trace); rank 0 rescales the
    compute step's profile, makes the scaling check, stages and prints it."""
    from .scaling import measure_ddp
    if progress:
        _log(f"scaling: DDP on {world} ranks, bucket cap {args.bucket_cap_mb} MiB")
    ddp = measure_ddp(args.model, batch_size=args.batch_size, warmup=args.warmup,
                      iterations=args.iterations, bucket_cap_mb=args.bucket_cap_mb,
                      progress=progress, timeout=timeout, amp=args.amp,
                      trace=args.trace)
    if ddp.trace_text is not None:  # every rank writes its own, with the others
        from .trace import rank_trace_path
        staged[rank_trace_path(args.trace, rank)] = ("trace", ddp.trace_text)
    if rank == 0:
        # the profile's shape, the speed of the paired local iterations (a --profile
        # reused too: its compute may have drifted; only this run's own is written)
        profile = _rescaled(profile, ddp.local_median)
        if compute is not None:
            _stage(staged, profile_path, "workload profile", profile)
        report = _report(args, profile, compute, cluster, ddp, world, line_rate)
        fitted_cluster = report.pop("_cluster")
        if fitted_cluster is not None:
            _stage(staged, out, "cluster profile", fitted_cluster)
        _stage(staged, report_path, "report", report)
        print(report["text"], flush=True)


def _fit_cluster(args, sweep, line_rate, progress, intra=None, local=1):
    """The cluster profile from the world's sweep and, when the world spans nodes of
    several ranks, the intra-node sweep (its fit gives the topology, with which the
    world's all-reduce and all-gather are fitted)."""
    import socket

    from .fit import cluster_from_fits, fit_collective, intra_node_topology
    algorithms = {"all_reduce": args.algorithm, "all_gather": "allgather",
                  "send_recv": "p2p"}
    intra_fit = topology = None
    if intra is not None:
        intra_fit = fit_collective(intra.nbytes, intra.seconds["all_reduce"],
                                   collective="all_reduce", n=intra.world_size,
                                   algorithm="ring")
        topology = intra_node_topology(intra_fit, gpus_per_node=local,
                                       nics_per_node=args.nics_per_node)
        if progress:
            _log(f"fit intra-node {intra_fit} ({intra.groups} nodes at once, the slowest "
                 "per size)")
    fits = {}
    for coll in sweep.seconds:
        algorithm = algorithms.get(coll, args.algorithm)
        fits[coll] = fit_collective(sweep.nbytes, sweep.seconds[coll], collective=coll,
                                    n=sweep.world_size, line_rate=line_rate,
                                    algorithm=algorithm,
                                    topology=None if algorithm == "p2p" else topology)
        if progress:
            _log(f"fit {fits[coll]}")
    name = args.name or f"{socket.gethostname()}-{sweep.backend}"
    prov = {"source": "measured by python -m scalemodel.calibrate",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "backend": sweep.backend, "world_size": sweep.world_size, "device": sweep.device,
            "line_rate": line_rate, "host": socket.gethostname(), "local_world_size": local}
    if local == sweep.world_size > 1:
        prov["note"] = ("every rank is on one node: the fits describe the intra-node link, "
                        "no NIC was measured")
    cluster = cluster_from_fits([fits["all_reduce"]], name=name, line_rate=line_rate,
                                provenance=prov, intra=intra_fit)
    import attrs
    extra = dict(cluster.extra)
    extra["collective_fits"] = {k: f.to_dict() for k, f in fits.items()}
    extra["sweep"] = sweep.to_dict()
    if intra is not None:
        extra["intra_node_sweep"] = intra.to_dict()
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


def _median_uncertainty(meas) -> float:
    """Relative standard uncertainty of a DDP run's scaling factor, the ratio of two
    medians: each median's :math:`1.2533\\,s/\\sqrt{k}` of its iterations' log times
    (at least 0.1 %) [-]."""
    import numpy as np

    def rel(seconds):
        x = np.log(np.asarray(seconds, float))
        return 1.2533 * float(np.std(x, ddof=1)) / np.sqrt(x.size) if x.size > 1 else 0.0

    return max(1e-3, float(np.hypot(rel(meas.seconds), rel(meas.local_seconds))))


def _has_terms(cluster) -> bool:
    """Whether ``cluster`` carries terms fitted on top of its transport."""
    return (cluster.compute_slowdown != 1.0 or cluster.overlap != 1.0
            or cluster.collective_overhead != 0.0 or cluster.sync_overhead != 0.0
            or "host_overhead" in cluster.extra)


def _check_row(label, predicted, meas, fitted):
    """One row of the scaling check: predicted against measured scaling factor and
    iteration time (predicted from the measured single-worker time: T1 / S) [-], [s]."""
    s_meas = meas.scaling_factor
    tn_pred = meas.local_median / predicted
    return {"model": label, "fitted_to_these_iterations": bool(fitted),
            "iterations": int(meas.seconds.size),
            "predicted_scaling_factor": float(predicted),
            "measured_scaling_factor": float(s_meas),
            "scaling_factor_error": float(predicted - s_meas),
            "predicted_iteration_time": float(tn_pred),
            "measured_iteration_time": float(meas.median),
            "iteration_time_error": float(tn_pred / meas.median - 1.0)}


def _terms_label(fit):
    parts = [f"slowdown {fit.compute_slowdown:.3g}"]
    if fit.overlap is not None:
        parts.append(f"overlap {fit.cluster.overlap:.2f}")
    if fit.host is not None:
        parts.append(f"host {fit.host.gamma * 1e9:.3g} ns/B")
    return ", ".join(parts)


def _report(args, profile, compute, cluster, ddp, world, line_rate):
    """The scaling check of a DDP run: the transport fit alone, a --cluster fitted
    elsewhere, the terms fitted here, a held-out check; with the report's text."""
    from .. import scaling_factor
    from ..cluster import load_cluster
    from .overhead import transport_only
    from .uncertainty import scaling_factor_interval
    given = load_cluster(cluster)
    bw = line_rate if line_rate is not None else given.extra.get("fitted_bandwidth")
    if bw is None:
        raise CalibrationError("no line rate: pass --line-rate")
    kw = dict(algorithm=args.algorithm, fusion="ddp")
    fit_overhead = args.fit_host_overhead
    if fit_overhead is None:
        fit_overhead = ddp.backend == "gloo"
    slow = ddp.compute_slowdown()
    report = _report_measured(args, compute, ddp, world, bw, slow)
    spread = profile.provenance.get("spread") or {}
    c_iv = (spread.get("rel_lo", 1.0), spread.get("rel_hi", 1.0))
    transport = transport_only(given)
    predicted = scaling_factor(profile, world, bw, cluster=transport, **kw)
    ci = scaling_factor_interval(profile, world, bw, cluster=transport,
                                 compute_interval=c_iv, **kw)
    report["predicted_scaling_factor"] = predicted  # the transport fit alone
    report["predicted_interval"] = [ci.lo, ci.hi]
    checks = [_check_row("transport fit only", predicted, ddp, False)]
    if _has_terms(given):  # fitted elsewhere (another model, rate or run): generalization
        checks.append(_check_row("the given --cluster (fitted elsewhere)", scaling_factor(
            profile, world, bw, cluster=given, **kw), ddp, False))
    fitted_from = {"model": args.model, "line_rate": bw, "world_size": world}
    fit_args = (world, bw, given, fit_overhead, fitted_from, kw)
    terms = _fit_terms(profile, ddp, "all", *fit_args)
    full = terms.cluster
    s_full = scaling_factor(profile, world, bw, cluster=full, **kw)
    checks.append(_check_row(
        f"fitted here ({_terms_label(terms)})" if fit_overhead else
        f"slowdown measured here ({_terms_label(terms)}; overlap and host cost not "
        + ("fitted: --no-fit-host-overhead)" if args.fit_host_overhead is False else
           f"fitted on {ddp.backend}: --fit-host-overhead fits them)"), s_full, ddp, True))
    ci_full = scaling_factor_interval(profile, world, bw, cluster=full,
                                      compute_interval=c_iv, **kw)
    report["predicted_scaling_factor_fitted"] = s_full
    report["predicted_interval_fitted"] = [ci_full.lo, ci_full.hi]
    if ddp.seconds.size >= 6 and slow is not None:
        _held_out_check(profile, compute, ddp, fit_args, checks, report)
    report["checks"] = checks
    _report_terms(report, terms)
    # the cluster to write: the fitted one, unless a --cluster that was fitted elsewhere
    # is only being checked here (--no-fit-host-overhead)
    report["_cluster"] = full if (fit_overhead or not _has_terms(given)) else None
    report["text"] = _report_text(args, world, bw, ddp, predicted, ci, slow, checks, terms,
                                  report)
    return report


def _report_measured(args, compute, ddp, world, bw, slow):
    """The report's measured part: single- and n-worker medians, the measured scaling
    factor, the DDP run and the compute slowdown."""
    return {"model": args.model, "world_size": world, "line_rate": bw,
            "t1_median": ddp.local_median,  # paired with the DDP iterations (measure_ddp)
            "tn_median": ddp.median, "tn_p10_p90": ddp.interval(),
            "t1_compute_step": (compute.spread()["median"] if compute is not None
                                else None),
            "measured_scaling_factor": ddp.scaling_factor, "ddp": ddp.to_dict(),
            "compute_slowdown": None if slow is None else slow.to_dict()}


_SLOWDOWN_MAX = 100.0
"""Largest compute slowdown a cluster holds (``ClusterProfile.compute_slowdown``) [-]."""


def _fit_terms(prof, meas, iterations, world, bw, given, fit_overhead, fitted_from, kw):
    """Fit what the run shows on top of the transport (which fixes latency and
    bandwidth): slowdown, overlap, host overhead."""
    from .overhead import fit_with_transport
    est = meas.compute_slowdown()
    if est is not None and est.value > _SLOWDOWN_MAX:  # (a cluster refuses it below)
        raise CalibrationError(
            f"the DDP iterations computed {est.value:.3g} times slower than the local ones "
            f"(median of {est.iterations} paired iterations), beyond any slowdown the "
            f"model holds ({_SLOWDOWN_MAX:g}): the machine was busy, or the iterations too "
            "few to outvote a stall; rerun on an idle machine with more --iterations")
    return fit_with_transport(
        prof, world, bw, meas.scaling_factor, transport=given,
        compute_slowdown=1.0 if est is None else est.value,
        slowdown_interval=None if est is None else est.cluster_interval,
        uncertainty=_median_uncertainty(meas), fit_overhead=fit_overhead,
        fitted_from=dict(fitted_from, iterations=iterations), **kw)


def _held_out_check(profile, compute, ddp, fit_args, checks, report):
    """Generalization across iterations: fit on the even ones, check the odd ones (a
    row in ``checks``, or a note in ``report`` when the fit fails); ``fit_args`` are
    :func:`_fit_terms`'s after the iterations."""
    from .. import scaling_factor
    from ..exceptions import ScalemodelError
    world, bw, _given, _fit_overhead, _fitted_from, kw = fit_args
    even, odd = ddp.subset(slice(0, None, 2)), ddp.subset(slice(1, None, 2))

    def as_measured(meas):  # the profile's compute at these iterations' local speed
        return _rescaled(profile, meas.local_median)

    try:
        half = _fit_terms(as_measured(even), even, "even", *fit_args)
        s_odd = scaling_factor(as_measured(odd), world, bw, cluster=half.cluster, **kw)
        checks.append(_check_row(f"fitted on the {even.seconds.size} even iterations, "
                                 f"checked on the {odd.seconds.size} odd ones", s_odd,
                                 odd, False))
    except ScalemodelError as exc:
        report["held_out_note"] = f"the held-out check could not be fitted: {exc}"


def _report_terms(report, terms):
    """The fitted overlap and host overhead into the report (None when not fitted)."""
    report["overlap"] = report["host_overhead"] = None
    if terms.overlap is not None:
        o = terms.overlap
        report["overlap"] = {"overlap": o.overlap, "predicted_full": o.predicted_full,
                             "predicted_none": o.predicted_none, "clipped": o.clipped}
    if terms.host is not None:
        report["host_overhead"] = {"gamma": terms.host.gamma}


def _report_text(args, world, bw, ddp, predicted, ci, slow, checks, terms, report):
    """The scaling check as text: measured, predicted, one row per check, the terms."""
    t1, measured = ddp.local_median, ddp.scaling_factor
    lines = [f"scaling check: {args.model}, {world} workers, line rate {bw / 1e9:g} Gbit/s",
             f"  measured:  T1 {t1 * 1e3:.1f} ms, T{world} {ddp.median * 1e3:.1f} ms, "
             f"scaling factor {measured:.3f}",
             f"  predicted: scaling factor {predicted:.3f} (transport fit only), "
             f"error {predicted - measured:+.3f}, interval [{ci.lo:.3f}, {ci.hi:.3f}]"]
    if slow is not None:
        lines.append(f"  {slow}")
    width = max(len(r["model"]) for r in checks)
    lines.append(f"  {'model':<{width}}  scaling factor (error)  T{world} [ms] (error)")
    for r in checks:
        mark = "  <- fitted to these iterations" if r["fitted_to_these_iterations"] else ""
        lines.append(f"  {r['model']:<{width}}  {r['predicted_scaling_factor']:.3f} "
                     f"({r['scaling_factor_error']:+.3f}){'':7s}"
                     f"{r['predicted_iteration_time'] * 1e3:8.1f} "
                     f"({100 * r['iteration_time_error']:+.1f} %){mark}")
    if "held_out_note" in report:
        lines.append(f"  {report['held_out_note']}")
    lines.extend(f"  {line}" for line in terms.lines())
    if report["_cluster"] is not None:
        lines.append("  stored in the cluster profile, so predictions at other line rates "
                     "and for other models include it")
    else:
        lines.append("  the given --cluster is checked, not refitted (--no-fit-host-overhead)")
    return "\n".join(lines)


def from_nccl_tests(argv) -> int:
    p = OneLineParser(
        prog="python -m scalemodel.calibrate from-nccl-tests",
        description="Fit a cluster profile from nccl-tests output. With --gpus-per-node "
        "(or --nodes), an all-reduce log inside one node fits the intra-node link and a "
        "log across nodes is fitted with that topology, as the transport step does.")
    p.add_argument("files", nargs="+", help="stdout of all_reduce_perf (and friends)")
    p.add_argument("--line-rate", help="line rate of one NIC, e.g. 400Gbps")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node of the runs: a log "
                   "whose GPUs fit in one node is the intra-node link, one across nodes is "
                   "fitted with the topology")
    p.add_argument("--nodes", type=int, help="nodes of the largest run (its GPUs per node "
                   "are its world size over this), instead of --gpus-per-node")
    p.add_argument("--nics-per-node", type=int, default=1, help="NICs per node, with "
                   "--gpus-per-node or --nodes (default: %(default)s)")
    from .nccl_tests import _BINARIES
    p.add_argument("--collective", choices=sorted(set(_BINARIES.values())),
                   help="the collective the logs measured, when neither their text nor "
                   "their file names say it [-] (default: read from the log)")
    p.add_argument("--out", default=None,
                   help="cluster profile to write (default: cluster.json, where no file of "
                   "that name is: a calibration writes its own there)")
    p.add_argument("--name", default="nccl-tests")
    args = p.parse_args(argv)
    if args.out is None:
        if os.path.exists("cluster.json"):
            raise CalibrationError("cluster.json exists here (a calibration writes its "
                                   "cluster there): pass --out to name the output "
                                   "(--out cluster.json replaces it); nothing was read")
        args.out = "cluster.json"
    from ..cluster import save_cluster
    from ..exceptions import InvalidParameterError
    from .fit import COLLECTIVE_MODELS, cluster_from_fits
    from .nccl_tests import read_nccl_tests
    line_rate = parse_bandwidth(args.line_rate, "--line-rate") if args.line_rate else None
    for option, value in (("--gpus-per-node", args.gpus_per_node), ("--nodes", args.nodes),
                          ("--nics-per-node", args.nics_per_node)):
        if value is not None and value < 1:
            raise InvalidParameterError(option, value, "an integer >= 1")
    if args.gpus_per_node is not None and args.nodes is not None:
        raise InvalidParameterError("--nodes", args.nodes, "either --nodes or "
                                    "--gpus-per-node, not both")
    why = _check_outputs([(args.out, "--out")])
    for f in args.files:  # the log itself would be replaced by the cluster
        if not why and os.path.isfile(args.out) and os.path.isfile(f) and \
                os.path.samefile(args.out, f):
            why = f"--out {args.out} is the input log {f}: writing there would destroy it"
    if why:
        raise CalibrationError(f"{why}; nothing was read")
    results = [read_nccl_tests(Path(f), collective=args.collective) for f in args.files]
    topology, intra, intra_fit, notes = _nccl_tests_topology(results, args)
    if topology is not None:  # a log across nodes measured its own ranks per host
        from ..fit_transport import check_ranks_per_host
        check_ranks_per_host([(r, Path(f)) for r, f in zip(results, args.files)
                              if r.collective == "all_reduce"], topology.gpus_per_node,
                             "--nodes" if args.gpus_per_node is None else "--gpus-per-node",
                             nodes=args.nodes if args.gpus_per_node is None else None)
    fits = []
    for res in results:
        # one message or a chain has no topology to fit: those stay flat
        across = (topology is not None and res.world_size > topology.gpus_per_node
                  and COLLECTIVE_MODELS.get(res.collective) not in ("p2p", "chain"))
        if topology is not None and res is intra:
            continue
        fit = res.fit(line_rate=line_rate, topology=topology if across else None)
        print(fit)
        fits.append(fit)
    ar = [f for f in fits if f.collective == "all_reduce"] or fits
    if topology is not None:
        ar = [f for f in ar if f.topology is not None]
    if intra_fit is not None:
        print(f"intra-node: {intra_fit}")
    for note in notes:
        print(note)
    cluster = cluster_from_fits(ar, name=args.name, line_rate=line_rate, intra=intra_fit,
                                provenance={"source": "nccl-tests output: " +
                                            ", ".join(args.files)})
    try:
        save_cluster(cluster, args.out)
    except OSError as exc:  # a full disk, a read-only folder: the old file stays
        raise InvalidParameterError("--out", args.out, f"cannot be written "
                                    f"({exc.strerror or exc}); the file there, if any, "
                                    "is as it was") from None
    print(f"wrote {args.out}")
    return 0


def _nccl_tests_topology(results, args):
    """``(topology, intra-node result, its fit, notes)`` of nccl-tests results for
    ``--gpus-per-node`` / ``--nodes`` (``(None, None, None, [])`` without them)."""
    from ..exceptions import InvalidParameterError
    from .fit import intra_node_topology, unmeasured_intra_topology
    if args.gpus_per_node is None and args.nodes is None:
        return None, None, None, []
    reduce = [r for r in results if r.collective == "all_reduce"]
    if not reduce:
        raise CalibrationError("--gpus-per-node / --nodes: the topology is fitted from "
                               "all_reduce_perf logs, and none was given")
    g = args.gpus_per_node
    if g is None:
        largest = max(r.world_size for r in reduce)
        if largest % args.nodes:
            raise InvalidParameterError("--nodes", args.nodes, f"a divisor of the largest "
                                        f"all-reduce run's {largest} GPUs")
        g = largest // args.nodes
    across = [r for r in reduce if r.world_size > g]
    inside = [r for r in reduce if 1 < r.world_size <= g]
    if not across:
        raise CalibrationError(f"{g} GPUs per node: every all-reduce log runs inside one "
                               "node; give a log across nodes too, or leave out "
                               "--gpus-per-node / --nodes")
    notes = []
    intra = max(inside, key=lambda r: r.world_size) if inside else None
    intra_fit = None
    if intra is None:
        topology, note = unmeasured_intra_topology(
            [d for r in across for d in r.devices], gpus_per_node=g,
            nics_per_node=args.nics_per_node)
        notes.append(note)
    else:
        intra_fit = intra.fit()
        topology = intra_node_topology(intra_fit, gpus_per_node=g,
                                       nics_per_node=args.nics_per_node,
                                       devices=[d for r in reduce for d in r.devices])
        if len(inside) > 1:
            notes.append(f"{len(inside)} all-reduce logs inside one node: the intra-node "
                         f"link is fitted from {intra.source} ({intra.world_size} GPUs)")
    return topology, intra, intra_fit, notes


def _format_warning(message, category, *args, **kwargs):
    return f"[scalemodel.calibrate] {category.__name__}: {message}\n"


class Terminated(BaseException):
    """SIGTERM arrived (torchrun sends it to every rank when one fails)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _who() -> str:
    """`` (rank R of W)`` under torchrun, else nothing: every rank prints its own line."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    return f" (rank {rank} of {world})" if rank is not None and world not in (None, "1") \
        else ""


def _one_line(exc) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


_WRITTEN_AT = [0]  # profiles.WRITTEN's length when main() began: this run's writes after


def _outcome() -> str:
    from ..profiles import written_since  # (a signal held by an atomic write: after it)
    done = list(dict.fromkeys([*_WRITTEN, *written_since(_WRITTEN_AT[0])]))
    if done:
        return f"the files were written before it stopped: {', '.join(done)}"
    return "nothing was written"


def main(argv=None) -> int:
    import signal
    import warnings
    warnings.formatwarning = _format_warning
    argv = sys.argv[1:] if argv is None else list(argv)
    from ..profiles import WRITTEN
    _WRITTEN_AT[0] = len(WRITTEN)
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave SIGTERM alone
        pass
    try:
        if argv and argv[0] == "from-nccl-tests":
            return from_nccl_tests(argv[1:])
        if argv and argv[0] == "from-trace":
            from .trace import main as from_trace
            return from_trace(argv[1:])
        return run(build_parser().parse_args(argv))
    except (ScalemodelError, ValueError, TypeError, OSError) as exc:
        print(f"scalemodel.calibrate: error{_who()}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a torch error no step turned into a CalibrationError
        print(f"scalemodel.calibrate: error{_who()}: {type(exc).__name__}: "
              f"{_one_line(exc)[:300]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"scalemodel.calibrate: interrupted{_who()}; {_outcome()}", file=sys.stderr)
        return 130
    except Terminated:
        why = (" (torchrun stops every rank when one fails: see the first error)"
               if os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("RANK") else "")
        print(f"scalemodel.calibrate: stopped by SIGTERM{_who()}{why}; {_outcome()}",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _leave(code: int) -> None:
    """End the process with ``code`` without the interpreter's teardown.

    Every file is written (atomically) and the process group destroyed before ``main``
    returns; what is left is the interpreter's finalization, during which torch's C++
    threads (autograd, gloo) can still be joinable when their destructors run, and the
    process then aborts after its work is done ("terminate called without an active
    exception", SIGABRT). Seen twice: once in the emulated cluster's calibration (November
    2026, not reproduced then), and once in a fresh-clone CI run of
    ``calibration/record_gpu.sh`` on 2026-11-26, in a single-process compute step that
    had written its profile (not reproduced in 18 repeats of that command); the pattern
    of pytorch/pytorch#179291 and #190489. Standard output and error are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    os._exit(code)


if __name__ == "__main__":
    _leave(main())
