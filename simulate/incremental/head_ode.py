"""Diffrax integration of the reduced head system (spec incremental.md §5.2; figure
incremental-ode).

Float64, Tsit5 with a PID controller, saves on a log-spaced grid, and the stage crossings located
exactly by diffrax events with a Newton root finder. One compiled program serves a whole batch of
(target G, noise eps, seed) triples through ``jax.vmap``, the symmetric subspace among them, and
both metrics: the metric and the tying are arguments of the program, not constants of it.

Symmetry breaking (project convention, documented in the README): ``v(0) = 0`` and logits
``theta_k(0) = eps * xi_k`` with ``xi_k ~ N(0, I)``; to first order this is the paper's
``s_k(0) = 1/T + (eps/T) xi_k``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from numpy.typing import ArrayLike

from simulate import program_store, side_by_side
from simulate.incremental.head_field import entry_losses, logit_field, loss, tie_heads
from simulate.measure.stages import midpoints
from simulate.solver_checks import grid_checks_without_callback
from theory.incremental.heads import METRIC_POWER, HeadSetting, head_system
from theory.validation import require

RTOL, ATOL = 1e-9, 1e-12
MAX_STEPS = 1_000_000


@dataclass
class OdeBatch:
    """Solutions of a batch of B trajectories saved at times ``ts`` (numpy arrays)."""

    ts: np.ndarray  # (n,)
    v: np.ndarray  # (B, n, H, h)
    s: np.ndarray  # (B, n, H, T)
    loss: np.ndarray  # (B, n)
    entry_loss: np.ndarray  # (B, n, h, T) per-(feature, lag) loss
    crossings: np.ndarray  # (B, K) event times of the loss midpoints, nan if not reached
    compile_seconds: float
    run_seconds: float


def plateau_levels(setting: HeadSetting) -> list[float]:
    """The derived plateau levels L_0..L_K of ``theory.incremental.heads`` in numbers."""
    return [float(L) for L in head_system(setting).plateau_values()]


def initial_logits(setting: HeadSetting, eps: np.ndarray, seeds: np.ndarray) -> jnp.ndarray:
    """theta(0) = eps * xi, one standard normal xi per (eps, seed) pair; shape (B, H, T)."""
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, dtype=jnp.uint32))
    xi = jax.vmap(lambda k: jax.random.normal(k, (setting.heads, setting.window)))(keys)
    return jnp.asarray(eps, jnp.float64)[:, None, None] * xi


def log_grid(t_max: float, n: int, t_min: float = 1e-2) -> np.ndarray:
    return np.concatenate([[0.0], np.geomspace(t_min, t_max, n - 1)])


def _term(power, tied) -> diffrax.ODETerm:
    # args = (G, level): the level is read by the crossing events only
    return diffrax.ODETerm(lambda t, y, args: logit_field(args[0], y[0], y[1], power, tied))


def _trajectory_one(G, y0, tied, ts, power):
    """The state at each of ``ts`` (``ts[0]`` the start): one solve saving on the grid.

    Traced under ``simulate.solver_checks.grid_checks_without_callback``, the program has no
    host callback and the persistent compilation cache keeps it. No progress meter: diffrax's
    is a host callback too (the program compiled in every process, 3.3 s of compile in a warm
    ``incremental-ode --quick`` against 2.2 s) for a solve of 0.1-0.2 s. One solve per grid
    interval restarted the solver at every save: 0.24 s against 0.075 s for the Fig. 10
    trajectory (2000 saves, 1424 steps), 6.0 s against 2.4 s for 64 seeds (``python -m
    benchmarks --only ode``)."""
    sol = diffrax.diffeqsolve(
        _term(power, tied),
        diffrax.Tsit5(),
        ts[0],
        ts[-1],
        None,
        y0,
        args=(G, 0.0),
        stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
        saveat=diffrax.SaveAt(ts=ts),
        max_steps=MAX_STEPS,
        throw=False,  # checked by the caller; raising would add another host callback
    )
    return sol.ys, sol.result == diffrax.RESULTS.successful


@jax.jit
def _trajectory_batch(G, y0, tied, ts, power):
    return jax.vmap(_trajectory_one, in_axes=(0, 0, 0, None, None))(G, y0, tied, ts, power)


def _crossings_one(G, y0, tied, levels, t_max, power):
    """Times at which the loss first falls below each of ``levels`` (nan if not by t_max), each
    found by an event solve from the previous crossing."""
    term = _term(power, tied)
    controller = diffrax.PIDController(rtol=RTOL, atol=ATOL)

    def below_level(t, y, args, **kwargs):
        G_, level = args
        v, theta = (tie_heads(a, tied) for a in y)
        return loss(G_, v, jax.nn.softmax(theta, -1)) - level

    event = diffrax.Event(below_level, root_finder=optx.Newton(rtol=1e-10, atol=1e-10))

    def next_crossing(carry, level):
        t0, y = carry
        t0 = jnp.minimum(t0, t_max * (1 - 1e-12))
        sol = diffrax.diffeqsolve(
            term,
            diffrax.Tsit5(),
            t0,
            t_max,
            None,
            y,
            args=(G, level),
            stepsize_controller=controller,
            max_steps=MAX_STEPS,
            event=event,
            saveat=diffrax.SaveAt(t1=True),
            throw=False,  # a solve that ends without its event is a level never crossed
        )
        # SaveAt(t1=True) always saves ts; with an event, event_mask is set (one event: a bool)
        assert sol.ts is not None and sol.event_mask is not None
        t_hit = sol.ts[-1]
        y_hit = jax.tree_util.tree_map(lambda a: a[-1], sol.ys)
        hit = sol.event_mask
        return (t_hit, y_hit), jnp.where(hit, t_hit, jnp.nan)

    _, crossings = jax.lax.scan(next_crossing, (jnp.asarray(0.0), y0), levels)
    return crossings


@jax.jit
def _crossings_batch(G, y0, tied, levels, t_max, power):
    return jax.vmap(_crossings_one, in_axes=(0, 0, 0, 0, None, None))(
        G, y0, tied, levels, t_max, power
    )


def solve(
    setting: HeadSetting,
    eps: ArrayLike,
    seeds: ArrayLike,
    t_max: float,
    n_save: int = 1500,
    targets: ArrayLike | None = None,
    levels: ArrayLike | None = None,
    symmetric: ArrayLike = False,
    theta0: ArrayLike | None = None,
) -> OdeBatch:
    """Integrate a batch: ``eps``, ``seeds`` (and optionally ``targets`` G, ``levels`` plateau
    levels)
    are given per trajectory; ``levels`` default to the derived plateau levels of ``setting``.

    ``symmetric`` (one flag, or one per trajectory) integrates the exact symmetric subspace (all
    heads equal, from v = theta = 0; eps and ``theta0`` unused there). ``theta0`` (B x H x T)
    replaces the noise draw (e.g. the logits a network's initialisation maps to)."""
    eps, seeds = np.atleast_1d(eps).astype(float), np.atleast_1d(seeds)
    B = max(len(eps), len(seeds))
    eps, seeds = np.broadcast_to(eps, (B,)), np.broadcast_to(seeds, (B,))
    tied = np.asarray(symmetric, bool)
    require(tied.size in (1, B), "symmetric", symmetric, f"one flag or one per trajectory ({B})")
    tied = np.broadcast_to(tied.ravel(), (B,))
    if targets is None:
        targets = np.broadcast_to(setting.target(), (B, setting.h, setting.window))
    if levels is None:
        levels = plateau_levels(setting)
    levels = np.asarray(levels, dtype=float)
    mids = np.broadcast_to(
        midpoints(levels.T).T if levels.ndim == 2 else midpoints(levels), (B, levels.shape[-1] - 1)
    )
    require(n_save >= 3, "n_save", n_save, "at least 3 saved times")
    grid = log_grid(t_max, n_save)
    # diffrax's own checks of the grid are traced without their callback: check it here
    require(bool(np.all(np.diff(grid) > 0)), "t_max", t_max, "a horizon above 0.01")
    theta0 = initial_logits(setting, eps, seeds) if theta0 is None else jnp.asarray(theta0)
    theta0 = jnp.where(tied[:, None, None], 0.0, theta0)
    G = jnp.asarray(targets)
    H = theta0.shape[1]
    y0 = (jnp.zeros((B, H, setting.h)), theta0)
    power = float(METRIC_POWER[setting.metric])
    trajectory_args = (G, y0, tied, grid, power)
    crossing_args = (G, y0, tied, jnp.asarray(mids), float(t_max), power)
    # the crossings run on a second device, beside the trajectory, where the run has one (the
    # same programs on the same batch, so the same numbers; 64 Fig. 10 trajectories: 1.57 s one
    # after the other, 0.87 s side by side)
    beside = side_by_side.devices()[-1]
    crossing_args = (*jax.device_put(crossing_args[:4], beside), *crossing_args[4:])
    t0 = time.perf_counter()
    with grid_checks_without_callback():
        trajectory = program_store.compiled(_trajectory_batch, trajectory_args)
    with side_by_side.pinned(beside):
        cross = program_store.compiled(_crossings_batch, crossing_args)
    t1 = time.perf_counter()
    crossings = cross(*crossing_args)
    (v, theta), reached = trajectory(*trajectory_args)
    # dispatch is asynchronous: the run ends when the trajectory and the crossings are computed
    crossings, v, theta, reached = jax.block_until_ready((crossings, v, theta, reached))
    t2 = time.perf_counter()
    require(
        bool(np.all(np.asarray(reached))),
        "t_max",
        t_max,
        f"a horizon the solver reaches (it stopped before t_max: its {MAX_STEPS} steps ran out "
        "or its step size underflowed)",
    )
    # a tied trajectory is its first head's (the others move with it but may round apart)
    v, theta = (jnp.where(tied[:, None, None, None], a[:, :, :1], a) for a in (v, theta))
    s = jax.nn.softmax(theta, -1)
    G = jnp.asarray(targets)[:, None]
    L = jax.vmap(jax.vmap(loss))(jnp.broadcast_to(G, v.shape[:2] + G.shape[2:]), v, s)
    E = jax.vmap(jax.vmap(entry_losses))(jnp.broadcast_to(G, v.shape[:2] + G.shape[2:]), v, s)
    return OdeBatch(
        grid,
        np.asarray(v),
        np.asarray(s),
        np.asarray(L),
        np.asarray(E),
        np.asarray(crossings),
        t1 - t0,
        t2 - t1,
    )
