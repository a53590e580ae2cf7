"""``activation_checkpointing=``, ``offload=`` and ``shard_group=`` in the compression
planner: plan_compression, compressed_scaling_factor, breakeven_bandwidth and the CLI's
plan / breakeven. References: scaling_factor and memory() with the same settings (the
uncompressed row, the memory check), the discrete-event reference on the transformed
profile (the compressed path under DDP), the two scaling factors evaluated at the
break-even rate (where they must meet), and iteration_time's own errors for bad values.
Each setting is also checked to change the answer, so that a setting dropped on the way
would fail here."""

import json

import attrs
import numpy as np
import pytest

import scalemodel as sm
from des_reference import simulate_compressed_iteration
from scalemodel.checkpointing import with_recompute
from scalemodel.cli import main
from scalemodel.codec_costs import profile_gpu
from scalemodel.exceptions import InvalidParameterError
from scalemodel.offload import with_offload

MODEL, N, BW, GPU = "llama-2-7b", 64, 100e9, "h100-sxm"
NODES = dict(gpus_per_node=8, nics_per_node=8)
JOB = ("activation_checkpointing", "offload", "shard_group")

# (settings, the same without the job settings: the answer must differ from it)
SETTINGS = {
    "ckpt-full": dict(activation_checkpointing="full"),
    "ckpt-half": dict(activation_checkpointing=0.5),
    "ckpt-selective-zero3": dict(sharding="zero3", activation_checkpointing="selective"),
    "offload-optimizer": dict(offload="optimizer"),
    "offload-params-zero3": dict(sharding="zero3", offload="optimizer+parameters"),
    "zero1-group8": dict(sharding="zero1", shard_group=8),
    "zero3-group8-full-offload": dict(sharding="zero3", shard_group=8,
                                      activation_checkpointing="full", offload="optimizer",
                                      **NODES),
}
IDS = sorted(SETTINGS)


def _base(kw):
    return {k: v for k, v in kw.items() if k not in JOB}


def _plan(kw, **extra):
    return sm.plan_compression(MODEL, BW, n=N, gpu=GPU, **kw, **extra)


def _row(plan, name):
    return next(r for r in plan.rows if r.compressor == name)


def _composing(plan):
    """Rows evaluated with their compressor (under sharding those composing with the
    reduce-scatter; the others are listed as not composing)."""
    if plan.sharding == "none":
        return [r for r in plan.rows if r.compressor != "none"]
    return [r for r in plan.rows if r.compressor in ("int8", "fp16", "bf16")]


@pytest.mark.parametrize("name", IDS)
def test_uncompressed_row_is_scaling_factor_with_the_same_settings(name):
    kw = SETTINGS[name]
    plan = _plan(kw)
    sf = sm.scaling_factor(MODEL, N, BW, **kw)
    assert plan.uncompressed_scaling_factor == pytest.approx(sf, rel=1e-9)
    assert _row(plan, "none").scaling_factor == pytest.approx(sf, rel=1e-9)
    without = sm.scaling_factor(MODEL, N, BW, **_base(kw))
    assert abs(sf / without - 1) > 1e-3  # the setting reaches the answer
    it = sm.iteration_time(MODEL, N, BW, **kw)  # the plan says what it assumed, as here
    for key in JOB:
        assert plan.settings[key] == it.settings[key], key
    assert it.settings["offload"] == kw.get("offload", "none")


@pytest.mark.parametrize("name", IDS)
def test_plans_ideal_ratio_is_min_compression_with_the_same_settings(name):
    kw = SETTINGS[name]
    ideal = sm.min_compression(MODEL, BW, n=N, **kw)
    assert _plan(kw).ideal_ratio == pytest.approx(ideal.ratio, rel=1e-9)


# a fitted cluster with intervals: each row's interval is its answer over the corners
LAB = sm.ClusterProfile(name="lab", alpha=1e-5, compute_slowdown=1.1,
                        intervals={"alpha": (1e-6, 2e-5), "compute_slowdown": (1.0, 1.25)},
                        provenance={"source": "test"})


