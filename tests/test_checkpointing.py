"""Activation checkpointing: the values accepted, Korthikanti et al.'s memory per layer,
torchtitan's op-level selective policy, the recompute time per layer, and the recompute
in the closed form against the discrete-event reference."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from des_sharding import simulate_sharded
from scalemodel.checkpointing import (Checkpointing, activation_bytes, elementwise_recompute_bytes,
                                      layer_activation_bytes,
                                      recompute_fraction, resolve_checkpointing, with_recompute)
from scalemodel.sharding import Sharding
from test_sharding import ELEM, configurations, profiles
from helpers_activations import hand_units

LLAMA = sm.llm_config("llama-3-8b", seq=8192, micro_batch=2)


@pytest.mark.parametrize("value,mode,fraction", [
    (None, "none", 0.0), (False, "none", 0.0), ("none", "none", 0.0), (True, "full", 1.0),
    ("full", "full", 1.0), ("Selective", "selective", 0.0), (0.5, "full", 0.5),
    (1, "full", 1.0), (0.0, "none", 0.0), (np.bool_(True), "full", 1.0)])
def test_values_accepted(value, mode, fraction):
    ck = resolve_checkpointing(value)
    assert (ck.mode, ck.fraction) == (mode, fraction)


@pytest.mark.parametrize("bad", ["partial", "ful", 1.5, -0.1, math.nan, [1], {"mode": "full"}])
def test_bad_values_name_the_value_and_the_valid_ones(bad):
    with pytest.raises(sm.InvalidParameterError, match="activation_checkpointing=.*"
                       "'none', 'selective', 'full'"):
        resolve_checkpointing(bad)
    with pytest.raises(sm.InvalidParameterError, match="activation_checkpointing"):
        sm.memory("llama-2-7b", 8, activation_checkpointing=bad)
    with pytest.raises(sm.InvalidParameterError, match="activation_checkpointing"):
        sm.scaling_factor("llama-2-7b", 8, 1e11, activation_checkpointing=bad)


def test_full_early_stop_is_full_with_early_stopping():
    ck = resolve_checkpointing("Full-Early-Stop", flash_attention=False)
    assert (ck.mode, ck.fraction, ck.early_stop, ck.flash_attention) == (
        "full", 1.0, True, False)
    assert ck.describe() == "full (early stop)"
    assert Checkpointing("full", 0.5, early_stop=True).describe() == \
        "full on 50% of layers (early stop)"
    assert resolve_checkpointing("full").early_stop is False
    assert Checkpointing("full", 0.0, early_stop=True) == Checkpointing("none")
    with pytest.raises(sm.InvalidParameterError, match="early_stop=True.*'selective'"):
        Checkpointing("selective", early_stop=True)
    with pytest.raises(sm.ParameterTypeError, match="early_stop"):
        Checkpointing("full", early_stop="yes")


def test_a_fraction_applies_to_full_only():
    with pytest.raises(sm.InvalidParameterError, match="fraction=0.5.*'full'"):
        Checkpointing("selective", 0.5)


def test_korthikanti_per_layer_formulas():
    s, b, h, a = LLAMA.seq, LLAMA.micro_batch, LLAMA.hidden, LLAMA.heads
    sbh = s * b * h
    rep, split, score = hand_units(LLAMA)
    assert layer_activation_bytes(LLAMA, "none", False) == pytest.approx(
        sbh * (rep + split + score * a * s / h))
    assert layer_activation_bytes(LLAMA, "none", True) == pytest.approx((rep + split) * sbh)
    assert layer_activation_bytes(LLAMA, "selective", False) == pytest.approx(
        (rep + split) * sbh)
    assert layer_activation_bytes(LLAMA, "full", True) == pytest.approx(2 * sbh)
    # torchtitan's op-level policy on a SwiGLU layer: mm 1, 3, 5, 7 saved (wq, wv, w1,
    # w2) with the layer input and the attention output; wk, wo, w3 recomputed
    kv = LLAMA.kv_heads * LLAMA.head_dim
    saved = h + h + (h + kv + LLAMA.ffn + h)
    assert layer_activation_bytes(LLAMA, "selective", True) == pytest.approx(2 * s * b * saved)


def test_memory_orders_none_selective_full():
    for name in ("llama-2-7b", "llama-3-8b", "mistral-7b", "gpt2"):
        try:
            cfg = sm.llm_config(name)
        except sm.ScalemodelError:
            continue
        for flash in (True, False):
            m = {ck: sm.memory(cfg, 8, sharding="zero3", flash_attention=flash,
                               activation_checkpointing=ck).per_gpu
                 for ck in ("none", "selective", "full")}
            assert m["none"] >= m["selective"] > m["full"]
            if not flash:
                assert m["none"] > m["selective"]
        # a fraction of layers lies between none and full
        half = sm.memory(cfg, 8, sharding="zero3", activation_checkpointing=0.5).per_gpu
        assert m["full"] < half < m["none"]


def test_activation_bytes_of_a_fraction():
    L = LLAMA.layers
    none = layer_activation_bytes(LLAMA, "none")
    full = layer_activation_bytes(LLAMA, "full")
    loss = 12 * LLAMA.seq * LLAMA.micro_batch * LLAMA.vocab
    k = round(0.25 * L)
    assert activation_bytes(LLAMA, 0.25) == pytest.approx(k * full + (L - k) * none + loss)
    assert activation_bytes(LLAMA, "full") == pytest.approx(L * full + none + loss)


def test_recompute_fractions_by_hand():
    c = LLAMA
    T, h, d = c.tokens, c.hidden, c.heads * c.head_dim
    kv = c.kv_heads * c.head_dim
    mm = 2 * T * (h * d + 2 * h * kv + d * h + 3 * h * c.ffn)
    core = 4 * c.micro_batch * c.seq ** 2 * d
    assert recompute_fraction(c, "full") == 1.0
    assert recompute_fraction(c, "none") == 0.0
    assert recompute_fraction(c, Checkpointing("selective", flash_attention=False)) == \
        pytest.approx(core / (mm + core))
    redo = 2 * T * (h * kv + d * h + h * c.ffn)  # wk, wo, w3
    assert recompute_fraction(c, "selective") == pytest.approx(redo / (mm + core))
    with pytest.raises(sm.InvalidParameterError, match="selective"):
        recompute_fraction(None, "selective")
    # early stop: the down projection (the last product) is not recomputed
    down = 2 * T * c.ffn * h
    assert recompute_fraction(c, "full-early-stop") == pytest.approx(1 - down / (mm + core))
    import attrs
    assert recompute_fraction(attrs.evolve(c, dropout=True), "full-early-stop") == 1.0
    with pytest.raises(sm.InvalidParameterError, match="full-early-stop"):
        recompute_fraction(None, "full-early-stop")


def _elementwise_by_hand(c, flash):
    """The recomputed element-wise bytes of one layer, op by op (bf16, 2 bytes): the
    module's table written out from the traced op list."""
    T, h, f = c.tokens, c.hidden, c.ffn
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    if not flash:
        scores = c.micro_batch * c.heads * c.seq ** 2
        return scores * (2 * 2 + 2 * 2 + 1 + 2 * 2)  # scale, masked_fill + mask, softmax
    norms = 2 * (T * h * 2 + T * h * 2)  # read x, write y
    rope = sum(n * 2 * (2 + 1 + 2 + 2 + 3) for n in (T * q, T * kv))
    adds = 2 * (3 * T * h * 2)
    swiglu = T * f * 2 * 2 + T * f * 2 * 3  # silu, mul
    return norms + rope + adds + swiglu


