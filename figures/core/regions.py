"""The one decision-region grid: a square mesh around a 2-D point cloud, and the argmax regions of
class probabilities on it with level lines (used wherever a 2-D read-out is drawn)."""

from __future__ import annotations

from typing import Any

import numpy as np

GRID = 120
"""points per side of a region mesh."""


def region_grid(points: Any, size: int = GRID, pad: float = 0.3, relative: bool = False, xp=np):
    """A ``size`` x ``size`` mesh around ``points`` (n, 2), padded by ``pad`` on every side
    (``relative``: by pad x the larger extent of the points, at least 1e-2). ``xp`` is numpy or
    jax.numpy (inside jit). Returns (gx, gy, flat (size^2, 2))."""
    lo, hi = points.min(0), points.max(0)
    if relative:
        pad = pad * xp.maximum(xp.max(hi - lo), 1e-2)
    gx, gy = xp.meshgrid(
        xp.linspace(lo[0] - pad, hi[0] + pad, size), xp.linspace(lo[1] - pad, hi[1] + pad, size)
    )
    return gx, gy, xp.stack([gx.ravel(), gy.ravel()], 1)


def draw_regions(
    ax,
    gx,
    gy,
    prob: np.ndarray,
    line: int | str | None = None,
    levels: tuple[float, ...] = (0.25, 0.5, 0.75),
    alpha: float = 0.15,
    linewidth: float = 0.6,
    label_lines: bool = True,
    fmt: str | None = None,
) -> None:
    """The argmax regions of ``prob`` (mesh points, classes), class c in colour Cc, and level
    lines of p(y = ``line`` | point) (``line`` = "max": of the largest probability; None: none),
    labelled when ``label_lines``."""
    prob = np.asarray(prob)
    classes = prob.shape[1]
    ax.contourf(
        gx,
        gy,
        prob.argmax(1).reshape(np.shape(gx)),
        levels=np.arange(classes + 1) - 0.5,
        colors=[f"C{a}" for a in range(classes)],
        alpha=alpha,
    )
    if line is None:
        return
    values = prob.max(1) if line == "max" else prob[:, int(line)]
    lines = ax.contour(
        gx, gy, values.reshape(np.shape(gx)), levels=list(levels), colors="k", linewidths=linewidth
    )
    if label_lines:
        ax.clabel(lines, fontsize=6, **({"fmt": fmt} if fmt else {}))
