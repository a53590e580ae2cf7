"""Sharded data parallelism: the closed form against the discrete-event reference, the
byte totals of ZeRO, hand-computed schedules, memory, and bad input."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_sharding import simulate_sharded, wire_bytes_per_gpu
from scalemodel.collectives import CollectiveOptions
from scalemodel.fusion import resolve_fusion
from scalemodel.sharding import (SHARDING_COMPRESSORS, Sharding, SizeWrap, resolve_wrap,
                                 shard_units, sharded_schedule, sum_of_maxima)

STRATEGIES = ["zero1", "zero2", "zero3", "hybrid_shard"]
ELEM = {"fp32": 4, "bf16": 2}


def named_profile(head, blocks, embed, waits, forward=0.03, extra_backward=0.0,
                  update=0.01, reduction=None, precision="fp32", names=True, grad_accum=1):
    """A profile whose tensors (backward order) are a head run, numbered blocks (last
    first) and an embedding run: sizes [bytes] per tensor, waits [s] between gradients."""
    labels, sizes = [], []
    for i, s in enumerate(head):
        labels.append(f"head.w{i}")
        sizes.append(s)
    for b in reversed(range(len(blocks))):
        for j, s in enumerate(blocks[b]):  # modules of a weight and a bias
            labels.append(f"layers.{b}.m{j // 2}.{'bias' if j % 2 else 'weight'}")
            sizes.append(s)
    for i, s in enumerate(embed):
        labels.append(f"embed.w{i}")
        sizes.append(s)
    ready = np.cumsum(np.asarray(waits[:len(sizes)], float))
    return sm.WorkloadProfile(
        name="sharded-synthetic", tensor_bytes=np.asarray(sizes, float), tensor_ready=ready,
        forward_time=forward, backward_time=float(ready[-1]) + extra_backward,
        update_time=update,
        reduction=reduction if reduction is not None else sm.ReductionCost(gamma=1 / 275e9,
                                                                           latency=1e-5),
        precision=precision, tensor_names=tuple(labels) if names else None,
        provenance={"source": "synthetic test profile"}, grad_accum=grad_accum)


@st.composite
def profiles(draw):
    size = st.integers(4, 200_000_000)
    n_blocks = draw(st.integers(0, 8))
    blocks = [draw(st.lists(size, min_size=1, max_size=4)) for _ in range(n_blocks)]
    head = draw(st.lists(size, min_size=0 if n_blocks else 1, max_size=2))
    embed = draw(st.lists(size, min_size=0, max_size=2))
    k = len(head) + sum(map(len, blocks)) + len(embed)
    waits = draw(st.lists(st.floats(0, 0.02), min_size=k, max_size=k))
    table = draw(st.booleans())
    red = (sm.ReductionCost.from_table([40, 1e6, 6.7e8], [1e-5, 1e-5, 2.4e-3]) if table
           else sm.ReductionCost(gamma=draw(st.floats(0, 1e-10)),
                                 latency=draw(st.floats(0, 1e-4))))
    return named_profile(head, blocks, embed, waits, forward=draw(st.floats(1e-4, 0.1)),
                         extra_backward=draw(st.floats(0, 0.01)),
                         update=draw(st.floats(0, 0.05)), reduction=red,
                         precision=draw(st.sampled_from(["fp32", "bf16"])),
                         names=bool(n_blocks) or draw(st.booleans()),
                         grad_accum=draw(st.sampled_from([1, 1, 2, 5])))


@st.composite
def configurations(draw, profile, strategy=None):
    strategy = strategy or draw(st.sampled_from(STRATEGIES))
    total = float(np.sum(profile.tensor_bytes)) / ELEM[profile.precision]
    blocks = profile.tensor_names is not None and any(
        name.startswith("layers.") for name in profile.tensor_names)
    wraps = ["none"] + (["block"] if blocks else []) + (
        ["module"] if profile.tensor_names is not None else [])
    wrap = draw(st.sampled_from(wraps + ["size"]))
    if wrap == "size":
        wrap = SizeWrap(draw(st.floats(1.0, total)))
    fusion = wrap
    if strategy in ("zero1", "zero2") and draw(st.booleans()):
        fusion = draw(st.sampled_from(["ddp", "horovod"]))
    topo = {}
    algorithm = "ring"
    if strategy == "hybrid_shard":  # a node of one GPU has nothing to shard: refused
        g = draw(st.sampled_from([2, 4, 8]))
        n = g * draw(st.integers(1, 8)) if draw(st.booleans()) else draw(st.integers(2, 8))
        n = max(n, 2)
        if n > g and n % g:
            n = g * math.ceil(n / g)
        topo = dict(gpus_per_node=g, nics_per_node=draw(st.sampled_from([1, 2, 4, 8])),
                    intra_bw=draw(st.floats(1e9, 3e12)), intra_alpha=draw(st.floats(0, 1e-5)))
        algorithm = draw(st.sampled_from(["ring", "tree", "halving-doubling", "ps"]))
    elif draw(st.booleans()):
        n = draw(st.integers(2, 80))
        topo = dict(gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
                    nics_per_node=draw(st.sampled_from([1, 2, 4])),
                    intra_bw=draw(st.floats(1e9, 3e12)), intra_alpha=draw(st.floats(0, 1e-5)))
    else:
        n = draw(st.integers(2, 300))
    return dict(
        strategy=strategy, fusion=fusion, n=n, algorithm=algorithm,
        param_dtype=draw(st.sampled_from([None, "bf16", "fp32"])),
        reduce_dtype=draw(st.sampled_from([None, "bf16", "fp32"])),
        bw=draw(st.floats(1e8, 1e12)), utilization=draw(st.floats(0.05, 1.0)),
        compression=(ratio := draw(st.one_of(st.just(1.0), st.floats(1.0, 200.0)))),
        alpha=draw(st.floats(0, 1e-4)),  # a codec cost is paid only when compressing
        codec_cost=draw(st.floats(0, 1e-9)) if ratio > 1 else 0.0,
        slowdown=draw(st.sampled_from([1.0, draw(st.floats(1.0, 1.5))])),
        collective_overhead=draw(st.sampled_from([0.0, draw(st.floats(0, 5e-3))])),
        sync_overhead=draw(st.sampled_from([0.0, draw(st.floats(0, 3e-2))])), **topo)


def predict(profile, cfg):
    """Iteration time [s] from the public API, and the scenario's sharded schedule."""
    sh = Sharding(cfg["strategy"], param_dtype=cfg["param_dtype"],
                  reduce_dtype=cfg["reduce_dtype"])
    topo = {k: cfg[k] for k in ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha")
            if k in cfg}
    cluster = None
    if cfg["slowdown"] > 1 or cfg["collective_overhead"] or cfg["sync_overhead"]:
        cluster = sm.ClusterProfile(compute_slowdown=cfg["slowdown"],
                                    collective_overhead=cfg["collective_overhead"],
                                    sync_overhead=cfg["sync_overhead"],
                                    provenance={"source": "test"})
    kw = dict(n=cfg["n"], bw=cfg["bw"], utilization=cfg["utilization"],
              compression=cfg["compression"], algorithm=cfg["algorithm"],
              fusion=cfg["fusion"], alpha=cfg["alpha"], codec_cost=cfg["codec_cost"],
              cluster=cluster, sharding=sh, **topo)
    it = sm.iteration_time(profile, **kw)
    sf = sm.scaling_factor(profile, **kw)
    assert sf == pytest.approx(profile.iteration_time / it.total, rel=1e-12)
    assert it.total == pytest.approx(it.forward + it.backward + it.exposed_communication
                                     + it.update, rel=1e-9)
    assert it.binding in sm.BINDINGS
    sc = sm.Scenario.build(profile, **{k: v for k, v in kw.items()
                                       if k not in ("n", "bw", "utilization", "compression")})
    return it.total, sc.schedule(cfg["n"], cfg["compression"] > 1)


