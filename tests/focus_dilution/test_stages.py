"""Focus-dilution theory: Stage I at the origin, theta_c^1 and Stage II
(``theory.focus_dilution.stages``; spec §5.2-5.3)."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.focus_dilution.chains import random_pi
from theory.focus_dilution.manifold import (
    symmetric_pi,
)
from theory.focus_dilution.population import (
    Parameters,
    attention,
    parameter_gradients,
    parameter_loss,
    pi_symbols,
    population_gradients,
    population_loss_expr,
    random_metropolis_chain,
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
from theory.validation import ConfigError

D, M_WIDTH, MK = 4, 3, 2
PI_DEFAULT = np.array([0.75, 0.19, 0.05, 0.01])  # spec §2.3
FAST = settings(max_examples=15, deadline=None)
SLOW = settings(max_examples=2, deadline=None)

seeds = st.integers(0, 2**32 - 1)
lambdas = st.floats(0.05, 0.95)


# --- Stage I: the origin (spec §5.2) --------------------------------------------------------------
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
    pi = random_pi(seed)
    a, b = condensation_directions(pi)
    sigma = stage_one_rate(pi)
    for P in (transition_matrix(pi, lam), random_metropolis_chain(pi, seed)):
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
    pi = random_pi(seed)
    P = transition_matrix(pi, lam)
    theta = Parameters.random(np.random.default_rng(seed), D, M_WIDTH, MK, 1e-5)
    a, b = condensation_directions(pi)
    sigma = stage_one_rate(pi)
    field = Parameters(*(-g for g in parameter_gradients(theta, pi, P)))
    np.testing.assert_allclose(field.W0.T @ a, sigma * theta.W1 @ b, rtol=1e-3)
    np.testing.assert_allclose(field.W1 @ b, sigma * theta.W0.T @ a, rtol=1e-3)


# --- theta_c^1 and Stage II (spec §5.2-5.3) -------------------------------------------------------
@FAST
@given(seeds, lambdas)
def test_second_critical_point_is_critical_with_unigram_prediction(seed, lam):
    pi = random_pi(seed)
    rng = np.random.default_rng(seed)
    alpha = rng.normal(size=M_WIDTH)
    alpha /= np.linalg.norm(alpha)
    point = second_critical_point(pi)
    for P in (transition_matrix(pi, lam), random_metropolis_chain(pi, seed)):
        theta = second_critical_parameters(pi, M_WIDTH, MK, alpha)
        grads = parameter_gradients(theta, pi, P).flatten()
        assert np.max(np.abs(grads)) < 1e-12
        assert parameter_loss(theta, pi, P) == pytest.approx(entropy(pi), rel=1e-12)
        Z = attention(pi, np.zeros((D, D))) @ np.outer(point.gamma, point.beta)
        S = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(S, np.tile(pi, (D, 1)), atol=1e-12)
        # critical although G_Phi != 0: WQ = WK = 0 kills every attention gradient. G_Phi
        # vanishes linearly as the chain approaches iid (lam -> 0: 9.8e-5 at lam = 0.055 for
        # seed 156), so "nonzero" is read against the round-off of the gradients above (< 1e-12)
        _, G_Phi = population_gradients(np.outer(point.gamma, point.beta), np.zeros((D, D)), pi, P)
        assert np.max(np.abs(G_Phi)) > 1e-8
    assert np.linalg.norm(point.gamma) == pytest.approx(point.g)
    assert np.linalg.norm(point.beta) == pytest.approx(point.g)
    assert abs(point.beta.sum()) < 1e-12


@FAST
@given(seeds, lambdas)
def test_stage_two_attention_gradient_and_rate(seed, lam):
    pi = random_pi(seed)
    point = second_critical_point(pi)
    M = np.outer(point.gamma, point.beta)
    for P in (transition_matrix(pi, lam), random_metropolis_chain(pi, seed)):
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
    pi = random_pi(seed)
    P = transition_matrix(pi, lam)
    blocks = jacobian_blocks(second_critical_parameters(pi, M_WIDTH, MK), pi, P)
    c = stage_two_rate(pi, P)
    assert np.max(np.abs(blocks.cross)) == 0.0
    np.testing.assert_allclose(blocks.outer, blocks.outer.T, atol=1e-12)
    assert np.max(np.linalg.eigvalsh(blocks.outer)) < 1e-12
    np.testing.assert_allclose(
        np.linalg.eigvalsh(blocks.attention), attention_block_spectrum(c, M_WIDTH, MK), atol=1e-12
    )
