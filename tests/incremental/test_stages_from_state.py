"""Stages k >= 2 of the minimal transformer from the run's own state by the loss-midpoint rule
(simulate.incremental.stages_from_state): under SGD with momentum the map is the run's optimizer
on the pool's mean gradient (simulate.incremental.heavy_ball); under either optimizer it starts
where the run is, and its stage is the midpoint crossing of its own curve."""

import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulate.incremental import markov_training
from simulate.incremental.adam_moments import (
    CHUNK,
    POOL,
    POOL_CHUNK,
    expected_adamw_losses,
    fresh_pool,
    pool_key,
    stage_one_start,
)
from simulate.incremental.heavy_ball import heavy_ball_map
from simulate.incremental.markov_task import teacher_rows
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    markov_data,
    optimizer,
    window_log_probs,
    yardstick_losses,
)
from simulate.incremental.plateau_splitting import states_at
from simulate.incremental.stages_from_state import stage_from_state, stages_from_start
from simulate.measure.stages import first_crossing, midpoints
from simulate.runner import RunOutput
from simulate.store import load
from tests.incremental.small_chain import SINGLETON_LAGS
from theory.validation import ConfigError

SMALL = replace(SINGLETON_LAGS, optimizer="sgd", lr=1.0)
"""the small chain under SGD with momentum 0.9."""


def _levels(cfg: MarkovTrainConfig) -> list[float]:
    """Class levels from the truncated teachers (ln d, A*_1, A*_2, Bayes): the test's yardstick
    in place of trained baselines."""
    data = markov_data(cfg)
    return [float(x) for x in yardstick_losses(data.task, data.A, data.validation)]


def test_refuses_stages_and_steps_it_has_no_rule_for():
    levels = [3.0, 2.0, 1.5, 1.0]
    for k in (1, 4):
        with pytest.raises(ConfigError, match="k = "):
            stage_from_state(SMALL, levels, k, 40)
    for start in (0, math.nan, 401):
        with pytest.raises(ConfigError, match="start = "):
            stage_from_state(SMALL, levels, 2, start)
    with pytest.raises(ConfigError, match="horizon"):
        stage_from_state(SMALL, levels, 2, 40, horizon=0)
    with pytest.raises(ConfigError, match="train_size"):
        stage_from_state(replace(SMALL, train_size=512), levels, 2, 40)
    with pytest.raises(ConfigError, match="model"):
        stage_from_state(replace(SMALL, model="full"), levels, 2, 40)


def test_the_map_is_the_runs_optimizer_on_each_steps_fresh_pool():
    """CHUNK steps of the map from the run's state at step 5 against the run's own optimizer
    applied by hand to the gradient of each step's whole pool (one batch, no chunks; the pool of
    step t drawn with the key folded with t): the same losses, so the chunked mean is the pool's
    mean, each step draws its own pool, and the momentum buffer is carried, not reset."""
    ((model, state),) = list(states_at(SMALL, [5]))
    data = markov_data(SMALL)
    w, length = data.task.window, data.validation.shape[1]
    rows, key = teacher_rows(data.task, data.A), pool_key(SMALL)
    opt = optimizer(SMALL)

    def loss(m, seqs):
        return _nll(window_log_probs(m, w, seqs), seqs[:, w:])

    expected = []
    for t in range(6, 6 + CHUNK):
        pool = fresh_pool(rows, key, jnp.asarray(t), data.task.generated).reshape(-1, length)
        with jax.numpy_dtype_promotion("standard"):
            updates, state = opt.update(jax.grad(loss)(model, pool), state, model)
        model = optax.apply_updates(model, updates)
        expected.append(float(loss(model, data.validation)))
    ((model0, state0),) = list(states_at(SMALL, [5]))
    step, losses = next(heavy_ball_map(SMALL, model0, state0, 5))
    assert step == 5 + CHUNK
    np.testing.assert_allclose(losses, expected, rtol=1e-9)


