"""A profile computed for a built-in GPU takes that GPU's intra-node link and architecture
when the caller gives none (`GPUSpec.node_link`, `efficiency.gpu_topology`): an H100 job's
tensor-parallel and node-local collectives run at NVLink 4's rate and NCCL's choice sees
Hopper, as the validation scripts, which pass the spec's rate, assumed. Before, every
profile got the V100 defaults (2.4 Tbit/s, Volta)."""

import warnings

import attrs
import pytest

import scalemodel as sm
from scalemodel.efficiency import gpu_topology
from scalemodel.model import Scenario
from scalemodel.topology import DEFAULT_INTRA_BW

H100 = sm.get_gpu("h100-sxm")


def _options(model, **kw):
    sc = Scenario.build(model, **kw)
    return sc.options


def test_the_spec_link_per_direction_and_its_architecture():
    assert H100.node_link() == dict(intra_bw=H100.intra_node_bw, intra_link="nvlink",
                                    arch="hopper")
    assert H100.intra_node_bw == 3.6e12  # 900 GB/s both ways: 450 GB/s each way
    assert sm.get_gpu("h100-pcie").node_link()["intra_link"] == "pci"
    assert "arch" not in sm.get_gpu("mi300x").node_link()  # NCCL's model has no CDNA3


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-40gb", "v100-sxm2-32gb", "h100-pcie"])
def test_a_flop_derived_profile_takes_its_gpus_link(gpu):
    cfg = sm.llm_config("llama-2-7b", dtype="bf16" if "v100" not in gpu else "fp16")
    prof = sm.transformer_profile(cfg, gpu)
    spec = sm.get_gpu(gpu)
    o = _options(prof, gpus_per_node=8)
    assert (o.intra_bw, o.intra_link) == (spec.intra_node_bw, spec.node_link()["intra_link"])
    assert o.arch == spec.architecture
    assert gpu_topology(prof).gpus_per_node is None  # the link only: no nodes implied


def test_what_the_caller_gives_wins_and_a_measured_profile_keeps_the_defaults():
    assert _options("llama-2-7b", gpus_per_node=8, intra_bw="1.2Tbps").intra_bw == 1.2e12
    o = _options("llama-2-7b", gpus_per_node=8, intra_bw="1.2Tbps")
    assert o.arch == "hopper"  # the architecture is still the profile's GPU's
    o = _options("resnet50", gpus_per_node=8)  # measured on V100: no GPU recorded
    assert (o.intra_bw, o.arch) == (DEFAULT_INTRA_BW, "volta")
    custom = attrs.evolve(H100, name="my-gpu")  # not built in: not looked up by name
    prof = sm.transformer_profile(sm.llm_config("llama-2-7b"), custom)
    assert gpu_topology(prof) is None
    assert _options(prof, gpus_per_node=8).intra_bw == DEFAULT_INTRA_BW


def test_answers_equal_the_same_call_with_the_spec_link_given():
    """The default is the spec's rate, not another number: a tensor-parallel job (its
    per-layer all-reduce on NVLink) answers as with ``intra_bw`` given, and not as with
    V100's rate."""
    kw = dict(n=64, bw=100e9, gpus_per_node=8, nics_per_node=8, tp=4)
    got = sm.scaling_factor("llama-2-13b", **kw)
    assert got == sm.scaling_factor("llama-2-13b", intra_bw=H100.intra_node_bw, **kw)
    assert got != pytest.approx(sm.scaling_factor("llama-2-13b", intra_bw=DEFAULT_INTRA_BW,
                                                  **kw), rel=1e-3)