def simulate(profile, cfg):
    elem = ELEM[profile.precision]
    fusion = cfg["fusion"]
    wrap = fusion.min_params if isinstance(fusion, SizeWrap) else fusion
    des_fusion = fusion if fusion in ("ddp", "horovod") else None
    if des_fusion:
        wrap = "none"
    topo = {k: cfg[k] for k in ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha")
            if k in cfg}
    return simulate_sharded(
        profile, cfg["n"], cfg["bw"], strategy=cfg["strategy"], wrap=wrap, fusion=des_fusion,
        param_bytes=ELEM.get(cfg["param_dtype"]), reduce_bytes=ELEM.get(cfg["reduce_dtype"]),
        utilization=cfg["utilization"], compression=cfg["compression"],
        algorithm=cfg["algorithm"], alpha=cfg["alpha"], codec_cost=cfg["codec_cost"],
        slowdown=cfg["slowdown"], collective_overhead=cfg["collective_overhead"],
        sync_overhead=cfg["sync_overhead"], element_bytes=elem,
        grad_accum=profile.grad_accum, **topo)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_closed_form_equals_discrete_event_reference(data):
    profile = data.draw(profiles())
    cfg = data.draw(configurations(profile))
    t_model, _ = predict(profile, cfg)
    t_des = simulate(profile, cfg)
    assert t_model == pytest.approx(t_des, rel=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_strategy_is_checked(data):
    # the same comparison with the strategy fixed per draw, so each is exercised
    profile = data.draw(profiles())
    for strategy in STRATEGIES:
        cfg = data.draw(configurations(profile, strategy))
        assert predict(profile, cfg)[0] == pytest.approx(simulate(profile, cfg), rel=1e-9)


def _flat(strategy, n, profile, **kw):
    return sharded_schedule(profile, n, sharding=Sharding(strategy, **kw),
                            wrap=resolve_wrap(None, strategy, profile),
                            options=CollectiveOptions())


@pytest.mark.parametrize("name", ["llama-2-7b", "gpt2", "bert-base"])
@pytest.mark.parametrize("n", [2, 8, 64])
def test_byte_totals(name, n):
    p = sm.load_profile(name)
    elem = ELEM[p.precision]
    allreduce = 2 * (n - 1) / n * 8 * float(np.sum(p.tensor_bytes))
    for strategy in ("zero1", "zero2"):
        assert _flat(strategy, n, p).nic_bits == pytest.approx(allreduce, rel=1e-12)
    z3 = _flat("zero3", n, p)
    units = shard_units(p, resolve_wrap(None, "zero3", p))
    kept = (n - 1) / n * 8 * units.params[-1] * elem  # last unit: not gathered again
    assert z3.nic_bits == pytest.approx(1.5 * allreduce - kept, rel=1e-12)
    assert kept < 0.2 * allreduce
    # the independent count of the reference agrees
    backward_params = list(units.params[::-1])
    assert z3.nic_bits / 8 == pytest.approx(
        wire_bytes_per_gpu("zero3", backward_params, n, elem, elem), rel=1e-12)
    # bf16 parameters with an fp32 reduce: the reduce-scatter doubles
    mixed = _flat("zero3", n, sm.load_profile("llama-2-7b"), reduce_dtype="fp32")
    base = _flat("zero3", n, sm.load_profile("llama-2-7b"))
    assert mixed.grad_bytes == pytest.approx(2 * base.grad_bytes)
    assert mixed.param_bytes == base.param_bytes


def test_hand_computed_zero3():
    # two units (forward: u0, u1), 1 MB of parameters each, ring of 2 at 8 Gbit/s: an
    # all-gather or reduce-scatter moves 0.5 MB = 4e6 bits = 0.5 ms
    p = named_profile([], [[1_000_000], [1_000_000]], [], [2e-3, 2e-3], forward=2e-3,
                      update=4e-3, reduction=sm.ReductionCost())
    cfg = dict(strategy="zero3", fusion="block", n=2, algorithm="ring", param_dtype=None,
               reduce_dtype=None, bw=8e9, utilization=1.0, compression=1.0, alpha=0.0,
               codec_cost=0.0, slowdown=1.0, collective_overhead=0.0, sync_overhead=0.0)
    t, s = predict(p, cfg)
    # forward: g0 0.5, u0 1 ms (g1 hidden), u1 1 ms -> 2.5 ms; backward: u1 (kept) 2 ms,
    # a(u0) hidden; r(u1) 0.5 at 4.5 and u0 2 ms in parallel -> 6.5, r(u0) 0.5 -> 7.0;
    # update 4 ms / 2
    assert t == pytest.approx(9.0e-3, rel=1e-12)
    assert simulate(p, cfg) == pytest.approx(9.0e-3, rel=1e-12)
    assert s.units == 2 and s.n_collectives == 5
    assert s.channel_time(1 / 8e9) == pytest.approx(5 * 0.5e-3)
    # a slow network, 5 ms per collective: g0 0-5, u0 5-6, g1 5-10, u1 10-11; u1's
    # backward 11-13, a(u0) 11-16, u0's backward 16-18; r(u1) 16-21, r(u0) 21-26; update
    slow = dict(cfg, bw=0.8e9)
    assert predict(p, slow)[0] == pytest.approx(28e-3, rel=1e-12)
    assert simulate(p, slow) == pytest.approx(28e-3, rel=1e-12)


def test_hand_computed_zero2():
    p = named_profile([], [[1_000_000], [1_000_000]], [], [2e-3, 2e-3], forward=2e-3,
                      update=4e-3, reduction=sm.ReductionCost())
    cfg = dict(strategy="zero2", fusion="block", n=2, algorithm="ring", param_dtype=None,
               reduce_dtype=None, bw=8e9, utilization=1.0, compression=1.0, alpha=0.0,
               codec_cost=0.0, slowdown=1.0, collective_overhead=0.0, sync_overhead=0.0)
    # forward 2, backward 4 (first reduce-scatter hidden, the last 0.5 ms exposed), update
    # 2, then two all-gathers of 0.5 ms
    assert predict(p, cfg)[0] == pytest.approx(2e-3 + 4.5e-3 + 2e-3 + 1e-3, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 5), st.floats(0, 1), st.floats(0, 5)),
                min_size=0, max_size=25),
       st.lists(st.floats(0, 10), min_size=1, max_size=30))
