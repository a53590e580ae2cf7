"""``accounting=`` ("zero" | "fsdp", how memory() counts the model state and the peak) on
every call that reports memory: the solvers, the planner and the CLI commands that print
a memory line, threaded as ``loss=`` is (tests/test_loss_option.py). Each answer's memory
equals :func:`scalemodel.memory`'s with the same settings and the same accounting (the
reference), the two accountings differ (so the option reaches the check), the time answers
do not change, and bad values and the combinations memory() refuses are refused by name,
with memory()'s own message."""

import inspect
import json
import re
import warnings

import pytest

import scalemodel as sm
from scalemodel.checkpointing import LOSS_KERNELS
from scalemodel.cli import main
from scalemodel.exceptions import ModelWarning
from scalemodel.memory import ACCOUNTINGS
from scalemodel.whatif import whatif_table

from helpers_memory_options import BW, CFG, N, NODES, PROFILE, asks, cases, reference  # noqa: E402,F401

# (the question's settings, the same settings for memory()); hybrid_shard's memory check
# shards within a node of gpus_per_node GPUs (solvers.memory_check)
SETTINGS = [
    (dict(sharding="zero2"), dict(sharding="zero2")),
    (dict(sharding="zero3"), dict(sharding="zero3")),
    (dict(sharding="zero3", activation_checkpointing="full"),
     dict(sharding="zero3", activation_checkpointing="full")),
    (dict(sharding="hybrid_shard", **NODES), dict(sharding="hybrid_shard", gpus_per_node=8)),
]
IDS = ["zero2", "zero3", "zero3-full", "hybrid_shard"]


def _reference(value, mem_kw, model=PROFILE, n=N):
    return reference("accounting", value, mem_kw, model, n)


ASKS = asks("accounting")


CASES = cases(ASKS, SETTINGS, IDS)


@pytest.mark.parametrize("name, kw, mem_kw", CASES)
def test_each_call_reports_memorys_figure_for_its_accounting(name, kw, mem_kw):
    ask = ASKS[name]
    fsdp, zero = ask("fsdp", kw), ask("zero", kw)
    assert fsdp.memory_per_gpu == pytest.approx(_reference("fsdp", mem_kw), rel=1e-12)
    assert zero.memory_per_gpu == pytest.approx(_reference("zero", mem_kw), rel=1e-12)
    # the option reaches the check: the two accountings differ by more than rounding
    assert abs(fsdp.memory_per_gpu - zero.memory_per_gpu) > 2**20
    assert fsdp.settings["accounting"] == "fsdp" and zero.settings["accounting"] == "zero"
    assert fsdp.settings["loss"] == "unfused"  # the other memory option keeps its default


def test_accounting_and_loss_together_are_memorys():
    kw = dict(sharding="zero3", activation_checkpointing="full")
    res = sm.min_compression(PROFILE, BW, n=N, loss="unfused+logits", accounting="fsdp",
                             **kw)
    ref = sm.memory(PROFILE, N, gpu="h100-sxm", loss="unfused+logits", accounting="fsdp",
                    **kw).per_gpu
    assert res.memory_per_gpu == pytest.approx(ref, rel=1e-12)
    assert (res.settings["loss"], res.settings["accounting"]) == ("unfused+logits", "fsdp")


def test_the_default_is_zero_and_the_name_is_read_as_memory_reads_it():
    res = sm.min_compression(PROFILE, BW, n=N, sharding="zero3")
    assert res.settings["accounting"] == "zero"
    assert res.memory_per_gpu == pytest.approx(_reference("zero", dict(sharding="zero3")),
                                               rel=1e-12)
    res = sm.required_bandwidth(PROFILE, n=N, sharding="zero3", accounting=" FSDP")
    assert res.settings["accounting"] == "fsdp"
    assert res.memory_per_gpu == pytest.approx(_reference("fsdp", dict(sharding="zero3")),
                                               rel=1e-12)


