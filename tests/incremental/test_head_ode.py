"""Tests of simulate.incremental.head_ode: diffrax vs scipy, the symmetric stall, event crossings,
batching and the programs shared by both metrics and by the symmetric subspace."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from simulate import program_store
from simulate.incremental.head_ode import initial_logits, log_grid, plateau_levels, solve
from simulate.measure.stages import midpoints, stage_times
from theory.incremental.heads import HeadSetting
from theory.validation import ConfigError

SETTING = HeadSetting(heads=2, blocks=(1, 1), window=5)  # replicator metric
N_SAVE = 200
T_MAX = 30.0
EPS, SEEDS = (1e-2, 3e-2), (0, 1)


def _reference(setting, theta0, ts):
    """The reduced ODE in logits, written directly: v_k' = R s_k, theta_k' = R^T v_k (replicator
    metric) or J(s_k) R^T v_k (logit metric)."""
    H, h, T = setting.heads, setting.h, setting.window
    G = setting.target()

    def rhs(t, y):
        v = y[: H * h].reshape(H, h)
        th = y[H * h :].reshape(H, T)
        e = np.exp(th - th.max(-1, keepdims=True))
        s = e / e.sum(-1, keepdims=True)
        R = G - v.T @ s
        dth = v @ R
        if setting.metric == "logit":
            dth = s * (dth - np.sum(s * dth, axis=-1, keepdims=True))
        return np.concatenate([(s @ R.T).ravel(), dth.ravel()])

    y0 = np.concatenate([np.zeros(H * h), np.asarray(theta0).ravel()])
    sol = solve_ivp(rhs, (0.0, ts[-1]), y0, method="DOP853", t_eval=ts, rtol=1e-10, atol=1e-12)
    assert sol.success
    v = sol.y[: H * h].T.reshape(-1, H, h)
    th = sol.y[H * h :].T.reshape(-1, H, T)
    s = np.exp(th) / np.exp(th).sum(-1, keepdims=True)
    R = G[None] - np.einsum("nkj,nki->nji", v, s)
    return v, s, 0.5 * np.sum(R**2, axis=(1, 2))


@pytest.fixture(scope="module")
def singles():
    return [solve(SETTING, [e], [seed], t_max=T_MAX, n_save=N_SAVE) for e, seed in zip(EPS, SEEDS)]


@pytest.fixture(scope="module")
def batch():
    return solve(SETTING, list(EPS), list(SEEDS), t_max=T_MAX, n_save=N_SAVE)


def test_diffrax_agrees_with_scipy_dop853(singles):
    sol = singles[0]
    np.testing.assert_array_equal(sol.ts, log_grid(T_MAX, N_SAVE))
    theta0 = np.asarray(initial_logits(SETTING, np.array([EPS[0]]), np.array([SEEDS[0]])))[0]
    v, s, L = _reference(SETTING, theta0, sol.ts)
    # the run passes through stage 1 and stage 2 within the horizon (not a trivial comparison)
    assert L[-1] < plateau_levels(SETTING)[1] * 0.5
    np.testing.assert_allclose(sol.v[0], v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.s[0], s, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.loss[0], L, rtol=0, atol=1e-6)


def test_initial_state():
    theta = np.asarray(initial_logits(SETTING, np.array([1e-2, 0.0]), np.array([3, 3])))
    assert theta.shape == (2, SETTING.heads, SETTING.window)
    assert np.all(theta[1] == 0)
    # theta = eps * xi with xi standard normal: same seed, scaled by eps
    np.testing.assert_allclose(
        theta[0],
        1e-2 * np.asarray(initial_logits(SETTING, np.array([1.0]), np.array([3])))[0],
        rtol=1e-15,
    )


def test_exact_symmetry_stays_on_the_competitive_plateau():
    """eps = 0: all heads start equal and stay bitwise equal; the loss settles on L_1.

    Near the vertex the off-vertex masses decay like 1/(|c| t) and the loss excess like their
    square, so t_max = 1e4 brings the excess well below 1e-6."""
    levels = plateau_levels(SETTING)
    sol = solve(SETTING, [0.0], [0], t_max=1e4, n_save=N_SAVE)
    assert np.all(sol.v[0, :, 0] == sol.v[0, :, 1])
    assert np.all(sol.s[0, :, 0] == sol.s[0, :, 1])
    assert sol.loss[0, -1] == pytest.approx(levels[1], abs=1e-6)
    assert abs(sol.loss[0, -1] - levels[1]) < abs(sol.loss[0, N_SAVE // 2] - levels[1])
    assert np.isfinite(sol.crossings[0, 0])
    assert np.all(np.isnan(sol.crossings[0, 1:]))


def _bracket(ts, loss, threshold):
    i = int(np.nonzero(loss < threshold)[0][0])
    return ts[i - 1], ts[i]


def test_event_crossings_agree_with_grid_stage_times(singles, batch):
    mids = midpoints(plateau_levels(SETTING))
    for sol in [*singles, batch]:
        for b in range(sol.loss.shape[0]):
            grid = stage_times(sol.ts, sol.loss[b], plateau_levels(SETTING))
            events = sol.crossings[b]
            assert np.all(np.isfinite(events)) and np.all(np.isfinite(grid))
            for k, c in enumerate(mids):
                lo, hi = _bracket(sol.ts, sol.loss[b], c)
                assert lo <= events[k] <= hi
                assert lo <= grid[k] <= hi
                assert abs(events[k] - grid[k]) <= hi - lo


def test_event_crossings_hit_the_midpoint_exactly(singles):
    """Integrating the reference ODE to the event time lands on the loss midpoint."""
    sol = singles[0]
    theta0 = np.asarray(initial_logits(SETTING, np.array([EPS[0]]), np.array([SEEDS[0]])))[0]
    mids = midpoints(plateau_levels(SETTING))
    _, _, L = _reference(SETTING, theta0, np.array([0.0, *sol.crossings[0]]))
    np.testing.assert_allclose(L[1:], mids, rtol=0, atol=1e-6)


def test_vmapped_batch_equals_single_solves(singles, batch):
    for b, single in enumerate(singles):
        np.testing.assert_allclose(batch.v[b], single.v[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(batch.s[b], single.s[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(batch.loss[b], single.loss[0], rtol=0, atol=1e-10)
        np.testing.assert_allclose(batch.crossings[b], single.crossings[0], rtol=1e-10)


def test_one_program_serves_both_metrics(singles):
    """The metric is an argument of the compiled programs, not a constant of them: a logit-metric
    solve of the replicator solves' shapes compiles nothing new, and follows the logit field."""
    logit = replace(SETTING, metric="logit")
    programs = len(program_store._LOADED)
    sol = solve(logit, [EPS[0]], [SEEDS[0]], t_max=T_MAX, n_save=N_SAVE)
    assert len(program_store._LOADED) == programs
    theta0 = np.asarray(initial_logits(SETTING, np.array([EPS[0]]), np.array([SEEDS[0]])))[0]
    v, s, L = _reference(logit, theta0, sol.ts)
    np.testing.assert_allclose(sol.v[0], v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.s[0], s, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.loss[0], L, rtol=0, atol=1e-6)
    # not the replicator trajectory: the two metrics part well above the tolerance
    assert np.max(np.abs(sol.s[0] - singles[0].s[0])) > 1e-2


