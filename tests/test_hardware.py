"""GPU specs: datasheet numbers with their sources, lookups, and dtypes a GPU lacks."""

import json
from importlib import resources

import pytest

import scalemodel as sm
from scalemodel.hardware import DTYPE_BYTES, GPUSpec, canonical_dtype

RAW = json.loads(resources.files("scalemodel").joinpath("data", "gpus.json").read_text())["gpus"]


def test_the_gpus_the_issue_asks_for_are_built_in():
    assert set(sm.list_gpus()) == {"v100-sxm2-16gb", "v100-sxm2-32gb", "a100-40gb", "a100-80gb",
                                   "h100-sxm", "h100-pcie", "h200", "b200", "mi300x"}
    archs = {sm.get_gpu(n).architecture for n in sm.list_gpus()}
    assert archs == {"volta", "ampere", "hopper", "blackwell", "cdna3"}


@pytest.mark.parametrize("name", sorted(RAW))
def test_every_number_has_its_source_beside_it(name):
    raw, gpu = RAW[name], sm.get_gpu(name)
    for field in ("peak_flops", "hbm_bytes", "hbm_bandwidth", "intra_node", "server"):
        assert len(raw[f"{field}_source"]) > 40, (name, field)
        assert field in gpu.sources
    for field in ("peak_flops", "hbm_bytes", "hbm_bandwidth"):
        assert "datasheet" in raw[f"{field}_source"].lower() \
            or "data sheet" in raw[f"{field}_source"].lower() \
            or "product brief" in raw[f"{field}_source"].lower()
    # the stored per-direction link rate is the datasheet's bidirectional total, in bits
    assert gpu.intra_node_bw == raw["intra_node_bidirectional_bytes_per_s"] * 8 / 2
    assert gpu.hbm_bytes % 2**30 == 0  # the datasheet's "GB" of HBM read as GiB


def test_dense_peaks_are_half_the_datasheets_sparse_tensor_figures():
    h100 = sm.get_gpu("h100-sxm")
    assert h100.peak("bf16") == 1979e12 / 2 and h100.peak("fp8") == 3958e12 / 2
    assert h100.peak("tf32") == 989e12 / 2 and h100.peak("fp32") == 67e12  # no tensor cores
    assert sm.get_gpu("a100-80gb").peak("bfloat16") == 312e12
    assert sm.get_gpu("b200").peak("fp16") == 4.5e15 / 2
    assert sm.get_gpu("mi300x").peak("bf16") == 1307.4e12
    assert sm.get_gpu("v100-sxm2-32gb").peak("half") == 125e12
    # the H200 is an H100 SXM with more and faster memory
    h200 = sm.get_gpu("h200")
    assert dict(h200.peak_flops) == dict(h100.peak_flops)
    assert h200.hbm_bytes > h100.hbm_bytes and h200.hbm_bandwidth > h100.hbm_bandwidth


@pytest.mark.parametrize("name", sorted(RAW))
def test_tensor_dtypes_are_faster_than_fp32_and_16bit_twice_tf32(name):
    gpu = sm.get_gpu(name)
    for dt in ("tf32", "bf16", "fp16", "fp8"):
        if dt in gpu.peak_flops:
            assert gpu.peak(dt) > gpu.peak("fp32")
    if "tf32" in gpu.peak_flops:
        assert gpu.peak("bf16") == pytest.approx(2 * gpu.peak("tf32"), rel=0.03)
    if "fp8" in gpu.peak_flops:
        assert gpu.peak("fp8") == pytest.approx(2 * gpu.peak("bf16"), rel=1e-3)


def test_aliases_and_spec_pass_through():
    assert sm.get_gpu("H100").name == "h100-sxm"
    assert sm.get_gpu("A100_80GB").name == "a100-80gb"
    assert sm.get_gpu(" v100 ").name == "v100-sxm2-16gb"
    spec = sm.get_gpu("mi300x")
    assert sm.get_gpu(spec) is spec
    assert sm.get_gpu() is sm.get_gpu("h100-sxm")


def test_unknown_gpu_suggests_the_closest():
    with pytest.raises(sm.UnknownNameError) as exc:
        sm.get_gpu("h100-sxn")
    assert exc.value.suggestion == "h100-sxm" and exc.value.parameter == "gpu"
    assert "h100-sxn" in str(exc.value)
    with pytest.raises(sm.ParameterTypeError):
        sm.get_gpu(100)


@pytest.mark.parametrize("gpu, dtype", [("v100-sxm2-16gb", "bf16"), ("v100-sxm2-32gb", "tf32"),
                                        ("a100-40gb", "fp8"), ("a100-80gb", "float8")])
def test_a_dtype_the_gpu_lacks_names_gpu_and_dtype(gpu, dtype):
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.get_gpu(gpu).peak(dtype)
    assert gpu in str(exc.value) and dtype in str(exc.value)
    assert exc.value.parameter == "dtype"


def test_dtype_names():
    assert canonical_dtype("torch.bfloat16") == "bf16" and canonical_dtype("float32") == "fp32"
    assert DTYPE_BYTES["bf16"] == 2 and DTYPE_BYTES["fp8"] == 1
    with pytest.raises(sm.UnknownNameError) as exc:
        canonical_dtype("bf61")
    assert exc.value.suggestion == "bf16"


def test_usual_servers():
    for name in ("h100-sxm", "h200", "b200", "a100-80gb", "mi300x"):
        gpu = sm.get_gpu(name)
        assert gpu.gpus_per_server == 8 and gpu.nics_per_server == 8 and gpu.nic_bw >= 200e9
    pcie = sm.get_gpu("h100-pcie")  # no usual server: recorded as unknown, not guessed
    assert pcie.gpus_per_server is None and pcie.nics_per_server is None


def test_your_own_gpu_spec_is_validated():
    ok = GPUSpec(name="mine", peak_flops={"bfloat16": 1e15}, hbm_bytes=64 * 2**30,
                 hbm_bandwidth=2e12, intra_node_bw=1e12)
    assert ok.peak("bf16") == 1e15 and ok.dtypes == ("bf16",)
    with pytest.raises(sm.InvalidParameterError) as exc:
        GPUSpec(name="bad", peak_flops={"bf16": 1e15}, hbm_bytes=-1, hbm_bandwidth=2e12,
                intra_node_bw=1e12)
    assert exc.value.parameter == "hbm_bytes"
    with pytest.raises(sm.InvalidParameterError):
        GPUSpec(name="bad", peak_flops={"bf16": float("nan")}, hbm_bytes=1, hbm_bandwidth=1,
                intra_node_bw=1)
    with pytest.raises(sm.UnknownNameError):
        GPUSpec(name="bad", peak_flops={"fp7": 1e12}, hbm_bytes=1, hbm_bandwidth=1,
                intra_node_bw=1)
