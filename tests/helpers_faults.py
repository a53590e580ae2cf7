"""Models given as package.module:function whose rank 1 process really dies at a chosen
point of a calibration run (``os._exit``: no cleanup, no message, as a crash or the OOM
killer), for the fault-injected calibration tests."""

import os
import sys

from helpers_models import tiny

DEATH = 17  # rank 1's exit status


def _rank1():
    return os.environ.get("RANK") == "1"


def dies_in_compute(batch_size):
    """Rank 1 dies building its model: the others then wait in all_gather_object (compute
    step) or inside the DDP constructor (scaling step, where the model is built just
    before it)."""
    if _rank1():
        os._exit(DEATH)
    return tiny(batch_size)


def dies_before_final_barrier(batch_size):
    """Rank 1 measures like the others, then dies as it reaches the final barrier."""
    if _rank1():
        main = sys.modules["__main__"]  # python -m scalemodel.calibrate

        def die(*args, **kwargs):
            os._exit(DEATH)

        main._final_barrier = die
    return tiny(batch_size)


def slow(batch_size):
    """A model slow enough (a few seconds per compute step) to be stopped mid-run."""
    import torch
    g = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
    return net, torch.randn(batch_size, 512, generator=g), torch.randn(batch_size, 512,
                                                                         generator=g)
