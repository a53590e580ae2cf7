"""Default efficiency per GPU from published runs, and a fitted efficiency applied to the
predictions made with its cluster (issue 20 item 5, issue 17 item 5)."""

import csv
import statistics
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.efficiency import (PUBLISHED_MFU, at_fitted_efficiency, default_efficiency,
                                   fitted_efficiency, profile_efficiency)
from scalemodel.workloads import PUBLISHED_LLM_EFFICIENCY, tensor_flops

TABLE = Path(__file__).parents[1] / "benchmarks" / "data" / "published_llm_mfu.csv"

MPT13 = dict(layers=40, hidden=5120, heads=40, ffn=20480, vocab=50368, seq=2048,
             micro_batch=2, gated_ffn=False, norm="layernorm", bias=True,
             tied_embeddings=True, learned_positions=2048, name="mpt-13b")
NODE = dict(gpus_per_node=8, nics_per_node=8)


def _rows():
    return list(csv.DictReader(TABLE.read_text().splitlines()))


def test_defaults_are_the_medians_of_the_published_rows_by_one_rule():
    rows = _rows()
    assert [int(r["row"]) for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:  # the rule: bf16, no checkpointing, 2,048 tokens, >= 1B parameters
        assert r["activation_checkpointing"] == "False" and int(r["seq"]) == 2048
        assert int(r["parameters"]) >= 1e9 and "bf16" in r["precision"]
        assert r["value_kind"] == "table value" and "061f2c7" in r["source"]
        # tokens per GPU is the table's whole-job rate over the GPUs (floored)
        assert int(r["tokens_per_s_per_gpu"]) == int(r["tokens_per_s"]) // int(r["gpus"])
    for gpu, p in PUBLISHED_MFU.items():
        mine = [r for r in rows if r["gpu"] == gpu]
        assert [int(r["row"]) for r in mine] == list(p.rows)
        assert p.mfu == pytest.approx([float(r["mfu_percent"]) / 100 for r in mine], abs=1e-12)
        assert p.value == pytest.approx(statistics.median(p.mfu), abs=1e-9)
        d = default_efficiency(gpu)
        assert d.kind == "published" and d.value == p.value
        assert d.text.startswith(f"published: {p.value:g},") and p.section in d.text
    assert {r["gpu"] for r in rows} == set(PUBLISHED_MFU)
    assert PUBLISHED_LLM_EFFICIENCY == PUBLISHED_MFU["h100-sxm"].value


def test_same_default_for_builtin_and_user_configs_with_its_provenance():
    cfg = sm.llm_config("llama-2-7b")
    mine = sm.transformer_profile(cfg, "h100-sxm")
    builtin = sm.load_profile("llama-2-7b")
    assert mine.forward_time == pytest.approx(builtin.forward_time, rel=1e-12)
    assert mine.provenance["efficiency"] == builtin.provenance["efficiency"]
    assert profile_efficiency(mine) == PUBLISHED_LLM_EFFICIENCY
    for gpu in ("a100-40gb", "a100-80gb", "h100-sxm"):
        p = sm.transformer_profile(cfg, gpu)
        e = PUBLISHED_MFU[gpu].value
        assert p.forward_time == pytest.approx(
            tensor_flops(cfg).forward / (sm.get_gpu(gpu).peak("bf16") * e), rel=1e-12)
        assert p.provenance["efficiency"].startswith(f"published: {e:g},")
    # fp16 the same default; fp32 the measured one; a given one is said to be given
    assert sm.transformer_profile(attrs.evolve(cfg, dtype="fp16"), "a100-80gb").provenance[
        "efficiency"].startswith("published: 0.60985")
    fp32 = sm.transformer_profile(attrs.evolve(cfg, dtype="fp32"), "h100-sxm")
    assert fp32.provenance["efficiency"].startswith("measured: 0.5030")
    assert sm.transformer_profile(cfg, efficiency=0.3).provenance["efficiency"] == "given: 0.3"


def test_gpus_without_published_runs_say_what_they_borrowed():
    h100 = PUBLISHED_MFU["h100-sxm"].value
    for gpu in ("h200", "h100-pcie"):
        d = default_efficiency(gpu)
        assert (d.kind, d.value) == ("architecture", h100) and "h100-sxm" in d.text
    med = statistics.median(p.value for p in PUBLISHED_MFU.values())
    for gpu in ("b200", "mi300x", "v100-sxm2-32gb"):
        d = default_efficiency(gpu, "fp16")
        assert (d.kind, d.value) == ("fallback", pytest.approx(med)) and gpu in d.text
    # your own GPUSpec: not the published GPU, even under a built-in name
    spec = attrs.evolve(sm.get_gpu("h100-sxm"), name="my-hopper", hbm_bytes=96 * 2**30)
    assert default_efficiency(spec).kind == "architecture"
    fake = attrs.evolve(sm.get_gpu("a100-80gb"), hbm_bytes=10 * 2**30)
    assert default_efficiency(fake).kind == "architecture"


def test_bad_input_names_the_value():
    with pytest.raises(sm.InvalidParameterError, match="dtype='fp8'"):
        default_efficiency("h100-sxm", "fp8")
    with pytest.raises(sm.UnknownNameError):
        default_efficiency("h1000")
    cfg = sm.llm_config("llama-2-7b", dtype="fp8")
    with pytest.raises(sm.InvalidParameterError, match="efficiency="):
        sm.transformer_profile(cfg, "h100-sxm")
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(sm.InvalidParameterError, match="efficiency"):
            sm.transformer_profile(sm.llm_config("llama-2-7b"), efficiency=bad)
    with pytest.raises(sm.ParameterTypeError, match="efficiency"):
        sm.transformer_profile(sm.llm_config("llama-2-7b"), efficiency="0.4")
    cl = sm.ClusterProfile(extra={"efficiency": {"value": 2.0, "gpu": ["h100-sxm"]}},
                           provenance={"source": "test"})
    with pytest.raises(sm.InvalidParameterError, match="efficiency"):
        fitted_efficiency(cl, sm.load_profile("llama-2-7b"))


@pytest.fixture(scope="module")
def fit8():
    """A cluster fitted on ONE run: MPT-13B on 8 H100 at LLM Foundry's 4,792 tokens/s/GPU."""
    prof = sm.transformer_profile(sm.TransformerConfig(**MPT13), "h100-sxm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster([dict(model=prof, n=8, bw="400Gbps", sharding="zero3",
                                   tokens_per_second_per_gpu=4792)],
                             fusion=None, intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    return prof, fit


