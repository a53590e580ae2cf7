"""A discrete-event simulation of one sharded data-parallel iteration (ZeRO-1/2/3, FSDP
full and hybrid shard).

It is the independent reference for ``scalemodel.sharding``, so it shares no model code
with scalemodel: the units are grouped here from the tensor names, the compute stream and
the one communication channel are played event by event (a heap of events; the channel
serves collectives first in, first out, in the order the program issues them), and each
reduce-scatter, all-gather and all-reduce is played step by step, every ring step paying
its latency, its bytes on the slowest link it uses and its reductions. Only the profile
data and the reduction-cost callable come from the library; the all-reduce of
``hybrid_shard`` across nodes is played by ``des_reference.collective_seconds``, the
independent reference of plain data parallelism.

The schedules (what waits for what, and when each collective is issued):

* ``zero3`` / ``hybrid_shard``: forward unit k waits for the all-gather of its
  parameters; when it starts, the all-gather of unit k+1 is issued (one ahead; the first
  at time 0). The last unit of forward stays gathered; every other unit waits, before its
  backward, for a second all-gather, issued when the unit before it in backward starts
  its backward. When a unit's backward ends its gradients are reduce-scattered (and under
  ``hybrid_shard`` the shard is then all-reduced across nodes, on the same channel).
* ``zero1`` / ``zero2``: forward without communication; each gradient bucket is
  reduce-scattered when it is ready; after backward and the last reduce-scatter, the
  optimizer step; then the updated parameters of every bucket are all-gathered.

The optimizer step runs on the local shard: update time / shard group size.
"""

from __future__ import annotations

import heapq
import math
import re

from des_reference import _fuse, collective_seconds

NEGLIGIBLE = 1e-12
"""A unit's backward time at most this fraction of the profile's compute counts as none
when the forward is split by the backward times (the library's rule,
``scalemodel.sharding.NEGLIGIBLE``, stated here on its own)."""


def _negligible(times, scale):
    """``times`` with those within NEGLIGIBLE of ``scale`` set to 0."""
    return [0.0 if abs(t) <= NEGLIGIBLE * abs(scale) else t for t in times]

_BLOCK = re.compile(r"^(.*?(?:^|\.)\d+)\.")


def group_units(names, n_tensors, wrap):
    """Tensor indices (backward order) of each unit, in backward order. ``wrap``:
    "block", "module", "none" or a number of parameters (size-based, counted in forward order),
    which then needs ``params`` (see :func:`units_of`)."""
    if wrap == "none":
        return [[i] for i in range(n_tensors)]
    groups, last = [], object()
    for i, name in enumerate(names):
        if wrap == "module":  # the owning module: everything before the last dot
            cut = name.rfind(".")
            key = name[:cut] if cut >= 0 else name
        else:
            m = _BLOCK.match(name)
            key = m.group(1) if m else None
        if not groups or key != last:
            groups.append([])
        groups[-1].append(i)
        last = key
    return groups


def size_units(params, min_params):
    """Size-based wrapping: walk the tensors in forward order (the reverse of the
    profile's), close a unit once it holds min_params parameters; the rest is a unit."""
    k = len(params)
    fwd_groups, cur, acc = [], [], 0.0
    for j in range(k):  # forward position j is backward index k-1-j
        cur.append(k - 1 - j)
        acc += params[k - 1 - j]
        if acc >= min_params:
            fwd_groups.append(cur)
            cur, acc = [], 0.0
    if cur:
        fwd_groups.append(cur)
    return [sorted(g) for g in reversed(fwd_groups)]  # backward order


