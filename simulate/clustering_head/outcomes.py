"""Outcomes of clustering-head runs (spec clustering_head.md §4, §5.5): the success rule, success
rates with their Wilson score intervals, the first epoch of success, and the one-axis ablation
grid around the paper's default (lr, batch, FFN width m)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binomtest

from simulate.clustering_head.training import SUCCESS_ACCURACY, ClusteringSetting

AXES = ("lr", "batch", "width")
"""the ablated coordinates, in ClusteringConfig's names (width = m)."""
PAPER = ClusteringSetting()
"""the default point: the paper's lr, batch and FFN width m."""
INTERVAL_RULE = "Wilson score interval, 95% (z = 1.96), of successes / seeds"


def wilson_interval(successes: ArrayLike, trials: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score 95% interval (lo, hi) of a binomial success probability from ``successes``
    out of ``trials`` (scipy's ``binomtest(...).proportion_ci(method="wilson")``)."""
    pairs = np.broadcast(np.asarray(successes), np.asarray(trials))
    bounds = [
        binomtest(int(k), int(n)).proportion_ci(0.95, method="wilson")
        for k, n in np.broadcast(np.asarray(successes), np.asarray(trials))
    ]
    return (
        np.array([b.low for b in bounds]).reshape(pairs.shape),
        np.array([b.high for b in bounds]).reshape(pairs.shape),
    )


def first_success_epoch(
    accuracy: ArrayLike, epochs: ArrayLike, level: float = SUCCESS_ACCURACY
) -> np.ndarray:
    """Per seed (rows of ``accuracy``): the first logged epoch with accuracy > level (NaN if
    never)."""
    above = np.asarray(accuracy) > level
    first = np.asarray(epochs, float)[np.argmax(above, axis=1)]
    return np.where(above.any(axis=1), first, np.nan)


def learning_rates(count: int, low: float, high: float) -> np.ndarray:
    """``count`` log-spaced learning rates from ``low`` to ``high`` (``low`` alone when
    count = 1)."""
    return np.geomspace(low, high, count) if count > 1 else np.array([low])


def off_default(values: Iterable[float], default: float) -> list:
    """The sorted distinct values of one ablation axis other than the default."""
    return [v for v in sorted(set(values)) if not np.isclose(v, default, rtol=1e-9, atol=0)]


def ablation_points(
    lrs: Iterable[float],
    batches: Iterable[float],
    widths: Iterable[float],
    default: dict[str, float] | None = None,
) -> list[dict]:
    """Grid points as {axis, lr, batch, width}: the default first (axis 'default'), then each
    axis's other values with the remaining coordinates at the default ({lr, batch, width};
    None: the paper's, ``PAPER``)."""
    default = {a: (default or paper_point())[a] for a in AXES}
    points: list[dict] = [{"axis": "default", **default}]
    for axis, values in zip(AXES, (lrs, batches, widths), strict=True):
        points += [{**default, "axis": axis, axis: v} for v in off_default(values, default[axis])]
    return points


def paper_point() -> dict[str, float]:
    """The paper's default point {lr, batch, width}."""
    return {"lr": PAPER.lr, "batch": PAPER.batch, "width": PAPER.width}


def point_name(point: dict) -> str:
    """Run subdirectory of a grid point."""
    if point["axis"] == "default":
        return "default"
    value = point[point["axis"]]
    return f"{point['axis']}={value:.4g}" if point["axis"] == "lr" else f"{point['axis']}={value}"


def shown_seed(final_mass: np.ndarray, success: np.ndarray) -> int:
    """Index of the seed drawn in (a)-(b): the successful seed with the highest final A_k, else the
    seed with the highest final A_k."""
    score = np.where(success, final_mass, final_mass - 10.0)
    return int(np.argmax(score))
