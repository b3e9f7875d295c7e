"""Population gradient flow of the focus-dilution model (Chen, Lin, Xu, Luo, "Focus and Dilution",
arXiv:2605.01199; spec ``focus_dilution.md`` §3.3, §4, §5, §6).

* ``population_loss``: the spec's boxed ``L(M, Phi)`` in JAX, composed with ``M = W0 W1`` and
  ``Phi = s W0 WQ WK^T W0^T``. Its ``jax.grad`` is the vector field; the tests check it against the
  closed-form gradients of ``theory.focus_dilution.population``.
* ``solve_flow``: diffrax (Tsit5, PID controller, float64) on the full parameter pytree
  ``(W0, WQ, WK, W1)`` from ``N(0, eps^2)`` entries, one compiled program ``jax.vmap``-ed over runs
  (each run its own ``pi``, ``P``, ``eps`` and seed); observables of spec §6 on a saved time grid.
* ``manifold_trajectory`` / ``stage_four_point`` / ``symmetry_breaking_slope``: the reduced flow on
  the rank-one manifold (spec §5.4; theory in ``theory.focus_dilution.manifold``) integrated with
  diffrax, its rest point (end of Stage III) and the Stage-IV rate ``k_delta`` (spec §5.5).

The measurement rules (stage onsets, rate windows) live in ``simulate.focus_dilution.measure``.
"""

from __future__ import annotations

import math
import time
from functools import partial

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jax.typing import ArrayLike

from simulate import program_store
from simulate.one_matrix import one_matrix_at_a_time
from simulate.solver_checks import grid_checks_without_callback
from theory.focus_dilution.manifold import (
    StageFourPoint,
    rest_point,
    second_point_state,
    symmetric_pi,
)
from theory.focus_dilution.population import Parameters, transition_matrix, validate_pi
from theory.focus_dilution.stages import stage_two_rate
from theory.validation import require

RTOL, ATOL = 1e-9, 1e-12
MAX_STEPS = 2_000_000
N_SINGULAR = 3
"""top singular values logged per matrix (spec §6; zeros beyond a matrix's rank bound)."""


# --- the model in JAX (spec §3.2-3.3) -------------------------------------------------------------
def population_loss_mphi(M, Phi, pi, P):
    """``L(M, Phi) = -sum_q pi_q sum_k P_qk log S_qk``, ``S = rowsoftmax(A M)``,
    ``A_qk = p_q(k) ∝ pi_k e^{Phi_qk}`` (spec §3.3)."""
    A = jax.nn.softmax(jnp.log(pi)[None, :] + Phi, axis=-1)
    log_S = jax.nn.log_softmax(A @ M, axis=-1)
    return -jnp.sum(pi[:, None] * P * log_S)


def maps(params: Parameters, qk_scale: float = 1.0):
    """``(M, Phi) = (W0 W1, s W0 WQ WK^T W0^T)``."""
    W0, WQ, WK, W1 = params
    return W0 @ W1, qk_scale * (W0 @ WQ @ WK.T @ W0.T)


def population_loss(params: Parameters, pi, P, qk_scale: float = 1.0):
    """The population loss of the trained parameters ``theta = (W0, WQ, WK, W1)``."""
    return population_loss_mphi(*maps(params, qk_scale), pi, P)


def flow_field(params: Parameters, pi, P, qk_scale: float = 1.0) -> Parameters:
    """``theta' = -dL/dtheta`` (population gradient flow)."""
    grads = jax.grad(population_loss)(params, pi, P, qk_scale)
    return jax.tree_util.tree_map(jnp.negative, grads)


def initial_parameters(key, d: int, m: int, m_k: int, eps) -> Parameters:
    """Every entry i.i.d. ``N(0, eps^2)`` (spec §3.1); one key per matrix from ``key``."""
    keys = jax.random.split(key, 4)
    shapes = ((d, m), (m, m_k), (m, m_k), (m, d))
    return Parameters(*(eps * jax.random.normal(k, s) for k, s in zip(keys, shapes)))


def _entropy_rows(A):
    return -jnp.sum(A * jnp.log(jnp.clip(A, 1e-300)), axis=-1)


def _cosine(a, b):
    return jnp.sum(a * b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-300)


@one_matrix_at_a_time
def singular_values(x: ArrayLike) -> jax.Array:
    """Singular values of ``x``, largest first."""
    return jnp.linalg.svd(x, compute_uv=False)


@one_matrix_at_a_time
def left_singular_vectors(x: ArrayLike) -> jax.Array:
    """``U`` of the thin SVD ``x = U S V^T``."""
    return jnp.linalg.svd(x, full_matrices=False)[0]


