"""SGD with momentum on the expected gradient: the heavy ball on the population gradient of the
minimal transformer on the Markov chain (spec incremental.md §7; issue 17 item 4, SGD).

SGD's update is linear in the minibatch gradient ``g_t``, so from a given state its expected step
is the step on the mean gradient ``mu(theta)`` exactly. The map replaces every minibatch gradient
by its mean over ``POOL`` fresh teacher sequences drawn anew each step (``adam_moments``' pools) and
applies the run's own optimizer to it (clipping, then ``m <- mu + beta m``,
``theta <- theta - lr m``), from any parameters and momentum buffer. What it leaves out is the
minibatch noise alone; nothing is fitted. ``stages_from_state`` starts it from a run's own state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.incremental.adam_moments import CHUNK, fresh_pool, pool_key
from simulate.incremental.markov_task import teacher_rows
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    markov_data,
    optimizer,
    window_log_probs,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from theory.validation import require


def check_heavy_ball(cfg: MarkovTrainConfig) -> None:
    """What the map is derived for: an update linear in the gradient (SGD with its momentum, or
    plain SGD) on fresh sequences, no dropout."""
    require(
        cfg.optimizer in ("sgd", "gd"),
        "optimizer",
        cfg.optimizer,
        "sgd or gd (linear in the gradient: the expected heavy ball)",
    )
    require(cfg.model == "minimal", "model", cfg.model, "minimal (no dropout noise)")
    require(cfg.attention == "full", "attention", cfg.attention, "full")
    require(cfg.train_size is None, "train_size", cfg.train_size, "None (fresh sequences)")


@eqx.filter_jit
def _steps(
    carry,
    first,
    teacher: tuple[jax.Array, jax.Array],
    val,
    window: int,
    generated: int,
    opt: optax.GradientTransformation,
):
    """``CHUNK`` steps of the map from step ``first`` and the validation loss after each. The
    teacher (its rows and the pools' key) and the validation set are arguments, so every seed and
    teacher of one shape shares the program."""

    def mean_gradient(model, t):
        def chunk(seqs):
            return jax.grad(lambda m: _nll(window_log_probs(m, window, seqs), seqs[:, window:]))(
                model
            )

        # equal chunks: the mean of the chunks' mean gradients is the pool's
        pool = fresh_pool(*teacher, t, generated)
        return jax.tree_util.tree_map(lambda g: g.mean(0), jax.lax.map(chunk, pool))

    def step(carry, t):
        model, state = carry
        with jax.numpy_dtype_promotion("standard"):  # as the trainer's step (simulate.train)
            updates, state = opt.update(mean_gradient(model, t), state, model)
        model = cast(MinimalTransformer, optax.apply_updates(model, updates))
        return (model, state), _nll(window_log_probs(model, window, val), val[:, window:])

    return jax.lax.scan(step, carry, first + jnp.arange(CHUNK, dtype=first.dtype))


def heavy_ball_map(
    cfg: MarkovTrainConfig, model: MinimalTransformer, state: Any, start: int
) -> Iterator[tuple[int, np.ndarray]]:
    """The expected SGD of ``cfg`` from ``model`` and its optimizer ``state`` after ``start``
    steps: yields ``(step, validation losses of the CHUNK steps up to it)`` every ``CHUNK``
    steps, one call of one compiled program each, without end. ``cfg`` is checked at the call."""
    check_heavy_ball(cfg)
    return _map(cfg, model, state, start)


def _map(
    cfg: MarkovTrainConfig, model: MinimalTransformer, state: Any, start: int
) -> Iterator[tuple[int, np.ndarray]]:
    data = markov_data(cfg)
    teacher = (teacher_rows(data.task, data.A), pool_key(cfg))
    fixed = (teacher, data.validation, data.task.window, data.task.generated, optimizer(cfg))
    carry, step = (model, state), start
    while True:
        # the update that makes step t draws the pool of t, as AdamW's count: t = step + 1
        carry, losses = _steps(carry, jnp.asarray(step + 1, jnp.int32), *fixed)
        step += CHUNK
        yield step, np.asarray(losses)
