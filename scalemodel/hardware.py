"""GPU specifications: peak FLOP/s per dtype, HBM, intra-node links, usual servers.

The built-in GPUs live in ``scalemodel/data/gpus.json``, each number with the vendor
datasheet it comes from beside it (``*_source`` fields). :func:`get_gpu` finds one by
name or alias (case-insensitive); :func:`list_gpus` lists them:

=================== =========== ======== ===========================================
name                arch        HBM      usual server
=================== =========== ======== ===========================================
``v100-sxm2-16gb``  volta       16 GiB   DGX-1 (8 GPUs, 4 x 100 Gbit/s)
``v100-sxm2-32gb``  volta       32 GiB   AWS p3dn.24xlarge (8 GPUs, 1 x 100 Gbit/s)
``a100-40gb``       ampere      40 GiB   DGX A100 / p4d (8 GPUs, 8 x 200 Gbit/s)
``a100-80gb``       ampere      80 GiB   DGX A100 640GB (8 GPUs, 8 x 200 Gbit/s)
``h100-sxm``        hopper      80 GiB   DGX H100 (8 GPUs, 8 x 400 Gbit/s)
``h100-pcie``       hopper      80 GiB   none recorded
``h200``            hopper      141 GiB  DGX H200 (8 GPUs, 8 x 400 Gbit/s)
``b200``            blackwell   180 GiB  DGX B200 (8 GPUs, 8 x 400 Gbit/s)
``mi300x``          cdna3       192 GiB  MI300X platform / Azure ND MI300X v5
=================== =========== ======== ===========================================

Peaks are *dense* (no 2:4 sparsity). Dtype names: ``fp64``, ``fp32`` (no tensor cores),
``tf32``, ``bf16``, ``fp16``, ``fp8``; ``float32``, ``bfloat16``, ``float16``, ``half``
are accepted. Asking a GPU for a dtype it lacks (bf16 on a V100, fp8 on an A100) raises
:class:`~scalemodel.InvalidParameterError` naming the GPU and the dtype.
"""

from __future__ import annotations

import json
import math
import re
import types
from importlib import resources

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError

__all__ = ["GPUSpec", "get_gpu", "list_gpus", "gpu_of_device", "canonical_dtype",
           "DTYPE_BYTES"]

