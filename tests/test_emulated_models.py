"""calibration/emulated_cluster.py: how ``--models`` is read and what the files are named.

The emulated run itself (root, ip netns, tc) is in tests/test_emulated_cluster.py, which
gives one model as ``package.module:function:BATCH``; this checks the naming without it.
"""

import importlib.util
from pathlib import Path

import pytest

from scalemodel.calibrate.models import model_name

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def emulated():
    spec = importlib.util.spec_from_file_location("emulated_cluster",
                                                  ROOT / "calibration" / "emulated_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_given_as_module_function_batch(emulated):
    models = emulated.parse_models("mlp:128, scalemodel.calibrate.models:convnet:64")
    assert models == [("mlp", "mlp", 128),
                      ("scalemodel.calibrate.models:convnet", "convnet", 64)]
    # the name is the one python -m scalemodel.calibrate gives the profile
    assert [name for _, name, _ in models] == [model_name(s) for s, _, _ in models]
    assert emulated.calibration_model(models, None) == "mlp"
    assert emulated.calibration_model(models, "scalemodel.calibrate.models:convnet") \
        == "convnet"
    assert emulated.calibration_model(models, "convnet") == "convnet"
    files = emulated.calibration_files("/w", "convnet")
    assert files == {"cluster": Path("/w/cal-convnet.json"),
                     "profile": Path("/w/cal-convnet.profile.json")}


@pytest.mark.parametrize("text, words", [
    ("mlp", "'mlp' is not MODEL:BATCH"),
    ("mlp:0", "'mlp:0' is not MODEL:BATCH"),
    ("mlp:x", "'mlp:x' is not MODEL:BATCH"),
    ("a:b:c:16", "'a:b:c:16' is not MODEL:BATCH"),
    (":16", "':16' is not MODEL:BATCH"),
    ("mlp:16,scalemodel.calibrate.models:mlp:32", "two models would be named 'mlp'"),
])
def test_bad_models_are_one_clear_line(emulated, capsys, text, words):
    with pytest.raises(ValueError, match=words):
        emulated.parse_models(text)
    assert emulated.main(["--models", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "--models" in err


def test_unknown_calibration_model(emulated, capsys):
    assert emulated.main(["--models", "mlp:8", "--calibrate-model", "convnet"]) == 2
    assert "--calibrate-model 'convnet' is not one of --models (mlp)" in capsys.readouterr().err
