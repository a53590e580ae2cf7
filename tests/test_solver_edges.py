"""The inverse solvers at the edges (issue 11): utilization tables that are not monotone,
targets at the limit, extreme but finite numbers."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from conftest import make_profile


def _table_cluster(rates, utils, ceiling=None):
    return sm.ClusterProfile(table_line_rate=rates, table_utilization=utils, ceiling=ceiling,
                             provenance={"source": "test"})


def test_non_monotone_table_achieves_monotone_bandwidth():
    # 0.9 at 10G, 0.8 at 25G, 0.25 at 100G: 9, 20, 25 Gbit/s achieved
    cl = _table_cluster([10e9, 25e9, 100e9], [0.9, 0.8, 0.25])
    bw = np.logspace(9, 12, 400)
    ach = cl.achieved_bandwidth(bw)
    assert np.all(np.diff(ach) >= -1e-6)
    assert cl.achieved_bandwidth(60e9) <= 25e9  # no more than at 100G (was 27 Gbit/s)
    sf = sm.scaling_factor("resnet50", 64, bw, cluster=cl, fusion="horovod")
    assert np.all(np.diff(sf) >= -1e-12)
    target = 0.9125
    res = sm.required_bandwidth("resnet50", n=64, target=target, cluster=cl, fusion="horovod")
    assert res.feasible
    assert sm.scaling_factor("resnet50", 64, res.bw, cluster=cl,
                             fusion="horovod") >= target * (1 - 1e-12)
    assert sm.scaling_factor("resnet50", 64, res.bw * 0.999, cluster=cl,
                             fusion="horovod") < target


@st.composite
def clusters(draw):
    k = draw(st.integers(1, 5))
    rates = np.sort(np.unique(np.round(np.exp(draw(st.lists(
        st.floats(math.log(1e8), math.log(1e12)), min_size=k, max_size=k))), -3)))
    utils = draw(st.lists(st.floats(0.05, 1.0), min_size=rates.size, max_size=rates.size))
    ceiling = draw(st.one_of(st.none(), st.floats(1e9, 5e11)))
    return _table_cluster(rates, utils, ceiling)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["resnet50", "bert", "vgg16"]),
       st.sampled_from([8, 64, 256]), st.floats(0.3, 0.99))
def test_required_bandwidth_is_the_smallest_line_rate_on_any_table(cl, model, n, target):
    res = sm.required_bandwidth(model, n=n, target=target, cluster=cl)
    if not res.feasible:
        # nothing reaches it: then not even a huge line rate does
        assert sm.scaling_factor(model, n, 1e15, cluster=cl) < target * (1 + 1e-9)
        return
    if res.bw == 0.0:
        return
    sf = sm.scaling_factor(model, n, res.bw, cluster=cl)
    assert sf >= target * (1 - 1e-9)
    assert sm.scaling_factor(model, n, res.bw * (1 - 1e-6), cluster=cl) < target * (1 + 1e-9)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["resnet50", "bert"]), st.floats(1e8, 1e12),
       st.floats(0.3, 0.99))
def test_min_compression_is_minimal_on_any_table(cl, model, bw, target):
    res = sm.min_compression(model, bw, n=64, target=target, cluster=cl)
    if not res.feasible:
        assert sm.scaling_factor(model, 64, bw, compression=1e9, cluster=cl) < target * (1 + 1e-9)
        return
    assert sm.scaling_factor(model, 64, bw, compression=res.ratio, cluster=cl) >= \
        target * (1 - 1e-9)
    if res.ratio > 1:
        assert sm.scaling_factor(model, 64, bw, compression=res.ratio * (1 - 1e-6),
                                 cluster=cl) < target * (1 + 1e-9)


def test_target_one_is_the_limit_not_a_rounding_accident():
    res = sm.min_compression("bert", "10Gbps", target=1.0)
    assert not res.feasible and math.isinf(res.ratio)
    assert "only approaches" in res.message or "limit" in res.message
    # overlap efficiency 0: every all-reduce after backward; no finite ratio reaches 1
    cl = sm.ClusterProfile(overlap=0.0, provenance={"source": "test"})
    res = sm.min_compression("bert", "10Gbps", target=1.0, cluster=cl)
    assert not res.feasible and math.isinf(res.ratio)
    res = sm.required_bandwidth("bert", target=1.0)
    assert not res.feasible
    # just below the limit is feasible, with a finite, minimal ratio
    lim = sm.min_compression("bert", "10Gbps").max_scaling_factor
    res = sm.min_compression("bert", "10Gbps", target=lim * 0.999)
    assert res.feasible and math.isfinite(res.ratio) and res.ratio < 1e6


def test_a_limit_just_below_the_target_never_prints_as_the_target():
    """resnet50 on 64 workers tops out at 0.99966 (the last bucket's tail): the message must
    not read "reaches only 1.000 < target 1"."""
    res = sm.min_compression("resnet50", 10e9, n=64, target=1.0)
    assert not res.feasible and res.max_scaling_factor < 1.0
    shown = res.message.split("reaches only ")[1].split(" <")[0]
    assert float(shown) < 1.0, res.message
    plan = sm.plan_compression("resnet50", 10e9, n=64, target=1.0)
    shown = plan.message.split("reaches only ")[1].split(" ")[0]
    assert float(shown) < 1.0, plan.message


def test_extreme_finite_inputs_give_finite_answers_or_documented_errors():
    s = sm.sensitivities("bert", 64, 1e6)   # the smallest line rate accepted, 1 Mbit/s
    for v in (s.scaling_factor, s.d_bw, s.d_utilization, s.d_compression,
              s.elasticity_bw):
        assert math.isfinite(v)
    assert s.elasticity_bw == pytest.approx(1.0, rel=1e-3)
    assert s.d_bw == pytest.approx(s.scaling_factor / 1e6, rel=1e-3)
    with pytest.raises(sm.InvalidParameterError, match="bw=1e-300"):
        sm.sensitivities("bert", 64, 1e-300)
    with pytest.raises(sm.InvalidParameterError, match="bw="):
        sm.min_compression("bert", 1e-300)
    with pytest.raises(sm.InvalidParameterError, match="bw="):
        sm.min_compression("bert", 5e-324)
    with pytest.raises(sm.InvalidParameterError, match="utilization="):
        sm.required_bandwidth("bert", utilization=1e-300)
    with pytest.raises(sm.ProfileFormatError, match="forward_time"):
        make_profile([1e6], [1e308], forward=1e308)
    assert 0 < sm.scaling_factor("bert", 64, 1e6) < 1e-2


def test_sensitivities_take_a_cluster():
    cl = sm.ClusterProfile(ceiling=5e9, compute_slowdown=1.1, provenance={"source": "test"})
    s = sm.sensitivities("bert", 64, "10Gbps", cluster=cl)
    assert s.elasticity_bw == 0.0  # the ceiling binds: more line rate does nothing
    assert s.elasticity_compression > 0
    assert s.scaling_factor == pytest.approx(sm.scaling_factor("bert", 64, 10e9, cluster=cl))
