r"""Host effects fitted from one measured DDP run: overlap efficiency and per-byte overhead.

On a GPU cluster the element-wise sums of an all-reduce run on the GPU and cost what
the reduction table says. On CPUs (and on hosts whose cores also drive the network) the
communication takes CPU time that compute would otherwise use: DDP copies gradients into
and out of its buckets, gloo sums them, and the kernel's TCP stack moves every byte. On
the 2-core machine where the emulated cluster runs, compute and communication threads
share the cores. Rather than hide that, the calibration measures it: the per-byte host
cost :math:`\gamma_h` [s/byte] is the one value that makes the model's iteration time
equal the measured DDP iteration time at the calibration setting,

.. math::
   :label: host-overhead

   T_n(\gamma_h) = \tilde T_n ,

solved by bisection (the iteration time grows monotonically with :math:`\gamma_h`). It
enters the model as a linear reduction cost of the cluster (the ``overhead`` of every
collective), and predictions at other line rates and for other models reuse it.
"""

from __future__ import annotations

import math

import attrs
from scipy.optimize import brentq

from ..collectives import ReductionCost
from ..exceptions import InvalidParameterError
from ..model import iteration_time
from ..profiles import load_profile
from ..cluster import load_cluster

__all__ = ["HostOverheadFit", "fit_host_overhead", "OverlapFit", "fit_overlap"]


@attrs.frozen
class HostOverheadFit:
    """Result of :func:`fit_host_overhead`.

    Parameters
    ----------
    gamma : float
        Host cost per byte handed to a collective's reduction [s/byte].
    measured : float
        The measured iteration time it reproduces [s].
    predicted_without : float
        The model's iteration time with no host overhead [s].
    clipped : bool
        True when the model without overhead was already slower than measured, so
        ``gamma`` is 0 [-].
    """

    gamma: float
    measured: float
    predicted_without: float
    clipped: bool

    def __str__(self):
        return (f"host overhead {self.gamma * 1e9:.3g} ns/byte (model without it: "
                f"{self.predicted_without * 1e3:.1f} ms, measured {self.measured * 1e3:.1f} ms"
                f"{'; clipped at 0' if self.clipped else ''})")


def fit_host_overhead(model, n, bw, measured, *, cluster, algorithm="ring", fusion="ddp",
                      gamma_max=1e-6) -> HostOverheadFit:
    """The host cost per byte that makes the model match one measured iteration time.

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured iteration time, median [s].
    cluster : ClusterProfile or path
        The cluster calibrated at the same setting; its reduction cost is replaced [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].
    gamma_max : float
        Upper end of the search [s/byte].

    Returns
    -------
    HostOverheadFit
        ``gamma`` is eq. :eq:`host-overhead`'s solution, 0 when the model is already slower.
    """
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise InvalidParameterError("measured", measured, "a finite time > 0 [s]")

    def total(gamma):
        c = attrs.evolve(cl, reduction=ReductionCost(gamma=gamma, name="host overhead"))
        return iteration_time(profile, n, bw, cluster=c, algorithm=algorithm,
                              fusion=fusion).total

    base = total(0.0)
    if base >= measured:
        return HostOverheadFit(0.0, float(measured), base, True)
    if total(gamma_max) < measured:
        raise InvalidParameterError("measured", measured,
                                    f"even {gamma_max} s/byte of host overhead does not "
                                    "explain it; is the run's line rate right?")
    gamma = brentq(lambda g: total(g) - measured, 0.0, gamma_max, xtol=1e-15, rtol=1e-10)
    return HostOverheadFit(float(gamma), float(measured), base, False)


@attrs.frozen
class OverlapFit:
    """Result of :func:`fit_overlap`.

    Parameters
    ----------
    overlap : float
        Overlap efficiency :math:`\\eta` in [0, 1] [-].
    measured : float
        The measured scaling factor it reproduces (when not clipped) [-].
    predicted_full, predicted_none : float
        The model's scaling factor at :math:`\\eta = 1` and :math:`\\eta = 0` [-].
    clipped : bool
        True when the measurement lies outside the two, so :math:`\\eta` is 0 or 1 [-].
    """

    overlap: float
    measured: float
    predicted_full: float
    predicted_none: float
    clipped: bool

    def __str__(self):
        return (f"overlap efficiency {self.overlap:.2f} (model with full overlap "
                f"{self.predicted_full:.3f}, with none {self.predicted_none:.3f}, measured "
                f"{self.measured:.3f}{'; clipped' if self.clipped else ''})")


def fit_overlap(model, n, bw, measured, *, cluster, algorithm="ring",
                fusion="ddp") -> OverlapFit:
    """The overlap efficiency that makes the model match one measured scaling factor.

    Where compute and communication share CPU cores, communication cannot fully progress
    while backward runs. The cluster's overlap efficiency :math:`\\eta`
    (eq. :eq:`overlap-efficiency` of :mod:`scalemodel.cluster`) captures that; this
    solves :math:`S(\\eta) = \\tilde S` by bisection (the scaling factor grows with
    :math:`\\eta`), clipped to [0, 1].

    Parameters
    ----------
    model : str, path or WorkloadProfile
        The workload measured [-].
    n : int
        Workers in the measured run [workers].
    bw : float
        Line rate of the measured run [bits/s].
    measured : float
        Measured scaling factor [-].
    cluster : ClusterProfile or path
        The cluster calibrated at the same setting; its ``overlap`` is replaced [-].
    algorithm, fusion : str
        As in :func:`scalemodel.scaling_factor` [-].

    Returns
    -------
    OverlapFit
        :math:`\\eta` and the two bounding predictions.
    """
    from ..model import scaling_factor
    profile = load_profile(model)
    cl = load_cluster(cluster)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured)
            and 0 < measured):
        raise InvalidParameterError("measured", measured, "a finite scaling factor > 0 [-]")

    def s(eta):
        return scaling_factor(profile, n, bw, cluster=attrs.evolve(cl, overlap=eta),
                              algorithm=algorithm, fusion=fusion)

    full, none = s(1.0), s(0.0)
    if measured >= full:
        return OverlapFit(1.0, float(measured), full, none, measured > full)
    if measured <= none:
        return OverlapFit(0.0, float(measured), full, none, measured < none)
    eta = brentq(lambda e: s(e) - measured, 0.0, 1.0, xtol=1e-6)
    return OverlapFit(float(eta), float(measured), full, none, False)
