"""One frame of the clustering-head visual sandbox (spec clustering_head.md §7
clustering-head-sandbox, §3, §5.1, §5.3): the paper's 4 x 4 panel grid for one model, every object
of the forward pass in R^2.

    Row 1: E;  P (t <= k vs t > k);  E[a] + P[t];  Z = N(E[a] + P[t]) on the circle of radius
           sqrt d.
    Row 2: probe attention a_t (boundary after k);  V Z;  xi(x) by class with the first-k histogram
           clusters and the §5.1 ideal-head prediction (1/k) sum_a n_a V zbar_a;  level lines of
           xi -> p(y | xi) = softmax(E h(xi)).
    Row 3: N(xi);  FFN receptors (rows of W_1) with N(xi);  FFN emitters (columns of W_2);  h(xi).
    Row 4: level lines of h -> softmax(E h);  softmax(E h(x)) on the probability simplex of the
           V_e = 3 tokens;  train/test loss (log) with ln p;  train/test accuracy with the success
           line.

Shared by the static figure and the animation: ``draw_frame(fig, model, context, epoch)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from figures.core.regions import draw_regions, region_grid
from simulate.clustering_head.model import (
    ClusteringHead,
    ideal_clusters,
    read_out,
    rms_norm,
)
from simulate.clustering_head.task import histogram_index, histograms
from simulate.clustering_head.training import cluster_quality

SUCCESS_ACCURACY = 0.98
"""the success line of the accuracy panel (§4)."""
GRID = 60
"""points per side of the level-line grids."""
SIMPLEX_CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3.0) / 2]])
"""corners of the probability simplex of 3 tokens in the plane (token 0, 1, 2)."""
CLASS_MARKERS = "o^sDv"


@dataclass(frozen=True)
class SandboxContext:
    """What a frame draws besides the weights: the training set, the probe set, the curves."""

    train: np.ndarray
    """training sequences x, (n, L) int."""
    sparsity: int
    """k."""
    modulus: int
    """p."""
    probe: np.ndarray
    """probe sequences, (probes, L) int."""
    probe_histogram: np.ndarray
    """index of each probe's first-k histogram in ``histograms(k, p)``."""
    epochs: np.ndarray
    """the epochs of the curves."""
    train_loss: np.ndarray
    test_loss: np.ndarray
    train_accuracy: np.ndarray
    test_accuracy: np.ndarray

    @property
    def labels(self) -> np.ndarray:
        """y(x) = (x_1 + ... + x_k) mod p."""
        return self.train[:, : self.sparsity].sum(1) % self.modulus

    @property
    def histogram(self) -> np.ndarray:
        """index of each training sequence's first-k histogram n(x) in ``histograms(k, p)``."""
        return histogram_index(self.train, self.sparsity, self.modulus)


def simplex_projection(prob: np.ndarray) -> np.ndarray:
    """Barycentric map of probability vectors (n, 3) into the plane: sum_a prob_a * corner_a."""
    return np.asarray(prob) @ SIMPLEX_CORNERS


def _grid(points):
    """A GRID x GRID mesh around ``points`` (n, 2), padded by 0.15 of their extent."""
    return region_grid(points, GRID, pad=0.15, relative=True, xp=jnp)


@eqx.filter_jit
def _forward(model: ClusteringHead, train, probe) -> dict:
    """Everything a frame draws that goes through the network (one compiled call per frame)."""
    xi = jax.vmap(model.sequence_embedding)(train)
    h = jax.vmap(model.ffn)(xi)
    xi_x, xi_y, xi_grid = _grid(xi)
    h_x, h_y, h_grid = _grid(h)
    return {
        "xi": xi,
        "h": h,
        "prob": jax.nn.softmax(h @ model.token.T),
        "attention": jax.vmap(model.attention)(probe),
        "xi_grid": (xi_x, xi_y),
        "xi_grid_prob": read_out(model, xi_grid),
        "h_grid": (h_x, h_y),
        "h_grid_prob": jax.nn.softmax(h_grid @ model.token.T),
    }


def _regions(ax, gx, gy, prob: np.ndarray, label: int) -> None:
    """argmax regions of the read-out (token colours) and labelled level lines of p(y = label)."""
    draw_regions(ax, gx, gy, prob, line=label, levels=(0.1, 0.25, 0.5, 0.75, 0.9), fmt="%.2g")


def _by_class(ax, points: np.ndarray, y: np.ndarray, modulus: int, **kw) -> None:
    for c in range(modulus):
        ax.scatter(
            *points[y == c].T,
            s=5,
            c=f"C{c}",
            marker=CLASS_MARKERS[c],
            label=f"y = {c}",
            linewidths=0,
            **kw,
        )


