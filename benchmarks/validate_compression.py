"""Validate compression advice on measured compressed runs (issue 18, item 6).

Data: the GRACE data release (Xu et al., ICDCS 2021), ResNet-50 on 1, 2, 4 and 8 workers,
one V100 per server, 10 Gbit/s, TensorFlow 1.x + Horovod 0.18.2 + GRACE, 17 methods
(``benchmarks/data/compression/grace_resnet50_10g.csv``, a copy of
``../shared/data/published/compression/grace_resnet50_10g.csv``; its README says what
is assumed: batch 64 per GPU, TCP). Repeated configurations (same method, setting, error
feedback, worker count and backend) are merged by their median throughput.

Model: scalemodel's ``resnet50`` profile rescaled (``WorkloadProfile.scaled_to``) to the
measured single-worker step, 64 images / (the 1-worker row's images/s); Horovod fusion
for uncompressed tensors; compressed tensors go per tensor (GRACE's communicators call
Horovod once per tensor) with GRACE's TensorFlow wire formats and the codec on the
compute stream (the ``grace-tf`` implementation preset; ``codec_stream="compute"``,
eq. ``compute-stream`` of ``scalemodel.planner``). One GPU per server:
``gpus_per_node=1``.

The protocol, fixed before any prediction was compared with a measurement:

* **Calibration runs** (nothing else is used): the uncompressed run on 8 workers over
  MPI, and ONE compressed run, top-k 1 % with error feedback on 8 workers over MPI (in
  another file of this format: the largest worker count with an uncompressed MPI run).
  ``fit_cluster`` fits the cluster from the first (``network="mpi"`` priors) and the
  top-k codec cost from the second (``scalemodel.fit_codec``). The other families keep
  the library's codec costs for ``grace-tf`` on the profile's V100: GRACE's levels,
  measured on this file's 8-worker rows (the header says which table; those rows are
  then not scored, below).
* **The same with the reference kernels** (a separate line): the two calibration runs
  above, every other family at the reference kernels (the H100 table scaled to the V100)
  instead of the library's grace-tf levels, which were measured on this file's 8-worker
  rows (``calibration/grace_tf_codec.py``): what one compressed run alone tells.
* **Second protocol** (a separate line): the same uncompressed run and one compressed
  run per family, all on 8 workers over MPI: top-k 1 %, random-k 1 % (error feedback),
  PowerSGD rank 1, signSGD (no error feedback) and 8-bit (error feedback).
* **Rows not scored**: the rows the library's grace-tf levels were measured on (listed
  in the table's provenance, ``scalemodel/data/codec/grace-tf-v100.json``), marked
  ``*``; every other row is held out.
* **Predicted**: every other modelled configuration (method, setting, worker count), as
  the speedup over the uncompressed run at the same worker count and backend,
  ``T_none / T_compressed``. The rows over NCCL (PowerSGD and random-k at 2, 4, 8) are
  predicted with the same MPI calibration and reported on their own line.
* **Scored**: the right winner (compression helps / hurts) over the clear cases,
  ``|measured speedup - 1| > 3 %``; the relative error of the speedup,
  ``predicted / measured - 1``, median and largest of its magnitude, over all predicted
  rows.
* **Beside it**: the uncalibrated answer (no cluster, the default codec costs), with the
  textbook wire formats (the library's defaults, fused with the tensors) and with the
  grace-tf formats.

Targets (issue 18; printed, not tuned to): right winner >= 90 %, median speedup error
<= 15 %.

Methods GRACE has and scalemodel does not model (listed, not predicted): adaq, dgc,
inceptionn, sketch, threshold. Modelled through another family's codec: efsignsgd,
signum and onebit (sign family; onebit's two fp32 means are modelled as one), qsgd (64
levels: int8), terngrad (int8 values, one fp32 scale) and natural (uint8, no scale) as
8-bit (``IntQuantizer(bits=8, packed=False)``).

**Held out** (printed after the summary, used to choose nothing): the same protocol on
``benchmarks/data/compression/deepspeed_onebit_adam_bert_large.csv``, DeepSpeed's 1-bit
Adam against Adam for BERT-Large on 1 to 32 V100s (4 per node), over 40 Gbit/s Ethernet and
40 Gbit/s InfiniBand, digitised from the 1-bit Adam post's figures (APPROXIMATE; its README
says how). Per network: the 1-GPU Adam row gives the single-worker step (batch 16 per GPU,
fp16 gradients: the ``bert-large`` profile with 2-byte gradients); calibrate from Adam and
1-bit Adam on 32 GPUs (``fit_cluster``: the cluster from the first, the ``deepspeed``
signSGD codec cost from the second; ``network="nccl-socket"`` over Ethernet, ``"nccl-ib"``
over InfiniBand; 4 GPUs per node as the sources state it, :data:`HELD_OUT_GPUS_PER_NODE`);
predict 2, 4, 8 and 16 GPUs; score as above. The intra-node link: over Ethernet, the 1-bit
Adam paper's measured all-reduce inside one 4-GPU node (Table 1, 239.76 ms) is transport
data and fixes ``intra_bw`` (:data:`HELD_OUT_INTRA`, :func:`held_out_intra_bw`); the
InfiniBand cluster has no stated figure and keeps the library's default. Both are also
printed on the default link (the protocol before). Not modelled: the 2020 MPI path with
``cuda_aware=False`` (host staging) of the compressed all-reduce. What DeepSpeed runs, from its source (the ``deepspeed`` preset of
``scalemodel.compressors``, read at the 2020 commit of these runs): Adam's fp16 gradients
are all-reduced after the backward pass in one buffer of up to 5e8 elements
(``fusion="bsp"``, no overlap); 1-bit Adam switches that off and runs its compressed
all-reduce in the optimizer step on the flat momentum (``after_backward=True``): an
all-to-all of the packed signs, then all-gathers (``collective="alltoall"``). Until
commit "validate_compression: DeepSpeed rows as DeepSpeed's source runs them" both were
modelled as DDP buckets overlapped with backward and a ring all-reduce of the signs.

Run: ``python benchmarks/validate_compression.py [--no-write] [--data CSV] [--model
NAME]``; writes ``benchmarks/results/validate_compression.txt`` and ``.json`` as one set
(atomically). Another file of the same format (another model or line rate of the GRACE
release: the model and the line rate are read from its ``model`` and ``network``
columns, ``--model`` names a profile when the file's model has no built-in one) runs the
same protocol and writes ``validate_compression_<file name>.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import math
import os
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import scalemodel as sm
from scalemodel import compressors as C

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "compression" / "grace_resnet50_10g.csv"
SHARED = HERE.parent.parent / "shared" / "data" / "published" / "compression" / \
    "grace_resnet50_10g.csv"
RESULTS = HERE / "results"
HELD_OUT = HERE / "data" / "compression" / "deepspeed_onebit_adam_bert_large.csv"
BATCH = 64  # images per GPU and step (tf_cnn_benchmarks default; ASSUMED by the README)
CLEAR = 0.03
TARGET = {"right": 0.90, "median": 0.15}
IMPL = "grace-tf"

# GRACE method -> (how scalemodel models it, note); None: not modelled
NOT_MODELLED = {"adaq": "adaptive quantization", "dgc": "DGC (sampled top-k threshold)",
                "inceptionn": "INCEPTIONN lossy float encoding",
                "sketch": "count sketch", "threshold": "threshold sparsification (data-"
                "dependent size)"}


def compressor_for(method, ratio):
    """The scalemodel compressor GRACE's ``method`` sends (grace-tf wire formats), or
    None when scalemodel does not model it."""
    stream = C.IMPLEMENTATIONS[IMPL].settings["*"]  # per tensor, codec on the compute stream
    sign = dict(sign_bits=8, **stream)
    byte = dict(bits=8, packed=False, **stream)
    if method == "topk":
        return C.for_implementation(C.TopK(density=ratio), IMPL)
    if method == "randomk":
        return C.for_implementation(C.RandomK(density=ratio), IMPL)
    if method == "powersgd":
        return C.for_implementation(C.PowerSGD(rank=1), IMPL)
    if method in ("signsgd", "signum"):
        return C.SignSGD(scale_bytes=0, **sign)
    if method in ("efsignsgd", "onebit"):
        return C.SignSGD(scale_bytes=4, **sign)
    if method in ("8bit", "qsgd", "terngrad"):
        return C.IntQuantizer(scale_bytes=4, **byte)
    if method == "natural":
        return C.IntQuantizer(scale_bytes=0, **byte)
    return None


def textbook(comp):
    """The same compressor with the library's default (textbook) wire format."""
    import attrs
    fields = {f.name: f.default for f in attrs.fields(type(comp))
              if f.name in C.WIRE_ATTRIBUTES}
    return attrs.evolve(comp, **fields)


