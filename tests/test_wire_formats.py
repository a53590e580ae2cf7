"""Wire formats as implemented (issue 18, item 2): every compressor's bytes on the wire
against a direct count, numpy arrays of the dtype and shape the implementation sends.

Sources of the formats (read from the code): GRACE, sands-lab/grace at fd3a7f4,
``grace_dl/tensorflow/compressor/{signsgd,efsignsgd,topk,randomk,powersgd,u8bit,qsgd}.py``
and ``grace_dl/torch/compressor/{signsgd,topk,randomk,powersgd}.py``: signs as ``tf.bool`` /
``torch.uint8`` (a byte each), top-k values plus ``tf.int32`` (TF) or ``torch.topk``'s
int64 (PyTorch) indices, random-k with a seed shared by all workers (values only),
PowerSGD on ``reshape(tensor, [shape[0], -1])`` of the framework's tensor (TF kernels are
(kh, kw, in, out), PyTorch weights (out, in, kh, kw)), 8-bit / QSGD as ``tf.int8`` plus one
fp32 scale or norm, every tensor communicated by its own Horovod call. PyTorch's
``powerSGD_hook`` views ``tensor.view(shape[0], -1)``.
"""

import math

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.compressors import matrix_shape, tensorflow_shape
from scalemodel.model import Scenario
from scalemodel.planner import _evaluate
from test_compressors import shaped_profile

N_ELEM = 1000 * 1000
FP32 = np.float32


def nbytes(*arrays):
    return float(sum(a.nbytes for a in arrays))


# ------------------------------------------------------------------ one tensor, by hand


