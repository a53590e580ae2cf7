"""Measure a Llama-style decoder's peak memory and step time under activation checkpointing.

For each mode of ``--modes`` (``none``, ``selective``, ``full``) a fresh model and
optimizer are built in plain PyTorch from a scalemodel
:class:`~scalemodel.workloads.TransformerConfig` (its parameter count is asserted equal to
``TransformerConfig.parameter_count``), trained for ``--warmup`` + ``--steps`` steps on
synthetic token ids, and the JSON written to ``--out`` records, beside the measured peaks
and times, what ``scalemodel.memory(...)`` answers for the same settings (the keyword
arguments are in the JSON, ``memory_kwargs``), so the two can be compared::

    PYTHONUNBUFFERED=1 python calibration/llm_memory.py --out h100_llm_memory.json
    python calibration/llm_memory.py --out noflash.json --no-flash --micro-batch 2

The settings, chosen so that ``memory()``'s default accounting (``accounting="zero"``,
ZeRO's table with every term at its largest at once) describes them:

* **precision** ``--precision bf16`` (the default): bf16 working parameters and bf16
  gradients, an fp32 master copy plus AdamW's two fp32 states in the optimizer (16 bytes
  per parameter, ``memory()``'s default for a 16-bit compute dtype: ``param_dtype=None``).
  The gradients are kept allocated between steps (``zero_grad(set_to_none=False)``), as
  ZeRO's accounting counts them at the peak. The optimizer step converts the gradients to
  fp32 (``4Ψ`` bytes transient, at the optimizer step, not at the forward/backward peak:
  not in ``memory()``). ``--precision autocast``: fp32 parameters and gradients under
  ``torch.autocast(bfloat16)``, fused AdamW (``param_dtype="fp32"``); autocast's bf16
  weight copies (``2Ψ``, cached for the forward and saved for backward) and the fp32
  residual stream are not in ``memory()``'s 16-bit activation count.
* **loss** ``memory(loss="unfused")``: the model returns 16-bit logits, the loss is
  ``F.cross_entropy(logits.float(), targets)`` over every token and the logits are
  deleted before ``loss.backward()`` (torchtitan from 9dec370, 2024-12).
* **attention**: ``F.scaled_dot_product_attention(is_causal=True)`` (``--flash``,
  ``flash_attention=True``) or an explicit causal ``softmax(QK^T/sqrt(d)) V`` in the
  compute dtype (``--no-flash``); no dropout anywhere (Korthikanti et al. count dropout
  masks and outputs: ``5as^2b`` per layer has ``3as^2b`` of dropout; here ``2as^2b``).
* **checkpointing** per transformer block (embeddings, final norm, head and loss are
  never checkpointed): ``full`` is ``torch.utils.checkpoint.checkpoint(block, x,
  use_reentrant=False)``; ``selective`` with flash attention is torchtitan's op-level
  policy (``_apply_op_sac``): the outputs of ``aten.mm`` and of the SDPA kernels are
  saved, except every second ``mm`` of the block, everything else recomputed
  (``create_selective_checkpoint_contexts``); without flash attention it is Korthikanti's
  selective recompute: the attention core ``softmax(QK^T)V`` alone is checkpointed.
  ``--modes`` runs each mode on a fresh model.
* **memory**: ``torch.cuda.max_memory_allocated`` (``measure="allocated"``) and
  ``max_memory_reserved`` (``measure="reserved"``); no data-parallel bucket
  (``bucket_bytes=0``), one GPU (``n=1``, ``sharding="none"``).

What is recorded per mode: the model-state bytes (allocated before the second step's
forward: parameters, gradients, optimizer state), the peaks of the first step (which
allocates the optimizer state), of the forward+backward and of the optimizer step of the
later steps, the torch peaks; median / min / max of the step, forward, backward and
optimizer times (CUDA events), tokens/s and the model FLOPs utilization with
scalemodel's model FLOPs (``scalemodel.workloads.tensor_flops``: forward + backward, no
recompute) against the GPU's bf16 peak from ``gpus.json``; the per-step losses. An
out-of-memory error is recorded for its mode instead of ending the run. On the CPU the
memory and MFU fields are null.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: scalemodel importable
    sys.path.insert(0, str(ROOT))

try:
    import attrs  # noqa: E402
except ImportError:  # a GPU machine's Python without attrs: the repository venv's copy
    # (pure Python; appended, so the machine's own torch and numpy stay first)
    sys.path.extend(str(d) for d in sorted(ROOT.glob(".venv/lib/python*/site-packages")))
    import attrs  # noqa: E402

import scalemodel  # noqa: E402
from scalemodel.checkpointing import activation_bytes, recompute_fraction  # noqa: E402
from scalemodel.hardware import get_gpu, gpu_of_device  # noqa: E402
from scalemodel.workloads import TransformerConfig, tensor_flops  # noqa: E402

GIB = 2 ** 30
MODES = ("none", "selective", "full")

DEFAULT_CONFIG = dict(layers=24, hidden=2048, heads=16, ffn=5504, vocab=32000,
                      seq=2048, micro_batch=8, name="llama-1.3b")
"""A Llama-style 1.35 B decoder (RMSNorm, SwiGLU, rotary positions, untied head); with
bf16 parameters, fp32 master and AdamW at seq 2048 x micro-batch 8 ``memory()`` answers
about 51 GiB allocated without checkpointing (fits an H100 80GB)."""

SMALL_CONFIG = dict(layers=2, hidden=64, heads=4, ffn=176, vocab=256, seq=32,
                    micro_batch=2, name="tiny")
"""A tiny config for CPU tests (``--config tiny``)."""

NAMED_CONFIGS = {"llama-1.3b": DEFAULT_CONFIG, "tiny": SMALL_CONFIG}


# --------------------------------------------------------------------------- config


def _config_of(spec):
    """The :class:`TransformerConfig` of ``spec`` as :func:`load_config` reads it."""
    if spec in NAMED_CONFIGS:
        return TransformerConfig(**NAMED_CONFIGS[spec])
    if spec.lstrip().startswith("{") or Path(spec).is_file():
        text = spec if spec.lstrip().startswith("{") else Path(spec).read_text()
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise TypeError(f"a config is a JSON object, not {type(fields).__name__}")
        names = {f.name for f in attrs.fields(TransformerConfig)}
        if set(fields) <= names:
            return TransformerConfig(**fields)
        return TransformerConfig.from_hf_config(fields)
    return scalemodel.llm_config(spec)

def load_config(spec=None, seq=None, micro_batch=None) -> TransformerConfig:
    """The :class:`TransformerConfig` named by ``spec``: a name of :data:`NAMED_CONFIGS`,
    a scalemodel built-in LLM (``scalemodel.llm_config``), a JSON string or a JSON file of
    ``TransformerConfig`` fields or of a Hugging Face ``config.json``; ``seq`` and
    ``micro_batch`` override the config's."""
    spec = spec or "llama-1.3b"
    try:
        cfg = _config_of(spec)
    except (ValueError, TypeError, OSError) as exc:  # scalemodel's errors are ValueErrors
        raise UsageError(  # or TypeErrors; a JSON or file error names the text or file
            f"--config {spec!r}: {str(exc).splitlines()[0][:300]} (give a name: "
            f"{', '.join(sorted(NAMED_CONFIGS))} or a built-in LLM of `scalemodel "
            "profiles`, a JSON object of TransformerConfig fields, or a Hugging Face "
            "config.json)") from None
    changes = {}
    if seq is not None:
        changes["seq"] = int(seq)
    if micro_batch is not None:
        changes["micro_batch"] = int(micro_batch)
    return attrs.evolve(cfg, **changes) if changes else cfg


