"""The run store (ARCHITECTURE §2): one directory per run.

    config.json      resolved config, seeds, package versions, git revision, command line
    trajectory.zarr  xarray Dataset (dims seed, step, ...) appended chunk by chunk
    summary.json     status, stage times, plateau values, final metrics
    checkpoint/      state.eqx (every leaf of the training state, equinox's
                     ``tree_serialise_leaves``) + meta.json (step, rows logged)

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
from typing import Any, TypeVar, overload

import equinox as eqx
import numpy as np
import xarray as xr
from jaxtyping import PyTree

STATE = "state.eqx"
"""The checkpoint's leaves: one ``.npy`` record per leaf, in ``jax.tree_util`` leaf order."""

T = TypeVar("T")

PACKAGES = ("jax", "jaxlib", "diffrax", "equinox", "optax", "sympy", "numpy", "xarray", "zarr")


def jsonable(x: Any) -> Any:
    """``x`` with numpy arrays and scalars, tuples and paths turned into JSON values."""
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


def versions() -> dict[str, str | None]:
    """Versions of Python and of the packages a run depends on."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision() -> str | None:
    """HEAD of the source checkout (``+dirty`` with uncommitted changes), None outside git."""
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


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=2) + "\n")
    os.replace(tmp, path)


class RunStore:
    """One run directory: create it, append trajectory chunks, checkpoint, summarise."""

    def __init__(self, path: Path | str):
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
        """config.json of the run."""
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
        """Rows stored in trajectory.zarr (0 before the first append)."""
        if not self.trajectory_path.exists():
            return 0
        with xr.open_zarr(self.trajectory_path, consolidated=False) as ds:
            return ds.sizes["step"]

    def save_checkpoint(self, state: PyTree, step: int, rows: int) -> None:
        """Write ``state`` (any pytree of arrays) with the step it reached and the rows logged
        up to it; written to ``checkpoint.tmp`` and renamed, so a checkpoint is whole or absent."""
        tmp = self.path / "checkpoint.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        eqx.tree_serialise_leaves(tmp / STATE, state)
        _write_json(tmp / "meta.json", {"step": step, "rows": rows})
        old = self.path / "checkpoint.old"
        if self.checkpoint_path.exists():
            os.replace(self.checkpoint_path, old)
        os.replace(tmp, self.checkpoint_path)
        if old.exists():
            shutil.rmtree(old)

    @overload
    def load_checkpoint(self) -> tuple[list[np.ndarray], int, int]: ...
    @overload
    def load_checkpoint(self, like: T) -> tuple[T, int, int]: ...

    def load_checkpoint(self, like: Any = None) -> tuple[Any, int, int]:
        """(state, step, rows) of the last checkpoint.

        With ``like`` (a pytree of the state's structure: arrays or ``jax.ShapeDtypeStruct``)
        the state comes back in that structure, every leaf checked against its shape and dtype
        (``eqx.tree_deserialise_leaves``) and the file checked to hold no further leaf. Without
        it: the list of leaves as numpy arrays, for readers that know only a prefix of the state
        (e.g. the parameters of a stored run)."""
        path = self.checkpoint_path
        if not path.exists() and (self.path / "checkpoint.old").exists():
            path = self.path / "checkpoint.old"  # interrupted between the two renames
        meta = json.loads((path / "meta.json").read_text())
        with open(path / STATE, "rb") as f:
            if like is None:
                end = os.fstat(f.fileno()).st_size
                state: Any = []
                while f.tell() < end:
                    state.append(np.load(f))
            else:
                state = eqx.tree_deserialise_leaves(f, like)
                if f.read(1):
                    raise ValueError(
                        f"{path / STATE} holds more leaves than the state it is loaded into"
                    )
        return state, meta["step"], meta["rows"]

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` logged rows (those covered by the checkpoint)."""
        if self.rows() <= rows:
            return
        with xr.open_zarr(self.trajectory_path, consolidated=False) as ds:
            kept = ds.isel(step=slice(0, rows)).load()
        shutil.rmtree(self.trajectory_path)
        kept.to_zarr(self.trajectory_path, mode="w", consolidated=False)

    def write_summary(self, summary: dict) -> None:
        """Write summary.json (non-finite floats as the strings "nan", "inf")."""
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
