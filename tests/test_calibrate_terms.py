"""The terms one calibration fills: compute slowdown, intra- and inter-node transport, and
the scaling check's errors; the fit's intervals on badly scaled points.

Fits are checked by generating data from known parameters (with the equations written
out here, not taken from the library) and recovering them; the two-node calibration runs
for real: two torchrun agents of two gloo ranks each on this machine's loopback.
"""

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import attrs
import numpy as np
import pytest
from scipy import stats

import scalemodel as sm
from scalemodel.calibrate.fit import (CollectiveFit, cluster_from_fits, fit_collective,
                                      intra_node_topology)
from scalemodel.calibrate.overhead import fit_host_effects, transport_only
from scalemodel.calibrate.scaling import DDPMeasurement, estimate_slowdown
from scalemodel.calibrate.uncertainty import corner_inputs, scaling_factor_interval
from scalemodel.topology import Topology

TESTS = Path(__file__).resolve().parent


def ring(n, alpha, bw, m):
    """Flat ring all-reduce of m bytes among n workers [s], written out."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * 8 * m / bw


def ring_topology(n, g, nics, alpha, bw, intra_alpha, m):
    """NCCL's flat ring over M = n/g nodes: 2(M-1) steps cross nodes, 2(n-M) stay inside;
    a node's NICs carry 2(n-1)/n 8m bits together [s]."""
    nodes = n // g
    return (2 * (n - nodes) * intra_alpha + 2 * (nodes - 1) * alpha
            + 2 * (n - 1) / n * 8 * m / (nics * bw))


def noisy(t, sigma=0.02, seed=0, reps=5):
    rng = np.random.default_rng(seed)
    return t[:, None] * rng.lognormal(0, sigma, (t.size, reps))


# ------------------------------------------------------------------ fit_collective intervals

def exact_alpha_half_width(fit):
    """The alpha interval's half width from the normal equations in exact arithmetic."""
    n, m, t = fit.n, fit.nbytes, fit.seconds
    a = [[Fraction(2 * (n - 1)) / Fraction(ti), Fraction(2 * (n - 1) * 8) * Fraction(mi)
          / (n * Fraction(ti))] for mi, ti in zip(m.tolist(), t.tolist())]
    s00 = sum(r[0] * r[0] for r in a)
    s01 = sum(r[0] * r[1] for r in a)
    s11 = sum(r[1] * r[1] for r in a)
    inv00 = s11 / (s00 * s11 - s01 * s01)  # (A^T A)^-1, entry (alpha, alpha)
    dof = m.size - 2
    s2 = Fraction(float(np.sum(fit.residuals ** 2))) / dof
    return float(stats.t.ppf(0.5 + fit.confidence / 2, dof)) * math.sqrt(s2 * inv00)


@pytest.mark.parametrize("alpha, bw, n", [(2e-5, 1e12, 8), (1e-5, 1e13, 8), (1e-6, 3e12, 16)])
def test_alpha_interval_survives_badly_scaled_points(alpha, bw, n):
    """Large messages only on a fast network: the latency column is 1e-8 of the
    bandwidth column. The pseudo-inverse of the unscaled normal matrix dropped the
    latency's direction (a zero-width interval); scaled columns keep it."""
    m = 2.0 ** np.arange(26, 31)
    t = ring(n, alpha, bw, m) * np.random.default_rng(0).lognormal(0, 0.02, m.size)
    fit = fit_collective(m, t, n=n, min_points=3)
    lo, hi = fit.intervals["alpha"]
    half = exact_alpha_half_width(fit)
    assert hi - lo > 0
    assert hi == pytest.approx(fit.alpha + half, rel=1e-6)
    assert lo == pytest.approx(max(0.0, fit.alpha - half), rel=1e-6, abs=1e-18)
    assert lo <= alpha <= hi


# ------------------------------------------------------------------ topology

G, NODES, NICS = 8, 2, 1
ALPHA, BW, INTRA_ALPHA, INTRA_BW = 15e-6, 80e9, 2e-6, 1.2e12
SIZES = 2.0 ** np.arange(12, 29)


def intra_fit(seed=1):
    return fit_collective(SIZES, noisy(ring(G, INTRA_ALPHA, INTRA_BW, SIZES), seed=seed),
                          n=G)


