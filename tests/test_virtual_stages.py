"""``virtual_stages=`` (interleaved 1F1B) on every call that takes tp/pp/microbatches, each
answer against iteration_time's with the same settings, and memory()'s in-flight chunks
against an independent count: the operations of each stage in Megatron-LM's order
(tests/des_interleaved.py, the discrete-event reference of the schedule), whose forwards
not yet matched by their backward are the chunks whose activations the stage holds."""

import json

import numpy as np
import pytest
from des_interleaved import stage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import scalemodel as sm
from scalemodel.cli import main
from scalemodel.fusion import DDPBuckets
from scalemodel.parallel import in_flight_chunks, resolve_model_parallel

MODEL = "llama-2-13b"  # 40 layers: pp=4 gives 10 a stage, v = 2 chunks of 5
JOB = dict(gpus_per_node=8, nics_per_node=8, tp=4, pp=4, microbatches=8)
MP = dict(tp=4, pp=4, microbatches=8)  # without the topology (memory, whatif_table)
N, BW = 128, 100e9


def sf_of(v, model=MODEL, n=N, bw=BW, **kw):
    """The reference: iteration_time's scaling factor with the same settings."""
    return sm.iteration_time(model, n, bw, virtual_stages=v, **{**{**JOB, **kw}}).scaling_factor


def test_the_interleaved_schedule_changes_the_answer():
    # a bubble (p - 1)/(v m) of half the size: a shorter step, whose data-parallel
    # traffic is a larger share, so the data-parallel dimension scales worse
    t = {v: sm.iteration_time(MODEL, N, BW, virtual_stages=v, **JOB).total for v in (1, 2)}
    assert t[2] < t[1]
    assert sf_of(2) < sf_of(1)


@pytest.mark.parametrize("v", [1, 2, 5])
def test_plan_is_for_the_same_step_as_iteration_time(v):
    plan = sm.plan_compression(MODEL, BW, n=N, virtual_stages=v, **JOB)
    assert plan.uncompressed_scaling_factor == pytest.approx(sf_of(v), rel=1e-12)
    assert plan.settings["virtual_stages"] == v
    assert plan.ideal_ratio == sm.min_compression(MODEL, BW, n=N, virtual_stages=v,
                                                  **JOB).ratio
    if v > 1:
        assert "interleaved 1F1B" in plan.message
    # each row's scaling factor is the compressed scaling factor at its setting
    row = next(r for r in plan.rows if r.compressor == "powersgd")
    got = sm.compressed_scaling_factor(MODEL, f"powersgd:{int(row.setting)}", N, BW,
                                       virtual_stages=v, **JOB)
    assert row.scaling_factor == pytest.approx(got, rel=1e-12)


def test_compressed_scaling_factor_without_compression_is_iteration_times():
    for v in (1, 2):
        got = sm.compressed_scaling_factor(MODEL, "none", N, BW, virtual_stages=v, **JOB)
        assert got == pytest.approx(sf_of(v), rel=1e-12)


def test_breakeven_is_where_the_curves_cross_with_the_interleaved_schedule():
    kw = dict(n=N, virtual_stages=2, **JOB)
    bw = sm.breakeven_bandwidth(MODEL, "powersgd:4", **kw)
    assert 0 < bw < np.inf

    def gain(rate):
        return (sm.compressed_scaling_factor(MODEL, "powersgd:4", bw=rate, **kw)
                / sm.compressed_scaling_factor(MODEL, "none", bw=rate, **kw) - 1)

    assert gain(bw * 0.99) > 0 > gain(bw * 1.01)
    # the bubble adds the same time with and without the compressor: the crossing of the
    # two iteration times does not move with the schedule
    assert bw == pytest.approx(sm.breakeven_bandwidth(MODEL, "powersgd:4", n=N, **JOB),
                               rel=1e-12)


def test_sensitivities_base_point_and_derivative():
    s = sm.sensitivities(MODEL, N, BW, virtual_stages=2, **JOB)
    assert s.scaling_factor == pytest.approx(sf_of(2), rel=1e-12)
    assert s.settings["virtual_stages"] == 2
    h = 1e-4 * BW  # central difference in the line rate
    fd = (sf_of(2, bw=BW + h) - sf_of(2, bw=BW - h)) / (2 * h)
    assert s.d_bw == pytest.approx(fd, rel=1e-4)


