r"""Codec costs per GPU and per implementation.

The encode and decode kernels of every compressor family were measured on one GPU, an
NVIDIA H100 SXM (``scalemodel/data/codec/h100.json``, :mod:`scalemodel.calibrate.codec_bench`),
as a per-call floor and a time per element. On another GPU the planner scales that table
by the rule below, unless a cluster profile carries measured costs.

**The scaling rule.** The codec kernels are element-wise passes, reductions, selections and
small matrix products over the gradient: they are limited by memory bandwidth (the H100
table's fp16 cast takes 2.1 ps per element, six bytes moved at 2.9 TB/s against the
datasheet's 3.35 TB/s). Their time per element therefore scales with the inverse of the
GPU's HBM bandwidth :math:`B_\text{HBM}`; the per-call floor is the host's dispatch of the
family's kernels (launch latency), which does not depend on the GPU's memory, and is kept:

.. math::
   :label: codec-scaling

   c_e^\text{GPU} = c_e^\text{H100}\,
       \frac{B_\text{HBM}^\text{H100}}{B_\text{HBM}^\text{GPU}},
   \qquad c_d^\text{GPU} = c_d^\text{H100}\,
       \frac{B_\text{HBM}^\text{H100}}{B_\text{HBM}^\text{GPU}},
   \qquad t_\text{launch}^\text{GPU} = t_\text{launch}^\text{H100} ,

the per-rank terms of PowerSGD scaled alike. The bandwidths are the datasheets' (each with
its source in ``scalemodel/data/gpus.json``): V100 900 GB/s, A100 40GB 1555 GB/s, A100
80GB 2039 GB/s, H100 SXM 3350 GB/s, so a V100 is 3.72 times slower per element than the
H100 of the table. This is a lower bound on the cost of an older GPU: it ignores that a
framework or a host may add per-call work of its own (TensorFlow's graph executor, a
Python loop per tensor). Costs measured for an implementation replace it (below).

**Which GPU.** The ``gpu=`` argument of the planner functions; else the profile's GPU: the
GPU a configuration-derived profile was derived for (``provenance["gpu"]``), else the
profile's ``device`` string mapped by :func:`gpu_for_device` (``"Tesla V100-PCIE-32GB"``
is a V100); a device no built-in GPU matches gets the H100 table unscaled, and the plan's
codec note says so.

**Which implementation.** A measured table may belong to one implementation (its JSON's
``provenance`` has ``"implementation"`` beside ``"gpu"``, a :func:`~scalemodel.get_gpu`
name): it is used for that implementation's plans, scaled from its own GPU to the plan's
by the same rule; the families it lacks come from the reference table, scaled alike.
``grace-tf-v100.json`` is such a table: GRACE's TensorFlow compressors (TF 1.x + Horovod
0.18.2) on V100s, measured from the GRACE data release's 8-worker ResNet-50 runs
(``calibration/grace_tf_codec.py``: one run per family, the per-element level fitted on
the cluster fitted from the uncompressed run, the per-call launch held at the
reference's; its provenance lists the rows and the data file's SHA-256). It is a
measurement of that implementation, framework overheads included, not of the kernels
alone: per element, top-k and signSGD cost 3.4 times, 8-bit 24 times and PowerSGD (TF's
3x3-convolution matrix view, rank 1) 73 times the H100 table scaled to a V100, random-k
0.4 times (interval 0 to 1.4: its run hardly bounds it). A cluster profile's ``codec_costs`` replace the defaults
family by family, unscaled (they were measured on the cluster's own GPUs); an entry keyed
``"<implementation>/<family>"`` (``"grace-tf/topk"``) applies to that implementation only
and wins over the plain ``"<family>"`` entry.
"""

from __future__ import annotations

import json
import re
from importlib import resources

from .compressors import CodecCost

__all__ = ["REFERENCE_GPU", "CodecTable", "codec_tables", "gpu_for_device", "profile_gpu",
           "codec_costs", "bandwidth_factor", "default_costs"]