# ----------------------------------------------------------------------------- data


def _setting(text, key):
    m = re.search(rf"{key}=([^;]+)", text)
    return m.group(1).strip() if m else None


GRACE_COLUMNS = frozenset({"network", "setting", "compressor", "gpus_total", "model",
                           "value"})
"""The columns of a GRACE CSV that :func:`read_configs` reads."""


def data_problem(path):
    """Why ``--data`` cannot be read as a CSV (missing, a folder, unreadable), or None."""
    p = Path(path)
    if not p.exists():
        return "no such file"
    if not p.is_file():
        return "is not a regular file"
    if not os.access(p, os.R_OK):
        return "is not readable"
    return None


def read_configs(path):
    """Rows merged by configuration: ``{method, ratio, ef, n, backend, throughput,
    repeats}`` with the median throughput [images/s]."""
    groups = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = sorted(GRACE_COLUMNS - set(reader.fieldnames or ()))
        if missing:
            raise SystemExit(f"{path}: not a GRACE CSV (no column {', '.join(missing)}; "
                             f"it needs {', '.join(sorted(GRACE_COLUMNS))})")
        for row in reader:
            backend = "nccl" if "over NCCL" in row["network"] else "mpi"
            ratio = _setting(row["setting"], "compress_ratio")
            ef = _setting(row["setting"], "error_feedback_memory")
            m = re.search(r"([0-9.]+)\s*Gbit/s", row["network"])
            if m is None:
                raise SystemExit(f"{path}: no line rate ('... Gbit/s') in the network "
                                 f"column: {row['network']!r}")
            key = (row["compressor"], None if ratio is None else float(ratio),
                   ef == "true", int(row["gpus_total"]), backend, row["model"],
                   float(m.group(1)) * 1e9)
            groups.setdefault(key, []).append(float(row["value"]))
    return [{"method": k[0], "ratio": k[1], "ef": k[2], "n": k[3], "backend": k[4],
             "model": k[5], "bw": k[6], "throughput": statistics.median(v),
             "repeats": len(v)}
            for k, v in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))]


