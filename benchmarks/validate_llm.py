"""LLM training calibrated from ONE run: scaling with n, and across model sizes (issue 20,
item 9).

Data: the 29 rows of ``benchmarks/data/published_sharded.csv`` (MosaicML's LLM Foundry
benchmark tables, ``mosaicml/llm-foundry`` ``scripts/train/benchmarking/README.md`` at
commit 061f2c7: MPT-1B to MPT-70B with PyTorch FSDP ``FULL_SHARD`` on 8 to 128 A100 40GB,
A100 80GB and H100 GPUs), loaded, with their MPT configurations and networks, by
``benchmarks/validate_sharded.py`` (imported, not copied). Each row's profile is built here
(:func:`profile_for`): FLOP-derived, and where the row checkpoints, the library's own
``"full"`` recompute of every transformer block (MPT checkpoints ``MPTBlock`` modules
only; this script used validate_sharded's backward x 1.5 before, which also recomputed
the output projection: its predictions moved by 0.7 % or less when it changed).

Second source, scaling with n only: ``benchmarks/data/published_llm_scaling.csv``,
torchtitan's Llama 3.1 8B with FSDP2 on 8 and 128 H100 (``pytorch/torchtitan``
``docs/performance.md`` at commit eaea6f6, tables 1 and 3: three techniques, each at 8 and
128 GPUs; local batch 2 x 8,192 tokens, selective activation checkpointing, 400 Gbit/s
per GPU, 8 GPUs per node). The model is scalemodel's built-in ``llama-3-8b`` configuration
(Llama 3.1 8B has the same shape) at 8,192 tokens, micro-batch 2, bf16 gradients (the
table does not state the reduce dtype; fp32 changes these predictions by < 0.1 %); the
selective recomputation and torch.compile / Float8 speed-ups are in the fitted
efficiency. This source was added after the LLM Foundry errors were seen (it is the run
issue 20 cites); the protocol is the same.

Protocol (stated before looking at the errors):

1. **One run calibrates.** A cluster is fitted by :func:`scalemodel.fit_cluster` on one
   run only, given as measured tokens per second per GPU on its FLOP-derived profile (at
   the GPU's published default efficiency, :mod:`scalemodel.efficiency`): the library fits
   the compute efficiency (kept with the GPU in ``cluster.extra["efficiency"]``) and keeps
   the other explanations of that run as alternatives. The calibration run of a series
   (model, GPU) is its row with the fewest GPUs.
2. **Predictions use the library as a user would**: ``iteration_time(profile, n, bw,
   sharding="zero3", cluster=fit)`` on each row's own profile, again at the published
   default efficiency; the fitted efficiency of that GPU replaces it inside the library
   (nothing is rescaled here). Error = predicted / published tokens per second per GPU
   - 1.
3. **Scaling with n**: each series' other rows, from its own calibration run.
4. **Across model sizes**: every series' calibration run in turn predicts every row of the
   *other* models on the same GPU (all pairs; no choice of a favourable calibration).
5. **Baseline, the rule of thumb**: a constant MFU, the calibration run's published MFU
   carried to the predicted row (error = MFU of the calibration row / MFU of the row - 1;
   within a series this is the flat per-GPU throughput).

Targets (issue 20): scaling with n, median |error| <= 5 %, largest <= 15 %; across model
sizes at least as good as the constant-MFU rule (median and largest).

A diagnostic, added after the errors were seen and predicting nothing
(:func:`microbatch_pairs`): every large error is a row whose micro-batch differs from its
calibration row's, so for each two consecutive rows of a series with different
micro-batches it prints the fixed time per transformer block and micro-batch that would
explain their times per token, how much 1 % of throughput moves it, and each row's model
state as a share of GPU memory (docs/llm.rst says what it shows).

Two more diagnostics, also added after the errors were seen (issue 20 item 9: where does
the model lose to the constant-MFU rule?): :func:`by_class` splits the across-sizes rows by
whether the calibration and the predicted row differ in activation checkpointing and
whether the calibration run is memory-pressured
(:func:`scalemodel.efficiency.memory_pressure`), with the largest share of a predicted
step that the model leaves as exposed communication; :func:`flop_check` sets scalemodel's
model FLOPs per token against LLM Foundry's MFU formula.

Run: ``python benchmarks/validate_llm.py`` (about 15 s); writes
``benchmarks/results/validate_llm.txt`` and ``.json`` (as one set, atomically) unless
``--no-write``.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import validate_sharded as vs  # noqa: E402  (the rows, configurations and networks)
from _report import Report, parser  # noqa: E402  (main()'s parser and output)

import scalemodel as sm  # noqa: E402
from scalemodel.checkpointing import with_recompute  # noqa: E402
from scalemodel.efficiency import memory_pressure  # noqa: E402
from scalemodel.workloads import tensor_flops, transformer_profile  # noqa: E402

# memory pressure is reported in this script's own output; the library's warning of it
# (a ModelWarning for each memory-pressured job predicted) would repeat it on stderr
warnings.filterwarnings("ignore", message=r".* GPUs: model state .* at or above",
                        category=sm.ModelWarning)

RESULTS = HERE / "results"
TORCHTITAN = HERE / "data" / "published_llm_scaling.csv"
TARGET_N = (0.05, 0.15)
"""Scaling with n: median and largest |error| allowed [-]."""


def series():
    """``{(model, gpu): rows sorted by GPU count}`` of the published rows."""
    out = {}
    for r in vs.published_rows():
        out.setdefault((r["model"], r["gpu"]), []).append(r)
    for rows in out.values():
        rows.sort(key=lambda r: (r["n"], r["row"]))
    return out


def _topology(gpu):
    bw, nics, _ = vs.NETWORK[gpu]
    return bw, dict(gpus_per_node=8, nics_per_node=nics,
                    intra_bw=sm.get_gpu(gpu).intra_node_bw)


def profile_for(row):
    """The row's FLOP-derived profile at the GPU's default efficiency, its micro-batch and
    gradient accumulation, with LLM Foundry's activation checkpointing as the library
    models it (:func:`scalemodel.checkpointing.with_recompute`, ``"full"``): every
    transformer block recomputed at the start of its backward, the embeddings and the
    output projection not -- MPT checkpoints ``MPTBlock`` modules only
    (``MPTPreTrainedModel.activation_checkpointing_fn`` returns ``isinstance(module,
    MPTBlock)``; ``mosaicml/llm-foundry`` ``llmfoundry/models/mpt/modeling_mpt.py``, read at
    commit 0085285; the table's commit 061f2c7 is not in the searchable index)."""
    p = transformer_profile(row["config"], row["gpu"], name=f"{row['model']}-row{row['row']}",
                            grad_accum=row["grad_accum"])
    return with_recompute(p, "full") if row["checkpointing"] else p


def calibrate(row):
    """The cluster fitted on one published row (:func:`scalemodel.fit_cluster`)."""
    bw, topo = _topology(row["gpu"])
    run = dict(model=profile_for(row), n=row["n"], bw=bw, sharding="zero3",
               tokens_per_second_per_gpu=row["tokens_per_gpu"],
               label=f"{row['model']} on {row['n']} {row['gpu']}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster([run], algorithm="ring", fusion=None, **topo)


def predict(row, cluster):
    """Predicted tokens per second per GPU of a row on a fitted cluster [tokens/s], and
    the (low, high) ends of the iteration-time interval (``total_interval``: the fit's
    intervals and alternatives and its efficiency, widened where it is carried to
    another model, :data:`scalemodel.efficiency.EFFICIENCY_TRANSFER`, and at its fast end
    where the calibration run was memory-pressured,
    :func:`scalemodel.efficiency.calibration_pressured`) [tokens/s]."""
    bw, _ = _topology(row["gpu"])
    it = sm.iteration_time(profile_for(row), row["n"], bw, sharding="zero3",
                           fusion=None, algorithm="ring", cluster=cluster)
    tokens = row["grad_accum"] * row["micro_batch"] * row["seq"]
    total = float(it.total)
    t_lo, t_hi = it.total_interval
    _EXPOSED[(row["row"], id(cluster))] = float(it.exposed_communication) / total
    return tokens / total, (0.0 if t_hi is None else tokens / t_hi, tokens / t_lo)


_EXPOSED: dict = {}
"""(row, id(cluster)) -> exposed communication / step time of the last prediction [-]."""


def _entry(row, cal, fit):
    pred, (lo, hi) = predict(row, fit.cluster)
    exposed = _EXPOSED.pop((row["row"], id(fit.cluster)))
    return dict(source="llm-foundry", row=row["row"], model=row["model"], gpu=row["gpu"], n=row["n"],
                calibration_row=cal["row"], calibration=f"{cal['model']} @ {cal['n']}",
                published=row["tokens_per_gpu"], predicted=pred, low=lo, high=hi,
                error=pred / row["tokens_per_gpu"] - 1,
                rule=cal["mfu"] / row["mfu"] - 1,
                efficiency=float(fit.cluster.extra["efficiency"]["value"]),
                checkpointing=(cal["checkpointing"], row["checkpointing"]),
                calibration_state_share=pressure(cal).share,
                calibration_pressured=pressure(cal).pressured,
                exposed_communication=exposed)


def pressure(row):
    """:func:`scalemodel.efficiency.memory_pressure` of a row (FSDP = zero3)."""
    return memory_pressure(row["config"].parameter_count, row["n"], row["gpu"], "zero3")


def torchtitan_rows():
    """The torchtitan rows with their profile (llama-3-8b at 8,192 x 2 tokens, bf16)."""
    cfg = sm.llm_config("llama-3-8b", seq=8192, micro_batch=2)
    prof = sm.transformer_profile(cfg, "h100-sxm", name="llama-3.1-8b")
    with open(TORCHTITAN) as fh:
        return [dict(row=int(r["row"]), model=r["model"], gpu=r["gpu"], n=int(r["gpus"]),
                     technique=r["technique"], tokens_per_gpu=float(r["tokens_per_s_per_gpu"]),
                     profile=prof, tokens=int(r["local_batch"]) * int(r["seq"]))
                for r in csv.DictReader(fh)]


_TT_NODE = dict(gpus_per_node=8, nics_per_node=8)
_TT_BW = 400e9  # "400 Gb/s per GPU" (Grand Teton), one NIC per GPU


def evaluate_torchtitan():
    """Each technique's 8-GPU run calibrates; its 128-GPU run is predicted."""
    rows = torchtitan_rows()
    out, fits = [], {}
    intra = sm.get_gpu("h100-sxm").intra_node_bw
    for tech in dict.fromkeys(r["technique"] for r in rows):
        cal, *held = sorted((r for r in rows if r["technique"] == tech), key=lambda r: r["n"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sm.fit_cluster([dict(model=cal["profile"], n=cal["n"], bw=_TT_BW,
                                       sharding="zero3", label=f"{tech} on {cal['n']}",
                                       tokens_per_second_per_gpu=cal["tokens_per_gpu"])],
                                 algorithm="ring", fusion=None, intra_bw=intra, **_TT_NODE)
        fits[tech] = dict(row=cal["row"], efficiency=fit.cluster.extra["efficiency"],
                          message=fit.message)
        for r in held:
            it = sm.iteration_time(r["profile"], r["n"], _TT_BW, sharding="zero3",
                                   fusion=None, algorithm="ring", cluster=fit.cluster,
                                   intra_bw=intra, **_TT_NODE)
            total, (t_lo, t_hi) = float(it.total), it.total_interval
            pred = r["tokens"] / total
            out.append(dict(source="torchtitan", row=r["row"], model=r["model"],
                            gpu=r["gpu"], n=r["n"], calibration_row=cal["row"],
                            calibration=f"{tech} @ {cal['n']}", published=r["tokens_per_gpu"],
                            predicted=pred, low=0.0 if t_hi is None else r["tokens"] / t_hi,
                            high=r["tokens"] / t_lo,
                            error=pred / r["tokens_per_gpu"] - 1,
                            rule=cal["tokens_per_gpu"] / r["tokens_per_gpu"] - 1,
                            efficiency=float(fit.cluster.extra["efficiency"]["value"])))
    return out, fits


def evaluate():
    """Both tables' entries and their summaries."""
    groups = series()
    fits = {key: calibrate(rows[0]) for key, rows in groups.items()}
    with_n, sizes = [], []
    for key, rows in groups.items():
        cal = rows[0]
        with_n += [_entry(r, cal, fits[key]) for r in rows[1:]]
        for other, orows in groups.items():
            if other[1] == key[1] and other[0] != key[0]:
                sizes += [_entry(r, cal, fits[key]) for r in orows]
    tt, tt_fits = evaluate_torchtitan()
    return dict(with_n=with_n, sizes=sizes, torchtitan=tt, pairs=microbatch_pairs(),
                classes=by_class(sizes),
                summary=dict(with_n=_summary(with_n), sizes=_summary(sizes),
                             torchtitan=_summary(tt), with_n_all=_summary(with_n + tt)),
                flops=flop_check(groups),
                fits={f"{m} on {g}": dict(row=groups[(m, g)][0]["row"],
                                          efficiency=fit.cluster.extra["efficiency"],
                                          message=fit.message,
                                          state_share=pressure(groups[(m, g)][0]).share,
                                          pressured=pressure(groups[(m, g)][0]).pressured)
                      for (m, g), fit in fits.items()},
                torchtitan_fits=tt_fits)


def flop_check(groups):
    r"""Per model, scalemodel's model FLOPs per token (:func:`scalemodel.tensor_flops`,
    forward + backward, no recompute) against the formula LLM Foundry's table computes its
    MFU with: :math:`3\,(2 N s + 4 L d s^2)` per sequence of :math:`s` tokens, :math:`N`
    the parameter count (embeddings included), :math:`L` layers, :math:`d` the width
    (``scripts/train/benchmarking/collect_results.py``, ``parse_run``, at commit 061f2c7,
    the table's own commit)."""
    out = {}
    for (model, _), rows in groups.items():
        cfg = rows[0]["config"]
        if model in out:
            continue
        fl = tensor_flops(cfg)
        s, L, d = cfg.seq, cfg.layers, cfg.hidden
        foundry = 3 * (2 * cfg.parameter_count * s + 4 * L * d * s ** 2) / s
        ours = (fl.forward + fl.backward) / cfg.tokens
        out[model] = dict(scalemodel=ours, llm_foundry=foundry, ratio=ours / foundry)
    return out


def by_class(entries):
    """The across-sizes entries split by what differs between the calibration run and the
    predicted row: activation checkpointing (both on, both off, or one of them), and
    whether the calibration run is memory-pressured; each class's summary."""
    def ck(x):
        a, b = x["checkpointing"]
        return "both checkpointed" if a and b else "neither checkpointed" if not (a or b) \
            else "checkpointing differs"
    out = {}
    for x in entries:
        key = (x["gpu"], ck(x), "calibration memory-pressured" if x["calibration_pressured"]
               else "calibration not pressured")
        out.setdefault(key, []).append(x)
    return [dict(gpu=k[0], checkpointing=k[1], pressure=k[2], **_summary(v),
                 exposed=max(x["exposed_communication"] for x in v))
            for k, v in sorted(out.items())]


def microbatch_pairs():
    """Diagnostic, added after the errors were seen (it predicts nothing): can one
    per-micro-batch term explain why the runs' time per token changes with the micro-batch?

    For each two consecutive rows (by GPU count) of a series (model, GPU) whose micro-batches
    differ, the fixed time per micro-batch :math:`F` that makes their published times per
    token agree, :math:`t_a / T_a - t_b / T_b = F (1/T_a - 1/T_b)` (:math:`t` the time of one
    micro-batch [s], :math:`T` its tokens), per transformer block: what a compute-path cost
    per block and micro-batch (FSDP hooks, kernel launches) would have to be, and how much
    1 % of row b's throughput moves it (pairs of close micro-batches tell little). Beside it, the
    model state per GPU of each row (:func:`scalemodel.memory`: bf16 parameters and
    gradients, Adam with an fp32 master copy, sharded over the row's GPUs) as a share of the
    GPU's memory."""
    out = []
    for (model, gpu), rows in series().items():
        hbm = sm.get_gpu(gpu).hbm_bytes
        for a, b in zip(rows, rows[1:]):
            if a["micro_batch"] == b["micro_batch"]:
                continue
            ta, tb = (r["micro_batch"] * r["seq"] for r in (a, b))  # tokens per micro-batch
            per = (1 / ta - 1 / tb) * vs.MPT[model]["layers"]
            fixed = (1 / a["tokens_per_gpu"] - 1 / b["tokens_per_gpu"]) / per
            # how far 1 % more throughput of row b would move it: how well the pair tells
            noise = abs(0.01 / b["tokens_per_gpu"] / per)
            share = [float(sm.memory(r["config"], r["n"], sharding="zero3", gpu=gpu,
                                     activation_checkpointing=r["checkpointing"]).model_state)
                     / hbm for r in (a, b)]
            out.append(dict(model=model, gpu=gpu, rows=(a["row"], b["row"]),
                            n=(a["n"], b["n"]),
                            micro_batch=(a["micro_batch"], b["micro_batch"]),
                            grad_accum=(a["grad_accum"], b["grad_accum"]),
                            mfu=(a["mfu"], b["mfu"]), fixed_per_block=fixed,
                            one_percent=noise, state_share=tuple(share)))
    return out


TOLD = 1e-2
"""Pairs of the micro-batch diagnostic summarized: 1 % of throughput moves their fixed
cost per block by less than this [s]."""


def pairs_table(pairs):
    """Text lines of the micro-batch diagnostic."""
    head = ["model", "GPU", "rows", "GPUs", "micro-batch x accum", "MFU [%]",
            "fixed cost per block per micro-batch", "1 % moves it", "model state / GPU memory"]
    body = [[p["model"], p["gpu"], "{} -> {}".format(*p["rows"]), "{} -> {}".format(*p["n"]),
             "{} x {} -> {} x {}".format(p["micro_batch"][0], p["grad_accum"][0],
                                        p["micro_batch"][1], p["grad_accum"][1]),
             "{:.1f} -> {:.1f}".format(*(100 * m for m in p["mfu"])),
             f"{1e3 * p['fixed_per_block']:+.1f} ms", f"{1e3 * p['one_percent']:.1f} ms",
             "{:.0f} % -> {:.0f} %".format(*(100 * s for s in p["state_share"]))]
            for p in pairs]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    for gpu in dict.fromkeys(p["gpu"] for p in pairs):
        told = [p for p in pairs if p["gpu"] == gpu and p["one_percent"] < TOLD]
        if told:
            f = [1e3 * p["fixed_per_block"] for p in told]
            lines.append(f"{gpu}: a fixed cost per block and micro-batch would have to be "
                         f"{min(f):+.1f} to {max(f):+.1f} ms ({len(f)} pairs where 1 % "
                         f"moves it by less than {1e3 * TOLD:.0f} ms)")
    return lines


def _summary(entries):
    e = [abs(x["error"]) for x in entries]
    r = [abs(x["rule"]) for x in entries]
    inside = sum(x["low"] * (1 - 1e-9) <= x["published"] <= x["high"] * (1 + 1e-9)
                 for x in entries)
    width = [(x["high"] - x["low"]) / x["published"] for x in entries]
    return dict(rows=len(entries), median=statistics.median(e), largest=max(e),
                rule_median=statistics.median(r), rule_largest=max(r),
                inside=inside, width=statistics.median(width))


def table(entries):
    """Text lines of one table."""
    head = ["row", "model", "GPU", "GPUs", "calibrated on", "fitted MFU",
            "published tok/s/GPU", "predicted", "error", "constant MFU"]
    body = [[str(x["row"]), x["model"], x["gpu"], str(x["n"]),
             f"row {x['calibration_row']} ({x['calibration']})", f"{x['efficiency']:.3f}",
             f"{x['published']:.0f}", f"{x['predicted']:.0f}", f"{100 * x['error']:+.1f} %",
             f"{100 * x['rule']:+.1f} %"] for x in entries]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


def classes_table(classes):
    """Text lines of :func:`by_class`."""
    head = ["GPU", "checkpointing", "calibration run", "predictions", "model median",
            "model largest", "rule median", "rule largest", "exposed comm. (largest)"]
    body = [[c["gpu"], c["checkpointing"], c["pressure"].replace("calibration ", ""),
             str(c["rows"]), f"{100 * c['median']:.1f} %", f"{100 * c['largest']:.1f} %",
             f"{100 * c['rule_median']:.1f} %", f"{100 * c['rule_largest']:.1f} %",
             f"{100 * c['exposed']:.2f} %"] for c in classes]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


def _say_summary(say, what, s, target=None):
    say(f"{what}: {s['rows']} predictions; median |error| {100 * s['median']:.1f} %, "
        f"largest {100 * s['largest']:.1f} %; constant-MFU rule median "
        f"{100 * s['rule_median']:.1f} %, largest {100 * s['rule_largest']:.1f} %; "
        f"{s['inside']} inside the interval (median width (high - low) / published "
        f"{100 * s['width']:.1f} %)")
    if target:
        ok = s["median"] <= target[0] and s["largest"] <= target[1]
        say(f"  target median <= {100 * target[0]:.0f} %, largest <= "
            f"{100 * target[1]:.0f} %: {'met' if ok else 'NOT met'}")
    else:
        ok = s["median"] <= s["rule_median"] and s["largest"] <= s["rule_largest"]
        say(f"  target: at least as good as the constant-MFU rule: "
            f"{'met' if ok else 'NOT met'}")


def main(argv=None):
    args = parser(__doc__, "print only; do not write "
                  "benchmarks/results/validate_llm.*").parse_args(argv)
    printed = Report()
    say = printed.say
    res = evaluate()
    say("LLM Foundry FSDP runs calibrated from one run each (fit_cluster on the series' "
        "fewest-GPU row; issue 20, item 9)", "",
        "== scaling with n (each series predicted from its own calibration run)",
        *table(res["with_n"]), "")
    _say_summary(say, "scaling with n", res["summary"]["with_n"], TARGET_N)
    say("", "== scaling with n, torchtitan Llama 3.1 8B with FSDP2 on H100 (each technique's "
            "8-GPU run predicts its 128-GPU run; 'constant MFU' = flat per-GPU throughput)",
        *table(res["torchtitan"]), "")
    _say_summary(say, "scaling with n (torchtitan)", res["summary"]["torchtitan"], TARGET_N)
    _say_summary(say, "scaling with n, both sources", res["summary"]["with_n_all"], TARGET_N)
    say("", "== across model sizes (each calibration run predicts every row of the other "
            "models on its GPU)", *table(res["sizes"]), "")
    _say_summary(say, "across model sizes", res["summary"]["sizes"])
    if res.get("classes"):
        say("", "== where the model and the constant-MFU rule differ (diagnostic, added after "
                "the errors above were seen; it predicts nothing): the across-sizes rows by "
                "what differs between calibration run and predicted row",
            *classes_table(res["classes"]))
    if res.get("flops"):
        say("", "model FLOPs per token, scalemodel / LLM Foundry's MFU formula "
                "(collect_results.py at 061f2c7): " + ", ".join(
                    f"{m} {f['ratio']:.4f}" for m, f in res["flops"].items()))
    if res.get("fits"):
        hot = [f"{k} (row {f['row']}, {100 * f['state_share']:.0f} %)"
               for k, f in res["fits"].items() if f.get("pressured")]
        say(f"calibration runs whose model state is >= "
            f"{100 * sm.efficiency.MEMORY_PRESSURE_SHARE:.0f} % of the GPU's memory "
            f"(scalemodel.efficiency.memory_pressure; not modelled, flagged): "
            + ("; ".join(hot) if hot else "none"))
    if res.get("pairs"):
        say("", "== the micro-batch (diagnostic, added after the errors above were seen; it "
                "predicts nothing): the fixed time per transformer block and micro-batch "
                "that two rows of a series imply, if their time per token differed by that "
                "alone", *pairs_table(res["pairs"]))
    say("", "networks: " + "; ".join(f"{g}: {t}" for g, (_, _, t) in vs.NETWORK.items()),
        printed.elapsed_line())
    if not args.no_write:
        printed.write(RESULTS / "validate_llm.txt", {
            RESULTS / "validate_llm.json": json.dumps(res, indent=1, allow_nan=False)})
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_llm"))