def _check_buildable(cfg):
    bad = [name for name, value in (("prenorm", not cfg.prenorm),
                                    ("token_types", cfg.token_types),
                                    ("embedding_norm", cfg.embedding_norm),
                                    ("head_transform", cfg.head_transform),
                                    ("head_bias", cfg.head_bias)) if value]
    if bad:
        raise ValueError(f"config {cfg.name or cfg}: {', '.join(bad)} not built by this "
                         "script (decoder-only, pre-norm models only)")


# --------------------------------------------------------------------------- model

def _norm_factory(cfg):
    """A callable building the config's normalization layer (RMSNorm or LayerNorm)."""
    from torch import nn

    def norm():
        if cfg.norm == "rmsnorm":
            return nn.RMSNorm(cfg.hidden, eps=1e-5)
        return nn.LayerNorm(cfg.hidden, eps=1e-5)
    return norm


def _attention_class(cfg, flash):
    """The attention module of ``cfg``: q, k, v, o projections, rotary embeddings and the
    core by SDPA (``flash``) or written out (a causal softmax), optionally checkpointed."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    h, heads, kvh, hd = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
    masks = {}

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(h, heads * hd, bias=cfg.bias)
            self.k = nn.Linear(h, kvh * hd, bias=cfg.bias)
            self.v = nn.Linear(h, kvh * hd, bias=cfg.bias)
            self.o = nn.Linear(heads * hd, h, bias=cfg.bias)
            self.core_checkpoint = False  # Korthikanti's selective recompute (no flash)

        def core(self, q, k, v):
            if flash:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                      enable_gqa=kvh != heads)
            if kvh != heads:
                k = k.repeat_interleave(heads // kvh, dim=1)
                v = v.repeat_interleave(heads // kvh, dim=1)
            s = q.shape[-2]
            scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            key = (s, str(q.device))
            if key not in masks:  # one causal mask shared by every layer
                masks[key] = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
            mask = masks[key]
            probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
            return torch.matmul(probs, v)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q = self.q(x).view(b, s, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, s, kvh, hd).transpose(1, 2)
            v = self.v(x).view(b, s, kvh, hd).transpose(1, 2)
            if cos is not None:  # rotary embeddings (HF style: only cos/sin are saved)
                cos, sin = cos.to(q.dtype), sin.to(q.dtype)
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            if self.core_checkpoint:
                from torch.utils.checkpoint import checkpoint
                out = checkpoint(self.core, q, k, v, use_reentrant=False)
            else:
                out = self.core(q, k, v)
            return self.o(out.transpose(1, 2).reshape(b, s, heads * hd))

    return Attention


def _block_class(cfg, flash):
    """A pre-norm transformer block of ``cfg``: attention and a (gated) MLP."""
    import torch.nn.functional as F
    from torch import nn

    h, norm, Attention = cfg.hidden, _norm_factory(cfg), _attention_class(cfg, flash)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            if cfg.gated_ffn:
                self.gate = nn.Linear(h, cfg.ffn, bias=cfg.bias)
            self.up = nn.Linear(h, cfg.ffn, bias=cfg.bias)
            self.down = nn.Linear(cfg.ffn, h, bias=cfg.bias)

        def forward(self, x):  # execution order of the mm: gate, up, down (torchtitan)
            if cfg.gated_ffn:
                return self.down(F.silu(self.gate(x)) * self.up(x))
            return self.down(F.gelu(self.up(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.attn = norm(), Attention()
            self.mlp_norm, self.mlp = norm(), MLP()

        def forward(self, x, cos, sin):
            x = x + self.attn(self.attn_norm(x), cos, sin)
            return x + self.mlp(self.mlp_norm(x))

    return Block


def _decoder_class(cfg, flash):
    """The decoder of ``cfg``: embeddings, its blocks, final norm and (tied) head."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    h, hd, norm = cfg.hidden, cfg.head_dim, _norm_factory(cfg)
    Block = _block_class(cfg, flash)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, h)
            self.pos = nn.Embedding(cfg.learned_positions, h) if cfg.learned_positions \
                else None
            self.layers = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.final_norm = norm() if cfg.final_norm else None
            self.lm_head = None if cfg.tied_embeddings else nn.Linear(h, cfg.vocab,
                                                                      bias=False)
            self.wrap = None  # set by apply_checkpointing: callable(block, x, cos, sin)
            if self.pos is None:
                inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
                ang = torch.outer(torch.arange(cfg.seq).float(), inv)
                ang = torch.cat((ang, ang), dim=-1)
                self.register_buffer("cos", ang.cos(), persistent=False)
                self.register_buffer("sin", ang.sin(), persistent=False)
            else:
                self.cos = self.sin = None

        def forward(self, ids):
            s = ids.shape[1]
            x = self.embed(ids)
            if self.pos is not None:
                x = x + self.pos(torch.arange(s, device=ids.device))
            cos = None if self.cos is None else self.cos[:s].to(x.dtype)
            sin = None if self.sin is None else self.sin[:s].to(x.dtype)
            for block in self.layers:
                x = block(x, cos, sin) if self.wrap is None else self.wrap(block, x, cos, sin)
            if self.final_norm is not None:
                x = self.final_norm(x)
            weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
            return F.linear(x, weight)

    return Decoder


