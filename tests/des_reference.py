"""A small discrete-event simulation of one data-parallel iteration.

It is the independent reference the closed forms are tested against, so it shares no
model code with scalemodel: gradients become ready one by one (events on a heap), a
fusion policy written here closes messages, one communication channel serves messages
first-in first-out, and each collective is played step by step (every step: one
message latency, its bytes on the wire, its reductions). Only the profile data and the
reduction-cost callable come from the library.
"""

from __future__ import annotations

import heapq
import math


def _ring_steps(s, n, red):
    """Reduce-scatter: n-1 steps of s/n bytes, each followed by a reduction; all-gather:
    n-1 steps of s/n bytes. Yields (latency_count, wire_bytes, overhead_seconds)."""
    for _ in range(n - 1):
        yield 1, s / n, red(s / n)
    for _ in range(n - 1):
        yield 1, s / n, 0.0


def _tree_steps(s, n, red):
    depth = math.ceil(math.log2(n))
    # pipelined double binary tree: the busiest rank's sends, half going up, half down
    half = _dtree_send_per_direction(n) * s / 2  # NCCL's trees over one-GPU nodes
    yield depth, half, red(s)
    yield depth, half, 0.0


def _hd_steps(s, n, red):
    k = int(math.floor(math.log2(n)))
    p = 2**k
    if p != n:
        yield 1, s, red(s)  # fold the extra ranks in
    chunk = s
    for _ in range(k):  # recursive halving
        chunk /= 2
        yield 1, chunk, red(chunk)
    for _ in range(k):  # recursive doubling
        yield 1, chunk, 0.0
        chunk *= 2
    if p != n:
        yield 1, s, 0.0  # send the result back


def _allgather_steps(s, n, red):
    for _ in range(n - 1):
        yield 1, s, 0.0


def _ps_steps(s, n, red, servers):
    if servers is None:
        shard = s / n
        yield 1, (n - 1) * shard, (n - 1) * red(shard)  # push to n-1 peers, sum their shards
        yield 1, (n - 1) * shard, 0.0  # pull
    else:
        busiest = max(s, n * s / servers)
        yield 1, busiest, n * red(s / servers)
        yield 1, busiest, 0.0


def _btree(n, rank):
    """NCCL's binary tree (src/graph/trees.cc, ncclGetBtree): (parent, children)."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    down0 = -1 if low == 0 else rank - low
    down1 = -1 if low == 0 else rank + low
    while down1 >= n:
        down1 = -1 if low == 0 else rank + low
        low >>= 1
    return up, [c for c in (down0, down1) if c != -1]


def _dtree_send_per_direction(m):
    """Busiest node's bytes sent per byte all-reduced, over NCCL's double binary tree of
    m nodes (ncclGetDtree: the second tree mirrors the first, or shifts it when m is
    odd); each tree carries half the buffer up (reduce) and down (broadcast)."""
    worst = 0.0
    for rank in range(m):
        trees = [_btree(m, rank)]
        if m % 2:
            up, ch = _btree(m, (rank - 1 + m) % m)
            trees.append((-1 if up == -1 else (up + 1) % m, [(c + 1) % m for c in ch]))
        else:
            up, ch = _btree(m, m - 1 - rank)
            trees.append((-1 if up == -1 else m - 1 - up, [m - 1 - c for c in ch]))
        sent = sum(0.5 * len(ch) + (0.5 if up != -1 else 0.0) for up, ch in trees)
        worst = max(worst, sent)
    return worst


def _flat_ring_topology(s, n, bw_eff, intra_eff, alpha, intra_alpha, red, g, nics, passes,
                        reduce_first):
    """A flat ring over n GPUs placed g per node: every step moves s/n bytes over every
    ring link at once, so a step lasts as long as its slowest link (a NIC, which carries
    one ring edge out of its node per step, shared by the node's NICs, or a GPU's
    intra-node link). A chunk's hop pays the intra- or inter-node latency of the link it
    crosses (the chunk starting at GPU 0 goes 0 -> 1 -> ... in ring order)."""
    m = -(-n // g)
    t = 0.0
    for phase in range(passes):
        for hop in range(n - 1):
            crosses = (hop // g) != ((hop + 1) // g)
            nic = (s / n / nics * 8 / bw_eff) if m > 1 else 0.0
            intra = (s / n * 8 / intra_eff) if min(g, n) > 1 else 0.0
            t += (alpha if crosses else intra_alpha) + max(nic, intra)
            if phase == 0 and reduce_first:
                t += red(s / n)
    return t


def _floor(reduction):
    """A reduction's launch latency: the linear form's constant, or a table's least time."""
    if reduction.table_bytes is not None:
        return float(min(reduction.table_seconds))
    return float(reduction.latency)


