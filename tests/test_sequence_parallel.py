"""``sequence_parallel=`` (Megatron-style sequence parallelism over the tensor-parallel
ranks) in memory() and on every call that takes ``tp``.

Memory: each layer's activations against a hand count from Korthikanti et al.'s Table 2
("Reducing Activation Recomputation in Large Transformer Models", MLSys 2023,
arXiv:2205.05198), written out here from the table's rows, not from the library:
tensor parallelism sbh(10 + 24/t + 5as/(ht)), with sequence parallelism sbh(34/t +
5as/(ht)), selective recompute sbh(10 + 24/t) / 34 sbh/t, the full checkpoint's stored
input 2sbh / 2sbh/t; the 10, 24 and 5 for the layer at hand from the tensor-by-tensor
count of tests/helpers_activations.py (GPT's are those numbers). Time: the tensor-parallel collectives of a layer with sequence
parallelism are a reduce-scatter and an all-gather, each written out here in the ring
alpha-beta model ((t - 1) steps of S/t bytes), whose sum is the all-reduce's time.
"""

import json
import warnings

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.cli import main
from scalemodel.fusion import DDPBuckets
from scalemodel.model import Scenario

MODEL = "llama-2-13b"  # 40 layers, 40 heads, hidden 5120: tp 2, 4, 8 divide the heads
JOB = dict(gpus_per_node=8, nics_per_node=8, tp=4)
N, BW = 64, 100e9
GiB = 2**30


def cfg_of(model=MODEL):
    return sm.llm_config(model)


def hand_activations(cfg, t, sp, ck, flash, pp=1, m=1):
    """Korthikanti et al. Table 2 per layer, written out; the unfused loss 12 sbV/t on
    the vocabulary-parallel logits; one layer's difference while it is recomputed."""
    from helpers_activations import hand_units
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    sbh = float(s) * b * h
    rep, split, per_score = hand_units(cfg)  # GPT: 10, 24, 5
    score = 0.0 if flash else per_score * a * s / (h * t)
    if sp:
        whole = (rep + split) / t
        none, selective, stored = sbh * (whole + score), sbh * whole, 2 * sbh / t
    else:
        none, selective = sbh * (rep + split / t + score), sbh * (rep + split / t)
        stored = 2 * sbh
    layers = cfg.layers // pp
    loss = 12.0 * s * b * cfg.vocab / t
    if ck == "none":
        stage, redo = none * layers, 0.0
    elif ck == "selective":
        stage, redo = selective * layers, none - selective
    else:
        stage, redo = stored * layers, none
    if pp == 1:
        return stage + redo + loss
    first = min(pp, m) * stage + redo
    return max(first, stage + redo + loss)


def act(**kw):
    return sm.memory(MODEL, 64, suggest=False, **kw).parts["activations"]


# ------------------------------------------------------------------ memory

CASES = [(t, flash, ck) for t in (2, 4, 8) for flash in (True, False)
         for ck in ("none", "selective", "full") if not (flash and ck == "selective")]


@pytest.mark.parametrize("t, flash, ck", CASES)
@pytest.mark.parametrize("sp", [False, True])
def test_activations_are_korthikantis_table(t, flash, ck, sp):
    got = act(tp=t, flash_attention=flash, activation_checkpointing=ck, sequence_parallel=sp)
    assert got == pytest.approx(hand_activations(cfg_of(), t, sp, ck, flash), rel=1e-12)


@pytest.mark.parametrize("t, flash, ck", CASES)
def test_sequence_parallelism_never_increases_memory(t, flash, ck):
    kw = dict(tp=t, flash_attention=flash, activation_checkpointing=ck)
    with_sp = sm.memory(MODEL, 64, sequence_parallel=True, suggest=False, **kw)
    without = sm.memory(MODEL, 64, suggest=False, **kw)
    assert with_sp.parts["activations"] < without.parts["activations"]
    assert with_sp.per_gpu < without.per_gpu
    for part in ("parameters", "gradients", "optimizer"):  # the model state is the same
        assert with_sp.parts[part] == without.parts[part]
    assert with_sp.settings["sequence_parallel"] is True
    assert without.settings["sequence_parallel"] is False