def build_model(cfg, flash=True, device="cpu", dtype=None, seed=0):
    """A decoder in plain PyTorch with exactly ``cfg.parameter_count`` parameters."""
    import torch

    _check_buildable(cfg)
    Decoder = _decoder_class(cfg, flash)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    with torch.device(device):
        model = Decoder()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.02)
    torch.random.set_rng_state(gen_state)
    if dtype is not None:
        model = model.to(dtype)
    n = sum(p.numel() for p in model.parameters())
    if n != cfg.parameter_count:
        raise AssertionError(f"built {n:,} parameters, scalemodel counts "
                             f"{cfg.parameter_count:,}")
    return model


# --------------------------------------------------------------------------- checkpointing

SAC_SAVED_OPS = ("aten.mm.default", "aten._scaled_dot_product_flash_attention.default",
                 "aten._scaled_dot_product_efficient_attention.default",
                 "aten._scaled_dot_product_cudnn_attention.default",
                 "aten._scaled_dot_product_flash_attention_for_cpu.default")
"""The ops whose outputs torchtitan's op-level policy saves (its ``_save_list``; the
cuDNN and CPU SDPA kernels added, the kernels PyTorch picks on an H100 and the CPU)."""


def _sac_context_factory(trace):
    """torchtitan's ``_get_custom_policy``: save the outputs of the ops in
    :data:`SAC_SAVED_OPS` except every second ``mm``, recompute the rest; the counter
    restarts for every block. ``trace`` collects ``(op, decision)`` of the first block's
    first forward."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = set()
    for name in SAC_SAVED_OPS:
        ns, op, overload = name.split(".")
        packet = getattr(getattr(torch.ops, ns), op, None)
        if packet is not None:
            saved.add(getattr(packet, overload))
    mm = torch.ops.aten.mm.default

    def context_fn():
        meta = {"forward": 0, "recompute": 0}
        record = not trace.get("done")

        def policy(ctx, func, *args, **kwargs):
            key = "recompute" if ctx.is_recompute else "forward"
            if func == mm:
                meta[key] += 1
            save = func in saved and not (func == mm and meta[key] % 2 == 0)
            if record and key == "forward":
                trace.setdefault("ops", []).append(
                    [str(func), "save" if save else "recompute"])
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

        if record:
            trace["done"] = True
        return create_selective_checkpoint_contexts(policy)

    return context_fn


def apply_checkpointing(model, mode, flash=True):
    """Set ``model``'s per-block checkpointing; returns a description and, for the
    op-level policy, a trace dict filled on the first forward."""
    from torch.utils.checkpoint import checkpoint

    trace = {}
    if mode == "none":
        model.wrap = None
        return "no checkpointing", trace
    if mode == "full":
        model.wrap = lambda block, x, cos, sin: checkpoint(block, x, cos, sin,
                                                           use_reentrant=False)
        return "full: checkpoint(block, use_reentrant=False) on every block", trace
    if mode != "selective":
        raise ValueError(f"mode {mode!r}: must be one of {MODES}")
    if not flash:
        model.wrap = None
        for block in model.layers:
            block.attn.core_checkpoint = True
        return ("selective without flash attention: softmax(QK^T)V checkpointed in "
                "every block (Korthikanti's selective recompute)"), trace
    context_fn = _sac_context_factory(trace)
    model.wrap = lambda block, x, cos, sin: checkpoint(
        block, x, cos, sin, use_reentrant=False, context_fn=context_fn,
        preserve_rng_state=False)
    return ("selective with flash attention: torchtitan's op-level policy (save aten.mm "
            "outputs except every second mm of a block, and the SDPA outputs; recompute "
            "the rest)"), trace


# --------------------------------------------------------------------------- optimizer

class MasterAdamW:
    """AdamW on fp32 master copies of 16-bit parameters (16 bytes per parameter: 2 + 2
    for the parameter and its gradient, 4 + 4 + 4 for master, momentum, variance)."""

    def __init__(self, params, lr, fused):
        import torch
        self.params = [p for p in params]
        self.master = [p.detach().float().requires_grad_(True) for p in self.params]
        self.opt = torch.optim.AdamW(self.master, lr=lr, weight_decay=0.1,
                                     **({"fused": True} if fused else {}))

    def zero_grad(self, set_to_none=False):
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self):
        import torch
        for m, p in zip(self.master, self.params):
            m.grad = p.grad.float()
        self.opt.step()
        for m in self.master:
            m.grad = None
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.master)


# --------------------------------------------------------------------------- one mode

def expected_memory(cfg, mode, flash, precision, gpu):
    """What ``scalemodel.memory`` answers for this script's setting of ``mode``."""
    kw = memory_kwargs(mode, flash, precision)
    alloc = scalemodel.memory(cfg, 1, gpu=gpu, **kw)
    reserved = scalemodel.memory(cfg, 1, gpu=gpu, **{**kw, "measure": "reserved"})
    return {"allocated": alloc.allocated_per_gpu, "reserved": reserved.reserved_per_gpu,
            "parts": dict(alloc.parts), "model_state": alloc.model_state,
            "activations_phases": activation_bytes(cfg, mode, flash, "unfused",
                                                   phases=True),
            "notes": alloc.notes,
            # the time model's recompute: this fraction of each block's forward time is
            # added to the backward (scalemodel.checkpointing.recompute_fraction)
            "recompute_fraction": recompute_fraction(cfg, mode, flash)}