def test_sum_of_maxima_is_the_function(terms, xs):
    a = np.zeros((len(terms), 5))
    b = np.zeros((len(terms), 5))
    for t, (c1, m1, c2, m2) in enumerate(terms):
        a[t, 0], a[t, 4], b[t, 1], b[t, 4] = c1, m1, c2, m2
    base = np.array([0.1, 0.0, 0.0, 0.0, 0.2])
    pieces = sum_of_maxima(base, a, b)
    assert len(pieces) <= len(terms) + 1
    c, m = pieces[:, :4].sum(axis=1), pieces[:, 4]
    x = np.asarray(xs)
    want = 0.1 + 0.2 * x + sum(np.maximum(c1 + m1 * x, c2 + m2 * x) for c1, m1, c2, m2 in terms)
    env = sm.overlap.UpperEnvelope(c, m)
    np.testing.assert_allclose(env(x), want, rtol=1e-12, atol=1e-12)


def test_units_of_the_builtin_llms():
    p = sm.load_profile("llama-2-7b")
    u = shard_units(p, "block")
    assert u.names[0] == "embed.weight" and u.names[1] == "layers.0" and len(u) == 34
    cfg = sm.llm_config("llama-2-7b")
    assert u.params.sum() == cfg.parameter_count
    assert u.params[1] == cfg.block_parameter_count
    assert u.forward.sum() == pytest.approx(p.forward_time)
    assert u.backward.sum() == pytest.approx(p.backward_time)
    ref = sm.transformer_units(cfg)  # the same default efficiency as the built-in
    np.testing.assert_allclose(u.backward[1:-1], ref.backward_time[1:-1], rtol=1e-9)
    np.testing.assert_allclose(u.forward[1:-1], ref.forward_time[1:-1], rtol=1e-9)
    assert len(shard_units(p, "none")) == len(p.tensor_bytes)
    sized = shard_units(p, SizeWrap(1e9))
    assert all(c >= 1e9 for c in sized.params[:-1]) and sized.params.sum() == u.params.sum()


