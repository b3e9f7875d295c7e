"""The full transformer of the incremental-learning paper (spec incremental.md §3.2): a standard
post-LN decoder of one or two blocks.

x_t = E x_t^tok + P_t (E: d -> 255, no bias, orthogonal rescaled to spectral norm 1; P: learned
absolute positions, Xavier, 50 slots); per block
h = LN_1(x + Drop(sum_k softmax_{s<=t}(q_k(t)^T k_k(s) / sqrt(85)) v_k(s) W_O^k)),
x' = LN_2(h + Drop(W_2 ReLU(W_1 h + b_1) + b_2)), 3 heads of dimension 85, Q/K/V/O without bias,
64 hidden units; logits_t = U x_t (U: 255 -> d, orthogonal, no bias). Dropout 0.1 acts only when
a key is given. The MLP keeps its biases (a standard Linear; the spec removes them only from the
attention projections).

Same interface as ``simulate.incremental.minimal_transformer.MinimalTransformer`` (call,
``attention``,
``logits_and_attention``, ``head_queries``, static ``context`` for the c-gram baseline).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from simulate.incremental.minimal_transformer import evaluate, xavier_uniform

WIDTH, HEADS, MLP, DROPOUT, MAX_LENGTH = 255, 3, 64, 0.1, 50
"""the paper's width, heads, MLP hidden units, dropout rate and positional slots (§3.2)."""


def _dropout(x, rate: float, key):
    if key is None or rate == 0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _unit_spectral_orthogonal(key, shape, dtype):
    W = jax.nn.initializers.orthogonal()(key, shape, dtype)
    return W / jnp.linalg.norm(W, ord=2)


class Block(eqx.Module):
    """Post-LN attention + MLP block; projections per head, (H, width, width/H) and WO
    (H, width/H, width)."""

    WQ: jax.Array
    WK: jax.Array
    WV: jax.Array
    WO: jax.Array
    ln_attention: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear
    ln_mlp: eqx.nn.LayerNorm
    dropout: float = eqx.field(static=True)

    def __init__(
        self,
        width: int,
        heads: int,
        mlp: int,
        dropout: float,
        query_scale: float | None,
        dtype,
        *,
        key,
    ):
        kq, kk, kv, ko, k1, k2 = jax.random.split(key, 6)
        per_head = (heads, width, width // heads)
        self.WK = xavier_uniform(kk, per_head, width, width, dtype)
        self.WO = xavier_uniform(ko, (heads, width // heads, width), width, width, dtype)
        if query_scale is None:
            self.WQ = xavier_uniform(kq, per_head, width, width, dtype)
            self.WV = xavier_uniform(kv, per_head, width, width, dtype)
        else:
            self.WQ = jax.random.uniform(kq, per_head, dtype, -query_scale, query_scale)
            self.WV = jnp.zeros(per_head, dtype)
        self.ln_attention = eqx.nn.LayerNorm(width, dtype=dtype)
        self.mlp_in = eqx.nn.Linear(width, mlp, dtype=dtype, key=k1)
        self.mlp_out = eqx.nn.Linear(mlp, width, dtype=dtype, key=k2)
        self.ln_mlp = eqx.nn.LayerNorm(width, dtype=dtype)
        self.dropout = dropout

    def __call__(self, x, mask, key=None):
        """(x' (m, width), attention (H, m, m))."""
        ka, km = (None, None) if key is None else jax.random.split(key)
        q, k, v = (jnp.einsum("tw,hwe->hte", x, W) for W in (self.WQ, self.WK, self.WV))
        scores = jnp.einsum("hte,hse->hts", q, k) * q.shape[-1] ** -0.5
        a = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
        attended = jnp.einsum("hts,hse,hew->tw", a, v, self.WO)
        x = jax.vmap(self.ln_attention)(x + _dropout(attended, self.dropout, ka))
        hidden = jax.vmap(lambda y: self.mlp_out(jax.nn.relu(self.mlp_in(y))))(x)
        return jax.vmap(self.ln_mlp)(x + _dropout(hidden, self.dropout, km)), a


class FullTransformer(eqx.Module):
    encoder: jax.Array
    """E (width, d), token encoder."""
    positional: jax.Array
    """P (max_length, width), learned absolute positions."""
    blocks: tuple[Block, ...]
    decoder: jax.Array
    """U (d, width), read-out."""
    vocab: int = eqx.field(static=True)
    context: int | None = eqx.field(static=True)
    """c of the c-gram baseline (None: the whole causal prefix)."""

    def __init__(
        self,
        vocab: int,
        *,
        key,
        layers: int = 1,
        heads: int = HEADS,
        width: int = WIDTH,
        mlp: int = MLP,
        dropout: float = DROPOUT,
        max_length: int = MAX_LENGTH,
        context: int | None = None,
        query_scale: float | None = None,
        dtype=jnp.float32,
    ):
        """``query_scale``: None for Xavier Q/K/V/O; q for Q ~ U(-q, q) with V = 0 (K, O Xavier).
        ``width`` must be a multiple of ``heads`` (paper: 255 = 3 x 85)."""
        ke, kp, kd, *kb = jax.random.split(key, 3 + layers)
        self.encoder = _unit_spectral_orthogonal(ke, (width, vocab), dtype)
        self.positional = xavier_uniform(kp, (max_length, width), max_length, width, dtype)
        self.blocks = tuple(
            Block(width, heads, mlp, dropout, query_scale, dtype, key=k) for k in kb
        )
        self.decoder = _unit_spectral_orthogonal(kd, (vocab, width), dtype)
        self.vocab, self.context = vocab, context

    @property
    def layers(self) -> int:
        return len(self.blocks)

    def forward(self, tokens, positions, mask, key=None):
        """Logits and attention maps of the tokens at ``positions``, query t reading the keys s
        with ``mask[t, s]``."""
        x = self.encoder[:, tokens].T + self.positional[positions]
        keys = [None] * self.layers if key is None else list(jax.random.split(key, self.layers))
        maps = []
        for block, k in zip(self.blocks, keys, strict=True):
            x, a = block(x, mask, k)
            maps.append(a)
        return x @ self.decoder.T, jnp.stack(maps)

    def logits_and_attention(self, tokens, key=None):
        return evaluate(self.forward, tokens, self.context, self.layers, key)

    def attention(self, tokens):
        """a (layers, H, n, n) in eval mode, causal (and windowed for a c-gram model)."""
        return self.logits_and_attention(tokens)[1]

    def head_queries(self):
        """(H, width, width/H): the first block's per-head query projections."""
        return self.blocks[0].WQ

    def __call__(self, tokens, key=None):
        """Next-token logits (n, d); dropout is active only when ``key`` is given."""
        return self.logits_and_attention(tokens, key)[0]
