"""Recompute time of activation checkpointing against the H200's measured steps (issue 20,
item 1).

Data: ``calibration/results/h200/llm_memory_flash.json`` and ``llm_memory_noflash.json``
(its README): a Llama-style 1.35 B decoder trained on one H200 in eager PyTorch 2.11
(``calibration/llm_memory.py``), bf16 with an fp32 master copy, 10 timed steps after 3
warm-up steps, without checkpointing, with selective (torchtitan's op-level policy with
flash attention; Korthikanti's attention-core recompute without) and with full
checkpointing; flash attention at 8 x 2048 tokens, without it at 2 x 2048.

The full-checkpointing steps of those runs used PyTorch's non-reentrant checkpoint with
its default early stopping (the block's last product is not recomputed: asked as
``"full-early-stop"``); ``llm_memory_flash_no_early_stop.json`` and
``llm_memory_noflash_no_early_stop.json`` (``--no-early-stop``, recorded 2026-11-27 on
another H200 machine, the same code otherwise) replay the whole block (asked as
``"full"``), measured against the first runs' steps without checkpointing.

Protocol (the library as a user gets it, nothing fitted to these steps): the run's
configuration as a FLOP-derived profile on the H200 (:func:`scalemodel.transformer_profile`),
scaled so that its forward time is the measured forward time of the run without
checkpointing (the measured speed; the profile's shape), then
:func:`scalemodel.checkpointing.with_recompute` adds each mode's recompute: the matrix
multiplies' share of the forward time, and for ``"selective"`` the recomputed
element-wise bytes (:func:`scalemodel.checkpointing.elementwise_recompute_bytes`) at the
datasheet's 4.8 TB/s. Measured recompute: the run's backward minus the backward of the
run without checkpointing (medians). Step error: the measured step without
checkpointing plus the modelled recompute, over the measured step, minus 1. Beside it,
the recompute without the element-wise term (what the library charged before).

Run from the repository root: ``python benchmarks/validate_recompute.py`` (a second;
writes ``benchmarks/results/validate_recompute.txt`` unless ``--no-write``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import scalemodel as sm  # noqa: E402
from scalemodel.checkpointing import (Checkpointing, recompute_fraction,  # noqa: E402
                                      with_recompute)

DATA = ROOT / "calibration" / "results" / "h200"
OUT = ROOT / "benchmarks" / "results" / "validate_recompute.txt"


RUNS = (("llm_memory_flash.json", True, "llm_memory_flash_no_early_stop.json"),
        ("llm_memory_noflash.json", False, "llm_memory_noflash_no_early_stop.json"))
"""Each run without flash attention or with it, and its full-checkpointing step recorded
with early stopping off (``--no-early-stop``, 2026-11-27, another machine of the kind)."""


def _modes(d, flash, replay):
    """(policy label, Checkpointing, the measured times) of a run: its selective step,
    its full step (PyTorch 2.11's non-reentrant checkpoint, early stopping on by
    default: ``"full-early-stop"``) and the replaying full step of ``replay``."""
    return (("selective", Checkpointing("selective", flash_attention=flash),
             d["modes"]["selective"]["times_s"]),
            ("full, early stop", Checkpointing("full", flash_attention=flash,
                                               early_stop=True),
             d["modes"]["full"]["times_s"]),
            ("full, replay", Checkpointing("full", flash_attention=flash),
             replay["modes"]["full"]["times_s"]))


def rows():
    """Per run and mode: the label, measured and modelled recompute [s], the modelled
    one without the element-wise term [s], the measured steps [s]."""
    out = []
    for name, flash, replay_name in RUNS:
        d = json.loads((DATA / name).read_text())
        replay = json.loads((DATA / replay_name).read_text())
        c0 = {k: v for k, v in d["config"].items() if k != "name"}
        assert replay["checkpoint_early_stop"] is False
        assert sm.TransformerConfig(**c0) == sm.TransformerConfig(**{
            k: v for k, v in replay["config"].items() if k != "name"})  # fields added since
        c = {k: v for k, v in d["config"].items() if k != "name"}
        cfg = sm.TransformerConfig(**c)
        base = d["modes"]["none"]["times_s"]
        prof = sm.transformer_profile(cfg, d["memory_gpu"], name=c.get("name", "run"))
        prof = prof.scaled_to(prof.iteration_time * base["forward"]["median"]
                              / prof.forward_time)
        label = (f"{'flash' if flash else 'no flash'}, {cfg.micro_batch} x {cfg.seq} "
                 "tokens")
        for mode, ck, t in _modes(d, flash, replay):
            measured = t["backward"]["median"] - base["backward"]["median"]
            model = with_recompute(prof, ck).backward_time - prof.backward_time
            blocks = prof.forward_time * d["block_forward_flops_share"]
            flops_only = recompute_fraction(cfg, ck) * blocks
            out.append(dict(label=label, mode=mode, measured=measured, model=model,
                            flops_only=flops_only, step_none=base["step"]["median"],
                            step=t["step"]["median"]))
    return out


def main(argv=None):
    from _report import Report, parser
    args = parser(__doc__, "print only; do not rewrite benchmarks/results/"
                  "validate_recompute.txt").parse_args(argv)
    rep = Report()
    rep.say("Recompute time against the H200's measured steps (Llama-style 1.35 B, eager "
            "PyTorch 2.11; calibration/results/h200)", "",
            f"{'run':<26} {'policy':<17} {'measured':>9} {'model':>9} {'step error':>11} "
            f"{'matmuls only':>13} {'step error':>11}")
    errs, before = [], []
    for r in rows():
        e = (r["step_none"] + r["model"]) / r["step"] - 1
        b = (r["step_none"] + r["flops_only"]) / r["step"] - 1
        errs.append(e)
        before.append(b)
        rep.say(f"{r['label']:<26} {r['mode']:<17} {r['measured'] * 1e3:7.1f}ms "
                f"{r['model'] * 1e3:7.1f}ms {100 * e:+10.1f}% {r['flops_only'] * 1e3:11.1f}ms "
                f"{100 * b:+10.1f}%")
    rep.say("", f"largest |step error|: {100 * max(map(abs, errs)):.1f} % (matmuls only: "
            f"{100 * max(map(abs, before)):.1f} %)", "", rep.elapsed_line())
    if not args.no_write:
        rep.write(OUT)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_recompute"))
