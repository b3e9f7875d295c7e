"""Particles of the noisy mean-field transformer (``simulate.mean_field.flow``): the Fourier
attention sum, the sphere integrator, the noise, the observables and the restoring rate."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.mean_field import flow as mff
from theory.mean_field import energy as mf

FEW = settings(max_examples=4, deadline=None)


# ---- simulate: particles -------------------------------------------------------------------------


_harmonics = jax.jit(mff.harmonics, static_argnums=1)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), reach=st.floats(1.0, 60.0))
def test_harmonics_are_the_cosines_and_sines_of_every_mode(seed, reach):
    """The product recurrence gives cos and sin of m theta, m = 0..K, also for angles that have
    wound far from [0, 2 pi): to 1e-12 in float64, and in float32 closer to the exact values at
    the float32 angles than the float32 ``cos(m theta)`` it replaces (which rounds m theta)."""
    theta = np.random.default_rng(seed).uniform(-reach, reach, 256)
    m = np.arange(16)[:, None]
    C, S = _harmonics(jnp.asarray(theta), 16)
    np.testing.assert_allclose(C, np.cos(m * theta), atol=1e-12)
    np.testing.assert_allclose(S, np.sin(m * theta), atol=1e-12)
    theta32 = jnp.asarray(theta, jnp.float32)
    exact = m * np.asarray(theta32, np.float64)
    C32, S32 = _harmonics(theta32, 16)
    direct = jnp.asarray(m, jnp.float32) * theta32
    for got, trig, f in ((C32, jnp.cos(direct), np.cos), (S32, jnp.sin(direct), np.sin)):
        err = np.abs(np.asarray(got, np.float64) - f(exact)).max()
        assert err < 2e-6 and err <= np.abs(np.asarray(trig, np.float64) - f(exact)).max() + 1e-6


@FEW
@given(seed=st.integers(0, 10**6), beta=st.floats(0.3, 4.0), a=st.floats(0.3, 1.5))
def test_fourier_attention_equals_the_direct_sum(seed, beta, a):
    theta = jax.random.uniform(jax.random.PRNGKey(seed), (64,), maxval=2 * np.pi)
    U, v = mff.circle_potential(theta, mff.circle_kernel(beta, a))
    U2, v2 = mff.circle_potential_direct(theta, beta, a)
    scale = math.exp(beta * max(1.0, a))
    np.testing.assert_allclose(U, U2, atol=1e-12 * scale)
    np.testing.assert_allclose(v, v2, atol=1e-12 * scale)


@FEW
@given(seed=st.integers(0, 10**6), beta=st.floats(0.3, 3.0), a=st.floats(0.3, 1.0))
def test_circle_and_sphere_velocities_agree_on_s1(seed, beta, a):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    theta = jax.random.uniform(k1, (32,), maxval=2 * np.pi)
    W = jax.random.normal(k2, (2, 5))
    X = jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
    tangent = jnp.stack([-jnp.sin(theta), jnp.cos(theta)], -1)
    sphere = jnp.sum(mff.sphere_velocity(X, jnp.diag(jnp.array([1.0, a])), beta, W) * tangent, -1)
    circle = mff.circle_potential(theta, mff.circle_kernel(beta, a))[1] + mff.circle_ffn_velocity(
        theta, W
    )
    np.testing.assert_allclose(sphere, circle, atol=1e-11)


def test_projection_keeps_tokens_on_the_sphere():
    key = jax.random.PRNGKey(3)
    X0 = mff.uniform_sphere(key, 64, 4)
    noise = jax.random.normal(jax.random.fold_in(key, 1), (200, 64, 4))
    W = jax.random.normal(jax.random.fold_in(key, 2), (200, 4, 7))
    A = jnp.diag(jnp.array([1.0, 0.7, 0.5, 0.3]))
    X = mff.sphere_flow(X0, noise, A, 2.0, 0.5, 0.05, W, save_every=10)
    np.testing.assert_allclose(jnp.linalg.norm(X, axis=-1), 1.0, atol=1e-12)
    V = jax.random.normal(key, X0.shape)
    np.testing.assert_allclose(jnp.sum(mff.project(X0, V) * X0, -1), 0.0, atol=1e-12)


def test_sphere_noise_is_brownian_motion_with_generator_tau_laplacian():
    """Without interaction (A = 0) E<X_t, X_0> = e^{-(d-1) tau t}: the renormalisation supplies
    the Ito correction of spherical Brownian motion."""
    d, tau, dt, steps, n = 3, 0.5, 0.02, 50, 3000
    key = jax.random.PRNGKey(0)
    X0 = mff.uniform_sphere(key, n, d)
    noise = jax.random.normal(jax.random.fold_in(key, 1), (steps, n, d))
    X = mff.sphere_flow(X0, noise, jnp.zeros((d, d)), 1.0, tau, dt, save_every=steps)
    overlap = np.asarray(jnp.sum(X[-1] * X0, -1))
    expected = math.exp(-(d - 1) * tau * dt * steps)
    assert abs(overlap.mean() - expected) < 3 * overlap.std() / math.sqrt(n)
    theta0 = jax.random.uniform(key, (n,), maxval=2 * np.pi)
    zero = mff.CircleKernel(jnp.zeros(1), jnp.zeros((1, 1)), jnp.zeros((1, 1)))
    th = mff.circle_flow(theta0, noise[..., 0], zero, tau, dt, save_every=steps)
    cos = np.asarray(jnp.cos(th[-1] - theta0))
    assert abs(cos.mean() - math.exp(-tau * dt * steps)) < 3 * cos.std() / math.sqrt(n)


def test_order_parameter_and_density_observables():
    theta = jnp.asarray(np.random.default_rng(1).uniform(0, 2 * np.pi, 300))
    assert float(mff.order_parameter(theta, 2)) == pytest.approx(
        mf.order_parameter(np.asarray(theta), 2)
    )
    dens = mff.angle_density(theta, 16)
    assert float(jnp.sum(dens) * 2 * np.pi / 16) == pytest.approx(1.0)


@pytest.mark.parametrize("beta, a, n0", [(2.0, 0.5, 32), (1.0, 0.3, 20), (3.0, 0.8, 50)])
def test_rayleigh_rate_of_two_point_clusters_is_the_opposing_rate(beta, a, n0):
    """Clusters of masses m (at e_1) and 1 - m (at -e_1) moved toward e_2: each relaxes at the
    opposing rate with its own mass, so the Rayleigh quotient is their mass-weighted mean."""
    theta = jnp.concatenate([jnp.zeros(n0), jnp.full(64 - n0, jnp.pi)])
    rate = mff.rayleigh_rate(theta, mff.circle_kernel(beta, a), jnp.cos(theta))
    m = n0 / 64
    expected = m * mf.opposing_rate(beta, a, m) + (1 - m) * mf.opposing_rate(beta, a, 1 - m)
    assert float(rate) == pytest.approx(expected, rel=1e-9)