def test_intra_node_fit_is_the_topologys_link():
    fit = intra_fit()
    topo = intra_node_topology(fit, nics_per_node=2)
    assert topo.gpus_per_node == G and topo.nics_per_node == 2
    assert topo.intra_bw == fit.bandwidth == pytest.approx(INTRA_BW, rel=0.02)
    assert topo.intra_alpha == fit.alpha == pytest.approx(INTRA_ALPHA, rel=0.05)
    assert intra_node_topology(fit, gpus_per_node=16).gpus_per_node == 16
    with pytest.raises(sm.InvalidParameterError, match="gpus_per_node"):
        intra_node_topology(fit, gpus_per_node=4)
    gather = fit_collective(SIZES, SIZES * 8 / 1e11 + 1e-5, n=G, collective="all_gather")
    with pytest.raises(sm.InvalidParameterError, match="ring all-reduce inside one node"):
        intra_node_topology(gather)
    with pytest.raises(sm.ParameterTypeError, match="fit"):
        intra_node_topology("fit")


@pytest.mark.parametrize("nics", [1, 2])
def test_fit_with_topology_recovers_the_nic_and_relates_to_the_flat_fit(nics):
    n = G * NODES
    topo = Topology(gpus_per_node=G, nics_per_node=nics, intra_bw=INTRA_BW,
                    intra_alpha=INTRA_ALPHA)
    t = noisy(ring_topology(n, G, nics, ALPHA, BW, INTRA_ALPHA, SIZES), seed=2)
    fit = fit_collective(SIZES, t, n=n, topology=topo, line_rate="100Gbps")
    assert fit.alpha == pytest.approx(ALPHA, rel=0.05)
    assert fit.bandwidth == pytest.approx(BW, rel=0.02)
    assert fit.utilization == pytest.approx(0.8, rel=0.02)
    for name, true in (("alpha", ALPHA), ("bandwidth", BW)):
        lo, hi = fit.intervals[name]
        assert lo < true < hi
    # the fitted model is the library's topology-aware ring (the NICs bind here)
    lib = sm.collective_time("ring", SIZES, n, fit.bandwidth, alpha=fit.alpha,
                             gpus_per_node=G, nics_per_node=nics, intra_bw=INTRA_BW,
                             intra_alpha=INTRA_ALPHA)
    np.testing.assert_allclose(fit.predict(SIZES), lib, rtol=1e-12)
    # the flat fit of the same times: the same bus bandwidth per node (nics x the NIC's),
    # and one latency for all 2(n-1) steps
    flat = fit_collective(SIZES, t, n=n)
    assert flat.bandwidth == pytest.approx(nics * fit.bandwidth, rel=0.01)
    steps = (2 * (n - NODES) * INTRA_ALPHA + 2 * (NODES - 1) * ALPHA) / (2 * (n - 1))
    assert flat.alpha == pytest.approx(steps, rel=0.1)
    again = CollectiveFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    assert again.topology == topo
    np.testing.assert_allclose(again.predict(SIZES), fit.predict(SIZES))
    assert "per NIC" in str(fit) and "8 per node" in str(fit)


def test_fit_with_topology_refuses_what_it_cannot_tell():
    topo = Topology(gpus_per_node=G, intra_bw=INTRA_BW)
    t = ring(G, 1e-5, 1e11, SIZES)
    with pytest.raises(sm.InvalidParameterError, match="fit in one node"):
        fit_collective(SIZES, t, n=G, topology=topo)
    with pytest.raises(sm.InvalidParameterError, match="no topology"):
        fit_collective(SIZES, SIZES * 8 / 1e11, n=16, collective="send_recv",
                       topology=topo)
    with pytest.raises(sm.ParameterTypeError, match="topology"):
        fit_collective(SIZES, t, n=16, topology={"gpus_per_node": 8})
    # a flat topology is no topology
    assert fit_collective(SIZES, t, n=G, topology=Topology()).topology is None
    # intra-node links slower than the NICs: the NIC's bandwidth is not identified
    slow = Topology(gpus_per_node=G, intra_bw=50e9, intra_alpha=INTRA_ALPHA)
    times = ring_topology(2 * G, G, 1, ALPHA, BW, INTRA_ALPHA, SIZES)
    with pytest.warns(sm.CalibrationWarning, match="intra-node links"):
        fit_collective(SIZES, times, n=2 * G, topology=slow)


