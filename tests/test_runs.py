"""Run lists for fit_cluster (scalemodel.runs) and WorkloadProfile.scaled_to: the measured
single-worker time rescales the profile, the new run keys, and bad or hostile input (issue
17 items 5 and 6, issue 19 items 3 and 4)."""

import math
import re
import warnings

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.cli import main
from scalemodel.runs import DEFAULT_UNCERTAINTY, MAX_RUN_TIME, NOISE_TOLERANCE, load_runs
from scalemodel.workloads import TransformerConfig, llm_config, transformer_profile

TOPO = sm.Topology(gpus_per_node=8)
BASE = {"model": "resnet50", "n": 16, "bw": 1e10}


def _one(**kw):
    return load_runs([dict(BASE, **kw)])[0]


# --------------------------------------------------------------------------- scaled_to


def test_scaled_to_scales_every_compute_time_by_one_factor():
    p = sm.load_profile("resnet50").with_grad_accum(3)
    q = p.scaled_to(0.5)
    f = 0.5 / p.iteration_time
    assert q.iteration_time == pytest.approx(0.5, rel=1e-14)
    for field in ("forward_time", "backward_time", "update_time"):
        assert getattr(q, field) == pytest.approx(getattr(p, field) * f, rel=1e-14)
    np.testing.assert_allclose(q.tensor_ready, p.tensor_ready * f, rtol=1e-14)
    np.testing.assert_array_equal(q.tensor_bytes, p.tensor_bytes)  # sizes unchanged
    assert q.grad_accum == 3 and q.reduction is p.reduction and q.name == p.name
    rec = q.provenance["scaled_to"]
    assert rec["iteration_time"] == 0.5 and rec["factor"] == pytest.approx(f)
    assert rec["from_iteration_time"] == pytest.approx(p.iteration_time)
    assert "scaled_to" not in p.provenance  # the original is untouched


def test_scaled_to_is_cached_and_composes():
    p = sm.load_profile("bert")
    assert p.scaled_to(0.25) is p.scaled_to(0.25)
    assert p.scaled_to(p.iteration_time) is p
    twice = p.scaled_to(0.1).scaled_to(0.25)
    once = p.scaled_to(0.25)
    assert twice.forward_time == pytest.approx(once.forward_time, rel=1e-14)
    assert twice.provenance["scaled_to"]["from_iteration_time"] == pytest.approx(
        p.iteration_time)
    assert twice.provenance["scaled_to"]["factor"] == pytest.approx(
        once.provenance["scaled_to"]["factor"])


def test_scaled_to_changes_the_communication_to_compute_ratio_as_measured():
    # An independent check: the same profile built by hand with every time halved
    p = sm.load_profile("resnet50")
    by_hand = sm.WorkloadProfile(
        name="half", tensor_bytes=p.tensor_bytes, tensor_ready=p.tensor_ready / 2,
        forward_time=p.forward_time / 2, backward_time=p.backward_time / 2,
        update_time=p.update_time / 2, reduction=p.reduction, provenance={"source": "t"})
    q = p.scaled_to(p.iteration_time / 2)
    for n, bw in [(16, 10e9), (64, 25e9)]:
        a = sm.scaling_factor(q, n, bw, fusion="horovod")
        assert a == pytest.approx(sm.scaling_factor(by_hand, n, bw, fusion="horovod"),
                                  rel=1e-12)
        assert a < sm.scaling_factor(p, n, bw, fusion="horovod")  # faster compute, worse


@pytest.mark.parametrize("bad, exc", [
    (0, sm.InvalidParameterError), (-1.0, sm.InvalidParameterError),
    (math.inf, sm.InvalidParameterError), (math.nan, sm.InvalidParameterError),
    (1e300, sm.InvalidParameterError), (1e-300, sm.InvalidParameterError),
    (True, sm.ParameterTypeError), ("0.1", sm.ParameterTypeError),
    (None, sm.ParameterTypeError)])
def test_scaled_to_refuses_bad_times(bad, exc):
    with pytest.raises(exc, match="iteration_time"):
        sm.load_profile("resnet50").scaled_to(bad)


# --------------------------------------------------------------------------- single_worker_time


