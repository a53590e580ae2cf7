"""tp=, pp=, microbatches= on the plan, the sensitivities and the best bucket size (issue 20
item 4): each answer is for the data-parallel dimension of the job, the same as the
solvers' (``scaling_factor(..., tp=2)``), and said in the job's GPUs and line rate."""

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.collectives import CollectiveOptions
from scalemodel.fusion import MiB, DDPBuckets
from scalemodel.efficiency import gpu_topology
from scalemodel.parallel import dp_options, model_parallel_profile, resolve_model_parallel
from scalemodel.topology import resolve_topology

NET = dict(gpus_per_node=8, nics_per_node=8)
JOBS = [dict(tp=2), dict(tp=2, pp=4, microbatches=8), dict(pp=2, microbatches=4)]


@pytest.mark.parametrize("mp", JOBS, ids=str)
def test_plan_none_row_is_the_scaling_factor(mp):
    plan = sm.plan_compression("llama-2-13b", "100Gbps", n=256, compressors=["none", "fp16"],
                               **NET, **mp)
    sf = sm.scaling_factor("llama-2-13b", 256, "100Gbps", **NET, **mp)
    none = next(r for r in plan.rows if r.compressor == "none")
    assert none.scaling_factor == pytest.approx(sf, rel=1e-12)
    assert plan.uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)
    ideal = sm.min_compression("llama-2-13b", "100Gbps", n=256, **NET, **mp)
    assert plan.ideal_ratio == ideal.ratio
    assert (plan.n, plan.bw) == (256, 100e9)  # the job's, as asked
    assert (plan.settings["tp"], plan.settings["pp"]) == (mp.get("tp", 1), mp.get("pp", 1))
    replicas = 256 // (mp.get("tp", 1) * mp.get("pp", 1))
    assert f"{replicas} replicas" in plan.message


def test_plan_rows_equal_a_plan_on_one_gpu_of_the_job():
    """Independent of the planner's mapping: the plan of the stage profile (one GPU of the
    job, eqs. tp-compute and pp-iteration) on n / (tp pp) workers, one data-parallel ring
    per node's share of NICs, gives the same rows."""
    mp = resolve_model_parallel(2, 4, 8)
    profile = sm.load_profile("llama-2-13b")  # its GPU's intra-node link, as the call's
    options = CollectiveOptions.from_topology(resolve_topology(gpu_topology(profile), **NET))
    stage = model_parallel_profile(profile, mp, options)
    ring, scale = dp_options(options, mp)
    comps = ["none", "fp16", "powersgd:4", "topk:0.01"]
    plan = sm.plan_compression("llama-2-13b", "25Gbps", n=256, compressors=comps,
                               tp=2, pp=4, microbatches=8, **NET)
    direct = sm.plan_compression(stage, 25e9 * scale, n=32, compressors=comps,
                                 gpus_per_node=ring.gpus_per_node,
                                 nics_per_node=ring.nics_per_node)
    got = {r.compressor: r.scaling_factor for r in plan.rows}
    want = {r.compressor: r.scaling_factor for r in direct.rows}
    assert got.keys() == want.keys()
    for name in got:
        assert got[name] == pytest.approx(want[name], rel=1e-9), name
    assert got["none"] < 0.9 < max(got.values())  # a plan that has to choose


def test_plan_refuses_what_the_solvers_refuse():
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.plan_compression("llama-2-13b", "100Gbps", n=250, tp=4, **NET)
    assert exc.value.parameter == "n"
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.plan_compression("resnet50", "100Gbps", n=64, tp=2, **NET)
    assert exc.value.parameter == "tp"


@pytest.mark.parametrize("mp", JOBS, ids=str)
def test_sensitivities_of_the_data_parallel_dimension(mp):
    bw = np.array([25e9, 100e9])
    s = sm.sensitivities("llama-2-13b", 256, bw, **NET, **mp)
    sf = sm.scaling_factor("llama-2-13b", 256, bw, **NET, **mp)
    np.testing.assert_allclose(s.scaling_factor, sf, rtol=1e-12)
    h = 1e-4  # d_bw is per bit/s of the NIC line rate asked: central difference
    up = sm.scaling_factor("llama-2-13b", 256, bw * (1 + h), **NET, **mp)
    down = sm.scaling_factor("llama-2-13b", 256, bw * (1 - h), **NET, **mp)
    np.testing.assert_allclose(s.d_bw, (up - down) / (2 * h * bw), rtol=1e-3)
    assert s.settings["tp"] == mp.get("tp", 1) and s.settings["pp"] == mp.get("pp", 1)


def test_sensitivities_take_checkpointing_and_offload():
    kw = dict(activation_checkpointing="full", offload="optimizer")
    s = sm.sensitivities("llama-2-7b", 64, "25Gbps", **NET, **kw)
    assert s.scaling_factor == pytest.approx(
        sm.scaling_factor("llama-2-7b", 64, "25Gbps", **NET, **kw), rel=1e-12)
    assert s.settings["activation_checkpointing"] != "none"


