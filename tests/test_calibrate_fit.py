"""Fitting the transport model: recover known parameters (STYLE.md practice 4).

Data come from the library's own collective model (scalemodel.collectives) with known
latency, bandwidth and reduction cost and multiplicative (log-normal) noise; the fits
must recover them and their intervals must cover them. No torch needed.
"""

import json

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.calibrate.fit import (COLLECTIVE_MODELS, CollectiveFit, _coefficients,
                                      cluster_from_fits, fit_collective)
from scalemodel.calibrate.overhead import fit_host_overhead

SIZES = 2.0 ** np.arange(12, 29)  # 4 KiB .. 256 MiB


def synth(collective, n, alpha, bw, gamma=0.0, noise=0.03, reps=7, seed=0, sizes=SIZES):
    """Times [s] of ``collective`` from eq. (fit-model) with log-normal noise."""
    lat, bits, red = _coefficients(collective, COLLECTIVE_MODELS[collective], sizes, n)
    t = lat * alpha + bits / bw + red * gamma
    rng = np.random.default_rng(seed)
    return t[:, None] * rng.lognormal(0.0, noise, (sizes.size, reps))


@pytest.mark.parametrize("collective, n", [("all_reduce", 8), ("all_reduce", 2),
                                           ("all_gather", 16), ("send_recv", 2),
                                           ("reduce_scatter", 4), ("broadcast", 8)])
def test_fit_recovers_known_parameters(collective, n):
    alpha, bw = 30e-6, 40e9
    fit = fit_collective(SIZES, synth(collective, n, alpha, bw), collective=collective, n=n,
                         line_rate="100Gbps")
    assert fit.alpha == pytest.approx(alpha, rel=0.1)
    assert fit.bandwidth == pytest.approx(bw, rel=0.03)
    lo, hi = fit.intervals["alpha"]
    assert lo <= alpha <= hi
    lo, hi = fit.intervals["bandwidth"]
    assert lo <= bw <= hi
    assert fit.r2 > 0.99 and fit.utilization == pytest.approx(0.4, rel=0.03)
    assert np.all(np.abs(fit.residuals) < 0.1) and fit.repetitions == 7
    assert fit.gamma is None  # folded into the bandwidth


def test_fitted_model_is_the_librarys():
    fit = fit_collective(SIZES, synth("all_reduce", 8, 30e-6, 40e9), n=8)
    m = np.array([1e3, 1e6, 1e8])
    np.testing.assert_allclose(
        fit.predict(m), sm.collective_time("ring", m, 8, fit.bandwidth, alpha=fit.alpha),
        rtol=1e-12)
    assert isinstance(fit.predict(1e6), float)
    tree = fit_collective(SIZES, synth("all_reduce", 8, 30e-6, 40e9), n=8, algorithm="tree",
                          r2_warn=0)
    assert tree.algorithm == "tree"
    assert tree.predict(1e6) == pytest.approx(
        sm.collective_time("tree", 1e6, 8, tree.bandwidth, alpha=tree.alpha), rel=1e-12)


def test_one_time_per_size_and_exact_data():
    t = synth("all_reduce", 4, 12e-6, 10e9, noise=0.0, reps=1)[:, 0]
    fit = fit_collective(SIZES, t, n=4)
    assert fit.alpha == pytest.approx(12e-6, rel=1e-6)
    assert fit.bandwidth == pytest.approx(10e9, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0) and fit.repetitions == 1


def test_intervals_cover_the_truth_at_about_their_level():
    hits = 0
    for seed in range(20):
        fit = fit_collective(SIZES, synth("all_reduce", 8, 25e-6, 20e9, reps=1, seed=seed,
                                          noise=0.05)[:, 0], n=8, r2_warn=0)
        a_lo, a_hi = fit.intervals["alpha"]
        b_lo, b_hi = fit.intervals["bandwidth"]
        hits += (a_lo <= 25e-6 <= a_hi) and (b_lo <= 20e9 <= b_hi)
    assert hits >= 16  # 95 % each; both together in 20 trials


def test_robust_loss_resists_outliers():
    t = synth("all_reduce", 8, 20e-6, 25e9, reps=1)[:, 0]
    t[[4, 9, 13]] *= [4.0, 0.3, 3.0]  # three wild measurements
    fit = fit_collective(SIZES, t, n=8, r2_warn=0.0)
    assert fit.bandwidth == pytest.approx(25e9, rel=0.05)
    assert fit.alpha == pytest.approx(20e-6, rel=0.2)
    plain = fit_collective(SIZES, t, n=8, loss="linear", r2_warn=0.0)
    assert abs(plain.bandwidth / 25e9 - 1) > abs(fit.bandwidth / 25e9 - 1)


