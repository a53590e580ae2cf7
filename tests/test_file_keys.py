"""Keys of profile and cluster files: a misspelt key is refused with the key it misspells,
a key the format does not define is refused (workload profiles) or kept with a warning that
nothing reads it (cluster files, which keep foreign keys in ``extra``); the keys the
library's own fits and calibration write pass without a word."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel.cluster import WRITTEN_EXTRA_KEYS

ROOT = Path(__file__).resolve().parents[1]


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def profile_dict():
    return sm.load_profile("resnet50").to_dict()


@pytest.fixture
def cluster_dict():
    return sm.ClusterProfile(ceiling=21e9, sync_overhead=0.01,
                             provenance={"source": "test"}).to_dict()


@pytest.mark.parametrize("bad, meant", [("forwrd_time", "forward_time"),
                                        ("update_tim", "update_time"),
                                        ("batchsize", "batch_size")])
def test_profile_misspelt_key_is_refused_with_the_key_it_misspells(tmp_path, profile_dict,
                                                                   bad, meant):
    good = profile_dict.pop(meant, None)
    profile_dict[bad] = good if good is not None else 1
    with pytest.raises(sm.ProfileFormatError) as info:
        sm.load_profile(_write(tmp_path / "w.json", profile_dict))
    assert info.value.field == bad
    assert f"did you mean {meant!r}" in str(info.value)
    assert "w.json" in str(info.value)


def test_profile_unknown_key_is_refused_listing_the_known_ones(tmp_path, profile_dict):
    profile_dict["learning_rate"] = 0.1
    with pytest.raises(sm.ProfileFormatError) as info:
        sm.load_profile(_write(tmp_path / "w.json", profile_dict))
    assert info.value.field == "learning_rate"
    assert "forward_time" in str(info.value)


def test_profile_tensors_unknown_key_is_refused(tmp_path, profile_dict):
    profile_dict["tensors"]["readdy"] = profile_dict["tensors"]["ready"]
    with pytest.raises(sm.ProfileFormatError) as info:
        sm.load_profile(_write(tmp_path / "w.json", profile_dict))
    assert info.value.field == "tensors.readdy"
    assert "did you mean 'ready'" in str(info.value)


def test_profile_saved_by_the_library_loads_back(tmp_path):
    prof = sm.load_profile("bert-base")
    sm.save_profile(prof, tmp_path / "b.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = sm.load_profile(tmp_path / "b.json")
    assert back.forward_time == prof.forward_time


@pytest.mark.parametrize("bad, meant", [("ceilng", "ceiling"), ("sync_overhed", "sync_overhead"),
                                        ("straggler_sprad", "straggler_spread")])
def test_cluster_misspelt_key_is_refused(tmp_path, cluster_dict, bad, meant):
    cluster_dict[bad] = 5e9
    with pytest.raises(sm.ProfileFormatError) as info:
        sm.load_cluster(_write(tmp_path / "c.json", cluster_dict))
    assert info.value.field == bad
    assert f"did you mean {meant!r}" in str(info.value)
    # the CLI says the same and exits non-zero
    out = subprocess.run(
        [sys.executable, "-m", "scalemodel", "scaling", "--model", "resnet50", "--n", "8",
         "--bw", "10Gbps", "--cluster", str(tmp_path / "c.json")],
        capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert f"did you mean {meant!r}" in out.stderr


def test_cluster_foreign_key_is_kept_with_a_warning(tmp_path, cluster_dict):
    cluster_dict["bandwidth"] = 5e9
    with pytest.warns(sm.ModelWarning, match="'bandwidth' is not a key of the format"):
        cl = sm.load_cluster(_write(tmp_path / "c.json", cluster_dict))
    assert cl.extra["bandwidth"] == 5e9
    assert cl.ceiling == 21e9
    del cluster_dict["bandwidth"]
    cluster_dict[""] = 1  # an empty key is named as one, not as nothing
    with pytest.warns(sm.ModelWarning, match="'' is not a key of the format"):
        sm.load_cluster(_write(tmp_path / "c.json", cluster_dict))


def test_cluster_keys_the_library_writes_pass_quietly(tmp_path, cluster_dict):
    for key in sorted(WRITTEN_EXTRA_KEYS):
        cluster_dict[key] = {"x": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cl = sm.load_cluster(_write(tmp_path / "c.json", cluster_dict))
    assert set(WRITTEN_EXTRA_KEYS) <= set(cl.extra)


def test_every_committed_profile_and_cluster_file_loads_without_a_warning():
    files = subprocess.run(["git", "ls-files", "*.json"], capture_output=True, text=True,
                           cwd=ROOT).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    seen = {"scalemodel-cluster": 0, "scalemodel-workload": 0}
    for name in files:
        path = ROOT / name
        try:
            data = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        kind = data.get("format") if isinstance(data, dict) else None
        if kind not in seen:
            continue
        seen[kind] += 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (sm.load_cluster if kind == "scalemodel-cluster" else sm.load_profile)(path)
    assert seen["scalemodel-cluster"] >= 3 and seen["scalemodel-workload"] >= 20


def test_interval_or_alternative_naming_a_misspelt_parameter_is_refused(tmp_path, cluster_dict):
    with pytest.raises(sm.InvalidParameterError, match="did you mean 'ceiling'"):
        sm.ClusterProfile(ceiling=21e9, intervals={"ceilng": (1e9, 2e9)},
                          provenance={"source": "t"})
    alt = {"free": ["sync_overhed"], "values": {"sync_overhed": 0.01}, "intervals": {},
           "score": 0.0}
    with pytest.raises(sm.InvalidParameterError, match="did you mean 'sync_overhead'"):
        sm.ClusterProfile(alternatives=[alt], provenance={"source": "t"})
    cluster_dict["intervals"] = {"straggler_sprad": [0.0, 0.1]}
    with pytest.raises(sm.ProfileFormatError, match="did you mean 'straggler_spread'") as info:
        sm.load_cluster(_write(tmp_path / "c.json", cluster_dict))
    assert "c.json" in str(info.value)


def test_fitted_clusters_intervals_and_alternatives_pass(tmp_path):
    # a real fit (its intervals, alternatives and codec keys) survives the name check
    runs = [{"model": "resnet50", "n": 1, "bw": 100e9, "scaling_factor": 1.0},
            {"model": "resnet50", "n": 16, "bw": 100e9, "scaling_factor": 0.75},
            {"model": "resnet50", "n": 64, "bw": 100e9, "scaling_factor": 0.70}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, gpus_per_node=8, fusion="horovod", algorithm="nccl-2.4")
    sm.save_cluster(fit.cluster, tmp_path / "f.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = sm.load_cluster(tmp_path / "f.json")
    assert back.intervals.keys() == fit.cluster.intervals.keys()
    assert len(back.alternatives) == len(fit.cluster.alternatives)
