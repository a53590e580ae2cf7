"""Memory per GPU under data parallelism, plain (DDP) or sharded (ZeRO / FSDP).

:func:`memory` adds up, per GPU,

* **model state**, persistent: ``parameters``, ``gradients`` and ``optimizer`` state,
  divided among the GPUs as each strategy divides it (Rajbhandari et al., "ZeRO: Memory
  Optimizations Toward Training Trillion Parameter Models", SC'20, arXiv:1910.02054,
  Sec. 5 and Fig. 1). Mixed-precision Adam keeps :math:`2\\Psi` bytes of 16-bit
  parameters, :math:`2\\Psi` of 16-bit gradients and :math:`K\\Psi = 12\\Psi` of
  optimizer state (fp32 master weights, momentum and variance) for :math:`\\Psi`
  parameters: 16 bytes per parameter.

  ================ =============== =============== ===================
  strategy         parameters      gradients       optimizer
  ================ =============== =============== ===================
  ``none`` (DDP)   2Ψ              2Ψ              12Ψ
  ``zero1``        2Ψ              2Ψ              12Ψ / n
  ``zero2``        2Ψ              2Ψ / n          12Ψ / n
  ``zero3``        2Ψ / n          2Ψ / n          12Ψ / n
  ``hybrid_shard`` 2Ψ / g          2Ψ / g          12Ψ / g
  ================ =============== =============== ===================

  ``g`` is the number of GPUs in a node (``gpus_per_node``): hybrid sharding shards
  fully inside a node and replicates across nodes.
* **activations**, from the transformer's shape (Korthikanti et al., "Reducing
  Activation Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198,
  Sec. 4.1, no tensor or sequence parallelism): per layer
  :math:`sbh(34 + 5as/h)` bytes with 16-bit activations (:math:`34 sbh` with
  ``flash_attention=True``, the default, which keeps no score matrix), where ``s`` is the sequence,
  ``b`` the micro-batch, ``h`` the width and ``a`` the heads. With full activation
  checkpointing only each layer's input, :math:`2sbh` bytes, is kept, plus one layer's
  full activations while it is recomputed (Sec. 4.2). The fp32 logits of the loss,
  :math:`4sbV`, are added (vocabulary ``V``).
* **buffers**, transient: under ``zero3`` / ``hybrid_shard`` the all-gathered parameters
  of the unit being computed and of the one prefetched, the unsharded gradients of one
  unit before its reduce-scatter, and the root unit (embeddings and head) that FSDP keeps
  gathered; under every strategy one communication bucket (``bucket_bytes``).

For a plain :class:`~scalemodel.WorkloadProfile` without a transformer config the
parameter count is the gradient bytes over the gradient element size; activations are
unknown (``None``) and ``per_gpu`` counts the known parts only (``complete`` is False).
"""

from __future__ import annotations

import functools
import weakref
import math
import types

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .hardware import DTYPE_BYTES, GPUSpec, canonical_dtype, get_gpu

__all__ = ["memory", "MemoryEstimate", "canonical_sharding", "SHARDING_STRATEGIES",
           "SHARDING_ALIASES", "OPTIMIZER_STATES"]

SHARDING_STRATEGIES = ("none", "zero1", "zero2", "zero3", "hybrid_shard")
"""The data-parallel strategies, by their canonical names."""

SHARDING_ALIASES = {"ddp": "none", "no_shard": "none", "no-shard": "none",
                    "zero-1": "zero1", "zero-2": "zero2", "zero-3": "zero3",
                    "shard_grad_op": "zero2", "shard-grad-op": "zero2",
                    "full_shard": "zero3", "full-shard": "zero3", "fsdp": "zero3",
                    "hybrid-shard": "hybrid_shard", "hsdp": "hybrid_shard"}
"""Other names: PyTorch FSDP's ``ShardingStrategy`` names and DeepSpeed's stages."""

OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd": 0, "sgd_momentum": 1}
"""fp32 state tensors per parameter of each optimizer (Adam: momentum and variance)."""

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""One communication bucket: PyTorch DDP's default ``bucket_cap_mb=25`` [bytes]."""


