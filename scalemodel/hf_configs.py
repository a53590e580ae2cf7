r"""Reading Hugging Face ``config.json`` files of the common transformer families.

:meth:`TransformerConfig.from_hf_config <scalemodel.TransformerConfig.from_hf_config>`
maps the key names each family uses onto one :class:`~scalemodel.TransformerConfig`.
The family comes from ``model_type`` when the file has it, else from the key names
(``n_embd`` is GPT-2's, ``hidden_size`` the Llama family's). What each family's
architecture implies (norm kind, biases, gated feed-forward, tied output projection,
learned positions) is taken from its modelling code in ``transformers``:

==========================  ============================  =========  ======  ======  =================  =========
family                      key names                     norm       biases  gated   output projection  positions
==========================  ============================  =========  ======  ======  =================  =========
llama, mistral, phi3        ``hidden_size`` and the like  RMS        no      yes     as configured      rotary
qwen2, qwen3                ``hidden_size`` and the like  RMS        no      yes     as configured      rotary
gemma, gemma2, gemma3_text  ``hidden_size`` and the like  RMS        no      yes     tied               rotary
gpt2                        ``n_embd``, ``n_layer``       Layer      yes     no      tied               learned
gpt_neox                    ``hidden_size`` and the like  Layer      yes     no      as configured      rotary
falcon                      ``hidden_size``, ``n_head``   Layer      config  no      tied               rotary
mpt                         ``d_model``, ``n_layers``     config     config  config  as configured      config
bert                        ``hidden_size`` and the like  Layer      yes     no      tied, transformed  learned
==========================  ============================  =========  ======  ======  =================  =========

MosaicML's MPT (``MPTConfig`` of ``llm-foundry``, ``llmfoundry/models/mpt/configuration_mpt.py``,
whose defaults apply to a key the file leaves out): the feed-forward is
``expansion_ratio x d_model`` wide (default 4), gated for ``ffn_config.ffn_type`` =
``"mptglu"``; biases unless ``no_bias``; RMS norm for a ``norm_type`` naming rmsnorm, else
layer norm; a learned position table of ``max_seq_len`` rows unless ``learned_pos_emb`` is
false or ``attn_config`` turns on ALiBi or rotary embeddings (``MPTConfig`` then turns
the table off); ``kv_n_heads`` key-value heads for grouped-query attention, one for
multi-query; the output projection tied unless ``tie_word_embeddings`` is false. Layer
norms without their bias (``no_bias`` with a layer norm) count the bias here and say so.

Dropout (``TransformerConfig.dropout``, whose masks activation memory counts) is on when
any of the family's block dropout probabilities is above 0: ``resid_pdrop`` /
``attn_pdrop`` (GPT-2, default 0.1), ``hidden_dropout_prob`` /
``attention_probs_dropout_prob`` (BERT, 0.1), ``hidden_dropout`` / ``attention_dropout``
(GPT-NeoX, Falcon, 0), ``attention_dropout`` (the Llama family, 0), ``resid_pdrop`` /
``attn_config.attn_pdrop`` (MPT, 0).

Qwen (1) (``model_type`` ``"qwen"``, read as Llama-like) builds its gated feed-forward
``intermediate_size // 2`` wide (``QWenMLP``); Falcon-40B's original file (``model_type``
``"RefinedWeb"`` with ``n_head_kv``) is the new decoder architecture (two norms per block,
``n_head_kv`` key-value groups).

A ``head_dim`` whose heads are not ``hidden / heads`` wide (Gemma-7B: 16 heads of 256 on
a width of 3072; Mistral-NeMo, Qwen3-4B) becomes the config's ``head_dim``: the query and
output projections are ``hidden x heads * head_dim``.

Details a family has that the config cannot express are listed in a
:class:`~scalemodel.ModelWarning` (never silently dropped): Qwen2's biases on the
query, key and value projections only (:math:`(h + 2 d_{kv})` parameters per layer
missing), Qwen3's and Gemma-3's RMS norms of the queries and keys (:math:`2 d_{head}`
per layer), Gemma-2's and Gemma-3's norms before and after the feed-forward's output
(:math:`2h` per layer) and their sliding-window layers (attention core counted over the
whole sequence), Falcon's parallel block with one norm (counted as two: :math:`2h` extra
per layer). Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` hold the same parameters as
Llama's separate projections.

Checked against published parameter counts in ``tests/test_hf_configs.py``: GPT-2
124,439,808 (torchvision-style exact count of the released model), Pythia-160M (GPT-NeoX)
162,322,944 (Biderman et al., 2023, Table 1), Falcon-7B 6,921,720,704 (its model card's
count; ours counts one extra norm per block, 290,816 parameters, and says so), and
MPT-1B to MPT-70B as LLM Foundry's pretraining YAMLs write them, against the parameter
counts of its benchmark tables (``benchmarks/data/published_sharded.csv``); and, with
``head_dim`` or a family's own details, against the counts the released weights'
safetensors metadata give (the Hugging Face Hub's ``safetensors.total``, the same figures
as Keras-Hub's preset metadata): Gemma-7B 8,537,680,896, Mistral-NeMo-12B 12,247,782,400,
Phi-3-mini 3,821,079,552, and, less what the warning names, Qwen3-8B 8,190,735,360,
Qwen3-4B 4,022,468,096 and Gemma-2-9B 9,241,705,984.
"""

