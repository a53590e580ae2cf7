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
   the forward FLOPs, as the table's HFU counts it); gradient accumulation as the
   profile's ``grad_accum``: forward and backward, with all their collectives,
   ``grad_accum`` times per optimizer step.
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

**Second source, where communication matters**: ``benchmarks/data/published_sharded_network.csv``,
the DeepSpeed ZeRO-3 baseline of the ZeRO++ blog (``microsoft/DeepSpeed`` ``blogs/zeropp``,
figures 6 to 8; Wang et al., arXiv:2306.10209): TFLOP/s per GPU on 384 V100 GPUs with 1, 2,
4 or 8 InfiniBand links of 100 Gbit/s per node, the values printed on the bars (rounded to
1 TFLOP/s). Protocol, stated before looking at the errors:

1. **Workload**: only models whose shape a reachable source states: the 18B GPT-2 of
   DeepSpeed's ZeRO++ tutorial (40 layers, width 6144, 32 heads, sequence 512; about 18
   billion parameters, checked); the micro-batch is the figure's tokens per GPU over 512;
   fp16; activation checkpointing (the tutorial's flags). The 49B, 91B and 138B rows are
   recorded, not predicted.
2. **Published time**: the TFLOP/s are read as Megatron-DeepSpeed counts them (Megatron's
   formula with the factor 4 of activation checkpointing), so a step takes
   ``tokens x megatron_flops_per_token / TFLOP/s``.
3. **Network**: 16 GPUs per node (DGX-2, as the tutorial's nodes), k links of 100 Gbit/s as
   the figure states, line rate, no latency, ring collectives; NVLink at the V100's rate.
4. **One fitted number per series** (model, tokens per GPU): the compute efficiency, on the
   row with the **highest bandwidth**; the other rows are predicted. The flat baseline
   keeps the calibration row's TFLOP/s.

The "serial bound" (the same model with no overlap of communication, its efficiency fitted
on the same row) was added after the model's errors were seen, to bracket them.

Run: ``python benchmarks/validate_sharded.py``.
"""

from __future__ import annotations

import csv
import statistics
import sys
import warnings
from pathlib import Path

import attrs

import scalemodel as sm
from scalemodel.workloads import transformer_profile

# memory pressure is reported in this script's own output; the library's warning of it
# (a ModelWarning for each memory-pressured job predicted) would repeat it on stderr
warnings.filterwarnings("ignore", message=r".* GPUs: model state .* at or above",
                        category=sm.ModelWarning)

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
    """The row's workload profile at a compute efficiency [-]: its micro-batch, and its
    gradient accumulation (FSDP gathers and reduce-scatters in every micro-batch)."""
    p = transformer_profile(row["config"], row["gpu"], efficiency=efficiency,
                            name=f"{row['model']}-row{row['row']}",
                            grad_accum=row["grad_accum"])
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
    tokens = row["grad_accum"] * row["micro_batch"] * row["seq"] / it.total
    return tokens, it.exposed_communication / it.total


def predicted_tokens_per_gpu(row, efficiency):
    """Tokens per second per GPU of the row's run, predicted [tokens/s]."""
    return predicted_step(row, efficiency)[0]


def _bisect_efficiency(predict, target):
    """The efficiency at which ``predict(efficiency)`` equals ``target`` (bisection in log
    efficiency over [1e-3, 1]; ``predict`` rises with the efficiency) [-]."""
    import math

    lo, hi = math.log(1e-3), math.log(1.0)
    if predict(1.0) < target:
        return 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if predict(math.exp(mid)) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return math.exp(0.5 * (lo + hi))


def fit_efficiency(row):
    """The efficiency that reproduces ``row`` exactly (bisection in log efficiency) [-]."""
    return _bisect_efficiency(lambda e: predicted_tokens_per_gpu(row, e), row["tokens_per_gpu"])


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
            # LLM Foundry's MPT computes its loss with flash-attention's fused
            # CrossEntropyLoss by default (modeling_mpt.py at 061f2c7: loss_fn
            # 'fused_crossentropy'), whose backward peak is 4sbV + 16sb, not 12sbV
            mem = sm.memory(r["config"], r["n"], sharding="zero3", gpu=gpu,
                            activation_checkpointing=r["checkpointing"], loss="fused")
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


# --------------------------------------------------------------------------------------
# Second source: DeepSpeed ZeRO-3 at 100 to 800 Gbit/s per node (ZeRO++ blog, figures)

NETWORK_DATA = HERE / "data" / "published_sharded_network.csv"

ZEROPP_GPT = {  # microsoft/DeepSpeed docs/_tutorials/zeropp.md (commit 38327e0): "18B GPT-2"
    "gpt-18b": dict(layers=40, hidden=6144, heads=32, seq=512, parameters=18e9),
}
"""Shapes of the ZeRO++ evaluation's GPT models that a reachable source states: the 18B
model of DeepSpeed's ZeRO++ tutorial (``--num-layers 40 --hidden-size 6144
--num-attention-heads 32 --seq-length 512``). The 49B, 91B and 138B shapes are not stated
there, so their rows are recorded but not predicted."""

ZEROPP_GPU = "v100-sxm2-32gb"
"""scalemodel's spec standing in for the runs' V100-SXM3 32GB (DGX-2), which it lacks:
the same NVLink 2 rate per GPU; the fitted efficiency absorbs any difference of peak."""

ZEROPP_GPUS_PER_NODE = 16  # the tutorial: "4 nodes of 16x NVIDIA Tesla V100-SXM3"
ZEROPP_WRAP = "module"
"""DeepSpeed ZeRO-3 gathers parameters per submodule, not per block: its
``PartitionedParameterCoordinator.fetch_sub_module`` all-gathers the running submodule's
own parameters and prefetches the next ones in the recorded order
(``deepspeed/runtime/zero/partitioned_param_coordinator.py``, microsoft/DeepSpeed at
196e63a). The first run of this protocol wrapped by block, as FSDP's transformer
auto-wrap does (``block`` columns); module wrapping was put in after its errors were seen,
as a fact about DeepSpeed (nothing fitted)."""
ZEROPP_LINK = 100e9  # each IB link of the blog's "IB: k" runs at 100 Gbit/s (its caption)


def gpt_config(model, micro_batch_tokens):
    """The TransformerConfig of a ZeRO++ GPT model (see :data:`ZEROPP_GPT`): GPT-2 layout
    (biases, LayerNorm, tied embeddings, learned positions, vocabulary 50257 padded to
    50304 as Megatron pads it), fp16, ``micro_batch_tokens / seq`` sequences."""
    s = ZEROPP_GPT[model]
    return sm.TransformerConfig(
        layers=s["layers"], hidden=s["hidden"], heads=s["heads"], ffn=4 * s["hidden"],
        vocab=50304, seq=s["seq"], micro_batch=micro_batch_tokens // s["seq"], dtype="fp16",
        tied_embeddings=True, gated_ffn=False, norm="layernorm", bias=True, prenorm=True,
        learned_positions=s["seq"], final_norm=True, name=model)


def megatron_flops_per_token(cfg, factor=4):
    """FLOPs per token as Megatron-DeepSpeed counts them for its TFLOPs (Narayanan et al.,
    SC21, arXiv:2104.04473, eq. 3): ``24 f l h^2 (1 + s / 6h + V / 16 l h)``, f = 4 with
    activation checkpointing [FLOP]."""
    l, h, s, v = cfg.layers, cfg.hidden, cfg.seq, cfg.vocab
    return 24 * factor * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def network_rows():
    """The ZeRO-3 rows of ``published_sharded_network.csv``, with their configuration where
    the model's shape is stated (parameter count checked against the stated one)."""
    rows = []
    with open(NETWORK_DATA) as fh:
        for r in csv.DictReader(fh):
            row = dict(row=int(r["row"]), model=r["model"], stated=r["parameters_stated"],
                       n=int(r["gpus"]), links=int(r["ib_links_per_node"]),
                       gbps=float(r["inter_node_gbit_per_s"]),
                       tokens=int(r["micro_batch_tokens"]),
                       tflops=float(r["tflops_per_gpu"]),
                       read=float(r["read_uncertainty_tflops"]), config=None)
            if r["model"] in ZEROPP_GPT:
                cfg = gpt_config(r["model"], row["tokens"])
                stated = ZEROPP_GPT[r["model"]]["parameters"]
                if round(cfg.parameter_count / 1e9) != round(stated / 1e9):
                    raise SystemExit(f"row {r['row']}: {r['model']} has "
                                     f"{cfg.parameter_count} parameters here, "
                                     f"{r['parameters_stated']} stated")
                row["config"] = cfg
            rows.append(row)
    return rows


def _network_iteration(row, efficiency, utilization=1.0, wrap=ZEROPP_WRAP, cluster=None):
    """FLOPs per GPU per step as the source counts them [FLOP], and the model's
    :class:`~scalemodel.IterationTime` of the row at a compute efficiency [-], with
    parameters gathered per ``wrap`` unit (on ``cluster``, a ClusterProfile, if given)."""
    spec = sm.get_gpu(ZEROPP_GPU)
    p = transformer_profile(row["config"], spec, efficiency=efficiency,
                            name=f"{row['model']}-row{row['row']}")
    p = attrs.evolve(p, tensor_ready=1.5 * p.tensor_ready,  # activation checkpointing
                     backward_time=1.5 * p.backward_time)
    it = sm.iteration_time(p, row["n"], ZEROPP_LINK, utilization=utilization,
                           sharding="zero3", fusion=wrap, gpus_per_node=ZEROPP_GPUS_PER_NODE,
                           nics_per_node=row["links"], intra_bw=spec.intra_node_bw,
                           cluster=cluster)
    return megatron_flops_per_token(row["config"]) * row["tokens"], it


def predicted_network_step(row, efficiency, utilization=1.0, wrap=ZEROPP_WRAP, cluster=None):
    """Predicted TFLOP/s per GPU of a ZeRO-3 row as the source counts them, the share of the
    step that is exposed communication [-], and what binds."""
    flops, it = _network_iteration(row, efficiency, utilization, wrap, cluster)
    return (float(flops / it.total / 1e12), float(it.exposed_communication / it.total),
            str(it.binding))


def serial_network_tflops(row, efficiency):
    """TFLOP/s per GPU if none of the row's communication overlapped compute: the model's
    forward, backward, update and all its collectives' time, one after another."""
    flops, it = _network_iteration(row, efficiency)
    return float(flops / (it.forward + it.backward + it.update + it.communication) / 1e12)


def evaluate_network():
    """The second source's rows with their predictions (a list of dicts; rows whose shape is
    not stated have ``predicted`` None) and (median, largest) absolute error of the model
    and of the flat baseline over the predicted rows."""
    rows = network_rows()
    series = {}
    for r in rows:
        if r["config"] is not None:
            series.setdefault((r["model"], r["tokens"]), []).append(r)
    out = []
    for members in series.values():
        members.sort(key=lambda r: (-r["gbps"], r["row"]))
        cal = members[0]
        eff = _bisect_efficiency(lambda e: predicted_network_step(cal, e)[0], cal["tflops"])
        eff_serial = _bisect_efficiency(lambda e: serial_network_tflops(cal, e),
                                        cal["tflops"])
        eff_block = _bisect_efficiency(
            lambda e: predicted_network_step(cal, e, wrap="block")[0], cal["tflops"])
        for r in members:
            pred, exposed, binding = predicted_network_step(r, eff)
            serial = serial_network_tflops(r, eff_serial)
            block = predicted_network_step(r, eff_block, wrap="block")[0]
            out.append(dict(r, efficiency=eff, predicted=pred, exposed=exposed,
                            binding=binding, calibration=r is cal,
                            block_efficiency=eff_block, block=block,
                            block_error=block / r["tflops"] - 1,
                            error=pred / r["tflops"] - 1,
                            flat_error=cal["tflops"] / r["tflops"] - 1,
                            serial_efficiency=eff_serial, serial=serial,
                            serial_error=serial / r["tflops"] - 1))
    out += [dict(r, predicted=None) for r in rows if r["config"] is None]
    out.sort(key=lambda r: r["row"])
    held = [r for r in out if r["predicted"] is not None and not r["calibration"]]
    stats = {
        "model": (statistics.median(abs(r["error"]) for r in held),
                  max(abs(r["error"]) for r in held)),
        "flat": (statistics.median(abs(r["flat_error"]) for r in held),
                 max(abs(r["flat_error"]) for r in held)),
        "serial": (statistics.median(abs(r["serial_error"]) for r in held),
                   max(abs(r["serial_error"]) for r in held)),
        "block": (statistics.median(abs(r["block_error"]) for r in held),
                  max(abs(r["block_error"]) for r in held)),
        "bracketed": sum(r["serial"] <= r["tflops"] <= r["predicted"] for r in held),
        "predicted_rows": len(held), "series": len(series),
        "recorded_rows": sum(r["predicted"] is None for r in out),
    }
    return out, stats


UNIT_COST_LINKS = 4
"""Links per node of the two runs (1K and 2K tokens per GPU) that calibrate the per-unit
cost, as ``validate_transfer.py --source zero++`` calibrates."""


def _unit_cluster(cost):
    return sm.ClusterProfile(bucket_overhead=cost, provenance={
        "source": "validate_sharded: per-unit cost solved from two ZeRO-3 runs"})


def solve_unit_cost(small, large):
    """The per-unit, per-micro-batch compute-path cost :math:`c_u` [s] and the compute
    efficiency [-] that reproduce two runs on the same network that differ only in the
    micro-batch (``small`` has fewer tokens per GPU), exactly: two numbers from two runs, no
    prior. :math:`c_u` is the cluster's ``bucket_overhead``, which under ``zero3`` ends each
    unit's backward in every micro-batch (the framework's per-submodule work: DeepSpeed
    ZeRO-3 runs its fetch, release and gradient-partition hooks per submodule)."""
    from scipy.optimize import brentq

    def efficiency(cost):  # the one that reproduces the larger micro-batch at this cost
        cl = _unit_cluster(cost)
        return _bisect_efficiency(lambda e: predicted_network_step(large, e, cluster=cl)[0],
                                  large["tflops"])

    def gap(cost):
        cl = _unit_cluster(cost)
        return predicted_network_step(small, efficiency(cost), cluster=cl)[0] / small["tflops"] - 1

    if gap(0.0) <= 0:  # the pair needs no fixed cost
        return 0.0, efficiency(0.0)
    cost = brentq(gap, 0.0, 0.1, xtol=1e-7)
    return cost, efficiency(cost)


def evaluate_unit_cost(rows=None):
    """Diagnostic, added after the errors were seen: the 18B rows predicted from the two
    :data:`UNIT_COST_LINKS`-link runs with a per-unit cost (:func:`solve_unit_cost`).
    Returns the cost [s], the efficiency [-] and each row with its predicted TFLOP/s and
    its error in TFLOP/s and in step time (published / predicted TFLOP/s - 1)."""
    rows = [r for r in (rows or network_rows()) if r["model"] == "gpt-18b"]
    cal = sorted((r for r in rows if r["links"] == UNIT_COST_LINKS), key=lambda r: r["tokens"])
    cost, eff = solve_unit_cost(cal[0], cal[-1])
    out = []
    for r in sorted(rows, key=lambda r: (r["tokens"], -r["links"])):
        pred = predicted_network_step(r, eff, cluster=_unit_cluster(cost))[0]
        out.append(dict(r, predicted=pred, calibration=r in cal,
                        error=pred / r["tflops"] - 1, time_error=r["tflops"] / pred - 1))
    return cost, eff, out


def table_network(results):
    """Header and rows of the second source's validation table (text); rows whose shape is
    not stated are left out."""
    head = ["row", "model", "GPUs", "Gbit/s per node", "tokens per GPU",
            "published TFLOP/s per GPU", "predicted", "error", "flat", "exposed comm",
            "serial bound", "by block (first run)"]
    body = []
    for r in results:
        if r["predicted"] is None:
            continue
        body.append([str(r["row"]), r["model"], str(r["n"]), f"{r['gbps']:.0f}",
                     str(r["tokens"]), f"{r['tflops']:.0f} ± {r['read']:.1f}",
                     f"{r['predicted']:.1f}",
                     f"fitted: {r['efficiency']:.3f}" if r["calibration"]
                     else f"{100 * r['error']:+.1f} %",
                     "" if r["calibration"] else f"{100 * r['flat_error']:+.1f} %",
                     f"{100 * r['exposed']:.1f} %",
                     f"fitted: {r['serial_efficiency']:.3f}" if r["calibration"]
                     else f"{r['serial']:.1f} ({100 * r['serial_error']:+.1f} %)",
                     f"fitted: {r['block_efficiency']:.3f}" if r["calibration"]
                     else f"{r['block']:.1f} ({100 * r['block_error']:+.1f} %)"])
    return head, body


def _print_table(head, body):
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for b in body:
        print("  ".join(c.rjust(w) for c, w in zip(b, widths)))


def main(argv=None):
    from _report import plain_parser

    plain_parser(__doc__).parse_args(argv)
    results, stats = evaluate()
    _print_table(*table(results))
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

    results, stats = evaluate_network()
    print("\nDeepSpeed ZeRO-3 on 384 V100 at 100 to 800 Gbit/s per node (ZeRO++ blog, "
          "figure data labels):")
    _print_table(*table_network(results))
    m, f = stats["model"], stats["flat"]
    print(f"\n{stats['predicted_rows']} rows predicted ({stats['series']} series, one "
          f"efficiency fitted per series on its highest-bandwidth row): median |error| "
          f"{100 * m[0]:.1f} %, largest {100 * m[1]:.1f} %; flat baseline median "
          f"{100 * f[0]:.1f} %, largest {100 * f[1]:.1f} %; {stats['recorded_rows']} rows "
          f"recorded but not predicted (model shape not stated)")
    m = stats["block"]
    print(f"gathered by block as FSDP does (the first run of this protocol): median |error| "
          f"{100 * m[0]:.1f} %, largest {100 * m[1]:.1f} %")
    m = stats["serial"]
    print(f"serial bound (no overlap; added after the errors were seen): median |error| "
          f"{100 * m[0]:.1f} %, largest {100 * m[1]:.1f} %; {stats['bracketed']} of "
          f"{stats['predicted_rows']} published values lie between it and the model")
    cost, eff, rows = evaluate_unit_cost()
    held = [r for r in rows if not r["calibration"]]
    print(f"\nper-unit cost (diagnostic, added after the errors were seen): the 18B model's two "
          f"{UNIT_COST_LINKS}-link runs (1K and 2K tokens per GPU) solved exactly for a cost per "
          f"unit and micro-batch on the compute path, {1e3 * cost:.2f} ms, and an efficiency, "
          f"{eff:.3f}; the other rows predicted (error in TFLOP/s; in step time):")
    for r in held:
        print(f"  {r['tokens']} tokens, {r['links']} x 100G: published {r['tflops']:.0f}, "
              f"predicted {r['predicted']:.1f} ({100 * r['error']:+.1f} %; "
              f"{100 * r['time_error']:+.1f} %)")
    e = [abs(r["time_error"]) for r in held]
    print(f"  step time: median |error| {100 * statistics.median(e):.1f} %, largest "
          f"{100 * max(e):.1f} %")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_sharded"))
