"""A fitted efficiency carried to another model, or from memory-pressured runs: its
interval widened by the published spread between models (EFFICIENCY_TRANSFER); and the
iteration time's interval over the fit (IterationTime.total_interval)."""

import csv
import math
import warnings
from pathlib import Path

import attrs
import pytest

import scalemodel as sm
from scalemodel.efficiency import (EFFICIENCY_TRANSFER, MEMORY_PRESSURE_SLOWDOWN,
                                   calibration_pressured, carried_ends, carried_note,
                                   carried_over, fitted_efficiency, recompute_factor,
                                   recompute_share, micro_batch_of, micro_batch_side,
                                   model_key, tp_side)
from scalemodel.exceptions import CalibrationWarning
from scalemodel.intervals import iteration_time_interval

PARALLEL = Path(__file__).parents[1] / "benchmarks" / "data" / "published_parallel.csv"

from test_efficiency import MPT13, NODE, fit8  # noqa: F401  (fit8: the shared one-run fit)

MPT7 = dict(MPT13, layers=32, hidden=4096, heads=32, ffn=16384, name="mpt-7b")


def _profile(cfg, gpu="h100-sxm", **kw):
    return sm.transformer_profile(sm.TransformerConfig(**cfg), gpu, **kw)


def test_the_factor_is_the_largest_spread_of_the_published_tables():
    """EFFICIENCY_TRANSFER: highest over lowest MFU across the model sizes of Megatron-LM's
    H100 weak-scaling table and Narayanan et al.'s Table 1, rounded up to 0.01."""
    rows = list(csv.DictReader(PARALLEL.read_text().splitlines()))
    ratios = {}
    for series, first, last in (("megatron-h100-weak", 1, 9), ("narayanan-a100", 12, 21)):
        mfu = [float(r["mfu_percent"]) for r in rows
               if r["series"] == series and first <= int(r["row"]) <= last]
        assert len(mfu) == last - first + 1
        ratios[series] = max(mfu) / min(mfu)
    assert ratios["megatron-h100-weak"] == pytest.approx(49 / 41)
    assert ratios["narayanan-a100"] == pytest.approx(52 / 43)
    assert EFFICIENCY_TRANSFER == math.ceil(100 * max(ratios.values())) / 100


def test_the_same_model_keeps_the_fitted_interval(fit8):
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    assert eff["models"] == [model_key(prof)] and eff["pressured"] == []
    assert eff["micro_batches"] == {model_key(prof): [2]}
    # another name, the same micro-batch: the same model, the fitted interval
    renamed = _profile(dict(MPT13, name="mpt-13b-row18"))
    assert model_key(renamed) == model_key(prof)
    assert not carried_over(fit.cluster, renamed)
    assert micro_batch_side(fit.cluster, renamed) is None
    value, (lo, hi) = fitted_efficiency(fit.cluster, renamed)
    assert (value, [lo, hi]) == (eff["value"], eff["interval"])


@pytest.mark.parametrize("mb, side", [(4, "larger"), (1, "smaller")])
def test_another_micro_batch_widens_one_end(fit8, mb, side):
    """The same model at a micro-batch its runs did not reach: the fast end widens for a
    larger one, the slow end for a smaller one; the point and the other end stay."""
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    other = _profile(dict(MPT13, micro_batch=mb))
    assert model_key(other) == model_key(prof) and not carried_over(fit.cluster, other)
    assert micro_batch_of(other) == mb and micro_batch_side(fit.cluster, other) == side
    value, (lo, hi) = fitted_efficiency(fit.cluster, other)
    assert value == eff["value"]
    f_lo, f_hi = eff["interval"]
    if side == "larger":
        assert (lo, hi) == (f_lo, pytest.approx(f_hi * EFFICIENCY_TRANSFER, rel=1e-12))
    else:
        assert (lo, hi) == (pytest.approx(f_lo / EFFICIENCY_TRANSFER, rel=1e-12), f_hi)
    worst, best = fit.cluster.corners()  # only the widened corner moves
    assert fitted_efficiency(worst, other)[0] == pytest.approx(hi, rel=1e-12)
    assert fitted_efficiency(best, other)[0] == pytest.approx(lo, rel=1e-12)
    # and so does the step time's interval, on that side only
    base = sm.iteration_time(_profile(dict(MPT13, micro_batch=mb)), 64, "400Gbps",
                             sharding="zero3", cluster=attrs.evolve(
                                 fit.cluster, extra=dict(fit.cluster.extra, efficiency=dict(
                                     eff, micro_batches={model_key(prof): [mb]}))))
    it = sm.iteration_time(other, 64, "400Gbps", sharding="zero3", cluster=fit.cluster)
    assert float(it.total) == pytest.approx(float(base.total), rel=1e-12)
    fast, slow = it.total_interval
    if side == "larger":
        assert fast < base.total_interval[0] and slow == pytest.approx(
            base.total_interval[1], rel=1e-12)
    else:
        assert slow > base.total_interval[1] and fast == pytest.approx(
            base.total_interval[0], rel=1e-12)


