"""Stage-1 time of the reduced head system from the lumped symmetric system of
``theory.incremental.stages.lumped_symmetric_field`` (spec incremental.md §5.6): the 2-D ODE for the
lead-block attention mass p and value u is compiled with ``sympy.lambdify`` (the field and its exact
Jacobian) and integrated in float64 up to the event p = 1/2. No closed form is known once values
saturate. The system is stiff for large importances (the value u relaxes on a time ~1/m_1^2 while p
escapes slowly; explicit Tsit5 ran out of 100 000 steps at m = 300), hence an implicit method.

It is scipy's Radau, not diffrax: one 2-D solve per setting takes milliseconds, where tracing and
compiling the diffrax solve (Kvaerno5 with a root-found event) took about 5 s in every process,
cache warm or not, half of ``stagewise run heads-gd``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp

from theory.incremental.heads import HeadSetting
from theory.incremental.stages import (
    H_sym,
    T_sym,
    a_sym,
    b_sym,
    lumped_symmetric_field,
    m1_sym,
    p_sym,
    u_sym,
)

PARAMETERS = (H_sym, T_sym, b_sym, m1_sym, a_sym)
"""the lumped system's parameters: heads H, window T, lead-block size b, importance m_1, mean
alpha a of the lead block."""


@cache
def _lumped_system(metric: str):
    """numpy ``(field, jacobian)`` of ``(p, u), parameters`` for ``metric``."""
    dp, du = lumped_symmetric_field(metric)
    state = (p_sym, u_sym)
    field = sp.lambdify((state, PARAMETERS), [dp, du], modules="numpy")
    jacobian = sp.lambdify(
        (state, PARAMETERS), sp.Matrix([dp, du]).jacobian(state), modules="numpy"
    )
    return field, jacobian


class _ReachesHalf:
    """scipy event p = 1/2, crossed upwards; it ends the solve."""

    terminal = True
    direction = 1.0

    def __call__(self, t: float, y: np.ndarray, params: tuple[float, ...]) -> float:
        return float(y[0] - 0.5)


def lumped_escape_time(setting: HeadSetting, lead: int = 0, t_max: float = 1e6) -> float:
    """Time at which the lead-block attention mass of the lumped symmetric system reaches 1/2
    (``inf`` if it does not by ``t_max``)."""
    field, jacobian = _lumped_system(setting.metric)
    lags = setting.lags(lead)
    params = (
        float(setting.heads),
        float(setting.window),
        float(len(lags)),
        float(setting.importance_values[lead]),
        float(sum(setting.alpha_values[i] for i in lags) / len(lags)),
    )
    sol = solve_ivp(
        lambda t, y, params: field(y, params),
        (0.0, t_max),
        [len(lags) / setting.window, 0.0],
        method="Radau",
        jac=lambda t, y, params: jacobian(y, params),
        rtol=1e-10,
        atol=1e-12,
        events=_ReachesHalf(),
        args=(params,),
    )
    if sol.status < 0:
        raise RuntimeError(f"lumped escape solve failed: {sol.message}")
    hits = sol.t_events[0] if sol.t_events is not None else np.empty(0)
    return float(hits[0]) if hits.size else float("inf")
