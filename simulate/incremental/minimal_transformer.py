"""The minimal transformer of the incremental-learning paper (spec incremental.md §3.1), in one or
two layers, and the c-gram window shared by every Markov-chain model (§2.3, §8.7).

z_s = [x_s; e_s] in R^D (one-hot token, one-hot position over L slots, D = d + L); head k:
a_k(t, s) = softmax_{s <= t}(D^{-1/2} (W_Q^k z_t)^T z_s),  o_t = sum_k sum_{s<=t} a_k(t, s) W_V^k
z_s,
logits_t = [o_t]_{1:d}. Keys are the raw inputs and the read-out is fixed; only W_Q, W_V train.

Two layers [derived; the spec gives only the learning rate 0.04]: layer 1 is the same attention
with a residual, u_t = z_t + sum_k sum_s a1_k(t, s) W_V1^k z_s; layer 2 is the one-layer model
applied to u (keys = raw u, no residual), logits_t = [o_t]_{1:d}.

Common interface of the Markov-chain models (this one and
``simulate.incremental.full_transformer``):
``model(tokens, key=None) -> logits (n, d)``, ``model.attention(tokens) -> (layers, H, n, n)``,
``model.logits_and_attention(tokens, key=None)``, ``model.head_queries() -> (H, ...)`` (the first
layer's per-head query weights) and a static ``context``: None, or c for the c-gram baseline whose
output at t reads only tokens t-c < s <= t (lags 1..c of the token it predicts).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp


def attention_mask(valid):
    """(m, m) causal mask restricted to valid keys. A padding query (no valid key) attends to
    itself so that its softmax stays finite; valid queries never read it."""
    m = valid.shape[0]
    return jnp.tril(jnp.ones((m, m), bool)) & (valid[None, :] | jnp.eye(m, dtype=bool))


def lag_mask(n: int, context: int | None):
    """(n, n) mask of the keys query t reads: t - c < s <= t (all s <= t when c is None)."""
    lag = jnp.arange(n)[:, None] - jnp.arange(n)[None, :]
    return (lag >= 0) if context is None else (lag >= 0) & (lag < context)


def evaluate(forward: Callable, tokens, context: int | None, layers: int, key=None):
    """(logits (n, d), attention (layers, H, n, n)) of ``forward(tokens, positions, mask, key)``.

    With a context c the output at t depends on the last c tokens only, at their absolute
    positions. One layer reads exactly its keys, so the lag mask t - c < s <= t is the c-gram
    class, in one pass over the sequence. Masking each of two layers would let their composition
    read 2c-1 tokens back, so two layers run each window of c tokens on its own (c times the work)
    and attention row t is that window's last query (the truncated window of §8.7)."""
    n = tokens.shape[0]
    positions = jnp.arange(n)
    if context is None or layers == 1:
        return forward(tokens, positions, lag_mask(n, context), key)
    window = positions[:, None] - context + 1 + jnp.arange(context)  # (n, c), t itself last
    valid = window >= 0
    window = jnp.maximum(window, 0)
    keys = None if key is None else jax.random.split(key, n)
    logits, attn = jax.vmap(lambda p, v, k: forward(tokens[p], p, attention_mask(v), k))(
        window, valid, keys
    )
    spread = jax.nn.one_hot(window, n, dtype=attn.dtype) * valid[..., None].astype(attn.dtype)
    return logits[:, -1], jnp.einsum("tlhj,tjs->lhts", attn[..., -1, :], spread)


def xavier_uniform(key, shape, fan_in: int, fan_out: int, dtype):
    limit = (6.0 / (fan_in + fan_out)) ** 0.5
    return jax.random.uniform(key, shape, dtype, -limit, limit)


def _attend(WQ, u, mask):
    """a (H, m, m) of one minimal layer: keys are the raw inputs u."""
    scores = jnp.einsum("hde,te,sd->hts", WQ, u, u) * u.shape[-1] ** -0.5
    return _softmax(scores, mask)


def _softmax(scores, mask):
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)


