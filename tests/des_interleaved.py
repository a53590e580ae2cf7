"""Discrete-event reference for Megatron-LM's pipeline schedules (1F1B and interleaved 1F1B).

Independent of :mod:`scalemodel.parallel`: it builds each stage's order of operations as
Megatron-LM's ``megatron/core/pipeline_parallel/schedules.py`` does
(``forward_backward_pipelining_without_interleaving`` and ``..._with_interleaving``,
NVIDIA/Megatron-LM@f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4) and runs the operations as
events: a stage executes its list in order, each operation starting when the stage is free
and its input has arrived (point-to-point transfers take zero time). The step time is the
last operation's end; a stage's idle time is the step time less its busy time.

Order of a stage ``s`` of ``p`` with ``v`` chunks and ``m`` micro-batches (``m`` a
multiple of ``p`` when ``v > 1``), virtual micro-batch ``k`` in ``0 .. m v - 1``:

* chunk of ``k``: ``(k mod p v) // p`` for a forward, ``v - 1 -`` that for a backward;
* micro-batch of ``k``: ``(k // (p v)) p + k mod p``;
* warm-up forwards: ``m v`` if ``m == p`` (interleaved), else ``min(m v, 2 (p - s - 1) +
  (v - 1) p)``; without interleaving ``min(m, p - s - 1)``;
* then one forward and one backward alternately, then the remaining backwards.

Dependencies: forward of (stage s, chunk c, micro-batch j) needs forward (s-1, c, j), or
for s = 0 and c > 0 forward (p-1, c-1, j); backward (s, c, j) needs backward (s+1, c, j),
or for s = p-1 backward (0, c+1, j) if c < v-1, else its own forward (p-1, v-1, j).
"""

from __future__ import annotations


def stage_order(s, p, v, m):
    """The operations of stage ``s`` in Megatron's order: ``("F"|"B", chunk, micro-batch)``."""
    total = m * v

    def fwd(k):
        return ("F", (k % (p * v)) // p, (k // (p * v)) * p + k % p)

    def bwd(k):
        return ("B", v - 1 - (k % (p * v)) // p, (k // (p * v)) * p + k % p)

    if v == 1:
        warm = min(m, p - s - 1)
    elif m == p:
        warm = total
    else:
        warm = min(total, 2 * (p - s - 1) + (v - 1) * p)
    ops = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        ops.append(fwd(k + warm))
        ops.append(bwd(k))
    ops.extend(bwd(k) for k in range(total - warm, total))
    return ops


def _dependency(op, s, p, v):
    kind, c, j = op
    if kind == "F":
        if s > 0:
            return ("F", s - 1, c, j)
        return ("F", p - 1, c - 1, j) if c > 0 else None
    if s < p - 1:
        return ("B", s + 1, c, j)
    return ("B", 0, c + 1, j) if c < v - 1 else ("F", p - 1, c, j)


def simulate(p, v, m, f, b):
    """Run the schedule; return ``(step time, idle time of each stage)`` [s].

    ``f`` and ``b`` are one stage's forward and backward of one micro-batch (all its
    chunks); a chunk takes ``f / v`` and ``b / v``.
    """
    step = simulate_chunks(p, v, m, [[f / v] * v] * p, [[b / v] * v] * p)
    busy = m * (f + b)
    return step, [step - busy for _ in range(p)]


def simulate_chunks(p, v, m, fwd, bwd):
    """Run the schedule with each chunk's own times: ``fwd[s][c]`` and ``bwd[s][c]``, the
    forward and backward of one micro-batch through chunk ``c`` of stage ``s`` (Megatron
    puts the embedding in chunk 0 of stage 0 and the head in chunk ``v - 1`` of stage
    ``p - 1``); return the step time [s]."""
    orders = [stage_order(s, p, v, m) for s in range(p)]
    done = {}
    pos = [0] * p
    free = [0.0] * p
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op = orders[s][pos[s]]
                dep = _dependency(op, s, p, v)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                free[s] = start + (fwd if op[0] == "F" else bwd)[s][op[1]]
                done[(op[0], s, op[1], op[2])] = free[s]
                pos[s] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule deadlocks (p={p}, v={v}, m={m})")
    return max(free)
