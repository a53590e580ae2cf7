r"""The overlapped backward pass in closed form.

Buckets :math:`k = 1 \dots K` (in communication order) are ready at :math:`R_k` [s] after
backward starts, and each occupies the one communication channel (FIFO) for
:math:`c_k = a_k + b_k x` seconds, where :math:`a_k` [s] is its latency and overhead,
:math:`b_k` [bit] the bits on the wire and :math:`x = 1/(u B r)` [s/bit] (see
:mod:`scalemodel.collectives`). A bucket starts when it is ready and the previous one
has finished:

.. math::
   :label: fifo

   F_k = \max(F_{k-1}, R_k) + c_k, \qquad F_0 = -\infty .

Unrolling this max-plus recurrence gives its closed form

.. math::
   :label: closed-form

   F_K = \max_{1 \le j \le K} \Big( R_j + \sum_{i=j}^{K} c_i \Big)

(proof by induction: :math:`F_k = \max(F_{k-1} + c_k, R_k + c_k)`, and addition
distributes over max). With backward ending at :math:`T_b`, forward time :math:`T_f`
and update :math:`T_u`, one iteration on :math:`n` workers takes

.. math::
   :label: iteration

   T_n(x) = T_f + \max\Big(T_b,\; \max_j \big(R_j + A_j + B_j x\big)\Big) + T_u,
   \qquad A_j = \sum_{i \ge j} a_i, \quad B_j = \sum_{i \ge j} b_i .

Each term is a straight line in :math:`x`, so :math:`T_n` is the **upper envelope** of
:math:`K + 1` lines: convex, piecewise linear and non-decreasing in :math:`x`. The
envelope has few pieces (the hull of the lines), so evaluating it at many :math:`x` is a
binary search plus one multiply-add, and its inverse is exact:
:math:`T_n(x) \le L \iff x \le \min_{j: B_j > 0} (L - R_j - A_j)/B_j` (when every
line with :math:`B_j = 0` is at most :math:`L`).

Reference: S. Shi, X. Chu, B. Li, "A DAG Model of Synchronous Stochastic Gradient
Descent in Distributed Deep Learning", ICPADS 2018, arXiv:1805.03812.
"""

from __future__ import annotations

import bisect
import functools
import math
import operator

import attrs
import numpy as np

__all__ = ["overlap_lines", "UpperEnvelope", "comm_finish_time"]


@attrs.frozen(eq=False)
class OverlapLines:
    """The lines of equation :eq:`iteration` for one worker count.

    Index 0 is the end of backward (slope 0); index ``j + 1`` is "bucket j and all after
    it". ``latency``, ``overhead``, ``fixed`` and ``bits`` split each line's communication
    into its parts (tail sums) so that callers can say what binds.

    Attributes
    ----------
    intercept : numpy.ndarray
        :math:`T_b` and :math:`R_j + A_j` [s].
    slope : numpy.ndarray
        0 and :math:`B_j` [bit].
    latency, overhead, fixed, bits : numpy.ndarray
        Tail sums of the buckets' latency [s], overhead [s], fixed costs [s] and wire
        bits [bit] (zero for index 0).
    ready : numpy.ndarray
        0 (placeholder) and :math:`R_j` [s].
    """

    intercept: np.ndarray
    slope: np.ndarray
    latency: np.ndarray
    overhead: np.ndarray
    bits: np.ndarray
    ready: np.ndarray
    fixed: np.ndarray


def _tail_sum(v):
    return np.cumsum(np.asarray(v, dtype=float)[::-1])[::-1]


def overlap_lines(ready, latency, overhead, bits, backward_time, fixed=0.0) -> OverlapLines:
    """Lines whose upper envelope is the end of backward-and-communication, eq. :eq:`iteration`.

    Parameters
    ----------
    ready : array_like
        Bucket ready times, communication order [s].
    latency, overhead : array_like
        Each bucket's latency and overhead time on the channel [s].
    bits : array_like
        Each bucket's bits on the wire before compression [bit].
    backward_time : float
        End of the backward pass [s].
    fixed : float or array_like
        Each bucket's fixed costs on the channel (per-collective and per-iteration
        overheads of :mod:`scalemodel.cluster`) [s].
    """
    ready = np.asarray(ready, dtype=float)
    if ready.ndim == 1 and all(type(v) is np.ndarray and v.shape == ready.shape
                               for v in (latency, overhead, bits)) and \
            (np.ndim(fixed) == 0 or (type(fixed) is np.ndarray and fixed.shape == ready.shape)):
        return _lines_at_once(ready, latency, overhead, bits, float(backward_time), fixed)
    lat, ovh, bits = _tail_sum(latency), _tail_sum(overhead), _tail_sum(bits)
    fix = _tail_sum(np.broadcast_to(np.asarray(fixed, dtype=float), ready.shape))
    zero = np.zeros(1)
    return OverlapLines(
        intercept=np.concatenate(([float(backward_time)], ready + lat + ovh + fix)),
        slope=np.concatenate((zero, bits)),
        latency=np.concatenate((zero, lat)),
        overhead=np.concatenate((zero, ovh)),
        bits=np.concatenate((zero, bits)),
        ready=np.concatenate((zero, ready)),
        fixed=np.concatenate((zero, fix)),
    )


