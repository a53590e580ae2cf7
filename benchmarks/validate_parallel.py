"""TP x PP x DP jobs against published tables, calibrated from ONE row per series (issue 20,
items 4 and 9).

Data: ``benchmarks/data/published_parallel.csv`` (provenance of every value in
``benchmarks/data/README.md``, section "Published TP x PP x DP throughput"):

* ``megatron-h100-weak``: Megatron-LM's README weak-scaling table (GPT 1.7B to 462B on 48
  to 6144 H100, tensor-parallel 1 to 8, pipeline 1 to 16, data-parallel 48 throughout;
  ``NVIDIA/Megatron-LM`` at commit f2e5db4, ``images/model_table.png``);
* ``megatron-h100-strong``: the same README's strong-scaling sentence (the 177B model at
  96 and 4608 H100, batch 1152: MFU 47 % and 42 %);
* ``narayanan-a100``: Narayanan et al. (SC 2021) Table 1, as Megatron-LM's README showed it
  (GPT 1.7B to 1T on 32 to 3072 A100 80GB, Selene: 8 GPUs and 8 x 200 Gbit/s HDR per node);
* ``narayanan-a100-175b-strong``, ``narayanan-a100-530b-strong``: the PTD-P rows of the
  paper's Table 2 (GPT-3 175B on 384, 768, 1536 and the 530B model on 560, 1120, 2240
  A100 at a fixed batch, micro-batch 1): the data-parallel size alone changes. Added after
  the errors of the series above were seen; the protocol is the same;
* ``torchtitan-2d3d``: torchtitan's 2-D and 3-D rows (Llama 3.1 70B and 405B). The 2-D
  rows (22-23: FSDP 32 x TP 8 on 256 H100, torch.compile + Float8; row 23 adds AsyncTP)
  are a series of their own: row 22 calibrates, row 23 is predicted (see "2-D" below).
  The 3-D rows (24-25: FSDP with PP): not representable; the script asks the library and
  prints its refusal instead of a prediction.

**2-D (FSDP x TP, rows 22-23).** ``iteration_time(llama_profile, 256, 400 Gbit/s, tp=8,
sharding=Sharding("zero3", param_dtype="bf16", reduce_dtype="fp32"), gpus_per_node=8,
nics_per_node=8, activation_checkpointing="full")``: each GPU's 1/8 slice of the model
sharded over its 32 data-parallel GPUs (scalemodel.parallel). Row 22 calibrates the
efficiency (Float8 is absorbed in it: the efficiency is relative to the bf16 peak); row 23
is the same job with AsyncTP, which overlaps the TP communication with the GEMMs. The
model keeps the TP collectives on the compute path, so it predicts row 23 at row 22's
throughput: row 23 is a check of that limit, not a test of the model, and the script
prints beside it the bound with every TP collective hidden. What torchtitan's Table 4
does not state, assumed: sequence 8192 (``train_configs/llama3_70b.toml``), one
micro-batch of the local batch 16 per step, bf16 all-gathers and fp32 reduce-scatters
(torchtitan's ``mixed_precision_param`` / ``mixed_precision_reduce`` defaults), one FSDP
unit per block. torchtitan's TP runs with sequence parallelism (all-gathers and
reduce-scatters: the same ring bytes and steps as the all-reduces modelled; flag SP),
which also splits the layer-norm, dropout and residual activations and the checkpointed
layer inputs along the sequence over the TP ranks: memory() is asked with
``sequence_parallel=True`` (Korthikanti et al., Table 2) and printed against the
published peak of the calibration row, with the estimate without it beside (not tuned).

What the model is asked (scalemodel as a user would call it): the row's GPT configuration
(``TransformerConfig``: plain 4h MLP, LayerNorm with biases, learned positions; the
source's heads, hidden size, layers, vocabulary and sequence; for the A100 series of 2021
dropout and no flash attention, :data:`NO_FLASH`) as a profile at efficiency ``eta``
(``transformer_profile(cfg, gpu, efficiency=eta, flash_attention=...)``), then
``iteration_time(profile, n, bw, tp=, pp=, microbatches=B / (dp b), gpus_per_node=8,
nics_per_node=8, intra_bw=<the GPU's NVLink rate>, activation_checkpointing=...)``.

Protocol (stated before looking at the errors; the A100 series' attention without flash
attention was added after, from the kernels' byte counts, no factor fitted: the
sensitivity "flash attention everywhere" keeps the figures before it):

1. **Published iteration time** of a row from its own numbers: the source's FLOPs per
   iteration by the source's formula over (TFLOP/s per GPU x GPUs), MFU x the H100's dense
   bf16 peak where only MFU is given (the peak cancels inside a series).
2. **One row calibrates a series**: ``eta`` is solved (bisection) so that the predicted
   iteration time of that row equals its published one; the efficiency of the profile
   is the one knob. The calibration row is the series' row with the fewest GPUs. Beside
   it, the library's own path: :func:`scalemodel.fit_cluster` on that row as a run with
   its ``tp``, ``pp`` and ``microbatches`` (the profile started at MFU 0.3), which must
   find about the same efficiency (its prior pulls a one-run fit slightly towards the
   start); an interleaved row's run gives its ``virtual_stages``.
3. **The other rows are predicted** at that ``eta``; error = predicted / published
   throughput - 1 = published / predicted time - 1.
4. **Baseline**: constant MFU, the calibration row's per-GPU TFLOP/s (or MFU) carried to
   the row (error = X_cal / X_row - 1).
5. **All pairs** as a check that the choice of calibration row does not decide the
   verdict: every row of a series calibrates in turn and predicts the others.
6. **Sensitivity** to the assumptions below: micro-batch 2, fp32 gradients, each for all
   series at once, the same protocol.
7. **Diagnostic** (not a prediction): the error with the pipeline bubble and the TP
   collectives taken out of the model, the calibration included: how much of the miss
   those two terms make.

Targets (issue 20, item 9): at a fixed model (the ``*-strong`` series, scaling with n)
median |error| <= 5 % and largest <= 15 %; across model sizes at least as good as the
constant-MFU rule.

What the sources do not state, assumed here for every row of a series (never per row):
micro-batch 1 and the 1F1B schedule where the source does not state them (Narayanan et
al.'s Table 1 rows state both through Megatron-LM's ``examples/sc21/run_table_1.sh``, which
runs them: ``--micro-batch-size``, and ``--num-layers-per-virtual-pipeline-stage`` giving
v = layers / (pp x that), passed as ``virtual_stages=``; columns ``micro_batch``,
``schedule``, ``virtual_stages``); one NIC per GPU at the GPU's built-in rate where the
network is not stated (DGX H100: 8 x 400 Gbit/s); 16-bit gradients; for the H100 rows no
activation recomputation, for the A100 rows full recomputation (the paper's FLOP count,
96 B s l h^2 ..., counts the recomputed forward). Features stated or implied by the source
that the model does not have are flagged on each row (codes printed under the tables).

Run: ``python benchmarks/validate_parallel.py`` (about 25 s); writes
``benchmarks/results/validate_parallel.txt`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
import warnings
from pathlib import Path

import scalemodel as sm
from scalemodel.exceptions import ScalemodelError
from scalemodel.parallel import tp_allreduce_time

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "published_parallel.csv"
RESULTS = HERE / "results"

H100_PEAK = 989.5e12
"""H100 SXM dense bf16 peak [FLOP/s] (scalemodel's ``h100-sxm``); converts an MFU-only
row to TFLOP/s. It cancels inside a series."""

LLAMA_FFN = {"llama-3.1-70b": 28672, "llama-3.1-405b": 53248}
"""Feed-forward width of the Llama 3.1 models (``intermediate_size`` of their published
``config.json``), only to ask the library about the refused rows [-]."""

ASSUMED = {
    # series: (micro-batch [sequences], activation recomputation, per-NIC line rate
    # [bits/s], what is assumed, said in the output)
    "megatron-h100-weak": (1, None, 400e9,
                           "micro-batch 1, 1F1B, no recomputation, 8 x 400 Gbit/s per node "
                           "(DGX H100; the README states no network)"),
    "megatron-h100-strong": (1, None, 400e9,
                             "as megatron-h100-weak; tp=8, pp=6 of the 177B row of the model "
                             "table (the strong-scaling text gives no sizes)"),
    "narayanan-a100": (1, "full", 200e9,
                       "full recomputation, 8 x 200 Gbit/s HDR per node (Selene, stated "
                       "by the paper); micro-batch and schedule as stated per row by "
                       "Megatron-LM's examples/sc21/run_table_1.sh (columns m, v)"),
    "narayanan-a100-175b-strong": (1, "full", 200e9,
                                   "micro-batch 1 (stated), 1F1B, full recomputation, Selene; "
                                   "tp=8, pp=12 for the stated model-parallel size 96"),
    "narayanan-a100-530b-strong": (1, "full", 200e9,
                                   "micro-batch 1 (stated), 1F1B, full recomputation, Selene; "
                                   "tp=8, pp=35 for the stated model-parallel size 280"),
}

NO_FLASH = ("narayanan-a100", "narayanan-a100-175b-strong", "narayanan-a100-530b-strong")
"""Series run before flash attention (Megatron-LM in 2021: FlashAttention is Dao et al.,
2022): the profile is asked with ``flash_attention=False`` and Megatron-LM's dropout
(``--attention-dropout`` and ``--hidden-dropout`` default 0.1, which
``examples/sc21/run_table_1.sh`` leaves), so each layer's score passes (its fused
scale-mask-softmax and the attention dropout) move their bytes at the A100's HBM
bandwidth (scalemodel.workloads.SCORE_PASS_BYTES). The H100 series of 2024 run
Transformer Engine's fused attention: flash attention, the default."""

