"""The markov experiment through the run store (tiny settings): observables, finite data,
optimisers, precision, exact head symmetry, learned c-gram baselines, bad input."""

import json
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from figures.cli import main
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    baseline_contexts,
    build_model,
    load_baseline,
    log_probs,
    markov_data,
    optimizer,
    problem,
    run,
    stored_config,
    train_baselines,
)
from simulate.runner import RunOutput
from simulate.store import RunStore, load, read_summary
from simulate.train import seed_streams, step_data
from tests.checkpoints import uninterrupted_and_resumed
from tests.xla_flags import optimised_env
from theory.validation import ConfigError

TINY = {
    "vocab": 6,
    "blocks": (1, 1),
    "generated": 4,
    "heads": 2,
    "batch": 32,
    "steps": 40,
    "chunk": 20,
    "log_every": 10,
    "validation": 64,
    "seeds": 2,
    "query_scale": 1e-3,
}


def _output(tmp_path) -> RunOutput:
    return RunOutput(out=tmp_path / "r", quiet=True)


def _run_optimised(cfg: MarkovTrainConfig, out: Path) -> Path:
    """``stagewise run markov`` of ``cfg`` in a process that compiles with LLVM's optimisation on,
    as users' runs do (the suite's other XLA flag stays): the checks of a uniform start hold the
    float32 mean of the validation loss to 1e-6 (ln d), which the suite's unoptimised code misses
    by summing in sequence (``tests/xla_flags.py``)."""
    default = MarkovTrainConfig()
    args = []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if value != getattr(default, f.name):
            values = value if isinstance(value, tuple) else (value,)
            args += [f"--{f.name.replace('_', '-')}", *map(str, values)]
    command = [sys.executable, "-m", "figures.cli", "run", "markov", *args, "--quiet"]
    subprocess.run([*command, "--out", str(out)], env=optimised_env(), check=True)
    assert stored_config(out) == cfg
    return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg = MarkovTrainConfig(**TINY)
    return cfg, run(cfg, _output(tmp_path_factory.mktemp("markov")))


def test_run_logs_named_observables_and_a_summary(tiny_run):
    cfg, path = tiny_run
    ds, config = load(path)
    dims = {
        "val_loss": (),
        "train_loss": (),
        "kl_yardstick": ("yardstick",),
        "kl_yardstick_train": ("yardstick",),
        "block_mass": ("layer", "head", "block"),
        "block_mass_mean": ("layer", "head", "block"),
        "attention_map": ("layer", "head", "query", "key"),
        "value_alignment": ("head", "block"),
        "head_asymmetry": (),
    }
    assert {name: ds[name].dims[2:] for name in ds.data_vars} == dims
    assert ds.sizes["step"] == cfg.steps // cfg.log_every + 1
    assert list(ds["query"].values) == list(range(cfg.window - 1, cfg.length - 1))
    assert np.all(ds["kl_yardstick"].values >= -1e-6)
    assert np.all(ds["block_mass"].sum("block").values <= 1 + 1e-6)
    np.testing.assert_allclose(ds["attention_map"].sum("key").values, 1.0, atol=1e-5)
    # the last generated query's row of the map, summed over each block's lags
    last = ds["attention_map"].isel(query=-1).values
    np.testing.assert_allclose(
        ds["block_mass"].values[..., 0], last[..., cfg.length - 2], atol=1e-6
    )
    assert float(ds["val_loss"].isel(step=-1).mean()) < np.log(cfg.vocab)
    assert np.all(ds["head_asymmetry"].values > 0)
    summary = read_summary(path)
    assert summary["status"] == "complete"
    assert summary["yardstick_losses"]["uniform"] == pytest.approx(np.log(cfg.vocab))
    assert summary["bayes_loss"] == summary["yardstick_losses"]["A*_1:2"]
    assert summary["learning_rate"] == 0.08 and summary["dtype"] == "float32"
    leaves, _, _ = RunStore(path).load_checkpoint()  # q = 1e-3: float32 throughout training
    assert leaves[0].dtype == np.float32 and ds["val_loss"].dtype == np.float32
    best = np.argmin(ds["val_loss"].values, axis=1)
    assert summary["best_val_step_per_seed"] == [float(ds["step"].values[b]) for b in best]
    assert summary["closest_yardstick_at_best_per_seed"] == [
        int(np.argmin(ds["kl_yardstick"].values[i, b])) + 1 for i, b in enumerate(best)
    ]
    assert summary["max_head_asymmetry_per_seed"] == pytest.approx(
        ds["head_asymmetry"].max("step").values.tolist()
    )
    assert config["seeds"]["teacher_seed"] == 0


