"""Figure emergence-times: distributions over seeds of the emergence times of the linear map mod 2
against the number of heads H (fixed S) and the state size S (fixed H) (spec emergence.md §7
emergence-times, lottery model of §5.3).

Top left: CDF over (seed, cell) of the per-cell emergence time (EMERGENCE_RULE) for each H, seeds
vmapped; dashed: the lottery prediction from the smallest H0, applied cell by cell,
1 - mean_i Fbar_{i,H0}(t)^(H/H0). Top right: CDF over seeds of the per-run emergence time (the
step at which the last cell emerged); dashed: the lottery prediction for independent cells,
prod_i (1 - Fbar_{i,H0}(t)^(H/H0)). Bottom left: the same two CDFs against S at fixed H.
Bottom right: fraction of runs that never emerge within the budget, against H (measured and
lottery) and, in the legend of the bottom-left panel, against S. A CDF that stays below 1 at the
last step is the fraction that never emerged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    LOTTERY_CURVE_RULE,
    RUN_RULE,
    emergence_times,
    run_times,
)
from simulate.emergence.training import EmergenceConfig, run_stored
from simulate.measure.survival import cdf, column_survival
from theory.emergence.levels import lottery_pooled_survival, lottery_run_cdf
from theory.validation import require

QUICK = {
    "S": 6,
    "head_dim": 4,
    "batch": 64,
    "lr": 3e-3,
    "steps": 1500,
    "chunk": 500,
    "log_every": 50,
    "eval_batch": 128,
}
"""--quick: S = 6, d_h = 4, batch 64, lr 3e-3, 1500 steps."""


@dataclass(frozen=True)
class TimesConfig(FigureOptions):
    """Linear map s = 3, d_h = 8: H in {1, 2, 4, 8, 16} at S = 16 and S in {8, 16, 32} at H = 8,
    32 seeds vmapped, 5k steps (spec CPU setting). --quick: S = 6, H in {1, 2, 4, 8}; S in {4, 6}
    at H = 8; d_h = 4, batch 64, lr 3e-3, 1500 steps, 32 seeds."""

    train: Annotated[EmergenceConfig, Flat] = EmergenceConfig(seeds=32)
    """the training runs (linear map, transformer, no bias); S and heads are swept."""
    head_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of heads H of the sweep at fixed S, one vmapped run each."""
    sizes: tuple[int, ...] = (8, 16, 32)
    """state sizes S of the sweep at fixed H = size_heads."""
    size_heads: int = 8
    """H of the sweep over S."""

    def __post_init__(self):
        train = self.train
        require(train.task == "linear_map", "task", train.task, "linear_map (this figure)")
        require(train.model == "transformer", "model", train.model, "transformer (this figure)")
        require(
            len(self.head_counts) >= 1 and min(self.head_counts) >= 1,
            "head_counts",
            self.head_counts,
            "numbers of heads >= 1",
        )
        require(
            len(self.sizes) >= 1 and min(self.sizes) >= max(2, train.s),
            "sizes",
            self.sizes,
            f"state sizes S >= max(2, s = {train.s})",
        )
        require(self.size_heads >= 1, "size_heads", self.size_heads, "an integer >= 1")
        self.trainings()  # the runs as resolved (--quick included) are valid before any compute

    def base(self) -> EmergenceConfig:
        return replace(self.quick_setting("train", QUICK), attention_bias=0.0)

    def head_sweep(self) -> list[tuple[int, int]]:
        """(S, H) of the sweep over H."""
        counts = self.quick_or("head_counts", (1, 2, 4, 8))
        return [(self.base().S, H) for H in sorted(counts)]

    def size_sweep(self) -> list[tuple[int, int]]:
        """(S, H) of the sweep over S."""
        sizes = self.quick_or("sizes", (4, 6))
        return [(S, self.size_heads) for S in sorted(sizes)]

    def trainings(self) -> dict[tuple[int, int], EmergenceConfig]:
        """(S, H) -> its run (stored in run_dir/S{S}-H{H})."""
        base = self.base()
        return {
            (S, H): replace(base, S=S, heads=H)
            for S, H in sorted({*self.head_sweep(), *self.size_sweep()})
        }


