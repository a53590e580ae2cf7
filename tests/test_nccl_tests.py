"""Reading nccl-tests output and fitting it.

tests/data/ holds two outputs in nccl-tests' real layouts (see tests/data/README.md for
where the layouts come from): a current-layout all_reduce_perf over 2 x 8 H100 and a
2019-layout all_gather_perf over 4 x 1 V100 with Open MPI ``--tag-output`` prefixes.
Their numbers were generated from known parameters, so the fits can be checked against
them; nccl_text() below writes further variants.
"""

from pathlib import Path

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.calibrate.fit import COLLECTIVE_MODELS, _coefficients, cluster_from_fits
from scalemodel.calibrate.nccl_tests import BUS_FACTOR, read_nccl_tests

DATA = Path(__file__).parent / "data"
H100 = DATA / "nccl_tests_all_reduce_2x8_h100.txt"
V100 = DATA / "nccl_tests_all_gather_4x1_v100_2019.txt"


def test_current_layout_all_reduce_sample():
    res = read_nccl_tests(H100)
    assert res.collective == "all_reduce" and res.world_size == 16
    assert res.devices == ("NVIDIA H100 80GB HBM3",) * 16
    assert res.size[0] == 8 and res.size[-1] == 8 * 2**30 and res.size.size == 31
    assert res.time_out_of_place[0] == pytest.approx(37.5e-6)       # us -> s
    assert res.busbw[-1] == pytest.approx(353.61 * 8e9)             # GB/s -> bits/s
    assert res.avg_busbw == pytest.approx(124.2326 * 8e9)
    np.testing.assert_allclose(res.busbw, res.algbw * BUS_FACTOR["all_reduce"](16),
                               rtol=0.02, atol=0.011 * 8e9)         # 2 decimals printed
    np.testing.assert_array_equal(res.nbytes, res.size)
    assert np.all(res.seconds() <= res.time_out_of_place)
    fit = res.fit(line_rate="3.2Tbps")
    # generated with alpha 1.25 us, bus bandwidth 2.9 Tbit/s (362.5 GB/s), 2 % noise
    assert fit.alpha == pytest.approx(1.25e-6, rel=0.05)
    assert fit.bandwidth == pytest.approx(2.9e12, rel=0.03)
    assert fit.bandwidth == pytest.approx(res.busbw[-1], rel=0.05)  # B is nccl's busbw
    assert fit.utilization == pytest.approx(0.906, rel=0.03) and fit.r2 > 0.99
    assert fit.n == 16 and fit.algorithm == "ring"


def test_2019_layout_all_gather_sample_with_mpi_prefixes():
    res = read_nccl_tests(str(V100))
    assert res.collective == "all_gather" and res.world_size == 4
    assert res.devices[3] == "Tesla V100-SXM2-32GB"
    assert res.nbytes[0] == 256.0  # 1 KiB whole buffer = 256 B per rank
    assert res.time_out_of_place[-1] == pytest.approx(143499e-6)
    fit = res.fit(line_rate="25Gbps")
    # generated with alpha 18 us, 22 Gbit/s, 2.5 % noise
    assert fit.alpha == pytest.approx(18e-6, rel=0.05)
    assert fit.bandwidth == pytest.approx(22e9, rel=0.03)
    assert fit.utilization == pytest.approx(0.88, rel=0.03)
    lo, hi = fit.intervals["bandwidth"]
    assert lo <= 22e9 <= hi
    big = res.fit(line_rate="25Gbps", min_size=1e5, which="out_of_place")
    assert big.nbytes.min() >= 1e5 and big.bandwidth == pytest.approx(22e9, rel=0.03)


def test_samples_make_a_cluster_profile(tmp_path):
    fit = read_nccl_tests(V100).fit(line_rate="25Gbps")
    cl = cluster_from_fits(fit, name="v100-roce", provenance={"source": str(V100.name)})
    again = sm.load_cluster(sm.save_cluster(cl, tmp_path / "cluster.json"))
    s = sm.scaling_factor("resnet50", 4, "25Gbps", cluster=again)
    assert 0 < s <= 1


