"""The results of reading traces (:class:`TraceReport` and its parts), :func:`read_trace`,
recording a trace (:func:`record_trace`) and the ``from-trace`` command line.

Part of :mod:`scalemodel.calibrate.trace`, which re-exports these names and describes the
method.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path

import attrs
import numpy as np

from ..exceptions import (CalibrationError, CalibrationWarning, ProfileFormatError,
                          ScalemodelError)
from .trace_analysis import _BUS_FACTOR, COLLECTIVE_KINDS, _analyse
from .trace_read import _collect

__all__ = ["TraceReport", "CollectiveSummary", "ReplayCheck", "read_trace", "main",
           "record_trace", "rank_trace_path"]

# =========================================================================== results

def _f(x):
    """A float for JSON, None for NaN / None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@attrs.frozen
class CollectiveSummary:
    """One kind of collective in a trace.

    Attributes
    ----------
    kind : str
        ``"all_reduce"``, ``"all_gather"``, ``"all_to_all"``, ... [-].
    calls : int
        Calls issued in the profiled steps, over all ranks read [-].
    count_per_step : float
        Calls per step and rank [-].
    total_bytes : float or None
        Input bytes per rank, summed over the calls (None when a size is missing) [bytes].
    bytes_per_step : float or None
        Median over steps of the bytes per rank [bytes].
    sizes_known : int
        Calls whose size the trace gives [-].
    size_source : str or None
        Where the sizes come from (``"kernel args"``, ``"record_param_comms"``,
        ``"annotation Input Dims"``) [-].
    time_total : float or None
        Busy time of the calls' kernels (gloo: executions), summed [s].
    time_per_step : float or None
        Median over steps of that time [s].
    algorithms, protocols : dict
        NCCL algorithm and protocol from the kernel names, with their call counts [-].
    algbw : float or None
        Achieved algorithm bandwidth, nccl-tests' :math:`S/t` over the calls with size and
        time (:math:`S` the whole buffer: :math:`n` times the input for all-gather) [bits/s].
    busbw : float or None
        Bus bandwidth, ``algbw`` times nccl-tests' bus factor (all-reduce
        :math:`2(n-1)/n`; all-gather, reduce-scatter, all-to-all :math:`(n-1)/n`) [bits/s].
    group_size : int or None
        Ranks taking part (from the trace, else the world size) [-].
    gradient : int
        Calls that are gradient buckets (all-reduces issued during backward) [-].
    """

    kind: str
    calls: int
    count_per_step: float
    total_bytes: float | None
    bytes_per_step: float | None
    sizes_known: int
    size_source: str | None
    time_total: float | None
    time_per_step: float | None
    algorithms: dict
    protocols: dict
    algbw: float | None
    busbw: float | None
    group_size: int | None
    gradient: int

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {k: (_f(v) if isinstance(v, float) else v)
                for k, v in attrs.asdict(self).items()}


@attrs.frozen
class ReplayCheck:
    """The model's prediction of the traced configuration next to the measured step.

    Attributes
    ----------
    world_size : int
        Workers [workers].
    measured : float
        Median ProfilerStep duration [s].
    predicted : float or None
        :func:`scalemodel.iteration_time` with the trace's profile and fitted cluster [s];
        None when it cannot be made (``reason``).
    error : float or None
        ``predicted - measured`` [s].
    relative_error : float or None
        ``error / measured`` [-].
    predicted_overlap_only : float or None
        The same recurrence with every bucket's measured duration instead of the fitted
        transport [s].
    overlap_only_error : float or None
        ``predicted_overlap_only - measured`` [s].
    buckets : int
        Gradient buckets per step in the model [-].
    uncovered : dict
        Collectives the model does not describe: ``{kind: {"calls_per_step", "time_per_step"
        [s], "share" [-]}}`` (time on the communication stream per step and its share of
        the step).
    iteration : dict
        The prediction's breakdown (:class:`~scalemodel.IterationTime` fields) [s].
    reason : str or None
        Why there is no prediction, or what limits it [-].
    """

    world_size: int
    measured: float
    predicted: float | None
    error: float | None
    relative_error: float | None
    predicted_overlap_only: float | None
    overlap_only_error: float | None
    buckets: int
    uncovered: dict
    iteration: dict
    reason: str | None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        d = attrs.asdict(self)
        for k in ("measured", "predicted", "error", "relative_error",
                  "predicted_overlap_only", "overlap_only_error"):
            d[k] = _f(d[k])
        return d


