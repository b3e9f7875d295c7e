"""Tests of simulate.measure.stages: crossing times on synthetic step curves with known
crossings."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit

from simulate.measure.stages import first_crossing, first_rise, midpoints, stage_times

SETTINGS = settings(max_examples=25, deadline=None)


def _step_curve(ts, levels, times, width):
    """Monotone staircase: L_{k-1} -> L_k by a logistic step in log t centred at times[k-1]."""
    y = np.full_like(ts, levels[0], dtype=float)
    lt = np.log(np.maximum(ts, 1e-300))
    for k, tk in enumerate(times, start=1):
        drop = levels[k - 1] - levels[k]
        y -= drop * expit((lt - np.log(tk)) / width)
    return y


@st.composite
def staircases(draw):
    K = draw(st.integers(1, 3))
    drops = draw(st.lists(st.floats(0.1, 5.0), min_size=K, max_size=K))
    final = draw(st.floats(0.0, 1.0))
    levels = [final + sum(drops[k:]) for k in range(K)] + [final]
    first = draw(st.floats(-1.0, 1.0))
    gaps = draw(st.lists(st.floats(1.5, 2.5), min_size=K - 1, max_size=K - 1))
    times = [math.exp(first + sum(gaps[:k])) for k in range(K)]
    return levels, times


@SETTINGS
@given(staircases())
def test_stage_times_on_a_fine_grid_find_the_step_centres(case):
    """With well-separated sharp steps, the loss crosses the midpoint (L_{k-1}+L_k)/2 at the step
    centre t_k (where the logistic is exactly 1/2), up to the tails of the other steps."""
    levels, times = case
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e4, 4000)])
    width = 0.02
    y = _step_curve(ts, levels, times, width)
    assert np.all(np.diff(y) <= 0)
    measured = stage_times(ts, y, levels)
    assert measured.shape == (len(times),)
    # other steps (>= 1.5 apart in log t) contribute ~exp(-1.5/width) of their drop: negligible
    np.testing.assert_allclose(measured, times, rtol=1e-3)
    # a coarse grid still brackets each crossing between the samples around it
    coarse = ts[::100]
    for k, t in enumerate(stage_times(coarse, y[::100], levels)):
        i = np.searchsorted(coarse, times[k])
        assert coarse[i - 1] <= t <= coarse[i]


@SETTINGS
@given(
    st.lists(st.floats(-3.0, 3.0), min_size=2, max_size=2, unique=True),
    st.floats(0.01, 0.99),
    st.floats(0.01, 5.0),
    st.floats(0.01, 5.0),
)
def test_first_crossing_is_log_linear_between_samples(logt, frac, y0, drop):
    """Two samples: the crossing is the log-linear interpolate, computed here from the construction
    t* = t0 * (t1/t0)^w with w the fraction of the drop at the threshold."""
    t0, t1 = sorted(math.exp(x) for x in logt)
    y1 = y0 - drop
    threshold = y0 - frac * drop
    expected_w = (y0 - threshold) / drop
    ts = np.array([t0, t1, t1 * 2])
    vals = np.array([y0, y1, y1 - 1.0])
    t = first_crossing(ts, vals, threshold)
    assert t == pytest.approx(t0 * (t1 / t0) ** expected_w, rel=1e-10)
    assert t0 * (1 - 1e-12) <= t <= t1 * (1 + 1e-12)


def test_linear_interpolation_from_time_zero():
    ts = np.array([0.0, 2.0, 4.0])
    vals = np.array([1.0, 0.0, -1.0])
    # between t=0 and t=2 the interpolation is linear in t (log 0 is undefined)
    assert first_crossing(ts, vals, 0.5) == pytest.approx(1.0)
    # between t=2 and t=4: log-linear, t = 2 * 2^(1/2)
    assert first_crossing(ts, vals, -0.5) == pytest.approx(2 * math.sqrt(2))


def test_already_below_returns_first_time():
    assert first_crossing([0.5, 1.0], [0.0, -1.0], 1.0) == 0.5


def test_never_reached_is_nan():
    ts = np.geomspace(1e-2, 1e2, 50)
    levels = [3.0, 2.0, 1.0, 0.0]
    # a staircase that only completes the first stage: stages 2 and 3 are never reached
    y = _step_curve(ts, [3.0, 2.0], [1.0], 0.05)
    out = stage_times(ts, y, levels)
    assert math.isfinite(out[0]) and out[0] == pytest.approx(1.0, rel=1e-2)
    assert np.all(np.isnan(out[1:]))
    assert math.isnan(first_crossing(ts, np.ones(50), 0.5))


def test_midpoints_and_first_rise():
    np.testing.assert_allclose(midpoints([4.0, 2.0, 0.0]), [3.0, 1.0])
    ts = np.array([1.0, 10.0, 100.0])
    vals = np.array([0.0, 1.0, 2.0])
    assert first_rise(ts, vals, 0.5) == pytest.approx(math.sqrt(10.0))
    assert math.isnan(first_rise(ts, vals, 5.0))
