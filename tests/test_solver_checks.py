"""Grid-saving diffrax solves without host callbacks (``simulate.solver_checks``): the head ODE's
trajectory and the focus-dilution flow reach JAX's persistent compilation cache, equinox's
checks elsewhere still raise, and the checks the solves no longer make at run time are made
before them."""

import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulate.focus_dilution.flow import solve_flow
from simulate.incremental import head_ode
from simulate.solver_checks import grid_checks_without_callback
from theory.incremental.heads import METRIC_POWER, HeadSetting
from theory.validation import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SETTING = HeadSetting(heads=2, blocks=(1, 1), window=5)
PI = np.array([0.4, 0.3, 0.2, 0.1])
P = 0.5 * np.eye(4) + 0.5 * np.outer(np.ones(4), PI)


def _trajectory_text(n_save: int) -> str:
    """The lowered text of a batch of head-ODE trajectories saved at ``n_save`` times, traced
    afresh: jit keeps one trace per function and signature (diffeqsolve's keyed by its term, a
    new one here; equinox's check by its message and shapes, hence a grid length per trace)."""
    B = 2
    theta0 = head_ode.initial_logits(SETTING, np.full(B, 1e-2), np.arange(B))
    G = jnp.asarray(np.broadcast_to(SETTING.target(), (B, SETTING.h, SETTING.window)))
    y0 = (jnp.zeros((B, SETTING.heads, SETTING.h)), theta0)
    tied = np.zeros(B, bool)
    power = float(METRIC_POWER[SETTING.metric])

    def batch(G, y0, tied, ts, power):
        return jax.vmap(head_ode._trajectory_one, in_axes=(0, 0, 0, None, None))(
            G, y0, tied, ts, power
        )

    return jax.jit(batch).lower(G, y0, tied, head_ode.log_grid(30.0, n_save), power).as_text()


def test_trajectory_program_has_no_host_callback():
    with grid_checks_without_callback():
        assert "callback" not in _trajectory_text(51)
    # control: traced as diffrax and equinox default to, the grid checks are host callbacks
    assert "callback" in _trajectory_text(52)


def test_other_equinox_checks_still_raise():
    before = eqx._errors.EQX_ON_ERROR  # type: ignore[attr-defined]
    with grid_checks_without_callback():
        pass
    assert eqx._errors.EQX_ON_ERROR == before  # type: ignore[attr-defined]

    @jax.jit
    def checked(x):
        return eqx.error_if(x, x < 0, "negative")

    with pytest.raises(Exception, match="negative"):
        jax.block_until_ready(checked(jnp.asarray(-1.0)))


def test_horizon_without_an_increasing_grid_is_rejected():
    with pytest.raises(ConfigError, match="t_max"):
        head_ode.solve(SETTING, [1e-2], [0], t_max=0.005, n_save=20)


def test_unreachable_grid_is_rejected(monkeypatch):
    # what throw=True raised inside the program is now a one-line error after it; the step
    # budget is read when the solve is traced, so the grid's length (23) is this test's own
    import simulate.focus_dilution.flow as flow

    monkeypatch.setattr(flow, "MAX_STEPS", 3)
    with pytest.raises(ConfigError, match="steps ran out"):
        solve_flow(PI, P, 1e-2, 0, np.linspace(0.0, 50.0, 23), m=2, m_k=2)


def test_solves_reach_the_persistent_cache(tmp_path):
    """A fresh process with an empty cache stores the head ODE's trajectory and crossing
    programs and the flow's (``simulate.program_store``) and writes their compiled calls into
    the compilation cache; a second process finds every program there and writes nothing."""
    script = (
        "import numpy as np\n"
        "from simulate.runtime import configure\n"
        "configure()\n"
        "from simulate.focus_dilution.flow import solve_flow\n"
        "from simulate.incremental.head_ode import solve\n"
        "from theory.incremental.heads import HeadSetting\n"
        "solve(HeadSetting(heads=2, blocks=(1, 1), window=5), [1e-2], [0], 30.0, n_save=50)\n"
        "pi = np.array([0.4, 0.3, 0.2, 0.1])\n"
        "P = 0.5 * np.eye(4) + 0.5 * np.outer(np.ones(4), pi)\n"
        "solve_flow(pi, P, 1e-2, 0, np.linspace(0.0, 5.0, 20), m=2, m_k=2)\n"
    )
    env = {**os.environ, "STAGEWISE_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
    written = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(list((tmp_path / "exported").glob("*.jaxexport"))) == 3
    assert len([name for name in written if name.startswith("jit_call-")]) == 3
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == written
