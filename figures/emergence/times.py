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

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.emergence import training as emergence_training
from simulate.emergence.training import EmergenceConfig, emergence_times
from simulate.store import load
from theory.emergence import levels as emergence_theory
from theory.validation import require

FIGURE_ID = "emergence-times"
LOTTERY_RULE = (
    "lottery prediction (spec §5.3), cell by cell: Fbar_{i,H}(t) = "
    "Fbar_{i,H0}(t)^(H/H0), Fbar_i = fraction of seeds in which cell i has not "
    "emerged by step t, H0 the smallest H; per-cell CDF 1 - mean_i Fbar_{i,H}; "
    "per-run CDF prod_i (1 - Fbar_{i,H}) (cells independent)"
)
RUN_RULE = (
    "per-run emergence time: step at which the last output cell emerged; never (inf) "
    "when a cell did not emerge within the budget"
)


def survival(steps, times) -> np.ndarray:
    """Fraction of entries of ``times`` (nan: never) that have not emerged by each step."""
    t = np.asarray(times, float).ravel()
    t = np.where(np.isnan(t), np.inf, t)
    return np.array([(t > step).mean() for step in steps])


def cell_survival(steps, times) -> np.ndarray:
    """Fbar_i(t): ``times`` (seed, cell) (nan: never) -> (step, cell) fraction of seeds in which
    cell i has not emerged by each step."""
    t = np.where(np.isnan(times), np.inf, np.asarray(times, float))
    return (t[None] > np.asarray(steps, float)[:, None, None]).mean(1)


def lottery_survival(cell_survival_h0, H: float, H0: float) -> np.ndarray:
    """Lottery model: pooled survival with H heads, mean_i Fbar_{i,H0}^(H/H0) over the last axis."""
    return np.mean(
        emergence_theory.lottery_survival(np.asarray(cell_survival_h0, float), H0, H), axis=-1
    )


def lottery_run_cdf(cell_survival_h0, H: float, H0: float) -> np.ndarray:
    """Lottery model, independent cells: P(every cell emerged) = prod_i (1 - Fbar_{i,H0}^(H/H0))."""
    return np.prod(
        emergence_theory.lottery_success(np.asarray(cell_survival_h0, float), H0, H), axis=-1
    )


def run_times(times) -> np.ndarray:
    """Per ``RUN_RULE``: (..., cell) -> (...) step of the last cell, inf if one never emerged."""
    t = np.asarray(times, float)
    return np.where(np.isnan(t), np.inf, t).max(-1)


def cdf(steps, values) -> np.ndarray:
    """Fraction of ``values`` (inf: never) at or below each step."""
    v = np.asarray(values, float).ravel()
    return np.array([(v <= step).mean() for step in steps])


@dataclass(frozen=True)
class TimesConfig(EmergenceConfig):
    """Linear map s = 3, d_h = 8: H in {1, 2, 4, 8, 16} at S = 16 and S in {8, 16, 32} at H = 8,
    32 seeds vmapped, 5k steps (spec CPU setting)."""

    head_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of heads H of the sweep at fixed S, one vmapped run each."""
    sizes: tuple[int, ...] = (8, 16, 32)
    """state sizes S of the sweep at fixed H = size_heads."""
    size_heads: int = 8
    """H of the sweep over S."""
    seeds: int = 32
    """seeds per run, vmapped."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/emergence-times/)."""
    quick: bool = False
    """CPU-sized run: S = 6, H in {1, 2, 4, 8}; S in {4, 6} at H = 8; d_h = 4, batch 64,
    lr 3e-3, 1500 steps, 32 seeds."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        super().__post_init__()
        require(self.task == "linear_map", "task", self.task, "linear_map (this figure)")
        require(self.model == "transformer", "model", self.model, "transformer (this figure)")
        require(
            len(self.head_counts) >= 1 and min(self.head_counts) >= 1,
            "head_counts",
            self.head_counts,
            "numbers of heads >= 1",
        )
        require(
            len(self.sizes) >= 1 and min(self.sizes) >= max(2, self.s),
            "sizes",
            self.sizes,
            f"state sizes S >= max(2, s = {self.s})",
        )
        require(self.size_heads >= 1, "size_heads", self.size_heads, "an integer >= 1")

    def base(self) -> EmergenceConfig:
        cfg = self.experiment()
        if self.quick:
            cfg = replace(
                cfg,
                S=6,
                head_dim=4,
                batch=64,
                lr=3e-3,
                steps=1500,
                chunk=500,
                log_every=50,
                seeds=max(self.seeds, 32),
                eval_batch=128,
            )
        return replace(cfg, attention_bias=0.0)

    def head_sweep(self) -> list[tuple[int, int]]:
        """(S, H) of the sweep over H."""
        counts = (1, 2, 4, 8) if self.quick else self.head_counts
        return [(self.base().S, H) for H in sorted(counts)]

    def size_sweep(self) -> list[tuple[int, int]]:
        """(S, H) of the sweep over S."""
        sizes = (4, 6) if self.quick else self.sizes
        return [(S, self.size_heads) for S in sorted(sizes)]

    def trainings(self) -> dict[tuple[int, int], EmergenceConfig]:
        base = self.base()
        return {
            (S, H): replace(base, S=S, heads=H, out=self.run_dir() / f"S{S}-H{H}")
            for S, H in sorted({*self.head_sweep(), *self.size_sweep()})
        }

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def compute(cfg: TimesConfig) -> tuple[xr.Dataset, dict]:
    runs = cfg.trainings()
    times = {}
    for key, training in runs.items():
        emergence_training.run(training)
        ds, _ = load(training.out)
        steps = ds["step"].values
        times[key] = emergence_times(steps, ds["cell_loss"].values)  # (seed, cell)
    heads, sizes = cfg.head_sweep(), cfg.size_sweep()
    counts = [H for _, H in heads]
    H0 = counts[0]
    ref = cell_survival(steps, times[heads[0]])  # (step, cell)
    cell_cdf = np.stack([1 - survival(steps, times[k]) for k in heads])
    lottery_cell = np.stack([1 - lottery_survival(ref, H, H0) for H in counts])
    run_t = np.stack([run_times(times[k]) for k in heads])  # (H, seed)
    run_cdf = np.stack([cdf(steps, t) for t in run_t])
    lottery_run = np.stack([lottery_run_cdf(ref, H, H0) for H in counts])
    size_cell_cdf = np.stack([1 - survival(steps, times[k]) for k in sizes])
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
        "emergence_rule": emergence_training.EMERGENCE_RULE,
        "run_rule": RUN_RULE,
        "lottery_rule": LOTTERY_RULE,
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


def run(cfg: TimesConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


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