def test_gamma_needs_a_bandwidth_from_a_non_reducing_collective():
    ar = synth("all_reduce", 8, 20e-6, 40e9, gamma=2e-11, noise=0.01)
    ag = synth("all_gather", 8, 20e-6, 40e9, noise=0.01)
    with pytest.raises(sm.CalibrationError, match="cannot separate"):
        fit_collective(SIZES, ar, n=8, fit_gamma=True)
    with pytest.raises(sm.InvalidParameterError, match="fit_gamma"):
        fit_collective(SIZES, ag, collective="all_gather", n=8, fit_gamma=True)
    bw = fit_collective(SIZES, ag, collective="all_gather", n=8).bandwidth
    fit = fit_collective(SIZES, ar, n=8, fit_gamma=True, bandwidth=bw)
    assert fit.gamma == pytest.approx(2e-11, rel=0.25)
    lo, hi = fit.intervals["gamma"]
    assert lo <= 2e-11 <= hi
    assert fit.intervals["bandwidth"] == (bw, bw)  # held fixed
    folded = fit_collective(SIZES, ar, n=8)  # without: gamma lowers the bandwidth
    # ring: 2 (n-1)/n 8m bits and (n-1)/n m bytes summed, so 1/B_eff = 1/B + gamma / 16
    assert folded.gamma is None
    assert folded.bandwidth == pytest.approx(1 / (1 / 40e9 + 2e-11 / 16), rel=0.02)
    assert "gamma" in str(fit)


def test_overrides_bounds_and_start_values():
    t = synth("all_reduce", 8, 30e-6, 40e9)
    fixed = fit_collective(SIZES, t, n=8, alpha=30e-6)
    assert fixed.alpha == 30e-6 and fixed.intervals["alpha"] == (30e-6, 30e-6)
    assert fixed.bandwidth == pytest.approx(40e9, rel=0.03)
    capped = fit_collective(SIZES, t, n=8, bounds={"bandwidth": (1e9, 30e9)}, r2_warn=0)
    assert capped.bandwidth == pytest.approx(30e9, rel=1e-6)
    started = fit_collective(SIZES, t, n=8, alpha0=1e-3, bandwidth0="1Gbps", f_scale=0.1)
    assert started.bandwidth == pytest.approx(40e9, rel=0.03) and started.f_scale == 0.1
    with pytest.raises(TypeError, match="alpah"):
        fit_collective(SIZES, t, n=8, alpah=1e-5)
    with pytest.raises(sm.InvalidParameterError, match="bounds"):
        fit_collective(SIZES, t, n=8, bounds={"beta": (0, 1)})
    with pytest.raises(sm.InvalidParameterError, match="bounds\\['alpha'\\]"):
        fit_collective(SIZES, t, n=8, bounds={"alpha": (1e-3, 1e-6)})


def test_too_few_sizes_and_bad_input():
    t = synth("all_reduce", 4, 1e-5, 1e10)
    with pytest.raises(sm.CalibrationError, match="3 distinct message size.*at least 4.*widen"):
        fit_collective(SIZES[:3], t[:3], n=4)
    with pytest.raises(sm.CalibrationError, match="1 distinct"):
        fit_collective(np.full(6, 1e6), t[:6], n=4)
    with pytest.raises(sm.InvalidParameterError, match="seconds"):
        fit_collective(SIZES, np.where(np.arange(SIZES.size)[:, None] == 2, np.nan, t), n=4)
    with pytest.raises(sm.InvalidParameterError, match="seconds"):
        fit_collective(SIZES, -t, n=4)
    with pytest.raises(sm.InvalidParameterError, match="seconds"):
        fit_collective(SIZES, t[:-1], n=4)
    with pytest.raises(sm.InvalidParameterError, match="nbytes"):
        fit_collective(np.r_[0.0, SIZES[1:]], t, n=4)
    with pytest.raises(sm.InvalidParameterError, match="n="):
        fit_collective(SIZES, t, n=1)
    with pytest.raises(sm.InvalidParameterError, match="collective"):
        fit_collective(SIZES, t, n=4, collective="alltoallv")
    with pytest.raises(sm.InvalidParameterError, match="confidence"):
        fit_collective(SIZES, t, n=4, confidence=95)
    with pytest.raises(sm.UnknownNameError, match="algorithm"):
        fit_collective(SIZES, t, n=4, algorithm="rign")


def test_poor_fit_warns():
    rng = np.random.default_rng(3)
    t = rng.uniform(1e-3, 2e-3, SIZES.size)  # no size dependence at all: noise
    with pytest.warns(sm.CalibrationWarning, match="all_reduce.*R\\^2"):
        fit_collective(SIZES, t, n=4, bounds={"bandwidth": (1e6, 1e12)})


