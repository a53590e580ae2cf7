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

import contextlib
import json
import math
import numbers
import os
import signal
import stat
import tempfile
import threading
import weakref
from importlib import resources
from pathlib import Path

import attrs
import numpy as np

from .collectives import ReductionCost
from ._jsonfile import read_json_file
from .exceptions import (InvalidParameterError, ParameterTypeError, ProfileFormatError,
                         UnknownNameError, _short_repr)

__all__ = ["WorkloadProfile", "load_profile", "list_profiles", "save_profile", "ALIASES"]

FORMAT = "scalemodel-workload"
FORMAT_VERSION = 1

ALIASES = {"bert": "bert-base", "bert_base": "bert-base", "bert_large": "bert-large",
           "gpt2-small": "gpt2", "gpt-2": "gpt2", "gpt2-124m": "gpt2",
           "vgg16_bn": "vgg16", "vgg16-bn": "vgg16", "resnet-50": "resnet50",
           "resnet-101": "resnet101"}
"""Short or alternative names and the built-in profile each means."""


MAX_TIME = 86400.0
"""Longest single-worker iteration a profile may describe: one day [s]. Longer times are
input errors (a unit slip) and would overflow the model's arithmetic near 1e308."""

MAX_GRADIENT_BYTES = 1e18
"""Largest total of the gradient tensors a profile may describe: an exabyte [bytes] (the
largest models have some 1e13). More is an input error and would overflow the model's
arithmetic (every tensor at 1e308 bytes gave NaN)."""

MIN_SCALED_TIME = 1e-9
"""Shortest single-worker iteration :meth:`WorkloadProfile.scaled_to` accepts: a
nanosecond [s]."""

_SCALED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""profile -> {iteration time [s]: the profile scaled to it} (WorkloadProfile.scaled_to)."""
_SCALED_PER_PROFILE = 256


def _scaled_time(value) -> float:
    """``value`` as a time for :meth:`WorkloadProfile.scaled_to`, validated [s]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ParameterTypeError("iteration_time", value, "a number of seconds")
    try:
        t = float(value)
    except (OverflowError, ValueError):
        t = math.inf
    if not (math.isfinite(t) and MIN_SCALED_TIME <= t <= MAX_TIME):
        raise InvalidParameterError("iteration_time", value, f"must be a time in "
                                    f"[{MIN_SCALED_TIME:g}, {MAX_TIME:g}] s (a nanosecond to "
                                    "a day)")
    return t


def _finite_nonneg(source, field, value):
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        # JSON true is not 1 s, and "0.1" is not a number
        raise ProfileFormatError(source, field,
                                 f"expected a number [s], got {_short_repr(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ProfileFormatError(source, field,
                                 f"expected a number [s], got {_short_repr(value)}") from None
    if not (math.isfinite(v) and v >= 0):
        raise ProfileFormatError(source, field,
                                 f"must be finite and >= 0 [s], got {_short_repr(value)}")
    return v