def _tokens(prof, n, cluster, **kw):
    it = sm.iteration_time(prof, n, "400Gbps", sharding="zero3", cluster=cluster,
                           intra_bw=sm.get_gpu(prof.provenance["gpu"]).intra_node_bw,
                           **NODE, **kw)
    return 2 * 2048 / float(it.total), it


def test_one_run_at_8_gpus_predicts_another_count_at_the_fitted_efficiency(fit8):
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    assert eff["gpu"] == [sm.get_gpu("h100-sxm").full_name]
    lo, hi = eff["interval"]
    assert lo < eff["value"] < hi and abs(eff["value"] - PUBLISHED_LLM_EFFICIENCY) > 1e-3
    # the calibration run is reproduced: the fitted efficiency is applied, not the default
    tok8, _ = _tokens(prof, 8, fit.cluster)
    assert tok8 == pytest.approx(4792, rel=2e-3)
    assert abs(_tokens(prof, 8, None)[0] / 4792 - 1) > 5e-3  # the default would miss it
    # another count: the same as a profile built at the fitted efficiency (its update
    # scaled by the same factor, as the fit scaled it: WorkloadProfile.scaled_to), on the
    # cluster without its efficiency (independent of the rescaling path)
    f = PUBLISHED_LLM_EFFICIENCY / eff["value"]
    at_fit = sm.transformer_profile(sm.TransformerConfig(**MPT13), "h100-sxm",
                                    efficiency=eff["value"], update_time=prof.update_time * f)
    bare = attrs.evolve(fit.cluster, extra={})
    tok64, it64 = _tokens(prof, 64, fit.cluster)
    ref64, ref_it = _tokens(at_fit, 64, bare)
    assert tok64 == pytest.approx(ref64, rel=1e-9)
    assert float(it64.scaling_factor) == pytest.approx(float(ref_it.scaling_factor), rel=1e-9)
    assert tok64 == pytest.approx(4800, rel=0.03)  # LLM Foundry's row at 64 GPUs
    # a profile already at the fitted efficiency is not rescaled again
    assert _tokens(at_fit, 64, fit.cluster)[0] == pytest.approx(ref64, rel=1e-9)


