"""The loss's backward peak, unfused (PyTorch's cross_entropy, 12sbV) or fused
(flash-attention's CrossEntropyLoss, as LLM Foundry's MPT uses it): each counted by hand
from what the kernels hold (scalemodel.checkpointing's docstring), in activation_bytes,
in memory() (DDP, ZeRO-3, TP x PP, reserved rounding), and the bad values."""

import warnings

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.checkpointing import (LOSS_KERNELS, activation_bytes, canonical_loss,
                                      layer_activation_bytes, loss_bytes, loss_tensor_bytes)
from scalemodel.exceptions import InvalidParameterError, ModelWarning
from helpers_activations import hand_units

MIB = 2**20
CFG = sm.llm_config("llama-2-13b", seq=2048, micro_batch=3)


def _hand_unfused(s, b, V, t=1):
    # saved log-softmax, nll_loss's gradient, log_softmax's gradient: three fp32 s*b*V/t
    return 3 * 4 * s * b * V / t


def _hand_fused(s, b, V, t=1):
    # bf16 logits saved + bf16 gradient (empty_like(logits)), s*b*V/t each; per token:
    # fp32 log-sum-exp (4) and int64 label (8) saved, fp32 incoming gradient (4)
    return 2 * s * b * V / t + 2 * s * b * V / t + (4 + 8 + 4) * s * b


@pytest.mark.parametrize("seq,mb,vocab", [(2048, 14, 50368), (4096, 1, 128256),
                                          (3000, 5, 32000)])
def test_loss_bytes_are_the_kernels_tensors_counted_by_hand(seq, mb, vocab):
    cfg = attrs.evolve(sm.llm_config("llama-2-7b", seq=seq, micro_batch=mb), vocab=vocab)
    assert loss_bytes(cfg) == _hand_unfused(seq, mb, vocab)
    assert loss_bytes(cfg, "fused") == _hand_fused(seq, mb, vocab)
    assert loss_bytes(cfg, "fused", tp=4) == _hand_fused(seq, mb, vocab, 4)
    assert loss_bytes(cfg, "FUSED ") == loss_bytes(cfg, "fused")  # case, spaces
    assert sorted(loss_tensor_bytes(seq, mb, vocab, "fused")) == sorted(
        [2 * seq * mb * vocab] * 2 + [4 * seq * mb, 8 * seq * mb, 4 * seq * mb])
    # fused holds a third of unfused's bytes per logit, plus 16 bytes per token
    assert loss_bytes(cfg, "fused") < loss_bytes(cfg, "unfused")


@pytest.mark.parametrize("ck", ["none", "full", "selective", 0.5])
@pytest.mark.parametrize("flash", [True, False])
def test_only_the_loss_term_changes_in_activation_bytes(ck, flash):
    s, b, V = CFG.seq, CFG.micro_batch, CFG.vocab
    unf = activation_bytes(CFG, ck, flash)
    fus = activation_bytes(CFG, ck, flash, loss="fused")
    assert unf - fus == pytest.approx(_hand_unfused(s, b, V) - _hand_fused(s, b, V), rel=1e-12)
    assert fus < unf


def test_memory_fused_activations_by_hand_and_ordering():
    s, b, h, L, V = CFG.seq, CFG.micro_batch, CFG.hidden, CFG.layers, CFG.vocab
    per_layer = sum(hand_units(CFG)[:2])  # GPT: 34
    fused = sm.memory(CFG, 8, sharding="zero3", loss="fused", measure="allocated")
    assert fused.parts["activations"] == pytest.approx(L * per_layer * s * b * h
                                                       + _hand_fused(s, b, V))
    ckpt = sm.memory(CFG, 8, sharding="zero3", loss="fused", activation_checkpointing=True,
                     measure="allocated")
    assert ckpt.parts["activations"] == pytest.approx(
        2 * s * b * h * L + per_layer * s * b * h + _hand_fused(s, b, V))
    assert fused.settings["loss"] == "fused"
    assert sm.memory(CFG, 8).settings["loss"] == "unfused"  # the default, unchanged
    for strategy in ("none", "zero1", "zero2", "zero3", "hybrid_shard"):
        for measure in ("allocated", "reserved"):
            a = sm.memory(CFG, 16, sharding=strategy, measure=measure)
            f = sm.memory(CFG, 16, sharding=strategy, measure=measure, loss="fused")
            assert f.per_gpu < a.per_gpu
            assert f.model_state == a.model_state and f.parts["buffers"] == a.parts["buffers"]
    arr = sm.memory(CFG, np.array([8, 16, 64]), sharding="zero3", loss="fused")
    one = sm.memory(CFG, 16, sharding="zero3", loss="fused")
    assert arr.per_gpu[1] == pytest.approx(one.per_gpu)