@pytest.mark.parametrize("name", ["ckpt-full", "offload-optimizer", "zero1-group8"])
def test_intervals_over_a_fitted_cluster_keep_the_settings(name):
    kw = SETTINGS[name]
    plan = sm.plan_compression(MODEL, "25Gbps", n=N, cluster=LAB, **kw)
    corners = LAB.corners()
    assert len(corners) >= 2
    for r in plan.rows:
        if r.compressor == "none":
            vals = [sm.scaling_factor(MODEL, N, 25e9, cluster=c, **kw) for c in corners]
        elif r in _composing(plan):
            vals = [sm.compressed_scaling_factor(MODEL, r.config, N, 25e9, cluster=c, **kw)
                    for c in corners]
        else:
            continue
        assert r.interval == pytest.approx((min(vals), max(vals)), rel=1e-9), r.compressor
        if plan.best is not None and r.compressor == plan.best.compressor:
            assert plan.best_interval == pytest.approx(r.interval, rel=1e-9)


@pytest.mark.parametrize("name", IDS)
def test_compressed_scaling_factor_is_the_plans_row(name):
    kw = SETTINGS[name]
    plan = _plan(kw)
    rows = _composing(plan)
    assert rows
    for r in rows:
        got = sm.compressed_scaling_factor(MODEL, r.config, N, BW, gpu=GPU, **kw)
        assert got == pytest.approx(r.scaling_factor, rel=1e-9), r.compressor
    # "none" through the compressed path is the uncompressed scaling factor, on a grid
    bws = np.array([10e9, 50e9, 200e9, 1e12])
    got = sm.compressed_scaling_factor(MODEL, "none", N, bws, **kw)
    ref = [sm.scaling_factor(MODEL, N, b, **kw) for b in bws]
    np.testing.assert_allclose(got, ref, rtol=1e-9)


@pytest.mark.parametrize("kw", [dict(activation_checkpointing="full"),
                                dict(offload="optimizer"),
                                dict(activation_checkpointing=0.5, offload="optimizer")],
                         ids=["full", "offload", "half-offload"])
@pytest.mark.parametrize("comp", ["powersgd:16", "topk:0.001", "fp16"])
def test_compressed_path_matches_the_event_simulation(kw, comp):
    """DDP: the compressed scaling factor against the discrete-event reference run on the
    profile with the recompute in its backward and the offloaded optimizer step, whose
    CPU part the 8 GPUs of a node share (the single-worker time of that profile, alone on
    its host, is the numerator)."""
    prof = with_offload(with_recompute(sm.load_profile(MODEL),
                                       kw.get("activation_checkpointing")),
                        kw.get("offload"))
    assert prof.iteration_time > sm.load_profile(MODEL).iteration_time
    alone = prof.iteration_time  # the single worker, alone on its host
    c = sm.get_compressor(comp)
    n, bw = 32, 25e9
    got = sm.compressed_scaling_factor(MODEL, c, n, bw, **kw)
    codec = sm.compressors.codec_costs_for(None, gpu=profile_gpu(prof))
    tc = c.tensor_costs(prof, n, codec=codec)
    cost = codec[c.family]
    if kw.get("offload"):  # the 8 GPUs of an H100 server share the host's CPU step
        prof = attrs.evolve(prof, update_time=prof.update_time
                            + 7 * prof.provenance["offload_cpu_step"])
    t = simulate_compressed_iteration(
        prof, n, bw, phase_bytes=tc.phase_bytes.tolist(),
        phase_algorithms=tc.phase_collectives,
        tensor_codec=(tc.encode_time + tc.decode_time + cost.launch * tc.calls).tolist(),
        bucket_codec=cost.launch * c.calls_per_bucket)
    assert got == pytest.approx(alone / t, rel=1e-9)


# a compressor whose break-even rate is finite under each setting (n = 64)
BREAKEVEN = {"ckpt-full": "powersgd:16", "ckpt-half": "powersgd:16",
             "ckpt-selective-zero3": "int8", "offload-optimizer": "topk:0.001",
             "offload-params-zero3": "int8", "zero1-group8": "int8",
             "zero3-group8-full-offload": "int8"}


