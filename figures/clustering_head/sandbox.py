"""Figure clustering-head-sandbox: the visual sandbox (spec clustering_head.md §7
clustering-head-sandbox, §5.1, §5.3).

One seed of the clustering-head experiment (p = 2, V_e = 3, the §4 defaults, 1000 epochs). At each
frame epoch (0, 10, 100, 1000) the paper's 4 x 4 panel grid (figures.clustering_head.sandbox_frame):
E, P, E + P, Z = N(E + P); probe attention, V Z, the sequence embeddings xi by class with their
first-k histogram clusters and the §5.1 ideal-head prediction, the level lines of xi -> p(y | xi);
N(xi), the FFN receptors (rows of W_1) and emitters (columns of W_2), the FFN output h; the read-out
level lines in h, softmax(E h) on the simplex, train/test loss and accuracy with the frame epoch
marked. The static figure puts the frames side by side; the animation (every ``animation_every``-th
stored epoch) goes into the run directory as clustering-head-sandbox.gif (Pillow), and .mp4 as well
when ffmpeg is on the PATH. Every epoch's weights are stored with the figure, so --replot redraws
both. The summary records, per frame epoch, test accuracy, train loss, the first-block attention
mass A_k and the cluster quality Q of xi by first-k histogram (§5.3).
"""

from __future__ import annotations

import math
import shutil
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import jax
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from matplotlib.animation import FFMpegWriter, PillowWriter
from tqdm.auto import tqdm

from figures.clustering_head.sandbox_frame import (
    SandboxContext,
    draw_frame,
)
from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.clustering_head.model import ClusteringHead, ideal_clusters
from simulate.clustering_head.task import draw_data, histogram_index, probe_set
from simulate.clustering_head.training import (
    SUCCESS_ACCURACY,
    WEIGHTS,
    ClusteringSetting,
    cluster_quality,
    model_at_epoch,
    run_stored,
)
from simulate.store import load
from theory.clustering_head.symmetry import cluster_count, cluster_geometry
from theory.validation import require

FIGURE_ID = "clustering-head-sandbox"
FRAME_SIZE = (12.0, 11.0)
"""inches of one 4 x 4 frame."""


@dataclass(frozen=True)
class SandboxConfig(FigureOptions):
    """One seed, frames at selected epochs (paper: 1000 epochs, frames 0, 10, 100, 1000), and an
    animation over the stored epochs (--quick: 200 epochs, frames 0, 10, 100, 200)."""

    train: Annotated[ClusteringSetting, Flat] = ClusteringSetting(
        seed=6, seeds=1, epochs=1000, epochs_per_chunk=100, hessian_iterations=0
    )
    """the training run of one seed (6: a seed id that reaches test accuracy > 0.98 within 200
    epochs; seed 0 stays at chance for 1000 epochs)."""
    frames: tuple[int, ...] = (0, 10, 100, 1000)
    """epochs drawn in the static figure, one 4 x 4 grid each (0 <= epoch <= epochs)."""
    animation: bool = True
    """write the animation (GIF; MP4 too when ffmpeg is on the PATH)."""
    animation_every: int = 10
    """animate every n-th epoch (epochs), plus the last."""
    animation_fps: int = 6
    """animation frames per second."""
    animation_dpi: int = 70
    """animation resolution (dots per inch of a 12 x 11 inch frame)."""

    def __post_init__(self) -> None:
        train, frames = self.plan()  # as resolved (--quick included)
        epochs = train.total_epochs
        require(self.train.seeds == 1, "seeds", self.train.seeds, "1 (the sandbox draws one seed)")
        require(
            len(frames) >= 1 and all(0 <= f <= epochs for f in frames),
            "frames",
            frames,
            f"one or more epochs in [0, {epochs}]",
        )
        require(
            self.animation_every >= 1,
            "animation_every",
            self.animation_every,
            "an integer >= 1 (epochs)",
        )
        require(self.animation_fps >= 1, "animation_fps", self.animation_fps, "an integer >= 1")
        require(
            20 <= self.animation_dpi <= 300,
            "animation_dpi",
            self.animation_dpi,
            "an integer in [20, 300]",
        )

    def plan(self) -> tuple[ClusteringSetting, tuple[int, ...]]:
        """The training run and the frame epochs (--quick: 200 epochs; frames 0, 10, 100 and the
        last epoch)."""
        train = self.quick_setting("train", {"epochs": 200, "epochs_per_chunk": 20})
        last = train.total_epochs
        return train, self.quick_or("frames", (*(f for f in (0, 10, 100) if f < last), last))


