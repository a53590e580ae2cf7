r"""Exact inverses of the scaling model: minimum compression ratio, required bandwidth.

For one worker count the iteration time is the upper envelope :math:`E(x)` of straight
lines in :math:`x = 1/(u B r)` (equation :eq:`iteration`). A target scaling factor
:math:`s^*` asks for :math:`T_f + E(x) + T_u \le T_1 / s^*`, i.e. :math:`E(x) \le L` with
:math:`L = T_1/s^* - T_f - T_u`. Since every line is non-decreasing in :math:`x`,

.. math::
   :label: x-star

   x^* = \min_{j:\,B_j > 0} \frac{L - R_j - A_j}{B_j},

feasible exactly when every line's intercept is at most :math:`L` (then :math:`x^* > 0`).
Hence

.. math::
   :label: inverses

   r_\min = \max\Big(1, \frac{1}{u B x^*}\Big), \qquad
   B_\min = \frac{1}{u r x^*} .

No root finding is needed; the results are exact up to rounding. When compression costs
encode/decode time (``codec_cost``), the lines for :math:`r > 1` include it, and
:math:`r = 1` (no encoding) is checked first.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .exceptions import HostMemoryError, InvalidParameterError, ParameterTypeError
from .intervals import _bw_text
from .model import Scenario, _corner_scenario, effective_utilization, warn_unused_codec_cost
from .units import (MIN_TEXT_BANDWIDTH, check_count, check_fraction, check_ratio,
                    format_bandwidth, parse_bandwidth)

__all__ = ["min_compression", "required_bandwidth", "CompressionResult", "BandwidthResult",
           "DEFAULT_N", "DEFAULT_TARGET"]

DEFAULT_N = 64
"""Default worker count of the solvers: 64, the largest cluster in Zhang et al. [workers]."""

DEFAULT_TARGET = 0.9
"""Default target scaling factor of the solvers: 90 % of linear scaling [-]."""

_NUDGE = 1.0 + 1e-12  # step past the exact root so the target is met despite rounding


@attrs.frozen
class CompressionResult:
    """Result of :func:`min_compression`.

    Attributes
    ----------
    ratio : float
        Smallest compression ratio that reaches the target; 1.0 when none is needed,
        ``math.inf`` when no ratio does [-].
    feasible : bool
        Whether some ratio reaches the target.
    scaling_factor : float
        Scaling factor reached at ``ratio`` (at infinite compression when infeasible) [-].
    binding : str
        What binds at that point: ``"compute"``, ``"latency"``, ``"bandwidth"`` or
        ``"overhead"``.
    message : str
        One sentence for people.
    uncompressed_scaling_factor : float
        Scaling factor without compression [-].
    max_scaling_factor : float
        Limit of the scaling factor as the ratio grows without bound [-].
    critical_parts : dict
        Latency, bandwidth and overhead time on the critical path at ``ratio`` [s].
    n, bw, target, utilization : float
        The question asked: [workers], [bits/s], [-], [-].
    interval : tuple or None
        ``(lo, hi)`` of the ratio over the cluster's fitted intervals (its pessimistic
        and optimistic corners, :meth:`~scalemodel.ClusterProfile.corners`) and over its
        alternative explanations (:mod:`scalemodel.intervals`); an end is None where it
        is unbounded (no ratio reaches the target there); None without intervals [-].
    memory_per_gpu : float or None
        Memory each GPU needs in this configuration (:func:`~scalemodel.memory`); None
        when it is not known (a profile without a transformer configuration and no
        ``gpu=``) [bytes].
    fits : bool or None
        Whether ``memory_per_gpu`` fits on ``gpu``; the message says so when it does not.
    gpu : str or None
        The GPU the memory is checked against.
    settings : dict
        What the answer assumed (:meth:`~scalemodel.Scenario.settings`): collective,
        fusion or wrapping, sharding, activation checkpointing, offload, topology,
        cluster.
    """

    ratio: float
    feasible: bool
    scaling_factor: float
    binding: str
    message: str
    uncompressed_scaling_factor: float
    max_scaling_factor: float
    critical_parts: dict
    n: int
    bw: float
    target: float
    utilization: float
    interval: tuple | None = None
    memory_per_gpu: float | None = None
    fits: bool | None = None
    gpu: str | None = None
    settings: dict = attrs.field(factory=dict)


@attrs.frozen
class BandwidthResult:
    """Result of :func:`required_bandwidth`.

    Attributes
    ----------
    bw : float
        Smallest line rate that reaches the target; ``math.inf`` when none does, 0.0 when
        any does (a single worker, or no data-parallel traffic crossing the network: n
        within one node, a hierarchical all-reduce inside it); neither is a line rate to
        ask again with (``scaling_factor`` takes rates from 1 Mbit/s) [bits/s].
    feasible : bool
        Whether some line rate reaches the target.
    scaling_factor : float
        Scaling factor reached at ``bw`` (at infinite bandwidth when infeasible) [-].
    binding : str
        What binds at that point.
    message : str
        One sentence for people.
    max_scaling_factor : float
        Limit as the bandwidth grows without bound [-].
    critical_parts : dict
        Latency, bandwidth and overhead time on the critical path [s].
    n, target, compression, utilization : float
        The question asked: [workers], [-], [-], [-].
    interval : tuple or None
        ``(lo, hi)`` of ``bw`` over the cluster's fitted intervals and alternative
        explanations (:mod:`scalemodel.intervals`); an end is None where it is unbounded
        (no line rate reaches the target there); None without intervals [bits/s].
    memory_per_gpu : float or None
        Memory each GPU needs (:func:`~scalemodel.memory`); None when unknown [bytes].
    fits : bool or None
        Whether it fits on ``gpu``; the message says so when it does not.
    gpu : str or None
        The GPU the memory is checked against.
    settings : dict
        What the answer assumed (:meth:`~scalemodel.Scenario.settings`): collective,
        fusion or wrapping, sharding, activation checkpointing, offload, topology,
        cluster.
    """

    bw: float
    feasible: bool
    scaling_factor: float
    binding: str
    message: str
    max_scaling_factor: float
    critical_parts: dict
    n: int
    target: float
    compression: float
    utilization: float
    interval: tuple | None = None
    memory_per_gpu: float | None = None
    fits: bool | None = None
    gpu: str | None = None
    settings: dict = attrs.field(factory=dict)


def memory_text(per, fits, gpu) -> str:
    """``"22.5 GiB per GPU reserved, fits on a100-40gb"``: a memory check as the printed
    answers show it (``"does NOT fit on"`` when it does not).

    Parameters
    ----------
    per : float
        Memory per GPU [bytes].
    fits : bool
        Whether it fits on ``gpu`` [-].
    gpu : str
        The GPU's name [-].
    """
    return (f"{per / 2**30:.1f} GiB per GPU reserved, "
            + ("fits on " if fits else "does NOT fit on ") + str(gpu))


def memory_check(sc, n, gpu=None, loss="unfused", accounting="zero", fragmentation=0.0):
    """Memory per GPU of a scenario on ``n`` workers: ``(per_gpu [bytes], fits, gpu name,
    note)``, where the note is empty when it fits; all None when unknown (a profile without
    a transformer configuration and no ``gpu``; a ``loss`` other than ``"unfused"`` or an
    ``accounting`` other than ``"zero"`` is then ignored, with a
    :class:`~scalemodel.exceptions.ModelWarning`).

    Parameters
    ----------
    sc : Scenario
        The scenario (its profile, sharding and topology) [-].
    n : int
        Workers [workers].
    gpu : str, GPUSpec or None
        The GPU; None: the one the profile was derived for, when it has a transformer
        configuration [-].
    loss : str
        How the cross-entropy loss is computed, ``"unfused"``, ``"fused"`` or
        ``"unfused+logits"``, as in :func:`~scalemodel.memory` (its backward peak, the only
        term it changes) [-].
    accounting : str
        How the model state and the peak are counted, ``"zero"`` or ``"fsdp"``, as in
        :func:`~scalemodel.memory` [-].
    fragmentation : float or str
        Free space inside the allocator's segments, a fraction of the reserved memory or
        the allocator's setting by name (``"expandable_segments"``,
        ``"default_segments"``), as in :func:`~scalemodel.memory` [-].

    A job whose memory the memory model does not cover (checkpointing it refuses, e.g.
    the op-level selective policy with flash attention under tensor parallelism) gets
    Nones and a note ``"; memory not checked on <gpu> (<why>)"``, with or without
    ``gpu``: the time question is answered either way.

    Raises
    ------
    InvalidParameterError
        ``fragmentation`` outside [0, 1) or an unknown name;
        ``loss`` outside ``"unfused"``, ``"fused"``, ``"unfused+logits"``; ``accounting``
        outside ``"zero"``, ``"fsdp"``, or ``"fsdp"`` with a sharding strategy other than
        zero2, zero3, hybrid_shard or with offload (the message names the value and the
        valid ones), as :func:`~scalemodel.memory` raises it.
    """
    from .checkpointing import canonical_loss

    loss = canonical_loss(loss)
    accounting = _accounting(accounting, sc)
    frag = _fragmentation(fragmentation)
    if gpu is not None and not isinstance(gpu, str):  # a GPUSpec object: not cached
        return _memory_check(sc, n, gpu, loss, accounting, frag)
    key = ("memory", int(n), gpu, loss, accounting, frag)
    if key not in sc._cache:  # a scenario's memory does not change: ask once
        sc._cache[key] = _memory_check(sc, n, gpu, loss, accounting, frag)
    return sc._cache[key]


def _warn_other_gpu(gpu, profile):
    """Say when ``gpu=`` names another GPU than the one a FLOP-derived profile computes on:
    it sets the memory checked (and codec costs), not the compute."""
    from .hardware import get_gpu

    try:
        asked, own = get_gpu(str(gpu)).name, get_gpu(str(profile.provenance["gpu"])).name
    except (InvalidParameterError, ParameterTypeError):  # memory() names a bad gpu=
        return
    if asked != own:
        import warnings

        from .exceptions import ModelWarning
        warnings.warn(ModelWarning(
            f"gpu={gpu!r} sets the memory checked (and codec costs), while {profile.name} "
            f"computes on the {own} it was derived for: the times are the {own}'s. To "
            f"compute on the {asked}, pass scalemodel.transformer_profile(config, {asked!r}) "
            "as the model"), stacklevel=6)


def _memory_check(sc, n, gpu, loss="unfused", accounting="zero", fragmentation=0.0):
    from .checkpointing import Checkpointing
    from .memory import _memory_lean, suggestions_text

    p = sc.profile
    derived = isinstance(p.provenance.get("config"), dict)
    if gpu is None and not derived:
        if loss != "unfused":  # said, not silently dropped (as memory() says it)
            import warnings

            from .exceptions import ModelWarning
            warnings.warn(ModelWarning(
                f"loss={loss!r} is ignored for {p.name}: it has no transformer config and "
                "no gpu= was given, so no memory is checked (the time model does not use "
                "the loss)"), stacklevel=4)
        if accounting != "zero":  # said too (with gpu= a config-less profile is counted)
            import warnings

            from .exceptions import ModelWarning
            warnings.warn(ModelWarning(
                f"accounting={accounting!r} is ignored for {p.name}: it has no transformer "
                "config and no gpu= was given, so no memory is checked (the time model does "
                "not use the accounting)"), stacklevel=4)
        if fragmentation != 0.0:  # and the allocator's fragmentation
            import warnings

            from .exceptions import ModelWarning
            warnings.warn(ModelWarning(
                f"fragmentation={fragmentation:g} is ignored for {p.name}: it has no "
                "transformer config and no gpu= was given, so no memory is checked (the "
                "time model does not use the fragmentation)"), stacklevel=4)
        return None, None, None, ""
    if gpu is None:
        gpu = p.provenance.get("gpu") or "h100-sxm"
    elif derived and p.provenance.get("gpu"):
        _warn_other_gpu(gpu, p)
    shard = sc.sharding
    kw = {}
    if shard is not None:
        kw = dict(param_dtype=shard.param_dtype, grad_dtype=shard.reduce_dtype)
    mp = sc.model_parallel
    node = sc.options.gpus_per_node  # the job's nodes, as the time model has them (the
    if node is not None:  # host that offload shares, hybrid_shard's group), per tp rank
        kw["gpus_per_node"] = node * (1 if mp is None else mp.tp)
    elif shard is not None and shard.strategy == "hybrid_shard":
        kw["gpus_per_node"] = 8 * (1 if mp is None else mp.tp)
    if shard is not None and shard.shard_group is not None and int(n) >= 2:
        kw["shard_group"] = shard.shard_group
    strategy = "none" if shard is None or int(n) < 2 else shard.strategy
    ck = p.provenance.get("checkpointing")  # scalemodel.checkpointing.with_recompute
    if isinstance(ck, dict):
        kw["activation_checkpointing"] = Checkpointing(**ck)
    kw["offload"] = p.provenance.get("offload_mode", "none")  # scalemodel.offload
    if fragmentation:
        kw["fragmentation"] = fragmentation
    if mp is not None and mp.active:  # n counts replicas; memory() the job's GPUs
        kw.update(tp=mp.tp, pp=mp.pp, microbatches=mp.microbatches,
                  virtual_stages=mp.virtual_stages,
                  sequence_parallel=mp.sequence_parallel)
        n = int(n) * mp.size  # sharded over the replicas (tp with pp=1)
    try:
        m, spec = _memory_lean(p, int(n), sharding=strategy, gpu=gpu, loss=loss,
                               accounting=accounting, **kw)  # memory(), lean when it fits
    except InvalidParameterError as exc:  # the host cannot hold what is offloaded
        if isinstance(exc, HostMemoryError):  # (against the usual server's host memory)
            return None, False, None, (f"; does not fit: {exc} (the time questions take "
                                       "no host_memory=; scalemodel.memory(..., "
                                       "host_memory=) checks your nodes)")
        if exc.parameter == "host_memory":  # no server recorded: unknown, not 'no'
            return None, None, None, (f"; memory not checked on {_gpu_name(gpu)}: no host "
                                      "memory is recorded for its servers (ask "
                                      "scalemodel.memory(..., host_memory=) with yours)")
        if exc.parameter != "activation_checkpointing":
            raise
        # a setting the time model answers (with its stated assumption) and the memory
        # model does not: the answer without a memory check, said, not refused (with
        # gpu= too: the time question is the same one on that GPU)
        return None, None, None, f"; memory not checked on {_gpu_name(gpu)} ({exc})"
    if m.fits is True:  # (the lean estimate: per_gpu and fits)
        return float(m.per_gpu), True, spec.name, ""
    note = "" if m.fits else (f"; does not fit on {m.gpu.name}: {m.per_gpu / 2**30:.1f} GiB "
                              f"per GPU > {m.gpu.hbm_bytes / 2**30:.0f} GiB "
                              f"(sharding={m.sharding!r}"
                              + ("" if m.complete else ", activations unknown") + ")"
                              + suggestions_text(m.suggestions))
    return float(m.per_gpu), bool(m.fits), m.gpu.name, note


def _gpu_name(gpu) -> str:
    """A GPU's name for a message: a spec's ``name``, else the value as given [-]."""
    return str(getattr(gpu, "name", gpu))


def _loss(loss):
    """``loss``, checked before any work (:func:`scalemodel.checkpointing.canonical_loss`):
    a bad value is refused even where no memory is checked."""
    from .checkpointing import canonical_loss

    return canonical_loss(loss)


def _fragmentation(fragmentation):
    """``fragmentation`` as a fraction, checked before any work as
    :func:`~scalemodel.memory` checks it (a name is the allocator setting's fraction,
    :data:`~scalemodel.memory.FRAGMENTATION`) [-]."""
    from .memory import _check_measure

    return _check_measure("reserved", fragmentation)[1]


def _accounting(accounting, sc=None):
    """``accounting``, checked before any work as :func:`~scalemodel.memory` checks it,
    with its own error (``memory._check_accounting``): the value alone without a scenario;
    with one, also ``"fsdp"`` against the scenario's sharding strategy and offload, so a
    combination memory() refuses is refused even where no memory is checked [-]."""
    from .memory import _check_accounting

    if sc is None:
        return _check_accounting(accounting, "zero3", "none")  # zero3 takes every value
    strategy = "none" if sc.sharding is None else sc.sharding.strategy
    return _check_accounting(accounting, strategy,
                             sc.profile.provenance.get("offload_mode", "none"))


def _with_memory(result, sc, n, gpu, loss="unfused", accounting="zero", fragmentation=0.0):
    settings = dict(sc.settings(), loss=loss, accounting=accounting,
                    fragmentation=fragmentation)
    per, fits, name, note = memory_check(sc, n, gpu, loss, accounting, fragmentation)
    if per is None and fits is None:  # (a note says why memory was not checked)
        return attrs.evolve(result, settings=settings, message=result.message + note)
    return attrs.evolve(result, settings=settings, memory_per_gpu=per, fits=fits, gpu=name,
                        message=result.message + note)


def _for_the_job(result, sc, n, bw=None):
    """A result for the data-parallel dimension of a TP x PP job, said in the job's terms:
    its GPUs ``n`` and line rate (a ring's rate is the line rate x nics_per_node / tp)."""
    mp = sc.model_parallel
    if mp is None:
        return result
    d = mp.dp(n)
    sched = ("1F1B" if mp.virtual_stages == 1
             else f"interleaved 1F1B, {mp.virtual_stages} chunks per stage")
    if mp.sequence_parallel:
        sched += ", sequence parallel"
    note = (f" [the data-parallel dimension of tp={mp.tp} x pp={mp.pp} ({sched}, "
            f"{mp.microbatches} micro-batches) on {n} GPUs: {d} replicas")
    changes = dict(n=n)
    if bw is not None:
        changes["bw"] = float(bw)
        ring = float(bw) * sc.bw_scale
    else:
        ring = float(result.bw)
        changes["bw"] = ring / sc.bw_scale
        if result.interval is not None:  # the ends too are rings' rates
            changes["interval"] = tuple(None if v is None else float(v) / sc.bw_scale
                                        for v in result.interval)
    if sc.bw_scale != 1.0 and math.isfinite(ring) and ring > 0:
        note += (f", each data-parallel ring at {format_bandwidth(ring)}, the line rate x "
                 f"{sc.bw_scale:g} (the node's NICs over its {mp.tp} tensor-parallel ranks' "
                 f"rings): {format_bandwidth(changes['bw'])} per NIC")
    return attrs.evolve(result, message=result.message + note + "]", **changes)


def _builder(model, **kw):
    """``build(cluster)``: the scenario of this question on a given cluster (the asked one,
    or a corner of its intervals)."""
    return lambda cl: Scenario.build(model, cluster=cl, **kw)


def _corner(sc, cluster, build):
    """``build(cluster)`` for a corner of the fitted cluster of ``sc`` (made by
    ``build``): the corner's scenario made with the others
    (:func:`~scalemodel.model._corner_scenario`) [-]."""
    made = _corner_scenario(sc, cluster)
    return build(cluster) if made is None else made


def _with_interval(result, sc, solve_at, target, field, what, model=None, n=None):
    """``result`` with the interval of ``field`` over the cluster's intervals and
    alternatives (:func:`~scalemodel.intervals.answer_interval`; ``solve_at(t)`` gives
    the function of a cluster that solves the answer's ``field`` at target scaling factor
    ``t``), widened by the fit's model discrepancy
    (:func:`~scalemodel.intervals.discrepant_solution`); an unbounded end is None and
    printed as such (``n``: the data-parallel workers; one is not widened). The message
    says when a fitted efficiency is carried to ``model`` from another model's runs
    (:func:`~scalemodel.efficiency.carried_over`)."""
    from .discrepancy import discrepancy_factor

    cl = sc.cluster
    if cl is None or discrepancy_factor(cl, n) <= 1.0 and (
            not (cl.intervals or cl.alternatives or "efficiency" in cl.extra)
            or not cl.alternatives and all(c is cl for c in cl.corners())):
        return result
    from .intervals import answer_interval, discrepant_solution

    iv = discrepant_solution(answer_interval(solve_at(target), cl, getattr(result, field)),
                             cl, solve_at, target, n)
    if what == "ratio":
        fmt, why = (lambda v: f"{v:.3g}x"), "no ratio reaches the target"
    else:  # a ring's rate said per NIC, as the answer is (_for_the_job)
        scale = float(getattr(sc, "bw_scale", 1.0))
        fmt, why = (lambda v: _bw_text(v / scale)), "no line rate reaches the target"
    return attrs.evolve(result, interval=iv.pair,
                        message=f"{result.message}; {iv.describe(fmt, why)}"
                        + _carried_note(cl, model, _tp_of(sc), _recompute_of(sc)))


def _tp_of(sc):
    """The tensor-parallel degree of a scenario's job [GPUs]."""
    mp = getattr(sc, "model_parallel", None)
    return 1 if mp is None else int(mp.tp)


def _recompute_of(sc):
    """The share of activation recompute in a scenario's job
    (:func:`~scalemodel.efficiency.recompute_share` of its profile), or None [-]."""
    from .model import job_recompute_share

    p = getattr(sc, "profile", None)
    return None if p is None else job_recompute_share(p)


def _carried_note(cluster, model, tp=1, recompute=None) -> str:
    """``"; the efficiency fitted on ... is carried to ..."`` when ``cluster``'s fitted
    efficiency applies to ``model`` but its runs did not show that model at that
    tensor-parallel degree ``tp`` (or its recompute share ``recompute``), else ``""``."""
    if model is None:
        return ""
    from .profiles import load_profile

    profile = load_profile(model)
    derived = getattr(cluster, "_derived", None)  # once per cluster object and profile
    kept = None if derived is None else derived.setdefault(("carried notes",), {})
    key = (id(profile), tp, None if recompute is None else round(float(recompute), 9))
    hit = None if kept is None else kept.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    text = _carried_text(cluster, profile, tp, recompute)
    if kept is not None:
        if len(kept) >= 64:
            kept.clear()
        kept[key] = (profile, text)
    return text


def _carried_text(cluster, profile, tp=1, recompute=None) -> str:
    """:func:`_carried_note` of a loaded ``profile`` at ``tp``, computed
    (:func:`~scalemodel.efficiency.carried_note`, with ``"; "`` before it) [-]."""
    from .efficiency import carried_note

    text = carried_note(cluster, profile, tp, recompute=recompute)
    return f"; {text}" if text else ""


def _scalar(name, value):
    if type(value) in (int, float):
        return value
    if np.ndim(value):
        raise ParameterTypeError(name, value, "a scalar (the solvers answer one question; "
                                 "loop or use scaling_factor for grids)")
    return value


def _sf_at(sc, n, x_eff, compressed, *, r=1.0, bw=None):
    """Scaling factor, binding and critical parts at ``x_eff`` [s/bit]."""
    sf, why = _sf_lazy(sc, n, x_eff, compressed, r=r, bw=bw)
    return (sf, *why())


def _sf_lazy(sc, n, x_eff, compressed, *, r=1.0, bw=None):
    """Scaling factor at ``x_eff`` [s/bit], and a function that tells what binds there
    (binding, critical parts) when an answer needs it."""
    p = sc.profile
    lines, env = sc.lines(n, compressed)
    end = float(env(x_eff))
    sf = p.iteration_time / sc.step_time(n, end)
    return sf, lambda: sc.critical(n, lines, int(env.argmax(x_eff)), x_eff, r=r, bw=bw)


def below(limit, target):
    """``limit`` printed with as many digits as it takes to differ from ``target`` (a limit of
    0.99966 below a target of 1 reads "0.99966", never "1.000"; 2.3e-15 reads "2.3e-15",
    never "0.000")."""
    if 0.0 < limit < 1e-3:
        return f"{limit:.3g}"
    for digits in range(3, 13):
        text = f"{limit:.{digits}f}"
        if float(text) < target:
            return text
    return repr(limit)


def ratio_text(ratio):
    """A needed compression ratio printed with as many digits as it takes to differ from
    1 (1.0001 reads "1.0001", never "1"; 5.9123 reads "5.91") [-]."""
    for digits in range(3, 18):
        text = f"{ratio:.{digits}g}"
        if ratio <= 1.0 or float(text) != 1.0:
            return text
    return repr(ratio)


def part_text(name, seconds):
    """A critical-path part for people: ``"latency 0.459 ms"``, ``"latency 5.73 s"`` from a
    second on (never ``"5.73e+03 ms"``) [s]."""
    return (f"{name} {seconds * 1e3:.3g} ms" if seconds < 1.0 else
            f"{name} {seconds:.3g} s")


def _why_not(binding, parts, limit, target):
    detail = ", ".join(part_text(k, v) for k, v in parts.items() if k != "bandwidth")
    return (f"even unlimited {{what}} reaches only {below(limit, target)} < target {target:g}: "
            f"{binding} binds ({detail} on the critical path)")


_SLACK = 1e-9  # relative: a target within 1e-9 of the limit is reached only in the limit


def _x_star(env, level):
    """Largest x with E(x) <= level, or 0 when the slack is within rounding of zero."""
    x, _ = env.max_x_below(level)
    if math.isinf(x) or x <= 0:
        return x
    slack = env._lowest_gap(level)  # min(level - c) over the growing hull lines
    if slack <= _SLACK * abs(level):
        return 0.0
    return x


def _public_sf(sc, n, bw, u, r):
    """Scaling factor exactly as :func:`~scalemodel.scaling_factor` computes it at line
    rate(s) ``bw`` [bits/s] and ratio(s) ``r`` [-] (vectorized), ``u`` the asked
    utilization [-]."""
    u_eff = effective_utilization(sc, bw, u)
    with np.errstate(over="ignore", divide="ignore"):
        x = 1.0 / (np.multiply(np.multiply(u_eff, bw), r))
    return sc.profile.iteration_time / sc.iteration_times(n, x, r)


_TOP = 1e300  # the largest u bw r the exact-reach search tries
_SCAN_TOP = 1e16  # the largest u bw r a scan for a scaling factor that can fall tries


def _smallest_reaching(sf_of, lo, hi, target):
    """The smallest float ``v`` in ``(lo, hi]`` with ``sf_of(v) >= target``, given
    ``sf_of(lo) < target <= sf_of(hi)`` and ``sf_of`` non-decreasing and vectorized: a
    search over the floats between (their bit patterns are ordered), 1024 probes a round,
    about seven rounds."""
    a = int(np.float64(lo).view(np.int64))
    b = int(np.float64(hi).view(np.int64))
    while b - a > 1:
        if b - a <= 1025:
            probes = np.arange(a + 1, b, dtype=np.int64)
        else:
            step = (b - a) // 1025
            probes = a + step * np.arange(1, 1025, dtype=np.int64)
        ok = np.asarray(sf_of(probes.view(np.float64))) >= target
        if ok.any():
            i = int(np.argmax(ok))
            b = int(probes[i])
            a = int(probes[i - 1]) if i > 0 else a
        else:
            a = int(probes[-1])
    return float(np.int64(b).view(np.float64))


def _bisect_floats(sf_of, lo, hi, target):
    """The smallest float ``v`` in ``(lo, hi]`` with ``sf_of(v) >= target``, given
    ``sf_of(lo) < target <= sf_of(hi)`` and ``sf_of`` non-decreasing, one value at a time
    (for a scaling factor that plans per value, MG-WFBP's: :func:`_smallest_reaching`'s
    1024 probes a round cost a plan each): doubling from ``lo`` brackets it, then a
    bisection of the floats between (their bit patterns are ordered), about 60 values."""
    a = float(lo)
    b = min(2.0 * a, hi)
    while float(sf_of(np.float64(b))) < target:
        a, b = b, min(2.0 * b, hi)
    ia = int(np.float64(a).view(np.int64))
    ib = int(np.float64(b).view(np.int64))
    while ib - ia > 1:
        mid = (ia + ib) // 2
        if float(sf_of(np.int64(mid).view(np.float64))) >= target:
            ib = mid
        else:
            ia = mid
    return float(np.int64(ib).view(np.float64))


def _may_fall(sc) -> bool:
    """Whether the scaling factor of ``sc`` can fall as the line rate or the ratio rises:
    MG-WFBP's plan, made for the communication channel, splits into more buckets on
    faster links. On a cluster with a per-bucket cost on the compute path
    (``bucket_overhead``) each bucket more costs the step; and the plan merges by a
    startup and a per-byte cost fitted to the collective at two sizes, which NCCL's
    per-size algorithms and a per-message latency make smaller than what small buckets
    cost (``resnet50`` on 256 workers, ``nccl-2.4``, ``alpha=1e-4``: 0.897 at 91.9
    Gbit/s, 0.668 at 93.0, the session 29 audit). Every MG-WFBP plan is scanned."""
    return bool(sc.needs_plan)


_GRID_STEP = 1.05  # the geometric step of the scan for a scaling factor that can fall


def _first_reaching(sf_of, lo, hi, target):
    """``(value, best, at)``: the least value in ``[lo, hi]`` where ``sf_of`` reaches
    ``target`` (None if none does), and the largest scaling factor seen with where, for a
    scaling factor that can fall as the value rises (:func:`_may_fall`). A geometric grid
    of step :data:`_GRID_STEP` (vectorized), refined tenfold in the steps before the first
    reaching point that come within 0.5 % of the target (and around the best point when
    none reaches it); the first reaching point is then bracketed by its predecessor and
    bisected (:func:`_bisect_floats`). A window above the target narrower than a tenth of
    a step, or one that no grid point comes near, can be missed."""
    k = max(1, int(math.ceil(math.log(hi / lo) / math.log(_GRID_STEP))))
    pts = np.minimum(lo * _GRID_STEP ** np.arange(k + 1), hi)
    sf = np.asarray(sf_of(pts), float)
    hit = np.flatnonzero(sf >= target)
    # a window narrower than the step: refine (10 points) the steps before the first hit
    # that come within 0.5 % of the target, and the one around the best point
    end = int(hit[0]) if hit.size else k
    near = np.flatnonzero(np.maximum(sf[:end], sf[1:end + 1]) >= target * (1 - 5e-3))
    j = int(np.argmax(sf))
    steps = sorted(set(near.tolist()) | ({max(j - 1, 0), min(j, k - 1)} if not hit.size
                                         else set()))
    if steps:
        fine = np.concatenate([np.geomspace(pts[i], pts[i + 1], 11)[1:-1] for i in steps])
        pts, sf = np.concatenate([pts, fine]), np.concatenate([sf, sf_of(fine)])
        order = np.argsort(pts, kind="stable")
        pts, sf = pts[order], sf[order]
        hit = np.flatnonzero(sf >= target)
    best = int(np.argmax(sf))
    if hit.size == 0:
        return None, float(sf[best]), float(pts[best])
    i = int(hit[0])
    if i == 0:
        return float(pts[0]), float(sf[best]), float(pts[best])
    return _bisect_floats(sf_of, float(pts[i - 1]), float(pts[i]), target), \
        float(sf[best]), float(pts[best])


def _limit_message(what, limit, target):
    return (f"the target {target:g} equals the limit {limit:.6g} that unlimited {what} only "
            f"approaches (the last gradients are ready when backward ends): no finite "
            f"{'ratio' if what == 'compression' else 'line rate'} reaches it")


def min_compression(model, bw, *, n=DEFAULT_N, target=DEFAULT_TARGET, utilization=1.0,
                    algorithm=None, fusion=None, alpha=None, codec_cost=0.0,
                    gpus_per_node=None, nics_per_node=None, intra_bw=None, intra_alpha=None,
                    ps_servers=None, cluster=None, sharding=None,
                    gpu=None, activation_checkpointing=None,
                    offload=None, shard_group=None, tp=1, pp=1,
                    microbatches=None, virtual_stages=1, loss="unfused",
                    accounting="zero", sequence_parallel=False,
                    fragmentation=0.0) -> CompressionResult:
    """Smallest compression ratio whose scaling factor reaches ``target``, eq. :eq:`inverses`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Built-in profile name, profile file or profile [-].
    bw : float or str
        Line rate of each worker's link (each NIC with a topology), e.g. ``10e9`` or
        ``"10Gbps"`` [bits/s].
    n : int
        Number of workers; default :data:`~scalemodel.solvers.DEFAULT_N` (64) [workers].
    target : float
        Scaling factor to reach, in (0, 1]; default
        :data:`~scalemodel.solvers.DEFAULT_TARGET` (0.9) [-].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    algorithm, fusion, alpha, codec_cost, gpus_per_node, nics_per_node, intra_bw, intra_alpha, ps_servers, cluster, sharding
        As in :func:`~scalemodel.scaling_factor`: [-], [-], [s], [s/byte], [workers],
        [NICs], [bits/s], [s], [servers], a cluster profile or file, [-]. Under sharding
        the ratio divides the bytes of every collective.
    gpu : str, GPUSpec or None
        GPU whose memory is checked (:func:`~scalemodel.memory`); None: the profile's,
        for profiles derived from a transformer configuration, else no check [-].
    activation_checkpointing, offload
        As in :func:`~scalemodel.scaling_factor` (time and memory) [-].
    shard_group : int or None
        As in :func:`~scalemodel.scaling_factor` (time and memory) [GPUs].
    tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`~scalemodel.scaling_factor`: the answer is for the data-parallel
        dimension of the job, ``n`` its GPUs, the line rate a NIC's; the memory check
        is :func:`~scalemodel.memory` with them (the interleaved schedule's in-flight
        chunks and sequence parallelism's split activations included) [GPUs], [stages],
        [micro-batches], [chunks], [-].
    loss : str
        How the cross-entropy loss is computed, for the memory check only (the time
        model does not use it): ``"unfused"`` (the default, PyTorch's ``cross_entropy``),
        ``"fused"`` (flash-attention's ``CrossEntropyLoss``) or ``"unfused+logits"``
        (``cross_entropy`` on fp32 logits kept through backward), as in
        :func:`~scalemodel.memory`; the result's ``settings`` record it. Anything else
        raises :class:`~scalemodel.InvalidParameterError` naming the value and the valid
        ones, as :func:`~scalemodel.memory` does [-].
    accounting : str
        How :func:`~scalemodel.memory` counts the model state and the peak, for the memory
        check only: ``"zero"`` (the default, ZeRO's persistent state with every
        activation term at once) or ``"fsdp"`` (what PyTorch FSDP2 holds at its peak; with
        sharding zero2, zero3 or hybrid_shard and no offload), as in
        :func:`~scalemodel.memory`; the result's ``settings`` record it. Anything else, or
        ``"fsdp"`` with another strategy or with offload, raises
        :class:`~scalemodel.InvalidParameterError` naming the value and the valid ones, as
        :func:`~scalemodel.memory` does [-].
    fragmentation : float or str
        Free space inside the allocator's segments, for the memory check only: a
        fraction of the reserved memory in [0, 1) or the allocator's setting by name
        (``"expandable_segments"``, 0, the default; ``"default_segments"``, 0.15), as in
        :func:`~scalemodel.memory`; the result's ``settings`` record the fraction [-].

    Returns
    -------
    CompressionResult
        ``ratio`` >= 1 (``math.inf`` with ``feasible=False`` when no finite ratio reaches
        the target), the scaling factor reached, and what binds. A target equal to the
        limit (``target=1.0`` where nothing but communication separates the scaling
        factor from 1) is answered with the smallest ratio at which
        :func:`~scalemodel.scaling_factor` reaches it in floating point, when one does
        (the communication left then rounds away; such ratios are astronomically large).
        With a fitted cluster, ``interval`` ranges over its intervals and alternatives.

    Examples
    --------
    >>> import scalemodel
    >>> res = scalemodel.min_compression("resnet50", "10Gbps", n=64, fusion="horovod")
    >>> res.feasible, res.ratio > 1
    (True, True)
    """
    n = _scalar("n", check_count(n, "n"))
    bw = _scalar("bw", parse_bandwidth(bw, "bw"))
    target = _scalar("target", check_fraction(target, "target"))
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    loss = _loss(loss)
    accounting = _accounting(accounting)
    fragmentation = _fragmentation(fragmentation)
    build = _builder(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                     codec_cost=codec_cost, gpus_per_node=gpus_per_node,
                     nics_per_node=nics_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
                     ps_servers=ps_servers, sharding=sharding,
                     activation_checkpointing=activation_checkpointing, offload=offload,
                     shard_group=shard_group, tp=tp, pp=pp, microbatches=microbatches,
                     virtual_stages=virtual_stages, sequence_parallel=sequence_parallel)
    sc = build(cluster)
    _accounting(accounting, sc)  # "fsdp" against the strategy and offload, before solving
    n_dp, bw_dp = sc.data_parallel(n, bw)  # scalemodel.parallel (unchanged without tp/pp)
    res = _with_interval(_min_compression(sc, bw_dp, n_dp, target, u), sc,
                         lambda t: lambda cl: _corner_ratio(_corner(sc, cl, build), bw_dp,
                                                            n_dp, t, u),
                         target, "ratio", "ratio", model, n_dp)
    _pressure_unanswered(sc, n, "compression ratio")
    return _for_the_job(_with_memory(res, sc, n_dp, gpu, loss, accounting, fragmentation), sc, n, bw)


def _pressure_unanswered(sc, n, what):
    """A :class:`~scalemodel.exceptions.ModelWarning` when the job is memory-pressured
    (``scalemodel.model._job_pressure``): the solved ``what`` and its interval leave that
    slowdown out, since no compression or line rate buys back a slower compute."""
    from .model import _job_pressure

    _job_pressure(sc, n, effect=f"the {what} and its interval leave that slowdown out: "
                                f"no compression or line rate buys back a slower compute")


def _reach_exactly(sf_of, lo, hi, target):
    """The smallest value in ``[lo, hi]`` at which ``sf_of`` (the public scaling
    factor against a ratio or a line rate) reaches ``target``, or None when none does:
    for a target equal to the limit, which finite values reach in floating point once
    the remaining communication rounds away."""
    if not (hi > lo and float(sf_of(np.float64(hi))) >= target):
        return None
    if float(sf_of(np.float64(lo))) >= target:
        return float(lo)
    return _smallest_reaching(sf_of, lo, hi, target)


def _min_compression(sc, bw, n, target, u, explain=True) -> CompressionResult:
    p = sc.profile
    sc0, u0 = sc, u
    u = effective_utilization(sc, bw, u)
    with np.errstate(over="ignore", divide="ignore"):
        x_net = 1.0 / (u * bw)
    if not math.isfinite(x_net):
        raise InvalidParameterError("bw", bw, "is too small: the compression it needs is "
                                    "beyond floating point", "Line rates are in bits/s "
                                    "(10e9 or '10Gbps' is 10 Gbit/s)")
    if sc.needs_plan:  # MG-WFBP plans its buckets for every ratio asked
        return _min_compression_planned(sc0, bw, n, target, u0, x_net, explain)
    sc = sc.planned(n, x_net)  # (other fusions: unchanged)
    base = float(sc.x_effective(n, x_net, 1.0))  # x_eff at ratio 1
    sf1, why1 = _sf_lazy(sc, n, base, False, bw=bw)
    sf_inf, why_inf = _sf_lazy(sc, n, 0.0, True, r=math.inf, bw=bw)
    common = dict(uncompressed_scaling_factor=sf1, max_scaling_factor=sf_inf, n=n, bw=bw,
                  target=target, utilization=u)
    if sf1 >= target:
        bind1, parts1 = why1()
        return CompressionResult(
            ratio=1.0, feasible=True, scaling_factor=sf1, binding=bind1,
            message=(f"no compression needed: {p.name} on {n} workers at "
                     f"{_bw_text(bw)} already scales {sf1:.3f} >= {target:g}"),
            critical_parts=parts1, **common)
    level = p.iteration_time / target - sc.forward(n) - sc.update(n)
    x_star = _x_star(sc.lines(n, True)[1], level)
    if not x_star > 0:
        if sf_inf >= target * (1 - 1e-12):  # the limit: reached where rounding ends it?
            exact = _reach_exactly(lambda r: _public_sf(sc0, n, bw, u0, r), 1.0,
                                   _TOP / (u * bw), target)  # u bw r stays finite
            if exact is not None:
                sf = float(_public_sf(sc0, n, bw, u0, exact))
                _, bind, parts = _sf_at(sc, n, float(sc.x_effective(n, x_net / exact, exact)),
                                        True, r=exact, bw=bw)
                return CompressionResult(
                    ratio=exact, feasible=True, scaling_factor=sf, binding=bind,
                    message=(f"{p.name} on {n} workers at {_bw_text(bw)} needs "
                             f"{ratio_text(exact)}x compression to scale {target:g} "
                             f"(uncompressed: {below(sf1, target)}; the target is the "
                             "limit, reached once the communication left is below "
                             "rounding)"),
                    critical_parts=parts, **common)
        bind_inf, parts_inf = why_inf()
        if x_star == 0.0 and sf_inf >= target * (1 - 1e-12):
            msg = _limit_message("compression", sf_inf, target)
        else:
            msg = _why_not(bind_inf, parts_inf, sf_inf, target).format(what="compression")
        return CompressionResult(ratio=math.inf, feasible=False, scaling_factor=sf_inf,
                                 binding=bind_inf, message="no compression ratio is enough: "
                                 + msg, critical_parts=parts_inf, **common)
    ratio = max(1.0, _NUDGE * base / x_star)
    if not math.isfinite(ratio):
        raise InvalidParameterError("bw", bw, "is too small: the compression it needs is "
                                    "beyond floating point", "Line rates are in bits/s "
                                    "(10e9 or '10Gbps' is 10 Gbit/s)")
    sf, why = _sf_lazy(sc, n, float(sc.x_effective(n, x_net / ratio, ratio)), True,
                       r=ratio, bw=bw)
    bind, parts = why() if explain else ("", {})  # a corner needs only the ratio
    return CompressionResult(
        ratio=ratio, feasible=True, scaling_factor=sf, binding=bind,
        message=(f"{p.name} on {n} workers at {_bw_text(bw)} needs "
                 f"{ratio_text(ratio)}x compression to scale {target:g} (uncompressed: "
                 f"{below(sf1, target)})"),
        critical_parts=parts, **common)


def _min_compression_planned(sc, bw, n, target, u, x_net, explain) -> CompressionResult:
    """:func:`_min_compression` under MG-WFBP, which plans its buckets for every
    configuration, the compression ratio included (as :func:`~scalemodel.scaling_factor`
    does: ``Scenario.iteration_times``): the least ratio reaching ``target`` is searched
    on that scaling factor over the floats from 1 (:func:`_reach_exactly`; it does not
    decrease with the ratio), not on the uncompressed network's plan, which put the
    ratio 5 times too high."""
    p = sc.profile
    u_eff = float(effective_utilization(sc, bw, u))
    top = _TOP / (u_eff * bw)  # u bw r stays finite

    def sf_of(r):
        return _public_sf(sc, n, bw, u, r)

    def at(r):  # scaling factor, binding and parts with the plan made at ratio r
        scp = sc.planned(n, x_net / r, r)
        sf, why = _sf_lazy(scp, n, float(scp.x_effective(n, x_net / r, r)), r > 1.0,
                           r=r, bw=bw)
        return (sf, *(why() if explain else ("", {})))

    sf1 = float(sf_of(np.float64(1.0)))
    sf_inf = float(sf_of(np.float64(top)))
    common = dict(uncompressed_scaling_factor=sf1, max_scaling_factor=sf_inf, n=n, bw=bw,
                  target=target, utilization=u_eff)
    if sf1 >= target:
        _, bind, parts = at(1.0)
        return CompressionResult(
            ratio=1.0, feasible=True, scaling_factor=sf1, binding=bind,
            message=(f"no compression needed: {p.name} on {n} workers at "
                     f"{_bw_text(bw)} already scales {sf1:.3f} >= {target:g}"),
            critical_parts=parts, **common)
    best = None
    if _may_fall(sc):  # (it can fall as the ratio rises: a scan of the realistic ratios)
        ratio, best, best_at = _first_reaching(sf_of, 1.0, max(2.0, _SCAN_TOP / (u_eff * bw)),
                                               target)
    else:
        ratio = _bisect_floats(sf_of, 1.0, top, target) if sf_inf >= target else None
    if ratio is None:
        _, bind, parts = at(top)
        why = _why_not(bind, parts, sf_inf, target).format(what="compression")
        if best is not None and best > sf_inf:
            why = (f"the most any ratio reaches is {below(best, target)} < target "
                   f"{target:g} (at {best_at:.3g}x; MG-WFBP's plan splits into more buckets "
                   "on faster links, each with the cluster's bucket_overhead)")
        return CompressionResult(ratio=math.inf, feasible=False, scaling_factor=sf_inf,
                                 binding=bind, message="no compression ratio is enough: "
                                 + why, critical_parts=parts, **common)
    sf = float(sf_of(np.float64(ratio)))
    _, bind, parts = at(ratio)
    return CompressionResult(
        ratio=ratio, feasible=True, scaling_factor=sf, binding=bind,
        message=(f"{p.name} on {n} workers at {_bw_text(bw)} needs "
                 f"{ratio_text(ratio)}x compression to scale {target:g} (uncompressed: "
                 f"{below(sf1, target)}; MG-WFBP planned at each ratio)"),
        critical_parts=parts, **common)


def _corner_ratio(sc, bw, n, target, u) -> float:
    """The ratio of :func:`_min_compression` alone, as an interval's corner needs it [-]:
    the same operations on the common path (no compression needed, a finite ratio, or
    none below the limit), the whole solve otherwise (the limit, a line rate too
    small)."""
    sc0, u0 = sc, u
    if sc.needs_plan:  # planned at every ratio: the whole solve
        return _min_compression(sc0, bw, n, target, u0, explain=False).ratio
    u = effective_utilization(sc, bw, u)
    if type(u) is float and type(bw) is float and u * bw != 0.0:
        x_net = 1.0 / (u * bw)  # Python floats: what numpy's errstate would not change
    else:
        with np.errstate(over="ignore", divide="ignore"):
            x_net = 1.0 / (u * bw)
    if math.isfinite(x_net):
        sc = sc.planned(n, x_net)
        p = sc.profile
        t1, fwd, upd = p.iteration_time, sc.forward(n), sc.update(n)
        env = sc.corner_envelope(n, False)  # (with the wire map x_effective reads)
        base = float(sc.x_effective(n, x_net, 1.0))
        if t1 / (fwd + float(env(base)) + upd) >= target:
            return 1.0
        level = t1 / target - fwd - upd
        if sc.codec_cost > 0:  # else the compressed lines are these (Scenario.lines)
            env = sc.corner_envelope(n, True)
        x_star = _x_star(env, level)
        if x_star > 0:
            ratio = max(1.0, _NUDGE * base / x_star)
            if math.isfinite(ratio):
                return ratio
        elif t1 / (fwd + float(env(0.0)) + upd) < \
                target * (1 - 1e-12):  # below the limit: no ratio reaches the target
            return math.inf
    return _min_compression(sc0, bw, n, target, u0, explain=False).ratio


def required_bandwidth(model, *, n=DEFAULT_N, target=DEFAULT_TARGET, compression=1.0,
                       utilization=1.0, algorithm=None, fusion=None, alpha=None,
                       codec_cost=0.0, gpus_per_node=None, nics_per_node=None, intra_bw=None,
                       intra_alpha=None, ps_servers=None, cluster=None, sharding=None,
                       gpu=None, activation_checkpointing=None,
                       offload=None, shard_group=None, tp=1, pp=1,
                       microbatches=None, virtual_stages=1, loss="unfused",
                       accounting="zero", sequence_parallel=False,
                       fragmentation=0.0) -> BandwidthResult:
    """Smallest line rate whose scaling factor reaches ``target``, eq. :eq:`inverses`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Built-in profile name, profile file or profile [-].
    n : int
        Number of workers; default 64 [workers].
    target : float
        Scaling factor to reach, in (0, 1]; default 0.9 [-].
    compression : float
        Compression ratio >= 1 [-].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    algorithm, fusion, alpha, codec_cost, gpus_per_node, nics_per_node, intra_bw, intra_alpha, ps_servers, cluster, sharding
        As in :func:`~scalemodel.scaling_factor`. With a cluster, ``bw`` is the line rate
        whose achieved bandwidth (eq. :eq:`achieved`) is enough; when the transport's
        ceiling is below what is needed, no line rate is.
    gpu : str, GPUSpec or None
        GPU whose memory is checked, as in :func:`min_compression` [-].
    activation_checkpointing, offload
        As in :func:`~scalemodel.scaling_factor` (time and memory) [-].
    shard_group : int or None
        As in :func:`~scalemodel.scaling_factor` (time and memory) [GPUs].
    tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`~scalemodel.scaling_factor`: the answer is for the data-parallel
        dimension of the job, ``n`` its GPUs, the line rate a NIC's; the memory check
        is :func:`~scalemodel.memory` with them (the interleaved schedule's in-flight
        chunks and sequence parallelism's split activations included) [GPUs], [stages],
        [micro-batches], [chunks], [-].
    loss : str
        As in :func:`min_compression`: the cross-entropy's kernel, for the memory check
        only [-].
    accounting : str
        As in :func:`min_compression`: how the model state and the peak are counted,
        for the memory check only [-].
    fragmentation : float or str
        As in :func:`min_compression`: the allocator's free space inside segments, for the
        memory check only [-].

    Returns
    -------
    BandwidthResult
        ``bw`` [bits/s] (``math.inf`` with ``feasible=False`` when no bandwidth is enough;
        0.0 when any is, e.g. a run inside one node). A target equal to the limit
        (``target=1.0``) is answered with the smallest line rate at which
        :func:`~scalemodel.scaling_factor` reaches it in floating point, when one does.
        With a fitted cluster, ``interval`` ranges over its intervals and alternatives.

    Examples
    --------
    >>> import scalemodel
    >>> res = scalemodel.required_bandwidth("resnet50", n=64, target=0.9, fusion="horovod")
    >>> print(scalemodel.format_bandwidth(res.bw))
    22.03 Gbit/s
    """
    n = _scalar("n", check_count(n, "n"))
    target = _scalar("target", check_fraction(target, "target"))
    r = _scalar("compression", check_ratio(compression, "compression"))
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    loss = _loss(loss)
    accounting = _accounting(accounting)
    fragmentation = _fragmentation(fragmentation)
    warn_unused_codec_cost(codec_cost, r)
    build = _builder(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                     codec_cost=codec_cost, gpus_per_node=gpus_per_node,
                     nics_per_node=nics_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
                     ps_servers=ps_servers, sharding=sharding,
                     activation_checkpointing=activation_checkpointing, offload=offload,
                     shard_group=shard_group, tp=tp, pp=pp, microbatches=microbatches,
                     virtual_stages=virtual_stages, sequence_parallel=sequence_parallel)
    sc = build(cluster)
    _accounting(accounting, sc)  # "fsdp" against the strategy and offload, before solving
    n_dp = sc.data_parallel(n, 1.0)[0]  # scalemodel.parallel (unchanged without tp/pp)
    res = _with_interval(_at_least_the_floor(_solve_bandwidth(sc, n_dp, target, r, u), sc,
                                             n_dp, r, u), sc,
                         lambda t: lambda cl: _floored(_corner_bw(_corner(sc, cl, build),
                                                                  n_dp, t, r, u)),
                         target, "bw", "bw", model, n_dp)
    _pressure_unanswered(sc, n, "required line rate")
    return _for_the_job(_with_memory(res, sc, n_dp, gpu, loss, accounting, fragmentation), sc, n)


def _floored(bw):
    """A corner's line rate below 1 Mbit/s as that floor (:func:`_at_least_the_floor`)."""
    return MIN_TEXT_BANDWIDTH if 0.0 < bw < MIN_TEXT_BANDWIDTH else bw


def _assumed(sc, r, u) -> str:
    """The compression and utilization a required bandwidth assumed, as its message
    says them: on a cluster, the utilization as a factor on the cluster's achieved
    bandwidth (left out at 1: "utilization 1" read as a contradiction of a fitted 0.91)."""
    if sc.cluster is None:
        return f"compression {r:g}x, utilization {u:g}"
    return (f"compression {r:g}x, the cluster's achieved bandwidth"
            + ("" if u == 1 else f" x utilization {u:g}"))


def _at_least_the_floor(res, sc, n, r, u) -> BandwidthResult:
    """A needed line rate below 1 Mbit/s, the least the library takes
    (:data:`~scalemodel.units.MIN_TEXT_BANDWIDTH`), answered as that floor, with the
    scaling factor, binding and parts there: the scaling factor does not fall as the rate
    rises on this path (:func:`_may_fall` scans from the floor), so any rate the library
    takes reaches the target, and the answer can be asked again (``bw=`` refuses the rate
    below it)."""
    floor = MIN_TEXT_BANDWIDTH
    if not (res.feasible and 0.0 < res.bw < floor):
        return res
    u_eff = float(effective_utilization(sc, floor, u))
    x = 1.0 / (u_eff * floor * r)
    scp = sc.planned(n, x, r)
    sf, why = _sf_lazy(scp, n, float(scp.x_effective(n, x, r)), r > 1, r=r, bw=floor)
    bind, parts = why()
    return attrs.evolve(
        res, bw=floor, scaling_factor=float(_public_sf(sc, n, floor, u, r)), binding=bind,
        critical_parts=parts,
        message=(f"{sc.profile.name} on {n} workers reaches {res.target:g} at any line rate "
                 f"from 1 Mbit/s, the least scalemodel takes (it needs at most "
                 f"{format_bandwidth(res.bw)}; {_assumed(sc, r, u)})"))


def _solve_bandwidth(sc, n, target, r, u, explain=True) -> BandwidthResult:
    if not sc.needs_plan:
        return _required_bandwidth(sc, n, target, r, u, explain)
    return _solve_bandwidth_planned(sc, n, target, r, u, explain)


def _solve_bandwidth_planned(sc, n, target, r, u, explain) -> BandwidthResult:
    """:func:`_required_bandwidth` under MG-WFBP, which plans its buckets for every line
    rate asked (as :func:`~scalemodel.scaling_factor` does): the least line rate reaching
    ``target`` is searched on that scaling factor over the floats
    (:func:`_bisect_floats`; it does not decrease with the line rate). A fixed point of
    solves on one plan each, as before, could stop on a plan made at another rate: on a
    cluster with a ceiling it answered 'no line rate' where 30 Gbit/s reaches the
    target."""
    p = sc.profile

    def sf_of(b):
        return _public_sf(sc, n, b, u, r)

    def planned_at(b):  # the plan scaling_factor makes at line rate b
        return sc.planned(n, 1.0 / (float(effective_utilization(sc, b, u)) * b * r), r)

    top = _TOP / (u * r)
    if _may_fall(sc):  # (it can fall as the rate rises: a scan of the realistic rates)
        lo = MIN_TEXT_BANDWIDTH
        bw, best, best_at = _first_reaching(sf_of, lo, _SCAN_TOP, target)
        if bw is None:
            res = _required_bandwidth(planned_at(_SCAN_TOP), n, target, r, u, explain)
            return attrs.evolve(res, bw=math.inf, feasible=False, message=(
                f"no bandwidth is enough: {p.name} on {n} workers reaches at most "
                f"{below(best, target)} < target {target:g} at any line rate from 1 Mbit/s "
                f"(at {format_bandwidth(best_at)}; MG-WFBP's plan splits into more buckets "
                "on faster links, each with the cluster's bucket_overhead)"))
    else:
        lo = 1.0
        sf_lo = float(sf_of(np.float64(lo)))
        if sf_lo >= target:  # (1 bit/s does: the floor is the answer, _at_least_the_floor)
            res = _required_bandwidth(planned_at(lo), n, target, r, u, explain)
            if res.bw == 0.0:  # nothing crosses the network
                return attrs.evolve(res, feasible=True, scaling_factor=sf_lo)
            return attrs.evolve(res, bw=lo, feasible=True, scaling_factor=sf_lo)
        if float(sf_of(np.float64(top))) < target:
            res = _required_bandwidth(planned_at(top), n, target, r, u, explain)
            if res.feasible:  # (that plan alone would reach it: the replanned curve does not)
                res = attrs.evolve(res, bw=math.inf, feasible=False, message=(
                    f"no bandwidth is enough: {p.name} on {n} workers reaches only "
                    f"{below(res.max_scaling_factor, target)} < target {target:g}"))
            return res
        bw = _bisect_floats(sf_of, lo, top, target)
    scp = planned_at(bw)
    u_eff = effective_utilization(scp, bw, u)
    sf, why = _sf_lazy(scp, n, float(scp.x_effective(n, 1.0 / (u_eff * bw * r), r)),
                       r > 1, r=r, bw=bw)
    bind, parts = why() if explain else ("", {})
    return BandwidthResult(
        bw=bw, feasible=True, scaling_factor=float(sf_of(np.float64(bw))), binding=bind,
        message=(f"{p.name} on {n} workers needs {_bw_text(bw)} per "
                 f"{'NIC' if sc.options.gpus_per_node else 'worker'} to scale "
                 f"{target:g} ({_assumed(sc, r, u)}; MG-WFBP planned at "
                 "each line rate)"),
        critical_parts=parts, max_scaling_factor=float(sf_of(np.float64(top))), n=n,
        target=target, compression=r, utilization=u)


def _required_bandwidth(sc, n, target, r, u, explain=True) -> BandwidthResult:
    p = sc.profile
    compressed = r > 1
    k1, k2 = sc.wire_map(n)
    x_floor = k2 / r
    sf_inf, bind_inf, parts_inf = _sf_at(sc, n, x_floor, compressed, r=r)
    common = dict(max_scaling_factor=sf_inf, n=n, target=target, compression=r, utilization=u)
    level = p.iteration_time / target - sc.forward(n) - sc.update(n)
    x_star = _x_star(sc.lines(n, compressed)[1], level)
    if math.isinf(x_star) or (k1 == 0.0 and x_floor <= x_star):
        return BandwidthResult(bw=0.0, feasible=True, scaling_factor=sf_inf, binding=bind_inf,
                               message="any bandwidth reaches the target (no "
                               "data-parallel traffic crosses the network)",
                               critical_parts=parts_inf, **common)
    if not x_star > 0 or x_floor > x_star:
        if sf_inf >= target * (1 - 1e-12):  # the limit: reached where rounding ends it?
            exact = _reach_exactly(lambda b: _public_sf(sc, n, b, u, r), 1.0,
                                   _TOP / (u * r), target)
            if exact is not None:
                u_eff = effective_utilization(sc, exact, u)
                _, bind, parts = _sf_at(sc, n, float(sc.x_effective(
                    n, 1.0 / (u_eff * exact * r), r)), compressed, r=r, bw=exact)
                return BandwidthResult(
                    bw=exact, feasible=True, scaling_factor=float(_public_sf(sc, n, exact,
                                                                             u, r)),
                    binding=bind, critical_parts=parts, **common, message=(
                        f"{p.name} on {n} workers needs {format_bandwidth(exact)} per "
                        f"{'NIC' if sc.options.gpus_per_node else 'worker'} to scale "
                        f"{target:g} ({_assumed(sc, r, u)}; the target is "
                        f"the limit, reached once the communication left is below "
                        f"rounding)"))
        if x_floor > x_star > 0:
            msg = ("the intra-node link binds: even an unlimited network reaches only "
                   f"{below(sf_inf, target)} < target {target:g}")
        elif x_star == 0.0 and sf_inf >= target * (1 - 1e-12):
            msg = _limit_message("bandwidth", sf_inf, target)
        else:
            msg = _why_not(bind_inf, parts_inf, sf_inf, target).format(what="bandwidth")
        return BandwidthResult(bw=math.inf, feasible=False, scaling_factor=sf_inf,
                               binding=bind_inf, message="no bandwidth is enough: " + msg,
                               critical_parts=parts_inf, **common)
    with np.errstate(over="ignore"):
        needed = _NUDGE / (u * r * x_star)
    if not math.isfinite(needed):
        raise InvalidParameterError("utilization", u, "is too small: the line rate it needs "
                                    "is beyond floating point")
    bw = _line_rate_for(sc, needed)
    if math.isinf(bw):
        ceiling = sc.cluster.max_achieved_bandwidth()
        x_c = float(sc.x_effective(n, 1 / (u * ceiling * r), r))
        return BandwidthResult(
            bw=math.inf, feasible=False,
            scaling_factor=_sf_at(sc, n, x_c, compressed, r=r)[0], binding="ceiling",
            message=(f"no line rate is enough: the transport's ceiling "
                     f"{format_bandwidth(ceiling)} is below the "
                     f"{format_bandwidth(needed)} achieved bandwidth needed"),
            critical_parts={}, **common)
    u_eff = effective_utilization(sc, bw, u)
    sf, why = _sf_lazy(sc, n, float(sc.x_effective(n, 1.0 / (u_eff * bw * r), r)),
                       compressed, r=r, bw=bw)
    bind, parts = why() if explain else ("", {})  # a corner needs only the line rate
    return BandwidthResult(
        bw=bw, feasible=True, scaling_factor=sf, binding=bind,
        message=(f"{p.name} on {n} workers needs {_bw_text(bw)} per "
                 f"{'NIC' if sc.options.gpus_per_node else 'worker'} to scale "
                 f"{target:g} ({_assumed(sc, r, u)})"),
        critical_parts=parts, **common)


def _corner_bw(sc, n, target, r, u) -> float:
    """The line rate of :func:`_solve_bandwidth` alone, as an interval's corner needs it
    [bits/s]: the same operations on the common path (any line rate, a finite one, or
    none below the limit), without what binds, the message and the result; the whole
    solve otherwise (MG-WFBP's fixed point, the limit, a rate beyond floating point)."""
    if sc.needs_plan:
        return _solve_bandwidth(sc, n, target, r, u, explain=False).bw
    p = sc.profile
    env = sc.corner_envelope(n, r > 1)  # (with the wire map read next)
    k1, k2 = sc.wire_map(n)
    x_floor = k2 / r
    t1, fwd, upd = p.iteration_time, sc.forward(n), sc.update(n)
    x_star = _x_star(env, t1 / target - fwd - upd)
    if math.isinf(x_star) or (k1 == 0.0 and x_floor <= x_star):
        return 0.0
    if not x_star > 0 or x_floor > x_star:
        end = float(env(x_floor))  # the scaling factor of _sf_at at x_floor
        if t1 / (fwd + end + upd) < target * (1 - 1e-12):
            return math.inf  # below the limit: no line rate reaches the target
    else:
        if type(u) is float and type(r) is float and type(x_star) is float:
            needed = _NUDGE / (u * r * x_star)  # Python floats (x_star > 0, u r > 0)
        else:
            with np.errstate(over="ignore"):
                needed = _NUDGE / (u * r * x_star)
        if math.isfinite(needed):
            return _line_rate_for(sc, needed)  # inf where the ceiling is below it
    return _required_bandwidth(sc, n, target, r, u, explain=False).bw


def _line_rate_for(sc, needed):
    """Line rate [bits/s] whose achieved bandwidth is ``needed`` [bits/s] (``needed``
    itself without a cluster; inf when the cluster's ceiling is lower)."""
    if sc.cluster is None:
        return needed
    return sc.cluster.line_rate_for(needed) * _NUDGE
