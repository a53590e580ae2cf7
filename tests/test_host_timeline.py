"""The wrapper's host work on the n-worker timeline (eq. host-lead of
scalemodel.hostcosts): the closed form against the discrete-event reference (its host
stream spends the lead bucket by bucket), its one-worker limit against
scalemodel.framework's eq. host-bound, the cluster file and profile file round trips, and
the bad input."""

import json
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_reference import simulate_iteration
from scalemodel.exceptions import InvalidParameterError, ModelWarning, ParameterTypeError
from scalemodel.framework import wrapped_iteration_time
from scalemodel.hostcosts import HOST_COST_TRANSFER, HostCosts, host_delays, tensors_per_bucket
from test_framework_terms import framework_terms
from test_overlap_reference import profiles, settings_


@st.composite
def host_costs(draw):
    """Host costs (each zero or not) and a host time as a share of the iteration (None:
    not measured)."""
    costs = HostCosts(per_tensor=draw(st.sampled_from([0.0, draw(st.floats(0, 2e-4))])),
                      per_bucket=draw(st.sampled_from([0.0, draw(st.floats(0, 2e-4))])),
                      device_time=draw(st.sampled_from([0.0, draw(st.floats(0, 5e-3))])))
    share = draw(st.one_of(st.none(), st.floats(0.0, 1.0)))
    return costs, share


def _check(profile, cfg, terms, topo, host, k):
    costs, share = host
    if cfg["algorithm"] == "hierarchical" or (topo is not None and "gpus_per_node" in cfg):
        topo = None
    p = profile.with_grad_accum(k) if k > 1 else profile
    if share is not None:
        p = attrs.evolve(p, host_time=share * p.iteration_time)
    cl = sm.ClusterProfile(topology=topo, host=costs, provenance={"source": "test"}, **terms)
    des_topo = {} if topo is None else dict(gpus_per_node=topo.gpus_per_node,
                                            nics_per_node=topo.nics_per_node,
                                            intra_bw=topo.intra_bw)
    if topo is not None and cfg["algorithm"] in ("halving-doubling", "ps"):
        des_topo = {}
    t_des = simulate_iteration(
        p, slowdown=terms["compute_slowdown"], grad_accum=k,
        collective_overhead=terms["collective_overhead"], sync_overhead=terms["sync_overhead"],
        bucket_overhead=terms["bucket_overhead"], iteration_overhead=terms["iteration_overhead"],
        straggler_spread=terms["straggler_spread"],
        host=(costs.per_tensor, costs.per_bucket, costs.device_time, p.host_time),
        **des_topo, **cfg)
    it = sm.iteration_time(p, cluster=cl, **cfg)
    assert it.total == pytest.approx(t_des, rel=1e-9)
    assert it.total == pytest.approx(it.forward + it.backward + it.exposed_communication
                                     + it.update, rel=1e-9)
    assert sm.scaling_factor(p, cluster=cl, **cfg) == pytest.approx(p.iteration_time / t_des,
                                                                     rel=1e-9)
    assert it.binding in sm.BINDINGS
    # one worker with the wrapper: eq. host-bound, with the constant terms beside it
    sc = sm.Scenario.build(p, cluster=cl, fusion=cfg["fusion"])
    kb = len(sc.buckets)
    want = float(wrapped_iteration_time(
        p.iteration_time, p.iteration_time if p.host_time is None else p.host_time,
        len(p.tensor_bytes), kb, per_tensor=costs.per_tensor, per_bucket=costs.per_bucket,
        device_time=costs.device_time))
    want += terms["iteration_overhead"] + (kb * terms["bucket_overhead"]
                                           if terms["bucket_overhead"] else 0.0)
    assert sc.wrapped_single_worker_time() == pytest.approx(want, rel=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), settings_(), framework_terms(), host_costs(), st.integers(1, 3))
def test_host_terms_equal_discrete_event_reference(profile, cfg, terms, host, k):
    _check(profile, cfg, *terms, host, k)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), settings_(), framework_terms(), host_costs(), st.integers(1, 4))
def test_host_terms_equal_discrete_event_reference_many(profile, cfg, terms, host, k):
    _check(profile, cfg, *terms, host, k)


