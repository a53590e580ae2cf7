r"""The best DDP bucket size for a model on a cluster.

PyTorch DDP packs gradients into buckets of ``bucket_cap_mb`` (25 by default, counted in
MiB: ``bucket_cap_mb * 2**20`` bytes; the first bucket is 1 MiB,
:class:`~scalemodel.fusion.DDPBuckets`). Smaller buckets start communicating earlier and
leave less to send after backward; but each bucket costs the framework work
:math:`c_b` on the compute path (the cluster's ``bucket_overhead``, eq.
:eq:`iteration-cluster`) and the collective's own latency and launch :math:`c_0` on the
channel, so more buckets cost more. :func:`~scalemodel.best_bucket_size` evaluates the
iteration time (eq. :eq:`iteration-cluster`) for every candidate cap and returns the
fastest.

The default candidates are 1, 2, ..., 200 MB (:data:`DEFAULT_CANDIDATES`); around the best
of them the search is refined to 0.1 MB. Every candidate is one envelope of lines (its
buckets differ), evaluated in closed form. The iteration time is piecewise constant in
the cap (it changes only where a bucket boundary moves), so several caps can tie: the
default 25 MB is returned when it is among the fastest, else the smallest of them, and
the result's ``equivalent`` gives the range of the tied candidates.

Without a per-bucket cost (no cluster, or one whose ``bucket_overhead`` is 0 and that
has no ``host`` costs) smaller buckets are nearly free and the answer leans to the
smallest ones; the message says so. With the wrapper's host costs (a cluster's ``host``,
eq. :eq:`host-lead`) each bucket's launch costs host time, which shows only past the
host's lead over the GPU: a GPU-bound model can afford more buckets than a host-bound one.

By default the candidates keep DDP's 1 MiB first bucket, as PyTorch 1.x always did.
PyTorch 2.x keeps it only when ``bucket_cap_mb`` is not given; a cap that is passed caps
the first bucket too (``DDPBuckets(cap, first_bucket_bytes=cap)``, which reproduced 40 of
40 bucket counts DDP reported on an H200: ``benchmarks/validate_framework.py``):
``first_bucket_at_cap=True`` evaluates the candidates so (the default 25 MB baseline,
DDP without ``bucket_cap_mb``, keeps its 1 MiB first bucket).
"""

from __future__ import annotations

import attrs
import numpy as np

from .cluster import load_cluster
from .exceptions import InvalidParameterError, ParameterTypeError
from .fusion import MAX_BUCKET_CAP_MB, MiB, DDPBuckets
from .units import format_bandwidth

__all__ = ["best_bucket_size", "BucketSizeResult", "DEFAULT_CANDIDATES", "DEFAULT_BUCKET_MB"]

DEFAULT_BUCKET_MB = 25.0
"""PyTorch DDP's default ``bucket_cap_mb`` [MB, as DDP counts it: MiB]."""

DEFAULT_CANDIDATES = tuple(float(v) for v in range(1, 201))
"""Bucket caps tried by default: 1, 2, ..., 200 [MB], then refined to 0.1 MB."""

_REFINE_STEP = 0.1
_TIE = 1e-12  # relative: iteration times this close are the same bucketing


@attrs.frozen
class BucketSizeResult:
    """The fastest DDP bucket cap for one configuration.

    Attributes
    ----------
    bucket_cap_mb : float
        The cap to pass as ``DistributedDataParallel(bucket_cap_mb=...)``; with
        ``first_bucket_at_cap=True``, 25 when no cap passed beats DDP without the
        argument (keep the default: pass none; the message says so) [MB, DDP's MiB].
    iteration_time : float
        Iteration time with that cap [s].
    scaling_factor : float
        Single-worker over that iteration time [-].
    default_iteration_time : float
        Iteration time with DDP's default 25 MB [s].
    default_scaling_factor : float
        Scaling factor with the default 25 MB [-].
    n_buckets : int
        Buckets per iteration with the best cap [-].
    equivalent : tuple
        ``(low, high)``: the smallest and largest candidates as fast as the best [MB].
    candidates : numpy.ndarray
        Every cap evaluated, ascending [MB].
    times : numpy.ndarray
        Iteration time of each candidate [s].
    message : str
        One sentence with the answer and what it rests on.
    settings : dict
        What the answer assumed (``Scenario.settings``), tensor and pipeline parallelism
        included [-].
    interval : tuple or None
        On a fitted cluster with intervals or alternative explanations, ``(low, high)``:
        the best cap under each of them (:func:`~scalemodel.intervals.answer_interval`
        over the fit's corners), the range the calibration cannot narrow; None
        otherwise [MB].
    """

    bucket_cap_mb: float
    iteration_time: float
    scaling_factor: float
    default_iteration_time: float
    default_scaling_factor: float
    n_buckets: int
    equivalent: tuple
    candidates: np.ndarray = attrs.field(repr=False)
    times: np.ndarray = attrs.field(repr=False)
    message: str = ""
    settings: dict = attrs.field(factory=dict)
    interval: tuple | None = None

    @property
    def speedup(self) -> float:
        """Default iteration time over the best candidate's [-]: >= 1 when the candidates
        include the default (25 MB, as they do unless ``candidates`` leaves it out), below
        1 when every candidate asked is slower than the default (the message then says
        to keep it)."""
        return self.default_iteration_time / self.iteration_time


