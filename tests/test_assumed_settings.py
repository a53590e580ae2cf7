"""Issue 20 item 7: a result carries the settings it assumed, and a setting given that the
model ignores gives a ModelWarning naming it, its value and why -- on every call, from the
API and the CLI, never for a default."""

import warnings

import pytest

import scalemodel as sm
from scalemodel.cli import main

BERT = dict(model="bert", n=64, bw=10e9)
LLAMA = dict(model="llama-2-7b", n=64, bw=100e9)

# (question, the ignored setting, the other arguments): each answer must equal the one
# without the setting, which is what "has no effect" claims
IGNORED = [
    (BERT, dict(intra_bw=1e12), {}),
    (BERT, dict(intra_alpha=2e-6), {}),
    (BERT, dict(nics_per_node=4), {}),
    (BERT, dict(nics_per_node=4), dict(algorithm="tree")),
    (BERT, dict(ps_servers=2), {}),
    (BERT, dict(ps_servers=2), dict(algorithm="hierarchical")),
    (BERT, dict(gpus_per_node=8), dict(algorithm="halving-doubling")),
    (BERT, dict(gpus_per_node=4), dict(algorithm="ps")),
    (BERT, dict(nics_per_node=2), dict(algorithm="ps")),
    (LLAMA, dict(nics_per_node=8), dict(tp=2)),  # tp without nodes: one link per GPU
    (LLAMA, dict(intra_alpha=1e-6), dict(pp=2, microbatches=4)),  # tp=1: no TP traffic
    (BERT, dict(codec_cost=1e-10), {}),
]


def _no_model_warning():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", sm.ModelWarning)
    return ctx


@pytest.mark.parametrize("question,ignored,other", IGNORED)
def test_an_ignored_setting_warns_and_changes_nothing(question, ignored, other):
    (name, value), = ignored.items()
    q = dict(question)
    model, n, bw = q.pop("model"), q.pop("n"), q.pop("bw")
    ctx = _no_model_warning()
    try:
        base = sm.scaling_factor(model, n, bw, **other)
        base_it = sm.iteration_time(model, n, bw, **other)
    finally:
        ctx.__exit__(None, None, None)
    for _ in range(2):  # on every call: the second one finds the scenario cached
        with pytest.warns(sm.ModelWarning, match=f"{name}={value!r} has no effect") as rec:
            sf = sm.scaling_factor(model, n, bw, **other, **ignored)
        assert sf == pytest.approx(base, rel=1e-12)
        assert rec[0].filename == __file__  # points at the caller's line
    with pytest.warns(sm.ModelWarning, match=f"{name}={value!r} has no effect"):
        it = sm.iteration_time(model, n, bw, **other, **ignored)
    assert it.total == pytest.approx(base_it.total, rel=1e-12)


@pytest.mark.parametrize("kw", [
    dict(intra_bw=1e9, gpus_per_node=8),
    dict(intra_bw=1e10, algorithm="hierarchical"),  # 8 GPUs a node assumed
    dict(intra_alpha=1e-4, algorithm="hierarchical"),
    dict(nics_per_node=4, algorithm="nccl"),  # NCCL: a node of one GPU and its NICs
    dict(nics_per_node=4, algorithm="hierarchical"),
    dict(nics_per_node=4, gpus_per_node=8),
    dict(ps_servers=2, algorithm="ps"),
    dict(codec_cost=1e-9, compression=4.0),
])
def test_a_used_setting_changes_the_answer_and_does_not_warn(kw):
    kw = dict(kw)
    name = next(k for k in ("intra_bw", "intra_alpha", "nics_per_node", "ps_servers",
                            "codec_cost") if k in kw)
    value = kw.pop(name)
    ctx = _no_model_warning()
    try:
        with_it = sm.scaling_factor("bert", 64, 10e9, **kw, **{name: value})
        without = sm.scaling_factor("bert", 64, 10e9, **kw)
    finally:
        ctx.__exit__(None, None, None)
    assert with_it != pytest.approx(without, rel=1e-9)


def test_tensor_parallel_traffic_uses_the_intra_node_link_without_nodes():
    ctx = _no_model_warning()
    try:
        slow = sm.iteration_time("llama-2-7b", 64, 100e9, tp=2, intra_bw=1e11)
        fast = sm.iteration_time("llama-2-7b", 64, 100e9, tp=2, intra_bw=1e13)
    finally:
        ctx.__exit__(None, None, None)
    assert slow.total > fast.total