def label(c):
    s = c["method"]
    if c["ratio"] is not None:
        s += f" {c['ratio']:g}"
    return f"{s}{' ef' if c['ef'] else ''} n={c['n']} {c['backend']}"


# ----------------------------------------------------------------------------- model


def features():
    """What the library offers (detected, so the script runs before and after)."""
    sig = inspect.signature(sm.compressed_scaling_factor).parameters
    out = {"implementation_parameter": "implementation" in sig,
           "fit_cluster_compressed_runs": "implementation" in
           inspect.signature(sm.fit_cluster).parameters,
           "gpu_codec_costs": "gpu" in sig, "grace_table_from_this_data": False,
           "levels_rows": [], "levels_source": None}
    try:
        from scalemodel.codec_costs import default_costs
        table = default_costs(None, IMPL)[1]
        out["grace_table_from_this_data"] = table.implementation == IMPL
        out["default_table"] = table.name
        if table.implementation == IMPL:
            import json as _json
            from importlib import resources
            prov = _json.loads(resources.files("scalemodel").joinpath(
                "data", "codec", f"{table.name}.json").read_text())["provenance"]
            out["levels_rows"] = list(prov.get("rows", []))
            out["levels_source"] = prov.get("source")
            out["levels_workers"] = prov.get("workers")
    except (ImportError, AttributeError):
        pass
    return out


def setup(configs, model=None):
    """The single-worker step [s], the profile rescaled to it and the line rate [bits/s]
    (one model and one line rate per file)."""
    models = {c["model"] for c in configs}
    rates = {c["bw"] for c in configs}
    if len(models) != 1 or len(rates) != 1:
        raise SystemExit(f"one model and one line rate per file, found {sorted(models)} and "
                         f"{sorted(rates)}")
    one = [c for c in configs if c["method"] == "none" and c["n"] == 1]
    if len(one) != 1:
        raise SystemExit("needs exactly one uncompressed 1-worker configuration")
    t1 = BATCH / one[0]["throughput"]
    name = model or models.pop()
    try:
        profile = sm.load_profile(name)
    except sm.ScalemodelError as exc:
        raise SystemExit(f"no profile for {name!r} ({exc}); give --model NAME_OR_FILE")
    return t1, profile.scaled_to(t1), rates.pop()


def step_time(c):
    """Measured step of a configuration [s]: BATCH / per-worker images/s."""
    return BATCH * c["n"] / c["throughput"]


def _sf(profile, comp, n, cluster, feats, impl, bw):
    kw = dict(cluster=cluster, fusion="horovod", gpus_per_node=1)
    if feats["implementation_parameter"] and impl:
        kw["implementation"] = impl
    # gpu=None: the profile's GPU (a V100), whose default codec costs the library scales
    return sm.compressed_scaling_factor(profile, comp, n, bw, **kw)


