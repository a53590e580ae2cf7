"""Session 30's findings, each a test that fails on the code before: a calibration's
compute spans from one rank (not the largest over ranks iteration by iteration), a clear
error for a slowdown no cluster holds, and file paths shown whole in error messages."""

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.calibrate.scaling import DDPMeasurement, _with_slowest_compute
from scalemodel.exceptions import PATH_LIMIT, CalibrationError, InvalidParameterError


def _rank(bwd, local_bwd=(3e-4, 3e-4, 3e-4)):
    return {"ddp": np.array([2e-3, 2e-3, 2e-3]), "local": np.array([1e-3, 1e-3, 1e-3]),
            "bwd": np.asarray(bwd), "local_bwd": np.asarray(local_bwd),
            "fwd": np.full(3, 1e-4), "local_fwd": np.full(3, 1e-4)}


def _measurement(rows):
    return DDPMeasurement(seconds=rows["ddp"], local_seconds=rows["local"], world_size=2,
                          batch_size=2, bucket_cap_mb=25.0, backend="gloo",
                          backward=rows["bwd"], local_backward=rows["local_bwd"],
                          forward=rows["fwd"], local_forward=rows["local_fwd"],
                          timer="time.perf_counter")


def test_one_stall_per_rank_does_not_make_the_slowdown():
    """A busy machine stalled rank 0 in iteration 3 and rank 1 in iteration 2 (80 ms
    against 0.4 ms): the largest over the ranks per iteration had two stalls in three and
    a median slowdown of ~200, which the cluster refused (compute_slowdown=532 under
    pytest-xdist); each rank's own iterations have one, and the median outvotes it."""
    ranks = [_rank([4e-4, 4e-4, 80e-3]), _rank([4e-4, 80e-3, 4e-4])]
    mixed = {k: np.maximum(ranks[0][k], ranks[1][k]) for k in ranks[0]}
    assert _measurement(mixed).compute_slowdown().measured > 100  # (the old way)
    rows = _with_slowest_compute(mixed, ranks)
    est = _measurement(rows).compute_slowdown()
    assert est.measured == pytest.approx((4e-4 + 1e-4) / (3e-4 + 1e-4))
    # iteration times stay the slowest rank's, iteration by iteration (all wait for it)
    assert rows["ddp"] is mixed["ddp"] and rows["local"] is mixed["local"]
    # the rank whose compute is the most slowed is the one taken
    slow = _rank([9e-4, 9e-4, 9e-4])
    assert _with_slowest_compute(mixed, [ranks[0], slow])["bwd"] is slow["bwd"]


def test_a_slowdown_no_cluster_holds_is_a_clear_error():
    from scalemodel.calibrate.__main__ import _fit_terms

    stalled = _rank([80e-3, 80e-3, 80e-3])
    with pytest.raises(CalibrationError, match="computed 200 times slower.*idle machine "
                       "with more --iterations"):
        _fit_terms(sm.load_profile("resnet50"), _measurement(stalled), "all", 2, 10e9,
                   sm.ClusterProfile(), False, {}, dict(algorithm="ring", fusion="ddp"))


def test_a_long_path_is_named_whole_in_an_error(tmp_path):
    """Under pytest-xdist's longer temporary paths the file's name was cut off
    ('.../log.... is invalid'): the name is what the user needs."""
    deep = tmp_path / ("d" * 60) / "e" / "nccl-tests-of-the-cluster.txt"  # (no such file)
    assert len(repr(str(deep))) > 80
    runs = [{"model": "resnet50", "n": 16, "bw": "100Gbps", "scaling_factor": 0.8}]
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(runs, transport=str(deep))
    assert str(deep) in str(err.value)
    # a text past the limit keeps its start and its end
    long = "x" * 1000 + "/name.txt"
    with pytest.raises(InvalidParameterError) as err:
        raise InvalidParameterError("transport", long, "is missing")
    shown = str(err.value).split(" is invalid")[0]
    assert "name.txt" in shown and len(shown) < PATH_LIMIT + 20