@attrs.frozen(eq=False)
class TraceReport:
    """What :func:`read_trace` found in one job's trace(s).

    Attributes
    ----------
    files : tuple of str
        The traces read, one per rank [-].
    ranks : tuple
        Their ranks (None where the trace does not say) [-].
    world_size : int
        Ranks in the job, from ``distributedInfo`` [workers].
    backend : str or None
        Process-group backend (``nccl``, ``gloo``) [-].
    nccl_version : str or None
        NCCL version [-].
    gpus : tuple of str
        GPU names of the ranks read (empty on CPUs) [-].
    timeline : str
        ``"gpu"`` (device times from GPU activity) or ``"cpu"`` (gloo, CPU operators) [-].
    step_time : float
        Median duration of all ProfilerStep spans of all ranks read [s].
    step_time_spread : dict
        ``min``, ``p25``, ``p75``, ``max`` of those durations [s].
    step_count : int
        ProfilerStep spans [-].
    step_times : numpy.ndarray
        Every ProfilerStep duration, rank by rank [s].
    per_step : dict
        ``{"median": {...}, "steps": [...]}``: forward, backward, optimizer, other,
        compute (busy time on the compute streams), communication (busy time on the
        communication streams) and exposed_communication (communication while no compute
        runs), per step and their medians [s].
    collectives : dict
        ``{kind: CollectiveSummary}``.
    undetermined : dict
        ``{what: why}``: what the trace does not say [-].
    notes : tuple of str
        Remarks on the reading (left-out events, fit warnings) [-].
    buckets : dict
        Gradient buckets, medians over steps: ``bytes`` [bytes], ``ready`` [s],
        ``duration`` [s] per bucket, in communication order.
    profile : WorkloadProfile or None
        The workload profile (see the module notes) [-].
    cluster : ClusterProfile or None
        The fitted cluster profile [-].
    fits : dict
        ``{kind: CollectiveFit}`` of every collective that could be fitted [-].
    compute_slowdown : dict
        ``value`` (eq. :eq:`trace-slowdown`, or None), ``coverage``, ``reason`` [-].
    replay : ReplayCheck or None
        The replay check [-].
    file_bytes : int
        Size of the files read [bytes].
    """

    files: tuple
    ranks: tuple
    world_size: int
    backend: str | None
    nccl_version: str | None
    gpus: tuple
    timeline: str
    step_time: float
    step_time_spread: dict
    step_count: int
    step_times: np.ndarray
    per_step: dict
    collectives: dict
    undetermined: dict
    notes: tuple
    buckets: dict
    profile: object
    cluster: object
    fits: dict
    compute_slowdown: dict
    replay: ReplayCheck | None
    file_bytes: int

    def to_dict(self) -> dict:
        """The report as one JSON-ready object (what ``from-trace --json`` prints)."""
        return {
            "files": list(self.files), "ranks": list(self.ranks),
            "world_size": self.world_size, "backend": self.backend,
            "nccl_version": self.nccl_version, "gpus": list(self.gpus),
            "timeline": self.timeline, "step_time": self.step_time,
            "step_time_spread": self.step_time_spread, "step_count": self.step_count,
            "step_times": self.step_times.tolist(), "per_step": self.per_step,
            "collectives": {k: v.to_dict() for k, v in self.collectives.items()},
            "buckets": self.buckets, "compute_slowdown": self.compute_slowdown,
            "replay": None if self.replay is None else self.replay.to_dict(),
            "fits": {k: v.to_dict() for k, v in self.fits.items()},
            "profiles": {"workload": None if self.profile is None else self.profile.to_dict(),
                         "cluster": None if self.cluster is None else self.cluster.to_dict()},
            "undetermined": self.undetermined, "notes": list(self.notes),
        }

    def summary(self) -> str:
        """A few lines for people."""
        ms = 1e3
        sp = self.step_time_spread
        lines = [f"trace: {', '.join(self.files)}",
                 f"  job: world size {self.world_size}, backend {self.backend}, "
                 + (f"NCCL {self.nccl_version or '?'}, " if self.backend == "nccl" else "")
                 + f"{', '.join(sorted(set(self.gpus))) or 'no GPU'} "
                 f"(ranks read: {', '.join(str(r) for r in self.ranks)})",
                 f"  step time: {self.step_time * ms:.2f} ms (median of {self.step_count} "
                 f"ProfilerSteps; {sp['min'] * ms:.2f} to {sp['max'] * ms:.2f} ms)"]
        med = self.per_step["median"]
        where = "the GPU" if self.timeline == "gpu" else "the CPU threads"
        lines.append(f"  per step (median, busy time on {where}): "
                     + ", ".join(f"{k} {med[k] * ms:.2f}" for k in
                                 ("forward", "backward", "optimizer", "communication",
                                  "exposed_communication") if med.get(k) is not None)
                     + " ms")
        for k, c in self.collectives.items():
            size = (f"{c.bytes_per_step / 1e6:.3f} MB/step" if c.bytes_per_step is not None
                    else f"size unknown ({c.calls - c.sizes_known} of {c.calls})")
            t = f"{c.time_per_step * ms:.2f} ms/step" if c.time_per_step is not None \
                else "time unknown"
            bw = f", busbw {c.busbw / 1e9:.3g} Gbit/s" if c.busbw else ""
            how = ", ".join(f"{a} {n}" for a, n in c.algorithms.items())
            how += (" / " if how and c.protocols else "") + ", ".join(
                f"{p} {n}" for p, n in c.protocols.items())
            lines.append(f"  {k}: {c.count_per_step:g}/step, {size}, {t}{bw}"
                         + (f" ({how})" if how else ""))
        if self.cluster is not None:
            fit = self.fits.get("all_reduce")
            if fit is not None:
                lines.append(f"  fit: {fit}")
        sd = self.compute_slowdown
        if sd.get("value") is not None and sd.get("overlapped_time", 1.0) == 0:
            lines.append("  compute slowdown: 1 (no compute ran during communication)")
        elif sd.get("value") is not None:
            used = "" if sd["value"] >= 1.0 else ", below 1: noise, 1 is used"
            lines.append(f"  compute slowdown: {sd['value']:.3f} "
                         f"(kernels covering {sd.get('coverage', 1):.0%} of the overlapped "
                         f"compute{used})")
        r = self.replay
        if r is not None:
            if r.predicted is not None:
                lines.append(f"  replay: predicted {r.predicted * ms:.2f} ms, measured "
                             f"{r.measured * ms:.2f} ms, error {r.error * ms:+.2f} ms "
                             f"({r.relative_error:+.1%}), {r.buckets} bucket(s)")
            else:
                lines.append(f"  replay: no prediction: {r.reason}")
            if r.predicted_overlap_only is not None:
                lines.append(f"  replay with the measured bucket durations: "
                             f"{r.predicted_overlap_only * ms:.2f} ms "
                             f"(error {r.overlap_only_error * ms:+.2f} ms)")
            for k, u in r.uncovered.items():
                t = (f"{u['time_per_step'] * ms:.2f} ms/step ({u['share']:.1%} of the step)"
                     if u.get("time_per_step") is not None else "time unknown")
                lines.append(f"  not in the model: {k} x{u['calls_per_step']:g}/step, {t}")
        for k, v in self.undetermined.items():
            lines.append(f"  undetermined: {k}: {v}")
        return "\n".join(lines)

    __str__ = summary


# =========================================================================== combining

