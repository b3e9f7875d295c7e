"""Tests of the focus-dilution theory (spec ``focus_dilution.md`` §3-5): theory.focus_dilution.population,
theory.focus_dilution.stages, theory.focus_dilution.manifold (the reduced flow is integrated by
simulate.focus_dilution.flow). Each [derived] statement of the spec is checked here; the verdicts
are recorded in docs/focus_dilution_verification.md."""

import math
from functools import cache

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from simulate.focus_dilution.flow import (
    manifold_trajectory,
    stage_four_point,
    symmetry_breaking_slope,
)
from theory.focus_dilution.manifold import (
    manifold_field,
    manifold_flow,
    manifold_parameters,
    predicted_stage_times,
    redistribution_coordinate,
    redistribution_response,
    split_state,
    symmetric_pi,
    transverse_coupling,
    transverse_rates,
)
from theory.focus_dilution.population import (
    Parameters,
    attention,
    complex_step_jacobian,
    conserved_quantities,
    parameter_field,
    parameter_gradients,
    parameter_loss,
    parameter_loss_expr,
    pi_symbols,
    population_gradients,
    population_loss,
    population_loss_expr,
    reversible_transition,
    transition_matrix,
)
from theory.focus_dilution.stages import (
    attention_block_spectrum,
    condensation_directions,
    cov_pi,
    entropy,
    jacobian_blocks,
    origin_gradient,
    second_critical_parameters,
    second_critical_point,
    stage_one_rate,
    stage_one_solution,
    stage_two_attention_gradient,
    stage_two_rate,
    stage_two_rate_closed_form,
    symmetric_family_rates,
)
from theory.gradient_flow import FixedPointKind, classify_spectrum
from theory.validation import ConfigError

D, M_WIDTH, MK = 4, 3, 2
PI_DEFAULT = np.array([0.75, 0.19, 0.05, 0.01])  # spec §2.3
FAST = settings(max_examples=15, deadline=None)
SLOW = settings(max_examples=2, deadline=None)

seeds = st.integers(0, 2**32 - 1)
lambdas = st.floats(0.05, 0.95)


def _pi(seed, d=D, floor=0.02):
    """A random non-uniform probability vector with every entry >= floor, sorted descending."""
    raw = np.random.default_rng(seed).dirichlet(np.ones(d))
    pi = floor + (1 - d * floor) * raw
    return np.sort(pi / pi.sum())[::-1]


def _random_reversible(pi, seed):
    rng = np.random.default_rng(seed)
    Q = rng.uniform(size=(pi.size, pi.size))
    Q = (Q + Q.T) / (2 * pi.size)
    return reversible_transition(pi, Q)


# --- model: data, loss and gradients (spec §2.1, §3.3-3.4) ---------------------------------------------
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
    pi = _pi(seed)
    for P in (transition_matrix(pi, lam), _random_reversible(pi, seed)):
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
    pi = _pi(seed, d)
    P = transition_matrix(pi, lam) if seed % 2 else _random_reversible(pi, seed)
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
    pi = _pi(seed)
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
    pi = _pi(seed)
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


# --- Stage I: the origin (spec §5.2) ----------------------------------------------------------------------
def test_origin_gradients_symbolic():
    """G_M(0) = pi (u - pi)^T and G_Phi(0) = 0 for symbolic pi (d = 3) and lambda."""
    d = 3
    pi, lam = pi_symbols(d), sp.Symbol("lambda", positive=True)
    M = sp.Matrix(d, d, sp.symbols(f"M0:{d * d}"))
    Phi = sp.Matrix(d, d, sp.symbols(f"F0:{d * d}"))
    loss = population_loss_expr(M, Phi, pi, transition_matrix(pi, lam))
    origin = dict.fromkeys((*M, *Phi), 0)
    G_M = M.applyfunc(lambda s: sp.diff(loss, s).xreplace(origin))
    G_Phi = Phi.applyfunc(lambda s: sp.diff(loss, s).xreplace(origin))
    assert sp.simplify(G_M - origin_gradient(pi)) == sp.zeros(d, d)
    assert sp.simplify(G_Phi) == sp.zeros(d, d)
    assert (
        sp.simplify(
            population_loss_expr(sp.zeros(d, d), sp.zeros(d, d), pi, transition_matrix(pi, lam))
            - sp.log(d)
        )
        == 0
    )