def _resnet(host_share):
    p = sm.load_profile("resnet50")
    return attrs.evolve(p, host_time=None if host_share is None
                        else host_share * p.iteration_time)


COSTS = HostCosts(per_tensor=40e-6, per_bucket=35e-6, device_time=1e-3)


def test_gpu_bound_hides_host_work_host_bound_pays_it():
    """ResNet-50 (161 tensors): host work 6.4 ms + 35 us per bucket. A host at 10 % of
    the iteration hides it (only g shows); the host-bound limit pays it all."""
    cl = sm.ClusterProfile(host=COSTS, provenance={"source": "test"})
    free, bound = (sm.Scenario.build(_resnet(s), cluster=cl, fusion="none")
                   for s in (0.1, None))
    t1 = free.profile.iteration_time
    assert free.wrapped_single_worker_time() == pytest.approx(t1 + 1e-3, rel=1e-12)
    assert bound.wrapped_single_worker_time() == pytest.approx(
        t1 + 161 * (40e-6 + 35e-6), rel=1e-12)
    # with communication hidden (fast network, one bucket after backward), n = 8 pays
    # the same delay at the end of backward, and reports it as wrapper_host
    it = sm.iteration_time(_resnet(None), 8, 1e13, cluster=cl, fusion="bsp")
    base = sm.iteration_time(_resnet(None), 8, 1e13, fusion="bsp")
    # one bucket (all tensors, one launch): the lead g covers g of the host work, the
    # rest delays backward, and g itself runs on the GPU
    extra = 161 * 40e-6 + 35e-6
    assert it.total - base.total == pytest.approx(extra, rel=1e-9)
    assert it.critical_parts["wrapper_host"] == pytest.approx(extra, rel=1e-9)
    assert it.binding == "fixed"


def test_slowdown_gives_the_host_lead():
    """A compute slowdown of 10 % on a host-bound profile: the GPU's longer step covers
    the host work, so the wrapper costs g alone on n workers."""
    cl = sm.ClusterProfile(host=COSTS, compute_slowdown=1.1, provenance={"source": "test"})
    sc = sm.Scenario.build(_resnet(None), cluster=cl, fusion="none")
    assert sc.host_lead(8) == pytest.approx(0.1 * (sc.profile.forward_time
                                                   + sc.profile.backward_time) + 1e-3)
    assert float(sc.host_delays(8)[-1]) == 0.0
    assert float(sc.host_delays(1)[-1]) > 0.0


def test_host_delays_closed_form():
    d = host_delays([10, 10, 5], COSTS, lead=500e-6)
    assert np.allclose(d, [0.0, 370e-6, 605e-6], rtol=0, atol=1e-12)
    assert np.allclose(host_delays([3, 4], COSTS, lead=-1.0), [155e-6, 350e-6], rtol=1e-12)
    p = sm.load_profile("resnet50")
    b = sm.Scenario.build(p, fusion=sm.DDPBuckets(25 * 2**20)).buckets
    assert tensors_per_bucket(b).sum() == len(p.tensor_bytes)


def test_cluster_and_profile_files_round_trip(tmp_path):
    cl = sm.ClusterProfile(host=HostCosts(per_tensor="40us", per_bucket=35e-6,
                                          device_time="1 ms", source="h200 sweep"),
                           provenance={"source": "test"})
    path = sm.save_cluster(cl, tmp_path / "c.json")
    back = sm.load_cluster(path)
    assert back.host == cl.host
    assert json.loads(path.read_text())["host"]["per_tensor"] == 40e-6
    p = _resnet(0.5)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(p.to_dict()))
    q = sm.load_profile(f)
    assert q.host_time == p.host_time
    assert sm.iteration_time(q, 8, 10e9, cluster=back).total == pytest.approx(
        sm.iteration_time(p, 8, 10e9, cluster=cl).total, rel=1e-12)
    # a faster profile keeps its host time, capped at the iteration
    fast = p.scaled_to(0.1 * p.iteration_time)
    assert fast.host_time == pytest.approx(0.1 * p.iteration_time)
    # more micro-batches: the host issues each one
    assert p.with_grad_accum(2).host_time == pytest.approx(
        0.5 * p.with_grad_accum(2).iteration_time)