def _check_same_job(ranks):
    first = ranks[0]
    for r in ranks[1:]:
        if r.world_size != first.world_size:
            raise CalibrationError(
                f"{first.source} has world size {first.world_size} but {r.source} has "
                f"{r.world_size}: ranks of one job share the world size; give the traces "
                "of one job only")
    seen = {}
    for r in ranks:
        if r.rank is not None:
            if r.rank in seen:
                raise CalibrationError(f"{seen[r.rank]} and {r.source} are both rank "
                                       f"{r.rank}: the same rank twice, or two jobs")
            seen[r.rank] = r.source
            if r.rank >= r.world_size:
                raise CalibrationError(f"{r.source}: rank {r.rank} is not below the world "
                                       f"size {r.world_size}")
    for r in ranks[1:]:
        common = set(first.step_number.tolist()) & set(r.step_number.tolist())
        if not common:
            raise CalibrationError(
                f"{first.source} (steps {_steps_text(first)}) and {r.source} (steps "
                f"{_steps_text(r)}) share no ProfilerStep: traces of different jobs, or of "
                "different windows; profile the same steps on every rank")
        for key in ("backend", "nccl_version"):
            a, b = getattr(first, key), getattr(r, key)
            if a is not None and b is not None and a != b:
                raise CalibrationError(f"{first.source} has {key} {a} but {r.source} has "
                                       f"{b}: traces of different jobs")
        ca, cb = _kind_counts(first, common), _kind_counts(r, common)
        if ca != cb:
            raise CalibrationError(
                f"{first.source} and {r.source} issue different collectives in the same "
                f"steps ({_counts_text(ca)} against {_counts_text(cb)}): traces of "
                "different jobs")


def _steps_text(r):
    n = r.step_number
    return f"#{n.min()}..#{n.max()}" if n.size else "none"


def _kind_counts(r, steps):
    """Calls per kind (send/recv excluded: ranks differ) in the given step numbers."""
    want = np.isin(r.step_number, list(steps))
    out = {}
    for k, s in zip(r.calls.kind, r.calls.step):
        if s >= 0 and want[s] and k != "send_recv":
            out[k] = out.get(k, 0) + 1
    return out


def _counts_text(c):
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def _median(values):
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    return float(np.median(v)) if v.size else None


def _summaries(ranks, world):
    kinds = []
    for r in ranks:
        for k in r.calls.kind:
            if k not in kinds:
                kinds.append(k)
    nsteps = sum(r.step_start.size for r in ranks)
    out = {}
    for k in sorted(kinds, key=lambda x: (COLLECTIVE_KINDS.index(x)
                                          if x in COLLECTIVE_KINDS else 99, x)):
        if not any(np.any(np.array([x == k for x in r.calls.kind]) & (r.calls.step >= 0))
                   for r in ranks):
            continue   # only outside the profiled steps
        calls = known = grad = 0
        total = 0.0
        ttotal = 0.0
        tknown = 0
        sources, algos, protos = {}, {}, {}
        per_step_bytes, per_step_time = [], []
        s_sum = t_sum = 0.0
        groups = set()
        for r in ranks:
            c = r.calls
            sel = np.array([x == k for x in c.kind]) & (c.step >= 0)
            idx = np.flatnonzero(sel)
            calls += idx.size
            grad += int(np.sum(r.gradient[idx]))
            b = c.nbytes[idx]
            known += int(np.isfinite(b).sum())
            total += float(np.nansum(b))
            t = c.dur[idx]
            tknown += int(np.isfinite(t).sum())
            ttotal += float(np.nansum(t))
            for j in idx:
                if c.size_source[j]:
                    sources[c.size_source[j]] = sources.get(c.size_source[j], 0) + 1
                if c.algo[j]:
                    algos[c.algo[j]] = algos.get(c.algo[j], 0) + 1
                if c.proto[j]:
                    protos[c.proto[j]] = protos.get(c.proto[j], 0) + 1
                n = int(c.group[j]) or world
                groups.add(n)
                if np.isfinite(c.nbytes[j]) and np.isfinite(c.dur[j]) and c.dur[j] > 0:
                    s = c.nbytes[j]
                    if k == "all_gather":
                        s = c.out_bytes[j] if np.isfinite(c.out_bytes[j]) else n * s
                    s_sum += s
                    t_sum += c.dur[j]
            for i in range(r.step_start.size):
                m = c.step[idx] == i
                bb = b[m]
                per_step_bytes.append(float(bb.sum()) if np.all(np.isfinite(bb)) else None)
                tt = t[m]
                per_step_time.append(float(tt.sum()) if np.all(np.isfinite(tt)) else None)
        n = groups.pop() if len(groups) == 1 else None
        algbw = 8.0 * s_sum / t_sum if t_sum > 0 else None
        busbw = None
        if algbw is not None and n and k in _BUS_FACTOR and n > 1:
            busbw = algbw * _BUS_FACTOR[k](n)
        out[k] = CollectiveSummary(
            kind=k, calls=calls, count_per_step=round(calls / nsteps, 6),
            total_bytes=total if known == calls and calls else None,
            bytes_per_step=(_median(per_step_bytes) if known == calls and calls else None),
            sizes_known=known,
            size_source=(max(sources, key=sources.get) if sources else None),
            time_total=ttotal if tknown == calls and calls else None,
            time_per_step=_median(per_step_time) if tknown == calls and calls else None,
            algorithms=algos, protocols=protos, algbw=algbw, busbw=busbw, group_size=n,
            gradient=grad)
    return out