@FAST
@given(seeds, lambdas)
def test_origin_gradient_rank_one_with_rate_sigma_for_any_stationary_chain(seed, lam):
    pi = _pi(seed)
    a, b = condensation_directions(pi)
    sigma = stage_one_rate(pi)
    for P in (transition_matrix(pi, lam), _random_reversible(pi, seed)):
        G_M, G_Phi = population_gradients(np.zeros((D, D)), np.zeros((D, D)), pi, P)
        np.testing.assert_allclose(G_M, origin_gradient(pi), atol=1e-15)
        np.testing.assert_allclose(G_M, -sigma * np.outer(a, b), atol=1e-15)
        np.testing.assert_array_equal(G_Phi, 0.0)
    sv = np.linalg.svd(origin_gradient(pi), compute_uv=False)
    assert sv[0] == pytest.approx(sigma, rel=1e-12) and sv[1] < 1e-14


def test_attention_gradients_vanish_to_fifth_order_at_small_init():
    """dL/dWQ = O(eps^5) (G_Phi = O(|M|) = O(eps^2) times W0, W0, WK), dL/dW0 = O(eps)."""
    pi = PI_DEFAULT
    P = transition_matrix(pi, 0.5)
    theta = Parameters.random(np.random.default_rng(0), D, M_WIDTH, MK, 1.0)
    norms = []
    for eps in (1e-2, 1e-3):
        grads = parameter_gradients(Parameters(*(eps * w for w in theta)), pi, P)
        norms.append([np.linalg.norm(g) for g in grads])
    orders = np.log10(np.array(norms[0]) / np.array(norms[1]))
    np.testing.assert_allclose(orders, [1, 5, 5, 1], atol=0.02)


def test_stage_one_solution_solves_the_linear_system():
    t, s = sp.symbols("t sigma", positive=True)
    x0, y0 = sp.symbols("x_0 y_0")
    x, y = stage_one_solution(x0, y0, s, t)
    assert sp.simplify(sp.diff(x, t) - s * y) == 0 and sp.simplify(sp.diff(y, t) - s * x) == 0
    assert (x.subs(t, 0), y.subs(t, 0)) == (x0, y0)


@FAST
@given(seeds, lambdas)
def test_stage_one_linearisation_of_the_full_field(seed, lam):
    """Near the origin x = W0^T a, y = W1 b obey x' = sigma y, y' = sigma x."""
    pi = _pi(seed)
    P = transition_matrix(pi, lam)
    theta = Parameters.random(np.random.default_rng(seed), D, M_WIDTH, MK, 1e-5)
    a, b = condensation_directions(pi)
    sigma = stage_one_rate(pi)
    field = Parameters(*(-g for g in parameter_gradients(theta, pi, P)))
    np.testing.assert_allclose(field.W0.T @ a, sigma * theta.W1 @ b, rtol=1e-3)
    np.testing.assert_allclose(field.W1 @ b, sigma * theta.W0.T @ a, rtol=1e-3)