def predicted_speedup(profile, comp, n, cluster, feats, impl=IMPL, bw=10e9):
    """T_none / T_compressed on ``cluster`` [-]."""
    none = _sf(profile, "none", n, cluster, feats, impl, bw)
    return _sf(profile, comp, n, cluster, feats, impl, bw) / none


def _run(c, t1, profile, comp=None):
    r = {"model": profile, "n": c["n"], "bw": c["bw"], "iteration_time": step_time(c),
         "single_worker_time": t1, "label": label(c)}
    if comp is not None:
        r["compressor"] = comp
    return r


def calibrate(configs, calib, t1, profile, feats, impl=IMPL):
    """The cluster fitted from the calibration configurations (``calib``: the
    uncompressed one first, then the compressed ones) and the fit's message; ``impl``
    None: the compressors as objects with GRACE's wire formats, the codec costs starting
    from the reference kernels instead of the grace-tf levels."""
    runs = [_run(calib[0], t1, profile)]
    runs += [_run(c, t1, profile, compressor_for(c["method"], c["ratio"]))
             for c in calib[1:]]
    kw = {"implementation": impl} if feats["fit_cluster_compressed_runs"] and impl else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=1, network="mpi",
                             name="grace-v100-10g", **kw)
    return fit.cluster, [fit.message]


# ----------------------------------------------------------------------------- scoring


def score(rows, key):
    """Right-winner count over the clear cases and the speedup errors of ``key``."""
    clear = [r for r in rows if abs(r["measured"] - 1) > CLEAR]
    right = sum((r[key] > 1) == (r["measured"] > 1) for r in clear)
    err = [abs(r[key] / r["measured"] - 1) for r in rows]
    return {"rows": len(rows), "clear": len(clear), "right": right,
            "right_rate": right / len(clear) if clear else math.nan,
            "median": float(np.median(err)) if err else math.nan,
            "largest": float(np.max(err)) if err else math.nan}


def evaluate(configs, t1, profile, protocols, feats, levels_rows=()):
    """One row per predicted configuration with every protocol's speedup; a row the
    library's grace-tf codec levels were measured on (``levels_rows``) is marked
    ``levels_row`` and scored by no protocol."""
    ref = {(c["n"], c["backend"]): c for c in configs if c["method"] == "none"}
    levels_rows = set(levels_rows)
    rows = []
    for c in configs:
        comp = compressor_for(c["method"], c["ratio"])
        if c["method"] == "none" or comp is None or (c["n"], c["backend"]) not in ref:
            continue
        base = ref[(c["n"], c["backend"])]
        row = {"config": label(c), "method": c["method"], "n": c["n"],
               "backend": c["backend"], "compressor": comp.describe(),
               "family": comp.family, "repeats": c["repeats"],
               "measured": c["throughput"] / base["throughput"],
               "levels_row": label(c) in levels_rows}
        for key, (cluster, calib, impl, *kind) in protocols.items():
            if any(label(k) == row["config"] for k in calib):
                row[key] = None  # a calibration run: not predicted
                continue
            grace = kind[0] == "grace" if kind else bool(impl)
            wire = comp if grace else textbook(comp)
            row[key] = predicted_speedup(profile, wire, c["n"], cluster, feats, impl,
                                         c["bw"])
        rows.append(row)
    return rows


def find(configs, method, n, ratio=None, ef=None, backend="mpi", required=True):
    """The one configuration named; None (or an error when ``required``) if absent."""
    hits = [c for c in configs if c["method"] == method and c["n"] == n
            and c["backend"] == backend and (ratio is None or c["ratio"] == ratio)
            and (ef is None or c["ef"] == ef)]
    if len(hits) != 1 and (required or hits):
        raise SystemExit(f"calibration configuration {method} n={n} ratio={ratio} ef={ef}: "
                         f"{len(hits)} matches")
    return hits[0] if hits else None


