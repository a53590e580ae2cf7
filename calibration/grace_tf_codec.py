"""Measure the codec cost levels of the ``grace-tf`` preset from the GRACE data release.

GRACE (Xu et al., ICDCS 2021) published the training throughput of ResNet-50 with and
without compression on V100s, TensorFlow 1.x + Horovod 0.18.2 + GRACE's TensorFlow
compressors (``benchmarks/data/compression/grace_resnet50_10g.csv``, a copy of
``../shared/data/published/compression/grace_resnet50_10g.csv``, from
``sands-lab/grace-data@41915bbd5009c378ba3ea1cb43cf27c6db25dfa4``). A compressed run's
step time minus what the model says its communication costs is what that
implementation's codec costs on that GPU: this script turns ONE worker count of those
runs into the ``grace-tf`` codec table, ``scalemodel/data/codec/grace-tf-v100.json``.

Procedure (fixed; the same as ``fit_cluster`` with compressed runs, issue 18 item 3):

1. The single-worker step: 64 images (the tf_cnn_benchmarks default batch, ASSUMED by
   the data's README) over the 1-worker row's images/s; the ``resnet50`` profile
   rescaled to it (``WorkloadProfile.scaled_to``).
2. Runs, all at ONE worker count (``--workers``, default 8) over MPI: the uncompressed
   run, and one compressed run per family, the GRACE method that is the family itself:
   top-k 1 % with error feedback, random-k 1 % with error feedback, PowerSGD rank 1
   (error feedback), signSGD (no error feedback), 8-bit (error feedback). Each compressed
   run's compressor is the family in GRACE's TensorFlow wire format (the ``grace-tf``
   preset: per tensor, byte signs, int8 values, dense decode, TF's matrix view, codec on
   the compute stream).
3. ``fit_cluster`` (Horovod fusion, one GPU per server, ``network="mpi"`` priors) fits
   the cluster from the uncompressed run and, with the cluster held, each family's codec
   cost from its run, starting from the reference kernels (the H100 table scaled to the
   V100's memory bandwidth, eq. ``codec-scaling``). One run per family gives one number:
   the per-element level (a factor on the starting encode and decode costs per element);
   the per-call level (the launch floor per kernel call) is held at the reference's
   (host dispatch: the run cannot tell it from the per-element level). Its interval:
   the run's time within its uncertainty on the fitted cluster's corners.
4. The table: the fitted per-element costs and the held launch per family, the GPU
   (the profile's, a V100 SXM2), the implementation, and provenance: the data file and
   its SHA-256, the rows used (wandb run ids), the intervals, the scalemodel commit.

Every other row of the file (the other worker counts, the other settings and methods,
the NCCL runs) is held out: ``benchmarks/validate_compression.py`` reads the rows used
from the table's provenance and does not score them.

Run: ``python calibration/grace_tf_codec.py [--workers 8] [--write]``; prints the levels,
and with ``--write`` writes the table (atomically).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import scalemodel as sm

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "compression" / "grace_resnet50_10g.csv"
TABLE = ROOT / "scalemodel" / "data" / "codec" / "grace-tf-v100.json"
GRACE = "sands-lab/grace-data@41915bbd5009c378ba3ea1cb43cf27c6db25dfa4"
# family -> (GRACE method, compress_ratio, error feedback): the method that is the family
FAMILY_RUNS = {"topk": ("topk", 0.01, True), "randomk": ("randomk", 0.01, True),
               "powersgd": ("powersgd", None, True), "signsgd": ("signsgd", None, False),
               "int8": ("8bit", None, True)}


def _validation_module():
    spec = importlib.util.spec_from_file_location(
        "validate_compression", ROOT / "benchmarks" / "validate_compression.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_ids(path, chosen, vc):
    """The wandb run ids (the CSV's notes) of the configurations ``chosen``."""
    labels = {vc.label(c) for c in chosen}
    ids = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for c in chosen:
                if (row["compressor"] == c["method"] and int(row["gpus_total"]) == c["n"]
                        and ("over NCCL" in row["network"]) == (c["backend"] == "nccl")
                        and (vc._setting(row["setting"], "compress_ratio") is None
                             if c["ratio"] is None else
                             float(vc._setting(row["setting"], "compress_ratio") or -1)
                             == c["ratio"])
                        and (vc._setting(row["setting"], "error_feedback_memory")
                             == "true") == c["ef"]):
                    run = row["notes"].split(";")[0].removeprefix("wandb run id ").strip()
                    ids.setdefault(vc.label(c), []).append(run)
    assert set(ids) == labels, (sorted(ids), sorted(labels))
    return ids


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(path=DATA, workers=8):
    """The fitted table (a dict in the format of ``scalemodel/data/codec/*.json``) and
    the fit's message."""
    vc = _validation_module()
    configs = vc.read_configs(path)
    t1, profile, bw = vc.setup(configs)
    chosen = [vc.find(configs, "none", workers)]
    chosen += [vc.find(configs, m, workers, r, ef) for m, r, ef in FAMILY_RUNS.values()]
    runs = [vc._run(chosen[0], t1, profile)]
    for c in chosen[1:]:
        runs.append(vc._run(c, t1, profile, vc.compressor_for(c["method"], c["ratio"])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        # implementation=None: start from the reference kernels (not from this table)
        fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=1, network="mpi",
                             name="grace-v100-10g")
    from scalemodel.codec_costs import profile_gpu
    gpu = profile_gpu(profile).name
    costs, levels = {}, {}
    for family in FAMILY_RUNS:
        entry = fit.cluster.codec_costs.get(family)
        if entry is None:
            raise SystemExit(f"{family}: the fit did not give a usable cost:\n{fit.message}")
        costs[family] = {k: float(v) for k, v in entry.items()}
        lo, hi = fit.cluster.intervals.get(f"codec.{family}", (None, None))
        levels[family] = {"encode_interval": [lo, hi]}
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    ids = _run_ids(path, chosen, vc)
    rows = [vc.label(c) for c in chosen]
    table = {
        "format": "scalemodel-cluster", "format_version": 1,
        "name": "grace-tf-v100-codec",
        "description": (f"Codec costs of GRACE's TensorFlow compressors on a V100 "
                        f"(TF 1.x + Horovod 0.18.2), measured from the GRACE data release's "
                        f"{workers}-worker ResNet-50 runs at {bw / 1e9:g} Gbit/s"),
        "provenance": {
            "gpu": gpu, "implementation": "grace-tf",
            "codec_costs": (f"fitted by calibration/grace_tf_codec.py from the GRACE data "
                            f"release ({GRACE}), {workers} workers over MPI, one run per "
                            "family; per-element levels fitted, per-call launch held at the "
                            "reference table's"),
            "source": (f"Xu et al., GRACE, ICDCS 2021: {GRACE}:GRACE_data_release.pickle; "
                       f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
                       f"sha256 {digest}"),
            "rows": rows, "wandb_runs": ids, "workers": workers,
            "single_worker_step": t1, "line_rate": bw,
            "procedure": ("calibration/grace_tf_codec.py: fit_cluster(none + one run per "
                          "family, fusion='horovod', gpus_per_node=1, network='mpi'), the "
                          "cluster from the uncompressed run, each family's per-element "
                          "level from its run on the cluster held, starting from the H100 "
                          "reference table scaled to the V100 (eq. codec-scaling); launch "
                          "held; batch 64 per GPU ASSUMED"),
            "levels": levels, "scalemodel_commit": _commit(),
            "note": ("a measurement of GRACE's TensorFlow implementation on these V100 "
                     "servers, not of the kernels alone: TF 1.x's op dispatch, "
                     "tf.math.top_k, scatter_nd and the framework's data movement are in "
                     "it; the rows used are not held out in "
                     "benchmarks/validate_compression.py"),
        },
        "codec_costs": costs,
    }
    return table, fit.message


def lines_of(table):
    out = [table["description"], "rows used: " + "; ".join(table["provenance"]["rows"]),
           f"{'family':10s} {'encode':>14s} {'decode':>14s} {'per rank (enc)':>15s} "
           f"{'launch':>10s}  encode interval"]
    for family, c in table["codec_costs"].items():
        lo, hi = table["provenance"]["levels"][family]["encode_interval"]
        out.append(f"{family:10s} {c['encode'] * 1e12:9.1f} ps/el {c['decode'] * 1e12:9.1f} "
                   f"ps/el {c.get('encode_per_rank', 0.0) * 1e12:10.2f} ps/el "
                   f"{c['launch'] * 1e6:7.1f} us  [{'-' if lo is None else f'{lo * 1e12:.1f}'}"
                   f", {'-' if hi is None else f'{hi * 1e12:.1f}'}] ps/el")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    ap.add_argument("--workers", type=int, default=8, help="the ONE worker count used")
    ap.add_argument("--data", type=Path, default=DATA, help="the GRACE CSV")
    ap.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error(f"--workers {args.workers}: must be >= 1")
    problem = _validation_module().data_problem(args.data)
    if problem:
        ap.error(f"--data {str(args.data)!r}: {problem}")
    table, message = measure(args.data.resolve(), args.workers)
    print(message)
    print("\n".join(lines_of(table)))
    if args.write:
        from scalemodel.profiles import atomic_write_files
        atomic_write_files({TABLE: json.dumps(table, indent=1) + "\n"})
        print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
