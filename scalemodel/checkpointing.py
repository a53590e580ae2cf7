r"""Activation checkpointing: activation memory and recompute time per layer.

Three policies, each applied to the transformer blocks (``layers.<i>``) only:

``"none"``
    Every activation the backward pass needs is kept.
``"selective"``
    The cheap, memory-heavy parts of each layer are recomputed in its backward pass.
    Without flash attention this is Korthikanti et al.'s selective recompute (the
    attention core: :math:`QK^T`, softmax, its dropout and the product with :math:`V`).
    With flash attention (the default; that term is already gone) it is torchtitan's
    op-level policy: the outputs of the layer's matrix multiplies and of the attention
    kernel are saved, *except every second matrix multiply* of the layer (counted in
    execution order), and everything else -- the element-wise, normalization and
    activation-function outputs -- is recomputed (``pytorch/torchtitan``,
    ``_apply_op_sac``: ``_save_list`` = {``aten.mm``, the SDPA kernels,
    ``reduce_scatter_tensor``}; "Saves output of all compute ops, except every second
    mm"; the counter restarts for every layer).
``"full"``
    Only each layer's input is kept; the whole layer is recomputed in backward. A
    fraction ``f`` of the layers (a number in [0, 1] instead of a name) checkpoints the
    first :math:`\mathrm{round}(f L)` layers and keeps the others whole (Megatron-LM's
    ``--recompute-method block``).
``"full-early-stop"``
    ``"full"`` as PyTorch's non-reentrant checkpoint runs it
    (``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, early stopping on
    by default: ``set_checkpoint_early_stop``; torchtitan, FSDP's ``checkpoint_wrapper``
    with ``NO_REENTRANT``). The recompute stops once every tensor the layer's backward
    needs exists again, and the layer's last matrix multiply (the feed-forward's down
    projection) saves only its input: its output, the residual sum, is never needed, so
    its product is not recomputed (unless dropout follows it, whose mask is): 8/12 of
    an MPT block's forward products are recomputed. An H200's kernel profile
    (``calibration/results/h200/blocks``) measures 0.56 to 0.92 of them, and 0.94 to
    1.38 with ``set_checkpoint_early_stop(False)`` (count: 1).
    Megatron-LM's and DeepSpeed's checkpointing and PyTorch's reentrant one replay the
    whole layer (``"full"``).

Memory per layer (Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models", MLSys 2023, arXiv:2205.05198, Sec. 4.1 and 5, no tensor or
sequence parallelism, 16-bit activations; ``s`` sequence, ``b`` micro-batch, ``h``
width, ``a`` heads). Their :math:`34\,sbh + 5as^2b` is the count, tensor by tensor, of
what a GPT layer (LayerNorm, a plain :math:`4h` feed-forward with GeLU, dropout) keeps
for backward. The same count for the layer the config describes
(:func:`activation_units`; :math:`\rho` the key/value heads over the heads, :math:`f`
the feed-forward width, :math:`\delta` = 1 with dropout, else 0) is

.. math::
   :label: layer-activations

   \underbrace{4}_{\text{norm inputs}} + \underbrace{2}_{QKV\ \text{input}}
   + \underbrace{(2 + 4\rho)\,\alpha}_{Q,\,K,\,V} + \underbrace{2\alpha}_{\text{attention out}}
   + \underbrace{2}_{\text{FFN input}}
   + \underbrace{(8\ \text{gated} \mid 4\ \text{plain})\,f/h}_{\text{FFN}}
   + \underbrace{2\delta}_{\text{dropout masks}}
   \quad [sbh] \; + \; (2 + 3\delta)\,as^2b \ \text{without flash attention},

where :math:`\alpha = d_{attn}/h` is the attention width over the model width (1 unless
the config's ``head_dim`` makes :math:`\text{heads} \cdot d_{head} \ne h`, Gemma-7B:
4/3), a plain feed-forward keeps its activation function's input and output (:math:`2f`
each, 16-bit) and a gated one (SwiGLU) the gate, the up projection, the activation of the
gate and the product (:math:`4 \times 2f`); without flash attention the softmax output
(:math:`2as^2b`) and, with dropout, its mask and output (:math:`3as^2b`). For GPT
(:math:`\rho = 1`, :math:`\alpha = 1`, :math:`f = 4h`, plain, dropout) it is Korthikanti et al.'s
:math:`34\,sbh + 5as^2b` exactly; for Llama-style layers (SwiGLU with :math:`f \approx
2.69h`, no dropout) :math:`37.5\,sbh + 2as^2b`: the peaks of a measured H200 run without
checkpointing are then within 0.7 %, with and without flash attention, where GPT's count
was 5 % low and 23 % high (``calibration/results/h200``; :ref:`the measured peaks
<memory-measured>`).
Written :math:`R + S`, the replicated part :math:`R = 8 + 2\delta` (norm, QKV and FFN
inputs, dropout masks) and the part :math:`S` a tensor-parallel group splits, it is
their Table 2 with tensor parallelism (:math:`10 + 24/t` for GPT).

================================= ===========================================================
policy                            bytes per layer
================================= ===========================================================
none, no flash attention          :math:`sbh\,(R + S) + (2 + 3\delta)as^2b` (eq. 1 of the
                                  paper for GPT)
none, flash attention             :math:`sbh\,(R + S)` (the score terms are not stored)
selective, no flash attention     :math:`sbh\,(R + S)` (Sec. 5: the score terms are recomputed)
selective, flash attention        :math:`2sb\,(h + d_{attn} + \sum_{\text{saved mm}} d_{out})`:
                                  the layer's input, the attention output, and the outputs of
                                  the 1st, 3rd, 5th, ... matrix multiply (q, v, gate/up, down
                                  for a SwiGLU layer: ``wq, wv, w1, w2``), capped at the
                                  ``none`` figure
full                              :math:`2\,sbh` (the layer input)
================================= ===========================================================

The matrix multiplies of a layer, in execution order, are q, k, v, o, then gate
(``w1``), up (``w3``), down (``w2``) for a gated feed-forward or up, down for a plain
one (separate q, k and v projections, as in torchtitan's models). While one layer is
recomputed its full (``none``) activations exist for that layer: a ``full`` or
``selective`` step adds that one layer's difference once. The loss adds its backward peak in every
case, by how it is computed (``loss=``, :data:`LOSS_KERNELS`; :func:`loss_bytes`):

``"unfused"`` (the default): :math:`12\,sbV` bytes (:data:`LOSS_BYTES_PER_LOGIT`).
    Korthikanti et al. count the stored fp32 logits, :math:`4sbV`; at the start of
    backward PyTorch's ``cross_entropy`` (``log_softmax`` then ``nll_loss``) holds three
    fp32 tensors of :math:`sbV` elements at once -- the log-softmax output it saved, the
    gradient ``nll_loss`` returns, and the gradient ``log_softmax`` returns -- while every
    layer's activations are still stored, which is when the memory peaks.
``"fused"``: :math:`4\,sbV + 16\,sb` bytes (:data:`FUSED_LOSS_BYTES_PER_LOGIT`,
    :data:`FUSED_LOSS_BYTES_PER_TOKEN`). A fused softmax-cross-entropy kernel that reads
    the 16-bit logits as they are, as flash-attention's ``CrossEntropyLoss`` does
    (``Dao-AILab/flash-attention``, tag v1.0.9, ``flash_attn/losses/cross_entropy.py``
    and ``csrc/xentropy/xentropy_kernel.cu``): its forward allocates only two fp32
    values per row (``losses`` and ``max_log_sum_exp``, ``at::empty_like(labels_,
    ...dtype(ScalarType::Float))``) and saves the logits, the log-sum-exp and the
    labels (``ctx.save_for_backward(logits, lse, labels_local)``); its backward
    allocates the gradient in the logits' own dtype (``Tensor gI = inplace ? logits_ :
    at::empty_like(logits_)``; ``inplace_backward=False`` by default) after making the
    fp32 incoming gradient contiguous (``grad_loss.contiguous()``, one value per row).
    At the peak: the 16-bit logits and their 16-bit gradient, :math:`2 \cdot 2\,sbV`,
    and per token the fp32 log-sum-exp (4), the int64 label (8) and the fp32 incoming
    gradient (4). LLM Foundry's MPT uses it by default (``mosaicml/llm-foundry`` at
    061f2c7, ``llmfoundry/models/mpt/modeling_mpt.py``: ``loss_fn_config =
    om_model_config.get('loss_fn', 'fused_crossentropy')`` ->
    ``FusedCrossEntropyLoss(ignore_index=-100)``, imported from
    ``flash_attn.losses.cross_entropy``; ``setup.py``'s ``gpu`` extra pins
    ``flash-attn==1.0.9`` and its ``xentropy-cuda-lib``), with bf16 logits (the
    unembedding is ``F.linear`` under ``amp_bf16`` autocast). An in-place backward
    (``inplace_backward=True``) would save the gradient's :math:`2sbV`: not modelled.
``"unfused+logits"``: :math:`16\,sbV` bytes at the loss's backward peak, and the fp32
    logits, :math:`4sbV`, through the rest of backward (:data:`HELD_LOGIT_BYTES`).
    PyTorch's ``cross_entropy`` on fp32 logits that the training loop keeps referenced
    while it runs ``loss.backward()``: the three tensors of ``"unfused"`` plus the logits
    themselves. torchtitan at ``83c879f18`` (2024-03) and ``40f8fd007`` (2024-06): the
    model returns ``self.output(h).float()`` (``torchtrain/models/llama/model.py``,
    ``torchtitan/models/llama/model.py``) and ``train.py`` runs ``pred = model(input_ids)``,
    ``loss = loss_fn(pred, labels)``, ``loss.backward()`` with ``pred`` still bound.
    From ``9dec370`` (2024-12) on, the model returns 16-bit logits, the loss upcasts them
    inside ``cross_entropy`` (a temporary the log-softmax does not save) and ``train.py``
    runs ``del pred`` before ``loss.backward()`` ("need to free to before bwd to avoid
    peaking memory"): ``"unfused"``.

The loss's backward runs before any block's backward, so the loss's peak and the
recompute of the first checkpointed block in backward are not alive at the same time:
``activation_bytes(..., phases=True)`` takes the larger of the two moments (the stored
activations with the loss's peak; the stored activations with one recomputed layer and
the logits the loop still holds), ``phases=False`` (the default, kept for the figures the
guide and the solvers' checks print) adds them, an upper bound.

Recompute time per checkpointed layer, as a fraction of the layer's forward time (the
profile's FLOP-proportional split): 1 for ``full``; for ``selective`` without flash
attention the attention core's FLOPs :math:`4bs^2 d_{attn}` over the layer's forward
FLOPs; with flash attention the FLOPs of the recomputed (2nd, 4th, ...) matrix
multiplies over the layer's forward FLOPs. ``selective`` also re-runs memory-bound
element-wise ops, which have no FLOPs in the profile: their bytes
(:func:`elementwise_recompute_bytes`, eager PyTorch, one kernel per op) at the GPU's
datasheet HBM bandwidth are added (``full`` re-runs the whole forward, whose time holds
them already). The recompute of a layer runs on the compute stream at the start of that
layer's backward, before any of its gradients (:func:`with_recompute`).

The bytes of the element-wise ops one selective recompute of a layer re-runs, counted
from the op list torchtitan's policy recomputes in ``calibration/llm_memory.py``'s
Llama-style block (recorded on the H200:
``calibration/results/h200/llm_memory_flash.json``, ``selective_policy_first_block``),
each op reading its inputs and writing its output once, :math:`e` bytes per element
(the activation dtype), :math:`T` tokens:

====================================== =====================================================
policy                                 element reads and writes per layer
====================================== =====================================================
op-level, flash attention              :math:`T\,[2 \cdot 2h` (two RMSNorm / LayerNorm)
                                       :math:`+ 10\,(d_q + d_{kv})` (rotary on Q and K:
                                       mul, neg of a half, cat, mul, add; not with learned
                                       positions) :math:`+ 2 \cdot 3h` (two residual adds)
                                       :math:`+ 5f` (SiLU and the gate's mul; GeLU
                                       :math:`2f`)]
Korthikanti, no flash attention        :math:`b\,a\,s^2` scores: the scale (2), the causal
                                       mask's fill (2, and its 1-byte mask) and the
                                       softmax (2): :math:`(6e + 1)\,b a s^2` bytes (eager
                                       PyTorch's kernels); a profile built with
                                       ``flash_attention=False`` replays its own forward
                                       score passes instead (eq. score-passes of the guide,
                                       ``scalemodel.workloads.SCORE_PASS_BYTES``)
====================================== =====================================================

A compiled model (``torch.compile``) fuses these ops and moves fewer bytes: not
modelled (the time is then an upper end). Measured on one H200 (1.35 B Llama-style,
eager PyTorch 2.11): the selective recompute took 52.0 ms (flash, 8 x 2048 tokens) and
28.9 ms (no flash, 2 x 2048); the matrix multiplies' share gives 31.6 and 7.5 ms, the
element-wise bytes at 4.8 TB/s add 14.6 and 8.7 ms (docs/llm.rst).
"""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, ScalemodelError

