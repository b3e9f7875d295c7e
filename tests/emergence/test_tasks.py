"""simulate.emergence.tasks: the linear map mod 2 and the cellular automaton (spec emergence.md
§2.1-2.2), their floors and true attention patterns, the attention-bias mass of the CA, the sparsity
grid of the emergence-sparsity figure."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.emergence import tasks
from simulate.emergence.tasks import (
    ca_bias_mass,
    ca_bias_mass_spec,
    ca_loss_floor,
    sample_ca,
    sparsity_grid,
)


def test_linear_map_rows_and_sequences():
    M = np.asarray(tasks.linear_map(16, 3, jax.random.PRNGKey(0)))
    assert M.shape == (16, 16) and set(np.unique(M)) <= {0, 1}
    assert (M.sum(1) == 3).all()
    seqs = np.asarray(tasks.sample_linear_map(jnp.asarray(M), jax.random.PRNGKey(1), 64, 3))
    assert seqs.shape == (64, 48)
    x0, x1, x2 = seqs[:, :16], seqs[:, 16:32], seqs[:, 32:]
    assert (x1 == (x0 @ M.T) % 2).all() and (x2 == (x1 @ M.T) % 2).all()
    assert 0.4 < x0.mean() < 0.6


def test_linear_map_floor_counts_random_tokens():
    # two states: the S - 1 predicted tokens of x_0 cost ln 2 each, x_1 is free
    assert tasks.linear_map_floor(16) == pytest.approx(15 * math.log(2) / 31)
    assert 0.32 < tasks.linear_map_floor(8) < tasks.linear_map_floor(32) < 0.35
    assert tasks.linear_map_floor(16, 3) == pytest.approx(15 * math.log(2) / 47)
    # the staircase: S steps from ln 2 end at the floor
    S = 16
    assert math.log(2) - S * tasks.linear_map_step_height(S) == pytest.approx(
        tasks.linear_map_floor(S)
    )


def test_linear_map_pattern_is_causal_and_matches_m():
    M = np.asarray(tasks.linear_map(8, 3, jax.random.PRNGKey(2)))
    B = tasks.linear_map_pattern(M, 2)
    assert B.shape == (15, 15)
    assert (B[:7] == 0).all()  # queries predicting x_0 have no true pattern
    assert (B[7:, :8] == M).all() and (B[:, 8:] == 0).all()
    assert (np.triu(B, 1) == 0).all()  # only keys at or before the query


def test_ca_pattern_points_each_query_at_three_cells_of_the_previous_state():
    # the sequences themselves: test_each_sequence_follows_its_own_periodic_table
    S = 8
    B = tasks.ca_pattern(S, 5)
    assert (B[S - 1 :].sum(1) == 3).all() and (np.triu(B, 1) == 0).all()


def test_ca_floor_below_ln_k_and_falls_with_more_states():
    short = tasks.ca_loss_floor(8, 4, 2, samples=300)
    long = tasks.ca_loss_floor(8, 4, 6, samples=300)
    assert 0 < long < short < math.log(4)


def test_floor_of_two_states_counts_distinct_neighbourhoods():
    # S = 3, K = 2, one transition: a constant x_0 has 1 distinct neighbourhood (2 of 8 states),
    # any other x_0 has 3 (its rotations differ), so the floor is (2*1 + 6*3)/8 / 3 * ln 2
    exact = (2 * 1 + 6 * 3) / 8 / 3 * math.log(2)
    assert ca_loss_floor(3, alphabet=2, states=2, samples=4000) == pytest.approx(exact, abs=0.02)


@pytest.mark.parametrize("K, n", [(2, 4), (4, 5)])  # 5 states: the task's default
def test_each_sequence_follows_its_own_periodic_table(K, n):
    S = 8
    seqs = np.asarray(sample_ca(jax.random.PRNGKey(K), 64, S, alphabet=K, states=n))
    assert seqs.shape == (64, n * S) and seqs.min() >= 0 and seqs.max() < K
    states = seqs.reshape(64, n, S)
    tables = []
    for x in states:
        table = {}
        for t in range(n - 1):
            for i in range(S):
                entry = (x[t, i - 1], x[t, i], x[t, (i + 1) % S])
                assert table.setdefault(entry, x[t + 1, i]) == x[t + 1, i]
        tables.append(table)
    # one table per sequence, not one shared table: some entry maps differently across sequences
    assert any(a[e] != b[e] for a in tables for b in tables for e in a.keys() & b.keys())


@settings(max_examples=30, deadline=None)
@given(S=st.integers(4, 256), c=st.floats(0.0, 6.0))
def test_causal_keys_dilute_the_spec_mass(S, c):
    # every query sees at least the S keys of the previous state, so counting all causal keys
    # can only lower the mass; with 2 states the last query sees 2S - 1 keys
    causal, spec = ca_bias_mass(S, c, 2), ca_bias_mass_spec(S, c)
    assert 0 < causal <= spec < 1
    assert causal >= ca_bias_mass_spec(2 * S - 1, c) - 1e-12


def test_sparsity_grid():
    assert sparsity_grid(8) == tuple(range(1, 9))
    assert sparsity_grid(32) == (1, 2, 4, 8, 16, 24, 30, 31)
