"""Figures of the mean-field paper (spec mean_field.md §7): helpers on constructed arrays, a bad
input, and every figure in --quick mode (slow) with the effect it claims."""

import json

import numpy as np
import pytest

from figures.cli import main
from figures.mean_field.common import fit_rate
from figures.mean_field.density import escape_onset
from figures.mean_field.energy import largest_rise
from figures.mean_field.escape import loglog_slope
from figures.mean_field.threshold import measured_transition, susceptibility_fit
from simulate.mean_field.training import profile_summary


def _summary(tmp_path, figure_id):
    return json.loads((tmp_path / figure_id / "summary.json").read_text())


# ---- pure helpers ----------------------------------------------------------------------------


def test_measured_transition_interpolates_the_crossing():
    ratios = [0.8, 0.9, 1.0, 1.1, 1.2]
    assert measured_transition(ratios, [0.7, 0.5, 0.3, 0.1, 0.05], 0.2) == pytest.approx(1.05)
    assert np.isnan(measured_transition(ratios, [0.1] * 5, 0.2))  # never clustered
    assert np.isnan(measured_transition(ratios, [0.5] * 5, 0.2))  # never unclustered


def test_susceptibility_fit_recovers_tau_c():
    ratios = np.array([1.1, 1.2, 1.5, 2.0])
    N = 1000
    r1_sq = 1 / (N * (1 - 1 / ratios))  # exact Gibbs fluctuations above tau_c = 1
    assert susceptibility_fit(ratios, r1_sq, N, 1.0) == pytest.approx(1.0)


def test_escape_onset_is_where_the_curves_part_for_good():
    depth = np.linspace(0, 8, 9)
    untrained = np.zeros(9)
    trained = np.array([0, 0.15, 0.05, 0, 0, 0.05, 0.2, 0.6, 1.0])  # an early blip, then escape
    assert escape_onset(depth, trained, untrained) == 5.0
    assert np.isnan(escape_onset(depth, untrained, untrained))


def test_profile_statistics_of_a_terminal_layer():
    depth, kappa = 8.0, 2.0
    t = (np.arange(64) + 0.5) * depth / 64
    norms = np.exp(-kappa * (depth - t))
    stats = profile_summary(norms, depth)
    assert stats["peak_depth"] == pytest.approx(t[-1])
    assert stats["last_quarter_share"] > 0.99 and stats["first_quarter_share"] < 1e-6
    assert stats["width90"] == pytest.approx(np.log(10) / (2 * kappa), rel=0.1)
    assert fit_rate(t, norms, depth, 2.0) == pytest.approx(kappa)


def test_slopes_and_rises():
    assert loglog_slope([1, 10, 100], [1, 0.1, 0.01]) == pytest.approx(-1.0)
    assert largest_rise([3, 2, 2.5, 1]) == pytest.approx(0.5)
    assert largest_rise([3, 2, 1]) == 0.0


def test_bad_input_fails_with_exit_code_2(tmp_path, capsys):
    assert (
        main(
            ["figure", "mean-field-threshold", "--tau-ratios", "1.1", "0.9", "--out", str(tmp_path)]
        )
        == 2
    )
    assert "tau_ratios" in capsys.readouterr().err
    assert main(["figure", "mean-field-escape", "--lambdas", "0", "--out", str(tmp_path)]) == 2


# ---- quick runs (slow) ---------------------------------------------------------------------------


def _run(tmp_path, figure_id):
    assert main(["figure", figure_id, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    assert (tmp_path / figure_id / f"{figure_id}.png").exists()
    return _summary(tmp_path, figure_id)


@pytest.mark.slow
def test_threshold_quick(tmp_path):
    s = _run(tmp_path, "mean-field-threshold")
    for beta, v in s["per_beta"].items():
        assert abs(v["measured_transition_ratio"] - 1) < 0.1, beta
        assert v["clustered_below_uniform_start"] and v["unclustered_above_uniform_start"], beta
        assert -1.2 < v["rate_slope"] < -0.8 and abs(v["rate_zero_ratio"] - 1) < 0.1, beta
    assert s["per_beta"]["4"]["transition"] == "discontinuous"


@pytest.mark.slow
def test_density_quick(tmp_path):
    s = _run(tmp_path, "mean-field-density")
    assert s["r2_plateau_untrained"] > 0.8  # the untrained flow clusters into the two wells
    assert s["escape"] > 0.5 and s["heldout_escape"] > 0.5
    assert s["onset_fraction_of_depth"] >= 0.5  # the trained flow leaves only in the last layers


@pytest.mark.slow
def test_control_norm_quick(tmp_path):
    s = _run(tmp_path, "mean-field-control-norm")
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
    s = _run(tmp_path, "mean-field-energy")
    assert s["untrained_largest_rise"] < 0.05 * s["untrained_decrease"]
    assert abs(s["untrained_FT"] - s["F_two_well_theory"]) < 0.05
    assert abs(s["untrained_F0"] - s["F_uniform_theory"]) < 0.05
    assert s["trained_rise_last_quarter"] > 0.1


@pytest.mark.slow
def test_escape_quick(tmp_path):
    s = _run(tmp_path, "mean-field-escape")
    for case, v in s["per_case"].items():
        assert v["monotone_in_lambda"], case
        assert v["escape"][0] > 0.9, case  # saturated
        assert -1.2 < v["loglog_slope_largest_lambdas"] < -0.8, case  # 1/lambda
        assert 0.6 < v["escape_times_lambda_over_gramian"] < 1.4, case
        assert v["width90_largest_lambda"] == pytest.approx(v["width90_lq_prediction"], rel=0.3)
