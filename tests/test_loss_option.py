"""``loss=`` ("unfused" | "fused", the loss's backward peak) on every call that reports
memory: the solvers, the planner and the CLI commands that print a memory line. Each
answer's memory equals :func:`scalemodel.memory`'s with the same settings and the same
loss (the reference), the fused figure is below the unfused one (so the option reaches
the check), the time answers do not change, and bad values are refused by name."""

import inspect
import json
import warnings

import pytest

import scalemodel as sm
from scalemodel.checkpointing import LOSS_KERNELS
from scalemodel.cli import main
from scalemodel.exceptions import ModelWarning
from scalemodel.whatif import whatif_table

from helpers_memory_options import BW, CFG, N, NODES, PROFILE, asks, cases, reference  # noqa: E402,F401

# (the question's settings, the same settings for memory()); the memory check of a
# TP x PP job is memory() of the job's GPUs (solvers.memory_check)
SETTINGS = [
    ({}, {}),
    (dict(sharding="zero3"), dict(sharding="zero3")),
    (dict(sharding="zero3", activation_checkpointing="full"),
     dict(sharding="zero3", activation_checkpointing="full")),
    (dict(sharding="zero2", offload="optimizer", **NODES),
     dict(sharding="zero2", offload="optimizer")),
    (dict(tp=2, **NODES), dict(tp=2)),
    (dict(tp=2, pp=2, microbatches=1, **NODES), dict(tp=2, pp=2, microbatches=1)),
]
IDS = ["ddp", "zero3", "zero3-full", "zero2-offload", "tp2", "tp2-pp2"]


def _reference(value, mem_kw, model=PROFILE, n=N):
    return reference("loss", value, mem_kw, model, n)


ASKS = asks("loss")


CASES = cases(ASKS, SETTINGS, IDS)


@pytest.mark.parametrize("name, kw, mem_kw", CASES)
def test_each_call_reports_memorys_figure_for_its_loss(name, kw, mem_kw):
    ask = ASKS[name]
    fused, unfused = ask("fused", kw), ask("unfused", kw)
    assert fused.memory_per_gpu == pytest.approx(_reference("fused", mem_kw), rel=1e-12)
    assert unfused.memory_per_gpu == pytest.approx(_reference("unfused", mem_kw), rel=1e-12)
    assert fused.memory_per_gpu < unfused.memory_per_gpu  # the option reaches the check
    assert fused.settings["loss"] == "fused" and unfused.settings["loss"] == "unfused"


def test_the_default_is_unfused_and_the_name_is_read_as_memory_reads_it():
    res = sm.min_compression(PROFILE, BW, n=N)
    assert res.settings["loss"] == "unfused"
    assert res.memory_per_gpu == pytest.approx(_reference("unfused", {}), rel=1e-12)
    assert sm.required_bandwidth(PROFILE, n=N, loss=" FUSED").settings["loss"] == "fused"


def test_the_time_answers_do_not_depend_on_the_loss():
    a = sm.min_compression(PROFILE, BW, n=N, sharding="zero3", loss="unfused")
    b = sm.min_compression(PROFILE, BW, n=N, sharding="zero3", loss="fused")
    assert (a.ratio, a.scaling_factor, a.binding) == (b.ratio, b.scaling_factor, b.binding)
    a = sm.required_bandwidth(PROFILE, n=N, loss="unfused")
    b = sm.required_bandwidth(PROFILE, n=N, loss="fused")
    assert a.bw == b.bw
    pa = sm.plan_compression(PROFILE, BW, n=N, compressors=["fp16"], loss="unfused")
    pb = sm.plan_compression(PROFILE, BW, n=N, compressors=["fp16"], loss="fused")
    assert [r.scaling_factor for r in pa.rows] == [r.scaling_factor for r in pb.rows]


def test_a_fused_loss_can_decide_whether_it_fits():
    # the note of a result that does not fit comes from the same memory() figure
    cfg = sm.llm_config("llama-2-7b", seq=4096, micro_batch=8)
    prof = sm.transformer_profile(cfg, "h100-sxm")
    per = {loss: sm.memory(prof, 8, sharding="zero3", loss=loss) for loss in LOSS_KERNELS}
    assert per["fused"].per_gpu < per["unfused"].per_gpu
    for loss, m in per.items():
        res = sm.min_compression(prof, BW, n=8, sharding="zero3", loss=loss)
        assert res.fits == bool(m.fits)
        assert ("does not fit" in res.message) == (not m.fits)


