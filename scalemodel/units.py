"""Units and input validation.

scalemodel works in SI units: seconds, bytes, and bandwidth in **bits per second**
(``bw=10e9`` is 10 Gbit/s). :func:`~scalemodel.parse_bandwidth` also accepts strings with
a unit, so that the command line and the API can take what people write:

=============================  ===================================
string                         bits per second
=============================  ===================================
``"10Gbps"``, ``"10gbps"``     1e10
``"100 Gbit/s"``               1e11
``"100GbE"``                   1e11 (Ethernet rates are bits)
``"400 Mb/s"``                 4e8
``"25GB/s"``                   2e11 (``B`` is bytes: x 8)
``"12.5 GiB/s"``               1.073741824e11
``"1e9"``                      1e9 (a bare number is bit/s)
=============================  ===================================

Prefixes k, M, G, T, P are decimal (10^3 ...) and Ki, Mi, Gi, Ti binary (2^10 ...), in
either case (``m`` is mega: no link runs at millibits per second). In the abbreviated
units the case of the ``b`` decides: a lower-case ``b`` (``bps``, ``b/s``) means bits, an
upper-case ``B`` (``Bps``, ``B/s``, ``B``) means bytes; the all-capital ``BPS`` could be
either and is refused. The words (``bit``, ``bits``, ``byte``, ``bytes``, ``/s`` or
``/sec``) and the Ethernet suffix (``GbE``, ``GE``) are case-insensitive.

**A line rate is at least 1 Mbit/s** (:data:`MIN_TEXT_BANDWIDTH`): ``"10"`` or ``10`` is
almost always 10 Gbit/s without its unit, not 10 bit/s, so it is refused with the hint
``did you mean 10Gbps?``, as text on the command line and as a number in the API alike
(one rule: ``min_compression("bert", 10)`` is refused as ``--bw 10`` is).

The validators (``check_*``) accept Python and numpy real numbers (``Fraction`` and
``Decimal`` included) and arrays of them;
``None``, booleans, strings, complex numbers and objects raise
:class:`~scalemodel.ParameterTypeError`, and values outside the range
:class:`~scalemodel.InvalidParameterError`, each naming the parameter and the
value given. :func:`broadcast_shape` checks that array parameters broadcast together.
"""

from __future__ import annotations

import decimal
import functools
import math
import numbers
import re

import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError

__all__ = ["parse_bandwidth", "format_bandwidth", "parse_duration", "broadcast_shape",
           "scalar_converter", "MIN_TEXT_BANDWIDTH", "MAX_COUNT", "MAX_DURATION",
           "MIN_UTILIZATION"]

MIN_TEXT_BANDWIDTH = 1e6
"""Smallest line rate [bits/s] a string may name (1 Mbit/s); see the module notes."""

MAX_COUNT = 2**31 - 1
"""Largest worker (or node, server) count accepted [-]: counts stay exact integers."""

MIN_UTILIZATION = 1e-9
"""Smallest ``utilization`` accepted [-]: 5e-324 answered an infinite iteration time and a
scaling factor of 0 without a word (the transport fits clamp theirs at this bound)."""

MAX_DURATION = 86400.0
"""Longest latency or overhead :func:`parse_duration` accepts: a day [s]. More is a unit
slip (1e300 s gave iteration times of 1e302 s, and 1e308 s an infinite one)."""

_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_BW_RE = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<prefix>[kKmMgGtTpP][iI]?)?"
                    r"(?P<unit>[^\s\d].*?)?\s*$")
_PER_SECOND = ("", "/s", "/sec", "ps")

_BW_HELP = ('write a number of bits per second (10e9) or a string with a unit such as '
            '"10Gbps", "100 Gbit/s", "400Mb/s" or "25GB/s" (bytes per second)')


def _unit_factor(unit: str, has_prefix: bool):
    """Bits per unit (1 or 8) of a unit string after its prefix; None if unreadable,
    ``"ambiguous"`` for ``BPS``."""
    if unit == "":
        return 1.0  # "10G": a prefix alone is bits
    low = unit.lower()
    for word, factor in (("bits", 1.0), ("bit", 1.0), ("bytes", 8.0), ("byte", 8.0)):
        if low.startswith(word) and low[len(word):] in _PER_SECOND:
            return factor
    if has_prefix and low in ("be", "e"):  # Ethernet: 100GbE, 100GE
        return 1.0
    if low[0] == "b" and low[1:] in _PER_SECOND:
        if unit == "BPS":
            return "ambiguous"
        return 1.0 if unit[0] == "b" else 8.0
    return None