def animation_epochs(epochs: int, every: int) -> list[int]:
    """0, every, 2 every, ... and the last epoch."""
    return sorted({*range(0, epochs + 1, every), epochs})


def _setting(summary: dict) -> ClusteringSetting:
    return ClusteringSetting(
        length=summary["length"],
        sparsity=summary["sparsity"],
        modulus=summary["modulus"],
        train_size=summary["train_size"],
        data_seed=summary["data_seed"],
    )


def context(data: xr.Dataset, summary: dict) -> SandboxContext:
    setting = _setting(summary)
    probe, probe_hist = probe_set(setting)
    return SandboxContext(
        train=np.asarray(draw_data(setting).train),
        sparsity=setting.sparsity,
        modulus=setting.modulus,
        probe=probe,
        probe_histogram=probe_hist,
        epochs=data["epoch"].values,
        train_loss=data["train_loss"].values,
        test_loss=data["test_loss"].values,
        train_accuracy=data["train_accuracy"].values,
        test_accuracy=data["test_accuracy"].values,
    )


def cluster_segment(model: ClusteringHead, train, sparsity: int) -> dict:
    """p = 2 (§5.1): where the centroid of the training sequence embeddings xi of each first-k
    histogram sits against the segment from V zbar_0 to V zbar_1 of ``model``'s ideal head, per
    n_1 = 0..k ones (NaN for a histogram absent from ``train``), beside the fractions n_1 / k of
    ``theory``: the summary entries."""
    # histograms(k, 2) lists (n_0, n_1) with n_0 = 0..k: reversed, the index is n_1
    ideal = np.asarray(ideal_clusters(model, sparsity, 2), float)[::-1]
    start, span = ideal[0], ideal[-1] - ideal[0]
    xi = np.asarray(jax.vmap(model.sequence_embedding)(train), float)
    n1 = sparsity - histogram_index(np.asarray(train), sparsity, 2)
    centroids = np.array(
        [
            xi[n1 == j].mean(0) if (n1 == j).any() else np.full(xi.shape[1], np.nan)
            for j in range(sparsity + 1)
        ]
    )
    along = (centroids - start) @ span / (span @ span)
    off = np.linalg.norm(centroids - start - along[:, None] * span, axis=1) / np.linalg.norm(span)
    return {
        "cluster_fraction_predicted": [float(f) for f, _ in cluster_geometry(sparsity)],
        "cluster_fraction_measured": along.tolist(),
        "cluster_offset_measured": off.tolist(),
        "cluster_segment_rule": "the centroid of the training xi of each first-k histogram (n_1 "
        "ones) projected on the segment from V zbar_0 to V zbar_1 (the ideal head's xi of n_1 = 0 "
        "and n_1 = k, zbar_a = mean_{t <= k} N(E[a] + P[t])): fraction along it and distance off "
        "it, in segment lengths",
    }


