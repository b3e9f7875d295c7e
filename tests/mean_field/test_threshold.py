"""The clustering-threshold rules and runs (``simulate.mean_field.threshold``): the measured
transition, the susceptibility fit, the growth-rate line, the setting's validation, and a small
simulation whose mode-1 growth rate follows ``tau_c - tau``."""

import numpy as np
import pytest

from simulate.mean_field.threshold import (
    ThresholdSetting,
    growth_rates,
    measured_transition,
    rate_line,
    susceptibility_fit,
)
from theory.validation import ConfigError


def test_measured_transition_interpolates_the_crossing():
    ratios = [0.8, 0.9, 1.0, 1.1, 1.2]
    assert measured_transition(ratios, [0.7, 0.5, 0.3, 0.1, 0.05], 0.2) == pytest.approx(1.05)
    assert np.isnan(measured_transition(ratios, [0.1] * 5, 0.2))  # never clustered
    assert np.isnan(measured_transition(ratios, [0.5] * 5, 0.2))  # never unclustered


def test_susceptibility_fit_recovers_tau_c():
    ratios = np.array([1.1, 1.2, 1.5, 2.0])
    N = 1000
    r1_sq = 1 / (N * (1 - 1 / ratios))  # exact Gibbs fluctuations above tau_c = 1
    assert susceptibility_fit(ratios, r1_sq, N, 1.0) == pytest.approx(1.0)


def test_rate_line_of_the_theory_line():
    ratios = np.array([0.6, 0.9, 1.1, 1.5])
    slope, zero = rate_line(ratios, 1 - ratios)
    assert slope == pytest.approx(-1.0) and zero == pytest.approx(1.0)


def test_bad_setting_fails_with_one_line():
    with pytest.raises(ConfigError, match="tau_ratios"):
        ThresholdSetting(tau_ratios=(1.1, 0.9))
    with pytest.raises(ConfigError, match="beta"):
        ThresholdSetting(betas=(-1.0,))


def test_growth_rate_of_mode_one_follows_tau_c_minus_tau():
    setting = ThresholdSetting(
        betas=(2.0,), tau_ratios=(0.6, 1.4), rate_tokens=256, rate_seeds=4, float64=False
    )
    rates, curves, t = growth_rates(setting, 2.0)
    from theory.mean_field.energy import tau_c

    measured = rates / tau_c(2.0)
    assert measured[0] == pytest.approx(0.4, abs=0.15) and measured[1] == pytest.approx(
        -0.4, abs=0.15
    )
    assert np.allclose(curves[:, 0], 1.0) and t[0] == 0
