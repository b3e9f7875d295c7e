"""Stage 1 of the minimal transformer under AdamW, from the optimizer's expected moments (spec
incremental.md §7; issue 17 item 4, stage 1).

AdamW moves each entry by ``lr m_hat / (sqrt(v_hat) + eps)``, its moments averaging the minibatch
gradient ``g_t``. For B fresh sequences a step, ``g_t`` has mean ``mu(theta)``, the population
gradient, and variance ``sigma^2(theta) / B``, ``sigma^2`` the variance of one sequence's gradient.
Replacing ``g_t`` by ``mu`` in the first moment and ``g_t^2`` by its expectation
``mu^2 + sigma^2 / B`` in the second gives a map of the parameters and both moments that fits
nothing. Its step per entry is about ``lr |mu| / sqrt(mu^2 + sigma^2 / B)``. In stage 1 the noise
term matters little (the quick setting's predicted start moves from step 17.7 to 17.4 without
it); what sets the stage is that every entry moves by about ``lr`` a step while its mean gradient
keeps its sign and turns with the first moment when the sign flips (a fixed step along the initial
signs overshoots at once: along it the quick setting's validation loss never falls below 2.7
nats, against a stage-1 midpoint of 1.95), not the reduced flow's time.

Stage 1 starts where the predicted validation loss crosses the midpoint of ``STAGE_RULE``, as the
run's does. ``mu`` and ``sigma^2`` are those of ``POOL`` fresh teacher sequences drawn anew at every
step (``fresh_pool``), so the first moment keeps 1/8 of the gradient variance of a 256-sequence
minibatch; a fixed pool would keep none, but the map learns it over hundreds of steps as a training
set. Clipping is left out (at the quick setting the gradient norm stays below the clip:
``--clip 1e9`` leaves the run bitwise the same). The map starts from any parameters and moments
(``expected_moment_map``): ``adam_later_stages`` runs it from a run's own state at a later stage
boundary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.incremental.markov_task import sample_from_rows, teacher_rows
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    build_model,
    markov_data,
    window_log_probs,
    yardstick_losses,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from simulate.incremental.training_stages import stage1_midpoint
from simulate.measure.stages import first_crossing
from simulate.store import read_summary
from simulate.train import seed_streams
from theory.validation import require

POOL = 2048
"""fresh teacher sequences the moments are taken over."""
POOL_CHUNK = 256
"""sequences whose gradients are held at once."""
POOL_FOLD = 4
"""``fold_in`` of the teacher key that draws the pools (1-3 draw the run's own sets)."""
HORIZON = 200
"""most steps of the expected-moment map (stage 1 of the quick runs comes at step 18)."""
CHUNK = 10
"""steps of the map per call of its compiled program."""
ADAM_EPS = 1e-8
"""optax's ``adamw`` default, which training uses."""
RULE = (
    "stage 1, expected moments: AdamW with the minibatch gradient's mean (the gradient over "
    f"{POOL} fresh sequences) in its first moment and its expected square (mean^2 + per-sequence "
    "variance / batch) in its second, from the run's initial parameters; stage 1 starts where "
    "its validation loss falls below the run's stage-1 midpoint"
)


class AdamW(NamedTuple):
    """The AdamW coefficients the expected-moment map reads (``MarkovTrainConfig``'s)."""

    beta1: float
    beta2: float
    learning_rate: float
    weight_decay: float

    @classmethod
    def of(cls, cfg: MarkovTrainConfig) -> AdamW:
        return cls(cfg.beta1, cfg.beta2, cfg.learning_rate, cfg.weight_decay)


def expected_moment_step(params, m, v, t, mu, var, adamw: AdamW):
    """One AdamW step on expected moments: ``mu`` the mean gradient, ``var`` the variance of the
    minibatch gradient; ``t`` the step number (from 1). With ``var = 0`` this is optax's
    ``adamw`` update on the gradient ``mu`` (a test)."""
    b1, b2, lr, wd = adamw
    m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, mu)
    v = jax.tree_util.tree_map(lambda a, g, s: b2 * a + (1 - b2) * (g * g + s), v, mu, var)
    params = jax.tree_util.tree_map(
        lambda x, a, c: (
            x - lr * (a / (1 - b1**t) / (jnp.sqrt(c / (1 - b2**t)) + ADAM_EPS) + wd * x)
        ),
        params,
        m,
        v,
    )
    return params, m, v


