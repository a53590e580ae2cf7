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

plus ``launch``: the median time of a tiny element-wise kernel [s].

Command line (writes a cluster profile atomically, keeping what an existing one holds)::

    python -m scalemodel.calibrate.codec_bench --out cluster.json [--cluster existing.json]
        [--numel 4194304] [--repeats 20] [--device cuda]

torch is imported inside the functions, so scalemodel works without it.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time

from ..exceptions import CalibrationError, InvalidParameterError, ScalemodelError

__all__ = ["measure_codec_costs", "main", "FAMILIES"]

FAMILIES = ("fp16", "bf16", "int8", "signsgd", "topk", "randomk", "powersgd")
"""The families measured (keys of :data:`scalemodel.compressors.DEFAULT_CODEC_COSTS`)."""

CHUNK = 512  # elements per int8 scale (PyTorch quantization_perchannel_hook's default)


def _torch():
    try:
        import torch
    except ImportError:
        raise CalibrationError("the codec benchmark needs torch: pip install "
                               "'scalemodel[calibrate]'") from None
    return torch


def _timer(torch, device):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def median_time(fn, repeats):
        fn()  # warm-up (allocations, kernel caches)
        sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return median_time


def measure_codec_costs(numel=2**22, device=None, repeats=20, rank=4, density=0.01) -> dict:
    """Measure encode and decode costs per element of every family.

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

    Returns
    -------
    dict
        ``{family: {"encode": s/element, "decode": s/element, "launch": s}}``, with
        ``encode_per_rank`` and ``decode_per_rank`` [s/(element rank)] for powersgd; the
        format of ``ClusterProfile.codec_costs``.
    """
    for name, value, lo in (("numel", numel, 1024), ("repeats", repeats, 1), ("rank", rank, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise InvalidParameterError(name, value, f"must be an integer >= {lo}")
    if not (isinstance(density, (int, float)) and 0 < density <= 1):
        raise InvalidParameterError("density", density, "must be in (0, 1]")
    torch = _torch()
    dev = torch.device(device if device is not None else
                       ("cuda" if torch.cuda.is_available() else "cpu"))
    timed = _timer(torch, dev)
    gen = torch.Generator(device="cpu").manual_seed(0)
    numel = max(CHUNK, numel // CHUNK * CHUNK)
    grad = torch.randn(numel, generator=gen).to(dev)
    err = torch.zeros_like(grad)
    out = torch.zeros_like(grad)
    costs = {}

    tiny = torch.zeros(256, device=dev)
    launch = timed(lambda: tiny.add_(1.0), repeats)

    for family, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        half = grad.to(dtype)
        enc = timed(lambda: grad.to(dtype), repeats)
        dec = timed(lambda: half.to(torch.float32), repeats)
        costs[family] = {"encode": enc / numel, "decode": dec / numel}

    chunks = grad.view(-1, CHUNK)

    def int8_encode():
        scale = chunks.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
        return torch.round(chunks / scale).to(torch.int8), scale

    q, scale = int8_encode()
    enc = timed(int8_encode, repeats)
    dec = timed(lambda: out.view(-1, CHUNK).add_(q.to(torch.float32) * scale), repeats)
    costs["int8"] = {"encode": enc / numel, "decode": dec / numel}

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

    enc = timed(sign_encode, repeats)
    dec = timed(sign_decode, repeats)
    costs["signsgd"] = {"encode": enc / numel, "decode": dec / numel}

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
        enc = timed(encode, repeats)
        dec = timed(lambda: out.index_add_(0, idx, vals), repeats)
        costs[family] = {"encode": enc / numel, "decode": dec / k}

    side = int(math.isqrt(numel))
    mat = grad[: side * side].view(side, side)
    merr = torch.zeros_like(mat)
    per_rank = {}
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

        per_rank[r] = (timed(psgd_encode, repeats) / side**2,
                       timed(psgd_decode, repeats) / side**2)
    slope_e = max(0.0, (per_rank[rank][0] - per_rank[1][0]) / (rank - 1))
    slope_d = max(0.0, (per_rank[rank][1] - per_rank[1][1]) / (rank - 1))
    costs["powersgd"] = {"encode": max(0.0, per_rank[1][0] - slope_e),
                         "decode": max(0.0, per_rank[1][1] - slope_d),
                         "encode_per_rank": slope_e, "decode_per_rank": slope_d}
    for entry in costs.values():
        entry["launch"] = launch
    return costs


def _describe(device, numel, repeats):
    torch = _torch()
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if str(dev).startswith("cuda") else "CPU"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    return (f"measured by scalemodel.calibrate.codec_bench on {name} ({dev}), torch "
            f"{torch.__version__}, {numel} elements, median of {repeats}, {stamp}")


def main(argv=None) -> int:
    """Measure and write a cluster profile with ``codec_costs``; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (``sys.argv[1:]`` when omitted) [-].
    """
    import attrs

    from ..cluster import ClusterProfile, load_cluster, save_cluster

    ap = argparse.ArgumentParser(prog="python -m scalemodel.calibrate.codec_bench",
                                 description="Measure the encode/decode cost per element of "
                                 "each gradient compressor and write it into a cluster "
                                 "profile (codec_costs).")
    ap.add_argument("--out", required=True, help="cluster profile to write (JSON)")
    ap.add_argument("--cluster", default=None,
                    help="existing cluster profile to extend (default: a new one)")
    ap.add_argument("--numel", type=int, default=2**22, help="elements per test tensor")
    ap.add_argument("--repeats", type=int, default=20, help="timed repetitions (median)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if any)")
    ap.add_argument("--rank", type=int, default=4, help="PowerSGD rank of the 2nd point")
    args = ap.parse_args(argv)
    try:
        base = (load_cluster(args.cluster) if args.cluster else
                ClusterProfile(name="codec-bench", provenance={"source": "codec benchmark"}))
        costs = measure_codec_costs(numel=args.numel, device=args.device,
                                    repeats=args.repeats, rank=args.rank)
        prov = dict(base.provenance)
        prov["codec_costs"] = _describe(args.device, args.numel, args.repeats)
        cluster = attrs.evolve(base, codec_costs=costs, provenance=prov)
        save_cluster(cluster, args.out)
    except ScalemodelError as exc:
        print(f"codec_bench: error: {exc}", file=sys.stderr)
        return 2
    width = max(len(f) for f in costs)
    print(f"{'family':<{width}}  {'encode [ns/el]':>14}  {'decode [ns/el]':>14}")
    for family, c in costs.items():
        print(f"{family:<{width}}  {c['encode'] * 1e9:>14.4g}  {c['decode'] * 1e9:>14.4g}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
