r"""Compression planning: which compressor, at what setting, and is it worth it at all?

For a compressor :math:`C` (see :mod:`scalemodel.compressors`), every bucket :math:`k` of
the fusion policy becomes a sequence of collectives (one per phase :math:`p` with bytes):
its time on the communication channel is

.. math::
   :label: compressed-bucket

   c_k^C = \sum_{p} \Big( \lambda_p \alpha + \Gamma_p(S_{k,p}) + W_p(S_{k,p})\, x \Big)
           + t^\text{enc}_k + t^\text{dec}_k ,
   \qquad x = \frac{1}{u B} ,

with :math:`S_{k,p}` the compressed bytes of phase :math:`p` (summed over the bucket's
tensors; with ``Compressor.per_tensor`` every tensor's phase is its own collective and the
sum runs over them), :math:`W_p` the wire bits of that phase's collective (an all-reduce, or an
all-gather whose bits grow as :math:`(n-1) S`), and the encode and decode times of the
bucket's tensors plus their kernel launches. Each :math:`c_k^C` is again a straight line in
:math:`x`, so the overlap model of :mod:`scalemodel.overlap` applies unchanged: the
planner builds the bucket costs and hands them to the scenario's
``Scenario.make_lines`` (:func:`~scalemodel.overlap.overlap_lines` with a
cluster's slowdown, fixed costs and intra-node floor) and
:class:`~scalemodel.overlap.UpperEnvelope`. For ``"none"`` this is exactly
:func:`~scalemodel.scaling_factor`, on any cluster.

**Codec on the compute stream** (``Compressor.codec_stream="compute"``, GRACE's presets).
When the encode and decode kernels run in the framework's compute stream, interleaved
with the backward kernels, they are not hidden behind the backward pass: bucket
:math:`k`'s encode :math:`E_k` runs when the bucket is ready and delays the rest of the
backward pass, its decode :math:`D_k` follows its collectives, and all of them are
compute-stream work (:math:`E_k`, :math:`D_k`: the bucket's encode and decode times, each
with half its kernel launches). With :math:`R_k` the ready times and :math:`T_b` the end
of the backward pass,

.. math::
   :label: compute-stream

   T_\text{comm} = \max\Big( T_b + \sum_k (E_k + D_k),\;
       \max_k \big( R_k + \textstyle\sum_{i \le k} E_i
       + \sum_{i \ge k} (c_i + D_i) \big) \Big),

:math:`c_i` the bucket's collectives (eq. :eq:`compressed-bucket` without the codec):
again an upper envelope of lines in :math:`x`, the backward line raised by the codec and
every bucket's ready time moved by the encodes before it. The GRACE data
(``benchmarks/validate_compression.py``) tell the two apart: with the codec on the
channel, compressors whose codec fits behind the backward pass at 2 and 4 workers
(signSGD, 8-bit) were predicted to win where they measurably lost.

The **effective ratio** of a compressor is the uncompressed wire bits of the plan's
all-reduce over the compressed wire bits, summed over the iteration: the ``compression=``
the core model would need to put the same bits on the wire. It can be below 1: an
all-gather of :math:`S/\rho` bytes carries :math:`(n-1) S/\rho` bits against the ring's
:math:`2 (n-1)/n \cdot S`, so it sends less only for :math:`n < 2\rho`.

Every knob (PowerSGD rank, top-k density, quantization bits) is monotone: a larger value
compresses less and costs more encode/decode time, so the scaling factor does not increase
with it (``test_scaling_factor_monotone_in_the_knob``). The one exception is PowerSGD's
``min_compression_rate``: as the rank grows, small matrices stop being compressed, which
saves their encode time and can raise the scaling factor slightly (by at most 0.0014 on
the built-in profiles). The planner finds the **least aggressive** setting that reaches
the target by a bracketing search (the secant of ``1 / sf`` in the knob, safeguarded by
bisection; integers: on the integers, ending with a setting that reaches it and the next
that does not; density: in log density to a relative 1e-4).

Under **sharding** (:mod:`scalemodel.sharding`) gradients travel by reduce-scatter. Only
compressors that change the dtype of that reduce compose with it: ``fp16`` and ``bf16``
(FSDP's ``MixedPrecision.reduce_dtype`` or its ``fp16_compress_hook``) and ``int8`` as a
quantized reduce-scatter (ZeRO++'s qgZ, arXiv:2306.10209; each GPU decodes its shard of
every peer's message, :math:`N` elements). Sign, sparse and low-rank compressors replace
the reduction by an all-gather or by factors of whole matrices, which FSDP's hooks do not
allow; the plan lists them as not composing (:data:`~scalemodel.sharding.SHARDING_COMPRESSORS`
says why). A composing compressor divides the bytes of the gradient collectives
(reduce-scatter, and the all-reduce across nodes of ``hybrid_shard``) and adds its
encode and decode time to them; parameter all-gathers stay uncompressed. The iteration is
then again eq. :eq:`zero3` or :eq:`zero12`.

The **break-even bandwidth** of a compressor is the line rate below which it beats no
compression: the iteration times with and without it are both upper envelopes of lines in
:math:`x`, hence piecewise linear; on every interval between their breakpoints their
difference is linear and the crossing is solved exactly.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from .collectives import (ALGORITHMS, NO_REDUCTION_COST, CollectiveCost, CollectiveOptions,
                          collective_cost, resolve_algorithm)
from .compressors import (ALLREDUCE, COMPRESSORS, ELEMENT_BYTES, IMPLEMENTATIONS, Compressor,
                          alltoall_cost, codec_costs_for, for_implementation, get_compressor,
                          resolve_implementation)
from .discrepancy import discrepancy_factor, discrepancy_text, run_noise, widen_scaling
from .exceptions import InvalidParameterError, ParameterTypeError
from .model import _FLOATS, Scenario, _job_pressure, effective_utilization
from .overlap import OverlapLines, UpperEnvelope, _with_fixed, overlap_lines
from .sharding import SHARDING_COMPRESSORS
from .solvers import (DEFAULT_N, DEFAULT_TARGET, _accounting, _corner_ratio, _for_the_job,
                      _fragmentation, _line_rate_for, _loss, _min_compression, _scalar,
                      below, memory_check, memory_text, min_compression)
from .units import check_count, check_fraction, format_bandwidth, parse_bandwidth

__all__ = ["plan_compression", "CompressionPlan", "PlanRow", "breakeven_bandwidth", "Breakeven",
           "compressed_scaling_factor", "DEFAULT_PLAN_COMPRESSORS"]

DEFAULT_PLAN_COMPRESSORS = ("none", "fp16", "bf16", "int8", "signsgd", "topk", "randomk",
                            "powersgd")
"""The compressors :func:`~scalemodel.plan_compression` compares by default."""


# --------------------------------------------------------------------------- bucket lines


@attrs.frozen(eq=False)
class _Evaluated:
    """One compressor at one setting on one scenario and worker count."""

    lines: object
    n_collectives: int  # per iteration
    collective: str
    n: int = 1
    xmap: tuple = (1.0, 0.0)  # (k1, k2): x_eff = max(k1 x, k2), see Scenario.x_effective
    _env: UpperEnvelope | None = None  # built when first read (see _top_line)
    _top: tuple | None = None  # (x, E(x), line) of the last _top_line without the envelope
    # (bits, raw_bits, encode, decode, per_worker_ratio), or None until ``_sums()`` gives
    # them when first read: a search reads only the lines
    _totals: tuple | None = None
    _sums: object = None
    # (max, min) of the lines' intercepts when made with others (_batch_lines), for
    # _top_line; None: it takes them from the intercepts
    _cext: tuple | None = None

    def _total(self, i):
        if self._totals is None:
            object.__setattr__(self, "_totals", tuple(self._sums()))
        return self._totals[i]

    bits = property(lambda self: self._total(0),
                    doc="Wire bits per iteration, compressed [bit].")
    raw_bits = property(lambda self: self._total(1), doc="Wire bits per iteration of the "
                        "uncompressed all-reduce [bit].")
    encode = property(lambda self: self._total(2), doc="Encode time per iteration [s].")
    decode = property(lambda self: self._total(3), doc="Decode time per iteration [s].")
    per_worker_ratio = property(lambda self: self._total(4), doc="Gradient bytes over the "
                                "bytes each worker sends [-].")

    @property
    def env(self) -> UpperEnvelope:
        """The lines' upper envelope, built when first read (a search needs only the
        highest line at one point, :func:`_top_line`)."""
        if self._env is None:
            object.__setattr__(self, "_env", UpperEnvelope(self.lines.intercept,
                                                           self.lines.slope))
        return self._env



# relative gap by which the highest line at a point must beat every lower one for
# _top_line to answer without the envelope (the envelope's rounding is ~1e-16 of the
# lines' values)
_TOP_GAP = 1e-9
# more lines than this: a search's values at a point made on arrays (fewer: Python floats)
_MANY_LINES = 32


def _top_line(ev, x, line=True):
    """``(E(x), j)``: the envelope's value at ``x`` [s/bit] (a Python float ``>= 0``) and the
    line attaining it, from the lines' values there when the highest is unique and beats
    every lower line by :data:`_TOP_GAP` of the values' scale: the envelope then takes that
    line, and its value is computed with the same operations; else, and at a second
    point (a new line rate: more will follow), from the envelope (``line=False``: the
    value only, the line's index may be None)."""
    env = ev._env
    top = ev._top
    if env is None and type(x) is float and 0.0 <= x < 1e200 and (top is None
                                                                  or top[0] == x):
        if top is not None:  # the same question again (at a second point: the envelope)
            return top[1], top[2]
        c, m = ev.lines.intercept, ev.lines.slope
        if len(c) <= _MANY_LINES:  # a few lines: Python floats
            c, m = c.tolist(), m.tolist()
            vals = [ci + mi * x for ci, mi in zip(c, m)]
            top = max(vals)
            j = vals.index(top)
            scale = max(map(abs, vals)) + max(map(abs, c))
            # every other line below by the gap (the values are finite when scale is)
            if math.isfinite(scale + top) and \
                    max(vals[:j] + vals[j + 1:], default=-math.inf) < top - _TOP_GAP * scale:
                object.__setattr__(ev, "_top", (x, np.float64(top), j))
                return ev._top[1], j
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                vals = c + m * x
                j = int(vals.argmax())
                top = float(vals[j])
                # the largest magnitudes, max(|v|), as the largest value or the smallest's
                # negation (a nan: top is nan, and the envelope answers)
                high, low = ev._cext or (float(c.max()), float(c.min()))
                scale = max(top, -float(vals.min())) + max(high, -low)
                if math.isfinite(scale + top) and np.count_nonzero(
                        vals < top - _TOP_GAP * scale) == len(vals) - 1:
                    object.__setattr__(ev, "_top", (x, np.float64(top), j))
                    return ev._top[1], j
    env = ev.env
    return env(x), (int(env.argmax(x)) if line else None)


def _members_starts(buckets):
    return buckets.starts


def composes(sc, comp) -> bool:
    """Whether ``comp`` can compress the gradients of scenario ``sc``: always without
    sharding; under sharding only the low-precision reduce-scatters
    (:data:`~scalemodel.sharding.SHARDING_COMPRESSORS`).

    Parameters
    ----------
    sc : Scenario
        The scenario [-].
    comp : Compressor
        The compressor [-].
    """
    if sc.sharding is None or comp.name == "none":
        return True
    return SHARDING_COMPRESSORS.get(comp.name, "").startswith("composes")


def _why_not_composes(name):
    return SHARDING_COMPRESSORS[name].removeprefix("does not compose: ")


def _check_composes(sc, comp):
    if not composes(sc, comp):
        raise InvalidParameterError(
            "compressor", comp.name, f"does not compose with the reduce-scatter of "
            f"sharding={sc.sharding.strategy!r}: {_why_not_composes(comp.name)}",
            "Use fp16, bf16 or int8 under sharding")


def _evaluate_sharded(sc, comp, n, codec) -> _Evaluated:
    """A low-precision reduce-scatter under sharding: the gradient collectives carry the
    compressor's bytes and its encode and decode time (see the module docs)."""
    p = sc.profile
    b = sc.buckets  # the gradient collectives, in the schedule's order
    e = ELEMENT_BYTES.get(p.precision.lower(), 4)
    numel = np.round(p.tensor_bytes / e)
    tc = comp._costs(numel, p.tensor_shapes, n, codec[comp.family], e)
    starts = b.starts
    rb = sc.sharding.element_bytes(p)[2]
    raw = np.add.reduceat(numel, starts) * rb
    # no compressor: the reduce-scatter carries the reduce dtype (which may differ from
    # the profile's); a compressor: its own bytes, never more than that
    wire = raw if comp.name == "none" else np.minimum(
        np.add.reduceat(tc.wire_bytes, starts), raw)
    scale = np.where(raw > 0, wire / np.where(raw > 0, raw, 1.0), 1.0)
    decode = tc.decode_time
    if any(c != ALLREDUCE for c in tc.phase_collectives):
        decode = decode / n  # all-gathered in DDP; here each GPU decodes only its shard
    enc = np.add.reduceat(tc.encode_time, starts)
    dec = np.add.reduceat(decode, starts)
    calls = np.add.reduceat(tc.calls, starts)
    used = np.add.reduceat((tc.encode_time + tc.decode_time > 0) | (tc.calls > 0), starts) > 0
    launch = codec[comp.family].launch * (calls + np.where(used, comp.calls_per_bucket, 0))
    sched = sc.schedule(n, False, gradient_scale=scale, gradient_overhead=enc + dec + launch)
    base = sc.schedule(n, False)
    rounds = sched.gradient_rounds  # micro-batches whose gradients are reduce-scattered
    return _Evaluated(lines=sched.lines, env=sched.envelope, totals=(
        sched.wire_bits, base.wire_bits, rounds * float(enc.sum() + launch.sum() / 2),
        rounds * float(dec.sum() + launch.sum() / 2), float(raw.sum() / wire.sum())),
        n_collectives=sched.n_collectives, collective="reduce_scatter", n=n,
        xmap=(float(sched.xmap[0]), float(sched.xmap[1])))


_EVAL_CACHE_SIZE = 4096  # evaluations kept per scenario


def _evaluate(sc: Scenario, comp: Compressor, n: int, codec: dict) -> _Evaluated:
    """One compressor at its setting on ``sc`` with ``n`` workers; cached per scenario (the
    compressor objects are frozen and compare by value; ``codec`` is one of the scenario's
    cached cost tables, see :func:`_codec`)."""
    cache = sc._cache
    key = ("evaluate", comp, int(n), id(codec))
    try:
        hit = cache.get(key)
    except TypeError:  # a compressor class of one's own that cannot be hashed
        return _evaluate_uncached(sc, comp, n, codec)
    if hit is not None and hit[0] is codec:
        return hit[1]
    ev = _evaluate_uncached(sc, comp, n, codec)
    _remember(cache, key, codec, ev)
    return ev


def _remember(cache, key, codec, ev):
    """Keep the evaluation ``ev`` under ``key`` in the scenario's ``cache`` (at most
    :data:`_EVAL_CACHE_SIZE`: past it the evaluations are forgotten)."""
    if len(cache) > _EVAL_CACHE_SIZE:
        for k in [k for k in cache if k[0] in ("evaluate", "evaluate-costs")]:
            del cache[k]
    cache[key] = (codec, ev)


def _elements(sc):
    """Bytes per element and elements per tensor of the scenario's profile (cached)."""
    hit = sc._cache.get(("elements",))
    if hit is None:
        p = sc.profile
        e = ELEMENT_BYTES.get(p.precision.lower(), 4)
        numel = np.round(p.tensor_bytes / e)
        numel.setflags(write=False)
        hit = sc._cache[("elements",)] = (e, numel)
    return hit


def _raw_cost(sc, n):
    """The uncompressed all-reduce of every bucket (per scenario and ``n``), shared with
    the scenarios of the same buckets and collectives (``model._shared_cost``: a fitted
    cluster's corners and alternatives, and the scenario's own lines, which the plan's
    ideal compression reads)."""
    key = ("raw-cost", int(n))
    if key not in sc._cache:
        from . import model

        sc._cache[key] = model._shared_cost(sc.algorithm, sc.buckets.nbytes, n,
                                            sc.profile.reduction, sc.options)
    return sc._cache[key]


def _raw_bits(sc, n, raw):
    """``float(raw.bits.sum())``, the uncompressed all-reduce's wire bits per iteration
    (``raw``: :func:`_raw_cost` of ``sc`` and ``n``) [bit], summed once per scenario and
    ``n`` (each row reports it)."""
    key = ("raw-bits", int(n))
    hit = sc._cache.get(key)
    if hit is None or hit[0] is not raw:
        hit = sc._cache[key] = (raw, float(raw.bits.sum()))
    return hit[1]


def _evaluate_uncached(sc: Scenario, comp: Compressor, n: int, codec: dict) -> _Evaluated:
    """:func:`_evaluate` without its cache: eq. :eq:`compressed-bucket` per bucket (under
    sharding :func:`_evaluate_sharded`), the codec on the channel or on the compute
    stream (eq. :eq:`compute-stream`), handed to the scenario's lines."""
    if sc.sharding is not None:
        _check_shardable(sc, comp)
        return _evaluate_sharded(sc, comp, n, codec)
    p = sc.profile
    b = sc.buckets
    e, numel = _elements(sc)
    ready = b.ready
    if comp.after_backward:  # one flat buffer when backward has ended (DeepSpeed 1-bit)
        numel = np.array([numel.sum()])
        tc = comp._costs(numel, [(int(numel[0]),)], n, codec[comp.family], e)
        starts, ready = np.array([0]), np.array([float(np.max(b.ready))])
    else:
        tc = comp._costs(numel, p.tensor_shapes, n, codec[comp.family], e)
        starts = _members_starts(b)
    # two settings whose tensor costs are equal give the same evaluation: the knob enters
    # only through them (topk's k = ceil(d N) at two densities, unpacked bits, ...)
    # (a compressor without a knob is evaluated once per n; on a cluster the key also
    # shares the channel's terms between the corners, _shared_channel)
    same = _same_costs_key(comp, tc, n, codec) if comp.knob is not None or \
        sc.cluster is not None else None
    hit = None if same is None else sc._cache.get(same)
    if hit is not None and hit[0] is codec:
        return hit[1]
    ev = _evaluate_costs(sc, comp, n, codec, tc, starts, ready, same)
    if same is not None:
        sc._cache[same] = (codec, ev)
    return ev


def _same_costs_key(comp, tc, n, codec):
    """The cache key of an evaluation by all it depends on: the tensor costs ``tc`` (the
    bytes of every array), the compressor's attributes that :func:`_evaluate_uncached`
    reads (``per_tensor``, ``after_backward``, ``codec_stream``, ``calls_per_bucket``, its
    codec's ``launch``), ``n``
    and the codec table; None when they cannot be hashed."""
    try:
        pb, enc, dec, calls = tc.phase_bytes, tc.encode_time, tc.decode_time, tc.calls
        key = ("evaluate-costs", bool(comp.per_tensor), bool(comp.after_backward),
               comp.codec_stream, comp.calls_per_bucket, codec[comp.family].launch,
               tc.phase_collectives, int(n), id(codec),
               (pb.dtype.str, pb.shape, pb.tobytes()), (enc.dtype.str, enc.shape,
                                                       enc.tobytes()),
               (dec.dtype.str, dec.shape, dec.tobytes()), (calls.dtype.str, calls.shape,
                                                          calls.tobytes()))
        hash(key)
    except (TypeError, AttributeError):
        return None
    return key


def _channel_terms(sc, comp, n, codec, tc, starts):
    """What the channel carries per bucket: :func:`_phase_costs` and, with more than one
    worker, :func:`_codec_terms` (``(sums, backward_extra, delay, overhead)``, the
    overhead with the codec's time; for one worker no codec time and the phases'
    overhead)."""
    phases = _phase_costs(sc, comp, n, tc, starts)
    if n > 1:
        return phases, _codec_terms(comp, codec, tc, starts, phases[1])
    return phases, (lambda: (0.0, 0.0), 0.0, None, phases[1])


def _shared_channel(sc, n, starts, same):
    """``(key, terms)``: where :func:`_channel_terms` of an evaluation is kept for every
    scenario with the same collectives (algorithm, options, reduction, buckets), such as
    the corners of a fitted cluster, which differ only in what the lines add (slowdown,
    fixed costs, ceiling); kept with the shared collective costs of
    :mod:`scalemodel.model` (forgotten by ``clear_caches``). None without a cluster, or
    when ``same`` (the evaluation's key, :func:`_same_costs_key`) or the options cannot
    be hashed."""
    if same is None or sc.cluster is None:  # no cluster: no corners to share with
        return None
    from . import model

    own = ("planner-channel", int(n), id(starts))  # the scenario's, found quickly
    hit = sc._cache.get(own)
    if hit is None or hit[0] is not starts:
        red = sc.profile.reduction
        try:
            key = ("planner-channel", sc.algorithm, int(n), id(red), sc.options,
                   starts.tobytes())
            hash(key)
        except TypeError:
            return None
        shared = model._COSTS.get(key)
        if shared is None or shared[0] is not red:
            shared = model._COSTS[key] = (red, {})
            while len(model._COSTS) > model.SCENARIO_CACHE_SIZE:
                model._COSTS.popitem(last=False)
        else:
            model._COSTS.move_to_end(key)
        hit = sc._cache[own] = (starts, shared[1])
    return same[:8] + same[9:], hit[1]  # the evaluation's key without its codec table


def _evaluate_costs(sc, comp, n, codec, tc, starts, ready, same=None):
    """:func:`_evaluate_uncached` from the compressor's tensor costs ``tc`` (summed per
    bucket at ``starts``; ``ready``: the buckets' ready times [s]; ``same``: its key,
    :func:`_same_costs_key`, to share the channel's terms with other scenarios)."""
    p = sc.profile
    shared = _shared_channel(sc, n, starts, same)
    hit = None if shared is None else shared[1].get(shared[0])
    if hit is None:
        hit = _channel_terms(sc, comp, n, codec, tc, starts)
        if shared is not None:
            if len(shared[1]) >= 256:
                shared[1].clear()
            shared[1][shared[0]] = hit
    (lat, ovh, bits, intra, intra_bw, ncoll, main), (codec_sums, extra, delay, ovh) = hit
    raw = _raw_cost(sc, n)
    # the core model's lines (cluster terms: slowdown, fixed costs, intra-node floor)
    lines, xmap = _make_lines(sc, n, ready, lat, ovh, bits, intra,
                              raw.intra_bw if intra_bw is None else intra_bw, delay, extra)

    def sums():  # what the row reports, summed when it is read
        encode, decode = codec_sums()
        return (float(bits.sum()), _raw_bits(sc, n, raw), encode, decode,
                float(p.total_bytes / tc.wire_bytes.sum()))

    return _Evaluated(lines=lines, sums=sums, n_collectives=ncoll, collective=main, n=n,
                      xmap=xmap)


def _wire(n, bits, intra, intra_bw):
    """The bits on the slowest link and the wire map ``(k1, k2)`` as Python floats, as
    ``Scenario.make_lines`` makes them: on one node the intra-node bits [bit] at
    ``intra_bw`` [bits/s], else the network's with the intra-node floor."""
    has_intra = np.count_nonzero(intra) > 0
    if n > 1 and has_intra and not np.count_nonzero(bits):  # one node: intra is the wire
        return intra, (0.0, float(1.0 / intra_bw))
    if has_intra:
        pos = bits > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(pos, intra / np.where(pos, bits, 1.0), 0.0)
        return bits, (1.0, float(float(rho.max()) / intra_bw))
    return bits, (1.0, 0.0)


def _line_terms(sc, n, ready):
    """What ``Scenario.make_lines`` computes from the scenario, ``n`` and the buckets'
    ready times alone, kept per scenario and ``n`` for the ready times last asked:
    ``(ready, ready times stretched [s], accumulation shift [s], both added [s], end of
    backward without compute-stream work [s], fixed costs per bucket [s])``."""
    key = ("line-terms", n)
    hit = sc._cache.get(key)
    if hit is not None and hit[0] is ready:
        return hit
    sigma = sc.slowdown(n)
    r = np.asarray(ready, float) * (sigma / sc.compute_slowdown)
    k = r.shape[0] if r.ndim else 1
    cb = sc.bucket_overhead(n)
    if cb > 0:  # the framework's work per bucket delays backward and later buckets
        r = r + cb * np.arange(1, k + 1)
    hd = sc._host_delays_of(n, k)
    if hd is not None:  # the wrapper's host work past the host's lead (eq. host-lead)
        r = r + hd
    p = sc.profile
    shift = (p.grad_accum - 1) * sigma * (p.forward_time + p.backward_time)
    backward = sigma * p.backward_time + k * cb + shift
    if hd is not None:
        backward = backward + float(hd[-1])
    hit = sc._cache[key] = (ready, r, shift, r + shift, backward, sc._fixed(n, k))
    return hit


def _make_lines(sc, n, ready, lat, ovh, bits, intra, intra_bw, delay, extra):
    """``sc.make_lines(n, ready, CollectiveCost(lat, ovh, bits, intra, intra_bw),
    overhead=ovh, delay=delay, backward_extra=extra)``: its lines and wire map as Python
    floats, the same operations with what depends on the scenario alone from
    :func:`_line_terms` (``tests/test_plan_first_question.py`` checks them equal)."""
    n = int(n)
    _, r, shift, shifted, backward, fixed = _line_terms(sc, n, ready)
    wire, xmap = _wire(n, bits, intra, intra_bw)
    if delay is not None:
        shifted = (r + np.asarray(delay, float)) + shift
    return overlap_lines(shifted, lat, ovh, wire, backward + extra, fixed=fixed), xmap


def _evaluate_many(sc, comps, n, codec, memo=None):
    """:func:`_evaluate` of every compressor of ``comps`` (at its setting) at once, into
    the caches that :func:`_evaluate` reads: the tensor costs of each, then their
    collectives, codec terms and sums as the rows of arrays (:func:`_batch_evaluations`,
    the operations of :func:`_phase_costs` and :func:`_codec_terms` row by row), then the
    lines of each. On a cluster, the channel terms another scenario with the same
    collectives already made are taken from where :func:`_shared_channel` keeps them (a
    fitted cluster's corners and alternatives: the views of a plan), the others made at
    once and kept there. ``memo``: a dict shared by the scenarios of one round (the views),
    which keeps each compressor's tensor costs and key for the next scenario of the same
    profile and codec table. Only what that path covers: no sharding, ``n > 1``, per
    bucket during backward, the codec on the channel, the phases of one algorithm other
    than DeepSpeed's all-to-all; the others are left to :func:`_evaluate`. Returns
    whether any of ``comps`` was not in the cache."""
    if sc.sharding is not None or n <= 1:
        return False
    cache = sc._cache
    cluster = sc.cluster is not None
    todo, fresh = _batch_todo(sc, comps, n, codec, cluster, memo)
    if len(todo) == 1:  # one: as _evaluate_uncached (the batch's arrays cost more)
        comp, tc, same, _ = todo[0]
        evs = [_evaluate_costs(sc, comp, n, codec, tc, sc.buckets.starts, sc.buckets.ready,
                               same)]
    else:
        evs = _batch_evaluations(sc, n, codec, [t[0] for t in todo], [t[1] for t in todo],
                                 [t[2] for t in todo]) if todo else []
    for (_, _, same, keys), ev in zip(todo, evs):
        if same is not None:
            cache[same] = (codec, ev)
        for key in keys:
            _remember(cache, key, codec, ev)
    return fresh


def _batch_todo(sc, comps, n, codec, cluster, memo):
    """What :func:`_evaluate_many` evaluates of ``comps``: ``(compressor, tensor costs,
    key or None, cache keys)`` each, and whether any compressor was not in the cache; what
    the caches hold already is put under its key (as :func:`_evaluate_uncached` finds
    it)."""
    cache = sc._cache
    e, numel = _elements(sc)
    shapes = sc.profile.tensor_shapes
    todo, pending, fresh, asked = [], {}, False, set()
    for comp in comps:
        key = ("evaluate", comp, n, id(codec))
        try:
            hit = cache.get(key)
        except TypeError:  # a compressor that cannot be hashed: _evaluate alone
            fresh = True
            continue
        if hit is not None and hit[0] is codec:
            continue
        fresh = True
        if key in asked:  # asked twice in this round (the first round's "none"): once
            continue
        asked.add(key)
        if comp.after_backward or comp.per_tensor or comp.codec_stream != "channel":
            continue
        mkey = (comp, n, id(codec), id(sc.profile), cluster) if memo is not None else None
        made = None if mkey is None else memo.get(mkey)
        if made is None or made[0] is not codec or made[1] is not sc.profile:
            tc = comp._costs(numel, shapes, n, codec[comp.family], e)
            colls = set(tc.phase_collectives)
            batched = len(colls) == 1 and "alltoall" not in colls
            # (keyed as _evaluate_uncached keys it: with a knob, or on a cluster)
            same = _same_costs_key(comp, tc, n, codec) if batched and (
                comp.knob is not None or cluster) else None
            made = (codec, sc.profile, tc, batched, same)
            if mkey is not None:
                memo[mkey] = made
        _, _, tc, batched, same = made
        if not batched:
            continue
        hit = None if same is None else cache.get(same)
        if hit is not None and hit[0] is codec:  # (as _evaluate_uncached finds it)
            _remember(cache, key, codec, hit[1])
        elif same is not None and same in pending:  # the same costs in this batch
            pending[same].append(key)
        else:
            todo.append((comp, tc, same, [key]))
            if same is not None:
                pending[same] = todo[-1][3]
    return todo, fresh


def _batch_channel(sc, n, codec, comps, tcs, sames):
    """The channel terms of ``comps`` (tensor costs ``tcs``) as :func:`_evaluate_costs`
    reads them: ``(latency, overhead with the codec's, bits, intra-node bits)`` (rows of
    arrays, one per compressor) and, per compressor, the intra-node rate or None, the
    collectives that send, the algorithm and ``sums()``, the encode and decode time per
    iteration [s]. On a cluster those another scenario made are taken from
    :func:`_shared_channel` (``sames``: each one's key), the others made at once and kept
    there."""
    m = len(comps)
    kept, shared = [None] * m, [None] * m
    starts = sc.buckets.starts
    if sc.cluster is not None:
        for i, same in enumerate(sames):
            shared[i] = _shared_channel(sc, n, starts, same)
            hit = None if shared[i] is None else shared[i][1].get(shared[i][0])
            if hit is not None:
                (lat, _, bits, intra, rate, ncoll, main), (sums, _, _, ovh) = hit
                kept[i] = ((lat, ovh, bits, intra), rate, ncoll, main, sums)
    new = [i for i in range(m) if kept[i] is None]
    if new:
        (lat, pre, bits, intra), sending, algs, rates = _batch_phases(
            sc, n, [tcs[i] for i in new], starts)
        sums, post = _batch_codec([comps[i] for i in new], codec, [tcs[i] for i in new],
                                  starts, pre)
        for j, i in enumerate(new):
            kept[i] = ((lat[j], post[j], bits[j], intra[j]), rates[j], sending[j], algs[j],
                       lambda j=j: sums(j))
            if shared[i] is not None:  # as _evaluate_costs keeps it
                if len(shared[i][1]) >= 256:
                    shared[i][1].clear()
                shared[i][1][shared[i][0]] = (
                    (lat[j], pre[j], bits[j], intra[j], rates[j], sending[j], algs[j]),
                    (kept[i][4], 0.0, None, post[j]))
        if len(new) == m:  # (the common case: the rows as made)
            return (lat, post, bits, intra), rates, sending, algs, [t[4] for t in kept]
    parts = tuple(np.array([t[0][f] for t in kept]) for f in range(4))
    return parts, *([t[f] for t in kept] for f in range(1, 5))


def _batch_evaluations(sc, n, codec, comps, tcs, sames=None):
    """The :class:`_Evaluated` of :func:`_evaluate_costs` for each compressor of
    ``comps`` with tensor costs ``tcs`` and keys ``sames`` (see :func:`_evaluate_many`)."""
    b = sc.buckets
    (lat, ovh, bits, intra), rates, sending, algs, sums = _batch_channel(
        sc, n, codec, comps, tcs, sames or [None] * len(comps))
    raw = _raw_cost(sc, n)
    total_bytes = sc.profile.total_bytes
    rates = [raw.intra_bw if r is None else r for r in rates]
    made = _batch_lines(sc, n, b.ready, lat, ovh, bits, intra, rates)
    out = []
    for i, tc in enumerate(tcs):
        lines, xmap, extremes = made[i] if made is not None else (*_make_lines(
            sc, n, b.ready, lat[i], ovh[i], bits[i], intra[i], rates[i], None, 0.0), None)

        def row_sums(i=i, tc=tc):  # what the row reports, summed when it is read
            encode, decode = sums[i]()
            return (float(bits[i].sum()), _raw_bits(sc, n, raw), encode, decode,
                    float(total_bytes / tc.wire_bytes.sum()))

        out.append(_Evaluated(lines=lines, sums=row_sums, n_collectives=sending[i],
                              collective=algs[i], n=n, xmap=xmap, cext=extremes))
    return out


def _batch_lines(sc, n, ready, lat, ovh, bits, intra, rates):
    """:func:`_make_lines` of several evaluations without compute-stream work (rows of
    ``lat``, ``ovh`` [s], ``bits``, ``intra`` [bit], intra-node ``rates`` [bits/s]) in
    one pass (``overlap._lines_stacked``, a cluster's fixed costs per bucket then added
    to the intercepts in the order ``overlap_lines`` adds them); None where that does not
    apply (then each alone). With each, the largest and smallest of its intercepts
    (each row's in one call), or None."""
    _, _, _, shifted, backward, fixed = _line_terms(sc, n, ready)
    m, k = len(lat), len(shifted)
    if shifted.ndim != 1 or fixed.shape != (k,) or lat.shape != (m, k):
        return None
    wires, xmaps = _batch_wire(n, bits, intra, rates)
    lines, intercepts = _lines_of_rows(shifted, lat, ovh, wires, float(backward + 0.0))
    if np.count_nonzero(fixed):  # their tail sums, as overlap_lines sums them
        fix = np.zeros(k + 1)
        fix[1:] = np.cumsum(fixed[::-1])[::-1]
        lines = [_with_fixed(one, fix) for one in lines]
        extremes = [None] * m
    else:
        extremes = _extremes(intercepts)
    return list(zip(lines, xmaps, extremes))


def _extremes(intercepts):
    """``(largest, smallest)`` of each row of ``intercepts`` [s], Python floats, for
    :func:`_top_line` (which otherwise takes each line set's own)."""
    return list(zip(intercepts.max(axis=1).tolist(), intercepts.min(axis=1).tolist()))


def _lines_of_rows(ready, latency, overhead, bits, backward_time):
    """``overlap._lines_stacked(np.broadcast_to(ready, latency.shape), latency, overhead,
    bits, backward_time)``: the :class:`~scalemodel.overlap.OverlapLines` of each row of
    the ``(m, k)`` arrays, all with the ready times ``ready`` ``(k,)`` [s] and no fixed
    costs, by the same operations (each row's tail sums one cumulative sum, its
    intercepts added in the same order); the fixed costs' tail sums, all zero, are not
    summed. With the intercepts, the rows of one array [-]."""
    m, k = latency.shape
    tails = np.empty((m, 3, k))
    tails[:, 0] = latency[:, ::-1]
    tails[:, 1] = overhead[:, ::-1]
    tails[:, 2] = bits[:, ::-1]
    # rows: latency, overhead, bits, fixed, intercept, slope, ready; column 0 the end of
    # backward (zeros but its intercept)
    out = np.zeros((m, 7, k + 1))
    out[:, :3, 1:] = tails.cumsum(axis=2)[:, :, ::-1]
    icpt = out[:, 4]
    np.add(ready, out[:, 0, 1:], out=icpt[:, 1:])
    icpt[:, 1:] += out[:, 1, 1:]
    icpt[:, 1:] += out[:, 3, 1:]  # (+ 0.0, as the stacked lines add the fixed costs)
    icpt[:, 0] = backward_time
    out[:, 5] = out[:, 2]
    out[:, 6, 1:] = ready
    return [OverlapLines(intercept=o[4], slope=o[5], latency=o[0], overhead=o[1], bits=o[2],
                         ready=o[6], fixed=o[3]) for o in out], icpt


def _batch_wire(n, bits, intra, rates):
    """:func:`_wire` of each row of ``bits`` and ``intra`` [bit] (intra-node ``rates``
    [bits/s]): the wires as the rows of one array and their maps; the ratios of the rows
    with intra-node bits in one pass (the same operations, element by element)."""
    if not intra.any():
        return bits, [(1.0, 0.0)] * len(bits)
    has_intra = intra.any(axis=1).tolist()  # (a nonzero element: as count_nonzero > 0)
    network = bits.any(axis=1).tolist()
    pos = bits > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(pos, intra / np.where(pos, bits, 1.0), 0.0).max(axis=1).tolist()
    wires, xmaps = bits, []
    for i, rate in enumerate(rates):
        if not has_intra[i]:
            xmaps.append((1.0, 0.0))
        elif n > 1 and not network[i]:  # one node: intra is the wire
            if wires is bits:
                wires = bits.copy()
            wires[i] = intra[i]
            xmaps.append((0.0, float(1.0 / rate)))
        else:
            xmaps.append((1.0, float(rho[i] / rate)))
    return wires, xmaps


def _batch_phases(sc, n, tcs, starts):
    """:func:`_phase_costs` of each of ``tcs`` (phases of one algorithm, sent per
    bucket): ``(latency, overhead, bits, intra-node bits)`` (each an array whose rows are
    those of ``tcs``), the collectives that send, the algorithm and the intra-node rate
    of each. The phases' bytes per bucket are the rows of one array, those of one
    algorithm together and costed in one call, ``np.where`` on the collectives that do not
    send, ``0.0 +`` each phase, those of each summed in order (``(p1 + p2) + p3``)."""
    m, k = len(tcs), len(starts)
    algs = []
    for tc in tcs:
        coll = tc.phase_collectives[0]
        algs.append(sc.algorithm if coll == ALLREDUCE else coll)
    groups = list(dict.fromkeys(algs))
    order = sorted(range(m), key=lambda i: groups.index(algs[i]))  # by algorithm
    first, rows = [0] * m, 0
    for i in order:
        first[i] = rows
        rows += len(tcs[i].phase_collectives)
    nbytes = np.empty((rows, k))
    for i in order:
        for j in range(len(tcs[i].phase_collectives)):
            nbytes[first[i] + j] = np.add.reduceat(tcs[i].phase_bytes[:, j], starts)
    used = nbytes > 0
    per_row = used.sum(axis=1).tolist()
    masked = sum(per_row) < rows * k  # only the collectives that send
    # each phase's four parts, 0.0 + (the part where its collective sends, else 0.0);
    # one phase per compressor in their order: these are the rows asked for
    single = rows == m and list(order) == list(range(m))
    total, rate = np.empty((4, rows, k)), {}
    for alg in groups:
        mine = [i for i in order if algs[i] == alg]
        lo, hi = first[mine[0]], first[mine[-1]] + len(tcs[mine[-1]].phase_collectives)
        flat = nbytes[lo:hi].reshape(-1)
        cost = alltoall_cost(flat, n, sc.options) if alg == "alltoall" else \
            _collective(alg, flat, n, sc.profile.reduction, sc.options)
        for f, field in enumerate((cost.latency, cost.overhead, cost.bits,
                                   cost.intra_bits)):
            if type(field) is np.ndarray and field.size == flat.size:
                field = field.reshape(hi - lo, k)  # (else a number: on every bucket)
            if masked:
                field = np.where(used[lo:hi], field, 0.0)
            np.add(0.0, field, out=total[f, lo:hi])
        rate[alg] = cost.intra_bw
    out = total if single else np.empty((4, m, k))
    sending = [0] * m
    for i, tc in enumerate(tcs):
        r, phases = first[i], len(tc.phase_collectives)
        if not single:
            if phases == 1:
                out[:, i] = total[:, r]
            else:  # its phases added in order
                np.add(total[:, r], total[:, r + 1], out=out[:, i])
                for j in range(2, phases):
                    out[:, i] += total[:, r + j]
        sending[i] = sum(per_row[r:r + phases])
    return (out[0], out[1], out[2], out[3]), sending, algs, [rate[a] for a in algs]


_SUMS_TELL_COMPRESSED = True
"""Whether :func:`_batch_codec` tells the buckets with a compressed tensor (kernels per
bucket) from its sums per bucket when no tensor's time or calls is negative (a sum of
numbers >= 0 is > 0 where one of them is); False: from each tensor, then summed per
bucket (the tests compare the two)."""

def _compressed_tensors(per_tensor, starts):
    """Whether each bucket (at ``starts``) holds a tensor with encode or decode time or
    kernel calls (``per_tensor``: those three, then compressors, then tensors) [-]."""
    return np.add.reduceat((per_tensor[0] + per_tensor[1] > 0) | (per_tensor[2] > 0),
                           starts, axis=1) > 0


def _batch_codec(comps, codec, tcs, starts, ovh):
    """:func:`_codec_terms` on the channel of each of ``comps`` (tensor costs ``tcs``), the
    parts rows of arrays: ``(sums, overhead [s])``, ``sums(i)`` the encode and decode time
    per iteration of the ``i``-th [s], the overhead rows ``ovh`` [s] with the codec's."""
    m, t = len(tcs), len(tcs[0].encode_time)
    per_tensor = np.empty((3, m, t))
    for i, tc in enumerate(tcs):
        per_tensor[0, i], per_tensor[1, i], per_tensor[2, i] = (
            tc.encode_time, tc.decode_time, tc.calls)
    enc, dec, calls = np.add.reduceat(per_tensor.reshape(3 * m, t), starts,
                                      axis=1).reshape(3, m, len(starts))
    if any(c.calls_per_bucket for c in comps):  # (a row without them: calls + 0, unchanged)
        per_bucket = np.array([[c.calls_per_bucket] for c in comps])
        if _SUMS_TELL_COMPRESSED and per_tensor.min() >= 0.0:  # (see the flag)
            compressed = (enc + dec > 0) | (calls > 0)
        else:
            compressed = _compressed_tensors(per_tensor, starts)
        calls = calls + np.where(compressed, per_bucket, 0)
    launch = np.array([[codec[c.family].launch] for c in comps]) * calls

    def sums(i):  # encode and decode per iteration, each with half the launches
        half = launch[i].sum() / 2
        return float(enc[i].sum() + half), float(dec[i].sum() + half)

    return sums, ovh + enc + dec + launch


def _check_shardable(sc, comp):
    """Raise :class:`InvalidParameterError` unless ``comp`` can compress the
    reduce-scatters of the scenario's sharding: it must compose with them, send per
    bucket, during backward, with its codec on the channel."""
    _check_composes(sc, comp)
    if comp.per_tensor:
        raise InvalidParameterError(
            "compressor", comp, f"sends per tensor (per_tensor=True), but under "
            f"sharding={sc.sharding.strategy!r} the gradients travel in the sharding's "
            "reduce-scatters", "Use per_tensor=False, or sharding='none'")
    if comp.after_backward:
        raise InvalidParameterError(
            "compressor", comp, f"sends one flat buffer after backward "
            f"(after_backward=True), but under sharding={sc.sharding.strategy!r} the "
            "gradients travel in the sharding's reduce-scatters",
            "Use after_backward=False, or sharding='none'")
    if comp.codec_stream != "channel":
        raise InvalidParameterError(
            "compressor", comp, f"runs its codec on the compute stream "
            f"(codec_stream={comp.codec_stream!r}), which is modelled without sharding "
            f"only (sharding={sc.sharding.strategy!r})",
            "Use codec_stream='channel', or sharding='none'")


def _phase_costs(sc, comp, n, tc, starts):
    """The collectives of every phase of ``tc`` (the compressor's costs per tensor),
    summed per bucket (``starts``: each bucket's first tensor): ``(latency [s],
    overhead [s], bits [bit], intra-node bits [bit], intra-node rate [bits/s] or None,
    collectives that send [-], the algorithm carrying most bytes)``."""
    if not comp.per_tensor and (len(tc.phase_collectives) == 1
                                or set(tc.phase_collectives) == {ALLREDUCE}):
        return _one_algorithm_costs(sc, n, tc, starts)
    k = len(starts)
    lat = ovh = bits = intra = None  # 0.0 + the first phase's, as np.zeros(k) += would
    intra_bw = None
    ncoll = 0
    main = ""
    biggest = -1.0
    per_tensor = comp.per_tensor  # every compressed tensor its own collective
    phases = []  # (algorithm, bytes per bucket, bytes per collective)
    for j, coll in enumerate(tc.phase_collectives):
        column = tc.phase_bytes[:, j]
        nbytes = np.add.reduceat(column, starts)
        phases.append((sc.algorithm if coll == ALLREDUCE else coll, nbytes,
                       column if per_tensor else nbytes))
    costs = _phase_collectives(sc, n, phases)
    for (alg, nbytes, each), cost in zip(phases, costs):
        used = each > 0
        sending = int(np.count_nonzero(used))
        if per_tensor or sending < used.size:  # per bucket, over the collectives that send
            def add(part):
                part = np.where(used, part, 0.0)
                return np.add.reduceat(part, starts) if per_tensor else part
        else:  # every bucket sends: np.where would copy each part unchanged
            def add(part):
                return part

        if lat is None:
            lat, ovh, bits, intra = (np.add(0.0, add(part)) for part in (
                cost.latency, cost.overhead, cost.bits, cost.intra_bits))
            if not lat.shape == ovh.shape == bits.shape == intra.shape == (k,):
                lat, ovh, bits, intra = (np.zeros(k) + v for v in (lat, ovh, bits, intra))
        else:
            lat += add(cost.latency)
            ovh += add(cost.overhead)
            bits += add(cost.bits)
            intra += add(cost.intra_bits)
        intra_bw = cost.intra_bw
        ncoll += sending
        if len(phases) == 1 and alg != "alltoall":  # checked bytes: a sum >= 0 > biggest
            main = alg
            continue
        total = nbytes.sum()
        if total > biggest:
            biggest, main = float(total), alg
    if lat is None:  # no phase
        lat, ovh, bits, intra = np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k)
    return lat, ovh, bits, intra, intra_bw, ncoll, main


