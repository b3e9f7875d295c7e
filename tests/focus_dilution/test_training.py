"""The finite-sample model and the ``focus-dilution`` experiment
(``simulate.focus_dilution.training``; spec §3.2-3.3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.focus_dilution import training
from simulate.focus_dilution.measure import (
    run_onsets,
)
from simulate.runner import RunOutput
from theory.focus_dilution.population import (
    Parameters,
    parameter_loss,
    transition_matrix,
)
from theory.validation import ConfigError

D, M, MK = 4, 3, 2
PI = np.array([0.75, 0.19, 0.05, 0.01])


def _as_jax(theta):
    return Parameters(*(jnp.asarray(w) for w in theta))


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


# jitted once for every example (op by op, each example took 0.2 s)
_type_logits = jax.jit(training.type_logits)
_by_type = jax.jit(jax.value_and_grad(training.type_loss))
_by_position = jax.jit(jax.value_and_grad(training.next_token_loss))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.1, 3.0), st.sampled_from([1.0, 0.5]))
def test_type_counts_give_the_position_model_and_its_gradient(seed, scale, qk_scale):
    """The training step's form (``type_loss``: scores per type, ``softmax(z_t + ln c_t)``)
    is the softmax over positions, value and gradient, also where a context lacks a type (the
    first rows draw from two of the four types only)."""
    rng = np.random.default_rng(seed)
    theta = _as_jax(Parameters.random(rng, D, M, MK, scale))
    seqs = rng.integers(0, D, size=(8, 10))
    seqs[:3] = rng.integers(0, 2, size=(3, 10))
    seqs = jnp.asarray(seqs, dtype=jnp.int32)
    batch = training.type_batch(seqs, D)
    logits, mass = _type_logits(theta, batch.query, batch.counts, qk_scale)
    np.testing.assert_allclose(logits, _explicit_logits(theta, seqs[:, :-1], qk_scale), rtol=1e-10)
    np.testing.assert_array_equal(np.asarray(mass)[:3, 2:], 0.0)
    by_type, by_position = _by_type(theta, batch, qk_scale), _by_position(theta, seqs, qk_scale)
    np.testing.assert_allclose(by_type[0], by_position[0], rtol=1e-12)
    # entries that are rounding noise (a saturated softmax) are compared on the gradient's scale
    scale = max(float(jnp.abs(h).max()) for h in by_position[1])
    for g, h in zip(by_type[1], by_position[1]):
        np.testing.assert_allclose(g, h, rtol=1e-9, atol=1e-12 * scale)


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
    )
    path = training.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
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


def test_adam_eps_reaches_the_optimizer_and_is_adam_only():
    """Adam's first step is -lr g / (|g| + eps): with the default eps about -lr sign(g), with
    eps >> |g| gradient descent with step lr / eps."""
    params = {"w": jnp.zeros(2)}
    g = np.array([1e-3, -2e-3])
    for eps in (training.ADAM_EPS, 1.0):
        cfg = training.FocusDilutionConfig(optimizer="adam", lr=3e-3, adam_eps=eps)
        opt = training.optimizer(cfg)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
            step = opt.update({"w": jnp.asarray(g)}, opt.init(params), params)[0]["w"]
        np.testing.assert_allclose(step, -3e-3 * g / (np.abs(g) + eps), rtol=1e-6)
    with pytest.raises(ConfigError, match="adam_eps"):
        training.FocusDilutionConfig(optimizer="adam", adam_eps=0.0)
    with pytest.raises(ConfigError, match="adam_eps"):
        training.FocusDilutionConfig(adam_eps=1e-3)  # gd has no eps