__all__ = ["Checkpointing", "CHECKPOINTING_MODES", "resolve_checkpointing",
           "activation_units", "layer_activation_bytes", "activation_bytes",
           "LOSS_BYTES_PER_LOGIT",
           "LOSS_KERNELS", "FUSED_LOSS_BYTES_PER_LOGIT", "FUSED_LOSS_BYTES_PER_TOKEN",
           "canonical_loss", "loss_tensor_bytes", "loss_bytes", "HELD_LOGIT_BYTES",
           "recompute_fraction", "elementwise_recompute_bytes", "with_recompute"]

CHECKPOINTING_MODES = ("none", "selective", "full")
"""The activation checkpointing policies by name (``True`` / ``False`` are aliases of
``"full"`` / ``"none"``; a number in [0, 1] is ``"full"`` on that fraction of layers)."""

ACTIVATION_BYTES = 2
"""Bytes per activation element: 16-bit activations, as Korthikanti et al. assume."""

LOSS_BYTES_PER_LOGIT = 12
"""Bytes per logit (``s b V`` of them) at the loss's backward peak: three fp32 tensors
(the saved log-softmax, its incoming gradient and the gradient it returns)."""

LOSS_KERNELS = ("unfused", "fused", "unfused+logits")
"""How the cross-entropy loss is computed (``loss=``): PyTorch's ``cross_entropy``
(:data:`LOSS_BYTES_PER_LOGIT`), a fused kernel that keeps the 16-bit logits
(flash-attention's ``CrossEntropyLoss``; :data:`FUSED_LOSS_BYTES_PER_LOGIT`), or PyTorch's
``cross_entropy`` on fp32 logits the training loop keeps referenced through backward
(torchtitan before 2024-12; :data:`HELD_LOGIT_BYTES`)."""

