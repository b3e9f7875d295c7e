"""Parameter sweeps (ARCHITECTURE §3, ``stagewise sweep``): seeds x grid points.

Seeds run inside one run as one vmapped compiled program (the experiment's own ``seeds`` field);
grid points run as separate runs, in parallel worker processes (``executor="local"``) or as Ray
tasks on a Ray cluster (``executor="ray"``; Ray is the optional extra ``stagewise[ray]``). Each
point is the experiment's config with the grid's values and a ``RunOutput`` of its own. The runs
are merged into one xarray Dataset whose leading dims are the grid keys, then ``seed``, ``step``
and the rest, written to ``OUT/sweep.zarr`` with ``OUT/sweep.json`` (grid, executor, run
directories, timing).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import os
import shutil
import time
import types
import typing
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import xarray as xr

from simulate.runner import RunOptions, RunOutput
from theory.validation import ConfigError

EXECUTORS = ("local", "ray")
RESERVED = ("seeds", "seed", "out", "quiet", "resume", "store")
"""Fields a grid may not vary: the seed dimension (seeds run inside each point), and the run
layout should a config carry it (the sweep gives each point its own ``RunOutput``)."""

C = TypeVar("C", bound=RunOptions)

_SCALARS = (bool, int, float, str)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _scalar_kind(annotation: Any) -> tuple[type, tuple | None] | None:
    """(python type, allowed Literal values or None) of a scalar field, None if not scalar."""
    if annotation in _SCALARS:
        return annotation, None
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        kinds = {type(v) for v in values}
        return (kinds.pop(), values) if len(kinds) == 1 and kinds <= set(_SCALARS) else None
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _scalar_kind(args[0]) if len(args) == 1 else None
    return None


def _convert(text: str, kind: type) -> bool | int | float | str:
    if kind is bool:
        low = text.strip().lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ValueError(text)
    if kind is int:
        return int(text)
    if kind is float:
        return float(text)
    return text


def parse_grid(items: list[str], config_type: type) -> dict[str, list]:
    """``["m=1.5,2.0", "lr=0.1"]`` -> ``{"m": [1.5, 2.0], "lr": [0.1]}``.

    Keys are fields of the config dataclass (``log-every`` and ``log_every`` both name
    ``log_every``), values are converted to the field's scalar type (int, float, str, bool,
    a Literal, or one of those ``| None``). Any bad item raises ``ConfigError`` on field ``grid``.
    """
    hints = typing.get_type_hints(config_type)
    fields = [f.name for f in dataclasses.fields(config_type)]
    gridable = [f for f in fields if f not in RESERVED and _scalar_kind(hints[f]) is not None]
    if not items:
        raise ConfigError("grid", items, "at least one KEY=V1,V2,... item")
    grid: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(
                "grid", item, "an item KEY=V1,V2,... with KEY one of " + ", ".join(gridable)
            )
        if key not in gridable:
            why = (
                "fixed for a sweep (seeds run inside each point)"
                if key in RESERVED
                else "not a scalar parameter"
                if key in fields
                else "unknown parameter"
            )
            raise ConfigError("grid", item, f"{why}; KEY is one of {', '.join(gridable)}")
        if key in grid:
            raise ConfigError("grid", item, f"each KEY at most once ({key} repeated)")
        texts = [v.strip() for v in values.split(",")]
        if not values.strip() or any(not v for v in texts):
            raise ConfigError("grid", item, f"a non-empty comma-separated list of values for {key}")
        scalar = _scalar_kind(hints[key])
        assert scalar is not None  # key is gridable
        kind, allowed = scalar
        converted = []
        for text in texts:
            try:
                value = _convert(text, kind)
            except ValueError:
                raise ConfigError(
                    "grid", item, f"values of {key} must be of type {kind.__name__}"
                ) from None
            if allowed is not None and value not in allowed:
                raise ConfigError(
                    "grid", item, f"values of {key} are one of " + ", ".join(map(str, allowed))
                )
            converted.append(value)
        if len(set(converted)) != len(converted):
            raise ConfigError("grid", item, f"distinct values of {key}")
        grid[key] = converted
    return grid


def grid_points(grid: dict[str, list]) -> list[dict]:
    """Cartesian product of the grid, first key slowest (stable, row-major order)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def point_configs(
    base_cfg: C, grid: dict[str, list], out: Path, overwrite: bool = False
) -> list[tuple[C, RunOutput]]:
    """One validated config per grid point (``__post_init__`` runs here, before any compile),
    each with its output: a fresh (not resumed), quiet run in ``out/point-NNN`` with the run
    store on, since the merge reads the stored trajectories (``overwrite``: replacing the point's
    previous run, when the sweep itself is run with ``overwrite``)."""
    return [
        (
            dataclasses.replace(base_cfg, **point),
            RunOutput(
                out=Path(out) / f"point-{i:03d}",
                resume=None,
                quiet=True,
                store=True,
                overwrite=overwrite,
            ),
        )
        for i, point in enumerate(grid_points(grid))
    ]


