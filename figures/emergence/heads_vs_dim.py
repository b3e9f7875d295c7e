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

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.emergence import training as emergence_training
from simulate.emergence.tasks import linear_map_floor
from simulate.emergence.training import EmergenceConfig, emergence_times
from simulate.store import load
from theory.emergence import levels as emergence_theory
from theory.validation import require

FIGURE_ID = "emergence-heads-vs-dim"
LOTTERY_RULE = (
    "lottery prediction (spec §5.3): fraction of cells emerged within the budget "
    "P_H = 1 - mean_i Fbar_i(t_budget)^(H/H0), Fbar_i = fraction of seeds in which "
    "cell i has not emerged by the last step, measured at the sweep's smallest H0"
)
SUCCESS_RULE = "run solved: final loss <= 1.05 L_min(S) + 1e-3 nats (spec §6)"
COMPARISON_RULE = (
    "at equal width H d_h (hence equal parameter count: the model's parameters "
    "depend on H d_h only): mean final loss over seeds of the configuration with "
    "the most heads against the one with the fewest; many small heads win when "
    "their loss is lower"
)


def lottery_success(survival_h0, H, H0: int) -> np.ndarray:
    """Lottery model (spec §5.3): fraction of cells emerged with H heads,
    1 - mean_i Fbar_{i,H0}^(H/H0), from per-cell survivals Fbar_{i,H0} at the budget."""
    heads = np.asarray(H, float)[..., None]
    return 1 - np.mean(
        emergence_theory.lottery_survival(np.asarray(survival_h0, float), H0, heads), axis=-1
    )


def matched_width(configs) -> dict[int, list[tuple[int, int]]]:
    """(H, d_h) configurations grouped by width H d_h, most heads first; widths held by fewer
    than two configurations are dropped."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for H, d in sorted(set(configs), key=lambda c: -c[0]):
        groups.setdefault(H * d, []).append((H, d))
    return {w: g for w, g in sorted(groups.items()) if len(g) >= 2}


def parameter_count(H: int, d_h: int, length: int, vocab: int = 2) -> int:
    """Parameters of the one-layer ``CausalTransformer`` of width d = H d_h (a function of the
    width only: the heads split d, they do not add parameters)."""
    d = H * d_h
    return vocab * d + length * d + 12 * d * d + d * vocab


@dataclass(frozen=True)
class HeadsVsDimConfig(EmergenceConfig):
    """Linear map S = 16, s = 3, H in {1, 2, 4, 8, 16}, d_h in {4, 8}, fixed width 64, 3 seeds,
    3k steps (spec CPU setting)."""

    head_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of heads H of every sweep."""
    head_dims: tuple[int, ...] = (4, 8)
    """head dimensions d_h of the scaling-width sweeps (width = H d_h)."""
    fixed_width: int = 64
    """width of the fixed-width sweep (d_h = width / H; every H must divide it)."""
    seeds: int = 3
    """seeds per configuration, vmapped."""
    steps: int = 3000
    """step budget of every run (a multiple of chunk)."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/emergence-heads-vs-dim/)."""
    quick: bool = False
    """CPU-sized run: S = 6, H in {1, 2, 4, 8}, d_h in {4, 8}, fixed width 32, batch 64,
    lr 3e-3, 1500 steps, 8 seeds."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        super().__post_init__()
        require(self.task == "linear_map", "task", self.task, "linear_map (this figure)")
        require(self.model == "transformer", "model", self.model, "transformer (this figure)")
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
        require(
            all(self.fixed_width % H == 0 for H in self.head_counts),
            "fixed_width",
            self.fixed_width,
            f"a multiple of every H in {self.head_counts}",
        )

    def base(self) -> EmergenceConfig:
        cfg = self.experiment()
        if self.quick:
            cfg = replace(
                cfg,
                S=6,
                batch=64,
                lr=3e-3,
                steps=1500,
                chunk=500,
                log_every=50,
                seeds=8,
                eval_batch=128,
            )
        return replace(cfg, attention_bias=0.0)

    def sweeps(self) -> dict[str, list[tuple[int, int]]]:
        """Sweep name -> (H, d_h) per point."""
        counts = (1, 2, 4, 8) if self.quick else tuple(sorted(self.head_counts))
        width = 32 if self.quick else self.fixed_width
        out = {f"d_h = {d}": [(H, d) for H in counts] for d in self.head_dims}
        out[f"fixed width {width}"] = [(H, width // H) for H in counts]
        return out

    def trainings(self) -> dict[tuple[int, int], EmergenceConfig]:
        base = self.base()
        configs = sorted({c for sweep in self.sweeps().values() for c in sweep})
        return {
            (H, d): replace(base, heads=H, head_dim=d, out=self.run_dir() / f"H{H}-d{d}")
            for H, d in configs
        }

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def compute(cfg: HeadsVsDimConfig) -> tuple[xr.Dataset, dict]:
    runs = cfg.trainings()
    keys = list(runs)
    final, times = [], []
    for key in keys:
        emergence_training.run(runs[key])
        ds, _ = load(runs[key].out)
        final.append(ds["loss"].values[:, -1])
        times.append(emergence_times(ds["step"].values, ds["cell_loss"].values))
    base = runs[keys[0]]
    final, times = np.stack(final), np.stack(times)  # (run, seed), (run, seed, cell)
    survival = np.isnan(times).mean(1)  # (run, cell): Fbar_i at the budget
    floor = linear_map_floor(base.S)
    index = {key: k for k, key in enumerate(keys)}
    sweeps = cfg.sweeps()
    lottery = {}
    for name, points in sweeps.items():
        H0 = points[0][0]
        lottery[name] = lottery_success(survival[index[points[0]]], [H for H, _ in points], H0)
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
        "emergence_rule": emergence_training.EMERGENCE_RULE,
        "fraction_cells_emerged": 1 - survival.mean(1),
        "lottery_rule": LOTTERY_RULE,
        "lottery_fraction_cells_emerged": lottery,
        "success_rule": SUCCESS_RULE,
        "success_fraction": (final <= 1.05 * floor + 1e-3).mean(1),
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


def run(cfg: HeadsVsDimConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


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
