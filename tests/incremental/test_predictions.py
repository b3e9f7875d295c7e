"""Predictions beside measurements of the incremental figures (issue 16): which numbers of a
summary each figure's rows pick, the verdict its declared tolerance gives, the same rows from the
stored (JSON) summary, and a how-to-read text for every figure of the wing."""

import importlib
import json
import math
import pkgutil

import numpy as np
import pytest

import figures.incremental
from figures.core.figure import Figure
from figures.incremental import (
    compare,
    compare_cross_entropy,
    dataset_size,
    full,
    head_dynamics,
    importance,
    init_scale,
    minimal,
    ode,
    timing,
)
from simulate.incremental.head_ode import plateau_levels
from simulate.incremental.markov_training import ladder_steps
from simulate.incremental.training_stages import (
    duration_ratio,
    early_stopping,
    kl_rise,
    ladder_check,
    stall_level,
)
from simulate.measure.fits import loglog_slope
from simulate.store import jsonable
from theory.incremental.heads import HeadSetting
from theory.incremental.stages import predict_stages


def _rows(figure: Figure, summary: dict) -> dict:
    """The figure's rows by quantity; the stored summary (JSON: nan as "nan", int keys as str)
    gives the very same rows, so ``store_verdicts`` agrees with the computed ones."""
    rows = figure.predictions(summary)
    stored = json.loads(json.dumps(jsonable(summary)))
    assert jsonable([p.row() for p in figure.predictions(stored)]) == jsonable(
        [p.row() for p in rows]
    )
    by_quantity = {p.quantity: p for p in rows}
    assert len(by_quantity) == len(rows), "quantities name their rows uniquely"
    return by_quantity


def _one(rows: dict, *words: str):
    """The one row whose quantity contains every word."""
    found = [p for q, p in rows.items() if all(w in q for w in words)]
    assert len(found) == 1, (words, list(rows))
    return found[0]


def _ladder_kl(steps):
    """KL (step, 3): class 1 closest before step 100, 2 until 200, 3 after; KL to A*_1 lowest at
    step 50, rising after."""
    return np.stack(
        [
            0.5 + np.abs(steps - 50) / 100,
            np.where(steps < 100, 1.2, 0.9),
            np.where(steps < 200, 2.0, 0.3),
        ],
        axis=-1,
    )


def test_every_incremental_figure_has_a_how_to_read_text():
    found = []
    for info in pkgutil.iter_modules(figures.incremental.__path__):
        module = importlib.import_module(f"figures.incremental.{info.name}")
        if isinstance(getattr(module, "FIGURE", None), Figure):
            found.append(module.FIGURE)
    assert len(found) == 9
    assert all(len(f.how_to_read.split()) >= 20 for f in found), [
        f.id for f in found if len(f.how_to_read.split()) < 20
    ]


def test_ode_rows_pick_levels_stage_times_and_the_stall():
    setting = HeadSetting(heads=2, blocks=(1, 1), window=4, m=1.7)
    levels = plateau_levels(setting)
    pred = predict_stages(setting, 1e-3)
    times = [float(p.time or math.nan) for p in pred]  # both derived at this setting
    t1_tol, law_tol = ode.stage1_tolerance(1.7), ode.STAGE_LAW_TOLERANCE
    measured_t = [times[0] * (1 + t1_tol / 2), times[1] * (1 + 2 * law_tol)]
    measured_L = [levels[1] + ode.LEVEL_TOLERANCE / 2, levels[2] + 2 * ode.LEVEL_TOLERANCE]
    summary = {
        "setting": setting.__dict__,
        "eps": 1e-3,
        "stages": [
            {
                "stage": p.stage,
                "plateau_derived": p.plateau_after,
                "plateau_measured": measured_L[i],
                "predicted_time": p.time,
                "prediction_rule": p.rule,
                "measured_time": measured_t[i],
                "measured_time_per_seed": np.array([measured_t[i]]),
                **({"closed_form_predicted_time": 3 * measured_t[0]} if i == 0 else {}),
            }
            for i, p in enumerate(pred)
        ],
        "stall_eps0": {"final_loss": levels[1] * (1 + 1e-4), "plateau_L1": levels[1]},
    }
    rows = _rows(ode.FIGURE, summary)
    assert len(rows) == 2 + 2 + 1 + 1  # levels, t_1 twice, t_2, stall
    lumped = _one(rows, "t_1", "lumped")
    assert (lumped.predicted, lumped.measured) == (times[0], measured_t[0])
    assert lumped.tolerance == 0.05 and lumped.verdict() == "agrees"
    closed = _one(rows, "t_1", "closed form")
    assert closed.predicted == 3 * measured_t[0] and closed.verdict() == "disagrees"  # 3x late
    t2 = _one(rows, "t_2")
    assert (t2.predicted, t2.measured, t2.verdict()) == (times[1], measured_t[1], "disagrees")
    L1, L2 = _one(rows, "L_1, plateau"), _one(rows, "L_2, plateau")
    assert (L1.predicted, L1.measured, L1.verdict()) == (levels[1], measured_L[0], "agrees")
    assert (L2.predicted, L2.scale, L2.verdict()) == (0.0, "difference", "disagrees")
    stall = _one(rows, "eps = 0")
    assert (stall.predicted, stall.verdict()) == (levels[1], "agrees")
    # at m = 1.3 the dropped blocks nearly match the lead block: the claim is looser
    summary["setting"] = {**setting.__dict__, "m": 1.3}
    assert _one(_rows(ode.FIGURE, summary), "t_1", "lumped").tolerance == 0.16


