"""How fast an optimizer splits the heads at the symmetric plateau: AdamW, SGD with momentum and
plain GD linearised (issue 17 item 4; spec incremental.md §4 optimiser, §5.3 symmetric stall,
§5.4 cooperative phase).

H heads that differ by ``delta_k`` (``sum_k delta_k = 0``) around a point of the symmetric
subspace have gradients ``g_k = g_s + H_a delta_k`` to first order, ``H_a`` the Hessian of the loss
in the head-splitting directions.

AdamW moves each head by ``m_k <- beta1 m_k + (1 - beta1) g_k`` and ``x_k <- (1 - lr wd) x_k -
lr m_k / (sqrt(v_k) + eps)``. On the plateau the symmetric gradient ``g_s`` is small against
``sqrt(v)``, which holds the minibatch noise and the memory of the larger gradients before the
plateau, and the heads' second moments ``v_k`` differ from each other only through an average
over ``1 / (1 - beta2)`` steps. To first order in ``delta`` the heads' difference then follows
gradient descent preconditioned by ``P = diag(1 / (sqrt(v) + eps))`` with AdamW's momentum (an
exponential average, ``ema``) and decay. SGD with momentum ``beta`` (optax's trace ``m <- g + beta
m``, ``heavy_ball``) and plain GD (``beta = 0``) are the same with ``P = I`` and no decay.

Along an eigenvector of ``P H_a`` with eigenvalue ``-mu / lr`` (``mu > 0``: an unstable direction),
with ``n = lr P m`` the step is a 2 x 2 linear map on ``(delta, n)`` (``splitting_map``):

    ema:        n' = beta n - (1 - beta) mu delta,   delta' = (1 - c) delta - n',   c = lr wd
    heavy_ball: n' = beta n - mu delta,              delta' = delta - n'

so ``delta`` grows like ``z^t``, ``z`` the larger root of its characteristic polynomial, and the
split grows at ``r = ln z`` per step. The plateau ends when the split has grown from its initial
size ``~q`` to an O(1) size, so its length is ``ln(1/q) / r`` plus a part that does not depend on
``q``: linear in ``ln(1/q)`` with slope ``1 / r``. ``simulate.incremental.plateau_splitting``
computes ``mu`` for the minimal transformer.

What is left out: the heads' differences in ``v_k`` (an EMA over ``1 / (1 - beta2)`` steps of
``2 g_s H_a delta``, small while ``g_s`` is), Adam's bias corrections (steps past ``1 / (1 -
beta1)``), gradient clipping (inactive once the gradient norm is below the threshold) and the
drift of ``P`` and ``H_a`` along the plateau (the rate is read where the step is).
"""

from __future__ import annotations

import math
from functools import cache

import sympy as sp

from theory.validation import require

z, mu, beta, c = sp.symbols("z mu beta c", real=True)
MOMENTA = ("ema", "heavy_ball")


def splitting_map(momentum: str) -> sp.Matrix:
    """The linearised step on ``(delta, n)`` along one unstable direction (module docstring):
    ``ema`` for AdamW (decay ``c = lr wd``), ``heavy_ball`` for SGD with momentum (``c = 0``)."""
    require(momentum in MOMENTA, "momentum", momentum, f"one of {MOMENTA}")
    drive = (1 - beta) * mu if momentum == "ema" else mu
    decay = c if momentum == "ema" else 0
    n_next = sp.Matrix([[-drive, beta]])
    delta_next = sp.Matrix([[1 - decay, 0]]) - n_next
    return sp.Matrix.vstack(delta_next, n_next)


def characteristic_polynomial(momentum: str) -> sp.Expr:
    """``det(z I - M)`` of ``splitting_map``: ``z^2 - (1 - c + beta + (1 - beta) mu) z + beta (1 -
    c)`` (ema), ``z^2 - (1 + beta + mu) z + beta`` (heavy_ball)."""
    return sp.expand((z * sp.eye(2) - splitting_map(momentum)).det())


@cache
def _growth_root(momentum: str):
    roots = sp.solve(characteristic_polynomial(momentum), z)
    # the larger root: at beta = 0 the roots are 1 - c + mu and 0
    at_zero = {beta: 0, c: 0, mu: sp.Rational(1, 2)}
    root = max(roots, key=lambda r: float(r.subs(at_zero)))
    return sp.lambdify((mu, beta, c), root, "math")


def splitting_rate(mu_: float, beta_: float, decay: float = 0.0, momentum: str = "ema") -> float:
    """``r = ln z`` per step: growth of a head-splitting direction whose preconditioned curvature
    gives ``mu = -lr * eigenvalue(P H_a) > 0`` per step, with momentum ``beta_`` of the given kind
    and decoupled weight decay ``decay = lr * wd`` (ema only; ``beta_ = 0``, ``decay = 0``:
    ``ln(1 + mu)``, gradient descent)."""
    require(momentum in MOMENTA, "momentum", momentum, f"one of {MOMENTA}")
    require(math.isfinite(mu_) and mu_ > 0, "mu", mu_, "a finite growth per step > 0")
    require(0 <= beta_ < 1, "beta", beta_, "a value in [0, 1)")
    require(
        0 <= decay < 1 and (momentum == "ema" or decay == 0),
        "decay",
        decay,
        "lr * weight decay in [0, 1), with ema momentum only",
    )
    return math.log(_growth_root(momentum)(mu_, beta_, decay))
