"""A prediction for a memory-pressured job: the model state per GPU that job_memory_pressure
counts, the slowdown factor recomputed from LLM Foundry's table, and what iteration_time
does with it (a ModelWarning, the point kept, the slow ends of the intervals widened)."""

import csv
import warnings
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel.efficiency import (MEMORY_PRESSURE_SLOWDOWN, STATE_BYTES_PER_PARAMETER,
                                   job_memory_pressure, memory_pressure)
from scalemodel.exceptions import ModelWarning

from test_efficiency import MPT13, NODE, fit8  # noqa: F401  (fit8: the shared one-run fit)

SHARDED = Path(__file__).parents[1] / "benchmarks" / "data" / "published_sharded.csv"
MPT70 = dict(MPT13, layers=80, hidden=8192, heads=64, ffn=32768, name="mpt-70b")


def _profile(cfg, gpu="h100-sxm", **kw):
    return sm.transformer_profile(sm.TransformerConfig(**cfg), gpu, **kw)


def test_the_slowdown_is_the_largest_ratio_of_the_published_pairs():
    """For every LLM Foundry row that memory_pressure flags, the MFU of the same model and
    GPU at the next larger GPU count over its own; the constant is the largest, to 3
    decimals, and every such next row is no longer pressured."""
    rows = list(csv.DictReader(SHARDED.read_text().splitlines()))
    ratios = []
    for r in rows:
        if not memory_pressure(int(r["parameters"]), int(r["gpus"]), r["gpu"]).pressured:
            continue
        later = sorted((int(o["gpus"]), o) for o in rows
                       if (o["model"], o["gpu"]) == (r["model"], r["gpu"])
                       and int(o["gpus"]) > int(r["gpus"]))
        nxt = later[0][1]
        assert not memory_pressure(int(nxt["parameters"]), int(nxt["gpus"]),
                                   nxt["gpu"]).pressured
        ratios.append(float(nxt["mfu_percent"]) / float(r["mfu_percent"]))
    assert len(ratios) == 4
    assert MEMORY_PRESSURE_SLOWDOWN == round(max(ratios), 3)
    assert min(ratios) > 1.09  # "1.10 to 1.36" in the warning's text
    assert f"1.10 to {MEMORY_PRESSURE_SLOWDOWN:.2f}" in memory_pressure(
        64_862_437_376, 64, "a100-40gb").text


@pytest.mark.parametrize("sharding, tp, pp, group, over", [
    ("zero3", 1, 1, None, {"params": 32, "grads": 32, "optimizer": 32}),
    ("zero1", 1, 1, None, {"params": 1, "grads": 1, "optimizer": 32}),
    ("zero2", 2, 1, None, {"params": 1, "grads": 16, "optimizer": 16}),
    ("zero3", 2, 2, None, {"params": 8, "grads": 8, "optimizer": 8}),
    ("zero3", 1, 1, 8, {"params": 8, "grads": 8, "optimizer": 8}),
    ("hybrid_shard", 1, 1, None, {"params": 8, "grads": 8, "optimizer": 8}),
])
def test_the_state_per_gpu_is_divided_by_tp_pp_and_the_shard_group(sharding, tp, pp, group,
                                                                    over):
    """State = sum over parts of bytes x parameters / (tp pp) / (GPUs the part is sharded
    over), written out by hand for 32 GPUs of 8 per node."""
    prof = _profile(MPT70)
    params = sm.TransformerConfig(**MPT70).parameter_count
    got = job_memory_pressure(prof, 32, sharding, shard_group=group, tp=tp, pp=pp,
                              gpus_per_node=8)
    gpu = params / (tp * pp)
    if pp > 1:  # the heaviest stage's, as memory() holds it (Megatron-LM's placement)
        from scalemodel.memory import gpu_params
        from scalemodel.parallel import resolve_model_parallel
        gpu = gpu_params(sm.TransformerConfig(**MPT70), params,
                         resolve_model_parallel(tp, pp, microbatches=4))
        assert gpu > params / (tp * pp)
    want = sum(b * gpu / over[part] for part, b in STATE_BYTES_PER_PARAMETER.items())
    assert got.state_bytes == pytest.approx(want, rel=1e-12)


