"""Reading a PyTorch profiler (Kineto) trace: the file, streamed, into compact columns.

Part of :mod:`scalemodel.calibrate.trace` (which re-exports the public names); this part
only reads. A trace is untrusted input of any size, so:

- only a regular file is opened (symbolic links are followed to one); a FIFO, a device
  such as ``/dev/zero`` or a folder is refused ("not a regular file") without waiting on
  it, and a file that starts with the gzip magic is decompressed on the fly;
- the JSON is parsed by `ijson <https://pypi.org/project/ijson/>`_ with its C backend
  (yajl), a streaming parser: time linear in the size of the text, whatever the text
  (one value of hundreds of megabytes included), and only one chunk of text
  (``_CHUNK`` bytes) and one event at a time are held; each event is handed to the
  :class:`_Collector`, which keeps the few numbers the analysis needs in typed arrays;
  of the metadata only ``distributedInfo`` and ``deviceProperties`` are kept;
- the nesting depth is bounded (``MAX_DEPTH``) by a vectorized scan of each chunk
  (brackets outside strings), so a deeply nested file is refused with a clear error
  before the parser builds it;
- a trailing comma before ``]`` or ``}`` (which the Chrome trace viewer accepts) is
  dropped before parsing; a UTF-8 byte-order mark at the start is skipped;
- no message quotes the file's content: a file that is not a trace may be anything.
"""

from __future__ import annotations

import decimal
import gzip
import json
import math
import os
import re
import stat
import sys
import zlib
from array import array

import numpy as np

from ..exceptions import ProfileFormatError

__all__ = ["MAX_DEPTH"]

MAX_DEPTH = 256
"""Deepest nesting of arrays and objects accepted in a trace [-] (Kineto writes 5)."""

_CHUNK = 1 << 20           # bytes of JSON text parsed at a time
_MAX_TOKEN = 1 << 20       # longest string accepted [bytes] (yajl, the parser, rescans a
#                            token cut by its buffer: longer ones would cost time
#                            quadratic in their length)
_MAX_NUMBER = 1000         # longest number accepted [characters] (a trace's have < 30;
#                            ijson 3.6's C backend crashes on an integer beyond Python's
#                            4300-digit limit when it makes Python ints)
_US = 1e-6                 # trace timestamps are in microseconds

_BACKENDS = frozenset({"nccl", "gloo", "ucc", "mpi", "xccl", "hccl", "rccl", "custom"})

# =========================================================================== the file

_QUOTE, _BSLASH, _OPEN, _CLOSE, _COMMA = 1, 2, 3, 4, 5
_CLASS = np.zeros(256, np.int8)
_CLASS[ord('"')] = _QUOTE
_CLASS[ord("\\")] = _BSLASH
_CLASS[[ord("["), ord("{")]] = _OPEN
_CLASS[[ord("]"), ord("}")]] = _CLOSE
_CLASS[ord(",")] = _COMMA
_CLASS_TABLE = _CLASS.tobytes()      # for bytes.translate (faster than a numpy lookup)
_NOT_BLANK = np.ones(256, np.int8)
_NOT_BLANK[[ord(" "), ord("\t"), ord("\n"), ord("\r")]] = 0
_YAJL_KIND = re.compile(r"(lexical|parse) error: ([A-Za-z0-9 ]{1,60})")
_NOT_JSON = re.compile(r"[:,\[]\s*(-?Infinity|NaN)\b")
"""A value JSON does not have (NaN, Infinity) in the excerpt yajl quotes."""


