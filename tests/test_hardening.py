"""Issue 19's catalogue of careless or hostile inputs: outputs written as a set, numbers
and tables a user gets wrong, messages that name the field and the value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel import profiles

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "traces"
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def leftovers(folder):
    """Temporary, backup or lock files left in ``folder``."""
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- a set of files

def test_a_folder_among_the_targets_writes_nothing(tmp_path):
    (tmp_path / "job.cluster.json").mkdir()
    (tmp_path / "job.report.json").write_text("old")
    files = {tmp_path / "job.workload.json": "w", tmp_path / "job.cluster.json": "c",
             tmp_path / "job.report.json": "r"}
    with pytest.raises(IsADirectoryError) as err:
        profiles.atomic_write_files(files)
    assert err.value.filename == str(tmp_path / "job.cluster.json")
    assert not (tmp_path / "job.workload.json").exists()
    assert (tmp_path / "job.report.json").read_text() == "old"
    assert leftovers(tmp_path) == []


def test_a_rename_failing_part_way_is_undone(tmp_path, monkeypatch):
    """The third rename fails: the first two are undone (the replaced file comes back,
    the new one goes), and nothing else stays behind."""
    (tmp_path / "b").write_text("old b")
    real = os.replace
    calls = []

    def failing(src, dst, *a, **k):
        if str(dst).endswith("/c") and str(src).endswith(".tmp"):
            calls.append(dst)
            raise OSError(28, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="No space"):
        profiles.atomic_write_files({tmp_path / "a": "new a", tmp_path / "b": "new b",
                                     tmp_path / "c": "new c"})
    assert calls
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
    assert (tmp_path / "b").read_text() == "old b"
    assert leftovers(tmp_path) == []


def test_none_removes_a_stale_file_of_the_set(tmp_path):
    (tmp_path / "x.workload.json").write_text("stale")
    profiles.atomic_write_files({tmp_path / "x.workload.json": None,
                                 tmp_path / "x.report.json": "r"})
    assert not (tmp_path / "x.workload.json").exists()
    assert (tmp_path / "x.report.json").read_text() == "r"


WRITER = textwrap.dedent("""
    import sys, time
    from scalemodel.profiles import atomic_write_files
    k, prefix, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    texts = {f"{prefix}.{part}.json": (k + "\\n") * (1 << 17)
             for part in ("workload", "cluster", "report")}
    time.sleep(max(0.0, start - time.time()))     # all start together
    for rounds in range(3):
        atomic_write_files(texts)
""")


@pytest.mark.parametrize("trial", range(3))
def test_concurrent_writers_never_leave_a_mixture(tmp_path, trial):
    """Eight processes write the same three names at the same moment (without the lock
    on the folder, one trial in a few leaves a mixture): the files left are all one
    writer's, every writer exits 0, and no temporary, backup or lock file remains."""
    import time
    prefix = tmp_path / "job"
    start = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(k), str(prefix), str(start)],
                              env=ENV, stderr=subprocess.PIPE, text=True) for k in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    texts = {(tmp_path / f"job.{part}.json").read_text()
             for part in ("workload", "cluster", "report")}
    assert len(texts) == 1
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_concurrent_from_trace_runs_leave_one_runs_files(tmp_path):
    """Eight ``from-trace --out P --name runK`` at once: all exit 0, and the three files
    left name the same run."""
    trace = DATA / "ddp_2ranks_allreduce_b.json.gz"
    procs = [subprocess.Popen([sys.executable, "-m", "scalemodel.calibrate", "from-trace",
                               str(trace), "--out", str(tmp_path / "P"), "--name", f"run{k}"],
                              env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for k in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    names = {json.loads((tmp_path / "P.workload.json").read_text())["name"],
             json.loads((tmp_path / "P.cluster.json").read_text())["name"]}
    report = json.loads((tmp_path / "P.report.json").read_text())
    names.add(report["profiles"]["workload"]["name"])
    assert len(names) == 1, names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["P.cluster.json", "P.report.json",
                                                          "P.workload.json"]


# --------------------------------------------------------------------------- --out errors

def run_cli(*args, module="scalemodel"):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)],
                          capture_output=True, text=True, env=ENV, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_fit_out_errors_name_out(tmp_path, where):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "c.json" if where == "under_a_file" else tmp_path
    runs = tmp_path / "runs.csv"
    runs.write_text("model,n,bw,scaling_factor\nbert,8,10Gbps,0.8\nbert,16,10Gbps,0.7\n")
    res = run_cli("fit", runs, "--out", out)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "Traceback" not in res.stderr
    assert ("is a file, not a folder" if where == "under_a_file" else "is a folder") in err[0]


