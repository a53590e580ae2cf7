"""fit_cluster: recover known parameters from runs generated with them; one run; errors."""

import json
import math
import warnings

import attrs
import numpy as np
import pytest

import scalemodel as sm
from scalemodel.fitting import PRIORS, load_runs

TOPO = sm.Topology(gpus_per_node=8)


def _runs(cluster, grid, model="resnet50", fusion="horovod", algorithm="ring",
          uncertainty=1e-3, compute=True):
    """Runs measured on a known cluster: the model's own scaling factors."""
    p = sm.load_profile(model)
    runs = []
    if compute:
        runs.append(dict(model=model, n=1, bw=100e9, scaling_factor=1.0,
                         compute_time=p.forward_time + p.backward_time,
                         uncertainty=uncertainty))
    for n, bw in grid:
        sf = sm.scaling_factor(model, n, bw, fusion=fusion, algorithm=algorithm,
                               cluster=cluster)
        run = dict(model=model, n=n, bw=bw, scaling_factor=sf, uncertainty=uncertainty,
                   label=f"{n}@{bw / 1e9:g}")
        if compute:
            run["compute_time"] = cluster.compute_slowdown * (p.forward_time + p.backward_time)
        runs.append(run)
    return runs


@pytest.mark.slow
def test_recovers_known_parameters():
    truth = sm.ClusterProfile(topology=TOPO, ceiling=18e9, sync_overhead=0.015,
                              compute_slowdown=1.12, provenance={"source": "test"})
    grid = [(16, 100e9), (64, 100e9), (32, 10e9), (64, 25e9), (16, 1e9)]
    fit = sm.fit_cluster(_runs(truth, grid), fusion="horovod", gpus_per_node=8)
    assert set(fit.free) == {"ceiling", "sync_overhead"}
    par = fit.parameters
    assert par["compute_slowdown"].status == "measured"
    assert par["compute_slowdown"].value == pytest.approx(1.12, rel=1e-9)
    assert par["ceiling"].value == pytest.approx(18e9, rel=0.01)
    assert par["sync_overhead"].value == pytest.approx(0.015, rel=0.02)
    for name in ("ceiling", "sync_overhead"):
        lo, hi = par[name].interval
        assert lo <= getattr(truth, name) <= hi
    assert par["utilization"].status == "default" and par["utilization"].value == 1.0
    assert max(abs(r.error) for r in fit.residuals) < 2e-3
    # the fitted cluster predicts a configuration none of the runs had
    assert sm.scaling_factor("resnet50", 48, 40e9, fusion="horovod",
                             cluster=fit.cluster) == pytest.approx(
        sm.scaling_factor("resnet50", 48, 40e9, fusion="horovod", cluster=truth), rel=5e-3)


def test_explicit_parameters_and_per_run_fusion():
    truth = sm.ClusterProfile(topology=TOPO, utilization=0.7, collective_overhead=2e-3,
                              provenance={"source": "test"})
    runs = (_runs(truth, [(16, 10e9), (64, 10e9)], compute=False)
            + _runs(truth, [(32, 25e9), (64, 5e9)], model="bert", fusion="ddp",
                    compute=False))
    for r in runs[2:]:
        r["fusion"] = "ddp"
    fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=8,
                         fit=["utilization", "collective_overhead"])
    assert fit.free == ("utilization", "collective_overhead")
    assert fit.parameters["utilization"].value == pytest.approx(0.7, rel=0.01)
    assert fit.parameters["collective_overhead"].value == pytest.approx(2e-3, rel=0.03)


def test_one_run_fits_one_parameter_and_reproduces_it():
    runs = [{"model": "resnet50", "n": 64, "bw": "100Gbps", "scaling_factor": 0.8,
             "label": "big"}]
    fit = sm.fit_cluster(runs, fusion="horovod", gpus_per_node=8)
    assert len(fit.free) == 1
    assert abs(fit.residuals[0].error) < 0.01
    held = [p for p in fit.parameters.values() if p.status == "default"]
    assert len(held) == len(PRIORS) - 1
    assert all(p.source for p in fit.parameters.values())
    assert sm.scaling_factor("resnet50", 64, 100e9, fusion="horovod",
                             cluster=fit.cluster) == pytest.approx(0.8, rel=0.01)
    assert "fitted" in str(fit)


