"""Measure one transformer block's training time on one GPU, across shapes and micro-batches.

The time of a block is what a single-GPU run sees directly and a cluster run cannot
separate from its communication: this script measures it as the difference of two
models that differ only in their number of blocks (``--layers``, default 2 and 4), so the
embeddings, the head, the loss and the optimizer drop out::

    PYTHONUNBUFFERED=1 python calibration/block_sweep.py --out blocks.json

For every shape of ``--shapes`` (default: the six MPT widths of LLM Foundry's benchmark
tables, GELU MLP of 4 x width, LayerNorm, no bias, sequence 2048), every micro-batch of
``--micro-batches`` and every checkpointing mode of ``--modes`` (``none``, ``full``;
``calibration/llm_memory.py``'s modes), a fresh model is built and trained for
``--warmup`` + ``--steps`` steps by ``llm_memory.run_mode`` (bf16 parameters, an fp32
master copy, flash attention through ``F.scaled_dot_product_attention``); the record keeps
the median forward and backward times of each layer count and their difference per block.
``--seq-sweep`` adds one width at several sequence lengths with the tokens of a step held
(the attention core's share grows with the sequence). ``--gemm`` times the block's plain
matrix products (``torch.mm`` in bf16, the forward shapes and their two backward
products) at every shape and micro-batch, so that the block's time can be split into
matrix products and the rest.

Each block time is reported with scalemodel's model FLOPs of a block
(``scalemodel.workloads.tensor_flops``: 2 FLOPs per weight element and token forward,
the attention core ``4 b s^2 d`` not halved for the causal mask, backward twice forward)
as a hardware FLOPs utilisation against the GPU's bf16 peak from ``gpus.json``; ``full``
counts its recompute (one more forward). The JSON at ``--out`` is rewritten (atomically)
after every measurement, so a run cut short keeps what it measured. Nothing is fitted
here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _llm_memory():
    spec = importlib.util.spec_from_file_location("llm_memory", HERE / "llm_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lm = _llm_memory()  # puts the repository on sys.path and imports attrs and scalemodel

import attrs  # noqa: E402

from scalemodel.workloads import TransformerConfig, tensor_flops  # noqa: E402

MPT_SHAPES = {
    # LLM Foundry's MPT configs (yamls/pretrain/mpt-*.yaml at 061f2c7): d_model, n_heads
    "mpt-1b": (2048, 16), "mpt-3b": (2560, 20), "mpt-7b": (4096, 32),
    "mpt-13b": (5120, 40), "mpt-30b": (7168, 64), "mpt-70b": (8192, 64),
}
"""Width and heads of the MPT models in LLM Foundry's benchmark tables."""

TINY_SHAPES = {"tiny": (64, 4)}
"""A width for CPU tests (``--shapes tiny``)."""


def block_config(shape, layers, *, seq, micro_batch, vocab=8192):
    """An MPT-style config (GELU MLP of 4 x width, LayerNorm, no bias) of ``layers``
    blocks at ``shape`` = (width, heads)."""
    hidden, heads = shape
    return TransformerConfig(layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden,
                             vocab=vocab, seq=seq, micro_batch=micro_batch,
                             gated_ffn=False, norm="layernorm", bias=False,
                             tied_embeddings=False, name=f"block-{hidden}x{layers}")


def block_flops(cfg):
    """Forward and backward model FLOPs of one block of ``cfg`` [FLOP]."""
    flops = tensor_flops(cfg)
    blocks = (flops.unit >= 0) & (flops.unit < cfg.layers)
    fwd = float(flops.forward_flops[blocks].sum()) / cfg.layers
    return fwd, 2.0 * fwd


def _median(rec, key):
    times = (rec.get("times_s") or {}).get(key)
    return None if times is None else times["median"]