def test_the_memory_check_cache_is_keyed_by_the_accounting():
    sc = sm.Scenario.build(PROFILE, sharding="zero3")
    zero = sm.solvers.memory_check(sc, N, None, "unfused", "zero")[0]
    fsdp = sm.solvers.memory_check(sc, N, None, "unfused", "fsdp")[0]
    assert zero == pytest.approx(_reference("zero", dict(sharding="zero3")), rel=1e-12)
    assert fsdp == pytest.approx(_reference("fsdp", dict(sharding="zero3")), rel=1e-12)
    assert sm.solvers.memory_check(sc, N)[0] == zero  # the default, from the cache


def test_the_time_answers_do_not_depend_on_the_accounting():
    kw = dict(sharding="zero3")
    a = sm.min_compression(PROFILE, BW, n=N, accounting="zero", **kw)
    b = sm.min_compression(PROFILE, BW, n=N, accounting="fsdp", **kw)
    assert (a.ratio, a.scaling_factor, a.binding) == (b.ratio, b.scaling_factor, b.binding)
    a = sm.required_bandwidth(PROFILE, n=N, accounting="zero", **kw)
    b = sm.required_bandwidth(PROFILE, n=N, accounting="fsdp", **kw)
    assert a.bw == b.bw
    pa = sm.plan_compression(PROFILE, BW, n=N, compressors=["fp16"], accounting="zero", **kw)
    pb = sm.plan_compression(PROFILE, BW, n=N, compressors=["fp16"], accounting="fsdp", **kw)
    assert [r.scaling_factor for r in pa.rows] == [r.scaling_factor for r in pb.rows]


def test_the_accounting_can_decide_whether_it_fits():
    # llama-2-7b at 8 x 4096 on 32 H100 under zero3 with selective checkpointing: 81.2 GiB
    # under ZeRO's accounting (does not fit in 80), 78.9 under FSDP2's (fits); each
    # answer's fits and its "does not fit" note come from the same memory() figure
    cfg = sm.llm_config("llama-2-7b", seq=4096, micro_batch=8)
    prof = sm.transformer_profile(cfg, "h100-sxm")
    kw = dict(sharding="zero3", activation_checkpointing="selective")
    per = {acc: sm.memory(prof, 32, accounting=acc, **kw) for acc in ACCOUNTINGS}
    assert not per["zero"].fits and per["fsdp"].fits
    for acc, m in per.items():
        for res in (sm.min_compression(prof, BW, n=32, accounting=acc, **kw),
                    sm.plan_compression(prof, BW, n=32, compressors=["fp16"],
                                        accounting=acc, **kw)):
            assert res.fits == bool(m.fits)
            assert ("does not fit" in res.message) == (not m.fits)


def test_only_the_calls_that_report_memory_take_accounting():
    takes = (sm.memory, sm.min_compression, sm.required_bandwidth, sm.plan_compression,
             sm.solvers.memory_check)
    time_only = (sm.scaling_factor, sm.iteration_time, sm.compressed_scaling_factor,
                 sm.breakeven_bandwidth, sm.sensitivities, sm.best_bucket_size, whatif_table)
    for f in takes:
        assert inspect.signature(f).parameters["accounting"].default == "zero", f.__name__
    for f in time_only:
        assert "accounting" not in inspect.signature(f).parameters, f.__name__


def test_ignored_accounting_is_said():
    # a measured profile without gpu=: no memory check, so the accounting is ignored, said
    with pytest.warns(ModelWarning, match="accounting='fsdp' is ignored for bert-base"):
        res = sm.min_compression("bert", "10Gbps", sharding="zero3", accounting="fsdp")
    assert res.memory_per_gpu is None and res.settings["accounting"] == "fsdp"
    # with gpu=: memory() counts the model state of a config-less profile, nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = sm.required_bandwidth("bert", n=N, gpu="h100-sxm", sharding="zero3",
                                    accounting="fsdp")
        sm.min_compression("bert", "10Gbps", sharding="zero3")  # the default says nothing
    sc = sm.Scenario.build("bert", sharding="zero3")
    ref = sm.memory(sc.profile, N, gpu="h100-sxm", sharding="zero3", accounting="fsdp",
                    param_dtype=sc.sharding.param_dtype, grad_dtype=sc.sharding.reduce_dtype)
    assert res.memory_per_gpu == pytest.approx(ref.per_gpu, rel=1e-12)