def _ring_half(nbytes, ranks, bw_eff, intra_eff, alpha, intra_alpha, red, reduce,
               per_node=None, nics=1):
    """One ring pass (reduce-scatter or all-gather) of an nbytes buffer over ``ranks``
    GPUs: ranks-1 steps of nbytes/ranks. Without a topology every GPU has its own link at
    bw_eff; with one (per_node GPUs per node) a step lasts as long as its slowest link, a
    NIC (one ring edge leaves each node per step, over the node's NICs) or a GPU's
    intra-node link, and a hop across nodes pays alpha, one inside a node intra_alpha."""
    if ranks == 1:
        return 0.0
    chunk = nbytes / ranks
    t = 0.0
    for hop in range(ranks - 1):
        if per_node is None:
            t += alpha + chunk * 8 / bw_eff
        else:
            nodes = -(-ranks // per_node)
            crosses = (hop // per_node) != ((hop + 1) // per_node)
            nic = chunk / nics * 8 / bw_eff if nodes > 1 else 0.0
            link = chunk * 8 / intra_eff if min(per_node, ranks) > 1 else 0.0
            t += (alpha if crosses else intra_alpha) + max(nic, link)
        if reduce:  # one kernel: the reduction's launch latency once, then per byte
            t += (red.floor if hop == 0 else 0.0) + red.per_byte * chunk
    return t


def _chain_broadcast(nbytes, ranks, chunk, bw_eff, intra_eff, alpha, intra_alpha,
                     per_node=None, nics=1):
    """One ring broadcast of nbytes from rank 0 of ``ranks`` consecutive GPUs, as NCCL
    runs it: a chain 0 -> 1 -> ... -> ranks-1, the buffer cut into k = ceil(nbytes /
    chunk) equal chunks. Every hop forwards one chunk at a time, a chunk once it has
    wholly arrived (store and forward): the time of chunk j on hop h starts at the later
    of the end of chunk j-1 on hop h and the arrival of chunk j from hop h-1 (its end
    there plus that hop's latency). A hop across nodes sends over the node's NICs (and
    the GPU's intra-node link: the slower binds), one inside a node over the intra-node
    link; without a topology every GPU has its own link at bw_eff."""
    if ranks == 1:
        return 0.0
    k = max(math.ceil(nbytes / chunk), 1)
    c = nbytes / k
    svc, lat = [], []
    for hop in range(ranks - 1):
        if per_node is None:
            svc.append(c * 8 / bw_eff)
            lat.append(alpha)
        elif hop // per_node != (hop + 1) // per_node:
            link = c * 8 / intra_eff if per_node > 1 else 0.0
            svc.append(max(c * 8 / (nics * bw_eff), link))
            lat.append(alpha)
        else:
            svc.append(c * 8 / intra_eff)
            lat.append(intra_alpha)
    prev = [0.0] * k  # arrival of each chunk at the current hop's sender
    for h in range(ranks - 1):
        end, cur = 0.0, []
        for j in range(k):
            end = max(end, prev[j]) + svc[h]
            cur.append(end + lat[h])
        prev = cur
    return prev[-1]


def _cross_group_allreduce(shard, n, group, bw_eff, intra_eff, alpha, intra_alpha, red,
                           per_node, nics):
    """Ring all-reduce of one ``shard``-byte gradient shard across the n/group replicas
    of a shard group: ranks r, r + group, r + 2 group, ... (consecutive ranks fill a
    node). Played hop by hop: 2(m-1) steps of shard/m bytes, the first m-1 reducing.
    A step lasts as long as its slowest link. Without a topology every GPU has its own
    NIC. With one, every rank of the ring sends over the NIC when its successor is in
    another node, else over its intra-node link; the rings of the node's GPUs that
    leave the node at the same step share its NICs: min(group, per_node) of them (one
    per shard index in the node)."""
    m = n // group
    ranks = [r * group for r in range(m)]  # the ring of shard index 0
    chunk = shard / m
    t = 0.0
    for step in range(2 * (m - 1)):
        if per_node is None:
            t += alpha + chunk * 8 / bw_eff
        else:
            nic_t, link_t = 0.0, 0.0
            for j in range(m):  # every rank sends one chunk to the next
                a, b = ranks[j], ranks[(j + 1) % m]
                if a // per_node != b // per_node:
                    sharing = min(group, per_node)
                    nic_t = max(nic_t, chunk * 8 * sharing / (nics * bw_eff))
                else:
                    link_t = max(link_t, chunk * 8 / intra_eff)
            # latency: NCCL's ring pays a network hop on the 2(nodes-1) steps that cross
            # (scalemodel.collectives), the others intra_alpha
            nodes = len({r // per_node for r in ranks})
            t += (alpha if step < 2 * (nodes - 1) else intra_alpha) + max(nic_t, link_t)
        if step < m - 1:
            t += (red.floor if step == 0 else 0.0) + red.per_byte * chunk
    return t


def simulate_sharded(profile, n, bw, *, strategy, wrap="block", fusion="ddp",
                     fusion_params=None, param_bytes=None, reduce_bytes=None,
                     utilization=1.0, compression=1.0, algorithm="ring", alpha=0.0,
                     codec_cost=0.0, slowdown=1.0, collective_overhead=0.0,
                     sync_overhead=0.0, gpus_per_node=None, nics_per_node=1,
                     intra_bw=2.4e12, intra_alpha=0.0, element_bytes=None, grad_accum=1,
                     bucket_overhead=0.0, recompute=None, update_time=None,
                     shard_group=None, param_return="allgather", broadcasts=None,
                     broadcast_chunk=None):
    """Iteration time [s] of one sharded iteration on n GPUs, by discrete-event simulation.

    ``grad_accum`` micro-batches per step, each ending in a synchronization (FSDP and
    DeepSpeed wait for their reduce-scatters at the end of backward): zero3 and
    hybrid_shard gather and reduce-scatter in every one, zero2 reduce-scatters in every
    one, zero1 only in the last (the others are forward and backward alone); the update
    and zero1/2's all-gathers of the updated parameters come once, after the last.

    ``param_bytes`` / ``reduce_bytes``: bytes per element of the all-gathered parameters
    and of the reduce-scattered gradients (default: the profile's gradient element size,
    ``element_bytes``). ``wrap``: "block", "none" or a minimum parameter count per unit
    (zero3, hybrid_shard, and zero1/2 when ``fusion`` is None); ``fusion``: the bucket
    fusion of zero1/2 ("ddp", "horovod", "none", or None to use ``wrap``).
    ``bucket_overhead``: the framework's hook for each reduce-scatter, run on the compute
    stream at the end of the backward task that issues it (so the reduce-scatter and all
    later compute wait for it).
    ``recompute``: activation checkpointing, a mapping from a block's name (``"layers.3"``)
    to the fraction of its forward time recomputed at the start of its backward, or a
    pair ``(fraction, seconds)`` with memory-bound work of that many seconds besides (the
    block's forward: the profile's forward time split by the blocks' backward spans, as
    for the units); every gradient of that block and after it is ready that much later.
    ``shard_group``: zero1/2/3 sharded over groups of that many consecutive GPUs and
    replicated across the groups: every reduce-scatter (inside the group) is followed on
    the channel by the ring all-reduce of its shard across the n/shard_group groups,
    played hop by hop (see :func:`_cross_group_allreduce`).
    ``param_return="broadcast"`` (zero1/2): the updated parameters come back in
    ``broadcasts`` (default: one per rank of the shard group) ring broadcasts of equal
    size from ranks of the group, each played chunk by chunk along its chain
    (:func:`_chain_broadcast`), ``broadcast_chunk`` bytes per step (default NCCL's 512
    KiB Simple step on each of 2 x nics_per_node channels).
    """
    elem = element_bytes
    pbytes = param_bytes or elem
    rbytes = reduce_bytes or pbytes
    class _Red:  # the reduction: launch latency once per kernel, then per byte
        _r = profile.reduction
        floor = (_r.latency if _r.table_bytes is None else float(min(_r.table_seconds)))
        per_byte = (_r.gamma if _r.table_bytes is None else
                    max(float(_r.table_seconds[-1]) - floor, 0.0) / float(_r.table_bytes[-1]))

        def __call__(self, b):
            return float(profile.reduction(b))

    red = _Red()
    sizes = [float(s) for s in profile.tensor_bytes]
    params = [s / elem for s in sizes]
    ready = [float(t) for t in profile.tensor_ready]
    names = profile.tensor_names
    k = len(sizes)
    backward_time = profile.backward_time
    plain_ready = list(ready)  # without recompute: the forward splits by these
    if recompute:
        blocks = group_units(names, k, "block")
        spans, prev = [], 0.0
        for grp in blocks:
            spans.append(max(ready[i] for i in grp) - prev)
            prev = max(ready[i] for i in grp)
        spans[-1] += max(0.0, backward_time - prev)
        spans = _negligible(spans, profile.forward_time + profile.backward_time)
        total_span = sum(spans)
        added = 0.0
        for grp, span in zip(blocks, spans):
            m = _BLOCK.match(names[grp[0]])
            frac = recompute.get(m.group(1), 0.0) if m else 0.0
            frac, extra = frac if isinstance(frac, tuple) else (frac, 0.0)
            share = span / total_span if total_span > 0 else 1.0 / len(blocks)
            added += frac * profile.forward_time * share + extra
            for i in grp:
                ready[i] += added
        backward_time += added
    sigma = slowdown
    bw_eff = utilization * bw * compression

    # ------------------------------------------------------------ shard group, links
    if strategy == "hybrid_shard":
        g = gpus_per_node or 8
        group = min(n, g)
        nodes = n // g if n > g else 1
    else:
        group, nodes, g = n, 1, gpus_per_node
    # the intra-node link carries compressed bytes, except under hybrid_shard across
    # nodes: its intra-node collectives are not on the network's wire
    if strategy == "hybrid_shard" and nodes > 1:
        intra_eff = intra_bw
    else:
        intra_eff = intra_bw * compression
    replicas = 1
    if shard_group is not None and shard_group != n and strategy != "hybrid_shard":
        assert n % shard_group == 0
        group, replicas = shard_group, n // shard_group
        # a shard ring inside a node while the all-reduces cross nodes: uncompressed
        # intra-node bytes, as for hybrid_shard
        if gpus_per_node is not None and shard_group <= gpus_per_node < n:
            intra_eff = intra_bw

    def half(nbytes, reduce):
        if strategy == "hybrid_shard":
            return _ring_half(nbytes, group, bw_eff, intra_eff, alpha, intra_alpha, red,
                              reduce, per_node=g, nics=nics_per_node)
        return _ring_half(nbytes, group, bw_eff, intra_eff, alpha, intra_alpha, red, reduce,
                          per_node=gpus_per_node, nics=nics_per_node)

    def gather_time(unit_params):
        nbytes = unit_params * pbytes
        t = half(nbytes, False) + collective_overhead
        if compression > 1:
            t += codec_cost * nbytes
        return t

    def scatter_time(unit_params):
        nbytes = unit_params * rbytes
        t = half(nbytes, True) + collective_overhead
        if compression > 1:
            t += codec_cost * nbytes
        if strategy == "hybrid_shard" and nodes > 1:
            # g all-reduces of nbytes/g, one per GPU of the node, share its NICs
            share_bw = bw_eff * nics_per_node / g
            t += collective_seconds(algorithm, nbytes / g, nodes, share_bw, alpha, red,
                                    red_floor=red.floor, red_per_byte=red.per_byte)
            t += collective_overhead
        if replicas > 1:
            t += _cross_group_allreduce(nbytes / group, n, group, bw_eff,
                                        intra_bw * compression, alpha, intra_alpha, red,
                                        gpus_per_node, nics_per_node)
            t += collective_overhead
        return t

    # ------------------------------------------------------------ units / buckets
    if strategy in ("zero3", "hybrid_shard") or fusion is None:
        if isinstance(wrap, str):
            groups = group_units(names, k, wrap)
        else:
            groups = size_units(params, wrap)
        unit_params = [sum(params[i] for i in grp) for grp in groups]  # backward order
        unit_done = [max(ready[i] for i in grp) for grp in groups]
        back = []
        prev = 0.0
        for d in unit_done:
            back.append(d - prev)
            prev = d
        back[-1] += max(0.0, backward_time - unit_done[-1])
        plain_done = [max(plain_ready[i] for i in grp) for grp in groups]
        plain, prev = [], 0.0
        for d in plain_done:
            plain.append(d - prev)
            prev = d
        plain[-1] += max(0.0, profile.backward_time - plain_done[-1])
        plain = _negligible(plain, profile.forward_time + profile.backward_time)
        tb = sum(plain)
        fwd_b = [profile.forward_time * b / tb if tb > 0 else profile.forward_time / len(back)
                 for b in plain]
    else:
        buckets = _fuse(fusion, sizes, [sigma * t for t in ready], fusion_params or {})
        unit_params = [s / elem for s, _ in buckets]
        unit_done = [t for _, t in buckets]  # already on the distributed timeline

    # the optimizer step on the local shard (``update_time``: in place of the profile's,
    # e.g. an offloaded step)
    update = (profile.update_time if update_time is None else update_time) / group

    # ------------------------------------------------------------ the event loop
    # compute tasks: (duration, gate op or None, ops issued at start, ops issued at end)
    ops_dur = {}
    tasks = []
    K = len(unit_params)
    if strategy in ("zero3", "hybrid_shard"):
        fwd_order = list(range(K))[::-1]  # backward index of forward unit j
        for j, u in enumerate(fwd_order):
            ops_dur[("agf", u)] = gather_time(unit_params[u])
        for i in range(K):
            if i > 0:
                ops_dur[("agb", i)] = gather_time(unit_params[i])
            ops_dur[("rs", i)] = scatter_time(unit_params[i])
        for j, u in enumerate(fwd_order):
            start_ops = [("agf", fwd_order[j + 1])] if j + 1 < K else []
            tasks.append((sigma * fwd_b[u], ("agf", u), start_ops, []))
        for i in range(K):
            gate = ("agb", i) if i > 0 else None
            start_ops = [("agb", i + 1)] if i + 1 < K else []
            tasks.append((sigma * back[i] + bucket_overhead, gate, start_ops, [("rs", i)]))
        last_op = ("rs", K - 1)
    else:
        tasks.append((sigma * profile.forward_time, None, [], []))
        # backward: one task per gap between bucket ready times
        t_prev = 0.0
        for i, d in enumerate(unit_done):
            ops_dur[("rs", i)] = scatter_time(unit_params[i])
            end = d if fusion is not None else sigma * d
            tasks.append((max(0.0, end - t_prev) + bucket_overhead, None, [], [("rs", i)]))
            t_prev = max(t_prev, end)
        tasks.append((max(0.0, sigma * backward_time - t_prev), None, [], []))
        for i in range(K):
            ops_dur[("ag", i)] = gather_time(unit_params[i])
        last_op = ("ag", K - 1)
    ops_dur[last_op] += sync_overhead

    done = {}
    queue = []  # issued, not started
    channel_busy = False
    events = []  # (time, seq, kind, payload)
    seq = 0

    def push(t, kind, payload):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, payload))

    def issue(op, t):
        queue.append(op)
        push(t, "kick", None)

    # the compute stream runs tasks in order; a task starts when the previous one has
    # ended and its gate op is done
    task_i = 0
    compute_running = False

    def try_start_compute(t):
        nonlocal task_i, compute_running
        if compute_running or task_i >= len(tasks):
            return
        dur, gate, start_ops, _ = tasks[task_i]
        if gate is not None and gate not in done:
            return
        for op in start_ops:
            issue(op, t)
        compute_running = True
        push(t + dur, "task_end", task_i)

    def try_start_channel(t):
        nonlocal channel_busy
        if channel_busy or not queue:
            return
        op = queue.pop(0)
        channel_busy = True
        push(t + ops_dur[op], "op_end", op)

    if strategy in ("zero3", "hybrid_shard"):
        issue(("agf", K - 1), 0.0)  # the first unit of forward: gathered at time 0
    push(0.0, "kick", None)
    end_compute = 0.0
    last_comm = 0.0
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if kind == "task_end":
            compute_running = False
            for op in tasks[payload][3]:
                issue(op, t)
            task_i += 1
            end_compute = t
        elif kind == "op_end":
            channel_busy = False
            done[payload] = t
            last_comm = max(last_comm, t)
        try_start_channel(t)
        try_start_compute(t)
    assert task_i == len(tasks) and not queue, "deadlock in the sharded schedule"
    micro = max(end_compute, last_comm)  # one micro-batch, its collectives included
    if strategy in ("zero3", "hybrid_shard"):
        return grad_accum * micro + update
    # zero1/zero2: step after backward and the reduce-scatters, then the all-gathers
    if strategy == "zero2":
        t = grad_accum * micro + update
    else:  # zero1: the micro-batches before the last one reduce nothing
        t = (grad_accum - 1) * sigma * (profile.forward_time + backward_time)
        t += micro + update
    if param_return == "broadcast":
        b = broadcasts or group
        total = sum(unit_params) * pbytes
        chunk = broadcast_chunk or 524288 * 2 * nics_per_node
        one = _chain_broadcast(total / b, group, chunk, bw_eff, intra_eff, alpha,
                               intra_alpha, per_node=gpus_per_node, nics=nics_per_node)
        one += collective_overhead + (codec_cost * total / b if compression > 1 else 0.0)
        return t + b * one + sync_overhead
    for i in range(K):
        t += ops_dur[("ag", i)]
    return t


DTYPE_BYTES = {"fp32": 4, "bf16": 2}  # bytes per element of the dtypes the tests draw
TOPOLOGY_KEYS = ("gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha")


def config_topology(cfg):
    """The topology keywords a drawn configuration holds (none of them: a flat cluster)."""
    return {k: cfg[k] for k in TOPOLOGY_KEYS if k in cfg}


def simulate_config(profile, cfg, **extra):
    """Iteration time [s] of a configuration drawn by the property tests, by
    :func:`simulate_sharded` (test_shard_group's ``group_configurations`` and those built
    on it).

    ``cfg`` holds strategy, fusion ("ddp" or "horovod": zero1/2's bucket fusion with no
    wrap; otherwise the wrap: "none", "block", "module" or an object with ``min_params``),
    n, bw, param_dtype, reduce_dtype (None or a key of DTYPE_BYTES), utilization,
    compression, codec_cost, alpha, slowdown, collective_overhead, sync_overhead, and
    optionally algorithm (default "ring"), shard_group and the TOPOLOGY_KEYS. ``extra``
    goes to simulate_sharded as it is (``param_return=`` and its settings).
    """
    fusion = cfg["fusion"]
    wrap = getattr(fusion, "min_params", fusion)
    des_fusion = fusion if fusion in ("ddp", "horovod") else None
    if des_fusion:
        wrap = "none"
    return simulate_sharded(
        profile, cfg["n"], cfg["bw"], strategy=cfg["strategy"], wrap=wrap, fusion=des_fusion,
        param_bytes=DTYPE_BYTES.get(cfg["param_dtype"]),
        reduce_bytes=DTYPE_BYTES.get(cfg["reduce_dtype"]), utilization=cfg["utilization"],
        compression=cfg["compression"], algorithm=cfg.get("algorithm", "ring"),
        alpha=cfg["alpha"], codec_cost=cfg["codec_cost"], slowdown=cfg["slowdown"],
        collective_overhead=cfg["collective_overhead"], sync_overhead=cfg["sync_overhead"],
        element_bytes=DTYPE_BYTES[profile.precision], grad_accum=profile.grad_accum,
        shard_group=cfg.get("shard_group"), **config_topology(cfg), **extra)


def wire_bytes_per_gpu(strategy, unit_params, n, param_bytes, reduce_bytes):
    """Bytes each GPU sends per iteration over a flat ring (no topology): a reduce-scatter
    or all-gather of S bytes sends (n-1)/n S; zero3 all-gathers every unit twice except
    the last of forward, which stays gathered (unit_params in backward order)."""
    f = (n - 1) / n
    p = sum(unit_params)
    if strategy in ("zero1", "zero2"):
        return f * (p * reduce_bytes + p * param_bytes)
    return f * (p * reduce_bytes + p * param_bytes + (p - unit_params[0]) * param_bytes)


__all__ = ["simulate_sharded", "simulate_config", "config_topology", "group_units",
           "size_units", "wire_bytes_per_gpu", "math"]
