"""Tests of theory.incremental.stages: lumped mass rate, escape integral, vertex decay and stage
predictions."""

import itertools
import math
from functools import lru_cache

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from theory.incremental.heads import METRIC_POWER, HeadSetting
from theory.incremental.setting import METRICS
from theory.incremental.stages import (
    H_sym,
    T_sym,
    a_sym,
    b_sym,
    escape_integral,
    lumped_mass_rate,
    lumped_symmetric_field,
    m1_sym,
    p_sym,
    predict_stages,
    u_sym,
    vertex_decay_coefficient,
)

SETTINGS = settings(max_examples=20, deadline=None)
_escape_integral = lru_cache(maxsize=None)(escape_integral)  # sympy integration: build once


@st.composite
def lumps(draw):
    T = draw(st.integers(3, 60))
    b = draw(st.integers(1, T - 1))
    p = draw(st.floats(min_value=1e-3, max_value=1 - 1e-3))
    return p, b, T


def _numeric_rate(metric, p, b, T):
    """p' per unit drive: sum over the block of J(s)^n e_block, s built explicitly."""
    s = np.concatenate([np.full(b, p / b), np.full(T - b, (1 - p) / (T - b))])
    J = np.diag(s) - np.outer(s, s)
    drive = np.concatenate([np.ones(b), np.zeros(T - b)])
    return float(np.sum((np.linalg.matrix_power(J, METRIC_POWER[metric]) @ drive)[:b]))


def test_replicator_rate_is_logistic():
    assert sp.simplify(lumped_mass_rate("replicator") - p_sym * (1 - p_sym)) == 0


@pytest.mark.parametrize("metric", METRICS)
@SETTINGS
@given(lumps())
def test_lumped_rate_matches_explicit_softmax_jacobian(metric, lump):
    p, b, T = lump
    g = float(lumped_mass_rate(metric).subs({p_sym: p, b_sym: b, T_sym: T}))
    assert g == pytest.approx(_numeric_rate(metric, p, b, T), rel=1e-10, abs=1e-14)
    assert g > 0