def test_micro_batches_between_the_runs_and_old_fits_are_not_widened(fit8):
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    key = model_key(prof)
    wide = attrs.evolve(fit.cluster, extra={"efficiency": dict(eff, micro_batches={key: [1, 4]})})
    assert micro_batch_side(wide, _profile(dict(MPT13, micro_batch=2))) is None
    assert micro_batch_side(wide, _profile(dict(MPT13, micro_batch=8))) == "larger"
    old = attrs.evolve(fit.cluster, extra={"efficiency": {
        k: v for k, v in eff.items() if k != "micro_batches"}})
    assert micro_batch_side(old, _profile(dict(MPT13, micro_batch=8))) is None


@pytest.mark.parametrize("record", [[2], {"x": 2}, {"KEY": []}, {"KEY": ["2"]},
                                    {"KEY": [float("nan")]}, {"KEY": [0]}])
def test_a_bad_micro_batch_record_is_named(fit8, record):
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    if isinstance(record, dict) and "KEY" in record:
        record = {model_key(prof): record["KEY"]}
    bad = attrs.evolve(fit.cluster, extra={"efficiency": dict(eff, micro_batches=record)})
    if record == {"x": 2}:  # another model's entry: not read
        assert micro_batch_side(bad, prof) is None
        return
    with pytest.raises(sm.InvalidParameterError, match="micro_batches"):
        micro_batch_side(bad, prof)


def test_another_model_gets_the_interval_widened_by_the_factor(fit8):
    _, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    other = _profile(MPT7)
    assert carried_over(fit.cluster, other)
    value, (lo, hi) = fitted_efficiency(fit.cluster, other)
    assert value == eff["value"]  # the point answer is the fitted one
    assert lo == pytest.approx(eff["interval"][0] / EFFICIENCY_TRANSFER, rel=1e-12)
    assert hi == pytest.approx(eff["interval"][1] * EFFICIENCY_TRANSFER, rel=1e-12)
    worst, best = fit.cluster.corners()
    assert fitted_efficiency(worst, other)[0] == pytest.approx(hi, rel=1e-12)
    assert fitted_efficiency(best, other)[0] == pytest.approx(lo, rel=1e-12)
    # never past the bounds of an efficiency
    wide = attrs.evolve(fit.cluster, extra={"efficiency": dict(eff, interval=[0.06, 0.9])})
    assert fitted_efficiency(wide, other)[1] == (0.05, 1.0)


def _bare_time(cfg, e, network, n, bw, kw, update_time):
    """The iteration time of ``cfg`` computing at efficiency ``e`` on a cluster without a
    fitted efficiency (the rescaling path not used)."""
    prof = _profile(cfg, efficiency=e, update_time=update_time)
    bare = attrs.evolve(network, extra={}, alternatives=())
    return float(sm.iteration_time(prof, n, bw, cluster=bare, **kw).total)


