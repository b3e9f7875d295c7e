"""Measurement rules of the trained mean-field figures (``simulate.mean_field.measure``), on
constructed arrays."""

import numpy as np
import pytest

from simulate.mean_field.measure import escape_onset, fit_rate, largest_rise


def test_escape_onset_is_where_the_curves_part_for_good():
    depth = np.linspace(0, 8, 9)
    untrained = np.zeros(9)
    trained = np.array([0, 0.15, 0.05, 0, 0, 0.05, 0.2, 0.6, 1.0])  # an early blip, then escape
    assert escape_onset(depth, trained, untrained) == 5.0
    assert np.isnan(escape_onset(depth, untrained, untrained))


def test_fit_rate_of_an_exponential_profile_over_the_window():
    depth, kappa = 8.0, 2.0
    t = (np.arange(64) + 0.5) * depth / 64
    norms = np.exp(-kappa * (depth - t))
    norms[:32] = 5.0  # outside the window: ignored
    assert fit_rate(t, norms, depth, 2.0) == pytest.approx(kappa)
    assert np.isnan(fit_rate(t, np.zeros(64), depth, 2.0))  # no positive norm


def test_largest_rise():
    assert largest_rise([3, 2, 2.5, 1]) == pytest.approx(0.5)
    assert largest_rise([3, 2, 1]) == 0.0
