"""The reduced-flow numbers of the focus-dilution onset offsets (issue 17 item 3; spec
``focus_dilution.md`` §5.1-5.5; formulas in ``theory.focus_dilution.offsets``).

Three short integrations (diffrax, Tsit5, float64), each started from a probe amplitude
``PROBE`` so small that the stage begins in its linear regime:

* Stage I: the manifold flow from ``gamma = PROBE a``, ``beta = PROBE b`` without attention
  (``kappa = 0`` stays 0) to rest at ``theta_c^1``; the loss rule fires at ``T_I``, so
  ``a_I* = PROBE e^{sigma T_I}``. Along it ``ln G = int c(s) ds`` with ``c(s) = -gamma^T G_Phi
  gamma`` (the drive of ``q' = c(s) k``) gives ``ln G_I = ln G(t) - c (t - T_I)`` at rest.
* Stages II-III: the manifold flow from ``theta_c^1`` with ``kQ = kK = PROBE`` to rest at the
  Stage-IV point; ``a_II* = PROBE e^{c T_II}``, ``Delta_III = T_III - T_II``.
* Both carry the transverse linearisation ``z' = [[0, -B], [-B^T, 0]] z`` (``B`` of
  ``theory.focus_dilution.manifold.transverse_coupling``): Stage I from a basis of the neutral
  seeds, Stages II-III onward from where Stage I leaves them; projected on the Stage-IV mode ``r``
  at rest and extrapolated back to ``T_III`` at rate ``mu_IV``, they give the carry-over ``h``.
* Stage IV: the full flow restricted to the invariant subspace of two embedding directions and one
  key direction (``m = 2``, ``m_k = 1``: the manifold plus one transverse direction), from the
  Stages II-III start with a seed of Stage-IV amplitude ``A`` at ``T_III``; ``sigma_2(W0)`` reaches
  the rule's level at ``T_IV``, so ``a_IV* = A e^{mu_IV (T_IV - T_III)}``.
"""

from __future__ import annotations

import math
from functools import cache, partial
from typing import NamedTuple, cast

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from simulate import program_store
from simulate.focus_dilution.flow import flow_field, manifold_field, population_loss_mphi
from simulate.focus_dilution.measure import STAGE_FOUR_LEVEL, _crossing, stage_onsets
from simulate.solver_checks import grid_checks_without_callback
from theory.focus_dilution.manifold import rest_point, second_point_state
from theory.focus_dilution.offsets import (
    InitialAmplitudes,
    StageConstants,
    initial_amplitudes,
    offset_onsets,
    origin_neutral_projector,
    stage_four_mode,
)
from theory.focus_dilution.population import Parameters, attention, population_loss, validate_pi
from theory.focus_dilution.stages import (
    condensation_directions,
    stage_one_rate,
    stage_two_rate,
)
from theory.validation import require

PROBE = 1e-8
"""amplitude each reduced run starts its unstable mode from."""
REST_TOL = 1e-9
"""a reduced run stops where ``||manifold field|| <= REST_TOL`` (at rest: the integration error
of rtol 1e-10 keeps the field near 1e-10)."""
MAX_STEPS = 200_000
STAGE_FOUR_SAMPLES = 20_001


# --- the reduced flow with its transverse linearisation -------------------------------------------
def _gradients(x, pi, P):
    d = pi.shape[0]
    gamma, beta, kq, kk = x[:d], x[d : 2 * d], x[2 * d], x[2 * d + 1]
    M, Phi = jnp.outer(gamma, beta), kq * kk * jnp.outer(gamma, gamma)
    return jax.grad(population_loss_mphi, argnums=(0, 1))(M, Phi, pi, P)


