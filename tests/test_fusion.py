"""Fusion policies against hand-worked cases."""

import numpy as np
import pytest

import scalemodel as sm

MiB = 2**20


def test_ddp_first_bucket_then_cap():
    sizes = [0.5 * MiB, 0.6 * MiB, 10 * MiB, 10 * MiB, 10 * MiB, 1 * MiB]
    ready = [1, 2, 3, 4, 5, 6]
    b = sm.bucket_ready_times(sizes, ready, "ddp")
    # first bucket closes at >= 1 MiB (1.1 MiB), then 25 MiB cap: 30 MiB, then the rest
    np.testing.assert_allclose(b.nbytes, [1.1 * MiB, 30 * MiB, 1 * MiB])
    np.testing.assert_allclose(b.ready, [2, 5, 6])
    assert [list(m) for m in b.members] == [[0, 1], [2, 3, 4], [5]]


def test_ddp_custom_caps():
    b = sm.bucket_ready_times([1, 1, 1, 1], [0, 1, 2, 3], sm.DDPBuckets(cap_bytes=2,
                                                                        first_bucket_bytes=1))
    np.testing.assert_allclose(b.nbytes, [1, 2, 1])


def test_horovod_cycle_and_threshold():
    # ready times in seconds; 5 ms cycle
    sizes = [1e6, 1e6, 1e6, 70 * MiB, 1e6]
    ready = [0.001, 0.004, 0.006, 0.007, 0.008]
    b = sm.bucket_ready_times(sizes, ready, "horovod")
    # 0.006 - 0 >= 5 ms closes [0..2]; 70 MiB >= 64 MiB closes [3]; the rest at the end
    np.testing.assert_allclose(b.nbytes, [3e6, 70 * MiB, 1e6])
    np.testing.assert_allclose(b.ready, [0.006, 0.007, 0.008])


def test_per_tensor():
    b = sm.bucket_ready_times([5, 6, 7], [0.1, 0.2, 0.3], "none")
    np.testing.assert_allclose(b.nbytes, [5, 6, 7])
    assert len(b) == 3


def test_fusion_objects_validate():
    with pytest.raises(sm.InvalidParameterError, match="cap_bytes=0"):
        sm.DDPBuckets(cap_bytes=0)
    with pytest.raises(sm.InvalidParameterError, match="cycle_time=-1"):
        sm.HorovodFusion(cycle_time=-1)


def test_ddp_buckets_at_a_slowdown_are_the_policys_own_exactly():
    """Scenario._buckets_at stretches the buckets made at slowdown 1 for DDP (whose
    boundaries follow the sizes alone); the same as the policy applied to the stretched
    ready times, to the bit."""
    from scalemodel.fusion import DDPBuckets
    from scalemodel.model import Scenario, clear_caches

    clear_caches(profiles=True)
    for name in ("resnet50", "bert-large", "llama-2-7b"):
        sc = Scenario.build(name, fusion="ddp")
        p = sc.profile
        for sigma in (1.0, 1.07, 1.3, 2.5):
            got = sc._buckets_at(sigma)
            want = DDPBuckets().buckets(p.tensor_bytes, sigma * p.tensor_ready)
            assert np.array_equal(got.nbytes, want.nbytes)
            assert np.array_equal(got.ready, want.ready)
            assert np.array_equal(got.starts, want.starts)
