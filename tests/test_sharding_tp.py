"""Sharded data parallelism with tensor parallelism (FSDP x TP, "2-D"; ZeRO-1 x TP, as
Megatron-LM's distributed optimizer over the data-parallel ranks): ``sharding=`` with
``tp > 1`` and ``pp = 1``.

Each GPU holds 1/tp of the model (scalemodel.parallel's per-GPU profile) and shards that
slice over its data-parallel group of n/tp GPUs; the tp rings of a node share its NICs
(scalemodel.parallel.dp_options). Checked here: the closed form against the discrete-event
reference (tests/des_sharding.py) on that profile and that view, tp=1 unchanged, memory's
model state against a hand count, the NICs' share, every call against iteration_time and
the CLI, and what stays refused, by name.
"""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_sharding import simulate_sharded
from scalemodel.parallel import model_parallel_profile, resolve_model_parallel

H100_NVLINK = sm.get_gpu("h100-sxm").intra_node_bw  # 3.6e12 bit/s per GPU
SMALL = sm.transformer_profile(sm.TransformerConfig(
    layers=4, hidden=512, heads=8, ffn=1376, seq=256, vocab=1000, micro_batch=2),
    "h100-sxm")
NET = dict(gpus_per_node=8, nics_per_node=8)


def _valid_groups(n_dp, gpn_dp):
    """Shard groups the dp view admits: dividing n/tp, and a node's data-parallel GPUs
    or whole such nodes [GPUs]."""
    return [g for g in range(2, n_dp + 1) if n_dp % g == 0
            and ((g <= gpn_dp and gpn_dp % g == 0) or (g > gpn_dp and g % gpn_dp == 0))]