def test_tp_pp_last_stage_carries_the_vocabulary_parallel_loss():
    s, b, V = CFG.seq, CFG.micro_batch, CFG.vocab
    # (tp, pp, microbatches, the last stage is the peak): with one micro-batch in flight
    # the last stage (its layers + the loss) is the larger; with many, the first is
    for tp, pp, m, last in [(2, 1, None, True), (2, 2, 1, True), (1, 4, 1, True),
                            (4, 2, 8, False), (2, 4, 4, False)]:
        a = sm.memory(CFG, 64, tp=tp, pp=pp, microbatches=m, measure="allocated")
        f = sm.memory(CFG, 64, tp=tp, pp=pp, microbatches=m, measure="allocated",
                      loss="fused")
        diff = a.parts["activations"] - f.parts["activations"]
        full = _hand_unfused(s, b, V, tp) - _hand_fused(s, b, V, tp)
        assert diff == pytest.approx(full if last else 0.0, abs=1.0)
        assert f.parts["activations"] <= a.parts["activations"]


def test_reserved_rounding_of_the_fused_tensors():
    cfg = sm.llm_config("llama-2-7b", seq=3000, micro_batch=1)  # odd sizes: rounding > 0
    s, V = 3000, cfg.vocab
    a = sm.memory(cfg, 8, sharding="zero3", measure="reserved")
    f = sm.memory(cfg, 8, sharding="zero3", measure="reserved", loss="fused")

    def block(n):  # kMinBlockSize 512; own 2 MiB-multiple segment from 10 MiB
        n512 = -(-n // 512) * 512
        return -(-n512 // (2 * MIB)) * 2 * MIB if n >= 10 * MIB else n512

    unfused_waste = 3 * (block(4 * s * V) - 4 * s * V)
    fused_waste = (2 * (block(2 * s * V) - 2 * s * V) + 2 * (block(4 * s) - 4 * s)
                   + block(8 * s) - 8 * s)
    # the activations' rounding is the same (the same layers): only the loss's differs
    assert f.overheads["rounding"] - a.overheads["rounding"] == pytest.approx(
        fused_waste - unfused_waste)


@pytest.mark.parametrize("bad", ["flash", "", None, 1, True, "fused_crossentropy"])
def test_bad_loss_names_the_parameter_the_value_and_the_valid_ones(bad):
    for call in (lambda: sm.memory(CFG, 8, loss=bad),
                 lambda: activation_bytes(CFG, "none", loss=bad),
                 lambda: loss_bytes(CFG, bad), lambda: canonical_loss(bad)):
        with pytest.raises(InvalidParameterError) as err:
            call()
        assert err.value.parameter == "loss"
        text = str(err.value)
        assert repr(bad) in text and all(repr(k) in text for k in LOSS_KERNELS)


def test_fused_on_a_profile_without_config_is_said():
    with pytest.warns(ModelWarning, match="loss='fused'"):
        m = sm.memory("resnet50", 8, loss="fused")
    assert not m.complete
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.memory("resnet50", 8)  # the default says nothing


def test_layer_activations_do_not_depend_on_the_loss():
    # the loss is added once per micro-batch, never per layer
    assert layer_activation_bytes(CFG, "none") * CFG.layers + loss_bytes(CFG, "fused") == \
        pytest.approx(activation_bytes(CFG, "none", loss="fused"))