def measure_block(shape, mode, *, seq, micro_batch, layers, args, device, peak):
    """One (shape, mode, micro-batch, seq) point: both layer counts' medians and the
    per-block difference [s], with the block's FLOPs and utilisation."""
    runs = {}
    for n in layers:
        cfg = block_config(shape, n, seq=seq, micro_batch=micro_batch, vocab=args.vocab)
        try:
            rec = lm.run_mode(cfg, mode, flash=True, precision="bf16", steps=args.steps,
                              warmup=args.warmup, device=device)
        except Exception as exc:  # out of memory: recorded, the sweep goes on
            import gc

            import torch
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            rec = {"oom": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        runs[n] = {"forward": _median(rec, "forward"), "backward": _median(rec, "backward"),
                   "optimizer": _median(rec, "optimizer"), "oom": rec.get("oom"),
                   "peak_fwd_bwd_allocated": rec.get("peak_fwd_bwd_allocated"),
                   "forward_all": (rec.get("times_s") or {}).get("forward"),
                   "backward_all": (rec.get("times_s") or {}).get("backward")}
    lo, hi = layers
    cfg = block_config(shape, 1, seq=seq, micro_batch=micro_batch, vocab=args.vocab)
    fwd_flops, bwd_flops = block_flops(cfg)
    point = {"hidden": shape[0], "heads": shape[1], "mode": mode, "seq": seq,
             "micro_batch": micro_batch, "tokens": seq * micro_batch,
             "layers": list(layers), "runs": {str(k): v for k, v in runs.items()},
             "block_forward_flops": fwd_flops, "block_backward_flops": bwd_flops}
    ok = all(runs[n]["forward"] is not None for n in layers)
    if ok:
        fwd = (runs[hi]["forward"] - runs[lo]["forward"]) / (hi - lo)
        bwd = (runs[hi]["backward"] - runs[lo]["backward"]) / (hi - lo)
        hardware = fwd_flops + bwd_flops + (fwd_flops if mode == "full" else 0.0)
        point.update(block_forward=fwd, block_backward=bwd, block_step=fwd + bwd,
                     hfu=(hardware / (fwd + bwd) / peak) if peak else None,
                     mfu=((fwd_flops + bwd_flops) / (fwd + bwd) / peak) if peak else None)
    return point


def _time_mm(a, b, reps):
    import torch

    cuda = a.is_cuda
    for _ in range(2):
        torch.mm(a, b)
    if cuda:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            torch.mm(a, b)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / reps
    import time
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b)
    return (time.perf_counter() - t0) / reps


def measure_gemms(shape, *, seq, micro_batch, device, reps, peak):
    """The block's weight matrix products at this shape (forward M x K by K x N, and the
    backward's two, each at the same FLOPs) in bf16 [s], summed over the block's four
    weights (QKV, attention output, MLP up and down)."""
    import torch

    hidden = shape[0]
    m = seq * micro_batch
    weights = {"qkv": (hidden, 3 * hidden), "out": (hidden, hidden),
               "up": (hidden, 4 * hidden), "down": (4 * hidden, hidden)}
    dt = torch.bfloat16
    total = {"forward": 0.0, "backward": 0.0}
    per = {}
    for name, (k, n) in weights.items():
        x = torch.randn(m, k, device=device, dtype=dt)
        w = torch.randn(k, n, device=device, dtype=dt)
        gy = torch.randn(m, n, device=device, dtype=dt)
        fwd = _time_mm(x, w, reps)                      # y = x W
        dx = _time_mm(gy, w.t(), reps)                  # dx = dy W^T
        dw = _time_mm(x.t(), gy, reps)                  # dW = x^T dy
        per[name] = {"forward": fwd, "grad_input": dx, "grad_weight": dw,
                     "flops": 2.0 * m * k * n}
        total["forward"] += fwd
        total["backward"] += dx + dw
        del x, w, gy
    flops = sum(v["flops"] for v in per.values())
    return {"hidden": hidden, "seq": seq, "micro_batch": micro_batch, "tokens": m,
            "products": per, "forward": total["forward"], "backward": total["backward"],
            "efficiency": (3 * flops / (total["forward"] + total["backward"]) / peak)
            if peak else None}


