"""Figures: scaling factor against bandwidth with and without compressors.

matplotlib is an optional dependency (``pip install 'scalemodel[plot]'``); it is imported
inside the functions, and they draw on a figure of their own (no ``pyplot`` state is
needed, so they work with the Agg backend and in scripts without a display).
"""

from __future__ import annotations

import math

import numpy as np

from .exceptions import ScalemodelError

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
    """The figure, the axes, and the line rates to draw (1 to 400 Gbit/s by default)."""
    fig, ax = _figure(ax, (7.2, 4.4))
    if bw is None:
        bw = np.logspace(9, math.log10(400e9), 200)
    else:
        from .units import parse_bandwidth
        bw = np.atleast_1d(parse_bandwidth(bw, "bw")).astype(float).ravel()
    return fig, ax, bw


def _bw_axis(ax, bw):
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_xlim(bw.min(), bw.max())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e9:g}"))
    ax.set_xlabel("line rate per worker B [Gbit/s] (log scale)")
    ax.set_ylabel("scaling factor [-]")
    ax.grid(True, which="major", alpha=0.3)


def plot_breakeven(model, compressors=("fp16", "int8", "signsgd", "topk", "powersgd"), *,
                   n=64, bw=None, target=None, ax=None, **kwargs):
    """Scaling factor against line rate, one line per compressor at its setting, with
    each compressor's break-even line rate marked (where it starts to beat no
    compression, :func:`~scalemodel.breakeven_bandwidth`).

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    compressors : str, Compressor or sequence of them
        Compressors to draw, by name, with a setting (``"topk:0.01"``, ``"powersgd:8"``,
        see :func:`~scalemodel.get_compressor`) or as objects; ``"none"`` is always
        drawn [-].
    n : int
        Number of workers [workers].
    bw : array_like, optional
        Line rates to draw, numbers or strings (``["10Gbps", "100Gbps"]``); default 200
        points from 1 to 400 Gbit/s [bits/s].
    target : float, optional
        Draw a horizontal line at this scaling factor [-].
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure when omitted [-].
    **kwargs
        ``utilization``, ``cluster``, ``algorithm``, ``fusion``, ``alpha``... as in
        :func:`~scalemodel.plan_compression`.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    from .compressors import get_compressor
    from .planner import breakeven_bandwidth, compressed_scaling_factor
    from .profiles import load_profile

    fig, ax, bw = _canvas(ax, bw)
    if isinstance(compressors, str) or not np.iterable(compressors):
        compressors = [compressors]  # one name ("topk:0.01") or one object
    comps = [get_compressor(c, "compressors") for c in compressors]
    if not any(c.name == "none" for c in comps):
        comps.insert(0, get_compressor("none"))
    for i, comp in enumerate(comps):
        sf = compressed_scaling_factor(model, comp, n, bw, **kwargs)
        label = comp.describe()
        (line,) = ax.plot(bw, sf, lw=2 if comp.name != "none" else 2.5,
                          color="k" if comp.name == "none" else f"C{i}",
                          ls="-" if comp.name != "none" else "--", label=label)
        if comp.name != "none":
            be = breakeven_bandwidth(model, comp, n=n, **{k: v for k, v in kwargs.items()
                                                           if k != "utilization"},
                                     utilization=kwargs.get("utilization", 1.0))
            if bw.min() < be < bw.max():
                y = compressed_scaling_factor(model, comp, n, be, **kwargs)
                ax.plot([be], [y], "o", color=line.get_color(), ms=5)
    if target is not None:
        ax.axhline(target, color="k", lw=0.8, ls=":")
    _bw_axis(ax, bw)
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{load_profile(model).name}, {n} workers: compressors against no "
                 f"compression (dots: break-even)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def plot_scaling(model, n=(16, 32, 64), *, bw=None, compression=1.0, target=None, ax=None,
                 **kwargs):
    """Scaling factor against line rate, one line per worker count.

    Parameters
    ----------
    model : str, os.PathLike or WorkloadProfile
        Profile name, file or object [-].
    n : sequence of int
        Worker counts [workers].
    bw : array_like, optional
        Line rates, numbers or strings (``["10Gbps", "100Gbps"]``); default 200 points
        from 1 to 400 Gbit/s [bits/s].
    compression : float
        Compression ratio >= 1 [-].
    target : float, optional
        Draw a horizontal line at this scaling factor [-].
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure when omitted [-].
    **kwargs
        Other arguments of :func:`~scalemodel.scaling_factor`.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    from .model import scaling_factor
    from .profiles import load_profile

    fig, ax, bw = _canvas(ax, bw)
    for nv in np.atleast_1d(n):
        ax.plot(bw, scaling_factor(model, int(nv), bw, compression=compression, **kwargs),
                lw=2, label=f"n = {int(nv)}")
    if target is not None:
        ax.axhline(target, color="k", lw=0.8, ls=":")
    _bw_axis(ax, bw)
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{load_profile(model).name}, compression {compression:g}x", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig
