"""Priors of :func:`~scalemodel.fit_cluster`: what each fitted parameter is pulled towards.

Each fitted parameter :math:`\\theta_p` is fitted in a transformed coordinate
:math:`g(\\theta_p)` (the log of the value for ``log`` parameters) and pulled towards its
ideal default by the penalty :math:`\\big((g(\\theta_p) - g(\\theta_p^0))/w_p\\big)^2`,
with the scale :math:`w_p` and the bounds of :data:`~scalemodel.fitting.PRIORS`, each with
its source; :data:`UNIT_PRIORS` replaces the per-bucket cost's where every run gathers
its parameters per wrapped unit (the cost is then the wrapper's per unit).
"""

from __future__ import annotations

import math

import attrs

__all__ = ["PRIORS", "UNIT_PRIORS", "AUTO", "NETWORKS", "TRANSPORT_SEES", "NCCL_HOP_LATENCY",
           "NCCL_NETWORKS"]


@attrs.frozen
class _Prior:
    default: float
    scale: float
    lower: float
    upper: float
    unit: str
    source: str
    log: bool = False  # transform g = ln(value / reference) (value > 0)


PRIORS = {
    "compute_slowdown": _Prior(1.0, math.log(1.15), 1.0, 3.0, "-", "Zhang et al. "
                               "(arXiv:2006.10103) Fig. 2: distributed compute up to 15 % "
                               "slower; scale ln 1.15", log=True),
    "ceiling": _Prior(math.inf, math.log(4.0), 0.02, 1.0, "bits/s", "transports reach "
                      "1/4 to all of the line rate (Zhang et al. Fig. 4); scale ln 4 below "
                      "the largest line rate of the runs", log=True),
    "utilization": _Prior(1.0, math.log(1 / 0.9), 0.02, 1.0, "-", "transports fill a "
                          "slow link (Zhang et al. Fig. 4: 95 % of 1 Gbit/s used); scale "
                          "ln(1/0.9) below full line rate", log=True),
    "sync_overhead": _Prior(0.0, 1e-2, 0.0, 0.5, "s", "scale 10 ms: twice Horovod's "
                            "cycle time (5 ms, HOROVOD_CYCLE_TIME), which the last "
                            "gradients wait for before their negotiation"),
    "collective_overhead": _Prior(0.0, 5e-4, 0.0, 0.02, "s", "scale 0.5 ms: kernel launch "
                                  "(~10 us) up to per-tensor framework negotiation"),
    "alpha": _Prior(0.0, 5e-5, 0.0, 2e-3, "s", "scale 50 us: NCCL's network hop latency "
                    "(14 us, Simple protocol) plus its base (8.4 us), from its tuning model"),
    "overlap": _Prior(1.0, 0.25, 0.0, 1.0, "-", "GPUs overlap fully (own copy and "
                      "compute engines); scale 0.25"),
    "host_overhead": _Prior(0.0, 2e-10, 0.0, 5e-9, "s/byte", "scale 0.2 ns/byte (a "
                            "memory copy at 5 GB/s)"),
    "bucket_overhead": _Prior(0.0, 1e-4, 0.0, 0.01, "s", "scale 0.1 ms: PyTorch's DDP "
                              "benchmark (pytorch/pytorch benchmarks/distributed/ddp/"
                              "README.md, 8-16 V100) measures 1 MB buckets 0.7-3.8 % slower "
                              "than 25 MB, about 75-95 us per extra bucket"),
    "iteration_overhead": _Prior(0.0, 5e-3, 0.0, 0.5, "s", "scale 5 ms: the same benchmark "
                                 "measures DDP on one GPU 1.4-5.8 % slower than no DDP "
                                 "(ResNet-50: 0.100 s against 0.097 s)"),
    "straggler_spread": _Prior(0.0, 0.05, 0.0, 1.0, "-", "scale 5 %: per-iteration compute "
                               "of a GPU worker varies by a few percent (the calibration's "
                               "measured p10-p90 spread)"),
    "efficiency": _Prior(1.0, math.log(1.5), 0.05, 1.0, "-", "model FLOPs utilisation of a "
                         "FLOP-derived profile, centred on the profile's own (its "
                         "provenance); scale ln 1.5: published LLM training reaches 30-55 % "
                         "(Megatron-LM 52 % on A100, Narayanan et al. arXiv:2104.04473; "
                         "PaLM 46 %, Chowdhery et al. arXiv:2204.02311)", log=True),
}
"""Weakly informative priors of the fitted parameters: ideal default, scale of the
penalty (in the log of the value for ``log`` parameters, in the value's unit otherwise),
bounds and their source. ``ceiling`` bounds are fractions of the largest line rate."""