def run(path=None, say=print, subset=None, model=None):
    """The whole validation (the script's core); ``subset`` keeps only configurations
    for which it returns True (tests); ``model`` overrides the file's model name."""
    feats = features()
    configs = read_configs(path or (DATA if DATA.exists() else SHARED))
    if subset is not None:
        configs = [c for c in configs if subset(c)]
    t1, profile, _ = setup(configs, model)
    # the calibration worker count: the largest with an uncompressed run over MPI (8 here)
    n_cal = max(c["n"] for c in configs if c["method"] == "none" and c["backend"] == "mpi")
    a = [find(configs, "none", n_cal), find(configs, "topk", n_cal, 0.01, True)]
    extra = [find(configs, "randomk", n_cal, 0.01, True, required=False),
             find(configs, "powersgd", n_cal, required=False),
             find(configs, "signsgd", n_cal, ef=False, required=False),
             find(configs, "8bit", n_cal, ef=True, required=False)]
    b = a + [c for c in extra if c is not None]
    ca, ma = calibrate(configs, a, t1, profile, feats)
    cr, mr = calibrate(configs, a, t1, profile, feats, impl=None)
    cb, mb = calibrate(configs, b, t1, profile, feats)
    protocols = {"uncal_textbook": (None, [], None), "uncal_grace": (None, [], IMPL),
                 "one_run": (ca, a, IMPL), "one_run_ref": (cr, a, None, "grace"),
                 "per_family": (cb, b, IMPL)}
    rows = evaluate(configs, t1, profile, protocols, feats,
                    feats["levels_rows"] if path is None or Path(path).resolve() in
                    (DATA.resolve(), SHARED.resolve()) else ())
    names = {"uncal_textbook": "uncalibrated, textbook wire formats",
             "uncal_grace": "uncalibrated, grace-tf wire formats",
             "one_run": f"calibrated: none@{n_cal} + top-k 1 % @{n_cal} (others: the grace-tf "
                        "levels)" if feats["levels_rows"] else
                        f"calibrated: none@{n_cal} + top-k 1 % @{n_cal} (other families: "
                        "default costs)",
             "one_run_ref": f"the same, others: the reference kernels (no GRACE levels)",
             "per_family": f"calibrated: none@{n_cal} + one run per family @{n_cal}"}
    summary = {}
    for key in protocols:
        for part, keep in (("mpi", "mpi"), ("nccl", "nccl")):
            sel = [r for r in rows if r["backend"] == keep and r[key] is not None
                   and not r["levels_row"]]
            summary[f"{key}/{part}"] = score(sel, key)
    return {"features": feats, "model": profile.name, "bw": configs[0]["bw"],
            "calibration_workers": n_cal,
            "single_worker_time": t1, "rows": rows, "summary": summary,
            "names": names, "calibration": {"one_run": [label(c) for c in a],
                                            "one_run_ref": [label(c) for c in a],
                                            "per_family": [label(c) for c in b]},
            "fit_messages": {"one_run": ma, "one_run_ref": mr, "per_family": mb},
            "codec_costs": {"one_run": ca.codec_costs, "one_run_ref": cr.codec_costs,
                            "per_family": cb.codec_costs},
            "not_modelled": sorted({c["method"] for c in configs
                                    if c["method"] in NOT_MODELLED})}


# ----------------------------------------------------------------------------- held out


HELD_OUT_BATCH = 16  # samples per GPU and step (the post's Figure 3 caption; ASSUMED for 5, 6)
HELD_OUT_LINKS = (("40 GbE", "Ethernet", "nccl-socket"), ("40 Gbit/s IB", "InfiniBand", "nccl-ib"))
HELD_OUT_GPUS_PER_NODE = 4
"""GPUs per node of both clusters. Ethernet: Tang et al. 2021 (arXiv:2102.02888, the 1-bit
Adam paper, evaluation setup: 'the first cluster has 4 NVIDIA Tesla V100 GPUs per node',
40 Gigabit Ethernet, 4.1 Gbps effective by iperf, the post's figure too). InfiniBand: the
1-bit Adam tutorial's 32-GPU InfiniBand example, '32 GPUs (4GPUs/node, 8 nodes in total)'
(microsoft/DeepSpeed@0b3c1d76cdd4945fd3f0bdb02b22044ecb0d0559:docs/_tutorials/onebit-adam.md,
section 2.1); the paper's own InfiniBand cluster has 8 V100 per node, another cluster."""

HELD_OUT_INTRA = {"40 GbE": {
    "allreduce_s": 239.76e-3, "gpus": 4, "table1_compute_s": (35.99 + 59.95 + 74.21) * 1e-3,
    "source": "Tang et al. 2021 (arXiv:2102.02888) Table 1, Ethernet cluster, 1 node x 4 "
              "GPUs, batch 16/GPU: 'Allreduce' 239.76 ms of a 410 ms step (forward 35.99, "
              "backward 59.95, other 74.21 ms); read through the third-party summary "
              "https://rajatbisht.net/paper_summaries/detailed_summary/0043_1Bit_Adam.html "
              "(the PDF itself was not readable with the project's search tools)"}}
"""Transport data of the held-out clusters' intra-node link: a measured all-reduce of
BERT-Large's fp16 gradients inside one node (Adam's NCCL all-reduce in DeepSpeed), which
fixes ``intra_bw`` through the library's own collective model (:func:`held_out_intra_bw`).
Neither source states the link itself (PCIe or NVLink). The InfiniBand cluster of the
post has no such figure: the paper's Table 1 InfiniBand rows are from its 8-GPU-per-node
cluster (1 node x 8 GPUs: 28.18 ms), not the post's 4-GPU nodes, so that link keeps the
library's default (2.4 Tbit/s, NVLink-class)."""