def _split_bandwidth(text: str):
    """``(number, prefix, unit)`` of a bandwidth string, or None when it is unreadable."""
    m = _BW_RE.match(text)
    if m is None:
        return None
    return m.group("num"), m.group("prefix") or "", m.group("unit") or ""


@functools.lru_cache(maxsize=256)  # a pure function of the text (errors are not kept)
def _parse_bandwidth_string(text: str, parameter: str) -> float:
    parts = _split_bandwidth(text)
    if parts is None:
        raise InvalidParameterError(parameter, text, "cannot read a bandwidth from this string",
                                    _BW_HELP)
    num, prefix, unit = parts
    factor = _unit_factor(unit, bool(prefix))
    if factor == "ambiguous":
        raise InvalidParameterError(parameter, text, "BPS could mean bits or bytes per second",
                                    f"write {num}{prefix}bps (bits) or {num}{prefix}B/s (bytes)")
    scale = _DECIMAL.get(prefix.lower()) or _BINARY.get(prefix.lower())
    if factor is None or scale is None:
        raise InvalidParameterError(parameter, text, "cannot read a bandwidth from this string",
                                    _BW_HELP)
    value = float(num) * scale * factor
    if not math.isfinite(value):
        raise InvalidParameterError(parameter, text, "too large to be a bandwidth (it "
                                    "overflows a float)")
    if value <= 0:
        raise InvalidParameterError(parameter, text, "must be > 0")
    if value < MIN_TEXT_BANDWIDTH:
        if not prefix and not unit:
            hint = f"did you mean {num}Gbps? A bare number is bits per second"
        else:
            hint = ("scalemodel models data-center links, from 1 Mbit/s (as text and as a "
                    "number alike)")
        raise InvalidParameterError(parameter, text, "a line rate written as text must be at "
                                    "least 1 Mbit/s", hint)
    return value


_TINY = float(np.finfo(float).tiny)  # smallest normal float: its reciprocal is finite


def _check_bandwidth(value, parameter):
    v = _plain_number(value)
    if v is not None and MIN_TEXT_BANDWIDTH <= v < math.inf:
        return v
    arr = as_array(value, parameter)
    # below 1 Mbit/s a line rate is almost surely a unit slip (10 for 10 Gbit/s): the
    # same rule as for text, so the API and the command line agree
    bad = ~(np.isfinite(arr) & (arr >= MIN_TEXT_BANDWIDTH))
    if bad.any():
        first = _first_bad(arr, bad)
        if not (math.isfinite(first) and first > 0):
            raise InvalidParameterError(parameter, first, "must be finite and > 0")
        hint = (f"did you mean {first:g}Gbps? A bare number is bits per second"
                if 1 <= first < 1e4 else "scalemodel models data-center links, from 1 Mbit/s")
        raise InvalidParameterError(parameter, first, "a line rate must be at least 1 Mbit/s "
                                    "(1e6 bits/s)", hint)
    return _scalar_or_array(arr)


def parse_bandwidth(bw, parameter: str = "bw"):
    """Convert a bandwidth to bits per second and check it.

    Parameters
    ----------
    bw : float, str, or array_like
        Bandwidth as a number [bits/s] or a string with a unit (see module docs).
        Arrays and lists are converted element by element. [bits/s]
    parameter : str
        Name used in error messages [-].

    Returns
    -------
    float or numpy.ndarray
        Bandwidth [bits/s]; a float for scalar input.

    Raises
    ------
    InvalidParameterError
        If a string cannot be read, a value is not finite and positive, or it is below
        1 Mbit/s.
    ParameterTypeError
        For ``None``, booleans, complex numbers and other non-numbers.

    Notes
    -----
    Numbers and strings alike must be at least
    :data:`~scalemodel.units.MIN_TEXT_BANDWIDTH` (1 Mbit/s), so that a unit forgotten
    (``--bw 10``, ``bw=10``) is an error with a hint rather than 10 bit/s.

    Examples
    --------
    >>> from scalemodel import parse_bandwidth
    >>> parse_bandwidth("10gbps"), parse_bandwidth("100GbE"), parse_bandwidth("25GB/s")
    (10000000000.0, 100000000000.0, 200000000000.0)
    """
    if isinstance(bw, str):
        return _parse_bandwidth_string(bw, parameter)
    if isinstance(bw, (list, tuple)) or (isinstance(bw, np.ndarray) and bw.dtype.kind in "OUS"):
        try:
            arr = np.asarray(bw, dtype=object)
        except ValueError:  # ragged nesting
            raise ParameterTypeError(parameter, bw, "a number, a string with a unit, or an "
                                     "array of them of one shape") from None
        if any(isinstance(item, str) for item in arr.reshape(-1)):
            out = np.empty(arr.shape, dtype=float)
            for idx, item in np.ndenumerate(arr):
                out[idx] = (_parse_bandwidth_string(item, parameter) if isinstance(item, str)
                            else _check_bandwidth(item, parameter))
            return out
    return _check_bandwidth(bw, parameter)


