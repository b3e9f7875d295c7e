"""Measured stage times from trajectories (spec incremental.md §6, project rule).

Rule: stage k is reached at the first time the loss falls below the midpoint of the consecutive
derived plateau levels, ``(L_{k-1} + L_k) / 2``. Trajectories sampled on a grid are located by
linear interpolation in log time between the bracketing samples; the ODE solver locates the same
crossings exactly with events (``simulate.incremental.head_ode``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

RULE = "first time the loss falls below (L_{k-1} + L_k)/2, L_k the derived plateau levels"
STAGE1_EVENT = "head-averaged attention mass on the lead block = 1/2"
"""The event the stage-1 prediction is about (the escape from uniform attention)."""


def midpoints(levels: ArrayLike) -> np.ndarray:
    levels = np.asarray(levels, dtype=float)
    return 0.5 * (levels[:-1] + levels[1:])


def first_crossing(ts: ArrayLike, values: ArrayLike, threshold: float) -> float:
    """First time ``values`` falls below ``threshold`` (nan if never), log-linear interpolation."""
    ts, values = np.asarray(ts, float), np.asarray(values, float)
    below = np.nonzero(values < threshold)[0]
    if below.size == 0:
        return float("nan")
    i = int(below[0])
    if i == 0:
        return float(ts[0])
    t0, t1, y0, y1 = ts[i - 1], ts[i], values[i - 1], values[i]
    w = (y0 - threshold) / (y0 - y1)
    if t0 > 0:
        return float(np.exp(np.log(t0) + w * (np.log(t1) - np.log(t0))))
    return float(t0 + w * (t1 - t0))


def stage_times(ts: ArrayLike, loss: ArrayLike, levels: ArrayLike) -> np.ndarray:
    """Measured stage times for one trajectory: one per consecutive pair of plateau levels."""
    return np.array([first_crossing(ts, loss, c) for c in midpoints(levels)])


def first_rise(ts: ArrayLike, values: ArrayLike, threshold: float) -> float:
    """First time ``values`` rises above ``threshold`` (nan if never)."""
    return first_crossing(ts, -np.asarray(values, float), -threshold)


def lead_mass_time(ts: ArrayLike, attention: ArrayLike, lags: Iterable[int]) -> float:
    """``STAGE1_EVENT``: first time the head-averaged attention mass on ``lags`` reaches 1/2;
    ``attention`` has shape (time, head, lag)."""
    mass = np.asarray(attention)[:, :, list(lags)].sum(-1).mean(-1)
    return first_rise(ts, mass, 0.5)


def measured_plateaus(ts: ArrayLike, loss: ArrayLike, crossings: Iterable[float]) -> list[float]:
    """Loss where its log-time slope is smallest between consecutive stage crossings (the last
    plateau runs to the end of the trajectory); nan where a bracketing crossing is missing."""
    ts, loss = np.asarray(ts, float), np.asarray(loss, float)
    out = []
    edges = [*list(crossings), ts[-1]]
    for a, b in itertools.pairwise(edges):
        if not (np.isfinite(a) and np.isfinite(b)):
            out.append(float("nan"))
            continue
        idx = np.nonzero((ts > a) & (ts <= b))[0]
        if idx.size < 3:
            out.append(float(loss[idx[-1]]) if idx.size else float("nan"))
            continue
        slope = np.abs(np.gradient(loss[idx], np.log(ts[idx])))
        out.append(float(loss[idx[np.argmin(slope)]]))
    return out