def _check_candidates(candidates):
    """The candidate caps [MB] as a sorted array and whether to refine around the best;
    a documented error naming ``candidates`` for anything but numbers (not text, not
    bools) in (0, :data:`~scalemodel.fusion.MAX_BUCKET_CAP_MB`], one list of them."""
    if candidates is None:
        return np.asarray(DEFAULT_CANDIDATES), True
    if isinstance(candidates, (str, bytes, dict, set)) or isinstance(candidates, bool):
        raise ParameterTypeError("candidates", candidates, "a sequence of bucket caps [MB]")
    items = list(candidates) if isinstance(candidates, (list, tuple, np.ndarray)) \
        else [candidates]
    for v in items:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
            raise ParameterTypeError("candidates", candidates,
                                     "one list of numbers: bucket caps [MB]")
    try:
        c = np.atleast_1d(np.asarray(items, dtype=float))
    except OverflowError:
        raise InvalidParameterError("candidates", candidates, "every bucket cap must be "
                                    f"at most {MAX_BUCKET_CAP_MB:g} MB") from None
    if c.ndim != 1 or c.size == 0:
        raise InvalidParameterError("candidates", candidates, "needs at least one cap [MB]")
    bad = ~(np.isfinite(c) & (c > 0) & (c <= MAX_BUCKET_CAP_MB))
    if bad.any():
        raise InvalidParameterError("candidates", float(c[bad][0]), "every bucket cap "
                                    f"must be finite, > 0 and at most {MAX_BUCKET_CAP_MB:g} "
                                    "MB (a terabyte)")
    return np.unique(c), False


def _scenario(model, kw):
    from .model import Scenario

    kw = {k: v for k, v in kw.items() if v is not None}
    return Scenario.build(model, fusion=DDPBuckets(), sharding="none", **kw)


