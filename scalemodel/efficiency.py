r"""Default compute efficiency (model FLOPs utilisation, MFU) per GPU, from published runs.

A workload derived from FLOPs (:func:`~scalemodel.transformer_profile`) computes at
:math:`R = \eta P` (the GPU's peak for the compute dtype times the efficiency
:math:`\eta`). When the caller gives no ``efficiency=``, 16-bit training (bf16 or fp16)
takes :math:`\eta` from :data:`PUBLISHED_MFU`: the median MFU of the published LLM
training runs of that GPU, one rule for every GPU, built-in LLM or a configuration of your
own alike:

    MosaicML's LLM Foundry benchmark tables (``mosaicml/llm-foundry``,
    ``scripts/train/benchmarking/README.md`` at commit 061f2c7), the section of that GPU,
    the bf16 runs **without activation checkpointing** at sequence **2,048** of models
    of **1 billion parameters or more** (MPT-1B to MPT-13B, PyTorch FSDP ``FULL_SHARD``,
    8 to 128 GPUs).

The rows are ``benchmarks/data/published_llm_mfu.csv`` (each a table value with its
section). Their MFU counts :math:`6N` FLOPs per token plus attention (the README's
formula), within a few per cent of ``scalemodel.workloads.tensor_flops``, and it is
end-to-end: communication included, which these runs hide almost entirely (their MFU is
flat from 8 to 128 GPUs).

======================= ========= ======== ===================================
GPU                     default   runs     range of the runs
======================= ========= ======== ===================================
``a100-40gb``           0.55815   10       45.4 to 57.8 % (rows 17-26)
``a100-80gb``           0.60985   4        59.6 to 64.2 % (rows 13-16)
``h100-sxm``            0.41185   12       39.6 to 46.4 % (rows 1-12)
======================= ========= ======== ===================================

Cross-checks that are not used in the defaults: torchtitan's ``docs/performance.md``
reports 33 to 39 % MFU for Llama 3.1 8B with FSDP on 8 or 128 H100 (96 GB, 500 W) and
56 to 58 % for Llama 3 8B on 64 A100 80GB (selective activation checkpointing).

A GPU without such runs takes the default of a GPU of the same architecture that has one
(``h100-pcie`` and ``h200`` the ``h100-sxm``'s), else the median of the three defaults
(``v100-*``, ``b200``, ``mi300x``, a :class:`~scalemodel.GPUSpec` of another
architecture); the profile's provenance says which it used. Other dtypes have no
published default here:
:func:`~scalemodel.transformer_profile` uses the measured fp32 efficiency
(:func:`~scalemodel.measured_efficiency`) for fp32 and asks for ``efficiency=`` for tf32,
fp8 and fp64.

**A memory-pressured calibration run** (:func:`memory_pressure`,
:func:`check_calibration_memory`): the fitted efficiency of a run whose model state fills
much of the GPU carries a slowdown that no term of the model represents (allocator
retries, FSDP's ``limit_all_gathers`` throttling, a micro-batch forced small). The model
state per GPU is counted at 16 bytes per parameter -- bf16 parameters and gradients and
Adam with an fp32 master copy, :math:`(2 + 2 + 12)\Psi` of Rajbhandari et al., "ZeRO",
SC 2020, Sec. 3.1 -- divided as each ZeRO stage divides it; a share of the GPU's memory at
or above :data:`MEMORY_PRESSURE_SHARE` is flagged. The threshold is read from LLM
Foundry's tables (the rows above, ``benchmarks/data/published_sharded.csv``): the runs at
37.8 % (MPT-70B on 64 A100 40GB, on 32 A100 80GB and on 32 H100) and 60 % (MPT-13B on 8
A100 40GB) reach 9 to 27 % less MFU than the same model on more GPUs, the runs at 34.9 %
or less (MPT-30B on 32 A100 40GB, MPT-7B on 8) the MFU of their series. It is a warning
of what is not modelled, not a correction: nothing is rescaled. A prediction for a
memory-pressured job (:func:`job_memory_pressure`) warns too, and the slow end of its
interval (the slowest step the fit allows it without pressure, the point without a fit)
is taken :data:`MEMORY_PRESSURE_SLOWDOWN` times.

A cluster fitted on runs of a FLOP-derived profile (:func:`~scalemodel.fit_cluster`)
keeps the fitted efficiency with the GPU it was fitted on
(``cluster.extra["efficiency"]``); :func:`fitted_efficiency` finds it for a profile of
the same GPU, and every prediction with that cluster then computes at it (its interval
goes into the answer's interval).
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import statistics
import warnings

import attrs

from .exceptions import CalibrationWarning, InvalidParameterError, ParameterTypeError
from .hardware import GPUSpec, canonical_dtype, get_gpu, list_gpus
from .units import check_count

__all__ = ["PUBLISHED_MFU", "PublishedMFU", "DefaultEfficiency", "default_efficiency",
           "fitted_efficiency", "at_fitted_efficiency", "profile_efficiency", "gpu_name_of",
           "score_seconds", "rescaled",
           "gpu_topology",
           "SIXTEEN_BIT", "MEMORY_PRESSURE_SHARE", "STATE_BYTES_PER_PARAMETER",
           "MemoryPressure", "memory_pressure", "check_calibration_memory",
           "MEMORY_PRESSURE_SLOWDOWN", "job_memory_pressure", "CALIBRATION_PRESSURE_NOTE",
           "calibration_pressured", "recompute_share", "recompute_factor",
           "PRESSURE_SHARDINGS",
           "EFFICIENCY_TRANSFER", "carried_over", "model_key", "micro_batch_side",
           "micro_batch_of", "carried_ends", "tp_side", "carried_note"]

SIXTEEN_BIT = ("bf16", "fp16")
"""Compute dtypes the published defaults are for (tensor-core 16-bit training)."""

_SOURCE = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md at commit "
           "061f2c7ce64e655100286584a7629e2a09f827ba")


@attrs.frozen
class PublishedMFU:
    """The published runs behind one GPU's default efficiency.

    Attributes
    ----------
    gpu : str
        scalemodel's GPU name.
    section : str
        The section of the source's README the runs are in.
    rows : tuple of int
        Rows of ``benchmarks/data/published_llm_mfu.csv``.
    mfu : tuple of float
        MFU of each run, in the rows' order [-].
    source : str
        Repository, file and commit.
    """

    gpu: str
    section: str
    rows: tuple
    mfu: tuple
    source: str = _SOURCE

    @property
    def value(self) -> float:
        """The default: the median of ``mfu`` [-]."""
        return round(float(statistics.median(self.mfu)), 6)


PUBLISHED_MFU = {
    "h100-sxm": PublishedMFU(
        "h100-sxm", "H100 80GB BF16", tuple(range(1, 13)),
        (0.3986, 0.3995, 0.3958, 0.3979, 0.4644, 0.408, 0.417, 0.4373, 0.4085, 0.4152,
         0.4236, 0.4182)),
    "a100-80gb": PublishedMFU(
        "a100-80gb", "A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
        (13, 14, 15, 16), (0.5957, 0.6423, 0.6211, 0.5986)),
    "a100-40gb": PublishedMFU(
        "a100-40gb", "A100 40GB with 1600 Gbps node-node interconnect (RoCE)",
        tuple(range(17, 27)),
        (0.548, 0.5594, 0.5696, 0.5602, 0.5782, 0.5441, 0.5544, 0.4539, 0.5569, 0.5623)),
}
"""Per GPU, the published runs whose median MFU is its default efficiency in bf16/fp16
(module docstring: which runs, and why)."""


@attrs.frozen
class DefaultEfficiency:
    """The efficiency a FLOP-derived profile uses when none is given.

    Attributes
    ----------
    value : float
        Model FLOPs utilisation [-].
    kind : str
        ``"published"`` (the GPU's own runs), ``"architecture"`` (another GPU of its
        architecture), ``"fallback"`` (the median of the published defaults).
    gpu : str
        The GPU asked about.
    text : str
        Provenance, starting ``"published: <value>"`` (what a profile records).
    """

    value: float
    kind: str
    gpu: str
    text: str


def _published(name):
    p = PUBLISHED_MFU[name]
    return (f"{len(p.mfu)} bf16 runs of MPT models of 1B parameters or more without "
            f"activation checkpointing at 2,048 tokens, {min(p.mfu):.1%} to {max(p.mfu):.1%}; LLM Foundry's "
            f"benchmark table, section '{p.section}' "
            f"(benchmarks/data/published_llm_mfu.csv rows {p.rows[0]}-{p.rows[-1]})")


def default_efficiency(gpu="h100-sxm", dtype="bf16") -> DefaultEfficiency:
    """The default model FLOPs utilisation of 16-bit training on ``gpu``.

    Parameters
    ----------
    gpu : str or GPUSpec
        GPU name or spec (:func:`~scalemodel.get_gpu`) [-].
    dtype : str
        Compute dtype; ``"bf16"`` or ``"fp16"`` [-].

    Returns
    -------
    DefaultEfficiency
        The value, whether it is the GPU's own published median, its architecture's or
        the fallback, and the provenance text.

    Raises
    ------
    InvalidParameterError
        A dtype other than bf16 or fp16 (no published default: pass ``efficiency=``).
    UnknownNameError
        Not a GPU scalemodel knows.

    Examples
    --------
    >>> from scalemodel.efficiency import default_efficiency
    >>> d = default_efficiency("a100-80gb")
    >>> round(d.value, 5), d.kind
    (0.60985, 'published')
    >>> default_efficiency("h200").kind
    'architecture'
    """
    spec = get_gpu(gpu)
    dt = canonical_dtype(dtype)
    if dt not in SIXTEEN_BIT:
        raise InvalidParameterError("dtype", dtype, "scalemodel has published default "
                                    "efficiencies for bf16 and fp16 only",
                                    "Pass efficiency= (model FLOPs utilisation, 0 to 1)")
    name = spec.name
    if name in PUBLISHED_MFU and _is_builtin(spec):
        v = PUBLISHED_MFU[name].value
        return DefaultEfficiency(v, "published", name,
                                 f"published: {v:g}, the median MFU of {_published(name)}")
    same = [g for g in PUBLISHED_MFU if spec.architecture
            and get_gpu(g).architecture == spec.architecture]
    if same:
        ref = sorted(same)[-1] if spec.architecture != "hopper" else "h100-sxm"
        v = PUBLISHED_MFU[ref].value
        return DefaultEfficiency(
            v, "architecture", name,
            f"published: {v:g}, the default of the {ref} (same {spec.architecture} "
            f"architecture; no published LLM runs of the {name} recorded): the median MFU "
            f"of {_published(ref)}")
    v = round(float(statistics.median(p.value for p in PUBLISHED_MFU.values())), 6)
    return DefaultEfficiency(
        v, "fallback", name,
        f"published: {v:g}, the median of the published defaults of "
        f"{', '.join(sorted(PUBLISHED_MFU))} (no published LLM runs of the {name} or "
        f"its architecture recorded; pass efficiency= for a better number)")


def _is_builtin(spec: GPUSpec) -> bool:
    return spec.name in list_gpus() and get_gpu(spec.name) == spec


def gpu_name_of(profile) -> str | None:
    """The GPU a FLOP-derived profile computes on (its provenance's ``gpu``), or None.

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    name = prov.get("gpu")
    return str(name) if name else None


def gpu_topology(profile):
    """The :class:`~scalemodel.topology.Topology` (no nodes: ``gpus_per_node`` None) whose
    intra-node link and architecture are those of the built-in GPU a FLOP-derived profile
    computes on (:meth:`~scalemodel.GPUSpec.node_link`), or None (a measured
    profile, or a GPU that is not built in: the topology's V100 defaults).

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].
    """
    name = gpu_name_of(profile)
    return None if name is None else _gpu_topology(name)


@functools.lru_cache(maxsize=64)
def _gpu_topology(name):
    from .topology import Topology

    try:
        spec = get_gpu(name)
    except (InvalidParameterError, ParameterTypeError):
        return None
    return Topology(**spec.node_link())


def profile_efficiency(profile):
    """The efficiency a FLOP-derived profile computes at, or None (a measured profile, or
    one rescaled to a measured time with :meth:`~scalemodel.WorkloadProfile.scaled_to`).

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].

    Returns
    -------
    float or None
        The model FLOPs utilisation its provenance records [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    if not str(prov.get("source", "")).startswith("FLOP-derived") or "scaled_to" in prov:
        return None
    m = _EFF_RE.match(str(prov.get("efficiency", "")))
    try:
        eff = float(m.group(1)) if m else None
    except ValueError:
        return None
    return eff if eff is not None and 0 < eff <= 1 else None


_EFF_RE = re.compile(r"\s*(?:published|measured|given|fitted):\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)")


def _fitted_entry(cluster):
    """The cluster's fitted efficiency record (``extra["efficiency"]``, a cluster file's
    ``efficiency``), checked; None without one.

    Raises
    ------
    InvalidParameterError
        A record that is not an object, or a field of it that the fit would not write (a
        file's, edited or corrupt), naming the field.
    """
    extra = getattr(cluster, "extra", None)
    eff = extra.get("efficiency") if isinstance(extra, dict) else None
    if eff is None:
        return None
    if not isinstance(eff, dict):
        raise InvalidParameterError("cluster.extra['efficiency']", eff, "must be an object "
                                    "with the fitted value, its interval and the fit's GPUs "
                                    "and models, as fit_cluster writes it")
    value = eff.get("value")
    if not _is_fraction(value):
        raise InvalidParameterError("cluster.extra['efficiency']['value']", value,
                                    "must be a model FLOPs utilisation in (0, 1]")
    _check_interval(eff.get("interval"), value)
    for key in ("gpu", "models", "profiles", "pressured"):
        names = eff.get(key)
        if names is not None and not (isinstance(names, list)
                                      and all(isinstance(k, str) for k in names)):
            raise InvalidParameterError(f"cluster.extra['efficiency'][{key!r}]", names,
                                        "must be a list of names (strings), as fit_cluster "
                                        "writes it")
    if eff.get("end") not in (None, "low", "high"):
        raise InvalidParameterError("cluster.extra['efficiency']['end']", eff.get("end"),
                                    "must be 'low', 'high' or absent")
    return eff


def _is_fraction(value) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and 0 < value <= 1)


def _check_interval(iv, value):
    """A fitted efficiency's interval: absent, or ``[low, high]`` with each end None (not
    bounded by the runs) or in (0, 1], ``low <= value <= high``."""
    if iv is None:
        return
    where = "cluster.extra['efficiency']['interval']"
    if not isinstance(iv, (list, tuple)) or len(iv) != 2 or not all(
            x is None or _is_fraction(x) for x in iv):
        raise InvalidParameterError(where, iv, "must be [low, high], each in (0, 1] or null "
                                    "where the runs do not bound it")
    lo, hi = iv
    slack = 1e-9 * value
    if (lo is not None and lo > value + slack) or (hi is not None and hi < value - slack):
        raise InvalidParameterError(where, iv, f"must hold the fitted value {value!r} "
                                    "(low <= value <= high)")


def _as_float(value) -> float:
    """``float(value)``, inf for an integer beyond a float (10**400) [-]."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _device_names(gpus):
    """GPU names for the device strings a fit records (full names or short names), kept
    per tuple of strings (the built-in GPUs never change) [-]."""
    key = tuple(str(d) for d in gpus or ())
    names = _DEVICE_NAMES.get(key)
    if names is None:
        given, found = set(key), set(key)
        for g in list_gpus():
            if {g, get_gpu(g).full_name} & given:
                found.add(g)
        names = _DEVICE_NAMES[key] = frozenset(found)
        if len(_DEVICE_NAMES) > 256:
            _DEVICE_NAMES.pop(next(iter(_DEVICE_NAMES)))
    return names