def _fwd_bwd(model, ids, targets, *, steps, warmup, cuda):
    """Median forward and backward times of ``model`` on one batch [s] (no optimizer
    step: the gradients accumulate, which costs the same as writing them)."""
    import time

    import torch
    import torch.nn.functional as F

    fwd, bwd = [], []
    for step in range(warmup + steps):
        if cuda:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(ids).flatten(0, 1).float(), targets)
        if cuda:
            ev[1].record()
        t1 = time.perf_counter()
        loss.backward()
        if cuda:
            ev[2].record()
            torch.cuda.synchronize()
            parts = [ev[0].elapsed_time(ev[1]) / 1e3, ev[1].elapsed_time(ev[2]) / 1e3]
        else:
            parts = [t1 - t0, time.perf_counter() - t1]
        if step >= warmup:
            fwd.append(parts[0])
            bwd.append(parts[1])
    return statistics.median(fwd), statistics.median(bwd)


KERNEL_CLASSES = (("flash", ("flash", "fmha", "attention")),
                  ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "wgmma", "matmul",
                              "addmm", "aten::mm", "aten::bmm", "cublas")))
"""Kernel-name substrings of each class (lower case, first match wins); every other
kernel is ``other`` (element-wise, normalisation, reductions, copies)."""


def kernel_class(name):
    """``flash``, ``matmul`` or ``other`` for a kernel (or, on the CPU, an op) name."""
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def _kernel_times(model, ids, targets, *, steps, cuda):
    """Per-step device time of every kernel of ``steps`` forward-backward passes under
    the PyTorch profiler [s] (on the CPU: the ops' self CPU time)."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            loss = F.cross_entropy(model(ids).flatten(0, 1).float(), targets)
            loss.backward()
        if cuda:
            torch.cuda.synchronize()
    times = {}
    for ev in prof.key_averages():
        if cuda:
            t = getattr(ev, "self_device_time_total", None)
            if t is None:
                t = getattr(ev, "self_cuda_time_total", 0.0)
        else:
            t = ev.self_cpu_time_total
        if t:
            times[ev.key] = times.get(ev.key, 0.0) + t * 1e-6 / steps
    return times


def measure_kernels(shape, mode, *, seq, micro_batch, layers, args, device):
    """One block's device time by kernel and by class (the difference of the two layer
    counts' profiles) [s], after ``--warmup`` unprofiled steps."""
    import gc

    import torch

    cuda = device.startswith("cuda")
    prof = {}
    for n in layers:
        cfg = block_config(shape, n, seq=seq, micro_batch=micro_batch, vocab=args.vocab)
        model = lm.build_model(cfg, flash=True, device=device, dtype=torch.bfloat16)
        lm.apply_checkpointing(model, mode, True)
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, cfg.vocab, (micro_batch, seq), generator=gen).to(device)
        targets = torch.randint(0, cfg.vocab, (micro_batch * seq,), generator=gen).to(device)
        _fwd_bwd(model, ids, targets, steps=1, warmup=args.warmup, cuda=cuda)
        prof[n] = _kernel_times(model, ids, targets, steps=args.steps, cuda=cuda)
        del model, ids, targets
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    lo, hi = layers
    names = set(prof[lo]) | set(prof[hi])
    per = {k: (prof[hi].get(k, 0.0) - prof[lo].get(k, 0.0)) / (hi - lo) for k in names}
    classes = {}
    for k, t in per.items():
        classes[kernel_class(k)] = classes.get(kernel_class(k), 0.0) + t
    top = dict(sorted(per.items(), key=lambda kv: -abs(kv[1]))[:40])
    return {"hidden": shape[0], "heads": shape[1], "mode": mode, "seq": seq,
            "micro_batch": micro_batch, "block_by_class": classes,
            "block_total": sum(per.values()), "block_top_kernels": top,
            "kernels_per_layer_count": {str(n): len(prof[n]) for n in layers}}


def _process_group(device):
    """A one-rank process group (NCCL on a GPU, Gloo on the CPU), made once."""
    import os

    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # a free port: a fixed one (29541) failed
            import socket  # with EADDRINUSE when another run held it
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo",
                                rank=0, world_size=1)