# --- theta_c^1 and Stage II (spec §5.2-5.3) ---------------------------------------------------------------
@FAST
@given(seeds, lambdas)
def test_second_critical_point_is_critical_with_unigram_prediction(seed, lam):
    pi = _pi(seed)
    rng = np.random.default_rng(seed)
    alpha = rng.normal(size=M_WIDTH)
    alpha /= np.linalg.norm(alpha)
    point = second_critical_point(pi)
    for P in (transition_matrix(pi, lam), _random_reversible(pi, seed)):
        theta = second_critical_parameters(pi, M_WIDTH, MK, alpha)
        grads = parameter_gradients(theta, pi, P).flatten()
        assert np.max(np.abs(grads)) < 1e-12
        assert parameter_loss(theta, pi, P) == pytest.approx(entropy(pi), rel=1e-12)
        Z = attention(pi, np.zeros((D, D))) @ np.outer(point.gamma, point.beta)
        S = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(S, np.tile(pi, (D, 1)), atol=1e-12)
        # critical although G_Phi != 0: WQ = WK = 0 kills every attention gradient
        _, G_Phi = population_gradients(np.outer(point.gamma, point.beta), np.zeros((D, D)), pi, P)
        assert np.max(np.abs(G_Phi)) > 1e-4
    assert np.linalg.norm(point.gamma) == pytest.approx(point.g)
    assert np.linalg.norm(point.beta) == pytest.approx(point.g)
    assert abs(point.beta.sum()) < 1e-12


@FAST
@given(seeds, lambdas)
def test_stage_two_attention_gradient_and_rate(seed, lam):
    pi = _pi(seed)
    point = second_critical_point(pi)
    M = np.outer(point.gamma, point.beta)
    for P in (transition_matrix(pi, lam), _random_reversible(pi, seed)):
        _, G_Phi = population_gradients(M, np.zeros((D, D)), pi, P)
        np.testing.assert_allclose(
            stage_two_attention_gradient(point.gamma, point.beta, pi, P), G_Phi, atol=1e-14
        )
        assert stage_two_rate(pi, P) == pytest.approx(-point.gamma @ G_Phi @ point.gamma, rel=1e-10)
    c = stage_two_rate(pi, transition_matrix(pi, lam))
    assert c == pytest.approx(stage_two_rate_closed_form(pi, lam), rel=1e-10)
    assert c > 0
    # the spec's Stage III formula for the explicit kappa-term at theta_c^1
    g, b = point.gamma, point.beta
    _, G_Phi = population_gradients(M, np.zeros((D, D)), pi, transition_matrix(pi, lam))
    spec = lam * pi * ((pi @ b - b) * cov_pi(pi, g, g) - (g - pi @ g) * cov_pi(pi, g, b))
    np.testing.assert_allclose((G_Phi + G_Phi.T) @ g, spec, atol=1e-14)


def test_stage_two_rate_vanishes_without_repeats_or_frequency_structure():
    assert stage_two_rate_closed_form(PI_DEFAULT, 0.0) == 0.0
    uniform = np.full(D, 1 / D)
    assert stage_two_rate_closed_form(uniform, 0.5) == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ConfigError, match="non-uniform"):
        second_critical_point(uniform)


def test_stage_two_rate_closed_form_symbolic():
    """c = -gamma^T G_Phi gamma = lambda ||l|| Var_pi(pi) Cov_pi(pi, log pi) / ||pi||^5 (d = 3)."""
    pi, lam = pi_symbols(3), sp.Symbol("lambda", positive=True)
    P = transition_matrix(pi, lam)
    point = second_critical_point(pi)
    G_Phi = stage_two_attention_gradient(point.gamma, point.beta, pi, P)
    c = -(point.gamma.T * G_Phi * point.gamma)[0]
    assert sp.simplify(c - stage_two_rate(pi, P)) == 0
    assert sp.simplify(c - stage_two_rate_closed_form(pi, lam)) == 0


def test_symmetric_family_rates():
    sigma, c = symmetric_family_rates()
    names = {s.name: s for s in c.free_symbols}
    p1, d, lam = names["pi_1"], names["d"], names["lambda"]
    for dim in (3, 4, 6):
        for pi_1, la in ((0.7, 0.5), (0.45, 0.2)):
            pi = symmetric_pi(pi_1, dim)
            point = {p1: pi_1, d: dim, lam: la}
            assert float(sigma.subs(point)) == pytest.approx(stage_one_rate(pi), rel=1e-12)
            assert float(c.subs(point)) == pytest.approx(
                stage_two_rate(pi, transition_matrix(pi, la)), rel=1e-10
            )


