"""Transformer configs: published parameter counts, FLOPs, FLOP-derived profiles and
units, the measured efficiency, and the built-in LLMs."""

import csv
import json
import statistics
from importlib import resources
from pathlib import Path

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.workloads import (MEASURED_CONFIGS, PUBLISHED_LLM_EFFICIENCY, TransformerConfig,
                                  llm_names, llm_profile, tensor_flops)

LLM = json.loads(resources.files("scalemodel").joinpath("data", "llm_configs.json").read_text())
LLAMA2_7B = TransformerConfig(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000)


def test_llama_2_7b_parameter_count_is_exact():
    # Llama 2 7B: 32 x (4 h^2 + 3 h f + 2 h) + 2 V h + h, the count of its checkpoint
    assert LLAMA2_7B.parameter_count == 6_738_415_616
    assert sm.llm_config("llama-2-7b").parameter_count == 6_738_415_616


@pytest.mark.parametrize("name", sorted(LLM["models"]))
def test_published_parameter_counts_are_reproduced(name):
    published = LLM["models"][name]["published_parameters"]
    # the published figures are rounded to 3 significant digits
    assert sm.llm_config(name).parameter_count == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize("name", sorted(MEASURED_CONFIGS))
def test_bert_and_gpt2_counts_equal_the_measured_gradient_bytes(name):
    profile = sm.load_profile(name)
    assert MEASURED_CONFIGS[name]().parameter_count == profile.total_bytes / 4
    assert MEASURED_CONFIGS["gpt2-h100"]().parameter_count == 124_439_808


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(heads=30), "heads"), (dict(kv_heads=5), "kv_heads"), (dict(layers=0), "layers"),
    (dict(vocab=-1), "vocab"), (dict(norm="batchnorm"), "norm"), (dict(seq=0), "seq")])
def test_bad_configs_name_the_parameter_and_value(kwargs, parameter):
    args = dict(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000) | kwargs
    with pytest.raises(sm.InvalidParameterError) as exc:
        TransformerConfig(**args)
    assert exc.value.parameter == parameter and repr(kwargs[parameter]) in str(exc.value)


def test_config_types_and_dtype():
    with pytest.raises(sm.ParameterTypeError):
        TransformerConfig(layers=2.0, hidden=64, heads=4, ffn=256, vocab=100)
    with pytest.raises(sm.ParameterTypeError):
        TransformerConfig(layers=2, hidden=64, heads=4, ffn=256, vocab=100, bias="yes")
    with pytest.raises(sm.UnknownNameError):
        TransformerConfig(layers=2, hidden=64, heads=4, ffn=256, vocab=100, dtype="bf17")
    assert TransformerConfig(layers=2, hidden=64, heads=4, ffn=256, vocab=100,
                             dtype="bfloat16").dtype == "bf16"


def test_from_hf_config():
    cfg = TransformerConfig.from_hf_config(
        {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
         "tie_word_embeddings": False}, seq=2048)
    assert cfg == attrs.evolve(sm.llm_config("mistral-7b", seq=2048), name="")
    assert cfg.parameter_count == sm.llm_config("mistral-7b").parameter_count
    assert cfg.kv_heads == 8 and cfg.seq == 2048
    with pytest.raises(sm.InvalidParameterError):
        TransformerConfig.from_hf_config({"hidden_size": 8})


def test_flops_are_two_per_parameter_per_token_plus_attention():
    cfg = sm.llm_config("llama-2-7b", seq=2048, micro_batch=3)
    fl = tensor_flops(cfg)
    T = cfg.tokens
    embed = cfg.vocab * cfg.hidden
    vectors = sum(n for n, s in zip(fl.numel, fl.shapes) if len(s) == 1)
    matmul = cfg.parameter_count - embed - vectors  # lm_head is a matmul, the table is not
    attention = 4 * cfg.micro_batch * cfg.seq**2 * cfg.hidden * cfg.layers
    assert fl.forward == pytest.approx(2 * T * matmul + attention, rel=1e-12)
    np.testing.assert_allclose(fl.backward_flops, 2 * fl.forward_flops)
    # the usual 6 N T estimate is close for a 7B model at this length
    assert 3 * fl.forward == pytest.approx(6 * cfg.parameter_count * T, rel=0.1)


GEMMA_7B = dict(layers=28, hidden=3072, heads=16, head_dim=256, ffn=24576, vocab=256000,
                tied_embeddings=True)
