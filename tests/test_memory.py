"""Memory per GPU: ZeRO's model-state division, Korthikanti's activations, errors."""

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.memory import canonical_sharding
from helpers_activations import hand_units

PSI = sm.llm_config("llama-2-7b").parameter_count


def state(m):
    return m.parts["parameters"] + m.parts["gradients"] + m.parts["optimizer"]


def test_ddp_keeps_16_bytes_per_parameter_under_mixed_precision_adam():
    m = sm.memory("llama-2-7b", 64)
    assert state(m) == 16 * PSI
    assert (m.parts["parameters"], m.parts["gradients"], m.parts["optimizer"]) == \
        (2 * PSI, 2 * PSI, 12 * PSI)
    assert m.sharding == "none" and m.gpu.name == "h100-sxm"
    assert m.per_gpu == pytest.approx(sum(v for v in m.parts.values()))
    assert m.fits == (m.per_gpu <= m.gpu.hbm_bytes)


@pytest.mark.parametrize("n", [2, 8, 64, 1000])
def test_each_strategy_divides_the_model_state_as_zero_does(n):
    psi = PSI
    expect = {"zero1": 4 * psi + 12 * psi / n, "zero2": 2 * psi + 14 * psi / n,
              "zero3": 16 * psi / n}
    for strategy, value in expect.items():
        assert state(sm.memory("llama-2-7b", n, sharding=strategy)) == pytest.approx(value)
    g = min(n, 8)  # an H100 server holds 8 GPUs
    assert state(sm.memory("llama-2-7b", n, sharding="hybrid_shard")) == pytest.approx(
        16 * psi / g)


def test_fsdp_names_are_aliases():
    assert canonical_sharding("FULL_SHARD") == "zero3"
    assert canonical_sharding("shard_grad_op") == "zero2"
    assert canonical_sharding("ddp") == "none" and canonical_sharding("HSDP") == "hybrid_shard"
    a = sm.memory("mistral-7b", 16, sharding="full_shard")
    b = sm.memory("mistral-7b", 16, sharding="zero3")
    assert a.per_gpu == b.per_gpu


def test_fp32_adam_is_also_16_bytes_and_sgd_less():
    m = sm.memory("llama-2-7b", 8, param_dtype="fp32")
    assert (m.parts["parameters"], m.parts["gradients"], m.parts["optimizer"]) == \
        (4 * PSI, 4 * PSI, 8 * PSI)
    assert state(sm.memory("llama-2-7b", 8, optimizer="sgd")) == 8 * PSI  # 2 + 2 + master 4


def test_vectorized_over_n():
    ns = np.array([2, 8, 32, 256])
    m = sm.memory("llama-2-70b", ns, sharding="zero3", activation_checkpointing=True)
    assert m.per_gpu.shape == ns.shape and m.fits.dtype == bool
    for i, n in enumerate(ns):
        one = sm.memory("llama-2-70b", int(n), sharding="zero3", activation_checkpointing=True)
        assert m.per_gpu[i] == pytest.approx(one.per_gpu) and m.fits[i] == one.fits
    assert np.all(np.diff(m.per_gpu) < 0)  # more GPUs, less each


def test_activations_follow_korthikanti_et_al():
    cfg = sm.llm_config("llama-2-13b", seq=2048, micro_batch=2)
    s, b, h, a, L, V = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.layers, cfg.vocab
    rep, split, score = hand_units(cfg)  # GPT: 10, 24, 5; Llama: no dropout, SwiGLU
    layer = s * b * h * (rep + split + score * a * s / h)
    plain = sm.memory(cfg, 8, sharding="zero3", flash_attention=False)
    assert plain.parts["activations"] == pytest.approx(L * layer + 12 * s * b * V)
    ckpt = sm.memory(cfg, 8, sharding="zero3", flash_attention=False,
                     activation_checkpointing=True)
    assert ckpt.parts["activations"] == pytest.approx(2 * s * b * h * L + layer + 12 * s * b * V)
    flash = sm.memory(cfg, 8, sharding="zero3")
    assert flash.parts["activations"] == pytest.approx(L * (rep + split) * s * b * h
                                                       + 12 * s * b * V)
    assert ckpt.parts["activations"] < flash.parts["activations"] < plain.parts["activations"]
    # micro_batch and seq override the config's
    more = sm.memory(cfg, 8, sharding="zero3", micro_batch=4)
    assert more.parts["activations"] == pytest.approx(2 * flash.parts["activations"])


