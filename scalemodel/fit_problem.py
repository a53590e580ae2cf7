"""The fit's problem: measured runs, the model's iteration times of them, the solver.

:class:`_Problem` maps a parameter vector to every run's model iteration time;
:func:`_solve` fits one set of free parameters (MAP with the priors of
:mod:`scalemodel.fit_priors`, soft-L1 on the runs).
"""

from __future__ import annotations

import itertools
import math

import attrs
import numpy as np

from .collectives import ReductionCost
from .efficiency import rescaled
from .exceptions import CalibrationError, ScalemodelError
from .fit_priors import PRIORS, UNIT_PRIORS
from .model import Scenario
from .overlap import UpperEnvelope

_ROBUST_SCALE = 3.0
"""Normalized residual beyond which a run's pull grows linearly, not quadratically (soft
L1 loss): one wild run cannot drag the fit [-]."""


MAX_RUNS = 100_000
"""Most runs :func:`~scalemodel.fit_cluster` takes [runs]. A fit evaluates every run in
one pass per parameter vector (a few thousand passes), vectorized over the runs of one
configuration (model, worker count and settings; their line rates): its time grows with
the distinct configurations, about 0.5 s each on one core (10^4 runs of 18
configurations in about 4 s, ``benchmarks/bench_fit.py``; 60 worker counts of one model
take 30 s, with 60 runs or 2000). Beyond this many runs, a sample tells as much."""

_DENSE_CELLS = 200_000
"""Lines x points below which a group's envelope is evaluated as one dense max [-]."""

_BARE = {"ceiling": None, "utilization": 1.0, "table_line_rate": None,
         "table_utilization": None, "sync_overhead": 0.0, "collective_overhead": 0.0,
         "bucket_overhead": 0.0, "iteration_overhead": 0.0, "straggler_spread": 0.0}
"""Cluster fields that :meth:`_Problem.predict` applies itself (set to these values on
the cluster the lines are built with); those the cluster does not have are skipped."""


def expected_max_normal(n):
    r""":math:`e_n = \Phi^{-1}((n - 0.375)/(n + 0.25))`, Blom's approximation of the
    expected maximum of ``n`` standard normals (0 for one) [-]."""
    from scipy.special import ndtri
    n = np.asarray(n, dtype=float)
    return ndtri((n - 0.375) / (n + 0.25))


def _scales_with_compute(fusion, sharding):
    """Whether a fusion's buckets are the same whatever the compute speed (size-based),
    so that the compute slowdown only scales the lines' compute part [-]."""
    from .fusion import AfterBackward, DDPBuckets, PerTensor, resolve_fusion
    if sharding != "none":
        return False
    try:
        policy = resolve_fusion("ddp" if fusion is None else fusion)
    except ScalemodelError:  # validated elsewhere; rebuild the lines then
        return False
    return isinstance(policy, (DDPBuckets, PerTensor, AfterBackward))


def _run_sharding(run):
    """A run's sharding as :class:`~scalemodel.model.Scenario` takes it: the strategy
    name, or a :class:`~scalemodel.sharding.Sharding` when the run gives a
    ``shard_group``."""
    strategy = getattr(run, "sharding", None) or "none"
    group = getattr(run, "shard_group", None)
    if group is None:
        return strategy
    from .sharding import Sharding
    return Sharding(strategy, shard_group=group)


def _gathers_per_unit(run):
    """Whether a run's sharding gathers the parameters per wrapped unit (``zero3``,
    ``hybrid_shard``): its ``bucket_overhead`` is then the wrapper's work per unit and
    micro-batch [-]."""
    sharding = _run_sharding(run)
    if isinstance(sharding, str):
        if sharding == "none":
            return False
        from .sharding import Sharding
        try:
            sharding = Sharding(sharding)
        except ScalemodelError:  # validated elsewhere
            return False
    return bool(sharding.full_shard)