HELD_LOGIT_BYTES = {"unfused": 0, "fused": 0, "unfused+logits": 4}
"""Bytes per logit the training loop still holds after the loss's backward, through the
blocks' backward (``"unfused+logits"``: the fp32 logits bound to ``pred``)."""

FUSED_LOSS_BYTES_PER_LOGIT = 2 * ACTIVATION_BYTES
"""Bytes per logit at a fused cross-entropy's backward peak: the 16-bit logits it saved
and the 16-bit gradient it returns (flash-attention v1.0.9, ``xentropy_kernel.cu``:
``at::empty_like(logits_)``)."""

FUSED_LOSS_BYTES_PER_TOKEN = 4 + 8 + 4
"""Bytes per token (``s b`` of them) a fused cross-entropy adds at its backward peak: the
fp32 log-sum-exp and the int64 label it saved, and the fp32 incoming gradient made
contiguous (flash-attention v1.0.9, ``cross_entropy.py``)."""

EARLY_STOP = "full-early-stop"
"""The name of ``"full"`` with PyTorch's early stopping (``Checkpointing("full",
early_stop=True)``)."""

_VALID = ("one of 'none', 'selective', 'full', 'full-early-stop', True (= 'full'), False "
          "(= 'none'), a fraction of layers in [0, 1] to checkpoint fully, or a "
          "Checkpointing")


