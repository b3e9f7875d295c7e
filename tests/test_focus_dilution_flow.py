"""Tests of the focus-dilution simulations (spec ``focus_dilution.md`` §3-6): the JAX population
loss and its gradient flow (simulate.focus_dilution.flow), the finite-sample model
(simulate.focus_dilution.training) and the text corpus (simulate.focus_dilution.text_corpus)."""

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from simulate.focus_dilution import training
from simulate.focus_dilution.flow import (
    fit_rate,
    flow_field,
    initial_batch,
    manifold_field,
    manifold_trajectory,
    measured_rates,
    population_loss,
    run_onsets,
    solve_flow,
    stage_four_point,
    stage_onsets,
    time_grid,
)
from simulate.focus_dilution.text_corpus import (
    NEWLINE,
    UNKNOWN,
    build_corpus,
    bundled_text,
    load_corpus,
    tokenize,
)
from theory.focus_dilution import manifold
from theory.focus_dilution.population import (
    Parameters,
    parameter_gradients,
    parameter_loss,
    reversible_transition,
    transition_matrix,
)
from theory.focus_dilution.stages import (
    entropy,
    second_critical_point,
    stage_one_rate,
    stage_two_rate,
)
from theory.validation import ConfigError

D, M, MK = 4, 3, 2
PI = np.array([0.75, 0.19, 0.05, 0.01])
FAST = settings(max_examples=10, deadline=None)


def _pi(seed, d=D):
    raw = np.random.default_rng(seed).dirichlet(np.ones(d))
    pi = 0.02 + (1 - 0.02 * d) * raw
    return np.sort(pi / pi.sum())[::-1]


def _chain(seed, lam):
    pi = _pi(seed)
    if seed % 2:
        U = np.random.default_rng(seed + 1).uniform(size=(D, D))
        return pi, reversible_transition(pi, (U + U.T) / (2 * D))
    return pi, transition_matrix(pi, lam)


def _as_jax(theta):
    return Parameters(*(jnp.asarray(w) for w in theta))


# --- the model in JAX against the closed forms of theory/ (spec §3.3-3.4) ----------------------------
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


# --- full-parameter flow: rates and onsets (spec §5.2-5.3; issue 5 "done means") -----------------------
EPS = (1e-3, 1e-6)


@cache
def _timing_runs():
    P = transition_matrix(PI, 0.5)
    t_max = 1.3 * (1 / stage_one_rate(PI) + 1 / stage_two_rate(PI, P)) * math.log(1 / min(EPS))
    return solve_flow(PI, P, list(EPS), [0, 0], time_grid(t_max, 1500), m=M, m_k=MK)


def test_population_flow_decreases_the_loss_and_records_observables():
    data = _timing_runs()
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
    """Spec §5.5 (corrected regime pi_1 = 0.7, lambda = 0.5): with symmetric low-frequency tokens the
    flow comes to rest at the degenerate Stage-IV point (sigma_2(W0) neither grows nor decays, the
    gradient vanishes); delta = 0.04 leaves it at the top transverse rate."""
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


# --- onset rules and rate fits on constructed curves (spec §6) -------------------------------------
def test_stage_onsets_on_constructed_curves():
    ts = np.linspace(0, 150, 1501)
    H = entropy(PI)
    step = 1 / (1 + np.exp(-(ts - 10)))
    loss = math.log(D) - (math.log(D) - H) * step
    focus = PI[0] + (1 - PI[0]) / (1 + np.exp(-(ts - 40)))
    max_entropy = H + np.where(ts > 30, 0.3 * np.tanh((ts - 45) / 3), 0.0)  # focus, then dilution
    sigma2 = 1e-3 * np.exp(0.1 * np.clip(ts - 40, 0, None))
    onsets = stage_onsets(ts, loss, focus, max_entropy, sigma2, PI)
    np.testing.assert_allclose(onsets[:3], [10, 40, 45], atol=0.2)
    assert onsets[3] == pytest.approx(40 + math.log(500) / 0.1, abs=0.2)
    stalled = stage_onsets(ts, loss, np.full_like(ts, PI[0]), max_entropy, sigma2, PI)
    assert np.isnan(stalled[1:]).all()


def test_fit_rate_recovers_an_exponential_and_reports_its_window():
    ts = np.linspace(0, 50, 501)
    y = 1e-6 * np.exp(0.37 * ts)
    rate, (a, b) = fit_rate(ts, y, 1e-4, 1e-2)
    assert rate == pytest.approx(0.37, rel=1e-9)
    assert a == pytest.approx(math.log(100) / 0.37, abs=0.1)
    assert b == pytest.approx(math.log(1e4) / 0.37, abs=0.1)
    assert math.isnan(fit_rate(ts, y, 1e3, 1e4)[0])


# --- the finite-sample model (spec §3.2-3.3) ----------------------------------------------------
def _explicit_logits(theta, X, qk_scale):
    """Position by position: embeddings, query of the last position, keys of every position."""
    W0, WQ, WK, W1 = (np.asarray(w) for w in theta)
    out = []
    for x in np.asarray(X):
        E = W0[x]
        scores = qk_scale * (E[-1] @ WQ) @ (E @ WK).T
        a = np.exp(scores - scores.max())
        a /= a.sum()
        out.append(a @ E @ W1)
    return np.array(out)


