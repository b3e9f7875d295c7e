"""Figure emergence-times: distributions over seeds of per-cell emergence times of the linear map
against the number of heads H (spec emergence.md §7 emergence-times, lottery model of §5.3).

Survival function over seeds and cells (fraction of output cells not yet emerged, EMERGENCE_RULE)
against the step for each H, seeds vmapped; dashed: the lottery prediction
S_H(t) = S_{H0}(t)^{H / H0} from the smallest H0. Cells that never emerge stay in the survival
function (the fraction of failures within the budget is its final value).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import xarray as xr

from figures.output import figure_dir, format_table, run_figure
from simulate import emergence_training
from simulate.emergence_training import EmergenceConfig, emergence_times
from simulate.store import load
from theory.validation import require

FIGURE_ID = "emergence-times"
LOTTERY_RULE = ("lottery prediction (spec §5.3): S_H(t) = S_H0(t)^(H/H0), S = fraction of (seed, "
                "cell) pairs not emerged by step t, H0 the smallest H")


@dataclass(frozen=True)
class TimesConfig(EmergenceConfig):
    """Linear map S = 16, s = 3, H in {1, 2, 4, 8, 16}, d_h = 8, 32 seeds vmapped, 5k steps."""

    head_counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    """numbers of heads H, one vmapped run each."""
    seeds: int = 32
    """seeds per H, vmapped."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/emergence-times/)."""
    quick: bool = False
    """CPU-sized run: S = 8, H in {1, 8}, 4 seeds, batch 64, lr 3e-3, 1500 steps."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        super().__post_init__()
        require(self.task == "linear_map", "task", self.task, "linear_map (this figure)")
        require(len(self.head_counts) >= 1 and min(self.head_counts) >= 1, "head_counts",
                self.head_counts, "numbers of heads >= 1")

    def trainings(self) -> dict[int, EmergenceConfig]:
        base = {f.name: getattr(self, f.name) for f in fields(EmergenceConfig)}
        cfg = EmergenceConfig(**base)
        counts = self.head_counts
        if self.quick:
            cfg = replace(cfg, S=8, batch=64, lr=3e-3, steps=1500, chunk=500, log_every=25,
                          seeds=4)
            counts = (1, 8)
        return {H: replace(cfg, heads=H, model="transformer", attention_bias=0.0,
                           out=self.run_dir() / f"H{H}") for H in sorted(counts)}

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def survival(steps, times) -> np.ndarray:
    """Fraction of entries of ``times`` (nan: never) that have not emerged by each step."""
    t = np.asarray(times, float).ravel()
    t = np.where(np.isnan(t), np.inf, t)
    return np.array([(t > step).mean() for step in steps])


def compute(cfg: TimesConfig) -> tuple[xr.Dataset, dict]:
    runs = cfg.trainings()
    counts = list(runs)
    times, surv = [], []
    for H in counts:
        emergence_training.run(runs[H])
        ds, _ = load(runs[H].out)
        steps = ds["step"].values
        t = emergence_times(steps, ds["cell_loss"].values)  # (seed, cell)
        times.append(t)
        surv.append(survival(steps, t))
    surv = np.stack(surv)
    lottery = surv[0][None] ** (np.asarray(counts)[:, None] / counts[0])
    data = xr.Dataset({"survival": (("H", "step"), surv), "lottery": (("H", "step"), lottery),
                       "emergence_step": (("H", "seed", "cell"), np.stack(times))},
                      coords={"H": counts, "step": steps, "seed": ds["seed"].values,
                              "cell": ds["cell"].values})
    finite = [t[np.isfinite(t)] for t in times]
    summary = {"heads": counts, "seeds": runs[counts[0]].seeds, "steps": runs[counts[0]].steps,
               "emergence_rule": emergence_training.EMERGENCE_RULE, "lottery_rule": LOTTERY_RULE,
               "fraction_emerged": 1 - surv[:, -1],
               "median_emergence_step": [float(np.median(f)) if f.size else float("nan")
                                         for f in finite],
               "lottery_fraction_emerged": 1 - lottery[:, -1],
               "emergence_steps": np.stack(times)}
    return data, summary


def report(summary: dict) -> str:
    rows = [[H, summary["fraction_emerged"][k], summary["lottery_fraction_emerged"][k],
             summary["median_emergence_step"][k]] for k, H in enumerate(summary["heads"])]
    return (format_table(["H", "fraction of cells emerged", "lottery prediction",
                          "median emergence step (emerged cells)"], rows)
            + f"\n{summary['seeds']} seeds per H, budget {summary['steps']} steps")


def run(cfg: TimesConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    steps = data["step"].values
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.cm.viridis(np.linspace(0, 0.85, data.sizes["H"]))
    for color, H in zip(colors, data["H"].values):
        ax.step(steps, data["survival"].sel(H=H).values, where="post", color=color,
                label=f"H = {H} (measured)")
        if H != data["H"].values[0]:
            ax.plot(steps, data["lottery"].sel(H=H).values, color=color, ls="--", lw=1,
                    label=f"H = {H} (lottery from H = {data['H'].values[0]})")
    ax.set(xlabel="training step", ylabel="fraction of (seed, cell) not yet emerged",
           ylim=(-0.02, 1.02),
           title=f"linear map: survival of emergence times over {summary['seeds']} seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
