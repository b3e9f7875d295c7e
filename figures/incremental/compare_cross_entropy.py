"""Predicted against measured stages for cross-entropy training on the Markov chain with AdamW (spec
incremental.md §5.8, §7; issue 4 item 5).

AdamW has no exact time map to the reduced flow, so this comparison is of orders, levels, ratios,
rates and durations through a derived map:
- order: the ladder of ``theory.incremental.heads.HeadSystem.ladder`` (blocks by importance)
  against the order in which the trained model's closest learned c-gram baseline (in KL) moves
  through the classes (the truncated teachers drop the weaker blocks instead of marginalising
  them and are poor yardsticks at small d, spec §2.3);
- levels: stage k's plateau is the best loss of class k (``H_k`` uses lags I(1..k)): the learned
  c_k-gram baseline's validation loss for k < h, the true teacher's (the Bayes loss) for k = h; set
  beside the measured plateau of the training curve;
- durations: (t_k - t_{k-1}) / t_1 for k >= 2 of the reduced system, integrated from the network's
  mapped initial positional logits under both metrics, against the same ratio of measured stage
  starts;
- the head-splitting rate on the stage-1 plateau: AdamW linearised at the plateau of the run's
  exactly symmetric twin (``simulate.incremental.plateau_splitting``) against the log-slope of the
  run's head asymmetry (issue 17 item 4);
- the heads' split step and rate to first order in the init scale, the run's own initial head
  differences carried along the twin by the training step's tangent map
  (``simulate.incremental.tangent_split``), against the run's split and rate;
- durations in steps: the reduced system's stage durations times the steps per ODE time the
  first-order split derives (its step over the reduced system's split time; issue 17 item 4),
  against the measured ones;
- the stage-1 start: AdamW on the expected moments of its minibatch gradients
  (``simulate.incremental.adam_moments``: the mean in the first, mean^2 + variance / batch in the
  second), from the run's own initial parameters, against the run's.
Stage k starts when the validation loss falls below the midpoint of the class-(k-1) and class-k
levels (class 0: uniform prediction, ln d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xarray as xr

from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.incremental import markov_training
from simulate.incremental.adam_moments import RULE as STAGE_ONE_RULE
from simulate.incremental.head_ode import plateau_levels, solve
from simulate.incremental.markov_reduction import mapped_logits, ode_split_times, reduced_setting
from simulate.incremental.markov_training import (
    LADDER_RULE,
    STAGE_RULE,
    MarkovTrainConfig,
    ladder_steps,
)
from simulate.incremental.plateau_splitting import (
    MEASURED_RATE_RULE,
    RATE_RULE,
    SPLIT_MARGIN,
    measured_rate,
    splitting_rates,
)
from simulate.incremental.tangent_split import TANGENT_SPLIT_RULE, TangentSplit
from simulate.incremental.training_stages import TIME_MAP_RULE, duration_ratio
from simulate.measure.stages import measured_plateaus
from simulate.runner import RunOutput
from simulate.store import load, read_summary
from theory.incremental.heads import head_system
from theory.incremental.setting import METRICS

CAVEAT = (
    "AdamW: no exact time map to the reduced flow; orders, plateau levels and ratios of stage "
    "durations are compared with it, the head-splitting rate with AdamW linearised at the "
    "plateau and to first order in q, and the durations in steps through the time map the "
    "first-order split derives"
)


def markov_config(quick: bool, seed: int) -> MarkovTrainConfig:
    """The paper's online minimal run (Figs. 6-7; q = 1e-9, W_V = 0, 512 fresh sequences per step);
    quick: d = 20, 256 sequences per step, 1000 steps."""
    cfg = MarkovTrainConfig(seed=seed)
    if quick:
        cfg = replace(cfg, vocab=20, batch=256, validation=256, steps=1000)
    return cfg


@dataclass(frozen=True)
class ReducedPrediction:
    """The reduced system of ``cfg``'s task from the network's mapped initial logits, one
    metric: its loss-midpoint crossing times and its loss on the save grid."""

    crossings: np.ndarray
    ts: np.ndarray
    loss: np.ndarray
    split_time: float
    """the heads' split (``markov_reduction.ODE_SPLIT_RULE``), ODE time."""


