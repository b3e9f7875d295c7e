"""Figure incremental-dataset-size: with few training sequences, early stopping selects a
smaller-context class (paper Fig. 5; spec incremental.md §7 incremental-dataset-size, §5.8).

The minimal transformer is trained on n training sequences for several n, and online. Column 1:
best-so-far excess validation loss (running minimum of val_loss - Bayes loss), with the learned
c-gram baselines' excess losses as horizontal levels. Columns 2-4: KL(p_{c-gram} || p_model) on
validation to the learned 4-, 8- and 12-gram baselines, one curve per size, with a dashed line at
each size's early-stopping step (argmin of the validation loss).

Conventions (spec §8.7-8.8, documented in the summary): spans (4, 4, 4), which the figure's
4/8/12-gram labels imply; minibatches of min(batch, n), one shuffle of the training set per epoch
(``MarkovTrainConfig.minibatches``); the minimal model keeps the authors' default
Xavier initialisation (query_scale = None); the learned baselines are trained once, online (fresh
sequences every step, ``online_batch`` per step), so that every size is compared with the same
best-in-class predictors of the population rather than of one training set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.incremental import markov_training
from simulate.incremental.markov_training import (
    EARLY_STOPPING_RULE,
    MarkovTrainConfig,
    baseline_contexts,
    train_baselines,
)
from simulate.incremental.training_stages import CLOSEST_RULE, best_so_far, early_stopping
from simulate.side_by_side import run_side_by_side
from simulate.store import load, read_summary
from theory.validation import require

BASELINE_RULE = (
    "learned c-gram baselines: trained once, online (online_batch fresh sequences "
    "per step), with the students' model, optimiser and learning rate"
)
QUICK = {"vocab": 20, "batch": 512, "validation": 512, "steps": 600}
"""the students' CPU setting: d = 20, batch 512, validation 512, 600 steps."""
QUICK_SIZES, QUICK_ONLINE_BATCH = (300, 1000, 3000), 512
"""--quick: n in {300, 1000, 3000} + online 512."""
ONLINE = 0
"""the ``size`` coordinate of the online run."""
EXCESS_FLOOR = 1e-4
"""plotting floor of the excess loss on the log axis (nats)."""


@dataclass(frozen=True)
class DatasetSizeConfig(FigureOptions):
    """Minimal transformer (§3.1) on spans (4, 4, 4) for several training-set sizes. Quick:
    d = 20, n in {300, 1000, 3000} + online, batch 512, validation 512, 600 steps (baselines
    too)."""

    train: Annotated[MarkovTrainConfig, Flat] = MarkovTrainConfig(
        blocks=(4, 4, 4), query_scale=None, batch=3000, validation=3000, steps=1000
    )
    """the students' training setting (one seed; the authors' default Xavier initialisation,
    the paper's AdamW learning rate 0.08; minibatches of min(batch, n), one shuffle of the
    training set per epoch by default)."""
    sizes: tuple[int, ...] = (600, 2000, 9000)
    """training-set sizes n (sequences)."""
    online: bool = True
    """also train online (fresh sequences every step)."""
    online_batch: int = 3000
    """fresh sequences per step online (and for the baselines)."""
    baseline_steps: int | None = None
    """steps of each learned baseline (the authors': 2000); None: the students' budget."""

    def __post_init__(self):
        require(
            all(n >= 1 for n in self.sizes) and len(set(self.sizes)) == len(self.sizes),
            "sizes",
            self.sizes,
            "distinct training-set sizes >= 1",
        )
        require(
            len(self.sizes) > 0 or self.online,
            "sizes",
            self.sizes,
            "at least one size, or online = True",
        )
        require(self.online_batch >= 1, "online_batch", self.online_batch, "an integer >= 1")
        require(
            self.baseline_steps is None or self.baseline_steps >= 1,
            "baseline_steps",
            self.baseline_steps,
            "None (the students' steps) or an integer >= 1",
        )
        self.baseline_training()
        for n in self.settings()["sizes"]:
            self.student(n)

    def settings(self) -> dict:
        t = self.quick_setting("train", QUICK)
        return {
            "vocab": t.vocab,
            "sizes": self.quick_or("sizes", QUICK_SIZES),
            "batch": t.batch,
            "online_batch": self.quick_or("online_batch", QUICK_ONLINE_BATCH),
            "validation": t.validation,
            "steps": t.steps,
        }

    def _base(self) -> MarkovTrainConfig:
        return replace(self.quick_setting("train", QUICK), seeds=1)

    def baseline_training(self) -> MarkovTrainConfig:
        base = self._base()
        # only the baselines' final models are used: log once per chunk
        return replace(
            base,
            train_size=None,
            batch=self.settings()["online_batch"],
            steps=self.baseline_steps or base.steps,
            log_every=base.chunk,
        )

    def trained_sizes(self) -> list[int | None]:
        """The students' training-set sizes, ascending, then None (online) if trained."""
        return [*sorted(self.settings()["sizes"]), *([None] if self.online else [])]

    def student(self, n: int | None, baselines: tuple[Path, ...] = ()) -> MarkovTrainConfig:
        """The run of training-set size n (None: online)."""
        base = self._base()
        if n is None:
            return replace(
                base,
                train_size=None,
                batch=self.settings()["online_batch"],
                baselines=baselines,
            )
        return replace(base, train_size=n, baselines=baselines)


