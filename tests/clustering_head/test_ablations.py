"""Figure clustering-head-ablations: bad input, and the --quick figure through the CLI (its
statistics: test_outcomes.py)."""

from __future__ import annotations

import pytest

from figures.cli import main
from figures.clustering_head.ablations import FIGURE, QUICK
from simulate.clustering_head.outcomes import PAPER, learning_rates
from simulate.store import read_summary


def test_bad_input_fails_with_exit_code_2(tmp_path, capsys):
    code = main(["figure", FIGURE.id, "--lr-min", "-1", "--quiet", "--out", str(tmp_path)])
    assert code == 2
    assert "lr_min" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_quick_figure_reports_a_success_rate_for_every_point(tmp_path):
    assert main(["figure", FIGURE.id, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    out = tmp_path / FIGURE.id
    assert (out / f"{FIGURE.id}.png").exists()
    summary = read_summary(out)
    seeds = QUICK["seeds"]
    assert summary["seeds"] == summary["default_seeds"] == seeds
    assert summary["success_rule"] == "final test accuracy > 0.98"
    expected = {("lr", v) for v in learning_rates(QUICK["lr_values"], 1e-4, 1.0)}
    expected |= {("batch", b) for b in QUICK["batches"] if b != PAPER.batch}
    expected |= {("width", m) for m in QUICK["widths"] if m != PAPER.width}
    got = {(p["axis"], p[p["axis"]]) for p in summary["points"] if p["axis"] != "default"}
    assert {(a, round(float(v), 12)) for a, v in got} == {
        (a, round(float(v), 12)) for a, v in expected
    }
    for p in summary["points"]:
        assert p["seeds"] == seeds and 0 <= p["successes"] <= seeds
        assert p["success_rate"] == p["successes"] / seeds
        lo, hi = p["success_interval_95"]
        assert 0 <= lo <= p["success_rate"] <= hi <= 1
    assert len(summary["default_success_per_seed"]) == seeds
    assert summary["default_success_rate"] == summary["points"][0]["success_rate"]