def test_single_worker_time_rescales_the_profile_and_runs_share_it():
    runs = load_runs([dict(BASE, iteration_time=0.12, single_worker_time=0.097),
                      dict(BASE, n=32, iteration_time=0.13, single_worker_time=0.097),
                      dict(BASE, scaling_factor=0.5)])
    assert runs[0].profile.iteration_time == pytest.approx(0.097, rel=1e-14)
    assert runs[0].profile is runs[1].profile  # one group in the fit
    assert runs[2].profile is sm.load_profile("resnet50")
    assert runs[0].measured_sf == pytest.approx(0.097 / 0.12)


def test_fit_sees_the_measured_compute():
    """PyTorch's DDP benchmark measured ResNet-50 at 0.097 s on one V100, the profile says
    0.128 s: runs generated with the measured compute give back the true ceiling."""
    truth = sm.ClusterProfile(topology=TOPO, ceiling=20e9, provenance={"source": "test"})
    t1 = 0.097
    p = sm.load_profile("resnet50").scaled_to(t1)
    runs = []
    for n, bw in [(16, 100e9), (64, 100e9)]:
        sf = sm.scaling_factor(p, n, bw, fusion="horovod", cluster=truth)
        runs.append(dict(model="resnet50", n=n, bw=bw, iteration_time=t1 / sf,
                         single_worker_time=t1))
    fit = sm.fit_cluster(runs, fusion="horovod", fit=["ceiling"])
    assert fit.parameters["ceiling"].value == pytest.approx(20e9, rel=0.01)


def test_a_run_slightly_faster_than_one_worker_is_noise_with_a_warning():
    with pytest.warns(sm.CalibrationWarning, match=r"run 'noisy'.*runs\[0\]\.iteration_time"):
        run = _one(iteration_time=0.0965, single_worker_time=0.097, label="noisy")
    assert run.measured_sf > 1
    with pytest.warns(sm.CalibrationWarning, match=r"run 'sf'.*runs\[0\]\.scaling_factor"):
        assert _one(scaling_factor=1.01, label="sf").scaling_factor == 1.01
    t1 = 0.097
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.iteration_time=.*faster"):
        _one(iteration_time=t1 * (1 - NOISE_TOLERANCE) * 0.999, single_worker_time=t1)
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.scaling_factor"):
        _one(scaling_factor=1.03)


# --------------------------------------------------------------------------- new keys


@pytest.mark.parametrize("given, canonical", [
    (None, "none"), ("none", "none"), ("zero1", "zero1"), ("ZeRO2", "zero2"),
    ("shard_grad_op", "zero2"), ("fsdp", "zero3"), ("full_shard", "zero3"),
    ("hybrid_shard", "hybrid_shard"), ("hsdp", "hybrid_shard")])
def test_sharding_is_validated_and_canonical(given, canonical):
    kw = {} if given is None else {"sharding": given}
    assert _one(scaling_factor=0.5, **kw).sharding == canonical


def test_bad_sharding_names_the_run():
    with pytest.raises(sm.UnknownNameError, match=r"runs\[0\]\.sharding='zer03'.*zero3"):
        _one(scaling_factor=0.5, sharding="zer03")
    with pytest.raises(sm.ParameterTypeError, match=r"runs\[0\]\.sharding"):
        _one(scaling_factor=0.5, sharding=3)


def test_grad_accum_sets_the_profile_and_runs_share_it():
    runs = load_runs([dict(BASE, scaling_factor=0.5, grad_accum=4),
                      dict(BASE, scaling_factor=0.6, grad_accum="4")])
    assert runs[0].grad_accum == 4 and runs[0].profile.grad_accum == 4
    assert runs[0].profile is runs[1].profile
    assert _one(scaling_factor=0.5).grad_accum is None
    # the single-worker time is the accumulating step's
    run = _one(iteration_time=0.5, single_worker_time=0.4, grad_accum=4)
    assert run.profile.grad_accum == 4 and run.profile.iteration_time == pytest.approx(0.4)


@pytest.mark.parametrize("bad", [0, 2.5, "2.5", "2.0", True, -1, 10**7, "x"])
def test_bad_grad_accum_names_the_run(bad):
    with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError),
                       match=r"runs\[0\]\.grad_accum"):
        _one(scaling_factor=0.5, grad_accum=bad)


@pytest.mark.parametrize("given, value", [
    (None, False), ("", False), ("true", True), ("False", False), ("1", True), ("0", False),
    ("yes", True), (True, True), (False, False), (1, True), (0, False)])
def test_wrapped_reads_bool_cells(given, value):
    kw = {} if given is None else {"wrapped": given}
    assert _one(n=1, scaling_factor=1.0, **kw).wrapped is value