def _open_regular(source):
    """(binary stream, raw file) of a regular file, gunzipped when it starts with the gzip
    magic; refuses a FIFO, a device or a folder without waiting on it."""
    if "\x00" in os.fsdecode(source):  # os.open would raise a bare ValueError
        raise ProfileFormatError(source, "<file>", "cannot be opened: the path contains a "
                                 "NUL byte (\\x00), which no file name can hold")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; refused just below
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ProfileFormatError(source, "<file>", "no such file") from None
    except OSError as exc:
        raise ProfileFormatError(source, "<file>",
                                 f"cannot be opened: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else
                    "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                    "a socket" if stat.S_ISSOCK(mode) else "special")
            raise ProfileFormatError(source, "<file>", f"not a regular file (it is {kind}); "
                                     "give the trace file itself")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    try:
        magic = fh.read(2)
        fh.seek(0)
    except OSError as exc:
        fh.close()
        raise ProfileFormatError(source, "<file>",
                                 f"cannot be read: {exc.strerror or exc}") from None
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb"), fh
    return fh, fh


_MAX_DUR = 86400.0
"""Longest event accepted: a day [s]; a longer one is corrupt and counted malformed."""

_META_KEYS = (b"distributedInfo", b"deviceProperties")
_KEYS = (b"traceEvents",) + _META_KEYS
_KEY_LENGTHS = np.array(sorted({len(k) for k in _KEYS}))
_MAX_META = 8 << 20        # largest metadata value kept [bytes] (a trace's: a few kB)
_KEY_BEFORE = re.compile(rb'[{,][ \t\n\r]*"([A-Za-z]{1,32})"[ \t\n\r]*:[ \t\n\r]*\Z')


class _Scan:
    """The structure of a JSON text read chunk by chunk, vectorized: the nesting depth
    (refused beyond ``MAX_DEPTH``), trailing commas (dropped), and, in a document that is
    an object, where the values of its keys ``traceEvents``, ``distributedInfo`` and
    ``deviceProperties`` lie (the latter two are kept). It classifies the quotes,
    backslashes, brackets and commas of each chunk: a quote is escaped when an odd run of
    backslashes precedes it; brackets and commas count outside strings only."""

    def __init__(self, source, max_depth=MAX_DEPTH, top=True):
        self.source = source
        self.max_depth = max_depth
        self.top = top           # follow the keys of the document (an object)
        self.depth = 0           # nesting depth at the end of what was scanned
        self.in_string = False   # the scanned text ends inside a string
        self.backslashes = 0     # length of the run of backslashes that ends it
        self.offset = 0          # bytes of text scanned before this chunk
        self.comma = False       # a comma, outside strings, held back from the last chunk
        self.tail = b""          # the last bytes scanned (a key cut by a chunk boundary)
        self.capture = None      # (key, bytearray): a metadata value being kept
        self.meta = {}           # key -> raw JSON text of its (last) value
        self.events = None       # "[" or "{": how the traceEvents value opened
        self.string_start = 0    # where the string open at the end began [bytes]
        self.gap = 0             # non-blank bytes since the last special outside strings

    def feed(self, data: bytes) -> bytes:
        """Scan the next chunk; returns the text to parse (trailing commas removed, a
        comma at the end held back until what follows it is known)."""
        self.lead = 0            # bytes of data already scanned (a comma held back)
        if self.comma:
            data = b"," + data
            self.offset -= 1
            self.comma = False
            self.lead = 1
        cls = np.frombuffer(data.translate(_CLASS_TABLE), np.int8)
        idx = np.flatnonzero(cls)
        start = self.offset
        self.offset += len(data)
        if idx.size == 0:
            if data:
                self.backslashes = 0
            if self.in_string:
                if self.offset - self.string_start > _MAX_TOKEN:
                    raise self._too_long("a string", self.string_start)
            else:
                self.gap += _nonblank(data)
                if self.gap > _MAX_NUMBER + 1:
                    raise self._too_long("a number", start)
            if self.capture is not None:
                self._keep(data[self.lead:])
            self.tail = (self.tail + data)[-64:]
            return data
        c = cls[idx]
        quote = c == _QUOTE
        is_bs = c == _BSLASH
        if is_bs.any() or self.backslashes:
            quote &= ~self._escaped(idx, is_bs, len(data))
        else:
            self.backslashes = 0
        n_quotes = np.cumsum(quote)
        outside = ((n_quotes + self.in_string) & 1) == 0   # quotes: after they toggle
        step = np.zeros(idx.size, np.int64)
        opens = (c == _OPEN) & outside
        closes = (c == _CLOSE) & outside
        step[opens] = 1
        step[closes] = -1
        depth = self.depth + np.cumsum(step)
        if int(depth.max()) > self.max_depth:
            at = start + int(idx[np.argmax(depth > self.max_depth)])
            raise ProfileFormatError(self.source, "<json>",
                                     f"nests more than {self.max_depth} arrays or objects "
                                     f"deep (at byte {at} of the JSON text); a trace nests "
                                     "5; the file is not a trace or is corrupt")
        self._tokens(data, idx, quote, outside, start)
        if self.top and (self.capture is not None or (opens & (depth == 2)).any()):
            self._top(data, idx, c, quote, n_quotes, opens, closes, depth)
        self.depth = max(int(depth[-1]), 0)
        self.in_string = bool((n_quotes[-1] + self.in_string) & 1)
        self.tail = (self.tail + data[-64:])[-64:]
        return self._commas(data, idx, c, outside)

    def _too_long(self, what, at):
        limit = (f"{_MAX_TOKEN >> 20} MB" if what == "a string"
                 else f"{_MAX_NUMBER} characters")
        return ProfileFormatError(self.source, "<json>",
                                  f"holds {what} longer than {limit} (at byte {at} of the "
                                  "JSON text); a trace's are short; the file is not a "
                                  "trace or is corrupt")

    def _tokens(self, data, idx, quote, outside, start):
        """Refuse a string longer than ``_MAX_TOKEN`` or a number longer than
        ``_MAX_NUMBER`` (before the parser sees all of it)."""
        q = idx[quote] + start
        if self.in_string and q.size and q[0] - self.string_start > _MAX_TOKEN:
            raise self._too_long("a string", self.string_start)   # ends here
        if len(data) > _MAX_TOKEN:     # a string within the chunk may be too long
            opens, closes = q[1::2] if self.in_string else q[0::2], \
                q[2::2] if self.in_string else q[1::2]
            n = min(opens.size, closes.size)
            long = np.flatnonzero(closes[:n] - opens[:n] > _MAX_TOKEN)
            if long.size:
                raise self._too_long("a string", int(opens[long[0]]))
        if (q.size + self.in_string) % 2 == 1:     # a string is open at the end
            if q.size:
                self.string_start = int(q[-1])
            if self.offset - self.string_start > _MAX_TOKEN:
                raise self._too_long("a string", self.string_start)
        # between two special characters outside strings: at most one number or literal
        first = int(idx[0])
        if not self.in_string and self.gap + first > _MAX_NUMBER + 1 and \
                self.gap + _nonblank(data[:first]) > _MAX_NUMBER + 1:
            raise self._too_long("a number", start)
        gap = np.diff(idx)
        gaps = (np.flatnonzero(outside[:-1] & (gap - 1 > _MAX_NUMBER + 1))
                if gap.size and int(gap.max()) - 1 > _MAX_NUMBER + 1 else ())
        for k in list(gaps):
            if _nonblank(data[int(idx[k]) + 1:int(idx[k + 1])]) > _MAX_NUMBER + 1:
                raise self._too_long("a number", start + int(idx[k]))
        self.gap = _nonblank(data[int(idx[-1]) + 1:]) if outside[-1] else 0
        if self.gap > _MAX_NUMBER + 1:
            raise self._too_long("a number", start + int(idx[-1]))

    def _escaped(self, idx, is_bs, size):
        """Which special characters follow an odd run of backslashes."""
        n = idx.size
        adjacent = np.empty(n, bool)
        adjacent[0] = idx[0] == 0
        adjacent[1:] = idx[1:] == idx[:-1] + 1
        after_bs = np.empty(n, bool)
        after_bs[0] = self.backslashes > 0
        after_bs[1:] = is_bs[:-1]
        after_bs &= adjacent
        k = np.arange(n)
        run_start = np.maximum.accumulate(np.where(is_bs & ~after_bs, k, -1))
        # length of the run of backslashes ending at each backslash (a run that goes on
        # from the last chunk counts its carried length)
        run = np.where(run_start >= 0, k - run_start + 1, k + 1 + self.backslashes)
        prev_run = np.empty(n, np.int64)
        prev_run[0] = self.backslashes
        prev_run[1:] = run[:-1]
        self.backslashes = int(run[-1]) if is_bs[-1] and idx[-1] == size - 1 else 0
        return after_bs & (prev_run % 2 == 1)

    def _top(self, data, idx, c, quote, n_quotes, opens, closes, depth):
        """Follow the values of the document's keys that are arrays or objects: note how
        ``traceEvents`` opens, keep the text of the metadata values the analysis uses."""
        ends = np.flatnonzero(closes & (depth == 1))     # a key's value closes
        if self.capture is not None:
            if ends.size:
                self._keep(data[self.lead:int(idx[ends[0]]) + 1])
                self._done()
            else:
                self._keep(data[self.lead:])
                return
        if self.depth > 1 and not ends.size:
            return
        first = np.flatnonzero(opens & (depth == 2))     # a key's value opens
        if not first.size:
            return
        # the key before each: the last two unescaped quotes before the bracket
        q = idx[quote]
        nq = n_quotes[first]
        inside = nq >= 2
        lengths = np.full(first.size, -1)
        lengths[inside] = q[nq[inside] - 1] - q[nq[inside] - 2] - 1
        maybe = np.flatnonzero(~inside | np.isin(lengths, _KEY_LENGTHS))
        for m in maybe.tolist():
            k = int(first[m])
            pos = int(idx[k])
            if inside[m]:
                key = data[int(q[nq[m] - 2]) + 1:int(q[nq[m] - 1])]
            else:
                found = _KEY_BEFORE.search(self.tail + data[:pos])
                key = found.group(1) if found else None
            if key not in _KEYS:
                continue
            if key == b"traceEvents":
                if self.events is not None:  # a second one: the parser would merge them
                    self._twice(key)
                self.events = chr(data[pos])
                continue
            if key.decode() in self.meta:
                self._twice(key)
            after = ends[ends > k]
            if after.size:
                self.capture = (key, bytearray())
                self._keep(data[pos:int(idx[after[0]]) + 1])
                self._done()
            else:
                self.capture = (key, bytearray())
                self._keep(data[pos:])
                return

    def _twice(self, key):
        raise ProfileFormatError(self.source, key.decode(), "appears twice at the top of "
                                 "the trace (the reader would merge or keep one without a "
                                 "word): the file is corrupt or was edited")

    def _keep(self, piece):
        key, buf = self.capture
        buf += piece
        if len(buf) > _MAX_META:
            raise ProfileFormatError(self.source, key.decode(),
                                     f"is more than {_MAX_META >> 20} MB of JSON (a trace's "
                                     "has a few kB): the file is corrupt or not a trace")

    def _done(self):
        key, buf = self.capture
        self.meta[key.decode()] = bytes(buf)
        self.capture = None

    def _commas(self, data, idx, c, outside):
        """Drop commas (outside strings) that only blanks separate from a ``]`` or ``}``;
        hold back a comma that only blanks follow in this chunk."""
        structural = outside & (c != _BSLASH)
        s_idx = idx[structural]
        s_c = c[structural]
        if s_idx.size == 0:
            return data
        cand = np.flatnonzero((s_c[:-1] == _COMMA) & (s_c[1:] == _CLOSE))
        drop = []
        if cand.size:
            a, b = s_idx[cand], s_idx[cand + 1]
            gap = b - a - 1
            short = gap <= 64
            width = int(gap[short].max(initial=0))
            blank = np.ones(a.size, bool)
            if width:   # the bytes of the short gaps, gathered as a table
                at = a[short, None] + 1 + np.arange(width)
                inside = at < b[short, None]
                codes = np.frombuffer(data, np.uint8)[np.minimum(at, len(data) - 1)]
                blank[short] = ~(_NOT_BLANK[codes].astype(bool) & inside).any(axis=1)
            for j in np.flatnonzero(~short).tolist():  # each over 64 bytes long
                blank[j] = not data[a[j] + 1:b[j]].strip(b" \t\n\r")
            drop = a[blank].tolist()
        last = int(s_idx[-1])
        hold = s_c[-1] == _COMMA and not data[last + 1:].strip(b" \t\n\r")
        if not drop and not hold:
            return data
        parts, prev = [], 0
        for a in drop:
            parts.append(data[prev:a])
            prev = a + 1
        if hold:
            parts.append(data[prev:last])
            self.comma = True
        else:
            parts.append(data[prev:])
        return b"".join(parts)


def _nonblank(data: bytes) -> int:
    """Bytes of ``data`` that are not JSON blanks [-]."""
    return (len(data) - data.count(b" ") - data.count(b"\n") - data.count(b"\t")
            - data.count(b"\r"))


def _read_chunk(raw, source):
    try:
        return raw.read(_CHUNK)
    except EOFError:
        raise ProfileFormatError(source, "<gzip>",
                                 "the gzip stream is truncated (it ends before its "
                                 "end-of-stream marker): copy the file again") from None
    except (OSError, zlib.error) as exc:
        if isinstance(raw, gzip.GzipFile):
            raise ProfileFormatError(source, "<gzip>", "not a readable gzip stream (corrupt)") \
                from None
        raise ProfileFormatError(source, "<file>",
                                 f"cannot be read: {exc.strerror or exc}") from None


_MAX_RATIO = 200
"""A gzip-compressed trace may decompress to at most this many times its size (beyond
:data:`_MIN_LIMIT`): a trace's JSON compresses 8 to 30 times, a decompression bomb of
blanks 1000 times [-]."""

_MIN_LIMIT = 64 * 2**20
"""Decompressed bytes any gzip trace may have, whatever its ratio [bytes]."""


class _Text:
    """The JSON text of a trace file as a file object for the parser (``read``): read,
    decompressed, scanned (:class:`_Scan`), trailing commas dropped."""

    def __init__(self, raw, source, first):
        self.raw = raw
        self.source = source
        self.scan = _Scan(source, top=first[:1] == b"{")
        self.pending = first
        self.bytes_read = len(first)
        self.start = self.end = 0      # where the last text scanned lies [bytes]
        self.done = False
        self.buf, self.pos = b"", 0
        self.limit = math.inf
        if isinstance(raw, gzip.GzipFile):  # decompressed: at most _MAX_RATIO x the file
            size = os.fstat(raw.fileobj.fileno()).st_size
            self.limit = max(_MAX_RATIO * size, _MIN_LIMIT)

    def read(self, size=-1):
        if self.pos >= len(self.buf):
            self.buf, self.pos = self._next(), 0
        if size is None or size < 0:
            size = len(self.buf)
        piece = self.buf[self.pos:self.pos + size]
        self.pos += len(piece)
        return piece

    def _next(self):
        """The next piece of scanned text (b"" at the end)."""
        while not self.done:
            chunk, self.pending = self.pending, None
            if chunk is None:
                chunk = _read_chunk(self.raw, self.source)
                self.bytes_read += len(chunk)
                if self.bytes_read > self.limit:
                    raise ProfileFormatError(
                        self.source, "<gzip>", f"decompresses to more than "
                        f"{self.limit / 2**20:.0f} MB, over {_MAX_RATIO} times its "
                        "compressed size (a trace's JSON compresses about 10 times): a "
                        "decompression bomb or not a trace")
            if chunk:
                text = self.scan.feed(chunk)
            else:                      # the end: a comma held back stays (an error)
                text, self.done = (b"," if self.scan.comma else b""), True
            if text or self.done:
                self.start, self.end = self.end, self.end + len(text)
                return text
        return b""


class _BigInteger(Exception):
    """An integer beyond 64 bits: yajl's integers overflow; read again with Python's."""


def _json_error(source, exc, text):
    """A ProfileFormatError for the parser's error, without the excerpt of the file that
    yajl's message carries."""
    if isinstance(exc, ValueError) and "digits" in str(exc):   # Python's int limit
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        return ProfileFormatError(source, "<json>", "holds an integer of more than "
                                  f"{limit} digits (between bytes "
                                  f"{text.start} and {text.end} of the JSON text); the file "
                                  "is not a trace or is corrupt")
    m = _YAJL_KIND.search(str(exc))
    kind = f"{m.group(1)} error: {m.group(2).strip()}" if m else "unreadable"
    bad = _NOT_JSON.search(str(exc))  # the excerpt yajl quotes, around the error
    if bad:
        return ProfileFormatError(source, "<json>", f"holds {bad.group(1)} (between bytes "
                                  f"{text.start} and {text.end} of the JSON text), which is "
                                  "not JSON (Python's json.dump writes it unless "
                                  "allow_nan=False): the trace was edited or is corrupt")
    if text.done and "premature EOF" in kind:
        return ProfileFormatError(source, "<json>", "the JSON text ends before its last "
                                  "value is closed: the file is truncated (copy it again)")
    return ProfileFormatError(source, "<json>", f"not valid JSON ({kind}, between bytes "
                              f"{text.start} and {text.end} of the JSON text); the file "
                              "is not a trace or is corrupt")


def _events(source, meta, stats, big_integers=False):
    """Yield the trace events of a Chrome-trace document (the object form, with
    ``traceEvents`` and metadata keys, or the array form, events only); the metadata the
    analysis uses goes into ``meta``, and ``stats`` gets ``form``, ``events_open`` (how
    the ``traceEvents`` value opened, None without one) and ``bytes_read``."""
    import ijson

    raw, fh = _open_regular(source)
    try:
        first = _read_chunk(raw, source)
        n = len(first)
        if first.startswith(b"\xef\xbb\xbf"):      # a UTF-8 byte-order mark
            first = first[3:]
        while first and not first.lstrip(b" \t\n\r"):
            first = _read_chunk(raw, source)
            n += len(first)
        first = first.lstrip(b" \t\n\r")
        if not first:
            raise ProfileFormatError(source, "<top>", "not a Kineto/Chrome trace: the file "
                                     "is empty")
        form = chr(first[0])
        if form not in "{[":
            raise ProfileFormatError(source, "<top>", "not a Kineto/Chrome trace: the file "
                                     "does not start with a JSON object or array (is it "
                                     "JSON?)")
        text = _Text(raw, source, first)
        events = ijson.items(text, "item" if form == "[" else "traceEvents.item",
                             use_float=not big_integers, buf_size=_CHUNK)
        try:
            yield from events
        except ProfileFormatError:
            raise
        except (ijson.JSONError, ValueError, UnicodeError) as exc:
            if not big_integers and "integer overflow" in str(exc):
                raise _BigInteger() from None
            raise _json_error(source, exc, text) from None
        for key, value in text.scan.meta.items():
            try:   # the value's text without trailing commas
                meta[key] = json.loads(_Scan(source, top=False).feed(value))
            except (ValueError, RecursionError):
                raise ProfileFormatError(source, key, "not valid JSON") from None
        stats.update(form=form, events_open=text.scan.events,
                     bytes_read=text.bytes_read + n - len(first))
    finally:
        raw.close()
        fh.close()


# =========================================================================== collection

_CATS = {"kernel": 0, "gpu_memcpy": 1, "memcpy": 1, "gpu_memset": 1, "memset": 1,
         "cuda_runtime": 2, "runtime": 2, "cuda_driver": 2, "cpu_op": 3, "operator": 3,
         "user_annotation": 3}
_KERNEL_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                "Process Group Name", "Process Group Description")
_ANN_ARGS = ("Input Dims", "Input type")
# CPU span codes
_C_OTHER, _C_BACKWARD, _C_OPTIM, _C_COMM, _C_ISSUE, _C_STEP = 0, 1, 2, 3, 4, 5