def test_what_it_cannot_count_is_none():
    prof = _profile(MPT70)
    assert job_memory_pressure(prof, 32, "zero3", offload="optimizer") is None
    assert job_memory_pressure(sm.load_profile("resnet50"), 8, "zero3") is None
    assert job_memory_pressure(prof, 4, "zero3", tp=8) is None  # not one replica


def test_a_pressured_job_keeps_its_point_and_widens_its_slow_ends():
    """MPT-70B on 32 H100 (LLM Foundry row 28's state, 37.8 %) without a fitted cluster:
    the time interval reaches the point times the factor, the scaling factor's low end the
    point over it; 64 GPUs (18.9 %) stay a point, without a warning."""
    prof = _profile(MPT70)
    kw = dict(sharding="zero3", activation_checkpointing="full", **NODE)
    with pytest.warns(ModelWarning, match=r"mpt-70b on 32 GPUs: model state .* 37\.8%.*"
                                          r"intervals is taken 1\.364 times"):
        it = sm.iteration_time(prof, 32, "400Gbps", **kw)
    assert "37.8%" in it.memory_pressure
    assert float(sm.scaling_factor(prof, 32, "400Gbps", **kw)) == pytest.approx(
        it.scaling_factor, rel=1e-12)  # the point is the model's
    assert it.total_interval == (it.total, pytest.approx(it.total * MEMORY_PRESSURE_SLOWDOWN,
                                                         rel=1e-12))
    assert it.scaling_factor_interval == (
        pytest.approx(it.scaling_factor / MEMORY_PRESSURE_SLOWDOWN, rel=1e-12),
        it.scaling_factor)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelWarning)
        roomy = sm.iteration_time(prof, 64, "400Gbps", **kw)
    assert roomy.memory_pressure == ""
    assert roomy.total_interval == (roomy.total, roomy.total)


