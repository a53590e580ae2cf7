"""The data-parallel dimension of TP x PP jobs in the compression answers: the break-even
line rate (API and CLI ``breakeven --tp``) against compressed_scaling_factor's crossing, and
the plan's code snippet on the data-parallel process group."""

import json

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.cli import main

NODE = dict(gpus_per_node=8, nics_per_node=8)


@pytest.mark.parametrize("comp,mp", [
    ("powersgd:4", dict(tp=2)),
    ("topk:0.01", dict(tp=2)),
    ("powersgd:4", dict(tp=2, pp=4, microbatches=8)),
    ("powersgd:4", dict(tp=8, pp=2, microbatches=16)),
])
def test_breakeven_is_where_the_compressed_scaling_factor_crosses_the_uncompressed(comp, mp):
    n = 128
    bw = sm.breakeven_bandwidth("llama-2-7b", comp, n=n, **NODE, **mp)
    assert 0 < bw < np.inf

    def gain(rate):  # compressed over uncompressed scaling factor, minus 1
        kw = dict(n=n, bw=rate, **NODE, **mp)
        return (sm.compressed_scaling_factor("llama-2-7b", comp, **kw)
                / sm.compressed_scaling_factor("llama-2-7b", "none", **kw) - 1)

    assert gain(bw * 0.99) > 0 > gain(bw * 1.01)
    assert abs(gain(bw)) < 1e-6
    # it is not the plain data-parallel answer
    assert bw != pytest.approx(sm.breakeven_bandwidth("llama-2-7b", comp, n=n, **NODE),
                               rel=1e-3)


def test_breakeven_takes_an_array_of_job_sizes_and_details():
    ns = [64, 128]
    bws = sm.breakeven_bandwidth("llama-2-7b", "powersgd:4", n=ns, tp=2, **NODE)
    det = sm.breakeven_bandwidth("llama-2-7b", "powersgd:4", n=ns, tp=2, detail=True,
                                 **NODE)
    assert [d.n for d in det] == ns
    np.testing.assert_allclose([d.bw for d in det], bws, rtol=0)
    for nv, b in zip(ns, bws):
        assert b == sm.breakeven_bandwidth("llama-2-7b", "powersgd:4", n=nv, tp=2, **NODE)
    with pytest.raises(sm.InvalidParameterError, match="n=60"):
        sm.breakeven_bandwidth("llama-2-7b", "powersgd:4", n=60, tp=8, **NODE)


def test_cli_breakeven_takes_tp_pp(capsys):
    args = ["breakeven", "--model", "llama-2-7b", "--n", "64,128", "--gpus-per-node", "8",
            "--nics-per-node", "8", "--tp", "2", "--pp", "2", "--microbatches", "8",
            "--compressors", "powersgd:4", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    got = out["results"][0]["breakeven_bw"]
    want = sm.breakeven_bandwidth("llama-2-7b", "powersgd:4", n=np.array([64, 128]),
                                  tp=2, pp=2, microbatches=8, **NODE)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_snippet_puts_ddp_on_the_data_parallel_group():
    plan = sm.plan_compression("llama-2-7b", "100Gbps", n=64, tp=2, **NODE)
    assert all((r.tp, r.pp) == (2, 1) for r in plan.rows)
    rows = {r.compressor: r for r in plan.rows}
    for name in ("none", "bf16", "int8", "powersgd"):
        text = rows[name].snippet()
        assert "process_group=dp_group)" in text.split("model = DDP(")[1].splitlines()[0]
        assert "dp_group = " in text and "tp=2 x pp=1" in text
        assert "None" not in text  # no hook on the default (world) group
    assert "register_comm_hook(dp_group, default_hooks.bf16_compress_hook)" in \
        rows["bf16"].snippet()
    assert "PowerSGDState(\n    process_group=dp_group," in rows["powersgd"].snippet()
    assert "process_set=dp_set)" in rows["none"].snippet("horovod")
    plain = sm.plan_compression("llama-2-7b", "100Gbps", n=64, **NODE)
    prow = next(r for r in plain.rows if r.compressor == "powersgd")
    assert (prow.tp, prow.pp) == (1, 1)
    assert "dp_group" not in prow.snippet() and "process_group=None" in prow.snippet()
    assert "dp_set" not in prow.snippet("horovod")
