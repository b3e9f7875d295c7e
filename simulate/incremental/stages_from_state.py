"""Stages k >= 2 of the minimal transformer by the loss-midpoint rule, sequentially: the optimizer's
expected update started from the run's own state at its measured t_{k-1} (issue 17 items 1 and 4;
spec incremental.md §5.8 class levels, §7).

What a user who monitors a run has at t_{k-1} is its parameters and its optimizer's state. From
there the map runs the optimizer on expected gradients, so it fits nothing: AdamW on its expected
moments (``adam_moments``: the mean gradient in the first moment, its expected square in the
second), SGD with momentum on the mean gradient (``heavy_ball``, exact in expectation since SGD is
linear in the gradient). Both average over ``POOL`` fresh teacher sequences drawn anew each step
(``adam_moments.fresh_pool``). The run's state at t_{k-1} (rounded to a step) is the run replayed on
its own minibatches (``plateau_splitting.states_at``). Stage k starts where the map's validation
loss falls below the midpoint of the run's class-(k-1) and class-k levels: the rule, and the levels
(the learned c-gram baselines), by which the run's own starts are measured
(``markov_training.STAGE_RULE``; ``compare incremental``'s, usable at d = 20 where the truncated
teachers' ladder of ``adam_later_stages`` is not).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import optax

from simulate.incremental.adam_moments import (
    POOL,
    adamw_moments,
    check_expected_moments,
    expected_moment_map,
)
from simulate.incremental.heavy_ball import check_heavy_ball, heavy_ball_map
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    build_model,
    markov_data,
    optimizer,
    window_log_probs,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from simulate.incremental.plateau_splitting import states_at
from simulate.measure.stages import first_crossing, midpoints
from simulate.store import read_summary
from simulate.train import seed_streams
from theory.validation import require

RULE = (
    "stage k >= 2 from the run's state at its measured t_{k-1} (rounded to a step): the "
    f"optimizer on expected gradients over {POOL} fresh sequences (AdamW: the mean gradient in "
    "its first moment, its expected square in the second; SGD with momentum: the mean gradient, "
    "its expected update), started from the run's parameters and optimizer state at that step; "
    "stage k where the map's validation loss falls below the midpoint of the run's class-(k-1) "
    "and class-k levels"
)


def check_from_state(cfg: MarkovTrainConfig) -> None:
    """What the optimizer's expected-update map is derived for: fresh sequences, no dropout."""
    (check_expected_moments if cfg.optimizer == "adamw" else check_heavy_ball)(cfg)


def expected_losses(
    cfg: MarkovTrainConfig, model: MinimalTransformer, state: Any, start: int
) -> Iterator[tuple[int, np.ndarray]]:
    """``cfg``'s optimizer on expected gradients from ``model`` and the run's optimizer ``state``
    after ``start`` steps: ``(step, validation losses of the steps up to it)``, without end."""
    if cfg.optimizer == "adamw":
        chunks = expected_moment_map(cfg, model, adamw_moments(state), start)
        return ((step, losses) for step, _, losses in chunks)
    return heavy_ball_map(cfg, model, state, start)


START_RULE = (
    "every stage a priori, from the run's initial parameters and a fresh optimizer state (nothing "
    "read from the run but its class levels): the same map, stage k where its validation loss "
    "falls below the midpoint of the class-(k-1) and class-k levels"
)


def stages_from_start(
    cfg: MarkovTrainConfig, levels: list[float], horizon: int | None = None
) -> tuple[list[float], np.ndarray, np.ndarray]:
    """``START_RULE``'s t_1..t_h of seed ``cfg.seed`` with class ``levels``, at most ``horizon``
    steps of the map (default ``cfg.steps``): (the starts, nan where not reached; the map's steps;
    its validation loss at them)."""
    check_from_state(cfg)
    horizon = cfg.steps if horizon is None else horizon
    require(horizon >= 1, "horizon", horizon, "at least one step of the map")
    model = cast(MinimalTransformer, build_model(cfg, seed_streams([cfg.seed])["init"][0]))
    threshold = float(midpoints(levels)[-1])
    val, w = markov_data(cfg).validation, cfg.task().window
    losses = [float(_nll(window_log_probs(model, w, val), val[:, w:]))]
    state = optimizer(cfg).init(cast(optax.Params, model))
    for step, chunk in expected_losses(cfg, model, state, 0):
        losses += chunk.tolist()
        if chunk.min() < threshold or step >= horizon:
            break
    steps = np.arange(len(losses), dtype=float)
    return [first_crossing(steps, losses, c) for c in midpoints(levels)], steps, np.asarray(losses)


def stage_from_state(
    cfg: MarkovTrainConfig, levels: list[float], k: int, start: float, horizon: int | None = None
) -> tuple[float, np.ndarray, np.ndarray]:
    """``RULE``'s stage k of ``cfg``'s run of seed ``cfg.seed`` from its state at its measured
    t_{k-1} = ``start``, with the run's class ``levels`` (ln d, ..., the Bayes loss) and at most
    ``horizon`` steps of the map (default ``cfg.steps``): (t_k, nan if not reached; the map's
    steps; its validation loss at them)."""
    check_from_state(cfg)
    h = len(levels) - 1
    require(2 <= k <= h, "k", k, f"a stage in [2, {h}] (stage 1 starts from the initial state)")
    first = round(start) if math.isfinite(start) else -1
    require(
        0 < first <= cfg.steps, "start", start, f"a step of the run in (0, {cfg.steps}] (t_k-1)"
    )
    horizon = cfg.steps if horizon is None else horizon
    require(horizon >= 1, "horizon", horizon, "at least one step of the map")
    threshold = float(midpoints(levels)[k - 1])
    ((model, state),) = list(states_at(cfg, [first]))
    model = cast(MinimalTransformer, model)
    val, w = markov_data(cfg).validation, cfg.task().window
    losses = [float(_nll(window_log_probs(model, w, val), val[:, w:]))]
    for step, chunk in expected_losses(cfg, model, state, first):
        losses += chunk.tolist()
        if chunk.min() < threshold or step - first >= horizon:
            break
    steps = first + np.arange(len(losses), dtype=float)
    return first_crossing(steps, losses, threshold), steps, np.asarray(losses)


def stages_from_state(
    cfg: MarkovTrainConfig, path: Path
) -> list[list[tuple[float, np.ndarray, np.ndarray]]]:
    """``stage_from_state`` for k = 2..h and each seed of ``cfg``'s run stored at ``path`` (a run
    with its learned baselines, so that its summary has class levels and stage starts), each from
    the run's state at its measured t_{k-1}: (t_k, the map's steps, its losses), (nan, empty,
    empty) where t_{k-1} was not reached."""
    summary = read_summary(path)
    require(
        "class_levels" in summary, "path", str(path), "a run with its c-gram baselines (levels)"
    )
    levels = [float(x) for x in summary["class_levels"]]
    starts = np.asarray(summary["stage_start_per_seed"], float)
    none = (math.nan, np.zeros(0), np.zeros(0))
    return [
        [
            stage_from_state(replace(cfg, seed=seed, seeds=1), levels, k, starts[s, k - 2])
            if np.isfinite(starts[s, k - 2])
            else none
            for k in range(2, len(levels))
        ]
        for s, seed in enumerate(cfg.seed_ids)
    ]
