"""fit_cluster reports its progress; ``scalemodel fit`` prints it on a long fit."""

import warnings

import scalemodel as sm
from scalemodel.cli import _fit_progress


def _runs():
    truth = sm.ClusterProfile(compute_slowdown=1.05, ceiling=20e9,
                              provenance={"source": "truth"})
    return [dict(model="resnet50", n=n, bw=bw,
                 iteration_time=sm.iteration_time("resnet50", n, bw, cluster=truth).total)
            for n in (8, 32) for bw in (10e9, 25e9)]


def test_progress_is_called_with_each_explanation_tried():
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(_runs(), progress=lambda done, total: calls.append((done, total)))
    assert calls, "no progress reported"
    total = calls[0][1]
    assert [d for d, _ in calls] == list(range(1, total)) and {t for _, t in calls} == {total}
    assert fit.free  # and the fit went on to its answer


def test_cli_progress_prints_after_its_delay(capsys):
    quiet = _fit_progress(after=3600.0)
    quiet(1, 5)
    assert capsys.readouterr().err == ""
    loud = _fit_progress(after=0.0)
    loud(2, 5)
    err = capsys.readouterr().err
    assert "fitting: 2 of 5 explanations tried" in err