def test_elementwise_recompute_bytes_by_hand():
    for flash in (True, False):
        ck = Checkpointing("selective", flash_attention=flash)
        assert elementwise_recompute_bytes(LLAMA, ck) == pytest.approx(
            _elementwise_by_hand(LLAMA, flash), rel=1e-12)
    assert elementwise_recompute_bytes(LLAMA, "full") == 0.0
    assert elementwise_recompute_bytes(None, "none") == 0.0
    with pytest.raises(sm.InvalidParameterError, match="selective"):
        elementwise_recompute_bytes(None, "selective")


def test_recompute_adds_each_blocks_share_of_forward():
    prof = sm.transformer_profile(LLAMA, efficiency=0.4)
    units = sm.transformer_units(LLAMA, efficiency=0.4)
    blocks_fwd = float(units.forward_time[1:-1].sum())
    hbm = sm.get_gpu(prof.provenance["gpu"]).hbm_bandwidth
    for ck in ("full", "selective", Checkpointing("selective", flash_attention=False)):
        p2 = with_recompute(prof, ck)
        added = p2.backward_time - prof.backward_time
        flash = getattr(ck, "flash_attention", True)
        memory = (LLAMA.layers * _elementwise_by_hand(LLAMA, flash) / hbm
                  if ck != "full" else 0.0)
        assert added == pytest.approx(recompute_fraction(LLAMA, ck) * blocks_fwd + memory,
                                      rel=1e-12)
        assert p2.iteration_time == pytest.approx(prof.iteration_time + added)
    assert with_recompute(prof, "none") is prof
    # compute-bound (a very fast network): the iteration grows by the recompute
    fast = dict(n=8, bw=1e18, sharding="zero3")
    t0 = sm.iteration_time(prof, **fast).total
    t1 = sm.iteration_time(prof, activation_checkpointing="full", **fast).total
    assert t1 - t0 == pytest.approx(blocks_fwd, rel=1e-9)


