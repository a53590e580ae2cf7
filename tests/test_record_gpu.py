"""calibration/record_gpu.sh, run for real on the CPU with small models and sizes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import scalemodel as sm

pytest.importorskip("torch", reason="the recording script measures with torch")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_record_script_writes_profiles_and_codec_costs(tmp_path):
    out = tmp_path / "rec"
    env = dict(os.environ, PYTHON=sys.executable, MODELS="mlp=mlp:8 small=convnet:4",
               CODEC_SIZES="4096,16384", OMP_NUM_THREADS="1")
    run = subprocess.run(["bash", str(ROOT / "calibration" / "record_gpu.sh"), str(out),
                          "all", "codec"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr + (out / "compute.log").read_text()
    assert "torch" in (out / "environment.txt").read_text()
    for name in ("mlp-fp32", "mlp-bf16", "small-fp32", "small-bf16"):
        p = sm.load_profile(out / f"{name}.json")
        assert p.tensor_shapes is not None and p.provenance["autocast"] == (
            "bf16" if name.endswith("bf16") else None)
    for name in ("codec", "codec-repeat"):
        cl = sm.load_cluster(out / f"{name}.json")
        assert cl.extra["codec_sweep"]["sizes"] == [4096, 16384]
        assert set(cl.codec_costs) >= {"fp16", "powersgd"}