def test_the_answer_interval_spans_the_efficiency_interval(fit8):
    prof, fit = fit8
    lo_e, hi_e = fit.cluster.extra["efficiency"]["interval"]
    # one line rate where communication shows: the scaling factor falls with efficiency
    bw = "25Gbps"
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    it = sm.iteration_time(prof, 64, bw, cluster=fit.cluster, **kw)
    low, high = it.scaling_factor_interval
    bare = attrs.evolve(fit.cluster, extra={}, alternatives=(), intervals={})
    ends = [float(sm.scaling_factor(
        sm.transformer_profile(sm.TransformerConfig(**MPT13), "h100-sxm", efficiency=e),
        64, bw, cluster=bare, **kw)) for e in (lo_e, hi_e)]
    assert ends[0] > ends[1]  # faster compute hides less
    assert low <= ends[1] * (1 + 1e-9) and high >= ends[0] * (1 - 1e-9)
    assert low <= float(it.scaling_factor) <= high
    worst, best = fit.cluster.corners()
    assert worst.extra["efficiency"]["value"] == hi_e
    assert best.extra["efficiency"]["value"] == lo_e


def test_alternatives_keep_their_own_efficiency(fit8):
    _, fit = fit8
    cl = fit.cluster
    assert len(cl.alternatives) > 1 and "efficiency" in cl.alternatives[0]["values"]
    for i, alt in enumerate(cl.alternatives):
        c = cl.with_alternative(i)
        if "efficiency" in alt["values"]:
            assert c.extra["efficiency"]["value"] == alt["values"]["efficiency"]
        else:  # explained at the profile's own efficiency: nothing to apply
            assert "efficiency" not in c.extra and "efficiency" not in c.intervals


def test_not_applied_to_another_gpu_a_measured_or_a_rescaled_profile(fit8):
    prof, fit = fit8
    a100 = sm.transformer_profile(sm.TransformerConfig(**MPT13), "a100-80gb")
    assert fitted_efficiency(fit.cluster, a100) is None
    assert at_fitted_efficiency(a100, fit.cluster) is a100
    measured = sm.load_profile("bert-large-h100-bf16")
    assert fitted_efficiency(fit.cluster, measured) is None
    scaled = prof.scaled_to(1.0)
    assert profile_efficiency(scaled) is None and at_fitted_efficiency(scaled, fit.cluster) is scaled
    assert at_fitted_efficiency(prof, None) is prof
    # the same GPU: rescaled by its own efficiency over the fitted one
    q = at_fitted_efficiency(prof, fit.cluster)
    f = PUBLISHED_LLM_EFFICIENCY / fit.cluster.extra["efficiency"]["value"]
    assert q.iteration_time == pytest.approx(prof.iteration_time * f, rel=1e-12)
    assert np.allclose(q.tensor_ready, prof.tensor_ready * f, rtol=1e-12)


def test_refitting_from_a_fitted_cluster_does_not_apply_its_efficiency_twice(fit8):
    prof, fit = fit8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sm.fit_cluster([dict(model=prof, n=8, bw="400Gbps", sharding="zero3",
                                     tokens_per_second_per_gpu=4792)], cluster=fit.cluster,
                               fusion=None, intra_bw=sm.get_gpu("h100").intra_node_bw,
                               **NODE)
    assert again.cluster.extra["efficiency"]["value"] == pytest.approx(
        fit.cluster.extra["efficiency"]["value"], rel=0.02)


