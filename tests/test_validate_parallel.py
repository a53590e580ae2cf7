"""benchmarks/validate_parallel.py (issue 20, items 4 and 9): the published TP x PP x DP
rows are consistent with their sources' own arithmetic, one row calibrates, the errors
and the baseline are computed from the data, rows the model cannot represent are refused
by the library, and the committed results are those of the current code."""

import importlib.util
import re
from pathlib import Path

import pytest

import scalemodel as sm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vp():
    spec = importlib.util.spec_from_file_location(
        "validate_parallel", ROOT / "benchmarks" / "validate_parallel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(vp):
    return {r["row"]: r for r in vp.load_rows()}


def test_rows_agree_with_their_sources_arithmetic(vp, rows):
    for r in rows.values():
        assert r["tp"] * r["pp"] * r["dp"] == r["gpus"], r["row"]
        if r["tflops_per_gpu"] and r["flops_formula"] == "megatron-2024":
            # MFU (1 % steps) of the H100 dense bf16 peak the script uses
            implied_peak = r["tflops_per_gpu"] * 1e12 / (r["mfu_percent"] / 100)
            assert implied_peak == pytest.approx(vp.H100_PEAK, rel=0.025), r["row"]
        if r["mfu_percent"] and r["flops_formula"] == "narayanan-2021":
            assert r["tflops_per_gpu"] / 312 == pytest.approx(r["mfu_percent"] / 100,
                                                              abs=0.006), r["row"]


def test_megatron_flop_count_is_its_general_formula(vp, rows):
    """72 B s l h^2 (1 + s/6h + V/12lh) is Megatron's 12 B s l h^2 ((1 + g/a + s/h) +
    ffn/h + V/(2 l h)) for these models (no GQA, ffn = 4h, no SwiGLU)."""
    r = rows[5]
    B, s, l, h, V = r["global_batch"], r["seq"], r["layers"], r["hidden"], r["vocab"]
    general = 12 * B * s * l * h * h * ((1 + 1 + s / h) + 4 + V / (2 * l * h))
    assert vp.source_flops(r) == pytest.approx(general, rel=1e-12)


def test_one_row_calibrates_and_the_errors_come_from_the_data(vp, rows):
    cal, held = rows[12], rows[14]
    eta = vp.calibrate(cal)
    assert vp.predicted_time(cal, eta)[0] == pytest.approx(vp.published_time(cal), rel=1e-9)
    e = vp.entry(held, cal, eta, vp.calibrate(cal, bare=True))
    # the prediction, asked of the library directly (Megatron-LM of 2021: no flash
    # attention, dropout 0.1)
    cfg = sm.TransformerConfig(layers=36, hidden=4096, heads=32, ffn=4 * 4096, vocab=51200,
                               seq=2048, micro_batch=16, gated_ffn=False, norm="layernorm",
                               bias=True, learned_positions=2048, tied_embeddings=True,
                               dropout=True)
    it = sm.iteration_time(sm.transformer_profile(cfg, "a100-80gb", efficiency=eta,
                                                  flash_attention=False), 128,
                           200e9, tp=4, pp=1, microbatches=512 // (32 * 16), gpus_per_node=8,
                           nics_per_node=8, intra_bw=sm.get_gpu("a100-80gb").intra_node_bw,
                           activation_checkpointing="full")
    published = 96 * 512 * 2048 * 36 * 4096**2 * (1 + 2048 / (6 * 4096)
                                                   + 51200 / (16 * 36 * 4096)) / (142e12 * 128)
    assert e["error"] == pytest.approx(published / it.total - 1, rel=1e-9)
    assert e["rule"] == pytest.approx(137 / 142 - 1, rel=1e-12)
    assert e["cal"] == 12 and e["flags"] == []  # micro-batch 16 stated (run_table_1.sh)


def test_a_stated_micro_batch_is_kept_under_the_sensitivity_variant(vp, rows):
    vp.VARIANT.update(micro_batch=2)
    try:
        assert vp.micro_batch(rows[26]) == 1 and vp.microbatches(rows[26]) == 1536 // 4
        assert vp.micro_batch(rows[12]) == 16  # stated by the run script
        assert vp.micro_batch(rows[1]) == 2 and vp.microbatches(rows[1]) == 192 // 96
    finally:
        vp.VARIANT.clear()
    assert vp.microbatches(rows[1]) == 192 // 48


def test_flags_name_what_the_model_does_not_have(vp, rows):
    assert set(vp.flags(rows[7])) >= {"SP", "TPO", "DO", "SCH", "MB"}
    assert "SCH" not in vp.flags(rows[4]) and "SP" not in vp.flags(rows[1])
    assert "PAR" in vp.flags(rows[11]) and vp.flags(rows[13]) == []
    assert vp.flags(rows[16]) == [] and vp.flags(rows[17]) == []  # schedule stated
    assert vp.flags(rows[28]) == ["SCH", "PAR"]  # micro-batch stated


def test_rows_it_cannot_represent_are_refused_not_predicted(vp, rows):
    refused = [vp.refusal(r) for r in rows.values()
               if r["series"] not in vp.ASSUMED and r["pp"] > 1]
    assert [x["row"] for x in refused] == [24, 25]  # FSDP with a pipeline
    for x in refused:
        assert x["answer"].startswith("refused: InvalidParameterError: pp=8"), x["answer"]
    assert "torchtitan-2d3d" not in vp.ASSUMED


def test_two_d_rows_calibrate_and_predict_as_fsdp_x_tp(vp, rows):
    # torchtitan Table 4: row 22 (2-D) calibrates, row 23 (2-D + AsyncTP) is predicted
    s = vp.evaluate_2d([rows[22], rows[23]])
    assert s["calibration"] == 22
    cal, held = s["rows"]
    assert cal["error"] == pytest.approx(0.0, abs=1e-9)
    # 829 tokens/s/GPU: 512 sequences of 8192 tokens on 256 GPUs
    assert vp.two_d_time(rows[22]) == pytest.approx(512 * 8192 / (829 * 256), rel=1e-12)
    # the prediction, asked of the library directly: row 23 is row 22's job
    cfg = sm.TransformerConfig(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                               vocab=128256, seq=8192, micro_batch=16)
    it = sm.iteration_time(
        sm.transformer_profile(cfg, "h100-sxm", efficiency=s["eta"]), 256, 400e9, tp=8,
        sharding=sm.Sharding("zero3", param_dtype="bf16", reduce_dtype="fp32"),
        gpus_per_node=8, nics_per_node=8, intra_bw=sm.get_gpu("h100-sxm").intra_node_bw,
        activation_checkpointing="full-early-stop")  # torchtitan's non-reentrant wrapper
    assert held["error"] == pytest.approx(512 * 8192 / (876 * 256) / it.total - 1,
                                          rel=1e-9)
    assert held["error"] == pytest.approx(829 / 876 - 1, rel=1e-6)  # no TP overlap
    assert held["error"] < 0 < held["hidden_error"] and "ATP" in held["flags"]
    text = (ROOT / "benchmarks" / "results" / "validate_parallel.txt").read_text()
    line = next(ln for ln in text.splitlines() if re.match(r"\s*23\s+llama-3\.1-70b", ln))
    assert f"{100 * held['error']:+.1f} %" in line
    assert f"{100 * held['hidden_error']:+.1f} %" in line


def test_committed_results_are_those_of_the_current_code(vp, rows):
    text = (ROOT / "benchmarks" / "results" / "validate_parallel.txt").read_text()
    line = next(ln for ln in text.splitlines() if re.match(r"\s*14\s+gpt-7\.5b", ln))
    cal = rows[12]
    e = vp.entry(rows[14], cal, vp.calibrate(cal), vp.calibrate(cal, bare=True))
    errors = re.findall(r"[+-]\d+\.\d %", line)
    assert errors[0] == f"{100 * e['error']:+.1f} %"
    assert errors[1] == f"{100 * e['rule']:+.1f} %"
    assert errors[2] == f"{100 * e['bare_error']:+.1f} %"


def test_the_stated_interleaved_schedule_is_asked(vp, rows):
    # run_table_1.sh: --num-layers-per-virtual-pipeline-stage 5 on 60 layers / pp 4
    assert [vp.virtual_stages(rows[k]) for k in range(16, 22)] == [1, 3, 2, 2, 3, 1]
    r = rows[17]
    assert vp.iteration(r, 0.5).settings["virtual_stages"] == 3
    e = vp.entry(r, rows[12], 0.5, 0.5)
    assert e["bubble"] == pytest.approx(3 / (3 * 1792 // (32 * 2)), rel=1e-12)