_DEVICE_NAMES: dict = {}  # _device_names' answers


def fitted_efficiency(cluster, profile, *, tp=1, recompute=None):
    """The efficiency ``cluster`` was fitted at for ``profile``'s GPU, or None.

    It applies when the profile is derived from FLOPs (its compute time is FLOPs over
    peak x efficiency) and computes on a GPU the fit's FLOP-derived runs used (the same
    GPU name, or the device name the fit recorded). Carried to another model or
    tensor-parallel degree, or from memory-pressured runs (:func:`carried_over`), its
    interval is widened by
    :data:`EFFICIENCY_TRANSFER` at both ends, and so is the value at a corner of the
    cluster (:meth:`~scalemodel.ClusterProfile.corners`). Carried to the same model at a
    tensor-parallel degree above (below) every degree of its runs, or at a micro-batch
    above (below) every micro-batch of its runs, only the lower (upper) or upper (lower)
    end is widened (:func:`carried_ends`). A fit whose every run was memory-pressured
    widens the upper end :data:`MEMORY_PRESSURE_SLOWDOWN` times more
    (:func:`calibration_pressured`); a job with more (less) activation recompute than the
    runs widens the upper (lower) end by :func:`recompute_factor`.

    Parameters
    ----------
    cluster : ClusterProfile or None
        A cluster, fitted or not [-].
    profile : WorkloadProfile
        The workload [-].
    tp : int
        The job's tensor-parallel degree [GPUs].
    recompute : float or None
        The job's share of activation recompute in its compute (None: the profile's own,
        :func:`recompute_share`; the model passes the share of the checkpointing asked
        for, which it applies after the efficiency) [-].

    Returns
    -------
    tuple or None
        ``(value, (low, high))``: the fitted MFU and its interval (an end None where the
        runs do not bound it) [-]; None when the cluster carries no fitted efficiency,
        the profile is not FLOP-derived, or its GPU is another.

    Raises
    ------
    InvalidParameterError
        The cluster's recorded efficiency is not a number in (0, 1].
    """
    if cluster is None:
        return None
    eff = _fitted_entry(cluster)
    if eff is None:
        return None
    if profile_efficiency(profile) is None:
        return None
    gpu = gpu_name_of(profile)
    names = _device_names(eff.get("gpu"))
    if gpu is None or not (gpu in names or str(profile.device) in names):
        return None
    iv = eff.get("interval") or (None, None)
    lo, hi = (list(iv) + [None, None])[:2]
    lo, hi = (None if lo is None else float(lo)), (None if hi is None else float(hi))
    value = float(eff["value"])
    down, up = carried_ends(cluster, profile, tp)
    relief = calibration_pressured(cluster)
    redo = recompute_factor(cluster, profile, value, share=recompute)
    if not (down or up or relief or redo):
        return value, (lo, hi)
    # the factors each end widens by: carried, a pressured fit, the recompute's bracket
    slow = (EFFICIENCY_TRANSFER if down else 1.0) * \
        (redo[1] if redo and redo[0] == "slow" else 1.0)
    fast = (EFFICIENCY_TRANSFER if up else 1.0) * \
        (MEMORY_PRESSURE_SLOWDOWN if relief else 1.0) * \
        (redo[1] if redo and redo[0] == "fast" else 1.0)
    top, bottom = EFFICIENCY_BOUNDS[1], EFFICIENCY_BOUNDS[0]
    end = eff.get("end")  # a corner of the cluster (ClusterProfile.corners)
    if slow > 1.0:
        lo = bottom if lo is None else max(bottom, lo / slow)
        if end == "low":
            value = max(bottom, value / slow)
    if fast > 1.0:
        hi = top if hi is None else min(top, hi * fast)
        if end == "high":
            value = min(top, value * fast)
    return value, (lo, hi)