def test_cluster_from_the_two_fits_has_the_topology(tmp_path):
    intra = intra_fit()
    topo = intra_node_topology(intra)
    t = noisy(ring_topology(G * NODES, G, 1, ALPHA, BW, INTRA_ALPHA, SIZES), seed=3)
    inter = fit_collective(SIZES, t, n=G * NODES, topology=topo, line_rate="100Gbps")
    cl = cluster_from_fits(inter, name="two-level", intra=intra,
                           provenance={"source": "synthetic"})
    assert cl.topology == topo
    assert cl.alpha == inter.alpha and cl.utilization == pytest.approx(inter.utilization)
    assert cl.intervals["intra_bw"] == intra.intervals["bandwidth"]
    assert cl.extra["intra_node_fit"]["n"] == G
    back = sm.load_cluster(sm.save_cluster(cl, tmp_path / "c.json"))
    assert back.topology == topo
    # a prediction inside one node uses the intra-node link only: the NIC's fit is
    # irrelevant there, the ring of 8 costs what the intra-node fit says
    one_node = sm.collective_time("ring", SIZES, G, 100e9, alpha=back.alpha,
                                  utilization=back.utilization, gpus_per_node=G,
                                  intra_bw=back.topology.intra_bw,
                                  intra_alpha=back.topology.intra_alpha)
    np.testing.assert_allclose(one_node, intra.predict(SIZES), rtol=1e-12)
    # the intra fit given with fits made from another one is refused
    with pytest.raises(sm.InvalidParameterError, match="intra"):
        cluster_from_fits(inter, name="x", intra=intra_fit(seed=9))
    # without fits made with a topology, the intra fit alone gives it
    flat = fit_collective(SIZES, t, n=G * NODES, line_rate="100Gbps")
    assert cluster_from_fits(flat, name="y", intra=intra).topology == topo


# ------------------------------------------------------------------ nccl-tests, two logs

def nccl_log(n, seconds, sizes, gpus_per_node=8):
    """An all_reduce_perf output (current layout) with the given times."""
    lines = [f"$ ./build/all_reduce_perf -b 4K -e 256M -f 2 -g {gpus_per_node}",
             f"# nThread 1 nGpus 1 minBytes {int(sizes[0])} maxBytes {int(sizes[-1])} step: "
             "2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
             "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on node{r // gpus_per_node:02d} "
              f"device {r % gpus_per_node:2d} [0x{r:02x}] NVIDIA H100 80GB HBM3"
              for r in range(n)]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   "
              "busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  "
              "(GB/s)            (us)  (GB/s)  (GB/s)       "]
    for s, t in zip(sizes, seconds):
        alg = s / t / 1e9
        bus = alg * 2 * (n - 1) / n
        lines.append(f"{int(s):12d}  {int(s // 4):12d}     float     sum      -1  "
                     f"{t * 1e6:9.3f}  {alg:7.2f}  {bus:7.2f}       0  {t * 1e6:9.3f}  "
                     f"{alg:7.2f}  {bus:7.2f}       0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0", "#", ""]
    return "\n".join(lines)


def calibrate_main(args, capsys, tmp_path, monkeypatch):
    from scalemodel.calibrate.__main__ import main
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.chdir(tmp_path)
    rc = main(args)
    return rc, capsys.readouterr()


@pytest.mark.parametrize("how", [["--gpus-per-node", "8"], ["--nodes", "2"]])
def test_from_nccl_tests_fits_both_logs(tmp_path, capsys, monkeypatch, how):
    rng = np.random.default_rng(4)
    intra_t = ring(G, INTRA_ALPHA, INTRA_BW, SIZES) * rng.lognormal(0, 0.01, SIZES.size)
    inter_t = ring_topology(2 * G, G, 2, ALPHA, BW, INTRA_ALPHA, SIZES) * rng.lognormal(
        0, 0.01, SIZES.size)
    (tmp_path / "inside.log").write_text(nccl_log(G, intra_t, SIZES))
    (tmp_path / "across.log").write_text(nccl_log(2 * G, inter_t, SIZES))
    rc, out = calibrate_main(["from-nccl-tests", "across.log", "inside.log", *how,
                              "--nics-per-node", "2", "--line-rate", "100Gbps"],
                             capsys, tmp_path, monkeypatch)
    assert rc == 0, out.err
    assert "intra-node: all_reduce (ring, n=8)" in out.out and "wrote cluster.json" in out.out
    cl = sm.load_cluster(tmp_path / "cluster.json")
    t = cl.topology
    assert (t.gpus_per_node, t.nics_per_node) == (8, 2)
    assert t.arch == "hopper"  # the logs' H100s (it was the default, volta)
    assert t.intra_bw == pytest.approx(INTRA_BW, rel=0.02)
    assert t.intra_alpha == pytest.approx(INTRA_ALPHA, rel=0.05)
    assert cl.alpha == pytest.approx(ALPHA, rel=0.05)
    assert cl.utilization == pytest.approx(BW / 100e9, rel=0.02)  # per NIC
    assert cl.extra["fits"][0]["topology"]["gpus_per_node"] == 8


