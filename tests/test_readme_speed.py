"""The README's speed figures are the committed benchmark output the guide shows
(``benchmarks/results/bench_scaling.txt``, included by docs/validation.rst): a re-run of
the benchmark that is not copied into the README fails here, not in a reader's hands."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_quotes_the_committed_speed_run():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Speed"):]
    block = section.split("```\n")[1]  # the first fenced block of the section
    quoted = [line for line in block.splitlines() if line.strip()]
    results = (ROOT / "benchmarks" / "results" / "bench_scaling.txt").read_text()
    figures = [line for line in results.splitlines()
               if line.strip() and not line.startswith(("measured ", "model "))]
    assert quoted == figures
