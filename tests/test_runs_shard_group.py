"""A run's ``shard_group`` (issue 20 item 3 in fit_cluster, for issue 17 item 4's large-n
validation): InternLM's ``zero1=8`` runs are fitted under the sharding they used."""

import warnings

import pytest

import scalemodel as sm
from scalemodel.runs import load_runs
from scalemodel.workloads import TransformerConfig, transformer_profile

CFG = TransformerConfig(layers=4, hidden=1024, heads=8, ffn=2816, vocab=32000, seq=2048,
                        micro_batch=2, dtype="bf16", name="small")
TOPO = dict(gpus_per_node=8, nics_per_node=4)


def _profile():
    return transformer_profile(CFG, "a100-80gb", efficiency=0.5)


def test_shard_group_is_kept_and_blank_means_none():
    runs = load_runs([dict(model="resnet50", n=16, bw=1e10, iteration_time=1.0,
                           sharding="zero1", shard_group="8"),
                      dict(model="resnet50", n=16, bw=1e10, iteration_time=1.0,
                           sharding="zero1", shard_group="")])
    assert runs[0].shard_group == 8 and runs[0].sharding == "zero1"
    assert runs[1].shard_group is None


@pytest.mark.parametrize("kw, match", [
    (dict(sharding="none", shard_group=8), r"runs\[0\]\.shard_group"),
    (dict(sharding="hybrid_shard", shard_group=8), r"runs\[0\]\.shard_group"),
    (dict(sharding="zero1", shard_group=3), r"runs\[0\]\.shard_group.*divide"),
    (dict(sharding="zero1", shard_group=1), r"runs\[0\]\.shard_group"),
    (dict(sharding="zero1", shard_group=8.5), r"runs\[0\]\.shard_group"),
])
def test_bad_shard_group_names_the_run(kw, match):
    with pytest.raises(sm.ScalemodelError, match=match):
        load_runs([dict(model="resnet50", n=16, bw=1e10, iteration_time=1.0, **kw)])


def test_fit_sees_the_shard_group():
    """Runs generated with shard_group=8 on a slow network: fitted with the group, the
    known efficiency is recovered; the same runs read as one group of all n are not the
    same problem (the fitted efficiency differs)."""
    prof = _profile()
    bw = 1e9
    runs = []
    for n in (16, 64):
        it = sm.iteration_time(prof, n, bw, sharding="zero1", shard_group=8, fusion="ddp",
                               algorithm="ring", **TOPO)
        runs.append(dict(model=transformer_profile(CFG, "a100-80gb"), n=n, bw=bw,
                         sharding="zero1", shard_group=8, iteration_time=float(it.total),
                         uncertainty=0.001))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(runs, fusion="ddp", fit=["efficiency"], **TOPO)
        flat = sm.fit_cluster([{k: v for k, v in r.items() if k != "shard_group"}
                               for r in runs], fusion="ddp", fit=["efficiency"], **TOPO)
    eff = fit.parameters["efficiency"]
    assert eff.value == pytest.approx(0.5, rel=0.02)  # communication-bound: weakly set
    assert eff.interval[0] <= 0.5 <= eff.interval[1]
    assert abs(flat.cluster.extra["efficiency"]["value"] - 0.5) > 0.1