def test_module_wrapping_gathers_each_module_with_its_bias():
    # DeepSpeed ZeRO-3 gathers a submodule's own parameters (a Linear's weight and bias
    # together): one unit per module, in the order the modules run
    cfg = sm.TransformerConfig(layers=2, hidden=64, heads=4, ffn=256, vocab=100, seq=16,
                               micro_batch=1, dtype="fp16", tied_embeddings=True,
                               gated_ffn=False, norm="layernorm", bias=True,
                               learned_positions=16, final_norm=True)
    p = sm.transformer_profile(cfg, "v100-sxm2-32gb", efficiency=0.4)
    u = shard_units(p, "module")
    modules = {name.rsplit(".", 1)[0] for name in p.tensor_names}
    assert len(u) == len(modules) < len(p.tensor_names)
    assert "layers.0.attn.q" in u.names and u.params.sum() == cfg.parameter_count
    # every unit holds exactly its module's tensors
    for label, members in zip(u.names, u.members):
        assert {p.tensor_names[i].rsplit(".", 1)[0] for i in members} == {label}
    assert u.backward.sum() == pytest.approx(p.backward_time)
    # per tensor, a bias between two weights is a unit of no compute that the prefetch
    # of one unit ahead waits behind; per module it is not
    node = dict(gpus_per_node=8, intra_bw=1e12)
    t = {w: sm.iteration_time(p, 16, 10e9, sharding="zero3", fusion=w, **node).total
         for w in ("none", "module", "block")}
    assert t["module"] < t["none"]
    des = simulate_sharded(p, 16, 10e9, strategy="zero3", wrap="module", fusion=None,
                           element_bytes=2, **node)
    assert t["module"] == pytest.approx(des, rel=1e-9)