def test_defaults_and_a_cluster_s_topology_do_not_warn():
    ctx = _no_model_warning()
    try:
        sm.scaling_factor("bert", 64, 10e9, codec_cost=0.0, compression=1.0)
        sm.min_compression("bert", 10e9, codec_cost=1e-11)  # the search compresses
        sm.sensitivities("bert", 64, 10e9)  # its latency-count scenario is internal
        sm.sensitivities("bert", 64, 10e9, gpus_per_node=8, intra_alpha=1e-6)
    finally:
        ctx.__exit__(None, None, None)


def test_solvers_and_plans_warn_too():
    with pytest.warns(sm.ModelWarning, match="intra_bw=1000000000000.0 has no effect"):
        sm.min_compression("bert", 10e9, intra_bw=1e12)
    with pytest.warns(sm.ModelWarning, match="ps_servers=3 has no effect"):
        sm.required_bandwidth("bert", n=64, target=0.5, ps_servers=3)
    with pytest.warns(sm.ModelWarning, match="nics_per_node=2 has no effect"):
        sm.plan_compression("resnet50", "10Gbps", n=8, nics_per_node=2)
    for ask in (lambda **kw: sm.required_bandwidth("bert", n=64, target=0.5, **kw),
                lambda **kw: sm.sensitivities("bert", 64, 10e9, **kw),
                lambda **kw: sm.best_bucket_size("bert", 64, 10e9, **kw)):
        with pytest.warns(sm.ModelWarning, match="codec_cost=1e-10 has no effect"):
            ask(codec_cost=1e-10)


def test_the_cli_prints_each_ignored_setting_once(capsys):
    assert main(["min-compression", "--model", "bert", "--bw", "10Gbps",
                 "--intra-bw", "300GB/s", "--nics-per-node", "2"]) == 0
    err = capsys.readouterr().err.splitlines()
    warned = [line for line in err if line.startswith("scalemodel: warning: ")]
    assert len(warned) == 2
    assert "--nics-per-node=2 has no effect" in warned[0]
    assert "--intra-bw=2400000000000.0 has no effect" in warned[1]
    assert main(["scaling", "--model", "bert", "--bw", "10Gbps", "--n", "64",
                 "--codec-cost", "1e-10"]) == 0
    assert "scalemodel: warning: --codec-cost=1e-10 has no effect" in capsys.readouterr().err
    assert main(["scaling", "--model", "bert", "--bw", "10Gbps", "--n", "64",
                 "--gpus-per-node", "8", "--intra-bw", "300GB/s"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_settings_show_the_job_s_nodes_and_the_data_parallel_ring_s_view():
    """Issue 20 item 7 (tp leftovers): 8 GPUs and 8 NICs a node with tp=2 are reported as
    given; one data-parallel ring has 4 GPUs a node and one NIC at 4x the line rate."""
    kw = dict(gpus_per_node=8, nics_per_node=8, tp=2)
    it = sm.iteration_time("llama-2-7b", 64, 100e9, **kw)
    s = it.settings
    assert (s["gpus_per_node"], s["nics_per_node"]) == (8, 8)
    assert (s["dp_ring_gpus_per_node"], s["dp_ring_nics_per_node"],
            s["dp_ring_bw_scale"]) == (4, 1, 4.0)
    s4 = sm.iteration_time("llama-2-7b", 64, 100e9, gpus_per_node=8, nics_per_node=2,
                           tp=4).settings
    assert (s4["gpus_per_node"], s4["nics_per_node"]) == (8, 2)
    assert (s4["dp_ring_gpus_per_node"], s4["dp_ring_bw_scale"]) == (2, 0.5)
    # the same keys on every answer
    res = sm.min_compression("llama-2-7b", 100e9, n=64, **kw)
    assert res.settings["gpus_per_node"] == 8 and res.settings["dp_ring_gpus_per_node"] == 4
    plain = sm.iteration_time("llama-2-7b", 64, 100e9, gpus_per_node=8, nics_per_node=8)
    assert plain.settings["gpus_per_node"] == 8 and "dp_ring_gpus_per_node" not in plain.settings


def test_settings_name_the_workload_the_answer_is_for():
    # a config.json's default sequence length (131072 tokens) made a 64 s step whose
    # settings named no sequence, micro-batch, GPU or efficiency
    llm = sm.iteration_time("llama-2-7b", 8, 1e11).settings
    assert (llm["model"], llm["seq"], llm["micro_batch"], llm["gpu"]) == (
        "llama-2-7b", 4096, 1, "h100-sxm")
    assert llm["efficiency"] == pytest.approx(0.41185) and llm["grad_accum"] == 1
    cnn = sm.iteration_time("resnet50", 8, 1e11).settings
    assert cnn["model"] == "resnet50" and "seq" not in cnn