def test_only_the_calls_that_report_memory_take_loss():
    takes = (sm.memory, sm.min_compression, sm.required_bandwidth, sm.plan_compression)
    time_only = (sm.scaling_factor, sm.iteration_time, sm.compressed_scaling_factor,
                 sm.breakeven_bandwidth, sm.sensitivities, sm.best_bucket_size, whatif_table)
    for f in takes:
        assert inspect.signature(f).parameters["loss"].default == "unfused", f.__name__
    for f in time_only:
        assert "loss" not in inspect.signature(f).parameters, f.__name__


def test_ignored_loss_is_said():
    # a measured profile without gpu=: no memory check, so loss is ignored, and said
    with pytest.warns(ModelWarning, match="loss='fused' is ignored for bert-base"):
        res = sm.min_compression("bert", "10Gbps", loss="fused")
    assert res.memory_per_gpu is None and res.settings["loss"] == "fused"
    # with gpu=: memory() itself says its activations (the loss among them) are unknown
    with pytest.warns(ModelWarning, match="loss='fused' is left out"):
        sm.required_bandwidth("bert", gpu="h100-sxm", loss="fused")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.min_compression("bert", "10Gbps")  # the default says nothing


# ------------------------------------------------------------------ bad values, by name

BAD = ["flash", "", None, 1, True, "fused_crossentropy"]
CALLS = {
    "min_compression": lambda bad: sm.min_compression("bert", "10Gbps", loss=bad),
    "required_bandwidth": lambda bad: sm.required_bandwidth("bert", loss=bad),
    "plan_compression": lambda bad: sm.plan_compression("bert", "10Gbps", loss=bad),
    "memory_check": lambda bad: sm.solvers.memory_check(
        sm.Scenario.build("llama-2-7b"), 8, loss=bad),
    "memory": lambda bad: sm.memory("llama-2-7b", 8, loss=bad),  # the reference's error
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_loss_is_memorys_error_in_every_call(name, bad):
    # refused before any work, also where no memory would be checked (bert, no gpu=)
    with pytest.raises(sm.InvalidParameterError) as err:
        CALLS[name](bad)
    assert err.value.parameter == "loss"
    text = str(err.value)
    assert f"loss={bad!r} is invalid" in text and all(repr(k) in text for k in LOSS_KERNELS)


# ------------------------------------------------------------------ the CLI twin

def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CLI_SETTINGS = [([], {}), (["--sharding", "zero3", "--activation-checkpointing", "full"],
                           dict(sharding="zero3", activation_checkpointing="full"))]
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
             for command in sorted(CLI) for (extra, mem_kw), i in zip(CLI_SETTINGS,
                                                                      ["ddp", "zero3-full"])]


@pytest.mark.parametrize("command, extra, mem_kw", CLI_CASES)
def test_cli_prints_memorys_figure_for_its_loss(capsys, command, extra, mem_kw):
    argv, figure = CLI[command]
    got = {}
    for loss in LOSS_KERNELS:
        code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", *extra, "--loss", loss,
                              "--json")
        assert code == 0, err
        got[loss] = figure(json.loads(out))
        assert got[loss] == pytest.approx(_reference(loss, mem_kw, "llama-2-7b"), rel=1e-12)
    assert got["fused"] < got["unfused"]
    code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", *extra, "--json")
    assert code == 0 and figure(json.loads(out)) == got["unfused"]  # the default


@pytest.mark.parametrize("command", ["min-compression", "required-bandwidth", "iteration"])
def test_cli_memory_line_in_text(capsys, command):
    argv, _ = CLI[command]
    code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", "--sharding", "zero3",
                          "--loss", "fused")
    assert code == 0, err
    gib = _reference("fused", dict(sharding="zero3"), "llama-2-7b") / 2**30
    line = next(li for li in out.splitlines() if li.startswith("memory"))
    assert f"{gib:.1f} GiB per GPU reserved" in line


@pytest.mark.parametrize("command", sorted(CLI))
def test_cli_bad_loss_is_one_line_exit_2(capsys, command):
    argv, _ = CLI[command]
    code, out, err = _cli(capsys, *argv, "--model", "llama-2-7b", "--loss", "cheap")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalemodel: error: "), err
    assert "--loss='cheap' is invalid" in lines[0]
    assert all(repr(k) in lines[0] for k in LOSS_KERNELS)


def test_cli_commands_without_memory_do_not_take_loss(capsys):
    for argv in (["breakeven", "--model", "bert", "--loss", "fused"],
                 ["best-bucket", "--model", "bert", "--n", "8", "--bw", "10Gbps", "--loss",
                  "fused"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err  # an option of another command: said so
        assert f"--loss is not an option of {argv[0]}" in err
