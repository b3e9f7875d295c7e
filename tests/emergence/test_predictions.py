"""The emergence figures' predictions beside measurements (issue 16): each figure's rows pick the
predicted and measured numbers of its own summary, and the verdict follows the declared
tolerance. The summaries come from each figure's own compute at its --quick setting, with the
training replaced by synthetic logged curves (a staircase of per-cell drops), so the theory and
measurement functions are the real ones and nothing is trained."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import xarray as xr

from figures.core.verdicts import no_predictions, prediction_rows
from figures.emergence import ca_plateau, heads_vs_dim, linear_map, mixer, sparsity, times
from simulate.emergence.training import EmergenceConfig, summarize
from simulate.store import jsonable

MODULES = (ca_plateau, heads_vs_dim, linear_map, mixer, sparsity, times)


def _drop_row(cfg: EmergenceConfig, seed: int, cell: int, rows: int) -> int:
    """Logged row at which a cell drops: spread over the budget, earlier with more heads, and
    past the end (never) for some (seed, cell)."""
    spread = ((7 * cell + 5 * seed + cfg.s) * 13) % (2 * rows)
    return 1 + int(spread * 2 / (1 + cfg.heads / 4))


def _training(cfg: EmergenceConfig, output) -> xr.Dataset:
    """Stand-in for ``run_stored``: what a run logs, with cell i of seed k falling from ln 2 to
    0.01 at ``_drop_row`` and the aggregate on the staircase; the linear map's summary.json is
    written by the experiment's own ``summarize``."""
    steps = np.arange(0, cfg.steps + 1, cfg.log_every)
    S, H, n = cfg.S, cfg.heads, steps.size
    seeds = np.arange(cfg.seeds)
    drop = np.array([[_drop_row(cfg, k, i, n) for i in range(S)] for k in seeds])
    low = np.arange(n)[None, :, None] >= drop[:, None, :]  # (seed, step, cell)
    cell_loss = np.where(low, 0.01, math.log(cfg.vocab))
    height = (cfg.n_states - 1) * math.log(cfg.vocab) / (cfg.n_states * S - 1)
    loss = cfg.loss_floor() + height * (~low).sum(-1) + 0.002 * seeds[:, None]
    mass = 0.2 + 0.7 * low[:, :, None, :] * (np.arange(H)[None, None, :, None] == 0)
    entropy = np.broadcast_to(
        np.log(S) - low.sum(-1)[:, :, None, None] * np.linspace(0.1, 0.01, H),
        (seeds.size, n, cfg.layers, H),
    )
    block = np.full((seeds.size, n, H, S, S), 1 / (2 * S))
    ds = xr.Dataset(
        {
            "loss": (("seed", "step"), loss),
            "cell_loss": (("seed", "step", "cell"), cell_loss),
            "attention_entropy": (("seed", "step", "layer", "head"), entropy),
            "pattern_mass": (("seed", "step", "head", "cell"), mass),
            "attention_block": (("seed", "step", "head", "cell", "key_cell"), block),
        },
        coords={
            "seed": seeds,
            "step": steps,
            "cell": np.arange(S),
            "layer": np.arange(1, cfg.layers + 1),
            "head": np.arange(1, H + 1),
            "key_cell": np.arange(S),
        },
    )
    output.path.mkdir(parents=True, exist_ok=True)
    M = np.eye(S, dtype=int) if cfg.task == "linear_map" else None
    (output.path / "summary.json").write_text(json.dumps(jsonable(summarize(cfg, M, ds))))
    return ds


@pytest.fixture
def quick_summary(monkeypatch, tmp_path):
    """``summary(module)``: the summary of the module's compute at --quick on synthetic runs."""

    def summary(module) -> dict:
        monkeypatch.setattr(module, "run_stored", _training)
        cfg = module.FIGURE.config(quick=True, quiet=True, out=tmp_path)
        return module.FIGURE.compute(cfg, tmp_path / module.FIGURE.id)[1]

    return summary


def _rows(module, summary: dict) -> list:
    """The figure's rows, checked to be the same from the summary as stored (JSON, non-finite
    numbers as strings), as the report reads them."""
    rows = module.FIGURE.predictions(summary)
    stored = json.loads(json.dumps(jsonable(summary)))
    again = prediction_rows(module.FIGURE.predictions(stored))
    assert json.dumps(jsonable(prediction_rows(rows))) == json.dumps(jsonable(again))
    assert rows, module.FIGURE.id
    return rows


def _follows_tolerance(row) -> bool:
    if not (math.isfinite(row.predicted) and math.isfinite(row.measured)):
        return row.verdict() == "not measured"
    ratio = row.measured / row.predicted if row.scale != "difference" else math.nan
    if row.scale == "difference":
        within = abs(row.measured - row.predicted) <= row.tolerance
    elif row.scale == "factor":  # the ca-plateau drop step: within a factor either way
        within = ratio > 0 and max(ratio, 1 / ratio) <= row.tolerance
    else:
        within = abs(ratio - 1) <= row.tolerance
    return row.verdict() == ("agrees" if within else "disagrees")


