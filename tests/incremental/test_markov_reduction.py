"""The reduced head system of a Markov-chain run: matching its heads to the trained heads."""

import numpy as np

from simulate.incremental.markov_reduction import match_heads


def test_ode_heads_are_matched_to_the_trained_heads():
    trained = np.array([[0.1, 0.9, 0.0], [0.9, 0.1, 0.0], [0.2, 0.0, 0.8]])
    ode = trained[[2, 0, 1]]
    assert [int(i) for i in match_heads(trained, ode)] == [1, 2, 0]