def test_timing_rows_are_the_smallest_eps_the_end_m_and_the_training_axes():
    ms, epss, metrics = (1.3, 1.5, 2.0), (1e-3, 1e-9), ("replicator", "logit")
    rows = [
        {"metric": mt, "m": m, "eps": e, "stage": k, "predicted": 10.0 * k, "measured": 11.0 * k}
        for mt in metrics
        for m in ms
        for e in epss
        for k in (1, 2)
    ]
    slopes = [
        {"metric": mt, "m": m, "fitted_sqrt_slope": 0.5, "derived_asymptotic_sqrt_slope": 0.52}
        for mt in metrics
        for m in ms
    ]
    qs, train_ms = (1e-3, 1e-7, 1e-9), (1.5, 1.7)
    train_rows = [
        {"q": q, "m": m, "stage": k, "predicted_step": 100.0 * k, "measured_step": 180.0 * k}
        for q in qs
        for m in train_ms
        for k in (1, 2)
    ]
    for r in train_rows:
        if r["stage"] == 2:
            r.update({"predicted_duration_steps": 100.0, "measured_duration_steps": 90.0})
    split_rows = [
        {"q": q, "m": m, "first_order_split": 170.0, "measured_split": 180.0}
        for q in qs
        for m in train_ms
    ]
    summary = {
        "grid": {"m": list(ms), "eps": list(epss)},
        "rows": rows,
        "sqrt_slopes": slopes,
        "training": {
            "calibration_point": {"q": 1e-9, "m": 1.7},
            "rows": train_rows,
            "split_rows": split_rows,
        },
    }
    got = _rows(timing.FIGURE, summary)
    ode_rows = [p for q, p in got.items() if "ODE time" in q]
    # two metrics x the end m (1.3, 2.0) x stages 1, 2, at eps = 1e-9 only
    assert len(ode_rows) == 8 and all("eps = 1e-09" in p.quantity for p in ode_rows)
    assert not any("m = 1.5" in q for q in got if "training" not in q)
    t1 = _one(got, "t_1 (ODE time)", "logit", "m = 1.3")
    assert (t1.predicted, t1.measured, t1.tolerance) == (10.0, 11.0, 0.16)
    assert t1.verdict() == "agrees"  # 10% off, 16% allowed at m = 1.3
    assert _one(got, "t_1 (ODE time)", "logit", "m = 2").verdict() == "disagrees"  # 5% allowed
    slope = _one(got, "sqrt", "replicator", "m = 2")
    assert (slope.predicted, slope.measured, slope.verdict()) == (0.52, 0.5, "agrees")
    # training: nothing is fitted, so every point: the split, two boundaries, one duration
    train = {q: p for q, p in got.items() if "training" in q}
    assert len(train) == 3 * 2 * (1 + 2 + 1)
    assert any("q = 1e-09, m = 1.7" in q for q in train)
    boundary = _one(got, "training stage 2 boundary", "q = 0.001, m = 1.7")
    assert (boundary.predicted, boundary.measured) == (200.0, 360.0)
    assert boundary.verdict() == "disagrees"  # measured 1.8x the prediction, 25% allowed
    duration = _one(got, "training stage 2 duration", "q = 1e-09, m = 1.5")
    assert (duration.predicted, duration.measured, duration.verdict()) == (100.0, 90.0, "agrees")
    split = _one(got, "training heads split", "q = 1e-07, m = 1.7")
    assert (split.predicted, split.measured, split.tolerance) == (170.0, 180.0, 0.25)