# ------------------------------------------------------------------ refusals, by name

BAD = ["ddp", "", None, 1, True, "fsdp2"]
CALLS = {
    "min_compression": lambda bad, kw: sm.min_compression("bert", "10Gbps", accounting=bad,
                                                          **kw),
    "required_bandwidth": lambda bad, kw: sm.required_bandwidth("bert", accounting=bad, **kw),
    "plan_compression": lambda bad, kw: sm.plan_compression("bert", "10Gbps", accounting=bad,
                                                            **kw),
    "memory_check": lambda bad, kw: sm.solvers.memory_check(
        sm.Scenario.build("llama-2-7b", **kw), 8, accounting=bad),
}


def _memorys_error(accounting, model="llama-2-7b", **kw):
    with pytest.raises(sm.InvalidParameterError) as err:
        sm.memory(model, 8, accounting=accounting, **kw)
    assert err.value.parameter == "accounting"
    return str(err.value)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_accounting_is_memorys_error_in_every_call(name, bad):
    # refused before any work, also where no memory would be checked (bert, no gpu=)
    with pytest.raises(sm.InvalidParameterError) as err:
        CALLS[name](bad, dict(sharding="zero3"))
    assert err.value.parameter == "accounting"
    text = str(err.value)
    assert text == _memorys_error(bad, sharding="zero3")
    assert f"accounting={bad!r} is invalid" in text and all(repr(a) in text
                                                           for a in ACCOUNTINGS)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("sharding", ["zero1", None])
def test_fsdp_with_another_strategy_is_refused_as_memory_refuses_it(name, sharding):
    # also where no memory would be checked (bert, no gpu=)
    with pytest.raises(sm.InvalidParameterError) as err:
        CALLS[name]("fsdp", dict(sharding=sharding))
    assert err.value.parameter == "accounting"
    text = str(err.value)
    assert text == _memorys_error("fsdp", sharding=sharding or "none")
    assert repr(sharding or "none") in text and "zero2, zero3, hybrid_shard" in text


@pytest.mark.parametrize("name", sorted(ASKS))
@pytest.mark.parametrize("offload", ["optimizer", "optimizer+parameters"])
def test_fsdp_with_offload_is_refused_as_memory_refuses_it(name, offload):
    kw = dict(sharding="zero3", offload=offload, **NODES)
    with pytest.raises(sm.InvalidParameterError) as err:
        ASKS[name]("fsdp", kw)
    assert err.value.parameter == "accounting"
    ref = _memorys_error("fsdp", PROFILE, sharding="zero3", offload=offload)
    assert str(err.value) == ref and f"offload={offload!r}" in ref
    ASKS[name]("zero", kw)  # the default accounting takes it


# ------------------------------------------------------------------ the CLI twin

def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CLI_SETTINGS = [
    (["--sharding", "zero2"], dict(sharding="zero2")),
    (["--sharding", "zero3"], dict(sharding="zero3")),
    (["--sharding", "zero3", "--activation-checkpointing", "full"],
     dict(sharding="zero3", activation_checkpointing="full")),
    (["--sharding", "hybrid_shard", "--gpus-per-node", "8"],
     dict(sharding="hybrid_shard", gpus_per_node=8)),
]
CLI = {  # command: (argv, the memory figure in its --json output)
    "scaling": (["scaling", "--n", "64", "--bw", "100Gbps"],
                lambda d: d["results"][0]["memory_per_gpu"]),
    "min-compression": (["min-compression", "--n", "64", "--bw", "100Gbps"],
                        lambda d: d["memory_per_gpu"]),
    "required-bandwidth": (["required-bandwidth", "--n", "64"],
                           lambda d: d["memory_per_gpu"]),
    "iteration": (["iteration", "--n", "64", "--bw", "100Gbps"],
                  lambda d: d["memory_per_gpu"]),
    "plan": (["plan", "--n", "64", "--bw", "100Gbps", "--compressors", "fp16"],
             lambda d: d["memory_per_gpu"]),
}


