"""Attention without flash attention (transformer_profile(..., flash_attention=False)): the
element-wise passes over each layer's a*s^2*b scores, memory-bound, added to the forward
and backward at the GPU's HBM bandwidth and never scaled by an efficiency (fitted or
carried), recompute included."""

import warnings

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.checkpointing import with_recompute
from scalemodel.efficiency import at_fitted_efficiency, rescaled, score_seconds
from scalemodel.workloads import SCORE_PASS_BYTES, attention_score_seconds

GPT = sm.TransformerConfig(layers=6, hidden=1024, heads=16, ffn=4096, vocab=51200, seq=2048,
                           micro_batch=4, gated_ffn=False, norm="layernorm", bias=True,
                           learned_positions=2048, dropout=True, name="gpt-small")
GPU = "a100-80gb"


def _pair(cfg=GPT, **kw):
    return (sm.transformer_profile(cfg, GPU, flash_attention=True, **kw),
            sm.transformer_profile(cfg, GPU, flash_attention=False, **kw))


@pytest.mark.parametrize("dropout, fwd, bwd", [(True, 9, 11), (False, 4, 6)])
def test_score_passes_by_hand(dropout, fwd, bwd):
    """Forward 4 + 5 bytes per score (fused scale-mask-softmax; dropout's mask and output),
    backward 6 + 5, at the A100 80GB's 2.039 TB/s; charged on each layer's value
    projection, so every later gradient waits for them."""
    import attrs
    cfg = attrs.evolve(GPT, dropout=dropout)
    assert tuple(sum(SCORE_PASS_BYTES[k][j] * (1 if j == 0 else dropout) for j in (0, 1))
                 for k in ("forward", "backward")) == (fwd, bwd)
    flash, plain = _pair(cfg, efficiency=0.5)
    scores = 4 * 16 * 2048**2  # b a s^2 per layer
    hbm = sm.get_gpu(GPU).hbm_bandwidth
    assert hbm == 2.039e12
    assert attention_score_seconds(cfg, GPU) == pytest.approx(
        (scores * fwd / hbm, scores * bwd / hbm), rel=1e-12)
    assert plain.forward_time - flash.forward_time == pytest.approx(
        6 * scores * fwd / hbm, rel=1e-12)
    assert plain.backward_time - flash.backward_time == pytest.approx(
        6 * scores * bwd / hbm, rel=1e-12)
    # ready times: each layer's passes join at its value projection (backward order)
    names = plain.tensor_names
    passed = np.cumsum([n.endswith("attn.v.weight") for n in names])
    np.testing.assert_allclose(plain.tensor_ready - flash.tensor_ready,
                               passed * scores * bwd / hbm, rtol=1e-9, atol=1e-15)
    assert plain.tensor_ready[-1] == pytest.approx(plain.backward_time, rel=1e-12)
    rec = plain.provenance["attention_scores"]
    assert rec["bytes_per_score"] == [fwd, bwd]
    assert "attention_scores" not in flash.provenance
    assert score_seconds(flash) == 0.0
    assert score_seconds(plain) == pytest.approx(6 * scores * (fwd + bwd) / hbm, rel=1e-12)


@pytest.mark.parametrize("accum", [1, 4])
def test_rescaled_is_the_profile_built_at_the_other_efficiency(accum):
    """An efficiency ratio scales the FLOP-bound time only: the same as building the
    profile at the other efficiency (the score passes unchanged). The update is given as
    0 here: a fitted efficiency scales a derived profile's update too, as it always has."""
    plain = sm.transformer_profile(GPT, GPU, efficiency=0.3, flash_attention=False,
                                   grad_accum=accum, update_time=0.0)
    other = sm.transformer_profile(GPT, GPU, efficiency=0.55, flash_attention=False,
                                   grad_accum=accum, update_time=0.0)
    got = rescaled(plain, 0.3 / 0.55)
    assert got.iteration_time == pytest.approx(other.iteration_time, rel=1e-12)
    assert score_seconds(got) == 0.0  # rescaled once: the record is spent
    flash = sm.transformer_profile(GPT, GPU, efficiency=0.3, grad_accum=accum)
    assert rescaled(flash, 0.5).iteration_time == pytest.approx(
        0.5 * flash.iteration_time, rel=1e-12)
    assert rescaled(plain, 1.0) is plain