def test_from_nccl_tests_across_nodes_only_and_errors(tmp_path, capsys, monkeypatch):
    h100 = TESTS / "data" / "nccl_tests_all_reduce_2x8_h100.txt"  # 2 nodes x 8 H100
    # eight 400 Gbit/s NICs per node; without an intra-node log the link is the logged
    # device's (H100 SXM5: NVLink 4, 3.6 Tbit/s per direction from its spec), faster than
    # the eight NICs together
    with warnings.catch_warnings():
        warnings.simplefilter("error", sm.CalibrationWarning)
        rc, out = calibrate_main(["from-nccl-tests", str(h100), "--gpus-per-node", "8",
                                  "--nics-per-node", "8", "--line-rate", "400Gbps"],
                                 capsys, tmp_path, monkeypatch)
    assert rc == 0, out.err
    assert "no all-reduce log inside one node" in out.out and "H100 SXM5" in out.out
    cl = sm.load_cluster(tmp_path / "cluster.json")
    assert cl.topology.gpus_per_node == 8 and cl.topology.intra_bw == 3.6e12
    assert cl.topology.arch == "hopper"
    flat = read_flat(h100)  # the bus bandwidth over 3.2 Tbit/s: the same utilization
    assert cl.utilization == pytest.approx(flat.utilization, rel=0.01)
    # devices that are no built-in GPU: the default link (V100 NVLink, 2.4 Tbit/s), slower
    # than the eight NICs together (a warning)
    unknown = tmp_path / "unknown.log"
    unknown.write_text(h100.read_text().replace("NVIDIA H100 80GB HBM3", "Some GPU"))
    with pytest.warns(sm.CalibrationWarning, match="intra-node links"):
        rc, out = calibrate_main(["from-nccl-tests", str(unknown), "--gpus-per-node", "8",
                                  "--nics-per-node", "8", "--line-rate", "400Gbps",
                                  "--out", "unknown.json"], capsys, tmp_path, monkeypatch)
    assert rc == 0, out.err
    assert "(the default; the logs' devices, Some GPU, are not one built-in GPU)" in out.out
    assert sm.load_cluster(tmp_path / "unknown.json").topology.intra_bw == 2.4e12
    inside = tmp_path / "inside.log"
    inside.write_text(nccl_log(G, ring(G, INTRA_ALPHA, INTRA_BW, SIZES), SIZES))
    for args, words in ((["inside.log", "--gpus-per-node", "8"], "every all-reduce log "
                         "runs inside one node"),
                        ([str(h100), "--nodes", "3"], "--nodes=3"),
                        ([str(h100), "--nodes", "2", "--gpus-per-node", "8"], "not both"),
                        ([str(h100), "--gpus-per-node", "0"], "--gpus-per-node=0"),
                        # the log ran 8 ranks per host: its per-NIC rate is 8 GPUs'
                        ([str(h100), "--gpus-per-node", "4"], "ran 8 ranks on each host"),
                        ([str(h100), "--gpus-per-node", "3"], "--gpus-per-node=3"),
                        ([str(h100), "--nodes", "8"], "--nodes=8 is invalid")):
        rc, out = calibrate_main(["from-nccl-tests", *args, "--out", "other.json"], capsys,
                                 tmp_path, monkeypatch)
        assert rc == 2 and out.err.count("\n") == 1 and words in out.err, out.err
    assert not (tmp_path / "other.json").exists()


def read_flat(path):
    from scalemodel.calibrate.nccl_tests import read_nccl_tests
    return read_nccl_tests(path).fit(line_rate="3.2Tbps")


# ------------------------------------------------------------------ compute slowdown

def test_slowdown_from_paired_spans():
    rng = np.random.default_rng(5)
    local = 0.02 * rng.lognormal(0, 0.03, 12)
    est = estimate_slowdown(1.12 * local * rng.lognormal(0, 0.02, 12), local,
                            forward=np.full(12, 0.01), local_forward=np.full(12, 0.01))
    assert est.significant and est.value == est.measured
    assert est.interval[0] < 1.12 < est.interval[1] and est.interval[0] > 1
    assert est.forward_ratio == 1.0 and "forward 1.000" in str(est)
    # the same data, the same interval (fixed seed)
    assert estimate_slowdown(1.12 * local, local).interval == \
        estimate_slowdown(1.12 * local, local).interval
    same = estimate_slowdown(local * rng.lognormal(0, 0.03, 12), local)
    assert not same.significant and same.value == 1.0
    assert "not significantly above 1, so 1 is used" in str(same)
    assert same.cluster_interval[0] == 1.0 <= same.cluster_interval[1]
    with pytest.raises(sm.InvalidParameterError, match="ddp"):
        estimate_slowdown([1.0], [1.0])
    with pytest.raises(sm.InvalidParameterError, match="local"):
        estimate_slowdown([1.0, 1.0], [0.0, 1.0])
    with pytest.raises(sm.InvalidParameterError, match="confidence"):
        estimate_slowdown([1.0, 1.0], [1.0, 1.0], confidence=1.0)


