"""Command-line values: every bad one gets the library's one-line message (exit 2) that
names the option and the value; lists carry a unit per item; every --help entry says what
the option is, its unit and its default (issue 11, "The command line")."""

import argparse
import json
import subprocess
import sys

import pytest

import scalemodel as sm
from scalemodel import cli


def run(*args):
    """``scalemodel ARGS`` in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse: --help, or its own errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def scaling_bws(*bw_args):
    code, out, err = run("scaling", "--model", "resnet50", "--n", "16", *bw_args, "--json")
    assert code == 0, err
    return [row["bw"] for row in json.loads(out)["results"]]


def test_each_list_item_carries_its_own_unit():
    # the first value used to be read with the second's unit: "1e+06 Tbit/s"
    assert scaling_bws("--bw", "1e9,10Gbps") == [1e9, 10e9]
    assert scaling_bws("--bw", "25GB/s,100GbE,400Mbps") == [200e9, 100e9, 400e6]


def test_bare_small_numbers_take_the_unit_of_the_last_item():
    """``1,10,100Gbps`` reads as written (the README's example); a bare number below
    1 Mbit/s is no line rate, so nothing that would be valid is reinterpreted."""
    assert scaling_bws("--bw", "1,10,100Gbps") == [1e9, 10e9, 100e9]
    assert scaling_bws("--bw", "1,2e9,10Gbps") == [1e9, 2e9, 10e9]


def test_bw_in_scientific_notation_as_in_the_api():
    assert scaling_bws("--bw", "10e9") == [10e9]
    code, out, err = run("min-compression", "--model", "bert", "--bw", "10e9", "--json")
    assert code == 0, err
    assert json.loads(out)["ratio"] == pytest.approx(sm.min_compression("bert", 10e9).ratio)


@pytest.mark.parametrize("bw", ["10gbps", "100gbe", "100GbE", "10 GBIT/S", "10Gb/s"])
def test_units_case_insensitive_where_unambiguous(bw):
    code, out, err = run("min-compression", "--model", "bert", "--bw", bw, "--json")
    assert code == 0, err
    want = 100e9 if "100" in bw else 10e9
    assert json.loads(out)["message"] == sm.min_compression("bert", want).message


@pytest.mark.parametrize("argv, option, value, words", [
    (["min-compression", "--bw", "10"], "--bw", "'10'", "did you mean 10Gbps?"),
    (["min-compression", "--bw", "500kbps"], "--bw", "'500kbps'", "at least 1 Mbit/s"),
    (["min-compression", "--bw", "-5Gbps"], "--bw", "'-5Gbps'", "> 0"),
    (["min-compression", "--bw", ""], "--bw", "''", "cannot read a bandwidth"),
    (["min-compression", "--bw", "10GBPS"], "--bw", "'10GBPS'", "bits or bytes"),
    (["min-compression", "--bw", "1e400bps"], "--bw", "'1e400bps'", "too large"),
    (["scaling", "--n", "", "--bw", "10Gbps"], "--n", "''", "at least one value"),
    (["scaling", "--n", ",", "--bw", "10Gbps"], "--n", "','", "at least one value"),
    (["scaling", "--n", "8", "--bw", ""], "--bw", "''", "at least one value"),
    (["scaling", "--n", "8", "--bw", "10Gbps", "--compression", ""], "--compression", "''",
     "at least one value"),
    (["scaling", "--n", "8", "--bw", "10,100"], "--bw", "'10'", "did you mean 10Gbps?"),
    (["scaling", "--n", "-3", "--bw", "10Gbps"], "--n", "'-3'", "integer in [1,"),
    (["scaling", "--n", "8.5", "--bw", "10Gbps"], "--n", "'8.5'", "integer"),
    (["scaling", "--n", "1e20", "--bw", "10Gbps"], "--n", "'1e20'", "integer in [1,"),
    (["scaling", "--n", "eight", "--bw", "10Gbps"], "--n", "'eight'", "not a number"),
    (["min-compression", "--bw", "10Gbps", "--target", "1e999"], "--target", "'1e999'",
     "(0, 1]"),
    (["min-compression", "--bw", "10Gbps", "--target", "-0.5"], "--target", "'-0.5'",
     "(0, 1]"),
    (["min-compression", "--bw", "10Gbps", "--utilization", "nan"], "--utilization", "'nan'",
     "(0, 1]"),
    (["min-compression", "--bw", "10Gbps", "--alpha", "-1ms"], "--alpha", "'-1ms'", ">= 0"),
    (["min-compression", "--bw", "10Gbps", "--alpha", "1h"], "--alpha", "'1h'",
     "cannot read a time"),
    (["min-compression", "--bw", "10Gbps", "--intra-bw", "fast"], "--intra-bw", "'fast'",
     "cannot read"),
    (["min-compression", "--bw", "10Gbps", "--gpus-per-node", "0"], "--gpus-per-node", "'0'",
     "integer in [1,"),
    (["required-bandwidth", "--compression", "0.5"], "--compression", "'0.5'", ">= 1"),
    (["plan", "--bw", "10Gbps", "--compressors", "topk:2"], "--compressors", "'topk:2'",
     "density must be in (0, 1]"),
    (["plan", "--bw", "10Gbps", "--compressors", ""], "--compressors", "''",
     "at least one value"),
    (["breakeven", "--compressors", "fp16:3"], "--compressors", "'fp16:3'", "no setting"),
    (["breakeven", "--compressors", "powersgd:x"], "--compressors", "'powersgd:x'",
     "must be a number"),
])
def test_bad_values_get_the_librarys_one_line_message(argv, option, value, words):
    command, rest = argv[0], argv[1:]
    code, out, err = run(command, "--model", "bert", *rest)
    assert code == 2, (out, err)
    assert out == ""  # never an empty table
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("scalemodel: error: ")  # ours, not argparse's usage block
    assert f"{option}={value} is invalid" in lines[0] and words in lines[0], lines[0]


def test_argparse_errors_are_one_line_too():
    for argv in (["scaling", "--model", "bert"], ["plan", "--model", "bert", "--bw", "10Gbps",
                                                  "--framework", "tf"],
                 ["scaling", "--model", "bert", "--n", "8", "--bw", "1Gbps", "--bogus"]):
        code, out, err = run(*argv)
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "--help" in err, err


def test_a_value_after_an_option_may_start_with_a_dash():
    """argparse takes ``-5Gbps`` for an option; the value reaches the library."""
    assert cli._join_dash_values(cli.build_parser(), ["scaling", "--bw", "-5Gbps", "--n",
                                                      "8", "--json"]) == \
        ["scaling", "--bw=-5Gbps", "--n", "8", "--json"]
    # an option after an option that takes a value stays an option
    assert cli._join_dash_values(cli.build_parser(), ["plan", "--bw", "--n", "8"]) == \
        ["plan", "--bw", "--n", "8"]


def test_alpha_takes_a_unit():
    code, out, err = run("min-compression", "--model", "bert", "--bw", "10Gbps", "--alpha",
                         "5us", "--json")
    assert code == 0, err
    assert json.loads(out)["ratio"] == pytest.approx(
        sm.min_compression("bert", 10e9, alpha=5e-6).ratio, rel=1e-12)


def test_compressor_settings_are_the_same_in_cli_and_api():
    code, out, err = run("breakeven", "--model", "resnet50", "--n", "16,64", "--compressors",
                         "topk:0.01,powersgd:8", "--json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert rows[0]["compressor"] == "topk density 0.01"
    assert rows[0]["breakeven_bw"] == pytest.approx(
        list(sm.breakeven_bandwidth("resnet50", "topk:0.01", n=[16, 64])), rel=1e-12)
    assert rows[1]["breakeven_bw"][1] == pytest.approx(
        sm.breakeven_bandwidth("resnet50", "powersgd:8", n=64), rel=1e-12)
    # plan: name:setting is evaluated at that setting, the same as the API
    code, out, err = run("plan", "--model", "bert", "--bw", "10Gbps", "--compressors",
                         "topk:0.01", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    api = sm.plan_compression("bert", "10Gbps", compressors=["topk:0.01"]).rows[0]
    assert row["setting"] == api.setting == 0.01
    assert row["scaling_factor"] == pytest.approx(api.scaling_factor, rel=1e-12)


def _options():
    parser = cli.build_parser()
    for p in cli._subparsers(parser):
        for action in p._actions:
            if not action.option_strings or isinstance(
                    action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            yield p.prog, action


@pytest.mark.parametrize("prog, action", list(_options()),
                         ids=lambda v: v if isinstance(v, str) else v.option_strings[0])
def test_every_help_entry_has_what_unit_and_default(prog, action):
    text = action.help or ""
    assert len(text.split("[")[0].split()) >= 3, (prog, action.option_strings, text)  # what
    assert "[" in text and "]" in text, (prog, action.option_strings, text)           # unit
    if action.required:
        assert "(required)" in text, (prog, action.option_strings, text)
    else:
        assert "(default" in text, (prog, action.option_strings, text)


def test_defaults_in_help_are_the_defaults():
    """The help text's defaults are the values the commands use."""
    args = cli._resolve(cli.build_parser().parse_args(
        ["min-compression", "--model", "bert", "--bw", "10Gbps"]))
    assert args.n == sm.solvers.DEFAULT_N and args.target == sm.solvers.DEFAULT_TARGET
    assert args.utilization == 1.0 and args.codec_cost == 0.0
    # sharding and algorithm not given: the cluster's fit settings, else none and ring
    assert args.sharding is None and args.algorithm is None and cli._sharding(args) == "none"
    assert sm.Scenario.build("bert", algorithm=None).algorithm == "ring"
    # fusion not given: the API's default, DDP buckets (transformer blocks under sharding)
    assert args.fusion is None and sm.Scenario.build("bert", fusion=None).fusion == sm.DDPBuckets()
    # not given: not passed on, so the API's defaults (or the cluster's values) apply
    assert args.alpha is None and args.gpus_per_node is None and args.intra_bw is None
    assert "alpha" not in cli._common(args) and "intra_bw" not in cli._common(args)


def test_the_installed_entry_point_answers_the_same():
    proc = subprocess.run([sys.executable, "-m", "scalemodel", "min-compression", "--model",
                           "bert", "--bw", "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("scalemodel: error: --bw='10' is invalid: a line rate "
                                   "written as text must be at least 1 Mbit/s. did you mean "
                                   "10Gbps? A bare number is bits per second")


@pytest.mark.parametrize("argv, key", [
    (("min-compression", "--bw", "100e6", "--target", "0.999"), "ratio"),
    (("required-bandwidth", "--target", "0.9999"), "bw")])
def test_json_of_an_infeasible_target_is_null_not_text(argv, key):
    """No finite ratio or bandwidth reaches the target: ``null`` beside ``feasible:
    false`` (as a fitted cluster file writes what is unbounded), never the text "inf"
    where a script expects a number."""
    code, out, err = run(*argv, "--model", "bert", "--n", "64", "--json")
    assert code == 0, err
    got = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert got["feasible"] is False and got[key] is None
    assert "no " in got["message"] and "enough" in got["message"]


def test_a_missing_config_json_is_said_to_be_missing(tmp_path):
    # it was refused as '--seq/--micro-batch apply only when --model is a Hugging Face
    # config.json', which sent a user who had not yet downloaded one the wrong way
    missing = tmp_path / "config.json"
    code, out, err = run("iteration", "--model", str(missing), "--seq", "8192",
                         "--micro-batch", "2", "--n", "8", "--bw", "400Gbps")
    assert code == 2 and out == ""
    assert "--model" in err and "does not exist" in err and str(missing) in err
    assert "Traceback" not in err


def test_library_messages_speak_the_commands_options(capsys):
    # 255 of 638 CLI refusals spoke the API's keywords ('tp=3 is invalid', 'Pass
    # microbatches='); each keyword the command takes as an option is written as it
    from scalemodel.cli import main

    base = ["scaling", "--model", "llama-2-7b", "--n", "16", "--bw", "100Gbps"]
    assert main(base + ["--tp", "3"]) == 2
    assert capsys.readouterr().err.startswith("scalemodel: error: --tp=3 is invalid")
    assert main(base + ["--pp", "2"]) == 2
    err = capsys.readouterr().err
    assert "--microbatches=None is invalid" in err and "Pass --microbatches=" in err
    assert "--pp=2 (1F1B)" in err
    assert main(base + ["--sequence-parallel", "--algorithm", "ring"]) == 0
    err = capsys.readouterr().err
    assert "--sequence-parallel has no effect" in err and "--tp=1" in err
    # a keyword that is no option of the command stays as the library wrote it
    assert main(["scaling", "--model", "resnet50", "--n", "16", "--bw", "10Gbps",
                 "--nics-per-node", "2"]) == 0
    assert "without gpus_per_node" in capsys.readouterr().err


def test_one_value_options_refuse_a_list_and_config_options_name_their_value(capsys):
    # '--bw 10Gbps,20Gbps' said 'cannot read a bandwidth from this string'; '--seq 128'
    # on a built-in profile was refused as "--seq/--micro-batch='resnet50'"
    from scalemodel.cli import main

    assert main(["min-compression", "--model", "resnet50", "--bw", "10Gbps,20Gbps"]) == 2
    err = capsys.readouterr().err
    assert "--bw='10Gbps,20Gbps' is invalid: takes one value" in err
    assert "scaling takes comma-separated lists" in err
    assert main(["iteration", "--model", "resnet50", "--bw", "10Gbps", "--n", "16,32"]) == 2
    assert "--n='16,32' is invalid: takes one value" in capsys.readouterr().err
    assert main(["scaling", "--model", "resnet50", "--bw", "10Gbps,20Gbps",
                 "--n", "16,32"]) == 0
    capsys.readouterr()
    assert main(["scaling", "--model", "resnet50", "--n", "4", "--bw", "10Gbps",
                 "--micro-batch", "3"]) == 2
    err = capsys.readouterr().err
    assert "--micro-batch=3 is invalid" in err and "not 'resnet50'" in err


def test_paths_and_quoted_values_keep_their_keywords():
    # a review: the rewrite reached into paths ('sweep/tp=8,pp=2/' became
    # 'sweep/--tp=8,--pp=2/') and values ('zero3:shard_group=4'), and read a store_false
    # switch's keyword as its flag whatever the value
    from scalemodel.cli import _in_cli_terms, build_parser
    parser = build_parser()

    def cli(text):
        return _in_cli_terms(text, parser, "iteration")

    assert cli("model='sweep/tp=8,pp=2/profile.json' is invalid: no such file "
               "(/x/sweep/tp=8,pp=2/profile.json)") == (
        "--model='sweep/tp=8,pp=2/profile.json' is invalid: no such file "
        "(/x/sweep/tp=8,pp=2/profile.json)")
    assert cli("sharding='zero3:shard_group=4' is invalid") == (
        "--sharding='zero3:shard_group=4' is invalid")
    assert cli("tp=3 is invalid: must divide n=16 (pp=4)") == (
        "--tp=3 is invalid: must divide --n=16 (--pp=4)")
    assert cli("flash_attention=False has no effect") == "--no-flash-attention has no effect"
    assert cli("flash_attention=True is the default") == "flash_attention=True is the default"
    assert cli("allow_folder=True is an API option") == "allow_folder=True is an API option"
