r"""CPU offload of the optimizer (ZeRO-Offload) and of the parameters (FSDP ``CPUOffload``).

Two policies besides ``"none"``:

``"optimizer"``
    ZeRO-Offload (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model
    Training", USENIX ATC 2021, arXiv:2101.06840; DeepSpeed ``offload_optimizer``): the
    optimizer state (fp32 master weights and moments) lives in host memory and the
    optimizer step runs on the CPU. Each step the GPU sends its gradient shard to the
    host, the CPU updates its shard, and the GPU receives the updated 16-bit parameters.
``"optimizer+parameters"``
    As above, and the sharded parameters live in host memory too (PyTorch FSDP
    ``CPUOffload(offload_params=True)``, DeepSpeed ZeRO-3 ``offload_param``): before
    each unit's all-gather, in forward and again in backward, the GPU copies its
    parameter shard from the host. Only with ``zero3`` / ``hybrid_shard``.

Memory (:func:`scalemodel.memory`): the GPU no longer holds the optimizer state (and,
with parameters offloaded, neither the parameter nor the gradient shard); the host holds
per GPU the optimizer state, the gradient shard in fp32 (the CPU step's input) and, with
parameters offloaded, the parameter shard. The host memory of a node (``host_memory``,
bytes per node; default: the usual server's, :data:`HOST_MEMORY`) must hold that for the
node's GPUs, else :class:`~scalemodel.InvalidParameterError` names ``host_memory``.

Time (:func:`offload_step_time`), per GPU and step, for its shard of :math:`\Psi_s`
parameters: the gradient shard to the host and the parameters back over the GPU's host
link (:data:`HOST_LINK`, one PCIe x16 link per GPU at its theoretical rate per
direction), and the CPU optimizer step at :data:`CPU_ADAM_PARAMS_PER_S`, one host's rate,
which the :math:`h = \min(n, g)` GPUs of a node running their steps at once share
(:func:`host_ranks`; :math:`g` the job's ``gpus_per_node``, else the GPU's usual server,
as :func:`scalemodel.memory` counts a node's host memory); with parameters
offloaded, the parameter shard crosses the link twice more per micro-batch (forward and
backward). These run **serially after backward**, in place of the GPU optimizer step: an
upper bound (ZeRO-Offload overlaps the gradient copies with backward; its one-step
delayed update, which hides the CPU step, is not modelled).
"""

from __future__ import annotations

import numpy as np

from .exceptions import InvalidParameterError
from .hardware import get_gpu, gpu_of_device

__all__ = ["OFFLOAD_MODES", "OFFLOAD_ALIASES", "HOST_LINK", "HOST_MEMORY",
           "CPU_ADAM_PARAMS_PER_S", "canonical_offload", "host_link_rate", "host_ranks",
           "default_host_memory", "offload_step_time", "with_offload"]

OFFLOAD_MODES = ("none", "optimizer", "optimizer+parameters")
"""The offload policies by name."""

OFFLOAD_ALIASES = {"no": "none", "off": "none", "zero-offload": "optimizer",
                   "optim": "optimizer", "optimizer_states": "optimizer",
                   "optimizer-and-parameters": "optimizer+parameters",
                   "optimizer_and_parameters": "optimizer+parameters",
                   "parameters": "optimizer+parameters", "params": "optimizer+parameters",
                   "cpu_offload": "optimizer+parameters", "cpuoffload": "optimizer+parameters",
                   "all": "optimizer+parameters"}
"""Other names (FSDP's ``CPUOffload(offload_params=True)`` offloads parameters,
gradients and with them the optimizer step)."""

_GEN3, _GEN4, _GEN5 = 15.754e9, 31.508e9, 63.015e9
_PCIE = ("PCI Express Base Specification: x16 at 8 / 16 / 32 GT/s with 128b/130b "
         "encoding, i.e. 15.75 / 31.5 / 63.0 GB/s per direction (theoretical)")

