"""Workload profiles from a transformer's configuration, without a GPU.

:class:`TransformerConfig` holds the shape of a decoder (Llama, Mistral, GPT-2) or encoder
(BERT) transformer and the batch it trains on; from it and a GPU
(:func:`~scalemodel.get_gpu`) this module derives

* the parameter tensors and their exact counts (:attr:`TransformerConfig.parameter_count`
  reproduces the published counts: Llama-2-7B 6,738,415,616; GPT-2 124,439,808),
* the model FLOPs of every tensor (``tensor_flops``): a matrix multiply of a
  ``(in, out)`` weight over ``T = micro_batch * seq`` tokens costs ``2 T in out`` forward
  and twice that backward, and each layer's attention core ``4 b s^2 d_attn`` forward
  (``QK^T`` and ``AV``, causal masking not subtracted, as in Narayanan et al.,
  arXiv:2104.04473, and Korthikanti et al., arXiv:2205.05198); element-wise work (norms,
  activations, softmax, biases, embedding look-ups) costs no model FLOPs and is carried by
  the efficiency,
* a :class:`~scalemodel.WorkloadProfile` (:func:`transformer_profile`): gradients in
  backward order (last layer first, embeddings last) ready in proportion to the backward
  FLOPs done so far; forward and backward times are FLOPs / (peak x efficiency),
* per transformer block (the unit FSDP and ZeRO-3 wrap) its parameter bytes, forward
  and backward time (:func:`transformer_units`).

The efficiency (model FLOPs utilisation, MFU) defaults, for 16-bit training, to the
published MFU of LLM training runs on that GPU (:func:`scalemodel.efficiency.default_efficiency`:
LLM Foundry's bf16 runs without activation checkpointing, median per GPU; 0.41185 on an
H100 SXM, 0.55815 on an A100 40GB, 0.60985 on an A100 80GB), the same for the built-in
LLMs (:func:`llm_profile`) and for a configuration of your own; the profile's
``provenance["efficiency"]`` says which default it used. fp32 uses
:func:`measured_efficiency`, the MFU of the measured H100 profiles shipped with scalemodel
(``bert-base-h100*``, ``bert-large-h100*``, ``gpt2-h100*``). Pass ``efficiency=`` to use
your own; a cluster fitted on runs of the same GPU (:func:`~scalemodel.fit_cluster`)
replaces it in every prediction made with that cluster.
"""

from __future__ import annotations

import functools
import math
import re

import attrs
import numpy as np

from .collectives import ReductionCost
from .efficiency import PUBLISHED_MFU, SIXTEEN_BIT, default_efficiency
from .exceptions import InvalidParameterError, ParameterTypeError, ScalemodelError
from .hardware import DTYPE_BYTES, GPUSpec, canonical_dtype, get_gpu
from .profile_format import MAX_TIME, WorkloadProfile, load_builtin

__all__ = ["TransformerConfig", "TensorFlops", "TransformerUnits", "EfficiencyMeasurement",
           "tensor_flops", "transformer_profile", "transformer_units", "measured_efficiency",
           "attention_score_seconds", "SCORE_PASS_BYTES",
           "ADAM_UPDATE_BYTES_PER_PARAM", "llm_names", "llm_config", "llm_profile",
           "PUBLISHED_LLM_EFFICIENCY", "stage_parts", "end_stage_params"]

PUBLISHED_LLM_EFFICIENCY = PUBLISHED_MFU["h100-sxm"].value
"""Default model FLOPs utilisation of 16-bit training on an H100 SXM: 0.41185, the median MFU
of the twelve H100 bf16 runs of MPT-1B to MPT-13B without activation checkpointing at
2,048 tokens in MosaicML's LLM Foundry benchmark table (``mosaicml/llm-foundry``,
``scripts/train/benchmarking/README.md`` at commit 061f2c7, section "H100 80GB BF16";
``benchmarks/data/published_llm_mfu.csv`` rows 1-12, 39.6 to 46.4 %). Other GPUs:
:data:`scalemodel.efficiency.PUBLISHED_MFU`. The efficiency measured from scalemodel's own
H100 profiles in bf16 (:func:`measured_efficiency`, 0.047) is of models of 0.1-0.3 B
parameters on 512 to 4,096 tokens per step, whose kernels are shorter than their launch:
it measures the host, not the GPU, and is not a default."""

ADAM_UPDATE_BYTES_PER_PARAM = 28
"""HBM traffic of one mixed-precision Adam step per parameter [bytes] for the update-time
estimate: read fp32 master weight, m, v (12) and the gradient (2-4), write master, m, v
(12) and the 16-bit copy (2). The update is memory bound; its time is this traffic over
the GPU's datasheet HBM bandwidth (an estimate, not a measurement)."""


MAX_LAYERS = 100_000
"""Most transformer blocks a :class:`TransformerConfig` may have [-]: every block is
listed tensor by tensor (about 4.5 s at this bound), so a config with 10^9 layers would
run for hours instead of being refused; the deepest published transformers have about
1,000 (DeepNet, Wang et al. 2022)."""


MAX_DIMENSION = 2**31 - 1
"""Largest size, head count, sequence length or micro-batch a :class:`TransformerConfig`
may have [-]: far beyond any model (the widest published are about 10^5); a larger one
is a typo and ended in an OverflowError, not an answer."""


_HF_KEYS = {"layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
            "hidden": ("hidden_size", "n_embd", "d_model", "n_embed"),
            "heads": ("num_attention_heads", "n_head", "n_heads"),
            "ffn": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
            "vocab": ("vocab_size",),
            "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
            "head_dim": ("head_dim",),
            "learned_positions": ("n_positions", "max_position_embeddings"),
            "token_types": ("type_vocab_size",)}


def _as_config_key(exc, config, kw):
    """A TransformerConfig error of a field read from ``config.json``, naming the
    config's key instead (``layers=0`` -> ``config.num_hidden_layers=0``): the user wrote
    the key, never the field."""
    field = exc.parameter
    if field not in kw:
        return exc
    key = next((k for k in _HF_KEYS.get(field, ()) if k in config
                and (config[k] is exc.value or config[k] == exc.value)
                and type(config[k]) is type(exc.value)), None)
    if key is None:
        return exc
    new = type(exc).__new__(type(exc))
    Exception.__init__(new, str(exc).replace(f"{field}=", f"config.{key}=", 1))
    new.parameter, new.value = f"config.{key}", exc.value
    if hasattr(exc, "requirement"):
        new.requirement = exc.requirement
    return new


