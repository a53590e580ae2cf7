"""ZeRO-1/2's parameter return by broadcast (``Sharding(param_return="broadcast")``,
eq. broadcast in scalemodel.sharding) against the discrete-event reference, which plays
each broadcast chunk by chunk along NCCL's chain."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_sharding import _chain_broadcast, config_topology, simulate_config
from scalemodel.exceptions import (InvalidParameterError, ParameterTypeError,
                                   UnknownNameError)
from scalemodel.sharding import (NCCL_SIMPLE_STEP_BYTES, Sharding, broadcast_owners,
                                 nccl_ring_channels)
from test_shard_group import cluster_of, group_configurations
from test_sharding import profiles


@st.composite
def broadcast_configurations(draw, profile):
    """A zero1/zero2 configuration of test_shard_group (any shard group, topology or
    none) with the parameters returned by broadcasts; uncompressed, and with the NICs
    binding wherever a chain crosses nodes (the closed form's case)."""
    cfg = draw(group_configurations(profile))
    if cfg["strategy"] == "zero3":
        cfg["strategy"] = draw(st.sampled_from(["zero1", "zero2"]))
    cfg["compression"], cfg["codec_cost"] = 1.0, 0.0
    if draw(st.booleans()):  # one group of all n GPUs
        cfg["shard_group"] = None
    gpn = cfg.get("gpus_per_node")
    if gpn is not None and gpn > 1:
        cfg["intra_bw"] = max(cfg["intra_bw"],
                              1.01 * cfg["nics_per_node"] * cfg["utilization"] * cfg["bw"])
    group = cfg["shard_group"] or cfg["n"]
    cfg["broadcasts"] = draw(st.sampled_from([None, 1, group, draw(st.integers(1, 300))]))
    cfg["broadcast_chunk"] = draw(st.sampled_from(
        [None, float(NCCL_SIMPLE_STEP_BYTES), draw(st.floats(1e3, 5e8))]))
    return cfg


def predict(profile, cfg):
    sh = Sharding(cfg["strategy"], param_dtype=cfg["param_dtype"],
                  reduce_dtype=cfg["reduce_dtype"], param_return="broadcast",
                  broadcasts=cfg["broadcasts"], broadcast_chunk=cfg["broadcast_chunk"])
    kw = dict(utilization=cfg["utilization"], fusion=cfg["fusion"], alpha=cfg["alpha"],
              cluster=cluster_of(cfg), sharding=sh, shard_group=cfg["shard_group"],
              **config_topology(cfg))
    it = sm.iteration_time(profile, cfg["n"], cfg["bw"], **kw)
    sf = sm.scaling_factor(profile, cfg["n"], cfg["bw"], **kw)
    assert sf == pytest.approx(profile.iteration_time / it.total, rel=1e-12)
    return it.total


def simulate(profile, cfg):
    # uncompressed: broadcast_configurations sets compression 1 and codec_cost 0
    return simulate_config(profile, cfg, param_return="broadcast",
                           broadcasts=cfg["broadcasts"], broadcast_chunk=cfg["broadcast_chunk"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_broadcast_return_equals_discrete_event_reference(data):
    profile = data.draw(profiles())
    cfg = data.draw(broadcast_configurations(profile))
    assert predict(profile, cfg) == pytest.approx(simulate(profile, cfg), rel=1e-9)


def test_allgather_is_the_default_and_unchanged():
    profile = sm.load_profile("llama-2-7b")
    kw = dict(gpus_per_node=8, nics_per_node=4)
    a = sm.iteration_time(profile, 64, 100e9, sharding="zero1", **kw).total
    b = sm.iteration_time(profile, 64, 100e9, sharding=Sharding(
        "zero1", param_return="allgather"), **kw).total
    assert Sharding("zero1").param_return == "allgather"
    assert a == b


def test_hand_computed_chain():
    """Four chunks over a chain of 3 ranks on 3 one-GPU nodes (flat): (k - 1 + hops)
    chunk times plus a latency per hop; the reference agrees."""
    x = 8.0 / 1e9  # s per byte at 1 Gbit/s
    t = _chain_broadcast(4e6, 3, 1e6, 1e9, 1e12, 1e-5, 0.0)
    assert t == pytest.approx((4 - 1 + 2) * 1e6 * x + 2 * 1e-5, rel=1e-12)
    # a chunk larger than the buffer: one chunk, the fill only
    assert _chain_broadcast(1e5, 5, 1e6, 1e9, 1e12, 0.0, 0.0) == pytest.approx(
        4 * 1e5 * x, rel=1e-12)


def test_fill_grows_with_the_group_and_the_broadcasts():
    """The extra time over the all-gathers grows with n (the fill) and with the number of
    broadcasts (the fill paid per broadcast); with one broadcast per rank of a large
    group it dominates."""
    profile = sm.load_profile("llama-2-7b")
    kw = dict(gpus_per_node=8, nics_per_node=4, fusion="ddp")

    def extra(n, b=None):
        bc = sm.iteration_time(profile, n, 100e9, sharding=Sharding(
            "zero1", param_return="broadcast", broadcasts=b), **kw).total
        return bc - sm.iteration_time(profile, n, 100e9, sharding="zero1", **kw).total

    grow = [extra(n, 16) for n in (16, 64, 256, 1024)]
    assert np.all(np.diff(grow) > 0)
    assert extra(256, 64) > extra(256, 16) > 0


def test_channels_and_default_chunk():
    assert nccl_ring_channels(4) == 8 and nccl_ring_channels(1) == 2
    assert nccl_ring_channels(64) == 32
    profile = sm.load_profile("llama-2-7b")
    kw = dict(gpus_per_node=8, nics_per_node=4, fusion="ddp")
    a = sm.iteration_time(profile, 64, 100e9, sharding=Sharding(
        "zero1", param_return="broadcast"), **kw).total
    b = sm.iteration_time(profile, 64, 100e9, sharding=Sharding(
        "zero1", param_return="broadcast", broadcast_chunk=8 * 512 * 1024), **kw).total
    assert a == b


def test_broadcast_owners_follows_internlms_allocation():
    # the tensor that takes a rank past 1.01 x the average goes to the next rank, which
    # starts counting from zero (InternLM's rule): 8 tensors of 10 over 4 ranks (average
    # 20) fill ranks 0, 1, 2 with 2, 3, 3 tensors; over 16 ranks (average 5) every tensor
    # opens a new rank and rank 0 owns none
    assert broadcast_owners([10] * 8, 4) == 3
    assert broadcast_owners([10] * 8, 16) == 8
    # a rank takes tensors until it holds more than 1.01 x the average
    assert broadcast_owners([50, 1, 49], 2) == 2
    assert broadcast_owners([1, 1, 1, 1], 1) == 1


def test_bad_input():
    with pytest.raises(UnknownNameError, match="param_return"):
        Sharding("zero1", param_return="scatter")
    with pytest.raises(InvalidParameterError, match="param_return"):
        Sharding("zero3", param_return="broadcast")
    with pytest.raises(InvalidParameterError, match="broadcasts"):
        Sharding("zero1", param_return="broadcast", broadcasts=0)
    with pytest.raises(ParameterTypeError, match="broadcasts"):
        Sharding("zero1", param_return="broadcast", broadcasts=2.5)
    with pytest.raises(InvalidParameterError, match="broadcast_chunk"):
        Sharding("zero1", param_return="broadcast", broadcast_chunk=0)
    with pytest.raises(InvalidParameterError, match="params"):
        broadcast_owners([], 4)
    with pytest.raises(InvalidParameterError, match="nics_per_node"):
        nccl_ring_channels(0)


def test_fit_sees_the_broadcast_return():
    """Runs generated with the parameters broadcast (one per rank) at 16 and 64 GPUs:
    a run keeps its Sharding, and fitted with it, the known efficiency is recovered;
    read as all-gathers, the same runs give another efficiency."""
    from scalemodel.runs import load_runs
    from scalemodel.workloads import TransformerConfig, transformer_profile

    cfg = TransformerConfig(layers=4, hidden=1024, heads=8, ffn=2816, vocab=32000,
                            seq=2048, micro_batch=2, dtype="bf16", name="small")
    topo = dict(gpus_per_node=8, nics_per_node=4)
    sh = Sharding("zero1", param_return="broadcast")
    runs = []
    for n in (16, 64):
        it = sm.iteration_time(transformer_profile(cfg, "a100-80gb", efficiency=0.5), n,
                               1e9, sharding=sh, fusion="ddp", algorithm="ring", **topo)
        runs.append(dict(model=transformer_profile(cfg, "a100-80gb"), n=n, bw=1e9,
                         sharding=sh, iteration_time=float(it.total), uncertainty=0.001))
    assert load_runs(runs)[0].sharding == sh
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, fusion="ddp", fit=["efficiency"], **topo)
        gathered = sm.fit_cluster([dict(r, sharding="zero1") for r in runs], fusion="ddp",
                                  fit=["efficiency"], **topo)
    eff = fit.parameters["efficiency"]
    assert eff.value == pytest.approx(0.5, rel=0.02)  # communication-bound: weakly set
    assert eff.interval[0] <= 0.5 <= eff.interval[1]
    assert abs(gathered.parameters["efficiency"].value - 0.5) > 0.1
    # the cluster records the Sharding (spec text, read back), and a later call without
    # sharding= answers under it, in the API and after a JSON round trip
    assert fit.cluster.fit_settings["sharding"] == "zero1(param_return=broadcast)"
    prof = transformer_profile(cfg, "a100-80gb")
    for cl in (fit.cluster, sm.ClusterProfile.from_dict(fit.cluster.to_dict())):
        t = sm.iteration_time(prof, 64, 1e9, fusion="ddp", cluster=cl, **topo).total
        assert float(t) == pytest.approx(float(sm.iteration_time(
            prof, 64, 1e9, fusion="ddp", cluster=cl, sharding=sh, **topo).total), rel=1e-12)
    for bad in ("zero1(foo=1)", "zero1(broadcasts=x)", "zero1(broadcasts=1, broadcasts=2)"):
        with pytest.raises(InvalidParameterError, match="sharding"):
            sm.iteration_time(prof, 64, 1e9, sharding=bad)
    with pytest.raises(sm.ScalemodelError, match=r"runs\[0\]\.shard_group"):
        load_runs([dict(runs[0], shard_group=8)])


def test_latency_sensitivity_counts_the_chain_hops():
    """d(scaling factor)/d(alpha) of the broadcast return equals a central difference:
    the m - 1 network hops of each chain are counted."""
    p = sm.load_profile("llama-2-7b")
    kw = dict(sharding=Sharding("zero1", param_return="broadcast", broadcasts=40),
              fusion="ddp", gpus_per_node=8, nics_per_node=4)
    s = sm.sensitivities(p, 256, 100e9, alpha=1e-5, **kw)
    h = 1e-8

    def f(a):
        return float(sm.scaling_factor(p, 256, 100e9, alpha=a, **kw))

    assert s.d_alpha == pytest.approx((f(1e-5 + h) - f(1e-5 - h)) / (2 * h), rel=1e-5)


def test_answers_carry_the_parameter_return():
    p = sm.load_profile("llama-2-7b")
    kw = dict(fusion="ddp", gpus_per_node=8, nics_per_node=4)
    it = sm.iteration_time(p, 64, 100e9, sharding=Sharding(
        "zero1", param_return="broadcast", broadcasts=44), **kw)
    assert it.settings["param_return"] == "broadcast"
    assert it.settings["broadcasts"] == 44 and it.settings["broadcast_chunk"] is None
    assert "param_return" not in sm.iteration_time(p, 64, 100e9, sharding="zero1",
                                                   **kw).settings