def _one_algorithm_costs(sc, n, tc, starts):
    """:func:`_phase_costs` of phases sent per bucket by one algorithm:
    :func:`_batch_phases` of this one (the same operations without the loop over
    phases)."""
    (lat, ovh, bits, intra), sending, algs, rates = _batch_phases(sc, n, [tc], starts)
    return lat[0], ovh[0], bits[0], intra[0], rates[0], sending[0], algs[0]


def _phase_collectives(sc, n, phases):
    """The :class:`~scalemodel.collectives.CollectiveCost` of every phase of
    :func:`_phase_costs` (``phases``: ``(algorithm, bytes per bucket, bytes per
    collective)`` each); the phases of one algorithm in one vectorized call (each size
    costs the same alone or among others), DeepSpeed's all-to-all by
    :func:`~scalemodel.compressors.alltoall_cost`."""
    out = [None] * len(phases)
    groups = {}
    for j, (alg, _, each) in enumerate(phases):
        if alg == "alltoall":  # DeepSpeed's compressed all-reduce, phase 1
            out[j] = alltoall_cost(each, n, sc.options)
        else:
            groups.setdefault(alg, []).append(j)
    for alg, js in groups.items():
        if len(js) == 1:
            out[js[0]] = _collective(alg, phases[js[0]][2], n, sc.profile.reduction,
                                     sc.options)
            continue
        sizes = [phases[j][2] for j in js]
        cost = _collective(alg, np.concatenate(sizes), n, sc.profile.reduction, sc.options)
        total = sum(len(e) for e in sizes)
        fields = [cost.latency, cost.overhead, cost.bits, cost.intra_bits]
        if any(type(f) is not np.ndarray or f.shape != (total,) for f in fields):
            fields = [np.broadcast_to(np.asarray(f, float), (total,)) for f in fields]
        at = 0
        for j, e in zip(js, sizes):
            part = slice(at, at + len(e))
            at += len(e)
            out[j] = CollectiveCost(latency=fields[0][part], overhead=fields[1][part],
                                    bits=fields[2][part], intra_bits=fields[3][part],
                                    intra_bw=cost.intra_bw)
    return out