def test_best_bucket_size_times_are_iteration_times():
    res = sm.best_bucket_size(MODEL, N, BW, virtual_stages=2, **JOB)
    it = sm.iteration_time(MODEL, N, BW, fusion=DDPBuckets(res.bucket_cap_mb * 2**20),
                           virtual_stages=2, **JOB)
    assert res.iteration_time == pytest.approx(it.total, rel=1e-12)
    assert res.scaling_factor == pytest.approx(it.scaling_factor, rel=1e-12)
    assert "interleaved 1F1B with 2 chunks per stage" in res.message
    assert res.settings["virtual_stages"] == 2


def test_whatif_table_entries():
    from scalemodel.whatif import paper_profile, whatif_table

    mp = dict(tp=4, pp=4, microbatches=8, virtual_stages=2)
    t = whatif_table([MODEL], ns=[N], bws=[BW], ratios=[1], **mp)
    it = sm.iteration_time(paper_profile(MODEL), N, BW, algorithm="ring", fusion="horovod",
                           **mp)
    assert it.scaling_factor != sm.iteration_time(paper_profile(MODEL), N, BW,
                                                  algorithm="ring", fusion="horovod",
                                                  **{**mp, "virtual_stages": 1}).scaling_factor
    assert float(t[MODEL][0, 0, 0]) == pytest.approx(it.scaling_factor, rel=1e-12)


def test_solvers_memory_check_counts_the_interleaved_activations():
    for v in (1, 2):
        res = sm.min_compression(MODEL, BW, n=N, virtual_stages=v, **JOB)
        mem = sm.memory(MODEL, N, gpu="h100-sxm", virtual_stages=v, **MP)
        assert res.memory_per_gpu == pytest.approx(mem.per_gpu, rel=1e-12)
    assert (sm.memory(MODEL, N, virtual_stages=2, **MP).per_gpu
            > sm.memory(MODEL, N, **MP).per_gpu)


# ------------------------------------------------------------------ bad input, everywhere

BAD = [  # overrides of JOB's settings
    (dict(pp=1, microbatches=None, virtual_stages=2), "virtual_stages"),  # no pipeline
    (dict(virtual_stages=0), "virtual_stages"),
    (dict(virtual_stages=3), "virtual_stages"),  # 10 layers a stage
    (dict(microbatches=6, virtual_stages=2), "microbatches"),  # not a multiple of pp
]


