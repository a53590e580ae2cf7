"""The workload profile record and its file format (the low layer of the profiles).

:class:`~scalemodel.WorkloadProfile` (one worker's compute timeline and gradients), its
validation when read from JSON (``scalemodel/data/FORMAT.md``), the reduction-cost
specifications a profile or cluster names, and the built-in profile *files* shipped in
``scalemodel/data/`` (:func:`load_builtin`). Nothing here resolves a model name to a
profile built from a transformer configuration: that is :func:`scalemodel.load_profile`
(:mod:`scalemodel.profiles`), one layer up, above the LLM configurations
(``scalemodel.workloads``), which build their profiles from this module. The package's
layers are listed in :data:`scalemodel._layers.LAYERS`.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import weakref
from importlib import resources
from pathlib import Path

import attrs
import numpy as np

from .collectives import ReductionCost
from ._jsonfile import check_keys, read_json_file
from .exceptions import (InvalidParameterError, ParameterTypeError, ProfileFormatError,
                         UnknownNameError, _short_repr)

__all__ = ["WorkloadProfile", "load_builtin", "MAX_TIME", "MAX_GRADIENT_BYTES",
           "MIN_SCALED_TIME", "FORMAT", "FORMAT_VERSION"]

FORMAT = "scalemodel-workload"
FORMAT_VERSION = 1

_PROFILE_KEYS = ("format", "format_version", "name", "description", "provenance", "device",
                 "framework", "precision", "batch_size", "grad_accum", "forward_time",
                 "backward_time", "update_time", "tensors", "reduction", "host_time")
"""The keys of a workload profile file; any other is refused (a misspelt
``"forwrd_time"`` would otherwise leave the field at its default without a word)."""

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


def _own_array(values):
    """``values`` as a float array the profile owns: a caller's array is copied (freezing
    it in place would make the caller's own array read-only, and a view's base could still
    change it after the checks); an array a profile already froze is shared [-]."""
    a = np.asarray(values, dtype=float)
    if a.flags.writeable or not a.flags.owndata:
        a = a.copy()
    return a


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
    except OverflowError:  # an integer beyond 1.8e308: not finite either
        v = math.inf
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
    host_time : float or None
        The host's time to issue one optimizer step without the data-parallel wrapper
        (the CPU thread that launches the kernels), at most :attr:`iteration_time` (a
        longer one is taken as the iteration; a file's is refused); ``None`` when not
        measured. With a cluster's host costs
        (:class:`~scalemodel.hostcosts.HostCosts`) it decides how much of the wrapper's host
        work the GPU's lead hides (:mod:`scalemodel.framework`, eq. :eq:`host-bound`);
        ``None`` is taken as the host-bound limit, :attr:`iteration_time` [s].
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
    host_time: float | None = None

    def __attrs_post_init__(self):
        src = self.source
        try:
            b = _own_array(self.tensor_bytes)
            r = _own_array(self.tensor_ready)
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
        if not self.forward_time + self.backward_time + self.update_time >= MIN_SCALED_TIME:
            raise ProfileFormatError(src, "forward_time", "the iteration must take some time: "
                                     "forward + backward + update is "
                                     f"{self.forward_time + self.backward_time + self.update_time!r}"
                                     f" s, below {MIN_SCALED_TIME:g} s (a nanosecond)")
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
        if not self.reduction.gamma * total <= MAX_TIME:
            raise ProfileFormatError(src, "reduction", f"gamma={self.reduction.gamma:g} s/byte "
                                     f"makes summing the {total:.3g} gradient bytes once take "
                                     "more than a day (a GPU sums about 1e-11 s/byte)")
        k = self.grad_accum
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 10**6:
            raise ProfileFormatError(src, "grad_accum", "micro-batches per optimizer step "
                                     f"must be an integer in [1, 1000000], got {_short_repr(k)}")
        object.__setattr__(self, "grad_accum", int(k))
        if not k * (self.forward_time + self.backward_time) + self.update_time <= MAX_TIME:
            raise ProfileFormatError(src, "grad_accum", f"{k} micro-batches make a step longer "
                                     f"than {MAX_TIME:g} s (a day)")
        if self.host_time is not None:  # a profile derived from another (tensor
            # parallelism, a faster GPU) may run faster than its host time: capped
            h = _finite_nonneg(src, "host_time", self.host_time)
            object.__setattr__(self, "host_time", min(h, self.iteration_time))
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
        host = None
        if self.host_time is not None:  # the host issues every micro-batch: same share
            k = int(grad_accum)
            host = self.host_time * ((k * (self.forward_time + self.backward_time)
                                      + self.update_time) / self.iteration_time)
        return attrs.evolve(self, grad_accum=int(grad_accum), host_time=host)

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
        # each tensor's recompute (checkpointing.with_recompute) is GPU time in its ready
        # time: scaled with it (kept absolute, a ready time less its recompute went
        # negative and the per-GPU ready times of a pipeline went back in time)
        redo = prov.get("recompute")
        if isinstance(redo, (list, tuple)) and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in redo):
            prov["recompute"] = [float(x) * f for x in redo]
        # the host's issue time is the CPU's: it does not scale with the GPU's speed,
        # but the iteration cannot end before it is issued
        host = None if self.host_time is None else min(self.host_time, t)
        return attrs.evolve(self, forward_time=self.forward_time * f,
                            backward_time=self.backward_time * f,
                            update_time=self.update_time * f,
                            tensor_ready=self.tensor_ready * f, provenance=prov,
                            host_time=host)

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
            **({"host_time": self.host_time} if self.host_time is not None else {}),
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
        check_keys(source, data, _PROFILE_KEYS, kind="workload profile")
        for field in ("name", "forward_time", "backward_time", "tensors", "provenance"):
            if field not in data:
                raise ProfileFormatError(source, field, "missing")
        tensors = data["tensors"]
        if not isinstance(tensors, dict):
            raise ProfileFormatError(source, "tensors", "must be an object with bytes and ready")
        check_keys(source, tensors, ("names", "bytes", "ready", "shapes"),
                   kind="workload profile", field="tensors")
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
        host = data.get("host_time")
        if host is not None:  # a file's host time longer than its iteration is an error
            h = _finite_nonneg(source, "host_time", host)
            step = sum(_finite_nonneg(source, f, data.get(f, 0.0)) for f in
                       ("forward_time", "backward_time")) * accum + _finite_nonneg(
                source, "update_time", data.get("update_time", 0.0))
            if h > step * (1 + 1e-9):
                raise ProfileFormatError(source, "host_time", f"{h!r} s is longer than the "
                                         f"iteration ({step!r} s): the host issues an "
                                         "iteration before it ends")
        return cls(
            name=data["name"], tensor_bytes=tensor_bytes, tensor_ready=tensor_ready,
            tensor_names=tensors.get("names"), tensor_shapes=tensors.get("shapes"),
            forward_time=data["forward_time"], backward_time=data["backward_time"],
            update_time=data.get("update_time", 0.0),
            reduction=_reduction_from(data.get("reduction"), source),
            batch_size=batch, description=data.get("description", ""),
            device=data.get("device", ""), framework=data.get("framework", ""),
            precision=data.get("precision", "fp32"), provenance=prov, source=source,
            grad_accum=accum, host_time=data.get("host_time"),
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
        if numel > int(size) or size / numel not in (1.0, 2.0, 4.0, 8.0):  # no overflow
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


def _parse(content: str, source: str) -> WorkloadProfile:
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(source, "<json>",
                                 f"not valid JSON (truncated or corrupt?): {exc.msg} at line "
                                 f"{exc.lineno} column {exc.colno}") from None
    return WorkloadProfile.from_dict(data, source)


_CACHE: dict = {}
"""Loaded profiles by lower-case name: the built-in files (:func:`load_builtin`) and the
LLMs :func:`scalemodel.load_profile` built (one dictionary, shared with
:mod:`scalemodel.profiles`; ``scalemodel.model.clear_caches(profiles=True)`` empties it)."""


def load_builtin(name: str) -> WorkloadProfile:
    """A built-in profile file (``scalemodel/data/<name>.json``), read once and cached.

    Parameters
    ----------
    name : str
        The file's name without ``.json``, lower case (no aliases, no LLM names: those
        are resolved by :func:`scalemodel.load_profile`) [-].

    Raises
    ------
    UnknownNameError
        No built-in profile file of that name; lists the known ones.
    """
    if name in _CACHE:
        return _CACHE[name]
    names = _builtin_names()
    if name not in names:
        raise UnknownNameError("model", name, names)
    _CACHE[name] = _parse(_data_dir().joinpath(f"{name}.json").read_text(),
                          f"built-in {name}")
    return _CACHE[name]