def test_a_fitted_efficiency_carries_with_the_score_passes_kept():
    """A cluster fitted on a non-flash run at another sequence length: the job's profile
    computes at the fitted efficiency, its score passes (which grow as s^2) unscaled: the
    same time as its profile built at that efficiency."""
    import attrs
    truth = 0.5
    run_prof = sm.transformer_profile(GPT, GPU, efficiency=truth, flash_attention=False)
    kw = dict(gpus_per_node=8, nics_per_node=8)
    measured = sm.iteration_time(run_prof, 16, 200e9, **kw).total
    start = sm.transformer_profile(GPT, GPU, efficiency=0.3, flash_attention=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster([dict(model=start, n=16, bw=200e9, iteration_time=measured)],
                             fit=["efficiency"], **kw)
    e = fit.cluster.extra["efficiency"]["value"]
    lo, hi = fit.cluster.extra["efficiency"]["interval"]
    assert lo <= truth <= hi and e == pytest.approx(truth, rel=0.03)  # one run: the
    # prior pulls it slightly (as much as the same run with flash attention: 0.489)
    job_cfg = attrs.evolve(GPT, seq=4096, micro_batch=2, learned_positions=4096)
    job = sm.transformer_profile(job_cfg, GPU, efficiency=0.3, flash_attention=False,
                                 update_time=0.0)  # (a fitted efficiency scales an update)
    built = sm.transformer_profile(job_cfg, GPU, efficiency=e, flash_attention=False,
                                   update_time=0.0)
    assert at_fitted_efficiency(job, fit.cluster).iteration_time == pytest.approx(
        built.iteration_time, rel=1e-12)
    # on 32 GPUs: the same within what the ready times' shape changes (the rescaled
    # profile spreads the score passes over the backward; the built one puts them at
    # each layer's value projection)
    got = sm.iteration_time(job, 32, 200e9, cluster=fit.cluster, **kw).total
    want = sm.iteration_time(built, 32, 200e9, cluster=fit.cluster, **kw).total
    assert got == pytest.approx(want, rel=1e-3)
    # scaling the memory-bound passes by the efficiency ratio too: over 3 % too fast
    naive = sm.iteration_time(job.scaled_to(job.iteration_time * 0.3 / e), 32, 200e9,
                              cluster=fit.cluster, **kw).total
    assert naive < got * 0.97


def test_recompute_of_a_non_flash_profile():
    """Full recompute replays each layer's score passes (memory-bound, recorded so no
    efficiency scales them); selective follows the profile's attention (Korthikanti's
    recompute of the attention core without flash)."""
    flash, plain = _pair(efficiency=0.4)
    full = with_recompute(plain, "full")
    f_layer = plain.provenance["attention_scores"]["forward_time"] / GPT.layers
    assert full.provenance["attention_scores"]["recompute_time"] == pytest.approx(
        GPT.layers * f_layer, rel=1e-12)
    assert score_seconds(full) == pytest.approx(score_seconds(plain) + 6 * f_layer,
                                                rel=1e-12)
    assert full.backward_time - plain.backward_time == pytest.approx(
        sum(full.provenance["recompute"]), rel=1e-12)
    sel = with_recompute(plain, "selective")
    assert sel.provenance["checkpointing"]["flash_attention"] is False
    assert with_recompute(flash, "selective").provenance["checkpointing"][
        "flash_attention"] is True
    # rebuilt at another efficiency and recomputed ~ recomputed and rescaled (with_recompute
    # splits the forward over the blocks by their backward times, score passes included,
    # so the recomputed score share is each layer's forward passes only to within 1 %)
    other = sm.transformer_profile(GPT, GPU, efficiency=0.6, flash_attention=False,
                                   update_time=plain.update_time * 0.4 / 0.6)
    assert rescaled(full, 0.4 / 0.6).iteration_time == pytest.approx(
        with_recompute(other, "full").iteration_time, rel=0.01)
    # without the record the same rescale would scale the recomputed passes too: farther
    assert abs(full.scaled_to(full.iteration_time * 0.4 / 0.6).iteration_time
               / with_recompute(other, "full").iteration_time - 1) > 0.05


def test_bad_flash_flag_and_record_are_named():
    with pytest.raises(sm.ParameterTypeError, match="flash_attention"):
        sm.transformer_profile(GPT, GPU, flash_attention="no")
    with pytest.raises(sm.ParameterTypeError, match="flash_attention"):
        sm.transformer_profile(GPT, GPU, flash_attention=1)
    plain = sm.transformer_profile(GPT, GPU, flash_attention=False)
    for bad in ({"forward_time": -1.0, "backward_time": 0.0},
                {"forward_time": "x", "backward_time": 0.0},
                {"backward_time": 0.0},
                {"forward_time": 0.0, "backward_time": 1e9}):
        import attrs
        tampered = attrs.evolve(plain, provenance=dict(plain.provenance,
                                                       attention_scores=bad))
        with pytest.raises(sm.InvalidParameterError, match="attention_scores"):
            score_seconds(tampered)


def test_answers_check_memory_with_the_profiles_attention():
    """A non-flash profile's memory check keeps the score matrix (memory(...,
    flash_attention=False)), as its time keeps the passes."""
    flash, plain = _pair(efficiency=0.4)
    kw = dict(gpus_per_node=8, nics_per_node=8)
    a = sm.iteration_time(flash, 16, 200e9, **kw)
    b = sm.iteration_time(plain, 16, 200e9, **kw)
    assert b.forward > a.forward and b.backward > a.backward
    want = sm.memory(GPT, 16, gpu=GPU, flash_attention=False).reserved_per_gpu
    m = sm.min_compression(plain, 200e9, n=16, gpu=GPU, **kw)
    assert m.memory_per_gpu == pytest.approx(want, rel=1e-12)
    assert m.memory_per_gpu > sm.min_compression(flash, 200e9, n=16, gpu=GPU,
                                                 **kw).memory_per_gpu


def test_cli_no_flash_attention(tmp_path, capsys):
    import json

    from scalemodel.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "n_positions": 1024, "vocab_size": 50257}))
    base = ["iteration", "--model", str(path), "--seq", "1024", "--micro-batch", "8",
            "--gpu", "a100-80gb", "--n", "16", "--bw", "100e9", "--json"]
    assert main(base) == 0
    flash = json.loads(capsys.readouterr().out)
    assert main(base + ["--no-flash-attention"]) == 0
    plain = json.loads(capsys.readouterr().out)
    cfg = sm.TransformerConfig.from_hf_config(json.loads(path.read_text()), seq=1024,
                                              micro_batch=8)
    f, b = attention_score_seconds(cfg, "a100-80gb")
    assert plain["forward"] - flash["forward"] == pytest.approx(12 * f, rel=1e-9)
    assert plain["backward"] - flash["backward"] == pytest.approx(12 * b, rel=1e-9)
    # a built-in profile fixes its attention: refused by name
    assert main(["iteration", "--model", "resnet50", "--n", "16", "--bw", "100e9",
                 "--no-flash-attention"]) == 2
    assert "--no-flash-attention" in capsys.readouterr().err