def run_point(experiment_name: str, cfg: RunOptions, output: RunOutput) -> str:
    """Run one grid point in this process; returns its run directory.

    The entry point of a worker (a fresh spawned process or a Ray worker): it switches the
    process to float64 and the compilation cache first, as every stagewise entry point does
    (picklable, module level)."""
    from simulate.experiments import EXPERIMENTS
    from simulate.runtime import configure

    configure()
    path = EXPERIMENTS[experiment_name].run(cfg, output)
    assert isinstance(path, Path)  # output.store is on: the run directory
    return os.fspath(path)


def _run_local(name: str, points: list[tuple[RunOptions, RunOutput]], workers: int) -> list[str]:
    ctx = multiprocessing.get_context("spawn")  # fork after JAX initialised is unsafe
    cfgs, outputs = [p[0] for p in points], [p[1] for p in points]
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(points))), mp_context=ctx) as pool:
        return list(pool.map(run_point, [name] * len(points), cfgs, outputs))


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's single-machine mode: set to 0 before Ray is imported, every Ray service of a local
instance binds to 127.0.0.1 (``_node_ip_address`` alone still registers the host's address)."""


def _run_ray(
    name: str, points: list[tuple[RunOptions, RunOutput]], address: str | None, workers: int
) -> list[str]:
    with connect_ray(address, workers) as ray:
        task = ray.remote(num_cpus=1)(run_point)
        return ray.get([task.remote(name, cfg, output) for cfg, output in points])


@contextmanager
def connect_ray(address: str | None, workers: int) -> Iterator[Any]:
    """``with connect_ray(address, workers) as ray:`` the ``ray`` module, connected to the
    cluster at ``address``, or to a private local instance on loopback with ``workers`` CPUs
    when ``address`` is None; shut down (a cluster only disconnected) on exit. Already
    connected: used as it is and left connected. ``ConfigError`` when Ray is not installed or
    the cluster cannot be reached."""
    if not address:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "executor",
            "ray",
            "needs Ray installed: pip install 'stagewise[ray]' (or use --executor local)",
        ) from None
    started = not ray.is_initialized()
    if started:
        if address:
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError) as err:
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err)
                raise ConfigError(
                    "address", address, f"a reachable Ray cluster (ray start --head; {reason})"
                ) from None
        else:
            # a private single-node instance on loopback, sized to the requested workers
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
            )
            gcs = ray.get_runtime_context().gcs_address
            if not gcs.startswith("127."):
                ray.shutdown()
                raise ConfigError(
                    "executor",
                    "ray",
                    f"a local Ray instance on loopback; this one bound to {gcs} "
                    f"(Ray was imported before {LOOPBACK_ENV}=0 could be set)",
                )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()  # stops a local instance; for a cluster address only disconnects


def merge_runs(datasets: list[xr.Dataset], points: list[dict]) -> xr.Dataset:
    """One Dataset: grid keys as leading dims, then the runs' own dims (seed, step, ...)."""
    keys = list(points[0])
    order = {k: list(dict.fromkeys(p[k] for p in points)) for k in keys}
    # grid coordinates along "point" from the start, so that one point alone keeps them as dims
    tagged = [
        ds.expand_dims("point").assign_coords({k: ("point", [p[k]]) for k in keys})
        for ds, p in zip(datasets, points)
    ]
    stacked = xr.concat(
        tagged,
        dim="point",
        coords="different",
        compat="equals",
        join="outer",
        combine_attrs="drop_conflicts",
    )
    if len(keys) == 1:
        merged = stacked.swap_dims(point=keys[0]).drop_vars("point", errors="ignore")
    else:
        # unstack sorts the levels: restore the grid's own order
        merged = stacked.set_index(point=keys).unstack("point").reindex(order)
    merged = merged.transpose(*keys, ...)
    for name in list(merged.data_vars):
        rest = [d for d in merged[name].dims if d not in keys]
        lead = [d for d in ("seed", "step") if d in rest]
        merged[name] = merged[name].transpose(*keys, *lead, *[d for d in rest if d not in lead])
    return merged


