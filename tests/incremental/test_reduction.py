"""The map from the minimal transformer on the regression variant to the reduced head system
(theory.incremental.reduction, simulate.incremental.regression_task,
simulate.incremental.regression_training)."""

import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.incremental.head_field import logit_field, loss
from simulate.incremental.head_ode import plateau_levels, solve
from simulate.incremental.markov_task import teacher
from simulate.incremental.regression_task import lag_matrix, moment_error, sample_inputs, targets
from simulate.incremental.regression_training import (
    RegressionConfig,
    initial_reduced_logits,
    mse,
    run,
)
from simulate.measure.stages import stage_times
from simulate.runner import RunOutput
from simulate.store import load
from theory.incremental.reduction import reduced_state, scaled_flow_mismatch

SMALL = RegressionConfig(vocab=4, blocks=(1, 1), length=4, heads=2, batch=64, validation=64)


def test_scale_factors_are_exact_symbolically():
    assert scaled_flow_mismatch(heads=2, h=2, T=2, D=5).is_zero_matrix


def test_whitened_batch_has_exact_unit_moments():
    x = sample_inputs(jax.random.PRNGKey(0), 40, 4, 3, whitened=True)
    assert float(moment_error(x)) < 1e-12
    assert float(jnp.max(jnp.abs(x.reshape(40, -1).mean(0)))) < 1e-12
    assert float(moment_error(sample_inputs(jax.random.PRNGKey(0), 40, 4, 3, False))) > 0.1


def _random_network(cfg: RegressionConfig, seed: int, A_hat):
    """Random positional W_Q and values in the feature span (the reduction's assumptions)."""
    rng = np.random.default_rng(seed)
    H, D, d = cfg.heads, cfg.D, cfg.vocab
    WQ = rng.normal(size=(H, D, D)) * 2
    WV = np.zeros((H, D, D))
    WV[:, :d, :d] = np.einsum(
        "hk,kab->hab", rng.normal(size=(H, len(cfg.blocks))), np.asarray(A_hat)
    )
    return {"WQ": jnp.asarray(WQ), "WV": jnp.asarray(WV)}


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_network_loss_and_gradient_flow_are_the_reduced_ones(seed):
    """On a whitened batch with positional attention, the network loss is D x the reduced loss at
    the mapped state, and minus its gradient, pulled through the map, is the logit-metric field of
    the reduced system with target G / sqrt(D) (spec §5.1-5.2, theory.incremental.reduction)."""
    cfg = SMALL
    task = cfg.task()
    A = teacher(task, jax.random.PRNGKey(cfg.teacher_seed))
    A_hat = A / jnp.linalg.norm(A, axis=(1, 2), keepdims=True)
    params = _random_network(cfg, seed, A_hat)
    x = sample_inputs(jax.random.PRNGKey(seed), 64, cfg.length, cfg.vocab, whitened=True)
    y = targets(A, lag_matrix(task.lag_weights(), cfg.length), x)
    setting = cfg.reduced()
    G = jnp.asarray(setting.target())
    v, theta = reduced_state(
        np.asarray(params["WQ"]), np.asarray(params["WV"]), np.asarray(A), cfg.vocab
    )
    s = jax.nn.softmax(jnp.asarray(theta), -1)
    net = mse(params, x, y, positional=True)
    assert float(net) == pytest.approx(cfg.D * float(loss(G, jnp.asarray(v), s)), rel=1e-9)
    grads = jax.grad(mse)(params, x, y, True)
    step = {k: -g for k, g in grads.items()}
    dv, dtheta = reduced_state(
        np.asarray(step["WQ"]), np.asarray(step["WV"]), np.asarray(A), cfg.vocab
    )
    fv, ftheta = logit_field(G, jnp.asarray(v), jnp.asarray(theta), power=2)
    np.testing.assert_allclose(dv, fv, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dtheta, ftheta, rtol=1e-8, atol=1e-10)


def _stages(cfg: RegressionConfig, path):
    ds, _ = load(run(cfg, RunOutput(out=path, quiet=True)))
    setting = cfg.reduced()
    levels = plateau_levels(setting)
    t = ds["step"].values * cfg.lr
    measured = stage_times(t, ds["val_loss"].values[0] / cfg.D, levels)
    ode = solve(
        setting, [0.0], cfg.seed_ids, t_max=cfg.steps * cfg.lr, theta0=initial_reduced_logits(cfg)
    )
    return measured, ode.crossings[0], ds


def test_positional_network_tracks_the_reduced_ode(tmp_path):
    """Gradient descent with the content blocks off reaches stages 1 and 2 when the reduced system
    integrated from its mapped initial state does (within 10%), at two step sizes."""
    cfg = RegressionConfig(
        vocab=6,
        length=6,
        query_scale=1e-3,
        batch=64,
        validation=64,
        steps=3000,
        chunk=1500,
        log_every=10,
        lr=0.05,
    )
    measured, predicted, ds = _stages(cfg, tmp_path / "a")
    assert np.isfinite(predicted[:2]).all()
    np.testing.assert_allclose(measured[:2], predicted[:2], rtol=0.1)
    half, _, _ = _stages(
        replace(cfg, lr=0.025, steps=6000, chunk=3000, log_every=20), tmp_path / "b"
    )
    np.testing.assert_allclose(half[:2], measured[:2], rtol=0.05)
    assert float(ds["content_logit_rms"].max()) < 1e-12
    assert float(ds["value_off_span"].max()) < 1e-8


def test_full_query_matrix_breaks_positional_attention(tmp_path):
    """With all of W_Q trained the content-dependent part of the scores grows far beyond its
    initial size: the positional-attention assumption is measured, not assumed."""
    cfg = RegressionConfig(
        vocab=6,
        length=6,
        attention="full",
        query_scale=1e-3,
        batch=256,
        validation=256,
        steps=1000,
        chunk=500,
        log_every=50,
        lr=0.05,
    )
    ds, _ = load(run(cfg, RunOutput(out=tmp_path / "r", quiet=True)))
    rms = ds["content_logit_rms"].values[0]
    assert rms[-1] > 100 * rms[0]


def test_mapped_initial_logits_are_the_positional_scores():
    cfg = replace(SMALL, query_scale=0.3)
    theta = initial_reduced_logits(cfg)
    assert theta.shape == (1, cfg.heads, cfg.length)
    assert np.all(np.abs(theta) <= 0.3 / math.sqrt(cfg.D)) and np.any(theta != 0)


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--length", "2"], "length"),
        (["--batch", "8"], "batch"),
        (["--lr", "0"], "lr"),
        (["--query-scale", "-1"], "query_scale"),
    ],
)
def test_bad_input(argv, field, capsys):
    from figures.cli import main

    assert main(["run", "regression-minimal", *argv]) == 2
    assert field in capsys.readouterr().err
