"""DeepSpeed's 1-bit Adam as its source runs it (the ``deepspeed`` preset): the wire bytes
of its compressed all-reduce against a direct count of what the source sends, the
all-to-all's NIC bytes against an enumeration of rank pairs, and the after-backward timing
against an event-by-event reference (tests/des_reference.py's collective player)."""

import math

import numpy as np
import pytest

import scalemodel as sm
from des_reference import collective_seconds
from scalemodel.codec_costs import profile_gpu
from scalemodel.collectives import CollectiveOptions, collective_cost
from scalemodel.compressors import (alltoall_cost, deepspeed_onebit_phases,
                                    deepspeed_padded_elements, for_implementation)


def _source_sends(numel, n, rank=0):
    """Bytes worker ``rank`` sends, per phase, emulating Compressed_Allreduce
    (onebit_adam.py at 01726ce2b / comm/nccl.py at HEAD) with numpy arrays of the dtypes
    it sends."""
    divider = n * 8 // math.gcd(n, 8)  # self.divider
    size = numel
    if numel % (n * divider):  # corrected_tensor_size
        size += n * divider - numel % (n * divider)
    momentum = np.random.default_rng(numel).standard_normal(size).astype(np.float32)
    packed = np.packbits(np.sign(momentum) + 1 > 0)  # sign().add_(1).bool(), cupy.packbits
    chunks = np.split(packed, n)  # compress_by_chunk(..., world_size)
    worker_scale = np.float32(np.linalg.norm(momentum) / np.sqrt(size))
    server_chunk = chunks[rank]  # same size as the re-compressed server signs
    server_scale = np.float32(1.0)
    to_others = [c.nbytes for j, c in enumerate(chunks) if j != rank]  # all-to-all / igathers
    return {"alltoall": sum(to_others),
            "worker scale": (n - 1) * worker_scale.nbytes,  # to every other worker
            "server signs": (n - 1) * server_chunk.nbytes,  # ring all-gather: n-1 sends
            "server scale": (n - 1) * server_scale.nbytes}, size


@pytest.mark.parametrize("numel", [1, 1000, 12345, 1_000_003])
@pytest.mark.parametrize("n", [2, 3, 4, 6, 8, 12, 32])
def test_wire_bytes_are_what_the_source_sends(numel, n):
    sends, padded = _source_sends(numel, n)
    phases, got_padded = deepspeed_onebit_phases(numel, n)
    assert float(got_padded[0]) == padded == deepspeed_padded_elements(numel, n)
    assert padded % (8 * n) == 0  # whole bytes in n equal chunks
    assert [c for c, _ in phases] == ["alltoall", "allgather", "allgather", "allgather"]
    # each phase's bytes as the library's collectives count them, without a topology
    sent = [float(alltoall_cost(phases[0][1], n).bits[0]) / 8] + [
        float(collective_cost("allgather", b, n).bits[0]) / 8 for _, b in phases[1:]]
    assert sent == pytest.approx(list(sends.values()), rel=1e-12)
    # the bytes grow with n only through the scales and the padding
    assert sum(sent) == pytest.approx(2 * (n - 1) / n * padded / 8 + 8 * (n - 1), rel=1e-12)


