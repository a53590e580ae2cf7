"""CPU offload: memory moved to the host, the host memory of a node checked, the offloaded
step's time by hand and against the discrete-event reference, and bad input."""

import warnings

import pytest

import scalemodel as sm
from des_sharding import simulate_sharded
from scalemodel.offload import (CPU_ADAM_PARAMS_PER_S, HOST_LINK, canonical_offload,
                                host_link_rate, offload_step_time)


def test_names():
    assert canonical_offload(None) == canonical_offload(False) == "none"
    assert canonical_offload("ZeRO-Offload") == "optimizer"
    assert canonical_offload("optimizer + parameters") == "optimizer+parameters"
    assert canonical_offload("cpu_offload") == "optimizer+parameters"


@pytest.mark.parametrize("bad", ["gpu", "optimiser+params", True, 3])
def test_bad_offload_names_the_value_and_the_valid_ones(bad):
    with pytest.raises(sm.InvalidParameterError, match="offload=.*'optimizer'"):
        canonical_offload(bad)
    with pytest.raises(sm.InvalidParameterError, match="offload="):
        sm.memory("llama-2-7b", 8, offload=bad)


def test_memory_moves_to_the_host():
    base = sm.memory("llama-2-13b", 8, sharding="zero3")
    opt = sm.memory("llama-2-13b", 8, sharding="zero3", offload="optimizer")
    both = sm.memory("llama-2-13b", 8, sharding="zero3", offload="optimizer+parameters")
    psi = base.parameter_count
    assert opt.parts["optimizer"] == 0.0
    assert opt.per_gpu == pytest.approx(base.per_gpu - base.parts["optimizer"])
    assert opt.host_per_gpu == pytest.approx(base.parts["optimizer"] + 4 * psi / 8)
    assert both.parts["parameters"] == both.parts["gradients"] == 0.0
    assert both.host_per_gpu == pytest.approx(opt.host_per_gpu + base.parts["parameters"])
    assert base.per_gpu > opt.per_gpu > both.per_gpu and base.host_per_gpu == 0.0
    assert both.settings["offload"] == "optimizer+parameters"
    assert "host" in both.message()


def test_host_memory_must_hold_it():
    # 70B on 8 A100-40GB: the optimizer shards need 8 x 140 GB on the host of a node
    m = sm.memory("llama-2-70b", 8, sharding="zero3", gpu="a100-80gb", offload="optimizer")
    assert m.host_per_gpu * 8 < 2e12
    with pytest.raises(sm.InvalidParameterError, match=r"host_memory=500000000000.0.*GiB of host "
                       "memory per node"):
        sm.memory("llama-2-70b", 8, sharding="zero3", offload="optimizer", host_memory=5e11)
    with pytest.raises(sm.InvalidParameterError, match="host_memory=None.*h100-pcie"):
        sm.memory("llama-2-7b", 8, sharding="zero3", gpu="h100-pcie", offload="optimizer")
    ok = sm.memory("llama-2-7b", 8, sharding="zero3", gpu="h100-pcie", offload="optimizer",
                   host_memory=1e12)
    assert ok.fits
    with pytest.raises(sm.InvalidParameterError, match="host_memory"):
        sm.memory("llama-2-7b", 8, offload="optimizer", host_memory=-1)


def test_default_host_memory_too_small_names_the_offload_given():
    """Without host_memory= the message names what the user wrote (offload) and the
    default it was held against, not a host_memory value never passed."""
    with pytest.raises(sm.InvalidParameterError) as err:
        sm.memory("llama-2-70b", 8, offload="optimizer+parameters", gpu="a100-40gb",
                  sharding="zero3")
    msg = str(err.value)
    assert isinstance(err.value, sm.HostMemoryError) and err.value.parameter == "offload"
    assert msg.startswith("offload='optimizer+parameters' is invalid")
    assert "a usual a100-40gb server (the default host_memory)" in msg
    assert "host_memory=1" not in msg


def test_parameter_offload_needs_full_sharding():
    with pytest.raises(sm.InvalidParameterError, match="offload='optimizer\\+parameters'.*"
                       "zero2"):
        sm.memory("llama-2-7b", 8, sharding="zero2", offload="optimizer+parameters")
    with pytest.raises(sm.InvalidParameterError, match="offload"):
        sm.scaling_factor("llama-2-7b", 8, 1e11, offload="optimizer+parameters")