def _float_or_inf(value):
    """``float(value)``, or ``inf`` for an integer too large for a float (10**400 raised a
    bare OverflowError before the check that names the parameter)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _divisors(n):
    """The divisors of ``n`` >= 1, ascending [-]."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _int_ge(minimum):
    def check(instance, attribute, value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ParameterTypeError(attribute.name, value, f"an integer >= {minimum}")
        if value < minimum:
            raise InvalidParameterError(attribute.name, value, f"must be an integer >= {minimum}")
        if value > MAX_DIMENSION:  # 10**400 ended in an OverflowError in the FLOP counts
            raise InvalidParameterError(attribute.name, value,
                                        f"must be at most {MAX_DIMENSION:,} (2**31 - 1)")
    return check


def _bool(instance, attribute, value):
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterTypeError(attribute.name, value, "True or False")


def _norm_kind(instance, attribute, value):
    if value not in ("rmsnorm", "layernorm"):
        raise InvalidParameterError(attribute.name, value, "must be 'rmsnorm' or 'layernorm'")


@attrs.frozen
class TransformerConfig:
    """The shape of a transformer and the batch one GPU trains it on.

    Parameters
    ----------
    layers : int
        Transformer blocks [-].
    hidden : int
        Model width d [-].
    heads : int
        Attention (query) heads; must divide ``hidden`` unless ``head_dim`` is given [-].
    ffn : int
        Feed-forward inner width [-].
    vocab : int
        Vocabulary size [tokens].
    kv_heads : int or None
        Key/value heads (grouped-query attention); must divide ``heads``. None: equal to
        ``heads`` [-].
    head_dim : int or None
        Width of one attention head. None: ``hidden / heads``. Models whose
        ``heads x head_dim`` is not the width (Gemma-7B: 16 x 256 = 4096 on a width of
        3072; Mistral-NeMo, Qwen3-4B) give it: the query and output projections are then
        ``hidden x heads * head_dim``, the key and value ones ``hidden x kv_heads *
        head_dim`` [-].
    seq : int
        Sequence length [tokens].
    micro_batch : int
        Sequences per GPU per step [samples].
    dtype : str
        Compute dtype of the matrix multiplies (``"bf16"``, ``"fp32"``, ...) [-].
    tied_embeddings : bool
        The output projection shares the input embedding matrix [-].
    gated_ffn : bool
        Gated feed-forward (SwiGLU: gate, up, down, 3 matrices) or plain (up, down) [-].
    norm : str
        ``"rmsnorm"`` (a weight) or ``"layernorm"`` (weight and bias) [-].
    bias : bool
        Linear layers have biases (GPT-2, BERT) [-].
    prenorm : bool
        Norm before attention / MLP (Llama, GPT-2) or after (BERT) [-].
    learned_positions : int
        Rows of a learned position-embedding table; 0 for rotary embeddings [-].
    token_types : int
        Rows of a token-type (segment) embedding table (BERT: 2) [-].
    embedding_norm : bool
        A norm after the embeddings (BERT) [-].
    final_norm : bool
        A norm after the last block (Llama, GPT-2) [-].
    head_transform : bool
        A dense layer + norm before the output projection (BERT's MLM head) [-].
    head_bias : bool
        The output projection has a bias (BERT's MLM decoder) [-].
    dropout : bool
        The blocks apply dropout (GPT-2 and BERT, p = 0.1): its masks are stored for
        backward (:mod:`scalemodel.checkpointing`). Llama-style models have none [-].
    name : str
        A label [-].

    Raises
    ------
    InvalidParameterError
        A size < 1 or above 2**31 - 1, more than 100,000 layers, heads not dividing
        hidden (without ``head_dim``), kv_heads not dividing heads, an unknown norm; the
        message names the parameter and the value.
    ParameterTypeError
        A size that is not an integer, a flag that is not a bool.
    """

    layers: int = attrs.field(validator=_int_ge(1))
    hidden: int = attrs.field(validator=_int_ge(1))
    heads: int = attrs.field(validator=_int_ge(1))
    ffn: int = attrs.field(validator=_int_ge(1))
    vocab: int = attrs.field(validator=_int_ge(1))
    kv_heads: int | None = attrs.field(default=None)
    seq: int = attrs.field(default=4096, validator=_int_ge(1))
    micro_batch: int = attrs.field(default=1, validator=_int_ge(1))
    dtype: str = attrs.field(default="bf16", converter=canonical_dtype)
    tied_embeddings: bool = attrs.field(default=False, validator=_bool)
    gated_ffn: bool = attrs.field(default=True, validator=_bool)
    norm: str = attrs.field(default="rmsnorm", validator=_norm_kind)
    bias: bool = attrs.field(default=False, validator=_bool)
    prenorm: bool = attrs.field(default=True, validator=_bool)
    learned_positions: int = attrs.field(default=0, validator=_int_ge(0))
    token_types: int = attrs.field(default=0, validator=_int_ge(0))
    embedding_norm: bool = attrs.field(default=False, validator=_bool)
    final_norm: bool = attrs.field(default=True, validator=_bool)
    head_transform: bool = attrs.field(default=False, validator=_bool)
    head_bias: bool = attrs.field(default=False, validator=_bool)
    dropout: bool = attrs.field(default=False, validator=_bool)
    name: str = ""
    head_dim: int | None = attrs.field(default=None)

    def __attrs_post_init__(self):
        if self.layers > MAX_LAYERS:
            raise InvalidParameterError("layers", self.layers, f"must be at most {MAX_LAYERS:,}",
                                        "Each block is listed tensor by tensor")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        _int_ge(1)(self, attrs.fields(TransformerConfig).kv_heads, self.kv_heads)
        if self.head_dim is not None:  # given: any width (heads x head_dim != hidden)
            _int_ge(1)(self, attrs.fields(TransformerConfig).head_dim, self.head_dim)
        elif self.hidden % self.heads:
            valid = _divisors(self.hidden)
            shown = ", ".join(map(str, valid[:24])) + (", ..." if len(valid) > 24 else "")
            raise InvalidParameterError("heads", self.heads,
                                        f"must divide hidden={self.hidden} (valid: {shown})",
                                        "The head dimension is hidden / heads; give "
                                        "head_dim= for a model whose heads are not")
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.heads % self.kv_heads:
            raise InvalidParameterError("kv_heads", self.kv_heads,
                                        f"must divide heads={self.heads}",
                                        "Grouped-query attention shares each key/value head "
                                        "among heads / kv_heads query heads")

    @classmethod
    def from_hf_config(cls, config: dict, *, seq: int = 4096, micro_batch: int = 1,
                       dtype: str = "bf16", name: str = "") -> "TransformerConfig":
        """A config from a Hugging Face ``config.json`` dict of any common family.

        Llama / Mistral / Qwen2 / Gemma (``hidden_size``, ``num_hidden_layers``,
        ``num_attention_heads``, ``intermediate_size``, ``vocab_size``, optionally
        ``num_key_value_heads``, ``tie_word_embeddings``), GPT-2 (``n_embd``, ``n_layer``,
        ``n_head``, ``n_inner``, ``n_positions``), GPT-NeoX, Falcon, BERT and MosaicML's
        MPT (``d_model``, ``n_layers``, ``n_heads``, ``expansion_ratio``); the family
        comes from ``model_type`` or the key names. See :mod:`scalemodel.hf_configs` for
        what each family implies and what it cannot express (said in a
        :class:`~scalemodel.ModelWarning`).

        Parameters
        ----------
        config : dict
            The parsed ``config.json`` [-].
        seq : int
            Sequence length [tokens].
        micro_batch : int
            Sequences per GPU per step [samples].
        dtype : str
            Compute dtype [-].
        name : str
            A label; default the config's ``_name_or_path`` [-].

        Examples
        --------
        >>> from scalemodel.workloads import TransformerConfig
        >>> gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        ...         "n_positions": 1024, "vocab_size": 50257}
        >>> TransformerConfig.from_hf_config(gpt2, seq=1024).parameter_count
        124439808
        """
        from .hf_configs import config_kwargs

        kw = config_kwargs(config)
        try:
            return cls(seq=seq, micro_batch=micro_batch, dtype=dtype,
                       name=name or str(config.get("_name_or_path", "")), **kw)
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise _as_config_key(exc, config, kw) from None

    @property
    def tokens(self) -> int:
        """Tokens per GPU per step, micro_batch x seq [tokens]."""
        return self.micro_batch * self.seq

    @property
    def parameter_count(self) -> int:
        """Parameters, exactly [-]."""
        return _parameter_count(self)

    @property
    def block_parameter_count(self) -> int:
        """Parameters of one transformer block [-]."""
        return int(sum(math.prod(t[1]) for t in _tensors(self) if t[3] == 0))


# --------------------------------------------------------------------------- tensors

@functools.lru_cache(maxsize=64)
def _parameter_count(cfg: TransformerConfig) -> int:
    return int(sum(math.prod(t[1]) for t in _tensors(cfg)))


@functools.lru_cache(maxsize=64)
def _tensors(cfg: TransformerConfig):
    """Parameter tensors in forward order: (name, shape, kind, unit) with unit -1 for the
    embeddings, 0..layers-1 for the blocks and ``layers`` for the head. ``kind`` is
    ``"matmul"`` (a weight of a matrix multiply), ``"embedding"`` or ``"vector"``. Cached:
    configurations are frozen, and the solvers ask for the counts on every call."""
    return tuple(_tensor_list(cfg))


def _tensor_list(cfg: TransformerConfig):
    h, kvd, f = cfg.hidden, cfg.kv_heads * cfg.head_dim, cfg.ffn
    qd = cfg.heads * cfg.head_dim  # the attention width (hidden unless head_dim says)
    out = [("embed.weight", (cfg.vocab, h), "embedding", -1)]
    if cfg.learned_positions:
        out.append(("embed.position", (cfg.learned_positions, h), "embedding", -1))
    if cfg.token_types:
        out.append(("embed.token_type", (cfg.token_types, h), "embedding", -1))

    def norm(prefix, unit):
        items = [(f"{prefix}.weight", (h,), "vector", unit)]
        if cfg.norm == "layernorm":
            items.append((f"{prefix}.bias", (h,), "vector", unit))
        return items

    def linear(prefix, n_in, n_out, unit):
        items = [(f"{prefix}.weight", (n_out, n_in), "matmul", unit)]
        if cfg.bias:
            items.append((f"{prefix}.bias", (n_out,), "vector", unit))
        return items

    if cfg.embedding_norm:
        out += norm("embed.norm", -1)
    for i in range(cfg.layers):
        p = f"layers.{i}"
        attn = (linear(f"{p}.attn.q", h, qd, i) + linear(f"{p}.attn.k", h, kvd, i)
                + linear(f"{p}.attn.v", h, kvd, i) + linear(f"{p}.attn.o", qd, h, i))
        mlp = (linear(f"{p}.mlp.gate", h, f, i) if cfg.gated_ffn else []) \
            + linear(f"{p}.mlp.up", h, f, i) + linear(f"{p}.mlp.down", f, h, i)
        if cfg.prenorm:
            out += norm(f"{p}.attn_norm", i) + attn + norm(f"{p}.mlp_norm", i) + mlp
        else:
            out += attn + norm(f"{p}.attn_norm", i) + mlp + norm(f"{p}.mlp_norm", i)
    head = cfg.layers
    if cfg.final_norm:
        out += norm("final_norm", head)
    if cfg.head_transform:
        out += [("head.transform.weight", (h, h), "matmul", head),
                ("head.transform.bias", (h,), "vector", head)] + norm("head.norm", head)
    if not cfg.tied_embeddings:
        out.append(("lm_head.weight", (cfg.vocab, h), "matmul", head))
    if cfg.head_bias:
        out.append(("lm_head.bias", (cfg.vocab,), "vector", head))
    return out


@attrs.frozen(eq=False)
class TensorFlops:
    """Parameter tensors of a transformer and their model FLOPs, in forward order.

    Attributes
    ----------
    names : tuple of str
        Tensor names.
    shapes : tuple of tuple of int
        Shapes (a linear weight is ``(out, in)``).
    numel : numpy.ndarray
        Elements per tensor [-].
    unit : numpy.ndarray
        -1 for the embeddings, ``i`` for block ``i``, ``layers`` for the head [-].
    forward_flops : numpy.ndarray
        Forward FLOPs charged to each tensor [FLOP]. Each layer's attention core is
        charged to its value projection, a tied output projection to the first tensor of
        the head.
    backward_flops : numpy.ndarray
        Backward FLOPs charged to each tensor, twice the forward [FLOP].
    """

    names: tuple
    shapes: tuple
    numel: np.ndarray
    unit: np.ndarray
    forward_flops: np.ndarray
    backward_flops: np.ndarray

    @property
    def forward(self) -> float:
        """Forward FLOPs of one step [FLOP]."""
        return float(self.forward_flops.sum())

    @property
    def backward(self) -> float:
        """Backward FLOPs of one step [FLOP]."""
        return float(self.backward_flops.sum())


def tensor_flops(config: TransformerConfig) -> TensorFlops:
    """Model FLOPs of every parameter tensor for one step of ``config``.

    Parameters
    ----------
    config : TransformerConfig
        The model and its batch [-].

    Returns
    -------
    TensorFlops
        Names, shapes, element counts, units, forward and backward FLOPs, forward order.

    Notes
    -----
    With :math:`T = b s` tokens, a weight of shape :math:`(o, i)` costs :math:`2Toi`
    FLOPs forward; each layer's attention core :math:`4 b s^2 d_{attn}` with
    :math:`d_{attn} = \\text{heads} \\cdot d_{head}`; the output projection (tied or not)
    :math:`2 T d V`. Backward is twice forward (gradients of the inputs and of the
    weights). Norms, biases, activations and embedding look-ups are not counted.
    """
    if not isinstance(config, TransformerConfig):
        raise ParameterTypeError("config", config, "a TransformerConfig")
    tensors = _tensors(config)
    T = config.tokens
    names = tuple(t[0] for t in tensors)
    shapes = tuple(t[1] for t in tensors)
    numel = np.array([math.prod(s) for s in shapes], dtype=float)
    unit = np.array([t[3] for t in tensors], dtype=int)
    fwd = np.array([2.0 * T * n if t[2] == "matmul" else 0.0 for t, n in zip(tensors, numel)])
    attn = 4.0 * config.micro_batch * config.seq ** 2 * config.heads * config.head_dim
    index = {n: i for i, n in enumerate(names)}
    for i in range(config.layers):
        fwd[index[f"layers.{i}.attn.v.weight"]] += attn
    if config.tied_embeddings:
        head = np.flatnonzero(unit == config.layers)
        target = int(head[0]) if head.size else int(np.flatnonzero(unit == config.layers - 1)[-1])
        fwd[target] += 2.0 * T * config.hidden * config.vocab
    return TensorFlops(names=names, shapes=shapes, numel=numel, unit=unit,
                       forward_flops=fwd, backward_flops=2.0 * fwd)


SCORE_PASS_BYTES = {"forward": (4, 5), "backward": (6, 5)}
r"""Bytes moved per attention-score element (each of the :math:`a s^2 b` entries of a
layer's :math:`QK^T`) by the element-wise passes over the score matrix that flash
attention fuses away, as ``(without dropout, added by dropout)``, 16-bit scores and a
1-byte dropout mask: forward, a fused scale-mask-softmax (Megatron-LM's
``FusedScaleMaskSoftmax``: read the scores, write the probabilities, 2 + 2) and, with
dropout, its mask and output (read 2, write 1 + 2); backward, the softmax's gradient
(read the incoming gradient and the probabilities, write the gradient: 2 + 2 + 2) and
the dropout's (read 2 and the mask 1, write 2). Each pass reads its inputs and writes its
outputs once, at the GPU's HBM bandwidth: the fewest bytes these passes can move, so
the term is a lower bound for eager implementations that scale, mask and soften in
separate kernels (:func:`attention_score_seconds`). The matrix multiplies that make and
consume the scores (:math:`QK^T`, :math:`PV`) are model FLOPs, charged at the
efficiency like the others [bytes]."""


def attention_score_seconds(config: TransformerConfig, gpu) -> tuple:
    r"""Time of one micro-batch's element-wise passes over the attention scores without
    flash attention, per layer: ``(forward, backward)`` [s].

    Parameters
    ----------
    config : TransformerConfig
        The model and its batch [-].
    gpu : str or GPUSpec
        The GPU, whose HBM bandwidth moves the bytes [-].

    Returns
    -------
    tuple of float
        :math:`k\,a s^2 b / B_\text{HBM}` with :math:`k` the forward and backward bytes
        per score element of :data:`SCORE_PASS_BYTES` (dropout's added when
        ``config.dropout``) [s].

    Examples
    --------
    >>> from scalemodel.workloads import TransformerConfig, attention_score_seconds
    >>> gpt = TransformerConfig(layers=24, hidden=2304, heads=24, ffn=9216, vocab=51200,
    ...                         seq=2048, micro_batch=16, dropout=True)
    >>> f, b = attention_score_seconds(gpt, "a100-80gb")
    >>> round(f * 1e3, 2), round(b * 1e3, 2)  # per layer [ms]
    (7.11, 8.69)
    """
    if not isinstance(config, TransformerConfig):
        raise ParameterTypeError("config", config, "a TransformerConfig")
    bw = get_gpu(gpu).hbm_bandwidth
    elements = float(config.micro_batch) * config.heads * float(config.seq) ** 2
    d = 1 if config.dropout else 0
    return tuple(elements * (base + d * drop) / bw
                 for base, drop in (SCORE_PASS_BYTES["forward"], SCORE_PASS_BYTES["backward"]))


# --------------------------------------------------------------------------- efficiency

@attrs.frozen(eq=False)
class EfficiencyMeasurement:
    """Model FLOPs utilisation measured from scalemodel's measured H100 profiles.

    Attributes
    ----------
    dtype : str
        Compute dtype the measurement is for.
    efficiency : float
        Pooled MFU: model FLOPs of all profiles over peak x their measured forward +
        backward time [-].
    profiles : tuple of str
        The measured profiles used.
    per_profile : numpy.ndarray
        MFU of each profile, forward + backward [-].
    forward : numpy.ndarray
        Forward MFU of each profile [-].
    backward : numpy.ndarray
        Backward MFU of each profile [-].
    unit_ready_deviation : numpy.ndarray
        Per profile, the largest difference between the FLOP-derived and the measured
        fraction of backward at which each transformer block's gradients are all ready
        (max over blocks) [-].
    time_deviation : numpy.ndarray
        Per profile, FLOP-derived forward + backward time with the pooled efficiency over
        the measured one, minus 1 [-].
    gpu : str
        The GPU the profiles were measured on.
    """

    dtype: str
    efficiency: float
    profiles: tuple
    per_profile: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    unit_ready_deviation: np.ndarray
    time_deviation: np.ndarray
    gpu: str


def _bert(layers, hidden, heads, ffn, batch, seq):
    return TransformerConfig(layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=30522,
                             seq=seq, micro_batch=batch, dtype="fp32", tied_embeddings=True,
                             gated_ffn=False, norm="layernorm", bias=True, prenorm=False,
                             learned_positions=512, token_types=2, embedding_norm=True,
                             final_norm=False, head_transform=True, head_bias=True,
                             dropout=True)


def _gpt2(batch, seq):
    return TransformerConfig(layers=12, hidden=768, heads=12, ffn=3072, vocab=50257, seq=seq,
                             micro_batch=batch, dtype="fp32", tied_embeddings=True,
                             gated_ffn=False, norm="layernorm", bias=True,
                             learned_positions=1024, dropout=True)


MEASURED_CONFIGS = {
    "bert-base-h100": lambda: _bert(12, 768, 12, 3072, 64, 64),
    "bert-large-h100": lambda: _bert(24, 1024, 16, 4096, 8, 64),
    "gpt2-h100": lambda: _gpt2(4, 1024),
}
"""The shapes of the measured H100 profiles (calibration/transformer_models.py): BERT with
its MLM head over all tokens (``BertForMaskedLM``), GPT-2 small; batch x sequence as
recorded. The ``-bf16`` profiles have the same shapes."""

_BLOCK_RE = re.compile(r"\.(?:layer|h)\.(\d+)\.")
_EFF_CACHE: dict = {}


def _measured_dtype(profile) -> str:
    prov = profile.provenance
    if prov.get("autocast") == "bf16":
        return "bf16"
    if prov.get("autocast") is None and prov.get("tf32_matmul") is False:
        return "fp32"
    raise ScalemodelError(f"{profile.name}: cannot tell its compute dtype from provenance")


def measured_efficiency(dtype="bf16") -> EfficiencyMeasurement:
    """MFU measured from the built-in H100 profiles for one compute dtype.

    For each measured profile (``bert-base-h100``, ``bert-large-h100``, ``gpt2-h100`` and
    their ``-bf16`` twins) the model FLOPs of its shape (``MEASURED_CONFIGS``,
    ``tensor_flops``) are set against its measured forward + backward time on one
    NVIDIA H100 80GB HBM3: ``fp32`` runs had TF32 matmul off (peak 67 TFLOP/s), ``bf16``
    runs used bf16 autocast (peak 989.5 TFLOP/s). ``fp16`` uses the bf16 measurement
    (same tensor-core rate).

    Parameters
    ----------
    dtype : str
        ``"bf16"``, ``"fp16"`` or ``"fp32"`` [-].

    Returns
    -------
    EfficiencyMeasurement
        The pooled efficiency and, per profile, its MFU and how far the FLOP-derived
        timeline is from the measured one.

    Raises
    ------
    InvalidParameterError
        No measured profile for this dtype (tf32, fp8, fp64): pass ``efficiency=``.
    """
    name = canonical_dtype(dtype)
    source = "bf16" if name in ("bf16", "fp16") else name
    if source not in ("bf16", "fp32"):
        raise InvalidParameterError("dtype", dtype, "scalemodel has no measured profile "
                                    "computing in this dtype, so no measured efficiency",
                                    "Pass efficiency= (model FLOPs utilisation, 0 to 1)")
    if source in _EFF_CACHE:
        return _EFF_CACHE[source]
    gpu = get_gpu("h100-sxm")
    peak = gpu.peak(source)
    rows = []
    for base, make in MEASURED_CONFIGS.items():
        prof = load_builtin(base if source == "fp32" else f"{base}-bf16")
        if _measured_dtype(prof) != source:
            raise ScalemodelError(f"{prof.name} does not compute in {source}")
        cfg = make()
        fl = tensor_flops(attrs.evolve(cfg, dtype=source))
        rows.append((prof, cfg, fl))
    flops = np.array([fl.forward + fl.backward for _, _, fl in rows])
    times = np.array([p.forward_time + p.backward_time for p, _, _ in rows])
    pooled = float(flops.sum() / (peak * times.sum()))
    fwd = np.array([fl.forward / (peak * p.forward_time) for p, _, fl in rows])
    bwd = np.array([fl.backward / (peak * p.backward_time) for p, _, fl in rows])
    dev = np.array([_unit_ready_deviation(p, cfg, fl) for p, cfg, fl in rows])
    result = EfficiencyMeasurement(
        dtype=source, efficiency=pooled, profiles=tuple(p.name for p, _, _ in rows),
        per_profile=flops / (peak * times), forward=fwd, backward=bwd,
        unit_ready_deviation=dev, time_deviation=flops / (peak * pooled) / times - 1.0,
        gpu=gpu.name)
    _EFF_CACHE[source] = result
    return result


def _unit_ready_deviation(profile, cfg, fl) -> float:
    """Largest |derived - measured| fraction of backward at which a block is complete."""
    measured = np.zeros(cfg.layers)
    for n, r in zip(profile.tensor_names, profile.tensor_ready):
        m = _BLOCK_RE.search(n)
        if m:
            i = int(m.group(1))
            measured[i] = max(measured[i], r / profile.backward_time)
    order = np.arange(len(fl.names))[::-1]
    ready = np.cumsum(fl.backward_flops[order]) / fl.backward
    unit = fl.unit[order]
    derived = np.array([ready[unit == i].max() for i in range(cfg.layers)])
    return float(np.max(np.abs(derived - measured)))


def _resolve_efficiency(efficiency, dtype, gpu="h100-sxm"):
    """``(efficiency, provenance)``: the one given, else the default for the GPU and dtype
    (published for bf16/fp16, :func:`scalemodel.efficiency.default_efficiency`; measured
    for fp32, :func:`measured_efficiency`). The provenance starts ``"given: "``,
    ``"published: "`` or ``"measured: "`` followed by the value."""
    if efficiency is None:
        dt = canonical_dtype(dtype)
        if dt in SIXTEEN_BIT:
            d = default_efficiency(gpu, dt)
            return d.value, d.text
        if dt == "fp32":
            m = measured_efficiency(dt)
            return m.efficiency, (
                f"measured: {m.efficiency:.4f}, pooled model-FLOPs utilisation of "
                f"{', '.join(m.profiles)} ({m.dtype}) on one NVIDIA H100 "
                "(scalemodel.workloads.measured_efficiency)")
        raise InvalidParameterError("dtype", dtype, "scalemodel has no default efficiency "
                                    "for this compute dtype (published defaults are for bf16 "
                                    "and fp16, the measured one for fp32)",
                                    "Pass efficiency= (model FLOPs utilisation, 0 to 1)")
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float, np.floating)):
        raise ParameterTypeError("efficiency", efficiency, "a number in (0, 1]")
    e = _float_or_inf(efficiency)
    if not (math.isfinite(e) and 0 < e <= 1):
        raise InvalidParameterError("efficiency", efficiency, "must be in (0, 1]",
                                    "It is the fraction of the GPU's peak FLOP/s reached")
    return e, f"given: {e!r}"


