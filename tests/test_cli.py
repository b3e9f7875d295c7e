"""Behaviour of the stagewise command line: listing, derivation, bad input, the incremental-ode figure."""

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from figures.cli import main
from simulate.store import load
from theory.incremental.heads import HeadSetting, HeadSystem

SPEC_README = Path(__file__).resolve().parents[2] / "shared" / "papers" / "README.md"


@pytest.mark.parametrize(
    "argv,field",
    [
        (["figure", "no-such-figure"], "figure"),
        (["figure", "incremental-ode", "--eps", "-1"], "eps"),
        (["figure", "incremental-ode", "--blocks", "30", "20"], "blocks"),
        (["figure", "incremental-ode", "--importances", "1", "0", "1"], "importances"),
        (["figure", "incremental-ode", "--m", "-2"], "m"),
        (["figure", "incremental-timing", "--eps", "0"], "eps"),
        (["derive", "nothing"], "system"),
        (["frobnicate"], "command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stagewise: error: {field} = ")


def test_list_names_every_figure_of_the_specs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    listed = {
        line.split()[0] for line in out.splitlines() if line and not line.startswith("derive")
    }
    if SPEC_README.exists():
        ids = set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", SPEC_README.read_text()))
        ids = {
            i
            for i in ids
            if i.split("-")[0] in {"incremental", "focus", "clustering", "emergence", "mean"}
        }
        assert ids and ids <= listed
    assert {"incremental-ode", "incremental-timing"} <= listed


def test_derive_prints_the_derived_plateaus(capsys):
    assert main(["derive", "incremental", "--window", "6", "--m", "1.5"]) == 0
    out = capsys.readouterr().out
    setting = HeadSetting(window=6, m=1.5)
    hs = HeadSystem(setting)
    for k, L in enumerate(hs.plateau_levels()):
        assert f"L_{k} = " in out and f"{float(L.xreplace(hs.parameter_values())):.6g}" in out
    assert "degenerate" in out


def test_derive_latex(capsys):
    assert main(["derive", "incremental", "--window", "6", "--latex"]) == 0
    assert r"\alpha" in capsys.readouterr().out


def test_incremental_ode_quick_figure(tmp_path, capsys, monkeypatch):
    start = time.perf_counter()
    assert main(["figure", "incremental-ode", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    elapsed = time.perf_counter() - start
    run_dir = tmp_path / "incremental-ode"
    for name in ("incremental-ode.png", "incremental-ode.pdf", "summary.json"):
        assert (run_dir / name).stat().st_size > 0
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    assert len(stages) >= 3
    derived = summary["plateau_levels_derived"]
    for st in stages[:-1]:  # the last level is approached algebraically (loss -> 0)
        assert st["plateau_measured"] == pytest.approx(st["plateau_derived"], abs=1e-2)
        assert st["plateau_derived"] == pytest.approx(derived[st["stage"]])
    assert stages[-1]["plateau_measured"] < 1e-3
    for st in stages:
        assert st["measured_over_predicted"] == pytest.approx(
            st["measured_time"] / st["predicted_time"]
        )
    stall = summary["stall_eps0"]
    assert stall["final_loss"] == pytest.approx(derived[1], rel=1e-3)
    assert stall["loss_crossings"][1:] == ["nan", "nan"]
    assert elapsed < 60

    # the figure is drawn from the stored run: re-plotting reads it and recomputes nothing
    data, config = load(run_dir)
    assert config["experiment"] == "incremental-ode"
    np.testing.assert_array_equal(data["plateau_level"].values, derived)
    (run_dir / "incremental-ode.png").unlink()
    import figures.incremental.ode as module

    monkeypatch.setattr(module, "compute", lambda cfg: pytest.fail("replot recomputed"))
    assert main(["figure", "incremental-ode", "--replot", "--out", str(tmp_path)]) == 0
    assert (run_dir / "incremental-ode.png").stat().st_size > 0
    assert json.loads((run_dir / "summary.json").read_text()) == summary


def test_replot_needs_a_stored_run(tmp_path, capsys):
    assert main(["figure", "incremental-ode", "--replot", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("stagewise: error: replot = ")


@pytest.mark.slow
def test_incremental_timing_quick_figure(tmp_path):
    assert main(["figure", "incremental-timing", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "incremental-timing" / "summary.json").read_text())
    assert {r["metric"] for r in summary["rows"]} == {"replicator", "logit"}
    assert all(r["measured"] != "nan" for r in summary["rows"] if r["stage"] <= 2)


@pytest.mark.slow
def test_incremental_head_dynamics_quick_figure(tmp_path):
    assert (
        main(["figure", "incremental-head-dynamics", "--quick", "--quiet", "--out", str(tmp_path)])
        == 0
    )
    run_dir = tmp_path / "incremental-head-dynamics"
    data, _ = load(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert np.isfinite(summary["heads_split_step"]) and summary["steps_per_ode_time"] > 0
    assert data["block_mass"].dims == ("step", "head", "block")
    assert (run_dir / "incremental-head-dynamics.png").stat().st_size > 0


def test_ode_heads_are_matched_to_the_trained_heads():
    from figures.incremental.head_dynamics import _match_heads

    trained = np.array([[0.1, 0.9, 0.0], [0.9, 0.1, 0.0], [0.2, 0.0, 0.8]])
    ode = trained[[2, 0, 1]]
    assert [int(i) for i in _match_heads(trained, ode)] == [1, 2, 0]