def test_zero3_buffers_hold_gathered_units():
    cfg = sm.llm_config("llama-3-8b")
    u = sm.transformer_units(cfg, efficiency=1.0)
    m = sm.memory(cfg, 16, sharding="zero3", bucket_bytes=0)
    block = u.param_count[1]
    root = u.param_count[0] + u.param_count[-1]
    assert m.parts["buffers"] == pytest.approx(2 * (2 * block + root) + 2 * block)
    assert sm.memory(cfg, 16, sharding="zero2").parts["buffers"] == 25 * 2**20


def test_a_profile_without_config_has_unknown_activations():
    bert = sm.load_profile("bert-base")
    m = sm.memory("bert-base", 4, sharding="zero3")
    assert m.parts["activations"] is None and not m.complete
    assert m.parameter_count == bert.total_bytes / 4
    assert state(m) == pytest.approx(16 * bert.total_bytes / 4 / 4)
    assert "unknown" in m.notes and "activations unknown" in m.message()
    # a FLOP-derived profile carries its config
    prof = sm.transformer_profile(sm.llm_config("mistral-7b"), efficiency=0.4)
    assert sm.memory(prof, 8).complete


def test_does_not_fit_is_reported():
    m = sm.memory("llama-2-70b", 8)  # 16 x 69e9 bytes of model state on one GPU
    assert not m.fits and "does not fit" in m.message() and "h100-sxm" in m.message()
    assert sm.memory("llama-2-7b", 64, sharding="zero3", activation_checkpointing=True).fits
    assert sm.memory("llama-2-70b", 8, gpu="mi300x").gpu.name == "mi300x"


def test_errors_name_parameter_and_value():
    with pytest.raises(sm.UnknownNameError) as exc:
        sm.memory("llama-2-7b", 8, sharding="ful_shard")
    assert exc.value.suggestion == "zero3" and "ful_shard" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory("llama-2-7b", 1, sharding="zero3")
    assert exc.value.parameter == "n"
    assert sm.memory("llama-2-7b", 1).parts["optimizer"] == 12 * PSI  # DDP on one GPU is fine
    with pytest.raises(sm.InvalidParameterError):
        sm.memory("llama-2-7b", np.array([1, 8]), sharding="zero1")
    with pytest.raises(sm.ParameterTypeError):
        sm.memory("llama-2-7b", 8.0)
    with pytest.raises(sm.UnknownNameError):
        sm.memory("llama-2-7b", 8, optimizer="adamax")
    with pytest.raises(sm.UnknownNameError):
        sm.memory("llama-2-7b", 8, gpu="h100-sxn")
    with pytest.raises(sm.InvalidParameterError) as exc:  # no usual PCIe server
        sm.memory("llama-2-7b", 16, sharding="hybrid_shard", gpu="h100-pcie")
    assert exc.value.parameter == "gpus_per_node"
    m = sm.memory("llama-2-7b", 16, sharding="hybrid_shard", gpu="h100-pcie", gpus_per_node=4)
    assert state(m) == pytest.approx(16 * PSI / 4)
    with pytest.raises(sm.InvalidParameterError):
        sm.memory("llama-2-7b", 8, bucket_bytes=-1)


# -- reserved memory: the caching allocator's view (what torchtitan logs) ------------------

MIB = 2**20


