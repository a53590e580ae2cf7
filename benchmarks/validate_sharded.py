"""Sharded training (FSDP FULL_SHARD = ZeRO-3): predicted against published throughput.

The data are the 29 rows of ``benchmarks/data/published_sharded.csv``: MosaicML's LLM
Foundry benchmark table (``mosaicml/llm-foundry``, ``scripts/train/benchmarking/README.md``
at commit 061f2c7), MPT models of 1.3 to 65 billion parameters trained with PyTorch FSDP
``FULL_SHARD`` on 8 to 128 A100 (40 and 80 GB) or H100 GPUs. Each row gives the GPUs, the
micro-batch, the gradient accumulation, whether activations were checkpointed and the
measured tokens per second.

Protocol (stated before looking at the errors):

1. **The workload from the configuration.** Each MPT model is a
   :class:`scalemodel.TransformerConfig` from its ``scripts/train/yamls/pretrain/mpt-*.yaml``
   (d_model, n_heads, n_layers, expansion 4, vocabulary 50368, 2,048 learned positions,
   biases, LayerNorm, tied embeddings); its exact parameter count must equal the table's
   ``NumParams`` (checked). Per row: the row's micro-batch and sequence, bf16; with
   activation checkpointing the backward pass recomputes the forward (3x instead of 2x
   the forward FLOPs, as the table's HFU counts it); gradient accumulation repeats the
   forward and backward, with all their collectives, ``grad_accum`` times per optimizer
   step.
2. **The network from the table or the usual server.** A100 rows: the stated 1600 Gbit/s
   per node, as 8 NICs of 200 Gbit/s (DGX A100 / p4d); H100 rows state none: the usual
   DGX H100, 8 NICs of 400 Gbit/s (``scalemodel/data/gpus.json``). 8 GPUs per node with
   the GPU's NVLink rate; ring collectives; no latency; ``MixedPrecision`` "PURE"
   (bf16 parameters and reduce), as the A100 rows state (the H100 rows do not).
3. **One fitted number per series.** For each (model, GPU) series, the compute
   efficiency (MFU of the compute alone) is fitted so that the model reproduces the
   row with the **fewest GPUs** exactly (bisection on the efficiency); every other row of
   the series is then predicted with it. Nothing else is fitted.
4. **Error** = predicted / published tokens per second per GPU - 1, on the predicted rows
   only (the calibration rows are 0 by construction).

The baseline "flat" assumes the per-GPU throughput of the calibration row at every GPU
count (perfect weak scaling); the model must do at least as well where communication
matters. On these runs communication is mostly hidden, so both are close: the table says
how close and where the model differs.

Run: ``python benchmarks/validate_sharded.py``.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import attrs

import scalemodel as sm
from scalemodel.workloads import transformer_profile

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published_sharded.csv"

MPT = {  # scripts/train/yamls/pretrain/mpt-*.yaml of mosaicml/llm-foundry
    "mpt-1b": dict(layers=24, hidden=2048, heads=16),
    "mpt-3b": dict(layers=32, hidden=2560, heads=20),
    "mpt-7b": dict(layers=32, hidden=4096, heads=32),
    "mpt-13b": dict(layers=40, hidden=5120, heads=40),
    "mpt-30b": dict(layers=48, hidden=7168, heads=56),
    "mpt-70b": dict(layers=80, hidden=8192, heads=64),
}
"""MPT shapes: n_layers, d_model, n_heads of llm-foundry's pretraining YAMLs."""

NETWORK = {  # per-NIC line rate and NICs per node
    "a100-40gb": (200e9, 8, "1600 Gbit/s per node as stated, 8 x 200 Gbit/s"),
    "a100-80gb": (200e9, 8, "1600 Gbit/s per node as stated, 8 x 200 Gbit/s"),
    "h100-sxm": (400e9, 8, "not stated; DGX H100, 8 x 400 Gbit/s"),
}


def mpt_config(model, seq, micro_batch):
    """The TransformerConfig of an MPT model (see :data:`MPT`)."""
    s = MPT[model]
    return sm.TransformerConfig(
        layers=s["layers"], hidden=s["hidden"], heads=s["heads"], ffn=4 * s["hidden"],
        vocab=50368, seq=seq, micro_batch=micro_batch, dtype="bf16", tied_embeddings=True,
        gated_ffn=False, norm="layernorm", bias=True, prenorm=True, learned_positions=2048,
        final_norm=True, name=model)


_HFU: dict = {}


def published_rows():
    """The table's rows with their MPT configuration (parameter count checked)."""
    rows = []
    with open(DATA) as fh:
        for r in csv.DictReader(fh):
            _HFU[int(r["row"])] = float(r["hfu_percent"]) / 100
            cfg = mpt_config(r["model"], int(r["seq"]), int(r["micro_batch"]))
            if cfg.parameter_count != int(r["parameters"]):
                raise SystemExit(f"row {r['row']}: {r['model']} has {cfg.parameter_count} "
                                 f"parameters here, {r['parameters']} in the table")
            rows.append(dict(row=int(r["row"]), model=r["model"], gpu=r["gpu"],
                             n=int(r["gpus"]), micro_batch=int(r["micro_batch"]),
                             seq=int(r["seq"]), grad_accum=int(r["grad_accum"]),
                             checkpointing=r["activation_checkpointing"] == "True",
                             tokens_per_gpu=float(r["tokens_per_s_per_gpu"]),
                             mfu=float(r["mfu_percent"]) / 100, config=cfg))
    return rows


