"""One transformer block on one H200: the recompute the library charges against the
measured one, and what a block's efficiency does with width, micro-batch and sequence.

Data: ``calibration/results/h200/blocks`` (its README): ``calibration/block_sweep.py`` on
one H200 (PyTorch 2.11, bf16, SDPA flash attention, MPT-style blocks: GELU MLP of 4 x
width, LayerNorm, no bias, sequence 2048). A block's time is the difference of two models
of 2 and 4 blocks (the embeddings, head, loss and optimizer drop out); ``blocks.json`` is
the sweep, ``blocks-repeat.json`` a second sweep on a fresh machine with the kernels
profiled, ``blocks-no-early-stop.json`` full checkpointing with PyTorch's early stopping
off. ``calibration/results/h100/blocks`` holds the same sweep on one H100 SXM
(``blocks.json``, kernels profiled in the same call) and its replay
(``blocks-no-early-stop.json``), printed as a second section with the two GPUs' block
utilisation side by side.

Protocol (nothing fitted): the measured recompute of a block is its backward under full
checkpointing minus its backward without (same sweep, same machine); the library's is
``recompute_fraction(cfg, mode)`` of the block's measured forward, ``mode``
``"full-early-stop"`` (PyTorch's non-reentrant checkpoint, its default) or ``"full"``
(early stopping off: the whole block replayed). The kernel profile splits the same
difference into matrix products, flash attention and the rest.

Run from the repository root: ``python benchmarks/validate_blocks.py`` (a second; writes
``benchmarks/results/validate_blocks.txt`` unless ``--no-write``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import scalemodel as sm  # noqa: E402
from _report import Report, parser  # noqa: E402  (main()'s parser and output)
from scalemodel.checkpointing import recompute_fraction  # noqa: E402

DATA = ROOT / "calibration" / "results" / "h200" / "blocks"
H100 = ROOT / "calibration" / "results" / "h100" / "blocks"
OUT = ROOT / "benchmarks" / "results" / "validate_blocks.txt"
NAMES = {2048: "mpt-1b", 2560: "mpt-3b", 4096: "mpt-7b", 5120: "mpt-13b", 7168: "mpt-30b",
         8192: "mpt-70b"}


def load(name, folder=DATA):
    return json.loads((folder / name).read_text())


def config(p):
    """The measured block's shape as a one-layer TransformerConfig (the sweep's)."""
    h = p["hidden"]
    return sm.TransformerConfig(layers=1, hidden=h, heads=p["heads"], ffn=4 * h, vocab=8192,
                                seq=p["seq"], micro_batch=p["micro_batch"],
                                gated_ffn=False, norm="layernorm", bias=False)


def _index(blocks):
    return {(p["hidden"], p["seq"], p["micro_batch"], p["mode"]): p for p in blocks
            if p.get("block_step") is not None}


def h200_sweeps():
    """The H200's sweeps as (label, blocks, blocks without checkpointing or None): early
    stopping (both sweeps) and replay (the no-early-stop sweep, against the repeat sweep's
    blocks without checkpointing; both recorded on the same day, the replay on a third
    machine)."""
    return (("sweep", load("blocks.json")["blocks"], None),
            ("repeat", load("blocks-repeat.json")["blocks"], None),
            ("replay", load("blocks-no-early-stop.json")["blocks"],
             load("blocks-repeat.json")["blocks"]))


def h100_sweeps():
    """The H100's: its sweep, and its replay against the sweep (one call, one machine)."""
    sweep = load("blocks.json", H100)["blocks"]
    return (("sweep", sweep, None),
            ("replay", load("blocks-no-early-stop.json", H100)["blocks"], sweep))


def recompute_rows(sweeps):
    """Measured and modelled recompute per block [s] over ``sweeps`` (label, blocks,
    blocks without checkpointing or None: the same sweep's)."""
    rows = []
    for label, blocks, base_blocks in sweeps:
        full = _index(blocks)
        base = _index(base_blocks if base_blocks is not None else blocks)
        for (h, s, mb, mode), p in sorted(full.items()):
            none = base.get((h, s, mb, "none"))
            if mode != "full" or none is None:
                continue
            ck = "full" if label == "replay" else "full-early-stop"
            frac = recompute_fraction(config(p), ck)
            measured = p["block_backward"] - none["block_backward"]
            rows.append(dict(sweep=label, name=NAMES.get(h, str(h)), mb=mb, mode=ck,
                             forward=none["block_forward"], measured=measured,
                             model=frac * none["block_forward"],
                             step=none["block_step"]))
    return rows