@pytest.mark.parametrize("mp", JOBS[:2], ids=str)
def test_best_bucket_size_of_the_data_parallel_dimension(mp):
    res = sm.best_bucket_size("llama-2-13b", 256, "25Gbps", candidates=[5, 25, 100],
                              **NET, **mp)
    for cap, t in zip(res.candidates, res.times):
        it = sm.iteration_time("llama-2-13b", 256, "25Gbps", fusion=DDPBuckets(cap * MiB),
                               **NET, **mp)
        assert t == pytest.approx(it.total, rel=1e-12)
    assert res.default_scaling_factor == pytest.approx(
        sm.scaling_factor("llama-2-13b", 256, "25Gbps", fusion="ddp", **NET, **mp), rel=1e-12)
    assert "replicas" in res.message and res.settings["tp"] == mp["tp"]


def test_cli_plan_takes_tp_pp(capsys):
    from scalemodel.cli import main

    args = ["--model", "llama-2-13b", "--n", "256", "--gpus-per-node", "8",
            "--nics-per-node", "8", "--tp", "2", "--pp", "4", "--microbatches", "8"]
    assert main(["plan", "--bw", "25Gbps", "--json", *args]) in (0, None)
    import json
    data = json.loads(capsys.readouterr().out)
    plan = sm.plan_compression("llama-2-13b", "25Gbps", n=256, tp=2, pp=4, microbatches=8,
                               **NET)
    assert data["uncompressed_scaling_factor"] == pytest.approx(
        plan.uncompressed_scaling_factor, rel=1e-12)
    assert "32 replicas" in data["message"]
    capsys.readouterr()
    # breakeven takes them too (tests/test_parallel_plans.py checks its answer)
    assert main(["breakeven", "--compressors", "powersgd:4", "--json", *args]) == 0
    got = json.loads(capsys.readouterr().out)["results"][0]["breakeven_bw"][0]
    assert got == pytest.approx(sm.breakeven_bandwidth(
        "llama-2-13b", "powersgd:4", n=256, gpus_per_node=8, nics_per_node=8, tp=2, pp=4,
        microbatches=8), rel=1e-12)


def test_whatif_table_takes_tp_pp():
    from scalemodel.whatif import paper_profile, whatif_table

    t = whatif_table(["llama-2-7b"], ns=[64, 128], bws=[25e9, 100e9], ratios=[1, 4], tp=2,
                     pp=2, microbatches=4)["llama-2-7b"]
    want = sm.scaling_factor(paper_profile("llama-2-7b"), np.array([64, 128])[None, :, None],
                             np.array([25e9, 100e9])[None, None, :],
                             compression=np.array([1.0, 4.0])[:, None, None],
                             algorithm="ring", fusion="horovod", tp=2, pp=2, microbatches=4)
    np.testing.assert_allclose(t, want, rtol=1e-12)
    plain = whatif_table(["llama-2-7b"], ns=[64], bws=[25e9], ratios=[1])["llama-2-7b"]
    assert float(plain[0, 0, 0]) != pytest.approx(float(t[0, 0, 0]))  # tp/pp are used
    with pytest.raises(sm.InvalidParameterError):
        whatif_table(["resnet50"], ns=[64], bws=[25e9], ratios=[1], tp=2)


def test_cli_best_bucket_takes_tp_pp(capsys):
    from scalemodel.cli import main

    args = ["best-bucket", "--model", "llama-2-13b", "--n", "256", "--bw", "25Gbps",
            "--gpus-per-node", "8", "--nics-per-node", "8", "--tp", "2", "--pp", "4",
            "--microbatches", "8", "--candidates", "5,25,100", "--json"]
    assert main(args) in (0, None)
    import json
    data = json.loads(capsys.readouterr().out)
    res = sm.best_bucket_size("llama-2-13b", 256, "25Gbps", candidates=[5, 25, 100], tp=2,
                              pp=4, microbatches=8, **NET)
    assert data["iteration_time"] == pytest.approx(res.iteration_time, rel=1e-12)
    assert "32 replicas" in data["message"]


def test_sensitivities_take_shard_group():
    kw = dict(sharding="zero1", shard_group=8, **NET)
    s = sm.sensitivities("llama-2-7b", 64, "100Gbps", **kw)
    assert s.scaling_factor == pytest.approx(
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", **kw), rel=1e-12)
    h = 1e-4
    up = sm.scaling_factor("llama-2-7b", 64, 100e9 * (1 + h), **kw)
    down = sm.scaling_factor("llama-2-7b", 64, 100e9 * (1 - h), **kw)
    assert s.d_bw == pytest.approx((up - down) / (2 * h * 100e9), rel=1e-3)
    assert s.settings["shard_group"] == 8


@pytest.mark.parametrize("mp", JOBS[:2], ids=str)
def test_compressed_scaling_factor_of_the_data_parallel_dimension(mp):
    n, bw = np.array([128, 256]), np.array([[25e9], [100e9]])
    got = sm.compressed_scaling_factor("llama-2-13b", "none", n, bw, **NET, **mp)
    np.testing.assert_allclose(got, sm.scaling_factor("llama-2-13b", n, bw, **NET, **mp),
                               rtol=1e-12)
    row = sm.plan_compression("llama-2-13b", "25Gbps", n=256, compressors=["powersgd:4"],
                              **NET, **mp).rows
    power = next(r for r in row if r.compressor == "powersgd")
    assert sm.compressed_scaling_factor("llama-2-13b", "powersgd:4", 256, "25Gbps", **NET,
                                        **mp) == pytest.approx(power.scaling_factor, rel=1e-12)