def test_memory_model_state_per_parameter():
    for name in ("llama-2-7b", "llama-2-70b"):
        ddp = sm.memory(name, 64)
        assert ddp.model_state / ddp.parameter_count == pytest.approx(16.0)
        for n in (8, 64, 512):
            z3 = sm.memory(name, n, sharding="zero3")
            assert z3.model_state / z3.parameter_count == pytest.approx(16.0 / n)
            assert sm.memory(name, n, sharding="full_shard").model_state == z3.model_state


def test_compressors_under_sharding_are_classified():
    assert set(SHARDING_COMPRESSORS) == set(sm.COMPRESSORS) - {"none"}
    composes = {k for k, v in SHARDING_COMPRESSORS.items() if v.startswith("composes")}
    assert composes == {"fp16", "bf16", "int8"}


# --------------------------------------------------------------------------- bad input

def test_unknown_strategy_suggests_the_closest():
    with pytest.raises(sm.UnknownNameError) as exc:
        Sharding("zero-4")
    assert exc.value.parameter == "sharding" and "zero-4" in str(exc.value)
    with pytest.raises(sm.UnknownNameError) as exc:
        Sharding("full_shar")
    assert exc.value.suggestion == "zero3"
    with pytest.raises(sm.ParameterTypeError):
        sm.sharding.resolve_sharding(3)
    with pytest.raises(sm.UnknownNameError) as exc:
        Sharding("zero3", reduce_dtype="fp33")
    assert exc.value.parameter == "reduce_dtype"


def test_sharding_needs_two_gpus():
    p = sm.load_profile("llama-2-7b")
    with pytest.raises(sm.InvalidParameterError) as exc:
        _flat("zero3", 1, p)
    assert exc.value.parameter == "n" and "1" in str(exc.value)


