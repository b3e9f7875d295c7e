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

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.emergence import training as emergence_training
from simulate.emergence.tasks import linear_map_floor, linear_map_step_height
from simulate.emergence.training import EmergenceConfig, emergence_times
from simulate.store import load
from theory.validation import require

FIGURE_ID = "emergence-linear-map"

RESPONSIBLE_RULE = (
    "for an emerged cell i: 'before' = the last logged row before its emergence "
    "at which its loss is still >= 0.9 ln 2 (start of the drop), 'after' = the "
    "emergence row; the responsible head is the first-layer head whose attention "
    "mass on supp(M_i) grows most between them; its entropy change is compared "
    "with the median change of the other heads"
)
HIGHLIGHT_RULE = (
    "highlighted drop: among seed 0's emerged cells, the one whose responsible head "
    "sharpens most relative to the others (most negative entropy change minus the "
    "others' median)"
)
RECOVERY_RULE = (
    "pattern recovery of cell i: final attention mass summed over first-layer heads "
    "on supp(M_i) (spec §6), averaged over the cells that emerged / did not emerge"
)


@dataclass(frozen=True)
class LinearMapConfig(EmergenceConfig):
    """One-layer transformer, S = 16, s = 3, H = 8, d_h = 8, batch 256, 5k steps, 3 seeds."""

    out: Path = Path("runs")
    """output directory (the figure goes to OUT/emergence-linear-map/)."""
    quick: bool = False
    """CPU-sized run: S = 8, batch 64, lr 3e-3, 2500 steps, 2 seeds."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        super().__post_init__()
        require(self.task == "linear_map", "task", self.task, "linear_map (this figure)")
        require(self.model == "transformer", "model", self.model, "transformer (this figure)")

    def training(self) -> EmergenceConfig:
        cfg = replace(self.experiment(), out=self.run_dir() / "training")
        if self.quick:
            cfg = replace(cfg, S=8, batch=64, lr=3e-3, steps=2500, chunk=500, log_every=25, seeds=2)
        return cfg

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def drop_window(steps, cell_loss_i, t) -> tuple[int, int]:
    """Rows (before, after) of a drop of one cell per ``RESPONSIBLE_RULE``: the last row before
    the emergence step ``t`` with loss >= 0.9 ln 2, and the row of ``t``."""
    after = int(np.nonzero(np.asarray(steps) == t)[0][0])
    high = np.nonzero(np.asarray(cell_loss_i)[:after] >= 0.9 * math.log(2))[0]
    return (int(high[-1]) if high.size else 0), after


def responsible_heads(steps, cell_loss, pattern_mass, entropy, times):
    """Per ``RESPONSIBLE_RULE`` for one seed: rows (cell, emergence step, head, entropy change of
    that head, median entropy change of the others); ``pattern_mass`` (step, head, cell),
    ``entropy`` (step, head)."""
    rows = []
    for i, t in enumerate(times):
        if not np.isfinite(t):
            continue
        before, after = drop_window(steps, cell_loss[:, i], t)
        gain = pattern_mass[after, :, i] - pattern_mass[before, :, i]
        h = int(np.argmax(gain))
        change = entropy[after] - entropy[before]
        others = np.delete(change, h)
        rows.append(
            [
                i,
                float(t),
                h + 1,
                float(change[h]),
                float(np.median(others)) if others.size else float("nan"),
            ]
        )
    return rows


def pattern_recovery(pattern_mass, times) -> tuple[float, float]:
    """Per ``RECOVERY_RULE``: ``pattern_mass`` (head, cell) at the end, ``times`` (cell,) ->
    (mean head-summed mass on supp(M_i) over emerged cells, the same over the others)."""
    mass = np.asarray(pattern_mass, float).sum(0)
    emerged = np.isfinite(np.asarray(times, float))
    mean = lambda m: float(m.mean()) if m.size else float("nan")
    return mean(mass[emerged]), mean(mass[~emerged])


def compute(cfg: LinearMapConfig) -> tuple[xr.Dataset, dict]:
    training = cfg.training()
    emergence_training.run(training)
    ds, _ = load(training.out)
    stored = json.loads((training.out / "summary.json").read_text())
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
    highlight = None
    if resp[0]:
        cell, t, head = min(resp[0], key=lambda r: r[3] - r[4])[:3]
        before, after = drop_window(steps, ds["cell_loss"].values[0, :, cell], t)
        highlight = {
            "seed": 0,
            "cell": cell,
            "head": head,
            "step_before": int(steps[before]),
            "step_after": int(steps[after]),
        }
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
        "training_run": str(training.out),
        "S": training.S,
        "s": training.s,
        "loss_floor": linear_map_floor(training.S),
        "step_height": linear_map_step_height(training.S),
        "emergence_rule": emergence_training.EMERGENCE_RULE,
        "emergence_steps_per_seed": times,
        "cells_emerged_per_seed": np.isfinite(times).sum(-1),
        "plateau_rule": emergence_training.PLATEAU_RULE,
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


def run(cfg: LinearMapConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


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