def compute(cfg: DatasetSizeConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    base = cfg.baseline_training()
    contexts = baseline_contexts(base.task())
    dirs = train_baselines(base, run_dir / "baselines", contexts, quiet=cfg.quiet)
    sizes = cfg.trained_sizes()
    students = [cfg.student(n, dirs) for n in sizes]
    paths = run_side_by_side(
        [
            partial(
                markov_training.run,
                student,
                cfg.run_output(run_dir, "online" if n is None else f"n{n}"),
            )
            for n, student in zip(sizes, students, strict=True)
        ]
    )
    runs = []
    for student, path in zip(students, paths, strict=True):
        ds, _ = load(path)
        runs.append((student, ds.isel(seed=0), read_summary(path)))
    steps = runs[0][1]["step"].values
    bayes = runs[0][2]["bayes_loss"]
    val = np.stack([ds["val_loss"].values for _, ds, _ in runs])
    labels = ["online" if n is None else f"n={n}" for n in sizes]
    # integer coordinate (0 = online): zarr v3 has no stable string dtype
    size_coord = [ONLINE if n is None else n for n in sizes]
    data = xr.Dataset(
        {
            "val_loss": (("size", "step"), val),
            "train_loss": (
                ("size", "step"),
                np.stack([ds["train_loss"].values for _, ds, _ in runs]),
            ),
            "best_excess_loss": (("size", "step"), best_so_far(val - bayes)),
            "kl_baseline": (
                ("size", "step", "baseline"),
                np.stack([ds["kl_baseline"].values for _, ds, _ in runs]),
            ),
            "kl_yardstick": (
                ("size", "step", "yardstick"),
                np.stack([ds["kl_yardstick"].values for _, ds, _ in runs]),
            ),
        },
        coords={
            "size": size_coord,
            "step": steps,
            "baseline": list(contexts),
            "yardstick": runs[0][1]["yardstick"].values,
        },
    )
    per_size = []
    for label, (student, ds, s) in zip(labels, runs):
        es = early_stopping(
            steps, ds["val_loss"].values, ds["kl_baseline"].values, np.asarray(contexts)
        )
        per_size.append(
            {
                "size": label,
                "train_size": student.train_size,
                "batch": student.minibatch,
                **es,
                "best_excess_loss": es["best_val_loss"] - bayes,
                "final_val_loss": float(ds["val_loss"].values[-1]),
                "final_train_loss": float(ds["train_loss"].values[-1]),
                "seconds": s["compile_seconds"] + s["run_seconds"],
            }
        )
    stages = [r["stage_at_best"] for r in per_size]
    finite = [r for r in per_size if r["train_size"] is not None]
    largest = per_size[-1]  # online when trained, else the largest n
    check = {
        "smallest_size": finite[0]["size"] if finite else None,
        "largest_or_online": largest["size"],
        "fewer_stages_with_smallest_n": bool(finite)
        and finite[0]["stage_at_best"] < largest["stage_at_best"],
        "stage_nondecreasing_in_n": bool(np.all(np.diff(stages) >= 0)),
        "earlier_stop_with_smallest_n": bool(finite)
        and finite[0]["early_stopping_step"] < largest["early_stopping_step"],
    }
    baseline_runs = {int(c): read_summary(p) for c, p in zip(contexts, dirs)}
    summary = {
        "setting": {
            "model": "minimal",
            **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.settings().items()},
            "online": cfg.online,
            "blocks": list(cfg.train.blocks),
            "baseline_steps": base.steps,
            "learning_rate": base.learning_rate,
            "query_scale": cfg.train.query_scale,
            "quick": cfg.quick,
            "minibatch_rule": markov_training.minibatch_rule(cfg.student(None)),
        },
        "bayes_loss": bayes,
        "yardstick_losses": runs[0][2]["yardstick_losses"],
        "baseline_rule": BASELINE_RULE,
        "baseline_val_losses": {c: b["final_val_loss"][0] for c, b in baseline_runs.items()},
        "baseline_seconds": {
            c: b["compile_seconds"] + b["run_seconds"] for c, b in baseline_runs.items()
        },
        "early_stopping_rule": EARLY_STOPPING_RULE,
        "closest_rule": CLOSEST_RULE,
        "per_size": per_size,
        "check": check,
        "runs": [str(path) for path in paths],
        "baseline_runs": [str(p) for p in dirs],
    }
    return data, summary