REFERENCE_GPU = "h100-sxm"
"""The GPU of the reference table ``scalemodel/data/codec/h100.json`` (an H100 80GB HBM3,
the SXM part: 3.35 TB/s)."""

_PER_ELEMENT = ("encode", "decode", "encode_per_rank", "decode_per_rank")

# device strings (nvidia-smi / torch.cuda.get_device_name, free text in profiles) -> gpus.json
_DEVICE_PATTERNS = (
    (r"v100.*32\s*gb", "v100-sxm2-32gb"),
    (r"v100", "v100-sxm2-16gb"),
    (r"a100.*80\s*gb", "a100-80gb"),
    (r"a100", "a100-40gb"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100", "h100-sxm"),
    (r"h200", "h200"),
    (r"b200", "b200"),
    (r"mi300x", "mi300x"),
)


class CodecTable:
    """One measured codec table: costs per family, the GPU and, optionally, the
    implementation they were measured with.

    Attributes
    ----------
    name : str
        File name without ``.json``.
    gpu : str
        The built-in GPU (:func:`~scalemodel.get_gpu` name) it was measured on.
    implementation : str or None
        The implementation preset it measures; None: the reference kernels, used for
        every implementation without a table of its own.
    costs : dict
        :class:`~scalemodel.compressors.CodecCost` per family.
    description : str
        What was measured, for the plan's codec note.
    """

    def __init__(self, name, gpu, implementation, costs, description):
        self.name, self.gpu, self.implementation = name, gpu, implementation
        self.costs, self.description = costs, description


_TABLES: dict = {}
_SCALED: dict = {}


def codec_tables() -> dict:
    """The measured tables shipped in ``scalemodel/data/codec/``, by file name [-]."""
    if not _TABLES:
        folder = resources.files("scalemodel").joinpath("data", "codec")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".json"):
                continue
            data = json.loads(entry.read_text())
            name = entry.name[:-len(".json")]
            source = (f"measured: {data['name']} ({data['provenance']['codec_costs']}; "
                      f"scalemodel/data/codec/{entry.name})")
            costs = {"none": CodecCost(0.0, 0.0, source="no codec")}
            costs.update({family: CodecCost.from_dict(e, source=source)
                          for family, e in data["codec_costs"].items()})
            prov = data["provenance"]
            _TABLES[name] = CodecTable(name, prov.get("gpu", REFERENCE_GPU),
                                       prov.get("implementation"), costs,
                                       data.get("description", name))
    return _TABLES


def gpu_for_device(device):
    """The built-in GPU name a profile's ``device`` text describes, or None [-].

    Parameters
    ----------
    device : str
        Free text such as ``"Tesla V100-PCIE-32GB"`` or ``"NVIDIA H100 80GB HBM3"`` [-].

    Examples
    --------
    >>> from scalemodel.codec_costs import gpu_for_device
    >>> gpu_for_device("Tesla V100-PCIE-32GB"), gpu_for_device("NVIDIA H100 80GB HBM3")
    ('v100-sxm2-32gb', 'h100-sxm')
    >>> gpu_for_device("a TPU") is None
    True
    """
    text = str(device or "").lower()
    for pattern, name in _DEVICE_PATTERNS:
        if re.search(pattern, text):
            return name
    return None


def profile_gpu(profile, gpu=None):
    """The :class:`~scalemodel.GPUSpec` whose codec costs a plan on ``profile`` uses:
    ``gpu`` when given, else the profile's GPU (see the module docs), else None.

    Parameters
    ----------
    profile : WorkloadProfile
        The workload profile [-].
    gpu : str, GPUSpec or None
        An explicit GPU [-].
    """
    from .hardware import get_gpu

    if gpu is not None:
        return get_gpu(gpu)
    named = (profile.provenance or {}).get("gpu") if hasattr(profile, "provenance") else None
    if isinstance(named, str):
        try:
            return get_gpu(named)
        except Exception:  # noqa: BLE001 - a free-text name falls back to the device text
            pass
    name = gpu_for_device(getattr(profile, "device", ""))
    return None if name is None else get_gpu(name)


