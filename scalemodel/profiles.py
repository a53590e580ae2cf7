"""Workload profiles: what one worker computes and when its gradients are ready.

A :class:`~scalemodel.WorkloadProfile` holds, for one model on one device at one batch
size, the forward, backward and update times, the gradient tensors in the order they
become ready during backward (sizes [bytes], ready times [s]) and the cost of the
element-wise reduction on that device. Built-in profiles ship in ``scalemodel/data/``
(see :func:`~scalemodel.list_profiles`); the file format is described in
``scalemodel/data/FORMAT.md`` and in the design guide.

Short names: ``"bert"`` means ``"bert-base"``, ``"gpt2-small"`` and ``"gpt-2"`` mean
``"gpt2"`` (124M parameters), ``"vgg16_bn"`` means ``"vgg16"`` (the paper's log was
recorded with torchvision's ``vgg16_bn``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from importlib import resources
from pathlib import Path

import attrs
import numpy as np

from .collectives import ReductionCost
from .exceptions import ParameterTypeError, ProfileFormatError, UnknownNameError

__all__ = ["WorkloadProfile", "load_profile", "list_profiles", "save_profile", "ALIASES"]

FORMAT = "scalemodel-workload"
FORMAT_VERSION = 1

ALIASES = {"bert": "bert-base", "bert_base": "bert-base", "bert_large": "bert-large",
           "gpt2-small": "gpt2", "gpt-2": "gpt2", "gpt2-124m": "gpt2",
           "vgg16_bn": "vgg16", "vgg16-bn": "vgg16", "resnet-50": "resnet50",
           "resnet-101": "resnet101"}
"""Short or alternative names and the built-in profile each means."""


def _finite_nonneg(source, field, value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ProfileFormatError(source, field, f"expected a number, got {value!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise ProfileFormatError(source, field, f"must be finite and >= 0 [s], got {value!r}")
    return v


@attrs.frozen(eq=False)
class WorkloadProfile:
    """One worker's compute timeline and gradients.

    Parameters
    ----------
    name : str
        Profile name.
    tensor_bytes : numpy.ndarray
        Gradient sizes in backward order (first ready first) [bytes].
    tensor_ready : numpy.ndarray
        When each gradient is ready, from the start of backward, non-decreasing [s].
    forward_time : float
        Time before backward starts (forward pass and loss) [s].
    backward_time : float
        Duration of the backward pass, at least the last ready time [s].
    update_time : float
        Optimizer step after all gradients are reduced [s].
    reduction : ReductionCost
        Cost of one element-wise sum on this device [s].
    batch_size : int
        Per-worker batch size [samples].
    tensor_names : tuple of str or None
        Gradient names, backward order.
    tensor_shapes : tuple of tuple of int or None
        Gradient shapes [elements per dimension], backward order; optional (PowerSGD in
        :mod:`scalemodel.compressors` uses them). Each shape's product times the element
        size (1, 2, 4 or 8 bytes) must equal the tensor's bytes.
    description, device, framework, precision : str
        Labels.
    provenance : dict
        Where the numbers come from (at least ``source``).
    """

    name: str
    tensor_bytes: np.ndarray
    tensor_ready: np.ndarray
    forward_time: float
    backward_time: float
    update_time: float = 0.0
    reduction: ReductionCost = attrs.field(factory=ReductionCost)
    batch_size: int = 1
    tensor_names: tuple | None = None
    tensor_shapes: tuple | None = None
    description: str = ""
    device: str = ""
    framework: str = ""
    precision: str = "fp32"
    provenance: dict = attrs.field(factory=dict)
    source: str = "<object>"

    def __attrs_post_init__(self):
        src = self.source
        try:
            b = np.asarray(self.tensor_bytes, dtype=float)
            r = np.asarray(self.tensor_ready, dtype=float)
        except (TypeError, ValueError):
            raise ProfileFormatError(src, "tensors", "sizes and ready times must be numbers") \
                from None
        if b.ndim != 1 or b.size == 0:
            raise ProfileFormatError(src, "tensors.bytes", "must be a non-empty list")
        if r.shape != b.shape:
            raise ProfileFormatError(src, "tensors.ready",
                                     f"has {r.size} entries but tensors.bytes has {b.size}")
        if not (np.all(np.isfinite(b)) and np.all(b > 0)):
            raise ProfileFormatError(src, "tensors.bytes", "every size must be finite and > 0")
        if not (np.all(np.isfinite(r)) and np.all(r >= 0)):
            raise ProfileFormatError(src, "tensors.ready", "every time must be finite and >= 0")
        if np.any(np.diff(r) < 0):
            i = int(np.flatnonzero(np.diff(r) < 0)[0]) + 1
            raise ProfileFormatError(src, "tensors.ready",
                                     f"must be non-decreasing (entry {i} goes back in time)")
        for field in ("forward_time", "backward_time", "update_time"):
            object.__setattr__(self, field, _finite_nonneg(src, field, getattr(self, field)))
        if self.backward_time < r[-1] * (1 - 1e-12):
            raise ProfileFormatError(src, "backward_time",
                                     f"{self.backward_time} s ends before the last gradient is "
                                     f"ready ({r[-1]} s)")
        if self.forward_time + self.backward_time + self.update_time <= 0:
            raise ProfileFormatError(src, "forward_time", "the iteration must take some time: "
                                     "forward + backward + update is 0")
        if self.tensor_names is not None:
            names = tuple(self.tensor_names)
            if len(names) != b.size:
                raise ProfileFormatError(src, "tensors.names",
                                         f"has {len(names)} entries but tensors.bytes has {b.size}")
            object.__setattr__(self, "tensor_names", names)
        if self.tensor_shapes is not None:
            object.__setattr__(self, "tensor_shapes", _check_shapes(src, self.tensor_shapes, b))
        if not isinstance(self.reduction, ReductionCost):
            raise ProfileFormatError(src, "reduction", "must be a ReductionCost")
        b.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "tensor_bytes", b)
        object.__setattr__(self, "tensor_ready", r)

    @property
    def iteration_time(self) -> float:
        """Single-worker iteration time, forward + backward + update [s]."""
        return self.forward_time + self.backward_time + self.update_time

    @property
    def total_bytes(self) -> float:
        """Gradient bytes per iteration [bytes]."""
        return float(self.tensor_bytes.sum())

    def __repr__(self):
        return (f"WorkloadProfile(name={self.name!r}, tensors={self.tensor_bytes.size}, "
                f"total_bytes={self.total_bytes:.4g}, iteration_time={self.iteration_time:.4g})")

    # ------------------------------------------------------------------ (de)serialise

    def to_dict(self) -> dict:
        """The profile as a JSON-ready dict in the file format."""
        red = self.reduction
        if red.table_bytes is not None:
            reduction = {"kind": "table", "name": red.name, "bytes": red.table_bytes.tolist(),
                         "seconds": red.table_seconds.tolist()}
        else:
            reduction = {"kind": "linear", "latency": red.latency, "gamma": red.gamma}
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "name": self.name,
            "description": self.description, "provenance": self.provenance,
            "device": self.device, "framework": self.framework, "precision": self.precision,
            "batch_size": self.batch_size, "forward_time": self.forward_time,
            "backward_time": self.backward_time, "update_time": self.update_time,
            "tensors": {"names": list(self.tensor_names) if self.tensor_names else None,
                        "bytes": [int(v) if float(v).is_integer() else float(v)
                                  for v in self.tensor_bytes],
                        "ready": self.tensor_ready.tolist(),
                        **({"shapes": [list(sh) for sh in self.tensor_shapes]}
                           if self.tensor_shapes is not None else {})},
            "reduction": reduction,
        }

    @classmethod
    def from_dict(cls, data, source="<object>") -> "WorkloadProfile":
        """Build a profile from a dict in the file format; errors name the field."""
        if not isinstance(data, dict):
            raise ProfileFormatError(source, "<top>", "a profile is a JSON object")
        if data.get("format") != FORMAT:
            raise ProfileFormatError(source, "format", f"expected {FORMAT!r}, got "
                                     f"{data.get('format')!r}")
        if data.get("format_version") != FORMAT_VERSION:
            raise ProfileFormatError(source, "format_version",
                                     f"this scalemodel reads version {FORMAT_VERSION}, got "
                                     f"{data.get('format_version')!r}")
        for field in ("name", "forward_time", "backward_time", "tensors", "provenance"):
            if field not in data:
                raise ProfileFormatError(source, field, "missing")
        tensors = data["tensors"]
        if not isinstance(tensors, dict):
            raise ProfileFormatError(source, "tensors", "must be an object with bytes and ready")
        for field in ("bytes", "ready"):
            if not isinstance(tensors.get(field), list):
                raise ProfileFormatError(source, f"tensors.{field}", "missing or not a list")
        prov = data["provenance"]
        if not isinstance(prov, dict) or not prov.get("source"):
            raise ProfileFormatError(source, "provenance.source",
                                     "every profile must say where its numbers come from")
        batch = data.get("batch_size", 1)
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ProfileFormatError(source, "batch_size", f"must be an integer >= 1, got {batch!r}")
        return cls(
            name=str(data["name"]),
            tensor_bytes=tensors["bytes"], tensor_ready=tensors["ready"],
            tensor_names=tensors.get("names"), tensor_shapes=tensors.get("shapes"),
            forward_time=data["forward_time"], backward_time=data["backward_time"],
            update_time=data.get("update_time", 0.0),
            reduction=_reduction_from(data.get("reduction"), source),
            batch_size=batch, description=str(data.get("description", "")),
            device=str(data.get("device", "")), framework=str(data.get("framework", "")),
            precision=str(data.get("precision", "fp32")), provenance=prov, source=source,
        )


def _check_shapes(source, shapes, nbytes):
    """Validate ``tensors.shapes``: one list of positive integers per tensor whose product
    times an element size of 1, 2, 4 or 8 bytes is the tensor's size [bytes]."""
    if not isinstance(shapes, (list, tuple)) or len(shapes) != nbytes.size:
        count = len(shapes) if isinstance(shapes, (list, tuple)) else type(shapes).__name__
        raise ProfileFormatError(source, "tensors.shapes",
                                 f"has {count} entries but tensors.bytes has {nbytes.size}")
    out = []
    for i, (shape, size) in enumerate(zip(shapes, nbytes)):
        if (not isinstance(shape, (list, tuple)) or len(shape) == 0
                or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                           and d >= 1 for d in shape)):
            raise ProfileFormatError(source, f"tensors.shapes[{i}]",
                                     f"must be a non-empty list of integers >= 1, got {shape!r}")
        numel = math.prod(int(d) for d in shape)
        if size / numel not in (1.0, 2.0, 4.0, 8.0):
            raise ProfileFormatError(source, f"tensors.shapes[{i}]",
                                     f"{list(shape)} has {numel} elements, which does not "
                                     f"match {size:g} bytes at 1, 2, 4 or 8 bytes per element")
        out.append(tuple(int(d) for d in shape))
    return tuple(out)