def test_host_effects_fit_on_top_of_the_slowdown():
    """Data from a cluster with a known slowdown and overlap: given the slowdown, the
    overlap fit recovers the overlap; ignoring the slowdown it would blame the overlap."""
    prof = sm.load_profile("resnet50")
    base = sm.ClusterProfile(name="t", alpha=20e-6, utilization=0.7,
                             provenance={"source": "test"})
    true = attrs.evolve(base, compute_slowdown=1.08, overlap=0.6)
    measured = sm.scaling_factor(prof, 8, 25e9, cluster=true)
    fit = fit_host_effects(prof, 8, 25e9, measured, cluster=base, compute_slowdown=1.08,
                           slowdown_interval=(1.05, 1.11))
    assert fit.cluster.compute_slowdown == 1.08
    assert fit.cluster.overlap == pytest.approx(0.6, abs=1e-4)
    assert fit.cluster.intervals["compute_slowdown"] == (1.05, 1.11)
    assert fit.host is None and "overlap efficiency 0.60" in fit.lines()[0]
    blind = fit_host_effects(prof, 8, 25e9, measured, cluster=base)
    assert blind.cluster.overlap < 0.6 - 0.05
    # slower than even no overlap: the rest is a per-byte host cost, on top of both
    host = attrs.evolve(true, overlap=0.0, reduction=sm.ReductionCost(gamma=2e-10))
    m2 = sm.scaling_factor(prof, 8, 25e9, cluster=host)
    fit2 = fit_host_effects(prof, 8, 25e9, m2, cluster=base, compute_slowdown=1.08)
    assert fit2.cluster.overlap == 0.0
    assert fit2.host.gamma == pytest.approx(2e-10, rel=1e-3)
    assert sm.scaling_factor(prof, 8, 25e9, cluster=fit2.cluster) == pytest.approx(m2)
    # stripped again: the transport alone
    bare = transport_only(fit2.cluster)
    assert (bare.compute_slowdown, bare.overlap, bare.reduction) == (1.0, 1.0, None)
    assert "compute_slowdown" not in bare.intervals and "host_overhead" not in bare.extra
    only_sigma = fit_host_effects(prof, 8, 25e9, m2, cluster=fit2.cluster,
                                  compute_slowdown=1.2, fit_overhead=False)
    assert only_sigma.cluster.compute_slowdown == 1.2 and only_sigma.overlap is None
    assert only_sigma.cluster.reduction is None  # the earlier host overhead is replaced
    with pytest.raises(sm.InvalidParameterError, match="compute_slowdown"):
        fit_host_effects(prof, 8, 25e9, m2, cluster=base, compute_slowdown=0.9)
    # slower than any per-byte cost explains: said, not fitted, and the rest is kept
    with pytest.warns(sm.CalibrationWarning, match="no host overhead fitted"):
        odd = fit_host_effects(prof, 8, 25e9, 1e-4, cluster=base, compute_slowdown=1.08)
    assert odd.host is None and odd.cluster.overlap == 0.0
    assert "per-iteration work" in odd.lines()[-1]
    assert "host_overhead_note" not in transport_only(odd.cluster).extra


