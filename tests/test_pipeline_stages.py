"""Uneven pipeline stages (eq. pp-uneven): the head on the last stage, the embedding on the
first, as Megatron-LM places them; the iteration time against the discrete-event
reference of its schedules (tests/des_interleaved.py, each chunk with its own times)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_interleaved import simulate_chunks


def _head_shares(name):
    u = sm.transformer_units(sm.llm_config(name), "h100-sxm", efficiency=1.0)
    kind = np.array(u.kind)
    head = kind == "head"
    return (u.forward_time[head].sum() / u.forward_time.sum(),
            u.backward_time[head].sum() / u.backward_time.sum())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_one_replica_is_the_schedule_with_the_head_on_the_last_stage(data):
    name = data.draw(st.sampled_from(["llama-3-8b", "llama-2-7b", "llama-2-13b"]))
    prof = sm.load_profile(name)
    layers = prof.provenance["config"]["layers"]
    pp = data.draw(st.sampled_from([p for p in (2, 4, 8) if layers % p == 0]))
    v = data.draw(st.sampled_from([v for v in (1, 2, 4) if layers % (pp * v) == 0]))
    m = pp * data.draw(st.integers(1, 4)) if v > 1 else data.draw(st.integers(1, 24))
    it = sm.iteration_time(prof, pp, 100e9, pp=pp, microbatches=m, virtual_stages=v)
    # by hand: every stage L/p layers of the model's compute less its head, the last stage
    # the head besides (tp = 1: no tensor-parallel collectives)
    ef, eb = _head_shares(name)
    F, B = prof.forward_time, prof.backward_time
    f, b = F * (1 - ef) / pp, B * (1 - eb) / pp
    fwd = [[f / v] * v for _ in range(pp)]
    bwd = [[b / v] * v for _ in range(pp)]
    fwd[pp - 1][v - 1] += F * ef
    bwd[pp - 1][v - 1] += B * eb
    step = simulate_chunks(pp, v, m, fwd, bwd)
    assert it.total - it.update == pytest.approx(step, rel=1e-9)
    assert it.forward + it.backward == pytest.approx(step, rel=1e-9)


def test_the_head_makes_the_last_stage_the_slowest():
    # Llama-3-8B's 128k-token head is two layers of compute: on 8 stages of 4 layers the
    # last one paces the pipeline (it was split evenly: over 20 % too fast)
    ef, eb = _head_shares("llama-3-8b")
    prof = sm.load_profile("llama-3-8b")
    it = sm.iteration_time(prof, 8, 100e9, pp=8, microbatches=16)
    even = (16 + 7) * (prof.forward_time + prof.backward_time) / 8
    assert it.total - it.update > 1.2 * even
    assert ef / (1 - ef) * 32 > 2 and eb / (1 - eb) * 32 > 2