_ALGORITHM_FN: dict = {}  # algorithm name as given -> its cost function (resolved once)


def _collective(alg, nbytes, n, reduction, options):
    """``collective_cost(alg, nbytes, n, reduction=..., options=...)`` of the all-reduce
    kind; for a float array of finite, non-negative bytes and ``n > 1`` the algorithm's
    cost function is called directly, as ``collective_cost`` does after its checks."""
    if (type(n) is int and n > 1 and type(nbytes) is np.ndarray and nbytes.dtype == np.float64
            and nbytes.ndim == 1 and nbytes.size and nbytes.min() >= 0
            and nbytes.max() < math.inf):
        fn = _ALGORITHM_FN.get(alg)
        if fn is None:
            fn = _ALGORITHM_FN[alg] = ALGORITHMS[resolve_algorithm(alg)]
        return fn(nbytes, n, reduction or NO_REDUCTION_COST, options or CollectiveOptions())
    return collective_cost(alg, nbytes, n, reduction=reduction, options=options)


def _codec_terms(comp, codec, tc, starts, ovh):
    """The codec's time per bucket with its kernel launches: ``(sums, backward_extra [s],
    delay [s] per bucket or None, overhead [s] per bucket)``, ``sums()`` the encode and
    decode time per iteration [s]: on the channel it adds to the collectives' overhead
    ``ovh``; on the compute stream (eq. :eq:`compute-stream`) the encodes delay the
    buckets and the backward pass, the decodes follow the collectives."""
    c = codec[comp.family]
    enc = np.add.reduceat(tc.encode_time, starts)
    dec = np.add.reduceat(tc.decode_time, starts)
    calls = np.add.reduceat(tc.calls, starts)
    if comp.calls_per_bucket:  # (else calls + 0, the counts unchanged)
        compressed = (tc.encode_time + tc.decode_time > 0) | (tc.calls > 0)
        if comp.per_tensor:  # the per-bucket kernels run for every compressed tensor
            calls = calls + comp.calls_per_bucket * np.add.reduceat(compressed, starts)
        else:
            calls = calls + np.where(np.add.reduceat(compressed, starts) > 0,
                                     comp.calls_per_bucket, 0)
    launch = c.launch * calls

    def sums():  # encode and decode per iteration, each with half the launches
        half = launch.sum() / 2
        return float(enc.sum() + half), float(dec.sum() + half)

    if comp.codec_stream == "compute":  # eq. (compute-stream)
        encode, decode = sums()
        delay = np.cumsum(enc + launch / 2)
        return (lambda: (encode, decode)), encode + decode, delay, ovh + dec + launch / 2
    return sums, 0.0, None, ovh + enc + dec + launch