def _calls():
    from scalemodel.whatif import whatif_table

    return {
        "plan_compression": lambda kw: sm.plan_compression(MODEL, BW, n=N,
                                                           **{**JOB, **kw}),
        "breakeven_bandwidth": lambda kw: sm.breakeven_bandwidth(MODEL, "bf16", n=N,
                                                                 **{**JOB, **kw}),
        "compressed_scaling_factor": lambda kw: sm.compressed_scaling_factor(
            MODEL, "bf16", N, BW, **{**JOB, **kw}),
        "sensitivities": lambda kw: sm.sensitivities(MODEL, N, BW, **{**JOB, **kw}),
        "best_bucket_size": lambda kw: sm.best_bucket_size(MODEL, N, BW, **{**JOB, **kw}),
        "min_compression": lambda kw: sm.min_compression(MODEL, BW, n=N, **{**JOB, **kw}),
        "whatif_table": lambda kw: whatif_table([MODEL], ns=[N], bws=[BW], ratios=[1],
                                                **{**MP, **kw}),
        "memory": lambda kw: sm.memory(MODEL, N, **{**MP, **kw}),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
@pytest.mark.parametrize("bad, param", BAD)
def test_bad_virtual_stages_refused_by_name(name, bad, param):
    call = _calls()[name]
    with pytest.raises(sm.InvalidParameterError) as exc:
        call(bad)
    assert exc.value.parameter == param
    assert f"{param}={bad[param]}" in str(exc.value)


# ------------------------------------------------------------------ memory: in-flight chunks


def simulated_in_flight(p, v, m, s):
    """Peak of forwards not yet matched by their backward in stage ``s``'s Megatron order."""
    held = peak = 0
    for kind, _, _ in stage_order(s, p, v, m):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    assert held == 0
    return peak


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_in_flight_chunks_equal_the_schedules(data):
    p = data.draw(st.integers(2, 8))
    v = data.draw(st.integers(1, 4))
    m = p * data.draw(st.integers(1, 5)) if v > 1 else data.draw(st.integers(1, 24))
    mp = resolve_model_parallel(1, p, m, virtual_stages=v)
    for s in range(p):
        assert in_flight_chunks(mp, s) == simulated_in_flight(p, v, m, s)
    if v > 1 and m > p:  # Korthikanti et al.'s factor on 1F1B's L layers, exactly
        layers = in_flight_chunks(mp) / (p * v) * p  # in units of a stage's L/p layers
        assert layers == pytest.approx(p * (1 + (p - 1) / (p * v)), rel=1e-12)


CFG = sm.TransformerConfig(layers=48, hidden=2048, heads=16, ffn=5632, vocab=1024,
                           seq=2048, micro_batch=1, name="vs-test")


def layer_bytes(t, checkpointing):
    """Korthikanti et al.'s per-layer bytes with flash attention: sbh(10 + 24/t), or the
    2sbh layer input under full checkpointing (written out here, not imported)."""
    from helpers_activations import hand_units
    sbh = 2048 * 1 * 2048
    rep, split, _ = hand_units(CFG)  # GPT: 10 and 24
    return 2.0 * sbh if checkpointing == "full" else sbh * (rep + split / t)


@pytest.mark.parametrize("t,p,v,m,ck", [
    (2, 4, 2, 8, "none"), (2, 4, 3, 12, "none"), (1, 2, 4, 6, "none"),
    (4, 6, 2, 6, "none"),  # m = p: every forward first, L layers held
    (2, 4, 2, 8, "full"), (8, 8, 3, 16, "full"), (1, 3, 1, 2, "none")])
def test_memory_activations_from_the_simulated_count(t, p, v, m, ck):
    kw = dict(tp=t, pp=p, microbatches=m, virtual_stages=v, activation_checkpointing=ck,
              suggest=False, measure="allocated")
    got = sm.memory(CFG, t * p * 2, **kw).parts["activations"]
    chunk = CFG.layers // (p * v) * layer_bytes(t, ck)
    recompute = layer_bytes(t, "none") if ck == "full" else 0.0
    # the loss term of the last stage, read off the unpipelined estimate (pp = 1)
    whole = sm.memory(CFG, t, tp=t, activation_checkpointing=ck, suggest=False,
                      measure="allocated").parts["activations"]
    loss = whole - CFG.layers * layer_bytes(t, ck) - recompute
    first = simulated_in_flight(p, v, m, 0) * chunk + recompute
    last = simulated_in_flight(p, v, m, p - 1) * chunk + recompute + loss
    assert got == pytest.approx(max(first, last), rel=1e-12)


def test_memory_interleaved_is_korthikantis_factor_on_1f1b():
    base = sm.memory(CFG, 16, tp=2, pp=4, microbatches=8, suggest=False,
                     measure="allocated")
    inter = sm.memory(CFG, 16, tp=2, pp=4, microbatches=8, virtual_stages=2, suggest=False,
                      measure="allocated")
    assert inter.parts["activations"] == pytest.approx(
        base.parts["activations"] * (1 + 3 / 8), rel=1e-12)  # first stage binds in both
    assert inter.settings["virtual_stages"] == 2
    assert "11 chunks of 6 layers" in inter.notes
    for part in ("parameters", "gradients", "optimizer"):  # model state unchanged
        assert inter.parts[part] == base.parts[part]


# ------------------------------------------------------------------ CLI twins

CLI = ["--model", MODEL, "--n", str(N), "--gpus-per-node", "8", "--nics-per-node", "8",
       "--tp", "4", "--pp", "4", "--microbatches", "8", "--virtual-stages", "2"]


def test_cli_plan(capsys):
    assert main(["plan", "--bw", "100Gbps", *CLI, "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["uncompressed_scaling_factor"] == pytest.approx(sf_of(2), rel=1e-12)
    assert out["settings"]["virtual_stages"] == 2


def test_cli_breakeven(capsys):
    assert main(["breakeven", *CLI, "--compressors", "powersgd:4", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["results"][0]["breakeven_bw"]
    want = sm.breakeven_bandwidth(MODEL, "powersgd:4", n=np.array([N]), virtual_stages=2,
                                  **JOB)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_cli_best_bucket(capsys):
    assert main(["best-bucket", "--bw", "100Gbps", *CLI, "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    want = sm.best_bucket_size(MODEL, N, BW, virtual_stages=2, **JOB)
    assert out["bucket_cap_mb"] == want.bucket_cap_mb
    assert out["iteration_time"] == pytest.approx(want.iteration_time, rel=1e-12)


def test_cli_refuses_bad_virtual_stages_by_name(capsys):
    bad = [a if a != "2" or i != len(CLI) - 1 else "3" for i, a in enumerate(CLI)]
    assert main(["plan", "--bw", "100Gbps", *bad]) == 2
    assert "--virtual-stages=3" in capsys.readouterr().err
