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

The tensor-parallel series (``tp2-...``) are predicted by transfer: the clusters fitted
on the tp=1 series (``tp1-zero1=-1`` for ``tp2-zero1=-1``; ``tp1-zero1=8``, the state
sharded inside a node, for ``tp2-zero1=4``, whose four data-parallel GPUs are a node)
answer every tp=2 row with ``tp=2`` (:meth:`scalemodel.ClusterProfile.ring_view`: each
node's four NICs carry the rings of its two tensor-parallel ranks). No tp=2 row calibrates.

Protocol (fixed before the predictions were compared with the table):

1. **Two runs calibrate**: a series' rows at 8 and 64 GPUs (one node, and the largest
   count <= 64), given to :func:`scalemodel.fit_cluster` as ``tokens_per_second_per_gpu``
   with the job's sharding (and ``shard_group``) as InternLM runs it: the updated
   parameters come back in one broadcast per rank of the ZeRO group that owns
   parameters (``Sharding(param_return="broadcast")``, the owners from
   :func:`scalemodel.sharding.broadcast_owners` on InternLM-7B's tensors: 8 in a group
   of 8; 16, 27, 44, 82, 130, 162, 162 in groups of 16 to 1024), each a ring broadcast
   with NCCL's pipeline fill (eq. ``broadcast`` of :mod:`scalemodel.sharding`, the
   library's default chunk: 512 KiB on 2 x 4 NICs = 8 channels); its fusion (InternLM's
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
   that ``iteration_time(...).total_interval`` implies (the step time over the fit's
   intervals, alternatives and efficiency).
