"""Population model of Chen, Lin, Xu, Luo, "Focus and Dilution: The Multi-stage Learning Process of
Attention", arXiv:2605.01199 (spec ``focus_dilution.md`` §2.1, §3.2-3.4).

One attention head without residual, value matrix, positional encoding or LayerNorm, trained on the
last position of a Markov chain ``P = lambda I + (1 - lambda) 1 pi^T``. In the population limit
(spec §3.3), with ``M = W0 W1`` and ``Phi = s W0 WQ WK^T W0^T`` (``s`` = ``qk_scale``, the optional
``1/sqrt(m_k)`` of spec §3.2, default 1):

    p_q(k) = pi_k e^{Phi_qk} / sum_l pi_l e^{Phi_ql},   A = [p_q(k)],   Z = A M,   S =
    rowsoftmax(Z),
    L(M, Phi) = -sum_q pi_q sum_k P_qk log S_qk.

Closed-form gradients (spec §3.4, checked in the tests against sympy and finite differences), with
``R = diag(pi) (S - P)``:

    G_M = A^T R,    G_Phi = A . (R M^T - [(R . Z) 1] 1^T)    (``.`` = elementwise),
    dL/dW0 = G_M W1^T + s (G_Phi W0 WK WQ^T + G_Phi^T W0 WQ WK^T),   dL/dW1 = W0^T G_M,
    dL/dWQ = s W0^T G_Phi W0 WK,   dL/dWK = s W0^T G_Phi^T W0 WQ.

Every numpy function accepts complex arrays, so that ``complex_step_jacobian`` differentiates the
closed-form gradient to rounding error (the exact Hessian used for the stage spectra); ``sympy``
forms of the loss sit next to the numpy ones. Stage linearisations live in
``theory.focus_dilution.stages`` and ``theory.focus_dilution.manifold``.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np
import sympy as sp

from theory.validation import require


# --- data (spec §2.1, §2.3) ---------------------------------------------------------------------
def validate_pi(pi) -> np.ndarray:
    """``pi`` as a float array: a probability vector with every entry > 0 (``log pi`` is used)."""
    arr = np.asarray(pi, dtype=float)
    require(arr.ndim == 1 and arr.size >= 2, "pi", pi, "a vector of at least 2 probabilities")
    require(bool(np.all(arr > 0)), "pi", pi, "every entry in (0, 1]")
    require(abs(arr.sum() - 1.0) <= 1e-9, "pi", pi, "entries summing to 1")
    return arr


def validate_lambda(lam) -> float:
    require(0.0 <= float(lam) < 1.0, "lambda", lam, "a repeat probability in [0, 1)")
    return float(lam)


def transition_matrix(pi, lam):
    """``P = lambda I + (1 - lambda) 1 pi^T`` (spec §2.1): repeat with probability ``lambda``,
    otherwise draw from ``pi``. Sympy in, sympy out (``pi`` a column ``sp.Matrix``)."""
    if isinstance(pi, sp.MatrixBase):
        return lam * sp.eye(pi.rows) + (1 - lam) * sp.ones(pi.rows, 1) * pi.T
    pi, lam = validate_pi(pi), validate_lambda(lam)
    return lam * np.eye(pi.size) + (1 - lam) * np.outer(np.ones(pi.size), pi)


def reversible_transition(pi, proposal) -> np.ndarray:
    """Metropolis-Hastings chain with stationary ``pi`` from a symmetric proposal (spec §2.3 (b)):
    ``P_ij = Q_ij min(1, pi_j / pi_i)`` off the diagonal, the rejected mass on the diagonal."""
    pi = validate_pi(pi)
    Q = np.asarray(proposal, dtype=float)
    require(Q.shape == (pi.size, pi.size), "proposal", Q.shape, f"a {pi.size}x{pi.size} matrix")
    require(
        bool(np.allclose(Q, Q.T)) and bool(np.all(Q >= 0)),
        "proposal",
        "Q",
        "a symmetric non-negative matrix",
    )
    require(bool(np.all(Q.sum(axis=1) <= 1 + 1e-12)), "proposal", "Q", "row sums at most 1")
    P = Q * np.minimum(1.0, pi[None, :] / pi[:, None])
    np.fill_diagonal(P, 0.0)
    np.fill_diagonal(P, 1.0 - P.sum(axis=1))
    return P


def random_metropolis_chain(pi, seed: int) -> np.ndarray:
    """The Metropolis-Hastings chain of ``pi`` from a random proposal ``Q = (U + U^T)/(2d)``,
    ``U`` uniform on [0, 1)^(d x d) from ``numpy.random.default_rng(seed)`` (spec §2.3 (b))."""
    d = np.asarray(pi).size
    U = np.random.default_rng(seed).uniform(size=(d, d))
    return reversible_transition(pi, (U + U.T) / (2 * d))


# --- population loss and its closed-form gradients (spec §3.3-3.4) -------------------------------
def _softmax(z):
    # Shifting by the real part's maximum keeps complex-step perturbations exact.
    e = np.exp(z - np.max(np.real(z), axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(pi, Phi):
    """``A[q, k] = p_q(k) = pi_k e^{Phi_qk} / sum_l pi_l e^{Phi_ql}`` (spec §3.3)."""
    return _softmax(np.log(np.asarray(pi))[None, :] + Phi)


def population_loss(M, Phi, pi, P):
    """``L(M, Phi) = -sum_q pi_q sum_k P_qk log S_qk`` (spec §3.3, boxed)."""
    pi = np.asarray(pi)
    Z = attention(pi, Phi) @ M
    Zs = Z - np.max(np.real(Z), axis=1, keepdims=True)
    log_S = Zs - np.log(np.exp(Zs).sum(axis=1, keepdims=True))
    return -np.sum(pi[:, None] * P * log_S)


def population_gradients(M, Phi, pi, P):
    """``(G_M, G_Phi) = (dL/dM, dL/dPhi)`` in closed form (spec §3.4)."""
    pi = np.asarray(pi)
    A = attention(pi, Phi)
    Z = A @ M
    R = pi[:, None] * (_softmax(Z) - P)
    G_M = A.T @ R
    G_Phi = A * (R @ M.T - np.sum(R * Z, axis=1, keepdims=True))
    return G_M, G_Phi


class Parameters(NamedTuple):
    """``theta = (W0, WQ, WK, W1)``: embedding ``d x m``, query and key ``m x m_k``, output
    projection ``m x d`` (spec §3.2)."""

    W0: np.ndarray
    WQ: np.ndarray
    WK: np.ndarray
    W1: np.ndarray

    def flatten(self) -> np.ndarray:
        return np.concatenate([np.ravel(w) for w in self])

    @classmethod
    def unflatten(cls, x, d: int, m: int, m_k: int) -> Parameters:
        shapes = ((d, m), (m, m_k), (m, m_k), (m, d))
        cuts = np.cumsum([a * b for a, b in shapes])[:-1]
        return cls(*(part.reshape(s) for part, s in zip(np.split(x, cuts), shapes)))

    @classmethod
    def random(cls, rng, d: int, m: int, m_k: int, eps: float) -> Parameters:
        """Small initialisation: every entry i.i.d. ``N(0, eps^2)`` (spec §3.1)."""
        return cls(*(eps * rng.standard_normal(s) for s in ((d, m), (m, m_k), (m, m_k), (m, d))))


def parameter_maps(theta: Parameters, qk_scale: float = 1.0):
    """``(M, Phi) = (W0 W1, s W0 WQ WK^T W0^T)``; works for numpy arrays and sympy matrices."""
    W0, WQ, WK, W1 = theta
    if isinstance(W0, sp.MatrixBase):
        return W0 * W1, qk_scale * W0 * WQ * WK.T * W0.T
    return W0 @ W1, qk_scale * (W0 @ WQ @ WK.T @ W0.T)


def parameter_loss(theta: Parameters, pi, P, qk_scale: float = 1.0):
    """The population loss as a function of the trained parameters (spec §3.3)."""
    return population_loss(*parameter_maps(theta, qk_scale), pi, P)


def parameter_gradients(theta: Parameters, pi, P, qk_scale: float = 1.0) -> Parameters:
    """``dL/dtheta`` by the chain rule through ``M`` and ``Phi`` (spec §3.4)."""
    W0, WQ, WK, W1 = theta
    G_M, G_Phi = population_gradients(*parameter_maps(theta, qk_scale), pi, P)
    s = qk_scale
    return Parameters(
        W0=G_M @ W1.T + s * (G_Phi @ W0 @ WK @ WQ.T + G_Phi.T @ W0 @ WQ @ WK.T),
        WQ=s * (W0.T @ G_Phi @ W0 @ WK),
        WK=s * (W0.T @ G_Phi.T @ W0 @ WQ),
        W1=W0.T @ G_M,
    )


def parameter_field(x, pi, P, d: int, m: int, m_k: int, qk_scale: float = 1.0) -> np.ndarray:
    """Population gradient flow ``theta' = -dL/dtheta`` on the flattened parameters."""
    theta = Parameters.unflatten(x, d, m, m_k)
    return -parameter_gradients(theta, pi, P, qk_scale).flatten()