def _json_numbers(source, field, values):
    """``values`` (a JSON list) as a float array; every entry a number, not a bool."""
    if not isinstance(values, list):
        raise ProfileFormatError(source, field,
                                 f"must be a list of numbers, got {_short_repr(values)}")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ProfileFormatError(source, f"{field}[{i}]",
                                     f"expected a number, got {_short_repr(v)}")
    try:
        return np.asarray(values, dtype=float)
    except OverflowError:  # an integer beyond the float range
        raise ProfileFormatError(source, field, "a number is too large") from None


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
    grad_accum : int
        Micro-batches per optimizer step (gradient accumulation): forward and backward run
        ``grad_accum`` times per step, the optimizer once. The gradients are reduced on the
        last micro-batch only under DDP and ``zero1`` (``no_sync`` for the others), on
        every micro-batch under ``zero2``, ``zero3`` and ``hybrid_shard``, whose gradients
        are sharded [-].
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
    grad_accum: int = 1

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
        total = float(b.max())          # no overflow in the sum of sizes below the limit
        if total <= MAX_GRADIENT_BYTES:
            total = float(b.sum())
        if not total <= MAX_GRADIENT_BYTES:
            raise ProfileFormatError(src, "tensors.bytes", f"the sizes total at least {total:g} "
                                     f"bytes, more than the limit of {MAX_GRADIENT_BYTES:g} "
                                     "(an exabyte): a unit slip?")
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
        if not self.forward_time + self.backward_time + self.update_time <= MAX_TIME:
            raise ProfileFormatError(src, "forward_time", f"forward + backward + update must "
                                     f"be at most {MAX_TIME:g} s (a day): got "
                                     f"{self.forward_time + self.backward_time + self.update_time!r}")
        if self.tensor_names is not None:
            names = self.tensor_names
            if not isinstance(names, (list, tuple, np.ndarray)):
                raise ProfileFormatError(src, "tensors.names", "must be a list of strings or "
                                         f"null, got {_short_repr(names)}")
            names = tuple(names)
            for i, n in enumerate(names):
                if not isinstance(n, str):
                    raise ProfileFormatError(src, f"tensors.names[{i}]",
                                             f"expected a string, got {_short_repr(n)}")
            if len(names) != b.size:
                raise ProfileFormatError(src, "tensors.names",
                                         f"has {len(names)} entries but tensors.bytes has {b.size}")
            object.__setattr__(self, "tensor_names", names)
        if self.tensor_shapes is not None:
            object.__setattr__(self, "tensor_shapes", _check_shapes(src, self.tensor_shapes, b))
        if not isinstance(self.reduction, ReductionCost):
            raise ProfileFormatError(src, "reduction", "must be a ReductionCost")
        k = self.grad_accum
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 10**6:
            raise ProfileFormatError(src, "grad_accum", "micro-batches per optimizer step "
                                     f"must be an integer in [1, 1000000], got {_short_repr(k)}")
        object.__setattr__(self, "grad_accum", int(k))
        if not k * (self.forward_time + self.backward_time) + self.update_time <= MAX_TIME:
            raise ProfileFormatError(src, "grad_accum", f"{k} micro-batches make a step longer "
                                     f"than {MAX_TIME:g} s (a day)")
        b.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "tensor_bytes", b)
        object.__setattr__(self, "tensor_ready", r)

    @property
    def iteration_time(self) -> float:
        """Single-worker iteration (optimizer step) time: ``grad_accum`` times forward +
        backward, then the update [s]."""
        return self.grad_accum * (self.forward_time + self.backward_time) + self.update_time

    def with_grad_accum(self, grad_accum) -> "WorkloadProfile":
        """This profile with ``grad_accum`` micro-batches per optimizer step.

        Parameters
        ----------
        grad_accum : int
            Micro-batches per optimizer step, >= 1 [-].
        """
        if isinstance(grad_accum, bool) or not isinstance(grad_accum, (int, np.integer)) \
                or not 1 <= grad_accum <= 10**6:
            raise InvalidParameterError("grad_accum", grad_accum,
                                        "must be an integer in [1, 1000000]")
        if int(grad_accum) == self.grad_accum:
            return self
        return attrs.evolve(self, grad_accum=int(grad_accum))

    def scaled_to(self, iteration_time) -> "WorkloadProfile":
        """This profile running at another speed: its single-worker iteration (optimizer
        step, every micro-batch) takes ``iteration_time``.

        Forward, backward, every gradient's ready time and the update are multiplied by
        one factor, ``iteration_time / self.iteration_time``: the profile keeps its shape
        (which gradient is ready when, as a fraction of the backward pass) and a measured
        single-worker time sets its speed. Gradient sizes, the reduction cost and
        ``grad_accum`` are unchanged; ``provenance["scaled_to"]`` records the time, the
        original one and the factor. The same profile scaled to the same time is the
        same object (cached), so runs that share a workload share one profile.

        Parameters
        ----------
        iteration_time : float
            Single-worker iteration time, in [1e-9, ``MAX_TIME``] (a nanosecond to a day)
            [s].

        Returns
        -------
        WorkloadProfile
            The scaled profile (``self`` when the time is already this profile's).

        Raises
        ------
        InvalidParameterError
            The time is not finite or outside [1e-9 s, a day]; names it.
        ParameterTypeError
            Not a real number.

        Examples
        --------
        >>> import numpy as np
        >>> from scalemodel import load_profile
        >>> p = load_profile("resnet50")
        >>> q = p.scaled_to(0.097)
        >>> round(q.iteration_time, 12), q.scaled_to(0.097) is q, p.scaled_to(0.097) is q
        (0.097, True, True)
        >>> bool(np.allclose(q.tensor_ready / q.backward_time, p.tensor_ready / p.backward_time))
        True
        """
        t = _scaled_time(iteration_time)
        if t == self.iteration_time:
            return self
        per = _SCALED.setdefault(self, {})
        if t not in per:
            if len(per) >= _SCALED_PER_PROFILE:  # bounded: forget the oldest
                per.pop(next(iter(per)))
            per[t] = self._scaled(t)
        return per[t]

    def _scaled(self, t):
        f = t / self.iteration_time
        prev = self.provenance.get("scaled_to") if isinstance(self.provenance, dict) else None
        orig = prev.get("from_iteration_time") if isinstance(prev, dict) else None
        orig = orig if isinstance(orig, float) else self.iteration_time
        prov = dict(self.provenance)
        prov["scaled_to"] = {"iteration_time": t, "from_iteration_time": orig,
                             "factor": t / orig,
                             "how": "forward, backward, ready times and update multiplied "
                                    "by one factor (WorkloadProfile.scaled_to)"}
        return attrs.evolve(self, forward_time=self.forward_time * f,
                            backward_time=self.backward_time * f,
                            update_time=self.update_time * f,
                            tensor_ready=self.tensor_ready * f, provenance=prov)

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
        reduction = self.reduction.to_dict()
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
            **({"grad_accum": self.grad_accum} if self.grad_accum != 1 else {}),
        }

    @classmethod
    def from_dict(cls, data, source="<object>") -> "WorkloadProfile":
        """Build a profile from a dict in the file format; errors name the field."""
        if not isinstance(data, dict):
            raise ProfileFormatError(source, "<top>", "a profile is a JSON object")
        if data.get("format") != FORMAT:
            raise ProfileFormatError(source, "format", f"expected {FORMAT!r}, got "
                                     f"{data.get('format')!r}")
        if (isinstance(data.get("format_version"), bool)
                or data.get("format_version") != FORMAT_VERSION):
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
        tensor_bytes = _json_numbers(source, "tensors.bytes", tensors["bytes"])
        tensor_ready = _json_numbers(source, "tensors.ready", tensors["ready"])
        for field in ("name", "description", "device", "framework", "precision"):
            if field in data and not isinstance(data[field], str):
                raise ProfileFormatError(source, field, "expected a string, got "
                                         f"{_short_repr(data[field])}")
        prov = data["provenance"]
        if not isinstance(prov, dict) or not prov.get("source"):
            raise ProfileFormatError(source, "provenance.source",
                                     "every profile must say where its numbers come from")
        batch = data.get("batch_size", 1)
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ProfileFormatError(source, "batch_size", f"must be an integer >= 1, got {batch!r}")
        accum = data.get("grad_accum", 1)
        if not isinstance(accum, int) or isinstance(accum, bool):
            raise ProfileFormatError(source, "grad_accum", "must be an integer >= 1, got "
                                     f"{_short_repr(accum)}")
        return cls(
            name=data["name"], tensor_bytes=tensor_bytes, tensor_ready=tensor_ready,
            tensor_names=tensors.get("names"), tensor_shapes=tensors.get("shapes"),
            forward_time=data["forward_time"], backward_time=data["backward_time"],
            update_time=data.get("update_time", 0.0),
            reduction=_reduction_from(data.get("reduction"), source),
            batch_size=batch, description=data.get("description", ""),
            device=data.get("device", ""), framework=data.get("framework", ""),
            precision=data.get("precision", "fp32"), provenance=prov, source=source,
            grad_accum=accum,
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


def _reduction_from(spec, source, folder=None) -> ReductionCost:
    """The reduction cost a profile's or cluster's ``reduction`` field names.

    A string is a built-in table's name (``scalemodel/data/reduction/<name>.json``) or a
    path relative to the folder of the file being read (``folder``, by default that of
    ``source`` when ``source`` is a file), without ``..`` and not leading outside it.
    """
    if spec is None:
        return ReductionCost(name="free")
    if isinstance(spec, str):
        return _reduction_table(spec, source, folder)
    if not isinstance(spec, dict):
        raise ProfileFormatError(source, "reduction", "must be a table name or an object, "
                                 f"got {_short_repr(spec)}")
    kind = spec.get("kind")
    per_step = spec.get("per_step", False)  # ReductionCost.per_step
    if not isinstance(per_step, bool):
        raise ProfileFormatError(source, "reduction.per_step",
                                 f"expected true or false, got {_short_repr(per_step)}")
    if kind == "table":
        for key in ("bytes", "seconds"):
            if key not in spec:
                raise ProfileFormatError(source, f"reduction.{key}", "missing")
        name = spec.get("name", "table")
        if not isinstance(name, str):
            raise ProfileFormatError(source, "reduction.name",
                                     f"expected a string, got {_short_repr(name)}")
        return _table_cost(source, "reduction.", spec, name).with_per_step(per_step)
    if kind == "linear":
        values = {key: _finite_nonneg(source, f"reduction.{key}", spec.get(key, 0.0))
                  for key in ("gamma", "latency")}
        return ReductionCost(**values, per_step=per_step)
    raise ProfileFormatError(source, "reduction.kind",
                             f"expected 'table' or 'linear', got {_short_repr(kind)}")


def _table_cost(source, prefix, table, name) -> ReductionCost:
    """A reduction table ``{"bytes": [...], "seconds": [...]}``; fields named
    ``prefix + "bytes"``."""
    if not isinstance(table, dict):
        raise ProfileFormatError(source, prefix.rstrip(".") or "<top>", 'a reduction table '
                                 'is a JSON object {"bytes": [...], "seconds": [...]}')
    nbytes = _json_numbers(source, f"{prefix}bytes", table.get("bytes"))
    seconds = _json_numbers(source, f"{prefix}seconds", table.get("seconds"))
    try:
        return ReductionCost.from_table(nbytes, seconds, name=name)
    except InvalidParameterError as exc:
        raise ProfileFormatError(source, f"{prefix}{exc.parameter.removeprefix('table_')}",
                                 exc.requirement) from None


def _reduction_table_names() -> list[str]:
    """Names of the built-in reduction tables (``scalemodel/data/reduction/``)."""
    folder = _data_dir().joinpath("reduction")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def _source_folder(source):
    """The folder of the file ``source`` names, or None when it names no file."""
    try:
        path = Path(source)
        return path.resolve().parent if path.is_file() else None
    except (OSError, ValueError):
        return None


def _reduction_table(spec, source, folder) -> ReductionCost:
    known = _reduction_table_names()
    if spec in known:
        text = _data_dir().joinpath("reduction", f"{spec}.json").read_text()
        return _table_cost(f"built-in reduction table {spec}", "", json.loads(text), spec)
    folder = _source_folder(source) if folder is None else Path(folder).resolve()
    allowed = (f"a built-in reduction table ({', '.join(known)}) or the path of a table "
               "file relative to this file's folder, without '..'")
    rel = Path(spec)
    if not spec.strip() or rel.is_absolute() or rel.drive or ".." in rel.parts:
        raise ProfileFormatError(source, "reduction", f"{spec!r} is not {allowed}")
    if folder is None:
        raise ProfileFormatError(source, "reduction", f"no built-in reduction table named "
                                 f"{spec!r} (known: {', '.join(known)}); a relative path "
                                 "works only in a profile read from a file")
    target = folder / rel
    if not os.path.lexists(target):
        raise ProfileFormatError(source, "reduction", f"{spec!r} is neither a built-in "
                                 f"reduction table ({', '.join(known)}) nor a file in "
                                 f"{folder}")
    if not target.resolve().is_relative_to(folder):
        raise ProfileFormatError(source, "reduction", f"{spec!r} leads outside {folder} "
                                 f"(a link); it must be {allowed}")
    try:
        table = read_json_file(target, what="reduction table")
        name = table.get("name") if isinstance(table, dict) else None
        return _table_cost(str(target), "", table, name if isinstance(name, str) else rel.stem)
    except ProfileFormatError as exc:  # the profile's field, and what is wrong in the table
        raise ProfileFormatError(source, "reduction", str(exc)) from None


def _data_dir():
    return resources.files("scalemodel").joinpath("data")


_NOT_PROFILES = {"gpus.json", "llm_configs.json"}  # other data beside the profiles


def _builtin_names():
    return sorted(p.name[:-5] for p in _data_dir().iterdir()
                  if p.name.endswith(".json") and p.is_file() and p.name not in _NOT_PROFILES)


def _llm_names():
    from .workloads import llm_names  # built from data/llm_configs.json by workloads.py
    return llm_names()


def list_profiles() -> list[str]:
    """Names of the built-in workload profiles (aliases in
    :data:`~scalemodel.profiles.ALIASES`), the LLMs built from their configs included
    (``scalemodel.workloads.llm_profile``)."""
    return sorted(_builtin_names() + _llm_names())


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
    if not isinstance(name_or_path, os.PathLike) and key in _CACHE:  # loaded before: no disk
        return _CACHE[key]
    if not isinstance(name_or_path, os.PathLike) and key in _builtin_names():
        if key not in _CACHE:
            path = _data_dir().joinpath(f"{key}.json")
            _CACHE[key] = _parse(path.read_text(), f"built-in {key}")
        return _CACHE[key]
    if not isinstance(name_or_path, os.PathLike):
        from .workloads import _llm_key, llm_profile
        llm = _llm_key(key)
        if llm in _llm_names():
            if llm not in _CACHE:
                _CACHE[llm] = llm_profile(llm)
            _CACHE[key] = _CACHE[llm]
            return _CACHE[llm]
    path = Path(text)
    if text.strip() and os.path.lexists(path):  # a FIFO, a folder or a huge file: a clear error, no hang
        return WorkloadProfile.from_dict(read_json_file(path, what="workload profile"),
                                         str(path))
    raise UnknownNameError("model", name_or_path, list_profiles(), aliases=ALIASES,
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

    Missing parent folders are created, so ``--out results/cluster.json`` just works. A
    new file gets the permissions the umask allows (``0o666 & ~umask``, as any other
    tool's output); a replaced file keeps its own. SIGINT and SIGTERM that arrive during
    the write are held until the file is complete (or, after an error, the temporary
    file removed) and then take effect as usual: an interrupted write leaves either the
    old file or the new one, never a half-written one and never a ``.*.tmp`` file.

    Parameters
    ----------
    path : str or os.PathLike
        Destination file [path].
    text : str
        Its content, written as UTF-8 [-].
    """
    atomic_write_files({path: text})


def atomic_write_files(files) -> None:
    """Write several files as one set: all of them or none, never a mixture.

    Every file is first written to a temporary file beside it; then, holding an exclusive
    lock on each destination folder (``flock`` of the folder itself: no lock file) and
    SIGINT and SIGTERM (see :func:`atomic_write_text`), each is renamed into place. If a
    rename fails, those already made are undone (a replaced file comes back, from a hard
    link taken before), so a failure part-way leaves the folder as it was; concurrent
    writers of the same names each write their whole set in turn, so the files left are
    all one writer's. A destination that is a folder or not a regular file is refused
    before anything is written. No temporary file, backup or lock file remains.

    Parameters
    ----------
    files : dict
        ``{path: text}``, destinations [path] and contents [-]; a text of None removes
        that destination as part of the set (a stale output of an earlier run).

    Raises
    ------
    OSError
        A destination is a folder or not a regular file (``IsADirectoryError``, with
        ``filename``), or a write failed; nothing was changed.
    """
    items = [(Path(path), text) for path, text in files.items()]
    for path, _ in items:
        _check_destination(path)
    staged = []
    with _signals_held():
        try:
            for path, text in items:
                path.parent.mkdir(parents=True, exist_ok=True)
                if text is None:
                    staged.append((None, path))
                    continue
                mode = _mode_for(path)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                           dir=path.parent)
                staged.append((tmp, path))
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    if hasattr(os, "fchmod"):  # mkstemp makes it 0600
                        os.fchmod(fh.fileno(), mode)
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
            with _folders_locked(sorted({str(path.parent.resolve()) for _, path in staged})):
                _rename_all(staged)
            staged = []
        finally:
            for tmp, _ in staged:
                if tmp is not None:
                    _unlink_quietly(tmp)


def output_problem(path):
    """Why ``path`` cannot be written as an output file, or None when it can: it is a
    folder, not a regular file, or under a file, or its folder is not writable.

    Parameters
    ----------
    path : str or os.PathLike
        The destination [path].

    Returns
    -------
    str or None
        The reason, in words, or None.
    """
    p = Path(path)
    if not os.fspath(path).strip():
        return "is empty; name a file"
    if p.is_dir():
        return "is a folder; name a file in it, e.g. " + str(p / "cluster.json")
    if os.path.lexists(p) and not p.is_file():
        return "exists and is not a regular file"
    ancestor = p.absolute().parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"the folder {ancestor} is not writable"
    return None


def _check_destination(path):
    """Refuse a destination that is a folder or another non-regular file."""
    import errno
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder; name a file", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@contextlib.contextmanager
def _folders_locked(folders):
    """An exclusive ``flock`` on each folder, in a fixed order (no deadlock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: renames are not serialised
        yield
        return
    fds = []
    try:
        for folder in folders:
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                         | getattr(os, "O_CLOEXEC", 0))
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # closing releases the lock


def _rename_all(staged):
    """Rename each ``(tmp, path)`` into place (``tmp`` None: remove ``path``); on a failure
    undo the renames made, from hard links of the replaced files, and re-raise."""
    done = []      # (path, backup or None, existed)
    try:
        for tmp, path in staged:
            backup = None
            existed = os.path.lexists(path)
            if existed:
                backup = f"{path.parent}/.{path.name}.{os.getpid()}.{id(done)}.bak"
                try:
                    os.link(path, backup, follow_symlinks=False)
                except OSError:
                    backup = None   # no hard links here: this one cannot be undone
            elif tmp is None:
                continue
            done.append((path, backup, existed))
            if tmp is None:
                os.unlink(path)
            else:
                os.replace(tmp, path)
    except BaseException:
        for path, backup, existed in reversed(done):
            try:
                if backup is not None:
                    os.replace(backup, path)
                elif not existed:
                    _unlink_quietly(path)
            except OSError:
                pass
        raise
    finally:
        for _, backup, _ in done:
            if backup is not None:
                _unlink_quietly(backup)


def _mode_for(path) -> int:
    """Permission bits for ``path``: those of the file it replaces, else the umask's."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux tells it without changing it (no race with other threads)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM inside the block; deliver them, in order, after it.

    Python runs signal handlers in the main thread only, so elsewhere this holds nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is None:  # installed outside Python: leave it alone
            continue
        try:
            signal.signal(sig, lambda signum, frame: caught.append(signum))
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            continue
        previous[sig] = handler
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)
