"""Sparse modular addition (SMA), the task of the clustering-head paper (spec clustering_head.md
§2).

A sequence x = (x_1, ..., x_L) of i.i.d. uniform tokens in Z_p has label y(x) = (x_1 + ... + x_k)
mod p: only the first k positions matter, positions k+1..L are distractors. Finite train and test
sets of n i.i.d. sequences each (drawn with replacement from the p^L possibilities, so they may
overlap for small p^L), fresh sequences from the same law, the whole input space (population) for
exact population losses, and a probe set covering every first-k histogram.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from theory.validation import require

POPULATION_LIMIT = 2**20
"""the largest input space p^L that is enumerated (population loss, ``all_sequences``)."""


@dataclass(frozen=True)
class SMASetting:
    """Sparse modular addition: lengths, sparsity, modulus and the finite data sets."""

    length: int = 12
    """L, tokens per sequence."""
    sparsity: int = 5
    """k, the label is the sum of the first k tokens mod p (1 <= k <= L)."""
    modulus: int = 2
    """p, tokens and labels live in Z_p (p >= 2)."""
    train_size: int = 2048
    """n, training sequences (i.i.d., with replacement)."""
    test_size: int = 2048
    """test sequences (i.i.d., same law, drawn after the training set)."""
    data_seed: int = 0
    """seed of the train set, test set and probe suffixes."""

    def __post_init__(self):
        require(self.length >= 1, "length", self.length, "an integer L >= 1")
        require(
            1 <= self.sparsity <= self.length,
            "sparsity",
            self.sparsity,
            f"an integer 1 <= k <= L = {self.length}",
        )
        require(self.modulus >= 2, "modulus", self.modulus, "an integer p >= 2")
        require(self.train_size >= 1, "train_size", self.train_size, "an integer >= 1")
        require(self.test_size >= 1, "test_size", self.test_size, "an integer >= 1")
        require(self.data_seed >= 0, "data_seed", self.data_seed, "an integer >= 0")

    @property
    def population_size(self) -> int:
        return self.modulus**self.length

    @property
    def histogram_count(self) -> int:
        """binom(k + p - 1, p - 1): the number of first-k histograms (clusters of a clustering
        head)."""
        return math.comb(self.sparsity + self.modulus - 1, self.modulus - 1)


def labels(x, sparsity: int, modulus: int):
    """y(x) = (x_1 + ... + x_k) mod p, for a batch ``x`` of shape (..., L)."""
    return jnp.sum(x[..., :sparsity], axis=-1) % modulus


# jitted with n, L and p static: drawn eagerly, randint takes its bounds as arguments, and with the
# unrolled Threefry lowering that program compiled in about 1.9 s per shape, against 0.24 s with
# the bounds constant (the same bits: the hash and the integer arithmetic are exact)
@partial(jax.jit, static_argnums=(1, 2, 3))
def sample_sequences(key, n: int, length: int, modulus: int) -> jax.Array:
    """n i.i.d. uniform sequences in Z_p^L (int32, shape (n, L))."""
    return jax.random.randint(key, (n, length), 0, modulus, dtype=jnp.int32)


def all_sequences(length: int, modulus: int) -> np.ndarray:
    """Every sequence of Z_p^L, in lexicographic order (shape (p^L, L))."""
    require(
        modulus**length <= POPULATION_LIMIT,
        "length",
        length,
        f"p^L <= {POPULATION_LIMIT} to enumerate the input space (p = {modulus})",
    )
    digits = np.arange(modulus**length)[:, None] // modulus ** np.arange(length - 1, -1, -1)
    return (digits % modulus).astype(np.int32)


@dataclass(frozen=True)
class SMAData:
    train: jax.Array
    train_labels: jax.Array
    test: jax.Array
    test_labels: jax.Array


def draw_data(setting: SMASetting) -> SMAData:
    """Train then test set from key(data_seed) folded with 1 and 2."""
    key = jax.random.PRNGKey(setting.data_seed)
    L, k, p = setting.length, setting.sparsity, setting.modulus
    train = sample_sequences(jax.random.fold_in(key, 1), setting.train_size, L, p)
    test = sample_sequences(jax.random.fold_in(key, 2), setting.test_size, L, p)
    return SMAData(train, labels(train, k, p), test, labels(test, k, p))


def histograms(sparsity: int, modulus: int) -> list[tuple[int, ...]]:
    """Every first-k histogram (n_0, ..., n_{p-1}) with sum k, in lexicographic order."""
    return [h for h in itertools.product(range(sparsity + 1), repeat=modulus) if sum(h) == sparsity]


def probe_set(setting: SMASetting, suffixes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A fixed probe set: for every first-k histogram the sorted prefix with that histogram,
    followed by ``suffixes`` random distractor suffixes (the same suffixes for every prefix).
    Returns the sequences (histograms x suffixes, L) and the histogram index of each."""
    k, L, p = setting.sparsity, setting.length, setting.modulus
    rng = np.random.default_rng(setting.data_seed + 10_000)
    tails = rng.integers(0, p, size=(suffixes, L - k))
    seqs, which = [], []
    for i, h in enumerate(histograms(k, p)):
        prefix = np.repeat(np.arange(p), h)
        for tail in tails:
            seqs.append(np.concatenate([prefix, tail]))
            which.append(i)
    return np.asarray(seqs, np.int32), np.asarray(which, np.int32)


def histogram_index(x: np.ndarray, sparsity: int, modulus: int) -> np.ndarray:
    """Index in ``histograms(k, p)`` of the first-k histogram n(x) = (n_0, ..., n_{p-1}) of each
    row."""
    counts = np.stack([(x[:, :sparsity] == a).sum(1) for a in range(modulus)], 1)
    table = {h: i for i, h in enumerate(histograms(sparsity, modulus))}
    return np.array([table[tuple(int(c) for c in row)] for row in counts])