class _Collector:
    """The numbers of one rank's trace that the analysis needs, in compact columns."""

    def __init__(self, source):
        self.source = source
        self.meta = {}
        self.threads = {}
        self.kernel_names = {}
        self.cpu = {k: array("d") for k in ("ts", "dur")}
        self.cpu_tid = array("q")
        self.cpu_code = array("b")
        self.cpu_name = array("q")
        self.cpu_names = {}
        self.steps = []        # (ts, dur, tid, number)
        self.ann = []          # (ts, dur, tid, backend, op, args)
        self.rpc = []          # (ts, dur, tid, args)
        self.c10d = []         # (ts, dur, tid, name)
        self.gpu = {k: array("d") for k in ("ts", "dur")}
        self.gpu_lane = array("q")
        self.gpu_corr = array("q")
        self.gpu_name = array("q")
        self.comm = []         # NCCL kernels: dict
        self.rt = {k: array("d") for k in ("ts", "dur")}
        self.rt_corr = array("q")
        self.rt_tid = array("q")
        self.lanes = {}
        self.device_of_lane = {}
        self.events = 0
        self.malformed = 0
        self.base = None

    def _tid(self, ev):
        key = (ev.get("pid"), ev.get("tid"))
        t = self.threads.get(key)
        if t is None:
            t = self.threads[key] = len(self.threads)
        return t

    def add(self, ev):
        """Keep what the analysis needs of one event; count it malformed if it cannot be
        read (a field of the wrong type)."""
        self.events += 1
        if ev.__class__ is not dict or ev.get("ph") != "X":
            return
        try:
            self._add(ev)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
            self.malformed += 1

    def _add(self, ev):
        cat = ev.get("cat")
        kind = _CATS.get(cat)
        if kind is None:
            if cat.__class__ is not str:
                return
            kind = _CATS.get(cat.lower())
            if kind is None:
                return
        try:
            ts, dur = ev["ts"], ev["dur"]  # a complete event without one: malformed
        except KeyError:
            self.malformed += 1
            return
        # JSON numbers only: text ("dur": "123") or a boolean is no time a profiler
        # writes (float() took both)
        if ts.__class__ not in _NUMBERS or dur.__class__ not in _NUMBERS:
            self.malformed += 1
            return
        ts = float(ts)
        if self.base is None:
            self.base = ts
        # relative to the first event: the difference of close floats is exact, so
        # sub-microsecond digits survive (absolute µs since 1970 need 51 bits)
        ts = (ts - self.base) * _US
        dur = float(dur) * _US
        if not (math.isfinite(ts) and math.isfinite(dur)) or not 0 <= dur <= _MAX_DUR:
            self.malformed += 1  # a ProfilerStep of 1e300 us made a step time of 1e294 s
            return
        name = ev.get("name")
        if name.__class__ is not str:
            name = str(name)
        if kind == 3:
            self._cpu(ev, name, ts, dur)
        elif kind == 2:
            args = ev.get("args")
            if args.__class__ is not dict:
                return
            corr = args.get("correlation")
            if corr is None:
                return
            # read before any column grows: an unhashable pid / tid or a correlation id
            # beyond int64 left the columns of unequal length (IndexError later)
            corr, tid = _int64(corr), self._tid(ev)
            self.rt["ts"].append(ts)
            self.rt["dur"].append(dur)
            self.rt_corr.append(corr)
            self.rt_tid.append(tid)
        else:
            args = ev.get("args")
            if args.__class__ is not dict:
                args = {}
            dev = args.get("device", ev.get("pid"))
            key = (dev, args.get("stream", ev.get("tid")))
            lane = self.lanes.get(key)
            if lane is None:
                lane = self.lanes[key] = len(self.lanes)
                self.device_of_lane[lane] = dev
            corr = args.get("correlation")
            corr = -1 if corr is None else _int64(corr)
            if kind == 0 and "nccl" in name.lower():
                self.comm.append({"ts": ts, "dur": dur, "lane": lane, "corr": corr,
                                  "name": name, "device": dev,
                                  **{k: args[k] for k in _KERNEL_ARGS if k in args}})
                return
            nid = self.kernel_names.get(name)
            if nid is None:
                nid = self.kernel_names[name] = len(self.kernel_names)
            self.gpu["ts"].append(ts)
            self.gpu["dur"].append(dur)
            self.gpu_lane.append(lane)
            self.gpu_corr.append(corr)
            self.gpu_name.append(nid)

    def _cpu(self, ev, name, ts, dur):
        tid = self._tid(ev)
        code = _C_OTHER
        if name.startswith("autograd::engine::evaluate_function"):
            code = _C_BACKWARD
        elif name.startswith("Optimizer."):
            code = _C_OPTIM
        elif name.startswith("ProfilerStep#"):
            code = _C_STEP
            try:
                number = int(name[len("ProfilerStep#"):])
            except ValueError:
                number = -1
            self.steps.append((ts, dur, tid, number))
        elif name == "record_param_comms":
            code = _C_ISSUE
            args = ev.get("args") or {}
            self.rpc.append((ts, dur, tid, {k: args[k] for k in _KERNEL_ARGS if k in args}))
        elif name.startswith("c10d::"):
            code = _C_ISSUE
            self.c10d.append((ts, dur, tid, name))
        else:
            head, sep, tail = name.partition(":")
            if sep and head in _BACKENDS and tail and not tail.startswith(":"):
                code = _C_COMM
                args = ev.get("args") or {}
                self.ann.append((ts, dur, tid, head, tail,
                                 {k: args[k] for k in _ANN_ARGS if k in args}))
        nid = self.cpu_names.get(name)
        if nid is None:
            nid = self.cpu_names[name] = len(self.cpu_names)
        self.cpu["ts"].append(ts)
        self.cpu["dur"].append(dur)
        self.cpu_tid.append(tid)
        self.cpu_code.append(code)
        self.cpu_name.append(nid)