def test_timing_rows_put_the_apriori_and_sequential_times_beside_the_loss_midpoints():
    rows = [
        {
            "metric": "replicator",
            "m": m,
            "eps": e,
            "stage": k,
            "predicted": 10.0 * k,
            "measured": 11.0 * k,
            "measured_midpoint": 12.0 * k,
            "apriori": 11.5 * k,
            "own_start": 12.0 * k,
            "sequential": 10.0 * k,
        }
        for m in (1.5, 2.0)
        for e in (1e-3, 1e-9)
        for k in (1, 2, 3)
    ]
    rules = {"apriori": "A", "own_start": "O", "sequential": "S", "measured": "M"}
    summary = {
        "grid": {"m": [1.5, 2.0], "eps": [1e-3, 1e-9]},
        "rows": rows,
        "sqrt_slopes": [],
        "later_stage_rules": rules,
    }
    got = _rows(timing.FIGURE, summary)
    later = {q: p for q, p in got.items() if "a-priori" in q or "sequential" in q}
    # stages 2 and 3, both end m, the smallest eps, two predictors
    assert len(later) == 2 * 2 * 2 and all("eps = 1e-09" in q for q in later)
    prior = _one(got, "t_3 (ODE time)", "m = 2", "a-priori")
    assert (prior.predicted, prior.measured, prior.tolerance) == (34.5, 36.0, 0.1)
    assert prior.verdict() == "agrees"  # 4% off
    assert _one(got, "t_2 (ODE time)", "m = 1.5", "sequential").verdict() == "disagrees"  # 20%
    assert "A" in prior.rule and "M" in prior.rule


def test_minimal_rows_check_the_ladder_and_the_bayes_loss():
    steps = np.arange(0.0, 301.0, 10.0)
    kl = _ladder_kl(steps)
    kl[3, 1] = 0.0  # one stage-1 step closest to A*_{1:2}
    bounds = [5.0, *ladder_steps(steps, kl)]
    summary = {
        "ladder_check": ladder_check(steps, kl, bounds),
        "bayes_loss": 0.60,
        "final_val_loss": 0.63,
    }
    rows = _rows(minimal.FIGURE, summary)
    stage1 = _one(rows, "of stage 1")
    assert (stage1.predicted, stage1.measured) == (1.0, 8 / 9)
    assert stage1.verdict() == "disagrees"  # the ladder claims every logged step
    assert _one(rows, "of stage 2").verdict() == "agrees"
    assert _one(rows, "rises").measured == 1.0
    bayes = _one(rows, "Bayes")
    assert (bayes.predicted, bayes.measured, bayes.verdict()) == (0.60, 0.63, "agrees")


def test_full_rows_are_the_kl_rise_and_the_authors_boundaries_at_the_paper_setting():
    steps = np.arange(6.0)
    summary = {
        **kl_rise(steps, np.array([3.0, 1.0, 0.8, 1.2, 1.5, 2.0])),
        "baseline_ladder_steps": [70.0, 600.0],
    }
    rows = _rows(full.FIGURE, summary)
    assert len(rows) == 1 and _one(rows, "rises").verdict() == "agrees"
    rows = _rows(full.FIGURE, {**summary, "reference_boundaries": list(full.REFERENCE_BOUNDARIES)})
    stage2, stage3 = _one(rows, "stage 2"), _one(rows, "stage 3")
    assert (stage2.predicted, stage2.measured, stage2.verdict()) == (65.0, 70.0, "agrees")
    assert (stage3.predicted, stage3.measured, stage3.verdict()) == (450.0, 600.0, "disagrees")


def test_init_scale_rows_are_the_equal_heads_and_their_stall():
    steps, loss = np.arange(0.0, 60.0, 10.0), np.array([4.0, 2.0, 1.7, 1.6, 1.0, 0.8])
    stall = stall_level(steps, loss, 40.0)
    summary = {
        "stall_level": stall,
        "stall_from": "q=1e-09",
        "symmetric": {"max_head_asymmetry": 0.0, "final_val_loss": stall + 0.02},
    }
    rows = _rows(init_scale.FIGURE, summary)
    equal = _one(rows, "asymmetry")
    assert (equal.predicted, equal.measured, equal.verdict()) == (0.0, 0.0, "agrees")
    level = _one(rows, "stall")
    assert (level.predicted, level.measured, level.verdict()) == (1.6, stall + 0.02, "agrees")
    summary["symmetric"]["max_head_asymmetry"] = 1e-30
    assert _one(_rows(init_scale.FIGURE, summary), "asymmetry").verdict() == "disagrees"
    assert _rows(init_scale.FIGURE, {"stall_level": stall, "stall_from": "q=1e-09"}) == {}


