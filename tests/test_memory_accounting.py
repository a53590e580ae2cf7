"""memory(accounting="fsdp") and loss="unfused+logits", each counted by hand from what a
PyTorch FSDP step holds (scalemodel.memory's docstring): fp32 sharded parameters as the
master, no gradients at the forward/backward peak, the loss's peak and the recompute
apart, FSDP2's reduce-scatter stream pool; the optimizer step when it is the larger; the
bad values. The published rows are in tests/test_checkpointing.py."""

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.checkpointing import (HELD_LOGIT_BYTES, LOSS_KERNELS, activation_bytes,
                                      layer_activation_bytes, loss_bytes, loss_tensor_bytes)
from scalemodel.exceptions import InvalidParameterError
from scalemodel.memory import (DEFAULT_BUCKET_BYTES, allocator_block_bytes,
                               reduce_scatter_pool_bytes, side_stream_pool_bytes)
from scalemodel.workloads import transformer_units
from helpers_activations import hand_units

CFG = sm.llm_config("llama-2-7b", seq=2048, micro_batch=8)
PSI = float(CFG.parameter_count)
S, B, H, L, V = CFG.seq, CFG.micro_batch, CFG.hidden, CFG.layers, CFG.vocab
PER_LAYER = sum(hand_units(CFG)[:2])  # bytes per sbh of a layer (GPT: 34)


def _held(loss):
    # the fp32 logits train.py keeps bound to ``pred`` through backward (unfused+logits)
    return 4 * S * B * V if loss == "unfused+logits" else 0


def _pool_by_hand(cfg, g):
    # one fp32 reduce-scatter output per FSDP unit (every block; the root: all the rest)
    u = transformer_units(cfg, "h100-sxm", efficiency=1.0)
    blocks = [p for p, k in zip(u.param_count, u.kind) if k == "block"]
    root = sum(p for p, k in zip(u.param_count, u.kind) if k != "block")
    return sum(float(allocator_block_bytes(4 * p / g)) for p in blocks + [root])


def test_unfused_logits_loss_is_the_logits_and_unfuseds_three_tensors():
    assert "unfused+logits" in LOSS_KERNELS and HELD_LOGIT_BYTES["unfused+logits"] == 4
    assert loss_bytes(CFG, "unfused+logits") == 16 * S * B * V
    assert loss_bytes(CFG, "unfused+logits", tp=4) == 4 * S * B * V
    assert loss_tensor_bytes(S, B, V, "Unfused+Logits ") == (4.0 * S * B * V,) * 4
    for ck in ("none", "full", "selective", 0.25):  # summed: only the loss term changes
        assert activation_bytes(CFG, ck, loss="unfused+logits") - activation_bytes(CFG, ck) \
            == pytest.approx(4 * S * B * V, rel=1e-12)


@pytest.mark.parametrize("loss", LOSS_KERNELS)
@pytest.mark.parametrize("vocab", [32000, 256])  # 256: the recompute is the larger moment
def test_phases_take_the_larger_of_the_loss_and_the_recompute(loss, vocab):
    cfg = attrs.evolve(CFG, vocab=vocab)
    lb = loss_bytes(cfg, loss)
    held = _held(loss) * vocab / V
    none, full = PER_LAYER * S * B * H, 2 * S * B * H
    sel = layer_activation_bytes(cfg, "selective")
    k = round(0.25 * L)
    want = {"none": L * none + lb,
            "full": max(L * full + lb, L * full + none + held),
            "selective": max(L * sel + lb, L * sel + (none - sel) + held),
            0.25: max(k * full + (L - k) * none + lb, k * full + none + held)}
    for ck, value in want.items():
        got = activation_bytes(cfg, ck, loss=loss, phases=True)
        assert got == pytest.approx(value, rel=1e-12)
        assert got <= activation_bytes(cfg, ck, loss=loss) * (1 + 1e-12)
    if vocab == 256 and loss == "unfused":  # the recompute of one layer, no loss left
        assert want["full"] == L * full + none