def _x_eff(ev, x):
    """Time per bit of the slowest link [s/bit] at ``x = 1/(u B)`` (the compression is in
    the bytes): ``max(k1 x, k2)``, see ``Scenario.x_effective``."""
    k1, k2 = ev.xmap
    if k2 == 0.0:
        return x
    if type(x) is float and 0.0 <= x < 1e200 and 0.0 <= k1 < 1e100:
        xe = k1 * x  # one point: numpy's maximum in Python floats (no overflow, no 0 inf)
        return xe if xe >= k2 or xe != xe else k2
    return np.maximum(k1 * np.asarray(x, float), k2)


def _sf(sc, ev, x):
    p = sc.profile
    xe = _x_eff(ev, x)
    if type(xe) in _FLOATS or np.ndim(xe) == 0:
        top = _top_line(ev, float(xe), False)[0]
    else:
        top = ev.env(xe)
    return p.iteration_time / sc.step_time(ev.n, top)


def _build(model, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha, ps_servers,
           cluster, nics_per_node=None, sharding=None, **model_parallel):
    return Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                          gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                          intra_bw=intra_bw, intra_alpha=intra_alpha, ps_servers=ps_servers,
                          cluster=cluster, sharding=sharding, **model_parallel)


def _fixed_buckets(sc):
    """Break-even maps and grids need buckets that do not change with the network."""
    if sc.needs_plan:
        raise InvalidParameterError(
            "fusion", "mg-wfbp", "replans its buckets for every network and compression "
            "ratio, and compressed_scaling_factor, breakeven_bandwidth and the break-even "
            "maps compare compressors on one fixed bucketing",
            "Pass MGWFBP(startup, per_byte) with the start-up and per-byte times it planned "
            "with, or ask plan_compression one line rate at a time")


def _implementation(implementation):
    """``(Implementation, explicit)``: None is PyTorch's preset, not enforced (below)."""
    if implementation is None:
        return IMPLEMENTATIONS["pytorch"], False
    return resolve_implementation(implementation), True


def _family(comp):
    return comp.name if comp.name in COMPRESSORS else comp.family


def _as_implemented(comp, impl, explicit, parameter="compressor"):
    """``comp`` as ``impl`` realises it (:func:`~scalemodel.compressors.for_implementation`).
    With the implementation left to its default (``explicit`` False), a family PyTorch's
    hooks do not provide keeps its textbook format instead of being an error."""
    if not explicit and _family(comp) not in impl.families:
        return comp
    return for_implementation(comp, impl, parameter)


def _compressor_list(compressors, impl=None, explicit=False):
    if impl is None:
        impl, explicit = _implementation(None)
    if compressors is None:
        compressors = DEFAULT_PLAN_COMPRESSORS
        if explicit:  # only what the implementation provides
            compressors = [c for c in compressors if c in impl.families]
    if isinstance(compressors, (str, Compressor)):
        compressors = [compressors]
    try:
        items = list(compressors)
    except TypeError:
        raise ParameterTypeError("compressors", compressors,
                                 "a list of compressor names or objects") from None
    if not items:
        raise InvalidParameterError("compressors", compressors, "must name at least one")
    # "topk:0.01" fixes the setting; a name or an object has its knob searched
    return [(_as_implemented(get_compressor(c, "compressors"), impl, explicit, "compressors"),
             isinstance(c, str) and ":" in c) for c in items]


# --------------------------------------------------------------------------- results


@attrs.frozen
class PlanRow:
    """One compressor in a :class:`CompressionPlan`.

    Attributes
    ----------
    compressor : str
        Catalogue name (``"powersgd"``...).
    setting_name : str or None
        The knob: ``"rank"``, ``"density"``, ``"bits"``, or None.
    setting : float or None
        Least aggressive knob value that reaches the target (the most aggressive one
        searched when none does), or the setting given as ``"name:setting"`` [-].
    feasible : bool
        Whether it reaches the target (on a fitted cluster: at the low end of its
        interval).
    beats_uncompressed : bool
        Whether it scales better than no compression (always False for ``"none"``): at
        every end of the interval on a fitted cluster, or by reaching the target over the
        interval where no compression does not without scaling worse at the fit's best
        values.
    recommended : bool
        Whether the plan recommends it (``"ok"`` in the table): it reaches the target and
        beats no compression; ``"none"`` is recommended when it reaches the target. A
        compressor that reaches the target but scales worse than no compression is not.
    ratio : float
        Compression ratio of each worker's message: gradient bytes over the bytes it
        sends, all phases (32 for signSGD, 2 for fp16) [-].
    effective_ratio : float
        Uncompressed all-reduce wire bits over compressed wire bits per iteration: below
        ``ratio`` (and even below 1) for all-gathered compressors; 1 when no bits cross
        a NIC either way (one worker, or every worker in one node) [-].
    scaling_factor : float
        Scaling factor reached at ``setting`` [-].
    binding : str
        What binds there (see :data:`~scalemodel.model.BINDINGS`).
    encode_time, decode_time : float
        Encode and decode time per iteration, kernel launches included [s].
    collective : str
        The collective carrying most bytes (``"ring"``, ``"allgather"``...).
    n_collectives : int
        Collectives per iteration [-].
    note : str
        Why it fails or what to watch, for people.
    config : Compressor
        The compressor object at ``setting``.
    fusion : object
        The plan's fusion policy (for the knob snippet).
    sharding : str
        The plan's sharding strategy (``"none"``: plain data parallelism) [-].
    speedup : float
        Predicted speedup over no compression, uncompressed over compressed iteration
        time (``scaling_factor`` over the uncompressed one) [-].
    interval : tuple of float or None
        ``(lo, hi)`` scaling factor over a fitted cluster's intervals and alternatives
        (:func:`~scalemodel.intervals.answer_interval`'s clusters); None without them [-].
    speedup_interval : tuple of float or None
        ``(lo, hi)`` speedup over the same clusters, each against no compression on the
        same cluster [-].
    tp, pp : int
        The plan's tensor- and pipeline-parallel sizes: with either above 1 the snippet
        puts DDP and its hook on the data-parallel process group [GPUs], [stages].
    implementation : str
        The implementation preset the row was planned with
        (:data:`~scalemodel.compressors.IMPLEMENTATIONS` key); its snippet is written for
        that framework unless told otherwise (:data:`~scalemodel.knobs.FRAMEWORKS`).
    """

    compressor: str
    setting_name: str | None
    setting: float | None
    feasible: bool
    beats_uncompressed: bool
    recommended: bool
    ratio: float
    effective_ratio: float
    scaling_factor: float
    binding: str
    encode_time: float
    decode_time: float
    collective: str
    n_collectives: int
    note: str
    config: Compressor
    fusion: object
    sharding: str = "none"
    speedup: float = 1.0
    interval: tuple | None = None
    speedup_interval: tuple | None = None
    tp: int = 1
    pp: int = 1
    implementation: str = "pytorch"

    def setting_text(self) -> str:
        """The setting for people, e.g. ``'rank 52'`` or ``'density 0.0021'``."""
        if self.setting_name is None:
            return "-"
        if self.setting_name == "density":
            return f"density {self.setting:.3g}"
        return f"{self.setting_name} {int(self.setting)}"

    def snippet(self, framework=None) -> str:
        """The framework settings that realise this row, as code to paste.

        Parameters
        ----------
        framework : str or None
            ``"pytorch"`` (DDP ``bucket_cap_mb`` and a communication hook),
            ``"horovod"`` (``HOROVOD_FUSION_THRESHOLD``, ``HOROVOD_CYCLE_TIME`` and the
            compression argument), ``"grace-tf"`` / ``"grace-torch"`` (GRACE's
            ``grace_from_params`` into ``hvd.DistributedOptimizer(..., grace=...)``) or
            ``"deepspeed"`` (the ``ds_config``: 1-bit Adam, ``communication_data_type``);
            None (the default): the row's ``implementation`` (:func:`scalemodel.knobs.snippet`)
            [-].
        """
        from .knobs import snippet

        return snippet(self, framework)


@attrs.frozen
class CompressionPlan:
    """Result of :func:`plan_compression`: compressors ranked best first.

    Attributes
    ----------
    rows : tuple of PlanRow
        Recommended rows first (``PlanRow.recommended``: they reach the target and
        beat no compression, over the fit's interval on a fitted cluster), the fastest
        (largest predicted ``speedup``; among equals the gentlest, smallest ``ratio``)
        first, then the others by scaling factor.
    best : PlanRow or None
        The first recommended row that compresses (None when none does or none is
        needed; the message then says so, "none of these beats no compression" when no
        compressor scales better than none, and ``scalemodel plan`` prints no settings
        snippet).
    no_compression_needed : bool
        Whether the uncompressed scaling factor already reaches the target.
    message : str
        The answer in one or two sentences.
    uncompressed_scaling_factor : float
        Scaling factor without compression [-].
    ideal_ratio : float
        :func:`~scalemodel.min_compression`'s ideal ratio (free codec, same collective)
        [-]; ``math.inf`` when no ratio is enough.
    model : str
        Profile name.
    n, bw, target, utilization : float
        The question: [workers], [bits/s], [-], [-].
    algorithm : str
        The all-reduce algorithm.
    codec_note : str
        Where the encode and decode costs come from, and a warning when the defaults
        (measured on an H100) are applied to a profile of another device.
    sharding : str
        The sharding strategy planned for (``"none"``: plain data parallelism) [-].
    memory_per_gpu : float or None
        Memory each GPU needs (:func:`~scalemodel.memory`); None when unknown [bytes].
    fits : bool or None
        Whether it fits on ``gpu``; the message says so when it does not.
    gpu : str or None
        The GPU the memory is checked against.
    best_interval : tuple of float or None
        ``(lo, hi)`` scaling factor of the best row over a fitted cluster's intervals
        (its pessimistic and optimistic corners) and its alternative explanations
        (:func:`~scalemodel.intervals.answer_interval`); None without intervals or best
        row [-].
    implementation : str
        The implementation preset assumed (:data:`~scalemodel.compressors.IMPLEMENTATIONS`
        key): its wire formats, layouts and per-tensor collectives are in the rows'
        ``config``.
    outside_calibration : bool
        Whether the line rate lies above the fitted cluster's calibrated line rates while
        its fitted ceiling holds the achieved bandwidth: the plan then assumes the
        transport achieves no more on the faster link, which the calibration cannot tell
        (the message says so; :func:`breakeven_bandwidth` with ``detail=True`` gives the
        range it can).
    settings : dict
        What the plan assumed (``Scenario.settings``: collective, fusion, sharding,
        tensor and pipeline parallelism, checkpointing, offload, topology, cluster) [-].
    """

    rows: tuple
    best: PlanRow | None
    no_compression_needed: bool
    message: str
    uncompressed_scaling_factor: float
    ideal_ratio: float
    model: str
    n: int
    bw: float
    target: float
    utilization: float
    algorithm: str
    codec_note: str = ""
    sharding: str = "none"
    memory_per_gpu: float | None = None
    fits: bool | None = None
    gpu: str | None = None
    best_interval: tuple | None = None
    implementation: str = "pytorch"
    outside_calibration: bool = False
    settings: dict = attrs.field(factory=dict)

    def snippet(self, framework=None) -> str:
        """Settings of the best row (of ``"none"`` when no compression is needed or none
        helps); see :meth:`PlanRow.snippet`.

        Parameters
        ----------
        framework : str or None
            A name of :data:`~scalemodel.knobs.FRAMEWORKS`; None (the default): the
            plan's ``implementation`` [-].
        """
        row = self.best or next((r for r in self.rows if r.compressor == "none"), self.rows[0])
        return row.snippet(framework)

    def __str__(self):
        head = (f"{self.model} on {self.n} workers at {format_bandwidth(self.bw)}, target "
                f"{self.target:g} (uncompressed {self.uncompressed_scaling_factor:.3f}), "
                f"implementation {self.implementation}")
        fit = any(r.interval is not None for r in self.rows)
        cols = (f"{'':3}{'compressor':<10} {'setting':<16} {'ratio':>7} {'on wire':>8} "
                f"{'scaling':>8} {'speedup':>8}  {'binds':<10} {'codec ms':>8}  collective"
                + ("  speedup over the fit" if fit else ""))
        out = [head, cols]
        for r in self.rows:
            mark = "ok" if r.recommended else "--"
            line = (f"{mark:3}{r.compressor:<10} {r.setting_text():<16} "
                    f"{r.ratio:>6.3g}x {r.effective_ratio:>7.3g}x "
                    f"{r.scaling_factor:>8.3f} {r.speedup:>7.3f}x  {r.binding:<10} "
                    f"{(r.encode_time + r.decode_time) * 1e3:>8.2f}  {r.collective}")
            if r.speedup_interval is not None:
                lo, hi = r.speedup_interval
                line += f"{'':{max(1, 12 - len(r.collective))}}{lo:.3f} to {hi:.3f}"
            out.append(line)
        unsure = [r for r in self.rows if not r.recommended and r.interval is not None
                  and r.interval[0] is not None and r.scaling_factor >= self.target
                  > r.interval[0]]
        if unsure:  # (its point reaches the target: why it is not marked ok)
            out.append("--: " + "; ".join(
                f"{r.compressor}{_setting_suffix(r)} reaches {r.scaling_factor:.3f} "
                f"but {r.interval[0]:.3f} at the fit's pessimistic end"
                for r in unsure[:3]) + f", below the target {self.target:g}"
                + (f" (and {len(unsure) - 3} more such rows)" if len(unsure) > 3 else ""))
        out.append(self.message)
        if self.memory_per_gpu is not None:
            out.append("memory: " + memory_text(self.memory_per_gpu, self.fits, self.gpu))
        if self.codec_note:
            out.append(self.codec_note)
        return "\n".join(out)


def _setting_suffix(row) -> str:
    """`` <setting>`` of a plan row, or ``""`` for one without (its table shows "-")."""
    text = row.setting_text().strip()
    return "" if text in ("", "-") else f" {text}"


# --------------------------------------------------------------------------- planner


# relative margin by which a compressor must beat no compression to count as better
_BEAT_MARGIN = 1e-9

# the density search ends when the bracket is this wide in log density (relative 1e-4:
# below the 3 digits printed; at 1e-6 the search resolves the steps of ceil(d N) of the
# smallest tensors, a few 1e-6 in the scaling factor, and needs 10 more evaluations)
_DENSITY_TOL = 1e-4