@pytest.mark.parametrize("bad", ["maybe", 2, 0.5])
def test_bad_wrapped_names_the_run(bad):
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.wrapped"):
        _one(scaling_factor=0.5, wrapped=bad)


def test_bucket_cap_mb():
    assert _one(scaling_factor=0.5).bucket_cap_mb is None
    assert _one(scaling_factor=0.5, bucket_cap_mb="25").bucket_cap_mb == 25.0
    assert _one(scaling_factor=0.5, bucket_cap_mb=0).bucket_cap_mb == 0.0  # per tensor
    for bad in (-1, math.inf, 1e300, "big", True):
        with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError),
                           match=r"runs\[0\]\.bucket_cap_mb"):
            _one(scaling_factor=0.5, bucket_cap_mb=bad)


def test_tokens_per_second_per_gpu_gives_the_iteration_time():
    run = load_runs([dict(BASE, model="llama-2-7b", n=64, tokens_per_second_per_gpu=3000)])[0]
    cfg = llm_config("llama-2-7b")
    assert run.iteration_time == pytest.approx(cfg.seq * cfg.micro_batch / 3000)
    assert run.tokens_per_second_per_gpu == 3000
    run = load_runs([dict(BASE, model="llama-2-7b", n=64, grad_accum=8,
                          tokens_per_second_per_gpu=3000)])[0]
    assert run.iteration_time == pytest.approx(8 * 4096 / 3000)
    # a transformer profile of one's own: its micro-batch and sequence length
    cfg = TransformerConfig(layers=4, hidden=512, heads=8, ffn=2048, vocab=32000, seq=1024,
                            micro_batch=2, dtype="bf16")
    prof = transformer_profile(cfg, efficiency=0.5)
    run = load_runs([dict(BASE, model=prof, tokens_per_second_per_gpu=2048 / 0.05)])[0]
    assert run.iteration_time == pytest.approx(0.05) and run.efficiency == 0.5


def test_tokens_need_a_profile_that_knows_its_tokens():
    with pytest.raises(sm.InvalidParameterError,
                       match=r"runs\[0\]\.tokens_per_second_per_gpu.*'resnet50'.*"
                             r"run 'r50'.*iteration_time"):
        _one(tokens_per_second_per_gpu=1000, label="r50")
    with pytest.raises(sm.InvalidParameterError, match="one of the two"):
        _one(model="llama-2-7b", tokens_per_second_per_gpu=1000, iteration_time=4.0)


def test_compute_known_and_runs_far_below_the_compute():
    llm = dict(BASE, model="llama-2-7b", n=64)
    run = load_runs([dict(llm, tokens_per_second_per_gpu=3000)])[0]
    assert run.compute_known is False and run.efficiency == pytest.approx(
        sm.workloads.PUBLISHED_LLM_EFFICIENCY)
    run = load_runs([dict(llm, iteration_time=2.0, single_worker_time=1.8)])[0]
    assert run.compute_known is True  # the measured time is the truth
    assert run.profile.iteration_time == pytest.approx(1.8)
    assert _one(scaling_factor=0.5).compute_known is True and _one(
        scaling_factor=0.5).efficiency is None
    # FLOP-derived: faster than the published efficiency is allowed (fitted), faster than
    # 100 % of the GPU's peak is not
    p = sm.load_profile("llama-2-7b")
    compute = p.forward_time + p.backward_time
    load_runs([dict(llm, iteration_time=compute * 0.6)])
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.iteration_time.*peak"):
        load_runs([dict(llm, iteration_time=compute * 0.3)])
    with pytest.raises(sm.InvalidParameterError,
                       match=r"runs\[0\]\.tokens_per_second_per_gpu.*peak"):
        load_runs([dict(llm, tokens_per_second_per_gpu=4096 / (compute * 0.3))])
    # a measured profile: no faster than its own compute (unchanged)
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.iteration_time"):
        _one(iteration_time=0.01)


# --------------------------------------------------------------------------- absurd values