@pytest.mark.parametrize("host, field", [
    ({"per_tensor": -1e-6, "per_bucket": 0.0}, "host.per_tensor"),
    ({"per_tensor": 1e-6, "per_bucket": "fast"}, "host.per_bucket"),
    ({"per_tensor": 1e-6, "per_bucket": 0.0, "device_time": 5.0}, "host.device_time"),
    ({"per_tensor": 1e-6}, "host"),
    ({"per_tensor": 1e-6, "per_bucket": 0.0, "per_launch": 1.0}, "host"),
    ([1e-6, 0.0], "host"),
])
def test_bad_host_costs_in_a_file_name_the_field(host, field):
    data = sm.ClusterProfile(provenance={"source": "test"}).to_dict()
    data["host"] = host
    with pytest.raises(sm.ProfileFormatError) as exc:
        sm.ClusterProfile.from_dict(data, "c.json")
    assert exc.value.field == field and "c.json" in str(exc.value)


@pytest.mark.parametrize("kw, exc", [
    (dict(per_tensor=float("nan"), per_bucket=0.0), InvalidParameterError),
    (dict(per_tensor=True, per_bucket=0.0), ParameterTypeError),
    (dict(per_tensor=1e-6, per_bucket=None), ParameterTypeError),
    (dict(per_tensor=1e-6, per_bucket=0.0, source=3), ParameterTypeError),
])
def test_bad_host_costs_name_the_parameter(kw, exc):
    with pytest.raises(exc):
        HostCosts(**kw)
    with pytest.raises(ParameterTypeError, match="host"):
        sm.ClusterProfile(host={"per_tensor": 1e-6, "per_bucket": 0.0},
                          provenance={"source": "test"})


def test_profile_file_host_time_longer_than_the_iteration_is_refused(tmp_path):
    p = sm.load_profile("resnet50")
    data = p.to_dict()
    for bad, why in ((2 * p.iteration_time, "longer than the iteration"), (-1.0, ">= 0"),
                     ("1 ms", "number")):
        data["host_time"] = bad
        f = tmp_path / "p.json"
        f.write_text(json.dumps(data))
        with pytest.raises(sm.ProfileFormatError, match=why) as got:
            sm.load_profile(f)
        assert got.value.field == "host_time"


def test_sharding_says_the_host_costs_are_not_used():
    cl = sm.ClusterProfile(host=COSTS, provenance={"source": "test"})
    with pytest.warns(ModelWarning, match="host costs"):
        sm.iteration_time("resnet50", 8, 100e9, cluster=cl, sharding="zero3")


def _runs_of(truth, profile, tmp_path):
    """Runs of ``profile`` (saved as a file) on the cluster ``truth``: 8 to 64 workers at
    two line rates, the single-worker time given."""
    f = tmp_path / "model.json"
    f.write_text(json.dumps(profile.to_dict()))
    return [{"model": str(f), "n": n, "bw": bw, "single_worker_time": profile.iteration_time,
             "iteration_time": sm.iteration_time(profile, n, bw, cluster=truth).total}
            for n in (8, 16, 32, 64) for bw in (25e9, 100e9)]


def test_fit_cluster_with_the_wrapper_measurement_recovers_the_slowdown(tmp_path):
    """Runs made with known host costs and a compute slowdown of 1.08 (a profile whose
    host issues it in half its time, so that the slowdown shows; where the host binds,
    T = max(sigma G + T_u + g, H + W) does not see it): given the wrapper's costs, the fit
    recovers the slowdown and holds the constant framework terms at 0; without them it
    pours the wrapper's GPU work into the slowdown."""
    p = _resnet(0.5)
    costs = HostCosts(per_tensor=80e-6, per_bucket=60e-6, device_time=2e-3)
    truth = sm.ClusterProfile(host=costs, compute_slowdown=1.08, provenance={"source": "t"},
                              topology=sm.Topology(gpus_per_node=8, nics_per_node=1))
    runs = _runs_of(truth, p, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, wrapper=costs, fit=["compute_slowdown"])
        blind = sm.fit_cluster(runs, fit=["compute_slowdown"])
    assert fit.cluster.host == costs
    assert "host costs           80 us per tensor, 60 us per bucket, 2 ms" in fit.message
    assert "host costs" not in blind.message
    # (the MAP prior on the slowdown pulls it toward 1 by a hair)
    assert fit.parameters["compute_slowdown"].value == pytest.approx(1.08, rel=1e-3)
    assert max(abs(r.error) for r in fit.residuals) < 1e-3
    assert fit.cluster.bucket_overhead == 0.0 and fit.cluster.iteration_overhead == 0.0
    assert blind.cluster.host is None
    assert blind.parameters["compute_slowdown"].value > 1.09  # the host work, as slowdown
    # the fitted cluster answers with the host costs, saved and loaded
    back = sm.load_cluster(fit.save(tmp_path / "c.json"))
    assert back.host == costs
    assert sm.iteration_time(p, 128, 100e9, cluster=back).total == pytest.approx(
        sm.iteration_time(p, 128, 100e9, cluster=truth).total, rel=1e-3)


