"""Focus-dilution theory: the Markov data, the population loss and its closed-form gradients
(``theory.focus_dilution.population``; spec §2.1, §3.3-3.4)."""

import math
from functools import cache

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.focus_dilution.chains import random_pi
from theory.focus_dilution.population import (
    Parameters,
    attention,
    conserved_quantities,
    parameter_field,
    parameter_gradients,
    parameter_loss,
    parameter_loss_expr,
    pi_symbols,
    population_gradients,
    population_loss,
    population_loss_expr,
    random_metropolis_chain,
    reversible_transition,
    transition_matrix,
)
from theory.validation import ConfigError

D, M_WIDTH, MK = 4, 3, 2
PI_DEFAULT = np.array([0.75, 0.19, 0.05, 0.01])  # spec §2.3
FAST = settings(max_examples=15, deadline=None)

seeds = st.integers(0, 2**32 - 1)
lambdas = st.floats(0.05, 0.95)


# --- model: data, loss and gradients (spec §2.1, §3.3-3.4) ----------------------------------------
def test_bad_data_fails_with_one_line_naming_the_field():
    with pytest.raises(ConfigError, match="pi"):
        transition_matrix([0.5, 0.6], 0.5)
    with pytest.raises(ConfigError, match="pi"):
        transition_matrix([1.0, 0.0], 0.5)
    with pytest.raises(ConfigError, match="lambda"):
        transition_matrix([0.5, 0.5], 1.0)
    with pytest.raises(ConfigError, match="proposal"):
        reversible_transition([0.5, 0.5], [[0.0, 0.4], [0.1, 0.0]])


@FAST
@given(seeds, lambdas)
def test_chains_are_stochastic_with_stationary_pi(seed, lam):
    pi = random_pi(seed)
    for P in (transition_matrix(pi, lam), random_metropolis_chain(pi, seed)):
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(pi @ P, pi, atol=1e-12)
        assert np.all(P >= 0)


@cache
def _sympy_population_gradient(d=3):
    """Lambdified sympy derivatives of the symbolic loss in M and Phi, for any pi and P."""
    pi = pi_symbols(d, normalised=False)
    P = sp.Matrix(d, d, sp.symbols(f"P0:{d * d}"))
    M = sp.Matrix(d, d, sp.symbols(f"M0:{d * d}"))
    Phi = sp.Matrix(d, d, sp.symbols(f"F0:{d * d}"))
    loss = population_loss_expr(M, Phi, pi, P)
    grads = [sp.diff(loss, s) for s in (*M, *Phi)]
    args = (*pi, *P, *M, *Phi)
    return sp.lambdify(args, loss, "numpy"), sp.lambdify(args, grads, "numpy")


@FAST
@given(seeds, lambdas)
def test_closed_form_gradients_equal_sympy_derivatives(seed, lam):
    d = 3
    rng = np.random.default_rng(seed)
    pi = random_pi(seed, d)
    P = transition_matrix(pi, lam) if seed % 2 else random_metropolis_chain(pi, seed)
    M, Phi = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    loss_fn, grad_fn = _sympy_population_gradient(d)
    args = (*pi, *P.ravel(), *M.ravel(), *Phi.ravel())
    G_M, G_Phi = population_gradients(M, Phi, pi, P)
    assert population_loss(M, Phi, pi, P) == pytest.approx(loss_fn(*args), rel=1e-12)
    np.testing.assert_allclose(
        np.concatenate([G_M.ravel(), G_Phi.ravel()]), grad_fn(*args), rtol=1e-9, atol=1e-12
    )
    # spec §3.4 entrywise form: G_Phi[q, k] = pi_q p_q(k) (M_k - z_q) . (S_q - P_q)
    A = attention(pi, Phi)
    Z = A @ M
    S = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    entrywise = [
        [pi[q] * A[q, k] * (M[k] - Z[q]) @ (S[q] - P[q]) for k in range(d)] for q in range(d)
    ]
    np.testing.assert_allclose(G_Phi, entrywise, atol=1e-13)


@FAST
@given(seeds, lambdas, st.sampled_from([1.0, 1 / math.sqrt(MK)]))
def test_parameter_gradients_equal_complex_step_and_finite_differences(seed, lam, qk_scale):
    rng = np.random.default_rng(seed)
    pi = random_pi(seed)
    P = transition_matrix(pi, lam)
    theta = Parameters.random(rng, D, M_WIDTH, MK, 0.7)
    v = rng.normal(size=theta.flatten().size)
    x = theta.flatten()

    def loss(y):
        return parameter_loss(Parameters.unflatten(y, D, M_WIDTH, MK), pi, P, qk_scale)

    directional = parameter_gradients(theta, pi, P, qk_scale).flatten() @ v
    h = 1e-30
    assert np.imag(loss(x + 1j * h * v)) / h == pytest.approx(directional, rel=1e-10, abs=1e-13)
    h = 1e-5
    fd = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    assert fd == pytest.approx(directional, rel=1e-6, abs=1e-8)


@FAST
@given(seeds, lambdas)
def test_conservation_laws(seed, lam):
    """W1 1 and W0^T W0 - W1 W1^T - WQ WQ^T - WK WK^T, WQ^T WQ - WK^T WK are conserved; the spec's
    W0^T W0 - W1 W1^T is not once attention is O(1)."""
    rng = np.random.default_rng(seed)
    pi = random_pi(seed)
    P = transition_matrix(pi, lam)
    theta = Parameters.random(rng, D, M_WIDTH, MK, 0.7)
    velocity = parameter_field(theta.flatten(), pi, P, D, M_WIDTH, MK)
    h = 1e-30
    moved = Parameters.unflatten(theta.flatten() + 1j * h * velocity, D, M_WIDTH, MK)
    for q in conserved_quantities(moved):
        np.testing.assert_allclose(np.imag(q) / h, 0.0, atol=1e-12)
    W0, _, _, W1 = moved
    assert np.max(np.abs(np.imag(W0.T @ W0 - W1 @ W1.T))) / h > 1e-4


def test_residual_path_would_break_rank_one_condensation():
    """Spec §3.2: with a residual, Z = (I + A) M and G_M(0) = (I + A)^T R has rank d - 1, not 1."""
    pi = PI_DEFAULT
    P = transition_matrix(pi, 0.5)
    A = attention(pi, np.zeros((D, D)))
    R = pi[:, None] * (np.full((D, D), 1 / D) - P)
    assert np.linalg.matrix_rank((np.eye(D) + A).T @ R, tol=1e-10) == D - 1
    assert np.linalg.matrix_rank(A.T @ R, tol=1e-10) == 1


def test_parameter_gradients_equal_sympy_chain_rule():
    d, m, m_k = 3, 2, 1
    rng = np.random.default_rng(3)
    theta_sym = Parameters(
        *(
            sp.Matrix(r, c, sp.symbols(f"{n}0:{r * c}"))
            for n, (r, c) in zip("abcd", ((d, m), (m, m_k), (m, m_k), (m, d)))
        )
    )
    pi = np.array([0.5, 0.3, 0.2])
    P = transition_matrix(pi, 0.4)
    loss = parameter_loss_expr(theta_sym, sp.Matrix(pi), sp.Matrix(P))
    symbols = [s for w in theta_sym for s in w]
    theta = Parameters.random(rng, d, m, m_k, 0.8)
    point = dict(zip(symbols, theta.flatten()))
    exact = [float(sp.diff(loss, s).xreplace(point)) for s in symbols]
    np.testing.assert_allclose(parameter_gradients(theta, pi, P).flatten(), exact, rtol=1e-10)
