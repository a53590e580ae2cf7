"""Large n: calibrated on two runs at <= 64 GPUs, predict 128 to 1024 (issue 17, item 4).

Data: ``benchmarks/data/published_large_n.csv``, InternLM's training-performance tables
(``InternLM/InternEvo`` ``doc/en/train_performance.md`` at commit 3a665e8; the same tables
in ``InternLM/InternLM`` at commit 20fe5ac): InternLM-7B with InternLM's hybrid ZeRO-1 on
8 to 1024 A100-SXM4-80GB GPUs, 8 per node, 4 x 100 Gbit/s RoCE per node, sequence 2,048,
tokens per GPU per second (TGS). The model is the InternLM-7B shape of the job's config
(``configs/7B_sft.py``: 32 layers, hidden 4,096, 32 heads, MLP ratio 8/3 rounded up to a
multiple of 256 = 11,008, vocabulary 103,168, bf16, RMSNorm, SwiGLU, biases) as a
FLOP-derived :func:`scalemodel.transformer_profile` on ``a100-80gb``.

Series evaluated (the ``series`` column):

* ``tp1-zero1=-1``: optimizer state sharded over all n GPUs (``sharding="zero1"``);
* ``tp1-zero1=8``: sharded inside each node, replicated across nodes
  (``sharding="zero1", shard_group=8``);
* ``flops-nockpt`` and ``flops-ckpt`` (zero1=8, packed samples; the second with full
  activation checkpointing, :func:`scalemodel.checkpointing.with_recompute`), with their
  ``-batch`` rows (other micro-batch or accumulation at 512 / 1024 GPUs) predicted from
  the same calibration.

The tensor-parallel series (``tp2-...``) are not evaluated: a fitted cluster with
``tp=`` is refused by :func:`scalemodel.iteration_time` (``scalemodel.parallel``).

Protocol (fixed before the predictions were compared with the table):

1. **Two runs calibrate**: a series' rows at 8 and 64 GPUs (one node, and the largest
   count <= 64), given to :func:`scalemodel.fit_cluster` as ``tokens_per_second_per_gpu``
   with the job's sharding (and ``shard_group``), its fusion (InternLM's
   ``reduce_bucket_size = 512 * 1024 * 1024`` elements, bf16: 1 GiB buckets, no small
   first bucket; ``configs/7B_sft.py``, ``InternLM/InternLM`` at commit 0047876) and the
   ring all-reduce, 8 GPUs and 4 NICs of 100 Gbit/s per node.
2. **Three explanations** of the same two runs, each predicting every row: ``auto`` (the
   fit's own choice of free parameters), ``latency`` (``fit=("efficiency", "alpha")``:
   the per-step network latency, which a ring pays 2(n-1) times per all-reduce) and
   ``straggler`` (``fit=("efficiency", "straggler_spread")``: the wait for the slowest of
   n workers, Blom's order statistic).
3. **Held out**: the rows at 128 to 1024 GPUs (and the ``-batch`` rows). Error =
   predicted / published TGS - 1; "inside" = the published TGS within the interval
   that ``iteration_time(...).scaling_factor_interval`` implies.
4. **Baseline "flat"**: per-GPU throughput constant, the 64-GPU calibration row's TGS
   carried to every held-out row of the series (for the ``-batch`` rows: of their own
   series' 64-GPU row).

After the tables, a **diagnosis** (written after the errors were seen, on every row; not
a prediction): the step-time gap between the two tp=1 series against growth laws, NCCL's
own latency and all-reduce models, the straggler spread the zero1=8 growth would need,
and a candidate term for InternLM's per-rank parameter broadcasts whose one constant
comes from the 64-GPU rows. None of it changes the library's predictions above.

Run: ``python benchmarks/validate_large_n.py`` (about 20-30 s on this project's 2-core
machine); writes ``benchmarks/results/validate_large_n.txt`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import scalemodel as sm
from scalemodel.checkpointing import with_recompute
from scalemodel.fusion import DDPBuckets
from scalemodel.workloads import TransformerConfig

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published_large_n.csv"
RESULTS = HERE / "results"

CALIBRATION_N = (8, 64)
"""The two worker counts that calibrate each series [GPUs]."""

HELD_OUT_MIN_N = 128
"""Rows at this many GPUs or more are held out [GPUs]."""

BW = 100e9
"""Line rate of one NIC: 100 Gbit/s RoCE, four per node ("4 * 100Gb RoCE") [bits/s]."""

TOPO = dict(gpus_per_node=8, nics_per_node=4,
            intra_bw=sm.get_gpu("a100-80gb").intra_node_bw)

BUCKET_BYTES = 512 * 1024 * 1024 * 2
"""InternLM's hybrid-zero ``reduce_bucket_size`` (512 Mi elements, compared with
``numel``) in bf16 [bytes]."""

FUSION = DDPBuckets(cap_bytes=BUCKET_BYTES, first_bucket_bytes=BUCKET_BYTES)

EXPLANATIONS = {"auto": None, "latency": ("efficiency", "alpha"),
                "straggler": ("efficiency", "straggler_spread")}

EVALUATED = {"tp1-zero1=-1": None, "tp1-zero1=8": None, "flops-nockpt": None,
             "flops-ckpt": None, "flops-nockpt-batch": "flops-nockpt",
             "flops-ckpt-batch": "flops-ckpt"}
"""Series evaluated, each with the series that calibrates it (None: itself)."""


def load_rows():
    """The CSV's rows with numeric fields converted."""
    with open(DATA, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for key in ("row", "gpus", "tp", "micro_batch", "grad_accum", "seq"):
            r[key] = int(r[key])
        r["tgs"] = float(r["tokens_per_s_per_gpu"])
        r["shard_group"] = int(r["shard_group"]) if r["shard_group"] else None
        r["checkpointing"] = r["activation_checkpointing"] == "True"
    return rows


def profile_for(row):
    """InternLM-7B at the row's micro-batch and accumulation, FLOP-derived on A100."""
    cfg = TransformerConfig(layers=32, hidden=4096, heads=32, ffn=11008, vocab=103168,
                            seq=row["seq"], micro_batch=row["micro_batch"], dtype="bf16",
                            bias=True, name="internlm-7b")
    prof = sm.transformer_profile(cfg, "a100-80gb", grad_accum=row["grad_accum"])
    return with_recompute(prof, "full") if row["checkpointing"] else prof


def _run(row):
    run = dict(model=profile_for(row), n=row["gpus"], bw=BW, sharding=row["sharding"],
               tokens_per_second_per_gpu=row["tgs"], label=f"row {row['row']}")
    if row["shard_group"] is not None:
        run["shard_group"] = row["shard_group"]
    return run


def calibrate(cal_rows, fit):
    """The cluster fitted on the calibration rows under one explanation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster([_run(r) for r in cal_rows], algorithm="ring", fusion=FUSION,
                              fit=fit, **TOPO)


def predict(row, cluster):
    """Predicted TGS of a row and the (low, high) TGS of its interval [tokens/s]."""
    it = sm.iteration_time(profile_for(row), row["gpus"], BW, sharding=row["sharding"],
                           shard_group=row["shard_group"], fusion=FUSION, algorithm="ring",
                           cluster=cluster, **TOPO)
    tokens = row["micro_batch"] * row["seq"] * row["grad_accum"]
    total, sf = float(it.total), float(it.scaling_factor)
    lo, hi = it.scaling_factor_interval
    return tokens / total, (tokens * lo / (total * sf), tokens * hi / (total * sf))


def evaluate():
    """Every evaluated row's predictions under each explanation, and the fits."""
    rows = load_rows()
    by_series = {}
    for r in rows:
        by_series.setdefault(r["series"], []).append(r)
    fits, entries = {}, []
    for series, cal_series in EVALUATED.items():
        own = cal_series or series
        cal = [r for r in by_series[own] if r["gpus"] in CALIBRATION_N]
        flat = next(r["tgs"] for r in cal if r["gpus"] == max(CALIBRATION_N))
        for name, fit in EXPLANATIONS.items():
            if (own, name) not in fits:
                fits[(own, name)] = calibrate(cal, fit)
            cluster = fits[(own, name)].cluster
            for r in by_series[series]:
                if r in cal:
                    continue
                pred, (lo, hi) = predict(r, cluster)
                entries.append(dict(series=series, row=r["row"], n=r["gpus"],
                                    micro_batch=r["micro_batch"],
                                    grad_accum=r["grad_accum"], explanation=name,
                                    published=r["tgs"], predicted=pred, low=lo, high=hi,
                                    error=pred / r["tgs"] - 1, flat=flat / r["tgs"] - 1,
                                    held_out=bool(r["gpus"] >= HELD_OUT_MIN_N or cal_series)))
    return entries, fits


def summary(entries):
    """Median and largest |error|, the flat baseline's, and how many are inside."""
    e = [abs(x["error"]) for x in entries]
    f = [abs(x["flat"]) for x in entries]
    inside = sum(x["low"] * (1 - 1e-9) <= x["published"] <= x["high"] * (1 + 1e-9)
                 for x in entries)
    return dict(rows=len(entries), median=statistics.median(e), largest=max(e),
                flat_median=statistics.median(f), flat_largest=max(f), inside=inside)


def _table(entries):
    head = ["row", "GPUs", "mb x acc", "published", "predicted", "error", "interval",
            "flat"]
    body = [[str(x["row"]), str(x["n"]), f"{x['micro_batch']} x {x['grad_accum']}",
             f"{x['published']:.0f}", f"{x['predicted']:.0f}",
             f"{100 * x['error']:+.1f} %", f"{x['low']:.0f}-{x['high']:.0f}",
             f"{100 * x['flat']:+.1f} %"] for x in entries]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


def _say_summary(say, what, s):
    say(f"{what}: {s['rows']} rows; median |error| {100 * s['median']:.1f} %, largest "
        f"{100 * s['largest']:.1f} %; {s['inside']}/{s['rows']} inside the interval; "
        f"flat: median {100 * s['flat_median']:.1f} %, largest "
        f"{100 * s['flat_largest']:.1f} %")


def _fit_lines(fit):
    out = []
    for name, p in fit.parameters.items():
        if p.status != "fitted":
            continue
        lo, hi = p.interval
        fmt = (lambda v: "unbounded" if v is None else f"{v:.4g}")
        out.append(f"{name} {p.value:.4g} [{fmt(lo)}, {fmt(hi)}] {p.unit}")
    return "; ".join(out) or "nothing fitted"


def report(entries, fits, say):
    """Print the tables and summaries."""
    for (series, name), fit in fits.items():
        say(f"fit {series} / {name}: {_fit_lines(fit)}")
    say("")
    for series in EVALUATED:
        for name in EXPLANATIONS:
            sel = [x for x in entries if x["series"] == series and x["explanation"] == name]
            say(f"== {series}, explanation '{name}'", *_table(sel), "")
    say("== held-out rows (128-1024 GPUs and the -batch rows)")
    for name in EXPLANATIONS:
        for series in EVALUATED:
            sel = [x for x in entries if x["series"] == series
                   and x["explanation"] == name and x["held_out"]]
            _say_summary(say, f"  {name:9s} {series:18s}", summary(sel))
        _say_summary(say, f"  {name:9s} {'all series':18s}",
                     summary([x for x in entries if x["explanation"] == name
                              and x["held_out"]]))


NCCL_BCAST_LATENCY = 8.4e-6 + 14e-6
"""NCCL's own latency of one ring broadcast across nodes, Simple protocol: base 8.4 us
plus one network hop latency 14 us (``../shared/notes/nccl_cost_model.md`` section 3,
from NVIDIA/nccl ``src/graph/tuning.cc``) [s]."""

SHAPES = {"c (n - 1)": lambda n: n - 1.0, "c e_n (Blom)": None,
          "c log2 n": lambda n: np.log2(n), "c n (n - 1)": lambda n: n * (n - 1.0)}
"""Growth laws tried on the measured gap: ring steps (or one fixed cost per broadcast,
n broadcasts), the straggler wait, tree depth, n ring broadcasts' pipeline fill."""


def broadcast_gap(rows):
    """Step time of the zero1=-1 series minus that of zero1=8 at each n [s]: the same
    all-reduce of all gradients over the n GPUs (InternLM's ``_reduce_and_copy``,
    ``reduce_rank=None``), but the parameters broadcast by one ``dist.broadcast`` per rank
    of the ZeRO group: n broadcasts over all GPUs against 8 inside a node
    (``broadcast_params``, ``internlm/solver/optimizer/hybrid_zero_optim.py``)."""
    tok = {}
    for r in rows:
        if r["series"] in ("tp1-zero1=-1", "tp1-zero1=8"):
            t = r["micro_batch"] * r["seq"] * r["grad_accum"] / r["tgs"]
            tok.setdefault(r["gpus"], {})[r["series"]] = t
    ns = np.array(sorted(n for n in tok if n > 8), dtype=float)
    gap = np.array([tok[n]["tp1-zero1=-1"] - tok[n]["tp1-zero1=8"] for n in ns.astype(int)])
    return ns, gap


def diagnose(rows, say):
    """Which growth law the measured large-n loss follows (uses every row: a diagnosis,
    not a prediction)."""
    from scalemodel.model import expected_max_normal

    ns, gap = broadcast_gap(rows)
    say("== diagnosis (all rows; not a prediction)",
        "step time, zero1=-1 minus zero1=8 (same all-reduce; n broadcasts over all GPUs "
        "against 8 inside a node) [s]:",
        "  " + ", ".join(f"{int(n)}: {g:.3f}" for n, g in zip(ns, gap)))
    for name, f in SHAPES.items():
        x = expected_max_normal(ns.astype(int)) if f is None else f(ns)
        c = float(x @ gap / (x @ x))
        rms = float(np.sqrt(np.mean((c * x - gap) ** 2)))
        say(f"  least-squares {name:13s}: c = {c:.4g}, rms miss {rms:.3f} s "
            f"({100 * rms / float(np.mean(gap)):.0f} % of the mean gap)")
    say(f"  NCCL's own latency for n ring broadcasts, n x {NCCL_BCAST_LATENCY * 1e6:.1f} us: "
        + ", ".join(f"{int(n)}: {n * NCCL_BCAST_LATENCY:.3f}" for n in ns) + " s")
    _diagnose_all_reduce(rows, say)


def _diagnose_all_reduce(rows, say):
    """The zero1=8 series' growth from 64 GPUs against NCCL's own all-reduce time of the
    step's 1 GiB buckets at n (:func:`scalemodel.nccl.nccl_choice`, NCCL 2.30)."""
    from scalemodel.nccl import nccl_choice

    sr = {r["gpus"]: r for r in rows if r["series"] == "tp1-zero1=8"}
    step = {n: r["micro_batch"] * r["seq"] * r["grad_accum"] / r["tgs"] for n, r in sr.items()}
    grad_bytes = sum(profile_for(sr[64]).tensor_bytes)
    buckets = int(np.ceil(grad_bytes / BUCKET_BYTES))
    say(f"zero1=8: step time growth from 64 GPUs, measured, against NCCL's own model of "
        f"the {buckets} all-reduces of <= 1 GiB ({grad_bytes / 2**30:.1f} GiB of bf16 "
        f"gradients) [s]:")
    nccl = {}
    for n in sorted(sr):
        if n >= 64:
            c = nccl_choice("all_reduce", float(BUCKET_BYTES), n, n // 8, arch="ampere",
                            intra="nvlink", inter_bw=BW, nics_per_node=4)
            nccl[n] = (buckets * float(c.time), f"{c.algorithm}/{c.protocol}")
    say("  " + ", ".join(f"{n}: {step[n] - step[64]:+.3f} measured, "
                         f"{nccl[n][0] - nccl[64][0]:+.3f} NCCL ({nccl[n][1]})"
                         for n in sorted(nccl) if n > 64))
    _diagnose_straggler(step, say)


def _diagnose_straggler(step, say):
    """The straggler spread that the zero1=8 series' growth from 64 to 1024 GPUs would
    need, and the loss from 8 to 64 GPUs it then implies (eq. straggler-max)."""
    from scalemodel.model import expected_max_normal

    e = {n: float(expected_max_normal(n)) for n in (8, 64, 1024)}
    r = step[1024] / step[64]  # = (1 + s e_1024) / (1 + s e_64), the whole step waiting
    s = (r - 1) / (e[1024] - r * e[64])
    implied = (1 + s * e[64]) / (1 + s * e[8]) - 1
    say(f"zero1=8: a straggler spread s = {s:.3f} would explain 64 -> 1024 GPUs; it implies "
        f"{100 * implied:.1f} % longer steps from 8 to 64 GPUs, measured "
        f"{100 * (step[64] / step[8] - 1):.1f} %")


def internlm_tensors():
    """Element counts of InternLM-7B's parameters in the order InternLM's
    ``ParamBcastSyncHandler`` walks them: embedding, per block fused Wqkv (weight, bias),
    out_proj (weight, bias), two RMSNorms, w1, w2, w3; final norm; head."""
    h, f, v, layers = 4096, 11008, 103168, 32
    block = [3 * h * h, 3 * h, h * h, h, h, h, f * h, f * h, f * h]
    return [v * h] + block * layers + [h, v * h]


def broadcast_count(n):
    """How many ranks of a ZeRO group of ``n`` own parameters, hence broadcast them, under
    InternLM's allocation (``ParamBcastSyncHandler.__init__``, ``internlm/solver/
    optimizer/utils.py``: a parameter moves to the next rank once the current one holds
    more than 1.01 x total / n) [broadcasts]."""
    elems = internlm_tensors()
    avg = sum(elems) * 1.0 // n
    alloc, rank, owners = 0, 0, set()
    for e in elems:
        alloc += e
        if alloc > avg * 1.01 and rank < n - 1:
            rank, alloc = rank + 1, 0
        owners.add(rank)
    return len(owners)


def ring_fill(n):
    """NCCL's latency for a chunk to pass all ``n - 1`` hops of a ring over nodes of 8
    GPUs, Simple protocol: base 8.4 us, NVLink hops 3.4 us, network hops 14 us plus as
    much again for the Simple flush (``../shared/notes/nccl_cost_model.md`` section 3, as
    NCCL counts a ring all-reduce's steps; its own broadcast model counts one hop) [s]."""
    inter = n // 8 - 1
    return 8.4e-6 + (n - 1 - inter) * 3.4e-6 + inter * 2 * 14e-6


def broadcast_term(entries, rows, say):
    """A candidate term, for the zero1=-1 series: InternLM's ``broadcast_count(n)``
    broadcasts, each with a fixed cost ``c`` plus a ring's fill; ``c`` from the 64-GPU rows
    of the two tp=1 series only (calibration rows), added to the library's ``auto``
    prediction as G(n) - G(64)."""
    ns, gap = broadcast_gap(rows)
    b64 = broadcast_count(64)
    c = (float(gap[list(ns).index(64)]) - b64 * ring_fill(64)) / b64

    def term(n):
        return broadcast_count(n) * (c + ring_fill(n))

    say("candidate term for zero1=-1 (diagnostic; c from the 64-GPU rows): "
        f"G(n) = B(n) (c + fill(n)), c = {1e3 * c:.2f} ms per broadcast; B(n) = "
        + ", ".join(f"{int(n)}: {broadcast_count(int(n))}" for n in ns))
    say("  G(n) against the measured gap [s]: " + ", ".join(
        f"{int(n)}: {term(int(n)):.3f} / {g:.3f}" for n, g in zip(ns, gap)))
    errs = []
    for x in entries:
        if x["series"] != "tp1-zero1=-1" or x["explanation"] != "auto" or not x["held_out"]:
            continue
        r = next(r for r in rows if r["row"] == x["row"])
        tokens = r["micro_batch"] * r["seq"] * r["grad_accum"]
        pred = tokens / (tokens / x["predicted"] + term(x["n"]) - term(64))
        errs.append(pred / x["published"] - 1)
        say(f"  row {x['row']} ({x['n']} GPUs): published {x['published']:.0f}, auto + "
            f"G(n) - G(64) {pred:.0f} ({100 * errs[-1]:+.1f} %)")
    a = [abs(e) for e in errs]
    say(f"  held out: median |error| {100 * statistics.median(a):.1f} %, largest "
        f"{100 * max(a):.1f} % (auto alone: see above)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true",
                    help="print only; do not write benchmarks/results/validate_large_n.txt")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    lines = []

    def say(*text):
        for t in text:
            print(t, flush=True)
            lines.append(t)

    say("InternLM-7B hybrid ZeRO-1 on 8-1024 A100 (InternLM's training-performance "
        "tables), calibrated on the rows at 8 and 64 GPUs (issue 17, item 4)", "")
    entries, fits = evaluate()
    report(entries, fits, say)
    say("")
    diagnose(load_rows(), say)
    broadcast_term(entries, load_rows(), say)
    say("", "not evaluated: the tp=2 series (a fitted cluster with tp= is refused)",
        f"({time.perf_counter() - t0:.0f} s; scalemodel {sm.__version__})")
    if not args.no_write:
        from scalemodel.profiles import atomic_write_files
        RESULTS.mkdir(exist_ok=True)
        atomic_write_files({RESULTS / "validate_large_n.txt": "\n".join(lines) + "\n"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