def test_on_a_fitted_cluster_the_doubts_compound(fit8, monkeypatch):
    """The fit's own interval and the pressure's: the slowdown multiplies the slowest
    step the fit allows the job without pressure (the factor was measured against the
    same model on more GPUs, not against the model's point)."""
    _, fit = fit8
    prof = _profile(MPT70)
    kw = dict(sharding="zero3", activation_checkpointing="full",
              intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    with pytest.warns(ModelWarning, match="memory"):
        it = sm.iteration_time(prof, 32, "400Gbps", cluster=fit.cluster, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        roomy = sm.iteration_time(prof, 64, "400Gbps", cluster=fit.cluster, **kw)
    assert roomy.total_interval[1] > roomy.total  # the fit's own (carried efficiency)
    monkeypatch.setattr(sm.efficiency, "MEMORY_PRESSURE_SHARE", 1.0)  # as if unpressured
    bare = sm.iteration_time(prof, 32, "400Gbps", cluster=fit.cluster, **kw)
    assert bare.memory_pressure == "" and bare.total == it.total
    assert bare.total_interval[1] > bare.total
    assert it.total_interval == (bare.total_interval[0], pytest.approx(
        bare.total_interval[1] * MEMORY_PRESSURE_SLOWDOWN, rel=1e-12))
    assert it.scaling_factor_interval == (pytest.approx(
        bare.scaling_factor_interval[0] / MEMORY_PRESSURE_SLOWDOWN, rel=1e-12),
        bare.scaling_factor_interval[1])


def test_the_cli_labels_the_interval_and_warns(capsys, tmp_path):
    from scalemodel.cli import main

    cfg = tmp_path / "mpt-70b.json"
    sm.save_profile(_profile(MPT70), cfg)
    rc = main(["iteration", "--model", str(cfg), "--n", "32", "--bw", "400Gbps",
               "--sharding", "zero3", "--gpus-per-node", "8", "--nics-per-node", "8"])
    out, err = capsys.readouterr()
    assert rc in (0, None)
    assert "with memory pressure" in out
    assert "intervals is taken 1.364 times" in err


def test_the_interval_functions_agree_with_iteration_time(fit8, capsys, tmp_path):
    """scaling_factor_interval and iteration_time_interval, and so the CLI's scaling
    table, take a pressured job's slow end as iteration_time does; a roomy job's are
    the fit's alone."""
    from scalemodel.cli import main
    from scalemodel.intervals import iteration_time_interval, scaling_factor_interval

    _, fit = fit8
    prof = _profile(MPT70)
    kw = dict(sharding="zero3", activation_checkpointing="full",
              intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    for n, pressured in ((32, True), (64, False)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            it = sm.iteration_time(prof, n, "400Gbps", cluster=fit.cluster, **kw)
            sf = scaling_factor_interval(prof, n, "400Gbps", cluster=fit.cluster, **kw)
            t = iteration_time_interval(prof, n, "400Gbps", cluster=fit.cluster, **kw)
        said = [str(w.message) for w in seen if issubclass(w.category, ModelWarning)]
        assert bool(said) is pressured and bool(sf.memory_pressure) is pressured
        assert sf.pair == pytest.approx(it.scaling_factor_interval, rel=1e-12)
        assert t.pair == pytest.approx(it.total_interval, rel=1e-12)
        assert ("for memory pressure" in sf.describe(str)) is pressured
    sm.save_cluster(fit.cluster, tmp_path / "c.json")
    sm.save_profile(prof, tmp_path / "mpt-70b.json")
    rc = main(["scaling", "--model", str(tmp_path / "mpt-70b.json"), "--n", "32",
               "--bw", "400Gbps", "--sharding", "zero3", "--activation-checkpointing",
               "full", "--gpus-per-node", "8", "--nics-per-node", "8", "--intra-bw",
               repr(sm.get_gpu("h100").intra_node_bw), "--cluster", str(tmp_path / "c.json"),
               "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, None) and "intervals is taken 1.364 times" in err
    import json
    row = json.loads(out)["results"][0]
    with pytest.warns(ModelWarning, match="memory"):
        api = scaling_factor_interval(prof, 32, "400Gbps", cluster=fit.cluster, **kw)
    assert row["memory_pressure"] and row["scaling_factor_interval"] == pytest.approx(
        list(api.pair), rel=1e-9)



@pytest.mark.parametrize("kw, exc, name", [
    (dict(n="x"), sm.ParameterTypeError, "n"),
    (dict(n=0), sm.InvalidParameterError, "n"),
    (dict(n=32.5), sm.InvalidParameterError, "n"),
    (dict(n=True), sm.ParameterTypeError, "n"),
    (dict(tp=0), sm.InvalidParameterError, "tp"),
    (dict(pp="2"), sm.ParameterTypeError, "pp"),
    (dict(shard_group=[8]), sm.ParameterTypeError, "shard_group"),
    (dict(sharding="bogus"), sm.InvalidParameterError, "sharding"),
])
def test_bad_input_names_the_value(kw, exc, name):
    args = dict(n=32, sharding="zero3") | kw
    with pytest.raises(exc, match=name):
        job_memory_pressure(_profile(MPT70), args.pop("n"), args.pop("sharding"), **args)


def test_the_solvers_warn_that_they_leave_the_slowdown_out():
    """min_compression and required_bandwidth of a memory-pressured job: the answer is the
    model's, and a ModelWarning says the slowdown is not in it; a roomy job: no warning."""
    prof = _profile(MPT70)
    kw = dict(sharding="zero3", activation_checkpointing="full", **NODE)
    with pytest.warns(ModelWarning, match=r"mpt-70b on 32 GPUs: .*37\.8%.*the compression "
                                          r"ratio and its interval leave that slowdown out"):
        c = sm.min_compression(prof, "100Gbps", n=32, **kw)
    with pytest.warns(ModelWarning, match="the required line rate and its interval leave"):
        b = sm.required_bandwidth(prof, n=32, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelWarning)
        assert sm.min_compression(prof, "100Gbps", n=64, **kw).feasible
        sm.required_bandwidth(prof, n=64, **kw)
    assert c.feasible and b.bw > 0