def _fit_points(ranks, kind, gradient_only):
    """(bytes per rank for the fit, seconds, group size) of one kind's calls; with several
    ranks whose calls line up, each call's shortest duration across ranks."""
    seqs = []
    for r in ranks:
        c = r.calls
        sel = np.array([x == kind for x in c.kind]) & (c.step >= 0)
        if gradient_only:
            sel &= r.gradient
        idx = np.flatnonzero(sel)
        idx = idx[np.lexsort((c.issue[idx], c.step[idx]))]
        nums = r.step_number[c.step[idx]]
        seqs.append((nums, c.nbytes[idx], c.dur[idx], c.group[idx], c.out_bytes[idx]))
    if len(seqs) > 1:
        common = set.intersection(*(set(s[0].tolist()) for s in seqs))
        cut = [tuple(a[np.isin(s[0], list(common))] for a in s) for s in seqs]
        if len({len(s[0]) for s in cut}) == 1 and all(
                np.array_equal(np.nan_to_num(s[1]), np.nan_to_num(cut[0][1])) for s in cut):
            st = np.vstack([s[2] for s in cut])
            # a call no rank timed stays unknown (nanmin would warn "All-NaN slice")
            dur = np.where(np.isnan(st).all(axis=0), np.nan,
                           np.where(np.isnan(st), np.inf, st).min(axis=0, initial=np.inf))
            seqs = [(cut[0][0], cut[0][1], dur, cut[0][3], cut[0][4])]
    nums = np.concatenate([s[0] for s in seqs])
    b = np.concatenate([s[1] for s in seqs])
    t = np.concatenate([s[2] for s in seqs])
    g = np.concatenate([s[3] for s in seqs])
    ok = np.isfinite(b) & (b > 0) & np.isfinite(t) & (t > 0)
    del nums
    return b[ok], t[ok], g[ok]


def _one_group(kind, b, t, g, world, notes):
    """The points of one process-group size (the size most calls of ``kind`` ran in;
    the larger on a tie) and that size: a call's time depends on its group's ranks, so
    calls of several group sizes (a hybrid-sharded job's shard and replica groups) are
    not one fit; the others are said in ``notes``. A call without a group size is taken
    in the whole world; a group larger than the world is a malformed trace."""
    g = np.where(np.asarray(g) > 0, g, world).astype(int)
    if g.size and int(g.max()) > world:
        raise ProfileFormatError("<trace>", "Group size", f"{kind} in a group of "
                                 f"{int(g.max())} ranks, more than the world size {world}",
                                 kind="trace")
    if g.size == 0:
        return b, t, int(world)
    sizes, counts = np.unique(g, return_counts=True)
    n = int(sizes[counts == counts.max()].max())
    if sizes.size > 1:
        notes.append(f"{kind}: calls in process groups of {', '.join(map(str, sizes))} "
                     f"ranks; the transport is fitted to the {int(counts.max())} in groups "
                     f"of {n} ({g.size - int(counts.max())} others left out)")
    keep = g == n
    return b[keep], t[keep], n


def _fit_all(ranks, world, line_rate, notes, undetermined):
    from .fit import COLLECTIVE_MODELS, fit_collective
    fits = {}
    kinds = {k for r in ranks for k in r.calls.kind}
    for kind in sorted(kinds):
        if kind not in COLLECTIVE_MODELS:
            continue
        b, t, g = _fit_points(ranks, kind, gradient_only=False)
        b, t, n = _one_group(kind, b, t, g, world, notes)
        if n < 2:
            if kind == "all_reduce":
                undetermined["cluster"] = (f"world size {world}: one rank communicates "
                                           "nothing, there is no transport to fit")
            continue
        if b.size == 0:
            if kind == "all_reduce":
                undetermined["cluster"] = ("no all-reduce with both a size and a time: "
                                           + ("the trace has no sizes for them"
                                              if not _any_sizes(ranks, kind) else
                                              "the trace has no kernel times for them"))
            continue
        if kind == "reduce_scatter":
            b = b / n
        distinct = np.unique(b).size
        if distinct < 3:
            msg = (f"{distinct} distinct {kind} size(s) in the trace; at least 3 are "
                   "needed to separate latency from bandwidth")
            if kind == "all_reduce":
                undetermined["cluster"] = msg
            else:
                notes.append(f"{kind}: not fitted: {msg}")
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CalibrationWarning)
            try:
                fits[kind] = fit_collective(b, t, collective=kind, n=int(n), min_points=3,
                                            line_rate=line_rate)
            except CalibrationError as exc:
                msg = f"{kind}: the fit failed: {exc}"
                if kind == "all_reduce":
                    undetermined["cluster"] = msg
                else:
                    notes.append(msg)
        for w in caught:
            notes.append(f"fit {kind}: {w.message}")
    return fits


def _any_sizes(ranks, kind):
    return any(np.isfinite(r.calls.nbytes[i]) for r in ranks
               for i, k in enumerate(r.calls.kind) if k == kind)


def _bucket_stats(ranks, notes):
    """Per-step bucket samples of every rank pooled: modal count, medians per bucket."""
    samples = [d for r in ranks for d in r.per_step]
    counts = [d["bucket_calls"].size for d in samples]
    with_buckets = [c for c in counts if c]
    if not with_buckets:
        return None, samples
    values, freq = np.unique(with_buckets, return_counts=True)
    k = int(values[np.argmax(freq)])
    use = [d for d in samples if d["bucket_calls"].size == k]
    if len(use) < len(samples):
        notes.append(f"{len(samples) - len(use)} of {len(samples)} step(s) have another "
                     f"number of gradient buckets than {k}: left out of the profile")
    return k, use