def memory_kwargs(mode, flash, precision):
    """The ``scalemodel.memory(cfg, 1, **kwargs)`` keywords of this script's setting."""
    kw = {"sharding": "none", "optimizer": "adamw", "activation_checkpointing": mode,
          "flash_attention": bool(flash), "loss": "unfused", "measure": "allocated",
          "bucket_bytes": 0, "accounting": "zero", "suggest": False}
    if precision == "autocast":
        kw.update(param_dtype="fp32", grad_dtype="fp32")
    else:
        kw.update(param_dtype=None, grad_dtype=None)
    return kw


def _stats(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def _training_setup(cfg, mode, *, flash, precision, device, seed, lr):
    """A fresh model under ``mode``, its optimizer, the synthetic batch and the autocast
    context (None unless ``precision == "autocast"``), and how it is checkpointed."""
    import torch

    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if precision == "bf16" else None
    model = build_model(cfg, flash=flash, device=device, dtype=dtype, seed=seed)
    how, trace = apply_checkpointing(model, mode, flash)
    if precision == "bf16":
        opt = MasterAdamW(model.parameters(), lr=lr, fused=cuda)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1,
                                **({"fused": True} if cuda else {}))
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq), generator=gen).to(device)
    targets = torch.randint(0, cfg.vocab, (cfg.micro_batch * cfg.seq,),
                            generator=gen).to(device)
    autocast = (torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16)
                if precision == "autocast" else None)
    return model, opt, ids, targets, autocast, how, trace