def reduced_predictions(cfg: MarkovTrainConfig) -> dict[str, ReducedPrediction]:
    """``ReducedPrediction`` under each metric; it needs ``cfg`` only, not the trained run."""
    theta0 = mapped_logits(cfg)[None]
    out = {}
    for metric in METRICS:
        setting = reduced_setting(cfg, metric)
        t_max = 2e3 if metric == "replicator" else 2e5
        ode = solve(
            setting,
            [0.0],
            [cfg.seed],
            t_max=t_max,
            n_save=600,
            theta0=theta0,
            levels=plateau_levels(setting),
        )
        split = float(ode_split_times(setting, ode.ts, ode.s)[0, 0])
        out[metric] = ReducedPrediction(ode.crossings[0], ode.ts, ode.loss[0], split)
    return out


def compare(
    out: Path,
    cfg: MarkovTrainConfig,
    quiet: bool,
    baselines: tuple[Path, ...],
    reduced: dict[str, ReducedPrediction],
    stage_one: dict,
) -> tuple[xr.Dataset, dict]:
    """Train the student of ``cfg`` (``markov_config``) against its trained ``baselines``
    (``markov_training.baseline_jobs``) and compare it with the ``reduced`` system
    (``reduced_predictions``) and with stage 1 from AdamW's expected moments
    (``adam_moments.predicted_stage_one``, which needs only the first baseline)."""
    cfg = replace(cfg, baselines=baselines)
    path = markov_training.run(cfg, RunOutput(out=out / "student", quiet=quiet))
    ds, _ = load(path)
    summary_run = read_summary(path)
    levels = np.asarray(summary_run["class_levels"], float)
    measured = np.asarray(summary_run["stage_start_per_seed"][0], float)
    run = ds.isel(seed=0)
    steps = run["step"].values.astype(float)
    loss = run["val_loss"].values
    plateaus = measured_plateaus(steps, loss, measured)
    closest = np.argmin(run["kl_baseline"].values, axis=-1) + 1
    visited = [int(c) for i, c in enumerate(closest) if i == 0 or c != closest[i - 1]]
    ladder = ladder_steps(steps, run["kl_baseline"].values)
    splitting = splitting_summary(
        cfg, steps, run["head_asymmetry"].values, measured[0], summary_run
    )
    predicted = {m: reduced[m].crossings for m in METRICS}
    order_pred = [j + 1 for j in head_system(reduced_setting(cfg, "logit")).ladder()]
    rows = []
    K = len(levels) - 1
    for k in range(K):
        rows.append(
            {
                "stage": k + 1,
                "block": order_pred[k],
                "level_teacher": summary_run["yardstick_losses"][f"A*_1:{k + 1}"],
                "level_predicted": float(levels[k + 1]),
                "level_measured": plateaus[k],
                "start_measured": float(measured[k]),
                "start_expected_moments": stage_one["start"] if k == 0 else float("nan"),
                "ladder_step": float(ladder[k - 1]) if k >= 1 else float("nan"),
                **{f"duration_ratio_{m}": duration_ratio(predicted[m], k) for m in METRICS},
                "duration_ratio_measured": duration_ratio(measured, k),
            }
        )
    data = xr.Dataset(
        {
            "ce_val_loss": (("ce_step",), loss),
            "ce_kl_yardstick": (("ce_step", "yardstick"), run["kl_yardstick"].values),
            "ce_kl_baseline": (("ce_step", "baseline"), run["kl_baseline"].values),
            "ce_head_asymmetry": (("ce_step",), run["head_asymmetry"].values),
            **{f"ce_ode_loss_{m}": ((f"ce_time_{m}",), reduced[m].loss) for m in METRICS},
            "ce_expected_moment_loss": (("ce_em_step",), np.asarray(stage_one["losses"])),
        },
        coords={
            "ce_step": steps,
            "ce_em_step": np.arange(len(stage_one["losses"]), dtype=float),
            "yardstick": run["yardstick"].values,
            "baseline": run["baseline"].values,
            **{f"ce_time_{m}": reduced[m].ts for m in METRICS},
        },
    )
    summary = {
        "caveat": CAVEAT,
        "stage_rule": STAGE_RULE,
        "ladder_rule": LADDER_RULE + " (applied to the learned c-gram baselines)",
        "rows": rows,
        "levels": levels.tolist(),
        "order_predicted": order_pred,
        "classes_visited": visited,
        "predicted_ode_starts": {m: predicted[m].tolist() for m in METRICS},
        "ode_split_times": {m: reduced[m].split_time for m in METRICS},
        "splitting": splitting,
        "stage_one_expected_moments": {k: stage_one[k] for k in ("rule", "midpoint", "start")},
        "heads_split_step": float(summary_run["heads_split_step_per_seed"][0]),
        "bayes_loss": summary_run["bayes_loss"],
        "final_val_loss": float(loss[-1]),
        "run": str(path),
        "baselines": [str(b) for b in baselines],
    }
    return data, summary


