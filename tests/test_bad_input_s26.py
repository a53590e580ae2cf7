"""Bad input found in session 26: each case was answered silently before."""

import pytest

from scalemodel.cli import main


@pytest.mark.parametrize("value", ["", " , ", ","])
def test_fit_option_naming_no_parameter_is_refused(tmp_path, capsys, value):
    """``--fit ""`` fitted nothing (every parameter held at its start) and said nothing;
    leaving ``--fit`` out lets the fit choose."""
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50,8,10e9,0.8\nresnet50,16,10e9,0.7\n")
    assert main(["fit", str(runs), "--fit", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"scalemodel: error: --fit={value!r} is invalid: names no "
                          "parameter. Name them, comma-separated, or leave --fit out")
