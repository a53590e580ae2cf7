"""The grace-tf codec table (scalemodel/data/codec/grace-tf-v100.json): measured from ONE
worker count of the GRACE data by calibration/grace_tf_codec.py, reproducible, with its
provenance, used for grace-tf plans only, and its rows never scored by the validation."""

import hashlib
import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel.codec_costs import codec_tables, default_costs

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table():
    return json.loads(resources.files("scalemodel").joinpath(
        "data", "codec", "grace-tf-v100.json").read_text())


@pytest.fixture(scope="module")
def script():
    mod = _load("grace_tf_codec", ROOT / "calibration" / "grace_tf_codec.py")
    if not mod.DATA.exists():
        pytest.skip("the GRACE data file is not there")
    return mod


def test_provenance_names_the_data_the_rows_and_one_worker_count(table, script):
    prov = table["provenance"]
    assert prov["implementation"] == "grace-tf" and prov["gpu"] == "v100-sxm2-16gb"
    assert "sands-lab/grace-data@41915bb" in prov["source"]
    digest = hashlib.sha256(script.DATA.read_bytes()).hexdigest()
    assert digest in prov["source"]
    assert prov["workers"] == 8 and all(" n=8 mpi" in r for r in prov["rows"])
    assert len(prov["rows"]) == 1 + len(script.FAMILY_RUNS)
    assert set(prov["wandb_runs"]) == set(prov["rows"])
    assert set(table["codec_costs"]) == set(script.FAMILY_RUNS)


def test_the_script_reproduces_the_shipped_table(table, script):
    fresh, _ = script.measure(script.DATA, 8)
    for family, cost in table["codec_costs"].items():
        for key, value in cost.items():
            assert fresh["codec_costs"][family][key] == pytest.approx(value, rel=1e-6), \
                (family, key)
    assert fresh["provenance"]["rows"] == table["provenance"]["rows"]


def test_levels_are_grace_tf_only_and_other_families_fall_back(table):
    grace = codec_tables()["grace-tf-v100"]
    assert grace.implementation == "grace-tf"
    costs, used, factor = default_costs("v100", "grace-tf")
    assert used.name == "grace-tf-v100" and factor == 1.0
    assert costs["topk"].encode == pytest.approx(table["codec_costs"]["topk"]["encode"])
    # a family the table lacks: the reference kernels scaled to the V100, as without it
    ref, _, _ = default_costs("v100", None)
    assert costs["fp16"].encode == ref["fp16"].encode
    assert ref["topk"].encode < costs["topk"].encode  # TF's top-k is far slower
    # grace-torch and pytorch keep the reference table
    assert default_costs("v100", "grace-torch")[1].name == "h100"
    # on an H100 the levels scale with the HBM bandwidth, the launch is kept
    h, _, f = default_costs("h100-sxm", "grace-tf")
    assert f == pytest.approx(900 / 3350)
    assert h["topk"].encode == pytest.approx(costs["topk"].encode * f)
    assert h["topk"].launch == costs["topk"].launch


def test_validation_does_not_score_the_rows_the_levels_came_from(table):
    vc = _load("validate_compression", ROOT / "benchmarks" / "validate_compression.py")
    rec = vc.run(subset=lambda c: c["method"] in {"none", "topk", "signsgd", "8bit"}
                 and c["n"] in (1, 4, 8))
    used = set(table["provenance"]["rows"])
    marked = {r["config"] for r in rec["rows"] if r["levels_row"]}
    assert marked and marked <= used
    scored = rec["summary"]["uncal_grace/mpi"]["rows"]
    assert scored == sum(1 for r in rec["rows"] if not r["levels_row"]
                         and r["backend"] == "mpi")
    # the strict one-run line starts from the reference kernels, not from the levels
    assert set(rec["codec_costs"]["one_run_ref"]) == {"topk"}
    assert set(rec["codec_costs"]["one_run"]) == {"grace-tf/topk"}
    ref = rec["codec_costs"]["one_run_ref"]["topk"]["encode"]
    assert ref == pytest.approx(table["codec_costs"]["topk"]["encode"], rel=1e-6)


def test_the_plan_says_which_families_come_from_which_table():
    note = sm.plan_compression("resnet50", "10Gbps", n=8, implementation="grace-tf").codec_note
    assert "grace-tf-v100.json" in note
    assert "fp16: the reference kernels (scalemodel/data/codec/h100.json" in note
    only = sm.plan_compression("resnet50", "10Gbps", n=8, implementation="grace-tf",
                               compressors=["topk"]).codec_note
    assert "grace-tf-v100.json" in only and "h100.json" not in only
