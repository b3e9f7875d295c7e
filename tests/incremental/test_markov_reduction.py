"""The reduced head system of a Markov-chain run: matching its heads to the trained heads."""

import numpy as np
import pytest

from simulate.incremental.markov_reduction import match_heads, ode_split_times
from theory.incremental.heads import HeadSetting


def test_ode_heads_are_matched_to_the_trained_heads():
    trained = np.array([[0.1, 0.9, 0.0], [0.9, 0.1, 0.0], [0.2, 0.0, 0.8]])
    ode = trained[[2, 0, 1]]
    assert [int(i) for i in match_heads(trained, ode)] == [1, 2, 0]


def test_ode_split_and_apart_times_are_interpolated_crossings():
    """Two blocks of two lags, three heads: head 1 leaves for block 2 at t = 10, head 2 for
    block 1 at t = 100; the split and all-apart times are where the gaps cross 0.1, interpolated
    in ln t."""
    setting = HeadSetting(heads=3, blocks=(2, 2), window=4)
    np.testing.assert_array_equal(setting.block_indicator(), [[1, 0], [1, 0], [0, 1], [0, 1]])
    ts = np.array([1.0, 10.0, 100.0])
    s = np.full((1, 3, 3, 4), 0.25)  # (batch, time, head, lag): every block mass 1/2
    s[0, 1:, 0] = [0.15, 0.15, 0.35, 0.35]  # head 1: block-2 mass 0.7 from t = 10
    s[0, 2, 1] = [0.4, 0.4, 0.1, 0.1]  # head 2: block-1 mass 0.8 at t = 100
    split, apart = ode_split_times(setting, ts, s)[0]
    # widest gap 0, 0.2, 0.2: crosses 0.1 halfway between ln 1 and ln 10
    assert split == pytest.approx(np.sqrt(10.0))
    # narrowest gap 0, 0 (heads 2, 3 equal), 0.2 (heads 1, 3): halfway between ln 10 and ln 100
    assert apart == pytest.approx(np.sqrt(1000.0))