def test_seeds_share_the_teacher_but_not_the_data(tiny_run):
    ds, _ = load(tiny_run[1])
    a, b = ds["val_loss"].isel(seed=0).values, ds["val_loss"].isel(seed=1).values
    assert a[0] == b[0] and not np.array_equal(a, b)


def test_ladder_and_split_rules_on_constructed_curves():
    from simulate.incremental.markov_training import ladder_steps, split_step

    steps = np.arange(0, 70, 10)
    # closest yardstick along the run: 3, 1, 1, 2, 1, 2, 3 (a brief return to class 1 at step 40)
    closest = np.array([3, 1, 1, 2, 1, 2, 3])
    kl = np.ones((7, 3))
    kl[np.arange(7), closest - 1] = 0.0
    assert ladder_steps(steps, kl) == [50.0, 60.0]
    mass = np.full((7, 2, 3), 1 / 3)
    mass[4:, 1] = [0.9, 0.05, 0.05]
    assert split_step(steps, mass) == 40.0
    assert np.isnan(split_step(steps, np.full((7, 2, 3), 1 / 3)))
    layered = np.stack([mass, np.full((7, 2, 3), 1 / 3)], axis=1)  # (step, layer, head, block)
    assert split_step(steps, layered) == 40.0
    assert np.isnan(split_step(steps, layered[:, ::-1]))  # the first layer decides


def test_heads_apart_when_every_pair_is():
    """Three heads: one leaves at step 20 (split), the other two part at step 40 (all apart)."""
    from simulate.incremental.markov_training import apart_step, split_step

    steps = np.arange(0, 60, 10)
    mass = np.full((6, 3, 3), 1 / 3)
    mass[2:, 0] = [0.8, 0.1, 0.1]
    mass[4:, 2] = [0.2, 0.6, 0.2]
    assert (split_step(steps, mass), apart_step(steps, mass)) == (20.0, 40.0)
    assert np.isnan(apart_step(steps[:4], mass[:4]))


@settings(max_examples=25, deadline=None)
@given(arrays(np.float64, (5, 3, 4), elements=st.floats(0, 1)), st.permutations(range(3)))
def test_head_gaps_order_and_symmetry(mass, order):
    """The narrowest gap between two heads never exceeds the widest, neither depends on the
    heads' order, and so the heads are never all apart before they split."""
    from simulate.incremental.markov_training import apart_step, head_gaps, split_step

    widest, narrowest = head_gaps(mass)
    assert np.all(narrowest <= widest)
    for a, b in zip(head_gaps(mass[:, list(order)]), (widest, narrowest), strict=True):
        np.testing.assert_array_equal(a, b)
    steps = np.arange(5)
    apart = apart_step(steps, mass)
    assert np.isnan(apart) or split_step(steps, mass) <= apart


def test_finite_training_set_is_overfitted(tmp_path):
    cfg = MarkovTrainConfig(
        **{**TINY, "seeds": 1, "steps": 80, "chunk": 80, "log_every": 20},
        train_size=8,
        lr=0.3,
    )
    data = markov_data(cfg)
    np.testing.assert_array_equal(data.probe, data.train)  # min(n, validation) = n sequences
    assert cfg.minibatch == 8
    ds, _ = load(_run_optimised(cfg, tmp_path / "r"))
    train, val = ds["train_loss"].values[0], ds["val_loss"].values[0]
    # q = 1e-3, W_V = 0: the first row predicts uniformly, so both losses are ln d
    assert val[0] == pytest.approx(np.log(cfg.vocab), abs=1e-6)
    assert train[0] == pytest.approx(val[0], abs=1e-6)
    assert train[-1] < 0.5 * val[-1]
    online = markov_data(replace(cfg, train_size=None))
    assert online.train is None and not np.array_equal(online.probe, online.validation)


SHUFFLED = {**TINY, "train_size": 10, "batch": 4}
"""A training set of 10 sequences in minibatches of 4: epochs of 3 steps, the last one short."""


