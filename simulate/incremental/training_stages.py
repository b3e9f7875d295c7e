"""Stages measured on Markov-chain training runs (spec incremental.md §5.8, §6, §7): the stage-1
step, the stage boundaries of the complexity ladder, the checks of the ladder, the symmetric stall,
early stopping, the rise of the KL to A*_1, stage-duration ratios and the one time factor between
ODE time and steps. Each rule's constant stands beside the function that applies it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from simulate.incremental.markov_training import LADDER_RULE, SPLIT_RULE, ladder_steps
from simulate.measure.stages import first_crossing
from simulate.store import load, read_summary

STAGE1_RULE = (
    "stage 1: first step at which the validation loss falls below (ln d + L(A*_1)) / 2, "
    "L(A*_1) the truncated teacher's validation loss (log-linear interpolation between "
    "logged steps)"
)
STAGE_RULE = f"{STAGE1_RULE}; stages k >= 2: the ladder step k ({LADDER_RULE})"
LADDER_CHECK_RULE = (
    "stage k = logged steps in [t_k, t_{k+1}) (t_1 the stage-1 step, t_2, t_3 the ladder steps, "
    "nan = never); 'smallest during stage k': A*_{1:k} is the closest truncated "
    "teacher in KL at every logged step of a non-empty stage k; 'KL to A*_1 rises after its "
    "minimum': its minimum lies in stage 1 and its final value exceeds the minimum by more than "
    "10%"
)
RISE = 0.1
"""relative rise of KL(A*_1 || model) above its minimum that counts as rising."""
STALL_RULE = (
    "symmetric-stall level: validation loss of the smallest q > 0 at the last logged step "
    f"before its heads split ({SPLIT_RULE})"
)
KL_RISE_RULE = (
    "KL to A*_1 rises after stage 1: its minimum over the logged steps is reached "
    "before the last step and the final value exceeds the minimum by more than 10%"
)
CLOSEST_RULE = (
    "class at early stopping: the learned c_k-gram baseline with the smallest "
    "KL(p_baseline || p_model) on validation at the early-stopping step; stage index "
    "= k (number of lag blocks of that class)"
)
CALIBRATION_RULE = (
    "one factor c (steps per unit ODE time) = exp(mean of ln(measured / ODE time)) "
    "over the stages and seeds of the grid point nearest (q = 1e-9, m = 1.7) (the m "
    "nearest 1.7, then the q nearest 1e-9 in ln q); used unchanged elsewhere"
)
TIME_MAP_RULE = (
    "derived time map: steps per unit ODE time of each grid point and seed = the heads' split "
    "step to first order in q over the reduced system's split time from the same initial "
    "logits; predicted boundary = ODE time x that map; no constant fitted to a run"
)
DEFAULT_POINT = (1e-9, 1.7)
"""(q, m) of the paper's default run, where the old time scale is calibrated."""


def stage1_midpoint(ln_d: float, a1_loss: float) -> float:
    """``STAGE1_RULE``'s level: halfway between uniform prediction and the truncated teacher."""
    return 0.5 * (ln_d + a1_loss)


def stage1_step(steps: ArrayLike, val_loss: ArrayLike, ln_d: float, a1_loss: float) -> float:
    """``STAGE1_RULE`` (nan if never reached)."""
    return first_crossing(steps, val_loss, stage1_midpoint(ln_d, a1_loss))


def stage_boundaries(
    steps: ArrayLike, val_loss: ArrayLike, kl: np.ndarray, ln_d: float, a1_loss: float
) -> np.ndarray:
    """``STAGE_RULE`` for one run: [t_1, t_2, ..., t_h] in steps (nan where not reached);
    ``val_loss`` (step,), ``kl`` (step, h) the KL to A*_{1:k}."""
    return np.array([stage1_step(steps, val_loss, ln_d, a1_loss), *ladder_steps(steps, kl)])


def stored_stage_boundaries(path: Path) -> np.ndarray:
    """``STAGE_RULE``'s boundaries t_1..t_h of every seed of the Markov run stored at ``path``
    (seed x stage)."""
    ds, _ = load(path)
    yard = read_summary(path)["yardstick_losses"]
    return np.array(
        [
            stage_boundaries(
                ds["step"].values,
                ds["val_loss"].values[s],
                ds["kl_yardstick"].values[s],
                yard["uniform"],
                yard["A*_1:1"],
            )
            for s in range(ds.sizes["seed"])
        ]
    )


def stage_masks(steps: ArrayLike, bounds: ArrayLike) -> list[np.ndarray]:
    """Boolean masks of stages 1..h over the logged steps: stage k is [t_k, t_{k+1}) with
    ``bounds`` = [t_1, ..., t_h]; a nan boundary is never reached (its stage is empty and the
    stage before it runs on)."""
    steps = np.asarray(steps, float)
    bounds = [float(t) for t in np.asarray(bounds, float)]
    edges = [np.inf if not np.isfinite(t) else t for t in bounds] + [np.inf]
    masks = []
    for k in range(len(bounds)):
        later = min(edges[k + 1 :])
        masks.append((steps >= edges[k]) & (steps < later))
    return masks


