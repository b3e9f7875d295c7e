"""The run store (ARCHITECTURE §2): one directory per run.

    config.json      resolved config, seeds, package versions, git revision, command line
    trajectory.zarr  xarray Dataset (dims seed, step, ...) appended chunk by chunk
    summary.json     status, stage times, plateau values, final metrics
    checkpoint/      state.eqx (every leaf of the training state, equinox's
                     ``tree_serialise_leaves``) + meta.json (step, rows logged)

    committed.json   {"rows": N}: the trajectory rows that are whole on disk ("all" for a
                     trajectory written at once by ``write``)
    .lock            the pid of the process writing the run (absent when none is)

Crash safety: at any instant of a SIGKILL or a power loss the directory is loadable up to its last
committed chunk and resumable from its last checkpoint. Write order per chunk: every variable's rows
are appended to trajectory.zarr and flushed to disk, then the chunk is committed by rewriting
committed.json (temporary file, fsync, rename), then the checkpoint is written to a temporary
directory and renamed (the first checkpoint precedes the first row, so committed rows always
have one). A swap of a directory keeps the previous version as ``NAME.old`` until the new one is
in place, and readers fall back to it. ``load`` reads only the committed rows (an append cut
between two variables leaves them of different lengths; the rows past the commit are never
read), and a resume keeps the rows up to the checkpoint and drops the rest (``truncate``, itself
written aside and renamed). config.json and summary.json are written to a temporary file and
renamed.
"""

from __future__ import annotations

import asyncio
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

from theory.validation import ConfigError

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


def _fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename into it) durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class RunFileError(ConfigError):
    """A file of a run directory that is missing, truncated or corrupt: ``path: what is wrong``
    (a ``ConfigError``, so the command line prints it as one line and exits 2)."""

    def __init__(self, path: Path | str, problem: str):
        Exception.__init__(self, f"{path}: {problem}")
        self.field, self.value, self.allowed = "file", str(path), problem


