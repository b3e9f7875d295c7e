"""Random Markov chains for the focus-dilution property tests (spec §2.1): a non-uniform
stationary law pi and a reversible transition matrix with that law."""

import numpy as np

from theory.focus_dilution.population import reversible_transition


def random_pi(seed: int, d: int = 4, floor: float = 0.02) -> np.ndarray:
    """A random non-uniform probability vector of d entries, each >= floor, sorted descending
    (token 0 the most frequent, as the spec orders them)."""
    raw = np.random.default_rng(seed).dirichlet(np.ones(d))
    pi = floor + (1 - d * floor) * raw
    return np.sort(pi / pi.sum())[::-1]


def random_reversible(pi: np.ndarray, seed: int) -> np.ndarray:
    """A random transition matrix reversible with respect to pi (from a symmetric proposal)."""
    rng = np.random.default_rng(seed)
    Q = rng.uniform(size=(pi.size, pi.size))
    Q = (Q + Q.T) / (2 * pi.size)
    return reversible_transition(pi, Q)
