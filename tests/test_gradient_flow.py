"""Tests of theory.gradient_flow: spectrum classification, escape time and the symbolic
GradientFlow."""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.gradient_flow import (
    FixedPointKind,
    GradientFlow,
    classify_spectrum,
    escape_time,
    simplex_metric,
)

SETTINGS = settings(max_examples=20, deadline=None)
rates = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
rate_lists = st.lists(rates, min_size=1, max_size=6)


# --- classify_spectrum -------------------------------------------------------------------------
@SETTINGS
@given(rate_lists)
def test_all_negative_is_sink(mags):
    assert classify_spectrum(-np.array(mags)) is FixedPointKind.SINK


@SETTINGS
@given(rate_lists)
def test_all_positive_is_source(mags):
    assert classify_spectrum(np.array(mags)) is FixedPointKind.SOURCE


@SETTINGS
@given(rate_lists, rate_lists)
def test_mixed_signs_is_saddle(neg, pos):
    assert classify_spectrum(np.array([-x for x in neg] + pos)) is FixedPointKind.SADDLE


@SETTINGS
@given(rate_lists, st.sampled_from([-1.0, 1.0]))
def test_zero_or_relatively_tiny_real_part_is_degenerate(mags, sign):
    spec = sign * np.array(mags)
    assert classify_spectrum(np.append(spec, 0.0)) is FixedPointKind.DEGENERATE
    # an eigenvalue 1e-12 times the largest one is zero at the default relative tolerance
    tiny = 1e-12 * max(1.0, float(np.max(np.abs(spec))))
    assert classify_spectrum(np.append(spec, sign * tiny)) is FixedPointKind.DEGENERATE
    # ... but a purely imaginary pair (centre) is degenerate too
    assert (
        classify_spectrum(np.append(spec.astype(complex), [2j, -2j])) is FixedPointKind.DEGENERATE
    )


def test_complex_pairs_classified_by_real_part():
    assert classify_spectrum([-1 + 3j, -1 - 3j, -0.5]) is FixedPointKind.SINK
    assert classify_spectrum([1 + 3j, 1 - 3j]) is FixedPointKind.SOURCE
    assert classify_spectrum([1 + 3j, 1 - 3j, -2.0]) is FixedPointKind.SADDLE


def test_tolerance_is_relative_to_the_largest_rate():
    # 1e-3 is not degenerate next to O(1) rates, but is next to 1e7 rates at tol=1e-9
    assert classify_spectrum([-1.0, -1e-3]) is FixedPointKind.SINK
    assert classify_spectrum([-1e7, -1e-3]) is FixedPointKind.DEGENERATE


# --- escape_time --------------------------------------------------------------------------------
@SETTINGS
@given(st.floats(min_value=1e-300, max_value=0.999), rates)
def test_escape_time_float(eps, rate):
    t = escape_time(eps, rate)
    assert isinstance(t, float)
    assert t == pytest.approx(-math.log(eps) / rate, rel=1e-12)
    # leaving from distance eps along exp(rate t): eps * exp(rate t) = 1
    assert eps * math.exp(rate * t) == pytest.approx(1.0, rel=1e-9)


def test_escape_time_sympy():
    eps, lam = sp.symbols("epsilon lambda", positive=True)
    t = escape_time(eps, lam)
    assert isinstance(t, sp.Basic)
    assert sp.simplify(t - sp.log(1 / eps) / lam) == 0
    assert sp.simplify(eps * sp.exp(lam * t) - 1) == 0
    # mixed: a number eps with a symbolic rate, and an exact rational eps
    assert sp.simplify(escape_time(sp.Rational(1, 100), lam) - sp.log(100) / lam) == 0
    assert float(escape_time(1e-2, lam) * lam) == pytest.approx(math.log(100), rel=1e-12)


# --- GradientFlow -------------------------------------------------------------------------------
def _spd(rng, n):
    a = rng.normal(size=(n, n))
    return a @ a.T + n * np.eye(n)