def _knob_steps(f, a, b, fa, fb, target, *, integer, lines=None, level=None,
                ask=lambda v: v):
    """The knob search, a generator: returns the end ``a`` of a bracket with
    ``f(a) >= target > f(b)`` once it is one integer apart (``integer``; ``a``, ``b`` the
    knob) or :data:`_DENSITY_TOL` wide (``a``, ``b`` the log density); yields ``ask(c)``
    before it reads ``f(c)`` at each point ``c`` (so that :func:`_rows` can evaluate the
    points of several searches at once).

    The knob scales the bytes on the wire and the codec's work, so each line of the
    iteration's upper envelope (eq. :eq:`compressed-bucket`) is close to a straight line
    in the knob. With ``lines(v)`` (each line's time at the plan's line rate, knob ``v``
    [s]) and ``level`` (the envelope's value that reaches the target [s]), the next
    point is where the first of the lines, each drawn through its values at the
    bracket's ends, reaches the level: exact when no line bends in between. Without
    them (or when that point is outside the bracket), the secant of ``1 / f`` through
    the last two points. A point is kept half a tolerance inside the bracket so that a
    right guess closes it; a bisection step follows whenever three points did not halve
    the bracket, and throughout once at most 16 integers are left. The lines are used
    for the density only: a PowerSGD rank that stops compressing a matrix makes its
    lines jump, and the secant gets there in fewer steps. ``f`` does not
    increase with the knob, so the result is what bisection gives, to the bracket's
    width, in a fraction of its evaluations."""
    lin = (lambda v: v) if integer else math.exp
    ga, gb = 1.0 / target - 1.0 / fa, 1.0 / target - 1.0 / fb  # ga >= 0 > gb
    stop = 1 if integer else _DENSITY_TOL
    last = [(lin(a), ga), (lin(b), gb)]
    widths = [b - a]
    for _ in range(400):
        if b - a <= stop:
            break
        c = None
        if (len(widths) < 4 or widths[-1] <= 0.5 * widths[-4]) and \
                not (integer and b - a <= 16):  # a few integers: bisection is as quick
            if lines is not None and not integer:
                c = _first_crossing(lines, a, b, lin, level)
            if c is None:
                (u1, g1), (u2, g2) = last[-2], last[-1]
                if g1 != g2:
                    cu = u2 - g2 * (u2 - u1) / (g2 - g1)
                    c = cu if integer else (math.log(cu) if cu > 0 else None)
            if c is not None and not a < c < b:
                c = None
        if c is None:
            c = 0.5 * (a + b)
        if integer:
            c = min(max(int(round(c)), a + 1), b - 1)
        else:
            c = min(max(c, a + 0.5 * stop), b - 0.5 * stop)
        yield ask(c)
        gc = 1.0 / target - 1.0 / f(c)
        if gc >= 0:
            a = c
        else:
            b = c
        last.append((lin(c), gc))
        widths.append(b - a)
    return a


def _first_crossing(lines, a, b, lin, level):
    """Where the first of the envelope's lines, each straight in the density between its
    values at the log densities ``a`` and ``b``, reaches ``level`` (see
    :func:`_knob_steps`): its log density, or None when none does inside the bracket."""
    ua, ub = lin(a), lin(b)
    la, lb = lines(a), lines(b)  # Python floats: a few lines, numpy's operations
    if len(la) != len(lb) or ub <= ua:
        return None
    du = ub - ua
    if type(la) is np.ndarray:  # many lines: the same operations on arrays
        if not (np.isfinite(la).all() and np.isfinite(lb).all()):
            la, lb = la.tolist(), lb.tolist()  # (min of Python floats on a nan)
        else:
            with np.errstate(all="ignore"):
                slopes = (lb - la) / du
                rising = slopes > 0
                if not rising.any():
                    return None
                u = float(np.min(ua + (level - la[rising]) / slopes[rising]))
            return math.log(u) if ua < u < ub else None
    slopes = [(vb - va) / du for va, vb in zip(la, lb)]
    cross = [ua + (level - va) / s for va, s in zip(la, slopes) if s > 0]
    if not cross:
        return None
    u = min(cross)
    if not ua < u < ub:
        return None
    return math.log(u)


def _rows(sc, n, codec, make, count, views=()):
    """The rows of the generators ``make(0) ... make(count - 1)`` (:func:`_row_steps`),
    run in lockstep: each round, the compressors they ask for next are evaluated at once
    (:func:`_evaluate_many`) on ``sc`` and on each of ``views`` (those of
    :func:`_views`), then each goes on, reading its evaluations from the cache.
    Should any raise, the rows are made again one after the other, so that the error is
    the one the first row to fail raises alone."""
    out = [None] * count
    active = [(i, make(i)) for i in range(count)]
    try:
        while active:
            wanted, going = [], []
            for i, step in active:
                try:
                    wanted.append(next(step))
                except StopIteration as done:
                    out[i] = done.value
                else:
                    going.append((i, step))
            if wanted:
                _evaluate_round(sc, n, codec, views, wanted)
            active = going
    except Exception:
        return [_finish(make(i)) for i in range(count)]
    return out


def _evaluate_round(sc, n, codec, views, comps):
    """:func:`_evaluate_many` of ``comps`` on ``sc`` and on each of ``views`` (``(scenario,
    x, codec, ...)`` each), each compressor's tensor costs made once for all of them; the
    views are left alone when ``sc`` had all of them already (a plan asked again)."""
    memo = {} if views else None
    if not _evaluate_many(sc, comps, n, codec, memo):
        return  # all in the point's cache: in the views' too (else each alone, as asked)
    for view in views:
        _evaluate_many(view[0], comps, n, view[2], memo)


_BOTH_BOUNDS = True
"""Whether :func:`_first_round` evaluates a searched knob's lower bound with its upper
one: the search asks for it next unless the upper bound reaches the target (the
compressor barely compressing), which a plan that needs compression rarely sees, so the
two rounds become one (a batch's own cost is several compressors'); False: each bound
in its own round (the tests compare the two)."""


def _first_round(sc, n, codec, views, comps):
    """The rows' first round (:func:`_rows`) with the uncompressed evaluation, made before
    the uncompressed answer that the rows read: the compressors of ``comps``
    (``(compressor, fixed)`` each) at the settings they ask for first
    (:func:`_first_value`), evaluated at once on ``sc`` and its ``views``; without views,
    a searched knob's other bound too (:data:`_BOTH_BOUNDS`). An error is left to the
    rows, which raise the first row's."""
    none = get_compressor("none")
    if sc.sharding is not None or n <= 1 or sc._cache.get(("evaluate", none, n, id(codec))):
        return  # not batched, or asked before at this n (the rows find what they ask)
    try:
        asks, lows = [none], []
        for comp, fixed in comps:
            if comp.knob is None:
                asks.append(comp)
            else:
                value, bounds = _first_value(sc, comp, fixed)
                asks.append(comp.with_setting(value))
                if bounds is not None and _BOTH_BOUNDS and not views:
                    lows.append(comp.with_setting(bounds[0]))
        _evaluate_round(sc, n, codec, views, asks + lows)
    except Exception:  # noqa: BLE001  (made again, and raised, by the rows)
        pass


def _finish(steps):
    """Run the generator ``steps`` to its end; its value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _row_steps(sc, comp, n, x, codec, target, fusion, sf_none, fixed=False, bw=None,
               views=(), implementation="pytorch"):
    """Search the knob (unless ``fixed``) and make the row, a generator (see
    :func:`_rows`: it yields each compressor before evaluating it, and returns the row);
    ``sf_none`` is the uncompressed scaling factor; ``bw`` [bits/s] lets the binding name
    the ceiling; ``views`` the other clusters of a fitted cluster's interval,
    ``(scenario, x, codec, uncompressed scaling factor)`` each: the target must be
    reached on all of them; ``implementation`` the preset's name, for the row."""
    strategy = "none" if sc.sharding is None else sc.sharding.strategy
    if not composes(sc, comp):
        return _not_composing_row(sc, comp, n, x, codec, fusion, sf_none, strategy, bw,
                                  implementation)
    at = _setting_evaluator(sc, comp, n, x, codec, sf_none, views)
    config, ev, sf_lo, sf, sf_hi, spd_lo, spd_hi = yield from _chosen_steps(
        sc, comp, n, x, target, fixed, views, at)
    feasible = sf_lo >= target  # over the whole interval
    none_lo = _uncompressed_low(sc, n, sf_none, views)
    # feasible over the whole interval where uncompressed is not (its row's rule), and not
    # worse at the fit's best values: better by construction; else by a clear margin, at
    # every end of the interval
    beats = comp.name != "none" and ((feasible and none_lo < target and sf >= sf_none)
                                     or spd_lo > 1.0 + _BEAT_MARGIN)
    recommended = feasible and (beats or comp.name == "none")
    x_eff = float(_x_eff(ev, x))
    j = _top_line(ev, x_eff)[1]
    binding, _ = sc.critical(n, ev.lines, j, x_eff, bw=bw)
    # nothing crosses a NIC either way (n = 1, or one node): the wire is unchanged, 1
    eff = ev.raw_bits / ev.bits if ev.bits > 0 else (1.0 if ev.raw_bits == 0 else math.inf)
    note = _row_note(ev, n, target, (sf_lo, sf, sf_hi), sf_none, (spd_lo, spd_hi), feasible,
                     recommended, binding, eff, views)
    return PlanRow(
        compressor=comp.name, setting_name=comp.knob,
        setting=None if comp.knob is None else config.setting, feasible=feasible,
        beats_uncompressed=beats, recommended=recommended, ratio=ev.per_worker_ratio,
        effective_ratio=eff, scaling_factor=sf, binding=binding, encode_time=ev.encode,
        decode_time=ev.decode, collective=ev.collective, n_collectives=ev.n_collectives,
        note=note, config=config, fusion=fusion, sharding=strategy, speedup=sf / sf_none,
        interval=(sf_lo, sf_hi) if views or at.widened else None,
        speedup_interval=(spd_lo, spd_hi) if views or at.widened else None,
        implementation=implementation, **_mp_sizes(sc))


def _not_composing_row(sc, comp, n, x, codec, fusion, sf_none, strategy, bw,
                       implementation="pytorch"):
    """The row of a compressor that does not compose with the scenario's sharding
    (``strategy``): the uncompressed reduce-scatters' scaling factor ``sf_none`` [-] and
    binding (at ``x`` [s/bit], line rate ``bw`` [bits/s]), not feasible."""
    none = _evaluate(sc, get_compressor("none"), n, codec)
    x_eff = float(_x_eff(none, x))
    return PlanRow(
        compressor=comp.name, setting_name=comp.knob,
        setting=None if comp.knob is None else comp.setting, feasible=False,
        beats_uncompressed=False, recommended=False, ratio=1.0, effective_ratio=1.0,
        scaling_factor=sf_none, binding=sc.critical(
            n, none.lines, _top_line(none, x_eff)[1], x_eff, bw=bw)[0],
        encode_time=0.0, decode_time=0.0, collective="reduce_scatter",
        n_collectives=none.n_collectives,
        note=(f"does not compose with sharding={strategy!r}: "
              f"{_why_not_composes(comp.name)}"),
        config=comp, fusion=fusion, sharding=strategy, implementation=implementation,
        **_mp_sizes(sc))


def _uncompressed_low(sc, n, sf_none, views):
    """The low end of the uncompressed scaling factor ``sf_none`` over the interval's
    ``views`` (:func:`_with_none`), widened by the cluster's model discrepancy as the
    rows' are (:func:`_setting_evaluator`) [-]."""
    lo = min([sf_none] + [v[3] for v in views])
    return widen_scaling(lo, None, discrepancy_factor(sc.cluster, n), None,
                         run_noise(sc.cluster, n), sf_none)[0]


def _setting_evaluator(sc, comp, n, x, codec, sf_none, views):
    """``at(value)``: ``comp`` at knob ``value`` (None: its own setting) evaluated at ``x``
    [s/bit] on ``sc`` and on every view, memoized per row, as ``(compressor, evaluation,
    low, best, high scaling factor, low and high speedup over sf_none)`` [-]; index 2,
    the low end over the interval, is what must reach the target. The scaling factors'
    ends are widened by the cluster's model discrepancy (eq. :eq:`model-discrepancy`;
    ``at.widened``: whether it has one), the speedups not: compressed and uncompressed
    times move together. ``at.config(value)``: the compressor alone."""
    cache, configs = {}, {}
    f, noise = discrepancy_factor(sc.cluster, n), run_noise(sc.cluster, n)

    def config(value):  # the compressor at ``value``, made once per row
        c = configs.get(value)
        if c is None:
            c = configs[value] = comp.with_setting(value) if comp.knob else comp
        return c

    def at(value):
        key = value
        if key not in cache:
            c = config(value)
            ev = _evaluate(sc, c, n, codec)
            sf = float(_sf(sc, ev, x))
            lo = hi = sf
            spd = [sf / sf_none]
            for vsc, vx, vcodec, vnone in views:
                v = float(_sf(vsc, _evaluate(vsc, c, n, vcodec), vx))
                lo, hi = min(lo, v), max(hi, v)
                spd.append(v / vnone)
            lo, hi = widen_scaling(lo, hi, f, 1.0 if sc.sharding is None else None, noise,
                                   sf)
            # index 2: what must reach the target, the low end over the interval
            cache[key] = (c, ev, lo, sf, hi, min(spd), max(spd))
        return cache[key]

    at.config = config
    at.widened = f > 1.0
    return at


def _chosen_steps(sc, comp, n, x, target, fixed, views, at):
    """The setting the row reports, as ``at`` gives it (:func:`_setting_evaluator`): the
    compressor's own without a knob or when ``fixed``; else the least aggressive knob
    within its bounds whose low end reaches ``target`` [-], or the bound nearest it. A
    generator: it yields each compressor before evaluating it (:func:`_rows`)."""
    value, bounds = _first_value(sc, comp, fixed)
    yield at.config(value)
    if bounds is None:
        return at(value)
    lo, hi = bounds
    if at(hi)[2] >= target:
        return at(hi)
    yield at.config(lo)
    if at(lo)[2] < target:
        return at(lo)
    return (yield from _searched_steps(sc, comp, n, x, target, views, at, lo, hi))


def _first_value(sc, comp, fixed):
    """``(value, bounds)``: the setting a row asks for first (:func:`_chosen_steps`) and
    the knob bounds it searches: the compressor's own setting (None without a knob) and
    None without a knob or when ``fixed``, else the upper bound and ``(lo, hi)``."""
    if comp.knob is None or fixed:
        return (comp.setting if comp.knob else None), None
    lo, hi = comp.knob_bounds(_elements(sc)[1], sc.profile.tensor_shapes)
    return hi, (lo, hi)


def _searched_steps(sc, comp, n, x, target, views, at, lo, hi):
    """:func:`_knob_steps` between the knob bounds ``lo`` (reaches ``target`` [-]) and
    ``hi`` (does not), as ``at`` gives its result; yields what the search does."""
    p = sc.profile
    # the envelope's lines at the plan's line rate (without an interval: with one,
    # the target must hold on every view, and the secant alone is used)
    level = p.iteration_time / target - sc.forward(n) - sc.update(n)

    memo = {}

    def lines(v):  # intercept + slope x_eff line by line: Python floats for a few lines
        if v not in memo:
            ev = at(math.exp(v) if not comp.knob_integer else v)[1]
            xe = float(_x_eff(ev, x))
            c, m = ev.lines.intercept, ev.lines.slope
            if len(c) > _MANY_LINES:  # the same operations on arrays
                with np.errstate(all="ignore"):
                    memo[v] = c + m * xe
            else:
                memo[v] = [ci + mi * xe for ci, mi in zip(c.tolist(), m.tolist())]
        return memo[v]

    kw = {} if views or at.widened else {"lines": lines, "level": level}
    if comp.knob_integer:
        return at((yield from _knob_steps(lambda v: at(v)[2], int(lo), int(hi), at(lo)[2],
                                          at(hi)[2], target, integer=True,
                                          ask=at.config, **kw)))
    a = yield from _knob_steps(lambda v: at(math.exp(v))[2], math.log(lo), math.log(hi),
                               at(lo)[2], at(hi)[2], target, integer=False,
                               ask=lambda v: at.config(math.exp(v)), **kw)
    return at(math.exp(a))


def _row_note(ev, n, target, sfs, sf_none, spds, feasible, recommended, binding, eff,
              views):
    """The row's note for people: why it fails or what to watch. ``sfs``: the low, best
    and high scaling factor, ``spds`` the low and high speedup, ``eff`` the effective
    ratio [-]."""
    sf_lo, sf, sf_hi = sfs
    spd_lo, spd_hi = spds
    growth = (f"all-gather traffic grows with n: it sends less than the uncompressed "
              f"all-reduce only for n < {2 * ev.per_worker_ratio:.3g}")
    codec_ms = (ev.encode + ev.decode) * 1e3
    if feasible and not recommended:
        return (f"reaches {target:g} but scales worse than no compression "
                f"({sf:.3f} vs {sf_none:.3f})" if sf < sf_none else
                f"reaches {target:g} but scales no better than no compression ({sf:.3f})"
                if not views or sf <= sf_none * (1.0 + _BEAT_MARGIN) else
                f"reaches {target:g} but not better than no compression over the whole "
                f"interval (speedup {spd_lo:.3f} to {spd_hi:.3f})")
    if views and sf >= target and not feasible:
        return (f"reaches {target:g} at the fit's best values ({sf:.3f}) but not over its "
                f"interval ({sf_lo:.3f} to {sf_hi:.3f})")
    if feasible:
        return growth if ev.collective == "allgather" and n > 1 else ""
    if ev.collective == "allgather" and n > 1 and eff <= 1:
        return growth
    if binding == "overhead" and codec_ms > 0:
        return f"encode/decode ({codec_ms:.3g} ms per iteration) eats the gain"
    if binding == "bandwidth":
        return f"{ev.per_worker_ratio:.3g}x is not enough"
    return f"{binding} binds"