def best_bucket_size(model, n, bw, *, cluster=None, candidates=None, utilization=1.0,
                     compression=1.0, algorithm=None, alpha=None, codec_cost=0.0,
                     gpus_per_node=None, nics_per_node=None, intra_bw=None,
                     intra_alpha=None, ps_servers=None, activation_checkpointing=None,
                     offload=None, tp=1, pp=1, microbatches=None,
                     virtual_stages=1, sequence_parallel=False,
                     first_bucket_at_cap=False) -> BucketSizeResult:
    """The DDP ``bucket_cap_mb`` that minimizes the iteration time (see the module).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        A built-in profile name, a profile file or a profile object [-].
    n : int
        Number of workers [workers].
    bw : float or str
        Line rate of each worker's link (each NIC's with a topology) [bits/s].
    cluster : ClusterProfile, str, os.PathLike or None
        A calibrated cluster; its ``bucket_overhead`` is what makes small buckets cost
        [-].
    candidates : sequence of float or None
        Caps to try; ``None`` tries :data:`~scalemodel.buckets.DEFAULT_CANDIDATES` and
        refines around the best [MB].
    utilization, compression, algorithm, alpha, codec_cost, gpus_per_node, nics_per_node, intra_bw, intra_alpha, ps_servers
        As in :func:`~scalemodel.scaling_factor`, scalars: ``utilization`` [-],
        ``compression`` [-], ``algorithm`` [-], ``alpha`` [s], ``codec_cost`` [s/byte],
        ``gpus_per_node`` [workers], ``nics_per_node`` [NICs], ``intra_bw`` [bits/s],
        ``intra_alpha`` [s], ``ps_servers`` [servers].
    activation_checkpointing, offload, tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [GPUs], [stages],
        [micro-batches], [chunks], [-]. With ``tp`` or ``pp``, ``n`` counts all GPUs and the buckets are
        those of the data-parallel all-reduce of one GPU's gradients over ``n / (tp pp)``
        replicas (Megatron's DDP buckets its stage's share; :mod:`scalemodel.parallel`).
    first_bucket_at_cap : bool
        The first bucket of a candidate cap is the cap (PyTorch 2.x when
        ``bucket_cap_mb`` is passed), not 1 MiB (PyTorch 1.x, and 2.x without the
        argument: the default 25 MB's baseline keeps it) [-].

    Returns
    -------
    BucketSizeResult

    Examples
    --------
    >>> import scalemodel
    >>> cl = scalemodel.ClusterProfile(bucket_overhead=80e-6, provenance={"source": "doc"})
    >>> res = scalemodel.best_bucket_size("resnet50", 16, "100Gbps", cluster=cl)
    >>> res.bucket_cap_mb >= 25, res.iteration_time <= res.default_iteration_time
    (True, True)
    """
    kw = dict(candidates=candidates, utilization=utilization, compression=compression,
              algorithm=algorithm, alpha=alpha, codec_cost=codec_cost,
              gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, intra_bw=intra_bw,
              intra_alpha=intra_alpha, ps_servers=ps_servers,
              activation_checkpointing=activation_checkpointing, offload=offload, tp=tp,
              pp=pp, microbatches=microbatches, virtual_stages=virtual_stages,
              sequence_parallel=sequence_parallel, first_bucket_at_cap=first_bucket_at_cap)
    res = _best_bucket_size(model, n, bw, cluster=cluster, **kw)
    cl = None if cluster is None else load_cluster(cluster)
    if cl is None or not cl.alternatives and all(c is cl for c in cl.corners()):
        return res
    import warnings

    from .intervals import answer_interval

    with warnings.catch_warnings():  # the point's own call said them once
        warnings.simplefilter("ignore")
        iv = answer_interval(lambda c: _best_bucket_size(model, n, bw, cluster=c, **kw)
                             .bucket_cap_mb, cl, res.bucket_cap_mb)
    if iv.low == iv.high:
        return attrs.evolve(res, interval=(iv.low, iv.high))
    return attrs.evolve(res, interval=(iv.low, iv.high), message=(
        f"{res.message}; over the fit's intervals and explanations the best cap lies "
        f"between {iv.low:g} and {iv.high:g} MiB"))


def _best_bucket_size(model, n, bw, *, cluster, candidates, utilization, compression,
                      algorithm, alpha, codec_cost, gpus_per_node, nics_per_node, intra_bw,
                      intra_alpha, ps_servers, activation_checkpointing, offload, tp, pp,
                      microbatches, virtual_stages, sequence_parallel,
                      first_bucket_at_cap) -> BucketSizeResult:
    """:func:`best_bucket_size` on one cluster, without the interval over its fit."""
    from .model import _prepare, effective_utilization, warn_unused_codec_cost
    from .parallel import check_sequence_parallel

    n, bw, u, r = _prepare(n, bw, utilization, compression)
    warn_unused_codec_cost(codec_cost, r)
    for name, v in (("n", n), ("bw", bw), ("utilization", u), ("compression", r)):
        if np.ndim(v):
            raise ParameterTypeError(name, v, "a scalar (best_bucket_size answers one "
                                     "configuration)")
    cand, refine = _check_candidates(candidates)
    if not isinstance(first_bucket_at_cap, (bool, np.bool_)):
        raise ParameterTypeError("first_bucket_at_cap", first_bucket_at_cap, "True or False")
    check_sequence_parallel(sequence_parallel)  # before _scenario drops a None
    base = _scenario(model, dict(cluster=cluster, algorithm=algorithm, alpha=alpha,
                                 codec_cost=codec_cost, gpus_per_node=gpus_per_node,
                                 nics_per_node=nics_per_node, intra_bw=intra_bw,
                                 intra_alpha=intra_alpha, ps_servers=ps_servers,
                                 activation_checkpointing=activation_checkpointing,
                                 offload=offload, tp=tp, pp=pp, microbatches=microbatches,
                                 virtual_stages=virtual_stages,
                                 sequence_parallel=sequence_parallel))
    n_job, bw_job = n, bw
    n, bw = base.data_parallel(n, bw)  # scalemodel.parallel: replicas, one ring's rate
    x = 1.0 / (effective_utilization(base, bw, u) * bw * r)

    def policy(cap, at_cap=bool(first_bucket_at_cap)):
        return DDPBuckets(cap * MiB, first_bucket_bytes=cap * MiB) if at_cap \
            else DDPBuckets(cap * MiB)

    def times(caps, at_cap=bool(first_bucket_at_cap)):
        return np.array([float(attrs.evolve(base, fusion=policy(c, at_cap))
                               .iteration_times(n, x, r)) for c in caps])

    t = times(cand)
    if refine:
        best = float(cand[int(np.argmin(t))])
        fine = np.round(np.arange(max(best - 1.0, _REFINE_STEP), best + 1.0 + 1e-9,
                                  _REFINE_STEP), 6)
        fine = fine[~np.isin(fine, cand)]
        cand = np.concatenate((cand, fine))
        t = np.concatenate((t, times(fine)))
        order = np.argsort(cand)
        cand, t = cand[order], t[order]
    # the default: DDP without bucket_cap_mb (a 1 MiB first bucket, whatever the version)
    default = (t[cand == DEFAULT_BUCKET_MB][0]
               if np.any(cand == DEFAULT_BUCKET_MB) and not first_bucket_at_cap
               else float(times([DEFAULT_BUCKET_MB], False)[0]))
    return _result(base, n_job, bw_job, cand, t, float(default), policy,
                   bool(first_bucket_at_cap))


