"""Cellular automaton of the emergence paper: encoding, Bayes floor, attention-bias mass at
initialisation, plateau helpers, and the emergence-ca-plateau figure (spec emergence.md §2.2,
§5.3, §5.4, §7)."""

import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from figures.cli import main
from figures.emergence.ca_plateau import FIGURE_ID, bias_halves, drop_step, median_length
from simulate.emergence.models import CausalTransformer
from simulate.emergence.tasks import (
    ca_bias_mass,
    ca_bias_mass_spec,
    ca_loss_floor,
    ca_pattern,
    sample_ca,
)


def test_floor_of_two_states_counts_distinct_neighbourhoods():
    # S = 3, K = 2, one transition: a constant x_0 has 1 distinct neighbourhood (2 of 8 states),
    # any other x_0 has 3 (its rotations differ), so the floor is (2*1 + 6*3)/8 / 3 * ln 2
    exact = (2 * 1 + 6 * 3) / 8 / 3 * math.log(2)
    assert ca_loss_floor(3, alphabet=2, states=2, samples=4000) == pytest.approx(exact, abs=0.02)


@pytest.mark.parametrize("K", [2, 4])
def test_each_sequence_follows_its_own_periodic_table(K):
    S, n = 8, 4
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


def test_bias_puts_the_predicted_mass_on_the_neighbourhood():
    S, n, K, c = 6, 3, 2, 3.0
    model = eqx.filter_jit(
        lambda k: CausalTransformer(K, n * S - 1, layers=1, heads=2, head_dim=4, key=k)
    )(jax.random.PRNGKey(0))
    # zero query/key/value maps: every logit equal, so only the bias shapes the attention
    flat = eqx.tree_at(lambda m: m.qkv, model, [jnp.zeros_like(w) for w in model.qkv])
    B = ca_pattern(S, n)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, K, n * S - 1))
    attention = eqx.filter_jit(flat.logits_and_attention)
    attn = np.asarray(attention(tokens, jnp.asarray(c * B))[1][0])
    queries = slice(S - 1, n * S - 1)  # the queries predicting states t >= 1
    mass = (attn[:, queries] * B[queries]).sum(-1)
    assert mass.mean() == pytest.approx(ca_bias_mass(S, c, n), rel=1e-5)
    assert ca_bias_mass(S, 0.0, n) < mass.mean()


@settings(max_examples=30, deadline=None)
@given(S=st.integers(4, 256), c=st.floats(0.0, 6.0))
def test_causal_keys_dilute_the_spec_mass(S, c):
    # every query sees at least the S keys of the previous state, so counting all causal keys
    # can only lower the mass; with 2 states the last query sees 2S - 1 keys
    causal, spec = ca_bias_mass(S, c, 2), ca_bias_mass_spec(S, c)
    assert 0 < causal <= spec < 1
    assert causal >= ca_bias_mass_spec(2 * S - 1, c) - 1e-12


def test_plateau_helpers_count_never_as_infinite():
    assert median_length([100.0, np.nan, np.nan]) == math.inf
    assert median_length([100.0, 300.0, 200.0]) == 200.0
    assert bias_halves([np.nan, np.nan], [150.0, 200.0])
    assert not bias_halves([400.0, 500.0], [300.0, 350.0])


def test_drop_step_is_halfway_from_plateau_to_floor():
    steps = np.arange(0, 2000, 50)
    # a plateau at 0.6 with a 5% dip at 600 (noise), then a drop to the floor 0.1 from 1000
    loss = np.where(steps < 1000, 0.6, 0.1 + 0.5 * np.exp(-(steps - 1000) / 100.0))
    loss[steps == 600] = 0.56
    assert drop_step(steps, loss, 0.6, 0.1, 200) == 1100.0  # first below 0.35
    assert math.isnan(drop_step(steps, np.full(steps.shape, 0.6), 0.6, 0.1, 200))


@pytest.mark.parametrize(
    "argv",
    [
        ["--sizes", "3"],
        ["--attention-bias", "0"],
        ["--task", "linear_map"],
        ["--tokens", "10"],
        ["--batch", "5"],
    ],
)
def test_bad_input_exits_2(tmp_path, argv):
    assert main(["figure", FIGURE_ID, "--out", str(tmp_path), *argv]) == 2


@pytest.mark.slow
def test_ca_plateau_figure_quick_grows_with_S_and_bias_at_least_halves_the_drop_step(tmp_path):
    assert main(["figure", FIGURE_ID, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / FIGURE_ID
    assert (out / f"{FIGURE_ID}.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plateau_rule"] and summary["drop_rule"]
    assert summary["plateau_grows_with_S"] and summary["drop_step_grows_with_S"]
    plateau = np.asarray(summary["median_plateau_length"], float)  # (S, c), inf: never
    assert plateau[-1, 1] < plateau[-1, 0]  # the bias shortens the plateau at the largest S
    assert summary["bias_halves_drop_step"][-1]
    mass = np.asarray(summary["initial_mass_measured"], float)
    assert (mass[:, 1] > mass[:, 0]).all()  # the bias concentrates the initial attention
