"""The random catalogue, with many examples (CI's slow set; issue 19 item 9): on random
clusters carrying every real-cluster term, the scaling factor never falls when the line
rate or the compression ratio rises, and the inverse solvers answer exactly the smallest
line rate and ratio that reach the target (target 1.0 included)."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm

pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw):
    """A cluster with a utilization table (not necessarily monotone), maybe a ceiling, a
    latency and every fixed, compute-path and straggler term."""
    k = draw(st.integers(1, 4))
    rates = np.sort(np.unique(np.round(np.exp(draw(st.lists(
        st.floats(math.log(1e8), math.log(1e12)), min_size=k, max_size=k))), -3)))
    utils = draw(st.lists(st.floats(0.05, 1.0), min_size=rates.size, max_size=rates.size))
    return sm.ClusterProfile(
        table_line_rate=rates, table_utilization=utils,
        ceiling=draw(st.one_of(st.none(), st.floats(1e9, 5e11))),
        alpha=draw(st.floats(0.0, 5e-5)),
        compute_slowdown=draw(st.floats(1.0, 1.3)),
        collective_overhead=draw(st.floats(0.0, 2e-4)),
        sync_overhead=draw(st.floats(0.0, 5e-3)),
        bucket_overhead=draw(st.floats(0.0, 2e-4)),
        iteration_overhead=draw(st.floats(0.0, 5e-3)),
        straggler_spread=draw(st.floats(0.0, 0.1)),
        provenance={"source": "random test cluster"})


MODELS = st.sampled_from(["resnet50", "bert", "vgg16"])
FUSIONS = st.sampled_from(["ddp", "horovod", "none"])


@SETTINGS
@given(clusters(), MODELS, FUSIONS, st.sampled_from([2, 8, 64, 512]))
def test_scaling_factor_never_falls_with_line_rate_or_ratio(cl, model, fusion, n):
    bw = np.logspace(8, 12, 60)
    sf = sm.scaling_factor(model, n, bw, cluster=cl, fusion=fusion)
    assert np.all(np.isfinite(sf)) and np.all(sf > 0)
    assert np.all(np.diff(sf) >= -1e-12 * sf[1:])
    r = np.logspace(0, 3, 40)
    sr = sm.scaling_factor(model, n, 10e9, compression=r, cluster=cl, fusion=fusion)
    assert np.all(np.diff(sr) >= -1e-12 * sr[1:])


@SETTINGS
@given(clusters(), MODELS, st.sampled_from([8, 64, 256]),
       st.one_of(st.floats(0.3, 0.99), st.just(1.0)))
def test_required_bandwidth_round_trips(cl, model, n, target):
    res = sm.required_bandwidth(model, n=n, target=target, cluster=cl)
    if not res.feasible:
        assert sm.scaling_factor(model, n, 1e15, cluster=cl) < target * (1 + 1e-9)
        return
    if res.bw == 0.0:
        return
    assert sm.scaling_factor(model, n, res.bw, cluster=cl) >= target * (1 - 1e-9)
    below = res.bw * (1 - 1e-6)
    if below >= 1e6:  # line rates below 1 Mbit/s are refused as unit slips
        assert sm.scaling_factor(model, n, below, cluster=cl) < target * (1 + 1e-9)


@SETTINGS
@given(clusters(), MODELS, st.floats(1e8, 1e12), st.one_of(st.floats(0.3, 0.99),
                                                          st.just(1.0)))
def test_min_compression_round_trips(cl, model, bw, target):
    res = sm.min_compression(model, bw, n=64, target=target, cluster=cl)
    if not res.feasible:
        assert sm.scaling_factor(model, 64, bw, compression=1e9, cluster=cl) \
            < target * (1 + 1e-9)
        return
    assert sm.scaling_factor(model, 64, bw, compression=res.ratio, cluster=cl) >= \
        target * (1 - 1e-9)
    if res.ratio > 1:
        assert sm.scaling_factor(model, 64, bw, compression=res.ratio * (1 - 1e-6),
                                 cluster=cl) < target * (1 + 1e-9)
