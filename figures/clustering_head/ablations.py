"""Figure clustering-head-ablations: success rate and final test accuracy against the learning
rate, the batch size and the FFN width, one axis at a time around the paper's default (spec
clustering_head.md §7 clustering-head-ablations, §4 ablation grids, §5.5 seed dependence).

Every grid point is a vmapped run of the clustering-head experiment (p = 2, L = 12, k = 5, Adam, no
Hessian logging) that differs from the default (lr 3e-3, batch 32, m = 32) in one coordinate; the
FFN init is shared across widths (unit i's draws do not depend on m, §3). A seed succeeds when its
final test accuracy exceeds 0.98 (§4); the success rate of a point carries a Wilson score 95%
interval. Drawn: success rate and mean +- std of the final test accuracy against lr (top axis: the
gradient-descent sharpness threshold 2/lr, §5.4), batch and m on log axes, the default point
starred; and, for the default setting, each seed's final test accuracy against its seed id with its
success flag, and the distribution of those accuracies (the seed dependence of §5.5).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.ticker import MaxNLocator

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from simulate.clustering_head.outcomes import (
    AXES,
    INTERVAL_RULE,
    ablation_points,
    learning_rates,
    point_name,
    wilson_interval,
)
from simulate.clustering_head.training import SUCCESS_ACCURACY, ClusteringSetting, run_or_reuse
from simulate.store import load, read_summary
from theory.validation import require

FIGURE_ID = "clustering-head-ablations"
PAPER = ClusteringSetting()
"""the paper's setting: its lr, batch and FFN width m are the default point."""
QUICK = {"lr_values": 3, "batches": (32, 2048), "widths": (4, 32), "seeds": 8, "epochs": 50}
"""--quick: the CPU setting (a subset of each grid, fewer seeds and epochs)."""


