#!/usr/bin/env python3
"""Build the built-in workload profiles shipped in ``scalemodel/data/``.

Reproducible generator (pure Python + numpy, no torch) for the JSON files described in
``scalemodel/data/FORMAT.md``:

* ``resnet50``, ``resnet101``, ``vgg16``: measured layer-wise backward timings on a V100
  (Zhang et al., NetAI 2020; files from netx-repo/training-bottleneck).
* ``reduction/v100_vec_add``: the measured element-wise vector-add curve from the same
  source.
* ``bert-base``, ``bert-large``, ``gpt2``: gradient tensors of the real architectures
  (HuggingFace ``BertModel`` / ``GPT2Model`` parameter names, backward order) with
  ready times from a FLOP-proportional split of the backward pass, scaled so that one
  whole iteration matches a published single-GPU throughput (HKBU ddl-benchmarks); the
  ``gpt2`` timing is DERIVED from the BERT-Base row's sustained FLOP rate.

Usage::

    python tools/build_profiles.py [SHARED_DATA_DIR] [--out OUT_DIR]

``SHARED_DATA_DIR`` defaults to ``../shared/data`` relative to the repository root (the
folder holding ``training-bottleneck/`` and ``published/``); ``OUT_DIR`` defaults to
``scalemodel/data`` in the repository. Every file is written atomically (temporary file
in the same folder, then ``os.replace``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO_ROOT / ".." / "shared" / "data"
DEFAULT_OUT = REPO_ROOT / "scalemodel" / "data"

FORMAT = "scalemodel-workload"
FORMAT_VERSION = 1
FP32_BYTES = 4  # bytes per fp32 gradient element

# ----------------------------------------------------------------------------- sources

ZHANG_CITATION = ('Zhang, Chang, Lin, Wang, Arora, Jin, "Is Network the Bottleneck of '
                  'Distributed Training?", ACM SIGCOMM NetAI 2020, arXiv:2006.10103')
ZHANG_REPO = ("netx-repo/training-bottleneck, commit f81b140ea804558d15cd98af54ac4c290f2e022f, "
              "folder simulation/ (Apache License 2.0)")

HKBU_CITATION = ('Shi, Tang, Chu, Liu, Wang, Li, "Communication-Efficient Distributed Deep '
                 'Learning: Survey, Evaluation, and Challenges", arXiv:2005.13247, 2020; '
                 'benchmark scripts and results: github.com/HKBU-HPML/ddl-benchmarks')
HKBU_MODEL_FINDING = (
    "HKBU-HPML/ddl-benchmarks horovod/bert_benchmark.py and mgwfbp/bert_benchmark.py "
    "(read at commit 565964abcd7ce0674aac01e61fb4b28937804b6a) train HuggingFace "
    "transformers BertForPreTraining(config) from scratch on synthetic data (random token "
    "ids, sentence length 64 via horovod_mpi_cj.sh), with a BertPretrainingCriterion "
    "(cross-entropy over the MLM prediction scores of ALL tokens + next-sentence loss) and "
    "transformers.AdamW; the config vocab is padded to a multiple of 8 (30522 -> 30528). "
    "The config files bert_config.json / bert_base_config.json are not in the repository; "
    "standard BERT-Large / BERT-Base shapes are assumed.")

# Single-GPU iteration times hard-coded in the authors' simulation scripts
# (training-bottleneck/README.md) [s], batch 32.
CNN_ITER_TIME = {"resnet50": 0.12808580219559176, "resnet101": 0.19200599479476405,
                 "vgg16": 0.19452352295080985}
# Checks from training-bottleneck/README.md: tensors, backward [ms], gradients [MB].
CNN_README_SUMS = {"resnet50": (161, 64.81, 102.2), "resnet101": (314, 106.41, 178.2),
                   "vgg16": (58, 111.62, 553.5)}
# Row of model_parameter_counts.csv that each log must match (vgg16 was logged as vgg16_bn).
CNN_PARAM_ROW = {"resnet50": "resnet50", "resnet101": "resnet101", "vgg16": "vgg16_bn"}
CNN_LABEL = {"resnet50": "ResNet-50", "resnet101": "ResNet-101",
             "vgg16": "VGG-16 (torchvision vgg16_bn)"}
CNN_BATCH = 32
CNN_DEVICE = "NVIDIA V100-SXM2 (AWS p3dn.24xlarge)"

# Optimizer-step estimate: Adam(W) is memory bound; per parameter it reads the gradient,
# reads and writes the parameter and both moments (4 B each in fp32): 7 x 4 = 28 B.
ADAM_BYTES_PER_PARAM = 28
# NVIDIA Tesla V100 datasheet: HBM2 bandwidth 900 GB/s (PCIe and SXM2 alike) [B/s].
V100_HBM2_BANDWIDTH = 900e9
V100_HBM2_CITATION = "NVIDIA Tesla V100 GPU datasheet: 900 GB/s HBM2 memory bandwidth"


# ----------------------------------------------------------------------------- helpers

def write_json_atomic(path: Path, obj) -> None:
    """Write ``obj`` as pretty JSON (indent=1) to ``path`` atomically.

    The text goes to a temporary file in the same folder, which then replaces ``path``,
    so a reader never sees a half-written file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=1, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_param_counts(shared: Path) -> dict[str, int]:
    """``model`` column -> ``total_params`` [parameters] from model_parameter_counts.csv."""
    with open(shared / "published" / "model_parameter_counts.csv", newline="") as f:
        return {row["model"]: int(float(row["total_params"])) for row in csv.DictReader(f)}


