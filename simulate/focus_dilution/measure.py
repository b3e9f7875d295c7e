"""Measurement rules of the focus-dilution paper (spec ``focus_dilution.md`` §6, §7): stage onsets,
growth rates over their windows, the redistribution coordinate, loss plateaus, the stall of the
symmetric setting, focus phases of real-text attention and principal components of the embedding
rows. Every rule's constants stand beside it; nothing here draws.

The inputs are ``simulate.focus_dilution.flow.solve_flow`` datasets (dims ``run, sample``, with
``time`` and ``pi``) or plain arrays."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike

from simulate.measure.fits import exponential_rate
from theory.focus_dilution.stages import entropy

ONSET_RULES = {
    "I": "loss falls below the midpoint of [H(pi), ln d]",
    "II": "p_h(h) (attention of the most frequent query h on itself) rises above the midpoint of "
    "[pi_h, 1]",
    "III": "after onset II, the largest per-query attention entropy max_q H_q rises above its "
    "value at onset I (= H(pi) in the population model; dilution: a query spreads its "
    "attention beyond the unfocused law)",
    "IV": "after onset III, sigma_2(W0) rises above 1/2 (a second embedding direction of size "
    "O(1): the escape from the Stage-IV point that t_IV predicts)",
}
STAGE_FOUR_LEVEL = 0.5
RATE_WINDOW_RULE = (
    "least-squares slope of ln y(t) over the first stretch of saved times with lo < y < hi. "
    "sigma: y = ||(W0, W1)||_F (distance from the origin, the Stage-I critical point), "
    "lo = 30 y(0), hi = 0.03 g (g = ||gamma|| at theta_c^1); c: y = ||WQ WK^T||_2 (times after "
    "onset I), lo = 30 y(onset I), hi = 0.03, rate = slope / 2; mu_IV: y = sigma_2(W0) after onset "
    "II, lo = 3 x its minimum there, hi = 0.1"
)
WINDOW_LO, WINDOW_HI = 30.0, 0.03
MU_WINDOW_LO, MU_WINDOW_HI = 3.0, 0.1


def _crossing(ts, values, threshold, start: float = -np.inf, rising: bool = True) -> float:
    """First time ``>= start`` at which ``values`` crosses ``threshold`` upward (``rising``) or
    downward, by linear interpolation between saved times; nan if never."""
    ts, values = np.asarray(ts, float), np.asarray(values, float)
    sign = 1.0 if rising else -1.0
    above = sign * (values - threshold) > 0
    idx = np.nonzero(above & (ts >= start))[0]
    if idx.size == 0:
        return float("nan")
    i = int(idx[0])
    if i == 0 or ts[i - 1] < start:
        return float(ts[i])
    t0, t1, y0, y1 = ts[i - 1], ts[i], values[i - 1], values[i]
    return float(t0 + (threshold - y0) / (y1 - y0) * (t1 - t0))


def stage_onsets(ts, loss, focus_self, max_entropy, sigma2, pi) -> np.ndarray:
    """Onsets of Stages I-IV of one trajectory by ``ONSET_RULES`` (nan where not reached):
    ``focus_self`` is ``p_h(h)``, ``max_entropy`` is ``max_q H_q``, ``sigma2`` is
    ``sigma_2(W0)``."""
    pi = np.asarray(pi, float)
    d, H = pi.size, float(entropy(pi))
    t1 = _crossing(ts, loss, (math.log(d) + H) / 2, rising=False)
    t2 = _crossing(ts, focus_self, (pi.max() + 1) / 2, start=_or_never(t1))
    reference = float(np.interp(t1, ts, max_entropy)) if np.isfinite(t1) else H
    t3 = _crossing(ts, max_entropy, reference, start=_or_never(t2))
    t4 = _crossing(ts, sigma2, STAGE_FOUR_LEVEL, start=_or_never(t3))
    return np.array([t1, t2, t3, t4])


def _or_never(t: float) -> float:
    return t if np.isfinite(t) else np.inf


def onsets(run: xr.Dataset) -> np.ndarray:
    """``stage_onsets`` of one run of a ``solve_flow`` dataset (``data.isel(run=r)``)."""
    pi = run["pi"].values
    h = int(np.argmax(pi))
    return stage_onsets(
        run["time"].values,
        run["loss"].values,
        run["focus_mass"].values[:, h],
        run["attention_entropy"].values.max(axis=-1),
        run["sv_W0"].values[:, 1],
        pi,
    )


def run_onsets(data: xr.Dataset) -> np.ndarray:
    """Onsets of every run: ``(run, 4)``."""
    return np.array([onsets(data.isel(run=r)) for r in range(data.sizes["run"])])


def fit_rate(ts, y, lo: float, hi: float) -> tuple[float, tuple[float, float]]:
    """Slope of ``ln y`` against ``t`` over the first contiguous stretch of saved times with
    ``lo < y < hi``; returns ``(slope, (t_a, t_b))`` (nan when fewer than 3 points)."""
    ts, y = np.asarray(ts, float), np.asarray(y, float)
    idx = np.nonzero((y > lo) & (y < hi))[0]
    if idx.size:
        breaks = np.nonzero(np.diff(idx) > 1)[0]
        idx = idx[: breaks[0] + 1] if breaks.size else idx
    if idx.size < 3:
        return float("nan"), (float("nan"), float("nan"))
    return exponential_rate(ts[idx], y[idx]), (float(ts[idx[0]]), float(ts[idx[-1]]))


def measured_rates(run: xr.Dataset, g: float) -> dict:
    """Measured ``sigma``, ``c`` and ``mu_IV`` of one run by ``RATE_WINDOW_RULE`` (``g``: the top
    singular value at ``theta_c^1``)."""
    ts = run["time"].values
    t1, t2, _, _ = onsets(run)
    y = run["outer_norm"].values
    sigma, w_sigma = fit_rate(ts, y, WINDOW_LO * y[0], WINDOW_HI * g)
    two_c, w_c = float("nan"), (float("nan"), float("nan"))
    if np.isfinite(t1):
        k = int(np.searchsorted(ts, t1))
        qk = run["sv_WQK"].values[k:, 0]
        two_c, w_c = fit_rate(ts[k:], qk, WINDOW_LO * qk[0], WINDOW_HI)
    mu, w_mu = float("nan"), (float("nan"), float("nan"))
    if np.isfinite(t2):
        k = int(np.searchsorted(ts, t2))
        s2 = run["sv_W0"].values[k:, 1]
        k0 = int(np.argmin(s2))
        mu, w_mu = fit_rate(ts[k + k0 :], s2[k0:], MU_WINDOW_LO * s2[k0], MU_WINDOW_HI)
    return {
        "sigma": sigma,
        "sigma_window": w_sigma,
        "c": two_c / 2,
        "c_window": w_c,
        "mu_IV": mu,
        "mu_IV_window": w_mu,
    }


def redistribution(run: xr.Dataset) -> np.ndarray:
    """``D(t) = gamma_h - pi_h sum_i gamma_i`` with ``gamma = W0 alpha_1`` (spec §5.4, §6);
    ``alpha_1`` is the top right singular vector of ``W0`` halfway between onsets I and II (the end
    of Stage I), signed so that ``pi . gamma > 0`` there."""
    ts, W0, pi = run["time"].values, run["W0"].values, run["pi"].values
    t1, t2 = onsets(run)[:2]
    k = int(np.argmin(np.abs(ts - 0.5 * (t1 + t2)))) if np.isfinite(t2) else len(ts) - 1
    alpha = np.linalg.svd(W0[k])[2][0]
    gamma = W0 @ alpha
    gamma = gamma * np.sign(gamma[k] @ pi)
    h = int(np.argmax(pi))
    return gamma[:, h] - pi[h] * gamma.sum(axis=-1)


# --- loss plateaus (spec §5, §7) -----------------------------------------------------------------
PLATEAU_RULE = (
    "ln d: the loss at t = 0; H(pi): the flattest loss between onsets I and II; L_IV: the "
    "flattest between III and IV"
)


def measured_plateau(ts: ArrayLike, loss: ArrayLike, a: float, b: float) -> float:
    """Loss where ``|dL/dt|`` is smallest strictly between times ``a`` and ``b`` (nan if fewer
    than three saved times lie there)."""
    ts, loss = np.asarray(ts, float), np.asarray(loss, float)
    idx = np.nonzero((ts > a) & (ts < b))[0]
    if idx.size < 3 or not (np.isfinite(a) and np.isfinite(b)):
        return math.nan
    slope = np.abs(np.gradient(loss[idx], ts[idx]))
    return float(loss[idx[np.argmin(slope)]])


def plateaus(ts: ArrayLike, loss: ArrayLike, onsets: ArrayLike) -> list[float]:
    """Measured loss plateaus before stages I, II and IV: ``L(0)`` (the start, ``ln d``), the
    flattest point between onsets I and II (``H(pi)``) and between onsets III and IV (the Stage-IV
    rest point)."""
    t1, t2, t3, t4 = (float(t) for t in np.asarray(onsets, float))
    return [
        float(np.asarray(loss)[0]),
        measured_plateau(ts, loss, t1, t2),
        measured_plateau(ts, loss, t3, t4),
    ]


def growth_of_D(run: xr.Dataset, onset_one: float) -> np.ndarray:
    """``D(t) - D(onset I)``: the redistribution coordinate (spec §5.4) less the ``O(eps)`` offset
    that the random initialisation leaves in it at the end of Stage I."""
    D = redistribution(run)
    return D - np.interp(onset_one, run["time"].values, D) if np.isfinite(onset_one) else D


# --- the stall of the symmetric setting (spec §5.5) ----------------------------------------------
STALL_RULE = (
    "delta = 0: slope of ln sigma_2(W0) over the second half of the run (0 = stall), "
    "and |loss(end) - L_IV|"
)


def stall(run: xr.Dataset, L_IV: float) -> dict:
    """The stall of one run by ``STALL_RULE`` (``L_IV``: the predicted Stage-IV rest loss)."""
    ts, s2 = run["time"].values, run["sv_W0"].values[:, 1]
    half = ts > ts[-1] / 2
    return {
        "slope": exponential_rate(ts[half], s2[half]),
        "sigma_2_end": float(s2[-1]),
        "sigma_2_min": float(s2.min()),
        "loss_end": float(run["loss"].values[-1]),
        "L_IV": L_IV,
        "grad_norm_end": float(run["grad_norm"].values[-1]),
        "t_end": float(ts[-1]),
    }


# --- focus phases of a tracked query (real text, spec §7) ----------------------------------------
FOCUS_LEVEL = 0.5
"""a query is focused on a key type while that type holds more than this share of its
attention."""


def focus_phases(
    mass: np.ndarray, key_names, steps: ArrayLike, level: float = FOCUS_LEVEL
) -> list[tuple[int, int, str]]:
    """Maximal runs of logged steps during which one key type holds more than ``level`` of the
    query's attention: ``[(first step, last step, key)]`` (``mass``: ``(step, key)``)."""
    steps = np.asarray(steps)
    phases = []
    top = np.argmax(mass, axis=-1)
    focused = mass[np.arange(len(top)), top] > level
    start = None
    for i in range(len(top) + 1):
        same = i < len(top) and focused[i] and start is not None and top[i] == top[start]
        if start is not None and not same:
            phases.append((int(steps[start]), int(steps[i - 1]), str(key_names[top[start]])))
            start = None
        if i < len(top) and focused[i] and start is None:
            start = i
    return phases


# --- principal components of the embedding rows (spec §7 experiment C) ---------------------------
def principal_components(
    rows: np.ndarray, k: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """PCs of embedding rows pooled over time and tokens: ``rows (time, token, width)`` ->
    ``(scores (time, token, k), explained variance ratios (k,), components (k, width), mean
    (width,))``; the rows are centred on their pooled mean."""
    X = rows.reshape(-1, rows.shape[-1])
    mean = X.mean(axis=0)
    _, s, Vt = np.linalg.svd(X - mean, full_matrices=False)
    k = min(k, Vt.shape[0])
    scores = (rows - mean) @ Vt[:k].T
    return scores, (s[:k] ** 2) / np.sum(s**2), Vt[:k], mean
