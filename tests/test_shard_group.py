"""Sharding inside a group (``shard_group=g``: InternLM's ``zero1=8``, MiCS, HSDP with any
group): the closed form against the discrete-event reference, the identities g = n (plain
zero1/2/3) and g = gpus_per_node under zero3 (hybrid_shard), memory, and bad input."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_sharding import config_topology, simulate_config
from scalemodel.sharding import Sharding, SizeWrap
from test_sharding import ELEM, profiles

NODES = dict(gpus_per_node=8, intra_bw=sm.get_gpu("h100-sxm").intra_node_bw)


@st.composite
def group_configurations(draw, profile, nic_bound=True):
    """A strategy, a shard group and a worker count it divides, with or without a
    topology (groups inside a node, a node, or whole nodes; one node or several)."""
    strategy = draw(st.sampled_from(["zero1", "zero2", "zero3"]))
    names = profile.tensor_names
    blocks = names is not None and any(t.startswith("layers.") for t in names)
    wrap = draw(st.sampled_from(["none"] + (["block"] if blocks else [])
                                + (["module"] if names is not None else []) + ["size"]))
    if wrap == "size":
        total = float(np.sum(profile.tensor_bytes)) / ELEM[profile.precision]
        wrap = SizeWrap(draw(st.floats(1.0, total)))
    fusion = wrap
    if strategy != "zero3" and draw(st.booleans()):
        fusion = draw(st.sampled_from(["ddp", "horovod"]))
    topo = {}
    if draw(st.booleans()):  # flat: every GPU its own NIC
        g = draw(st.sampled_from([2, 3, 4, 8]))
        n = g * draw(st.integers(1, 8))
    else:
        gpn = draw(st.sampled_from([1, 2, 4, 8]))
        g = draw(st.sampled_from([d for d in (2, 4, 8) if d <= gpn and gpn % d == 0]
                                 + [gpn * k for k in (1, 2, 3) if gpn * k >= 2]))
        if g <= gpn and draw(st.booleans()):  # inside one node
            n = g * draw(st.integers(1, gpn // g))
        else:
            step = max(g, gpn)
            n = step * draw(st.integers(1, 6))
        nics = draw(st.sampled_from([1, 2, 4, 8]))
        intra = draw(st.floats(1e9, 3e12))
        topo = dict(gpus_per_node=gpn, nics_per_node=nics, intra_bw=intra,
                    intra_alpha=draw(st.floats(0, 1e-5)))
    n = max(n, 2)
    cfg = dict(
        strategy=strategy, fusion=fusion, n=n, shard_group=g,
        param_dtype=draw(st.sampled_from([None, "bf16", "fp32"])),
        reduce_dtype=draw(st.sampled_from([None, "bf16", "fp32"])),
        bw=draw(st.floats(1e8, 1e12)), utilization=draw(st.floats(0.05, 1.0)),
        compression=(ratio := draw(st.one_of(st.just(1.0), st.floats(1.0, 200.0)))),
        alpha=draw(st.floats(0, 1e-4)),  # a codec cost is paid only when compressing
        codec_cost=draw(st.floats(0, 1e-9)) if ratio > 1 else 0.0,
        slowdown=draw(st.sampled_from([1.0, draw(st.floats(1.0, 1.5))])),
        collective_overhead=draw(st.sampled_from([0.0, draw(st.floats(0, 5e-3))])),
        sync_overhead=draw(st.sampled_from([0.0, draw(st.floats(0, 3e-2))])), **topo)
    if nic_bound and topo and g > topo["gpus_per_node"] > 1 and n > g:
        # a shard ring across nodes beside all-reduces across groups: exact while the
        # NICs bind (docs/sharding.rst, eq. shard-group)
        cfg["intra_bw"] = max(cfg["intra_bw"],
                              1.01 * topo["nics_per_node"] * cfg["utilization"] * cfg["bw"])
    return cfg


def cluster_of(cfg):
    """The ClusterProfile of a drawn configuration's slowdown and overheads (None: none)."""
    if cfg["slowdown"] > 1 or cfg["collective_overhead"] or cfg["sync_overhead"]:
        return sm.ClusterProfile(compute_slowdown=cfg["slowdown"],
                                 collective_overhead=cfg["collective_overhead"],
                                 sync_overhead=cfg["sync_overhead"],
                                 provenance={"source": "test"})
    return None