def test_stage_two_rate_can_be_negative_for_a_general_chain():
    """c_P's sign is not fixed: a chain sending the frequent token to the rare ones."""
    pi = np.array([0.5, 0.25, 0.25])
    P = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(pi @ P, pi)
    assert stage_two_rate(pi, P) < 0


@SLOW
@given(seeds, lambdas)
def test_jacobian_at_second_point_splits_into_nsd_and_plus_minus_c_blocks(seed, lam):
    pi = _pi(seed)
    P = transition_matrix(pi, lam)
    blocks = jacobian_blocks(second_critical_parameters(pi, M_WIDTH, MK), pi, P)
    c = stage_two_rate(pi, P)
    assert np.max(np.abs(blocks.cross)) == 0.0
    np.testing.assert_allclose(blocks.outer, blocks.outer.T, atol=1e-12)
    assert np.max(np.linalg.eigvalsh(blocks.outer)) < 1e-12
    np.testing.assert_allclose(
        np.linalg.eigvalsh(blocks.attention), attention_block_spectrum(c, M_WIDTH, MK), atol=1e-12
    )


# --- the rank-one manifold and redistribution (spec §5.4) ---------------------------------------------------
def _manifold_point(seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(size=2 * D), rng.normal(size=2)])


@FAST
@given(seeds, lambdas)
def test_rank_one_manifold_is_invariant(seed, lam):
    pi = _pi(seed)
    P = transition_matrix(pi, lam)
    x = _manifold_point(seed)
    full = parameter_field(manifold_parameters(x, M_WIDTH, MK).flatten(), pi, P, D, M_WIDTH, MK)
    tangent = manifold_parameters(manifold_field(x, pi, P), M_WIDTH, MK).flatten()
    np.testing.assert_allclose(full, tangent, atol=1e-13)


@FAST
@given(seeds, lambdas)
def test_manifold_flow_conserves_balance(seed, lam):
    """||gamma||^2 - ||beta||^2 - kQ^2 - kK^2 and kQ^2 - kK^2 are constant along the flow."""
    pi = _pi(seed)
    x = _manifold_point(seed)
    gamma, beta, kq, kk = split_state(x)
    v = manifold_field(x, pi, transition_matrix(pi, lam))
    dg, db, dkq, dkk = split_state(v)
    assert 2 * (gamma @ dg - beta @ db - kq * dkq - kk * dkk) == pytest.approx(0, abs=1e-12)
    assert 2 * (kq * dkq - kk * dkk) == pytest.approx(0, abs=1e-12)


@FAST
@given(seeds, lambdas)
def test_off_manifold_linearisation_is_the_transverse_coupling(seed, lam):
    """Along a new direction a2 = e_j (j >= 1) of R^m, the full Jacobian on
    (W0[:, j]; W1[j, :], WQ[j, 0], WK[j, 0]) is [[0, -B], [-B^T, 0]] at any manifold point."""
    pi = _pi(seed)
    P = transition_matrix(pi, lam)
    x = _manifold_point(seed)
    theta = manifold_parameters(x, M_WIDTH, MK)
    J = complex_step_jacobian(lambda y: parameter_field(y, pi, P, D, M_WIDTH, MK), theta.flatten())
    B = transverse_coupling(x, pi, P)
    expected = np.block([[np.zeros((D, D)), -B], [-B.T, np.zeros((D + 2, D + 2))]])
    off_q, off_k = D * M_WIDTH, D * M_WIDTH + M_WIDTH * MK
    off_w1 = off_k + M_WIDTH * MK
    for j in range(1, M_WIDTH):
        idx = [k * M_WIDTH + j for k in range(D)] + [off_w1 + j * D + k for k in range(D)]
        idx += [off_q + j * MK, off_k + j * MK]
        np.testing.assert_allclose(J[np.ix_(idx, idx)], expected, atol=1e-12)
        rest = np.setdiff1d(np.arange(J.shape[0]), idx)
        assert np.max(np.abs(J[np.ix_(rest, idx)])) < 1e-12  # the subspace is invariant


