"""Compression microbenchmark: encode and decode cost per element of each compressor family.

Runs the kernels of each family (:mod:`scalemodel.compressors`) on real tensors with torch,
on the CPU or a GPU, and reports medians over repetitions, per element [s/element]:

=========== ============================================== ===============================
family      encode (timed)                                 decode (timed, per element)
=========== ============================================== ===============================
fp16, bf16  cast fp32 -> 16 bit                            cast back to fp32
int8        per-chunk (512) abs-max scale, quantize        dequantize and accumulate one
                                                           worker's contribution
signsgd     error feedback, mean-abs scale, sign, pack     unpack 8 signs a byte, scale,
            8 signs a byte, error update                   accumulate one contribution
topk        error feedback, ``torch.topk`` of abs values,  ``index_add_`` of the k values
            gather, error update                           (per received element)
randomk     error feedback, random indices, gather,        as topk
            error update
powersgd    error feedback, P = M Q, QR of P, Q = M^T P    P Q^T and the error update
            (at rank 1 and ``rank``: the difference
            gives the per-rank part)
=========== ============================================== ===============================

plus ``launch``: the median time of a tiny element-wise kernel [s]; with a sweep of sizes
(the command line's default) each family's costs are instead the fit of a fixed plus a
per-element time (:func:`measure_codec_sweep`). On a GPU the calls are queued back to back
and timed with CUDA events, as in a training step.

Command line (writes a cluster profile atomically, keeping what an existing one holds)::

    python -m scalemodel.calibrate.codec_bench --out cluster.json [--cluster existing.json]
        [--sizes 16384,...,16777216 | --numel 4194304] [--repeats 20] [--device cuda]

torch is imported inside the functions, so scalemodel works without it.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time

import numpy as np

from ..exceptions import CalibrationError, InvalidParameterError, ScalemodelError

__all__ = ["measure_codec_costs", "measure_codec_sweep", "fit_roofline", "costs_from_sweep",
           "main", "FAMILIES", "DEFAULT_SIZES"]

FAMILIES = ("fp16", "bf16", "int8", "signsgd", "topk", "randomk", "powersgd")
"""The families measured (keys of :data:`scalemodel.compressors.DEFAULT_CODEC_COSTS`)."""

CHUNK = 512  # elements per int8 scale (PyTorch quantization_perchannel_hook's default)

DEFAULT_SIZES = (2**14, 2**16, 2**18, 2**20, 2**22, 2**24)
"""Test sizes of the sweep [elements]: 16 Ki to 16 Mi, a factor 4 apart."""


def _torch():
    try:
        import torch
    except ImportError:
        raise CalibrationError("the codec benchmark needs torch: pip install "
                               "'scalemodel[calibrate]'") from None
    return torch


def _timer(torch, device):
    """``median_time(fn, repeats)``: the time of one call of ``fn`` [s].

    On a GPU the calls are queued back to back, as a training step queues them, and timed
    with CUDA events in 5 rounds of ``repeats`` calls (the median round, divided by
    ``repeats``): the time per call is the GPU's, or the host's dispatch where that is
    longer, without a synchronization per call. On the CPU each call is timed alone.
    """
    if device.type == "cuda":
        def median_time(fn, repeats):
            fn()  # warm-up (allocations, kernel caches)
            torch.cuda.synchronize()
            rounds = []
            for _ in range(5):
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                for _ in range(repeats):
                    fn()
                end.record()
                end.synchronize()
                rounds.append(start.elapsed_time(end) / 1e3 / repeats)
            return statistics.median(rounds)

        return median_time

    def median_time(fn, repeats):
        fn()  # warm-up (allocations, kernel caches)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return median_time


def _setup(device):
    """torch, the device (CUDA when available and none is named), a timer, a seeded RNG."""
    torch = _torch()
    dev = torch.device(device if device is not None else
                       ("cuda" if torch.cuda.is_available() else "cpu"))
    return torch, dev, _timer(torch, dev), torch.Generator(device="cpu").manual_seed(0)


def _check_args(numel, repeats, rank, density, sizes):
    for name, value, lo in (("numel", numel, 1024), ("repeats", repeats, 1), ("rank", rank, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise InvalidParameterError(name, value, f"must be an integer >= {lo}")
    if not (isinstance(density, (int, float)) and 0 < density <= 1):
        raise InvalidParameterError("density", density, "must be in (0, 1]")
    if sizes is not None:
        sizes = tuple(sizes)
        if (len(sizes) < 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1024
                                  for v in sizes) or len(set(sizes)) < 2):
            raise InvalidParameterError("sizes", sizes, "must hold at least two different "
                                        "integers >= 1024 (elements)")
    return sizes


def _times_at(torch, dev, numel, timed, gen, repeats, rank, density):
    """Median times [s] of each family's encode and decode on one test gradient.

    Returns ``{family: {phase: (elements, seconds)}}``; PowerSGD's phases are
    ``encode@1``, ``encode@<rank>``, ``decode@1`` and ``decode@<rank>``.
    """
    numel = max(CHUNK, numel // CHUNK * CHUNK)
    grad = torch.randn(numel, generator=gen).to(dev)
    err = torch.zeros_like(grad)   # the error feedback, carried from family to family
    out = torch.zeros_like(grad)
    times = {}
    _time_casts(torch, grad, timed, repeats, times)
    _time_int8(torch, grad, out, timed, repeats, times)
    _time_sign(torch, dev, grad, err, out, timed, repeats, times)
    _time_sparse(torch, dev, grad, err, out, timed, repeats, density, times)
    _time_powersgd(torch, dev, grad, gen, timed, repeats, rank, times)
    return times


def _time_casts(torch, grad, timed, repeats, times):
    """fp16 and bf16: a cast down to encode, up to decode."""
    numel = grad.numel()
    for family, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        half = grad.to(dtype)
        times[family] = {"encode": (numel, timed(lambda: grad.to(dtype), repeats)),
                         "decode": (numel, timed(lambda: half.to(torch.float32), repeats))}


def _time_int8(torch, grad, out, timed, repeats, times):
    """int8: a scale per chunk and rounding to encode, rescale and add to decode."""
    numel = grad.numel()
    chunks = grad.view(-1, CHUNK)

    def int8_encode():
        scale = chunks.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
        return torch.round(chunks / scale).to(torch.int8), scale

    q, scale = int8_encode()
    times["int8"] = {
        "encode": (numel, timed(int8_encode, repeats)),
        "decode": (numel, timed(lambda: out.view(-1, CHUNK).add_(q.to(torch.float32) * scale),
                                repeats))}


def _time_sign(torch, dev, grad, err, out, timed, repeats, times):
    """signSGD with error feedback: pack the signs into bits, unpack and add."""
    numel = grad.numel()
    shifts = torch.arange(8, device=dev, dtype=torch.uint8)
    weights = (2 ** torch.arange(8, device=dev)).to(torch.uint8)

    def sign_encode():
        c = grad + err
        s = c.abs().mean()
        bits = (c >= 0).view(-1, 8).to(torch.uint8)
        packed = (bits * weights).sum(dim=1, dtype=torch.uint8)
        err.copy_(c - s * torch.where(c >= 0, 1.0, -1.0))
        return packed, s

    packed, s = sign_encode()

    def sign_decode():
        bits = (packed.unsqueeze(1) >> shifts) & 1
        out.add_((bits.view(-1).to(torch.float32) * 2 - 1) * s)

    times["signsgd"] = {"encode": (numel, timed(sign_encode, repeats)),
                        "decode": (numel, timed(sign_decode, repeats))}


def _time_sparse(torch, dev, grad, err, out, timed, repeats, density, times):
    """top-k and random-k with error feedback: select ``density`` of the elements;
    decode (per received element) adds them at their indices."""
    numel = grad.numel()
    k = max(1, int(math.ceil(density * numel)))

    def topk_encode():
        c = grad + err
        _, idx = torch.topk(c.abs(), k, sorted=False)
        vals = c[idx]
        c[idx] = 0
        err.copy_(c)
        return vals, idx

    def randomk_encode():
        c = grad + err
        idx = torch.randint(numel, (k,), device=dev)
        vals = c[idx]
        c[idx] = 0
        err.copy_(c)
        return vals, idx

    for family, encode in (("topk", topk_encode), ("randomk", randomk_encode)):
        vals, idx = encode()
        times[family] = {"encode": (numel, timed(encode, repeats)),
                         # decode is per received element
                         "decode": (k, timed(lambda: out.index_add_(0, idx, vals), repeats))}


def _time_powersgd(torch, dev, grad, gen, timed, repeats, rank, times):
    """PowerSGD on the gradient as a square matrix, at rank 1 and ``rank``."""
    side = int(math.isqrt(grad.numel()))
    mat = grad[: side * side].view(side, side)
    merr = torch.zeros_like(mat)
    times["powersgd"] = {}
    for r in (1, rank):
        qmat = torch.randn(side, r, generator=gen).to(dev)

        def psgd_encode():
            m = mat + merr
            p = m @ qmat
            p, _ = torch.linalg.qr(p)
            return m, p, m.t() @ p

        m, p, qq = psgd_encode()

        def psgd_decode():
            approx = p @ qq.t()
            merr.copy_(m - approx)
            return approx

        times["powersgd"][f"encode@{r}"] = (side * side, timed(psgd_encode, repeats))
        times["powersgd"][f"decode@{r}"] = (side * side, timed(psgd_decode, repeats))


def fit_roofline(elements, seconds):
    """Fit ``t = max(a, b n)``: a flat floor, then a straight line through the origin.

    A GPU kernel's time is the host's dispatch until the tensor is big enough for the
    GPU's own time to exceed it; then it grows with the elements. Every split of the
    sorted sizes into a flat and a proportional part is tried; each part's constant is
    the geometric mean of its points, and the split with the least squared log error
    wins.

    Parameters
    ----------
    elements : array_like
        Elements of each measurement, at least two different sizes [elements].
    seconds : array_like
        Measured times [s].

    Returns
    -------
    tuple
        ``(a, b, worst)``: floor [s], time per element [s/element] (0 when every point is
        on the floor) and the largest relative error of the fit, ``max |fit / t - 1|`` [-].
    """
    n = np.asarray(elements, dtype=float)
    t = np.asarray(seconds, dtype=float)
    order = np.argsort(n, kind="stable")
    n, t = n[order], t[order]
    best = None
    for k in range(n.size + 1):  # the first k points on the floor
        a = float(np.exp(np.log(t[:k]).mean())) if k else 0.0
        b = float(np.exp(np.log(t[k:] / n[k:]).mean())) if k < n.size else 0.0
        model = np.maximum(a, b * n)
        err = float(np.sum(np.log(model / t) ** 2))
        if best is None or err < best[0] - 1e-12:  # ties: the fewest floor points
            best = (err, a, b, float(np.max(np.abs(model / t - 1.0))))
    return best[1], best[2], best[3]


def costs_from_sweep(details):
    """Codec costs from a sweep's measured times (``details`` of :func:`measure_codec_sweep`).

    Each family's encode and decode times are fitted by :func:`fit_roofline`; the slopes
    become ``encode`` and ``decode`` and the floors, divided by the kernel calls the
    planner charges for one tensor in its own bucket, ``launch``. PowerSGD's two ranks
    give its per-rank slopes. The planner *adds* the floor and the per-element time, an
    upper bound that is exact for small and large tensors and at most twice the
    measured time where the two meet.

    Parameters
    ----------
    details : dict
        ``{"rank": int, "times": {family: {phase: [[elements, seconds], ...]}}}`` [-].

    Returns
    -------
    tuple
        ``(costs, worst)``: the ``codec_costs`` dict and, per family, the largest relative
        error of its fits [-].
    """
    rank = int(details["rank"])
    costs, worst = {}, {}
    for family, phases in details["times"].items():
        fits = {ph: fit_roofline(*np.asarray(pts, dtype=float).T) for ph, pts in phases.items()}
        entry = {}
        if family == "powersgd":
            floor = 0.0
            for kind in ("encode", "decode"):
                one, more = fits[f"{kind}@1"], fits[f"{kind}@{rank}"]
                slope = max(0.0, (more[1] - one[1]) / (rank - 1))
                entry[kind], entry[f"{kind}_per_rank"] = max(0.0, one[1] - slope), slope
                floor += (one[0] + more[0]) / 2
        else:
            entry["encode"], entry["decode"] = fits["encode"][1], fits["decode"][1]
            floor = fits["encode"][0] + fits["decode"][0]
        entry["launch"] = floor / _calls(family)
        costs[family] = entry
        worst[family] = max(f[2] for f in fits.values())
    return costs, worst


def _calls(family):
    """Kernel calls the planner charges for one tensor in its own bucket [-]."""
    from ..compressors import get_compressor
    comp = get_compressor(family)
    return max(1, comp.calls_per_tensor + comp.calls_per_bucket)


def measure_codec_sweep(sizes=DEFAULT_SIZES, device=None, repeats=20, rank=4,
                        density=0.01, progress=None):
    """Measure every family at several sizes and fit a fixed plus a per-element cost.

    The median times over ``sizes`` become costs by :func:`costs_from_sweep`.

    Parameters
    ----------
    sizes : sequence of int
        Elements of the test gradients, at least two different sizes >= 1024 [elements].
    device, repeats, rank, density
        As in :func:`measure_codec_costs` [-], [-], [-], [-].
    progress : callable, optional
        Called as ``progress(done, total, elements)`` after each size [-].

    Returns
    -------
    tuple
        ``(costs, details)``: ``costs`` as :func:`measure_codec_costs` returns them;
        ``details`` holds the measured times and the worst relative error of each fit.
    """
    sizes = _check_args(1024, repeats, rank, density, sizes)
    torch, dev, timed, gen = _setup(device)
    runs = []
    for i, m in enumerate(sizes):
        runs.append(_times_at(torch, dev, int(m), timed, gen, repeats, rank, density))
        if progress is not None:
            progress(i + 1, len(sizes), int(m))
    details = {"sizes": list(sizes), "repeats": repeats, "rank": rank, "density": density,
               "times": {family: {ph: [list(r[family][ph]) for r in runs]
                                  for ph in runs[0][family]} for family in FAMILIES}}
    costs, details["worst_relative_error"] = costs_from_sweep(details)
    return costs, details


def measure_codec_costs(numel=2**22, device=None, repeats=20, rank=4, density=0.01, *,
                        sizes=None) -> dict:
    """Measure encode and decode costs per element of every family.

    With one size (``numel``) each cost is the measured time divided by the elements and
    ``launch`` is the time of a tiny element-wise kernel; with ``sizes`` it is the sweep
    fit of :func:`measure_codec_sweep` (fixed plus per-element cost, the better model when
    small tensors matter).

    Parameters
    ----------
    numel : int
        Elements of the test gradient (rounded to a multiple of 512 and, for PowerSGD,
        to a square matrix) [elements].
    device : str or None
        torch device, e.g. ``"cpu"`` or ``"cuda"``; None: CUDA when available [-].
    repeats : int
        Timed repetitions per kernel; the median is kept [-].
    rank : int
        PowerSGD rank of the second measurement (the first is rank 1) [-].
    density : float
        Fraction of elements top-k and random-k select, in (0, 1] [-].
    sizes : sequence of int, optional
        Several test sizes instead of ``numel`` [elements].

    Returns
    -------
    dict
        ``{family: {"encode": s/element, "decode": s/element, "launch": s}}``, with
        ``encode_per_rank`` and ``decode_per_rank`` [s/(element rank)] for powersgd; the
        format of ``ClusterProfile.codec_costs``.
    """
    _check_args(numel, repeats, rank, density, sizes)
    if sizes is not None:
        return measure_codec_sweep(sizes, device, repeats, rank, density)[0]
    torch, dev, timed, gen = _setup(device)
    tiny = torch.zeros(256, device=dev)
    launch = timed(lambda: tiny.add_(1.0), repeats)
    times = _times_at(torch, dev, numel, timed, gen, repeats, rank, density)
    costs = {}
    for family in FAMILIES:
        t = times[family]
        if family == "powersgd":
            per = {kind: [t[f"{kind}@{q}"][1] / t[f"{kind}@{q}"][0] for q in (1, rank)]
                   for kind in ("encode", "decode")}
            entry = {}
            for kind, (one, more) in per.items():
                slope = max(0.0, (more - one) / (rank - 1))
                entry[kind], entry[f"{kind}_per_rank"] = max(0.0, one - slope), slope
        else:
            entry = {kind: t[kind][1] / t[kind][0] for kind in ("encode", "decode")}
        entry["launch"] = launch
        costs[family] = entry
    return costs


def _describe(device, what, repeats):
    torch = _torch()
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if str(dev).startswith("cuda") else "CPU"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    return (f"measured by scalemodel.calibrate.codec_bench on {name} ({dev}), torch "
            f"{torch.__version__}, {what}, median of {repeats}, {stamp}")


def _sizes(text):
    try:
        return tuple(int(float(v)) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: comma-separated element "
                                         "counts, e.g. 65536,1048576,16777216") from None


def _check_device(ap, text):
    """``--device`` refused in one line (status 2) when torch does not know it or has no
    CUDA, before anything is measured."""
    from .compute import device_problem

    problem = device_problem(text)
    if problem:
        ap.error(problem)


def main(argv=None) -> int:
    """Measure and write a cluster profile with ``codec_costs``; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (``sys.argv[1:]`` when omitted) [-].
    """
    import attrs

    from ..cluster import ClusterProfile, load_cluster, save_cluster
    from ..profiles import WRITTEN
    written_at = len(WRITTEN)  # (what this run writes comes after)

    ap = argparse.ArgumentParser(prog="python -m scalemodel.calibrate.codec_bench",
                                 description="Measure the encode/decode cost of each gradient "
                                 "compressor over a sweep of sizes, fit a fixed plus a "
                                 "per-element cost, and write them into a cluster profile "
                                 "(codec_costs).")
    ap.add_argument("--out", required=True, help="cluster profile to write (JSON)")
    ap.add_argument("--cluster", default=None,
                    help="existing cluster profile to extend (default: a new one)")
    ap.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES,
                    help="comma-separated test sizes [elements] (default: "
                    "16384,65536,...,16777216: 16Ki to 16Mi, x4 apart)")
    ap.add_argument("--numel", type=int, default=None,
                    help="one test size instead of the sweep [elements]")
    ap.add_argument("--repeats", type=int, default=20, help="timed repetitions (median) "
                    "(default: %(default)s)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if any)")
    ap.add_argument("--rank", type=int, default=4, help="PowerSGD rank of the 2nd point "
                    "(default: %(default)s)")
    args = ap.parse_args(argv)
    from ..profiles import output_problem

    problem = output_problem(args.out)
    if problem:  # before the measurement, not after it
        ap.error(f"--out={args.out!r} {problem}")
    if args.repeats < 1 or (args.numel is not None and args.numel < 1):
        ap.error("--repeats and --numel must be >= 1")
    _check_device(ap, args.device)
    try:
        base = (load_cluster(args.cluster) if args.cluster else
                ClusterProfile(name="codec-bench", provenance={"source": "codec benchmark"}))
        extra = dict(base.extra)
        if args.numel is not None:
            costs = measure_codec_costs(numel=args.numel, device=args.device,
                                        repeats=args.repeats, rank=args.rank)
            what = f"{args.numel} elements"
            extra.pop("codec_sweep", None)
        else:
            def progress(done, total, elements):
                print(f"[codec_bench] measured {elements} elements ({done}/{total})",
                      file=sys.stderr, flush=True)

            costs, details = measure_codec_sweep(args.sizes, device=args.device,
                                                 repeats=args.repeats, rank=args.rank,
                                                 progress=progress)
            what = (f"sweep {min(args.sizes)}..{max(args.sizes)} elements, floor and "
                    "per-element fit")
            extra["codec_sweep"] = details
        prov = dict(base.provenance)
        prov["codec_costs"] = _describe(args.device, what, args.repeats)
        cluster = attrs.evolve(base, codec_costs=costs, provenance=prov, extra=extra)
        save_cluster(cluster, args.out)
    except ScalemodelError as exc:
        print(f"codec_bench: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only folder: the old file stays
        print(f"codec_bench: error: --out {args.out}: cannot be written "
              f"({exc.strerror or exc}); the file there, if any, is as it was",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from ..profiles import written_since  # (a signal held by the write: after it)
        print("codec_bench: interrupted; " + (f"{args.out} was written before it stopped"
                                              if written_since(written_at) else "--out not "
                                              "written (it is written once, at the end)"),
              file=sys.stderr)
        return 130
    width = max(len(f) for f in costs)
    worst = extra.get("codec_sweep", {}).get("worst_relative_error", {})
    print(f"{'family':<{width}}  {'encode [ns/el]':>14}  {'decode [ns/el]':>14}  "
          f"{'launch [us]':>11}  {'worst fit error':>15}")
    for family, c in costs.items():
        fit = f"{worst[family]:.0%}" if family in worst else "-"
        print(f"{family:<{width}}  {c['encode'] * 1e9:>14.4g}  {c['decode'] * 1e9:>14.4g}  "
              f"{c['launch'] * 1e6:>11.3g}  {fit:>15}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