def splitting_summary(
    cfg: MarkovTrainConfig, steps, asymmetry, t_1: float, summary_run: dict
) -> dict:
    """AdamW's head-splitting rate: measured (``MEASURED_RATE_RULE``) and predicted
    (``RATE_RULE``) at the middle of the measured window; nan where the run has no window."""
    t_split = float(summary_run["heads_split_step_per_seed"][0])
    slope, window = measured_rate(steps, asymmetry, t_1, t_split)
    out = {"rule": RATE_RULE, "measured_rule": MEASURED_RATE_RULE, "window": window}
    if not math.isfinite(slope):
        return {**out, "rate_predicted": float("nan"), "rate_measured": slope}
    at = splitting_rates(cfg, [round(0.5 * sum(window))])[0]
    return {
        **out,
        "step": at.step,
        "eigenvalue": at.eigenvalue,
        "mu": at.mu,
        "rate_predicted": at.rate,
        "rate_measured": slope,
        "e_fold_steps_predicted": 1 / at.rate,
        "e_fold_steps_measured": 1 / slope,
    }


def with_first_order(part: dict, first: TangentSplit) -> dict:
    """``compare``'s summary with the first-order split of its run added to its splitting part:
    the split step beside the run's, the first-order rate over the measured window, and each
    stage's duration in steps by the derived time map (``TIME_MAP_RULE``, per metric) beside the
    measured one."""
    split = dict(part["splitting"])
    window = split["window"]
    scale = {m: first.split / float(part["ode_split_times"][m]) for m in METRICS}
    split.update(
        first_order_rule=TANGENT_SPLIT_RULE,
        split_first_order=first.split,
        split_measured=part["heads_split_step"],
        rate_first_order=first.rate(*window) if math.isfinite(window[1]) else float("nan"),
        steps_per_ode_time_derived=scale,
        time_map_rule=TIME_MAP_RULE,
    )
    starts = {m: np.asarray(part["predicted_ode_starts"][m], float) for m in METRICS}
    rows = []
    for r in part["rows"]:
        k = r["stage"] - 1
        if k >= 1:
            r = {
                **r,
                **{
                    f"duration_steps_{m}": float((starts[m][k] - starts[m][k - 1]) * scale[m])
                    for m in METRICS
                },
                "duration_steps_measured": r["start_measured"]
                - part["rows"][k - 1]["start_measured"],
            }
        rows.append(r)
    return {**part, "rows": rows, "splitting": split}


