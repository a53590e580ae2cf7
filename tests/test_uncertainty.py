"""Intervals on predictions: the corners of the box of calibration intervals are exact.

The scaling factor is monotone in latency, utilization, ceiling and a common scale of the
compute times, so its extremes over the box sit at two corners; sampling the box must
never leave the interval, and the corners themselves must be reached.
"""

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scalemodel as sm
from scalemodel.calibrate.uncertainty import (PredictionInterval, corner_inputs,
                                              min_compression_interval,
                                              scaling_factor_interval)

PLAIN = sm.ClusterProfile(name="plain", alpha=2e-5, utilization=0.6,
                          intervals={"alpha": (1e-5, 4e-5), "utilization": (0.5, 0.7)},
                          extra={"confidence": 0.95})
TABLE = sm.ClusterProfile(
    name="table", alpha=2e-5, utilization=0.2, ceiling=40e9,
    table_line_rate=[10e9, 25e9, 100e9, 200e9], table_utilization=[0.9, 0.8, 0.4, 0.2],
    intervals={"alpha": (1.5e-5, 3e-5), "utilization": (0.18, 0.22),
               "table_utilization": ([0.85, 0.75, 0.36, 0.18], [0.95, 0.85, 0.44, 0.22]),
               "ceiling": (36e9, 44e9)},
    extra={"confidence": 0.9}, provenance={"source": "made up for the interval tests"})


def scaled(profile, c):
    return attrs.evolve(profile, tensor_ready=profile.tensor_ready * c,
                        forward_time=profile.forward_time * c,
                        backward_time=profile.backward_time * c,
                        update_time=profile.update_time * c)


def sample(cl, rng):
    """A random cluster inside the box of ``cl``'s intervals."""
    iv = cl.intervals
    kw = {"alpha": rng.uniform(*iv["alpha"]), "utilization": rng.uniform(*iv["utilization"])}
    if cl.table_utilization is not None:
        lo, hi = (np.asarray(x) for x in iv["table_utilization"])
        kw["table_utilization"] = rng.uniform(lo, hi)
    if cl.ceiling is not None:
        kw["ceiling"] = rng.uniform(*iv["ceiling"])
    return attrs.evolve(cl, **kw)


@pytest.mark.parametrize("cl, bw", [(PLAIN, 10e9), (TABLE, 50e9), (TABLE, 150e9),
                                    (TABLE, 400e9)])
def test_sampled_box_stays_inside_and_corners_are_reached(cl, bw):
    ci = scaling_factor_interval("resnet50", 64, bw, cluster=cl, compute_interval=(0.9, 1.1))
    assert ci.lo < ci.value < ci.hi
    rng = np.random.default_rng(0)
    prof = sm.load_profile("resnet50")
    seen = []
    for _ in range(30):
        c = rng.uniform(0.9, 1.1)
        s = sm.scaling_factor(scaled(prof, c), 64, bw, cluster=sample(cl, rng))
        assert ci.lo - 1e-12 <= s <= ci.hi + 1e-12
        seen.append(s)
    (pw, cw), (pb, cb) = corner_inputs("resnet50", cl, (0.9, 1.1))
    assert sm.scaling_factor(pw, 64, bw, cluster=cw) == pytest.approx(ci.lo)
    assert sm.scaling_factor(pb, 64, bw, cluster=cb) == pytest.approx(ci.hi)
    assert ci.lo <= min(seen) and max(seen) <= ci.hi


def test_vectorized_over_n_and_bandwidth():
    bws = np.array([1e9, 10e9, 100e9])
    arr = scaling_factor_interval("resnet50", 64, bws, cluster=PLAIN)
    assert arr.value.shape == (3,)
    assert np.all(arr.lo <= arr.value) and np.all(arr.value <= arr.hi)
    for i, bw in enumerate(bws):  # same as one at a time
        one = scaling_factor_interval("resnet50", 64, bw, cluster=PLAIN)
        assert one.lo == pytest.approx(arr.lo[i]) and one.hi == pytest.approx(arr.hi[i])
    grid = scaling_factor_interval("vgg16", np.array([[8], [64]]), bws, cluster=TABLE)
    assert grid.lo.shape == (2, 3) and np.all(grid.lo <= grid.hi)
    assert "(90 %)" in str(grid)


def test_min_compression_interval_takes_the_opposite_corners():
    r = min_compression_interval("bert", 10e9, cluster=PLAIN, n=64,
                                 compute_interval=(0.95, 1.05))
    assert r.lo < r.value < r.hi
    (pw, cw), (pb, cb) = corner_inputs("bert", PLAIN, (0.95, 1.05))
    assert sm.min_compression(pw, 10e9, cluster=cw, n=64).ratio == pytest.approx(r.hi)
    assert sm.min_compression(pb, 10e9, cluster=cb, n=64).ratio == pytest.approx(r.lo)
    assert str(r).startswith("minimum compression ratio") and "(95 %)" in str(r)


