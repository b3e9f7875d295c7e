"""``stagewise sweep``: grid parsing, merging seeds x grid points into one Dataset, the local and
Ray executors, the aggregate figure and the command line (``stagewise sweep EXPERIMENT``)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import xarray as xr

from figures.cli import main
from figures.core.sweep_plot import (
    aggregate_figure,
    default_variable,
    seed_statistics,
    write_sweep_figure,
)
from simulate.experiments import EXPERIMENTS
from simulate.runner import RunOutput
from simulate.store import load
from simulate.sweep import (
    grid_points,
    load_sweep,
    merge_runs,
    parse_grid,
    point_configs,
    run_sweep,
)
from theory.validation import ConfigError

HEADS = EXPERIMENTS["heads-gd"]
TINY = [
    "--steps",
    "200",
    "--log-every",
    "50",
    "--chunk",
    "100",
    "--window",
    "6",
    "--heads",
    "2",
    "--blocks",
    "1",
    "1",
]
TINY_KW = {"steps": 200, "log_every": 50, "chunk": 100, "window": 6, "heads": 2, "blocks": (1, 1)}


@dataclass
class Toy:
    n: int = 1
    x: float = 0.0
    name: str = "a"
    flag: bool = False
    mode: Literal["fast", "slow"] = "fast"
    eps: float | None = None
    sizes: tuple[int, ...] = (1,)
    out: Path = Path("runs")
    seeds: int = 1
    seed: int = 0
    quiet: bool = False
    resume: Path | None = None


# --- grid parsing ---------------------------------------------------------------------------


def test_parse_grid_converts_to_field_types():
    grid = parse_grid(
        ["n=1,2,3", "x=1,2.5e-3", "name=p,q", "flag=true,0", "mode=slow", "eps=1e-6"], Toy
    )
    assert grid == {
        "n": [1, 2, 3],
        "x": [1.0, 2.5e-3],
        "name": ["p", "q"],
        "flag": [True, False],
        "mode": ["slow"],
        "eps": [1e-6],
    }
    assert [type(v) for v in grid["n"]] == [int] * 3
    assert [type(v) for v in grid["x"]] == [float] * 2


def test_parse_grid_uses_real_experiment_config():
    grid = parse_grid(["m=1.5,2", "log-every=10,20", "optimizer=sgd,adam"], HEADS.config)
    assert grid == {"m": [1.5, 2.0], "log_every": [10, 20], "optimizer": ["sgd", "adam"]}
    assert type(grid["m"][1]) is float and type(grid["log_every"][0]) is int


@pytest.mark.parametrize(
    "item",
    [
        "bogus=1,2",  # unknown key
        "n=",  # empty values
        "n=1,,2",  # empty value
        "n",  # no '='
        "n=1.5",  # not an int
        "x=abc",  # not a float
        "flag=maybe",  # not a bool
        "mode=medium",  # not one of the Literal's values
        "sizes=1,2",  # not a scalar field
        "seeds=1,2",  # fixed: seeds are vmapped inside each run
        "out=a,b",  # fixed: run layout
        "n=1,1",  # duplicate values
    ],
)
def test_parse_grid_rejects_bad_items(item):
    with pytest.raises(ConfigError) as err:
        parse_grid([item], Toy)
    assert err.value.field == "grid"
    assert "\n" not in str(err.value)


def test_parse_grid_rejects_repeated_key_and_empty_grid():
    for items in (["n=1", "n=2"], []):
        with pytest.raises(ConfigError) as err:
            parse_grid(items, Toy)
        assert err.value.field == "grid"


def test_unknown_key_error_lists_the_allowed_keys():
    with pytest.raises(ConfigError) as err:
        parse_grid(["bogus=1"], HEADS.config)
    assert "m" in err.value.allowed.split("one of ")[1].split(", ")
    assert "seeds" not in err.value.allowed


def test_grid_points_is_the_cartesian_product_in_grid_order():
    grid = {"a": [3, 1], "b": ["x", "y", "z"]}
    points = grid_points(grid)
    assert len(points) == 6
    assert points == [{"a": a, "b": b} for a in (3, 1) for b in ("x", "y", "z")]
    assert grid_points({"a": [1]}) == [{"a": 1}]


def test_point_configs_give_each_point_its_config_and_its_own_output(tmp_path):
    base = HEADS.config(**TINY_KW, seeds=2)
    runs = point_configs(base, {"m": [1.5, 2.0], "lr": [0.01]}, tmp_path)
    assert [(cfg.m, cfg.lr) for cfg, _ in runs] == [(1.5, 0.01), (2.0, 0.01)]
    assert all(cfg == HEADS.config(**TINY_KW, seeds=2, m=cfg.m, lr=0.01) for cfg, _ in runs)
    assert [output for _, output in runs] == [
        RunOutput(out=tmp_path / f"point-{i:03d}", resume=None, quiet=True, store=True)
        for i in range(2)
    ]


# --- merge and figure (synthetic data, no JAX) ------------------------------------------------


def _fake_runs(grid, seeds=3, steps=(0, 10, 20, 30)):
    rng = np.random.default_rng(0)
    points = grid_points(grid)
    runs = [
        xr.Dataset(
            {
                "loss": (("seed", "step"), rng.uniform(0.5, 2.0, (seeds, len(steps)))),
                "mass": (("step", "seed", "head"), rng.uniform(size=(len(steps), seeds, 2))),
            },
            coords={"seed": np.arange(seeds), "step": list(steps)},
        )
        for _ in points
    ]
    return runs, points


def test_merge_runs_puts_each_run_at_its_grid_point():
    grid = {"m": [2.0, 1.5], "opt": ["sgd", "adam"]}
    runs, points = _fake_runs(grid)
    merged = merge_runs(runs, points)
    assert merged["loss"].dims == ("m", "opt", "seed", "step")
    assert merged["mass"].dims == ("m", "opt", "seed", "step", "head")
    assert merged["m"].values.tolist() == grid["m"]  # grid order kept, not sorted
    assert merged["opt"].values.tolist() == grid["opt"]
    for run, point in zip(runs, points):
        xr.testing.assert_equal(
            merged.sel(point).drop_vars(list(point)), run.transpose("seed", "step", ...)
        )


def test_seed_statistics_is_mean_and_normal_95_band():
    da = xr.DataArray(np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 7.0]]), dims=("seed", "step"))
    mean, lower, upper = seed_statistics(da)
    x = da.values
    half = 1.96 * x.std(0, ddof=1) / np.sqrt(x.shape[0])
    np.testing.assert_allclose(mean, x.mean(0))
    np.testing.assert_allclose(lower, x.mean(0) - half)
    np.testing.assert_allclose(upper, x.mean(0) + half)


def test_aggregate_figure_draws_mean_band_log_axis_and_legend(tmp_path):
    grid = {"m": [1.5, 2.0]}
    runs, points = _fake_runs(grid, seeds=4)
    ds = merge_runs(runs, points)
    fig = aggregate_figure(ds, ["m"])
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"  # the loss is positive
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "loss")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["m=1.5", "m=2"]
    for line, m in zip(ax.get_lines(), grid["m"]):
        np.testing.assert_allclose(line.get_ydata(), runs[grid["m"].index(m)]["loss"].mean("seed"))
    assert len(ax.collections) == 2  # one band per grid point
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    _, lower, upper = seed_statistics(ds["loss"].sel(m=1.5))
    assert np.isclose(band.min(), lower.min()) and np.isclose(band.max(), upper.max())
    with pytest.raises(ConfigError) as err:
        aggregate_figure(ds, ["m"], variable="mass")  # has a head dim: not a seed x step curve
    assert err.value.field == "variable"
    paths = write_sweep_figure(ds, ["m"], tmp_path)
    assert [p.name for p in paths] == ["sweep.png", "sweep.pdf"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_sweep_without_loss_draws_its_held_out_loss():
    """Experiments that log no ``loss`` (markov: ``train_loss``, ``val_loss``) draw their
    validation or test loss unless told, not an error after the sweep has run."""
    grid = {"m": [1.5, 2.0]}
    runs, points = _fake_runs(grid, seeds=2)
    renamed = [r.rename(loss="train_loss").assign(val_loss=2 * r["loss"]) for r in runs]
    ds = merge_runs(renamed, points)
    assert default_variable(ds, ["m"]) == "val_loss"
    assert aggregate_figure(ds, ["m"]).axes[0].get_ylabel() == "val_loss"
    assert default_variable(merge_runs(runs, points), ["m"]) == "loss"
    only_mass = merge_runs([r[["mass"]] for r in runs], points)
    with pytest.raises(ConfigError, match="variable"):
        default_variable(only_mass, ["m"])


# --- real sweeps of heads-gd ------------------------------------------------------------------


def _check_sweep(ds: xr.Dataset, out: Path, grid: dict, seeds: int, executor: str):
    """The merged Dataset equals the stored per-point runs, placed at their grid values."""
    keys = list(grid)
    assert ds["loss"].dims == (*keys, "seed", "step")
    for k in keys:
        assert ds[k].values.tolist() == grid[k]
    assert ds.sizes["seed"] == seeds
    assert ds["loss"].dtype == np.float64  # each worker switched itself to float64
    record = json.loads((out / "sweep.json").read_text())
    assert record["executor"] == executor and record["grid"] == grid
    assert record["timing_s"]["total"] > 0
    assert len(record["run_dirs"]) == len(grid_points(grid))
    for run_dir, point in zip(record["run_dirs"], grid_points(grid)):
        run, config = load(run_dir)
        for k, v in point.items():
            assert config["config"][k] == v  # the run really used its grid value
        assert config["config"]["seeds"] == seeds
        xr.testing.assert_equal(
            ds.sel(point).drop_vars(keys),
            run[list(ds.data_vars)].transpose(*ds.sel(point)["loss"].dims, ...),
        )
    # the grid parameter changes the result: the points are not copies of one run
    first, second = (ds["loss"].sel({keys[0]: v}) for v in grid[keys[0]][:2])
    assert not np.allclose(first.isel(step=-1), second.isel(step=-1))
    xr.testing.assert_equal(load_sweep(out), ds)


def test_cli_sweep_local_executor(tmp_path, capsys):
    out = tmp_path / "sweep"
    rc = main(
        [
            "sweep",
            "heads-gd",
            "--grid",
            "m=1.5,2.0",
            "--seeds",
            "4",
            "--out",
            str(out),
            "--workers",
            "2",
            *TINY,
        ]
    )
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"sweep directory: {out}"
    assert len(lines) == 2 and "m=2" in lines[1] and "seed=4" in lines[1]
    _check_sweep(load_sweep(out), out, {"m": [1.5, 2.0]}, 4, "local")
    assert (out / "sweep.png").stat().st_size > 0 and (out / "sweep.pdf").stat().st_size > 0


def test_ray_executor_on_a_local_instance(tmp_path):
    import ray  # in the test extra: this test must run in CI

    base = HEADS.config(**TINY_KW, seeds=4, seed=3)
    grid = {"m": [1.5, 2.0]}
    out = tmp_path / "sweep"
    ds = run_sweep("heads-gd", base, grid, out, executor="ray", workers=2)
    assert not ray.is_initialized()  # the instance run_sweep started is shut down again
    assert ds["seed"].values.tolist() == [3, 4, 5, 6]
    _check_sweep(ds, out, grid, 4, "ray")
    paths = write_sweep_figure(ds, list(grid), out)
    assert all(p.stat().st_size > 0 for p in paths)

    # an existing cluster, reached by its address: a head node started here on loopback (in
    # this test, so that stopping it cannot touch another test's instance)
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray_bin = Path(sys.executable).with_name("ray")
    head = subprocess.run(
        [
            str(ray_bin),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert head.returncode == 0, head.stderr
    try:
        remote = run_sweep(
            "heads-gd",
            base,
            grid,
            tmp_path / "remote",
            executor="ray",
            address=f"127.0.0.1:{port}",
            workers=2,
        )
        assert not ray.is_initialized()  # only disconnected; the cluster keeps running
        _check_sweep(remote, tmp_path / "remote", grid, 4, "ray")
        for name in ds.data_vars:
            np.testing.assert_array_equal(remote[name].values, ds[name].values)
    finally:
        subprocess.run([str(ray_bin), "stop"], capture_output=True, timeout=120, check=False)


def test_ray_missing_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    base = HEADS.config(**TINY_KW, seeds=1)
    with pytest.raises(ConfigError) as err:
        run_sweep("heads-gd", base, {"m": [1.5]}, tmp_path, executor="ray")
    assert err.value.field == "executor" and "stagewise[ray]" in str(err.value)


def test_invalid_grid_point_fails_before_anything_runs(tmp_path):
    base = HEADS.config(**TINY_KW, seeds=1)
    with pytest.raises(ConfigError) as err:
        run_sweep("heads-gd", base, {"lr": [0.01, -1.0]}, tmp_path / "s")
    assert err.value.field == "lr"
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError) as err:
        run_sweep("heads-gd", base, {"m": [1.5]}, tmp_path / "s", executor="dask")
    assert err.value.field == "executor"


# --- CLI errors -------------------------------------------------------------------------------


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stagewise: error: ")
    return err[0].removeprefix("stagewise: error: ")


def test_cli_bad_grid_key_is_a_config_error(tmp_path, capsys):
    assert main(["sweep", "heads-gd", "--grid", "bogus=1,2", "--out", str(tmp_path), *TINY]) == 2
    assert _one_line_error(capsys).startswith("grid = 'bogus=1,2': ")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, field",
    [
        (["--seeds", "2"], "grid"),  # --grid missing
        (["--grid", "m=1.5", "--executor", "dask"], "executor"),
        (["--grid", "m=1.5", "--workers", "0"], "workers"),
        (["--grid", "m=1.5", "--workers", "two"], "workers"),  # not an integer: the parser's
        (["--grid", "m=1.5,-2"], "m"),  # invalid point
    ],
)
def test_cli_bad_options_are_config_errors(tmp_path, capsys, args, field):
    assert main(["sweep", "heads-gd", *args, "--out", str(tmp_path), *TINY]) == 2
    assert _one_line_error(capsys).startswith(f"{field} = ")
    assert not any(tmp_path.iterdir())


def test_cli_unknown_experiment(capsys):
    assert main(["sweep", "no-such-experiment", "--grid", "m=1"]) == 2
    line = _one_line_error(capsys)
    assert "'no-such-experiment'" in line
    assert all(name in line for name in EXPERIMENTS)  # the experiments it could have been