def test_symbolic_manifold_flow_equals_numeric_field():
    pi = np.array([0.6, 0.3, 0.1])
    P = transition_matrix(pi, 0.5)
    flow = manifold_flow(pi, P)
    x = _manifold_point(7)[: 2 * 3 + 2]
    field = sp.lambdify(flow.state, flow.field, "numpy")
    np.testing.assert_allclose(np.ravel(field(*x)), manifold_field(x, pi, P), rtol=1e-10)


@FAST
@given(seeds, lambdas)
def test_redistribution_response_pushes_frequent_token_up_rare_down(seed, lam):
    pi = _pi(seed)
    response = redistribution_response(pi, transition_matrix(pi, lam))
    assert response.rate == pytest.approx(2 * stage_two_rate(pi, transition_matrix(pi, lam)))
    assert response.D_per_kappa > 0
    assert response.gamma_per_kappa[0] > 0 > response.gamma_per_kappa[-1]


@cache
def _default_trajectory():
    P = transition_matrix(PI_DEFAULT, 0.5)
    return manifold_trajectory(PI_DEFAULT, P, kappa_seed=1e-4)


def test_redistribution_grows_with_attention_at_rate_2c():
    pi, P = PI_DEFAULT, transition_matrix(PI_DEFAULT, 0.5)
    ts, xs = _default_trajectory()
    kappa = xs[:, -2] * xs[:, -1]
    D_t = redistribution_coordinate(xs[:, :D], pi)
    assert D_t[0] == pytest.approx(0, abs=1e-12)
    window = (kappa > 1e-6) & (kappa < 1e-4)
    response = redistribution_response(pi, P)
    np.testing.assert_allclose(D_t[window] / kappa[window], response.D_per_kappa, rtol=0.01)
    slope = np.polyfit(ts[window], np.log(D_t[window]), 1)[0]
    assert slope == pytest.approx(response.rate, rel=0.01)
    kappa_slope = np.polyfit(ts[window], np.log(kappa[window]), 1)[0]
    assert kappa_slope == pytest.approx(2 * stage_two_rate(pi, P), rel=0.01)


def test_dilution_along_the_default_trajectory():
    """Low-frequency embeddings change sign; low queries stop favouring token 0 and their entropy
    exceeds H(pi); the frequent query stays focused; the pi-weighted focus rises then falls."""
    pi = PI_DEFAULT
    _, xs = _default_trajectory()
    gamma, _, kq, kk = split_state(xs[-1])
    A_end = attention(pi, kq * kk * np.outer(gamma, gamma))
    assert np.all(xs[0, 1:D] > 0) and np.all(gamma[1:] < 0)
    assert np.all(A_end[1:, 0] < pi[0]) and A_end[0, 0] > 0.99
    H_q = -np.sum(A_end * np.log(A_end), axis=1)
    assert np.all(H_q[1:] > entropy(pi))
    early = next(x for x in xs if 1e-3 < x[-2] * x[-1])  # focus first: every query gains token 0
    assert np.all(
        attention(pi, early[-2] * early[-1] * np.outer(early[:D], early[:D]))[:, 0] > pi[0]
    )
    mass = [pi @ attention(pi, x[-2] * x[-1] * np.outer(x[:D], x[:D]))[:, 0] for x in xs]
    assert max(mass) > mass[-1] + 0.03 and mass[-1] > pi[0]


# --- Stage IV (spec §5.5) -----------------------------------------------------------------------------------
def _embedded_spectrum(point, pi, P):
    theta = manifold_parameters(point.state, M_WIDTH, MK)
    J = complex_step_jacobian(lambda y: parameter_field(y, pi, P, D, M_WIDTH, MK), theta.flatten())
    return np.sort(np.linalg.eigvals(J).real)


