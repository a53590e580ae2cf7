r"""The what-if analysis of Zhang et al., "Is Network the Bottleneck of Distributed
Training?" (NetAI 2020, arXiv:2006.10103), reproduced with the closed-form model.

Setting (the paper's simulation): Horovod fusion (64 MiB / 5 ms), ring all-reduce, full
utilization of the line rate, no message latency, the measured V100 vector-add curve as
reduction cost, measured V100 backward timings of ResNet50, ResNet101 and VGG16 (batch
32), for N in {16, 32, 64} workers, B in {1, 10, 25, 40, 100} Gbit/s and compression
ratio r in {1, 2, 5, 10, 50, 100}.

The reduction is charged as the authors' simulator charges it
(``simulation/sim_with_compression_comm.py`` in netx-repo/training-bottleneck, commit
f81b140ea804558d15cd98af54ac4c290f2e022f): a fused buffer of S bytes costs

.. math::

   2\,\frac{8 S (N-1)/N}{B\,r} + (N-1)\,t_\text{add}(S/N),

with :math:`t_\text{add}` the measured vector-add curve, interpolated linearly, its
~10 us floor (the kernel launch) paid at each of the N - 1 reduce-scatter steps
(``reduction_launch="per-step"``, :attr:`ReductionCost.per_step
<scalemodel.ReductionCost>`). Everywhere else scalemodel charges the launch once per
collective, as NCCL reduces inside its one kernel (``reduction_launch="once"``); on this
grid the two differ by up to 0.05 in scaling factor (64 workers: 63 launches of ~10 us
per buffer).
"""

from __future__ import annotations

import attrs
import numpy as np

from .exceptions import UnknownNameError
from .model import scaling_factor
from .profiles import load_profile

__all__ = ["PAPER_MODELS", "PAPER_N", "PAPER_BW", "PAPER_RATIOS", "REDUCTION_LAUNCHES",
           "paper_profile", "whatif_table", "format_whatif_table"]

PAPER_MODELS = ("resnet50", "resnet101", "vgg16")
PAPER_N = (16, 32, 64)
PAPER_BW = (1e9, 10e9, 25e9, 40e9, 100e9)
PAPER_RATIOS = (1, 2, 5, 10, 50, 100)
REDUCTION_LAUNCHES = ("per-step", "once")
"""How the what-if charges the reduction's launch: ``"per-step"`` (at each of the ring's
N - 1 reduce-scatter steps, as the authors' simulator does; the default here) or
``"once"`` (once per collective, as NCCL does; scalemodel's default everywhere else)."""


def paper_profile(model, reduction_launch="per-step"):
    """A built-in profile with its reduction charged as ``reduction_launch`` says.

    Parameters
    ----------
    model : str
        Profile name [-].
    reduction_launch : str
        ``"per-step"`` or ``"once"``, see :data:`REDUCTION_LAUNCHES` [-].

    Returns
    -------
    WorkloadProfile
        The profile, its :class:`~scalemodel.ReductionCost` with ``per_step`` set.
    """
    if reduction_launch not in REDUCTION_LAUNCHES:
        raise UnknownNameError("reduction_launch", reduction_launch, REDUCTION_LAUNCHES)
    profile = load_profile(model)
    per_step = reduction_launch == "per-step"
    if profile.reduction.per_step == per_step:
        return profile
    return attrs.evolve(profile, reduction=profile.reduction.with_per_step(per_step))


def whatif_table(models=PAPER_MODELS, ns=PAPER_N, bws=PAPER_BW, ratios=PAPER_RATIOS, *,
                 reduction_launch="per-step", tp=1, pp=1, microbatches=None,
                 virtual_stages=1, sequence_parallel=False):
    """Scaling factors of the paper's what-if grid.

    Parameters
    ----------
    models : sequence of str
        Profile names [-].
    ns : sequence of int
        Worker counts [workers].
    bws : sequence of float
        Line rates [bits/s].
    ratios : sequence of float
        Compression ratios [-].
    reduction_launch : str
        ``"per-step"`` (the default: the authors' simulator, a vector-add launch at each
        of the ring's N - 1 steps) or ``"once"`` (NCCL: one launch per collective) [-].
    tp, pp, microbatches, virtual_stages, sequence_parallel
        As in :func:`~scalemodel.scaling_factor`, for models with a transformer config
        (the built-in LLMs; the paper's CNNs have none and are refused): ``ns`` count all
        GPUs, each entry is for the data-parallel dimension of ``n / (tp pp)`` replicas
        [GPUs], [stages], [micro-batches], [chunks], [-].

    Returns
    -------
    dict
        ``{model: array of shape (len(ratios), len(ns), len(bws))}`` of scaling factors [-],
        each from one vectorized call of :func:`~scalemodel.scaling_factor` with
        ``algorithm="ring", fusion="horovod"`` on :func:`paper_profile`.

    Examples
    --------
    ResNet-101 on 64 workers at 25 Gbit/s, uncompressed (the simulator: 0.890):

    >>> from scalemodel.whatif import whatif_table
    >>> t = whatif_table(["resnet101"], ns=[64], bws=[25e9], ratios=[1])["resnet101"]
    >>> round(float(t[0, 0, 0]), 3)
    0.89
    """
    r = np.asarray(ratios, dtype=float)[:, None, None]
    n = np.asarray(ns)[None, :, None]
    b = np.asarray(bws, dtype=float)[None, None, :]
    return {m: scaling_factor(paper_profile(m, reduction_launch), n=n, bw=b, compression=r,
                              algorithm="ring", fusion="horovod", tp=tp, pp=pp,
                              microbatches=microbatches, virtual_stages=virtual_stages,
                              sequence_parallel=sequence_parallel)
            for m in models}


def format_whatif_table(table, ns=PAPER_N, bws=PAPER_BW, ratios=PAPER_RATIOS,
                        reduction_launch="per-step") -> str:
    """The what-if table as text: one block per model, rows (ratio, N), columns bandwidth.

    Parameters
    ----------
    table : dict
        :func:`whatif_table`'s result [-].
    ns, bws, ratios : sequence
        Its worker counts [workers], line rates [bits/s] and ratios [-].
    reduction_launch : str
        How it charged the reduction, for the heading [-].
    """
    launch = ("a vector-add launch per ring step" if reduction_launch == "per-step"
              else "one reduction launch per collective")
    head = "ratio    N " + "".join(f"{b / 1e9:>9g}G" for b in bws)
    lines = []
    for model, sf in table.items():
        lines += [f"{model}: scaling factor (Horovod fusion, ring, full utilization, "
                  f"{launch}; columns: line rate in Gbit/s)", head]
        for i, r in enumerate(ratios):
            for j, n in enumerate(ns):
                lines.append(f"{r:>5g} {n:>4d} " + "".join(f"{v:>10.3f}" for v in sf[i, j]))
        lines.append("")
    return "\n".join(lines)