def _reduced_field(t, y, args):
    """``(x, Z, ln G, ln s)' = (manifold field, L Z - rho Z, -gamma^T G_Phi gamma, rho)`` with
    ``L = [[0, -B], [-B^T, 0]]``: the seeds ``s Z`` obey ``z' = L z``; ``rho``, their growth rate
    in the Frobenius norm, keeps ``||Z||`` fixed (a Stage IV of rate ``mu_IV`` that long would
    overflow ``s Z``)."""
    pi, P = args
    x, Z, _, _ = y
    d = pi.shape[0]
    gamma, kq, kk = x[:d], x[2 * d], x[2 * d + 1]
    G_M, G_Phi = _gradients(x, pi, P)
    B = jnp.column_stack([G_M, kk * G_Phi @ gamma, kq * G_Phi.T @ gamma])
    LZ = jnp.concatenate([-B @ Z[d:], -B.T @ Z[:d]], axis=0)
    rho = jnp.sum(Z * LZ) / jnp.sum(Z * Z)
    return manifold_field(x, pi, P), LZ - rho * Z, -gamma @ G_Phi @ gamma, rho


@partial(jax.jit, static_argnames=("max_steps",))
def _reduced_solve(x0, Z0, pi, P, t_end, rest_tol, t_min, *, max_steps):
    # a start in the linear regime is close to rest too: rest counts only after t_min
    event = diffrax.Event(
        lambda t, y, args, **kw: (
            (t > t_min) & (jnp.linalg.norm(manifold_field(y[0], *args)) <= rest_tol)
        )
    )
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_reduced_field),
        diffrax.Tsit5(),
        0.0,
        t_end,
        None,
        (x0, Z0, jnp.zeros((), x0.dtype), jnp.zeros((), x0.dtype)),
        args=(pi, P),
        saveat=diffrax.SaveAt(t0=True, steps=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-13),
        event=event,
        max_steps=max_steps,
        throw=False,
    )
    return sol.ts, sol.ys, sol.result == diffrax.RESULTS.event_occurred


class ReducedRun(NamedTuple):
    """A reduced run at its accepted steps: manifold states ``xs``, the seeds it started from
    propagated by the transverse linearisation, ``e^{log_scale} Zs``, and
    ``log_gain = int_0^t c(s) ds``."""

    ts: np.ndarray
    xs: np.ndarray
    Zs: np.ndarray
    log_gain: np.ndarray
    log_scale: np.ndarray


def reduced_run(
    pi, P, x0, Z0, t_min: float, t_end: float, rest_tol: float = REST_TOL
) -> ReducedRun:
    """The manifold flow from ``x0`` with the transverse seeds ``Z0`` (``(2d + 2) x k``) up to rest
    (``||field|| <= rest_tol`` after ``t_min``) or ``t_end``, whichever comes first."""
    pi = validate_pi(pi)
    args = (
        jnp.asarray(x0, jnp.float64),
        jnp.asarray(Z0, jnp.float64),
        jnp.asarray(pi),
        jnp.asarray(P, jnp.float64),
        float(t_end),
        float(rest_tol),
        float(t_min),
    )
    solve = program_store.compiled(_reduced_solve, args, {"max_steps": MAX_STEPS})
    ts, (xs, Zs, gain, scale), rested = solve(*args)
    require(
        bool(rested),
        "pi",
        pi.tolist(),
        f"a chain whose reduced flow comes to rest before t = {t_end:.4g} within {MAX_STEPS} steps",
    )
    keep = np.isfinite(np.asarray(ts))
    return ReducedRun(*(np.asarray(a)[keep] for a in (ts, xs, Zs, gain, scale)))