def _sum(x):
    return x.sum(0)


def _sum_of_squares(x):
    return (x * x).sum(0)


def _val_loss(params, static, window: int, val):
    return _nll(window_log_probs(eqx.combine(params, static), window, val), val[:, window:])


@eqx.filter_jit
def _first_loss(params, static, window: int, val):
    return _val_loss(params, static, window, val)


@eqx.filter_jit
def _steps(
    carry,
    first,
    teacher: tuple[jax.Array, jax.Array],
    val,
    static,
    window: int,
    generated: int,
    batch: int,
    adamw: AdamW,
):
    """``CHUNK`` steps of the map from step ``first``, and the validation loss after each. The
    teacher (its ``teacher_rows`` and the pools' key) and the validation set are arguments, not
    constants, so every grid point, seed and teacher of one shape shares the program."""

    def sequence_loss(p, seq):
        return _nll(window_log_probs(eqx.combine(p, static), window, seq[None]), seq[None, window:])

    def moments(p, t):
        def chunk(seqs):
            g = jax.vmap(jax.grad(sequence_loss), in_axes=(None, 0))(p, seqs)
            return tuple(jax.tree_util.tree_map(f, g) for f in (_sum, _sum_of_squares))

        total, squares = jax.lax.map(chunk, fresh_pool(*teacher, t, generated))
        mu = jax.tree_util.tree_map(lambda x: _sum(x) / POOL, total)
        # a variance, kept from going below 0 by round-off (it sits under a square root)
        var = jax.tree_util.tree_map(
            lambda a, b: jnp.maximum(_sum(b) / POOL - a * a, 0.0) / batch, mu, squares
        )
        return mu, var

    def step(carry, t):
        p, m, v = carry
        mu, var = moments(p, t)
        p, m, v = expected_moment_step(p, m, v, t, mu, var, adamw)
        return (p, m, v), _val_loss(p, static, window, val)

    return jax.lax.scan(step, carry, first + jnp.arange(CHUNK).astype(first.dtype))


def expected_moment_map(
    cfg: MarkovTrainConfig,
    model: MinimalTransformer,
    moments: tuple[Any, Any] | None = None,
    start: int = 0,
) -> Iterator[tuple[int, MinimalTransformer, np.ndarray]]:
    """The expected-moment AdamW of ``cfg`` from ``model`` after ``start`` steps, with AdamW's
    first and second moments ``moments`` (trees of the model's arrays; None: zero, a fresh
    optimizer): yields ``(step, model, validation losses of the CHUNK steps up to it)`` every
    ``CHUNK`` steps, one call of one compiled program each, without end. ``cfg`` is checked at
    the call, before the first step."""
    check_expected_moments(cfg)
    return _map(cfg, model, moments, start)


def pool_key(cfg: MarkovTrainConfig) -> jax.Array:
    """The key the map's pools are drawn from (``POOL_FOLD``), folded with each step's count."""
    return jax.random.fold_in(jax.random.PRNGKey(cfg.teacher_seed), POOL_FOLD)


