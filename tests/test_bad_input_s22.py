"""Bad input found by a hostile-user sweep of the CLI and the readers (session 22): each
test reproduces a defect that was fixed (a traceback, or a number that could not be a
measurement taken as one) and checks the documented exception class and that the message
names the field or option and the value."""

import gzip
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel.calibrate.wrapper import WrapperMeasurement
from scalemodel.cli import main
from scalemodel.exceptions import CalibrationError, CalibrationWarning, InvalidParameterError
from scalemodel.hf_configs import load_hf_profile

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
WRAPPER = ROOT / "calibration" / "results" / "h200" / "framework-repeat" / \
    "resnet50-fp32.wrapper.json"
BIG = 10 ** 400  # a JSON file can hold an integer no float can


def _wrapper():
    return json.loads(WRAPPER.read_text())


@pytest.mark.parametrize("key, value", [("buckets", 1e308), ("buckets", 2 ** 63),
                                        ("plain_seconds", BIG), ("bucket_caps_mb", BIG)])
def test_wrapper_file_with_numbers_beyond_a_float(key, value):
    """OverflowError tracebacks from fit --wrapper."""
    data = _wrapper()
    data[key][0] = value
    with pytest.raises(CalibrationError, match="not a wrapper measurement"):
        WrapperMeasurement.from_dict(data)
    assert WrapperMeasurement.from_dict(_wrapper()).buckets.size  # the file itself reads


def _trace_with(tmp_path, key, value):
    with gzip.open(DATA / "traces" / "ddp_2ranks_allreduce_b.json.gz", "rt") as fh:
        data = json.load(fh)
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"
               and "nccl" in e.get("name", "").lower()]
    for e in kernels:
        e["args"][key] = value
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("key, value", [("In msg nelems", 1e308), ("In msg nelems", BIG),
                                        ("Group size", 2 ** 63), ("Group size", 1e308)])
def test_trace_with_absurd_kernel_arguments_reads_them_as_unknown(tmp_path, key, value):
    """OverflowError tracebacks from from-trace: an element count or group size no run
    can have is an unknown one, as a text there already was."""
    from scalemodel.calibrate import read_trace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        report = read_trace(_trace_with(tmp_path, key, value))
    calls = report.collectives["all_reduce"]
    assert calls.calls == 15  # every collective still read, its size from other sources
    if key == "Group size":
        assert calls.sizes_known == 15


def test_mpt_config_with_a_width_beyond_a_float(tmp_path):
    base = {"model_type": "mpt", "d_model": 2048, "n_layers": 24, "n_heads": 16,
            "vocab_size": 50432, "max_seq_len": 2048}
    for key, field in (("expansion_ratio", "config.expansion_ratio"),
                       ("d_model", "config.d_model")):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({**base, key: BIG}))
        with pytest.raises(InvalidParameterError) as err:
            load_hf_profile(path, gpu="h100-sxm")
        assert err.value.parameter == field
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(base))
    assert load_hf_profile(path, gpu="h100-sxm").provenance


def test_checkpointing_fraction_beyond_a_float():
    with pytest.raises(InvalidParameterError, match="activation_checkpointing=1000"):
        sm.iteration_time("llama-2-7b", 64, "100Gbps", activation_checkpointing=BIG)


def test_run_with_a_list_where_a_count_goes():
    """TypeError: unhashable type: 'numpy.ndarray' from the profile cache."""
    runs = [{"model": "resnet50", "n": 1, "bw": "100Gbps", "scaling_factor": 1.0},
            {"model": "resnet50", "n": 16, "bw": "100Gbps", "scaling_factor": 0.75,
             "seq": [2048]}]
    with pytest.raises(sm.ParameterTypeError, match=r"runs\[1\]\.seq=\[2048\]"):
        sm.fit_cluster(runs, gpus_per_node=8)


def test_nccl_tests_rows_with_wrong_results_are_named(tmp_path):
    """nccl-tests' own data check (#wrong > 0) was read and ignored."""
    from scalemodel.calibrate import read_nccl_tests

    lines = (DATA / "nccl_tests_all_reduce_2x8_h100.txt").read_text().splitlines()
    rows = [i for i, x in enumerate(lines) if x.split()[:1] and x.split()[0].isdigit()]
    tok = lines[rows[3]].split()
    tok[8] = "7"  # the out-of-place #wrong
    lines[rows[3]] = "  ".join(tok)
    path = tmp_path / "wrong.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(CalibrationWarning, match=rf"#wrong > 0\) on line\(s\) {rows[3] + 1}:"):
        read_nccl_tests(path)


def test_cli_out_with_a_trailing_separator_or_too_long_a_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50,1,10Gbps,1\nresnet50,16,10Gbps,0.6\n")
    assert main(["fit", str(runs), "--out", "new/"]) == 2
    assert "--out='new/' is invalid: ends with a path separator" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # it wrote a file named "new"
    assert main(["fit", str(runs), "--out", "a" * 300]) == 2  # OSError traceback
    assert "is invalid: cannot be written (File name too long)" in capsys.readouterr().err
    with pytest.raises(IsADirectoryError, match="ends with a path separator"):
        sm.save_cluster(sm.ClusterProfile(provenance={"source": "test"}), "new/")
    assert not (tmp_path / "new").exists()


def test_cli_checkpointing_option_names_itself(capsys):
    for text in ("1e400", "2", "full-earlystop"):
        assert main(["min-compression", "--model", "bert", "--bw", "10Gbps",
                     f"--activation-checkpointing={text}"]) == 2
        assert f"--activation-checkpointing={text!r} is invalid" in capsys.readouterr().err