def test_fit_with_transport_fits_the_overlap_with_fit_cluster():
    """The calibration's transport path: fit_cluster with the transport fixed fits the
    overlap (with an interval around the truth); clipped runs and host costs take the
    bisection of fit_host_effects; fixed costs fitted elsewhere are held; a transport
    that contradicts the run falls back to the bisection, said."""
    from scalemodel.calibrate.overhead import fit_with_transport
    prof = sm.load_profile("resnet50")
    base = sm.ClusterProfile(name="t", alpha=20e-6, utilization=0.7,
                             provenance={"source": "test"})
    true = attrs.evolve(base, compute_slowdown=1.08, overlap=0.6)
    measured = sm.scaling_factor(prof, 8, 25e9, cluster=true)
    fit = fit_with_transport(prof, 8, 25e9, measured, transport=base, compute_slowdown=1.08,
                             slowdown_interval=(1.05, 1.11), uncertainty=0.002)
    assert fit.cluster_fit is not None and fit.cluster_fit.free == ("overlap",)
    lo, hi = fit.cluster.intervals["overlap"]
    assert lo < 0.6 < hi and fit.cluster.overlap == pytest.approx(0.6, abs=0.02)
    assert fit.cluster.intervals["compute_slowdown"] == (1.05, 1.11)
    assert fit.cluster.alpha == 20e-6 and fit.cluster.fit_settings["transport"]
    got = sm.scaling_factor(prof, 8, 25e9, cluster=fit.cluster)
    assert got == pytest.approx(measured, rel=0.002)  # within the run's uncertainty
    assert "overlap efficiency 0.6" in fit.lines()[0]
    # a slowdown-free cluster fitted elsewhere with fixed costs: they are held
    elsewhere = attrs.evolve(base, sync_overhead=2e-3, compute_slowdown=1.3)
    held = fit_with_transport(prof, 8, 25e9, sm.scaling_factor(
        prof, 8, 25e9, cluster=attrs.evolve(elsewhere, compute_slowdown=1.08, overlap=0.6)),
        transport=elsewhere, compute_slowdown=1.08, uncertainty=0.002)
    assert held.cluster.sync_overhead == 2e-3 and held.cluster.compute_slowdown == 1.08
    assert held.cluster.overlap == pytest.approx(0.6, abs=0.02)
    # slower than no overlap: bisection and host cost, exactly as fit_host_effects
    host = attrs.evolve(true, overlap=0.0, reduction=sm.ReductionCost(gamma=2e-10))
    m2 = sm.scaling_factor(prof, 8, 25e9, cluster=host)
    fit2 = fit_with_transport(prof, 8, 25e9, m2, transport=base, compute_slowdown=1.08)
    assert fit2.cluster_fit is None and fit2.cluster.overlap == 0.0
    assert fit2.host.gamma == pytest.approx(2e-10, rel=1e-3)
    only = fit_with_transport(prof, 8, 25e9, m2, transport=base, compute_slowdown=1.2,
                              fit_overhead=False)
    assert only.cluster.compute_slowdown == 1.2 and only.overlap is None
    # every path records what it was fitted under (the bisected ones recorded nothing),
    # this fit's settings, not those the given cluster was fitted under
    stale = attrs.evolve(base, fit_settings={"fusion": "horovod", "algorithm": "tree",
                                             "transport": "old"})
    fit3 = fit_with_transport(prof, 8, 25e9, m2, transport=stale, compute_slowdown=1.08)
    for f in (fit, fit2, only, fit3):
        assert f.cluster.fit_settings["algorithm"] == "ring"
        assert f.cluster.fit_settings["fusion"] == "ddp"
        assert f.cluster.fit_settings["transport"] not in ("", "old")
    # a transport measured below the run's line rate contradicts it: bisected, said
    slow = attrs.evolve(base, table_line_rate=[1e9, 10e9], table_utilization=[0.9, 0.7])
    m3 = sm.scaling_factor(prof, 8, 25e9, cluster=attrs.evolve(slow, compute_slowdown=1.08,
                                                                overlap=0.6))
    with pytest.warns(sm.CalibrationWarning, match="bisected"):
        back = fit_with_transport(prof, 8, 25e9, m3, transport=slow, compute_slowdown=1.08)
    assert back.cluster_fit is None and back.cluster.overlap == pytest.approx(0.6, abs=1e-4)
    assert "transport_fit_note" in back.cluster.extra
    assert "transport_fit_note" not in transport_only(back.cluster).extra


def test_corner_inputs_takes_the_clusters_corners():
    cl = sm.ClusterProfile(name="c", alpha=2e-5, utilization=0.6, compute_slowdown=1.1,
                           overlap=0.5, intervals={"alpha": (1e-5, 3e-5),
                                                   "utilization": (0.5, 0.7),
                                                   "compute_slowdown": (1.05, 1.15),
                                                   "overlap": (0.4, 0.6)})
    (pw, cw), (pb, cb) = corner_inputs("resnet50", cl, (0.9, 1.1))
    worst, best = cl.corners()
    for name in ("alpha", "utilization", "compute_slowdown", "overlap"):
        assert getattr(cw, name) == getattr(worst, name)
        assert getattr(cb, name) == getattr(best, name)
    assert (cw.compute_slowdown, cb.compute_slowdown) == (1.15, 1.05)
    ci = scaling_factor_interval("resnet50", 16, 10e9, cluster=cl,
                                 compute_interval=(0.9, 1.1))
    no_sigma = scaling_factor_interval(
        "resnet50", 16, 10e9, compute_interval=(0.9, 1.1), cluster=attrs.evolve(
            cl, intervals={k: v for k, v in cl.intervals.items() if k != "compute_slowdown"}))
    assert ci.lo < no_sigma.lo and ci.hi > no_sigma.hi  # the slowdown's interval counts
    with pytest.raises(sm.InvalidParameterError, match="overlap"):  # refused when built
        corner_inputs("resnet50", attrs.evolve(cl, intervals=dict(cl.intervals,
                                                                  overlap=("a", "b"))))


