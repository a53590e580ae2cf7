"""Bad input found by a new-user sweep of the public API, the CLI and the files it reads
(session 13, issues 17 and 20): each test reproduces a defect that was fixed, a bare
Python error, a message naming a parameter the user never wrote, or an infinite answer,
and checks the documented exception, the parameter it names and the value shown."""

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.cli import main
from scalemodel.exceptions import (InvalidParameterError, ParameterTypeError,
                                   ProfileFormatError)

LLM = "llama-2-7b"
H100_LOG = Path(__file__).parent / "data" / "nccl_tests_all_reduce_2x8_h100.txt"
RUNS = [dict(model="bert", n=16, bw=400e9, scaling_factor=0.9)]


# --------------------------------------------------------------------------- the API


@pytest.mark.parametrize("call", [
    lambda n: sm.scaling_factor("bert", n, 10e9),
    lambda n: sm.iteration_time("bert", n, 10e9),
    lambda n: sm.min_compression("bert", 10e9, n=n),
])
@pytest.mark.parametrize("n, shown", [([8, 0], "n=0 is"), (np.array([8, -3]), "n=-3 is")])
def test_a_worker_count_out_of_range_in_a_list_is_shown_as_written(call, n, shown):
    """n=[8, 0] said 'n=0.0 is invalid: must be an integer', a value the user never
    wrote (the array was read as floats)."""
    with pytest.raises(InvalidParameterError) as err:
        call(n)
    assert err.value.parameter == "n" and shown in str(err.value)


@pytest.mark.parametrize("model, kw, shown", [
    (LLM, dict(microbatches=10**30, pp=2), "must be at most 1,000,000"),
    (LLM, dict(microbatches=10**30), "must be at most 1,000,000"),
    ("llama-2-70b", dict(microbatches=10**6, pp=2), "longer than a day"),
])
def test_too_many_microbatches_are_named(model, kw, shown):
    """ProfileFormatError 'profile <object>: field grad_accum' before: a field of an
    internal profile, not the microbatches= the user gave."""
    with pytest.raises(InvalidParameterError) as err:
        sm.iteration_time(model, 64, 100e9, **kw)
    assert err.value.parameter == "microbatches"
    assert f"microbatches={kw['microbatches']}" in str(err.value) and shown in str(err.value)


@pytest.mark.parametrize("kw, name", [
    (dict(n=10**30), "n"),                                     # AttributeError before
    (dict(n=2**40), "n"),
    (dict(n=64, sharding="zero3", shard_group=10**30), "shard_group"),  # OverflowError
])
def test_memory_refuses_huge_counts_by_name(kw, name):
    with pytest.raises(InvalidParameterError) as err:
        sm.memory(LLM, **kw)
    assert err.value.parameter == name and f"{name}={kw[name]}" in str(err.value)


@pytest.mark.parametrize("kw, name", [
    (dict(efficiency=1e-300), "efficiency"),   # ProfileFormatError on forward_time before
    (dict(update_time=1e6), "update_time"),
])
def test_transformer_profile_names_what_makes_the_step_longer_than_a_day(kw, name):
    cfg = sm.TransformerConfig(layers=4, hidden=256, heads=8, ffn=1024, vocab=1000)
    with pytest.raises(InvalidParameterError) as err:
        sm.transformer_profile(cfg, **kw)
    assert err.value.parameter == name and "a day" in str(err.value)


@pytest.mark.parametrize("kw", [dict(n=1), dict(n=8, gpus_per_node=8)])
def test_plan_effective_ratio_is_finite_when_nothing_crosses_a_nic(kw):
    """Every row said effective_ratio=inf ('infx' on the wire) for one worker or one
    node: 0 wire bits over 0."""
    plan = sm.plan_compression("bert", 10e9, **kw)
    assert [r.effective_ratio for r in plan.rows] == [1.0] * len(plan.rows)


@pytest.mark.parametrize("call, name", [
    (lambda tmp: sm.save_profile("resnet50", tmp / "p.json"), "profile"),  # AttributeError
    (lambda tmp: sm.save_cluster({"alpha": 0}, tmp / "c.json"), "cluster"),
    (lambda tmp: sm.save_profile(sm.load_profile("resnet50"), 5), "path"),  # TypeError
    (lambda tmp: sm.save_cluster(sm.ClusterProfile(), None), "path"),
])
def test_save_refuses_wrong_types_by_name(tmp_path, call, name):
    with pytest.raises(ParameterTypeError) as err:
        call(tmp_path)
    assert err.value.parameter == name
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("save, obj", [(sm.save_profile, "resnet50"),
                                       (sm.save_cluster, None)])