def test_a_profile_without_blocks_cannot_checkpoint():
    with pytest.raises(sm.InvalidParameterError, match="numbered blocks"):
        sm.scaling_factor("resnet50", 8, 1e10, activation_checkpointing="full")
    with pytest.warns(sm.ModelWarning, match="activation_checkpointing='full' is left out"):
        m = sm.memory("bert-base", 8, activation_checkpointing="full")
    assert not m.complete and m.settings["activation_checkpointing"] == "full"


def _chosen_blocks(profile, fraction):
    names = {n.split(".")[1] for n in profile.tensor_names if n.startswith("layers.")}
    L = len(names)
    return {f"layers.{i}": 1.0 for i in range(round(fraction * L))}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recompute_closed_form_equals_discrete_event_reference(data):
    profile = data.draw(profiles())
    if profile.tensor_names is None or not any(n.startswith("layers.")
                                               for n in profile.tensor_names):
        return
    cfg = data.draw(configurations(profile))
    fraction = data.draw(st.sampled_from([1.0, 0.5, data.draw(st.floats(0.05, 1.0))]))
    ck = Checkpointing("full", fraction)
    sh = Sharding(cfg["strategy"], param_dtype=cfg["param_dtype"],
                  reduce_dtype=cfg["reduce_dtype"])
    topo = {k: cfg[k] for k in ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha")
            if k in cfg}
    t_model = sm.iteration_time(
        profile, n=cfg["n"], bw=cfg["bw"], utilization=cfg["utilization"],
        compression=cfg["compression"], algorithm=cfg["algorithm"], fusion=cfg["fusion"],
        alpha=cfg["alpha"], codec_cost=cfg["codec_cost"], sharding=sh,
        activation_checkpointing=ck, **topo).total
    fusion = cfg["fusion"]
    wrap = fusion.min_params if isinstance(fusion, sm.SizeWrap) else fusion
    des_fusion = fusion if fusion in ("ddp", "horovod") else None
    if des_fusion:
        wrap = "none"
    t_des = simulate_sharded(
        profile, cfg["n"], cfg["bw"], strategy=cfg["strategy"], wrap=wrap, fusion=des_fusion,
        param_bytes=ELEM.get(cfg["param_dtype"]), reduce_bytes=ELEM.get(cfg["reduce_dtype"]),
        utilization=cfg["utilization"], compression=cfg["compression"],
        algorithm=cfg["algorithm"], alpha=cfg["alpha"], codec_cost=cfg["codec_cost"],
        element_bytes=ELEM[profile.precision], grad_accum=profile.grad_accum,
        recompute=_chosen_blocks(profile, fraction), **topo)
    assert t_model == pytest.approx(t_des, rel=1e-9)


