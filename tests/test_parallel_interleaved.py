"""Interleaved 1F1B (``virtual_stages``): the closed form of scalemodel.parallel, eq.
(pp-interleaved), against a discrete-event simulation of Megatron-LM's per-stage order of
micro-batches and model chunks (tests/des_interleaved.py), and bad input."""

import numpy as np
import pytest
from des_interleaved import simulate, stage_order
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from scalemodel.parallel import resolve_model_parallel

CONFIG = {"layers": 48, "hidden": 2048, "heads": 16, "seq": 2048, "micro_batch": 1,
          "dtype": "bf16"}


def stage_profile(forward, backward, update=0.0):
    """A synthetic profile with a transformer config (tp=1: no TP collectives)."""
    return sm.WorkloadProfile(
        name="interleaved-synthetic", tensor_bytes=np.array([1e6, 2e6]),
        tensor_ready=np.array([0.5, 1.0]) * backward, forward_time=forward,
        backward_time=backward, update_time=update,
        reduction=sm.ReductionCost(gamma=0.0, latency=0.0), precision="bf16",
        provenance={"source": "test", "config": dict(CONFIG)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_closed_form_equals_the_simulated_schedule(data):
    pp = data.draw(st.sampled_from([2, 3, 4, 6, 8]))
    v = data.draw(st.sampled_from([v for v in (1, 2, 3, 4) if 48 % (pp * v) == 0]))
    m = pp * data.draw(st.integers(1, 5)) if v > 1 else data.draw(st.integers(1, 20))
    forward = data.draw(st.floats(0.01, 2.0))
    backward = forward * data.draw(st.floats(0.5, 4.0))
    f, b = forward / pp, backward / pp  # one stage, one micro-batch, all its chunks
    step, idle = simulate(pp, v, m, f, b)
    # the simulation's idle time is the paper's bubble, (p - 1)(f + b) / v
    assert idle[0] == pytest.approx((pp - 1) * (f + b) / v, rel=1e-9, abs=1e-12)
    # one replica (n = pp): no data-parallel traffic, the step is the pipeline's
    it = sm.iteration_time(stage_profile(forward, backward, 0.1), pp, "100Gbps", pp=pp,
                           microbatches=m, virtual_stages=v)
    assert it.forward + it.backward == pytest.approx(step, rel=1e-9)
    assert it.total == pytest.approx(step + 0.1 / pp, rel=1e-9)
    assert it.settings["virtual_stages"] == v
    assert it.settings["pipeline_schedule"] == ("1f1b" if v == 1 else "interleaved 1f1b")


def test_interleaving_shrinks_only_the_bubble():
    p = stage_profile(0.4, 0.8, 0.05)
    kw = dict(gpus_per_node=8, nics_per_node=8, pp=4, microbatches=8)
    t = {v: sm.iteration_time(p, 32, "100Gbps", virtual_stages=v, **kw) for v in (1, 2, 3)}
    f, b = 0.1, 0.2
    for v in (2, 3):  # the same data-parallel step, a bubble (p - 1)(f + b)(1 - 1/v) shorter
        assert t[1].total - t[v].total == pytest.approx(3 * (f + b) * (1 - 1 / v), rel=1e-9)
    assert resolve_model_parallel(1, 4, 8, virtual_stages=2).bubble_fraction == 3 / 16
    # the solvers take it too: a shorter step needs more compression
    c = [sm.min_compression("llama-2-13b", "10Gbps", n=64, virtual_stages=v, **kw).ratio
         for v in (1, 2)]
    assert c[1] > c[0]


def test_the_simulated_order_is_megatrons():
    # stage 0 of p = 2, v = 2, m = 4 (Megatron: warm-up (p - 1) * 2 + (v - 1) p = 4
    # forwards, chunk 0 for virtual micro-batches 0, 1, chunk 1 for 2, 3)
    assert stage_order(0, 2, 2, 4) == [
        ("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1), ("F", 0, 2), ("B", 1, 0),
        ("F", 0, 3), ("B", 1, 1), ("F", 1, 2), ("B", 0, 0), ("F", 1, 3), ("B", 0, 1),
        ("B", 1, 2), ("B", 1, 3), ("B", 0, 2), ("B", 0, 3)]
    # without interleaving: p - s - 1 warm-up forwards, then one forward, one backward
    assert stage_order(0, 3, 1, 4) == [("F", 0, 0), ("F", 0, 1), ("F", 0, 2), ("B", 0, 0),
                                       ("F", 0, 3), ("B", 0, 1), ("B", 0, 2), ("B", 0, 3)]


@pytest.mark.parametrize("kw, name", [
    (dict(pp=1, virtual_stages=2), "virtual_stages"),
    (dict(pp=4, microbatches=6, virtual_stages=2), "microbatches"),
    (dict(pp=4, microbatches=8, virtual_stages=5), "virtual_stages"),  # 12 layers a stage
    (dict(pp=4, microbatches=8, virtual_stages=0), "virtual_stages"),
])
def test_bad_virtual_stages(kw, name):
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.iteration_time(stage_profile(0.4, 0.8), 4 * kw["pp"], "100Gbps", **kw)
    assert exc.value.parameter == name


def test_virtual_stages_not_an_integer():
    with pytest.raises(sm.ParameterTypeError):
        resolve_model_parallel(1, 4, 8, virtual_stages=2.0)


def test_cli_takes_virtual_stages(capsys):
    from scalemodel.cli import main

    args = ["--model", "llama-2-13b", "--n", "128", "--gpus-per-node", "8",
            "--nics-per-node", "8", "--tp", "4", "--pp", "4", "--microbatches", "8"]
    assert main(["iteration", "--bw", "100Gbps", *args, "--virtual-stages", "2"]) in (0, None)
    sf = sm.scaling_factor("llama-2-13b", 128, "100Gbps", gpus_per_node=8, nics_per_node=8,
                           tp=4, pp=4, microbatches=8, virtual_stages=2)
    assert sf != sm.scaling_factor("llama-2-13b", 128, "100Gbps", gpus_per_node=8,
                                   nics_per_node=8, tp=4, pp=4, microbatches=8)
    assert f"{sf:.4f}" in capsys.readouterr().out
    # 10 layers a stage: 3 chunks is refused, by name
    assert main(["iteration", "--bw", "100Gbps", *args, "--virtual-stages", "3"]) == 2
    assert "--virtual-stages=3" in capsys.readouterr().err
    # plan takes it too (its answers: tests/test_virtual_stages.py)
    assert main(["plan", "--bw", "100Gbps", *args, "--virtual-stages", "2"]) in (0, None)
    assert "interleaved 1F1B, 2 chunks per stage" in capsys.readouterr().out