RATE_TOLERANCE = 0.25
"""relative: issue 17's target for AdamW stage durations (a duration's q-dependent part is
ln(1/q) / r)."""
LEVEL_TOLERANCE = 0.05
"""nats: the resolution issue 4 asks of a loss level (final loss within 0.05 nats of Bayes)."""
DURATION_TOLERANCE = 0.5
"""relative: one time factor would leave (t_k - t_{k-1}) / t_1 unchanged, but AdamW is no time
rescaling of the flow (spec §7: trends only), so 50%."""


def predictions(part: dict) -> list[Prediction]:
    """Per stage: the block learned (the ladder's order against the classes the closest learned
    baseline visits), the plateau level, and the duration ratios under both metrics."""
    visited = part["classes_visited"]
    rows = []
    for r in part["rows"]:
        k = r["stage"]
        rows += [
            Prediction(
                f"cross-entropy stage {k}: block learned (class visited by the closest learned "
                "baseline)",
                r["block"],
                visited[k - 1] if k <= len(visited) else float("nan"),
                0.0,
                f"{LADDER_RULE}; the ladder of the reduced system orders the blocks",
                "difference",
            ),
            Prediction(
                f"cross-entropy stage {k}: plateau level (nats) against the class-{k} best loss",
                r["level_predicted"],
                r["level_measured"],
                LEVEL_TOLERANCE,
                f"{STAGE_RULE}; the plateau is read where the loss is flattest; 0.05 nats",
                "difference",
            ),
        ]
        if k >= 2:
            rows += [
                Prediction(
                    f"cross-entropy (t_{k} - t_{k - 1}) / t_1, reduced system ({metric})",
                    r[f"duration_ratio_{metric}"],
                    r["duration_ratio_measured"],
                    DURATION_TOLERANCE,
                    f"{CAVEAT}; reduced system from the network's mapped initial logits; 50%",
                )
                for metric in METRICS
            ]
        if "duration_steps_measured" in r:
            rows += [
                Prediction(
                    f"cross-entropy stage {k} duration t_{k} - t_{k - 1} (steps), derived time "
                    f"map ({metric})",
                    r[f"duration_steps_{metric}"],
                    r["duration_steps_measured"],
                    RATE_TOLERANCE,
                    f"{STAGE_RULE}; reduced system from the network's mapped initial logits x "
                    f"{TIME_MAP_RULE}; 25%, the issue's target for durations",
                )
                for metric in METRICS
            ]
    first = part["rows"][0]
    if math.isfinite(first.get("start_expected_moments", float("nan"))):
        rows.append(
            Prediction(
                "AdamW stage-1 start (step), expected moments",
                first["start_expected_moments"],
                first["start_measured"],
                RATE_TOLERANCE,
                f"{STAGE_ONE_RULE}; measured: {STAGE_RULE}; 25%, the issue's target for durations",
            )
        )
    split = part.get("splitting")
    if split is not None:
        rows.append(
            Prediction(
                "AdamW head-splitting rate on the stage-1 plateau (per step)",
                float(split["rate_predicted"]),
                float(split["rate_measured"]),
                RATE_TOLERANCE,
                f"{RATE_RULE}; {MEASURED_RATE_RULE}; 25%, the issue's target for durations",
            )
        )
    if split is not None and "split_first_order" in split:
        rows += [
            Prediction(
                "AdamW head-splitting rate on the stage-1 plateau, first order (per step)",
                float(split["rate_first_order"]),
                float(split["rate_measured"]),
                RATE_TOLERANCE,
                f"{split['first_order_rule']}: least-squares slope of ln(first-order split) over "
                f"the measured window; {MEASURED_RATE_RULE}; 25%",
            ),
            Prediction(
                "AdamW heads split (step), first order",
                float(split["split_first_order"]),
                float(split["split_measured"]),
                RATE_TOLERANCE,
                f"{split['first_order_rule']}; measured: the same rule on the run's block masses; "
                "25%, the issue's target for durations",
            ),
        ]
    return rows