def test_fsdp_zero3_by_hand():
    e = sm.memory(CFG, 8, sharding="zero3", activation_checkpointing="full",
                  loss="unfused+logits", accounting="fsdp", measure="allocated")
    zero = sm.memory(CFG, 8, sharding="zero3", activation_checkpointing="full",
                     loss="unfused+logits", measure="allocated")
    assert e.parts["parameters"] == pytest.approx(4 * PSI / 8, rel=1e-12)  # fp32 shard
    assert e.parts["gradients"] == 0.0  # zero_grad(set_to_none) before the forward
    assert e.parts["optimizer"] == pytest.approx(8 * PSI / 8, rel=1e-12)  # AdamW, no master
    act = max(L * 2 * S * B * H + 16 * S * B * V, L * 2 * S * B * H + PER_LAYER * S * B * H
              + 4 * S * B * V)
    assert e.parts["activations"] == pytest.approx(act, rel=1e-12)
    assert e.parts["buffers"] == zero.parts["buffers"]
    assert e.per_gpu == pytest.approx(sum(e.parts.values()), rel=1e-12)
    # the live tensors: 12 bytes of state per parameter instead of ZeRO's 16, the recomputed
    # layer not on top of the loss
    assert zero.per_gpu - e.per_gpu == pytest.approx(4 * PSI / 8 + PER_LAYER * S * B * H,
                                                     rel=1e-9)
    assert e.overheads["reduce_scatter_pool"] == pytest.approx(_pool_by_hand(CFG, 8), rel=1e-12)
    assert e.overheads["side_stream_pool"] == side_stream_pool_bytes(CFG)
    assert e.reserved_per_gpu == pytest.approx(e.allocated_per_gpu + e.overheads[
        "side_stream_pool"] + e.overheads["reduce_scatter_pool"] + e.overheads["rounding"])
    assert e.settings["accounting"] == "fsdp" and "fp32 sharded parameters" in e.notes
    assert zero.overheads["reduce_scatter_pool"] == 0.0 and zero.settings["accounting"] == "zero"


def test_fsdp_zero2_holds_every_bf16_parameter_from_forward_to_backward():
    cfg = sm.llm_config("llama-3-8b", seq=8192, micro_batch=1)
    psi = float(cfg.parameter_count)
    e = sm.memory(cfg, 8, sharding="zero2", activation_checkpointing="selective",
                  accounting="fsdp")
    assert e.parts["parameters"] == pytest.approx(2 * psi + 4 * psi / 8, rel=1e-12)
    assert e.parts["gradients"] == 0.0 and e.parts["buffers"] == DEFAULT_BUCKET_BYTES
    assert e.overheads["side_stream_pool"] == side_stream_pool_bytes(cfg)  # still gathers
    assert sm.memory(cfg, 8, sharding="zero2").overheads["side_stream_pool"] == 0.0
    # reshard-never minus reshard-after-forward: the unsharded bf16 parameters, less the
    # gathered units zero3 already counts
    z3 = sm.memory(cfg, 8, sharding="zero3", activation_checkpointing="selective",
                   accounting="fsdp")
    assert e.allocated_per_gpu - z3.allocated_per_gpu == pytest.approx(
        2 * psi + DEFAULT_BUCKET_BYTES - z3.parts["buffers"], rel=1e-12)


def test_the_optimizer_step_when_it_is_the_larger():
    small = sm.llm_config("llama-2-7b", seq=128, micro_batch=1)
    e = sm.memory(small, 2, sharding="zero3", accounting="fsdp", measure="allocated")
    shard = 4 * PSI / 2
    assert e.parts["gradients"] == pytest.approx(shard, rel=1e-12)
    assert e.parts["activations"] == 0.0 and e.parts["buffers"] == DEFAULT_BUCKET_BYTES
    assert e.per_gpu == pytest.approx(16 * PSI / 2 + DEFAULT_BUCKET_BYTES, rel=1e-12)
    fwd = 12 * PSI / 2 + activation_bytes(small, "none", phases=True) + sm.memory(
        small, 2, sharding="zero3", measure="allocated").parts["buffers"]
    assert fwd < e.per_gpu
    # the gradients are live at the step already: the pool adds only its rounding
    assert 0.0 <= e.overheads["reduce_scatter_pool"] == pytest.approx(
        _pool_by_hand(small, 2) - shard, rel=1e-9, abs=1.0)