def ladder_check(steps: ArrayLike, kl: ArrayLike, bounds: ArrayLike) -> dict:
    """``LADDER_CHECK_RULE`` on one run: ``kl`` (step, h) to A*_{1:k}, ``bounds`` [t_1, ..., t_h]
    (stage-1 step, then the ladder steps)."""
    steps, kl = np.asarray(steps, float), np.asarray(kl, float)
    closest = np.argmin(kl, axis=-1) + 1
    masks = stage_masks(steps, bounds)
    out = {}
    for k, mask in enumerate(masks[:2], start=1):
        frac = float(np.mean(closest[mask] == k)) if mask.any() else float("nan")
        out[f"stage{k}_logged_steps"] = int(mask.sum())
        out[f"stage{k}_fraction_closest_{k}"] = frac
        out[f"stage{k}_closest_is_A*_1:{k}"] = bool(mask.any() and frac == 1.0)
    i_min = int(np.argmin(kl[:, 0]))
    kl_min, kl_final = float(kl[i_min, 0]), float(kl[-1, 0])
    in_stage1 = bool(masks[0][i_min])
    out.update(
        {
            "kl1_min_step": float(steps[i_min]),
            "kl1_min": kl_min,
            "kl1_final": kl_final,
            "kl1_min_in_stage1": in_stage1,
            "kl1_rises_after_min": in_stage1 and kl_final > (1 + RISE) * kl_min,
        }
    )
    return out


def kl_rise(steps: np.ndarray, kl_first: np.ndarray) -> dict:
    """Per ``KL_RISE_RULE``."""
    low = int(np.argmin(kl_first))
    rises = bool(low < len(steps) - 1 and kl_first[-1] > 1.1 * kl_first[low])
    return {
        "kl_A1_min": float(kl_first[low]),
        "kl_A1_min_step": float(steps[low]),
        "kl_A1_final": float(kl_first[-1]),
        "kl_A1_rises_after_stage1": rises,
    }


def stall_level(steps: ArrayLike, val_loss: np.ndarray, split: float) -> float:
    """``STALL_RULE``: the loss at the last logged step before ``split`` (nan if no split)."""
    before = np.nonzero(np.asarray(steps) < split)[0]
    return float(val_loss[before[-1]]) if np.isfinite(split) and before.size else float("nan")


def best_so_far(excess: np.ndarray) -> np.ndarray:
    """Running minimum along the last axis (nan rows, e.g. a diverged step, do not count)."""
    return np.fmin.accumulate(excess, axis=-1)


def early_stopping(
    steps: np.ndarray, val_loss: np.ndarray, kl_baseline: np.ndarray, contexts: np.ndarray
) -> dict:
    """Per ``markov_training.EARLY_STOPPING_RULE`` and ``CLOSEST_RULE`` for one run: (step,),
    (step, baseline)."""
    best = int(np.nanargmin(val_loss))
    closest = int(np.argmin(kl_baseline[best]))
    return {
        "early_stopping_step": float(steps[best]),
        "best_val_loss": float(val_loss[best]),
        "closest_context_at_best": int(contexts[closest]),
        "stage_at_best": closest + 1,
        "kl_baselines_at_best": {int(c): float(v) for c, v in zip(contexts, kl_baseline[best])},
    }


def duration_ratio(starts: ArrayLike, k: int) -> float:
    """(t_k - t_{k-1}) / t_1 for 0-based stage index k >= 1; nan for stage 1."""
    if k == 0:
        return float("nan")
    starts = np.asarray(starts, float)
    return float((starts[k] - starts[k - 1]) / starts[0])


def calibration_point(qs: ArrayLike, ms: ArrayLike) -> tuple[int, int]:
    """Indices (q, m) of the grid point nearest ``DEFAULT_POINT`` per ``CALIBRATION_RULE``."""
    q0, m0 = DEFAULT_POINT
    i_m = int(np.argmin(np.abs(np.asarray(ms) - m0)))
    i_q = int(np.argmin(np.abs(np.log(np.asarray(qs)) - math.log(q0))))
    return i_q, i_m


def time_factor(measured: ArrayLike, ode_time: ArrayLike) -> float:
    """Steps per unit ODE time: exp(mean ln(measured / ode_time)) over entries where both are
    finite and positive (nan if none)."""
    measured, ode_time = np.asarray(measured, float), np.asarray(ode_time, float)
    ok = np.isfinite(measured) & np.isfinite(ode_time) & (measured > 0) & (ode_time > 0)
    if not ok.any():
        return float("nan")
    return float(np.exp(np.mean(np.log(measured[ok] / ode_time[ok]))))


def nearest_steps(steps: ArrayLike, wanted: ArrayLike) -> list[int]:
    """The logged step nearest each wanted step."""
    steps = np.asarray(steps)
    return [int(steps[np.argmin(np.abs(steps - w))]) for w in np.asarray(wanted)]


def nearest_rows(logged: np.ndarray, wanted: ArrayLike) -> list[int]:
    """Indices of the logged steps nearest to each wanted step, without repeats, in order."""
    idx = [int(np.argmin(np.abs(logged - s))) for s in np.asarray(wanted)]
    return sorted(set(idx))
