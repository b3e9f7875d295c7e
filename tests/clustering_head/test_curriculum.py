"""Clustering-head curriculum and loss spikes (spec clustering_head.md §5.4, §7
clustering-head-finetune, clustering-head-loss-spike): the trainer's optimizer-state observer,
Adam's preconditioned sharpness and its stability threshold, the figures (the spike detector:
test_spikes.py)."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from figures.cli import main
from simulate.clustering_head.outcomes import first_success_epoch
from simulate.clustering_head.task import histogram_index, histograms
from simulate.clustering_head.training import (
    ClusteringConfig,
    adam_preconditioner,
    cluster_quality,
    optimizer,
    preconditioned_top_eigenvalue,
    problem,
)
from simulate.measure.spikes import (
    detect_spikes,
    stability_threshold,
)
from simulate.store import load, read_summary
from simulate.train import Problem, Schedule, train
from theory.validation import ConfigError

# ---- the trainer hands the optimizer state to the observer -----------------------------------


def _quadratic_problem(observe_optimizer: bool) -> Problem:
    def observe(params, opt_state=None):
        out = {"loss": 0.5 * jnp.sum(params**2)}
        if observe_optimizer:
            out["count"] = opt_state[0].count
            out["nu"] = opt_state[0].nu
        return out

    dims = {"loss": (), "count": (), "nu": ("coordinate",)} if observe_optimizer else {"loss": ()}
    return Problem(
        lambda k, n: jax.random.normal(k, (3,)),
        lambda p, k: (0.5 * jnp.sum(p**2), p),
        observe,
        dims,
        observe_optimizer=observe_optimizer,
    )


def test_observer_gets_the_optimizer_state_only_when_asked():
    schedule = Schedule(steps=12, log_every=4, chunk=12)
    with_state = train(
        _quadratic_problem(True), optax.adam(0.1), schedule, [0, 1], None, progress=False
    ).dataset
    assert with_state["count"].values.tolist() == [[0, 4, 8, 12]] * 2
    # Adam's second moment of g = params is the EMA of params^2: positive after the first step
    assert np.all(with_state["nu"].values[:, 0] == 0) and np.all(with_state["nu"].values[:, 1:] > 0)
    plain = train(
        _quadratic_problem(False), optax.adam(0.1), schedule, [0, 1], None, progress=False
    ).dataset
    assert set(plain.data_vars) == {"loss"}
    np.testing.assert_allclose(plain["loss"].values, with_state["loss"].values)


# ---- Adam's preconditioner and the stability threshold ---------------------------------------


def test_adam_preconditioner_reproduces_the_optax_adam_step():
    """optax.adam's update is -lr P^{-1} m with P = (1 - b1^t)(sqrt(v_hat) + eps)."""
    lr = 0.05
    opt = optax.adam(lr)
    params = {"a": jnp.array([1.0, -2.0]), "b": jnp.array(3.0)}
    state = opt.init(params)
    assert np.isnan(adam_preconditioner(state)["b"])
    for i in range(5):
        grads = jax.tree_util.tree_map(lambda x, i=i: jnp.sin(x * (i + 1)), params)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
            updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    P = adam_preconditioner(state)
    for name in params:
        np.testing.assert_allclose(updates[name], -lr * state[0].mu[name] / P[name], rtol=1e-5)


def test_preconditioned_sharpness_is_the_top_eigenvalue_of_p_inverse_h():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 4))
    H = A @ A.T + np.diag([3.0, 0.1, 0.2, 0.5])
    P = np.array([0.5, 2.0, 1.0, 0.1])
    top = preconditioned_top_eigenvalue(
        lambda x: 0.5 * x @ jnp.asarray(H) @ x,
        jnp.ones(4),
        jnp.asarray(P),
        jax.random.PRNGKey(0),
        300,
    )
    expected = np.max(np.linalg.eigvals(np.diag(1 / P) @ H).real)
    assert np.isclose(float(top), expected, rtol=1e-6)


def _heavy_ball_growth(a: float, lr: float, beta1: float, steps: int = 3000) -> float:
    """|x| after ``steps`` of Adam's EMA heavy ball with a frozen preconditioner on the quadratic
    0.5 a x^2 (a = the preconditioned curvature), from x = 1."""
    x, m = 1.0, 0.0
    for _ in range(steps):
        m = beta1 * m + (1 - beta1) * a * x
        x -= lr * m
        if abs(x) > 1e6:  # diverged; stop before overflow
            break
    return abs(x)


@settings(max_examples=15, deadline=None)
@given(beta1=st.floats(0.0, 0.95), lr=st.floats(1e-4, 1.0))
def test_stability_threshold_separates_decay_from_divergence(beta1, lr):
    """Below (2 + 2 beta1) / ((1 - beta1) lr) Adam-style preconditioned heavy ball on a quadratic
    converges; above it, it diverges (38 / lr for beta1 = 0.9, 2 / lr for GD)."""
    threshold = stability_threshold(lr, beta1)
    assert _heavy_ball_growth(0.97 * threshold, lr, beta1) < 1e-3
    assert _heavy_ball_growth(1.03 * threshold, lr, beta1) > 1e3