def _mp_sizes(sc):
    """``tp`` and ``pp`` of a scenario, for :class:`PlanRow` [-]."""
    mp = sc.model_parallel
    return {} if mp is None else {"tp": mp.tp, "pp": mp.pp}


def _interval_clusters(cluster):
    """The clusters an answer's interval spans (:func:`~scalemodel.intervals.answer_interval`):
    each alternative and its two corners, the cluster itself excluded."""
    if cluster is None or not (cluster.intervals or cluster.alternatives
                               or "efficiency" in cluster.extra):
        return []
    out = []
    for i in range(max(1, len(cluster.alternatives))):
        c = cluster if i == 0 else cluster.with_alternative(i)
        out += ([] if i == 0 else [c]) + list(c.corners())
    seen, unique = set(), []
    for c in out:
        if id(c) not in seen and c is not cluster:
            seen.add(id(c))
            unique.append(c)
    return unique


def _views(sc, model, bw, u, n, gpu, impl, kw, mp):
    """``(scenario, x, codec)`` on each cluster of the interval
    (:func:`_interval_clusters`), built with the job's settings ``kw`` and its tensor- and
    pipeline-parallel ones ``mp`` (a ring's view of a corner is its own ring view,
    :meth:`~scalemodel.ClusterProfile.ring_view`), at the data-parallel ``n`` [workers]
    and ring rate ``bw`` [bits/s]; :func:`_with_none` adds their uncompressed scaling
    factor."""
    out = []
    for c in _interval_clusters(sc.cluster):
        vsc = _build(model, kw["algorithm"], kw["fusion"], kw["alpha"], kw["gpus_per_node"],
                     kw["intra_bw"], kw["intra_alpha"], kw["ps_servers"], c,
                     kw["nics_per_node"], kw["sharding"],
                     activation_checkpointing=kw["activation_checkpointing"],
                     offload=kw["offload"], shard_group=kw["shard_group"],
                     sequence_parallel=kw["sequence_parallel"], **mp)
        vx = 1.0 / (effective_utilization(vsc, bw, u) * bw)
        vsc = vsc.planned(n, vx)
        out.append((vsc, vx, _codec(vsc, gpu, impl)))
    return out


def _with_none(views, n):
    """``(scenario, x, codec, uncompressed scaling factor)`` of each of ``views``
    (:func:`_views`) with ``n`` workers."""
    none = get_compressor("none")
    return [(vsc, vx, vcodec, float(_sf(vsc, _evaluate(vsc, none, n, vcodec), vx)))
            for vsc, vx, vcodec in views]


def _codec(sc, gpu, impl):
    """The codec costs by family for scenario ``sc``: the built-in table of ``impl`` scaled
    to ``gpu`` (else the profile's GPU), the cluster's measured costs first (see
    :mod:`scalemodel.codec_costs`)."""
    from .codec_costs import profile_gpu

    spec = profile_gpu(sc.profile, gpu)
    key = ("codec", None if spec is None else (spec.name, spec.hbm_bandwidth), impl.name)
    cache = sc._cache
    if key not in cache:
        cache[key] = codec_costs_for(sc.cluster, gpu=spec, implementation=impl.name)
    return cache[key]


def _codec_note(profile, cluster, comps, gpu=None, implementation=None):
    """Where the codec costs of a plan come from (see :attr:`CompressionPlan.codec_note`)."""
    from .codec_costs import default_costs, profile_gpu
    from .hardware import get_gpu

    impl = implementation or "pytorch"
    measured = set()
    for key in getattr(cluster, "codec_costs", None) or {}:
        owner, slash, family = key.rpartition("/")
        if not slash or owner == impl:
            measured.add(family)
    families = {c.family for c in comps} - {"none"}
    if not families:
        return ""
    if families <= measured:
        return f"codec costs: measured, cluster {cluster.name}"
    spec = profile_gpu(profile, gpu)
    _, table, factor = default_costs(spec, impl)
    own = f"{table.implementation}'s, " if table.implementation else ""
    note = ("codec costs: " + (f"cluster {cluster.name} for {', '.join(sorted(measured))}, "
                               "else " if measured & families else "")
            + f"the defaults, {own}measured on an {get_gpu(table.gpu).full_name} "
            f"(scalemodel/data/codec/{table.name}.json)")
    if table.implementation:  # the families its table lacks: the reference kernels
        lacking = sorted(families - measured - set(table.costs))
        if lacking:
            ref = default_costs(None, None)[1]
            note += (f"; {', '.join(lacking)}: the reference kernels "
                     f"(scalemodel/data/codec/{ref.name}.json, scaled to the "
                     f"{(spec or get_gpu(table.gpu)).name})")
    if spec is None:
        device = profile.device or "an unknown device"
        note += (f"; {profile.name} ran on {device}, which no built-in GPU matches: the "
                 "costs are not scaled (pass gpu=, --gpu); measure its codecs there (python "
                 "-m scalemodel.calibrate.codec_bench) and pass that profile (cluster=, "
                 "--cluster)")
    elif factor != 1.0:
        where = f"{profile.name} ran on {profile.device}" if gpu is None and profile.device \
            else f"on the {spec.name}"
        note += (f"; {where}: per-element costs x {factor:.3g} for the {spec.name}'s "
                 f"{spec.hbm_bandwidth / 1e9:.4g} GB/s HBM (launch floors kept), a "
                 "bandwidth estimate: measure its codecs there (python -m "
                 "scalemodel.calibrate.codec_bench) and pass that profile (cluster=, "
                 "--cluster)")
    return note


def _ideal_text(ideal, sharded=False):
    """What free compression of the all-reduce would need, never ``"infx"``."""
    what = "of every collective (parameters too) " if sharded else ""
    if ideal.feasible and math.isfinite(ideal.ratio):
        return f"ideal compression {what}would need {ideal.ratio:.3g}x"
    return (f"ideal compression {what or 'of the all-reduce '}could not reach it "
            f"({ideal.binding} binds)")


def plan_compression(model, bw, *, n=DEFAULT_N, target=DEFAULT_TARGET, utilization=1.0,
                     cluster=None, algorithm=None, fusion=None, compressors=None,
                     alpha=None, gpus_per_node=None, intra_bw=None, intra_alpha=None,
                     ps_servers=None, nics_per_node=None, sharding=None,
                     gpu=None, implementation=None, activation_checkpointing=None,
                     offload=None, shard_group=None, tp=1, pp=1,
                     microbatches=None, virtual_stages=1, loss="unfused",
                     accounting="zero", sequence_parallel=False,
                     fragmentation=0.0) -> CompressionPlan:
    """Rank compressors by what they achieve on this network, each at the least aggressive
    setting that reaches ``target``; eq. :eq:`compressed-bucket`.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Built-in profile name, profile file or profile [-].
    bw : float or str
        Line rate of each worker's link, e.g. ``"10Gbps"`` [bits/s].
    n : int
        Number of workers; default 64 [workers].
    target : float
        Scaling factor to reach, in (0, 1]; default 0.9 [-].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    cluster : ClusterProfile, str or os.PathLike, optional
        Calibrated cluster: latency, achieved bandwidth and, when measured, codec costs
        (``codec_costs``) replacing the defaults of
        :data:`~scalemodel.compressors.DEFAULT_CODEC_COSTS` [-].
    algorithm : str or None
        All-reduce algorithm for the all-reduced phases; ``None``: the cluster's fit
        setting, else ``"ring"`` [-].
    fusion : str, fusion policy or None
        ``"ddp"`` (the default), ``"horovod"``, ``"none"`` or a policy object; under
        sharding the wrapping policy (``"block"`` by default); ``None``: the cluster's fit
        setting, else that default [-].
    compressors : sequence of str or Compressor, optional
        What to compare; default :data:`~scalemodel.planner.DEFAULT_PLAN_COMPRESSORS`. A
        name or an object has its knob searched; a name with a setting (``"topk:0.01"``,
        ``"powersgd:8"``, see :func:`~scalemodel.get_compressor`) is evaluated at that
        setting only [-].
    alpha, gpus_per_node, intra_bw, intra_alpha, ps_servers, nics_per_node
        As in :func:`~scalemodel.scaling_factor` (``None``: the cluster's value, else the
        default there): [s], [workers], [bits/s], [s], [servers], [NICs].
    sharding : str, Sharding or None
        As in :func:`~scalemodel.scaling_factor` (``None``: the cluster's fit setting,
        else ``"none"``); under sharding only the compressors
        that compose with a reduce-scatter are evaluated, the others are listed as not
        composing [-].
    gpu : str, GPUSpec or None
        GPU whose memory is checked, as in :func:`~scalemodel.min_compression`, and whose
        codec costs are used: the measured H100 table scaled by HBM bandwidth (launch
        floors kept), :mod:`scalemodel.codec_costs`; None: the profile's GPU (the one a
        configuration-derived profile was derived for, else its ``device``), and no memory
        check for a measured profile [-].
    implementation : str or None
        Implementation preset of :data:`~scalemodel.compressors.IMPLEMENTATIONS`
        (``"pytorch"``, ``"horovod"``, ``"grace-tf"``, ``"grace-torch"``,
        ``"deepspeed"``): it sets each compressor's wire format, tensor layout and whether
        compressed tensors travel per tensor (overriding the fusion for them), unless a
        :class:`~scalemodel.compressors.Compressor` object sets them itself; a family it
        does not provide is an :class:`~scalemodel.InvalidParameterError` naming the
        implementations that do. None (the default): ``"pytorch"``, except that the
        families PyTorch's hooks lack (``signsgd``, ``topk``, ``randomk``) are still
        evaluated, in their textbook formats (the class defaults) [-].
    activation_checkpointing, offload
        As in :func:`~scalemodel.scaling_factor`: the recompute in each checkpointed
        block's backward and the offloaded optimizer step (host transfers and the CPU
        step) are in every row's time, compressed or not, and the memory check is
        :func:`~scalemodel.memory` with them; a bad value raises
        :class:`~scalemodel.InvalidParameterError` naming it, as there [-].
    shard_group : int or None
        As in :func:`~scalemodel.scaling_factor`: ``zero1`` / ``zero2`` / ``zero3``
        sharded over groups of this many GPUs, replicated across groups (the
        cross-group all-reduce in every row's collectives, the compressor's bytes on the
        gradient ones); the memory check shards over the group too [GPUs].
    tp, pp, microbatches, virtual_stages
        As in :func:`~scalemodel.scaling_factor`: ``n`` counts all GPUs and the plan is
        for the data-parallel dimension of ``n / (tp pp)`` replicas, each compressor
        applied to the data-parallel all-reduce of one GPU's gradients
        (:mod:`scalemodel.parallel`; the plan's ``n`` and ``bw`` stay the job's, its
        message says the replicas and the ring's rate); ``virtual_stages`` > 1 is
        Megatron's interleaved 1F1B (a smaller bubble, eq. :eq:`pp-interleaved`; more
        activations in the memory check): [GPUs], [stages], [micro-batches], [chunks].
    sequence_parallel : bool
        As in :func:`~scalemodel.scaling_factor`: the same tensor-parallel time, the
        activations split along the sequence in the memory check [-].
    loss : str
        How the cross-entropy loss is computed, for the memory check only (the time
        model does not use it): ``"unfused"`` (the default), ``"fused"`` or
        ``"unfused+logits"``, as in :func:`~scalemodel.memory`; the plan's ``settings``
        record it. Anything else raises :class:`~scalemodel.InvalidParameterError` naming
        the value and the valid ones, as :func:`~scalemodel.memory` does [-].
    accounting : str
        How :func:`~scalemodel.memory` counts the model state and the peak, for the memory
        check only: ``"zero"`` (the default) or ``"fsdp"`` (with sharding zero2, zero3 or
        hybrid_shard and no offload), as in :func:`~scalemodel.memory`; the plan's
        ``settings`` record it. Anything else, or ``"fsdp"`` with another strategy or
        with offload, raises :class:`~scalemodel.InvalidParameterError` naming the value
        and the valid ones, as :func:`~scalemodel.memory` does [-].
    fragmentation : float or str
        The allocator's free space inside segments, for the memory check only, as in
        :func:`~scalemodel.min_compression` [-].

    Returns
    -------
    CompressionPlan
        Rows ranked best first, ``no_compression_needed`` and a ``message``. For a
        memory-pressured job (:func:`~scalemodel.efficiency.job_memory_pressure`) the
        rows' scaling factors and intervals leave that slowdown out, as
        :func:`~scalemodel.min_compression` does, and a
        :class:`~scalemodel.exceptions.ModelWarning` says so (``iteration_time`` widens
        its interval's slow end instead).

    Examples
    --------
    >>> import scalemodel
    >>> plan = scalemodel.plan_compression("bert", "10Gbps")
    >>> plan.no_compression_needed, plan.best.compressor
    (False, 'powersgd')
    """
    n = _scalar("n", check_count(n, "n"))
    bw = _scalar("bw", parse_bandwidth(bw, "bw"))
    target = _scalar("target", check_fraction(target, "target"))
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    loss = _loss(loss)
    accounting = _accounting(accounting)
    fragmentation = _fragmentation(fragmentation)
    impl, explicit = _implementation(implementation)
    comps = _compressor_list(compressors, impl, explicit)
    job = dict(activation_checkpointing=activation_checkpointing, offload=offload,
               shard_group=shard_group,  # scalemodel.checkpointing, .offload, .sharding
               sequence_parallel=sequence_parallel)  # scalemodel.parallel
    options = dict(algorithm=algorithm, fusion=fusion, alpha=alpha,
                   gpus_per_node=gpus_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
                   ps_servers=ps_servers, nics_per_node=nics_per_node, sharding=sharding,
                   **job)
    sc = _build(model, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha,
                ps_servers, cluster, nics_per_node, sharding, tp=tp, pp=pp,
                microbatches=microbatches, virtual_stages=virtual_stages, **job)
    _accounting(accounting, sc)  # "fsdp" against the strategy and offload, before planning
    n_job, bw_job = n, bw
    n, bw = sc.data_parallel(n, bw)  # scalemodel.parallel (unchanged without tp/pp)
    bw = float(bw)
    codec = _codec(sc, gpu, impl)
    u_eff = effective_utilization(sc, bw, u)
    x = 1.0 / (u_eff * bw)
    built = sc  # as built: the ideal solve's scenario when it would build the same
    sc = sc.planned(n, x)  # MG-WFBP: the buckets it plans for this network
    p = sc.profile
    views = _views(sc, model, bw, u, n, gpu, impl, options, dict(
        tp=tp, pp=pp, microbatches=microbatches, virtual_stages=virtual_stages))
    _first_round(sc, n, codec, views, comps)  # the uncompressed evaluation among them
    sf_none = float(_sf(sc, _evaluate(sc, get_compressor("none"), n, codec), x))
    ideal = _ideal_compression(model, sc, n_job, bw_job, target, u, (gpu, loss, accounting),
                               built, algorithm=algorithm,
                               # MG-WFBP: min_compression replans at every ratio
                               fusion=built.fusion if built.needs_plan else sc.fusion,
                               alpha=alpha,
                               gpus_per_node=gpus_per_node, nics_per_node=nics_per_node,
                               intra_bw=intra_bw, intra_alpha=intra_alpha,
                               ps_servers=ps_servers, cluster=cluster,
                               sharding=sc.sharding or "none", tp=tp, pp=pp,
                               microbatches=microbatches, virtual_stages=virtual_stages,
                               activation_checkpointing=activation_checkpointing,
                               offload=offload,  # the group: in sc.sharding
                               sequence_parallel=sequence_parallel)
    _job_pressure(built, n_job, effect=(  # (min_compression's own warning is replaced)
        "the plan's scaling factors, their intervals and the compression it names leave "
        "that slowdown out: no compression buys back a slower compute"))
    views = _with_none(views, n)
    rows = _rows(sc, n, codec, lambda i: _row_steps(
        sc, comps[i][0], n, x, codec, target, sc.fusion, sf_none, comps[i][1], bw=bw,
        views=views, implementation=impl.name), len(comps), views)
    widening = discrepancy_factor(sc.cluster, n)
    needed = _uncompressed_low(sc, n, sf_none, views) >= target  # the 'none' row's rule
    _rank_rows(rows, needed)
    best = None if needed else next(
        (r for r in rows if r.recommended and r.compressor != "none"), None)
    where = f"{p.name} on {n} workers at {format_bandwidth(bw)}"
    if explicit:
        where += f" with {impl.name}'s compressors"
    msg = _plan_message(rows, best, needed, where, sf_none, target, ideal,
                        sc.sharding is not None)
    outside = _outside_calibration(sc.cluster, bw)
    msg = _message_caveats(msg, rows, needed, _strategy(sc), views, outside)
    per, fits, gpu_name, note = memory_check(sc, n, gpu, loss, accounting, fragmentation)
    best_interval, said = _best_interval(model, best, sc, (n, n_job), bw_job, dict(
        utilization=u, **options, implementation=implementation, gpu=gpu, tp=tp, pp=pp,
        microbatches=microbatches, virtual_stages=virtual_stages))
    if widening > 1.0 and not said:  # (with a best row its interval says it)
        said = "; the fit's intervals are " + discrepancy_text(sc.cluster)
    plan = CompressionPlan(rows=tuple(rows), best=best, no_compression_needed=needed,
                           best_interval=best_interval,
                           message=msg + said + note, uncompressed_scaling_factor=sf_none,
                           ideal_ratio=ideal.ratio, model=p.name, n=n, bw=bw, target=target,
                           utilization=u, algorithm=sc.algorithm,
                           codec_note=_codec_note(p, sc.cluster, [c for c, _ in comps], gpu,
                                                  impl.name),
                           sharding=_strategy(sc), memory_per_gpu=per, fits=fits,
                           gpu=gpu_name, implementation=impl.name,
                           outside_calibration=bool(outside),
                           settings=dict(sc.settings(), loss=loss, accounting=accounting,
                                         fragmentation=fragmentation))
    return _for_the_job(plan, sc, n_job, bw_job)  # said in the job's GPUs and line rate