def test_new_calibration_api_documents_every_parameter_with_a_unit():
    import inspect
    import re

    from test_docstrings import documented_parameters

    from scalemodel.calibrate import transport
    from scalemodel.calibrate.overhead import fit_with_transport
    for fn in (intra_node_topology, estimate_slowdown, fit_host_effects, transport_only,
               fit_with_transport,
               fit_collective, cluster_from_fits, transport.run_intra_node_sweep,
               transport.node_groups, transport.run_sweep, DDPMeasurement.subset,
               DDPMeasurement.compute_slowdown):
        documented = documented_parameters(fn.__doc__)
        for p in inspect.signature(fn).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            assert p.name in documented, (fn.__qualname__, p.name)
            assert re.search(r"\[[^\]]+\]", documented[p.name]), (fn.__qualname__, p.name)


# ------------------------------------------------------------------ the scaling check

def ddp_from(prof, cluster, n, bw, *, sigma_spans=1.0, iterations=10, seed=6):
    """A DDP measurement whose medians follow the model for ``cluster``: local
    iterations at the profile's time, DDP ones at T1 / S, both with 1 % noise."""
    rng = np.random.default_rng(seed)
    t1 = prof.iteration_time * rng.lognormal(0, 0.01, iterations)
    s = sm.scaling_factor(prof, n, bw, cluster=cluster)
    tn = prof.iteration_time / s * rng.lognormal(0, 0.01, iterations)
    bwd = prof.backward_time * rng.lognormal(0, 0.01, iterations)
    return DDPMeasurement(seconds=tn, local_seconds=t1, world_size=n, batch_size=32,
                          bucket_cap_mb=25.0, backend="gloo",
                          backward=bwd * sigma_spans * rng.lognormal(0, 0.01, iterations),
                          local_backward=bwd, forward=np.full(iterations, 0.01 * sigma_spans),
                          local_forward=np.full(iterations, 0.01))


def report_args(fit=None):
    return argparse.Namespace(model="resnet50", algorithm="ring", fit_host_overhead=fit)


def test_report_sets_every_model_beside_the_measurement():
    from scalemodel.calibrate.__main__ import _report
    prof = sm.load_profile("resnet50")
    transport = sm.ClusterProfile(name="t", alpha=20e-6, utilization=0.7,
                                  provenance={"source": "test"})
    true = attrs.evolve(transport, compute_slowdown=1.1, overlap=0.5)
    ddp = ddp_from(prof, true, 4, 25e9, sigma_spans=1.1)
    rep = _report(report_args(), prof, None, transport, ddp, 4, 25e9)
    json.dumps({k: v for k, v in rep.items() if k != "_cluster"})  # JSON-ready
    rows = {r["model"].split(" (")[0]: r for r in rep["checks"]}
    assert set(rows) == {"transport fit only", "fitted here",
                         "fitted on the 5 even iterations, checked on the 5 odd ones"}
    meas = rep["measured_scaling_factor"]
    only = rows["transport fit only"]
    assert only["predicted_scaling_factor"] == rep["predicted_scaling_factor"]
    assert only["scaling_factor_error"] == pytest.approx(
        sm.scaling_factor(prof, 4, 25e9, cluster=transport) - meas)
    assert only["iteration_time_error"] == pytest.approx(
        meas / only["predicted_scaling_factor"] - 1)
    here = rows["fitted here"]
    # the overlap comes from fit_cluster with the transport (the run weighed against the
    # prior of the overlap): the run is reached within its uncertainty, not exactly
    from scalemodel.calibrate.__main__ import _median_uncertainty
    assert here["fitted_to_these_iterations"]
    assert abs(here["iteration_time_error"]) < _median_uncertainty(ddp)
    assert rep["compute_slowdown"]["significant"]
    assert rep["compute_slowdown"]["value"] == pytest.approx(1.1, rel=0.02)
    held = rows["fitted on the 5 even iterations, checked on the 5 odd ones"]
    assert not held["fitted_to_these_iterations"] and abs(held["iteration_time_error"]) < 0.05
    cl = rep["_cluster"]
    assert cl.compute_slowdown == pytest.approx(1.1, rel=0.02)
    assert cl.overlap == pytest.approx(0.5, abs=0.1)
    assert cl.intervals["compute_slowdown"][0] > 1.0
    lo, hi = cl.intervals["overlap"]  # an interval from the fit, around the truth
    assert lo < 0.5 < hi and hi - lo < 0.3
    assert cl.fit_settings["transport"].startswith("cluster 't'")
    assert cl.alpha == transport.alpha and cl.utilization == transport.utilization
    assert cl.provenance["source"] == "test" and "runs" in cl.provenance
    json.dumps(cl.to_dict())
    assert "transport fit only" in rep["text"] and "fitted here (slowdown 1.1" in rep["text"]
    # a cluster fitted elsewhere is checked as given (generalization), not refitted
    checked = _report(report_args(False), prof, None, cl, ddp, 4, 25e9)
    assert checked["_cluster"] is None
    given = [r for r in checked["checks"] if r["model"].startswith("the given --cluster")]
    assert len(given) == 1 and abs(given[0]["iteration_time_error"]) < 0.02
    assert "checked, not refitted" in checked["text"]
    # few iterations: no held-out check; no slowdown evidence: 1
    few = ddp_from(prof, transport, 4, 25e9, iterations=4)
    rep = _report(report_args(False), prof, None, transport, few, 4, 25e9)
    assert len(rep["checks"]) == 2 and rep["_cluster"].compute_slowdown == 1.0
    assert not rep["compute_slowdown"]["significant"]
    # --no-fit-host-overhead: the row says what was measured, not that terms were fitted
    assert rep["checks"][1]["model"].startswith("slowdown measured here (slowdown 1; ")
    assert rep["checks"][1]["model"].endswith("--no-fit-host-overhead)")
    assert "fitted here" not in rep["text"]
    # not asked either way, on GPUs (NCCL) the terms are not fitted: no flag is blamed
    nccl = attrs.evolve(few, backend="nccl")
    rep = _report(report_args(None), prof, None, transport, nccl, 4, 25e9)
    assert rep["checks"][1]["model"].endswith("not fitted on nccl: --fit-host-overhead "
                                              "fits them)")