def kernel_rows(kernels, replay_kernels=()):
    """Recomputed matrix-product time over the forward's (the profile's matmul class:
    a forward's products are a third of the block's), against the library's count;
    ``kernels`` a sweep's profiled blocks, ``replay_kernels`` a no-early-stop sweep's."""
    rows = []
    prof = {(k["hidden"], k["micro_batch"], k["mode"]): k
            for k in kernels if "error" not in k}
    replay = {(k["hidden"], k["micro_batch"]): k
              for k in replay_kernels if "error" not in k}
    for (h, mb, mode), k in sorted(prof.items()):
        if mode != "none":
            continue
        fwd_mm = k["block_by_class"]["matmul"] / 3.0
        p = {"hidden": h, "heads": k["heads"], "seq": k["seq"], "micro_batch": mb}
        cfg = config(p)
        core = 4.0 * mb * p["seq"] ** 2 * h
        layer = sum(2.0 * cfg.tokens * i * o for i, o in sm.checkpointing._layer_matmuls(cfg))
        for label, other, ck in (("early stop", prof.get((h, mb, "full")), "full-early-stop"),
                                 ("replay", replay.get((h, mb)), "full")):
            if other is None:
                continue
            measured = (other["block_by_class"]["matmul"] - k["block_by_class"]["matmul"]) \
                / fwd_mm
            model = (recompute_fraction(cfg, ck) * (layer + core) - core) / layer
            rows.append(dict(name=NAMES.get(h, str(h)), mb=mb, mode=label, measured=measured,
                             model=model, other=k["block_by_class"]["other"]
                             / k["block_total"], flash=k["block_by_class"]["flash"]
                             / k["block_total"]))
    return rows


def efficiency_table(rep, folder=DATA):
    """Block HFU by width and micro-batch (sweep), and the plain products' efficiency."""
    d = load("blocks.json", folder)
    idx = _index(d["blocks"])
    gemm = {(g["hidden"], g["micro_batch"]): g["efficiency"] for g in d["gemms"]}
    mbs = sorted({k[2] for k in idx if k[1] == 2048})
    gpu = "H200" if folder == DATA else "H100"
    rep.say("", f"== a block's hardware FLOPs utilisation ({gpu} bf16 peak "
            f"{d['environment']['bf16_peak_flops'] / 1e12:.1f} TFLOP/s; "
            "full with early stopping counts its recompute's FLOPs; sweep, 5 steps)",
            f"{'model':<8} {'width':>6} " + " ".join(
                f"{'mb ' + str(m) + ' none/full/mm':>22}" for m in mbs))
    for h in sorted({k[0] for k in idx}):
        cells = []
        for m in mbs:
            a, b = idx.get((h, 2048, m, "none")), idx.get((h, 2048, m, "full"))
            g = gemm.get((h, m))
            cells.append(f"{_pct(a and a['hfu'])}/{_pct(b and b['hfu'])}/{_pct(g)}"
                         .rjust(22))
        rep.say(f"{NAMES.get(h, h):<8} {h:>6} " + " ".join(cells))
    seq = sorted((k[1], k[2], p) for k, p in idx.items()
                 if k[0] == 4096 and k[3] == "none" and k[1] * k[2] == 16384)
    if len(seq) > 1:
        rep.say("", "sequence sweep (width 4096, 32 heads, 16,384 tokens a step, none):",
                "  " + ", ".join(f"seq {s}: {_pct(p['hfu'])}" for s, _, p in seq))
    return idx


