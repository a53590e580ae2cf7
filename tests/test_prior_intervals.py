"""Intervals over what the runs cannot tell (issue 17): an achieved bandwidth the runs
did not see takes its network prior's range (fitting._prior_intervals)."""

import json
import warnings

import pytest

import scalemodel as sm
from scalemodel import fitting
from scalemodel.fit_priors import NETWORKS

TRUE = sm.ClusterProfile(utilization=0.8)  # the cluster that "ran" the runs
KW = dict(fusion="horovod", gpus_per_node=8)


def _sf(n, bw):
    return sm.scaling_factor("resnet50", n, bw, cluster=TRUE, **KW)


def _runs(rate):
    bw = {100e9: "100Gbps", 1e9: "1Gbps"}[rate]
    return [{"model": "resnet50", "n": n, "bw": bw, "scaling_factor": _sf(n, rate)}
            for n in (16, 32)]


def _fit(runs, network):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.exceptions.CalibrationWarning)
        return sm.fit_cluster(runs, network=network, **KW)


def _inside(fit, n, bw):
    lo, hi = sm.iteration_time("resnet50", n, bw, cluster=fit.cluster,
                               **KW).scaling_factor_interval
    return lo <= _sf(n, bw) <= hi


def test_compute_bound_runs_take_the_prior_range():
    assert _sf(16, 100e9) > 0.99  # compute-bound: the runs cannot see utilization
    fit = _fit(_runs(100e9), "nccl-socket")
    p = fit.parameters["utilization"]
    assert p.status == "prior" and p.value == 1.0
    lo, hi = p.interval
    # central 95 % of the prior, ln(1/u) ~ N(ln(1/0.9), ln(1/0.8)), clipped at u = 1
    net = NETWORKS["nccl-socket"]
    assert lo == pytest.approx(net.utilization * 0.8 ** 1.959964, rel=1e-6)
    assert hi == 1.0
    assert fit.cluster.intervals["utilization"] == pytest.approx((lo, hi))
    assert "from the network prior, not seen by the runs" in fit.message
    # at 1 Gbit/s, where utilization decides the answer, the truth (0.8) is inside
    assert _sf(16, 1e9) < 0.1
    assert _inside(fit, 16, 1e9) and _inside(fit, 32, 1e9)


def test_without_network_the_interval_misses_the_truth():
    fit = _fit(_runs(100e9), None)
    assert fit.parameters["utilization"].status == "default"
    assert "utilization" not in fit.cluster.intervals
    assert not _inside(fit, 16, 1e9)


def test_runs_that_see_the_network_get_no_prior_interval_of_its_bandwidth():
    fit = _fit(_runs(1e9), "nccl-socket")
    for k in ("utilization", "ceiling"):
        assert fit.parameters[k].status != "prior"
    # (NCCL's latency, which runs at 16 and 32 workers do not see, takes its range:
    # test_an_nccl_network_spans_the_latency_the_runs_cannot_see)
    assert [k for k, p in fit.parameters.items() if p.status == "prior"] == ["alpha"]


def test_prior_status_in_json(tmp_path):
    fit = _fit(_runs(100e9), "nccl-socket")
    data = json.loads(json.dumps(fit.to_dict()))
    assert data["parameters"]["utilization"]["status"] == "prior"
    path = tmp_path / "c.json"
    fit.save(path)
    back = sm.load_cluster(path)
    assert back.intervals["utilization"] == pytest.approx(fit.cluster.intervals["utilization"])
    assert back.provenance["prior_intervals"] == ["utilization", "alpha"]


def test_answer_says_what_the_runs_did_not_see():
    from scalemodel.intervals import scaling_factor_interval
    fit = _fit(_runs(100e9), "nccl-socket")
    iv = scaling_factor_interval("resnet50", 16, 1e9, cluster=fit.cluster, **KW)
    assert iv.unseen == ("utilization", "alpha")
    assert "network prior's range of utilization" in iv.describe(lambda v: f"{v:.3f}")
    plain = _fit(_runs(100e9), None)
    iv = scaling_factor_interval("resnet50", 16, 1e9, cluster=plain.cluster, **KW)
    assert iv.unseen == () and "network prior" not in iv.describe(lambda v: f"{v:.3f}")


def test_rule_threshold_is_the_runs_noise():
    # a run at 10 Gbit/s moves by more than its uncertainty over the range: seen
    runs = _runs(100e9) + [{"model": "resnet50", "n": 16, "bw": "10Gbps",
                            "scaling_factor": _sf(16, 10e9)}]
    fit = _fit(runs, "nccl-socket")
    assert fit.parameters["utilization"].status != "prior"
    assert fitting.UNSEEN == 1.0


def _latency_runs(truth, network):
    """ResNet-50 at 16 and 64 GPUs of ``truth`` (DDP, 8 GPUs and NICs per node), fitted with
    ``network``."""
    kw = dict(gpus_per_node=8, nics_per_node=8)
    runs = [{"model": "resnet50", "n": n, "bw": "100Gbps",
             "scaling_factor": float(sm.scaling_factor("resnet50", n, 100e9, cluster=truth,
                                                       **kw))} for n in (16, 64)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.exceptions.CalibrationWarning)
        return sm.fit_cluster(runs, network=network, **kw)


def test_an_nccl_network_spans_the_latency_the_runs_cannot_see():
    """alpha held at 0, its interval [0, NCCL's per-hop 14 us] where the runs do not see
    it; a truth with NCCL's latency is then inside at 1024 GPUs, outside without it."""
    from scalemodel.fit_priors import NCCL_HOP_LATENCY

    truth = sm.ClusterProfile(alpha=NCCL_HOP_LATENCY["net"],
                              topology=sm.Topology(gpus_per_node=8, nics_per_node=8))
    fit = _latency_runs(truth, "nccl-ib")
    p = fit.parameters["alpha"]
    assert p.status == "prior" and p.value == 0.0
    assert p.interval == (0.0, NCCL_HOP_LATENCY["net"])
    assert fit.cluster.intervals["alpha"] == (0.0, NCCL_HOP_LATENCY["net"])
    assert "alpha" in fit.cluster.provenance["prior_intervals"]
    measured = sm.iteration_time("bert-large", 1024, 100e9, cluster=truth,
                                 gpus_per_node=8, nics_per_node=8).total
    lo, hi = sm.iteration_time("bert-large", 1024, 100e9, cluster=fit.cluster,
                               gpus_per_node=8, nics_per_node=8).total_interval
    assert lo <= measured <= hi
    # the same fit without the latency's range misses the truth: the range is what covers
    import attrs
    bare = attrs.evolve(fit.cluster, intervals={k: v for k, v in fit.cluster.intervals.items()
                                                if k != "alpha"})
    lo, hi = sm.iteration_time("bert-large", 1024, 100e9, cluster=bare, gpus_per_node=8,
                               nics_per_node=8).total_interval
    assert not lo <= measured <= hi
    for other in (None, "gloo"):  # no NCCL: nothing said of its latency
        fit = _latency_runs(truth, other)
        assert fit.parameters["alpha"].status == "default"
        assert "alpha" not in fit.cluster.intervals