def _max_memory():
    import torch
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def _train_step(step, model, opt, ids, targets, autocast, cuda, base, rec, peaks):
    """One step (forward, loss, backward, optimizer); the peaks of its phases recorded
    into ``rec`` (first step) or ``peaks`` (later ones). Returns the loss and the forward,
    backward and optimizer times [s] (CUDA events on a GPU)."""
    import torch
    import torch.nn.functional as F

    if cuda:
        if step == 1:
            rec["model_state_bytes"] = torch.cuda.memory_allocated() - base
        if step >= 1:
            torch.cuda.reset_peak_memory_stats()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        ev[0].record()
    t0 = time.perf_counter()
    if autocast is not None:
        with autocast:
            logits = model(ids)
    else:
        logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets)
    del logits  # torchtitan: free the 16-bit logits before backward
    if cuda:
        ev[1].record()
    t1 = time.perf_counter()
    loss.backward()
    if cuda:
        ev[2].record()
        if step >= 1:
            a, r = _max_memory()
            peaks["fwd_bwd_allocated"].append(a)
            peaks["fwd_bwd_reserved"].append(r)
            torch.cuda.reset_peak_memory_stats()
    t2 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=False)  # gradients persistent, as ZeRO counts them
    if cuda:
        ev[3].record()
        torch.cuda.synchronize()
        a, r = _max_memory()
        if step == 0:
            rec["first_step_peak_allocated"] = a - base
            rec["first_step_peak_reserved"] = r
        else:
            peaks["optimizer_allocated"].append(a)
            peaks["optimizer_reserved"].append(r)
        parts = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(3)]
    else:
        parts = [t1 - t0, t2 - t1, time.perf_counter() - t2]
    return float(loss.detach()), parts


