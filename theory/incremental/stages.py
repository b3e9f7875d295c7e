"""Predicted stages of the reduced head system (spec ``incremental.md`` §5.3, §5.6, §5.7).

Stage 1, escape from uniform attention (§5.6, corrected). While values are small they grow as
``v_j = m_j ||alpha_I(j)||_1 t / T``, which drives the block-1 logits at the block-mean rate
``Delta(t) = m_1^2 ||alpha_I(1)||_1^2 t / (b T)``. Lumping block 1 (mass ``p``, ``b`` lags) against
the
other ``T - b`` lags gives ``p' = g(p) Delta(t)`` with ``g`` derived below from ``J(s)``
(replicator)
or ``J(s)^2`` (logit); the predicted stage-1 time is the time at which ``p = 1/2``:
``int_{b/T}^{1/2} dp / g(p) = m_1^2 ||alpha||_1^2 t_1^2 / (2 b T)``. For the replicator this is the
spec's ``t_1^(A)``; for the logit metric the spec's constant-``J`` estimate is replaced by the exact
lumped integral (the spec's value is ~1.8x too late at the paper setting). Both forms neglect the
saturation of the values; ``lumped_symmetric_field`` keeps it (2-D system, integrated in
``simulate.incremental.lumped_escape``), and that is the stage-1 prediction the figures use.

Later stages (singleton blocks). Every clustered fixed point is a vertex of the simplices and its
Jacobian is nilpotent in the head-splitting directions (spectrum: zeros and the value relaxation
rates), so no escape rate ``lambda`` exists and the spec's ``ln(1/eps)/lambda`` law does not hold.
Instead (centre-manifold reduction, derived here, checked numerically in the tests):
  * the symmetric off-vertex mass of lag i decays algebraically, ``s_i' = c_i s_i^2`` (replicator)
    with ``c_i = -(m_1^2 - m_i^2)/n`` for a group of n heads (obtained below as a sympy series of
    the exact field); under the logit metric the off-vertex masses decay self-similarly,
    ``s_i^-2' = 2 T |c_i|``;
  * a zero-sum head-splitting perturbation of amplitude ``a`` obeys ``a'' = m_i^2 s_i(t) a``
    (replicator) or grows at rate ``sqrt(2) m_i s_i(t)`` (logit), so ``ln a`` grows like
    ``2 sqrt(kappa t)`` with ``kappa = m_i^2 / |c_i|``: the plateau lasts ``~ (ln 1/eps)^2 / (4
    kappa)``
    (replicator) or ``T (ln 1/eps)^2 / (4 kappa)`` (logit), quadratic in ``ln(1/eps)``.
Stage k >= 2 is predicted by integrating that growth from the previous stage time with the group
of ``n = H - k + 2`` heads still on the most important block and amplitude ``eps``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import cast

import sympy as sp

from theory.incremental.heads import METRIC_POWER, HeadSetting, HeadSystem, head_system

p_sym, b_sym, T_sym = sp.symbols("p b T", positive=True)
u_sym = sp.Symbol("u", real=True)
H_sym, m1_sym, a_sym = sp.symbols("H m_1 a", positive=True)


def _lumped_metric(f_in: sp.Expr, f_out: sp.Expr, metric: str) -> tuple[sp.Expr, sp.Expr]:
    """J(s)^n f on vectors constant on the lead block (mass p over b lags) and on the other
    T - b lags (mass 1 - p shared equally)."""
    b, T, p = b_sym, T_sym, p_sym
    s_in, s_out = p / b, (1 - p) / (T - b)
    for _ in range(METRIC_POWER[metric]):
        mean = b * s_in * f_in + (T - b) * s_out * f_out
        f_in, f_out = s_in * (f_in - mean), s_out * (f_out - mean)
    return f_in, f_out


def lumped_mass_rate(metric: str) -> sp.Expr:
    """g(p) with ``p' = g(p) Delta``: J(s)^n applied to a drive Delta on a block of b lags, the
    other T - b lags sharing the remaining mass equally."""
    f_in, _ = _lumped_metric(sp.Integer(1), sp.Integer(0), metric)
    return cast(sp.Expr, sp.factor(sp.simplify(b_sym * f_in)))


def lumped_symmetric_field(metric: str) -> tuple[sp.Expr, sp.Expr]:
    """(p', u') of H equal heads when only the lead block is present (the other rows of G set to 0):
    attention mass p spread uniformly over the block's b lags (weight a each) and value u on its
    feature. Block and complement are each invariant classes, so this 2-D system is exact on that
    subspace; it keeps what the closed form drops, the saturation of the value (P is not small)."""
    b, T, p, u, H = b_sym, T_sym, p_sym, u_sym, H_sym
    s_in, s_out = p / b, (1 - p) / (T - b)
    r_in, r_out = m1_sym * a_sym - H * u * s_in, -H * u * s_out  # residual on the lead feature
    du = b * r_in * s_in + (T - b) * r_out * s_out
    f_in, _ = _lumped_metric(r_in * u, r_out * u, metric)
    return sp.simplify(b * f_in), sp.expand(du)


def escape_integral(metric: str) -> sp.Expr:
    """int_{b/T}^{1/2} dp / g(p), in closed form."""
    q = sp.Symbol("q", positive=True)  # q = T - b > 0 keeps sympy on the real branch of log
    g = lumped_mass_rate(metric).subs(T_sym, b_sym + q)
    integral = sp.integrate(1 / g, (p_sym, b_sym / (b_sym + q), sp.Rational(1, 2)))
    return sp.simplify(sp.expand_log(sp.simplify(integral), force=True).subs(q, T_sym - b_sym))


@cache
def first_escape_time_expr(metric: str) -> sp.Expr:
    """t_1 in symbols T, b (block-1 size), m_1 and a = ||alpha_I(1)||_1 / b (mean weight)."""
    m1, a = sp.symbols("m_1 a", positive=True)
    t = sp.sqrt(2 * b_sym * T_sym * escape_integral(metric) / (m1**2 * a**2 * b_sym**2))
    return sp.simplify(t)


def first_escape_time(setting: HeadSetting, lead: int = 0) -> float:
    m1, a = sp.symbols("m_1 a", positive=True)
    lags = setting.lags(lead)
    b = len(lags)
    mean_alpha = sum(setting.alpha_values[i] for i in lags) / b
    expr = first_escape_time_expr(setting.metric)
    return float(
        expr.subs(
            {T_sym: setting.window, b_sym: b, m1: setting.importance_values[lead], a: mean_alpha}
        )
    )


@cache
def vertex_decay_coefficient(group: int, m_lead: float, m_off: float) -> float:
    """c in ``s_i' = c s_i^2``: symmetric group of ``group`` heads at the vertex of a lead lag of
    strength ``m_lead``, with an off-vertex lag of strength ``m_off``, under the replicator metric.

    Derived as a series of the exact field on the two-lag face (faces of the simplex are invariant),
    with values at their quasi-static optimum ``v = G s / (n ||s||^2)``."""
    hs = HeadSystem(
        HeadSetting(
            heads=group, blocks=(1, 1), window=2, importances=(m_lead, m_off), metric="replicator"
        )
    )
    x = sp.Symbol("x", positive=True)
    s = sp.Matrix([1 - x, x])
    G = hs.G.xreplace(hs.parameter_values())
    v = G * s / (group * (s.T * s)[0])
    point = {**hs.parameter_values()}
    for k in range(group):
        # sympy types matrix entries as ``MatrixElement | list``; these are symbols / expressions
        point.update({cast(sp.Symbol, hs.s[k, 0]): s[0], cast(sp.Symbol, hs.s[k, 1]): s[1]})
        point.update({cast(sp.Symbol, hs.v[k, j]): v[j] for j in range(2)})
    ds = cast(sp.Expr, hs.flow("replicator").field[group * 2 + 1]).xreplace(point)
    # one fraction is enough for the series (simplify gave the same coefficients at 7x the cost)
    series = sp.series(sp.together(ds), x, 0, 3).removeO()
    assert sp.simplify(series.coeff(x, 1)) == 0
    return float(series.coeff(x, 2))


@dataclass(frozen=True)
class StagePrediction:
    stage: int
    """k = 1..min(H, h)."""
    block: int
    """0-based index of the block captured in this stage."""
    plateau_before: float
    plateau_after: float
    time: float | None
    """predicted time of the stage (inf: never, None: not derived for this setting)."""
    rule: str


def predict_stages(
    setting: HeadSetting, eps: float, t1: float | None = None
) -> list[StagePrediction]:
    """Predicted stage sequence, plateau levels and times for a head-splitting noise ``eps``
    (standard deviation of the initial logits).

    ``t1`` replaces the closed-form stage-1 time (e.g. by the lumped symmetric system integrated in
    ``simulate.incremental.lumped_escape``); the plateau-entry masses of the vertex law stay those
    of the
    closed-form early-time solution."""
    hs = head_system(setting)
    vals = hs.parameter_values()
    levels = [float(cast(sp.Expr, L.xreplace(vals))) for L in hs.plateau_levels()]
    ladder = hs.ladder()
    T, H = setting.window, setting.heads
    mt = [
        setting.importance_values[j] * setting.alpha_values[setting.lags(j)[0]]
        for j in range(setting.h)
    ]
    singleton = all(b == 1 for b in setting.blocks)
    lead = ladder[0]
    t_closed = first_escape_time(setting, lead)
    rule = "lead-block attention mass reaches 1/2: " + (
        "closed-form early-time integral" if t1 is None else "lumped symmetric system"
    )
    t1 = t_closed if t1 is None else t1
    out = [StagePrediction(1, lead, levels[0], levels[1], t1, rule)]
    if not singleton:
        for k in range(2, hs.stage_count() + 1):
            out.append(
                StagePrediction(
                    k,
                    ladder[k - 1],
                    levels[k - 1],
                    levels[k],
                    None,
                    "not derived: vertex law needs singleton blocks",
                )
            )
        return out
    # Logit gaps accumulated by the time p = 1/2 set each off-vertex mass at the plateau entry.
    gap_scale = t_closed**2 / (2 * T) / (1 if setting.metric == "replicator" else T - 1)
    mass = {j: math.exp(mt[j] ** 2 * gap_scale) / (2 * (T - 1)) for j in ladder[1:]}
    t_prev, L = t1, (math.log(1 / eps) if eps > 0 else math.inf)
    for k in range(2, hs.stage_count() + 1):
        j, n = ladder[k - 1], H - k + 2
        c = vertex_decay_coefficient(n, mt[lead], mt[j])
        if setting.metric == "replicator":
            kappa = mt[j] ** 2 / abs(c)
            tau0 = 1 / (abs(c) * mass[j])
            dt = (math.sqrt(tau0) + L / (2 * math.sqrt(kappa))) ** 2 - tau0
            rule = "vertex law: ln(1/eps) = 2 sqrt(kappa)(sqrt(tau0+dt) - sqrt(tau0))"
        else:
            A, B = mass[j] ** -2, 2 * T * abs(c)
            dt = ((math.sqrt(A) + B * L / (2 * math.sqrt(2) * mt[j])) ** 2 - A) / B
            rule = "vertex law (logit): ln(1/eps) = int sqrt(2) m s(t) dt, s^-2' = 2T|c|"
        t_k = t_prev + dt
        if not math.isfinite(t_k):  # eps = 0: the heads never split (symmetric stall)
            out += [
                StagePrediction(
                    kk,
                    ladder[kk - 1],
                    levels[kk - 1],
                    levels[kk],
                    math.inf,
                    "exact symmetry: the head-splitting mode is never excited",
                )
                for kk in range(k, hs.stage_count() + 1)
            ]
            return out
        # the masses of the lags still to come keep decaying in the group until t_k
        for jj in ladder[k:]:
            cc = vertex_decay_coefficient(n, mt[lead], mt[jj])
            if setting.metric == "replicator":
                mass[jj] = 1 / (1 / mass[jj] + abs(cc) * dt)
            else:
                mass[jj] = (mass[jj] ** -2 + 2 * T * abs(cc) * dt) ** -0.5
        out.append(StagePrediction(k, j, levels[k - 1], levels[k], t_k, rule))
        t_prev = t_k
    return out


def asymptotic_sqrt_slope(setting: HeadSetting) -> float:
    """Derived d sqrt(t_2 - t_1) / d ln(1/eps) as eps -> 0: 1/(2 sqrt(kappa)), times sqrt(T) under
    the logit metric, kappa = m_2^2 / |c_2| (``vertex_decay_coefficient``)."""
    m = setting.importance_values
    c = vertex_decay_coefficient(setting.heads, m[0], m[1])
    slope = 1 / (2 * math.sqrt(m[1] ** 2 / abs(c)))
    return slope * (math.sqrt(setting.window) if setting.metric == "logit" else 1.0)