def report(part: dict) -> str:
    head = (
        f"Cross-entropy, Markov chain, AdamW ({part['caveat']}).\n"
        f"order: predicted blocks {part['order_predicted']}, classes visited by the closest "
        f"learned baseline {part['classes_visited']}; final validation loss "
        f"{part['final_val_loss']:.4f} (Bayes {part['bayes_loss']:.4f})"
    )
    table = format_table(
        [
            "stage",
            "block",
            "level A*_1:k",
            "level class-k best",
            "level meas",
            "start meas (step)",
            "KL ladder step",
            "dur. ratio repl.",
            "dur. ratio logit",
            "dur. ratio meas",
        ],
        [
            [
                r["stage"],
                r["block"],
                r["level_teacher"],
                r["level_predicted"],
                r["level_measured"],
                r["start_measured"],
                r["ladder_step"],
                r["duration_ratio_replicator"],
                r["duration_ratio_logit"],
                r["duration_ratio_measured"],
            ]
            for r in part["rows"]
        ],
    )
    first = part["rows"][0]
    if math.isfinite(first.get("start_expected_moments", float("nan"))):
        table += (
            f"\nstage 1 from AdamW's expected moments (minibatch noise in the second moment): "
            f"step {first['start_expected_moments']:.1f}, measured {first['start_measured']:.1f}"
        )
    split = part.get("splitting")
    if split is not None and math.isfinite(float(split["rate_predicted"])):
        table += (
            f"\nhead splitting under AdamW (steps {split['window'][0]:.0f}-"
            f"{split['window'][1]:.0f}): predicted {split['rate_predicted']:.4f} per step "
            f"(linearised AdamW at step {split['step']} of the symmetric twin, mu = "
            f"{split['mu']:.4f}), measured {split['rate_measured']:.4f}; the plateau's length "
            f"grows by 1/r = {split['e_fold_steps_predicted']:.1f} steps per e-fold of 1/q"
        )
    if split is not None and "split_first_order" in split:
        table += (
            f"\nto first order in q (the run's initial head differences carried along the twin by "
            f"the training step's tangent map): rate {split['rate_first_order']:.4f} per step over "
            f"the same window, heads split at step {split['split_first_order']:.0f} (measured "
            f"{split['split_measured']:.0f})"
        )
    if split is not None and "steps_per_ode_time_derived" in split:
        scale = split["steps_per_ode_time_derived"]
        table += (
            "\nstage durations in steps by the derived time map ("
            + ", ".join(f"{m}: {float(scale[m]):.4g} steps per ODE time" for m in METRICS)
            + "; first-order split over the reduced system's split):\n"
            + format_table(
                ["stage", "measured", "replicator", "logit"],
                [
                    [
                        r["stage"],
                        r["duration_steps_measured"],
                        r["duration_steps_replicator"],
                        r["duration_steps_logit"],
                    ]
                    for r in part["rows"]
                    if "duration_steps_measured" in r
                ],
            )
        )
    return head + "\n" + table