WRAPPER_JSON = (Path(__file__).parent.parent / "calibration" / "results" / "h200"
                / "framework-repeat" / "resnet50-fp32.wrapper.json")


def test_wrapper_file_and_cli(tmp_path, capsys):
    """The wrapper step's JSON (the H200 repeat sweep) as fit_cluster's wrapper= and as
    `scalemodel fit --wrapper`; the cluster file records the costs."""
    from scalemodel.calibrate.wrapper import WrapperMeasurement, load_host_costs
    from scalemodel.cli import main
    costs = load_host_costs(WRAPPER_JSON)
    meas = WrapperMeasurement.from_dict(json.loads(WRAPPER_JSON.read_text()))
    assert costs == meas.host_costs()
    assert 20e-6 < costs.per_tensor < 80e-6 and 20e-6 < costs.per_bucket < 80e-6
    truth = sm.ClusterProfile(host=costs, compute_slowdown=1.05, provenance={"source": "t"},
                              topology=sm.Topology(gpus_per_node=8, nics_per_node=1))
    runs = _runs_of(truth, _resnet(0.5), tmp_path)
    csv = tmp_path / "runs.csv"
    csv.write_text("model,n,bw,iteration_time,single_worker_time\n" + "".join(
        f"model.json,{r['n']},{r['bw']},{r['iteration_time']!r},{r['single_worker_time']!r}\n"
        for r in runs))
    out = tmp_path / "c.json"
    assert main(["fit", str(csv), "--wrapper", str(WRAPPER_JSON), "--gpus-per-node", "8",
                 "--fit", "compute_slowdown", "--out", str(out)]) in (0, None)
    saved = json.loads(out.read_text())
    assert saved["host"]["per_tensor"] == pytest.approx(costs.per_tensor)
    assert saved["compute_slowdown"] == pytest.approx(1.05, rel=1e-3)


@pytest.mark.parametrize("content, match", [
    ("{}", "not a wrapper measurement"),
    ("[1, 2]", "not a wrapper measurement"),
    ("{\"model\": 1", "JSON"),
])
def test_bad_wrapper_file_is_a_calibration_error(tmp_path, content, match):
    from scalemodel.calibrate.wrapper import load_host_costs
    f = tmp_path / "w.json"
    f.write_text(content)
    with pytest.raises(sm.ScalemodelError, match=match):
        load_host_costs(f)
    with pytest.raises(ParameterTypeError, match="wrapper"):
        load_host_costs(3.5)


@pytest.mark.parametrize("change, match", [
    (dict(plain_seconds=[[0.1, 0.1]]), "plain_seconds"),
    (dict(wrapped_seconds=[[0.2], [0.3]]), "wrapped_seconds"),
    (dict(host_seconds=[[0.1], [0.2], [0.3]]), "host_seconds"),
    (dict(buckets=[10, 2.5]), "buckets"),
    (dict(wrapped_seconds=[[0.2, float("nan")], [0.3, 0.3]]), "wrapped_seconds"),
    (dict(plain_seconds=[0.1, -0.1]), "> 0"),
    (dict(bucket_caps_mb="0,1"), "bucket_caps_mb"),
])
def test_wrapper_file_of_other_shapes_is_refused(tmp_path, change, match):
    """A wrapper file is untrusted input: arrays of other shapes, or times that are not
    finite and positive, are a CalibrationError naming the key (one such file fitted
    host costs of a second per tensor)."""
    from scalemodel.calibrate.wrapper import load_host_costs
    data = {"model": "x", "batch_size": 1, "bucket_caps_mb": [0, 1], "buckets": [10, 2],
            "plain_seconds": [0.1, 0.1], "wrapped_seconds": [[0.2, 0.2], [0.3, 0.3]],
            "host_seconds": [[0.1, 0.1], [0.2, 0.2], [0.15, 0.15]], "device": "d",
            "backend": "gloo", "tensors": 10}
    f = tmp_path / "w.json"
    f.write_text(json.dumps(data))
    assert load_host_costs(f).per_bucket == pytest.approx(0.05 / 8)
    data.update(change)
    f.write_text(json.dumps(data))
    with pytest.raises(sm.CalibrationError, match=match):
        load_host_costs(f)


