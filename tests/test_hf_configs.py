"""Hugging Face config.json files of the common families, against published counts."""

import warnings

import attrs
import pytest

import scalemodel as sm
from scalemodel.exceptions import ModelWarning
from scalemodel.workloads import MEASURED_CONFIGS, TransformerConfig

GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
        "n_positions": 1024, "vocab_size": 50257}
PYTHIA_160M = {"model_type": "gpt_neox", "hidden_size": 768, "num_hidden_layers": 12,
               "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50304,
               "tie_word_embeddings": False, "max_position_embeddings": 2048}
FALCON_7B = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
             "num_attention_heads": 71, "multi_query": True, "parallel_attn": True,
             "bias": False, "vocab_size": 65024, "new_decoder_architecture": False}
QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
            "vocab_size": 152064, "tie_word_embeddings": False}
BERT_BASE = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
             "max_position_embeddings": 512, "type_vocab_size": 2}


def test_gpt2_keys_give_the_released_count():
    # GPT-2 small: 124,439,808 (../shared/data/published/model_parameter_counts.csv)
    cfg = TransformerConfig.from_hf_config(GPT2, seq=1024, micro_batch=4, dtype="fp32")
    assert cfg.parameter_count == 124_439_808
    assert attrs.evolve(cfg, name="") == MEASURED_CONFIGS["gpt2-h100"]()
    # without model_type the key names say GPT-2
    no_type = {k: v for k, v in GPT2.items() if k != "model_type"}
    assert TransformerConfig.from_hf_config(no_type).parameter_count == 124_439_808


def test_gpt_neox_pythia_160m():
    # Biderman et al., "Pythia" (ICML 2023), Table 1: 162,322,944 total parameters
    assert TransformerConfig.from_hf_config(PYTHIA_160M).parameter_count == 162_322_944


def test_bert_matches_the_measured_shape():
    cfg = TransformerConfig.from_hf_config(BERT_BASE, seq=64, micro_batch=64, dtype="fp32")
    assert attrs.evolve(cfg, name="") == MEASURED_CONFIGS["bert-base-h100"]()


def test_falcon_counts_one_extra_norm_and_says_so():
    # Falcon-7B's model card: 6,921,720,704 parameters; its parallel block has one norm
    with pytest.warns(ModelWarning, match="parallel_attn.*9088 parameters per block"):
        cfg = TransformerConfig.from_hf_config(FALCON_7B)
    assert cfg.kv_heads == 1
    assert cfg.parameter_count == 6_921_720_704 + 32 * 2 * 4544


def test_qwen2_says_which_biases_it_leaves_out():
    with pytest.warns(ModelWarning, match=r"query, key and value.*\+4608"):
        cfg = TransformerConfig.from_hf_config(QWEN2_7B)
    # Qwen2-7B: 7,615,616,512 with its q/k/v biases (28 x 4608 of them)
    assert cfg.parameter_count + 28 * 4608 == 7_615_616_512


def test_llama_family_unchanged_and_quiet():
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "vocab_size": 32000}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = TransformerConfig.from_hf_config(cfg)
    assert got.parameter_count == sm.llm_config("llama-2-7b").parameter_count


def test_what_cannot_be_mapped_is_refused_by_name():
    gemma7 = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
              "num_attention_heads": 16, "head_dim": 256, "intermediate_size": 24576,
              "vocab_size": 256000}
    with pytest.raises(sm.InvalidParameterError, match="config.head_dim"):
        TransformerConfig.from_hf_config(gemma7)
    with pytest.raises(sm.InvalidParameterError, match="config.model_type"):
        TransformerConfig.from_hf_config({"model_type": "t5", "d_model": 512})
    with pytest.raises(sm.InvalidParameterError, match="num_local_experts"):
        TransformerConfig.from_hf_config({**QWEN2_7B, "model_type": "llama",
                                          "num_local_experts": 8})
    with pytest.raises(sm.InvalidParameterError, match="n_layer"):
        TransformerConfig.from_hf_config({"n_embd": 64})
    with pytest.raises(sm.ParameterTypeError):
        TransformerConfig.from_hf_config([1, 2])