def test_bad_wrapping():
    p = sm.load_profile("llama-2-7b")
    with pytest.raises(sm.InvalidParameterError) as exc:
        shard_units(p, SizeWrap(1e12))
    assert exc.value.parameter == "min_params" and "larger than the model" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:
        SizeWrap(-3)
    assert exc.value.parameter == "min_params"
    for bad in ("ddp", "horovod", "bsp", "mg-wfbp", sm.DDPBuckets()):
        with pytest.raises(sm.InvalidParameterError) as exc:
            resolve_wrap(bad, "zero3", p)
        assert exc.value.parameter == "fusion"
    with pytest.raises(sm.UnknownNameError) as exc:
        resolve_wrap("blok", "zero3", p)
    assert exc.value.suggestion == "block"
    with pytest.raises(sm.InvalidParameterError) as exc:
        resolve_wrap("mg-wfbp", "zero2", p)
    assert exc.value.parameter == "fusion"
    assert isinstance(resolve_wrap("ddp", "zero2", p), sm.DDPBuckets)
    resnet = sm.load_profile("resnet50")  # no tensor names
    assert resolve_wrap(None, "zero3", resnet) == "none"
    with pytest.raises(sm.InvalidParameterError) as exc:
        resolve_wrap("block", "zero3", resnet)
    assert exc.value.parameter == "fusion" and "resnet50" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:
        resolve_wrap("module", "zero3", resnet)
    assert exc.value.parameter == "fusion" and "no tensor names" in str(exc.value)
    assert resolve_wrap("submodule", "zero3", p) == "module"
    assert resolve_wrap(None, "zero3", sm.load_profile("resnet50-h100")) == "block"
    assert resolve_fusion("ddp") is not None


def test_hybrid_shard_bad_input():
    p = sm.load_profile("llama-2-7b")
    opts = CollectiveOptions(gpus_per_node=8)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sharded_schedule(p, 12, sharding=Sharding("hybrid_shard"), wrap="block",
                         options=opts)
    assert exc.value.parameter == "n" and "12" in str(exc.value)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sharded_schedule(p, 16, sharding=Sharding("hybrid_shard"), wrap="block",
                         options=opts, algorithm="hierarchical")
    assert exc.value.parameter == "algorithm"


# --------------------------------------------------------------------------- the public API

H100_NVLINK = sm.get_gpu("h100-sxm").intra_node_bw
NODES = dict(gpus_per_node=8, intra_bw=H100_NVLINK)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_inverse_solvers_are_exact_under_sharding(strategy):
    res = sm.min_compression("llama-2-7b", "100Gbps", n=64, sharding=strategy, **NODES)
    assert res.feasible and res.ratio > 1
    sf = sm.scaling_factor("llama-2-7b", 64, "100Gbps", compression=res.ratio,
                           sharding=strategy, **NODES)
    assert sf == pytest.approx(0.9, rel=1e-9) and sf >= 0.9
    below = sm.scaling_factor("llama-2-7b", 64, "100Gbps", compression=res.ratio * 0.999,
                              sharding=strategy, **NODES)
    assert below < 0.9
    bw = sm.required_bandwidth("llama-2-7b", n=64, sharding=strategy, **NODES)
    assert sm.scaling_factor("llama-2-7b", 64, bw.bw, sharding=strategy,
                             **NODES) == pytest.approx(0.9, rel=1e-9)
    assert bw.fits is True and bw.memory_per_gpu > 0 and bw.gpu == "h100-sxm"


def test_scaling_factor_grids_and_monotone_under_sharding():
    grid = np.logspace(9, 12, 30)
    for strategy in STRATEGIES:
        sf = sm.scaling_factor("llama-2-13b", np.array([[16], [64]]), grid,
                               sharding=strategy, **NODES)
        assert sf.shape == (2, 30) and np.all(np.isfinite(sf))
        assert np.all(np.diff(sf, axis=1) >= -1e-12)
        for i, n in enumerate((16, 64)):
            assert sf[i, 7] == pytest.approx(sm.scaling_factor(
                "llama-2-13b", n, grid[7], sharding=strategy, **NODES), rel=1e-14)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.scaling_factor("llama-2-7b", [1, 8], "100Gbps", sharding="zero3")
    assert exc.value.parameter == "n"