def _mode(value):
    if not isinstance(value, str) or value.strip().lower() not in CHECKPOINTING_MODES:
        raise InvalidParameterError("activation_checkpointing", value, f"must be {_VALID}")
    return value.strip().lower()


def _fraction(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                         np.floating)) \
            or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidParameterError("fraction", value, "must be a fraction of the layers "
                                    "in [0, 1]")
    return float(value)


@attrs.frozen
class Checkpointing:
    """An activation checkpointing policy.

    Parameters
    ----------
    mode : str
        ``"none"``, ``"selective"`` or ``"full"`` [-].
    fraction : float
        Fraction of the layers checkpointed fully (``"full"`` only; the first
        ``round(fraction * layers)`` layers); 1 for ``"full"``, 0 otherwise by default
        [-].
    flash_attention : bool
        Attention that stores no score matrix; decides what ``"selective"`` recomputes
        (see :mod:`scalemodel.checkpointing`) [-].
    early_stop : bool
        ``"full"`` only: the recompute stops once the layer's backward has what it needs,
        as PyTorch's non-reentrant checkpoint does (``"full-early-stop"``): the layer's
        last matrix multiply is not recomputed [-].

    Raises
    ------
    InvalidParameterError
        A mode outside :data:`CHECKPOINTING_MODES`, a fraction outside [0, 1], a
        fraction below 1 with a mode other than ``"full"``, or ``early_stop`` with a mode
        other than ``"full"``.
    """

    mode: str = attrs.field(default="none", converter=_mode)
    fraction: float = attrs.field(default=None)
    flash_attention: bool = attrs.field(default=True)
    early_stop: bool = attrs.field(default=False)

    def __attrs_post_init__(self):
        f = self.fraction
        if f is None:
            f = 1.0 if self.mode == "full" else 0.0
        f = _fraction(f)
        if self.mode != "full" and f not in (0.0, 1.0):
            raise InvalidParameterError("fraction", f, f"a fraction of layers applies to "
                                        f"'full' checkpointing, not {self.mode!r}")
        if self.mode == "full" and f == 0.0:
            object.__setattr__(self, "mode", "none")
        object.__setattr__(self, "fraction", 1.0 if self.mode == "full" and f == 1.0
                           else (f if self.mode == "full" else 0.0))
        if not isinstance(self.flash_attention, (bool, np.bool_)):
            raise ParameterTypeError("flash_attention", self.flash_attention,
                                     "True or False")
        if not isinstance(self.early_stop, (bool, np.bool_)):
            raise ParameterTypeError("early_stop", self.early_stop, "True or False")
        if self.early_stop and self.mode != "full":
            if f == 0.0 and self.mode == "none":  # full on no layers: nothing to stop
                object.__setattr__(self, "early_stop", False)
            else:
                raise InvalidParameterError(
                    "early_stop", True, f"early stopping shortens 'full' checkpointing's "
                    f"recompute, not {self.mode!r}'s", "Use mode 'full' or early_stop=False")
        object.__setattr__(self, "early_stop", bool(self.early_stop))

    def layers(self, n_layers) -> int:
        """Layers checkpointed out of ``n_layers`` (all for ``"selective"``) [-]."""
        if self.mode == "none":
            return 0
        if self.mode == "selective":
            return int(n_layers)
        return int(round(self.fraction * n_layers))

    def describe(self) -> str:
        """A short label: ``"full"``, ``"full on 50% of layers"``, ``"selective (op-level,
        flash attention)"``."""
        stop = " (early stop)" if self.early_stop else ""
        if self.mode == "full" and self.fraction < 1.0:
            return f"full on {self.fraction:.0%} of layers{stop}"
        if self.mode == "selective":
            return ("selective (torchtitan op-level policy, flash attention)"
                    if self.flash_attention else
                    "selective (Korthikanti: attention core recomputed)")
        return self.mode + stop


def resolve_checkpointing(value, flash_attention=True) -> Checkpointing:
    """A :class:`Checkpointing` from a name, a bool, a fraction or a policy.

    Parameters
    ----------
    value : str, bool, float, Checkpointing or None
        ``"none"``, ``"selective"``, ``"full"``, ``"full-early-stop"``
        (case-insensitive), True (``"full"``),
        False or None (``"none"``), a fraction of layers in [0, 1] checkpointed fully, or
        a :class:`Checkpointing` (passed through) [-].
    flash_attention : bool
        Used unless ``value`` is a :class:`Checkpointing` [-].

    Raises
    ------
    InvalidParameterError
        Anything else; the message lists the valid values.
    """
    if isinstance(value, Checkpointing):
        return value
    if value is None or value is False or (isinstance(value, np.bool_) and not value):
        return _NONE if flash_attention is True else Checkpointing("none", None,
                                                                   flash_attention)
    if value is True or isinstance(value, np.bool_):
        return Checkpointing("full", None, flash_attention)
    if isinstance(value, str):
        if value.strip().lower() == EARLY_STOP:
            return Checkpointing("full", None, flash_attention, early_stop=True)
        return Checkpointing(value, None, flash_attention)
    if isinstance(value, (int, float, np.integer, np.floating)):
        if not 0.0 <= value <= 1.0 or not math.isfinite(value):  # 10**400 fails the range
            raise InvalidParameterError("activation_checkpointing", value, f"must be {_VALID}")
        return Checkpointing("full", float(value), flash_attention)
    raise InvalidParameterError("activation_checkpointing", value, f"must be {_VALID}")