def test_cli_standard_output_that_cannot_be_written():
    """scalemodel whatif > /dev/full: an OSError traceback, then a second error at exit."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "scalemodel.cli", "whatif"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == "scalemodel: error: standard output: No space left on device"


# --------------------------------------------------------------------------- the API


def test_profile_keeps_its_own_copy_of_the_callers_arrays():
    """The profile froze the caller's own array in place (a later tb[0] = ... raised), and
    a view's base could put a NaN into a checked profile."""
    import attrs
    import numpy as np

    tb, tr = np.full(10, 1e6), np.linspace(0.01, 0.1, 10)
    p = sm.WorkloadProfile(name="x", tensor_bytes=tb, tensor_ready=tr, forward_time=0.05,
                           backward_time=0.1)
    tb[0] = 2e6  # the caller's array stays theirs
    assert p.tensor_bytes[0] == 1e6 and not p.tensor_bytes.flags.writeable
    base = np.full(10, 1e6)
    q = sm.WorkloadProfile(name="x", tensor_bytes=base[:], tensor_ready=tr, forward_time=0.05,
                           backward_time=0.1)
    base[3] = np.nan
    assert q.total_bytes == 1e7
    assert attrs.evolve(q, forward_time=0.06).tensor_bytes is q.tensor_bytes  # no copy


def test_profile_times_below_a_nanosecond_and_reductions_beyond_a_day():
    import attrs
    import numpy as np

    with pytest.raises(sm.ProfileFormatError, match="forward_time.*1e-320 s, below 1e-09 s"):
        sm.WorkloadProfile(name="t", tensor_bytes=np.array([1e8]), tensor_ready=np.array([0.0]),
                           forward_time=0.0, backward_time=1e-320)  # ZeroDivisionError later
    with pytest.raises(InvalidParameterError, match=r"gamma=1e\+308 .*at most 0\.001 s/byte"):
        sm.ReductionCost(gamma=1e308)  # scaling factor 0.0 and a step of inf
    with pytest.raises(sm.ProfileFormatError, match="reduction.*more than a day"):
        attrs.evolve(sm.load_profile("resnet50"), reduction=sm.ReductionCost(gamma=1e-3))


def test_collective_times_name_shapes_sizes_and_the_intra_node_rate():
    import numpy as np

    with pytest.raises(InvalidParameterError, match=r"bw=.*shape \(3,\) does not broadcast "
                                                    r"with nbytes of shape \(2,\)"):
        sm.ring_allreduce_time(np.array([1e8, 2e8]), 64, np.array([1e9, 2e9, 3e9]))
    with pytest.raises(InvalidParameterError, match="^compression="):
        sm.ring_allreduce_time(np.array([1e8, 2e8]), 64, 1e10, compression=np.ones(3))
    with pytest.raises(InvalidParameterError, match=r"nbytes=1e\+308.*at most 1e\+18"):
        sm.ring_allreduce_time(1e308, 64, 1e10)  # inf and an overflow RuntimeWarning
    with pytest.raises(InvalidParameterError, match="intra_bw=1.0 .*at least 1 Mbit/s"):
        sm.hierarchical_allreduce_time(1e8, 64, 1e10, gpus_per_node=8, intra_bw=1.0)
    grid = sm.ring_allreduce_time(np.array([1e8, 2e8]), 64, np.array([[1e9], [2e9]]))
    assert grid.shape == (2, 2) and grid[0, 1] == sm.ring_allreduce_time(2e8, 64, 1e9)


@pytest.mark.parametrize("make, name", [
    (lambda a: sm.IntQuantizer(scale_bytes=a), "scale_bytes"),
    (lambda a: sm.TopK(index_bytes=a), "index_bytes"),
    (lambda a: sm.SignSGD(sign_bits=a), "sign_bits")])
def test_compressor_choices_given_an_array(make, name):
    import numpy as np

    with pytest.raises(sm.ParameterTypeError, match=f"^{name}=.*not an array"):
        make(np.array([4, 8]))  # ValueError: the truth value of an array is ambiguous


def test_extreme_compressor_threshold_and_transformer_sizes():
    with pytest.raises(InvalidParameterError, match=r"min_compression_rate=1e\+308"):
        sm.PowerSGD(min_compression_rate=1e308)  # an overflow RuntimeWarning
    for kw in (dict(seq=10 ** 7), dict(micro_batch=10 ** 6)):
        with pytest.raises(InvalidParameterError, match="^config=.*longer than a day") as err:
            sm.transformer_profile(sm.llm_config("llama-2-7b", **kw))
        assert str(next(iter(kw.values()))) in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), -1.0, [1e9, float("nan")]])
def test_format_bandwidth_refuses_what_is_no_rate(value):
    with pytest.raises(InvalidParameterError, match="^bits_per_second="):
        sm.format_bandwidth(value)
    assert sm.format_bandwidth(float("inf")) == "inf bit/s"


def test_calibrate_out_with_a_trailing_separator(tmp_path, capsys):
    """python -m scalemodel.calibrate --out new/ wrote new.<model>.json (Path drops the
    separator that says 'a folder')."""
    from scalemodel.calibrate.__main__ import main as calibrate

    log = str(DATA / "nccl_tests_all_reduce_2x8_h100.txt")
    out = f"{tmp_path}/new/"
    assert calibrate(["from-nccl-tests", log, "--line-rate", "400Gbps", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "ends with a path separator" in err and "nothing was read" in err
    pytest.importorskip("torch")  # the measuring form builds its model first
    assert calibrate(["--model", "mlp", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "ends with a path separator" in err and "nothing was measured" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