@pytest.mark.parametrize("kw, field", [
    ({"n": 16.5, "scaling_factor": 0.5}, "n"),
    ({"n": "16.5", "scaling_factor": 0.5}, "n"),
    ({"n": "16.0", "scaling_factor": 0.5}, "n"),
    ({"n": 16.0, "scaling_factor": 0.5}, "n"),
    ({"n": "1e1", "scaling_factor": 0.5}, "n"),
    ({"iteration_time": 1e300}, "iteration_time"),
    ({"iteration_time": 1e-300}, "iteration_time"),
    ({"iteration_time": 0.2, "compute_time": 1e300}, "compute_time"),
    ({"iteration_time": 0.2, "single_worker_time": 1e300}, "single_worker_time"),
    ({"iteration_time": "1e400"}, "iteration_time"),
    ({"scaling_factor": 1e-300}, "scaling_factor"),
    ({"scaling_factor": 0.5, "uncertainty": 5}, "uncertainty"),
    ({"scaling_factor": 0.5, "bw": 10}, "bw"),
    ({"scaling_factor": 0.5, "bw": 1e300}, "bw"),
    ({"model": "llama-2-7b", "tokens_per_second_per_gpu": 1e-300}, "tokens_per_second_per_gpu"),
])
def test_absurd_numbers_name_the_field_and_value(kw, field):
    with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError),
                       match=rf"runs\[0\]\.{field}="):
        _one(**kw)


def test_times_up_to_a_day_are_accepted():
    assert _one(iteration_time=MAX_RUN_TIME, single_worker_time=MAX_RUN_TIME / 2).measured_sf \
        == pytest.approx(0.5)


# --------------------------------------------------------------------------- CSV


def _csv(path, text, encoding="utf-8"):
    path.write_text(text, encoding=encoding)
    return path


def test_csv_with_a_byte_order_mark_and_new_keys(tmp_path):
    path = _csv(tmp_path / "runs.csv",
                "\ufeffmodel,n,bw,scaling_factor,sharding,grad_accum,wrapped,bucket_cap_mb\n"
                "resnet50,16,10Gbps,0.5,fsdp,2,false,0\n"
                "resnet50,1,10Gbps,1.0,,,true,\n")
    a, b = load_runs(path)
    assert (a.n, a.sharding, a.grad_accum, a.wrapped, a.bucket_cap_mb) == (16, "zero3", 2,
                                                                           False, 0.0)
    assert (b.sharding, b.grad_accum, b.wrapped, b.bucket_cap_mb) == ("none", None, True, None)


def test_csv_row_with_more_cells_than_the_header(tmp_path):
    path = _csv(tmp_path / "runs.csv", "model,n,bw,scaling_factor\n"
                                       "resnet50,16,10Gbps,0.5\n"
                                       "resnet50,32,10Gbps,0.5,0.9\n")
    with pytest.raises(sm.ProfileFormatError, match=r"^run list .*row 3.*runs\[1\] has 5 cells"):
        load_runs(path)
    # trailing empty cells (a spreadsheet's) drop nothing
    path = _csv(tmp_path / "ok.csv", "model,n,bw,scaling_factor\nresnet50,16,10Gbps,0.5,,\n")
    assert load_runs(path)[0].scaling_factor == 0.5


def test_csv_duplicate_column(tmp_path):
    path = _csv(tmp_path / "runs.csv", "model,n,bw,n,scaling_factor\nresnet50,16,1e10,8,0.5\n")
    with pytest.raises(sm.ProfileFormatError, match="^run list .*'n' appears twice"):
        load_runs(path)


def test_csv_n_is_not_truncated(tmp_path):
    path = _csv(tmp_path / "runs.csv", "model,n,bw,scaling_factor\nresnet50,16.5,1e10,0.5\n")
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.n='16\.5'"):
        load_runs(path)


# --------------------------------------------------------------------------- confined paths


@pytest.fixture
def layout(tmp_path):
    """runs/ with a profile inside, a profile outside, a link out."""
    inside = tmp_path / "runs"
    inside.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    prof = sm.load_profile("resnet50")
    sm.save_profile(prof, inside / "mine.json")
    sm.save_profile(prof, outside / "theirs.json")
    (inside / "link.json").symlink_to(outside / "theirs.json")
    return inside, outside


def _runs_csv(folder, model):
    return _csv(folder / "runs.csv", f"model,n,bw,scaling_factor\n{model},16,1e10,0.5\n")


def test_a_profile_next_to_the_csv_is_read(layout):
    inside, _ = layout
    assert load_runs(_runs_csv(inside, "mine.json"))[0].profile.name == "resnet50"
    assert load_runs(_runs_csv(inside, "./mine.json"))[0].n == 16
    assert load_runs(_runs_csv(inside, "resnet50"))[0].profile is sm.load_profile("resnet50")