def _arrows(ax, vectors: np.ndarray, color, label: str) -> None:
    zeros = np.zeros(len(vectors))
    ax.quiver(
        zeros,
        zeros,
        vectors[:, 0],
        vectors[:, 1],
        angles="xy",
        scale_units="xy",
        scale=1,
        width=0.006,
        color=color,
        alpha=0.7,
        label=label,
    )


def _square(ax, points: np.ndarray) -> None:
    """equal aspect with limits holding every point (quiver does not update the data limits)."""
    r = max(float(np.abs(points).max()), 1e-3) * 1.15
    ax.set(xlim=(-r, r), ylim=(-r, r), aspect="equal")


def _token_points(ax, points: np.ndarray, k: int) -> None:
    """points (a, t) of E[a] + P[t]-like arrays: colour by token a, o for t <= k, x for t > k."""
    for a in range(points.shape[0]):
        ax.scatter(*points[a, :k].T, c=f"C{a}", s=16, marker="o", label=f"a = {a}, t <= k")
        ax.scatter(*points[a, k:].T, c=f"C{a}", s=16, marker="x", label=f"a = {a}, t > k")


def draw_frame(fig, model: ClusteringHead, ctx: SandboxContext, epoch: int) -> np.ndarray:
    """Draw the 4 x 4 sandbox panels of ``model`` (the weights at ``epoch``) on ``fig`` (a Figure or
    SubFigure); returns the (4, 4) array of panel axes."""
    with plt.rc_context({"axes.titlesize": 9, "axes.labelsize": 8}):
        return _draw(fig, model, ctx, epoch)