@pytest.mark.parametrize("name", IDS)
def test_breakeven_rate_is_where_the_two_scaling_factors_meet(name):
    kw, comp = SETTINGS[name], BREAKEVEN[name]
    be = sm.breakeven_bandwidth(MODEL, comp, n=N, **kw)
    assert 1e9 < be < 1e14, be
    with_c = sm.compressed_scaling_factor(MODEL, comp, N, be, **kw)
    without_c = sm.scaling_factor(MODEL, N, be, **kw)
    assert with_c == pytest.approx(without_c, rel=1e-6)
    # above it no compression is at least as fast, below it the compressor is faster
    assert sm.compressed_scaling_factor(MODEL, comp, N, be * 0.9, **kw) > \
        sm.scaling_factor(MODEL, N, be * 0.9, **kw)
    assert sm.compressed_scaling_factor(MODEL, comp, N, be * 1.1, **kw) <= \
        sm.scaling_factor(MODEL, N, be * 1.1, **kw) * (1 + 1e-12)
    # the settings are in both sides (the scaling factor there is not the default's)
    assert abs(without_c / sm.scaling_factor(MODEL, N, be, **_base(kw)) - 1) > 1e-3
    # detail=True and an array n give the same rate
    assert sm.breakeven_bandwidth(MODEL, comp, n=N, detail=True, **kw).bw == be
    assert sm.breakeven_bandwidth(MODEL, comp, n=[N], **kw)[0] == be


def test_checkpointing_moves_a_break_even_rate():
    # powersgd rank 16 on 64 GPUs crosses where the backward pass still hides the
    # uncompressed all-reduce's start: the recompute lengthens it
    plain = sm.breakeven_bandwidth(MODEL, "powersgd:16", n=N)
    full = sm.breakeven_bandwidth(MODEL, "powersgd:16", n=N, activation_checkpointing="full")
    assert full > plain * 1.01


@pytest.mark.parametrize("name", IDS)
def test_plans_memory_is_memory_with_the_same_settings(name):
    kw = SETTINGS[name]
    plan = _plan(kw)
    mem_kw = {k: v for k, v in kw.items() if k not in NODES}
    m = sm.memory(MODEL, N, gpu=GPU, **mem_kw)
    assert plan.memory_per_gpu == pytest.approx(m.per_gpu, rel=1e-12)
    assert plan.fits == bool(m.fits)
    base = sm.memory(MODEL, N, gpu=GPU, **_base(mem_kw))  # the settings reach the check
    assert abs(plan.memory_per_gpu / base.per_gpu - 1) > 1e-3


# ------------------------------------------------------------------ the CLI twins

def _cli_args(kw):
    out = []
    for k, v in kw.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["ckpt-half", "offload-optimizer", "zero1-group8",
                                  "zero3-group8-full-offload"])
def test_cli_plan_prints_the_apis_numbers(capsys, name):
    kw = SETTINGS[name]
    code, out, err = _run(capsys, ["plan", "--model", MODEL, "--n", str(N), "--bw",
                                   "100Gbps", "--gpu", GPU, "--json"] + _cli_args(kw))
    assert code in (0, None), err
    data = json.loads(out)
    plan = _plan(kw)
    assert data["uncompressed_scaling_factor"] == pytest.approx(
        plan.uncompressed_scaling_factor, rel=1e-12)
    assert data["memory_per_gpu"] == pytest.approx(plan.memory_per_gpu, rel=1e-12)
    assert data["best"] == (None if plan.best is None else plan.best.compressor)
    api = {r.compressor: r.scaling_factor for r in plan.rows}
    assert {r["compressor"]: r["scaling_factor"] for r in data["rows"]} == pytest.approx(api)
    for key in JOB:
        assert data["settings"][key] == plan.settings[key]


@pytest.mark.parametrize("name", ["ckpt-full", "offload-optimizer", "zero1-group8",
                                  "zero3-group8-full-offload"])
def test_cli_breakeven_prints_the_apis_rates(capsys, name):
    kw, comp = SETTINGS[name], BREAKEVEN[name]
    code, out, err = _run(capsys, ["breakeven", "--model", MODEL, "--n", f"16,{N}",
                                   "--compressors", comp, "--json"] + _cli_args(kw))
    assert code in (0, None), err
    (row,) = json.loads(out)["results"]
    api = sm.breakeven_bandwidth(MODEL, comp, n=[16, N], **kw)
    assert row["breakeven_bw"] == pytest.approx(list(api), rel=1e-12)