TARGET_N = (0.05, 0.15)
"""Scaling with n at a fixed model (the series named ``*-strong``): median and largest
|error| allowed (issue 20, item 9) [-]."""

FLAGS = {
    "SP": "sequence parallelism (implied: Megatron's --tp-comm-overlap asserts "
          "--sequence-parallel); modelled as Megatron TP all-reduces, the same ring bytes",
    "TPO": "TP communication overlapped with GEMMs (--tp-comm-overlap); the model puts the "
           "TP all-reduces on the critical path",
    "DO": "distributed optimizer (--overlap-param-gather requires it): its reduce-scatter "
          "after the backward and its parameter all-gather, which Megatron overlaps with "
          "the next forward, are modelled as one all-reduce after the backward (the same "
          "ring bytes; the exposed part can be up to 2x too long)",
    "SCH": "pipeline schedule not stated; 1F1B assumed (v = 1, the bubble (pp - 1) / m); "
           "an interleaved schedule (virtual_stages=v) would divide it by v",
    "MB": "micro-batch size not stated; 1 assumed",
    "PAR": "tensor- and pipeline-parallel sizes not stated for this row (or only their "
           "product); assumed as in the series' heading",
    "F8": "Float8 linear layers (torch.compile + Float8): absorbed in the calibrated "
          "efficiency, which is relative to the bf16 peak",
    "ATP": "AsyncTP: TP communication overlapped with the GEMMs; the model puts the TP "
           "collectives on the critical path (this row checks that limit)",
}

