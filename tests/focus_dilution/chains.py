"""Random stationary laws for the focus-dilution property tests (spec §2.1); a random
reversible chain of one is ``theory.focus_dilution.population.random_metropolis_chain``."""

import numpy as np


def random_pi(seed: int, d: int = 4, floor: float = 0.02) -> np.ndarray:
    """A random non-uniform probability vector of d entries, each >= floor, sorted descending
    (token 0 the most frequent, as the spec orders them)."""
    raw = np.random.default_rng(seed).dirichlet(np.ones(d))
    pi = floor + (1 - d * floor) * raw
    return np.sort(pi / pi.sum())[::-1]