# ------------------------------------------------------------------ two nodes, for real

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_of_two_ranks(tmp_path):
    """Four gloo ranks with the environment torchrun gives two nodes of two
    (LOCAL_WORLD_SIZE=2, GROUP_RANK the node): both "nodes" share the loopback, but the
    intra-node groups are real process groups, sweeping at the same time."""
    pytest.importorskip("torch")
    from scalemodel.calibrate.compute import measure_compute
    profile = measure_compute("mlp", batch_size=4, warmup=1, iterations=3, threads=1,
                              reduction=False).profile
    sm.save_profile(profile, tmp_path / "profile.json")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
               WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    args = ["--backend", "gloo", "--model", "mlp", "--batch-size", "4", "--steps",
            "transport,scaling", "--profile", "profile.json", "--out", "cluster.json",
            "--line-rate", "10Gbps", "--min-size", "64KiB", "--max-size", "512KiB",
            "--repeats", "3", "--warmup", "1", "--iterations", "6", "--threads", "1",
            "--collectives", "all_reduce,send_recv", "--timeout", "60"]
    procs = [subprocess.Popen([sys.executable, "-m", "scalemodel.calibrate", *args],
                              cwd=tmp_path, env=dict(env, RANK=str(r), LOCAL_RANK=str(r % 2),
                                                     GROUP_RANK=str(r // 2)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(4)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=300))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    out, err = outs[0]
    assert "intra-node" in err and "all-reduce inside each node (2 ranks per node" in err
    cl = sm.load_cluster(tmp_path / "cluster.json")
    intra = cl.extra["intra_node_fit"]
    assert cl.extra["intra_node_sweep"]["groups"] == 2
    assert cl.extra["intra_node_sweep"]["world_size"] == 2 and intra["n"] == 2
    assert cl.topology == Topology(gpus_per_node=2, intra_bw=intra["bandwidth"],
                                   intra_alpha=intra["alpha"])
    fits = cl.extra["collective_fits"]
    ar = CollectiveFit.from_dict(fits["all_reduce"])
    assert ar.n == 4 and ar.topology == cl.topology and cl.alpha == ar.alpha
    assert fits["send_recv"]["topology"] is None  # one message: no topology
    # the world's fit is eq. (fit-model-topology): 2(n-M) intra steps, 2(M-1) across
    m = ar.nbytes
    np.testing.assert_allclose(ar.predict(m), 4 * intra["alpha"] + 2 * ar.alpha
                               + 1.5 * 8 * m / ar.bandwidth, rtol=1e-12)
    rep = json.loads((tmp_path / "cluster.report.json").read_text())
    assert rep["world_size"] == 4 and rep["compute_slowdown"]["iterations"] == 6
    assert [r["model"].split(" (")[0] for r in rep["checks"]][:2] == ["transport fit only",
                                                                       "fitted here"]
    assert "checked on the 3 odd ones" in rep["checks"][-1]["model"]
    assert cl.compute_slowdown == rep["compute_slowdown"]["value"]
    assert "compute_slowdown" in cl.intervals
    assert "scaling check" in out
    s = sm.scaling_factor(tmp_path / "profile.json", 16, "10Gbps",
                          cluster=tmp_path / "cluster.json")
    assert 0 < s <= 1