def test_a_run_list_names_the_attention(tmp_path):
    """A run of a config.json calibrates with its attention as run (``flash_attention``
    column); with a built-in model the column is refused by name."""
    import json

    from scalemodel.runs import load_runs

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "n_positions": 1024, "vocab_size": 50257}))
    csv = tmp_path / "runs.csv"
    csv.write_text("model,n,bw,iteration_time,seq,micro_batch,gpu,flash_attention\n"
                   f"{path},16,100e9,0.2,1024,8,a100-80gb,false\n"
                   f"{path},16,100e9,0.2,1024,8,a100-80gb,\n")
    plain, flash = load_runs(csv)
    assert "attention_scores" in plain.profile.provenance
    assert "attention_scores" not in flash.profile.provenance
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\].flash_attention"):
        load_runs([dict(model="resnet50", n=16, bw=100e9, iteration_time=0.2,
                        flash_attention=False)])
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\].flash_attention"):
        load_runs([dict(model=str(path), n=16, bw=100e9, iteration_time=0.2,
                        flash_attention="maybe")])


def test_selective_recompute_replays_the_profiles_own_score_passes():
    """Korthikanti's selective recompute of a non-flash profile replays the attention core:
    its matrix multiplies (their share of the layer's forward) and the same score passes
    as its forward, not another kernel count."""
    from scalemodel.checkpointing import recompute_fraction
    _, plain = _pair(efficiency=0.4)
    sel = with_recompute(plain, "selective")
    f_layer = plain.provenance["attention_scores"]["forward_time"] / GPT.layers
    frac = recompute_fraction(GPT, "selective", flash_attention=False)
    per_block = [r for r in sel.provenance["recompute"] if r > 0]
    assert len(per_block) == GPT.layers
    fwd_block = (per_block[0] - f_layer) / frac  # the block's forward share
    assert 0 < fwd_block < plain.forward_time / GPT.layers * 1.01
    assert sel.provenance["recompute_elementwise_seconds"] == pytest.approx(f_layer,
                                                                           rel=1e-12)
    assert sel.provenance["attention_scores"]["recompute_time"] == pytest.approx(
        GPT.layers * (frac * f_layer + f_layer), rel=1e-12)


