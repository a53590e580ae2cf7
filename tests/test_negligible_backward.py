"""Units whose backward time is rounding (a recompute taken off again) or far below any
kernel's duration do not take the whole forward time when it is split by the backward
times (scalemodel.sharding.NEGLIGIBLE): the closed form and the discrete-event
references agree on the profiles Hypothesis found them to disagree on."""

import numpy as np
import pytest

import scalemodel as sm
from des_reference import simulate_iteration
from des_sharding import simulate_sharded
from scalemodel.checkpointing import Checkpointing, with_recompute
from scalemodel.sharding import NEGLIGIBLE, Sharding, negligible_zeroed, shard_units
from test_checkpointing import _chosen_blocks, _hand_shifted


def _profile(names, backward, ready):
    return sm.WorkloadProfile(
        name="sharded-synthetic", tensor_bytes=np.full(len(names), 4.0),
        tensor_ready=np.asarray(ready, float), forward_time=0.0625, backward_time=backward,
        update_time=0.0, reduction=sm.ReductionCost(gamma=0.0, latency=0.0), batch_size=1,
        tensor_names=tuple(names), precision="fp32",
        provenance={"source": "synthetic test profile"})


THREE = ("layers.2.m0.weight", "layers.1.m0.weight", "layers.0.m0.weight")


def test_the_recompute_taken_off_again_leaves_no_share():
    # no backward time: the recompute (a third of the forward each) is all there is, and
    # taking it off again left rounding that used to give one unit the whole forward
    p = with_recompute(_profile(THREE, 0.0, [0.0, 0.0, 0.0]), Checkpointing("full", 1.0))
    units = shard_units(p, "block")
    np.testing.assert_allclose(units.forward, [0.0625 / 3] * 3, rtol=1e-15)


@pytest.mark.parametrize("backward, ready", [(0.0, [0.0, 0.0, 0.0]),
                                             (4.28460712462258e-62, [0.0, 0.0, 4.28e-62])])
def test_zero3_with_recompute_equals_the_reference(backward, ready):
    p = _profile(THREE, backward, ready)
    t = sm.iteration_time(p, n=2, bw=1e8, algorithm="ring", fusion="none",
                          sharding=Sharding("zero3"),
                          activation_checkpointing=Checkpointing("full", 1.0)).total
    ref = simulate_sharded(p, 2, 1e8, strategy="zero3", wrap="none", fusion=None,
                           algorithm="ring", element_bytes=4,
                           recompute=_chosen_blocks(p, 1.0))
    assert t == pytest.approx(ref, rel=1e-9)
    assert t == pytest.approx(0.125 + 2 * 16 / 1e8, rel=1e-12)  # two exposed ops of 16 bits


def test_ddp_with_recompute_equals_the_reference():
    p = _profile(("layers.0.m0.weight", "embed.w0"), 1.0388102241596456e-79, [0.0, 0.0])
    it = sm.iteration_time(p, 1, 1e8, fusion="ddp",
                           activation_checkpointing=Checkpointing("full", 1.0))
    shifted = _hand_shifted(p, _chosen_blocks(p, 1.0))
    assert it.total == pytest.approx(simulate_iteration(shifted, n=1, bw=1e8, fusion="ddp"),
                                     rel=1e-9)


def test_negligible_is_relative_to_the_compute():
    t = np.array([0.0, 1e-20, -1e-20, 1e-9, 0.5])
    assert negligible_zeroed(t, 1.0).tolist() == [0.0, 0.0, 0.0, 1e-9, 0.5]
    assert negligible_zeroed(t, 1e-12).tolist() == [0.0, 1e-20, -1e-20, 1e-9, 0.5]
    assert negligible_zeroed(t, 1e4).tolist() == [0.0, 0.0, 0.0, 0.0, 0.5]
    assert negligible_zeroed(np.array([NEGLIGIBLE * 2.0]), 1.0)[0] == NEGLIGIBLE * 2.0