def _lines_at_once(ready, latency, overhead, bits, backward_time, fixed):
    """:func:`overlap_lines` for one-dimensional parts of the ready times' shape: the four
    tail sums in one cumulative sum (each row summed in the same order as alone), the
    seven fields rows of one array (numpy's per-call cost dominates for tens of buckets)."""
    k = len(ready)
    tails = np.empty((4, k))
    tails[0] = latency[::-1]
    tails[1] = overhead[::-1]
    tails[2] = bits[::-1]
    tails[3] = fixed[::-1] if np.ndim(fixed) else fixed
    # rows: latency, overhead, bits, fixed, intercept, slope, ready; column 0 the end of
    # backward (zeros but its intercept)
    out = np.zeros((7, k + 1))
    out[:4, 1:] = np.cumsum(tails, axis=1)[:, ::-1]
    lat, ovh, wire, fix = out[0], out[1], out[2], out[3]
    icpt = out[4]
    np.add(ready, lat[1:], out=icpt[1:])
    icpt[1:] += ovh[1:]
    icpt[1:] += fix[1:]
    icpt[0] = backward_time
    out[5] = wire
    out[6, 1:] = ready
    return OverlapLines(intercept=icpt, slope=out[5], latency=lat, overhead=ovh, bits=wire,
                        ready=out[6], fixed=fix)


def _lines_stacked(ready, latency, overhead, bits, backward_time):
    """:func:`_lines_at_once` (no fixed costs) of several line sets of ``k`` buckets each
    at once, one per row of the ``(C, k)`` arrays and of ``backward_time`` ``(C,)``: each
    row summed and added in the same order as alone (bit for bit the same lines), in one
    pass (the corners of a fitted cluster's intervals: numpy's per-call cost dominates).
    Returns the ``C`` :class:`OverlapLines`."""
    c, k = ready.shape
    tails = np.zeros((c, 4, k))
    tails[:, 0] = latency[:, ::-1]
    tails[:, 1] = overhead[:, ::-1]
    tails[:, 2] = bits[:, ::-1]
    out = np.zeros((c, 7, k + 1))
    out[:, :4, 1:] = np.cumsum(tails, axis=2)[:, :, ::-1]
    icpt = out[:, 4]
    np.add(ready, out[:, 0, 1:], out=icpt[:, 1:])
    icpt[:, 1:] += out[:, 1, 1:]
    icpt[:, 1:] += out[:, 3, 1:]
    icpt[:, 0] = backward_time
    out[:, 5] = out[:, 2]
    out[:, 6, 1:] = ready
    return [OverlapLines(intercept=o[4], slope=o[5], latency=o[0], overhead=o[1], bits=o[2],
                         ready=o[6], fixed=o[3]) for o in out]


def _lines_shared(ready, latency, overhead, bits, backward_time):
    """:func:`_lines_stacked` of line sets that share their collective costs: the ready
    times ``(C, k)`` and ``backward_time`` ``(C,)`` one row per set, ``latency``,
    ``overhead`` and ``bits`` ``(k,)`` for all. The tail sums are made once (summed in
    the same order as alone) and the ``C`` :class:`OverlapLines` share them; each set's
    intercepts are added in the same order as alone (bit for bit the same lines)."""
    c, k = ready.shape
    tails = np.zeros((4, k))
    tails[0] = latency[::-1]
    tails[1] = overhead[::-1]
    tails[2] = bits[::-1]
    shared = np.zeros((5, k + 1))  # latency, overhead, bits, fixed (zeros), slope
    shared[:4, 1:] = np.cumsum(tails, axis=1)[:, ::-1]
    shared[4] = shared[2]
    lat, ovh, wire, fix, slope = shared
    out = np.zeros((2, c, k + 1))  # intercepts, ready times (0 first)
    icpt = out[0]
    np.add(ready, lat[1:], out=icpt[:, 1:])
    icpt[:, 1:] += ovh[1:]
    icpt[:, 1:] += fix[1:]
    icpt[:, 0] = backward_time
    out[1, :, 1:] = ready
    return [OverlapLines(intercept=i, slope=slope, latency=lat, overhead=ovh, bits=wire,
                         ready=rd, fixed=fix) for i, rd in zip(out[0], out[1])]


