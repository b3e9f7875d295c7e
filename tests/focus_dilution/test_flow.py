"""The population flow in JAX/diffrax against the closed forms of theory/
(``simulate.focus_dilution.flow``; spec §3.3-3.4, §4, §5)."""

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from simulate.focus_dilution.flow import (
    flow_field,
    initial_batch,
    left_singular_vectors,
    manifold_field,
    manifold_trajectory,
    population_loss,
    singular_values,
    solve_flow,
    stage_four_point,
    time_grid,
)
from simulate.focus_dilution.measure import (
    measured_rates,
    run_onsets,
)
from tests.focus_dilution.chains import random_pi
from theory.focus_dilution import manifold
from theory.focus_dilution.population import (
    Parameters,
    parameter_gradients,
    parameter_loss,
    random_metropolis_chain,
    transition_matrix,
)
from theory.focus_dilution.stages import (
    entropy,
    second_critical_point,
    stage_one_rate,
    stage_two_rate,
)

D, M, MK = 4, 3, 2
PI = np.array([0.75, 0.19, 0.05, 0.01])
FAST = settings(max_examples=10, deadline=None)


def _chain(seed, lam):
    pi = random_pi(seed)
    if seed % 2:
        return pi, random_metropolis_chain(pi, seed + 1)
    return pi, transition_matrix(pi, lam)


def _as_jax(theta):
    return Parameters(*(jnp.asarray(w) for w in theta))


# --- the model in JAX against the closed forms of theory/ (spec §3.3-3.4) -------------------------
@FAST
@given(st.integers(0, 2**31), st.floats(0.05, 0.95), st.sampled_from([1.0, 1 / math.sqrt(MK)]))
def test_closed_form_gradients_equal_jax_grad_of_the_population_loss(seed, lam, qk_scale):
    pi, P = _chain(seed, lam)
    theta = Parameters.random(np.random.default_rng(seed), D, M, MK, 0.8)
    closed = parameter_gradients(theta, pi, P, qk_scale)
    auto = jax.grad(population_loss)(_as_jax(theta), jnp.asarray(pi), jnp.asarray(P), qk_scale)
    for a, b in zip(closed, auto):
        np.testing.assert_allclose(np.asarray(b), a, rtol=1e-9, atol=1e-12)
    assert float(population_loss(_as_jax(theta), pi, P, qk_scale)) == pytest.approx(
        parameter_loss(theta, pi, P, qk_scale), rel=1e-12
    )
    field = flow_field(_as_jax(theta), jnp.asarray(pi), jnp.asarray(P), qk_scale)
    np.testing.assert_allclose(np.asarray(field.W0), -closed.W0, rtol=1e-9, atol=1e-12)


@FAST
@given(st.integers(0, 2**31), st.floats(0.05, 0.95))
def test_manifold_field_equals_the_theory_field(seed, lam):
    pi, P = _chain(seed, lam)
    x = np.random.default_rng(seed).normal(size=2 * D + 2)
    np.testing.assert_allclose(
        np.asarray(manifold_field(jnp.asarray(x), jnp.asarray(pi), jnp.asarray(P))),
        manifold.manifold_field(x, pi, P),
        rtol=1e-9,
        atol=1e-12,
    )


def test_manifold_trajectory_agrees_with_scipy():
    """diffrax (Tsit5) against scipy's DOP853 on the reduced flow of Stages II-III."""
    P = transition_matrix(PI, 0.5)
    ts, xs = manifold_trajectory(PI, P, kappa_seed=1e-3, t_end=200.0, rest_tol=0.0)
    assert ts[-1] == pytest.approx(200.0)
    ref = solve_ivp(
        lambda t, x: manifold.manifold_field(x, PI, P),
        (0, 200.0),
        manifold.second_point_state(PI, 1e-3),
        method="DOP853",
        rtol=1e-11,
        atol=1e-13,
        t_eval=ts[::50],
    )
    np.testing.assert_allclose(xs[::50], ref.y.T, rtol=1e-6, atol=1e-8)


def test_manifold_trajectory_stops_at_rest():
    P = transition_matrix(PI, 0.5)
    ts, xs = manifold_trajectory(PI, P, kappa_seed=1e-4, rest_tol=1e-8)
    assert np.linalg.norm(manifold.manifold_field(xs[-1], PI, P)) <= 1e-8 * 1.5
    assert ts[-1] < 50 * (1 + math.log(1e4)) / stage_two_rate(PI, P)
    point = stage_four_point(PI, P)
    assert point.residual < 1e-13
    assert point.rate == pytest.approx(0.0246798, rel=1e-4)  # docs/focus_dilution_verification


# --- full-parameter flow: rates and onsets (spec §5.2-5.3; issue 5 "done means") ------------------
EPS = (1e-3, 1e-6)


@cache
def _timing_runs():
    P = transition_matrix(PI, 0.5)
    t_max = 1.3 * (1 / stage_one_rate(PI) + 1 / stage_two_rate(PI, P)) * math.log(1 / min(EPS))
    return solve_flow(PI, P, list(EPS), [0, 0], time_grid(t_max, 1500), m=M, m_k=MK)


