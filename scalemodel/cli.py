"""Command line: ``scalemodel scaling | min-compression | required-bandwidth | iteration |
plan | breakeven | profiles | whatif``. Run ``scalemodel --help`` or
``scalemodel COMMAND --help``."""

from __future__ import annotations

import argparse
import json
import math
import sys

import attrs
import numpy as np

from . import __version__
from .exceptions import InvalidParameterError, ScalemodelError
from .model import iteration_time, scaling_factor
from .profiles import ALIASES, list_profiles, load_profile
from .solvers import DEFAULT_N, DEFAULT_TARGET, min_compression, required_bandwidth
from .units import format_bandwidth, parse_bandwidth
from .whatif import PAPER_BW, PAPER_N, PAPER_RATIOS, format_whatif_table, whatif_table

EPILOG = ("Bandwidth is per worker link in bits per second: 10e9, 10Gbps, '100 Gbit/s', or "
          "25GB/s (bytes per second). Built-in models: see `scalemodel profiles`.")


def _list(conv):
    def parse(text):
        return [conv(item) for item in text.split(",") if item.strip()]
    return parse


def _bw_list(text):
    # "1,10,100Gbps" -> the unit of the last item applies to bare numbers
    items = [t.strip() for t in text.split(",") if t.strip()]
    unit = "".join(ch for ch in items[-1] if ch.isalpha() or ch == "/") if items else ""
    out = []
    for item in items:
        has_unit = any(ch.isalpha() for ch in item.replace("e", "").replace("E", ""))
        out.append(parse_bandwidth(item if has_unit or not unit else item + unit, "--bw"))
    return out


def _target_options(p):
    """``--n`` and ``--target`` of the solver commands."""
    p.add_argument("--n", type=int, default=DEFAULT_N, help=f"workers (default {DEFAULT_N})")
    p.add_argument("--target", type=float, default=DEFAULT_TARGET,
                   help=f"scaling factor to reach (default {DEFAULT_TARGET})")


def _model_options(p, solver=False):
    p.add_argument("--model", required=True,
                   help="built-in profile name (e.g. resnet50, bert) or a profile JSON file")
    p.add_argument("--utilization", type=float, default=1.0,
                   help="fraction of the line rate achieved, in (0, 1] (default 1)")
    p.add_argument("--algorithm", default="ring",
                   help="ring, tree, halving-doubling, hierarchical, allgather, ps (default ring)")
    p.add_argument("--fusion", default="ddp", help="ddp, horovod or none (default ddp)")
    p.add_argument("--alpha", type=float, default=0.0,
                   help="per-message latency in seconds (default 0)")
    p.add_argument("--codec-cost", type=float, default=0.0,
                   help="encode+decode seconds per gradient byte when compressing (default 0)")
    p.add_argument("--gpus-per-node", type=int, default=8,
                   help="workers per node for --algorithm hierarchical (default 8)")
    p.add_argument("--intra-bw", default="2.4e12",
                   help="intra-node link rate for hierarchical (default 2.4e12 = 300 GB/s)")
    p.add_argument("--cluster", default=None,
                   help="calibrated cluster profile (JSON) supplying latency and achieved "
                        "bandwidth")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def _common(args):
    return dict(utilization=args.utilization, algorithm=args.algorithm, fusion=args.fusion,
                alpha=args.alpha, codec_cost=args.codec_cost, gpus_per_node=args.gpus_per_node,
                intra_bw=args.intra_bw, cluster=args.cluster)


def _jsonable(obj):
    if attrs.has(type(obj)):
        return {k: _jsonable(v) for k, v in attrs.asdict(obj, recurse=False).items()}
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _print_json(obj):
    print(json.dumps(_jsonable(obj), indent=2))


def cmd_scaling(args):
    rows = []
    for n in args.n:
        for bw in args.bw:
            for r in args.compression:
                sf = scaling_factor(args.model, n=n, bw=bw, compression=r, **_common(args))
                rows.append({"n": n, "bw": bw, "compression": r, "scaling_factor": sf})
    if args.json:
        return _print_json({"model": args.model, "results": rows})
    print(f"{'n':>6} {'bandwidth':>14} {'ratio':>7} {'scaling factor':>15}")
    for row in rows:
        print(f"{row['n']:>6d} {format_bandwidth(row['bw']):>14} {row['compression']:>7g} "
              f"{row['scaling_factor']:>15.4f}")


def _parts(parts):
    return ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in parts.items())


