"""Focus-dilution theory: the rank-one manifold, redistribution and Stage IV
(``theory.focus_dilution.manifold``; spec §5.4-5.5)."""

import math
from functools import cache

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.focus_dilution.flow import (
    manifold_trajectory,
    stage_four_point,
    symmetry_breaking_slope,
)
from tests.focus_dilution.chains import random_pi
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
    attention,
    complex_step_jacobian,
    parameter_field,
    transition_matrix,
)
from theory.focus_dilution.stages import (
    entropy,
    stage_two_rate,
)
from theory.gradient_flow import FixedPointKind, classify_spectrum
from theory.validation import ConfigError

D, M_WIDTH, MK = 4, 3, 2
PI_DEFAULT = np.array([0.75, 0.19, 0.05, 0.01])  # spec §2.3
FAST = settings(max_examples=15, deadline=None)
SLOW = settings(max_examples=2, deadline=None)

seeds = st.integers(0, 2**32 - 1)
lambdas = st.floats(0.05, 0.95)


# --- the rank-one manifold and redistribution (spec §5.4) -----------------------------------------
def _manifold_point(seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(size=2 * D), rng.normal(size=2)])


@FAST
@given(seeds, lambdas)
def test_rank_one_manifold_is_invariant(seed, lam):
    pi = random_pi(seed)
    P = transition_matrix(pi, lam)
    x = _manifold_point(seed)
    full = parameter_field(manifold_parameters(x, M_WIDTH, MK).flatten(), pi, P, D, M_WIDTH, MK)
    tangent = manifold_parameters(manifold_field(x, pi, P), M_WIDTH, MK).flatten()
    np.testing.assert_allclose(full, tangent, atol=1e-13)


@FAST
@given(seeds, lambdas)
def test_manifold_flow_conserves_balance(seed, lam):
    """||gamma||^2 - ||beta||^2 - kQ^2 - kK^2 and kQ^2 - kK^2 are constant along the flow."""
    pi = random_pi(seed)
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
    pi = random_pi(seed)
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
    pi = random_pi(seed)
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


# --- Stage IV (spec §5.5) -------------------------------------------------------------------------
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
@given(st.floats(0.7, 0.85), st.floats(0.2, 0.5))
def test_asymmetry_opens_a_transverse_mode_linear_in_delta(pi_1, lam):
    """Away from the curve where k_delta vanishes (the next test), delta = 1e-3 is in the linear
    regime of every drawn setting."""
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
    # (rate / delta = k_delta + b delta^2: the excess 6 b delta^2 / k_delta falls 100-fold)
    small = [
        stage_four_point(pi, transition_matrix(pi, lam)).transverse_rate
        for pi in (symmetric_pi(pi_1, D, dl) for dl in (delta / 10, delta / 5))
    ]
    assert small[1] / small[0] == pytest.approx(2.0, abs=0.01)
    assert abs(small[1] / small[0] - 2) < abs(rates[1] / rates[0] - 2) / 10
    # the limit extrapolated from delta and 2 delta is the rate / delta of a ten times smaller delta
    k_delta = symmetry_breaking_slope(pi_1, D, lam, delta=2 * delta)
    assert small[0] / (delta / 10) == pytest.approx(k_delta, rel=1e-3)


def test_richardson_limit_removes_the_quadratic_correction():
    """rate / delta = k_delta + b delta^2 with no linear term: the extrapolation from delta = 2e-3
    and 1e-3 at the spec setting agrees with rate / delta at delta = 1e-4 (b delta^2 ~ 1e-5 of
    k_delta there); weighting them for a linear correction (2, -1) missed it by 2.5e-3."""
    pi_1, lam, dl = 0.7, 0.5, 1e-4
    pi = symmetric_pi(pi_1, D, dl)
    rate = stage_four_point(pi, transition_matrix(pi, lam)).transverse_rate
    assert rate / dl == pytest.approx(symmetry_breaking_slope(pi_1, D, lam), rel=1e-4)


def test_linear_law_degenerates_where_k_delta_vanishes():
    """Finding (spec §5.5, lambda = 0.5): k_delta falls from 0.017 at pi_1 = 0.64 and 0.66 to
    about 0.001 at pi_1 = 0.65, where the quadratic correction b is ~ 10x larger, so delta = 1e-3
    is outside the Theta(delta) regime there: rate(2 delta) / rate(delta) is far from 2."""
    lam = 0.5
    k = {p: symmetry_breaking_slope(p, D, lam, delta=2e-4) for p in (0.64, 0.65, 0.66)}
    assert 0 < k[0.65] < min(k[0.64], k[0.66]) / 10
    rates = []
    for dl in (1e-3, 2e-3):
        pi = symmetric_pi(0.65, D, dl)
        rates.append(stage_four_point(pi, transition_matrix(pi, lam)).transverse_rate)
    assert rates[1] / rates[0] > 3