def predict(profile, cfg, **extra):
    sh = Sharding(cfg["strategy"], param_dtype=cfg["param_dtype"],
                  reduce_dtype=cfg["reduce_dtype"])
    kw = dict(utilization=cfg["utilization"], compression=cfg["compression"],
              fusion=cfg["fusion"], alpha=cfg["alpha"], codec_cost=cfg["codec_cost"],
              cluster=cluster_of(cfg), sharding=sh, shard_group=cfg["shard_group"],
              **config_topology(cfg))
    kw.update(extra)
    it = sm.iteration_time(profile, cfg["n"], cfg["bw"], **kw)
    sf = sm.scaling_factor(profile, cfg["n"], cfg["bw"], **kw)
    assert sf == pytest.approx(profile.iteration_time / it.total, rel=1e-12)
    return it.total


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_closed_form_equals_discrete_event_reference(data):
    profile = data.draw(profiles())
    cfg = data.draw(group_configurations(profile))
    assert predict(profile, cfg) == pytest.approx(simulate_config(profile, cfg), rel=1e-9)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_shard_ring_across_nodes_is_an_upper_bound_when_the_node_link_binds(data):
    # groups spanning nodes beside all-reduces across groups, any intra-node rate: the
    # closed form charges the all-reduce at the shard ring's pace, never less than the
    # reference's
    profile = data.draw(profiles())
    cfg = data.draw(group_configurations(profile, nic_bound=False))
    t_model, t_des = predict(profile, cfg), simulate_config(profile, cfg)
    assert t_model >= t_des * (1 - 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_group_of_all_gpus_is_plain_sharding(data):
    profile = data.draw(profiles())
    cfg = data.draw(group_configurations(profile))
    whole = dict(cfg, shard_group=cfg["n"])
    plain = predict(profile, whole, shard_group=None)
    assert predict(profile, whole) == plain
    assert simulate_config(profile, whole) == pytest.approx(plain, rel=1e-9)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "nccl"])
@pytest.mark.parametrize("n", [8, 16, 64, 256])
def test_zero3_over_one_node_is_hybrid_shard(algorithm, n):
    kw = dict(algorithm=algorithm, compression=3.0, nics_per_node=2, **NODES)
    for model in ("llama-2-7b", "gpt2"):
        a = sm.scaling_factor(model, n, "100Gbps", sharding="zero3", shard_group=8, **kw)
        b = sm.scaling_factor(model, n, "100Gbps", sharding="hybrid_shard", **kw)
        assert a == b
        ia = sm.iteration_time(model, n, "100Gbps", sharding="zero3", shard_group=8, **kw)
        ib = sm.iteration_time(model, n, "100Gbps", sharding="hybrid_shard", **kw)
        assert ia.total == ib.total and ia.binding == ib.binding
    ma = sm.memory("llama-2-7b", n, sharding="zero3", shard_group=8)
    mb = sm.memory("llama-2-7b", n, sharding="hybrid_shard", gpus_per_node=8)
    assert ma.per_gpu == mb.per_gpu


def test_hand_computed_zero1_groups_of_a_node():
    # InternLM's zero1=8 on 4 nodes of 8, one NIC per node, no latency: every gradient
    # bucket is reduce-scattered in the node (uncompressed intra-node bits, a constant),
    # then its 1/8 shard is all-reduced across the 4 nodes by the node's 8 GPUs at once;
    # after the step on 1/8 of the state, the parameters are all-gathered in the node
    size, bw, intra = 4e8, 1e11, 2.4e12
    p = sm.WorkloadProfile(name="one", tensor_bytes=np.array([size]),
                           tensor_ready=np.array([0.1]), forward_time=0.05,
                           backward_time=0.1, update_time=0.08, precision="fp32",
                           reduction=sm.ReductionCost(gamma=0.0, latency=0.0),
                           provenance={"source": "test"})
    kw = dict(sharding="zero1", shard_group=8, gpus_per_node=8, intra_bw=intra,
              fusion="none")
    rs = 7 / 8 * size * 8 / intra
    ar = 8 * (2 * 3 / 4 * size / 8 * 8) / bw
    ag = 7 / 8 * size * 8 / intra
    expected = 0.05 + 0.1 + rs + ar + 0.08 / 8 + ag
    assert sm.iteration_time(p, 32, bw, **kw).total == pytest.approx(expected, rel=1e-12)
    m = sm.memory("llama-2-7b", 32, sharding="zero1", shard_group=8)
    m32 = sm.memory("llama-2-7b", 8, sharding="zero1")
    assert m.parts["optimizer"] == m32.parts["optimizer"]
    assert m.settings["shard_group"] == 8


