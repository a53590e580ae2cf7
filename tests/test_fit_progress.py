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
    assert [d for d, _ in calls] == list(range(1, total + 1)) and \
        {t for _, t in calls} == {total}  # (the last: all tried)
    assert fit.free  # and the fit went on to its answer


def test_cli_progress_prints_after_its_delay(capsys):
    quiet = _fit_progress(after=3600.0)
    quiet(1, 5)
    assert capsys.readouterr().err == ""
    loud = _fit_progress(after=0.0)
    loud(2, 5)
    err = capsys.readouterr().err
    assert "fitting: 2 of 5 explanations tried" in err
    loud(5, 5)  # a count was shown: the end is said, off a terminal too
    assert "fitting: 5 of 5 explanations tried" in capsys.readouterr().err
    quiet(5, 5)  # none shown: a short fit stays quiet
    assert capsys.readouterr().err == ""


def test_a_long_run_list_prints_its_largest_misses_and_how_many_more(tmp_path, capsys):
    """More runs than FIT_TABLE_ROWS: the table lists the largest misses (the one run 10 %
    off among them) and says how many more there are and within what; --json keeps all."""
    import json

    from scalemodel.cli import FIT_TABLE_ROWS, main

    truth = sm.ClusterProfile(compute_slowdown=1.05, provenance={"source": "truth"})
    lines = ["model,n,bw,iteration_time,label"]
    k = 0
    for n in (8, 16, 32, 64):
        for bw in (5e9, 10e9, 25e9, 40e9, 100e9):
            for rep in range(2):
                t = sm.iteration_time("resnet50", n, bw, cluster=truth,
                                      gpus_per_node=8).total * (1.10 if k == 7 else 1.0)
                lines.append(f"resnet50,{n},{bw:g},{t!r},r{k}")
                k += 1
    assert k > FIT_TABLE_ROWS
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    assert main(["fit", str(path), "--fit", "compute_slowdown"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("r") and "ms" in ln]
    assert len(rows) == FIT_TABLE_ROWS and any(ln.split()[0] == "r7" for ln in rows)
    assert f"({k - FIT_TABLE_ROWS} more runs, each within" in out
    assert main(["fit", str(path), "--fit", "compute_slowdown", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["residuals"]) == k