TWO_D = "torchtitan-2d3d"
"""The series whose rows without a pipeline (22-23) are asked as FSDP x TP."""

TWO_D_SEQ = 8192
"""Sequence of torchtitan's Llama 3 70B config (``train_configs/llama3_70b.toml``:
``seq_len = 8192``); Table 4 does not state it [tokens]."""

TWO_D_MEMORY = {22: 71.9, 23: 67.6}
"""Peak memory of the 2-D rows, torchtitan ``docs/performance.md`` Table 4 at eaea6f6,
column Memory(GiB) (not in the CSV; printed beside memory()'s estimate) [GiB]."""


def _published_memory(row):
    return TWO_D_MEMORY[row]


TWO_D_ASSUMED = ("sequence 8192 (torchtitan's train_configs/llama3_70b.toml), one "
                 "micro-batch of the local batch 16 per step, full recomputation (stated), "
                 "bf16 all-gathers and fp32 reduce-scatters (torchtitan's mixed-precision "
                 "defaults), one FSDP unit per block, 8 x 400 Gbit/s per node (stated: "
                 "Grand Teton, 400 Gb/s per GPU)")


def load_rows():
    """The published rows, numbers parsed, blanks None."""
    ints = ("row", "heads", "hidden", "layers", "vocab", "seq", "tp", "pp", "dp", "gpus",
            "global_batch", "local_batch", "micro_batch", "gpus_per_node", "nics_per_node",
            "virtual_stages")
    floats = ("params_b", "tflops_per_gpu", "mfu_percent", "tokens_per_s_per_gpu",
              "nic_gbps")
    out = []
    with open(DATA) as fh:
        for r in csv.DictReader(fh):
            for k in ints:
                r[k] = int(r[k]) if r[k] else None
            for k in floats:
                r[k] = float(r[k]) if r[k] else None
            out.append(r)
    return out


def source_flops(r):
    """FLOPs of one iteration as the source counts them [FLOP].

    ``megatron-2024``: ``num_floating_point_operations`` of Megatron-LM at f2e5db4
    (``megatron/training/training.py``), no GQA, plain 4h MLP: 72 B s l h^2 (1 + s/(6h) +
    V/(12 l h)). ``narayanan-2021``: the paper's eq. (3), recomputation included:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    """
    B, s, l, h, V = r["global_batch"], r["seq"], r["layers"], r["hidden"], r["vocab"]
    if r["flops_formula"] == "megatron-2024":
        return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    if r["flops_formula"] == "narayanan-2021":
        return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    raise ValueError(r["flops_formula"])


def per_gpu_rate(r):
    """The row's per-GPU FLOP rate as published [FLOP/s]."""
    if r["tflops_per_gpu"] is not None:
        return r["tflops_per_gpu"] * 1e12
    return r["mfu_percent"] / 100.0 * H100_PEAK


