"""implementation= presets on the planner's API and CLI, and codec costs per GPU."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.compressors import (IMPLEMENTATIONS, PowerSGD, SignSGD, TopK,
                                    for_implementation)
from scalemodel.exceptions import InvalidParameterError, UnknownNameError


def _rows(plan):
    return {r.compressor: r for r in plan.rows}


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_plan_uses_the_presets_formats_and_families(impl):
    plan = sm.plan_compression("resnet50", "10Gbps", n=8, implementation=impl)
    preset = IMPLEMENTATIONS[impl]
    assert plan.implementation == impl
    assert f"implementation {impl}" in str(plan).splitlines()[0]
    assert f"with {impl}'s compressors" in plan.message
    rows = _rows(plan)
    assert set(rows) == {c for c in sm.planner.DEFAULT_PLAN_COMPRESSORS
                         if c in preset.families}
    for name, row in rows.items():
        if name == "none":
            continue
        wanted = {**preset.settings.get("*", {}), **preset.settings.get(name, {})}
        for attr, value in wanted.items():
            if hasattr(row.config, attr):
                assert getattr(row.config, attr) == value, (impl, name, attr)


def test_grace_formats_reach_the_rows():
    rows = _rows(sm.plan_compression("resnet50", "10Gbps", n=8, implementation="grace-tf"))
    assert rows["signsgd"].config.sign_bits == 8 and rows["signsgd"].config.per_tensor
    assert rows["signsgd"].ratio == pytest.approx(4.0, rel=1e-3)  # a byte per sign
    assert rows["powersgd"].config.matrix_view == "tensorflow"
    assert rows["randomk"].config.shared_seed and rows["randomk"].collective == "ring"
    torch_rows = _rows(sm.plan_compression("resnet50", "10Gbps", n=8,
                                           implementation="grace-torch"))
    assert torch_rows["topk"].config.index_bytes == 8
    ds = _rows(sm.plan_compression("resnet50", "10Gbps", n=8, implementation="deepspeed"))
    assert ds["signsgd"].config.collective == "alltoall" and ds["signsgd"].config.after_backward
    # bytes per worker: the packed signs in the all-to-all, 1/n of them in the all-gather
    assert ds["signsgd"].ratio == pytest.approx(32 / (1 + 1 / 8), rel=1e-3)


@pytest.mark.parametrize("impl", ["grace-tf", "grace-torch", "deepspeed", "horovod"])
def test_scaling_factor_is_the_preset_compressors(impl):
    for name in ("fp16", "signsgd", "topk:0.01", "powersgd:2", "int8"):
        if name.split(":")[0] not in IMPLEMENTATIONS[impl].families:
            with pytest.raises(InvalidParameterError, match="Implementations providing it"):
                sm.compressed_scaling_factor("resnet50", name, 8, 10e9, implementation=impl)
            continue
        got = sm.compressed_scaling_factor("resnet50", name, 8, 10e9, implementation=impl)
        # the preset's wire format, with the implementation's codec costs (grace-tf has a
        # measured table of its own, scalemodel/data/codec/grace-tf-v100.json)
        codec = sm.ClusterProfile(name="c", provenance={"source": "test"}, codec_costs={
            f: {"encode": c.encode, "decode": c.decode, "encode_per_rank": c.encode_per_rank,
                "decode_per_rank": c.decode_per_rank, "launch": c.launch}
            for f, c in sm.compressors.codec_costs_for(
                None, gpu="v100", implementation=impl).items()})
        want = sm.compressed_scaling_factor("resnet50", for_implementation(name, impl), 8,
                                            10e9, cluster=codec)
        assert got == pytest.approx(want, rel=1e-12)


def test_per_tensor_overrides_the_fusion_for_compressed_tensors():
    fused = sm.compressed_scaling_factor("resnet50", "fp16", 8, 10e9, fusion="ddp")
    grace = sm.compressed_scaling_factor("resnet50", "fp16", 8, 10e9, fusion="ddp",
                                         implementation="grace-tf")
    # the same bytes, but one collective (latency, launches) per tensor: slower
    assert grace < fused
    assert grace == sm.compressed_scaling_factor("resnet50", "fp16", 8, 10e9, fusion="ddp",
                                                 implementation="grace-torch")


def test_an_explicit_compressor_setting_wins_over_the_preset():
    comp = PowerSGD(rank=2, matrix_view="tensorflow")
    got = sm.compressed_scaling_factor("resnet50", comp, 8, 10e9, implementation="grace-torch")
    pt = sm.compressed_scaling_factor("resnet50", PowerSGD(rank=2), 8, 10e9,
                                      implementation="grace-torch")
    assert got == sm.compressed_scaling_factor(
        "resnet50", PowerSGD(rank=2, matrix_view="tensorflow", per_tensor=True,
                             min_compression_rate=0.0, codec_stream="compute"), 8, 10e9)
    assert got != pt
    row = _rows(sm.plan_compression("resnet50", "10Gbps", n=8, implementation="grace-torch",
                                    compressors=[comp]))["powersgd"]
    assert row.config.matrix_view == "tensorflow"


def test_default_implementation_keeps_every_family_in_textbook_form():
    plan = sm.plan_compression("resnet50", "10Gbps", n=8)
    assert plan.implementation == "pytorch"
    rows = _rows(plan)
    assert set(rows) == set(sm.planner.DEFAULT_PLAN_COMPRESSORS)
    assert rows["signsgd"].config == SignSGD() and rows["topk"].config.index_bytes == 4
    with pytest.raises(InvalidParameterError, match="grace-tf, grace-torch"):
        sm.plan_compression("resnet50", "10Gbps", n=8, implementation="pytorch",
                            compressors=["topk"])


def test_errors_name_the_providers_and_the_nearest_names():
    with pytest.raises(InvalidParameterError) as exc:
        sm.breakeven_bandwidth("resnet50", TopK(), n=8, implementation="horovod")
    assert "grace-tf, grace-torch" in str(exc.value) and "horovod" in str(exc.value)
    with pytest.raises(UnknownNameError, match="grace-tf"):
        sm.plan_compression("resnet50", "10Gbps", implementation="gracetf")
    with pytest.raises(UnknownNameError, match="deepspeed"):
        sm.compressed_scaling_factor("resnet50", "fp16", 8, 10e9, implementation="deepspeedd")


def test_breakeven_takes_the_implementation():
    a = sm.breakeven_bandwidth("resnet50", "fp16", n=8)
    b = sm.breakeven_bandwidth("resnet50", "fp16", n=8, implementation="grace-tf")
    assert b < a  # per-tensor collectives and launches: it wins only on slower links


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "scalemodel", *args], capture_output=True,
                          text=True)


def test_cli_implementation():
    out = _cli("plan", "--model", "resnet50", "--bw", "10Gbps", "--n", "8",
               "--implementation", "grace-tf", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["implementation"] == "grace-tf"
    assert {r["compressor"] for r in data["rows"]} <= set(IMPLEMENTATIONS["grace-tf"].families)
    out = _cli("breakeven", "--model", "resnet50", "--n", "8", "--implementation", "horovod")
    assert out.returncode == 0, out.stderr
    assert "implementation horovod" in out.stdout and "topk" not in out.stdout
    bad = _cli("plan", "--model", "resnet50", "--bw", "10Gbps", "--implementation", "gracetf")
    assert bad.returncode != 0 and "grace-tf" in bad.stderr
    bad = _cli("breakeven", "--model", "resnet50", "--implementation", "horovod",
               "--compressors", "topk")
    assert bad.returncode != 0 and "grace-tf" in bad.stderr


# --------------------------------------------------------------------------- per GPU


def test_codec_costs_scale_with_hbm_bandwidth_exactly():
    from scalemodel.codec_costs import codec_costs

    h100 = codec_costs(gpu="h100-sxm")
    for gpu in ("v100", "a100-40gb", "a100-80gb", "h200"):
        spec = sm.get_gpu(gpu)
        factor = 3350e9 / spec.hbm_bandwidth  # the datasheets' HBM bandwidths
        got = codec_costs(gpu=gpu)
        for family, ref in h100.items():
            for k in ("encode", "decode", "encode_per_rank", "decode_per_rank"):
                assert getattr(got[family], k) == pytest.approx(getattr(ref, k) * factor,
                                                                rel=1e-12)
            assert got[family].launch == ref.launch  # the launch floor is kept
    assert h100 == sm.compressors.DEFAULT_CODEC_COSTS  # the table's own GPU: unscaled
    v100 = codec_costs(gpu="v100")
    assert all(v100[f].encode > h100[f].encode for f in h100 if f != "none")


def test_a_v100_profile_pays_more_for_its_codecs_than_an_h100():
    args = ("resnet50", "topk:0.01", 16, 10e9)
    own = sm.compressed_scaling_factor(*args)  # resnet50 ran on V100s
    assert own == sm.compressed_scaling_factor(*args, gpu="v100")
    assert own < sm.compressed_scaling_factor(*args, gpu="a100-80gb") \
        < sm.compressed_scaling_factor(*args, gpu="h100-sxm")
    # the uncompressed answer does not depend on the codec GPU
    assert sm.compressed_scaling_factor("resnet50", "none", 16, 10e9, gpu="v100") == \
        sm.compressed_scaling_factor("resnet50", "none", 16, 10e9, gpu="h100")
    a = sm.breakeven_bandwidth("resnet50", "topk", n=16, gpu="v100")
    b = sm.breakeven_bandwidth("resnet50", "topk", n=16, gpu="h100")
    assert a < b  # slower codecs pay off only on slower links
    plan = sm.plan_compression("resnet50", "10Gbps", n=16)
    assert "x 3.72" in plan.codec_note and "900 GB/s" in plan.codec_note


def test_profile_gpu_from_the_device_text():
    from scalemodel.codec_costs import gpu_for_device, profile_gpu

    assert profile_gpu(sm.load_profile("bert")).name == "v100-sxm2-32gb"
    assert profile_gpu(sm.load_profile("bert-base-h100")).name == "h100-sxm"
    assert profile_gpu(sm.load_profile("bert"), "a100").name == "a100-40gb"
    assert gpu_for_device("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert gpu_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert gpu_for_device("") is None


def test_measured_cluster_costs_are_not_scaled_and_implementation_keys_win():
    from scalemodel.codec_costs import codec_costs

    lab = sm.ClusterProfile(name="lab", provenance={"source": "test"}, codec_costs={
        "topk": {"encode": 1e-10, "decode": 2e-10, "launch": 1e-5},
        "grace-tf/topk": {"encode": 5e-10, "decode": 6e-10, "launch": 3e-4}})
    assert codec_costs(lab, gpu="v100")["topk"].encode == 1e-10
    assert codec_costs(lab, gpu="v100", implementation="grace-torch")["topk"].encode == 1e-10
    grace = codec_costs(lab, gpu="v100", implementation="grace-tf")["topk"]
    assert (grace.encode, grace.launch) == (5e-10, 3e-4)
    a = sm.compressed_scaling_factor("resnet50", "topk:0.01", 8, 10e9, cluster=lab,
                                     implementation="grace-tf")
    b = sm.compressed_scaling_factor("resnet50", "topk:0.01", 8, 10e9, cluster=lab,
                                     implementation="grace-torch")
    assert a < b
    plan = sm.plan_compression("resnet50", "10Gbps", n=8, cluster=lab,
                               implementation="grace-tf", compressors=["topk"])
    assert plan.codec_note == "codec costs: measured, cluster lab"


# --------------------------------------------------------------------------- fitted clusters


def _fitted(**kw):
    return sm.ClusterProfile(name="fit", provenance={"source": "test", "runs": [
        {"bw": 10e9, "n": 8}]}, **kw)


def _crosses(model, comp, n, bw, cluster):
    """Whether compression wins just below ``bw`` and loses just above (direct check)."""
    def gain(b):
        return (sm.compressed_scaling_factor(model, comp, n, b, cluster=cluster)
                - sm.compressed_scaling_factor(model, "none", n, b, cluster=cluster))
    return gain(bw * (1 - 1e-4)) > 0 > gain(bw * (1 + 1e-4))


def test_breakeven_above_a_fitted_ceiling_follows_the_utilization_table():
    table = dict(table_line_rate=[1e9, 10e9, 25e9], table_utilization=[0.9, 0.5, 0.3])
    cl = _fitted(ceiling=5e9, intervals={"ceiling": (4e9, 6.5e9)}, **table)
    res = sm.breakeven_bandwidth("resnet50", "topk:0.01", n=8, cluster=cl, detail=True)
    assert math.isfinite(res.bw) and res.basis == "table" and not res.within
    assert res.calibrated == (1e9, 25e9)
    assert "outside what this calibration can tell" in res.message
    # the same line rate as the table alone predicts, checked by scaling factors
    free = sm.ClusterProfile(name="t", provenance={"source": "test"}, **table)
    assert _crosses("resnet50", "topk:0.01", 8, res.bw, free)
    assert sm.breakeven_bandwidth("resnet50", "topk:0.01", n=8, cluster=cl) == res.bw


def test_breakeven_above_a_fitted_ceiling_holds_the_calibrated_utilization():
    cl = _fitted(ceiling=5e9)
    bws = sm.breakeven_bandwidth("resnet50", "powersgd:4", n=[8, 16], cluster=cl)
    assert np.all(np.isfinite(bws)) and np.all(bws > 10e9)
    free = sm.ClusterProfile(name="u", utilization=0.5, provenance={"source": "test"})
    for n, bw in zip((8, 16), bws):
        assert _crosses("resnet50", "powersgd:4", n, bw, free)
    # nothing to extrapolate by: the model's own answer, marked outside
    bare = sm.ClusterProfile(name="bare", ceiling=5e9, provenance={"source": "test"})
    res = sm.breakeven_bandwidth("resnet50", "powersgd:4", n=8, cluster=bare, detail=True)
    assert math.isinf(res.bw) and res.basis == "ceiling" and not res.within
    # below the ceiling nothing changes: the model's answer, within the calibration
    plain = sm.breakeven_bandwidth("resnet50", "powersgd:4", n=8, detail=True)
    assert plain.basis == "model" and plain.within


def test_cli_breakeven_marks_answers_outside_the_calibration(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(_fitted(ceiling=5e9).to_dict()))
    out = _cli("breakeven", "--model", "resnet50", "--n", "8", "--cluster", str(path),
               "--compressors", "topk:0.01")
    assert out.returncode == 0, out.stderr
    assert " *" in out.stdout and "outside what this calibration can tell" in out.stdout
    out = _cli("breakeven", "--model", "resnet50", "--n", "8", "--cluster", str(path),
               "--compressors", "topk:0.01", "--json")
    row = json.loads(out.stdout)["results"][0]
    assert row["within_calibration"] == [False] and row["basis"] == ["utilization"]


def test_plan_is_feasible_only_over_the_whole_interval():
    cl = _fitted(ceiling=5e9, intervals={"ceiling": (3e9, 8e9)})
    plan = sm.plan_compression("resnet50", "10Gbps", n=8, cluster=cl)
    for row in plan.rows:
        lo, hi = row.interval
        assert lo <= row.scaling_factor <= hi
        assert row.feasible == (lo >= 0.9)
        # the interval is answer_interval's over the same clusters, computed directly
        iv = sm.intervals.answer_interval(lambda c, r=row: sm.compressed_scaling_factor(
            "resnet50", r.config, 8, 10e9, cluster=c), cl)
        assert (lo, hi) == pytest.approx((iv.low, iv.high), rel=1e-12)
    # a setting that reaches the target at the point but not at the pessimistic end is
    # searched further, or said
    point = sm.plan_compression("resnet50", "10Gbps", n=8, cluster=sm.ClusterProfile(
        name="p", ceiling=5e9, provenance={"source": "test"}), compressors=["powersgd"])
    ranged = next(r for r in plan.rows if r.compressor == "powersgd")
    assert ranged.setting < point.rows[0].setting  # a lower rank to be safe
    recommended = [r for r in plan.rows if r.recommended]
    assert [r.speedup for r in recommended] == sorted((r.speedup for r in recommended),
                                                      reverse=True)
    assert all(r.speedup_interval[0] > 1 for r in recommended)
    assert "speedup over the fit" in str(plan)


def test_none_of_these_beats_no_compression(tmp_path):
    slow = sm.ClusterProfile(name="slow", provenance={"source": "test"}, codec_costs={
        f: {"encode": 1e-8, "decode": 1e-8} for f in sm.compressors.DEFAULT_CODEC_COSTS})
    plan = sm.plan_compression("bert", "10Gbps", cluster=slow, compressors=["fp16", "powersgd"])
    assert plan.best is None and not plan.no_compression_needed
    assert plan.message.startswith("none of these beats no compression")
    assert all(not r.beats_uncompressed for r in plan.rows)
    path = tmp_path / "slow.json"  # the CLI agrees: the same message, no settings snippet
    path.write_text(json.dumps(slow.to_dict()))
    out = _cli("plan", "--model", "bert", "--bw", "10Gbps", "--cluster", str(path),
               "--compressors", "fp16,powersgd")
    assert out.returncode == 0, out.stderr
    assert "none of these beats no compression" in out.stdout
    assert "# scalemodel plan:" not in out.stdout
    good = _cli("plan", "--model", "bert", "--bw", "10Gbps", "--compressors", "powersgd")
    assert "# scalemodel plan:" in good.stdout


# --------------------------------------------------------------------------- caches


def test_cached_evaluations_give_the_same_answers():
    from scalemodel.model import clear_caches

    clear_caches()
    first = sm.plan_compression("bert", "10Gbps")
    again = sm.plan_compression("bert", "10Gbps")
    other = sm.plan_compression("bert", "12Gbps")  # shares the scenario's cached evaluations
    clear_caches()
    fresh = sm.plan_compression("bert", "12Gbps")
    for a, b in ((first, again), (other, fresh)):
        assert [(r.compressor, r.setting, r.scaling_factor) for r in a.rows] == \
            [(r.compressor, r.setting, r.scaling_factor) for r in b.rows]
    # one worker count (no masks) and several agree entry by entry
    bw = np.logspace(9, 11, 7)
    one = sm.compressed_scaling_factor("resnet50", "powersgd:4", 8, bw)
    many = sm.compressed_scaling_factor("resnet50", "powersgd:4", np.array([8, 16])[:, None],
                                        bw)
    assert np.array_equal(one, many[0]) and one.shape == (7,)
    assert isinstance(sm.compressed_scaling_factor("resnet50", "fp16", 8, 1e10), float)


def test_plan_says_when_the_line_rate_is_beyond_the_calibration():
    cl = _fitted(ceiling=5e9)
    far = sm.plan_compression("resnet50", "25Gbps", n=8, cluster=cl, compressors=["fp16"])
    assert far.outside_calibration
    assert "outside what this calibration can tell" in far.message
    assert "up to 10 Gbit/s" in far.message
    near = sm.plan_compression("resnet50", "10Gbps", n=8, cluster=cl, compressors=["fp16"])
    assert not near.outside_calibration and "outside" not in near.message
    # no ceiling: the line rate moves the answer, nothing to say
    plain = sm.plan_compression("resnet50", "25Gbps", n=8, cluster=_fitted(utilization=0.5),
                                compressors=["fp16"])
    assert not plain.outside_calibration


def test_an_unhashable_compressor_class_is_evaluated_without_the_cache():
    import attrs

    @attrs.define(eq=True, frozen=False, slots=False)
    class Mutable(sm.TopK):
        __hash__ = None  # as a mutable attrs class of one's own would be

    comp = Mutable(density=0.01)
    with pytest.raises(TypeError):
        hash(comp)
    assert sm.compressed_scaling_factor("resnet50", comp, 8, 10e9) == \
        sm.compressed_scaling_factor("resnet50", sm.TopK(density=0.01), 8, 10e9)


def test_breakeven_carries_its_interval_over_the_fit():
    cl = _fitted(ceiling=5e9, intervals={"ceiling": (4e9, 6.5e9)})
    res = sm.breakeven_bandwidth("resnet50", "topk:0.01", n=8, cluster=cl, detail=True)
    lo, hi = res.interval
    assert lo < res.bw < hi
    # each end is the answer on a corner cluster, asked directly
    worst, best = cl.corners()
    ends = sorted(sm.breakeven_bandwidth("resnet50", "topk:0.01", n=8, cluster=c)
                  for c in (worst, best))
    assert (lo, hi) == pytest.approx(tuple(ends), rel=1e-12)
    assert sm.breakeven_bandwidth("resnet50", "topk:0.01", n=8, detail=True).interval is None