UNIT_PRIORS = {
    "bucket_overhead": _Prior(0.0, 1e-2, 0.0, 0.1, "s", "scale 10 ms per wrapped unit and "
                              "micro-batch: a sharded wrapper runs its hooks (parameter "
                              "fetch, release, gradient partition) per unit in the forward, "
                              "the recomputed forward and the backward of every micro-batch. "
                              "PyTorch FSDP spends 12.6 ms of host time (8.1 ms after the "
                              "fix) to unshard, write back and reshard one unit of 400 "
                              "parameters (pytorch/pytorch#96958: 6.1/4.3 + 1.8/1.1 + "
                              "4.7/2.8 ms); FSDP2's pre-forward costs about 1 ms per module "
                              "call (pytorch/pytorch#173680), FSDP1's root pre-forward "
                              "0.59 ms per call (huggingface/blog#1649 profile). DeepSpeed "
                              "ZeRO-3 hooks every submodule: no per-hook figure in ms was "
                              "found, only that coalescing them gains 40 % on a "
                              "host-bound device (deepspeedai/DeepSpeed#6649), halves the "
                              "fetch/release CPU time (#6694), and that fixing its prefetch "
                              "took a 10B model from ~16 to ~37 TFLOP/s per GPU (#1069). "
                              "The scale is the broadest these figures support (ten hook "
                              "calls of ~1 ms, or one unshard and reshard of a large unit), "
                              "not a measurement of DeepSpeed's hooks; bound 0.1 s"),
}
"""Priors that replace those of :data:`~scalemodel.fitting.PRIORS` when every run gathers
its parameters per wrapped unit (``sharding="zero3"`` or ``"hybrid_shard"``: FSDP
FULL_SHARD, DeepSpeed ZeRO-3). There the cluster's ``bucket_overhead`` is not DDP's work
per gradient bucket (0.1 ms) but the wrapper's host work per unit and micro-batch, up to
a hundred times larger. Runs that mix sharded and unsharded configurations keep DDP's
prior (one value serves both)."""

_ORDER = ("ceiling", "utilization", "sync_overhead", "collective_overhead",
          "compute_slowdown", "iteration_overhead", "bucket_overhead", "straggler_spread",
          "alpha", "overlap", "host_overhead", "efficiency")
"""Tie-break order of parameters of equal evidence."""

AUTO = ("ceiling", "utilization", "sync_overhead", "collective_overhead", "compute_slowdown",
        "iteration_overhead", "bucket_overhead", "straggler_spread", "efficiency")
"""Parameters :func:`~scalemodel.fit_cluster` chooses among by itself (``straggler_spread``
only when the runs have at least three worker counts above one, or two with a measured
compute slowdown; ``efficiency`` only with runs that give an absolute iteration time on a
FLOP-derived profile and no single-worker time; ``ceiling`` and ``utilization`` only
without transport data). The others
(``alpha``, ``overlap``, ``host_overhead``) come from the transport calibration or
``fit=``: their signatures in a few scaling runs are too close to the ones above to tell
apart."""

NCCL_HOP_LATENCY = {"net": 14e-6, "nvlink": 3.4e-6, "pci": 5.7e-6}
"""NCCL's own per-hop latencies of its ring with the Simple protocol (the one that carries
gradient buckets), across nodes (``"net"``) and inside a node by link [s]: the hardware
latencies of its tuning model (src/graph/tuning.cc, ``hwLat``, v2.30.7-1; summarized in
../shared/notes/nccl_cost_model.md section 3). A fit whose ``network=`` is an NCCL
transport, without transport data, holds ``alpha`` at the ideal model's 0 and, where the
runs do not see it (:data:`~scalemodel.fitting.UNSEEN`), takes ``[0, "net"]`` as its
interval (status ``"prior"``): the ring's steps across nodes (2(m - 1) on m nodes; all
2(n - 1) without a topology) and the tree's depth may cost up to what NCCL itself
expects, a cost that grows with n and that runs at a few worker counts cannot tell from
zero. The point stays at 0: on InternLM's published 8-1024 GPU
runs (benchmarks/validate_large_n.py, its "latency held at NCCL's own per-hop values"
lines: the ZeRO-1 series calibrated at 8 and 64 GPUs) holding ``alpha`` at 14 us moved
the 1024-GPU error from -9.8 % to -12.9 %, and adding the intra-node 3.4 us to -17.9 %:
NCCL's Simple per-hop values, made for choosing an algorithm, overstate what those runs
paid."""

