"""Bad input found by a hostile-user sweep of the public API and the CLI (issues 17 and
20): each test is a reproducer of a defect that was fixed, and checks the documented
exception class and that the message names the parameter and the offending value."""

import math
import os
from pathlib import Path

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.exceptions import InvalidParameterError, ParameterTypeError

LLM = "llama-2-7b"
H100_LOG = str(Path(__file__).parent / "data" / "nccl_tests_all_reduce_2x8_h100.txt")


@pytest.mark.parametrize("kw, name, shown", [
    (dict(tp=True), "tp", "tp=True"),
    (dict(pp=True), "pp", "pp=True"),
    (dict(virtual_stages=True), "virtual_stages", "virtual_stages=True"),
    (dict(tp=1.0), "tp", "tp=1.0"),
])
def test_cached_scenario_does_not_skip_type_checks(kw, name, shown):
    """A first question with tp=1 cached its scenario under a key that True and 1.0 hit
    (they hash alike), so tp=True was accepted on a second call but refused on a first."""
    sm.iteration_time(LLM, n=64, bw=100e9)  # caches tp=1, pp=1, virtual_stages=1
    with pytest.raises(ParameterTypeError) as err:
        sm.iteration_time(LLM, n=64, bw=100e9, **kw)
    assert err.value.parameter == name
    assert shown in str(err.value)


@pytest.mark.parametrize("n", [np.array([], dtype=int), [], np.zeros((2, 0), int) + 2])
def test_empty_worker_grid_gives_empty_answer(n):
    """n=[] raised IndexError from inside the model; an empty bw already answered []."""
    out = sm.scaling_factor("resnet50", n=n, bw=10e9)
    assert out.size == 0 and out.shape == np.shape(n)


def test_shard_group_with_tp_names_data_parallel_count():
    """With tp=2 and n=64 the message said 'must divide n=32', a value the user never
    wrote; memory() already said 'n / tp = 32'."""
    with pytest.raises(InvalidParameterError) as err:
        sm.iteration_time(LLM, n=64, bw=100e9, tp=2, sharding="zero3", shard_group=64)
    msg = str(err.value)
    assert err.value.parameter == "shard_group" and "shard_group=64" in msg
    assert "n / tp = 32" in msg and "tp=2" in msg


@pytest.mark.parametrize("value", [0.5, True, 1])
def test_checkpointing_without_blocks_names_the_value_given(value):
    """activation_checkpointing=0.5 on a profile without blocks was reported as
    activation_checkpointing='full'."""
    with pytest.raises(InvalidParameterError) as err:
        sm.scaling_factor("resnet50", 64, 10e9, activation_checkpointing=value)
    assert err.value.parameter == "activation_checkpointing"
    assert f"activation_checkpointing={value!r} is invalid" in str(err.value)


_LLAMA = dict(model_type="llama", hidden_size=256, num_hidden_layers=4,
              num_attention_heads=4, intermediate_size=1024, vocab_size=1000)
_FALCON = dict(model_type="falcon", hidden_size=256, num_hidden_layers=4,
               num_attention_heads=4, vocab_size=1000)


@pytest.mark.parametrize("config, key, value", [
    (_LLAMA, "tie_word_embeddings", "false"),
    (_LLAMA, "tie_word_embeddings", 1),
    (_LLAMA, "attention_bias", "true"),
    (_FALCON, "multi_query", "no"),
    (_FALCON, "new_decoder_architecture", 0),
    (_FALCON, "bias", "false"),
])
def test_hf_config_flags_must_be_booleans(config, key, value):
    """tie_word_embeddings="false" was read by its truth value (True: a tied head)."""
    with pytest.raises(ParameterTypeError) as err:
        sm.TransformerConfig.from_hf_config({**config, key: value})
    assert err.value.parameter == f"config.{key}"
    assert f"config.{key}={value!r}" in str(err.value) and "true or false" in str(err.value)


def test_hf_config_null_flag_is_the_default():
    cfg = sm.TransformerConfig.from_hf_config({**_LLAMA, "tie_word_embeddings": None})
    assert cfg.tied_embeddings is False


