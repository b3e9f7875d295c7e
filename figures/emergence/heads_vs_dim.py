"""Figure emergence-heads-vs-dim: many heads against big heads on the linear map mod 2 (authors'
blog Fig. 5; spec emergence.md §7 emergence-heads-vs-dim, lottery model of §5.3).

Left: final loss at a fixed step budget against the number of heads H (log2 axis) for each head
dimension d_h ("scaling width", width = H d_h) and for the fixed-width sweep (d_h = width / H),
one dot per seed and the seed mean, with the floor L_min(S) and ln 2. Right: fraction of output
cells emerged within the budget (EMERGENCE_RULE) against H, measured, next to the lottery
prediction P_H = 1 - mean_i Fbar_{i,H0}(t_budget)^(H / H0) estimated from each sweep's smallest
H0 (LOTTERY_RULE). The summary compares configurations of equal width H d_h (equal parameter
count: the parameters depend on H d_h only): many small heads against few big ones.

Only the linear-map half of the blog figure is drawn: the cellular-automaton half needs CA runs at
8192 tokens per step for every (H, d_h), which the CA figure (emergence-ca-plateau) owns and which
do not fit a CPU quick run next to these.
"""

from __future__ import annotations

import math
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
    COMPARISON_RULE,
    EMERGENCE_RULE,
    LOTTERY_BUDGET_RULE,
    SUCCESS_RULE,
    emergence_times,
    matched_width,
    solved,
)
from simulate.emergence.models import parameter_count
from simulate.emergence.tasks import linear_map_floor
from simulate.emergence.training import EmergenceConfig, run_stored
from simulate.measure.survival import column_survival
from theory.emergence.levels import lottery_pooled_survival
from theory.validation import require

QUICK = {
    "S": 6,
    "batch": 64,
    "lr": 3e-3,
    "steps": 1500,
    "chunk": 500,
    "log_every": 50,
    "seeds": 8,
    "eval_batch": 128,
}
"""--quick: S = 6, batch 64, lr 3e-3, 1500 steps, 8 seeds (and H in {1, 2, 4, 8}, width 32)."""
QUICK_HEAD_COUNTS, QUICK_WIDTH = (1, 2, 4, 8), 32