def conserved_quantities(theta: Parameters):
    """Invariants of the flow (spec §3.4, corrected): ``W1 1`` (``G_M 1 = 0``);
    ``C = W0^T W0 - W1 W1^T - WQ WQ^T - WK WK^T`` (``m x m``, from the symmetry
    ``(W0 g, g^-1 W1, g^-1 WQ, g^-1 WK)``) and ``WQ^T WQ - WK^T WK`` (``m_k x m_k``, from
    ``(WQ h, WK h^-T)``). ``W0^T W0 - W1 W1^T`` alone is conserved only while attention is small."""
    W0, WQ, WK, W1 = theta
    return (
        W1 @ np.ones(W1.shape[1]),
        W0.T @ W0 - W1 @ W1.T - WQ @ WQ.T - WK @ WK.T,
        WQ.T @ WQ - WK.T @ WK,
    )


def complex_step_jacobian(field, x) -> np.ndarray:
    """Jacobian of a real-analytic ``field`` at real ``x`` by the complex step
    ``J e_j = Im f(x + i h e_j) / h``: no subtraction, hence exact to rounding for tiny ``h``."""
    x = np.asarray(x, dtype=float)
    h = 1e-30
    cols = []
    for j in range(x.size):
        xj = x.astype(complex)
        xj[j] += 1j * h
        cols.append(np.imag(field(xj)) / h)
    return np.stack(cols, axis=1)