def recompute_share(profile) -> float:
    """The share of a profile's forward and backward time that is activation recompute
    (:func:`~scalemodel.checkpointing.with_recompute` records it per tensor in
    ``provenance["recompute"]``): 0 without checkpointing, about a quarter with every
    block recomputed (a second forward beside a forward and a backward of twice its
    FLOPs) [-].

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    per = prov.get("recompute")
    total = profile.forward_time + profile.backward_time
    if not per or not total > 0:
        return 0.0
    try:
        r = math.fsum(float(v) for v in per)
    except (TypeError, ValueError):
        return 0.0
    return min(max(r / total, 0.0), 1.0) if math.isfinite(r) else 0.0


def recompute_factor(cluster, profile, efficiency=None, share=None):
    r"""How far the efficiency's interval widens, and on which side, for a job with more
    or less activation recompute than the runs ``cluster``'s efficiency was fitted on
    (their shares, :func:`recompute_share`, recorded by :func:`~scalemodel.fit_cluster`
    in ``extra["efficiency"]["recompute_shares"]``).

    A fitted efficiency :math:`e` is a whole step's: the compute of the forward and
    backward passes and the gaps in them (kernel launches, waits) that FLOPs do not
    count. The recompute of a checkpointed block replays its forward inside the
    backward, where those gaps need not recur, so its own efficiency :math:`e_r` lies
    between :math:`e` and the GPU's peak, 1 (the model charges :math:`e`). Per unit of
    FLOPs, runs with recompute share :math:`\rho_c` measure
    :math:`1/e = (1-\rho_c)/e_w + \rho_c/e_r`, and a job with share :math:`\rho_t` takes
    :math:`(1-\rho_t)/e_w + \rho_t/e_r`; at :math:`e_r = 1` that is

    .. math::

        \frac{1}{e}\left(1 - \frac{(\rho_t - \rho_c)(1 - e)}{1 - \rho_c}\right),

    and at :math:`e_r = e` exactly :math:`1/e`. So a job with more recompute than every
    run (:math:`\rho_t` above the largest :math:`\rho_c`) may be faster than the point,
    its fast end widened by :math:`g = 1 / (1 - (\rho_t - \rho_c)(1 - e) / (1 - \rho_c))`;
    one with less than every run may be slower, its slow end widened by
    :math:`g = 1 + (\rho_c - \rho_t)(1 - e) / (1 - \rho_c)` (the smallest
    :math:`\rho_c`). Between the runs' shares nothing widens. Measured: LLM Foundry's
    checkpointed runs on the H100 reach 48-59 % hardware FLOPs utilisation against 40-46 %
    for those without (``mosaicml/llm-foundry`` benchmarking README at 061f2c7), and
    Korthikanti et al. (MLSys 2023) measure full recompute costing about the forward it
    replays; the bracket holds both.

    Parameters
    ----------
    cluster : ClusterProfile or None
        A cluster [-].
    profile : WorkloadProfile
        The job's profile [-].
    efficiency : float or None
        The fitted efficiency :math:`e` (None: the cluster's) [-].
    share : float or None
        The job's recompute share :math:`\rho_t` (None: ``profile``'s own,
        :func:`recompute_share`) [-].

    Returns
    -------
    tuple or None
        ``("fast" | "slow", g)`` with ``g > 1`` [-]; None when nothing widens (no
        recorded shares, a fit that predates the record, a share within theirs).

    Raises
    ------
    InvalidParameterError
        The cluster's recorded shares are not a list of numbers in [0, 1).
    """
    eff = None if cluster is None else _fitted_entry(cluster)
    if not eff:
        return None
    shares = eff.get("recompute_shares")
    if shares is None:
        return None
    if not isinstance(shares, list) or not shares or not all(
            type(v) in (int, float) and math.isfinite(v) and 0 <= v < 1 for v in shares):
        raise InvalidParameterError("cluster.extra['efficiency']['recompute_shares']",
                                    shares, "must be a list of the runs' recompute shares "
                                    "of their compute, each in [0, 1)")
    e = float(eff["value"] if efficiency is None else efficiency)
    rho = recompute_share(profile) if share is None else float(share)
    hi, lo = max(shares), min(shares)
    tol = 1e-6
    if rho > hi + tol:
        g = 1.0 / (1.0 - (rho - hi) * (1.0 - e) / (1.0 - hi))
        return ("fast", g) if g > 1.0 else None
    if rho < lo - tol:
        g = 1.0 + (lo - rho) * (1.0 - e) / (1.0 - lo)
        return ("slow", g) if g > 1.0 else None
    return None


def calibration_pressured(cluster) -> bool:
    """Whether every FLOP-derived run ``cluster``'s efficiency was fitted on was
    memory-pressured (:func:`memory_pressure`; the models are recorded by
    :func:`~scalemodel.fit_cluster` in ``extra["efficiency"]["models"]`` and the pressured
    ones in ``["pressured"]``).

    Such a fit's efficiency carries the slowdown of a GPU short of memory (the caching
    allocator freeing and retrying, less room to prefetch), which a job with more room does
    not pay: :func:`fitted_efficiency` multiplies the upper (fast) end of its interval by
    :data:`MEMORY_PRESSURE_SLOWDOWN`, the factor measured between the same model's
    pressured and unpressured runs, on top of any widening of :func:`carried_ends`. It is
    the mirror of the slow end a memory-pressured *job* gets
    (:func:`scalemodel.iteration_time`), and like it moves no point answer.

    Parameters
    ----------
    cluster : ClusterProfile or None
        A cluster, fitted or not [-].

    Returns
    -------
    bool
        True when the fit recorded pressured models and every model it fitted is one.

    Raises
    ------
    InvalidParameterError
        The cluster's record of pressured models is not a list of names.
    """
    eff = None if cluster is None else _fitted_entry(cluster)
    if not eff:
        return False
    pressured = eff.get("pressured") or []
    if not isinstance(pressured, list) or not all(isinstance(k, str) for k in pressured):
        raise InvalidParameterError("cluster.extra['efficiency']['pressured']", pressured,
                                    "must be a list of the fit's model names whose every "
                                    "run was memory-pressured")
    models = eff.get("models") or eff.get("profiles") or []
    return bool(pressured) and set(models) <= set(pressured)


EFFICIENCY_BOUNDS = (0.05, 1.0)
"""Lowest and highest efficiency an interval end may take (those of
:data:`~scalemodel.cluster.PARAMETER_BOUNDS`) [-]."""

EFFICIENCY_TRANSFER = 1.21
r"""How far, as a factor either way, the model FLOPs utilisation of one model may lie from
another's in the same framework on the same GPUs: the largest ratio of the highest to the
lowest MFU across the model sizes of a published table of one framework, GPU and cluster
(``benchmarks/data/published_parallel.csv``):