def test_importance_row_is_the_stage1_slope_in_m():
    ms = np.array([1.0, 1.3, 1.5, 1.7])
    summary = {"predicted_slope": -2, "fitted_slope": loglog_slope(ms, 40 * ms**-1.2)}
    slope = _one(_rows(importance.FIGURE, summary), "d ln t_1 / d ln m")
    assert slope.predicted == -2 and slope.measured == pytest.approx(-1.2)
    assert slope.verdict() == "agrees"  # 0.6 of the predicted slope, 50% allowed


def test_dataset_size_rows_are_the_stages_at_early_stopping():
    steps = np.array([0.0, 10, 20, 30])
    contexts = np.array([4, 8, 12])
    small = early_stopping(
        steps,
        np.array([3.0, 1.0, 0.8, 0.9]),
        np.array([[1, 1, 1], [0.2, 0.5, 0.6], [0.3, 0.1, 0.4], [0.9, 0.6, 0.3]]),
        contexts,
    )
    online = early_stopping(
        steps,
        np.array([3.0, 1.0, 0.8, 0.7]),
        np.array([[1, 1, 1], [0.2, 0.5, 0.6], [0.3, 0.1, 0.4], [0.9, 0.6, 0.3]]),
        contexts,
    )
    summary = {
        "setting": {"blocks": [4, 4, 4]},
        "per_size": [{"size": "n=300", **small}, {"size": "online", **online}],
        "check": {
            "smallest_size": "n=300",
            "largest_or_online": "online",
            "fewer_stages_with_smallest_n": small["stage_at_best"] < online["stage_at_best"],
            "stage_nondecreasing_in_n": True,
        },
    }
    rows = _rows(dataset_size.FIGURE, summary)
    every = _one(rows, "stage at the early-stopping step", "online")
    assert (every.predicted, every.measured, every.verdict()) == (3, 3, "agrees")
    assert _one(rows, "fewer stages").measured == 1.0
    assert _one(rows, "non-decreasing").verdict() == "agrees"


def test_head_dynamics_rows_are_the_block_masses_at_the_last_step():
    trained = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.0, 0.3, 0.7]])
    predicted = np.array([[0.95, 0.05, 0.0], [0.1, 0.85, 0.05], [0.0, 0.0, 1.0]])
    summary = {
        "final_block_mass": trained,
        "ode_block_mass_at_last_step": predicted,
        "heads_split_step": 450.0,
        "heads_split_step_predicted": 400.0,
    }
    rows = _rows(head_dynamics.FIGURE, summary)
    assert len(rows) == 10
    last = _one(rows, "head 3 on block 3")
    assert (last.predicted, last.measured, last.verdict()) == (1.0, 0.7, "disagrees")
    assert _one(rows, "head 2 on block 2").verdict() == "agrees"
    split = _one(rows, "heads split")
    assert (split.predicted, split.measured, split.verdict()) == (400.0, 450.0, "agrees")
    summary["heads_split_step_predicted"] = 300.0  # measured 1.5x the prediction
    assert _one(_rows(head_dynamics.FIGURE, summary), "heads split").verdict() == "disagrees"
    # past the ODE's horizon, or in a run stored before the keys, the prediction is missing
    summary["ode_block_mass_at_last_step"] = np.full((3, 3), np.nan)
    summary["heads_split_step_predicted"] = float("nan")
    for stored in (summary, {"final_block_mass": trained}):
        rows = _rows(head_dynamics.FIGURE, stored)
        assert len(rows) == 10 and {p.verdict() for p in rows.values()} == {"not measured"}


def _regression_part(starts_measured: list[float]) -> dict:
    starts = [6.4, 152.0, 482.0]
    return {
        "config": {"D": 16},
        "measured_per_seed": [starts_measured, starts_measured],
        "rows": [
            {
                "stage": k + 1,
                "level_predicted": level,
                "level_measured": level + 0.1,
                "start_predicted": starts[k],
                "start_measured": starts_measured[k],
            }
            for k, level in enumerate((15.56, 4.0, 0.0))
        ],
    }


