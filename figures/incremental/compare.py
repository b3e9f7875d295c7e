"""``stagewise compare incremental``: stage levels and times predicted by the reduced head system
beside those measured in training (spec incremental.md §5, §7; issue 4 item 5, issue 17 item 4).

Two comparisons, one table each (stdout and summary.json) and one figure:

1. Regression variant under gradient flow (``figures.incremental.compare_regression``): the map
   from the network to the reduced system is exact, so starts are compared in ODE time with no
   fitted constant; once with the content blocks of W_Q switched off (the reduction's
   positional-attention assumption made structural) and once with all of W_Q trained (the
   minimal transformer of spec §3.1).
2. Cross-entropy on the Markov chain with AdamW (``figures.incremental.compare_cross_entropy``):
   AdamW has no exact time map to the flow, so the order of the stages, their plateau levels and
   the ratios of stage durations are compared, and the durations in steps through the time map
   the heads' first-order split derives (no fitted constant), beside AdamW's splitting rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated

import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import stage_table
from figures.core.verdicts import Prediction
from figures.incremental import compare_cross_entropy, compare_from_state, compare_regression
from simulate.incremental.adam_moments import predicted_stage_one
from simulate.incremental.markov_training import baseline_jobs
from simulate.incremental.regression_training import RegressionConfig
from simulate.incremental.tangent_split import tangent_split
from simulate.runner import Seeds
from simulate.side_by_side import After, run_side_by_side


@dataclass(frozen=True)
class CompareConfig(FigureOptions):
    """Predicted against measured stages: regression under gradient flow, cross-entropy under
    AdamW. Quick: 2 gradient-flow seeds, smaller batches, the quick Markov setting."""

    flow: Annotated[Seeds, Flat] = Seeds(seeds=3)
    """seeds of the gradient-flow runs (vmapped); the first seed is that of every run."""
    from_state: bool = False
    """also predict every stage k >= 2 of the AdamW student from its own state at its measured
    t_{k-1}, and every stage a priori from its initial state: AdamW on expected moments (at
    --quick about 700 map steps each way, 2048 per-sequence gradients a step)."""
    sgd: bool = False
    """also train the student under SGD with momentum (lr 1, 20000 steps) against the same
    baselines and predict its stages the same two ways: the heavy ball on the mean gradient
    (48 min for the whole command at --quick, measured beside other work)."""

    def regression(self, attention: str) -> RegressionConfig:
        full = attention == "full"
        batch = 512 if self.quick or not full else 2048
        return RegressionConfig(
            attention=attention,
            seeds=1 if full else self.quick_or("flow.seeds", 2),
            batch=batch,
            validation=batch,
            steps=12_000,
            lr=0.05,
            log_every=10,
            chunk=3000,
            seed=self.flow.seed,
        )


FROM_STATE = ("adamw", "sgd")
"""the students whose stages may be predicted from their state (``CompareConfig``'s options)."""


def compute(cfg: CompareConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    # Every job side by side, one per CPU device, in one call: the markov row's student logs its
    # KL to the learned c-gram baselines and compares with the reduced system's predictions and
    # the expected-moment stage 1, so it starts once they have finished; the baselines, longest
    # and first in the student's chain, go first, then (with ``sgd``) the SGD student, the
    # longest chain of all, then the student's other needs, and the other jobs (the first-order
    # split, the two regression rows, the AdamW stages from the state) fill the devices.
    markov = compare_cross_entropy.markov_config(cfg.quick, cfg.flow.seed)
    baselines, training = baseline_jobs(markov, run_dir / "markov" / "baselines", quiet=cfg.quiet)
    jobs: list = list(training.values())
    trained = tuple(range(len(jobs)))
    from_state: dict[str, int] = {}
    if cfg.sgd:
        jobs.append(
            After(
                trained,
                lambda *_: compare_from_state.train_sgd(
                    run_dir / "markov", markov, cfg.quiet, baselines
                ),
            )
        )
        from_state["sgd"] = len(jobs)
        jobs += [
            After((len(jobs) - 1,), partial(compare_from_state.from_state, "sgd")),
            After((len(jobs) - 1,), partial(compare_from_state.from_start, "sgd")),
        ]
    # stage 1 from AdamW's expected moments needs only the c_1-gram baseline's level
    first = tuple(i for i, path in enumerate(training) if path == baselines[0])
    stage_one = len(jobs)
    ce_job = stage_one + 3
    attentions = ("positional", "full")
    jobs += [
        After(first, lambda *_: predicted_stage_one(markov, baselines)),
        partial(compare_cross_entropy.reduced_predictions, markov),
        partial(tangent_split, markov),
        After(
            (*trained, stage_one, stage_one + 1),
            lambda *done: compare_cross_entropy.compare(
                run_dir / "markov", markov, cfg.quiet, baselines, done[-1], done[-2]
            ),
        ),
        *(
            partial(
                compare_regression.compare,
                cfg.regression(attention),
                cfg.run_output(run_dir, f"regression-{attention}"),
                attention,
            )
            for attention in attentions
        ),
    ]
    if cfg.from_state:
        from_state["adamw"] = len(jobs)
        jobs += [
            After((ce_job,), lambda ce: compare_from_state.from_state("adamw", Path(ce[1]["run"]))),
            After((ce_job,), lambda ce: compare_from_state.from_start("adamw", Path(ce[1]["run"]))),
        ]
    done = run_side_by_side(jobs)
    first_order, ce, pos, full = done[ce_job - 1 : ce_job + 3]
    pieces, summary = [], {}
    for attention, (data, part) in zip(attentions, (pos, full), strict=True):
        pieces.append(data.rename(seed=f"{attention}_seed"))
        summary[f"regression_{attention}"] = part
    pieces.append(ce[0])
    summary["cross_entropy"] = compare_cross_entropy.with_first_order(ce[1], first_order)
    for name, index in from_state.items():
        (sequential, part), (start, a_priori) = done[index : index + 2]
        pieces += [sequential, start]
        summary[f"from_state_{name}"] = compare_from_state.with_start(part, a_priori)
    return xr.merge(pieces), summary


def predictions(summary: dict) -> list[Prediction]:
    return [
        *compare_regression.predictions(summary["regression_positional"], "positional"),
        *compare_regression.predictions(summary["regression_full"], "full"),
        *compare_cross_entropy.predictions(summary["cross_entropy"]),
        *(
            p
            for name in FROM_STATE
            if f"from_state_{name}" in summary
            for p in compare_from_state.predictions(summary[f"from_state_{name}"], name)
        ),
    ]


def report(summary: dict) -> str:
    out = []
    for attention, title in (
        ("positional", "positional attention (content blocks of W_Q off)"),
        ("full", "all of W_Q trained"),
    ):
        part = summary[f"regression_{attention}"]
        out.append(f"Regression variant, gradient flow, {title}; {part['time_map']}")
        out.append(stage_table(part["rows"]))
        out.append(
            f"assumption checks: max content-logit RMS {part['max_content_logit_rms']:.3g}, "
            f"max value off-span {part['max_value_off_span']:.3g}, "
            f"max value-position norm {part['max_value_position_norm']:.3g}\n"
        )
    out.append(compare_cross_entropy.report(summary["cross_entropy"]))
    out += [
        compare_from_state.report(summary[f"from_state_{name}"], name)
        for name in FROM_STATE
        if f"from_state_{name}" in summary
    ]
    return "\n".join(out)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    parts = {n: summary[f"from_state_{n}"] for n in FROM_STATE if f"from_state_{n}" in summary}
    rows = 4 if parts else 3
    fig, axes = plt.subplots(rows, 5, figsize=(22, 4.2 * rows))
    for ax in axes[:2, 4]:
        ax.set_visible(False)  # the fifth panel belongs to the cross-entropy row
    _regression_row(axes[0], data, summary["regression_positional"], "positional")
    _regression_row(axes[1], data, summary["regression_full"], "full")
    compare_cross_entropy.plot_row(axes[2], data, summary["cross_entropy"])
    if parts:
        for ax, (name, part) in zip(axes[3], parts.items()):
            compare_from_state.plot_loss(ax, data, part, name)
        compare_from_state.plot_durations(axes[3, len(parts)], parts)
        for ax in axes[3, len(parts) + 1 :]:
            ax.set_visible(False)
    fig.suptitle(
        "Reduced head system against training: predicted (dashed) and measured (solid) stages"
    )
    fig.tight_layout()
    return fig


def _regression_row(axes, data, part, label):
    lr = part["config"]["lr"]
    t = data[f"{label}_step"].values * lr
    ts = data[f"{label}_time"].values
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    ax = axes[0]
    ax.plot(t[1:], data[f"{label}_loss"].values[0, 1:], color="k", label="network, seed 0")
    ax.plot(
        ts[1:],
        data[f"{label}_ode_loss"].values[0, 1:],
        "k--",
        lw=1,
        label="reduced ODE from the mapped init",
    )
    D = part["config"]["D"]
    for level in part["levels_reduced"]:
        ax.axhline(D * level, color="grey", ls=":", lw=0.8)
    for k, (p, m) in enumerate(zip(part["predicted_per_seed"][0], part["measured_per_seed"][0])):
        ax.axvline(p, color=colors[k], ls="--", lw=0.8)
        ax.axvline(m, color=colors[k], lw=0.8, label=f"stage {k + 1}")
    ax.set(
        xscale="log",
        xlabel="ODE time t = steps x lr",
        ylabel="validation loss (MSE/2)",
        title=f"regression, {label} attention: loss",
    )
    ax.legend(fontsize=7)
    mass, ode_mass = (
        data[f"{label}_block_mass"].values[0],
        data[f"{label}_ode_block_mass"].values[0],
    )
    for k, ax in enumerate(axes[1:]):
        if k >= mass.shape[1]:
            ax.axis("off")
            continue
        for j in range(mass.shape[2]):
            ax.plot(t, mass[:, k, j], color=colors[j], label=f"block {j + 1}")
            ax.plot(ts, ode_mass[:, k, j], color=colors[j], ls="--", lw=1)
        ax.set(
            xscale="symlog",
            xlabel="ODE time t = steps x lr",
            ylim=(-0.02, 1.02),
            title=f"head {k + 1}: attention mass per block",
            ylabel="mass",
        )
        if label == "full" and k == mass.shape[1] - 1:
            twin = ax.twinx()
            twin.plot(t, data[f"{label}_content_logit_rms"].values[0], color="grey", lw=1)
            twin.set_ylabel("content-logit RMS (grey)")
    axes[1].plot([], [], "k--", lw=1, label="reduced ODE")
    axes[1].legend(fontsize=7)


FIGURE = Figure(
    "compare-incremental",
    "incremental",
    "stage levels and times of the reduced head system against training: regression under "
    "gradient flow (exact time map), cross-entropy under AdamW (orders, levels, ratios)",
    CompareConfig,
    compute,
    plot,
    report,
    kind="comparison",
    how_to_read=(
        "Row 1: the minimal transformer on the regression variant under gradient flow with "
        "positional attention, against the reduced system started from its own mapped "
        "initialisation; row 2: the same with all of W_Q trained (right: the content-logit RMS, "
        "grey). Rows 1-2: solid training, dashed ODE, same axes (ODE time = steps x lr): the "
        "loss with the derived levels (grey dotted) and the stage starts predicted (dashed "
        "verticals) and measured (solid verticals), then each head's attention mass per block. "
        "Row 3: cross-entropy with AdamW on the Markov chain: the loss with the class levels "
        "and the measured stage starts (purple dashed: the loss of AdamW on the expected "
        "moments of its minibatch gradients up to the stage-1 midpoint, from the run's own "
        "initial parameters), the KL to the truncated teachers and to the learned "
        "baselines, and the ratios of stage durations (t_k - t_{k-1}) / t_1 against the reduced "
        "system's under both metrics."
    ),
    predictions=predictions,
)
