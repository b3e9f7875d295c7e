"""Clustering-head paper: the SMA task, the 2-D model, the training experiment and the symmetric
subspace (spec clustering_head.md §2-6)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from figures.cli import main
from simulate.clustering_head.model import (
    ClusteringHead,
    ideal_positions,
    init_clustering_head,
    parameter_count,
    rms_norm,
)
from simulate.clustering_head.task import (
    SMASetting,
    all_sequences,
    draw_data,
    histograms,
    labels,
    probe_set,
)
from simulate.clustering_head.training import (
    ClusteringConfig,
    build_model,
    cross_entropy,
    optimizer,
    problem,
    run,
    symmetry_defect,
    top_hessian_eigenvalue,
)
from simulate.experiments import EXPERIMENTS
from simulate.runner import RunOutput
from simulate.store import load, read_summary
from simulate.train import _chunk_program, _initial_state, seed_streams
from tests.checkpoints import uninterrupted_and_resumed
from theory.clustering_head import symmetry as cs
from theory.validation import ConfigError


def test_labels_are_the_sum_of_the_first_k_tokens_mod_p():
    x = np.array([[1, 1, 0, 1, 1, 1, 1], [2, 2, 1, 0, 0, 2, 2], [0, 0, 0, 2, 1, 1, 1]])
    assert labels(jnp.asarray(x[:1]), 5, 2).tolist() == [0]  # 1+1+0+1+1 = 4
    assert labels(jnp.asarray(x[1:]), 3, 3).tolist() == [2, 0]  # 5 mod 3, 0
    data = draw_data(SMASetting(train_size=64, test_size=32))
    brute = [sum(int(t) for t in row[:5]) % 2 for row in np.asarray(data.train)]
    assert np.asarray(data.train_labels).tolist() == brute
    assert data.train.shape == (64, 12) and data.test.shape == (32, 12)
    assert not np.array_equal(np.asarray(data.train[:32]), np.asarray(data.test))


def test_sampled_sequences_are_the_eager_randint_draws_bit_for_bit():
    """The sampler, jitted for its compile time, draws exactly randint's sequences drawn eagerly,
    so runs stored before it was jitted keep their data."""
    from simulate.clustering_head.task import sample_sequences

    for n, L, p in ((64, 12, 2), (40, 6, 5)):
        key = jax.random.fold_in(jax.random.PRNGKey(3), 1)
        eager = jax.random.randint(key, (n, L), 0, p, dtype=jnp.int32)
        np.testing.assert_array_equal(np.asarray(sample_sequences(key, n, L, p)), eager)


def test_population_and_probe_set_cover_the_input_space_and_histograms():
    pop = all_sequences(4, 3)
    assert pop.shape == (81, 4) and len({tuple(r) for r in pop}) == 81
    s = SMASetting()
    probe, which = probe_set(s)
    assert len(histograms(5, 2)) == s.histogram_count == cs.cluster_count(5, 2) == 6
    assert cs.cluster_count(5, 3) == 21
    assert probe.shape == (24, 12)
    for seq, h in zip(probe, which):
        assert tuple(np.bincount(seq[:5], minlength=2)) == histograms(5, 2)[h]


def test_model_shapes_and_the_paper_parameter_count():
    model = init_clustering_head(jax.random.PRNGKey(0), vocab=3, length=12, width=32)
    assert parameter_count(model) == 198
    x = jnp.zeros(12, jnp.int32)
    assert model(x).shape == (3,)
    assert model.sequence_embedding(x).shape == (2,)
    a = model.attention(x)
    assert a.shape == (12,) and jnp.allclose(a.sum(), 1.0)
    assert jnp.allclose(
        model.sequence_embedding(x), model.value @ (a @ model.normalised(x)), atol=1e-6
    )


def test_rms_norm_has_no_gain_and_projects_onto_the_circle_of_radius_sqrt_d():
    z = jax.random.normal(jax.random.PRNGKey(1), (50, 2)) * 7.0
    n = rms_norm(z)
    assert jnp.allclose(jnp.linalg.norm(n, axis=-1), jnp.sqrt(2.0), rtol=1e-4)
    assert jnp.allclose(n, z / (jnp.sqrt(jnp.mean(z**2, -1, keepdims=True)) + 1e-5))
    assert (
        jax.tree_util.tree_leaves(
            eqx.filter(init_clustering_head(jax.random.PRNGKey(0)), eqx.is_array)
        ).__len__()
        == 8
    )  # no norm gain


def test_first_units_are_identical_across_ffn_widths():
    key = jax.random.PRNGKey(3)
    narrow = init_clustering_head(key, width=8)
    wide = init_clustering_head(key, width=40)
    assert jnp.array_equal(narrow.w1, wide.w1[:8])
    assert jnp.array_equal(narrow.b1, wide.b1[:8])
    # W_2 and b_2 carry the width's 1/sqrt(m) scale on the same raw draws
    assert jnp.allclose(narrow.w2 * jnp.sqrt(8.0), wide.w2[:, :8] * jnp.sqrt(40.0))
    assert jnp.allclose(narrow.b2 * jnp.sqrt(8.0), wide.b2 * jnp.sqrt(40.0))
    for name in ("token", "position", "query", "value"):
        assert jnp.array_equal(getattr(narrow, name), getattr(wide, name))
    assert not jnp.array_equal(narrow.w1, init_clustering_head(jax.random.PRNGKey(4), width=8).w1)


def test_group_and_projector_of_the_symmetric_subspace():
    L, k = 5, 2
    Pi = cs.symmetric_projector(L, k)
    assert np.allclose(Pi @ Pi, Pi) and np.allclose(Pi, Pi.T)
    assert np.linalg.matrix_rank(Pi) == 2 and cs.subspace_dimension(L, k) == 4
    elements = list(cs.group_elements(L, k))
    assert len(elements) == cs.group_order(L, k) == 12
    P = np.random.default_rng(0).normal(size=(L, 2))
    assert np.allclose(Pi @ P, np.mean([P[g] for g in elements], axis=0))  # Pi = group average
    assert cs.symmetry_defect(Pi @ P, k) < 1e-12 < cs.symmetry_defect(P, k)
    gens = {tuple(g) for g in cs.group_generators(L, k)}
    assert gens == {(1, 0, 2, 3, 4), (0, 1, 3, 2, 4), (0, 1, 2, 4, 3)}


def test_normalisation_operator_norm_is_sqrt_d_over_norm():
    xi, norm = cs.normalisation_operator_norm(2)
    assert sp.simplify(norm - sp.sqrt(2) / sp.sqrt(xi[0] ** 2 + xi[1] ** 2)) == 0
    # against the compiled normalisation at a point (eps = 1e-5 is negligible at ||xi|| ~ 0.3)
    point = jnp.array([0.3, -0.1])
    J = jax.jacfwd(rms_norm)(point)
    assert np.isclose(
        np.linalg.norm(np.asarray(J), 2), float(norm.subs({xi[0]: 0.3, xi[1]: -0.1})), rtol=1e-3
    )


def test_population_gradient_is_equivariant_and_fixed_on_the_symmetric_subspace():
    """grad R(g theta) = g grad R(theta), and at theta in S the P-gradient lies in S (§5.2)."""
    cfg = ClusteringConfig(length=6, sparsity=3, width=4, init="ideal", precision="float64")
    pop = jnp.asarray(all_sequences(6, 2))
    y = labels(pop, 3, 2)
    model = build_model(cfg, jax.random.PRNGKey(0))
    grad = jax.jit(jax.grad(cross_entropy))
    # equivariance at a generic (non-symmetric) point
    generic = eqx.tree_at(
        lambda m: m.position, model, jax.random.normal(jax.random.PRNGKey(1), (6, 2), jnp.float64)
    )
    perm = np.array([2, 0, 1, 5, 3, 4])
    g = grad(generic, pop, y)
    g_perm = grad(eqx.tree_at(lambda m: m.position, generic, generic.position[perm]), pop, y)
    assert jnp.allclose(g_perm.position, g.position[perm], atol=1e-12)
    assert jnp.allclose(g_perm.query, g.query, atol=1e-12)
    # stationarity statement: at a point of S the gradient does not leave S
    g_sym = grad(model, pop, y).position
    Pi = jnp.asarray(cs.symmetric_projector(6, 3))
    assert jnp.max(jnp.abs(g_sym)) > 1e-6
    assert jnp.max(jnp.abs(g_sym - Pi @ g_sym)) < 1e-13
    # a finite (non-symmetric) sample breaks it
    sample = pop[jnp.array([0, 5, 9, 17, 30, 41, 50, 63])]
    g_sample = grad(model, sample, labels(sample, 3, 2)).position
    assert jnp.max(jnp.abs(g_sample - Pi @ g_sample)) > 1e-6


def test_symmetry_defect_and_ideal_positions():
    P = ideal_positions(12, 5)
    assert float(symmetry_defect(P, 5)) == 0.0
    assert np.isclose(float(symmetry_defect(P.at[0, 0].set(0.5), 5)), 0.5)
    assert np.isclose(cs.symmetry_defect(np.asarray(P.at[11, 1].set(1.0)), 5), 2.0)


def test_power_iteration_finds_the_top_hessian_eigenvalue_of_a_quadratic():
    A = jnp.diag(jnp.array([5.0, -1.0, 2.0]))
    top = top_hessian_eigenvalue(lambda v: 0.5 * v @ A @ v, jnp.ones(3), jax.random.PRNGKey(0), 100)
    assert np.isclose(float(top), 5.0, rtol=1e-6)


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--lr", "-0.1"], "lr"),
        (["--sparsity", "13"], "sparsity"),
        (["--modulus", "1"], "modulus"),
        (["--vocab", "2", "--modulus", "3"], "vocab"),
        (["--epochs", "7"], "epochs_per_chunk"),
        (["--length", "30", "--data", "population"], "data"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, field, capsys, tmp_path):
    assert main(["run", "clustering-head", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    with pytest.raises(ConfigError):
        ClusteringConfig(lr=0.0)


def test_registered_experiment():
    assert EXPERIMENTS["clustering-head"].config is ClusteringConfig
    cfg = ClusteringConfig()
    assert (cfg.total_epochs, cfg.steps_per_epoch, cfg.schedule.steps) == (1000, 64, 64_000)
    assert replace(cfg, quick=True).total_epochs == 150
    assert ClusteringConfig(data="population").steps_per_epoch == 1


def test_population_flow_from_the_subspace_stays_on_it(tmp_path):
    """Full-population Adam in float64 from the ideal init: P stays on S to round-off, while the
    loss moves (§5.2; spec figure clustering-head-fixed-point (i))."""
    cfg = ClusteringConfig(
        length=8,
        sparsity=3,
        width=8,
        init="ideal",
        data="population",
        precision="float64",
        lr=3e-2,
        epochs=40,
        epochs_per_chunk=20,
        hessian_iterations=0,
        train_size=64,
        test_size=64,
    )
    ds, _ = load(run(cfg, RunOutput(out=tmp_path / "pop", quiet=True)))
    assert ds["symmetry_defect"].dims == ("seed", "step") and ds.sizes["step"] == 41
    assert float(ds["symmetry_defect"].max()) < 1e-12
    loss = ds["objective_loss"].values[0]
    assert loss[-1] < loss[0] - 1e-3
    trained = ds["position_embedding"].values[0, -1]
    assert np.max(np.abs(trained - ds["position_embedding"].values[0, 0])) > 1e-3


def test_minibatch_training_breaks_the_symmetry_and_logs_every_observable(tmp_path):
    cfg = ClusteringConfig(
        length=8,
        sparsity=3,
        width=8,
        init="ideal",
        train_size=128,
        test_size=64,
        batch=32,
        epochs=4,
        epochs_per_chunk=2,
        hessian_iterations=5,
        seeds=2,
    )
    path = run(cfg, RunOutput(out=tmp_path / "mb", quiet=True))
    ds, _ = load(path)
    summary = read_summary(path)
    assert summary["status"] == "complete" and summary["steps_per_epoch"] == 4
    assert ds["step"].values.tolist() == [0, 4, 8, 12, 16]
    for name in (
        "train_loss",
        "test_loss",
        "train_accuracy",
        "test_accuracy",
        "attention_mass",
        "gradient_norm",
        "min_embedding_norm",
        "curvature_bound",
        "hessian_top",
    ):
        assert ds[name].dims == ("seed", "step") and np.all(np.isfinite(ds[name].values))
    assert np.allclose(ds["curvature_bound"], np.sqrt(2) / ds["min_embedding_norm"])
    assert ds["probe_attention"].shape == (2, 5, 4 * 4, 8)
    assert ds["w1"].shape == (2, 5, 8, 2)
    assert float(ds["symmetry_defect"].isel(step=0).max()) == 0.0
    assert float(ds["symmetry_defect"].isel(step=-1).min()) > 1e-6
    # the seeds differ (vmapped init and batches)
    assert not np.allclose(ds["train_loss"].values[0, 1:], ds["train_loss"].values[1, 1:])
    # the logged weights are the model's: the logged train loss is recomputed from them
    w = {
        n: jnp.asarray(ds[n].values[0, -1])
        for n in ("token_embedding", "position_embedding", "query", "value", "w1", "b1", "w2", "b2")
    }
    model = ClusteringHead(
        w["token_embedding"],
        w["position_embedding"],
        w["query"],
        w["value"],
        w["w1"],
        w["b1"],
        w["w2"],
        w["b2"],
    )
    data = draw_data(cfg)
    assert np.isclose(
        float(cross_entropy(model, data.train, data.train_labels)),
        float(ds["train_loss"].values[0, -1]),
        rtol=1e-5,
    )


def test_sequences_enumeration_order_is_lexicographic():
    assert [tuple(r) for r in all_sequences(3, 2)] == list(itertools.product(range(2), repeat=3))


# ---- figures ----------------------------------------------------------------------------------


def test_shown_seed_prefers_successful_seeds():
    from simulate.clustering_head.outcomes import shown_seed

    assert shown_seed(np.array([0.9, 0.5, 0.6]), np.array([False, True, True])) == 2
    assert shown_seed(np.array([0.9, 0.5, 0.6]), np.array([False, False, False])) == 0


@pytest.mark.parametrize(
    "figure, argv, field",
    [
        ("clustering-head-fixed-point", ["--lr", "0"], "lr"),
        ("clustering-head-attention", ["--epochs", "15"], "epochs"),
        ("clustering-head-finetune", ["--epochs", "15"], "epochs"),
        ("clustering-head-loss-spike", ["--factor", "1"], "factor"),
    ],
)
def test_figure_bad_input_exits_2(figure, argv, field, capsys, tmp_path):
    assert main(["figure", figure, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


@pytest.mark.slow
def test_quick_fixed_point_figure(tmp_path):
    fid = "clustering-head-fixed-point"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = read_summary(out)
    rows = {r["run"]: r for r in summary["rows"]}
    assert rows["population"]["max_defect"] < summary["roundoff_level"]
    assert rows["train-full-batch"]["max_defect"] > 1e-6
    assert rows["minibatch"]["max_defect"] > 1e-6
    assert rows["population"]["final_loss"] < rows["population"]["initial_loss"]


@pytest.mark.slow
def test_quick_attention_figure(tmp_path):
    fid = "clustering-head-attention"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = read_summary(out)
    ds, _ = load(out / "training")
    assert np.allclose(summary["final_mass_per_seed"], ds["attention_mass"].values[:, -1])
    acc = ds["test_accuracy"].values[:, -1]
    assert summary["success_per_seed"] == (acc > 0.98).tolist()
    # attention masses are sums of softmax weights over 5 of 12 positions
    assert all(0 < m < 1 for m in summary["final_mass_per_seed"])


def test_fine_tuning_starts_each_seed_from_its_stored_final_weights(tmp_path):
    from simulate.clustering_head.training import model_at

    base = ClusteringConfig(
        length=6,
        sparsity=3,
        width=4,
        train_size=64,
        test_size=32,
        batch=32,
        epochs=2,
        epochs_per_chunk=1,
        hessian_iterations=0,
        seeds=3,
    )
    ds2, _ = load(run(base, RunOutput(out=tmp_path / "p2", quiet=True)))
    tuned = replace(base, modulus=3, init_from=tmp_path / "p2", seed=1, seeds=2)
    ds3, _ = load(run(tuned, RunOutput(out=tmp_path / "p3", quiet=True)))
    for i, seed in enumerate((1, 2)):
        for name in ("token_embedding", "position_embedding", "w1", "b2"):
            assert np.array_equal(ds3[name].values[i, 0], ds2[name].values[seed, -1])
    assert not np.array_equal(ds3["w1"].values[0, 0], ds3["w1"].values[1, 0])
    data = draw_data(base)
    assert np.isclose(
        float(cross_entropy(model_at(ds2, 0), data.train, data.train_labels)),
        float(ds2["train_loss"].values[0, -1]),
        rtol=1e-5,
    )
    with pytest.raises(ConfigError, match="width"):
        replace(tuned, width=5)
    with pytest.raises(ConfigError, match="seed"):
        replace(tuned, seed=2, seeds=2)


def test_class_probability_is_the_read_out_softmax():
    from simulate.clustering_head.model import class_probability

    model = init_clustering_head(jax.random.PRNGKey(0))
    x = jnp.zeros(12, jnp.int32)
    xi = model.sequence_embedding(x)[None]
    assert np.isclose(
        class_probability(model, xi, 1)[0], float(jax.nn.softmax(model(x))[1]), rtol=1e-5
    )


@pytest.mark.slow
def test_quick_sandbox_figure(tmp_path):
    fid = "clustering-head-sandbox"
    assert main(["figure", fid, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / fid
    assert (out / f"{fid}.png").exists()
    summary = read_summary(out)
    ds, _ = load(out / "training")
    assert summary["frames"] == [0, 10, 100, 200] and summary["histogram_clusters"] == 6
    assert np.allclose(
        summary["test_accuracy_at_frames"], ds["test_accuracy"].values[0, [0, 10, 100, 200]]
    )


SMALL = {"length": 8, "sparsity": 3, "train_size": 128, "test_size": 64}
"""A small task for the minibatch and optimizer tests (128 training sequences of length 8)."""


@pytest.mark.parametrize("batch", [32, 48])
@settings(max_examples=10, deadline=None)
@given(key=st.integers(0, 2**31 - 1))
def test_each_epoch_is_one_shuffle_of_the_training_set(batch, key):
    """minibatches = epoch: the steps of an epoch see every training row once (the last batch
    padded with weight-0 rows when the batch does not divide n), in an order set by the key."""
    cfg = ClusteringConfig(**SMALL, batch=batch)
    draw = problem(cfg).draw_interval
    assert draw is not None
    x, y, weight = draw(jax.random.PRNGKey(key))
    steps = -(-128 // batch)
    assert x.shape == (steps, batch, 8) and weight.shape == (steps, batch)
    np.testing.assert_array_equal(y, labels(x, 3, 2))
    seen = np.asarray(x)[np.asarray(weight) > 0]
    train = np.asarray(draw_data(cfg).train)
    assert len(seen) == 128 and np.all(np.asarray(weight)[np.asarray(weight) > 0] == 1)
    # the same rows, each once (the set has repeated sequences): the sorted row lists agree
    np.testing.assert_array_equal(seen[np.lexsort(seen.T[::-1])], train[np.lexsort(train.T[::-1])])
    other, _, _ = draw(jax.random.PRNGKey(key + 1))
    assert not np.array_equal(other, x)


def test_the_step_rule_and_full_batch_draw_no_epoch():
    assert problem(ClusteringConfig(**SMALL, minibatches="step")).draw_interval is None
    assert problem(ClusteringConfig(**SMALL, batch=128)).draw_interval is None  # nothing to shuffle


def test_a_resumed_shuffled_run_is_the_uninterrupted_run(tmp_path, monkeypatch):
    """The epoch's shuffle comes from the data key in the checkpointed state, so a run that
    crashes after its first chunk and resumes logs the uninterrupted run's rows bit for bit."""
    cfg = ClusteringConfig(
        **SMALL, width=8, epochs=4, epochs_per_chunk=2, hessian_iterations=0, seeds=2
    )
    full, resumed = uninterrupted_and_resumed(run, cfg, tmp_path, monkeypatch)
    assert resumed.sizes["step"] == full.sizes["step"] == 5
    for name in full.data_vars:
        np.testing.assert_array_equal(resumed[name].values, full[name].values)


def test_runs_differing_only_in_lr_share_one_program():
    """The learning rate rides in Adam's state: the chunk programs of two learning rates lower to
    the same text (one compile for the ablation's lr axis), and each state carries its own lr."""
    texts, rates = [], []
    for lr in (3e-3, 1e-2):
        cfg = ClusteringConfig(**SMALL, lr=lr)
        prob, opt = problem(cfg), optimizer(cfg)
        state = _initial_state(prob, opt, seed_streams([0]))
        program, consts, identity = _chunk_program(prob, opt, cfg.schedule, state)
        texts.append((identity, program.lower(consts, state, True).as_text()))
        rates.append(float(state[1].hyperparams["learning_rate"][0]))
    assert texts[0] == texts[1]
    assert rates == [np.float32(3e-3), np.float32(1e-2)]