def test_step_time_by_hand():
    psi = 1e9
    link = HOST_LINK["h100-sxm"][0]
    assert host_link_rate("h100-sxm") == link == pytest.approx(63.015e9)
    t = offload_step_time(psi, "optimizer", "h100-sxm")
    assert t == pytest.approx(psi * 4 / link + psi / CPU_ADAM_PARAMS_PER_S)
    t2 = offload_step_time(psi, "optimizer+parameters", "h100-sxm", micro_batches=3)
    assert t2 == pytest.approx(t + 6 * psi * 2 / link)
    assert offload_step_time(psi, "none", "h100-sxm") == 0.0


@pytest.mark.parametrize("mode", ["optimizer", "optimizer+parameters"])
def test_offloaded_update_in_the_closed_form_and_the_reference(mode):
    prof = sm.load_profile("llama-2-7b")
    psi = prof.total_bytes / 2
    # each GPU's shard of psi / n, its CPU step on a host shared by min(n, 8) GPUs (the
    # H100's usual 8-GPU server): the reference takes the whole model's step, / n
    for n, bw in ((4, 1e10), (8, 1e10), (64, 4e11)):
        shard = offload_step_time(psi / n, mode, "h100-sxm", ranks_per_host=min(n, 8))
        it = sm.iteration_time(prof, n, bw, sharding="zero3", offload=mode)
        assert it.update == pytest.approx(shard, rel=1e-12)
        des = simulate_sharded(prof, n, bw, strategy="zero3", wrap="block", fusion=None,
                               element_bytes=2, update_time=shard * n)
        assert it.total == pytest.approx(des, rel=1e-9)
    # DDP with the optimizer offloaded: every GPU runs the whole step, 8 of them per host
    it = sm.iteration_time(prof, 8, 1e18, offload="optimizer")
    base = sm.iteration_time(prof, 8, 1e18)
    full = offload_step_time(psi, "optimizer", "h100-sxm", ranks_per_host=8)
    assert it.total - base.total == pytest.approx(full - prof.update_time, rel=1e-9)


def test_the_cpu_step_is_a_hosts_shared_by_its_gpus():
    """One host's CPU optimizer rate: alone (one GPU, ZeRO-Offload's single-GPU case) a
    GPU has all of it; n GPUs of a node share it, so the shard's step does not shrink
    until the job spans nodes; gpus_per_node= sets the node."""
    prof = sm.load_profile("llama-2-7b")
    psi = prof.total_bytes / 2
    one = sm.iteration_time(prof, 1, 1e11, offload="optimizer")
    assert one.update == pytest.approx(offload_step_time(psi, "optimizer", "h100-sxm"),
                                       rel=1e-12)
    cpu = psi / CPU_ADAM_PARAMS_PER_S
    link = offload_step_time(psi, "optimizer", "h100-sxm") - cpu
    for n, g, h in ((2, None, 2), (4, None, 4), (16, None, 8), (16, 4, 4), (64, 2, 2)):
        it = sm.iteration_time(prof, n, 1e11, sharding="zero3", offload="optimizer",
                               gpus_per_node=g)
        assert it.update == pytest.approx((link + cpu * h) / n, rel=1e-12)
    # the solvers see the same step: the scaling factor at the bandwidth they answer
    kw = dict(sharding="zero3", offload="optimizer")
    target = min(0.9, 0.9 * sm.scaling_factor(prof, 64, 1e15, **kw))
    req = sm.required_bandwidth(prof, n=64, target=target, **kw)
    assert req.feasible and sm.scaling_factor(prof, 64, req.bw, **kw) == pytest.approx(
        target, rel=1e-6)
    res = sm.min_compression(prof, req.bw / 4, n=64, target=target, **kw)
    assert sm.scaling_factor(prof, 64, req.bw / 4, compression=res.ratio,
                             **kw) == pytest.approx(target, rel=1e-6)
    assert sm.iteration_time(prof, 64, req.bw, sharding="zero3", offload="optimizer",
                             ).update == pytest.approx((link + cpu * 8) / 64, rel=1e-12)