@st.composite
def jobs(draw):
    """A tp x dp job on nodes of q GPUs and nu NICs: strategy, tp, n/tp, shard group."""
    q = draw(st.sampled_from([4, 8]))
    tp = draw(st.sampled_from([t for t in (2, 4, 8) if t <= q]))
    gpn_dp = q // tp
    if gpn_dp > 1 and draw(st.booleans()):  # inside one node
        n_dp = draw(st.sampled_from([d for d in range(2, gpn_dp + 1) if gpn_dp % d == 0]))
    else:
        n_dp = gpn_dp * draw(st.integers(max(1, -(-2 // gpn_dp)), 64 // gpn_dp))
    groups = _valid_groups(n_dp, gpn_dp) if n_dp > gpn_dp or gpn_dp % n_dp == 0 else []
    group = draw(st.sampled_from([None] + [g for g in groups if g < n_dp]))
    nu = draw(st.sampled_from([1, 2, 4, 8]))
    bw = draw(st.floats(1e9, 4e11))
    u = draw(st.floats(0.1, 1.0))
    ratio = draw(st.sampled_from([1.0, draw(st.floats(1.0, 50.0))]))
    intra = draw(st.floats(5e10, 3.6e12))
    if group is not None and group > gpn_dp and n_dp > group:
        # a shard ring across nodes beside all-reduces across groups: exact while the
        # NICs bind (docs/sharding.rst, eq. shard-group), in the dp view's rates
        intra = max(intra, 1.01 * u * ratio * bw * nu / tp)
    return dict(strategy=draw(st.sampled_from(["zero1", "zero2", "zero3"])), q=q, tp=tp,
                n_dp=n_dp, shard_group=group, nu=nu, bw=bw, utilization=u,
                compression=ratio, alpha=draw(st.floats(0.0, 2e-5)),
                intra_alpha=draw(st.floats(0.0, 5e-6)), intra_bw=intra,
                microbatches=draw(st.sampled_from([None, 2])))


def closed_form(profile, job):
    kw = dict(gpus_per_node=job["q"], nics_per_node=job["nu"], intra_bw=job["intra_bw"],
              intra_alpha=job["intra_alpha"], alpha=job["alpha"],
              utilization=job["utilization"], compression=job["compression"])
    return sm.iteration_time(profile, job["tp"] * job["n_dp"], job["bw"],
                             sharding=job["strategy"], tp=job["tp"],
                             shard_group=job["shard_group"],
                             microbatches=job["microbatches"], **kw)


def reference(profile, job):
    """The discrete-event reference on one GPU's profile (built here by
    model_parallel_profile from the job's topology) and one data-parallel ring's view of
    the node: q/tp GPUs of the ring per node, nu/tp of its NICs."""
    mp = resolve_model_parallel(job["tp"], 1, job["microbatches"], profile.grad_accum)
    opts = sm.Scenario.build(profile, gpus_per_node=job["q"], nics_per_node=job["nu"],
                             intra_bw=job["intra_bw"], intra_alpha=job["intra_alpha"],
                             alpha=job["alpha"]).options
    one_gpu = model_parallel_profile(profile, mp, opts)
    return simulate_sharded(
        one_gpu, job["n_dp"], job["bw"] * job["nu"] / job["tp"], strategy=job["strategy"],
        wrap="block", fusion=None, utilization=job["utilization"],
        compression=job["compression"], alpha=job["alpha"],
        gpus_per_node=job["q"] // job["tp"], nics_per_node=1, intra_bw=job["intra_bw"],
        intra_alpha=job["intra_alpha"], element_bytes=2, grad_accum=one_gpu.grad_accum,
        shard_group=job["shard_group"])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_closed_form_equals_discrete_event_reference(job):
    assert closed_form(SMALL, job).total == pytest.approx(reference(SMALL, job), rel=1e-9)


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("n_dp,group", [(2, None), (4, 2), (16, None), (16, 8), (64, None),
                                        (64, 16)])
def test_grid_equals_discrete_event_reference(strategy, tp, n_dp, group):
    if group is not None and group not in _valid_groups(n_dp, 8 // tp):
        group = None
    job = dict(strategy=strategy, q=8, tp=tp, n_dp=n_dp, shard_group=group, nu=8,
               bw=100e9, utilization=1.0, compression=1.0, alpha=5e-6, intra_alpha=1e-6,
               intra_bw=H100_NVLINK, microbatches=None)
    it = closed_form(SMALL, job)
    assert it.total == pytest.approx(reference(SMALL, job), rel=1e-9)
    assert it.settings["tp"] == tp and it.settings["sharding"] == strategy
    assert it.settings["dp_ring_gpus_per_node"] == 8 // tp


def _reference_input(one_gpu, checkpointing, tp, intra_bw, intra_alpha):
    """One GPU's checkpointed profile as the reference takes it, derived by hand (not
    from the library's recompute bookkeeping): the single-GPU recompute of each tensor
    (the checkpointed profile's ready times less the plain profile's) split over the tp
    GPUs (the backward's own TP all-reduces run in the blocks' backward, not in the
    recompute), plus under "full" the recomputed layers' TP all-reduces (2 per layer,
    eq. tp-compute) spread as the recompute; returns the
    profile without it and, per block, the recompute as a fraction of the block's
    forward (the forward split by the backward spans without recompute)."""
    import attrs
    from des_sharding import _BLOCK, group_units
    from scalemodel.checkpointing import with_recompute

    cfg = SMALL.provenance["config"]
    base = with_recompute(SMALL, checkpointing)
    cum = np.asarray(base.tensor_ready) - np.asarray(SMALL.tensor_ready)  # cumulative
    s_bytes = cfg["micro_batch"] * cfg["seq"] * cfg["hidden"] * 2.0  # bf16 activations
    a_t = 2 * (tp - 1) * intra_alpha + 2 * (tp - 1) / tp * 8 * s_bytes / intra_bw
    layers_redone = {"full": 4, 0.5: 2, "selective": 0}[checkpointing]
    shift = cum / tp + layers_redone * 2 * a_t * cum / cum[-1]
    plain = attrs.evolve(one_gpu, tensor_ready=np.asarray(one_gpu.tensor_ready) - shift,
                         backward_time=one_gpu.backward_time - shift[-1])
    names, ready = one_gpu.tensor_names, list(plain.tensor_ready)
    blocks = group_units(names, len(names), "block")
    spans, prev = [], 0.0
    for grp in blocks:
        spans.append(max(ready[i] for i in grp) - prev)
        prev = max(ready[i] for i in grp)
    spans[-1] += max(0.0, plain.backward_time - prev)
    total, before, fractions = sum(spans), 0.0, {}
    for grp, span in zip(blocks, spans):
        amount = float(shift[grp[-1]]) - before
        before = float(shift[grp[-1]])
        if amount > 1e-15:
            fractions[_BLOCK.match(names[grp[0]]).group(1)] = amount / (
                one_gpu.forward_time * span / total)
    return plain, fractions


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.parametrize("checkpointing", ["full", 0.5, "selective"])
@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("bw", [25e9, 400e9])
def test_checkpointing_equals_discrete_event_reference(strategy, checkpointing, tp, bw):
    # the recompute (and, under "full", its TP all-reduces) at the start of each
    # checkpointed block's backward; zero3's units split the forward without it
    kw = dict(gpus_per_node=8, nics_per_node=8, intra_bw=H100_NVLINK, intra_alpha=1e-6,
              alpha=5e-6)
    it = sm.iteration_time(SMALL, 16 * tp, bw, sharding=strategy, tp=tp,
                           activation_checkpointing=checkpointing, **kw)
    one_gpu = sm.Scenario.build(SMALL, sharding=strategy, tp=tp,
                                activation_checkpointing=checkpointing, **kw).profile
    plain, fractions = _reference_input(one_gpu, checkpointing, tp, H100_NVLINK, 1e-6)
    assert len(fractions) == (2 if checkpointing == 0.5 else 4)
    des = simulate_sharded(plain, 16, bw * 8 / tp, strategy=strategy, wrap="block",
                           fusion=None, alpha=5e-6, gpus_per_node=8 // tp, nics_per_node=1,
                           intra_bw=H100_NVLINK, intra_alpha=1e-6, element_bytes=2,
                           grad_accum=one_gpu.grad_accum, recompute=fractions)
    assert it.total == pytest.approx(des, rel=1e-9)
    plain_tp = sm.iteration_time(SMALL, 16 * tp, bw, sharding=strategy, tp=tp, **kw)
    assert it.backward > plain_tp.backward  # the recompute is in the backward


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3", "hybrid_shard"])
def test_tp_1_is_plain_sharding(strategy):
    kw = dict(sharding=strategy, gpus_per_node=8, nics_per_node=4,
              intra_bw=H100_NVLINK, alpha=5e-6)
    for model, n in (("llama-2-7b", 64), ("llama-2-13b", 256), (SMALL, 16)):
        plain = sm.iteration_time(model, n, "100Gbps", **kw)
        with_tp1 = sm.iteration_time(model, n, "100Gbps", tp=1, pp=1, **kw)
        assert with_tp1.total == plain.total
        assert with_tp1.scaling_factor == plain.scaling_factor
        assert "tp" not in with_tp1.settings
        m = sm.memory(model if isinstance(model, str) else "llama-2-7b", n,
                      sharding=strategy, gpus_per_node=8)
        assert sm.memory(model if isinstance(model, str) else "llama-2-7b", n,
                         sharding=strategy, gpus_per_node=8, tp=1).per_gpu == m.per_gpu


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3", "hybrid_shard"])
@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("group", [None, 2, 4])
def test_memory_model_state_is_a_hand_count(strategy, tp, group):
    if strategy == "hybrid_shard" and group is not None:
        return
    psi = sm.llm_config("llama-2-13b").parameter_count
    n = 128
    d = {"hybrid_shard": 8 // tp}.get(strategy, group or n // tp)  # the shard group
    # bf16 parameters and gradients (2 bytes), Adam: fp32 master + 2 fp32 states (12)
    params = 2 * psi / tp / (d if strategy in ("zero3", "hybrid_shard") else 1)
    grads = 2 * psi / tp / (1 if strategy == "zero1" else d)
    optim = 12 * psi / tp / d
    m = sm.memory("llama-2-13b", n, sharding=strategy, tp=tp, shard_group=group,
                  gpus_per_node=8, suggest=False)
    assert m.parts["parameters"] == pytest.approx(params, rel=1e-12)
    assert m.parts["gradients"] == pytest.approx(grads, rel=1e-12)
    assert m.parts["optimizer"] == pytest.approx(optim, rel=1e-12)
    # activations as tensor parallelism counts them, whatever the sharding
    ddp = sm.memory("llama-2-13b", n, tp=tp, suggest=False)
    assert m.parts["activations"] == ddp.parts["activations"]
    if strategy in ("zero3", "hybrid_shard"):  # the gathered blocks: one tp slice
        full = sm.memory("llama-2-13b", n, sharding=strategy, shard_group=group,
                         gpus_per_node=8, suggest=False)
        assert m.parts["buffers"] - ddp.parts["buffers"] == pytest.approx(
            (full.parts["buffers"] - ddp.parts["buffers"]) / tp, rel=1e-12)
    assert m.settings["tp"] == tp and m.settings["sharding"] == strategy


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_ranks_share_the_nics(strategy, tp):
    # one data-parallel ring of 4 nodes: q/tp GPUs of it per node, nu/tp of the NICs;
    # without latencies and with a fast node link, its collectives take its NIC bits at
    # bw nu / tp: halving the NICs doubles them
    n_dp, q, bw = 16, 8, 100e9
    busy = {}
    for nu in (8, 4):
        sc = sm.Scenario.build("llama-2-13b", sharding=strategy, tp=tp, gpus_per_node=q,
                               nics_per_node=nu, intra_bw=1e18)
        nd, ring_bw = sc.data_parallel(tp * n_dp, bw)
        assert nd == n_dp and ring_bw == pytest.approx(bw * nu / tp, rel=1e-15)
        sched = sc.schedule(n_dp)
        psi = sm.llm_config("llama-2-13b").parameter_count
        gathered = 2 * psi / tp * (2 if strategy == "zero3" else 1)  # bf16, ~all units twice
        if strategy == "zero3":
            assert sched.param_bytes < gathered and sched.param_bytes > 0.9 * gathered
        else:
            assert sched.param_bytes == pytest.approx(gathered, rel=1e-9)
        # each node's crossing of the flat ring carries (d - 1)/d of every buffer
        hand = 8.0 * (n_dp - 1) / n_dp * (sched.param_bytes + sched.grad_bytes)
        assert sched.nic_bits == pytest.approx(hand, rel=1e-9)
        assert sched.wire_bits == pytest.approx(hand, rel=1e-9)
        # the channel's busy time: those bits at the ring's rate, plus the reductions
        busy[nu] = sched.channel_time(1.0 / ring_bw)
        assert busy[nu] - sched.channel_time(0.0) == pytest.approx(hand * tp / (bw * nu),
                                                                   rel=1e-9)
    assert busy[4] - busy[8] == pytest.approx(busy[8] - sched.channel_time(0.0), rel=1e-9)
    # and the iteration: halving the NICs is halving each NIC's rate
    kw = dict(sharding=strategy, tp=tp, gpus_per_node=q, intra_bw=H100_NVLINK, alpha=5e-6)
    assert sm.iteration_time("llama-2-13b", tp * n_dp, bw, nics_per_node=4, **kw).total == \
        pytest.approx(sm.iteration_time("llama-2-13b", tp * n_dp, bw / 2, nics_per_node=8,
                                        **kw).total, rel=1e-12)


JOB = dict(gpus_per_node=8, nics_per_node=8, tp=2)


@pytest.mark.parametrize("sharding,group", [("zero1", None), ("zero1", 8), ("zero3", None),
                                            ("zero3", 4), ("hybrid_shard", None)])
def test_every_call_agrees_with_iteration_time(sharding, group):
    m, n, bw = "llama-2-13b", 128, 25e9
    kw = dict(JOB, sharding=sharding, shard_group=group)
    it = sm.iteration_time(m, n, bw, **kw)
    sf = sm.scaling_factor(m, n, bw, **kw)
    assert sf == it.scaling_factor
    assert it.settings["sharding"] == sharding and it.settings["tp"] == 2
    mem = sm.memory(m, n, sharding=sharding, tp=2, shard_group=group, gpus_per_node=8)
    res = sm.min_compression(m, bw, n=n, target=min(0.9, 0.9 * it.scaling_factor + 0.1), **kw)
    assert res.feasible
    assert sm.scaling_factor(m, n, bw, compression=res.ratio, **kw) == pytest.approx(
        res.scaling_factor, rel=1e-9)
    assert res.memory_per_gpu == mem.per_gpu
    req = sm.required_bandwidth(m, n=n, target=0.5, **kw)
    assert sm.scaling_factor(m, n, req.bw, **kw) == pytest.approx(0.5, rel=1e-9)
    assert req.memory_per_gpu == mem.per_gpu
    plan = sm.plan_compression(m, bw, n=n, **kw)
    assert plan.uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)
    assert [r.scaling_factor for r in plan.rows if r.compressor == "none"] == \
        [pytest.approx(sf, rel=1e-12)]
    rate = sm.breakeven_bandwidth(m, "int8", n=n, **kw)
    assert sm.compressed_scaling_factor(m, "int8", n, rate, **kw) == pytest.approx(
        sm.scaling_factor(m, n, rate, **kw), rel=1e-6)
    sens = sm.sensitivities(m, n, bw, **kw)
    assert sens.scaling_factor == pytest.approx(sf, rel=1e-12)


def test_cli_twins(capsys):
    from scalemodel.cli import main

    args = ["--model", "llama-2-13b", "--n", "128", "--gpus-per-node", "8",
            "--nics-per-node", "8", "--tp", "2", "--sharding", "zero3"]
    assert main(["scaling", "--bw", "25Gbps", "--json", *args]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    row = out["results"][0]
    assert row["scaling_factor"] == pytest.approx(sm.scaling_factor(
        "llama-2-13b", 128, 25e9, sharding="zero3", **JOB), rel=1e-12)
    assert row["memory_per_gpu"] == sm.memory("llama-2-13b", 128, sharding="zero3",
                                              tp=2, gpus_per_node=8).per_gpu
    assert main(["min-compression", "--bw", "25Gbps", "--json", *args]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    want = sm.min_compression("llama-2-13b", 25e9, n=128, sharding="zero3", **JOB)
    assert got["ratio"] == pytest.approx(want.ratio, rel=1e-12)
    assert main(["iteration", "--bw", "25Gbps", "--json", *args]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    assert got["total"] == pytest.approx(sm.iteration_time(
        "llama-2-13b", 128, 25e9, sharding="zero3", **JOB).total, rel=1e-12)
    assert main(["iteration", "--bw", "25Gbps", "--shard-group", "4", "--json",
                 *args]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    assert got["total"] == pytest.approx(sm.iteration_time(
        "llama-2-13b", 128, 25e9, sharding="zero3", shard_group=4, **JOB).total, rel=1e-12)
    assert main(["iteration", "--bw", "25Gbps", "--tp", "2", "--pp", "2", "--microbatches",
                 "4", *args[:-4], "--sharding", "zero3"]) == 2
    assert "pp=2" in capsys.readouterr().err


@pytest.mark.parametrize("kw,name,words", [
    (dict(tp=2, pp=2, microbatches=4, sharding="zero3"), "pp", "pipeline"),
    (dict(tp=8, n=8, sharding="zero1"), "n", "n / tp"),
    (dict(tp=8, sharding="hybrid_shard"), "sharding", "gpus_per_node / tp"),
])
def test_refused_by_name(kw, name, words):
    kw = dict(kw)
    n = kw.pop("n", 64)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.iteration_time("llama-2-13b", n, "100Gbps", **NET, **kw)
    assert exc.value.parameter == name and words in str(exc.value)


@pytest.mark.parametrize("kw,name,words", [
    (dict(tp=2, pp=2, microbatches=4, sharding="zero3"), "pp", "pipeline"),
    (dict(tp=8, n=8, sharding="zero1"), "n", "n / tp"),
    (dict(tp=8, sharding="hybrid_shard"), "sharding", "gpus_per_node / tp"),
    (dict(tp=2, n=48, sharding="zero3", shard_group=16), "shard_group", "n / tp = 24"),
    (dict(tp=2, sharding="zero3", accounting="fsdp"), "accounting", "tp=2"),
])
def test_memory_refuses_by_name(kw, name, words):
    kw = dict(kw)
    n = kw.pop("n", 64)
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory("llama-2-13b", n, gpus_per_node=8, **kw)
    assert exc.value.parameter == name and words in str(exc.value)


def test_sharding_with_tp_is_vectorized_over_n():
    ns = np.array([32, 64, 128, 256])
    grid = sm.scaling_factor("llama-2-13b", ns, "100Gbps", sharding="zero3", **JOB)
    each = [sm.scaling_factor("llama-2-13b", int(n), "100Gbps", sharding="zero3", **JOB)
            for n in ns]
    assert np.array_equal(grid, each)
    mem = sm.memory("llama-2-13b", ns, sharding="zero3", tp=2, suggest=False)
    assert np.allclose(mem.parts["optimizer"],
                       12 * sm.llm_config("llama-2-13b").parameter_count / ns, rtol=1e-12)
