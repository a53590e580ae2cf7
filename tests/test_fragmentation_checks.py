"""The allocator's fragmentation in every memory check: min_compression, required_bandwidth,
plan_compression and the CLI take fragmentation= (a fraction or the allocator setting's
name) and report what memory() reports with it."""

import json
import warnings

import pytest

import scalemodel as sm
from scalemodel.exceptions import ModelWarning

KW = dict(n=8, sharding="zero3", gpus_per_node=8)


def _reserved(fragmentation):
    return float(sm.memory("llama-2-7b", 8, sharding="zero3",
                           fragmentation=fragmentation).per_gpu)


@pytest.mark.parametrize("fragmentation, fraction", [
    (0.0, 0.0), (0.15, 0.15), ("default_segments", 0.15), ("expandable_segments", 0.0),
    ("Default-Segments", 0.15), (0.3, 0.3)])
def test_the_solvers_check_memory_with_it(fragmentation, fraction):
    want = _reserved(fraction)
    mc = sm.min_compression("llama-2-7b", "100Gbps", fragmentation=fragmentation, **KW)
    rb = sm.required_bandwidth("llama-2-7b", fragmentation=fragmentation, **KW)
    plan = sm.plan_compression("llama-2-7b", "10Gbps", fragmentation=fragmentation,
                               compressors=["topk"], **KW)
    for res in (mc, rb, plan):
        assert res.memory_per_gpu == pytest.approx(want, rel=1e-12)
        assert res.settings["fragmentation"] == fraction
    if fraction:
        assert want == pytest.approx(_reserved(0.0) / (1 - fraction), rel=1e-12)


@pytest.mark.parametrize("bad, exc", [(1.0, sm.InvalidParameterError),
                                      (-0.1, sm.InvalidParameterError),
                                      ("defragmented", sm.UnknownNameError),
                                      (True, sm.InvalidParameterError)])
def test_a_bad_value_is_refused_before_any_work_by_name(bad, exc):
    for call in (lambda: sm.min_compression("resnet50", "10Gbps", fragmentation=bad),
                 lambda: sm.required_bandwidth("resnet50", fragmentation=bad),
                 lambda: sm.plan_compression("resnet50", "10Gbps", fragmentation=bad)):
        with pytest.raises(exc, match="fragmentation"):
            call()


def test_a_profile_without_memory_says_it_is_ignored():
    with pytest.warns(ModelWarning, match="fragmentation=0.15 is ignored for resnet50"):
        r = sm.min_compression("resnet50", "10Gbps", fragmentation=0.15)
    assert r.memory_per_gpu is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelWarning)
        sm.min_compression("resnet50", "10Gbps")  # the default says nothing


def test_the_cli_takes_it_and_refuses_a_bad_one(capsys):
    from scalemodel.cli import main

    args = ["min-compression", "--model", "llama-2-7b", "--bw", "100Gbps", "--n", "8",
            "--sharding", "zero3", "--gpus-per-node", "8", "--json"]
    assert main(args + ["--fragmentation", "default_segments"]) in (0, None)
    got = json.loads(capsys.readouterr().out)
    assert got["memory_per_gpu"] == pytest.approx(_reserved(0.15), rel=1e-12)
    assert got["settings"]["fragmentation"] == 0.15
    assert main(args + ["--fragmentation", "lots"]) == 2  # the CLI's usage error
    err = capsys.readouterr().err
    assert "--fragmentation='lots'" in err and "default_segments" in err
