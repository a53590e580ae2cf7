"""A fitted cluster asked about a tensor- or pipeline-parallel job: its NIC's terms as one
data-parallel ring sees them (ClusterProfile.ring_view), against a direct computation,
and its intervals without the share applied twice."""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scalemodel as sm
from scipy.stats import norm
from test_parallel import direct_bsp, llm_like


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cluster_terms_on_the_data_parallel_ring_equal_the_direct_computation(data):
    """Eqs. (tp-compute) and (pp-iteration) with a cluster: the NIC achieves
    min(u B, C) and one ring gets nu/t of it; the compute of every micro-batch is slowed by
    sigma (1 + s e_N) with N = n GPUs (the slowest of all of them)."""
    k_t = data.draw(st.integers(1, 5))
    sizes = data.draw(st.lists(st.floats(1e5, 5e8), min_size=k_t, max_size=k_t))
    waits = data.draw(st.lists(st.floats(1e-4, 0.05), min_size=k_t, max_size=k_t))
    p = llm_like(sizes, waits, forward=data.draw(st.floats(0.01, 1.0)),
                 update=data.draw(st.floats(0.0, 0.2)))
    gpn = data.draw(st.sampled_from([2, 4, 8]))
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4, 8) if gpn % t == 0]))
    pp = data.draw(st.sampled_from([1, 2, 4]))
    m = data.draw(st.integers(1, 16)) if pp > 1 else 1
    n = tp * pp * data.draw(st.integers(1, 16))
    nics = data.draw(st.sampled_from([1, 2, 4, 8]))
    bw = data.draw(st.floats(1e9, 4e11))
    intra_bw = data.draw(st.floats(1e10, 3e12))
    u = data.draw(st.floats(0.3, 1.0))
    ceiling = data.draw(st.one_of(st.none(), st.floats(5e8, 5e11)))
    sigma = data.draw(st.floats(1.0, 1.5))
    spread = data.draw(st.sampled_from([0.0, 0.05]))
    cl = sm.ClusterProfile(utilization=u, ceiling=ceiling, compute_slowdown=sigma,
                           straggler_spread=spread, provenance={"source": "test"})
    achieved = u * bw if ceiling is None else min(u * bw, ceiling)
    expected, f, b = direct_bsp(p, n, achieved, tp, pp, m, gpn, nics, intra_bw, 0.0)
    d = n // (tp * pp)
    def blom(k):  # Blom's expected maximum of k normals
        return 0.0 if k == 1 else norm.ppf((k - 0.375) / (k + 0.25))
    # all n GPUs wait for the slowest; one replica's tp pp already did, in its baseline
    sigma_n = 1.0 if d == 1 else \
        sigma * (1 + spread * blom(n)) / (1 + spread * blom(tp * pp))
    expected += (sigma_n - 1.0) * (m + pp - 1) * (f + b)
    kw = dict(fusion="bsp", gpus_per_node=gpn, nics_per_node=nics, intra_bw=intra_bw,
              intra_alpha=0.0, tp=tp, pp=pp, microbatches=m if pp > 1 else None)
    it = sm.iteration_time(p, n, bw, cluster=cl, **kw)
    assert it.total == pytest.approx(expected, rel=1e-9)
    assert sm.scaling_factor(p, n, bw, cluster=cl, **kw) == pytest.approx(
        it.scaling_factor, rel=1e-12)