def manifold_observables(xs, pi, P) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loss, ``p_h(h)`` and ``max_q H_q`` along manifold states (the inputs of the onset rules)."""
    d, h = pi.size, int(np.argmax(pi))
    loss, focus, spread = [], [], []
    for x in xs:
        gamma, beta, kappa = x[:d], x[d : 2 * d], x[2 * d] * x[2 * d + 1]
        Phi = kappa * np.outer(gamma, gamma)
        A = attention(pi, Phi)
        loss.append(population_loss(np.outer(gamma, beta), Phi, pi, P))
        focus.append(A[h, h])
        spread.append(np.max(-np.sum(A * np.log(np.clip(A, 1e-300, None)), axis=-1)))
    return np.array(loss), np.array(focus), np.array(spread)


def _onsets(run: ReducedRun, pi, P) -> np.ndarray:
    loss, focus, spread = manifold_observables(run.xs, pi, P)
    return stage_onsets(run.ts, loss, focus, spread, np.zeros_like(run.ts), pi)


# --- the constants of one chain -------------------------------------------------------------------
def _window(rate: float) -> tuple[float, float]:
    """``(t_min, t_end)`` of a reduced run whose mode of ``rate`` starts at ``PROBE``: past twice
    its escape time before rest may stop it, and long enough to come to rest."""
    escape = math.log(1 / PROBE) / rate
    return 2 * escape, 100 * (1 + escape)


@cache
def _stage_constants(pi_key: tuple, P_key: tuple) -> StageConstants:
    pi, P = np.array(pi_key), np.array(P_key)
    d = pi.size
    sigma, c = float(stage_one_rate(pi)), float(stage_two_rate(pi, P))
    require(c > 0, "P", "P", "a chain with a positive Stage-II rate c (e.g. lambda > 0)")
    a, b = condensation_directions(pi)
    # an orthonormal basis N of the neutral seeds (Pi_0 = N N^T): only they carry over
    eigenvalues, vectors = np.linalg.eigh(origin_neutral_projector(pi))
    N = vectors[:, eigenvalues > 0.5]

    one = reduced_run(pi, P, np.r_[PROBE * a, PROBE * b, 0.0, 0.0], N, *_window(sigma))
    T_I = _onsets(one, pi, P)[0]
    fire_I = PROBE * math.exp(sigma * T_I)
    gain_I = math.exp(one.log_gain[-1] - c * (one.ts[-1] - T_I))

    two = reduced_run(pi, P, second_point_state(pi, PROBE), one.Zs[-1], *_window(c))
    _, T_II, T_III, _ = _onsets(two, pi, P)
    fire_II = PROBE * math.exp(c * T_II)

    rest = rest_point(two.xs[-1], pi, P)
    mu, r = stage_four_mode(rest.state, pi, P)
    mu = mu if mu > 1e-10 else 0.0  # rest points are found to ~1e-14: zero, the stall
    if rest.tangential_rate > 1e-10:
        mu = math.nan  # an in-manifold escape (spec §5.5 corrected): not this transverse mode
    carry = np.zeros(2 * d + 2)
    fire_IV = math.nan
    # a transverse Stage IV with a Stage III before it
    if mu > 0 and math.isfinite(T_III):
        # the mode's amplitude at T_III of the seeds: e^{ln s - mu (t - T_III)} r^T Z at rest
        extrapolate = two.log_scale[-1] - mu * (two.ts[-1] - T_III)
        toward = two.Zs[-1].T @ r
        carry = N @ toward * math.exp(one.log_scale[-1] + extrapolate)
        # a probe seed at the start of Stages II-III along the propagated seeds that grow most
        probe = one.Zs[-1] @ toward
        amplitude = float(toward @ toward / np.linalg.norm(probe)) * math.exp(extrapolate)
        fire_IV = _stage_four_fire(
            pi, P, two.xs[0], probe / np.linalg.norm(probe), amplitude, mu, T_III
        )
    return StageConstants(
        sigma, c, mu, fire_I, gain_I, fire_II, T_III - T_II, fire_IV, carry, rest.state
    )


def stage_constants(pi, P) -> StageConstants:
    """``a_I*``, ``G_I``, ``a_II*``, ``Delta_III``, ``a_IV*`` and ``h`` of one chain (module
    docstring); cached per chain."""
    pi = validate_pi(pi)
    P = np.asarray(P, dtype=float)
    return _stage_constants(tuple(pi.tolist()), tuple(map(tuple, P.tolist())))


@jax.jit
def _rank_two_solve(params, pi, P, grid):
    """The full flow of ``(W0, WQ, WK, W1)`` (any widths) saved at ``grid``: its ``W0``."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: flow_field(y, *args)),
        diffrax.Tsit5(),
        grid[0],
        grid[-1],
        None,
        params,
        args=(pi, P),
        saveat=diffrax.SaveAt(ts=grid),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-14),
        max_steps=MAX_STEPS,
        throw=False,  # checked by the caller; raising would add a host callback
    )
    return cast(Parameters, sol.ys).W0, sol.result == diffrax.RESULTS.successful