HOST_LINK = {
    "v100-sxm2-16gb": (_GEN3, "PCIe Gen3 x16 (V100 datasheet: PCIe 32 GB/s "
                       "bidirectional); " + _PCIE),
    "v100-sxm2-32gb": (_GEN3, "PCIe Gen3 x16 (V100 datasheet); " + _PCIE),
    "a100-40gb": (_GEN4, "PCIe Gen4 x16 (A100 datasheet: PCIe Gen4 64 GB/s "
                  "bidirectional); " + _PCIE),
    "a100-80gb": (_GEN4, "PCIe Gen4 x16 (A100 datasheet); " + _PCIE),
    "h100-sxm": (_GEN5, "PCIe Gen5 x16 (H100 datasheet: PCIe Gen5 128 GB/s "
                 "bidirectional); " + _PCIE),
    "h100-pcie": (_GEN5, "PCIe Gen5 x16 (H100 datasheet); " + _PCIE),
    "h200": (_GEN5, "PCIe Gen5 x16 (H200 datasheet: PCIe Gen5 128 GB/s); " + _PCIE),
    "b200": (_GEN5, "PCIe Gen5 x16 assumed (HGX B200 hosts); " + _PCIE),
    "mi300x": (_GEN5, "PCIe Gen5 x16 (AMD Instinct MI300X datasheet: PCIe Gen 5 x16, "
               "128 GB/s); " + _PCIE),
}
"""Host link of each built-in GPU: bytes/s per direction and the source."""

HOST_MEMORY = {
    "v100-sxm2-16gb": (512e9, "NVIDIA DGX-1 datasheet: 512 GB system memory"),
    "v100-sxm2-32gb": (768 * 2**30, "AWS p3dn.24xlarge: 768 GiB memory"),
    "a100-40gb": (1e12, "NVIDIA DGX A100 320GB datasheet: 1 TB system memory"),
    "a100-80gb": (2e12, "NVIDIA DGX A100 640GB datasheet: 2 TB system memory"),
    "h100-sxm": (2e12, "NVIDIA DGX H100 datasheet: 2 TB system memory"),
    "h200": (2e12, "NVIDIA DGX H200 datasheet: 2 TB system memory"),
    "b200": (2e12, "NVIDIA DGX B200 datasheet: 2 TB system memory (up to 4 TB)"),
}
"""Host memory per node of each GPU's usual server [bytes] and the source; GPUs
without a usual server need ``host_memory=``."""

