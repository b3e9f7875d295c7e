"""The clustering-head visual sandbox: frame helpers, the 4 x 4 frame, the animation and the figure
(figures.clustering_head.sandbox_frame, figures.clustering_head.sandbox; spec clustering_head.md
§7)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from figures.cli import main
from figures.clustering_head.sandbox import FIGURE, animate, animation_epochs
from figures.clustering_head.sandbox_frame import (
    SIMPLEX_CORNERS,
    SandboxContext,
    draw_frame,
    simplex_projection,
)
from simulate.clustering_head.model import (
    ClusteringHead,
    ideal_clusters,
    ideal_positions,
    init_clustering_head,
)
from simulate.clustering_head.task import draw_data, histogram_index, histograms, probe_set
from simulate.clustering_head.training import (
    WEIGHTS,
    ClusteringConfig,
    cluster_quality,
    model_at,
    model_at_epoch,
)
from simulate.clustering_head.training import run as train_run
from simulate.runner import RunOutput
from simulate.store import load, read_summary

K, P, L = 5, 2, 12


def test_simplex_projection_maps_vertices_to_corners():
    assert np.allclose(simplex_projection(np.eye(3)), SIMPLEX_CORNERS)
    assert np.allclose(simplex_projection(np.full((1, 3), 1 / 3)), SIMPLEX_CORNERS.mean(0))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1e-3, 1.0), min_size=3, max_size=3))
def test_simplex_projection_keeps_the_barycentric_coordinates(weights):
    prob = np.asarray(weights) / np.sum(weights)
    point = simplex_projection(prob[None])[0]
    # the barycentric coordinates of the point in the corner triangle are the probabilities again
    system = np.vstack([SIMPLEX_CORNERS.T, np.ones(3)])
    assert np.allclose(np.linalg.solve(system, np.r_[point, 1.0]), prob, atol=1e-9)


def test_cluster_quality_on_constructed_groups():
    points = np.array([[0.0, 1.0], [0.0, -1.0], [4.0, 1.0], [4.0, -1.0]])
    groups = np.array([0, 0, 1, 1])
    assert np.isclose(cluster_quality(points, groups), 1.0 / 4.0)  # spread 1, centroid gap 4
    collapsed = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 1.0], [3.0, 1.0]])
    assert cluster_quality(collapsed, groups) == 0.0


@settings(max_examples=30, deadline=None)
@given(st.floats(0.1, 10.0), st.floats(-5.0, 5.0), st.integers(0, 2**16))
def test_cluster_quality_is_scale_and_shift_invariant(scale, shift, seed):
    rng = np.random.default_rng(seed)
    points, groups = rng.normal(size=(30, 2)), np.arange(30) % 3
    assert np.isclose(
        cluster_quality(scale * points + shift, groups), cluster_quality(points, groups), rtol=1e-9
    )


def test_histogram_index_follows_the_histogram_order():
    names = histograms(K, P)
    x = np.zeros((len(names), L), np.int64)
    for i, (n0, n1) in enumerate(names):
        x[i, :K] = [0] * n0 + [1] * n1
        x[i, K:] = i % 2  # distractors do not count
    assert histogram_index(x, K, P).tolist() == list(range(len(names)))


def test_ideal_clusters_match_a_head_attending_only_to_the_first_block():
    # equal first-block scores q^T Z_t for both tokens, distractor scores ~ -100:
    # a_t = 1/k on t <= k
    model = ClusteringHead(
        token=jnp.array([[0.3, 0.0], [-0.3, 0.0], [0.0, 0.5]]),
        position=ideal_positions(L, K),
        query=jnp.array([0.0, 50.0]),
        value=jnp.array([[1.0, 0.4], [-0.2, 0.8]]),
        w1=jnp.zeros((4, 2)),
        b1=jnp.zeros(4),
        w2=jnp.zeros((2, 4)),
        b2=jnp.zeros(2),
    )
    probe, which = probe_set(ClusteringConfig())
    xi = jax.vmap(model.sequence_embedding)(jnp.asarray(probe))
    assert np.allclose(ideal_clusters(model, K, P)[which], xi, atol=1e-5)


def _context(n: int = 64, epochs: int = 20) -> SandboxContext:
    rng = np.random.default_rng(0)
    probe, which = probe_set(ClusteringConfig())
    e = np.arange(epochs + 1)
    return SandboxContext(
        train=rng.integers(0, P, (n, L)).astype(np.int32),
        sparsity=K,
        modulus=P,
        probe=probe,
        probe_histogram=which,
        epochs=e,
        train_loss=np.exp(-e / 10),
        test_loss=np.exp(-e / 12),
        train_accuracy=np.linspace(0.5, 1, len(e)),
        test_accuracy=np.linspace(0.5, 0.99, len(e)),
    )


def test_frame_draws_the_sixteen_panels():
    fig = plt.figure(figsize=(12, 11))
    ax = draw_frame(fig, init_clustering_head(jax.random.PRNGKey(1)), _context(), 7)
    assert ax.shape == (4, 4) and all(a.figure is fig for a in ax.flat)
    titles = [a.get_title() for a in ax.flat]
    assert all(titles) and len(set(titles)) == 16
    # every panel drew something (points, lines, arrows, an image or filled regions)
    assert all(a.collections or a.lines or a.images or a.patches for a in ax.flat)
    assert any(ln.get_xdata()[0] == 7 for ln in ax[3, 3].lines)  # the frame epoch is marked
    plt.close(fig)


def _stored_weights(epochs: list[int]) -> xr.Dataset:
    models = [init_clustering_head(jax.random.PRNGKey(e)) for e in epochs]
    names = [f.name for f in dataclasses.fields(ClusteringHead)]
    return xr.Dataset(
        {
            w: (
                ("epoch", *(f"{w}_{i}" for i in range(np.ndim(getattr(models[0], f))))),
                np.stack([np.asarray(getattr(m, f)) for m in models]),
            )
            for w, f in zip(WEIGHTS, names)
        },
        coords={"epoch": epochs},
    )


def test_model_at_epoch_rebuilds_the_stored_weights():
    data = _stored_weights([0, 5, 9])
    rebuilt, direct = model_at_epoch(data, 5), init_clustering_head(jax.random.PRNGKey(5))
    for a, b in zip(jax.tree_util.tree_leaves(rebuilt), jax.tree_util.tree_leaves(direct)):
        assert np.array_equal(a, b)


def test_animation_epochs_step_and_keep_the_last():
    assert animation_epochs(25, 10) == [0, 10, 20, 25]
    assert animation_epochs(20, 10) == [0, 10, 20]
    assert animation_epochs(3, 1) == [0, 1, 2, 3]


def test_animation_writes_one_gif_frame_per_epoch(tmp_path):
    epochs = [0, 1]
    ctx = _context(epochs=1)
    data = _stored_weights(epochs).assign(
        train_loss=("epoch", ctx.train_loss),
        test_loss=("epoch", ctx.test_loss),
        train_accuracy=("epoch", ctx.train_accuracy),
        test_accuracy=("epoch", ctx.test_accuracy),
    )
    summary = {
        "animation_epochs": epochs,
        "length": L,
        "sparsity": K,
        "modulus": P,
        "train_size": 64,
        "data_seed": 0,
    }
    paths = animate(data, summary, tmp_path, fps=4, dpi=25, quiet=True)
    gif = tmp_path / f"{FIGURE.id}.gif"
    assert gif in paths
    with Image.open(gif) as im:
        assert im.n_frames == len(epochs)


@pytest.mark.parametrize(
    "argv", [["--animation-every", "0"], ["--frames", "0", "5000"], ["--animation-dpi", "5"]]
)
def test_bad_sandbox_input_fails_cleanly(tmp_path, argv, capsys):
    assert main(["figure", FIGURE.id, "--quiet", "--out", str(tmp_path), *argv]) == 2
    assert capsys.readouterr().err.startswith("stagewise: error:")


@pytest.fixture(scope="module")
def quick_sandbox(tmp_path_factory):
    out = tmp_path_factory.mktemp("sandbox")
    assert main(["figure", FIGURE.id, "--quick", "--quiet", "--out", str(out)]) == 0
    return out / FIGURE.id


@pytest.mark.slow
def test_quick_sandbox_writes_the_frames_and_the_animation(quick_sandbox):
    summary = read_summary(quick_sandbox)
    assert (quick_sandbox / f"{FIGURE.id}.png").exists()
    assert summary["frames"] == [0, 10, 100, 200]
    with Image.open(quick_sandbox / f"{FIGURE.id}.gif") as im:
        assert im.n_frames > 1 and im.n_frames == len(summary["animation_epochs"])
    # the shown seed learns, and its sequence embeddings collapse onto first-k histogram clusters
    assert summary["success"]
    q = summary["cluster_quality_at_frames"]
    assert q[-1] < q[0] / 4


@pytest.mark.slow
def test_sandbox_replot_redraws_the_animation_from_the_store(quick_sandbox, monkeypatch):
    import figures.clustering_head.sandbox as module

    gif = quick_sandbox / f"{FIGURE.id}.gif"
    gif.unlink()
    monkeypatch.setattr(module, "compute", lambda cfg: pytest.fail("replot recomputed"))
    assert main(["figure", FIGURE.id, "--replot", "--quiet", "--out", str(quick_sandbox)]) == 0
    summary = read_summary(quick_sandbox)
    with Image.open(gif) as im:
        assert im.n_frames == len(summary["animation_epochs"])


def test_cluster_quality_ignores_absent_groups_and_matches_the_logged_value(tmp_path):
    points = np.array([[0.0, 0.0], [0.0, 2.0], [4.0, 0.0], [4.0, 2.0]])
    assert np.isclose(float(cluster_quality(points, np.array([0, 0, 2, 2]), 3)), 1.0 / 4.0)
    cfg = ClusteringConfig(epochs=2, epochs_per_chunk=2, hessian_iterations=0)
    ds, _ = load(train_run(cfg, RunOutput(out=tmp_path / "run", quiet=True)))
    test = np.asarray(draw_data(cfg).test)
    xi = np.asarray(jax.vmap(model_at(ds, 0, -1).sequence_embedding)(test))
    logged = float(ds["cluster_quality"].values[0, -1])
    assert np.isclose(logged, float(cluster_quality(xi, histogram_index(test, K, P))), rtol=1e-4)
