"""Projected wall time of the paper-setting figures too long to run on this CPU: each of the
figure's training runs at its paper setting (seeds, sizes, JAX CPU devices as the figure runs
it) is timed for one logged chunk and projected to its full step budget; the figure's runs
go one after the other, so their projections add. (The incremental figures run their baselines
and students side by side, one per core, where the probe gives a run both cores: the sum is the
wall for runs that keep both cores busy, up to twice it for runs that keep one busy.) Their runs
are timed for chunks of ``MARKOV_PROBE_STEPS`` steps at the run's own log rate, except the
learned baselines, which log once per 100 steps and are probed logging once per chunk (the probe
overstates their logging). Beside it the arithmetic: XLA's FLOP count of
one seed's training step (``cost_analysis()``, forward, backward and optimizer) times the
figure's seed-steps, and the time that work takes at the float32 matmul peak measured in the
same run, the floor no CPU implementation can go below here. Not counted: data generation,
logging I/O and the figure's own analysis (seconds against the hours projected). Each run is
probed in its own process (``python -m benchmarks.paper FIGURE INDEX``), so that one the machine
cannot hold is reported as failed, with its peak memory, instead of ending the benchmark, and
each run's projection is printed to stderr as it comes.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from functools import partial

from benchmarks.peak import matmul_peak
from benchmarks.table import Row, format_table
from benchmarks.transformer import lowered, step_of, xla_flops

PROBE_LOGS = 1
"""logged rows timed per run (the probe runs in chunks of one logging interval; the largest
emergence-ca-plateau runs take several seconds per step at the paper setting)."""


EMERGENCE = {
    "emergence-linear-map": ("linear_map", "LinearMapConfig"),
    "emergence-sparsity": ("sparsity", "SparsityConfig"),
    "emergence-mixer": ("mixer", "MixerConfig"),
    "emergence-times": ("times", "TimesConfig"),
    "emergence-heads-vs-dim": ("heads_vs_dim", "HeadsVsDimConfig"),
    "emergence-ca-plateau": ("ca_plateau", "CaPlateauConfig"),
}
"""figure id -> (module of figures.emergence, its options class with ``trainings()``)."""


def emergence_runs(figure_id: str) -> list:
    """The paper-setting runs of an emergence figure, in its order."""
    module, name = EMERGENCE[figure_id]
    options = getattr(importlib.import_module(f"figures.emergence.{module}"), name)
    return list(options().trainings().values())


MARKOV_PROBE_STEPS = 10
"""steps of an incremental run's probe chunk (the full transformer takes about 2.5 s a step at
batch 3000 here)."""


def incremental_full_runs() -> list:
    """The paper-setting runs of incremental-full: its two learned baselines, then the student."""
    from figures.incremental.full import FullConfig
    from simulate.incremental.markov_training import baseline_configs

    cfg = FullConfig()
    baselines = baseline_configs(cfg.baseline_training(), cfg.learned_contexts())
    return [*baselines.values(), cfg.training()]


def dataset_size_runs() -> list:
    """The paper-setting runs of incremental-dataset-size: its learned baselines, then one
    student per training-set size and online."""
    from figures.incremental.dataset_size import DatasetSizeConfig
    from simulate.incremental.markov_training import baseline_configs

    cfg = DatasetSizeConfig()
    return [
        *baseline_configs(cfg.baseline_training()).values(),
        *(cfg.student(n) for n in cfg.trained_sizes()),
    ]


def timing_training_runs() -> list:
    """The paper-setting runs of incremental-timing's training half, one per (q, m), seeds
    vmapped (its ODE half, tangents and expected-moment solves are not counted: minutes)."""
    from figures.incremental.timing import TimingConfig

    return TimingConfig().training_grid().configs()


def mean_field_escape_runs() -> list:
    """The paper-setting runs of mean-field-escape, one per (beta, tau), lambdas side by side
    in each."""
    from figures.mean_field.escape import EscapeConfig

    cfg = EscapeConfig()
    return [cfg.training(beta=beta, tau=tau) for beta, tau in cfg.cases()]


def ablation_runs() -> list:
    """The paper-setting runs of clustering-head-ablations (one per grid point)."""
    from figures.clustering_head.ablations import AblationsConfig, training
    from simulate.clustering_head.outcomes import ablation_points, learning_rates

    cfg = AblationsConfig()
    points = ablation_points(
        learning_rates(cfg.lr_values, cfg.lr_min, cfg.lr_max),
        cfg.batches,
        cfg.widths,
        cfg.default_point(),
    )
    return [training(cfg, p) for p in points]


FIGURES: dict[str, Callable[[], list]] = {
    **{figure_id: partial(emergence_runs, figure_id) for figure_id in EMERGENCE},
    "clustering-head-ablations": ablation_runs,
    "incremental-full": incremental_full_runs,
    "incremental-dataset-size": dataset_size_runs,
    "incremental-timing": timing_training_runs,
    "mean-field-escape": mean_field_escape_runs,
}
"""figure id -> its paper-setting runs. ``emergence-sparsity`` runs its points side by side
(about 1.2x faster than one after the other, README), so its sum overstates it."""


def _experiment(cfg):
    """(problem, optimizer) builders of the run's experiment."""
    from simulate.clustering_head.training import ClusteringSetting
    from simulate.incremental.markov_training import MarkovTrainConfig
    from simulate.mean_field.training import MeanFieldConfig

    if isinstance(cfg, ClusteringSetting):
        from simulate.clustering_head.training import optimizer, problem
    elif isinstance(cfg, MarkovTrainConfig):
        from simulate.incremental.markov_training import optimizer, problem
    elif isinstance(cfg, MeanFieldConfig):
        from simulate.mean_field.training import optimizer, problem
    else:
        from simulate.emergence.training import optimizer, problem
    return problem, optimizer


