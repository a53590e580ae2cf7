"""The what-if analysis of Zhang et al., "Is Network the Bottleneck of Distributed
Training?" (NetAI 2020, arXiv:2006.10103), reproduced with the closed-form model.

Setting (the paper's simulation): Horovod fusion (64 MiB / 5 ms), ring all-reduce, full
utilization of the line rate, no message latency, the measured V100 vector-add curve as
reduction cost, measured V100 backward timings of ResNet50, ResNet101 and VGG16 (batch
32), for N in {16, 32, 64} workers, B in {1, 10, 25, 40, 100} Gbit/s and compression
ratio r in {1, 2, 5, 10, 50, 100}.
"""

from __future__ import annotations

import numpy as np

from .model import scaling_factor

__all__ = ["PAPER_MODELS", "PAPER_N", "PAPER_BW", "PAPER_RATIOS", "whatif_table",
           "format_whatif_table"]

PAPER_MODELS = ("resnet50", "resnet101", "vgg16")
PAPER_N = (16, 32, 64)
PAPER_BW = (1e9, 10e9, 25e9, 40e9, 100e9)
PAPER_RATIOS = (1, 2, 5, 10, 50, 100)


def whatif_table(models=PAPER_MODELS, ns=PAPER_N, bws=PAPER_BW, ratios=PAPER_RATIOS):
    """Scaling factors of the paper's what-if grid.

    Parameters
    ----------
    models : sequence of str
        Profile names.
    ns : sequence of int
        Worker counts [workers].
    bws : sequence of float
        Line rates [bits/s].
    ratios : sequence of float
        Compression ratios [-].

    Returns
    -------
    dict
        ``{model: array of shape (len(ratios), len(ns), len(bws))}`` of scaling factors [-],
        each from one vectorized call of :func:`~scalemodel.scaling_factor` with
        ``algorithm="ring", fusion="horovod"``.
    """
    r = np.asarray(ratios, dtype=float)[:, None, None]
    n = np.asarray(ns)[None, :, None]
    b = np.asarray(bws, dtype=float)[None, None, :]
    return {m: scaling_factor(m, n=n, bw=b, compression=r, algorithm="ring", fusion="horovod")
            for m in models}


def format_whatif_table(table, ns=PAPER_N, bws=PAPER_BW, ratios=PAPER_RATIOS) -> str:
    """The what-if table as text: one block per model, rows (ratio, N), columns bandwidth."""
    head = "ratio    N " + "".join(f"{b / 1e9:>9g}G" for b in bws)
    lines = []
    for model, sf in table.items():
        lines += [f"{model}: scaling factor (Horovod fusion, ring, full utilization)", head]
        for i, r in enumerate(ratios):
            for j, n in enumerate(ns):
                lines.append(f"{r:>5g} {n:>4d} " + "".join(f"{v:>10.3f}" for v in sf[i, j]))
        lines.append("")
    return "\n".join(lines)
