"""``calibration/block_sweep.py`` (one transformer block's training time on one GPU, as the
difference of two layer counts) runs end to end on the CPU with a tiny shape."""

import json

import pytest

torch = pytest.importorskip("torch")

from helpers_benchmarks import load_calibration  # noqa: E402
from scalemodel.workloads import tensor_flops  # noqa: E402


@pytest.fixture(scope="module")
def sweep():
    return load_calibration("block_sweep")


def test_block_flops_are_the_difference_of_two_models(sweep):
    """A block's FLOPs equal the whole model's FLOPs at 4 layers less those at 2, halved
    (the embeddings and head cancel), forward and backward."""
    small = sweep.block_config((64, 4), 2, seq=32, micro_batch=2)
    large = sweep.block_config((64, 4), 4, seq=32, micro_batch=2)
    fwd, bwd = sweep.block_flops(small)
    diff = (tensor_flops(large).forward - tensor_flops(small).forward) / 2
    assert fwd == pytest.approx(diff, rel=1e-12)
    assert bwd == pytest.approx(2 * diff, rel=1e-12)
    assert small.gated_ffn is False and small.ffn == 4 * 64


def test_sweep_runs_on_the_cpu(sweep, tmp_path):
    out = tmp_path / "blocks.json"
    rec = sweep.main(["--out", str(out), "--shapes", "tiny", "--micro-batches", "1",
                      "--modes", "none,full", "--seq", "16", "--steps", "1",
                      "--warmup", "1", "--device", "cpu", "--gemm",
                      "--seq-sweep", "64x4:32:8,16", "--fsdp", "tiny:1",
                      "--kernels", "tiny:1"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(rec))
    assert [(p["mode"], p["seq"], p["micro_batch"]) for p in rec["blocks"]] == [
        ("none", 16, 1), ("full", 16, 1), ("none", 8, 4), ("none", 16, 2)]
    for p in rec["blocks"]:
        runs = p["runs"]
        assert p["block_forward"] == pytest.approx(
            (runs["4"]["forward"] - runs["2"]["forward"]) / 2)
        assert p["block_step"] == pytest.approx(p["block_forward"] + p["block_backward"])
        assert p["hfu"] is None  # no GPU peak on the CPU
    (gemm,) = rec["gemms"]
    assert set(gemm["products"]) == {"qkv", "out", "up", "down"}
    assert gemm["products"]["up"]["flops"] == 2.0 * 16 * 64 * 256
    none, full = rec["kernels"]
    assert (none["mode"], full["mode"]) == ("none", "full")
    for k in (none, full):
        assert "error" not in k, k.get("error")
        assert sum(k["block_by_class"].values()) == pytest.approx(k["block_total"])
        assert set(k["block_by_class"]) <= {"flash", "matmul", "other"}
    (fsdp,) = rec["fsdp"]
    assert "error" not in fsdp, fsdp.get("error")
    assert fsdp["fsdp_block_overhead"] == pytest.approx(
        fsdp["fsdp"]["block_forward"] + fsdp["fsdp"]["block_backward"]
        - fsdp["plain"]["block_forward"] - fsdp["plain"]["block_backward"])


def test_pressure_runs_on_the_cpu(sweep, tmp_path):
    """On the CPU there is no caching allocator to cap: the uncapped steps of the FSDP2
    and the plain model are recorded, no capped level."""
    rec = sweep.main(["--out", str(tmp_path / "p.json"), "--shapes", "tiny",
                      "--micro-batches", "1", "--modes", "none", "--seq", "16", "--steps",
                      "1", "--warmup", "1", "--device", "cpu",
                      "--pressure", "tiny:2:2:1.5,1.1"])
    fsdp, plain = rec["pressure"]
    assert (fsdp["fsdp"], plain["fsdp"]) == (True, False)
    for p in (fsdp, plain):
        assert "error" not in p, p.get("error")
        assert p["uncapped"]["step"] > 0 and p["capped"] == []
        assert (p["layers"], p["micro_batch"], p["hidden"]) == (2, 2, 64)


@pytest.mark.parametrize("name, cls", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "matmul"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNN", "matmul"),
    ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>", "flash"),
    ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "flash"),
    ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "other"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel", "other"),
])
def test_kernel_classes(sweep, name, cls):
    assert sweep.kernel_class(name) == cls


@pytest.mark.parametrize("argv, message", [
    (["--layers", "4,2"], "two increasing counts"),
    (["--shapes", "gpt-9"], "neither one of"),
    (["--micro-batches", "0"], "integers >= 1"),
    (["--modes", "half"], "is not one of"),
    (["--seq-sweep", "64x4:30:8"], "does not divide"),
    (["--pressure", "tiny:2:2"], "is not SHAPE:MICRO_BATCH"),
    (["--pressure", "tiny:2:2:0.9"], "every headroom >= 1"),
])
def test_bad_arguments_name_the_option(sweep, tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        sweep.main(["--out", str(tmp_path / "x.json"), "--device", "cpu", "--shapes",
                    "tiny", *argv])
    assert not (tmp_path / "x.json").exists()
