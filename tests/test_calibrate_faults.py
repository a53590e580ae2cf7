"""Calibration under faults, for real: gloo ranks on the CPU that really die, real signals.

Every surviving rank must say what happened in one line (no traceback), and a run that
does not finish must leave no file: neither an output nor a ``.*.tmp``. Ranks are plain
processes (the environment torchrun would give them) or torchrun itself, which stops
every rank with SIGTERM when one fails.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scalemodel as sm

torch = pytest.importorskip("torch", reason="calibration needs torch: pip install "
                            "'scalemodel[calibrate]' torch==2.13.0")

from helpers_faults import DEATH  # noqa: E402
from scalemodel.calibrate.__main__ import main as calibrate_main  # noqa: E402

slow = pytest.mark.slow  # subprocesses that import torch, train or start ranks

TESTS = Path(__file__).resolve().parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
           PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
QUICK = ["--backend", "gloo", "--batch-size", "2", "--iterations", "3", "--warmup", "1",
         "--threads", "1", "--timeout", "60", "--quiet"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks(args, cwd, world=3):
    """Start ``python -m scalemodel.calibrate ARGS`` as ``world`` ranks; their results."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "scalemodel.calibrate", *args],
                              cwd=cwd, env=dict(ENV, RANK=str(r), WORLD_SIZE=str(world),
                                                LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                                                MASTER_PORT=str(port)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, o, e))
    return out


def our_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("scalemodel.calibrate")]


def assert_one_clear_line(rc, err, rank, world, *words):
    lines = our_lines(err)
    assert len(lines) == 1, err[-3000:]
    assert f"(rank {rank} of {world})" in lines[0], lines
    for w in words:
        assert w in lines[0], lines
    assert "Traceback" not in err, err[-3000:]


def files(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name != "__pycache__")


def inputs(tmp_path):
    """A workload profile and a cluster profile, for runs of the scaling step alone."""
    sm.save_profile(sm.load_profile("resnet50"), tmp_path / "profile.json")
    sm.save_cluster(sm.ClusterProfile(alpha=1e-5, provenance={"source": "test"}),
                    tmp_path / "transport.json")
    return ["--profile", "profile.json", "--cluster", "transport.json"]


@slow
@pytest.mark.parametrize("model, steps, where", [
    ("helpers_faults:dies_in_compute", "compute", "all_gather_object"),
    ("helpers_faults:dies_in_compute", "scaling", "DDP"),
    ("helpers_faults:dies_before_final_barrier", "scaling", "final barrier"),
])
def test_a_peer_dying_gives_every_survivor_one_line(tmp_path, model, steps, where):
    extra = [*inputs(tmp_path), "--no-fit-host-overhead", "--line-rate", "10Gbps"] \
        if steps == "scaling" else []
    before = files(tmp_path)
    results = ranks(["--model", model, "--steps", steps, "--out", "cluster.json",
                     *extra, *QUICK], tmp_path)
    assert results[1][0] == DEATH, results[1][2][-3000:]
    for rank in (0, 2):
        rc, out, err = results[rank]
        assert rc == 2, err[-3000:]
        assert_one_clear_line(rc, err, rank, 3, "error", where, "peer rank")
    assert files(tmp_path) == before  # nothing written, no temporary file