def compute(cfg: TimesConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    runs = cfg.trainings()
    times = {}
    for (S, H), training in runs.items():
        ds = run_stored(training, cfg.run_output(run_dir, f"S{S}-H{H}"))
        steps = ds["step"].values
        times[S, H] = emergence_times(steps, ds["cell_loss"].values)  # (seed, cell)
    heads, sizes = cfg.head_sweep(), cfg.size_sweep()
    counts = [H for _, H in heads]
    H0 = counts[0]
    ref = column_survival(steps, times[heads[0]])  # (step, cell)
    cell_cdf = np.stack([cdf(steps, times[k]) for k in heads])
    lottery_cell = np.stack([1 - lottery_pooled_survival(ref, H0, H) for H in counts])
    run_t = np.stack([run_times(times[k]) for k in heads])  # (H, seed)
    run_cdf = np.stack([cdf(steps, t) for t in run_t])
    lottery_run = np.stack([lottery_run_cdf(ref, H0, H) for H in counts])
    size_cell_cdf = np.stack([cdf(steps, times[k]) for k in sizes])
    size_run_t = np.stack([run_times(times[k]) for k in sizes])
    size_run_cdf = np.stack([cdf(steps, t) for t in size_run_t])
    seeds = np.arange(runs[heads[0]].seeds)
    data = xr.Dataset(
        {
            "cell_cdf": (("H", "step"), cell_cdf),
            "lottery_cell_cdf": (("H", "step"), lottery_cell),
            "run_cdf": (("H", "step"), run_cdf),
            "lottery_run_cdf": (("H", "step"), lottery_run),
            "emergence_step": (("H", "seed", "cell"), np.stack([times[k] for k in heads])),
            "run_emergence_step": (("H", "seed"), run_t),
            "size_cell_cdf": (("S", "step"), size_cell_cdf),
            "size_run_cdf": (("S", "step"), size_run_cdf),
            "size_run_emergence_step": (("S", "seed"), size_run_t),
        },
        coords={
            "H": counts,
            "S": [S for S, _ in sizes],
            "step": steps,
            "seed": seeds,
            "cell": np.arange(heads[0][0]),
        },
    )
    finite = [times[k][np.isfinite(times[k])] for k in heads]
    base = runs[heads[0]]
    summary = {
        "heads": counts,
        "S": heads[0][0],
        "s": base.s,
        "head_dim": base.head_dim,
        "batch": base.sequences_per_step,
        "lr": base.lr,
        "seeds": base.seeds,
        "steps": base.steps,
        "emergence_rule": EMERGENCE_RULE,
        "run_rule": RUN_RULE,
        "lottery_rule": LOTTERY_CURVE_RULE,
        "fraction_emerged": cell_cdf[:, -1],
        "lottery_fraction_emerged": lottery_cell[:, -1],
        "median_emergence_step": [float(np.median(f)) if f.size else float("nan") for f in finite],
        "fraction_runs_emerged": run_cdf[:, -1],
        "lottery_fraction_runs_emerged": lottery_run[:, -1],
        "fraction_runs_never_emerged": 1 - run_cdf[:, -1],
        "median_run_emergence_step": np.median(run_t, axis=1),
        "emergence_steps": np.stack([times[k] for k in heads]),
        "sizes": [S for S, _ in sizes],
        "size_heads": sizes[0][1],
        "fraction_emerged_vs_S": size_cell_cdf[:, -1],
        "fraction_runs_never_emerged_vs_S": 1 - size_run_cdf[:, -1],
        "median_run_emergence_step_vs_S": np.median(size_run_t, axis=1),
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            f"H = {H}",
            summary["fraction_emerged"][k],
            summary["lottery_fraction_emerged"][k],
            summary["median_emergence_step"][k],
            summary["fraction_runs_never_emerged"][k],
            1 - summary["lottery_fraction_runs_emerged"][k],
            summary["median_run_emergence_step"][k],
        ]
        for k, H in enumerate(summary["heads"])
    ]
    rows += [
        [
            f"S = {S} (H = {summary['size_heads']})",
            summary["fraction_emerged_vs_S"][k],
            "-",
            "-",
            summary["fraction_runs_never_emerged_vs_S"][k],
            "-",
            summary["median_run_emergence_step_vs_S"][k],
        ]
        for k, S in enumerate(summary["sizes"])
    ]
    return (
        format_table(
            [
                "run",
                "cells emerged",
                "lottery",
                "median cell step",
                "runs never emerged",
                "lottery",
                "median run step",
            ],
            rows,
        )
        + f"\nS = {summary['S']} in the H sweep; {summary['seeds']} seeds per run, budget "
        f"{summary['steps']} steps"
    )


LOTTERY_TOLERANCE = 0.1
"""a fraction of (seed, cell) pairs or of runs: agrees within 0.1."""


