"""Clustering-head curriculum and loss spikes (spec clustering_head.md §5.4, §7
clustering-head-finetune, clustering-head-loss-spike): the trainer's optimizer-state observer,
Adam's preconditioned sharpness and its stability threshold, the spike detector, the figures."""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from figures.cli import main
from figures.clustering_head.finetune import first_success_epoch
from figures.clustering_head.loss_spike import base_rates, fractions, spike_table
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
    BEFORE,
    SpikeRule,
    baseline,
    bursts,
    detect_spikes,
    dips,
    stability_threshold,
)
from simulate.store import load
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
    assert np.isnan(prob.observe(params, state)["preconditioned_sharpness"])  # no v at t = 0
    g = jax.tree_util.tree_map(lambda x: 0.01 * jnp.ones_like(x), params)  # any first gradient
    updates, state = opt.update(g, state, params)
    params = optax.apply_updates(params, updates)
    out = prob.observe(params, state)
    # Adam's P ~ sqrt(v) ~ |g| << 1, so P^{-1} H is far sharper than H
    assert np.abs(out["preconditioned_sharpness"]) > 10 * np.abs(out["hessian_top"]) > 0
    off = problem(replace(cfg, preconditioned_sharpness=False))
    assert not off.observe_optimizer and "preconditioned_sharpness" not in off.dims
    with pytest.raises(ConfigError, match="hessian_iterations"):
        ClusteringConfig(preconditioned_sharpness=True, hessian_iterations=0)


# ---- spike detector and coincidences ---------------------------------------------------------


def test_spikes_are_jumps_above_the_factor_merged_into_their_onset():
    loss = np.array([1.0, 0.5, 0.2, 0.1, 0.5, 2.0, 0.3, 0.05, 0.12, 0.03, 0.2])
    assert detect_spikes(loss).tolist() == [4, 10]  # 4 -> 5 merged; 0.05 -> 0.12 is 2.4x
    assert detect_spikes(loss, factor=2.0).tolist() == [4, 8, 10]
    assert detect_spikes(np.ones(5)).tolist() == []


@settings(max_examples=30, deadline=None)
@given(rate=st.floats(1e-3, 0.1), onset=st.integers(2, 48), jump=st.floats(3.5, 100.0))
def test_one_jump_on_a_decreasing_curve_is_one_spike(rate, onset, jump):
    loss = np.exp(-rate * np.arange(50))
    assert detect_spikes(loss).size == 0
    loss[onset:] *= jump
    assert detect_spikes(loss).tolist() == [onset]


def test_dips_and_bursts_read_the_epochs_at_and_before_the_onset():
    norm = np.ones(40)
    norm[29] = 0.3  # e - 1 of a spike at 30
    assert dips(norm, [30, 20], window=10, fraction=0.5).tolist() == [True, False]
    assert baseline(norm, 30, 10) == 1.0 and np.isnan(baseline(norm, 1, 10))
    sharp = np.full(40, 10.0)
    sharp[0] = np.nan
    sharp[30] = 25.0
    assert bursts(sharp, [30, 20], 10, 2.0).tolist() == [True, False]
    assert bursts(sharp, [20], 10, 2.0, threshold=9.0).tolist() == [True]
    assert bursts(sharp, [1], 10, 2.0).tolist() == [False]  # no baseline, no threshold
    assert bursts(sharp, [30, 31], 10, 2.0, offsets=BEFORE).tolist() == [False, True]


def test_spike_table_counts_coincidences_and_base_rates():
    epochs, lr = 60, 0.01
    loss = np.exp(-0.05 * np.arange(epochs))[None].repeat(2, 0)
    loss[0, 40:] *= 10.0  # seed 0: one spike at 40
    series = {
        "train_loss": loss,
        "gradient_norm": np.ones((2, epochs)),
        "min_embedding_norm": np.ones((2, epochs)),
        "curvature_bound": np.ones((2, epochs)),
        "hessian_top": np.ones((2, epochs)),
        "preconditioned_sharpness": np.ones((2, epochs)),
    }
    series["min_embedding_norm"][0, 39] = 0.1
    series["gradient_norm"][0, 40] = 5.0
    series["preconditioned_sharpness"][:, 10] = 10 * stability_threshold(lr, 0.9)
    rows = spike_table(series, SpikeRule(), lr)
    assert [(r["seed_index"], r["onset"]) for r in rows] == [(0, 40)]
    assert rows[0]["min_norm_dip"] and rows[0]["gradient_burst"]
    # the dip at e - 1 announces the spike; the gradient burst at e does not
    assert rows[0]["min_norm_dip_before"] and not rows[0]["gradient_burst_before"]
    assert fractions(rows, "_before")["gradient_burst"] == 0.0
    assert not rows[0]["preconditioned_sharpness_jump"] and not rows[0]["dip_and_sharpness_jump"]
    assert fractions(rows)["min_norm_dip"] == 1.0 and np.isnan(fractions([])["gradient_burst"])
    rates = base_rates(series, SpikeRule(), lr)
    quiet = epochs - 2 - 1  # seed 0's epochs >= 2 that are no onset (seed 1 has no spike)
    # the excursion at epoch 10 is read by e = 10 and e = 11; the dip at 39 by e = 39
    assert rates["preconditioned_sharpness_jump"] == 2 / quiet
    assert rates["min_norm_dip"] == 1 / quiet
    assert np.isnan(
        base_rates({k: v[1:] for k, v in series.items()}, SpikeRule(), lr)["gradient_burst"]
    )


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


@pytest.mark.parametrize(
    "figure, argv, field",
    [
        ("clustering-head-finetune", ["--epochs", "15"], "epochs"),
        ("clustering-head-loss-spike", ["--factor", "1"], "factor"),
    ],
)
def test_figure_bad_input_exits_2(figure, argv, field, capsys, tmp_path):
    assert main(["figure", figure, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


# ---- quick figures ---------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_finetune_figure(tmp_path):
    fid = "clustering-head-finetune"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = json.loads((out / "summary.json").read_text())
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
    summary = json.loads((out / "summary.json").read_text())
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