def pressure_table(rep):
    """The allocator capped near the allocated peak (``calibration/results/h200/pressure``):
    step time and retries per step, FSDP2 on one rank and plain."""
    folder = DATA.parent / "pressure"
    files = sorted(folder.glob("pressure-*.json"))
    if not files:
        return
    rep.say("", "== memory pressure on one GPU: the caching allocator capped at a multiple of "
            "the uncapped step's allocated peak (set_per_process_memory_fraction; "
            "calibration/results/h200/pressure)",
            f"{'model':<8} {'layers':>6} {'mb':>3} {'wrapper':<6} {'allocated':>10} "
            f"{'reserved':>9} {'cap':>5} {'step':>8} {'retries/step':>13}")
    for f in files:
        for p in json.loads(f.read_text())["pressure"]:
            if "error" in p:
                continue
            u = p["uncapped"]
            head = (f"{NAMES.get(p['hidden'], p['hidden']):<8} {p['layers']:>6} "
                    f"{p['micro_batch']:>3} {'FSDP2' if p['fsdp'] else 'plain':<6} "
                    f"{u['max_allocated'] / 2 ** 30:8.1f}Gi {u['max_reserved'] / 2 ** 30:7.1f}Gi")
            rep.say(f"{head} {'none':>5} {1e3 * u['step']:6.1f}ms "
                    f"{u['alloc_retries_per_step']:13.1f}")
            for c in p["capped"]:
                step = "OOM" if c.get("oom") else f"{100 * (c['step'] / u['step'] - 1):+5.1f} %"
                retries = "" if c.get("oom") else f"{c['alloc_retries_per_step']:13.1f}"
                rep.say(f"{'':<{len(head)}} {c['headroom']:5.2f} {step:>8} {retries}".rstrip())


def _pct(x):
    return "  -  " if x is None else f"{100 * x:.1f}"


def main(argv=None):
    args = parser(__doc__, "print only; do not rewrite benchmarks/results/"
                  "validate_blocks.txt").parse_args(argv)
    rep = Report()
    env = load("blocks.json")["environment"]
    rep.say(f"One MPT-style block on one {env['gpu_name']} (PyTorch {env['torch']}; "
            "calibration/results/h200/blocks)", "",
            "== recompute per block under full checkpointing: measured (backward with "
            "minus without) against recompute_fraction x the measured forward",
            f"{'sweep':<7} {'model':<8} {'mb':>3} {'library mode':<16} {'forward':>9} "
            f"{'measured':>9} {'model':>9} {'error':>7} {'of step':>8}")
    errs = {"full-early-stop": [], "full": []}
    for r in recompute_rows(h200_sweeps()):
        e = r["model"] / r["measured"] - 1
        step = (r["model"] - r["measured"]) / (r["step"] + r["measured"])
        errs[r["mode"]].append(step)
        rep.say(f"{r['sweep']:<7} {r['name']:<8} {r['mb']:>3} {r['mode']:<16} "
                f"{1e3 * r['forward']:7.2f}ms {1e3 * r['measured']:7.2f}ms "
                f"{1e3 * r['model']:7.2f}ms {100 * e:+6.1f}% {100 * step:+7.1f}%")
    for mode, v in errs.items():
        if v:
            rep.say(f"{mode}: {len(v)} blocks, median error of the checkpointed step "
                    f"{100 * statistics.median(v):+.1f} %, largest "
                    f"{100 * max(map(abs, v)):.1f} %")
    skipped = 1.0 - recompute_fraction(config({"hidden": 8192, "heads": 64, "seq": 2048,
                                                "micro_batch": 2}), "full-early-stop")
    rep.say(f"(the two counts differ by {100 * skipped:.0f} % of a forward on the mpt-70b "
            "block: the down projection's share of its FLOPs)")
    rep.say("", "== the recomputed matrix products over the forward's (kernel profile, "
            "repeat sweep; matmul = the block's products, 'other' = element-wise, norms, "
            "copies)",
            f"{'model':<8} {'mb':>3} {'recompute':<11} {'measured':>9} {'library':>8} "
            f"{'flash share':>12} {'other share':>12}")
    for r in kernel_rows(load("blocks-repeat.json")["kernels"],
                         load("blocks-no-early-stop.json")["kernels"]):
        rep.say(f"{r['name']:<8} {r['mb']:>3} {r['mode']:<11} {r['measured']:9.3f} "
                f"{r['model']:8.3f} {100 * r['flash']:11.1f}% {100 * r['other']:11.1f}%")
    efficiency_table(rep)
    fsdp = [f for f in load("blocks-repeat.json").get("fsdp", []) if "error" not in f]
    fsdp += [f for f in load("blocks.json").get("fsdp", []) if "error" not in f]
    if fsdp:
        rep.say("", "== FSDP2's own work per block (fully_shard on every block, one-rank "
                "NCCL group: its collectives are copies), none, both sweeps:")
        for f in sorted(fsdp, key=lambda f: (f["hidden"], f["micro_batch"])):
            plain = f["plain"]["block_forward"] + f["plain"]["block_backward"]
            rep.say(f"  {NAMES.get(f['hidden'], f['hidden']):<8} mb {f['micro_batch']}: "
                    f"plain block {1e3 * plain:7.2f} ms, FSDP2 adds "
                    f"{1e3 * f['fsdp_block_overhead']:+6.2f} ms")
        extra = [f["fsdp_block_overhead"] for f in fsdp]
        rep.say(f"  median {1e3 * statistics.median(extra):+.2f} ms per block and "
                f"micro-batch ({len(extra)} points, from {1e3 * min(extra):+.2f} to "
                f"{1e3 * max(extra):+.2f} ms)")
    pressure_table(rep)
    h100_section(rep)
    rep.say("", rep.elapsed_line())
    if not args.no_write:
        rep.write(OUT)