def nccl_text(collective, n, alpha, bw, new_layout=True, seed=1, prefix=""):
    """Output in nccl-tests' layout (current, or 2021-era with redop but no root and
    'error') for data from known parameters."""
    rng = np.random.default_rng(seed)
    per_rank = 2.0 ** np.arange(10, 28)
    lat, bits, _ = _coefficients(collective, COLLECTIVE_MODELS[collective], per_rank, n)
    t = (lat * alpha + bits / bw) * rng.lognormal(0, 0.01, per_rank.size)
    size = per_rank * (n if collective in ("all_gather", "reduce_scatter") else 1)
    busf = BUS_FACTOR[collective](n)
    lines = [f"# nThread 1 nGpus 1 minBytes {int(size[0])} maxBytes {int(size[-1])} step: "
             "2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
             "#", "# Using devices"]
    for r in range(n):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {4000 + r:6d} on node{r // 8:02d} device "
                     f"{r % 8:2d} [0x{r:02x}] NVIDIA A100-SXM4-80GB")
    lines.append("#")
    redop = "sum" if collective in ("all_reduce", "reduce_scatter") else "none"
    if new_layout:
        lines += ["#       size         count      type   redop    root     time   algbw   "
                  "busbw #wrong     time   algbw   busbw #wrong",
                  "#        (B)    (elements)                               (us)  (GB/s)  "
                  "(GB/s)            (us)  (GB/s)  (GB/s)       "]
    else:
        lines += ["#       size         count    type   redop     time   algbw   busbw  error"
                  "     time   algbw   busbw  error",
                  "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)       "
                  "     (us)  (GB/s)  (GB/s)"]
    for s, tt in zip(size, t):
        us = tt * 1e6
        alg = s / tt / 1e9
        cells = [f"{int(s):12d}", f"{int(s // 4):12d}", f"{'float':>8s}", f"{redop:>6s}"]
        if new_layout:
            cells.append(f"{-1:6d}")
        out = [f"{us:7.2f}", f"{alg:6.2f}", f"{alg * busf:6.2f}",
               "     0" if new_layout else "0e+00"]
        inplace = ["    N/A", "   N/A", "   N/A", "   N/A"] if collective == "send_recv" \
            else [f"{us * 1.01:7.2f}", f"{alg / 1.01:6.2f}", f"{alg * busf / 1.01:6.2f}",
                  "     0" if new_layout else "0e+00"]
        lines.append("  ".join(cells + out + inplace))
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 61.6327 ", "#", ""]
    binary = {"send_recv": "sendrecv_perf"}.get(collective, f"{collective}_perf")
    text = [f"$ ./build/{binary} -b 1K -e 128M -f 2 -g {n}"] + lines
    return "\n".join(prefix + x if x else x for x in text)


@pytest.mark.parametrize("new_layout", [True, False])
@pytest.mark.parametrize("collective, n", [("all_reduce", 16), ("all_gather", 8),
                                           ("reduce_scatter", 8), ("broadcast", 4),
                                           ("send_recv", 2)])
def test_layouts_and_collectives_parse_and_fit(tmp_path, collective, n, new_layout):
    text = nccl_text(collective, n, 12e-6, 300e9, new_layout, prefix="[0] ")
    path = tmp_path / "out.log"
    path.write_text(text)
    res = read_nccl_tests(path)
    assert res.collective == collective and res.world_size == n
    assert res.devices[0] == "NVIDIA A100-SXM4-80GB"
    assert res.avg_busbw == pytest.approx(61.6327 * 8e9)
    assert res.nbytes[0] == 1024.0  # per rank, whatever nccl-tests' S is
    if collective == "send_recv":
        assert np.all(np.isnan(res.time_in_place))
    fit = res.fit(line_rate="400Gbps")
    assert fit.bandwidth == pytest.approx(300e9, rel=0.03)
    assert fit.alpha == pytest.approx(12e-6, rel=0.1)
    assert fit.utilization == pytest.approx(0.75, rel=0.03)
    # the fitted bandwidth is nccl-tests' bus bandwidth of the large messages (less
    # their remaining latency share)
    assert 1.0 <= fit.bandwidth / res.busbw[-1] < 1.1
    assert read_nccl_tests(text).size.size == res.size.size  # text works as well as a path


def test_collective_from_file_name_or_argument(tmp_path):
    text = nccl_text("all_gather", 4, 1e-5, 1e11).replace("all_gather_perf", "mystery")
    with pytest.raises(sm.CalibrationError, match="collective="):
        read_nccl_tests(text)
    assert read_nccl_tests(text, collective="all_gather").collective == "all_gather"
    path = tmp_path / "all_gather.log"
    path.write_text(text)
    assert read_nccl_tests(path).collective == "all_gather"
    with pytest.raises(sm.InvalidParameterError, match="collective"):
        read_nccl_tests(text, collective="allreduce")


def test_bad_input_names_the_line(tmp_path):
    with pytest.raises(sm.ProfileFormatError, match="no nccl-tests table"):
        read_nccl_tests("hello\nworld\n")
    with pytest.raises(sm.ProfileFormatError, match="cannot be opened"):
        read_nccl_tests(tmp_path / "missing.log")
    import os
    os.mkfifo(tmp_path / "fifo.log")  # a named pipe is refused, never waited on
    with pytest.raises(sm.ProfileFormatError, match="FIFO"):
        read_nccl_tests(tmp_path / "fifo.log")
    text = nccl_text("all_reduce", 4, 1e-5, 1e11)
    lines = text.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("4096"))
    cut = "\n".join(lines[:row] + ["        4096          1024     float"] + lines[row + 1:])
    with pytest.raises(sm.ProfileFormatError, match=f"line {row + 1}.*truncated"):
        read_nccl_tests(cut)
    bad = "\n".join(lines[:row] + [lines[row].replace("0.", "x.", 1)] + lines[row + 1:])
    with pytest.raises(sm.ProfileFormatError, match=f"line {row + 1}.*should be a number"):
        read_nccl_tests(bad)
    header = next(i for i, x in enumerate(lines) if "busbw" in x and "size" in x)
    orphan = "\n".join(lines[:header] + lines[header + 2:])
    with pytest.raises(sm.ProfileFormatError, match="before the column header"):
        read_nccl_tests(orphan)
    one = read_nccl_tests(text.replace("Rank  1", "Rank  0").replace("Rank  2", "Rank  0")
                          .replace("Rank  3", "Rank  0"))
    assert one.world_size == 1  # ranks that each ran alone (nccl-tests issue #107)
    with pytest.raises(sm.CalibrationError, match="one rank"):
        one.fit()
    with pytest.raises(sm.InvalidParameterError, match="which"):
        one.seconds("fastest")