@pytest.mark.parametrize("cell", ["../elsewhere/theirs.json", "link.json", "{outside}",
                                  "/etc/passwd", "../../../../../../etc/passwd"])
def test_a_path_leaving_the_csv_folder_is_refused(layout, cell):
    inside, outside = layout
    cell = cell.format(outside=outside / "theirs.json")
    with pytest.raises(sm.InvalidParameterError,
                       match=rf"runs\[0\]\.model='{re.escape(cell[:40])}.*outside"):
        load_runs(_runs_csv(inside, cell))


def test_allow_folder_lets_a_path_out(layout):
    inside, outside = layout
    for cell in ("../elsewhere/theirs.json", "link.json", str(outside / "theirs.json")):
        assert load_runs(_runs_csv(inside, cell), allow_folder=outside)[0].n == 16
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.model='/etc/passwd'"):
        load_runs(_runs_csv(inside, "/etc/passwd"), allow_folder=[outside])
    with pytest.raises(sm.InvalidParameterError, match="allow_folder"):
        load_runs(_runs_csv(inside, "mine.json"), allow_folder=inside / "mine.json")
    # a list of runs is confined only when a folder is given
    theirs = str(outside / "theirs.json")
    assert load_runs([dict(BASE, model=theirs, scaling_factor=0.5)])[0].n == 16
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[0\]\.model"):
        load_runs([dict(BASE, model=theirs, scaling_factor=0.5)], allow_folder=inside)


def test_a_name_that_is_no_profile_reads_no_file_elsewhere(layout, monkeypatch):
    inside, outside = layout
    monkeypatch.chdir(outside)  # theirs.json is here, but not next to the CSV
    with pytest.raises(sm.UnknownNameError, match=r"runs\[0\]\.model='theirs\.json'"):
        load_runs(_runs_csv(inside, "theirs.json"))


# --------------------------------------------------------------------------- CLI


def _fit_cli(capsys, path, *extra):
    code = main(["fit", str(path), "--fusion", "horovod", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_fit_reads_a_bom_csv_and_reports_noise(tmp_path, capsys):
    path = _csv(tmp_path / "runs.csv",
                "\ufefflabel,model,n,bw,iteration_time,single_worker_time\n"
                "quick,resnet50,16,100Gbps,0.0955,0.097\n"
                "big,resnet50,64,100Gbps,0.125,0.097\n")
    code, out, err = _fit_cli(capsys, path, "--fit", "sync_overhead")
    assert code in (0, None), err
    assert "quick" in out and "run 'quick'" in err and "noise" in err


@pytest.mark.parametrize("row, field", [
    ("resnet50,16.5,1e10,0.2", r"runs\[0\]\.n='16\.5'"),
    ("resnet50,16,1e10,1e300", r"runs\[0\]\.iteration_time='1e300'"),
    ("../x/prof.json,16,1e10,0.2", r"runs\[0\]\.model='\.\./x/prof\.json'"),
    ("resnet50,16,1e10,0.2,9", r"row 2"),
])
def test_cli_fit_bad_runs_are_one_line(tmp_path, capsys, row, field):
    path = _csv(tmp_path / "runs.csv", f"model,n,bw,iteration_time\n{row}\n")
    code, out, err = _fit_cli(capsys, path)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("scalemodel: error:") and err.count("\n") == 1
    assert re.search(field, err), err


def test_no_stray_warning_from_good_runs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_runs([dict(BASE, iteration_time=0.2, single_worker_time=0.1, sharding="zero1",
                        grad_accum=2, wrapped=False, bucket_cap_mb=25)])


@pytest.mark.parametrize("key", ["model", "n", "bw"])
def test_run_missing_a_required_field_says_so(key):
    run = {"model": "resnet50", "n": 16, "bw": 100e9, "iteration_time": 0.14}
    run[key] = None
    with pytest.raises(sm.InvalidParameterError, match=rf"runs\[0\]\.{key}=None .*is missing"):
        sm.fit_cluster([run], gpus_per_node=8)


def test_csv_short_row_is_named_as_missing(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("model,n,bw,iteration_time\nresnet50,1,100e9,0.13\nresnet50,16\n")
    with pytest.raises(sm.InvalidParameterError, match=r"runs\[1\]\.bw=None .*short row"):
        sm.fit_cluster(path, gpus_per_node=8)
