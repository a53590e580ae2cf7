"""``calibration/llm_memory.py`` (the GPU memory / step-time measurement of a Llama-style
decoder under activation checkpointing) runs end to end on the CPU with a tiny config."""

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import scalemodel  # noqa: E402
from scalemodel.workloads import TransformerConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("llm_memory",
                                                  ROOT / "calibration" / "llm_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _script()


MEMORY_FIELDS = ("model_state_bytes", "first_step_peak_allocated", "peak_fwd_bwd_allocated",
                 "peak_fwd_bwd_reserved", "peak_optimizer_allocated",
                 "max_memory_allocated", "max_memory_reserved")


@pytest.mark.parametrize("flash", [True, False])
def test_cpu_run_writes_every_mode(script, tmp_path, flash):
    out = tmp_path / "run.json"
    argv = ["--out", str(out), "--config", "tiny", "--seq", "32", "--micro-batch", "2",
            "--steps", "2", "--warmup", "1", "--device", "cpu"]
    result = script.main(argv + ([] if flash else ["--no-flash"]))
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result))
    cfg = TransformerConfig(**{**script.SMALL_CONFIG, "seq": 32, "micro_batch": 2})
    assert data["parameter_count"] == cfg.parameter_count
    assert set(data["modes"]) == {"none", "selective", "full"}
    losses = {}
    for mode, rec in data["modes"].items():
        assert rec["oom"] is None
        assert rec["built_parameter_count"] == cfg.parameter_count
        assert len(rec["losses"]) == 3
        assert rec["times_s"]["step"]["n"] == 2
        for key in MEMORY_FIELDS:
            assert rec[key] is None, key
        assert rec["mfu"] is None
        # the recorded keywords reproduce the recorded expectation
        est = scalemodel.memory(cfg, 1, **rec["memory_kwargs"])
        assert est.allocated_per_gpu == pytest.approx(rec["expected"]["allocated"])
        losses[mode] = torch.tensor(rec["losses"])
    # recompute must not change the math: the same losses after two updates
    assert torch.allclose(losses["selective"], losses["none"], rtol=1e-5, atol=1e-5)
    assert torch.allclose(losses["full"], losses["none"], rtol=1e-5, atol=1e-5)
    assert losses["none"][-1] != losses["none"][0]  # the optimizer did update


def test_selective_policy_saves_torchtitans_ops(script, tmp_path):
    """With flash attention "selective" saves q, v, gate and down (the 1st, 3rd, 5th and
    7th mm of a SwiGLU block) and the attention kernel's output, as
    scalemodel.checkpointing documents; everything else is recomputed."""
    out = tmp_path / "sel.json"
    script.main(["--out", str(out), "--config", "tiny", "--modes", "selective",
                 "--steps", "1", "--warmup", "1", "--device", "cpu"])
    ops = json.loads(out.read_text())["modes"]["selective"]["selective_policy_first_block"]
    mm = [d for op, d in ops if op == "aten.mm.default"]
    assert mm == ["save", "recompute"] * 3 + ["save"]
    sdpa = [d for op, d in ops if "scaled_dot_product" in op]
    assert sdpa == ["save"]
    assert all(d == "recompute" for op, d in ops
               if op != "aten.mm.default" and "scaled_dot_product" not in op)


@pytest.mark.parametrize("fields", [
    dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn=100, vocab=97, seq=16),
    dict(layers=1, hidden=48, heads=3, ffn=192, vocab=50, seq=16, gated_ffn=False,
         norm="layernorm", bias=True, tied_embeddings=True, learned_positions=16),
])
def test_built_model_has_scalemodels_parameter_count(script, fields):
    cfg = TransformerConfig(**fields)
    for flash in (True, False):
        model = script.build_model(cfg, flash=flash)
        assert sum(p.numel() for p in model.parameters()) == cfg.parameter_count
        logits = model(torch.zeros(1, cfg.seq, dtype=torch.long))
        assert logits.shape == (1, cfg.seq, cfg.vocab)


def test_default_config_is_llama_13b_and_fits(script):
    cfg = script.load_config(None)
    assert 1.3e9 < cfg.parameter_count < 1.4e9
    est = scalemodel.memory(cfg, 1, gpu="h100-sxm",
                            **script.memory_kwargs("none", True, "bf16"))
    assert 40 * 2**30 < est.allocated_per_gpu < 60 * 2**30
    assert script.load_config("tiny", seq=8, micro_batch=3).tokens == 24


def test_unbuildable_config_is_refused(script):
    bert = TransformerConfig(layers=1, hidden=32, heads=2, ffn=64, vocab=10, prenorm=False)
    with pytest.raises(ValueError, match="prenorm"):
        script.build_model(bert)


def test_heads_wider_than_the_model_build_and_train(script, tmp_path):
    """A config whose heads x head_dim is not the width (Gemma-7B-like, grouped keys):
    the PyTorch model built from it has scalemodel's parameter count (build_model asserts
    it) and trains; its JSON config (head_dim included) is read back."""
    fields = dict(layers=2, hidden=64, heads=4, head_dim=24, kv_heads=2, ffn=176, vocab=256,
                  seq=32, micro_batch=2, name="wide-heads")
    cfg = TransformerConfig(**fields)
    model = script.build_model(cfg)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["layers.0.attn.q.weight"] == (96, 64)
    assert shapes["layers.0.attn.k.weight"] == (48, 64)
    assert shapes["layers.0.attn.o.weight"] == (64, 96)
    out = tmp_path / "wide.json"
    data = script.main(["--out", str(out), "--config", json.dumps(fields), "--modes",
                        "none,full", "--steps", "1", "--warmup", "1", "--device", "cpu"])
    assert data["config"]["head_dim"] == 24
    assert data["parameter_count"] == cfg.parameter_count
    assert all(rec["built_parameter_count"] == cfg.parameter_count
               for rec in data["modes"].values())
