"""Bad input: a documented exception naming the parameter and the value."""

import json
import math

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.exceptions import (InvalidParameterError, ParameterTypeError,
                                   ProfileFormatError, UnknownNameError)


@pytest.fixture
def prof(synthetic):
    return synthetic


@pytest.mark.parametrize("bw", [0, -1e9, float("nan"), float("inf"), "fast", "10 parsecs",
                                "-5Gbps", "0Gbps", [1e9, float("nan")]])
def test_bad_bandwidth(prof, bw):
    with pytest.raises(InvalidParameterError) as info:
        sm.scaling_factor(prof, 8, bw)
    assert info.value.parameter == "bw"
    assert "bw=" in str(info.value)


@pytest.mark.parametrize("u", [0, -0.1, 1.01, float("nan"), float("inf")])
def test_bad_utilization(prof, u):
    with pytest.raises(InvalidParameterError, match=r"utilization=.*\(0, 1\]"):
        sm.scaling_factor(prof, 8, 1e10, utilization=u)


@pytest.mark.parametrize("n, exc", [(0, InvalidParameterError), (-3, InvalidParameterError),
                                    (2.5, InvalidParameterError), (8.0, ParameterTypeError),
                                    ("8", ParameterTypeError), (True, ParameterTypeError),
                                    (np.array([4, 0]), InvalidParameterError),
                                    (np.array([4.5]), InvalidParameterError)])
def test_bad_worker_count(prof, n, exc):
    with pytest.raises(exc) as info:
        sm.scaling_factor(prof, n, 1e10)
    assert info.value.parameter == "n"


@pytest.mark.parametrize("r", [0.5, 0, -2, float("nan"), float("inf")])
def test_bad_ratio(prof, r):
    with pytest.raises(InvalidParameterError, match="compression="):
        sm.scaling_factor(prof, 8, 1e10, compression=r)


@pytest.mark.parametrize("target", [0, 1.5, -0.2, float("nan")])
def test_bad_target(prof, target):
    with pytest.raises(InvalidParameterError, match="target="):
        sm.min_compression(prof, 1e10, target=target)
    with pytest.raises(InvalidParameterError, match="target="):
        sm.required_bandwidth(prof, target=target)


def test_unknown_model_lists_names_and_suggests():
    with pytest.raises(UnknownNameError) as info:
        sm.scaling_factor("resnet5", 8, 1e10)
    msg = str(info.value)
    assert "model='resnet5'" in msg and "Did you mean 'resnet50'" in msg
    assert "bert-base" in msg and "vgg16" in msg


def test_unknown_algorithm_and_fusion(prof):
    with pytest.raises(UnknownNameError, match="algorithm='rign'.*Did you mean 'ring'"):
        sm.scaling_factor(prof, 8, 1e10, algorithm="rign")
    with pytest.raises(UnknownNameError, match="fusion='horovd'.*Did you mean 'horovod'"):
        sm.scaling_factor(prof, 8, 1e10, fusion="horovd")
    with pytest.raises(ParameterTypeError, match="fusion=3"):
        sm.scaling_factor(prof, 8, 1e10, fusion=3)


def test_unknown_keyword_rejected(prof):
    with pytest.raises(TypeError):
        sm.scaling_factor(prof, 8, 1e10, bandwidth=1e10)


def test_hierarchical_needs_whole_nodes(prof):
    with pytest.raises(InvalidParameterError, match="n=12.*gpus_per_node=8"):
        sm.scaling_factor(prof, 12, 1e10, algorithm="hierarchical")


def _write(tmp_path, text):
    path = tmp_path / "p.json"
    path.write_text(text)
    return path


def _valid(prof):
    return prof.to_dict()


def test_profile_round_trip(tmp_path, prof):
    path = sm.save_profile(prof, tmp_path / "p.json")
    back = sm.load_profile(path)
    np.testing.assert_array_equal(back.tensor_bytes, prof.tensor_bytes)
    assert sm.scaling_factor(str(path), 8, 1e10) == sm.scaling_factor(prof, 8, 1e10)


def test_save_creates_missing_folders_and_leaves_no_temporary_file(tmp_path, prof):
    path = sm.save_profile(prof, tmp_path / "new" / "deeper" / "p.json")
    assert sm.load_profile(path).name == prof.name
    assert sorted(p.name for p in path.parent.iterdir()) == ["p.json"]


def test_truncated_profile(tmp_path, prof):
    text = json.dumps(_valid(prof))
    path = _write(tmp_path, text[: len(text) // 2])
    with pytest.raises(ProfileFormatError, match="truncated"):
        sm.load_profile(path)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("tensors"), "tensors"),
    (lambda d: d["tensors"].pop("ready"), "tensors.ready"),
    (lambda d: d["tensors"]["ready"].pop(), "tensors.ready"),
    (lambda d: d["tensors"]["bytes"].__setitem__(0, -5), "tensors.bytes"),
    (lambda d: d["tensors"]["ready"].reverse(), "tensors.ready"),
    (lambda d: d.__setitem__("backward_time", "slow"), "backward_time"),
    (lambda d: d.__setitem__("backward_time", 0.0), "backward_time"),
    (lambda d: d.__setitem__("forward_time", float("nan")), "forward_time"),
    (lambda d: d.__setitem__("format", "other"), "format"),
    (lambda d: d.__setitem__("format_version", 99), "format_version"),
    (lambda d: d.__setitem__("provenance", {}), "provenance.source"),
    (lambda d: d.__setitem__("reduction", {"kind": "cubic"}), "reduction.kind"),
    (lambda d: d.__setitem__("reduction", "no_such_table"), "reduction"),
    (lambda d: d.__setitem__("batch_size", 0), "batch_size"),
])
def test_malformed_profile_names_the_field(tmp_path, prof, mutate, field):
    data = _valid(prof)
    mutate(data)
    path = _write(tmp_path, json.dumps(data))
    with pytest.raises(ProfileFormatError) as info:
        sm.load_profile(path)
    assert info.value.field == field
    assert f"field {field!r}" in str(info.value)


def test_exceptions_subclass_builtins():
    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(UnknownNameError, ValueError)
    assert issubclass(ProfileFormatError, ValueError)
    assert issubclass(ParameterTypeError, TypeError)


def test_no_nan_leaves_solvers(prof):
    for bw in (1e6, 1e9, 1e12):
        res = sm.min_compression(prof, bw, n=64)
        assert not math.isnan(res.ratio) and not math.isnan(res.scaling_factor)
        res = sm.required_bandwidth(prof, n=64, target=0.99)
        assert not math.isnan(res.bw)
