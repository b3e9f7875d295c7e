"""Stage 3 of the minimal transformer under AdamW from the run's own state at t_2
(simulate.incremental.adam_later_stages): the map starts where the run is, and at the quick grid
of incremental-timing it lands where the derived time map does not."""

import math
from dataclasses import replace

import numpy as np
import pytest

from simulate.incremental import markov_training
from simulate.incremental.adam_later_stages import HOLD, sequential_stage, sequential_stages
from simulate.incremental.adam_moments import CHUNK
from simulate.incremental.markov_training import MarkovTrainConfig, ladder_steps
from simulate.incremental.training_stages import stored_stage_boundaries
from simulate.runner import RunOutput
from simulate.store import load
from tests.incremental.small_chain import SINGLETON_LAGS
from theory.validation import ConfigError

SMALL = SINGLETON_LAGS


def test_refuses_stages_and_steps_it_has_no_rule_for():
    for k in (1, 2, 4):
        with pytest.raises(ConfigError, match="k = "):
            sequential_stage(SMALL, k, 40)
    with pytest.raises(ConfigError, match="start = 0"):
        sequential_stage(SMALL, 3, 0)
    with pytest.raises(ConfigError, match="start = 401"):
        sequential_stage(SMALL, 3, 401)
    with pytest.raises(ConfigError, match="horizon"):
        sequential_stage(SMALL, 3, 40, horizon=CHUNK - 1)
    with pytest.raises(ConfigError, match="optimizer"):
        sequential_stage(replace(SMALL, optimizer="sgd"), 3, 40)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return markov_training.run(
        SMALL, RunOutput(out=tmp_path_factory.mktemp("small") / "run", quiet=True)
    )


def test_the_map_starts_from_the_runs_state_at_t2(small_run):
    """The map's first KL ladder is the run's logged one at its measured t_2 (the run replayed on
    its own minibatches, AdamW moments included), it moves on by CHUNK steps, and the stage it
    returns is the ladder step of its own KL, held for HOLD reads. A map started from the initial
    parameters instead would start in class 1, far from the run's KL at t_2."""
    ds, _ = load(small_run)
    t_2 = stored_stage_boundaries(small_run)[0, 1]
    assert 0 < t_2 < SMALL.steps
    t_3, steps, kl = sequential_stage(SMALL, 3, int(t_2))
    logged = ds["kl_yardstick"].sel(step=int(t_2)).values[0]
    np.testing.assert_allclose(kl[0], logged, rtol=1e-6)
    np.testing.assert_array_equal(np.diff(steps), CHUNK)
    assert steps[0] == t_2
    assert math.isfinite(t_3) and t_3 > t_2
    assert t_3 == ladder_steps(steps, kl)[1]
    assert np.all(np.argmin(kl[-HOLD:], axis=-1) + 1 >= 3)


def test_a_horizon_too_short_for_stage_3_gives_nan(small_run):
    t_2 = int(stored_stage_boundaries(small_run)[0, 1])
    t_3, steps, _ = sequential_stage(SMALL, 3, t_2, horizon=CHUNK)
    assert math.isnan(t_3)
    assert steps[-1] == t_2 + CHUNK


def test_a_run_whose_ladder_starts_in_class_2_gets_nan_not_an_error(tmp_path):
    """At d = 10 with three singleton lags the truncated teachers rank the untrained network in
    class 2 from step 0 (t_1 = t_2 = 0): there is no state before stage 2 to start from, so its
    stage 3 is nan instead of stopping the figure that asked for it."""
    cfg = replace(SMALL, vocab=10, steps=200, chunk=200)
    path = markov_training.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
    assert stored_stage_boundaries(path)[0, 1] == 0
    assert [[math.isnan(t) for t in row] for row in sequential_stages(cfg, path)] == [[True]]


@pytest.mark.slow
def test_stage_3_from_t2_at_the_quick_grid(tmp_path):
    """incremental-timing --quick's point q = 1e-7, m = 1.5 (float64): stage 3 from the run's
    state at its t_2 within 10% of the measured t_3, and the duration t_3 - t_2 within 25% (the
    issue's target; measured 1.014 and 1.04 on 2026-12-07), where the derived time map, which
    carries the O(q) split through the plateau, puts t_3 1.5x late (the figure's table: 1104
    against 725, duration 2.56x). Nothing was tuned on this point: the rule was written from the
    stage-1 map before any stage-3 number was seen. About 5 minutes under the CLI's XLA flags,
    several times that under the suite's LLVM -O0 (27 min beside the wiring test)."""
    cfg = MarkovTrainConfig(
        vocab=50,
        m=1.5,
        query_scale=1e-7,
        batch=256,
        validation=256,
        steps=1000,
        log_every=5,
        chunk=100,
    )
    path = markov_training.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
    t_1, t_2, t_3 = stored_stage_boundaries(path)[0]
    predicted, _, _ = sequential_stage(cfg, 3, int(t_2))
    assert predicted == pytest.approx(t_3, rel=0.10)
    assert predicted - t_2 == pytest.approx(t_3 - t_2, rel=0.25)
