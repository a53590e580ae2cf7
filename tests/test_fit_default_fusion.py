"""fit_cluster's default fusion (None): DDP buckets for unsharded runs, and for sharded
runs the strategy's default wrapping, as every question takes it (a sharded fit without
``fusion=`` used to stop on "fusion='ddp' is invalid" although no fusion was given)."""

import warnings

import attrs
import pytest

import scalemodel as sm

TRUTH = sm.ClusterProfile(topology=sm.Topology(gpus_per_node=8, nics_per_node=4),
                          ceiling=80e9, bucket_overhead=2e-3,
                          provenance={"source": "test"})


def _runs(sharding, **kw):
    out = []
    for model, n, bw in (("bert", 16, 100e9), ("bert", 64, 25e9), ("gpt2", 32, 50e9)):
        sf = float(sm.scaling_factor(model, n, bw, sharding=sharding, cluster=TRUTH, **kw))
        out.append(dict(model=model, n=n, bw=bw, scaling_factor=sf, uncertainty=0.02,
                        sharding=sharding))
    return out


def _fit(runs, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.fit_cluster(runs, gpus_per_node=8, nics_per_node=4,
                              fit=["bucket_overhead"], **kw)


def test_sharded_runs_fit_under_the_default_wrapping():
    runs = _runs("zero3")  # generated under the default wrapping ("block": numbered blocks)
    fit = _fit(runs)
    assert "fusion" not in fit.cluster.fit_settings  # made again for each profile
    assert fit.cluster.fit_settings["sharding"] == "zero3"
    assert fit.cluster.bucket_overhead == pytest.approx(2e-3, rel=0.05)
    given = _fit(runs, fusion="block")
    assert given.cluster.fit_settings["fusion"] == "block"
    assert given.cluster.bucket_overhead == fit.cluster.bucket_overhead
    for model in ("bert", "gpt2"):
        assert sm.scaling_factor(model, 128, 50e9, cluster=fit.cluster) == \
            sm.scaling_factor(model, 128, 50e9, cluster=given.cluster)


def test_unsharded_runs_still_record_ddp():
    runs = _runs("none")
    fit = _fit(runs)
    assert fit.cluster.fit_settings["fusion"] == "ddp"
    given = _fit(runs, fusion="ddp")
    for f in attrs.fields(sm.ClusterProfile):  # the same fit, field by field
        assert getattr(fit.cluster, f.name) == getattr(given.cluster, f.name), f.name


def test_a_fusion_that_does_not_wrap_is_still_refused_naming_it():
    with pytest.raises(sm.InvalidParameterError, match="fusion='ddp'"):
        _fit(_runs("zero3"), fusion="ddp")