def published_time(r):
    """The row's iteration time implied by its published rate [s]."""
    return source_flops(r) / (per_gpu_rate(r) * r["gpus"])


VARIANT = {}
"""A change of the assumptions for every series at once (the sensitivity block):
``micro_batch`` [sequences], ``grad_dtype`` [-]; empty for the main results."""

SENSITIVITY = (("micro-batch 2", dict(micro_batch=2)),
               ("fp32 gradients", dict(grad_dtype="fp32")),
               ("flash attention everywhere", dict(flash_attention=True)))


def micro_batch(r):
    """The row's micro-batch: stated, else the series' assumption [sequences]."""
    if r["micro_batch"] is not None:
        return r["micro_batch"]
    return VARIANT.get("micro_batch", ASSUMED[r["series"]][0])


FALLBACK = set()
"""(variant, row) where a sensitivity variant's micro-batches are not a multiple of pp, so
Megatron would refuse the stated interleaved schedule: 1F1B is used there (printed)."""


def virtual_stages(r):
    """Model chunks per stage: stated (interleaved 1F1B), else 1 (1F1B) [chunks]."""
    v = r["virtual_stages"] or 1
    if v > 1 and microbatches(r) % r["pp"]:
        if not VARIANT:
            raise ValueError(f"row {r['row']}: m not a multiple of pp for its schedule")
        FALLBACK.add((tuple(sorted(VARIANT.items())), r["row"]))
        return 1
    return v


def microbatches(r):
    """Micro-batches per step and replica, B / (dp b) [micro-batches]."""
    b = micro_batch(r)
    m, rest = divmod(r["global_batch"], r["dp"] * b)
    if rest:
        raise ValueError(f"row {r['row']}: batch {r['global_batch']} not a multiple of "
                         f"dp x micro-batch")
    return m


def flags(r):
    """Codes of what the row has (stated or implied) that the model does not."""
    out = []
    if r["series"].startswith("megatron-h100"):
        if r["tp"] > 1:
            out += ["SP", "TPO"]
        out.append("DO")
    if r["pp"] > 1 and not r["schedule"]:
        out.append("SCH")
    if r["micro_batch"] is None:
        out.append("MB")
    if r["series"].endswith("-strong"):
        out.append("PAR")
    return out


def profile(r, eta):
    """The row's single-GPU profile of the whole model, one micro-batch, at ``eta``."""
    b = micro_batch(r)
    no_flash = r["series"] in NO_FLASH
    cfg = sm.TransformerConfig(layers=r["layers"], hidden=r["hidden"], heads=r["heads"],
                               ffn=4 * r["hidden"], vocab=r["vocab"], seq=r["seq"],
                               micro_batch=b, gated_ffn=False, norm="layernorm",
                               bias=True, learned_positions=r["seq"],
                               tied_embeddings=r["series"] == "narayanan-a100",
                               dropout=no_flash, name=r["model"])
    return sm.transformer_profile(cfg, r["gpu"], efficiency=eta, name=r["model"],
                                  grad_dtype=VARIANT.get("grad_dtype"),
                                  flash_attention=VARIANT.get("flash_attention",
                                                              not no_flash))


def iteration(r, eta):
    """scalemodel's iteration of the row at efficiency ``eta``."""
    _, recompute, nic, _ = ASSUMED[r["series"]]
    return sm.iteration_time(profile(r, eta), r["gpus"], nic, tp=r["tp"], pp=r["pp"],
                             microbatches=microbatches(r), gpus_per_node=8,
                             nics_per_node=8, intra_bw=sm.get_gpu(r["gpu"]).intra_node_bw,
                             activation_checkpointing=recompute,
                             virtual_stages=virtual_stages(r))


def _tp_time(r, m):
    """The TP all-reduces of one step, eq. tp-compute: 4 per layer and micro-batch (6
    under full recomputation, whose recomputed forward runs its 2 again) over the
    m + (pp - 1)/v micro-batch slots of the (interleaved) 1F1B step [s]."""
    a_t = tp_allreduce_time(r["seq"] * r["hidden"] * micro_batch(r) * 2.0,
                            r["tp"], sm.get_gpu(r["gpu"]).intra_node_bw)
    per_layer = 6 if ASSUMED[r["series"]][1] == "full" else 4
    slots = m + (r["pp"] - 1) / virtual_stages(r)
    return slots * per_layer * a_t * r["layers"] / r["pp"]


def predicted_time(r, eta, bare=False):
    """scalemodel's iteration time of the row at ``eta`` [s], and the iteration.

    ``bare``: less the pipeline bubble and the TP collectives, a diagnostic bound on what
    a bubble-free schedule and overlapped TP could recover (not a model).
    """
    it = iteration(r, eta)
    if not bare:
        return it.total, it
    m, lag = microbatches(r), (r["pp"] - 1) / virtual_stages(r)
    bubble = (it.forward + it.backward) * lag / (m + lag)
    return it.total - bubble - _tp_time(r, m) * m / (m + lag), it


