r"""Where the data-parallel wrapper's work shows: the host's issue time against the GPU's.

DDP's own work -- the autograd hook of every parameter tensor (marking it ready, copying
its gradient into the bucket), the launch of every bucket's collective, the per-iteration
bookkeeping -- runs on the host, the CPU thread that issues the GPU's kernels. The GPU
runs what was issued; it waits only when the host falls behind. So the wrapper delays an
iteration only by how far its host work pushes the host's issue time past the GPU's
time. With :math:`T` the iteration without the wrapper, :math:`H` the host's time to issue
it (both measured: :mod:`scalemodel.calibrate.wrapper` records them, and the compute
step of ``python -m scalemodel.calibrate`` records :math:`H` and :math:`P` in the
profile's provenance, ``host_issue_time`` and ``gradient_tensors``), :math:`P` parameter
tensors and :math:`K` buckets,

.. math::
   :label: host-bound

   T^\text{DDP} = \max\big(T + g,\; H + P\,h_p + K\,h_b\big),

with :math:`h_p` the host work per tensor, :math:`h_b` per bucket and :math:`g` the
wrapper's work on the GPU itself (its copies and the collectives' kernels, seen where
the GPU is the bottleneck) [s]. A GPU-bound iteration (:math:`H \ll T`) hides the host
work; a host-bound one (:math:`H \approx T`: small kernels, bf16, small batches, fast
GPUs) pays all of it.

It is a lower bound of the two timelines (the host work of a bucket is issued in the
middle of backward, and the GPU can idle earlier in the iteration than the host's
total issue time shows), exact where the GPU's lead over the host covers the host work
(then :math:`T`) and where the host is behind throughout (then :math:`H + W`, up to the
run time of the last kernel issued, which :math:`T - H` counts as lead):
``tests/test_framework_host.py`` plays the two streams kernel by kernel.

Measured on one H200 with PyTorch 2.11 (``calibration/results/h200``,
``benchmarks/validate_framework.py``), each of eight models / precisions gives
:math:`h_p` = 28-50 µs and :math:`h_b` = 25-50 µs
(:meth:`scalemodel.calibrate.wrapper.WrapperMeasurement.host_fit`). Calibrated on one
model's sweep, eq. :eq:`host-bound` predicts the seven others' DDP iterations at five
bucket sizes with a median error of 3.1-6.2 % (largest 9-21 %), where constant
per-iteration and per-bucket costs (the cluster's ``iteration_overhead`` and
``bucket_overhead``, eq. :eq:`wrapped-single`) give 6.5-26 % (largest 20-49 %): the
constants of the host's work transfer, the time they cost does not. The cluster's
constant terms are eq. :eq:`host-bound`'s host-bound limit; a cluster's ``host`` costs
(:class:`~scalemodel.hostcosts.HostCosts`) put eq. :eq:`host-bound` on the n-worker
timeline (eq. :eq:`host-lead`), where it is this function on one worker.
"""

from __future__ import annotations

import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError

__all__ = ["wrapped_iteration_time"]


def _times(value, name, scalar=False):
    """``value`` as floats, each finite and >= 0 (one number where ``scalar``)."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterTypeError(name, value, "a number" if scalar else
                                 "a number or an array of numbers") from None
    if scalar and a.ndim:
        raise ParameterTypeError(name, value, "a single number")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InvalidParameterError(name, value, "finite numbers >= 0")
    return a


def wrapped_iteration_time(iteration_time, host_time, tensors, buckets, *, per_tensor,
                           per_bucket, device_time=0.0):
    """Iteration time under the data-parallel wrapper on one worker (eq. :eq:`host-bound`).

    Parameters
    ----------
    iteration_time : float or array_like
        The iteration without the wrapper, :math:`T` [s].
    host_time : float or array_like
        The host's time to issue that iteration, :math:`H` (at most :math:`T`) [s].
    tensors : int or array_like
        Parameter tensors with gradients, :math:`P` [-].
    buckets : int or array_like
        Buckets the wrapper reduces per iteration, :math:`K` [-].
    per_tensor : float
        Host work per tensor, :math:`h_p` [s].
    per_bucket : float
        Host work per bucket, :math:`h_b` [s].
    device_time : float
        The wrapper's work on the GPU per iteration, :math:`g` [s].

    Returns
    -------
    numpy.ndarray or float
        :math:`\\max(T + g, H + P h_p + K h_b)`, broadcast over the inputs [s].

    Raises
    ------
    InvalidParameterError
        A negative or non-finite value, or a host time above the iteration time; names
        the parameter and the value.
    ParameterTypeError
        A value that is not a number (an array for the three costs); names it.

    Examples
    --------
    >>> from scalemodel.framework import wrapped_iteration_time
    >>> # host-bound (ResNet-50 in bf16 on an H200): the host's work shows in full
    >>> round(float(wrapped_iteration_time(25.8e-3, 25.0e-3, 161, [161, 1], per_tensor=40e-6,
    ...                                    per_bucket=35e-6)[0]) * 1e3, 1)
    37.1
    >>> # GPU-bound (GPT-2 in fp32): hidden behind the GPU's 93 ms
    >>> round(float(wrapped_iteration_time(93.2e-3, 25.9e-3, 148, 148, per_tensor=40e-6,
    ...                                    per_bucket=35e-6, device_time=1.4e-3)) * 1e3, 1)
    94.6
    """
    t = _times(iteration_time, "iteration_time")
    h = _times(host_time, "host_time")
    if np.any(h > t * (1 + 1e-9)):
        raise InvalidParameterError("host_time", host_time, f"at most iteration_time "
                                    f"({iteration_time!r}): the iteration ends after the "
                                    "host has issued it")
    p = _times(tensors, "tensors")
    k = _times(buckets, "buckets")
    hp = float(_times(per_tensor, "per_tensor", scalar=True))
    hb = float(_times(per_bucket, "per_bucket", scalar=True))
    g = float(_times(device_time, "device_time", scalar=True))
    out = np.maximum(t + g, h + p * hp + k * hb)
    return float(out) if out.ndim == 0 else out