@pytest.mark.parametrize("ck", ["selective", Checkpointing("selective", flash_attention=False),
                                "full", "full-early-stop"])
@pytest.mark.parametrize("strategy", ["zero2", "zero3", "hybrid_shard"])
def test_recompute_of_a_transformer_equals_discrete_event_reference(ck, strategy):
    cfg = sm.TransformerConfig(layers=4, hidden=512, heads=8, ffn=1536, vocab=1000, seq=1024,
                               micro_batch=2, kv_heads=2, gated_ffn=True, dtype="bf16")
    prof = sm.transformer_profile(cfg, efficiency=0.5)
    frac = recompute_fraction(cfg, ck)  # checked by hand above
    memory = elementwise_recompute_bytes(cfg, ck) / sm.get_gpu(prof.provenance["gpu"]).hbm_bandwidth
    link = sm.get_gpu(prof.provenance["gpu"]).intra_node_bw
    for bw in (1e9, 1e11, 1e13):
        t_model = sm.iteration_time(prof, n=16, bw=bw, sharding=strategy, fusion="block",
                                    activation_checkpointing=ck).total
        t_des = simulate_sharded(prof, 16, bw, strategy=strategy, wrap="block", fusion=None,
                                 element_bytes=2,
                                 recompute={f"layers.{i}": (frac, memory) for i in range(4)},
                                 intra_bw=link)  # the profile's GPU's (hybrid_shard)
        assert t_model == pytest.approx(t_des, rel=1e-9)


def _published():
    import csv
    from pathlib import Path

    path = Path(__file__).parent.parent / "benchmarks" / "data" / "published_memory.csv"
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _checkpointing(value):
    """A row's ``activation_checkpointing``: a name or a fraction of layers ("0.5")."""
    try:
        return float(value)
    except ValueError:
        return value


def _estimate(row, ck=None, measure="allocated"):
    # the row's loss, accounting and allocator setting as its source shows them
    # (published_memory.md); an unstated allocator setting counts no fragmentation
    return sm.memory(row["model"], int(row["gpus"]), sharding=row["sharding"], gpu=row["gpu"],
                     micro_batch=int(row["micro_batch"]), seq=int(row["seq"]),
                     activation_checkpointing=_checkpointing(ck or row["activation_checkpointing"]),
                     measure=measure, loss=row["loss"], accounting=row["accounting"],
                     fragmentation=row["allocator_segments"] or 0.0).per_gpu


# The published measure of a row (published_memory.md): torchtitan's logged "memory" is the
# allocator's reserved peak; its "peak active" is the live tensors, scalemodel's allocated view.
_MEASURE = {"reserved": "reserved", "active": "allocated"}

# Rows whose published peak lies outside scalemodel's [full, none] allocated bracket,
# measured (one run, nothing fitted): kept in the data, marked here with what was found.
_OUT_OF_BRACKET = {
    "17": "peak active 22.73 GiB (Llama 7B, 8 H100, FSDP2, batch 8 x 2048, full AC) is 0.6 % "
          "below the full-AC allocated estimate 22.87 GiB: the run is the full-AC point itself",
}

# Fully stated rows that miss the 10 % target, measured (one run; the model is not tuned to
# them). Rows 14-16 missed by 13 % until their allocator setting (default segments, which
# their launcher left as PyTorch's default) was counted: fragmentation="default_segments".
_MISSES = {}


