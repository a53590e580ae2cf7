"""One safe reader for the JSON files users hand to scalemodel.

Profile and cluster files come from users and from other machines, so they are read as
untrusted input: only a regular file is opened (a FIFO or a device named ``*.json`` would
block or never end), at most ``max_bytes`` are read, the bytes must be UTF-8, the
nesting depth is bounded (a deeply nested file would exhaust the parser's stack).
``NaN`` and ``Infinity`` are read as Python writes them, and an integer longer than
Python converts (4300 digits) as a float, so that the check of the field that holds one names it (Python's own
limit on converting long digit strings would raise a bare ``ValueError``). A byte-order
mark is skipped; a key given twice in one object is refused (``json`` would keep the last
value without a word). Every failure raises
:class:`~scalemodel.ProfileFormatError` naming the file and the problem.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import sys
import warnings

import numpy as np

from .exceptions import ModelWarning, ProfileFormatError

__all__ = ["read_json_file", "check_keys", "MAX_BYTES", "MAX_DEPTH"]

MAX_BYTES = 64 * 1024 * 1024
"""Largest file read by default [bytes] (the largest shipped profile has 49 kB)."""

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted by default [-] (the formats use 4)."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def read_text_file(path, *, what: str, max_bytes: int = MAX_BYTES) -> str:
    """Read one text file given by a user: a regular file (a FIFO or a folder is refused,
    never waited on), at most ``max_bytes``, UTF-8.

    Parameters
    ----------
    path : str or os.PathLike
        The file [path].
    what : str
        What the file is, for messages [-].
    max_bytes : int
        Largest accepted size [bytes].

    Returns
    -------
    str
        The text.

    Raises
    ------
    ProfileFormatError
        Not a regular file, unreadable, too large or not UTF-8; names the file.
    """
    source = os.fspath(path)

    def fail(field, problem):
        return _failure(source, what, field, problem)

    raw = _read_bytes(source, fail, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise fail("<file>", f"is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                   f"{exc.start} (line {line})") from None


def _failure(source, what, field, problem):
    """The error of a file: a profile's as ever (``profile x: field f: workload profile:
    ...``), another file's under its own kind (``run list x: field f: ...``), not
    'profile' (an nccl-tests log or a runs CSV is none)."""
    if "profile" in what:
        return ProfileFormatError(source, field, f"{what}: {problem}")
    return ProfileFormatError(source, field, problem, kind=what)


def _read_bytes(source, fail, max_bytes):
    if "\x00" in os.fsdecode(source):  # os.open would raise a bare ValueError
        raise fail("<file>", "cannot be opened: the path contains a NUL byte (\\x00), which "
                   "no file name can hold")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; checked just below
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise fail("<file>", f"cannot be opened: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise fail("<file>", f"is {kind}; give a regular file")
        if st.st_size > max_bytes:
            raise fail("<file>", f"is {st.st_size} bytes, more than the limit of {max_bytes}")
        chunks, total = [], 0
        while True:  # read at most max_bytes + 1: the file may grow while it is read
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise fail("<file>", f"is more than the limit of {max_bytes} bytes")
    except OSError as exc:
        raise fail("<file>", f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_json_file(path, *, what: str, max_bytes: int = MAX_BYTES,
                   max_depth: int = MAX_DEPTH):
    """Read and parse one JSON file given by a user.

    Parameters
    ----------
    path : str or os.PathLike
        The file [path].
    what : str
        What the file is, for messages (``"workload profile"``, ``"cluster profile"``) [-].
    max_bytes : int
        Largest accepted size [bytes].
    max_depth : int
        Deepest accepted nesting of arrays and objects [-].

    Returns
    -------
    object
        The parsed JSON value.

    Raises
    ------
    ProfileFormatError
        The path is not a regular file, cannot be read, is larger than ``max_bytes``, is
        not UTF-8, nests deeper than ``max_depth``, is not valid JSON or gives a key twice
        in one object; the message names the file and the problem (field ``"<file>"`` or
        ``"<json>"``).
    """
    source = os.fspath(path)

    def fail(field, problem):
        return _failure(source, what, field, problem)

    text = read_text_file(path, what=what, max_bytes=max_bytes)
    text = text.removeprefix("\ufeff")  # a byte-order mark (Notepad), as a runs CSV may
    depth = nesting_depth(text)
    if depth > max_depth:
        raise fail("<json>", f"nests {depth} levels deep, more than the limit of {max_depth}")
    try:  # NaN and Infinity parse (Python writes them); each field's check names them
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise fail("<json>", f"key {exc.args[0]!r} appears twice in one object (with "
                   f"{_short(exc.args[1])} and {_short(exc.args[2])}): the reader would "
                   "keep the last without a word; keep the one you mean") from None
    except json.JSONDecodeError as exc:
        raise fail("<json>", f"not valid JSON (truncated or corrupt?): {exc.msg} at line "
                   f"{exc.lineno} column {exc.colno}") from None
    except RecursionError:  # pragma: no cover - max_depth keeps well below the limit
        raise fail("<json>", "nests too deeply") from None


class _DuplicateKey(Exception):
    """A key twice in one JSON object: (key, first value, second value)."""


def _unique_keys(pairs):
    """An object's pairs as a dict; a key given twice raises :class:`_DuplicateKey`
    (``json`` keeps the last value silently)."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen:
                raise _DuplicateKey(k, seen[k], v)
            seen[k] = v
    return out