def calibrate(r, bare=False):
    """The efficiency at which the row's predicted time is its published one [-]."""
    return _solve_eta(lambda eta: predicted_time(r, eta, bare)[0], published_time(r), r)


def _solve_eta(time_at, target, r):
    """The efficiency at which ``time_at(eta)`` [s] is ``target`` [s], by bisection [-]."""
    lo, hi = 1e-3, 1.0
    if time_at(hi) > target:
        raise ValueError(f"row {r['row']}: slower than published even at efficiency 1")
    for _ in range(60):  # the time falls with eta: bisect in log space
        mid = (lo * hi) ** 0.5
        if time_at(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def llama_config(r, seq=TWO_D_SEQ, micro_batch=None):
    """The Llama 3.1 configuration of a torchtitan row (8 KV heads, SwiGLU, RMSNorm)."""
    return sm.TransformerConfig(layers=r["layers"], hidden=r["hidden"], heads=r["heads"],
                                kv_heads=8, ffn=LLAMA_FFN[r["model"]], vocab=r["vocab"],
                                seq=seq, micro_batch=micro_batch or 1, name=r["model"])


def two_d_time(r):
    """A 2-D row's iteration time from its published tokens/s per GPU [s]."""
    return r["global_batch"] * TWO_D_SEQ / (r["tokens_per_s_per_gpu"] * r["gpus"])


def two_d_scenario(r, eta):
    """The keywords and profile of a 2-D row asked as FSDP x TP at efficiency ``eta``."""
    prof = sm.transformer_profile(llama_config(r, micro_batch=r["local_batch"]), r["gpu"],
                                  efficiency=eta, name=r["model"])
    kw = dict(tp=r["tp"], sharding=sm.Sharding("zero3", param_dtype="bf16",
                                               reduce_dtype="fp32"),
              gpus_per_node=r["gpus_per_node"], nics_per_node=r["nics_per_node"],
              intra_bw=sm.get_gpu(r["gpu"]).intra_node_bw,
              # torchtitan's full AC (parallelize_llama.py at eaea6f6: ptd_checkpoint_wrapper
              # (module, preserve_rng_state=False)): checkpoint_wrapper's default is the
              # non-reentrant checkpoint, which stops early (eq. early-stop)
              activation_checkpointing="full-early-stop")
    return prof, kw


def two_d_iteration(r, eta):
    """scalemodel's iteration of a 2-D row, and its TP collectives per step [s]."""
    prof, kw = two_d_scenario(r, eta)
    it = sm.iteration_time(prof, r["gpus"], r["nic_gbps"] * 1e9, **kw)
    mp = sm.Scenario.build(prof, **kw).profile.provenance["model_parallel"]
    return it, mp["tp_collectives_per_microbatch"] * mp["microbatches"]


def two_d_flags(r):
    """Codes of what a 2-D row has that the model does not."""
    return ["SP", "F8"] + (["ATP"] if r["sequence_parallel"] == "async TP" else [])


def evaluate_2d(rs):
    """The 2-D rows: the first (without AsyncTP) calibrates, the others are predicted."""
    cal = rs[0]
    eta = _solve_eta(lambda e: two_d_iteration(cal, e)[0].total, two_d_time(cal), cal)
    out = []
    for r in rs:
        it, tp_time = two_d_iteration(r, eta)
        out.append(dict(row=r["row"], model=r["model"], gpus=r["gpus"], tp=r["tp"],
                        dp=r["dp"], cal=cal["row"], eta=eta,
                        published=r["tokens_per_s_per_gpu"],
                        predicted=r["global_batch"] * TWO_D_SEQ / (it.total * r["gpus"]),
                        error=two_d_time(r) / it.total - 1,
                        rule=cal["tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] - 1,
                        hidden_error=two_d_time(r) / (it.total - tp_time) - 1,
                        tp_share=tp_time / it.total,
                        dp_share=it.exposed_communication / it.total,
                        dp_sf=float(it.scaling_factor), flags=two_d_flags(r)))
    mem = {sp: sm.memory(llama_config(cal, micro_batch=cal["local_batch"]), cal["gpus"],
                         sharding="zero3", tp=cal["tp"], activation_checkpointing="full",
                         gpus_per_node=cal["gpus_per_node"], suggest=False,
                         sequence_parallel=sp).per_gpu for sp in (True, False)}
    return dict(calibration=cal["row"], eta=eta, rows=out, memory=mem[True],
                memory_without_sp=mem[False])


def two_d_lines(s, published_memory):
    """Text lines of the 2-D block."""
    head = ["row", "model", "GPUs", "tp x FSDP", "calibrated on", "eta",
            "published tokens/s/GPU", "predicted", "error", "constant MFU",
            "TP hidden (bound)", "TP comm", "DP exposed", "DP scaling", "flags"]
    body = [[str(x["row"]), x["model"], str(x["gpus"]), f"{x['tp']} x {x['dp']}",
             f"row {x['cal']}", f"{x['eta']:.3f}", f"{x['published']:.0f}",
             f"{x['predicted']:.1f}", f"{100 * x['error']:+.1f} %",
             f"{100 * x['rule']:+.1f} %", f"{100 * x['hidden_error']:+.1f} %",
             f"{100 * x['tp_share']:.1f} %", f"{100 * x['dp_share']:.1f} %",
             f"{x['dp_sf']:.3f}", ",".join(x["flags"])] for x in s["rows"]]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    held = [x for x in s["rows"] if x["row"] != s["calibration"]]
    lines += ["", f"row {s['calibration']} calibrates (efficiency {s['eta']:.3f} of the "
              "bf16 peak, Float8 included); " + "; ".join(
                  f"row {x['row']} (AsyncTP) predicted {100 * x['error']:+.1f} %: AsyncTP "
                  "overlaps the TP communication with the GEMMs, which the model does not "
                  f"(TP collectives {100 * x['tp_share']:.1f} % of the predicted step); "
                  f"with every TP collective hidden the model would say "
                  f"{100 * x['hidden_error']:+.1f} %, so the published gain lies "
                  + ("between no overlap and full overlap" if x["error"] <= 0
                     <= x["hidden_error"] else "OUTSIDE [no overlap, full overlap]")
                  for x in held),
              f"the data-parallel dimension is hidden here (DP scaling "
              f"{s['rows'][0]['dp_sf']:.3f}): these rows check the per-GPU compute and TP "
              "terms, not the data-parallel traffic",
              f"memory(sequence_parallel=True), as torchtitan's TP plan runs: "
              f"{s['memory'] / 2**30:.1f} GiB per GPU (reserved) against the published "
              f"{published_memory} GiB of row {s['calibration']}: "
              f"{100 * (s['memory'] / 2**30 / published_memory - 1):+.1f} %, not tuned "
              f"(without sequence parallelism {s['memory_without_sp'] / 2**30:.1f} GiB; "
              "assumed as for the time: local batch 16 as one micro-batch of 8192 tokens, "
              "full recomputation, the unfused loss on vocabulary-parallel logits; "
              "Float8 and torch.compile not modelled)"]
    return lines


def entry(r, cal, eta, eta_bare):
    """One prediction of row ``r`` from calibration row ``cal`` (at ``eta``; the
    diagnostic at ``eta_bare``, calibrated the same way)."""
    total, it = predicted_time(r, eta)
    m = microbatches(r)
    return dict(row=r["row"], model=r["model"], gpus=r["gpus"], tp=r["tp"], pp=r["pp"],
                dp=r["dp"], m=m, v=virtual_stages(r),
                bubble=(r["pp"] - 1) / (virtual_stages(r) * m), cal=cal["row"], eta=eta,
                published=per_gpu_rate(r) / 1e12,
                predicted=source_flops(r) / (total * r["gpus"]) / 1e12,
                error=published_time(r) / total - 1,
                rule=per_gpu_rate(cal) / per_gpu_rate(r) - 1,
                bare_error=published_time(r) / predicted_time(r, eta_bare, True)[0] - 1,
                dp_sf=float(it.scaling_factor), tp_share=_tp_time(r, m) / total,
                dp_share=it.exposed_communication / total, flags=flags(r))


def refusal(r):
    """What the library answers for a row it cannot represent (a message)."""
    reasons = [f"{r['dp_optimizer']} with pp"]
    if "interleaved" in r["schedule"]:
        reasons.append("interleaved schedule, chunks per stage not stated")
    if r["sequence_parallel"] == "async TP":
        reasons.append("async TP")
    reasons.append("Float8 (torch.compile + Float8 in the source)")
    cfg = llama_config(r)
    try:
        sm.iteration_time(sm.transformer_profile(cfg, r["gpu"]), r["gpus"], 400e9,
                          tp=r["tp"], pp=r["pp"], microbatches=8 if r["pp"] > 1 else None,
                          sharding="zero3", gpus_per_node=8, nics_per_node=8)
        answer = "ANSWERED (a refusal was expected)"
    except ScalemodelError as exc:
        answer = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return dict(row=r["row"], model=r["model"], gpus=r["gpus"], tp=r["tp"], pp=r["pp"],
                dp=r["dp"], published=r["tokens_per_s_per_gpu"], reasons=reasons,
                answer=answer)


def evaluate():
    """Every series: its calibration, predictions, all-pairs check; the refused rows."""
    rows = load_rows()
    series = {}
    for r in rows:
        series.setdefault(r["series"], []).append(r)
    out, refused = {}, []
    for name, rs in series.items():
        if name not in ASSUMED:
            if name == TWO_D:
                out[TWO_D] = evaluate_2d([r for r in rs if r["pp"] == 1])
            refused += [refusal(r) for r in rs if name != TWO_D or r["pp"] > 1]
            continue
        rs = sorted(rs, key=lambda r: (r["gpus"], r["row"]))
        etas = {r["row"]: calibrate(r) for r in rs}
        bare = {r["row"]: calibrate(r, bare=True) for r in rs}
        cal = rs[0]
        main = [entry(r, cal, etas[cal["row"]], bare[cal["row"]]) for r in rs[1:]]
        pairs = [entry(r, c, etas[c["row"]], bare[c["row"]]) for c in rs for r in rs
                 if r is not c]
        out[name] = dict(calibration=cal["row"], eta=etas[cal["row"]], etas=etas,
                         rows=main, pairs=pairs, fit=fit_check(cal))
    return out, refused


FIT_START = 0.3
"""MFU the profile of :func:`fit_check`'s run starts at [-]."""


def fit_check(r):
    """:func:`scalemodel.fit_cluster` on row ``r`` as a tensor- and pipeline-parallel
    run: the efficiency it finds [-]."""
    from scalemodel.checkpointing import with_recompute

    _, recompute, nic, _ = ASSUMED[r["series"]]
    prof = profile(r, FIT_START)
    if recompute not in (None, "none"):
        prof = with_recompute(prof, recompute)
    run = dict(model=prof, n=r["gpus"], bw=nic, iteration_time=published_time(r),
               tp=r["tp"], pp=r["pp"], microbatches=microbatches(r),
               virtual_stages=virtual_stages(r))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster([run], fit=["efficiency"], fusion=None, gpus_per_node=8,
                             nics_per_node=8, intra_bw=sm.get_gpu(r["gpu"]).intra_node_bw)
    return fit.cluster.extra["efficiency"]["value"]


def sensitivity():
    """Each variant of the assumptions: every series from its fewest-GPU row again."""
    rows = load_rows()
    out = []
    for label, change in SENSITIVITY:
        VARIANT.update(change)
        try:
            for name in ASSUMED:
                rs = sorted((r for r in rows if r["series"] == name),
                            key=lambda r: (r["gpus"], r["row"]))
                eta, bare = calibrate(rs[0]), calibrate(rs[0], bare=True)
                out.append((label, name, summary([entry(r, rs[0], eta, bare)
                                                  for r in rs[1:]])))
        finally:
            VARIANT.clear()
    return out


def summary(entries):
    """Median and largest |error|, the model's and the constant-MFU rule's [-]."""
    e = [abs(x["error"]) for x in entries]
    q = [abs(x["rule"]) for x in entries]
    b = [abs(x["bare_error"]) for x in entries]
    return dict(n=len(e), median=statistics.median(e), largest=max(e),
                rule_median=statistics.median(q), rule_largest=max(q),
                bare_median=statistics.median(b), bare_largest=max(b))


def table(entries):
    """Text lines of one table."""
    head = ["row", "model", "GPUs", "tp", "pp", "dp", "m", "v", "bubble", "calibrated on",
            "eta", "published TFLOP/s/GPU", "predicted", "error", "constant MFU",
            "diagnostic",
            "TP comm", "DP exposed", "DP scaling", "flags"]
    body = [[str(x["row"]), x["model"], str(x["gpus"]), str(x["tp"]), str(x["pp"]),
             str(x["dp"]), str(x["m"]), str(x["v"]), f"{100 * x['bubble']:.1f} %",
             f"row {x['cal']}",
             f"{x['eta']:.3f}", f"{x['published']:.1f}", f"{x['predicted']:.1f}",
             f"{100 * x['error']:+.1f} %", f"{100 * x['rule']:+.1f} %",
             f"{100 * x['bare_error']:+.1f} %",
             f"{100 * x['tp_share']:.1f} %", f"{100 * x['dp_share']:.1f} %",
             f"{x['dp_sf']:.3f}", ",".join(x["flags"]) or "-"] for x in entries]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    return ["  ".join(h.rjust(w) for h, w in zip(head, widths))] + [
        "  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]


def _line(what, s):
    better = s["median"] <= s["rule_median"] and s["largest"] <= s["rule_largest"]
    return (f"{what}: {s['n']} prediction{'s' * (s['n'] != 1)}; median |error| "
            f"{100 * s['median']:.1f} %, "
            f"largest {100 * s['largest']:.1f} %; constant-MFU rule median "
            f"{100 * s['rule_median']:.1f} %, largest {100 * s['rule_largest']:.1f} % "
            f"-> {'at least as good as' if better else 'WORSE than'} the rule")


def _bare_line(s):
    return (f"  diagnostic, not a prediction: without the pipeline bubble and the TP collectives "
            f"the same calibration would miss by median {100 * s['bare_median']:.1f} %, "
            f"largest {100 * s['bare_largest']:.1f} %")


def report(res, refused, sens):
    """The lines printed and written."""
    lines = ["TP x PP x DP against published tables, each series calibrated from its "
             "fewest-GPU row (issue 20, items 4 and 9)", ""]
    for name, s in res.items():
        if name == TWO_D:
            continue
        fit = s.get("fit")
        lines += [f"== {name} (assumed: {ASSUMED[name][3]})",
                  f"calibration: row {s['calibration']}, efficiency {s['eta']:.3f}"
                  + ("" if fit is None else f" (fit_cluster on it as a tp/pp run, from "
                     f"{FIT_START:g}: {fit:.3f})") + "; "
                  "efficiency each row would need: " + ", ".join(
                      f"{k}: {v:.3f}" for k, v in s["etas"].items()),
                  *table(s["rows"]), "", _line(f"{name}, from row {s['calibration']}",
                                               summary(s["rows"])),
                  _bare_line(summary(s["rows"]))]
        if len(s["etas"]) > 2:
            lines.append(_line(f"{name}, all pairs", summary(s["pairs"])))
        lines.append("")
    two_d = res.pop(TWO_D, None)
    every = [x for s in res.values() for x in s["rows"]]
    strong = [x for name, s in res.items() if name.endswith("-strong") for x in s["rows"]]
    sn = summary(strong)
    ok = sn["median"] <= TARGET_N[0] and sn["largest"] <= TARGET_N[1]
    lines += [_line("scaling with n at a fixed model (the *-strong series)", sn),
              f"  target median <= {100 * TARGET_N[0]:.0f} %, largest <= "
              f"{100 * TARGET_N[1]:.0f} %: {'met' if ok else 'NOT met'}",
              _line("all predicted rows", summary(every)),
              _line("all pairs, every series", summary(
                  [x for s in res.values() for x in s["pairs"]])), ""]
    lines += ["== sensitivity: the same protocol under other assumptions (all series at "
              "once; not chosen by their errors)"]
    for label, name, summ in sens:
        lines.append(_line(f"{label}: {name}", summ))
    for variant, row in sorted(FALLBACK):
        lines.append(f"  {dict(variant)}: row {row}'s micro-batches are not a multiple of pp "
                     "(Megatron refuses its interleaved schedule): 1F1B used")
    lines.append("")
    lines.append("diagnostic: the error with the pipeline bubble and the TP collectives "
                 "taken out of the model (calibration row included), a bound, not a "
                 "prediction")
    lines.append("v: model chunks per pipeline stage (1: 1F1B; > 1: interleaved 1F1B, "
                 "as the source states); bubble: (pp - 1) / (v m)")
    lines.append("flags (a prediction is still made; the row has something the model "
                 "does not):")
    lines += [f"  {k}: {v}" for k, v in FLAGS.items()]
    if two_d is not None:
        res[TWO_D] = two_d
        lines += ["", f"== {TWO_D}, 2-D rows: FSDP x TP (sharding='zero3', tp=8), "
                  f"calibrated on row {two_d['calibration']} (assumed: {TWO_D_ASSUMED})",
                  *two_d_lines(two_d, _published_memory(two_d["calibration"]))]
    lines += ["", "== not representable, not predicted (torchtitan 3-D rows: FSDP with "
              "a pipeline)"]
    for x in refused:
        lines.append(f"row {x['row']} {x['model']} on {x['gpus']} (tp {x['tp']}, pp "
                     f"{x['pp']}, FSDP {x['dp']}), published {x['published']:.0f} "
                     f"tokens/s/GPU: {'; '.join(x['reasons'])}")
        lines.append(f"    the library: {x['answer']}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    ap.add_argument("--no-write", action="store_true",
                    help="print only; do not write benchmarks/results/validate_parallel.txt")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res, refused = evaluate()
    lines = report(res, refused, sensitivity())
    lines.append(f"({time.perf_counter() - t0:.0f} s; scalemodel {sm.__version__})")
    print("\n".join(lines))
    if not args.no_write:
        from scalemodel.profiles import atomic_write_files
        RESULTS.mkdir(exist_ok=True)
        atomic_write_files({RESULTS / "validate_parallel.txt": "\n".join(lines) + "\n"})
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_parallel"))
