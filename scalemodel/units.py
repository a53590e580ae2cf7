"""Units and input validation.

scalemodel works in SI units: seconds, bytes, and bandwidth in **bits per second**
(``bw=10e9`` is 10 Gbit/s). :func:`~scalemodel.parse_bandwidth` also accepts strings with
a unit, so that the command line and the API can take what people write:

========================  ===========================
string                    bits per second
========================  ===========================
``"10Gbps"``              1e10
``"100 Gbit/s"``          1e11
``"400 Mb/s"``            4e8
``"25GB/s"``              2e11 (``B`` is bytes: x 8)
``"12.5 GiB/s"``          1.073741824e11
``"1e9"``                 1e9 (a bare number is bit/s)
========================  ===========================

Prefixes k, M, G, T are decimal (10^3 ...); Ki, Mi, Gi, Ti are binary (2^10 ...).
A lower-case ``b`` (or ``bit``) means bits, an upper-case ``B`` (or ``byte``) means bytes.
"""

from __future__ import annotations

import math
import numbers
import re

import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError

__all__ = ["parse_bandwidth", "format_bandwidth"]

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}

_BW_RE = re.compile(
    r"""^\s*(?P<num>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)\s*
        (?P<prefix>Ki|Mi|Gi|Ti|k|K|M|G|T)?
        (?P<unit>bps|bit/s|bits/s|b/s|Bps|B/s|byte/s|bytes/s|bit|b|B)?\s*$""",
    re.VERBOSE,
)

_BW_HELP = ('write a number of bits per second (10e9) or a string with a unit such as '
            '"10Gbps", "100 Gbit/s", "400Mb/s" or "25GB/s" (bytes per second)')


def _parse_bandwidth_string(text: str, parameter: str) -> float:
    m = _BW_RE.match(text)
    if m is None:
        raise InvalidParameterError(parameter, text, "cannot read a bandwidth from this string",
                                    _BW_HELP)
    value = float(m.group("num")) * _PREFIX[m.group("prefix") or ""]
    unit = m.group("unit") or ""
    if unit in ("Bps", "B/s", "byte/s", "bytes/s", "B"):
        value *= 8.0
    return value


def parse_bandwidth(bw, parameter: str = "bw"):
    """Convert a bandwidth to bits per second and check it.

    Parameters
    ----------
    bw : float, str, or array_like
        Bandwidth as a number [bits/s] or a string with a unit (see module docs).
        Arrays are converted element by element. [bits/s]
    parameter : str
        Name used in error messages [-].

    Returns
    -------
    float or numpy.ndarray
        Bandwidth [bits/s]; a float for scalar input.

    Raises
    ------
    InvalidParameterError
        If the string cannot be read or a value is not finite and positive.
    """
    if isinstance(bw, str):
        value = _parse_bandwidth_string(bw, parameter)
        return check_positive(value, parameter)
    if isinstance(bw, (list, tuple)) or (isinstance(bw, np.ndarray) and bw.dtype.kind in "OUS"):
        arr = np.asarray(bw, dtype=object)
        out = np.empty(arr.shape, dtype=float)
        for idx, item in np.ndenumerate(arr):
            out[idx] = (_parse_bandwidth_string(item, parameter) if isinstance(item, str)
                        else _as_float(item, parameter))
        return check_positive(out, parameter)
    return check_positive(bw, parameter)


def format_bandwidth(bits_per_second: float) -> str:
    """Format a bandwidth for people, e.g. ``'10 Gbit/s'``.

    Parameters
    ----------
    bits_per_second : float
        The bandwidth [bits/s].
    """
    value = float(bits_per_second)
    if not math.isfinite(value):
        return str(value)
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}bit/s"
    return f"{value:.4g} bit/s"


def _as_float(value, parameter):
    if isinstance(value, (bool, np.bool_)):
        raise ParameterTypeError(parameter, value, "a number")
    if isinstance(value, numbers.Real):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ParameterTypeError(parameter, value, "a number") from None


def as_array(value, parameter: str):
    """Return ``value`` as a float array (scalars stay 0-d), rejecting non-numbers."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ParameterTypeError(parameter, value, "a number or an array of numbers")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterTypeError(parameter, value, "a number or an array of numbers") from None
    return arr


def _scalar_or_array(arr: np.ndarray):
    return float(arr) if arr.ndim == 0 else arr


def _first_bad(arr: np.ndarray, bad: np.ndarray):
    return arr.reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])].item()


def check_positive(value, parameter: str, unit: str = ""):
    """Check ``0 < value < inf`` element-wise; return a float or an array."""
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr > 0))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad),
                                    f"must be finite and > 0{(' ' + unit) if unit else ''}")
    return _scalar_or_array(arr)


def check_nonnegative(value, parameter: str):
    """Check ``0 <= value < inf`` element-wise; return a float or an array."""
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr >= 0))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad), "must be finite and >= 0")
    return _scalar_or_array(arr)


def check_fraction(value, parameter: str):
    """Check ``0 < value <= 1`` element-wise (utilization, target scaling factor)."""
    arr = as_array(value, parameter)
    bad = ~((arr > 0) & (arr <= 1))  # NaN fails both comparisons
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad), "must be in (0, 1]")
    return _scalar_or_array(arr)


def check_ratio(value, parameter: str = "compression"):
    """Check ``1 <= value < inf`` element-wise (a compression ratio)."""
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr >= 1))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad),
                                    "a compression ratio must be finite and >= 1 "
                                    "(1 means no compression)")
    return _scalar_or_array(arr)


def check_count(value, parameter: str = "n"):
    """Check that ``value`` is an integer >= 1 (or an array of them); return int or int array."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ParameterTypeError(parameter, value, "an integer >= 1")
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise InvalidParameterError(parameter, value, "must be an integer >= 1")
        return int(value)
    arr = as_array(value, parameter)
    finite = np.isfinite(arr)
    nonint = ~finite | (arr != np.round(np.where(finite, arr, 0)))
    if nonint.any():
        raise InvalidParameterError(parameter, _first_bad(arr, nonint), "must be an integer >= 1")
    small = arr < 1
    if small.any():
        raise InvalidParameterError(parameter, _first_bad(arr, small), "must be an integer >= 1")
    if arr.ndim == 0:
        if not isinstance(value, (np.integer, np.ndarray)):
            # a Python float such as 8.0 is not a worker count
            raise ParameterTypeError(parameter, value, "an integer >= 1")
        return int(arr)
    return arr.astype(np.int64)