def _format_one(value: float) -> str:
    if not math.isfinite(value):
        return f"{value} bit/s"
    rounded = float(f"{value:.4g}")  # the unit of the printed digits: never "1000 Gbit/s"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(rounded) >= scale:
            return f"{value / scale:.4g} {prefix}bit/s"
    return f"{value:.4g} bit/s"


def one_rate(value, parameter: str) -> float:
    """:func:`parse_bandwidth` of a value that must be one line rate, as a float; a list
    or an array (``float()`` of one raised a bare ``TypeError``) is a
    :class:`~scalemodel.ParameterTypeError` naming ``parameter``.

    Parameters
    ----------
    value : float or str
        The line rate [bits/s].
    parameter : str
        Name used in error messages [-].
    """
    bw = parse_bandwidth(value, parameter)
    if np.ndim(bw) != 0:
        raise ParameterTypeError(parameter, value, "one line rate (a number or a string "
                                 "such as '100Gbps')")
    return float(bw)


def format_bandwidth(bits_per_second):
    """Format a bandwidth for people, e.g. ``'10 Gbit/s'``.

    Parameters
    ----------
    bits_per_second : float, str or array_like
        The bandwidth; a string is read by :func:`parse_bandwidth` first [bits/s].

    Returns
    -------
    str or numpy.ndarray
        The text for a scalar; an array of strings of the input's shape for an array.

    Examples
    --------
    >>> from scalemodel import format_bandwidth
    >>> format_bandwidth(10e9)
    '10 Gbit/s'
    >>> format_bandwidth([1e9, 25e9, 4e11]).tolist()
    ['1 Gbit/s', '25 Gbit/s', '400 Gbit/s']
    """
    if isinstance(bits_per_second, str) or (
            isinstance(bits_per_second, (list, tuple, np.ndarray))
            and any(isinstance(v, str) for v in np.asarray(bits_per_second,
                                                           dtype=object).reshape(-1))):
        bits_per_second = parse_bandwidth(bits_per_second, "bits_per_second")
    arr = as_array(bits_per_second, "bits_per_second")
    bad = ~(arr >= 0)  # NaN or negative; inf (an infeasible answer) and 0 have their words
    if bad.any():
        raise InvalidParameterError("bits_per_second", _first_bad(arr, bad), "must be >= 0 "
                                    "(inf for 'no line rate reaches it')")
    if arr.ndim == 0:
        return _format_one(float(arr))
    return np.array([_format_one(float(v)) for v in arr.reshape(-1)],
                    dtype=str).reshape(arr.shape)


_DURATION_RE = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[a-zA-Zµμ]*)\s*$")
_PER_UNIT = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "μs": 1e6,
             "ns": 1e9}  # units per second


def parse_duration(value, parameter: str = "alpha"):
    """Convert a time to seconds and check it is finite, >= 0 and at most a day
    (``MAX_DURATION``, 86400 s).

    Parameters
    ----------
    value : float, str or array_like
        A number of seconds, or a string with a unit: ``"5us"``, ``"0.1 ms"``, ``"2e-6"``
        (``s``, ``ms``, ``us``/``µs``, ``ns``) [s].
    parameter : str
        Name used in error messages [-].

    Returns
    -------
    float or numpy.ndarray
        The time [s]; a float for scalar input.

    Examples
    --------
    >>> from scalemodel.units import parse_duration
    >>> parse_duration("5us"), parse_duration(0.001)
    (5e-06, 0.001)
    """
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        per = _PER_UNIT.get(m.group("unit").lower() if m else None)
        if m is None or per is None:
            raise InvalidParameterError(parameter, value, "cannot read a time from this "
                                        "string", "write seconds (0.001) or a time with a "
                                        "unit: 5us, 0.1ms, 2s")
        seconds = float(m.group("num")) / per
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InvalidParameterError(parameter, value, "must be finite and >= 0 [s]")
    else:
        seconds = check_nonnegative(value, parameter)
    if isinstance(seconds, float):  # the common case, without numpy
        if seconds <= MAX_DURATION:
            return seconds
        over = np.asarray(True)
    else:
        over = np.asarray(seconds) > MAX_DURATION
    if over.any():
        raise InvalidParameterError(parameter, value if np.ndim(seconds) == 0 else
                                    _first_bad(np.asarray(seconds, float), over),
                                    f"must be at most {MAX_DURATION:g} s (a day)",
                                    "A latency or overhead is seconds: write 5e-6 or '5us'")
    return seconds


