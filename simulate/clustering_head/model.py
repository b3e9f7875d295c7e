"""The 2-D clustering-head model (spec clustering_head.md §3).

One block, one head, attention pooling with a single learned query, embeddings in R^d (d = 2):

    Z_t = N(E[x_t] + P[t]),  a_t = softmax_t(q^T Z_t / sqrt d),  xi(x) = sum_t a_t V Z_t,
    h(x) = xi + W_2 GELU(W_1 N(xi) + b_1) + b_2,  logits = E h(x),

with the gain-free RMS normalisation N(z) = z / (sqrt(mean_i z_i^2) + 1e-5) (in d = 2 a projection
onto the circle of radius sqrt 2). xi(x) is the sequence embedding; there is no residual path around
the attention; the read-out is tied to the token embeddings E.

Initialisation: E, P ~ N(0, 1); q, V ~ U(-1/sqrt d, 1/sqrt d) (the default linear-layer scale);
FFN unit i draws its (W_1 row, b_1 entry, W_2 column) from U(-1, 1) with a key folded from i alone,
then W_1, b_1 are scaled by 1/sqrt d and W_2, b_2 by 1/sqrt m, so the first units of a narrower FFN
are the same draws for every width m (§3, "shared first-units initialisation").
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from simulate.clustering_head.task import histograms

RMS_EPS = 1e-5
"""added to the RMS in the normalisation (as in the paper's code)."""


def rms_norm(z, eps: float = RMS_EPS):
    """N(z) = z / (sqrt(mean_i z_i^2) + eps), no gain, over the last axis."""
    return z / (jnp.sqrt(jnp.mean(z**2, axis=-1, keepdims=True)) + eps)


class ClusteringHead(eqx.Module):
    """Parameters (E, P, q, V, W_1, b_1, W_2, b_2) of the clustering-head model."""

    token: jax.Array  # E, (V_e, d)
    position: jax.Array  # P, (L, d)
    query: jax.Array  # q, (d,)
    value: jax.Array  # V, (d, d)
    w1: jax.Array  # W_1, (m, d)
    b1: jax.Array  # b_1, (m,)
    w2: jax.Array  # W_2, (d, m)
    b2: jax.Array  # b_2, (d,)

    @property
    def dim(self) -> int:
        return self.token.shape[1]

    def normalised(self, x):
        """Z_t = N(E[x_t] + P[t]) for one sequence x of shape (L,): (L, d)."""
        dtype = np.promote_types(self.token.dtype, self.position.dtype)  # one dtype when mixed
        return rms_norm(self.token[x].astype(dtype) + self.position.astype(dtype))

    def attention(self, x):
        """a_t = softmax_t(q^T Z_t / sqrt d): (L,)."""
        return jax.nn.softmax(self.normalised(x) @ self.query / jnp.sqrt(self.dim))

    def sequence_embedding(self, x):
        """xi(x) = sum_t a_t V Z_t: (d,)."""
        Z = self.normalised(x)
        a = jax.nn.softmax(Z @ self.query / jnp.sqrt(self.dim))
        return self.value @ (a @ Z)

    def ffn(self, xi):
        """The residual feed-forward block h = xi + W_2 GELU(W_1 N(xi) + b_1) + b_2."""
        hidden = jax.nn.gelu(self.w1 @ rms_norm(xi) + self.b1, approximate=False)
        return xi + self.w2 @ hidden + self.b2

    def __call__(self, x):
        """logits = E h(x): (V_e,)."""
        return self.token @ self.ffn(self.sequence_embedding(x))


def ffn_units(key, width: int, dim: int = 2, dtype=jnp.float32):
    """Raw U(-1, 1) draws of units 0..m-1: unit i's (W_1 row, b_1, W_2 column) come from
    fold_in(key, i), so they do not depend on the width m."""
    draws = jax.vmap(
        lambda i: jax.random.uniform(jax.random.fold_in(key, i), (2 * dim + 1,), dtype, -1.0, 1.0)
    )(jnp.arange(width))
    return draws[:, :dim], draws[:, dim], draws[:, dim + 1 :].T


def init_clustering_head(
    key, vocab: int = 3, length: int = 12, width: int = 32, dim: int = 2, dtype=jnp.float32
) -> ClusteringHead:
    """The paper's initialisation (module docstring), from one key."""
    k_tok, k_pos, k_q, k_v, k_units, k_b2 = jax.random.split(key, 6)
    bound = 1.0 / jnp.sqrt(dim)
    w1, b1, w2 = ffn_units(k_units, width, dim, dtype)
    b2 = jax.random.uniform(k_b2, (dim,), dtype, -1.0, 1.0)
    return ClusteringHead(
        token=jax.random.normal(k_tok, (vocab, dim), dtype),
        position=jax.random.normal(k_pos, (length, dim), dtype),
        query=jax.random.uniform(k_q, (dim,), dtype, -bound, bound),
        value=jax.random.uniform(k_v, (dim, dim), dtype, -bound, bound),
        w1=(w1 * bound).astype(dtype),
        b1=(b1 * bound).astype(dtype),
        w2=(w2 / jnp.sqrt(width)).astype(dtype),
        b2=(b2 / jnp.sqrt(width)).astype(dtype),
    )


def ideal_positions(length: int, sparsity: int, dtype=jnp.float32) -> jax.Array:
    """The "ideal" positional embeddings P[t] = (0, 1) for t <= k, (0, -1) for t > k (§4)."""
    up = jnp.arange(length) < sparsity
    return jnp.stack([jnp.zeros(length), jnp.where(up, 1.0, -1.0)], axis=1).astype(dtype)


def parameter_count(model: ClusteringHead) -> int:
    return sum(x.size for x in jax.tree_util.tree_leaves(model))


def ideal_clusters(model: ClusteringHead, sparsity: int, modulus: int) -> np.ndarray:
    """§5.1: xi of an ideal clustering head, (1/k) sum_a n_a V zbar_a for every first-k histogram,
    with zbar_a = mean_{t <= k} N(E[a] + P[t]); (histograms, d)."""
    dtype = np.promote_types(model.token.dtype, model.position.dtype)
    Z = rms_norm(
        model.token[:modulus, None].astype(dtype) + model.position[None, :sparsity].astype(dtype)
    ).mean(1)
    n = jnp.asarray(histograms(sparsity, modulus), Z.dtype)
    return np.asarray(n @ Z @ model.value.T / sparsity)


def read_out(model: ClusteringHead, xi):
    """softmax(E h(xi)) at sequence embeddings xi (n, d): (n, V_e)."""
    return jax.nn.softmax(jax.vmap(model.ffn)(xi) @ model.token.T)


def class_probability(model: ClusteringHead, xi, label: int) -> np.ndarray:
    """p(y = label | xi) of the read-out softmax(E h(xi)) at sequence embeddings xi (n, d)."""
    return np.asarray(read_out(model, jnp.asarray(xi))[:, label])