@slow
def test_a_peer_dying_under_torchrun(tmp_path):
    """torchrun stops the survivors with SIGTERM (or they see the dead peer first):
    either way one line each, and no file."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "scalemodel.calibrate", "--model", "helpers_faults:dies_in_compute",
           "--steps", "compute", *QUICK]
    out = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode != 0
    for rank in (0, 2):
        mine = [ln for ln in our_lines(out.stderr) if f"(rank {rank} of 3)" in ln]
        assert len(mine) == 1, out.stderr[-4000:]
        assert "peer rank" in mine[0] or "stopped by SIGTERM" in mine[0], mine
    assert not [ln for ln in out.stderr.splitlines() if "scalemodel/calibrate" in ln], \
        out.stderr[-4000:]  # no traceback through our code
    assert files(tmp_path) == []


@slow
def test_sigterm_to_torchrun_stops_every_rank_with_one_line(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "scalemodel.calibrate", "--backend", "gloo", "--model", "mlp",
           "--batch-size", "8", "--iterations", "3", "--warmup", "1", "--threads", "1",
           "--min-size", "4KiB", "--max-size", "64MiB", "--repeats", "20",
           "--out", "cluster.json"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline, seen = time.time() + 180, ""
    while time.time() < deadline:  # the compute step is done, the sweep under way
        line = proc.stderr.readline()
        seen += line
        if "all_reduce" in line or not line:
            break
    assert "all_reduce" in seen, seen[-3000:]
    proc.send_signal(signal.SIGTERM)  # to torchrun only, as a batch scheduler would
    _, err = proc.communicate(timeout=120)
    err = seen + err
    for rank in (0, 1):
        mine = [ln for ln in our_lines(err) if f"(rank {rank} of 2)" in ln]
        assert len(mine) == 1, err[-4000:]
        assert "stopped by SIGTERM" in mine[0] and "nothing was written" in mine[0], mine
    assert files(tmp_path) == []  # the compute step's profile was only staged


@slow
def test_sigterm_to_a_single_process_leaves_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "scalemodel.calibrate", "--model",
                             "helpers_faults:slow", "--batch-size", "64", "--iterations",
                             "200", "--threads", "1"], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "compute: ..." once the run is under way
    assert "compute" in line, line
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = our_lines(err)
    assert len(lines) == 1 and "stopped by SIGTERM" in lines[0], err[-3000:]
    assert "nothing was written" in lines[0] and "Traceback" not in err
    assert "torchrun" not in lines[0]  # no torchrun here to have stopped every rank
    assert files(tmp_path) == []


# ------------------------------------------------------------------ checked before measuring

def calibrate(args, cwd, prefix=(), timeout=120):
    return subprocess.run([*prefix, sys.executable, "-m", "scalemodel.calibrate", *args],
                          cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def assert_refused_before_measuring(out, *words):
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.count("\n") == 1, out.stderr  # one line: no progress, no traceback
    assert "compute:" not in out.stderr
    for w in words:
        assert w in out.stderr, out.stderr


def run_main(args, capsys, monkeypatch, tmp_path):
    """``python -m scalemodel.calibrate ARGS`` in this process (it stops before torch)."""
    import warnings
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.chdir(tmp_path)
    rc = calibrate_main(args)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("value", ["-5", "inf", "0", "nan", "1e300", "-inf"])
def test_bad_timeout_is_one_line_naming_it(tmp_path, capsys, monkeypatch, value):
    rc, err = run_main(["--model", "mlp", f"--timeout={value}"], capsys, monkeypatch,
                       tmp_path)
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("scalemodel.calibrate: error: --timeout=") and "(0, 1e+06]" in err
    assert files(tmp_path) == []


@pytest.mark.parametrize("args, words", [
    (["--batch-size", "0"], ["--batch-size=0"]),
    (["--iterations", "2"], ["--iterations=2"]),
    (["--warmup", "0"], ["--warmup=0", ">= 1"]),  # DDP needs a warm-up iteration
    (["--repeats", "-1"], ["--repeats=-1"]),
    (["--bucket-cap-mb", "nan"], ["--bucket-cap-mb=nan"]),
    (["--pin-cpu", "100000"], ["--pin-cpu=100000"]),
    (["--collectives", "all_gather"], ["--collectives", "all_reduce"]),
    (["--collectives", "all_reduce,bcast"], ["--collectives"]),
    (["--min-size", "1MiB", "--max-size", "4MiB"], ["--max-size", "at least 4"]),
    (["--min-size", "lots"], ["size='lots'"]),
    (["--algorithm", "rnig"], ["algorithm='rnig'"]),
    (["--steps", "compute,nope"], ["unknown step", "nope"]),
    (["--line-rate", "fast"], ["--line-rate='fast'"]),
    (["--model", "no_such_module:f"], ["cannot import"]),
    (["--model", "os:sep"], ["is not a function"]),
    (["--model", "mlp:"], ["names a module and a function"]),
    (["--profile", "missing.json", "--steps", "scaling", "--cluster", "c.json"],
     ["missing.json"]),
    (["--steps", "scaling", "--profile", "p.json", "--cluster", "c.json"],
     ["needs a line rate", "--line-rate", "c.json"]),
])
def test_bad_options_are_refused_before_measuring(tmp_path, capsys, monkeypatch, args,
                                                  words):
    argv = args if "--model" in args else ["--model", "mlp", *args]
    if "p.json" in args:  # valid inputs, so that the check under test is reached
        sm.save_profile(sm.load_profile("resnet50"), tmp_path / "p.json")
        sm.save_cluster(sm.ClusterProfile(provenance={"source": "test"}), tmp_path / "c.json")
    before = files(tmp_path)
    rc, err = run_main(argv, capsys, monkeypatch, tmp_path)
    assert rc == 2 and err.count("\n") == 1, err  # one line: no progress, no traceback
    assert err.startswith("scalemodel.calibrate: error: ")
    for w in words:
        assert w in err, err
    assert files(tmp_path) == before


def test_torchvision_name_without_torchvision_is_one_line(tmp_path, capsys, monkeypatch):
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or built for another torch
        pass
    else:
        pytest.skip("torchvision is installed and loads here")
    rc, err = run_main(["--model", "resnet50"], capsys, monkeypatch, tmp_path)
    assert rc == 2 and err.count("\n") == 1, err
    for w in ("model='resnet50'", "torchvision", "does not install it",
              "package.module:function"):
        assert w in err, err


def calibrate(args, cwd, prefix=(), timeout=120):
    return subprocess.run([*prefix, sys.executable, "-m", "scalemodel.calibrate", *args],
                          cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def assert_refused_before_measuring(out, *words):
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.count("\n") == 1, out.stderr  # one line: no progress, no traceback
    assert "compute:" not in out.stderr
    for w in words:
        assert w in out.stderr, out.stderr


@slow
def test_out_pointing_at_a_folder_or_under_a_file(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    out = calibrate(["--model", "mlp", "--out", "results"], tmp_path)
    assert_refused_before_measuring(out, "--out results is a folder", "results/cluster.json")
    out = calibrate(["--model", "mlp", "--out", "notes.txt/cluster.json"], tmp_path)
    assert_refused_before_measuring(out, "notes.txt is a file, not a folder")
    out = calibrate(["--model", "mlp", "--out", "c.json", "--profile-out", "c.json",
                     "--steps", "compute"], tmp_path)
    assert_refused_before_measuring(out, "--profile-out and --out name the same file")
    assert files(tmp_path) == ["notes.txt", "results"] and files(tmp_path / "results") == []


def read_only(folder):
    """A command prefix under which ``folder`` is read-only, or None."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return ()
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    script = ('mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"')
    return ("unshare", "-m", "sh", "-c", script, str(folder))