class _Problem:
    """Runs, the fixed setting and how parameters map to a cluster.

    Runs are grouped by what fixes their lines (profile, fusion, algorithm, sharding,
    bucket cap, worker count); within a group only the line rate differs, and each
    distinct (group, line rate) is evaluated once, all of a group's at once."""

    def __init__(self, runs, base, settings, fixed):
        from .fusion import DDPBuckets
        self.runs = runs
        self.base = base
        self.settings = settings
        self.fixed = fixed  # name -> value (given or measured)
        self.bw_max = max(r.bw for r in runs)
        # what a unit of bucket_overhead is: DDP's gradient bucket, or (every run sharded
        # per unit) the wrapper's hooks per unit and micro-batch
        self.priors = dict(PRIORS)
        if all(_gathers_per_unit(r) for r in runs):
            self.priors.update(UNIT_PRIORS)
        self._fields = {f.name for f in attrs.fields(type(base))}
        configs, groups, config_of = {}, {}, np.empty(len(runs), dtype=np.int64)
        for i, r in enumerate(runs):
            fusion = r.fusion or settings["fusion"]
            cap = getattr(r, "bucket_cap_mb", None)
            if cap is not None:  # 0: one collective per tensor
                first = getattr(r, "first_bucket_mb", None)
                fusion = DDPBuckets(cap_bytes=float(cap) * 2.0**20,
                                    first_bucket_bytes=2.0**20 if first is None
                                    else float(first) * 2.0**20) if cap > 0 else "none"
            wrapped = bool(getattr(r, "wrapped", False)) and r.n == 1
            mp = getattr(r, "model_parallel", None)
            gkey = (id(r.profile), fusion, r.algorithm or settings["algorithm"],
                    _run_sharding(r), r.n, wrapped,
                    None if mp is None else (mp.tp, mp.pp, mp.microbatches,
                                             mp.virtual_stages, mp.sequence_parallel))
            if gkey not in groups:
                groups[gkey] = {"profile": r.profile, "configs": []}
            ckey = (gkey, r.bw)
            if ckey not in configs:
                configs[ckey] = len(configs)
                groups[gkey]["configs"].append(configs[ckey])
            config_of[i] = configs[ckey]
        self.groups = groups
        self.config_of = config_of
        self.config_bw = np.array([bw for (_, bw) in configs], dtype=float)
        for gkey, g in groups.items():
            g["configs"] = np.asarray(g["configs"], dtype=np.int64)
            g["linear"] = _scales_with_compute(gkey[1], gkey[3])
        # FLOP-derived profiles whose compute efficiency the runs may fit: the profile's
        # own efficiency is the prior's centre; runs with a scaling factor compare
        # relative times, the others absolute ones
        effs = [r.efficiency for r in runs if getattr(r, "efficiency", None)]
        self.e0 = float(effs[0]) if effs else PRIORS["efficiency"].default
        self.flop_run = np.array([not getattr(r, "compute_known", True) for r in runs])
        self.relative = np.array([r.measured_sf is not None for r in runs])
        for gkey, g in groups.items():
            g["flop"] = any(not getattr(r, "compute_known", True) for r in runs
                            if id(r.profile) == gkey[0])
        self.measured_t = np.empty(len(runs))
        self.sigma_t = np.array([r.uncertainty for r in runs])
        for i, r in enumerate(runs):
            sf = r.measured_sf
            t1 = r.profile.iteration_time
            self.measured_t[i] = t1 / sf if sf is not None else r.iteration_time

    def prior(self, name):
        """The prior of ``name`` for these runs: :data:`~scalemodel.fit_priors.PRIORS`,
        with :data:`~scalemodel.fit_priors.UNIT_PRIORS` in place where every run gathers
        its parameters per unit."""
        return self.priors[name]

    # parameter transforms: g(value) in fitting coordinates
    def to_g(self, name, value):
        p = self.prior(name)
        if name == "efficiency":
            return math.log(value / self.e0)
        if name == "ceiling":
            return math.log(self.bw_max / value) if math.isfinite(value) else 0.0
        if p.log:
            return math.log(value / p.default) if name != "utilization" else -math.log(value)
        return value

    def from_g(self, name, g):
        p = self.prior(name)
        if name == "efficiency":
            return self.e0 * math.exp(g)
        if name == "ceiling":
            return self.bw_max * math.exp(-g)
        if name == "utilization":
            return math.exp(-g)
        if p.log:
            return p.default * math.exp(g)
        return g

    def g_bounds(self, name):
        p = self.prior(name)
        if name == "efficiency":
            return math.log(p.lower / self.e0), math.log(p.upper / self.e0)
        if name == "ceiling":
            return 0.0, -math.log(p.lower)
        if name == "utilization":
            return 0.0, -math.log(p.lower)
        if p.log:
            return 0.0, math.log(p.upper / p.default)
        return p.lower, p.upper

    network = None
    """The transport's prior (:data:`~scalemodel.fit_priors.NETWORKS`), or None."""

    def g_default(self, name):
        """Centre of the prior in fitting coordinates."""
        net = self.network
        if name == "ceiling":
            if net is not None and net.ceiling is not None and net.ceiling < self.bw_max:
                return math.log(self.bw_max / net.ceiling)
            return 0.0
        if name == "utilization" and net is not None:
            return -math.log(net.utilization)
        p = self.prior(name)
        return 0.0 if p.log or name == "utilization" else p.default

    def prior_scale(self, name):
        """Scale of the prior in fitting coordinates."""
        net = self.network
        if net is not None and name == "utilization":
            return net.utilization_scale
        if net is not None and name == "ceiling" and net.ceiling is not None:
            return net.ceiling_scale
        return self.prior(name).scale

    def sees_bucket_counts(self):
        """Whether the runs hold their gradients in different numbers of buckets (DDP's
        or Horovod's, not a sharded wrapper's units): then each run's per-bucket work
        (``bucket_overhead``, on the compute path) differs, and holding it at its ideal
        0 is as much a choice the runs can see as fitting it
        (:func:`scalemodel.fitting._solve_each`) [-]."""
        try:
            entry = self._lines({})
        except ScalemodelError:
            return False
        counts = {float(e[6][0]) for gkey, e in entry.items()
                  if e[0] == "lines" and (gkey[4] > 1 or gkey[5])}
        return len(counts) > 1

    def rank_penalty(self, values):
        r"""Extra ranking penalty of an explanation on a transport that reaches its line
        rate (a network prior without a ceiling, :data:`~scalemodel.fit_priors.NETWORKS`):
        :math:`(g/w_\text{net})^2 - (g/w)^2` for a fitted ceiling at
        :math:`g = \ln(\text{line rate}/\text{ceiling})`, the network's scale
        :math:`w_\text{net}` in place of the generic :math:`w` that the fit itself used.
        It ranks, it does not move the fitted values: an explanation that reaches the
        runs stays one (kept within their noise), ranked below an equally good compute or
        framework one [-].

        It is the one mechanism for such transports: putting :math:`w_\text{net}` into
        the fit itself (as :meth:`prior_scale` does where the network centres a ceiling)
        ranks the same on the validation runs but moves the values: runs made with a
        20 Gbit/s ceiling on 100 Gbit/s InfiniBand are then fitted by a 21.3 Gbit/s
        ceiling plus a 1.07 compute slowdown that is not there, and a run made with a
        compute slowdown loses the ceiling as an alternative it cannot rule out."""
        net = self.network
        c = values.get("ceiling")
        if net is None or net.ceiling is not None or c is None or not math.isfinite(c):
            return 0.0
        g = self.to_g("ceiling", c)
        return max(0.0, (g / net.ceiling_scale) ** 2 - (g / PRIORS["ceiling"].scale) ** 2)

    def cluster(self, values):
        """A ClusterProfile with ``values`` (name -> value) over the base."""
        v = dict(self.fixed)
        v.update(values)
        changes = {}
        for name, value in v.items():
            if name == "ceiling":
                changes["ceiling"] = None if not math.isfinite(value) else value
            elif name == "host_overhead":
                red = self.base.reduction
                if value > 0 or red is not None:
                    gamma = (red.gamma if red is not None and red.table_bytes is None
                             else 0.0) + value
                    latency = red.latency if red is not None and red.table_bytes is None else 0.0
                    changes["reduction"] = ReductionCost(gamma=gamma, latency=latency,
                                                         name="fitted host overhead")
            elif name in self._fields:
                changes[name] = value
        return attrs.evolve(self.base, **changes)

    _FAST = ("ceiling", "utilization", "sync_overhead", "collective_overhead",
             "bucket_overhead", "iteration_overhead")
    """Parameters that change only x and the lines' intercepts."""
    _COMPUTE = ("compute_slowdown", "straggler_spread")
    """Parameters that scale the compute part of every line: fast where the buckets do
    not depend on the timeline (size-based fusion), else the lines are built again."""

    def _value(self, values, name):
        v = values.get(name, self.fixed.get(name))
        if v is None:
            v = getattr(self.base, name, 0.0)
        return float(v)

    def _sigma_n(self, values, n):
        r""":math:`\sigma_n = \sigma (1 + s e_n)` for ``n`` workers (1 for one) [-]."""
        if n <= 1:
            return 1.0
        sigma = self._value(values, "compute_slowdown")
        spread = self._value(values, "straggler_spread")
        if not spread:
            return sigma
        e = self.__dict__.setdefault("_blom", {})
        if n not in e:
            e[n] = float(expected_max_normal(n))
        return sigma * (1.0 + spread * e[n])

    def _lines(self, values):
        r"""Per group, what does not change with the fast parameters: the lines without
        fixed costs or ceiling (eq. :eq:`iteration-cluster`) split into their compute part
        (per unit of :math:`\sigma_n`) and the rest, and the counts by which the fixed
        costs enter each line; or a scenario to evaluate in full (MG-WFBP, sharding).
        Where the buckets depend on the compute speed (Horovod's cycle time) the lines
        are kept per bucket structure, which changes only at a few slowdowns."""
        merged = {**self.fixed, **values}
        key = tuple((k, v) for k, v in sorted(merged.items())
                    if k not in self._FAST and k not in self._COMPUTE)
        cache = self.__dict__.setdefault("_cache", {})
        if len(cache) > 1024:
            cache.clear()
        cl = None
        entry = {}
        for gkey, g in self.groups.items():
            ckey = (gkey, key)
            if not g["linear"]:
                if ckey not in cache:  # the scenario at sigma = 1: its profile and policy
                    cl = self.cluster(values) if cl is None else cl
                    cache[ckey] = self._scenario(gkey, g, cl, 1.0, values)
                sc1 = cache[ckey]
                if sc1.needs_plan or sc1.sharding is not None or gkey[6] is not None:
                    entry[gkey] = ("scenario", sc1, gkey[5])
                    continue
                # the buckets form on the timeline of sigma (the straggler wait then
                # stretches it to sigma_n, as the model does)
                sigma = self._value(values, "compute_slowdown")
                skey = ("structure", gkey, key, sigma)
                if skey not in cache:
                    prof = sc1.profile
                    made = sc1.fusion.buckets(prof.tensor_bytes, sigma * prof.tensor_ready)
                    cache[skey] = made.starts.tobytes()
                ckey = (gkey, key, cache[skey])
                if ckey not in cache:
                    cl = self.cluster(values) if cl is None else cl
                    cache[ckey] = self._group_lines(gkey, g, cl, sigma, values)
            elif ckey not in cache:
                cl = self.cluster(values) if cl is None else cl
                cache[ckey] = self._group_lines(gkey, g, cl, 1.0, values)
            entry[gkey] = cache[ckey]
        return entry

    def efficiency_everywhere(self):
        """Let a fitted ``efficiency`` scale every run's profile (``fit=["efficiency"]``
        on measured profiles: relative to the profile's own speed, 1)."""
        for g in self.groups.values():
            g["flop"] = True
        self.flop_run[:] = True
        self.__dict__.pop("_cache", None)

    def _scale(self, values):
        """Factor on a FLOP-derived profile's compute times: its efficiency over the
        fitted one [-]."""
        e = values.get("efficiency", self.fixed.get("efficiency"))
        return 1.0 if e is None else self.e0 / float(e)

    def _profile(self, g, values):
        f = self._scale(values)
        p = g["profile"]
        if f == 1.0 or not g["flop"]:
            return p
        return rescaled(p, f)  # the score passes of a non-flash attention kept

    def _scenario(self, gkey, g, cl, sigma_n, values=None):
        _, fusion, algorithm, sharding, n, wrapped, mp = gkey
        bare = attrs.evolve(cl, **{k: v for k, v in _BARE.items() if k in self._fields})
        # a run is built as it ran: not with the settings a given cluster was fitted under
        bare = attrs.evolve(bare, compute_slowdown=min(max(sigma_n, 1.0), 100.0),
                            fit_settings={})
        if sharding != "none" and getattr(bare, "host", None) is not None:
            bare = attrs.evolve(bare, host=None)  # not modelled there (fit_cluster says so)
        kw = dict(algorithm=algorithm, fusion=fusion, cluster=bare,
                  ps_servers=self.settings["ps_servers"])
        if sharding != "none":
            kw["sharding"] = sharding
        if mp is not None:  # a tensor- and pipeline-parallel run (scalemodel.parallel)
            kw.update(tp=mp[0], pp=mp[1], microbatches=mp[2], virtual_stages=mp[3],
                      sequence_parallel=mp[4])
        return Scenario.build(self._profile(g, values or {}), **kw)

    def _group_lines(self, gkey, g, cl, sigma_n, values):
        r"""One group's lines built with the buckets of the compute slowdown
        ``sigma_n`` [-], in per-unit-slowdown form."""
        n, wrapped = gkey[4], gkey[5]
        sc = self._scenario(gkey, g, cl, sigma_n, values)
        if sc.needs_plan or sc.sharding is not None or gkey[6] is not None or (
                sc.host_delays(n) is not None and (n > 1 or wrapped)):
            # the wrapper's host delays (eq. host-lead) depend on the slowdown through
            # the host's lead: not the lines' linear form; the scenario then answers
            return ("scenario", sc, wrapped)
        lines = sc.lines(n, False)[0]
        k = len(lines.intercept) - 1
        if n > 1:
            count = np.concatenate(([0.0], np.arange(k, 0, -1, dtype=float)))
            last = np.concatenate(([0.0], np.ones(k)))
            # per-bucket cost on the compute path: line j (bucket j in communication
            # order and all after it) waits for j of them, backward's end for all K
            per_bucket = np.concatenate(([float(k)], np.arange(1, k + 1, dtype=float)))
            wrapper = 1.0
        else:
            count = last = np.zeros(k + 1)
            per_bucket = np.zeros(k + 1)
            per_bucket[0] = float(k) if wrapped else 0.0
            wrapper = 1.0 if wrapped else 0.0
            sigma_n = 1.0  # one worker computes at its own speed
        compute = lines.ready.copy()
        compute[0] = lines.intercept[0]  # backward's end: all compute
        rest = lines.intercept - compute
        return ("lines", compute / sigma_n, rest, lines.slope, count, last, per_bucket,
                wrapper, float(sc.forward(n)) / sigma_n, sc.update(n), sc.wire_map(n))

    def predict(self, values):
        """Model iteration times of every run [s] (in the profile's units), vectorized.

        Ceiling, utilization and the fixed costs change only :math:`x` and the lines'
        intercepts (eq. :eq:`iteration-cluster`), and with size-based buckets the compute
        slowdown only scales their compute part, so the lines are built once per value of
        the other parameters; then each group's envelope is evaluated at all its line
        rates at once."""
        entry = self._lines(values)
        cl = self.cluster(values)
        c0 = self._value(values, "collective_overhead")
        ts = self._value(values, "sync_overhead")
        cb = self._value(values, "bucket_overhead")
        tw = self._value(values, "iteration_overhead")
        with np.errstate(divide="ignore"):
            x_all = 1.0 / (np.asarray(cl.utilization_at(self.config_bw), float)
                           * self.config_bw)
        out = np.empty(len(self.config_bw))
        for gkey, g in self.groups.items():
            idx = g["configs"]
            x = x_all[idx]
            e = entry[gkey]
            n = gkey[4]
            if e[0] == "scenario":
                if gkey[6] is not None:  # the data-parallel dimension of its replicas
                    out[idx] = _model_parallel_times(e[1], cl, n, self.config_bw[idx])
                    continue
                sc = attrs.evolve(e[1], cluster=cl)
                if n == 1 and e[2]:  # one worker inside the wrapper
                    out[idx] = sc.wrapped_single_worker_time()
                else:
                    out[idx] = sc.iteration_times(np.full(len(idx), n), x, 1.0)
                continue
            (_, compute, rest, slope, count, last, per_bucket, wrapper, forward, update,
             (k1, k2)) = e
            s_n = self._sigma_n(values, n)
            c = s_n * compute + rest + c0 * count + ts * last + cb * per_bucket
            xe = k1 * x if k2 == 0.0 else np.maximum(k1 * x, k2)
            if len(c) * len(xe) <= _DENSE_CELLS:
                with np.errstate(over="ignore", invalid="ignore"):
                    env = np.max(c[:, None] + slope[:, None] * xe[None, :], axis=0)
            else:
                env = UpperEnvelope(c, slope)(xe)
            out[idx] = s_n * forward + update + wrapper * tw + env
        return out[self.config_of]

    def predicted(self, values):
        """Model iteration times in the units of :attr:`measured_t` [s]: a run measured
        as a scaling factor on a FLOP-derived profile compares relative times, so its
        prediction is taken back to the profile's own efficiency."""
        pred = self.predict(values)
        f = self._scale(values)
        if f != 1.0:
            pred = np.where(self.relative & self.flop_run, pred / f, pred)
        return pred

    def residuals(self, values):
        return (np.log(self.predicted(values)) - np.log(self.measured_t)) / self.sigma_t