_NUMBERS = frozenset({float, int, decimal.Decimal})
"""Classes a JSON number is read as (Decimal: fractions when integers beyond int64 make
the reader keep every number exact)."""


def _int64(value) -> int:
    """``int(value)`` when an int64 column holds it; OverflowError (a malformed event)
    otherwise [-]."""
    v = int(value)
    if not -2**63 <= v < 2**63:
        raise OverflowError(f"{v} does not fit an int64")
    return v


def _read_events(source, big_integers):
    col = _Collector(source)
    stats = {}
    add = col.add
    for ev in _events(source, col.meta, stats, big_integers):
        add(ev)
    return col, stats


def _collect(path) -> _Collector:
    """Read one trace file into a :class:`_Collector`."""
    source = os.fspath(path)
    try:
        col, stats = _read_events(source, False)
    except _BigInteger:   # rare: numbers as Python ints (and fractions as Decimal)
        col, stats = _read_events(source, True)
    col.bytes_read = stats["bytes_read"]
    col.file_bytes = os.path.getsize(source)
    if stats["form"] == "{":
        if stats["events_open"] is None and not col.events:
            raise ProfileFormatError(source, "traceEvents", "missing: this JSON is not a "
                                     "Kineto (torch.profiler) trace; export one with "
                                     "prof.export_chrome_trace() or "
                                     "tensorboard_trace_handler")
        if stats["events_open"] == "{":
            raise ProfileFormatError(source, "traceEvents", "must be a list of events")
    return col
