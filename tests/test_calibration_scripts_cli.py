"""The calibration scripts check their options before anything is measured (a typo found
after a GPU sweep costs the sweep), write through the library's atomic writer, and end
bad input and Ctrl-C in one line: a hostile sweep found tracebacks, a temporary file left
beside a folder given as --out, and a file named 'dir' written for --out dir/."""

import argparse
import json
import os

import pytest

torch = pytest.importorskip("torch")

from helpers_benchmarks import load_benchmark, load_calibration  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return load_calibration("llm_memory", "llm_memory_for_cli_test")


@pytest.fixture(scope="module")
def sweep():
    return load_calibration("block_sweep", "block_sweep_for_cli_test")


@pytest.mark.parametrize("argv, message", [
    (["--out", "{tmp}"], "is a folder"),
    (["--out", "{tmp}/new/"], "ends with a path separator"),
    (["--device", "nope"], "--device 'nope' is not a torch device"),
    (["--kernels", "tiny"], "--kernels: 'tiny' is not SHAPES:MICRO_BATCHES"),
    (["--fsdp", "tiny:0"], "--fsdp: '0' must list integers >= 1"),
])
def test_block_sweep_refuses_before_measuring(sweep, tmp_path, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    base = ["--out", str(tmp_path / "x.json"), "--shapes", "tiny", "--device", "cpu"]
    with pytest.raises(SystemExit) as err:
        sweep.main(base + argv)
    assert message in str(err.value) and err.value.code == 2
    assert os.listdir(tmp_path) == []  # nothing measured, nothing written, no .tmp


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_a_cuda_device_without_cuda_is_one_line(lm, capsys):
    with pytest.raises(SystemExit) as err:
        lm.run_cli(lambda: lm.check_device("cuda"), "llm_memory", "-")
    assert err.value.code == 2
    line = capsys.readouterr().err
    assert line.startswith("llm_memory: error: --device 'cuda': this torch (")
    assert line.count("\n") == 1


def test_run_cli_statuses(lm, capsys):
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as err:
        lm.run_cli(interrupted, "llm_memory", "the modes measured so far are in --out")
    assert err.value.code == 130
    assert capsys.readouterr().err == ("llm_memory: interrupted; the modes measured so far "
                                       "are in --out\n")
    with pytest.raises(SystemExit) as err:
        lm.run_cli(lambda: lm.load_config("nope", None, None), "llm_memory", "-")
    assert err.value.code == 2 and "llm_memory: error: " in capsys.readouterr().err
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 1"):
        lm.positive_int("-1")


@pytest.mark.parametrize("spec, says", [
    ("nope", "unknown name"), ("{bad", "Expecting property name"),
    ('{"hidden": 5}', "missing 4 required"), ('{"n_layer": 2}', "not a transformer"),
])
def test_llm_memory_names_its_config_option(lm, tmp_path, capsys, spec, says):
    with pytest.raises(SystemExit) as err:  # was model='nope', or a JSON/TypeError traceback
        lm.run_cli(lambda: lm.main(["--config", spec, "--out", str(tmp_path / "m.json"),
                                    "--device", "cpu"]), "llm_memory", "-")
    line = capsys.readouterr().err
    assert err.value.code == 2 and line.startswith(f"llm_memory: error: --config {spec!r}: ")
    assert says in line and "a Hugging Face config.json" in line
    assert os.listdir(tmp_path) == []


def test_llm_memory_writes_whole_files_with_the_umask_mode(lm, tmp_path):
    out = tmp_path / "deeper" / "m.json"
    lm._write_atomic(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # mkstemp's 0600 before
    assert sorted(os.listdir(out.parent)) == ["m.json"]
    with pytest.raises(IsADirectoryError):
        lm._write_atomic(f"{tmp_path}/dir/", {"a": 1})
    assert not (tmp_path / "dir").exists()


def test_host_offload_bench_options(tmp_path):
    bench = load_calibration("host_offload_bench", "host_offload_bench_for_cli_test")
    for argv in (["--adam-params", "nan"], ["--adam-params", "-5"], ["--repeats", "0"],
                 ["--threads", "0"], ["--sizes-mib", "0,x"], ["--adam-params", "10"],
                 ["--host-sharing", "0"], ["--host-sharing", ","], ["--host-sharing", "x"],
                 ["--sharing-params", "0"]):
        with pytest.raises(SystemExit) as err:
            bench.main(["--out", str(tmp_path / "h.json"), *argv])
        assert err.value.code == 2
    for out in (str(tmp_path), str(tmp_path / "dir") + "/"):
        with pytest.raises(SystemExit) as err:
            bench.main(["--out", out])
        assert err.value.code == 2
    assert os.listdir(tmp_path) == []


def test_host_offload_bench_steps_processes_at_once(tmp_path):
    """--host-sharing: K real processes step their own AdamW at once (on this machine's
    CPU; the recorded run is calibration/results/h100/host_offload.json)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "calibration" / "host_offload_bench.py"
    out = tmp_path / "h.json"
    subprocess.run([sys.executable, str(script), "--out", str(out), "--adam-params", "6400",
                    "--repeats", "6", "--host-sharing", "1,2", "--sharing-params", "6400"],
                   check=True, timeout=300, capture_output=True)
    rows = json.loads(out.read_text())["host_sharing"]
    assert [r["processes"] for r in rows] == [1, 2]
    for r in rows:
        assert len(r["step_seconds"]) == r["processes"]
        assert all(t > 0 for t in r["step_seconds"])
        assert r["host_params_per_s"] == pytest.approx(
            sum(r["params_each"] / t for t in r["step_seconds"]))


def test_host_sharing_ctrl_c_is_one_line_and_ends_every_process(tmp_path):
    """A Ctrl-C reaches the whole process group: the processes stepping at once printed
    a traceback each; the children now ignore it and the parent ends them."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "calibration" / "host_offload_bench.py"
    proc = subprocess.Popen(
        [sys.executable, "-u", str(script), "--out", str(tmp_path / "h.json"),
         "--adam-params", "6400", "--repeats", "3", "--host-sharing", "2,2,2,2",
         "--sharing-params", "3e7"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    lines = []
    for line in proc.stdout:  # the sharing starts after the two AdamW lines
        lines.append(line)
        if "foreach" in line:
            break
    time.sleep(3)  # the children are up (or starting): either moment must be clean
    os.killpg(proc.pid, signal.SIGINT)
    out = "".join(lines) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, out
    assert "Traceback" not in out and out.strip().endswith("--out not written")
    assert not (tmp_path / "h.json").exists()


def test_host_sharing_ends_when_a_process_dies():
    """A process that dies ends the measurement with an error (the others were left
    waiting at the barrier, and the script for ten minutes on its queue)."""
    import multiprocessing as mp
    import sys

    bench = load_calibration("host_offload_bench", "host_offload_bench_for_death_test")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=sys.exit, args=(3,))]
    procs[0].start()
    with pytest.raises(RuntimeError, match="exit code 3"):
        bench._collect(ctx.Queue(), procs, limit=60)
    procs[0].join()


def test_emulated_cluster_checks_every_option_before_the_namespaces(tmp_path):
    emu = load_calibration("emulated_cluster", "emulated_cluster_for_cli_test")
    (tmp_path / "file").write_text("x")
    for argv, message in ((["--rates", "x"], "--rates: 'x' is not a number"),
                          (["--rates=-5,nan"], "--rates: '-5' must be a rate > 0"),
                          (["--hosts", "0"], "--hosts: 0 must be from 1 to 200"),
                          (["--calibrate-rate", "-1"], "--calibrate-rate"),
                          (["--iterations", "0"], "--iterations: 0 must be >= 1"),
                          (["--timeout", "nan"], "--timeout: nan must be a time > 0"),
                          (["--out", str(tmp_path / "file")], "exists and is not a folder")):
        with pytest.raises(ValueError, match=message):
            emu.check_options(emu.arguments(argv))
    emu.check_options(emu.arguments([]))  # the defaults pass


def test_grace_data_that_is_no_csv(tmp_path):
    vc = load_benchmark("validate_compression", "validate_compression_for_cli_test")
    assert vc.data_problem(tmp_path / "none.csv") == "no such file"
    assert vc.data_problem(tmp_path) == "is not a regular file"
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="not a GRACE CSV .*no column compressor"):
        vc.read_configs(bad)


def test_codec_bench_checks_before_measuring(tmp_path, capsys):
    from scalemodel.calibrate.codec_bench import main

    for argv, message in ((["--out", str(tmp_path)], "is a folder"),
                          (["--out", "c.json", "--device", "nope"], "is not a torch device"),
                          (["--out", "c.json", "--repeats", "0"], "must be >= 1")):
        with pytest.raises(SystemExit) as err:
            main(argv)
        assert err.value.code == 2 and message in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