def h100_section(rep):
    """The same sweep on one H100 SXM: recompute, kernels, utilisation beside the
    H200's, FSDP2's own work."""
    if not (H100 / "blocks.json").exists():
        return
    d = load("blocks.json", H100)
    env = d["environment"]
    rep.say("", f"== the same sweep on one {env['gpu_name']} (PyTorch {env['torch']}; "
            "calibration/results/h100/blocks, another machine, the same day)")
    errs = {}
    for r in recompute_rows(h100_sweeps()):
        errs.setdefault((r["sweep"], r["mode"]), []).append(
            (r["model"] - r["measured"]) / (r["step"] + r["measured"]))
    for (label, mode), v in errs.items():
        big = [x for x in v if abs(x) > 0.05]
        rep.say(f"recompute, {label} ({mode}): {len(v)} blocks, median error of the "
                f"checkpointed step {100 * statistics.median(v):+.1f} %, largest "
                f"{100 * max(map(abs, v)):.1f} % ({len(big)} beyond 5 %)")
    rep.say("recomputed products over the forward's, early stopping (kernel profile; "
            "measured " + ", ".join(f"{r['name']} mb {r['mb']} {r['measured']:.3f}"
                        for r in kernel_rows(d["kernels"]))
            + f"; library {kernel_rows(d['kernels'])[0]['model']:.3f})")
    idx = efficiency_table(rep, H100)
    h200 = _index(load("blocks.json")["blocks"])
    diff = [100 * (p["hfu"] - h200[k]["hfu"]) for k, p in idx.items()
            if k in h200 and p.get("hfu") and h200[k].get("hfu")]
    wide = [100 * (p["hfu"] - h200[k]["hfu"]) for k, p in idx.items()
            if k in h200 and k[0] >= 4096 and p.get("hfu") and h200[k].get("hfu")]
    rep.say(f"H100 minus H200 block HFU over the {len(diff)} points both measured: median "
            f"{statistics.median(diff):+.1f} points ({min(diff):+.1f} to {max(diff):+.1f}); "
            f"widths >= 4096: median {statistics.median(wide):+.1f} ({min(wide):+.1f} to "
            f"{max(wide):+.1f})")
    fsdp = [f for f in d.get("fsdp", []) if "error" not in f]
    if fsdp:
        rep.say("FSDP2's own work per block and micro-batch (one rank): " + ", ".join(
            f"{NAMES.get(f['hidden'], f['hidden'])} mb {f['micro_batch']} "
            f"{1e3 * f['fsdp_block_overhead']:+.2f} ms" for f in fsdp))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_blocks"))
