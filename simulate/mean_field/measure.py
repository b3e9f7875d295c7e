"""Measurement rules of the trained mean-field figures (spec ``mean_field.md`` §5.5, §7), with
their constants: where the trained flow leaves the untrained one, the decay rate of a control
profile toward the input, and the monotonicity of the untrained energy."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from simulate.measure.fits import exponential_rate

ONSET_DIFFERENCE = 0.1
"""gap in ``<x, e_2>`` beyond which the trained flow has left the untrained one."""
ONSET_RULE = (
    f"escape onset = the last depth at which the trained <x, e_2> is within "
    f"{ONSET_DIFFERENCE} of the untrained one (seed mean; beyond it the gap stays "
    f"> {ONSET_DIFFERENCE})"
)
FIT_RULE = "kappa fitted: slope of log ||W_b|| over the bins in the last quarter of the depth"
MONOTONE_RULE = (
    "untrained F is non-increasing within noise: the largest rise between saved "
    "depth points, against the total decrease F(0) - min F"
)


def escape_onset(
    depth: ArrayLike,
    trained: ArrayLike,
    untrained: ArrayLike,
    difference: float = ONSET_DIFFERENCE,
) -> float:
    """``ONSET_RULE``: nan if the trained curve never separates for good."""
    depth = np.asarray(depth, float)
    gap = np.abs(np.asarray(trained, float) - np.asarray(untrained, float)) > difference
    if not gap[-1]:
        return float("nan")
    close = np.nonzero(~gap)[0]
    return float(depth[close[-1]]) if close.size else float(depth[0])


def fit_rate(depth_centres: ArrayLike, norms: ArrayLike, depth: float, window: float) -> float:
    """``kappa`` of ``||W_t|| ∝ e^{-kappa (T - t)}`` (``FIT_RULE`` with ``window = T/4``):
    least-squares slope of ``log ||W_b||`` over the bins with positive norm in the last
    ``window`` of the depth (nan with fewer than two)."""
    t, n = np.asarray(depth_centres, float), np.asarray(norms, float)
    sel = t >= depth - window
    return exponential_rate(t[sel], n[sel])


def largest_rise(values: ArrayLike) -> float:
    """Largest increase between consecutive entries (0 for a non-increasing sequence;
    ``MONOTONE_RULE``)."""
    return float(max(0.0, np.max(np.diff(np.asarray(values, float)))))