@pytest.mark.parametrize("metric", METRICS)
@SETTINGS
@given(T=st.integers(5, 80), data=st.data())
def test_escape_integral_matches_quadrature(metric, T, data):
    b = data.draw(st.integers(1, T // 2 - 1))
    g = sp.lambdify(p_sym, lumped_mass_rate(metric).subs({b_sym: b, T_sym: T}))
    expected, _err = quad(lambda p: 1 / g(p), b / T, 0.5, epsabs=0, epsrel=1e-12, limit=200)
    closed = float(_escape_integral(metric).subs({b_sym: b, T_sym: T}))
    assert closed == pytest.approx(expected, rel=1e-9)
    assert closed > 0


@settings(max_examples=10, deadline=None)
@given(
    n=st.integers(1, 3),
    m1=st.integers(2, 12).map(lambda k: k / 4),
    frac=st.integers(1, 7).map(lambda k: k / 8),
)
def test_vertex_decay_coefficient_closed_form(n, m1, frac):
    mi = m1 * frac
    c = vertex_decay_coefficient(n, m1, mi)
    assert c == pytest.approx(-(m1**2 - mi**2) / n, rel=1e-12)


def test_vertex_decay_coefficient_matches_numeric_field():
    """Independent check: the replicator field of an n-head group at s = (1 - x, x), values at their
    quasi-static optimum v = G s / (n ||s||^2), divided by x^2 tends to c as x -> 0."""
    n, m1, mi = 2, 1.5, 1.0
    G = np.diag([m1, mi])
    xs = np.array([1e-3, 5e-4])
    ratios = []
    for x in xs:
        s = np.array([1 - x, x])
        v = G @ s / (n * s @ s)
        R = G - n * np.outer(v, s)
        f = R.T @ v
        ds = s * (f - s @ f)
        ratios.append(ds[1] / x**2)
    # the ratio is c + O(x): Richardson-extrapolate to x = 0
    extrapolated = 2 * ratios[1] - ratios[0]
    assert vertex_decay_coefficient(n, m1, mi) == pytest.approx(extrapolated, rel=1e-5)


@pytest.fixture(scope="module", params=METRICS)
def predictions(request):
    setting = HeadSetting(heads=3, blocks=(1, 1, 1), window=8, metric=request.param)
    return setting, {eps: predict_stages(setting, eps) for eps in (0.0, 1e-3, 1e-6)}


def test_exact_symmetry_stalls_after_stage_one(predictions):
    _setting, preds = predictions
    zero = preds[0.0]
    assert [p.stage for p in zero] == [1, 2, 3]
    assert math.isfinite(zero[0].time) and zero[0].time > 0
    assert all(p.time == math.inf for p in zero[1:])


def test_times_grow_as_eps_shrinks_and_are_ordered(predictions):
    _setting, preds = predictions
    big, small = preds[1e-3], preds[1e-6]
    # stage 1 does not depend on eps (early-time law)
    assert big[0].time == small[0].time
    for a, b in zip(big[1:], small[1:]):
        assert math.isfinite(a.time) and math.isfinite(b.time)
        assert b.time > a.time
    for pred in (big, small):
        times = [p.time for p in pred]
        assert all(t0 < t1 for t0, t1 in itertools.pairwise(times))


def test_plateaus_chain_and_blocks_follow_importance(predictions):
    setting, preds = predictions
    pred = preds[1e-3]
    m = setting.importance_values
    w = [0.5 * x**2 for x in m]
    assert [p.block for p in pred] == list(np.argsort(w)[::-1])
    assert pred[0].plateau_before == pytest.approx(sum(w), rel=1e-12)
    for a, b in itertools.pairwise(pred):
        assert a.plateau_after == b.plateau_before
    assert pred[-1].plateau_after == 0


def test_first_stage_time_solves_the_lumped_integral():
    """t_1 from the early-time law: int_{b/T}^{1/2} dp/g = m_1^2 ||alpha||_1^2 t_1^2 / (2 b T)."""
    for metric in METRICS:
        setting = HeadSetting(
            heads=2,
            blocks=(2, 1),
            window=9,
            importances=(1.5, 1.0),
            alpha=(0.5, 1.0, 1.0),
            metric=metric,
        )
        t1 = predict_stages(setting, 1e-3)[0].time
        b, T, m1, a1 = 2, 9, 1.5, 1.5
        g = sp.lambdify(p_sym, lumped_mass_rate(metric).subs({b_sym: b, T_sym: T}))
        integral, _ = quad(lambda p, g=g: 1 / g(p), b / T, 0.5, epsrel=1e-12)
        assert t1 == pytest.approx(math.sqrt(2 * b * T * integral / (m1**2 * a1**2)), rel=1e-9)


def test_non_singleton_blocks_leave_later_stages_underived():
    pred = predict_stages(HeadSetting(heads=2, blocks=(2, 1), window=6), 1e-3)
    assert pred[0].time is not None and math.isfinite(pred[0].time)
    assert [p.time for p in pred[1:]] == [None]


@pytest.mark.parametrize("metric", METRICS)
@settings(max_examples=15, deadline=None)
@given(
    p=st.floats(0.05, 0.95), u=st.floats(-2.0, 2.0), m1=st.floats(0.5, 3.0), a=st.floats(0.5, 2.0)
)
def test_lumped_symmetric_field_is_the_exact_field_on_its_subspace(metric, p, u, m1, a):
    """Equal heads, lead block of b lags carrying mass p uniformly, other rows of G zero: the 2-D
    lumped system equals the exact (v, s) field summed over the block."""
    H, b, T, h = 3, 2, 7, 2
    G = np.zeros((h, T))
    G[0, :b] = m1 * a
    s = np.r_[np.full(b, p / b), np.full(T - b, (1 - p) / (T - b))]
    S, V = np.tile(s, (H, 1)), np.tile([u, 0.0], (H, 1))
    R = G - V.T @ S
    dv = (R @ S.T).T
    f = V @ R
    for _ in range(METRIC_POWER[metric]):
        f = S * (f - np.sum(S * f, axis=1, keepdims=True))
    dp, du = (
        float(e.subs({H_sym: H, b_sym: b, T_sym: T, m1_sym: m1, a_sym: a, p_sym: p, u_sym: u}))
        for e in lumped_symmetric_field(metric)
    )
    assert dp == pytest.approx(f[0, :b].sum(), rel=1e-10, abs=1e-12)
    assert du == pytest.approx(dv[0, 0], rel=1e-10, abs=1e-12)