_NONE = Checkpointing("none")


# --------------------------------------------------------------------------- per layer

def _layer_matmuls(cfg):
    """(input width, output width) of each matrix multiply of one layer, execution
    order: q, k, v, o, then gate, up, down (gated) or up, down (plain)."""
    h, d_attn = cfg.hidden, cfg.heads * cfg.head_dim
    d_kv = cfg.kv_heads * cfg.head_dim
    mms = [(h, d_attn), (h, d_kv), (h, d_kv), (d_attn, h)]
    if cfg.gated_ffn:
        mms += [(h, cfg.ffn), (h, cfg.ffn), (cfg.ffn, h)]
    else:
        mms += [(h, cfg.ffn), (cfg.ffn, h)]
    return mms


def activation_units(cfg) -> tuple:
    """The per-layer activation count of eq. :eq:`layer-activations`.

    Parameters
    ----------
    cfg : TransformerConfig
        The model [-].

    Returns
    -------
    tuple of float
        ``(R, S, A)``: bytes per :math:`sbh` kept by every tensor-parallel rank (``R``)
        and split over them (``S``), and bytes per :math:`as^2b` of the attention scores
        without flash attention (``A``) [bytes].
    """
    d = 1.0 if cfg.dropout else 0.0
    rho = cfg.kv_heads / cfg.heads
    attn = cfg.heads * cfg.head_dim / cfg.hidden  # 1 unless heads x head_dim != hidden
    ffn = (8.0 if cfg.gated_ffn else 4.0) * cfg.ffn / cfg.hidden
    return 8.0 + 2.0 * d, (4.0 + 4.0 * rho) * attn + ffn, 2.0 + 3.0 * d


def layer_activation_bytes(cfg, mode, flash_attention=True) -> float:
    """Activation bytes one layer keeps for backward under ``mode``.

    Parameters
    ----------
    cfg : TransformerConfig
        The model and its batch [-].
    mode : str
        ``"none"``, ``"selective"`` or ``"full"`` [-].
    flash_attention : bool
        Attention that stores no score matrix [-].

    Returns
    -------
    float
        Bytes per layer (table of :mod:`scalemodel.checkpointing`) [bytes].
    """
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    sbh = float(s) * b * h
    r, split, score = activation_units(cfg)
    none = sbh * (r + split + (0.0 if flash_attention else score * a * s / h))
    if mode == "none":
        return none
    if mode == "full":
        return ACTIVATION_BYTES * sbh
    if not flash_attention:  # Korthikanti's selective recompute: the score terms go
        return (r + split) * sbh
    saved = cfg.hidden + cfg.heads * cfg.head_dim  # the layer input, the attention output
    saved += sum(out for i, (_, out) in enumerate(_layer_matmuls(cfg)) if i % 2 == 0)
    return min(none, ACTIVATION_BYTES * float(s) * b * saved)


def canonical_loss(loss) -> str:
    """The loss kernel's name, checked: ``"unfused"``, ``"fused"`` or ``"unfused+logits"``
    (:data:`LOSS_KERNELS`).

    Parameters
    ----------
    loss : str
        ``"unfused"`` (PyTorch's ``cross_entropy``), ``"fused"`` (a fused kernel such as
        flash-attention's ``CrossEntropyLoss``) or ``"unfused+logits"`` (``cross_entropy``
        on fp32 logits kept referenced through backward), case-insensitive [-].

    Raises
    ------
    InvalidParameterError
        Anything else; names the value and the valid ones.
    """
    if isinstance(loss, str) and loss.strip().lower() in LOSS_KERNELS:
        return loss.strip().lower()
    raise InvalidParameterError("loss", loss, "must be one of " + ", ".join(
        repr(k) for k in LOSS_KERNELS) + " (PyTorch's cross_entropy, a fused kernel "
        "such as flash-attention's CrossEntropyLoss, or cross_entropy with the fp32 logits "
        "kept through backward)")


def loss_tensor_bytes(seq, micro_batch, vocab, loss="unfused", tp=1) -> tuple:
    """Sizes of the tensors the loss holds at its backward peak, one micro-batch.

    ``"unfused"``: three fp32 tensors of the logits' size; ``"unfused+logits"``: four (the
    fp32 logits besides); ``"fused"``: the 16-bit logits and their 16-bit gradient, then the
    per-token fp32 log-sum-exp, int64 labels and fp32 incoming gradient (module docstring). With tensor parallelism the logits are split
    over the vocabulary (``vocab / tp`` per GPU); the per-token tensors are not.

    Parameters
    ----------
    seq : int
        Sequence length [tokens].
    micro_batch : int
        Sequences per micro-batch [samples].
    vocab : int
        Vocabulary size [tokens].
    loss : str
        ``"unfused"``, ``"fused"`` or ``"unfused+logits"`` (:func:`canonical_loss`) [-].
    tp : int
        Tensor-parallel GPUs over which the logits are split [GPUs].

    Returns
    -------
    tuple of float
        One size per tensor [bytes].
    """
    kind = canonical_loss(loss)
    tokens = float(seq) * float(micro_batch)
    logits = tokens * float(vocab) / tp
    if kind in ("unfused", "unfused+logits"):
        per = LOSS_BYTES_PER_LOGIT // 3
        return (per * logits,) * (3 if kind == "unfused" else 4)
    per = FUSED_LOSS_BYTES_PER_LOGIT // 2
    return (per * logits, per * logits, 4.0 * tokens, 8.0 * tokens, 4.0 * tokens)