def test_nccl_choice_sees_the_gpus_architecture():
    """algorithm="nccl" on an H100 profile chooses as on a cluster whose topology names
    Hopper (and H100's link), not as on Volta."""
    hopper = sm.ClusterProfile(name="h", topology=sm.Topology(
        gpus_per_node=8, **H100.node_link()))
    cfg = sm.TransformerConfig(layers=4, hidden=512, heads=8, ffn=1536, vocab=1000, seq=1024,
                               micro_batch=2, dtype="bf16")  # messages where Hopper differs
    prof = sm.transformer_profile(cfg, "h100-sxm", efficiency=0.5)
    kw = dict(n=[16, 64, 256, 1024], bw=25e9, algorithm="nccl")
    got = sm.scaling_factor(prof, gpus_per_node=8, **kw)
    assert list(got) == list(sm.scaling_factor(prof, cluster=hopper, **kw))
    volta = attrs.evolve(hopper, topology=attrs.evolve(hopper.topology, arch="volta"))
    assert list(got) != list(sm.scaling_factor(prof, cluster=volta, **kw))


def test_a_fit_on_runs_of_one_gpu_records_its_link():
    """fit_cluster on runs of H100 profiles (no transport data, no intra_bw given) keeps
    H100's link in the cluster it writes, so that its predictions and the fit agree."""
    prof = sm.load_profile("llama-2-7b")
    truth = sm.ClusterProfile(name="t", topology=sm.Topology(gpus_per_node=8,
                                                              **H100.node_link()),
                              ceiling=150e9)
    runs = [dict(model=prof, n=n, bw=400e9, sharding="zero3",
                 iteration_time=float(sm.iteration_time(prof, n, 400e9, cluster=truth,
                                                        sharding="zero3").total))
            for n in (16, 64)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, gpus_per_node=8, fit=("ceiling",))
    topo = fit.cluster.topology
    assert (topo.intra_bw, topo.arch) == (H100.intra_node_bw, "hopper")
    assert fit.cluster.ceiling == pytest.approx(150e9, rel=1e-3)
    mixed = [dict(runs[0], model=sm.transformer_profile(
        sm.llm_config("llama-2-7b"), "a100-80gb")), runs[1]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(mixed, gpus_per_node=8, fit=("ceiling",))
    assert fit.cluster.topology.intra_bw == DEFAULT_INTRA_BW  # two GPUs: the defaults


def test_efficiency_is_not_fitted_across_gpu_classes():
    """Issue 17 item 5: the efficiency is kept per GPU class. Runs of FLOP-derived profiles
    on an A100 and an H100 were fitted one number (0.52 where the runs were made at 0.34
    and 0.68) and the cluster then applied it to both; now the fit names the classes and
    says what to do. One class, or the other class's run with a single-worker time, fits."""
    cfg = sm.llm_config("llama-2-7b")
    ph, pa = sm.transformer_profile(cfg, "h100-sxm"), sm.transformer_profile(cfg, "a100-80gb")

    def run(p, factor, **kw):
        t = float(sm.iteration_time(p, 16, 400e9, sharding="zero3").total)
        return dict(model=p, n=16, bw=400e9, sharding="zero3", iteration_time=factor * t,
                    **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fit in (None, ("efficiency",), ("efficiency", "ceiling")):
            with pytest.raises(sm.InvalidParameterError, match="2 GPU classes") as exc:
                sm.fit_cluster([run(ph, 1.2), run(pa, 0.9)], gpus_per_node=8, fit=fit)
            assert "run 0 on NVIDIA H100" in str(exc.value)
            assert "own fit_cluster call" in str(exc.value)
        one = sm.fit_cluster([run(ph, 1.2), dict(run(ph, 1.2), n=32, iteration_time=1.2 * float(
            sm.iteration_time(ph, 32, 400e9, sharding="zero3").total))], gpus_per_node=8)
        assert one.cluster.extra["efficiency"]["gpu"] == ["NVIDIA H100 SXM5 80GB"]
        a100 = run(pa, 0.9)
        mixed = sm.fit_cluster([run(ph, 1.2), dict(a100, single_worker_time=0.85 * a100[
                                "iteration_time"])],
                               gpus_per_node=8)  # the A100's compute is measured
        assert mixed.cluster.extra["efficiency"]["gpu"] == ["NVIDIA H100 SXM5 80GB"]
