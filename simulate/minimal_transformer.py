"""The minimal one-layer transformer of the incremental-learning paper (spec incremental.md §3.1).

z_s = [x_s; e_s] in R^D (one-hot token, one-hot position over L slots, D = d + L); head k:
a_k(t, s) = softmax_{s <= t}(D^{-1/2} (W_Q^k z_t)^T z_s),  o_t = sum_k sum_{s<=t} a_k(t, s) W_V^k z_s,
logits_t = [o_t]_{1:d}. Keys are the raw inputs and the read-out is fixed; only W_Q, W_V train.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp


class MinimalTransformer(eqx.Module):
    WQ: jax.Array
    """(H, D, D) query matrices."""
    WV: jax.Array
    """(H, D, D) value matrices."""
    vocab: int = eqx.field(static=True)

    @property
    def positions(self) -> int:
        return self.WQ.shape[-1] - self.vocab

    def inputs(self, tokens):
        """z (n, D) for a token sequence (n,), n <= L."""
        n = tokens.shape[0]
        return jnp.concatenate([jax.nn.one_hot(tokens, self.vocab),
                                jnp.eye(self.positions)[:n]], axis=-1)

    def attention(self, tokens):
        """a (H, n, n), causal."""
        z = self.inputs(tokens)
        D = z.shape[-1]
        scores = jnp.einsum("hde,te,sd->hts", self.WQ, z, z) / jnp.sqrt(D)
        causal = jnp.tril(jnp.ones((z.shape[0], z.shape[0]), bool))
        return jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)

    def __call__(self, tokens):
        """Next-token logits (n, d) at every position of ``tokens``."""
        z = self.inputs(tokens)
        a = self.attention(tokens)
        values = jnp.einsum("hde,se->hsd", self.WV, z)
        return jnp.einsum("hts,hsd->td", a, values)[:, : self.vocab]


def init_minimal(key, heads: int, vocab: int, positions: int, query_scale: float | None,
                 dtype=jnp.float64) -> MinimalTransformer:
    """Xavier-uniform W_Q and W_V (``query_scale=None``), or W_Q ~ U(-q, q) with W_V = 0."""
    D = vocab + positions
    kq, kv = jax.random.split(key)
    if query_scale is None:
        limit = jnp.sqrt(6.0 / (2 * D))
        WQ = jax.random.uniform(kq, (heads, D, D), dtype, -limit, limit)
        WV = jax.random.uniform(kv, (heads, D, D), dtype, -limit, limit)
    else:
        WQ = jax.random.uniform(kq, (heads, D, D), dtype, -query_scale, query_scale)
        WV = jnp.zeros((heads, D, D), dtype)
    return MinimalTransformer(WQ, WV, vocab)
