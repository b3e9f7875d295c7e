"""Figure incremental-full: the full one-layer transformer learns the Markov chain's lag blocks one
at a time (paper Figs. 2-3; spec incremental.md §3.2, §7 incremental-full, §5.8).

Top: composite attention (one RGB channel per head) at a few steps, with the lag blocks 1-4, 5-8,
9-12 outlined as diagonal staircases. Bottom: KL(p_ref || p_model) on validation to the truncated
teachers A*_1, A*_{1:2}, A*_{1:3} (left) and to the learned 4-/8-gram baselines and the true
12-gram teacher A*_{1:3} (middle), stages shaded from the ladder steps; validation loss with the
yardstick levels (right).

Conventions (spec §8): the full model keeps its default initialisation (query_scale = None, as in
the authors' trainer); the learned c-gram baselines are trained before the student with the
student's settings (same training set, optimiser and learning rate) for ``baseline_steps``
(default: the student's step budget; the authors used 2000).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.incremental import markov_training
from simulate.incremental.markov_training import (
    LADDER_RULE,
    MarkovTrainConfig,
    baseline_contexts,
    ladder_steps,
    lag_blocks,
    split_step,
    train_baselines,
)
from simulate.store import load
from theory.validation import require

FIGURE_ID = "incremental-full"
REFERENCE_BOUNDARIES = (65.0, 450.0)
"""the authors' hand-placed stage boundaries of paper Fig. 2 (steps; d = 50, n = 9000)."""
BASELINE_LADDER_RULE = (
    "baseline ladder step k (k >= 2): LADDER_RULE applied to the references "
    "(learned c_1-gram, ..., learned c_{h-1}-gram, true teacher A*_{1:h})"
)
KL_RISE_RULE = (
    "KL to A*_1 rises after stage 1: its minimum over the logged steps is reached "
    "before the last step and the final value exceeds the minimum by more than 10%"
)
COMPOSITE_RULE = (
    "composite attention: head h -> colour channel h; each head's attention row "
    "(one query) divided by its maximum over keys"
)
QUICK = {
    "vocab": 20,
    "train_size": None,
    "batch": 128,
    "validation": 256,
    "steps": 300,
    "log_every": 5,
}
"""the CPU setting: d = 20, online 128 fresh sequences per step, 300 steps."""
QUICK_MAP_STEPS = (0, 60, 150, 300)


