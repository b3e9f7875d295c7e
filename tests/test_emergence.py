"""Emergence paper (spec emergence.md): tasks and their floors, model causality, the attention-bias
intervention, the emergence/plateau rules on constructed curves, bad input; the quick figure
(slow)."""

import importlib
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from figures.cli import main
from figures.emergence.linear_map import responsible_heads
from figures.emergence.mixer import steps_to_floor
from figures.emergence.sparsity import default_grid
from figures.emergence.times import survival
from simulate.emergence import tasks
from simulate.emergence.models import CausalMixer, CausalTransformer
from simulate.emergence.training import EmergenceConfig, emergence_times, plateau_length


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


def test_ca_sequences_follow_one_table_per_sequence():
    K, S = 4, 8
    seqs = np.asarray(tasks.sample_ca(jax.random.PRNGKey(0), 32, S, K, 5))
    assert seqs.shape == (32, 40) and seqs.min() >= 0 and seqs.max() < K
    for seq in seqs:
        states = seq.reshape(5, S)
        table = {}
        for x, y in itertools.pairwise(states):
            for i in range(S):
                nb = (x[i - 1], x[i], x[(i + 1) % S])
                assert table.setdefault(nb, y[i]) == y[i]
    B = tasks.ca_pattern(S, 5)
    assert (B[S - 1 :].sum(1) == 3).all() and (np.triu(B, 1) == 0).all()


def test_ca_floor_below_ln_k_and_falls_with_more_states():
    short = tasks.ca_loss_floor(8, 4, 2, samples=300)
    long = tasks.ca_loss_floor(8, 4, 6, samples=300)
    assert 0 < long < short < math.log(4)


