"""The second published source of benchmarks/validate_sharded.py (ZeRO-3 at 100 to 800
Gbit/s per node): structural facts of the evaluation, not its error values."""

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def validate():
    spec = importlib.util.spec_from_file_location(
        "validate_sharded", ROOT / "benchmarks" / "validate_sharded.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def evaluated(validate):
    return validate.evaluate_network()


def test_every_row_with_a_stated_shape_is_predicted(validate, evaluated):
    results, stats = evaluated
    with open(validate.NETWORK_DATA) as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [r["row"] for r in results] == [int(r["row"]) for r in csv_rows]
    for r in results:
        if r["model"] in validate.ZEROPP_GPT:
            assert r["predicted"] is not None and r["predicted"] > 0
            assert 0 < r["efficiency"] <= 1 and 0 <= r["exposed"] < 1
        else:
            assert r["predicted"] is None
    predicted = [r for r in results if r["predicted"] is not None]
    assert stats["predicted_rows"] == sum(not r["calibration"] for r in predicted) > 0
    assert stats["recorded_rows"] == len(results) - len(predicted)


def test_parameter_counts_match_the_stated_sizes(validate, evaluated):
    results, _ = evaluated
    for r in results:
        if r["config"] is not None:
            stated = float(r["stated"].rstrip("B")) * 1e9
            assert r["config"].parameter_count == pytest.approx(stated, rel=0.05)
            assert r["config"].micro_batch * r["config"].seq == r["tokens"]


def test_one_calibration_row_per_series_at_its_highest_bandwidth(evaluated):
    results, stats = evaluated
    series = {}
    for r in results:
        if r["predicted"] is not None:
            series.setdefault((r["model"], r["tokens"]), []).append(r)
    assert len(series) == stats["series"]
    for members in series.values():
        cal = [r for r in members if r["calibration"]]
        assert len(cal) == 1
        assert cal[0]["gbps"] == max(r["gbps"] for r in members)
        assert len({r["efficiency"] for r in members}) == 1


def test_calibration_rows_are_reproduced_exactly(evaluated):
    results, _ = evaluated
    for r in results:
        if r["predicted"] is not None and r["calibration"]:
            assert r["predicted"] == pytest.approx(r["tflops"], rel=1e-6)
            assert r["serial"] == pytest.approx(r["tflops"], rel=1e-6)
            assert r["block"] == pytest.approx(r["tflops"], rel=1e-6)
            assert r["flat_error"] == 0


def test_fewer_links_never_predict_more_throughput(validate, evaluated):
    results, _ = evaluated
    cal = next(r for r in results if r["predicted"] is not None and r["calibration"])
    tflops = [validate.predicted_network_step(dict(cal, links=k), cal["efficiency"])[0]
              for k in (1, 2, 4, 8)]
    assert tflops == sorted(tflops)


def test_deepspeed_gathers_per_module(validate, evaluated):
    # the primary prediction wraps as DeepSpeed ZeRO-3 gathers (per submodule); the first
    # run's block wrapping stays beside it
    assert validate.ZEROPP_WRAP == "module"
    results, _ = evaluated
    held = [r for r in results if r["predicted"] is not None and not r["calibration"]]
    assert all(r["predicted"] != r["block"] for r in held)


def test_per_unit_cost_is_recovered_from_runs_generated_with_it(validate):
    """solve_unit_cost recovers a known per-unit cost and efficiency from the two 4-link
    runs generated with them (the published TFLOP/s replaced by the model's own)."""
    rows = [r for r in validate.network_rows() if r["model"] == "gpt-18b"]
    cal = sorted((r for r in rows if r["links"] == validate.UNIT_COST_LINKS),
                 key=lambda r: r["tokens"])
    cost, eff = 8e-3, 0.6
    cl = validate._unit_cluster(cost)
    made = [dict(r, tflops=validate.predicted_network_step(r, eff, cluster=cl)[0]) for r in cal]
    got_cost, got_eff = validate.solve_unit_cost(made[0], made[-1])
    assert got_cost == pytest.approx(cost, rel=1e-4)
    assert got_eff == pytest.approx(eff, rel=1e-4)
    # the cost is on the compute path: it lengthens the step even where the network is idle
    fast = dict(cal[-1], links=64)
    assert (validate.predicted_network_step(fast, eff, cluster=cl)[0]
            < validate.predicted_network_step(fast, eff)[0])


def test_per_unit_cost_diagnostic_reproduces_its_calibration_runs(validate):
    cost, eff, rows = validate.evaluate_unit_cost()
    assert cost > 0 and 0 < eff <= 1
    cal = [r for r in rows if r["calibration"]]
    assert {(r["tokens"], r["links"]) for r in cal} == {(1024, 4), (2048, 4)}
    for r in cal:
        assert r["predicted"] == pytest.approx(r["tflops"], rel=1e-6)
    for r in rows:
        assert r["time_error"] == pytest.approx(r["tflops"] / r["predicted"] - 1)
