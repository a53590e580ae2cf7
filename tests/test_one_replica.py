"""One replica runs exactly the single worker's iteration: its scaling factor is 1.0, not
the 0.9999999999999999 or 1.0000000000000002 that summing the same times in another
order (forward, accumulated micro-batches and backward apart) gave, in every answer;
nothing else is rounded."""

import warnings

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.model import Scenario, _one_replica


@pytest.mark.parametrize("model", ["bert", "resnet50", "gpt2", "vgg16"])
@pytest.mark.parametrize("accumulation", [1, 2, 3, 4, 5, 7, 8])
def test_one_worker_scales_exactly_one(model, accumulation):
    prof = attrs.evolve(sm.load_profile(model), grad_accum=accumulation)
    c = sm.ClusterProfile(compute_slowdown=1.1, sync_overhead=0.01, provenance={"s": "t"})
    for cluster in (None, c):
        assert sm.scaling_factor(prof, 1, 10e9, cluster=cluster) == 1.0
        assert sm.scaling_factor(prof, np.array([1, 2]), 10e9, cluster=cluster)[0] == 1.0
        assert sm.iteration_time(prof, 1, 10e9, cluster=cluster).scaling_factor == 1.0
        res = sm.min_compression(prof, 10e9, n=1, cluster=cluster)
        assert res.scaling_factor == res.uncompressed_scaling_factor == 1.0
        assert sm.required_bandwidth(prof, n=1, cluster=cluster).scaling_factor == 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = sm.plan_compression(prof, 10e9, n=1, cluster=cluster)
        assert plan.uncompressed_scaling_factor == 1.0


@pytest.mark.parametrize("kw", [dict(n=2, pp=2, microbatches=2), dict(n=4, pp=4, microbatches=8),
                                dict(n=2, tp=2), dict(n=4, tp=2, pp=2, microbatches=3)])
def test_one_data_parallel_replica_of_a_model_parallel_job(kw):
    n = kw.pop("n")
    assert sm.scaling_factor("llama-2-7b", n, 100e9, **kw) == 1.0
    assert sm.iteration_time("llama-2-7b", n, 100e9, **kw).scaling_factor == 1.0
    assert sm.min_compression("llama-2-7b", 100e9, n=n, **kw).scaling_factor == 1.0


def test_only_one_replica_within_rounding_is_taken_as_the_single_worker():
    sc = Scenario.build(attrs.evolve(sm.load_profile("bert"), grad_accum=3))
    t1 = sc.profile.iteration_time
    end = t1 - sc.forward(1) - sc.profile.update_time
    assert sc.step_time(1, end) == t1
    assert sc.step_time(1, end + 1e-9) == sc.forward(1) + (end + 1e-9) + sc.profile.update_time
    assert sc.step_time(2, end) == sc.forward(2) + end + sc.profile.update_time  # as summed
    out = np.array([t1 * (1 + 4e-16), t1 * (1 + 1e-12), t1 * (1 - 4e-16)])
    _one_replica(out, np.array([True, True, False]), t1)
    assert out[0] == t1 and out[1] == t1 * (1 + 1e-12) and out[2] == t1 * (1 - 4e-16)