def _models():
    key = jax.random.PRNGKey(0)
    return [
        CausalTransformer(2, 15, layers=1, heads=2, head_dim=4, key=key),
        CausalTransformer(2, 15, layers=2, heads=2, head_dim=4, key=key),
        CausalMixer(2, 15, layers=2, width=8, key=key),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_models_are_causal(index):
    model = _models()[index]
    x = jnp.asarray(np.random.default_rng(0).integers(0, 2, 15))
    y = x.at[9].set(1 - x[9])
    a, b = model(x), model(y)
    assert a.shape == (15, 2)
    np.testing.assert_allclose(a[:9], b[:9], atol=1e-6)
    assert not np.allclose(a[9:], b[9:])


def test_attention_bias_moves_mass_to_the_pattern():
    model = _models()[1]
    M = np.asarray(tasks.linear_map(8, 3, jax.random.PRNGKey(3)))
    B = jnp.asarray(tasks.linear_map_pattern(M, 2))
    x = jnp.asarray(np.random.default_rng(1).integers(0, 2, 15))
    _, plain = model.logits_and_attention(x)
    _, biased = model.logits_and_attention(x, 5.0 * B)
    mass = lambda a: float((a[0, :, 7:] * B[7:]).sum(-1).mean())
    assert mass(biased) > mass(plain) + 0.3
    np.testing.assert_allclose(biased[0, :, :7], plain[0, :, :7], atol=1e-6)  # no pattern there


def test_emergence_times_rule_on_constructed_curves():
    steps = np.arange(0, 1000, 100)
    drop = np.full((10, 3), math.log(2))
    drop[4:, 0] = 0.05  # below 0.1 ln 2 from step 400
    drop[7:, 2] = 0.08  # 0.08 > 0.0693: not yet emerged
    drop[9:, 2] = 0.01
    np.testing.assert_array_equal(emergence_times(steps, drop), [400.0, np.nan, 900.0])


def test_plateau_length_rule_on_constructed_curve():
    steps = np.arange(0, 3000, 50)
    loss = np.where(steps < 1200, 0.69, 0.5)
    loss[:2] = 1.5  # fast initial fit of the marginals, before the plateau window
    level, length = plateau_length(steps, loss, 200)
    assert level == pytest.approx(0.69) and length == 1200
    assert math.isnan(plateau_length(steps, np.full(steps.shape, 0.69), 200)[1])


def test_responsible_head_is_the_one_whose_pattern_mass_rises():
    steps = np.arange(0, 500, 50)
    cell_loss = np.full((10, 2), math.log(2))
    cell_loss[6:, 1] = 0.0
    mass = np.full((10, 3, 2), 0.3)
    mass[6:, 2, 1] = 0.9  # head 3 finds cell 1's support during the drop (rows 5 -> 6)
    mass[6:, 0, 0] = 0.9  # a rise on another cell does not count
    entropy = np.full((10, 3), 2.0)
    entropy[6:, 2] = 1.0
    rows = responsible_heads(steps, cell_loss, mass, entropy, np.array([np.nan, 300.0]))
    assert rows == [[1, 300.0, 3, -1.0, 0.0]]


@pytest.mark.parametrize(
    "argv",
    [
        ["--s", "0"],
        ["--S", "1"],
        ["--lr", "-1"],
        ["--model", "mixer", "--attention-bias", "3"],
        ["--layers", "3"],
    ],
)
def test_bad_input_exits_2(tmp_path, argv):
    assert main(["run", "emergence", "--out", str(tmp_path / "r"), *argv]) == 2


def test_figure_rejects_ca_task(tmp_path):
    assert main(["figure", "emergence-linear-map", "--task", "ca", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_linear_map_figure_quick_shows_staircase(tmp_path):
    assert (
        main(["figure", "emergence-linear-map", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    )
    out = tmp_path / "emergence-linear-map"
    assert (out / "emergence-linear-map.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    times = np.asarray(summary["emergence_steps_per_seed"], float)
    # staggered drops: several cells emerge, at different steps
    assert max(summary["cells_emerged_per_seed"]) >= 2
    assert len(np.unique(times[np.isfinite(times)])) >= 2
    # the head that picks up the pattern at a drop sharpens more than the others
    assert float(summary["mean_entropy_gap"]) < 0
    assert all(f < math.log(2) for f in summary["final_loss_per_seed"])


def test_steps_to_floor_rule():
    steps = np.arange(0, 500, 100)
    floor = 0.3
    assert steps_to_floor(steps, [0.69, 0.5, 0.316, 0.3, 0.3], floor) == 200
    assert math.isnan(steps_to_floor(steps, [0.69, 0.5, 0.4, 0.35, 0.33], floor))


@pytest.mark.slow
def test_mixer_figure_quick_mixer_beats_transformer(tmp_path):
    assert main(["figure", "emergence-mixer", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / "emergence-mixer"
    assert (out / "emergence-mixer.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    mixer, transformer = (np.asarray(x, float) for x in summary["final_loss"])
    assert (mixer < transformer).all()  # at every sparsity, mean over seeds
    reach = np.asarray(summary["steps_to_floor_per_seed"][0], float)
    assert np.isfinite(reach).all()  # every Mixer seed reaches the floor within the budget


def test_sparsity_default_grid():
    assert default_grid(8) == tuple(range(1, 9))
    assert default_grid(32) == (1, 2, 4, 8, 16, 24, 30, 31)


@pytest.mark.slow
def test_sparsity_figure_quick_is_hardest_at_half_density(tmp_path):
    assert main(["figure", "emergence-sparsity", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / "emergence-sparsity"
    assert (out / "emergence-sparsity.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    density = np.asarray(summary["density"], float)
    loss = np.asarray(summary["mean_final_loss"], float)
    half = loss[density == 0.5][0]
    assert half == loss.max()  # inverted U: the densest search space is the hardest
    assert summary["solved_fraction"][0] == 1  # s = 1 is solved within the budget
    assert half > loss[0] + 0.2 and half > loss[-1]


def test_survival_counts_never_as_not_emerged():
    s = survival([0, 100, 200], np.array([[50.0, np.nan], [150.0, 100.0]]))
    np.testing.assert_allclose(s, [1.0, 0.5, 0.25])


@pytest.mark.slow
def test_times_figure_quick_more_heads_emerge_more(tmp_path):
    assert main(["figure", "emergence-times", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / "emergence-times"
    assert (out / "emergence-times.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    emerged = np.asarray(summary["fraction_emerged"], float)
    lottery = np.asarray(summary["lottery_fraction_emerged"], float)
    assert lottery[0] == pytest.approx(emerged[0])  # the reference H0 is its own prediction
    assert emerged[-1] > emerged[0]  # more heads: more cells emerge within the budget


@pytest.mark.parametrize(
    "module",
    [
        "emergence_times",
        "emergence_heads_vs_dim",
        "emergence_mixer",
        "emergence_sparsity",
        "emergence_linear_map",
        "emergence_ca_plateau",
    ],
)
def test_figure_configs_hand_their_experiment_fields_to_the_runs(module):
    config = next(
        c
        for c in vars(importlib.import_module(f"figures.{module}")).values()
        if isinstance(c, type) and issubclass(c, EmergenceConfig) and c is not EmergenceConfig
    )
    exp = config(lr=2e-3, warmup=7, weight_decay=0.03).experiment()
    assert type(exp) is EmergenceConfig
    assert (exp.lr, exp.warmup, exp.weight_decay) == (2e-3, 7, 0.03)