def test_symmetric_low_frequency_tokens_give_a_degenerate_stalling_point():
    pi = symmetric_pi(0.7, D, 0.0)
    P = transition_matrix(pi, 0.5)
    point = stage_four_point(pi, P)
    assert point.residual < 1e-14
    assert np.max(np.abs(point.G_M)) < 1e-13 and np.max(np.abs(point.G_Phi)) < 1e-13
    gamma, beta, kq, kk = split_state(point.state)
    Z = attention(pi, kq * kk * np.outer(gamma, gamma)) @ np.outer(gamma, beta)
    S = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(S[0], P[0], atol=1e-12)
    for q in range(1, D):
        np.testing.assert_allclose(S[q], P[1:].mean(axis=0), atol=1e-12)
    assert np.max(transverse_rates(point.state, pi, P)) < 1e-13
    assert point.tangential_rate < 1e-10
    spectrum = _embedded_spectrum(point, pi, P)
    assert spectrum[-1] < 1e-12
    assert classify_spectrum(spectrum) is FixedPointKind.DEGENERATE
    assert predicted_stage_times(pi, P, 1e-3, mu_IV=point.rate).t_IV == math.inf


def test_symmetric_point_is_an_in_manifold_saddle_at_larger_lambda():
    """Correction to spec §5.5: at lambda = 0.7, pi_1 = 0.7 the symmetric point has G_M = G_Phi = 0
    but an O(1) unstable mode inside the manifold that splits the low-frequency tokens."""
    pi = symmetric_pi(0.7, D, 0.0)
    P = transition_matrix(pi, 0.7)
    point = stage_four_point(pi, P)
    assert np.max(np.abs(point.G_M)) < 1e-13 and point.transverse_rate < 1e-13
    assert point.tangential_rate > 1e-3
    assert _embedded_spectrum(point, pi, P)[-1] == pytest.approx(point.tangential_rate, rel=1e-6)
    J = complex_step_jacobian(lambda y: manifold_field(y, pi, P), point.state)
    values, vectors = np.linalg.eig(J)
    mode = np.real(vectors[:, np.argmax(values.real)])
    assert abs(mode[1:D].sum()) < 1e-8 * np.linalg.norm(mode[1:D])  # splits, keeps the mean
    with pytest.raises(ConfigError, match="pi_1, lambda"):
        symmetry_breaking_slope(0.7, D, 0.7)


@SLOW
@given(st.floats(0.6, 0.85), st.floats(0.2, 0.5))
def test_asymmetry_opens_a_transverse_mode_linear_in_delta(pi_1, lam):
    rates, delta = [], 1e-3
    for dl in (delta, 2 * delta):
        pi = symmetric_pi(pi_1, D, dl)
        P = transition_matrix(pi, lam)
        point = stage_four_point(pi, P)
        spectrum = _embedded_spectrum(point, pi, P)
        # top eigenvalue = ||G_M||_2 with multiplicity m - 1; G_Phi = 0; new direction _|_ gamma
        np.testing.assert_allclose(spectrum[-(M_WIDTH - 1) :], point.transverse_rate, rtol=1e-6)
        assert point.tangential_rate < 1e-10 < point.transverse_rate
        assert np.max(np.abs(point.G_Phi)) < 1e-12
        assert abs(point.direction @ split_state(point.state)[0]) < 1e-8
        rates.append(point.transverse_rate)
    # Theta(delta), not O(delta^2): rate(2 delta)/rate(delta) -> 2, the excess shrinking with delta
    # (the rate is odd in delta, so the excess is O(delta^2); it reaches 0.05 at delta = 1e-3)
    small = [
        stage_four_point(pi, transition_matrix(pi, lam)).transverse_rate
        for pi in (symmetric_pi(pi_1, D, dl) for dl in (delta / 10, delta / 5))
    ]
    assert small[1] / small[0] == pytest.approx(2.0, abs=0.01)
    assert abs(small[1] / small[0] - 2) < abs(rates[1] / rates[0] - 2) / 10
    k_delta = symmetry_breaking_slope(pi_1, D, lam, delta=2 * delta)
    assert rates[0] / delta == pytest.approx(k_delta, rel=0.03)