@pytest.mark.parametrize("batch", [4, 5])
@settings(max_examples=10, deadline=None)
@given(key=st.integers(0, 2**31 - 1))
def test_each_epoch_is_one_shuffle_of_the_training_set(batch, key):
    """minibatches = epoch: the ceil(n / batch) steps of an epoch see every training sequence
    once (padded rows weighted 0), all from the one key the epoch keeps; the next epoch gets a
    new key and a new order."""
    cfg = MarkovTrainConfig(**{**SHUFFLED, "batch": batch})
    data = markov_data(cfg)
    prob = problem(cfg, data)
    steps = -(-10 // batch)
    assert cfg.shuffled and cfg.steps_per_epoch == steps
    train = {tuple(row): i for i, row in enumerate(np.asarray(data.train).tolist())}
    assert len(train) == 10  # distinct sequences, so each is known by its tokens
    epoch_key, orders = jax.random.PRNGKey(key), []
    for _ in range(2):
        seen, key_ = [], epoch_key
        for k in range(steps):
            assert k == 0 or np.array_equal(key_, epoch_key)  # kept for the epoch's steps
            key_, (seqs, weight, _) = step_data(prob, key_, k)
            assert seqs.shape == (batch, cfg.length) and set(np.asarray(weight)) <= {0.0, 1.0}
            seen += [train[tuple(r)] for r, w in zip(np.asarray(seqs).tolist(), weight) if w > 0]
        assert sorted(seen) == list(range(10))
        assert not np.array_equal(key_, epoch_key)
        orders.append(seen)
        epoch_key = key_
    assert orders[0] != orders[1]


def test_the_step_rule_full_batch_and_online_draw_no_epoch():
    assert problem(MarkovTrainConfig(**SHUFFLED, minibatches="step")).draw_step is None
    assert problem(MarkovTrainConfig(**{**SHUFFLED, "batch": 10})).draw_step is None
    assert problem(MarkovTrainConfig(**TINY)).draw_step is None


def test_a_short_last_minibatch_weighs_only_its_real_sequences():
    """The padded rows of an epoch's short last minibatch carry weight 0: its loss is the mean
    over the real sequences alone."""
    cfg = MarkovTrainConfig(**SHUFFLED)
    data = markov_data(cfg)
    prob = problem(cfg, data)
    model = build_model(cfg, seed_streams([0])["init"][0])
    key = jax.random.PRNGKey(3)
    for k in range(2):
        key, _ = step_data(prob, key, k)
    _, (seqs, weight, dropout) = step_data(prob, key, 2)
    real = np.asarray(weight) > 0
    assert real.sum() == 2
    loss, _ = prob.loss_and_direction(model, (seqs, weight, dropout))
    alone, _ = prob.loss_and_direction(model, (seqs[real], weight[real], dropout))
    assert float(loss) == pytest.approx(float(alone), rel=1e-6)


def test_a_resumed_shuffled_run_is_the_uninterrupted_run(tmp_path, monkeypatch):
    """Epochs of 3 steps across chunks of 20: the epoch's key is in the checkpointed state, so a
    run that crashes after its first chunk and resumes logs the uninterrupted run's rows bit for
    bit."""
    full, resumed = uninterrupted_and_resumed(
        run, MarkovTrainConfig(**SHUFFLED), tmp_path, monkeypatch
    )
    assert resumed.sizes["step"] == full.sizes["step"] == 5
    for name in full.data_vars:
        np.testing.assert_array_equal(resumed[name].values, full[name].values)
    seeds = json.loads((tmp_path / "crash" / "config.json").read_text())["seeds"]
    assert "one permutation" in seeds["minibatch_rule"]


def test_gd_step_is_params_minus_lr_times_gradient(tmp_path):
    cfg = MarkovTrainConfig(
        **{**TINY, "seeds": 1, "steps": 1, "chunk": 1, "log_every": 1, "query_scale": None},
        optimizer="gd",
        train_size=8,
        precision="float64",
    )
    assert cfg.learning_rate == 0.2
    run(cfg, _output(tmp_path))
    prob = problem(cfg)
    keys = seed_streams([0])
    start = prob.init(keys["init"][0], keys["noise"][0])
    _, step_key = jax.random.split(keys["data"][0])  # the trainer's split for step 1
    _, grad = jax.jit(prob.loss_and_direction)(start, step_key)
    leaves, step, _ = RunStore(tmp_path / "r").load_checkpoint()
    assert step == 1
    for before, g, after in zip(
        jax.tree_util.tree_leaves(start), jax.tree_util.tree_leaves(grad), leaves[:2]
    ):
        assert np.abs(np.asarray(g)).max() > 0
        np.testing.assert_allclose(after[0], before - 0.2 * g, rtol=1e-12, atol=1e-15)


def test_precision_auto_and_sgd(tmp_path):
    assert MarkovTrainConfig(query_scale=1e-9).dtype == jnp.float64
    for q in (None, 1e-3, 0.0):
        assert MarkovTrainConfig(query_scale=q).dtype == jnp.float32
    assert MarkovTrainConfig(query_scale=None, precision="float64").dtype == jnp.float64
    cfg = MarkovTrainConfig(**{**TINY, "seeds": 1, "query_scale": 1e-9}, optimizer="sgd")
    assert cfg.learning_rate == 0.2
    assert build_model(cfg, jax.random.PRNGKey(0)).WQ.dtype == jnp.float64
    ds, _ = load(run(cfg, _output(tmp_path)))
    leaves, _, _ = RunStore(tmp_path / "r").load_checkpoint()
    assert leaves[0].dtype == np.float64 and ds["val_loss"].dtype == np.float64
    # after the parameters (W_Q, W_V) comes SGD's momentum trace of each (Adam would have a count)
    assert leaves[2].shape == leaves[0].shape and np.abs(leaves[2]).max() > 0
    assert float(ds["val_loss"].values[0, -1]) < float(ds["val_loss"].values[0, 0])
    assert MarkovTrainConfig(model="full", layers=2).learning_rate == 0.001
    assert MarkovTrainConfig(layers=2).learning_rate == 0.04


def test_positional_attention_trains_only_its_blocks(tmp_path):
    """attention = positional under AdamW (weight decay on): W_Q's position-position block and
    W_V's token block move, every other entry keeps its initial value bitwise."""
    cfg = MarkovTrainConfig(**{**TINY, "seeds": 1}, attention="positional", weight_decay=0.5)
    run(cfg, _output(tmp_path))
    keys = seed_streams([0])
    start = build_model(cfg, keys["init"][0])
    leaves, _, _ = RunStore(tmp_path / "r").load_checkpoint()
    d = cfg.vocab
    for before, after, (rows, cols) in zip(
        (start.WQ, start.WV), leaves[:2], ((slice(d, None),) * 2, (slice(None, d),) * 2)
    ):
        before, after = np.asarray(before), after[0]
        trained = np.zeros(before.shape, bool)
        trained[..., rows, cols] = True
        assert np.all(before[~trained] == after[~trained])
        assert np.abs(after[trained] - before[trained]).max() > 1e-3


def test_adam_moment_decays_reach_the_optimizer():
    """beta1 and beta2 are AdamW's: a second step after a large first gradient differs."""
    params = {"w": jnp.zeros(3)}
    updates = []
    for beta2 in (0.999, 0.5):
        opt = optimizer(MarkovTrainConfig(beta2=beta2, clip=1e9))
        state = opt.init(params)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
            _, state = opt.update({"w": jnp.full(3, 100.0)}, state, params)
            updates.append(opt.update({"w": jnp.ones(3)}, state, params)[0]["w"])
    # second moment after two steps: (1 - b2) (b2 100^2 + 1) / (1 - b2^2), first moment the same
    expected = [(1 - b) * (b * 1e4 + 1) / (1 - b**2) for b in (0.999, 0.5)]
    ratio = np.sqrt(expected[1] / expected[0])
    np.testing.assert_allclose(updates[0] / updates[1], ratio, rtol=1e-3)


def test_equal_heads_stay_identical_through_the_trainer(tmp_path):
    """q = 0, W_V = 0 in the two-layer minimal model: no step ever separates the heads."""
    cfg = MarkovTrainConfig(**{**TINY, "seeds": 1, "query_scale": 0.0}, layers=2)
    ds, _ = load(run(cfg, _output(tmp_path)))
    assert ds.sizes["layer"] == 2
    assert np.all(ds["head_asymmetry"].values == 0.0)
    assert float(ds["val_loss"].values[0, -1]) < float(ds["val_loss"].values[0, 0])
    mass = ds["block_mass"].values
    np.testing.assert_array_equal(mass[..., 0, :], mass[..., 1, :])
    assert read_summary(tmp_path / "r")["learning_rate"] == 0.04


def test_full_model_runs_with_its_observables(tmp_path):
    cfg = MarkovTrainConfig(
        **{
            **TINY,
            "heads": 3,
            "seeds": 1,
            "steps": 10,
            "chunk": 10,
            "batch": 16,
            "validation": 16,
            "query_scale": None,
        },
        model="full",
    )
    ds, _ = load(run(cfg, _output(tmp_path)))
    assert "value_alignment" not in ds and ds.sizes["layer"] == 1 and ds.sizes["head"] == 3
    assert np.all(np.isfinite(ds["val_loss"].values))
    assert np.all(ds["head_asymmetry"].values > 0)
    summary = read_summary(tmp_path / "r")
    assert summary["learning_rate"] == 0.003 and summary["dtype"] == "float32"


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    base = MarkovTrainConfig(
        **{**TINY, "steps": 20, "chunk": 20, "seeds": 1},
    )
    out = tmp_path_factory.mktemp("baselines")
    return base, out, train_baselines(base, out, quiet=True)


def test_train_baselines_trains_each_context_once(baselines):
    base, out, dirs = baselines
    assert baseline_contexts(base.task()) == (1, 2)
    assert [d.name for d in dirs] == ["1-gram", "2-gram"]
    stamp = [(d / "summary.json").stat().st_mtime_ns for d in dirs]
    # complete runs of the same config are reused
    assert train_baselines(base, out, quiet=True) == dirs
    assert [(d / "summary.json").stat().st_mtime_ns for d in dirs] == stamp
    c, model = load_baseline(dirs[0])
    assert c == 1 and model.context == 1
    leaves, _, _ = RunStore(dirs[0]).load_checkpoint()
    np.testing.assert_array_equal(model.WQ, leaves[0][0])


def test_student_logs_kl_to_the_baselines(baselines, tmp_path):
    base, _, dirs = baselines
    cfg = replace(base, baselines=dirs)
    ds, _ = load(run(cfg, _output(tmp_path)))
    assert ds["kl_baseline"].dims == ("seed", "step", "baseline")
    assert ds["kl_baseline_train"].dims == ("seed", "step", "baseline")
    assert list(ds["baseline"].values) == [1, 2]
    # at step 0 the student is uniform: KL(p_b || uniform) = ln d - H(p_b)
    val = markov_data(cfg).validation
    for j, d in enumerate(dirs):
        logp = log_probs(load_baseline(d)[1], cfg.task(), val)
        want = float(jnp.mean(jnp.sum(jnp.exp(logp) * logp, -1))) + np.log(cfg.vocab)
        assert float(ds["kl_baseline"].values[0, 0, j]) == pytest.approx(want, abs=1e-5)
    assert stored_config(tmp_path / "r").baselines == dirs
    summary = read_summary(tmp_path / "r")
    assert summary["closest_baseline_at_best_per_seed"] == [
        [1, 2][int(np.argmin(ds["kl_baseline"].values[0, np.argmin(ds["val_loss"].values[0])]))]
    ]
    # class levels: ln d, the 1-gram baseline's final validation loss (h = 2), the Bayes loss
    first = read_summary(dirs[0])["final_val_loss"][0]
    assert summary["class_levels"] == pytest.approx(
        [np.log(cfg.vocab), first, summary["bayes_loss"]]
    )
    steps, loss = ds["step"].values, ds["val_loss"].values[0]
    for k, start in enumerate(np.asarray(summary["stage_start_per_seed"][0], float)):
        cut = 0.5 * (summary["class_levels"][k] + summary["class_levels"][k + 1])
        below = np.nonzero(loss < cut)[0]
        if below.size == 0:
            assert np.isnan(start)
        else:  # interpolated between the last logged step above the cut and the first below
            i = below[0]
            assert steps[max(i - 1, 0)] <= start <= steps[i]


def test_baselines_of_another_teacher_are_refused(baselines):
    base, _, dirs = baselines
    with pytest.raises(ConfigError) as err:
        replace(base, teacher_seed=1, baselines=dirs)
    assert err.value.field == "baselines" and "teacher_seed" in str(err.value)
    with pytest.raises(ConfigError) as err:
        replace(base, vocab=7, baselines=dirs)
    assert "vocab" in str(err.value)
    with pytest.raises(ConfigError):
        replace(base, baselines=(dirs[0], dirs[0]))  # two baselines of one context


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--lr", "0"], "lr"),
        (["--batch", "0"], "batch"),
        (["--tau", "-1"], "tau"),
        (["--query-scale", "-1"], "query_scale"),
        (["--steps", "150", "--chunk", "100"], "steps"),
        (["--layers", "3"], "layers"),
        (["--context", "0"], "context"),
        (["--context", "30"], "context"),
        (["--momentum", "1.5"], "momentum"),
        (["--beta2", "1.0"], "beta2"),
        (["--beta1", "-0.1"], "beta1"),
        (["--optimizer", "sgd", "--beta2", "0.99"], "beta2"),
        (["--attention", "content"], "attention"),
        (["--model", "full", "--heads", "3", "--attention", "positional"], "attention"),
        (["--train-size", "0"], "train_size"),
        (["--minibatches", "epochs"], "minibatches"),
        (["--model", "full", "--heads", "2"], "heads"),
        (["--model", "full", "--generated", "60"], "generated"),
        (["--baselines", "/nonexistent/run"], "baselines"),
        (["--optimizer", "adam"], "optimizer"),
        (["--precision", "float16"], "precision"),
    ],
)
def test_bad_input(argv, field, capsys):
    assert main(["run", "markov", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"stagewise: error: {field} = ")
