"""From the minimal transformer on the regression variant to the reduced head system
(Yüksel, Alvarez Lucendo & Flammarion, arXiv:2602.19143; spec incremental.md §2.4, §3.1, §5.1-5.2).

Regression variant: inputs x_s in R^d, one query at the last position q = L - 1 predicting
``y = sum_j A*_j sum_{i in I(j)} alpha_i x_{q+1-i}`` (lag i is position q + 1 - i, so the query
sees lags 1..L and T = L). Minimal model: ``z_s = [x_s; e_s]`` in R^D, D = d + L, head k scores
``z_s^T W_Q^k z_q / sqrt(D)``, output ``yhat = sum_k sum_s a_k(s) [W_V^k z_s]_{1:d}``; network loss
``L_net = 1/2 E ||y - yhat||^2`` (sum over the d outputs, mean over samples), trained by gradient
flow in time ``tau`` (= steps x lr for gradient descent).

The map (``reduced_state``): ``theta_{k,i} = W_Q^k[d + q + 1 - i, d + q] / sqrt(D)`` (the positional
score), ``v_{k,j} = <W_V^k[1:d, 1:d], Ahat_j>_F / sqrt(D)`` with ``Ahat_j = A*_j / ||A*_j||_F``.
Under ``ASSUMPTIONS`` the network's gradient flow in tau is exactly the logit-metric (Variant B)
reduced flow in ``t = tau`` with target ``G'_{j,i} = alpha_i ||A*_j||_F / sqrt(D)``, and
``L_net = D * L_reduced``. Derivation (checked by ``scaled_flow_mismatch``): the positional score is
``W_pp / sqrt(D)``, so ``theta' = -(1/D) dL/dtheta``; the values move at rate 1. Writing
``V = sqrt(D) v'`` and ``G = sqrt(D) G'`` gives ``v'' = R' s`` and ``theta' = J(s) R'^T v'``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from theory.incremental.heads import HeadSetting
from theory.validation import require


@dataclass(frozen=True)
class Assumption:
    name: str
    statement: str
    check: str
    """the observable that measures it in training (0 when it holds exactly)."""


ASSUMPTIONS = (
    Assumption(
        "isotropic_inputs",
        "E[x_{q+1-i} x_{q+1-j}^T] = delta_ij I (zero-mean, independent lags)",
        "input_moment_error: max |empirical second moment - I| of the batch",
    ),
    Assumption(
        "positional_attention",
        "the scores do not depend on the tokens' content (the content blocks of W_Q act as zero)",
        "content_logit_rms: RMS over samples and positions of the score minus its positional part",
    ),
    Assumption(
        "orthonormal_features",
        "<Ahat_i, Ahat_j>_F = delta_ij",
        "feature_overlap: max_{i != j} |<Ahat_i, Ahat_j>_F|",
    ),
    Assumption(
        "values_in_feature_span",
        "W_V^k[1:d, 1:d] stays in span{Ahat_j} (true from W_V = 0 under the other assumptions)",
        "value_off_span: max_k ||V_k - sum_j <V_k, Ahat_j> Ahat_j||_F / ||V_k||_F",
    ),
    Assumption(
        "no_positional_values",
        "W_V^k[1:d, d:] = 0 (positions add no output bias)",
        "value_position_norm: max_k ||W_V^k[1:d, d:]||_F",
    ),
    Assumption(
        "single_query",
        "one query per sequence, so one attention vector s_k over the "
        "T = L lags per head (several queries would each carry their own row of "
        "positional logits)",
        "by construction of the regression task",
    ),
    Assumption(
        "gradient_flow",
        "gradient descent with a step small enough that tau = steps x lr",
        "stage times at lr and lr/2 agree (tests)",
    ),
)


def value_scale(D: int) -> float:
    """a = sqrt(D): V = a v' and G = a G' make the network flow the unit-rate reduced flow."""
    return float(np.sqrt(D))


def reduced_setting(blocks, feature_norms, alpha, heads: int, L: int, d: int) -> HeadSetting:
    """The reduced system (Variant B, T = L lags) the network's gradient flow maps onto:
    importances ``||A*_j||_F / sqrt(D)`` with the block weights ``alpha`` (one per lag of the
    blocks)."""
    require(L >= sum(blocks), "length", L, f"at least the teacher's window {sum(blocks)}")
    a = value_scale(d + L)
    return HeadSetting(
        heads=heads,
        blocks=tuple(int(b) for b in blocks),
        window=L,
        importances=tuple(float(n) / a for n in feature_norms),
        alpha=None if alpha is None else tuple(float(x) for x in alpha),
        metric="logit",
    )


def reduced_state(
    WQ: np.ndarray, WV: np.ndarray, A: np.ndarray, d: int
) -> tuple[np.ndarray, np.ndarray]:
    """(v', theta) of the reduced system from the network's W_Q, W_V (H x D x D, or any leading
    batch dims) and the teacher's A* (h x d x d)."""
    D = WQ.shape[-1]
    L = D - d
    q = L - 1
    keys = d + q + 1 - np.arange(1, L + 1)  # lag i -> row of its key position
    theta = WQ[..., keys, d + q] / np.sqrt(D)
    A_hat = A / np.linalg.norm(A, axis=(1, 2), keepdims=True)
    v = np.einsum("...ab,jab->...j", WV[..., :d, :d], A_hat) / value_scale(D)
    return v, theta


def scaled_flow_mismatch(heads: int = 2, h: int = 2, T: int = 3, D: int = 7) -> sp.Matrix:
    """Symbolic check of the scale factors: the network flow (values at rate 1, positional query
    weights w = sqrt(D) theta at rate 1) rewritten in (v' = v / sqrt(D), theta) minus the Variant B
    flow with target G / sqrt(D). Returns the difference as one column, identically zero."""
    G = sp.Matrix(h, T, lambda j, i: sp.Symbol(f"G_{j}_{i}", real=True))
    v = sp.Matrix(heads, h, lambda k, j: sp.Symbol(f"v_{k}_{j}", real=True))
    w = sp.Matrix(heads, T, lambda k, i: sp.Symbol(f"w_{k}_{i}", real=True))
    rootD = sp.sqrt(D)

    def softmax(row):
        e = [sp.exp(x) for x in row]
        return sp.Matrix(1, len(e), [x / sum(e) for x in e])

    s = sp.Matrix.vstack(*[softmax(w.row(k) / rootD) for k in range(heads)])
    loss = sp.Rational(1, 2) * sum(r**2 for r in (G - v.T * s))
    net_v = -sp.Matrix(heads, h, lambda k, j: sp.diff(loss, v[k, j]))
    net_theta = -sp.Matrix(heads, T, lambda k, i: sp.diff(loss, w[k, i])) / rootD

    vp = v / rootD
    Rp = G / rootD - vp.T * s
    red_v = sp.Matrix.vstack(*[(Rp * s.row(k).T).T for k in range(heads)])
    red_theta = sp.Matrix.vstack(
        *[
            ((sp.diag(*s.row(k)) - s.row(k).T * s.row(k)) * Rp.T * vp.row(k).T).T
            for k in range(heads)
        ]
    )
    diff = sp.Matrix([*(net_v / rootD - red_v), *(net_theta - red_theta)])
    return diff.applyfunc(sp.simplify)
