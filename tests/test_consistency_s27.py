"""Session 27's cross-answer audit: two spellings of one job, or two answers about it,
agree (the node a hybrid shard group and an offloaded host count, the memory check inside
the time questions against memory(), settings that have no effect said so)."""

import warnings

import pytest

import scalemodel as sm


def _quiet(f, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*a, **kw)


def test_the_time_questions_check_host_memory_on_the_nodes_given():
    """memory() counted gpus_per_node=2 GPUs on a host; the check inside min_compression
    counted the server's 8 and said the job does not fit (957 GiB per node)."""
    kw = dict(offload="optimizer", activation_checkpointing="full", gpus_per_node=2)
    m = sm.memory("llama-3-8b", 16, gpu="a100-40gb", **kw)
    assert m.fits
    for r in (_quiet(sm.min_compression, "llama-3-8b", 100e9, n=16, gpu="a100-40gb", **kw),
              _quiet(sm.required_bandwidth, "llama-3-8b", n=16, gpu="a100-40gb", **kw)):
        assert r.fits and r.memory_per_gpu == pytest.approx(m.per_gpu)
        assert r.settings["offload_host_gpus"] == 2


def test_hybrid_shard_takes_memorys_node():
    """Without gpus_per_node the time model took 8 GPUs per node for every GPU (memory()
    refuses the H100 PCIe, which has no usual server) and refused tp > 1; settings said
    gpus_per_node None."""
    pcie = sm.transformer_profile(sm.llm_config("llama-2-7b"), gpu="h100-pcie")
    for call in (lambda: sm.iteration_time(pcie, 16, 100e9, sharding="hybrid_shard"),
                 lambda: sm.memory("llama-2-7b", 16, sharding="hybrid_shard",
                                   gpu="h100-pcie")):
        with pytest.raises(sm.InvalidParameterError, match="gpus_per_node"):
            call()
    given = sm.iteration_time(pcie, 16, 100e9, sharding="hybrid_shard", gpus_per_node=8)
    assert given.settings["gpus_per_node"] == 8
    # a GPU with a usual server: its node, the same answer as given, named in settings
    a = sm.iteration_time("llama-2-7b", 16, 100e9, sharding="hybrid_shard", tp=2)
    b = sm.iteration_time("llama-2-7b", 16, 100e9, sharding="hybrid_shard", tp=2,
                          gpus_per_node=8)
    assert float(a.total) == float(b.total) and a.settings["gpus_per_node"] == 8
    # a measured profile of a device the library does not know: 8, as documented
    assert float(sm.iteration_time("resnet50", 16, 10e9, sharding="hybrid_shard").total) \
        == float(sm.iteration_time("resnet50", 16, 10e9, sharding="hybrid_shard",
                                   gpus_per_node=8).total)


def test_a_one_gpu_node_has_nothing_to_shard_in_every_spelling():
    for call in (
            lambda: sm.iteration_time("llama-2-7b", 16, 100e9, sharding="hybrid_shard",
                                      gpus_per_node=1),
            lambda: sm.iteration_time("llama-2-7b", 16, 100e9, sharding="zero3",
                                      shard_group=1, gpus_per_node=1),
            lambda: sm.memory("llama-2-7b", 16, sharding="hybrid_shard", gpus_per_node=1)):
        with pytest.raises(sm.InvalidParameterError):
            call()


def test_an_offloaded_host_holds_at_least_a_tensor_parallel_group():
    """On the H100 PCIe (no usual server) offload counted one GPU per host although tp=4
    puts four GPUs in a node."""
    pcie = sm.transformer_profile(sm.llm_config("llama-2-7b"), gpu="h100-pcie")
    a = sm.iteration_time(pcie, 16, 100e9, offload="optimizer", tp=4)
    b = sm.iteration_time(pcie, 16, 100e9, offload="optimizer", tp=4, gpus_per_node=4)
    assert a.settings["offload_host_gpus"] == 4
    assert float(a.update) == pytest.approx(float(b.update), rel=1e-12)
    one = sm.iteration_time(pcie, 16, 100e9, offload="optimizer")
    assert one.settings["offload_host_gpus"] == 1


@pytest.mark.parametrize("given", [dict(intra_bw=1e11), dict(intra_alpha=1e-4),
                                   dict(nics_per_node=4)])
@pytest.mark.parametrize("sharding", ["zero1", "zero2", "zero3"])
def test_topology_settings_without_nodes_are_said_to_have_no_effect_when_sharded(
        sharding, given):
    """They change nothing without gpus_per_node (every GPU on its own link); DDP said so,
    sharding did not."""
    with pytest.warns(sm.ModelWarning, match=f"{next(iter(given))}=.* has no effect"):
        it = sm.iteration_time("llama-2-7b", 16, 25e9, sharding=sharding, **given)
    assert float(it.total) == float(sm.iteration_time("llama-2-7b", 16, 25e9,
                                                      sharding=sharding).total)


def test_intra_node_settings_with_tensor_parallelism_are_not_said_ignored():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = sm.iteration_time("llama-2-7b", 16, 25e9, sharding="zero3", tp=2, intra_bw=1e11)
        sm.iteration_time("llama-2-7b", 16, 25e9, sharding="zero3", intra_bw=1e11,
                          gpus_per_node=8)
    assert float(a.total) != float(sm.iteration_time("llama-2-7b", 16, 25e9,
                                                     sharding="zero3", tp=2).total)


def test_memory_refuses_the_tensor_parallel_layout_the_time_questions_refuse():
    for call in (lambda: sm.memory("llama-3-8b", 64, tp=8, gpus_per_node=4),
                 lambda: sm.iteration_time("llama-3-8b", 64, 100e9, tp=8, gpus_per_node=4)):
        with pytest.raises(sm.InvalidParameterError, match="must divide gpus_per_node=4"):
            call()
    with pytest.raises(sm.InvalidParameterError, match="gpus_per_node"):
        sm.memory("llama-3-8b", 64, gpus_per_node=2**70)


@pytest.mark.parametrize("candidates", [[5, 5, 5], [1000]])
def test_best_bucket_says_when_every_candidate_asked_is_slower_than_the_default(candidates):
    """It named the fastest candidate asked 'faster' by -0.033 % and -19 %."""
    r = sm.best_bucket_size("resnet50", 64, 10e9, candidates=candidates)
    assert r.bucket_cap_mb == candidates[0]  # the best of those asked
    assert r.iteration_time > r.default_iteration_time
    assert "slower than the default" in r.message and "keep the default" in r.message
    assert "faster" not in r.message


def test_a_gpu_that_is_not_the_profiles_is_said_to_set_memory_only():
    """min_compression('llama-2-7b', gpu='a100-80gb') answered with H100 compute and A100
    memory, unsaid (11.2x on the A100's own profile, 24.0x so)."""
    with pytest.warns(sm.ModelWarning, match="computes on the h100-sxm"):
        r = sm.min_compression("llama-2-7b", 25e9, n=32, gpu="a100-80gb")
    own = sm.min_compression(sm.transformer_profile(sm.llm_config("llama-2-7b"),
                                                    "a100-80gb"), 25e9, n=32)
    assert r.ratio != own.ratio
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own GPU, by an alias: nothing to say
        sm.min_compression("llama-2-7b", 25e9, n=32, gpu="h100")