def test_finite_context_model_is_the_softmax_over_positions():
    rng = np.random.default_rng(0)
    theta = Parameters.random(rng, D, 5, 3, 0.7)
    X = jnp.asarray(rng.integers(0, D, size=(6, 9)))
    logits, attention = training.last_token_logits(_as_jax(theta), X, 0.5)
    np.testing.assert_allclose(np.asarray(logits), _explicit_logits(theta, X, 0.5), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(attention).sum(-1), 1.0)
    # the population formula with the context histogram in place of pi (spec §3.3)
    from theory.focus_dilution.population import attention as pop_attention
    from theory.focus_dilution.population import parameter_maps

    M_, Phi = parameter_maps(theta, 0.5)
    for x, z in zip(np.asarray(X), np.asarray(logits)):
        hist = np.bincount(x, minlength=D) / x.size
        seen = hist > 0
        A = pop_attention(hist[seen], Phi[np.ix_([x[-1]], np.nonzero(seen)[0])])
        np.testing.assert_allclose(z, (A @ M_[seen])[0], rtol=1e-10)


def test_empirical_loss_tends_to_the_population_loss_with_the_context_length():
    """Spec §3.3 (finite-context limit): at fixed parameters the last-token loss on sequences of
    the chain approaches L(M, Phi) as s grows; the gap shrinks roughly like 1/s."""
    P = transition_matrix(PI, 0.5)
    rng = np.random.default_rng(1)
    theta = Parameters.random(rng, D, M, MK, 0.9)
    pop = parameter_loss(theta, PI, P)
    gaps = []
    for s in (8, 128):
        seqs = training.sample_chain(
            jax.random.PRNGKey(s), jnp.asarray(PI), jnp.asarray(P), 20000, s
        )
        logits, _ = training.last_token_logits(_as_jax(theta), seqs)
        # labels averaged exactly over P[x_s] and queries weighted by pi exactly: what is left
        # is the finite-context effect and the contexts' sampling noise
        q = np.asarray(seqs[:, -1])
        ell = -np.sum(P[q] * np.asarray(jax.nn.log_softmax(logits)), axis=-1)
        loss = sum(PI[k] * ell[q == k].mean() for k in range(D))
        gaps.append(abs(loss - pop))
    assert gaps[1] < 0.25 * gaps[0]
    assert gaps[1] < 0.01


def test_sampled_chain_has_stationary_marginals_and_repeat_rate():
    P = transition_matrix(PI, 0.5)
    seqs = np.asarray(
        training.sample_chain(jax.random.PRNGKey(0), jnp.asarray(PI), jnp.asarray(P), 4000, 50)
    )
    freq = np.bincount(seqs.ravel(), minlength=D) / seqs.size
    np.testing.assert_allclose(freq, PI, atol=0.01)
    repeats = np.mean(seqs[:, 1:] == seqs[:, :-1])
    assert repeats == pytest.approx(0.5 + 0.5 * np.sum(PI**2), abs=0.01)


def test_training_run_through_the_store(tmp_path):
    cfg = training.FocusDilutionConfig(
        context=16,
        train_size=64,
        steps=40,
        log_every=10,
        chunk=20,
        seeds=2,
        lr=0.2,
        init_scale=0.1,
        validation=64,
        quiet=True,
        out=tmp_path / "run",
    )
    path = training.run(cfg)
    from simulate.store import load

    ds, config = load(path)
    assert config["experiment"] == "focus-dilution"
    assert ds.sizes["seed"] == 2 and ds.sizes["step"] == 5
    assert np.all(ds["population_loss"].values[:, -1] < ds["population_loss"].values[:, 0])
    runs = training.as_runs(ds, cfg)
    np.testing.assert_allclose(runs["time"].values[0], ds["step"].values * 0.2)
    assert run_onsets(runs).shape == (2, 4)


def test_bad_training_config_fails_with_one_line():
    with pytest.raises(ConfigError, match="lambda"):
        training.FocusDilutionConfig(lam=1.0)
    with pytest.raises(ConfigError, match="pi"):
        training.FocusDilutionConfig(pi=(0.5, 0.6))
    with pytest.raises(ConfigError, match="text"):
        training.FocusDilutionConfig(source="text", text="/no/such/file.txt")


# --- text corpus ---------------------------------------------------------------------------------
def test_tokenizer_and_truncated_vocabulary():
    tokens = tokenize("The cat's hat, the CAT.\n\nA 42 dogs!")
    assert tokens == [
        "the",
        "cat's",
        "hat",
        ",",
        "the",
        "cat",
        ".",
        NEWLINE,
        "a",
        "42",
        "dogs",
        "!",
    ]
    corpus = build_corpus(tokens, 4, "test")
    assert corpus.types[0] == UNKNOWN and corpus.types[1] == "the"
    assert corpus.vocab == 4 and corpus.ids.size == len(tokens)
    assert corpus.index("dogs") is None and np.sum(corpus.ids == 0) == len(tokens) - 2 - 2
    assert corpus.unigram().sum() == pytest.approx(1.0)


def test_bundled_text_is_english_prose_and_a_file_can_replace_it(tmp_path):
    text = bundled_text()
    assert len(tokenize(text)) > 40000
    corpus = load_corpus(None, 300)
    assert corpus.types[1:4].count("the") == 1  # "the" is among the most frequent words
    assert corpus.index("continue") is not None
    path = tmp_path / "story.txt"
    path.write_text("Once upon a time there was a cat. " * 200)
    mine = load_corpus(path, 50)
    assert mine.source == str(path) and mine.index("cat") is not None
    with pytest.raises(ConfigError, match="text"):
        load_corpus(tmp_path / "missing.txt", 50)
