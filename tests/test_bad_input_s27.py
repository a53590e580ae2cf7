"""Session 27's bad-input audit: what a profile or cluster file records and the model
reads (an offloaded step, a transformer config, a fitted efficiency) is checked where it
is read, naming the field; a config.json's label is text or nothing."""

import json
import re

import pytest

import scalemodel as sm
from scalemodel.efficiency import fitted_efficiency
from scalemodel.hf_configs import load_hf_profile
from scalemodel.profiles import save_profile


@pytest.fixture
def saved(tmp_path):
    """A function(model, change) -> the path of that built-in saved with ``change``
    applied to its provenance dict."""
    def make(model, change):
        path = tmp_path / "p.json"
        save_profile(sm.load_profile(model), path)
        d = json.loads(path.read_text())
        change(d["provenance"])
        path.write_text(json.dumps(d))
        return path
    return make


@pytest.mark.parametrize("record, field", [
    (dict(offload_cpu_step=-0.05, offload_host_gpus=8), "offload_cpu_step"),
    (dict(offload_cpu_step=float("nan"), offload_host_gpus=8), "offload_cpu_step"),
    (dict(offload_cpu_step="0.1", offload_host_gpus=8), "offload_cpu_step"),
    (dict(offload_cpu_step=0.05), "offload_host_gpus"),
    (dict(offload_cpu_step=0.05, offload_host_gpus=2.5), "offload_host_gpus"),
    (dict(offload_cpu_step=0.05, offload_host_gpus=-3), "offload_host_gpus"),
    (dict(offload_cpu_step=0.05, offload_host_gpus=True), "offload_host_gpus"),
    (dict(offload_host_gpus=4), "offload_cpu_step"),
])
def test_a_recorded_offload_step_is_checked(saved, record, field):
    """Before, -0.05 s gave a negative iteration time and scaling factors above 1, a
    missing host count a KeyError, 2.5 GPUs an answer."""
    path = saved("resnet50", lambda p: p.update(record))
    for call in (lambda: sm.iteration_time(path, 64, 10e9),
                 lambda: sm.scaling_factor(path, 2, 1e12),
                 lambda: sm.required_bandwidth(path, n=64, target=0.9)):
        with pytest.raises(sm.InvalidParameterError, match=field):
            call()


def test_a_recorded_offload_step_that_is_valid_is_used(saved):
    path = saved("resnet50", lambda p: p.update(offload_cpu_step=0.05, offload_host_gpus=4))
    plain = sm.iteration_time("resnet50", 64, 10e9)
    it = sm.iteration_time(path, 64, 10e9)
    # four GPUs share the host on 64 workers: three more CPU steps than alone
    assert float(it.total) > float(plain.total)
    assert sm.iteration_time(path, 64, 10e9).settings["offload_host_gpus"] == 4


def test_an_unknown_config_field_is_named(saved):
    path = saved("llama-3-8b", lambda p: p["config"].update(bogus=1))
    with pytest.raises(sm.InvalidParameterError, match="bogus"):
        sm.memory(path, 64)
    with pytest.raises(sm.InvalidParameterError, match="provenance\\['config'\\]"):
        sm.iteration_time(path, 64, 10e9, tp=2)


def test_the_cli_names_an_unknown_config_field_in_one_line(saved, capsys):
    from scalemodel.cli import main
    path = saved("llama-3-8b", lambda p: p["config"].update(bogus=1))
    assert main(["scaling", "--model", str(path), "--n", "64", "--bw", "10Gbps"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("label", [{"a": 1}, ["x"], 7, None, "  "])
def test_a_config_label_that_is_not_text_is_not_the_name(tmp_path, label):
    cfg = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
           "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 16,
           "vocab_size": 32000, "max_position_embeddings": 2048, "_name_or_path": label}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(cfg))
    prof = load_hf_profile(path)
    assert prof.name == "tiny"
    assert 0 < sm.scaling_factor(prof, 64, 100e9) < 1  # an unhashable label crashed here


MPT13 = dict(layers=40, hidden=5120, heads=40, ffn=20480, vocab=50368, seq=2048,
             micro_batch=2, gated_ffn=False, norm="layernorm", bias=True,
             tied_embeddings=True, learned_positions=2048, name="mpt-13b")