def predictions(summary: dict) -> list[Prediction]:
    """The complexity ladder under early stopping (spec §5.8): the largest set (or online) learns
    every block by its early-stopping step, the smallest fewer, and the stage there does not
    fall as n grows (1 = yes)."""
    largest = summary["per_size"][-1]
    check = summary["check"]
    return [
        Prediction(
            f"stage at the early-stopping step, {largest['size']} (lag blocks learned)",
            len(summary["setting"]["blocks"]),
            largest["stage_at_best"],
            0.0,
            f"{CLOSEST_RULE}; with enough data every block is learned",
            "difference",
        ),
        Prediction(
            f"fewer stages at early stopping with {check['smallest_size']} than with "
            f"{check['largest_or_online']} (1 = yes)",
            1.0,
            float(check["fewer_stages_with_smallest_n"]),
            0.0,
            f"{CLOSEST_RULE}; smaller datasets yield fewer learned stages",
            "difference",
        ),
        Prediction(
            "stage at early stopping non-decreasing in n (1 = yes)",
            1.0,
            float(check["stage_nondecreasing_in_n"]),
            0.0,
            f"{CLOSEST_RULE}; the stage index at early stopping increases with n",
            "difference",
        ),
    ]


def report(summary: dict) -> str:
    rows = [
        [
            r["size"],
            r["batch"],
            r["early_stopping_step"],
            r["best_excess_loss"],
            r["closest_context_at_best"],
            r["stage_at_best"],
            r["seconds"],
        ]
        for r in summary["per_size"]
    ]
    check = summary["check"]
    return "\n".join(
        [
            format_table(
                [
                    "size",
                    "batch",
                    "early-stop step",
                    "best excess (nats)",
                    "closest c-gram",
                    "stage",
                    "seconds",
                ],
                rows,
            ),
            (
                f"fewer stages at early stopping with {check['smallest_size']} than with "
                f"{check['largest_or_online']}: {check['fewer_stages_with_smallest_n']}; "
                f"stage non-decreasing in n: {check['stage_nondecreasing_in_n']}"
            ),
        ]
    )


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    steps = data["step"].values
    labels = [r["size"] for r in summary["per_size"]]  # in the order of the size coordinate
    colours = dict(zip(labels, plt.cm.viridis(np.linspace(0, 0.9, len(labels)))))
    stops = {r["size"]: float(r["early_stopping_step"]) for r in summary["per_size"]}
    contexts = [int(c) for c in data["baseline"].values]
    fig, axes = plt.subplots(
        1, 1 + len(contexts), figsize=(4.4 * (1 + len(contexts)), 4.4), layout="constrained"
    )
    ax = axes[0]
    bayes = float(summary["bayes_loss"])
    for label in labels:
        best = np.maximum(
            data["best_excess_loss"].isel(size=labels.index(label)).values, EXCESS_FLOOR
        )
        ax.plot(steps, best, color=colours[label], label=label)
        i = int(np.argmin(np.abs(steps - stops[label])))
        ax.plot(steps[i], best[i], "o", color=colours[label], ms=4)
    for c, v in summary["baseline_val_losses"].items():
        ax.axhline(max(float(v) - bayes, EXCESS_FLOOR), color="grey", ls=":", lw=1)
        ax.text(
            steps[-1],
            max(float(v) - bayes, EXCESS_FLOOR),
            f" learned {c}-gram",
            fontsize=7,
            va="bottom",
            ha="right",
            color="grey",
        )
    ax.set(
        yscale="log",
        xlabel="training step",
        ylabel="best-so-far excess val. loss (nats)",
        title="early stopping: best excess loss (dots: best step)",
        xlim=(0, steps[-1]),
    )
    ax.legend(fontsize=7)
    for ax, c in zip(axes[1:], contexts):
        for label in labels:
            ax.plot(
                steps,
                data["kl_baseline"].isel(size=labels.index(label)).sel(baseline=c).values,
                color=colours[label],
                label=label,
            )
            ax.axvline(stops[label], color=colours[label], ls="--", lw=1)
        ax.set(
            yscale="log",
            xlabel="training step",
            ylabel="KL (nats)",
            xlim=(0, steps[-1]),
            title=f"KL to the learned {c}-gram",
        )
    axes[1].plot([], [], "k--", lw=1, label="early-stopping step")
    axes[1].legend(fontsize=7)
    st = summary["setting"]
    fig.suptitle(
        f"Minimal transformer, d = {st['vocab']}, spans {tuple(st['blocks'])}: "
        "smaller datasets stop early in a smaller-context class "
        f"(lr {st['learning_rate']:.3g}, {st['steps']} steps)"
    )
    return fig


FIGURE = Figure(
    "incremental-dataset-size",
    "incremental",
    "early stopping selects a smaller-context class with fewer training sequences (paper Fig. 5)",
    DatasetSizeConfig,
    compute,
    plot,
    report,
    how_to_read=(
        "Left: best-so-far excess validation loss for each training-set size and online, a dot "
        "at each size's early-stopping step (best validation loss), grey dotted levels: the "
        "learned baselines' excess losses. Other panels: KL to the learned 4-, 8- and 12-gram "
        "baselines for each size, dashed lines at each size's early-stopping step; the summary "
        "gives the baseline closest in KL there, i.e. the context class early stopping selects."
    ),
    predictions=predictions,
)
