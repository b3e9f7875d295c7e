"""simulate.emergence.measurements: the emergence, plateau, drop, reach, responsible-head,
recovery and matched-width rules on constructed curves (spec emergence.md §4, §6, §7)."""

import math

import numpy as np
import pytest

from simulate.emergence.measurements import (
    bias_halves,
    drop_step,
    drop_window,
    emergence_times,
    highlighted_drop,
    matched_width,
    median_length,
    pattern_recovery,
    plateau_length,
    responsible_heads,
    run_times,
    steps_to_floor,
)
from simulate.measure.survival import cdf, column_survival


def test_emergence_times_rule_on_constructed_curves():
    steps = np.arange(0, 1000, 100)
    drop = np.full((10, 3), math.log(2))
    drop[4:, 0] = 0.05  # below 0.1 ln 2 from step 400
    drop[7:, 2] = 0.08  # 0.08 > 0.0693: not yet emerged
    drop[9:, 2] = 0.01
    np.testing.assert_array_equal(emergence_times(steps, drop), [400.0, np.nan, 900.0])


def test_plateau_length_rule_on_constructed_curve():
    steps = np.arange(0, 3000, 50)
    loss = np.where(steps < 1200, 0.69, 0.5)
    loss[:2] = 1.5  # fast initial fit of the marginals, before the plateau window
    level, length = plateau_length(steps, loss, 200)
    assert level == pytest.approx(0.69) and length == 1200
    assert math.isnan(plateau_length(steps, np.full(steps.shape, 0.69), 200)[1])


def test_responsible_head_is_the_one_whose_pattern_mass_rises():
    steps = np.arange(0, 500, 50)
    cell_loss = np.full((10, 2), math.log(2))
    cell_loss[6:, 1] = 0.0
    mass = np.full((10, 3, 2), 0.3)
    mass[6:, 2, 1] = 0.9  # head 3 finds cell 1's support during the drop (rows 5 -> 6)
    mass[6:, 0, 0] = 0.9  # a rise on another cell does not count
    entropy = np.full((10, 3), 2.0)
    entropy[6:, 2] = 1.0
    rows = responsible_heads(steps, cell_loss, mass, entropy, np.array([np.nan, 300.0]))
    assert rows == [[1, 300.0, 3, -1.0, 0.0]]


def test_steps_to_floor_rule():
    steps = np.arange(0, 500, 100)
    floor = 0.3
    assert steps_to_floor(steps, [0.69, 0.5, 0.316, 0.3, 0.3], floor) == 200
    assert math.isnan(steps_to_floor(steps, [0.69, 0.5, 0.4, 0.35, 0.33], floor))


def test_plateau_helpers_count_never_as_infinite():
    assert median_length([100.0, np.nan, np.nan]) == math.inf
    assert median_length([100.0, 300.0, 200.0]) == 200.0
    assert bias_halves([np.nan, np.nan], [150.0, 200.0])
    assert not bias_halves([400.0, 500.0], [300.0, 350.0])


def test_drop_step_is_halfway_from_plateau_to_floor():
    steps = np.arange(0, 2000, 50)
    # a plateau at 0.6 with a 5% dip at 600 (noise), then a drop to the floor 0.1 from 1000
    loss = np.where(steps < 1000, 0.6, 0.1 + 0.5 * np.exp(-(steps - 1000) / 100.0))
    loss[steps == 600] = 0.56
    assert drop_step(steps, loss, 0.6, 0.1, 200) == 1100.0  # first below 0.35
    assert math.isnan(drop_step(steps, np.full(steps.shape, 0.6), 0.6, 0.1, 200))


def test_matched_width_pairs_many_small_heads_first():
    configs = [(1, 4), (2, 4), (4, 4), (8, 4), (1, 8), (2, 8), (4, 8), (8, 8), (1, 32), (2, 16)]
    groups = matched_width(configs)
    assert groups == {
        8: [(2, 4), (1, 8)],
        16: [(4, 4), (2, 8)],
        32: [(8, 4), (4, 8), (2, 16), (1, 32)],
    }
    assert 4 not in groups and 64 not in groups  # held by one configuration only


def test_cell_survival_and_run_times():
    steps = [0, 100, 200]
    times = np.array([[50.0, np.nan], [150.0, 100.0]])  # (seed, cell)
    np.testing.assert_allclose(column_survival(steps, times), [[1, 1], [0.5, 0.5], [0, 0.5]])
    np.testing.assert_array_equal(run_times(times), [np.inf, 150.0])
    np.testing.assert_allclose(cdf(steps, run_times(times)), [0, 0, 0.5])


def test_drop_window_and_pattern_recovery():
    steps = np.arange(0, 500, 50)
    loss = np.full(10, math.log(2))
    loss[5] = 0.4
    loss[6:] = 0.0
    assert drop_window(steps, loss, 300.0) == (4, 6)
    mass = np.array([[0.9, 0.1, 0.2], [0.05, 0.2, 0.1]])  # (head, cell)
    emerged, other = pattern_recovery(mass, np.array([100.0, np.nan, np.nan]))
    assert emerged == pytest.approx(0.95) and other == pytest.approx(0.3)


def test_highlighted_drop_is_the_sharpest_responsible_head():
    steps = np.arange(0, 500, 50)
    cell_loss = np.full((10, 2), math.log(2))
    cell_loss[4:, 0] = 0.0
    cell_loss[7:, 1] = 0.0
    # rows (cell, step, head, entropy change, others' median): cell 1's head sharpens more
    rows = [[0, 200.0, 2, -0.2, 0.0], [1, 350.0, 3, -0.9, -0.1]]
    assert highlighted_drop(steps, cell_loss, rows) == {
        "seed": 0,
        "cell": 1,
        "head": 3,
        "step_before": 300,
        "step_after": 350,
    }
    assert highlighted_drop(steps, cell_loss, []) is None
