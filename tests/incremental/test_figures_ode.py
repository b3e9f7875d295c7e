"""The incremental-ode, incremental-timing and incremental-head-dynamics figures through the
command line: what they store, that they are drawn from the store, their measured stages."""

from dataclasses import replace

import numpy as np
import pytest

from figures.cli import main
from simulate.store import load, read_summary


def test_incremental_ode_quick_figure(tmp_path, capsys, monkeypatch):
    assert main(["figure", "incremental-ode", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    run_dir = tmp_path / "incremental-ode"
    for name in ("incremental-ode.png", "incremental-ode.pdf", "summary.json"):
        assert (run_dir / name).stat().st_size > 0
    summary = read_summary(run_dir)
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
    # later stages (theory.incremental.later_stages): the lumped window from the seed's own
    # start gives its loss midpoints; the sequential predictor each t_k from t_{k-1}
    for st in stages:
        assert st["own_start_measured_over_predicted"] == pytest.approx(1.0, rel=1e-3)
    for st in stages[1:]:
        assert st["sequential_measured_over_predicted"] == pytest.approx(1.0, abs=0.1)
        assert np.isfinite(st["apriori_time"])
    stall = summary["stall_eps0"]
    assert stall["final_loss"] == pytest.approx(derived[1], rel=1e-3)
    assert stall["loss_crossings"][1:] == ["nan", "nan"]
    # the untied run's note says what its heads did, not what round-off is expected to do
    untied = summary["eps0_untied_float64"]
    split = untied["max_head_attention_difference"] > 0
    assert ("round-off" in untied["note"]) == split
    assert ("stay bitwise equal" in untied["note"]) == (not split)

    # the figure is drawn from the stored run: re-plotting reads it and recomputes nothing
    data, config = load(run_dir)
    assert config["experiment"] == "incremental-ode"
    np.testing.assert_array_equal(data["plateau_level"].values, derived)
    (run_dir / "incremental-ode.png").unlink()
    import figures.registry
    from figures.incremental.ode import FIGURE

    def fail(cfg, run_dir):
        pytest.fail("replot recomputed")

    monkeypatch.setattr(figures.registry, "find", lambda kind, name: replace(FIGURE, compute=fail))
    assert main(["figure", "incremental-ode", "--replot", "--out", str(tmp_path)]) == 0
    assert (run_dir / "incremental-ode.png").stat().st_size > 0
    assert read_summary(run_dir) == summary


@pytest.mark.slow
def test_incremental_timing_quick_figure(tmp_path):
    assert main(["figure", "incremental-timing", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    summary = read_summary(tmp_path / "incremental-timing")
    assert {r["metric"] for r in summary["rows"]} == {"replicator", "logit"}
    assert all(r["measured"] != "nan" for r in summary["rows"] if r["stage"] <= 2)
    # the later-stage predictors beside the vertex law: the run's own start reproduces its
    # loss midpoints (the lumped window is exact for exchangeable empty lags)
    own = [r["own_start_measured_over_predicted"] for r in summary["rows"]]
    np.testing.assert_allclose(own, 1.0, rtol=1e-3)
    assert all(np.isfinite(r["apriori"]) for r in summary["rows"] if r["stage"] <= 2)


@pytest.mark.slow
def test_incremental_head_dynamics_quick_figure(tmp_path):
    assert (
        main(["figure", "incremental-head-dynamics", "--quick", "--quiet", "--out", str(tmp_path)])
        == 0
    )
    run_dir = tmp_path / "incremental-head-dynamics"
    data, _ = load(run_dir)
    summary = read_summary(run_dir)
    assert np.isfinite(summary["heads_split_step"]) and summary["steps_per_ode_time"] > 0
    # the first-order split lands within two logged intervals of the run's (the frozen-coefficient
    # rate it replaced predicted step 354 against the run's 450)
    assert abs(summary["heads_split_step_predicted"] - summary["heads_split_step"]) <= 20
    assert data["block_mass"].dims == ("step", "head", "block")
    assert (run_dir / "incremental-head-dynamics.png").stat().st_size > 0


@pytest.mark.slow
def test_a_horizon_the_solver_cannot_reach_is_one_line(tmp_path, capsys):
    """t_max = 1e308 passes validation (finite) but the solver stops long before it: one line
    naming t_max and exit 2, not an equinox traceback (a minute of solving: slow)."""
    argv = ["figure", "incremental-ode", "--quick", "--quiet", "--t-max", "1e308"]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagewise: error: t_max = 1e+308: ")
