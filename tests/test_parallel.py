"""The data-parallel dimension of TP x PP jobs (scalemodel.parallel): the iteration time
against a direct computation, the identities (tp = pp = 1, one replica), and bad input."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from helpers_activations import hand_units

CONFIG = {"layers": 24, "hidden": 2048, "heads": 16, "seq": 2048, "micro_batch": 2,
          "dtype": "bf16"}


def llm_like(sizes, waits, forward=0.2, update=0.05, config=CONFIG, reduction=None):
    """A synthetic profile with a transformer config in its provenance."""
    ready = np.cumsum(np.asarray(waits, float))
    return sm.WorkloadProfile(
        name="mp-synthetic", tensor_bytes=np.asarray(sizes, float), tensor_ready=ready,
        forward_time=forward, backward_time=float(ready[-1]), update_time=update,
        reduction=reduction or sm.ReductionCost(gamma=0.0, latency=0.0), precision="bf16",
        provenance={"source": "test", "config": dict(config)})


def direct_bsp(p, n, bw, tp, pp, m, gpn, nics, intra_bw, intra_alpha):
    """Eqs. (tp-compute) and (pp-iteration) by hand, with every gradient all-reduced after
    backward (fusion 'bsp'), no latency across nodes, no reduction cost."""
    k = tp * pp
    act = CONFIG["micro_batch"] * CONFIG["seq"] * CONFIG["hidden"] * 2
    a_t = 0.0 if tp == 1 else (2 * (tp - 1) * intra_alpha
                               + 2 * (tp - 1) / tp * 8 * act / intra_bw)
    tp_time = CONFIG["layers"] / pp * 2 * a_t
    f = p.forward_time / k + tp_time
    b = p.backward_time / k + tp_time
    d = n // k
    grads = float(np.sum(p.tensor_bytes)) / k
    comm = 0.0
    if d > 1:
        per_node = gpn // tp  # ranks of one data-parallel ring in a node
        nodes = -(-d // per_node)
        chunk = grads / d
        nic = chunk * 8 / (bw * nics / tp) if nodes > 1 else 0.0
        link = chunk * 8 / intra_bw if min(per_node, d) > 1 else 0.0
        inter = 2 * (nodes - 1)
        comm = 2 * (d - 1) * max(nic, link) + (2 * (d - 1) - inter) * intra_alpha
    return (m + pp - 1) * (f + b) + comm + p.update_time / k, f, b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_iteration_time_equals_the_direct_computation(data):
    k_t = data.draw(st.integers(1, 6))
    sizes = data.draw(st.lists(st.floats(1e5, 5e8), min_size=k_t, max_size=k_t))
    waits = data.draw(st.lists(st.floats(1e-4, 0.05), min_size=k_t, max_size=k_t))
    p = llm_like(sizes, waits, forward=data.draw(st.floats(0.01, 1.0)),
                 update=data.draw(st.floats(0.0, 0.2)))
    gpn = data.draw(st.sampled_from([1, 2, 4, 8]))
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4, 8) if gpn % t == 0]))
    pp = data.draw(st.sampled_from([1, 2, 3, 4, 6]))
    m = data.draw(st.integers(1, 32)) if pp > 1 else 1
    n = tp * pp * data.draw(st.integers(1, 16))
    nics = data.draw(st.sampled_from([1, 2, 4, 8]))
    bw = data.draw(st.floats(1e9, 4e11))
    intra_bw = data.draw(st.floats(1e10, 3e12))
    intra_alpha = data.draw(st.floats(0, 1e-5))
    expected, f, b = direct_bsp(p, n, bw, tp, pp, m, gpn, nics, intra_bw, intra_alpha)
    kw = dict(fusion="bsp", gpus_per_node=gpn, nics_per_node=nics, intra_bw=intra_bw,
              intra_alpha=intra_alpha, tp=tp, pp=pp, microbatches=m if pp > 1 else None)
    it = sm.iteration_time(p, n, bw, **kw)
    assert it.total == pytest.approx(expected, rel=1e-9)
    assert it.forward + it.backward == pytest.approx((m + pp - 1) * (f + b), rel=1e-9)
    assert it.update == pytest.approx(p.update_time / (tp * pp), rel=1e-9, abs=1e-15)
    one_replica = (m + pp - 1) * (f + b) + p.update_time / (tp * pp)
    assert it.scaling_factor == pytest.approx(one_replica / expected, rel=1e-9)
    assert sm.scaling_factor(p, n, bw, **kw) == pytest.approx(it.scaling_factor, rel=1e-12)


def test_overlap_with_the_last_microbatch_is_ddp_on_the_stage_profile():
    # the DDP overlap (buckets during backward) of one GPU of the job equals plain DDP on
    # a profile built by hand for it, plus the bubble
    p = sm.load_profile("llama-2-13b")
    cfg = p.provenance["config"]
    tp, pp, m, n, gpn, nics = 4, 4, 8, 256, 8, 8
    intra = sm.get_gpu("h100-sxm").intra_node_bw
    act = cfg["micro_batch"] * cfg["seq"] * cfg["hidden"] * 2
    a_t = 2 * (tp - 1) / tp * 8 * act / intra
    # eq. (pp-uneven): the head (final norm and output layer) runs on the last stage, the
    # embedding (no FLOPs) sits on the first, whose gradients are the step's traffic
    u = sm.transformer_units(sm.llm_config("llama-2-13b"), "h100-sxm", efficiency=1.0)
    kind = np.array(u.kind)
    hf = p.forward_time * u.forward_time[kind == "head"].sum() / u.forward_time.sum() / tp
    hb = p.backward_time * u.backward_time[kind == "head"].sum() / u.backward_time.sum() / tp
    assert u.forward_time[kind == "embedding"].sum() == 0.0
    f = p.forward_time / 16 + cfg["layers"] / pp * 2 * a_t - hf / pp
    b = p.backward_time / 16 + cfg["layers"] / pp * 2 * a_t - hb / pp
    params = u.param_count
    emb, blocks = params[kind == "embedding"].sum(), params[kind == "block"].sum()
    first = (emb + blocks / pp) / params.sum()
    last = (blocks / pp + params[kind == "head"].sum()) / params.sum()
    grads = np.round(np.asarray(p.tensor_bytes) * first / tp / 2) * 2  # whole bf16 elements
    stage = sm.WorkloadProfile(
        name="stage", tensor_bytes=grads,
        tensor_ready=np.asarray(p.tensor_ready) * b / p.backward_time, forward_time=f,
        backward_time=b, update_time=p.update_time * max(first, last) / tp,
        reduction=p.reduction, precision=p.precision, provenance={"source": "by hand"},
        grad_accum=m)
    plain = sm.iteration_time(stage, n // 16, 100e9 * nics / tp, gpus_per_node=gpn // tp,
                              nics_per_node=1, intra_bw=intra)
    it = sm.iteration_time(p, n, 100e9, tp=tp, pp=pp, microbatches=m, gpus_per_node=gpn,
                           nics_per_node=nics, intra_bw=intra)
    # the pipeline: m micro-batches paced by the last stage, p - 1 other stages to fill
    assert it.total == pytest.approx(plain.total + (pp - 1) * (f + b) + m * (hf + hb),
                                     rel=1e-12)
    assert it.settings["tp"] == 4 and it.settings["pipeline_schedule"] == "1f1b"


def test_identities():
    kw = dict(gpus_per_node=8, nics_per_node=4)
    a = sm.scaling_factor("llama-2-7b", [8, 64], "100Gbps", **kw)
    b = sm.scaling_factor("llama-2-7b", [8, 64], "100Gbps", tp=1, pp=1, **kw)
    assert np.array_equal(a, b)
    # one replica: no data-parallel traffic
    assert sm.scaling_factor("llama-2-7b", 32, "1Gbps", tp=8, pp=4, microbatches=8,
                             **kw) == 1.0
    # the bubble shrinks with more micro-batches
    t = [sm.iteration_time("llama-2-7b", 64, "100Gbps", tp=2, pp=4, microbatches=mb,
                           **kw).total / mb for mb in (4, 16, 64)]
    assert t[0] > t[1] > t[2]


def test_solvers_answer_the_data_parallel_dimension():
    kw = dict(gpus_per_node=8, nics_per_node=8, tp=2, pp=2, microbatches=8)
    res = sm.min_compression("llama-2-13b", "25Gbps", n=256, **kw)
    assert res.feasible and res.ratio > 1
    assert sm.scaling_factor("llama-2-13b", 256, "25Gbps", compression=res.ratio,
                             **kw) == pytest.approx(0.9, rel=1e-9)
    assert res.bw == pytest.approx(25e9) and res.n == 256
    bw = sm.required_bandwidth("llama-2-13b", n=256, **kw)
    assert sm.scaling_factor("llama-2-13b", 256, bw.bw, **kw) == pytest.approx(0.9, rel=1e-9)
    assert bw.n == 256


def test_bad_model_parallel_input():
    def err(**kw):
        with pytest.raises(sm.ScalemodelError) as exc:
            sm.scaling_factor(kw.pop("model", "llama-2-7b"), kw.pop("n", 64), "100Gbps",
                              **kw)
        return exc.value

    e = err(pp=3, microbatches=8)  # 32 layers
    assert e.parameter == "pp" and "[1, 2, 4, 8, 16, 32]" in str(e)
    e = err(tp=3)  # 32 heads
    assert e.parameter == "tp" and "32 attention heads" in str(e)
    e = err(model="llama-3-8b", tp=3)  # 32 heads, 8 of them key/value: 16 is no answer
    assert "32 attention heads of llama-3-8b: valid are [1, 2, 4, 8]" in str(e)
    e = err(tp=16, gpus_per_node=8)
    assert e.parameter == "tp" and "gpus_per_node=8" in str(e)
    e = err(n=48, tp=4, pp=8, microbatches=8)
    assert e.parameter == "n" and "32" in str(e)
    e = err(pp=2)
    assert e.parameter == "microbatches"
    e = err(tp=2, pp=2, microbatches=4, sharding="zero3")  # tp alone: test_sharding_tp
    assert e.parameter == "pp" and "zero3" in str(e)
    e = err(model="resnet50", tp=2)
    assert e.parameter == "tp" and "no transformer config" in str(e)
    e = err(tp=0)
    assert e.parameter == "tp"
    # Megatron-LM splits the key/value heads and the MLP width too: llama-3-8b has 8
    # key/value heads, llama-2-13b an MLP width of 13824 (tp=16 / tp=5 were taken as P/tp)
    for kw, said in ((dict(model="llama-3-8b", tp=16, gpus_per_node=16),
                      "8 key and value heads of llama-3-8b: valid are [1, 2, 4, 8]"),
                     (dict(model="llama-2-13b", n=40, tp=5, gpus_per_node=10),
                      "13824 MLP width of llama-2-13b: valid are [1, 2, 4, 8]")):
        e = err(**kw)
        assert e.parameter == "tp" and said in str(e)
        with pytest.raises(sm.InvalidParameterError, match=said.replace("[", r"\[")):
            sm.memory(kw.pop("model"), kw.pop("n", 64), suggest=False, **kw)
    with pytest.raises(sm.ParameterTypeError):
        sm.scaling_factor("llama-2-7b", 64, "100Gbps", tp=2.0)


def test_memory_of_one_gpu_of_the_job():
    from scalemodel.checkpointing import ACTIVATION_BYTES, LOSS_BYTES_PER_LOGIT

    cfg = sm.load_profile("llama-2-13b").provenance["config"]
    s, b, h, L, V = cfg["seq"], cfg["micro_batch"], cfg["hidden"], cfg["layers"], cfg["vocab"]
    plain = sm.memory("llama-2-13b", 64)
    assert sm.memory("llama-2-13b", 64, tp=1, pp=1).per_gpu == plain.per_gpu
    # by hand (Llama: attention 4h^2, gated MLP 3h ffn, two RMSNorms per block; the
    # embedding Vh on the first stage, the final norm and the untied head Vh + h on the
    # last, as Megatron-LM places them)
    blocks = L * (4 * h * h + 3 * h * cfg["ffn"] + 2 * h)
    emb, head = V * h, V * h + h
    for tp, pp, m in ((2, 1, None), (2, 4, 8), (4, 5, 2), (8, 2, 16)):
        est = sm.memory("llama-2-13b", 320, tp=tp, pp=pp, microbatches=m)
        heavy = 1.0 if pp == 1 else max(emb + blocks / pp, blocks / pp + head) / (
            emb + blocks + head)
        for part in ("parameters", "gradients", "optimizer"):
            assert est.parts[part] == pytest.approx(plain.parts[part] * heavy / tp,
                                                    rel=1e-12)
        rep, split, _ = hand_units(sm.llm_config("llama-2-13b"))  # GPT: 10, 24
        layer = s * b * h * (rep + split / tp)  # Korthikanti et al., flash attention
        stage = layer * L / pp
        logits = LOSS_BYTES_PER_LOGIT * s * b * V / tp
        expected = (stage + logits if pp == 1
                    else max(min(pp, m) * stage, stage + logits))
        assert est.parts["activations"] == pytest.approx(expected, rel=1e-12)
        assert est.settings["tp"] == tp
        full = sm.memory("llama-2-13b", 320, tp=tp, pp=pp, microbatches=m,
                         activation_checkpointing="full")
        kept = ACTIVATION_BYTES * s * b * h * L / pp
        expected = (kept + layer + logits if pp == 1
                    else max(min(pp, m) * kept + layer, kept + layer + logits))
        assert full.parts["activations"] == pytest.approx(expected, rel=1e-12)
    # tied embeddings: Megatron-LM keeps a copy of the word embeddings on the last stage
    # for the output layer, so both end stages hold Vh besides their layers
    tied = sm.TransformerConfig(layers=8, hidden=1024, heads=16, ffn=4096, vocab=50304,
                                seq=1024, tied_embeddings=True, gated_ffn=False,
                                norm="layernorm", bias=True, name="tied")
    prof = sm.transformer_profile(tied, "h100-sxm")
    one = sm.memory(prof, 4, suggest=False)
    two = sm.memory(prof, 4, pp=2, microbatches=4, suggest=False)
    psi = prof.total_bytes / 2
    block = 4 * 1024 ** 2 + 4 * 1024 + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024
    last = 4 * block + 2 * 1024 + 50304 * 1024  # final LayerNorm and the copy
    assert two.parts["parameters"] == pytest.approx(
        one.parts["parameters"] * max(psi - 4 * block - 2 * 1024, last) / psi, rel=1e-12)
    # the solvers' memory check is memory() of the job
    res = sm.min_compression("llama-2-13b", "25Gbps", n=256, gpus_per_node=8,
                             nics_per_node=8, tp=2, pp=4, microbatches=8)
    assert res.memory_per_gpu == sm.memory("llama-2-13b", 256, tp=2, pp=4,
                                           microbatches=8).per_gpu
    for kw, name in ((dict(tp=3), "tp"), (dict(pp=3, microbatches=4), "pp"),
                     (dict(tp=2, pp=2, microbatches=4, sharding="zero1"), "pp"),
                     (dict(tp=2, activation_checkpointing="selective"),
                      "activation_checkpointing"),
                     (dict(pp=2), "microbatches")):
        with pytest.raises(sm.InvalidParameterError) as exc:
            sm.memory("llama-2-13b", 320, **kw)
        assert exc.value.parameter == name
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory("llama-2-13b", [64, 100], tp=4, pp=2, microbatches=4)
    assert exc.value.parameter == "n"
    with pytest.raises(sm.InvalidParameterError) as exc:
        sm.memory("resnet50", 64, tp=2)
    assert exc.value.parameter == "tp"


def test_cli_takes_tp_pp(capsys):
    from scalemodel.cli import main

    args = ["--model", "llama-2-13b", "--n", "256", "--gpus-per-node", "8",
            "--nics-per-node", "8", "--tp", "2", "--pp", "4", "--microbatches", "8"]
    assert main(["iteration", "--bw", "100Gbps", *args]) in (0, None)
    out = capsys.readouterr().out
    sf = sm.scaling_factor("llama-2-13b", 256, "100Gbps", gpus_per_node=8, nics_per_node=8,
                           tp=2, pp=4, microbatches=8)
    assert f"{sf:.4f}" in out
    per = sm.memory("llama-2-13b", 256, tp=2, pp=4, microbatches=8).per_gpu
    assert f"{per / 2**30:.1f} GiB" in out
    assert main(["iteration", "--bw", "100Gbps", *args[:-4], "--pp", "3",
                 "--microbatches", "8"]) == 2
    assert "pp=3" in capsys.readouterr().err
    assert main(["breakeven", "--compressors", "powersgd:4", *args]) == 0  # as plan does
    assert "powersgd rank 4" in capsys.readouterr().out


def test_does_not_fit_suggests_the_smallest_tensor_parallel_size_that_fits():
    """Issue 20 item 7: the suggestions include TP, with memory(tp=t)'s figure, the
    smallest t (inside a node) that fits, after the other options."""
    m = sm.memory("llama-2-7b", 64)
    labels = [label for label, _ in m.suggestions]
    assert not m.fits and labels[-1] == "tp=2"
    assert dict(m.suggestions)["tp=2"] == pytest.approx(
        float(sm.memory("llama-2-7b", 64, tp=2).per_gpu), rel=1e-12)
    big = sm.memory("llama-2-13b", 256, tp=2)  # tp=4 fits, tp=2 (asked) does not
    tps = [label for label, _ in big.suggestions if label.startswith("tp=")]
    assert tps == ["tp=4"] and sm.memory("llama-2-13b", 256, tp=4).fits
    assert "tp=4" in big.message()
    zero1 = sm.memory("llama-2-13b", 8, sharding="zero1")
    assert not zero1.fits and zero1.suggestions  # TP with sharding is not modelled:
    assert not [label for label, _ in zero1.suggestions if label.startswith("tp=")]
    assert not [label for label, _ in sm.memory("llama-2-7b", 63).suggestions
                if label.startswith("tp=")]  # no t divides 63