CLI_CASES = [pytest.param(command, extra, mem_kw, id=f"{command}-{i}")
             for command in sorted(CLI) for (extra, mem_kw), i in zip(CLI_SETTINGS, IDS)]


@pytest.mark.parametrize("command, extra, mem_kw", CLI_CASES)
def test_cli_prints_memorys_figure_for_its_accounting(capsys, command, extra, mem_kw):
    argv, figure = CLI[command]
    got = {}
    for acc in ACCOUNTINGS:
        code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", *extra,
                              "--accounting", acc, "--json")
        assert code == 0, err
        got[acc] = figure(json.loads(out))
        assert got[acc] == pytest.approx(_reference(acc, mem_kw, "llama-2-7b"), rel=1e-12)
    assert abs(got["fsdp"] - got["zero"]) > 2**20
    code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", *extra, "--json")
    assert code == 0 and figure(json.loads(out)) == got["zero"]  # the default


@pytest.mark.parametrize("command", ["min-compression", "required-bandwidth", "iteration"])
def test_cli_memory_line_in_text(capsys, command):
    argv, _ = CLI[command]
    code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", "--sharding", "zero2",
                          "--accounting", "fsdp")
    assert code == 0, err
    gib = _reference("fsdp", dict(sharding="zero2"), "llama-2-7b") / 2**30
    line = next(li for li in out.splitlines() if li.startswith("memory"))
    assert f"{gib:.1f} GiB per GPU reserved" in line


def _one_error_line(code, out, err):
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalemodel: error: "), err
    return lines[0]


@pytest.mark.parametrize("command", sorted(CLI))
def test_cli_bad_accounting_is_one_line_exit_2(capsys, command):
    argv, _ = CLI[command]
    line = _one_error_line(*_cli(capsys, *argv, "--model", "llama-2-7b", "--sharding",
                                 "zero3", "--accounting", "ddp"))
    assert "--accounting='ddp' is invalid" in line
    assert all(repr(a) in line for a in ACCOUNTINGS)


@pytest.mark.parametrize("command", sorted(CLI))
@pytest.mark.parametrize("extra", [["--sharding", "zero1"],
                                   ["--sharding", "zero3", "--offload", "optimizer"]],
                         ids=["zero1", "offload"])
def test_cli_fsdp_refusals_are_memorys_one_line(capsys, command, extra):
    argv, _ = CLI[command]
    line = _one_error_line(*_cli(capsys, *argv, "--model", "llama-2-7b", *extra,
                                 "--accounting", "fsdp"))
    mem_kw = dict(zip(extra[::2], extra[1::2]))
    ref = _memorys_error("fsdp", **{k.lstrip("-"): v for k, v in mem_kw.items()})
    from scalemodel.cli import _in_cli_terms, build_parser  # (its keywords as options)
    assert line.startswith(f"scalemodel: error: {_in_cli_terms(ref, build_parser(), command)}")
    assert "--accounting='fsdp'" in line


def test_cli_commands_without_memory_do_not_take_accounting(capsys):
    for argv in (["breakeven", "--model", "bert", "--accounting", "fsdp"],
                 ["best-bucket", "--model", "bert", "--n", "8", "--bw", "10Gbps",
                  "--accounting", "fsdp"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err  # an option of another command: said so
        assert f"--accounting is not an option of {argv[0]}" in err


@pytest.mark.parametrize("command", sorted(CLI))
def test_cli_help_names_every_loss_kernel_and_accounting(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--loss {" + ",".join(LOSS_KERNELS) + "}" in text
    assert "--accounting {" + ",".join(ACCOUNTINGS) + "}" in text
    for kernel in LOSS_KERNELS:  # one phrase each ("fused: " not inside "unfused: ")
        assert re.search(rf"(?<![\w+]){re.escape(kernel)}: ", text), kernel
    for acc in ACCOUNTINGS:
        assert f"{acc} (" in text, acc
