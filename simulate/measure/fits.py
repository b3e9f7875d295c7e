"""Slopes and rates fitted to measured curves: the least-squares rules every paper wing shares
(onsets against ln(1/eps), stage-1 steps against ln m, growth rates of log-norms, log-log slopes).
Each returns nan when fewer than two usable points remain, so a missing stage never becomes a
number."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def linear_slope(x: ArrayLike, y: ArrayLike) -> float:
    """Least-squares slope of ``y`` against ``x`` over the finite ``y`` (nan if < 2 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    return float(np.polyfit(x[ok], y[ok], 1)[0]) if ok.sum() >= 2 else float("nan")


def loglog_slope(x: ArrayLike, y: ArrayLike) -> float:
    """Least-squares slope of ``ln y`` against ``ln x`` over the finite positive points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    return linear_slope(np.log(x[ok]), np.log(y[ok]))


def exponential_rate(t: ArrayLike, y: ArrayLike) -> float:
    """Rate ``r`` of ``y ∝ e^{r t}``: least-squares slope of ``ln y`` against ``t`` over the
    finite positive ``y``."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    ok = np.isfinite(t) & np.isfinite(y) & (y > 0)
    return linear_slope(t[ok], np.log(y[ok]))


def loglog_slope_last_two(x: ArrayLike, y: ArrayLike) -> float:
    """Slope of ``ln y`` against ``ln x`` through the last two points only (not a fit: the local
    power law at the end of a curve, e.g. the escape at the two largest lambdas); nan if either
    of the two ``y`` is not positive."""
    x, y = np.asarray(x, float)[-2:], np.asarray(y, float)[-2:]
    if np.any(y <= 0):
        return float("nan")
    return float(np.diff(np.log(y))[0] / np.diff(np.log(x))[0])