def _marked(rows, reasons):
    return [pytest.param(r, id=f"row{r['row']}",
                         marks=[pytest.mark.xfail(strict=True, reason=reasons[r["row"]])]
                         if r["row"] in reasons else [])
            for r in rows]


def test_published_peaks_are_sourced():
    rows = _published()
    assert len(rows) == 30 and [r["row"] for r in rows] == [str(i) for i in range(1, 31)]
    assert all(r["source"] and r["measure"] in _MEASURE for r in rows)
    assert set(_MISSES) <= {r["row"] for r in rows if r["settings_stated"] == "yes"}


@pytest.mark.parametrize("row", _marked(_published(), _OUT_OF_BRACKET))
def test_published_peaks_lie_between_full_and_none(row):
    peak = float(row["memory_gib"]) * 2**30
    assert _estimate(row, "full") <= peak * 1.0001 and peak < _estimate(row, "none")


@pytest.mark.parametrize("row", _marked([r for r in _published() if r["settings_stated"] == "yes"],
                                        _MISSES))
def test_published_peaks_within_10_percent_where_settings_are_stated(row):
    # each row in its published measure (published_memory.md, "What each value measures")
    peak = float(row["memory_gib"]) * 2**30
    measure = _MEASURE[row["measure"]]
    assert _estimate(row, measure=measure) == pytest.approx(peak, rel=0.10)
    if row["sharding"] == "zero3":
        assert _estimate(row) < _estimate(row, measure="reserved")  # FSDP's copy-in pool


def test_cli_takes_checkpointing_and_offload(capsys):
    from scalemodel.cli import main

    assert main(["min-compression", "--model", "llama-3-8b", "--bw", "100Gbps", "--n", "64",
                 "--sharding", "zero3", "--activation-checkpointing", "selective",
                 "--offload", "optimizer", "--json"]) in (0, None)
    import json

    data = json.loads(capsys.readouterr().out)
    res = sm.min_compression("llama-3-8b", 100e9, n=64, sharding="zero3",
                             activation_checkpointing="selective", offload="optimizer")
    assert data["ratio"] == pytest.approx(res.ratio)
    assert main(["iteration", "--model", "llama-3-8b", "--bw", "100Gbps", "--n", "64",
                 "--sharding", "zero3", "--activation-checkpointing", "0.5",
                 "--json"]) in (0, None)
    data = json.loads(capsys.readouterr().out)
    it = sm.iteration_time("llama-3-8b", 64, 100e9, sharding="zero3",
                           activation_checkpointing=0.5)
    assert data["total"] == pytest.approx(it.total)
    assert main(["min-compression", "--model", "llama-2-7b", "--bw", "100Gbps",
                 "--activation-checkpointing", "partial"]) == 2
    assert "--activation-checkpointing='partial' is invalid" in capsys.readouterr().err
    assert main(["plan", "--model", "llama-2-7b", "--bw", "100Gbps", "--offload",
                 "optimizer", "--json"]) in (0, None)  # plan takes it too
    data = json.loads(capsys.readouterr().out)
    assert data["uncompressed_scaling_factor"] == pytest.approx(
        sm.scaling_factor("llama-2-7b", 64, 100e9, offload="optimizer"), rel=1e-9)


def test_answers_carry_the_settings_they_assumed():
    it = sm.iteration_time("llama-3-8b", 64, 100e9, sharding="zero3",
                           activation_checkpointing="selective", offload="optimizer")
    assert it.settings["sharding"] == "zero3" and it.settings["offload"] == "optimizer"
    assert it.settings["activation_checkpointing"].startswith("selective")
    res = sm.min_compression("llama-3-8b", 100e9, n=64, activation_checkpointing=0.5)
    assert res.settings["activation_checkpointing"] == "full on 50% of layers"
    assert res.settings["sharding"] == "none" and res.settings["algorithm"] == "ring"
    bw = sm.required_bandwidth("bert", n=16)
    assert bw.settings["activation_checkpointing"] == "none" and bw.settings["cluster"] is None


