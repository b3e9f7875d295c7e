"""Figures of the mean-field paper (spec mean_field.md §7): a bad input through the command line,
and every figure in --quick mode (slow) with the effect it claims. The statistics they report are
tested beside their rules (test_measure, test_threshold, test_training, tests/measure)."""

import numpy as np
import pytest

from figures.cli import main
from figures.mean_field import control_norm, density, energy, escape, threshold


def test_bad_input_fails_with_exit_code_2(tmp_path, capsys):
    assert (
        main(
            ["figure", "mean-field-threshold", "--tau-ratios", "1.1", "0.9", "--out", str(tmp_path)]
        )
        == 2
    )
    assert "tau_ratios" in capsys.readouterr().err
    assert main(["figure", "mean-field-escape", "--lambdas", "0", "--out", str(tmp_path)]) == 2


def test_quick_settings_are_the_readme_settings():
    """--quick keeps the numbers the README reports."""
    cfg = density.FIGURE.config(quick=True).training()
    assert (cfg.tokens, cfg.dt, cfg.bins, cfg.save_every, cfg.steps, cfg.seeds) == (
        256,
        0.0625,
        32,
        2,
        200,
        1,
    )
    assert energy.FIGURE.config(quick=True).training().tokens == 256
    assert energy.FIGURE.config().training().tokens == 1024
    quick = escape.FIGURE.config(quick=True)
    assert quick.cases() == [(2.0, 0.02), (2.0, 0.05), (2.0, 0.1)]
    assert quick.training(steps=escape.QUICK_STEPS, chunk=escape.QUICK_STEPS).steps == 150
    assert control_norm.FIGURE.config().training().lambdas == (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    setting = threshold.FIGURE.config(quick=True).resolved()
    assert (setting.tokens, setting.depth_units, setting.dt_units, setting.float64) == (
        512,
        100.0,
        0.05,
        False,
    )


# ---- quick runs (slow) ---------------------------------------------------------------------------


def _run(tmp_path, module):
    figure = module.FIGURE
    summary = figure.run(figure.config(quick=True, quiet=True, out=tmp_path))
    assert (tmp_path / figure.id / f"{figure.id}.png").exists()
    return summary


@pytest.mark.slow
def test_threshold_quick(tmp_path):
    s = _run(tmp_path, threshold)
    for beta, v in s["per_beta"].items():
        assert abs(v["measured_transition_ratio"] - 1) < 0.1, beta
        assert v["clustered_below_uniform_start"] and v["unclustered_above_uniform_start"], beta
        assert -1.2 < v["rate_slope"] < -0.8 and abs(v["rate_zero_ratio"] - 1) < 0.1, beta
    assert s["per_beta"]["4"]["transition"] == "discontinuous"


@pytest.mark.slow
def test_density_quick(tmp_path):
    s = _run(tmp_path, density)
    assert s["r2_plateau_untrained"] > 0.8  # the untrained flow clusters into the two wells
    assert s["escape"] > 0.5 and s["heldout_escape"] > 0.5
    assert s["onset_fraction_of_depth"] >= 0.5  # the trained flow leaves only in the last layers


@pytest.mark.slow
def test_control_norm_quick(tmp_path):
    s = _run(tmp_path, control_norm)
    per = s["per_lambda"]
    big = per[f"{s['largest_lambda']:g}"]
    assert big["last_quarter_share"] > 0.9  # linear regime: concentrated at the output
    assert s["linear_response_max_rel_error_last_quarter"] < 0.5
    assert abs(s["kappa_fit_largest_lambda"] / s["kappa_rayleigh"] - 1) < 0.25
    for lam, v in per.items():
        assert v["peak_depth"] >= 0.75 * s["depth"], lam
        assert v["norm_at_T"] > v["median_norm_middle_half"], lam
    escapes = [v["escape"] for v in per.values()]
    assert all(np.diff(escapes) < 0.02)  # lambdas increase: the escape shrinks


@pytest.mark.slow
def test_energy_quick(tmp_path):
    s = _run(tmp_path, energy)
    assert s["untrained_largest_rise"] < 0.05 * s["untrained_decrease"]
    assert abs(s["untrained_FT"] - s["F_two_well_theory"]) < 0.05
    assert abs(s["untrained_F0"] - s["F_uniform_theory"]) < 0.05
    assert s["trained_rise_last_quarter"] > 0.1


@pytest.mark.slow
def test_escape_quick(tmp_path):
    s = _run(tmp_path, escape)
    for case, v in s["per_case"].items():
        assert v["monotone_in_lambda"], case
        assert v["escape"][0] > 0.9, case  # saturated
        assert -1.2 < v["loglog_slope_largest_lambdas"] < -0.8, case  # 1/lambda
        assert 0.6 < v["escape_times_lambda_over_gramian"] < 1.4, case
        assert v["width90_largest_lambda"] == pytest.approx(v["width90_lq_prediction"], rel=0.3)
