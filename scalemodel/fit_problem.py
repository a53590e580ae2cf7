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
from .exceptions import CalibrationError
from .fit_priors import PRIORS
from .model import Scenario

_ROBUST_SCALE = 3.0
"""Normalized residual beyond which a run's pull grows linearly, not quadratically (soft
L1 loss): one wild run cannot drag the fit [-]."""


class _Problem:
    """Runs, the fixed setting and how parameters map to a cluster."""

    def __init__(self, runs, base, settings, fixed):
        self.runs = runs
        self.base = base
        self.settings = settings
        self.fixed = fixed  # name -> value (given or measured)
        self.bw_max = max(r.bw for r in runs)
        groups = {}
        for i, r in enumerate(runs):
            key = (id(r.profile), r.fusion or settings["fusion"],
                   r.algorithm or settings["algorithm"])
            groups.setdefault(key, []).append(i)
        self.groups = groups
        self.measured_t = np.empty(len(runs))
        self.sigma_t = np.array([r.uncertainty for r in runs])
        for i, r in enumerate(runs):
            sf = r.measured_sf
            t1 = r.profile.iteration_time
            self.measured_t[i] = t1 / sf if sf is not None else r.iteration_time

    # parameter transforms: g(value) in fitting coordinates
    def to_g(self, name, value):
        p = PRIORS[name]
        if name == "ceiling":
            return math.log(self.bw_max / value) if math.isfinite(value) else 0.0
        if p.log:
            return math.log(value / p.default) if name != "utilization" else -math.log(value)
        return value

    def from_g(self, name, g):
        p = PRIORS[name]
        if name == "ceiling":
            return self.bw_max * math.exp(-g)
        if name == "utilization":
            return math.exp(-g)
        if p.log:
            return p.default * math.exp(g)
        return g

    def g_bounds(self, name):
        p = PRIORS[name]
        if name == "ceiling":
            return 0.0, -math.log(p.lower)
        if name == "utilization":
            return 0.0, -math.log(p.lower)
        if p.log:
            return 0.0, math.log(p.upper / p.default)
        return p.lower, p.upper

    def g_default(self, name):
        if name == "ceiling":
            return 0.0
        p = PRIORS[name]
        return 0.0 if p.log or name == "utilization" else p.default

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
            else:
                changes[name] = value
        return attrs.evolve(self.base, **changes)

    _FAST = ("ceiling", "utilization", "sync_overhead", "collective_overhead")

    def predict(self, values):
        """Model iteration times of every run [s] (in the profile's units).

        Ceiling, utilization and the fixed costs change only :math:`x` and the lines'
        intercepts (eq. :eq:`iteration-cluster`), so the lines are built once per value of
        the other parameters and the envelope is evaluated directly."""
        cl = self.cluster(values)
        slow_key = tuple((k, v) for k, v in sorted({**self.fixed, **values}.items())
                         if k not in self._FAST)
        cache = self.__dict__.setdefault("_lines", {})
        if slow_key not in cache:
            if len(cache) > 64:
                cache.clear()
            bare = attrs.evolve(cl, ceiling=None, utilization=1.0, table_line_rate=None,
                                table_utilization=None, sync_overhead=0.0,
                                collective_overhead=0.0)
            entry = {}
            for (gkey, fusion, algorithm), idx in self.groups.items():
                prof = self.runs[idx[0]].profile
                sc = Scenario.build(prof, algorithm=algorithm, fusion=fusion,
                                    cluster=bare, ps_servers=self.settings["ps_servers"])
                for i in idx:
                    n = self.runs[i].n
                    if sc.needs_plan:
                        entry[i] = ("scenario", sc)
                        continue
                    lines = sc.lines(n, False)[0]
                    k = len(lines.intercept) - 1
                    count = np.concatenate(([0.0], np.arange(k, 0, -1, dtype=float)))
                    last = np.concatenate(([0.0], np.ones(k)))
                    entry[i] = ("lines", sc, lines, count if n > 1 else 0 * count,
                                last if n > 1 else 0 * last)
            cache[slow_key] = entry
        entry = cache[slow_key]
        out = np.empty(len(self.runs))
        for i, r in enumerate(self.runs):
            e = entry[i]
            u = float(cl.utilization_at(r.bw))
            x = 1.0 / (u * r.bw)
            if e[0] == "scenario":
                sc = attrs.evolve(e[1], cluster=cl)
                out[i] = float(sc.planned(r.n, x).iteration_times(r.n, x, 1.0))
                continue
            _, sc, lines, count, last = e
            xe = float(sc.x_effective(r.n, x, 1.0))
            c = (lines.intercept + cl.collective_overhead * count + cl.sync_overhead * last
                 + lines.slope * xe)
            out[i] = sc.forward(r.n) + float(np.max(c)) + r.profile.update_time
        return out

    def residuals(self, values):
        return (np.log(self.predict(values)) - np.log(self.measured_t)) / self.sigma_t


def _solve(problem, free):
    """Fit ``free`` parameters (MAP with priors); returns (values, g, J, chi2, prior)."""
    from scipy.optimize import least_squares

    names = list(free)
    lo = np.array([problem.g_bounds(k)[0] for k in names])
    hi = np.array([problem.g_bounds(k)[1] for k in names])
    g0 = np.array([problem.g_default(k) for k in names])
    scale = np.array([PRIORS[k].scale for k in names])

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
