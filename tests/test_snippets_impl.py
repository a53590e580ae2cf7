"""Plans say which implementation they assume (issue 18 item 1): a plan's settings snippet is
written for its implementation preset (GRACE, DeepSpeed, Horovod, PyTorch) unless a framework
is named, with the API names read from each project's source (scalemodel/knobs.py cites the
commits)."""

import ast
import contextlib
import io
import json

import attrs
import pytest

import scalemodel as sm
from scalemodel import cli
from scalemodel.compressors import IMPLEMENTATIONS
from scalemodel.knobs import FRAMEWORK_FAMILIES, FRAMEWORKS, snippet

# The names GRACE's grace_from_params accepts (sands-lab/grace@8682f4b,
# grace_dl/tensorflow/helper.py and grace_dl/torch/helper.py): its if/elif chains.
GRACE_COMPRESSORS = {
    "grace-tf": {"adaq", "dgc", "efsignsgd", "fp16", "inceptionn", "natural", "none", "onebit",
                 "powersgd", "qsgd", "randomk", "signsgd", "signum", "sketch", "terngrad",
                 "threshold", "topk", "u8bit"},
    "grace-torch": {"dgc", "efsignsgd", "fp16", "natural", "none", "onebit", "powersgd",
                    "qsgd", "randomk", "signsgd", "signum", "terngrad", "threshold", "topk"},
}
GRACE_MEMORIES = {"dgc", "none", "powersgd", "residual", "efsignsgd"}
GRACE_COMMUNICATORS = {"allreduce", "allgather", "broadcast"}
GRACE_API = {"grace-tf": ("import horovod.tensorflow as hvd",
                          "from grace_dl.tensorflow.helper import grace_from_params",
                          "hvd.DistributedOptimizer(optimizer, grace=grc)"),
             "grace-torch": ("import horovod.torch as hvd",
                             "from grace_dl.torch.helper import grace_from_params",
                             "hvd.DistributedOptimizer(optimizer, grace=grc, "
                             "named_parameters=model.named_parameters())")}
COMPRESSORS = ("none", "fp16", "bf16", "int8", "int8:4", "int8:8", "signsgd", "topk:0.01",
               "randomk:0.01", "powersgd:4")


@pytest.fixture(scope="module")
def plans():
    """Every preset's plan of ResNet-50 on 8 workers at 10 Gbit/s, over the families each
    provides."""
    out = {}
    for impl in IMPLEMENTATIONS:
        fams = set(IMPLEMENTATIONS[impl].families)
        comps = [c for c in COMPRESSORS if c.split(":")[0] in fams]
        out[impl] = sm.plan_compression("resnet50", "10Gbps", n=8, compressors=comps,
                                        implementation=impl)
    return out


def rows_of(plan):
    return {(r.compressor, r.setting): r for r in plan.rows}


def grace_params(text):
    line = next(ln for ln in text.splitlines() if ln.startswith("params = "))
    return ast.literal_eval(line.split(" = ", 1)[1])


def test_frameworks_are_the_presets_and_their_families():
    assert set(FRAMEWORKS) == set(IMPLEMENTATIONS)
    for name, impl in IMPLEMENTATIONS.items():
        assert set(FRAMEWORK_FAMILIES[name]) == set(impl.families), name


def test_rows_carry_the_plans_implementation(plans):
    for impl, plan in plans.items():
        assert plan.implementation == impl
        assert {r.implementation for r in plan.rows} == {impl}
    assert sm.plan_compression("bert", "10Gbps").rows[0].implementation == "pytorch"


@pytest.mark.parametrize("impl", ["grace-tf", "grace-torch"])
def test_grace_snippets_use_its_helper_names_and_the_rows_wire_format(plans, impl):
    for row in plans[impl].rows:
        text = row.snippet()
        assert f"with GRACE ({'TensorFlow' if impl == 'grace-tf' else 'PyTorch'} + Horovod)" \
            in text.splitlines()[0]
        if row.compressor == "int8" and row.config.bits < 2:
            assert "use signsgd" in text
            continue
        for api in GRACE_API[impl]:
            assert api in text, (row.compressor, text)
        params = grace_params(text)
        assert params["compressor"] in GRACE_COMPRESSORS[impl], params
        assert params["memory"] in GRACE_MEMORIES and \
            params["communicator"] in GRACE_COMMUNICATORS
        # the communicator is the collective the row planned: all-gather or all-reduce
        assert (params["communicator"] == "allgather") == (row.collective == "allgather"), \
            (row.compressor, row.collective, params)
        if row.compressor in ("topk", "randomk"):
            assert params["compress_ratio"] == pytest.approx(row.setting, rel=1e-5)
            assert params["memory"] == "residual"
        if row.compressor == "powersgd":
            assert params["compress_rank"] == row.setting and params["memory"] == "powersgd"
        if row.compressor == "int8":
            levels = 2 ** (row.config.bits - 1) - 1
            assert params.get("quantum_num", 127) == levels
            assert params["compressor"] == ("u8bit" if impl == "grace-tf" and levels == 127
                                            else "qsgd")
        if row.compressor == "signsgd":  # the GRACE preset sends plain signs, no scale
            assert params["compressor"] == "signsgd"


