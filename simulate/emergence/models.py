"""Models of the emergence paper (spec emergence.md §3, project defaults [derived]).

``CausalTransformer``: 1 or 2 pre-LayerNorm blocks, H heads of dimension d_h (d_model = H d_h),
learned absolute positions, MLP 4x, untied read-out. The attention-bias intervention (§3) adds
c * B[q, k] to the first layer's attention logits, where B is the 0/1 true pattern of the task
(``simulate.emergence.tasks.linear_map_pattern`` / ``ca_pattern``).

``CausalMixer``: MLP-Mixer of the same depth and width whose token-mixing MLP uses
lower-triangular masked (T x T) weights, so position p sees only positions <= p; then a channel
MLP.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

MIN_POSITIONS = 8
"""Sequences shorter than this run their blocks padded to it. XLA:CPU hands a dot to YNNPACK only
when one of its dimensions is at least 8 (``IsDotSupportedByYnn``,
``xla/backends/cpu/ynn_support.cc``); the attention of a 7-position sequence (the linear map at
S = 4) fell back to the default batched dot and its step cost more than that of 11 positions. The
padding comes after every real position, so the causal mask hides it from them, and it is cut
before anything is returned."""


def _dense(key: jax.Array, n_in: int, n_out: int, dtype: DTypeLike) -> jax.Array:
    return (jax.random.normal(key, (n_in, n_out)) / math.sqrt(n_in)).astype(dtype)


def _layer_norm(x: jax.Array, eps: float = 1e-5) -> jax.Array:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(x.var(-1, keepdims=True) + eps)


class CausalTransformer(eqx.Module):
    embed: jax.Array
    pos: jax.Array
    qkv: list
    out: list
    mlp_in: list
    mlp_out: list
    readout: jax.Array
    heads: int = eqx.field(static=True)
    head_dim: int = eqx.field(static=True)

    def __init__(
        self,
        vocab: int,
        length: int,
        *,
        layers: int = 1,
        heads: int = 8,
        head_dim: int = 8,
        key: jax.Array,
        dtype: DTypeLike = jnp.float32,
    ) -> None:
        d = heads * head_dim
        k = iter(jax.random.split(key, 3 + 4 * layers))
        self.heads, self.head_dim = heads, head_dim
        self.embed = (jax.random.normal(next(k), (vocab, d))).astype(dtype)
        self.pos = (0.1 * jax.random.normal(next(k), (length, d))).astype(dtype)
        self.qkv = [_dense(next(k), d, 3 * d, dtype) for _ in range(layers)]
        self.out = [_dense(next(k), d, d, dtype) for _ in range(layers)]
        self.mlp_in = [_dense(next(k), d, 4 * d, dtype) for _ in range(layers)]
        self.mlp_out = [_dense(next(k), 4 * d, d, dtype) for _ in range(layers)]
        self.readout = _dense(next(k), d, vocab, dtype)

    def logits_and_attention(
        self, tokens: jax.Array, bias: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Logits (T, vocab) and attention (layers, H, T, T) of one sequence; ``bias`` (T, T) is
        added to the first layer's attention logits (the attention-bias intervention)."""
        return self.padded_logits_and_attention(tokens, bias, MIN_POSITIONS)

    def padded_logits_and_attention(
        self, tokens: jax.Array, bias: jax.Array | None, positions: int
    ) -> tuple[jax.Array, jax.Array]:
        """``logits_and_attention`` computed on max(T, ``positions``) positions (see
        ``MIN_POSITIONS``)."""
        T = tokens.shape[0]
        P = max(T, positions)
        x = self.embed[tokens] + self.pos[:T]
        if P > T:
            x = jnp.pad(x, ((0, P - T), (0, 0)))
            bias = None if bias is None else jnp.pad(bias, ((0, P - T), (0, P - T)))
        mask = jnp.tril(jnp.ones((P, P), bool))
        attns = []
        for layer in range(len(self.qkv)):
            q, k, v = jnp.split(_layer_norm(x) @ self.qkv[layer], 3, axis=-1)
            q, k, v = (a.reshape(P, self.heads, self.head_dim) for a in (q, k, v))
            scores = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
            if bias is not None and layer == 0:
                scores = scores + bias.astype(scores.dtype)
            a = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
            attns.append(a[:, :T, :T] if P > T else a)
            x = x + jnp.einsum("hqk,khd->qhd", a, v).reshape(P, -1) @ self.out[layer]
            x = x + jax.nn.gelu(_layer_norm(x) @ self.mlp_in[layer]) @ self.mlp_out[layer]
        logits = _layer_norm(x) @ self.readout
        return (logits[:T] if P > T else logits), jnp.stack(attns)

    def __call__(self, tokens: jax.Array, bias: jax.Array | None = None) -> jax.Array:
        """Logits (T, vocab) of one sequence."""
        return self.logits_and_attention(tokens, bias)[0]


class CausalMixer(eqx.Module):
    embed: jax.Array
    pos: jax.Array
    token_in: list
    token_out: list
    mlp_in: list
    mlp_out: list
    readout: jax.Array

    def __init__(
        self,
        vocab: int,
        length: int,
        *,
        layers: int = 1,
        width: int = 64,
        key: jax.Array,
        dtype: DTypeLike = jnp.float32,
    ) -> None:
        k = iter(jax.random.split(key, 3 + 4 * layers))
        self.embed = jax.random.normal(next(k), (vocab, width)).astype(dtype)
        self.pos = (0.1 * jax.random.normal(next(k), (length, width))).astype(dtype)
        self.token_in = [_dense(next(k), length, length, dtype) for _ in range(layers)]
        self.token_out = [_dense(next(k), length, length, dtype) for _ in range(layers)]
        self.mlp_in = [_dense(next(k), width, 4 * width, dtype) for _ in range(layers)]
        self.mlp_out = [_dense(next(k), 4 * width, width, dtype) for _ in range(layers)]
        self.readout = _dense(next(k), width, vocab, dtype)

    def __call__(self, tokens: jax.Array, bias: jax.Array | None = None) -> jax.Array:
        """Logits (T, vocab) of one sequence; ``bias`` is ignored (no attention)."""
        del bias  # no attention to bias
        T = tokens.shape[0]
        x = self.embed[tokens] + self.pos[:T]
        mask = jnp.tril(jnp.ones((T, T), x.dtype))
        for layer in range(len(self.token_in)):
            # token mixing: rows are output positions; masking keeps output p on inputs <= p
            w_in = self.token_in[layer][:T, :T] * mask
            w_out = self.token_out[layer][:T, :T] * mask
            x = x + w_out @ jax.nn.gelu(w_in @ _layer_norm(x))
            x = x + jax.nn.gelu(_layer_norm(x) @ self.mlp_in[layer]) @ self.mlp_out[layer]
        return _layer_norm(x) @ self.readout


def parameter_count(heads: int, head_dim: int, length: int, vocab: int = 2) -> int:
    """Parameters of the one-layer ``CausalTransformer`` of width d = H d_h (a function of the
    width only: the heads split d, they do not add parameters)."""
    d = heads * head_dim
    return vocab * d + length * d + 12 * d * d + d * vocab