def predictions(summary: dict) -> list[Prediction]:
    """Per H above the reference H0, at the end of the budget: the fraction of (seed, cell)
    emerged and the fraction of runs with every cell emerged, against the lottery model (§5.3)."""
    heads = summary["heads"]
    setting = f"within {summary['steps']} steps, S = {summary['S']}, {summary['seeds']} seeds"
    rows = []
    for what, key, how in (
        ("(seed, cell) emerged", "fraction_emerged", "EMERGENCE_RULE"),
        ("runs with every cell emerged", "fraction_runs_emerged", "RUN_RULE; cells independent"),
    ):
        measured = np.asarray(summary[key], float)
        lottery = np.asarray(summary[f"lottery_{key}"], float)
        rows += [
            Prediction(
                f"fraction of {what} {setting}, H = {H}",
                lottery[k],
                measured[k],
                LOTTERY_TOLERANCE,
                f"end of the measured CDF at the last step ({how}) against LOTTERY_CURVE_RULE "
                f"from H0 = {heads[0]}; a fraction: within 0.1",
                "difference",
            )
            for k, H in enumerate(heads)
            if k > 0  # H0 is its own prediction
        ]
    return rows


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    steps = data["step"].values
    H = data["H"].values
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(H)))
    for color, h in zip(colors, H):
        for ax, measured, lottery in (
            (axes[0, 0], "cell_cdf", "lottery_cell_cdf"),
            (axes[0, 1], "run_cdf", "lottery_run_cdf"),
        ):
            ax.step(
                steps,
                data[measured].sel(H=h).values,
                where="post",
                color=color,
                label=f"H = {h} (measured)",
            )
            if h != H[0]:
                ax.plot(
                    steps,
                    data[lottery].sel(H=h).values,
                    color=color,
                    ls="--",
                    lw=1,
                    label=f"H = {h} (lottery from H = {H[0]})",
                )
    axes[0, 0].set(
        ylabel="fraction of (seed, cell) emerged",
        title=f"per-cell emergence times, S = {summary['S']}, {summary['seeds']} seeds",
    )
    axes[0, 1].set(
        ylabel="fraction of runs with every cell emerged",
        title=f"per-run emergence times, S = {summary['S']}, {summary['seeds']} seeds",
    )
    ax = axes[1, 0]
    sizes = data["S"].values
    for color, (k, S) in zip(plt.cm.plasma(np.linspace(0, 0.8, len(sizes))), enumerate(sizes)):
        never = summary["fraction_runs_never_emerged_vs_S"][k]
        ax.step(
            steps,
            data["size_cell_cdf"].sel(S=S).values,
            where="post",
            color=color,
            label=f"S = {S}: per cell",
        )
        ax.step(
            steps,
            data["size_run_cdf"].sel(S=S).values,
            where="post",
            color=color,
            ls=":",
            label=f"S = {S}: per run (never: {never:.2f})",
        )
    ax.legend(fontsize=7, loc="lower right")
    ax.set(
        ylabel="fraction emerged", title=f"against the state size S at H = {summary['size_heads']}"
    )
    for ax in (axes[0, 0], axes[0, 1], axes[1, 0]):
        ax.set(xlabel="training step", ylim=(-0.02, 1.02))
    for ax in (axes[0, 0], axes[0, 1]):
        ax.legend(fontsize=7)
    ax = axes[1, 1]
    ax.plot(H, summary["fraction_runs_never_emerged"], "o-", color="k", label="measured")
    ax.plot(
        H,
        1 - np.asarray(summary["lottery_fraction_runs_emerged"], float),
        "x--",
        color="tab:red",
        label=f"lottery from H = {H[0]}",
    )
    ax.set_xscale("log", base=2)
    ax.set(
        xlabel="heads H",
        ylabel="fraction of runs never emerged",
        ylim=(-0.02, 1.02),
        title=f"runs with a cell not emerged within {summary['steps']} steps",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


FIGURE = Figure(
    "emergence-times",
    "emergence",
    "linear map: CDFs over 32 vmapped seeds of per-cell and per-run emergence times vs "
    "H and vs S, fraction of runs never emerged, with the lottery prediction",
    TimesConfig,
    compute,
    plot,
    report,
    how_to_read="Top left: CDF over all (seed, cell) pairs of the per-cell emergence step (loss "
    "below 0.1 ln 2), one colour per number of heads H; dashed: the lottery prediction from the "
    "smallest H0, 1 - mean_i Fbar_{i,H0}(t)^(H/H0), i.e. H/H0 times as many independent "
    "searchers. Top right: the same for whole runs (every cell emerged), dashed the lottery "
    "prediction for independent cells. Bottom left: per-cell (solid) and per-run (dotted) CDFs "
    "against the state size S at fixed H, the legend giving the fraction of runs that never "
    "emerged. Bottom right: the fraction of runs that never emerged against H, measured (black) "
    "and lottery (red). A CDF that stays below 1 at the last step leaves that fraction never "
    "emerged; measured curves above the dashed ones mean heads cooperate better than independent "
    "tickets.",
    predictions=predictions,
)