# --------------------------------------------------------------------------- profiles

def _grad_dtype(config, grad_dtype):
    if grad_dtype is None:
        return "bf16" if DTYPE_BYTES[config.dtype] == 2 else "fp32"
    name = canonical_dtype(grad_dtype, "grad_dtype")
    if name == "tf32":
        name = "fp32"
    return name


def _check_config(config):
    if not isinstance(config, TransformerConfig):
        raise ParameterTypeError("config", config, "a TransformerConfig")
    return config


def _timing(config, gpu, efficiency, dtype):
    config = _check_config(config)
    gpu = get_gpu(gpu)
    dt = config.dtype if dtype is None else canonical_dtype(dtype)
    if dt != config.dtype:
        config = attrs.evolve(config, dtype=dt)
    peak = gpu.peak(dt)
    eff, how = _resolve_efficiency(efficiency, dt, gpu)
    return config, gpu, tensor_flops(config), peak * eff, eff, how


@attrs.frozen(eq=False)
class TransformerUnits:
    """Per unit of FSDP / ZeRO-3 wrapping, forward order: the embeddings, each block,
    the head.

    Attributes
    ----------
    names : tuple of str
        ``"embedding"``, ``"layers.0"`` ... ``"layers.{L-1}"``, ``"head"``.
    kind : tuple of str
        ``"embedding"``, ``"block"`` or ``"head"``. FSDP's transformer auto-wrap policy
        wraps each block; the embeddings and the head stay in the root unit.
    param_count : numpy.ndarray
        Parameters per unit [-]. With tied embeddings the shared matrix is counted once,
        in the embedding unit.
    param_bytes : numpy.ndarray
        Parameter bytes per unit at ``param_dtype`` [bytes].
    forward_flops, backward_flops : numpy.ndarray
        Model FLOPs per unit [FLOP].
    forward_time, backward_time : numpy.ndarray
        Compute time per unit, FLOPs / (peak x efficiency) [s]; they add up to the
        profile's forward_time and backward_time.
    efficiency : float
        The efficiency used [-].
    """

    names: tuple
    kind: tuple
    param_count: np.ndarray
    param_bytes: np.ndarray
    forward_flops: np.ndarray
    backward_flops: np.ndarray
    forward_time: np.ndarray
    backward_time: np.ndarray
    efficiency: float


