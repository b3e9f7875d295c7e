"""Figure incremental-importance: excess validation loss of the minimal transformer against the step
for several importance ratios m (paper Fig. 4 right; spec incremental.md §7
incremental-importance, §5.6).

q = 1e-9, W_V = 0, online. Each m has its own teacher strengths c_k = m^(h-k) and so its own Bayes
loss and yardsticks. Inset: the stage-1 step against m (log-log) beside the reduced theory's trend
t_1 ~ m^-(h-1) (gradient flow; AdamW rescales gradients, so the trend is a reference, not a
prediction of the optimiser's steps), drawn through the point nearest m = 1.7.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from figures.incremental.init_scale import SweepConfig, draw_sweep, run_row, train_sweep
from simulate.incremental.markov_training import LADDER_RULE, MarkovTrainConfig
from simulate.incremental.training_stages import STAGE1_RULE, stage1_step
from simulate.measure.fits import loglog_slope
from theory.incremental.setting import check_ratio
from theory.validation import require

ANCHOR_M = 1.7
"""the theory trend is drawn through the measured point nearest this m."""


@dataclass(frozen=True)
class ImportanceConfig(SweepConfig):
    """Importance-ratio sweep (paper Fig. 4 right): spans 2, 2, 2, q = 1e-9, online 512/step."""

    train: Annotated[MarkovTrainConfig, Flat] = MarkovTrainConfig(steps=1500, log_every=5)
    """the shared training setting (q = 1e-9, W_V = 0, float64 below q = 1e-6; rows logged every
    5 steps: the stage-1 step comes within tens of steps)."""
    ratios: tuple[float, ...] = (1.0, 1.3, 1.5, 1.7)
    """importance ratios m > 0 (c_k = m^(h-k))."""

    def __post_init__(self):
        require(
            len(self.ratios) >= 2 and all(np.isfinite(m) and m > 0 for m in self.ratios),
            "ratios",
            self.ratios,
            "two or more importance ratios m > 0",
        )
        require(len(set(self.ratios)) == len(self.ratios), "ratios", self.ratios, "distinct ratios")
        for m in self.ratios:
            check_ratio("ratios", m, len(self.train.blocks))
        q = self.train.query_scale
        require(
            q is not None and np.isfinite(q) and q > 0,
            "query_scale",
            q,
            "a query-init scale > 0",
        )

    def runs(self) -> dict[str, MarkovTrainConfig]:
        base = self.base()
        return {f"m={m:g}": replace(base, m=m) for m in self.ratios}


def compute(cfg: ImportanceConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    runs = cfg.runs()
    data, summaries = train_sweep(runs, run_dir, cfg.quiet)
    steps = data["step"].values
    rows = []
    for label, cfg_m in runs.items():
        s = summaries[label]
        levels = s["yardstick_losses"]
        t1 = stage1_step(
            steps, data["val_loss"].sel(run=label).values, levels["uniform"], levels["A*_1:1"]
        )
        rows.append({**run_row(label, s), "m": cfg_m.m, "stage1_step": t1, "levels": levels})
    h = len(cfg.train.blocks)
    ms = [r["m"] for r in rows]
    t1 = [r["stage1_step"] for r in rows]
    anchor = int(np.argmin(np.abs(np.asarray(ms) - ANCHOR_M)))
    data["stage1_step"] = ("run", np.asarray(t1, float))
    data["m"] = ("run", np.asarray(ms, float))
    summary = {
        "ladder_rule": LADDER_RULE,
        "stage1_rule": STAGE1_RULE,
        "rows": rows,
        "predicted_slope": -(h - 1),
        "fitted_slope": loglog_slope(ms, t1),
        "anchor": {"m": ms[anchor], "stage1_step": t1[anchor]},
        "query_scale": cfg.train.query_scale,
    }
    return data, summary


SLOPE_TOLERANCE = 0.5
"""the gradient-flow trend t_1 ~ m^-(h-1) is a reference under AdamW, which rescales gradients: a
trend, held to 50%."""


def predictions(summary: dict) -> list[Prediction]:
    return [
        Prediction(
            "d ln t_1 / d ln m, stage-1 step against the importance ratio",
            summary["predicted_slope"],
            summary["fitted_slope"],
            SLOPE_TOLERANCE,
            f"measured: least-squares log-log slope of the stage-1 steps ({STAGE1_RULE}); "
            "predicted: the reduced flow's t_1 ~ m^-(h-1); AdamW: a trend, 50%",
        )
    ]


def report(summary: dict) -> str:
    table = format_table(
        [
            "m",
            "dtype",
            "stage-1 step",
            "ladder steps (k=2, 3)",
            "heads split",
            "final val loss",
            "Bayes loss",
            "final excess",
        ],
        [
            [
                r["m"],
                r["dtype"],
                r["stage1_step"],
                ", ".join(f"{float(s):g}" for s in r["ladder_steps"]),
                r["heads_split_step"],
                r["final_val_loss"],
                r["bayes_loss"],
                r["final_excess_loss"],
            ]
            for r in summary["rows"]
        ],
    )
    return (
        f"{table}\nstage-1 step vs m: fitted log-log slope {summary['fitted_slope']:.3f}, "
        f"reduced theory (gradient flow) {summary['predicted_slope']}"
    )


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    colors = dict(zip([r["run"] for r in rows], plt.cm.plasma(np.linspace(0, 0.85, len(rows)))))
    fig, (ax, inset) = plt.subplots(1, 2, figsize=(12, 5), width_ratios=(2.2, 1))
    draw_sweep(ax, data, rows, colors)
    for r in rows:
        ax.axhline(r["levels"]["A*_1:1"] - r["bayes_loss"], color=colors[r["run"]], ls=":", lw=0.8)
    ax.plot([], [], "k:", lw=0.8, label="truncated teacher $A^*_1$ (per m)")
    ax.set_title(
        f"Minimal transformer: importance ratio m (q = {summary['query_scale']:g}, W_V = 0)"
    )
    ax.legend(fontsize=7)
    ms, t1 = data["m"].values, data["stage1_step"].values
    for m, t, r in zip(ms, t1, rows):
        inset.plot(m, t, "o", color=colors[r["run"]])
    anchor = summary["anchor"]
    grid = np.geomspace(ms.min(), ms.max(), 20)
    inset.plot(
        grid,
        anchor["stage1_step"] * (grid / anchor["m"]) ** summary["predicted_slope"],
        "k--",
        label=f"theory trend $m^{{{summary['predicted_slope']}}}$ through m = {anchor['m']:g}",
    )
    inset.set(
        xscale="log",
        yscale="log",
        xlabel="importance ratio m",
        ylabel="stage-1 step (steps)",
        title=f"stage-1 step; fitted slope {summary['fitted_slope']:.2f}",
    )
    inset.set_xticks(ms, [f"{m:g}" for m in ms])
    inset.minorticks_off()
    inset.legend(fontsize=7)
    fig.tight_layout()
    return fig


FIGURE = Figure(
    "incremental-importance",
    "incremental",
    "excess validation loss against the step for importance ratios m, stage-1 step vs m "
    "(paper Fig. 4 right)",
    ImportanceConfig,
    compute,
    plot,
    report,
    how_to_read=(
        "Left: excess validation loss against the step for each importance ratio m (q = 1e-9, "
        "W_V = 0), open circles at the ladder steps k = 2, 3, dotted: each m's truncated teacher "
        "A*_1 (at m = 1 the blocks are equally important). Right: the stage-1 step against m "
        "(log-log) beside the reduced theory's t_1 ~ m^-(h-1) (dashed, through the point "
        "nearest m = 1.7); AdamW rescales gradients, so the trend is a reference."
    ),
    predictions=predictions,
)