def test_wrapper_file_without_host_times_says_measure_again(tmp_path):
    from scalemodel.calibrate.wrapper import load_host_costs
    old = WRAPPER_JSON.parent.parent / "framework" / "resnet50-fp32.wrapper.json"
    with pytest.raises(sm.CalibrationError, match="no host issue times"):
        load_host_costs(old)


def test_host_intervals_give_every_answer_an_interval(tmp_path):
    """Host costs with intervals (the wrapper step's bootstrap): iteration_time and
    scaling_factor's intervals range over their ends, and hold the point; the file keeps
    them."""
    costs = HostCosts(per_tensor=40e-6, per_bucket=35e-6,
                      intervals={"per_tensor": (30e-6, 50e-6), "per_bucket": (20e-6, 50e-6)})
    assert costs.interval("per_tensor") == (30e-6, 50e-6) and costs.interval("device_time") is None
    slow, fast = costs.ends()  # the wider of the interval and the spread between models
    f = HOST_COST_TRANSFER
    assert slow.per_tensor == pytest.approx(max(50e-6, 40e-6 * f), rel=1e-12)
    assert fast.per_bucket == pytest.approx(min(20e-6, 35e-6 / f), rel=1e-12)
    wide = HostCosts(per_tensor=40e-6, per_bucket=35e-6,
                     intervals={"per_tensor": (1e-6, 900e-6)})
    assert wide.ends()[0].per_tensor == 900e-6 and wide.ends()[1].per_tensor == 1e-6
    cl = sm.ClusterProfile(host=costs, provenance={"source": "test"})
    p = _resnet(None)  # host-bound: the host work shows in full
    it = sm.iteration_time(p, 8, 1e13, cluster=cl, fusion="none")
    lo, hi = it.total_interval
    assert lo < it.total < hi
    w = sm.Scenario.build(p, cluster=attrs.evolve(cl, host=slow), fusion="none")
    assert hi == pytest.approx(sm.iteration_time(p, 8, 1e13, cluster=w.cluster,
                                                 fusion="none").total, rel=1e-12)
    sf_lo, sf_hi = it.scaling_factor_interval
    assert sf_lo < it.scaling_factor < sf_hi
    back = sm.load_cluster(sm.save_cluster(cl, tmp_path / "c.json"))
    assert back.host == costs
    meas_costs = __import__("scalemodel.calibrate.wrapper", fromlist=["x"]).load_host_costs(
        WRAPPER_JSON)
    for name in ("per_tensor", "per_bucket"):
        lo, hi = meas_costs.interval(name)
        assert lo <= getattr(meas_costs, name) <= hi


@pytest.mark.parametrize("iv, exc", [
    ({"per_launch": (0, 1e-6)}, InvalidParameterError),
    ({"per_tensor": (2e-6, 1e-6)}, InvalidParameterError),
    ({"per_tensor": 1e-6}, ParameterTypeError),
    ([("per_tensor", 0.0)], ParameterTypeError),
])
def test_bad_host_intervals_name_them(iv, exc):
    with pytest.raises(exc, match="intervals"):
        HostCosts(per_tensor=1e-6, per_bucket=0.0, intervals=iv)


