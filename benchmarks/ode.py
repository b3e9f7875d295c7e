"""Reduced head ODE (``simulate.incremental.head_ode.solve``, paper Fig. 10 setting of
incremental-ode) against ``scipy.integrate.solve_ivp(method="RK45")`` on a numpy port of the same
field (``simulate.incremental.head_field.logit_field``) at the same rtol/atol, doing the same work:
the trajectory saved on the same grid and the crossing times of the loss midpoints (scipy: one
pass with events; stagewise: the trajectory plus one event re-solve per level, so it does more
integration than scipy). One trajectory, and N seeds as one vmapped call against N solve_ivp
calls. Ratio: scipy seconds / stagewise seconds (warm, compile apart)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from benchmarks.table import Row
from simulate.incremental.head_ode import (
    ATOL,
    RTOL,
    initial_logits,
    log_grid,
    plateau_levels,
    solve,
)
from simulate.incremental.head_options import PAPER_S_NOISE
from simulate.measure.stages import midpoints
from theory.incremental.heads import METRIC_POWER, HeadSetting

AGREEMENT = 1e-6
"""max |difference| of (v, s) at t_end between the two solvers that counts as the same system."""


@dataclass(frozen=True)
class OdeSizes:
    seeds: int
    """trajectories of the batched comparison (one vmapped call vs this many solve_ivp calls)."""
    t_max: float
    n_save: int
    repeats: int
    """stagewise runs (>= 2); the fastest counts (scipy's runs are seconds long: timed once)."""


SIZES = {
    "full": OdeSizes(seeds=64, t_max=500.0, n_save=2000, repeats=3),
    "quick": OdeSizes(seeds=8, t_max=500.0, n_save=600, repeats=2),
    # one seed: the batched row is the one-trajectory row, so the tests compile one program
    "tiny": OdeSizes(seeds=1, t_max=20.0, n_save=50, repeats=2),
}


def numpy_field(G: np.ndarray, heads: int, power: int):
    """``f(t, y)`` of the flattened state y = (v (H x h), theta (H x T)): a numpy port of
    ``head_field.logit_field`` (theta' = J(s)^(power-1) R^T v_k, v_k' = R s_k)."""
    h, T = G.shape
    nv = heads * h

    def f(t, y):
        v, theta = y[:nv].reshape(heads, h), y[nv:].reshape(heads, T)
        e = np.exp(theta - theta.max(axis=1, keepdims=True))
        s = e / e.sum(axis=1, keepdims=True)
        R = G - v.T @ s
        dv = s @ R.T
        dtheta = v @ R
        for _ in range(power - 1):
            dtheta = s * (dtheta - np.sum(s * dtheta, axis=1, keepdims=True))
        return np.concatenate([dv.ravel(), dtheta.ravel()])

    return f


def scipy_solve(
    setting: HeadSetting, theta0: np.ndarray, t_max: float, grid: np.ndarray, levels: np.ndarray
):
    """(v (H, h), s (H, T)) at t_max and the first crossing of each level, by RK45."""
    G = setting.target()
    H, h, T = setting.heads, setting.h, setting.window
    f = numpy_field(G, H, METRIC_POWER[setting.metric])

    def loss(y):
        v, theta = y[: H * h].reshape(H, h), y[H * h :].reshape(H, T)
        e = np.exp(theta - theta.max(axis=1, keepdims=True))
        return 0.5 * np.sum((G - v.T @ (e / e.sum(axis=1, keepdims=True))) ** 2)

    events = []
    for level in levels:
        event = lambda t, y, level=level: loss(y) - level  # noqa: E731
        event.direction = -1  # the loss falls through each midpoint
        events.append(event)
    y0 = np.concatenate([np.zeros(H * h), theta0.ravel()])
    sol = solve_ivp(
        f, (0.0, t_max), y0, method="RK45", t_eval=grid, rtol=RTOL, atol=ATOL, events=events
    )
    y = sol.y[:, -1]
    theta = y[H * h :].reshape(H, T)
    e = np.exp(theta - theta.max(axis=1, keepdims=True))
    crossings = [ts[0] if len(ts) else np.nan for ts in sol.t_events]
    return y[: H * h].reshape(H, h), e / e.sum(axis=1, keepdims=True), crossings


def _ours(setting, eps, seeds, sizes, levels):
    """(best run seconds, first compile seconds, recompile seconds in this process, batch)."""
    runs, compiles = [], []
    for _ in range(sizes.repeats):
        batch = solve(setting, eps, seeds, sizes.t_max, n_save=sizes.n_save, levels=levels)
        runs.append(batch.run_seconds)
        compiles.append(batch.compile_seconds)
    return min(runs), compiles[0], compiles[1], batch


def measure(mode: str) -> list[Row]:
    sizes = SIZES[mode]
    setting = HeadSetting()  # paper Fig. 10: H = 3, blocks (1, 1, 1), T = 40, m = 1.7
    eps = setting.window * PAPER_S_NOISE
    levels = plateau_levels(setting)
    mids = np.asarray(midpoints(levels))
    grid = log_grid(sizes.t_max, sizes.n_save)
    what = (
        f"Fig. 10 (H={setting.heads}, T={setting.window}), t={sizes.t_max:g}, "
        f"rtol {RTOL:g} atol {ATOL:g}"
    )
    rows = []
    for n in dict.fromkeys((1, sizes.seeds)):
        seeds = np.arange(n)
        run_s, cold, cached, batch = _ours(setting, [eps] * n, seeds, sizes, levels)
        theta0 = np.asarray(initial_logits(setting, np.full(n, eps), seeds))
        start = time.perf_counter()
        ref = [scipy_solve(setting, theta0[b], sizes.t_max, grid, mids) for b in range(n)]
        scipy_s = time.perf_counter() - start
        deviation = max(
            max(np.max(np.abs(batch.v[b, -1] - v)), np.max(np.abs(batch.s[b, -1] - s)))
            for b, (v, s, _) in enumerate(ref)
        )
        agree = "agree" if deviation <= AGREEMENT else f"DISAGREE (> {AGREEMENT:g})"
        label = "1 trajectory" if n == 1 else f"{n} seeds, one vmapped call vs {n} solve_ivp"
        rows.append(
            Row(
                "head ODE vs scipy RK45",
                f"{label}; {what}",
                run_s,
                "s",
                scipy_s,
                scipy_s / run_s,
                f"ratio scipy/ours; warm run, compile apart ({cold:.2f} s); "
                f"max |d(v,s)(t_end)| {deviation:.1e} ({agree})",
            )
        )
        rows.append(
            Row(
                "head ODE compile",
                f"{label}; first compile, persistent cache empty",
                cold,
                "s",
                note=f"compiled again in this process: {cached:.2f} s",
            )
        )
    return rows