def transformer_units(config: TransformerConfig, gpu="h100-sxm", *, efficiency=None,
                      dtype=None, param_dtype=None) -> TransformerUnits:
    """Parameter bytes, forward and backward time of each wrapping unit, forward order.

    Parameters
    ----------
    config : TransformerConfig
        The model and its batch [-].
    gpu : str or GPUSpec
        GPU name or spec (:func:`~scalemodel.get_gpu`) [-].
    efficiency : float or None
        Model FLOPs utilisation in (0, 1]; None: the GPU's published default in bf16 and
        fp16 (:func:`scalemodel.efficiency.default_efficiency`), :func:`measured_efficiency`
        in fp32 [-].
    dtype : str or None
        Compute dtype; None: ``config.dtype`` [-].
    param_dtype : str or None
        Dtype of the parameters as communicated (all-gathered); None: 16-bit for a 16-bit
        compute dtype, else fp32 [-].

    Returns
    -------
    TransformerUnits
        Arrays of length ``layers + 2``.
    """
    config, gpu, fl, rate, eff, _ = _timing(config, gpu, efficiency, dtype)
    pbytes = DTYPE_BYTES[_grad_dtype(config, param_dtype)]
    L = config.layers
    idx = fl.unit + 1  # 0 embedding, 1..L blocks, L+1 head
    count = np.bincount(idx, weights=fl.numel, minlength=L + 2)
    f = np.bincount(idx, weights=fl.forward_flops, minlength=L + 2)
    b = np.bincount(idx, weights=fl.backward_flops, minlength=L + 2)
    return TransformerUnits(
        names=("embedding",) + tuple(f"layers.{i}" for i in range(L)) + ("head",),
        kind=("embedding",) + ("block",) * L + ("head",),
        param_count=count, param_bytes=count * pbytes, forward_flops=f, backward_flops=b,
        forward_time=f / rate, backward_time=b / rate, efficiency=eff)