def _with_fixed(lines, fix, intercept=None):
    """``lines`` with the tail sums ``fix`` of fixed costs [s] added to their intercepts and
    kept as their ``fixed`` (``attrs.evolve`` without its per-call introspection);
    ``intercept`` [s] is that sum when already made."""
    return OverlapLines(intercept=lines.intercept + fix if intercept is None else intercept,
                        slope=lines.slope,
                        latency=lines.latency, overhead=lines.overhead, bits=lines.bits,
                        ready=lines.ready, fixed=fix)


_WALK_STEPS = 12


def _walk(c, m):
    """Positions of the lines on top for x >= 0, for lines whose slopes ``m`` rise and
    intercepts ``c`` fall (the first is on top at 0): from each, the next is the one that
    crosses it first (the steepest on ties). None when more than :data:`_WALK_STEPS`
    lines are on top (the hull scan is then faster)."""
    pos, last, hull = 0, len(c) - 1, [0]
    with np.errstate(over="ignore", divide="ignore"):
        for _ in range(_WALK_STEPS):
            if pos == last:
                return hull
            xs = (c[pos] - c[pos + 1:]) / (m[pos + 1:] - m[pos])
            pos = last - int(np.argmin(xs[::-1]))
            hull.append(pos)
    return hull if pos == last else None


def _drop_under_chords(c, m, order):
    """``order`` (slopes rising, intercepts falling) without the lines on or below the
    chord of their two neighbours (nowhere the highest), all such at once, a few times,
    while more than 16 are left."""
    for _ in range(6):
        if len(order) <= 16:
            break
        co, mo = c[order], m[order]
        useless = ((co[:-2] - co[2:]) * (mo[1:-1] - mo[:-2])
                   <= (co[:-2] - co[1:-1]) * (mo[2:] - mo[:-2]))
        if not useless.any():
            break
        order = order[np.concatenate(([True], ~useless, [True]))]
    return order


def _scan_hull(lines, cl, ml):
    """The upper hull of ``lines`` (indices into the intercepts ``cl`` and slopes ``ml``,
    Python floats; slopes rising, intercepts falling), by one monotone scan [-]."""
    hull: list[int] = []
    for j in lines:
        cj, mj = cl[j], ml[j]
        if hull and ml[hull[-1]] == mj:
            hull.pop()  # same slope, lower (or equal) intercept: never above j
        while len(hull) >= 2:
            i1, i2 = hull[-2], hull[-1]
            # i2 is useless if j overtakes i1 no later than i2 does
            if (cl[i1] - cj) * (ml[i2] - ml[i1]) <= (cl[i1] - cl[i2]) * (mj - ml[i1]):
                hull.pop()
            else:
                break
        hull.append(j)
    return hull


_SMALL = 64  # at most this many lines: built in Python floats (UpperEnvelope._small)


def _envelopes(intercept, slope):
    """``[UpperEnvelope(intercept[i], slope[i]) for each row i]`` of the ``(R, K)``
    arrays, the same envelopes; a few lines a row: the rows' sorts in one call (numpy's
    per-call cost dominates there) and each row's construction in Python floats
    (:meth:`UpperEnvelope._small`) [-]."""
    c = np.asarray(intercept, dtype=float)
    m = np.asarray(slope, dtype=float)
    if c.ndim != 2 or m.shape != c.shape or not 0 < c.shape[1] <= _SMALL:
        return [UpperEnvelope(a, b) for a, b in zip(c, m)]
    cl, ml = c.tolist(), m.tolist()
    orders = np.lexsort((c, m)).tolist()  # along each row, as each row's own
    out = []
    for i, (ci, mi) in enumerate(zip(cl, ml)):
        env = UpperEnvelope.__new__(UpperEnvelope)
        if math.isfinite(sum(ci) + sum(mi)):  # as UpperEnvelope.__init__ chooses
            env._small(c[i], m[i], ci, mi, orders[i])
        else:
            env.__init__(c[i], m[i])
        out.append(env)
    return out


_KEPT = 32
"""Answers of :meth:`UpperEnvelope.max_x_below` and its gap kept per envelope [-]."""