@pytest.mark.parametrize("cfg", [MPT13, MPT7], ids=["same model", "another model"])
def test_total_interval_is_the_extremes_over_network_and_efficiency(fit8, cfg):
    """Without alternatives, the iteration time's interval is the min and max over the two
    network corners times the two efficiency ends (widened for another model), each
    evaluated on a profile built at that efficiency."""
    prof0, fit = fit8
    cl = attrs.evolve(fit.cluster, alternatives=(), extra={  # (the run noise: test_run_noise)
        k: v for k, v in fit.cluster.extra.items() if k != "run_noise"})
    prof = _profile(cfg)
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    n, bw = 64, "25Gbps"  # communication shows: the network corners matter
    it = sm.iteration_time(prof, n, bw, cluster=cl, **kw)
    _, (e_lo, e_hi) = fitted_efficiency(cl, prof)
    e_own = prof.provenance["efficiency"]
    own = float(e_own.split(":")[1].split(",")[0])
    worst, best = cl.corners()
    times = [_bare_time(cfg, e, net, n, bw, kw, prof.update_time * own / e)
             for e in (e_lo, e_hi) for net in (worst, best)]
    lo, hi = it.total_interval
    assert lo == pytest.approx(min(times), rel=1e-9)
    assert hi == pytest.approx(max(times), rel=1e-9)
    assert lo <= float(it.total) <= hi
    assert iteration_time_interval(prof, n, bw, cluster=cl, **kw).pair == it.total_interval


def test_without_a_fitted_cluster_the_time_interval_is_the_point():
    it = sm.iteration_time("resnet50", 16, "10Gbps", gpus_per_node=8)
    assert it.total_interval == (it.total, it.total)


def test_a_pressured_calibration_run_warns_and_widens_its_own_model():
    """MPT-13B on 8 A100 40GB (LLM Foundry row 6: state 60 % of the GPU)."""
    prof = _profile(dict(MPT13, micro_batch=4), "a100-40gb", grad_accum=16)
    with pytest.warns(CalibrationWarning, match=r"memory.*60\.0%|60\.0%.*memory|59\.9%"):
        fit = _fit_quietly_but_pressure(prof)
    eff = fit.cluster.extra["efficiency"]
    assert eff["pressured"] == [model_key(prof)]
    later = _profile(dict(MPT13, micro_batch=10), "a100-40gb")  # row 7, 16 GPUs
    assert carried_over(fit.cluster, later) and calibration_pressured(fit.cluster)
    value, (lo, hi) = fitted_efficiency(fit.cluster, later)
    assert value == eff["value"]  # the point stays
    assert lo == pytest.approx(eff["interval"][0] / EFFICIENCY_TRANSFER, rel=1e-12)
    # the fast end: carried, and then the slowdown a pressured run may have paid
    assert hi == pytest.approx(min(1.0, eff["interval"][1] * EFFICIENCY_TRANSFER
                                   * MEMORY_PRESSURE_SLOWDOWN), rel=1e-12)
    assert hi > eff["value"] * MEMORY_PRESSURE_SLOWDOWN  # row 7's MFU is 1.195 x row 6's


def test_a_pressured_calibration_widens_the_fast_end_of_the_step_time():
    """iteration_time on a fit whose every run was pressured: the point is the one the
    fitted efficiency gives, the fast end of the step time comes down by the slowdown too,
    and the note says so; a fit that also had a model with room does not."""
    prof = _profile(dict(MPT13, micro_batch=4), "a100-40gb", grad_accum=16)
    with pytest.warns(CalibrationWarning, match="memory"):
        fit = _fit_quietly_but_pressure(prof)
    later = _profile(dict(MPT13, micro_batch=10), "a100-40gb")
    kw = dict(sharding="zero3", fusion=None, intra_bw=sm.get_gpu("a100-40gb").intra_node_bw,
              **NODE)
    it = sm.iteration_time(later, 16, "1600Gbps", cluster=fit.cluster, **kw)
    eff = fit.cluster.extra["efficiency"]  # carried as far, but one model had room:
    plain = attrs.evolve(fit.cluster, extra=dict(fit.cluster.extra, efficiency=dict(
        eff, models=eff["models"] + ["another model"])))
    assert carried_over(plain, later) and not calibration_pressured(plain)
    it0 = sm.iteration_time(later, 16, "1600Gbps", cluster=plain, **kw)
    assert it.total == it0.total
    assert it.total_interval[1] == pytest.approx(it0.total_interval[1], rel=1e-12)
    assert it.total_interval[0] < it0.total_interval[0] / 1.3  # nearly all compute
    assert "1.364 times more: every calibration run was memory-pressured" \
        in it.efficiency_carried
    assert "1.364" not in it0.efficiency_carried


