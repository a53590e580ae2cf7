r"""Scaling factor and iteration time of data-parallel training.

The scaling factor of :math:`n` workers is the single-worker iteration time over the
:math:`n`-worker iteration time at a fixed per-worker batch (weak scaling):

.. math::
   :label: scaling-factor

   \mathrm{SF}(n) = \frac{T_1}{T_n}
   = \frac{\text{throughput}(n)}{n \cdot \text{throughput}(1)} ,
   \qquad T_1 = T_f + T_b + T_u ,

with :math:`T_n` from equation :eq:`iteration`. Zhang et al. (arXiv:2006.10103) define it as
:math:`t_\text{iter} / (t_\text{iter} + \text{overhead})` where the overhead is how far the
last all-reduce ends past the end of backward; since :math:`T_n = T_1 + \max(0, F_K - T_b)`
the two are the same number.

On a real cluster (:mod:`scalemodel.cluster`) forward and backward run :math:`\sigma_n`
times slower when :math:`n > 1` (the compute slowdown :math:`\sigma`, times the wait for
the slowest of :math:`n` workers, eq. :eq:`straggler`), every collective pays a fixed cost
:math:`c_0` on the channel and the iteration a fixed cost :math:`t_s` after its last
collective, the framework pays :math:`c_b` per bucket on the compute path (bucket
:math:`k` is ready at :math:`R'_k = \sigma_n R_k + k\,c_b`, backward ends at
:math:`T'_b = \sigma_n T_b + K c_b`) and the data-parallel wrapper :math:`t_w` once per
iteration:

.. math::
   :label: iteration-cluster

   T_n(x) = \sigma_n T_f + t_w + \max\Big(T'_b,\;
            \max_j \big(R'_j + A_j + (K - j + 1)\,c_0 + t_s + B_j\,x_\text{eff}\big)
            \Big) + T_u ,

.. math::
   :label: straggler

   \sigma_n = \sigma\,(1 + s\,e_n), \qquad
   e_n = \Phi^{-1}\Big(\frac{n - 0.375}{n + 0.25}\Big),

with :math:`s` the cluster's straggler spread and :math:`e_n` Blom's approximation of the
expected maximum of :math:`n` standard normals (:func:`expected_max_normal`; :math:`e_1 =
0`). None of these terms applies to one worker; a single worker *with* the wrapper takes
:math:`T_1 + t_w + K c_b` (:meth:`~scalemodel.Scenario.wrapped_single_worker_time`). With
gradient accumulation the micro-batches before the last run :math:`\sigma_n (T_f + T_b)`
each without buckets, :math:`t_w` is paid once per optimizer step (under sharding
:mod:`scalemodel.sharding` applies the same terms, :math:`c_b` per reduce-scatter). The
result is still the upper envelope of :math:`K + 1` lines in :math:`x_\text{eff}`, where
:math:`x_\text{eff} = \max(x,\; \rho / (r B_\text{intra}))` is the time per network bit of
the slowest link (eq. :eq:`wire-max`; :math:`\rho` is the ratio of intra-node to NIC bits,
the same for every bucket of a pipelined collective), or :math:`1/(r B_\text{intra})` with
the intra-node bits as slopes when the run fits in one node.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import warnings
import weakref
from collections import OrderedDict

import attrs
import numpy as np

from .collectives import CollectiveOptions, collective_cost, resolve_algorithm
from .cluster import ClusterProfile, load_cluster
from .exceptions import InvalidParameterError, ModelWarning, ParameterTypeError
from .fusion import MGWFBP, PLANNED_MGWFBP, Buckets, DDPBuckets, resolve_fusion
from .overlap import (UpperEnvelope, _envelopes, _lines_shared, _lines_stacked, _with_fixed,
                      overlap_lines)
from .sharding import (_group_layout, resolve_sharding, resolve_wrap, sharded_schedule,
                       unit_buckets, zero3_envelopes)
from .checkpointing import with_recompute
from .offload import (_profile_gpu, canonical_offload, host_ranks, recorded_offload,
                      with_offload)
from .parallel import (SEQUENCE_PARALLEL_IGNORED, check_pipeline_layers,
                       check_sequence_parallel, dp_options,
                       model_parallel_profile, resolve_model_parallel)
from .profiles import WorkloadProfile, load_profile
from .efficiency import (at_fitted_efficiency, carried_note, fitted_efficiency,
                         gpu_topology, recompute_share)
from .hostcosts import host_delays, tensors_per_bucket
from .topology import resolve_topology
from .units import (broadcast_shape, check_count, check_fraction, check_nonnegative,
                    check_ratio, parse_bandwidth, parse_duration)

__all__ = ["scaling_factor", "iteration_time", "IterationTime", "Scenario", "BINDINGS",
           "expected_max_normal"]

BINDINGS = ("compute", "slowdown", "latency", "bandwidth", "ceiling", "intra-node",
            "overhead", "fixed", "offload")
"""What can bind an iteration: hidden communication (``compute``; ``slowdown`` when the
calibrated compute slowdown is then the whole loss), or the largest part of what is on the
critical path: the compute ``slowdown``, message ``latency``, wire time (``bandwidth``;
``ceiling`` when the transport's ceiling, not the line rate, limits it; ``intra-node`` when
the intra-node link is the slowest), ``overhead`` (reductions, encode/decode, serial
intra-node copies) or ``fixed`` (the cluster's per-collective and per-iteration costs, and
the framework's work per bucket and per iteration) or ``offload`` (what sharing a host's
CPU adds to the offloaded optimizer step on ``n`` workers, eq. :eq:`offload-host`). The
critical path's parts name the framework terms ``bucket_overhead``,
``iteration_overhead`` (both reported as ``fixed``) and ``straggler`` (the wait for the
slowest worker, reported as ``slowdown``)."""

_PART_BINDING = {"straggler": "slowdown", "bucket_overhead": "fixed",
                 "iteration_overhead": "fixed", "wrapper_host": "fixed"}
"""The binding word of each framework part of the critical path."""


def expected_max_normal(n):
    r"""Blom's approximation of the expected maximum of ``n`` standard normals,
    :math:`e_n = \Phi^{-1}((n - 0.375)/(n + 0.25))` (eq. :eq:`straggler`); 0 for one.

    G. Blom, *Statistical Estimates and Transformed Beta-Variables*, Wiley 1958: 4.5 %
    above the exact expectation at n = 2 (0.589 against :math:`1/\sqrt{\pi}`), 1.4 %
    at 5, within 0.6 % from 10 to 1000 (exact values: H. L. Harter, Biometrika 48, 1961).

    Parameters
    ----------
    n : int or array_like of int
        Workers, >= 1 [workers].

    Returns
    -------
    float or numpy.ndarray
        :math:`e_n` [-].

    Examples
    --------
    >>> from scalemodel.model import expected_max_normal
    >>> [round(float(expected_max_normal(k)), 3) for k in (1, 2, 8, 1024)]
    [0.0, 0.589, 1.434, 3.234]
    """
    from scipy.special import ndtri

    n = np.asarray(n, dtype=float)
    e = ndtri((n - 0.375) / (n + 0.25))
    e = np.where(n <= 1, 0.0, e)
    return float(e) if e.ndim == 0 else e


_BLOM: dict = {}


def _blom(n: int) -> float:
    """:func:`expected_max_normal` of one worker count, kept."""
    e = _BLOM.get(n)
    if e is None:
        e = _BLOM[n] = expected_max_normal(n) if n > 1 else 0.0
    return e


SCENARIO_CACHE_SIZE = 64
"""How many recent scenarios :meth:`~scalemodel.Scenario.build` keeps [-]."""

_SCENARIOS: "OrderedDict" = OrderedDict()

_COSTS: "OrderedDict" = OrderedDict()  # collective costs shared by scenarios (corners)

_LINES: "OrderedDict" = OrderedDict()  # lines without fixed costs, shared likewise

_SIBLINGS: "OrderedDict" = OrderedDict()  # scenarios whose clusters differ in numbers only

_SCHEDULES: "OrderedDict" = OrderedDict()  # sharded schedules of equal inputs (corners)

_ENVELOPES: "OrderedDict" = OrderedDict()  # their envelopes alone (Scenario.corner_envelope)

_HEADS: dict = {}  # the settings part of those keys, each a number (Scenario._schedule_head)
_HEAD_IDS = itertools.count()  # (never reused: a key kept past a clear names no new head)


_FLOATS = (float, np.float64)


_EPS = float(np.finfo(float).eps)

_ONE_REPLICA_ULPS = 8
"""How close (in units of the last place) a time of one replica must be to the profile's
single-worker time to be taken as it [-]: one replica runs exactly the single worker's
iteration, which the lines sum in another order (the forward, the accumulated
micro-batches and the backward apart), so it came out one or two units off and a scaling
factor of 0.9999999999999999 or 1.0000000000000002."""


def _one_replica(out, one, t1):
    """Set the times ``out`` [s] of one replica (mask ``one``) within
    :data:`_ONE_REPLICA_ULPS` of the single-worker time ``t1`` [s] to ``t1``."""
    near = one & (np.abs(out - t1) <= _ONE_REPLICA_ULPS * _EPS * np.abs(out))
    out[near] = t1


def _keep_envelope(sk, sc, got):
    """Keep ``got`` (:func:`~scalemodel.sharding.zero3_envelope`'s answer) for the
    schedule key ``sk`` of scenario ``sc`` in :data:`_ENVELOPES` [-]."""
    _ENVELOPES[sk] = (sc.profile, sc.fusion, got)
    while len(_ENVELOPES) > SCENARIO_CACHE_SIZE:
        _ENVELOPES.popitem(last=False)


def _build_key(cluster):
    """What :meth:`Scenario._build` reads from a cluster: clusters that agree on it (the
    corners of a fitted cluster's intervals: the same object but for its numeric terms)
    build the same scenario but for the cluster it keeps, whose terms the scenario reads
    when it answers. ``extra`` (the fitted efficiency) and ``provenance`` by identity,
    which the corners share; ``fit_settings`` (texts) by value [-]."""
    return (id(cluster.extra), id(cluster.provenance),
            tuple(sorted(cluster.fit_settings.items())),
            cluster.alpha, cluster.topology, id(cluster.reduction), cluster.overlap)


def _cost_key(algorithm, nbytes, n, reduction, options):
    """The key of :data:`_COSTS` for these buckets, or None when it cannot be hashed."""
    try:
        key = (algorithm, int(n), nbytes.tobytes(), id(reduction), options)
        hash(key)
    except (TypeError, AttributeError):
        return None
    return key


def _shared_cost(algorithm, nbytes, n, reduction, options):
    """:func:`~scalemodel.collectives.collective_cost` of these buckets, shared by the
    scenarios that differ only in what the costs do not depend on (the corners of a
    fitted cluster's intervals and its alternatives: ceiling, utilization, fixed costs)."""
    key = _cost_key(algorithm, nbytes, n, reduction, options)
    if key is None:
        return collective_cost(algorithm, nbytes, n, reduction=reduction, options=options)
    hit = _COSTS.get(key)
    if hit is not None and hit[0] is reduction:
        _COSTS.move_to_end(key)
        return hit[1]
    cost = collective_cost(algorithm, nbytes, n, reduction=reduction, options=options)
    _COSTS[key] = (reduction, cost)
    while len(_COSTS) > SCENARIO_CACHE_SIZE:
        _COSTS.popitem(last=False)
    return cost

_BUCKETS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""Buckets of a profile (a key while it lives) by policy and compute slowdown."""


def clear_caches(*, profiles=False):
    """Forget every question asked so far: the cached scenarios (with their lines and
    schedules) and the validated arguments (topologies, collective options, line rates
    written as text, per-byte ring costs, NCCL's checked setups). With
    ``profiles=True`` also what was derived from loaded profiles (buckets, shard units,
    configs) and the loaded built-in profiles themselves. Answers do not change; the next
    question pays for everything again (the benchmarks use this to time a first
    question).

    Parameters
    ----------
    profiles : bool
        Also forget the loaded profiles and what was derived from them [-].
    """
    from . import (checkpointing, collectives, nccl, profiles as profiles_mod, sharding,
                   topology, units)
    from .memory import _CONFIGS, _config_cached  # (the package's "memory" is a function)

    _SCENARIOS.clear()
    _SIBLINGS.clear()
    _COSTS.clear()
    _LINES.clear()
    _SCHEDULES.clear()
    _ENVELOPES.clear()
    _HEADS.clear()
    sharding._COMM.clear()
    nccl._SETUPS.clear()
    for fn in (topology._evolved, collectives._options_from, collectives._options_evolved,
               sharding._ring_half_per_byte, sharding._ring_per_byte,
               units._parse_bandwidth_string, _config_cached, nccl._tree_threshold_24):
        fn.cache_clear()
    if profiles:
        from .intervals import _BYTES_TEXT

        _BYTES_TEXT.clear()
        _BUCKETS.clear()
        sharding._UNITS_CACHE.clear()
        checkpointing._RECOMPUTED.clear()
        _CONFIGS.clear()
        profiles_mod._CACHE.clear()


def _cache_key(profile, cluster, kw):
    """A hashable key of a build's arguments, or None when they cannot be cached (a
    cluster given as a file, an unhashable value). ``kw`` comes in :meth:`Scenario.build`'s
    one order of names, so its items need no sorting."""
    if cluster is not None and not isinstance(cluster, ClusterProfile):
        return None
    try:  # with each value's type: True == 1 == 1.0 hash alike, but only 1 is a valid tp
        key = (id(profile), id(cluster), (tuple(kw.items()), tuple(map(type, kw.values()))))
        hash(key)
    except TypeError:
        return None
    return key


def _host_gpus(topology, profile, offload, tp=1):
    """GPUs that share a host's CPU optimizer with offload: the job's ``gpus_per_node``,
    else the usual server of the profile's GPU (as :func:`scalemodel.memory` counts a
    node's host memory), else the ``tp`` GPUs of a tensor-parallel group, which a node
    holds [GPUs]."""
    g = getattr(topology, "gpus_per_node", None)
    if g is None and canonical_offload(offload) != "none":
        try:
            g = _profile_gpu(profile).gpus_per_server
        except InvalidParameterError:  # (with_offload names the unknown GPU)
            g = None
    return int(g or tp)


def _hybrid_node(topology, profile, mp):
    """The topology of a ``hybrid_shard`` job with its node's GPUs: ``gpus_per_node``
    as given, else the usual server of the profile's built-in GPU (as
    :func:`scalemodel.memory` takes it), else
    :data:`~scalemodel.topology.HIERARCHICAL_GPUS_PER_NODE` (a measured profile of a
    device that is not built in).

    Raises
    ------
    InvalidParameterError
        A built-in GPU without a usual server and no ``gpus_per_node``; a node of one
        GPU, which has nothing to shard over.
    """
    import attrs

    from .efficiency import gpu_name_of
    from .hardware import get_gpu
    from .topology import HIERARCHICAL_GPUS_PER_NODE

    g = topology.gpus_per_node
    if g is None:
        name = gpu_name_of(profile)
        try:
            g = HIERARCHICAL_GPUS_PER_NODE if name is None else get_gpu(name).gpus_per_server
        except (InvalidParameterError, ParameterTypeError):  # a GPU that is not built in
            g = HIERARCHICAL_GPUS_PER_NODE
        if g is None:
            raise InvalidParameterError(
                "gpus_per_node", None, f"hybrid_shard shards within a node, and the {name} "
                "has no usual server recorded", "Pass gpus_per_node=")
        topology = attrs.evolve(topology, gpus_per_node=int(g))
    if mp.tp == 1 and g < 2:  # (with tp, _check_model_parallel_scope says it)
        raise InvalidParameterError(
            "gpus_per_node", g, "hybrid_shard shards over the GPUs of a node, so it needs "
            "at least 2 of them", "Use sharding='none' to replicate, or a larger "
            "gpus_per_node")
    return topology


def _replica_host_sharing(profile, mp):
    """One replica of a tp x pp job with its offloaded step on shared hosts: its
    ``tp pp`` GPUs run their CPU steps at once, :math:`h_1` of eq. :eq:`offload-host`
    (the profile is unchanged without offload) [-]."""
    c, host = recorded_offload(profile)
    h1 = int(host_ranks(mp.tp * mp.pp, host)) if c else 1
    if h1 == 1:
        return profile
    from .checkpointing import evolve_checked

    return evolve_checked(profile, update_time=profile.update_time + c * (h1 - 1))


def _scalar_float(value, name):
    if value is None:
        return None
    v = parse_duration(value, name)
    if not isinstance(v, float):
        raise ParameterTypeError(name, value, "a single number")
    return v


def _codec_cost(value, profile):
    """``codec_cost`` [s/byte] checked: encoding one iteration's gradients must take less
    than a day (``profiles.MAX_TIME``), else the answers would be 0 as if computed."""
    from .profiles import MAX_TIME

    c = check_nonnegative(value, "codec_cost")
    if np.ndim(c):
        raise ParameterTypeError("codec_cost", value, "a single number of seconds per byte")
    c = float(c)
    if c == 0.0 and isinstance(profile, WorkloadProfile):  # no encoding time: its gradient
        return c  # bytes are finite (at most MAX_GRADIENT_BYTES), 0 x them is within a day
    total = c * profile.total_bytes
    if not total <= MAX_TIME:
        raise InvalidParameterError(
            "codec_cost", value, f"makes encoding one iteration's {profile.total_bytes:.3g} "
            f"gradient bytes take {total:.3g} s, more than a day",
            "It is seconds per gradient byte: a GPU codec costs about 1e-12 to 1e-10 s/byte")
    return c


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_model(message):
    """Issue a :class:`~scalemodel.exceptions.ModelWarning` attributed to the first caller
    outside scalemodel (so that it points at the user's line) [-].

    Parameters
    ----------
    message : str
        What is ignored or not modelled, and why [-].
    """
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, ModelWarning, stacklevel=level)


_TOPOLOGY_FREE = ("halving-doubling", "ps")  # count every worker on its own link
_USE_FLAT_NICS = ("hierarchical", "nccl")  # nics_per_node without gpus_per_node


def ignored_settings(given, *, algorithm, flat, sharded, tp=1) -> tuple:
    """The settings given (not None) that the model does not use, with why [-].

    Parameters
    ----------
    given : dict
        ``ps_servers``, ``gpus_per_node``, ``nics_per_node``, ``intra_bw``,
        ``intra_alpha`` as the caller passed them (None: not given) [-].
    algorithm : str
        The resolved collective algorithm [-].
    flat : bool
        Whether the resolved topology (the cluster's unless given) has no
        ``gpus_per_node`` [-].
    sharded : bool
        Sharded data parallelism (its collectives use the topology their own way: without
        nodes, ``nics_per_node`` and, at ``tp`` 1, ``intra_bw`` and ``intra_alpha`` have no
        effect; the algorithm is not judged) [-].
    tp : int
        Tensor-parallel GPUs (their collectives use ``intra_bw`` and ``intra_alpha``)
        [GPUs].

    Returns
    -------
    tuple of (str, object, str)
        ``(parameter, value, why)`` for each ignored setting.
    """
    out = []
    g = {k: v for k, v in given.items() if v is not None}
    if "ps_servers" in g and algorithm != "ps":
        out.append(("ps_servers", g["ps_servers"], f"algorithm={algorithm!r} has no "
                    "parameter servers; only algorithm='ps' uses them"))
    if sharded:  # zero1/2/3 without nodes: every GPU on its own link (hybrid has nodes)
        if flat:
            keys = ("nics_per_node",) + (("intra_bw", "intra_alpha") if tp == 1 else ())
            out += [(k, g[k], "without gpus_per_node every GPU of the shard rings has its "
                     "own link at bw, with no intra-node traffic: give gpus_per_node for "
                     "nodes") for k in keys if k in g]
        return tuple(out)
    topo = ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha")
    if algorithm in _TOPOLOGY_FREE and tp == 1:
        for k in topo:
            if k in g:
                out.append((k, g[k], f"algorithm={algorithm!r} counts every worker's "
                            "traffic on its own link: the topology is not used"))
        return tuple(out)
    if not flat:
        return tuple(out)
    uses_flat_nics = algorithm.startswith(_USE_FLAT_NICS)
    if "nics_per_node" in g and not uses_flat_nics:
        out.append(("nics_per_node", g["nics_per_node"], "without gpus_per_node every "
                    f"worker has its own link at bw (algorithm={algorithm!r}): give "
                    "gpus_per_node for nodes whose GPUs share their NICs"))
    if algorithm != "hierarchical" and tp == 1:
        for k in ("intra_bw", "intra_alpha"):
            if k in g:
                out.append((k, g[k], "without gpus_per_node (and with tp=1) no traffic "
                            f"crosses an intra-node link (algorithm={algorithm!r}); give "
                            "gpus_per_node, or algorithm='hierarchical'"))
    return tuple(out)


def warn_unused_codec_cost(codec_cost, compression):
    """Warn (:class:`~scalemodel.exceptions.ModelWarning`) when a ``codec_cost`` is given
    but no compression ratio exceeds 1: it is paid only when compressing [-].

    Parameters
    ----------
    codec_cost : float
        Encode plus decode time per gradient byte, as given [s/byte].
    compression : float or ndarray
        The compression ratios asked [-].
    """
    try:
        cost = float(codec_cost)
    except (TypeError, ValueError):
        return  # Scenario.build names the bad value
    if cost > 0 and np.all(np.asarray(compression) <= 1.0):
        warn_model(f"codec_cost={codec_cost!r} has no effect: it is paid only when the "
                   "compression ratio exceeds 1, and compression=1 here")


def _on_cluster(profile, cluster, mp, shard, activation_checkpointing):
    """The profile as the fitted cluster runs it: its reduction, the efficiency fitted for
    its GPU (a FLOP-derived profile; its interval by the recompute the job will have) and
    the cluster's overlap efficiency (eq. overlap-efficiency of :mod:`scalemodel.cluster`)."""
    if cluster.reduction is not None:
        profile = attrs.evolve(profile, reduction=cluster.reduction)
    if "efficiency" in cluster.extra:
        share = _recompute_share_of(profile, activation_checkpointing)
        basis = recompute_share(profile) if share is None else share
        profile = at_fitted_efficiency(profile, cluster, tp=1 if mp is None else mp.tp,
                                       recompute=share)
        # the job's share as the fit's runs were measured (their profiles before the
        # rescale): the notes compare this one, not the rescaled profile's (the rescale
        # keeps the memory-bound score passes, so its shares can differ a little)
        profile = attrs.evolve(profile, provenance=dict(
            profile.provenance, recompute_share_fit_basis=basis))
    if cluster.overlap < 1.0 and shard.sharded:
        raise InvalidParameterError(
            "sharding", shard.strategy, f"the cluster {cluster.name!r} has an "
            f"overlap efficiency of {cluster.overlap:g} < 1, which is not modelled "
            "under sharding", "Use sharding='none', or a cluster calibrated on GPUs")
    if cluster.overlap < 1.0:
        eta, r = cluster.overlap, profile.tensor_ready
        late = np.maximum.accumulate(eta * r + (1.0 - eta) * profile.backward_time)
        profile = attrs.evolve(profile, tensor_ready=np.minimum(late, profile.backward_time))
    return profile


def _ignored(given, algorithm, topology, shard, mp, sequence_parallel, cluster,
             offloaded=False):
    """The settings given that the scenario ignores, each ``(name, value, why)``
    (``gpus_per_node`` never with ``offloaded``: it sets the GPUs sharing a host's CPU,
    eq. offload-host)."""
    ignored = ignored_settings(given, algorithm=algorithm,
                               flat=topology.gpus_per_node is None,
                               sharded=shard is not None, tp=mp.tp)
    if offloaded:
        ignored = tuple(i for i in ignored if i[0] != "gpus_per_node")
    if sequence_parallel and mp.tp == 1:  # scalemodel.parallel
        ignored += (("sequence_parallel", True, SEQUENCE_PARALLEL_IGNORED),)
    if shard is not None and cluster is not None and cluster.host is not None:
        ignored += (("cluster.host", cluster.host.to_dict(), "the wrapper's host "
                     "costs (eq. host-lead) are not modelled under sharding; the "
                     "cluster's bucket_overhead is its work per unit"),)
    return ignored


def _unit_cost_of_its_wrapper(cluster, shard):
    """``(cluster, ignored)``: a cluster whose per-bucket cost :math:`c_b` (its own or an
    alternative's) was fitted under a sharding ``shard`` does not count in units of the
    same kind loses it. That cost is the data-parallel wrapper's work per unit: per
    gradient bucket where the parameters are not gathered per unit (DDP, ZeRO-1 and
    ZeRO-2, as :func:`~scalemodel.fit_problem` counts them), per wrapped unit where they
    are (ZeRO-3, HSDP: FSDP's fetch, release and partition hooks per block, up to a
    hundred times more). Charged per bucket of the other kind it made a DDP question on a
    cluster fitted with FSDP runs 14 times as uncertain as it is. The ignored entry says
    so (a ModelWarning, and the result's settings)."""
    fitted = (cluster.fit_settings.get("sharding") if cluster is not None else None)
    if fitted is None:
        return cluster, ()
    alts = cluster.alternatives
    values = [cluster.bucket_overhead, *(a.get("values", {}).get("bucket_overhead") or 0.0
                                         for a in alts)]
    if max(values) == 0.0 and "bucket_overhead" not in cluster.intervals:
        return cluster, ()
    fitted_units = resolve_sharding(fitted)
    if bool(fitted_units.full_shard) == bool(shard.full_shard):
        return cluster, ()
    kept = []
    for a in alts:
        a = dict(a, values={k: v for k, v in a.get("values", {}).items()
                            if k != "bucket_overhead"},
                 intervals={k: v for k, v in a.get("intervals", {}).items()
                            if k != "bucket_overhead"})
        if "free" in a:
            a["free"] = [f for f in a["free"] if f != "bucket_overhead"]
        kept.append(a)
    value = max(values)
    cluster = attrs.evolve(cluster, bucket_overhead=0.0, alternatives=tuple(kept),
                           intervals={k: v for k, v in cluster.intervals.items()
                                      if k != "bucket_overhead"})
    kind = ("wrapped unit" if fitted_units.full_shard else "gradient bucket")
    return cluster, (("cluster.bucket_overhead", value,
                      f"it is the work per {kind} of the wrapper the runs used ("
                      f"{fitted_units.strategy}), not a cost of this question's "
                      f"{'wrapped units' if shard.full_shard else 'gradient buckets'} "
                      f"({shard.strategy}); fit runs of this wrapper to charge its own"),)


def job_recompute_share(profile) -> float:
    """The share of activation recompute in a scenario's profile as a fitted cluster's
    recorded shares count it (``provenance["recompute_share_fit_basis"]``, set where the
    fitted efficiency is applied; else :func:`~scalemodel.efficiency.recompute_share`) [-].

    Parameters
    ----------
    profile : WorkloadProfile
        A scenario's profile [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    basis = prov.get("recompute_share_fit_basis")
    return float(basis) if basis is not None else recompute_share(profile)


def _recompute_share_of(profile, activation_checkpointing):
    """The share of activation recompute in ``profile``'s compute once
    ``activation_checkpointing`` is applied (:func:`~scalemodel.efficiency.recompute_share`
    of :func:`~scalemodel.checkpointing.with_recompute`; the profile's own without it),
    or None when nothing is asked [-]."""
    if activation_checkpointing is None:
        return None
    return recompute_share(with_recompute(profile, activation_checkpointing))


@attrs.frozen(eq=False)
class Scenario:
    """A workload with its fusion, collective and network constants, ready to evaluate.

    Build it with :meth:`Scenario.build`; it caches one line set (and its envelope) per
    worker count, so repeated evaluations cost one binary search per point.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload.
    algorithm : str
        Collective algorithm name.
    fusion : object
        Fusion policy.
    options : CollectiveOptions
        Latency and topology constants.
    codec_cost : float
        Encode plus decode time per byte of uncompressed gradient, paid on the
        critical path whenever the compression ratio exceeds 1 [s/byte].
    cluster : ClusterProfile or None
        Calibrated transport: its latency, achieved bandwidth, reduction cost, topology,
        compute slowdown and fixed costs.
    sharding : Sharding or None
        Sharded data parallelism (:mod:`scalemodel.sharding`); None for plain data
        parallelism. With it ``fusion`` is the wrapping policy, and :meth:`lines` are
        those of the sharded schedule (eq. :eq:`zero3`).
    model_parallel : ModelParallel or None
        Tensor and pipeline parallelism (:mod:`scalemodel.parallel`): the profile is then
        one GPU of the job, ``n`` counts data-parallel replicas and the line rate of one
        data-parallel ring is ``bw * bw_scale``.
    bw_scale : float
        Factor from a NIC's line rate to one data-parallel ring's (the node's NICs shared
        by its tensor-parallel ranks' rings) [-].
    ignored : tuple of (str, object, str)
        The settings given that this scenario does not use: ``(parameter, value, why)``
        each (:func:`~scalemodel.model.ignored_settings`); :meth:`build` warns of them
        on every call [-].
    """

    profile: WorkloadProfile
    algorithm: str
    fusion: object
    options: CollectiveOptions
    codec_cost: float = 0.0
    cluster: object = None
    sharding: object = None
    model_parallel: object = None
    bw_scale: float = 1.0
    ignored: tuple = ()
    _buckets: object = attrs.field(default=None, init=False)
    _cache: dict = attrs.field(factory=dict, init=False)
    _wire: dict = attrs.field(factory=dict, init=False)

    @classmethod
    def build(cls, model, *, algorithm=None, fusion=None, alpha=None, codec_cost=0.0,
              gpus_per_node=None, intra_bw=None, intra_alpha=None, ps_servers=None,
              cluster=None, nics_per_node=None, sharding=None, activation_checkpointing=None,
              offload=None, shard_group=None, tp=1, pp=1, microbatches=None, warn=True,
              virtual_stages=1, sequence_parallel=False):
        """Validate the arguments and make a scenario; see :func:`scaling_factor`.

        Scenarios (and the lines they cache) are kept for the last
        :data:`~scalemodel.model.SCENARIO_CACHE_SIZE` argument sets whose model and cluster are objects or
        built-in names (a file is read again every time), so that repeated questions on
        one workload cost only the solve. A setting given that the scenario does not use
        (``ignored``) gives a :class:`~scalemodel.exceptions.ModelWarning` on every
        call, cached or not, unless ``warn`` is False (for internal questions whose
        arguments the user did not write)."""
        profile = load_profile(model)
        # checked before the cache: True and 1 hash alike (scalemodel.parallel)
        sequence_parallel = check_sequence_parallel(sequence_parallel)
        kw = dict(algorithm=algorithm, fusion=fusion, alpha=alpha, codec_cost=codec_cost,
                  gpus_per_node=gpus_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
                  ps_servers=ps_servers, nics_per_node=nics_per_node, sharding=sharding,
                  activation_checkpointing=activation_checkpointing, offload=offload,
                  shard_group=shard_group, tp=tp, pp=pp, microbatches=microbatches,
                  virtual_stages=virtual_stages, sequence_parallel=sequence_parallel)
        key = _cache_key(profile, cluster, kw)
        if key is not None:
            hit = _SCENARIOS.get(key)
            if hit is not None and hit[0] is profile and hit[1] is cluster:
                _SCENARIOS.move_to_end(key)
                if warn and hit[2].ignored:
                    hit[2].warn_ignored()
                return hit[2]
        sc = None
        if key is not None and cluster is not None:  # a corner of a cluster already built
            sk = (id(profile), key[2], _build_key(cluster))
            sib = _SIBLINGS.get(sk)
            if sib is not None and sib[0] is profile and _build_key(sib[1]) == sk[2]:
                sc = _sibling(sib[2], cluster)
        if sc is None:
            sc = cls._build(profile, cluster=cluster, **kw)
            if cluster is not None:  # what the build started from (_corner_siblings)
                sc._cache[("raw profile",)] = profile
            if key is not None and cluster is not None:
                _SIBLINGS[sk] = (profile, cluster, sc)
                while len(_SIBLINGS) > SCENARIO_CACHE_SIZE:
                    _SIBLINGS.popitem(last=False)
        if key is not None:
            _SCENARIOS[key] = (profile, cluster, sc)
            while len(_SCENARIOS) > SCENARIO_CACHE_SIZE:
                _SCENARIOS.popitem(last=False)
        if warn and sc.ignored:
            sc.warn_ignored()
        return sc

    def warn_ignored(self):
        """Warn (:class:`~scalemodel.exceptions.ModelWarning`) of each setting given that
        this scenario does not use, naming the parameter, its value and why [-]."""
        for name, value, why in self.ignored:
            warn_model(f"{name}={value!r} has no effect: {why}")

    @classmethod
    def _build(cls, profile, *, algorithm, fusion, alpha, codec_cost, gpus_per_node,
               intra_bw, intra_alpha, ps_servers, cluster, nics_per_node, sharding,
               activation_checkpointing=None, offload=None, shard_group=None, tp=1, pp=1,
               microbatches=None, virtual_stages=1, sequence_parallel=False):
        alpha = _scalar_float(alpha, "alpha")
        cfg = profile.provenance.get("config") if isinstance(profile.provenance,
                                                              dict) else None
        if isinstance(cfg, dict):  # a profile file's config: a TransformerConfig's fields
            from .memory import check_config_fields

            check_config_fields(cfg)
        from_fit = False
        if cluster is not None:  # what the cluster was fitted under, unless given
            cluster = load_cluster(cluster)
            from_fit = sharding is None and cluster.fit_settings.get("sharding") is not None
            algorithm, fusion, sharding = cluster.settings_defaults(algorithm, fusion,
                                                                    sharding)
        shard = _with_shard_group(resolve_sharding(sharding), shard_group)
        if isinstance(cfg, dict):  # a pipeline the model cannot be split into is said
            _refuse_sharded_pipeline(shard, pp, from_fit)  # first (before micro-batches)
            check_pipeline_layers(pp, cfg.get("layers"), profile.name)
        mp = resolve_model_parallel(tp, pp, microbatches, profile.grad_accum,
                                    virtual_stages, sequence_parallel)
        topology = None
        if cluster is not None:
            if alpha is None:
                alpha = cluster.alpha
            topology = cluster.topology
            profile = _on_cluster(profile, cluster, mp, shard, activation_checkpointing)
        # scalemodel.checkpointing: recompute in each checkpointed block's backward
        profile = with_recompute(profile, activation_checkpointing)
        if topology is None:  # the link and architecture of the profile's GPU, if built in
            topology = gpu_topology(profile)
        topology = resolve_topology(topology, gpus_per_node=gpus_per_node,
                                    nics_per_node=nics_per_node, intra_bw=intra_bw,
                                    intra_alpha=intra_alpha)
        if shard.strategy == "hybrid_shard":  # its shard group is a node: memory()'s node
            topology = _hybrid_node(topology, profile, mp)
        # scalemodel.offload: the offloaded optimizer step in place of the GPU's, its CPU
        # part on a host that a node's GPUs share (Scenario.host_sharing)
        profile = with_offload(profile, offload, shard.strategy,
                               _host_gpus(topology, profile, offload, mp.tp))
        recorded_offload(profile)  # a profile file's recorded step, checked once
        options = CollectiveOptions.from_topology(topology, alpha=alpha or 0.0,
                                                  ps_servers=ps_servers)
        bw_scale, mp_used = 1.0, None
        if mp.active or mp.microbatches != profile.grad_accum:
            _check_model_parallel_scope(mp, shard, options)
            profile = _replica_host_sharing(model_parallel_profile(profile, mp, options),
                                            mp)
            options, bw_scale = dp_options(options, mp)
            mp_used = mp
            if cluster is not None:  # the NIC's fitted terms as one ring sees them
                cluster = cluster.ring_view(bw_scale)
        cluster, foreign = _unit_cost_of_its_wrapper(cluster, shard)
        if shard.sharded:
            policy = resolve_wrap(fusion, shard.strategy, profile)
        else:
            policy, shard = resolve_fusion("ddp" if fusion is None else fusion), None
        algorithm = resolve_algorithm("ring" if algorithm is None else algorithm)
        ignored = _ignored(dict(ps_servers=ps_servers, gpus_per_node=gpus_per_node,
                                nics_per_node=nics_per_node, intra_bw=intra_bw,
                                intra_alpha=intra_alpha),
                           algorithm, topology, shard, mp, sequence_parallel, cluster,
                           offloaded="offload_cpu_step" in profile.provenance) + foreign
        return cls(
            cluster=cluster,
            profile=profile,
            algorithm=algorithm,
            fusion=policy,
            sharding=shard,
            options=options,
            codec_cost=_codec_cost(codec_cost, profile),
            model_parallel=mp_used,
            bw_scale=bw_scale,
            ignored=ignored,
        )

    def data_parallel(self, n, bw):
        """``(n, bw)`` of the data-parallel dimension: replicas ``n / (tp pp)`` and one
        ring's line rate (:mod:`scalemodel.parallel`); unchanged without tensor or
        pipeline parallelism [workers], [bits/s]."""
        if self.model_parallel is None:
            return n, bw
        dp = self.model_parallel.dp(n)
        if self.sharding is not None and np.any(np.asarray(dp) < 2):
            mp = self.model_parallel
            raise InvalidParameterError(
                "n", int(np.asarray(n)[np.asarray(dp) < 2].flat[0]),
                f"sharding={self.sharding.strategy!r} with tp={mp.tp} shards over the "
                f"data-parallel group of n / tp GPUs, which needs at least 2: n a multiple "
                f"of {mp.tp} from {2 * mp.tp}", "Use sharding='none' for one replica")
        sg = None if self.sharding is None else self.sharding.shard_group
        if sg is not None and np.any(np.asarray(dp) % sg):  # named as memory() names it
            from .sharding import _divisors

            first = int(np.asarray(dp)[np.asarray(dp) % sg != 0].flat[0])
            raise InvalidParameterError(
                "shard_group", sg, f"with tp={self.model_parallel.tp} a shard group counts "
                f"data-parallel GPUs and must divide n / tp = {first}: valid are "
                f"{_divisors(first)}")
        return dp, np.multiply(bw, self.bw_scale)

    def settings(self) -> dict:
        """What this scenario assumes: collective, fusion or wrapping, sharding,
        activation checkpointing, offload, topology, the wrapper's host costs and host
        time (``wrapper_host``, when the cluster has them) and cluster [-].

        ``gpus_per_node`` and ``nics_per_node`` are the job's nodes, as given; with tensor
        or pipeline parallelism ``dp_ring_gpus_per_node``, ``dp_ring_nics_per_node`` and
        ``dp_ring_bw_scale`` are one data-parallel ring's view of them
        (:func:`~scalemodel.parallel.dp_options`: :math:`q/t` GPUs of the ring per node,
        :math:`\\nu/t` of the node's NICs). With offload, ``offload_host_gpus`` is the
        :math:`g` of eq. :eq:`offload-host`, the GPUs that share a host's CPU step."""
        prov = self.profile.provenance if isinstance(self.profile.provenance, dict) else {}
        gpn, nics = self.options.gpus_per_node, self.options.nics_per_node
        mp = self.model_parallel
        if gpn is None and self.algorithm == "hierarchical" and mp is None:  # what its
            from .topology import HIERARCHICAL_GPUS_PER_NODE  # collective takes
            gpn = HIERARCHICAL_GPUS_PER_NODE
        ring = {}
        if mp is not None:
            ring = {"dp_ring_gpus_per_node": gpn, "dp_ring_nics_per_node": nics,
                    "dp_ring_bw_scale": float(self.bw_scale)}
            if gpn is not None and mp.tp > 1:  # dp_options' view back to the job's nodes
                gpn, nics = gpn * mp.tp, int(round(self.bw_scale * mp.tp))
        return {"algorithm": self.algorithm, "fusion": (self.fusion if isinstance(
                    self.fusion, str) else repr(self.fusion)),
                "sharding": "none" if self.sharding is None else self.sharding.strategy,
                "shard_group": None if self.sharding is None else self.sharding.shard_group,
                **({} if self.sharding is None or self.sharding.param_return == "allgather"
                   else {"param_return": self.sharding.param_return,
                         "broadcasts": self.sharding.broadcasts,
                         "broadcast_chunk": self.sharding.broadcast_chunk}),
                **({} if mp is None else mp.settings()),
                "activation_checkpointing": prov.get("activation_checkpointing", "none"),
                "offload": prov.get("offload_mode", "none"),
                **({"offload_host_gpus": prov["offload_host_gpus"]}  # eq. (offload-host)
                   if "offload_host_gpus" in prov else {}),
                "gpus_per_node": gpn, "nics_per_node": nics, **ring,
                **self._host_settings(), **self._workload_settings(prov),
                "cluster": None if self.cluster is None else self.cluster.name}

    def _workload_settings(self, prov) -> dict:
        """The workload the answer is for: its name, gradient accumulation and, for a
        profile derived from a transformer config, the sequence length, micro-batch, GPU
        and efficiency it was timed at (a config.json's default sequence made a 64 s
        step, unsaid) [-]."""
        p = self.profile
        out = {"model": p.name, "grad_accum": p.grad_accum}
        cfg = prov.get("config")
        if isinstance(cfg, dict):
            from .efficiency import profile_efficiency

            out.update(seq=cfg.get("seq"), micro_batch=cfg.get("micro_batch"),
                       gpu=prov.get("gpu"), efficiency=profile_efficiency(p))
        return out

    def _host_settings(self) -> dict:
        """``{"wrapper_host": ...}`` when the cluster has host costs and they apply (not
        under sharding): the host time :math:`H` used, and whether it was measured or
        taken as the host-bound limit (the iteration) [-]."""
        cl = self.cluster
        if cl is None or cl.host is None or self.sharding is not None:
            return {}
        p = self.profile
        measured = p.host_time is not None
        return {"wrapper_host": {
            "host_time": float(p.host_time if measured else p.iteration_time),
            "host_time_source": ("the profile's host_time" if measured else
                                 "not measured: the host-bound limit (the iteration); "
                                 "the interval reaches the GPU-bound end"),
            "per_tensor": cl.host.per_tensor, "per_bucket": cl.host.per_bucket,
            "device_time": cl.host.device_time}}

    # ------------------------------------------------------------------ cluster terms

    @property
    def compute_slowdown(self) -> float:
        """:math:`\\sigma` of the cluster (1 without one) [-]."""
        return 1.0 if self.cluster is None else self.cluster.compute_slowdown

    def slowdown(self, n) -> float:
        """Compute slowdown :math:`\\sigma_n` that applies to ``n`` workers (eq.
        :eq:`straggler`: the cluster's slowdown times the wait for the slowest worker);
        1 for a single worker. With tensor or pipeline parallelism ``n`` counts
        data-parallel replicas of :math:`t p` GPUs, and the wait is for the slowest of all
        :math:`n t p` GPUs (a replica's GPUs wait for each other at every layer) beyond the
        one replica's own wait for the slowest of its :math:`t p`, which its time (the
        scaling factor's baseline) holds: :math:`\\sigma (1 + s\\,e_{ntp}) / (1 + s\\,e_{tp})`
        (as the offload's host sharing counts only what the replicas add) [-]."""
        n = int(n)
        if n <= 1:
            return 1.0
        cl = self.cluster
        if cl is None:
            return 1.0
        if cl.straggler_spread == 0.0:
            return cl.compute_slowdown
        mp = self.model_parallel  # every GPU of the job waits for the slowest one
        own = 1 if mp is None else mp.tp * mp.pp  # ... a replica's own: in its baseline
        s = cl.straggler_spread
        return cl.compute_slowdown * (1.0 + s * _blom(n * own)) / (1.0 + s * _blom(own))

    def bucket_overhead(self, n) -> float:
        """The framework's work per bucket on the compute path, :math:`c_b`, for ``n``
        workers (0 for one); under sharding per gradient collective (reduce-scatter)
        [s]."""
        if int(n) <= 1 or self.cluster is None:
            return 0.0
        return self.cluster.bucket_overhead

    def iteration_overhead(self, n) -> float:
        """The data-parallel wrapper's work per iteration, :math:`t_w`, for ``n``
        workers (0 for one: :math:`T_1` is the run without the wrapper) [s]."""
        if int(n) <= 1 or self.cluster is None:
            return 0.0
        return self.cluster.iteration_overhead

    def forward(self, n) -> float:
        """Forward time of ``n`` workers, slowdown included, and the wrapper's
        per-iteration work :math:`t_w` and GPU work :math:`g` (eqs. :eq:`iteration-cluster`,
        :eq:`host-lead`); with a pipeline, also what the slowdown adds to its bubble
        (:meth:`bubble`) [s]."""
        sigma = self.slowdown(n)
        out = sigma * self.profile.forward_time + self.iteration_overhead(n)
        if int(n) > 1 and self.host_delays(n) is not None:
            out += self.cluster.host.device_time
        if sigma != 1.0:
            out += (sigma - 1.0) * self.bubble()
        return out

    def host_sharing(self, n):
        """What sharing a host adds to the offloaded optimizer step of one GPU on ``n``
        workers, eq. :eq:`offload-host`: the CPU part :math:`c` of the whole step
        (``provenance["offload_cpu_step"]``) times :math:`h_n - h_1` GPUs running their
        steps on one host at once (:func:`~scalemodel.offload.host_ranks` of the job's
        GPUs; the profile's update already holds one replica's :math:`h_1`), over the
        shard group :math:`s` that divides the step; 0 without offload and for one
        replica. Array-valued in ``n`` [s]."""
        c, host = recorded_offload(self.profile)
        if not c or np.all(np.asarray(n) <= 1):
            return np.zeros(np.shape(n)) if np.ndim(n) else 0.0
        mp = self.model_parallel
        per = 1 if mp is None else mp.tp * mp.pp
        extra = c * (host_ranks(np.multiply(n, per), host) - host_ranks(per, host))
        if self.sharding is None:
            return extra if np.ndim(n) else float(extra)
        if not np.ndim(n):
            return float(extra) / _group_layout(int(n), self.sharding, self.options).s
        values = np.unique(n)
        group = np.array([_group_layout(int(v), self.sharding, self.options).s
                          if v > 1 else 1 for v in values])
        return extra / group[np.searchsorted(values, n)]

    def update(self, n):
        """The optimizer step of one GPU on ``n`` workers: the profile's, plus what
        sharing a host adds to an offloaded one (:meth:`host_sharing`). Array-valued in
        ``n`` [s]."""
        return self.profile.update_time + self.host_sharing(n)

    def bubble(self) -> float:
        """The pipeline bubble of one step at the profile's compute,
        :math:`(p-1)/v \\cdot (t_f + t_b)` plus the head's :math:`m (h_f + h_b)` on the last
        stage (eqs. :eq:`pp-iteration`, :eq:`pp-interleaved`, :eq:`pp-uneven`), which the
        per-GPU profile keeps in its update time; 0 without a pipeline [s].
        The bubble is the other stages' compute, so the slowdown :math:`\\sigma_n`
        stretches it as it stretches the micro-batches: :meth:`forward` adds
        :math:`(\\sigma_n - 1)` times it."""
        mp = self.model_parallel
        if mp is None or mp.pp == 1:
            return 0.0
        return sum(self._bubble_parts())

    def _bubble_parts(self):
        """The bubble's forward and backward parts [s]: what the per-GPU profile
        recorded (``provenance["model_parallel"]``, eq. :eq:`pp-uneven`: the other
        stages' compute and the head's on the last stage), else
        :math:`(p-1)/v` times the profile's forward and backward."""
        mp, p = self.model_parallel, self.profile
        rec = p.provenance.get("model_parallel") if isinstance(p.provenance, dict) else None
        if isinstance(rec, dict) and "pipeline_bubble_forward" in rec:
            return (float(rec["pipeline_bubble_forward"]),
                    float(rec["pipeline_bubble_backward"]))
        stages = (mp.pp - 1) / mp.virtual_stages
        return stages * p.forward_time, stages * p.backward_time

    def host_lead(self, n) -> float:
        """The host's lead over the GPU on ``n`` workers,
        :math:`L_n = \\sigma_n G + T_u + g - H` of eq. :eq:`host-lead` (the profile's
        ``host_time`` :math:`H`, or the iteration when not measured); 0 without host
        costs in the cluster [s]."""
        cl = self.cluster
        if cl is None or cl.host is None:
            return 0.0
        p = self.profile
        sigma = self.slowdown(n)
        gpu = (sigma * p.grad_accum * (p.forward_time + p.backward_time) + self.update(n)
               + (sigma - 1.0) * self.bubble())
        if p.host_time is not None:
            host = p.host_time
        else:  # not measured: host-bound, or GPU-bound at an interval's optimistic end
            host = 0.0 if cl.host.gpu_bound_end else p.iteration_time
        return max(0.0, gpu + cl.host.device_time - host)

    def host_delays(self, n):
        """Delay of each bucket (communication order) on the compute stream of ``n``
        workers from the wrapper's host work past the host's lead, :math:`d_k` of eq.
        :eq:`host-lead`; ``None`` when the cluster has no host costs, and under sharding
        (not modelled there: the cluster's ``bucket_overhead`` is the per-unit cost) [s]."""
        cl = self.cluster
        if cl is None or cl.host is None or self.sharding is not None:
            return None
        key = ("host delays", int(n))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = host_delays(tensors_per_bucket(self.buckets), cl.host,
                                                 self.host_lead(n))
        return hit

    def wrapped_single_worker_time(self) -> float:
        """Iteration time of one worker run *with* the data-parallel wrapper (DDP on one
        GPU): :math:`T_1 + t_w + K c_b`, the per-bucket work :math:`c_b` once for each of
        the fusion's :math:`K` buckets (under sharding: units), and with the cluster's
        host costs :math:`g + d_K` (eq. :eq:`host-lead`: :math:`\\max(T_1 + g, H + P h_p
        + K h_b)` for the rest) [s]."""
        t1 = self.profile.iteration_time
        cl = self.cluster
        if cl is None:
            return t1
        k = 0 if cl.bucket_overhead == 0 else len(self.buckets)
        out = t1 + cl.iteration_overhead + k * cl.bucket_overhead
        hd = self.host_delays(1)
        if hd is not None:
            out += cl.host.device_time + float(hd[-1])
        return out

    def _fixed(self, n, k):
        """Fixed costs of ``k`` buckets: c0 each, t_s on the last [s]."""
        out = np.zeros(k)
        if self.cluster is None or n <= 1 or k == 0:
            return out
        out += self.cluster.collective_overhead
        out[-1] += self.cluster.sync_overhead
        return out

    # ------------------------------------------------------------------ MG-WFBP

    @property
    def needs_plan(self) -> bool:
        """True for ``fusion="mg-wfbp"``: its buckets depend on the configuration."""
        return self.fusion is PLANNED_MGWFBP

    def planned(self, n, x, r=1.0):
        """This scenario with MG-WFBP planned for ``n`` workers at ``x = 1/(u B r)``
        [s/bit] and ratio ``r`` [-]: the all-reduce's start-up and per-byte times are
        fitted, as MG-WFBP's start-up benchmark does, to its cost at 1 MiB and 64 MiB.
        Other fusions are returned unchanged."""
        if not self.needs_plan:
            return self
        key = ("plan", int(n), float(x), float(r))
        if key not in self._cache:
            probe = attrs.evolve(self, fusion=MGWFBP(0.0, 0.0))
            sizes = np.array([2.0**20, 2.0**26])
            cost = collective_cost(self.algorithm, sizes, int(n),
                                   reduction=self.profile.reduction, options=self.options)
            xe = float(probe.x_effective(n, x, r))
            lines_t = (cost.latency + cost.overhead + self._fixed(int(n), 2)[0]
                       + np.maximum(cost.bits, 0.0) * xe)
            if not cost.bits.any() and cost.intra_bits.any():
                lines_t = lines_t + cost.intra_bits / (r * cost.intra_bw)
            per_byte = max(0.0, float((lines_t[1] - lines_t[0]) / (sizes[1] - sizes[0])))
            startup = max(0.0, float(lines_t[0] - per_byte * sizes[0]))
            self._cache[key] = attrs.evolve(self, fusion=MGWFBP(startup, per_byte))
        return self._cache[key]

    # ------------------------------------------------------------------ lines

    @property
    def buckets(self):
        """The buckets the fusion policy makes of the profile's gradients, on the timeline
        of a distributed run (ready times stretched by the compute slowdown, so that a
        time-based fusion such as Horovod's cycle sees the slower backward)."""
        if self.needs_plan:
            raise InvalidParameterError(
                "fusion", "mg-wfbp", "needs a configuration to plan for",
                "Use Scenario.planned(n, x), or pass MGWFBP(startup, per_byte)")
        if self._buckets is None:
            object.__setattr__(self, "_buckets", self._buckets_at(self.compute_slowdown))
        return self._buckets

    def _buckets_at(self, sigma):
        """:attr:`buckets` at compute slowdown ``sigma`` [-] (this scenario's, or a
        corner's of its cluster)."""
        p = self.profile
        # what a policy makes of a profile is kept with the profile (as its shard
        # units are): a new question on a loaded model does not bucket it again
        per = _BUCKETS.setdefault(p, {})
        key = (self.sharding is not None, self.fusion, sigma)
        try:  # MG-WFBP's are planned per configuration: not kept
            made = None if isinstance(self.fusion, MGWFBP) else per.get(key)
        except TypeError:  # an unhashable policy: not kept
            key, made = None, None
        if isinstance(self.fusion, MGWFBP):
            key = None
        if made is None:
            if self.sharding is not None and not hasattr(self.fusion, "buckets"):
                # a wrapping policy: each unit's gradients are one reduce-scatter
                made = unit_buckets(p, self.fusion, sigma)
            elif type(self.fusion) is DDPBuckets and key is not None and sigma != 1.0:
                # DDP's boundaries follow the sizes alone: the buckets at slowdown sigma
                # are those at 1 with each ready time times sigma (the latest tensor's,
                # exactly: rounding keeps the order)
                base = self._buckets_at(1.0)
                made = Buckets(base.nbytes, sigma * base.ready, base.members)
            else:
                made = self.fusion.buckets(p.tensor_bytes, sigma * p.tensor_ready)
            if key is not None:
                per[key] = made
        return made

    def make_lines(self, n, ready, cost, overhead=None, *, with_fixed=True, delay=None,
                   backward_extra=0.0, envelope=True):
        """Lines of eq. :eq:`iteration-cluster` for buckets ready at ``ready`` [s] (on the
        distributed timeline, as :attr:`buckets`) with collective costs ``cost`` (a
        :class:`~scalemodel.collectives.CollectiveCost`); ``overhead`` [s] replaces the
        cost's overhead when given; ``with_fixed=False`` leaves out the cluster's fixed
        costs on the channel (per-collective and sync) [-]; ``delay`` [s] per bucket is
        compute-stream work before it (added to its ready time, after the slowdown) and
        ``backward_extra`` [s] compute-stream work added to the end of the backward pass
        (a compressor's codec on the compute stream, :mod:`scalemodel.planner`). Returns
        the lines, their envelope (None without the fixed costs, or with
        ``envelope=False``: the caller builds it when it needs it) and the wire map
        ``(k1, k2)`` of :meth:`Scenario.x_effective`."""
        n = int(n)
        sigma = self.slowdown(n)
        ready = np.asarray(ready, float) * (sigma / self.compute_slowdown)
        k = ready.shape[0] if ready.ndim else 1  # len(np.atleast_1d(ready))
        cb = self.bucket_overhead(n)
        if cb > 0:  # the framework's work per bucket delays backward and later buckets
            ready = ready + cb * np.arange(1, k + 1)
        hd = self._host_delays_of(n, k)
        if hd is not None:  # the wrapper's host work past the host's lead (eq. host-lead)
            ready = ready + hd
        if delay is not None:
            ready = ready + np.asarray(delay, float)
        wire, xmap = _wire(n, cost)
        ovh = cost.overhead if overhead is None else overhead
        p = self.profile
        # gradient accumulation: the micro-batches before the last one run without
        # communication (DDP's no_sync); they delay the last backward, and its buckets
        shift = (p.grad_accum - 1) * sigma * (p.forward_time + p.backward_time)
        backward = sigma * p.backward_time + k * cb + shift
        if hd is not None:  # (in this order, as the planner's lines add it)
            backward = backward + float(hd[-1])
        lines = overlap_lines(ready + shift, cost.latency, ovh, wire,
                              backward + backward_extra,
                              fixed=self._fixed(n, k) if with_fixed else 0.0)
        if not (with_fixed and envelope):
            return lines, None, xmap
        return lines, UpperEnvelope(lines.intercept, lines.slope), xmap

    def _host_delays_of(self, n, k):
        """:meth:`host_delays` of ``n > 1`` workers for lines of ``k`` buckets (the
        scenario's own), else None [s]."""
        if n <= 1:
            return None
        hd = self.host_delays(n)
        return hd if hd is not None and len(hd) == k and k > 0 else None

    def lines(self, n: int, compressed: bool = False):
        """:class:`~scalemodel.overlap.OverlapLines` and their envelope for ``n`` workers,
        in :math:`x_\\text{eff}` (see :meth:`Scenario.x_effective`).

        ``compressed`` adds the encode/decode cost (paid only when the ratio is > 1).
        """
        key = (int(n), bool(compressed) and self.codec_cost > 0)
        if self.sharding is not None:
            sched = self.schedule(key[0], key[1])
            return sched.lines, sched.envelope
        if key not in self._cache:
            root = self._cache.get(("root",))  # a corner's: primed with all corners'
            got = None if root is None else root._prime_corner_lines(key, self).get(id(self))
            if got is not None and got[0] is self:
                b, cost = got[1], got[2]
            else:
                b = self.buckets
                self._prime_corner_costs(key[0], b)
                cost = _shared_cost(self.algorithm, b.nbytes, key[0],
                                    self.profile.reduction, self.options)
            lines, env, xmap = self._lines_sharing_fixed(key, b, cost)
            self._cache[key] = (lines, env)
            self._wire[key[0]] = xmap
        return self._cache[key]

    def _prime_corner_costs(self, n, b):
        """On a fitted cluster, the collective costs of the buckets of every corner of its
        intervals and alternatives (:meth:`~scalemodel.ClusterProfile.corners`), in one
        call together with this scenario's own (``b``), kept in :data:`_COSTS`: a
        compute slowdown at a corner changes a time-based fusion's buckets, and one
        vectorized cost of all the sizes costs about as much as one of a few. Only corners
        whose latency, topology, reduction and overlap are this cluster's (so that their
        collective options are this scenario's) are primed; each size's cost is the same
        alone or among others."""
        cl = self.cluster
        if (n <= 1 or cl is None or not (cl.intervals or cl.alternatives) or self.needs_plan
                or self.sharding is not None):
            return
        red, opts = self.profile.reduction, self.options
        own = _cost_key(self.algorithm, b.nbytes, n, red, opts)
        if own is None or own in _COSTS:
            return
        family = [cl] + [cl.with_alternative(i) for i in range(1, len(cl.alternatives))]
        same = (cl.alpha, cl.topology, cl.reduction, cl.overlap)
        keys, sizes, seen = {own: b.nbytes}, [b.nbytes], {self.compute_slowdown}
        sized = {b.nbytes.tobytes()}  # the key differs only in the sizes: each once
        for c in (corner for f in family for corner in (f, *f.corners())):
            if (c.alpha, c.topology, c.reduction, c.overlap) != same or \
                    c.compute_slowdown in seen:
                continue
            seen.add(c.compute_slowdown)
            nb = self._buckets_at(c.compute_slowdown).nbytes  # the corner's buckets
            if nb.tobytes() in sized:
                continue
            sized.add(nb.tobytes())
            k = _cost_key(self.algorithm, nb, n, red, opts)
            if k is not None and k not in keys and k not in _COSTS:
                keys[k] = nb
                sizes.append(nb)
        if len(sizes) == 1:
            return
        cost = collective_cost(self.algorithm, np.concatenate(sizes), n, reduction=red,
                               options=opts)
        parts = (cost.latency, cost.overhead, cost.bits, cost.intra_bits)
        total = sum(len(nb) for nb in sizes)
        if any(np.shape(v) != (total,) for v in parts):
            return  # not one value per bucket: each is costed on its own
        start = 0
        for k, nb in keys.items():
            sl = slice(start, start + len(nb))
            start += len(nb)
            _COSTS[k] = (red, attrs.evolve(cost, latency=cost.latency[sl],
                                           overhead=cost.overhead[sl], bits=cost.bits[sl],
                                           intra_bits=cost.intra_bits[sl]))
        while len(_COSTS) > SCENARIO_CACHE_SIZE:
            _COSTS.popitem(last=False)

    def _lines_key(self, key, b, cost):
        """The key of :data:`_LINES` for the lines of ``key = (n, compressed)`` of buckets
        ``b`` with costs ``cost``: what :meth:`make_lines` reads without the fixed costs
        [-]."""
        n = key[0]
        cl = self.cluster
        host = None if cl is None or cl.host is None else (cl.host, self.host_lead(n))
        return (id(self.profile), id(b), id(cost), key, self.codec_cost, self.slowdown(n),
                self.compute_slowdown, self.bucket_overhead(n), host)

    def _prime_corner_lines(self, key, asking=None):
        """For the scenarios of the corners of this scenario's fitted cluster
        (:func:`_sibling`; this scenario their root), when the first of them asks for its
        lines of ``key = (n, compressed)``: each one's buckets and collective costs, and
        :meth:`_lines_sharing_fixed`'s lines without fixed costs of all of them, in one
        vectorized pass per bucket count (:func:`~scalemodel.overlap._lines_shared`:
        each row the same operations as :meth:`make_lines`), kept in :data:`_LINES`. Only
        plain lines are made so (one value per bucket); the others when asked. A root
        marked by :func:`_corners_only` primes its corners first and the alternatives'
        own scenarios when the first of them (``asking``) asks. Returns
        ``{id(scenario): (scenario, buckets, cost)}`` (kept; empty where nothing is
        primed) [-]."""
        done = self._cache.get(("primed", key))
        if done is not None:
            if asking is not None and id(asking) not in done and \
                    self._cache.pop(("primed rest", key), None):
                near = self._cache[("siblings",)]
                self._prime_these(key, done, [s for s in near.values() if id(s) not in done])
            return done
        done = self._cache[("primed", key)] = {}
        n, near = key[0], self._cache.get(("siblings",))
        if (n <= 1 or near is None or isinstance(self.fusion, MGWFBP)
                or self.sharding is not None):
            return done
        wanted = list(near.values())
        first = self._cache.get(("corners only",))
        if first is not None:  # the corners now, the others when one of them asks
            wanted = [s for s in wanted if id(s.cluster) in first]
            if len(wanted) < len(near):
                self._cache[("primed rest", key)] = True
        self._prime_these(key, done, wanted)
        return done

    def _prime_these(self, key, done, scenarios):
        """:meth:`_prime_corner_lines` of ``scenarios`` (siblings of this root), each
        entered in ``done`` [-]."""
        n = key[0]
        todo, fill, costs, plain = {}, [], {}, {}
        for s in scenarios:
            sb = s.buckets
            # the siblings are the root but for the cluster (_corner_siblings): buckets
            # of the same sizes share one cost, its plainness tested once
            nk = sb.nbytes.tobytes()
            sc = costs.get(nk)
            if sc is None:
                sc = costs[nk] = _shared_cost(s.algorithm, sb.nbytes, n,
                                              s.profile.reduction, s.options)
            done[id(s)] = (s, sb, sc)
            sk = s._lines_key(key, sb, sc)
            fill.append((s, sb, sc, sk))
            if sk not in _LINES and sk not in todo:
                pk = (id(sb), id(sc))
                if pk not in plain:
                    plain[pk] = s._plain_lines(key, sb, sc)
                if plain[pk]:
                    todo[sk] = (s, sb, sc)
        groups = {}
        for sk, item in todo.items():
            groups.setdefault(len(item[1].nbytes), []).append(sk)
        for keys in groups.values():
            items = [todo[sk] for sk in keys]
            made = _stacked_base_lines(key, items)
            for sk, (s, sb, sc), (lines, xmap) in zip(keys, items, made):
                _LINES[sk] = (s.profile, sb, sc, lines, xmap, {})
        while len(_LINES) > SCENARIO_CACHE_SIZE:
            _LINES.popitem(last=False)
        _fill_corner_lines(key, fill)

    def _plain_lines(self, key, b, cost):
        """Whether :meth:`make_lines` of these buckets takes its plain path: one
        float value per bucket in every cost [-]."""
        k = len(b.nbytes)
        ready = b.ready
        if self._host_delays_of(key[0], k) is not None:  # made by make_lines alone
            return False
        return (type(ready) is np.ndarray and ready.shape == (k,) and k > 0
                and all(type(v) is np.ndarray and v.shape == (k,) and v.dtype == np.float64
                        for v in (cost.latency, cost.overhead, cost.bits, cost.intra_bits)))

    def _lines_sharing_fixed(self, key, b, cost):
        """:meth:`make_lines` of ``key = (n, compressed)``, sharing the lines of scenarios
        that differ only in the fixed costs on the channel (per-collective, per-iteration
        sync) and in what never enters the lines (ceiling, utilization, the wrapper's
        per-iteration work): the corners of a fitted cluster and its alternatives. The
        fixed costs' tail sums are added to the shared intercepts, in the order
        :func:`~scalemodel.overlap.overlap_lines` adds them (bit for bit the same)."""
        n = key[0]
        overhead = cost.overhead
        if key[1] and n > 1:
            overhead = overhead + self.codec_cost * b.nbytes
        sk = self._lines_key(key, b, cost)
        hit = _LINES.get(sk)
        if hit is None or hit[0] is not self.profile or hit[1] is not b or hit[2] is not cost:
            base, _, xmap = self.make_lines(n, b.ready, cost, overhead, with_fixed=False)
            hit = _LINES[sk] = (self.profile, b, cost, base, xmap, {})
            while len(_LINES) > SCENARIO_CACHE_SIZE:
                _LINES.popitem(last=False)
        else:
            _LINES.move_to_end(sk)
        return (*_with_fixed_costs(hit, self._fixed(n, len(b.nbytes))), hit[4])

    def schedule(self, n, compressed=False, *, gradient_scale=None, gradient_overhead=None,
                 alpha_counts=False):
        """The sharded iteration on ``n`` workers in closed form
        (:class:`~scalemodel.sharding.ShardedSchedule`); cached unless a gradient
        compressor's ``gradient_scale`` [-] (factor on the gradient collectives' wire bits)
        or ``gradient_overhead`` [s] (encode and decode per gradient collective) is given,
        or the latency counts of its lines (``alpha_counts``). ``compressed`` adds the
        codec cost as in :meth:`lines`."""
        if self.sharding is None:
            raise InvalidParameterError("sharding", "none", "a plain data-parallel scenario "
                                        "has no sharded schedule", "Use Scenario.lines")
        n = int(n)
        compressed = bool(compressed) and self.codec_cost > 0
        custom = gradient_scale is not None or gradient_overhead is not None or alpha_counts
        key = ("schedule", n, compressed)
        if custom or key not in self._cache:
            numbers = self._schedule_numbers(n)
            if custom:
                return self._sharded_schedule(n, compressed, numbers, gradient_scale,
                                              gradient_overhead, alpha_counts)
            sched = self._shared_schedule(n, compressed, numbers)
            self._cache[key] = sched
            self._wire[n] = sched.xmap
        return self._cache[key]

    def corner_envelope(self, n, compressed=False):
        """The envelope of :meth:`lines` alone, as an interval's corner evaluates and
        inverts it: under ``zero3`` / ``hybrid_shard``, when the schedule is not made
        already, :func:`~scalemodel.sharding.zero3_envelope` (the same function to
        rounding, without the parts of each line that only a breakdown reads; kept, and
        the wire map with it), made for every corner of the fitted cluster at once when
        the first of them asks (:func:`~scalemodel.sharding.zero3_envelopes`); the
        envelope of :meth:`lines` otherwise [-]."""
        n = int(n)
        compressed = bool(compressed) and self.codec_cost > 0
        if (self.sharding is None or not self.sharding.full_shard
                or hasattr(self.fusion, "buckets")
                or ("schedule", n, compressed) in self._cache):
            return self.lines(n, compressed)[1]
        keyed = self._cache.get(("corner key", n, compressed))  # (made when primed)
        numbers, sk = keyed if keyed is not None else self._corner_key(n, compressed)
        if sk is None:
            return self.lines(n, compressed)[1]
        got = self._shared_envelope(sk)
        if got is None and self._prime_corner_envelopes(n, compressed):
            got = self._shared_envelope(sk)
        if got is None:  # not a corner, or not primed: alone
            got = zero3_envelopes(self.profile, n, [numbers], sharding=self.sharding,
                                  wrap=self.fusion, algorithm=self.algorithm,
                                  options=self.options, codec_cost=self.codec_cost,
                                  compressed=compressed)[0]
            if got is None:
                return self.lines(n, compressed)[1]
            _keep_envelope(sk, self, got)
        self._wire.setdefault(n, got[1])
        return got[0]

    def _corner_key(self, n, compressed):
        """``(numbers, key)``: :meth:`_schedule_numbers` and :meth:`_schedule_key` of this
        scenario's schedule on ``n`` workers [-]."""
        numbers = self._schedule_numbers(n)
        return numbers, self._schedule_key(n, compressed, numbers)

    def _schedule_numbers(self, n):
        """What :meth:`schedule` takes from the cluster for ``n`` workers: the slowdown
        [-], the collectives' and the iteration's fixed costs [s], the per-unit hook [s]."""
        cl = self.cluster
        return (self.slowdown(n), 0.0 if cl is None else cl.collective_overhead,
                0.0 if cl is None else cl.sync_overhead, self.bucket_overhead(n))

    def _shared_envelope(self, sk):
        """``(envelope, wire map)`` of the schedule of key ``sk`` (:meth:`_schedule_key`)
        made already, whole or alone, for this profile and fusion; None otherwise [-]."""
        for shared in (_SCHEDULES, _ENVELOPES):
            hit = shared.get(sk)
            if hit is not None and hit[0] is self.profile and hit[1] is self.fusion:
                shared.move_to_end(sk)
                return (hit[2].envelope, hit[2].xmap) if shared is _SCHEDULES else hit[2]
        return None

    def _prime_corner_envelopes(self, n, compressed):
        """The envelopes alone of the corner scenarios of this one's root
        (:func:`_corner_siblings`) not made already, in one
        :func:`~scalemodel.sharding.zero3_envelopes` call per batch, kept in
        :data:`_ENVELOPES`: first those the question evaluates (its corners, those an
        interval over the answer evaluates, and this one), then, when another asks, all
        the others; each row of a batch is the envelope it would be alone. Whether this
        scenario is such a corner [-]."""
        root = self._cache.get(("root",))
        near = None if root is None else root._cache.get(("siblings",))
        if near is None or near.get(id(self.cluster)) is not self:
            return False
        done = root._cache.get(("envelopes primed", n, compressed))
        if done is not None and id(self.cluster) in done:
            return True
        if done is None:  # the first batch: the corners this question asks
            done = root._cache[("envelopes primed", n, compressed)] = set()
            first = root._cache.get(("corners only",))  # (iteration_time's corners)
            if first is None:
                from .intervals import corner_clusters  # (an answer's interval's)

                cl = root.cluster
                first = {id(x) for _, c, ends in corner_clusters(cl) for x in (c, *ends)}
            first = first | {id(self.cluster)}
        else:  # a corner the first batch left: all the others
            first = None
        todo = {}
        for key, s in near.items():
            if key in done or (first is not None and key not in first):
                continue
            done.add(key)
            numbers, sk = s._cache[("corner key", n, compressed)] = s._corner_key(n, compressed)
            if sk is not None and sk not in todo and s._shared_envelope(sk) is None:
                todo[sk] = numbers
        if not todo:
            return True
        made = zero3_envelopes(root.profile, n, list(todo.values()), sharding=root.sharding,
                               wrap=root.fusion, algorithm=root.algorithm,
                               options=root.options, codec_cost=root.codec_cost,
                               compressed=compressed)
        for sk, got in zip(todo, made):
            if got is not None:
                _keep_envelope(sk, root, got)
        return True

    def _sharded_schedule(self, n, compressed, numbers, gradient_scale=None,
                          gradient_overhead=None, alpha_counts=False):
        """:func:`~scalemodel.sharding.sharded_schedule` of this scenario, with its
        ``numbers``: slowdown [-], collective, sync and bucket overheads [s]."""
        sigma, c0, sync, cb = numbers
        return sharded_schedule(
            self.profile, n, sharding=self.sharding, wrap=self.fusion,
            algorithm=self.algorithm, options=self.options, slowdown=sigma,
            collective_overhead=c0, sync_overhead=sync, bucket_overhead=cb,
            codec_cost=self.codec_cost, compressed=compressed,
            buckets=self._stretched(self.buckets, n)
            if hasattr(self.fusion, "buckets") else None,
            gradient_scale=1.0 if gradient_scale is None else gradient_scale,
            gradient_overhead=gradient_overhead, alpha_counts=alpha_counts)

    def _shared_schedule(self, n, compressed, numbers):
        """The schedule of :meth:`_sharded_schedule`, one for the scenarios whose inputs
        to it are equal (a fitted cluster's corners and alternatives mostly differ in
        what never enters it): keyed by those numbers and settings, the profile and the
        fusion compared by identity, the floats by their bits (a -0.0 is not a 0.0)."""
        if hasattr(self.fusion, "buckets"):  # stretched buckets made per call: not shared
            return self._sharded_schedule(n, compressed, numbers)
        sk = self._schedule_key(n, compressed, numbers)
        hit = None if sk is None else _SCHEDULES.get(sk)
        if sk is None:  # settings of one's own that cannot be hashed
            return self._sharded_schedule(n, compressed, numbers)
        if hit is not None and hit[0] is self.profile and hit[1] is self.fusion:
            _SCHEDULES.move_to_end(sk)
            return hit[2]
        sched = self._sharded_schedule(n, compressed, numbers)
        _SCHEDULES[sk] = (self.profile, self.fusion, sched)
        while len(_SCHEDULES) > SCENARIO_CACHE_SIZE:
            _SCHEDULES.popitem(last=False)
        return sched

    def _schedule_key(self, n, compressed, numbers):
        """The key of :data:`_SCHEDULES` (and :data:`_ENVELOPES`) for this scenario's
        schedule on ``n`` workers with its ``numbers`` (:meth:`schedule`): the numbers and
        settings, the profile and the fusion by identity, the floats with their signs (a
        -0.0 is not a 0.0); None when a setting cannot be hashed [-]."""
        head = self._schedule_head()
        if head is None:
            return None
        sigma, c0, sync, cb = numbers
        sign = math.copysign
        sk = (head, n, compressed, sigma, c0, sync, cb, sign(1.0, sigma), sign(1.0, c0),
              sign(1.0, sync), sign(1.0, cb))
        if not (type(sigma) in _FLOATS and type(c0) in _FLOATS and type(sync) in _FLOATS
                and type(cb) in _FLOATS):
            try:
                hash(sk)
            except TypeError:
                return None
        return sk

    def _schedule_head(self):
        """What :meth:`_schedule_key` takes from the settings (the profile and the fusion
        by identity, the sharding, algorithm, options and codec cost with its sign) as a
        number, equal for equal settings; made once per scenario, the corners of a fitted
        cluster taking their root's (:func:`_corner_siblings`: the same settings); None
        when a setting cannot be hashed [-]."""
        src = self._cache.get(("root",), self)
        head = src._cache.get(("schedule head",))
        if head is None:
            codec = self.codec_cost
            key = (id(self.profile), id(self.fusion), self.sharding, self.algorithm,
                   self.options, codec, math.copysign(1.0, codec))
            try:
                head = _HEADS.get(key)
            except TypeError:
                head = False
            else:
                if head is None:
                    if len(_HEADS) >= 4 * SCENARIO_CACHE_SIZE:
                        _HEADS.clear()
                    head = _HEADS[key] = next(_HEAD_IDS)
            src._cache[("schedule head",)] = head
        return None if head is False else head

    def _stretched(self, buckets, n):
        """``buckets`` with their ready times on the timeline of ``n`` workers
        (:math:`\\sigma_n` instead of :math:`\\sigma`)."""
        ratio = self.slowdown(n) / self.compute_slowdown
        if ratio == 1.0:
            return buckets
        return attrs.evolve(buckets, ready=np.asarray(buckets.ready, float) * ratio)

    def wire_map(self, n):
        """``(k1, k2)`` with :math:`x_\\text{eff} = \\max(k_1 x, k_2 / r)` for ``n``
        workers [-], [s/bit]."""
        n = int(n)
        if n not in self._wire:
            self.lines(n, False)
        return self._wire[n]

    def x_effective(self, n, x, r):
        """Time per wire bit of the slowest link, :math:`\\max(k_1 x, k_2/r)` [s/bit], for
        ``x = 1/(u B r)`` [s/bit] and ratio ``r`` [-]."""
        k1, k2 = self.wire_map(n)
        if k2 == 0.0:
            return x
        if type(x) in _FLOATS and type(r) in _FLOATS and r > 0:  # one question: in floats
            a, b = k1 * float(x), k2 / float(r)
            if a != b and a - a == 0.0 and b - b == 0.0:  # finite, and no tie (signed zeros)
                return np.float64(a if a > b else b)  # as np.maximum gives it
        return np.maximum(k1 * np.asarray(x, float), k2 / np.asarray(r, float))

    def iteration_times(self, n, x, r):
        """:math:`T_n` [s] at ``x = 1/(u bw r)`` [s/bit] and ratio ``r`` [-], vectorized.

        ``n`` (int array), ``x`` and ``r`` broadcast together; one envelope is evaluated
        per distinct ``n`` (and compressed flag, when encoding costs time).
        """
        n = np.asarray(n)
        r = np.asarray(r, dtype=float)
        if self.needs_plan:  # MG-WFBP: one plan per configuration
            n, x, r = np.broadcast_arrays(n, np.asarray(x, float), r)
            out = np.empty(n.shape)
            for idx in np.ndindex(n.shape):
                out[idx] = self.planned(n[idx], x[idx], r[idx]).iteration_times(
                    n[idx], x[idx], r[idx])
            return out
        shape = np.broadcast_shapes(n.shape, np.shape(x), r.shape)
        x = np.broadcast_to(x, shape)
        rr = np.broadcast_to(r, shape)
        out = np.empty(shape)
        nb = n.reshape((1,) * (len(shape) - n.ndim) + n.shape)
        if out.size == 0:  # an empty grid (n=[]): nothing to fill
            pass
        elif nb.size <= 4096:
            # n varies along its own axes: each value's block is a view (no masks over
            # the whole grid, which would cost one pass per worker count)
            axes = [d for d, k in enumerate(nb.shape) if k > 1]
            for idx in np.ndindex(*(nb.shape[d] for d in axes)):
                block = [slice(None)] * len(shape)
                for d, i in zip(axes, idx):
                    block[d] = slice(i, i + 1)
                block = tuple(block)
                self._fill(out, block, int(nb[block].flat[0]), x[block], rr[block])
        else:
            n_full = np.broadcast_to(nb, shape)
            for nv in np.unique(n):
                part = n_full == nv
                sub = np.empty(int(part.sum()))
                self._fill(sub, slice(None), int(nv), x[part], rr[part])
                out[part] = sub
        out += self.update(nb)
        if (nb == 1).any():  # one replica: the single worker's own time, as summed
            _one_replica(out, np.broadcast_to(nb, shape) == 1, self.profile.iteration_time)
        return out

    def step_time(self, n, end):
        """One iteration on ``n`` workers [s] whose envelope (:meth:`lines`) is ``end``
        [s] at its point: forward, ``end`` and update, in this order; with one replica
        the single worker's own time where it is that to rounding (within 8 units in the
        last place)."""
        p = self.profile
        total = self.forward(n) + end + self.update(n)
        if n != 1:
            return total
        if np.ndim(total):  # (the planner's rows at several points)
            total = np.array(total, float)
            _one_replica(total, True, p.iteration_time)
        elif abs(total - p.iteration_time) <= _ONE_REPLICA_ULPS * _EPS * total:
            return p.iteration_time
        return total

    def _fill(self, out, where, n, x, r):
        """``out[where]`` = forward + envelope for ``n`` workers at ``x``, ``r``."""
        compressed = (r > 1) & (self.codec_cost > 0)
        if not compressed.any() or compressed.all():
            env = self.lines(n, bool(compressed.flat[0]) if compressed.size else False)[1]
            out[where] = env(self.x_effective(n, x, r)) + self.forward(n)
            return
        block = np.empty(np.shape(x))
        for flag in (False, True):
            env = self.lines(n, flag)[1]
            part = compressed == flag
            block[part] = env(self.x_effective(n, x[part], r[part])) + self.forward(n)
        out[where] = block

    # ------------------------------------------------------------------ what binds

    def critical(self, n, lines, j, x_eff, *, r=1.0, bw=None):
        """What binds when line ``j`` of ``lines`` is the critical one at ``x_eff``, and
        the parts of the critical path [s] (see :data:`BINDINGS`)."""
        n = int(n)
        p = self.profile
        k1, k2 = self.wire_map(n)
        if k2 > 0 and (k1 == 0 or k2 / r >= k1 * x_eff * (1 - 1e-12)):
            wire = "intra-node"
        elif bw is not None and self.cluster is not None and self.cluster.ceiling_binds(bw):
            wire = "ceiling"
        else:
            wire = "bandwidth"
        with np.errstate(over="ignore"):  # an unbounded wire time is +inf
            value = lines.intercept[j] + lines.slope[j] * x_eff
            wire_time = float(lines.slope[j] * x_eff)
        if j == 0 or value <= lines.intercept[0] * (1 + 1e-12):
            # the backward pass itself ends last (ties included, e.g. n = 1)
            k = len(lines.intercept) - 1
            parts = self._compute_parts(n, p.grad_accum * (p.forward_time
                                                           + p.backward_time),
                                        k if self.sharding is None else self._hooks(n),
                                        host=self._host_part(n, k, k))
            if not parts:
                return "compute", {}
            name = max(parts, key=parts.get)
            return _PART_BINDING.get(name, name), parts
        parts = {"latency": float(lines.latency[j]), "bandwidth": wire_time,
                 "overhead": float(lines.overhead[j])}
        if lines.fixed[j] > 0:
            parts["fixed"] = float(lines.fixed[j])
        # the compute on this path: forward and the backward up to bucket j (the
        # micro-batches before it included), without the per-bucket work
        sigma_n, cb = self.slowdown(n), self.bucket_overhead(n)
        # (under sharding a line's hooks are not told apart from its compute)
        hooks = j if self.sharding is None else 0
        host = self._host_part(n, len(lines.intercept) - 1, j)
        compute = sigma_n * p.forward_time + float(lines.ready[j]) - hooks * cb
        if host:  # the host's delay of bucket j is in its ready time; g is not
            compute -= host - self.cluster.host.device_time
        parts.update(self._compute_parts(n, compute / sigma_n, hooks, host=host))
        name = max(parts, key=parts.get)
        return (wire if name == "bandwidth" else _PART_BINDING.get(name, name)), parts

    def _hooks(self, n):
        """Per-bucket hooks of one iteration on the compute path: the buckets, or under
        sharding the reduce-scatters of the rounds that reduce [-]."""
        if self.sharding is None:
            return len(self.buckets)
        sched = self.schedule(n)
        return sched.units * sched.gradient_rounds

    def _host_part(self, n, k, j):
        """The wrapper's host delay on a critical path through bucket ``j`` of ``k``
        (``j = k``: the end of backward) and its GPU work, :math:`d_j + g` of eq.
        :eq:`host-lead`; 0 without host costs [s]."""
        hd = self._host_delays_of(n, k)
        if hd is None or j == 0:
            return 0.0 if hd is None else float(self.cluster.host.device_time)
        return float(hd[j - 1]) + float(self.cluster.host.device_time)

    def _compute_parts(self, n, unslowed, buckets, host=0.0):
        """The framework parts of a critical path whose compute takes ``unslowed``
        seconds on one worker [s] and which holds ``buckets`` buckets' work [-]:
        ``slowdown`` (:math:`\\sigma - 1` of it), ``straggler``
        (:math:`\\sigma_n - \\sigma`), ``bucket_overhead``, ``iteration_overhead`` and
        the wrapper's host delay and GPU work ``host`` [s] (``wrapper_host``) and the
        offloaded step's shared host (``offload``, :meth:`host_sharing`), each only when
        positive [s]."""
        out = {}
        if n <= 1:
            return out
        sigma, sigma_n = self.compute_slowdown, self.slowdown(n)
        if sigma > 1:
            out["slowdown"] = float((sigma - 1) * unslowed)
        if sigma_n > sigma:
            out["straggler"] = float((sigma_n - sigma) * unslowed)
        cb, tw = self.bucket_overhead(n), self.iteration_overhead(n)
        if cb > 0 and buckets:
            out["bucket_overhead"] = float(buckets * cb)
        if tw > 0:
            out["iteration_overhead"] = float(tw)
        if host > 0:
            out["wrapper_host"] = float(host)
        shared = self.host_sharing(n)
        if shared > 0:
            out["offload"] = float(shared)
        return out


def _with_fixed_costs(hit, fixed, fix=None):
    """``(lines, envelope)``: the lines without fixed costs of ``hit`` (an entry of
    :data:`_LINES`) with the fixed costs ``fixed`` [s] of each bucket, their tail sums
    (``fix`` [s], 0 first, when already summed) added to the intercepts, in the order
    :func:`~scalemodel.overlap.overlap_lines` adds them (bit for bit the same); kept in
    the entry by ``fixed``, so that corners with the same fixed costs (of a ceiling, a
    utilization, the wrapper's per-iteration work) share lines and envelope."""
    base, made = hit[3], hit[5]
    fk = fixed.tobytes()
    if fk in made:
        return made[fk]
    if not np.count_nonzero(fixed):  # not fixed.any()
        lines = base
    else:
        if fix is None:
            fix = np.zeros(len(fixed) + 1)  # 0, then _tail_sum(fixed)
            np.cumsum(fixed[::-1], out=fix[:0:-1])
        lines = _with_fixed(base, fix)  # attrs.evolve(base, intercept=.. + fix, fixed=fix)
    if len(made) >= 8:
        made.clear()
    made[fk] = (lines, UpperEnvelope(lines.intercept, lines.slope))
    return made[fk]


def _fill_corner_lines(key, done):
    """Each corner scenario of ``done`` (``(scenario, buckets, cost, key of
    _LINES)`` of :meth:`Scenario._prime_corner_lines`) with its lines and envelope of
    ``key = (n, compressed)`` (as :meth:`Scenario.lines` keeps them), its fixed costs
    (:meth:`Scenario._fixed`) and their tail sums computed for all corners of one bucket
    count at once, each value with the same operations."""
    n, groups = key[0], {}
    for s, b, cost, sk in done:
        if key in s._cache or s.cluster is None:
            continue
        hit = _LINES.get(sk)
        if hit is not None and hit[0] is s.profile and hit[1] is b and hit[2] is cost \
                and len(b.nbytes):
            groups.setdefault(len(b.nbytes), []).append((s, hit))
    for k, rows in groups.items():
        fixed = np.zeros((len(rows), k))
        fixed += np.array([s.cluster.collective_overhead for s, _ in rows])[:, None]
        fixed[:, -1] += np.array([s.cluster.sync_overhead for s, _ in rows])
        fix = np.zeros((len(rows), k + 1))  # 0, then each row's _tail_sum
        np.cumsum(fixed[:, ::-1], axis=1, out=fix[:, :0:-1])
        if len(rows) >= _STACK_FROM:
            got = _with_fixed_costs_stacked([hit for _, hit in rows], fixed, fix)
        else:  # a few: one by one (the arrays of a batch cost more)
            got = [_with_fixed_costs(hit, f, t) for (_, hit), f, t in zip(rows, fixed, fix)]
        for (s, hit), made in zip(rows, got):
            s._cache[key] = made
            s._wire[n] = hit[4]


_STACK_FROM = 4
"""Corners of one bucket count from which their fixed costs and envelopes are made
together (:func:`_with_fixed_costs_stacked`) [-]."""


def _with_fixed_costs_stacked(hits, fixed, fix):
    """:func:`_with_fixed_costs` of each entry of ``hits`` with its row of ``fixed``
    and of their tail sums ``fix`` [s] (one bucket count), the intercepts of all the new
    lines added in one call and their envelopes made together
    (:func:`~scalemodel.overlap._envelopes`): the same values, kept in each entry as
    :func:`_with_fixed_costs` keeps them (one pair per entry and fixed costs) [-]."""
    keys = [f.tobytes() for f in fixed]
    out, new, where = [], [], {}
    for j, (hit, fk) in enumerate(zip(hits, keys)):
        rk = (id(hit), fk)
        if rk not in where:
            have = hit[5].get(fk)
            where[rk] = have if have is not None else len(new)
            if have is None:
                new.append(j)
        out.append(rk)
    if new:
        rows = new if len(new) < len(hits) else slice(None)
        nonzero = fixed[rows].any(axis=1).tolist()  # as np.count_nonzero of each row
        icpt = np.array([hits[j][3].intercept for j in new])
        icpt += fix[rows]
        for i, j in enumerate(new):
            if not nonzero[i]:  # no fixed costs: the lines without them, as they are
                icpt[i] = hits[j][3].intercept
        envs = _envelopes(icpt, np.array([hits[j][3].slope for j in new]))
        for i, j in enumerate(new):
            hit, base = hits[j], hits[j][3]
            lines = _with_fixed(base, fix[j], icpt[i]) if nonzero[i] else base
            made = hit[5]
            if len(made) >= 8:
                made.clear()
            made[keys[j]] = where[(id(hit), keys[j])] = (lines, envs[i])
    return [where[rk] for rk in out]


def _wire(n, cost):
    """The bits on the slowest link of each bucket of ``cost`` (a
    :class:`~scalemodel.collectives.CollectiveCost`) and the wire map ``(k1, k2)`` of
    :meth:`Scenario.x_effective`, for ``n`` workers: the network's bits, or inside one
    node the intra-node link's [bit], [-], [s/bit]."""
    bits, intra = np.asarray(cost.bits, float), np.asarray(cost.intra_bits, float)
    has_intra = np.count_nonzero(intra) > 0  # .any(), without its Python wrapper
    if n > 1 and has_intra and not np.count_nonzero(bits):  # one node: intra is the wire
        return intra, (0.0, 1.0 / cost.intra_bw)
    if has_intra:
        pos = bits > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(pos, intra / np.where(pos, bits, 1.0), 0.0)
        return bits, (1.0, float(rho.max()) / cost.intra_bw)
    return bits, (1.0, 0.0)


def _sibling(root, cluster):
    """The scenario that :meth:`Scenario.build` makes of ``cluster`` from ``root``, the
    scenario of a cluster that differs from it in numbers only (:func:`_build_key`):
    ``root`` with ``cluster``. The corners of ``root``'s fitted cluster (its intervals'
    and its alternatives', :func:`_corner_siblings`) are made together on the first
    such question and keep ``root``, which makes their lines together
    (:meth:`Scenario._prime_corner_lines`) [-]."""
    near = root._cache.get(("siblings",))
    if near is None:
        near = root._cache[("siblings",)] = _corner_siblings(root)
    sc = near.get(id(cluster))
    if sc is not None and sc.cluster is cluster:
        return sc
    if root.model_parallel is not None:  # the NIC's terms as one ring sees them, as built
        cluster = cluster.ring_view(root.bw_scale)
    return attrs.evolve(root, cluster=cluster)


def _corner_scenario(sc, cluster):
    """The scenario that :meth:`Scenario.build` makes of ``cluster`` with the other
    arguments that made ``sc``, when ``cluster`` is a corner of the intervals or
    alternatives of ``sc``'s fitted cluster (:func:`_corner_siblings`), without the
    build's argument checks and cache keys; None otherwise (and under MG-WFBP, whose
    scenarios are planned per question). Warns of the settings ``sc`` ignores, as
    :meth:`Scenario.build` does [-].

    Parameters
    ----------
    sc : Scenario
        A scenario made by :meth:`Scenario.build` on a fitted cluster [-].
    cluster : ClusterProfile
        A corner of its cluster, or its cluster under an alternative [-].
    """
    if sc.cluster is None or isinstance(sc.fusion, MGWFBP) or sc.needs_plan:
        return None
    root = sc._cache.get(("root",), sc)
    near = root._cache.get(("siblings",))
    if near is None:
        near = root._cache[("siblings",)] = _corner_siblings(root)
    out = near.get(id(cluster))
    if out is None or out.cluster is not cluster:
        return None
    if out.ignored:
        out.warn_ignored()
    return out


def _corner_siblings(root):
    """``{id(cluster): scenario}``: ``root``, and ``root`` with the cluster of each other
    corner of its fitted cluster's intervals and alternatives (:func:`_interval_family`)
    that :meth:`Scenario.build` would make from it (the same build but for the cluster's
    numbers, :func:`_build_key`), each marked with ``root`` [-]."""
    cl = root.cluster
    out = {id(cl): root}
    if not (cl.intervals or cl.alternatives):
        return out
    args = _init_args(root)
    at = _SCENARIO_INIT.index("cluster")
    for c in _sibling_clusters(cl, root._cache.get(("raw profile",))):
        args[at] = c  # attrs.evolve(root, cluster=c), without its introspection
        sc = out[id(c)] = Scenario(*args)
        sc._cache[("root",)] = root
    return out


def _sibling_clusters(cl, raw):
    """The clusters of :func:`_corner_siblings` for the fitted cluster ``cl`` and the
    profile ``raw`` that :meth:`Scenario.build` started from (or None), in order: each
    corner and explanation of :func:`_interval_family` but ``cl`` that builds what ``cl``
    builds (:func:`_build_key`, :func:`_same_but_efficiency`). What they read of ``cl``,
    its corners and ``raw`` does not change, so the list is made once per cluster object
    and profile (kept in the cluster's ``_derived``, as its corners are, with ``raw``
    compared by identity) [-]."""
    derived = getattr(cl, "_derived", None)
    kept = None if derived is None else derived.get(("sibling clusters",))
    if kept is None:
        kept = {}
        if derived is not None:
            derived[("sibling clusters",)] = kept
    hit = kept.get(id(raw))
    if hit is not None and hit[0] is raw:
        return hit[1]
    own = _build_key(cl)
    free = raw is not None and fitted_efficiency(cl, raw) is None  # (none for the best)
    seen, made = {id(cl)}, []
    no_eff = {}  # _same_but_efficiency's efficiency test, per extra (all it reads of c)
    for c in (x for f, ends in _interval_family(cl) for x in (f, *ends)):
        if id(c) in seen:
            continue
        if (c.extra is cl.extra and c.provenance is cl.provenance
                and c.reduction is cl.reduction and c.fit_settings == cl.fit_settings
                and c.alpha == cl.alpha and c.topology == cl.topology
                and c.overlap == cl.overlap):
            pass  # _build_key(c) == own (equal settings: equal sorted items)
        else:
            key = _build_key(c)
            if key != own:  # _same_but_efficiency, its key made once
                if not (free and key[1:] == own[1:]):
                    continue
                same = no_eff.get(id(c.extra))
                if same is None:
                    same = no_eff[id(c.extra)] = fitted_efficiency(c, raw) is None
                if not same:
                    continue
        seen.add(id(c))
        made.append(c)
    made = tuple(made)
    if len(kept) >= 16:  # (many profiles asked of one cluster)
        kept.clear()
    kept[id(raw)] = (raw, made)
    return made


def _same_but_efficiency(c, own, raw):
    """Whether corner ``c`` builds from the profile ``raw`` (the one
    :meth:`Scenario.build` started from) what the best cluster, whose
    :func:`_build_key` is ``own`` and which carries no efficiency for ``raw``, builds:
    their keys differ in ``extra`` alone, and ``c`` carries no efficiency for ``raw``
    either (:func:`~scalemodel.efficiency.fitted_efficiency`: a measured profile, or one
    of another GPU), the only term of ``extra`` a build reads [-]."""
    return _build_key(c)[1:] == own[1:] and fitted_efficiency(c, raw) is None


def _corners_only(sc):
    """Mark the root of ``sc``'s corner scenarios (:func:`_corner_siblings`) for a
    question answered at the corners only (:func:`iteration_time`, which never asks an
    alternative's own explanation): its corners' lines are then primed first, the
    alternatives' own ones when the first of them asks
    (:meth:`Scenario._prime_corner_lines`) [-]."""
    root = sc._cache.get(("root",), sc)
    cl = root.cluster
    if cl is None or ("corners only",) in root._cache:
        return
    root._cache[("corners only",)] = {id(cl)} | {id(e) for _, ends in _interval_family(cl)
                                                 for e in ends}


def _interval_family(cl):
    """``[(explanation, ends)]``: each explanation of the fitted cluster ``cl`` (itself
    first, then its alternatives) and the clusters an answer's interval evaluates for it,
    its corners and the pair with their efficiencies swapped
    (:func:`~scalemodel.intervals.corner_clusters`) [-]."""
    from .intervals import corner_clusters

    return [(f, ends) for _, f, ends in corner_clusters(cl, swap_efficiency=True)]


_SCENARIO_INIT = tuple(a.name for a in attrs.fields(Scenario) if a.init)
"""The fields :class:`Scenario` takes, in its ``__init__``'s order (all positional;
tests/test_interval_speedups.py compares a corner's scenario with its build field by
field)."""


def _init_args(sc):
    """The positional arguments that make ``sc`` again (:data:`_SCENARIO_INIT`), as a
    list [-]."""
    return [getattr(sc, name) for name in _SCENARIO_INIT]


def _stacked_base_lines(key, items):
    """:meth:`Scenario.make_lines` without fixed costs for each ``(scenario, buckets,
    cost)`` of ``items`` (plain ones of one bucket count, :meth:`Scenario._plain_lines`),
    each value computed with the same operations: the ready times of all in one pass;
    items of one collective cost share its tail sums, made once
    (:func:`~scalemodel.overlap._lines_shared`), items of several costs are summed in one
    pass (:func:`~scalemodel.overlap._lines_stacked`); with each its wire map [-]."""
    n = key[0]
    ready, bwd, xmaps, wires, groups = [], [], [], {}, {}
    ratio, cbs, shift = [], [], []
    for i, (s, b, cost) in enumerate(items):
        p, sigma, cb = s.profile, s.slowdown(n), s.bucket_overhead(n)
        k = len(b.nbytes)
        codec = key[1] and n > 1  # the encode and decode on the channel
        gk = (id(cost), b.nbytes.tobytes(), s.codec_cost) if codec else id(cost)
        if gk not in groups:
            groups[gk] = (cost.overhead + s.codec_cost * b.nbytes if codec
                          else cost.overhead, cost, [])
        groups[gk][2].append(i)
        ready.append(b.ready)
        if id(cost) not in wires:
            wires[id(cost)] = _wire(n, cost)
        xmaps.append(wires[id(cost)][1])
        ratio.append(sigma / s.compute_slowdown)
        cbs.append(cb)
        sh = (p.grad_accum - 1) * sigma * (p.forward_time + p.backward_time)
        shift.append(sh)
        bwd.append(float(sigma * p.backward_time + k * cb + sh + 0.0))
    r = np.array(ready) * np.array(ratio)[:, None]
    cb = np.array(cbs)
    if (cb > 0).any():  # the framework's work per bucket, where there is some
        r = np.where((cb > 0)[:, None], r + cb[:, None] * np.arange(1, r.shape[1] + 1), r)
    r = r + np.array(shift)[:, None]
    bwd = np.array(bwd)
    if len(groups) > 1:  # several costs (buckets of other sizes): all in one pass
        each = [groups[k] for k in groups for _ in groups[k][2]]
        order = [i for k in groups for i in groups[k][2]]
        made = _lines_stacked(r[order], np.array([g[1].latency for g in each]),
                              np.array([g[0] for g in each]),
                              np.array([wires[id(g[1])][0] for g in each]), bwd[order])
        lines = [None] * len(items)
        for i, one in zip(order, made):
            lines[i] = one
        return list(zip(lines, xmaps))
    ovh, cost, _ = next(iter(groups.values()))
    return list(zip(_lines_shared(r, cost.latency, ovh, wires[id(cost)][0], bwd), xmaps))


def _binding(lines, j, x):
    """What binds when line ``j`` of ``lines`` is the critical one at ``x`` (no cluster
    terms; see :meth:`Scenario.critical`)."""
    value = lines.intercept[j] + lines.slope[j] * x
    if j == 0 or value <= lines.intercept[0] * (1 + 1e-12):
        return "compute", {}
    parts = {"latency": float(lines.latency[j]), "bandwidth": float(lines.bits[j] * x),
             "overhead": float(lines.overhead[j])}
    if lines.fixed[j] > 0:
        parts["fixed"] = float(lines.fixed[j])
    return max(parts, key=parts.get), parts


def effective_utilization(scenario, bw, utilization):
    """Utilization [-] times the cluster's achieved fraction of line rate ``bw`` [bits/s]."""
    cl = scenario.cluster
    if cl is None:
        return utilization
    if type(bw) in _FLOATS and type(utilization) in _FLOATS and cl.table_line_rate is None:
        # one question, in floats: the same operations as utilization_at's arrays
        a, cap = float(cl.utilization), None if cl.ceiling is None else cl.ceiling / bw
        if 0.0 < a < math.inf and (cap is None or 0.0 < cap < math.inf):
            return float(utilization * (a if cap is None or a <= cap else cap))
    u = utilization * cl.utilization_at(bw)
    return float(u) if np.ndim(u) == 0 else u


def _prepare(n, bw, utilization, compression):
    n = check_count(n, "n")
    bw = parse_bandwidth(bw, "bw")
    u = check_fraction(utilization, "utilization")
    r = check_ratio(compression, "compression")
    broadcast_shape(n=n, bw=bw, utilization=u, compression=r)
    return n, bw, u, r


TOPOLOGY_DOC = """alpha : float or None
        Per-message network latency; ``None`` means the cluster's, else 0 as in the
        paper's what-if analysis [s].
    codec_cost : float
        Encode + decode time per uncompressed gradient byte when compression > 1 [s/byte].
    gpus_per_node : int or None
        Workers per node; ``None`` means the cluster's, else no topology (every worker
        its own link; 8 for ``"hierarchical"``). With ``offload``, also the GPUs that
        share a host's CPU step (``None``: the GPU's usual server, else ``tp``, eq.
        :eq:`offload-host`); with ``sharding="hybrid_shard"`` the shard group's node
        (``None``: the GPU's usual server, else 8 for a device that is not built in)
        [workers].
    nics_per_node : int or None
        NICs per node, each at ``bw``; ``None`` means the cluster's, else 1 [NICs].
    intra_bw : float, str or None
        Intra-node link rate per GPU; ``None`` means the cluster's, else that of the
        built-in GPU a FLOP-derived profile computes on (its spec's rate per direction;
        its architecture then also sets NCCL's choice;
        :func:`~scalemodel.efficiency.gpu_topology`), else 2.4e12 (V100 NVLink) [bits/s].
    intra_alpha : float or None
        Intra-node step latency; ``None`` means the cluster's, else 0 [s].
    ps_servers : int or None
        Dedicated parameter servers for ``"ps"``; None means co-located shards [servers].
    cluster : ClusterProfile, str or os.PathLike, optional
        A calibrated cluster (object or JSON file): supplies the latency, the achieved
        fraction of each line rate (which ``utilization`` then multiplies), the topology,
        the compute slowdown, the fixed costs and, when it has one, the reduction cost.
        See :mod:`scalemodel.cluster` [-].
    sharding : str, Sharding or None
        ``None`` means the cluster's fit setting, else ``"none"``; ``"none"`` (plain data
        parallelism, DDP: the default), ``"zero1"``, ``"zero2"``
        (``"shard_grad_op"``), ``"zero3"`` (``"full_shard"``, ``"fsdp"``) or
        ``"hybrid_shard"``, or a :class:`~scalemodel.sharding.Sharding` with the
        parameter and reduce dtypes; see :mod:`scalemodel.sharding`. Sharding needs
        ``n >= 2``; its optimizer step runs on the local shard, so the scaling factor can
        exceed 1 when communication hides [-].
    activation_checkpointing : str, bool, float, Checkpointing or None
        ``"none"`` (None, False: the default), ``"selective"``, ``"full"`` (True) or a
        fraction of the layers checkpointed fully: each checkpointed block's recompute
        runs at the start of its backward (:mod:`scalemodel.checkpointing`), in the
        single-worker time too [-].
    offload : str or None
        ``"none"`` (the default), ``"optimizer"`` (ZeRO-Offload) or
        ``"optimizer+parameters"`` (FSDP ``CPUOffload``; ``zero3`` / ``hybrid_shard``):
        the optimizer step becomes the host transfers and the CPU step
        (:mod:`scalemodel.offload`) [-].
    shard_group : int or None
        ``zero1`` / ``zero2`` / ``zero3``: shard over groups of this many GPUs, replicated
        across the ``n / shard_group`` groups (InternLM's ``zero1=8``, MiCS, HSDP with any
        group; :mod:`scalemodel.sharding`, eq. :eq:`shard-group`); must divide ``n``
        (with ``tp``: ``n / tp``, it counts data-parallel GPUs).
        None: one group of all ``n`` GPUs [GPUs].
    tp : int
        Tensor-parallel GPUs per replica (Megatron-style, inside a node): ``n`` counts all
        GPUs, the answers are for the data-parallel dimension of ``n / (tp pp)`` replicas
        (:mod:`scalemodel.parallel`); needs a profile with a transformer config. With
        ``sharding`` (``pp = 1``) each GPU's ``1/tp`` slice is sharded over its
        ``n / tp`` data-parallel GPUs (FSDP x TP) [GPUs].
    pp : int
        Pipeline stages per replica, 1F1B [stages].
    microbatches : int or None
        Micro-batches per step and replica; required with ``pp > 1``; None: the
        profile's ``grad_accum`` [micro-batches].
    virtual_stages : int
        Model chunks per pipeline stage: > 1 is Megatron's interleaved 1F1B, whose bubble
        is ``(pp - 1) / (virtual_stages * microbatches)`` (eq. :eq:`pp-interleaved`)
        [chunks].
    sequence_parallel : bool
        Megatron-style sequence parallelism over the ``tp`` ranks (``--sequence-parallel``;
        torchtitan's 2-D plan): the tensor-parallel all-reduces become reduce-scatter +
        all-gather pairs of the same time (eq. :eq:`tp-compute` unchanged), and memory
        (the memory checks) counts the activations split along the sequence (Korthikanti
        et al., Sec. 4.2.2). With ``tp == 1`` it is ignored, with a
        :class:`~scalemodel.exceptions.ModelWarning`; not a bool: ParameterTypeError [-]."""


def _refuse_sharded_pipeline(shard, pp, from_fit=False):
    """Refuse sharding with a pipeline (``pp`` an integer > 1; anything else in it is
    left to :func:`~scalemodel.parallel.resolve_model_parallel`), which is not modelled
    [-]; ``from_fit``: the sharding is the cluster's fit setting, not the caller's."""
    if (shard.sharded and isinstance(pp, (int, np.integer))
            and not isinstance(pp, (bool, np.bool_)) and pp > 1):
        where = " (the cluster's fit setting: it was fitted under it)" if from_fit else ""
        raise InvalidParameterError(
            "pp", pp, f"sharding={shard.strategy!r}{where} with pipeline parallelism "
            "is not modelled (tensor parallelism with sharding is: tp=, pp=1)",
            "Use sharding='none' (DDP across the replicas), or pp=1")


def _check_model_parallel_scope(mp, shard, options=None):
    """Refuse, by name, what tensor and pipeline parallelism are not modelled with:
    sharding with a pipeline, ``hybrid_shard`` with fewer than two data-parallel GPUs per
    node (:mod:`scalemodel.parallel`)."""
    if not mp.active:
        return
    _refuse_sharded_pipeline(shard, mp.pp)
    gpn = None if options is None else options.gpus_per_node
    if shard.strategy == "hybrid_shard" and (gpn is None or gpn % mp.tp
                                             or gpn // mp.tp < 2):
        raise InvalidParameterError(
            "sharding", shard.strategy, f"with tp={mp.tp} hybrid_shard shards over the "
            f"gpus_per_node / tp data-parallel GPUs of a node, which needs gpus_per_node a "
            f"multiple of {2 * mp.tp} (got {gpn})",
            "Use shard_group= (counted in data-parallel GPUs), or another sharding")


def _with_shard_group(shard, shard_group):
    """``shard`` with ``shard_group`` (validated by :class:`Sharding`)."""
    if shard_group is None:
        return shard
    if not shard.sharded:
        raise InvalidParameterError("shard_group", shard_group, "needs sharding='zero1', "
                                    "'zero2' or 'zero3'")
    if shard.shard_group is not None and shard.shard_group != shard_group:
        raise InvalidParameterError("shard_group", shard_group, "differs from the "
                                    f"Sharding's shard_group={shard.shard_group}")
    return attrs.evolve(shard, shard_group=shard_group)


def scaling_factor(model, n, bw, *, utilization=1.0, compression=1.0, algorithm=None,
                   fusion=None, alpha=None, codec_cost=0.0, gpus_per_node=None,
                   nics_per_node=None, intra_bw=None, intra_alpha=None, ps_servers=None,
                   cluster=None, sharding=None, activation_checkpointing=None, offload=None,
                   shard_group=None, tp=1, pp=1, microbatches=None, virtual_stages=1,
                   sequence_parallel=False):
    r"""Scaling factor of data-parallel training, equation :eq:`scaling-factor`.

    Any of ``n``, ``bw``, ``utilization`` and ``compression`` may be an array; they
    broadcast together (numpy rules) and the result is an array of their shape, computed
    in one vectorized pass (one envelope per distinct ``n``).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        A built-in profile name (:func:`~scalemodel.list_profiles`), a profile file, or a
        profile object [-].
    n : int or array_like of int
        Number of workers, >= 1 [workers].
    bw : float, str or array_like
        Line rate of each worker's network link (of each NIC with a topology); strings
        such as ``"10Gbps"`` are accepted (see :func:`~scalemodel.parse_bandwidth`)
        [bits/s].
    utilization : float or array_like
        Fraction of the line rate the transport achieves, in (0, 1] [-].
    compression : float or array_like
        Compression ratio r >= 1 dividing the bytes on the wire (under sharding, of every
        collective) [-].
    algorithm : str or None
        Collective: ``"ring"``, ``"tree"``, ``"halving-doubling"``, ``"hierarchical"``,
        ``"allgather"`` or ``"ps"``; ``None`` means the one the cluster was fitted under
        (its ``fit_settings``), else ``"ring"`` [-].
    fusion : str, fusion policy or None
        ``None`` means the cluster's fit setting, else the default below: ``"ddp"``
        (PyTorch DDP buckets, the default), ``"horovod"``, ``"none"`` (per
        tensor, WFBP), ``"bsp"`` (all after backward) or ``"mg-wfbp"``; under sharding the
        wrapping policy: ``"block"`` (the default; FSDP), ``"module"`` (DeepSpeed
        ZeRO-3), ``"none"`` or a :class:`~scalemodel.sharding.SizeWrap` [-].
    {topology}

    Returns
    -------
    float or numpy.ndarray
        Scaling factor, in (0, 1] without sharding [-].

    Examples
    --------
    >>> import scalemodel
    >>> round(scalemodel.scaling_factor("resnet50", n=64, bw="10Gbps", fusion="horovod"), 3)
    0.556
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    warn_unused_codec_cost(codec_cost, r)
    sc = Scenario.build(model, algorithm=algorithm, fusion=fusion, alpha=alpha,
                        codec_cost=codec_cost, gpus_per_node=gpus_per_node,
                        nics_per_node=nics_per_node, intra_bw=intra_bw,
                        intra_alpha=intra_alpha, ps_servers=ps_servers, cluster=cluster,
                        sharding=sharding, activation_checkpointing=activation_checkpointing,
                        offload=offload, shard_group=shard_group, tp=tp, pp=pp,
                        microbatches=microbatches, virtual_stages=virtual_stages,
                        sequence_parallel=sequence_parallel)
    n, bw = sc.data_parallel(n, bw)
    u = effective_utilization(sc, bw, u)
    with np.errstate(over="ignore"):  # (a ratio near the largest float: x = 0)
        x = 1.0 / (np.multiply(np.multiply(u, bw), r))
    t = sc.iteration_times(n, x, r)
    sf = sc.profile.iteration_time / t
    return float(sf) if sf.ndim == 0 else sf


scaling_factor.__doc__ = scaling_factor.__doc__.replace("{topology}", TOPOLOGY_DOC)


@attrs.frozen
class IterationTime:
    """Where the time of one iteration goes.

    Attributes
    ----------
    forward : float
        Forward passes and everything before backward, slowdown included; with gradient
        accumulation those of every micro-batch; on a cluster with a per-iteration
        wrapper cost :math:`t_w` that too [s].
    backward : float
        Backward passes, slowdown included (every micro-batch's), with the framework's
        per-bucket work :math:`K c_b` that delays the last one [s].
    exposed_communication : float
        Communication that ends after backward, i.e. not hidden by it; under sharding
        all communication not hidden behind forward or backward [s].
    update : float
        Optimizer step (under sharding on the local shard of the state) [s].
    total : float
        forward + backward + exposed_communication + update [s].
    communication : float
        Total time the channel is busy, hidden or not [s].
    scaling_factor : float
        Single-worker over this iteration time [-].
    n_buckets : int
        Messages (collectives) per iteration (optimizer step) [-].
    binding : str
        What binds, one of :data:`BINDINGS`: ``"compute"`` (or ``"slowdown"``) when
        communication is hidden, else the largest part on the critical path.
    critical_parts : dict
        The critical path's parts [s]: latency, bandwidth (wire), overhead, and with a
        cluster fixed costs, slowdown, ``straggler`` (the wait for the slowest worker),
        ``bucket_overhead`` and ``iteration_overhead``; with hidden communication only
        the last four and the slowdown.
    compute_slowdown : float
        The compute slowdown that applied, :math:`\\sigma_n` with the straggler wait
        [-].
    scaling_factor_interval : tuple of float
        ``(low, high)`` of the scaling factor over the cluster's fitted intervals and its
        alternative explanations (:func:`~scalemodel.intervals.answer_interval`);
        ``(scaling_factor, scaling_factor)`` without a fitted cluster [-].
    total_interval : tuple
        ``(low, high)`` of the iteration time over the same intervals and alternatives
        and the cluster's fitted efficiency, the corners also taken with their
        efficiencies swapped (:func:`~scalemodel.intervals.iteration_time_interval`); an
        unbounded end is None; ``(total, total)`` without a fitted cluster [s]. A
        memory-pressured job widens the slow ends of both intervals (see
        ``memory_pressure``).
    settings : dict
        What the answer assumed (:meth:`Scenario.settings`): collective, fusion or
        wrapping, sharding, activation checkpointing, offload, topology, cluster.
    memory_pressure : str
        Empty, or why the job is memory-pressured: its model state per GPU reaches
        :data:`~scalemodel.efficiency.MEMORY_PRESSURE_SHARE` of the GPU's memory
        (:func:`~scalemodel.efficiency.job_memory_pressure`), a slowdown the model does
        not represent. The point answer stays; the slow end of ``total_interval`` (the
        fit's, at least ``total``) is taken
        :data:`~scalemodel.efficiency.MEMORY_PRESSURE_SLOWDOWN` times and that of
        ``scaling_factor_interval`` (at most ``scaling_factor``) divided by it, and a
        :class:`~scalemodel.exceptions.ModelWarning` says so [-].
    efficiency_carried : str
        Empty, or how the cluster's fitted efficiency is carried to this job when its
        runs were of another model, tensor-parallel degree or micro-batch
        (:func:`~scalemodel.efficiency.carried_note`): which ends of the intervals it
        widens [-].
    model_discrepancy : str
        Empty, or why both intervals are widened by the fit's miss of its own calibration
        runs (eq. :eq:`model-discrepancy`, :mod:`scalemodel.discrepancy`): the time's to
        ``[low / F, high F]``, the scaling factor's to ``[low / F, high F]`` [-].
    """

    forward: float
    backward: float
    exposed_communication: float
    update: float
    total: float
    communication: float
    scaling_factor: float
    n_buckets: int
    binding: str
    critical_parts: dict
    compute_slowdown: float = 1.0
    scaling_factor_interval: tuple = attrs.field(
        default=attrs.Factory(lambda self: (self.scaling_factor, self.scaling_factor),
                              takes_self=True))
    settings: dict = attrs.field(factory=dict)
    total_interval: tuple = attrs.field(
        default=attrs.Factory(lambda self: (self.total, self.total), takes_self=True))
    memory_pressure: str = ""
    efficiency_carried: str = ""
    model_discrepancy: str = ""


def iteration_time(model, n, bw, *, utilization=1.0, compression=1.0, algorithm=None,
                   fusion=None, alpha=None, codec_cost=0.0, gpus_per_node=None,
                   nics_per_node=None, intra_bw=None, intra_alpha=None, ps_servers=None,
                   cluster=None, sharding=None, activation_checkpointing=None,
                   offload=None, shard_group=None, tp=1, pp=1,
                   microbatches=None, virtual_stages=1,
                   sequence_parallel=False) -> IterationTime:
    """Breakdown of one iteration for one configuration (scalars only).

    Parameters
    ----------
    model, n, bw, utilization, compression, algorithm, fusion, alpha, codec_cost, gpus_per_node, nics_per_node, intra_bw, intra_alpha, ps_servers, cluster, sharding, activation_checkpointing, offload, shard_group, tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`scaling_factor`, scalars only: ``n`` [workers], ``bw`` [bits/s],
        ``utilization`` [-], ``compression`` [-], ``alpha`` [s], ``codec_cost``
        [s/byte], ``gpus_per_node`` [workers], ``nics_per_node`` [NICs], ``intra_bw``
        [bits/s], ``intra_alpha`` [s], ``ps_servers`` [servers], ``sharding`` [-],
        ``activation_checkpointing`` [-], ``offload`` [-], ``shard_group`` [GPUs],
        ``tp`` [GPUs], ``pp`` [stages], ``microbatches`` [micro-batches],
        ``virtual_stages`` [chunks], ``sequence_parallel`` [-]. With ``tp`` or
        ``pp`` the forward and backward include the pipeline bubble, and ``update`` is
        the step on the GPU's share of the state.

    Returns
    -------
    IterationTime
        Forward, backward, exposed communication and update [s], and what binds; on a
        fitted cluster the intervals of the scaling factor and of the iteration time
        (``scaling_factor_interval``, ``total_interval``).
    """
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    for name, v in (("n", n), ("bw", bw), ("utilization", u), ("compression", r)):
        if np.ndim(v):
            raise ParameterTypeError(name, v, "a scalar (iteration_time describes one "
                                     "configuration; use scaling_factor for arrays)")
    warn_unused_codec_cost(codec_cost, r)
    asked = dict(utilization=u, compression=r, algorithm=algorithm, fusion=fusion,
                 alpha=alpha, codec_cost=codec_cost, gpus_per_node=gpus_per_node,
                 nics_per_node=nics_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
                 ps_servers=ps_servers, sharding=sharding,
                 activation_checkpointing=activation_checkpointing, offload=offload,
                 shard_group=shard_group, tp=tp, pp=pp, microbatches=microbatches,
                 virtual_stages=virtual_stages, sequence_parallel=sequence_parallel)
    res, sc = _breakdown(model, n, bw, cluster=cluster, **asked)
    cl = sc.cluster
    if cl is not None and (cl.alternatives or not all(c is cl for c in cl.corners())):
        res = _with_intervals(res, model, n, bw, sc, asked)
    res = _with_discrepancy(res, cl, sc.data_parallel(n, bw)[0], sc.sharding is not None)
    if cl is not None and "efficiency" in cl.extra:
        note = carried_note(cl, load_profile(model), 1 if sc.model_parallel is None
                            else int(sc.model_parallel.tp),
                            recompute=job_recompute_share(sc.profile))
        if note:
            res = attrs.evolve(res, efficiency_carried=note)
    return _with_memory_pressure(res, sc, n)


def _with_discrepancy(res, cluster, n_dp, sharded=False):
    """``res`` with both intervals widened by the model discrepancy of ``cluster``, the
    fit's miss of its own calibration runs (eq. :eq:`model-discrepancy`); unchanged when
    the fit reached every run, or for ``n_dp`` = 1 data-parallel worker
    (:mod:`scalemodel.discrepancy`). Without sharding (``sharded`` False) the widening
    stops at a scaling factor of 1 and at the single worker's step."""
    from .discrepancy import (discrepancy_factor, discrepancy_text, run_noise, widen_scaling,
                              widen_time)

    f = discrepancy_factor(cluster, n_dp)
    if f <= 1.0:
        return res
    # a job without sharding: no worker beats one worker alone (a scaling factor of 1,
    # the single worker's step); a sharded optimizer step can
    whole = not sharded
    nu = run_noise(cluster, n_dp)
    return attrs.evolve(res, total_interval=widen_time(
        *res.total_interval, f, res.total * res.scaling_factor if whole else None, nu,
        res.total), scaling_factor_interval=widen_scaling(
            *res.scaling_factor_interval, f, 1.0 if whole else None, nu,
            res.scaling_factor),
        model_discrepancy=discrepancy_text(cluster))


def _with_memory_pressure(res, sc, n):
    """``res`` with the slow ends of its intervals widened by
    :data:`~scalemodel.efficiency.MEMORY_PRESSURE_SLOWDOWN` and a
    :class:`~scalemodel.exceptions.ModelWarning`, when the job of ``n`` GPUs is
    memory-pressured (:func:`~scalemodel.efficiency.job_memory_pressure`). The factor
    multiplies the slow end the interval already had (the slowest step the fit allows
    an unpressured job, e.g. at an efficiency carried from another model): the factor was
    measured against the same model on more GPUs, so the two doubts compound."""
    from .efficiency import MEMORY_PRESSURE_SLOWDOWN

    p = _job_pressure(sc, n)
    if p is None:
        return res
    f = MEMORY_PRESSURE_SLOWDOWN
    lo, hi = res.total_interval  # the slowdown comes on top of the slowest unpressured
    slo, shi = res.scaling_factor_interval  # step the interval allows: the doubts compound
    return attrs.evolve(res, total_interval=(lo, None if hi is None else max(hi, res.total) * f),
                        scaling_factor_interval=(min(slo, res.scaling_factor) / f, shi),
                        memory_pressure=p.text)


def _job_pressure(sc, n, effect=None):
    """The :class:`~scalemodel.efficiency.MemoryPressure` of the job of scenario ``sc``
    on ``n`` GPUs when it is memory-pressured
    (:func:`~scalemodel.efficiency.job_memory_pressure` of its profile, sharding,
    tensor- and pipeline-parallel degrees, nodes and offload), with a
    :class:`~scalemodel.exceptions.ModelWarning` saying what the answer then does
    (``effect``; default: what the intervals of the iteration time and scaling factor
    do); None when it is not (or cannot be assessed) [-]."""
    from .efficiency import MEMORY_PRESSURE_SLOWDOWN, job_memory_pressure

    mp, st = sc.model_parallel, sc.settings()
    p = job_memory_pressure(sc.profile, int(n), sc.sharding or "none",
                            tp=1 if mp is None else mp.tp, pp=1 if mp is None else mp.pp,
                            gpus_per_node=st.get("gpus_per_node"),
                            offload=st.get("offload", "none"))
    if p is None or not p.pressured:
        return None
    if effect is None:
        effect = (f"the slow end of the iteration time's and the scaling factor's "
                  f"intervals is taken {MEMORY_PRESSURE_SLOWDOWN:g} times "
                  "(efficiency.MEMORY_PRESSURE_SLOWDOWN)")
    warn_model(f"{sc.profile.name} on {int(n)} GPUs: {p.text}; {effect}")
    return p


def _with_intervals(res, model, n, bw, sc, asked):
    """``res`` with the intervals of its scaling factor and iteration time over the
    corners and alternatives of the cluster of ``sc`` (its scenario), eq.
    (answer-interval), both from one evaluation per corner (the time also at the corners
    with their efficiencies swapped: :func:`~scalemodel.intervals.corner_clusters`)."""
    from .intervals import corner_clusters

    cl = sc.cluster
    sfs, totals = [res.scaling_factor], [res.total]
    u, r = asked["utilization"], asked["compression"]
    _corners_only(sc)  # the alternatives' own explanations are not asked here
    for i, c, ends in corner_clusters(cl, swap_efficiency=True):
        for k, e in enumerate(ends):
            if i == 0 and e is c:
                continue
            made = _corner_scenario(sc, e)
            if made is None:  # built from the arguments
                total, sf = _total(model, n, bw, cluster=e, **asked)[:2]
            else:  # (the other arguments only build a scenario)
                total, sf = _total(model, n, bw, cluster=e, utilization=u, compression=r,
                                   scenario=made, corner=True)[:2]
            totals.append(total)
            if k < 2:  # the swapped pair is for the time only
                sfs.append(sf)
    hi = max(totals)
    return attrs.evolve(res, scaling_factor_interval=(float(min(sfs)), float(max(sfs))),
                        total_interval=(float(min(totals)),
                                        None if math.isinf(hi) else float(hi)))


def _iteration_total(model, n, bw, *, cluster, utilization=1.0, compression=1.0,
                     **asked) -> float:
    """The iteration time of one configuration on ``cluster``, without intervals [s]
    (:func:`~scalemodel.intervals.iteration_time_interval` evaluates it at each corner)."""
    n, bw, u, r = _prepare(n, bw, utilization, compression)
    return _total(model, n, bw, cluster=cluster, utilization=u, compression=r,
                  **asked)[0]


def _total(model, n, bw, *, cluster, utilization, compression, scenario=None, corner=False,
           **kw):
    """``(total, scaling factor, scenario, n, bw, x, lines, envelope)`` of one
    configuration: the iteration time [s] and the scaling factor [-] of
    :func:`iteration_time` without the breakdown (what an interval's corner needs), and
    what :func:`_breakdown` goes on from; ``n``, ``bw``, ``utilization`` and
    ``compression`` as :func:`_prepare` returns them; ``scenario`` the build of these
    arguments when already made (:func:`_corner_scenario`); ``corner``: an interval's
    corner, which needs no lines (None in their place, :meth:`Scenario.corner_envelope`)."""
    u, r = utilization, compression
    sc = Scenario.build(model, cluster=cluster, **kw) if scenario is None else scenario
    n, bw = sc.data_parallel(n, bw)
    p = sc.profile
    u = effective_utilization(sc, bw, u)
    sc = sc.planned(n, 1.0 / (u * bw * r), r)
    if corner:  # the envelope alone (and its wire map before x_effective reads it)
        lines, env = None, sc.corner_envelope(n, r > 1)
    x = float(sc.x_effective(n, 1.0 / (u * bw * r), r))
    if not corner:
        lines, env = sc.lines(n, r > 1)
    total = sc.step_time(n, float(env(x)))
    return total, p.iteration_time / total, sc, n, bw, x, lines, env


def _breakdown(model, n, bw, *, cluster, utilization, compression, **kw):
    """``(IterationTime without intervals, Scenario)`` of one configuration: the steps
    of :func:`iteration_time`; ``n``, ``bw``, ``utilization`` and ``compression`` as
    :func:`_prepare` returns them."""
    r = compression
    total, sf, sc, n, bw, x, lines, env = _total(
        model, n, bw, cluster=cluster, utilization=utilization, compression=r, **kw)
    p = sc.profile
    j = int(env.argmax(x))
    binding, parts = sc.critical(n, lines, j, x, r=r, bw=bw)
    busy = (float(lines.latency[1] + lines.overhead[1] + lines.fixed[1] + lines.bits[1] * x)
            if n > 1 else 0.0)
    sigma = sc.slowdown(n)
    fwd, bwd = (p.grad_accum * sigma * t for t in (p.forward_time, p.backward_time))
    fwd += sc.iteration_overhead(n)  # the wrapper's work, before forward (DDP)
    update, messages = p.update_time, len(sc.buckets)
    if n > 1:
        bwd += sc._hooks(n) * sc.bucket_overhead(n)  # the per-bucket work delays backward
        hd = sc._host_delays_of(n, len(sc.buckets))
        if hd is not None:  # eq. (host-lead): the wrapper's GPU work and host delay
            fwd += sc.cluster.host.device_time
            bwd += float(hd[-1])
    if sc.sharding is not None:  # eq. (zero3): forward may wait, the step is sharded
        sched = sc.schedule(n, r > 1)
        busy, update, messages = sched.channel_time(x), sched.update, sched.n_collectives
    update += sc.host_sharing(n)  # eq. (offload-host): a node's GPUs share the host's CPU
    mp = sc.model_parallel
    if mp is not None and mp.pp > 1:  # eqs. (pp-iteration), (pp-interleaved), (pp-uneven)
        bub_f, bub_b = sc._bubble_parts()  # the bubble: compute, not the step,
        fwd = fwd + sigma * bub_f  # the other stages' (slowed) compute
        bwd = bwd + sigma * bub_b
        update -= bub_f + bub_b
    exposed = total - fwd - bwd - update  # rounding below 1e-12 of the step: none
    return IterationTime(
        forward=fwd, backward=bwd,
        exposed_communication=exposed if exposed > 1e-12 * total else 0.0,
        update=update, total=total, communication=busy,
        scaling_factor=sf, n_buckets=messages, binding=binding,
        critical_parts=parts, compute_slowdown=sigma, settings=sc.settings()), sc