def _reduction_from(spec, source) -> ReductionCost:
    if spec is None:
        return ReductionCost(name="free")
    if isinstance(spec, str):
        try:
            text = resources.files("scalemodel").joinpath("data", "reduction", f"{spec}.json")
            table = json.loads(text.read_text())
        except FileNotFoundError:
            raise ProfileFormatError(source, "reduction",
                                     f"no shipped reduction table named {spec!r}") from None
        return ReductionCost.from_table(table["bytes"], table["seconds"], name=spec)
    if not isinstance(spec, dict):
        raise ProfileFormatError(source, "reduction", "must be a table name or an object")
    kind = spec.get("kind")
    try:
        if kind == "table":
            return ReductionCost.from_table(spec["bytes"], spec["seconds"],
                                            name=spec.get("name", "table"))
        if kind == "linear":
            return ReductionCost(gamma=spec.get("gamma", 0.0), latency=spec.get("latency", 0.0))
    except KeyError as exc:
        raise ProfileFormatError(source, f"reduction.{exc.args[0]}", "missing") from None
    except ValueError as exc:
        raise ProfileFormatError(source, "reduction", str(exc)) from None
    raise ProfileFormatError(source, "reduction.kind", f"expected 'table' or 'linear', got {kind!r}")


def _data_dir():
    return resources.files("scalemodel").joinpath("data")