def scalar_converter(parameter: str, check=None):
    """An attrs converter that validates one number and returns it as a float.

    For fields such as ``alpha = attrs.field(converter=scalar_converter("alpha"))``:
    unlike ``converter=float``, ``None``, ``"x"``, ``True``, a complex number or an array
    raise :class:`~scalemodel.ParameterTypeError` or
    :class:`~scalemodel.InvalidParameterError` naming the field and the value.

    Parameters
    ----------
    parameter : str
        The field's name, used in messages [-].
    check : callable, optional
        ``check(value, parameter)`` validating and returning the value; default
        :func:`check_nonnegative` (finite and >= 0). :func:`parse_duration` also reads
        strings such as ``"5us"`` [-].

    Returns
    -------
    callable
        ``convert(value) -> float``.
    """
    check = check_nonnegative if check is None else check

    def convert(value):
        if isinstance(value, (list, tuple, np.ndarray)) and np.ndim(value) != 0:
            raise ParameterTypeError(parameter, value, "a single number")
        return float(check(value, parameter))

    convert.__name__ = f"convert_{parameter}"
    return convert


def broadcast_shape(**values):
    """The shape that array parameters broadcast to (numpy rules), or an error naming them.

    Parameters
    ----------
    **values
        The parameters by name, e.g. ``n=n, bw=bw`` (scalars, lists or arrays) [-].

    Returns
    -------
    tuple of int
        The common shape (``()`` when all are scalars).

    Raises
    ------
    InvalidParameterError
        When a parameter's shape does not broadcast with the ones before it; the message
        names both parameters and their shapes.

    Examples
    --------
    >>> from scalemodel.units import broadcast_shape
    >>> broadcast_shape(n=[16, 32, 64], bw=[[1e9], [1e10]])
    (2, 3)
    """
    shape = ()
    seen = []
    for name, value in values.items():
        s = np.shape(value)
        try:
            shape = np.broadcast_shapes(shape, s)
        except ValueError:
            before = ", ".join(f"{n} of shape {t}" for n, t in seen)
            raise InvalidParameterError(
                name, value, f"its shape {s} does not broadcast with {before}",
                "arrays combine by numpy's broadcasting rules: give equal shapes, or "
                "shapes such as (3, 1) and (4,) for a grid") from None
        seen.append((name, s))
    return tuple(shape)


_EXPECTED = "a number or an array of numbers"


def _reject_item(item, parameter, value, expected):
    """Raise for a list item that is not a real number (None, bool, str, complex...)."""
    if isinstance(item, (bool, np.bool_)) or not isinstance(
            item, (numbers.Real, np.number, decimal.Decimal)) \
            or isinstance(item, (complex, np.complexfloating)):
        raise ParameterTypeError(parameter, item, expected)


def _walk(items, parameter, value, expected, depth=0):
    for item in items:
        if isinstance(item, (list, tuple)) and depth < 32:
            _walk(item, parameter, value, expected, depth + 1)
        else:
            _reject_item(item, parameter, value, expected)


def as_array(value, parameter: str, expected: str = _EXPECTED):
    """Return ``value`` as a float array (scalars stay 0-d), rejecting non-numbers.

    ``None``, booleans (also ``np.array([True])``), strings, complex numbers and other
    objects raise :class:`~scalemodel.ParameterTypeError`; a number too large
    for a float raises :class:`~scalemodel.InvalidParameterError`.
    """
    if value is None or isinstance(value, (bool, np.bool_, str, bytes, complex,
                                           np.complexfloating)):
        raise ParameterTypeError(parameter, value, expected)
    if isinstance(value, (list, tuple)):
        _walk(value, parameter, value, expected)
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raise ParameterTypeError(parameter, value, expected + " (of one shape)") from None
    kind = raw.dtype.kind
    if kind == "O":
        for item in raw.reshape(-1):
            _reject_item(item, parameter, value, expected)
    elif kind == "b":
        raise ParameterTypeError(parameter, value, expected + ", not booleans")
    elif kind == "c":
        raise ParameterTypeError(parameter, value, expected + ", not complex numbers (the "
                                 "imaginary part would be lost)")
    elif kind not in "iuf":  # U/S (text), M/m (dates), V (records)
        raise ParameterTypeError(parameter, value, expected)
    try:
        arr = raw.astype(float)
    except (OverflowError, TypeError, ValueError):  # a Python int beyond 1.8e308
        raise InvalidParameterError(parameter, value, "too large for a float") from None
    return arr


