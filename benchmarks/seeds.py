"""Seed scaling of every trainer: seed-steps per second with 1, 8 and 32 seeds vmapped in one
program (``simulate.train.train`` without a store, small step counts, compile apart). Ratio:
throughput with n seeds / throughput with one seed (n: perfect scaling; 1: seeds cost as much as
separate runs)."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax

from benchmarks.clustering_epochs import epochs_per_second
from benchmarks.emergence_steps import steps_per_second
from benchmarks.markov_training import config as markov_config
from benchmarks.markov_training import timed as markov_timed
from benchmarks.table import Row
from simulate.clustering_head.training import ClusteringConfig
from simulate.focus_dilution import training as focus
from simulate.incremental import head_training, regression_training
from simulate.mean_field import training as mean_field
from simulate.train import train


def _run(problem, optimizer, schedule, seeds: int) -> tuple[float, float]:
    """(steps per second of the whole vmapped run, compile seconds)."""
    result = train(problem, optimizer, schedule, list(range(seeds)), None, progress=False)
    return schedule.steps / result.run_seconds, result.compile_seconds


def heads_gd(seeds: int, steps: int) -> tuple[float, float]:
    cfg = head_training.HeadTrainConfig(seeds=seeds, steps=steps, log_every=steps, chunk=steps)
    return _run(head_training.problem(cfg), head_training.optimizer(cfg), cfg.schedule, seeds)


def markov_minimal(seeds: int, steps: int) -> tuple[float, float]:
    compile_s, run_s = markov_timed(markov_config(steps, seeds=seeds), list(range(seeds)))
    return steps / run_s, compile_s


def regression_minimal(seeds: int, steps: int) -> tuple[float, float]:
    from optax import sgd

    cfg = regression_training.RegressionConfig(
        seeds=seeds, steps=steps, log_every=steps, chunk=steps
    )
    return _run(regression_training.problem(cfg)[0], sgd(cfg.lr), cfg.schedule, seeds)


def clustering_head(seeds: int, steps: int, hessian_iterations: int) -> tuple[float, float]:
    """``steps`` rounds up to whole epochs (64 steps each, the evaluation included)."""
    per_epoch = ClusteringConfig().steps_per_epoch
    epochs = max(1, steps // per_epoch)
    rate, compile_s = epochs_per_second(seeds, epochs, hessian_iterations, "epoch")
    return rate * per_epoch, compile_s


def clustering_head_hessian(seeds: int, steps: int) -> tuple[float, float]:
    """The experiment's default: the top Hessian eigenvalue logged every epoch."""
    return clustering_head(seeds, steps, ClusteringConfig().hessian_iterations)


def clustering_head_figures(seeds: int, steps: int) -> tuple[float, float]:
    """As every clustering-head figure but the loss spike runs it: no Hessian logged."""
    return clustering_head(seeds, steps, 0)


def emergence_quick(seeds: int, steps: int) -> tuple[float, float]:
    """The quick setting of emergence-times (S = 6, batch 64, H = 8, d_h = 4)."""
    return steps_per_second(seeds, steps, S=6, batch=64, heads=8, head_dim=4)


def focus_dilution(seeds: int, steps: int) -> tuple[float, float]:
    cfg = focus.FocusDilutionConfig(seeds=seeds, steps=steps, log_every=steps, chunk=steps)
    return _run(focus.markov_problem(cfg)[0], focus.optimizer(cfg), cfg.schedule, seeds)


def mean_field_ffn(seeds: int, steps: int) -> tuple[float, float]:
    cfg = mean_field.MeanFieldConfig(seeds=seeds, steps=steps, log_every=steps, chunk=steps)
    return _run(mean_field.problem(cfg), mean_field.optimizer(cfg), cfg.schedule, seeds)


TRAINERS: dict[str, tuple[Callable[[int, int], tuple[float, float]], int, str]] = {
    # name: (steps per second of n seeds, steps timed, setting)
    "heads-gd": (heads_gd, 2000, "reduced heads, Euler dt 0.005"),
    "markov minimal": (markov_minimal, 3, "paper: d 50, batch 3000, float64"),
    "regression-minimal": (regression_minimal, 200, "d 8, L 8, 512 sequences"),
    "clustering-head": (clustering_head_figures, 640, "paper: p 2, L 12, batch 32"),
    "clustering-head Hessian": (
        clustering_head_hessian,
        128,
        "paper: p 2, L 12, batch 32, Hessian logged",
    ),
    "emergence": (emergence_quick, 100, "emergence-times quick: S 6, batch 64"),
    "focus-dilution": (focus_dilution, 100, "markov, s 256, 2048 sequences full batch"),
    "mean-field": (mean_field_ffn, 2, "N 512, 320 Euler steps, 3 lambdas"),
}
SEED_COUNTS = {"full": (1, 8, 32), "quick": (1, 32)}
QUICK_TRAINERS = ("clustering-head",)


def measure(mode: str) -> list[Row]:
    names = QUICK_TRAINERS if mode == "quick" else tuple(TRAINERS)
    rows = []
    for name in names:
        fn, steps, setting = TRAINERS[name]
        one = None
        for n in SEED_COUNTS[mode]:
            label = f"{name}, {n} seed{'s' if n > 1 else ''} ({setting}), {steps} steps"
            try:
                steps_per_s, compile_s = fn(n, steps)
            except jax.errors.JaxRuntimeError as error:
                if "RESOURCE_EXHAUSTED" not in str(error):
                    raise
                # more seeds need more memory still: the trainer's row ends here, the table goes on
                message = str(error).splitlines()[0]
                rows.append(Row("seed scaling", label, math.nan, "seed-steps/s", note=message))
                break
            throughput = n * steps_per_s
            one = throughput if n == 1 else one
            rows.append(
                Row(
                    "seed scaling",
                    label,
                    throughput,
                    "seed-steps/s",
                    None if n == 1 else one,
                    None if n == 1 or one is None else throughput / one,
                    f"ratio: vs 1 seed; compile {compile_s:.1f} s apart",
                )
            )
    return rows
