"""The competitive plateau against the vertex law of theory.incremental.stages (replicator
metric)."""

import numpy as np
import pytest

from simulate.incremental.head_ode import solve
from theory.incremental.heads import HeadSetting
from theory.incremental.stages import predict_stages

EPS = (1e-3, 1e-6, 1e-9, 1e-12)


@pytest.fixture(scope="module")
def delays():
    setting = HeadSetting(m=1.7)
    batch = solve(setting, list(EPS) * 2, [0] * 4 + [1] * 4, 600.0, n_save=200)
    t = batch.crossings.reshape(2, len(EPS), -1).mean(axis=0)
    pred = np.array([[p.time for p in predict_stages(setting, e)] for e in EPS])
    return t, pred


def test_plateau_grows_faster_than_linearly_in_log_eps(delays):
    """A hyperbolic saddle would give equal increments of t_2 - t_1 per decade of eps; the
    degenerate vertex gives increments that grow (quadratic law)."""
    t, _ = delays
    inc = np.diff(t[:, 1] - t[:, 0])
    assert np.all(inc > 0)
    assert inc[-1] / inc[0] > 1.3


def test_stage_two_time_matches_the_vertex_law(delays):
    t, pred = delays
    np.testing.assert_allclose(t[:, 1], pred[:, 1], rtol=0.25)


def test_stage_one_time_matches_the_early_time_integral(delays):
    t, pred = delays
    # the loss midpoint is passed slightly before the block mass reaches 1/2
    assert np.all(t[:, 0] < pred[:, 0]) and np.all(t[:, 0] > 0.7 * pred[:, 0])


@pytest.mark.parametrize("metric,t_max", [("replicator", 60.0), ("logit", 200.0)])
def test_lumped_symmetric_system_predicts_the_stage_one_event(metric, t_max):
    """The lumped system drops only the weaker blocks, whose drive is (m_2/m_1)^2 = 1/m^2 of the
    lead block's: at m = 2 the predicted mass-1/2 time is within a few percent of the full ODE."""
    from simulate.incremental.lumped_escape import lumped_escape_time
    from simulate.measure.stages import lead_mass_time

    setting = HeadSetting(m=2.0, metric=metric)
    batch = solve(setting, [1e-6], [0], t_max, n_save=1500)
    measured = lead_mass_time(batch.ts, batch.s[0], setting.lags(0))
    assert lumped_escape_time(setting) == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("metric", ["replicator", "logit"])
def test_lumped_escape_is_solved_for_large_importances(metric):
    """The lumped system is stiff for large m (an explicit solver exhausted its steps at m = 300,
    a traceback after a heads-gd run, and so did diffrax's Kvaerno5 for the logit metric at
    m = 300): the escape time stays finite and falls as m grows."""
    from simulate.incremental.lumped_escape import lumped_escape_time

    times = [lumped_escape_time(HeadSetting(m=m, metric=metric)) for m in (100.0, 300.0, 3000.0)]
    assert all(np.isfinite(times)) and times[0] > times[1] > times[2] > 0
