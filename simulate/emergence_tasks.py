"""Synthetic tasks of the emergence paper (spec emergence.md §2.1-2.2, §5.1).

Linear map mod 2 ("generalised sparse parity", §2.1): a fixed binary M (S x S) with exactly s ones
per row; x_0 ~ Unif{0,1}^S and x_{t+1} = M x_t mod 2; the states are flattened into one binary
token sequence for next-token prediction. Loss floor (§5.1, general number of states n):
L_min = (S - 1) ln 2 / (n S - 1), since only the S - 1 predicted tokens of x_0 are random.

Cellular automaton (§2.2): each sequence draws one lookup table on the 3-cell periodic
neighbourhood (x_{t+1}[i] = table[x_t[i-1], x_t[i], x_t[i+1]]). Alphabet: K = 4 equiprobable cell
states by default (4^3 = 64-entry tables; the plateau near ln 4 of the blog figures rules out a
binary alphabet, spec §2.2 [derived]); ``alphabet`` is an option. The loss covers every token
after x_0. Its floor is the Bayes loss of a predictor that knows the table entries revealed
earlier in the same sequence and guesses uniformly otherwise (``ca_loss_floor``, Monte Carlo).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from theory.validation import require


def check_linear_map(S: int, s: int, states: int) -> None:
    require(S >= 2, "S", S, "a state size >= 2")
    require(1 <= s <= S, "s", s, f"ones per row in 1..S = {S}")
    require(states >= 2, "states", states, "states per sequence >= 2")


def linear_map(S: int, s: int, key) -> jax.Array:
    """M in {0,1}^{S x S} with exactly s ones per row at uniformly random columns (int32)."""
    keys = jax.random.split(key, S)
    rows = jax.vmap(lambda k: jax.random.permutation(k, S)[:s])(keys)  # (S, s) distinct columns
    return jnp.zeros((S, S), jnp.int32).at[jnp.arange(S)[:, None], rows].set(1)


def sample_linear_map(M, key, batch: int, states: int = 2) -> jax.Array:
    """Token sequences (batch, states * S) of x_0, M x_0, M^2 x_0, ... (mod 2)."""
    S = M.shape[0]
    x = jax.random.bernoulli(key, 0.5, (batch, S)).astype(jnp.int32)
    out = [x]
    for _ in range(states - 1):
        x = (x @ M.T) % 2
        out.append(x)
    return jnp.concatenate(out, axis=1)


def linear_map_floor(S: int, states: int = 2) -> float:
    """L_min(S, n) = (S - 1) ln 2 / (n S - 1): mean loss over the n S - 1 predicted tokens."""
    return (S - 1) * math.log(2) / (states * S - 1)


def linear_map_step_height(S: int, states: int = 2) -> float:
    """Drop of the aggregate loss when one output cell is learned (in every later state)."""
    return (states - 1) * math.log(2) / (states * S - 1)


def linear_map_pattern(M, states: int = 2) -> np.ndarray:
    """B (T-1, T-1), T = n S: B[p, k] = 1 when query p (which predicts token p + 1 = cell i of
    state t + 1) should attend to key k = cell j of state t with M[i, j] = 1 (the true pattern)."""
    M = np.asarray(M)
    S = M.shape[0]
    T = states * S
    B = np.zeros((T - 1, T - 1))
    for t in range(states - 1):
        for i in range(S):
            B[(t + 1) * S + i - 1, t * S + np.nonzero(M[i])[0]] = 1.0
    return B


def check_ca(S: int, alphabet: int, states: int) -> None:
    require(S >= 3, "S", S, "a state size >= 3 (3-cell neighbourhood)")
    require(alphabet >= 2, "alphabet", alphabet, "cell states K >= 2")
    require(states >= 2, "states", states, "states per sequence >= 2")


def sample_ca(key, batch: int, S: int, alphabet: int = 4, states: int = 5) -> jax.Array:
    """Token sequences (batch, states * S): x_0 uniform, one random rule table per sequence."""
    K = alphabet
    k_table, k_x = jax.random.split(key)
    tables = jax.random.randint(k_table, (batch, K**3), 0, K)
    x = jax.random.randint(k_x, (batch, S), 0, K)
    out = [x]
    for _ in range(states - 1):
        idx = (jnp.roll(x, 1, axis=1) * K + x) * K + jnp.roll(x, -1, axis=1)
        x = jnp.take_along_axis(tables, idx, axis=1)
        out.append(x)
    return jnp.concatenate(out, axis=1)


def ca_pattern(S: int, states: int) -> np.ndarray:
    """B (T-1, T-1): query predicting cell i of state t + 1 -> cells i-1, i, i+1 of state t."""
    T = states * S
    B = np.zeros((T - 1, T - 1))
    for t in range(states - 1):
        for i in range(S):
            B[(t + 1) * S + i - 1, t * S + (np.arange(i - 1, i + 2) % S)] = 1.0
    return B


def ca_loss_floor(S: int, alphabet: int = 4, states: int = 5, samples: int = 2000,
                  seed: int = 0) -> float:
    """Monte Carlo Bayes loss on the tokens after x_0: ln K for each cell whose neighbourhood's
    table entry was not revealed by an earlier cell of the sequence, 0 otherwise."""
    K = alphabet
    rng = np.random.default_rng(seed)
    unknown = 0
    for _ in range(samples):
        table = rng.integers(0, K, K**3)
        x = rng.integers(0, K, S)
        seen = np.zeros(K**3, bool)
        for _ in range(states - 1):
            idx = (np.roll(x, 1) * K + x) * K + np.roll(x, -1)
            for i in idx:
                unknown += not seen[i]
                seen[i] = True
            x = table[idx]
    return unknown * math.log(K) / (samples * (states - 1) * S)