def profile_for(row, efficiency):
    """The row's workload profile at a compute efficiency [-]."""
    p = transformer_profile(row["config"], row["gpu"], efficiency=efficiency,
                            name=f"{row['model']}-row{row['row']}")
    if row["checkpointing"]:  # backward recomputes the forward: 3 F instead of 2 F
        p = attrs.evolve(p, tensor_ready=1.5 * p.tensor_ready,
                         backward_time=1.5 * p.backward_time)
    return p


def predicted_step(row, efficiency):
    """Predicted tokens per second per GPU [tokens/s] of the row's run, and the share of
    its step that is exposed communication [-]."""
    bw, nics, _ = NETWORK[row["gpu"]]
    it = sm.iteration_time(profile_for(row, efficiency), row["n"], bw, sharding="zero3",
                           gpus_per_node=8, nics_per_node=nics,
                           intra_bw=sm.get_gpu(row["gpu"]).intra_node_bw)
    micro = it.total - it.update  # forward, backward and their collectives
    step = row["grad_accum"] * micro + it.update
    tokens = row["grad_accum"] * row["micro_batch"] * row["seq"] / step
    return tokens, row["grad_accum"] * it.exposed_communication / step


def predicted_tokens_per_gpu(row, efficiency):
    """Tokens per second per GPU of the row's run, predicted [tokens/s]."""
    return predicted_step(row, efficiency)[0]


def fit_efficiency(row):
    """The efficiency that reproduces ``row`` exactly (bisection in log efficiency) [-]."""
    import math

    lo, hi = math.log(1e-3), math.log(1.0)
    if predicted_tokens_per_gpu(row, 1.0) < row["tokens_per_gpu"]:
        return 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if predicted_tokens_per_gpu(row, math.exp(mid)) < row["tokens_per_gpu"]:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return math.exp(0.5 * (lo + hi))


def evaluate():
    """Every row with its prediction: a list of dicts, and (median, largest) absolute
    error of the model and of the flat baseline over the predicted rows."""
    rows = published_rows()
    series = {}
    for r in rows:
        series.setdefault((r["model"], r["gpu"]), []).append(r)
    out = []
    for (model, gpu), members in series.items():
        members.sort(key=lambda r: (r["n"], r["row"]))
        cal = members[0]
        eff = fit_efficiency(cal)
        for r in members:
            pred, exposed = predicted_step(r, eff)
            mem = sm.memory(r["config"], r["n"], sharding="zero3", gpu=gpu,
                            activation_checkpointing=r["checkpointing"])
            out.append(dict(r, efficiency=eff, predicted=pred,
                            error=pred / r["tokens_per_gpu"] - 1,
                            flat_error=cal["tokens_per_gpu"] / r["tokens_per_gpu"] - 1,
                            calibration=r is cal, memory=float(mem.per_gpu),
                            fits=bool(mem.fits), exposed=exposed,
                            same_batch=r["micro_batch"] == cal["micro_batch"],
                            hfu=float(_HFU[r["row"]])))
    held = [r for r in out if not r["calibration"]]
    same = [r for r in held if r["same_batch"]]
    stats = {
        "same_batch": (len(same), statistics.median(abs(r["error"]) for r in same),
                       max(abs(r["error"]) for r in same)),
        "model": (statistics.median(abs(r["error"]) for r in held),
                  max(abs(r["error"]) for r in held)),
        "flat": (statistics.median(abs(r["flat_error"]) for r in held),
                 max(abs(r["flat_error"]) for r in held)),
        "predicted_rows": len(held), "series": len(series),
    }
    out.sort(key=lambda r: r["row"])
    return out, stats


def table(results):
    """Header and rows of the validation table (text)."""
    head = ["row", "model", "GPU", "GPUs", "mb x ga", "ckpt", "published tok/s/GPU",
            "predicted", "error", "flat", "exposed comm", "memory GiB (fits)"]
    body = []
    for r in results:
        body.append([str(r["row"]), r["model"], r["gpu"], str(r["n"]),
                     f"{r['micro_batch']} x {r['grad_accum']}",
                     "yes" if r["checkpointing"] else "no",
                     f"{r['tokens_per_gpu']:.0f}", f"{r['predicted']:.0f}",
                     f"fitted: {r['efficiency']:.3f} (HFU {r['hfu']:.3f})" if r["calibration"]
                     else f"{100 * r['error']:+.1f} %",
                     "" if r["calibration"] else f"{100 * r['flat_error']:+.1f} %",
                     f"{100 * r['exposed']:.1f} %",
                     f"{r['memory'] / 2**30:.1f} ({'yes' if r['fits'] else 'NO'})"])
    return head, body


def main(argv=None):
    results, stats = evaluate()
    head, body = table(results)
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for b in body:
        print("  ".join(c.rjust(w) for c, w in zip(b, widths)))
    m, f = stats["model"], stats["flat"]
    print(f"\n{stats['predicted_rows']} rows predicted ({stats['series']} series, one "
          f"efficiency fitted per series on its fewest-GPU row): median |error| "
          f"{100 * m[0]:.1f} %, largest {100 * m[1]:.1f} %; flat baseline median "
          f"{100 * f[0]:.1f} %, largest {100 * f[1]:.1f} %")
    k, med, mx = stats["same_batch"]
    print(f"the {k} predicted rows with the calibration row's micro-batch: median |error| "
          f"{100 * med:.1f} %, largest {100 * mx:.1f} %")
    for gpu, (_, _, text) in NETWORK.items():
        print(f"network {gpu}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