HELD_OUT_NOT_MODELLED = (
    "not modelled: the 2020 1-bit Adam ran its compressed all-reduce over MPI, and on "
    "Ethernet with cuda_aware=False ('the communication will happen using sender as well as "
    "receiver side memory copies between CPU and GPU buffers', the tutorial, section 1.4; "
    "DeepSpeedExamples bing_bert/1-bit_adam/mpi_ethernet config: cuda_aware false): the "
    "library has no host-staging term, and its all-to-all runs on the same links as NCCL's")


def held_out_intra_bw(profile, seconds, gpus, **kw):
    """The intra-node link rate at which the library's all-reduce of ``profile``'s
    gradients on ``gpus`` GPUs of one node takes ``seconds`` (no overlap: ``fusion`` bsp
    in ``kw``) [bits/s]."""
    from scipy.optimize import brentq

    def comm(bw):
        sf = sm.compressed_scaling_factor(profile, "none", gpus, 40e9, intra_bw=bw, **kw)
        return profile.iteration_time / sf - profile.iteration_time

    return brentq(lambda bw: comm(bw) - seconds, 1e8, 1e13, xtol=1e3, rtol=1e-9)


def _held_out_link(rows, name, key, network):
    """One network of the held-out file: calibrate at the largest GPU count, predict the
    others, on the cluster as the sources state it (:data:`HELD_OUT_INTRA`) and on the
    library's default intra-node link. Returns ((rows ``{n, measured, calibrated,
    uncalibrated}``, fit message) on the stated cluster, the same on the default link,
    the intra-node transport record or None, the calibration GPU count)."""
    import attrs
    thr = {(r["compressor"], int(r["gpus_total"])): float(r["value"]) for r in rows
           if key in r["network"]}
    t1 = HELD_OUT_BATCH / thr[("none", 1)]
    base = sm.load_profile(rows[0]["model"])
    profile = attrs.evolve(base, precision="fp16",  # fp16 gradients: 2 bytes each
                           tensor_bytes=base.tensor_bytes / 2).scaled_to(t1)
    comp = C.for_implementation("signsgd", "deepspeed")
    n_cal = max(n for c, n in thr if c == "none")
    # the DeepSpeed engine without ZeRO: one all-reduce buffer after backward
    # (buffered_allreduce_fallback, 5e8 elements > BERT-Large's 3.4e8 parameters)
    kw = dict(fusion="bsp", gpus_per_node=HELD_OUT_GPUS_PER_NODE, implementation="deepspeed")
    before = _held_out_predict(profile, comp, thr, t1, n_cal, network, kw)
    intra = HELD_OUT_INTRA.get(name)
    if intra is None:
        return before, before, None, n_cal
    bw = held_out_intra_bw(profile, intra["allreduce_s"], intra["gpus"], **kw)
    after = _held_out_predict(profile, comp, thr, t1, n_cal, network, {**kw, "intra_bw": bw})
    return after, before, {**intra, "intra_bw": bw, "compute_s": t1}, n_cal


def _held_out_predict(profile, comp, thr, t1, n_cal, network, kw):
    """Calibrate at ``n_cal`` GPUs on the cluster ``kw`` describes, predict the others;
    (rows ``{n, measured, calibrated, uncalibrated}``, fit message)."""

    def measured_run(c, n):
        r = {"model": profile, "n": n, "bw": 40e9, "iteration_time": HELD_OUT_BATCH * n /
             thr[(c, n)], "single_worker_time": t1, "label": f"{c} n={n}"}
        return {**r, "compressor": comp} if c != "none" else r

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        fit = sm.fit_cluster([measured_run("none", n_cal),
                              measured_run("onebit-adam", n_cal)], network=network,
                             name=f"deepspeed-{network}", **kw)

    def speedup(n, cluster):
        return (sm.compressed_scaling_factor(profile, comp, n, 40e9, cluster=cluster, **kw)
                / sm.compressed_scaling_factor(profile, "none", n, 40e9, cluster=cluster, **kw))

    out = [{"n": n, "measured": thr[("onebit-adam", n)] / thr[("none", n)],
            "calibrated": speedup(n, fit.cluster), "uncalibrated": speedup(n, None)}
           for n in sorted(n for c, n in thr if c == "none") if 1 < n < n_cal]
    return out, fit.message