@attrs.frozen
class _IdealRatio:
    """The part of :func:`~scalemodel.min_compression`'s answer that a plan reads when a
    finite ratio reaches the target: ``ratio`` [-], feasible."""

    ratio: float
    feasible: bool = True


_SHARE_BUILT = True
"""Whether :func:`_ideal_compression` may solve on the plan's own scenario and take the
finite ratio alone (:func:`_ideal_scenario`); False: always the general path (the tests
compare the two)."""


def _ideal_compression(model, sc, n, bw, target, u, memory_args, built=None, **kw):
    """:func:`~scalemodel.min_compression`'s answer that the plan reads (its ratio,
    feasibility, binding when infeasible, and limit) for the job's ``n`` [GPUs] and ``bw``
    [bits/s] at ``target`` and utilization ``u`` [-]: the same scenario (``kw``) and
    solver, without what the plan does not read (its memory check, which the plan makes
    itself with ``memory_args`` = ``(gpu, loss, accounting)``, the binding of a feasible
    ratio and the job's terms). On a cluster with intervals, alternatives or a fitted
    efficiency, min_compression itself (its interval over the corners). ``built``: the
    plan's scenario as built (before MG-WFBP's planning), solved on when it is the one
    ``kw`` would build (:func:`_ideal_scenario`); a finite ratio is then all that is
    solved for (:func:`~scalemodel.solvers._corner_ratio`, the same operations)."""
    cl = sc.cluster
    if cl is not None and (cl.intervals or cl.alternatives or "efficiency" in cl.extra):
        import warnings

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            ideal = min_compression(model, bw, n=n, target=target, utilization=u, **kw)
        for w in said:  # the plan says what memory pressure does to its own answers
            if _PRESSURE_EFFECT not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return ideal
    isc = _ideal_scenario(built)
    if isc is None:
        isc = Scenario.build(model, codec_cost=0.0, **kw)  # as min_compression builds it
    n_dp, bw_dp = isc.data_parallel(n, bw)
    ideal = None
    if isc is built:  # the common answer, a finite ratio, alone
        ratio = _corner_ratio(isc, bw_dp, n_dp, target, u)
        if math.isfinite(ratio):
            ideal = _IdealRatio(ratio)
    if ideal is None:
        ideal = _min_compression(isc, bw_dp, n_dp, target, u, explain=False)
    if tuple(memory_args) != (None, "unfused", "zero"):  # min_compression's own check
        memory_check(isc, n_dp, None, "unfused", "zero")  # (its errors; else the plan's)
    return ideal


_PRESSURE_EFFECT = "leave that slowdown out"
"""The words of min_compression's memory-pressure warning (``solvers._pressure_unanswered``)
that the plan replaces with its own."""


def _ideal_scenario(built):
    """``built`` (the plan's scenario as :meth:`~scalemodel.model.Scenario.build` made
    it) when the ideal solve's build would make the same scenario: no codec cost, buckets
    that MG-WFBP does not plan per network (the solve builds with the planned policy) and
    no ignored settings (its build would warn of them again); else None."""
    if (not _SHARE_BUILT or built is None or built.codec_cost != 0.0 or built.needs_plan
            or built.ignored):
        return None
    return built


def _strategy(sc):
    """The scenario's sharding strategy, ``"none"`` without sharding [-]."""
    return "none" if sc.sharding is None else sc.sharding.strategy


def _rank_rows(rows, needed):
    """Sort ``rows`` in place: recommended first (``"none"`` first of all when no
    compression is ``needed``), fastest first (the gentlest among equals), then the others
    by scaling factor."""
    rows.sort(key=lambda r: (not r.recommended, not (needed and r.compressor == "none"),
                             -r.speedup if r.recommended else 0.0,
                             r.ratio if r.recommended else 0.0, -r.scaling_factor))


def _plan_message(rows, best, needed, where, sf_none, target, ideal, sharded):
    """The plan's answer in a sentence or two: no compression needed, the ``best`` row, or
    why no compressor reaches ``target`` [-] (``where``: the question in words;
    ``sf_none``: the uncompressed scaling factor [-]; ``ideal``: the
    :func:`~scalemodel.min_compression` answer; ``sharded``: whether the plan shards)."""
    if needed:
        msg = (f"no compression needed: {where} already scales {sf_none:.3f} >= {target:g}")
        worse = [r for r in rows if r.feasible and not r.recommended]
        if worse:
            msg += ("; " + ", ".join(f"{r.compressor} ({r.scaling_factor:.3f})"
                                     for r in worse)
                    + " reach the target too but scale no better than no compression: not "
                    "recommended")
    elif best is not None:
        others = [r.compressor for r in rows if r.recommended and r is not best]
        ideal_text = _ideal_text(ideal, sharded)
        msg = (f"{where} scales {sf_none:.3f} uncompressed; best: {best.compressor} "
               f"{best.setting_text() if best.setting_name else ''}".rstrip()
               + f" ({best.ratio:.3g}x, codec "
               f"{(best.encode_time + best.decode_time) * 1e3:.3g} ms) reaches "
               f"{best.scaling_factor:.3f}; {ideal_text}")
        if others:
            msg += "; also feasible: " + ", ".join(others)
    elif not ideal.feasible:
        top = max((r for r in rows if r.compressor != "none"), key=lambda r: r.scaling_factor,
                  default=None)
        msg = (f"no compressor reaches {target:g}: {where} is {ideal.binding}-bound; even "
               f"free, unlimited compression of the all-reduce reaches only "
               f"{below(ideal.max_scaling_factor, target)}")
        if top is not None and top.scaling_factor > sf_none:
            msg += f" (the best here: {top.compressor} {top.setting_text()}, " \
                   f"{top.scaling_factor:.3f})"
    else:
        why = "; ".join(f"{r.compressor}: {r.note}" for r in rows
                        if r.compressor != "none" and r.note
                        and not r.note.startswith("does not compose with"))
        msg = (f"no compressor reaches {target:g}: {where} scales {sf_none:.3f} "
               f"uncompressed and {_ideal_text(ideal, sharded)}, but "
               + (why or "none is strong or cheap enough"))
    return msg


def _message_caveats(msg, rows, needed, strategy, views, outside):
    """``msg`` with what qualifies it: that no compressor beats no compression (over the
    fit's interval with ``views``), which compressors do not compose with the sharding
    ``strategy``, and the ``outside`` calibration note (or ``""``) [-]."""
    shut = [r.compressor for r in rows if r.note.startswith("does not compose with")]
    tried = [r for r in rows if r.compressor != "none" and r.compressor not in shut]
    if not needed and tried and not any(r.beats_uncompressed for r in tried):
        msg = ("none of these beats no compression"
               + (" over the fit's interval" if views else "") + ": " + msg)
    if shut:
        msg += (f"; under sharding={strategy!r} only low-precision reduce-scatters compose: "
                f"{', '.join(shut)} do not (FSDP's hooks only change the reduce dtype)")
    if outside:
        msg += "; " + outside
    return msg


def _best_interval(model, best, sc, ns, bw, kw):
    """``((lo, hi), text)``: the ``best`` row's scaling factor over a fitted cluster's
    intervals and alternatives [-] (:func:`~scalemodel.intervals.answer_interval`;
    ``kw``: the options of :func:`compressed_scaling_factor`, the job's tensor- and
    pipeline-parallel ones among them; ``ns``: the data-parallel workers and the job's
    GPUs, ``bw`` the job's line rate [bits/s]) and what the message says of it;
    ``(None, "")`` without a best row or intervals."""
    n_dp, n = ns
    if best is None or sc.cluster is None or not (
            sc.cluster.intervals or sc.cluster.alternatives
            or discrepancy_factor(sc.cluster, n_dp) > 1.0):
        return None, ""
    from .intervals import answer_interval, discrepant  # over every alternative's corners

    # (a corner of a ring's view is its own view: the job's build keeps it)
    iv = discrepant(answer_interval(lambda c: compressed_scaling_factor(
        model, best.config, n, bw, cluster=c, **kw), sc.cluster, best.scaling_factor),
        sc.cluster, "scaling", n_dp, 1.0 if sc.sharding is None else None)
    best_interval = (float(iv.low), float(iv.high))
    text = (f"; over the fit's intervals {best.compressor} reaches "
            f"{best_interval[0]:.3f} to {best_interval[1]:.3f}")
    if iv.from_alternatives or iv.discrepancy:
        text += "; " + iv.describe(lambda v: f"{v:.3f}").split("; ", 1)[1]
    return best_interval, text


# --------------------------------------------------------------------------- curves


def compressed_scaling_factor(model, compressor, n, bw, *, utilization=1.0, cluster=None,
                              algorithm=None, fusion=None, alpha=None, gpus_per_node=None,
                              intra_bw=None, intra_alpha=None, ps_servers=None,
                              nics_per_node=None, sharding=None, implementation=None,
                              gpu=None, activation_checkpointing=None, offload=None,
                              shard_group=None, tp=1, pp=1, microbatches=None,
                              virtual_stages=1, sequence_parallel=False):
    """Scaling factor with a real compressor at its setting, eq. :eq:`compressed-bucket`.

    ``n`` and ``bw`` (and ``utilization``) may be arrays; they broadcast, with one
    envelope per distinct ``n``.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    compressor : str or Compressor
        A catalogue name or a compressor object at its setting [-].
    n : int or array_like of int
        Number of workers [workers].
    bw : float, str or array_like
        Line rate [bits/s].
    utilization : float or array_like
        Fraction of the line rate achieved, in (0, 1] [-].
    cluster, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha, ps_servers
        As in :func:`plan_compression` [-], [-], [-], [s], [workers], [bits/s], [s],
        [servers].
    nics_per_node
        As in :func:`plan_compression` [NICs].
    sharding : str or Sharding
        As in :func:`plan_compression`; a compressor that does not compose with the
        reduce-scatter raises :class:`~scalemodel.InvalidParameterError` [-].
    implementation : str or None
        As in :func:`plan_compression` [-].
    gpu : str, GPUSpec or None
        GPU whose codec costs are used (:mod:`scalemodel.codec_costs`: the measured H100
        table scaled by HBM bandwidth); None: the profile's GPU [-].
    activation_checkpointing, offload
        As in :func:`plan_compression` (the recompute and the offloaded optimizer step in
        the time, with and without the compressor) [-].
    shard_group : int or None
        As in :func:`plan_compression` [GPUs].
    tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`plan_compression`: ``n`` counts all GPUs, the compressor applies to
        the data-parallel all-reduce of ``n / (tp pp)`` replicas [GPUs], [stages],
        [micro-batches], [chunks], [-].

    Returns
    -------
    float or numpy.ndarray
        Scaling factor [-].
    """
    impl, explicit = _implementation(implementation)
    comp = _as_implemented(get_compressor(compressor), impl, explicit)
    n = check_count(n, "n")
    bw = parse_bandwidth(bw, "bw")
    u = check_fraction(utilization, "utilization")
    sc = _build(model, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha,
                ps_servers, cluster, nics_per_node, sharding, tp=tp, pp=pp,
                microbatches=microbatches, virtual_stages=virtual_stages,
                activation_checkpointing=activation_checkpointing, offload=offload,
                shard_group=shard_group, sequence_parallel=sequence_parallel)
    n, bw = sc.data_parallel(n, bw)  # scalemodel.parallel (unchanged without tp/pp)
    _fixed_buckets(sc)
    _check_composes(sc, comp)
    codec = _codec(sc, gpu, impl)
    u = effective_utilization(sc, bw, u)
    x = 1.0 / np.multiply(u, bw)
    nn = np.asarray(n)
    shape = np.broadcast_shapes(nn.shape, np.shape(x))
    values = np.unique(nn)
    if values.size == 1:  # one worker count: no masks over the grid
        out = np.broadcast_to(np.asarray(_sf(sc, _evaluate(sc, comp, int(values[0]), codec),
                                             x), dtype=float), shape)
        return float(out) if out.ndim == 0 else np.array(out)
    x = np.broadcast_to(x, shape)
    nn = np.broadcast_to(nn, shape)
    out = np.empty(shape)
    for nv in values:
        part = nn == nv
        out[part] = _sf(sc, _evaluate(sc, comp, int(nv), codec), x[part])
    return out


def _in_x(ev):
    r"""``(T, breaks, tail)`` of an evaluation's envelope as a function of the network's
    :math:`x = 1/(u B)`: :math:`T(x) = E(\max(k_1 x, k_2))` (its wire map, ``_x_eff``),
    its breakpoints in :math:`x` and its slope beyond the last one. Inside one node
    (:math:`k_1 = 0`) :math:`T` does not depend on :math:`x` at all."""
    env = ev.env
    k1, k2 = ev.xmap
    if k2 == 0.0:  # as _x_eff: no slower link, x itself
        k1 = 1.0
    br = env.breaks[(env.breaks > 0) & np.isfinite(env.breaks)]
    if k1 > 0:
        pts = np.concatenate(([k2 / k1] if k2 > 0 else [], br[br > k2] / k1))
        tail = k1 * float(env.slope[-1])
    else:
        pts, tail = np.empty(0), 0.0
    return (lambda x: env(np.maximum(k1 * np.asarray(x, float), k2))), pts, tail


def _difference(ev_a, ev_b):
    """``(x, d, tol, tail)``: the merged breakpoints of the two iteration times in
    :math:`x` (0 first), their difference there (``ev_a``'s minus ``ev_b``'s) [s], its
    rounding tolerance [s] and its slope beyond the last break [s/(s/bit)]."""
    fa, pa, ta = _in_x(ev_a)
    fb, pb, tb = _in_x(ev_b)
    pts = np.unique(np.concatenate(([0.0], pa, pb)))
    pts = pts[np.isfinite(pts)]
    return pts, fa(pts) - fb(pts), 1e-12 * np.abs(fb(pts)), ta - tb


def _crossing(ev_a, ev_b):
    r"""Where the iteration time of ``ev_a`` (with compression) drops below that of
    ``ev_b`` (without) for good, in the network's :math:`x = 1/(u B)`.

    Both are piecewise linear in :math:`x` (their envelopes at the slowest link's time
    per bit, :math:`\max(k_1 x, k_2)`, :func:`_in_x`; it was solved in that time per bit
    itself, which inside one node does not move with :math:`x`: a finite line rate came
    back for a compressor that never wins there); between their merged breakpoints the
    difference :math:`d(x)` is linear. Returns ``x*`` such that :math:`d < 0` for every
    :math:`x > x^*` (0.0: everywhere), or ``inf`` when :math:`d \ge 0` as
    :math:`x \to \infty`.
    """
    pts, d, tol, tail = _difference(ev_a, ev_b)
    if tail > 0 or (tail == 0 and d[-1] >= -tol[-1]):
        return math.inf
    lose = np.flatnonzero(d >= -tol)
    if lose.size == 0:
        return 0.0
    i = int(lose[-1])
    if i == len(pts) - 1:  # the root lies on the last ray, where d has slope tail < 0
        return float(pts[i] - d[i] / tail)
    x0, x1, d0, d1 = pts[i], pts[i + 1], d[i], d[i + 1]
    return float(x0 + (x1 - x0) * d0 / (d0 - d1))