def test_one_replica_of_a_tensor_parallel_job_shares_its_host():
    """tp=2 x pp=2: one replica's 4 GPUs run their CPU steps at once (the scaling
    factor's baseline), 8 of them on an 8-GPU node from two replicas on; each step is
    the CPU part of the heaviest stage's tp shard times the GPUs on its host."""
    from scalemodel.parallel import resolve_model_parallel, stage_shares

    prof = sm.load_profile("llama-2-7b")
    kw = dict(tp=2, pp=2, microbatches=8, offload="optimizer")
    mp = resolve_model_parallel(2, 2, 8, prof.grad_accum, 1, False)
    c = prof.total_bytes / 2 / CPU_ADAM_PARAMS_PER_S * stage_shares(prof, mp).heaviest / 2
    u = {(n, g): sm.iteration_time(prof, n, 1e11, gpus_per_node=g, **kw).update
         for n, g in ((4, 2), (4, 4), (4, 8), (8, 8), (16, 8))}
    assert u[4, 4] - u[4, 2] == pytest.approx(2 * c, rel=1e-9)  # 4 GPUs on a host, not 2
    assert u[4, 8] == u[4, 4]  # one replica fills half the node
    assert u[8, 8] - u[4, 8] == pytest.approx(4 * c, rel=1e-9)  # two fill it
    assert u[16, 8] == pytest.approx(u[8, 8], rel=1e-12)
    assert sm.iteration_time(prof, 4, 1e11, gpus_per_node=8, **kw).scaling_factor == 1.0


def test_does_it_fit_and_how_fast():
    # GPT-scale on 128 A100-40GB: does not fit without offload; the message says what would
    m = sm.memory("llama-2-70b", 128, sharding="zero3", gpu="a100-40gb", micro_batch=1)
    with pytest.warns(sm.ModelWarning, match="sets the memory checked"):  # H100 compute
        res = sm.min_compression("llama-2-70b", "200Gbps", n=128, sharding="zero3",
                                 gpu="a100-40gb", offload="optimizer+parameters",
                                 activation_checkpointing="full")
    assert res.fits and res.ratio >= 1.0
    assert m.settings["sharding"] == "zero3"


def test_a_time_question_says_when_the_host_cannot_hold_it():
    # DDP with the optimizer offloaded: each of a node's 8 GPUs puts the whole 70B
    # optimizer state on the host, more than its 2 TB
    res = sm.min_compression("llama-3-70b", "100Gbps", n=64, offload="optimizer",
                             gpus_per_node=8)
    assert res.fits is False and "host_memory" in res.message and "per node" in res.message


def test_a_time_question_on_a_gpu_without_a_recorded_server_is_not_checked():
    # no host memory is recorded for MI300X servers: the answer said 'does not fit' and
    # 'Pass host_memory=', which no time question takes
    with pytest.warns(sm.ModelWarning, match="sets the memory checked"):  # H100 compute
        res = sm.min_compression("llama-2-7b", "100Gbps", n=8, sharding="zero3",
                                 offload="optimizer", gpu="mi300x", gpus_per_node=8)
    assert res.fits is None
    assert "memory not checked on mi300x" in res.message
    assert "scalemodel.memory(..., host_memory=)" in res.message
    full = sm.min_compression("llama-3-70b", "100Gbps", n=64, offload="optimizer",
                              gpus_per_node=8)
    assert full.fits is False and "time questions take no host_memory=" in full.message


def test_a_shared_host_is_named_where_it_binds_and_its_nodes_are_used():
    """DDP with the optimizer offloaded on 8-GPU hosts: the shared CPU step is what
    binds (it was called 'overhead'), and gpus_per_node, which sets the host's GPUs,
    is not said to have no effect under a topology-free algorithm."""
    kw = dict(activation_checkpointing="full", offload="optimizer")
    it = sm.iteration_time("llama-2-7b", 64, 1e15, **kw)
    c = sm.load_profile("llama-2-7b").total_bytes / 2 / CPU_ADAM_PARAMS_PER_S
    assert it.binding == "offload" and "offload" in sm.BINDINGS
    assert it.critical_parts["offload"] == pytest.approx(7 * c, rel=1e-12)
    res = sm.min_compression("llama-2-7b", 25e9, n=64, **kw)
    assert not res.feasible and res.binding == "offload"
    plan = sm.plan_compression("llama-2-7b", "25Gbps", n=64, **kw)
    assert "is offload-bound" in plan.message
    # one worker: nothing shared
    assert "offload" not in sm.iteration_time("llama-2-7b", 1, 1e15, **kw).critical_parts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        four = sm.iteration_time("llama-2-7b", 16, 1e10, algorithm="ps", gpus_per_node=4,
                                 offload="optimizer")
    assert four.update < sm.iteration_time("llama-2-7b", 16, 1e10, algorithm="ps",
                                           offload="optimizer").update
    with pytest.warns(sm.ModelWarning, match="gpus_per_node=4 has no effect"):
        sm.iteration_time("llama-2-7b", 16, 1e10, algorithm="ps", gpus_per_node=4)
