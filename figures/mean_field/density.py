"""Figure mean-field-density: token density over depth, untrained and trained (spec
``mean_field.md`` §7 mean-field-density; turnpike picture §5.5 (i)-(ii)).

Heat maps of the token density over the angle against depth for ``W = 0`` and for the trained
FFN (lambda = 1e-2), with sample token paths; below, the escape observable ``<x, e_2>``, the
two-well order parameter ``r_2`` and the control norm ``||W_t||`` along depth, with the depth at
which the trained flow leaves the untrained one (``ONSET_RULE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from figures.mean_field.common import TrainedFigureOptions, train
from simulate.mean_field.measure import ONSET_DIFFERENCE, ONSET_RULE, escape_onset
from simulate.mean_field.training import MeanFieldConfig


@dataclass(frozen=True)
class DensityConfig(TrainedFigureOptions):
    """Density over depth, W = 0 vs trained at lambda = 1e-2 (spec §4 defaults); quick: N = 256,
    depth step 1/16, 200 Adam steps, one seed."""

    train: Annotated[MeanFieldConfig, Flat] = MeanFieldConfig(lambdas=(1e-2,))
    """the training run: spec §4 defaults, lambda = 1e-2 (the first lambda is drawn)."""


def compute(cfg: DensityConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    training = cfg.training()
    ds, train_summary = train(cfg, training, run_dir)
    first, last = ds.isel(step=0, lam=0), ds.isel(step=-1, lam=0)
    depth = ds["depth"].values
    e2_0, e2_1 = first["e2"].mean("seed").values, last["e2"].mean("seed").values
    onset = escape_onset(depth, e2_1, e2_0)
    plateau = (depth >= training.depth / 4) & (depth <= 3 * training.depth / 4)
    data = xr.Dataset(
        {
            "density_untrained": (("depth", "angle"), first["density"].isel(seed=0).values),
            "density_trained": (("depth", "angle"), last["density"].isel(seed=0).values),
            "paths_untrained": (("depth", "particle"), first["paths"].isel(seed=0).values),
            "paths_trained": (("depth", "particle"), last["paths"].isel(seed=0).values),
            "e2_untrained": (("depth",), e2_0),
            "e2_trained": (("depth",), e2_1),
            "r2_untrained": (("depth",), first["r2"].mean("seed").values),
            "r2_trained": (("depth",), last["r2"].mean("seed").values),
            "control_norm": (("bin",), last["control_norm"].mean("seed").values),
        },
        coords={
            "depth": depth,
            "angle": ds["angle"].values,
            "bin": ds["bin"].values,
            "particle": ds["particle"].values,
        },
    )
    lam = f"{training.lambdas[0]:g}"
    summary = {
        "training_run": str(run_dir / "training"),
        "onset_rule": ONSET_RULE,
        "lambda": lam,
        "depth": training.depth,
        "escape_onset_depth": onset,
        "onset_fraction_of_depth": onset / training.depth,
        "escape": train_summary["per_lambda"][lam]["escape"],
        "heldout_escape": train_summary["per_lambda"][lam]["heldout_escape"],
        "r2_plateau_untrained": float(data["r2_untrained"].values[plateau].mean()),
        "r2_plateau_trained": float(data["r2_trained"].values[plateau].mean()),
        "max_e2_gap_before_onset": float(np.max(np.abs(e2_1 - e2_0)[depth <= onset]))
        if np.isfinite(onset)
        else float("nan"),
        "last_quarter_share": train_summary["per_lambda"][lam]["last_quarter_share"],
        "noise": training.noise,
    }
    return data, summary


def report(summary: dict) -> str:
    keys = [
        "escape_onset_depth",
        "onset_fraction_of_depth",
        "escape",
        "heldout_escape",
        "r2_plateau_untrained",
        "r2_plateau_trained",
        "last_quarter_share",
    ]
    return (
        f"token density, lambda = {summary['lambda']} (rule: {summary['onset_rule']})\n"
        + format_table(["quantity", "value"], [[k, summary[k]] for k in keys])
    )


def predictions(summary: dict) -> list[Prediction]:
    """Turnpike (ii) (§5.5): over the middle of the depth the trained flow follows the untrained
    one, so its two-well order parameter r_2 keeps the untrained plateau."""
    return [
        Prediction(
            f"r_2 plateau of the trained flow (lambda = {summary['lambda']}), mean over "
            "T/4 <= t <= 3T/4: the untrained plateau",
            summary["r2_plateau_untrained"],
            summary["r2_plateau_trained"],
            ONSET_DIFFERENCE,
            f"seed-mean r_2 averaged over the middle half of the depth; within {ONSET_DIFFERENCE}, "
            "the band within which the onset rule calls the trained flow the untrained one",
            "difference",
        )
    ]


def _draw_paths(ax, depth, paths):
    for p in np.mod(paths, 2 * np.pi).T:
        jumps = np.abs(np.diff(p)) > np.pi  # break the line where a path wraps around
        y = p.copy()
        y[1:][jumps] = np.nan
        ax.plot(depth, y, color="white", lw=0.6, alpha=0.8)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    depth, angle = data["depth"].values, data["angle"].values
    onset = summary["escape_onset_depth"]
    fig, axes = plt.subplots(
        3, 1, figsize=(9, 10), sharex=True, gridspec_kw={"height_ratios": [1, 1, 0.8]}
    )
    vmax = float(
        np.percentile(
            np.concatenate(
                [data["density_untrained"].values.ravel(), data["density_trained"].values.ravel()]
            ),
            99,
        )
    )
    for ax, which, title in (
        (axes[0], "untrained", "W = 0"),
        (axes[1], "trained", rf"trained, $\lambda={summary['lambda']}$"),
    ):
        im = ax.pcolormesh(
            depth,
            angle,
            data[f"density_{which}"].values.T,
            shading="nearest",
            cmap="magma",
            vmin=0,
            vmax=vmax,
        )
        _draw_paths(ax, depth, data[f"paths_{which}"].values)
        for level, name in (
            (0.05, "well $e_1$"),
            (np.pi, "well $-e_1$"),
            (np.pi / 2, "target $e_2$"),
        ):
            ax.axhline(
                level, color="cyan" if name.startswith("target") else "grey", ls="--", lw=0.8
            )
            ax.text(0.1, level + 0.08, name, fontsize=7, color="white")
        ax.set(
            ylabel=r"token angle $\theta$ (rad)",
            title=f"token density, {title}",
            ylim=(0, 2 * np.pi),
        )
        # the colour bar sits outside the axes, so all three panels keep the same depth axis
        fig.colorbar(im, cax=ax.inset_axes([1.01, 0, 0.015, 1]), label="density (per rad)")
    ax = axes[2]
    ax.plot(
        depth,
        data["e2_untrained"],
        color="tab:blue",
        ls="--",
        label=r"$\langle x,e_2\rangle$, W = 0",
    )
    ax.plot(depth, data["e2_trained"], color="tab:blue", label=r"$\langle x,e_2\rangle$, trained")
    ax.plot(depth, data["r2_untrained"], color="tab:green", ls="--", label=r"$r_2$, W = 0")
    ax.plot(depth, data["r2_trained"], color="tab:green", label=r"$r_2$, trained")
    ax.set(xlabel="depth t", ylabel="order parameters", ylim=(-0.1, 1.05))
    twin = ax.twinx()
    twin.step(
        data["bin"].values,
        data["control_norm"].values,
        where="mid",
        color="tab:red",
        lw=1,
        label=r"$\|W_t\|_F$ (trained)",
    )
    twin.set_ylabel(r"$\|W_t\|_F$", color="tab:red")
    if np.isfinite(onset):
        for a in axes:
            a.axvline(onset, color="tab:orange", ls=":", lw=1.2)
        ax.plot([], [], color="tab:orange", ls=":", label="escape onset (rule)")
    handles = ax.get_legend_handles_labels()
    extra = twin.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="center left")
    fig.suptitle(
        "Noisy mean-field transformer on $S^1$: attention clusters the tokens; the "
        "trained FFN moves them out near the output"
    )
    fig.tight_layout()
    return fig


FIGURE = Figure(
    id="mean-field-density",
    paper="mean-field",
    description="token density over depth, W = 0 vs trained FFN, with the escape onset",
    config=DensityConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read="Top two panels: the token density (colour) over the angle theta against the "
    "depth t, without control (W = 0) and with the trained FFN, with sample token paths in white; "
    "grey dashed: the wells theta = 0 and pi, cyan dashed: the target e_2 (theta = pi/2). Without "
    "control the mass gathers in the two wells and stays; the turnpike picture has the trained "
    "flow follow it for most of the depth and move towards e_2 only near the output. Bottom: <x, "
    "e_2> (blue) and the two-well order parameter r_2 (green), dashed untrained and solid "
    "trained, with the control norm ||W_t||_F on the right axis (red steps); the orange dotted "
    "line is the measured escape onset, the last depth at which the trained <x, e_2> is within "
    "0.1 of the untrained one.",
    predictions=predictions,
)