def test_allocator_rounding_follows_the_caching_allocators_rules():
    from scalemodel.memory import allocator_block_bytes

    def direct(n):  # c10/cuda/CUDACachingAllocator.cpp: round_size, get_allocation_size
        block = max(-(-n // 512), 1) * 512
        return -(-block // (2 * MIB)) * (2 * MIB) if n >= 10 * MIB else block

    sizes = [0, 1, 511, 512, 513, MIB - 1, MIB + 1, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1,
             128 * MIB, 3 * 2**30 + 12345]
    assert [allocator_block_bytes(n) for n in sizes] == [float(direct(n)) for n in sizes]
    arr = allocator_block_bytes(np.array(sizes, dtype=float))
    assert arr.tolist() == [float(direct(n)) for n in sizes]
    with pytest.raises(sm.InvalidParameterError, match="nbytes"):
        allocator_block_bytes(-1)


def test_side_stream_pool_is_the_root_and_largest_block_gathered():
    from scalemodel.memory import allocator_block_bytes, side_stream_pool_bytes

    cfg = sm.llm_config("llama-3-8b")
    h, f, v, hd = cfg.hidden, cfg.ffn, cfg.vocab, cfg.hidden // cfg.heads
    block = h * cfg.heads * hd * 2 + 2 * h * cfg.kv_heads * hd + 3 * h * f + 2 * h
    root = 2 * v * h + h  # embeddings, head (untied), final norm
    expect = allocator_block_bytes(2 * root) + allocator_block_bytes(2 * block)
    assert side_stream_pool_bytes(cfg) == pytest.approx(expect, rel=1e-12)
    assert 2 * (root + block) <= side_stream_pool_bytes(cfg) < 2 * (root + block) + 4 * MIB


def test_reserved_is_allocated_plus_each_overhead():
    from scalemodel.memory import side_stream_pool_bytes

    cfg = sm.llm_config("llama-3-8b", seq=8192, micro_batch=2)
    alloc = sm.memory(cfg, 8, sharding="zero3", activation_checkpointing="selective",
                      measure="allocated")
    res = sm.memory(cfg, 8, sharding="zero3", activation_checkpointing="selective")
    assert res.measure == "reserved"  # the default: what the allocator holds, what runs out
    assert alloc.per_gpu == alloc.allocated_per_gpu == res.allocated_per_gpu
    assert alloc.per_gpu == pytest.approx(sum(alloc.parts.values()))  # parts unchanged
    assert res.per_gpu == res.reserved_per_gpu == alloc.reserved_per_gpu
    assert res.per_gpu == pytest.approx(alloc.per_gpu + sum(res.overheads.values()))
    assert res.overheads["side_stream_pool"] == side_stream_pool_bytes(cfg)
    assert res.overheads["rounding"] == 0.0  # every tensor a multiple of 2 MiB
    assert res.overheads["fragmentation"] == 0.0
    assert res.measure == "reserved" and res.settings["measure"] == "reserved"
    assert res.fits == (res.per_gpu <= res.gpu.hbm_bytes)
    assert "reserved memory" in res.message()
    ddp = sm.memory(cfg, 8, measure="reserved")  # no FSDP all-gather stream
    assert ddp.overheads["side_stream_pool"] == 0.0


def test_fragmentation_is_a_fraction_of_reserved():
    base = sm.memory("llama-2-7b", 8, sharding="zero3", measure="reserved")
    frag = sm.memory("llama-2-7b", 8, sharding="zero3", measure="reserved",
                     fragmentation=0.15)
    assert frag.overheads["fragmentation"] == pytest.approx(0.15 * frag.per_gpu)
    assert frag.per_gpu * 0.85 == pytest.approx(base.per_gpu)
    for bad in (-0.1, 1.0, True, "0.1"):
        with pytest.raises(sm.InvalidParameterError, match="fragmentation"):
            sm.memory("llama-2-7b", 8, measure="reserved", fragmentation=bad)
    with pytest.raises(sm.UnknownNameError, match="measure"):
        sm.memory("llama-2-7b", 8, measure="nvidia-smi")


def test_rounding_counts_activation_and_logit_tensors_of_odd_shapes():
    cfg = sm.llm_config("llama-2-7b", seq=3000, micro_batch=1)
    m = sm.memory(cfg, 8, sharding="zero3", measure="reserved")
    tensor = 2 * 3000 * cfg.hidden  # >= 10 MiB: its own segment, a 2 MiB multiple
    waste = -(-tensor // (2 * MIB)) * 2 * MIB - tensor
    logits = 4 * 3000 * cfg.vocab
    logit_waste = -(-logits // (2 * MIB)) * 2 * MIB - logits
    count = (m.parts["activations"] - 12 * 3000 * cfg.vocab) / tensor
    assert m.overheads["rounding"] == pytest.approx(count * waste + 3 * logit_waste)
    assert m.overheads["rounding"] > 0


def test_reserved_vectorized_over_n():
    ns = np.array([8, 64, 512])
    m = sm.memory("llama-2-13b", ns, sharding="zero3", measure="reserved")
    for i, n in enumerate(ns):
        one = sm.memory("llama-2-13b", int(n), sharding="zero3", measure="reserved")
        assert m.per_gpu[i] == pytest.approx(one.per_gpu)
        assert m.overheads["side_stream_pool"][i] == pytest.approx(
            one.overheads["side_stream_pool"])


def test_reserved_suggestions_are_reserved_estimates():
    kw = dict(sharding="zero3", micro_batch=2, seq=8192, measure="reserved")
    m = sm.memory("llama-3-8b", 8, **kw)
    assert not m.fits and m.suggestions
    label, value = m.suggestions[0]
    assert label == "activation_checkpointing='selective'"
    alt = sm.memory("llama-3-8b", 8, activation_checkpointing="selective", **kw)
    assert value == pytest.approx(alt.per_gpu) and alt.per_gpu > alt.allocated_per_gpu


def test_fragmentation_by_the_allocators_setting():
    """The allocator setting by name: expandable segments strand nothing, default segments
    GMLake's mean 0.15 (memory.FRAGMENTATION); spelled with '-' or '_', any case; an
    unknown name lists the known ones."""
    from scalemodel.memory import FRAGMENTATION

    assert FRAGMENTATION == {"expandable_segments": 0.0, "default_segments": 0.15}
    kw = dict(sharding="zero3", measure="reserved")
    for name, f in (("default_segments", 0.15), ("Default-Segments", 0.15),
                    ("expandable_segments", 0.0)):
        got = sm.memory("llama-2-7b", 8, fragmentation=name, **kw)
        assert got.per_gpu == sm.memory("llama-2-7b", 8, fragmentation=f, **kw).per_gpu
    with pytest.raises(sm.UnknownNameError, match="expandable_segments"):
        sm.memory("llama-2-7b", 8, fragmentation="defragmented", **kw)


def test_memory_says_which_given_settings_it_ignores():
    # seq, micro_batch and flash_attention on a profile without a transformer config, and
    # host_memory without offload, changed nothing and said nothing
    import warnings as _w
    with pytest.warns(sm.ModelWarning) as rec:
        m = sm.memory("resnet50", 8, seq=8192, micro_batch=4, flash_attention=False)
    said = " ".join(str(w.message) for w in rec)
    for text in ("seq=8192 has no effect", "micro_batch=4 has no effect",
                 "flash_attention=False has no effect"):
        assert text in said
    with _w.catch_warnings():
        _w.simplefilter("ignore", sm.ModelWarning)
        assert m.per_gpu == sm.memory("resnet50", 8).per_gpu
    with pytest.warns(sm.ModelWarning, match=r"host_memory=1000000000000.0 has no effect: "
                      r"nothing is offloaded"):
        sm.memory("llama-2-7b", 8, sharding="zero3", host_memory=1e12)
    with _w.catch_warnings():
        _w.simplefilter("error")
        sm.memory("llama-2-7b", 8, sharding="zero3", offload="optimizer", host_memory=2e12)
        sm.memory("llama-2-7b", 8, seq=2048, micro_batch=2)


def test_the_message_names_the_layout_its_gib_are_for():
    m = sm.memory("llama-2-70b", 128, tp=4, pp=4, microbatches=8, suggest=False)
    assert "GiB per GPU with sharding='none', tp=4 x pp=4," in m.message()
    assert "tp=" not in sm.memory("llama-2-7b", 8, suggest=False).message()


@pytest.mark.parametrize("n, gpn", [(12, 8), (12, None), (6, 4), (20, 8)])
def test_hybrid_shard_over_part_of_a_node_is_refused_as_the_time_model_refuses_it(n, gpn):
    """hybrid_shard shards inside whole nodes: memory answered 12 GPUs on 8-GPU nodes
    (a shard group of 8 and one of 4) that every time question refuses."""
    with pytest.raises(sm.InvalidParameterError, match=f"n={n} is invalid: hybrid_shard "
                       "needs n to be a multiple of gpus_per_node"):
        sm.scaling_factor("llama-2-7b", n, 1e11, sharding="hybrid_shard", gpus_per_node=gpn)
    with pytest.raises(sm.InvalidParameterError, match=f"n={n} is invalid: hybrid_shard "
                       "needs n to be a multiple of gpus_per_node"):
        sm.memory("llama-2-7b", n, sharding="hybrid_shard", gpus_per_node=gpn)
    with pytest.raises(sm.InvalidParameterError, match=f"n={n} is invalid"):
        sm.memory("llama-2-7b", [4, 8, n], sharding="hybrid_shard", gpus_per_node=gpn)
    # inside one node, or whole nodes: answered
    sm.memory("llama-2-7b", [4, 8, 2 * (gpn or 8)], sharding="hybrid_shard",
              gpus_per_node=gpn)