def _model_parallel_times(sc, cl, n, bw):
    """Iteration times [s] of a tensor- and pipeline-parallel run's scenario ``sc`` on
    the cluster ``cl`` (the NIC's terms, :meth:`~scalemodel.ClusterProfile.ring_view` for
    one data-parallel ring) for ``n`` GPUs at the line rates ``bw`` [bits/s]."""
    sc = attrs.evolve(sc, cluster=cl.ring_view(sc.bw_scale))
    dp, ring = sc.data_parallel(n, np.asarray(bw, float))
    with np.errstate(divide="ignore"):
        x = 1.0 / (np.asarray(sc.cluster.utilization_at(ring), float) * ring)
    return sc.iteration_times(np.full(np.shape(ring), dp), x, 1.0)


def _solve(problem, free):
    """Fit ``free`` parameters (MAP with priors); returns (values, g, J, chi2, prior)."""
    from scipy.optimize import least_squares

    names = list(free)
    lo = np.array([problem.g_bounds(k)[0] for k in names])
    hi = np.array([problem.g_bounds(k)[1] for k in names])
    g0 = np.array([problem.g_default(k) for k in names])
    scale = np.array([problem.prior_scale(k) for k in names])

    def values(g):
        return {k: problem.from_g(k, float(x)) for k, x in zip(names, g)}

    f2 = _ROBUST_SCALE ** 2

    def fun(g):
        # robust (soft L1) on the runs, quadratic on the priors: sqrt of the loss per run
        r = problem.residuals(values(g))
        robust = np.sign(r) * np.sqrt(2.0 * f2 * (np.sqrt(1.0 + r * r / f2) - 1.0))
        return np.concatenate((robust, (g - g0) / scale))

    # the cost is flat where a parameter has no effect (a ceiling above what is needed)
    # and kinked where the critical path changes: start from the best points of a grid
    per = max(3, int(round(40 ** (1.0 / len(names)))))
    axes = [np.linspace(a, b, per) for a, b in zip(lo, hi)]
    grid = np.array(list(itertools.product(*axes))) if len(names) > 1 else axes[0][:, None]
    costs = np.array([float(np.sum(fun(gp) ** 2)) for gp in grid])
    best = None
    for start in grid[np.argsort(costs)[:2]]:
        try:
            res = least_squares(fun, start, bounds=(lo, hi), x_scale=scale, diff_step=1e-3,
                                max_nfev=200)
        except ValueError:
            continue
        cost = float(np.sum(res.fun ** 2))
        if best is None or cost < best[0]:
            best = (cost, res)
    if best is None:
        raise CalibrationError(f"the fit of {', '.join(names)} failed to start")
    res = best[1]
    k = len(problem.runs)
    r = problem.residuals(values(res.x))
    prior = res.fun[k:]
    return values(res.x), res.x, res.jac, float(np.sum(r ** 2)), float(np.sum(prior ** 2)), \
        (lo, hi)