def test_population_flow_decreases_the_loss_and_records_observables():
    data = _timing_runs()
    # the seconds the figures' summaries (and the benchmark's compile column) report
    assert data.attrs["compile_seconds"] > 0 and data.attrs["run_seconds"] > 0
    loss = data["loss"].values
    assert np.all(np.diff(loss, axis=1) < 1e-12)
    assert loss[:, 0] == pytest.approx(math.log(D), abs=1e-5)
    np.testing.assert_allclose(data["attention"].values.sum(-1), 1.0, atol=1e-12)
    assert data["attention_entropy"].values[:, 0] == pytest.approx(entropy(PI), abs=1e-6)
    assert data["time"].dims == ("run", "sample")


def test_measured_rates_match_sigma_and_c_within_five_percent_at_small_eps():
    data = _timing_runs()
    P = transition_matrix(PI, 0.5)
    rates = measured_rates(data.isel(run=1), float(second_critical_point(PI).g))
    assert rates["sigma"] == pytest.approx(stage_one_rate(PI), rel=0.05)
    assert rates["c"] == pytest.approx(stage_two_rate(PI, P), rel=0.05)


def test_stage_onsets_follow_the_predicted_slopes_in_log_eps():
    data = _timing_runs()
    P = transition_matrix(PI, 0.5)
    onsets = run_onsets(data)
    dL = math.log(EPS[0] / EPS[1])
    slope_I = (onsets[1, 0] - onsets[0, 0]) / dL
    slope_II = (onsets[1, 1] - onsets[0, 1]) / dL
    assert slope_I == pytest.approx(1 / stage_one_rate(PI), rel=0.10)
    assert slope_II == pytest.approx(1 / stage_one_rate(PI) + 1 / stage_two_rate(PI, P), rel=0.10)


def test_initial_parameters_scale_with_eps_along_one_direction():
    init = initial_batch(D, 16, 16, [1e-2, 1e-4], [3, 3])
    np.testing.assert_allclose(np.asarray(init.W0[0]) / 1e-2, np.asarray(init.W0[1]) / 1e-4)
    for w in init:
        assert np.std(np.asarray(w[0])) == pytest.approx(1e-2, rel=0.25)


def test_delta_zero_flow_stalls_on_the_manifold_and_delta_escapes_at_mu_iv():
    """Spec §5.5 (corrected regime pi_1 = 0.7, lambda = 0.5): with symmetric low-frequency tokens
    the flow comes to rest at the degenerate Stage-IV point (sigma_2(W0) neither grows nor decays,
    the gradient vanishes); delta = 0.04 leaves it at the top transverse rate."""
    runs = []
    for delta in (0.0, 0.04):
        pi = manifold.symmetric_pi(0.7, D, delta)
        runs.append(
            (pi, transition_matrix(pi, 0.5), stage_four_point(pi, transition_matrix(pi, 0.5)))
        )
    grids = [time_grid(3000.0, 1200, t_dense=300.0), time_grid(1500.0, 1200, t_dense=300.0)]
    data = solve_flow([r[0] for r in runs], [r[1] for r in runs], 1e-3, [0, 0], grids, m=M, m_k=MK)
    stall = data.isel(run=0)
    ts, s2 = stall["time"].values, stall["sv_W0"].values[:, 1]
    late = ts > 1500
    assert abs(np.polyfit(ts[late], np.log(s2[late]), 1)[0]) < 1e-6
    point = runs[0][2]
    L_IV = parameter_loss(manifold.manifold_parameters(point.state, 1, 1), runs[0][0], runs[0][1])
    assert stall["loss"].values[-1] == pytest.approx(L_IV, abs=1e-9)
    assert stall["grad_norm"].values[-1] < 1e-6
    assert np.isnan(run_onsets(data.isel(run=[0]))[0, 3])  # no Stage IV
    escape = measured_rates(data.isel(run=1), float(second_critical_point(runs[1][0]).g))
    assert escape["mu_IV"] == pytest.approx(runs[1][2].rate, rel=0.05)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_vmapped_svds_are_lapacks_called_on_one_matrix_at_a_time(seed):
    """Under vmap (seeds) the observables' SVDs equal numpy's per matrix, and the compiled program
    hands LAPACK single matrices, not the batch (whose pooled batch split can hang)."""
    x = np.random.default_rng(seed).normal(size=(5, 4, 6))
    values = jax.jit(jax.vmap(singular_values))
    vectors = jax.jit(jax.vmap(left_singular_vectors))
    np.testing.assert_allclose(values(x), np.linalg.svd(x, compute_uv=False), rtol=1e-12)
    U = np.asarray(vectors(x))
    np.testing.assert_allclose(
        np.abs(U), np.abs(np.linalg.svd(x, full_matrices=False)[0]), atol=1e-12
    )
    for f in (values, vectors):
        calls = [line for line in f.lower(x).as_text().splitlines() if "gesdd" in line]
        assert calls and all("tensor<4x6xf64>" in line for line in calls), calls
