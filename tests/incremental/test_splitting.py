"""The linearised split (theory.incremental.splitting) against the update rules it comes from, and
the head-splitting rate of the minimal transformer
(simulate.incremental.plateau_splitting) on a tiny run."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.incremental.markov_task import sample_sequences
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    log_probs,
    markov_data,
)
from simulate.incremental.plateau_splitting import (
    PROBE_KEY,
    splitting_rates,
    states_at,
    symmetric_copy,
)
from theory.incremental.splitting import characteristic_polynomial, splitting_rate, z
from theory.validation import ConfigError


def _iterate(mu: float, beta: float, decay: float, momentum: str, steps: int) -> float:
    """Growth per step of the split under the update rule itself: heads x_1 = -x_2 = delta on the
    curvature -mu (lr = 1); AdamW's EMA momentum and decoupled decay, or optax's SGD trace. The
    pair is rescaled each step (the map is linear) and the last 50 steps' growth averaged."""
    delta, m, growth = 1.0, 0.0, 0.0
    for t in range(steps):
        g = -mu * delta  # the gradient of -mu delta^2 / 2
        m = beta * m + (1 - beta) * g if momentum == "ema" else g + beta * m
        delta = (1 - decay) * delta - m
        if t >= steps - 50:
            growth += math.log(abs(delta))
        delta, m = delta / abs(delta), m / abs(delta)
    return growth / 50


@settings(max_examples=40, deadline=None)
@given(
    mu=st.floats(0.01, 1.0),
    beta=st.floats(0.0, 0.95),
    decay=st.floats(0.0, 0.005),
    momentum=st.sampled_from(["ema", "heavy_ball"]),
)
def test_splitting_rate_is_the_growth_of_the_update_rule(mu, beta, decay, momentum):
    decay = decay if momentum == "ema" else 0.0
    # long enough for the slower root to have died out against the growing one
    assert splitting_rate(mu, beta, decay, momentum) == pytest.approx(
        _iterate(mu, beta, decay, momentum, 2000), rel=1e-6
    )


def test_without_momentum_both_kinds_are_gradient_descent():
    for momentum in ("ema", "heavy_ball"):
        assert splitting_rate(0.3, 0.0, 0.0, momentum) == pytest.approx(math.log(1.3))
        assert sp.degree(characteristic_polynomial(momentum), z) == 2


def test_heavy_ball_is_the_ema_with_the_step_over_one_minus_beta():
    assert splitting_rate(0.02, 0.9, 0.0, "heavy_ball") == pytest.approx(
        splitting_rate(0.2, 0.9, 0.0, "ema")
    )


def test_momentum_slows_a_fast_split_and_leaves_a_slow_one():
    # the EMA lags a mode that grows within its memory, and hardly one that grows slowly
    assert splitting_rate(0.1, 0.9) < 0.7 * splitting_rate(0.1, 0.0)
    assert splitting_rate(1e-4, 0.9) == pytest.approx(splitting_rate(1e-4, 0.0), rel=1e-2)


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("mu", {"mu_": -0.1}),
        ("beta", {"beta_": 1.0}),
        ("momentum", {"momentum": "nesterov"}),
        ("decay", {"decay": 0.01, "momentum": "heavy_ball"}),
    ],
)
def test_bad_rate_input(field, kwargs):
    args = {"mu_": 0.1, "beta_": 0.9, **kwargs}
    with pytest.raises(ConfigError) as err:
        splitting_rate(**args)
    assert err.value.field == field


TINY = MarkovTrainConfig(
    vocab=6, blocks=(1, 1), generated=4, heads=2, batch=64, validation=64, steps=40, chunk=20
)


def test_symmetric_copy_has_identical_heads():
    twin = symmetric_copy(TINY)
    assert twin.query_scale == 0.0 and twin.precision == "float64" and twin.seeds == 1


def test_adamw_rate_on_a_tiny_run_is_that_of_its_own_eigenvalue():
    (at,) = splitting_rates(TINY, [20], probe=128, tol=1e-6)
    assert at.step == 20 and math.isfinite(at.eigenvalue)
    assert at.mu == pytest.approx(-TINY.learning_rate * at.eigenvalue)
    if at.mu > 0:
        want = splitting_rate(at.mu, TINY.beta1, TINY.learning_rate * TINY.weight_decay)
        assert at.rate == pytest.approx(want)
    else:
        assert np.isnan(at.rate)


def test_splitting_rates_are_the_same_from_run_to_run():
    """The Lanczos solves start from fixed vectors (ARPACK's own random start moved the rates and
    most of all the eigenvector-based split amplitudes from one call to the next)."""
    first, again = (splitting_rates(TINY, [10, 20, 30], probe=128) for _ in range(2))
    assert first == again


def test_sgd_eigenvalue_is_the_lowest_of_the_dense_splitting_hessian():
    """Without a preconditioner the Lanczos eigenvalue is the lowest eigenvalue of the Hessian of
    the probe cross-entropy in y, heads 1 and 2 at x +- y / sqrt(2), built densely by jax."""
    cfg = MarkovTrainConfig(**{**TINY.__dict__, "optimizer": "sgd"})
    (at,) = splitting_rates(cfg, [20], probe=128, tol=1e-6)
    twin = symmetric_copy(cfg)
    ((model, _),) = list(states_at(twin, [20]))
    data = markov_data(twin)
    seqs = sample_sequences(data.task, data.A, jax.random.PRNGKey(PROBE_KEY), 128)
    w, D = data.task.window, model.WQ.shape[-1]
    split = jnp.array([1.0, -1.0]) / jnp.sqrt(2.0)

    def loss(y):
        moved = eqx.tree_at(
            lambda m: (m.WQ, m.WV),
            model,
            (
                model.WQ + split[:, None, None] * y[: D * D].reshape(D, D),
                model.WV + split[:, None, None] * y[D * D :].reshape(D, D),
            ),
        )
        return _nll(log_probs(moved, data.task, seqs), seqs[:, w:])

    hessian = np.asarray(jax.jit(jax.hessian(loss))(jnp.zeros(2 * D * D, jnp.float64)))
    lowest = float(np.linalg.eigvalsh(0.5 * (hessian + hessian.T))[0])
    assert lowest < 0  # the tiny twin's plateau has an unstable splitting direction
    assert at.eigenvalue == pytest.approx(lowest, rel=1e-6, abs=1e-9)
    # and SGD's rate is the heavy ball's on mu = -lr x that eigenvalue
    assert at.mu == pytest.approx(-cfg.learning_rate * lowest, rel=1e-6)
    assert at.rate == pytest.approx(splitting_rate(at.mu, cfg.momentum, 0.0, "heavy_ball"))


@pytest.mark.parametrize(
    "change,field",
    [({"heads": 1}, "heads"), ({"layers": 2}, "layers"), ({"model": "full", "heads": 3}, "model")],
)
def test_rate_needs_the_one_layer_minimal_model_and_heads_to_split(change, field):
    cfg = MarkovTrainConfig(**{**TINY.__dict__, **change})
    with pytest.raises(ConfigError) as err:
        splitting_rates(cfg, [10])
    assert err.value.field == field