def test_symmetric_subspace_beside_free_runs(batch):
    """A tied trajectory rides in a batch of free ones: it starts at v = theta = 0 whatever its
    eps, its heads are bitwise equal, it follows the exactly symmetric start (here the untied
    eps = 0 run, which stays symmetric over this horizon), and the free runs beside it are the
    ones solved without it."""
    mixed = solve(
        SETTING,
        [*EPS, 0.0, EPS[1]],
        [*SEEDS, 0, SEEDS[1]],
        t_max=T_MAX,
        n_save=N_SAVE,
        symmetric=[False, False, False, True],
    )
    tied, untied = 3, 2
    assert np.all(mixed.s[tied, :, 0] == mixed.s[tied, :, 1])
    assert np.all(mixed.v[tied, :, 0] == mixed.v[tied, :, 1])
    np.testing.assert_allclose(mixed.loss[tied], mixed.loss[untied], rtol=1e-12, atol=0)
    np.testing.assert_allclose(mixed.s[tied], mixed.s[untied], rtol=0, atol=1e-12)
    np.testing.assert_allclose(mixed.crossings[tied], mixed.crossings[untied], rtol=1e-12)
    for b in range(len(EPS)):
        np.testing.assert_allclose(mixed.s[b], batch.s[b], rtol=0, atol=1e-10)
        np.testing.assert_allclose(mixed.crossings[b], batch.crossings[b], rtol=1e-10)


def test_symmetric_takes_one_flag_or_one_per_trajectory():
    with pytest.raises(ConfigError, match="one flag or one per trajectory"):
        solve(SETTING, list(EPS), list(SEEDS), t_max=T_MAX, symmetric=[True, False, True])