def _build_profile(ranks, report_name, world, slowdown, notes, undetermined):
    """The workload profile (eq. :eq:`trace-times`) and the per-bucket medians."""
    from ..profiles import WorkloadProfile
    k, use = _bucket_stats(ranks, notes)
    if k is None:
        undetermined["workload"] = ("no gradient all-reduce was issued during backward in "
                                    "any step: no buckets to make a profile of")
        return None, {}, None
    tf = _median([d["b0"] - d["g0"] for d in use])
    tb = _median([d["b1"] - d["b0"] for d in use])
    tu = _median([d["g1"] - max(d["b1"], d["c1"]) if np.isfinite(d["c1"])
                  else d["g1"] - d["b1"] for d in use])
    if tu is not None and tu < 0:
        notes.append(f"the next step's device work starts {-tu * 1e3:.3g} ms before this "
                     "step's gradient all-reduces end (a pipelined loop): update time 0")
        tu = 0.0
    ready = np.array([d["bucket_ready"] for d in use])
    nbytes = np.array([d["bucket_bytes"] for d in use])
    dur = np.array([d["bucket_dur"] for d in use])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN columns
        r_med = np.nanmedian(ready, axis=0) if ready.size else np.zeros(0)
        b_med = np.nanmedian(nbytes, axis=0) if nbytes.size else np.zeros(0)
        d_med = np.nanmedian(dur, axis=0) if dur.size else np.zeros(0)
    buckets = {"count": k, "steps_used": len(use),
               "bytes": [_f(v) for v in b_med], "ready": [_f(v) for v in r_med],
               "duration": [_f(v) for v in d_med],
               "forward_time": tf, "backward_time": tb, "update_time": tu}
    measured = {"forward": tf, "backward": tb, "update": tu, "ready": r_med,
                "duration": d_med}
    if tf is None or tb is None or tu is None or not np.all(np.isfinite(r_med)):
        undetermined["workload"] = ("the device timeline of backward is incomplete (no "
                                    "backward compute linked to the steps)")
        return None, buckets, measured
    if not np.all(np.isfinite(b_med)):
        undetermined["workload"] = ("the gradient buckets' sizes are not in the trace "
                                    "(no In msg nelems in kernel args or "
                                    "record_param_comms, no Input Dims on the annotation: "
                                    "this PyTorch version, or record_shapes=False)")
        return None, buckets, measured
    sigma = slowdown if slowdown is not None else 1.0
    r = np.maximum.accumulate(np.clip(r_med, 0.0, tb)) / sigma
    first = ranks[0]
    prov = {
        "source": "PyTorch profiler trace: " + ", ".join(Path(x.source).name for x in ranks),
        "derivation": (
            "scalemodel.calibrate.trace: one tensor per gradient bucket (each all-reduce "
            "issued during backward is one DDP bucket), in communication order; ready = "
            "when the compute stream had finished everything launched before the "
            "all-reduce was issued (the NCCL stream waits for exactly that; on CPUs: when "
            "it was issued), from the start of the first backward kernel; forward = first "
            "device work of the step to the start of backward; update = end of backward "
            "and of the gradient all-reduces to the next step's first device work; medians "
            "over steps and ranks; forward, backward and ready times divided by the "
            "compute slowdown so that the profile is compute without communication"),
        "world_size": world, "ranks": [x.rank for x in ranks],
        "steps_used": len(use), "compute_slowdown": sigma,
        "timeline": first.timeline,
    }
    try:
        profile = WorkloadProfile(
            name=report_name, tensor_bytes=b_med, tensor_ready=r, forward_time=tf / sigma,
            backward_time=max(tb / sigma, float(r[-1]) if r.size else 0.0), update_time=tu,
            description=f"from a profiler trace ({world} ranks, {k} gradient buckets)",
            device=", ".join(sorted(set(first.gpus))) or "CPU", framework="PyTorch",
            precision="trace", provenance=prov)
    except ProfileFormatError as exc:  # sizes or times the trace's events gave: say so
        raise ProfileFormatError(
            ", ".join(str(x.source) for x in ranks), "gradient all-reduces",
            f"their message sizes (Input Dims / In msg nelems) or times make no workload "
            f"({exc.field}: {str(exc).split(': ', 2)[-1]})", kind="trace") from None
    return profile, buckets, measured


def _replay(profile, cluster, fits, world, step_time, measured, ranks, gradient_k, notes):
    from ..model import iteration_time
    from ..overlap import comm_finish_time
    uncovered = _uncovered(ranks, step_time)
    gathers = [k for k in ("all_gather", "reduce_scatter") if k in uncovered]
    if gathers:  # said, not left to the list of what is not in the model
        notes.append(f"the step has {' and '.join(gathers)} calls, as sharded data "
                     "parallelism (FSDP, ZeRO-3) does: the replay is DDP's, of the gradient "
                     "all-reduces alone; calibrate a sharded job from measured runs "
                     "(fit_cluster, a run's sharding), not from its trace")
    reason = None
    predicted = None
    it = {}
    if profile is None:
        reason = "no workload profile (see undetermined.workload)"
    elif world == 1:
        res = iteration_time(profile, n=1, bw=1e12, fusion="none")
        predicted, it = res.total, attrs.asdict(res)
        reason = "one rank: nothing is communicated; the check covers the compute timeline"
    elif cluster is None:
        reason = "no fitted cluster (see undetermined.cluster)"
    else:
        bw = (cluster.extra.get("fitted_bandwidth") if cluster.utilization == 1.0
              and "fitted_bandwidth" in cluster.extra else None)
        if bw is None:
            bw = fits["all_reduce"].line_rate or fits["all_reduce"].bandwidth
        res = iteration_time(profile, n=world, bw=bw, cluster=cluster, fusion="none",
                             algorithm="ring")
        predicted, it = res.total, attrs.asdict(res)
    overlap_only = None
    if measured and measured.get("backward") is not None and world > 1:
        d = np.asarray(measured["duration"], float)
        r = np.asarray(measured["ready"], float)
        if d.size and np.all(np.isfinite(d)) and np.all(np.isfinite(r)):
            r = np.maximum.accumulate(np.clip(r, 0.0, measured["backward"]))
            end = max(measured["backward"], comm_finish_time(r, d))
            overlap_only = measured["forward"] + end + measured["update"]
    err = None if predicted is None else predicted - step_time
    return ReplayCheck(
        world_size=world, measured=step_time, predicted=predicted, error=err,
        relative_error=None if err is None else err / step_time,
        predicted_overlap_only=overlap_only,
        overlap_only_error=None if overlap_only is None else overlap_only - step_time,
        buckets=int(gradient_k or 0), uncovered=uncovered,
        iteration={k: (_f(v) if isinstance(v, float) else v) for k, v in it.items()},
        reason=reason)


