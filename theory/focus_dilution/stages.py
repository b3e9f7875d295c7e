"""Stages I-II of Chen, Lin, Xu, Luo, "Focus and Dilution", arXiv:2605.01199: linearisation at the
origin and at the second critical point ``theta_c^1`` (spec ``focus_dilution.md`` §5.2-5.3, §5.7
items 1-3, 5).

Every closed form takes ``pi`` either as a numpy vector (returns floats / arrays) or as a sympy
column matrix (returns expressions), so one implementation serves the derivation and the numbers.
Verdicts on the spec's [derived] statements: ``docs/focus_dilution_verification.md``.

* Origin (§5.2): ``G_M(0) = pi (u - pi)^T`` (rank one, needs only ``pi^T P = pi^T``) and
  ``G_Phi(0) = 0``; the attention gradients vanish to fifth order in the init scale.
  ``x = W0^T a``, ``y = W1 b`` obey ``x' = sigma y``, ``y' = sigma x`` with
  ``sigma = ||pi|| ||pi - u||``, ``a = pi/||pi||``, ``b = (pi - u)/||pi - u||``.
* ``theta_c^1`` (§5.2): ``W0 = gamma alpha^T``, ``W1 = alpha beta^T``, ``WQ = WK = 0`` with
  ``gamma = g pi/||pi||``, ``beta = g l/||l||``, ``g^2 = ||l||/||pi||``,
  ``l = log pi - mean(log pi)``;
  ``S_q = pi`` for every query, loss ``H(pi)``.
* Stage II (§5.3): ``G_Phi[q,k] = pi_q pi_k (gamma_k - gbar)(bbar - (P beta)_q)``;
  ``c = -gamma^T G_Phi gamma = Var_pi(gamma) Cov_pi(gamma, P beta)``, for the lazy chain
  ``lambda ||l|| Var_pi(pi) Cov_pi(pi, log pi) / ||pi||^5``. The Jacobian at ``theta_c^1`` is block
  diagonal: the (W0, W1) block is negative semi-definite, the (WQ, WK) block is
  ``[[0, c aa^T], [c aa^T, 0]]`` (x ``I_{m_k}``) with eigenvalues ``+c`` and ``-c`` (``m_k`` each)
  and zeros: indefinite, not positive semi-definite as the secondary summary says.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import sympy as sp

from theory.focus_dilution.population import (
    Parameters,
    complex_step_jacobian,
    parameter_field,
    validate_pi,
)
from theory.validation import require


# --- numpy / sympy vector algebra -----------------------------------------------------------------
def _symbolic(v) -> bool:
    return isinstance(v, sp.MatrixBase)


def _as_vector(pi):
    return pi if _symbolic(pi) else validate_pi(pi)


def _mul(a, b):
    return a.multiply_elementwise(b) if _symbolic(a) else a * b


def _log(v):
    return v.applyfunc(sp.log) if _symbolic(v) else np.log(v)


def _sqrt(x):
    return sp.sqrt(x) if isinstance(x, sp.Basic) else np.sqrt(x)


def _ones_like(v):
    return sp.ones(v.rows, 1) if _symbolic(v) else np.ones(v.size)


def _outer(a, b):
    return a * b.T if _symbolic(a) else np.outer(a, b)


def _norm(v):
    return _sqrt(v.dot(v))


def _matvec(P, v):
    return P * v if _symbolic(v) else P @ v


def mean_pi(pi, v):
    """``E_pi[v] = sum_k pi_k v_k``."""
    return pi.dot(v)


def cov_pi(pi, v, w):
    """``Cov_pi(v, w) = E_pi[v w] - E_pi[v] E_pi[w]``."""
    return pi.dot(_mul(v, w)) - pi.dot(v) * pi.dot(w)


def entropy(pi):
    """``H(pi) = -sum pi log pi``: the unigram cross-entropy reached at ``theta_c^1`` (§5.2)."""
    pi = _as_vector(pi)
    return -pi.dot(_log(pi))


# --- Stage I: the origin (spec §5.2) --------------------------------------------------------------
def origin_gradient(pi):
    """``G_M(0) = pi (u - pi)^T`` with ``u = 1/d`` (rank one along ``pi``); ``G_Phi(0) = 0``."""
    pi = _as_vector(pi)
    u = _ones_like(pi) / len(pi)
    return _outer(pi, u - pi)


def stage_one_rate(pi):
    """``sigma = ||pi|| ||pi - u||``: the top singular value of ``G_M(0)``, growth rate of Stage
    I."""
    pi = _as_vector(pi)
    return _norm(pi) * _norm(pi - _ones_like(pi) / len(pi))


def condensation_directions(pi):
    """``(a, b) = (pi/||pi||, (pi - u)/||pi - u||)``: ``G_M(0) = -sigma a b^T``, so ``W0`` condenses
    onto ``a`` (rows proportional to token frequency) and ``W1`` onto ``b``."""
    pi = _as_vector(pi)
    centred = pi - _ones_like(pi) / len(pi)
    return pi / _norm(pi), centred / _norm(centred)


def stage_one_solution(x0, y0, sigma, t):
    """Solution of ``x' = sigma y, y' = sigma x`` (``x = W0^T a``, ``y = W1 b``):
    ``x = cosh(sigma t) x0 + sinh(sigma t) y0``, ``y = sinh(sigma t) x0 + cosh(sigma t) y0``."""
    if any(isinstance(z, sp.Basic) for z in (sigma, t)):
        ch, sh = sp.cosh(sigma * t), sp.sinh(sigma * t)
    else:
        ch, sh = np.cosh(sigma * t), np.sinh(sigma * t)
    return ch * x0 + sh * y0, sh * x0 + ch * y0


# --- theta_c^1: the second critical point (spec §5.2) ---------------------------------------------
class SecondCriticalPoint(NamedTuple):
    """``theta_c^1``: ``W0 = gamma alpha^T``, ``W1 = alpha beta^T``, ``WQ = WK = 0``; ``g`` is the
    common norm ``||gamma|| = ||beta||`` (top singular value of ``W0`` and of ``W1``)."""

    gamma: Any
    """numpy vector, or sympy matrix for a symbolic pi."""
    beta: Any
    g: Any


def centred_log(pi):
    """``l = log pi - mean(log pi) 1`` (zero-sum logits of the unigram predictor)."""
    log_pi = _log(pi)
    return log_pi - _ones_like(pi) * (sum(log_pi) / len(pi))


def second_critical_point(pi) -> SecondCriticalPoint:
    """The balanced member of the critical family ``{(pi.gamma) beta = l, WQ = WK = 0}`` reached
    from small init: ``gamma = g pi/||pi||``, ``beta = g l/||l||``, ``g^2 = ||l||/||pi||``."""
    pi = _as_vector(pi)
    ell = centred_log(pi)
    if not _symbolic(pi):
        # At uniform pi the origin already predicts the unigram law: no second critical point.
        require(_norm(ell) > 1e-12, "pi", pi, "a non-uniform distribution")
    g = _sqrt(_norm(ell) / _norm(pi))
    return SecondCriticalPoint(gamma=g * pi / _norm(pi), beta=g * ell / _norm(ell), g=g)


def second_critical_parameters(pi, m: int, m_k: int, alpha=None) -> Parameters:
    """``theta_c^1`` as full parameters; ``alpha`` (unit, length ``m``) defaults to ``e_1``."""
    point = second_critical_point(np.asarray(pi, dtype=float))
    alpha = np.eye(m)[0] if alpha is None else np.asarray(alpha, dtype=float)
    return Parameters(
        np.outer(point.gamma, alpha),
        np.zeros((m, m_k)),
        np.zeros((m, m_k)),
        np.outer(alpha, point.beta),
    )


# --- Stage II: attention growth (spec §5.3) -------------------------------------------------------
def stage_two_attention_gradient(gamma, beta, pi, P):
    """``G_Phi[q, k] = pi_q pi_k (gamma_k - gbar)(bbar - (P beta)_q)`` at any
    ``W0 = gamma alpha^T``,
    ``W1 = alpha beta^T``, ``Phi = 0`` with ``S_q = pi`` for all ``q`` (``gbar = pi.gamma``,
    ``bbar = pi.beta``)."""
    pi = _as_vector(pi)
    ones = _ones_like(pi)
    col = _mul(pi, ones * mean_pi(pi, beta) - _matvec(P, beta))
    row = _mul(pi, gamma - ones * mean_pi(pi, gamma))
    return _outer(col, row)


def stage_two_rate(pi, P, qk_scale: Any = 1):
    """``c = -gamma^T G_Phi gamma = Var_pi(gamma) Cov_pi(gamma, P beta)`` at ``theta_c^1`` (times
    the
    ``qk_scale`` ``s``): ``WQ' = c alpha alpha^T WK``, ``WK' = c alpha alpha^T WQ``, so the
    symmetric
    mode of ``(WQ^T alpha, WK^T alpha)`` grows like ``e^{ct}`` and ``||WQ WK^T||`` like
    ``e^{2ct}``."""
    pi = _as_vector(pi)
    point = second_critical_point(pi)
    gamma, beta = point.gamma, point.beta
    return qk_scale * cov_pi(pi, gamma, gamma) * cov_pi(pi, gamma, _matvec(P, beta))


def stage_two_rate_closed_form(pi, lam):
    """Boxed form for ``P = lambda I + (1 - lambda) 1 pi^T``:
    ``c = lambda ||l|| Var_pi(pi) Cov_pi(pi, log pi) / ||pi||^5 >= 0`` (``> 0`` iff ``lambda > 0``
    and
    ``pi`` is not uniform)."""
    pi = _as_vector(pi)
    return (
        lam
        * _norm(centred_log(pi))
        * cov_pi(pi, pi, pi)
        * cov_pi(pi, pi, _log(pi))
        / _norm(pi) ** 5
    )


def symmetric_family_rates():
    """``(sigma, c)`` for ``pi = (pi_1, r, ..., r)``, ``r = (1 - pi_1)/(d - 1)``, as sympy
    expressions
    in ``pi_1``, ``d``, ``lambda`` (spec §5.7 item 5). With ``L = log(pi_1/r)`` and
    ``n2 = ||pi||^2 = pi_1^2 + (1 - pi_1)^2/(d - 1)``: ``sigma = sqrt(n2 (n2 - 1/d))`` and
    ``c = lambda sqrt((d - 1)/d) pi_1^2 (1 - pi_1)^2 (pi_1 - r)^3 L^2 / n2^(5/2)``
    (``Var_pi(pi)``, ``Cov_pi(pi, log pi)`` and ``||l||`` of a two-valued law)."""
    p1, d, lam = sp.symbols("pi_1 d lambda", positive=True)
    r = (1 - p1) / (d - 1)
    n2 = p1**2 + (1 - p1) ** 2 / (d - 1)
    L = sp.log(p1 / r)
    sigma = sp.sqrt(n2 * (n2 - 1 / d))
    c = (
        lam
        * sp.sqrt((d - 1) / d)
        * p1**2
        * (1 - p1) ** 2
        * (p1 - r) ** 3
        * L**2
        / n2 ** sp.Rational(5, 2)
    )
    return sigma, c


def attention_block_spectrum(c, m: int, m_k: int) -> np.ndarray:
    """Eigenvalues of the (WQ, WK) block of the Jacobian at ``theta_c^1``: ``+c`` and ``-c`` with
    multiplicity ``m_k`` each, the other ``2 m m_k - 2 m_k`` zero (sorted ascending)."""
    zeros = np.zeros(2 * m * m_k - 2 * m_k)
    return np.sort(np.concatenate([np.full(m_k, -c), zeros, np.full(m_k, c)]))


class JacobianBlocks(NamedTuple):
    """The flow's Jacobian split into the outer ``(W0, W1)`` and attention ``(WQ, WK)`` parts."""

    outer: np.ndarray
    attention: np.ndarray
    cross: np.ndarray


def jacobian_blocks(theta: Parameters, pi, P, qk_scale: float = 1.0) -> JacobianBlocks:
    """Exact (complex-step) Jacobian of ``-dL/dtheta`` at ``theta``, split into blocks."""
    d, m = theta.W0.shape
    m_k = theta.WQ.shape[1]
    J = complex_step_jacobian(
        lambda x: parameter_field(x, pi, P, d, m, m_k, qk_scale), theta.flatten()
    )
    n_w0, n_att = d * m, 2 * m * m_k
    att = np.arange(n_w0, n_w0 + n_att)
    out = np.setdiff1d(np.arange(J.shape[0]), att)
    return JacobianBlocks(J[np.ix_(out, out)], J[np.ix_(att, att)], J[np.ix_(out, att)])
