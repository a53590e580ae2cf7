"""What a unit of ``bucket_overhead`` is, for the fit's prior (issue 17, items 2-3).

Under DDP the cluster's ``bucket_overhead`` is the framework's work per gradient bucket
(prior scale 0.1 ms); when every run gathers its parameters per wrapped unit (ZeRO-3,
FSDP FULL_SHARD, hybrid sharding) it is the wrapper's hooks per unit and micro-batch
(:data:`~scalemodel.fit_priors.UNIT_PRIORS`, scale 10 ms). Runs generated with a known
per-unit cost get it back; runs generated with a slow network get the ceiling once a run
tells the two apart (one on a single node, where the network costs nothing and the hooks
still run).
"""

import warnings

import pytest

import scalemodel as sm
from scalemodel.efficiency import profile_efficiency
import scalemodel.fit_problem as fit_problem
from scalemodel.fit_priors import PRIORS, UNIT_PRIORS
from scalemodel.fit_problem import _Problem
from scalemodel.fitting import load_runs

TOPO = sm.Topology(gpus_per_node=8, nics_per_node=1)
P = {"source": "test"}
SETTINGS = dict(algorithm="ring", fusion="ddp", ps_servers=None)


def _profile(micro_batch):
    cfg = sm.TransformerConfig(layers=2, hidden=2048, heads=16, ffn=8192, vocab=32000,
                               seq=1024, micro_batch=micro_batch, dtype="bf16", name="gpt")
    return sm.transformer_profile(cfg, "h100-sxm", efficiency=0.4, name=f"gpt-mb{micro_batch}")


def _run(truth, micro_batch, n, bw=100e9):
    p = _profile(micro_batch)
    t = sm.iteration_time(p, n, bw, sharding="zero3", fusion="module", cluster=truth).total
    return dict(model=p, n=n, bw=bw, sharding="zero3", fusion="module", iteration_time=t,
                uncertainty=0.02, label=f"micro-batch {micro_batch} on {n}")


def _fit(runs, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sm.CalibrationWarning)
        return sm.fit_cluster(runs, gpus_per_node=8, nics_per_node=1, fusion="module",
                              network="nccl-ib", **kw)


def _prior(shardings):
    runs = load_runs([{"model": "gpt2", "n": 16, "bw": 100e9, "scaling_factor": 0.8,
                       "sharding": s} for s in shardings])
    return _Problem(runs, sm.ClusterProfile(provenance=P), SETTINGS, {}).prior(
        "bucket_overhead")


@pytest.mark.parametrize("shardings, want", [
    (["zero3"], UNIT_PRIORS["bucket_overhead"]),
    (["full_shard", "fsdp", "hybrid_shard"], UNIT_PRIORS["bucket_overhead"]),
    (["none"], PRIORS["bucket_overhead"]),
    (["zero1", "zero2"], PRIORS["bucket_overhead"]),  # gradient buckets, as DDP
    (["zero3", "none"], PRIORS["bucket_overhead"]),  # one value for both: DDP's prior
])
def test_the_prior_follows_what_a_unit_is(shardings, want):
    assert _prior(shardings) == want


def test_the_unit_prior_is_wider_than_the_bucket_prior():
    unit, bucket = UNIT_PRIORS["bucket_overhead"], PRIORS["bucket_overhead"]
    assert unit.scale >= 50 * bucket.scale and unit.upper > bucket.upper
    assert "pytorch/pytorch#96958" in unit.source and "DeepSpeed#6649" in unit.source


@pytest.mark.slow
def test_a_per_unit_cost_is_recovered_and_the_bucket_prior_would_miss_it(monkeypatch):
    # two micro-batch sizes at one worker count and line rate (as ZeRO++'s 1K/2K pair):
    # a fixed time per micro-batch, which a unit cost and a slow network both give
    truth = sm.ClusterProfile(topology=TOPO, bucket_overhead=5e-3, provenance=P)
    runs = [_run(truth, 1, 64), _run(truth, 4, 64)]
    fit = _fit(runs)
    # a FLOP-derived profile: its efficiency is fitted with the cluster terms (at the truth's)
    assert fit.free == ("bucket_overhead", "efficiency")
    assert fit.parameters["bucket_overhead"].value == pytest.approx(5e-3, rel=0.01)
    assert fit.parameters["efficiency"].value == pytest.approx(
        profile_efficiency(runs[0]["model"]), rel=0.01)
    assert "pytorch/pytorch#96958" in fit.parameters["bucket_overhead"].source
    # with DDP's per-bucket prior (0.1 ms) the same runs get a ceiling instead
    monkeypatch.setattr(fit_problem, "UNIT_PRIORS", {})
    ddp = _fit(runs)
    assert "bucket_overhead" not in ddp.free and "ceiling" in ddp.free


@pytest.mark.slow
def test_a_slow_network_is_told_apart_by_a_single_node_run():
    truth = sm.ClusterProfile(topology=TOPO, ceiling=20e9, provenance=P)
    pair = [_run(truth, 1, 64), _run(truth, 4, 64)]
    # the pair alone: a ceiling at a fifth of InfiniBand's line rate ranks below the unit
    # cost that fits it as well, and stays an alternative
    fit = _fit(pair, max_free=2)
    assert fit.free == ("bucket_overhead", "efficiency")
    assert ["ceiling", "efficiency"] in [a["free"] for a in fit.alternatives]
    # one node (NVLink only): no network for a ceiling to slow, the hooks still run
    fit = _fit(pair + [_run(truth, 4, 8)], max_free=2)
    assert fit.free == ("ceiling", "efficiency")
    assert fit.parameters["ceiling"].value == pytest.approx(20e9, rel=0.01)