def test_cli_plan_text_says_the_apis_answer(capsys):
    kw = SETTINGS["ckpt-half"]
    code, out, err = _run(capsys, ["plan", "--model", MODEL, "--n", str(N), "--bw",
                                   "100Gbps", "--gpu", GPU] + _cli_args(kw))
    assert code in (0, None), err
    plan = _plan(kw)
    assert f"(uncompressed {plan.uncompressed_scaling_factor:.3f})" in out
    assert plan.message in out and plan.best is not None
    assert plan.best.snippet("pytorch").splitlines()[0] in out


# ------------------------------------------------------------------ bad values, by name

BAD = [
    ("activation_checkpointing", "partial", {}),
    ("activation_checkpointing", 1.5, {}),
    ("offload", "gpu", {}),
    ("offload", "optimizer+parameters", {}),  # parameter offload needs full sharding
    ("shard_group", 12, dict(sharding="zero1")),  # does not divide 64
    ("shard_group", 1, dict(sharding="zero3")),
    ("shard_group", 8, {}),  # needs a sharding
]
BAD_IDS = [f"{p}={v!r}" + ("-" + kw["sharding"] if kw else "") for p, v, kw in BAD]

CALLS = {
    "plan_compression": lambda kw: sm.plan_compression(MODEL, BW, n=N, **kw),
    "compressed_scaling_factor": lambda kw: sm.compressed_scaling_factor(
        MODEL, "int8", N, BW, **kw),
    "breakeven_bandwidth": lambda kw: sm.breakeven_bandwidth(MODEL, "int8", n=N, **kw),
}


def _error(ask):
    with pytest.raises(InvalidParameterError) as info:
        ask()
    return info.value


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("param, value, extra", BAD, ids=BAD_IDS)
def test_bad_values_are_iteration_times_error(call, param, value, extra):
    kw = dict(extra, **{param: value})
    ref = _error(lambda: sm.iteration_time(MODEL, N, BW, **kw))
    exc = _error(lambda: CALLS[call](kw))
    assert exc.parameter == ref.parameter == param
    assert str(exc) == str(ref)
    assert repr(value) in str(exc) or str(value) in str(exc)


CLI_BAD = [(["--activation-checkpointing", "partial"], "--activation-checkpointing='partial'"),
           (["--offload", "gpu"], "offload"),
           (["--sharding", "zero1", "--shard-group", "12"], "--shard-group=12")]


@pytest.mark.parametrize("command", ["plan", "breakeven"])
@pytest.mark.parametrize("bad, named", CLI_BAD, ids=[b[1] for b in CLI_BAD])
def test_cli_refuses_bad_values_by_name(capsys, command, bad, named):
    argv = [command, "--model", MODEL, "--n", str(N)] + (
        ["--bw", "100Gbps"] if command == "plan" else ["--compressors", "int8"]) + bad
    code, out, err = _run(capsys, argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and named in err, err


@pytest.mark.parametrize("name", ["ckpt-half", "zero3-group8-full-offload"])
def test_cli_plan_text_prints_the_memory_check(capsys, name):
    """The printed plan shows the memory check the API made (as min-compression does)."""
    kw = SETTINGS[name]
    code, out, err = _run(capsys, ["plan", "--model", MODEL, "--n", str(N), "--bw",
                                   "100Gbps", "--gpu", GPU] + _cli_args(kw))
    assert code in (0, None), err
    plan = _plan(kw)
    line = f"memory: {plan.memory_per_gpu / 2**30:.1f} GiB per GPU reserved, "
    line += ("fits on " if plan.fits else "does NOT fit on ") + GPU
    assert line in out.splitlines()


def test_plan_without_a_memory_check_prints_no_memory_line():
    plan = sm.plan_compression("resnet50", 10e9, n=16)
    assert plan.memory_per_gpu is None
    assert not any(s.startswith("memory:") for s in str(plan).splitlines())