CPU_ADAM_PARAMS_PER_S = 1e9 / 0.22
"""Parameters updated per second by DeepSpeed's CPU-Adam, one host's rate (shared by the
GPUs of a node that step at once, :func:`host_ranks`):
0.22 s for one Adam step over 1 billion parameters (Ren et al., ZeRO-Offload,
arXiv:2101.06840, Sec. 6.2.4 "CPU-Adam efficiency", Table 4; measured on the DGX-2 of
its Table 2) [1/s].

What is verified and what is not (looked up 2026-11-26; the paper's PDF was not
reachable):

* The table is the paper's **Table 4**, not Table 3 (Table 3 lists the GPT-2
  configurations): a full translation of the paper (``Elvin-Ma/ai_papers``,
  ``zero/zero-offload.md`` at 024b9bb, Sec. 6.2.4) says Table 4 gives the optimizer
  time of CPU-Adam and of PyTorch's Adam for 1 to 10 billion parameters, CPU-Adam more
  than 5x faster than PyTorch on the CPU and 6.4x at 1 billion. Its tables are images
  there, so the values were not read in the paper itself.
* The value 0.22 s at 1 billion (PyTorch: 1.39 s on the CPU, 0.10 s on the GPU; CPU-Adam
  1.03 s at 4 billion and 2.57 s at 10 billion, i.e. 3.9e9 parameters/s for large
  models) is from a third-party summary of the paper, consistent with the stated 6.4x
  (1.39 / 0.22 = 6.3). Not from the paper directly.
* DeepSpeed's own documentation gives only ratios: "5.1x to 6.5x speedups considering the
  model-size between 1 to 10 billion parameters with respect to torch-adam"
  (``deepspeedai/DeepSpeed`` ``docs/_pages/training.md``), "5X--7X faster than the
  standard PyTorch implementation" (``docs/_tutorials/zero-offload.md``).
* Not known: whether "1 billion" is :math:`10^9` or :math:`2^{30}` (DeepSpeed's
  ``tests/perf/adam_test.py`` times ``1 * 1024**3`` elements), and how many of the
  host's cores the measured step had. The model reads it as one host's rate, all its
  cores: the GPUs of a node run their CPU steps at once and share the host's cores and
  memory bandwidth (an Adam step reads and writes about 16 bytes per fp32 parameter, so
  4.1e9 parameters/s, below, is ~65 GB/s of host memory traffic). A job's CPU step on
  ``n`` GPUs therefore takes ``min(n, gpus_per_node)`` times the time of the GPU's shard
  alone (:func:`host_ranks`, eq. :eq:`offload-host`); one GPU alone, as in
  ZeRO-Offload's single-GPU runs, has the whole rate. Pass ``cpu_rate=`` to
  :func:`offload_step_time` for a measured rate.

Measured on one H200 host (16 cores of a Firecracker VM, PyTorch 2.11;
``calibration/results/h200/host_offload.json``): ``torch.optim.AdamW(fused=True)`` on
2.5e8 fp32 parameters updated 4.1e9 parameters/s (``foreach=True``: 0.93e9), close to
this value; the same host's pinned copies reached 55.1-55.4 GB/s per direction, 87.5 %
of the :data:`HOST_LINK` rate of its PCIe Gen5 link."""


def canonical_offload(offload) -> str:
    """The canonical name of an offload policy.

    Parameters
    ----------
    offload : str, bool or None
        ``"none"``, ``"optimizer"``, ``"optimizer+parameters"`` or an alias in
        :data:`OFFLOAD_ALIASES` (case-insensitive); None and False are ``"none"`` [-].

    Raises
    ------
    InvalidParameterError
        Anything else; names the value and the valid ones.
    """
    if offload is None or offload is False:
        return "none"
    if isinstance(offload, str):
        key = offload.strip().lower().replace(" ", "")
        key = OFFLOAD_ALIASES.get(key, key)
        if key in OFFLOAD_MODES:
            return key
    raise InvalidParameterError("offload", offload, "must be one of 'none', 'optimizer' "
                                "or 'optimizer+parameters' (aliases: "
                                + ", ".join(sorted(OFFLOAD_ALIASES)) + ")")


def _gpu_name(gpu):
    return get_gpu(gpu).name


def host_link_rate(gpu) -> float:
    """Host link rate of one GPU, per direction [bytes/s].

    Parameters
    ----------
    gpu : str or GPUSpec
        A built-in GPU (:func:`~scalemodel.get_gpu`) [-].

    Raises
    ------
    InvalidParameterError
        A GPU without a recorded host link.
    """
    name = _gpu_name(gpu)
    if name not in HOST_LINK:
        raise InvalidParameterError("gpu", name, "no host link (PCIe) rate is recorded "
                                    "for it", "Use a built-in GPU")
    return HOST_LINK[name][0]


def default_host_memory(gpu):
    """Host memory per node of the GPU's usual server [bytes], or None.

    Parameters
    ----------
    gpu : str or GPUSpec
        A GPU (:func:`~scalemodel.get_gpu`) [-].
    """
    hit = HOST_MEMORY.get(_gpu_name(gpu))
    return None if hit is None else float(hit[0])


def host_ranks(gpus, host_gpus):
    """GPUs whose processes run their CPU optimizer steps on one host at once: a job of
    ``gpus`` GPUs on nodes of ``host_gpus``, :math:`h = \\min(n, g)` of eq.
    :eq:`offload-host` (array-valued in ``gpus``).

    Parameters
    ----------
    gpus : int or array_like
        GPUs of the job, every rank that runs a CPU step [GPUs].
    host_gpus : int
        GPUs of a node, which share its host [GPUs].

    Returns
    -------
    int or numpy.ndarray
        The ranks sharing a host [GPUs].
    """
    return np.minimum(gpus, host_gpus)


