"""Priors of :func:`~scalemodel.fit_cluster`: what each fitted parameter is pulled towards.

Each fitted parameter :math:`\\theta_p` is fitted in a transformed coordinate
:math:`g(\\theta_p)` (the log of the value for ``log`` parameters) and pulled towards its
ideal default by the penalty :math:`\\big((g(\\theta_p) - g(\\theta_p^0))/w_p\\big)^2`,
with the scale :math:`w_p` and the bounds of :data:`PRIORS`, each with its source.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["PRIORS", "AUTO"]


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
}
"""Weakly informative priors of the fitted parameters: ideal default, scale of the
penalty (in the log of the value for ``log`` parameters, in the value's unit otherwise),
bounds and their source. ``ceiling`` bounds are fractions of the largest line rate."""

_ORDER = ("ceiling", "utilization", "sync_overhead", "collective_overhead",
          "compute_slowdown", "alpha", "overlap", "host_overhead")
"""Tie-break order of parameters of equal evidence."""

AUTO = ("ceiling", "utilization", "sync_overhead", "collective_overhead", "compute_slowdown")
"""Parameters :func:`~scalemodel.fit_cluster` chooses among by itself. The others (``alpha``,
``overlap``, ``host_overhead``) come from the transport calibration or ``fit=``: their
signatures in a few scaling runs are too close to the ones above to tell apart."""