def test_save_refuses_an_empty_path(save, obj):
    """path='' was read as the current folder: IsADirectoryError naming '.'."""
    obj = sm.load_profile(obj) if obj else sm.ClusterProfile()
    with pytest.raises(InvalidParameterError) as err:
        save(obj, "")
    assert err.value.parameter == "path" and "path=''" in str(err.value)


# --------------------------------------------------------------------------- config.json

QWEN = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
        "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
        "vocab_size": 151936, "tie_word_embeddings": True}
GEMMA = {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
         "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
         "vocab_size": 256000, "head_dim": 256}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        "vocab_size": 50257, "n_positions": 1024}
FALCON = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
          "num_attention_heads": 71, "vocab_size": 65024}


@pytest.mark.parametrize("base, key, value, exc", [
    (QWEN, "hidden_size", "896", ParameterTypeError),        # TypeError: str // int
    (QWEN, "hidden_size", [896], ParameterTypeError),
    (QWEN, "num_attention_heads", 0, InvalidParameterError),  # ZeroDivisionError
    (QWEN, "num_attention_heads", "14", ParameterTypeError),
    (QWEN, "num_key_value_heads", "2", ParameterTypeError),   # TypeError: int + str
    (QWEN, "num_key_value_heads", {"a": 1}, ParameterTypeError),
    (GEMMA, "head_dim", {"a": 1}, ParameterTypeError),        # TypeError: dict * int
    (GEMMA, "num_attention_heads", {"a": 1}, ParameterTypeError),
    (GPT2, "n_embd", {"a": 1}, ParameterTypeError),           # TypeError: 4 * dict
    (FALCON, "hidden_size", {"a": 1}, ParameterTypeError),
    (GPT2, "n_positions", -1, InvalidParameterError),        # named learned_positions
    (GPT2, "n_positions", "1024", ParameterTypeError),
])
def test_hf_config_values_of_the_wrong_type_are_named_by_their_key(base, key, value, exc):
    cfg = copy.deepcopy(base)
    cfg[key] = value
    with pytest.raises(exc) as err:
        sm.TransformerConfig.from_hf_config(cfg)
    assert err.value.parameter == f"config.{key}"
    assert f"config.{key}={value!r}" in str(err.value)


# --------------------------------------------------------------------------- files


def _fitted_cluster(tmp_path):
    path = tmp_path / "c.json"
    fit = sm.fit_cluster([dict(model="resnet50", n=16, bw="25Gbps", iteration_time=0.26,
                               single_worker_time=0.2),
                          dict(model="resnet50", n=64, bw="25Gbps", iteration_time=0.3,
                               single_worker_time=0.2)], gpus_per_node=8)
    sm.save_cluster(fit.cluster, path)
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["intervals"]["ceiling"].__setitem__(0, 10**400), "intervals"),  # Overflow
    (lambda d: d["intervals"]["ceiling"].__setitem__(1, 10**400), "intervals"),
    (lambda d: d.__setitem__("format_version", True), "format_version"),  # read as 1
    (lambda d: d.__setitem__("intervals", 0), "intervals"),               # read as {}
    (lambda d: d.__setitem__("intervals", []), "intervals"),
    (lambda d: d.__setitem__("fit_settings", []), "fit_settings"),
])
def test_cluster_files_of_the_wrong_shape_or_size_are_refused(tmp_path, edit, field):
    path = _fitted_cluster(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileFormatError) as err:
        sm.load_cluster(path)
    assert err.value.field.startswith(field) and str(path) in str(err.value)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.__setitem__("forward_time", 10**400), "forward_time"),  # OverflowError
    (lambda d: d.__setitem__("update_time", 10**400), "update_time"),
    (lambda d: d["tensors"].__setitem__("shapes", [[10**400]] + [[b] for b in
                                                                d["tensors"]["bytes"][1:]]),
     "tensors.shapes[0]"),
])
def test_profile_files_with_huge_numbers_are_refused(tmp_path, edit, field):
    path = tmp_path / "p.json"
    sm.save_profile(sm.load_profile("resnet50"), path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileFormatError) as err:
        sm.load_profile(str(path))
    assert err.value.field == field