def test_grace_signsgd_with_a_scale_is_efsignsgd(plans):
    """The GRACE preset sends signs without a scale (signsgd.py); a row whose signs carry
    one fp32 scale is GRACE's EF-signSGD, and one GRACE's communicators cannot carry says so."""
    row = next(r for r in plans["grace-torch"].rows if r.compressor == "signsgd")
    scaled = attrs.evolve(row, config=attrs.evolve(row.config, scale_bytes=4))
    params = grace_params(scaled.snippet())
    assert params["compressor"] == "efsignsgd" and params["memory"] == "efsignsgd"
    ds = attrs.evolve(row, config=sm.SignSGD(collective="alltoall"))
    assert "no alltoall" in ds.snippet() and "params = " not in ds.snippet()


def test_deepspeed_snippets_name_its_config_keys(plans):
    rows = {r.compressor: r for r in plans["deepspeed"].rows}
    sign = rows["signsgd"].snippet()
    cfg = ast.literal_eval(next(ln for ln in sign.splitlines()
                                if ln.startswith("ds_config = ")).split(" = ", 1)[1])
    assert cfg["optimizer"]["type"] == "OneBitAdam"
    assert set(cfg["optimizer"]["params"]) == {"freeze_step", "cuda_aware", "comm_backend_name"}
    assert cfg["optimizer"]["params"]["comm_backend_name"] == "nccl"
    for name in ("fp16", "bf16"):
        text = rows[name].snippet()
        assert f"'communication_data_type': '{name}'" in text
        assert f"'{name}': {{'enabled': True}}" in text
    assert "'zero_quantized_gradients': True" in rows["int8"].snippet()
    assert "plain data parallelism" in rows["int8"].snippet()
    assert all("deepspeed.initialize(" in r.snippet() for r in plans["deepspeed"].rows)


def test_a_family_the_framework_lacks_says_so_and_names_who_has_it(plans):
    pt = {r.compressor: r for r in plans["pytorch"].rows}
    text = pt["powersgd"].snippet("deepspeed")
    assert "DeepSpeed has no stock compressor for powersgd" in text
    assert "frameworks that have it: pytorch, grace-tf, grace-torch" in text
    text = pt["bf16"].snippet("grace-tf")
    assert "GRACE has no stock compressor for bf16" in text
    assert "frameworks that have it: pytorch, deepspeed" in text
    assert "Horovod has no stock compressor for int8" in pt["int8"].snippet("horovod")
    grace = {r.compressor: r for r in plans["grace-tf"].rows}
    assert "framework='grace-torch'" in grace["topk"].snippet("pytorch")
    assert "framework='grace-torch'" in grace["topk"].snippet("horovod")


def test_a_grace_plan_prints_a_grace_snippet_and_framework_overrides(plans):
    plan = plans["grace-tf"]
    assert "grace_dl.tensorflow.helper" in plan.snippet()
    assert "PyTorch DDP" not in plan.snippet()
    assert "with PyTorch DDP" in plan.snippet("pytorch")
    assert "HOROVOD_FUSION_THRESHOLD" in plan.snippet("horovod")
    assert "grace_dl.torch.helper" in plan.snippet("grace_torch")  # '_' as '-'
    assert "grace_dl.tensorflow.helper" in plan.snippet("grace")  # the alias
    assert "with DeepSpeed" in plans["pytorch"].snippet("ds").splitlines()[0]
    row = plan.rows[0]
    assert snippet(row) == row.snippet() == snippet(row, "grace-tf")


def test_unknown_framework_lists_the_valid_ones(plans):
    with pytest.raises(sm.UnknownNameError, match="framework='tensorflow'") as err:
        plans["pytorch"].snippet("tensorflow")
    for name in FRAMEWORKS:
        assert name in str(err.value)
    with pytest.raises(sm.ParameterTypeError, match="framework"):
        plans["pytorch"].snippet(3)


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_cli_snippet_follows_the_implementation_and_framework_wins():
    base = ("plan", "--model", "resnet50", "--n", "8", "--bw", "10Gbps", "--compressors",
            "fp16,topk:0.01")
    code, out, err = run(*base, "--implementation", "grace-tf")
    assert code == 0, err
    assert "with GRACE (TensorFlow + Horovod)" in out and "PyTorch DDP" not in out
    code, out, err = run(*base, "--implementation", "grace-tf", "--framework", "pytorch")
    assert code == 0, err
    assert "with PyTorch DDP" in out and "grace_from_params" not in out
    code, out, err = run(*base, "--implementation", "grace-torch", "--framework", "deepspeed",
                         "--json")
    assert code == 0, err
    assert all("DeepSpeed" in r["snippet"] for r in json.loads(out)["rows"])


def test_cli_framework_choices_include_every_preset():
    action = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices[
        "plan"]._actions if "--framework" in a.option_strings)
    assert tuple(action.choices) == FRAMEWORKS and action.default is None
    code, out, err = run("plan", "--model", "bert", "--bw", "10Gbps", "--framework", "tf")
    assert code == 2 and all(name in err for name in FRAMEWORKS)