def _one_hot_layer(WQ, WV, index, mask):
    """(a (H, m, m), sum_k sum_s a_k(t, s) W_V^k z_s (m, rows of WV)) of a layer whose inputs are
    the one-hot z_s = [x_s; e_s], ``index`` = (x_s, d + s): W z_s is the sum of two columns of W,
    so the layer is gathers where the dense form multiplies by zeros (D times the work; the
    largest cost of the training step in the profile)."""
    token, position = index
    rows = WQ[:, token] + WQ[:, position]  # (H, s, D): z_s^T W_Q^k
    scores = jnp.swapaxes(rows[..., token] + rows[..., position], 1, 2)  # (H, t, s)
    a = _softmax(scores * WQ.shape[-1] ** -0.5, mask)
    values = WV[..., token] + WV[..., position]  # (H, rows, s): W_V^k z_s
    return a, jnp.einsum("hts,hes->te", a, values)


class MinimalTransformer(eqx.Module):
    WQ: jax.Array
    """query matrices W_Q^k: (H, D, D) for one layer, (layers, H, D, D) for two."""
    WV: jax.Array
    """value matrices W_V^k, same shape as WQ."""
    vocab: int = eqx.field(static=True)
    context: int | None = eqx.field(static=True, default=None)
    """c of the c-gram baseline (None: the whole causal prefix)."""

    @property
    def layers(self) -> int:
        return 1 if self.WQ.ndim == 3 else self.WQ.shape[0]

    @property
    def positions(self) -> int:
        return self.WQ.shape[-1] - self.vocab

    def stacked(self) -> tuple[jax.Array, jax.Array]:
        """(W_Q, W_V) with a leading layer axis, (layers, H, D, D) each."""
        return self.WQ.reshape(-1, *self.WQ.shape[-3:]), self.WV.reshape(-1, *self.WV.shape[-3:])

    def inputs(self, tokens, positions=None):
        """z (n, D) for a token sequence (n,) at ``positions`` (default 0..n-1), n <= L."""
        positions = jnp.arange(tokens.shape[0]) if positions is None else positions
        dtype = self.WQ.dtype
        return jnp.concatenate(
            [
                jax.nn.one_hot(tokens, self.vocab, dtype=dtype),
                jax.nn.one_hot(positions, self.positions, dtype=dtype),
            ],
            axis=-1,
        )

    def forward(self, tokens, positions, mask, key=None):
        """Logits and attention maps of the tokens at ``positions``, query t reading the keys s
        with ``mask[t, s]``."""
        del key  # no dropout in the minimal model
        WQ, WV = self.stacked()
        # only the first d rows of the last layer's output are read out
        first_rows = WV[0] if self.layers > 1 else WV[0, :, : self.vocab]
        a, out = _one_hot_layer(WQ[0], first_rows, (tokens, self.vocab + positions), mask)
        if self.layers == 1:
            return out, a[None]
        maps = [a]
        u = self.inputs(tokens, positions) + out  # the residual stream below the last layer
        for layer in range(1, self.layers):
            a = _attend(WQ[layer], u, mask)
            out = jnp.einsum("hts,hsd->td", a, jnp.einsum("hde,se->hsd", WV[layer], u))
            u = u + out
            maps.append(a)
        return out[:, : self.vocab], jnp.stack(maps)

    def logits_and_attention(self, tokens, key=None):
        return evaluate(self.forward, tokens, self.context, self.layers, key)

    def attention(self, tokens):
        """a (layers, H, n, n), causal (and windowed for a c-gram model)."""
        return self.logits_and_attention(tokens)[1]

    def head_queries(self):
        """(H, D, D): the first layer's W_Q^k."""
        return self.stacked()[0][0]

    def __call__(self, tokens, key=None):
        """Next-token logits (n, d) at every position of ``tokens``."""
        return self.logits_and_attention(tokens, key)[0]


def init_minimal(
    key,
    heads: int,
    vocab: int,
    positions: int,
    query_scale: float | None,
    dtype=jnp.float64,
    layers: int = 1,
    context: int | None = None,
) -> MinimalTransformer:
    """Xavier-uniform W_Q and W_V (``query_scale=None``), or W_Q ~ U(-q, q) with W_V = 0 (q = 0:
    all heads exactly equal). Weights (H, D, D) for one layer, (layers, H, D, D) otherwise."""
    D = vocab + positions
    shape = (heads, D, D) if layers == 1 else (layers, heads, D, D)
    kq, kv = jax.random.split(key)
    if query_scale is None:
        WQ = xavier_uniform(kq, shape, D, D, dtype)
        WV = xavier_uniform(kv, shape, D, D, dtype)
    else:
        WQ = jax.random.uniform(kq, shape, dtype, -query_scale, query_scale)
        WV = jnp.zeros(shape, dtype)
    return MinimalTransformer(WQ, WV, vocab, context)