def _hand_shifted(profile, recompute):
    """The profile with each block's recompute (``recompute``: block -> fraction of its
    forward) before its gradients, computed here from the names alone."""
    import attrs
    from des_sharding import _BLOCK, _negligible, group_units

    names, ready = profile.tensor_names, [float(t) for t in profile.tensor_ready]
    groups = group_units(names, len(ready), "block")
    spans, prev = [], 0.0
    for grp in groups:
        spans.append(max(ready[i] for i in grp) - prev)
        prev = max(ready[i] for i in grp)
    spans[-1] += max(0.0, profile.backward_time - prev)
    spans = _negligible(spans, profile.forward_time + profile.backward_time)
    total, added = sum(spans), 0.0
    for grp, span in zip(groups, spans):
        m = _BLOCK.match(names[grp[0]])
        share = span / total if total > 0 else 1.0 / len(groups)
        added += (recompute.get(m.group(1), 0.0) if m else 0.0) * profile.forward_time * share
        for i in grp:
            ready[i] += added
    return attrs.evolve(profile, tensor_ready=np.asarray(ready),
                        backward_time=profile.backward_time + added)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recompute_under_ddp_equals_the_discrete_event_reference(data):
    from des_reference import simulate_iteration

    profile = data.draw(profiles())
    if profile.tensor_names is None or not any(n.startswith("layers.")
                                               for n in profile.tensor_names):
        return
    fraction = data.draw(st.sampled_from([1.0, data.draw(st.floats(0.05, 1.0))]))
    cfg = dict(n=data.draw(st.integers(1, 200)), bw=data.draw(st.floats(1e8, 1e12)),
               fusion=data.draw(st.sampled_from(["ddp", "horovod", "none"])),
               alpha=data.draw(st.floats(0, 1e-4)))
    it = sm.iteration_time(profile, activation_checkpointing=Checkpointing("full", fraction),
                           **cfg)
    shifted = _hand_shifted(profile, _chosen_blocks(profile, fraction))
    t_des = simulate_iteration(shifted, grad_accum=profile.grad_accum, **cfg)
    assert it.total == pytest.approx(t_des, rel=1e-9)
    assert it.scaling_factor == pytest.approx(shifted.iteration_time / t_des, rel=1e-9)


def test_early_stop_skips_flop_bound_time_only():
    """Without flash attention a layer's score passes are memory-bound and replayed
    whole by an early-stopping recompute; only the FLOP-bound rest is cut to frac."""
    cfg = sm.TransformerConfig(layers=4, hidden=512, heads=8, ffn=2048, vocab=1000,
                               seq=1024, micro_batch=2, dtype="bf16")
    prof = sm.transformer_profile(cfg, "h100-sxm", efficiency=0.5, flash_attention=False)
    scores = prof.provenance["attention_scores"]["forward_time"] / cfg.layers
    full = with_recompute(prof, Checkpointing("full", flash_attention=False))
    stop = with_recompute(prof, "full-early-stop", flash_attention=False)
    frac = recompute_fraction(cfg, "full-early-stop")
    assert 0.5 < frac < 1.0
    added_full = full.backward_time - prof.backward_time
    added_stop = stop.backward_time - prof.backward_time
    # full adds each layer's forward F_u; early stop frac (F_u - S) + S per layer
    assert added_stop == pytest.approx(frac * added_full + (1 - frac) * cfg.layers * scores,
                                       rel=1e-12)
    for p in (full, stop):
        assert p.provenance["attention_scores"]["recompute_time"] == pytest.approx(
            cfg.layers * scores, rel=1e-12)
    assert stop.provenance["checkpointing"]["early_stop"] is True
    assert sm.iteration_time(prof, n=1, bw=1e11, activation_checkpointing="full-early-stop"
                             ).total < sm.iteration_time(
        prof, n=1, bw=1e11, activation_checkpointing="full").total


