"""Figures: scaling factor against bandwidth with and without compressors.

matplotlib is an optional dependency (``pip install 'scalemodel[plot]'``); it is imported
inside the functions, and they draw on a figure of their own (no ``pyplot`` state is
needed, so they work with the Agg backend and in scripts without a display).
"""

from __future__ import annotations

import math

import numpy as np

from .exceptions import ParameterTypeError, ScalemodelError

__all__ = ["plot_breakeven", "plot_scaling"]


def _figure(ax, figsize):
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - depends on the installation
        raise ScalemodelError("plotting needs matplotlib: pip install 'scalemodel[plot]'") \
            from None
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize)
    return fig, fig.add_subplot()


def _canvas(ax, bw):
    """The figure, the axes, and the line rates to draw, sorted (1 to 400 Gbit/s by
    default)."""
    if bw is None:
        bw = np.logspace(9, math.log10(400e9), 200)
    else:
        from .units import parse_bandwidth
        bw = np.unique(np.atleast_1d(parse_bandwidth(bw, "bw")).astype(float).ravel())
    fig, ax = _figure(ax, (7.2, 4.4))
    return fig, ax, bw


def _gbps_formatter(**kw):
    """A log-axis formatter that writes Gbit/s, on the minor ticks it labels too (a range
    of less than a decade labels them, in bits/s before)."""
    from matplotlib.ticker import LogFormatter

    class Gbps(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return f"{x / 1e9:.4g}"

    return Gbps(**kw)


def _bw_axis(ax, bw, top, kwargs):
    """The line-rate axis (log, Gbit/s on every labelled tick) and the scaling-factor axis
    from 0 to the largest value drawn (sharding can pass 1)."""
    ax.set_xscale("log")
    lo, hi = float(bw.min()), float(bw.max())
    ax.set_xlim(*((lo / 1.5, hi * 1.5) if lo == hi else (lo, hi)))
    ax.xaxis.set_major_formatter(_gbps_formatter())
    ax.xaxis.set_minor_formatter(_gbps_formatter(labelOnlyBase=False,
                                                 minor_thresholds=(1, 0.4)))
    nodes = kwargs.get("gpus_per_node") is not None or kwargs.get("cluster") is not None
    ax.set_xlabel(f"line rate B per {'NIC (or worker)' if nodes else 'worker'} [Gbit/s] "
                  "(log scale)")
    ax.set_ylabel("scaling factor [-]")
    ax.set_ylim(0, max(1.02, 1.05 * top))
    ax.grid(True, which="major", alpha=0.3)


def _style(bw):
    """Markers where the points are few enough to be read one by one."""
    return {"marker": "o", "ms": 3} if bw.size <= 20 else {}


def _workers(n):
    return f"{n} worker{'' if n == 1 else 's'}"


def _check_target(target):
    if target is None:
        return None
    from .units import check_fraction
    return float(check_fraction(target, "target"))


def _fitted(kwargs):
    """The fitted cluster of ``kwargs`` when it has intervals or alternatives, else None."""
    cl = kwargs.get("cluster")
    if cl is None:
        return None
    from .cluster import load_cluster
    cl = load_cluster(cl)
    return cl if (cl.intervals or cl.alternatives) else None


def plot_breakeven(model, compressors=("fp16", "int8", "signsgd", "topk", "powersgd"), *,
                   n=64, bw=None, target=None, ax=None, **kwargs):
    """Scaling factor against line rate, one line per compressor at its setting, with
    each compressor's break-even line rate marked (where it starts to beat no
    compression, :func:`~scalemodel.breakeven_bandwidth`; for one that wins only on fast
    links, where it starts to win there, a hollow dot).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    compressors : str, Compressor or sequence of them
        Compressors to draw, by name, with a setting (``"topk:0.01"``, ``"powersgd:8"``,
        see :func:`~scalemodel.get_compressor`) or as objects; ``"none"`` is always
        drawn; under ``sharding`` the ones that do not compose with its collectives are
        left out (the title says which) [-].
    n : int
        Number of workers [workers].
    bw : array_like, optional
        Line rates to draw, numbers or strings (``["10Gbps", "100Gbps"]``); default 200
        points from 1 to 400 Gbit/s [bits/s].
    target : float, optional
        Draw a horizontal line at this scaling factor, in (0, 1] [-].
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure when omitted. Nothing is drawn on it when an
        argument is refused [-].
    **kwargs
        ``utilization``, ``cluster``, ``algorithm``, ``fusion``, ``alpha``... as in
        :func:`~scalemodel.plan_compression`. On a fitted cluster the lines are its best
        explanation (the title says so; ``plan_compression`` and ``iteration_time`` give
        the intervals).

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    from .compressors import get_compressor
    from .planner import breakeven_bandwidth, compressed_scaling_factor
    from .profiles import load_profile
    from .sharding import SHARDING_COMPRESSORS, resolve_sharding
    from .units import check_count

    n = check_count(n, "n")
    if np.ndim(n):
        raise ParameterTypeError("n", n, "one worker count (plot_scaling draws several)")
    n, target = int(n), _check_target(target)
    if isinstance(compressors, str) or not np.iterable(compressors):
        compressors = [compressors]  # one name ("topk:0.01") or one object
    comps = [get_compressor(c, "compressors") for c in compressors]
    if not any(c.name == "none" for c in comps):
        comps.insert(0, get_compressor("none"))
    left = []
    if kwargs.get("sharding") is not None and resolve_sharding(kwargs["sharding"]).sharded:
        out = [c for c in comps if c.name != "none" and not SHARDING_COMPRESSORS
               .get(c.name, "composes").startswith("composes")]
        comps = [c for c in comps if c not in out]
        left = list(dict.fromkeys(c.name for c in out))
    fig, ax, bw = _canvas(None, bw) if ax is None else (ax.figure, ax, _canvas(ax, bw)[2])
    lines = []  # everything computed before anything is drawn
    for comp in comps:
        sf = np.asarray(compressed_scaling_factor(model, comp, n, bw, **kwargs), float)
        dot = None
        if comp.name != "none":
            be = breakeven_bandwidth(model, comp, n=n, detail=True, **{
                k: v for k, v in kwargs.items() if k != "utilization"},
                utilization=kwargs.get("utilization", 1.0))
            at = be.bw if be.bw > 0 else be.wins_above
            if at is not None and bw.min() < at < bw.max():
                dot = (at, float(compressed_scaling_factor(model, comp, n, at, **kwargs)),
                       be.bw == 0)
        lines.append((comp, sf, dot))
    for i, (comp, sf, dot) in enumerate(lines):
        (line,) = ax.plot(bw, sf, lw=2 if comp.name != "none" else 2.5,
                          color="k" if comp.name == "none" else f"C{i}",
                          ls="-" if comp.name != "none" else "--", label=comp.describe(),
                          **_style(bw))
        if dot is not None:
            ax.plot([dot[0]], [dot[1]], "o", ms=6, color=line.get_color(),
                    mfc="white" if dot[2] else line.get_color())
    if target is not None:
        ax.axhline(target, color="k", lw=0.8, ls=":", label=f"target {target:g}")
    _bw_axis(ax, bw, max(float(np.nanmax(sf)) for _, sf, _ in lines), kwargs)
    notes = ["dots: break-even (hollow: wins above it)"]
    if _fitted(kwargs) is not None:
        notes.append("the fit's best explanation")
    if left:
        notes.append(f"not composing with {kwargs['sharding']}: {', '.join(left)}")
    ax.set_title(f"{load_profile(model).name}, {_workers(n)}: compressors against no "
                 f"compression\n{'; '.join(notes)}", fontsize=9)
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_scaling(model, n=(16, 32, 64), *, bw=None, compression=1.0, target=None, ax=None,
                 **kwargs):
    """Scaling factor against line rate, one line per worker count; on a fitted cluster
    with intervals or alternatives, each line's interval as a band
    (``iteration_time(...).scaling_factor_interval``).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    n : int or sequence of int
        Worker counts [workers].
    bw : array_like, optional
        Line rates, numbers or strings (``["10Gbps", "100Gbps"]``); default 200 points
        from 1 to 400 Gbit/s [bits/s].
    compression : float
        Compression ratio >= 1 [-].
    target : float, optional
        Draw a horizontal line at this scaling factor, in (0, 1] [-].
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure when omitted. Nothing is drawn on it when an
        argument is refused [-].
    **kwargs
        Other arguments of :func:`~scalemodel.scaling_factor`.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    from .model import iteration_time, scaling_factor
    from .profiles import load_profile
    from .units import check_count

    ns = [int(v) for v in np.atleast_1d(check_count(n, "n")).ravel()]
    target = _check_target(target)
    fig, ax, bw = _canvas(None, bw) if ax is None else (ax.figure, ax, _canvas(ax, bw)[2])
    fitted = _fitted(kwargs) is not None
    curves = []  # everything computed before anything is drawn
    for nv in ns:
        sf = np.asarray(scaling_factor(model, nv, bw, compression=compression, **kwargs),
                        float)
        band = None
        if fitted:
            ivs = [iteration_time(model, nv, float(b), compression=compression,
                                  **kwargs).scaling_factor_interval for b in bw]
            band = np.array([[np.nan if v is None else v for v in iv] for iv in ivs], float)
        curves.append((nv, sf, band))
    top = 0.0
    for nv, sf, band in curves:
        (line,) = ax.plot(bw, sf, lw=2, label=f"n = {nv}", **_style(bw))
        top = max(top, float(np.nanmax(sf)))
        if band is not None:
            ax.fill_between(bw, band[:, 0], band[:, 1], color=line.get_color(), alpha=0.15,
                            lw=0)
            top = max(top, float(np.nanmax(band[:, 1])) if np.isfinite(band[:, 1]).any()
                      else top)
    if target is not None:
        ax.axhline(target, color="k", lw=0.8, ls=":", label=f"target {target:g}")
    _bw_axis(ax, bw, top, kwargs)
    ax.set_title(f"{load_profile(model).name}, compression {compression:g}x"
                 + ("; bands: the fit's interval" if fitted else ""), fontsize=10)
    ax.legend(fontsize=8, loc="best")
    return fig