def _draw(fig, model: ClusteringHead, ctx: SandboxContext, epoch: int) -> np.ndarray:
    k, p = ctx.sparsity, ctx.modulus
    y, hist = ctx.labels, ctx.histogram
    gs = fig.add_gridspec(
        4, 4, left=0.05, right=0.98, bottom=0.05, top=0.92, wspace=0.35, hspace=0.45
    )
    ax = np.array([[fig.add_subplot(gs[r, c]) for c in range(4)] for r in range(4)])
    fig.suptitle(f"clustering-head sandbox, epoch {epoch}", fontsize=13)
    E, P = np.asarray(model.token), np.asarray(model.position)
    out = jax.tree_util.tree_map(np.asarray, _forward(model, ctx.train, ctx.probe))
    xi, h, prob, attention = out["xi"], out["h"], out["prob"], out["attention"]
    radius = np.sqrt(model.dim)

    # Row 1: embeddings and the normalised points
    a = ax[0, 0]
    for i, e in enumerate(E):
        a.scatter(
            *e, marker="*", s=140, c=f"C{i}", label=f"E[{i}]" + (" (unused)" if i >= p else "")
        )
    _square(a, E)
    a.set(title="token embeddings E", xlabel="dim 1", ylabel="dim 2")
    a.legend(fontsize=6)
    a = ax[0, 1]
    a.scatter(*P[:k].T, c="k", s=18, label="t <= k")
    a.scatter(*P[k:].T, c="gray", s=18, marker="x", label="t > k")
    for t, pt in enumerate(P, 1):
        a.annotate(str(t), pt, fontsize=6, xytext=(2, 2), textcoords="offset points")
    _square(a, P)
    a.set(title="positional embeddings P[t]", xlabel="dim 1")
    a.legend(fontsize=6)
    EP = E[:p, None] + P[None]
    _token_points(ax[0, 2], EP, k)
    _square(ax[0, 2], EP)
    ax[0, 2].set(title="E[a] + P[t], a in Z_p", xlabel="dim 1")
    ax[0, 2].legend(fontsize=5, ncol=2)
    Z = np.asarray(rms_norm(jnp.asarray(EP)))
    _token_points(ax[0, 3], Z, k)
    ax[0, 3].add_patch(plt.Circle((0, 0), radius, fill=False, ls=":", color="gray"))
    _square(ax[0, 3], np.array([[radius, radius]]))
    ax[0, 3].set(title="Z = N(E[a] + P[t]), |Z| = sqrt d", xlabel="dim 1")

    # Row 2: attention, value map, sequence embeddings, level lines
    a = ax[1, 0]
    im = a.imshow(
        attention,
        aspect="auto",
        cmap="viridis",
        vmin=0,
        extent=(0.5, attention.shape[1] + 0.5, len(attention) - 0.5, -0.5),
    )
    a.axvline(k + 0.5, color="w", ls="--")
    starts = np.flatnonzero(np.r_[True, np.diff(ctx.probe_histogram) != 0])
    names = histograms(k, p)
    a.set_yticks(starts, [str(names[i]) for i in ctx.probe_histogram[starts]], fontsize=5)
    a.set(
        title="probe attention a_t (| after t = k)",
        xlabel="position t",
        ylabel="probe (first-k histogram n)",
    )
    fig.colorbar(im, ax=a, fraction=0.05, pad=0.02)
    VZ = Z @ np.asarray(model.value).T
    _token_points(ax[1, 1], VZ, k)
    ax[1, 1].set(
        title="value-mapped points V Z", xlabel="dim 1", aspect="equal", adjustable="datalim"
    )
    a = ax[1, 2]
    _by_class(a, xi, y, p)
    ideal = ideal_clusters(model, k, p)
    a.scatter(*ideal.T, marker="+", c="k", s=40, label="§5.1 ideal head")
    for i in np.unique(hist):
        a.annotate(str(names[i]), xi[hist == i].mean(0), fontsize=5, alpha=0.8)
    a.set(
        title=f"sequence embeddings xi (Q = {float(cluster_quality(xi, hist)):.2g})",
        xlabel="dim 1",
        aspect="equal",
        adjustable="datalim",
    )
    a.legend(fontsize=5, markerscale=2)
    a = ax[1, 3]
    _regions(a, *out["xi_grid"], out["xi_grid_prob"], 1)
    _by_class(a, xi, y, p)
    a.set(title="level lines of p(y = 1 | xi)", xlabel="dim 1")

    # Row 3: the FFN
    nxi = np.asarray(rms_norm(jnp.asarray(xi)))
    for a in ax[2, :2]:
        _by_class(a, nxi, y, p)
        a.add_patch(plt.Circle((0, 0), radius, fill=False, ls=":", color="gray"))
    ax[2, 0].set(title="N(xi) on the circle |.| = sqrt d", xlabel="dim 1")
    _square(ax[2, 0], np.array([[radius, radius]]))
    W1 = np.asarray(model.w1)
    _arrows(ax[2, 1], W1, "k", "rows of W_1")
    _square(ax[2, 1], np.vstack([W1, [[radius, radius]]]))
    ax[2, 1].set(title="FFN receptors (rows of W_1), N(xi)", xlabel="dim 1")
    ax[2, 1].legend(fontsize=6, loc="lower right")
    W2 = np.asarray(model.w2).T
    _arrows(ax[2, 2], W2, "C4", "columns of W_2")
    _square(ax[2, 2], W2)
    ax[2, 2].set(title="FFN emitters (columns of W_2)", xlabel="dim 1")
    ax[2, 2].legend(fontsize=6, loc="lower right")
    _by_class(ax[2, 3], h, y, p)
    ax[2, 3].set(title="FFN output h(xi)", xlabel="dim 1", aspect="equal", adjustable="datalim")

    # Row 4: read-out, simplex, curves
    a = ax[3, 0]
    _regions(a, *out["h_grid"], out["h_grid_prob"], 1)
    _by_class(a, h, y, p)
    a.set(title="read-out regions of softmax(E h)", xlabel="h, dim 1", ylabel="h, dim 2")
    a = ax[3, 1]
    a.add_patch(plt.Polygon(SIMPLEX_CORNERS, fill=False, color="gray"))
    centre = SIMPLEX_CORNERS.mean(0)
    for mid in (SIMPLEX_CORNERS + np.roll(SIMPLEX_CORNERS, 1, 0)) / 2:
        a.plot(*np.stack([centre, mid]).T, ls=":", c="gray", lw=0.8)
    for i, corner in enumerate(SIMPLEX_CORNERS):
        a.annotate(
            f"token {i}" + (" (unused)" if i >= p else ""),
            corner,
            fontsize=7,
            ha="center",
            xytext=(0, -10 if corner[1] == 0 else 4),
            textcoords="offset points",
        )
    _by_class(a, simplex_projection(prob), y, p)
    a.set(title="softmax(E h) on the simplex", xlim=(-0.1, 1.1), ylim=(-0.12, 0.95), aspect="equal")
    a.set_axis_off()
    a = ax[3, 2]
    a.plot(ctx.epochs, ctx.train_loss, label="train")
    a.plot(ctx.epochs, ctx.test_loss, label="test")
    a.axhline(np.log(p), color="gray", ls="--", label="ln p")
    a.set(yscale="log", xlabel="epoch", ylabel="cross-entropy (nats)", title="loss")
    a = ax[3, 3]
    a.plot(ctx.epochs, ctx.train_accuracy, label="train")
    a.plot(ctx.epochs, ctx.test_accuracy, label="test")
    a.axhline(SUCCESS_ACCURACY, color="gray", ls="--", label=f"success {SUCCESS_ACCURACY}")
    a.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.02))
    for a in ax[3, 2:]:
        a.axvline(epoch, color="k", ls=":", label=f"epoch {epoch}")
        a.legend(fontsize=6)
    return ax