def test_memory_follows_the_profiles_attention():
    flash, plain = _pair(efficiency=0.4)
    assert sm.memory(plain, 16, gpu=GPU).reserved_per_gpu == pytest.approx(
        sm.memory(GPT, 16, gpu=GPU, flash_attention=False).reserved_per_gpu, rel=1e-12)
    assert sm.memory(flash, 16, gpu=GPU).reserved_per_gpu == pytest.approx(
        sm.memory(GPT, 16, gpu=GPU).reserved_per_gpu, rel=1e-12)
    # said explicitly, the call wins
    assert sm.memory(plain, 16, gpu=GPU, flash_attention=True).reserved_per_gpu == \
        pytest.approx(sm.memory(GPT, 16, gpu=GPU).reserved_per_gpu, rel=1e-12)
    with pytest.raises(sm.ParameterTypeError, match="flash_attention"):
        sm.memory(GPT, 16, gpu=GPU, flash_attention="no")


def test_cli_best_bucket_takes_a_config_json(tmp_path, capsys):
    """best-bucket builds a config.json model as the other commands do (it crashed with an
    AttributeError on --seq before), flash attention or not."""
    import json

    from scalemodel.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "n_positions": 1024, "vocab_size": 50257}))
    out = {}
    for extra in ([], ["--no-flash-attention"]):
        assert main(["best-bucket", "--model", str(path), "--seq", "1024", "--micro-batch",
                     "8", "--n", "16", "--bw", "100e9", "--json"] + extra) == 0
        out[bool(extra)] = json.loads(capsys.readouterr().out)
    assert out[True]["iteration_time"] > out[False]["iteration_time"]
    assert main(["best-bucket", "--model", "resnet50", "--n", "16", "--bw", "100e9",
                 "--seq", "5"]) == 2
    assert "--seq" in capsys.readouterr().err