def test_ring_view_scales_what_the_nic_shares():
    table = sm.ClusterProfile(table_line_rate=[1e9, 1e10, 1e11],
                              table_utilization=[0.9, 0.8, 0.5], ceiling=4e10,
                              intervals={"ceiling": (3e10, None), "utilization": (0.5, 1.0)},
                              provenance={"source": "test"})
    assert table.ring_view(1.0) is table and table.ring_share == 1.0
    v = table.ring_view(0.25)
    assert v.ring_share == 0.25 and v.ring_view(0.25) is v
    assert v.ceiling == pytest.approx(1e10) and v.intervals["ceiling"] == (7.5e9, None)
    assert v.intervals["utilization"] == (0.5, 1.0)  # a fraction: not scaled
    assert np.allclose(v.table_line_rate, [2.5e8, 2.5e9, 2.5e10])
    # the ring at a quarter of a NIC achieves a quarter of what the NIC does, the table
    # read at the NIC's own line rate
    for nic in (3e9, 2e10, 9e10, 3e11):
        assert v.achieved_bandwidth(0.25 * nic) == pytest.approx(
            0.25 * table.achieved_bandwidth(nic), rel=1e-12)
        assert v.line_rate_for(float(0.25 * table.achieved_bandwidth(nic))) == pytest.approx(
            0.25 * table.line_rate_for(float(table.achieved_bandwidth(nic))), rel=1e-9)
    assert "ring_share" not in table.ring_view(0.5).to_dict()
    with pytest.raises(sm.InvalidParameterError, match="already"):
        v.ring_view(0.5)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(sm.InvalidParameterError, match="share"):
            table.ring_view(bad)


