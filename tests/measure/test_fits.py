"""``simulate.measure.fits.loglog_slope_last_two``: the local power law through the last two
points (not a least-squares fit)."""

import numpy as np
import pytest

from simulate.measure.fits import loglog_slope_last_two


def test_slope_through_the_last_two_points():
    assert loglog_slope_last_two([1, 10, 100], [1, 0.1, 0.01]) == pytest.approx(-1.0)
    # only the last two count: an earlier point off the line changes nothing
    assert loglog_slope_last_two([1, 10, 100], [5, 0.1, 0.01]) == pytest.approx(-1.0)
    assert np.isnan(loglog_slope_last_two([1, 10, 100], [1, 0.1, 0.0]))