def ordered_dims(ds: xr.Dataset, grid_keys: list[str]) -> dict[str, int]:
    """``ds.sizes`` ordered grid keys, seed, step, then the rest."""
    first = [*grid_keys, *(d for d in ("seed", "step") if d in ds.sizes)]
    return {d: ds.sizes[d] for d in [*first, *(d for d in ds.sizes if d not in first)]}


def run_sweep(
    experiment_name: str,
    base_cfg: RunOptions,
    grid: dict[str, list],
    out: Path,
    executor: str = "local",
    address: str | None = None,
    workers: int = 2,
    overwrite: bool = False,
) -> xr.Dataset:
    """Run every grid point of ``grid`` (seeds vmapped inside each run) and merge the results.

    Writes ``out/point-NNN/`` (one run directory per point), ``out/sweep.zarr`` and
    ``out/sweep.json``; returns the merged Dataset. A non-empty ``out`` is refused before any
    point runs unless ``overwrite`` (which replaces the points' previous runs); ``out`` is locked
    while the sweep runs.
    """
    from simulate.store import RunLock, check_output

    if executor not in EXECUTORS:
        raise ConfigError("executor", executor, "one of " + ", ".join(EXECUTORS))
    if workers < 1:
        raise ConfigError("workers", workers, "an integer >= 1")
    out = Path(out).resolve()  # workers (and Ray tasks) may run in another directory
    points = grid_points(grid)
    runs = point_configs(base_cfg, grid, out, overwrite)
    check_output(out, overwrite)
    with RunLock(out):
        return _run_sweep(experiment_name, grid, out, executor, address, workers, points, runs)


def _run_sweep(
    experiment_name: str,
    grid: dict[str, list],
    out: Path,
    executor: str,
    address: str | None,
    workers: int,
    points: list[dict],
    runs: list[tuple[RunOptions, RunOutput]],
) -> xr.Dataset:
    from simulate.store import jsonable, load

    t0 = time.perf_counter()
    if executor == "local":
        run_dirs = _run_local(experiment_name, runs, workers)
    else:
        run_dirs = _run_ray(experiment_name, runs, address, workers)
    t_run = time.perf_counter() - t0
    merged = merge_runs([load(d)[0] for d in run_dirs], points)
    merged.attrs.update(experiment=experiment_name, grid_keys=json.dumps(list(grid)))
    zarr_path = out / "sweep.zarr"
    if zarr_path.exists():
        shutil.rmtree(zarr_path)
    with warnings.catch_warnings():
        # grid values that are strings have no stable Zarr v3 dtype yet; xarray reads them back
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification")
        merged.to_zarr(zarr_path, mode="w", consolidated=False)
    t_total = time.perf_counter() - t0
    record = {
        "experiment": experiment_name,
        "grid": grid,
        "points": points,
        "executor": executor,
        "address": address,
        "workers": workers,
        "run_dirs": [os.fspath(d) for d in run_dirs],
        "dims": ordered_dims(merged, list(grid)),
        "timing_s": {"runs": t_run, "total": t_total},
    }
    (out / "sweep.json").write_text(json.dumps(jsonable(record), indent=2) + "\n")
    return merged


def load_sweep(out: Path) -> xr.Dataset:
    """The merged Dataset written by :func:`run_sweep` into ``out`` (loaded into memory)."""
    with xr.open_zarr(Path(out) / "sweep.zarr", consolidated=False) as ds:
        return ds.load()


def sweep_record(out: Path) -> dict:
    """``out/sweep.json``: grid, executor, run directories, timing."""
    return json.loads((Path(out) / "sweep.json").read_text())