@pytest.mark.slow
def test_given_values_are_held_and_more_runs_free_more():
    truth = sm.ClusterProfile(topology=TOPO, ceiling=15e9, sync_overhead=0.02,
                              provenance={"source": "test"})
    one = sm.fit_cluster(_runs(truth, [(64, 100e9)], compute=False), fusion="horovod")
    many = sm.fit_cluster(_runs(truth, [(16, 100e9), (64, 100e9), (64, 10e9), (32, 40e9)],
                                compute=False), fusion="horovod")
    assert len(one.free) == 1 and len(many.free) >= 2
    held = sm.fit_cluster(_runs(truth, [(16, 100e9), (64, 100e9)], compute=False),
                          fusion="horovod", sync_overhead=0.02)
    assert held.parameters["sync_overhead"].status == "given"
    assert "sync_overhead" not in held.free
    assert held.parameters["ceiling"].value == pytest.approx(15e9, rel=0.02)


def test_iteration_times_and_csv(tmp_path):
    truth = sm.ClusterProfile(topology=TOPO, ceiling=20e9, provenance={"source": "test"})
    t1 = 0.08  # this cluster's own single-GPU time: 0.62x the profile's
    p = sm.load_profile("resnet50").scaled_to(t1)  # the runs' compute is the measured one
    rows = []
    for n, bw in [(16, 100e9), (64, 100e9)]:
        sf = sm.scaling_factor(p, n, bw, fusion="horovod", cluster=truth)
        rows.append({"model": "resnet50", "n": n, "bw": f"{bw / 1e9:g}Gbps",
                     "iteration_time": t1 / sf, "single_worker_time": t1})
    path = tmp_path / "runs.csv"
    with open(path, "w") as fh:
        fh.write("model,n,bw,iteration_time,single_worker_time\n")
        for r in rows:
            fh.write(f"{r['model']},{r['n']},{r['bw']},{r['iteration_time']},"
                     f"{r['single_worker_time']}\n")
    fit = sm.fit_cluster(path, fusion="horovod", fit=["ceiling"])
    assert fit.parameters["ceiling"].value == pytest.approx(20e9, rel=0.01)
    out = fit.save(tmp_path / "cluster.json")
    back = sm.load_cluster(out)
    assert back.topology == TOPO and back.ceiling == pytest.approx(fit.cluster.ceiling)
    assert "ceiling" in back.intervals
    assert json.loads(out.read_text())["provenance"]["runs"][0]["n"] == 16


@pytest.mark.parametrize("runs, match", [
    ([], "needs at least one run"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10, "scaling_factor": 75}], r"scaling_factor"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10, "scaling_factor": 0}], r"scaling_factor"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10, "iteration_time": 0.1,
       "single_worker_time": 0.2}], r"runs\[0\]\.iteration_time=0\.1"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10, "iteration_time": 0.01}],
     r"runs\[0\]\.iteration_time"),
    ([{"model": "resnet5O", "n": 16, "bw": 1e10, "scaling_factor": 0.5}],
     r"runs\[0\]\.model='resnet5O'"),
    ([{"model": "resnet50", "n": 16.5, "bw": 1e10, "scaling_factor": 0.5}], r"runs\[0\]\.n"),
    ([{"model": "resnet50", "n": 16, "bw": -1, "scaling_factor": 0.5}], r"runs\[0\]\.bw"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10}], "needs scaling_factor or iteration_time"),
    ([{"model": "resnet50", "n": 16, "bw": 1e10, "scaling_factor": 0.5, "sf": 1}],
     "unknown keys"),
    ([{"model": "resnet50", "n": 1, "bw": 1e10, "scaling_factor": 1.0}], "n > 1"),
    ("nope.csv", "no such file"),
])
def test_bad_runs_name_the_run_and_value(runs, match):
    with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError), match=match):
        sm.fit_cluster(runs)


def test_bad_keywords():
    run = [{"model": "resnet50", "n": 16, "bw": 1e10, "scaling_factor": 0.5}]
    with pytest.raises(sm.InvalidParameterError, match="unknown"):
        sm.fit_cluster(run, ceilling=1e9)
    with pytest.raises(sm.InvalidParameterError, match="fit"):
        sm.fit_cluster(run, fit=["speed"])
    with pytest.raises(sm.UnknownNameError, match="fusion"):
        sm.fit_cluster(run, fusion="horovd")
    with pytest.raises(sm.UnknownNameError, match=r"runs\[0\]\.fusion"):
        sm.fit_cluster([dict(run[0], fusion="hvd")])