def test_from_trace_out_errors_name_out_and_write_nothing(tmp_path):
    trace = DATA / "ddp_2ranks_allreduce_b.json.gz"
    res = run_cli("from-trace", trace, "--out", tmp_path, module="scalemodel.calibrate")
    assert res.returncode == 2 and "--out" in res.stderr and "folder" in res.stderr
    (tmp_path / "P.cluster.json").mkdir()
    res = run_cli("from-trace", trace, "--out", tmp_path / "P", module="scalemodel.calibrate")
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "P.cluster.json" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["P.cluster.json"]


# --------------------------------------------------------------------------- numbers

def test_a_5000_digit_integer_in_a_file_names_its_field(tmp_path):
    cluster = sm.ClusterProfile(alpha=1e-5, provenance={"source": "test"}).to_dict()
    text = json.dumps(cluster).replace(json.dumps(cluster["alpha"]), "1" * 5000, 1)
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(sm.ProfileFormatError, match=r"field 'alpha'.*alpha=inf"):
        sm.load_cluster(tmp_path / "c.json")
    res = run_cli("scaling", "--model", "bert", "--n", "8", "--bw", "10Gbps",
                  "--cluster", tmp_path / "c.json")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "alpha" in res.stderr
    profile = sm.load_profile("bert").to_dict()
    text = json.dumps(profile).replace(f'"batch_size": {profile["batch_size"]}',
                                       '"batch_size": ' + "9" * 5000)
    (tmp_path / "p.json").write_text(text)
    with pytest.raises(sm.ProfileFormatError, match="field 'batch_size'"):
        sm.load_profile(tmp_path / "p.json")


def test_cluster_tables_and_ceiling_name_the_field_and_value(tmp_path):
    import numpy as np
    data = sm.ClusterProfile(provenance={"source": "test"}).to_dict()
    data["utilization_table"] = {"line_rate": [1e9, 1e8], "utilization": [0.9, 0.5]}
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(sm.ProfileFormatError, match=rf"{tmp_path / 'c.json'}: field "
                                                    "'utilization_table'.*1e\\+08 bits/s"):
        sm.load_cluster(tmp_path / "c.json")
    with pytest.raises(sm.InvalidParameterError, match=r"ceiling=1e-300"):
        sm.ClusterProfile(ceiling=1e-300, provenance={"source": "test"})
    with pytest.raises(sm.ProfileFormatError,
                       match=r"utilization_table.*increasing.*1e\+08 bits/s after 1e\+09"):
        sm.ClusterProfile(table_line_rate=np.array([1e9, 1e8]),
                          table_utilization=np.array([0.9, 0.5]),
                          provenance={"source": "test"})


def test_load_profile_of_a_folder_names_it(tmp_path):
    with pytest.raises(sm.ProfileFormatError, match=rf"{tmp_path}.*is a folder"):
        sm.load_profile(tmp_path)
    with pytest.raises(sm.ProfileFormatError, match=rf"{tmp_path}.*is a folder"):
        sm.load_profile(str(tmp_path))


def test_counts_are_integers_in_the_cli_as_in_the_api(capsys):
    with pytest.raises(sm.ParameterTypeError, match="n=8.0 has type float"):
        sm.min_compression("bert", "10Gbps", n=8.0)
    from scalemodel.cli import main
    for text in ("8.0", "8e0"):
        assert main(["min-compression", "--model", "bert", "--bw", "10Gbps",
                     "--n", text]) == 2
        err = capsys.readouterr().err
        assert f"--n='{text}'" in err and "write 8" in err