def test_pipeline_stages_with_sequence_parallelism():
    kw = dict(tp=4, pp=4, microbatches=8)
    for ck in ("none", "full"):
        got = act(activation_checkpointing=ck, sequence_parallel=True, **kw)
        want = hand_activations(cfg_of(), 4, True, ck, True, pp=4, m=8)
        assert got == pytest.approx(want, rel=1e-12)


def test_interleaved_chunks_scale_the_split_layers():
    # the first stage of interleaved 1F1B keeps p v + p - 1 chunks of L / (p v) layers
    kw = dict(tp=4, pp=4, microbatches=8, virtual_stages=2, activation_checkpointing="none")
    cfg = cfg_of()
    from helpers_activations import hand_units
    layer = float(cfg.seq) * cfg.micro_batch * cfg.hidden * sum(hand_units(cfg)[:2]) / 4
    want = (4 * 2 + 4 - 1) * layer * cfg.layers / 8
    assert act(sequence_parallel=True, **kw) == pytest.approx(want, rel=1e-12)


def test_tp_1_equals_no_sequence_parallelism_and_warns():
    base = sm.memory(MODEL, 8, suggest=False)
    with pytest.warns(sm.ModelWarning, match=r"sequence_parallel=True has no effect.*tp=1"):
        got = sm.memory(MODEL, 8, sequence_parallel=True, suggest=False)
    assert got.per_gpu == base.per_gpu
    assert got.parts == base.parts
    with pytest.warns(sm.ModelWarning, match="sequence_parallel"):
        sf = sm.scaling_factor(MODEL, N, BW, sequence_parallel=True)
    assert sf == sm.scaling_factor(MODEL, N, BW)


def test_flash_selective_with_tp_stays_refused():
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory(MODEL, 64, tp=4, activation_checkpointing="selective",
                  sequence_parallel=True)
    assert exc.value.parameter == "activation_checkpointing"


def test_sequence_parallelism_decides_whether_it_fits():
    # llama-2-70b, micro-batch 2 x 4096, tp 8 with ZeRO-1 over 32 data-parallel GPUs:
    # the replicated layer-norm/dropout activations do not fit, split they do
    kw = dict(tp=8, sharding="zero1", gpus_per_node=8, micro_batch=2, suggest=False)
    without = sm.memory("llama-2-70b", 256, **kw)
    with_sp = sm.memory("llama-2-70b", 256, sequence_parallel=True, **kw)
    assert not without.fits and with_sp.fits


# ------------------------------------------------------------------ time


def test_tp_collectives_are_a_reduce_scatter_and_an_all_gather():
    intra_bw, alpha = 900e9 * 8, 7e-6
    for t in (2, 4, 8):
        sc = Scenario.build(MODEL, tp=t, gpus_per_node=8, intra_bw=intra_bw,
                            intra_alpha=alpha, sequence_parallel=True)
        cfg = cfg_of()
        S = float(cfg.micro_batch) * cfg.seq * cfg.hidden * 2  # bf16 activations [bytes]
        reduce_scatter = (t - 1) * alpha + (t - 1) / t * 8 * S / intra_bw
        all_gather = (t - 1) * alpha + (t - 1) / t * 8 * S / intra_bw
        # per layer: two pairs in forward (after attention, after the MLP) and two in
        # backward (the conjugates), per micro-batch forward + backward
        want = cfg.layers * 2 * 2 * (reduce_scatter + all_gather)
        got = sc.profile.provenance["model_parallel"]["tp_collectives_per_microbatch"]
        assert got == pytest.approx(want, rel=1e-12)
        assert sc.profile.provenance["model_parallel"]["sequence_parallel"] is True


@pytest.mark.parametrize("kw", [dict(), dict(activation_checkpointing="full"),
                                dict(sharding="zero3"), dict(pp=2, microbatches=8),
                                dict(pp=2, microbatches=8, virtual_stages=2)])
