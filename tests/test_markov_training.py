"""The markov-minimal experiment through the run store (tiny setting)."""

import json

import numpy as np
import pytest

from figures.cli import main
from simulate.markov_training import MarkovMinimalConfig, run
from simulate.store import load

TINY = {"vocab": 6, "blocks": (1, 1), "generated": 4, "heads": 2, "batch": 32, "steps": 40,
        "chunk": 20, "log_every": 10, "validation": 64, "seeds": 2, "quiet": True,
        "query_scale": 1e-3}


def test_run_logs_named_observables_and_a_summary(tmp_path):
    cfg = MarkovMinimalConfig(**TINY, out=tmp_path / "r")
    ds, config = load(run(cfg))
    assert ds["kl_yardstick"].dims == ("seed", "step", "yardstick")
    assert ds["block_mass"].dims == ("seed", "step", "head", "block")
    assert ds.sizes["step"] == cfg.steps // cfg.log_every + 1
    assert np.all(ds["kl_yardstick"].values >= -1e-12)
    assert np.all(ds["block_mass"].sum("block").values <= 1 + 1e-9)
    # q = 1e-3, W_V = 0: the first row predicts uniformly, so its loss is ln d
    assert float(ds["val_loss"].isel(step=0).mean()) == pytest.approx(np.log(cfg.vocab), abs=1e-6)
    assert float(ds["val_loss"].isel(step=-1).mean()) < np.log(cfg.vocab)
    summary = json.loads((cfg.out / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["yardstick_losses"]["uniform"] == pytest.approx(np.log(cfg.vocab))
    assert config["seeds"]["teacher_seed"] == 0


def test_ladder_and_split_rules_on_constructed_curves():
    from simulate.markov_training import ladder_steps, split_step

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


def test_seeds_share_the_teacher_but_not_the_data(tmp_path):
    ds, _ = load(run(MarkovMinimalConfig(**TINY, out=tmp_path / "r")))
    a, b = ds["val_loss"].isel(seed=0).values, ds["val_loss"].isel(seed=1).values
    assert a[0] == b[0] and not np.array_equal(a, b)


@pytest.mark.parametrize("argv,field", [
    (["--lr", "0"], "lr"), (["--batch", "0"], "batch"), (["--tau", "-1"], "tau"),
    (["--query-scale", "-1"], "query_scale"), (["--steps", "150", "--chunk", "100"], "steps"),
])
def test_bad_input(argv, field, capsys):
    assert main(["run", "markov-minimal", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"stagewise: error: {field} = ")