def held_out(path=HELD_OUT):
    """The held-out source, or None when its file is absent. Each link's ``rows`` are
    predicted on the cluster as the sources state it; ``rows_default_intra`` on the
    library's default intra-node link (the protocol before the stated link was used)."""
    if not Path(path).exists():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rec = {"file": Path(path).name, "links": {}, "not_modelled": HELD_OUT_NOT_MODELLED}
    keys = ("uncalibrated", "calibrated")
    for name, key, network in HELD_OUT_LINKS:
        (pred, message), (pred0, message0), intra, n_cal = _held_out_link(rows, name, key,
                                                                          network)
        rec["links"][name] = {"rows": pred, "fit_message": message, "calibration_gpus": n_cal,
                              "network_priors": network, "intra_node": intra,
                              "rows_default_intra": pred0,
                              "fit_message_default_intra": message0,
                              "summary": {k: score(pred, k) for k in keys}}
    for tag, field in (("summary", "rows"), ("summary_default_intra", "rows_default_intra")):
        every = [r for v in rec["links"].values() for r in v[field]]
        rec[tag] = {k: score(every, k) for k in keys}
    return rec


def _intra_lines(link):
    intra = link["intra_node"]
    if intra is None:
        return ["    intra-node link: not stated by the sources (no measurement for these "
                "4-GPU nodes): the library's default"]
    return [f"    intra-node link from transport data: {intra['source']}",
            f"      -> intra_bw {intra['intra_bw'] / 1e9:.1f} Gbit/s per GPU and direction "
            f"(the library's all-reduce of the fp16 gradients on {intra['gpus']} GPUs of one "
            f"node takes {intra['allreduce_s'] * 1e3:.2f} ms there; given to fit_cluster and "
            "to the uncalibrated prediction)",
            f"      check: Table 1's compute (forward + backward + other) "
            f"{intra['table1_compute_s'] * 1e3:.1f} ms against the 1-GPU row's step "
            f"{intra['compute_s'] * 1e3:.1f} ms"]


def held_out_lines(rec):
    out = ["", "held out (chose nothing; APPROXIMATE data digitised from figures): DeepSpeed "
           f"1-bit Adam vs Adam, BERT-Large, V100, {HELD_OUT_GPUS_PER_NODE} GPUs per node "
           f"({rec['file']})",
           "  as DeepSpeed's source runs them: Adam all-reduces the fp16 gradients after "
           "backward (fusion bsp); 1-bit Adam: "
           + C.for_implementation("signsgd", "deepspeed").describe(),
           "  " + rec.get("not_modelled", HELD_OUT_NOT_MODELLED)]
    for name, link in rec["links"].items():
        out.append(f"  {name}: calibrated on Adam and 1-bit Adam at {link['calibration_gpus']} "
                   f"GPUs (network priors {link['network_priors']})")
        out += _intra_lines(link)
        out += ["    " + t for t in link["fit_message"].splitlines()]
        out.append(f"    {'GPUs':>4s} {'meas':>5s} {'uncal':>6s} {'calib':>6s}   (default "
                   "intra-node link: uncal calib)")
        out += [f"    {r['n']:4d} {r['measured']:5.2f} {r['uncalibrated']:6.2f} "
                f"{r['calibrated']:6.2f}   {'':24s}{r0['uncalibrated']:5.2f} "
                f"{r0['calibrated']:5.2f}"
                for r, r0 in zip(link["rows"], link["rows_default_intra"])]
    out.append(f"  {'protocol':56s} {'right winner':>14s} {'median':>7s} {'largest':>8s}")
    for tag, what in (("summary", "the stated cluster"),
                      ("summary_default_intra", "default intra-node link")):
        for key in ("uncalibrated", "calibrated"):
            s = rec[tag][key]
            out.append(f"  {key + ' (both networks, ' + what + ')':56s} {s['right']:>4d} of "
                       f"{s['clear']:<3d}({s['right_rate']:4.0%}) {s['median']:7.1%} "
                       f"{s['largest']:8.1%}")
    return out


# ----------------------------------------------------------------------------- text