def _short(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _parse_int(text: str):
    """An integer of the file; one longer than Python converts (4300 digits by default,
    ``sys.get_int_max_str_digits``) becomes a float (inf), so that the check of the field
    that holds it names the field and the value instead of a bare ``ValueError``."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit and len(text.lstrip("-")) > limit:
        return float(text)
    return int(text)


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[`` and ``{`` in JSON ``text``, outside strings [-]."""
    bare = _STRING.sub("", text)
    codes = np.frombuffer(bare.encode("utf-8"), dtype=np.uint8)
    step = (np.isin(codes, (ord("["), ord("{"))).astype(np.int64)
            - np.isin(codes, (ord("]"), ord("}"))).astype(np.int64))
    return int(np.cumsum(step).max(initial=0))


def check_keys(source, data, known, *, kind, field="", kept=()):
    """Check an object's keys against those its format defines.

    A key that misspells one of ``known`` (``"ceilng"`` for ``"ceiling"``) is refused: its
    value would otherwise be dropped without a word and the default used instead. Any
    other unknown key is refused too, unless ``kept`` is given (a format that keeps foreign
    keys, as a cluster file keeps them in ``extra``): then the keys in ``kept`` (those the
    library itself writes) pass and the rest pass with a
    :class:`~scalemodel.exceptions.ModelWarning` saying that nothing uses them.

    Parameters
    ----------
    source : str
        The file (or ``"<object>"``), for the message [-].
    data : dict
        The object read [-].
    known : collection of str
        The keys the format defines [-].
    kind : str
        What the object is, for the message (``"workload profile"``) [-].
    field : str
        Where the object sits in the file (``"tensors"``), empty at the top [-].
    kept : collection of str or None
        Foreign keys the library writes itself; ``()`` refuses every unknown key, None
        keeps every one (with the warning) [-].

    Raises
    ------
    ProfileFormatError
        An unknown key that misspells a known one (the message suggests it), or any
        unknown key when ``kept`` is empty.

    Examples
    --------
    >>> check_keys("c.json", {"ceilng": 1e9}, {"ceiling", "alpha"}, kind="cluster profile",
    ...            kept=None)
    Traceback (most recent call last):
    ...
    scalemodel.exceptions.ProfileFormatError: profile c.json: field 'ceilng': cluster profile: unknown key; did you mean 'ceiling'? (its value would be ignored)
    """
    prefix = f"{field}." if field else ""
    unknown = sorted(str(k) for k in data if k not in known)
    foreign = []
    for key in unknown:
        if kept is not None and key in kept:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
        if close:
            raise ProfileFormatError(source, prefix + key, f"{kind}: unknown key; did you "
                                     f"mean {close[0]!r}? (its value would be ignored)")
        foreign.append(key)
    if foreign and kept == ():
        raise ProfileFormatError(source, prefix + foreign[0], f"{kind}: unknown key; the "
                                 f"known ones: {', '.join(sorted(known))}")
    if foreign:
        warnings.warn(f"{kind} {source}: {', '.join(repr(prefix + k) for k in foreign)} "
                      f"{'is not a key' if len(foreign) == 1 else 'are not keys'} of the "
                      f"format: kept in extra, used by nothing", ModelWarning, stacklevel=4)