def plot_row(axes, data: xr.Dataset, part: dict):
    steps = data["ce_step"].values
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    starts = [r["start_measured"] for r in part["rows"]]
    ax = axes[0]
    ax.plot(steps, data["ce_val_loss"].values, color="k", label="validation loss")
    if "ce_expected_moment_loss" in data:
        ax.plot(
            data["ce_em_step"].values,
            data["ce_expected_moment_loss"].values,
            color="tab:purple",
            ls="--",
            label="stage 1, AdamW's expected moments",
        )
    ax.axhline(part["levels"][0], color="grey", ls=":", lw=1, label="ln d")
    for k, level in enumerate(part["levels"][1:-1]):
        ax.axhline(
            level,
            color=colors[k % 4],
            ls=":",
            lw=1,
            label=f"class {k + 1}: learned {data['baseline'].values[k]}-gram",
        )
    ax.axhline(
        part["bayes_loss"],
        color=colors[(len(part["levels"]) - 2) % 4],
        ls="--",
        lw=0.8,
        label="class h: Bayes loss",
    )
    ax.set(
        xlabel="step",
        ylabel="loss (nats)",
        title="cross-entropy (AdamW): loss, class levels, stage starts",
    )
    for ax_ in axes[:3]:
        for k, s in enumerate(starts):
            if np.isfinite(s):
                ax_.axvline(s, color=colors[k % 4], lw=0.8)
    ax.legend(fontsize=7)
    for ax, name, label in (
        (axes[1], "ce_kl_yardstick", "A*_{{1:{}}}"),
        (axes[2], "ce_kl_baseline", "{}-gram"),
    ):
        coord = data[name].dims[-1]
        for i, c in enumerate(data[coord].values):
            ax.plot(
                steps,
                data[name].values[:, i],
                color=colors[i % 4],
                label=f"KL(${label.format(c)}$ || model)"
                if "A*" in label
                else f"KL({label.format(c)} || model)",
            )
        ax.set(
            yscale="log",
            xlabel="step",
            ylabel="KL (nats)",
            title="KL to truncated teachers"
            if coord == "yardstick"
            else "KL to learned c-gram baselines",
        )
        ax.legend(fontsize=7)
    ax = axes[3]
    marks = {"replicator": "s", "logit": "^", "measured": "o"}
    for m in [*METRICS, "measured"]:
        r = [row[f"duration_ratio_{m}"] for row in part["rows"]][1:]
        ax.plot(
            range(2, len(r) + 2),
            r,
            marker=marks[m],
            ls="-" if m == "measured" else "--",
            label="training" if m == "measured" else f"reduced ODE ({m})",
        )
    ax.set(
        yscale="log",
        xlabel="stage k",
        ylabel="$(t_k - t_{k-1}) / t_1$",
        title="ratios of stage durations",
        xticks=range(2, len(part["rows"]) + 1),
    )
    ax.legend(fontsize=7)
    _splitting_panel(axes[4], data, part.get("splitting"))


def _splitting_panel(ax, data: xr.Dataset, split: dict | None):
    """ln of the head asymmetry against the step, with the predicted growth e^(r t) anchored at
    the first logged step of the measured window."""
    steps, asym = data["ce_step"].values, data["ce_head_asymmetry"].values
    ax.plot(steps, asym, color="k", label="training")
    if split is not None and math.isfinite(float(split["rate_predicted"])):
        lo, hi = split["window"]
        i = int(np.searchsorted(steps, lo))
        t = np.linspace(steps[i], hi + SPLIT_MARGIN, 50)
        ax.plot(
            t,
            asym[i] * np.exp(split["rate_predicted"] * (t - steps[i])),
            color="tab:red",
            ls="--",
            label=f"linearised AdamW: r = {split['rate_predicted']:.4f}/step",
        )
        ax.axvspan(
            lo, hi, color="grey", alpha=0.15, label=f"measured: r = {split['rate_measured']:.4f}"
        )
    if split is not None and math.isfinite(float(split.get("rate_first_order", np.nan))):
        ax.plot(
            t,
            asym[i] * np.exp(split["rate_first_order"] * (t - steps[i])),
            color="tab:purple",
            ls="-.",
            label=f"first order in q: r = {split['rate_first_order']:.4f}/step",
        )
        ax.axvline(split["split_measured"], color="tab:red", ls=":", lw=1, label="heads split")
        ax.axvline(
            split["split_first_order"],
            color="tab:purple",
            ls=":",
            lw=1,
            label="heads split, first order",
        )
    ax.set(
        yscale="log",
        xlabel="step",
        ylabel="max$_{h,h'}\\,\\|W_Q^h - W_Q^{h'}\\|_F$",
        title="head splitting under AdamW",
    )
    ax.legend(fontsize=7)
