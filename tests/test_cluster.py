"""Cluster profiles: calibrated latency and achieved bandwidth."""

import json
import math

import attrs
import numpy as np
import pytest

import scalemodel as sm


def test_constant_utilization_equals_keyword(synthetic):
    cl = sm.ClusterProfile(alpha=2e-5, utilization=0.6, provenance={"source": "test"})
    bw = np.logspace(9, 11, 7)
    np.testing.assert_allclose(
        sm.scaling_factor(synthetic, 32, bw, cluster=cl),
        sm.scaling_factor(synthetic, 32, bw, utilization=0.6, alpha=2e-5), rtol=1e-14)
    # a user utilization multiplies the cluster's
    assert sm.scaling_factor(synthetic, 32, 1e10, cluster=cl, utilization=0.5) == pytest.approx(
        sm.scaling_factor(synthetic, 32, 1e10, utilization=0.3, alpha=2e-5), rel=1e-14)


def test_ceiling_stops_scaling():
    cl = sm.ClusterProfile(utilization=1.0, ceiling=25e9, provenance={"source": "test"})
    sf = sm.scaling_factor("resnet50", 64, [25e9, 40e9, 100e9], cluster=cl, fusion="horovod")
    assert sf[0] == sf[1] == sf[2]
    assert sf[0] == sm.scaling_factor("resnet50", 64, 25e9, fusion="horovod")
    res = sm.required_bandwidth("vgg16", n=64, target=0.99, cluster=cl, fusion="horovod")
    assert not res.feasible and math.isinf(res.bw) and "ceiling" in res.message


def test_required_bandwidth_inverts_a_utilization_table():
    cl = sm.ClusterProfile(table_line_rate=[1e9, 10e9, 100e9],
                           table_utilization=[0.95, 0.8, 0.5], provenance={"source": "test"})
    res = sm.required_bandwidth("resnet50", n=64, target=0.9, cluster=cl, fusion="horovod")
    assert res.feasible
    assert sm.scaling_factor("resnet50", 64, res.bw, cluster=cl,
                             fusion="horovod") == pytest.approx(0.9, rel=1e-9)
    assert sm.scaling_factor("resnet50", 64, res.bw * 0.999, cluster=cl, fusion="horovod") < 0.9


def test_cluster_file_round_trip_and_errors(tmp_path):
    cl = sm.ClusterProfile(name="c", alpha=1e-5, utilization=0.7, ceiling=30e9,
                           intervals={"alpha": (0.9e-5, 1.1e-5)},
                           provenance={"source": "test"}, extra={"fits": {"r2": 0.99}})
    path = sm.save_cluster(cl, tmp_path / "c.json")
    back = sm.load_cluster(path)
    assert back.alpha == 1e-5 and back.ceiling == 30e9 and back.extra["fits"]["r2"] == 0.99
    assert sm.scaling_factor("bert", 16, 1e10, cluster=str(path)) == sm.scaling_factor(
        "bert", 16, 1e10, cluster=cl)
    # an explicit keyword overrides the cluster's value, as every topology keyword does
    assert sm.scaling_factor("bert", 16, 1e10, cluster=cl, alpha=1e-6) == sm.scaling_factor(
        "bert", 16, 1e10, cluster=attrs.evolve(cl, alpha=1e-6))
    assert sm.scaling_factor("bert", 16, 1e10, cluster=cl, alpha=None) == sm.scaling_factor(
        "bert", 16, 1e10, cluster=cl)
    with pytest.raises(sm.InvalidParameterError, match="cluster='nope.json'"):
        sm.scaling_factor("bert", 16, 1e10, cluster="nope.json")
    data = cl.to_dict()
    data["utilization"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(sm.ProfileFormatError, match="utilization"):
        sm.load_cluster(tmp_path / "bad.json")
    (tmp_path / "cut.json").write_text(json.dumps(cl.to_dict())[:40])
    with pytest.raises(sm.ProfileFormatError, match="truncated"):
        sm.load_cluster(tmp_path / "cut.json")


def test_utilization_table_of_the_wrong_type_names_the_field():
    data = sm.ClusterProfile(provenance={"source": "test"}).to_dict()
    for bad in (5, [1, 2], {"line_rate": [1e9]}):
        data["utilization_table"] = bad
        with pytest.raises(sm.ProfileFormatError, match="utilization_table"):
            sm.ClusterProfile.from_dict(data)


def test_straggler_spread_and_scores_out_of_range_name_the_field():
    """A spread above 1 made every time inf and the scaling factor NaN, printed with rc 0;
    a score too large for a float crashed the reader with OverflowError."""
    with pytest.raises(sm.InvalidParameterError, match=r"straggler_spread=1\.5.*\[0, 1\]"):
        sm.ClusterProfile(straggler_spread=1.5)
    assert sm.ClusterProfile(straggler_spread=1.0).straggler_spread == 1.0
    base = sm.ClusterProfile(straggler_spread=0.05, intervals={"straggler_spread": (0.04, 0.06)},
                             alternatives=[{"free": ["straggler_spread"], "score": 0.0,
                                            "values": {"straggler_spread": 0.05}}],
                             provenance={"source": "test"}).to_dict()
    for edit, field in (
            (lambda d: d.update(straggler_spread=1e308), r"'straggler_spread'"),
            (lambda d: d["intervals"].update(straggler_spread=[0.0, 1e308]),
             r"intervals\['straggler_spread'\]\[1\]"),
            (lambda d: d["alternatives"][0]["values"].update(straggler_spread=2.0),
             r"alternatives\[0\]\.values\['straggler_spread'\]"),
            (lambda d: d["alternatives"][0].update(score=10 ** 400),
             r"alternatives\[0\]\.score")):
        data = json.loads(json.dumps(base))
        edit(data)
        with pytest.raises(sm.ProfileFormatError, match=field):
            sm.ClusterProfile.from_dict(data)
