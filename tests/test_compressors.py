"""The compressor catalogue: bytes, collectives and codec time per tensor, by hand."""

import json
import math

import numpy as np
import pytest

import scalemodel as sm
from conftest import make_profile
from scalemodel.compressors import (DEFAULT_CODEC_COSTS, CodecCost, codec_costs_for,
                                    matrix_shape, powersgd_ratio)

ZERO = CodecCost(0.0, 0.0)


def shaped_profile(shapes, name="shaped"):
    sizes = [4 * math.prod(s) for s in shapes]
    p = make_profile(sizes, [1e-3] * len(sizes), name=name)
    return sm.WorkloadProfile(**{**{f: getattr(p, f) for f in (
        "name", "tensor_bytes", "tensor_ready", "forward_time", "backward_time",
        "update_time", "reduction", "provenance")}, "tensor_shapes": tuple(shapes)})


def test_powersgd_ratio_by_hand():
    assert powersgd_ratio(1024, 1024, 4) == 1024 * 1024 / (4 * 2048) == 128
    assert powersgd_ratio(30522, 768, 1) == pytest.approx(30522 * 768 / (30522 + 768))


def test_powersgd_bytes_phases_and_codec_by_hand():
    p = shaped_profile([(1024, 1024), (1024,), (64, 32, 3, 3)])
    costs = {"powersgd": CodecCost(1e-9, 2e-9, encode_per_rank=1e-10, decode_per_rank=3e-10)}
    tc = sm.PowerSGD(rank=4).tensor_costs(p, 8, codec=costs)
    # matrix 1024 x 1024: P = 1024 x 4, Q = 1024 x 4 fp32; vector: raw; conv 64 x 288
    np.testing.assert_array_equal(tc.phase_bytes[0], [0, 1024 * 4 * 4, 1024 * 4 * 4])
    np.testing.assert_array_equal(tc.phase_bytes[1], [4096, 0, 0])
    np.testing.assert_array_equal(tc.phase_bytes[2], [0, 64 * 4 * 4, 288 * 4 * 4])
    np.testing.assert_array_equal(tc.n_collectives, [2, 1, 2])
    assert tc.phase_collectives == ("allreduce",) * 3
    assert tc.encode_time[0] == pytest.approx(2**20 * (1e-9 + 4e-10))
    assert tc.decode_time[0] == pytest.approx(2**20 * (2e-9 + 12e-10))
    assert tc.encode_time[1] == 0 and tc.decode_time[1] == 0


def test_powersgd_leaves_small_ratio_matrices_uncompressed():
    # 2 x 768 at rank 4: rank > rows, so it is all-reduced as it is (PyTorch does the same)
    p = shaped_profile([(2, 768), (768, 768)])
    tc = sm.PowerSGD(rank=4).tensor_costs(p, 4)
    assert tc.phase_bytes[0, 0] == 2 * 768 * 4 and tc.phase_bytes[0, 1:].sum() == 0
    assert tc.phase_bytes[1, 0] == 0


def test_rank_larger_than_matrix_is_an_error():
    with pytest.raises(sm.InvalidParameterError, match=r"rank=9 .*at most min\(rows, cols\) = 8"):
        powersgd_ratio(8, 100, 9)
    with pytest.raises(sm.InvalidParameterError, match="rank=0"):
        sm.PowerSGD(rank=0)
    with pytest.raises(sm.ParameterTypeError, match="rank=2.5"):
        sm.PowerSGD(rank=2.5)


@pytest.mark.parametrize("density", [0.0, -0.1, 1.5, float("nan")])
def test_density_outside_unit_interval(density):
    for cls in (sm.TopK, sm.RandomK):
        with pytest.raises(sm.InvalidParameterError) as exc:
            cls(density=density)
        assert exc.value.parameter == "density"
        assert "(0, 1]" in str(exc.value)