NCCL_NETWORKS = ("nccl-ib", "nccl-roce", "nccl-socket")
"""The ``network=`` priors of NCCL transports, whose per-hop latencies are
:data:`NCCL_HOP_LATENCY`."""

TRANSPORT_SEES = ("alpha", "utilization", "ceiling", "host_overhead")
"""What a transport measurement fixes (with the intra-node link of the topology); with
``transport=`` the runs fit only the others."""


@attrs.frozen
class _NetworkPrior:
    utilization: float  # centre of the achieved fraction of a slow line rate [-]
    utilization_scale: float  # in ln(1/u)
    ceiling: float | None  # centre of the ceiling [bits/s]; None: no ceiling expected
    ceiling_scale: float  # in ln(ceiling)
    source: str


NETWORKS = {
    "nccl-ib": _NetworkPrior(0.92, math.log(1 / 0.85), None, math.log(1 / 0.8),
                             "NCCL over InfiniBand reaches 85-98 % of the line rate in "
                             "nccl-tests' all_reduce_perf busbw: 12.2 GB/s on one 100 Gbit/s "
                             "EDR card (NVIDIA/nccl-tests#29), 84.8 GB/s average and 96 GB/s "
                             "peak on 4x HDR 200 Gbit/s per 8 GPUs (NVIDIA/nccl-tests#119); "
                             "no ceiling below the line rate: a ceiling at 80 % of it costs "
                             "one unit of prior, at 20 % (a network explanation of what is "
                             "framework or compute) 52"),
    "nccl-roce": _NetworkPrior(0.88, math.log(1 / 0.7), None, math.log(2.0),
                               "NCCL over RoCE: as InfiniBand where tuned (86 of 96 GB/s, "
                               "NVIDIA/nccl#1048) but often well below it untuned (50 of 200 "
                               "GB/s with GID index 3, NVIDIA/nccl-tests#232): centre 0.88, "
                               "wider scale; a ceiling at 25 % of the line rate (the untuned "
                               "case) costs 4 units of prior"),
    "nccl-socket": _NetworkPrior(0.9, math.log(1 / 0.8), 30e9, math.log(2.0),
                                 "NCCL's socket transport over TCP fills a slow link (95 % of "
                                 "1 Gbit/s, Zhang et al. arXiv:2006.10103 Fig. 4) but stops "
                                 "near 25 Gbit/s on 100 GbE (ibid., p3dn), 36-42 Gbit/s busbw "
                                 "at 8-16 MB on 100 Gbit/s TCP (NVIDIA/nccl#450), under 60 % "
                                 "of 32 Gbit/s (NVIDIA/nccl#209): ceiling centred at 30 Gbit/s, "
                                 "scale ln 2"),
    "gloo": _NetworkPrior(0.88, math.log(1 / 0.8), 9e9, math.log(3.0),
                          "Gloo's ring all-reduce over TCP: 110 of 125 MB/s on 1 Gbit/s "
                          "(pytorch/gloo#21), 1.07 GB/s (8.6 Gbit/s) on 40 GbE with one core "
                          "(pytorch/gloo#248): ceiling centred at 9 Gbit/s, scale ln 3"),
    "mpi": _NetworkPrior(0.85, math.log(1 / 0.7), 10e9, math.log(4.0),
                         "MPI over TCP: no nccl-tests-like published figure was found; "
                         "assumed as Gloo (one stream per peer) with a wider scale, ln 4"),
}
"""Priors of the achieved bandwidth per transport (``fit_cluster(network=...)``): the
centre and scale of the utilization of a slow link and of the ceiling (centred on the
line rate where ``ceiling`` is None), from published nccl-tests and Gloo benchmark
figures (each with its source). They rank the explanations of runs that cannot tell
them apart: on a transport that reaches its line rate (NCCL over InfiniBand) a ceiling
at a small fraction of it pays a large prior, so an equally good compute or framework
explanation ranks first and the ceiling stays an alternative; transport data
(``transport=``) replaces these priors. A utilization or ceiling held at the ideal
value that the runs do not see takes the central range of its prior here as its
interval (status ``"prior"``, :data:`~scalemodel.fitting.UNSEEN`), so answers at other
line rates carry what the runs cannot tell. Without ``network`` the generic priors of
:data:`~scalemodel.fitting.PRIORS` apply (no ceiling, full utilization expected)."""