def test_calibration_pressured_needs_every_model_pressured_and_a_sound_record(fit8):
    _, fit = fit8
    eff = fit.cluster.extra["efficiency"]

    def with_(**kw):
        return attrs.evolve(fit.cluster, extra=dict(fit.cluster.extra,
                                                    efficiency=dict(eff, **kw)))

    assert not calibration_pressured(fit.cluster) and not calibration_pressured(None)
    assert calibration_pressured(with_(pressured=list(eff["models"])))
    assert not calibration_pressured(with_(models=eff["models"] + ["other"],
                                           pressured=list(eff["models"])))
    for bad in ("mpt-13b", [1], {"a": 1}):
        with pytest.raises(sm.InvalidParameterError,
                           match=r"cluster\.extra\['efficiency'\]\['pressured'\]"):
            calibration_pressured(with_(pressured=bad))


def _fit_quietly_but_pressure(prof):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", CalibrationWarning)
        warnings.filterwarnings("ignore", category=CalibrationWarning,
                                message="(?!.*memory)")
        return sm.fit_cluster([dict(model=prof, n=8, bw="1600Gbps", sharding="zero3",
                                    tokens_per_second_per_gpu=1668, label="row 6")],
                              fusion=None, intra_bw=sm.get_gpu("a100-40gb").intra_node_bw,
                              **NODE)