from __future__ import annotations

import math
import warnings

from .exceptions import InvalidParameterError, ModelWarning, ParameterTypeError

__all__ = ["FAMILIES", "family_of", "config_kwargs", "is_hf_config", "load_hf_profile"]

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text",
            "gpt2", "gpt_neox", "falcon", "bert", "mpt")
"""Families :meth:`~scalemodel.TransformerConfig.from_hf_config` maps [-]."""

_LLAMA_LIKE = {"llama", "mistral", "mixtral_dense", "qwen2", "qwen3", "phi3", "gemma",
               "gemma2", "gemma3_text", "qwen", "yi", "internlm2"}
_OWN_NAME = {"qwen3", "gemma", "gemma2", "gemma3_text"}
"""Llama-like families whose details differ from Llama's (read under their own name)."""


def family_of(config: dict) -> str:
    """The family of a parsed ``config.json``: its ``model_type`` when known, else
    guessed from the key names [-].

    Parameters
    ----------
    config : dict
        The parsed file [-].
    """
    kind = str(config.get("model_type", "")).lower().replace("-", "_")
    if kind in _LLAMA_LIKE:
        if kind in _OWN_NAME:
            return kind
        return "qwen2" if kind.startswith("qwen") else "llama"
    if kind in ("gpt2", "gpt_neox", "falcon", "bert", "mpt"):
        return kind
    if kind in ("refinedweb", "refinedwebmodel", "rw"):
        return "falcon"
    if kind:
        raise InvalidParameterError(
            "config.model_type", config.get("model_type"), "is not a family scalemodel "
            "maps", f"Known: {', '.join(FAMILIES)}; a dense decoder-only or encoder-only "
            "model of another family can be described by a TransformerConfig by hand "
            "(encoder-decoder and mixture-of-experts models are not modelled)")
    if "n_embd" in config:
        return "gpt2"
    if "d_model" in config and "n_layers" in config:
        return "mpt"
    if "hidden_size" in config:
        return "llama"
    raise InvalidParameterError("config", "<no model_type, hidden_size or n_embd>",
                                "is not a transformer config.json this reader knows",
                                f"Known families: {', '.join(FAMILIES)}")


def _get(config, *keys, default=KeyError):
    for k in keys:
        if config.get(k) is not None:
            return _whole(k, config[k])
    if default is KeyError:
        raise InvalidParameterError("config", f"<missing {keys[0]!r}>",
                                    f"config.json must have {' or '.join(map(repr, keys))}")
    return default


def _whole_width(width) -> bool:
    """Whether ``width`` (a product of config values) is a whole number of at most
    :data:`~scalemodel.workloads.MAX_DIMENSION` (no float overflow on 10**400) [-]."""
    from .workloads import MAX_DIMENSION

    try:
        width = float(width)
    except OverflowError:
        return False
    return width <= MAX_DIMENSION and width.is_integer()