@pytest.mark.parametrize("sign_bits,scale_bytes", [(1, 4), (8, 4), (8, 0), (1, 0)])
def test_sign_bytes(sign_bits, scale_bytes):
    grad = np.random.default_rng(0).standard_normal(N_ELEM + 3).astype(FP32)  # not /8
    signs = grad >= 0
    wire = np.packbits(signs) if sign_bits == 1 else signs  # numpy bool: a byte, as tf.bool
    scale = np.zeros(scale_bytes // 4, FP32)  # EF-signSGD's mean |g|
    comp = sm.SignSGD(sign_bits=sign_bits, scale_bytes=scale_bytes)
    assert comp.wire_format(grad.shape) == (("allgather", nbytes(wire, scale)),)
    if sign_bits == 8:  # GRACE's signSGD: 4x smaller than fp32, not 32x
        assert grad.nbytes / nbytes(wire) == 4


@pytest.mark.parametrize("bits,packed,scale_bytes,chunk", [
    (8, True, 8, None), (4, True, 8, 512), (4, False, 4, None), (12, False, 4, None),
    (8, False, 4, None)])
def test_quantizer_bytes(bits, packed, scale_bytes, chunk):
    numel = 1000 * 999
    if packed:
        values = np.zeros(math.ceil(numel * bits / 8), np.uint8)
    else:  # whole bytes per value: GRACE's tf.int8 (QSGD: int16 from 128 levels)
        values = np.zeros(numel, np.int8 if bits <= 8 else np.int16)
    chunks = 1 if chunk is None else math.ceil(numel / chunk)
    scales = np.zeros((chunks, scale_bytes // 4), FP32)  # scale (and zero point) per chunk
    comp = sm.IntQuantizer(bits=bits, packed=packed, scale_bytes=scale_bytes, chunk=chunk)
    assert comp.wire_format((1000, 999)) == (("allgather", nbytes(values, scales)),)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_topk_bytes(index_dtype):
    density = 0.01
    k = int(density * N_ELEM)  # GRACE: max(1, int(numel * ratio)); d N is whole here
    values, indices = np.zeros(k, FP32), np.zeros(k, index_dtype)
    comp = sm.TopK(density=density, index_bytes=np.dtype(index_dtype).itemsize)
    assert comp.wire_format((1000, 1000)) == (("allgather", nbytes(values, indices)),)
    # fp16 gradients: 2-byte values
    assert comp.wire_format((1000, 1000), element_bytes=2) == (
        ("allgather", nbytes(values.astype(np.float16), indices)),)


def test_randomk_shared_seed_allreduces_values_independent_allgathers_indices():
    k = int(0.05 * N_ELEM)
    shared = sm.RandomK(density=0.05, shared_seed=True)
    assert shared.wire_format((1000, 1000)) == (("allreduce", nbytes(np.zeros(k, FP32))),)
    indep = sm.RandomK(density=0.05, index_bytes=8)
    assert indep.wire_format((1000, 1000)) == (
        ("allgather", nbytes(np.zeros(k, FP32), np.zeros(k, np.int64))),)


def _powersgd_direct(weight, rank, view):
    """P and Q of one weight, or the raw tensor: PyTorch views its (out, in, kh, kw)
    weight as (out, in kh kw); TensorFlow reshapes its (kh, kw, in, out) kernel to
    (kh, kw in out). Compressed when at least 2x smaller (PyTorch's default)."""
    if weight.ndim < 2:
        return [("allreduce", weight.nbytes)]
    tf = np.transpose(weight, tuple(range(2, weight.ndim)) + (1, 0))
    matrix = (weight.reshape(weight.shape[0], -1) if view == "pytorch"
              else tf.reshape(tf.shape[0], -1))
    p = np.zeros((matrix.shape[0], rank), FP32)
    q = np.zeros((matrix.shape[1], rank), FP32)
    if min(matrix.shape) < rank or matrix.nbytes / (p.nbytes + q.nbytes) < 2:
        return [("allreduce", weight.nbytes)]
    return [("allreduce", p.nbytes), ("allreduce", q.nbytes)]


@pytest.mark.parametrize("view", ["pytorch", "tensorflow"])
@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("shape", [(512, 256, 3, 3), (64, 3, 7, 7), (1000, 2048),
                                   (256, 1024, 1, 1), (512,)])
def test_powersgd_bytes_on_the_frameworks_matrix(view, rank, shape):
    weight = np.zeros(shape, FP32)
    comp = sm.PowerSGD(rank=rank, matrix_view=view)
    assert list(comp.wire_format(shape)) == [(c, float(b)) for c, b in
                                             _powersgd_direct(weight, rank, view)]


def test_tensorflow_view_makes_a_3x3_convolution_only_about_3x_smaller():
    shape = (512, 512, 3, 3)
    w = np.zeros(shape, FP32)
    tf_bytes = sum(b for _, b in sm.PowerSGD(rank=1, matrix_view="tensorflow")
                   .wire_format(shape))
    pt_bytes = sum(b for _, b in sm.PowerSGD(rank=1).wire_format(shape))
    assert 2.9 < w.nbytes / tf_bytes < 3.0
    assert w.nbytes / pt_bytes > 400  # 512 x 4608 at rank 1
    assert tensorflow_shape(shape) == (3, 3, 512, 512)
    assert matrix_shape(w.size, tensorflow_shape(shape)) == (3, 3 * 512 * 512)
    # GRACE compresses every tensor of two or more dimensions (min_compression_rate=0),
    # a 1x1 convolution too: TF's (1, 1, in, out) kernel is a 1 x (in out) matrix
    grace = sm.PowerSGD(rank=1, matrix_view="tensorflow", min_compression_rate=0)
    assert grace.wire_format((256, 1024, 1, 1)) == (("allreduce", 4.0),
                                                    ("allreduce", 4.0 * 256 * 1024))
    assert sm.PowerSGD(rank=1, matrix_view="tensorflow").wire_format(
        (256, 1024, 1, 1)) == (("allreduce", 4.0 * 256 * 1024),)  # PyTorch's rule: raw


def test_powersgd_on_a_whole_profile_in_both_views():
    p = sm.load_profile("resnet50")
    for view in ("pytorch", "tensorflow"):
        tc = sm.PowerSGD(rank=1, matrix_view=view).tensor_costs(p, 8)
        direct = [sum(b for _, b in _powersgd_direct(np.zeros(s, FP32), 1, view))
                  for s in p.tensor_shapes]
        np.testing.assert_array_equal(tc.wire_bytes, direct)
    tf_ratio = p.total_bytes / sm.PowerSGD(rank=1, matrix_view="tensorflow").tensor_costs(
        p, 8).wire_bytes.sum()
    pt_ratio = p.total_bytes / sm.PowerSGD(rank=1).tensor_costs(p, 8).wire_bytes.sum()
    assert tf_ratio < pt_ratio / 10  # the framework's layout decides the ratio


def test_defaults_are_the_formats_scalemodel_always_assumed():
    assert sm.SignSGD().wire_format((1000, 1000)) == (("allgather", N_ELEM / 8 + 4),)
    assert sm.TopK().wire_format((1000, 1000)) == (("allgather", 10_000 * 8.0),)
    assert sm.RandomK().wire_format((1000, 1000)) == (("allgather", 10_000 * 8.0),)
    assert sm.IntQuantizer().wire_format((1000, 1000)) == (("allgather", N_ELEM + 8.0),)
    for name in sm.COMPRESSORS:
        assert sm.get_compressor(name).per_tensor is False
    assert sm.PowerSGD().matrix_view == "pytorch"


@pytest.mark.parametrize("kwargs,parameter", [
    (dict(cls=sm.SignSGD, sign_bits=2), "sign_bits"),
    (dict(cls=sm.TopK, index_bytes=2), "index_bytes"),
    (dict(cls=sm.RandomK, index_bytes=16), "index_bytes"),
    (dict(cls=sm.PowerSGD, matrix_view="tf-layout"), "matrix_view"),
    (dict(cls=sm.IntQuantizer, scale_bytes=3), "scale_bytes"),
])
def test_unknown_wire_settings_name_the_valid_ones(kwargs, parameter):
    cls = kwargs.pop("cls")
    with pytest.raises(sm.UnknownNameError) as err:
        cls(**kwargs)
    assert err.value.parameter == parameter and "Known:" in str(err.value)
    with pytest.raises(sm.ParameterTypeError, match="per_tensor"):
        sm.TopK(per_tensor="yes")
    with pytest.raises(sm.ParameterTypeError, match="packed"):
        sm.IntQuantizer(packed=1)


# ------------------------------------------------------------------ traffic with n


@pytest.mark.parametrize("n", [2, 4, 8, 32])
def test_allgather_traffic_grows_with_n_allreduce_does_not(n):
    """Bits each worker's link carries for one message of S bytes: an all-gather receives
    every other worker's S, a ring all-reduce 2 (n-1)/n S."""
    from scalemodel.collectives import collective_cost

    s = nbytes(np.packbits(np.ones(N_ELEM, bool)), np.zeros(1, FP32))
    ag = collective_cost("allgather", s, n).bits
    ar = collective_cost("ring", s, n).bits
    assert float(ag) == 8 * (n - 1) * s
    assert float(ar) == pytest.approx(8 * 2 * (n - 1) / n * s)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_plan_effective_ratio_is_the_direct_count(n):
    p = shaped_profile([(1000, 1000), (512, 256, 3, 3), (512,)])
    sign = sm.SignSGD(sign_bits=8)
    sent = sum(nbytes(np.ones(math.prod(s), bool), np.zeros(1, FP32)) for s in p.tensor_shapes)
    row = sm.plan_compression(p, 10e9, n=n, compressors=[sign]).rows[0]
    raw = 2 * (n - 1) / n * p.total_bytes  # the ring all-reduce of the fp32 gradients
    assert row.effective_ratio == pytest.approx(raw / ((n - 1) * sent), rel=1e-12)
    assert row.ratio == pytest.approx(p.total_bytes / sent, rel=1e-12)


# ------------------------------------------------------------------ per tensor vs fused


def test_per_tensor_sends_one_collective_per_tensor_whatever_the_fusion():
    p = sm.load_profile("resnet50")
    sc = Scenario.build(p, algorithm="ring", fusion="horovod", alpha=0.0, codec_cost=0.0,
                        gpus_per_node=None, intra_bw=None, intra_alpha=None,
                        ps_servers=None, cluster=None, nics_per_node=None, sharding="none")
    codec = sm.compressors.codec_costs_for(None)
    for comp, per_tensor_count in ((sm.SignSGD(sign_bits=8), 161),
                                   (sm.RandomK(density=0.01, shared_seed=True), 161),
                                   (sm.PowerSGD(rank=1, matrix_view="tensorflow",
                                                min_compression_rate=0), None)):
        fused = _evaluate(sc, comp, 8, codec)
        each = _evaluate(sc, attrs_evolve(comp, per_tensor=True), 8, codec)
        tc = comp.tensor_costs(p, 8)
        assert fused.n_collectives == int((np.add.reduceat(tc.phase_bytes, sc.buckets.starts)
                                           > 0).sum())
        assert each.n_collectives == int((tc.phase_bytes > 0).sum())
        if per_tensor_count:
            assert each.n_collectives == per_tensor_count
        assert each.bits == pytest.approx(fused.bits)  # the same bytes, in more messages


def attrs_evolve(comp, **kw):
    import attrs
    return attrs.evolve(comp, **kw)


def test_per_tensor_pays_every_tensors_latency_direct_count():
    """One bucket after backward (fusion "bsp"), no codec time: the communication is the
    sum over tensors of an all-gather, (n-1) alpha + (n-1) 8 S_t / B, against one
    all-gather of the summed bytes when fused."""
    shapes = [(1000, 1000), (512, 256, 3, 3), (4096,), (10, 10)]
    p = shaped_profile(shapes)
    n, bw, alpha = 8, 10e9, 50e-6
    free = sm.ClusterProfile(provenance={"source": "test: codec costs zero"},
                             codec_costs={"signsgd": {"encode": 0.0, "decode": 0.0}})
    assert sm.compressors.codec_costs_for(free)["signsgd"].launch == 0.0
    sizes = [nbytes(np.ones(math.prod(s), bool), np.zeros(1, FP32)) for s in shapes]
    t1 = p.iteration_time
    for per_tensor, comm in (
            (True, sum((n - 1) * alpha + (n - 1) * 8 * s / bw for s in sizes)),
            (False, (n - 1) * alpha + (n - 1) * 8 * sum(sizes) / bw)):
        comp = sm.SignSGD(sign_bits=8, per_tensor=per_tensor)
        sf = sm.compressed_scaling_factor(p, comp, n, bw, cluster=free, fusion="bsp",
                                          alpha=alpha)
        assert sf == pytest.approx(t1 / (t1 + comm), rel=1e-12), per_tensor


def test_per_tensor_under_sharding_is_refused_by_name():
    with pytest.raises(sm.InvalidParameterError, match="per_tensor"):
        sm.compressed_scaling_factor("gpt2", sm.CastCompressor("bf16", per_tensor=True), 8,
                                     100e9, sharding="zero2")


@pytest.mark.parametrize("n", [4, 16])
def test_one_bit_adam_compressed_allreduce_has_ring_traffic(n):
    """DeepSpeed's compressed_allreduce: all-to-all of each worker's packed signs (it
    keeps 1/n), then all-gather of the re-compressed 1/n: each worker receives
    2 (n-1)/n of the packed signs, a ring all-reduce's traffic, not an all-gather's."""
    from scalemodel.collectives import collective_cost

    signs = np.packbits(np.ones(N_ELEM, bool))
    comp = sm.SignSGD(collective="allreduce")
    ((coll, s),) = comp.wire_format((1000, 1000), n)
    assert coll == "allreduce" and s == nbytes(signs, np.zeros(1, FP32))
    chunk = signs.nbytes / n
    received = (n - 1) * chunk + (n - 1) * chunk  # all-to-all in, all-gather in
    assert float(collective_cost("ring", signs.nbytes, n).bits) == pytest.approx(8 * received)
    tc = comp.tensor_costs(shaped_profile([(1000, 1000)]), n,
                           codec={"signsgd": sm.CodecCost(1.0, 1.0)})
    assert tc.decode_time[0] == 2 * N_ELEM  # unpack n chunks of N/n, then N


def test_describe_names_the_wire_format():
    assert sm.SignSGD(sign_bits=8, per_tensor=True).describe() == \
        "signsgd (per_tensor=True, sign_bits=8)"
    assert sm.get_compressor("topk:0.01").describe() == "topk density 0.01"


# ------------------------------------------------------------------ implementation presets

from scalemodel.compressors import (IMPLEMENTATIONS, for_implementation,  # noqa: E402
                                    resolve_implementation)


def test_grace_tf_preset_sends_what_grace_tensorflow_sends():
    shape = (512, 256, 3, 3)
    numel = math.prod(shape)
    sign = for_implementation("signsgd", "grace-tf")
    assert sign.wire_format(shape) == (("allgather", nbytes(np.ones(numel, bool))),)  # tf.bool
    k = int(0.01 * 1000 * 1000)
    topk = for_implementation("topk:0.01", "grace-tf")
    assert topk.wire_format((1000, 1000)) == (
        ("allgather", nbytes(np.zeros(k, FP32), np.zeros(k, np.int32))),)
    randk = for_implementation("randomk:0.01", "grace-tf")
    assert randk.wire_format((1000, 1000)) == (("allreduce", nbytes(np.zeros(k, FP32))),)
    q8 = for_implementation("int8", "grace-tf")
    assert q8.wire_format(shape) == (("allgather", nbytes(np.zeros(numel, np.int8),
                                                          np.zeros(1, FP32))),)
    psgd = for_implementation("powersgd:1", "grace-tf")
    assert list(psgd.wire_format(shape)) == [(c, float(b)) for c, b in _powersgd_direct(
        np.zeros(shape, FP32), 1, "tensorflow")]
    for comp in (sign, topk, randk, q8, psgd):
        assert comp.per_tensor


def test_grace_torch_preset_sends_int64_indices_and_pytorch_matrices():
    k = int(0.01 * 1000 * 1000)
    topk = for_implementation("topk:0.01", "grace-torch")
    assert topk.wire_format((1000, 1000)) == (
        ("allgather", nbytes(np.zeros(k, FP32), np.zeros(k, np.int64))),)
    psgd = for_implementation("powersgd:1", "grace-torch")
    assert psgd.matrix_view == "pytorch" and psgd.min_compression_rate == 0
    assert for_implementation("signsgd", "grace-torch").wire_format((10, 10)) == (
        ("allgather", nbytes(np.zeros(100, np.uint8))),)  # torch.uint8 signs


def test_pytorch_and_horovod_presets_are_the_defaults_and_deepspeed_allreduces_signs():
    for name in IMPLEMENTATIONS["pytorch"].families:
        assert for_implementation(name, "pytorch") == sm.get_compressor(name)
    assert for_implementation("fp16", "horovod") == sm.get_compressor("fp16")
    ds = for_implementation("signsgd", "deepspeed")  # tests/test_deepspeed_onebit.py
    assert ds.collective == "alltoall" and ds.sign_bits == 1 and not ds.per_tensor
    assert ds.after_backward


def test_grace_signsgd_on_8_workers_puts_as_many_bits_on_the_wire_as_no_compression():
    """The issue's measurement: GRACE's byte-per-sign all-gather can never win at n = 8:
    7 x N bytes received against the fp32 ring's 2 (7/8) 4N."""
    row = sm.plan_compression("resnet50", 10e9, n=8, fusion="horovod",
                              compressors=[for_implementation("signsgd", "grace-tf")]).rows[0]
    assert row.effective_ratio == pytest.approx(1.0, rel=1e-12)
    assert not row.beats_uncompressed


def test_explicit_settings_win_over_the_preset():
    comp = for_implementation(sm.TopK(density=0.02, index_bytes=8), "grace-tf")
    assert comp.index_bytes == 8 and comp.per_tensor and comp.density == 0.02


def test_unknown_implementation_names_the_nearest():
    with pytest.raises(sm.UnknownNameError) as err:
        for_implementation("topk", "grace-tff")
    assert err.value.parameter == "implementation" and err.value.suggestion == "grace-tf"
    assert resolve_implementation("GRACE_TF").name == "grace-tf"
    assert resolve_implementation("torch").name == "pytorch"


@pytest.mark.parametrize("family,implementation", [("topk", "pytorch"), ("powersgd", "horovod"),
                                                   ("randomk", "deepspeed")])
def test_a_family_an_implementation_lacks_names_those_that_provide_it(family, implementation):
    with pytest.raises(sm.InvalidParameterError) as err:
        for_implementation(family, implementation)
    providers = [k for k, v in IMPLEMENTATIONS.items() if family in v.families]
    assert providers and all(p in str(err.value) for p in providers)
    assert implementation in str(err.value)


def test_plan_searches_the_rank_of_grace_powersgd():
    """min_compression_rate=0 (GRACE): every rank up to min(rows, cols) may be searched."""
    comp = for_implementation("powersgd", "grace-tf")
    lo, hi = comp.knob_bounds(np.array([512 * 256 * 9.0]), [(512, 256, 3, 3)])
    assert (lo, hi) == (1, 3)  # TF's view: a 3 x 393216 matrix
    row = sm.plan_compression("resnet50", "10Gbps", n=8, compressors=[comp]).rows[0]
    assert row.config.matrix_view == "tensorflow" and row.config.per_tensor
    assert 1 <= row.setting <= 2048


# ------------------------------------------------------------------ decode structure, by hand


class _Touched:
    """Counts the elements each decode step writes, as numpy arrays of that size."""

    def __init__(self):
        self.elements = 0

    def out(self, array):
        self.elements += array.size
        return array


def _grace_sparse_decode(messages, numel, touched):
    """GRACE's decode of sparse messages: ``desparsify`` scatters each message into a
    dense ``numel`` tensor (``tf.scatter_nd(indices, values, [numel])``), then
    ``aggregate`` sums the dense tensors (``tf.math.add_n``)."""
    dense = []
    for values, indices in messages:
        d = touched.out(np.zeros(numel, FP32))
        d[indices] = values
        dense.append(d)
    return np.sum(dense, axis=0), touched


def _sparse_accumulate(messages, numel, touched):
    """A decode that touches only the received elements (the library's default)."""
    out = np.zeros(numel, FP32)
    for values, indices in messages:
        np.add.at(out, indices, touched.out(values))
    return out, touched


def _decoded_elements(comp, shapes, n):
    p = shaped_profile(shapes)
    return comp.tensor_costs(p, n, codec={comp.family: sm.CodecCost(0.0, 1.0)}).decode_time


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("preset", ["grace-tf", "grace-torch"])
def test_grace_topk_decode_touches_the_dense_tensor_once_per_rank(n, preset):
    shapes = [(64, 32, 3, 3), (1000,), (7,)]
    comp = for_implementation("topk:0.01", preset)
    assert comp.dense_decode
    rng = np.random.default_rng(1)
    dense, sparse = [], []
    for shape in shapes:
        numel = math.prod(shape)
        k = max(1, math.ceil(0.01 * numel))
        msgs = [(rng.standard_normal(k).astype(FP32), rng.choice(numel, k, replace=False))
                for _ in range(n)]
        total, touched = _grace_sparse_decode(msgs, numel, _Touched())
        ref, _ = _sparse_accumulate(msgs, numel, _Touched())
        np.testing.assert_allclose(total, ref, rtol=1e-6)  # the same sum either way
        dense.append(touched.elements)
        sparse.append(_sparse_accumulate(msgs, numel, _Touched())[1].elements)
    np.testing.assert_array_equal(_decoded_elements(comp, shapes, n), dense)
    assert dense == [n * math.prod(s) for s in shapes]
    textbook = sm.TopK(density=0.01)
    assert not textbook.dense_decode
    np.testing.assert_array_equal(_decoded_elements(textbook, shapes, n), sparse)


@pytest.mark.parametrize("n", [2, 8])
def test_grace_randomk_decompresses_the_all_reduced_values_once(n):
    shapes = [(128, 64), (300,)]
    comp = for_implementation("randomk:0.05", "grace-tf")
    assert comp.shared_seed and comp.dense_decode
    rng = np.random.default_rng(2)
    touched = []
    for shape in shapes:
        numel = math.prod(shape)
        k = math.ceil(0.05 * numel)
        idx = rng.choice(numel, k, replace=False)  # the seed all workers share
        summed = sum(rng.standard_normal(k).astype(FP32) for _ in range(n))  # all-reduce
        touched.append(_grace_sparse_decode([(summed, idx)], numel, _Touched())[1].elements)
    assert touched == [math.prod(s) for s in shapes]  # N, whatever n
    np.testing.assert_array_equal(_decoded_elements(comp, shapes, n), touched)
    # the sparse decode of the same message touches k; independent seeds all-gather n of them
    sparse = sm.RandomK(density=0.05, shared_seed=True)
    np.testing.assert_array_equal(_decoded_elements(sparse, shapes, n),
                                  [math.ceil(0.05 * math.prod(s)) for s in shapes])
    indep = sm.RandomK(density=0.05, dense_decode=True)
    np.testing.assert_array_equal(_decoded_elements(indep, shapes, n),
                                  [n * math.prod(s) for s in shapes])


def test_dense_decode_changes_no_byte_and_pytorch_has_no_sparse_family():
    for comp in (sm.TopK(density=0.01), sm.RandomK(density=0.01),
                 sm.RandomK(density=0.01, shared_seed=True)):
        dense = attrs.evolve(comp, dense_decode=True)
        assert dense.wire_format((1000, 1000), 8) == comp.wire_format((1000, 1000), 8)
        assert "dense_decode=True" in dense.describe()
    # PyTorch's hooks and Horovod have no top-k / random-k: their presets are unaffected,
    # and DeepSpeed sets no decode structure
    for impl in ("pytorch", "horovod", "deepspeed"):
        assert not {"topk", "randomk"} & set(IMPLEMENTATIONS[impl].families)
        assert all("dense_decode" not in v for v in IMPLEMENTATIONS[impl].settings.values())
    with pytest.raises(sm.ParameterTypeError, match="dense_decode"):
        sm.TopK(dense_decode=1)