def test_answers_say_when_the_efficiency_is_carried_to_another_model(fit8):
    _, fit = fit8
    kw = dict(n=64, sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    other = sm.min_compression(_profile(MPT7), "25Gbps", cluster=fit.cluster, **kw)
    same = sm.min_compression(_profile(dict(MPT13, name="mpt-13b-row18")), "25Gbps",
                              cluster=fit.cluster, **kw)
    bigger = sm.min_compression(_profile(dict(MPT13, micro_batch=4)), "25Gbps",
                                cluster=fit.cluster, **kw)
    assert "is carried to mpt-7b" in other.message and "1.21" in other.message
    assert "is carried to" not in same.message
    assert ("is carried to micro-batch 4, larger than its runs', the fast end"
            in bigger.message)
    bw = sm.required_bandwidth(_profile(MPT7), cluster=fit.cluster, **kw)
    assert "is carried to mpt-7b" in bw.message


def test_an_efficiency_alone_gives_the_solvers_an_interval(fit8):
    """A cluster whose only doubt is its fitted efficiency (no other intervals, no
    alternatives) still gives min_compression an interval, and it spans the answers at
    the two efficiency ends."""
    _, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    cl = attrs.evolve(fit.cluster, intervals={}, alternatives=(), extra={
        k: v for k, v in fit.cluster.extra.items() if k != "run_noise"})  # (test_run_noise)
    kw = dict(n=64, sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    r = sm.min_compression(_profile(MPT7), "10Gbps", cluster=cl, **kw)
    assert r.interval is not None
    bare = attrs.evolve(cl, extra={})
    prof = _profile(MPT7)
    own = float(prof.provenance["efficiency"].split(":")[1].split(",")[0])
    # a profile built at each end, its update scaled as the fit scales it
    ends = [sm.min_compression(_profile(MPT7, efficiency=e,
                                        update_time=prof.update_time * own / e),
                               "10Gbps", cluster=bare, **kw).ratio
            for e in (eff["interval"][0] / EFFICIENCY_TRANSFER,
                      eff["interval"][1] * EFFICIENCY_TRANSFER)]
    assert r.interval[0] == pytest.approx(min(ends), rel=1e-6)
    assert r.interval[1] == pytest.approx(max(ends), rel=1e-6)


def test_a_gpu_of_the_users_own_fits_without_a_pressure_check():
    """A FLOP-derived profile on a GPUSpec scalemodel does not list: fit_cluster fits its
    efficiency (no memory-pressure check: its memory is not looked up by name)."""
    spec = attrs.evolve(sm.get_gpu("h100-sxm"), name="my-gpu", full_name="My GPU 80GB")
    prof = _profile(MPT13, spec)
    fit = _fit_one(prof, 4792)
    eff = fit.cluster.extra["efficiency"]
    assert eff["pressured"] == [] and eff["gpu"] == ["My GPU 80GB"]


def test_another_tensor_parallel_degree_is_carried_over(fit8):
    """Fitted on tp = 1 runs of MPT-13B, the same model at tp = 2 multiplies matrices half
    as wide: carried over (model_key has tp), the slow end of its efficiency interval
    widened by the factor (a larger degree is not more efficient), the iteration time's
    interval wider than at tp = 1 on its slow side, and the solvers say so."""
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    assert model_key(prof, 2) == model_key(prof) + ", tp=2"
    assert not carried_over(fit.cluster, prof) and carried_over(fit.cluster, prof, 2)
    assert tp_side(fit.cluster, prof, 2) == "larger"
    assert carried_ends(fit.cluster, prof, 2) == (True, False)
    lo, hi = fitted_efficiency(fit.cluster, prof, tp=2)[1]
    assert (lo, hi) == (pytest.approx(eff["interval"][0] / EFFICIENCY_TRANSFER, rel=1e-12),
                        eff["interval"][1])
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    one = sm.iteration_time(prof, 64, "400Gbps", cluster=fit.cluster, **kw)
    two = sm.iteration_time(prof, 64, "400Gbps", cluster=fit.cluster, tp=2, **kw)
    slow = [t.total_interval[1] / t.total - 1 for t in (one, two)]
    assert slow[1] > 1.3 * slow[0]
    r = sm.min_compression(prof, "25Gbps", n=64, tp=2, cluster=fit.cluster, **kw)
    assert ("is carried to tp=2, the slow end of its interval widened by a factor 1.21"
            in r.message)
    assert "is carried to" not in sm.min_compression(prof, "25Gbps", n=64,
                                                     cluster=fit.cluster, **kw).message


def test_a_fit_on_tensor_parallel_runs_knows_their_degree():
    """Runs at tp = 2 record the model at tp = 2: not carried there, carried to tp = 1."""
    prof = _profile(MPT13)
    truth = sm.ClusterProfile(ceiling=100e9, provenance={"source": "truth"})
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    t = sm.iteration_time(prof, 16, "400Gbps", cluster=truth, tp=2, **kw).total
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster([dict(model=prof, n=16, bw="400Gbps", tp=2, iteration_time=t,
                                   sharding="zero3")],
                             fit=["efficiency"], fusion=None,
                             intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    assert fit.cluster.extra["efficiency"]["models"] == [model_key(prof, 2)]
    assert not carried_over(fit.cluster, prof, 2) and carried_over(fit.cluster, prof)
    # down to tp = 1 the fast end widens, up to tp = 4 the slow end; another model both
    assert carried_ends(fit.cluster, prof, 1) == (False, True)
    assert carried_ends(fit.cluster, prof, 4) == (True, False)
    assert carried_ends(fit.cluster, _profile(MPT7), 2) == (True, True)
    assert tp_side(fit.cluster, _profile(MPT7), 2) is None
    wide = attrs.evolve(fit.cluster, extra={"efficiency": dict(
        fit.cluster.extra["efficiency"], models=[model_key(prof), model_key(prof, 4)])})
    assert tp_side(wide, prof, 2) == "between" and carried_ends(wide, prof, 2) == (False,
                                                                                   False)


def test_iteration_time_says_how_the_efficiency_is_carried(fit8, capsys, tmp_path):
    """IterationTime.efficiency_carried is efficiency.carried_note of the job: empty for
    the runs' own model and micro-batch, one end for another micro-batch or degree, both
    for another model; the CLI prints it under the intervals."""
    from scalemodel.cli import main
    from scalemodel.efficiency import carried_note

    prof, fit = fit8
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    cases = [(prof, 1, ""), (_profile(dict(MPT13, micro_batch=4)), 1, "fast end"),
             (prof, 2, "slow end"), (_profile(MPT7), 1, "either way")]
    for p, tp, says in cases:
        it = sm.iteration_time(p, 64, "400Gbps", cluster=fit.cluster, tp=tp, **kw)
        assert it.efficiency_carried == carried_note(fit.cluster, p, tp)
        assert (says in it.efficiency_carried) if says else it.efficiency_carried == ""
    sm.save_cluster(fit.cluster, tmp_path / "c.json")
    sm.save_profile(_profile(MPT7), tmp_path / "mpt-7b.json")
    rc = main(["iteration", "--model", str(tmp_path / "mpt-7b.json"), "--n", "64", "--bw",
               "400Gbps", "--sharding", "zero3", "--gpus-per-node", "8", "--nics-per-node",
               "8", "--cluster", str(tmp_path / "c.json")])
    out = capsys.readouterr().out
    assert rc in (0, None) and "is carried to mpt-7b, its interval widened" in out


# --------------------------------------------------------------------------- recompute


def _fit_one(prof, tokens):
    """fit_cluster on ONE run of ``prof`` on 8 GPUs of a 400 Gbit/s node at ``tokens``
    per second per GPU, its warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster([dict(model=prof, n=8, bw="400Gbps", sharding="zero3",
                                    tokens_per_second_per_gpu=tokens)],
                              fusion=None, intra_bw=sm.get_gpu("h100").intra_node_bw,
                              **NODE)


def _ckpt(prof, mode="full"):
    from scalemodel.checkpointing import with_recompute
    return with_recompute(prof, mode)


def test_the_recompute_share_is_what_with_recompute_adds():
    prof = _profile(MPT13)
    assert recompute_share(prof) == 0.0
    full = _ckpt(prof)
    redo = sum(full.provenance["recompute"])
    assert recompute_share(full) == pytest.approx(
        redo / (full.forward_time + full.backward_time), rel=1e-12)
    # a second forward beside a forward and a backward of twice its FLOPs, less the
    # embeddings and output projection that MPT does not checkpoint
    assert 0.2 < recompute_share(full) < 0.25
    assert 0 < recompute_share(_ckpt(prof, 0.5)) < recompute_share(full)


def _recompute_by_hand(e, rho_c, rho_t):
    """Time per unit of FLOPs of a job with recompute share rho_t when the runs (share
    rho_c) measured 1/e and the recompute ran at the peak: 1/e = (1 - rho_c) x + rho_c,
    the job (1 - rho_t) x + rho_t."""
    x = (1 / e - rho_c) / (1 - rho_c)
    return (1 - rho_t) * x + rho_t


def test_more_recompute_than_the_runs_widens_the_fast_end_as_the_peak_bounds_it(fit8):
    prof, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    assert eff["recompute_shares"] == [0.0]
    job = _ckpt(prof)
    rho, e = recompute_share(job), eff["value"]
    side, g = recompute_factor(fit.cluster, job)
    assert side == "fast"
    assert 1 / g == pytest.approx(_recompute_by_hand(e, 0.0, rho) * e, rel=1e-12)
    value, (lo, hi) = fitted_efficiency(fit.cluster, job)
    assert value == e and lo == eff["interval"][0]  # the point and the slow end stay
    assert hi == pytest.approx(min(1.0, eff["interval"][1] * g), rel=1e-12)
    assert recompute_factor(fit.cluster, prof) is None  # as the runs: nothing
    note = carried_note(fit.cluster, job)
    assert "more activation recompute than the calibration runs, so the fast end" in note


def test_less_recompute_than_the_runs_widens_the_slow_end():
    prof = _ckpt(_profile(MPT13))
    fit = _fit_one(prof, 4000)
    eff = fit.cluster.extra["efficiency"]
    rho_c, e = recompute_share(prof), eff["value"]
    assert eff["recompute_shares"] == [round(rho_c, 6)]
    plain = _profile(MPT13)
    side, g = recompute_factor(fit.cluster, plain)
    assert side == "slow"
    assert g == pytest.approx(_recompute_by_hand(e, round(rho_c, 6), 0.0) * e, rel=1e-9)
    value, (lo, hi) = fitted_efficiency(fit.cluster, plain)
    assert value == e and hi == eff["interval"][1]
    assert lo == pytest.approx(eff["interval"][0] / g, rel=1e-12)
    # iteration_time: the same point, a slower slow end, the same fast end
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    it = sm.iteration_time(plain, 16, "400Gbps", cluster=fit.cluster, **kw)
    bare = attrs.evolve(fit.cluster, extra=dict(fit.cluster.extra, efficiency={
        k: v for k, v in eff.items() if k != "recompute_shares"}))
    it0 = sm.iteration_time(plain, 16, "400Gbps", cluster=bare, **kw)
    assert it.total == it0.total
    assert it.total_interval[0] == pytest.approx(it0.total_interval[0], rel=1e-12)
    assert it.total_interval[1] > it0.total_interval[1] * 1.1
    assert "less activation recompute" in it.efficiency_carried


@pytest.mark.parametrize("bad", ["0.2", [], [0.2, 1.0], [-0.1], [float("nan")], [True]])
def test_a_tampered_recompute_record_is_refused_by_name(fit8, bad):
    _, fit = fit8
    eff = fit.cluster.extra["efficiency"]
    cl = attrs.evolve(fit.cluster, extra=dict(fit.cluster.extra,
                                              efficiency=dict(eff, recompute_shares=bad)))
    with pytest.raises(sm.InvalidParameterError,
                       match=r"cluster\.extra\['efficiency'\]\['recompute_shares'\]"):
        recompute_factor(cl, _profile(MPT13))


def test_checkpointing_asked_as_a_keyword_is_carried_as_a_checkpointed_profile(fit8):
    """iteration_time(..., activation_checkpointing="full") and the solvers on a fit
    without recompute: the same intervals and notes as the profile checkpointed first."""
    prof, fit = fit8
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw, **NODE)
    asked = sm.iteration_time(prof, 16, "400Gbps", cluster=fit.cluster,
                              activation_checkpointing="full", **kw)
    given = sm.iteration_time(_ckpt(prof), 16, "400Gbps", cluster=fit.cluster, **kw)
    assert asked.total == pytest.approx(given.total, rel=1e-12)
    assert asked.total_interval == pytest.approx(given.total_interval, rel=1e-12)
    assert "more activation recompute" in asked.efficiency_carried
    bare = attrs.evolve(fit.cluster, extra=dict(fit.cluster.extra, efficiency={
        k: v for k, v in fit.cluster.extra["efficiency"].items()
        if k != "recompute_shares"}))
    before = sm.iteration_time(prof, 16, "400Gbps", cluster=bare,
                               activation_checkpointing="full", **kw)
    assert asked.total_interval[0] < before.total_interval[0] / 1.1
    assert asked.total_interval[1] == pytest.approx(before.total_interval[1], rel=1e-12)
    res = sm.min_compression(prof, "25Gbps", n=64, cluster=fit.cluster,
                             activation_checkpointing="full", **kw)
    assert "more activation recompute than the calibration runs" in res.message


def test_model_key_is_unchanged_by_a_default_head_dim():
    """A cluster fitted before TransformerConfig had ``head_dim`` recorded its models'
    keys without it: a profile of the same model (head_dim = hidden / heads) has the
    same key, so it is not carried as another model; heads of another width are."""
    import attrs
    prof = _profile(MPT13)
    old = dict(prof.provenance["config"])
    assert old.pop("head_dim") == MPT13["hidden"] // MPT13["heads"]
    before = attrs.evolve(prof, provenance=dict(prof.provenance, config=old))
    assert model_key(prof) == model_key(before) and "head_dim" not in model_key(prof)
    wide = _profile(dict(MPT13, head_dim=2 * MPT13["hidden"] // MPT13["heads"]))
    assert "head_dim=" in model_key(wide) and model_key(wide) != model_key(prof)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_the_job_the_runs_measured_is_not_said_to_have_other_recompute(mode):
    # a fit on a checkpointed run, asked about the same job: its recompute share is
    # compared on the runs' basis (before the efficiency rescale, whose memory-bound
    # recompute does not move): the rescaled profile's share said "less activation
    # recompute than the calibration runs" (README's torchtitan example, selective)
    prof = _profile(MPT13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster([dict(model=prof, n=8, bw="400Gbps", sharding="zero3",
                                   tokens_per_second_per_gpu=2500,
                                   activation_checkpointing=mode)],
                             fusion=None, intra_bw=sm.get_gpu("h100").intra_node_bw,
                             **NODE)
    assert fit.cluster.extra["efficiency"]["recompute_shares"][0] > 0
    kw = dict(sharding="zero3", intra_bw=sm.get_gpu("h100").intra_node_bw,
              activation_checkpointing=mode, **NODE)
    for n in (8, 64):
        it = sm.iteration_time(prof, n, "400Gbps", cluster=fit.cluster, **kw)
        assert "recompute" not in (it.efficiency_carried or "")
    res = sm.min_compression(prof, "25Gbps", n=64, cluster=fit.cluster, **kw)
    assert "activation recompute than" not in res.message
    other = sm.iteration_time(prof, 64, "400Gbps", cluster=fit.cluster,
                              **dict(kw, activation_checkpointing="none"))
    assert "less activation recompute" in other.efficiency_carried