@dataclass(frozen=True)
class AblationsConfig(FigureOptions):
    """One-axis ablations around the paper's default: the spec's CPU grids (a subset of the
    paper's), 32 seeds, the paper's 1000 epochs (300, the spec's CPU budget, undercounts: in 32
    default seeds the first epoch above 0.98 ranged over 192-952). --quick: lr 3 values, batch
    {32, 2048}, m {4, 32}, 8 seeds, 50 epochs."""

    train: Annotated[ClusteringSetting, Flat] = ClusteringSetting(
        seeds=32, epochs=1000, epochs_per_chunk=100, hessian_iterations=0
    )
    """every grid point's run: the default point is its lr, batch and width m; the same seed
    ids at every point."""
    lr_values: int = 10
    """number of log-spaced learning rates in [lr_min, lr_max] (the default lr is added)."""
    lr_min: float = 1e-4
    """smallest learning rate."""
    lr_max: float = 1.0
    """largest learning rate."""
    batches: tuple[int, ...] = (8, 32, 128, 2048)
    """batch sizes in sequences (the default batch is added; >= 2048 is full batch)."""
    widths: tuple[int, ...] = (4, 8, 32, 128)
    """FFN widths m in hidden units (the default width is added)."""

    def __post_init__(self) -> None:
        require(self.lr_values >= 1, "lr_values", self.lr_values, "an integer >= 1")
        require(
            np.isfinite(self.lr_min) and self.lr_min > 0,
            "lr_min",
            self.lr_min,
            "a learning rate > 0",
        )
        require(
            np.isfinite(self.lr_max) and self.lr_max >= self.lr_min,
            "lr_max",
            self.lr_max,
            f"a learning rate >= lr_min = {self.lr_min}",
        )
        require(
            len(self.batches) >= 1 and all(b >= 1 for b in self.batches),
            "batches",
            self.batches,
            "batch sizes >= 1",
        )
        require(
            len(self.widths) >= 1 and all(m >= 1 for m in self.widths),
            "widths",
            self.widths,
            "FFN widths >= 1",
        )
        self.setting()  # the runs as resolved (--quick included) are valid before any compute

    def setting(self) -> AblationsConfig:
        """The configuration actually run (--quick replaces grids, seeds and epochs)."""
        if not self.quick:
            return self
        grid = {k: self.quick_or(k, QUICK[k]) for k in ("lr_values", "batches", "widths")}
        epochs = QUICK["epochs"]
        train = self.quick_setting(
            "train", {"seeds": QUICK["seeds"], "epochs": epochs, "epochs_per_chunk": epochs // 10}
        )
        return replace(self, quick=False, train=train, **grid)

    def default_point(self) -> dict[str, float]:
        return {"lr": self.train.lr, "batch": self.train.batch, "width": self.train.width}


def training(cfg: AblationsConfig, point: dict) -> ClusteringSetting:
    """The run of one grid point."""
    return replace(
        cfg.train, lr=float(point["lr"]), batch=int(point["batch"]), width=int(point["width"])
    )


def compute(cfg: AblationsConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    cfg = cfg.setting()
    default = cfg.default_point()
    points = ablation_points(
        learning_rates(cfg.lr_values, cfg.lr_min, cfg.lr_max), cfg.batches, cfg.widths, default
    )
    seeds, epochs = cfg.train.seeds, cfg.train.total_epochs
    accuracy, status, epochs_logged, seconds = [], [], [], []
    seed_ids = np.array(cfg.train.seed_ids)
    for i, point in enumerate(points):
        tcfg = training(cfg, point)
        output = cfg.run_output(run_dir, point_name(point))
        if not cfg.quiet:
            print(
                f"point {i + 1}/{len(points)}: {point_name(point)} ({seeds} seeds, "
                f"{epochs} epochs) -> {output.path}"
            )
        ds, _ = load(run_or_reuse(tcfg, output))
        run_summary = read_summary(output.path)
        accuracy.append(ds["test_accuracy"].isel(step=-1).values)
        status.append(run_summary["status"])
        epochs_logged.append(int(ds["step"].values[-1]) // tcfg.steps_per_epoch)
        seconds.append(float(run_summary.get("run_seconds", np.nan)))
        seed_ids = ds["seed"].values
    accuracy = np.asarray(accuracy, float)
    success = np.nan_to_num(accuracy, nan=0.0) > SUCCESS_ACCURACY
    data = xr.Dataset(
        {
            "final_test_accuracy": (("point", "seed"), accuracy),
            "success": (("point", "seed"), success),
        },
        coords={
            "point": np.arange(len(points)),
            "seed": seed_ids,
            **{a: ("point", np.array([p[a] for p in points])) for a in AXES},
        },
    )
    successes = success.sum(1)
    lo, hi = wilson_interval(successes, seeds)
    rows = [
        {
            "axis": p["axis"],
            "lr": p["lr"],
            "batch": p["batch"],
            "width": p["width"],
            "sharpness_threshold": 2 / p["lr"],
            "seeds": seeds,
            "successes": int(successes[i]),
            "success_rate": float(success[i].mean()),
            "success_interval_95": [float(lo[i]), float(hi[i])],
            "mean_final_test_accuracy": float(np.nanmean(accuracy[i])),
            "std_final_test_accuracy": float(np.nanstd(accuracy[i])),
            "status": status[i],
            "epochs_logged": epochs_logged[i],
            "run_seconds": seconds[i],
        }
        for i, p in enumerate(points)
    ]
    default = rows[0]
    summary = {
        "success_rule": f"final test accuracy > {SUCCESS_ACCURACY}",
        "interval_rule": INTERVAL_RULE,
        "sharpness_threshold_rule": "2 / lr: the stability threshold of gradient descent on the "
        "top Hessian eigenvalue (§5.4); Adam's preconditioned "
        "sharpness has (2 + 2 beta1) / ((1 - beta1) lr) = 38 / lr "
        "at beta1 = 0.9 (Cohen et al. 2022)",
        "divergence_rule": "a non-finite loss or parameter in one seed ends every seed of its "
        "point there; accuracies are then those of the last logged epoch "
        "(epochs_logged) and non-finite ones count as failures",
        "epochs": epochs,
        "seeds": seeds,
        "seed_ids": seed_ids,
        "default": default,
        "points": rows,
        "default_success_rate": default["success_rate"],
        "default_success_interval_95": default["success_interval_95"],
        "default_seeds": seeds,
        "default_success_per_seed": success[0],
        "default_final_test_accuracy_per_seed": accuracy[0],
    }
    return data, summary


def _axis_points(data: xr.Dataset, axis: str, default: dict) -> tuple[np.ndarray, np.ndarray]:
    """(x values, point indices) of one ablation axis: the points at the default in every other
    coordinate (the default point included), sorted by x."""
    others = [np.isclose(data[a].values, default[a]) for a in AXES if a != axis]
    rows = np.nonzero(np.logical_and.reduce(others))[0]
    x = data[axis].values[rows].astype(float)
    order = np.argsort(x)
    return x[order], rows[order]


LABELS = {
    "lr": "Adam learning rate lr",
    "batch": "batch size (sequences per step)",
    "width": "FFN width m (hidden units)",
}
NAMES = {"lr": "learning rate", "batch": "batch size", "width": "FFN width m"}


def _two_over(x):
    with np.errstate(divide="ignore"):
        return 2 / np.asarray(x, float)


def plot(data: xr.Dataset, summary: dict):
    seeds, epochs = summary["seeds"], summary["epochs"]
    default = summary["default"]
    rate = data["success"].values.mean(1)
    lo, hi = wilson_interval(data["success"].values.sum(1), seeds)
    acc = data["final_test_accuracy"].values
    diverged = np.array([p["status"] == "diverged" for p in summary["points"]])
    fig, axes = plt.subplots(2, 4, figsize=(19, 8.5))
    for col, axis in enumerate(AXES):
        x, rows = _axis_points(data, axis, default)
        top, bottom = axes[0, col], axes[1, col]
        top.errorbar(
            x,
            rate[rows],
            yerr=[rate[rows] - lo[rows], hi[rows] - rate[rows]],
            fmt="o-",
            color="C0",
            capsize=3,
            label="success rate, Wilson 95%",
        )
        bottom.errorbar(
            x,
            np.nanmean(acc[rows], 1),
            yerr=np.nanstd(acc[rows], 1),
            fmt="o-",
            color="C1",
            capsize=3,
            label="mean +- std over seeds",
        )
        for ax, y in ((top, rate[0]), (bottom, np.nanmean(acc[0]))):
            ax.plot(
                [default[axis]],
                [y],
                "*",
                ms=16,
                color="C3",
                zorder=5,
                label=f"default ({axis} = {default[axis]:g})",
            )
            if diverged[rows].any():
                ax.plot(
                    x[diverged[rows]],
                    np.full(diverged[rows].sum(), 0.02),
                    "x",
                    color="k",
                    ms=9,
                    label="run diverged (ended early)",
                )
            ax.set_xscale("log")
            ax.set_xlabel(LABELS[axis])
            if axis != "lr":  # integer grids: label the grid values themselves
                ax.set_xticks(x, [f"{v:g}" for v in x])
                ax.minorticks_off()
        bottom.axhline(
            SUCCESS_ACCURACY,
            color="gray",
            ls="--",
            lw=1,
            label=f"success threshold {SUCCESS_ACCURACY}",
        )
        top.set(
            ylabel="success rate (fraction of seeds)",
            ylim=(-0.04, 1.04),
            title=f"success rate vs {NAMES[axis]}",
        )
        bottom.set(
            ylabel="final test accuracy",
            ylim=(0.0, 1.04),
            title=f"final test accuracy vs {NAMES[axis]}",
        )
        if axis == "lr":
            for ax in (top, bottom):
                sec = ax.secondary_xaxis("top", functions=(_two_over, _two_over))
                sec.set_xlabel("sharpness threshold 2/lr (GD stability)")
        for ax in (top, bottom):
            ax.legend(fontsize=7, loc="best")
    ids = data["seed"].values
    ok = data["success"].values[0]
    ax = axes[0, 3]
    ax.scatter(ids[ok], acc[0][ok], color="C2", marker="o", label=f"success ({ok.sum()})")
    ax.scatter(ids[~ok], acc[0][~ok], color="C3", marker="x", label=f"failure ({(~ok).sum()})")
    ax.axhline(SUCCESS_ACCURACY, color="gray", ls="--", lw=1, label=f"threshold {SUCCESS_ACCURACY}")
    ax.set(
        xlabel="seed id",
        ylabel="final test accuracy",
        ylim=(0.0, 1.04),
        title=f"default setting: each seed (rate {rate[0]:.2f}, 95% [{lo[0]:.2f}, {hi[0]:.2f}])",
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="best")
    ax = axes[1, 3]
    ax.hist(np.nan_to_num(acc[0], nan=0.0), bins=np.linspace(0, 1, 41), color="C0")
    ax.axvline(SUCCESS_ACCURACY, color="gray", ls="--", lw=1, label=f"threshold {SUCCESS_ACCURACY}")
    ax.set(
        xlabel="final test accuracy",
        ylabel="seeds",
        title=f"default setting: final accuracy over {seeds} seeds",
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7)
    fig.suptitle(
        f"clustering head, one-axis ablations around lr {default['lr']:g}, batch "
        f"{default['batch']}, m {default['width']}: {seeds} seeds per point, {epochs} "
        f"epochs; success = {summary['success_rule']}"
    )
    fig.tight_layout()
    return fig


def report(summary: dict) -> str:
    rows = [
        [
            p["axis"],
            p["lr"],
            p["batch"],
            p["width"],
            f"{p['successes']}/{p['seeds']}",
            p["success_rate"],
            p["success_interval_95"][0],
            p["success_interval_95"][1],
            p["mean_final_test_accuracy"],
            p["std_final_test_accuracy"],
            p["status"],
            p["run_seconds"],
        ]
        for p in summary["points"]
    ]
    lo, hi = summary["default_success_interval_95"]
    return (
        format_table(
            [
                "axis",
                "lr",
                "batch",
                "m",
                "successes",
                "rate",
                "95% lo",
                "95% hi",
                "mean acc",
                "std acc",
                "status",
                "run s",
            ],
            rows,
        )
        + f"\ndefault setting: success rate {summary['default_success_rate']:.3g} over "
        f"{summary['default_seeds']} seeds (95% Wilson [{lo:.3g}, {hi:.3g}]) after "
        f"{summary['epochs']} epochs; success = {summary['success_rule']}"
    )


FIGURE = Figure(
    id=FIGURE_ID,
    paper="clustering-head",
    description="success rate (Wilson 95%) and final test accuracy vs lr (with 2/lr), batch and "
    "m, one axis at a time around the default; per-seed outcomes of the default setting",
    config=AblationsConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read="Columns 1-3, one axis at a time around the default (red star; lr 3e-3, batch 32, "
    "m = 32), log x: top, the success rate (final test accuracy > 0.98) with its Wilson 95% "
    "interval; bottom, the mean +- std over seeds of the final test accuracy with the success "
    "threshold 0.98 dashed; a black x at the bottom marks a point whose run diverged. The lr "
    "column's top axis gives GD's sharpness threshold 2/lr (a reference: §7 makes no closed-form "
    "prediction, and Adam's threshold on the preconditioned sharpness is 38/lr). Column 4, the "
    "default setting: each seed's final test accuracy against its seed id (circle: success, x: "
    "failure) and their histogram: the seed dependence of §5.5.",
)