def test_best_bucket_size_with_host_costs_and_first_bucket_at_cap(capsys):
    """Host-bound ResNet-50 with host costs: per-tensor buckets (0.1 MB) cost more than
    25 MB; a GPU-bound one (host at 20 %) hides them. With the first bucket at the cap,
    a candidate has one bucket fewer (or as many) as with DDP's 1 MiB first bucket."""
    from scalemodel.cli import main
    costs = HostCosts(per_tensor=40e-6, per_bucket=200e-6)
    cl = sm.ClusterProfile(host=costs, provenance={"source": "test"})
    bound = sm.best_bucket_size(_resnet(None), 8, 100e9, cluster=cl, candidates=[0.1, 25])
    assert bound.times[0] > bound.times[1]
    assert "look free" not in bound.message
    free = sm.best_bucket_size(_resnet(0.2), 8, 100e9, cluster=cl, candidates=[0.1, 25])
    assert free.times[0] - free.times[1] < bound.times[0] - bound.times[1]
    one = sm.best_bucket_size("resnet50", 8, 100e9, candidates=[5.0])
    cap = sm.best_bucket_size("resnet50", 8, 100e9, candidates=[5.0], first_bucket_at_cap=True)
    assert cap.n_buckets in (one.n_buckets - 1, one.n_buckets)
    assert cap.default_iteration_time == one.default_iteration_time
    with pytest.raises(ParameterTypeError, match="first_bucket_at_cap"):
        sm.best_bucket_size("resnet50", 8, 100e9, first_bucket_at_cap="yes")
    want = sm.best_bucket_size("resnet50", 8, 100e9, candidates=[5.0, 25.0],
                               first_bucket_at_cap=True)
    assert main(["best-bucket", "--model", "resnet50", "--n", "8", "--bw", "100Gbps",
                 "--candidates", "5,25", "--first-bucket-at-cap", "--json"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    assert (got["bucket_cap_mb"], got["n_buckets"]) == (want.bucket_cap_mb, want.n_buckets)
    assert got["iteration_time"] == pytest.approx(want.iteration_time, rel=1e-12)
    # 25 MB buckets of ResNet-50: 5 with DDP's 1 MiB first bucket, 4 with it at the cap
    from scalemodel.fusion import MiB, DDPBuckets
    p = sm.load_profile("resnet50")
    assert [len(sm.bucket_ready_times(p.tensor_bytes, p.tensor_ready, DDPBuckets(
        25 * MiB, first_bucket_bytes=first)).nbytes) for first in (MiB, 25 * MiB)] == [5, 4]


def test_best_bucket_size_keeps_the_default_when_no_cap_passed_beats_it():
    # a cap passed caps the first bucket too: when none beats DDP without the argument
    # (1 MiB first bucket), it recommended a cap 0.6 % slower, '-0.57 % faster'
    cl = sm.ClusterProfile(bucket_overhead=2.3e-4, provenance={"source": "test"})
    kw = dict(algorithm="ps", alpha=1.24e-4, cluster=cl, first_bucket_at_cap=True)
    res = sm.best_bucket_size("resnet101-h100", 3, "14Gbps", **kw)
    assert min(res.times) > res.default_iteration_time
    assert res.bucket_cap_mb == 25.0 and res.equivalent == (25.0, 25.0)
    assert res.iteration_time == res.default_iteration_time
    assert "bucket_cap_mb not passed" in res.message and "faster than" not in res.message
    assert res.n_buckets == len(sm.bucket_ready_times(
        *[getattr(sm.load_profile("resnet101-h100"), k) for k in ("tensor_bytes",
                                                                   "tensor_ready")]).nbytes)


def test_settings_say_which_host_time_was_used():
    cl = sm.ClusterProfile(host=COSTS, provenance={"source": "test"})
    unknown = sm.iteration_time("resnet50", 8, 100e9, cluster=cl).settings["wrapper_host"]
    assert "host-bound limit" in unknown["host_time_source"]
    known = sm.iteration_time(_resnet(0.5), 8, 100e9, cluster=cl).settings["wrapper_host"]
    assert known["host_time_source"] == "the profile's host_time"
    assert known["per_tensor"] == COSTS.per_tensor
    assert "wrapper_host" not in sm.iteration_time("resnet50", 8, 100e9).settings


def test_unmeasured_host_time_widens_the_interval_to_the_gpu_bound_end():
    """Without the profile's host_time the point is host-bound and the interval reaches
    the GPU-bound end (H = 0) at the costs over HOST_COST_TRANSFER; costs without
    intervals are still widened by that factor, to another model's spread."""
    cl = sm.ClusterProfile(host=COSTS, provenance={"source": "test"})
    slow, fast = COSTS.ends()
    f = HOST_COST_TRANSFER
    for name in ("per_tensor", "per_bucket", "device_time"):
        assert getattr(slow, name) == pytest.approx(getattr(COSTS, name) * f, rel=1e-12)
        assert getattr(fast, name) == pytest.approx(getattr(COSTS, name) / f, rel=1e-12)
    assert fast.gpu_bound_end and not slow.gpu_bound_end
    it = sm.iteration_time(_resnet(None), 8, 1e13, cluster=cl, fusion="none")
    lo, hi = it.total_interval
    assert lo < it.total < hi
    on = {c: attrs.evolve(cl, host=h) for c, h in (("slow", slow), ("fast", fast))}
    assert hi == pytest.approx(sm.iteration_time(_resnet(None), 8, 1e13, cluster=on["slow"],
                                                 fusion="none").total, rel=1e-12)
    free = sm.iteration_time(_resnet(1e-9), 8, 1e13, cluster=on["fast"], fusion="none")
    assert lo == pytest.approx(free.total, rel=1e-9)  # H = 0: the host hides all but g/f
    known = sm.iteration_time(_resnet(0.5), 8, 1e13, cluster=cl, fusion="none")
    k_lo, k_hi = known.total_interval
    assert k_lo < known.total < k_hi
    assert sm.load_cluster(sm.ClusterProfile.from_dict(cl.to_dict())).host == COSTS


def test_host_cost_transfer_is_the_spread_between_the_h200_models():
    """HOST_COST_TRANSFER is what its docstring says: the largest highest-to-lowest ratio
    of h_p, h_b and the seen g over the eight models of the committed H200 repeat sweep."""
    from scalemodel.calibrate.wrapper import WrapperMeasurement
    fits = [WrapperMeasurement.from_dict(json.loads(p.read_text())).host_fit()
            for p in sorted(WRAPPER_JSON.parent.glob("*.wrapper.json"))]
    assert len(fits) == 8
    ratios = []
    for key in ("per_tensor", "per_bucket"):
        v = [h[key] for h in fits]
        ratios.append(max(v) / min(v))
    g = [h["device_time"] for h in fits if h["device_time_seen"]]
    assert len(g) == 3
    ratios.append(max(g) / min(g))
    assert np.round(ratios, 2).tolist() == [1.75, 2.0, 1.83]
    assert HOST_COST_TRANSFER == pytest.approx(max(ratios), abs=0.005)


def test_fit_with_wrapper_on_sharded_runs_says_so_once():
    """Host costs are not modelled under sharding: fit_cluster says it once (not once
    per scenario the fit builds) and keeps them for unsharded questions."""
    runs = [dict(model="bert", n=16, bw=100e9, scaling_factor=0.8, sharding="zero3"),
            dict(model="bert", n=64, bw=25e9, scaling_factor=0.6, sharding="zero3")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = sm.fit_cluster(runs, wrapper=COSTS, gpus_per_node=8)
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "not modelled under sharding" in said[0], said
    assert fit.cluster.host == COSTS


def test_cli_iteration_says_the_ddp_host_work(tmp_path, capsys):
    from scalemodel.cli import main
    path = sm.save_cluster(sm.ClusterProfile(host=COSTS, provenance={"source": "test"}),
                           tmp_path / "c.json")
    assert main(["iteration", "--model", "resnet50", "--n", "16", "--bw", "25Gbps",
                 "--cluster", str(path)]) in (0, None)
    out = capsys.readouterr().out
    assert "DDP host work" in out and "host-bound limit" in out
    assert main(["iteration", "--model", "resnet50", "--n", "16", "--bw", "25Gbps"]) in (0, None)
    assert "DDP host work" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), True, "2"])
def test_ends_refuses_a_transfer_factor_below_one(bad):
    with pytest.raises(InvalidParameterError, match="transfer"):
        COSTS.ends(bad)
    assert COSTS.ends(1.0)[0] == COSTS  # 1: the intervals alone (none here)
