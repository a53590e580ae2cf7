"""sympy derivations against the numpy implementation."""

import numpy as np
import pytest
import sympy as sp

import scalemodel as sm
from scalemodel import derivations as d

L2 = sp.Symbol("log2n", positive=True)
EXPR = d.collective_expressions(L2)


@pytest.mark.parametrize("alg", sorted(EXPR))
@pytest.mark.parametrize("n", [2, 4, 16, 64, 256])
def test_collectives_match_sympy(alg, n):
    f = sp.lambdify((d.S, d.n, d.alpha, d.gamma, d.x, L2), EXPR[alg], "numpy")
    rng = np.random.default_rng(n)
    for _ in range(20):
        s, a, g = rng.uniform(1, 1e9), rng.uniform(0, 1e-4), rng.uniform(0, 1e-10)
        bw, u, r = rng.uniform(1e8, 1e12), rng.uniform(0.1, 1), rng.uniform(1, 100)
        x = 1 / (u * bw * r)
        expected = f(s, n, a, g, x, np.log2(n))
        got = sm.collective_time(alg, s, n, bw, alpha=a, utilization=u, compression=r,
                                 reduction=sm.ReductionCost(gamma=g))
        assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_fifo_recurrence_equals_closed_form(k):
    R = sp.symbols(f"R1:{k + 1}", real=True)
    C = sp.symbols(f"c1:{k + 1}", nonnegative=True)
    rec, closed = d.fifo_finish(R, C), d.fifo_closed_form(R, C)
    f_rec, f_closed = sp.lambdify(R + C, rec), sp.lambdify(R + C, closed)
    rng = np.random.default_rng(k)
    for vals in rng.uniform(0, 1, (200, 2 * k)):
        assert f_rec(*vals) == pytest.approx(f_closed(*vals), rel=1e-14)


def test_solver_inverse_matches_numeric(synthetic):
    ex = d.solver_expressions()
    res = sm.min_compression(synthetic, 1e9, n=32, target=0.8)
    assert res.feasible and res.ratio > 1
    # recover the same ratio from sympy's r_min on the binding line of the solution
    sc = sm.Scenario.build(synthetic)
    lines, env = sc.lines(32, True)
    x = 1 / (1e9 * res.ratio)
    j = int(env.argmax(x))
    p = synthetic
    level = p.iteration_time / 0.8 - p.forward_time - p.update_time
    sym = ex["symbols"]
    r_min = float(ex["r_min"].subs({sym["R"]: lines.ready[j],
                                     sym["A"]: lines.latency[j] + lines.overhead[j],
                                     sym["W"]: lines.bits[j], sym["L"]: level,
                                     d.u: 1.0, d.B: 1e9}))
    assert res.ratio == pytest.approx(r_min, rel=1e-9)
    assert res.scaling_factor == pytest.approx(0.8, rel=1e-9)
    assert res.scaling_factor >= 0.8