def test_hybrid_shard_inside_one_node_is_zero3():
    for n in (2, 4, 8):
        a = sm.scaling_factor("llama-2-7b", n, "10Gbps", sharding="hybrid_shard", **NODES)
        b = sm.scaling_factor("llama-2-7b", n, "10Gbps", sharding="zero3", **NODES)
        assert a == pytest.approx(b, rel=1e-12)


def test_iteration_time_under_sharding():
    it = sm.iteration_time("llama-2-7b", 64, "100Gbps", sharding="zero3", **NODES)
    p = sm.load_profile("llama-2-7b")
    assert it.update == pytest.approx(p.update_time / 64)
    assert it.n_buckets == 34 + 33 + 34  # forward and backward all-gathers, reduce-scatters
    assert it.communication >= it.exposed_communication > 0
    assert it.binding == "bandwidth"
    fast = sm.iteration_time("llama-2-7b", 64, "3200Gbps", sharding="zero3", nics_per_node=8,
                             **NODES)
    assert fast.exposed_communication < 0.1 * it.exposed_communication
    # the sharded optimizer step: faster than one GPU's, so the scaling factor may pass 1
    assert fast.scaling_factor > 1.0


def test_memory_next_to_the_solvers():
    ddp = sm.min_compression("llama-2-7b", "100Gbps", n=64)
    assert ddp.fits is False and "does not fit on h100-sxm" in ddp.message
    assert ddp.memory_per_gpu == pytest.approx(sm.memory("llama-2-7b", 64).per_gpu)
    z3 = sm.min_compression("llama-2-7b", "100Gbps", n=64, sharding="zero3")
    assert z3.fits is True and "does not fit" not in z3.message
    assert z3.memory_per_gpu == pytest.approx(
        sm.memory("llama-2-7b", 64, sharding="zero3").per_gpu)
    with pytest.warns(sm.ModelWarning, match="sets the memory checked"):
        other = sm.min_compression("llama-2-7b", "100Gbps", n=64, sharding="zero3",
                                   gpu="a100-40gb")
    assert other.gpu == "a100-40gb"
    assert sm.min_compression("bert", "10Gbps").memory_per_gpu is None  # no config, no gpu
    # scaling_factor never refuses for memory
    assert sm.scaling_factor("llama-2-70b", 8, "100Gbps") > 0
    plan = sm.plan_compression("llama-2-70b", "100Gbps", n=8, compressors=["fp16"])
    assert plan.fits is False and "does not fit" in plan.message


def test_compression_planning_under_sharding():
    mixed = Sharding("zero3", reduce_dtype="fp32")
    plan = sm.plan_compression("llama-2-7b", "100Gbps", n=64, sharding=mixed, **NODES)
    rows = {r.compressor: r for r in plan.rows}
    for name in ("topk", "randomk", "signsgd", "powersgd"):
        assert not rows[name].feasible and "does not compose" in rows[name].note
    assert "only low-precision reduce-scatters compose" in plan.message
    assert rows["fp16"].ratio == pytest.approx(2.0) and rows["none"].ratio == 1.0
    assert rows["fp16"].collective == "reduce_scatter" and plan.sharding == "zero3"
    assert "FSDP" in rows["fp16"].snippet() and "reduce_dtype=torch.float16" in rows[
        "fp16"].snippet()
    # fp16 halves the fp32 reduce-scatter: the scaling factor it reaches is that of the
    # closed form with the gradient collectives' bits halved and its codec time added
    sc = sm.Scenario.build("llama-2-7b", sharding=mixed, **NODES)
    none = sm.scaling_factor("llama-2-7b", 64, "100Gbps", sharding=mixed, **NODES)
    assert rows["none"].scaling_factor == pytest.approx(none, rel=1e-12)
    half = sc.schedule(64, gradient_scale=0.5)
    x = 1 / 100e9
    sf_half = sc.profile.iteration_time / (sc.forward(64) + half.envelope(x)
                                          + sc.profile.update_time)
    assert none < rows["fp16"].scaling_factor < sf_half
    # break-even: exact crossing of the two envelopes
    be = sm.breakeven_bandwidth("llama-2-7b", "fp16", n=64, sharding=mixed, **NODES)
    assert 0 < be < math.inf
    for f, better in ((0.5, True), (2.0, False)):
        with_fp16 = sm.compressed_scaling_factor("llama-2-7b", "fp16", 64, be * f,
                                                 sharding=mixed, **NODES)
        without = sm.scaling_factor("llama-2-7b", 64, be * f, sharding=mixed, **NODES)
        assert (with_fp16 > without) == better
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.breakeven_bandwidth("llama-2-7b", "topk", n=64, sharding="zero3")
    assert exc.value.parameter == "compressor" and "topk" in str(exc.value)