def find_throughput_row(shared: Path, **match: str) -> dict[str, str]:
    """The one row of single_gpu_throughput_summary.csv whose columns equal ``match``."""
    with open(shared / "published" / "single_gpu_throughput_summary.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if all(r[k] == v for k, v in match.items())]
    if len(rows) != 1:
        raise ValueError(f"expected exactly one throughput row matching {match}, "
                         f"found {len(rows)}")
    return rows[0]


def cited_row(row: dict[str, str]) -> dict[str, str]:
    """The columns of a throughput row that a profile cites, verbatim (strings)."""
    keys = ("gpu", "model", "precision", "batch_per_gpu", "seq_len", "throughput", "unit",
            "source")
    return {k: row[k] for k in keys}


def profile_dict(*, name, description, provenance, device, framework, precision,
                 batch_size, forward_time, backward_time, update_time, names, sizes, ready,
                 shapes=None, reduction="v100_vec_add") -> dict:
    """Assemble one profile in the FORMAT.md layout (times [s], sizes [bytes], shapes
    [elements per dimension])."""
    if shapes is not None:
        assert len(shapes) == len(sizes)
        assert all(int(np.prod(sh)) * FP32_BYTES == int(b) for sh, b in zip(shapes, sizes))
    tensors = {"names": list(names) if names is not None else None,
               "bytes": [int(b) for b in sizes],
               "ready": [float(t) for t in ready]}
    if shapes is not None:
        tensors["shapes"] = [[int(d) for d in sh] for sh in shapes]
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "name": name,
        "description": description, "provenance": provenance, "device": device,
        "framework": framework, "precision": precision, "batch_size": int(batch_size),
        "forward_time": float(forward_time), "backward_time": float(backward_time),
        "update_time": float(update_time),
        "tensors": tensors,
        "reduction": reduction,
    }


# ----------------------------------------------------------------------------- CNNs

