"""benchmarks/validate_transfer.py, Li et al. (VLDB 2020): Fig. 6 as transport data and
the BERT variant it implies, checked against direct computations from the figure."""

import math

import pytest

import scalemodel as sm
from helpers_benchmarks import load_benchmark


@pytest.fixture(scope="module")
def vt():
    return load_benchmark("validate_transfer", "validate_transfer_vldb")


@pytest.fixture(scope="module")
def nccl(vt):
    rows = vt.read_csv("pytorch_ddp_vldb2020_figs6_7_8_12.csv")
    frac, unc = vt.fig6_fractions(rows, "NCCL")
    t1 = {"resnet50": 0.0992, "bert": 0.218}  # Fig. 12, one GPU (read by hand)
    profiles = {"resnet50": vt.fig6_profile("resnet50", t1["resnet50"], frac, "resnet50"),
                vt.VLDB_BERT: vt.fig6_profile(vt.VLDB_BERT, t1["bert"], frac, "bert")}
    return vt, frac, unc, t1, profiles


def test_fig6_fractions_are_the_figure(nccl):
    _, frac, unc, _, _ = nccl
    # Fig. 6, NCCL, ResNet-50 (read by hand from the data file): 0.147 / 0.394 / 0.441 /
    # 0.018, total with overlap 0.621
    assert frac[("resnet50", "COMM")] == 0.441 and frac[("resnet50", "FWD")] == 0.147
    assert frac[("resnet50", "total_with_overlap")] == 0.621
    assert unc[("resnet50", "COMM")] == pytest.approx(0.006)


def test_reshaped_profile_has_the_figure_split(nccl):
    _, _, _, t1, profiles = nccl
    p = profiles["resnet50"]
    base = sm.load_profile("resnet50")
    assert p.iteration_time == pytest.approx(t1["resnet50"], rel=1e-12)
    parts = 0.147 + 0.394 + 0.018
    assert p.forward_time == pytest.approx(0.0992 * 0.147 / parts, rel=1e-12)
    assert p.backward_time == pytest.approx(0.0992 * 0.394 / parts, rel=1e-12)
    # the gradients keep their places inside the backward pass
    assert p.tensor_ready / p.backward_time == pytest.approx(
        base.tensor_ready / base.backward_time, rel=1e-12)


def test_fig6_ceiling_is_the_rings_bytes_over_the_bars_seconds(nccl):
    vt, frac, unc, _, profiles = nccl
    cluster, note = vt.vldb_fig6(frac, unc, "NCCL", profiles, "nccl-2.4")
    # direct: at 32 GPUs on 4 nodes NCCL 2.4 runs a ring for 25 MB buckets (its tree
    # threshold is ~4 MB there), each node's NIC carrying 2 (n-1)/n of the gradients
    n, grads = 32, sm.load_profile("resnet50").total_bytes
    comm = 0.441 / (0.147 + 0.394 + 0.018) * 0.0992
    direct = 2 * (n - 1) / n * grads * 8 / comm
    assert cluster.ceiling == pytest.approx(direct, rel=0.06)
    lo, hi = cluster.intervals["ceiling"]
    assert lo < cluster.ceiling < hi
    assert cluster.topology.gpus_per_node == 8
    assert "bert-base needs" in note[1]


def test_bert_variant_follows_fig6(nccl):
    """BERT's bar: its communication over ResNet-50's is a ratio of gradient bytes;
    bert-base (4.3x) is nearer to what Fig. 6 says than bert-large (13x)."""
    vt, frac, _, t1, _ = nccl

    def comm(model, t):
        f = [frac[(model, k)] for k in ("FWD", "BWD", "COMM", "OPT")]
        return f[2] / (f[0] + f[1] + f[3]) * t

    said = comm("bert", t1["bert"]) / comm("resnet50", t1["resnet50"])
    res = sm.load_profile("resnet50").total_bytes
    dist = {m: abs(math.log(sm.load_profile(m).total_bytes / res / said))
            for m in ("bert-base", "bert-large")}
    assert 2.0 < said < 3.0
    assert min(dist, key=dist.get) == vt.VLDB_BERT == "bert-base"