def test_str_and_exact_cluster():
    assert str(PredictionInterval(0.8123, 0.7899, 0.8291, confidence=0.95)) == \
        "scaling factor 0.812 [0.790, 0.829] (95 %)"
    exact = sm.ClusterProfile(name="exact", alpha=2e-5, utilization=0.6)
    ci = scaling_factor_interval("resnet50", 64, 10e9, cluster=exact)
    assert ci.lo == ci.value == ci.hi and ci.confidence is None
    assert "%" not in str(ci)


def test_compute_interval_from_the_profile_spread_and_bad_input():
    prof = sm.load_profile("resnet50")
    spread = attrs.evolve(prof, provenance=dict(prof.provenance,
                                                spread={"rel_lo": 0.9, "rel_hi": 1.1}))
    a = scaling_factor_interval(spread, 64, 10e9, cluster=PLAIN)
    b = scaling_factor_interval(prof, 64, 10e9, cluster=PLAIN, compute_interval=(0.9, 1.1))
    assert (a.lo, a.hi) == pytest.approx((b.lo, b.hi))
    for bad in [(1.2, 1.5), (0.9,), (0.0, 1.1), "wide"]:
        with pytest.raises(sm.InvalidParameterError, match="compute_interval"):
            corner_inputs("bert", PLAIN, bad)
    broken = attrs.evolve(TABLE, intervals=dict(TABLE.intervals,
                                                table_utilization=([0.8], [0.9])))
    with pytest.raises(sm.InvalidParameterError, match="table_utilization"):
        corner_inputs("bert", broken)


def test_from_a_saved_calibrated_cluster(tmp_path):
    path = sm.save_cluster(TABLE, tmp_path / "table.json")
    ci = scaling_factor_interval("resnet50", 64, 50e9, cluster=str(path))
    same = scaling_factor_interval("resnet50", 64, 50e9, cluster=TABLE)
    assert (ci.lo, ci.value, ci.hi) == pytest.approx((same.lo, same.value, same.hi))


@settings(max_examples=25, deadline=None)
@given(a_lo=st.floats(0.0, 1e-4), a_w=st.floats(0.0, 1e-4), u_lo=st.floats(0.05, 0.9),
       u_w=st.floats(0.0, 0.1), c_lo=st.floats(0.5, 1.0), c_hi=st.floats(1.0, 2.0),
       bw=st.floats(1e8, 1e12), n=st.integers(2, 256), frac=st.tuples(*[st.floats(0, 1)] * 3))
def test_any_point_of_any_box_lies_between_the_corners(a_lo, a_w, u_lo, u_w, c_lo, c_hi, bw,
                                                       n, frac):
    u_hi = min(1.0, u_lo + u_w)
    cl = sm.ClusterProfile(name="h", alpha=a_lo + a_w / 2, utilization=(u_lo + u_hi) / 2,
                           intervals={"alpha": (a_lo, a_lo + a_w),
                                      "utilization": (u_lo, u_hi)})
    ci = scaling_factor_interval("resnet50", n, bw, cluster=cl,
                                 compute_interval=(c_lo, c_hi))
    a = a_lo + frac[0] * a_w
    u = u_lo + frac[1] * (u_hi - u_lo)
    c = c_lo + frac[2] * (c_hi - c_lo)
    s = sm.scaling_factor(scaled(sm.load_profile("resnet50"), c), n, bw, alpha=a,
                          utilization=u)
    assert ci.lo * (1 - 1e-9) <= s <= ci.hi * (1 + 1e-9)


def test_an_unbounded_interval_end_is_the_parameters_bound():
    # the calibration's fit stores an end the runs do not constrain as None
    from scalemodel.calibrate.uncertainty import scaling_factor_interval

    cl = sm.ClusterProfile(name="x", overlap=0.7, intervals={"overlap": (0.5, None)},
                           provenance={"source": "test"})
    worst, best = cl.corners()
    assert (worst.overlap, best.overlap) == (0.5, 1.0)
    iv = scaling_factor_interval("resnet50", 8, 10e9, cluster=cl)
    lo = sm.scaling_factor("resnet50", 8, 10e9, cluster=worst)
    hi = sm.scaling_factor("resnet50", 8, 10e9, cluster=best)
    assert (iv.lo, iv.hi) == pytest.approx((lo, hi))