def test_contradicting_runs_and_bounds_warn():
    # the same configuration measured twice with very different results
    runs = [{"model": "resnet50", "n": 64, "bw": 1e11, "scaling_factor": 0.9, "label": "a"},
            {"model": "resnet50", "n": 64, "bw": 1e11, "scaling_factor": 0.3, "label": "b"}]
    with pytest.warns(sm.CalibrationWarning, match="run 'a'|run 'b'"):
        sm.fit_cluster(runs, fusion="horovod", fit=["sync_overhead"])
    # a run the model cannot reach within the bounds of the one parameter allowed: a
    # compute slowdown of 5 where at most 3 is allowed
    runs = [{"model": "resnet50", "n": 64, "bw": 1e12, "scaling_factor": 0.2}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = sm.fit_cluster(runs, fusion="horovod", fit=["compute_slowdown"])
    text = " ".join(str(w.message) for w in caught)
    assert "bound" in text and fit.parameters["compute_slowdown"].at_bound
    assert fit.parameters["compute_slowdown"].value == pytest.approx(3.0, rel=1e-3)


def test_load_runs_converts_units_and_checks_types():
    runs = load_runs([{"model": "bert", "n": "16", "bw": "10Gbps", "scaling_factor": "0.5"}])
    assert runs[0].n == 16 and runs[0].bw == 10e9 and runs[0].scaling_factor == 0.5
    with pytest.raises(sm.ParameterTypeError, match=r"runs\[0\]"):
        load_runs(["resnet50"])
    with pytest.raises(sm.ParameterTypeError, match=r"runs\[0\]\.scaling_factor"):
        load_runs([{"model": "bert", "n": 16, "bw": 1e10, "scaling_factor": True}])
    assert math.isclose(load_runs([{"model": "bert", "n": 8, "bw": 1e10,
                                    "iteration_time": 1.0,
                                    "single_worker_time": 0.5}])[0].measured_sf, 0.5)
    np.testing.assert_equal(len(load_runs([{"model": "bert", "n": 8, "bw": 1e10,
                                            "scaling_factor": 0.5}] * 3)), 3)


def test_a_starting_cluster_keeps_its_topology_unless_told():
    start = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=4, intra_bw=1e12),
                              provenance={"source": "test"})
    runs = [{"model": "resnet50", "n": 16, "bw": 1e11, "scaling_factor": 0.8}]
    fit = sm.fit_cluster(runs, cluster=start, fusion="horovod")
    assert fit.cluster.topology.gpus_per_node == 4 and fit.cluster.topology.intra_bw == 1e12
    fit = sm.fit_cluster(runs, cluster=start, fusion="horovod", gpus_per_node=8)
    assert fit.cluster.topology.gpus_per_node == 8
    assert sm.fit_cluster(runs, fusion="horovod").cluster.topology.gpus_per_node == 8


def test_corners_move_the_intra_node_link_too():
    cl = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8, intra_bw=1e11),
                           intervals={"intra_bw": (5e10, 2e11), "intra_alpha": (0, 1e-5)},
                           provenance={"source": "test"})
    worst, best = cl.corners()
    assert worst.topology.intra_bw == 5e10 and worst.topology.intra_alpha == 1e-5
    assert best.topology.intra_bw == 2e11 and best.topology.intra_alpha == 0
    sf = [sm.scaling_factor("bert", 64, 4e11, cluster=c) for c in (worst, cl, best)]
    assert sf[0] <= sf[1] <= sf[2] and sf[0] < sf[2]


def test_a_fifo_for_runs_is_refused_not_waited_on(tmp_path):
    import os
    fifo = tmp_path / "runs.csv"
    os.mkfifo(fifo)
    with pytest.raises(sm.ProfileFormatError, match="FIFO"):
        sm.fit_cluster(fifo)


def test_more_runs_than_the_limit_are_refused(monkeypatch):
    import scalemodel.fitting as fitting
    monkeypatch.setattr(fitting, "MAX_RUNS", 3)
    run = {"model": "resnet50", "n": 16, "bw": 1e10, "scaling_factor": 0.5}
    with pytest.raises(sm.InvalidParameterError, match=r"runs=.*4 runs.*at most 3"):
        sm.fit_cluster([run] * 4)