def _stage_four_fire(
    pi, P, x_start, seed: np.ndarray, amplitude: float, mu: float, T_III: float
) -> float:
    """``a_IV*``: the ``m = 2``, ``m_k = 1`` flow from ``x_start`` plus ``PROBE seed`` (a unit
    seed of Stage-IV amplitude ``amplitude`` at ``T_III``) along the second direction; the rule
    fires where ``sigma_2(W0)`` passes 1/2 after ``T_III``."""
    d = pi.size
    z = PROBE * seed
    A = PROBE * amplitude
    gamma, beta, kq, kk = x_start[:d], x_start[d : 2 * d], x_start[2 * d], x_start[2 * d + 1]
    init = Parameters(
        np.column_stack([gamma, z[:d]]),
        np.array([[kq], [z[2 * d]]]),
        np.array([[kk], [z[2 * d + 1]]]),
        np.stack([beta, z[d : 2 * d]]),
    )
    # sigma_2(W0) ~ A e^{mu (t - T_III)}/sqrt(2) in the linear regime: the rule's 1/2 comes
    # within ln(1/A)/mu; the nonlinear end takes a few 1/mu more
    t_end = T_III + (math.log(1 / A) + 6) / mu
    require(t_end > 0, "pi", pi.tolist(), "a chain with a Stage-IV transit after t = 0")
    grid = np.linspace(0.0, t_end, STAGE_FOUR_SAMPLES)
    args = (init, jnp.asarray(pi), jnp.asarray(P), grid)
    with grid_checks_without_callback():  # increasing from 0, as diffrax's checks require
        W0, reached = program_store.compiled(_rank_two_solve, args)(*args)
    require(
        bool(reached),
        "pi",
        pi.tolist(),
        f"a chain whose Stage-IV flow the solver integrates to t = {t_end:.4g} within {MAX_STEPS} "
        "steps",
    )
    sigma_2 = np.linalg.svd(np.asarray(W0), compute_uv=False)[:, 1]
    T_IV = _crossing(grid, sigma_2, STAGE_FOUR_LEVEL, start=T_III)
    require(
        math.isfinite(T_IV),
        "pi",
        pi.tolist(),
        f"a chain whose Stage-IV transit reaches sigma_2(W0) = 1/2 by t = {t_end:.4g}",
    )
    return A * math.exp(mu * (T_IV - T_III))


# --- the onsets of given initialisations ---------------------------------------------------------
def offset_onsets_of(
    pi, P, init: Parameters
) -> tuple[StageConstants, list[InitialAmplitudes], np.ndarray]:
    """The constants of the chain, the amplitudes of each initialisation in the batch ``init``
    (leading axis: runs) and their onsets I-IV ``(runs, 4)``."""
    constants = stage_constants(pi, P)
    runs = np.asarray(init.W0).shape[0]
    amplitudes = [
        initial_amplitudes(Parameters(*(np.asarray(w)[r] for w in init)), pi) for r in range(runs)
    ]
    onsets = np.array([offset_onsets(constants, amp).onsets for amp in amplitudes])
    return constants, amplitudes, onsets