def offload_step_time(params, offload, gpu, *, grad_bytes=2, param_bytes=2,
                      micro_batches=1, cpu_rate=CPU_ADAM_PARAMS_PER_S,
                      ranks_per_host=1) -> float:
    """Time of one step's offload work for a shard of ``params`` parameters.

    Parameters
    ----------
    params : float
        Parameters of the GPU's shard [-].
    offload : str
        An offload policy (:func:`canonical_offload`) [-].
    gpu : str or GPUSpec
        The GPU, for its host link [-].
    grad_bytes : float
        Bytes per gradient element sent to the host [bytes].
    param_bytes : float
        Bytes per parameter element sent back (and, with parameters offloaded, copied
        to the GPU before each all-gather) [bytes].
    micro_batches : int
        Micro-batches per step (parameters offloaded: two copies each) [-].
    cpu_rate : float
        Parameters the host's CPU optimizer updates per second, all its cores [1/s].
    ranks_per_host : int
        GPUs whose processes run their CPU steps on the host at the same time
        (:func:`host_ranks`): they share ``cpu_rate``, so the step takes that many times
        longer [GPUs].

    Returns
    -------
    float
        Gradient copy + CPU step + parameter copy (+ the per-micro-batch parameter
        copies), serially [s].
    """
    mode = canonical_offload(offload)
    if mode == "none":
        return 0.0
    link = host_link_rate(gpu)
    t = params * (grad_bytes + param_bytes) / link + params * ranks_per_host / cpu_rate
    if mode == "optimizer+parameters":
        t += 2.0 * micro_batches * params * param_bytes / link
    return float(t)


def _profile_gpu(profile, mode="optimizer"):
    """The built-in GPU of a profile: its ``provenance["gpu"]`` or its ``device`` as a
    built-in name or as the driver reports it (``"NVIDIA H100 80GB HBM3"`` of a measured
    profile, :func:`~scalemodel.hardware.gpu_of_device`)."""
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    for name in (prov.get("gpu"), profile.device):
        key = gpu_of_device(name) if isinstance(name, str) else None
        if key is not None:
            return get_gpu(key)
    raise InvalidParameterError(
        "offload", mode, f"the GPU of the profile {profile.name!r} "
        f"({profile.device or 'not recorded'}) is not a built-in one, so its host link "
        "rate is unknown", "Derive the profile with scalemodel.transformer_profile(config, "
        "gpu)")


def with_offload(profile, offload, sharding="none", host_gpus=1):
    """The profile with its optimizer step replaced by the offload's step time.

    The update time becomes :func:`offload_step_time` for the whole model on one GPU
    alone on its host (linear in the parameters, so a shard of ``1/s`` of it, as the
    sharded model divides the update, is the shard's offload time). Its CPU part is
    recorded as ``provenance["offload_cpu_step"]`` [s] and the GPUs that share a host as
    ``provenance["offload_host_gpus"]``: on ``n`` GPUs the step grows by the CPU part
    times ``host_ranks(n, host_gpus) - 1`` (eq. :eq:`offload-host`,
    ``scalemodel.model.Scenario.host_sharing``).

    Parameters
    ----------
    profile : WorkloadProfile
        The workload (its GPU from ``provenance["gpu"]`` or ``device``) [-].
    offload : str or None
        An offload policy [-].
    sharding : str
        The canonical strategy (``"optimizer+parameters"`` needs ``zero3`` or
        ``hybrid_shard``) [-].
    host_gpus : int
        GPUs of a node, whose CPU steps share its host [GPUs].

    Returns
    -------
    WorkloadProfile
        ``profile`` itself for ``"none"``.

    Raises
    ------
    InvalidParameterError
        Parameter offload without full sharding; a profile whose GPU is unknown.
    """
    mode = canonical_offload(offload)
    if mode == "none":
        return profile
    check_offload_sharding(mode, sharding)
    from .sharding import _profile_element_bytes

    elem = _profile_element_bytes(profile)
    psi = profile.total_bytes / elem
    gpu = _profile_gpu(profile, mode)
    t = offload_step_time(psi, mode, gpu, grad_bytes=elem, param_bytes=elem,
                          micro_batches=profile.grad_accum)
    prov = dict(profile.provenance)
    prov["offload"] = (f"{mode}: update = {t:.4g} s for the whole model (host link "
                       f"{host_link_rate(gpu) / 1e9:.1f} GB/s, CPU-Adam "
                       f"{CPU_ADAM_PARAMS_PER_S:.3g} params/s for one GPU alone on its host, "
                       f"shared by up to {int(host_gpus)} GPUs of a node; "
                       "scalemodel.offload)")
    prov["offload_mode"] = mode
    prov["offload_cpu_step"] = float(psi / CPU_ADAM_PARAMS_PER_S)
    prov["offload_host_gpus"] = int(host_gpus)
    from .checkpointing import evolve_checked

    return evolve_checked(profile, update_time=float(t), provenance=prov)


