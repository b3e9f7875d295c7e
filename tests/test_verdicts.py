"""The verdict of a prediction beside a measurement (figures/core/verdicts.py)."""

from __future__ import annotations

import math

from hypothesis import assume, given
from hypothesis import strategies as st

from figures.core.verdicts import Prediction

positive = st.floats(1e-6, 1e6)


def _verdict(predicted, measured, tolerance, scale) -> str:
    return Prediction("q", predicted, measured, tolerance, "rule", scale).verdict()


@given(positive, st.floats(0.01, 0.99), st.floats(0.0, 3.0))
def test_ratio_agrees_exactly_when_the_relative_error_is_within_the_tolerance(p, tol, r):
    assert (_verdict(p, r * p, tol, "ratio") == "agrees") == (abs(r * p / p - 1) <= tol)


@given(positive, st.floats(1.01, 10.0), st.floats(-3.0, 3.0))
def test_factor_is_symmetric_in_measured_and_predicted(p, factor, log_r):
    m = p * math.exp(log_r)
    assume(abs(abs(log_r) - math.log(factor)) > 1e-9)  # off the boundary, where rounding decides
    assert _verdict(p, m, factor, "factor") == _verdict(m, p, factor, "factor")
    assert (_verdict(p, m, factor, "factor") == "agrees") == (abs(log_r) < math.log(factor))


def test_factor_rejects_a_measurement_ten_times_below_that_a_ratio_of_one_accepts():
    assert _verdict(1.0, 0.1, 1.0, "ratio") == "agrees"  # why the factor scale exists
    assert _verdict(1.0, 0.1, 2.0, "factor") == "disagrees"
    assert _verdict(1.0, -1.0, 2.0, "factor") == "disagrees"
    assert _verdict(1.0, 0.6, 2.0, "factor") == "agrees"


@given(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3), st.floats(0.0, 10.0))
def test_difference_agrees_exactly_when_within_the_tolerance(p, m, tol):
    assert (_verdict(p, m, tol, "difference") == "agrees") == (abs(m - p) <= tol)


def test_missing_or_non_finite_numbers_are_not_measured_and_rows_keep_them_as_nan():
    for predicted, measured in [(1.0, None), (1.0, "nan"), ("inf", 1.0), (0.0, 1.0)]:
        p = Prediction("q", predicted, measured, 0.1, "rule")
        assert p.verdict() == "not measured"
        assert math.isnan(p.row()["ratio"])
    assert _verdict(0.0, 0.05, 0.1, "difference") == "agrees"  # a 0 prediction by difference
