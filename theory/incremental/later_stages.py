"""Stage k >= 2 of the reduced head system with singleton blocks (issue 17 item 1; spec
incremental.md §5.2 field, §5.3 plateau levels, §5.5 minimisers, §5.6 time-scales), beside
``theory.incremental.stages.predict_stages``, whose results stay as they are.

What the stage-2 plateau is and how it ends (measured on the ODE, H = 3, T = 40, m = 1.7):

* every zero-sum head-splitting mode toward every off-vertex lag j grows during every plateau
  with its own WKB law ``a'' = m_j^2 s_j(t) a`` (``stages`` module docstring): at t_2 the split of
  lag 3 inside the remaining pair has grown from ~1e-11 to ~1e-2 at eps = 1e-12, so restarting it
  from eps (``stages.predict_stages``) predicts stage 3 two to three times too late;
* stage 2 does not end at a vertex: the departing head settles on the face {lag 1, lag 2} with
  mass ~0.2 left on lag 1, value m_2/(1 - p) on feature 2, and the heads still on lag 1 cancel
  its leak with a negative value on feature 2 (a continuum of critical points with loss L_2,
  spec §5.5); stage 3 then starts on the face {lead, lag 3} of that pair, and the end state is
  a zero-loss point where heads mix blocks;
* the off-vertex mass of lag 3 drops by half during the stage-2 transition (the pair takes over
  the lead value), which a closed-form vertex law carried through the plateau misses
  (``CARRIED_VERTEX_RULE``: measured/predicted 0.65-1.74 for stage 3, H = 3, m in 1.3-2.0,
  eps in 1e-3..1e-12, against 0.32-0.99 for the eps restart).

Hence two numerical reductions, each a gradient flow on a few lags (``weighted_flow``: lags of
multiplicity w, exact for exchangeable lags with equal logits):

* a-priori (``APRIORI_RULE``): all H heads on the h target lags plus one lag of multiplicity
  T - h for the empty ones, from reference noise draws of scale eps;
* sequential (``SEQUENTIAL_RULE``): the n = H - k + 2 heads still on the lead lag, at their state
  at t_{k-1}, on the face {lead, lag k} plus one lag holding the rest of their mass.

The a-priori reduction started from a run's own initial logits (``OWN_START_RULE``: the empty
lags lumped at the log-mean-exp of theirs) reproduces every stage time of the full T-lag ODE to
1e-4 (H = 3 and 4, both metrics, eps 1e-3..1e-12): the empty lags stay exchangeable, so the
seed-to-seed scatter of the reference-draw median is all that separates ``APRIORI_RULE`` from
the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp

from theory.incremental.heads import METRIC_POWER, HeadSetting, HeadSystem
from theory.incremental.stages import vertex_decay_coefficient
from theory.validation import require

APRIORI_RULE = (
    "lumped window: the H heads on the h target lags plus one lag of multiplicity T - h, "
    "logits eps * xi (reference draws xi), stage k at the loss midpoint (L_{k-1} + L_k)/2, "
    "median over draws"
)
OWN_START_RULE = (
    "lumped window from the run's own initial logits: target lags as drawn, the T - h empty "
    "lags one group at the log-mean-exp of theirs, stage k at the loss midpoint"
)
SEQUENTIAL_RULE = (
    "face system from t_{k-1}: the H - k + 2 heads with most lead-lag mass, restricted to "
    "{lead lag, lag k, rest} with their masses and values; stage k when its loss falls by "
    "m_k^2 / 4"
)
CARRIED_VERTEX_RULE = (
    "vertex law carried: each lag's split grows by 2 sqrt(kappa)(sqrt(tau0 + dt) - sqrt(tau0)) "
    "through every earlier plateau instead of restarting from eps (replicator)"
)
REFERENCE_DRAWS = tuple(range(1000, 1009))
"""seeds of the reference noise draws of the a-priori predictor (never the measured runs'). The
stage-3 time scatters by +-20% between draws at eps = 1e-3 (10th-90th percentile 96-131 at
m = 1.7): nine draws put the median within a few percent of the population median."""
RTOL, ATOL = 1e-9, 1e-13


def mixed_stage_point(hs: HeadSystem, masses: tuple[sp.Expr, ...]) -> dict:
    """The critical points stage k = len(masses) + 1 ends at (singleton blocks, lag j = block j):
    the head that captured lag j keeps mass p_j on the lead lag and value G_jj / (1 - p_j) on
    feature j; the n = H - k + 1 heads left on the lead vertex share G_11 and cancel each leak
    with -G_jj p_j / ((1 - p_j) n). Every p_j in [0, 1) gives a critical point at the plateau
    level L_k (checked symbolically in the tests); the ODE picks p_2 ~ 0.2 at m = 1.7."""
    st = hs.setting
    _check_singleton(st)
    k = len(masses) + 1
    n = st.heads - k + 1
    require(n >= 1 and k <= st.h, "masses", masses, f"at most {min(st.heads, st.h) - 1} masses")
    point: dict = {x: sp.Integer(0) for x in hs.state}

    def at(matrix: sp.Matrix, row: int, col: int) -> sp.Symbol:
        # sympy types matrix entries as ``MatrixElement | list``; these are symbols
        return cast(sp.Symbol, matrix[row, col])

    for head in range(n):
        point[at(hs.v, head, 0)] = cast(sp.Expr, hs.G[0, 0]) / n
        point[at(hs.s, head, 0)] = sp.Integer(1)
    for j, p in enumerate(masses, start=1):
        head, g = n + j - 1, cast(sp.Expr, hs.G[j, j])
        point[at(hs.s, head, 0)], point[at(hs.s, head, j)] = p, 1 - p
        point[at(hs.v, head, j)] = g / (1 - p)
        for other in range(n):
            point[at(hs.v, other, j)] = -g * p / ((1 - p) * n)
    return point


def weighted_flow(
    G: np.ndarray, w: np.ndarray, heads: int, power: int
) -> tuple[Callable, Callable]:
    """(field, loss) of the head system whose lag i stands for w_i exchangeable lags with equal
    logits; state ``(v.ravel(), theta.ravel())``, theta per lag, with any leading batch axes
    (independent systems). With w = 1 this is the field of ``theory.incremental.heads``; with
    equal logits inside each group it is exact."""
    h, n_lags = G.shape

    def unpack(y):
        lead = y.shape[:-1]
        v = y[..., : heads * h].reshape(*lead, heads, h)
        th = y[..., heads * h :].reshape(*lead, heads, n_lags)
        e = w * np.exp(th - th.max(-1, keepdims=True))
        return v, e / e.sum(-1, keepdims=True)  # s: mass of each lag group

    def field(t, y):
        v, s = unpack(y)
        sig = s / w  # mass of one lag of the group
        R = G - np.swapaxes(v, -1, -2) @ sig
        g = v @ R  # R^T v_k, per lag
        if power == 2:  # J(s) over the T single lags: sig_i (g_i - sum_l s_l g_l)
            g = sig * (g - (s * g).sum(-1, keepdims=True))
        lead = y.shape[:-1]
        dv = (s @ np.swapaxes(R, -1, -2)).reshape(*lead, -1)
        return np.concatenate([dv, g.reshape(*lead, -1)], -1)

    def loss(y):
        v, s = unpack(y)
        return 0.5 * (w * ((G - np.swapaxes(v, -1, -2) @ (s / w)) ** 2)).sum((-1, -2))

    return field, loss


def _crossings(field, loss, y0, levels, t_max: float) -> np.ndarray:
    """Times each of the systems ``y0`` (B x n) first falls below each of ``levels`` (B x K;
    nan if not by t_max). The B systems are independent and integrated as one, so that a few
    reference draws cost about one solve of Python overhead: the band of the block-diagonal
    Jacobian is given to LSODA, and each system's crossings are its own events (the batched
    loss is computed once per evaluated state)."""
    y0 = np.atleast_2d(np.asarray(y0, float))
    B, n = y0.shape
    levels = np.asarray(levels, float)
    seen: dict = {}

    def losses(t, y):
        key = (t, y.tobytes())
        if key not in seen:
            seen.clear()
            seen[key] = loss(y.reshape(B, n))
        return seen[key]

    events = []
    for b in range(B):
        for level in levels:

            def event(t, y, b=b, level=level):
                return losses(t, y)[b] - level

            event.direction = -1  # type: ignore[attr-defined]
            events.append(event)

    # stop once every system is past its last crossing: a hair below it, since a stop at the
    # crossing itself would tie with that system's own event and could hide it
    def done(t, y):
        return losses(t, y).max() - levels[-1] * (1 - 1e-9)

    done.terminal = True  # type: ignore[attr-defined]
    done.direction = -1  # type: ignore[attr-defined]
    band = {} if B == 1 else {"lband": n - 1, "uband": n - 1}
    sol = solve_ivp(
        lambda t, y: field(t, y.reshape(B, n)).ravel(),
        (0.0, t_max),
        y0.ravel(),
        method="LSODA",
        events=[*events, done],
        rtol=RTOL,
        atol=ATOL,
        **band,
    )
    hits = [te[0] if len(te) else math.nan for te in sol.t_events[:-1]]
    return np.array(hits).reshape(B, len(levels))


def covers(setting: HeadSetting) -> bool:
    """Whether the later-stage predictors apply: singleton blocks in decreasing importance."""
    m = setting.importance_values
    return all(b == 1 for b in setting.blocks) and all(a > b for a, b in zip(m, m[1:]))


def _check_singleton(setting: HeadSetting) -> None:
    """Singleton blocks in decreasing importance: lag j is block j and is learned in stage j+1."""
    require(
        all(b == 1 for b in setting.blocks),
        "blocks",
        setting.blocks,
        "singleton blocks (the later-stage predictors are derived for them only)",
    )
    m = setting.importance_values
    require(
        all(a > b for a, b in zip(m, m[1:])),
        "importances",
        m,
        "strictly decreasing importances (m > 1): the ladder is then the lag order",
    )


def _lumped_window(setting: HeadSetting, levels: list[float]):
    """(field, loss, loss midpoints) of the H heads on the h target lags plus one lag of
    multiplicity T - h for the empty ones."""
    _check_singleton(setting)
    H, h, T = setting.heads, setting.h, setting.window
    G = np.zeros((h, h + 1))
    G[:, :h] = setting.target()[:, :h]
    w = np.array([1.0] * h + [float(T - h)])
    field, loss = weighted_flow(G, w, H, METRIC_POWER[setting.metric])
    lv = np.asarray(levels, float)
    return field, loss, 0.5 * (lv[:-1] + lv[1:])


def own_start_stage_times(
    setting: HeadSetting, theta0: np.ndarray, levels: list[float], t_max: float
) -> np.ndarray:
    """``OWN_START_RULE``: predicted t_1..t_K of the run that starts from the logits ``theta0``
    (H x T, values zero): the lumped window with the empty lags' group at the log-mean-exp of
    their logits (their total mass); nan past ``t_max``."""
    H, h = setting.heads, setting.h
    field, loss, mids = _lumped_window(setting, levels)
    theta0 = np.asarray(theta0, float)
    rest = theta0[:, h:]
    top = rest.max(1)
    theta = np.concatenate(
        [theta0[:, :h], (top + np.log(np.mean(np.exp(rest - top[:, None]), 1)))[:, None]], 1
    )
    y0 = np.concatenate([np.zeros(H * h), theta.ravel()])
    return _crossings(field, loss, y0, mids, t_max)[0]


def apriori_stage_times(
    setting: HeadSetting,
    eps: float,
    levels: list[float],
    t_max: float,
    draws: tuple[int, ...] = REFERENCE_DRAWS,
) -> np.ndarray:
    """``APRIORI_RULE``: predicted t_1..t_K from the parameters, eps and the derived plateau
    levels L_0..L_K (``simulate.incremental.head_ode.plateau_levels``); nan past ``t_max``."""
    H, h = setting.heads, setting.h
    field, loss, mids = _lumped_window(setting, levels)
    y0 = np.zeros((len(draws), H * h + H * (h + 1)))
    for row, seed in zip(y0, draws, strict=True):
        # the empty lags' noise averages out over T - h lags: only the target lags keep it
        theta = np.zeros((H, h + 1))
        theta[:, :h] = eps * np.random.default_rng(seed).standard_normal((H, h))
        row[H * h :] = theta.ravel()
    times = _crossings(field, loss, y0, mids, t_max)
    # a draw that has not reached a stage by t_max is later than t_max, not missing
    median = np.median(np.nan_to_num(times, nan=math.inf), axis=0)
    return np.where(np.isfinite(median), median, math.nan)


def sequential_stage_time(
    setting: HeadSetting,
    k: int,
    s: np.ndarray,
    v: np.ndarray,
    t_prev: float,
    t_max: float = 1e5,
) -> float:
    """``SEQUENTIAL_RULE``: predicted t_k (k >= 2) from the attention ``s`` (H x T) and values
    ``v`` (H x h) at the measured t_{k-1}; blocks in order of importance (lag j = block j)."""
    _check_singleton(setting)
    H, T = setting.heads, setting.window
    require(2 <= k <= min(H, setting.h), "k", k, f"a later stage in [2, {min(H, setting.h)}]")
    n = H - k + 2
    j = k - 1
    group = np.argsort(-s[:, 0], kind="stable")[:n]
    sg = s[group]
    rest = 1.0 - sg[:, 0] - sg[:, j]
    w = np.array([1.0, 1.0, float(T - 2)])
    logits = np.log(np.stack([sg[:, 0], sg[:, j], rest / w[2]], 1))
    m = setting.importance_values
    G = np.zeros((2, 3))
    G[0, 0], G[1, 1] = m[0], m[j]
    values = np.stack([v[group, 0], v[group, j]], 1)
    field, loss = weighted_flow(G, w, n, METRIC_POWER[setting.metric])
    y0 = np.concatenate([values.ravel(), logits.ravel()])
    # the face starts at loss ~ m_k^2 / 2 (lag k unexplained) and ends at 0: its midpoint
    dt = _crossings(field, loss, y0, [m[j] ** 2 / 4], t_max)[0, 0]
    return t_prev + float(dt)


def sequential_run_times(
    setting: HeadSetting, ts: np.ndarray, s: np.ndarray, v: np.ndarray, crossings: np.ndarray
) -> np.ndarray:
    """``SEQUENTIAL_RULE`` along one trajectory: t_1..t_K with t_1 nan and each t_k (k >= 2)
    predicted from the saved state (``s`` (time, H, T), ``v`` (time, H, h) at times ``ts``)
    nearest the measured t_{k-1} (``crossings``, the loss-midpoint times; nan: not reached)."""
    times = np.full(len(crossings), math.nan)
    for k in range(2, len(crossings) + 1):
        if np.isfinite(crossings[k - 2]):
            n = int(np.argmin(np.abs(ts - crossings[k - 2])))
            times[k - 1] = sequential_stage_time(setting, k, s[n], v[n], float(ts[n]))
    return times


def carried_vertex_times(setting: HeadSetting, eps: float, t1: float, t1_closed: float) -> list:
    """``CARRIED_VERTEX_RULE`` (replicator): t_1..t_K of the vertex law of ``predict_stages`` with
    each lag's split amplitude carried through the earlier plateaus. Kept as the tested
    hypothesis: it misses the mass drop during each transition (module docstring)."""
    _check_singleton(setting)
    H, T = setting.heads, setting.window
    mt = setting.importance_values
    K = min(H, setting.h)
    mass = {j: math.exp(mt[j] ** 2 * t1_closed**2 / (2 * T)) / (2 * (T - 1)) for j in range(1, K)}
    log_amp = dict.fromkeys(range(K), math.log(eps))
    times = [t1]
    for k in range(2, K + 1):
        j, n = k - 1, H - k + 2
        c = abs(vertex_decay_coefficient(n, mt[0], mt[j]))
        kappa, tau0 = mt[j] ** 2 / c, 1 / (c * mass[j])
        dt = (math.sqrt(tau0) - log_amp[j] / (2 * math.sqrt(kappa))) ** 2 - tau0
        for jj in range(j + 1, K):
            cc = abs(vertex_decay_coefficient(n, mt[0], mt[jj]))
            kk, t0 = mt[jj] ** 2 / cc, 1 / (cc * mass[jj])
            log_amp[jj] += 2 * math.sqrt(kk) * (math.sqrt(t0 + dt) - math.sqrt(t0))
            mass[jj] = 1 / (1 / mass[jj] + cc * dt)
        times.append(times[-1] + dt)
    return times