def _uncovered(ranks, step_time):
    """Collectives outside the model (everything but gradient all-reduces) per step."""
    out = {}
    nsteps = sum(r.step_start.size for r in ranks)
    for r in ranks:
        c = r.calls
        for j, k in enumerate(c.kind):
            if c.step[j] < 0 or r.gradient[j]:
                continue
            name = k if k != "all_reduce" else "all_reduce (outside backward)"
            u = out.setdefault(name, {"calls": 0, "times": {}})
            u["calls"] += 1
            key = (id(r), int(c.step[j]))
            u["times"][key] = u["times"].get(key, 0.0) + c.dur[j]
    res = {}
    for name, u in out.items():
        per_step = [u["times"].get((id(r), i), 0.0) for r in ranks
                    for i in range(r.step_start.size)]
        t = _median(per_step) if all(np.isfinite(per_step)) else None
        res[name] = {"calls_per_step": round(u["calls"] / nsteps, 6), "time_per_step": t,
                     "share": None if t is None else t / step_time}
    return res


# =========================================================================== public API

def _read_one(path):
    """One rank's trace collected (:func:`~scalemodel.calibrate.trace_read._collect`),
    its format errors calling the file a trace, not a profile."""
    try:
        return _collect(path)
    except ProfileFormatError as exc:
        raise exc.called("trace") from None


def _analysed(collected):
    """:func:`_analyse`, its format errors calling the file a trace."""
    try:
        return _analyse(collected)
    except ProfileFormatError as exc:
        raise exc.called("trace") from None


def read_trace(path_or_paths, *, line_rate=None, name=None) -> TraceReport:
    """Read a PyTorch profiler (Kineto) trace of a distributed run.

    Parameters
    ----------
    path_or_paths : str, os.PathLike or sequence of them
        One ``.json`` or ``.json.gz`` trace per rank, of one job [path].
    line_rate : float or str, optional
        NIC line rate, so that the cluster profile holds a utilization; without it the
        fitted bandwidth is taken as the line rate [bits/s].
    name : str, optional
        Name of the profiles (default: the first file's stem) [-].

    Returns
    -------
    TraceReport
        World size, step time, per-step breakdown, collectives, what is undetermined,
        the workload and cluster profiles and the replay check.

    Raises
    ------
    ProfileFormatError
        A file that is not a trace (not JSON, no ``traceEvents``), a truncated or corrupt
        ``.gz``, no world size; the message names the file and what is missing.
    CalibrationError
        No ``ProfilerStep`` span, no collective at all, or traces that are not of one job
        (different world sizes, the same rank twice, no common step, different
        collectives).

    Examples
    --------
    >>> from pathlib import Path
    >>> import scalemodel
    >>> from scalemodel.calibrate import read_trace
    >>> data = Path(scalemodel.__file__).parents[1] / "tests" / "data" / "traces"
    >>> rep = read_trace(data / "ddp_2ranks_allreduce_b.json.gz")
    >>> rep.world_size, rep.step_count, round(rep.step_time * 1e3, 2)
    (2, 3, 222.44)
    >>> rep.collectives["all_reduce"].count_per_step, rep.collectives["all_reduce"].algorithms
    (5.0, {'RING': 15})
    """
    from ..units import one_rate
    paths = _trace_paths(path_or_paths)
    if line_rate is not None:
        line_rate = one_rate(line_rate, "line_rate")
    ranks = [_analysed(_read_one(p)) for p in paths]
    _check_ranks(ranks)
    world = ranks[0].world_size
    notes = [n for r in ranks for n in r.notes]
    undetermined = {}
    for r in ranks:
        for k, v in r.undetermined.items():
            undetermined.setdefault(k, v)
    durations = np.concatenate([r.step_end - r.step_start for r in ranks])
    step_time = float(np.median(durations))
    spread = {"min": float(durations.min()), "p25": float(np.percentile(durations, 25)),
              "p75": float(np.percentile(durations, 75)), "max": float(durations.max())}
    collectives = _summaries(ranks, world)
    _undetermined_collectives(collectives, ranks, world, undetermined)
    slow = _pool_slowdown(ranks)
    sigma = slow.get("value")
    if sigma is None and world > 1:
        undetermined["compute_slowdown"] = slow.get("reason")
    elif sigma is not None and sigma < 1.0:
        notes.append(f"compute slowdown measured {sigma:.4f} < 1 (noise): 1 is used")
        sigma = 1.0
    label = name or _stem(paths[0])
    profile, buckets, measured = _build_profile(ranks, label, world, sigma, notes,
                                                undetermined)
    fits = _fit_all(ranks, world, line_rate, notes, undetermined)
    cluster = _trace_cluster(ranks, fits, label, world, line_rate, sigma)
    replay = _replay(profile, cluster, fits, world, step_time, measured, ranks,
                     buckets.get("count") if buckets else 0, notes)
    if replay.predicted is None:
        undetermined["replay"] = replay.reason
    gpus = tuple(g for r in ranks for g in r.gpus)
    return TraceReport(
        files=tuple(r.source for r in ranks), ranks=tuple(r.rank for r in ranks),
        world_size=world, backend=ranks[0].backend, nccl_version=ranks[0].nccl_version,
        gpus=gpus, timeline=ranks[0].timeline, step_time=step_time,
        step_time_spread=spread, step_count=int(durations.size), step_times=durations,
        per_step=_per_step_table(ranks), collectives=collectives,
        undetermined=undetermined, notes=tuple(notes), buckets=buckets, profile=profile,
        cluster=cluster, fits=fits, compute_slowdown=slow, replay=replay,
        file_bytes=sum(r.file_bytes for r in ranks))


def _trace_paths(path_or_paths):
    """The trace files as a non-empty list; raises for anything else."""
    if isinstance(path_or_paths, (str, bytes, os.PathLike)):
        paths = [path_or_paths]  # bytes: one path (a list of its byte values otherwise)
    else:
        try:
            paths = list(path_or_paths)
        except TypeError:
            from ..exceptions import ParameterTypeError
            raise ParameterTypeError("path_or_paths", path_or_paths,
                                     "a path or a list of paths") from None
    if not paths:
        from ..exceptions import InvalidParameterError
        raise InvalidParameterError("path_or_paths", path_or_paths, "give at least one trace")
    return [os.fsdecode(p) if isinstance(p, bytes) else p for p in paths]