def _scalar_or_array(arr: np.ndarray):
    return float(arr) if arr.ndim == 0 else arr


def _first_bad(arr: np.ndarray, bad: np.ndarray):
    return arr.reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])].item()


def _plain_number(value):
    """``value`` as a float when it is a plain Python ``int`` or ``float`` (not ``bool``),
    else None: the scalar fast path of the checks below (a few microseconds instead of
    the array path's tens; the answers are the same) [-]."""
    t = type(value)
    if t is float:
        return value
    if t is int:
        try:
            return float(value)
        except OverflowError:  # beyond 1.8e308: the array path says "too large"
            return None
    return None


def check_positive(value, parameter: str, unit: str = ""):
    """Check ``0 < value < inf`` element-wise; return a float or an array."""
    v = _plain_number(value)
    if v is not None and 0 < v < math.inf:
        return v
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr > 0))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad),
                                    f"must be finite and > 0{(' ' + unit) if unit else ''}")
    return _scalar_or_array(arr)


def check_nonnegative(value, parameter: str):
    """Check ``0 <= value < inf`` element-wise; return a float or an array."""
    v = _plain_number(value)
    if v is not None and 0 <= v < math.inf:
        return v
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr >= 0))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad), "must be finite and >= 0")
    return _scalar_or_array(arr)


def check_fraction(value, parameter: str):
    """Check ``0 < value <= 1`` element-wise (utilization, target scaling factor); a
    ``utilization`` must be at least :data:`MIN_UTILIZATION`."""
    low = MIN_UTILIZATION if parameter == "utilization" else 0.0
    v = _plain_number(value)
    if v is not None and 0 < v <= 1 and v >= low:
        return v
    arr = as_array(value, parameter)
    bad = ~((arr > 0) & (arr <= 1))  # NaN fails both comparisons
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad), "must be in (0, 1]")
    tiny = arr < low
    if tiny.any():
        raise InvalidParameterError(parameter, _first_bad(arr, tiny),
                                    f"must be at least {low:g}: the fraction of the line "
                                    "rate the transport achieves",
                                    "A smaller one gives infinite times; is it a slip?")
    return _scalar_or_array(arr)


def check_ratio(value, parameter: str = "compression"):
    """Check ``1 <= value < inf`` element-wise (a compression ratio)."""
    v = _plain_number(value)
    if v is not None and 1 <= v < math.inf:
        return v
    arr = as_array(value, parameter)
    bad = ~(np.isfinite(arr) & (arr >= 1))
    if bad.any():
        raise InvalidParameterError(parameter, _first_bad(arr, bad),
                                    "a compression ratio must be finite and >= 1 "
                                    "(1 means no compression)")
    return _scalar_or_array(arr)


_COUNT = f"must be an integer in [1, {MAX_COUNT}]"


def check_count(value, parameter: str = "n"):
    """Check that ``value`` is an integer in [1, :data:`MAX_COUNT`] (or an array of them);
    return an int or an int64 array."""
    if type(value) is int and 1 <= value <= MAX_COUNT:  # the common case, quickly
        return value
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        raise ParameterTypeError(parameter, value, "an integer >= 1")
    if isinstance(value, numbers.Integral):
        if not 1 <= value <= MAX_COUNT:
            raise InvalidParameterError(parameter, value, _COUNT)
        return int(value)
    arr = as_array(value, parameter, "an integer >= 1 or an array of them")
    finite = np.isfinite(arr)
    nonint = ~finite | (arr != np.round(np.where(finite, arr, 0)))
    if nonint.any():
        raise InvalidParameterError(parameter, _first_bad(arr, nonint), _COUNT)
    out = (arr < 1) | (arr > MAX_COUNT)
    if out.any():  # shown as written: n=[8, 0] is n=0 (not 0.0), n=[1e20] is 1e+20
        raw = np.asarray(value)
        shown = _first_bad(raw if raw.shape == arr.shape else arr, out)
        raise InvalidParameterError(parameter, shown, _COUNT)
    if arr.ndim == 0:
        if not isinstance(value, (np.integer, np.ndarray)):
            # a Python float such as 8.0 is not a worker count
            raise ParameterTypeError(parameter, value, "an integer >= 1")
        return int(arr)
    return arr.astype(np.int64)