def loss_bytes(cfg, loss="unfused", tp=1) -> float:
    """Bytes of the loss at its backward peak for one micro-batch of ``cfg``.

    ``"unfused"``: :math:`12 sbV/t` (:data:`LOSS_BYTES_PER_LOGIT`); ``"unfused+logits"``:
    :math:`16 sbV/t`; ``"fused"``:
    :math:`4 sbV/t + 16 sb` (:data:`FUSED_LOSS_BYTES_PER_LOGIT`,
    :data:`FUSED_LOSS_BYTES_PER_TOKEN`); the sum of :func:`loss_tensor_bytes`.

    Parameters
    ----------
    cfg : TransformerConfig
        The model and its batch (``seq``, ``micro_batch``, ``vocab``) [-].
    loss : str
        ``"unfused"``, ``"fused"`` or ``"unfused+logits"`` [-].
    tp : int
        Tensor-parallel GPUs over which the logits are split [GPUs].

    Returns
    -------
    float
        [bytes]

    Raises
    ------
    InvalidParameterError
        ``loss`` outside :data:`LOSS_KERNELS`.

    Examples
    --------
    >>> import scalemodel
    >>> from scalemodel.checkpointing import loss_bytes
    >>> cfg = scalemodel.llm_config("llama-3-8b")
    >>> round(loss_bytes(cfg) / 2**30, 2), round(loss_bytes(cfg, "fused") / 2**30, 2)
    (5.87, 1.96)
    """
    return float(sum(loss_tensor_bytes(cfg.seq, cfg.micro_batch, cfg.vocab, loss, tp)))


def activation_bytes(cfg, checkpointing, flash_attention=True, loss="unfused",
                     phases=False) -> float:
    """Activation bytes of one micro-batch's step at its peak (the start of backward, or
    the recompute of one layer), with the loss's backward peak (:func:`loss_bytes`).

    ``phases=False`` adds the loss's peak and the recomputed layer (an upper bound);
    ``phases=True`` takes the larger of the two moments of backward: the loss's backward
    (the stored activations and :func:`loss_bytes`), then the first checkpointed block's
    recompute (the stored activations of the checkpointed layers, the recomputed layer's
    and the logits the loop still holds, :data:`HELD_LOGIT_BYTES`; the layers kept whole
    are backward-processed, and freed, before it).

    Parameters
    ----------
    cfg : TransformerConfig
        The model and its batch [-].
    checkpointing : str, bool, float or Checkpointing
        See :func:`resolve_checkpointing` [-].
    flash_attention : bool
        Used unless ``checkpointing`` is a :class:`Checkpointing` [-].
    loss : str
        ``"unfused"`` (PyTorch's ``cross_entropy``, the default), ``"fused"``
        (flash-attention's ``CrossEntropyLoss``) or ``"unfused+logits"``; see
        :data:`LOSS_KERNELS` [-].
    phases : bool
        The larger of the loss's and the recompute's moment instead of their sum [-].

    Returns
    -------
    float
        [bytes]
    """
    ck = resolve_checkpointing(checkpointing, flash_attention)
    fa = ck.flash_attention
    L = cfg.layers
    none = layer_activation_bytes(cfg, "none", fa)
    logits = loss_bytes(cfg, loss)
    k = ck.layers(L)
    if k == 0:
        return none * L + logits
    kept = layer_activation_bytes(cfg, ck.mode, fa)
    if phases:
        held = HELD_LOGIT_BYTES[canonical_loss(loss)] * float(cfg.tokens) * cfg.vocab
        whole = none * (L - k) if ck.mode == "full" else 0.0
        at_loss = kept * k + whole + logits
        extra = none - kept if ck.mode == "selective" else none
        return max(at_loss, kept * k + extra + held)
    if ck.mode == "selective":  # the recomputed part of the one layer in backward
        return kept * L + (none - kept) + logits
    # full: the inputs kept, plus one layer's activations while it is recomputed
    # (Korthikanti et al., Sec. 4.2), or the layers kept whole when they are more
    return kept * k + max(none * (L - k), none) + logits


def _need_config(cfg, what="selective"):
    """Refuse ``what`` (``"selective"``, ``"full-early-stop"``) without a transformer
    config (``cfg`` None)."""
    if cfg is None:
        raise InvalidParameterError(
            "activation_checkpointing", what, f"{what} recompute needs the "
            "transformer's shape (a profile derived from a TransformerConfig)",
            "Use 'full' or 'none' for this profile")


