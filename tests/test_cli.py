"""The command line, run as a user would (a subprocess of the installed entry point)."""

import json
import subprocess
import sys

import pytest


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "scalemodel", *args], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_min_compression_text():
    code, out, err = run("min-compression", "--model", "bert", "--bw", "10Gbps")
    assert code == 0, err
    assert "minimum compression ratio" in out and "what binds" in out


def test_min_compression_json_matches_api():
    import scalemodel as sm
    code, out, _ = run("min-compression", "--model", "resnet50", "--bw", "10Gbps",
                       "--fusion", "horovod", "--json")
    data = json.loads(out)
    res = sm.min_compression("resnet50", 10e9, fusion="horovod")
    assert data["ratio"] == pytest.approx(res.ratio)
    assert data["binding"] == res.binding


def test_scaling_table_json():
    code, out, _ = run("scaling", "--model", "vgg16", "--n", "16,64", "--bw", "1,100Gbps",
                       "--compression", "1,10", "--json")
    assert code == 0
    rows = json.loads(out)["results"]
    assert len(rows) == 8
    assert {r["bw"] for r in rows} == {1e9, 100e9}


def test_required_bandwidth_and_iteration_and_profiles():
    assert run("required-bandwidth", "--model", "gpt2", "--n", "32")[0] == 0
    code, out, _ = run("iteration", "--model", "resnet101", "--n", "64", "--bw", "25Gbps")
    assert code == 0 and "exposed_communication" in out
    code, out, _ = run("profiles", "--json")
    names = {p["name"] for p in json.loads(out)}
    assert {"resnet50", "resnet101", "vgg16", "bert-base", "bert-large", "gpt2"} <= names


def test_whatif_prints_table():
    code, out, _ = run("whatif")
    assert code == 0 and "resnet50" in out and "vgg16" in out


def test_errors_are_clear_and_exit_2():
    code, out, err = run("min-compression", "--model", "bret", "--bw", "10Gbps")
    assert code == 2 and "Did you mean 'bert-base'" in err and "Traceback" not in err
    code, _, err = run("min-compression", "--model", "bert", "--bw", "ten gigs")
    assert code == 2 and "bw='ten gigs'" in err
    code, _, err = run("scaling", "--model", "bert", "--n", "8", "--bw", "1Gbps",
                       "--utilization", "1.5")
    assert code == 2 and "--utilization='1.5'" in err


def test_output_into_a_closed_pipe_is_not_a_traceback():
    """``scalemodel profiles --json | head -c 10``: the reader stops early; no traceback."""
    fcntl = pytest.importorskip("fcntl")
    proc = subprocess.Popen([sys.executable, "-m", "scalemodel", "profiles", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:  # a one-page pipe (Linux F_SETPIPE_SZ), so the output cannot all fit in it
        fcntl.fcntl(proc.stdout.fileno(), 1031, 4096)
    except OSError:
        pytest.skip("cannot shrink the pipe here")
    proc.stdout.read(10)
    proc.stdout.close()  # like head: stop reading before the output is written
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err


def test_grad_accum_option(tmp_path):
    import scalemodel as sm
    node = dict(gpus_per_node=8)
    code, out, err = run("scaling", "--model", "llama-2-7b", "--n", "64", "--bw", "100Gbps",
                         "--gpus-per-node", "8", "--grad-accum", "8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "llama-2-7b"
    p = sm.load_profile("llama-2-7b")
    want = sm.scaling_factor(p.with_grad_accum(8), 64, 100e9, **node)
    assert data["results"][0]["scaling_factor"] == pytest.approx(want)
    # a profile file's own accumulation is kept, and --grad-accum 1 sets it back to 1
    path = sm.save_profile(p.with_grad_accum(4), tmp_path / "accum.json")
    for flag, k in (((), 4), (("--grad-accum", "1"), 1)):
        code, out, err = run("scaling", "--model", str(path), "--n", "64", "--bw",
                             "100Gbps", "--gpus-per-node", "8", "--json", *flag)
        assert code == 0, err
        got = json.loads(out)["results"][0]["scaling_factor"]
        assert got == pytest.approx(sm.scaling_factor(p.with_grad_accum(k), 64, 100e9,
                                                      **node))
    code, _, err = run("scaling", "--model", "bert", "--n", "8", "--bw", "10Gbps",
                       "--grad-accum", "0")
    assert code == 2 and "--grad-accum" in err


@pytest.mark.parametrize("gpu", [[], ["--gpu", "h100-sxm"]])
def test_a_job_whose_memory_is_not_modelled_is_answered_and_says_so(gpu):
    # selective (op-level, flash) checkpointing under tp: memory() refuses it, the time
    # questions answer it; every command says the memory was not checked, --gpu or not
    # (scaling and iteration left the memory out silently; with --gpu all four exited 2)
    job = ["--model", "llama-2-7b", "--n", "64", "--tp", "2",
           "--activation-checkpointing", "selective", *gpu]
    for cmd in (["scaling", "--bw", "100Gbps"], ["iteration", "--bw", "100Gbps"],
                ["min-compression", "--bw", "100Gbps"], ["required-bandwidth"]):
        code, out, err = run(*cmd, *job)
        assert code == 0, err
        assert "memory not checked on h100-sxm" in out or "not checked on h100-sxm" in out
    code, out, err = run("iteration", "--bw", "100Gbps", "--json", *job)
    assert code == 0, err
    assert "activation_checkpointing" in json.loads(out)["memory_not_checked"]