def recorded_offload(profile):
    """The CPU part of the offloaded step and the GPUs sharing its host that a profile
    records (:func:`with_offload`: ``provenance["offload_cpu_step"]`` [s] and
    ``provenance["offload_host_gpus"]`` [GPUs]), checked: ``(0.0, 1)`` without offload.

    Parameters
    ----------
    profile : WorkloadProfile
        A profile, perhaps read from a file [-].

    Returns
    -------
    tuple of (float, int)
        The CPU step [s] and the host's GPUs [GPUs].

    Raises
    ------
    InvalidParameterError
        A recorded value that is not a finite time in [0, 1 day] or a whole number of GPUs
        in [1, 2**31 - 1], or a CPU step without its host's GPUs (a profile file's, edited
        or corrupt), naming the key.
    """
    from .profile_format import MAX_TIME
    from .units import MAX_COUNT

    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    if "offload_cpu_step" not in prov and "offload_host_gpus" not in prov:
        return 0.0, 1
    c, host = prov.get("offload_cpu_step"), prov.get("offload_host_gpus")
    fix = ("Remove both keys (and 'offload'), or derive the profile again and pass "
           "offload= to the call")
    if (isinstance(c, bool) or not isinstance(c, (int, float, np.floating, np.integer))
            or not 0.0 <= float(c) <= MAX_TIME):
        raise InvalidParameterError("profile.provenance['offload_cpu_step']", c,
                                    f"must be a finite time in [0, {MAX_TIME:g}] s, as "
                                    "scalemodel.offload.with_offload writes it", fix)
    if (isinstance(host, bool) or not isinstance(host, (int, np.integer))
            or not 1 <= int(host) <= MAX_COUNT):
        raise InvalidParameterError("profile.provenance['offload_host_gpus']", host,
                                    f"must be a whole number of GPUs in [1, {MAX_COUNT}] "
                                    "beside offload_cpu_step, as "
                                    "scalemodel.offload.with_offload writes it", fix)
    return float(c), int(host)


def check_offload_sharding(mode, sharding):
    """Raise unless ``mode`` applies under the canonical strategy ``sharding``.

    Parameters
    ----------
    mode : str
        Canonical offload policy [-].
    sharding : str
        Canonical strategy [-].

    Raises
    ------
    InvalidParameterError
        ``"optimizer+parameters"`` without ``zero3`` / ``hybrid_shard``.
    """
    if mode == "optimizer+parameters" and sharding not in ("zero3", "hybrid_shard"):
        raise InvalidParameterError(
            "offload", mode, f"parameter offload needs sharded parameters, not "
            f"sharding={sharding!r}", "Use sharding='zero3' (FSDP FULL_SHARD) or "
            "'hybrid_shard', or offload='optimizer'")