def test_absurd_layer_count_is_refused_not_run():
    """layers=10**9 was accepted and parameter_count then listed 10^9 blocks (hours)."""
    with pytest.raises(InvalidParameterError) as err:
        sm.TransformerConfig(layers=10**9, hidden=256, heads=4, ffn=1024, vocab=1000)
    assert err.value.parameter == "layers" and "layers=1000000000" in str(err.value)
    assert "at most 100,000" in str(err.value)


@pytest.mark.parametrize("text, shown", [
    ("NaN", "nan"), ('"2048"', "'2048'"), ("2048.5", "2048.5"), ("-5", "-5"), ("true", "True"),
])
def test_hf_config_file_context_length_is_checked(tmp_path, capsys, text, shown):
    """A config.json with "max_position_embeddings": NaN ended the CLI with a traceback
    (ValueError from int(nan)); 2048.5 was cut to 2048 silently."""
    from scalemodel.cli import main
    from scalemodel.hf_configs import load_hf_profile

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, '
                    '"num_attention_heads": 4, "intermediate_size": 1024, '
                    f'"vocab_size": 1000, "max_position_embeddings": {text}}}')
    with pytest.raises(InvalidParameterError) as err:
        load_hf_profile(path)
    assert err.value.parameter == "config.max_position_embeddings"
    assert f"config.max_position_embeddings={shown} is invalid" in str(err.value)
    assert main(["scaling", "--model", str(path), "--n", "64", "--bw", "10Gbps"]) == 2
    err_text = capsys.readouterr().err
    assert "Traceback" not in err_text and len(err_text.strip().splitlines()) == 1
    assert "config.max_position_embeddings" in err_text
    assert load_hf_profile(path, seq=1024).name  # an explicit seq needs no context length


def test_fit_out_refuses_to_overwrite_the_runs_or_transport(tmp_path, capsys):
    """`scalemodel fit runs.csv --out runs.csv` replaced the measured runs with the
    cluster JSON (exit 0, 'wrote runs.csv')."""
    from scalemodel.cli import main

    runs = tmp_path / "runs.csv"
    text = "model,n,bw,scaling_factor\nresnet50,16,10Gbps,0.6\nresnet50,32,10Gbps,0.55\n"
    runs.write_text(text)
    log = tmp_path / "log.txt"
    log.write_text(Path(H100_LOG).read_text())
    for argv, target in ((["fit", str(runs), "--out", str(runs)], runs),
                         (["fit", str(runs), "--out", str(tmp_path / "." / "runs.csv")], runs),
                         (["fit", str(runs), "--transport", str(log), "--out", str(log)], log)):
        before = target.read_bytes()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "--out=" in err and "is an input of this command" in err
        assert target.read_bytes() == before
    out = tmp_path / "cluster.json"
    assert main(["fit", str(runs), "--out", str(out)]) == 0 and out.is_file()
    capsys.readouterr()


def test_from_nccl_tests_out_refuses_to_overwrite_the_log(tmp_path, capsys):
    """`python -m scalemodel.calibrate from-nccl-tests log.txt --out log.txt` replaced the
    log with the cluster JSON ('wrote log.txt')."""
    from scalemodel.calibrate.__main__ import main

    log = tmp_path / "log.txt"
    log.write_text(Path(H100_LOG).read_text())
    before = log.read_bytes()
    assert main(["from-nccl-tests", str(log), "--line-rate", "400Gbps", "--out",
                 str(log)]) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"--out {log} is the input log" in err
    assert log.read_bytes() == before


@pytest.mark.parametrize("value", ["no", 0, None])
def test_memory_suggest_must_be_a_bool(value):
    """memory(suggest="no") was read by its truth value (suggestions on)."""
    with pytest.raises(ParameterTypeError) as err:
        sm.memory(LLM, 64, suggest=value)
    assert err.value.parameter == "suggest" and f"suggest={value!r}" in str(err.value)