"""Gemma-7B: 16 heads of 256 on a width of 3072 (config.json of google/gemma-7b)."""


def test_head_dim_widens_the_attention_projections_and_core():
    cfg = TransformerConfig(**GEMMA_7B, seq=2048, micro_batch=2)
    assert cfg.head_dim == 256 and cfg.parameter_count == 8_537_680_896
    fl = tensor_flops(cfg)
    shapes = dict(zip(fl.names, fl.shapes))
    assert shapes["layers.0.attn.q.weight"] == (16 * 256, 3072)
    assert shapes["layers.0.attn.k.weight"] == (16 * 256, 3072)
    assert shapes["layers.0.attn.o.weight"] == (3072, 16 * 256)
    # by hand: 2 T per weight element of the blocks, the attention core over 16 x 256,
    # the tied output projection 2 T h V
    T, h, d = cfg.tokens, 3072, 16 * 256
    block = 4 * h * d + 3 * h * 24576
    want = (2 * T * block + 4 * 2 * 2048**2 * d) * 28 + 2 * T * h * 256000
    assert fl.forward == pytest.approx(want, rel=1e-12)
    # the default is hidden / heads; given equal to it, the same config
    plain = TransformerConfig(layers=2, hidden=64, heads=4, ffn=176, vocab=256)
    assert plain.head_dim == 16 and attrs.evolve(plain, head_dim=16) == plain


@pytest.mark.parametrize("kwargs, error", [
    (dict(head_dim=0), sm.InvalidParameterError),
    (dict(head_dim=-4), sm.InvalidParameterError),
    (dict(head_dim=64.0), sm.ParameterTypeError),
    (dict(head_dim="64"), sm.ParameterTypeError)])
def test_bad_head_dim_is_named(kwargs, error):
    with pytest.raises(error) as exc:
        TransformerConfig(**(GEMMA_7B | kwargs))
    assert exc.value.parameter == "head_dim"
    # without head_dim, heads must still divide the width, and the message says head_dim
    with pytest.raises(sm.InvalidParameterError, match="head_dim="):
        TransformerConfig(layers=2, hidden=3072, heads=40, ffn=64, vocab=10)


def test_profile_backward_order_ready_times_and_bytes():
    cfg = sm.llm_config("llama-3-8b")
    prof = sm.transformer_profile(cfg, "h100-sxm", efficiency=0.5)
    assert prof.tensor_names[0] == "lm_head.weight" and prof.tensor_names[-1] == "embed.weight"
    assert prof.tensor_names.index("layers.31.mlp.down.weight") < \
        prof.tensor_names.index("layers.0.attn.q.weight")
    assert np.all(np.diff(prof.tensor_ready) >= 0)
    assert prof.tensor_ready[-1] == pytest.approx(prof.backward_time)
    peak = sm.get_gpu("h100-sxm").peak("bf16")
    fl = tensor_flops(cfg)
    assert prof.forward_time == pytest.approx(fl.forward / (0.5 * peak))
    assert prof.backward_time == pytest.approx(2 * prof.forward_time)
    assert prof.total_bytes == 2 * cfg.parameter_count  # bf16 gradients
    assert prof.precision == "bf16" and prof.batch_size == 1
    fp32 = sm.transformer_profile(cfg, "h100-sxm", efficiency=0.5, grad_dtype="fp32")
    assert fp32.total_bytes == 4 * cfg.parameter_count
    # a faster GPU gives proportionally shorter times
    b200 = sm.transformer_profile(cfg, "b200", efficiency=0.5)
    assert prof.backward_time / b200.backward_time == pytest.approx(
        sm.get_gpu("b200").peak("bf16") / peak)


def test_units_add_up_to_the_profile():
    cfg = sm.llm_config("llama-2-13b")
    prof = sm.transformer_profile(cfg, efficiency=0.4)
    u = sm.transformer_units(cfg, efficiency=0.4)
    assert len(u.names) == cfg.layers + 2 and u.kind[0] == "embedding" and u.kind[-1] == "head"
    assert u.param_count.sum() == cfg.parameter_count
    assert np.all(u.param_count[1:-1] == cfg.block_parameter_count)
    assert np.all(u.param_bytes == 2 * u.param_count)
    assert u.forward_time.sum() == pytest.approx(prof.forward_time)
    assert u.backward_time.sum() == pytest.approx(prof.backward_time)
    np.testing.assert_allclose(u.backward_time, 2 * u.forward_time)
    assert u.forward_time[0] == 0  # embedding look-ups cost no model FLOPs


