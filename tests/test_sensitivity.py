"""Analytic sensitivities against central finite differences and a sympy derivation."""

import numpy as np
import pytest
import sympy as sp

import scalemodel as sm

POINTS = [("bert", 64, 10e9, 1.0, 1.0, 1e-5), ("resnet50", 16, 5e9, 0.7, 2.0, 0.0),
          ("vgg16", 32, 40e9, 0.5, 3.0, 3e-6), ("gpt2", 8, 2e9, 1.0, 1.5, 5e-5)]


def sf(model, n, bw, u, r, alpha):
    return sm.scaling_factor(model, n, bw, utilization=u, compression=r, alpha=alpha)


@pytest.mark.parametrize("model,n,bw,u,r,alpha", POINTS)
def test_against_central_differences(model, n, bw, u, r, alpha):
    s = sm.sensitivities(model, n, bw, utilization=u, compression=r, alpha=alpha)
    assert s.scaling_factor == pytest.approx(sf(model, n, bw, u, r, alpha), rel=1e-12)
    h = 1e-6
    cases = {"d_bw": (bw, lambda v: sf(model, n, v, u, r, alpha)),
             "d_utilization": (u, lambda v: sf(model, n, bw, v, r, alpha)),
             "d_compression": (r, lambda v: sf(model, n, bw, u, v, alpha))}
    if alpha > 0:
        cases["d_alpha"] = (alpha, lambda v: sf(model, n, bw, u, r, v))
    for name, (p, f) in cases.items():
        step = h * p
        # central where both sides are valid; one-sided at u = 1 and r = 1
        lo = p if name == "d_compression" and p - step < 1 else p - step
        hi = p if name == "d_utilization" and p + step > 1 else p + step
        fd = (f(hi) - f(lo)) / (hi - lo)
        assert getattr(s, name) == pytest.approx(fd, rel=1e-4, abs=1e-14), name
    # elasticities: d ln SF / d ln p
    assert s.elasticity_bw == pytest.approx(s.d_bw * bw / s.scaling_factor, rel=1e-12)
    assert s.elasticity_alpha == pytest.approx(s.d_alpha * alpha / s.scaling_factor,
                                               rel=1e-12, abs=1e-15)
    assert s.elasticity_bw == s.elasticity_utilization == s.elasticity_compression


def test_against_sympy_derivation():
    T1, Tf, Tu, c, lam, a, m, u, B, r = sp.symbols("T1 T_f T_u c lambda alpha m u B r",
                                                   positive=True)
    SF = T1 / (Tf + c + lam * a + m / (u * B * r) + Tu)
    exprs = {"d_bw": sp.diff(SF, B), "d_utilization": sp.diff(SF, u),
             "d_compression": sp.diff(SF, r), "d_alpha": sp.diff(SF, a),
             "elasticity_bw": sp.simplify(sp.diff(sp.log(SF), B) * B)}
    model, n, bw, alpha = "bert", 64, 10e9, 1e-5
    sc = sm.Scenario.build(model, alpha=alpha)
    ones = sm.Scenario.build(model, alpha=1.0)
    lines, env = sc.lines(n)
    x = 1 / bw
    j = int(env.argmax(x))
    lam_j = ones.lines(n)[0].latency[j]
    p = sc.profile
    values = {T1: p.iteration_time, Tf: p.forward_time, Tu: p.update_time,
              c: lines.intercept[j] - lam_j * alpha, lam: lam_j, a: alpha,
              m: lines.slope[j], u: 1.0, B: bw, r: 1.0}
    s = sm.sensitivities(model, n, bw, alpha=alpha)
    assert float(SF.subs(values)) == pytest.approx(s.scaling_factor, rel=1e-12)
    for name, e in exprs.items():
        assert float(e.subs(values)) == pytest.approx(getattr(s, name), rel=1e-10), name


def test_vectorized_and_hidden_communication():
    s = sm.sensitivities("resnet50", [[8], [64]], [1e9, 1e10, 1e11], alpha=1e-6)
    assert s.d_bw.shape == (2, 3) and np.all(s.d_bw > 0) and np.all(s.d_alpha < 0)
    ref = sm.scaling_factor("resnet50", [[8], [64]], [1e9, 1e10, 1e11], alpha=1e-6)
    np.testing.assert_allclose(s.scaling_factor, ref, rtol=1e-12)
    assert np.all(np.diff(s.elasticity_bw, axis=1) < 0)  # faster network: wire matters less
    one = sm.sensitivities("resnet50", 1, 1e9)  # one worker: nothing to communicate
    assert one.scaling_factor == 1.0 and one.d_bw == 0.0 and one.elasticity_alpha == 0.0
    with pytest.raises(sm.InvalidParameterError, match="utilization=0"):
        sm.sensitivities("bert", 8, 1e9, utilization=0)