def lines_of(rec):
    out = []
    f = rec["features"]
    out += [f"library features: implementation= parameter "
            f"{'yes' if f['implementation_parameter'] else 'no (grace-tf objects)'}, "
            f"GPU-scaled default codec costs "
            f"{'yes (the profile V100)' if f['gpu_codec_costs'] else 'no (the H100 table)'}, "
            f"default table {f.get('default_table', 'h100')}",
            *([f"the library's grace-tf codec levels were measured on this data "
               f"(calibration/grace_tf_codec.py, {f.get('levels_workers')} workers): "
               f"from the rows {'; '.join(f['levels_rows'])}; those rows are marked * "
               "and scored by no protocol; every other row is held out (other worker "
               "counts, other settings and methods, the NCCL runs)"]
              if f["levels_rows"] else []),
            f"single-worker step {rec['single_worker_time'] * 1e3:.1f} ms (batch {BATCH}, "
            "the 1-worker row)", ""]
    for key, labels in rec["calibration"].items():
        out.append(f"calibration {key}: " + "; ".join(labels))
        for m in rec["fit_messages"][key]:
            out += ["  " + t for t in m.splitlines()]
    out += ["", "speedup T_none / T_compressed (measured; predicted by each protocol; "
            "- = calibration run; * = a row the grace-tf levels were measured on, not "
            "scored)",
            f"{'configuration':28s} {'compressor (wire format)':112s} {'meas':>5s} "
            f"{'textb':>5s} {'grace':>5s} {'1run':>5s} {'1ref':>5s} {'perfam':>6s}"]
    for r in rec["rows"]:
        def v(k):
            return "    -" if r[k] is None else f"{r[k]:5.2f}"
        star = "*" if r.get("levels_row") else " "
        out.append(f"{r['config'] + star:28s} {r['compressor'][:112]:112s} {r['measured']:5.2f} "
                   f"{v('uncal_textbook')} {v('uncal_grace')} {v('one_run')} "
                   f"{v('one_run_ref')} {v('per_family'):>6s}")
    out += ["", "not modelled (not predicted): " + ", ".join(
        f"{m} ({NOT_MODELLED[m]})" for m in rec["not_modelled"]), "",
        f"summary (clear cases: |measured - 1| > {CLEAR:.0%}; error: |predicted / "
        "measured - 1| over all predicted rows" + (", the * rows left out" if
                                                  any(r.get("levels_row") for r in
                                                      rec["rows"]) else "") + ")",
        f"{'protocol':70s} {'backend':7s} {'right winner':>14s} {'median':>7s} "
        f"{'largest':>8s}"]
    for key, name in rec["names"].items():
        for part in ("mpi", "nccl"):
            s = rec["summary"][f"{key}/{part}"]
            if not s["rows"]:
                continue
            out.append(f"{name:70s} {part:7s} {s['right']:>4d} of {s['clear']:<3d}"
                       f"({s['right_rate']:4.0%}) {s['median']:7.1%} {s['largest']:8.1%}")
    levels = bool(rec["features"].get("levels_rows"))
    for key, what in (("one_run", "one-run protocol" + (
            ", the grace-tf levels measured on this file's "
            f"{rec['features'].get('levels_workers')}-worker rows" if levels else "")),
            ("one_run_ref", "one compressed run and nothing else")):
        s = rec["summary"].get(f"{key}/mpi")
        if s is None or (key == "one_run_ref" and not levels):
            continue
        out.append(f"targets (MPI, {what}): right winner >= {TARGET['right']:.0%}: "
                   f"{'met' if s['right_rate'] >= TARGET['right'] else 'NOT met'}; median "
                   f"error <= {TARGET['median']:.0%}: "
                   f"{'met' if s['median'] <= TARGET['median'] else 'NOT met'}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--data", default=None, help="a GRACE CSV in this format (default: the "
                    "copy in benchmarks/data/compression, else ../shared); results of "
                    "another file go to validate_compression_<its name>.txt/.json")
    ap.add_argument("--model", default=None, help="profile name or file to use instead of "
                    "the file's model column")
    args = ap.parse_args(argv)
    if args.data is not None and data_problem(args.data):
        ap.error(f"--data {args.data!r}: {data_problem(args.data)}")
    t0 = time.perf_counter()
    rec = run(args.data, model=args.model)
    lines = [f"Compression advice on measured runs: GRACE, {rec['model']}, V100, "
             f"{rec['bw'] / 1e9:g} Gbit/s (issue 18)"] + lines_of(rec)
    if args.data is None:  # the default run prints the held-out source after its summary
        rec["held_out"] = held_out()
        if rec["held_out"] is not None:
            lines += held_out_lines(rec["held_out"])
    lines.append(f"({time.perf_counter() - t0:.1f} s; scalemodel {sm.__version__})")
    print("\n".join(lines))
    if not args.no_write:
        from scalemodel.profiles import atomic_write_files
        RESULTS.mkdir(exist_ok=True)
        stem = "validate_compression" if args.data is None else \
            f"validate_compression_{Path(args.data).stem}"
        atomic_write_files({RESULTS / f"{stem}.txt": "\n".join(lines) + "\n",
                            RESULTS / f"{stem}.json":
                                json.dumps(rec, indent=1, default=str) + "\n"})
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_compression"))
