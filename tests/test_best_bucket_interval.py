"""best_bucket_size on a fitted cluster (issue 17 item 2: every answer on a fitted cluster
carries an interval): the best cap under each of the fit's corners and explanations,
checked against the best cap computed on each corner cluster directly."""

import warnings

import pytest

import scalemodel as sm
from scalemodel.intervals import corner_clusters
from test_fitting import _runs


@pytest.fixture(scope="module")
def fitted():
    truth = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8), ceiling=12e9,
                              alpha=20e-6, bucket_overhead=1e-4,
                              provenance={"source": "test"})
    runs = _runs(truth, [(16, 25e9), (64, 25e9), (32, 100e9)], fusion="ddp",
                 uncertainty=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster(runs, fusion="ddp", gpus_per_node=8,
                              network="nccl-ib").cluster


def test_the_interval_spans_the_best_cap_of_every_corner(fitted):
    res = sm.best_bucket_size("bert", 64, "25Gbps", cluster=fitted)
    direct = []
    for _, _, ends in corner_clusters(fitted):
        direct += [sm.best_bucket_size("bert", 64, "25Gbps", cluster=e).bucket_cap_mb
                   for e in ends]
    assert res.interval == (min(direct + [res.bucket_cap_mb]),
                            max(direct + [res.bucket_cap_mb]))
    assert res.interval[0] <= res.bucket_cap_mb <= res.interval[1]
    assert res.interval[0] < res.interval[1]  # the fit cannot tell: said
    assert f"between {res.interval[0]:g} and {res.interval[1]:g} MiB" in res.message


def test_no_interval_without_a_fit():
    plain = sm.ClusterProfile(bucket_overhead=80e-6, provenance={"source": "test"})
    assert sm.best_bucket_size("resnet50", 16, "100Gbps", cluster=plain).interval is None
    assert sm.best_bucket_size("resnet50", 16, "100Gbps").interval is None


def test_the_corners_do_not_repeat_the_warnings(fitted):
    import warnings as w
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        sm.best_bucket_size("bert", 64, "25Gbps", cluster=fitted, codec_cost=1e-9)
    said = [str(c.message) for c in caught]
    assert said and len(said) == len(set(said))