MEMORY_KEYS = ("base_allocated_bytes", "model_state_bytes", "first_step_peak_allocated",
               "first_step_peak_reserved", "peak_fwd_bwd_allocated", "peak_fwd_bwd_reserved",
               "peak_optimizer_allocated", "peak_optimizer_reserved", "max_memory_allocated",
               "max_memory_reserved")
"""The record's memory fields [bytes] (null on the CPU)."""


def _memory_fields(rec, peaks, base):
    """The record's memory fields from the phases' peaks (``base``: allocated before the
    model was built) [bytes]."""
    rec["base_allocated_bytes"] = base
    rec["peak_fwd_bwd_allocated"] = (max(peaks["fwd_bwd_allocated"]) - base
                                     if peaks["fwd_bwd_allocated"] else None)
    rec["peak_fwd_bwd_reserved"] = max(peaks["fwd_bwd_reserved"], default=None)
    rec["peak_optimizer_allocated"] = (max(peaks["optimizer_allocated"]) - base
                                       if peaks["optimizer_allocated"] else None)
    rec["peak_optimizer_reserved"] = max(peaks["optimizer_reserved"], default=None)
    rec["max_memory_allocated"] = max(
        [rec["first_step_peak_allocated"] + base] + peaks["fwd_bwd_allocated"]
        + peaks["optimizer_allocated"])
    rec["max_memory_reserved"] = max(
        [rec["first_step_peak_reserved"]] + peaks["fwd_bwd_reserved"]
        + peaks["optimizer_reserved"])


def run_mode(cfg, mode, *, flash, precision, steps, warmup, device, seed=0, lr=1e-4):
    """Train ``warmup + steps`` steps of a fresh model under ``mode``; the record."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if cuda else None
    model, opt, ids, targets, autocast, how, trace = _training_setup(
        cfg, mode, flash=flash, precision=precision, device=device, seed=seed, lr=lr)
    rec = {"mode": mode, "checkpointing": how, "losses": [], "oom": None}
    times = {"step": [], "forward": [], "backward": [], "optimizer": []}
    peaks = {"fwd_bwd_allocated": [], "fwd_bwd_reserved": [], "optimizer_allocated": [],
             "optimizer_reserved": []}
    for step in range(warmup + steps):
        loss, parts = _train_step(step, model, opt, ids, targets, autocast, cuda, base,
                                  rec, peaks)
        rec["losses"].append(loss)
        if step >= warmup:
            for key, value in zip(("forward", "backward", "optimizer"), parts):
                times[key].append(value)
            times["step"].append(sum(parts))
    rec["times_s"] = {k: _stats(v) for k, v in times.items()}
    if trace.get("ops"):
        rec["selective_policy_first_block"] = trace["ops"]
    del model, opt, ids, targets
    if cuda:
        _memory_fields(rec, peaks, base)
        gc.collect()
        torch.cuda.empty_cache()
    else:
        rec.update(dict.fromkeys(MEMORY_KEYS))
    return rec


# --------------------------------------------------------------------------- main

def environment(device):
    import torch
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device,
           "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
               timespec="seconds"),
           "python": sys.version.split()[0],
           "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
           "gpu_name": None, "gpu_total_memory": None,
           "scalemodel_gpu": None, "bf16_peak_flops": None}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env["gpu_name"] = props.name
        env["gpu_total_memory"] = props.total_memory
        env["scalemodel_gpu"] = gpu_of_device(props.name)
        if env["scalemodel_gpu"]:
            env["bf16_peak_flops"] = get_gpu(env["scalemodel_gpu"]).peak("bf16")
    return env


def _write_atomic(path, data):
    """``data`` as JSON at ``path``, through the library's atomic writer (never half
    written, whatever signal arrives; no temporary file left; the umask's mode)."""
    from scalemodel.profiles import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