def test_every_emergence_figure_says_how_to_read_it_and_predicts():
    for module in MODULES:
        assert module.FIGURE.how_to_read.strip(), module.FIGURE.id
        assert module.FIGURE.predictions is not no_predictions, module.FIGURE.id


def test_linear_map_puts_each_seed_beside_the_staircase_level_of_its_emerged_cells(
    quick_summary,
):
    s = quick_summary(linear_map)
    rows = _rows(linear_map, s)
    final, emerged = s["final_loss_per_seed"], s["cells_emerged_per_seed"]
    assert len(rows) == len(final) == 2
    assert emerged.min() < s["S"]  # a seed stuck above the floor: its level is a staircase step
    for row, loss, n in zip(rows, final, emerged):
        assert row.predicted == pytest.approx(s["loss_floor"] + (s["S"] - n) * s["step_height"])
        assert row.measured == loss
        assert row.tolerance == s["step_height"] / 2 and _follows_tolerance(row)
        assert row.verdict() == "agrees"  # the synthetic aggregate sits on its level


def test_sparsity_puts_the_hardest_density_beside_the_largest_search_space(quick_summary):
    s = quick_summary(sparsity)
    (row,) = _rows(sparsity, s)  # --quick: one S
    density, loss = np.asarray(s["density"]), np.asarray(s["mean_final_loss"])
    assert row.predicted == density[np.argmax(s["log_binomial"])] == 0.5
    assert row.measured == density[np.argmax(loss)]
    assert row.scale == "difference" and _follows_tolerance(row)


def test_mixer_puts_each_mixer_seed_beside_the_floor(quick_summary):
    s = quick_summary(mixer)
    rows = _rows(mixer, s)
    final = np.asarray(s["final_loss_per_seed"])[s["models"].index("mixer")]
    assert [r.measured for r in rows] == final.ravel().tolist()
    assert all(r.predicted == s["loss_floor"] and _follows_tolerance(r) for r in rows)


def test_heads_vs_dim_puts_cells_emerged_beside_the_lottery_of_each_sweep(quick_summary):
    s = quick_summary(heads_vs_dim)
    rows = _rows(heads_vs_dim, s)
    expected = [
        (s["lottery_fraction_cells_emerged"][name][p], s["fraction_cells_emerged"][k])
        for name, idx in s["sweeps"].items()
        for p, k in enumerate(idx)
        if p > 0
    ]
    assert [(r.predicted, r.measured) for r in rows] == expected
    assert len({r.quantity for r in rows}) == len(rows)
    assert all(r.scale == "difference" and _follows_tolerance(r) for r in rows)
    assert {r.verdict() for r in rows} == {"agrees", "disagrees"}


def test_times_puts_cell_and_run_fractions_beside_the_lottery(quick_summary):
    s = quick_summary(times)
    rows = _rows(times, s)
    later = range(1, len(s["heads"]))
    expected = [(s["lottery_fraction_emerged"][k], s["fraction_emerged"][k]) for k in later] + [
        (s["lottery_fraction_runs_emerged"][k], s["fraction_runs_emerged"][k]) for k in later
    ]
    assert [(r.predicted, r.measured) for r in rows] == expected
    assert all(r.scale == "difference" and _follows_tolerance(r) for r in rows)


def test_ca_plateau_puts_mass_level_and_biased_drop_beside_their_predictions(quick_summary):
    s = quick_summary(ca_plateau)
    rows = _rows(ca_plateau, s)
    sizes = s["sizes"]  # --quick: S = 4, 16
    mass = [r for r in rows if "attention mass" in r.quantity]
    assert [r.measured for r in mass] == np.repeat(s["initial_mass_measured"][:, 1], 2).tolist()
    assert [r.predicted for r in mass] == [
        x
        for i in range(len(sizes))
        for x in (s["initial_mass_causal"][i, 1], s["initial_mass_spec"][i, 1])
    ]
    level = [r for r in rows if "plateau level" in r.quantity]
    assert [r.predicted for r in level] == [s["ln_K"]] * len(sizes)
    assert [r.measured for r in level] == np.median(
        s["plateau_level_per_seed"][:, 0], axis=-1
    ).tolist()
    (drop,) = [r for r in rows if "drop step" in r.quantity]
    assert (drop.predicted, drop.measured) == tuple(s["median_drop_step"][:, 1])
    assert drop.scale == "factor"  # "nearly independent of S" bounds both ways
    assert len(rows) == 3 * len(sizes) + 1
    assert all(_follows_tolerance(r) for r in rows)
