import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings as _hypothesis_settings

# CI (CI=true) replays the same examples every run, so a landing never fails at random;
# developers' runs keep exploring new ones (run with CI=true to reproduce CI's)
_hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")

sys.path.insert(0, str(Path(__file__).parent))

import scalemodel as sm  # noqa: E402


def make_profile(sizes, waits, forward=0.03, extra_backward=0.0, update=0.01,
                 reduction=None, name="synthetic"):
    """A small synthetic profile: sizes [bytes], waits between gradients [s]."""
    ready = np.cumsum(np.asarray(waits, dtype=float))
    return sm.WorkloadProfile(
        name=name, tensor_bytes=np.asarray(sizes, dtype=float), tensor_ready=ready,
        forward_time=forward, backward_time=float(ready[-1]) + extra_backward,
        update_time=update,
        reduction=reduction if reduction is not None else sm.ReductionCost(gamma=1 / 275e9,
                                                                           latency=1e-5),
        provenance={"source": "synthetic test profile"})


@pytest.fixture
def synthetic():
    rng = np.random.default_rng(42)
    return make_profile(rng.integers(1_000, 20_000_000, 60), rng.uniform(0, 3e-3, 60),
                        extra_backward=2e-3)