@pytest.mark.parametrize("n,g", [(8, 4), (32, 4), (16, 8), (12, 4), (4, 4), (6, 2)])
def test_alltoall_nic_bytes_count_every_pair_leaving_a_node(n, g):
    s = 8000.0 * n  # bytes per worker: n chunks of 8000
    chunk = s / n
    nic = {node: 0.0 for node in range(n // g)}
    intra = {r: 0.0 for r in range(n)}
    for src in range(n):
        for dst in range(n):
            if src // g != dst // g:
                nic[src // g] += chunk
            elif src != dst:
                intra[src] += chunk
    for nics in (1, 2):
        cost = alltoall_cost(s, n, CollectiveOptions(gpus_per_node=g, nics_per_node=nics,
                                                     alpha=1e-5, intra_alpha=1e-6))
        assert float(cost.bits[0]) / 8 == pytest.approx(max(nic.values()) / nics, rel=1e-12)
        assert float(cost.intra_bits[0]) / 8 == pytest.approx(max(intra.values()), rel=1e-12)
        assert float(cost.latency[0]) == (1e-5 if n > g else 1e-6)
    # a ring's all-gather of the same chunks puts (n-1)/n of s on a node's NIC: the
    # all-to-all puts g (n-g)/n of it
    if n > g:
        ring = collective_cost("allgather", chunk, n, options=CollectiveOptions(gpus_per_node=g))
        assert float(alltoall_cost(s, n, CollectiveOptions(gpus_per_node=g)).bits[0]) == \
            pytest.approx(float(ring.bits) * g * (n - g) / (n - 1), rel=1e-12)


def _reference_iteration(prof, comp, n, bw, alpha, u):
    """The iteration by events: backward ends (no gradient all-reduce), then the
    optimizer step compresses the flat buffer, posts the n-1 all-to-all sends at once
    (one link, served in turn), plays the all-gathers step by step and decodes."""
    codec = sm.compressors.codec_costs_for(None, gpu=profile_gpu(prof),
                                           implementation="deepspeed")
    c = codec["signsgd"]
    e = sm.compressors.ELEMENT_BYTES[prof.precision.lower()]
    numel = float(np.round(prof.tensor_bytes / e).sum())
    phases, padded = deepspeed_onebit_phases(numel, n)
    bw_eff = u * bw
    t = max(prof.tensor_ready)  # the step starts when the last gradient is ready
    t += c.encode * padded[0] * (1 + 1 / n) + c.launch * (comp.calls_per_tensor
                                                          + comp.calls_per_bucket) / 2
    chunk = phases[0][1][0] / n
    finish = t + alpha
    for _ in range(n - 1):  # the all-to-all's sends, one after another on the link
        finish += chunk * 8 / bw_eff
    t = finish
    for _, b in phases[1:]:
        t += collective_seconds("allgather", float(b[0]), n, bw_eff, alpha, lambda s: 0.0)
    t += c.decode * 2 * padded[0] + c.launch * (comp.calls_per_tensor
                                                + comp.calls_per_bucket) / 2
    return prof.forward_time + max(prof.backward_time, t) + prof.update_time


def test_after_backward_timing_matches_the_event_reference():
    rng = np.random.default_rng(18)
    comp = for_implementation("signsgd", "deepspeed")
    for trial in range(12):
        prof = sm.load_profile(["bert-large", "resnet50", "gpt2"][trial % 3])
        n = int(rng.integers(2, 65))
        bw = float(10 ** rng.uniform(8.5, 11))
        alpha = float(rng.uniform(0, 5e-5))
        u = float(rng.uniform(0.3, 1))
        fusion = ["ddp", "horovod", "bsp"][trial % 3]  # ignored: one buffer after backward
        got = sm.compressed_scaling_factor(prof, comp, n, bw, alpha=alpha, utilization=u,
                                           fusion=fusion, implementation="deepspeed")
        want = prof.iteration_time / _reference_iteration(prof, comp, n, bw, alpha, u)
        assert got == pytest.approx(want, rel=1e-9), (trial, n, fusion)


def test_nothing_overlaps_the_backward_pass():
    # the step starts when backward has ended, whatever the fusion: the iteration is the
    # single-worker step plus the whole compressed all-reduce and codec, even on a fast line
    prof = sm.load_profile("bert-large")
    ds = for_implementation("signsgd", "deepspeed")
    n = 16
    base = prof.forward_time + prof.backward_time + prof.update_time
    for bw in (10e9, 1e12):
        t = {f: prof.iteration_time / sm.compressed_scaling_factor(prof, ds, n, bw, fusion=f)
             for f in ("ddp", "horovod", "bsp")}
        assert t["ddp"] == t["horovod"] == t["bsp"]
        assert t["bsp"] > base + 2 * (n - 1) / n * prof.total_bytes / 16 * 8 / bw * 0.99


def test_preset_and_bad_combinations():
    ds = for_implementation("signsgd", "deepspeed")
    assert ds.after_backward and ds.collective == "alltoall" and ds.sign_bits == 1
    assert ds.describe() == "signsgd (after_backward=True, collective='alltoall')"
    assert "01726ce2b" in sm.compressors.IMPLEMENTATIONS["deepspeed"].source
    with pytest.raises(sm.InvalidParameterError, match="after_backward"):
        sm.SignSGD(per_tensor=True, after_backward=True)
    with pytest.raises(sm.ParameterTypeError, match="after_backward"):
        sm.SignSGD(after_backward=1)
    with pytest.raises(sm.UnknownNameError, match="collective"):
        sm.SignSGD(collective="all-to-all")
    with pytest.raises(sm.InvalidParameterError, match="after_backward"):
        sm.compressed_scaling_factor("gpt2", sm.CastCompressor("fp16", after_backward=True),
                                     8, 100e9, sharding="zero2")