def _rat(x):
    return sp.Rational(round(x * 64), 64)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_quadratic_flow_field_and_jacobian(seed):
    rng = np.random.default_rng(seed)
    n = 3
    x = sp.symbols("x1:4", real=True)
    X = sp.Matrix(x)
    A = sp.Matrix(_spd(rng, n)).applyfunc(_rat)
    A = (A + A.T) / 2
    b = sp.Matrix(rng.normal(size=n)).applyfunc(_rat)
    M = sp.Matrix(_spd(rng, n)).applyfunc(_rat)
    M = (M + M.T) / 2
    loss = (X.T * A * X)[0] / 2 + (b.T * X)[0]
    euclid = GradientFlow(x, loss)
    pre = GradientFlow(x, loss, M)
    grad = A * X + b
    assert sp.simplify(euclid.field - (-grad)) == sp.zeros(n, 1)
    assert sp.simplify(pre.field - (-M * grad)) == sp.zeros(n, 1)
    assert sp.simplify(euclid.jacobian - (-A)) == sp.zeros(n, n)
    assert sp.simplify(pre.jacobian - (-M * A)) == sp.zeros(n, n)
    # the unique fixed point x* = -A^{-1} b is a sink of both flows
    xstar = -A.LUsolve(b)
    point = dict(zip(x, xstar))
    assert euclid.is_fixed_point(point) and pre.is_fixed_point(point)
    assert not pre.is_fixed_point(dict(zip(x, xstar + sp.Matrix([1, 0, 0]))))
    expected = np.sort(np.linalg.eigvals(-np.array((M * A).tolist(), dtype=float)).real)
    np.testing.assert_allclose(np.sort(pre.spectrum_at(point).real), expected, rtol=1e-10)
    assert pre.classify(point) is FixedPointKind.SINK
    # a saddle when the loss is indefinite
    saddle = GradientFlow(x, x[0] ** 2 - x[1] ** 2 + x[2] ** 2)
    assert saddle.classify(dict.fromkeys(x, 0)) is FixedPointKind.SADDLE


def test_spectrum_at_is_taken_on_the_tangent_space_of_the_invariants():
    """A flow that preserves x1 + x2 + x3: the full Jacobian has a spurious zero eigenvalue in the
    normal direction, which the tangent spectrum must drop."""
    x = sp.symbols("x1:4", real=True)
    X = sp.Matrix(x)
    A = sp.Matrix([[3, 1, 0], [1, 2, 0], [0, 0, 5]])
    c = sp.Matrix([1, 2, 3])
    loss = ((X - c).T * A * (X - c))[0] / 2
    P = sp.eye(3) - sp.ones(3, 3) / 3  # projection onto the tangent space {sum dx = 0}
    C = sp.ones(1, 3)
    flow = GradientFlow(x, loss, P, C)
    # the invariant holds identically
    assert sp.simplify((C * flow.field)[0]) == 0
    B = flow.tangent_basis()
    assert B.shape == (3, 2)
    np.testing.assert_allclose(B.T @ B, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(np.ones((1, 3)) @ B, 0, atol=1e-12)
    point = {xi: sp.Rational(k, 7) for k, xi in enumerate(x)}
    jac = np.array(flow.jacobian_at(point).tolist(), dtype=float)
    full = np.linalg.eigvals(jac)
    assert classify_spectrum(full) is FixedPointKind.DEGENERATE  # the normal direction
    tangent = flow.spectrum_at(point)
    assert tangent.shape == (2,)
    nonzero = np.sort(full.real[np.abs(full) > 1e-9])
    np.testing.assert_allclose(np.sort(tangent.real), nonzero, rtol=1e-10)
    # expected from first principles: eigenvalues of -B^T P A B = -B^T A B
    Af = np.array(A.tolist(), dtype=float)
    np.testing.assert_allclose(
        np.sort(tangent.real), np.sort(np.linalg.eigvalsh(-B.T @ Af @ B)), rtol=1e-10
    )
    assert flow.classify(point) is FixedPointKind.SINK


def test_simplex_metric_is_softmax_jacobian_power():
    s = sp.Matrix(sp.symbols("s1:4", positive=True))
    J = sp.diag(*s) - s * s.T
    assert sp.simplify(simplex_metric(s) - J) == sp.zeros(3, 3)
    assert sp.simplify(simplex_metric(s, 2) - J * J) == sp.zeros(3, 3)
    # J(s) is the Jacobian of softmax at theta with s = softmax(theta)
    th = sp.symbols("t1:4", real=True)
    soft = sp.Matrix([sp.exp(t) for t in th]) / sum(sp.exp(t) for t in th)
    vals = {th[0]: 0.3, th[1]: -1.1, th[2]: 0.7}
    dsoft = np.array(soft.jacobian(sp.Matrix(th)).xreplace(vals).evalf().tolist(), dtype=float)
    sv = dict(zip(s, [float(e) for e in soft.xreplace(vals).evalf()]))
    np.testing.assert_allclose(
        np.array(simplex_metric(s).xreplace(sv).tolist(), dtype=float), dsoft, atol=1e-14
    )


def test_latex_has_one_row_per_coordinate():
    x = sp.symbols("x1:3", real=True)
    flow = GradientFlow(x, x[0] ** 2 + x[0] * x[1])
    tex = flow.latex({x[0]: "a"})
    assert tex.startswith("\\begin{aligned}") and tex.count("&=") == 2
    assert "\\dot{a}" in tex and "\\dot{x_{2}}" in tex


def test_latex_default_names():
    x = sp.symbols("x1:3", real=True)
    tex = GradientFlow(x, x[0] ** 2 + x[0] * x[1]).latex()
    assert tex.count("&=") == 2
