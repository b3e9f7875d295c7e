"""The mean-field figures' predictions beside measurements (issue 16): each figure's rows pick the
predicted and measured numbers of its own summary, and the verdict follows the declared
tolerance. The trained figures' summaries come from their own compute at --quick with the
training and the W = 0 linear response replaced by synthetic logged flows (the theory, the
experiment's summary and the measurement rules are the real ones); the threshold's from the
theory and measurement functions its compute uses (its real compute, at a tiny size, is slow)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import xarray as xr

from figures.core.verdicts import no_predictions, prediction_rows
from figures.mean_field import control_norm, density, energy, escape, threshold
from simulate.mean_field.threshold import (
    ThresholdSetting,
    measured_transition,
    rate_line,
    susceptibility_fit,
)
from simulate.mean_field.training import MeanFieldConfig, summarize
from simulate.store import jsonable
from theory.mean_field.energy import stationary_order_parameter, tau_c

MODULES = (control_norm, density, energy, escape, threshold)
KAPPA, GRAMIAN = 1.6, 0.6


def _flow(cfg: MeanFieldConfig) -> xr.Dataset:
    """What a training run logs at its first (W = 0) and last step: clustering into the wells
    e_1, -e_1 along the depth, and for the trained flow an escape towards e_2 in the last
    quarter, of amplitude min(1, GRAMIAN/lambda)."""
    t, T = cfg.depth_points(), cfg.depth
    lam = np.asarray(cfg.lambdas)
    seeds = np.arange(cfg.seeds)
    angle = (np.arange(cfg.angle_bins) + 0.5) * 2 * np.pi / cfg.angle_bins
    ramp = np.clip((t - 0.75 * T) / (0.25 * T), 0, 1)
    amplitude = np.minimum(1.0, GRAMIAN / lam)
    trained = np.array([0.0, 1.0])[:, None, None, None]  # (step, seed, lam, depth)
    e2 = trained * amplitude[None, None, :, None] * ramp + 0 * seeds[:, None, None]
    r2 = 0.95 * (1 - np.exp(-2 * t)) * (1 - e2**2)
    F = -0.92 + 0.39 * np.exp(-t) + 0.3 * e2
    dissipation = -np.gradient(F, t, axis=-1) * 1.05
    wells = 0.55 * np.exp(20 * np.cos(angle)) + 0.45 * np.exp(-20 * np.cos(angle))
    dens = np.broadcast_to(wells / (wells.sum() * 2 * np.pi / angle.size), (*e2.shape, angle.size))
    profile = np.exp(-KAPPA * (T - cfg.bin_centres())) * np.minimum(1.0, 1 / lam)[:, None]
    norms = trained * profile + 0 * seeds[:, None, None]
    G = -e2[..., -1]
    lead = ("step", "seed", "lam")
    return xr.Dataset(
        {
            "J": (lead, G),
            "terminal_loss": (lead, G),
            "regulariser": (lead, 0 * G),
            "heldout_terminal_loss": (lead, 0.98 * G),
            "control_norm": ((*lead, "bin"), norms),
            "e2": ((*lead, "depth"), e2),
            "r2": ((*lead, "depth"), r2),
            "energy": ((*lead, "depth"), F),
            "interaction": ((*lead, "depth"), F + 0.05),
            "dissipation": ((*lead, "depth"), dissipation),
            "control_work": ((*lead, "depth"), 0 * F),
            "density": ((*lead, "depth", "angle"), dens),
            "paths": ((*lead, "depth", "particle"), np.zeros((*e2.shape, cfg.paths))),
        },
        coords={
            "step": [0, cfg.steps],
            "seed": seeds,
            "lam": lam,
            "depth": t,
            "bin": cfg.bin_centres(),
            "angle": angle,
            "particle": np.arange(cfg.paths),
        },
    )


def _train(options, cfg: MeanFieldConfig, run_dir, name: str = "training"):
    """Stand-in for ``figures.mean_field.common.train``: the synthetic flow and the
    experiment's own summary of it."""
    ds = _flow(cfg)
    return ds, summarize(cfg, ds)