def _reduction_for(gpu: GPUSpec) -> ReductionCost:
    """Element-wise sum cost: the H100's measured a += b slope (0.99 ps/byte, in the
    measured H100 profiles) scaled by HBM bandwidth to the other GPUs."""
    h100 = load_builtin("gpt2-h100-bf16").reduction.gamma
    ref = get_gpu("h100-sxm").hbm_bandwidth
    return ReductionCost(gamma=h100 * ref / gpu.hbm_bandwidth, latency=0.0)


def transformer_profile(config: TransformerConfig, gpu="h100-sxm", *, efficiency=None,
                        dtype=None, grad_dtype=None, update_time=None, name=None,
                        grad_accum=1, flash_attention=True):
    """A workload profile for training ``config`` on one ``gpu``, derived from FLOPs.

    Parameters
    ----------
    config : TransformerConfig
        The model and its batch [-].
    gpu : str or GPUSpec
        GPU name or spec (:func:`~scalemodel.get_gpu`) [-].
    efficiency : float or None
        Model FLOPs utilisation in (0, 1], applied to forward and backward; None: the
        GPU's published default in bf16 and fp16
        (:func:`scalemodel.efficiency.default_efficiency`; ``provenance["efficiency"]``
        says which), :func:`measured_efficiency` in fp32 [-].
    dtype : str or None
        Compute dtype; None: ``config.dtype``. The GPU must support it [-].
    grad_dtype : str or None
        Dtype of the gradients as communicated; None: 16-bit (the compute dtype) when
        computing in 16 bits, else fp32 [-].
    update_time : float or None
        Optimizer step [s]; None: a memory-bound Adam estimate,
        ``ADAM_UPDATE_BYTES_PER_PARAM`` x parameters / HBM bandwidth [s].
    name : str or None
        Profile name; None: ``config.name`` or ``"transformer"`` [-].
    grad_accum : int
        Micro-batches of ``config.micro_batch`` sequences per optimizer step (gradient
        accumulation; see :class:`~scalemodel.WorkloadProfile`) [-].
    flash_attention : bool
        The attention is a fused kernel that never writes the score matrix (flash
        attention, PyTorch's SDPA, Transformer Engine). False: each layer also moves its
        :math:`a s^2 b` scores through memory in element-wise passes
        (:func:`~scalemodel.workloads.attention_score_seconds`), time added to its forward and backward at the
        GPU's HBM bandwidth, not scaled by the efficiency; ``provenance["attention_scores"]``
        records it (Megatron-LM before flash attention: Narayanan et al. 2021) [-].

    Returns
    -------
    WorkloadProfile
        Gradients in backward order (output projection first, embeddings last), ready
        times proportional to the backward FLOPs done so far (and the score passes of
        each layer, charged where its attention core is), shapes, and provenance.

    Raises
    ------
    InvalidParameterError
        The GPU lacks the dtype, the efficiency is outside (0, 1], or it is None for a
        dtype without a default (tf32, fp8, fp64); a forward and backward pass longer than
        a day (names the efficiency, or the config's ``seq`` and ``micro_batch``).
    """
    config, gpu, fl, rate, eff, how = _timing(config, gpu, efficiency, dtype)
    if not isinstance(flash_attention, (bool, np.bool_)):
        raise ParameterTypeError("flash_attention", flash_attention, "True or False")
    if efficiency is not None and not (fl.forward + fl.backward) / rate <= MAX_TIME:
        raise InvalidParameterError(  # the profile would refuse it, naming forward_time
            "efficiency", efficiency, f"makes a forward + backward of "
            f"{(fl.forward + fl.backward) / rate:.4g} s on {gpu.name}, longer than a day "
            f"({MAX_TIME:g} s); it is the fraction of the GPU's peak FLOP/s reached (0.4 "
            "is 40 %)")
    if not (fl.forward + fl.backward) / rate <= MAX_TIME:  # the default efficiency: the size
        raise InvalidParameterError(
            "config", f"seq={config.seq}, micro_batch={config.micro_batch}", "makes a forward "
            f"+ backward of {(fl.forward + fl.backward) / rate:.4g} s on {gpu.name} at the "
            f"default efficiency {eff:g}, longer than a day ({MAX_TIME:g} s): the sequence "
            "length (tokens) or the micro-batch (sequences per GPU) is too large")
    gd = _grad_dtype(config, grad_dtype)
    order = np.arange(len(fl.names))[::-1]
    fwd_s, bwd_s, scores = _score_passes(config, gpu, fl, bool(flash_attention))
    ready = (np.cumsum(fl.backward_flops[order]) / rate if scores is None
             else np.cumsum(fl.backward_flops[order] / rate + bwd_s[order]))
    n_params = float(fl.numel.sum())
    if update_time is None:
        upd = ADAM_UPDATE_BYTES_PER_PARAM * n_params / gpu.hbm_bandwidth
        upd_how = (f"estimate: {ADAM_UPDATE_BYTES_PER_PARAM} B/param (mixed-precision Adam) "
                   f"/ {gpu.hbm_bandwidth / 1e12:g} TB/s HBM ({gpu.name} datasheet)")
    else:
        if isinstance(update_time, bool) or not isinstance(update_time, (int, float)) \
                or not (math.isfinite(_float_or_inf(update_time)) and update_time >= 0):
            raise InvalidParameterError("update_time", update_time, "must be finite and >= 0 [s]")
        if not (fl.forward + fl.backward) / rate + update_time <= MAX_TIME:
            raise InvalidParameterError(  # the profile would refuse it, naming forward_time
                "update_time", update_time, f"makes forward + backward + update longer "
                f"than a day ({MAX_TIME:g} s)")
        upd, upd_how = float(update_time), "given"
    label = name or config.name or "transformer"
    eff_how = how
    extra = {} if scores is None else {"attention_scores": scores}
    return WorkloadProfile(
        name=label, tensor_bytes=fl.numel[order] * DTYPE_BYTES[gd], tensor_ready=ready,
        forward_time=fl.forward / rate + fwd_s,
        backward_time=fl.backward / rate + (scores or {}).get("backward_time", 0.0),
        update_time=upd,
        reduction=_reduction_for(gpu), batch_size=config.micro_batch,
        tensor_names=tuple(fl.names[i] for i in order),
        tensor_shapes=tuple(fl.shapes[i] for i in order),
        description=(f"{label}: {config.parameter_count / 1e9:.3g}B parameters, "
                     f"{config.micro_batch} x {config.seq} tokens, {config.dtype} on "
                     f"{gpu.name}, FLOP-derived"),
        device=gpu.full_name or gpu.name, framework="FLOP-derived (scalemodel.workloads)",
        precision=gd,
        provenance={"source": "FLOP-derived from a transformer config by "
                              "scalemodel.workloads.transformer_profile",
                    "config": attrs.asdict(config), "gpu": gpu.name,
                    "peak_flops": gpu.peak(config.dtype), "efficiency": eff_how,
                    "update_time": upd_how,
                    "derivation": "matmul 2*T*in*out forward, attention 4*b*s^2*d forward "
                                  "per layer, backward 2x forward; time = FLOPs / (peak x "
                                  "efficiency); ready = cumulative backward FLOPs in reverse "
                                  "forward order", **extra}).with_grad_accum(grad_accum)


