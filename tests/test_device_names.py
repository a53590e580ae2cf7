"""Device names as drivers report them map to the built-in GPUs (hardware.gpu_of_device),
and an nccl-tests log without an intra-node log takes its device's link
(calibrate.fit.unmeasured_intra_topology)."""

import pytest

import scalemodel as sm
from scalemodel.calibrate.fit import unmeasured_intra_topology
from scalemodel.hardware import gpu_of_device


@pytest.mark.parametrize("device, gpu", [
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"), ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA H100 SXM5 80GB", "h100-sxm"), ("h100", "h100-sxm"), ("A100-80GB", "a100-80gb"),
    # no built-in spec: PCIe V100 / A100 cards, H100 NVL, H200 NVL, consumer cards
    ("Tesla V100-PCIE-32GB", None), ("NVIDIA A100 80GB PCIe", None), ("NVIDIA H100 NVL", None),
    ("NVIDIA H200 NVL", None), ("NVIDIA GeForce RTX 3090", None), ("", None), (None, None),
    (5, None)])
def test_device_names(device, gpu):
    assert gpu_of_device(device) == gpu


def test_the_link_of_one_built_in_gpu_or_the_defaults():
    topo, note = unmeasured_intra_topology(["NVIDIA H100 PCIe"] * 4, gpus_per_node=4)
    spec = sm.get_gpu("h100-pcie")
    assert (topo.intra_bw, topo.arch, topo.intra_link) == (spec.intra_node_bw, "hopper", "pci")
    assert "NVIDIA H100 PCIe 80GB" in note and "not measured" in note
    topo, _ = unmeasured_intra_topology(["A100-SXM4-40GB"], gpus_per_node=8, nics_per_node=4)
    assert (topo.intra_bw, topo.arch, topo.nics_per_node) == (2.4e12, "ampere", 4)
    # two kinds of GPU, or one the library does not know: the defaults, said so
    for devices in (["NVIDIA H100 80GB HBM3", "NVIDIA H200"], ["Some GPU"], []):
        topo, note = unmeasured_intra_topology(devices, gpus_per_node=8)
        assert topo == sm.Topology(gpus_per_node=8) and "the default" in note


def test_one_device_name_or_bad_devices():
    topo, _ = unmeasured_intra_topology("NVIDIA H100 80GB HBM3", gpus_per_node=8)
    assert topo.intra_bw == sm.get_gpu("h100-sxm").intra_node_bw
    for bad in (None, 5):
        with pytest.raises(sm.ParameterTypeError, match="devices="):
            unmeasured_intra_topology(bad, gpus_per_node=8)
