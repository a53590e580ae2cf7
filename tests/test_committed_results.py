"""Every validation script, run as committed (``--no-write``: nothing is rewritten),
prints its committed results file line for line, run times aside: a change of the model
that moves a validation figure, or stops a script, fails here rather than leaving a stale
file behind (validate_parallel stopped on an error for a session while its committed
results still showed the figures from before)."""

import os
import re
import subprocess
import sys

import pytest

from helpers_benchmarks import ROOT

SCRIPTS = [("validate_parallel", []), ("validate_transfer", []), ("validate_large_n", []),
           ("validate_llm", []), ("validate_framework", []), ("validate_compression", []),
           ("validate_blocks", []), ("validate_recompute", []),
           ("validate_published", ["--all-pairs"])]
TIMING = re.compile(r"^\(\d[\d.]* s; scalemodel |^\s*fitted in \d[\d.]* s: ")
"""Lines that hold a run time: the closing line and validate_transfer's fit times."""


def _lines(text):
    return [ln for ln in text.splitlines() if not TIMING.search(ln)]


def test_every_validation_script_is_checked():
    stems = {p.stem for p in (ROOT / "benchmarks").glob("validate_*.py")}
    assert stems - {s for s, _ in SCRIPTS} == {"validate_sharded"}  # (writes no file)


@pytest.mark.slow
@pytest.mark.parametrize("stem, args", SCRIPTS, ids=[s for s, _ in SCRIPTS])
def test_the_committed_results_are_what_the_script_prints(stem, args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, f"benchmarks/{stem}.py", *args, "--no-write"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    committed = (ROOT / "benchmarks" / "results" / f"{stem}.txt").read_text()
    got, want = _lines(done.stdout), _lines(committed)
    diff = [f"line {i}: printed {a!r}, committed {b!r}"
            for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not diff and len(got) == len(want), "\n".join(diff[:5]) or (
        f"printed {len(got)} lines, committed {len(want)}")