def test_sharded_runs_may_name_their_wrapping_policy():
    # a sharded run's fusion is its wrapping (DeepSpeed ZeRO-3 gathers per module); the
    # names are checked under the run's sharding, not as DDP fusions
    truth = sm.ClusterProfile(name="truth", ceiling=60e9, provenance={"source": "test"})
    runs = []
    for n in (16, 64):
        it = sm.iteration_time("llama-2-7b", n, "100Gbps", sharding="zero3", fusion="module",
                               gpus_per_node=8, cluster=truth)
        runs.append({"model": "llama-2-7b", "n": n, "bw": "100Gbps", "sharding": "zero3",
                     "fusion": "module", "iteration_time": it.total})
    fit = sm.fit_cluster(runs, gpus_per_node=8, fusion="module", fit=["ceiling"])
    assert fit.parameters["ceiling"].value == pytest.approx(60e9, rel=0.02)


def test_runs_on_one_worker_fit_no_network_parameter():
    # DDP on one worker at several bucket sizes (the calibration's wrapper step): no
    # collective moves a byte, so the fit must not report a ceiling (it said 'fitted
    # ceiling ... 100 Gbit/s [6.607 Gbit/s, unbounded]', a no-op picked by tie order)
    t1 = sm.load_profile("resnet50").iteration_time
    runs = [dict(model="resnet50", n=1, bw=100e9, single_worker_time=t1, wrapped=True,
                 bucket_cap_mb=cap, iteration_time=t1 * (1 + 0.004 * k),
                 uncertainty=0.01, fusion="ddp")
            for k, cap in enumerate((1, 5, 25, 100))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = [sm.fit_cluster(runs, fusion="ddp"),  # and as --wrapper holds the two
                sm.fit_cluster(runs, fusion="ddp",
                               hold=("bucket_overhead", "iteration_overhead"))]
    for fit in fits:
        fitted = {k for k, p in fit.parameters.items() if p.status == "fitted"}
        assert fitted <= {"iteration_overhead", "bucket_overhead"}
        for alt in fit.cluster.alternatives or ():
            assert not set(alt["free"]) & {"ceiling", "utilization", "sync_overhead",
                                           "collective_overhead", "compute_slowdown"}
    assert fits[1].message.startswith("fitted nothing")


def test_a_transport_without_a_topology_keeps_every_worker_on_its_own_link():
    # a calibration whose ranks shared one node writes no topology: each rank measured
    # its own link. The API put the runs inside an invented 8-GPU node (V100 NVLink),
    # where the measured latency and bandwidth had no effect; the CLI took them flat
    transport = sm.ClusterProfile(alpha=2e-4, ceiling=2e9, provenance={
        "source": "python -m scalemodel.calibrate (every rank is on one node)"})
    truth = attrs.evolve(transport, compute_slowdown=1.05)
    runs = _runs(truth, [(2, 10e9), (4, 10e9)], fusion="ddp", uncertainty=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, transport=transport, fusion="ddp")
    assert fit.cluster.topology is None
    assert fit.cluster.ceiling == transport.ceiling and fit.cluster.alpha == transport.alpha
    for r in runs[1:]:  # the measured transport is what the runs' time rests on
        assert sm.scaling_factor("resnet50", r["n"], r["bw"], fusion="ddp",
                                 cluster=fit.cluster) == pytest.approx(r["scaling_factor"],
                                                                       rel=0.02)


def test_a_calibrated_cluster_as_transport_gives_only_its_transport():
    # python -m scalemodel.calibrate stores its fitted host overhead as the reduction's
    # per-byte cost (extra["host_overhead"]) and the records of its overlap and slowdown
    # fits: as transport= only latency, bandwidth and topology stay (transport_only);
    # the cost was kept while the overlap was reset, and the stale records were copied
    calibrated = sm.ClusterProfile.from_dict({
        "format": "scalemodel-cluster", "format_version": 1, "name": "calibrated",
        "alpha": 2e-4, "ceiling": 2e9, "overlap": 0.0,
        "reduction": {"kind": "linear", "latency": 0.0, "gamma": 1.5e-9},
        "provenance": {"source": "python -m scalemodel.calibrate"},
        "host_overhead": {"gamma": 1.5e-9}, "overlap_fit": {"overlap": 0.0},
        "compute_slowdown_fit": {"compute_slowdown": 1.3}})
    bare = sm.ClusterProfile(alpha=2e-4, ceiling=2e9, provenance={"source": "test"})
    runs = _runs(attrs.evolve(bare, compute_slowdown=1.05), [(2, 10e9), (4, 10e9)],
                 fusion="ddp", uncertainty=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, transport=calibrated, fusion="ddp")
    assert fit.cluster.reduction is None
    assert fit.cluster.overlap == 1.0
    assert not {"host_overhead", "overlap_fit", "compute_slowdown_fit"} & set(
        fit.cluster.to_dict())
