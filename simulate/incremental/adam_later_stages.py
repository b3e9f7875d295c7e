"""Stage k >= 3 of the minimal transformer under AdamW, sequentially: AdamW's expected-moment map
(``simulate.incremental.adam_moments``) started from the run's own state at its measured
t_{k-1} (issue 17 items 1 and 4; spec incremental.md §5.8 ladder, §7).

By t_2 of the quick runs every two heads are apart or about to be (``APART_RULE``), so what is
left of stage 3 is no longer a symmetry broken by an O(q) difference (the first-order split and
the reduced system's time map do not reach it: README, "Stage boundaries through a derived time
map"). The map replaces the minibatch gradient in AdamW's first moment by its mean over a pool
of fresh teacher sequences drawn anew each step and its square in the second moment by the
expected square, so it fits nothing; here it starts from the parameters and both AdamW moments
the run has at t_{k-1} (the run replayed on its own minibatches,
``plateau_splitting.states_at``), which is what a user who monitors a run has at that step.
Stage k is then the ladder step k (``markov_training.LADDER_RULE``) of the map's KL to the
truncated teachers on the run's validation set, read every ``CHUNK`` steps.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import cast

import equinox as eqx
import numpy as np

from simulate.incremental.adam_moments import (
    CHUNK,
    POOL,
    adamw_moments,
    check_expected_moments,
    expected_moment_map,
)
from simulate.incremental.markov_training import (
    LADDER_RULE,
    MarkovTrainConfig,
    _kl,
    _references,
    ladder_steps,
    markov_data,
    window_log_probs,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from simulate.incremental.plateau_splitting import states_at
from simulate.incremental.training_stages import stored_stage_boundaries
from theory.validation import require

SEQUENTIAL_RULE = (
    "stage k >= 3 from the run's state at its measured t_{k-1}: AdamW's expected-moment map "
    f"(mean gradient over {POOL} fresh sequences in the first moment, its expected square in the "
    "second) started from the run's parameters and AdamW moments at that step; stage k at the "
    f"ladder step k of the map's KL to the truncated teachers, read every {CHUNK} steps "
    f"({LADDER_RULE})"
)
HOLD = 3
"""reads of the map in a row in class k or above after which it stops (the ladder step is where
the class is entered for good)."""


@eqx.filter_jit
def _ladder_kl(model: MinimalTransformer, window: int, validation, reference):
    """KL(A*_{1:j} || model) on the validation sequences, j = 1..h."""
    return _kl(reference, window_log_probs(model, window, validation))


def sequential_stage(
    cfg: MarkovTrainConfig, k: int, start: int, horizon: int | None = None
) -> tuple[float, np.ndarray, np.ndarray]:
    """``SEQUENTIAL_RULE``'s stage k of ``cfg``'s run of seed ``cfg.seed`` from its state at step
    ``start`` (its measured t_{k-1}, a logged step), with at most ``horizon`` steps of the map
    (default ``cfg.steps``): (t_k, nan if not reached; the map's steps; its KL, step x h)."""
    check_expected_moments(cfg)
    h = cfg.task().h
    require(3 <= k <= h, "k", k, f"a stage in [3, {h}] (stages 1 and 2 have their own rules)")
    require(
        0 < start <= cfg.steps, "start", start, f"a step of the run in (0, {cfg.steps}] (t_k-1)"
    )
    horizon = cfg.steps if horizon is None else horizon
    require(horizon >= CHUNK, "horizon", horizon, f"at least {CHUNK} steps of the map")
    ((model, state),) = list(states_at(cfg, [start]))
    data = markov_data(cfg)
    window = data.task.window
    reference = _references(data.task, data.A, data.validation).astype(cfg.dtype)
    model = cast(MinimalTransformer, model)
    steps, kl = [start], [np.asarray(_ladder_kl(model, window, data.validation, reference))]
    for step, now, _ in expected_moment_map(cfg, model, adamw_moments(state), start):
        steps.append(step)
        kl.append(np.asarray(_ladder_kl(now, window, data.validation, reference)))
        if _held(kl, k) or step - start >= horizon:
            break
    steps_, kl_ = np.array(steps, float), np.array(kl)
    # entered only in the last reads before the horizon: not for good
    t_k = ladder_steps(steps_, kl_)[k - 2] if _held(kl, k) else math.nan
    return t_k, steps_, kl_


def _held(kl: list[np.ndarray], k: int) -> bool:
    """Whether the last ``HOLD`` reads of the ladder are all in class k or above."""
    return len(kl) >= HOLD and all(int(np.argmin(x)) + 1 >= k for x in kl[-HOLD:])


def sequential_stages(cfg: MarkovTrainConfig, path: Path) -> list[list[float]]:
    """``SEQUENTIAL_RULE``'s t_3..t_h of each seed of ``cfg``'s run stored at ``path``, each
    from the run's state at its measured t_{k-1} (nan where that was not reached, or was step
    0)."""
    bounds = stored_stage_boundaries(path)
    h = bounds.shape[-1]
    return [
        [
            sequential_stage(replace(cfg, seed=seed, seeds=1), k, int(bounds[s, k - 2]))[0]
            # a ladder already in class k - 1 at step 0 has no state to start from
            if np.isfinite(bounds[s, k - 2]) and bounds[s, k - 2] > 0
            else math.nan
            for k in range(3, h + 1)
        ]
        for s, seed in enumerate(cfg.seed_ids)
    ]
