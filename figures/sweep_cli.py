"""``stagewise sweep EXPERIMENT --grid KEY=V1,V2,... [--executor local|ray] [overrides...]``.

Seeds run as one vmapped program inside each run (the experiment's own ``--seeds``); grid points
run in parallel worker processes, or as Ray tasks (``--executor ray [--address ADDR]``). Writes
``OUT/point-NNN/`` runs, the merged ``OUT/sweep.zarr``, ``OUT/sweep.json`` and the aggregate
figure ``OUT/sweep.{png,pdf}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tyro

from theory.validation import ConfigError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line through the CLI's ConfigError path, exit code 2
        raise ConfigError("sweep", " ".join(self._argv), message)


def _parser(name: str, argv: list[str]) -> _Parser:
    p = _Parser(
        prog=f"stagewise sweep {name}",
        allow_abbrev=False,
        description="Run EXPERIMENT at every point of a parameter grid, seeds vmapped "
        "inside each run; merge into one Dataset and plot mean and a 95% band "
        "over seeds.",
        epilog=f"Any other option is an override of the experiment "
        f"(stagewise sweep {name} --grid ... --seeds 4 --steps 500; "
        f"see stagewise run {name} --help).",
    )
    p._argv = argv
    p.add_argument(
        "--grid",
        nargs="+",
        metavar="KEY=V1,V2",
        help="parameter grid: config field and comma-separated values (the "
        "cartesian product of all items is run)",
    )
    p.add_argument(
        "--executor",
        default="local",
        help="local: parallel worker processes; ray: Ray tasks (needs stagewise[ray])",
    )
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster address (e.g. 127.0.0.1:6379); default: start a private "
        "local Ray instance",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        help="parallel worker processes (local) or CPUs of a private Ray instance",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="sweep directory (default runs/sweep-EXPERIMENT)"
    )
    p.add_argument(
        "--variable",
        default="loss",
        help="variable drawn in the aggregate figure (dims seed, step)",
    )
    return p


def sweep_main(args: list[str]) -> int:
    from figures.core.sweep_plot import write_sweep_figure
    from simulate.experiments import EXPERIMENTS
    from simulate.sweep import (
        EXECUTORS,
        ordered_dims,
        parse_grid,
        point_configs,
        run_sweep,
        sweep_record,
    )

    if not args or args[0] not in EXPERIMENTS:
        got = args[0] if args else "(none)"
        print(
            f"stagewise: error: experiment = {got!r}: one of {', '.join(EXPERIMENTS)}",
            file=sys.stderr,
        )
        return 2
    name, argv = args[0], list(args[1:])
    experiment = EXPERIMENTS[name]
    opts, rest = _parser(name, argv).parse_known_args(argv)
    if not opts.grid:
        raise ConfigError("grid", None, "required: --grid KEY=V1,V2,... (one or more items)")
    if opts.executor not in EXECUTORS:
        raise ConfigError("executor", opts.executor, "one of " + ", ".join(EXECUTORS))
    if opts.workers < 1:
        raise ConfigError("workers", opts.workers, "an integer >= 1")
    grid = parse_grid(opts.grid, experiment.config)
    base = tyro.cli(experiment.config, args=rest, prog=f"stagewise sweep {name}")
    out = opts.out or Path("runs") / f"sweep-{name}"
    point_configs(base, grid, out)  # every point validated before anything runs
    ds = run_sweep(
        name, base, grid, out, executor=opts.executor, address=opts.address, workers=opts.workers
    )
    paths = write_sweep_figure(ds, list(grid), out, variable=opts.variable)
    timing = sweep_record(out)["timing_s"]["total"]
    dims = " ".join(f"{k}={v}" for k, v in ordered_dims(ds, list(grid)).items())
    print(
        f"sweep {name}: {_npoints(ds, grid)} "
        f"points x {ds.sizes.get('seed', 1)} seeds, dims {dims}, {opts.executor} executor, "
        f"{timing:.1f} s -> {out / 'sweep.zarr'}, {paths[0]}"
    )
    return 0


def _npoints(ds, grid) -> int:
    n = 1
    for k in grid:
        n *= ds.sizes[k]
    return n