def test_measured_efficiency_is_model_flops_over_measured_time():
    for dtype in ("fp32", "bf16"):
        m = sm.measured_efficiency(dtype)
        assert 0 < m.efficiency < 1 and len(m.profiles) == 3
        # recompute gpt2's MFU by hand: 2 x 4096 tokens x 85M block/head matmul parameters
        # + the tied 50257 x 768 head + attention 4 b s^2 h L, forward; x3 with backward
        name = "gpt2-h100" if dtype == "fp32" else "gpt2-h100-bf16"
        prof = sm.load_profile(name)
        T, h, L = 4 * 1024, 768, 12
        matmul = L * (4 * h * h + 2 * h * 3072) + 50257 * h
        flops = 3 * (2 * T * matmul + 4 * 4 * 1024**2 * h * L)
        peak = sm.get_gpu("h100-sxm").peak(dtype)
        i = m.profiles.index(name)
        assert m.per_profile[i] == pytest.approx(
            flops / (peak * (prof.forward_time + prof.backward_time)), rel=1e-12)
    assert sm.measured_efficiency("fp16") is sm.measured_efficiency("bf16")


def test_flop_derived_block_boundaries_match_the_measured_timelines():
    """The accuracy stated in docs/llm.rst: each block's gradients complete at the
    fraction of backward the H100 measured, within 6 % (fp32) and 16 % (bf16)."""
    assert np.max(sm.measured_efficiency("fp32").unit_ready_deviation) < 0.06
    assert np.max(sm.measured_efficiency("bf16").unit_ready_deviation) < 0.16


def test_efficiency_errors():
    cfg = sm.llm_config("llama-2-7b")
    for bad in (0, 1.5, float("nan")):
        with pytest.raises(sm.InvalidParameterError) as exc:
            sm.transformer_profile(cfg, efficiency=bad)
        assert exc.value.parameter == "efficiency"
    with pytest.raises(sm.InvalidParameterError) as exc:  # no measured fp8 run
        sm.transformer_profile(cfg, dtype="fp8")
    assert "efficiency" in str(exc.value)
    assert sm.transformer_profile(cfg, dtype="fp8", efficiency=0.3).forward_time > 0
    with pytest.raises(sm.InvalidParameterError) as exc:  # Volta has no bf16
        sm.transformer_profile(cfg, "v100-sxm2-32gb", efficiency=0.3)
    assert "v100-sxm2-32gb" in str(exc.value) and "bf16" in str(exc.value)
    with pytest.raises(sm.ParameterTypeError):
        sm.transformer_profile("llama-2-7b")


def test_builtin_llms_are_listed_loaded_and_cached():
    names = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
             "mistral-7b"}
    assert names <= set(sm.list_profiles()) and set(llm_names()) == names
    assert "gpus" not in sm.list_profiles() and "llm_configs" not in sm.list_profiles()
    p = sm.load_profile("llama-2-7b")
    assert sm.load_profile("Llama-2-7B") is p and sm.load_profile("llama2-7b") is p
    assert "config.json" in p.provenance["config_source"]
    assert p.provenance["efficiency"].startswith("published")
    assert p.forward_time == pytest.approx(
        tensor_flops(sm.llm_config("llama-2-7b")).forward
        / (sm.get_gpu("h100-sxm").peak("bf16") * PUBLISHED_LLM_EFFICIENCY))
    # the published rows it comes from (tests/test_efficiency.py checks every GPU's)
    table = Path(__file__).parents[1] / "benchmarks" / "data" / "published_llm_mfu.csv"
    rows = [r for r in csv.DictReader(table.read_text().splitlines())
            if r["gpu"] == "h100-sxm"]
    mfu = [float(r["mfu_percent"]) for r in rows]
    assert len(rows) == 12 and all(r["activation_checkpointing"] == "False" for r in rows)
    assert PUBLISHED_LLM_EFFICIENCY == pytest.approx(statistics.median(mfu) / 100, abs=1e-12)
    res = sm.min_compression("llama-2-7b", bw="100Gbps", n=64)
    assert res.ratio >= 1
    with pytest.raises(sm.UnknownNameError) as exc:
        sm.load_profile("llama-2-8b")
    assert exc.value.suggestion in names


def test_llm_profile_on_another_gpu():
    p = llm_profile("mistral-7b", "a100-80gb", efficiency=0.5)
    assert "A100" in p.device and p.provenance["gpu"] == "a100-80gb"