def _launch_once(red, floor, per_byte):
    """A reduction inside one collective kernel: its launch latency ``floor`` is paid by
    the collective once (added by ``collective_seconds``), every step its bytes at the
    reduction's per-byte cost."""
    return lambda b: per_byte * b if b > 0 else 0.0


def _per_byte(reduction):
    """Marginal cost of a reduction: gamma, or a table's slope from its floor to its end."""
    if reduction.table_bytes is not None:
        return max(reduction.table_seconds[-1] - _floor(reduction), 0.0) / \
            reduction.table_bytes[-1]
    return float(reduction.gamma)


def collective_seconds(algorithm, s, n, bw_eff, alpha, red, *, gpus_per_node=None,
                       intra_bw=2.4e12, intra_alpha=0.0, ps_servers=None, nics_per_node=1,
                       ratio=1.0, red_floor=None, red_per_byte=None):
    """Play one collective step by step; bw_eff = utilization x bw x ratio [bits/s]."""
    if n == 1:
        return 0.0
    if red_floor is not None and algorithm not in ("allgather", "hierarchical") and s > 0:
        return red_floor + collective_seconds(
            algorithm, s, n, bw_eff, alpha, _launch_once(red, red_floor, red_per_byte),
            gpus_per_node=gpus_per_node, intra_bw=intra_bw, intra_alpha=intra_alpha,
            ps_servers=ps_servers, nics_per_node=nics_per_node, ratio=ratio)
    intra_eff = intra_bw * ratio
    if gpus_per_node is not None and algorithm in ("ring", "allgather"):
        if algorithm == "ring":
            return _flat_ring_topology(s, n, bw_eff, intra_eff, alpha, intra_alpha, red,
                                       gpus_per_node, nics_per_node, 2, True)
        # all-gather of s bytes from every rank: n-1 hops of s bytes
        return _flat_ring_topology(s * n, n, bw_eff, intra_eff, alpha, intra_alpha, red,
                                   gpus_per_node, nics_per_node, 1, False)
    if gpus_per_node is not None and algorithm == "tree":
        g = min(gpus_per_node, n)
        m = -(-n // gpus_per_node)
        depth = math.ceil(math.log2(m)) if m > 1 else 0
        latency = 2 * ((g - 1) * intra_alpha + depth * alpha)
        nic = _dtree_send_per_direction(m) * s / nics_per_node * 8 / bw_eff if m > 1 else 0.0
        chain = s * 8 / intra_eff if g > 1 else 0.0  # up the chain and down: s each way
        return latency + max(nic, chain) + red(s)
    if algorithm == "hierarchical":
        g = min(gpus_per_node or 8, n)
        m = n // g
        t = 0.0
        if red_floor is not None and s > 0:  # two reducing collectives: two launches
            t += red_floor * ((g > 1) + (m > 1))
            red = _launch_once(red, red_floor, red_per_byte)
        # intra-node reduce-scatter and all-gather: a ring of g at intra_bw, uncompressed
        for lat, nbytes, ovh in _ring_steps(s, g, red):
            t += intra_alpha + nbytes * 8 / intra_bw + ovh
        # inter-node ring of m on s/g bytes; g rings share the node link (g x the bytes)
        for lat, nbytes, ovh in _ring_steps(s / g, m, red):
            t += alpha + g * nbytes * 8 / bw_eff / nics_per_node + ovh
        return t
    steps = {
        "ring": lambda: _ring_steps(s, n, red),
        "tree": lambda: _tree_steps(s, n, red),
        "halving-doubling": lambda: _hd_steps(s, n, red),
        "allgather": lambda: _allgather_steps(s, n, red),
        "ps": lambda: _ps_steps(s, n, red, ps_servers),
    }[algorithm]()
    return sum(lat * alpha + nbytes * 8 / bw_eff + ovh for lat, nbytes, ovh in steps)


def _fuse(kind, sizes, ready, params, counts=None):
    """Fusion written independently: returns (bucket bytes, bucket ready) lists; the
    tensors of each bucket are appended to ``counts`` when given."""
    out, cur, cur_ready, cur_n = [], 0.0, 0.0, 0
    counts = [] if counts is None else counts
    if kind == "none":
        counts.extend([1] * len(sizes))
        return list(zip(sizes, ready))
    if kind == "ddp":
        limit = params.get("first", 2**20)
        for s, t in zip(sizes, ready):
            cur += s
            cur_n += 1
            cur_ready = max(cur_ready, t)
            if cur >= limit:
                out.append((cur, cur_ready))
                counts.append(cur_n)
                cur, cur_ready, cur_n = 0.0, 0.0, 0
                limit = params.get("cap", 25 * 2**20)
    elif kind == "horovod":
        last = 0.0
        for s, t in zip(sizes, ready):
            cur += s
            cur_n += 1
            cur_ready = t
            if t - last >= params.get("cycle", 5e-3) or cur >= params.get("threshold", 64 * 2**20):
                out.append((cur, cur_ready))
                counts.append(cur_n)
                cur, last, cur_n = 0.0, t, 0
    if cur > 0:
        out.append((cur, cur_ready))
        counts.append(cur_n)
    return out


def blom_expected_maximum(n):
    """Blom's (n - 0.375)/(n + 0.25) quantile of the standard normal, found by bisection
    on the normal distribution function (math.erfc), independently of scipy."""
    if n <= 1:
        return 0.0
    q = (n - 0.375) / (n + 0.25)
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-16 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def _compute_stream(ready, stretch, bucket_overhead):
    """The backward pass on the compute stream: bucket k's last gradient is computed at
    ``stretch`` times its ready time plus the framework work of the buckets before it,
    then its own work (hook, copy, launch) runs on the stream for ``bucket_overhead``
    seconds; the bucket is ready for the channel when that work ends. Returns the
    buckets' ready times and the stream's total hook work."""
    out, hooks = [], 0.0
    for t in sorted(range(len(ready)), key=lambda k: ready[k]):
        done = stretch * ready[t] + hooks
        hooks += bucket_overhead
        out.append((t, done + bucket_overhead))
    return [r for _, r in sorted(out)], hooks


def _host_stream(counts, order, lead, per_tensor, per_bucket):
    """The wrapper's host work, bucket by bucket in communication order: each bucket's
    work (its tensors' hooks, its launch) is taken from the host's remaining lead over the
    GPU first; what the lead cannot cover delays the GPU, and every later bucket. Returns
    each bucket's delay and the total."""
    delays, late = [0.0] * len(counts), 0.0
    for k in order:
        work = counts[k] * per_tensor + per_bucket
        covered = min(lead, work)
        lead -= covered
        late += work - covered
        delays[k] = late
    return delays, late


def simulate_iteration(profile, n, bw, *, utilization=1.0, compression=1.0,
                       algorithm="ring", fusion="ddp", alpha=0.0, codec_cost=0.0,
                       fusion_params=None, slowdown=1.0, collective_overhead=0.0,
                       sync_overhead=0.0, grad_accum=1, bucket_overhead=0.0,
                       iteration_overhead=0.0, straggler_spread=0.0, host=None,
                       **topology):
    """Iteration time [s] of ``n`` workers by discrete-event simulation.

    With ``grad_accum`` micro-batches per step, those before the last run forward and
    backward without communicating (DDP's ``no_sync``); the last is simulated.

    ``slowdown`` stretches forward and backward (every gradient is ready ``slowdown``
    times later) when n > 1; every collective occupies the channel
    ``collective_overhead`` seconds longer, and after the last one the iteration waits
    ``sync_overhead`` seconds more (the framework's final synchronization).

    The framework terms (n > 1 only): the slowest of ``n`` workers computes
    ``1 + straggler_spread * e_n`` times longer than the mean (Blom's expected maximum
    of n standard normals, every micro-batch; the fusion sees the mean timeline); every
    bucket's work ``bucket_overhead`` runs on the compute stream of the communicating
    micro-batch when the bucket closes, delaying what comes after it; the wrapper's
    ``iteration_overhead`` runs once before the step's first forward.

    ``host = (per_tensor, per_bucket, device_time, host_time)`` (n > 1): the wrapper's
    host work per tensor and per bucket, spent against the host's lead over the GPU
    (:func:`_host_stream`; the lead is the GPU's step, ``device_time`` included, minus
    ``host_time``, the iteration when None), the rest delaying the bucket and all after
    it; ``device_time`` runs on the GPU once before forward."""
    bw_eff = utilization * bw * compression
    sigma = slowdown if n > 1 else 1.0
    stretch = 1.0 + straggler_spread * blom_expected_maximum(n) if n > 1 else 1.0
    counts = []
    buckets = _fuse(fusion, list(profile.tensor_bytes),
                    [sigma * t for t in profile.tensor_ready], fusion_params or {}, counts)
    ready, hooks = _compute_stream([t for _, t in buckets], stretch,
                                   bucket_overhead if n > 1 else 0.0)
    device = 0.0
    if host is not None and n > 1:
        per_tensor, per_bucket, device, host_time = host
        step = grad_accum * (profile.forward_time + profile.backward_time)
        plain = step + profile.update_time
        lead = sigma * stretch * step + profile.update_time + device - (
            plain if host_time is None else host_time)
        order = sorted(range(len(ready)), key=lambda k: ready[k])
        delays, late = _host_stream(counts, order, max(lead, 0.0), per_tensor, per_bucket)
        ready = [r + d for r, d in zip(ready, delays)]
        hooks += late
    buckets = [(s, t) for (s, _), t in zip(buckets, ready)]
    sigma *= stretch
    red = profile.reduction
    # events: (time, order, kind, payload)
    events = [(t, i, "ready", i) for i, (_, t) in enumerate(buckets)]
    heapq.heapify(events)
    queue, busy_until, channel_busy, last_end, seq = [], 0.0, False, -math.inf, len(buckets)
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if kind == "ready":
            queue.append(payload)
        else:  # "done"
            channel_busy = False
            last_end = t
        if not channel_busy and queue:
            k = queue.pop(0)
            s = buckets[k][0]
            dur = collective_seconds(algorithm, s, n, bw_eff, alpha, lambda b: float(red(b)),
                                     ratio=compression, red_floor=_floor(red),
                                     red_per_byte=_per_byte(red), **topology)
            if compression > 1 and n > 1:
                dur += codec_cost * s
            if n > 1:
                dur += collective_overhead
                if not queue and k == len(buckets) - 1:
                    dur += sync_overhead  # the last collective: the iteration's final wait
            channel_busy = True
            seq += 1
            heapq.heappush(events, (t + dur, seq, "done", k))
    end = max(sigma * profile.backward_time + hooks, last_end if n > 1 else -math.inf)
    quiet = (grad_accum - 1) * sigma * (profile.forward_time + profile.backward_time)
    wrapper = iteration_overhead + device if n > 1 else 0.0
    return quiet + wrapper + sigma * profile.forward_time + end + profile.update_time


def _fuse_indices(kind, sizes, ready, params):
    """Fusion as in _fuse, but returning the tensor indices of every bucket."""
    if kind == "none":
        return [[i] for i in range(len(sizes))]
    groups, cur, acc = [], [], 0.0
    limit, last = params.get("first", 2**20), 0.0
    for i, (s, t) in enumerate(zip(sizes, ready)):
        cur.append(i)
        acc += s
        if kind == "ddp":
            close = acc >= limit
        else:  # horovod
            close = (t - last >= params.get("cycle", 5e-3)
                     or acc >= params.get("threshold", 64 * 2**20))
        if close:
            groups.append(cur)
            cur, acc = [], 0.0
            limit, last = params.get("cap", 25 * 2**20), t
    if cur:
        groups.append(cur)
    return groups


def _bucket_phases_seconds(group, phase_bytes, phase_algorithms, algorithm, n, bw_eff,
                           alpha, red):
    """Seconds [s] the channel spends on one bucket (the tensors ``group``): its phases
    one after the other, each a collective over the bucket's bytes of that phase ("allreduce"
    means ``algorithm``); a phase with no bytes costs nothing."""
    dur = 0.0
    for p, alg in enumerate(phase_algorithms):
        nbytes = sum(phase_bytes[i][p] for i in group)
        if nbytes > 0:
            dur += collective_seconds(algorithm if alg == "allreduce" else alg, nbytes, n,
                                      bw_eff, alpha, lambda b: float(red(b)),
                                      red_floor=_floor(red), red_per_byte=_per_byte(red))
    return dur


def simulate_compressed_iteration(profile, n, bw, *, phase_bytes, phase_algorithms,
                                  tensor_codec, bucket_codec=0.0, utilization=1.0,
                                  algorithm="ring", fusion="ddp", alpha=0.0,
                                  fusion_params=None, tensor_decode=None):
    """Iteration time [s] of ``n`` workers with a compressor, by discrete-event simulation.

    ``phase_bytes[i][p]`` are the bytes tensor i sends in phase p (a compressor's
    accounting), ``phase_algorithms[p]`` the collective of phase p ("allreduce" means
    ``algorithm``), ``tensor_codec[i]`` its encode + decode seconds and ``bucket_codec``
    seconds added to every bucket holding a tensor with codec work. A bucket plays its
    phases one after the other, each as its own collective over the bucket's tensors.

    With ``tensor_decode`` the codec runs on the compute stream (``codec_stream=
    "compute"``): ``tensor_codec[i]`` is then tensor i's encode and ``tensor_decode[i]``
    its decode, ``bucket_codec`` split half and half between them. The compute stream
    plays the backward pass and, when a bucket is ready, its encode (which delays the
    rest of the backward pass); the bucket then goes to the channel (FIFO), followed
    there by its decode; the decodes are compute-stream work too, so the stream ends at
    the backward pass plus every encode and decode.
    """
    if tensor_decode is not None:
        return _simulate_compute_stream(profile, n, bw, phase_bytes, phase_algorithms,
                                        tensor_codec, tensor_decode, bucket_codec,
                                        utilization, algorithm, fusion, alpha,
                                        fusion_params)
    bw_eff = utilization * bw
    sizes, ready = list(profile.tensor_bytes), list(profile.tensor_ready)
    groups = _fuse_indices(fusion, sizes, ready, fusion_params or {})
    red = profile.reduction
    t_free, last_end = 0.0, -math.inf
    for group in groups:  # FIFO: a bucket starts when ready and the channel is free
        start = max(t_free, max(ready[i] for i in group))
        dur = _bucket_phases_seconds(group, phase_bytes, phase_algorithms, algorithm, n,
                                     bw_eff, alpha, red)
        codec = sum(tensor_codec[i] for i in group)
        if n > 1 and codec > 0:
            dur += codec + bucket_codec
        t_free = start + dur
        last_end = t_free
    end = max(profile.backward_time, last_end if n > 1 else -math.inf)
    return profile.forward_time + end + profile.update_time


def _simulate_compute_stream(profile, n, bw, phase_bytes, phase_algorithms, tensor_encode,
                             tensor_decode, bucket_codec, utilization, algorithm, fusion,
                             alpha, fusion_params):
    """The compute-stream codec of :func:`simulate_compressed_iteration`, event by event."""
    bw_eff = utilization * bw
    sizes, ready = list(profile.tensor_bytes), list(profile.tensor_ready)
    groups = _fuse_indices(fusion, sizes, ready, fusion_params or {})
    red = profile.reduction
    stream_delay = 0.0  # compute-stream time the encodes so far added to the backward pass
    stream_work = 0.0  # every encode and decode on the compute stream
    t_free, last_end = 0.0, -math.inf
    for group in groups:
        enc = sum(tensor_encode[i] for i in group)
        dec = sum(tensor_decode[i] for i in group)
        if n > 1 and enc + dec > 0:
            enc, dec = enc + bucket_codec / 2, dec + bucket_codec / 2
        elif n <= 1:
            enc = dec = 0.0
        # the bucket's gradients appear after the backward work before them and the
        # encodes of the earlier buckets; its own encode follows on the stream
        stream_delay += enc
        stream_work += enc + dec
        encoded = max(ready[i] for i in group) + stream_delay
        start = max(t_free, encoded)
        dur = _bucket_phases_seconds(group, phase_bytes, phase_algorithms, algorithm, n,
                                     bw_eff, alpha, red)
        t_free = start + dur + dec
        last_end = t_free
    end = max(profile.backward_time + stream_work, last_end if n > 1 else -math.inf)
    return profile.forward_time + end + profile.update_time