def test_a_saved_fitted_cluster_keeps_its_efficiency(fit8, tmp_path):
    prof, fit = fit8
    path = fit.save(tmp_path / "cluster.json")
    loaded = sm.load_cluster(path)
    assert loaded.extra["efficiency"]["value"] == pytest.approx(
        fit.cluster.extra["efficiency"]["value"], rel=1e-12)
    a = _tokens(prof, 64, fit.cluster)[1]
    b = _tokens(prof, 64, str(path))[1]
    assert float(b.total) == pytest.approx(float(a.total), rel=1e-9)
    assert b.scaling_factor_interval == pytest.approx(a.scaling_factor_interval, rel=1e-9)


# ------------------------------------------------------------------ memory pressure

def test_memory_pressure_counts_the_state_as_memory_does():
    """16 bytes per parameter divided per ZeRO stage = memory()'s model state (an
    independent implementation), for every sharding and two worker counts."""
    from scalemodel.efficiency import memory_pressure

    cfg = sm.TransformerConfig(layers=40, hidden=5120, heads=40, ffn=20480, vocab=50368,
                               seq=2048, micro_batch=4, dtype="bf16", tied_embeddings=True,
                               gated_ffn=False, norm="layernorm", bias=True,
                               learned_positions=2048, name="mpt-13b")
    for sharding in ("none", "zero1", "zero2", "zero3"):
        for n in (8, 64):
            want = float(sm.memory(cfg, n, sharding=sharding, gpu="a100-40gb").model_state)
            got = memory_pressure(cfg.parameter_count, n, "a100-40gb", sharding)
            assert got.state_bytes == pytest.approx(want, rel=1e-12)
            assert got.share == pytest.approx(want / sm.get_gpu("a100-40gb").hbm_bytes)


def test_memory_pressure_flags_the_llm_foundry_rows_on_either_side_of_the_threshold():
    """The rows the threshold was read from fall on their sides of it (MPT sizes from
    benchmarks/data/published_sharded.csv)."""
    from scalemodel.efficiency import MEMORY_PRESSURE_SHARE, memory_pressure

    slow = [(12_853_954_560, 8, "a100-40gb"), (64_862_437_376, 64, "a100-40gb"),
            (64_862_437_376, 32, "a100-80gb"), (64_862_437_376, 32, "h100-sxm")]
    at_level = [(29_975_214_080, 32, "a100-40gb"), (6_658_859_008, 8, "a100-40gb"),
                (64_862_437_376, 128, "a100-40gb"), (12_853_954_560, 8, "h100-sxm")]
    for p, n, g in slow:
        r = memory_pressure(p, n, g)
        assert r.pressured and r.share >= MEMORY_PRESSURE_SHARE and "not represent" in r.text
    for p, n, g in at_level:
        r = memory_pressure(p, n, g)
        assert not r.pressured and r.share < MEMORY_PRESSURE_SHARE
        assert "not represent" not in r.text


def test_check_calibration_memory_warns_only_when_pressured():
    import warnings

    from scalemodel.efficiency import check_calibration_memory
    from scalemodel.exceptions import CalibrationWarning

    with pytest.warns(CalibrationWarning, match=r"mpt-13b on 8: .*59\.9%"):
        r = check_calibration_memory(12_853_954_560, 8, "a100-40gb", label="mpt-13b on 8")
    assert r.pressured
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_calibration_memory(12_853_954_560, 16, "a100-40gb").pressured


@pytest.mark.parametrize("kwargs, name", [
    (dict(parameters=0), "parameters"), (dict(parameters=float("nan")), "parameters"),
    (dict(parameters="7b"), "parameters"), (dict(n=0), "n"), (dict(n=2.5), "n"),
    (dict(n=True), "n"), (dict(sharding="fsdp"), "sharding"),
])
def test_memory_pressure_bad_input_names_the_value(kwargs, name):
    from scalemodel.efficiency import memory_pressure
    from scalemodel.exceptions import InvalidParameterError, ParameterTypeError

    args = dict(parameters=1e9, n=8, gpu="h100-sxm", sharding="zero3") | kwargs
    with pytest.raises((InvalidParameterError, ParameterTypeError), match=name):
        memory_pressure(**args)