def canonical_sharding(sharding) -> str:
    """The canonical name of a sharding strategy (``"full_shard"`` -> ``"zero3"``).

    Parameters
    ----------
    sharding : str
        ``"none"``, ``"zero1"``, ``"zero2"``, ``"zero3"``, ``"hybrid_shard"`` or an alias
        in ``SHARDING_ALIASES`` (case-insensitive) [-].

    Raises
    ------
    UnknownNameError
        Not a strategy; suggests the closest.
    """
    if not isinstance(sharding, str):
        raise ParameterTypeError("sharding", sharding, "a strategy name such as 'zero3'")
    key = sharding.strip().lower()
    key = SHARDING_ALIASES.get(key, key)
    if key not in SHARDING_STRATEGIES:
        raise UnknownNameError("sharding", sharding, SHARDING_STRATEGIES,
                               aliases=SHARDING_ALIASES)
    return key


@attrs.frozen(eq=False)
class MemoryEstimate:
    """Memory needed per GPU.

    Attributes
    ----------
    per_gpu : float or numpy.ndarray
        Total of the known parts per GPU [bytes]; an array when ``n`` is one.
    parts : mapping of str to float, numpy.ndarray or None
        ``parameters``, ``gradients``, ``optimizer`` (persistent model state),
        ``activations`` (None when unknown) and ``buffers`` [bytes].
    fits : bool or numpy.ndarray
        ``per_gpu`` is at most the GPU's memory.
    gpu : GPUSpec
        The GPU checked against.
    sharding : str
        Canonical strategy name.
    n : int or numpy.ndarray
        GPUs [-].
    parameter_count : float
        Parameters of the model [-].
    complete : bool
        False when a part is unknown (activations of a profile without a config).
    notes : str
        What was assumed.
    """

    per_gpu: object
    parts: types.MappingProxyType
    fits: object
    gpu: GPUSpec
    sharding: str
    n: object
    parameter_count: float
    complete: bool
    notes: str

    @property
    def model_state(self):
        """Parameters + gradients + optimizer state per GPU [bytes]."""
        return self.parts["parameters"] + self.parts["gradients"] + self.parts["optimizer"]

    def message(self) -> str:
        """One line: does it fit, and how much it needs."""
        per = np.atleast_1d(self.per_gpu)
        gib = ", ".join(f"{v / 2**30:.1f}" for v in per)
        verdict = ("fits" if np.all(self.fits) else
                   "does not fit" if not np.any(self.fits) else "fits for some n")
        tail = "" if self.complete else " (activations unknown: not counted)"
        return (f"{gib} GiB per GPU with sharding={self.sharding!r}: {verdict} on "
                f"{self.gpu.name} ({self.gpu.hbm_bytes / 2**30:.0f} GiB){tail}")


def _check_n(n, sharding):
    if type(n) is int and n >= (1 if sharding == "none" else 2):  # the common case
        return np.asarray(n)
    arr = np.asarray(n)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            raise ParameterTypeError("n", n, "an integer number of GPUs (n=8, not 8.0)")
        raise ParameterTypeError("n", n, "an integer number of GPUs >= 1, or an array of them")
    if np.any(arr < 1):
        raise InvalidParameterError("n", n, "must be >= 1")
    if sharding != "none" and np.any(arr < 2):
        raise InvalidParameterError("n", n, f"sharding={sharding!r} needs at least 2 GPUs "
                                    "to shard over", "Use sharding='none' for one GPU")
    return arr


def _resolve_model(model, micro_batch, seq):
    """(config or None, parameter count, profile grad element bytes or None, label)."""
    from .profiles import WorkloadProfile, load_profile
    from .workloads import TransformerConfig, _llm_key, llm_config, llm_names

    if isinstance(model, TransformerConfig):
        cfg = model
    elif isinstance(model, str) and _llm_key(model) in llm_names():
        cfg = llm_config(model)
    else:
        prof = load_profile(model)
        if isinstance(prof, WorkloadProfile) and isinstance(prof.provenance.get("config"), dict):
            cfg = _CONFIGS.get(prof)
            if cfg is None:  # kept with the profile while it lives
                cfg = _CONFIGS[prof] = _config_from(prof.provenance["config"])
        else:
            elem = DTYPE_BYTES.get(_precision(prof.precision), 4)
            return None, prof.total_bytes / elem, elem, prof.name
    changes = {}
    if micro_batch is not None:
        changes["micro_batch"] = micro_batch
    if seq is not None:
        changes["seq"] = seq
    if changes:
        cfg = attrs.evolve(cfg, **changes)
    return cfg, float(cfg.parameter_count), None, cfg.name or "transformer"


_CONFIGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _config_from(fields):
    """The :class:`~scalemodel.TransformerConfig` a derived profile records, validated once
    per distinct record."""
    from .workloads import TransformerConfig

    try:
        return _config_cached(tuple(sorted((k, type(v), v) for k, v in fields.items())))
    except TypeError:  # an unhashable field (a file's list): validated, and refused
        return TransformerConfig(**fields)


@functools.lru_cache(maxsize=64)
def _config_cached(items):
    from .workloads import TransformerConfig

    return TransformerConfig(**{k: v for k, _, v in items})


def _precision(text):
    try:
        return canonical_dtype(str(text))
    except Exception:  # a label such as "mixed": assume fp32 gradients
        return "fp32"


def _nonneg_bytes(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise InvalidParameterError(name, value, "must be a finite number of bytes >= 0")
    return float(value)


def memory(model, n, *, sharding="none", gpu="h100-sxm", optimizer="adam", param_dtype=None,
           grad_dtype=None, activation_checkpointing=False, micro_batch=None, seq=None,
           gpus_per_node=None, bucket_bytes=DEFAULT_BUCKET_BYTES,
           flash_attention=True) -> MemoryEstimate:
    """Memory per GPU to train ``model`` data-parallel on ``n`` GPUs.

    Parameters
    ----------
    model : str, TransformerConfig or WorkloadProfile
        A built-in LLM (``"llama-2-7b"``, see :func:`scalemodel.list_profiles`), any
        built-in or file profile, or a config [-].
    n : int or array_like of int
        Data-parallel GPUs; an array gives an array of answers [-].
    sharding : str
        ``"none"`` (DDP), ``"zero1"``, ``"zero2"`` (``"shard_grad_op"``), ``"zero3"``
        (``"full_shard"``) or ``"hybrid_shard"`` [-].
    gpu : str or GPUSpec
        The GPU whose memory is checked (:func:`~scalemodel.get_gpu`) [-].
    optimizer : str
        ``"adam"`` / ``"adamw"`` (2 fp32 states), ``"sgd_momentum"`` (1) or ``"sgd"``
        (0) [-].
    param_dtype : str or None
        Dtype of the working parameters; None: bf16 for a 16-bit compute dtype (then an
        fp32 master copy is part of the optimizer state), else fp32 [-].
    grad_dtype : str or None
        Dtype of the gradients; None: ``param_dtype`` [-].
    activation_checkpointing : bool
        Keep only each block's input and recompute the rest in backward [-].
    micro_batch : int or None
        Sequences per GPU per step; None: the config's [samples].
    seq : int or None
        Sequence length; None: the config's [tokens].
    gpus_per_node : int or None
        GPUs per node for ``"hybrid_shard"``; None: the GPU's usual server [-].
    bucket_bytes : float
        One communication bucket [bytes].
    flash_attention : bool
        Attention that does not store the ``s x s`` score matrix (FlashAttention, PyTorch's
        ``scaled_dot_product_attention``): drops the ``5as/h`` term. True by default, as
        in current LLM training code; False gives Korthikanti et al.'s formula as printed
        [-].

    Returns
    -------
    MemoryEstimate
        ``per_gpu`` [bytes], ``parts``, ``fits`` and the GPU.

    Raises
    ------
    UnknownNameError
        Unknown strategy, optimizer, GPU or model; suggests the closest.
    InvalidParameterError
        Sharding with ``n=1``; ``"hybrid_shard"`` without ``gpus_per_node`` on a GPU with
        no usual server; a negative bucket.
    """
    from .workloads import _grad_dtype

    strategy = canonical_sharding(sharding)
    ns = _check_n(n, strategy)
    spec = get_gpu(gpu)
    if not isinstance(optimizer, str) or optimizer.strip().lower() not in OPTIMIZER_STATES:
        raise UnknownNameError("optimizer", optimizer, OPTIMIZER_STATES)
    states = OPTIMIZER_STATES[optimizer.strip().lower()]
    if not isinstance(activation_checkpointing, (bool, np.bool_)):
        raise ParameterTypeError("activation_checkpointing", activation_checkpointing,
                                 "True or False")
    if not isinstance(flash_attention, (bool, np.bool_)):
        raise ParameterTypeError("flash_attention", flash_attention, "True or False")
    bucket = _nonneg_bytes(bucket_bytes, "bucket_bytes")
    cfg, psi, prof_elem, label = _resolve_model(model, micro_batch, seq)

    if param_dtype is None:
        pd = _grad_dtype(cfg, None) if cfg is not None else \
            ("bf16" if prof_elem == 2 else "fp32")
    else:
        pd = canonical_dtype(param_dtype, "param_dtype")
    pd = "fp32" if pd == "tf32" else pd
    gd = pd if grad_dtype is None else canonical_dtype(grad_dtype, "grad_dtype")
    gd = "fp32" if gd == "tf32" else gd
    pb, gb = DTYPE_BYTES[pd], DTYPE_BYTES[gd]
    master = 4 if pb < 4 else 0
    ob = master + 4 * states

    scalar = ns.ndim == 0  # one answer: Python floats (the array path gives the same)
    group = float(ns) if scalar else ns.astype(float)
    if strategy == "hybrid_shard":
        g = spec.gpus_per_server if gpus_per_node is None else gpus_per_node
        if g is None:
            raise InvalidParameterError("gpus_per_node", None, f"the {spec.name} has no usual "
                                        "server recorded", "Pass gpus_per_node=")
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1:
            raise InvalidParameterError("gpus_per_node", g, "must be an integer >= 1")
        group = min(group, float(g)) if scalar else np.minimum(group, float(g))
    one = 1.0 if scalar else np.ones_like(group)
    div_p = group if strategy in ("zero3", "hybrid_shard") else one
    div_g = group if strategy in ("zero2", "zero3", "hybrid_shard") else one
    div_o = one if strategy == "none" else group
    params, grads, optim = pb * psi / div_p, gb * psi / div_g, ob * psi / div_o

    notes = [f"{pd} parameters, {gd} gradients, {optimizer} with "
             f"{'an fp32 master copy and ' if master else ''}{states} fp32 state(s) "
             f"({pb + gb + ob} bytes per parameter unsharded; ZeRO, arXiv:1910.02054)"]
    buffers = bucket * one
    if cfg is not None:
        act = _activations(cfg, activation_checkpointing, flash_attention)
        notes.append("activations: Korthikanti et al. arXiv:2205.05198, sbh(34 + 5as/h) per "
                     "layer" + (" without the 5as/h score term (flash attention)"
                                if flash_attention else "")
                     + ("; full checkpointing: 2sbh per layer + one layer" if
                        activation_checkpointing else "") + "; fp32 logits 4sbV")
        if strategy in ("zero3", "hybrid_shard"):
            biggest, root = _block_and_root(cfg)
            gathered = pb * (2 * biggest + root) + gb * biggest * one
            buffers = buffers + gathered
            notes.append("buffers: two all-gathered blocks (current + prefetched), one "
                         "block's unsharded gradients, the gathered root unit (embeddings, "
                         "head) and one bucket")
        activations = act * one
    else:
        activations = None
        notes.append(f"{label}: no transformer config, so activations are unknown and not "
                     "counted; parameters from the gradient bytes")
    total = params + grads + optim + buffers + (activations if activations is not None else 0)

    def out(x):
        return None if x is None else (float(x) if scalar else x)

    parts = {"parameters": out(params), "gradients": out(grads), "optimizer": out(optim),
             "activations": out(activations), "buffers": out(buffers)}
    fits = total <= spec.hbm_bytes
    return MemoryEstimate(per_gpu=out(total), parts=types.MappingProxyType(parts),
                          fits=bool(fits) if scalar else fits, gpu=spec,
                          sharding=strategy, n=int(ns) if scalar else ns,
                          parameter_count=psi, complete=activations is not None,
                          notes="; ".join(notes))


@functools.lru_cache(maxsize=64)
def _block_and_root(cfg):
    """Parameters of the largest block and of the root unit (embeddings, head) [-]."""
    from .workloads import transformer_units

    u = transformer_units(cfg, "h100-sxm", efficiency=1.0)
    blocks = np.array(u.kind) == "block"
    biggest = float(u.param_count[blocks].max()) if blocks.any() else 0.0
    return biggest, float(u.param_count[~blocks].sum())


def _activations(cfg, checkpointing, flash) -> float:
    """Activation bytes of one step (Korthikanti et al., arXiv:2205.05198, Sec. 4)."""
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    per_layer = s * b * h * (34 + (0 if flash else 5 * a * s / h))
    logits = 4.0 * s * b * cfg.vocab
    if checkpointing:
        return 2.0 * s * b * h * cfg.layers + per_layer + logits
    return per_layer * cfg.layers + logits