def test_a_run_names_its_checkpointing(tmp_path):
    """A run's ``activation_checkpointing`` adds its recompute to the run's profile before
    the fit (as the profile with_recompute makes would), CSV cells included, following the
    profile's attention; bad values and profiles without blocks are named by the run."""
    import json
    import warnings

    from scalemodel.runs import load_runs

    cfg = sm.TransformerConfig(layers=8, hidden=1024, heads=8, ffn=4096, vocab=32000,
                               seq=2048, micro_batch=4, name="m")
    prof = sm.transformer_profile(cfg, "h100-sxm", name="m")
    t = sm.iteration_time(sm.transformer_profile(cfg, "h100-sxm", efficiency=0.45, name="m"),
                          8, 100e9, sharding="zero3",
                          activation_checkpointing="full-early-stop").total
    run = dict(model=prof, n=8, bw=100e9, iteration_time=t, sharding="zero3")
    (given,) = load_runs([dict(run, activation_checkpointing="full-early-stop")])
    expected = with_recompute(prof, "full-early-stop")
    assert given.profile.backward_time == pytest.approx(expected.backward_time, rel=1e-12)
    assert given.profile.provenance["checkpointing"]["early_stop"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = [str(sm.fit_cluster([r], gpus_per_node=8, nics_per_node=8,
                                   fit=("efficiency",))).splitlines()[1]
                for r in (dict(run, model=expected),
                          dict(run, activation_checkpointing="full-early-stop"))]
    assert fits[0] == fits[1]
    (none,) = load_runs([dict(run, activation_checkpointing="none")])
    assert none.profile is prof
    # CSV cells: names, booleans and fractions; a config.json follows its attention
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "n_positions": 1024, "vocab_size": 50257}))
    csv = tmp_path / "runs.csv"
    csv.write_text("model,n,bw,iteration_time,seq,micro_batch,flash_attention,"
                   "activation_checkpointing\n"
                   f"{path},16,100e9,0.5,1024,8,,full\n"
                   f"{path},16,100e9,0.5,1024,8,,true\n"
                   f"{path},16,100e9,0.5,1024,8,,0.5\n"
                   f"{path},16,100e9,0.5,1024,8,false,selective\n"
                   f"{path},16,100e9,0.5,1024,8,,\n")
    full, true, half, selective, plain = load_runs(csv)
    assert full.profile.backward_time == true.profile.backward_time
    assert plain.profile.backward_time < half.profile.backward_time \
        < full.profile.backward_time
    assert selective.profile.provenance["checkpointing"]["flash_attention"] is False
    with pytest.raises(sm.InvalidParameterError,
                       match=r"runs\[0\].activation_checkpointing='sometimes'"):
        load_runs([dict(run, activation_checkpointing="sometimes")])
    with pytest.raises(sm.InvalidParameterError,
                       match=r"runs\[0\].activation_checkpointing='full'.*numbered blocks"):
        load_runs([dict(model="resnet50", n=8, bw=100e9, iteration_time=0.5,
                        activation_checkpointing="full")])


def test_scaled_to_scales_each_tensors_recompute_with_its_ready_time():
    # provenance['recompute'] stayed absolute while scaled_to moved the ready times: a
    # ready time less its recompute went negative, and a pipeline's per-GPU ready times
    # went back in time (validate_parallel stopped on a ProfileFormatError)
    from scalemodel.checkpointing import with_recompute
    prof = with_recompute(sm.load_profile("llama-2-7b"), "full")
    fast = prof.scaled_to(prof.iteration_time / 3)
    f = fast.iteration_time / prof.iteration_time
    assert fast.provenance["recompute"] == pytest.approx(
        [x * f for x in prof.provenance["recompute"]], rel=1e-12)
    assert np.all(np.asarray(fast.tensor_ready) - np.cumsum(fast.provenance["recompute"])
                  >= -1e-12)
    it = sm.iteration_time(fast, 64, 100e9, tp=8, pp=2, microbatches=4, gpus_per_node=8)
    assert it.total > 0
