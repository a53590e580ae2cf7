#!/usr/bin/env python3
"""The proof that the model works: calibrate once on an emulated cluster, predict the rest.

Builds a small cluster on this Linux machine (network namespaces joined by veth pairs
and a bridge, every link rate-limited with ``tc``; see
:class:`scalemodel.calibrate.netem.EmulatedCluster`), then:

1. calibrates at ONE setting: the transport microbenchmark at ``--calibrate-rate``, then
   the calibration model's compute profile and one real DDP run there (which also fits
   the per-byte host overhead: on this machine compute and communication share the
   cores);
2. for every model and every link rate, runs real DDP training with gloo across the
   workers (``python -m scalemodel.calibrate --steps compute,scaling``) and records the
   measured scaling factor (single-worker iteration time measured in the same run, on
   the same loaded machine, divided by the DDP iteration time);
3. predicts every setting from the calibration alone (the cluster profile, and each
   model's compute profile measured at the calibration rate) and prints predicted
   against measured with the errors.

Needs root, ``ip`` and ``tc``, and torch. Run from the repository root::

    sudo .venv/bin/python calibration/emulated_cluster.py --out docs/_static/emulated

It takes about ten minutes with the defaults; ``--quick`` is a two-rate smoke run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

import scalemodel as sm
from scalemodel.calibrate.netem import EmulatedCluster, netns_available
from scalemodel.profiles import atomic_write_text


def log(msg):
    print(f"[emulated] {msg}", file=sys.stderr, flush=True)


def run_ranks(cluster, args_common, port, workdir, timeout, quiet=True, pin_cpus=True):
    """Run ``python -m scalemodel.calibrate ARGS`` on every host; return rank 0's stdout."""
    procs = []
    for r in range(cluster.hosts):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(cluster.hosts), LOCAL_RANK="0",
                   LOCAL_WORLD_SIZE="1", MASTER_ADDR=cluster.addresses[0],
                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=f"{cluster.prefix}h{r}",
                   OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        pin = ["--pin-cpu", str(r % os.cpu_count())] if pin_cpus else []
        cmd = cluster.command(r, [sys.executable, "-m", "scalemodel.calibrate", *args_common,
                                  "--backend", "gloo", "--threads", "1",
                                  "--timeout", str(timeout), *pin]
                              + (["--quiet"] if quiet else []))
        procs.append(subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout * 3)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"rank {r} did not finish in {timeout * 3} s")
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError(crash_line(r, p.returncode, err, workdir, p.args))
        outs.append(out)
    return outs[0]


def crash_line(rank, code, err, workdir, cmd=()):
    """One line for a rank that failed: how it ended, its last words, where its whole
    output (after its command line) is, and what to do."""
    log_file = Path(workdir) / f"rank{rank}.stderr"
    log_file.write_text("$ " + " ".join(map(str, cmd)) + "\n" + err)
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
        if code == -signal.SIGABRT:
            how += " (a C++ abort inside torch/gloo)"
    else:
        how = f"exited with status {code}"
    lines = [ln.strip() for ln in err.splitlines()
             if ln.strip() and "hostname of the client socket" not in ln]
    last = lines[-1][:200] if lines else "no output"
    return (f"rank {rank} {how}: {last!r}; whole output in {log_file}. What to do: rerun "
            "(a crash at teardown is a race in the distributed backend); if it repeats at "
            "the same step, run that step alone with the command in the log")