def test_ring_view_scales_the_alternatives_ceilings():
    runs = [dict(model="resnet50", n=n, bw=bw, iteration_time=t)
            for n, bw, t in ((16, 10e9, 0.2), (32, 10e9, 0.215), (16, 25e9, 0.16))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = sm.fit_cluster(runs, fit=["ceiling", "sync_overhead"]).cluster
    cl = sm.ClusterProfile.from_dict(dict(cl.to_dict(), alternatives=[
        {"free": ["ceiling"], "values": {"ceiling": 8e9}, "intervals": {"ceiling": [6e9, 9e9]},
         "score": 0.0}] if not cl.alternatives else cl.to_dict()["alternatives"]))
    v = cl.ring_view(0.5)
    for i in range(len(cl.alternatives)):
        a, b = cl.with_alternative(i), v.with_alternative(i)
        if a.ceiling is not None:
            assert b.ceiling == pytest.approx(0.5 * a.ceiling, rel=1e-12)
        lo, hi = a.intervals.get("ceiling", (None, None))
        got = b.intervals.get("ceiling", (None, None))
        assert got == tuple(None if x is None else pytest.approx(0.5 * x) for x in (lo, hi))


def test_interval_of_a_tensor_parallel_job_shares_the_nic_once():
    """On a cluster fitted with an efficiency (FLOP-derived runs), the corners of the
    interval are built again from the arguments (their efficiencies differ): the ring's
    share must apply once, so the slow end is the answer on the NIC-level cluster's slow
    corner (or beyond it by the swapped efficiencies), far from a share applied twice."""
    import attrs

    cfg = sm.TransformerConfig(layers=8, hidden=2048, heads=16, ffn=8192, vocab=32000,
                               seq=2048, micro_batch=2, dtype="bf16", name="small")
    prof = sm.transformer_profile(cfg, "a100-80gb")
    topo = dict(gpus_per_node=8, nics_per_node=1)
    truth = sm.ClusterProfile(ceiling=30e9, provenance={"source": "test"})
    runs = []
    for n in (16, 64):
        t = sm.iteration_time(prof, n, 100e9, cluster=truth, **topo).total
        runs.append(dict(model=prof, n=n, bw=100e9,
                         tokens_per_second_per_gpu=cfg.tokens / t * (1 + 0.01 * (n == 64))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = sm.fit_cluster(runs, fit=["efficiency", "ceiling"], **topo).cluster
    assert cl.ceiling is not None
    kw = dict(tp=4, **topo)
    it = sm.iteration_time(prof, 128, 100e9, cluster=cl, **kw)
    lo, hi = it.total_interval
    assert lo <= it.total <= hi and lo < hi
    ends = [sm.iteration_time(prof, 128, 100e9, cluster=c, **kw).total for c in cl.corners()]
    assert max(ends) <= hi * (1 + 1e-9) and hi < 1.3 * max(ends)
    worst = cl.corners()[0]
    twice = attrs.evolve(worst, ceiling=worst.ceiling * 0.25)  # the share applied again
    assert sm.iteration_time(prof, 128, 100e9, cluster=twice, **kw).total > 1.5 * hi
    # a cluster that differs from one already asked in numbers only is built from that
    # one's scenario (Scenario.build's siblings): the share applies there too
    bare = attrs.evolve(worst, intervals={})
    assert sm.iteration_time(prof, 128, 100e9, cluster=bare, **kw).total == pytest.approx(
        ends[0], rel=1e-12)


def test_fitted_cluster_answers_tensor_parallel_questions():
    cl = sm.ClusterProfile(compute_slowdown=1.1, ceiling=40e9, provenance={"source": "t"})
    kw = dict(gpus_per_node=8, nics_per_node=4)
    it = sm.iteration_time("llama-2-13b", 64, 100e9, cluster=cl, tp=2, sharding="zero3",
                           **kw)
    assert it.settings["dp_ring_bw_scale"] == 2.0
    # the same job on a cluster whose NICs reach their line rate is faster
    free = sm.iteration_time("llama-2-13b", 64, 100e9, tp=2, sharding="zero3", **kw)
    assert it.total > free.total
    # the solvers answer for the NIC's line rate through the same view
    target = 0.5 * (it.scaling_factor + 1.0)
    r = sm.required_bandwidth("llama-2-13b", n=64, target=target, cluster=cl, tp=2,
                              sharding="zero3", **kw)
    # 40 Gbit/s per NIC, 4 NICs over 2 rings: one ring reaches 80 Gbit/s at most
    assert not r.feasible and "ceiling 80 Gbit/s" in r.message
    c = sm.min_compression("llama-2-13b", 100e9, n=64, target=target, cluster=cl, tp=2,
                           sharding="zero3", **kw)
    assert c.feasible and c.ratio > 1.0
    assert sm.scaling_factor("llama-2-13b", 64, 100e9, compression=c.ratio, cluster=cl,
                             tp=2, sharding="zero3", **kw) == pytest.approx(target, rel=1e-6)
    looser = sm.required_bandwidth("llama-2-13b", n=64, target=it.scaling_factor * 0.9,
                                   cluster=cl, tp=2, sharding="zero3", **kw)
    assert looser.feasible and sm.scaling_factor(
        "llama-2-13b", 64, looser.bw, cluster=cl, tp=2, sharding="zero3",
        **kw) == pytest.approx(it.scaling_factor * 0.9, rel=1e-6)
    assert looser.bw < 40e9  # below the ceiling, the NIC's line rate itself


def test_plan_and_best_bucket_on_a_fitted_cluster_answer_the_same_job():
    """The planner's and the bucket search's own evaluation paths give the scaling factor
    of scaling_factor for a tensor-parallel job on a cluster with a ceiling interval."""
    cl = sm.ClusterProfile(compute_slowdown=1.1, ceiling=40e9,
                           intervals={"ceiling": (30e9, 50e9)}, provenance={"source": "t"})
    kw = dict(gpus_per_node=8, nics_per_node=4, tp=2, cluster=cl)
    sf = sm.scaling_factor("llama-2-13b", 64, 25e9, **kw)
    plan = sm.plan_compression("llama-2-13b", 25e9, n=64, target=0.5, **kw)
    assert plan.uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)
    best = sm.best_bucket_size("llama-2-13b", 64, 25e9, **kw)
    assert best.default_scaling_factor == pytest.approx(sf, rel=1e-12)
    lo, hi = sm.iteration_time("llama-2-13b", 64, 25e9, **kw).scaling_factor_interval
    assert lo == hi == pytest.approx(sf, rel=1e-12)  # 25 Gbit/s: below every ceiling
    sf = sm.scaling_factor("llama-2-13b", 64, 100e9, **kw)  # where the ceiling binds
    lo, hi = sm.iteration_time("llama-2-13b", 64, 100e9, **kw).scaling_factor_interval
    assert lo < sf < hi
    assert sm.plan_compression("llama-2-13b", 100e9, n=64, target=0.5,
                               **kw).uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)


def _tp_runs(truth, cases, **kw):
    runs = []
    for n, tp, pp, m, bw in cases:
        t = sm.iteration_time("llama-2-13b", n, bw, cluster=truth, tp=tp, pp=pp,
                              microbatches=m, **kw).total
        runs.append(dict(model="llama-2-13b", n=n, bw=bw, iteration_time=t, tp=tp, pp=pp,
                         microbatches=m, label=f"{n} GPUs tp={tp} pp={pp}"))
    return runs


CASES = ((16, 2, 1, None, 10e9), (64, 2, 1, None, 100e9), (32, 2, 2, 8, 25e9),
         (64, 4, 1, None, 100e9))


def test_fit_cluster_recovers_a_cluster_from_tensor_and_pipeline_parallel_runs():
    """Runs generated with a known slowdown and ceiling on TP x PP jobs (the runs' own
    tp, pp and microbatches) give them back, and the fitted cluster predicts them."""
    truth = sm.ClusterProfile(compute_slowdown=1.08, ceiling=30e9,
                              provenance={"source": "truth"})
    kw = dict(gpus_per_node=8, nics_per_node=4)
    runs = _tp_runs(truth, CASES, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, fit=["compute_slowdown", "ceiling"], **kw)
    cl = fit.cluster
    assert cl.ceiling == pytest.approx(30e9, rel=0.01)
    lo, hi = cl.intervals["compute_slowdown"]
    assert lo <= 1.08 <= hi and cl.compute_slowdown == pytest.approx(1.08, rel=0.01)
    for r in runs:
        got = sm.iteration_time("llama-2-13b", r["n"], r["bw"], cluster=cl, tp=r["tp"],
                                pp=r["pp"], microbatches=r["microbatches"], **kw).total
        assert got == pytest.approx(r["iteration_time"], rel=0.01)


def test_tokens_of_a_tensor_parallel_run_are_a_replicas_over_its_gpus():
    """tokens_per_second_per_gpu of a tp x pp run: a replica's tokens per step
    (micro-batch x sequence x microbatches) over its tp x pp GPUs; an efficiency fitted
    from it gives the run back."""
    from scalemodel.runs import load_runs

    cfg = sm.TransformerConfig(layers=8, hidden=2048, heads=16, ffn=8192, vocab=32000,
                               seq=2048, micro_batch=2, dtype="bf16", name="small")
    prof = sm.transformer_profile(cfg, "a100-80gb")
    kw = dict(gpus_per_node=8, nics_per_node=8)
    it = sm.iteration_time(prof, 64, 100e9, tp=2, pp=2, microbatches=8, **kw).total
    tps = 2 * 2048 * 8 / (2 * 2) / it
    run = dict(model=prof, n=64, bw=100e9, tokens_per_second_per_gpu=tps, tp=2, pp=2,
               microbatches=8)
    (r,) = load_runs([run])
    assert r.iteration_time == pytest.approx(it, rel=1e-12)
    from scalemodel.efficiency import profile_efficiency

    it32 = sm.iteration_time(prof, 32, 100e9, tp=2, pp=2, microbatches=8, **kw).total
    runs = [run, dict(run, n=32, tokens_per_second_per_gpu=2 * 2048 * 8 / 4 / it32)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, fit=["efficiency"], **kw)
    # made at the profile's own efficiency: the fit finds it again
    eff = fit.cluster.extra["efficiency"]["value"]
    assert eff == pytest.approx(profile_efficiency(prof), rel=1e-3)
    assert sm.iteration_time(prof, 64, 100e9, cluster=fit.cluster, tp=2, pp=2,
                             microbatches=8, **kw).total == pytest.approx(it, rel=1e-3)


@pytest.mark.parametrize("change, key, words", [
    (dict(tp=3), "runs[0].n", "multiple of tp x pp"),
    (dict(pp=2), "runs[0].microbatches", "micro-batches"),
    (dict(tp=0), "runs[0].tp", ""),
    (dict(tp="two"), "runs[0].tp", "integer"),
    (dict(tp=2.5), "runs[0].tp", ""),
    (dict(tp=2, iteration_time=None, scaling_factor=0.8), "runs[0].scaling_factor",
     "tensor- or pipeline-parallel"),
    (dict(tp=2, single_worker_time=1.0), "runs[0].single_worker_time", "replica"),
    (dict(tp=2, iteration_time=1e-6), "runs[0].iteration_time", "shorter"),
])
def test_bad_tensor_parallel_runs_are_named(change, key, words):
    from scalemodel.runs import load_runs

    run = dict(model="llama-2-13b", n=64, bw=100e9, iteration_time=2.0)
    run.update(change)
    run = {k: v for k, v in run.items() if v is not None}
    with pytest.raises(sm.ScalemodelError) as exc:
        load_runs([run])
    assert exc.value.parameter == key and words in str(exc.value)


def test_a_run_list_file_takes_tp_pp_and_microbatches_columns(tmp_path, capsys):
    """The CSV columns tp, pp and microbatches (blank for a plain run) reach the fit, and
    the CLI fits and answers with them."""
    from scalemodel.cli import main
    from scalemodel.runs import load_runs

    truth = sm.ClusterProfile(compute_slowdown=1.08, ceiling=30e9,
                              provenance={"source": "truth"})
    kw = dict(gpus_per_node=8, nics_per_node=4)
    runs = _tp_runs(truth, CASES, **kw)
    plain = sm.iteration_time("llama-2-13b", 32, 25e9, cluster=truth, **kw).total
    lines = ["model,n,bw,iteration_time,tp,pp,microbatches"]
    lines += [f"llama-2-13b,{r['n']},{r['bw']:g},{r['iteration_time']!r},{r['tp']},{r['pp']},"
              f"{'' if r['microbatches'] is None else r['microbatches']}" for r in runs]
    lines.append(f"llama-2-13b,32,25e9,{plain!r},,,")
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    got = load_runs(path)
    assert [None if r.model_parallel is None else (r.model_parallel.tp, r.model_parallel.pp)
            for r in got] == [(2, 1), (2, 1), (2, 2), (4, 1), None]
    out = tmp_path / "c.json"
    assert main(["fit", str(path), "--gpus-per-node", "8", "--nics-per-node", "4",
                 "--fit", "compute_slowdown,ceiling", "--out", str(out)]) == 0
    cl = sm.load_cluster(out)
    assert cl.ceiling == pytest.approx(30e9, rel=0.01)
    capsys.readouterr()
    # and the CLI answers a tensor-parallel question on it, as the API does
    assert main(["iteration", "--model", "llama-2-13b", "--n", "128", "--bw", "100Gbps",
                 "--cluster", str(out), "--tp", "4", "--gpus-per-node", "8",
                 "--nics-per-node", "4", "--json"]) == 0
    got = __import__("json").loads(capsys.readouterr().out)
    want = sm.iteration_time("llama-2-13b", 128, 100e9, cluster=cl, tp=4, **kw)
    assert got["total"] == pytest.approx(want.total, rel=1e-12)


def test_memory_pressured_runs_are_warned_once_per_state():
    """Many runs with the same full GPU give one CalibrationWarning naming some of them
    and how many more, not one warning a run; a tp run's state is its 1/tp share,
    sharded over its data-parallel GPUs."""
    truth = sm.ClusterProfile(ceiling=30e9, provenance={"source": "truth"})
    kw = dict(gpus_per_node=8, nics_per_node=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.ModelWarning)  # (the same pressure, predicted)
        t = sm.iteration_time("llama-2-70b", 32, 100e9, cluster=truth, tp=2,
                              sharding="zero3", **kw).total
    runs = [dict(model="llama-2-70b", n=32, bw=100e9, iteration_time=t * (1 + 1e-3 * k),
                 tp=2, sharding="zero3", label=f"r{k}") for k in range(10)]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        sm.fit_cluster(runs, fit=["efficiency"], **kw)
    full = [w for w in got if issubclass(w.category, sm.CalibrationWarning)
            and "model state" in str(w.message)]
    assert len(full) == 1
    text = str(full[0].message)
    assert "r0, r1, r2 and 7 more" in text and "32.1 GiB" in text  # 69 B / 2 / 16 x 16 bytes


def test_breakeven_of_a_tensor_parallel_job_is_a_nic_rate_on_the_table():
    """On a cluster with a utilization table, the break-even line rate of a TP x PP job
    is the NIC's: there the compressed and uncompressed scaling factors meet; the
    message speaks of the NIC's calibrated rates."""
    cl = sm.ClusterProfile(table_line_rate=[1e9, 1e10, 1e11],
                           table_utilization=[0.95, 0.7, 0.4], compute_slowdown=1.05,
                           provenance={"source": "t"})
    comp = sm.get_compressor("signsgd")  # (its break-even falls inside the table)
    kw = dict(gpus_per_node=8, nics_per_node=4, tp=2, pp=2, microbatches=8, cluster=cl)
    b = sm.breakeven_bandwidth("llama-2-13b", comp, n=64, detail=True, **kw)
    assert 1e9 < b.bw < 1e11 and b.within
    plain = sm.scaling_factor("llama-2-13b", 64, b.bw, **kw)
    compressed = sm.compressed_scaling_factor("llama-2-13b", comp, 64, b.bw, **kw)
    assert compressed == pytest.approx(plain, rel=1e-6)


def test_the_run_that_would_tell_explanations_apart_keeps_the_runs_parallelism():
    """The probes of a fit of TP x PP runs ask TP x PP questions (and say so)."""
    from scalemodel.fitting import _probe_profiles
    from scalemodel.runs import load_runs

    truth = sm.ClusterProfile(ceiling=30e9, provenance={"source": "truth"})
    runs = load_runs(_tp_runs(truth, CASES, gpus_per_node=8, nics_per_node=4))
    probes = _probe_profiles(runs, dict(fusion=None, algorithm="ring"))
    assert probes and all(job == dict(tp=2, pp=1, microbatches=1, virtual_stages=1,
                                      sequence_parallel=False) for *_, job in probes)
    assert all("tp=2" in text for text, *_ in probes)
    for text, prof, n, bw, fusion, sharding, job in probes:  # each is a question it can ask
        assert 0 < sm.scaling_factor(prof, n, bw, fusion=fusion, cluster=truth,
                                     gpus_per_node=8, nics_per_node=4, **job) <= 1


def test_interleaved_and_sequence_parallel_runs_calibrate():
    """A run's virtual_stages and sequence_parallel reach its scenario: runs made with an
    interleaved schedule give the slowdown back only when the fit knows the schedule."""
    truth = sm.ClusterProfile(compute_slowdown=1.1, ceiling=30e9,
                              provenance={"source": "truth"})
    kw = dict(gpus_per_node=8, nics_per_node=4)
    job = dict(tp=2, pp=4, microbatches=8, virtual_stages=2, sequence_parallel=True)
    runs = [dict(model="llama-2-13b", n=n, bw=bw, **job, iteration_time=sm.iteration_time(
        "llama-2-13b", n, bw, cluster=truth, **job, **kw).total) for n, bw in
        ((32, 10e9), (64, 100e9), (128, 25e9))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        told = sm.fit_cluster(runs, fit=["compute_slowdown", "ceiling"], **kw).cluster
        plain = sm.fit_cluster([{k: v for k, v in r.items() if k != "virtual_stages"}
                                for r in runs], fit=["compute_slowdown", "ceiling"],
                               **kw).cluster
    assert told.compute_slowdown == pytest.approx(1.1, rel=0.01)
    assert abs(plain.compute_slowdown - 1.1) > 0.02  # 1F1B's larger bubble absorbs it


def test_bad_virtual_stages_and_sequence_parallel_are_named():
    from scalemodel.runs import load_runs

    base = dict(model="llama-2-13b", n=64, bw=100e9, iteration_time=2.0, tp=2, pp=2,
                microbatches=8)
    with pytest.raises(sm.ScalemodelError) as exc:
        load_runs([dict(base, virtual_stages=0)])
    assert exc.value.parameter == "runs[0].virtual_stages"
    with pytest.raises(sm.ScalemodelError) as exc:
        load_runs([dict(base, sequence_parallel="maybe")])
    assert exc.value.parameter == "runs[0].sequence_parallel"


@pytest.mark.parametrize("bw", [10e9, 100e9])
def test_every_answer_of_a_pipeline_job_on_a_slowed_cluster_agrees(bw):
    """With a pipeline, a slowdown and a straggler spread (the bubble stretched,
    Scenario.bubble), the planner, the bucket search, the sensitivities and the
    compression solver start from scaling_factor's number."""
    cl = sm.ClusterProfile(compute_slowdown=1.2, straggler_spread=0.05, ceiling=40e9,
                           intervals={"ceiling": (30e9, 50e9)}, provenance={"source": "t"})
    kw = dict(gpus_per_node=8, nics_per_node=4, tp=2, pp=4, microbatches=8, cluster=cl)
    sf = sm.scaling_factor("llama-2-13b", 64, bw, **kw)
    assert sm.plan_compression("llama-2-13b", bw, n=64, target=0.9,
                               **kw).uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)
    assert sm.best_bucket_size("llama-2-13b", 64, bw,
                               **kw).default_scaling_factor == pytest.approx(sf, rel=1e-12)
    assert sm.sensitivities("llama-2-13b", 64, bw, **kw).scaling_factor == pytest.approx(
        sf, rel=1e-12)
    assert sm.min_compression("llama-2-13b", bw, n=64, target=0.9,
                              **kw).uncompressed_scaling_factor == pytest.approx(sf, rel=1e-12)
    it = sm.iteration_time("llama-2-13b", 64, bw, **kw)
    assert it.forward + it.backward + it.exposed_communication + it.update == pytest.approx(
        it.total, rel=1e-12)


def test_sharded_tensor_parallel_runs_calibrate():
    """FSDP x TP runs (sharding and tp together) fit the NIC's ceiling back, and the fit
    predicts a larger job as the cluster that made the runs does."""
    truth = sm.ClusterProfile(compute_slowdown=1.06, ceiling=50e9,
                              provenance={"source": "truth"})
    kw = dict(gpus_per_node=8, nics_per_node=8)
    job = dict(tp=2, sharding="zero3")
    runs = [dict(model="llama-2-13b", n=n, bw=bw, **job, iteration_time=sm.iteration_time(
        "llama-2-13b", n, bw, cluster=truth, **job, **kw).total)
        for n, bw in ((32, 25e9), (64, 100e9), (128, 50e9))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = sm.fit_cluster(runs, fit=["compute_slowdown", "ceiling"], **kw).cluster
    assert cl.ceiling == pytest.approx(50e9, rel=0.01)
    assert sm.iteration_time("llama-2-13b", 256, 100e9, cluster=cl, **job, **kw).total == \
        pytest.approx(sm.iteration_time("llama-2-13b", 256, 100e9, cluster=truth, **job,
                                        **kw).total, rel=0.01)