@pytest.mark.parametrize("bits", [0, 17, -3])
def test_bits_outside_1_to_16(bits):
    with pytest.raises(sm.InvalidParameterError, match=f"bits={bits} is invalid"):
        sm.IntQuantizer(bits=bits)
    with pytest.raises(sm.ParameterTypeError, match="bits"):
        sm.IntQuantizer(bits=8.0)


def test_unknown_compressor_lists_known_names():
    with pytest.raises(sm.UnknownNameError) as exc:
        sm.get_compressor("powrsgd")
    msg = str(exc.value)
    assert "compressor='powrsgd'" in msg and "Did you mean 'powersgd'" in msg
    for name in sm.COMPRESSORS:
        assert name in msg
    with pytest.raises(sm.UnknownNameError):
        sm.plan_compression("bert", "10Gbps", compressors=["fp16", "gzip"])


def test_simple_families_bytes_by_hand():
    p = shaped_profile([(1000, 1000)])
    n = 16
    N = 10**6
    tc = sm.get_compressor("fp16").tensor_costs(p, n)
    assert tc.wire_bytes[0] == 2 * N and tc.collectives == ("allreduce",)
    tc = sm.SignSGD().tensor_costs(p, n)
    assert tc.wire_bytes[0] == N / 8 + 4 and tc.collectives == ("allgather",)
    tc = sm.TopK(density=0.01).tensor_costs(p, n)
    assert tc.wire_bytes[0] == 10_000 * 8 and tc.collectives == ("allgather",)
    tc = sm.RandomK(density=0.01, shared_seed=True).tensor_costs(p, n)
    assert tc.wire_bytes[0] == 10_000 * 4 and tc.collectives == ("allreduce",)
    tc = sm.IntQuantizer(bits=4, chunk=512).tensor_costs(p, n)
    assert tc.wire_bytes[0] == N / 2 + 8 * math.ceil(N / 512)
    tc = sm.IntQuantizer().tensor_costs(p, n)
    assert tc.wire_bytes[0] == N + 8


def test_allgather_decode_grows_with_n():
    p = shaped_profile([(1000, 1000)])
    for name in ("signsgd", "int8", "topk"):
        c = sm.get_compressor(name)
        d8 = c.tensor_costs(p, 8).decode_time[0]
        d64 = c.tensor_costs(p, 64).decode_time[0]
        assert d64 == pytest.approx(8 * d8)
    fp16 = sm.get_compressor("fp16")
    assert fp16.tensor_costs(p, 8).decode_time[0] == fp16.tensor_costs(p, 64).decode_time[0]


def test_matrix_shape_fallback():
    assert matrix_shape(768 * 1024) == (768, 1024)
    assert matrix_shape(7919) == (1, 7919)  # a prime: a vector
    assert matrix_shape(64 * 3 * 7 * 7, (64, 3, 7, 7)) == (64, 147)
    assert matrix_shape(768, (768,)) == (1, 768)


@pytest.mark.parametrize("model", sm.list_profiles())
@pytest.mark.parametrize("name", sorted(sm.COMPRESSORS))
def test_contract_every_compressor_on_every_profile(model, name):
    tc = sm.get_compressor(name).tensor_costs(model, 32)
    for arr in (tc.phase_bytes, tc.encode_time, tc.decode_time):
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
    assert tc.phase_bytes.shape[0] == sm.load_profile(model).tensor_bytes.size
    assert np.all(tc.n_collectives >= 1)


def test_builtin_profiles_have_consistent_shapes():
    for name in sm.list_profiles():
        p = sm.load_profile(name)
        assert p.tensor_shapes is not None
        numel = np.array([math.prod(s) for s in p.tensor_shapes])
        elem = 2 if p.precision in ("bf16", "fp16") else 4  # the LLMs communicate bf16
        np.testing.assert_array_equal(numel * elem, p.tensor_bytes)
    bert = sm.load_profile("bert")
    i = bert.tensor_names.index("embeddings.word_embeddings.weight")
    assert bert.tensor_shapes[i] == (30522, 768)
    r50 = sm.load_profile("resnet50")
    assert r50.tensor_shapes[1] == (1000, 2048) and r50.tensor_shapes[-1] == (64, 3, 7, 7)


