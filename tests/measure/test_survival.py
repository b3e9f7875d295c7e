"""simulate.measure.survival: survival curves and CDFs of waiting times that may never happen
(nan/inf), against the plain fractions they reduce to."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulate.measure.survival import cdf, column_survival, survival


def test_survival_counts_never_as_not_emerged():
    s = survival([0, 100, 200], np.array([[50.0, np.nan], [150.0, 100.0]]))
    np.testing.assert_allclose(s, [1.0, 0.5, 0.25])


times = arrays(
    np.float64,
    st.integers(1, 12),
    elements=st.sampled_from([0.0, 50.0, 100.0, 150.0, 200.0, np.nan, np.inf]),
)


@settings(max_examples=60, deadline=None)
@given(times)
def test_kaplan_meier_with_censoring_at_the_budget_is_the_plain_fraction(t):
    steps = np.array([-10.0, 0.0, 25.0, 50.0, 100.0, 175.0, 200.0, 300.0])
    never = np.where(np.isnan(t), np.inf, t)
    plain = np.array([(never > step).mean() for step in steps])
    np.testing.assert_allclose(survival(steps, t), plain, atol=1e-12)
    np.testing.assert_allclose(cdf(steps, t), 1 - plain, atol=1e-12)


def test_all_never_and_no_times():
    np.testing.assert_array_equal(survival([0, 10], [np.nan, np.inf]), [1.0, 1.0])
    np.testing.assert_array_equal(cdf([0, 10], [np.nan]), [0.0, 0.0])
    assert np.isnan(survival([0, 10], [])).all()


def test_column_survival_is_survival_per_column():
    t = np.array([[50.0, np.nan, 10.0], [150.0, 100.0, 10.0], [np.inf, 20.0, 30.0]])
    steps = [0, 20, 100, 200]
    got = column_survival(steps, t)
    assert got.shape == (4, 3)
    for i in range(3):
        np.testing.assert_allclose(got[:, i], survival(steps, t[:, i]))
    assert got[-1].tolist() == pytest.approx([1 / 3, 1 / 3, 0.0])