def fresh_pool(rows: jax.Array, key: jax.Array, t: jax.Array, generated: int) -> jax.Array:
    """The ``POOL`` fresh teacher sequences of the update that makes step ``t`` (from 1), drawn
    from the teacher's ``markov_task.teacher_rows``, in chunks of ``POOL_CHUNK``. A new pool
    each step: over hundreds of steps a fixed pool is learned by the map as a training set is
    (at d = 20 the map's loss on a fixed pool fell to 0.27 nats while fresh sequences stayed at
    0.40), so its gradient is no longer the population's."""
    seqs = sample_from_rows(rows, jax.random.fold_in(key, t.astype(jnp.int32)), POOL, generated)
    return seqs.reshape(POOL // POOL_CHUNK, POOL_CHUNK, -1)


def adamw_moments(state: Any) -> tuple[Any, Any]:
    """AdamW's first and second moments in the optimizer state of a run (``optimizer``'s chain):
    trees of the model's arrays, its step count a leaf beside them."""
    mu, nu = (
        eqx.partition(optax.tree_utils.tree_get(state, name), eqx.is_inexact_array)[0]
        for name in ("mu", "nu")
    )
    return mu, nu


def check_expected_moments(cfg: MarkovTrainConfig) -> None:
    """What the expected-moment map is derived for: AdamW on fresh sequences, no dropout."""
    require(cfg.optimizer == "adamw", "optimizer", cfg.optimizer, "adamw (expected moments)")
    require(cfg.model == "minimal", "model", cfg.model, "minimal (no dropout noise)")
    require(cfg.attention == "full", "attention", cfg.attention, "full")
    require(cfg.train_size is None, "train_size", cfg.train_size, "None (fresh sequences)")


def _map(
    cfg: MarkovTrainConfig,
    model: MinimalTransformer,
    moments: tuple[Any, Any] | None,
    start: int,
) -> Iterator[tuple[int, MinimalTransformer, np.ndarray]]:
    data = markov_data(cfg)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    fixed = (
        (teacher_rows(data.task, data.A), pool_key(cfg)),
        data.validation,
        static,
        data.task.window,
        data.task.generated,
        cfg.minibatch,
        AdamW.of(cfg),
    )
    if moments is None:
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        moments = (zeros, zeros)
    carry, step = (params, *moments), start
    while True:
        # AdamW's step count t starts at 1: the step after ``step`` is t = step + 1
        carry, losses = _steps(carry, np.asarray(step + 1, cfg.dtype), *fixed)
        step += CHUNK
        yield step, eqx.combine(carry[0], static), np.asarray(losses)


def expected_adamw_losses(cfg: MarkovTrainConfig, below: float) -> np.ndarray:
    """Validation loss of the expected-moment AdamW from seed ``cfg.seed``'s initial parameters
    at steps ``0, 1, ...``, until it falls below ``below`` (at most ``HORIZON`` steps)."""
    model = cast(MinimalTransformer, build_model(cfg, seed_streams([cfg.seed])["init"][0]))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    losses = [float(_first_loss(params, static, cfg.task().window, markov_data(cfg).validation))]
    chunks = expected_moment_map(cfg, model)
    while losses[-1] >= below and len(losses) <= HORIZON:
        losses += next(chunks)[2].tolist()
    return np.asarray(losses)


def stage_one_start(losses: np.ndarray, midpoint: float) -> float:
    """The step at which ``losses`` (steps 0, 1, ...) first fall below ``midpoint`` (nan if not
    within them), interpolated as the run's own (``simulate.measure.stages.first_crossing``)."""
    return first_crossing(np.arange(len(losses), dtype=float), losses, midpoint)


def stage_one_midpoint(cfg: MarkovTrainConfig, baselines: tuple[Path, ...]) -> float:
    """``STAGE_RULE``'s stage-1 midpoint: between ln d and the final validation loss of the
    learned c_1-gram baseline (the first of ``markov_training.baseline_jobs``'s directories)."""
    first = read_summary(baselines[0])["final_val_loss"][0]
    return 0.5 * (math.log(cfg.vocab) + float(first))


def predicted_stage_one(cfg: MarkovTrainConfig, baselines: tuple[Path, ...]) -> dict:
    """The expected-moment loss curve of ``cfg`` up to its stage-1 start, and that start."""
    midpoint = stage_one_midpoint(cfg, baselines)
    losses = expected_adamw_losses(cfg, midpoint)
    return {
        "rule": RULE,
        "midpoint": midpoint,
        "losses": losses.tolist(),
        "start": stage_one_start(losses, midpoint),
    }


TEACHER_RULE = (
    "stage 1, expected moments, by the truncated teacher: the expected-moment AdamW of each seed "
    "from its own initial parameters; stage 1 starts where its validation loss falls below "
    "(ln d + L(A*_1)) / 2, the level the runs' stage 1 is measured by (STAGE1_RULE)"
)


def stage_one_by_teacher(cfg: MarkovTrainConfig) -> list[float]:
    """``TEACHER_RULE``'s stage-1 step of each of ``cfg``'s seeds (nan where the map does not
    reach the level within ``HORIZON`` steps): no trained baseline is needed."""
    data = markov_data(cfg)
    ln_d, a1_loss = yardstick_losses(data.task, data.A, data.validation)[:2]
    level = stage1_midpoint(ln_d, a1_loss)
    return [
        stage_one_start(expected_adamw_losses(replace(cfg, seed=s), level), level)
        for s in cfg.seed_ids
    ]
