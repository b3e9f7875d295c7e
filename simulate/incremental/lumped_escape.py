"""Stage-1 time of the reduced head system from the lumped symmetric system of
``theory.incremental.stages.lumped_symmetric_field`` (spec incremental.md §5.6): the 2-D ODE for the
lead-block attention mass p and value u is compiled with ``sympy.lambdify`` and integrated by
diffrax in float64 up to the event p = 1/2. No closed form is known once values saturate. The
system is stiff for large importances (the value u relaxes on a time ~1/m_1^2 while p escapes
slowly; Tsit5 ran out of 100 000 steps at m = 300), hence the implicit Kvaerno5.
"""

from __future__ import annotations

from functools import cache

import diffrax
import jax
import jax.numpy as jnp
import optimistix as optx
import sympy as sp

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
"""the lumped system's parameters, arguments of the compiled solve (one program per metric)."""


@cache
def _escape_solver(metric: str):
    """The jitted solve ``(y0, params, t_max) -> (event time, event hit)`` for ``metric``: the
    parameters are arguments, so one compile serves every setting (and the persistent cache
    serves the next process)."""
    dp, du = lumped_symmetric_field(metric)
    f = sp.lambdify((p_sym, u_sym, *PARAMETERS), (dp, du), modules="jax")
    term = diffrax.ODETerm(lambda t, y, args: jnp.stack(f(y[0], y[1], *args)))
    event = diffrax.Event(
        lambda t, y, args, **kw: y[0] - 0.5, root_finder=optx.Newton(rtol=1e-10, atol=1e-10)
    )

    @jax.jit
    def solve(y0, params, t_max):
        sol = diffrax.diffeqsolve(
            term,
            diffrax.Kvaerno5(),
            0.0,
            t_max,
            None,
            y0,
            args=tuple(params),
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
            event=event,
            max_steps=100_000,
        )
        assert sol.ts is not None  # the default SaveAt(t1=True) saves the final time
        return sol.ts[-1], sol.event_mask

    return solve


def lumped_escape_time(setting: HeadSetting, lead: int = 0, t_max: float = 1e6) -> float:
    """Time at which the lead-block attention mass of the lumped symmetric system reaches 1/2."""
    lags = setting.lags(lead)
    params = jnp.array(
        [
            setting.heads,
            setting.window,
            len(lags),
            setting.importance_values[lead],
            sum(setting.alpha_values[i] for i in lags) / len(lags),
        ],
        dtype=float,
    )
    y0 = jnp.array([len(lags) / setting.window, 0.0])
    t, hit = _escape_solver(setting.metric)(y0, params, t_max)
    return float(t) if bool(hit) else float("inf")
