"""Tests of simulate.incremental.head_field: the JAX field against the symbolic HeadSystem, and flow
properties."""

from dataclasses import replace
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.incremental.head_field import entry_losses, logit_field, loss, residual, vs_field
from simulate.incremental.head_ode import solve
from theory.incremental.heads import METRIC_POWER, HeadSetting, HeadSystem, field_jacobian
from theory.incremental.setting import METRICS

SETTINGS = settings(max_examples=15, deadline=None)
SHAPE = HeadSetting(heads=2, blocks=(1, 2), window=5)
H, h, T = SHAPE.heads, SHAPE.h, SHAPE.window


@cache
def _symbolic_field(metric):
    """The symbolic (v, s) field as a numpy function of (m, alpha, v, s)."""
    hs = HeadSystem(SHAPE)
    f = hs.flow(metric).field
    return sp.lambdify([list(hs.m), list(hs.alpha), list(hs.v), list(hs.s)], f, "numpy")


def _random_point(seed):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(H, h))
    s = rng.dirichlet(np.ones(T), size=H)
    m = rng.uniform(0.5, 2.0, size=h)
    alpha = rng.uniform(0.5, 2.0, size=sum(SHAPE.blocks))
    G = replace(SHAPE, importances=tuple(m), alpha=tuple(alpha)).target()
    return G, v, s, m, alpha


def _J(s):
    return np.diag(s) - np.outer(s, s)


seeds = st.integers(0, 2**31 - 1)


@pytest.mark.parametrize("metric", METRICS)
@SETTINGS
@given(seed=seeds)
def test_vs_field_equals_symbolic_field(metric, seed):
    G, v, s, m, alpha = _random_point(seed)
    dv, ds = vs_field(jnp.asarray(G), jnp.asarray(v), jnp.asarray(s), METRIC_POWER[metric])
    sym = np.asarray(_symbolic_field(metric)(m, alpha, v.ravel(), s.ravel()), float).ravel()
    np.testing.assert_allclose(np.asarray(dv).ravel(), sym[: H * h], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ds).ravel(), sym[H * h :], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("metric", METRICS)
@SETTINGS
@given(seed=seeds)
def test_logit_field_and_chain_rule(metric, seed):
    G, v, _, _, _ = _random_point(seed)
    theta = np.random.default_rng(seed + 1).normal(size=(H, T))
    s = np.exp(theta) / np.exp(theta).sum(-1, keepdims=True)
    power = METRIC_POWER[metric]
    dv, dtheta = logit_field(jnp.asarray(G), jnp.asarray(v), jnp.asarray(theta), power)
    R = G - v.T @ s
    for k in range(H):
        expected = np.linalg.matrix_power(_J(s[k]), power - 1) @ (R.T @ v[k])
        np.testing.assert_allclose(np.asarray(dtheta[k]), expected, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(np.asarray(dv[k]), R @ s[k], rtol=1e-11, atol=1e-12)
    # s = softmax(theta) => s' = J(s) theta', which must be the (v, s) field's s'
    dv2, ds = vs_field(jnp.asarray(G), jnp.asarray(v), jnp.asarray(s), power)
    chain = np.stack([_J(s[k]) @ np.asarray(dtheta[k]) for k in range(H)])
    np.testing.assert_allclose(chain, np.asarray(ds), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(np.asarray(dv2), np.asarray(dv), rtol=1e-12, atol=1e-13)
    # and s' is the time derivative of softmax(theta(t)) along theta'
    ds_jvp = jax.jvp(lambda th: jax.nn.softmax(th, -1), (jnp.asarray(theta),), (dtheta,))[1]
    np.testing.assert_allclose(np.asarray(ds_jvp), np.asarray(ds), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("metric", METRICS)
@settings(max_examples=10, deadline=None)
@given(seed=seeds)
def test_vs_field_jacobian_equals_field_jacobian(metric, seed):
    G, v, s, _, _ = _random_point(seed)
    power = METRIC_POWER[metric]

    def flat(x):
        dv, ds = vs_field(jnp.asarray(G), x[: H * h].reshape(H, h), x[H * h :].reshape(H, T), power)
        return jnp.concatenate([dv.ravel(), ds.ravel()])

    x = jnp.concatenate([jnp.asarray(v).ravel(), jnp.asarray(s).ravel()])
    jac = np.asarray(jax.jacfwd(flat)(x))
    np.testing.assert_allclose(field_jacobian(G, v, s, power), jac, rtol=1e-10, atol=1e-12)


def test_loss_and_entry_losses():
    G, v, s, _, _ = _random_point(7)
    R = G - sum(np.outer(v[k], s[k]) for k in range(H))
    np.testing.assert_allclose(np.asarray(residual(G, v, s)), R, rtol=1e-13, atol=1e-14)
    assert float(loss(G, v, s)) == pytest.approx(0.5 * np.sum(R**2), rel=1e-13)
    np.testing.assert_allclose(np.asarray(entry_losses(G, v, s)), 0.5 * R**2, rtol=1e-13)


def test_vs_field_is_minus_metric_gradient_of_loss():
    """v' = -dL/dv and s' = -J(s)^p dL/ds, with dL from autodiff of the loss."""
    G, v, s, _, _ = _random_point(11)
    gv, gs = jax.grad(loss, argnums=(1, 2))(jnp.asarray(G), jnp.asarray(v), jnp.asarray(s))
    for metric in METRICS:
        p = METRIC_POWER[metric]
        dv, ds = vs_field(jnp.asarray(G), jnp.asarray(v), jnp.asarray(s), p)
        np.testing.assert_allclose(np.asarray(dv), -np.asarray(gv), rtol=1e-12, atol=1e-13)
        expected = np.stack(
            [-np.linalg.matrix_power(_J(s[k]), p) @ np.asarray(gs[k]) for k in range(H)]
        )
        np.testing.assert_allclose(np.asarray(ds), expected, rtol=1e-10, atol=1e-13)


FLOW_SETTING = HeadSetting(heads=2, blocks=(1, 1), window=5)
N_SAVE = 200


@pytest.fixture(scope="module", params=METRICS)
def trajectory(request):
    setting = replace(FLOW_SETTING, metric=request.param)
    return solve(setting, [1e-2, 1e-1], [0, 1], t_max=300.0, n_save=N_SAVE)


def test_loss_is_non_increasing(trajectory):
    L = trajectory.loss
    assert L.shape == (2, N_SAVE)
    assert np.all(np.isfinite(L))
    assert np.all(np.diff(L, axis=1) <= 1e-12 * L[:, :-1])
    # the flow does something: the loss falls well below its start
    assert np.all(L[:, -1] < 0.5 * L[:, 0])


def test_attention_stays_on_the_simplex(trajectory):
    s = trajectory.s
    assert np.all(s >= 0)
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=0, atol=1e-12)


def test_saved_loss_matches_saved_state(trajectory):
    G = FLOW_SETTING.target()
    for b in range(2):
        for i in (0, N_SAVE // 2, N_SAVE - 1):
            v, s = trajectory.v[b, i], trajectory.s[b, i]
            R = G - v.T @ s
            assert trajectory.loss[b, i] == pytest.approx(0.5 * np.sum(R**2), rel=1e-12)
            np.testing.assert_allclose(
                trajectory.entry_loss[b, i].sum(), trajectory.loss[b, i], rtol=1e-12
            )