def _train_all(options, runs, run_dir):
    """Stand-in for ``figures.mean_field.common.train_all``."""
    return [_train(options, cfg, run_dir, name) for cfg, name in runs]


def _linear_response(cfg: MeanFieldConfig) -> dict:
    return {
        "gradient_norm": np.exp(-KAPPA * (cfg.depth - cfg.bin_centres())),
        "gramian": GRAMIAN,
        "kappa": KAPPA,
    }


@pytest.fixture
def quick_summary(monkeypatch, tmp_path):
    """``summary(module)``: the summary of the module's compute at --quick on synthetic flows."""

    def summary(module) -> dict:
        for name, stand_in in (("train", _train), ("train_all", _train_all)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, stand_in)
        if hasattr(module, "mean_linear_response"):
            monkeypatch.setattr(module, "mean_linear_response", _linear_response)
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
    assert all(_follows_tolerance(r) for r in rows)
    return rows


def _follows_tolerance(row) -> bool:
    if not (math.isfinite(row.predicted) and math.isfinite(row.measured)):
        return row.verdict() == "not measured"
    off = (
        abs(row.measured - row.predicted)
        if row.scale == "difference"
        else abs(row.measured / row.predicted - 1)
    )
    return row.verdict() == ("agrees" if off <= row.tolerance else "disagrees")


def test_every_mean_field_figure_says_how_to_read_it_and_predicts():
    for module in MODULES:
        assert module.FIGURE.how_to_read.strip(), module.FIGURE.id
        assert module.FIGURE.predictions is not no_predictions, module.FIGURE.id


def test_density_puts_the_trained_r2_plateau_beside_the_untrained_one(quick_summary):
    s = quick_summary(density)
    (row,) = _rows(density, s)
    assert (row.predicted, row.measured) == (s["r2_plateau_untrained"], s["r2_plateau_trained"])
    assert row.scale == "difference" and row.verdict() == "agrees"


def test_control_norm_puts_kappa_widths_and_linear_response_beside_their_theory(quick_summary):
    s = quick_summary(control_norm)
    kappa, *widths, response = _rows(control_norm, s)
    assert (kappa.predicted, kappa.measured) == (
        s["kappa_rayleigh"],
        s["kappa_fit_largest_lambda"],
    )
    assert kappa.predicted == KAPPA and kappa.verdict() == "agrees"  # the profile's own slope
    assert [(w.predicted, w.measured) for w in widths] == [
        (s["width90_lq_prediction"], v["width90"]) for v in s["per_lambda"].values()
    ]
    assert (response.predicted, response.measured) == (
        0.0,
        s["linear_response_max_rel_error_last_quarter"],
    )
    assert response.scale == "difference"


def test_energy_puts_the_untrained_flow_beside_the_uniform_and_two_well_states(quick_summary):
    s = quick_summary(energy)
    start, end, rise, identity = _rows(energy, s)
    assert (start.predicted, start.measured) == (s["F_uniform_theory"], s["untrained_F0"])
    assert (end.predicted, end.measured) == (s["F_two_well_theory"], s["untrained_FT"])
    assert rise.predicted == 0 and rise.measured == pytest.approx(
        s["untrained_largest_rise"] / s["untrained_decrease"]
    )
    assert (identity.predicted, identity.measured) == (
        0.0,
        s["dissipation_identity_transient_rel_error"],
    )
    assert identity.verdict() == "agrees"  # the synthetic identity is off by 5%