def _builtin_names():
    return sorted(p.name[:-5] for p in _data_dir().iterdir()
                  if p.name.endswith(".json") and p.is_file())


def list_profiles() -> list[str]:
    """Names of the built-in workload profiles (aliases in
    :data:`~scalemodel.profiles.ALIASES`)."""
    return _builtin_names()


_CACHE: dict = {}


def load_profile(name_or_path) -> WorkloadProfile:
    """Load a built-in profile by name, a profile file by path, or pass a profile through.

    Parameters
    ----------
    name_or_path : str, os.PathLike or WorkloadProfile
        A built-in name (see :func:`list_profiles`; case-insensitive; aliases such as
        ``"bert"``), or the path to a profile JSON file.

    Raises
    ------
    UnknownNameError
        Neither a built-in name nor an existing file; lists the known names.
    ProfileFormatError
        The file is malformed or truncated; names the field.
    """
    if isinstance(name_or_path, WorkloadProfile):
        return name_or_path
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ParameterTypeError("model", name_or_path,
                                 "a built-in profile name, a path to a profile file, "
                                 "or a WorkloadProfile")
    text = os.fspath(name_or_path)
    key = ALIASES.get(text.strip().lower(), text.strip().lower())
    if not isinstance(name_or_path, os.PathLike) and key in _builtin_names():
        if key not in _CACHE:
            path = _data_dir().joinpath(f"{key}.json")
            _CACHE[key] = _parse(path.read_text(), f"built-in {key}")
        return _CACHE[key]
    path = Path(text)
    if path.is_file():
        try:
            content = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileFormatError(str(path), "<file>", f"cannot be read: {exc}") from None
        return _parse(content, str(path))
    raise UnknownNameError("model", name_or_path, _builtin_names(), aliases=ALIASES,
                           extra="or give the path to a profile file (no such file here)")


def _parse(content: str, source: str) -> WorkloadProfile:
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(source, "<json>",
                                 f"not valid JSON (truncated or corrupt?): {exc.msg} at line "
                                 f"{exc.lineno} column {exc.colno}") from None
    return WorkloadProfile.from_dict(data, source)


def save_profile(profile: WorkloadProfile, path) -> Path:
    """Write ``profile`` to ``path`` as JSON, atomically (never half written).

    Parameters
    ----------
    profile : WorkloadProfile
        The profile to write [-].
    path : str or os.PathLike
        Destination file; written via a temporary file and a rename [path].

    Returns
    -------
    pathlib.Path
        The path written.
    """
    path = Path(path)
    text = json.dumps(profile.to_dict(), indent=1)
    atomic_write_text(path, text)
    return path


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder and a rename.

    Missing parent folders are created, so ``--out results/cluster.json`` just works.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