def test_iteration_time_is_the_same_step(kw):
    a = sm.iteration_time(MODEL, N, BW, sequence_parallel=True, **JOB, **kw)
    b = sm.iteration_time(MODEL, N, BW, **JOB, **kw)
    assert a.total == b.total and a.scaling_factor == b.scaling_factor
    assert a.settings["sequence_parallel"] is True
    assert b.settings["sequence_parallel"] is False


# ------------------------------------------------------------------ every call agrees


def it_sp(**kw):
    return sm.iteration_time(MODEL, N, BW, sequence_parallel=True, **{**JOB, **kw})


def test_scaling_factor():
    got = sm.scaling_factor(MODEL, N, BW, sequence_parallel=True, **JOB)
    assert got == pytest.approx(it_sp().scaling_factor, rel=1e-12)


def test_min_compression_and_required_bandwidth_memory_checks():
    mem = sm.memory(MODEL, N, gpu="h100-sxm", tp=4, sequence_parallel=True,
                    gpus_per_node=8).per_gpu
    res = sm.min_compression(MODEL, BW, n=N, target=0.9, sequence_parallel=True, **JOB)
    assert res.memory_per_gpu == pytest.approx(mem, rel=1e-12)
    assert res.settings["sequence_parallel"] is True
    plain = sm.min_compression(MODEL, BW, n=N, target=0.9, **JOB)
    assert res.ratio == plain.ratio and res.memory_per_gpu < plain.memory_per_gpu
    bw = sm.required_bandwidth(MODEL, n=N, target=0.5, sequence_parallel=True, **JOB)
    assert bw.memory_per_gpu == pytest.approx(mem, rel=1e-12)
    assert sm.scaling_factor(MODEL, N, bw.bw, sequence_parallel=True,
                             **JOB) == pytest.approx(0.5, rel=1e-6)


def test_plan_and_compressed_scaling_factor():
    plan = sm.plan_compression(MODEL, BW, n=N, sequence_parallel=True, **JOB)
    assert plan.uncompressed_scaling_factor == pytest.approx(it_sp().scaling_factor,
                                                             rel=1e-12)
    assert plan.settings["sequence_parallel"] is True
    assert plan.memory_per_gpu == pytest.approx(
        sm.memory(MODEL, N, gpu="h100-sxm", tp=4, sequence_parallel=True,
                  gpus_per_node=8).per_gpu, rel=1e-12)
    assert "sequence parallel" in plan.message
    got = sm.compressed_scaling_factor(MODEL, "none", N, BW, sequence_parallel=True, **JOB)
    assert got == pytest.approx(it_sp().scaling_factor, rel=1e-12)


def test_breakeven_bandwidth():
    kw = dict(n=N, sequence_parallel=True, **JOB)
    bw = sm.breakeven_bandwidth(MODEL, "powersgd:4", **kw)
    assert 0 < bw < np.inf

    def gain(rate):
        return (sm.compressed_scaling_factor(MODEL, "powersgd:4", bw=rate, **kw)
                / sm.compressed_scaling_factor(MODEL, "none", bw=rate, **kw) - 1)

    assert gain(bw * 0.99) > 0 > gain(bw * 1.01)


def test_sensitivities():
    s = sm.sensitivities(MODEL, N, BW, sequence_parallel=True, **JOB)
    assert s.scaling_factor == pytest.approx(it_sp().scaling_factor, rel=1e-12)
    assert s.settings["sequence_parallel"] is True


def test_best_bucket_size():
    res = sm.best_bucket_size(MODEL, N, BW, sequence_parallel=True, **JOB)
    it = it_sp(fusion=DDPBuckets(res.bucket_cap_mb * 2**20))
    assert res.iteration_time == pytest.approx(it.total, rel=1e-12)
    assert "sequence parallel" in res.message


def test_whatif_table():
    from scalemodel.whatif import paper_profile, whatif_table

    t = whatif_table([MODEL], ns=[N], bws=[BW], ratios=[1], tp=4, sequence_parallel=True)
    it = sm.iteration_time(paper_profile(MODEL), N, BW, algorithm="ring", fusion="horovod",
                           tp=4, sequence_parallel=True)
    assert float(t[MODEL][0, 0, 0]) == pytest.approx(it.scaling_factor, rel=1e-12)