def arguments(argv):
    """The command line's flags (unchanged: the tests and the docs use them)."""
    ap = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    ap.add_argument("--models", default="mlp:128,convnet:64",
                    help="comma-separated MODEL:BATCH, MODEL a built-in name (mlp, convnet) "
                    "or package.module:function (e.g. scalemodel.calibrate.models:mlp:64; "
                    "named after the function); BATCH per worker [samples]")
    ap.add_argument("--rates", default="100,200,500,1000,2000", help="link rates [Mbit/s]")
    ap.add_argument("--calibrate-rate", type=float, default=1000.0,
                    help="the one setting calibrated at [Mbit/s]; where communication can "
                    "hide behind backward, so the overlap efficiency is well determined")
    ap.add_argument("--calibrate-model", help="model whose DDP run fits the host overhead, "
                    "as given in --models or by its name (default: the first)")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--prefix", default="smc", help="namespace name prefix (two runs at "
                    "once need different prefixes and subnets)")
    ap.add_argument("--subnet", default="10.77.0", help="first three octets of the hosts' /24")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--min-size", default="2MiB", help="smallest message of the sweep; "
                    "smaller ones ride the token bucket's burst and look faster than the "
                    "link")
    ap.add_argument("--max-size", default="32MiB", help="largest message of the sweep")
    ap.add_argument("--out", default="emulated", help="output folder (JSON and a table)")
    ap.add_argument("--quick", action="store_true", help="two rates, few iterations")
    ap.add_argument("--timeout", type=float, default=120.0, help="per collective [s]")
    return ap.parse_args(argv)


def _rate(text, option):
    """A link rate in Mbit/s: finite and > 0 (ValueError naming ``option``)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{option}: {text!r} is not a number (Mbit/s)") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{option}: {text!r} must be a rate > 0 (Mbit/s)")
    return value


def check_options(args):
    """Every option checked before the namespaces are probed (that needs root) or the
    machine's lock is taken; a ValueError names the option and the value."""
    rates = [_rate(r, "--rates") for r in args.rates.split(",") if r.strip()]
    if not rates:
        raise ValueError(f"--rates: {args.rates!r} names no rate")
    _rate(str(args.calibrate_rate), "--calibrate-rate")
    if not 1 <= args.hosts <= 200:
        raise ValueError(f"--hosts: {args.hosts} must be from 1 to 200")
    if args.iterations < 1:
        raise ValueError(f"--iterations: {args.iterations} must be >= 1")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout: {args.timeout} must be a time > 0 [s]")
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out: {args.out!r} exists and is not a folder (it is the output "
                         "folder: JSON and a table)")


