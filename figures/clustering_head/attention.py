"""Figure clustering-head-attention: does attention migrate to the first k positions? (spec
clustering_head.md §7 clustering-head-attention, §5.1).

Seeds of the clustering-head experiment (paper defaults: p = 2, L = 12, k = 5, Adam 3e-3, batch 32).
Drawn: (a)-(b) the attention a_t of the probe inputs of one class (label 1) at epoch 0 and at the
final epoch, for the shown seed (the successful seed with the highest final A_k, else the seed with
the highest final A_k), with the boundary after position k; (c) the first-block attention mass
A_k = sum_{t<=k} a_t (test mean) against the epoch, mean +- std over seeds and each seed thin
(successful seeds solid), with the clustering-head condition A_k = 1 (a_t = 1/k on the first block,
§5.1) and the uniform level k/L.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.clustering_head.outcomes import shown_seed
from simulate.clustering_head.task import histograms
from simulate.clustering_head.training import SUCCESS_ACCURACY, ClusteringSetting, run_stored
from simulate.store import load

FIGURE_ID = "clustering-head-attention"
SHOWN_CLASS = 1
"""the class whose probe inputs are drawn."""
QUICK = {"seeds": 8, "epochs": 200, "epochs_per_chunk": 20}
"""--quick: 8 seeds, 200 epochs."""


@dataclass(frozen=True)
class AttentionConfig(FigureOptions):
    """Seeds of the clustering-head experiment (default: the paper's 1000 epochs, 16 seeds;
    --quick: 8 seeds, 200 epochs)."""

    train: Annotated[ClusteringSetting, Flat] = ClusteringSetting(
        seeds=16, epochs=1000, epochs_per_chunk=100, hessian_iterations=0
    )
    """the training run (paper defaults: p = 2, L = 12, k = 5, Adam 3e-3, batch 32)."""

    def __post_init__(self) -> None:
        self.training()  # the run as resolved (--quick included) is valid before any compute

    def training(self) -> ClusteringSetting:
        return self.quick_setting("train", QUICK)


def compute(cfg: AttentionConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    tcfg = cfg.training()
    ds, _ = load(run_stored(tcfg, cfg.run_output(run_dir)))
    spe = tcfg.steps_per_epoch
    mass = ds["attention_mass"].values
    acc = ds["test_accuracy"].values
    success = acc[:, -1] > SUCCESS_ACCURACY
    shown = shown_seed(mass[:, -1], success)
    hist = histograms(tcfg.sparsity, tcfg.modulus)
    probe_label = np.array(
        [
            sum(i * n for i, n in enumerate(hist[h])) % tcfg.modulus
            for h in ds["probe_histogram"].values
        ]
    )
    probe = ds["probe_attention"].isel(seed=shown, step=[0, -1]).values  # (2, probe, position)
    epochs = ds["step"].values // spe
    data = xr.Dataset(
        {
            "attention_mass": (("seed", "epoch"), mass),
            "test_accuracy": (("seed", "epoch"), acc),
            "probe_attention": (("frame", "probe", "position"), probe),
        },
        coords={
            "seed": ds["seed"].values,
            "epoch": epochs,
            "frame": [int(epochs[0]), int(epochs[-1])],
            "probe": ds["probe"].values,
            "probe_label": ("probe", probe_label),
            "position": ds["position"].values,
        },
    )
    k, L = tcfg.sparsity, tcfg.length
    summary = {
        "success_rule": f"final test accuracy > {SUCCESS_ACCURACY}",
        "epochs": tcfg.total_epochs,
        "seeds": tcfg.seeds,
        "sparsity": k,
        "length": L,
        "uniform_mass": k / L,
        "clustering_head_mass": 1.0,
        "shown_seed": int(ds["seed"].values[shown]),
        "shown_seed_rule": "successful seed with the highest final A_k, else highest final A_k",
        "success_per_seed": success.tolist(),
        "success_rate": float(success.mean()),
        "initial_mass_per_seed": mass[:, 0],
        "final_mass_per_seed": mass[:, -1],
        "final_test_accuracy_per_seed": acc[:, -1],
        "mean_final_mass_successful": float(mass[success, -1].mean())
        if success.any()
        else float("nan"),
        "mean_final_mass_failed": float(mass[~success, -1].mean())
        if (~success).any()
        else float("nan"),
        "shown_class": SHOWN_CLASS,
        "shown_probe_first_block_mass": [
            float(probe[f][probe_label == SHOWN_CLASS][:, :k].sum(1).mean()) for f in range(2)
        ],
    }
    return data, summary


def plot(data: xr.Dataset, summary: dict):
    k, L = summary["sparsity"], summary["length"]
    fig = plt.figure(figsize=(15, 4.4))
    grid = fig.add_gridspec(1, 3, width_ratios=(1, 1, 1.4))
    rows = data["probe_label"].values == summary["shown_class"]
    top = float(data["probe_attention"].values[:, rows].max())  # one colour scale for both frames
    for f in range(2):
        ax = fig.add_subplot(grid[0, f])
        im = ax.imshow(
            data["probe_attention"].values[f][rows],
            aspect="auto",
            cmap="viridis",
            vmin=0,
            vmax=top,
            extent=(0.5, L + 0.5, rows.sum() - 0.5, -0.5),
        )
        ax.axvline(k + 0.5, color="w", ls="--")
        ax.set(
            xlabel="position t",
            ylabel=f"probe input (class {summary['shown_class']})",
            title=f"attention a_t, epoch {int(data['frame'].values[f])} "
            f"(seed {summary['shown_seed']})",
        )
        fig.colorbar(im, ax=ax, label="a_t")
    ax = fig.add_subplot(grid[0, 2])
    epoch = data["epoch"].values
    mass = data["attention_mass"].values
    for s, ok in enumerate(summary["success_per_seed"]):
        ax.plot(
            epoch, mass[s], color="C2" if ok else "C3", lw=0.7, alpha=0.6, ls="-" if ok else ":"
        )
    mean, std = mass.mean(0), mass.std(0)
    ax.plot(epoch, mean, color="k", lw=2, label=f"mean over {mass.shape[0]} seeds")
    ax.fill_between(epoch, mean - std, mean + std, color="k", alpha=0.15, label="+- std")
    ax.plot([], [], color="C2", lw=0.7, label="successful seed")
    ax.plot([], [], color="C3", lw=0.7, ls=":", label="failed seed")
    ax.axhline(1.0, color="C0", ls="--", label="clustering head: A_k = 1")
    ax.axhline(k / L, color="gray", ls="--", label=f"uniform: k/L = {k / L:.3g}")
    ax.set(
        xlabel="epoch (64 steps)",
        ylabel="A_k, first-block attention mass",
        ylim=(0, 1.05),
        title="attention on the first k positions (test mean)",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def report(summary: dict) -> str:
    rows = [
        [i, ok, a, m0, m1]
        for i, (ok, a, m0, m1) in enumerate(
            zip(
                summary["success_per_seed"],
                summary["final_test_accuracy_per_seed"],
                summary["initial_mass_per_seed"],
                summary["final_mass_per_seed"],
            )
        )
    ]
    return (
        format_table(["seed", "success", "final test acc", "A_k epoch 0", "A_k final"], rows)
        + f"\nsuccess rate {summary['success_rate']:.3g} after {summary['epochs']} epochs; "
        f"uniform A_k = {summary['uniform_mass']:.3g}, clustering head A_k = 1"
    )


A_K_TOLERANCE = 0.1
"""§5.1 says a_t ~ 1/k on the first block and ~ 0 elsewhere, without a number: A_k within 0.1
of its predicted level (at most a tenth of the attention misplaced) agrees."""


def predictions(summary: dict) -> list[Prediction]:
    """The uniform level k/L at epoch 0 (positions exchangeable at the N(0, 1) init) and the
    clustering-head level A_k = 1 at the end of the successful seeds (§5.1)."""
    k, L = summary["sparsity"], summary["length"]
    seeds = summary["seeds"]
    return [
        Prediction(
            f"A_k at epoch 0, mean over {seeds} seeds (k/L, k = {k}, L = {L})",
            summary["uniform_mass"],
            float(np.mean(np.asarray(summary["initial_mass_per_seed"], float))),
            A_K_TOLERANCE,
            "test-mean first-block mass at epoch 0: exchangeable positional rows at init give "
            "E[A_k] = k/L; 0.1 as for A_k = 1",
            "difference",
        ),
        Prediction(
            f"A_k at epoch {summary['epochs']}, mean over the successful seeds "
            f"({sum(summary['success_per_seed'])}/{seeds}; clustering head)",
            summary["clustering_head_mass"],
            summary["mean_final_mass_successful"],
            A_K_TOLERANCE,
            "test-mean first-block mass of the seeds with final test accuracy > 0.98; §5.1's "
            "a_t ~ 1/k on t <= k carries no number: within 0.1 (a tenth of the attention "
            "misplaced) agrees",
            "difference",
        ),
    ]


FIGURE = Figure(
    id=FIGURE_ID,
    paper="clustering-head",
    description="probe attention of one class at epoch 0 and at the end; first-block attention "
    "mass A_k over epochs, mean +- std over seeds, with A_k = 1 and k/L",
    config=AttentionConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read="Left and middle: the attention a_t (colour, one scale for both) of the probe "
    "inputs of class 1 (rows) over the positions t, for the shown seed at epoch 0 and at the last "
    "epoch; the dashed white line ends the first block (t = k). A clustering head puts a_t = 1/k "
    "left of it and 0 right of it. Right: the first-block attention mass A_k (test mean) against "
    "the epoch, every seed thin (green solid: final test accuracy > 0.98, red dotted: failed), the "
    "mean over seeds black with a +- std band; dashed: A_k = 1 (clustering head, §5.1) and the "
    "uniform level k/L. Attention migrating to the first block shows as A_k rising from k/L "
    "towards 1 in the successful seeds.",
    predictions=predictions,
)
