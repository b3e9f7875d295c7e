"""``stagewise sweep EXPERIMENT --grid KEY=V1,V2,... [--grid ...] [--executor local|ray]``
(plus the experiment's own options).

Seeds run as one vmapped program inside each run (the experiment's own ``--seeds``); grid points
run in parallel worker processes, or as Ray tasks (``--executor ray [--address ADDR]``). Writes
``OUT/point-NNN/`` runs, the merged ``OUT/sweep.zarr``, ``OUT/sweep.json`` and the aggregate
figure ``OUT/sweep.{png,pdf}``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from figures.core.sweep_plot import write_sweep_figure
from simulate.experiments import Experiment
from simulate.runner import default_run_dir
from simulate.sweep import ordered_dims, parse_grid, point_configs, run_sweep, sweep_record
from theory.validation import ConfigError, require


def grid_items(options) -> list[str]:
    """Every KEY=V1,V2 item of ``--grid``, whether given after one flag or several."""
    return [item for items in options.grid for item in items]


def sweep(experiment: Experiment, base, options) -> int:
    """Run ``experiment`` from ``base`` over the grid of ``options`` (a ``SweepOptions``)."""
    if not options.grid:
        raise ConfigError("grid", None, "required: --grid KEY=V1,V2,... (one or more items)")
    require(options.workers >= 1, "workers", options.workers, "an integer >= 1")
    grid = parse_grid(grid_items(options), experiment.config)
    point_configs(base, grid, Path("."))  # every point validated before anything runs
    out = options.out or default_run_dir(
        f"sweep-{experiment.name}", {"base": dataclasses.asdict(base), "grid": grid}
    )
    print(f"sweep directory: {out}", flush=True)
    ds = run_sweep(
        experiment.name,
        base,
        grid,
        out,
        executor=options.executor,
        address=options.address,
        workers=options.workers,
        overwrite=options.overwrite,
    )
    paths = write_sweep_figure(ds, list(grid), out, variable=options.variable)
    timing = sweep_record(out)["timing_s"]["total"]
    dims = " ".join(f"{k}={v}" for k, v in ordered_dims(ds, list(grid)).items())
    points = math.prod(ds.sizes[k] for k in grid)
    print(
        f"sweep {experiment.name}: {points} points x {ds.sizes.get('seed', 1)} seeds, dims {dims}, "
        f"{options.executor} executor, {timing:.1f} s -> {out / 'sweep.zarr'}, {paths[0]}"
    )
    return 0
