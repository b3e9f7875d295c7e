"""Stage-1 time of the reduced head system from the lumped symmetric system of
``theory.incremental.stages.lumped_symmetric_field`` (spec incremental.md §5.6): the 2-D ODE for the
lead-block attention mass p and value u is compiled with ``sympy.lambdify`` and integrated by
diffrax in float64 up to the event p = 1/2. No closed form is known once values saturate. The
system is stiff for large importances (the value u relaxes on a time ~1/m_1^2 while p escapes
slowly; Tsit5 ran out of 100 000 steps at m = 300), hence the implicit Kvaerno5.
"""

from __future__ import annotations

import diffrax
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


def lumped_escape_time(setting: HeadSetting, lead: int = 0, t_max: float = 1e6) -> float:
    """Time at which the lead-block attention mass of the lumped symmetric system reaches 1/2."""
    lags = setting.lags(lead)
    numbers = {
        H_sym: setting.heads,
        T_sym: setting.window,
        b_sym: len(lags),
        m1_sym: setting.importance_values[lead],
        a_sym: sum(setting.alpha_values[i] for i in lags) / len(lags),
    }
    dp, du = (e.subs(numbers) for e in lumped_symmetric_field(setting.metric))
    f = sp.lambdify((p_sym, u_sym), (dp, du), modules="jax")
    term = diffrax.ODETerm(lambda t, y, args: jnp.stack(f(y[0], y[1])))
    event = diffrax.Event(
        lambda t, y, args, **kw: y[0] - 0.5, root_finder=optx.Newton(rtol=1e-10, atol=1e-10)
    )
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Kvaerno5(),
        0.0,
        t_max,
        None,
        jnp.array([len(lags) / setting.window, 0.0]),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        event=event,
        max_steps=100_000,
    )
    assert sol.ts is not None  # the default SaveAt(t1=True) saves the final time
    return float(sol.ts[-1]) if bool(sol.event_mask) else float("inf")
