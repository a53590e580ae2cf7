"""Calibration, for real: torch on the CPU, gloo, several processes on loopback.

Nothing here is mocked: the tests train real models, spawn real ranks with
``torch.distributed.run`` (torchrun) or plain processes, and make ranks die or stall.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import scalemodel as sm

torch = pytest.importorskip("torch", reason="calibration needs torch: pip install "
                            "'scalemodel[calibrate]' torch==2.13.0")

from scalemodel.calibrate.compute import measure_compute  # noqa: E402
from scalemodel.calibrate.models import convnet  # noqa: E402
from scalemodel.calibrate.transport import default_sizes, parse_size  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args, tmp_path, nproc=2, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "scalemodel.calibrate", "--backend", "gloo", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_measure_compute_records_every_gradient(tmp_path):
    m = measure_compute("convnet", batch_size=4, warmup=1, iterations=3, threads=1)
    p = m.profile
    net_params = 12  # 3 conv + 3 linear layers, weight and bias each
    assert p.tensor_bytes.size == net_params
    # every parameter's gradient is there, in bytes of fp32
    assert p.total_bytes == 4 * sum(t.numel() for t in
                                    convnet(1)[0].parameters())
    # backward order: the classifier's gradients are ready before the first conv's
    assert p.tensor_names[0].startswith("14.")  # the last Linear layer
    assert p.tensor_names[-1].startswith("0.")
    # shapes as torch stores them (PowerSGD reshapes with them): the first conv's weight
    assert p.tensor_shapes[-2] == (32, 3, 3, 3) and p.tensor_shapes[-1] == (32,)
    assert np.all(np.diff(p.tensor_ready) >= 0) and p.backward_time >= p.tensor_ready[-1]
    assert p.forward_time > 0 and p.update_time > 0
    assert m.forward.shape == (3,) and m.ready.shape == (3, net_params)
    assert p.provenance["model_spec"] == "convnet" and "spread" in p.provenance
    # the host's issue time (on the CPU the iteration itself) and the tensor count,
    # which scalemodel.framework's host-bound form takes
    assert 0 < p.provenance["host_issue_time"] <= 1.5 * p.provenance["spread"]["median"]
    assert p.provenance["gradient_tensors"] == net_params
    path = sm.save_profile(p, tmp_path / "convnet.json")
    again = sm.load_profile(path)
    np.testing.assert_allclose(again.tensor_ready, p.tensor_ready)
    assert again.provenance["host_issue_time"] == p.provenance["host_issue_time"]
    s = sm.scaling_factor(str(path), n=8, bw="10Gbps")
    assert 0 < s <= 1


def test_measured_reduction_is_a_table():
    from scalemodel.calibrate.compute import measure_reduction
    red = measure_reduction(sizes=[4096, 1 << 20, 8 << 20], repeats=3)
    t = red([4096, 1 << 20, 8 << 20])
    assert np.all(np.diff(t) >= 0) and t[-1] > 0


def test_model_specs_and_errors():
    from scalemodel.calibrate.models import load_model
    net, x, y, name = load_model("helpers_models:tiny", 3)
    assert name == "tiny" and x.shape[0] == 3
    with pytest.raises(sm.UnknownNameError, match="mlp"):
        load_model("no-such-model", 2)
    with pytest.raises(sm.InvalidParameterError, match="batch_size"):
        load_model("mlp", 0)
    with pytest.raises(sm.InvalidParameterError, match="cannot import"):
        load_model("no_such_module:f", 2)


def test_parameter_without_gradient_is_a_clear_error():
    with pytest.raises(sm.CalibrationError, match=r"2 parameter\(s\) received no gradient "
                       r"\(unused.weight, unused.bias\); set requires_grad=False"):
        measure_compute("helpers_models:with_unused", batch_size=2, warmup=0, iterations=3)


def test_sizes_parse():
    assert parse_size("4KiB") == 4096 and parse_size("1MB") == 10 ** 6
    assert default_sizes("4KiB", "256MiB").size == 17
    with pytest.raises(sm.InvalidParameterError, match="size"):
        parse_size("lots")
    with pytest.raises(sm.InvalidParameterError, match="max_size"):
        default_sizes("1MiB", "4KiB")


@pytest.mark.slow
def test_end_to_end_under_torchrun(tmp_path):
    """The one command, 2 gloo ranks: profile, cluster, report; all plug into the API."""
    out = torchrun(["--model", "mlp", "--batch-size", "16", "--out", "cluster.json",
                    "--line-rate", "10Gbps", "--min-size", "16KiB", "--max-size", "1MiB",
                    "--repeats", "3", "--warmup", "1", "--iterations", "3",
                    "--threads", "1"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "scaling check" in out.stdout and "predicted" in out.stdout
    assert "[scalemodel.calibrate]" in out.stderr  # progress shown
    cluster = sm.load_cluster(tmp_path / "cluster.json")
    assert cluster.alpha >= 0 and 0 < cluster.utilization <= 1
    fits = cluster.extra["collective_fits"]
    assert set(fits) == {"all_reduce", "all_gather", "send_recv"}
    profile = sm.load_profile(tmp_path / "cluster.mlp.json")
    assert profile.provenance["world_size"] == 2
    report = json.loads((tmp_path / "cluster.report.json").read_text())
    assert 0 < report["measured_scaling_factor"] <= 1.2
    assert 0 < report["predicted_scaling_factor"] <= 1
    lo, hi = report["predicted_interval"]
    assert lo <= report["predicted_scaling_factor"] <= hi
    # the compute slowdown from the paired backward spans, in the report and the cluster
    assert report["compute_slowdown"]["iterations"] == 3
    assert cluster.compute_slowdown == report["compute_slowdown"]["value"] >= 1
    assert [r["model"].split(" (")[0] for r in report["checks"]] == ["transport fit only",
                                                                       "fitted here"]
    assert len(report["ddp"]["backward"]) == len(report["ddp"]["local_backward"]) == 3
    # it plugs in directly
    s = sm.scaling_factor(str(tmp_path / "cluster.mlp.json"), n=64, bw="10Gbps",
                          cluster=str(tmp_path / "cluster.json"))
    assert 0 < s <= 1
    assert not list(tmp_path.glob("*.tmp*")) and not list(tmp_path.glob(".*"))


@pytest.mark.slow
def test_profile_recorded_for_another_model(tmp_path):
    p = measure_compute("convnet", batch_size=2, warmup=1, iterations=3, threads=1,
                        reduction=False).profile
    sm.save_profile(p, tmp_path / "convnet.json")
    out = subprocess.run([sys.executable, "-m", "scalemodel.calibrate", "--model", "mlp",
                          "--profile", str(tmp_path / "convnet.json"), "--steps", "scaling",
                          "--cluster", "x.json"], cwd=tmp_path, env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert "recorded for model 'convnet'" in out.stderr and "--model convnet" in out.stderr


def test_bad_steps_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "scalemodel.calibrate", "--steps", "nope"],
                         cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown step" in out.stderr


@pytest.mark.slow
def test_more_nccl_ranks_than_gpus_is_a_clear_error(tmp_path):
    """nccl needs one GPU per rank: more ranks on a node than GPUs fails with advice."""
    import torch
    env = dict(ENV, LOCAL_RANK=str(torch.cuda.device_count()))
    out = subprocess.run([sys.executable, "-m", "scalemodel.calibrate", "--backend", "nccl",
                          "--steps", "compute", "--model", "mlp"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "one GPU per rank" in out.stderr and "--backend gloo" in out.stderr
    assert not list(tmp_path.iterdir())


FAULTY_RANK = textwrap.dedent("""
    import datetime, os, sys, time
    import torch.distributed as dist
    from scalemodel.calibrate.transport import run_sweep
    from scalemodel.exceptions import CalibrationError
    mode = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    rank = dist.get_rank()
    if rank == 1:
        if mode == "die":
            os._exit(17)
        time.sleep(20)  # stall: never joins the collectives
        os._exit(0)
    try:
        run_sweep([65536, 131072], collectives=("all_reduce",), repeats=3,
                  progress=False, timeout=datetime.timedelta(seconds=3))
    except CalibrationError as exc:
        print("CalibrationError:", exc, flush=True)
        os._exit(3)
    os._exit(0)
""")


@pytest.mark.slow
@pytest.mark.parametrize("mode, words", [("die", "peer rank"), ("stall", "timed out")])
def test_dead_or_stuck_rank_is_a_clear_error(tmp_path, mode, words):
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY_RANK)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(script), mode], cwd=tmp_path,
                              env=dict(ENV, RANK=str(r), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    out0, err0 = procs[0].communicate(timeout=120)
    procs[1].kill()
    procs[1].communicate()
    assert procs[0].returncode == 3, err0[-2000:]
    assert "CalibrationError" in out0 and words in out0 and "all_reduce" in out0


@pytest.mark.slow
def test_interrupted_sweep_leaves_no_file(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "-m", "scalemodel.calibrate", "--backend", "gloo", "--steps", "transport",
           "--out", "cluster.json",
           "--min-size", "4KiB", "--max-size", "64MiB", "--repeats", "20", "--threads", "1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    seen = ""
    while time.time() < deadline:  # wait until the sweep is under way
        line = proc.stderr.readline()
        seen += line
        if "all_reduce" in line:
            break
    assert "all_reduce" in seen, seen[-2000:]
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert not (tmp_path / "cluster.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name != "__pycache__"] == []
