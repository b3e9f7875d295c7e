"""Figure clustering-head-sandbox: the visual sandbox frames (spec clustering_head.md §7
clustering-head-sandbox, §5.1).

One seed of the clustering-head experiment (paper defaults, p = 2, V_e = 3, 1000 epochs); one row
per frame epoch (0, 10, 100, final), eight panels per row, every object of the forward pass in R^2:
token and positional embeddings E, P; the normalised points Z = N(E[a] + P[t]) for every (token,
position); the probe-set attention (boundary after position k); the sequence embeddings xi of the
train set by class over the level lines of xi -> p(y = 1 | xi); the normalised N(xi) with the FFN
"receptors" (rows of W_1); the FFN "emitters" (columns of W_2); train/test loss and accuracy with
the frame epoch marked. A project layout of the paper's 4 x 4 panel grid (8 of its 16 panels: the
simplex, VZ, the FFN output and output level-line panels are not drawn).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from figures.output import figure_dir, format_table, run_figure
from simulate.clustering_model import ClusteringHead, rms_norm
from simulate.clustering_task import draw_data
from simulate.clustering_training import WEIGHTS, ClusteringConfig, model_at
from simulate.clustering_training import run as train_run
from simulate.store import load
from theory.clustering_symmetry import cluster_count
from theory.validation import require

FIGURE_ID = "clustering-head-sandbox"


@dataclass(frozen=True)
class SandboxConfig:
    """One seed, frames at selected epochs (paper: 1000 epochs, frames 0, 10, 100, 1000)."""

    epochs: int = 1000
    """epochs of 64 steps (a multiple of 10)."""
    frames: tuple[int, ...] = (0, 10, 100, 1000)
    """epochs drawn, one row each (0 <= epoch <= epochs)."""
    seed: int = 0
    """training seed."""
    quick: bool = False
    """CPU-sized: 200 epochs, frames 0, 10, 100, 200."""
    out: Path = Path("runs")
    """output directory."""
    replot: bool = False
    """redraw from the stored run; nothing is recomputed."""
    quiet: bool = False
    """no progress bar."""

    def __post_init__(self):
        require(self.epochs >= 10 and self.epochs % 10 == 0, "epochs", self.epochs,
                "a multiple of 10, >= 10")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(len(self.frames) >= 1 and all(0 <= f <= self.epochs for f in self.frames),
                "frames", self.frames, f"one or more epochs in [0, {self.epochs}]")

    def plan(self) -> tuple[int, tuple[int, ...]]:
        return (200, (0, 10, 100, 200)) if self.quick else (self.epochs, self.frames)

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def compute(cfg: SandboxConfig) -> tuple[xr.Dataset, dict]:
    epochs, frames = cfg.plan()
    tcfg = ClusteringConfig(seed=cfg.seed, seeds=1, epochs=epochs, epochs_per_chunk=epochs // 10,
                            hessian_iterations=0, quiet=cfg.quiet, out=cfg.run_dir() / "training")
    ds, _ = load(train_run(tcfg))
    ds = ds.isel(seed=0, drop=True)
    ds = ds.assign_coords(epoch=("step", ds["step"].values // tcfg.steps_per_epoch)).swap_dims(
        step="epoch").drop_vars("step")
    curves = ds[["train_loss", "test_loss", "train_accuracy", "test_accuracy"]]
    weights = ds[[*WEIGHTS, "probe_attention"]].sel(epoch=list(frames)).rename(epoch="frame")
    data = xr.merge([curves, weights])
    acc = ds["test_accuracy"].sel(epoch=list(frames)).values
    summary = {"seed": cfg.seed, "epochs": epochs, "frames": list(frames),
               "test_accuracy_at_frames": acc, "train_loss_at_frames":
               ds["train_loss"].sel(epoch=list(frames)).values,
               "histogram_clusters": cluster_count(tcfg.sparsity, tcfg.modulus),
               "sparsity": tcfg.sparsity, "modulus": tcfg.modulus, "length": tcfg.length,
               "train_size": tcfg.train_size, "data_seed": tcfg.data_seed}
    return data, summary


def _model(data: xr.Dataset, row: int) -> ClusteringHead:
    frames = data[list(WEIGHTS)].isel(frame=row).expand_dims(seed=[0], step=[0])
    return model_at(frames, 0, 0)


def class_probability(model: ClusteringHead, xi, label: int) -> np.ndarray:
    """p(y = label | xi) of the read-out softmax(E h(xi)) at sequence embeddings xi (n, d)."""
    logits = jax.vmap(lambda v: model.token @ model.ffn(v))(jnp.asarray(xi))
    return np.asarray(jax.nn.softmax(logits)[:, label])


def plot(data: xr.Dataset, summary: dict):
    k, p = summary["sparsity"], summary["modulus"]
    train = draw_data(ClusteringConfig(length=summary["length"], sparsity=k, modulus=p,
                                       train_size=summary["train_size"],
                                       data_seed=summary["data_seed"])).train
    y = np.asarray(train[:, :k].sum(1) % p)
    nrows = data.sizes["frame"]
    fig, axes = plt.subplots(nrows, 8, figsize=(30, 3.6 * nrows), squeeze=False)
    for r in range(nrows):
        m = _model(data, r)
        epoch = int(data["frame"].values[r])
        ax = axes[r]
        E, P = np.asarray(m.token), np.asarray(m.position)
        ax[0].scatter(*E.T, marker="*", s=120, c=[f"C{i}" for i in range(len(E))], label="E[a]")
        ax[0].scatter(*P[:k].T, c="k", s=18, label="P[t], t <= k")
        ax[0].scatter(*P[k:].T, c="gray", s=18, marker="x", label="P[t], t > k")
        ax[0].set(title=f"epoch {epoch}: embeddings E, P", aspect="equal")
        Z = np.asarray(rms_norm(E[:, None] + P[None]))
        for a in range(len(E)):
            ax[1].scatter(*Z[a, :k].T, c=f"C{a}", s=18)
            ax[1].scatter(*Z[a, k:].T, c=f"C{a}", s=18, marker="x")
        ax[1].set(title="Z = N(E[a] + P[t]) (o: t <= k, x: t > k)", aspect="equal")
        im = ax[2].imshow(data["probe_attention"].values[r], aspect="auto", cmap="viridis",
                          extent=(0.5, summary["length"] + 0.5, data.sizes["probe"] - 0.5, -0.5))
        ax[2].axvline(k + 0.5, color="w", ls="--")
        ax[2].set(title="probe attention a_t", xlabel="position t", ylabel="probe input")
        fig.colorbar(im, ax=ax[2])
        xi = np.asarray(jax.vmap(m.sequence_embedding)(train))
        lo, hi = xi.min(0) - 0.3, xi.max(0) + 0.3
        gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 80), np.linspace(lo[1], hi[1], 80))
        grid = jnp.stack([gx.ravel(), gy.ravel()], 1)
        prob = class_probability(m, grid, 1)
        cs = ax[3].contourf(gx, gy, prob.reshape(gx.shape), levels=np.linspace(0, 1, 11),
                            cmap="coolwarm", alpha=0.6)
        fig.colorbar(cs, ax=ax[3], label="p(y = 1 | xi)")
        for c in range(p):
            ax[3].scatter(*xi[y == c].T, s=6, c=f"C{c}", label=f"class {c}")
        ax[3].set(title="sequence embeddings xi, level lines")
        nxi = np.asarray(rms_norm(jnp.asarray(xi)))
        W1 = np.asarray(m.w1)
        for c in range(p):
            ax[4].scatter(*nxi[y == c].T, s=6, c=f"C{c}")
        ax[4].quiver(np.zeros(len(W1)), np.zeros(len(W1)), W1[:, 0], W1[:, 1], angles="xy",
                     scale_units="xy", scale=1, width=0.004, color="k", alpha=0.6)
        ax[4].add_patch(plt.Circle((0, 0), np.sqrt(2), fill=False, ls=":", color="gray"))
        ax[4].set(title="N(xi) (circle of radius sqrt 2), receptors (rows of W_1)",
                  xlim=(-1.6, 1.6), ylim=(-1.6, 1.6), aspect="equal")
        W2 = np.asarray(m.w2).T
        ax[5].quiver(np.zeros(len(W2)), np.zeros(len(W2)), W2[:, 0], W2[:, 1], angles="xy",
                     scale_units="xy", scale=1, width=0.004, color="C4")
        span = max(1e-3, float(np.abs(W2).max())) * 1.1
        ax[5].set(title="emitters (columns of W_2)", xlim=(-span, span), ylim=(-span, span),
                  aspect="equal")
        ep = data["epoch"].values
        ax[6].plot(ep, data["train_loss"], label="train")
        ax[6].plot(ep, data["test_loss"], label="test")
        ax[6].axhline(np.log(2), color="gray", ls="--", label="ln 2")
        ax[6].set(yscale="log", xlabel="epoch", ylabel="loss (nats)", title="loss")
        ax[7].plot(ep, data["train_accuracy"], label="train")
        ax[7].plot(ep, data["test_accuracy"], label="test")
        ax[7].axhline(0.98, color="gray", ls="--", label="success 0.98")
        ax[7].set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.02))
        for a in (ax[6], ax[7]):
            a.axvline(epoch, color="k", ls=":")
            a.legend(fontsize=7)
        ax[0].legend(fontsize=7)
        ax[3].legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    return fig


def report(summary: dict) -> str:
    rows = [[f, a, loss] for f, a, loss in zip(summary["frames"], summary["test_accuracy_at_frames"],
                                               summary["train_loss_at_frames"])]
    return format_table(["epoch", "test accuracy", "train loss (nats)"], rows)


def run(cfg: SandboxConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)