def measure_fsdp(shape, mode, *, seq, micro_batch, layers, args, device):
    """FSDP2's own work per block: the same models trained plain and with
    ``fully_shard`` on every block and the root, on a one-rank group (its all-gather and
    reduce-scatter are copies), forward and backward per block of each [s]."""
    import gc

    import torch
    from torch.distributed.fsdp import fully_shard

    _process_group(device)
    cuda = device.startswith("cuda")
    times = {}
    for wrapped in (False, True):
        for n in layers:
            cfg = block_config(shape, n, seq=seq, micro_batch=micro_batch, vocab=args.vocab)
            model = lm.build_model(cfg, flash=True, device=device, dtype=torch.bfloat16)
            lm.apply_checkpointing(model, mode, True)
            if wrapped:
                for block in model.layers:
                    fully_shard(block)
                fully_shard(model)
            gen = torch.Generator().manual_seed(1)
            ids = torch.randint(0, cfg.vocab, (micro_batch, seq), generator=gen).to(device)
            targets = torch.randint(0, cfg.vocab, (micro_batch * seq,),
                                    generator=gen).to(device)
            times[(wrapped, n)] = _fwd_bwd(model, ids, targets, steps=args.steps,
                                           warmup=args.warmup, cuda=cuda)
            del model, ids, targets
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    lo, hi = layers
    per = {}
    for wrapped, key in ((False, "plain"), (True, "fsdp")):
        f = (times[(wrapped, hi)][0] - times[(wrapped, lo)][0]) / (hi - lo)
        b = (times[(wrapped, hi)][1] - times[(wrapped, lo)][1]) / (hi - lo)
        per[key] = {"block_forward": f, "block_backward": b,
                    "runs": {str(n): list(times[(wrapped, n)]) for n in layers}}
    return {"hidden": shape[0], "heads": shape[1], "mode": mode, "seq": seq,
            "micro_batch": micro_batch, "tokens": seq * micro_batch, **per,
            "fsdp_block_overhead": (per["fsdp"]["block_forward"]
                                    + per["fsdp"]["block_backward"]
                                    - per["plain"]["block_forward"]
                                    - per["plain"]["block_backward"])}


def _pressure_step(model, opt, ids, targets, cuda):
    """One training step (forward, backward, optimizer) [s]."""
    import time

    import torch
    import torch.nn.functional as F

    if cuda:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ev[0].record()
    t0 = time.perf_counter()
    F.cross_entropy(model(ids).flatten(0, 1).float(), targets).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if cuda:
        ev[1].record()
        torch.cuda.synchronize()
        return ev[0].elapsed_time(ev[1]) / 1e3
    return time.perf_counter() - t0


def _pressure_level(model, opt, ids, targets, cap, args, cuda):
    """Median step and the allocator's retries per step with the caching allocator
    capped at ``cap`` bytes (None: no cap); an out-of-memory error is recorded."""
    import torch

    rec = {"cap_bytes": cap}
    if cuda:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(1.0 if cap is None else
                                                   min(1.0, cap / total))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    try:
        for _ in range(args.warmup):
            _pressure_step(model, opt, ids, targets, cuda)
        times = [_pressure_step(model, opt, ids, targets, cuda) for _ in range(args.steps)]
    except torch.cuda.OutOfMemoryError as exc:
        opt.zero_grad(set_to_none=True)
        rec["oom"] = str(exc).splitlines()[0][:200]
        return rec
    rec["step"] = statistics.median(times)
    if cuda:
        stats = torch.cuda.memory_stats()
        rec["alloc_retries_per_step"] = (stats.get("num_alloc_retries", 0) - before) \
            / (args.warmup + args.steps)
        rec["max_allocated"] = torch.cuda.max_memory_allocated()
        rec["max_reserved"] = torch.cuda.max_memory_reserved()
    return rec