def observables(params: Parameters, pi, P, qk_scale: float = 1.0) -> dict:
    """Spec §6 at one parameter point (``h`` = the most frequent token)."""
    W0, WQ, WK, W1 = params
    M, Phi = maps(params, qk_scale)
    A = jax.nn.softmax(jnp.log(pi)[None, :] + Phi, axis=-1)
    h = jnp.argmax(pi)
    U = left_singular_vectors(W0)

    def top(X):
        # zero-padded when a matrix has fewer than N_SINGULAR singular values
        sv = singular_values(X)[:N_SINGULAR]
        return jnp.zeros(N_SINGULAR, sv.dtype).at[: sv.size].set(sv)

    grads = jax.grad(population_loss)(params, pi, P, qk_scale)
    return {
        "loss": population_loss_mphi(M, Phi, pi, P),
        "attention": A,
        "attention_entropy": _entropy_rows(A),
        "focus_mass": A[:, h],
        "weighted_focus_mass": pi @ A[:, h],
        "sv_W0": top(W0),
        "sv_W1": top(W1),
        "sv_WQ": top(WQ),
        "sv_WK": top(WK),
        "sv_WQK": top(WQ @ WK.T),
        "align_W0_pi": jnp.abs(_cosine(U[:, 0], pi)),
        "align_Phi_pipi": _cosine(Phi, jnp.outer(pi, pi)),
        "outer_norm": jnp.sqrt(jnp.sum(W0**2) + jnp.sum(W1**2)),
        "token_norm": jnp.linalg.norm(W0, axis=1),
        "W0": W0,
        "grad_norm": jnp.sqrt(sum(jnp.sum(g**2) for g in grads)),
    }


OBS_DIMS = {
    "loss": (),
    "attention": ("query", "key"),
    "attention_entropy": ("query",),
    "focus_mass": ("query",),
    "weighted_focus_mass": (),
    "sv_W0": ("sv",),
    "sv_W1": ("sv",),
    "sv_WQ": ("sv",),
    "sv_WK": ("sv",),
    "sv_WQK": ("sv",),
    "align_W0_pi": (),
    "align_Phi_pipi": (),
    "outer_norm": (),
    "token_norm": ("token",),
    "W0": ("token", "width"),
    "grad_norm": (),
}


# --- full-parameter flow (spec §4) -------------------------------------------------------------
def _solve_one(pi, P, y0, grid, *, qk_scale, rtol, atol):
    """The observables of one run on its grid. Traced under
    ``simulate.solver_checks.grid_checks_without_callback`` and without diffrax's progress meter
    (a host callback as well, 1.8 s of every `focus-dilution-stages --quick` for a solve of about
    0.2 s), so the persistent compilation cache keeps the program."""
    term = diffrax.ODETerm(lambda t, y, args: flow_field(y, args[0], args[1], qk_scale))
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Tsit5(),
        grid[0],
        grid[-1],
        None,
        y0,
        args=(pi, P),
        saveat=diffrax.SaveAt(ts=grid),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=MAX_STEPS,
        throw=False,  # checked by the caller; raising would add a host callback
    )
    obs = jax.vmap(lambda p: observables(p, pi, P, qk_scale))(sol.ys)
    return obs, sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful


@partial(jax.jit, static_argnames=("qk_scale", "rtol", "atol"))
def _solve_batch(pis, Ps, y0, grids, *, qk_scale, rtol, atol):
    return jax.vmap(partial(_solve_one, qk_scale=qk_scale, rtol=rtol, atol=atol))(
        pis, Ps, y0, grids
    )


def time_grid(t_max: float, n: int, t_dense: float | None = None) -> np.ndarray:
    """Saved times: ``n`` evenly spaced in ``[0, t_max]``, or with ``t_dense`` half of them in
    ``[0, t_dense]`` (the fast early stages) and half up to ``t_max``."""
    if t_dense is None or t_dense >= t_max:
        return np.linspace(0.0, t_max, n)
    k = n // 2
    return np.concatenate(
        [np.linspace(0.0, t_dense, k, endpoint=False), np.linspace(t_dense, t_max, n - k)]
    )


def initial_batch(d: int, m: int, m_k: int, eps, seeds) -> Parameters:
    """``initial_parameters`` for each ``(eps[i], seeds[i])`` with ``key = PRNGKey(seed)``: one
    seed gives the same direction at every scale."""
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
    return jax.vmap(lambda k, e: initial_parameters(k, d, m, m_k, e))(
        keys, jnp.asarray(eps, jnp.float64)
    )


