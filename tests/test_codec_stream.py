"""Codec on the compute stream (Compressor.codec_stream="compute", eq. compute-stream):
the closed form against the discrete-event reference, and what it changes."""

import attrs
import numpy as np
import pytest

import scalemodel as sm
from des_reference import simulate_compressed_iteration
from scalemodel.codec_costs import profile_gpu
from scalemodel.compressors import for_implementation
from scalemodel.exceptions import InvalidParameterError, UnknownNameError


def test_closed_form_matches_the_event_simulation():
    rng = np.random.default_rng(11)
    for trial in range(24):
        model = ["resnet50", "bert", "vgg16"][trial % 3]
        prof = sm.load_profile(model)
        comp = [sm.PowerSGD(rank=int(rng.integers(1, 64))),
                sm.TopK(density=float(10 ** rng.uniform(-4, -1)), dense_decode=True),
                sm.get_compressor("fp16"), sm.SignSGD(sign_bits=8),
                sm.IntQuantizer(bits=4, chunk=512),
                sm.RandomK(density=0.01, shared_seed=True)][trial % 6]
        comp = attrs.evolve(comp, codec_stream="compute")
        n = int(rng.integers(2, 129))
        bw = float(10 ** rng.uniform(8.5, 11))
        alg = ["ring", "tree", "halving-doubling"][trial % 3]
        fusion = ["ddp", "horovod", "none"][(trial // 3) % 3]
        alpha = float(rng.uniform(0, 2e-5))
        u = float(rng.uniform(0.3, 1))
        got = sm.compressed_scaling_factor(prof, comp, n, bw, algorithm=alg, fusion=fusion,
                                           alpha=alpha, utilization=u)
        codec = sm.compressors.codec_costs_for(None, gpu=profile_gpu(prof))
        tc = comp.tensor_costs(prof, n, codec=codec)
        c = codec[comp.family]
        t = simulate_compressed_iteration(
            prof, n, bw, phase_bytes=tc.phase_bytes.tolist(),
            phase_algorithms=tc.phase_collectives,
            tensor_codec=(tc.encode_time + c.launch * tc.calls / 2).tolist(),
            tensor_decode=(tc.decode_time + c.launch * tc.calls / 2).tolist(),
            bucket_codec=c.launch * comp.calls_per_bucket, utilization=u, algorithm=alg,
            fusion=fusion, alpha=alpha)
        assert got == pytest.approx(prof.iteration_time / t, rel=1e-9), (trial, comp)


def test_the_codec_is_never_hidden_behind_the_backward_pass():
    # fast line: on the channel the codec hides behind backward; on the compute stream
    # the iteration is at least the backward pass plus every encode and decode
    prof = sm.load_profile("resnet50")
    comp = sm.SignSGD(sign_bits=8)
    n, bw = 2, 100e9
    channel = sm.compressed_scaling_factor(prof, comp, n, bw)
    compute = sm.compressed_scaling_factor(prof, attrs.evolve(comp, codec_stream="compute"),
                                           n, bw)
    codec = sm.compressors.codec_costs_for(None, gpu=profile_gpu(prof))
    tc = comp.tensor_costs(prof, n, codec=codec)
    c = codec[comp.family]
    work = float(tc.encode_time.sum() + tc.decode_time.sum()
                 + c.launch * (tc.calls.sum() + comp.calls_per_bucket * len(tc.calls)))
    floor = prof.forward_time + prof.backward_time + work + prof.update_time
    assert prof.iteration_time / compute <= prof.iteration_time / floor * (1 + 1e-12)
    assert compute < channel
    # one worker: no codec either way
    assert sm.compressed_scaling_factor(prof, attrs.evolve(comp, codec_stream="compute"),
                                        1, bw) == pytest.approx(1.0)


def test_grace_presets_run_the_codec_on_the_compute_stream():
    for impl in ("grace-tf", "grace-torch"):
        assert for_implementation("topk:0.01", impl).codec_stream == "compute"
    for impl in ("pytorch", "deepspeed"):
        assert for_implementation("fp16", impl).codec_stream == "channel"
    assert sm.get_compressor("topk").codec_stream == "channel"
    assert "codec_stream='compute'" in for_implementation("signsgd", "grace-tf").describe()


def test_bad_codec_stream_and_sharding_are_refused():
    with pytest.raises(UnknownNameError, match="codec_stream"):
        sm.TopK(codec_stream="gpu")
    with pytest.raises(InvalidParameterError, match="compute stream"):
        sm.compressed_scaling_factor("gpt2", sm.IntQuantizer(codec_stream="compute"), 16,
                                     10e9, sharding="zero2")