# ------------------------------------------------------------------ bad values


def _calls():
    from scalemodel.whatif import whatif_table

    return {
        "scaling_factor": lambda v: sm.scaling_factor(MODEL, N, BW, sequence_parallel=v,
                                                      **JOB),
        "iteration_time": lambda v: sm.iteration_time(MODEL, N, BW, sequence_parallel=v,
                                                      **JOB),
        "min_compression": lambda v: sm.min_compression(MODEL, BW, n=N,
                                                        sequence_parallel=v, **JOB),
        "required_bandwidth": lambda v: sm.required_bandwidth(MODEL, n=N,
                                                              sequence_parallel=v, **JOB),
        "plan_compression": lambda v: sm.plan_compression(MODEL, BW, n=N,
                                                          sequence_parallel=v, **JOB),
        "compressed_scaling_factor": lambda v: sm.compressed_scaling_factor(
            MODEL, "bf16", N, BW, sequence_parallel=v, **JOB),
        "breakeven_bandwidth": lambda v: sm.breakeven_bandwidth(
            MODEL, "bf16", n=N, sequence_parallel=v, **JOB),
        "sensitivities": lambda v: sm.sensitivities(MODEL, N, BW, sequence_parallel=v,
                                                    **JOB),
        "best_bucket_size": lambda v: sm.best_bucket_size(MODEL, N, BW,
                                                          sequence_parallel=v, **JOB),
        "whatif_table": lambda v: whatif_table([MODEL], ns=[N], bws=[BW], ratios=[1],
                                               tp=4, sequence_parallel=v),
        "memory": lambda v: sm.memory(MODEL, N, tp=4, sequence_parallel=v),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
@pytest.mark.parametrize("bad", [1, 0, "yes", None, 1.0])
def test_bad_values_refused_by_name(name, bad):
    # 1 hashes like True: the check runs before the scenario cache
    _calls()[name](True)
    with pytest.raises(sm.ParameterTypeError) as exc:
        _calls()[name](bad)
    assert exc.value.parameter == "sequence_parallel"
    assert f"sequence_parallel={bad!r}" in str(exc.value)


# ------------------------------------------------------------------ CLI twins

CLI = ["--model", MODEL, "--n", str(N), "--gpus-per-node", "8", "--nics-per-node", "8",
       "--tp", "4", "--sequence-parallel"]


def test_cli_iteration(capsys):
    assert main(["iteration", "--bw", "100Gbps", *CLI, "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["sequence_parallel"] is True
    assert out["total"] == pytest.approx(it_sp().total, rel=1e-12)
    assert out["memory_per_gpu"] == pytest.approx(it_sp_memory(), rel=1e-12)


def it_sp_memory():
    return sm.memory(MODEL, N, gpu="h100-sxm", tp=4, sequence_parallel=True,
                     gpus_per_node=8).per_gpu


def test_cli_plan(capsys):
    assert main(["plan", "--bw", "100Gbps", *CLI, "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["sequence_parallel"] is True
    assert out["uncompressed_scaling_factor"] == pytest.approx(it_sp().scaling_factor,
                                                               rel=1e-12)


def test_cli_min_compression(capsys):
    assert main(["min-compression", "--bw", "100Gbps", "--target", "0.9", *CLI,
                 "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    want = sm.min_compression(MODEL, BW, n=N, target=0.9, sequence_parallel=True, **JOB)
    assert out["memory_per_gpu"] == pytest.approx(want.memory_per_gpu, rel=1e-12)


def test_cli_best_bucket(capsys):
    assert main(["best-bucket", "--bw", "100Gbps", *CLI, "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    want = sm.best_bucket_size(MODEL, N, BW, sequence_parallel=True, **JOB)
    assert out["iteration_time"] == pytest.approx(want.iteration_time, rel=1e-12)


def test_cli_tp_1_warns(capsys):
    args = ["iteration", "--bw", "100Gbps", "--model", MODEL, "--n", "8",
            "--sequence-parallel"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.ModelWarning)  # the CLI prints it
        assert main(args) in (0, None)
    assert "--sequence-parallel has no effect" in capsys.readouterr().err