def solve_flow(
    pis,
    Ps,
    eps,
    seeds,
    grids,
    m: int = 16,
    m_k: int = 16,
    qk_scale: float = 1.0,
    init: Parameters | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> xr.Dataset:
    """Population gradient flow of the full parameters for a batch of runs (one compiled,
    vmapped program): run ``i`` has stationary law ``pis[i]``, chain ``Ps[i]``, init scale
    ``eps[i]``, init seed ``seeds[i]`` (``initial_batch``; or the batched initial parameters
    ``init``) and saved times ``grids[i]`` (or one grid for all; every grid starts at 0 and all
    have the same length). Returns the spec §6 observables with dims ``(run, sample, ...)``, the
    saved times as coordinate ``time (run, sample)`` and per-run coordinates ``eps``, ``seed``;
    ``attrs`` hold the solver settings and the seconds spent compiling (tracing included) and
    solving."""
    pis = np.atleast_2d(np.asarray(pis, float))
    grids = np.atleast_2d(np.asarray(grids, float))
    B = max(len(pis), np.size(eps), np.size(seeds), len(grids))
    d = pis.shape[-1]
    pis = np.broadcast_to(pis, (B, d))
    Ps = np.broadcast_to(np.asarray(Ps, float), (B, d, d))
    eps = np.broadcast_to(np.asarray(eps, float), (B,))
    seeds = np.broadcast_to(np.asarray(seeds, int), (B,))
    grids = np.broadcast_to(grids, (B, grids.shape[-1]))
    for pi, P in zip(pis, Ps):
        validate_pi(pi)
        require(
            bool(np.allclose(P.sum(axis=1), 1.0)) and bool(np.all(P >= 0)),
            "P",
            "P",
            "a row-stochastic matrix",
        )
        require(bool(np.allclose(pi @ P, pi)), "P", "P", "a chain with stationary law pi")
    require(bool(np.all((eps > 0) & (eps < 1))), "eps", eps.tolist(), "init scales in (0, 1)")
    require(
        bool(np.all(grids[:, 0] == 0)) and bool(np.all(np.diff(grids, axis=1) > 0)),
        "grid",
        "grid",
        "increasing saved times starting at 0",
    )
    if init is None:
        init = initial_batch(d, m, m_k, eps, seeds)
    m, m_k = init.WQ.shape[-2:]
    args = (jnp.asarray(pis), jnp.asarray(Ps), init, jnp.asarray(grids))
    start = time.perf_counter()
    with grid_checks_without_callback():  # the grids are checked above
        solve_batch = program_store.compiled(
            _solve_batch, args, {"qk_scale": float(qk_scale), "rtol": rtol, "atol": atol}
        )
    compiled = time.perf_counter()
    obs, steps, reached = jax.block_until_ready(solve_batch(*args))
    done = time.perf_counter()
    require(
        bool(np.all(np.asarray(reached))),
        "grid",
        f"saved times up to t = {grids[:, -1].max():.4g}",
        f"saved times the solver reaches (it stopped early: its {MAX_STEPS} steps ran out or its "
        "step size underflowed)",
    )
    data = xr.Dataset(
        {name: (("run", "sample", *OBS_DIMS[name]), np.asarray(v)) for name, v in obs.items()},
        coords={
            "time": (("run", "sample"), grids.copy()),
            "eps": ("run", eps.copy()),
            "seed": ("run", seeds.copy()),
            "query": np.arange(d),
            "key": np.arange(d),
            "token": np.arange(d),
            "sv": np.arange(1, N_SINGULAR + 1),
            "width": np.arange(m),
        },
    )
    data["pi"] = (("run", "token"), pis.copy())
    data["P"] = (("run", "query", "key"), Ps.copy())
    data["solver_steps"] = ("run", np.asarray(steps))
    data.attrs.update(
        solver="diffrax Tsit5 + PIDController",
        rtol=rtol,
        atol=atol,
        m=int(m),
        m_k=int(m_k),
        qk_scale=float(qk_scale),
        dtype="float64",
        compile_seconds=compiled - start,
        run_seconds=done - compiled,
    )
    return data


# --- reduced flow on the rank-one manifold (spec §5.4) -------------------------------------------
def manifold_loss(x, pi, P):
    """``L(gamma beta^T, kQ kK gamma gamma^T)`` of the manifold state ``x = (gamma, beta, kQ, kK)``;
    the manifold flow is its Euclidean gradient flow (``theory.focus_dilution.manifold``)."""
    d = pi.shape[0]
    gamma, beta, kq, kk = x[:d], x[d : 2 * d], x[2 * d], x[2 * d + 1]
    return population_loss_mphi(jnp.outer(gamma, beta), kq * kk * jnp.outer(gamma, gamma), pi, P)


def manifold_field(x, pi, P):
    return -jax.grad(manifold_loss)(x, pi, P)


@partial(jax.jit, static_argnames=("max_steps",))
def _manifold_solve(x0, pi, P, t_end, rest_tol, *, max_steps):
    term = diffrax.ODETerm(lambda t, y, args: manifold_field(y, *args))
    event = diffrax.Event(
        lambda t, y, args, **kw: jnp.linalg.norm(manifold_field(y, *args)) <= rest_tol
    )
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Tsit5(),
        0.0,
        t_end,
        None,
        x0,
        args=(pi, P),
        saveat=diffrax.SaveAt(t0=True, steps=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        event=event,
        max_steps=max_steps,
        throw=False,
    )
    return sol.ts, sol.ys, sol.result != diffrax.RESULTS.max_steps_reached


def manifold_trajectory(
    pi,
    P,
    kappa_seed: float = 1e-4,
    t_end: float | None = None,
    rest_tol: float = 1e-12,
    max_steps: int = 100_000,
):
    """Stages II-III on the manifold: the reduced flow from ``theta_c^1`` with attention seed
    ``kQ = kK = kappa_seed``, up to ``||field|| <= rest_tol`` or ``t_end`` (default
    ``50 (1 + ln(1/kappa_seed)) / c``, many Stage-II durations). Returns ``(ts, xs)`` at the
    accepted steps (numpy)."""
    require(kappa_seed > 0, "kappa_seed", kappa_seed, "a positive attention seed")
    pi = validate_pi(pi)
    horizon = (
        50 * (1 + math.log(1 / kappa_seed)) / float(stage_two_rate(pi, P))
        if t_end is None
        else float(t_end)
    )
    rate = float(stage_two_rate(pi, P))
    args = (
        jnp.asarray(second_point_state(pi, kappa_seed)),
        jnp.asarray(pi),
        jnp.asarray(P, float),
        horizon,
        float(rest_tol),
    )
    ts, xs, solved = program_store.compiled(_manifold_solve, args, {"max_steps": max_steps})(*args)
    # a slow Stage II (small repeat probability) can need more steps than the budget
    require(
        bool(solved),
        "lam",
        round(float((np.asarray(P)[0, 0] - pi[0]) / (1 - pi[0])), 12),  # P = lam I + (1-lam) 1 pi^T
        f"a chain whose manifold flow comes to rest within {max_steps} solver steps (Stage-II "
        f"rate c = {rate:.3g} is too slow here; a larger lambda)",
    )
    keep = np.isfinite(np.asarray(ts))
    return np.asarray(ts)[keep], np.asarray(xs)[keep]


def stage_four_point(pi, P, kappa_seed: float = 1e-4, t_end: float | None = None) -> StageFourPoint:
    """Rest point of the manifold flow reached from ``theta_c^1`` (end of Stage III): integrate to
    near rest (``||field|| <= 1e-8``), then polish and analyse it with
    ``theory.focus_dilution.manifold.rest_point``."""
    pi = validate_pi(pi)
    _, xs = manifold_trajectory(pi, P, kappa_seed, t_end, rest_tol=1e-8)
    return rest_point(xs[-1], pi, P)


def symmetry_breaking_slope(
    pi_1: float, d: int, lam: float, delta: float = 2e-3, signs=None
) -> float:
    """``k_delta = lim mu_IV / delta`` by Richardson extrapolation of ``mu_IV(delta)/delta`` at
    ``delta`` and ``delta/2`` (spec §5.5). The correction is quadratic, ``mu_IV/delta = k_delta +
    b delta^2 + O(delta^4)`` (the linear term vanishes: ``docs/focus_dilution_verification.md``),
    so the extrapolation weighs the two by 4/3 and -1/3. Defined only in the stalling regime (the
    symmetric rest point has no in-manifold instability); near the curve where ``k_delta``
    vanishes (pi_1 ~ 0.65 at lambda = 0.5) ``b`` is large and ``delta`` must be small."""
    symmetric = symmetric_pi(pi_1, d)
    require(
        stage_four_point(symmetric, transition_matrix(symmetric, lam)).tangential_rate < 1e-10,
        "(pi_1, lambda)",
        (pi_1, lam),
        "a setting whose symmetric Stage-IV point is not an in-manifold saddle",
    )

    def ratio(dl):
        pi = symmetric_pi(pi_1, d, dl, signs)
        return stage_four_point(pi, transition_matrix(pi, lam)).transverse_rate / dl

    return (4 * ratio(delta / 2) - ratio(delta)) / 3