def read_json(path: Path, keys: tuple[str, ...] = ()) -> dict:
    """The JSON object in ``path``, which must hold ``keys``; ``RunFileError`` naming the file
    when it is missing, not JSON (truncated, corrupt, empty) or lacks a key."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RunFileError(path, "missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunFileError(path, f"unreadable ({err})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        what = "empty" if not text.strip() else f"not valid JSON, truncated or corrupt ({err})"
        raise RunFileError(path, what) from None
    if not isinstance(obj, dict):
        raise RunFileError(path, f"not a JSON object (holds a {type(obj).__name__})")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise RunFileError(path, "lacks the key(s) " + ", ".join(map(repr, missing)))
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically: a temporary file, fsync, rename."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(jsonable(obj), indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_tree(root: Path, since: float) -> None:
    """fsync every file under ``root`` modified at or after ``since`` (``time.time()``), and the
    directories holding them: the rows of a chunk are on disk before the chunk is committed."""
    dirs = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                if os.stat(p).st_mtime < since - 0.02:  # file times follow a coarse clock
                    continue
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            dirs.add(dirpath)
    for d in dirs:
        _fsync_dir(Path(d))


def _recover_dir(target: Path) -> None:
    """Finish a swap of ``_replace_dir`` that a kill cut between its two renames: ``target`` is
    gone and its previous version waits in ``target.old``."""
    old = target.with_name(target.name + ".old")
    if old.exists() and not target.exists():
        os.replace(old, target)


def _current(target: Path) -> Path:
    """``target``, or ``target.old`` while a swap cut by a kill waits to be finished: what a
    reader reads without finishing the swap itself (the writer may be running)."""
    old = target.with_name(target.name + ".old")
    return old if old.exists() and not target.exists() else target


def _replace_dir(tmp: Path, target: Path) -> None:
    """Move the finished directory ``tmp`` to ``target``: the old one is renamed aside to
    ``target.old`` first and removed last, so at every instant ``target`` or ``target.old`` is
    whole (``_recover_dir`` completes a cut swap)."""
    old = target.with_name(target.name + ".old")
    _recover_dir(target)
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    if old.exists():
        shutil.rmtree(old)


def _read_trajectory(path: Path, rows: int | None) -> xr.Dataset:
    """The first ``rows`` rows along ``step`` of every variable of the zarr store ``path`` (all
    rows when ``rows`` is None), loaded into memory. Variables of different lengths (an append
    cut between two variables) are read one by one and cut to ``rows``."""

    def cut(ds: xr.Dataset) -> xr.Dataset:
        return ds.isel(step=slice(0, rows)) if rows is not None and "step" in ds.dims else ds

    try:
        with xr.open_zarr(path, consolidated=False) as ds:
            return cut(ds).load()
    except ValueError:
        if rows is None:
            raise
    import zarr

    names = sorted(zarr.open_group(str(path), mode="r").array_keys())
    parts = []
    for name in names:
        others = [n for n in names if n != name]
        with xr.open_zarr(path, consolidated=False, drop_variables=others) as one:
            parts.append(cut(one).load())
    merged = xr.merge(parts, join="exact", compat="equals", combine_attrs="drop_conflicts")
    assert isinstance(merged, xr.Dataset)  # merge of Datasets
    return merged


def _append_rows(path: Path, chunk: xr.Dataset) -> bool:
    """Append the rows of ``chunk`` to the stored arrays along ``step``, all arrays at once: one
    trip through zarr's event loop, where xarray's ``to_zarr(append_dim=...)`` takes three per
    variable (0.1 s for the nine small variables of a chunk, most of a small run's store time).

    Only for a chunk whose variables along ``step`` are exactly the stored ones, each with the
    stored dimensions and dtype, so the values go to disk as xarray would write them; returns
    False, having written nothing, for any other chunk (xarray then appends it)."""
    import zarr.api.asynchronous as zarr_async
    from zarr.core.sync import sync

    rows = {str(name): var for name, var in chunk.variables.items() if "step" in var.dims}

    async def append() -> bool:
        group = await zarr_async.open_group(str(path), mode="r+")
        stored = {name: array async for name, array in group.arrays()}
        along = {name for name, array in stored.items() if "step" in _dimension_names(array)}
        if along != set(rows) or any(
            _dimension_names(stored[n]) != v.dims or stored[n].dtype != v.dtype
            for n, v in rows.items()
        ):
            return False
        await asyncio.gather(
            *(
                stored[n].append(np.asarray(v.values), axis=v.dims.index("step"))
                for n, v in rows.items()
            )
        )
        return True

    return sync(append())


def _dimension_names(array: Any) -> tuple[str, ...]:
    """The dimension names xarray stored with a zarr array (format 3 metadata or, for format 2,
    the ``_ARRAY_DIMENSIONS`` attribute)."""
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS", ())
    return tuple(names)


def check_output(path: Path | str, overwrite: bool = False, field: str = "out") -> None:
    """Refuse (``ConfigError`` on ``field``, before anything is computed) an output directory
    that is an existing file, that cannot be written, or that holds something already (unless
    ``overwrite``): a run is never destroyed by starting another one in its place. A sub-run
    inside a run directory this process holds the lock of (a figure's training runs) was checked
    with that directory and is not refused again."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(field, str(path), "an existing file; choose a directory for --out")
    inside = any(held in path.resolve().parents for held in _HELD)
    if (
        path.is_dir()
        and any(not p.name.startswith(LOCK) for p in path.iterdir())
        and not (overwrite or inside)
    ):
        hint = " (or --resume it)" if (path / "checkpoint").exists() else ""
        raise ConfigError(
            field, str(path), f"exists; pass --overwrite or choose another --out{hint}"
        )
    base = path
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise ConfigError(field, str(path), f"a directory path ({base} is a file)")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(field, str(path), f"a writable directory ({base} is not writable)")


def clear_run_dir(path: Path) -> None:
    """Empty the run directory ``path`` (its lock, held by the caller, stays): what ``--overwrite``
    does before a figure or sweep recomputes into it."""
    for child in path.iterdir():
        if child.name == LOCK:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


LOCK = ".lock"
"""The lock file of a run directory: the pid of the process writing it."""

_HELD: set[Path] = set()
"""Run directories whose lock this process holds."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """``with RunLock(path):`` -- the run directory ``path`` is written by this process only.

    The lock is ``path/.lock`` created with ``O_CREAT | O_EXCL`` and holding the pid; removed on
    exit. A lock whose process is gone (killed) is taken over; a live one is a ``ConfigError``."""

    def __init__(self, path: Path | str, field: str = "out"):
        self.path, self.field = Path(path), field
        self.file = self.path / LOCK
        self.held = False

    def __enter__(self) -> RunLock:
        self.path.mkdir(parents=True, exist_ok=True)
        # the pid is written first and the file linked into place (atomic, fails if the lock
        # exists, like O_CREAT | O_EXCL), so a lock file always names its process
        tmp = self.path / f"{LOCK}.{os.getpid()}"
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        try:
            for _ in range(3):
                try:
                    os.link(tmp, self.file)
                except FileExistsError:
                    try:
                        pid = int(self.file.read_text().strip())
                    except (OSError, ValueError):
                        pid = 0
                    if pid and _alive(pid):
                        raise ConfigError(
                            self.field,
                            str(self.path),
                            f"not locked by another process (pid {pid} is writing it; "
                            f"remove {self.file} if that process is gone)",
                        ) from None
                    self.file.unlink(missing_ok=True)  # stale: its process is gone
                    continue
                self.held = True
                _HELD.add(self.path.resolve())
                return self
        finally:
            tmp.unlink(missing_ok=True)
        raise ConfigError(self.field, str(self.path), f"lockable (could not take {self.file})")

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.file.unlink(missing_ok=True)
            _HELD.discard(self.path.resolve())
            self.held = False


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
        (self.path / "summary.json").unlink(missing_ok=True)
        self._commit(0)
        for stale in ("trajectory.zarr", "checkpoint", "checkpoint.old", "checkpoint.tmp"):
            for path in (
                self.path / stale,
                self.path / (stale + ".old"),
                self.path / (stale + ".tmp"),
            ):
                if path.exists():
                    shutil.rmtree(path)
        write_json(
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
        return read_json(self.path / "config.json", ("experiment", "config"))

    def update_config(self, **entries: Any) -> None:
        """Rewrite config.json with ``entries`` replaced (e.g. the seed ids a figure learnt)."""
        write_json(self.path / "config.json", {**self.config(), **entries})

    @property
    def committed_path(self) -> Path:
        return self.path / "committed.json"

    def _commit(self, rows: int | None) -> None:
        write_json(self.committed_path, {"rows": "all" if rows is None else rows})

    def committed(self) -> int | None:
        """Committed trajectory rows; None when the whole trajectory is committed (written at
        once by ``write``, or by a run from before commits were recorded)."""
        try:
            rows = read_json(self.committed_path, ("rows",))["rows"]
        except RunFileError:
            if not self.committed_path.exists():
                return None
            raise
        if rows == "all":
            return None
        if not isinstance(rows, int) or rows < 0:
            raise RunFileError(self.committed_path, f"rows = {rows!r} is not a row count")
        return rows

    def recover(self) -> None:
        """Finish a swap of the trajectory or the checkpoint cut between its two renames."""
        _recover_dir(self.trajectory_path)
        _recover_dir(self.checkpoint_path)

    def append(self, chunk: xr.Dataset, rows_per_chunk: int | None = None) -> None:
        """Append rows along ``step`` and commit them. The first call fixes the zarr chunking:
        ``rows_per_chunk`` rows per zarr chunk (default: this call's rows), so later appends
        write whole chunks."""
        before = self.rows()
        t0 = time.time()
        if self.trajectory_path.exists() and before > 0:
            if not _append_rows(self.trajectory_path, chunk):
                chunk.to_zarr(self.trajectory_path, append_dim="step", consolidated=False)
        else:
            rows = rows_per_chunk or chunk.sizes["step"]
            encoding = {
                name: {"chunks": tuple(rows if d == "step" else chunk.sizes[d] for d in var.dims)}
                for name, var in chunk.data_vars.items()
            }
            chunk.to_zarr(self.trajectory_path, mode="w", consolidated=False, encoding=encoding)
        _fsync_tree(self.trajectory_path, t0)
        self._commit(before + chunk.sizes["step"])

    def write(self, data: xr.Dataset) -> None:
        """Write a whole trajectory at once (results computed in one go, e.g. an ODE solve):
        written aside, renamed into place, then committed."""
        self._replace_trajectory(data)
        self._commit(None)

    def _replace_trajectory(self, data: xr.Dataset) -> None:
        """``data`` written to ``trajectory.zarr.tmp``, flushed, and swapped into place."""
        tmp = self.path / "trajectory.zarr.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        data.to_zarr(tmp, mode="w", consolidated=False)
        _fsync_tree(tmp, 0.0)
        _replace_dir(tmp, self.trajectory_path)

    def rows(self) -> int:
        """Committed rows of trajectory.zarr (0 before the first append)."""
        committed = self.committed()
        if committed is not None:
            return committed
        trajectory = _current(self.trajectory_path)
        if not trajectory.exists():
            return 0
        with xr.open_zarr(trajectory, consolidated=False) as ds:
            return ds.sizes.get("step", 0)

    def save_checkpoint(self, state: PyTree, step: int, rows: int) -> None:
        """Write ``state`` (any pytree of arrays) with the step it reached and the rows logged
        up to it; written to ``checkpoint.tmp`` and renamed, so a checkpoint is whole or absent."""
        tmp = self.path / "checkpoint.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        eqx.tree_serialise_leaves(tmp / STATE, state)
        write_json(tmp / "meta.json", {"step": step, "rows": rows})
        _fsync_tree(tmp, 0.0)
        _replace_dir(tmp, self.checkpoint_path)

    def check_resumable(self) -> None:
        """Raise ``RunFileError`` naming the file unless the run can be resumed: config.json,
        committed.json and the checkpoint's meta.json readable, and the checkpoint and the
        trajectory present wherever rows were committed (checked before anything compiles)."""
        self.config()
        rows = self.rows()
        if self.has_checkpoint():
            path = _current(self.checkpoint_path)
            meta = read_json(path / "meta.json", ("step", "rows"))
            if not (path / STATE).is_file():
                raise RunFileError(path / STATE, "missing")
            if meta["rows"] > rows:
                raise RunFileError(
                    self.trajectory_path,
                    f"holds {rows} committed rows, fewer than the {meta['rows']} of the checkpoint",
                )
        elif rows > 0:
            raise RunFileError(
                self.checkpoint_path, f"missing, though {rows} trajectory rows are committed"
            )
        if rows > 0 and not _current(self.trajectory_path).exists():
            raise RunFileError(self.trajectory_path, f"missing ({rows} rows are committed)")

    def has_checkpoint(self) -> bool:
        """Whether a checkpoint was written (a run killed before its first one has none)."""
        return _current(self.checkpoint_path).exists()

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
        path = _current(self.checkpoint_path)
        meta = read_json(path / "meta.json", ("step", "rows"))
        if not (path / STATE).is_file():
            raise RunFileError(path / STATE, "missing")
        try:
            with open(path / STATE, "rb") as f:
                if like is None:
                    end = os.fstat(f.fileno()).st_size
                    state: Any = []
                    while f.tell() < end:
                        state.append(np.load(f))
                else:
                    state = eqx.tree_deserialise_leaves(f, like)
                    if f.read(1):
                        raise ValueError("it holds more leaves than the state it is loaded into")
        except (OSError, ValueError, EOFError, RuntimeError) as err:
            raise RunFileError(path / STATE, f"corrupt ({err})") from None
        return state, meta["step"], meta["rows"]

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` logged rows (those covered by the checkpoint); rows past them,
        committed or not (a chunk cut by a kill), are dropped. The kept rows are written aside
        and renamed into place, so a kill during the truncation loses nothing."""
        self.recover()
        self._commit(min(rows, self.rows()))  # lowering the commit first is always safe
        if not self.trajectory_path.exists():
            return
        if rows == 0:
            shutil.rmtree(self.trajectory_path)
            return
        kept = _read_trajectory(self.trajectory_path, rows)
        try:
            with xr.open_zarr(self.trajectory_path, consolidated=False) as ds:
                consistent = ds.sizes.get("step", rows) == rows
        except ValueError:  # variables of different lengths
            consistent = False
        if not consistent:
            self._replace_trajectory(kept)

    def write_summary(self, summary: dict) -> None:
        """Write summary.json (non-finite floats as the strings "nan", "inf")."""
        write_json(self.path / "summary.json", summary)


def read_summary(path: Path | str) -> dict:
    """summary.json of a run directory (the reader beside ``RunStore.write_summary``)."""
    return read_json(Path(path) / "summary.json")


def load(path: Path | str) -> tuple[xr.Dataset, dict]:
    """The stored trajectory (loaded into memory) and config.json of a run directory: the
    committed rows only (see the module's crash safety)."""
    store = RunStore(Path(path))
    config = store.config()
    rows = store.committed()
    if rows == 0:
        return xr.Dataset(), config  # killed before the first row was committed
    trajectory = _current(store.trajectory_path)
    if not trajectory.exists():
        committed = "the whole trajectory is" if rows is None else f"{rows} rows are"
        raise RunFileError(trajectory, f"missing ({committed} committed)")
    try:
        return _read_trajectory(trajectory, rows), config
    except (OSError, ValueError, KeyError) as err:
        raise RunFileError(trajectory, f"unreadable ({err})") from None
