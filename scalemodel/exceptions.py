"""Exceptions raised by scalemodel.

Every error that bad input can cause is one of these classes. They subclass the
built-in :class:`ValueError` or :class:`TypeError`, so ``except ValueError`` keeps
working, and each names the offending parameter and its value.
"""

from __future__ import annotations

import difflib
import os

__all__ = [
    "ScalemodelError",
    "InvalidParameterError",
    "ParameterTypeError",
    "UnknownNameError",
    "HostMemoryError",
    "ProfileFormatError",
    "CalibrationError",
    "CalibrationWarning",
    "ModelWarning",
]


class ScalemodelError(Exception):
    """Base class of every exception scalemodel raises on purpose."""


class InvalidParameterError(ScalemodelError, ValueError):
    """A parameter has a value outside its valid range.

    Attributes
    ----------
    parameter : str
        Name of the parameter, as in the function signature.
    value : object
        The value that was passed.
    """

    def __init__(self, parameter: str, value: object, requirement: str, hint: str = ""):
        self.parameter = parameter
        self.value = value
        self.requirement = requirement
        msg = f"{parameter}={_short_repr(value)} is invalid: {requirement}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class ParameterTypeError(ScalemodelError, TypeError):
    """A parameter has the wrong type (for example a float where an integer is needed)."""

    def __init__(self, parameter: str, value: object, expected: str):
        self.parameter = parameter
        self.value = value
        super().__init__(
            f"{parameter}={_short_repr(value)} has type {type(value).__name__}; expected {expected}"
        )


class UnknownNameError(InvalidParameterError):
    """A name (model profile, algorithm, fusion policy) is not known.

    The message lists the known names and suggests the closest one.
    """

    def __init__(self, parameter: str, value: object, known, aliases=None, extra="",
                 reason="unknown name"):
        known = sorted(known)
        aliases = dict(aliases or {})
        pool = {name: name for name in known}
        pool.update({a: t for a, t in aliases.items() if t in pool})
        close = difflib.get_close_matches(str(value).lower(), list(pool), n=1, cutoff=0.5)
        suggestion = pool[close[0]] if close else None
        hint = f"Did you mean {suggestion!r}? " if suggestion else ""
        hint += "Known: " + ", ".join(known)
        if extra:
            hint += f"; {extra}"
        self.known = known
        self.suggestion = suggestion
        super().__init__(parameter, value, reason, hint)


class HostMemoryError(InvalidParameterError):
    """What an offload puts on the host does not fit in a node's host memory.

    ``parameter`` is ``host_memory`` when one was given, else ``offload`` (held against
    the default host memory of the GPU's usual server). The time questions
    (:func:`~scalemodel.min_compression` and the others, with ``gpu=``) answer with
    ``fits=False`` and this message instead of raising it.
    """


class ProfileFormatError(ScalemodelError, ValueError):
    """A profile file or object is malformed, truncated or inconsistent.

    Attributes
    ----------
    source : str
        The file (or ``"<object>"``) that was being read.
    field : str
        The field that is missing or wrong.
    """

    def __init__(self, source: str, field: str, problem: str, *, kind: str = "profile"):
        self.source = source
        self.field = field
        super().__init__(f"{kind} {source}: field {field!r}: {problem}")

    def called(self, kind: str) -> "ProfileFormatError":
        """The same error calling its file a ``kind`` (``"cluster"``, ``"trace"``) where it
        called it a profile; itself otherwise [-]."""
        prefix = f"profile {self.source}: field {self.field!r}: "
        if not str(self).startswith(prefix):
            return self
        return ProfileFormatError(self.source, self.field, str(self)[len(prefix):],
                                  kind=kind)


class CalibrationError(ScalemodelError, RuntimeError):
    """A calibration run or fit failed: a collective timed out, a rank died, there were
    too few points to fit, or a profile was recorded for another model.

    The message says what failed and what to do. Calibration never leaves a half-written
    file behind when it raises this.
    """


class CalibrationWarning(UserWarning):
    """A calibration result is usable but suspect, for example a fit whose R^2 is poor
    or a measurement whose spread across repetitions is large."""


class ModelWarning(UserWarning):
    """An input has a detail the model cannot express and leaves out, for example a
    Hugging Face config's biases on only some projections; the message names it and what
    it amounts to."""


def renamed(exc, name):
    """The same error naming ``name`` in place of its parameter (a run's field, a file's
    record: where the value is, rather than the keyword it was checked as); a file's
    format error is returned as it is."""
    if isinstance(exc, ProfileFormatError):
        return exc
    if isinstance(exc, ParameterTypeError):
        expected = str(exc).rpartition("; expected ")[2] or "a model"  # as the original
        return ParameterTypeError(name, exc.value, expected)
    new = type(exc).__new__(type(exc))
    Exception.__init__(new, str(exc).replace(f"{exc.parameter}=", f"{name}=", 1))
    new.parameter, new.value = name, exc.value
    new.requirement = getattr(exc, "requirement", "")
    return new


PATH_LIMIT = 300
"""Longest text or path shown whole in an error message: a file's name, which usually
sits at the end of a long path, is what a user needs to see; a longer one keeps its
first and last characters [characters]."""


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    if isinstance(value, (str, os.PathLike)):  # a path: keep its end (the file's name)
        if len(text) <= PATH_LIMIT:
            return text
        return text[: PATH_LIMIT // 2 - 2] + "..." + text[-(PATH_LIMIT // 2 - 1):]
    return text if len(text) <= limit else text[: limit - 3] + "..."