def cmd_min_compression(args):
    res = min_compression(args.model, args.bw, n=args.n, target=args.target, **_common(args))
    if args.json:
        return _print_json(res)
    ratio = "none possible" if not res.feasible else f"{res.ratio:.3g}x"
    print(f"minimum compression ratio: {ratio}")
    print(f"scaling factor reached:    {res.scaling_factor:.4f} (target {res.target:g}; "
          f"uncompressed {res.uncompressed_scaling_factor:.4f}; "
          f"limit {res.max_scaling_factor:.4f})")
    print(f"what binds:                {res.binding}"
          + (f" ({_parts(res.critical_parts)} on the critical path)" if res.critical_parts else
             " (communication is hidden behind backward)"))
    print(res.message)


def cmd_required_bandwidth(args):
    res = required_bandwidth(args.model, n=args.n, target=args.target,
                             compression=args.compression, **_common(args))
    if args.json:
        return _print_json(res)
    bw = "none is enough" if not res.feasible else format_bandwidth(res.bw)
    print(f"required bandwidth per worker: {bw}")
    print(f"scaling factor reached:        {res.scaling_factor:.4f} (target {res.target:g})")
    print(f"what binds:                    {res.binding}")
    print(res.message)


def cmd_iteration(args):
    res = iteration_time(args.model, n=args.n, bw=args.bw, compression=args.compression,
                         **_common(args))
    if args.json:
        return _print_json(res)
    for field in ("forward", "backward", "exposed_communication", "update", "total",
                  "communication"):
        print(f"{field:<24}{getattr(res, field) * 1e3:10.3f} ms")
    print(f"{'scaling factor':<24}{res.scaling_factor:10.4f}")
    print(f"{'messages':<24}{res.n_buckets:10d}")
    print(f"{'what binds':<24}{res.binding:>10}")


def _compressor_spec(text):
    """``name`` or ``name:setting`` (``powersgd:8``, ``topk:0.001``, ``int8:4``)."""
    from .compressors import get_compressor

    name, _, value = text.partition(":")
    comp = get_compressor(name)
    if not value:
        return comp
    if comp.knob is None:
        raise InvalidParameterError("--compressors", text,
                                    f"{comp.name} has no setting to give after ':'")
    try:
        v = int(value) if comp.knob_integer else float(value)
    except ValueError:
        raise InvalidParameterError("--compressors", text,
                                    f"the {comp.knob} after ':' must be a number") from None
    return comp.with_setting(v)


def _plan_kwargs(args):
    if args.codec_cost:
        raise InvalidParameterError(
            "--codec-cost", args.codec_cost, "plan and breakeven use each compressor's own "
            "encode/decode costs", "Measure them with python -m "
            "scalemodel.calibrate.codec_bench and pass --cluster")
    return dict(utilization=args.utilization, algorithm=args.algorithm, fusion=args.fusion,
                alpha=args.alpha, gpus_per_node=args.gpus_per_node, intra_bw=args.intra_bw,
                cluster=args.cluster)


def cmd_plan(args):
    from .planner import plan_compression

    comps = None if args.compressors is None else [_compressor_spec(c) for c in
                                                   args.compressors]
    plan = plan_compression(args.model, args.bw, n=args.n, target=args.target,
                            compressors=comps, **_plan_kwargs(args))
    if args.json:
        rows = []
        for r in plan.rows:
            row = {k: v for k, v in attrs.asdict(r, recurse=False).items()
                   if k not in ("config", "fusion")}
            row["snippet"] = r.snippet(args.framework)
            rows.append(row)
        data = {k: v for k, v in attrs.asdict(plan, recurse=False).items()
                if k not in ("rows", "best")}
        data["rows"] = rows
        data["best"] = None if plan.best is None else plan.best.compressor
        return _print_json(data)
    print(plan)
    print()
    print(plan.snippet(args.framework))


def cmd_breakeven(args):
    from .cluster import load_cluster
    from .planner import _codec_note, breakeven_bandwidth

    comps = [_compressor_spec(c) for c in args.compressors]
    kw = _plan_kwargs(args)
    rows = []
    for comp in comps:
        bws = breakeven_bandwidth(args.model, comp, n=np.asarray(args.n), **kw)
        rows.append({"compressor": comp.describe(), "n": args.n,
                     "breakeven_bw": [float(b) for b in np.atleast_1d(bws)]})
    cluster = load_cluster(kw["cluster"]) if kw["cluster"] is not None else None
    note = _codec_note(load_profile(args.model), cluster, comps)
    if args.json:
        return _print_json({"model": args.model, "results": rows, "codec_note": note})
    print("line rate below which each compressor beats no compression")
    print(f"{'compressor':<24}" + "".join(f"{'n=' + str(n):>16}" for n in args.n))
    for row in rows:
        cells = []
        for b in row["breakeven_bw"]:
            cells.append("never" if b == 0 else "always" if math.isinf(b)
                         else format_bandwidth(b))
        print(f"{row['compressor']:<24}" + "".join(f"{c:>16}" for c in cells))
    if note:
        print(note)