def measure_pressure(shape, *, seq, micro_batch, layers, headrooms, wrapped, args, device):
    """Memory pressure: one model of ``layers`` blocks (FSDP2 on every block and the root
    on a one-rank group when ``wrapped``), bf16 AdamW, trained first without a cap and then
    with PyTorch's caching allocator capped at each of ``headrooms`` times the uncapped
    run's allocated peak (``torch.cuda.set_per_process_memory_fraction``): the step time
    and the allocator's retries (cache flushes) per step at each cap."""
    import gc

    import torch

    cuda = device.startswith("cuda")
    cfg = block_config(shape, layers, seq=seq, micro_batch=micro_batch, vocab=args.vocab)
    model = lm.build_model(cfg, flash=True, device=device, dtype=torch.bfloat16)
    if wrapped:
        from torch.distributed.fsdp import fully_shard
        _process_group(device)
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab, (micro_batch, seq), generator=gen).to(device)
    targets = torch.randint(0, cfg.vocab, (micro_batch * seq,), generator=gen).to(device)
    free = _pressure_level(model, opt, ids, targets, None, args, cuda)
    levels = []
    peak = free.get("max_allocated")
    for h in headrooms:
        if peak is None:  # the CPU: no allocator to cap
            break
        levels.append(dict(headroom=h, **_pressure_level(model, opt, ids, targets,
                                                         h * peak, args, cuda)))
    if cuda:
        torch.cuda.set_per_process_memory_fraction(1.0)
    del model, opt, ids, targets
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return {"hidden": shape[0], "heads": shape[1], "seq": seq, "micro_batch": micro_batch,
            "layers": layers, "fsdp": wrapped, "uncapped": free, "capped": levels}


def _pressure_plan(args):
    """``--pressure`` read and checked before anything runs: (name, shape, micro-batch,
    layers, headrooms), or None."""
    if not args.pressure:
        return None
    try:
        shape_text, mb, layers, heads = args.pressure.split(":")
        name, shape = _shape(shape_text)
        mb, layers = int(mb), int(layers)
        headrooms = [float(h) for h in heads.split(",") if h.strip()]
    except ValueError:
        raise lm.UsageError(f"--pressure: {args.pressure!r} is not SHAPE:MICRO_BATCH:LAYERS:"
                         "HEADROOM1,HEADROOM2,...") from None
    if mb < 1 or layers < 1 or not headrooms or min(headrooms) < 1.0:
        raise lm.UsageError(f"--pressure: {args.pressure!r}: the micro-batch and layers must "
                         "be >= 1 and every headroom >= 1 (a cap at that many times the "
                         "uncapped run's allocated peak)")
    return name, shape, mb, layers, headrooms


def _pressure_sweep(plan, args, device, out):
    """``--pressure``'s points, appended to ``out["pressure"]``; a failure is recorded."""
    name, shape, mb, layers, headrooms = plan
    out["pressure"] = []
    try:
        _pressure_points(shape, name, mb, layers, headrooms, args, device, out)
    finally:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


