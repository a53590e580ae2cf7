"""Transport microbenchmark: all-reduce, all-gather and point-to-point over message sizes.

Run inside an initialised ``torch.distributed`` process group (``torchrun`` sets one up;
nccl on GPUs, gloo on CPUs). Every rank takes part; each timed repetition is bracketed
by a barrier, and the time of a repetition is the slowest rank's, as in nccl-tests.
The result feeds :func:`scalemodel.calibrate.fit.fit_collective`.

Failures do not hang and do not pass silently: a collective that exceeds the process
group's timeout, or a peer that dies, raises :class:`~scalemodel.CalibrationError`
saying which collective at which size, and what to check.
"""

from __future__ import annotations

import os
import sys
import time

import attrs
import numpy as np

from ..exceptions import CalibrationError, InvalidParameterError
from .models import _torch

__all__ = ["TransportSweep", "default_sizes", "run_sweep", "parse_size", "peer_failure",
           "local_world_size", "node_groups", "run_intra_node_sweep"]

COLLECTIVES = ("all_reduce", "all_gather", "send_recv")
_SUFFIX = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024 ** 2, "mib": 1024 ** 2,
           "mb": 1000 ** 2, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3}


def parse_size(text) -> int:
    """A message size such as ``4096``, ``"4KiB"``, ``"256MiB"`` or ``"1MB"`` [bytes]."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        value = int(text)
    else:
        s = str(text).strip().lower().replace(" ", "")
        num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
        try:
            value = int(float(num) * _SUFFIX[s[len(num):]])
        except (KeyError, ValueError):
            raise InvalidParameterError("size", text, "a size such as 4096, '4KiB' or "
                                        "'256MiB'") from None
    if value < 4:
        raise InvalidParameterError("size", text, "at least 4 bytes (one fp32 element)")
    return value


def default_sizes(min_size="4KiB", max_size="256MiB", factor=2) -> np.ndarray:
    """Message sizes from ``min_size`` to ``max_size`` in steps of ``factor`` [bytes].

    Parameters
    ----------
    min_size, max_size : int or str
        Smallest and largest message [bytes] (strings such as ``"4KiB"`` accepted).
    factor : int
        Ratio between consecutive sizes [-].
    """
    lo, hi = parse_size(min_size), parse_size(max_size)
    if hi < lo:
        raise InvalidParameterError("max_size", max_size, f"at least min_size ({lo} bytes)")
    if not (isinstance(factor, int) and factor >= 2):
        raise InvalidParameterError("factor", factor, "an integer >= 2")
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return np.asarray(out, dtype=float)


@attrs.frozen(eq=False)
class TransportSweep:
    """Measured times of collectives over message sizes.

    Parameters
    ----------
    backend : str
        torch.distributed backend (``"nccl"``, ``"gloo"``) [-].
    world_size : int
        Ranks taking part [workers].
    device : str
        Device name of rank 0 [-].
    nbytes : numpy.ndarray
        Message sizes per rank [bytes].
    seconds : dict
        ``{collective: array (sizes x repetitions)}``, the slowest rank's time of each
        repetition [s]; ``send_recv`` holds one-way times (half a round trip) [s].
    groups : int
        Groups that ran the sweep at the same time, each of ``world_size`` ranks: 1 for
        the whole world; one per node for an intra-node sweep
        (:func:`run_intra_node_sweep`), whose times are then the slowest node's per
        size [-].
    """

    backend: str
    world_size: int
    device: str
    nbytes: np.ndarray
    seconds: dict
    groups: int = 1

    def medians(self, collective) -> np.ndarray:
        """Median time per size of one collective [s]."""
        return np.median(self.seconds[collective], axis=1)

    def achieved_bandwidth(self, collective="all_reduce") -> np.ndarray:
        """nccl-tests' "bus bandwidth" per size: the bits each rank moves on its link per
        second for this collective [bits/s] (all-reduce: ``2(n-1)/n * 8 m / t``;
        all-gather: ``(n-1) * 8 m / t`` for ``m`` bytes contributed per rank;
        send/recv: ``8 m / t``)."""
        n = self.world_size
        t = self.medians(collective)
        factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": n - 1, "send_recv": 1.0}
        return factor[collective] * 8 * self.nbytes / t

    def to_dict(self) -> dict:
        """JSON-ready form (kept in the cluster profile's ``extra``)."""
        return {"backend": self.backend, "world_size": self.world_size, "device": self.device,
                "nbytes": self.nbytes.tolist(), "groups": self.groups,
                "seconds": {k: np.asarray(v).tolist() for k, v in self.seconds.items()}}

    @classmethod
    def from_dict(cls, data) -> "TransportSweep":
        """Inverse of :meth:`to_dict`."""
        return cls(backend=data["backend"], world_size=int(data["world_size"]),
                   device=data.get("device", ""), nbytes=np.asarray(data["nbytes"], float),
                   seconds={k: np.asarray(v, float) for k, v in data["seconds"].items()},
                   groups=int(data.get("groups", 1)))


def distributed_context(who, group, device, **counts):
    """Check the process group and the counts; the rank's device and its sync.

    ``counts`` maps a parameter name to ``(value, least)``. Returns ``(torch, dist,
    backend, device, sync)``: the device is the current CUDA device under nccl, else the
    CPU, when ``device`` is None.
    """
    torch = _torch()
    dist = torch.distributed
    if not dist.is_initialized():
        raise CalibrationError(f"{who} needs an initialised torch.distributed process group: "
                               "run under torchrun (see `python -m scalemodel.calibrate "
                               "--help`)")
    for pname, (v, least) in counts.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise InvalidParameterError(pname, v, f"an integer >= {least}")
    backend = dist.get_backend(group)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return torch, dist, backend, device, sync


def peer_failure(what, exc, timeout=None) -> CalibrationError:
    """A one-line :class:`~scalemodel.CalibrationError` for a collective that failed.

    Parameters
    ----------
    what : str
        What was running, e.g. ``"all_reduce of 4096 bytes"`` [-].
    exc : BaseException
        The error torch.distributed raised [-].
    timeout : datetime.timedelta, optional
        The process group's timeout, for the message [s].
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    if "timeout" in text.lower() or "timed out" in text.lower():
        why = (f"timed out (process group timeout {timeout})" if timeout else "timed out")
        hint = ("a rank is stuck or far slower than the others; check that every rank runs "
                "the same command, or raise --timeout for slow links")
    else:
        why = f"failed: {text}"
        hint = ("a peer rank probably died or lost its connection; see that rank's output, "
                "then rerun")
    return CalibrationError(f"{what} {why}. {hint}")


def _fail(collective, nbytes, exc, timeout):
    return peer_failure(f"{collective} of {int(nbytes)} bytes", exc, timeout)


def run_sweep(sizes=None, *, collectives=("all_reduce", "all_gather"), warmup=2, repeats=5,
              budget=2.0, device=None, group=None, progress=True,
              timeout=None, label="") -> TransportSweep:
    """Time the collectives over ``sizes`` on the current process group (all ranks).

    Parameters
    ----------
    sizes : array_like, optional
        Message sizes per rank [bytes]; :func:`default_sizes` by default (4 KiB to 256 MiB).
    collectives : sequence of str
        Any of ``"all_reduce"``, ``"all_gather"``, ``"send_recv"`` [-].
    warmup : int
        Untimed repetitions per size [-].
    repeats : int
        Timed repetitions per size, at most [-].
    budget : float
        Time per size and collective after which fewer repetitions are taken (never
        fewer than 3) [s].
    device : str or torch.device, optional
        Where the buffers live; the current CUDA device under nccl, else the CPU [-].
    group : ProcessGroup, optional
        The group; the default group when omitted. Several disjoint groups may sweep at
        the same time (:func:`run_intra_node_sweep`) [-].
    progress : bool
        Print progress lines to stderr on rank 0 of the world [-].
    timeout : datetime.timedelta, optional
        The process group's timeout, only to word error messages [s].
    label : str
        Prefix of the progress lines and error messages, e.g. ``"intra-node"`` [-].

    Returns
    -------
    TransportSweep
        On every rank of ``group``.
    """
    torch, dist, backend, device, sync = distributed_context(
        "run_sweep", group, device, warmup=(warmup, 0), repeats=(repeats, 3))
    for c in collectives:
        if c not in COLLECTIVES:
            raise InvalidParameterError("collectives", c, f"one of {', '.join(COLLECTIVES)}")
    sizes = default_sizes() if sizes is None else np.asarray([parse_size(s) for s in sizes],
                                                              dtype=float)
    n = dist.get_world_size(group)
    rank = dist.get_rank(group)
    show = progress and dist.get_rank() == 0
    prefix = f"{label} " if label else ""

    def world_rank(r):  # torch.distributed names sources and peers by their world rank
        return r if group is None else dist.get_global_rank(group, r)

    root, last = world_rank(0), world_rank(n - 1)
    from .compute import device_name
    results = {}
    for coll in collectives:
        grid = sizes
        if coll == "send_recv" and n < 2:
            continue  # a ping-pong between rank 0 and the last rank needs two ranks
        rows = []
        for k, nbytes in enumerate(grid):
            numel = max(1, int(nbytes) // 4)
            buf = torch.ones(numel, device=device)
            out = [torch.empty_like(buf) for _ in range(n)] if coll == "all_gather" else None
            once = _one_call(dist, coll, buf, out, group, rank, n - 1, root, last)
            try:
                worst = _timed_repetitions(torch, dist, once, sync, warmup, repeats, budget,
                                           root, group, backend, device)
            except RuntimeError as exc:  # DistBackendError subclasses RuntimeError
                raise _fail(prefix + coll, nbytes, exc, timeout) from exc
            t = worst.cpu().numpy()
            if coll == "send_recv":
                t = t / 2.0
            rows.append(t)
            if show:
                print(f"[scalemodel.calibrate] {prefix}{coll:>10} {_human(nbytes):>9} "
                      f"({k + 1}/{len(grid)}): median {np.median(t) * 1e3:9.3f} ms over "
                      f"{t.size} reps", file=sys.stderr, flush=True)
        # repetition counts differ between sizes: pad short rows with their own median
        width = max(len(r) for r in rows)
        results[coll] = _fill_nan(np.array([np.pad(r, (0, width - len(r)),
                                                   constant_values=np.nan) for r in rows]))
    return TransportSweep(backend=backend, world_size=n, device=device_name(device),
                          nbytes=sizes, seconds=results)


def _one_call(dist, coll, buf, out, group, rank, peer, root, last):
    """One call of the collective on ``buf`` (send/recv: a ping-pong between rank 0 and
    the last rank, ``peer`` in the group, ``root`` and ``last`` in the world)."""
    def once():
        if coll == "all_reduce":
            dist.all_reduce(buf, group=group)
        elif coll == "all_gather":
            dist.all_gather(out, buf, group=group)
        elif rank == 0:
            dist.send(buf, last, group=group)
            dist.recv(buf, last, group=group)
        elif rank == peer:
            dist.recv(buf, root, group=group)
            dist.send(buf, root, group=group)

    return once


def _timed_repetitions(torch, dist, once, sync, warmup, repeats, budget, root, group,
                       backend, device):
    """Warm up, then time ``once`` between barriers, as many repetitions as the first
    one says fit ``budget`` (at least 3, at most ``repeats``; agreed from the root); the
    slowest rank's time of each, as a float64 tensor [s]."""
    for _ in range(warmup):
        once()
    sync()
    times = []
    reps = repeats
    for i in range(repeats):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        once()
        sync()
        times.append(time.perf_counter() - t0)
        if i == 0:  # agree on how many repetitions fit the budget
            want = torch.tensor([max(3, min(repeats, int(budget / max(times[0],
                                                                      1e-9))))])
            dist.broadcast(want, root, group=group)
            reps = int(want.item())
        if i + 1 >= reps:
            break
    worst = torch.tensor(times, dtype=torch.float64)
    if backend == "nccl":
        worst = worst.to(device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
    return worst


def local_world_size() -> int:
    """Ranks on this node, from torchrun's ``LOCAL_WORLD_SIZE`` (1 when unset) [ranks]."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "1")
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidParameterError("LOCAL_WORLD_SIZE", text, "an integer >= 1 (ranks on "
                                    "this node; torchrun sets it)")
    return value


def _node_key():
    """Which node this rank is on: torchrun's ``GROUP_RANK`` (the node's rank), else
    ``RANK - LOCAL_RANK`` (torchrun numbers the ranks of a node consecutively)."""
    if "GROUP_RANK" in os.environ:
        return ("node", int(os.environ["GROUP_RANK"]))
    return ("first rank", int(os.environ.get("RANK", 0)) - int(os.environ.get("LOCAL_RANK",
                                                                             0)))


def node_groups(timeout=None):
    """One process group per node, from every rank's node (collective: call it on every
    rank of the default group).

    Parameters
    ----------
    timeout : datetime.timedelta, optional
        The process group's timeout, for the new groups and error messages [s].

    Returns
    -------
    tuple
        ``(group, nodes)``: this rank's node group and the world ranks of every node, in
        node order; ``(None, nodes)`` when the nodes do not all hold the same number of
        ranks (their sweeps would not be comparable).
    """
    torch = _torch()
    dist = torch.distributed
    world = dist.get_world_size()
    keys = [None] * world
    try:
        dist.all_gather_object(keys, _node_key())
        members = {}
        for r, k in enumerate(keys):
            members.setdefault(tuple(k), []).append(r)
        nodes = [members[k] for k in sorted(members)]
        # every rank creates every group, in the same order (torch.distributed's rule)
        kw = {} if timeout is None else {"timeout": timeout}
        groups = [dist.new_group(ranks, **kw) for ranks in nodes]
    except RuntimeError as exc:
        raise peer_failure("forming the intra-node groups", exc, timeout) from exc
    if len({len(ranks) for ranks in nodes}) > 1:
        return None, nodes
    me = dist.get_rank()
    mine = next(g for g, ranks in zip(groups, nodes) if me in ranks)
    return mine, nodes


def run_intra_node_sweep(sizes=None, *, warmup=2, repeats=5, budget=2.0, device=None,
                         progress=True, timeout=None):
    """All-reduce inside every node, all nodes at once (collective: every rank calls it).

    Each node's ranks form a group (:func:`node_groups`) and sweep ``sizes`` with
    :func:`run_sweep`, every node at the same time, as the intra-node hops of a flat
    ring run in every node at once. The times kept are, per size, those of the node
    with the largest median (the slowest intra-node link sets a ring's pace).

    Parameters
    ----------
    sizes : array_like, optional
        Message sizes per rank [bytes]; :func:`default_sizes` by default.
    warmup : int
        Untimed repetitions per size [-].
    repeats : int
        Timed repetitions per size, at most [-].
    budget : float
        Time per size after which fewer repetitions are taken (never fewer than 3) [s].
    device : str or torch.device, optional
        Where the buffers live [-].
    progress : bool
        Print progress lines to stderr on rank 0 [-].
    timeout : datetime.timedelta, optional
        The process group's timeout, only to word error messages [s].

    Returns
    -------
    TransportSweep or None
        ``world_size`` = ranks per node, ``groups`` = nodes, on every rank; ``None``
        when the nodes hold different numbers of ranks.
    """
    torch = _torch()
    dist = torch.distributed
    group, nodes = node_groups(timeout)
    if group is None:
        return None
    sweep = run_sweep(sizes, collectives=("all_reduce",), warmup=warmup, repeats=repeats,
                      budget=budget, device=device, group=group, progress=progress,
                      timeout=timeout, label="intra-node")
    mine = sweep.seconds["all_reduce"] if dist.get_rank(group) == 0 else None
    every = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(every, mine)
    except RuntimeError as exc:
        raise peer_failure("gathering the intra-node sweeps (all_gather_object)", exc,
                           timeout) from exc
    per_node = [np.asarray(every[ranks[0]], dtype=float) for ranks in nodes]
    width = max(a.shape[1] for a in per_node)
    per_node = np.stack([_fill_nan(np.pad(a, ((0, 0), (0, width - a.shape[1])),
                                          constant_values=np.nan)) for a in per_node])
    slowest = np.argmax(np.median(per_node, axis=2), axis=0)  # per size
    seconds = per_node[slowest, np.arange(per_node.shape[1])]
    return attrs.evolve(sweep, seconds={"all_reduce": seconds}, groups=len(nodes))


def _fill_nan(a):
    """Replace NaN padding by the row's median, so every row has a usable median."""
    a = np.array(a, dtype=float)
    for row in a:
        mask = np.isnan(row)
        if mask.any():
            row[mask] = np.median(row[~mask])
    return a


def _human(nbytes) -> str:
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{int(nbytes)} B"