def _check_ranks(ranks):
    """Raise when a rank's trace has no collective, or the traces are not of one job."""
    for r in ranks:
        if not r.calls.kind:
            why = ("it does not show a distributed training step; profile the training "
                   "loop of the distributed job (DDP, FSDP)")
            if r.world_size == 1:
                why = ("its world is one rank, where FSDP2 (fully_shard) skips its "
                       "collectives: profile a job of at least 2 ranks")
            raise CalibrationError(f"{r.source}: no collective in the trace (no nccl:/gloo: "
                                   f"annotation, no NCCL kernel): {why}")
    if len(ranks) > 1:
        _check_same_job(ranks)


def _undetermined_collectives(collectives, ranks, world, undetermined):
    """Note in ``undetermined`` the collectives' unknown sizes, times and algorithms."""
    for k, c in collectives.items():
        if c.sizes_known < c.calls and k != "barrier":   # a barrier has no size
            undetermined[f"bytes.{k}"] = (
                f"{c.calls - c.sizes_known} of {c.calls} calls have no size: neither the "
                "kernel args (In msg nelems, dtype), record_param_comms nor the annotation "
                "(Input Dims, Input type) give it in this trace (PyTorch version, or "
                "record_shapes=False)")
        if c.time_total is None and c.calls:
            timed = sum(int(np.count_nonzero(np.isfinite(r.calls.dur[
                np.array([x == k for x in r.calls.kind], bool) & (r.calls.step >= 0)])))
                for r in ranks)
            undetermined[f"time.{k}"] = (
                f"{c.calls - timed} of {c.calls} calls have no time (no kernel, or for gloo "
                f"no span or copy of theirs in the trace): no total; the fit and the "
                f"replay use the {timed} that have one" if timed else
                "no kernel times: " + ("NCCL launches no kernel for a single rank"
                                       if world == 1 else
                                       "the trace has no GPU activity for these calls"))
        if not c.algorithms and ranks[0].timeline == "gpu" and c.calls and \
                c.time_total is not None:
            undetermined[f"algorithm.{k}"] = "the kernel names do not say it"
    if ranks[0].timeline == "cpu":
        undetermined.setdefault("algorithm", f"{ranks[0].backend} traces do not name the "
                                "collective algorithm or protocol")


def _trace_cluster(ranks, fits, label, world, line_rate, sigma):
    """The cluster profile from the all-reduce fit (None without one), with every
    collective's fit and the compute slowdown."""
    if "all_reduce" not in fits:
        return None
    from .fit import cluster_from_fits
    prov = {"source": "PyTorch profiler trace: " + ", ".join(Path(r.source).name
                                                             for r in ranks),
            "derivation": ("scalemodel.calibrate.trace: ring all-reduce model fitted "
                           "to every all-reduce's (bytes per rank, kernel time); a "
                           "kernel's time includes waiting for the slowest rank (with "
                           "every rank's trace the shortest time of each call is "
                           "used)"),
            "world_size": world, "backend": ranks[0].backend,
            "nccl_version": ranks[0].nccl_version, "gpus": sorted(set(ranks[0].gpus))}
    cluster = cluster_from_fits([fits["all_reduce"]], name=label, line_rate=line_rate,
                                provenance=prov)
    extra = dict(cluster.extra)
    extra["collective_fits"] = {k: f.to_dict() for k, f in fits.items()}
    return attrs.evolve(cluster, extra=extra,
                        compute_slowdown=sigma if sigma is not None else 1.0)


def _per_step_table(ranks):
    """The per-step breakdown: medians over every rank's steps, and each step's row."""
    per_rank_steps = [d for r in ranks for d in r.per_step]
    keys = ("forward", "backward", "optimizer", "other", "compute", "communication",
            "exposed_communication")
    return {"median": {k: _median([d[k] for d in per_rank_steps]) for k in keys},
            "steps": [{"rank": r.rank, "number": int(r.step_number[i]),
                       "duration": float(r.step_end[i] - r.step_start[i]),
                       **{k: _f(d[k]) for k in keys},
                       "device_period": _f(d["g1"] - d["g0"])}
                      for r in ranks for i, d in enumerate(r.per_step)]}


def _pool_slowdown(ranks):
    vals = [r.slowdown for r in ranks if r.slowdown.get("value") is not None]
    if not vals:
        return dict(ranks[0].slowdown)
    return {"value": float(np.median([v["value"] for v in vals])),
            "coverage": float(min(v.get("coverage", 1.0) for v in vals)), "reason": None,
            "overlapped_time": float(sum(v.get("overlapped_time", 0.0) for v in vals)),
            "ranks": len(vals)}


def _stem(path):
    name = Path(path).name
    for suffix in (".gz", ".json", ".pt.trace"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"


# =========================================================================== recording

def rank_trace_path(path, rank):
    """Where rank ``rank`` saves its trace: ``<path stem>.rank<rank>.json``.

    Parameters
    ----------
    path : str or os.PathLike
        The path given to ``--trace`` (a ``.json`` or ``.json.gz`` suffix is dropped) [path].
    rank : int
        The rank [-].

    Returns
    -------
    pathlib.Path
        The rank's file.
    """
    p = Path(path)
    name = p.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name(f"{name or 'trace'}.rank{int(rank)}.json")


def record_trace(path, step, *, rank, cuda=False, iterations=5, warmup=1, stage=False):
    """Run ``step`` under ``torch.profiler`` and save the trace of this rank, atomically.

    The profiler records CPU operators with their input shapes (so the collectives' sizes
    are in the trace) and, with ``cuda``, the GPU kernels; ``prof.step()`` after each call
    marks it as one ``ProfilerStep``. The trace is exported to a temporary file in the
    destination's folder and renamed into place.

    Parameters
    ----------
    path : str or os.PathLike
        The ``--trace`` path; the file written is :func:`rank_trace_path` of it [path].
    step : callable
        One training iteration, called ``warmup + iterations`` times [-].
    rank : int
        This process's rank [-].
    cuda : bool
        Record GPU activity too [-].
    iterations : int
        Iterations recorded [-].
    warmup : int
        Iterations run under the profiler first and not recorded [-].
    stage : bool
        Return the trace's text instead of writing it, for a caller that writes all its
        outputs together at the end (the calibration) [-].

    Returns
    -------
    pathlib.Path or str
        The file written, or with ``stage`` the trace's text.
    """
    import shutil
    import tempfile

    from torch.profiler import ProfilerActivity, profile, schedule
    if stage:
        folder = tempfile.mkdtemp(prefix="scalemodel-trace-")
        try:
            written = record_trace(Path(folder) / "trace.json", step, rank=rank, cuda=cuda,
                                   iterations=iterations, warmup=warmup)
            return written.read_text(encoding="utf-8")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    out = rank_trace_path(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=0, warmup=int(warmup), active=int(iterations),
                                   repeat=1),
                 on_trace_ready=lambda prof: _export_atomically(prof, out)) as prof:
        for _ in range(int(warmup) + int(iterations)):
            step()
            prof.step()
    return out