def _score_passes(config, gpu, fl, flash_attention):
    """Without flash attention, the score passes (:func:`attention_score_seconds`): their
    forward time for the whole model, their backward time per tensor (each layer's on its
    value projection, where :func:`tensor_flops` charges the attention core) and the
    provenance record; with it, zeros and None [s]."""
    per_tensor = np.zeros(len(fl.names))
    if flash_attention:
        return 0.0, per_tensor, None
    f, b = attention_score_seconds(config, gpu)
    index = {n: i for i, n in enumerate(fl.names)}
    for i in range(config.layers):
        per_tensor[index[f"layers.{i}.attn.v.weight"]] = b
    d = 1 if config.dropout else 0
    record = {"forward_time": f * config.layers, "backward_time": b * config.layers,
              "bytes_per_score": [SCORE_PASS_BYTES[k][0] + d * SCORE_PASS_BYTES[k][1]
                                  for k in ("forward", "backward")],
              "derivation": "no flash attention: element-wise passes over the a*s^2*b "
                            "scores of every layer at the HBM bandwidth "
                            "(scalemodel.workloads.SCORE_PASS_BYTES), not scaled by the "
                            "efficiency"}
    return f * config.layers, per_tensor, record


# --------------------------------------------------------------------------- built-in LLMs

_LLM: dict = {}