* Megatron-LM's README, H100 weak scaling (rows 1-9, GPT 1.7B to 462B, NVIDIA/Megatron-LM
  at f2e5db4): 41 to 49 % MFU, ratio 1.195;
* Narayanan et al., SC'21, Table 1 (rows 12-21, GPT 1.7B to 1T on A100 80GB): 43 to 52 %,
  ratio 1.209.

An efficiency fitted on one model's runs is carried to another model (or from runs whose
model state filled the GPU, :func:`memory_pressure`) with its interval widened by this
factor at both ends (:func:`fitted_efficiency`); the point value is the fitted one. The
tables of LLM Foundry (``published_llm_mfu.csv``, the source of :data:`PUBLISHED_MFU`;
1.17 on H100, 1.27 on A100 40GB, 1.08 on A100 80GB) are the validation set of the
carried efficiency (``benchmarks/validate_llm.py``) and are not used here [-]."""


def carried_over(cluster, profile, tp=1) -> bool:
    """Whether ``cluster``'s fitted efficiency is carried to a workload its runs did not
    show as it is: another model than the fit's FLOP-derived runs, or the same model at
    another tensor-parallel degree (:func:`model_key`: each GPU then multiplies matrices
    ``tp`` times narrower), or a model whose every calibration run was memory-pressured
    (:func:`memory_pressure`, recorded by :func:`~scalemodel.fit_cluster` in
    ``extra["efficiency"]["pressured"]``).

    Parameters
    ----------
    cluster : ClusterProfile
        A cluster carrying a fitted efficiency [-].
    profile : WorkloadProfile
        The workload asked about [-].
    tp : int
        Its tensor-parallel degree [GPUs].

    Returns
    -------
    bool
        True when the efficiency's interval is widened by :data:`EFFICIENCY_TRANSFER`.
    """
    eff = _fitted_entry(cluster) or {}
    seen = set(eff.get("models") or eff.get("profiles") or ()) \
        - set(eff.get("pressured") or ())
    return model_key(profile, tp) not in seen


def carried_ends(cluster, profile, tp=1) -> tuple:
    r"""Which ends of ``cluster``'s fitted efficiency interval a prediction for ``profile``
    at ``tp`` widens by :data:`EFFICIENCY_TRANSFER`: ``(slow, fast)``, the lower and the
    upper end.

    * Another model than the runs showed, or one whose every run was memory-pressured
      (:func:`carried_over`): both.
    * The same model at a tensor-parallel degree above every degree its runs had: the
      lower end only; below every one: the upper end only (between two: neither). Each
      GPU of a larger degree multiplies matrices ``tp`` times narrower and, without
      sequence parallelism, repeats the layer's element-wise work (its norms and
      dropouts, Korthikanti et al.'s :math:`10\,sbh` that every rank keeps), so its
      model FLOPs utilisation is not higher; measured, InternLM-7B's 16 rows at tp = 2
      (``benchmarks/data/published_large_n.csv``) all run slower than the efficiency of
      its tp = 1 rows gives (``benchmarks/validate_transfer.py``, ``internlm-tp2-*``).
    * The same model at its runs' degree, at another micro-batch
      (:func:`micro_batch_side`): the lower end for a smaller one, the upper for a larger.

    Parameters
    ----------
    cluster : ClusterProfile
        A cluster carrying a fitted efficiency [-].
    profile : WorkloadProfile
        The workload asked about [-].
    tp : int
        Its tensor-parallel degree [GPUs].

    Returns
    -------
    tuple of bool
        ``(slow, fast)`` [-].
    """
    if carried_over(cluster, profile, tp):
        side = tp_side(cluster, profile, tp)
        return (True, True) if side is None else (side == "larger", side == "smaller")
    side = micro_batch_side(cluster, profile, tp)
    return side == "smaller", side == "larger"


def carried_note(cluster, profile, tp=1, recompute=None) -> str:
    """What :func:`carried_ends` (and :func:`recompute_factor`) do for ``profile`` at
    ``tp`` on ``cluster``, in words (``"the efficiency fitted on ... is carried to
    ..."``); empty when the fitted efficiency applies as fitted or not at all [-].

    Parameters
    ----------
    cluster : ClusterProfile or None
        The cluster [-].
    profile : WorkloadProfile
        The workload asked about [-].
    tp : int
        Its tensor-parallel degree [GPUs].
    recompute : float or None
        Its share of activation recompute (None: the profile's own) [-].
    """
    if fitted_efficiency(cluster, profile) is None:
        return ""
    redo = recompute_factor(cluster, profile, share=recompute)
    text = _carried_text(cluster, profile, tp)
    if redo is None:
        return text
    side, g = redo
    more = (f"the job has {'more' if side == 'fast' else 'less'} activation recompute "
            f"than the calibration runs, so the {side} end is widened by a factor {g:.3g} "
            "(efficiency.recompute_factor: the recompute may run nearer the peak)")
    return f"{text}; {more}" if text else f"the efficiency is carried as fitted but {more}"


def _what_differs(eff, profile) -> str:
    """`` (here seq=131072; its runs' seq=8192)`` when the profile has a name of the
    fit's runs (every Hugging Face file is ``config``) but is another model: the
    configuration's settings that differ from the first run's; else ``""``."""
    if profile.name not in (eff.get("profiles") or ()) or not eff.get("models"):
        return ""

    def parse(key):
        return dict(part.split("=", 1) for part in str(key).split(", ") if "=" in part)

    mine, theirs = parse(model_key(profile)), parse(eff["models"][0])
    keys = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    if not keys:
        return ""
    return (" (here " + ", ".join(f"{k}={mine.get(k, '-')}" for k in keys[:3])
            + "; its runs' " + ", ".join(f"{k}={theirs.get(k, '-')}" for k in keys[:3]) + ")")


def _carried_text(cluster, profile, tp):
    """:func:`carried_note` without the recompute's part [-]."""
    eff = cluster.extra["efficiency"]
    slow, fast = carried_ends(cluster, profile, tp)
    one_end = f"the {'slow' if slow else 'fast'} end of its interval widened by a factor " \
        f"{EFFICIENCY_TRANSFER:g} (efficiency.carried_ends)"
    if not carried_over(cluster, profile, tp):
        if not (slow or fast):
            return ""
        return (f"the efficiency fitted at other micro-batches of {profile.name} is "
                f"carried to micro-batch {micro_batch_of(profile):g}, "
                f"{'smaller' if slow else 'larger'} than its runs', {one_end}")
    at = f" at tp={tp}" if tp > 1 else ""
    if slow != fast:
        return (f"the efficiency fitted at other tensor-parallel degrees of "
                f"{profile.name} is carried to tp={tp}, {one_end}")
    if not slow:
        return (f"the efficiency fitted at tensor-parallel degrees of {profile.name} "
                f"above and below tp={tp} is carried to it as fitted")
    return (f"the efficiency fitted on {', '.join(eff.get('profiles') or ()) or 'other runs'}"
            f" is carried to {profile.name}{at}{_what_differs(eff, profile)}, its interval "
            "widened by a factor "
            f"{EFFICIENCY_TRANSFER:g} either way (efficiency.EFFICIENCY_TRANSFER)"
            + (f", and its fast end {MEMORY_PRESSURE_SLOWDOWN:g} times more: every "
               "calibration run was memory-pressured (efficiency.calibration_pressured)"
               if calibration_pressured(cluster) else ""))


def tp_side(cluster, profile, tp=1):
    """Where ``tp`` lies against the tensor-parallel degrees of the runs of ``profile``'s
    model (:func:`model_key` without the degree) that ``cluster``'s efficiency was fitted
    on and that were not all memory-pressured: ``"larger"``, ``"smaller"``,
    ``"between"``, or None when no such run was of this model or its runs at this degree
    were memory-pressured (:func:`carried_ends`) [-].

    Parameters
    ----------
    cluster : ClusterProfile
        A cluster carrying a fitted efficiency [-].
    profile : WorkloadProfile
        The workload asked about [-].
    tp : int
        Its tensor-parallel degree [GPUs].
    """
    eff = _fitted_entry(cluster) or {}
    pressured = set(eff.get("pressured") or ())
    if model_key(profile, tp) in pressured:
        return None
    base = model_key(profile)
    seen = []
    for key in set(eff.get("models") or eff.get("profiles") or ()) - pressured:
        if key == base:
            seen.append(1)
        elif isinstance(key, str) and key.startswith(base + ", tp="):
            tail = key[len(base) + len(", tp="):]
            if tail.isdigit():
                seen.append(int(tail))
    if not seen:
        return None
    if tp > max(seen):
        return "larger"
    if tp < min(seen):
        return "smaller"
    return "between"


def micro_batch_side(cluster, profile, tp=1):
    """Where ``profile``'s micro-batch lies against the micro-batches of the runs
    ``cluster``'s efficiency was fitted on for the same model (:func:`model_key`, which
    leaves the micro-batch out; ``extra["efficiency"]["micro_batches"]``, recorded by
    :func:`~scalemodel.fit_cluster` for every FLOP-derived run; a model whose every run
    was memory-pressured is carried either way, :func:`carried_over`).

    The efficiency of one model is not one number across micro-batches: a smaller one
    multiplies matrices with fewer rows (``micro_batch x seq`` tokens) and pays each
    per-micro-batch cost -- kernel launches, a sharded model's gathers of every unit --
    over fewer tokens, so the model FLOPs utilisation does not fall as the micro-batch
    grows and does not rise as it shrinks. Measured: InternLM-7B on 512-1024 A100 at
    micro-batch 4 and 2 where its series ran 8 (``benchmarks/data/published_large_n.csv``
    rows 41-43) reaches 7 to 22 % fewer tokens per second than the model gives at the
    efficiency fitted at micro-batch 8 (``benchmarks/validate_large_n.py``). So a
    prediction above every micro-batch the runs showed widens the fast end of the
    efficiency's interval by :data:`EFFICIENCY_TRANSFER` and one below every micro-batch
    widens the slow end; one between them (or at one) is not widened. (LLM Foundry's
    series change the micro-batch at a steady MFU where the GPU has room, within 5 %,
    ``published_sharded.csv``; where they do not, the memory pressure is flagged on its
    own, :func:`memory_pressure`.)

    Parameters
    ----------
    cluster : ClusterProfile
        A cluster carrying a fitted efficiency [-].
    profile : WorkloadProfile
        The workload asked about [-].
    tp : int
        Its tensor-parallel degree [GPUs].

    Returns
    -------
    str or None
        ``"larger"``, ``"smaller"``, or None (within the runs' micro-batches, or either
        side unrecorded: a profile without a configuration, a fit that predates the
        record).

    Raises
    ------
    InvalidParameterError
        The cluster's recorded micro-batches are not lists of positive numbers.
    """
    eff = _fitted_entry(cluster) or {}
    record = eff.get("micro_batches")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise InvalidParameterError("cluster.extra['efficiency']['micro_batches']", record,
                                    "must map each model to the micro-batches of its runs")
    seen = record.get(model_key(profile, tp))
    mb = micro_batch_of(profile)
    if seen is None or mb is None:
        return None
    if not isinstance(seen, list) or not seen or not all(
            type(v) in (int, float) and math.isfinite(v) and v > 0 for v in seen):
        raise InvalidParameterError("cluster.extra['efficiency']['micro_batches']", seen,
                                    "each model's entry must be a list of positive "
                                    "micro-batch sizes [sequences]")
    if mb > max(seen):
        return "larger"
    if mb < min(seen):
        return "smaller"
    return None


def micro_batch_of(profile):
    """The micro-batch a FLOP-derived profile was built for (its transformer
    configuration's ``micro_batch``), or None [sequences]."""
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    config = prov.get("config")
    mb = config.get("micro_batch") if isinstance(config, dict) else None
    if type(mb) not in (int, float) or not (math.isfinite(mb) and mb > 0):
        return None
    return mb


_NOT_THE_MODEL = ("micro_batch", "name")


def model_key(profile, tp=1) -> str:
    """What makes a FLOP-derived profile the same model for :func:`carried_over`: its
    transformer configuration without the micro-batch and the name (layers, widths,
    heads, vocabulary, sequence length, dtype, ...), as text, with ``", tp=k"`` for a
    tensor-parallel degree k above 1; the profile's name when it records no
    configuration.

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].
    tp : int
        The tensor-parallel degree it runs at [GPUs].

    Returns
    -------
    str
        The key [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    config = prov.get("config")
    tail = f", tp={int(tp)}" if int(tp) > 1 else ""
    if not isinstance(config, dict):
        return str(profile.name) + tail
    return ", ".join(f"{k}={config[k]}" for k in sorted(config)
                     if k not in _NOT_THE_MODEL and not _default_head_dim(config, k)) + tail


def _default_head_dim(config, key):
    """Whether ``key`` is a ``head_dim`` equal to ``hidden / heads``, which configurations
    recorded before the field existed leave out (their keys stay the same) [-]."""
    if key != "head_dim":
        return False
    try:
        return config["head_dim"] * config["heads"] == config["hidden"]
    except (KeyError, TypeError):
        return False


def score_seconds(profile) -> float:
    """Seconds per optimizer step of a FLOP-derived profile's element-wise passes over the
    attention scores (``transformer_profile(..., flash_attention=False)``: memory-bound,
    so no efficiency scales them); 0 for any other profile, and for one already rescaled
    to a measured time [s].

    Parameters
    ----------
    profile : WorkloadProfile
        A profile [-].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    rec = prov.get("attention_scores")
    if not isinstance(rec, dict) or "scaled_to" in prov:
        return 0.0
    try:
        f, b = float(rec["forward_time"]), float(rec["backward_time"])
        r = float(rec.get("recompute_time", 0.0))  # with_recompute's memory-bound share
    except (KeyError, TypeError, ValueError):
        f = b = r = math.nan
    if not (math.isfinite(f) and math.isfinite(b) and math.isfinite(r)
            and 0 <= f <= profile.forward_time and 0 <= b + r <= profile.backward_time):
        raise InvalidParameterError("provenance['attention_scores']", rec, "must hold the "
                                    "score passes' forward_time and backward_time (and "
                                    "recompute_time), each within the profile's own [s]")
    return profile.grad_accum * (f + b + r)


def rescaled(profile, factor):
    r"""``profile`` with its FLOP-bound time multiplied by ``factor`` (an efficiency ratio)
    and its memory-bound score passes (:func:`score_seconds`) kept: scaled, with
    :meth:`~scalemodel.WorkloadProfile.scaled_to`, to :math:`S + (T - S) \cdot` factor,
    :math:`T` its iteration time and :math:`S` the score passes' share of it [-].

    Parameters
    ----------
    profile : WorkloadProfile
        A FLOP-derived profile [-].
    factor : float
        Its own efficiency over the one it is to run at, > 0 [-].
    """
    if factor == 1.0:
        return profile
    t = profile.iteration_time
    s = score_seconds(profile)
    return profile.scaled_to(s + (t - s) * factor)


def at_fitted_efficiency(profile, cluster, *, tp=1, recompute=None):
    """``profile`` computing at the efficiency ``cluster`` was fitted at for its GPU
    (:func:`fitted_efficiency`): forward, backward, ready times and update multiplied by
    its own efficiency over the fitted one (:func:`rescaled`: the score passes of a
    profile without flash attention are kept, as :func:`~scalemodel.fit_cluster` kept them
    while fitting); ``profile`` itself when
    the cluster carries no efficiency for it.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload [-].
    cluster : ClusterProfile or None
        The cluster the prediction is made on [-].
    tp : int
        The job's tensor-parallel degree (:func:`carried_over`) [GPUs].
    recompute : float or None
        The job's share of activation recompute (:func:`recompute_factor`; None: the
        profile's own) [-].

    Returns
    -------
    WorkloadProfile
        The rescaled profile (``provenance["scaled_to"]`` records the factor), or
        ``profile``.
    """
    fit = fitted_efficiency(cluster, profile, tp=tp, recompute=recompute)
    if fit is None:
        return profile
    own = profile_efficiency(profile)
    return rescaled(profile, own / fit[0])


# --------------------------------------------------------------------------- memory pressure

MEMORY_PRESSURE_SHARE = 0.36
"""Model state per GPU (at :data:`STATE_BYTES_PER_PARAMETER`) over the GPU's memory at
or above which a calibration run is flagged as memory-pressured [-]. Between 34.9 % (the
highest share of an LLM Foundry run at its series' MFU: MPT-30B on 32 A100 40GB) and
37.8 % (the lowest of a run 9 to 27 % below it: MPT-70B on 64 A100 40GB, 32 A100 80GB,
32 H100); read from those rows after their errors were seen (module docstring)."""

PRESSURE_SHARDINGS = ("zero3",)
"""Shardings whose runs are flagged as memory-pressured: those that gather each unit's
parameters before it runs and free them after (``zero3``: FSDP ``FULL_SHARD``, DeepSpeed
ZeRO-3, and a hybrid shard inside its group), allocating and freeing a unit's worth of
memory per unit and micro-batch. The evidence of a slowdown is LLM Foundry's, all FSDP
``FULL_SHARD``. Runs that keep their parameters and gradients in place are not flagged:
InternLM-7B's ZeRO-1 runs with the optimizer sharded over 8 GPUs (``zero1=8``,
``benchmarks/data/published_large_n.csv`` rows 9-16) keep the state at 46.9 % of an A100
80GB at every count and reach 4,078 tokens/s/GPU on 8 GPUs and 3,919-3,944 from 32 to
256, above the fully sharded series (rows 1-8, 46.9 % on 8 GPUs down to 34.2 % on 1024:
4,062 on 8, 3,752-3,209 from 32 to 256) [-]."""

STATE_BYTES_PER_PARAMETER = {"params": 2.0, "grads": 2.0, "optimizer": 12.0}
"""Bytes per parameter of the model state the pressure is counted at: bf16 parameters and
gradients, Adam's fp32 master copy, momentum and variance (Rajbhandari et al., ZeRO, SC
2020, Sec. 3.1: 2 + 2 + K with K = 12) [bytes]."""

_SHARDED = {"none": (), "zero1": ("optimizer",), "zero2": ("optimizer", "grads"),
            "zero3": ("optimizer", "grads", "params")}


@attrs.frozen
class MemoryPressure:
    """How much of a GPU's memory a run's model state takes (:func:`memory_pressure`).

    Attributes
    ----------
    state_bytes : float
        Model state per GPU [bytes].
    gpu_bytes : float
        The GPU's memory [bytes].
    share : float
        ``state_bytes / gpu_bytes`` [-].
    threshold : float
        :data:`MEMORY_PRESSURE_SHARE` [-].
    pressured : bool
        ``share >= threshold`` and a sharding of :data:`PRESSURE_SHARDINGS` [-].
    text : str
        One sentence saying so.
    """

    state_bytes: float
    gpu_bytes: float
    share: float
    threshold: float
    pressured: bool
    text: str


def memory_pressure(parameters, n, gpu, sharding="zero3") -> MemoryPressure:
    """The model state per GPU of a run as a share of its GPU's memory.

    Parameters
    ----------
    parameters : int or float
        Parameters of the model [-].
    n : int
        Data-parallel workers the state is sharded over [workers].
    gpu : str or GPUSpec
        The GPU (:func:`~scalemodel.get_gpu`) [-].
    sharding : str
        ``"none"``, ``"zero1"``, ``"zero2"`` or ``"zero3"`` (FSDP ``FULL_SHARD``) [-].

    Returns
    -------
    MemoryPressure
        State, share, and whether it reaches :data:`MEMORY_PRESSURE_SHARE` under a
        sharding that gathers parameters per unit (:data:`PRESSURE_SHARDINGS`).

    Raises
    ------
    InvalidParameterError
        ``parameters`` not positive and finite, ``n`` not a positive integer, or an
        unknown ``sharding``.
    ParameterTypeError
        ``parameters`` or ``n`` not a number.
    UnknownNameError
        Not a GPU scalemodel knows.

    Examples
    --------
    >>> from scalemodel.efficiency import memory_pressure
    >>> p = memory_pressure(64_862_437_376, 64, "a100-40gb")   # MPT-70B, FSDP
    >>> round(p.share, 3), p.pressured
    (0.378, True)
    >>> memory_pressure(64_862_437_376, 128, "a100-40gb").pressured
    False
    >>> memory_pressure(7_322_783_744, 8, "a100-80gb", "zero1").pressured  # InternLM-7B
    False
    """
    if isinstance(parameters, bool) or not isinstance(parameters, numbers.Real):
        raise ParameterTypeError("parameters", parameters, "a number of parameters")
    if not (math.isfinite(_as_float(parameters)) and parameters > 0):
        raise InvalidParameterError("parameters", parameters,
                                    "must be a positive, finite number of parameters")
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise ParameterTypeError("n", n, "a positive integer number of workers")
    if not (math.isfinite(_as_float(n)) and n >= 1 and float(n) == int(n)):
        raise InvalidParameterError("n", n, "must be a positive integer number of workers")
    if sharding not in _SHARDED:
        raise InvalidParameterError("sharding", sharding,
                                    f"must be one of {', '.join(_SHARDED)}")
    spec = get_gpu(gpu)
    state = sum(b * parameters / (int(n) if part in _SHARDED[sharding] else 1)
                for part, b in STATE_BYTES_PER_PARAMETER.items())
    share = state / spec.hbm_bytes
    pressured = share >= MEMORY_PRESSURE_SHARE and sharding in PRESSURE_SHARDINGS
    text = (f"model state {state / 2**30:.1f} GiB per GPU ({sharding}, {int(n)} workers, "
            f"16 bytes per parameter) is {share:.1%} of the {spec.name}'s memory"
            + (f", at or above {MEMORY_PRESSURE_SHARE:.0%}: runs this full took 1.10 to "
               f"{MEMORY_PRESSURE_SLOWDOWN:.2f} times the time per FLOP of the same model on "
               "more GPUs in LLM Foundry's tables (allocator retries, throttled "
               "all-gathers, a small micro-batch), which the model does not represent"
               if pressured else ""))
    return MemoryPressure(state, float(spec.hbm_bytes), float(share),
                          MEMORY_PRESSURE_SHARE, bool(pressured), text)


CALIBRATION_PRESSURE_NOTE = ("; an efficiency fitted on it is too low for runs with "
                             "more room")
"""What a memory-pressured calibration run's warning adds to the ``text`` of its
:class:`MemoryPressure` [-]."""

MEMORY_PRESSURE_SLOWDOWN = 1.364
"""How much slower per FLOP a memory-pressured run may be than the model says, as a factor
on its iteration time: the largest ratio, over LLM Foundry's memory-pressured rows
(``benchmarks/data/published_sharded.csv``), of the MFU of the same model on the same GPU
at the next larger GPU count (no longer pressured) to the row's own -- MPT-13B on 8 ->
16 A100 40GB 1.195, MPT-70B on 64 -> 128 A100 40GB 1.364, on 32 -> 64 A100 80GB 1.098,
on 32 -> 64 H100 1.178. A prediction for a memory-pressured job (:func:`job_memory_pressure`)
keeps its point value and multiplies the slow end of its interval (the slowest step
the fit allows it, at least the point) by this factor, with a
:class:`~scalemodel.exceptions.ModelWarning` saying why (:func:`scalemodel.iteration_time`)
[-]."""


def job_memory_pressure(profile, n, sharding="none", *, shard_group=None, tp=1, pp=1,
                        gpus_per_node=None, offload="none"):
    """:func:`memory_pressure` of a job on a transformer profile: the model state one GPU
    holds, its parameters divided by ``tp`` (and with a pipeline its heaviest stage's, the
    first with the embedding or the last with the head) and sharded as ``sharding`` shards
    them.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload; counted only when it is derived from a transformer configuration on
        a built-in GPU (its provenance's ``config`` and ``gpu``) [-].
    n : int
        GPUs of the job (all of them, ``tp * pp`` per replica) [GPUs].
    sharding : str or Sharding
        ``"none"``, ``"zero1"``, ``"zero2"``, ``"zero3"`` or ``"hybrid_shard"`` (sharded
        over a node's GPUs), or a :class:`~scalemodel.Sharding` (its strategy and shard
        group) [-].
    shard_group : int or None
        GPUs the state is sharded over, when not all the data-parallel ones [GPUs].
    tp, pp : int
        Tensor- and pipeline-parallel degrees [GPUs], [stages].
    gpus_per_node : int or None
        GPUs per node, for ``"hybrid_shard"`` [GPUs].
    offload : str
        The job's offload; state offloaded to the host is not counted, so a job with
        offload is not assessed [-].

    Returns
    -------
    MemoryPressure or None
        As :func:`memory_pressure` returns it; None when the profile is not a transformer
        configuration on a built-in GPU, the job offloads, or ``n`` is below ``tp * pp``.

    Raises
    ------
    InvalidParameterError
        ``n``, ``tp``, ``pp`` or ``shard_group`` not an integer >= 1, or an unknown
        ``sharding``.
    ParameterTypeError
        One of them not a single number.

    Examples
    --------
    >>> import scalemodel as sm
    >>> from scalemodel.efficiency import job_memory_pressure
    >>> p = sm.load_profile("llama-2-70b")   # on H100 80GB
    >>> round(job_memory_pressure(p, 32, "zero3").share, 3)
    0.401
    >>> job_memory_pressure(p, 64, "zero3").pressured
    False
    >>> job_memory_pressure(p, 32, "zero3", offload="optimizer") is None
    True
    """
    n, tp, pp = _count(n, "n"), _count(tp, "tp"), _count(pp, "pp")
    strategy = getattr(sharding, "strategy", sharding) or "none"
    if strategy not in (*_SHARDED, "hybrid_shard"):
        raise InvalidParameterError("sharding", sharding, "must be one of "
                                    f"{', '.join((*_SHARDED, 'hybrid_shard'))}")
    group = getattr(sharding, "shard_group", None) or shard_group
    group = None if group is None else _count(group, "shard_group")
    gpu = gpu_name_of(profile)
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    config = prov.get("config")
    k = tp * pp
    if (gpu is None or not isinstance(config, dict) or (offload or "none") != "none"
            or n < k):
        return None
    if strategy == "hybrid_shard":  # sharded inside a node (FSDP HYBRID_SHARD)
        strategy, group = "zero3", min(n // k, gpus_per_node or n // k)
    try:
        params = _parameter_count(tuple(sorted(config.items()))) / k
        if pp > 1:  # the heaviest stage's (workloads.end_stage_params), as memory() holds
            from .workloads import end_stage_params, stage_parts
            parts = stage_parts(config)
            if parts is not None:
                params = params * pp * end_stage_params(parts, pp)[1]
        get_gpu(gpu)
    except (TypeError, ValueError, InvalidParameterError, ParameterTypeError):
        return None  # a configuration or GPU of the user's own: not counted here
    return memory_pressure(params, int(group or n // k), gpu, strategy)


def _count(value, name):
    """A positive integer count, checked (:func:`~scalemodel.units.check_count`) [-]."""
    v = check_count(value, name)
    if not isinstance(v, int):
        raise ParameterTypeError(name, value, "a single integer >= 1")
    return v


@functools.lru_cache(maxsize=64)
def _parameter_count(items):
    from .workloads import TransformerConfig

    return TransformerConfig(**dict(items)).parameter_count


def check_calibration_memory(parameters, n, gpu, sharding="zero3", label="the run"):
    """:func:`memory_pressure` of a calibration run, with a
    :class:`~scalemodel.exceptions.CalibrationWarning` when it is memory-pressured.

    Parameters
    ----------
    parameters : int or float
        Parameters of the model [-].
    n : int
        Data-parallel workers [workers].
    gpu : str or GPUSpec
        The GPU [-].
    sharding : str
        As for :func:`memory_pressure` [-].
    label : str
        The run's name in the warning [-].

    Returns
    -------
    MemoryPressure
        As :func:`memory_pressure` returns it.

    Raises
    ------
    InvalidParameterError
        As :func:`memory_pressure`.
    """
    p = memory_pressure(parameters, n, gpu, sharding)
    if p.pressured:
        warnings.warn(f"calibration run {label}: {p.text}{CALIBRATION_PRESSURE_NOTE}",
                      CalibrationWarning, stacklevel=2)
    return p