def _cluster(**change):
    eff = {"value": 0.4, "interval": [0.35, 0.45], "gpu": ["h100-sxm"],
           "models": ["mpt-13b"], "pressured": []}
    eff.update(change)
    return sm.ClusterProfile(extra={"efficiency": eff}, provenance={"source": "test"})


@pytest.mark.parametrize("change, field", [
    (dict(gpu=5), "gpu"), (dict(gpu="h100-sxm"), "gpu"), (dict(models=5), "models"),
    (dict(pressured=5), "pressured"), (dict(interval=[0.5, 0.1]), "interval"),
    (dict(interval=[0.1, 0.2]), "interval"), (dict(interval=[0.3]), "interval"),
    (dict(interval=[0.3, 2.0]), "interval"), (dict(end="middle"), "end"),
    (dict(value=float("nan")), "value"),
])
def test_a_fitted_efficiency_record_is_checked(change, field):
    """Before: 5 as the GPUs was a TypeError; a string silently dropped the fitted value; an
    interval [0.5, 0.1] or one without its value widened answers to 0.18-1.06."""
    prof = sm.transformer_profile(sm.TransformerConfig(**MPT13), "h100-sxm")
    with pytest.raises(sm.InvalidParameterError, match=field):
        fitted_efficiency(_cluster(**change), prof)


def test_an_efficiency_record_that_is_not_an_object_is_refused():
    prof = sm.transformer_profile(sm.TransformerConfig(**MPT13), "h100-sxm")
    cl = sm.ClusterProfile(extra={"efficiency": [0.4]}, provenance={"source": "test"})
    with pytest.raises(sm.InvalidParameterError, match="efficiency"):
        fitted_efficiency(cl, prof)
    value, (lo, hi) = fitted_efficiency(_cluster(), prof)  # the valid record is read
    assert value == 0.4 and lo <= 0.35 and hi >= 0.45


@pytest.mark.parametrize("mode", ["optimizer", "optimizer+parameters"])
def test_offload_knows_a_measured_profiles_gpu_by_its_driver_name(mode):
    """gpt2-h100 records 'NVIDIA H100 80GB HBM3' as measured: offload refused it as not a
    built-in GPU (memory() answered); the refusal named offload='optimizer' whatever was
    asked."""
    sharding = "zero3" if mode == "optimizer+parameters" else None
    it = sm.iteration_time("gpt2-h100", 64, 10e9, offload=mode, sharding=sharding)
    assert it.settings["offload_host_gpus"] == 8  # an H100 SXM's usual server
    assert float(it.total) > float(sm.iteration_time("gpt2-h100", 64, 10e9,
                                                     sharding=sharding).total)
    prof = sm.load_profile("resnet50")  # V100 built-in: known; a device nobody knows is not
    import attrs
    odd = attrs.evolve(prof, device="Some Accelerator", provenance={"source": "test"})
    with pytest.raises(sm.InvalidParameterError, match=re.escape(f"offload={mode!r}")):
        sm.iteration_time(odd, 64, 10e9, offload=mode, sharding=sharding)


@pytest.mark.parametrize("progress", [5, "yes", [print]])
def test_fit_cluster_progress_that_cannot_be_called_is_named(progress):
    with pytest.raises(sm.ParameterTypeError, match="progress"):
        sm.fit_cluster([dict(model="resnet50", n=8, bw=10e9, scaling_factor=0.8)],
                       progress=progress)


def test_a_recorded_config_value_is_named_where_it_is(saved):
    """A profile file's micro_batch=0 was 'micro_batch=0 is invalid' (the CLI:
    '--micro-batch=0', an option it refuses for saved profiles)."""
    path = saved("llama-3-8b", lambda p: p["config"].update(micro_batch=0))
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory(path, 8)
    assert exc.value.parameter == "profile.provenance['config']['micro_batch']"
    assert str(exc.value).startswith("profile.provenance['config']['micro_batch']=0")


def test_the_cli_names_a_cluster_files_field_not_an_option(tmp_path, capsys):
    """'field 'alpha': --alpha=1e+300 is invalid' named an option nobody passed."""
    from scalemodel.cli import main
    d = sm.ClusterProfile(provenance={"source": "test"}).to_dict()
    d["alpha"] = 1e300
    path = tmp_path / "c.json"
    path.write_text(json.dumps(d))
    assert main(["scaling", "--model", "resnet50", "--n", "8", "--bw", "10Gbps",
                 "--cluster", str(path)]) == 2
    err = capsys.readouterr().err
    assert "field 'alpha': alpha=1e+300 is invalid" in err and "--alpha" not in err
    assert main(["scaling", "--model", "resnet50", "--n", "8", "--bw", "10Gbps",
                 "--alpha", "1e300"]) == 2  # an option given is still named as one
    assert "--alpha=" in capsys.readouterr().err