def probe(cfg, logs: int):
    """The run shortened to ``logs`` logged rows, one compiled chunk per row (the same step,
    logging and seeds as the paper run)."""
    from simulate.clustering_head.training import ClusteringSetting
    from simulate.incremental.markov_training import MarkovTrainConfig

    if isinstance(cfg, ClusteringSetting):  # one logged row per epoch
        return dataclasses.replace(cfg, epochs=logs, epochs_per_chunk=1)
    if isinstance(cfg, MarkovTrainConfig):  # chunks of MARKOV_PROBE_STEPS, the run's log rate
        n = MARKOV_PROBE_STEPS
        log_every = cfg.log_every if n % cfg.log_every == 0 else n
        return dataclasses.replace(cfg, steps=logs * n, log_every=log_every, chunk=n)
    return dataclasses.replace(cfg, steps=logs * cfg.log_every, chunk=cfg.log_every)


def step_flops(cfg) -> float:
    """XLA's FLOP count of one seed's training step (loss, gradient and optimizer update)."""
    problem, optimizer = _experiment(cfg)
    return xla_flops(lowered(step_of(problem(cfg), optimizer(cfg))).compile())


def run_projection(cfg, logs: int) -> tuple[float, float, float]:
    """(projected run seconds, compile seconds, seed-steps) of one paper-setting run."""
    from simulate.train import train

    problem_of, optimizer_of = _experiment(cfg)
    short = probe(cfg, logs)
    result = train(
        problem_of(short), optimizer_of(short), short.schedule, short.seed_ids, None, progress=False
    )
    steps = cfg.schedule.steps
    return (
        result.run_seconds * steps / short.schedule.steps,
        result.compile_seconds,
        float(steps * len(cfg.seed_ids)),
    )


def run_row(figure_id: str, index: int) -> dict:
    """One run's projection and FLOP count, for ``measure``'s subprocess (stdout, JSON)."""
    cfg = FIGURES[figure_id]()[index]
    seconds, compile_s, seed_steps = run_projection(cfg, PROBE_LOGS)
    return {
        "seconds": seconds,
        "compile": compile_s,
        "flop": step_flops(cfg) * seed_steps,
    }


def isolated(figure_id: str, index: int) -> tuple[dict | None, float]:
    """``run_row`` in a subprocess, so that a run the machine cannot hold (the kernel's
    out-of-memory killer) costs that run and not the table: (its result or None, its peak
    resident memory in GiB)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.paper", figure_id, str(index)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss / 2**20  # KiB on Linux
    if proc.returncode != 0:
        return None, peak
    return json.loads(out.strip().splitlines()[-1]), peak


def measure(mode: str, figure_ids: list[str] | None = None) -> list[Row]:
    ids = figure_ids or (list(FIGURES) if mode == "full" else ["emergence-linear-map"])
    peak = matmul_peak(2048 if mode == "full" else 1024, 3)
    rows = []
    for figure_id in ids:
        n = len(FIGURES[figure_id]())
        seconds = compile_s = flop = memory = 0.0
        failed = []
        for i in range(n):
            result, rss = isolated(figure_id, i)
            memory = max(memory, rss)
            if result is None:
                failed.append(i + 1)
                print(f"  {figure_id}: run {i + 1}/{n} failed ({rss:.1f} GiB)", file=sys.stderr)
                continue
            seconds, compile_s = seconds + result["seconds"], compile_s + result["compile"]
            flop += result["flop"]
            print(
                f"  {figure_id}: run {i + 1}/{n}: {result['seconds'] / 3600:.3f} h projected, "
                f"{result['flop']:.3g} FLOP, {rss:.1f} GiB",
                file=sys.stderr,
                flush=True,
            )
        floor = flop / peak
        note = (
            f"{PROBE_LOGS} logged chunk(s) per run timed and scaled to its steps; compile "
            f"{compile_s:.0f} s; {flop:.3g} FLOP (XLA), baseline: that at the measured float32 "
            f"matmul peak {peak / 1e9:.0f} GFLOP/s (ratio: projected / floor); peak memory of a "
            f"run {memory:.1f} GiB"
        )
        if failed:
            note += f"; runs {failed} failed (out of memory?), left out of both sums"
        row = Row(
            "paper setting, projected wall",
            f"{figure_id} ({n} runs)",
            seconds / 3600,
            "h",
            floor / 3600,
            seconds / floor if floor else float("nan"),
            note,
        )
        print(format_table([row]), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    from simulate.runtime import configure

    configure()
    print(json.dumps(run_row(sys.argv[1], int(sys.argv[2]))))