def read_bk_log(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Parse a ``<model>.bk.log``: per-row waits [us] and gradient sizes [bytes].

    Layout (training-bottleneck/README.md): a comment line, the number of batches (1:
    rows already averaged), the number of tensors L, then L rows ``wait_us,bytes`` in
    backward order.
    """
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    n_batches, n_tensors = int(lines[1]), int(lines[2])
    if n_batches != 1:
        raise ValueError(f"{path}: expected 1 averaged batch, got {n_batches}")
    rows = [ln.split(",") for ln in lines[3:]]
    if len(rows) != n_tensors:
        raise ValueError(f"{path}: header says {n_tensors} tensors, found {len(rows)} rows")
    wait_us = np.array([float(r[0]) for r in rows])
    sizes = np.array([int(r[1]) for r in rows], dtype=np.int64)
    return wait_us, sizes


def build_cnn(name: str, shared: Path, params: dict[str, int]) -> dict:
    """Profile for resnet50 / resnet101 / vgg16 from the measured backward log."""
    wait_us, sizes = read_bk_log(shared / "training-bottleneck" / f"{name}.bk.log")
    ready = np.cumsum(wait_us) * 1e-6  # [s] from the start of loss.backward()
    backward = float(ready[-1])
    t_iter = CNN_ITER_TIME[name]

    # Check the parse against the README sums and the exact parameter counts.
    n, ms, mb = CNN_README_SUMS[name]
    assert len(sizes) == n, (name, len(sizes), n)
    assert round(backward * 1e3, 2) == ms, (name, backward * 1e3, ms)
    assert round(int(sizes.sum()) / 1e6, 1) == mb, (name, sizes.sum(), mb)
    assert np.all(sizes % FP32_BYTES == 0)
    assert int(sizes.sum()) // FP32_BYTES == params[CNN_PARAM_ROW[name]], name

    notes = ("Measured: tensors.ready is the cumulative sum of the per-tensor waits of "
             f"{name}.bk.log (us -> s); backward_time is the last ready time. Only backward "
             "and the whole single-GPU iteration (the authors' hard-coded sd_batch_time, "
             f"{t_iter!r} s) were measured, so forward_time = t_iter - backward_time holds "
             "everything outside backward (forward pass, loss and optimizer step) and "
             "update_time is 0.")
    if name == "vgg16":
        notes += (" The log was recorded with torchvision vgg16_bn (138,365,992 parameters), "
                  "not plain vgg16.")
    provenance = {
        "source": f"measured on V100: {ZHANG_REPO}, files {name}.bk.log and the simulation "
                  "scripts' single-GPU iteration time",
        "citation": ZHANG_CITATION,
        "derivation": "ready = cumsum(wait_us) * 1e-6; backward_time = ready[-1]; "
                      "forward_time = t_iter - backward_time; update_time = 0",
        "notes": notes,
    }
    return profile_dict(
        name=name,
        description=f"{CNN_LABEL[name]}, V100 fp32, batch 32: measured layer-wise backward "
                    "(Zhang et al. 2020)",
        provenance=provenance, device=CNN_DEVICE, framework="PyTorch", precision="fp32",
        batch_size=CNN_BATCH, forward_time=t_iter - backward, backward_time=backward,
        update_time=0.0, names=None, sizes=sizes, ready=ready, shapes=cnn_shapes(name, sizes))


def resnet_param_shapes(blocks: tuple[int, ...], num_classes: int = 1000) -> list[tuple]:
    """Parameter shapes of torchvision's Bottleneck ``ResNet`` in REGISTRATION order.

    Written out from torchvision/models/resnet.py: ``conv1`` (64, 3, 7, 7), ``bn1``
    (weight, bias), then ``layer1..4`` of Bottleneck blocks (conv1 1x1, bn1, conv2 3x3,
    bn2, conv3 1x1 with expansion 4, bn3, and in each layer's first block a
    ``downsample`` 1x1 conv + BatchNorm), then ``fc`` (weight, bias). Convolutions
    have no bias; a BatchNorm has weight and bias of its channel count.
    """
    shapes: list[tuple] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for width, count in zip((64, 128, 256, 512), blocks):
        for b in range(count):
            out = width * 4
            shapes += [(width, inplanes, 1, 1), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,),
                       (out, width, 1, 1), (out,), (out,)]
            if b == 0:
                shapes += [(out, inplanes, 1, 1), (out,), (out,)]
            inplanes = out
    return shapes + [(num_classes, 512 * 4), (num_classes,)]


def vgg16_bn_param_shapes(num_classes: int = 1000) -> list[tuple]:
    """Parameter shapes of torchvision's ``vgg16_bn`` in REGISTRATION order.

    Configuration "D" of torchvision/models/vgg.py: 13 3x3 convolutions (weight and
    bias) each followed by a BatchNorm (weight, bias), then the classifier's three
    Linear layers 25088 -> 4096 -> 4096 -> num_classes (weight (out, in), bias).
    """
    cfg = (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512)
    shapes: list[tuple] = []
    cin = 3
    for c in cfg:
        shapes += [(c, cin, 3, 3), (c,), (c,), (c,)]
        cin = c
    for d_in, d_out in ((512 * 7 * 7, 4096), (4096, 4096), (4096, num_classes)):
        shapes += [(d_out, d_in), (d_out,)]
    return shapes


def cnn_shapes(name: str, sizes: np.ndarray) -> list[tuple]:
    """Gradient shapes of a CNN profile in BACKWARD order (reverse registration order),
    checked tensor by tensor against the measured sizes [bytes] of its log."""
    reg = {"resnet50": lambda: resnet_param_shapes((3, 4, 6, 3)),
           "resnet101": lambda: resnet_param_shapes((3, 4, 23, 3)),
           "vgg16": vgg16_bn_param_shapes}[name]()
    shapes = reg[::-1]
    got = [int(np.prod(sh)) * FP32_BYTES for sh in shapes]
    assert got == [int(b) for b in sizes], f"{name}: architecture shapes do not match the log"
    return shapes


def build_vec_add(shared: Path) -> dict:
    """The shipped reduction table ``v100_vec_add`` (sizes [bytes], times [s])."""
    rows = [ln.split(",") for ln in
            (shared / "training-bottleneck" / "cuda_vec_add.log").read_text().splitlines()
            if ln.strip()]
    sizes = [int(r[0]) for r in rows]
    seconds = [float(r[1]) for r in rows]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    return {
        "name": "v100_vec_add",
        "provenance": {
            "source": f"measured element-wise vector add on V100 (AWS p3dn.24xlarge, "
                      f"V100-SXM2): {ZHANG_REPO}, file cuda_vec_add.log",
            "citation": ZHANG_CITATION,
            "notes": "Cost of one element-wise fp32 vector add (the reduction step of an "
                     "all-reduce), 40 B to 640 MiB: flat at about 10 us up to ~1 MB "
                     "(launch latency), then about 275 GB/s.",
        },
        "bytes": sizes,
        "seconds": seconds,
    }


# ----------------------------------------------------------------------------- transformers

@dataclass
class Grad:
    """One gradient tensor: parameter name, element count, the backward FLOPs [FLOP]
    computed between the previous gradient (in backward order) and this one, and the
    parameter's shape (as PyTorch stores it)."""
    name: str
    numel: int
    flops: int
    shape: tuple = ()


def linear(prefix: str, d_in: int, d_out: int, tokens: int, conv1d: bool = False) -> list[Grad]:
    """A linear layer's weight and bias, in registration order (weight, bias).

    Backward of the weight: input gradient + weight gradient, 2 x 2*tokens*d_in*d_out
    [FLOP]; of the bias: the column sum of the output gradient, tokens*d_out [FLOP].
    GPT-2's Conv1D (``conv1d=True``) stores the weight as [d_in, d_out] instead of
    nn.Linear's [d_out, d_in]; the element count and FLOPs are the same.
    """
    shape = (d_in, d_out) if conv1d else (d_out, d_in)
    return [Grad(f"{prefix}.weight", d_in * d_out, 4 * tokens * d_in * d_out, shape),
            Grad(f"{prefix}.bias", d_out, tokens * d_out, (d_out,))]


def layer_norm(prefix: str, hidden: int, tokens: int) -> list[Grad]:
    """LayerNorm weight and bias (registration order). Its backward is element-wise; we
    put ~5*tokens*hidden [FLOP] on the weight (input gradient through the normalisation
    and the weight gradient) and tokens*hidden on the bias (a column sum)."""
    return [Grad(f"{prefix}.weight", hidden, 5 * tokens * hidden, (hidden,)),
            Grad(f"{prefix}.bias", hidden, tokens * hidden, (hidden,))]


def embedding(name: str, rows: int, hidden: int, tokens: int) -> Grad:
    """An embedding table: backward is a scatter-add of tokens*hidden [FLOP]."""
    return Grad(name, rows * hidden, tokens * hidden, (rows, hidden))


def attention_core_backward(batch: int, seq: int, hidden: int) -> int:
    """Backward FLOPs of QK^T and softmax*V (no parameters) for one layer [FLOP].

    Forward is 2 matmuls of 2*batch*seq^2*hidden each = 4*batch*seq^2*hidden; backward is
    twice that. Softmax, masking and dropout are element-wise and not counted.
    """
    return 2 * 4 * batch * seq * seq * hidden


def add_flops(grads: list[Grad], name: str, flops: int) -> None:
    """Add ``flops`` [FLOP] to the gradient called ``name``."""
    for g in grads:
        if g.name == name:
            g.flops += flops
            return
    raise KeyError(name)


def bert_grads(*, layers, hidden, batch, seq, vocab=30522, max_pos=512, type_vocab=2):
    """HuggingFace ``BertModel`` (incl. pooler) gradients in BACKWARD order.

    The backward order is the reverse of the parameter registration order (pooler first,
    embeddings last), the order PyTorch's autograd produces them in for a sequential
    stack. The attention core of each layer is attributed to the first of its
    query/key/value gradients in backward order (``value.bias``).
    """
    t = batch * seq  # tokens per iteration
    inter = 4 * hidden
    reg: list[Grad] = [
        embedding("embeddings.word_embeddings.weight", vocab, hidden, t),
        embedding("embeddings.position_embeddings.weight", max_pos, hidden, t),
        embedding("embeddings.token_type_embeddings.weight", type_vocab, hidden, t),
        *layer_norm("embeddings.LayerNorm", hidden, t),
    ]
    for i in range(layers):
        p = f"encoder.layer.{i}"
        reg += [*linear(f"{p}.attention.self.query", hidden, hidden, t),
                *linear(f"{p}.attention.self.key", hidden, hidden, t),
                *linear(f"{p}.attention.self.value", hidden, hidden, t),
                *linear(f"{p}.attention.output.dense", hidden, hidden, t),
                *layer_norm(f"{p}.attention.output.LayerNorm", hidden, t),
                *linear(f"{p}.intermediate.dense", hidden, inter, t),
                *linear(f"{p}.output.dense", inter, hidden, t),
                *layer_norm(f"{p}.output.LayerNorm", hidden, t)]
        add_flops(reg, f"{p}.attention.self.value.bias",
                  attention_core_backward(batch, seq, hidden))
    # The pooler sees only the [CLS] token: batch rows, not batch*seq.
    reg += linear("pooler.dense", hidden, hidden, batch)
    return reg[::-1]


def bert_pretraining_head(*, hidden, batch, seq, vocab=30522) -> tuple[int, int]:
    """BertForPreTraining heads not in BertModel: (backward FLOPs [FLOP], parameters).

    ``cls.predictions``: transform dense (hidden x hidden) + GELU + LayerNorm, then the
    decoder (tied to the word embeddings, hidden x vocab) with its own bias over ALL
    tokens; ``cls.seq_relationship``: hidden x 2 on the pooled output. Their backward runs
    at the very start of backward. Their own parameters (transform, LayerNorm, decoder
    bias, seq_relationship) are not gradient tensors of the profile.
    """
    t = batch * seq
    flops = (4 * t * hidden * hidden + t * hidden      # transform.dense
             + 6 * t * hidden                          # transform.LayerNorm (5 + 1)
             + 4 * t * hidden * vocab + t * vocab      # decoder (tied) + bias
             + 4 * batch * hidden * 2 + batch * 2)     # seq_relationship (NSP)
    params = (hidden * hidden + hidden) + 2 * hidden + vocab + (hidden * 2 + 2)
    return flops, params


def gpt2_grads(*, layers, hidden, batch, seq, vocab=50257, n_positions=1024):
    """HuggingFace ``GPT2Model`` gradients (tied LM head) in BACKWARD order.

    Reverse registration order: ``ln_f`` first, ``wte`` last. The tied LM head's logits
    matmul backward (4*tokens*hidden*vocab) runs at the very start of backward and is put
    on the first tensor; its weight gradient accumulates into ``wte``, whose gradient is
    complete only at the end. The attention core of each layer goes on ``c_attn.bias``.
    """
    t = batch * seq
    inter = 4 * hidden
    reg: list[Grad] = [embedding("wte.weight", vocab, hidden, t),
                       embedding("wpe.weight", n_positions, hidden, t)]
    for i in range(layers):
        p = f"h.{i}"
        reg += [*layer_norm(f"{p}.ln_1", hidden, t),
                *linear(f"{p}.attn.c_attn", hidden, 3 * hidden, t, conv1d=True),
                *linear(f"{p}.attn.c_proj", hidden, hidden, t, conv1d=True),
                *layer_norm(f"{p}.ln_2", hidden, t),
                *linear(f"{p}.mlp.c_fc", hidden, inter, t, conv1d=True),
                *linear(f"{p}.mlp.c_proj", inter, hidden, t, conv1d=True)]
        add_flops(reg, f"{p}.attn.c_attn.bias", attention_core_backward(batch, seq, hidden))
    reg += layer_norm("ln_f", hidden, t)
    grads = reg[::-1]
    grads[0].flops += 4 * t * hidden * vocab  # tied LM head, start of backward
    return grads


def adam_update_time(n_params: int) -> float:
    """Estimated memory-bound Adam(W) step on a V100 [s]: 28 B/parameter at 900 GB/s."""
    return n_params * ADAM_BYTES_PER_PARAM / V100_HBM2_BANDWIDTH


def timeline(grads: list[Grad], compute_time: float) -> tuple[float, float, np.ndarray]:
    """Split ``compute_time`` [s] (forward + backward) 1:2 and spread backward over the
    tensors in proportion to their FLOPs; returns (forward [s], backward [s], ready [s]).
    The last ready time equals backward exactly."""
    backward = 2.0 * compute_time / 3.0
    forward = compute_time - backward
    cum = np.cumsum(np.array([g.flops for g in grads], dtype=object))  # exact integers
    total = int(cum[-1])
    ready = np.array([backward * (int(c) / total) for c in cum])
    return forward, backward, ready


def transformer_profile(*, name, description, grads, batch, forward, backward, update,
                        ready, device, provenance) -> dict:
    """Assemble a transformer profile (fp32 gradients, reduction v100_vec_add)."""
    assert len({g.name for g in grads}) == len(grads), "duplicate tensor names"
    return profile_dict(
        name=name, description=description, provenance=provenance, device=device,
        framework="PyTorch", precision="fp32", batch_size=batch, forward_time=forward,
        backward_time=backward, update_time=update, names=[g.name for g in grads],
        sizes=[g.numel * FP32_BYTES for g in grads], ready=ready,
        shapes=[g.shape for g in grads])


BERT_DERIVATION = (
    "Gradient tensors: HuggingFace BertModel (incl. pooler; vocab 30522, max positions "
    "512, type vocab 2), fp32, backward order = reverse registration order. Backward FLOPs "
    "per tensor, tokens T = batch*seq: linear weight 4*T*in*out (input + weight grad), "
    "bias T*out (pooler: batch rows only); LayerNorm weight 5*T*h, bias T*h; embedding "
    "tables T*h (scatter-add); attention core 8*batch*seq^2*h per layer, added to the "
    "layer's value.bias (first of Q/K/V in backward order); BertForPreTraining head "
    "(MLM transform + decoder tied to the word embeddings over all tokens, NSP) added to "
    "the first tensor (start of backward). Forward FLOPs = backward/2. t_iter = "
    "batch/throughput; update_time = Adam estimate 28 B/param x (BertModel + head params) "
    "/ 900 GB/s; forward:backward = 1:2 of t_iter - update_time; backward spread over "
    "the tensors in proportion to FLOPs; ready = cumulative.")


def build_bert(variant: str, shared: Path, params: dict[str, int]) -> tuple[dict, dict]:
    """``bert-base`` or ``bert-large`` from the HKBU V100-PCIe fp32 row.

    Returns (profile, derived) where ``derived`` holds the iteration FLOPs [FLOP],
    compute time [s] and sustained FLOP rate [FLOP/s].
    """
    shape = {"bert-base": dict(layers=12, hidden=768, model="BERT-Base", batch=64),
             "bert-large": dict(layers=24, hidden=1024, model="BERT-Large", batch=8)}[variant]
    seq, batch, hidden = 64, shape["batch"], shape["hidden"]
    row = find_throughput_row(shared, gpu="Tesla V100-PCIE-32GB", model=shape["model"],
                              precision="fp32", seq_len=str(seq), batch_per_gpu=str(batch))
    throughput = float(row["throughput"])  # [sequences/s]

    grads = bert_grads(layers=shape["layers"], hidden=hidden, batch=batch, seq=seq)
    n_params = sum(g.numel for g in grads)
    assert n_params == params[f"{variant} (DERIVED)"], (variant, n_params)
    head_flops, head_params = bert_pretraining_head(hidden=hidden, batch=batch, seq=seq)
    grads[0].flops += head_flops  # MLM/NSP heads run at the very start of backward

    t_iter = batch / throughput
    update = adam_update_time(n_params + head_params)
    compute = t_iter - update
    forward, backward, ready = timeline(grads, compute)
    bwd_flops = sum(g.flops for g in grads)
    iter_flops = bwd_flops + bwd_flops / 2  # forward = backward / 2
    derived = {"iteration_flops": iter_flops, "compute_time": compute,
               "sustained_flop_rate": iter_flops / compute}

    provenance = {
        "source": "FLOP-proportional split of a published single-GPU throughput "
                  "(HKBU-HPML/ddl-benchmarks, V100-PCIe, fp32)",
        "citation": HKBU_CITATION,
        "throughput_row": cited_row(row),
        "derivation": BERT_DERIVATION,
        "derived": {"t_iter": t_iter, "throughput": throughput,
                    "throughput_unit": row["unit"],
                    "iteration_flops": float(iter_flops),
                    "sustained_flop_rate": derived["sustained_flop_rate"],
                    "update_params": n_params + head_params},
        "notes": (
            f"{HKBU_MODEL_FINDING} The pretraining-head compute is therefore included "
            "(added to the first tensor in backward order), but the head parameters not in "
            f"BertModel ({head_params:,}: cls.predictions.transform, its LayerNorm, the "
            "decoder bias, cls.seq_relationship) are not gradient tensors of this profile, "
            "so the tensor bytes equal the DERIVED BertModel count of "
            "model_parameter_counts.csv; they are counted in the optimizer step. The "
            "word-embedding table uses the unpadded vocab 30522 to match that count (the "
            "HKBU model had 30528 rows, +0.02%). The word-embedding gradient also "
            "accumulates the tied MLM decoder's weight gradient and is complete only at the "
            "end (embeddings last). Element-wise work (GELU, softmax, dropout, "
            "cross-entropy) is not counted in the FLOP split. update_time is an ESTIMATE "
            f"of a memory-bound AdamW step ({ADAM_BYTES_PER_PARAM} B per parameter: read "
            f"grad, read+write param, m, v) at {V100_HBM2_CITATION}; the reduction table "
            "was measured on a V100-SXM2, not the PCIe card."),
    }
    label = {"bert-base": "BERT-Base", "bert-large": "BERT-Large"}[variant]
    profile = transformer_profile(
        name=variant,
        description=f"{label} pretraining, V100-PCIe fp32, batch {batch} x seq {seq}: "
                    f"FLOP-split of HKBU ddl-benchmarks {throughput:g} seq/s",
        grads=grads, batch=batch, forward=forward, backward=backward, update=update,
        ready=ready, device="Tesla V100-PCIE-32GB", provenance=provenance)
    return profile, derived


def build_gpt2(shared: Path, params: dict[str, int], bert_base: dict) -> dict:
    """``gpt2`` (124M), DERIVED: the bert-base row's sustained FLOP rate applied to GPT-2
    at seq 1024, batch 4."""
    batch, seq, hidden = 4, 1024, 768
    grads = gpt2_grads(layers=12, hidden=hidden, batch=batch, seq=seq)
    n_params = sum(g.numel for g in grads)
    assert n_params == params["gpt2 (DERIVED)"], n_params
    bwd_flops = sum(g.flops for g in grads)
    iter_flops = bwd_flops + bwd_flops / 2
    rate = bert_base["sustained_flop_rate"]  # [FLOP/s]
    compute = iter_flops / rate
    update = adam_update_time(n_params)
    t_iter = compute + update
    forward, backward, ready = timeline(grads, compute)
    row = find_throughput_row(shared, gpu="Tesla V100-PCIE-32GB", model="BERT-Base",
                              precision="fp32", seq_len="64", batch_per_gpu="64")
    provenance = {
        "source": "DERIVED: no published GPT-2 row; the sustained FLOP rate implied by the "
                  "HKBU-HPML/ddl-benchmarks BERT-Base V100-PCIe fp32 row applied to GPT-2",
        "citation": HKBU_CITATION,
        "throughput_row": cited_row(row),
        "derivation": (
            "Gradient tensors: HuggingFace GPT2Model (vocab 50257, n_positions 1024, ln_f, "
            "LM head tied to wte), fp32, backward order = reverse registration order. "
            "Backward FLOPs per tensor as for bert-base (linear 4*T*in*out + bias T*out, "
            "LayerNorm 5*T*h / T*h, embeddings T*h, attention core 8*batch*seq^2*h on "
            "c_attn.bias), plus the tied LM head's logits matmul backward 4*T*h*vocab on "
            "the first tensor (ln_f.bias). Forward FLOPs = backward/2. Sustained rate R = "
            "bert-base iteration FLOPs / (bert-base t_iter - update_time); GPT-2 "
            "forward+backward = its FLOPs / R, split 1:2; update_time = Adam estimate "
            "28 B/param / 900 GB/s; t_iter = forward + backward + update; throughput = "
            "batch / t_iter."),
        "derived": {"t_iter": t_iter, "throughput": batch / t_iter,
                    "throughput_unit": "sequences/s (DERIVED)",
                    "iteration_flops": float(iter_flops), "sustained_flop_rate": rate,
                    "update_params": n_params},
        "notes": (
            "DERIVED, not measured. Assumes GPT-2 small at seq_len 1024, batch 4 per GPU "
            "(4096 tokens, as bert-base's 64 x 64) runs at the same sustained FLOP rate as "
            "BERT-Base (same width 768 and depth 12) on the HKBU Tesla V100-PCIE-32GB in "
            "fp32. The wte gradient accumulates the tied LM head's weight gradient at the "
            "start of backward but is complete only at the end (embedding last). "
            "Element-wise work (GELU, softmax, dropout, cross-entropy) is not counted in "
            "the FLOP split. update_time is an ESTIMATE of a memory-bound Adam step "
            f"({ADAM_BYTES_PER_PARAM} B per parameter) at {V100_HBM2_CITATION}; the "
            "reduction table was measured on a V100-SXM2."),
    }
    return transformer_profile(
        name="gpt2",
        description=f"GPT-2 small (124M), V100-PCIe fp32, batch {batch} x seq {seq}: "
                    "DERIVED from the BERT-Base FLOP rate",
        grads=grads, batch=batch, forward=forward, backward=backward, update=update,
        ready=ready, device="Tesla V100-PCIE-32GB", provenance=provenance)


# ----------------------------------------------------------------------------- main

def build_all(shared: Path, out: Path) -> list[dict]:
    """Build and write every profile and the reduction table; returns the profiles."""
    params = read_param_counts(shared)
    profiles = [build_cnn(n, shared, params) for n in ("resnet50", "resnet101", "vgg16")]
    bert_base, base_rate = build_bert("bert-base", shared, params)
    bert_large, _ = build_bert("bert-large", shared, params)
    profiles += [bert_base, bert_large, build_gpt2(shared, params, base_rate)]

    write_json_atomic(out / "reduction" / "v100_vec_add.json", build_vec_add(shared))
    for p in profiles:
        # Same invariants the loader checks, so a broken file is never written.
        r = p["tensors"]["ready"]
        assert all(b >= a for a, b in zip(r, r[1:])) and p["backward_time"] >= r[-1]
        write_json_atomic(out / f"{p['name']}.json", p)
    return profiles


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shared", nargs="?", type=Path, default=DEFAULT_SHARED,
                    help="shared data folder with training-bottleneck/ and published/ "
                         "(default: ../shared/data relative to the repository root)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="output folder (default: scalemodel/data in the repository)")
    args = ap.parse_args(argv)
    profiles = build_all(args.shared.resolve(), args.out.resolve())
    print(f"{'profile':<11}{'tensors':>8}{'bytes':>14}{'fwd [ms]':>10}{'bwd [ms]':>10}"
          f"{'upd [ms]':>10}")
    for p in profiles:
        print(f"{p['name']:<11}{len(p['tensors']['bytes']):>8}{sum(p['tensors']['bytes']):>14}"
              f"{p['forward_time'] * 1e3:>10.3f}{p['backward_time'] * 1e3:>10.3f}"
              f"{p['update_time'] * 1e3:>10.3f}")
    print(f"wrote {len(profiles)} profiles and reduction/v100_vec_add.json to {args.out}")


if __name__ == "__main__":
    main()