def bandwidth_factor(gpu, reference=REFERENCE_GPU) -> float:
    """Eq. :eq:`codec-scaling`'s factor on the per-element costs: the reference GPU's HBM
    bandwidth over ``gpu``'s [-].

    Parameters
    ----------
    gpu : str or GPUSpec
        The GPU the costs are wanted for [-].
    reference : str or GPUSpec
        The GPU they were measured on [-].

    Examples
    --------
    >>> from scalemodel.codec_costs import bandwidth_factor
    >>> round(bandwidth_factor("v100"), 3), bandwidth_factor("h100-sxm")
    (3.722, 1.0)
    """
    from .hardware import get_gpu

    return get_gpu(reference).hbm_bandwidth / get_gpu(gpu).hbm_bandwidth


def _scaled(cost: CodecCost, factor: float, gpu_name: str) -> CodecCost:
    if factor == 1.0 or cost.source == "no codec":
        return cost
    return CodecCost(**{k: getattr(cost, k) * factor for k in _PER_ELEMENT},
                     launch=cost.launch,
                     source=f"{cost.source}; per-element costs x {factor:.3g} for the "
                     f"{gpu_name}'s HBM bandwidth (launch floor kept)")


def _table_for(implementation):
    tables = codec_tables()
    own = [t for t in tables.values() if implementation and t.implementation == implementation]
    if own:
        return own[0]
    return next(t for t in tables.values() if t.implementation is None)


def default_costs(gpu=None, implementation=None):
    """The built-in codec costs for ``gpu`` and ``implementation``, eq.
    :eq:`codec-scaling`: ``(costs by family, table, factor)`` [-].

    Parameters
    ----------
    gpu : str, GPUSpec or None
        The GPU (None: the table's own, unscaled) [-].
    implementation : str or None
        Implementation preset name; its own table when one ships (the reference table's
        families it lacks scaled alike), else the reference [-].
    """
    table = _table_for(implementation)
    reference = _table_for(None)
    if gpu is None:
        if table is reference:
            return table.costs, table, 1.0
        # a family the implementation's table lacks: the reference kernels, scaled from
        # their GPU to the implementation table's
        gpu = table.gpu
    from .hardware import get_gpu

    spec = get_gpu(gpu)
    key = (table.name, spec.name, spec.hbm_bandwidth)
    if key not in _SCALED:
        factor = bandwidth_factor(spec, table.gpu)
        costs = {f: _scaled(c, factor, spec.name) for f, c in table.costs.items()}
        if table is not reference:
            ref = bandwidth_factor(spec, reference.gpu)
            costs = {**{f: _scaled(c, ref, spec.name) for f, c in reference.costs.items()},
                     **costs}
        _SCALED[key] = (costs, factor)
    costs, factor = _SCALED[key]
    return costs, table, factor


def codec_costs(cluster=None, *, gpu=None, implementation=None) -> dict:
    """The :class:`~scalemodel.compressors.CodecCost` per family a plan uses: the built-in
    table for ``implementation`` scaled to ``gpu`` (eq. :eq:`codec-scaling`), replaced
    family by family by the cluster's measured ``codec_costs`` (an
    ``"<implementation>/<family>"`` entry before a ``"<family>"`` one).

    Parameters
    ----------
    cluster : ClusterProfile or None
        A calibrated cluster [-].
    gpu : str, GPUSpec or None
        The GPU of the built-in costs (None: the table's own) [-].
    implementation : str or None
        Implementation preset name [-].
    """
    base, _, _ = default_costs(gpu, implementation)
    measured = dict(getattr(cluster, "codec_costs", None) or {})
    if not measured:
        return base
    costs = dict(base)
    own = [k.split("/", 1)[1] for k in measured if implementation
           and k.startswith(f"{implementation}/")]
    for family in dict.fromkeys(list(costs) + [k for k in measured if "/" not in k] + own):
        key = f"{implementation}/{family}" if implementation else None
        entry = measured.get(key) if key in measured else measured.get(family)
        if entry is not None:
            costs[family] = CodecCost.from_dict(
                entry, source=f"measured: cluster {cluster.name}"
                + (f" ({key})" if key in measured else ""))
    return costs