@pytest.mark.parametrize("detail", [float("nan"), b"8", 1 + 0j, "", "yes", None])
def test_breakeven_detail_is_true_or_false(detail):
    with pytest.raises(sm.ParameterTypeError, match="detail"):
        sm.breakeven_bandwidth("resnet50", "topk", n=16, detail=detail)


def test_memory_refuses_a_bucket_beyond_the_largest_cap():
    with pytest.raises(sm.InvalidParameterError, match="bucket_bytes"):
        sm.memory("llama-2-7b", 8, bucket_bytes=1e300)  # answered 1e300 bytes per GPU
    assert sm.memory("llama-2-7b", 8, bucket_bytes=25 * 2**20).per_gpu > 0


def test_intra_alpha_takes_a_unit_as_alpha_does():
    kw = dict(gpus_per_node=8)
    assert sm.iteration_time("resnet50", 16, 10e9, intra_alpha="2us", **kw).total == \
        sm.iteration_time("resnet50", 16, 10e9, intra_alpha=2e-6, **kw).total
    with pytest.raises(sm.InvalidParameterError, match="intra_alpha"):
        sm.iteration_time("resnet50", 16, 10e9, intra_alpha=1e6, **kw)


def test_the_cli_grad_accum_range_is_the_profiles(capsys):
    from scalemodel.cli import main
    for value in ("0", "1000001"):
        assert main(["scaling", "--model", "llama-2-7b", "--n", "64", "--bw", "100Gbps",
                     "--grad-accum", value]) == 2
        assert "[1, 1000000]" in capsys.readouterr().err


def test_the_cli_reads_a_config_whatever_its_name_and_refuses_seq_for_a_saved_profile(
        tmp_path, capsys):
    """A saved profile with --seq answered, --seq ignored unsaid; a config.json saved as
    'config' or 'llama.JSON' was read as a profile ('field format') or refused --seq."""
    from scalemodel.cli import main
    cfg = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
           "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 16,
           "vocab_size": 32000, "max_position_embeddings": 2048}
    saved = tmp_path / "r50.json"
    save_profile(sm.load_profile("resnet50"), saved)
    assert main(["scaling", "--model", str(saved), "--n", "8", "--bw", "10Gbps",
                 "--seq", "2048"]) == 2
    assert "--seq=2048 is invalid" in capsys.readouterr().err
    for name in ("config", "llama.JSON"):
        path = tmp_path / name
        path.write_text(json.dumps(cfg))
        assert main(["scaling", "--model", str(path), "--n", "8", "--bw", "10Gbps",
                     "--seq", "512"]) == 0
        assert "0." in capsys.readouterr().out


def test_a_runs_flag_takes_numpys_booleans():
    import numpy as np
    runs = [dict(model="resnet50", n=1, bw=10e9, iteration_time=0.2,
                 single_worker_time=0.19, wrapped=w) for w in (np.True_, True)]
    a, b = (sm.fit_cluster([r]).cluster for r in runs)
    assert a.iteration_overhead == b.iteration_overhead


def test_the_cli_checkpointing_refusal_lists_what_the_cli_takes(capsys):
    """It offered True, False and 'a Checkpointing', which only the API takes."""
    from scalemodel.cli import main
    for text in ("bogus", "1.5", "True"):
        assert main(["scaling", "--model", "llama-2-7b", "--n", "8", "--bw", "10Gbps",
                     "--activation-checkpointing", text]) == 2
        err = capsys.readouterr().err
        assert "none, selective, full, full-early-stop" in err and "Checkpointing" not in err


@pytest.mark.parametrize("argv", [["--bogus"], ["--iterations", "x"], ["from-trace"],
                                  ["from-nccl-tests"]])
def test_the_calibration_commands_refuse_in_one_line(argv):
    """python -m scalemodel.calibrate printed a 23-line usage block before its error."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "scalemodel.calibrate", *argv],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "error:" in r.stderr