def _pressure_points(shape, name, mb, layers, headrooms, args, device, out):
    for wrapped in (True, False):
        try:
            point = measure_pressure(shape, seq=args.seq, micro_batch=mb, layers=layers,
                                     headrooms=headrooms, wrapped=wrapped, args=args,
                                     device=device)
        except Exception as exc:  # recorded; the other results stay
            point = {"fsdp": wrapped, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        point["shape"] = name
        out["pressure"].append(point)
        lm._write_atomic(args.out, out)
        if "error" in point:
            print(f"  pressure fsdp={wrapped}: failed ({point['error'][:160]})", flush=True)
            continue
        free = point["uncapped"]
        print(f"  {name:8s} pressure fsdp={wrapped}: uncapped step "
              f"{free['step'] * 1e3:.1f} ms, retries/step "
              f"{free.get('alloc_retries_per_step')}", flush=True)
        for lv in point["capped"]:
            what = (f"OOM" if lv.get("oom") else
                    f"step {lv['step'] * 1e3:.1f} ms ({lv['step'] / free['step'] - 1:+.1%}), "
                    f"retries/step {lv['alloc_retries_per_step']:.1f}")
            print(f"    cap {lv['headroom']:.2f} x allocated peak: {what}", flush=True)


def _parser():
    p = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    p.add_argument("--out", required=True, help="the JSON to write (rewritten whole after "
                   "each point)")
    p.add_argument("--shapes", default=",".join(MPT_SHAPES),
                   help="comma-separated names of MPT_SHAPES (or 'tiny'), or WIDTHxHEADS")
    p.add_argument("--micro-batches", default="1,2,4,8",
                   help="sequences per step, comma-separated (default: %(default)s)")
    p.add_argument("--modes", default="none,full",
                   help="activation checkpointing modes: none, selective, full "
                        "(default: %(default)s)")
    p.add_argument("--seq", type=lm.positive_int, default=2048, help="tokens per sequence")
    p.add_argument("--layers", default="2,4", help="the two layer counts, e.g. 2,4")
    p.add_argument("--vocab", type=lm.positive_int, default=8192, help="vocabulary size")
    p.add_argument("--seq-sweep", default="",
                   help="WIDTHxHEADS:TOKENS:SEQ1,SEQ2,... (mode none), e.g. "
                        "4096x32:16384:512,1024,4096,8192,16384")
    p.add_argument("--gemm", action="store_true", help="also time the plain matmuls")
    p.add_argument("--kernels", default="",
                   help="SHAPES:MICRO_BATCHES, e.g. mpt-13b,mpt-70b:2,8: each block's "
                        "device time by kernel under the profiler, modes of --modes")
    p.add_argument("--pressure", default="",
                   help="SHAPE:MICRO_BATCH:LAYERS:HEADROOMS, e.g. mpt-13b:4:8:1.3,1.1,1.02: "
                        "a model trained with FSDP2 (one rank) and plain, the caching "
                        "allocator capped at each headroom x the uncapped allocated peak")
    p.add_argument("--fsdp", default="",
                   help="SHAPES:MICRO_BATCHES, e.g. mpt-7b,mpt-13b:1,2,4 (mode none): each "
                        "block plain and with FSDP2 fully_shard on a one-rank group")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default: "
                   "%(default)s)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: "
                   "%(default)s)")
    p.add_argument("--device", default=None, help="a torch device (default: cuda if "
                   "present, else cpu)")
    p.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-early-stop: full checkpointing replays the whole block "
                        "(torch.utils.checkpoint.set_checkpoint_early_stop(False))")
    return p


def _shape(text):
    table = {**MPT_SHAPES, **TINY_SHAPES}
    if text in table:
        return text, table[text]
    try:
        hidden, heads = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise lm.UsageError(f"--shapes: {text!r} is neither one of {', '.join(table)} nor "
                         "WIDTHxHEADS") from None
    return text, (hidden, heads)


def _ints(text, what):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise lm.UsageError(f"{what}: {text!r} is not a comma-separated list of integers") \
            from None
    if not values or min(values) < 1:
        raise lm.UsageError(f"{what}: {text!r} must list integers >= 1")
    return values