def _whole(key, value):
    """``value`` of ``config.<key>`` when it is a JSON integer (the family's arithmetic,
    ``4 * hidden`` or ``hidden // heads``, runs before TransformerConfig checks it); any
    other type refused by name [-]."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ParameterTypeError(f"config.{key}", value, "an integer (a JSON number "
                                 "without a decimal point)")
    return value


def _flag(config, key, default):
    """A true/false key of the config; anything else (the text "false", 0, 1) refused by
    name rather than read by its truth value; absent or null: ``default`` [-]."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ParameterTypeError(f"config.{key}", value, "true or false (a JSON boolean)")
    return value


_DROPOUT_KEYS = {  # the block's dropout probabilities of each family, and their defaults
    "gpt2": (("resid_pdrop", "attn_pdrop"), 0.1),
    "bert": (("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.1),
    "gpt_neox": (("hidden_dropout", "attention_dropout"), 0.0),
    "falcon": (("hidden_dropout", "attention_dropout"), 0.0),
    "mpt": (("resid_pdrop",), 0.0),
}
_LLAMA_DROPOUT = (("attention_dropout",), 0.0)


def _dropout(config, family) -> bool:
    """Whether the blocks apply dropout: any of the family's probabilities above 0
    (absent: the family's default in ``transformers``); a value that is not a number in
    [0, 1] refused by name [-]."""
    keys, default = _DROPOUT_KEYS.get(family, _LLAMA_DROPOUT)
    on = False
    for key in keys:
        p = config.get(key, default)
        p = default if p is None else p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise InvalidParameterError(f"config.{key}", p, "a dropout probability in [0, 1]")
        on = on or p > 0
    return on


def _head_dim(config, hidden, heads):
    """The config's ``head_dim`` when its heads are not ``hidden / heads`` wide (Gemma-7B,
    Mistral-NeMo, Qwen3-4B), else None (TransformerConfig's default) [-]."""
    hd = _whole("head_dim", config.get("head_dim"))
    if hd is None or (heads and hd * heads == hidden):
        return None
    return hd


def _llama_like_unmapped(config, family, kw):
    """What a Llama-like family has that TransformerConfig cannot express."""
    heads = kw["heads"]
    hd = kw.get("head_dim") or (kw["hidden"] // heads if heads else 0)
    kv = kw["kv_heads"] or heads
    out = []
    if family == "qwen2" and not kw["bias"]:
        out.append(f"biases of the query, key and value projections "
                   f"(+{(heads + 2 * kv) * hd} parameters per block)")
    if family in ("gemma2", "gemma3_text"):
        out.append(f"the norms before and after the feed-forward's output "
                   f"(+{2 * kw['hidden']} parameters per block)")
    if family in ("qwen3", "gemma3_text"):
        out.append(f"the RMS norms of the queries and keys (+{2 * hd} parameters per "
                   "block)")
    window = config.get("sliding_window")
    if window is not None and family in ("gemma2", "gemma3_text"):
        out.append(f"sliding-window attention (window {window}) on "
                   "some layers: their attention core is counted over the whole causal "
                   "sequence")
    elif window is not None and config.get("use_sliding_window") is not False:
        out.append(f"sliding-window attention (window {window}): the attention core "
                   "is counted over the whole causal sequence (more than the window's "
                   "at sequences longer than it)")
    return out


def _mpt_attn(config) -> dict:
    """MPT's ``attn_config`` (absent: MPTConfig's defaults, an empty mapping here)."""
    attn = config.get("attn_config")
    if attn is None:
        return {}
    if not isinstance(attn, dict):
        raise ParameterTypeError("config.attn_config", attn, "a mapping (MPT's attention "
                                 "settings)")
    return attn


def _mpt_attn_dropout(config) -> bool:
    p = _mpt_attn(config).get("attn_pdrop", 0.0)
    p = 0.0 if p is None else p
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise InvalidParameterError("config.attn_config.attn_pdrop", p,
                                    "a dropout probability in [0, 1]")
    return p > 0


def _mpt_kwargs(config, unmapped) -> dict:
    """MPT's keys (module docstring), defaults as ``MPTConfig`` has them; a
    mixture-of-experts feed-forward refused by name."""
    hidden = _get(config, "d_model")
    if not _whole_width(hidden):  # refused here, before expansion_ratio multiplies it
        raise InvalidParameterError("config.d_model", hidden, "must be a whole width of at "
                                    "most 2**31 - 1")
    heads = _get(config, "n_heads")
    attn = _mpt_attn(config)
    ffn_cfg = config.get("ffn_config") or {}
    if not isinstance(ffn_cfg, dict):
        raise ParameterTypeError("config.ffn_config", ffn_cfg, "a mapping (MPT's "
                                 "feed-forward settings)")
    kind = ffn_cfg.get("ffn_type", "mptmlp")
    if kind not in ("mptmlp", "mptglu", "te_ln_mlp"):
        raise InvalidParameterError("config.ffn_config.ffn_type", kind, "is not a dense "
                                    "feed-forward scalemodel maps (mixture-of-experts "
                                    "layers are not modelled)",
                                    "Known: mptmlp, mptglu, te_ln_mlp")
    ratio = config.get("expansion_ratio", 4)
    ratio = 4 if ratio is None else ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
            or not 0 < ratio or not _whole_width(ratio * hidden):
        raise InvalidParameterError("config.expansion_ratio", ratio, f"times d_model="
                                    f"{hidden} must be a whole, positive width")
    ffn = _whole("ffn_config.ffn_hidden_size", ffn_cfg.get("ffn_hidden_size")) \
        or int(ratio * hidden)
    kind_attn = attn.get("attn_type", "multihead_attention")
    kv = {"multihead_attention": None, "multiquery_attention": 1}.get(kind_attn, -1)
    if kv == -1:
        if kind_attn != "grouped_query_attention":
            raise InvalidParameterError("config.attn_config.attn_type", kind_attn,
                                        "is not an attention scalemodel maps",
                                        "Known: multihead_attention, multiquery_attention, "
                                        "grouped_query_attention")
        kv = _whole("attn_config.kv_n_heads", attn.get("kv_n_heads"))
    no_bias = _flag(config, "no_bias", False)
    norm = "rmsnorm" if "rms" in str(config.get("norm_type", "low_precision_layernorm")
                                     ).lower() else "layernorm"
    inner = {f"attn_config.{k}": attn.get(k) for k in ("alibi", "rope", "qk_ln")}
    positional = _flag(config, "learned_pos_emb", True) \
        and not _flag(inner, "attn_config.alibi", False) \
        and not _flag(inner, "attn_config.rope", False)
    if norm == "layernorm" and no_bias:
        unmapped.append(f"layer norms without their bias (no_bias), counted with it "
                        f"(+{hidden} parameters per norm)")
    if _flag(inner, "attn_config.qk_ln", False):
        unmapped.append("query and key layer norms (qk_ln)")
    return dict(layers=_get(config, "n_layers"), hidden=hidden, heads=heads, ffn=ffn,
                vocab=_get(config, "vocab_size"), kv_heads=kv,
                gated_ffn=kind == "mptglu", norm=norm, bias=not no_bias,
                learned_positions=_get(config, "max_seq_len", default=2048)
                if positional else 0,
                tied_embeddings=_flag(config, "tie_word_embeddings", True))


def config_kwargs(config: dict) -> dict:
    """Keyword arguments of :class:`~scalemodel.TransformerConfig` (without
    ``seq``, ``micro_batch``, ``dtype``, ``name``) from a parsed ``config.json`` [-].

    Warns (:class:`~scalemodel.ModelWarning`) with every detail of the family
    that the config cannot express.

    Parameters
    ----------
    config : dict
        The parsed file [-].
    """
    if not isinstance(config, dict):
        raise ParameterTypeError("config", config, "a dict parsed from config.json")
    family = family_of(config)
    unmapped = []
    if family == "gpt2":
        hidden = _get(config, "n_embd", "hidden_size")
        kw = dict(layers=_get(config, "n_layer", "num_hidden_layers"), hidden=hidden,
                  heads=_get(config, "n_head", "num_attention_heads"),
                  ffn=_get(config, "n_inner", default=None) or 4 * hidden,
                  vocab=_get(config, "vocab_size"), gated_ffn=False, norm="layernorm",
                  bias=True, learned_positions=_get(config, "n_positions",
                                                    "max_position_embeddings"),
                  tied_embeddings=_flag(config, "tie_word_embeddings", True))
    elif family == "bert":
        kw = dict(layers=_get(config, "num_hidden_layers"), hidden=_get(config, "hidden_size"),
                  heads=_get(config, "num_attention_heads"),
                  ffn=_get(config, "intermediate_size"), vocab=_get(config, "vocab_size"),
                  gated_ffn=False, norm="layernorm", bias=True, prenorm=False,
                  learned_positions=_get(config, "max_position_embeddings"),
                  token_types=_get(config, "type_vocab_size", default=2),
                  embedding_norm=True, final_norm=False, head_transform=True,
                  head_bias=True, tied_embeddings=True)
    elif family == "gpt_neox":
        kw = dict(layers=_get(config, "num_hidden_layers"), hidden=_get(config, "hidden_size"),
                  heads=_get(config, "num_attention_heads"),
                  ffn=_get(config, "intermediate_size"), vocab=_get(config, "vocab_size"),
                  gated_ffn=False, norm="layernorm", bias=True,
                  tied_embeddings=_flag(config, "tie_word_embeddings", False))
    elif family == "falcon":
        hidden = _get(config, "hidden_size", "n_embed")
        heads = _get(config, "num_attention_heads", "n_head")
        # Falcon-40B's original file (model_type "RefinedWeb") has n_head_kv and no
        # new_decoder_architecture: its code is the new architecture (two norms, kv groups)
        old_40b = str(config.get("model_type", "")).lower() == "refinedweb" and (
            config.get("n_head_kv") is not None or config.get("num_kv_heads") is not None)
        new_arch = _flag(config, "new_decoder_architecture", old_40b)
        if new_arch:
            kv = _get(config, "num_kv_heads", "n_head_kv", default=heads)
        else:
            kv = 1 if _flag(config, "multi_query", True) else heads
        kw = dict(layers=_get(config, "num_hidden_layers", "n_layer"), hidden=hidden,
                  heads=heads, kv_heads=kv,
                  ffn=_get(config, "ffn_hidden_size", default=None) or 4 * hidden,
                  vocab=_get(config, "vocab_size"), gated_ffn=False, norm="layernorm",
                  bias=_flag(config, "bias", False),
                  tied_embeddings=_flag(config, "tie_word_embeddings", True))
        if _flag(config, "parallel_attn", True) and not new_arch:
            unmapped.append(f"parallel_attn: one norm per block, counted as two "
                            f"(+{2 * hidden} parameters per block)")
    elif family == "mpt":
        kw = _mpt_kwargs(config, unmapped)
    else:  # llama, mistral, phi3, qwen2, qwen3, gemma, gemma2, gemma3_text
        hidden = _get(config, "hidden_size")
        heads = _get(config, "num_attention_heads")
        ffn = _get(config, "intermediate_size")
        if str(config.get("model_type", "")).lower() == "qwen" and _whole_width(ffn):
            ffn = ffn // 2  # Qwen (1)'s QWenMLP: intermediate_size // 2 wide
        bias = _flag(config, "attention_bias", False)
        kw = dict(layers=_get(config, "num_hidden_layers"), hidden=hidden, heads=heads,
                  ffn=ffn, vocab=_get(config, "vocab_size"),
                  kv_heads=_whole("num_key_value_heads", config.get("num_key_value_heads")),
                  tied_embeddings=_flag(config, "tie_word_embeddings",
                                        family.startswith("gemma")),
                  bias=bias)
        if _flag(config, "mlp_bias", False) != bias and _whole_width(ffn) \
                and _whole_width(hidden):
            per = (2 * ffn if kw.get("gated_ffn", True) else ffn) + hidden
            unmapped.append(f"attention_bias={str(bias).lower()} with mlp_bias="
                            f"{str(not bias).lower()}: the feed-forward's biases are "
                            + (f"counted though it has none ({per} parameters per block too many)"
                               if bias else f"left out (+{per} parameters per block)"))
    head_dim = _head_dim(config, kw["hidden"], kw["heads"])
    if head_dim is not None:
        kw["head_dim"] = head_dim
    if family not in ("gpt2", "bert", "gpt_neox", "falcon", "mpt") and kw["heads"] > 0:
        unmapped += _llama_like_unmapped(config, family, kw)  # (heads < 1: refused by name)
    kw["dropout"] = _dropout(config, family) or (
        family == "mpt" and _mpt_attn_dropout(config))
    for key in ("num_experts", "num_local_experts", "moe_num_experts"):
        if config.get(key):
            raise InvalidParameterError(f"config.{key}", config[key], "mixture-of-experts "
                                        "layers are not modelled")
    if unmapped:
        warnings.warn(ModelWarning(f"config.json ({family}): not expressible, left out: "
                                   + "; ".join(unmapped)), stacklevel=3)
    return kw


def is_hf_config(data) -> bool:
    """Whether parsed JSON ``data`` looks like a Hugging Face ``config.json`` (not a
    scalemodel profile) [-].

    Parameters
    ----------
    data : object
        Parsed JSON [-].
    """
    return (isinstance(data, dict) and "format" not in data
            and any(k in data for k in ("model_type", "hidden_size", "n_embd", "d_model")))


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
"""Keys of a config's context length, first found first: Llama-style and most others,
GPT-2's, MPT's, ChatGLM's and Qwen (1)'s."""


def _context_length(data, with_key=False):
    """The config's context length, the default ``seq``: the first of
    :data:`CONTEXT_KEYS` it has (an integer >= 1, refused by name otherwise: NaN, text,
    2048.5; 0, which some configs write for "not set", is read as absent), else 4096
    [tokens]; with ``with_key``, ``(length, key or None)``."""
    from .workloads import MAX_DIMENSION

    for key in CONTEXT_KEYS:
        value = data.get(key)
        if value is None or value == 0:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 1 <= value <= MAX_DIMENSION:  # 10**12 was refused as seq=, unwritten
            raise InvalidParameterError(f"config.{key}", value, f"must be an integer in "
                                        f"[1, {MAX_DIMENSION:,}] (the default sequence "
                                        "length)", "Or give the sequence length: seq=")
        return (value, key) if with_key else value
    return (4096, None) if with_key else 4096


def load_hf_profile(path, *, seq=None, micro_batch=None, gpu=None, dtype=None,
                    flash_attention=True):
    """A workload profile, derived from FLOPs, for a Hugging Face ``config.json`` file.

    Parameters
    ----------
    path : str or os.PathLike
        The ``config.json`` file [path].
    seq : int or None
        Sequence length; None: the config's context length (the first of
        :data:`CONTEXT_KEYS` it has), else 4096 [tokens].
    micro_batch : int or None
        Sequences per GPU per step; None: 1 [samples].
    gpu : str or None
        GPU the profile is timed on; None: ``"h100-sxm"`` [-].
    dtype : str or None
        Compute dtype; None: ``"bf16"`` [-].
    flash_attention : bool
        False: the attention writes its scores to memory (eq. score-passes of the guide;
        :func:`~scalemodel.transformer_profile`) [-].

    Returns
    -------
    WorkloadProfile
        As :func:`~scalemodel.transformer_profile` makes it, named after the file.
    """
    from pathlib import Path

    from ._jsonfile import read_json_file
    from .workloads import TransformerConfig, transformer_profile

    data = read_json_file(path, what="config.json")
    if not is_hf_config(data):
        raise InvalidParameterError("model", str(path), "is neither a scalemodel workload "
                                    "profile nor a Hugging Face config.json")
    if seq is None:
        seq = _context_length(data)
    label = data.get("_name_or_path")  # a label only when it is text (a file's can be anything)
    label = label.strip() if isinstance(label, str) else ""
    cfg = TransformerConfig.from_hf_config(data, seq=seq, micro_batch=micro_batch or 1,
                                           dtype=dtype or "bf16",
                                           name=label or Path(path).stem)
    return transformer_profile(cfg, gpu or "h100-sxm", flash_attention=flash_attention)
