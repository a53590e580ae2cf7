"""The emulated cluster, for real: network namespaces, veth, a bridge and tc rate limits.

Needs root, ``ip`` and ``tc`` (iproute2) and torch; skipped with the reason elsewhere.
The full experiment (several rates, two models, the accuracy table of the docs) is
``calibration/emulated_cluster.py``; this runs a short version end to end.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scalemodel as sm
from scalemodel.calibrate.netem import EmulatedCluster, netns_available

OK, WHY = netns_available()
pytestmark = [pytest.mark.skipif(not OK, reason=f"emulated cluster unavailable: {WHY}"),
              pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]

TAG = f"{os.getpid() % 1000:03d}"
"""Namespace names differ per test process (two test runs at once, as two checkouts'
CI on one machine, would otherwise take each other's namespaces)."""


def test_links_are_rate_limited():
    """A TCP transfer between two namespaces runs at the configured rate, not faster."""
    with EmulatedCluster(2, "100Mbit/s", prefix="smt" + TAG, subnet="10.79.0") as cl, \
            subprocess.Popen(cl.command(1, [sys.executable, "-c", (
                "import socket; s = socket.socket(); s.bind(('10.79.0.2', 5099));"
                "s.listen(1); c, _ = s.accept(); n = 0\nwhile True:\n d = c.recv(1 << 20)\n"
                " if not d: break\n n += len(d)\nprint(n)")]),
                stdout=subprocess.PIPE, text=True) as server:
        try:
            time.sleep(0.5)
            out = subprocess.run(cl.command(0, [sys.executable, "-c", (
                "import socket, time; s = socket.create_connection(('10.79.0.2', 5099));"
                "b = b'x' * (1 << 20); t = time.perf_counter()\nfor _ in range(8): "
                "s.sendall(b)\ns.close(); print(8 * 8 * (1 << 20) / (time.perf_counter() - t))"
                )]), capture_output=True, text=True, timeout=60)
            received = int(server.communicate(timeout=60)[0])
        finally:  # a failure above leaves no listener (nor its pipe) behind
            if server.poll() is None:
                server.kill()
                server.communicate()
    rate = float(out.stdout)
    assert received == 8 << 20
    assert 60e6 < rate < 130e6  # 100 Mbit/s shaped (the sender's view includes buffering)
    # torn down afterwards
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"smt{TAG}-h0" not in names


def test_calibrate_and_predict_on_the_emulated_cluster(tmp_path):
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, str(ROOT / "calibration" / "emulated_cluster.py"),
                          "--quick", "--models", "scalemodel.calibrate.models:mlp:64",
                          "--rates", "200,1000",
                          "--calibrate-rate", "1000", "--out", str(tmp_path),
                          "--prefix", "smq" + TAG, "--subnet", "10.78.0"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((tmp_path / "emulated.json").read_text())
    recs = {r["line_rate"]: r for r in data["records"]}
    assert set(recs) == {200e6, 1000e6}
    # physics: a 5x faster link scales better, measured and predicted
    assert recs[1000e6]["measured"] > recs[200e6]["measured"]
    assert recs[1000e6]["predicted"] > recs[200e6]["predicted"]
    for r in recs.values():
        assert 0 < r["measured"] <= 1.2 and 0 < r["predicted"] <= 1
    cal = sm.load_cluster(tmp_path / "cluster.json")
    assert 0.0 <= cal.overlap <= 1.0  # fitted from the calibration's DDP run
    assert cal.extra["overlap_fit"]["fitted_from"]["line_rate"] == 1000e6
    assert cal.extra.get("host_overhead", {"gamma": 0.0})["gamma"] >= 0.0
    assert "median |error|" in out.stdout
    # the model was given as package.module:function:BATCH; its profile is named after
    # the function
    assert sm.load_profile(tmp_path / "mlp.json").name == "mlp"
    assert {r["model_spec"] for r in recs.values()} == {"scalemodel.calibrate.models:mlp"}
