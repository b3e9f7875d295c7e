"""The run store (ARCHITECTURE §2): one directory per run.

    config.json      resolved config, seeds, package versions, git revision, command line
    trajectory.zarr  xarray Dataset (dims seed, step, ...) appended chunk by chunk
    summary.json     status, stage times, plateau values, final metrics
    checkpoint/      state.npz (every leaf of the training state) + meta.json (step, rows logged)

Write order per chunk: trajectory rows first, then the checkpoint, each checkpoint written to a
temporary directory and renamed, so an interruption at any moment leaves a checkpoint that points
at rows already on disk. Rows logged after the last checkpoint are dropped on resume.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import xarray as xr

PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optax", "sympy", "numpy", "xarray", "zarr")


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else str(x)  # JSON has no nan/inf: "nan", "inf"
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return x


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        opts = {"cwd": here, "capture_output": True, "text": True, "timeout": 5}
        rev = subprocess.run(["git", "rev-parse", "HEAD"], check=False, **opts)
        dirty = subprocess.run(["git", "status", "--porcelain"], check=False, **opts)
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=2) + "\n")
    os.replace(tmp, path)


class RunStore:
    """One run directory: create it, append trajectory chunks, checkpoint, summarise."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def trajectory_path(self) -> Path:
        return self.path / "trajectory.zarr"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint"

    def create(
        self, experiment: str, config: dict, seeds: dict, output: dict | None = None
    ) -> None:
        """Start the run: clear what a previous run left and write config.json (``config`` is
        the experiment's or figure's resolved config, ``output`` where and how it was run)."""
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in (self.trajectory_path, self.checkpoint_path):
            if stale.exists():
                shutil.rmtree(stale)
        (self.path / "summary.json").unlink(missing_ok=True)
        _write_json(
            self.path / "config.json",
            {
                "experiment": experiment,
                "config": config,
                "output": output,
                "seeds": seeds,
                "versions": versions(),
                "git_revision": git_revision(),
                "command": sys.argv,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )

    def config(self) -> dict:
        return json.loads((self.path / "config.json").read_text())

    def append(self, chunk: xr.Dataset, rows_per_chunk: int | None = None) -> None:
        """Append rows along ``step``. The first call fixes the zarr chunking: ``rows_per_chunk``
        rows per zarr chunk (default: this call's rows), so later appends write whole chunks."""
        if self.trajectory_path.exists():
            chunk.to_zarr(self.trajectory_path, append_dim="step", consolidated=False)
            return
        rows = rows_per_chunk or chunk.sizes["step"]
        encoding = {
            name: {"chunks": tuple(rows if d == "step" else chunk.sizes[d] for d in var.dims)}
            for name, var in chunk.data_vars.items()
        }
        chunk.to_zarr(self.trajectory_path, mode="w", consolidated=False, encoding=encoding)

    def write(self, data: xr.Dataset) -> None:
        """Write a whole trajectory at once (results computed in one go, e.g. an ODE solve)."""
        data.to_zarr(self.trajectory_path, mode="w", consolidated=False)

    def rows(self) -> int:
        if not self.trajectory_path.exists():
            return 0
        with xr.open_zarr(self.trajectory_path, consolidated=False) as ds:
            return ds.sizes["step"]

    def save_checkpoint(self, leaves: list[np.ndarray], step: int, rows: int) -> None:
        tmp = self.path / "checkpoint.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        np.savez(tmp / "state.npz", *leaves)
        _write_json(tmp / "meta.json", {"step": step, "rows": rows})
        old = self.path / "checkpoint.old"
        if self.checkpoint_path.exists():
            os.replace(self.checkpoint_path, old)
        os.replace(tmp, self.checkpoint_path)
        if old.exists():
            shutil.rmtree(old)

    def load_checkpoint(self) -> tuple[list[np.ndarray], int, int]:
        path = self.checkpoint_path
        if not path.exists() and (self.path / "checkpoint.old").exists():
            path = self.path / "checkpoint.old"  # interrupted between the two renames
        meta = json.loads((path / "meta.json").read_text())
        with np.load(path / "state.npz") as z:
            leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
        return leaves, meta["step"], meta["rows"]

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` logged rows (those covered by the checkpoint)."""
        if self.rows() <= rows:
            return
        with xr.open_zarr(self.trajectory_path, consolidated=False) as ds:
            kept = ds.isel(step=slice(0, rows)).load()
        shutil.rmtree(self.trajectory_path)
        kept.to_zarr(self.trajectory_path, mode="w", consolidated=False)

    def write_summary(self, summary: dict) -> None:
        _write_json(self.path / "summary.json", summary)


def read_summary(path: Path | str) -> dict:
    """summary.json of a run directory (the reader beside ``RunStore.write_summary``)."""
    return json.loads((Path(path) / "summary.json").read_text())


def load(path: Path | str) -> tuple[xr.Dataset, dict]:
    """The stored trajectory (loaded into memory) and config.json of a run directory."""
    store = RunStore(Path(path))
    with xr.open_zarr(store.trajectory_path, consolidated=False) as ds:
        data = ds.load()
    return data, store.config()