def compute(cfg: SandboxConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    tcfg, frames = cfg.plan()
    epochs = tcfg.total_epochs
    ds, _ = load(run_stored(tcfg, cfg.run_output(run_dir)))
    ds = ds.isel(seed=0, drop=True)
    ds = (
        ds.assign_coords(epoch=("step", ds["step"].values // tcfg.steps_per_epoch))
        .swap_dims(step="epoch")
        .drop_vars("step")
    )
    data = ds[["train_loss", "test_loss", "train_accuracy", "test_accuracy", *WEIGHTS]]
    k, p = tcfg.sparsity, tcfg.modulus
    train = draw_data(tcfg).train
    groups = histogram_index(np.asarray(train), k, p)
    quality = [
        float(
            cluster_quality(
                np.asarray(jax.vmap(model_at_epoch(data, f).sequence_embedding)(train)), groups
            )
        )
        for f in frames
    ]
    at = {"epoch": list(frames)}
    final_acc = float(ds["test_accuracy"].values[-1])
    summary = {
        "seed": tcfg.seed,
        "epochs": epochs,
        "frames": list(frames),
        "animation_epochs": animation_epochs(epochs, cfg.animation_every),
        "test_accuracy_at_frames": ds["test_accuracy"].sel(at).values,
        "train_loss_at_frames": ds["train_loss"].sel(at).values,
        "attention_mass_at_frames": ds["attention_mass"].sel(at).values,
        "cluster_quality_at_frames": quality,
        "cluster_quality_rule": "Q = mean over first-k histograms of the mean distance of "
        "the training xi to their histogram centroid / mean distance "
        "between histogram centroids (§5.3)",
        "final_test_accuracy": final_acc,
        "success_rule": f"test accuracy > {SUCCESS_ACCURACY}",
        "success": final_acc > SUCCESS_ACCURACY,
        "histogram_clusters": cluster_count(k, p),
        "sparsity": k,
        "modulus": p,
        "length": tcfg.length,
        "train_size": tcfg.train_size,
        "data_seed": tcfg.data_seed,
    }
    if p == 2:  # the §5.1 segment geometry is that of p = 2; at the last epoch
        summary |= cluster_segment(model_at_epoch(data, epochs), train, k)
    return data, summary


def plot(data: xr.Dataset, summary: dict):
    """The frame epochs' 4 x 4 grids side by side, two per row."""
    ctx = context(data, summary)
    frames = summary["frames"]
    cols = min(2, len(frames))
    rows = math.ceil(len(frames) / cols)
    fig = plt.figure(figsize=(FRAME_SIZE[0] * cols, FRAME_SIZE[1] * rows))
    for sub, epoch in zip(fig.subfigures(rows, cols, squeeze=False).flat, frames):
        draw_frame(sub, model_at_epoch(data, epoch), ctx, epoch)
    return fig


def animate(
    data: xr.Dataset, summary: dict, out: Path, fps: int, dpi: int, quiet: bool = False
) -> list[Path]:
    """Write the sandbox over ``summary["animation_epochs"]`` as a GIF (and an MP4 when ffmpeg is on
    the PATH) into ``out``; returns the paths written."""
    ctx = context(data, summary)
    writers = {out / f"{FIGURE_ID}.gif": PillowWriter(fps=fps)}
    if shutil.which("ffmpeg"):
        writers[out / f"{FIGURE_ID}.mp4"] = FFMpegWriter(fps=fps)
    fig = plt.figure(figsize=FRAME_SIZE)
    with ExitStack() as stack:
        for path, writer in writers.items():
            stack.enter_context(writer.saving(fig, path, dpi))
        for epoch in tqdm(
            summary["animation_epochs"], disable=quiet, unit="frame", desc="sandbox animation"
        ):
            fig.clear()
            draw_frame(fig, model_at_epoch(data, epoch), ctx, epoch)
            for writer in writers.values():
                writer.grab_frame()
    plt.close(fig)
    return list(writers)


def report(summary: dict) -> str:
    rows = list(
        zip(
            summary["frames"],
            summary["test_accuracy_at_frames"],
            summary["train_loss_at_frames"],
            summary["attention_mass_at_frames"],
            summary["cluster_quality_at_frames"],
        )
    )
    return (
        format_table(
            ["epoch", "test accuracy", "train loss (nats)", "A_k", "Q"], [list(r) for r in rows]
        )
        + f"\nseed {summary['seed']}: success ({summary['success_rule']}) = {summary['success']}; "
        f"{summary['histogram_clusters']} first-k histograms; animation: "
        f"{len(summary['animation_epochs'])} frames"
    )


def extra(cfg: SandboxConfig, run_dir: Path, data: xr.Dataset, summary: dict) -> list[Path]:
    """The animation (GIF, and MP4 with ffmpeg) from the stored data, unless --no-animation."""
    if not cfg.animation:
        return []
    return animate(data, summary, run_dir, cfg.animation_fps, cfg.animation_dpi, cfg.quiet)


def predictions(summary: dict) -> list[Prediction]:
    """§5.1 (p = 2): the histogram with n_1 ones sits at the fraction n_1 / k of the segment from
    V zbar_0 to V zbar_1, on it. Agreement: within half the spacing 1 / k of neighbouring
    positions, i.e. nearer its own position than a neighbour's. None for p != 2."""
    if "cluster_fraction_predicted" not in summary:
        return []
    k, epoch, seed = summary["sparsity"], summary["epochs"], summary["seed"]
    half_spacing = 1 / (2 * k)
    rule = (
        f"{summary['cluster_segment_rule']}; within half the §5.1 spacing 1/(2k) = "
        f"{half_spacing:.3g}: nearer its own position than a neighbour's"
    )
    rows = [
        Prediction(
            f"xi of histogram n_1 = {n1} (label {n1 % 2}): fraction along V zbar_0 -> "
            f"V zbar_1, epoch {epoch}, seed {seed}",
            predicted,
            measured,
            half_spacing,
            rule,
            "difference",
        )
        for n1, (predicted, measured) in enumerate(
            zip(summary["cluster_fraction_predicted"], summary["cluster_fraction_measured"])
        )
    ]
    rows.append(
        Prediction(
            f"xi histogram centroids: largest distance off the segment V zbar_0 -> V zbar_1 "
            f"(segment lengths), epoch {epoch}, seed {seed}",
            0.0,
            float(np.max(np.asarray(summary["cluster_offset_measured"], float))),
            half_spacing,
            rule,
            "difference",
        )
    )
    return rows


FIGURE = Figure(
    id=FIGURE_ID,
    paper="clustering-head",
    description="visual sandbox of one seed: the paper's 4 x 4 panel grid (E, P, E + P, Z; probe "
    "attention, VZ, xi by class with level lines; N(xi), FFN receptors, emitters, h; read-out "
    "regions, simplex, loss, accuracy) at frame epochs, and a GIF (MP4 with ffmpeg) over training",
    config=SandboxConfig,
    compute=compute,
    plot=plot,
    report=report,
    extra=extra,
    how_to_read="One 4 x 4 grid per frame epoch (0, 10, 100 and the last) of one seed (default 6), "
    "p = 2. Row 1: token embeddings E (token 2 unused for p = 2), positional embeddings P (first "
    "block t <= k dots, distractors crosses), every E[a] + P[t] and Z = N(E[a] + P[t]) on the "
    "circle of radius sqrt 2: the first-block and distractor positions separate over training. Row "
    "2: probe attention a_t (rows: probes grouped by first-k histogram; dashed line after t = k), "
    "the value-mapped points V Z, the training sequence embeddings xi by class with each "
    "histogram's label at its centroid and the §5.1 ideal-head positions (+, on the segment from V "
    "zbar_0 to V zbar_1, labels alternating), and the level lines of p(y = 1 | xi); the cluster "
    "quality Q in the title falls to 0 as xi collapses onto the 6 histogram clusters. Row 3: "
    "N(xi), the FFN receptors (rows of W_1) with N(xi), the emitters (columns of W_2), the FFN "
    "output h. Row 4: the read-out regions in h, softmax(E h) on the simplex, train/test loss "
    "(with ln p) and accuracy (with 0.98), the frame epoch dotted. The GIF runs over training.",
    predictions=predictions,
)