def test_tensors_of_1e308_bytes_are_refused_naming_the_field():
    d = sm.load_profile("bert").to_dict()
    d["tensors"]["bytes"] = [1e308] * len(d["tensors"]["bytes"])
    with pytest.raises(sm.ProfileFormatError,
                       match=r"tensors\.bytes.*total at least 1e\+308 bytes.*1e\+18"):
        profiles.WorkloadProfile.from_dict(d, "x")
    d["tensors"]["bytes"] = [1e17] * len(d["tensors"]["bytes"])
    with pytest.raises(sm.ProfileFormatError,
                       match=r"tensors\.bytes.*total at least \d\.\d+e\+1\d bytes"):
        profiles.WorkloadProfile.from_dict(d, "x")


# --------------------------------------------------------------------------- messages

def test_plan_without_a_recommendation_prints_no_snippet(capsys):
    """``.best`` is None (no compression needed): the command line recommends nothing
    either, where it printed the settings of "none" as if recommended."""
    from scalemodel.cli import main
    assert sm.plan_compression("bert", "400Gbps").best is None
    assert main(["plan", "--model", "bert", "--bw", "400Gbps"]) == 0
    out = capsys.readouterr().out
    assert "no compression needed" in out
    assert "bucket_cap_mb" not in out and "register_comm_hook" not in out
    assert main(["plan", "--model", "bert", "--bw", "10Gbps"]) == 0
    assert "matrix_approximation_rank" in capsys.readouterr().out


def test_from_nccl_tests_takes_collective(tmp_path, capsys):
    """A log named ar.log without a binary name: the error names --collective, and
    --collective all_reduce reads it."""
    import importlib
    sample = (ROOT / "tests" / "data" / "nccl_tests_all_reduce_2x8_h100.txt").read_text()
    text = sample.replace("all_reduce_perf", "mystery_binary")
    (tmp_path / "ar.log").write_text(text)
    main = importlib.import_module("scalemodel.calibrate.__main__").main
    code = main(["from-nccl-tests", str(tmp_path / "ar.log"), "--out",
                 str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 2 and "--collective all_reduce" in err
    assert not (tmp_path / "c.json").exists()
    assert main(["from-nccl-tests", str(tmp_path / "ar.log"), "--collective", "all_reduce",
                 "--out", str(tmp_path / "c.json")]) == 0
    assert sm.load_cluster(tmp_path / "c.json").extra


def test_a_crashed_rank_is_one_line_with_what_to_do(tmp_path):
    """The emulated cluster's driver: a rank killed by SIGABRT (gloo's teardown abort) is
    said in one line naming the signal, its last words, the log with its whole output
    and its command, and what to do."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "emulated_cluster", ROOT / "calibration" / "emulated_cluster.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    err = ("[W socket.cpp:207] [c10d] The hostname of the client socket cannot be "
           "retrieved. err=-3\nterminate called without an active exception\n")
    line = mod.crash_line(1, -6, err, tmp_path, ["python", "-m", "scalemodel.calibrate"])
    assert "\n" not in line
    assert "rank 1 was killed by SIGABRT" in line and "terminate called" in line
    assert "What to do: rerun" in line and str(tmp_path / "rank1.stderr") in line
    log = (tmp_path / "rank1.stderr").read_text()
    assert log.startswith("$ python -m scalemodel.calibrate") and "terminate" in log
    assert "exited with status 2" in mod.crash_line(0, 2, "error: x\n", tmp_path)


def test_an_absurd_codec_cost_is_refused_by_name():
    # 1e300 s/byte used to give a scaling factor of 1e-309 as if computed
    with pytest.raises(sm.InvalidParameterError, match="codec_cost=1e"):
        sm.scaling_factor("resnet50", 8, 10e9, compression=2, codec_cost=1e300)
    with pytest.raises(sm.InvalidParameterError, match="codec_cost"):
        sm.min_compression("resnet50", 10e9, codec_cost=1e300)
    ok = sm.scaling_factor("resnet50", 8, 10e9, compression=2, codec_cost=1e-11)
    assert 0 < ok <= 1
