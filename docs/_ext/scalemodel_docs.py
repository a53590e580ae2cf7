"""Build-time content of the design guide, computed from scalemodel itself.

On ``builder-inited`` this extension writes into ``docs/generated/`` (git-ignored):

* PNG figures drawn with matplotlib from the library's own functions, and
* reStructuredText snippets (``*.inc``, pulled in with ``.. include::``): tables of the
  built-in profiles, the what-if reproduction, the closed form against the
  discrete-event reference, the sympy derivations printed with :func:`sympy.latex`, and
  the command-line output of the worked example.

So every number and curve in the guide comes from the code at build time and cannot
drift from it. Nothing here is a second implementation of the model: the figures call
the public API (and, for the timeline, draw the FIFO recurrence whose end is checked
against :func:`scalemodel.iteration_time` before the figure is written).
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import time
from pathlib import Path

import numpy as np

GBIT = 1e9


# --------------------------------------------------------------------------- helpers


def _write(path: Path, text: str) -> None:
    """Write only when the content changed (keeps Sphinx's incremental builds quiet)."""
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)


def _gbit_axis(ax, lo=1, hi=400):
    """Log bandwidth axis labelled in Gbit/s."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 5, 10, 25, 40, 100, 200, 400, 1000) if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator([t * GBIT for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / GBIT:g}"))
    ax.set_xlim(lo * GBIT, hi * GBIT)


def _table(header, rows, widths=None, title=None):
    """An RST list-table."""
    out = [f".. list-table:: {title}" if title else ".. list-table::", "   :header-rows: 1"]
    if widths:
        out.append("   :widths: " + " ".join(str(w) for w in widths))
    out.append("")
    for row in [header] + rows:
        first = True
        for cell in row:
            out.append(("   * - " if first else "     - ") + str(cell))
            first = False
    return "\n".join(out) + "\n"


def _cli(argv):
    """Run the command line in-process and return what it prints."""
    from scalemodel.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(argv))
    if rc != 0:
        raise RuntimeError(f"scalemodel {' '.join(argv)} exited with {rc}")
    return buf.getvalue().rstrip("\n")


def _console(argv, output):
    lines = [".. code-block:: console", "", "   $ scalemodel " + " ".join(argv)]
    lines += ["   " + line if line else "" for line in output.splitlines()]
    return "\n".join(lines) + "\n"


MODEL_STYLE = {
    "bert-base": dict(color="C0", ls="-"),
    "bert-large": dict(color="C1", ls="-"),
    "gpt2": dict(color="C2", ls="-"),
    "resnet50": dict(color="C3", ls="--"),
    "resnet101": dict(color="C4", ls="--"),
    "vgg16": dict(color="C5", ls="--"),
}


# --------------------------------------------------------------------------- figures


V100_PROFILES = tuple(MODEL_STYLE)
"""The built-in V100 profiles; each has ``<name>-h100`` (and ``-h100-bf16``) beside it."""


def _two_gpus(figsize=(11.5, 4.4)):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=figsize, sharey=True)
    return fig, zip(axes, ("V100 (built-in published profiles)",
                           "H100, fp32 (built-in profiles measured here)"), ("", "-h100"))


def fig_scaling_vs_bandwidth(out: Path):
    import scalemodel as sm

    bw = np.logspace(9, math.log10(1e12), 240)
    fig, panels = _two_gpus()
    for ax, gpu, suffix in panels:
        for name in V100_PROFILES:
            sf = sm.scaling_factor(name + suffix, n=64, bw=bw)
            ax.plot(bw, sf, lw=2, label=name, **MODEL_STYLE[name])
        ax.axhline(0.9, color="k", lw=0.8, ls=":")
        ax.text(1.05 * GBIT, 0.91, "target 0.9", fontsize=9)
        _gbit_axis(ax, hi=1000)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("line rate per worker B [Gbit/s] (log scale)")
        ax.set_title(f"{gpu}, 64 workers", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    ax.axes.figure.axes[0].set_ylabel("scaling factor SF(64) [-]")
    ax.legend(title="model", loc="lower right", fontsize=9)
    fig.suptitle("ring all-reduce, DDP buckets, full utilization, no compression", fontsize=10)
    fig.tight_layout()
    _save(fig, out / "scaling_vs_bandwidth.png")


def fig_min_ratio_vs_bandwidth(out: Path):
    import scalemodel as sm

    bw = np.logspace(9, math.log10(1e12), 80)
    fig, panels = _two_gpus()
    for ax, gpu, suffix in panels:
        for name in V100_PROFILES:
            ratios = np.array([sm.min_compression(name + suffix, b).ratio for b in bw])
            ax.plot(bw, ratios, lw=2, label=name, **MODEL_STYLE[name])
        ax.axvline(10 * GBIT, color="k", lw=0.8, ls=":")
        ax.axvline(100 * GBIT, color="k", lw=0.8, ls=":")
        _gbit_axis(ax, hi=1000)
        ax.set_yscale("log")
        ax.set_ylim(0.9, 400)
        ax.set_yticks([1, 2, 5, 10, 20, 50, 100, 200])
        ax.set_yticklabels(["1 (none)", "2", "5", "10", "20", "50", "100", "200"])
        ax.set_xlabel("line rate per worker B [Gbit/s] (log scale)")
        ax.set_title(f"{gpu}, 64 workers", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    ax.axes.figure.axes[0].set_ylabel("minimum compression ratio r_min [-] (log scale)")
    ax.legend(title="model", loc="upper right", fontsize=9)
    fig.suptitle("Smallest ratio reaching scaling factor 0.9 (ring, DDP, full utilization)",
                 fontsize=10)
    fig.tight_layout()
    _save(fig, out / "min_ratio_vs_bandwidth.png")


def _fifo_schedule(ready, comm):
    """Start and finish of each bucket on the FIFO channel, eq. (fifo)."""
    start, finish, f = [], [], -math.inf
    for r_k, c_k in zip(ready, comm):
        s = max(f, r_k)
        f = s + c_k
        start.append(s)
        finish.append(f)
    return np.array(start), np.array(finish)


def fig_timeline(out: Path, model="bert", n=64, bw=10e9):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    import scalemodel as sm
    from scalemodel.collectives import collective_cost

    ratio = sm.min_compression(model, bw, n=n).ratio
    sc = sm.Scenario.build(model)
    p, b = sc.profile, sc.buckets
    cost = collective_cost("ring", b.nbytes, n, reduction=p.reduction, options=sc.options)
    cases = [(1.0, "uncompressed"), (ratio, f"compressed {ratio:.2f}x (the minimum for 0.9)")]
    fig, axes = plt.subplots(2, 1, figsize=(9.0, 5.6), sharex=True)
    t0 = p.forward_time
    tmax = 0.0
    for ax, (r, label) in zip(axes, cases):
        comm = cost.time(bw, 1.0, r)
        start, finish = _fifo_schedule(b.ready, comm)
        it = sm.iteration_time(model, n=n, bw=bw, compression=r)
        end = max(p.backward_time, finish[-1])
        if abs(p.forward_time + end + p.update_time - it.total) > 1e-9 * it.total:
            raise RuntimeError("timeline figure: FIFO schedule disagrees with iteration_time")
        ms = 1e3
        # compute lane
        ax.broken_barh([(0, t0 * ms)], (2.1, 0.8), color="0.75")
        ax.broken_barh([(t0 * ms, p.backward_time * ms)], (2.1, 0.8), color="C0", alpha=0.6)
        ax.broken_barh([((t0 + end) * ms, p.update_time * ms)], (2.1, 0.8), color="C2")
        ax.text(t0 * ms / 2, 2.5, "forward", ha="center", va="center", fontsize=8)
        ax.text((t0 + p.backward_time / 2) * ms, 2.5, "backward", ha="center", va="center",
                fontsize=8)
        # gradient and bucket ready times
        ax.vlines((t0 + p.tensor_ready) * ms, 1.55, 1.85, color="0.4", lw=0.5)
        ax.plot((t0 + b.ready) * ms, np.full(len(b), 1.7), "v", color="k", ms=5)
        # network lane: one bar per bucket
        colors = ["C1", "C3"]
        for k in range(len(b)):
            ax.broken_barh([((t0 + start[k]) * ms, comm[k] * ms)], (0.6, 0.8),
                           color=colors[k % 2], alpha=0.85, edgecolor="k", lw=0.3)
        big = int(np.argmax(b.nbytes))
        label_big = f"{b.nbytes[big] / 1e6:.0f} MB bucket\n(word embeddings)"
        if comm[big] * ms > 120:
            ax.text((t0 + start[big] + comm[big] / 2) * ms, 1.0, label_big, ha="center",
                    va="center", fontsize=7)
        else:
            ax.text((t0 + finish[big]) * ms + 5, 1.0, label_big, ha="left", va="center",
                    fontsize=7)
        # exposed communication
        exposed = it.exposed_communication
        if exposed > 0:
            x0, x1 = (t0 + p.backward_time) * ms, (t0 + p.backward_time + exposed) * ms
            ax.annotate("", xy=(x1, 0.35), xytext=(x0, 0.35),
                        arrowprops=dict(arrowstyle="<->", lw=1))
            ax.text((x0 + x1) / 2, 0.12, f"exposed communication {exposed * ms:.0f} ms",
                    ha="center", va="center", fontsize=8)
        ax.axvline((t0 + p.backward_time) * ms, color="k", lw=0.6, ls=":")
        ax.set_yticks([1.0, 1.7, 2.5])
        ax.set_yticklabels(["network\n(FIFO)", "ready\nbuckets", "compute"], fontsize=8)
        ax.set_ylim(-0.1, 3.1)
        ax.set_title(f"{p.name}, {n} workers, {bw / GBIT:g} Gbit/s, ring, DDP buckets: "
                     f"{label}; iteration {it.total * ms:.0f} ms, SF {it.scaling_factor:.3f}",
                     fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
        tmax = max(tmax, it.total * ms)
    axes[-1].set_xlim(0, tmax * 1.02)
    axes[-1].set_xlabel("time from the start of the iteration [ms]")
    axes[1].legend(handles=[Patch(color="C0", alpha=0.6, label="backward"),
                            Patch(color="C2", label="update"),
                            Patch(color="C1", label="bucket all-reduce (alternating colours)"),
                            plt.Line2D([], [], marker="v", ls="", color="k",
                                       label="bucket ready"),
                            plt.Line2D([], [], color="0.4", lw=0.8, label="gradient ready")],
                   fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    _save(fig, out / "timeline_bert.png")


def fig_envelope(out: Path, model="bert", n=64, target=0.9):
    import matplotlib.pyplot as plt

    import scalemodel as sm

    sc = sm.Scenario.build(model)
    p = sc.profile
    lines, env = sc.lines(n)
    ns = 1e9  # x in ns/bit
    x = np.linspace(0, 0.2e-9, 400)
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for j in range(len(lines.intercept)):
        on_hull = j in set(env.index.tolist())
        ax.plot(x * ns, (lines.intercept[j] + lines.slope[j] * x) * 1e3,
                color="C0" if on_hull else "0.7", lw=1.0 if on_hull else 0.6,
                ls="-" if j else "--")
    ax.plot(x * ns, env(x) * 1e3, color="k", lw=2.5, label="upper envelope E(x)")
    level = p.iteration_time / target - p.forward_time - p.update_time
    x_star, _ = env.max_x_below(level)
    ax.axhline(level * 1e3, color="C3", lw=1, ls=":")
    ax.text(0.2 * 0.99, level * 1e3 + 15, f"level L for SF = {target:g}", color="C3",
            ha="right", fontsize=8)
    ax.plot([x_star * ns], [level * 1e3], "o", color="C3")
    ax.annotate(f"x* = {x_star * ns:.4f} ns/bit\n(u B r = 1/x* = {1 / x_star / GBIT:.1f} Gbit/s)",
                xy=(x_star * ns, level * 1e3), xytext=(0.046, 45),
                arrowprops=dict(arrowstyle="->", lw=0.8), fontsize=8)
    for bw in (10e9, 25e9, 100e9):
        ax.axvline(ns / bw, color="0.5", lw=0.6, ls="-.")
        ax.text(ns / bw, 1090, f"u B r = {bw / GBIT:g} Gbit/s", rotation=90, va="top",
                ha="right", fontsize=7, color="0.3")
    ax.plot([], [], color="C0", lw=1, label="lines on the hull: bucket j and all after it")
    ax.plot([], [], color="0.7", lw=0.6, label="other lines (never the maximum)")
    ax.plot([], [], color="0.7", lw=0.6, ls="--", label="end of backward T_b (slope 0)")
    ax.set_xlim(0, 0.2)
    ax.set_ylim(0, 1100)
    ax.set_xlabel("x = 1/(u B r) [ns/bit]  (right = slower effective network)")
    ax.set_ylabel("end of backward and communication [ms]")
    ax.set_title(f"{p.name} on {n} workers (ring, DDP buckets): {len(lines.intercept)} lines, "
                 f"{len(env)} on the envelope", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    ax.grid(True, alpha=0.3)
    _save(fig, out / "envelope_bert.png")


def fig_fusion_algorithms(out: Path, model="bert", n=64):
    import matplotlib.pyplot as plt

    import scalemodel as sm

    bw = np.logspace(9, math.log10(400e9), 200)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 4.2), sharey=True)
    for fusion, label in (("ddp", "ddp (25 MiB buckets, first 1 MiB)"),
                          ("horovod", "horovod (64 MiB / 5 ms)"), ("none", "none (per tensor)")):
        a1.plot(bw, sm.scaling_factor(model, n, bw, fusion=fusion), lw=2, label=label)
    a1.set_title(f"fusion ({model}, {n} workers, ring)", fontsize=10)
    for alg in ("ring", "tree", "halving-doubling", "hierarchical", "ps"):
        a2.plot(bw, sm.scaling_factor(model, n, bw, algorithm=alg), lw=2, label=alg,
                ls="--" if alg == "hierarchical" else "-")
    a2.set_title(f"collective ({model}, {n} workers, DDP buckets)", fontsize=10)
    for ax in (a1, a2):
        _gbit_axis(ax)
        ax.axhline(0.9, color="k", lw=0.8, ls=":")
        ax.set_xlabel("line rate per worker B [Gbit/s] (log scale)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    a1.set_ylabel("scaling factor [-]")
    a1.set_ylim(0, 1.02)
    fig.tight_layout()
    _save(fig, out / "fusion_algorithms.png")


def fig_utilization(out: Path, model="resnet50", n=64):
    import matplotlib.pyplot as plt

    import scalemodel as sm

    bw = np.logspace(9, math.log10(400e9), 200)
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    for u in (1.0, 0.5, 0.25):
        ax.plot(bw, sm.scaling_factor(model, n, bw, utilization=u, fusion="horovod"), lw=2,
                label=f"utilization u = {u:g}")
    cl = sm.ClusterProfile(name="illustration", utilization=1.0, ceiling=25e9,
                           provenance={"source": "illustration, not a measurement"})
    ax.plot(bw, sm.scaling_factor(model, n, bw, fusion="horovod", cluster=cl), lw=2, ls="--",
            color="k", label="u = 1 with a 25 Gbit/s ceiling (illustration)")
    _gbit_axis(ax)
    ax.axhline(0.9, color="k", lw=0.8, ls=":")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("line rate per worker B [Gbit/s] (log scale)")
    ax.set_ylabel("scaling factor [-]")
    ax.set_title(f"{model}, {n} workers, ring, Horovod fusion", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, alpha=0.3)
    _save(fig, out / "utilization.png")


def fig_whatif(out: Path):
    import matplotlib.pyplot as plt

    from scalemodel.whatif import PAPER_BW, PAPER_MODELS, PAPER_N, paper_profile, whatif_table
    import scalemodel as sm

    bw_dense = np.logspace(9, 11, 150)
    ratios = (1, 2, 5, 10)
    table = whatif_table(ratios=ratios)
    j64 = PAPER_N.index(64)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), sharey=True)
    for ax, model in zip(axes, PAPER_MODELS):
        for i, r in enumerate(ratios):
            line, = ax.plot(bw_dense, sm.scaling_factor(paper_profile(model), 64, bw_dense,
                                                        compression=r, fusion="horovod"), lw=1.5,
                            label=f"r = {r}")
            ax.plot(PAPER_BW, table[model][i, j64], "o", color=line.get_color(), ms=4)
        ax.axhline(0.9, color="k", lw=0.8, ls=":")
        _gbit_axis(ax, 1, 100)
        ax.set_title(f"{model}, 64 workers", fontsize=10)
        ax.set_xlabel("line rate B [Gbit/s] (log)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("scaling factor [-]")
    axes[0].set_ylim(0, 1.02)
    axes[-1].legend(title="compression", fontsize=8, loc="lower right")
    fig.suptitle("What-if reproduction (Horovod fusion, ring, full utilization); dots: the "
                 "paper's grid points (tabulated below)", fontsize=10)
    fig.tight_layout()
    _save(fig, out / "whatif.png")


def fig_breakeven(out: Path):
    """The break-even figure of docs/compression.rst, drawn by scalemodel.plot itself."""
    import matplotlib.pyplot as plt

    from scalemodel.plot import plot_breakeven

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, model in zip(axes, ("resnet50", "bert")):
        plot_breakeven(model, n=64, target=0.9, ax=ax)
        ax.set_title(f"{model}, 64 workers (dots: break-even line rate)", fontsize=10)
    axes[1].set_ylabel("")
    fig.tight_layout()
    _save(fig, out / "breakeven.png")


def _codec_data():
    import json
    from importlib import resources
    return json.loads(resources.files("scalemodel").joinpath("data", "codec", "h100.json")
                      .read_text())


def fig_codec(out: Path):
    """Measured codec times on the H100 and their floor-and-slope fits."""
    import matplotlib.pyplot as plt
    import numpy as np

    from scalemodel.calibrate.codec_bench import fit_roofline

    data = _codec_data()["codec_sweep"]
    rank = data["rank"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, kind in zip(axes, ("encode", "decode")):
        for i, (family, phases) in enumerate(data["times"].items()):
            phase = f"{kind}@{rank}" if family == "powersgd" else kind
            m, t = np.asarray(phases[phase], dtype=float).T
            a, b, _ = fit_roofline(m, t)
            grid = np.geomspace(m.min(), m.max(), 200)
            color = f"C{i}"
            label = f"{family} (rank {rank})" if family == "powersgd" else family
            ax.loglog(m, t * 1e6, "o", color=color, ms=4, label=label)
            ax.loglog(grid, np.maximum(a, b * grid) * 1e6, "-", color=color, lw=1)
        ax.set_xlabel("elements per call" + (" (top-k, random-k: received)"
                                             if kind == "decode" else ""))
        ax.set_title(f"{kind}, NVIDIA H100 80GB HBM3", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("time per call [µs]")
    axes[1].legend(fontsize=8, ncol=2)
    fig.tight_layout()
    _save(fig, out / "codec_h100.png")


def inc_codec(out: Path):
    """The shipped H100 codec costs as a table."""
    from scalemodel.compressors import DEFAULT_CODEC_COSTS, get_compressor

    data = _codec_data()
    worst = data["codec_sweep"]["worst_relative_error"]
    repeat = data["provenance"]["repeat"]["max_relative_difference"]
    rows = []
    for family in data["codec_costs"]:
        c = DEFAULT_CODEC_COSTS[family]
        comp = get_compressor(family)
        floor = c.launch * (comp.calls_per_tensor + comp.calls_per_bucket)
        per_rank = (f"{c.encode_per_rank * 1e12:.2f} / {c.decode_per_rank * 1e12:.2f}"
                    if family == "powersgd" else "")
        rows.append([family, f"{c.encode * 1e12:.2f}", f"{c.decode * 1e12:.2f}", per_rank,
                     f"{floor * 1e6:.1f}", f"{worst[family]:.0%}", f"{repeat[family]:.1%}"])
    text = _table(["family", "encode [ps/element]", "decode [ps/element]",
                   "per rank enc / dec [ps/element]", "floor per tensor [µs]",
                   "worst fit error", "repeat differs"], rows,
                  widths=[10, 12, 12, 16, 12, 10, 10])
    _write(out / "codec_h100.inc", text)


def _backward_fractions(a, b):
    """Ready times as fractions of backward, paired by tensor name (else by position)."""
    import numpy as np

    def key(name):
        for prefix in ("lm.", "bert.", "transformer."):
            name = name.removeprefix(prefix)
        return name

    fa, fb = a.tensor_ready / a.backward_time, b.tensor_ready / b.backward_time
    if a.tensor_names and b.tensor_names:
        ra = {key(n): f for n, f in zip(a.tensor_names, fa)}
        pairs = [(ra[key(n)], f) for n, f in zip(b.tensor_names, fb) if key(n) in ra]
        return np.array(pairs).T
    return fa, fb


def inc_h100_validation(out: Path):
    import numpy as np

    import scalemodel as sm

    rows = []
    for model in ("bert-base", "bert-large", "gpt2", "resnet50", "resnet101"):
        names = (model, f"{model}-h100", f"{model}-h100-bf16")
        v100, h100, bf16 = (sm.load_profile(n) for n in names)
        fa, fb = _backward_fractions(v100, h100)
        diff = np.abs(fa - fb)

        def ratio(p, bw):
            r = sm.min_compression(p, bw, n=64)
            return f"{r.ratio:.1f}x" if r.feasible else "none reaches"

        kind = "derived" if "FLOP" in v100.provenance.get("source", "") + \
            v100.provenance.get("derivation", "") else "measured"
        rows.append([f"``{model}`` ({kind})", f"{diff.size}", f"{diff.max():.3f}",
                     f"{diff.mean():.3f}",
                     " / ".join(f"{p.iteration_time * 1e3:.0f}" for p in (v100, h100, bf16)),
                     " / ".join(ratio(p, 10e9) for p in (v100, h100, bf16)),
                     " / ".join(ratio(p, 100e9) for p in (v100, h100, bf16))])
    text = _table(["V100 profile", "tensors paired", "largest fraction difference",
                   "mean fraction difference", "T_1 [ms] V100 / H100 / H100 bf16",
                   "min. compression, 64 workers, 10 Gbit/s",
                   "same, 100 Gbit/s"], rows, widths=[16, 8, 9, 9, 14, 22, 18])
    _write(out / "h100_validation.inc", text)


# --------------------------------------------------------------------------- text


def inc_profiles(out: Path):
    import scalemodel as sm
    from scalemodel.profiles import ALIASES

    rows, prov_text = [], []
    for name in sm.list_profiles():
        p = sm.load_profile(name)
        aliases = ", ".join(f"``{a}``" for a, t in sorted(ALIASES.items()) if t == name)
        rows.append([f"``{name}``", aliases, f"{p.batch_size}", f"{p.tensor_bytes.size}",
                     f"{p.total_bytes / 1e6:.1f}", f"{p.forward_time * 1e3:.1f}",
                     f"{p.backward_time * 1e3:.1f}", f"{p.update_time * 1e3:.1f}",
                     f"{p.iteration_time * 1e3:.1f}"])
        prov = p.provenance
        entry = [f"``{name}``", f"   {p.description} (device: {p.device}).", "",
                 f"   *Source:* {prov.get('source', '')}"]
        if prov.get("citation"):
            entry += ["", f"   *Citation:* {prov['citation']}"]
        prov_text.append("\n".join(entry) + "\n")
    text = _table(["name", "aliases", "batch [samples]", "tensors", "gradients [MB]",
                   "T_f [ms]", "T_b [ms]", "T_u [ms]", "T_1 [ms]"], rows,
                  widths=[14, 22, 9, 9, 11, 9, 9, 8, 9])
    _write(out / "profiles_table.inc", text)
    _write(out / "profiles_provenance.inc", "\n".join(prov_text))


def inc_whatif(out: Path):
    from scalemodel.whatif import PAPER_BW, PAPER_N, PAPER_RATIOS, whatif_table

    table = whatif_table()
    parts = []
    for model, sf in table.items():
        rows = []
        for i, r in enumerate(PAPER_RATIOS):
            for j, n in enumerate(PAPER_N):
                cells = []
                for k in range(len(PAPER_BW)):
                    v = f"{sf[i, j, k]:.3f}"
                    cells.append(f"**{v}**" if sf[i, j, k] >= 0.9 else v)
                rows.append([f"{r:g}", f"{n}"] + cells)
        parts.append(_table(["r [-]", "N"] + [f"{b / GBIT:g} Gbit/s" for b in PAPER_BW], rows,
                            title=f"{model}: scaling factor [-] (bold: at least 0.9)"))
    _write(out / "whatif_tables.inc", "\n".join(parts))


def inc_des(out: Path, repo: Path):
    """Closed form against the discrete-event reference on random configurations."""
    sys.path.insert(0, str(repo / "tests"))
    try:
        from des_reference import simulate_iteration
    finally:
        sys.path.pop(0)
    import scalemodel as sm

    rng = np.random.default_rng(2024)
    algs = ("ring", "tree", "halving-doubling", "hierarchical", "allgather", "ps")
    models = ("resnet50", "vgg16", "bert-base")
    rows, worst, total, per = [], 0.0, 0, 10
    fusions = ("ddp", "horovod", "none")
    for alg in algs:
        row = [alg]
        for fusion in fusions:
            diffs = []
            for _ in range(per):
                prof = sm.load_profile(models[rng.integers(len(models))])
                n = int(8 * rng.integers(1, 17)) if alg == "hierarchical" else int(
                    rng.integers(2, 257))
                cfg = dict(n=n, bw=float(10 ** rng.uniform(9, 11.5)),
                           utilization=float(rng.uniform(0.2, 1.0)),
                           compression=float(rng.choice([1.0, rng.uniform(1, 100)])),
                           algorithm=alg, fusion=fusion, alpha=float(rng.uniform(0, 5e-5)))
                sf = sm.scaling_factor(prof, **cfg)
                ref = prof.iteration_time / simulate_iteration(prof, **cfg)
                diffs.append(abs(sf / ref - 1))
            total += per
            worst = max(worst, max(diffs))
            row.append(f"{max(diffs):.1e}")
        rows.append(row)
    text = _table(["algorithm"] + [f"fusion ``{f}``" for f in fusions], rows,
                  widths=[25, 25, 25, 25],
                  title=f"Largest relative difference of the scaling factor, {per} random "
                        f"configurations per cell")
    text += (f"\nIn all, {total} configurations (resnet50, vgg16, bert-base; 2 to 256 workers "
             f"(multiples of 8 for hierarchical); 1 to 316 Gbit/s; utilization 0.2 to 1; "
             f"ratio 1 or uniform in 1 to 100; latency 0 to 50 us): the largest relative difference is "
             f"{worst:.1e}.\n")
    _write(out / "des_table.inc", text)


def inc_derivations(out: Path):
    import sympy as sp

    from scalemodel import derivations as d

    log2n = sp.Symbol("log2n", positive=True)
    names = {log2n: r"\log_2 n"}
    ex = d.collective_expressions(log2n)
    titles = {"ring": "ring all-reduce", "halving-doubling":
              "recursive halving-doubling, n a power of two",
              "tree": "double binary tree", "allgather": "ring all-gather",
              "ps": "parameter server, shards co-located with the workers"}
    parts = []
    for key in ("ring", "tree", "halving-doubling", "allgather", "ps"):
        parts.append(f"``{key}`` ({titles[key]}):\n\n.. math::\n\n   T_\\text{{{key}}} = "
                     + sp.latex(ex[key], symbol_names=names) + "\n")
    _write(out / "sympy_collectives.inc", "\n".join(parts))

    R = sp.symbols("R1:4", real=True)
    C = sp.symbols("c1:4", nonnegative=True)
    rec, closed = d.fifo_finish(R, C), d.fifo_closed_form(R, C)
    text = (".. math::\n\n   F_3 = " + sp.latex(rec) + "\n\n"
            "and :func:`~scalemodel.derivations.fifo_closed_form` gives\n\n"
            ".. math::\n\n   F_3 = " + sp.latex(closed) + "\n")
    _write(out / "sympy_fifo.inc", text)

    s = d.solver_expressions()
    text = (".. math::\n\n   x^* = " + sp.latex(s["x_star"]) + ", \\qquad r_\\min = "
            + sp.latex(s["r_min"]) + ", \\qquad B_\\min = " + sp.latex(s["B_min"]) + "\n")
    _write(out / "sympy_solvers.inc", text)


def inc_cli(out: Path):
    cmds = {
        "cli_min_compression.inc": ["min-compression", "--model", "bert", "--bw", "10Gbps"],
        "cli_iteration.inc": ["iteration", "--model", "bert", "--n", "64", "--bw", "10Gbps"],
        "cli_iteration_compressed.inc": ["iteration", "--model", "bert", "--n", "64", "--bw",
                                         "10Gbps", "--compression", "5.91"],
        "cli_profiles.inc": ["profiles"],
        "cli_scaling.inc": ["scaling", "--model", "bert", "--n", "16,64", "--bw",
                            "10,25,100Gbps"],
        "cli_required_bandwidth.inc": ["required-bandwidth", "--model", "bert"],
        "cli_plan.inc": ["plan", "--model", "bert", "--bw", "10Gbps"],
        "cli_breakeven.inc": ["breakeven", "--model", "resnet50", "--n", "16,32,64"],
    }
    for fname, argv in cmds.items():
        _write(out / fname, _console(argv, _cli(argv)))


# --------------------------------------------------------------------------- emulated cluster

EMULATED = Path(__file__).resolve().parents[2] / "calibration" / "results" / "emulated"


def _emulated():
    import json

    return json.loads((EMULATED / "emulated.json").read_text())


def inc_emulated(out: Path):
    """Predicted against measured on the emulated cluster (committed measurements)."""
    import statistics

    data = _emulated()
    rows, errs, terrs, other = [], [], [], []
    calibrated_on = data["calibration"]["model"]
    for r in data["records"]:
        e = r["predicted"] - r["measured"]
        te = r["measured"] / r["predicted"] - 1  # predicted / measured iteration time - 1
        cal = r["calibration_point"]
        if not cal:
            errs.append(abs(e))
            terrs.append(abs(te))
            if r["model"] != calibrated_on.split(":")[0]:
                other.append(abs(te))
        lo, hi = r["tn_p10_p90"]
        rows.append([r["model"], f"{r['line_rate'] / 1e6:g}", f"{r['t1'] * 1e3:.1f}",
                     f"{r['tn'] * 1e3:.1f} [{lo * 1e3:.0f}, {hi * 1e3:.0f}]",
                     f"{r['measured']:.3f}", f"{r['predicted']:.3f}",
                     f"{e:+.3f}" + (" (calibration point)" if cal else ""),
                     f"{100 * te:+.1f} %",
                     f"{r['predicted_transport_only']:.3f}"])
    cal = data["calibration"]
    cl = cal["cluster"]
    host = (cl.get("host_overhead") or {}).get("gamma", 0.0)
    eta = cl.get("overlap", 1.0)
    text = _table(["model", "line rate [Mbit/s]", "T1 [ms]", "T2 [ms] (p10, p90)",
                   "measured S", "predicted S", "error", "iteration-time error",
                   "transport fit alone"], rows,
                  title="Two workers on the emulated cluster: predicted against measured "
                        "scaling factor")
    text += (f"\nCalibrated once, at {cal['rate'] / 1e6:g} Mbit/s with ``{cal['model']}``: "
             f"latency :math:`\\alpha` = {cl['alpha'] * 1e3:.3f} ms, utilization "
             f"{cl['utilization']:.3f}, overlap efficiency :math:`\\eta` = {eta:.2f}, "
             f"host overhead {host * 1e9:.2f} ns/byte. "
             f"Over the {len(errs)} settings not used to calibrate: median absolute error "
             f"**{statistics.median(errs):.3f}**, largest **{max(errs):.3f}** in scaling "
             f"factor; in iteration time median **{100 * statistics.median(terrs):.1f} %**, "
             f"largest **{100 * max(terrs):.1f} %** (on the model not calibrated on alone: "
             f"largest {100 * max(other or [0.0]):.1f} %) "
             f"({data['iterations']} timed iterations per run; measured {data['date']} on "
             f"{data['machine']}).\n")
    repeat = EMULATED.parent / "emulated-repeat" / "emulated.json"
    if repeat.exists():
        import json

        rep = json.loads(repeat.read_text())
        errs2 = [abs(r["predicted"] - r["measured"]) for r in rep["records"]
                 if not r["calibration_point"]]
        cl2 = rep["calibration"]["cluster"]
        same = {(r["model"], r["line_rate"]): r["measured"] for r in rep["records"]}
        spread = [abs(r["measured"] - same[(r["model"], r["line_rate"])])
                  for r in data["records"] if (r["model"], r["line_rate"]) in same]
        text += (f"\nThe whole experiment run again from scratch (new calibration, "
                 f"``calibration/results/emulated-repeat/``): overlap efficiency "
                 f"{cl2.get('overlap', 1.0):.2f}, host overhead "
                 f"{(cl2.get('host_overhead') or {}).get('gamma', 0.0) * 1e9:.2f} ns/byte; "
                 f"median absolute error **{statistics.median(errs2):.3f}**, largest "
                 f"**{max(errs2):.3f}**. The same setting measured in the two runs differs by "
                 f"up to {max(spread):.3f} (median {statistics.median(spread):.3f}): that "
                 "run-to-run spread of a 2-core machine bounds how close any prediction can "
                 "get.\n")
    _write(out / "emulated.inc", text)


def fig_emulated(out: Path):
    import matplotlib.pyplot as plt

    data = _emulated()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for model, colour in zip(sorted({r["model"] for r in data["records"]}), ("C0", "C1", "C2")):
        rec = sorted((r for r in data["records"] if r["model"] == model),
                     key=lambda r: r["line_rate"])
        rate = [r["line_rate"] / 1e6 for r in rec]
        ax1.plot(rate, [r["measured"] for r in rec], "o", color=colour,
                 label=f"{model} measured")
        ax1.plot(rate, [r["predicted"] for r in rec], "-", color=colour,
                 label=f"{model} predicted")
        ax2.plot([r["measured"] for r in rec], [r["predicted"] for r in rec], "o",
                 color=colour, label=model)
    ax1.set_xscale("log")
    ax1.set_xlabel("link rate [Mbit/s]")
    ax1.set_ylabel("scaling factor, 2 workers [-]")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    ax2.plot([0, 1], [0, 1], "k-", lw=0.8)
    for d in (0.03, 0.08):
        ax2.fill_between([0, 1], [-d, 1 - d], [d, 1 + d], color="0.5", alpha=0.12, lw=0)
    ax2.set_xlim(0, 1)
    ax2.set_ylim(0, 1)
    ax2.set_xlabel("measured scaling factor [-]")
    ax2.set_ylabel("predicted [-]")
    ax2.set_title("bands: +-0.03 and +-0.08", fontsize=8)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out / "emulated.png")


# --------------------------------------------------------------------------- real clusters

def _validation():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_published.py"
    spec = importlib.util.spec_from_file_location("validate_published", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inc_p3dn(out: Path):
    """Fit the p3dn cluster from the primary protocol and tabulate the held-out runs."""
    import json

    from scalemodel.fitting import _fmt

    v = _validation()
    runs, single = v.p3dn_runs()
    rows_ideal, med_i, max_i = v.ideal(runs)
    text = []
    summary = []
    for name, cal in (("two runs: 2 and 8 servers at 100 Gbit/s (primary)",
                       ["2 servers @ 100G", "8 servers @ 100G"]),
                      ("one run: 8 servers at 100 Gbit/s", ["8 servers @ 100G"]),
                      ("two runs: 2 servers at 10, 8 servers at 100 Gbit/s",
                       ["2 servers @ 10G", "8 servers @ 100G"]),
                      ("two runs: 8 servers at 10 and at 100 Gbit/s",
                       ["8 servers @ 10G", "8 servers @ 100G"])):
        fit, rows, med, mx = v.evaluate(runs, single, cal)
        free = ", ".join(f"{k} = {_fmt(fit.parameters[k].value, fit.parameters[k].unit)}"
                         for k in fit.free)
        summary.append([name, free, f"{100 * med:.1f} %", f"{100 * mx:.1f} %",
                        "yes" if med <= 0.05 and mx <= 0.15 else "**no**"])
        if name.endswith("(primary)"):
            primary, primary_rows = fit, rows
    text.append(_table(["calibrated on", "fitted", "median error", "largest error",
                        "meets 5 % / 15 %"], summary,
                       title="Held-out iteration-time errors by calibration protocol"))
    text.append(f"\nThe ideal model without a fit errs by {100 * med_i:.1f} % (median) and "
                f"{100 * max_i:.1f} % (largest) on the same runs.\n")
    rows = [[r["label"], f"{r['scaling_factor']:.3f}", f"{sf:.3f}", f"{100 * e:+.1f} %"]
            for r, sf, e in primary_rows]
    text.append(_table(["run", "measured SF", "predicted SF", "iteration-time error"], rows,
                       title="The primary protocol, run by run"))
    par = primary.parameters
    text.append("\nThe fitted cluster (95 % intervals): " + "; ".join(
        f"{k} {_fmt(p.value, p.unit)} [{_fmt(p.interval[0], p.unit)}, "
        f"{_fmt(p.interval[1], p.unit)}] ({p.status})"
        for k, p in par.items() if p.status != "default") + ".\n")
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    saved = results / "validate_published.json"
    if saved.exists():
        rec = json.loads(saved.read_text()).get("all_pairs")
        if rec:
            text.append(
                f"\nEvery one of the {rec['pairs']} pairs of runs as the calibration "
                f"(``python benchmarks/validate_published.py --all-pairs``, committed in "
                f"``benchmarks/results/``): median of the medians "
                f"{100 * rec['median_of_medians']:.1f} %, median of the largest errors "
                f"{100 * rec['median_of_largest']:.1f} %; {rec['meeting']} of "
                f"{rec['pairs']} pairs meet the target. By what the pair holds:\n")
            rows = [[k, f"{v['meeting']} of {v['pairs']}", f"{100 * v['median_largest']:.1f} %"]
                    for k, v in sorted(rec.get("groups", {}).items())]
            if rows:
                text.append(_table(["the two runs", "meet 5 % / 15 %",
                                    "median largest error"], rows))
    _write(out / "p3dn.inc", "\n".join(text))
    _write(out / "p3dn_cluster.json", json.dumps(primary.cluster.to_dict(), indent=1))


def fig_p3dn(out: Path):
    """Measured, fitted and ideal scaling factor against the bandwidth cap."""
    import matplotlib.pyplot as plt

    import scalemodel as sm

    v = _validation()
    runs, single = v.p3dn_runs()
    fit, *_ = v.evaluate(runs, single, ["2 servers @ 100G", "8 servers @ 100G"])
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    bw = np.logspace(9, 11, 60)
    for n, colour in ((16, "C0"), (32, "C1"), (64, "C2")):
        meas = sorted((r["bw"], r["scaling_factor"]) for r in runs if r["n"] == n)
        ax.plot([b / 1e9 for b, _ in meas], [s for _, s in meas], "o", color=colour,
                label=f"{n // 8} servers measured")
        ax.plot(bw / 1e9, sm.scaling_factor("resnet50", n, bw, cluster=fit.cluster,
                                            **{k: v.SETUP[k] for k in ("fusion",
                                                                        "algorithm")}),
                "-", color=colour, label=f"{n // 8} servers fitted")
        ax.plot(bw / 1e9, sm.scaling_factor("resnet50", n, bw, **v.SETUP), ":",
                color=colour, alpha=0.7)
    for r in runs:
        if r["label"] in ("2 servers @ 100G", "8 servers @ 100G"):
            ax.plot(r["bw"] / 1e9, r["scaling_factor"], "s", ms=11, mfc="none", mec="k")
    ax.set_xscale("log")
    ax.set_xlabel("bandwidth cap per NIC [Gbit/s]")
    ax.set_ylabel("scaling factor")
    ax.set_ylim(0, 1.05)
    ax.set_title("ResNet-50 on p3dn: measured (dots), fitted from the two squared runs "
                 "(lines), ideal (dotted)", fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    _save(fig, out / "p3dn.png")


# --------------------------------------------------------------------------- sharding

SHARDING_CLUSTER = dict(gpus_per_node=8, nics_per_node=1)
"""The cluster of the guide's sharding question: nodes of 8 H100 SXM (NVLink at the
GPU's datasheet rate) with one 100 Gbit/s NIC each."""