def test_bandwidth_above_line_rate_warns_and_clips():
    with pytest.warns(sm.CalibrationWarning, match="above the line rate"):
        fit = fit_collective(SIZES, synth("all_reduce", 2, 1e-5, 40e9), n=2,
                             line_rate="10Gbps")
    assert fit.utilization == 1.0


def test_fit_round_trips_through_json():
    fit = fit_collective(SIZES, synth("all_gather", 4, 1e-5, 2e10), collective="all_gather",
                         n=4, line_rate=25e9)
    again = CollectiveFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert str(again) == str(fit)
    np.testing.assert_array_equal(again.seconds, fit.seconds)
    assert again.predict(1e6) == fit.predict(1e6)
    text = str(fit)
    assert "all_gather" in text and "us" in text and "Gbit/s" in text and "95%" in text
    with pytest.raises(sm.InvalidParameterError):
        CollectiveFit.from_dict({"collective": "x"})


def test_cluster_from_one_fit_round_trips_and_plugs_in(tmp_path):
    fit = fit_collective(SIZES, synth("all_reduce", 8, 30e-6, 40e9), n=8,
                         line_rate="100Gbps")
    cl = cluster_from_fits(fit, name="lab", provenance={"source": "synthetic test"})
    assert cl.alpha == pytest.approx(fit.alpha)
    assert cl.utilization == pytest.approx(0.4, rel=0.03)
    lo, hi = cl.intervals["utilization"]
    assert lo <= 0.4 <= hi
    path = sm.save_cluster(cl, tmp_path / "lab.json")
    again = sm.load_cluster(path)
    assert again.intervals["alpha"] == pytest.approx(cl.intervals["alpha"])
    data = json.loads(path.read_text())
    assert data["fits"][0]["collective"] == "all_reduce" and data["confidence"] == 0.95
    assert len(data["fits"][0]["seconds"]) == SIZES.size  # the measured points travel along
    s = sm.scaling_factor("resnet50", 64, 100e9, cluster=str(path))
    assert s == pytest.approx(sm.scaling_factor("resnet50", 64, 100e9, alpha=cl.alpha,
                                                utilization=cl.utilization), rel=1e-12)


def test_cluster_without_line_rate_and_mixed_collectives():
    ar = fit_collective(SIZES, synth("all_reduce", 8, 3e-5, 4e10), n=8)
    ag = fit_collective(SIZES, synth("all_gather", 8, 3e-5, 5e10), collective="all_gather",
                        n=8)
    cl = cluster_from_fits([ag, ar], name="x")
    assert cl.utilization == 1.0 and cl.extra["fitted_bandwidth"] == ar.bandwidth
    assert "no line rate" in cl.provenance["note"]
    cl = cluster_from_fits([ag], name="x", line_rate="100Gbps")  # only all-gathers: used
    assert cl.utilization == pytest.approx(0.5, rel=0.03)
    with pytest.raises(sm.InvalidParameterError, match="collective"):
        cluster_from_fits([ag, ar], name="x", collective="broadcast")
    with pytest.raises(sm.InvalidParameterError, match="fits"):
        cluster_from_fits([], name="x")


def sweep_fits(points, n=8, alpha=2e-5):
    return [fit_collective(SIZES, synth("all_reduce", n, alpha, achieved, seed=i), n=n,
                           line_rate=rate, r2_warn=0.0)
            for i, (rate, achieved) in enumerate(points)]


def test_cluster_from_fits_at_several_rates_has_a_table_and_a_ceiling(tmp_path):
    fits = sweep_fits(((10e9, 9e9), (25e9, 20e9), (100e9, 40e9), (200e9, 41e9)))
    cl = cluster_from_fits(fits[::-1], name="sweep")
    np.testing.assert_allclose(cl.table_line_rate, [10e9, 25e9, 100e9, 200e9])
    np.testing.assert_allclose(cl.table_utilization, [0.9, 0.8, 0.4, 0.205], rtol=0.04)
    assert cl.ceiling == pytest.approx(41e9, rel=0.04)
    lo, hi = cl.intervals["ceiling"]
    assert lo <= 41e9 <= hi
    rows_lo, rows_hi = cl.intervals["table_utilization"]
    assert np.all(np.array(rows_lo) <= cl.table_utilization)
    assert np.all(cl.table_utilization <= np.array(rows_hi))
    # the paper's observation: past the ceiling a faster link buys nothing
    assert sm.scaling_factor("resnet50", 64, 400e9, cluster=cl) == pytest.approx(
        sm.scaling_factor("resnet50", 64, 200e9, cluster=cl), rel=0.01)
    again = sm.load_cluster(sm.save_cluster(cl, tmp_path / "c.json"))
    np.testing.assert_allclose(again.intervals["table_utilization"][0], rows_lo)
    assert again.extra["achieved_bandwidth"]["line_rate"] == [10e9, 25e9, 100e9, 200e9]


def test_no_ceiling_while_the_bandwidth_still_grows():
    fits = sweep_fits(((10e9, 9e9), (25e9, 20e9), (100e9, 40e9)))
    cl = cluster_from_fits(fits, name="sweep")
    assert cl.ceiling is None and "ceiling" not in cl.intervals
    with pytest.raises(sm.InvalidParameterError, match="share a rate"):
        cluster_from_fits(fits + fits[:1], name="dup")


def test_host_overhead_reproduces_the_measured_time():
    cl = sm.ClusterProfile(name="x", alpha=1e-4, utilization=0.9)
    base = sm.iteration_time("resnet50", 2, 1e9, cluster=cl).total
    h = fit_host_overhead("resnet50", 2, 1e9, base * 1.2, cluster=cl)
    c2 = attrs.evolve(cl, reduction=sm.ReductionCost(gamma=h.gamma))
    assert sm.iteration_time("resnet50", 2, 1e9, cluster=c2).total == pytest.approx(
        base * 1.2, rel=1e-8)
    assert not h.clipped and h.gamma > 0
    clipped = fit_host_overhead("resnet50", 2, 1e9, base * 0.9, cluster=cl)
    assert clipped.clipped and clipped.gamma == 0.0


def test_calibration_api_documents_every_parameter_with_a_unit():
    import inspect
    import re

    from test_docstrings import documented_parameters

    from scalemodel.calibrate.nccl_tests import NcclTestsResult, read_nccl_tests
    from scalemodel.calibrate.uncertainty import (corner_inputs, min_compression_interval,
                                                  scaling_factor_interval)
    for fn in (fit_collective, cluster_from_fits, CollectiveFit.predict,
               CollectiveFit.from_dict, read_nccl_tests, NcclTestsResult.fit,
               NcclTestsResult.seconds, scaling_factor_interval, min_compression_interval,
               corner_inputs):
        documented = documented_parameters(fn.__doc__)
        for p in inspect.signature(fn).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            assert p.name in documented, (fn.__qualname__, p.name)
            assert re.search(r"\[[^\]]+\]", documented[p.name]), (fn.__qualname__, p.name)
            assert not isinstance(p.default, (list, dict, set)), (fn.__qualname__, p.name)


def test_overlap_efficiency_bounds_and_recovery(tmp_path):
    import attrs
    from scalemodel.calibrate.overhead import fit_overlap
    prof = sm.load_profile("resnet50")
    cl = sm.ClusterProfile(name="cpu", alpha=1e-4, utilization=0.9,
                           provenance={"source": "synthetic test"})
    full = sm.scaling_factor(prof, 8, 10e9, cluster=cl)
    # eta = 0: every bucket starts after backward, as if all gradients were ready at its end
    late = attrs.evolve(prof, tensor_ready=prof.tensor_ready * 0 + prof.backward_time)
    none = sm.scaling_factor(prof, 8, 10e9, cluster=attrs.evolve(cl, overlap=0.0))
    assert none == pytest.approx(sm.scaling_factor(late, 8, 10e9, cluster=cl), rel=1e-12)
    etas = np.linspace(0, 1, 11)
    s = [sm.scaling_factor(prof, 8, 10e9, cluster=attrs.evolve(cl, overlap=e)) for e in etas]
    assert np.all(np.diff(s) >= -1e-12) and s[-1] == pytest.approx(full) and none < full
    # recover a known eta from the scaling factor it produces
    target = sm.scaling_factor(prof, 8, 10e9, cluster=attrs.evolve(cl, overlap=0.37))
    fit = fit_overlap(prof, 8, 10e9, target, cluster=cl)
    assert fit.overlap == pytest.approx(0.37, abs=1e-4) and not fit.clipped
    assert fit_overlap(prof, 8, 10e9, 1.0, cluster=cl).overlap == 1.0
    assert fit_overlap(prof, 8, 10e9, none / 2, cluster=cl).clipped
    # stored and read back
    path = sm.save_cluster(attrs.evolve(cl, overlap=0.37), tmp_path / "c.json")
    assert sm.load_cluster(path).overlap == 0.37
    with pytest.raises(sm.InvalidParameterError, match="overlap"):
        sm.ClusterProfile(name="x", overlap=1.5)
