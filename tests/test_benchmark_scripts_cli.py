"""Every script of benchmarks/ answers --help without running (five had no parser: --help
ran the whole benchmark and rewrote its committed results), refuses an unknown option
with status 2, and ends on Ctrl-C with one line and status 130."""

import os
import subprocess
import sys

import pytest

from helpers_benchmarks import ROOT, load_benchmark

SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "_report")
ENV = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


def _run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=120, env=ENV, cwd=ROOT)


@pytest.mark.parametrize("stem", ["bench_parallel", "bench_plan", "bench_scaling",
                                  "bench_sharding", "validate_sharded"])
def test_help_runs_nothing_and_unknown_options_are_refused(stem):
    results = ROOT / "benchmarks" / "results" / f"{stem}.txt"
    before = results.stat().st_mtime_ns if results.exists() else None
    done = _run(f"benchmarks/{stem}.py", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr[-500:]
    assert "measured" not in done.stdout  # no figure was measured
    done = _run(f"benchmarks/{stem}.py", "--bogus")
    assert done.returncode == 2 and "unrecognized arguments: --bogus" in done.stderr
    assert (results.stat().st_mtime_ns if results.exists() else None) == before


def test_every_script_goes_through_the_shared_runner():
    for stem in SCRIPTS:
        text = (ROOT / "benchmarks" / f"{stem}.py").read_text()
        assert f'sys.exit(run_script(main, "{stem}"))' in text, stem


def test_ctrl_c_is_one_line_and_status_130(capsys):
    report = load_benchmark("_report", "_report_for_runner_test")

    def main():
        raise KeyboardInterrupt

    assert report.run_script(main, "bench_x") == 130
    err = capsys.readouterr().err
    assert err == "bench_x: interrupted (a results file is either the old one or complete)\n"
    assert report.run_script(lambda: 3, "bench_x") == 3


def test_help_descriptions_are_whole_paragraphs():
    report = load_benchmark("_report", "_report_for_paragraph_test")
    assert report.first_paragraph("One line\ncontinued.\n\nSecond paragraph.") == \
        "One line continued."


def test_shared_option_types_refuse_what_would_crash_later():
    """bench_fit --repeat 0 ended in UnboundLocalError, --sizes 0 in an error of
    fit_cluster; bench_trace --size-mb -1 ran a 1-copy trace."""
    import argparse

    report = load_benchmark("_report", "_report_for_types_test")
    assert report.positive((int,))("10,100") == [10, 100]
    assert report.positive(float)("2.5") == 2.5
    for kind, text in (((int,), "0"), ((int,), "x"), (int, "0"), (float, "-1"),
                       (float, "nan")):
        with pytest.raises(argparse.ArgumentTypeError):
            report.positive(kind)(text)


def test_an_empty_source_list_is_refused():
    done = _run("benchmarks/validate_transfer.py", "--no-write", "--sources", "")
    assert done.returncode == 2 and "names no source" in done.stderr