def take_turns():
    """Two emulations at once would measure each other: hold the machine's lock (waiting
    for another run to finish); closing the returned file releases it."""
    lock = open(os.path.join(tempfile.gettempdir(), "scalemodel-emulated.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log("another emulated cluster runs on this machine; waiting for it to finish")
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


class _Ports:
    """A fresh rendezvous port for each torchrun (after a per-process base)."""

    def __init__(self):
        self.port = 29600 + (os.getpid() % 50) * 40

    def next(self):
        self.port += 1
        return self.port


def calibrate(cl, args, models, cal_model, r0, iters, work, ports):
    """Step 1: the transport sweep and each model's compute profile and DDP run at the
    one calibration rate ``r0``; returns (the calibrated cluster, the profiles)."""
    log(f"calibrating: transport sweep at {r0 / 1e6:g} Mbit/s")
    run_ranks(cl, ["--steps", "transport", "--line-rate", str(r0),
                   "--out", str(work / "transport.json"), "--max-size", args.max_size,
                   "--min-size", args.min_size, "--collectives", "all_reduce,send_recv",
                   "--repeats", "5", "--warmup", "2"], ports.next(), work, args.timeout)
    profiles = {}
    for spec, model, batch in models:
        log(f"calibrating: {model} compute profile and DDP at {r0 / 1e6:g} Mbit/s")
        fit = ["--fit-host-overhead"] if model == cal_model else ["--no-fit-host-overhead"]
        files = calibration_files(work, model)
        text = run_ranks(cl, ["--steps", "compute,scaling", "--model", spec,
                              "--batch-size", str(batch), "--line-rate", str(r0),
                              "--cluster", str(work / "transport.json"),
                              "--out", str(files["cluster"]),
                              "--profile-out", str(files["profile"]),
                              "--iterations", str(iters), *fit], ports.next(), work,
                         args.timeout)
        profiles[model] = sm.load_profile(files["profile"])
        log(text.strip())
    return sm.load_cluster(calibration_files(work, cal_model)["cluster"]), profiles


def measure(cl, args, models, rates, r0, cal_model, iters, work, ports, calibrated,
            profiles, started):
    """Steps 2 and 3: measure every model at every rate and predict each from the
    calibration alone (and from the transport alone); returns the records."""
    records = []
    transport = sm.load_cluster(work / "transport.json")
    for rate in rates:
        cl.set_rate(rate)
        for spec, model, batch in models:
            log(f"measuring {model} at {rate / 1e6:g} Mbit/s "
                f"({time.time() - started:.0f} s so far)")
            name = f"run-{model}-{rate / 1e6:g}"
            run_ranks(cl, ["--steps", "compute,scaling", "--model", spec,
                           "--batch-size", str(batch), "--line-rate", str(rate),
                           "--cluster", str(work / "transport.json"),
                           "--out", str(work / f"{name}.json"), "--iterations", str(iters),
                           "--no-fit-host-overhead"], ports.next(), work, args.timeout)
            rep = json.loads((work / f"{name}.report.json").read_text())
            prof = profiles[model]
            pred = sm.scaling_factor(prof, args.hosts, rate, cluster=calibrated, fusion="ddp")
            pred_net = sm.scaling_factor(prof, args.hosts, rate, cluster=transport,
                                         fusion="ddp")
            records.append({
                "model": model, "model_spec": spec, "batch_size": batch, "line_rate": rate,
                "calibration_point": bool(rate == r0 and model == cal_model),
                "measured": rep["measured_scaling_factor"], "predicted": pred,
                "predicted_transport_only": pred_net,
                "predicted_full_overlap": sm.scaling_factor(
                    prof, args.hosts, rate, fusion="ddp",
                    cluster=attrs.evolve(calibrated, overlap=1.0)),
                "t1": rep["t1_median"], "tn": rep["tn_median"],
                "tn_p10_p90": rep["tn_p10_p90"]})
            log(f"  measured {records[-1]['measured']:.3f} predicted {pred:.3f} "
                f"(transport only {pred_net:.3f})")
    return records


def main(argv=None):
    args = arguments(argv)
    try:
        models = parse_models(args.models)
        cal_model = calibration_model(models, args.calibrate_model)
        check_options(args)
    except ValueError as exc:
        print(f"emulated_cluster: error: {exc}", file=sys.stderr)
        return 2
    ok, why = netns_available()
    if not ok:
        print(f"emulated cluster not available here: {why}", file=sys.stderr)
        return 2
    lock = take_turns()
    try:
        return _run(args, models, cal_model)
    finally:
        lock.close()


def _run(args, models, cal_model):
    """The calibration, measurements and predictions, and the files they write."""
    rates = [float(r) * 1e6 for r in args.rates.split(",")]
    iters = args.iterations
    if args.quick:
        rates, iters = [rates[0], rates[-1]], 5
    r0 = args.calibrate_rate * 1e6
    if r0 not in rates:
        rates = sorted(rates + [r0])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scalemodel-emulated-"))
    ports, started = _Ports(), time.time()
    with EmulatedCluster(args.hosts, r0, prefix=args.prefix, subnet=args.subnet) as cl:
        calibrated, profiles = calibrate(cl, args, models, cal_model, r0, iters, work, ports)
        sm.save_cluster(calibrated, out / "cluster.json")
        for _, model, _ in models:
            sm.save_profile(profiles[model], out / f"{model}.json")
        records = measure(cl, args, models, rates, r0, cal_model, iters, work, ports,
                          calibrated, profiles, started)
    table = summarize(records, calibrated, r0, cal_model)
    print(table)
    result = {"records": records, "calibration": {"rate": r0, "model": cal_model,
                                                  "cluster": calibrated.to_dict()},
              "iterations": iters, "hosts": args.hosts, "elapsed_s": time.time() - started,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{os.cpu_count()} CPUs, {os.uname().machine}"}
    atomic_write_text(out / "emulated.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out / "emulated.txt", table + "\n")
    return 0


def parse_models(text):
    """``--models``: ``[(spec, name, batch)]``; ``name`` (the built-in name, or the
    function's for ``package.module:function``) names the profile and the files.

    >>> parse_models("mlp:128,scalemodel.calibrate.models:convnet:64")
    [('mlp', 'mlp', 128), ('scalemodel.calibrate.models:convnet', 'convnet', 64)]
    """
    from scalemodel.calibrate.models import model_name
    out = []
    for item in (m.strip() for m in text.split(",")):
        spec, sep, batch = item.rpartition(":")
        if not sep or not spec or spec.endswith(":") or spec.count(":") > 1 \
                or not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"--models {text!r}: {item!r} is not MODEL:BATCH (a built-in "
                             "name or package.module:function, then the batch per worker, "
                             "an integer >= 1)")
        out.append((spec, model_name(spec), int(batch)))
    names = [name for _, name, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--models {text!r}: two models would be named {dup[0]!r} (profiles "
                         "are named after the function); give each model once")
    return out


def calibration_model(models, wanted):
    """The name of the model whose DDP run fits the host overhead (``--calibrate-model``,
    as a spec or a name; the first model by default)."""
    if not wanted:
        return models[0][1]
    for spec, name, _ in models:
        if wanted in (spec, name):
            return name
    raise ValueError(f"--calibrate-model {wanted!r} is not one of --models "
                     f"({', '.join(spec for spec, _, _ in models)})")


def calibration_files(work, name):
    """The files the calibration run of model ``name`` writes in ``work``."""
    return {"cluster": Path(work) / f"cal-{name}.json",
            "profile": Path(work) / f"cal-{name}.profile.json"}


def summarize(records, cluster, r0, cal_model) -> str:
    rows = [f"{'model':8s} {'rate Mbit/s':>11s} {'measured':>9s} {'predicted':>9s} "
            f"{'error':>7s} {'transport-only':>14s} {'error':>7s}"]
    errs, errs_net = [], []
    for r in records:
        e, en = r["predicted"] - r["measured"], r["predicted_transport_only"] - r["measured"]
        mark = " (calibration point)" if r["calibration_point"] else ""
        if not r["calibration_point"]:
            errs.append(abs(e))
            errs_net.append(abs(en))
        rows.append(f"{r['model']:8s} {r['line_rate'] / 1e6:11g} {r['measured']:9.3f} "
                    f"{r['predicted']:9.3f} {e:+7.3f} {r['predicted_transport_only']:14.3f} "
                    f"{en:+7.3f}{mark}")
    host = cluster.extra.get("host_overhead", {}).get("gamma", 0.0)
    rows.append("")
    rows.append(f"calibrated at {r0 / 1e6:g} Mbit/s ({cal_model}): alpha "
                f"{cluster.alpha * 1e3:.3f} ms, utilization {cluster.utilization:.3f}, "
                f"overlap efficiency {cluster.overlap:.2f}, host overhead "
                f"{host * 1e9:.2f} ns/byte")
    if errs:
        rows.append(f"predicted vs measured, {len(errs)} settings not used to calibrate: "
                    f"median |error| {statistics.median(errs):.3f}, max {max(errs):.3f} "
                    f"(transport only: median {statistics.median(errs_net):.3f}, "
                    f"max {max(errs_net):.3f})")
    return "\n".join(rows)


def main_one_line(argv=None):
    """:func:`main`, a failed rank said in one line (exit status 1), a scalemodel error
    in one line (status 2), Ctrl-C in one line (status 130, after the namespaces are
    torn down)."""
    try:
        return main(argv)
    except sm.ScalemodelError as exc:
        print(f"emulated_cluster: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"emulated_cluster: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("emulated_cluster: interrupted (the namespaces are removed on the way out)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main_one_line())