def test_memory_shards_over_the_group():
    n = np.array([16, 64, 256])
    for strategy in ("zero1", "zero2", "zero3"):
        grouped = sm.memory("llama-2-13b", n, sharding=strategy, shard_group=16)
        alone = sm.memory("llama-2-13b", 16, sharding=strategy)
        for part in ("parameters", "gradients", "optimizer"):
            assert np.all(grouped.parts[part] == alone.parts[part])
        assert sm.memory("llama-2-13b", 64, sharding=strategy,
                         shard_group=64).per_gpu == sm.memory(
            "llama-2-13b", 64, sharding=strategy).per_gpu


def test_solvers_take_shard_group():
    kw = dict(n=64, sharding="zero3", shard_group=16, **NODES)
    res = sm.min_compression("llama-2-7b", "100Gbps", **kw)
    assert res.settings["shard_group"] == 16 and res.feasible
    sf = sm.scaling_factor("llama-2-7b", 64, "100Gbps", compression=res.ratio,
                           sharding="zero3", shard_group=16, **NODES)
    assert sf == pytest.approx(0.9, rel=1e-9)
    bw = sm.required_bandwidth("llama-2-7b", **kw)
    assert sm.scaling_factor("llama-2-7b", 64, bw.bw, sharding="zero3", shard_group=16,
                             **NODES) == pytest.approx(0.9, rel=1e-9)
    # the memory check of the solvers shards over the group too
    assert bw.memory_per_gpu == pytest.approx(sm.memory(
        "llama-2-7b", 64, sharding="zero3", shard_group=16).per_gpu, rel=1e-12)


def test_bad_shard_group():
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding="zero1", shard_group=12)
    assert exc.value.parameter == "shard_group"
    assert "[2, 4, 8, 16, 32, 64]" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory("llama-2-7b", [16, 24], sharding="zero1", shard_group=16)
    assert exc.value.parameter == "shard_group" and "n=24" in str(exc.value)
    for sharding in ("none", "hybrid_shard"):
        with pytest.raises(sm.InvalidParameterError) as exc:
            sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding=sharding, shard_group=8)
        assert exc.value.parameter == "shard_group"
        with pytest.raises(sm.InvalidParameterError) as exc:
            sm.memory("llama-2-7b", 64, sharding=sharding, shard_group=8)
        assert exc.value.parameter == "shard_group"
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding="zero3", shard_group=1)
    assert exc.value.parameter == "shard_group"
    with pytest.raises(sm.ParameterTypeError):
        sm.memory("llama-2-7b", 64, sharding="zero3", shard_group=8.0)
    with pytest.raises(sm.InvalidParameterError) as exc:  # not node-aligned
        sm.scaling_factor("llama-2-7b", 48, "100Gbps", sharding="zero3", shard_group=12,
                          **NODES)
    assert exc.value.parameter == "shard_group" and "[2, 4, 8, 16, 24, 48]" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:  # partial nodes
        sm.scaling_factor("llama-2-7b", 12, "100Gbps", sharding="zero3", shard_group=4,
                          **NODES)
    assert exc.value.parameter == "n"
    with pytest.raises(sm.InvalidParameterError) as exc:  # ranks of a node: ring only
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding="zero3", shard_group=4,
                          algorithm="tree", **NODES)
    assert exc.value.parameter == "algorithm"
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding=Sharding(
            "zero3", shard_group=8), shard_group=16)
    assert exc.value.parameter == "shard_group"


def test_cli_takes_shard_group(capsys):
    from scalemodel.cli import main

    assert main(["iteration", "--model", "llama-2-7b", "--n", "64", "--bw", "100Gbps",
                 "--sharding", "zero1", "--shard-group", "8", "--gpus-per-node", "8"]) in (0,
                                                                                      None)
    out = capsys.readouterr().out
    sf = sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding="zero1", shard_group=8,
                           gpus_per_node=8)
    assert f"{sf:.4f}" in out
    per = sm.memory("llama-2-7b", 64, sharding="zero1", shard_group=8).per_gpu
    assert f"{per / 2**30:.1f} GiB" in out
    assert main(["scaling", "--model", "llama-2-7b", "--n", "64", "--bw", "100Gbps",
                 "--sharding", "zero1", "--shard-group", "12"]) == 2
    err = capsys.readouterr().err
    assert "--shard-group=12" in err and "[2, 4, 8, 16, 32, 64]" in err
    assert main(["plan", "--model", "llama-2-7b", "--n", "64", "--bw", "100Gbps",
                 "--sharding", "zero1", "--shard-group", "8"]) in (0, None)  # plan too
    out = capsys.readouterr().out
    sf = sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding="zero1", shard_group=8)
    assert f"(uncompressed {sf:.3f})" in out