def _plan(args):
    """The sweep's points: (name, shape, mode, seq, micro-batch)."""
    shapes = [_shape(s.strip()) for s in args.shapes.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in lm.MODES:
            raise lm.UsageError(f"--modes: {m!r} is not one of {', '.join(lm.MODES)}")
    points = [(name, shape, mode, args.seq, mb) for name, shape in shapes
              for mb in _ints(args.micro_batches, "--micro-batches") for mode in modes]
    if args.seq_sweep:
        try:
            shape_text, tokens, seqs = args.seq_sweep.split(":")
            tokens = int(tokens)
        except ValueError:
            raise lm.UsageError(f"--seq-sweep: {args.seq_sweep!r} is not "
                             "WIDTHxHEADS:TOKENS:SEQ1,SEQ2,...") from None
        name, shape = _shape(shape_text)
        for seq in _ints(seqs, "--seq-sweep"):
            if tokens % seq:
                raise lm.UsageError(f"--seq-sweep: sequence {seq} does not divide {tokens} "
                                 "tokens")
            points.append((name, shape, "none", seq, tokens // seq))
    return shapes, points


def _line(name, point):
    if point.get("block_step") is None:
        why = "; ".join(str(r["oom"]) for r in point["runs"].values() if r["oom"])
        return f"  {name:8s} {point['mode']:5s} seq {point['seq']:6d} mb {point['micro_batch']:3d}: failed ({why[:160]})"
    if not point["block_step"] > 0:  # a difference of two runs, lost in their noise
        return (f"  {name:8s} {point['mode']:5s} seq {point['seq']:6d} mb "
                f"{point['micro_batch']:3d}: not resolved (the larger model ran "
                f"{-point['block_step'] * 1e3:.3f} ms a block faster: noise; raise --steps)")
    hfu = f"{point['hfu']:.1%}" if point.get("hfu") else "n/a"
    return (f"  {name:8s} {point['mode']:5s} seq {point['seq']:6d} mb "
            f"{point['micro_batch']:3d}: block fwd {point['block_forward'] * 1e3:8.3f} ms "
            f"bwd {point['block_backward'] * 1e3:8.3f} ms  HFU {hfu}")


def _shape_batches(text, option):
    """``SHAPES:MICRO_BATCHES`` of ``--kernels`` or ``--fsdp``, checked (before the sweep
    runs: a typo found after it would cost the GPU time spent)."""
    try:
        shape_text, mbs = text.split(":")
    except ValueError:
        raise lm.UsageError(f"{option}: {text!r} is not SHAPES:MICRO_BATCHES") from None
    for t in shape_text.split(","):
        _shape(t.strip())
    _ints(mbs, option)
    return shape_text, mbs


def _kernel_sweep(args, layers, device, out):
    """``--kernels``' points, appended to ``out["kernels"]``."""
    shape_text, mbs = _shape_batches(args.kernels, "--kernels")
    out["kernels"] = []
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for text in shape_text.split(","):
        name, shape = _shape(text.strip())
        for mb in _ints(mbs, "--kernels"):
            for mode in modes:
                try:
                    point = measure_kernels(shape, mode, seq=args.seq, micro_batch=mb,
                                            layers=layers, args=args, device=device)
                except Exception as exc:  # recorded; the other results stay
                    point = {"hidden": shape[0], "micro_batch": mb, "mode": mode,
                             "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                point["shape"] = name
                out["kernels"].append(point)
                lm._write_atomic(args.out, out)
                if "error" in point:
                    print(f"  {name:8s} kernels {mode} mb {mb}: failed "
                          f"({point['error'][:160]})", flush=True)
                    continue
                parts = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in
                                  sorted(point["block_by_class"].items()))
                print(f"  {name:8s} kernels {mode:5s} mb {mb:3d}: block "
                      f"{point['block_total'] * 1e3:8.3f} ms ({parts} ms)", flush=True)


def _fsdp_sweep(args, layers, device, out):
    """``--fsdp``'s points, appended to ``out["fsdp"]``; a failure is recorded, not
    raised (the block sweep before it is kept)."""
    shape_text, mbs = _shape_batches(args.fsdp, "--fsdp")
    out["fsdp"] = []
    try:
        _fsdp_points(shape_text, mbs, args, layers, device, out)
    finally:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


def _fsdp_points(shape_text, mbs, args, layers, device, out):
    for text in shape_text.split(","):
        name, shape = _shape(text.strip())
        for mb in _ints(mbs, "--fsdp"):
            try:
                point = measure_fsdp(shape, "none", seq=args.seq, micro_batch=mb,
                                     layers=layers, args=args, device=device)
            except Exception as exc:  # recorded; the sweep's other results stay
                point = {"hidden": shape[0], "micro_batch": mb,
                         "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            point["shape"] = name
            out["fsdp"].append(point)
            lm._write_atomic(args.out, out)
            if "error" in point:
                print(f"  {name:8s} fsdp mb {mb:3d}: failed ({point['error'][:160]})",
                      flush=True)
            else:
                print(f"  {name:8s} fsdp mb {mb:3d}: plain block "
                      f"{(point['plain']['block_forward'] + point['plain']['block_backward']) * 1e3:8.3f} ms, "
                      f"FSDP2 adds {point['fsdp_block_overhead'] * 1e3:+8.3f} ms per block",
                      flush=True)


def main(argv=None):
    """Run the sweep; returns the JSON-ready record (also written to ``--out``)."""
    args = _parser().parse_args(argv)
    layers = _ints(args.layers, "--layers")
    if len(layers) != 2 or layers[0] >= layers[1]:
        raise lm.UsageError(f"--layers: {args.layers!r} must be two increasing counts, e.g. 2,4")
    if args.steps < 1 or args.warmup < 1:
        raise lm.UsageError("--steps and --warmup must be >= 1")
    try:
        import torch
    except ImportError:
        raise SystemExit("block_sweep needs PyTorch: pip install -e '.[calibrate]' (the "
                         "README's calibration extra), or run it where torch is") from None

    lm.check_out(args.out)
    device = lm.check_device(args.device)
    shapes, points = _plan(args)
    _pressure_plan(args)  # its errors before anything runs
    for option, text in (("--kernels", args.kernels), ("--fsdp", args.fsdp)):
        if text:
            _shape_batches(text, option)
    env = lm.environment(device)
    peak = env["bf16_peak_flops"]
    out = {"environment": env, "argv": sys.argv[1:] if argv is None else list(argv),
           "steps": args.steps, "warmup": args.warmup, "layers": layers,
           "checkpoint_early_stop": args.early_stop,
           "flops_note": "scalemodel.workloads.tensor_flops per block; hfu counts full "
                         "checkpointing's recompute as one more forward",
           "blocks": [], "gemms": []}
    print(f"block_sweep: {len(points)} points on {device} {env['gpu_name'] or ''}",
          flush=True)
    from torch.utils.checkpoint import set_checkpoint_early_stop
    with set_checkpoint_early_stop(args.early_stop):
        _sweep(args, shapes, points, layers, device, peak, out)
    return out


def _sweep(args, shapes, points, layers, device, peak, out):
    """Every part of the sweep that ``args`` asks for, appended to ``out``."""
    for name, shape, mode, seq, mb in points:
        point = measure_block(shape, mode, seq=seq, micro_batch=mb, layers=layers,
                              args=args, device=device, peak=peak)
        point["shape"] = name
        out["blocks"].append(point)
        lm._write_atomic(args.out, out)
        print(_line(name, point), flush=True)
    if args.gemm:
        for name, shape in shapes:
            for mb in _ints(args.micro_batches, "--micro-batches"):
                g = measure_gemms(shape, seq=args.seq, micro_batch=mb, device=device,
                                  reps=10, peak=peak)
                g["shape"] = name
                out["gemms"].append(g)
                lm._write_atomic(args.out, out)
                eff = f"{g['efficiency']:.1%}" if g["efficiency"] else "n/a"
                print(f"  {name:8s} gemm mb {mb:3d}: fwd {g['forward'] * 1e3:8.3f} ms bwd "
                      f"{g['backward'] * 1e3:8.3f} ms ({eff} of peak)", flush=True)
    if args.kernels:
        _kernel_sweep(args, layers, device, out)
    if args.fsdp:
        _fsdp_sweep(args, layers, device, out)
    if args.pressure:
        _pressure_sweep(_pressure_plan(args), args, device, out)
    steps = [p["block_step"] for p in out["blocks"] if (p.get("block_step") or 0) > 0]
    print(f"block_sweep: {len(steps)} of {len(points)} points measured "
          f"(median block step {statistics.median(steps) * 1e3:.2f} ms)" if steps else
          "block_sweep: nothing measured", flush=True)
    if points and all(p.get("block_step") is None for p in out["blocks"]):
        raise SystemExit(1)  # every point failed (out of memory, an error): no success


if __name__ == "__main__":  # what was measured is in --out already (written whole)
    lm.run_cli(main, "block_sweep", "the points measured so far are in --out")