class UpperEnvelope:
    r"""Upper envelope :math:`E(x) = \max_j (c_j + m_j x)` of lines with :math:`m_j \ge 0`,
    on :math:`x \ge 0`.

    Built once (convex-hull trick, :math:`O(K \log K)`), then evaluated at any number of
    points with a binary search over its breakpoints.

    Parameters
    ----------
    intercept : array_like
        :math:`c_j` [s].
    slope : array_like
        :math:`m_j`, non-negative [s per unit of x].
    """

    def __init__(self, intercept, slope):
        c = np.asarray(intercept, dtype=float)
        m = np.asarray(slope, dtype=float)
        if c.ndim == 1 and m.shape == c.shape and 0 < len(c) <= _SMALL:
            cl, ml = c.tolist(), m.tolist()
            if math.isfinite(sum(cl) + sum(ml)):  # every value finite
                self._small(c, m, cl, ml)
                return
        # slope ascending; for equal slopes the highest intercept last, so it wins
        order = np.lexsort((c, m))
        # on x >= 0 a line is never above one whose slope and intercept are both at least
        # as large: keep only the lines whose intercept beats every later one (vectorized)
        cs = c[order]
        keep = np.ones(len(order), dtype=bool)
        keep[:-1] = cs[:-1] > np.maximum.accumulate(cs[::-1])[::-1][1:]
        order = order[keep]
        # now slopes rise and intercepts fall. Few lines on top among many (DDP's hundreds
        # of buckets): walk the envelope from x = 0, each next line the first to cross
        wrapped = _walk(c[order], m[order]) if len(order) > 16 else None
        if wrapped is not None:
            self._finish(c, m, order[wrapped])
            return
        order = _drop_under_chords(c, m, order)
        cl, ml = c[order].tolist(), m[order].tolist()  # Python floats: a fast exact scan
        hull = _scan_hull(range(len(order)), cl, ml)
        self._finish(c, m, order[np.asarray(hull, dtype=np.int64)])

    def _small(self, c, m, cl, ml, order=None):
        """The construction above for a few finite lines, in Python floats (the same
        order, the same lines kept, the same hull and breaks: numpy's per-call cost
        dominates there); ``order`` is ``np.lexsort((c, m))`` as a list when already
        made."""
        if order is None:
            order = np.lexsort((c, m)).tolist()
        kept, top = [], -math.inf  # intercepts beating every later one
        for i in reversed(order):
            if cl[i] > top:
                kept.append(i)
                top = cl[i]
        kept.reverse()
        if len(kept) > 16:  # the walk and the chord filter of the general case
            wrapped = _walk(c[kept], m[kept])
            if wrapped is not None:
                self._finish(c, m, np.asarray(kept, dtype=np.int64)[wrapped])
                return
            kept = _drop_under_chords(c, m, np.asarray(kept, dtype=np.int64)).tolist()
        hull = _scan_hull(kept, cl, ml)
        breaks = []
        for i1, i2 in zip(hull, hull[1:]):
            dc, dm = cl[i1] - cl[i2], ml[i2] - ml[i1]
            if not (math.isfinite(dc) and 0.0 < dm < math.inf):  # as numpy would have it
                self._finish(c, m, np.asarray(hull, dtype=np.int64))
                return
            breaks.append(dc / dm)
        inorder = len(breaks) < 2 or all(a <= b for a, b in zip(breaks, breaks[1:]))
        if inorder:
            first = bisect.bisect_right(breaks, 0.0)
        else:  # rounding: numpy's search, as _finish
            first = int(np.searchsorted(np.array(breaks), 0.0, side="right"))
        hull = hull[first:]
        hc, hm = [cl[j] for j in hull], [ml[j] for j in hull]
        if len(breaks) == first or inorder:
            self._py = (hc, hm, breaks[first:], hull)  # the arrays made when first read
            return
        self.index = np.array(hull, dtype=np.int64)
        self.intercept = np.array(hc)
        self.slope = np.array(hm)
        self.breaks = np.array(breaks[first:], dtype=float)

    def _finish(self, c, m, hull_arr):
        """Keep the hull lines ``hull_arr`` (slopes rising) that matter on x >= 0."""
        hc, hm = c[hull_arr], m[hull_arr]
        with np.errstate(over="ignore"):  # tiny slope differences: a break at +inf is right
            breaks = (hc[:-1] - hc[1:]) / (hm[1:] - hm[:-1])
        # keep only the pieces that matter on x >= 0
        first = int(np.searchsorted(breaks, 0.0, side="right"))
        self.index = hull_arr[first:]
        self.intercept = hc[first:]
        self.slope = hm[first:]
        self.breaks = breaks[first:]

    @classmethod
    def of_convex(cls, intercept, slope, breaks):
        r"""The envelope of line 0, a constant (slope 0), and lines 1..P that are the pieces
        of a convex piecewise-linear function on :math:`x \ge 0` with slopes rising,
        line :math:`p+2` taking over from line :math:`p+1` at ``breaks[p]`` (ascending,
        > 0), as :func:`~scalemodel.sharding.sum_of_maxima` makes them. No hull is
        built: the constant cuts the chain once, where the chain first rises above it.
        Falls back to the general construction when the chain is not as promised.

        Parameters
        ----------
        intercept, slope : array_like
            :math:`c_j`, :math:`m_j` of the P + 1 lines, the constant first [s], [s/unit].
        breaks : array_like
            The chain's P - 1 breakpoints, ascending [unit].
        """
        if type(intercept) is list and type(slope) is list and type(breaks) is list:
            env = cls._convex_py(intercept, slope, breaks)  # Python floats: no numpy
            if env is not None:
                return env
        c = np.asarray(intercept, dtype=float)
        m = np.asarray(slope, dtype=float)
        br = np.asarray(breaks, dtype=float)
        k = len(c) - 1  # pieces of the chain
        if (k < 1 or len(br) != k - 1 or m[0] != 0.0 or not (m[1:] >= 0).all()
                or (k > 1 and not (br[0] > 0 and (br[1:] >= br[:-1]).all()
                                   and (m[2:] > m[1:-1]).all()))):
            return cls(c, m)
        floor = c[0]
        if c[1] >= floor:  # the chain is on top from x = 0 (ties: the chain, as the hull)
            first, head = 1, None
        elif m[-1] <= 0.0:  # a flat chain below the constant
            first, head = None, None
        else:  # the constant, until the piece that crosses it
            with np.errstate(over="ignore"):  # subnormal slopes: a crossing at +inf
                ends = c[1:-1] + m[1:-1] * br  # each piece's value where it hands over
                j = int(np.count_nonzero(ends <= floor))
                first, head = j + 1, (floor - c[j + 1]) / m[j + 1]
            if not head < np.inf:  # beyond the floats: the constant everywhere
                first, head = None, None
        env = cls.__new__(cls)
        if first is None:
            env.index = np.zeros(1, dtype=np.int64)
            env.intercept, env.slope, env.breaks = c[:1], m[:1], br[:0]
            return env
        env.index = np.arange(first, k + 1) if head is None else \
            np.concatenate(([0], np.arange(first, k + 1)))
        env.intercept = c[first:] if head is None else np.concatenate((c[:1], c[first:]))
        env.slope = m[first:] if head is None else np.concatenate((m[:1], m[first:]))
        env.breaks = br[first - 1:] if head is None else np.concatenate(([head], br[first - 1:]))
        return env

    @classmethod
    def of_convex_checked(cls, intercept, slope, breaks):
        """:meth:`of_convex` of Python lists whose breaks the caller found ascending and
        whose chain slopes (``slope[1:]``) it found rising strictly, as :meth:`of_convex`
        checks them (:func:`~scalemodel.sharding._zero3_chains`, for every row at once):
        the same envelope, without those two checks [-]."""
        env = cls._convex_py(intercept, slope, breaks, checked=True)
        return cls.of_convex(intercept, slope, breaks) if env is None else env

    @classmethod
    def _convex_py(cls, c, m, br, checked=False):
        """:meth:`of_convex` of Python lists of floats, in Python floats: the same
        operations and the same envelope, kept as :attr:`_py` (evaluated without numpy's
        per-call cost); None where the numpy construction must answer (a value that is
        not finite, a chain not as promised, breaks out of order after rounding).
        ``checked``: the breaks' order and the slopes' rise are known [-]."""
        k = len(c) - 1
        if k < 1 or len(m) != k + 1 or len(br) != k - 1 or m[0] != 0.0:
            return None
        if not math.isfinite(sum(c) + sum(m) + sum(br)):
            return None
        if k > 1 and not br[0] > 0:
            return None
        if not checked and not (all(map(operator.le, br, br[1:]))
                                and all(map(operator.lt, m[1:], m[2:]))):
            return None
        if not m[1] >= 0.0:
            return None
        floor = c[0]
        if c[1] >= floor:  # the chain on top from x = 0
            first, head = 1, None
        elif m[-1] <= 0.0:
            return None  # a flat chain below the constant (numpy's one-line answer)
        else:  # the constant until the piece that crosses it
            j = 0
            for ci, mi, b in zip(c[1:-1], m[1:-1], br):
                if ci + mi * b <= floor:
                    j += 1
            mj = m[j + 1]
            if not mj > 0.0:
                return None
            head = (floor - c[j + 1]) / mj
            if not head < math.inf:
                return None
            first = j + 1
        hc, hm, hb = c[first:], m[first:], br[first - 1:]
        index = list(range(first, k + 1))
        if head is not None:
            hc, hm, hb, index = [c[0], *hc], [m[0], *hm], [head, *hb], [0, *index]
            if len(hb) > 1 and not hb[0] <= hb[1]:
                return None  # rounding put the crossing past the next break
        if not hb:
            return None  # one line: numpy's arrays
        env = cls.__new__(cls)
        env._py = (hc, hm, hb, index)
        return env

    @classmethod
    def of_convex_rows(cls, intercept, slope, breaks, counts):
        """:meth:`of_convex` of every row at once: row ``r`` is the constant and chain
        ``intercept[r, :L + 2]``, ``slope[r, :L + 2]`` with breaks ``breaks[r, :L]``,
        ``L = counts[r]`` (the rest of the row is ignored). The same envelopes, row by
        row, as :meth:`of_convex` of each row's arrays [-].

        Parameters
        ----------
        intercept, slope : numpy.ndarray
            ``(R, W + 2)`` arrays of the rows' lines, the constant first [s], [s/unit].
        breaks : numpy.ndarray
            ``(R, W)``: each row's chain breaks, ascending [unit].
        counts : sequence of int
            Each row's number of breaks ``L <= W`` [-].
        """
        c, m, br = intercept, slope, breaks
        L = np.asarray(counts, dtype=np.int64)
        lines = np.arange(c.shape[1])[None, :] < (L + 2)[:, None]  # each row's own lines
        inner = np.arange(br.shape[1])[None, :] < L[:, None]  # and breaks
        ok = (m[:, 0] == 0.0) & np.all((m[:, 1:] >= 0) | ~lines[:, 1:], axis=1)
        if br.shape[1]:  # as of_convex's checks, where a row has breaks
            ok &= (L < 1) | (br[:, 0] > 0)
            ok &= np.all((br[:, 1:] >= br[:, :-1]) | ~inner[:, 1:], axis=1)
        ok &= np.all((m[:, 2:] > m[:, 1:-1]) | ~lines[:, 2:], axis=1)
        return cls._checked_rows(c, m, br, L, ok)

    @classmethod
    def _rising_rows(cls, intercept, slope, breaks, counts):
        """:meth:`of_convex_rows` of rows that are chains by construction but for their
        slopes' strict rise (:func:`~scalemodel.sharding._zero3_chains`: line 0 flat,
        every slope >= 0, each row's breaks > 0 and ascending), which this checks alone:
        the same envelopes [-]."""
        m = slope
        L = np.asarray(counts, dtype=np.int64)
        if m.shape[1] < 3:  # no two chain lines to compare
            return cls._checked_rows(intercept, m, breaks, L, np.ones(len(L), dtype=bool))
        stuck = ~(m[:, 2:] > m[:, 1:-1])  # where a slope does not rise (or is NaN)
        first = stuck.argmax(axis=1)  # (0 where it rises everywhere)
        ok = ~(stuck[np.arange(len(L)), first] & (first < L))
        return cls._checked_rows(intercept, m, breaks, L, ok)

    @classmethod
    def _checked_rows(cls, c, m, br, L, ok):
        """:meth:`of_convex_rows` past its checks: ``ok`` says which rows are chains as
        promised (the others take :meth:`of_convex`'s general construction) [-]."""
        floor = c[:, 0]
        on_top = c[:, 1] >= floor
        below = ok & ~on_top  # the rows where the constant comes first
        if below.any():
            rows = np.arange(len(L))
            flat = m[rows, L + 1] <= 0.0
            inner = np.arange(br.shape[1])[None, :] < L[:, None]
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                ends = c[:, 1:br.shape[1] + 1] + m[:, 1:br.shape[1] + 1] * br
                j = np.count_nonzero((ends <= floor[:, None]) & inner, axis=1)
                head = (floor - c[rows, j + 1]) / m[rows, j + 1]
        out = []
        lines = np.arange(c.shape[1])  # each on-top row's index: a view of these (the values
        # and dtype of np.arange(1, n + 2))
        for r, (n, fine, top) in enumerate(zip(L.tolist(), ok.tolist(), on_top.tolist())):
            if fine and top:  # the chain on top from x = 0: its lines 1 .. n + 1
                env = cls.__new__(cls)
                env.index = lines[1:n + 2]
                env.intercept, env.slope, env.breaks = c[r, 1:n + 2], m[r, 1:n + 2], br[r, :n]
                out.append(env)
                continue
            cr, mr, brr = c[r, :n + 2], m[r, :n + 2], br[r, :n]
            if not fine:
                out.append(cls.of_convex(cr, mr, brr))  # its general construction
                continue
            env = cls.__new__(cls)
            k = n + 1
            if flat[r] or not head[r] < np.inf:
                env.index = np.zeros(1, dtype=np.int64)
                env.intercept, env.slope, env.breaks = cr[:1], mr[:1], brr[:0]
            else:
                first = int(j[r]) + 1
                env.index = np.concatenate(([0], np.arange(first, k + 1)))
                env.intercept = np.concatenate((cr[:1], cr[first:]))
                env.slope = np.concatenate((mr[:1], mr[first:]))
                env.breaks = np.concatenate(([head[r]], brr[first - 1:]))
            out.append(env)
        return out

    _py = None
    """``(intercept, slope, breaks, index)`` as Python lists when built from a few lines
    with breaks in order (:meth:`_small`): evaluated without numpy's per-call cost, each
    answer computed with the same operations; any answer that is not finite is computed
    again with numpy (its warnings and all). The arrays are then made when first read."""

    @functools.cached_property
    def index(self):  # set as attributes by the numpy construction, made from _py here
        return np.array(self._py[3], dtype=np.int64)

    @functools.cached_property
    def intercept(self):
        return np.array(self._py[0])

    @functools.cached_property
    def slope(self):
        return np.array(self._py[1])

    @functools.cached_property
    def breaks(self):
        return np.array(self._py[2], dtype=float)

    def __len__(self):
        return len(self.index) if self._py is None else len(self._py[3])

    def piece(self, x):
        """Index (into the hull) of the line that is highest at ``x``."""
        return self.breaks.searchsorted(x, side="right")  # (without np's wrapper)

    def __call__(self, x):
        """:math:`E(x)` (vectorized)."""
        if type(x) is float and -1e200 < x < 1e200:  # no overflow
            if self._py is not None and self._py[2]:
                cl, ml, br, _ = self._py
                k = bisect.bisect_right(br, x)  # as searchsorted: the breaks are in order
                v = cl[k] + ml[k] * x
                if v - v == 0.0:  # finite
                    return np.float64(v)
            if len(self.breaks):
                k = self.piece(x)
                return self.intercept[k] + self.slope[k] * x
        with np.errstate(over="ignore"):  # x near 1e300: the time is +inf, exactly so
            if len(self.breaks) == 0:
                return self.intercept[0] + self.slope[0] * np.asarray(x, dtype=float)
            k = self.piece(x)
            return self.intercept[k] + self.slope[k] * x

    def argmax(self, x):
        """Index (into the original lines) of a line that attains :math:`E(x)`."""
        return self.index[self.piece(x)]

    def max_x_below(self, level):
        """Largest :math:`x \\ge 0` with :math:`E(x) \\le` ``level``, and the binding line.

        Returns ``(x, j)``: ``x = inf`` when no line grows (``j = -1``); ``x < 0`` when even
        :math:`E(0)` exceeds the level (``j`` is then the highest line at 0).
        """
        if type(level) in (float, np.float64):  # kept per level: the corners of an
            return self._memo("below", level, self._max_x_below)  # interval ask again
        return self._max_x_below(level)

    def _memo(self, what, level, fn):
        """``fn(level)``, kept on this envelope (read, never changed) per ``what`` and
        scalar ``level`` [s] (its bits: a -0.0 is not a 0.0) [-]."""
        key = (what, float(level), math.copysign(1.0, level))
        memo = self.__dict__.get("_kept")
        if memo is None:
            memo = self._kept = {}
        got = memo.get(key)
        if got is None:
            if len(memo) >= _KEPT:  # (a sweep of levels on one envelope)
                memo.clear()
            got = memo[key] = fn(level)
        return got

    def _max_x_below(self, level):
        """:meth:`max_x_below`, computed."""
        if self._py is not None and type(level) in (float, np.float64):
            if self._py[0][0] > level:  # as below
                return -1.0, self._py[3][0]
            found = self._max_x_below_py(float(level))
            if found is not None:
                return found
        c, m = self.intercept, self.slope
        if c[0] > level:  # the highest line at x = 0 is the first hull piece
            return -1.0, int(self.index[0])
        grows = m > 0
        if grows.all():  # (a chain's pieces) every line: no selection, and the gaps
            gaps = level - c  # kept for _lowest_gap at this level (the same values)
            xs = gaps / m
            k = int(xs.argmin())
            self._gaps = (float(level), math.copysign(1.0, level), gaps)
            return float(xs[k]), int(self.index[k])
        if not grows.any():
            return float("inf"), -1
        xs = (level - c[grows]) / m[grows]
        k = int(np.argmin(xs))
        return float(xs[k]), int(self.index[np.flatnonzero(grows)[k]])

    def _lowest_gap(self, level):
        """:math:`\\min_j (L - c_j)` over the growing pieces (:math:`m_j > 0`) for
        ``level`` :math:`L` [s]: how far below the level the closest growing line starts
        (numpy's minimum, or the same in Python floats when every gap is finite).

        Parameters
        ----------
        level : float
            :math:`L` [s].
        """
        if type(level) in (float, np.float64):  # kept per level, as max_x_below
            return self._memo("gap", level, self._gap)
        return self._gap(level)

    def _gap(self, level):
        """:meth:`_lowest_gap`, computed."""
        if self._py is not None and type(level) in (float, np.float64):
            lv = float(level)
            kept = self._gaps_py  # max_x_below's at this level: the same list
            if kept is not None and kept[0] == lv and kept[1] == math.copysign(1.0, lv):
                gaps = kept[2]
            else:
                gaps = [lv - ci for ci, mi in zip(self._py[0], self._py[1]) if mi > 0]
            if gaps and math.isfinite(sum(gaps)):
                return min(gaps)
        kept = self._gaps  # max_x_below's at this level, every line growing
        if (kept is not None and self._py is None and kept[0] == level
                and kept[1] == math.copysign(1.0, level)):
            return float(kept[2].min())
        return float(np.min(level - self.intercept[self.slope > 0]))

    _gaps = None
    """``(level, its sign, level - intercept)`` of the last :meth:`max_x_below` in numpy
    whose every line grows (read by :meth:`_lowest_gap` at the same level) [s]."""

    _gaps_py = None
    """``(level, its sign, [level - c_j for the growing lines])`` of the last
    :meth:`max_x_below` in Python floats (read by :meth:`_lowest_gap` at the same level:
    the same list it would make) [s]."""

    def _max_x_below_py(self, level):
        """:meth:`max_x_below` past its first test, in Python floats (the first smallest
        crossing, as argmin); None when a crossing is not finite, or their sum overflows
        (numpy answers then). The slopes of :attr:`_py` never fall (the hull's rise, a
        chain's too, :meth:`_small`, :meth:`_convex_py`), so the growing lines are those
        after the first that grows: each crossing ``(level - c) / m`` computed in one
        pass, the gaps ``level - c`` kept for :meth:`_lowest_gap`."""
        cl, ml, _, index = self._py
        off, k = 0, len(ml)
        while off < k and not ml[off] > 0:
            off += 1
        if off == k:
            return float("inf"), -1
        cs, ms = (cl, ml) if off == 0 else (cl[off:], ml[off:])
        if not all(map(operator.le, ms, ms[1:])):  # (never: as the loop over each line)
            return self._max_x_below_loop(level)
        gaps = [level - ci for ci in cs]
        xs = list(map(operator.truediv, gaps, ms))
        self._gaps_py = (level, math.copysign(1.0, level), gaps)
        if not math.isfinite(sum(xs)):  # one is not finite (or the sum overflows)
            return None
        best = min(xs)  # the first smallest, as the loop's strict < keeps it
        return best, index[off + xs.index(best)]

    def _max_x_below_loop(self, level):
        """:meth:`_max_x_below_py` line by line, for slopes that fall somewhere."""
        cl, ml, _, index = self._py
        best, at = None, -1
        for i, (ci, mi) in enumerate(zip(cl, ml)):
            if mi > 0:
                v = (level - ci) / mi
                if not v - v == 0.0:
                    return None
                if best is None or v < best:
                    best, at = v, i
        if best is None:
            return float("inf"), -1
        return best, index[at]


def comm_finish_time(ready, comm_time):
    """End of the last bucket's communication, closed form :eq:`closed-form` [s].

    Parameters
    ----------
    ready : array_like
        Bucket ready times, communication order [s].
    comm_time : array_like
        Each bucket's time on the channel [s].
    """
    ready = np.asarray(ready, dtype=float)
    return float(np.max(ready + _tail_sum(comm_time))) if ready.size else float("-inf")