def test_adam_threshold_is_38_over_lr():
    assert np.isclose(stability_threshold(3e-3, 0.9), 38 / 3e-3)
    assert np.isclose(stability_threshold(3e-3), 2 / 3e-3)


def test_clustering_observer_logs_the_preconditioned_sharpness_when_asked():
    cfg = ClusteringConfig(
        length=6,
        sparsity=3,
        width=4,
        train_size=64,
        test_size=32,
        batch=32,
        hessian_iterations=30,
        preconditioned_sharpness=True,
    )
    prob, opt = problem(cfg), optimizer(cfg)
    assert prob.observe_optimizer and prob.dims["preconditioned_sharpness"] == ()
    params = prob.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    state = opt.init(params)
    observe = jax.jit(prob.observe)  # as the trainer calls it: op by op it takes half a minute
    assert np.isnan(observe(params, state)["preconditioned_sharpness"])  # no v at t = 0
    g = jax.tree_util.tree_map(lambda x: 0.01 * jnp.ones_like(x), params)  # any first gradient
    with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
        updates, state = opt.update(g, state, params)
    params = optax.apply_updates(params, updates)
    out = observe(params, state)
    # Adam's P ~ sqrt(v) ~ |g| << 1, so P^{-1} H is far sharper than H
    assert np.abs(out["preconditioned_sharpness"]) > 10 * np.abs(out["hessian_top"]) > 0
    off = problem(replace(cfg, preconditioned_sharpness=False))
    assert not off.observe_optimizer and "preconditioned_sharpness" not in off.dims
    with pytest.raises(ConfigError, match="hessian_iterations"):
        ClusteringConfig(preconditioned_sharpness=True, hessian_iterations=0)


# ---- curriculum helpers ----------------------------------------------------------------------


def test_first_success_epoch_and_cluster_quality():
    acc = np.array([[0.5, 0.99, 0.97, 0.99], [0.5, 0.6, 0.7, 0.8]])
    first = first_success_epoch(acc, [0, 10, 20, 30])
    assert first[0] == 10 and np.isnan(first[1])
    xi = np.array([[0, 0], [0, 0.1], [5, 0], [5, 0.1]], float)
    assert np.isclose(cluster_quality(xi, [0, 0, 1, 1]), 0.05 / 5.0)
    x = np.array([[0, 0, 1, 2, 2, 1], [2, 2, 2, 2, 2, 0]])
    table = histograms(5, 3)
    assert histogram_index(x, 5, 3).tolist() == [table.index((2, 1, 2)), table.index((0, 0, 5))]


# ---- quick figures ---------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_finetune_figure(tmp_path):
    fid = "clustering-head-finetune"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = read_summary(out)
    assert summary["histogram_clusters"] == 21 and summary["shown_occupied_histograms"] == 21
    for arm in ("finetune", "scratch"):
        ds, _ = load(out / arm)
        acc = ds["test_accuracy"].values[:, -1]
        assert summary[f"{arm}_success_per_seed"] == (acc > 0.98).tolist()
    pre, _ = load(out / "pretrain")
    tuned, _ = load(out / "finetune")
    np.testing.assert_array_equal(tuned["w1"].values[:, 0], pre["w1"].values[:, -1])
    # the third class is learned during fine-tuning: its recall rises; and (as measured in the quick
    # setting) the curriculum succeeds at least as often as training from scratch
    assert summary["new_class_recall_final_mean"] > summary["new_class_recall_epoch0_mean"]
    assert summary["finetune_success_rate"] >= summary["scratch_success_rate"]


@pytest.mark.slow
def test_quick_loss_spike_figure(tmp_path):
    fid = "clustering-head-loss-spike"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = read_summary(out)
    ds, _ = load(out / "finetune")
    found = [
        (s, int(e))
        for s in range(ds.sizes["seed"])
        for e in detect_spikes(ds["train_loss"].values[s], 3.0)
    ]
    # the quick setting (ideal-init p = 2 head, lr 3e-2 on p = 3) was chosen because spikes occur
    assert summary["spike_count"] == len(found) >= 1
    assert [(r["seed_index"], r["onset"]) for r in summary["spikes"]] == found
    for flag, value in summary["coincidence_fractions"].items():
        assert np.isclose(value, np.mean([r[flag] for r in summary["spikes"]]))
    assert summary["shown_spike"]["onset"] == min(e for _, e in found)
    assert np.isclose(summary["adam_threshold"], 38 / summary["lr"])
    assert np.isfinite(ds["preconditioned_sharpness"].values[:, 1:]).all()
