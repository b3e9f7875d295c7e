"""The regression variant of the incremental-learning task (spec incremental.md §2.4; the setting of
the reduction in ``theory.incremental.reduction``).

A sequence holds L input vectors x_0..x_{L-1} in R^d; the one query at position q = L - 1 predicts
``y = sum_k A*_k sum_{i in I(k)} alpha_i x_{q+1-i}`` (lag i is position q + 1 - i), with the
teacher matrices A*_k of ``simulate.incremental.markov_task.teacher`` (no temperature: the target is
the
teacher's logit itself). Inputs are standard normal; ``whiten`` centres a batch and rescales it so
that its empirical mean is zero and its second moment over all (position, coordinate) pairs is
exactly the identity. For a model whose
attention is positional the loss is a quadratic form in x, so on a whitened batch it equals the
population loss exactly: the batch then carries no sampling error in the directions the reduction
keeps (a variance reduction; the content-dependent directions still see the sample).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def lag_matrix(lag_weights: np.ndarray, L: int) -> np.ndarray:
    """C (h x L): C[k, s] = alpha of the lag at position s for the query at L - 1 (lag i is
    position L - i)."""
    h, w = lag_weights.shape
    C = np.zeros((h, L))
    C[:, L - w :] = lag_weights[:, ::-1]
    return C


def targets(A, C, x):
    """y (n, d) for inputs x (n, L, d): sum_k A*_k sum_s C[k, s] x_s."""
    return jnp.einsum("kab,ks,nsb->na", A, jnp.asarray(C), x)


def whiten(x):
    """x (n, L, d) centred and rescaled so that (1/n) sum_n vec(x_n) vec(x_n)^T = I (needs
    n > L d)."""
    n = x.shape[0]
    flat = x.reshape(n, -1)
    flat = flat - flat.mean(0)
    evals, evecs = jnp.linalg.eigh(flat.T @ flat / n)
    return (flat @ (evecs * evals**-0.5) @ evecs.T).reshape(x.shape)


def sample_inputs(key, n: int, L: int, d: int, whitened: bool, dtype=jnp.float64):
    x = jax.random.normal(key, (n, L, d), dtype)
    return whiten(x) if whitened else x


def moment_error(x) -> jax.Array:
    """max |(1/n) sum_n vec(x_n) vec(x_n)^T - I|: the isotropy assumption's residual."""
    n = x.shape[0]
    flat = x.reshape(n, -1)
    return jnp.max(jnp.abs(flat.T @ flat / n - jnp.eye(flat.shape[1], dtype=x.dtype)))