def test_shapes_round_trip_and_validation(tmp_path):
    p = sm.load_profile("gpt2")
    path = sm.save_profile(p, tmp_path / "g.json")
    q = sm.load_profile(path)
    assert q.tensor_shapes == p.tensor_shapes
    data = json.loads(path.read_text())
    data["tensors"]["shapes"][3] = [7, 7]
    with pytest.raises(sm.ProfileFormatError, match=r"tensors.shapes\[3\]"):
        sm.WorkloadProfile.from_dict(data)
    data["tensors"]["shapes"] = data["tensors"]["shapes"][:-1]
    with pytest.raises(sm.ProfileFormatError, match="tensors.shapes"):
        sm.WorkloadProfile.from_dict(data)
    del data["tensors"]["shapes"]  # backward compatible: shapes are optional
    assert sm.WorkloadProfile.from_dict(data).tensor_shapes is None


def test_cluster_codec_costs_round_trip_and_validation(tmp_path):
    cl = sm.ClusterProfile(provenance={"source": "test"},
                           codec_costs={"fp16": {"encode": 1e-11, "decode": 2e-11}})
    path = sm.save_cluster(cl, tmp_path / "c.json")
    back = sm.load_cluster(path)
    assert back.codec_costs == {"fp16": {"encode": 1e-11, "decode": 2e-11}}
    assert codec_costs_for(back)["fp16"].decode == 2e-11
    assert codec_costs_for(back)["topk"] == DEFAULT_CODEC_COSTS["topk"]
    data = json.loads(path.read_text())
    data["codec_costs"]["fp16"]["decode"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(sm.ProfileFormatError, match="codec_costs.fp16.decode"):
        sm.load_cluster(path)
    with pytest.raises(sm.ProfileFormatError, match="codec_costs.fp16"):
        sm.ClusterProfile(codec_costs={"fp16": {"encode": 1e-11}})
    old = sm.ClusterProfile(provenance={"source": "x"}).to_dict()
    assert "codec_costs" not in old  # files without it stay as they were


def test_powersgd_without_shapes_assumes_square_matrices():
    p = make_profile([4 * 1024 * 1024, 4 * 7919], [1e-3, 1e-3])  # no tensors.shapes
    assert p.tensor_shapes is None
    tc = sm.PowerSGD(rank=4).tensor_costs(p, 8)
    np.testing.assert_array_equal(tc.phase_bytes[0], [0, 1024 * 16, 1024 * 16])
    np.testing.assert_array_equal(tc.phase_bytes[1], [4 * 7919, 0, 0])  # prime: a vector


def test_default_codec_costs_are_the_shipped_h100_measurement_and_physical():
    """The defaults come from the measured file, and the casts respect the HBM3 limit."""
    import json
    from importlib import resources

    from scalemodel.compressors import DEFAULT_CODEC_COSTS
    data = json.loads(resources.files("scalemodel").joinpath("data", "codec", "h100.json")
                      .read_text())
    assert "H100" in data["provenance"]["device"]
    for family, entry in data["codec_costs"].items():
        assert DEFAULT_CODEC_COSTS[family].encode == entry["encode"]
        assert "measured" in DEFAULT_CODEC_COSTS[family].source
    hbm3 = 3.35e12  # H100 SXM5 memory bandwidth [bytes/s], NVIDIA H100 datasheet
    for family in ("fp16", "bf16"):  # read 4 B, write 2 B per element; decode the reverse
        c = DEFAULT_CODEC_COSTS[family]
        for per_element in (c.encode, c.decode):
            assert 6 / hbm3 <= per_element <= 3 * 6 / hbm3
    # int8 reads the gradient twice (scale, quantize) and writes a byte: 9 B per element
    assert DEFAULT_CODEC_COSTS["int8"].encode >= 9 / hbm3
    # the measured floors are host dispatch: microseconds, not milliseconds
    assert all(1e-6 < c.launch < 1e-4 for f, c in DEFAULT_CODEC_COSTS.items() if f != "none")
