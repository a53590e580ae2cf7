"""Eq. (host-bound) of scalemodel.framework against the host and GPU streams played
kernel by kernel: a lower bound always, exact when the host is behind throughout and when
the GPU's lead covers the wrapper's host work."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalemodel.exceptions import InvalidParameterError, ParameterTypeError
from scalemodel.framework import wrapped_iteration_time


def play(issue, run, extra):
    """Kernels issued one after the other (host cost ``issue[i]`` each, plus ``extra[i]``
    of the wrapper's host work after kernel i) and run in order on the GPU (``run[i]``),
    each starting when issued and when the one before it ended; the iteration ends at
    the closing synchronisation. Returns (iteration time, host's issue time) [s]."""
    host, gpu = 0.0, 0.0
    for c, d, w in zip(issue, run, extra):
        host += c
        gpu = max(gpu, host) + d
        host += w
    return max(gpu, host), host


def case(seed, n=40, host_scale=1.0, gpu_scale=1.0, hooks=10, per_tensor=3e-5,
         per_bucket=4e-5, buckets=3):
    rng = np.random.default_rng(seed)
    issue = rng.uniform(5e-6, 5e-5, n) * host_scale
    run = rng.uniform(1e-5, 1e-3, n) * gpu_scale
    extra = np.zeros(n)
    at = rng.choice(np.arange(n // 2, n), size=hooks, replace=False)  # backward's kernels
    extra[at] += per_tensor
    extra[np.sort(at)[-buckets:]] += per_bucket
    return issue, run, extra


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.1, 100.0), st.floats(0.01, 10.0))
def test_the_closed_form_is_a_lower_bound(seed, host_scale, gpu_scale):
    issue, run, extra = case(seed, host_scale=host_scale, gpu_scale=gpu_scale)
    t, h = play(issue, run, np.zeros_like(extra))
    t_ddp, _ = play(issue, run, extra)
    bound = wrapped_iteration_time(t, h, 10, 3, per_tensor=3e-5, per_bucket=4e-5)
    assert bound <= t_ddp * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_exact_when_the_host_is_behind_throughout(seed):
    """Exact up to the run time of the last kernel, which T - H counts as the GPU's lead:
    here 0; the bound test above covers the rest."""
    issue, run, extra = case(seed)
    # every kernel ends before the next is issued (host-bound), the last one at once
    # (its run is what the formula counts as the GPU's lead)
    run = np.minimum(run, 0.9 * np.r_[issue[1:], 0.0])
    t, h = play(issue, run, np.zeros_like(extra))
    t_ddp, _ = play(issue, run, extra)
    got = wrapped_iteration_time(t, h, 10, 3, per_tensor=3e-5, per_bucket=4e-5)
    assert got == pytest.approx(t_ddp, rel=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_exact_when_the_gpus_lead_covers_the_host_work(seed):
    issue, run, extra = case(seed, gpu_scale=20.0)  # kernels far longer than their issue
    t, h = play(issue, run, np.zeros_like(extra))
    t_ddp, _ = play(issue, run, extra)
    assert h + extra.sum() < t  # the host stays ahead, with its work
    got = wrapped_iteration_time(t, h, 10, 3, per_tensor=3e-5, per_bucket=4e-5)
    assert got == pytest.approx(t_ddp, rel=1e-12) and got == pytest.approx(t, rel=1e-12)


def test_vectorized_and_scalar():
    got = wrapped_iteration_time([0.02, 0.09], [0.019, 0.02], 160, [[160], [1]],
                                 per_tensor=4e-5, per_bucket=3e-5, device_time=1e-3)
    assert got.shape == (2, 2)
    assert got[0, 0] == pytest.approx(0.019 + 160 * 4e-5 + 160 * 3e-5)
    assert got[1, 1] == pytest.approx(0.091)
    assert isinstance(wrapped_iteration_time(0.02, 0.01, 1, 1, per_tensor=0, per_bucket=0),
                      float)


@pytest.mark.parametrize("kw, name, error", [
    (dict(iteration_time=-1.0), "iteration_time", InvalidParameterError),
    (dict(host_time=0.05), "host_time", InvalidParameterError),
    (dict(tensors=float("nan")), "tensors", InvalidParameterError),
    (dict(per_bucket=-1e-6), "per_bucket", InvalidParameterError),
    (dict(device_time=float("inf")), "device_time", InvalidParameterError),
    (dict(iteration_time="a"), "iteration_time", ParameterTypeError),
    (dict(per_tensor=[1e-5, 2e-5]), "per_tensor", ParameterTypeError),
    (dict(device_time="1 ms"), "device_time", ParameterTypeError),
])
def test_bad_input_is_named(kw, name, error):
    args = dict(iteration_time=0.02, host_time=0.01, tensors=10, buckets=2,
                per_tensor=1e-5, per_bucket=1e-5)
    args.update(kw)
    with pytest.raises(error, match=name):
        wrapped_iteration_time(**args)
