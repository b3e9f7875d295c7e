"""Focus-dilution theory: predicted stage times against the full-parameter flow
(``theory.focus_dilution.manifold.predicted_stage_times``; spec §5.1-5.3, §5.5)."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from simulate.focus_dilution.flow import (
    stage_four_point,
)
from theory.focus_dilution.manifold import (
    manifold_parameters,
    predicted_stage_times,
    symmetric_pi,
)
from theory.focus_dilution.population import (
    Parameters,
    attention,
    parameter_field,
    parameter_loss,
    transition_matrix,
)
from theory.focus_dilution.stages import (
    entropy,
)

D, M_WIDTH, MK = 4, 3, 2
PI_DEFAULT = np.array([0.75, 0.19, 0.05, 0.01])  # spec §2.3


# --- predicted stage times against the full-parameter flow (spec §5.1-5.3, §5.5) ------------------
def _full_flow(pi, P, eps, t_end, events=(), t_eval=None, seed=0):
    theta = Parameters.random(np.random.default_rng(seed), D, M_WIDTH, MK, eps)
    return solve_ivp(
        lambda t, x: parameter_field(x, pi, P, D, M_WIDTH, MK),
        (0, t_end),
        theta.flatten(),
        method="LSODA",
        rtol=1e-9,
        atol=1e-14,
        events=list(events),
        t_eval=t_eval,
    )


def test_stage_onsets_shift_by_the_predicted_slopes_in_log_eps():
    pi, P = PI_DEFAULT, transition_matrix(PI_DEFAULT, 0.5)
    loss_mid = (math.log(D) + entropy(pi)) / 2
    focus_mid = (pi[0] + 1) / 2

    def stage_one(t, x):
        return parameter_loss(Parameters.unflatten(x, D, M_WIDTH, MK), pi, P) - loss_mid

    def stage_two(t, x):
        W0, WQ, WK, _ = Parameters.unflatten(x, D, M_WIDTH, MK)
        return attention(pi, W0 @ WQ @ WK.T @ W0.T)[0, 0] - focus_mid

    stage_two.terminal = True
    onsets = []
    for eps in (1e-3, 1e-5):
        sol = _full_flow(pi, P, eps, 1000.0, events=(stage_one, stage_two))
        onsets.append((sol.t_events[0][0], sol.t_events[1][0]))
    (a1, a2), (b1, b2) = onsets
    pred = [predicted_stage_times(pi, P, eps, mu_IV=0.0) for eps in (1e-3, 1e-5)]
    assert b1 - a1 == pytest.approx(pred[1].t_I - pred[0].t_I, rel=0.01)
    assert b2 - a2 == pytest.approx(pred[1].t_II - pred[0].t_II, rel=0.02)


def test_full_flow_escapes_the_stage_four_point_at_the_predicted_rate():
    ts = np.linspace(0.0, 1000.0, 101)
    for delta in (0.0, 0.04):
        pi = symmetric_pi(0.7, D, delta)
        P = transition_matrix(pi, 0.5)
        point = stage_four_point(pi, P)
        sol = _full_flow(pi, P, 1e-3, ts[-1], t_eval=ts)
        s2 = [
            np.linalg.svd(Parameters.unflatten(x, D, M_WIDTH, MK).W0, compute_uv=False)[1]
            for x in sol.y.T
        ]
        slope = np.polyfit(ts[60:], np.log(s2[60:]), 1)[0]
        if delta == 0.0:  # stall: the second embedding direction neither grows nor decays
            assert abs(slope) < 1e-6
            stage_four_loss = parameter_loss(manifold_parameters(point.state, M_WIDTH, MK), pi, P)
            final = parameter_loss(Parameters.unflatten(sol.y[:, -1], D, M_WIDTH, MK), pi, P)
            assert final == pytest.approx(stage_four_loss, abs=1e-9)
        else:
            assert slope == pytest.approx(point.rate, rel=0.03)


def test_full_flow_at_the_default_pi_leaves_rank_one_at_mu_iv():
    pi, P = PI_DEFAULT, transition_matrix(PI_DEFAULT, 0.5)
    ts = np.linspace(220.0, 320.0, 11)
    sol = _full_flow(pi, P, 1e-3, ts[-1], t_eval=ts, seed=1)
    s2 = [
        np.linalg.svd(Parameters.unflatten(x, D, M_WIDTH, MK).W0, compute_uv=False)[1]
        for x in sol.y.T
    ]
    slope = np.polyfit(ts, np.log(s2), 1)[0]
    assert slope == pytest.approx(stage_four_point(pi, P).rate, rel=0.03)