class UsageError(SystemExit):
    """A bad option of a calibration script: its message (``str``) goes to stderr with
    the script's name and the exit status is 2, argparse's (:func:`run_cli`)."""

    def __init__(self, message):
        super().__init__(2)
        self.message = message

    def __str__(self):
        return self.message


def check_out(path):
    """``--out`` checked before anything is measured (a folder, a path ending in a
    separator, an unwritable folder: :func:`scalemodel.profiles.output_problem`)."""
    from scalemodel.profiles import output_problem

    problem = output_problem(path)
    if problem:
        raise UsageError(f"--out {path!r} {problem}")
    return path


def check_device(text):
    """The torch device of ``--device`` (None: cuda when present, else cpu), refused in
    one line when torch does not know it or has no CUDA."""
    import torch

    from scalemodel.calibrate.compute import device_problem

    if text is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    problem = device_problem(text)
    if problem:
        raise UsageError(problem)
    return text


def positive_int(text):
    """An ``argparse`` type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def run_cli(main, prog, interrupted):
    """Run a calibration script's ``main()`` as a command: a usage error or a scalemodel
    error is one line and status 2, Ctrl-C one line (``interrupted``) and status 130."""
    try:
        main()
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except scalemodel.ScalemodelError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; {interrupted}", file=sys.stderr)
        sys.exit(130)


def _gib(x):
    return "n/a" if x is None else f"{x / GIB:.2f}"


def _parser():
    p = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    p.add_argument("--out", required=True, help="the JSON to write (rewritten whole after "
                   "each mode)")
    p.add_argument("--config", default="llama-1.3b",
                   help="a name (llama-1.3b, tiny, a scalemodel built-in LLM), a JSON "
                        "string or file of TransformerConfig fields or an HF config.json")
    p.add_argument("--seq", type=positive_int, help="tokens per sequence (default: the "
                   "config's)")
    p.add_argument("--micro-batch", type=positive_int, help="sequences per step (default: "
                   "the config's)")
    p.add_argument("--modes", default="none,selective,full",
                   help="activation checkpointing modes to run (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode (default: "
                   "%(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default: "
                   "%(default)s)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    p.add_argument("--flash", action=argparse.BooleanOptionalAction, default=True,
                   help="flash attention (scaled_dot_product_attention); --no-flash: the "
                        "attention core in eager PyTorch")
    p.add_argument("--precision", choices=("bf16", "autocast"), default="bf16",
                   help="bf16 weights, or fp32 weights under bf16 autocast (default: "
                        "%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                   help="PyTorch's non-reentrant checkpoint stops recomputing a block once "
                        "the tensors its backward needs exist (the default); "
                        "--no-early-stop replays the whole block "
                        "(torch.utils.checkpoint.set_checkpoint_early_stop(False))")
    return p


def _header(cfg, args, env, gpu):
    """The record's fields before any mode runs (config, environment, model FLOPs)."""
    flops = tensor_flops(cfg)
    blocks = (flops.unit >= 0) & (flops.unit < cfg.layers)
    return {"config": attrs.asdict(cfg), "parameter_count": cfg.parameter_count,
            "environment": env, "flash_attention": args.flash, "precision": args.precision,
            "steps": args.steps, "warmup": args.warmup, "seed": args.seed,
            "checkpoint_early_stop": args.early_stop,
            "model_flops_per_step": flops.forward + flops.backward,
            "model_flops_note": "scalemodel.workloads.tensor_flops: 2*T per weight "
                                "element forward, attention core 4*b*s^2*d_attn per layer "
                                "(not halved for the causal mask), backward twice "
                                "forward; no recompute",
            "block_forward_flops_share": float(flops.forward_flops[blocks].sum()
                                               / flops.forward),
            "memory_gpu": gpu, "modes": {}}