def test_transport_fitted_with_other_nics_per_node_is_an_error_naming_both():
    """A transport cluster fitted with 1 NIC per node was taken with nics_per_node=2
    (its per-NIC bandwidth then counted twice per node) without a word; other GPUs per
    node were already refused."""
    transport = sm.ClusterProfile(name="t", alpha=2e-5, utilization=0.8,
                                  topology=sm.Topology(gpus_per_node=8, nics_per_node=1),
                                  provenance={"source": "test transport"})
    runs = [dict(model="resnet50", n=n, bw=100e9, scaling_factor=sf)
            for n, sf in ((16, 0.9), (64, 0.85))]
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(runs, transport=transport, nics_per_node=2)
    msg = str(err.value)
    assert err.value.parameter == "transport"
    assert "1 NIC(s) per node" in msg and "nics_per_node=2" in msg


def test_cli_passes_on_a_foreign_warning_once_and_ends(tmp_path):
    """The CLI re-emitted each warning that is not a ModelWarning while it was still
    recording warnings: the warning was recorded again and re-emitted forever (scalemodel
    scaling --compression 1e308, whose overflow RuntimeWarning it caught, never ended)."""
    import subprocess
    import sys
    code = ("import warnings, scalemodel.cli as c\n"
            "c._resolve = lambda args: warnings.warn('a foreign warning', UserWarning)\n"
            "raise SystemExit(c.main(['profiles']))\n")
    done = subprocess.run([sys.executable, "-W", "always::UserWarning", "-c", code],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**__import__("os").environ,
                               "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("UserWarning: a foreign warning") == 1


def test_a_nul_byte_in_a_path_is_a_documented_error(tmp_path):
    """A path with a NUL byte ended in a bare ValueError ('embedded null byte') from
    os.open / os.stat / os.path.realpath: reading an nccl-tests log or a trace, saving a
    profile, and a runs CSV whose model cell holds one."""
    from scalemodel.calibrate import read_trace
    from scalemodel.calibrate.nccl_tests import read_nccl_tests
    from scalemodel.exceptions import ProfileFormatError
    for read in (read_nccl_tests, read_trace):
        with pytest.raises(ProfileFormatError, match="NUL byte"):
            read(str(tmp_path / "log\x00.txt"))
    with pytest.raises(InvalidParameterError, match="NUL byte") as err:
        sm.save_profile(sm.load_profile("resnet50"), str(tmp_path / "p\x00.json"))
    assert err.value.parameter == "path"
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50\x00,16,10Gbps,0.5\n")
    with pytest.raises(InvalidParameterError, match="NUL byte") as err:
        sm.fit_cluster(str(runs))
    assert err.value.parameter == "runs[0].model"


@pytest.mark.parametrize("old, new, column, shown", [
    ("  1428.0 ", "  1e309 ", "time", "'1e309'"),
    ("  1428.0 ", "  nan ", "time", "'nan'"),
    ("  1428.0 ", "  -5.0 ", "time", "'-5.0'"),
    ("\n   268435456 ", "\n  -268435456 ", "size", "'-268435456'"),
    ("\n   268435456 ", "\n 99999999999999999999999999999999 ", "size",
     "'99999999999999999999999999999999'"),
])
def test_nccl_tests_cells_out_of_range_name_the_line(tmp_path, old, new, column, shown):
    """An nccl-tests row with an infinite, NaN or negative time was left out of the fit
    without a word, a row with a negative size was skipped as if it were not a row, and a
    size of 1e32 bytes was fitted (alpha 1e-69 s, 1e27 Gbit/s per NIC)."""
    from scalemodel.calibrate.nccl_tests import read_nccl_tests
    from scalemodel.exceptions import ProfileFormatError
    text = Path(H100_LOG).read_text()
    assert text.count(old) == 1
    log = tmp_path / "all_reduce.txt"
    log.write_text(text.replace(old, new))
    with pytest.raises(ProfileFormatError) as err:
        read_nccl_tests(log)
    msg = str(err.value)
    assert err.value.field == "line 50" and f"column {column!r}" in msg and shown in msg
    with pytest.raises(ProfileFormatError):
        sm.fit_cluster([dict(model="bert", n=16, bw=400e9, scaling_factor=0.9)],
                       transport=str(log))


_TWO_RUNS = [dict(model="bert", n=16, bw=400e9, scaling_factor=0.9),
             dict(model="bert", n=64, bw=400e9, scaling_factor=0.85)]


@pytest.mark.parametrize("kw, name, exc", [
    (dict(confidence="0.9"), "confidence", ParameterTypeError),
    (dict(confidence=None), "confidence", ParameterTypeError),
    (dict(hold=5), "hold", ParameterTypeError),
    (dict(fit=[["alpha"]]), "fit", ParameterTypeError),
    (dict(network=["nccl-ib"]), "network", ParameterTypeError),
    (dict(max_free=1.5), "max_free", ParameterTypeError),
    (dict(max_free=-1), "max_free", InvalidParameterError),
    (dict(max_free=0), "max_free", InvalidParameterError),
    (dict(name=5), "name", ParameterTypeError),
    (dict(name=None), "name", ParameterTypeError),
])
def test_fit_cluster_options_of_the_wrong_kind_are_named(kw, name, exc):
    """confidence='0.9' or None, hold=5, fit=[['alpha']], network=[...] and max_free=1.5
    ended in a bare TypeError; max_free=-1 fitted nothing silently and name=5 / None
    made a cluster with that name."""
    with pytest.raises(exc) as err:
        sm.fit_cluster(_TWO_RUNS, **kw)
    assert err.value.parameter == name
    assert f"{name}={next(iter(kw.values()))!r}" in str(err.value)


@pytest.mark.parametrize("run, other", [
    (dict(model="bert", n=16, bw=400e9, scaling_factor=0.9, iteration_time=100.0),
     "iteration_time=100.0"),
    (dict(model="bert", n=16, bw=400e9, scaling_factor=0.9, iteration_time=1.0,
          single_worker_time=0.3), "iteration_time=1.0"),
    (dict(model=LLM, n=16, bw=400e9, scaling_factor=0.9, tokens_per_second_per_gpu=3000),
     "tokens_per_second_per_gpu=3000"),
])
def test_a_run_with_a_scaling_factor_and_a_time_is_refused(run, other):
    """A run giving scaling_factor and iteration_time (or tokens_per_second_per_gpu) was
    fitted by its scaling factor alone, the time ignored without a word (the codec fit
    took the time instead), even when the two contradicted each other."""
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster([run, dict(model=run["model"], n=64, bw=400e9, scaling_factor=0.8)])
    msg = str(err.value)
    assert err.value.parameter == "runs[0].scaling_factor" and "scaling_factor=0.9" in msg
    assert other in msg


@pytest.mark.parametrize("kw, name", [
    (dict(alpha=1e300), "alpha"), (dict(alpha="1e308s"), "alpha"),
    (dict(gpus_per_node=8, intra_alpha=1e300), "intra_alpha"),
    (dict(alpha=np.array([1e-6, 1e308])), "alpha"),
])
def test_a_latency_beyond_a_day_is_refused(kw, name):
    """alpha=1e308 s answered an infinite iteration time and a scaling factor of 0 without
    a word (alpha=1e300 s: 1e302 s per iteration)."""
    with pytest.raises(InvalidParameterError) as err:
        sm.iteration_time("resnet50", 64, 10e9, **kw)
    assert err.value.parameter == name and "at most 86400 s" in str(err.value)
    with pytest.raises(InvalidParameterError, match="alpha=1e\\+300"):
        sm.ClusterProfile(alpha=1e300)


def test_cli_latency_beyond_a_day_is_one_line(capsys):
    from scalemodel.cli import main
    assert main(["scaling", "--model", "resnet50", "--n", "64", "--bw", "10Gbps",
                 "--alpha", "1e300"]) == 2
    err = capsys.readouterr().err
    assert "--alpha='1e300' is invalid: must be at most 86400 s" in err and "Traceback" not in err


@pytest.mark.parametrize("field", ["hidden", "ffn", "vocab", "seq"])
def test_an_absurd_transformer_width_is_refused_by_name(field):
    """TransformerConfig(hidden=10**400) was accepted and transformer_profile then ended in
    a bare OverflowError (int too large to convert to float)."""
    from scalemodel.workloads import TransformerConfig
    kw = dict(layers=2, hidden=256, heads=8, ffn=688, vocab=32000, seq=128)
    kw[field] = 10**400 if field != "hidden" else 8 * 10**400
    with pytest.raises(InvalidParameterError) as err:
        TransformerConfig(**kw)
    assert err.value.parameter == field and "must be at most 2,147,483,647" in str(err.value)


_TRACE = Path(__file__).parent / "data" / "traces" / "ddp_2ranks_allreduce_b.json.gz"


def _edited_trace(tmp_path, edit):
    import gzip
    import json
    data = json.loads(gzip.decompress(_TRACE.read_bytes()))
    edit(data)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("info, field, shown", [
    ({"world_size": 10**30, "rank": 0}, "distributedInfo.world_size", str(10**30)),
    ({"world_size": "2", "rank": 0}, "distributedInfo.world_size", "'2'"),
    ({"world_size": 2.5, "rank": 0}, "distributedInfo.world_size", "2.5"),
    ({"world_size": 2, "rank": "0"}, "distributedInfo.rank", "'0'"),
    ({"world_size": 2, "rank": 7}, "distributedInfo.rank", "7"),
])
def test_trace_world_size_and_rank_are_integers(tmp_path, info, field, shown):
    """A trace's world_size of 10**30 was refused as 'n=10...', a parameter the user never
    wrote; "2" and 2.5 were read as 2, and a rank "0" or 7 of 2 as an unknown rank."""
    from scalemodel.calibrate import read_trace
    from scalemodel.exceptions import ProfileFormatError
    path = _edited_trace(tmp_path, lambda d: d["distributedInfo"].update(info))
    with pytest.raises(ProfileFormatError) as err:
        read_trace(path)
    assert err.value.field == field and shown in str(err.value)


def test_a_trace_step_longer_than_a_day_is_skipped_and_said(tmp_path):
    """A ProfilerStep of 1e300 us was taken: the step time was 1e294 s."""
    from scalemodel.calibrate import read_trace

    def edit(d):
        next(e for e in d["traceEvents"]
             if str(e.get("name", "")).startswith("ProfilerStep"))["dur"] = 1e300
    rep = read_trace(_edited_trace(tmp_path, edit))
    assert rep.step_time == pytest.approx(read_trace(_TRACE).step_time, rel=0.05)
    assert any("1 event(s)" in n and "over a day" in n for n in rep.notes)


@pytest.mark.parametrize("text, field, words", [
    ("", "<file>", "is empty"),
    ("\n  \n", "<file>", "is empty"),
    ("model,n,bw,scaling_factor\n", "<file>", "has a header but no runs"),
    ("resnet50,16,10Gbps,0.5\n", "<header>", "the header line is missing"),
    ("model;n;bw;scaling_factor\nresnet50;16;10Gbps;0.5\n", "<header>",
     "not separated by commas"),
])
def test_a_runs_csv_without_runs_names_the_file(tmp_path, capsys, text, field, words):
    """An empty CSV, one with only a header, one without a header line or one separated
    by ';' all said 'runs=[] is invalid: needs at least one run', naming neither the file
    nor what was wrong (the semicolon one: 'runs[0]=['model;n;bw;scaling_factor'] has
    unknown keys')."""
    from scalemodel.cli import main
    from scalemodel.exceptions import ProfileFormatError
    path = tmp_path / "runs.csv"
    path.write_text(text)
    with pytest.raises(ProfileFormatError) as err:
        sm.fit_cluster(str(path))
    assert err.value.field == field and words in str(err.value)
    assert "runs.csv" in str(err.value)
    assert main(["fit", str(path)]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("key, value, expected", [
    ("algorithm", 0, "expected a string"), ("algorithm", [], "expected a string"),
    ("fusion", 5, "expected a name (ddp"), ("model", 5, "expected a built-in profile name"),
])
def test_a_runs_setting_of_the_wrong_type_is_named(key, value, expected):
    """A run's algorithm=0 or [] was read as blank (the fit's own algorithm) without a word,
    and a run's fusion=5 was 'expected a model' (every renamed type error said so)."""
    run = dict(_TWO_RUNS[0], **{key: value})
    with pytest.raises(ParameterTypeError) as err:
        sm.fit_cluster([run, _TWO_RUNS[1]])
    assert err.value.parameter == f"runs[0].{key}"
    assert f"runs[0].{key}={value!r}" in str(err.value) and expected in str(err.value)


@pytest.mark.parametrize("value", [1e-300, 1e-7])
def test_a_runs_uncertainty_below_a_millionth_is_named(value):
    """uncertainty=1e-300 ended in 'the fit of ceiling failed to start', naming neither
    the run nor its uncertainty."""
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster([dict(_TWO_RUNS[0], uncertainty=value), _TWO_RUNS[1]])
    assert err.value.parameter == "runs[0].uncertainty"
    assert f"runs[0].uncertainty={value!r} is invalid: must be in [1e-06, 1]" in str(err.value)


def _cluster_json(tmp_path, body, prefix=b""):
    path = tmp_path / "cluster.json"
    path.write_bytes(prefix + ('{"format": "scalemodel-cluster", "format_version": 1, '
                               '"provenance": {"source": "test"}, "name": "c", '
                               + body + '}').encode())
    return path


def test_a_key_twice_in_a_json_file_is_refused(tmp_path):
    """A cluster file giving utilization twice (0.8, then 0.1) was read as 0.1 without a
    word: json keeps the last value."""
    from scalemodel.exceptions import ProfileFormatError
    path = _cluster_json(tmp_path, '"alpha": 1e-5, "utilization": 0.8, "utilization": 0.1')
    with pytest.raises(ProfileFormatError) as err:
        sm.load_cluster(path)
    assert err.value.field == "<json>"
    assert "'utilization' appears twice" in str(err.value) and "0.8 and 0.1" in str(err.value)


def test_a_json_file_with_a_byte_order_mark_is_read(tmp_path):
    """A JSON file saved with a byte-order mark (Notepad) was 'not valid JSON: Unexpected
    UTF-8 BOM (decode using utf-8-sig)', while a runs CSV with one was read."""
    path = _cluster_json(tmp_path, '"alpha": 1e-5, "utilization": 0.8', b"\xef\xbb\xbf")
    assert sm.load_cluster(path).utilization == 0.8


@pytest.mark.parametrize("name", [5, None, b"c"])
def test_a_cluster_name_is_a_string(name):
    """ClusterProfile(name=5) (or None) was kept and written to its file as such."""
    with pytest.raises(ParameterTypeError) as err:
        sm.ClusterProfile(name=name)
    assert err.value.parameter == "name" and f"name={name!r}" in str(err.value)


@pytest.mark.parametrize("key, value, words", [
    ("num_hidden_layers", 0, "must be an integer >= 1"),
    ("num_attention_heads", 7, "valid: 1, 2, 4, 8, 16, 32, 64, 128, 256"),
    ("hidden_size", 256.0, "expected an integer"),
    ("vocab_size", float("nan"), "expected an integer"),
])
def test_a_config_json_error_names_the_key_the_user_wrote(tmp_path, capsys, key, value,
                                                          words):
    """A config.json with num_hidden_layers 0 said 'layers=0 is invalid', a field the user
    never wrote, and heads not dividing the hidden size did not say which would."""
    import json
    from scalemodel.cli import main
    config = dict(_LLAMA, **{key: value})
    with pytest.raises((InvalidParameterError, ParameterTypeError)) as err:
        sm.TransformerConfig.from_hf_config(config)
    assert err.value.parameter == f"config.{key}" and words in str(err.value)
    assert f"config.{key}={value!r}" in str(err.value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["scaling", "--model", str(path), "--n", "64", "--bw", "10Gbps"]) == 2
    assert f"config.{key}=" in capsys.readouterr().err


def test_ctrl_c_in_the_cli_is_one_line(monkeypatch, capsys):
    """Ctrl-C during `scalemodel fit ... --out` printed a KeyboardInterrupt traceback from
    deep inside the fit (the file itself was never half written)."""
    import scalemodel.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_resolve", interrupted)
    assert cli.main(["profiles"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("scalemodel: interrupted") and "Traceback" not in err


def test_a_fit_error_about_a_worker_count_names_the_run():
    """fit_cluster(..., algorithm='hierarchical') with a run of n=12 on 8 GPUs per node
    said 'n=12 is invalid', naming no run."""
    runs = [dict(model="bert", n=64, bw=400e9, scaling_factor=0.85),
            dict(model="bert", n=12, bw=400e9, scaling_factor=0.9)]
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(runs, algorithm="hierarchical", gpus_per_node=8)
    assert err.value.parameter == "runs[1].n" and "runs[1].n=12 is invalid" in str(err.value)
    assert "multiple of gpus_per_node=8" in str(err.value)


@pytest.mark.parametrize("kw, name", [(dict(efficiency=10**400), "efficiency"),
                                      (dict(update_time=10**400), "update_time")])
def test_transformer_profile_huge_integers_are_named(kw, name):
    """transformer_profile(efficiency=10**400) or update_time=10**400 ended in a bare
    OverflowError (int too large to convert to float) before the check naming them."""
    from scalemodel.workloads import TransformerConfig, transformer_profile
    cfg = TransformerConfig(layers=2, hidden=256, heads=8, ffn=688, vocab=32000, seq=128)
    with pytest.raises(InvalidParameterError) as err:
        transformer_profile(cfg, **kw)
    assert err.value.parameter == name


@pytest.mark.parametrize("value", [[], [1e9, 2e9]])
def test_cluster_ceiling_is_one_number(value):
    """ClusterProfile(ceiling=[]) ended in a bare TypeError from float()."""
    with pytest.raises(ParameterTypeError) as err:
        sm.ClusterProfile(ceiling=value)
    assert err.value.parameter == "ceiling"


def test_runs_model_of_an_unhashable_type_is_named():
    """runs[0].model=[] ended in a bare TypeError (unhashable type: 'list')."""
    with pytest.raises(ParameterTypeError) as err:
        sm.fit_cluster([dict(_TWO_RUNS[0], model=[]), _TWO_RUNS[1]])
    assert err.value.parameter == "runs[0].model"


@pytest.mark.parametrize("call, name", [
    (lambda: __import__("scalemodel.fit_transport", fromlist=["x"]).load_transport(
        H100_LOG, line_rate=[]), "line_rate"),
    (lambda: __import__("scalemodel.fit_transport", fromlist=["x"]).load_transport(
        H100_LOG, line_rate=400e9, gpus_per_node="x"), "gpus_per_node"),
    (lambda: __import__("scalemodel.fit_transport", fromlist=["x"]).load_transport(
        H100_LOG, line_rate=400e9, nics_per_node=[]), "nics_per_node"),
    (lambda: __import__("scalemodel.calibrate", fromlist=["x"]).read_trace(
        _TRACE, line_rate=[]), "line_rate"),
])
def test_transport_and_trace_options_of_the_wrong_type_are_named(call, name):
    """load_transport(line_rate=[]) and read_trace(line_rate=[]) ended in a bare TypeError
    from float(), load_transport(gpus_per_node='x') in '>' not supported between int and
    str, nics_per_node=[] in a ValueError about an array's truth value."""
    with pytest.raises(ParameterTypeError) as err:
        call()
    assert err.value.parameter == name


def test_read_trace_takes_a_bytes_path(tmp_path):
    """read_trace(b'path') iterated the bytes and tried to open file 47, 116, ..."""
    from scalemodel.calibrate import read_trace
    assert read_trace(os.fsencode(_TRACE)).world_size == read_trace(_TRACE).world_size


@pytest.mark.parametrize("value", [5e-324, 1e-300, np.array([0.5, 1e-12])])
def test_a_vanishing_utilization_is_refused(value):
    """utilization=5e-324 answered an infinite iteration time and a scaling factor of 0
    without a word (1e-300: an iteration of 1.6e299 s)."""
    with pytest.raises(InvalidParameterError) as err:
        sm.iteration_time("resnet50", 64, 10e9, utilization=value)
    assert err.value.parameter == "utilization" and "at least 1e-09" in str(err.value)
    assert sm.iteration_time("resnet50", 64, 10e9, utilization=1e-9).total < math.inf


def test_cli_fit_passes_on_a_cluster_files_model_warning(tmp_path, capsys):
    """`scalemodel fit runs.csv --cluster c.json` dropped every warning that was not a
    CalibrationWarning: a --cluster file's unknown key, said by every other command, went
    unsaid."""
    from scalemodel.cli import main
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50,16,10Gbps,0.6\n"
                    "resnet50,64,10Gbps,0.5\n")
    cluster = _cluster_json(tmp_path, '"alpha": 1e-5, "utilization": 0.8, "bogus": 1')
    assert main(["fit", str(runs), "--cluster", str(cluster)]) == 0
    err = capsys.readouterr().err
    assert "scalemodel: warning:" in err and "'bogus' is not a key" in err


def test_from_trace_out_under_a_file_is_refused_before_reading(tmp_path, capsys):
    """from-trace --out a_file/job analysed the trace, then said 'cannot write its files
    (a_file): File exists'; under /proc/self it named its own temporary file."""
    from scalemodel.calibrate.trace_report import main as from_trace
    (tmp_path / "a_file").write_text("")
    assert from_trace([str(_TRACE), "--out", str(tmp_path / "a_file" / "job")]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "nothing was read" in err
    assert ".tmp" not in err


@pytest.mark.parametrize("argv, shown", [
    (["--fit", "bogus"], "--fit=['bogus'] is invalid"),
    (["--hold", "ceiling", "--fit", "ceiling"], "--hold=['ceiling'] is invalid"),
    (["--allow-folder", "/nonexistent-folder"], "--allow-folder='/nonexistent-folder'"),
])
def test_cli_fit_errors_name_the_option(tmp_path, capsys, argv, shown):
    """scalemodel fit's errors named fit_cluster's keywords (fit=['bogus'],
    allow_folder=...), not the options the user typed."""
    from scalemodel.cli import main
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nresnet50,16,10Gbps,0.6\n")
    assert main(["fit", str(runs), *argv]) == 2
    assert shown in capsys.readouterr().err


def test_a_file_that_is_not_a_profile_is_not_called_one(tmp_path):
    """A runs CSV or an nccl-tests log that was not UTF-8 was reported as 'profile x.csv:
    field '<file>': run list: ...'."""
    from scalemodel.calibrate.nccl_tests import read_nccl_tests
    from scalemodel.exceptions import ProfileFormatError
    path = tmp_path / "x.csv"
    path.write_bytes(b"\xff\xfemodel")
    with pytest.raises(ProfileFormatError) as err:
        sm.fit_cluster(str(path))
    assert str(err.value).startswith(f"run list {path}: field '<file>': is not UTF-8")
    with pytest.raises(ProfileFormatError) as err:
        read_nccl_tests(path)
    assert str(err.value).startswith(f"nccl-tests output {path}: field '<file>'")


@pytest.mark.parametrize("cell, hint", [("90%", "90 % is 0.9"), ("fast", "")])
def test_a_runs_csv_cell_that_is_no_number_says_so(tmp_path, cell, hint):
    """A CSV cell '90%' was 'runs[0].scaling_factor='90%' has type str; expected a
    number': every CSV cell is text."""
    path = tmp_path / "runs.csv"
    path.write_text(f"model,n,bw,scaling_factor\nresnet50,16,10Gbps,{cell}\n")
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(str(path))
    msg = str(err.value)
    assert f"runs[0].scaling_factor={cell!r} is invalid: is not a number" in msg
    assert hint in msg


@pytest.mark.parametrize("value, exc", [("bogus", InvalidParameterError),
                                        (5, ParameterTypeError)])
def test_fit_cluster_implementation_is_checked_without_compressed_runs(value, exc):
    """fit_cluster(implementation='bogus') was accepted when no run was compressed (it was
    read only by the codec fit)."""
    with pytest.raises(exc) as err:
        sm.fit_cluster(_TWO_RUNS, implementation=value)
    assert err.value.parameter == "implementation"