def _transport(tmp_path, text, name="log.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_transport_log_without_rank_lines_is_named(tmp_path):
    """AttributeError ('NoneType' object has no attribute 'intervals') before: the log's
    world size read as nGpus 1."""
    text = "".join(line for line in H100_LOG.read_text().splitlines(True)
                   if "Rank" not in line)
    log = _transport(tmp_path, text)
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(RUNS, transport=log, nics_per_node=8)
    assert err.value.parameter == "transport" and str(log) in str(err.value)
    assert "world size 1" in str(err.value)


def test_two_transport_logs_across_nodes_are_named_as_the_transport(tmp_path):
    """'fits=[4e11, 4e11] is invalid: one fit per line rate' before: a parameter the
    user never wrote."""
    a = _transport(tmp_path, H100_LOG.read_text(), "a.txt")
    b = _transport(tmp_path, H100_LOG.read_text(), "b.txt")
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(RUNS, transport=[a, b], nics_per_node=8)
    assert err.value.parameter == "transport" and "2 all-reduce logs across nodes" in \
        str(err.value)


def test_an_empty_transport_path_is_shown_as_given():
    """transport='' said "transport='.' is invalid: not a regular file"."""
    with pytest.raises(InvalidParameterError) as err:
        sm.fit_cluster(RUNS, transport="")
    assert err.value.parameter == "transport" and "transport=''" in str(err.value)


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("argv", [
    ["best-bucket", "--model", LLM, "--n", "64", "--bw", "100Gbps", "--gpu", "8"],
    ["best-bucket", "--model", LLM, "--n", "64", "--bw", "100Gbps", "--gpu=rtx"],
])
def test_cli_option_of_another_command_is_not_read_as_an_abbreviation(capsys, argv):
    """best-bucket has no --gpu: argparse read it as --gpus-per-node (--gpu 8 was
    answered with 8 GPUs per node; --gpu rtx said "--gpus-per-node='rtx' is invalid")."""
    with pytest.raises(SystemExit) as code:
        main(argv)
    assert code.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--gpu is not an option of best-bucket" in err and len(err.splitlines()) == 1
    assert "gpus-per-node" not in err


def test_cli_fit_refuses_another_commands_option(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nbert,16,400Gbps,0.9\n")
    with pytest.raises(SystemExit) as code:
        main(["fit", str(runs), "--gpu", "8", "--out", str(tmp_path / "c.json")])
    assert code.value.code == 2 and not (tmp_path / "c.json").exists()
    assert "--gpu is not an option of fit" in capsys.readouterr().err


def test_cli_microbatches_beyond_the_bound_are_named(capsys):
    assert main(["iteration", "--model", LLM, "--n", "64", "--bw", "100Gbps", "--pp", "2",
                 "--microbatches", "99999999999999999999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scalemodel: error: --microbatches=99999999999999999999 is invalid")


def test_a_codec_fit_not_used_is_written_as_strict_json(tmp_path):
    """A compressed run the model is already slower than (a negative codec cost) left
    'scale': NaN in the fitted cluster file, which is not JSON to strict readers (jq,
    JavaScript); now null, as the fit's --json already printed it."""
    runs = [dict(model="resnet50", n=16, bw="25Gbps", iteration_time=0.26,
                 single_worker_time=0.2),
            dict(model="resnet50", n=64, bw="25Gbps", iteration_time=0.3,
                 single_worker_time=0.2),
            dict(model="resnet50", n=64, bw="25Gbps", iteration_time=0.25,
                 single_worker_time=0.2, compressor="int8")]
    fit = sm.fit_cluster(runs, gpus_per_node=8)
    assert fit.codec["int8"].status == "negative"
    path = sm.save_cluster(fit.cluster, tmp_path / "c.json")

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["codec_fit"]["int8"]["scale"] is None
    sm.load_cluster(path)  # and it reads back


@pytest.mark.parametrize("value", [10**12, 2**31])
def test_a_config_context_length_beyond_the_bound_is_named_by_its_key(tmp_path, value):
    """max_position_embeddings 10**12 was refused as 'seq=1000000000000', a parameter
    the user never wrote (the config's context length is the default seq)."""
    from scalemodel.hf_configs import load_hf_profile

    cfg = dict(QWEN, model_type="llama", max_position_embeddings=value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InvalidParameterError) as err:
        load_hf_profile(path)
    assert err.value.parameter == "config.max_position_embeddings"
    assert f"config.max_position_embeddings={value} is invalid" in str(err.value)


@pytest.mark.parametrize("kw", [dict(bucket_bytes=np.int64(2**20)),
                                dict(fragmentation=np.float32(0.25)),
                                dict(host_memory=np.int64(2**40), offload="optimizer")])
def test_memory_takes_numpy_numbers(kw):
    """bucket_bytes=np.int64(2**20) was refused as 'must be a finite number of bytes >= 0'
    and fragmentation=np.float32(0.25) as 'must be a fraction in [0, 1)': both are."""
    plain = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in kw.items()}
    assert sm.memory(LLM, 64, **kw).per_gpu == pytest.approx(sm.memory(LLM, 64, **plain).per_gpu)


@pytest.mark.parametrize("kw, name", [(dict(bucket_bytes=10**400), "bucket_bytes"),
                                      (dict(host_memory=10**400, offload="optimizer"),
                                       "host_memory")])
def test_memory_sizes_beyond_a_float_are_named(kw, name):
    """OverflowError (math.isfinite of an int beyond 1.8e308) before."""
    with pytest.raises(InvalidParameterError) as err:
        sm.memory(LLM, 64, **kw)
    assert err.value.parameter == name


@pytest.mark.parametrize("field, value, exc", [
    ("hbm_bytes", 10**400, InvalidParameterError),          # OverflowError before
    ("nic_bw", 10**400, InvalidParameterError),
    ("sources", 5, ParameterTypeError),                     # TypeError: not iterable
    ("sources", "x", ParameterTypeError),                   # ValueError from dict()
])
def test_gpu_spec_fields_are_checked_by_name(field, value, exc):
    import attrs
    with pytest.raises(exc) as err:
        attrs.evolve(sm.get_gpu("h100-sxm"), **{field: value})
    assert err.value.parameter == field


@pytest.mark.parametrize("field, value", [("hbm_bytes", np.int64(80 * 2**30)),
                                          ("gpus_per_server", np.int64(8)),
                                          ("peak_flops", {"bf16": np.int64(10**15)})])
def test_gpu_spec_takes_numpy_integers(field, value):
    """np.int64 sizes were refused as 'must be a finite number > 0' (np.float64 passed)."""
    import attrs
    spec = attrs.evolve(sm.get_gpu("h100-sxm"), **{field: value})
    assert sm.memory(LLM, 64, gpu=spec).per_gpu > 0


@pytest.mark.parametrize("args, name", [((10**400, 64), "parameters"),   # OverflowError
                                        ((7e9, 10**400), "n")])
def test_memory_pressure_refuses_numbers_beyond_a_float_by_name(args, name):
    from scalemodel.efficiency import memory_pressure
    with pytest.raises(InvalidParameterError) as err:
        memory_pressure(*args, "a100-40gb")
    assert err.value.parameter == name


def test_memory_pressure_takes_numpy_integers():
    """np.int64 parameters and workers were refused as 'has type int64; expected a
    number of parameters'."""
    from scalemodel.efficiency import memory_pressure
    got = memory_pressure(np.int64(7 * 10**9), np.int64(64), "a100-40gb")
    assert got.share == memory_pressure(7 * 10**9, 64, "a100-40gb").share


@pytest.mark.parametrize("make, name, exc", [
    (lambda: sm.DDPBuckets(cap_bytes=[2**20]), "cap_bytes", ParameterTypeError),  # TypeError
    (lambda: sm.HorovodFusion(cycle_time=[0.005]), "cycle_time", ParameterTypeError),
    (lambda: sm.PowerSGD(min_compression_rate="x"), "min_compression_rate",
     ParameterTypeError),                                                    # ValueError
    (lambda: sm.PowerSGD(min_compression_rate=None), "min_compression_rate",
     ParameterTypeError),                                                    # TypeError
    (lambda: sm.PowerSGD(min_compression_rate=10**400), "min_compression_rate",
     InvalidParameterError),                                                 # OverflowError
    (lambda: sm.CastCompressor(dtype="fp8"), "dtype", InvalidParameterError),  # attrs' tuple
    (lambda: sm.CodecCost(encode=None, decode=0.0), "encode", ParameterTypeError),
    (lambda: sm.CodecCost(encode=1e-12, decode="x"), "decode", ParameterTypeError),
    (lambda: sm.CodecCost(encode=1e-12, decode=0.0, launch=10**400), "launch",
     InvalidParameterError),
])
def test_fusion_and_compressor_objects_check_their_fields_by_name(make, name, exc):
    with pytest.raises(exc) as err:
        make()
    assert err.value.parameter == name


@pytest.mark.parametrize("compressor, name", [
    (lambda: sm.PowerSGD(rank=10**400), "rank"),      # accepted; OverflowError when asked
    (lambda: sm.IntQuantizer(chunk=10**400), "chunk"),
    (lambda: sm.get_compressor("powersgd:99999999999999999999"), "compressor"),
])
def test_compressor_knobs_beyond_the_bound_are_refused_when_made(compressor, name):
    with pytest.raises(InvalidParameterError) as err:
        sm.compressed_scaling_factor("resnet50", compressor(), 64, 10e9)
    assert err.value.parameter == name


@pytest.mark.parametrize("call", [
    lambda: sm.ring_allreduce_time(1e6, 16, 10e9, gpus_per_nod=8),
    lambda: sm.collective_time("tree", 1e6, 16, 10e9, intra_bandwidth=1e12),
])
def test_a_misspelt_collective_keyword_is_named_with_the_known_ones(call):
    """TypeError 'CollectiveOptions.__init__() got an unexpected keyword argument' before:
    a class the caller never used."""
    with pytest.raises(InvalidParameterError) as err:
        call()
    assert err.value.parameter == "topology keyword" and "gpus_per_node" in str(err.value)


def test_trace_events_with_unhashable_threads_or_huge_ids_are_counted_malformed(tmp_path):
    """A cuda_runtime event whose tid is a list, or whose correlation id is beyond int64,
    grew some columns before it failed: IndexError ('index 42362 is out of bounds')
    deep in the analysis; now the event is skipped as malformed, the rest is read."""
    import gzip

    from scalemodel.calibrate.trace import read_trace

    src = Path(__file__).parent / "data" / "traces" / "ddp_1rank.json.gz"
    data = json.loads(gzip.open(src).read())
    runtime = [e for e in data["traceEvents"] if isinstance(e, dict)
               and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    for e in runtime[:3]:
        e["tid"] = []
    for e in runtime[3:6]:
        e.setdefault("args", {})["correlation"] = 10**400
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(data))
    assert read_trace([path]).profile is not None


@pytest.mark.parametrize("key, value, valid", [
    ("bucket_cap_mb", float("nan"), "[0, 1e+06] MB"), ("bucket_cap_mb", "inf", "[0, 1e+06] MB"),
    ("uncertainty", float("nan"), "[1e-06, 1]"), ("uncertainty", -0.0, "[1e-06, 1]")])
def test_a_run_number_that_is_not_finite_is_told_its_range(key, value, valid):
    """A NaN bucket size was told "must be finite and > 0", where 0 is valid (one
    collective per tensor), and a NaN uncertainty "> 0", where it must be 1e-6 to 1."""
    run = {"model": "resnet50", "n": 64, "bw": "100Gbps", "scaling_factor": 0.8, key: value}
    with pytest.raises(sm.InvalidParameterError, match=re.escape(valid)) as exc:
        sm.fit_cluster([run], fusion="ddp")
    assert f"runs[0].{key}=" in str(exc.value)


@pytest.mark.parametrize("model", ["/no/such/profile.json", "missing.json",
                                   Path("also-missing")])
def test_a_missing_profile_file_is_said_first(model):
    """A model given as a file that does not exist was answered "unknown name", the list
    of built-in names, and only at the end "(no such file here)"; the cause comes first."""
    with pytest.raises(sm.UnknownNameError, match="no such profile file") as exc:
        sm.scaling_factor(model, 8, 1e9)
    assert str(Path(model).absolute()) in str(exc.value)
    with pytest.raises(sm.UnknownNameError, match="unknown name. Did you mean 'resnet50'"):
        sm.scaling_factor("resnet5", 8, 1e9)  # a name stays a name


def test_memory_takes_sharding_as_the_time_calls_do():
    """memory(sharding=None) was refused ("has type NoneType") and a Sharding object too,
    while iteration_time takes both; now None is DDP and a Sharding gives its strategy and
    shard group (a different shard_group given beside it is refused by name)."""
    assert sm.memory("llama-2-7b", 8, sharding=None).per_gpu == \
        sm.memory("llama-2-7b", 8).per_gpu
    got = sm.memory("llama-2-7b", 64, sharding=sm.Sharding("zero3", shard_group=8))
    want = sm.memory("llama-2-7b", 64, sharding="zero3", shard_group=8)
    assert got.per_gpu == want.per_gpu and got.settings["shard_group"] == 8
    with pytest.raises(sm.InvalidParameterError, match="shard_group=16 .*shard_group=8"):
        sm.memory("llama-2-7b", 64, sharding=sm.Sharding("zero3", shard_group=8),
                  shard_group=16)


def test_a_wrapping_size_beyond_a_float_is_named():
    # SizeWrap(min_params=10**400) ended in OverflowError from math.isfinite
    with pytest.raises(sm.InvalidParameterError, match="min_params="):
        sm.SizeWrap(min_params=10**400)