def test_sensitivities_under_sharding_match_finite_differences():
    kw = dict(sharding="zero3", alpha=5e-6, **NODES)
    s = sm.sensitivities("llama-2-7b", 64, 100e9, **kw)

    def sf(**change):
        args = dict(dict(bw=100e9, alpha=5e-6), **change)
        return sm.scaling_factor("llama-2-7b", 64, args["bw"], sharding="zero3",
                                 alpha=args["alpha"], **NODES)

    assert s.d_alpha == pytest.approx((sf(alpha=5e-6 + 1e-9) - sf(alpha=5e-6 - 1e-9)) / 2e-9,
                                      rel=1e-4)
    assert s.d_bw == pytest.approx((sf(bw=100e9 + 1e6) - sf(bw=100e9 - 1e6)) / 2e6, rel=1e-4)


def test_cli_takes_sharding_and_shows_memory(capsys):
    from scalemodel.cli import main

    assert main(["scaling", "--model", "llama-2-7b", "--n", "8,64", "--bw", "100Gbps",
                 "--sharding", "fsdp", "--gpus-per-node", "8"]) in (0, None)
    out = capsys.readouterr().out
    assert "memory/GPU" in out and "GiB" in out
    assert main(["min-compression", "--model", "llama-2-7b", "--bw", "100Gbps", "--sharding",
                 "zero3", "--gpus-per-node", "8"]) in (0, None)
    assert "memory:" in capsys.readouterr().out
    assert main(["breakeven", "--model", "llama-2-7b", "--n", "64", "--sharding", "fsdp",
                 "--gpus-per-node", "8", "--compressors", "fp16,int8,topk"]) in (0, None)
    out = capsys.readouterr().out
    assert "topk" in out and "does not compose" in out and "int8" in out
    assert main(["min-compression", "--model", "llama-2-7b", "--bw", "100Gbps", "--sharding",
                 "zero4"]) == 2
    err = capsys.readouterr().err
    assert "sharding='zero4'" in err and "zero3" in err


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-1, 1), st.floats(0, 10)), min_size=1, max_size=400),
       st.lists(st.floats(0, 5), min_size=1, max_size=20))
def test_envelope_of_many_lines_is_the_maximum(lines, xs):
    # enough lines for the vectorized chord passes of UpperEnvelope to run
    c = np.array([a for a, _ in lines])
    m = np.array([b for _, b in lines])
    env = sm.overlap.UpperEnvelope(c, m)
    x = np.asarray(xs)
    brute = np.max(c[:, None] + m[:, None] * x[None, :], axis=0)
    np.testing.assert_allclose(env(x), brute, rtol=1e-12, atol=1e-12)


def test_envelope_of_tangent_lines():
    # lines tangent to x^2/4 (all on the envelope) and others just below them: the
    # chord passes must drop exactly the ones below
    rng = np.random.default_rng(7)
    m = np.sort(rng.uniform(0, 10, 300))
    c = -m**2 / 4
    below = c - rng.uniform(1e-6, 1e-2, 300)
    env = sm.overlap.UpperEnvelope(np.concatenate((c, below)), np.concatenate((m, m)))
    x = np.linspace(0, 5, 2001)
    brute = np.max(c[:, None] + m[:, None] * x[None, :], axis=0)
    np.testing.assert_allclose(env(x), brute, rtol=1e-12, atol=1e-12)
    assert set(env.index.tolist()) <= set(range(300))