def test_cli_takes_a_config_json(tmp_path, capsys):
    import json

    from scalemodel.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GPT2, "_name_or_path": "gpt2"}))
    assert main(["min-compression", "--model", str(path), "--bw", "10Gbps",
                 "--micro-batch", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    prof = sm.transformer_profile(TransformerConfig.from_hf_config(
        GPT2, seq=1024, micro_batch=8, name="gpt2"), "h100-sxm")
    assert out["ratio"] == pytest.approx(sm.min_compression(prof, "10Gbps").ratio)
    assert main(["min-compression", "--model", "bert", "--bw", "10Gbps",
                 "--seq", "128"]) == 2
    assert "--seq" in capsys.readouterr().err
    path.write_text(json.dumps({"something": 1}))
    assert main(["min-compression", "--model", str(path), "--bw", "10Gbps"]) == 2


MPT_SHAPES = {"mpt-1b": (24, 2048, 16), "mpt-3b": (32, 2560, 20), "mpt-7b": (32, 4096, 32),
              "mpt-13b": (40, 5120, 40), "mpt-30b": (48, 7168, 56),
              "mpt-70b": (80, 8192, 64)}


def _mpt(layers, hidden, heads, **more):
    # llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml: MPTConfig defaults elsewhere
    return {"model_type": "mpt", "d_model": hidden, "n_heads": heads, "n_layers": layers,
            "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size": 50368, **more}


@pytest.mark.parametrize("model", sorted(MPT_SHAPES))
def test_mpt_keys_give_llm_foundrys_counts(model):
    """MPT-1B to 70B as LLM Foundry's pretraining YAMLs write them: the parameter counts
    of its benchmark tables (benchmarks/data/published_sharded.csv), and the same
    configuration as validate_sharded builds by hand."""
    import csv
    from pathlib import Path
    rows = Path(__file__).parents[1] / "benchmarks" / "data" / "published_sharded.csv"
    counts = {r["model"]: int(r["parameters"])
              for r in csv.DictReader(rows.read_text().splitlines())}
    cfg = TransformerConfig.from_hf_config(_mpt(*MPT_SHAPES[model]), seq=2048)
    assert cfg.parameter_count == counts[model]
    layers, hidden, heads = MPT_SHAPES[model]
    assert attrs.evolve(cfg, name="") == TransformerConfig(
        layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=50368, seq=2048,
        gated_ffn=False, norm="layernorm", bias=True, learned_positions=2048,
        tied_embeddings=True)
    # without model_type the key names say MPT
    no_type = {k: v for k, v in _mpt(*MPT_SHAPES[model]).items() if k != "model_type"}
    assert TransformerConfig.from_hf_config(no_type).parameter_count == counts[model]


def test_mpt_options_map_or_say_what_they_leave_out():
    base = _mpt(32, 4096, 32)
    released = dict(base, no_bias=True, attn_config={"alibi": True})  # MPT-7B's release
    with pytest.warns(ModelWarning, match=r"no_bias.*\+4096 parameters per norm"):
        cfg = TransformerConfig.from_hf_config(released)
    assert (cfg.bias, cfg.learned_positions) == (False, 0)
    glu = TransformerConfig.from_hf_config(dict(base, ffn_config={"ffn_type": "mptglu"},
                                                norm_type="rmsnorm",
                                                attn_config={"rope": True,
                                                             "attn_type":
                                                             "grouped_query_attention",
                                                             "kv_n_heads": 8}))
    assert (glu.gated_ffn, glu.norm, glu.kv_heads, glu.learned_positions) == \
        (True, "rmsnorm", 8, 0)
    mqa = TransformerConfig.from_hf_config(dict(base, resid_pdrop=0.1, attn_config={
        "attn_type": "multiquery_attention"}))
    assert (mqa.kv_heads, mqa.dropout) == (1, True)


@pytest.mark.parametrize("change, name", [
    (dict(expansion_ratio=0), "config.expansion_ratio"),
    (dict(expansion_ratio=1.0001), "config.expansion_ratio"),
    (dict(expansion_ratio="4"), "config.expansion_ratio"),
    (dict(ffn_config={"ffn_type": "mb_dmoe"}), "config.ffn_config.ffn_type"),
    (dict(attn_config={"attn_type": "sparse"}), "config.attn_config.attn_type"),
    (dict(attn_config=[1]), "config.attn_config"),
    (dict(n_layers=0), "config.n_layers"),
    (dict(no_bias="true"), "config.no_bias"),
    (dict(attn_config={"alibi": 1}), "config.attn_config.alibi"),
])
def test_bad_mpt_keys_are_named(change, name):
    with pytest.raises(sm.ScalemodelError, match=name.replace(".", r"\.")):
        TransformerConfig.from_hf_config(dict(_mpt(32, 4096, 32), **change))
