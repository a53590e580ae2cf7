r"""Read the output of NVIDIA's nccl-tests (``all_reduce_perf`` and friends).

Most GPU clusters already have nccl-tests results; :func:`read_nccl_tests` turns their
standard output into sizes and times, and :meth:`NcclTestsResult.fit` into a
:class:`~scalemodel.calibrate.fit.CollectiveFit`. The layouts read:

- current releases, with ``redop`` and ``root`` columns and ``#wrong``::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    27.76   37.78   66.11      0    27.49   38.15   66.76      0

- older releases, with ``error`` instead of ``#wrong``, without ``root`` and (2019 and
  before, all-gather) without ``redop``; columns are read from the right of each row,
  so missing middle columns do not matter;
- lines prefixed by MPI (``[1,0]<stdout>:``, ``[0]``), and ``N/A`` cells (NaN).

The world size is the number of distinct ranks in the ``#  Rank ... device`` lines (or
``nGpus`` x ``nThread`` of the first header line). Sizes in the table are nccl-tests'
:math:`S`, the whole buffer, which for all-gather and reduce-scatter is :math:`n` times
what each rank contributes; :attr:`NcclTestsResult.nbytes` converts to bytes per rank, the
unit of :func:`scalemodel.collective_time`. Times are converted from µs to s, and the
bandwidths from GB/s (:math:`10^9` bytes/s) to bits/s (:math:`\times 8\cdot 10^9`).

nccl-tests' bandwidths: ``algbw`` :math:`= S/t` and ``busbw`` = ``algbw`` times a bus
factor (``BUS_FACTOR``): all-reduce :math:`2(n-1)/n`, all-gather, reduce-scatter and
all-to-all :math:`(n-1)/n`, broadcast, reduce and send/recv 1 (``doc/PERFORMANCE.md``;
before mid-2020 the all-gather and reduce-scatter ``algbw`` already held the
:math:`(n-1)/n`, nccl-tests issue #45). With the models of
``scalemodel.calibrate.fit.COLLECTIVE_MODELS``, the fitted bandwidth
:math:`B` of eq. :eq:`fit-model` is the large-message ``busbw`` in bits/s.

Runs across nodes with several GPUs each are fitted with their topology
(``fit(topology=...)``, eq. :eq:`fit-model-topology`): NCCL's flat ring makes a node's
NICs carry what each GPU's link carries, so with one NIC per node :math:`B` is still the
``busbw`` and with :math:`\nu` NICs the ``busbw`` over :math:`\nu`; the latency is then
that of a step across nodes. A run inside one node (all its GPUs, or fewer) is the
intra-node link (:func:`scalemodel.calibrate.fit.intra_node_topology`). The command
``python -m scalemodel.calibrate from-nccl-tests`` does both with ``--gpus-per-node``
(or ``--nodes``) and one log of each.

Format references: NVIDIA/nccl-tests ``README.md``, ``doc/PERFORMANCE.md`` and
``src/all_gather.cu`` (2019 header); outputs quoted in NVIDIA/nccl-tests issues #107
(older layout) and #119, and in aws/aws-k8s-tester PR #503 (``[1,0]<stdout>:`` prefixes).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import Path

import attrs
import numpy as np

from .._jsonfile import read_text_file
from ..exceptions import (CalibrationError, CalibrationWarning, InvalidParameterError,
                          ProfileFormatError)

__all__ = ["NcclTestsResult", "read_nccl_tests", "BUS_FACTOR"]

_BINARIES = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
             "reduce_scatter_perf": "reduce_scatter", "broadcast_perf": "broadcast",
             "sendrecv_perf": "send_recv", "reduce_perf": "reduce", "alltoall_perf": "alltoall"}
_PER_RANK_DIVISOR = {"all_gather", "reduce_scatter"}

#: nccl-tests' bus factor busbw / algbw per collective, as a function of the ranks n
BUS_FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "alltoall": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
              "reduce": lambda n: 1.0, "send_recv": lambda n: 1.0}
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bdevice\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_MPI_PREFIX = re.compile(r"^\[\d+(?:,\d+)*\](?:<std(?:out|err)>:)?\s?")


@attrs.frozen(eq=False)
class NcclTestsResult:
    """One nccl-tests table.

    Parameters
    ----------
    collective : str
        ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``, ... [-].
    world_size : int
        Ranks (GPUs) in the test [workers].
    size : numpy.ndarray
        nccl-tests' size column S [bytes].
    time_out_of_place, time_in_place : numpy.ndarray
        Times [s] (NaN where the table says N/A).
    algbw, busbw : numpy.ndarray
        Out-of-place algorithm and bus bandwidths as printed, converted from GB/s
        [bits/s].
    avg_busbw : float or None
        The footer's average bus bandwidth [bits/s].
    devices : tuple of str
        Device names of the ranks, by rank [-].
    source : str
        Where the text came from [-].
    """

    collective: str
    world_size: int
    size: np.ndarray
    time_out_of_place: np.ndarray
    time_in_place: np.ndarray
    algbw: np.ndarray
    busbw: np.ndarray
    avg_busbw: float | None
    devices: tuple
    source: str

    @property
    def nbytes(self) -> np.ndarray:
        """Message size per rank [bytes] (S / n for all-gather and reduce-scatter)."""
        if self.collective in _PER_RANK_DIVISOR:
            return self.size / self.world_size
        return self.size.copy()

    def seconds(self, which="best") -> np.ndarray:
        """Time per size [s].

        Parameters
        ----------
        which : str
            ``"best"`` (the smaller of out-of-place and in-place, where both exist),
            ``"out_of_place"`` or ``"in_place"`` [-].
        """
        if which == "out_of_place":
            return self.time_out_of_place.copy()
        if which == "in_place":
            return self.time_in_place.copy()
        if which != "best":
            raise InvalidParameterError("which", which,
                                        "'best', 'out_of_place' or 'in_place'")
        if np.all(np.isnan(self.time_in_place)):
            return self.time_out_of_place.copy()
        return np.fmin(self.time_out_of_place, self.time_in_place)

    def fit(self, line_rate=None, *, min_size=None, which="best", **kwargs):
        """Fit latency and bandwidth to this table with
        :func:`scalemodel.calibrate.fit.fit_collective` (right collective, ``n`` =
        world size, sizes per rank).

        Parameters
        ----------
        line_rate : float or str, optional
            NIC line rate per rank, for the utilization [bits/s].
        min_size : float, optional
            Drop sizes below this many bytes per rank (tiny messages take NCCL's LL
            protocol, whose latency differs) [bytes].
        which : str
            Times to fit, see :meth:`seconds` [-].
        **kwargs
            Passed to ``fit_collective`` (``algorithm``, ``loss``, ``confidence``,
            ``topology`` for a run across nodes, ...).

        Returns
        -------
        CollectiveFit
            The fit; sizes of 0 bytes and N/A times are left out.
        """
        from .fit import COLLECTIVE_MODELS, fit_collective
        if self.collective not in COLLECTIVE_MODELS:
            raise CalibrationError(f"{self.source}: no model to fit {self.collective!r}; "
                                   f"fits exist for {', '.join(COLLECTIVE_MODELS)}")
        if self.world_size < 2:
            raise CalibrationError(f"{self.source}: world size {self.world_size}: one rank "
                                   "communicates nothing; run nccl-tests over several "
                                   "GPUs (-g, or mpirun -np)")
        m, t = self.nbytes, self.seconds(which)
        keep = np.isfinite(t) & (t > 0) & (m > 0)
        if min_size is not None:
            keep &= m >= float(min_size)
        return fit_collective(m[keep], t[keep], collective=self.collective, n=self.world_size,
                              line_rate=line_rate, **kwargs)


_LOG = "nccl-tests log"
"""What a malformed log is called in its errors (not a profile)."""

def read_nccl_tests(source, *, collective=None) -> NcclTestsResult:
    """Parse nccl-tests output.

    Parameters
    ----------
    source : str or os.PathLike
        A file path, or the text itself (anything with a newline is taken as text) [-].
    collective : str, optional
        The collective, when neither the text (the binary's name in the command echo or
        nccl-tests' ``# Collective test starting:`` line) nor the file name says it
        (``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``,
        ``"send_recv"``) [-]. When given, it wins.

    Returns
    -------
    NcclTestsResult
        The out-of-place and in-place times and bandwidths per size.

    Raises
    ------
    ProfileFormatError
        No table, a data row before the column header, a truncated row or a cell that is
        not a number (the message names the line), no world size.
    CalibrationError
        The collective cannot be told.

    Notes
    -----
    Columns are read from the right of each row (``time algbw busbw #wrong`` out of
    place, then the same in place), so a blank ``redop`` cell (older all-gather) or the
    missing ``root`` column of older releases do not shift them. MPI prefixes such as
    ``[1,0]<stdout>:`` are stripped. The world size is the number of distinct ranks in
    the ``#  Rank`` lines.
    """
    text, name, hint = _source_text(source)
    if collective is not None and collective not in _BINARIES.values():
        raise InvalidParameterError("collective", collective,
                                    f"one of {', '.join(sorted(set(_BINARIES.values())))}")
    scan = _scan(text, name, collective)
    if scan.header is None or not scan.rows:
        raise ProfileFormatError(name, "<table>", "no nccl-tests table found (expected a "
                                 "'# size count type ... time algbw busbw' header and rows)",
                                 kind=_LOG)
    size, t_out, t_in, alg, bus = _table_columns(scan.header, scan.rows, name)
    found = _collective_of(scan.found, hint, name)
    world = len(scan.ranks) or scan.n_gpus
    if not world:
        raise ProfileFormatError(name, "<header>", "no '# Rank ... device' lines and no "
                                 "nGpus: cannot tell the world size", kind=_LOG)
    devices = scan.devices
    return NcclTestsResult(collective=found, world_size=int(world), size=np.asarray(size),
                           time_out_of_place=np.asarray(t_out),
                           time_in_place=np.asarray(t_in), algbw=np.asarray(alg),
                           busbw=np.asarray(bus), avg_busbw=scan.avg,
                           devices=tuple(devices[k] for k in sorted(devices)), source=name)


def _source_text(source):
    """The text to parse, the name for messages and the file name (a hint of the
    collective; empty for text)."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source):
        path = Path(source)
        text = read_text_file(path, what="nccl-tests output")  # regular files only
        return text, str(path), path.name
    if isinstance(source, str):
        return source, "<text>", ""
    raise InvalidParameterError("source", source, "a path or the output text")


@attrs.define
class _Scan:
    """What one pass over the lines found: the collective (None: not yet told), ranks
    and their devices, nGpus x nThread, the column header, data rows and average busbw."""

    found: str | None
    ranks: set = attrs.Factory(set)
    devices: dict = attrs.Factory(dict)
    n_gpus: int | None = None
    header: list | None = None
    rows: list = attrs.Factory(list)
    avg: float | None = None


def _scan(text, name, collective):
    """One pass over the lines (MPI prefixes stripped): the header comments, the data
    rows with their line numbers, and the binary name telling the collective."""
    scan = _Scan(found=collective)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _MPI_PREFIX.sub("", raw.rstrip())
        if not line.strip():
            continue
        if scan.found is None:
            for binary, coll in _BINARIES.items():
                if binary in line:
                    scan.found = coll
                    break
        stripped = line.lstrip()
        if stripped.startswith("#"):
            _read_comment(scan, stripped, name, lineno)
            continue
        tok = line.split()
        if not tok or not tok[0].removeprefix("-").isdigit():
            continue  # NCCL INFO lines, the command echo and the like (a negative size
            # is a data row, refused by _table_columns)
        if scan.header is None:
            raise ProfileFormatError(name, f"line {lineno}",
                                     "a data row before the column header (# size count "
                                     "type ... time algbw busbw); is this nccl-tests output?",
                                     kind=_LOG)
        scan.rows.append((lineno, tok))
    return scan


def _another_run(name, lineno):
    raise ProfileFormatError(name, f"line {lineno}", "the file holds several nccl-tests "
                             "runs (another one starts here, after the first one's table: "
                             "appended with tee -a or >>?); give one run per file",
                             kind=_LOG)


def _read_comment(scan, stripped, name, lineno):
    """Read a ``#`` line into ``scan``: nGpus x nThread, a ``# Rank`` line, the column
    header, or the footer's average bus bandwidth (GB/s -> bits/s); one of the first
    three after the data rows starts another run: refused."""
    body = stripped[1:].strip()
    if scan.rows and (body.startswith("nThread") or _RANK_LINE.match("#" + stripped[1:])
                      or {"size", "time", "busbw"} <= set(body.split())):
        _another_run(name, lineno)
    if body.startswith("nThread"):
        tok = body.split()
        try:
            scan.n_gpus = int(tok[tok.index("nGpus") + 1]) * int(tok[tok.index("nThread") + 1])
        except (ValueError, IndexError):
            pass
    m = _RANK_LINE.match("#" + stripped[1:])
    if m:
        scan.ranks.add(int(m.group(1)))
        scan.devices[int(m.group(1))] = m.group(2).strip()
    tok = body.split()
    if "size" in tok and "time" in tok and "busbw" in tok:
        scan.header = tok
    if body.lower().startswith("avg bus bandwidth"):
        try:
            scan.avg = float(body.split(":", 1)[1].split()[0]) * 8e9
        except (IndexError, ValueError):
            raise ProfileFormatError(name, f"line {lineno}",
                                     "expected '# Avg bus bandwidth : <GB/s>'", kind=_LOG) \
                from None


MAX_SIZE = 1e15
"""Largest message size accepted in a table: a petabyte, far beyond any GPU buffer
(a bigger one is a corrupt or edited log) [bytes]."""

MAX_TIME_US = 86400e6
"""Longest time accepted in a table: a day, in nccl-tests' microseconds [us]."""


def _cell(tok, i, name, lineno, what, hi=None, unit=""):
    """Cell ``i`` of a row as a number (NaN for N/A), finite, >= 0 and at most ``hi``;
    raises naming the line and column (a NaN, infinite or negative number is a corrupt
    or edited log, never silently left out of the fit)."""
    v = tok[i]
    if v.upper() == "N/A":
        return np.nan
    try:
        x = float(v)
    except ValueError:
        raise ProfileFormatError(name, f"line {lineno}",
                                 f"column {what!r} should be a number, got {v!r}",
                                 kind=_LOG) from None
    if not (math.isfinite(x) and x >= 0) or (hi is not None and x > hi):
        limit = "" if hi is None else f" and at most {hi:g}{unit}"
        raise ProfileFormatError(name, f"line {lineno}",
                                 f"column {what!r} should be finite, >= 0{limit} (N/A where "
                                 f"not measured), got {v!r}; is the log corrupt or edited?",
                                 kind=_LOG)
    return x


def _table_columns(header, rows, name):
    """Sizes [bytes], out-of-place and in-place times [s], algbw and busbw [bits/s] of
    the rows, read from the right of each row."""
    times = [i for i, h in enumerate(header) if h == "time"]
    # offsets from the end of the row: robust to blank or missing middle columns
    k_out = len(header) - times[0]
    k_in = len(header) - times[1] if len(times) > 1 else None
    size, t_out, t_in, alg, bus = [], [], [], [], []
    for lineno, tok in rows:
        if len(tok) < k_out + 2:
            raise ProfileFormatError(name, f"line {lineno}",
                                     f"has {len(tok)} columns; expected at least "
                                     f"{k_out + 2} (size count ... time algbw busbw "
                                     "...); truncated?", kind=_LOG)
        size.append(_cell(tok, 0, name, lineno, "size", MAX_SIZE, " bytes"))
        t_out.append(_cell(tok, -k_out, name, lineno, "time", MAX_TIME_US, " us") * 1e-6)
        alg.append(_cell(tok, -k_out + 1, name, lineno, "algbw") * 8e9)
        bus.append(_cell(tok, -k_out + 2, name, lineno, "busbw") * 8e9)
        t_in.append(_cell(tok, -k_in, name, lineno, "time (in-place)", MAX_TIME_US, " us") * 1e-6
                    if k_in else np.nan)
    _warn_wrong(header, rows, name)
    return size, t_out, t_in, alg, bus


def _warn_wrong(header, rows, name):
    """A CalibrationWarning naming the lines whose ``#wrong`` cells count wrong results
    (nccl-tests' check of the reduced data, run with ``-c 1``): the times are still
    fitted, but such a run had a fault."""
    offsets = [len(header) - i for i, h in enumerate(header) if h == "#wrong"]
    bad = [lineno for lineno, tok in rows
           if any(len(tok) >= k and tok[-k].isdigit() and int(tok[-k]) > 0 for k in offsets)]
    if bad:
        lines = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5
                                                 else "")
        warnings.warn(CalibrationWarning(
            f"{name}: nccl-tests counted wrong results (#wrong > 0) on line(s) {lines}: "
            "the reduced data were corrupted, so that run had a fault (a bad link, GPU or "
            "NCCL setting); its times are fitted as they are, but measure again once "
            "nccl-tests reports 0"), stacklevel=4)


def _collective_of(found, hint, name):
    """The collective: as found in the text, else from the file name; raises when
    neither tells."""
    if found is None:
        for binary, coll in _BINARIES.items():
            if binary.replace("_perf", "") in hint:
                found = coll
                break
    if found is None:
        raise CalibrationError(f"{name}: cannot tell which collective this table measured "
                               "(no *_perf binary name in it); pass collective='all_reduce' "
                               "(or all_gather, ...), on the command line --collective "
                               "all_reduce")
    return found