def test_compare_rows_are_levels_and_starts_of_both_regressions_and_the_cross_entropy_table():
    measured_starts = [6.5, 153.0, 483.0]
    predicted = {"replicator": [1.0, 90.0, 364.0], "logit": [1.0, 185.0, 270.0]}
    ce_starts = [10.0, 288.0, 434.0]
    ce_rows = [
        {
            "stage": k + 1,
            "block": k + 1,
            "level_predicted": level,
            "level_measured": level + 0.02,
            **{f"duration_ratio_{m}": duration_ratio(predicted[m], k) for m in predicted},
            "duration_ratio_measured": duration_ratio(ce_starts, k),
        }
        for k, level in enumerate((0.91, 0.70, 0.61))
    ]
    summary = {
        "regression_positional": _regression_part(measured_starts),
        "regression_full": _regression_part([1.5, 205.0, 433.0]),
        "cross_entropy": {"classes_visited": [1, 2], "rows": ce_rows},
    }
    rows = _rows(compare.FIGURE, summary)
    assert len(rows) == 2 * 6 + 3 * 2 + 2 * 2
    start = _one(rows, "stage 2 start", "positional")
    assert (start.predicted, start.measured, start.verdict()) == (152.0, 153.0, "agrees")
    assert _one(rows, "stage 1 start", "full").verdict() == "disagrees"  # 0.23 of predicted
    level = _one(rows, "L_3", "positional")
    assert (level.predicted, level.measured, level.scale) == (0.0, 0.1, "difference")
    assert level.tolerance == pytest.approx(0.16) and level.verdict() == "agrees"
    order = _one(rows, "stage 3: block learned")
    assert order.predicted == 3 and math.isnan(order.measured)  # class 3 never visited
    assert order.verdict() == "not measured"
    ratio = _one(rows, "(t_2 - t_1) / t_1", "replicator")
    assert (ratio.predicted, ratio.measured) == (89.0, 27.8)
    assert ratio.verdict() == "disagrees"


def test_cross_entropy_rows_put_the_first_order_split_beside_the_measured_one():
    """The first-order split of the run (its tangent along the twin) is added after the run: its
    rate over the measured window and its split step become two rows beside the run's."""
    from simulate.incremental.tangent_split import TangentSplit

    steps = np.arange(10.0, 460.0, 10.0)
    first = TangentSplit(steps, 1e-12 * np.exp(0.06 * steps), 440.0)
    row = {"block": 1, "level_predicted": 1.0, "level_measured": 1.0}
    ratios = {f"duration_ratio_{m}": 1.0 for m in ("replicator", "logit", "measured")}
    part = {
        "classes_visited": [1, 2, 3],
        "rows": [
            {**row, **ratios, "stage": k, "start_measured": t}
            for k, t in ((1, 20.0), (2, 500.0), (3, 760.0))
        ],
        "heads_split_step": 450.0,
        "splitting": {"window": [234.0, 400.0], "rate_predicted": 0.0686, "rate_measured": 0.0588},
        "predicted_ode_starts": {
            "replicator": [10.0, 200.0, 400.0],
            "logit": [10.0, 1000.0, 1500.0],
        },
        "ode_split_times": {"replicator": 176.0, "logit": 880.0},
    }
    part = compare_cross_entropy.with_first_order(part, first)
    # the derived map: 440 / 176 = 2.5 and 440 / 880 = 0.5 steps per ODE time
    assert part["splitting"]["steps_per_ode_time_derived"] == {"replicator": 2.5, "logit": 0.5}
    assert part["splitting"]["rate_first_order"] == pytest.approx(0.06)
    rows = {p.quantity: p for p in compare_cross_entropy.predictions(part)}
    split = _one(rows, "heads split (step), first order")
    assert (split.predicted, split.measured, split.verdict()) == (440.0, 450.0, "agrees")
    rate = _one(rows, "rate on the stage-1 plateau, first order")
    assert rate.predicted == pytest.approx(0.06) and rate.measured == 0.0588
    # durations in steps: ODE durations x the map, against the measured starts' differences
    logit = _one(rows, "stage 2 duration", "derived time map (logit)")
    assert (logit.predicted, logit.measured, logit.verdict()) == (495.0, 480.0, "agrees")
    late = _one(rows, "stage 3 duration", "derived time map (replicator)")
    assert (late.predicted, late.measured, late.verdict()) == (500.0, 260.0, "disagrees")
    # a run without a measured window (no split): the first-order rate is not read
    part = {**part, "splitting": {**part["splitting"], "window": [234.0, float("nan")]}}
    assert np.isnan(
        compare_cross_entropy.with_first_order(part, first)["splitting"]["rate_first_order"]
    )