DTYPE_ALIASES = {"float64": "fp64", "double": "fp64", "fp64": "fp64",
                 "float32": "fp32", "float": "fp32", "fp32": "fp32",
                 "tf32": "tf32", "tensorfloat32": "tf32",
                 "bfloat16": "bf16", "bf16": "bf16",
                 "float16": "fp16", "half": "fp16", "fp16": "fp16",
                 "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "float8_e4m3fn": "fp8"}
"""Accepted spellings of each dtype and the canonical name each means."""

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of each dtype as stored in memory (tf32 is stored as fp32)."""

ELEMENT_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2,
                 "bfloat16": 2, "fp64": 8, "float64": 8}
"""Bytes per gradient element by a profile's ``precision`` (4 when unknown): how the
compressors count a tensor's elements (:data:`scalemodel.compressors.ELEMENT_BYTES`)."""


def canonical_dtype(dtype, parameter: str = "dtype") -> str:
    """The canonical name of a dtype (``"bfloat16"`` -> ``"bf16"``).

    Parameters
    ----------
    dtype : str
        A dtype name, any spelling in ``DTYPE_ALIASES`` [-].
    parameter : str
        Name used in error messages [-].

    Raises
    ------
    UnknownNameError
        Not a dtype scalemodel knows; suggests the closest.
    """
    if not isinstance(dtype, str):
        raise ParameterTypeError(parameter, dtype, "a dtype name such as 'bf16'")
    key = dtype.strip().lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise UnknownNameError(parameter, dtype, sorted(set(DTYPE_ALIASES.values())),
                               aliases=DTYPE_ALIASES)
    return DTYPE_ALIASES[key]


def _finite_positive(value) -> bool:
    """Whether ``value`` is a real number (numpy's too, not a bool), finite and > 0; an
    integer beyond a float (10**400) is not finite [-]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                         np.floating)):
        return False
    try:
        v = float(value)
    except OverflowError:
        return False
    return math.isfinite(v) and v > 0


def _positive(instance, attribute, value):
    if value is None and attribute.name in _OPTIONAL:
        return
    if not _finite_positive(value):
        raise InvalidParameterError(attribute.name, value, "must be a finite number > 0")


_OPTIONAL = {"gpus_per_server", "nics_per_server", "nic_bw"}


def _freeze_flops(value):
    if not isinstance(value, dict) and not isinstance(value, types.MappingProxyType):
        raise ParameterTypeError("peak_flops", value, "a mapping from dtype to FLOP/s")
    out = {}
    for dtype, flops in dict(value).items():
        name = canonical_dtype(dtype, "peak_flops")
        if not _finite_positive(flops):
            raise InvalidParameterError(f"peak_flops[{dtype!r}]", flops,
                                        "must be a finite number of FLOP/s > 0")
        out[name] = float(flops)
    if not out:
        raise InvalidParameterError("peak_flops", value, "must name at least one dtype")
    return types.MappingProxyType(out)


def _freeze_sources(value):
    if not isinstance(value, (dict, types.MappingProxyType)):
        raise ParameterTypeError("sources", value, "a mapping from a number's name to "
                                 "where it comes from")
    return types.MappingProxyType(dict(value))


@attrs.frozen
class GPUSpec:
    """One GPU model: what its datasheet says.

    Parameters
    ----------
    name : str
        Short name (``"h100-sxm"``).
    peak_flops : mapping of str to float
        Peak dense throughput per dtype [FLOP/s]; dtypes absent are not supported.
    hbm_bytes : float
        Device memory [bytes].
    hbm_bandwidth : float
        Device memory bandwidth [bytes/s].
    intra_node_bw : float
        Link bandwidth to the other GPUs of the server, per direction [bits/s]
        (NVLink / Infinity Fabric total per GPU, or PCIe for PCIe cards).
    architecture : str
        ``"volta"``, ``"ampere"``, ``"hopper"``, ``"blackwell"``, ``"cdna3"``.
    full_name : str
        Marketing name.
    intra_node_link : str
        What the intra-node link is.
    gpus_per_server : int or None
        GPUs in the usual server (None: no usual server recorded).
    nics_per_server : int or None
        Network interfaces for training traffic in that server.
    nic_bw : float or None
        Line rate of one of those NICs [bits/s].
    server : str or None
        The server the last three describe.
    sources : mapping of str to str
        Where each number comes from (datasheet title and URL).
    """

    name: str
    peak_flops: types.MappingProxyType = attrs.field(converter=_freeze_flops)
    hbm_bytes: float = attrs.field(validator=_positive)
    hbm_bandwidth: float = attrs.field(validator=_positive)
    intra_node_bw: float = attrs.field(validator=_positive)
    architecture: str = ""
    full_name: str = ""
    intra_node_link: str = ""
    gpus_per_server: int | None = attrs.field(default=None, validator=_positive)
    nics_per_server: int | None = attrs.field(default=None, validator=_positive)
    nic_bw: float | None = attrs.field(default=None, validator=_positive)
    server: str | None = None
    sources: types.MappingProxyType = attrs.field(factory=dict, converter=_freeze_sources)

    def __attrs_post_init__(self):
        for field in ("gpus_per_server", "nics_per_server"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, (int, np.integer))
                                      or isinstance(value, bool)):
                raise ParameterTypeError(field, value, "an integer >= 1 or None")

    def node_link(self) -> dict:
        """The :class:`~scalemodel.topology.Topology` keywords of a server of these GPUs
        that nothing measured: ``intra_bw`` (the spec's rate per direction),
        ``intra_link`` (``"pci"`` for a PCIe card, else ``"nvlink"``) and ``arch`` (when
        NCCL's model knows the architecture) [-]."""
        from .nccl import NCCL_ARCHS

        out = dict(intra_bw=self.intra_node_bw,
                   intra_link="pci" if self.intra_node_link.lower().startswith("pcie")
                   else "nvlink")
        if self.architecture in NCCL_ARCHS:
            out["arch"] = self.architecture
        return out

    @property
    def dtypes(self) -> tuple:
        """Dtypes this GPU has a peak for, fastest last."""
        return tuple(sorted(self.peak_flops, key=self.peak_flops.get))

    def peak(self, dtype) -> float:
        """Peak dense throughput for ``dtype`` [FLOP/s].

        Parameters
        ----------
        dtype : str
            Compute dtype (``"bf16"``, ``"fp32"``, ...) [-].

        Raises
        ------
        InvalidParameterError
            This GPU has no such dtype (names the GPU and the dtype).
        """
        name = canonical_dtype(dtype)
        if name not in self.peak_flops:
            raise InvalidParameterError(
                "dtype", dtype, f"the {self.name} ({self.architecture or 'unknown arch'}) "
                f"has no {name} support",
                f"It supports: {', '.join(self.dtypes)}")
        return self.peak_flops[name]


_CACHE: dict = {}


def _load():
    if "gpus" not in _CACHE:
        text = resources.files("scalemodel").joinpath("data", "gpus.json").read_text()
        data = json.loads(text)
        specs, aliases = {}, {}
        for name, g in data["gpus"].items():
            link = g["intra_node_bidirectional_bytes_per_s"]
            specs[name] = GPUSpec(
                name=name, peak_flops=g["peak_flops"], hbm_bytes=float(g["hbm_bytes"]),
                hbm_bandwidth=float(g["hbm_bandwidth"]), intra_node_bw=link * 8 / 2,
                architecture=g["architecture"], full_name=g["full_name"],
                intra_node_link=g["intra_node_link"], gpus_per_server=g["gpus_per_server"],
                nics_per_server=g["nics_per_server"], nic_bw=g["nic_bw"], server=g["server"],
                sources={k[:-len("_source")]: v for k, v in g.items() if k.endswith("_source")})
            for alias in g.get("aliases", []):
                aliases[alias] = name
        _CACHE["gpus"], _CACHE["aliases"] = specs, aliases
    return _CACHE["gpus"], _CACHE["aliases"]


def list_gpus() -> list[str]:
    """Names of the built-in GPUs (aliases are accepted by :func:`get_gpu` too)."""
    return sorted(_load()[0])


_DEVICE_RULES = (
    # (words the device name has, words it must not have, built-in GPU)
    (("v100", "sxm2", "32gb"), ("pcie",), "v100-sxm2-32gb"),
    (("v100", "sxm2"), ("pcie", "32gb"), "v100-sxm2-16gb"),
    (("a100", "40gb"), ("pcie",), "a100-40gb"),
    (("a100", "80gb"), ("pcie",), "a100-80gb"),
    (("h100", "pcie"), ("nvl",), "h100-pcie"),
    (("h100", "hbm3"), ("pcie", "nvl"), "h100-sxm"),
    (("h100", "sxm"), ("pcie", "nvl"), "h100-sxm"),
    (("h200",), ("nvl",), "h200"),
    (("b200",), (), "b200"),
    (("mi300x",), (), "mi300x"),
)
"""How device names as the driver reports them (``nvidia-smi``, ``torch.cuda.
get_device_name``, the ``device`` column of nccl-tests' rank lines) map to the built-in
GPUs: "Tesla V100-SXM2-32GB", "A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100
80GB HBM3" (the SXM5 part: its PCIe card reports "NVIDIA H100 PCIe"), "NVIDIA H200",
"NVIDIA B200", "AMD Instinct MI300X". Variants without a built-in spec (V100 and A100
PCIe cards, H100 NVL, H200 NVL) map to none."""


def gpu_of_device(device) -> str | None:
    """The built-in GPU (:func:`~scalemodel.list_gpus`) a device name reported by the
    driver stands for, or None when no built-in spec matches it (``_DEVICE_RULES``).

    Parameters
    ----------
    device : str
        A device name as ``nvidia-smi`` or nccl-tests print it ("NVIDIA H100 80GB
        HBM3"), a built-in GPU's full name or one of its names and aliases [-].

    Examples
    --------
    >>> from scalemodel.hardware import gpu_of_device
    >>> gpu_of_device("NVIDIA H100 80GB HBM3"), gpu_of_device("Tesla V100-SXM2-32GB")
    ('h100-sxm', 'v100-sxm2-32gb')
    >>> gpu_of_device("NVIDIA A100 80GB PCIe") is None
    True
    """
    if not isinstance(device, str) or not device.strip():
        return None
    specs, aliases = _load()
    key = device.strip().lower().replace("_", "-").replace(" ", "-")
    key = aliases.get(key, key)
    if key in specs:
        return key
    for name, spec in specs.items():
        if spec.full_name.lower() == device.strip().lower():
            return name
    words = set(re.split(r"[^a-z0-9]+", device.lower()))
    for need, avoid, gpu in _DEVICE_RULES:
        if all(w in words for w in need) and not any(w in words for w in avoid):
            return gpu
    return None


def get_gpu(gpu="h100-sxm") -> GPUSpec:
    """A built-in GPU by name or alias, or a :class:`GPUSpec` passed through.

    Parameters
    ----------
    gpu : str or GPUSpec
        ``"h100-sxm"``, ``"h100"``, ``"A100-80GB"``, ... (case-insensitive; see
        :func:`list_gpus`), or your own :class:`GPUSpec` [-].

    Raises
    ------
    UnknownNameError
        Not a built-in name or alias; suggests the closest.
    ParameterTypeError
        Neither a string nor a GPUSpec.
    """
    if isinstance(gpu, GPUSpec):
        return gpu
    if not isinstance(gpu, str):
        raise ParameterTypeError("gpu", gpu, "a GPU name such as 'h100-sxm' or a GPUSpec")
    specs, aliases = _load()
    key = gpu.strip().lower().replace("_", "-").replace(" ", "-")
    key = aliases.get(key, key)
    if key not in specs:
        raise UnknownNameError("gpu", gpu, list(specs), aliases=aliases)
    return specs[key]
