"""``stagewise compare incremental``: the table rules and the whole command (slow)."""

import numpy as np
import pytest

from figures.cli import main
from simulate.incremental.plateau_splitting import SPLIT_MARGIN, measured_rate
from simulate.incremental.training_stages import duration_ratio
from simulate.store import read_summary


def test_duration_ratios_are_stage_lengths_over_the_first_stage():
    starts = np.array([10.0, 40.0, 100.0])
    assert np.isnan(duration_ratio(starts, 0))
    assert duration_ratio(starts, 1) == 3.0
    assert duration_ratio(starts, 2) == 6.0


def test_measured_splitting_rate_is_the_log_slope_over_the_late_plateau():
    steps = np.arange(0, 1000, 10.0)
    # e^(0.05 t) until the split at 450, then saturated: only the window counts
    asymmetry = np.exp(0.05 * np.minimum(steps, 450.0) - 20.0)
    rate, window = measured_rate(steps, asymmetry, 20.0, 450.0)
    assert window == [235.0, 450.0 - SPLIT_MARGIN]
    assert rate == pytest.approx(0.05)
    assert np.isnan(measured_rate(steps, asymmetry, 20.0, float("nan"))[0])
    assert np.isnan(measured_rate(steps, asymmetry, 20.0, 90.0)[0])  # no logged step left


def test_unknown_comparison_is_one_line(capsys):
    assert main(["compare", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert "incremental" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_compare_incremental_quick(tmp_path, capsys):
    assert main(["compare", "incremental", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "meas/pred" in out and "dur. ratio meas" in out
    run_dir = tmp_path / "compare-incremental"
    assert (run_dir / "compare-incremental.png").exists()
    summary = read_summary(run_dir)
    # gradient flow with positional attention: every stage within 10% of the reduced system
    rows = summary["regression_positional"]["rows"]
    assert all(abs(r["ratio_min"] - 1) < 0.1 and abs(r["ratio_max"] - 1) < 0.1 for r in rows)
    ce = summary["cross_entropy"]
    assert ce["order_predicted"] == [1, 2, 3]
    assert len(ce["rows"]) == 3 and np.isfinite(ce["rows"][-1]["start_measured"])
    # stage 1 from AdamW's expected moments, from the run's own initial parameters: within 25%
    first = ce["rows"][0]
    assert abs(first["start_expected_moments"] / first["start_measured"] - 1) < 0.25
    # AdamW's head-splitting rate: the linearised optimizer at the plateau, within 25%
    split = ce["splitting"]
    assert abs(split["rate_predicted"] / split["rate_measured"] - 1) < 0.25
    # the heads' split to first order in q: within two logged intervals of the run's
    assert abs(split["split_first_order"] - split["split_measured"]) <= 20
    # the replot path draws from the stored data alone
    assert main(["compare", "incremental", "--quick", "--replot", "--out", str(tmp_path)]) == 0


@pytest.mark.slow
def test_compare_incremental_quick_stages_from_the_state_and_a_priori(tmp_path):
    """``--from-state``: the AdamW student's stages 2 and 3 from its own state at the measured
    t_{k-1} and a priori from its initial state, every duration within the issue's 25% (measured
    2026-12-08 under the CLI: see the README's table). 15 min under the suite's LLVM -O0."""
    args = ["compare", "incremental", "--quick", "--from-state", "--quiet", "--out", str(tmp_path)]
    assert main(args) == 0
    part = read_summary(tmp_path / "compare-incremental")["from_state_adamw"]
    assert [r["stage"] for r in part["rows"]] == [2, 3]
    for r in part["rows"]:
        for key in ("duration_from_state", "duration_from_start"):
            assert r[key] == pytest.approx(r["duration_measured"], rel=0.25)
    assert part["starts_from_start"][0] == pytest.approx(
        part["rows"][0]["start_previous"], rel=0.25
    )