SHARDING_STYLE = {"none": ("DDP (no sharding)", "C0", "-"),
                  "zero2": ("ZeRO-2 / SHARD_GRAD_OP", "C1", "-"),
                  "zero3": ("ZeRO-3 / FSDP FULL_SHARD", "C2", "-"),
                  "hybrid_shard": ("HYBRID_SHARD", "C3", "--")}


def fig_sharding(out: Path, model="llama-2-7b"):
    """Scaling factor and memory per GPU against the GPU count, per strategy."""
    import matplotlib.pyplot as plt

    import scalemodel as sm

    intra = sm.get_gpu("h100-sxm").intra_node_bw
    ns = np.array([8, 16, 32, 64, 128, 256, 512])
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13.5, 4.0))
    for strategy, (label, colour, ls) in SHARDING_STYLE.items():
        for ax, nics, bw in ((a1, 1, 100e9), (a2, 8, 400e9)):
            sf = sm.scaling_factor(model, ns, bw, sharding=strategy, gpus_per_node=8,
                                   nics_per_node=nics, intra_bw=intra)
            ax.plot(ns, sf, marker="o", ms=3, color=colour, ls=ls, lw=1.8, label=label)
        mem = sm.memory(model, ns, sharding=strategy).per_gpu / 2**30
        a3.plot(ns, mem, marker="o", ms=3, color=colour, ls=ls, lw=1.8, label=label)
    for ax, title in ((a1, "one 100 Gbit/s NIC per node"),
                      (a2, "eight 400 Gbit/s NICs per node (DGX H100)")):
        ax.axhline(1.0, color="k", lw=0.6, ls=":")
        ax.axhline(0.9, color="k", lw=0.8, ls=":")
        ax.set_ylim(0, 1.2)
        ax.set_ylabel("scaling factor [-]")
        ax.set_title(f"{model}, nodes of 8 H100: {title}", fontsize=9)
    hbm = sm.get_gpu("h100-sxm").hbm_bytes / 2**30
    a3.axhline(hbm, color="k", lw=0.8, ls=":")
    a3.text(8.5, hbm + 2, "H100: 80 GB", fontsize=8)
    a3.set_ylim(0, 130)
    a3.set_ylabel("memory per GPU [GiB]")
    a3.set_title(f"{model}: memory per GPU (Adam, bf16, 4,096 tokens)", fontsize=9)
    for ax in (a1, a2, a3):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_xlabel("GPUs n (log scale)")
        ax.grid(True, alpha=0.3)
    a1.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    _save(fig, out / "sharding.png")