@dataclass(frozen=True)
class FullConfig:
    """Full post-LN transformer (§3.2) on spans (4, 4, 4): paper Figs. 2-3."""

    vocab: int = 50
    """d, vocabulary size."""
    blocks: tuple[int, ...] = (4, 4, 4)
    """lag-block sizes |I(1)|, ..., |I(h)| (most recent first); window w = their sum."""
    m: float = 1.7
    """importance ratio m (block k scaled by m^(h-k))."""
    tau: float = 0.1
    """teacher temperature."""
    heads: int = 3
    """attention heads (a divisor of the width 255)."""
    query_scale: float | None = None
    """W_Q ~ U(-q, q) with W_V = 0; None: the default (Xavier) initialisation of the authors."""
    lr: float | None = None
    """AdamW learning rate; None: the paper's 0.003 for the full model."""
    train_size: int | None = 9000
    """n, training sequences; None: online (fresh sequences every step)."""
    batch: int = 3000
    """sequences per step (min(batch, n) without replacement)."""
    validation: int = 3000
    """validation sequences."""
    steps: int = 1000
    """student optimizer steps (a multiple of 100)."""
    baseline_steps: int | None = None
    """steps of each learned c-gram baseline (the authors': 2000); None: the student's budget
    (ignored with quick)."""
    log_every: int = 10
    """steps between logged rows."""
    map_steps: tuple[int, ...] = (0, 60, 300, 1000)
    """steps of the attention maps (the nearest logged steps are drawn)."""
    teacher_seed: int = 0
    """seed of the teacher, validation and training sets."""
    seed: int = 0
    """student seed (initialisation, data order, dropout)."""
    quick: bool = False
    """CPU-sized run: d = 20, online 128 sequences per step, validation 256, 300 steps (and
    the baselines), maps at steps 0, 60, 150, 300."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/incremental-full/)."""
    quiet: bool = False
    """no progress bar."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        require(
            len(self.map_steps) > 0 and all(s >= 0 for s in self.map_steps),
            "map_steps",
            self.map_steps,
            "one or more steps >= 0",
        )
        require(
            self.baseline_steps is None or self.baseline_steps >= 1,
            "baseline_steps",
            self.baseline_steps,
            "None (the student's steps) or an integer >= 1",
        )
        self.baseline_training()  # validates the training settings before anything compiles

    def training(self) -> MarkovTrainConfig:
        cfg = MarkovTrainConfig(
            vocab=self.vocab,
            blocks=tuple(self.blocks),
            m=self.m,
            tau=self.tau,
            model="full",
            heads=self.heads,
            query_scale=self.query_scale,
            lr=self.lr,
            train_size=self.train_size,
            batch=self.batch,
            validation=self.validation,
            steps=self.steps,
            log_every=self.log_every,
            chunk=100,
            seed=self.seed,
            teacher_seed=self.teacher_seed,
            quiet=self.quiet,
            out=self.run_dir() / "training",
        )
        return replace(cfg, **QUICK) if self.quick else cfg

    def baseline_training(self) -> MarkovTrainConfig:
        cfg = self.training()
        steps = self.baseline_steps if self.baseline_steps and not self.quick else cfg.steps
        # only the baselines' final models are used: log once per chunk
        return replace(cfg, steps=steps, log_every=cfg.chunk)

    def drawn_map_steps(self) -> tuple[int, ...]:
        return QUICK_MAP_STEPS if self.quick else tuple(self.map_steps)

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def composite_rgb(maps: np.ndarray) -> np.ndarray:
    """(H, Q, K) attention maps -> (Q, K, 3) image per ``COMPOSITE_RULE`` (heads 1-3 red, green,
    blue; more heads get hues around the colour wheel)."""
    H = maps.shape[0]
    if H <= 3:
        colours = np.eye(3)[:H]
    else:
        import matplotlib.colors as mcolors

        colours = mcolors.hsv_to_rgb(np.stack([np.arange(H) / H, np.ones(H), np.ones(H)], -1))
    peak = np.max(maps, axis=-1, keepdims=True)
    rows = np.divide(maps, peak, out=np.zeros_like(maps, dtype=float), where=peak > 0)
    return np.clip(np.einsum("hqk,hc->qkc", rows, colours), 0.0, 1.0)


def block_labels(blocks: tuple[int, ...], generated: int) -> np.ndarray:
    """(generated, L) map of query row x key: k where the key is at a lag of block k from the
    query, 0 elsewhere."""
    from simulate.incremental.markov_task import MarkovSetting

    M = lag_blocks(MarkovSetting(blocks=tuple(blocks), generated=generated))
    return np.einsum("qsk,k->qs", M, np.arange(1, M.shape[-1] + 1)).astype(int)


def staircase_segments(labels: np.ndarray) -> dict[int, np.ndarray]:
    """Outline of each labelled region of a cell map: {k: (n, 2, 2) segments ((x0, y0), (x1, y1))}
    in cell coordinates (cell (row r, column c) spans x in c +- 1/2, y in r +- 1/2)."""
    padded = np.pad(labels, 1)
    out = {}
    for k in np.unique(labels[labels > 0]):
        inside = padded == k
        segs = []
        # a vertical edge between columns c-1 and c (padded) where exactly one side is inside
        rows, cols = np.nonzero(inside[:, 1:] != inside[:, :-1])
        segs += [((c - 0.5, r - 1.5), (c - 0.5, r - 0.5)) for r, c in zip(rows, cols)]
        rows, cols = np.nonzero(inside[1:, :] != inside[:-1, :])
        segs += [((c - 1.5, r - 0.5), (c - 0.5, r - 0.5)) for r, c in zip(rows, cols)]
        out[int(k)] = np.array(segs, dtype=float)
    return out


def nearest_rows(logged: np.ndarray, wanted) -> list[int]:
    """Indices of the logged steps nearest to each wanted step, without repeats, in order."""
    idx = [int(np.argmin(np.abs(logged - s))) for s in wanted]
    return sorted(set(idx))


def kl_rise(steps: np.ndarray, kl_first: np.ndarray) -> dict:
    """Per ``KL_RISE_RULE``."""
    low = int(np.argmin(kl_first))
    rises = bool(low < len(steps) - 1 and kl_first[-1] > 1.1 * kl_first[low])
    return {
        "kl_A1_min": float(kl_first[low]),
        "kl_A1_min_step": float(steps[low]),
        "kl_A1_final": float(kl_first[-1]),
        "kl_A1_rises_after_stage1": rises,
    }


def compute(cfg: FullConfig) -> tuple[xr.Dataset, dict]:
    student = cfg.training()
    # the right panel's learned classes c_1..c_{h-1}; class h is drawn as the true teacher
    contexts = baseline_contexts(student.task())[:-1]
    base = cfg.baseline_training()
    dirs = train_baselines(base, cfg.run_dir() / "baselines", contexts)
    student = replace(student, baselines=dirs)
    markov_training.run(student)
    ds, _ = load(student.out)
    s = _summary(student.out)
    traj = ds.isel(seed=0, layer=0)
    steps = traj["step"].values
    kl_y, kl_b = traj["kl_yardstick"].values, traj["kl_baseline"].values
    references = np.concatenate([kl_b, kl_y[:, -1:]], axis=1)  # learned c-grams, then teacher
    rows = nearest_rows(steps, cfg.drawn_map_steps())
    task = student.task()
    data = xr.Dataset(
        {
            "val_loss": ("step", traj["val_loss"].values),
            "train_loss": ("step", traj["train_loss"].values),
            "kl_yardstick": (("step", "yardstick"), kl_y),
            "kl_baseline": (("step", "baseline"), kl_b),
            "block_mass_mean": (("step", "head", "block"), traj["block_mass_mean"].values),
            "attention_map": (
                ("map_step", "head", "query", "key"),
                traj["attention_map"].values[rows],
            ),
            "block_label": (("query", "key"), block_labels(task.blocks, task.generated)),
        },
        coords={
            "step": steps,
            "yardstick": traj["yardstick"].values,
            "baseline": traj["baseline"].values,
            "head": traj["head"].values,
            "block": traj["block"].values,
            "map_step": steps[rows],
            "query": traj["query"].values,
            "key": traj["key"].values,
        },
    )
    baseline_runs = {int(c): _summary(p) for c, p in zip(contexts, dirs)}
    summary = {
        "setting": {
            "model": "full",
            "vocab": student.vocab,
            "blocks": list(task.blocks),
            "window": task.window,
            "train_size": student.train_size,
            "batch": student.minibatch,
            "validation": student.validation,
            "steps": student.steps,
            "baseline_steps": base.steps,
            "learning_rate": student.learning_rate,
            "query_scale": student.query_scale,
            "quick": cfg.quick,
        },
        "yardstick_losses": s["yardstick_losses"],
        "bayes_loss": s["bayes_loss"],
        "baseline_val_losses": {c: b["final_val_loss"][0] for c, b in baseline_runs.items()},
        "ladder_rule": LADDER_RULE,
        "ladder_steps": ladder_steps(steps, kl_y),
        "baseline_ladder_rule": BASELINE_LADDER_RULE,
        "baseline_ladder_steps": ladder_steps(steps, references),
        "heads_split_rule": markov_training.SPLIT_RULE,
        "heads_split_step": split_step(steps, traj["block_mass"].values),
        "final_val_loss": float(traj["val_loss"].values[-1]),
        "final_excess_loss": float(traj["val_loss"].values[-1]) - s["bayes_loss"],
        "kl_rise_rule": KL_RISE_RULE,
        **kl_rise(steps, kl_y[:, 0]),
        "composite_rule": COMPOSITE_RULE,
        "map_steps": steps[rows].tolist(),
        "seconds": {
            "student": s["compile_seconds"] + s["run_seconds"],
            **{
                f"{c}-gram": b["compile_seconds"] + b["run_seconds"]
                for c, b in baseline_runs.items()
            },
        },
        "training_run": str(student.out),
        "baseline_runs": [str(p) for p in dirs],
    }
    if not cfg.quick:
        summary["reference_boundaries"] = list(REFERENCE_BOUNDARIES)
    return data, summary


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def report(summary: dict) -> str:
    ladder, base = summary["ladder_steps"], summary["baseline_ladder_steps"]
    rows = [[f"stage {k + 2} begins", ladder[k], base[k]] for k in range(len(ladder))]
    lines = [
        format_table(["", "ladder (A*_1:k)", "ladder (learned baselines)"], rows),
        (
            f"final val loss {summary['final_val_loss']:.4g} nats vs Bayes "
            f"{summary['bayes_loss']:.4g} (excess {summary['final_excess_loss']:.4g}); "
            f"KL to A*_1: min {summary['kl_A1_min']:.4g} at step "
            f"{summary['kl_A1_min_step']:.0f}, final {summary['kl_A1_final']:.4g} "
            f"(rises after stage 1: {summary['kl_A1_rises_after_stage1']})"
        ),
    ]
    return "\n".join(lines)


def run(cfg: FullConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


STAGE_COLOURS = ("#fde0c5", "#d5ead5", "#d4e1f5", "#eddcf2")


def shade_stages(ax, boundaries, last_step: float) -> None:
    """Shade stage k between consecutive finite ladder steps (stage 1 from step 0)."""
    edges = [0.0] + [float(b) for b in boundaries if math.isfinite(float(b))] + [last_step]
    for k, (lo, hi) in enumerate(itertools.pairwise(edges)):
        ax.axvspan(lo, hi, color=STAGE_COLOURS[k % len(STAGE_COLOURS)], alpha=0.6, lw=0, zorder=0)
        if hi - lo > 0.08 * last_step:  # no label on a sliver
            ax.text(
                (lo + hi) / 2,
                0.98,
                f"stage {k + 1}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=7,
            )


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    steps = data["step"].values
    queries, keys = data["query"].values, data["key"].values
    H = data.sizes["head"]
    fig = plt.figure(figsize=(16, 9), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    n_maps = data.sizes["map_step"]
    map_axes = np.atleast_1d(top.subplots(1, n_maps))
    outlines = staircase_segments(data["block_label"].values)
    block_colours = plt.cm.Greys(np.linspace(0.95, 0.45, len(outlines)))
    for ax, step, maps in zip(map_axes, data["map_step"].values, data["attention_map"].values):
        ax.imshow(
            composite_rgb(maps),
            interpolation="nearest",
            aspect="auto",
            extent=(keys[0] - 0.5, keys[-1] + 0.5, queries[-1] + 0.5, queries[0] - 0.5),
        )
        for (k, segs), colour in zip(outlines.items(), block_colours):
            segs = segs + np.array([keys[0], queries[0]])  # cell -> (key, query position)
            ax.add_collection(LineCollection(segs, colors=[colour], lw=0.8, ls="--"))
        ax.set(title=f"step {step:.0f}", xlabel="key position s")
        ax.yaxis.get_major_locator().set_params(integer=True)
    map_axes[0].set_ylabel("query position t")
    names = ["red", "green", "blue"]
    handles = [
        plt.Line2D(
            [],
            [],
            color=composite_rgb(np.eye(H)[h][:, None, None])[0, 0],
            lw=6,
            label=f"head {h + 1}" + (f" ({names[h]})" if H <= 3 else ""),
        )
        for h in range(H)
    ]
    handles.append(plt.Line2D([], [], color="grey", ls="--", label="lag blocks (staircase)"))
    map_axes[-1].legend(handles=handles, fontsize=7, loc="lower left")
    top.suptitle("Composite attention (one colour per head), lag blocks outlined")

    ax_y, ax_b, ax_l = bottom.subplots(1, 3)
    yard = data["kl_yardstick"].values
    # both panels are shaded from the learned-baseline ladder (the best-in-class predictors,
    # spec §2.3); the truncated-teacher ladder is drawn as lines, as it may skip classes
    for ax in (ax_y, ax_b):
        shade_stages(ax, summary["baseline_ladder_steps"], steps[-1])
    for k in range(yard.shape[1]):
        name = "A^*_1" if k == 0 else f"A^*_{{1:{k + 1}}}"
        ax_y.plot(steps, yard[:, k], label=f"KL to ${name}$")
    for b in summary["ladder_steps"]:
        ax_y.axvline(float(b), color="tab:red", lw=1)
    ax_y.plot([], [], color="tab:red", lw=1, label="ladder steps by KL to $A^*_{1:k}$")
    ax_y.set_title("KL to the truncated teachers")
    for k, c in enumerate(data["baseline"].values):
        ax_b.plot(steps, data["kl_baseline"].values[:, k], label=f"KL to learned {c}-gram")
    window = int(sum(summary["setting"]["blocks"]))
    ax_b.plot(steps, yard[:, -1], color="k", label=f"KL to true {window}-gram teacher")
    ax_b.set_title("KL to the learned baselines (shading: stages by this ladder)")
    for ax in (ax_y, ax_b):
        for b in summary.get("reference_boundaries", []):
            ax.axvline(b, color="k", ls=":", lw=1)
        if summary.get("reference_boundaries"):
            ax.plot([], [], "k:", lw=1, label="authors' boundaries (paper Fig. 2)")
        ax.set(yscale="log", xlabel="training step", ylabel="KL (nats)", xlim=(0, steps[-1]))
        ax.legend(fontsize=7, loc="lower left")

    shade_stages(ax_l, summary["baseline_ladder_steps"], steps[-1])
    ax_l.plot(steps, data["val_loss"].values, color="k", label="validation")
    ax_l.plot(steps, data["train_loss"].values, color="grey", lw=0.8, label="train probe")
    top = 1.05 * max(summary["yardstick_losses"]["uniform"], float(data["val_loss"].values[0]))
    levels = {
        "ln d (uniform)": summary["yardstick_losses"]["uniform"],
        **{f"learned {c}-gram": v for c, v in summary["baseline_val_losses"].items()},
        "Bayes (true teacher)": summary["bayes_loss"],
    }
    level_colours = plt.cm.plasma(np.linspace(0, 0.8, len(levels)))
    for (name, v), colour in zip(levels.items(), level_colours):
        ax_l.axhline(v, color=colour, ls="--", lw=1, label=f"{name}: {v:.3g}")
    truncated = [(k, v) for k, v in summary["yardstick_losses"].items() if k.startswith("A*")]
    shades = plt.cm.cividis(np.linspace(0.2, 0.7, max(len(truncated) - 1, 1)))
    for (name, v), colour in zip(truncated[:-1], shades):
        off = " (off scale)" if v > top else ""
        ax_l.axhline(v, color=colour, ls=":", lw=1, label=f"truncated {name}: {v:.3g}{off}")
    ax_l.set(
        xlabel="training step",
        ylabel="loss (nats)",
        xlim=(0, steps[-1]),
        ylim=(0.9 * summary["bayes_loss"], top),
        title="validation loss and yardstick levels",
    )
    ax_l.legend(fontsize=7)
    st = summary["setting"]
    data_text = "online" if st["train_size"] is None else f"n = {st['train_size']}"
    bottom.suptitle(
        f"Full transformer, d = {st['vocab']}, spans {tuple(st['blocks'])}, "
        f"{data_text}, batch {st['batch']}, lr {st['learning_rate']:.3g}"
    )
    return fig