# --- sympy forms ----------------------------------------------------------------------------------
def population_loss_expr(M: sp.Matrix, Phi: sp.Matrix, pi: sp.Matrix, P: sp.Matrix) -> sp.Expr:
    """Symbolic ``L(M, Phi)`` of spec §3.3 (``pi`` a column matrix)."""
    d = pi.rows
    loss = sp.Integer(0)
    for q in range(d):
        weights = [pi[k] * sp.exp(Phi[q, k]) for k in range(d)]
        z = [sum(weights[k] * M[k, j] for k in range(d)) / sum(weights) for j in range(d)]
        log_partition = sp.log(sum(sp.exp(zj) for zj in z))
        loss -= pi[q] * sum(P[q, j] * (z[j] - log_partition) for j in range(d))
    return loss


def parameter_loss_expr(theta: Parameters, pi: sp.Matrix, P: sp.Matrix, qk_scale=1) -> sp.Expr:
    """Symbolic loss of the parameters (``theta`` made of sympy matrices)."""
    # parameter_maps is written for numpy and works unchanged on sympy matrices.
    M, Phi = parameter_maps(theta, qk_scale)
    return population_loss_expr(cast(sp.Matrix, M), cast(sp.Matrix, Phi), pi, P)


def pi_symbols(d: int, normalised: bool = True) -> sp.Matrix:
    """``(pi_1, ..., pi_d)`` as positive symbols; with ``normalised`` the last is
    ``1 - sum of the others`` so that identities needing ``sum pi = 1`` simplify."""
    free = sp.symbols(f"pi_1:{d + (0 if normalised else 1)}", positive=True)
    return sp.Matrix([*free, 1 - sum(free)] if normalised else free)
