"""Stages III-IV of Chen, Lin, Xu, Luo, "Focus and Dilution", arXiv:2605.01199: the rank-one
invariant manifold, mass redistribution, the degenerate critical point and its symmetry breaking,
and the predicted stage times (spec ``focus_dilution.md`` §5.1, §5.4-5.5, §5.7 items 4-6).

The manifold ``W0 = gamma alpha^T``, ``W1 = alpha beta^T``, ``WQ = kQ alpha at^T``,
``WK = kK alpha at^T`` (``alpha``, ``at`` unit) is invariant, and the flow on it is the Euclidean
gradient flow of ``L(gamma beta^T, kappa gamma gamma^T)`` in ``x = (gamma, beta, kQ, kK)``,
``kappa = kQ kK`` (spec §5.4):
``gamma' = -G_M beta - kappa (G_Phi + G_Phi^T) gamma``, ``beta' = -G_M^T gamma``,
``kQ' = -kK gamma^T G_Phi gamma``, ``kK' = -kQ gamma^T G_Phi gamma``.
Numerical integration of this flow (and of the full one) lives in ``simulate.focus_dilution.flow``
(diffrax); this module holds the field, its rest-point analysis and the closed forms.

Derived here and checked in the tests (verdicts in ``docs/focus_dilution_verification.md``):

* Redistribution: near ``theta_c^1`` the forcing on ``(gamma, beta)`` is linear in
``kappa ~ e^{2ct}``,
  so ``D = gamma_h - pi_h sum_i gamma_i`` (``h`` the most frequent token) follows
  ``D = k_D kappa`` with ``k_D`` from the forced response ``(2c - J_out)^{-1} f``: rate ``2c``.
* Any critical point on the manifold has ``beta . (S_q - P_q) = 0`` for every query (generically),
  hence ``G_Phi = 0``. Off the manifold, with a new unit direction ``a2 _|_ alpha``,
  ``W0 += v a2^T``, ``W1 += a2 w^T``, ``WQ += s a2 at^T``, ``WK += t a2 at^T`` changes neither ``M``
  nor ``Phi`` to first order, and the linear flow of ``(v; w, s, t)`` is
  ``[[0, -B], [-B^T, 0]]`` with ``B = [G_M, kK G_Phi gamma, kQ G_Phi^T gamma]``: transverse rates
  ``+-`` the singular values of ``B`` (``m - 1`` copies each).
* Stage IV, ``delta = 0`` (symmetric low-frequency tokens): the flow on the manifold keeps the
  symmetry and comes to rest where ``S_h = P_h`` and ``S_q`` = the mean of the low-frequency rows of
  ``P``; there ``G_M = 0`` and ``G_Phi = 0``, so ``B = 0``: every transverse eigenvalue is zero
  (degenerate). It is a stall only where the point is not a saddle inside the manifold: for larger
  ``lambda`` and moderate ``pi_1`` (e.g. ``lambda = 0.7``, ``pi_1 = 0.7``) an ``O(1)`` in-manifold
  mode
  that splits the low-frequency tokens is unstable and no ``delta`` is needed. In the stalling
  regime
  (e.g. the spec's ``pi_1 = 0.7``, ``lambda = 0.5``) ``delta != 0`` moves the rest point by
  ``O(delta)``
  to one with ``G_Phi = 0``, ``G_M = Theta(delta)``, no in-manifold instability, and top transverse
  rate ``mu_IV = ||G_M||_2 = k_delta |delta| + O(delta^2)`` (the second one is ``O(delta^3)``); the
  unstable embedding direction ``v`` (top left singular vector of ``G_M``) is orthogonal to
  ``gamma``
  because ``G_M^T gamma = 0``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import numpy as np
import sympy as sp

from theory.focus_dilution.population import (
    Parameters,
    complex_step_jacobian,
    population_gradients,
    population_loss_expr,
    validate_pi,
)
from theory.focus_dilution.stages import (
    second_critical_point,
    stage_one_rate,
    stage_two_rate,
)
from theory.gradient_flow import GradientFlow, escape_time
from theory.validation import require


# --- the reduced flow on the rank-one manifold (spec §5.4) ----------------------------------------
def split_state(x):
    """``x = (gamma, beta, kQ, kK)`` -> its parts (``gamma``, ``beta`` of length ``d``)."""
    d = (len(x) - 2) // 2
    return x[:d], x[d : 2 * d], x[2 * d], x[2 * d + 1]


def manifold_gradients(x, pi, P):
    """``(G_M, G_Phi)`` at ``M = gamma beta^T``, ``Phi = kQ kK gamma gamma^T``."""
    gamma, beta, kq, kk = split_state(x)
    return population_gradients(np.outer(gamma, beta), kq * kk * np.outer(gamma, gamma), pi, P)


def manifold_field(x, pi, P) -> np.ndarray:
    """The closed ``(2d + 2)``-dimensional flow on the rank-one manifold (spec §5.4)."""
    gamma, beta, kq, kk = split_state(x)
    G_M, G_Phi = manifold_gradients(x, pi, P)
    drive = gamma @ G_Phi @ gamma
    return np.concatenate(
        [
            -G_M @ beta - kq * kk * (G_Phi + G_Phi.T) @ gamma,
            -G_M.T @ gamma,
            [-kk * drive, -kq * drive],
        ]
    )


def manifold_flow(pi, P) -> GradientFlow:
    """The same flow as a symbolic ``GradientFlow`` (state ``gamma_i, beta_i, kappa_Q, kappa_K``);
    ``pi`` and ``P`` numeric or symbolic."""
    pi_m = sp.Matrix(pi)
    d = pi_m.rows
    gamma = sp.Matrix(sp.symbols(f"gamma_1:{d + 1}", real=True))
    beta = sp.Matrix(sp.symbols(f"beta_1:{d + 1}", real=True))
    kq, kk = sp.symbols("kappa_Q kappa_K", real=True)
    loss = population_loss_expr(gamma * beta.T, kq * kk * gamma * gamma.T, pi_m, sp.Matrix(P))
    # sympy's stubs type the entries of a Matrix of symbols as MatrixElement; they are Symbols.
    state = cast(tuple[sp.Symbol, ...], (*gamma, *beta, kq, kk))
    return GradientFlow(state=state, loss=loss)


def manifold_parameters(x, m: int, m_k: int) -> Parameters:
    """Embed ``x`` with ``alpha = e_1`` in ``R^m`` and ``at = e_1`` in ``R^{m_k}``. The map is
    linear,
    so the flow is tangent to the manifold iff ``field(embed(x)) = embed(manifold_field(x))``."""
    gamma, beta, kq, kk = split_state(x)
    alpha, alpha_t = np.eye(m)[0], np.eye(m_k)[0]
    return Parameters(
        np.outer(gamma, alpha),
        kq * np.outer(alpha, alpha_t),
        kk * np.outer(alpha, alpha_t),
        np.outer(alpha, beta),
    )


def second_point_state(pi, kappa_seed: float = 0.0) -> np.ndarray:
    """``theta_c^1`` on the manifold, with ``kQ = kK = kappa_seed`` (the attention seed, ~ eps)."""
    point = second_critical_point(validate_pi(pi))
    return np.concatenate([point.gamma, point.beta, [kappa_seed, kappa_seed]])


# --- mass redistribution (spec §5.4) --------------------------------------------------------------
def redistribution_coordinate(gamma, pi):
    """``D = (1 - pi_h) gamma_h - pi_h sum_{i != h} gamma_i = gamma_h - pi_h sum_i gamma_i``, ``h``
    the
    most frequent token: zero iff ``gamma`` is proportional to ``pi`` (as at ``theta_c^1``)."""
    pi = np.asarray(pi)
    h = int(np.argmax(pi))
    return np.asarray(gamma)[..., h] - pi[h] * np.sum(gamma, axis=-1)


class Redistribution(NamedTuple):
    """Forced response of the embeddings to attention growth near ``theta_c^1``:
    ``gamma - gamma_c ~ kappa * gamma_per_kappa``, ``D ~ kappa * D_per_kappa``, both at ``rate``
    (``= 2c``, the rate of ``kappa = ||WQ WK^T||``)."""

    rate: float
    gamma_per_kappa: np.ndarray
    D_per_kappa: float


def redistribution_response(pi, P) -> Redistribution:
    """Solve ``(2c - J_out) r = f``: ``J_out`` is the (gamma, beta) Jacobian at ``theta_c^1`` and
    ``f``
    the derivative of ``(gamma', beta')`` in ``kappa``. This is the particular solution driven by
    ``kappa(t) ~ e^{2ct}``; the homogeneous part decays (``J_out <= 0``). The explicit
    ``-kappa (G_Phi + G_Phi^T) gamma`` term alone does not give the sign of the response: the change
    of ``G_M`` with ``Phi`` enters at the same order."""
    pi = validate_pi(pi)
    d = pi.size
    c = stage_two_rate(pi, P)
    x_c = second_point_state(pi)

    def outer_field(y):
        return manifold_field(np.concatenate([y, x_c[2 * d :]]), pi, P)[: 2 * d]

    J_out = complex_step_jacobian(outer_field, x_c[: 2 * d])
    # (gamma', beta') depends on kQ, kK only through kappa = kQ kK: kQ = i h, kK = 1 differentiates
    # in kappa by the complex step.
    h = 1e-30
    x_kappa = x_c.astype(complex)
    x_kappa[2 * d :] = [1j * h, 1.0]
    f = np.imag(manifold_field(x_kappa, pi, P)[: 2 * d]) / h
    r = np.linalg.solve(2 * c * np.eye(2 * d) - J_out, f)
    return Redistribution(float(2 * c), r[:d], float(redistribution_coordinate(r[:d], pi)))


# --- Stage IV (spec §5.5) -------------------------------------------------------------------------
def transverse_coupling(x, pi, P) -> np.ndarray:
    """``B = [G_M, kK G_Phi gamma, kQ G_Phi^T gamma]`` (``d x (d + 2)``): at any manifold point the
    off-manifold perturbation ``(v; w, s, t)`` along a new direction ``a2`` evolves linearly by
    ``v' = -B (w; s; t)``, ``(w; s; t)' = -B^T v``."""
    gamma, _, kq, kk = split_state(x)
    G_M, G_Phi = manifold_gradients(x, pi, P)
    return np.column_stack([G_M, kk * G_Phi @ gamma, kq * G_Phi.T @ gamma])


def transverse_rates(x, pi, P) -> np.ndarray:
    """Singular values of ``B``: the off-manifold eigenvalues are ``+-`` these (``m - 1``
    copies)."""
    return np.linalg.svd(transverse_coupling(x, pi, P), compute_uv=False)


def tangential_rate(x, pi, P) -> float:
    """Largest real eigenvalue of the manifold flow's (complex-step) Jacobian at ``x``: the fastest
    in-manifold escape (zero up to rounding where the rest point is not a saddle in the
    manifold)."""
    J = complex_step_jacobian(lambda y: manifold_field(y, pi, P), x)
    return float(np.max(np.linalg.eigvals(J).real))


class StageFourPoint(NamedTuple):
    """Rest point of the manifold flow reached from ``theta_c^1`` (end of Stage III).

    ``transverse_rate`` is the top off-manifold eigenvalue ``||B||_2`` (the Stage IV mode: ``W0``
    gains a second column along ``direction``, the top left singular vector of ``G_M``);
    ``tangential_rate`` the top in-manifold eigenvalue; ``rate = mu_IV`` the larger of the two, the
    escape rate of the full flow."""

    state: np.ndarray
    G_M: np.ndarray
    G_Phi: np.ndarray
    transverse_rate: float
    tangential_rate: float
    direction: np.ndarray
    residual: float

    @property
    def rate(self) -> float:
        return max(self.transverse_rate, self.tangential_rate)


def rest_point(x, pi, P) -> StageFourPoint:
    """Polish a near-rest state ``x`` of the manifold flow (e.g. the end of a numerically
    integrated Stage III, ``simulate.focus_dilution.flow.stage_four_point``) with minimum-norm
    Newton steps and analyse it: the rest points form a family (symmetries and conservation laws),
    and the minimum-norm step moves to the nearest member instead of along it."""
    pi = validate_pi(pi)
    x = np.asarray(x, dtype=float)

    def field(y):
        return manifold_field(y, pi, P)

    for _ in range(8):
        F = field(x)
        if np.linalg.norm(F) < 1e-14:
            break
        x = x - np.linalg.lstsq(complex_step_jacobian(field, x), F, rcond=1e-10)[0]
    G_M, G_Phi = manifold_gradients(x, pi, P)
    U, _, _ = np.linalg.svd(G_M)
    return StageFourPoint(
        x,
        G_M,
        G_Phi,
        float(transverse_rates(x, pi, P)[0]),
        tangential_rate(x, pi, P),
        U[:, 0],
        float(np.linalg.norm(field(x))),
    )


def symmetric_pi(pi_1: float, d: int, delta: float = 0.0, signs=None) -> np.ndarray:
    """``pi = (pi_1, r + s_2 delta, ..., r + s_d delta)``, ``r = (1 - pi_1)/(d - 1)``, zero-sum
    signs
    ``s`` (default ``(+1, 0, ..., 0, -1)``; spec §2.3: ``(0.7, 0.1 + delta, 0.1, 0.1 - delta)``)."""
    require(d >= 3, "d", d, "at least 3 tokens (two low-frequency tokens to break symmetry)")
    signs = np.array([1.0] + [0.0] * (d - 3) + [-1.0] if signs is None else signs, dtype=float)
    require(
        signs.shape == (d - 1,) and abs(signs.sum()) < 1e-12,
        "signs",
        signs,
        f"{d - 1} zero-sum weights",
    )
    r = (1.0 - pi_1) / (d - 1)
    return validate_pi(np.concatenate([[pi_1], r + signs * delta]))


# --- predicted stage times (spec §5.1-5.3, §5.5) --------------------------------------------------
class StageTimes(NamedTuple):
    """Leading-order stage onsets for init scale ``eps``: ``t_I = ln(1/eps)/sigma``,
    ``t_II = t_I + ln(1/eps)/c`` and ``t_IV = t_II + ln(1/eps_perp)/mu_IV`` (``inf`` when
    ``mu_IV = 0``: the stall at ``delta = 0``). Stage III is not an escape: its duration is ``O(1)``
    in ``eps`` and is neglected in ``t_IV``. Intercepts (``O(1)``) are not predicted."""

    t_I: float
    t_II: float
    t_IV: float
    sigma: float
    c: float
    mu_IV: float


def predicted_stage_times(
    pi, P, eps: float, mu_IV: float, eps_perp: float | None = None, qk_scale: float = 1.0
) -> StageTimes:
    """``mu_IV`` is the Stage-IV rate ``rest_point(...).rate`` (the rest point comes from the
    numerically integrated manifold flow, ``simulate.focus_dilution.flow.stage_four_point``; 0 for
    no Stage IV); ``eps_perp`` (default ``eps``) is the size of the off-manifold seed left at the
    end of Stage III."""
    require(0 < eps < 1, "eps", eps, "an init scale in (0, 1)")
    eps_perp = eps if eps_perp is None else eps_perp
    require(0 < eps_perp < 1, "eps_perp", eps_perp, "an off-manifold seed in (0, 1)")
    sigma, c = float(stage_one_rate(pi)), float(stage_two_rate(pi, P, qk_scale))
    mu = float(mu_IV)
    t_I = escape_time(eps, sigma)
    t_II = t_I + escape_time(eps, c)
    # Rest points are found to ~1e-14, so a smaller rate is the zero eigenvalue of delta = 0.
    t_IV = t_II + escape_time(eps_perp, mu) if mu > 1e-10 else math.inf
    return StageTimes(t_I, t_II, t_IV, sigma, c, mu)