@dataclass(frozen=True)
class HeadsVsDimConfig(FigureOptions):
    """Linear map S = 16, s = 3, H in {1, 2, 4, 8, 16}, d_h in {4, 8}, fixed width 64, 3 seeds,
    3k steps (spec CPU setting). --quick: S = 6, H in {1, 2, 4, 8}, d_h in {4, 8}, fixed width
    32, batch 64, lr 3e-3, 1500 steps, 8 seeds."""

    train: Annotated[EmergenceConfig, Flat] = EmergenceConfig(seeds=3, steps=3000)
    """the training runs (linear map, transformer, no bias); heads and head_dim are swept."""
    head_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of heads H of every sweep."""
    head_dims: tuple[int, ...] = (4, 8)
    """head dimensions d_h of the scaling-width sweeps (width = H d_h)."""
    fixed_width: int = 64
    """width of the fixed-width sweep (d_h = width / H; every H must divide it)."""

    def __post_init__(self):
        train = self.train
        require(train.task == "linear_map", "task", train.task, "linear_map (this figure)")
        require(train.model == "transformer", "model", train.model, "transformer (this figure)")
        require(
            len(self.head_counts) >= 2 and min(self.head_counts) >= 1,
            "head_counts",
            self.head_counts,
            "at least two numbers of heads >= 1",
        )
        require(
            len(self.head_dims) >= 1 and min(self.head_dims) >= 1,
            "head_dims",
            self.head_dims,
            "head dimensions >= 1",
        )
        counts, width = self.fixed_width_sweep()
        require(
            all(width % H == 0 for H in counts),
            "fixed_width",
            width,
            f"a multiple of every H in {counts}",
        )
        self.trainings()  # the runs as resolved (--quick included) are valid before any compute

    def base(self) -> EmergenceConfig:
        cfg = self.quick_setting("train", QUICK)
        return replace(cfg, attention_bias=0.0)

    def fixed_width_sweep(self) -> tuple[tuple[int, ...], int]:
        """The numbers of heads H of every sweep and the fixed width."""
        counts = self.quick_or("head_counts", QUICK_HEAD_COUNTS)
        return tuple(sorted(counts)), self.quick_or("fixed_width", QUICK_WIDTH)

    def sweeps(self) -> dict[str, list[tuple[int, int]]]:
        """Sweep name -> (H, d_h) per point."""
        counts, width = self.fixed_width_sweep()
        out = {f"d_h = {d}": [(H, d) for H in counts] for d in self.head_dims}
        out[f"fixed width {width}"] = [(H, width // H) for H in counts]
        return out

    def trainings(self) -> dict[tuple[int, int], EmergenceConfig]:
        """(H, d_h) -> its run (stored in run_dir/H{H}-d{d_h})."""
        base = self.base()
        configs = sorted({c for sweep in self.sweeps().values() for c in sweep})
        return {(H, d): replace(base, heads=H, head_dim=d) for H, d in configs}


def compute(cfg: HeadsVsDimConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    runs = cfg.trainings()
    keys = list(runs)
    final, times = [], []
    for H, d in keys:
        ds = run_stored(runs[H, d], cfg.run_output(run_dir, f"H{H}-d{d}"))
        final.append(ds["loss"].values[:, -1])
        times.append(emergence_times(ds["step"].values, ds["cell_loss"].values))
    base = runs[keys[0]]
    final, times = np.stack(final), np.stack(times)  # (run, seed), (run, seed, cell)
    budget = [ds["step"].values[-1]]
    survival = np.stack([column_survival(budget, t)[0] for t in times])  # (run, cell): Fbar_i
    floor = linear_map_floor(base.S)
    index = {key: k for k, key in enumerate(keys)}
    sweeps = cfg.sweeps()
    lottery = {}
    for name, points in sweeps.items():
        H0, heads = points[0][0], np.array([H for H, _ in points], float)
        lottery[name] = 1 - lottery_pooled_survival(survival[index[points[0]]], H0, heads[:, None])
    mean = final.mean(1)
    comparison = [
        {
            "width": w,
            "configs": [list(c) for c in group],
            "mean_final_loss": [float(mean[index[c]]) for c in group],
            "many_small_beat_few_big": bool(mean[index[group[0]]] < mean[index[group[-1]]]),
        }
        for w, group in matched_width(keys).items()
    ]
    data = xr.Dataset(
        {
            "final_loss": (("run", "seed"), final),
            "emergence_step": (("run", "seed", "cell"), times),
            "H": (("run",), np.array([k[0] for k in keys])),
            "head_dim": (("run",), np.array([k[1] for k in keys])),
        },
        coords={
            "run": np.arange(len(keys)),
            "seed": np.arange(base.seeds),
            "cell": np.arange(base.S),
        },
    )
    summary = {
        "S": base.S,
        "s": base.s,
        "steps": base.steps,
        "seeds": base.seeds,
        "batch": base.sequences_per_step,
        "lr": base.lr,
        "loss_floor": floor,
        "ln_2": math.log(2),
        "runs": [list(k) for k in keys],
        "parameter_count": [parameter_count(H, d, base.length - 1) for H, d in keys],
        "sweeps": {name: [index[c] for c in pts] for name, pts in sweeps.items()},
        "final_loss_per_seed": final,
        "mean_final_loss": mean,
        "emergence_rule": EMERGENCE_RULE,
        "fraction_cells_emerged": 1 - survival.mean(1),
        "lottery_rule": LOTTERY_BUDGET_RULE,
        "lottery_fraction_cells_emerged": lottery,
        "success_rule": SUCCESS_RULE,
        "success_fraction": solved(final, floor).mean(1),
        "comparison_rule": COMPARISON_RULE,
        "more_heads_beat_bigger_heads": comparison,
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            H,
            d,
            H * d,
            summary["parameter_count"][k],
            summary["mean_final_loss"][k],
            summary["fraction_cells_emerged"][k],
            summary["success_fraction"][k],
        ]
        for k, (H, d) in enumerate(summary["runs"])
    ]
    lines = [
        format_table(
            [
                "H",
                "d_h",
                "width",
                "parameters",
                "final loss (nats)",
                "cells emerged",
                "runs solved",
            ],
            rows,
        )
    ]
    for c in summary["more_heads_beat_bigger_heads"]:
        pairs = ", ".join(
            f"H={H},d_h={d}: {loss:.4g}" for (H, d), loss in zip(c["configs"], c["mean_final_loss"])
        )
        lines.append(
            f"width {c['width']}: {pairs} -> many small heads "
            + ("win" if c["many_small_beat_few_big"] else "do not win")
        )
    lines.append(
        f"S = {summary['S']}, s = {summary['s']}, {summary['seeds']} seeds, budget "
        f"{summary['steps']} steps; floor {summary['loss_floor']:.4f} nats"
    )
    return "\n".join(lines)


LOTTERY_TOLERANCE = 0.1
"""a fraction of (seed, cell) pairs: agrees within 0.1."""


def predictions(summary: dict) -> list[Prediction]:
    """Per sweep and H above its reference H0: the fraction of cells emerged within the budget
    against the lottery model P_H = 1 - mean_i Fbar_{i,H0}^(H/H0) (§5.3)."""
    emerged = np.asarray(summary["fraction_cells_emerged"], float)
    rows = []
    for name, idx in summary["sweeps"].items():
        lottery = np.asarray(summary["lottery_fraction_cells_emerged"][name], float)
        H0 = summary["runs"][idx[0]][0]
        for p, k in enumerate(idx[1:], start=1):
            H, d = summary["runs"][k]
            rows.append(
                Prediction(
                    f"fraction of (seed, cell) emerged within {summary['steps']} steps, H = {H}, "
                    f"d_h = {d} ({name} sweep, lottery from H0 = {H0})",
                    float(lottery[p]),
                    float(emerged[k]),
                    LOTTERY_TOLERANCE,
                    "EMERGENCE_RULE over all seeds and cells against LOTTERY_BUDGET_RULE "
                    "(independent heads, Fbar measured at H0); a fraction: within 0.1",
                    "difference",
                )
            )
    return rows


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    H = data["H"].values
    final = data["final_loss"].values
    emerged = np.asarray(summary["fraction_cells_emerged"], float)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.cm.tab10(np.arange(len(summary["sweeps"])))
    for color, (name, idx) in zip(colors, summary["sweeps"].items()):
        idx = np.asarray(idx)
        ls = "--" if name.startswith("fixed") else "-"
        for k in idx:
            left.scatter(np.full(final.shape[1], H[k]), final[k], color=color, s=12, alpha=0.6)
        left.plot(H[idx], final[idx].mean(1), color=color, ls=ls, marker="o", label=name)
        right.plot(H[idx], emerged[idx], color=color, ls=ls, marker="o", label=f"{name}: measured")
        right.plot(
            H[idx],
            summary["lottery_fraction_cells_emerged"][name],
            color=color,
            ls=":",
            marker="x",
            label=f"{name}: lottery from H = {H[idx[0]]}",
        )
    left.axhline(
        float(summary["loss_floor"]), color="tab:red", lw=1, label=r"floor $(S-1)\ln 2/(2S-1)$"
    )
    left.axhline(math.log(2), color="grey", ls="-.", lw=1, label=r"$\ln 2$")
    left.set(
        xlabel="heads H",
        ylabel=f"loss after {summary['steps']} steps (nats)",
        title=f"linear map S = {summary['S']}, s = {summary['s']}: final loss vs heads",
    )
    right.set(
        xlabel="heads H",
        ylim=(-0.02, 1.02),
        ylabel="fraction of (seed, cell) emerged within budget",
        title="emergence within the budget vs the lottery model",
    )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


FIGURE = Figure(
    "emergence-heads-vs-dim",
    "emergence",
    "linear map: final loss and cells emerged vs heads H at scaling width (d_h fixed) and "
    "fixed width, with the lottery prediction; CA half not drawn (blog Fig. 5)",
    HeadsVsDimConfig,
    compute,
    plot,
    report,
    how_to_read="Left: final loss after the budget against the number of heads H (log2 axis), one "
    "colour per sweep: solid the scaling-width sweeps (fixed d_h, width H d_h), dashed the "
    "fixed-width sweep (d_h = width/H); dots are seeds, lines their means; red: the floor "
    "L_min(S), grey: ln 2. Equal width means equal parameter count, so along the fixed-width line "
    "more heads beat bigger heads when the loss falls with H. Right: the fraction of (seed, cell) "
    "pairs emerged within the budget, measured (solid/dashed) beside the lottery model from the "
    "sweep's smallest H0 (dotted, x markers), which treats heads as independent searchers; "
    "measured above dotted means the heads do better than independent tickets.",
    predictions=predictions,
)
