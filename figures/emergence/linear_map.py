"""Figure emergence-linear-map: the staircase of the linear map mod 2 (authors' blog Fig. 3; spec
emergence.md §7, levels of §5.1).

Top: loss of each output cell (solid) and aggregate loss (dashed) of one seed against the step,
with the floor L_min(S) and the staircase levels ln 2 - k ln 2 / (2S - 1) drawn, and each cell's
emergence time (EMERGENCE_RULE) as a vertical line. Middle: attention entropy of every head; the
head responsible for a drop (RESPONSIBLE_RULE) is drawn thick. Third row: the true map M, the
final x_1 -> x_0 attention block averaged over heads and evaluation sequences, and the final
attention mass of each head on each row's support. Bottom: one highlighted drop (HIGHLIGHT_RULE):
the attention block of its responsible head before and after the drop, next to M, with the
emerging row outlined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.emergence.measurements import (
    EMERGENCE_RULE,
    HIGHLIGHT_RULE,
    PLATEAU_RULE,
    RECOVERY_RULE,
    RESPONSIBLE_RULE,
    emergence_times,
    highlighted_drop,
    pattern_recovery,
    responsible_heads,
)
from simulate.emergence.tasks import linear_map_floor, linear_map_step_height
from simulate.emergence.training import EmergenceConfig, run_stored
from simulate.store import read_summary
from theory.validation import require

QUICK = {"S": 8, "batch": 64, "lr": 3e-3, "steps": 2500, "chunk": 500, "log_every": 25, "seeds": 2}
"""--quick: S = 8, batch 64, lr 3e-3, 2500 steps, 2 seeds."""


@dataclass(frozen=True)
class LinearMapConfig(FigureOptions):
    """One-layer transformer, S = 16, s = 3, H = 8, d_h = 8, batch 256, 5k steps, 3 seeds.
    --quick: S = 8, batch 64, lr 3e-3, 2500 steps, 2 seeds."""

    train: Annotated[EmergenceConfig, Flat] = EmergenceConfig()
    """the training run (linear map, transformer)."""

    def __post_init__(self):
        train = self.train
        require(train.task == "linear_map", "task", train.task, "linear_map (this figure)")
        require(train.model == "transformer", "model", train.model, "transformer (this figure)")
        self.training()  # the run as resolved (--quick included) is valid before any compute

    def training(self) -> EmergenceConfig:
        """The run (stored in run_dir/training)."""
        return self.quick_setting("train", QUICK)

    def trainings(self) -> dict[str, EmergenceConfig]:
        return {"training": self.training()}


def compute(cfg: LinearMapConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    training = cfg.training()
    output = cfg.run_output(run_dir, "training")
    ds = run_stored(training, output)
    stored = read_summary(output.path)
    steps = ds["step"].values
    times = emergence_times(steps, ds["cell_loss"].values)
    entropy = ds["attention_entropy"].values[:, :, 0]  # first layer
    resp = [
        responsible_heads(
            steps, ds["cell_loss"].values[k], ds["pattern_mass"].values[k], entropy[k], times[k]
        )
        for k in range(ds.sizes["seed"])
    ]
    gaps = [r[3] - r[4] for seed in resp for r in seed]
    highlight = highlighted_drop(steps, ds["cell_loss"].values[0], resp[0])
    final_mass = ds["pattern_mass"].values[:, -1]
    recovery = [pattern_recovery(final_mass[k], times[k]) for k in range(ds.sizes["seed"])]
    data = xr.Dataset(
        {
            "loss": (("seed", "step"), ds["loss"].values),
            "cell_loss": (("seed", "step", "cell"), ds["cell_loss"].values),
            "attention_entropy": (("seed", "step", "head"), entropy),
            "pattern_mass": (("seed", "step", "head", "cell"), ds["pattern_mass"].values),
            "attention_block": (
                ("seed", "step", "head", "cell", "key"),
                ds["attention_block"].values,
            ),
            "M": (("cell", "key"), np.asarray(stored["M"])),
        },
        coords={
            "seed": ds["seed"].values,
            "step": steps,
            "cell": ds["cell"].values,
            "head": ds["head"].values,
            "key": np.arange(training.S),
        },
    )
    summary = {
        "training_run": str(output.path),
        "S": training.S,
        "s": training.s,
        "loss_floor": linear_map_floor(training.S),
        "step_height": linear_map_step_height(training.S),
        "emergence_rule": EMERGENCE_RULE,
        "emergence_steps_per_seed": times,
        "cells_emerged_per_seed": np.isfinite(times).sum(-1),
        "plateau_rule": PLATEAU_RULE,
        "plateau_length_per_seed": stored["plateau_length_per_seed"],
        "final_loss_per_seed": ds["loss"].values[:, -1],
        "responsible_rule": RESPONSIBLE_RULE,
        "responsible_heads_per_seed": resp,
        "mean_entropy_gap": float(np.mean(gaps)) if gaps else float("nan"),
        "highlight_rule": HIGHLIGHT_RULE,
        "highlight": highlight,
        "recovery_rule": RECOVERY_RULE,
        "pattern_recovery_emerged_per_seed": [r[0] for r in recovery],
        "pattern_recovery_not_emerged_per_seed": [r[1] for r in recovery],
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            k,
            int(summary["cells_emerged_per_seed"][k]),
            summary["plateau_length_per_seed"][k],
            summary["final_loss_per_seed"][k],
            summary["pattern_recovery_emerged_per_seed"][k],
            summary["pattern_recovery_not_emerged_per_seed"][k],
        ]
        for k in range(len(summary["final_loss_per_seed"]))
    ]
    return (
        format_table(
            [
                "seed",
                "cells emerged",
                "plateau length (steps)",
                "final loss (nats)",
                "mass on supp(M_i): emerged",
                "not emerged",
            ],
            rows,
        )
        + f"\nfloor L_min = {summary['loss_floor']:.4f} nats; mean entropy change of the "
        f"responsible head minus the others' median: {summary['mean_entropy_gap']:.3g} nats"
    )


def predictions(summary: dict) -> list[Prediction]:
    """Each seed's final aggregate loss against the staircase level of its number of emerged cells
    (§5.1): L_min(S) + (S - k) ln 2/(2S - 1) with k cells emerged, the floor when k = S."""
    S, floor, height = summary["S"], float(summary["loss_floor"]), float(summary["step_height"])
    emerged = np.asarray(summary["cells_emerged_per_seed"], int)
    final = np.asarray(summary["final_loss_per_seed"], float)
    return [
        Prediction(
            f"final loss of seed {k}, {n} of S = {S} cells emerged: "
            + ("floor L_min(S)" if n == S else f"staircase level L_min(S) + {S - n} ln 2/(2S - 1)")
            + " (nats)",
            floor + (S - n) * height,
            final[k],
            height / 2,
            "aggregate evaluation loss at the last step beside the level of its count of emerged "
            "cells (EMERGENCE_RULE); half a step height: the loss sits on that level rather than "
            "on a neighbouring one",
            "difference",
        )
        for k, n in enumerate(emerged)
    ]


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    seed = 0
    steps = data["step"].values
    S = data.sizes["cell"]
    times = np.asarray(summary["emergence_steps_per_seed"], float)[seed]
    colors = plt.cm.tab20(np.linspace(0, 1, S, endpoint=False))
    fig = plt.figure(figsize=(12, 14))
    grid = fig.add_gridspec(4, 3, height_ratios=[1.2, 1, 1, 1])
    ax = fig.add_subplot(grid[0, :])
    for i in range(S):
        ax.plot(
            steps, data["cell_loss"].values[seed, :, i], color=colors[i], lw=1, label=f"cell {i}"
        )
        if np.isfinite(times[i]):
            ax.axvline(times[i], color=colors[i], ls=":", lw=0.8)
    ax.plot(steps, data["loss"].values[seed], "k--", lw=2, label="aggregate")
    height = float(summary["step_height"])
    for k in range(1, S):
        ax.axhline(math.log(2) - k * height, color="grey", lw=0.4, alpha=0.6)
    ax.axhline(
        float(summary["loss_floor"]), color="tab:red", lw=1.2, label=r"floor $(S-1)\ln 2/(2S-1)$"
    )
    ax.axhline(math.log(2), color="grey", lw=1, ls="-.", label=r"$\ln 2$")
    ax.set(
        xlabel="training step",
        ylabel="loss (nats)",
        ylim=(-0.02, 0.8),
        title=f"linear map mod 2, S = {summary['S']}, s = {summary['s']}: per-cell losses "
        "(grey: staircase levels, dotted: emergence times)",
    )
    ax.legend(fontsize=6, ncol=6, loc="lower left")
    ax = fig.add_subplot(grid[1, :])
    responsible = {r[2] for r in summary["responsible_heads_per_seed"][seed]}
    for h in data["head"].values:
        ax.plot(
            steps,
            data["attention_entropy"].values[seed, :, h - 1],
            lw=2.2 if h in responsible else 0.8,
            label=f"head {h}" + (" (responsible)" if h in responsible else ""),
        )
    for t in times[np.isfinite(times)]:
        ax.axvline(t, color="grey", ls=":", lw=0.8)
    ax.set(
        xlabel="training step",
        ylabel="attention entropy (nats)",
        title="first-layer head entropies (thick: head whose pattern mass rises at a drop)",
    )
    ax.legend(fontsize=7, ncol=4)
    M = data["M"].values
    block = data["attention_block"].values[seed]  # (step, head, cell, key)
    _matrix(fig.add_subplot(grid[2, 0]), M, "true map M (black: $M_{ij} = 1$)", cmap="Greys")
    _matrix(
        fig.add_subplot(grid[2, 1]),
        block[-1].mean(0),
        "final attention $x_1 \\to x_0$, mean over heads",
        M=M,
    )
    ax = fig.add_subplot(grid[2, 2])
    im = ax.imshow(
        data["pattern_mass"].values[seed, -1], aspect="auto", cmap="viridis", vmin=0, vmax=1
    )
    ax.set(
        title="final attention mass on supp($M_i$)",
        xlabel="output cell i",
        ylabel="head",
        yticks=range(data.sizes["head"]),
        yticklabels=data["head"].values,
    )
    fig.colorbar(im, ax=ax)
    spot = summary.get("highlight")
    if spot:
        rows = {k: int(np.nonzero(steps == spot[k])[0][0]) for k in ("step_before", "step_after")}
        head = spot["head"] - 1
        for col, (k, when) in enumerate((("step_before", "before"), ("step_after", "after"))):
            _matrix(
                fig.add_subplot(grid[3, col]),
                block[rows[k], head],
                f"head {spot['head']} {when} the drop of cell {spot['cell']} (step {spot[k]})",
                M=M,
                row=spot["cell"],
            )
        _matrix(
            fig.add_subplot(grid[3, 2]),
            M,
            f"M (black: 1), row {spot['cell']} outlined",
            cmap="Greys",
            row=spot["cell"],
        )
    fig.tight_layout()
    return fig


def _matrix(ax, values, title, M=None, cmap="viridis", row=None):
    """An (output cell, key cell) map; dots mark supp(M), a box the emerging row."""
    from matplotlib.patches import Rectangle

    im = ax.imshow(values, cmap=cmap, vmin=0, vmax=max(float(np.max(values)), 1e-9))
    if M is not None:
        i, j = np.nonzero(M)
        ax.scatter(j, i, s=6, color="tab:red", marker="o", label="supp(M)")
        ax.figure.colorbar(im, ax=ax, label="attention weight")
    if row is not None:
        ax.add_patch(
            Rectangle(
                (-0.5, row - 0.5), values.shape[1], 1, fill=False, edgecolor="tab:orange", lw=2
            )
        )
    ax.set(title=title, xlabel="key: cell j of $x_0$", ylabel="query: cell i of $x_1$")


FIGURE = Figure(
    "emergence-linear-map",
    "emergence",
    "linear map mod 2: per-cell loss staircase with floor and step levels, head "
    "entropies with the responsible heads, M vs the x_1 -> x_0 attention block (final, "
    "and one head before/after a drop) and pattern mass (blog Fig. 3)",
    LinearMapConfig,
    compute,
    plot,
    report,
    how_to_read="Top: the loss of every output cell of seed 0 (one colour each) and the aggregate "
    "loss (black dashed) against the step; grey lines are the staircase levels ln 2 - k ln 2/(2S "
    "- 1), red the floor L_min(S) = (S - 1) ln 2/(2S - 1), dotted verticals each cell's emergence "
    "step (loss below 0.1 ln 2). A cell drops from ln 2 to 0 after its own plateau, and each drop "
    "lowers the aggregate by one step height. Middle: the attention entropy of every first-layer "
    "head; thick: a head whose attention mass on supp(M_i) grew most across a drop (responsible "
    "head), which sharpens when its cell drops. Third row: the true map M, the final x_1 -> x_0 "
    "attention block averaged over heads (red dots: supp(M)), and each head's final attention "
    "mass on each row's support. Bottom: one drop (the responsible head that sharpened most): "
    "that head's attention block before and after it, beside M with the emerging row outlined.",
    predictions=predictions,
)
