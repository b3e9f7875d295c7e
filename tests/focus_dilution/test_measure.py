"""Measurement rules of the focus-dilution paper (``simulate.focus_dilution.measure``): onsets,
rate fits, plateaus, focus phases, principal components; no matplotlib."""

import math

import numpy as np
import pytest

from simulate.focus_dilution.measure import (
    fit_rate,
    focus_phases,
    measured_plateau,
    plateaus,
    principal_components,
    stage_onsets,
)
from theory.focus_dilution.stages import (
    entropy,
)

D, M, MK = 4, 3, 2
PI = np.array([0.75, 0.19, 0.05, 0.01])


# --- onset rules and rate fits on constructed curves (spec §6) ------------------------------------
def test_stage_onsets_on_constructed_curves():
    ts = np.linspace(0, 150, 1501)
    H = entropy(PI)
    step = 1 / (1 + np.exp(-(ts - 10)))
    loss = math.log(D) - (math.log(D) - H) * step
    focus = PI[0] + (1 - PI[0]) / (1 + np.exp(-(ts - 40)))
    max_entropy = H + np.where(ts > 30, 0.3 * np.tanh((ts - 45) / 3), 0.0)  # focus, then dilution
    sigma2 = 1e-3 * np.exp(0.1 * np.clip(ts - 40, 0, None))
    onsets = stage_onsets(ts, loss, focus, max_entropy, sigma2, PI)
    np.testing.assert_allclose(onsets[:3], [10, 40, 45], atol=0.2)
    assert onsets[3] == pytest.approx(40 + math.log(500) / 0.1, abs=0.2)
    stalled = stage_onsets(ts, loss, np.full_like(ts, PI[0]), max_entropy, sigma2, PI)
    assert np.isnan(stalled[1:]).all()


def test_fit_rate_recovers_an_exponential_and_reports_its_window():
    ts = np.linspace(0, 50, 501)
    y = 1e-6 * np.exp(0.37 * ts)
    rate, (a, b) = fit_rate(ts, y, 1e-4, 1e-2)
    assert rate == pytest.approx(0.37, rel=1e-9)
    assert a == pytest.approx(math.log(100) / 0.37, abs=0.1)
    assert b == pytest.approx(math.log(1e4) / 0.37, abs=0.1)
    assert math.isnan(fit_rate(ts, y, 1e3, 1e4)[0])


# --- plateaus, focus phases, principal components (spec §7) -----------------------------------
def test_focus_phases_are_maximal_runs_of_one_dominant_key():
    mass = np.array(
        [
            [0.3, 0.3, 0.4],
            [0.7, 0.2, 0.1],
            [0.8, 0.1, 0.1],
            [0.2, 0.1, 0.7],
            [0.4, 0.3, 0.3],
            [0.9, 0.05, 0.05],
        ]
    )
    phases = focus_phases(mass, ["a", "b", "c"], np.arange(6) * 10)
    assert phases == [(10, 20, "a"), (30, 30, "c"), (50, 50, "a")]


def test_principal_components_of_rows_pooled_over_time():
    rng = np.random.default_rng(0)
    direction = np.array([1.0, 2.0, 0.0, 0.0]) / math.sqrt(5)
    rows = np.einsum("tk,w->tkw", rng.normal(size=(50, 3)), direction) + 1e-3 * rng.normal(
        size=(50, 3, 4)
    )
    scores, ratios, comps, _ = principal_components(rows, k=2)
    assert ratios[0] > 0.999 and abs(comps[0] @ direction) == pytest.approx(1, abs=1e-4)
    assert scores.shape == (50, 3, 2)


def test_plateaus_pick_the_flattest_loss_between_onsets():
    ts = np.linspace(0, 100, 1001)
    loss = 1.4 - 0.6 / (1 + np.exp(-(ts - 20))) - 0.2 / (1 + np.exp(-(ts - 60)))
    levels = plateaus(ts, loss, [20, 60, 65, 90])
    assert levels[0] == pytest.approx(1.4, abs=1e-6)
    assert levels[1] == pytest.approx(0.8, abs=1e-3)
    assert levels[2] == pytest.approx(0.6, abs=1e-3)
    assert math.isnan(measured_plateau(ts, loss, 50, float("nan")))