@slow
def test_out_in_a_read_only_folder_is_refused_before_measuring(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    prefix = read_only(ro)
    if prefix is None:
        pytest.skip("cannot make a read-only folder here (root without unshare -m)")
    try:
        out = calibrate(["--model", "mlp", "--out", str(ro / "cluster.json")], tmp_path,
                        prefix=prefix)
    finally:
        ro.chmod(0o755)
    assert_refused_before_measuring(out, "cannot write in folder", str(ro))
    assert files(ro) == []


@slow
def test_without_torchrun_it_says_what_it_ran_and_skipped(tmp_path):
    out = calibrate(["--model", "helpers_faults:slow", "--batch-size", "2", "--iterations",
                     "3", "--warmup", "1", "--threads", "1", "--quiet"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ran compute; wrote workload profile cluster.slow.json; skipped transport, " \
        "scaling: they need at least 2 ranks" in out.stderr
    assert files(tmp_path) == ["cluster.slow.json"]
    p = sm.load_profile(tmp_path / "cluster.slow.json")
    assert p.name == "slow" and p.provenance["model_spec"] == "helpers_faults:slow"
    # asking for a step that needs ranks is refused before measuring
    out = calibrate(["--model", "mlp", "--steps", "compute,transport"], tmp_path)
    assert_refused_before_measuring(out, "--steps transport needs at least 2 ranks",
                                    "torchrun")


@slow
def test_staged_outputs_appear_together(tmp_path):
    """Under torchrun, all three files appear at the end: none of them before the
    scaling step is done, and with the umask's permissions."""
    old = os.umask(0o022)
    try:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               "-m", "scalemodel.calibrate", "--model", "helpers_models:tiny",
               "--line-rate", "10Gbps", "--min-size", "16KiB", "--max-size", "256KiB",
               "--repeats", "3", "--no-fit-host-overhead", "--out", "out/cluster.json",
               *QUICK[:-1]]
        with subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as proc:
            early, err = None, ""
            for line in proc.stderr:
                err += line
                if "scaling: DDP" in line:  # the compute and transport steps are done
                    early = files(tmp_path)
            proc.wait(timeout=240)
    finally:
        os.umask(old)
    assert proc.returncode == 0, err[-3000:]
    assert early == []
    written = files(tmp_path / "out")
    assert written == ["cluster.json", "cluster.report.json", "cluster.tiny.json"]
    for name in written:
        assert (tmp_path / "out" / name).stat().st_mode & 0o777 == 0o644
    report = json.loads((tmp_path / "out" / "cluster.report.json").read_text())
    assert report["model"] == "helpers_models:tiny"