def _crossing_fast(ev_a, ev_b):
    r"""For a compressor that loses on slow links (:func:`_crossing` ``inf``): ``x_f`` such
    that it wins (:math:`d < 0`) for every :math:`x < x_f`, where latency outweighs the
    bytes saved (an all-gather's :math:`n - 1` latencies against the ring's
    :math:`2(n-1)`); None when it does not win even on an unlimited link."""
    pts, d, tol, tail = _difference(ev_a, ev_b)
    lose = np.flatnonzero(d >= -tol)
    if lose.size and lose[0] == 0:
        return None
    if lose.size == 0:  # the root lies on the last ray, where d rises (tail > 0)
        return float(pts[-1] - d[-1] / tail) if tail > 0 else None
    i = int(lose[0])
    x0, x1, d0, d1 = pts[i - 1], pts[i], d[i - 1], d[i]
    return float(x0 + (x1 - x0) * d0 / (d0 - d1))


def breakeven_bandwidth(model, compressor, *, n=DEFAULT_N, utilization=1.0, cluster=None,
                        algorithm=None, fusion=None, alpha=None, gpus_per_node=None,
                        intra_bw=None, intra_alpha=None, ps_servers=None,
                        nics_per_node=None, sharding=None, implementation=None, gpu=None,
                        detail=False, activation_checkpointing=None, offload=None,
                        shard_group=None, tp=1, pp=1, microbatches=None, virtual_stages=1,
                        sequence_parallel=False):
    """Line rate below which ``compressor`` (at its setting) beats no compression.

    Exact: the iteration times with and without the compressor are piecewise linear in
    :math:`x = 1/(u B)`; their crossing is solved on the interval where it lies. When they
    cross more than once, the rate returned is the one below which the compressor wins at
    every line rate (the lowest crossing line rate above which it ever loses): with
    NCCL's per-size algorithm choice it can lose just above it and win again, by a
    little, at much faster links.

    **On a cluster with a ceiling** on the achieved bandwidth (a fitted transport limit),
    the crossing may lie above the ceiling: the model then says the compressor wins at
    every line rate, because no line rate achieves more than the ceiling. A ceiling fitted
    from runs at some line rates says nothing of faster links, so the answer instead lets
    the achieved bandwidth move with the line rate beyond it: by the cluster's measured
    utilization table when it has one (the table without the ceiling), else at the
    utilization the ceiling implies at the highest calibrated line rate (the runs'
    ``bw`` in the fit's provenance, the transport's measured rates). The answer then lies
    outside what the calibration measured, and ``detail=True`` says so
    (:class:`~scalemodel.planner.Breakeven`); with neither a table nor a calibrated line
    rate it stays ``inf`` and is marked outside.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    compressor : str or Compressor
        A catalogue name or a compressor object at its setting [-].
    n : int or array_like of int
        Number of workers; an array gives one line rate per entry [workers].
    utilization : float
        Fraction of the line rate achieved, in (0, 1] [-].
    cluster, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha, ps_servers
        As in :func:`plan_compression` [-], [-], [-], [s], [workers], [bits/s], [s],
        [servers].
    nics_per_node
        As in :func:`plan_compression` [NICs].
    sharding : str or Sharding
        As in :func:`plan_compression`; a compressor that does not compose with the
        reduce-scatter raises :class:`~scalemodel.InvalidParameterError` [-].
    implementation : str or None
        As in :func:`plan_compression` [-].
    gpu : str, GPUSpec or None
        GPU whose codec costs are used (:mod:`scalemodel.codec_costs`: the measured H100
        table scaled by HBM bandwidth); None: the profile's GPU [-].
    detail : bool
        Return :class:`~scalemodel.planner.Breakeven` objects (a list for an array ``n``)
        saying how the answer was reached and whether it lies within the calibrated line
        rates [-].
    activation_checkpointing, offload
        As in :func:`plan_compression`: the break-even rate of the job with the
        recompute and the offloaded optimizer step in its time [-].
    shard_group : int or None
        As in :func:`plan_compression`; with an array ``n`` it must divide every entry
        [GPUs].
    tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`plan_compression`: ``n`` counts all GPUs, the compressor applies to
        the data-parallel all-reduce of ``n / (tp pp)`` replicas, and the answer is a
        NIC's line rate (one data-parallel ring gets ``bw * bw_scale`` of it,
        :mod:`scalemodel.parallel`) [GPUs], [stages], [micro-batches], [chunks], [-].

    Returns
    -------
    float or numpy.ndarray
        Break-even line rate [bits/s]: ``0.0`` when the compressor wins on no slow link
        (it may still win on fast ones, where it saves latency: ``detail=True`` says
        above which rate, :class:`~scalemodel.planner.Breakeven`'s ``wins_above``), ``inf``
        when it wins at every line rate.

    Examples
    --------
    >>> import scalemodel
    >>> bw = scalemodel.breakeven_bandwidth("resnet50", "fp16", n=64)
    >>> bw > 400e9  # casting to fp16 pays off up to beyond 400 Gbit/s
    True
    """
    if not isinstance(detail, (bool, np.bool_)):  # (nan, b'8', '' were taken as a truth)
        raise ParameterTypeError("detail", detail, "True or False")
    impl, explicit = _implementation(implementation)
    comp = _as_implemented(get_compressor(compressor), impl, explicit)
    n = check_count(n, "n")
    u = _scalar("utilization", check_fraction(utilization, "utilization"))
    job = dict(activation_checkpointing=activation_checkpointing, offload=offload,
               shard_group=shard_group,  # scalemodel.checkpointing, .offload, .sharding
               sequence_parallel=sequence_parallel)  # scalemodel.parallel
    sc = _build(model, algorithm, fusion, alpha, gpus_per_node, intra_bw, intra_alpha,
                ps_servers, cluster, nics_per_node, sharding, tp=tp, pp=pp,
                microbatches=microbatches, virtual_stages=virtual_stages, **job)
    replicas, scale = sc.data_parallel(n, 1.0)  # scalemodel.parallel (1, 1: plain DDP)
    _fixed_buckets(sc)
    _check_composes(sc, comp)
    codec = _codec(sc, gpu, impl)
    none = get_compressor("none")
    calibrated = _calibrated_rates(sc.cluster)
    out = []
    for nv, dv in zip(np.atleast_1d(n).ravel(), np.atleast_1d(replicas).ravel()):
        nv = int(nv)
        ev_c, ev_0 = _evaluate(sc, comp, int(dv), codec), _evaluate(sc, none, int(dv), codec)
        x = _crossing(ev_c, ev_0)
        basis, above = "model", None
        if x <= 0:
            bw = math.inf
        elif math.isinf(x):
            bw = 0.0
            xf = _crossing_fast(ev_c, ev_0) if detail else None
            if xf is not None and xf > 0:  # it wins on fast links only
                above = float(_line_rate_for(sc, 1.0 / (u * xf))) / float(scale)
        else:
            needed = 1.0 / (u * x)  # one ring's achieved bandwidth (its cluster's view)
            bw = float(_line_rate_for(sc, needed))
            if math.isinf(bw):  # above the ceiling: let the achieved bandwidth move
                bw, basis = _beyond_ceiling(sc.cluster, needed, calibrated)
            bw = bw / float(scale)  # a NIC's line rate, not one ring's
        if detail:
            res = _breakeven_result(bw, nv, calibrated, basis, sc.cluster, above)
            if _interval_clusters(sc.cluster):  # the same answer over the fit's intervals
                from .intervals import answer_interval

                iv = answer_interval(lambda c, nv=nv: breakeven_bandwidth(
                    model, comp, n=nv, utilization=u, cluster=c, algorithm=algorithm,
                    fusion=fusion, alpha=alpha, gpus_per_node=gpus_per_node,
                    intra_bw=intra_bw, intra_alpha=intra_alpha, ps_servers=ps_servers,
                    nics_per_node=nics_per_node, sharding=sharding, gpu=gpu,
                    implementation=implementation, tp=tp, pp=pp,
                    microbatches=microbatches, virtual_stages=virtual_stages, **job),
                    sc.cluster, bw)
                res = _with_interval(res, iv.low, iv.high)
            bw = res
        out.append(bw)
    if np.ndim(n) == 0:
        return out[0]
    if detail:
        return out
    return np.asarray(out).reshape(np.shape(n))


@attrs.frozen
class Breakeven:
    """A break-even line rate and how far the calibration vouches for it
    (:func:`~scalemodel.breakeven_bandwidth` with ``detail=True``).

    Attributes
    ----------
    bw : float
        Break-even line rate [bits/s] (``0.0``: never wins; ``inf``: wins at every line
        rate).
    n : int
        Workers [workers].
    basis : str
        ``"model"`` (the crossing lies below the cluster's ceiling, or there is none),
        ``"table"`` (above the ceiling: the achieved bandwidth follows the utilization
        table), ``"utilization"`` (above it: the utilization at the highest calibrated
        line rate holds beyond) or ``"ceiling"`` (above it, with nothing to extrapolate
        by: ``inf``).
    calibrated : tuple of float or None
        ``(lo, hi)`` line rates the calibration measured (runs and transport) [bits/s];
        None when the cluster does not say (or there is no cluster).
    within : bool
        Whether the answer is what the calibration can tell: basis ``"model"`` and, when
        the calibrated line rates are known, inside them (0 and inf count as inside when
        the model reaches them without the ceiling), and so is its interval over a fitted
        cluster's intervals and alternatives.
    message : str
        The answer for people, with the range the calibration can tell.
    interval : tuple or None
        ``(lo, hi)`` break-even line rate over a fitted cluster's intervals and
        alternatives (:func:`~scalemodel.intervals.answer_interval`; an end ``None`` is
        unbounded); None without them [bits/s].
    wins_above : float or None
        With ``bw`` 0.0 (it wins on no slow link): the line rate above which it wins,
        where the latency it saves outweighs the bytes (an all-gather compressor's
        :math:`n - 1` latencies against the ring's :math:`2(n-1)`); None when it wins
        there neither [bits/s].
    """

    bw: float
    n: int
    basis: str
    calibrated: tuple | None
    within: bool
    message: str
    interval: tuple | None = None
    wins_above: float | None = None


def _outside_calibration(cluster, bw) -> str:
    """A note when ``bw`` [bits/s] (a NIC's line rate) lies above a cluster's calibrated
    line rates while its fitted ceiling binds there, else ``""``. A tensor-parallel ring's
    view of the cluster (:meth:`~scalemodel.ClusterProfile.ring_view`) is read at the
    ring's rate and spoken of in the NIC's."""
    if cluster is None or cluster.ceiling is None or \
            not cluster.ceiling_binds(bw * cluster.ring_share):
        return ""
    rates = _calibrated_rates(cluster)
    if rates is None or bw <= rates[1] * (1 + 1e-9):
        return ""
    ceiling = cluster.ceiling / cluster.ring_share
    return (f"at {format_bandwidth(bw)} the fitted ceiling ({format_bandwidth(ceiling)} "
            f"achieved) holds the bandwidth as measured up to {format_bandwidth(rates[1])}: "
            "whether a faster link achieves more is outside what this calibration can tell")


def _calibrated_rates(cluster):
    """``(lo, hi)`` line rates [bits/s] of a NIC that a cluster's calibration measured,
    or None (a ring's view, :meth:`~scalemodel.ClusterProfile.ring_view`, gives the
    NIC's)."""
    if cluster is None:
        return None
    rates = []
    prov = cluster.provenance if isinstance(cluster.provenance, dict) else {}
    for run in prov.get("runs", ()) or ():
        if isinstance(run, dict) and isinstance(run.get("bw"), (int, float)):
            rates.append(float(run["bw"]))
    if cluster.table_line_rate is not None:
        rates += [float(r) / cluster.ring_share for r in np.atleast_1d(cluster.table_line_rate)]
    for f in (cluster.extra or {}).get("fits", ()) or ():
        if isinstance(f, dict) and isinstance(f.get("line_rate"), (int, float)):
            rates.append(float(f["line_rate"]))
    if isinstance(prov.get("line_rate"), (int, float)):
        rates.append(float(prov["line_rate"]))
    rates = [r for r in rates if math.isfinite(r) and r > 0]
    return (min(rates), max(rates)) if rates else None


def _beyond_ceiling(cluster, needed, calibrated):
    """The line rate achieving ``needed`` [bits/s] when the ceiling is read as what the
    calibration saw, not as a limit of faster links: ``(line rate, basis)``, in the
    cluster's view (a ring's, :meth:`~scalemodel.ClusterProfile.ring_view`: its rate)."""
    from .solvers import _NUDGE

    if cluster.table_line_rate is not None:
        free = attrs.evolve(cluster, ceiling=None)
        return float(free.line_rate_for(needed)) * _NUDGE, "table"
    if calibrated is None:
        return math.inf, "ceiling"
    hi = calibrated[1] * cluster.ring_share  # the NIC's highest rate, as the ring sees it
    u_cal = float(cluster.achieved_bandwidth(hi)) / hi
    return needed / u_cal * _NUDGE, "utilization"


def _with_interval(res, lo, hi):
    """A break-even answer with its interval over the fit, said in its message; not
    ``within`` the calibration when an end (a finite one, or an unbounded high end)
    leaves the calibrated line rates (intervals audit: 'wins below 15.25 Gbit/s',
    within, where the fit's corners reach 168.6 Gbit/s on a cluster calibrated to 100)."""
    res = attrs.evolve(res, interval=(lo, hi))
    if lo == hi == res.bw or (lo is None and hi is None):
        return res
    text = (f"; over the fit's intervals {'unbounded' if lo is None else format_bandwidth(lo)}"
            f" to {'unbounded' if hi is None else format_bandwidth(hi)}")
    cal = res.calibrated
    outside = cal is not None and res.within and res.bw not in (0.0, math.inf) and any(
        v is None or (0.0 < v < math.inf and not cal[0] * (1 - 1e-9) <= v
                      <= cal[1] * (1 + 1e-9)) for v in (lo, hi))
    if outside:
        text += (f", beyond what this calibration can tell (it measured "
                 f"{format_bandwidth(cal[0])} to {format_bandwidth(cal[1])})")
    return attrs.evolve(res, message=res.message + text, within=res.within and not outside)


def _breakeven_result(bw, n, calibrated, basis, cluster, above=None):
    text = ("never" if bw == 0 else "at every line rate" if math.isinf(bw)
            else f"below {format_bandwidth(bw)}")
    if bw == 0 and above is not None:
        text = (f"on no slow link, only above {format_bandwidth(above)} (where latency "
                "outweighs the bytes it saves)" if math.isfinite(above) else "never")
    span = ("" if calibrated is None else
            f"the calibration measured {format_bandwidth(calibrated[0])}"
            + ("" if calibrated[0] == calibrated[1] else f" to {format_bandwidth(calibrated[1])}"))
    if basis == "model":
        inside = calibrated is None or bw in (0.0, math.inf) or \
            calibrated[0] * (1 - 1e-9) <= bw <= calibrated[1] * (1 + 1e-9)
        msg = f"wins {text}" + ("" if inside or not span else
                                f"; outside what this calibration can tell ({span})")
        return Breakeven(bw, n, basis, calibrated, inside, msg,
                         wins_above=above if above is not None and math.isfinite(above)
                         else None)
    ceiling = format_bandwidth(cluster.ceiling / cluster.ring_share)  # a NIC's
    if basis == "ceiling":
        msg = (f"wins at every line rate up to the ceiling ({ceiling} achieved); whether it "
               "stops winning on faster links is outside what this calibration can tell "
               "(it records no line rate to extrapolate from)")
    else:
        how = ("the utilization table" if basis == "table" else
               f"the utilization at {format_bandwidth(calibrated[1])} held beyond it")
        msg = (f"wins {text} if the achieved bandwidth grows past the fitted ceiling "
               f"({ceiling}) by {how}; that is outside what this calibration can tell"
               + (f" ({span}; up to there it wins)" if span else ""))
    return Breakeven(bw, n, basis, calibrated, False, msg)