def _export_atomically(prof, out):
    """Export the profiler's trace to ``out`` through a temporary file beside it, synced
    and renamed, with the signals an atomic write holds held throughout: the temporary
    file exists only then, so no signal during the profiled steps leaves one."""
    import tempfile

    from ..profiles import _signals_held
    with _signals_held():
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, out)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


# =========================================================================== command line

def _output_is_an_input(prefix, traces):
    """The output of ``--out prefix`` (written, replaced or removed) that is one of the
    input traces, or None."""
    if prefix is None:
        return None
    for suffix in (".workload.json", ".cluster.json", ".report.json"):
        out = f"{prefix}{suffix}"
        for trace in traces:
            try:
                if os.path.lexists(out) and os.path.exists(trace) and \
                        os.path.samefile(out, trace):
                    return out
            except OSError:
                continue
            if os.path.abspath(out) == os.path.abspath(trace):
                return out
    return None


def main(argv=None) -> int:
    """``python -m scalemodel.calibrate from-trace TRACE [TRACE ...] [--json] [--out PREFIX]``.

    Parameters
    ----------
    argv : list of str, optional
        Arguments after ``from-trace`` (default: ``sys.argv[1:]``) [-].

    Returns
    -------
    int
        0 when the world size and the step time were read; 2 on bad input (one line on
        standard error, nothing written) [-].
    """
    from ._parser import OneLineParser

    p = OneLineParser(
        prog="python -m scalemodel.calibrate from-trace",
        description="Read PyTorch profiler (Kineto) traces of one distributed job (one file "
                    "per rank, .json or .json.gz): world size, step time, per-step compute "
                    "and communication, collectives, and a workload and cluster profile "
                    "with a replay check.")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s) of one job")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--out", metavar="PREFIX", help="write PREFIX.workload.json, "
                   "PREFIX.cluster.json (those that could be made: an earlier run's "
                   "that this one cannot make is removed, and said) and PREFIX.report.json "
                   "(a calibration's PREFIX.report.json is replaced: choose another PREFIX "
                   "beside one)")
    p.add_argument("--line-rate", help="NIC line rate, e.g. 100Gbps (default: the fitted "
                   "bandwidth is taken as the line rate)")
    p.add_argument("--name", help="profile name (default: the first file's stem)")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    prog = "scalemodel.calibrate from-trace"
    if args.out is not None and (not args.out.strip() or args.out.endswith(("/", os.sep))
                                 or os.path.isdir(args.out)):
        print(f"{prog}: error: --out {args.out!r} is a folder or empty: --out takes a prefix "
              "of file names, e.g. --out results/job (writes results/job.workload.json, "
              "...)", file=sys.stderr)
        return 2
    clash = _output_is_an_input(args.out, args.traces)
    if clash:
        print(f"{prog}: error: --out {args.out!r}: {clash} is an input of this command "
              "(a trace given as TRACE); writing the set there would replace or remove it; "
              "nothing was read. Choose another prefix", file=sys.stderr)
        return 2
    if args.out is not None:  # before the (long) analysis: under a file, not writable
        from ..profiles import output_problem
        why = output_problem(f"{args.out}.report.json")
        if why:
            print(f"{prog}: error: --out {args.out!r} cannot be written ({args.out}"
                  f".report.json: {why}); nothing was read", file=sys.stderr)
            return 2
    try:
        report = read_trace(args.traces, line_rate=args.line_rate, name=args.name)
        outputs = {}
        if args.out:
            # the set: a file this run cannot make is removed (no stale one of another run)
            outputs = {
                f"{args.out}.workload.json": None if report.profile is None else
                json.dumps(report.profile.to_dict(), indent=1) + "\n",
                f"{args.out}.cluster.json": None if report.cluster is None else
                json.dumps(report.cluster.to_dict(), indent=1) + "\n",
                f"{args.out}.report.json": json.dumps(report.to_dict(), indent=1) + "\n"}
    except (ScalemodelError, ValueError, TypeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    from ..profiles import atomic_write_files
    existed = {path for path in outputs if os.path.lexists(path)}
    try:
        atomic_write_files(outputs)
    except OSError as exc:
        what = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"{prog}: error: --out {args.out}: cannot write its files{where}: {what}; "
              "nothing was written", file=sys.stderr)
        return 2
    removed = [path for path, text in outputs.items() if text is None and path in existed]
    outputs = [path for path, text in outputs.items() if text is not None]
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.summary())
        for path in outputs:
            print(f"wrote {path}" + (" (replacing the one there)" if path in existed else ""))
    for path in removed:  # (on stderr with --json: stdout is the report)
        print(f"removed {path}, an earlier run's: this trace cannot make it",
              file=sys.stderr if args.json else sys.stdout)
    for n in report.notes:
        print(f"[scalemodel.calibrate] note: {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())