4. **Baselines**: "all-gather", the same protocol with the parameters returned by
   bucketed all-gathers (DeepSpeed's ZeRO-1, scalemodel's only ZeRO-1 before
   ``param_return``: the previous version of this table); "flat", per-GPU throughput
   constant, the 64-GPU calibration row's TGS carried to every held-out row of the
   series (for the ``-batch`` rows: of their own series' 64-GPU row).

After the tables, a **diagnosis** (on every row; not a prediction): the step-time gap
between the two tp=1 series against growth laws, NCCL's own latency and all-reduce
models, the straggler spread the zero1=8 growth would need, what the library's broadcast
term adds from 64 GPUs against the measured gap, and the zero1=-1 predictions with NCCL
on 4 or 16 channels instead of 8 (a sensitivity: the channel rule was read from NCCL's
source, but this cluster's channel count is not published).

Run: ``python benchmarks/validate_large_n.py`` (about a minute on this project's 2-core
machine); writes ``benchmarks/results/validate_large_n.txt`` unless ``--no-write``.
"""

from __future__ import annotations

import csv
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

import scalemodel as sm
from scalemodel.checkpointing import with_recompute
from scalemodel.fusion import DDPBuckets
from scalemodel.sharding import Sharding, broadcast_owners
from scalemodel.workloads import TransformerConfig

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published_large_n.csv"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

from _report import Report, parser  # noqa: E402  (main()'s parser and output)

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

RETURNS = ("broadcast", "allgather")
"""How the model returns the updated parameters: ``"broadcast"``, InternLM's one
broadcast per owning rank of the ZeRO group (``Sharding(param_return="broadcast")``
with :func:`scalemodel.sharding.broadcast_owners`; the predictions), and
``"allgather"``, the bucketed all-gathers of DeepSpeed's ZeRO-1 that scalemodel
modelled before (shown beside them)."""

CHANNEL_SENSITIVITY = (4, 16)
"""NCCL ring channels tried beside the default 8 (2 x 4 NICs, ``nccl_ring_channels``)
for the zero1=-1 series: a sensitivity, not a prediction [channels]."""

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


def sharding_for(row, param_return="broadcast", channels=None):
    """The row's ZeRO-1 with its shard group (data-parallel GPUs: ``n / tp`` for the
    whole group); under ``"broadcast"`` InternLM's broadcasts, one per rank of the group
    that owns parameters, and (for the sensitivity) a chunk of NCCL's 512 KiB step on
    ``channels`` channels."""
    if param_return == "allgather":
        return Sharding(row["sharding"], shard_group=row["shard_group"])
    group = row["shard_group"] or row["gpus"] // row["tp"]
    return Sharding(row["sharding"], shard_group=row["shard_group"], param_return="broadcast",
                    broadcasts=broadcast_owners(internlm_tensors(), group),
                    broadcast_chunk=None if channels is None else channels * 512 * 1024)


def _run(row, param_return="broadcast", channels=None):
    run = dict(model=profile_for(row), n=row["gpus"], bw=BW,
               tokens_per_second_per_gpu=row["tgs"], label=f"row {row['row']}")
    if param_return == "allgather":  # the strategy name and the group, as before
        run["sharding"] = row["sharding"]
        if row["shard_group"] is not None:
            run["shard_group"] = row["shard_group"]
    else:  # a Sharding with param_return carries its group
        run["sharding"] = sharding_for(row, param_return, channels)
    return run


def calibrate(cal_rows, fit, param_return="broadcast", channels=None):
    """The cluster fitted on the calibration rows under one explanation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster([_run(r, param_return, channels) for r in cal_rows],
                              algorithm="ring", fusion=FUSION, fit=fit, **TOPO)


def predict(row, cluster, param_return="broadcast", channels=None):
    """Predicted TGS of a row and the (low, high) TGS of its interval [tokens/s]."""
    it = sm.iteration_time(profile_for(row), row["gpus"], BW,
                           sharding=sharding_for(row, param_return, channels),
                           fusion=FUSION, algorithm="ring", cluster=cluster,
                           tp=row["tp"], **TOPO)
    # a replica's tokens per step, over its tp GPUs (InternLM's TGS is per GPU)
    tokens = row["micro_batch"] * row["seq"] * row["grad_accum"] / row["tp"]
    t_lo, t_hi = it.total_interval
    return tokens / float(it.total), (0.0 if t_hi is None else tokens / t_hi, tokens / t_lo)


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
            for ret in RETURNS:
                if (own, name, ret) not in fits:
                    fits[(own, name, ret)] = calibrate(cal, fit, ret)
            clusters = {ret: fits[(own, name, ret)].cluster for ret in RETURNS}
            for r in by_series[series]:
                if r in cal:
                    continue
                pred, (lo, hi) = predict(r, clusters["broadcast"])
                gathered, _ = predict(r, clusters["allgather"], "allgather")
                entries.append(dict(series=series, row=r["row"], n=r["gpus"],
                                    micro_batch=r["micro_batch"],
                                    grad_accum=r["grad_accum"], explanation=name,
                                    published=r["tgs"], predicted=pred, low=lo, high=hi,
                                    error=pred / r["tgs"] - 1, flat=flat / r["tgs"] - 1,
                                    allgather=gathered / r["tgs"] - 1,
                                    held_out=bool(r["gpus"] >= HELD_OUT_MIN_N or cal_series)))
    return entries, fits


def summary(entries):
    """Median and largest |error|, the flat baseline's, and how many are inside."""
    e = [abs(x["error"]) for x in entries]
    f = [abs(x["flat"]) for x in entries]
    g = [abs(x["allgather"]) for x in entries]
    inside = sum(x["low"] * (1 - 1e-9) <= x["published"] <= x["high"] * (1 + 1e-9)
                 for x in entries)
    return dict(rows=len(entries), median=statistics.median(e), largest=max(e),
                flat_median=statistics.median(f), flat_largest=max(f), inside=inside,
                gather_median=statistics.median(g), gather_largest=max(g))


def _table(entries):
    head = ["row", "GPUs", "mb x acc", "published", "predicted", "error", "interval",
            "all-gather", "flat"]
    body = [[str(x["row"]), str(x["n"]), f"{x['micro_batch']} x {x['grad_accum']}",
             f"{x['published']:.0f}", f"{x['predicted']:.0f}",
             f"{100 * x['error']:+.1f} %", f"{x['low']:.0f}-{x['high']:.0f}",
             f"{100 * x['allgather']:+.1f} %", f"{100 * x['flat']:+.1f} %"]
            for x in entries]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


def _say_summary(say, what, s):
    say(f"{what}: {s['rows']} rows; median |error| {100 * s['median']:.1f} %, largest "
        f"{100 * s['largest']:.1f} %; {s['inside']}/{s['rows']} inside the interval; "
        f"all-gather: {100 * s['gather_median']:.1f} / {100 * s['gather_largest']:.1f} %; "
        f"flat: {100 * s['flat_median']:.1f} / {100 * s['flat_largest']:.1f} %")


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
    for (series, name, ret), fit in fits.items():
        say(f"fit {series} / {name} / {ret}: {_fit_lines(fit)}")
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


TP_TRANSFER = {"tp2-zero1=-1": "tp1-zero1=-1", "tp2-zero1=4": "tp1-zero1=8"}
"""The tensor-parallel series, each with the tp=1 series whose fit predicts it."""


def tp_transfer(fits, rows, say):
    """Every row of the tp=2 series predicted from the tp=1 series' fits (each
    explanation, the broadcasts): the transfer of a calibration to tensor parallelism.
    'flat' carries the tp=1 series' 64-GPU TGS over."""
    by = {}
    for r in rows:
        by.setdefault(r["series"], []).append(r)
    say("== tensor parallelism by transfer: the tp=1 fits (8 and 64 GPUs) predict every "
        "row of the tp=2 series (no tp=2 row calibrates)")
    out = []
    for series, cal in TP_TRANSFER.items():
        flat = next(r["tgs"] for r in by[cal] if r["gpus"] == max(CALIBRATION_N))
        for name in EXPLANATIONS:
            cluster = fits[(cal, name, "broadcast")].cluster
            sel = []
            for r in by[series]:
                pred, (lo, hi) = predict(r, cluster)
                sel.append(dict(series=series, row=r["row"], n=r["gpus"],
                                micro_batch=r["micro_batch"], grad_accum=r["grad_accum"],
                                explanation=name, published=r["tgs"], predicted=pred,
                                low=lo, high=hi, error=pred / r["tgs"] - 1,
                                flat=flat / r["tgs"] - 1, allgather=float("nan")))
            say(f"-- {series} from the {cal} fit, explanation '{name}'",
                *[ln.replace("  all-gather", "") for ln in _table_tp(sel)])
            s_ = summary([dict(x, allgather=0.0) for x in sel])
            say(f"   {len(sel)} rows; median |error| {100 * s_['median']:.1f} %, largest "
                f"{100 * s_['largest']:.1f} %; {s_['inside']}/{s_['rows']} inside the "
                f"interval; flat: {100 * s_['flat_median']:.1f} / "
                f"{100 * s_['flat_largest']:.1f} %", "")
            out += sel
    return out


def _table_tp(entries):
    head = ["row", "GPUs", "mb x acc", "published", "predicted", "error", "interval",
            "flat"]
    body = [[str(x["row"]), str(x["n"]), f"{x['micro_batch']} x {x['grad_accum']}",
             f"{x['published']:.0f}", f"{x['predicted']:.0f}",
             f"{100 * x['error']:+.1f} %", f"{x['low']:.0f}-{x['high']:.0f}",
             f"{100 * x['flat']:+.1f} %"] for x in entries]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


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


def broadcast_diagnosis(fits, rows, say):
    """What the library's broadcast term adds to the zero1=-1 step at each n (its
    ``auto`` fit, broadcast minus all-gather return), against the measured zero1=-1 minus
    zero1=8 gap; both from 64 GPUs on (the rows at 8 and 64 calibrate)."""
    ns, gap = broadcast_gap(rows)
    cluster = fits[("tp1-zero1=-1", "auto", "broadcast")].cluster
    series = {r["gpus"]: r for r in rows if r["series"] == "tp1-zero1=-1"}
    added = {}
    for n in ns.astype(int):
        r = series[n]
        t = {ret: float(sm.iteration_time(profile_for(r), n, BW,
                                          sharding=sharding_for(r, ret), fusion=FUSION,
                                          algorithm="ring", cluster=cluster, **TOPO).total)
             for ret in RETURNS}
        added[n] = t["broadcast"] - t["allgather"]
    g64 = float(gap[list(ns).index(64)])
    _fixed_cost(rows, say)
    eight = {r["gpus"]: r for r in rows if r["series"] == "tp1-zero1=8"}
    model_gap = {}
    for n in ns.astype(int):
        for ret in RETURNS:
            t = [float(sm.iteration_time(profile_for(r), n, BW, sharding=sharding_for(r, ret),
                                         fusion=FUSION, algorithm="ring", cluster=cluster,
                                         **TOPO).total) for r in (series[n], eight[n])]
            model_gap[(n, ret)] = t[0] - t[1]
    say("zero1=-1 minus zero1=8 step time with one cluster (the zero1=-1 auto fit), "
        "all-gather / broadcast model / measured [s]:",
        "  " + ", ".join(f"{int(n)}: {model_gap[(int(n), 'allgather')]:.3f} / "
                         f"{model_gap[(int(n), 'broadcast')]:.3f} / {g:.3f}"
                         for n, g in zip(ns, gap)))
    say("zero1=-1: the library's broadcast return (InternLM's owners, NCCL chain fill) "
        "minus all-gathers, against the measured gap, both from 64 GPUs [s]:",
        "  owners B(n): " + ", ".join(f"{int(n)}: {broadcast_owners(internlm_tensors(), int(n))}"
                                      for n in ns),
        "  " + ", ".join(f"{int(n)}: +{added[int(n)] - added[64]:.3f} model / "
                         f"+{g - g64:.3f} measured" for n, g in zip(ns, gap) if n > 64))


def _fixed_cost(rows, say):
    """The zero1=-1 series calibrated with a per-collective cost (``collective_overhead``,
    every broadcast's and reduce-scatter's) freed beside the efficiency: whether the two
    runs ask for a fixed cost per broadcast."""
    sr = [r for r in rows if r["series"] == "tp1-zero1=-1"]
    fit = calibrate([r for r in sr if r["gpus"] in CALIBRATION_N],
                    ("efficiency", "collective_overhead"))
    errs = [predict(r, fit.cluster)[0] / r["tgs"] - 1 for r in sr
            if r["gpus"] >= HELD_OUT_MIN_N]
    say(f"zero1=-1 with collective_overhead freed: {_fit_lines(fit)}; held out "
        + ", ".join(f"{100 * e:+.1f} %" for e in errs))


def channel_sensitivity(rows, say):
    """The zero1=-1 held-out rows with NCCL's ring on other channel counts than the
    default (2 x 4 NICs = 8): the fill's chunk scales with them. A sensitivity, not a
    prediction (calibrated the same way, on the rows at 8 and 64 GPUs)."""
    sr = [r for r in rows if r["series"] == "tp1-zero1=-1"]
    cal = [r for r in sr if r["gpus"] in CALIBRATION_N]
    for ch in CHANNEL_SENSITIVITY:
        cluster = calibrate(cal, None, "broadcast", ch).cluster
        errs = []
        for r in sr:
            if r["gpus"] >= HELD_OUT_MIN_N:
                pred, _ = predict(r, cluster, "broadcast", ch)
                errs.append((r["gpus"], pred / r["tgs"] - 1))
        a = [abs(e) for _, e in errs]
        say(f"  {ch:2d} channels (chunk {ch * 0.5:g} MiB): " + ", ".join(
            f"{n}: {100 * e:+.1f} %" for n, e in errs)
            + f"; median {100 * statistics.median(a):.1f} %, largest {100 * max(a):.1f} %")


NCCL_HELD = (("alpha 14 us per network hop", {}),
              ("and 3.4 us per NVLink hop", {"intra_alpha": 3.4e-6}))
"""The latencies held in :func:`latency_sensitivity`: NCCL's own per-hop latencies of its
Simple-protocol ring (``scalemodel.fit_priors.NCCL_HOP_LATENCY``), across nodes, and
inside a node as well."""


def latency_sensitivity(rows, say):
    """The zero1=-1 series calibrated (auto, rows at 8 and 64 GPUs) with the latency held
    at NCCL's own per-hop values instead of 0: why ``fit_cluster``'s point keeps 0 and
    takes NCCL's value as the end of an interval only (``fit_priors.NCCL_HOP_LATENCY``).
    Not a prediction."""
    sr = [r for r in rows if r["series"] == "tp1-zero1=-1"]
    cal = [r for r in sr if r["gpus"] in CALIBRATION_N]
    for label, extra in NCCL_HELD:
        topo = dict(TOPO, **extra)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = sm.fit_cluster([_run(r, "broadcast", None) for r in cal],
                                     algorithm="ring", fusion=FUSION, alpha=14e-6,
                                     **topo).cluster
        errs = []
        for r in sr:
            if r["gpus"] >= HELD_OUT_MIN_N:
                it = sm.iteration_time(profile_for(r), r["gpus"], BW,
                                       sharding=sharding_for(r, "broadcast", None),
                                       fusion=FUSION, algorithm="ring", cluster=cluster,
                                       tp=r["tp"], **topo)
                tokens = r["micro_batch"] * r["seq"] * r["grad_accum"] / r["tp"]
                errs.append((r["gpus"], tokens / float(it.total) / r["tgs"] - 1))
        say(f"  {label:27s}: " + ", ".join(f"{n}: {100 * e:+.1f} %" for n, e in errs))


def main(argv=None):
    args = parser(__doc__, "print only; do not write "
                  "benchmarks/results/validate_large_n.txt").parse_args(argv)
    printed = Report()
    say = printed.say
    say("InternLM-7B hybrid ZeRO-1 on 8-1024 A100 (InternLM's training-performance "
        "tables), calibrated on the rows at 8 and 64 GPUs (issue 17, item 4)", "")
    entries, fits = evaluate()
    report(entries, fits, say)
    say("")
    diagnose(load_rows(), say)
    broadcast_diagnosis(fits, load_rows(), say)
    say("zero1=-1, sensitivity to NCCL's channel count (auto; not a prediction):")
    channel_sensitivity(load_rows(), say)
    say("zero1=-1, the latency held at NCCL's own per-hop values (auto; not a prediction; "
        "the fit's point holds 0):")
    latency_sensitivity(load_rows(), say)
    say("")
    tp_transfer(fits, load_rows(), say)
    say(printed.elapsed_line())
    if not args.no_write:
        printed.write(RESULTS / "validate_large_n.txt")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_large_n"))