def _sharded_validation():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "validate_sharded.py"
    spec = importlib.util.spec_from_file_location("validate_sharded", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inc_sharded_validation(out: Path):
    """Published FSDP throughput against the prediction (benchmarks/validate_sharded.py)."""
    v = _sharded_validation()
    results, stats = v.evaluate()
    head, body = v.table(results)
    text = _table(head, body, title="Published (LLM Foundry) against predicted tokens per "
                  "second per GPU; one efficiency fitted per series on its fewest-GPU row")
    (med, mx), (fmed, fmx) = stats["model"], stats["flat"]
    k, smed, smx = stats["same_batch"]
    text += (f"\nOver the {stats['predicted_rows']} predicted rows ({stats['series']} "
             f"series): median absolute error **{100 * med:.1f} %**, largest "
             f"**{100 * mx:.1f} %**. The flat baseline (every row at its calibration row's "
             f"per-GPU throughput) errs by {100 * fmed:.1f} % and {100 * fmx:.1f} %. On the "
             f"{k} rows with the calibration row's micro-batch: median {100 * smed:.1f} %, "
             f"largest {100 * smx:.1f} %.\n")
    _write(out / "sharded_validation.inc", text)

    # second source: DeepSpeed ZeRO-3 at 100 to 800 Gbit/s per node (ZeRO++ blog)
    results, stats = v.evaluate_network()
    held = [r for r in results if r["predicted"] is not None and not r["calibration"]]
    unstated = list(dict.fromkeys(r["stated"] for r in results if r["predicted"] is None))
    head, body = v.table_network(results)
    text = _table(head, body, title="Published (ZeRO++ blog, ZeRO-3 baseline, 384 V100) "
                  "against predicted TFLOP/s per GPU; one efficiency fitted per series on its "
                  "highest-bandwidth row")
    (med, mx), (fmed, fmx), (smed, smx) = stats["model"], stats["flat"], stats["serial"]
    bmed, bmx = stats["block"]
    text += (f"\nOver the {stats['predicted_rows']} predicted rows ({stats['series']} "
             f"series): median absolute error **{100 * med:.1f} %**, largest "
             f"**{100 * mx:.1f} %**"
             f"{', every one too fast' if all(r['error'] > 0 for r in held) else ''}. "
             f"Gathered by block, as FSDP wraps (the first run of this protocol), the model "
             f"errs by {100 * bmed:.1f} % and {100 * bmx:.1f} %. The flat baseline errs by "
             f"{100 * fmed:.1f} % and {100 * fmx:.1f} %. The serial bound (no overlap) errs "
             f"by {100 * smed:.1f} % and {100 * smx:.1f} %; {stats['bracketed']} of the "
             f"{stats['predicted_rows']} published values lie between it and the model. "
             f"{stats['recorded_rows']} rows ({', '.join(unstated)}) are recorded but not "
             f"predicted: their shapes are not stated in a reachable source.\n")
    _write(out / "sharded_validation_network.inc", text)

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    links = [1, 2, 4, 8]
    for tokens, colour in ((1024, "tab:blue"), (2048, "tab:orange")):
        rows = [r for r in results if r["predicted"] is not None and r["tokens"] == tokens]
        cal = next(r for r in rows if r["calibration"])
        gbps = [100 * k for k in links]
        model = [v.predicted_network_step(dict(cal, links=k), cal["efficiency"])[0]
                 for k in links]
        serial = [v.serial_network_tflops(dict(cal, links=k), cal["serial_efficiency"])
                  for k in links]
        block = [v.predicted_network_step(dict(cal, links=k), cal["block_efficiency"],
                                          wrap="block")[0] for k in links]
        label = f"18B, {tokens // 1024}K tokens per GPU"
        ax.plot(gbps, model, color=colour, lw=1.8, marker="o", ms=3,
                label=f"{label}: model (per module)")
        ax.plot(gbps, block, color=colour, lw=1.0, ls="-.",
                label=f"{label}: model per block (first run)")
        ax.plot(gbps, serial, color=colour, lw=1.2, ls="--", label=f"{label}: serial bound")
        ax.axhline(cal["tflops"], color=colour, lw=0.8, ls=":")
        ax.errorbar([r["gbps"] for r in rows], [r["tflops"] for r in rows],
                    yerr=[r["read"] for r in rows], fmt="s", ms=6, mfc="white", color=colour,
                    capsize=3, label=f"{label}: published")
        ax.plot([cal["gbps"]], [cal["tflops"]], "s", ms=6, color=colour, zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks([100, 200, 400, 800])
    ax.set_xticklabels(["100", "200", "400", "800"])
    ax.set_xlabel("inter-node bandwidth per node [Gbit/s] (log scale)")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_ylim(0, 55)
    ax.set_title("DeepSpeed ZeRO-3, GPT 18B on 384 V100 (16 per node): filled square = "
                 "calibration, dotted = flat", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6, loc="lower right", ncol=2)
    fig.tight_layout()
    _save(fig, out / "sharded_validation_network.png")


def fig_transfer(out: Path):
    """Held-out iteration-time errors of ``benchmarks/validate_transfer.py``'s committed
    run (``benchmarks/results/validate_transfer.json``), each with its interval, per
    source: the figure shows that run's numbers, it recomputes nothing."""
    import json

    import matplotlib.pyplot as plt

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
        "validate_transfer.json"
    sources = json.loads(path.read_text())["sources"]
    names = [k for k, v in sources.items() if v.get("rows")]
    cols = 3
    fig, axes = plt.subplots((len(names) + cols - 1) // cols, cols,
                             figsize=(11.5, 3.1 * ((len(names) + cols - 1) // cols)),
                             squeeze=False)
    for ax, name in zip(axes.flat, names):
        rows = sorted(sources[name]["rows"], key=lambda r: r["measured"])
        x = np.arange(len(rows))
        err = np.array([100 * r["error"] for r in rows])
        lo = np.array([100 * (r["low"] / r["measured"] - 1) for r in rows])
        hi = np.array([100 * (r["high"] / r["measured"] - 1) if r["high"] is not None
                       and math.isfinite(r["high"]) else 400.0 for r in rows])
        inside = np.array([bool(r["inside"]) for r in rows])
        ax.vlines(x, lo, np.minimum(hi, 400), color="0.6", lw=1.2)
        ax.axhspan(-5, 5, color="tab:green", alpha=0.12, lw=0)
        ax.axhline(0, color="k", lw=0.6)
        for band in (-15, 15):
            ax.axhline(band, color="tab:green", lw=0.6, ls="--")
        ax.plot(x[inside], err[inside], "o", ms=3.5, color="tab:blue", label="inside")
        ax.plot(x[~inside], err[~inside], "x", ms=5, color="tab:red", label="outside")
        s = sources[name]["summary"]
        ax.set_title(f"{name}: median {100 * s['median']:.1f} %, largest "
                     f"{100 * s['largest']:.1f} %, {100 * s['inside']:.0f} % inside",
                     fontsize=8)
        ax.set_ylim(-60, 60)
        ax.set_xlabel("held-out runs, by measured iteration time", fontsize=7)
        ax.set_ylabel("predicted / measured - 1 [%]", fontsize=7)
        ax.set_xticks([])
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, out / "transfer.png")


def fig_llm(out: Path):
    """``benchmarks/validate_llm.py``'s committed run
    (``benchmarks/results/validate_llm.json``): each prediction's error in tokens per
    second per GPU against the published one, with its interval and, beside it, the
    constant-MFU rule's; scaling with n (left) and across model sizes (right), the
    predictions from memory-pressured calibration runs apart. The figure shows that run's
    numbers, it recomputes nothing."""
    import json

    import matplotlib.pyplot as plt

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
        "validate_llm.json"
    res = json.loads(path.read_text())
    panels = (("scaling with n: one run of each series calibrates",
               res["with_n"] + res["torchtitan"]),
              ("across model sizes: one model's run predicts the others on its GPU",
               res["sizes"]))
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.2),
                             gridspec_kw={"width_ratios": [1, 2.2]})
    for ax, (title, rows) in zip(axes, panels):
        rows = sorted(rows, key=lambda r: (bool(r.get("calibration_pressured")),
                                           r["error"]))
        x = np.arange(len(rows))
        err = np.array([100 * r["error"] for r in rows])
        # the interval is in tokens/s: error of its ends, capped where unbounded
        lo = np.array([100 * (r["low"] / r["published"] - 1) for r in rows])
        hi = np.array([100 * (r["high"] / r["published"] - 1) if r["high"] else 200.0
                       for r in rows])
        rule = np.array([100 * r["rule"] for r in rows])
        inside = (lo <= 0) & (hi >= 0)
        pressured = np.array([bool(r.get("calibration_pressured")) for r in rows])
        ax.vlines(x, lo, np.minimum(hi, 200), color="0.65", lw=1.2)
        ax.axhspan(-5, 5, color="tab:green", alpha=0.12, lw=0)
        ax.axhline(0, color="k", lw=0.6)
        for band in (-15, 15):
            ax.axhline(band, color="tab:green", lw=0.6, ls="--")
        ax.plot(x, rule, "_", ms=7, color="tab:orange", label="constant-MFU rule")
        for mask, colour, label in ((~pressured, "tab:blue", "calibration run with room"),
                                    (pressured, "tab:purple",
                                     "calibration run memory-pressured")):
            ax.plot(x[mask & inside], err[mask & inside], "o", ms=3.5, color=colour,
                    label=f"{label}, inside")
            ax.plot(x[mask & ~inside], err[mask & ~inside], "x", ms=5, color=colour,
                    label=f"{label}, outside")
        if pressured.any():
            ax.axvline(np.argmax(pressured) - 0.5, color="0.4", lw=0.6, ls=":")
        ax.set_ylim(-60, 80)
        ax.set_title(f"{title}\n{int(inside.sum())} of {len(rows)} inside, median "
                     f"|error| {np.median(np.abs(err)):.1f} % (rule "
                     f"{np.median(np.abs(rule)):.1f} %)", fontsize=8)
        ax.set_xlabel("predictions, by calibration run's pressure and error", fontsize=7)
        ax.set_ylabel("predicted / published tokens/s - 1 [%]", fontsize=7)
        ax.set_xticks([])
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=5, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    _save(fig, out / "llm_validation.png")


def fig_host(out: Path):
    """The H200 repeat sweep (``calibration/results/h200/framework-repeat``): every
    measurement's DDP iterations predicted from each other measurement's sweep, with the
    cluster's constant per-iteration and per-bucket costs (left) and with its host costs
    on the library's timeline (right: :class:`~scalemodel.hostcosts.HostCosts`,
    :meth:`~scalemodel.Scenario.wrapped_single_worker_time`), coloured by the host's
    share of the plain iteration. The same pairs as section 4 of
    ``benchmarks/validate_framework.py``'s output."""
    import json

    import attrs
    import matplotlib.pyplot as plt

    import scalemodel as sm
    from scalemodel.calibrate.wrapper import WrapperMeasurement
    from scalemodel.fusion import DDPBuckets

    root = Path(__file__).resolve().parents[2] / "calibration" / "results" / "h200"
    meas = {p.name[: -len(".wrapper.json")]:
            WrapperMeasurement.from_dict(json.loads(p.read_text()))
            for p in sorted((root / "framework-repeat").glob("*.wrapper.json"))}
    prof = {k: sm.load_profile(root / "framework" / f"{k}.profile.json") for k in meas}
    fits = {k: (m.fit(), m.host_costs(), m.host_fit()) for k, m in meas.items()}
    points = {"constant": [], "host": []}
    for src, (line, costs, _) in fits.items():
        cl = sm.ClusterProfile(host=costs, provenance={"source": "docs"})
        for dst, m in meas.items():
            if dst == src:
                continue
            f = fits[dst][2]
            p = attrs.evolve(prof[dst].scaled_to(f["iteration_plain"]),
                             host_time=f["host_plain"])
            share = f["host_plain"] / f["iteration_plain"]
            for cap, k, w in zip(m.bucket_caps, m.buckets, np.median(m.wrapped, axis=1)):
                c = cap * 2.0**20 if cap else 1.0
                sc = sm.Scenario.build(p, cluster=cl,
                                       fusion=DDPBuckets(cap_bytes=c, first_bucket_bytes=c))
                points["host"].append((w, sc.wrapped_single_worker_time(), share))
                points["constant"].append((w, f["iteration_plain"] + line["iteration_overhead"]
                                           + k * line["bucket_overhead"], share))
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.4), sharey=True)
    titles = {"constant": "constant costs (t_w + K c_b)", "host": "host costs (eq. host-lead)"}
    for ax, key in zip(axes, ("constant", "host")):
        a = np.array(points[key])
        err = 100 * (a[:, 1] / a[:, 0] - 1)
        sc_ = ax.scatter(a[:, 0] * 1e3, err, c=a[:, 2], cmap="viridis", vmin=0, vmax=1, s=12)
        ax.axhspan(-5, 5, color="tab:green", alpha=0.12, lw=0)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log")
        ticks = [20, 30, 40, 60, 100]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xticks([], minor=True)
        ax.set_xlabel("measured DDP iteration on one H200 [ms]")
        ax.set_title(f"{titles[key]}\nmedian |error| {np.median(np.abs(err)):.1f} %, "
                     f"largest {np.abs(err).max():.1f} %", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("predicted / measured - 1 [%]")
    fig.colorbar(sc_, ax=axes, label="host issue time / plain iteration (1: host-bound)")
    _save(fig, out / "host.png")


def inc_sharding_cli(out: Path):
    argv = ["scaling", "--model", "llama-2-7b", "--n", "8,64,512", "--bw", "100Gbps",
            "--sharding", "fsdp", "--gpus-per-node", "8", "--intra-bw", "450GB/s"]
    _write(out / "cli_sharding.inc", _console(argv, _cli(argv)))


# --------------------------------------------------------------------------- sphinx


def generate(srcdir: Path, log=print):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "figure.dpi": 110})
    out = srcdir / "generated"
    out.mkdir(exist_ok=True)
    steps = [fig_scaling_vs_bandwidth, fig_min_ratio_vs_bandwidth, fig_timeline, fig_envelope,
             fig_fusion_algorithms, fig_utilization, fig_whatif, fig_breakeven, fig_codec,
             inc_codec, inc_h100_validation, inc_profiles,
             fig_emulated, inc_emulated, inc_p3dn, fig_p3dn,
             inc_whatif,
             inc_derivations, inc_cli, lambda o: inc_des(o, srcdir.parent),
             fig_sharding, inc_sharded_validation, inc_sharding_cli, fig_transfer,
             fig_llm, fig_host]
    t0 = time.perf_counter()
    for step in steps:
        step(out)
    log(f"scalemodel_docs: generated figures and tables in {time.perf_counter() - t0:.1f} s")


def _on_builder_inited(app):
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    generate(Path(app.srcdir), log=logger.info)


def _check_api_complete(app, env):
    """Warn (an error under ``-W``) when a name of ``scalemodel.__all__`` has no entry in
    the API reference, so that a new public name cannot go undocumented."""
    from sphinx.util import logging

    import scalemodel

    documented = set(env.get_domain("py").objects)
    missing = [name for name in scalemodel.__all__ if f"scalemodel.{name}" not in documented]
    if missing:
        logging.getLogger(__name__).warning(
            "scalemodel.__all__ names missing from the API reference (docs/api.rst): %s",
            ", ".join(missing))


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    app.connect("env-check-consistency", _check_api_complete)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # regenerate without Sphinx: python docs/_ext/scalemodel_docs.py
    generate(Path(__file__).resolve().parents[1])