def test_each_step_draws_its_own_pool():
    """Two steps' pools differ, and one step's pool is the same whenever it is drawn."""
    data = markov_data(SMALL)
    rows, key, G = teacher_rows(data.task, data.A), pool_key(SMALL), data.task.generated
    first = fresh_pool(rows, key, jnp.asarray(6), G)
    assert first.shape == (POOL // POOL_CHUNK, POOL_CHUNK, data.validation.shape[1])
    np.testing.assert_array_equal(first, fresh_pool(rows, key, jnp.asarray(6), G))
    assert (first != fresh_pool(rows, key, jnp.asarray(7), G)).any()


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return markov_training.run(
        SMALL, RunOutput(out=tmp_path_factory.mktemp("small") / "run", quiet=True)
    )


def test_the_map_starts_from_the_runs_state_and_reads_its_own_crossing(small_run):
    """The map's first loss is the run's logged validation loss at the start step (the run
    replayed on its own minibatches, its momentum buffer included), it moves one step a row,
    and its stage is the midpoint crossing of its own curve."""
    ds, _ = load(small_run)
    levels = _levels(SMALL)
    start = 20
    t_2, steps, losses = stage_from_state(SMALL, levels, 2, start)
    logged = float(ds["val_loss"].sel(step=start).values[0])
    assert losses[0] == pytest.approx(logged, rel=1e-6)
    np.testing.assert_array_equal(np.diff(steps), 1)
    threshold = midpoints(levels)[1]
    assert math.isfinite(t_2) and t_2 > start
    assert t_2 == first_crossing(steps, losses, threshold)
    assert losses[-1] < threshold < losses[0]


def test_a_horizon_too_short_gives_nan(small_run):
    t_2, steps, losses = stage_from_state(SMALL, _levels(SMALL), 2, 20, horizon=CHUNK)
    assert math.isnan(t_2)
    assert steps[-1] == 20 + CHUNK
    assert len(losses) == CHUNK + 1


def test_under_adamw_the_map_starts_from_the_runs_state_and_moments(tmp_path):
    """The same rule under AdamW: the expected-moment map from the run's parameters and both
    AdamW moments at the start step starts at the run's logged loss there (a map with fresh
    moments would not follow it: at step 11 they give 1.1% below the run's loss, the run's own
    moments 3e-5, measured), and its stage is the midpoint crossing of its own curve."""
    cfg = replace(SMALL, optimizer="adamw", lr=None, steps=100, chunk=100, log_every=1)
    path = markov_training.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
    ds, _ = load(path)
    levels = _levels(cfg)
    t_2, steps, losses = stage_from_state(cfg, levels, 2, 10, horizon=400)
    assert losses[0] == pytest.approx(float(ds["val_loss"].sel(step=10).values[0]), rel=1e-6)
    assert losses[1] == pytest.approx(float(ds["val_loss"].sel(step=11).values[0]), rel=1e-3)
    assert math.isfinite(t_2) and t_2 == first_crossing(steps, losses, midpoints(levels)[1])


def test_a_priori_the_map_starts_from_the_runs_initial_state(small_run):
    """From step 0 the map starts at the run's logged initial loss (the run's own initial
    parameters, the optimizer's fresh state), and every start is the midpoint crossing of its
    own curve, in order; under AdamW its stage 1 is ``adam_moments``' stage-1 predictor's (the
    same map from the same state)."""
    ds, _ = load(small_run)
    levels = _levels(SMALL)
    starts, steps, losses = stages_from_start(SMALL, levels)
    assert losses[0] == pytest.approx(float(ds["val_loss"].sel(step=0).values[0]), rel=1e-9)
    np.testing.assert_array_equal(steps, np.arange(len(losses)))
    np.testing.assert_array_equal(
        starts, [first_crossing(steps, losses, c) for c in midpoints(levels)]
    )
    reached = [t for t in starts if math.isfinite(t)]
    assert len(reached) >= 2 and reached == sorted(reached)
    adamw = replace(SMALL, optimizer="adamw", lr=None)
    first = stages_from_start(adamw, levels, horizon=40)[0][0]
    assert first == stage_one_start(
        expected_adamw_losses(adamw, midpoints(levels)[0]), midpoints(levels)[0]
    )


def test_a_priori_a_horizon_too_short_leaves_the_later_stages_nan():
    starts, steps, _ = stages_from_start(SMALL, _levels(SMALL), horizon=CHUNK)
    assert steps[-1] == CHUNK
    assert math.isnan(starts[-1])


@pytest.mark.slow
def test_sgd_stages_from_the_state_and_a_priori_on_a_small_run(tmp_path):
    """SGD with momentum (lr 1, momentum 0.9) on the three-singleton-lag chain, 2000 steps, the
    truncated teachers' losses as class levels: stages 2 and 3 from the run's state at its
    measured t_1 and t_2, and every stage a priori from its initial state, each duration within
    the issue's 25% (from the state, measured 2026-12-08: 1.003 and 0.999). Nothing was tuned on
    this run."""
    cfg = replace(SMALL, steps=2000, chunk=1000)
    path = markov_training.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
    ds, _ = load(path)
    levels = _levels(cfg)
    steps, val = ds["step"].values, ds["val_loss"].values[0]
    measured = [first_crossing(steps, val, c) for c in midpoints(levels)]
    assert all(math.isfinite(t) for t in measured)
    a_priori = stages_from_start(cfg, levels)[0]
    for k in (2, 3):
        t_k = stage_from_state(cfg, levels, k, measured[k - 2])[0]
        duration = measured[k - 1] - measured[k - 2]
        assert t_k - measured[k - 2] == pytest.approx(duration, rel=0.25)
        assert a_priori[k - 1] - a_priori[k - 2] == pytest.approx(duration, rel=0.25)