def cmd_profiles(args):
    rows = []
    for name in list_profiles():
        p = load_profile(name)
        rows.append({"name": name, "aliases": sorted(a for a, t in ALIASES.items() if t == name),
                     "tensors": int(p.tensor_bytes.size), "gradient_bytes": p.total_bytes,
                     "iteration_time": p.iteration_time, "batch_size": p.batch_size,
                     "device": p.device, "description": p.description,
                     "source": p.provenance.get("source", "")})
    if args.json:
        return _print_json(rows)
    w = max([len("name")] + [len(r["name"]) for r in rows]) + 1
    print(f"{'name':<{w}}{'tensors':>8}{'grad MB':>10}{'iter ms':>9}{'batch':>6}  device; aliases")
    for r in rows:
        alias = f"; aliases: {', '.join(r['aliases'])}" if r["aliases"] else ""
        print(f"{r['name']:<{w}}{r['tensors']:>8}{r['gradient_bytes'] / 1e6:>10.1f}"
              f"{r['iteration_time'] * 1e3:>9.1f}{r['batch_size']:>6}  {r['device']}{alias}")


def cmd_whatif(args):
    table = whatif_table()
    if args.json:
        return _print_json({"n": PAPER_N, "bw": PAPER_BW, "ratios": PAPER_RATIOS,
                            "axes": ["ratio", "n", "bw"], "scaling_factor": table})
    print(format_whatif_table(table))


def build_parser():
    parser = argparse.ArgumentParser(
        prog="scalemodel", epilog=EPILOG,
        description="How well will data-parallel training scale on this network, and how "
                    "much gradient compression would it need?")
    parser.add_argument("--version", action="version", version=f"scalemodel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("scaling", help="scaling factor for worker counts, bandwidths, ratios",
                       epilog=EPILOG)
    _model_options(p)
    p.add_argument("--n", type=_list(int), required=True, help="worker count(s), e.g. 16,32,64")
    p.add_argument("--bw", type=_bw_list, required=True, help="line rate(s), e.g. 1,10,100Gbps")
    p.add_argument("--compression", type=_list(float), default=[1.0],
                   help="compression ratio(s) >= 1 (default 1)")
    p.set_defaults(func=cmd_scaling)

    p = sub.add_parser("min-compression", help="smallest compression ratio reaching a target",
                       epilog=EPILOG)
    _model_options(p)
    p.add_argument("--bw", required=True, help="line rate, e.g. 10Gbps")
    _target_options(p)
    p.set_defaults(func=cmd_min_compression)

    p = sub.add_parser("required-bandwidth", help="smallest line rate reaching a target",
                       epilog=EPILOG)
    _model_options(p)
    _target_options(p)
    p.add_argument("--compression", type=float, default=1.0, help="compression ratio (default 1)")
    p.set_defaults(func=cmd_required_bandwidth)

    p = sub.add_parser("iteration", help="where one iteration's time goes", epilog=EPILOG)
    _model_options(p)
    p.add_argument("--n", type=int, required=True, help="workers")
    p.add_argument("--bw", required=True, help="line rate, e.g. 10Gbps")
    p.add_argument("--compression", type=float, default=1.0, help="compression ratio (default 1)")
    p.set_defaults(func=cmd_iteration)

    p = sub.add_parser("plan", help="which compressor, at what setting, and is it worth it",
                       epilog=EPILOG)
    _model_options(p)
    p.add_argument("--bw", required=True, help="line rate, e.g. 10Gbps")
    _target_options(p)
    p.add_argument("--compressors", type=_list(str), default=None,
                   help="compressors to compare, e.g. fp16,topk,powersgd (default: all)")
    p.add_argument("--framework", default="pytorch", choices=("pytorch", "horovod"),
                   help="framework of the settings snippet (default pytorch)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("breakeven", help="line rate below which a compressor beats none",
                       epilog=EPILOG)
    _model_options(p)
    p.add_argument("--n", type=_list(int), default=[DEFAULT_N],
                   help=f"worker count(s), e.g. 16,32,64 (default {DEFAULT_N})")
    p.add_argument("--compressors", type=_list(str),
                   default=["fp16", "int8", "signsgd", "topk", "powersgd"],
                   help="compressors with an optional setting, e.g. topk:0.001,powersgd:8 "
                        "(default fp16,int8,signsgd,topk,powersgd at their defaults)")
    p.set_defaults(func=cmd_breakeven)

    p = sub.add_parser("profiles", help="list the built-in workload profiles")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("whatif", help="the paper's what-if table (resnet50/101, vgg16)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_whatif)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except ScalemodelError as exc:
        print(f"scalemodel: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (``| head``) stopped reading: not an error of ours; silence the
        # interpreter's flush of the closed pipe at exit
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
