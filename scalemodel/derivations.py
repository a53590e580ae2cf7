r"""Symbolic derivations (sympy) of the closed forms, for the docs and the tests.

Each function returns sympy expressions built from first principles (step counts and
bytes per step), independently of the numpy code in :mod:`scalemodel.collectives`,
:mod:`scalemodel.overlap` and :mod:`scalemodel.solvers`; the test suite evaluates both
and checks they agree, and the design guide prints them with :func:`sympy.latex`.

Symbols: :math:`S` message bytes, :math:`n` workers, :math:`\alpha` latency [s],
:math:`\gamma` reduction time per byte [s/byte], :math:`u` utilization, :math:`B` line
rate [bits/s], :math:`r` compression ratio, :math:`x = 1/(u B r)` [s/bit].
"""

from __future__ import annotations

import sympy as sp

__all__ = ["SYMBOLS", "collective_expressions", "fifo_finish", "fifo_closed_form",
           "solver_expressions"]

S, n, alpha, gamma, u, B, r, x = sp.symbols("S n alpha gamma u B r x", positive=True)
SYMBOLS = {"S": S, "n": n, "alpha": alpha, "gamma": gamma, "u": u, "B": B, "r": r, "x": x}


def collective_expressions(log2n=None):
    """Times of the collectives as sympy expressions in S, n, alpha, gamma, x.

    Each is summed step by step: for the ring, n-1 reduce-scatter steps of S/n bytes
    (each with one reduction of S/n bytes) and n-1 all-gather steps of S/n bytes. For
    halving-doubling (n a power of two) the k-th halving step moves S/2^k bytes.
    ``log2n`` is the symbol used for :math:`\\log_2 n` (a fresh one by default).
    """
    k = sp.Symbol("k", integer=True, positive=True)
    L = log2n if log2n is not None else sp.Symbol("log2n", positive=True)
    step = lambda nbytes: alpha + 8 * nbytes * x  # noqa: E731
    ring = sp.summation(step(S / n) + gamma * S / n, (k, 1, n - 1)) + \
        sp.summation(step(S / n), (k, 1, n - 1))
    halving = sp.summation(step(S / 2**k) + gamma * S / 2**k, (k, 1, L))
    doubling = sp.summation(step(S / 2**k), (k, 1, L))
    return {
        "ring": sp.simplify(ring),
        "halving-doubling": sp.factor_terms(
            sp.expand(halving + doubling).xreplace({2**L: n, 2**(-L): 1 / n})),
        # the busiest link of NCCL's double binary tree: S on two ranks, 1.5 S on three
        "tree": 2 * L * alpha + sp.Piecewise((1, sp.Eq(n, 2)), (sp.Rational(3, 2), sp.Eq(n, 3)),
                                             (2, True)) * 8 * S * x + gamma * S,
        "allgather": sp.simplify(sp.summation(step(S), (k, 1, n - 1))),
        "ps": 2 * alpha + 2 * 8 * S * (n - 1) / n * x + gamma * S * (n - 1) / n,
    }


def fifo_finish(ready, comm):
    """The FIFO recurrence F_k = max(F_{k-1}, R_k) + c_k, unrolled symbolically."""
    f = None
    for rk, ck in zip(ready, comm):
        f = (rk if f is None else sp.Max(f, rk)) + ck
    return f


def fifo_closed_form(ready, comm):
    """Closed form max_j (R_j + sum_{i >= j} c_i) of :func:`fifo_finish`."""
    K = len(ready)
    return sp.Max(*[ready[j] + sum(comm[j:]) for j in range(K)])


def solver_expressions():
    """The exact inverses: x* of one binding line, then r_min and B_min.

    A line :math:`R + A + W x` meets the level :math:`L` at :math:`x^*`; with
    :math:`x = 1/(u B r)` that gives the minimum ratio and the required bandwidth.
    """
    R, A, W, Lvl = sp.symbols("R A W L", positive=True)
    x_star = sp.solve(sp.Eq(R + A + W * x, Lvl), x)[0]
    r_min = sp.solve(sp.Eq(1 / (u * B * r), x_star), r)[0]
    b_min = sp.solve(sp.Eq(1 / (u * B * r), x_star), B)[0]
    return {"x_star": x_star, "r_min": sp.simplify(r_min), "B_min": sp.simplify(b_min),
            "symbols": {"R": R, "A": A, "W": W, "L": Lvl}}