def _result(base, n, bw, cand, t, default, policy, at_cap):
    """The result object and its message (``policy(cap)``: the candidate's fusion;
    ``at_cap``: whether its first bucket is the cap)."""
    low = float(t.min())
    tied = cand[t <= low * (1 + _TIE)]
    best = DEFAULT_BUCKET_MB if DEFAULT_BUCKET_MB in tied else float(tied[0])
    t_best = low if best != DEFAULT_BUCKET_MB or at_cap else default
    # a cap passed caps the first bucket too: when none beats DDP without the argument
    # (its 1 MiB first bucket), the answer is to pass none (it recommended a cap 0.6 %
    # slower than the default, 'faster' by -0.57 %)
    keep = at_cap and default <= low * (1 + _TIE)
    if keep:
        best, t_best = DEFAULT_BUCKET_MB, default
    t1 = base.profile.iteration_time
    k = len(attrs.evolve(base, fusion=DDPBuckets(best * MiB) if keep
                         else policy(best)).buckets)
    where = (f"{base.profile.name} on {n} worker{'s' if n != 1 else ''} at "
             f"{format_bandwidth(bw)}")
    mp = base.model_parallel
    if mp is not None:
        sched = ("" if mp.virtual_stages == 1
                 else f", interleaved 1F1B with {mp.virtual_stages} chunks per stage")
        sched += ", sequence parallel" if mp.sequence_parallel else ""
        where += (f" (the data-parallel dimension of tp={mp.tp} x pp={mp.pp}{sched}: "
                  f"{mp.dp(n)} replicas)")
        n = mp.dp(n)
    if keep:
        msg = (f"{where}: DDP's default (bucket_cap_mb not passed: 25 MiB with a 1 MiB "
               f"first bucket, {t_best * 1e3:.4g} ms per iteration) is already among the "
               "fastest; a cap passed, which caps the first bucket too, is not faster "
               f"(best {float(tied[0]):g} MiB: {low * 1e3:.4g} ms)")
    elif best == DEFAULT_BUCKET_MB:
        msg = (f"{where}: DDP's default bucket_cap_mb=25 is already among the fastest "
               f"({t_best * 1e3:.4g} ms per iteration)")
    elif default < t_best * (1 - _TIE):  # the candidates asked leave out a faster default
        msg = (f"{where}: of the candidates asked, bucket_cap_mb={best:g} is the fastest, "
               f"{t_best * 1e3:.4g} ms per iteration, {(t_best / default - 1) * 100:.2g} % "
               f"slower than the default 25 MiB ({default * 1e3:.4g} ms): keep the default")
    else:
        msg = (f"{where}: bucket_cap_mb={best:g} takes {t_best * 1e3:.4g} ms per iteration, "
               f"{(default / t_best - 1) * 100:.2g} % faster than the default 25 MiB "
               f"({default * 1e3:.4g} ms)")
    cl = base.cluster
    if n > 1 and (cl is None or (cl.bucket_overhead == 0 and cl.host is None)):
        msg += ("; without a per-bucket cost (the cluster's bucket_overhead) small buckets "
                "look free, so calibrate one before shrinking them")
    return BucketSizeResult(
        bucket_cap_mb=best, iteration_time=t_best, scaling_factor=t1 / t_best,
        default_iteration_time=default, default_scaling_factor=t1 / default, n_buckets=k,
        equivalent=(best, best) if keep else (float(tied[0]), float(tied[-1])),
        candidates=cand, times=t,
        message=msg, settings=base.settings())