def recompute_fraction(cfg, checkpointing, flash_attention=True) -> float:
    """Recompute time of one checkpointed layer over the layer's forward time.

    Parameters
    ----------
    cfg : TransformerConfig or None
        The model; None (a profile without a config) only for ``"full"`` without early
        stopping and ``"none"`` [-].
    checkpointing : str, bool, float or Checkpointing
        See :func:`resolve_checkpointing` [-].
    flash_attention : bool
        Used unless ``checkpointing`` is a :class:`Checkpointing` [-].

    Returns
    -------
    float
        In [0, 1] [-].

    Raises
    ------
    InvalidParameterError
        ``"selective"`` or ``"full-early-stop"`` without a transformer config.
    """
    ck = resolve_checkpointing(checkpointing, flash_attention)
    if ck.mode == "none":
        return 0.0
    if ck.mode == "full" and not ck.early_stop:
        return 1.0
    _need_config(cfg, EARLY_STOP if ck.mode == "full" else "selective")
    T = float(cfg.tokens)
    mms = _layer_matmuls(cfg)
    matmul = sum(2.0 * T * i * o for i, o in mms)
    core = 4.0 * cfg.micro_batch * float(cfg.seq) ** 2 * cfg.heads * cfg.head_dim
    if ck.mode == "full":  # early stop: the last product unless dropout follows it
        i, o = mms[-1]
        return 1.0 if cfg.dropout else 1.0 - 2.0 * T * i * o / (matmul + core)
    if not ck.flash_attention:
        return core / (matmul + core)
    redo = sum(2.0 * T * i * o for j, (i, o) in enumerate(mms) if j % 2 == 1)
    return redo / (matmul + core)


def elementwise_recompute_bytes(cfg, checkpointing, flash_attention=True) -> float:
    """Bytes the element-wise ops of one layer's recompute read and write (see the
    module's table; eager PyTorch, one kernel per op); 0 but for ``"selective"``.

    Parameters
    ----------
    cfg : TransformerConfig or None
        The model; None only for ``"full"`` and ``"none"`` [-].
    checkpointing : str, bool, float or Checkpointing
        See :func:`resolve_checkpointing` [-].
    flash_attention : bool
        Used unless ``checkpointing`` is a :class:`Checkpointing` [-].

    Returns
    -------
    float
        Per layer and micro-batch [bytes].

    Raises
    ------
    InvalidParameterError
        ``"selective"`` without a transformer config.

    Examples
    --------
    >>> from scalemodel import TransformerConfig
    >>> from scalemodel.checkpointing import elementwise_recompute_bytes
    >>> cfg = TransformerConfig(layers=24, hidden=2048, heads=16, ffn=5504, vocab=32000,
    ...                         seq=2048, micro_batch=8, gated_ffn=True)
    >>> round(elementwise_recompute_bytes(cfg, "selective") / 1e9, 3)
    2.915
    """
    from .hardware import DTYPE_BYTES

    ck = resolve_checkpointing(checkpointing, flash_attention)
    if ck.mode != "selective":
        return 0.0
    _need_config(cfg)
    e = float(DTYPE_BYTES.get(cfg.dtype, 2))
    if not ck.flash_attention:  # scale, masked_fill (its bool mask), softmax
        return (6.0 * e + 1.0) * cfg.micro_batch * cfg.heads * float(cfg.seq) ** 2
    h, f = float(cfg.hidden), float(cfg.ffn)
    rotary = 0.0 if cfg.learned_positions else 10.0 * (cfg.heads + cfg.kv_heads) \
        * cfg.head_dim
    ffn = 5.0 * f if cfg.gated_ffn else 2.0 * f
    return e * float(cfg.tokens) * (2 * 2 * h + rotary + 2 * 3 * h + ffn)


def _elementwise_seconds(profile, cfg, ck):
    """:func:`elementwise_recompute_bytes` at the HBM bandwidth of the profile's GPU
    (``provenance["gpu"]``); 0 for a profile without one. A profile built without flash
    attention (``transformer_profile(..., flash_attention=False)``) replays its own
    score passes instead under Korthikanti's selective recompute: one layer's forward
    share of them (eq. score-passes of the guide), the same kernels as its forward [s]."""
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    scores = prov.get("attention_scores")
    if (ck.mode == "selective" and not ck.flash_attention and isinstance(scores, dict)
            and "scaled_to" not in prov and cfg is not None):
        return float(scores.get("forward_time", 0.0)) / cfg.layers
    nbytes = elementwise_recompute_bytes(cfg, ck)
    gpu = profile.provenance.get("gpu") if isinstance(profile.provenance, dict) else None
    if nbytes == 0.0 or not isinstance(gpu, str):
        return 0.0
    from .hardware import get_gpu
    try:
        return nbytes / get_gpu(gpu).hbm_bandwidth
    except ScalemodelError:
        return 0.0  # a GPU the library does not know: not counted


# --------------------------------------------------------------------------- profiles

def _profile_config(profile):
    cfg = profile.provenance.get("config") if isinstance(profile.provenance, dict) else None
    if not isinstance(cfg, dict):
        return None
    from .memory import _config_from

    return _config_from(cfg)