def _measure(cfg, mode, args, device, out):
    """One mode's record: the run (or its out-of-memory error), memory()'s expectation
    for it, tokens/s and MFU."""
    import torch

    exp = expected_memory(cfg, mode, args.flash, args.precision, out["memory_gpu"])
    try:
        rec = run_mode(cfg, mode, flash=args.flash, precision=args.precision,
                       steps=args.steps, warmup=args.warmup, device=device, seed=args.seed)
    except torch.cuda.OutOfMemoryError as exc:
        rec = {"mode": mode, "oom": str(exc).splitlines()[0][:500]}
    if rec.get("oom"):  # the failed mode's frame is gone: free its tensors
        gc.collect()
        torch.cuda.empty_cache()
    # the built model's parameter count was asserted equal to scalemodel's
    rec["built_parameter_count"] = cfg.parameter_count if rec.get("oom") is None else None
    rec["memory_kwargs"] = memory_kwargs(mode, args.flash, args.precision)
    rec["expected"] = exp
    step = (rec.get("times_s") or {}).get("step")
    peak = out["environment"]["bf16_peak_flops"]
    if step:
        rec["tokens_per_s"] = cfg.tokens / step["median"]
        rec["mfu"] = out["model_flops_per_step"] / step["median"] / peak if peak else None
    else:
        rec["tokens_per_s"] = rec["mfu"] = None
    return rec


def _say(mode, rec):
    exp = rec["expected"]
    if rec.get("oom"):
        print(f"  {mode:9s} OOM ({rec['oom'][:120]}); memory() expects "
              f"{_gib(exp['allocated'])} GiB allocated", flush=True)
        return
    mfu = f"{rec['mfu']:.1%}" if rec.get("mfu") else "n/a"
    step = rec["times_s"]["step"]
    print(f"  {mode:9s} peak fwd+bwd {_gib(rec['peak_fwd_bwd_allocated'])} GiB "
          f"(memory() {_gib(exp['allocated'])}), max allocated "
          f"{_gib(rec['max_memory_allocated'])}, reserved "
          f"{_gib(rec['max_memory_reserved'])} (memory() {_gib(exp['reserved'])}), "
          f"model state {_gib(rec['model_state_bytes'])} "
          f"(memory() {_gib(exp['model_state'])}); step "
          f"{step['median'] * 1e3:.1f} ms, {rec['tokens_per_s']:.0f} tok/s, MFU {mfu}; "
          f"loss {rec['losses'][-1]:.4f}", flush=True)


def main(argv=None):
    """Run the measurement; returns the JSON-ready record (also written to ``--out``)."""
    p = _parser()
    args = p.parse_args(argv)

    check_out(args.out)
    device = check_device(args.device)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error(f"--modes: {m!r} is not one of {', '.join(MODES)}")
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be >= 1 (the first step allocates the optimizer "
                "state)")
    cfg = load_config(args.config, args.seq, args.micro_batch)
    env = environment(device)
    out = _header(cfg, args, env, env["scalemodel_gpu"] or "h100-sxm")
    print(f"llm_memory: {cfg.name} {cfg.parameter_count / 1e9:.3f} B params, seq {cfg.seq} "
          f"x micro-batch {cfg.micro_batch}, flash={args.flash}, precision="
          f"{args.precision}, {device} {env['gpu_name'] or ''}", flush=True)
    from torch.utils.checkpoint import set_checkpoint_early_stop
    with set_checkpoint_early_stop(args.early_stop):
        for mode in modes:
            out["modes"][mode] = _measure(cfg, mode, args, device, out)
            _write_atomic(args.out, out)
            _say(mode, out["modes"][mode])
    return out


if __name__ == "__main__":
    run_cli(main, "llm_memory", "the modes measured so far are in --out (written whole "
            "after each)")
