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


# Released configs (their config.json keys that matter) and the parameter count of the
# released weights (the Hugging Face Hub's safetensors metadata, ``safetensors.total``;
# the same figures in Keras-Hub's preset metadata), less what the family's warning says
# is left out: per block, Qwen3's query and key norms (2 x 128), Gemma-2's norms around
# the feed-forward's output (2 x 3584).
HEAD_DIM_CONFIGS = {
    "gemma-7b": ({"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                  "intermediate_size": 24576, "vocab_size": 256000},
                 8_537_680_896, 0, None),
    "mistral-nemo-12b": ({"model_type": "mistral", "hidden_size": 5120,
                          "num_hidden_layers": 40, "num_attention_heads": 32,
                          "num_key_value_heads": 8, "head_dim": 128,
                          "intermediate_size": 14336, "vocab_size": 131072,
                          "tie_word_embeddings": False},
                         12_247_782_400, 0, None),
    "phi-3-mini": ({"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 32,
                    "intermediate_size": 8192, "vocab_size": 32064,
                    "tie_word_embeddings": False},
                   3_821_079_552, 0, None),
    "qwen3-8b": ({"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "intermediate_size": 12288, "vocab_size": 151936,
                  "tie_word_embeddings": False, "attention_bias": False},
                 8_190_735_360, 36 * 2 * 128, "queries and keys"),
    "qwen3-4b": ({"model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "intermediate_size": 9728, "vocab_size": 151936,
                  "tie_word_embeddings": True},
                 4_022_468_096, 36 * 2 * 128, "queries and keys"),
    "gemma-2-9b": ({"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                    "intermediate_size": 14336, "vocab_size": 256000,
                    "sliding_window": 4096},
                   9_241_705_984, 42 * 2 * 3584, "feed-forward's output"),
}


@pytest.mark.parametrize("name", sorted(HEAD_DIM_CONFIGS))
def test_released_counts_with_head_dim_and_new_families(name):
    config, published, left_out, said = HEAD_DIM_CONFIGS[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = TransformerConfig.from_hf_config(config)
    assert cfg.parameter_count + left_out == published
    messages = [str(w.message) for w in caught if issubclass(w.category, sm.ModelWarning)]
    if said is None:
        assert messages == []
    else:
        assert len(messages) == 1 and said in messages[0]
        assert f"+{left_out // config['num_hidden_layers']} parameters per block" \
            in messages[0]
    hd = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    assert cfg.head_dim == hd
    if name == "gemma-2-9b":
        assert "sliding-window attention (window 4096)" in messages[0]


def test_a_head_dim_equal_to_the_width_is_the_default():
    qwen3_8b = HEAD_DIM_CONFIGS["qwen3-8b"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = TransformerConfig.from_hf_config(qwen3_8b)
        plain = TransformerConfig.from_hf_config({k: v for k, v in qwen3_8b.items()
                                                  if k != "head_dim"})
    assert cfg == plain and cfg.head_dim == 128


def test_what_cannot_be_mapped_is_refused_by_name():
    with pytest.raises(sm.ParameterTypeError, match="config.head_dim"):
        TransformerConfig.from_hf_config({**HEAD_DIM_CONFIGS["gemma-7b"][0],
                                          "head_dim": 256.0})
    with pytest.raises(sm.InvalidParameterError, match="config.head_dim"):
        TransformerConfig.from_hf_config({**HEAD_DIM_CONFIGS["gemma-7b"][0],
                                          "head_dim": 0})
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


@pytest.mark.parametrize("key, length", [("max_position_embeddings", 131072),
                                         ("max_seq_len", 2048), (None, 4096)])
def test_the_cli_says_which_sequence_length_it_assumed(tmp_path, capsys, key, length):
    # without --seq a long-context config (Qwen2: 131072 tokens) gave a 64 s step and
    # 'does NOT fit', the length said nowhere; MPT's max_seq_len was not read (4096)
    import json

    from scalemodel.cli import main

    cfg = {**QWEN2_7B, "model_type": "llama"}  # (no QKV-bias warning)
    if key:
        cfg[key] = length
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["iteration", "--model", str(path), "--bw", "100Gbps", "--n", "8",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    said = f"--seq not given: {length} tokens per sequence, " + (
        f"the config's {key}" if key else "the default")
    assert said in err
    want = sm.iteration_time(sm.transformer_profile(TransformerConfig.from_hf_config(
        cfg, seq=length), "h100-sxm"), 8, "100Gbps")
    assert json.loads(out)["total"] == pytest.approx(want.total)
    assert main(["iteration", "--model", str(path), "--bw", "100Gbps", "--n", "8",
                 "--seq", "512"]) == 0
    assert "--seq not given" not in capsys.readouterr().err


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