def test_fsdp_arrays_shard_groups_and_profiles():
    ns = np.array([2, 8, 64])
    arr = sm.memory(CFG, ns, sharding="zero3", activation_checkpointing="full",
                    accounting="fsdp")
    for i, n in enumerate(ns.tolist()):
        one = sm.memory(CFG, n, sharding="zero3", activation_checkpointing="full",
                        accounting="fsdp")
        assert arr.per_gpu[i] == pytest.approx(one.per_gpu, rel=1e-12)
        for k in one.parts:
            assert arr.parts[k][i] == pytest.approx(one.parts[k], rel=1e-12, abs=1e-9)
        for k in one.overheads:
            assert arr.overheads[k][i] == pytest.approx(one.overheads[k], rel=1e-12, abs=1e-9)
    assert arr.parts["gradients"][0] > 0 and arr.parts["gradients"][2] == 0  # step at n=2
    grp = sm.memory(CFG, 32, sharding="zero3", shard_group=8, accounting="fsdp")
    assert grp.parts["parameters"] == pytest.approx(4 * PSI / 8, rel=1e-12)
    hy = sm.memory(CFG, 32, sharding="hybrid_shard", accounting="fsdp")
    assert hy.parts["optimizer"] == pytest.approx(8 * PSI / 8, rel=1e-12)
    prof = sm.memory("resnet50", 8, sharding="zero3", accounting="fsdp")  # no config
    assert not prof.complete and prof.overheads["reduce_scatter_pool"] >= 0.0


@pytest.mark.parametrize("kw, needle", [
    (dict(accounting="ddp"), "'zero', 'fsdp'"),
    (dict(accounting=3), "'zero', 'fsdp'"),
    (dict(accounting="fsdp", sharding="none"), "zero2, zero3, hybrid_shard"),
    (dict(accounting="fsdp", sharding="zero1"), "zero2, zero3, hybrid_shard"),
    (dict(accounting="fsdp", sharding="zero3", offload="optimizer"), "offload"),
])
def test_bad_accounting_is_refused_by_name(kw, needle):
    kw = {"sharding": "zero3", **kw}
    with pytest.raises(InvalidParameterError) as err:
        sm.memory(CFG, 8, **kw)
    assert err.value.parameter == "accounting" and needle in str(err.value)
    assert sm.memory(CFG, 8, sharding="zero3", accounting=" FSDP").settings[
        "accounting"] == "fsdp"


def test_fsdp_suggestions_are_its_own_estimates():
    cfg = sm.llm_config("llama-3-8b", seq=8192, micro_batch=4)
    e = sm.memory(cfg, 8, sharding="zero3", accounting="fsdp")
    assert not e.fits and e.suggestions
    assert not any("offload" in label for label, _ in e.suggestions)  # not modelled there
    for label, value in e.suggestions:  # e.g. "activation_checkpointing='full'"
        kw = {"sharding": "zero3", **eval(f"dict({label})")}
        alt = sm.memory(cfg, 8, accounting="fsdp", **kw)
        assert alt.fits and value == pytest.approx(alt.per_gpu, rel=1e-12)


def test_default_accounting_is_unchanged():
    for strategy in ("none", "zero1", "zero2", "zero3"):
        a = sm.memory(CFG, 16, sharding=strategy, activation_checkpointing="full")
        b = sm.memory(CFG, 16, sharding=strategy, activation_checkpointing="full",
                      accounting="zero")
        assert a.per_gpu == b.per_gpu and dict(a.parts) == dict(b.parts)
        assert a.settings["accounting"] == "zero"