def test_escape_puts_saturation_slope_gramian_and_width_beside_each_case(quick_summary):
    s = quick_summary(escape)
    rows = _rows(escape, s)
    assert len(rows) == 4 * len(s["per_case"]) == 12  # --quick: three noise levels
    cases = [rows[k : k + 4] for k in range(0, len(rows), 4)]
    for (saturation, slope, gramian, width), v in zip(cases, s["per_case"].values()):
        assert (saturation.predicted, saturation.measured) == (v["saturation"], v["escape"][0])
        assert v["saturation"] == 1.0  # the synthetic untrained flow ends at <x, e_2> = 0
        assert (slope.predicted, slope.measured) == (-1.0, v["loglog_slope_largest_lambdas"])
        assert (gramian.predicted, gramian.measured) == (
            1.0,
            v["escape_times_lambda_over_gramian"],
        )
        assert (width.predicted, width.measured) == (
            v["width90_lq_prediction"],
            v["width90_largest_lambda"],
        )
        assert saturation.verdict() == slope.verdict() == gramian.verdict() == "agrees"


def test_escape_rows_of_a_run_stored_before_the_saturation_are_not_measured(quick_summary):
    s = quick_summary(escape)
    for v in s["per_case"].values():
        del v["saturation"]
    saturation = escape.FIGURE.predictions(s)[0]
    assert saturation.verdict() == "not measured"


def _threshold_summary(beta: float, ratios, r1, rates, tokens: int = 512) -> dict:
    """A threshold summary from the measurement rules (late r_1 and mode-1 rates given) and the
    theory (tau_c, the stationary branch), as the figure's compute builds it."""
    ratios, r1 = np.asarray(ratios), np.asarray(r1)
    onset = measured_transition(ratios, r1, ThresholdSetting().cluster_threshold)
    slope, zero = rate_line(ratios, np.asarray(rates))
    return {
        "tokens": tokens,
        "tau_ratios": ratios,
        "per_beta": {
            f"{beta:g}": {
                "tau_c": tau_c(beta),
                "measured_transition_ratio": onset,
                "susceptibility_tau_c_ratio": susceptibility_fit(ratios, r1**2, tokens, onset),
                "rate_zero_ratio": zero,
                "rate_slope": slope,
                "r1_uniform_start": r1,
                "r1_stationary": [
                    stationary_order_parameter(beta, f * tau_c(beta)) for f in ratios
                ],
            }
        },
    }


def test_threshold_puts_transitions_rate_and_stationary_branch_beside_the_theory():
    ratios = [0.6, 0.9, 1.1, 1.5]
    s = _threshold_summary(2.0, ratios, [0.8, 0.45, 0.06, 0.04], [0.4, 0.12, -0.08, -0.5])
    v = s["per_beta"]["2"]
    transition, susceptibility, zero, slope, *branch = _rows(threshold, s)
    assert [(r.predicted, r.measured) for r in (transition, susceptibility, zero)] == [
        (1.0, v["measured_transition_ratio"]),
        (1.0, v["susceptibility_tau_c_ratio"]),
        (1.0, v["rate_zero_ratio"]),
    ]
    assert (slope.predicted, slope.measured) == (-1.0, v["rate_slope"])
    # one row per noise level below tau_c, measured r_1 against the mean-field branch
    assert [(r.predicted, r.measured) for r in branch] == [
        (v["r1_stationary"][0], 0.8),
        (v["r1_stationary"][1], 0.45),
    ]
    assert all(r.scale == "difference" for r in branch)


@pytest.mark.slow
def test_threshold_compute_stores_the_stationary_branch_its_rows_read(tmp_path):
    setting = ThresholdSetting(
        betas=(1.0,),
        tau_ratios=(0.5, 0.8, 1.5),
        tokens=64,
        depth_units=20.0,
        dt_units=0.1,
        rate_tokens=64,
        rate_seeds=2,
        rate_window=1.0,
        rate_dt_units=0.05,
        float64=False,
    )
    cfg = threshold.FIGURE.config(setting=setting, quiet=True, out=tmp_path)
    s = threshold.FIGURE.compute(cfg, tmp_path / threshold.FIGURE.id)[1]
    v = s["per_beta"]["1"]
    branch = _rows(threshold, s)[4:]
    assert [(r.predicted, r.measured) for r in branch] == [
        (v["r1_stationary"][j], v["r1_uniform_start"][j]) for j in (0, 1)
    ]
    assert v["r1_stationary"][0] > 0.5 and v["r1_stationary"][2] == pytest.approx(0, abs=1e-6)