def _llm_data():
    if "data" not in _LLM:
        import json
        from importlib import resources
        text = resources.files("scalemodel").joinpath("data", "llm_configs.json").read_text()
        _LLM["data"] = json.loads(text)
    return _LLM["data"]


def llm_names() -> list[str]:
    """Names of the built-in LLM workloads (``llama-2-7b``, ..., ``mistral-7b``)."""
    return sorted(_llm_data()["models"])


def _llm_key(name):
    data = _llm_data()
    key = str(name).strip().lower()
    return data["aliases"].get(key, key)


def llm_config(name, *, seq=None, micro_batch=None, dtype=None) -> TransformerConfig:
    """The configuration of a built-in LLM, from its published ``config.json``.

    Parameters
    ----------
    name : str
        A name from ``llm_names()`` (or an alias such as ``"llama2-7b"``) [-].
    seq : int or None
        Sequence length; None: 4096 [tokens].
    micro_batch : int or None
        Sequences per GPU per step; None: 1 [samples].
    dtype : str or None
        Compute dtype; None: ``"bf16"`` [-].

    Raises
    ------
    UnknownNameError
        Not a built-in LLM; suggests the closest.
    """
    from .exceptions import UnknownNameError

    data = _llm_data()
    key = _llm_key(name)
    if key not in data["models"]:
        raise UnknownNameError("model", name, data["models"], aliases=data["aliases"])
    d = data["defaults"]
    return TransformerConfig(**data["models"][key]["config"], name=key,
                             seq=d["seq"] if seq is None else seq,
                             micro_batch=d["micro_batch"] if micro_batch is None else micro_batch,
                             dtype=d["dtype"] if dtype is None else dtype)