# --- predicted stage times against the full-parameter flow (spec §5.1-5.3, §5.5) ----------------------------
def _full_flow(pi, P, eps, t_end, events=(), t_eval=None, seed=0):
    theta = Parameters.random(np.random.default_rng(seed), D, M_WIDTH, MK, eps)
    return solve_ivp(
        lambda t, x: parameter_field(x, pi, P, D, M_WIDTH, MK),
        (0, t_end),
        theta.flatten(),
        method="LSODA",
        rtol=1e-9,
        atol=1e-14,
        events=list(events),
        t_eval=t_eval,
    )


def test_stage_onsets_shift_by_the_predicted_slopes_in_log_eps():
    pi, P = PI_DEFAULT, transition_matrix(PI_DEFAULT, 0.5)
    loss_mid = (math.log(D) + entropy(pi)) / 2
    focus_mid = (pi[0] + 1) / 2

    def stage_one(t, x):
        return parameter_loss(Parameters.unflatten(x, D, M_WIDTH, MK), pi, P) - loss_mid

    def stage_two(t, x):
        W0, WQ, WK, _ = Parameters.unflatten(x, D, M_WIDTH, MK)
        return attention(pi, W0 @ WQ @ WK.T @ W0.T)[0, 0] - focus_mid

    stage_two.terminal = True
    onsets = []
    for eps in (1e-3, 1e-5):
        sol = _full_flow(pi, P, eps, 1000.0, events=(stage_one, stage_two))
        onsets.append((sol.t_events[0][0], sol.t_events[1][0]))
    (a1, a2), (b1, b2) = onsets
    pred = [predicted_stage_times(pi, P, eps, mu_IV=0.0) for eps in (1e-3, 1e-5)]
    assert b1 - a1 == pytest.approx(pred[1].t_I - pred[0].t_I, rel=0.01)
    assert b2 - a2 == pytest.approx(pred[1].t_II - pred[0].t_II, rel=0.02)


def test_full_flow_escapes_the_stage_four_point_at_the_predicted_rate():
    ts = np.linspace(0.0, 1000.0, 101)
    for delta in (0.0, 0.04):
        pi = symmetric_pi(0.7, D, delta)
        P = transition_matrix(pi, 0.5)
        point = stage_four_point(pi, P)
        sol = _full_flow(pi, P, 1e-3, ts[-1], t_eval=ts)
        s2 = [
            np.linalg.svd(Parameters.unflatten(x, D, M_WIDTH, MK).W0, compute_uv=False)[1]
            for x in sol.y.T
        ]
        slope = np.polyfit(ts[60:], np.log(s2[60:]), 1)[0]
        if delta == 0.0:  # stall: the second embedding direction neither grows nor decays
            assert abs(slope) < 1e-6
            stage_four_loss = parameter_loss(manifold_parameters(point.state, M_WIDTH, MK), pi, P)
            final = parameter_loss(Parameters.unflatten(sol.y[:, -1], D, M_WIDTH, MK), pi, P)
            assert final == pytest.approx(stage_four_loss, abs=1e-9)
        else:
            assert slope == pytest.approx(point.rate, rel=0.03)


def test_full_flow_at_the_default_pi_leaves_rank_one_at_mu_iv():
    pi, P = PI_DEFAULT, transition_matrix(PI_DEFAULT, 0.5)
    ts = np.linspace(220.0, 320.0, 11)
    sol = _full_flow(pi, P, 1e-3, ts[-1], t_eval=ts, seed=1)
    s2 = [
        np.linalg.svd(Parameters.unflatten(x, D, M_WIDTH, MK).W0, compute_uv=False)[1]
        for x in sol.y.T
    ]
    slope = np.polyfit(ts, np.log(s2), 1)[0]
    assert slope == pytest.approx(stage_four_point(pi, P).rate, rel=0.03)
