"""The reduced head field of ``theory.incremental.heads`` written in JAX matrix form (spec
incremental.md §5.2).

State ``(v, theta)``: values ``v`` (H x h) and attention logits ``theta`` (H x T), ``s =
softmax(theta)``.
Replicator metric: ``theta' = R^T v_k``; logit metric: ``theta' = J(s_k) R^T v_k``; ``v_k' = R
s_k``.
The tests check this against the symbolic field of ``theory.incremental.heads.HeadSystem``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def residual(G, v, s):
    """R = G - sum_k v_k s_k^T."""
    return G - v.T @ s


def loss(G, v, s):
    """L = 1/2 ||R||_F^2."""
    return 0.5 * jnp.sum(residual(G, v, s) ** 2)


def entry_losses(G, v, s):
    """Per-(feature, lag) loss 1/2 R_{j,i}^2 (spec §6)."""
    return 0.5 * residual(G, v, s) ** 2


def softmax_metric_apply(s, f, power: int):
    """J(s)^power f for each head (rows), J(s) = diag(s) - s s^T."""
    for _ in range(power):
        f = s * (f - jnp.sum(s * f, axis=-1, keepdims=True))
    return f


def _per_head(fn, *per_head_args):
    return jax.vmap(fn)(*per_head_args)


def vs_field(G, v, s, power: int):
    """(v', s') in (v, s) coordinates: the form the symbolic system is written in."""
    R = residual(G, v, s)
    return _per_head(lambda v_k, s_k: (R @ s_k, softmax_metric_apply(s_k, v_k @ R, power)), v, s)


def tie_heads(x, tied):
    """``x`` (heads first) with every head replaced by the first one where ``tied``."""
    return jnp.where(tied, jnp.broadcast_to(x[:1], x.shape), x)


def logit_field(G, v, theta, power, tied=False):
    """(v', theta') with theta' = J(s)^(power-1) R^T v, ``power`` 1 (replicator metric) or 2
    (logit metric).

    ``power`` and ``tied`` may be traced, so that one compiled program serves both metrics and
    the symmetric subspace beside free runs. ``tied`` integrates the symmetric subspace
    exactly: every head moves as the first one (P = H v_1 s_1^T), so the heads stay equal
    whatever the rounding. In floating point the untied system need not stay symmetric: the
    solver's stage sums may round heads differently and the head-splitting mode amplifies that
    round-off."""
    v, theta = tie_heads(v, tied), tie_heads(theta, tied)
    s = _per_head(jax.nn.softmax, theta)
    R = residual(G, v, s)

    def head(v_k, s_k):
        f = v_k @ R
        return R @ s_k, jnp.where(power == 1, f, softmax_metric_apply(s_k, f, 1))

    return _per_head(head, v, s)