def llm_profile(name, gpu=None, *, efficiency=None):
    """The built-in workload profile of an LLM: :func:`transformer_profile` of
    :func:`llm_config` at the documented defaults (4096 tokens, micro-batch 1, bf16, on
    an H100 SXM) with the GPU's published default efficiency (the same default as a
    configuration of your own: :func:`scalemodel.efficiency.default_efficiency`; 0.41185
    on the H100 SXM, ``PUBLISHED_LLM_EFFICIENCY``).

    Parameters
    ----------
    name : str
        A name from ``llm_names()`` [-].
    gpu : str, GPUSpec or None
        GPU; None: ``"h100-sxm"`` [-].
    efficiency : float or None
        Model FLOPs utilisation; None: the GPU's published default [-].
    """
    data = _llm_data()
    cfg = llm_config(name)
    entry = data["models"][cfg.name]
    prof = transformer_profile(cfg, data["defaults"]["gpu"] if gpu is None else gpu,
                               efficiency=efficiency, name=cfg.name)
    prof.provenance["config_source"] = entry["source"]
    prof.provenance["paper"] = entry["paper"]
    return prof


# ------------------------------------------------------------- pipeline stages

def stage_parts(cfg):
    """Parameters and times of a config's embedding, blocks and head (with the final
    norm): ``{"params": (e, b, h), "forward": (e, b, h), "backward": (e, b, h),
    "tied_copy": c}`` (``c`` the word embeddings a tied model's last stage copies), from
    :func:`transformer_units` at one efficiency (only the ratios are used)
    [-, s, s]. None for a config that has no units (a synthetic one without its
    vocabulary or MLP width).

    Parameters
    ----------
    cfg : TransformerConfig or dict
        The model, or a profile's ``provenance["config"]`` [-].
    """
    if isinstance(cfg, dict):
        try:
            cfg = _config_of_record(tuple(sorted((k, type(v), v) for k, v in cfg.items())))
        except (TypeError, ValueError):  # no units to split (a synthetic config)
            return None
    return _stage_parts(cfg)


@functools.lru_cache(maxsize=64)
def _config_of_record(items):
    return TransformerConfig(**{k: v for k, _, v in items})


@functools.lru_cache(maxsize=64)
def _stage_parts(cfg):
    u = transformer_units(cfg, "h100-sxm", efficiency=1.0)
    kind = np.array(u.kind)
    out = {}
    for key, values in (("params", u.param_count), ("forward", u.forward_time),
                        ("backward", u.backward_time)):
        values = np.asarray(values, float)
        blocks = float(values[kind == "block"].sum())
        emb = float(values[kind == "embedding"].sum())
        out[key] = (emb, blocks, float(values.sum()) - blocks - emb)
    # the word embeddings a tied model's last stage keeps for its output layer
    out["tied_copy"] = float(cfg.vocab) * float(cfg.hidden) if cfg.tied_embeddings else 0.0
    return out


def end_stage_params(parts, pp):
    """``(first, heaviest)``: the first stage's share of a model's parameters (the
    embedding and :math:`L/p` layers) and the larger of it and the last stage's
    (:math:`L/p` layers, the head, and with tied embeddings the copy of the word
    embeddings it keeps for its output layer) [-].

    Parameters
    ----------
    parts : dict
        :func:`stage_parts` of the model [-].
    pp : int
        Pipeline stages [stages].
    """
    e, blocks, h = parts["params"]
    copy = parts["tied_copy"]
    total = e + blocks + h
    first = (e + blocks / pp) / total
    return first, max(first, (blocks / pp + h + copy) / total)