def with_recompute(profile, checkpointing, flash_attention=None):
    """The profile with each checkpointed block's recompute in its backward pass.

    The recompute of block ``u`` (``recompute_fraction`` times its forward time, the
    profile's forward time split in proportion to the blocks' backward times) runs at
    the start of the block's backward: every gradient ready time from that block on
    moves by it, and so does the backward time. The per-tensor recompute is recorded in
    ``provenance["recompute"]`` (backward order; the time each tensor's gradient waits
    for before its own backward), so the sharded model splits the forward time by the
    backward times without recompute.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload; its tensor names must have numbered blocks (``layers.3.``) unless
        ``checkpointing`` is ``"none"`` [-].
    checkpointing : str, bool, float or Checkpointing
        See :func:`resolve_checkpointing` [-].
    flash_attention : bool or None
        Used unless ``checkpointing`` is a :class:`Checkpointing`; None: the profile's own
        (False for one built with ``transformer_profile(..., flash_attention=False)``,
        else True) [-].

    Returns
    -------
    WorkloadProfile
        ``profile`` itself for ``"none"``.

    Raises
    ------
    InvalidParameterError
        A profile without numbered blocks; ``"selective"`` without a transformer config.
    """
    if flash_attention is None:
        prov = profile.provenance if isinstance(profile.provenance, dict) else {}
        flash_attention = "attention_scores" not in prov
    ck = resolve_checkpointing(checkpointing, flash_attention)
    if ck.mode == "none":
        return profile
    key = (ck, id(profile))
    hit = _RECOMPUTED.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    out = _with_recompute(profile, ck, checkpointing)
    _RECOMPUTED[key] = (profile, out)
    while len(_RECOMPUTED) > 64:
        _RECOMPUTED.pop(next(iter(_RECOMPUTED)))
    return out


_RECOMPUTED: dict = {}


@functools.lru_cache(maxsize=64)
def _block_starts(names):
    """Where each run of a block's (or of the tensors outside blocks') tensors starts, in
    the backward-order names, and whether each run is a block (cached per names)."""
    from .sharding import _block_keys, _runs

    keys = _block_keys(names)
    starts = np.asarray(_runs(keys), dtype=np.int64)
    block = np.array([keys[s] is not None for s in starts.tolist()])
    starts.setflags(write=False)
    block.setflags(write=False)
    return starts, block


def _with_recompute(profile, ck, given):
    from .sharding import _block_keys, negligible_zeroed

    names = profile.tensor_names
    keys = _block_keys(tuple(names)) if names is not None else None
    if keys is None or not any(k is not None for k in keys):
        raise InvalidParameterError(
            "activation_checkpointing", given, f"the profile {profile.name!r} has no "
            "numbered blocks in its tensor names (layers.<i>., h.<i>., ...) to checkpoint",
            "Use activation_checkpointing='none'")
    cfg = _profile_config(profile)
    frac = recompute_fraction(cfg, ck)
    elementwise = _elementwise_seconds(profile, cfg, ck)  # per layer, memory-bound
    ready = np.asarray(profile.tensor_ready, float)
    k = len(ready)
    starts, block = _block_starts(tuple(names))
    ends = np.append(starts[1:], k)
    done = ready[ends - 1]
    bwd = np.diff(np.concatenate(([0.0], done)))
    bwd[-1] += max(0.0, profile.backward_time - float(done[-1]))
    bwd = negligible_zeroed(bwd, profile.forward_time + profile.backward_time)
    tb = float(bwd.sum())
    fwd = profile.forward_time * (bwd / tb if tb > 0 else np.full(len(bwd), 1 / len(bwd)))
    # the first round(f L) blocks of forward are the last ones in backward order
    n_blocks = int(block.sum())
    chosen = np.zeros(len(starts), bool)
    picked = np.flatnonzero(block)[::-1][:ck.layers(n_blocks)]
    chosen[picked] = True
    prov = dict(profile.provenance)
    scores = prov.get("attention_scores")
    score_layer = (float(scores.get("forward_time", 0.0)) / cfg.layers
                   if isinstance(scores, dict) and cfg is not None
                   and "scaled_to" not in prov else 0.0)  # memory-bound, per layer
    if ck.mode == "full" and ck.early_stop:
        # the skipped product is FLOP-bound: a layer's score passes (a profile without
        # flash attention) are all replayed, frac of the rest
        elementwise += (1.0 - frac) * score_layer
    per_unit = np.where(chosen, frac * fwd + elementwise, 0.0)
    per_tensor = np.zeros(k)
    per_tensor[starts] = per_unit
    shift = np.cumsum(per_tensor)
    prov["recompute"] = per_tensor.tolist()
    prov["activation_checkpointing"] = ck.describe()
    prov["checkpointing"] = {"mode": ck.mode, "fraction": ck.fraction,
                             "flash_attention": bool(ck.flash_attention),
                             "early_stop": ck.early_stop}
    if elementwise:  # the memory-bound part of each recomputed layer [s]
        prov["recompute_elementwise_seconds"] = elementwise
    if score_layer:
        # without flash attention: the recomputed share of each chosen layer's score
        # passes and its element-wise recompute, memory-bound (efficiency.score_seconds)
        share = 1.0 if ck.mode == "full" else frac
        extra = 0.0 if ck.mode == "full" else elementwise
        prov["attention_scores"] = dict(scores, recompute_time=len(picked) * (
            share * score_layer + extra))
    # the ready times stay finite and non-decreasing and the backward time moves with the
    # last of them: the checked profile needs no second check (its shapes are costly)
    return evolve_checked(profile, tensor_ready=ready + shift,
                          backward_time=profile.backward_time + float(shift[-1]),
                          provenance=prov)


def evolve_checked(profile, **changes):
    """A copy of a validated profile with ``changes`` that keep it valid, without
    validating it again [-].

    Parameters
    ----------
    profile : WorkloadProfile
        The profile [-].
    **changes
        Fields and their new values [-].
    """
    import copy

    out = copy.copy(profile)
    for name, value in changes.items():
        object.__setattr__(out, name, value)
    return out
