"""What every training experiment shares: its seeds and schedule (``RunOptions``, part of the
experiment's config), where it is written (``RunOutput``, not part of it), and the wrapper that
runs a ``Problem`` through the run store and writes summary.json whatever the outcome (complete,
interrupted, diverged, failed)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import optax
import xarray as xr

from simulate.store import RunLock, RunStore, check_output, load
from simulate.train import (
    DivergenceError,
    Interrupted,
    Problem,
    Schedule,
    TrainResult,
    seed_streams,
    train,
)
from theory.validation import ConfigError, require

SEED_RULE = "key(seed) folded with 0 (init), 1 (noise), 2 (data)"


@dataclass(frozen=True)
class Seeds:
    """Seed ids of a run or a figure (declared once for every experiment and figure)."""

    MAX_SEED: ClassVar[int] = 2**32 - 1
    """the largest seed id: keys are made from uint32 seeds (``simulate.train.seed_streams``)."""

    seeds: int = 4
    """number of seeds, vmapped in one compiled program."""
    seed: int = 0
    """first seed; seed ids are seed, seed+1, ..."""

    def __post_init__(self) -> None:
        require(
            1 <= self.seeds <= Seeds.MAX_SEED + 1,
            "seeds",
            self.seeds,
            f"an integer in [1, {Seeds.MAX_SEED + 1}]",
        )
        Seeds.check_seed("seed", self.seed)
        last = Seeds.MAX_SEED - self.seeds + 1
        require(
            self.seed <= last,
            "seed",
            self.seed,
            f"an integer in [0, {last}] with seeds = {self.seeds} (the last seed id, "
            f"seed + seeds - 1, is a uint32 seed <= {Seeds.MAX_SEED})",
        )

    @staticmethod
    def check_seed(field: str, value: int) -> None:
        """A seed option (``seed``, ``data_seed``, ...) is a uint32: in [0, MAX_SEED]."""
        require(
            0 <= value <= Seeds.MAX_SEED,
            field,
            value,
            f"an integer in [0, {Seeds.MAX_SEED}] (a uint32 seed)",
        )

    @property
    def seed_ids(self) -> list[int]:
        """The run's seed ids: ``seed, seed + 1, ..., seed + seeds - 1``."""
        return list(range(self.seed, self.seed + self.seeds))


@dataclass(frozen=True)
class RunOptions(Seeds):
    """Schedule and seeds of a training run: what the experiment computes, not where it goes."""

    steps: int = 100_000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 100
    """steps between logged rows."""
    chunk: int = 10_000
    """steps per compiled chunk and checkpoint (a multiple of log_every)."""

    def __post_init__(self) -> None:
        Seeds.__post_init__(self)
        require(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
        require(
            self.chunk >= 1 and self.chunk % self.log_every == 0,
            "chunk",
            self.chunk,
            f"a positive multiple of log_every = {self.log_every}",
        )
        require(
            self.steps >= 1 and self.steps % self.chunk == 0,
            "steps",
            self.steps,
            f"a positive multiple of chunk = {self.chunk}",
        )

    @property
    def schedule(self) -> Schedule:
        """The trainer's schedule (steps, log_every, chunk)."""
        return Schedule(self.steps, self.log_every, self.chunk)


@dataclass(frozen=True)
class RunOutput:
    """Where a training run goes and how it reports: the run directory, resuming, progress."""

    out: Path | None = None
    """run directory (default: runs/EXPERIMENT/YYYYmmdd-HHMMSS-HASH, HASH the first 8 hex digits
    of the sha256 of the config's JSON; printed when the run starts)."""
    resume: Path | None = None
    """continue the run stored in this directory from its last checkpoint."""
    quiet: bool = False
    """no progress bar."""
    store: bool = True
    """write the run store (off only for overhead measurements)."""
    overwrite: bool = False
    """start the run in OUT even if it holds something (a previous run is replaced); without it
    a non-empty OUT is refused before anything is computed."""
    reuse: bool = False
    """reuse a run of the same config already in OUT when it is complete, resume it when it was
    interrupted or killed (how a figure's sub-runs resume when the figure is run again)."""

    @property
    def path(self) -> Path:
        """The run directory (``out``, or ``resume`` when only that is given)."""
        path = self.out or self.resume
        if path is None:
            raise ValueError("RunOutput without out: resolve it with default_run_dir first")
        return path


def config_hash(cfg: object) -> str:
    """First 8 hex digits of the sha256 of ``cfg``'s JSON (a dataclass, keys sorted)."""
    from simulate.store import jsonable

    values = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg  # type: ignore[arg-type]
    text = json.dumps(jsonable(values), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def default_run_dir(name: str, cfg: object, root: Path = Path("runs")) -> Path:
    """A fresh run directory ``root/name/YYYYmmdd-HHMMSS-HASH`` (``config_hash``); a suffix
    ``-2``, ``-3``, ... where that path exists already."""
    base = root / name / f"{time.strftime('%Y%m%d-%H%M%S')}-{config_hash(cfg)}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _leaves(values: dict) -> dict[str, Any]:
    """A nested config dict flattened to its leaf names (nested configs are flat on the command
    line: ``--m``, not ``--train.m``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        out.update(_leaves(value) if isinstance(value, dict) else {key: value})
    return out


def changed_options(given: object, default: object, stored: dict) -> dict[str, tuple[Any, Any]]:
    """The options of ``given`` (a config dataclass) set away from ``default`` that differ from
    ``stored`` (the config dict of a stored run): ``{name: (stored value, given value)}``. An
    option left at its default is taken as not given, so it never counts as a change."""
    from simulate.store import jsonable

    mine = _leaves(jsonable(dataclasses.asdict(given)))  # type: ignore[arg-type]
    base = _leaves(jsonable(dataclasses.asdict(default)))  # type: ignore[arg-type]
    theirs = _leaves(stored)
    return {
        k: (theirs.get(k), v) for k, v in mine.items() if v != base.get(k) and v != theirs.get(k)
    }


def stored_status(path: Path, name: str, cfg: object) -> str | None:
    """The status of the run of experiment ``name`` under ``cfg`` stored in ``path``: its
    summary's status ('complete', 'interrupted', 'diverged', 'failed'), 'interrupted' for one
    killed before it wrote a summary, None when ``path`` holds no run of that config."""
    from simulate.store import jsonable, read_summary

    store = RunStore(path)
    try:
        stored = store.config()
    except (OSError, ValueError, ConfigError):
        return None
    if stored.get("experiment") != name or stored.get("config") != jsonable(
        dataclasses.asdict(cfg)  # type: ignore[arg-type]
    ):
        return None
    if not (path / "summary.json").exists():
        return "interrupted" if store.has_checkpoint() else None
    try:
        return read_summary(path).get("status")
    except (OSError, ValueError, ConfigError):
        return None


def run_experiment(
    name: str,
    cfg: RunOptions,
    output: RunOutput,
    problem: Problem,
    optimizer: optax.GradientTransformation,
    summarize: Callable[[xr.Dataset], dict],
    seeds: dict | None = None,
) -> Path | TrainResult:
    """Run ``problem`` under ``cfg`` into ``output.out`` (or resume ``output.resume``).

    Returns the run directory, or the in-memory ``TrainResult`` when ``output.store`` is off.
    ``summarize(dataset) -> dict`` adds the experiment's own entries to summary.json; ``seeds``
    adds entries (e.g. a teacher's seed) to the seed record of config.json."""
    if not output.store:
        return _run(name, cfg, output, None, problem, optimizer, summarize, seeds)
    if output.resume is None:
        if output.out is None:
            output = dataclasses.replace(output, out=default_run_dir(name, cfg))
        status = stored_status(output.path, name, cfg) if output.reuse else None
        if status == "complete":
            return output.path
        if status == "interrupted":
            output = dataclasses.replace(output, resume=output.path)
        else:
            check_output(output.path, output.overwrite)
    if output.resume is not None:
        RunStore(output.resume).check_resumable()
    with RunLock(output.resume or output.path):
        return _run(
            name,
            cfg,
            output,
            RunStore(output.resume or output.path),
            problem,
            optimizer,
            summarize,
            seeds,
        )


def _run(
    name: str,
    cfg: RunOptions,
    output: RunOutput,
    store: RunStore | None,
    problem: Problem,
    optimizer: optax.GradientTransformation,
    summarize: Callable[[xr.Dataset], dict],
    seeds: dict | None,
) -> Path | TrainResult:
    if store is not None and output.resume is not None:
        store.update_config(config=dataclasses.asdict(cfg))  # a larger --steps trains on
    if store is not None and output.resume is None:
        streams = seed_streams(cfg.seed_ids)
        store.create(
            name,
            dataclasses.asdict(cfg),
            output=dataclasses.asdict(output),
            seeds={
                "seed_ids": cfg.seed_ids,
                "streams": {k: np.asarray(v) for k, v in streams.items()},
                "rule": SEED_RULE,
                **(seeds or {}),
            },
        )
    status, error, result = "complete", None, None
    try:
        result = train(
            problem,
            optimizer,
            cfg.schedule,
            cfg.seed_ids,
            store,
            resume=output.resume is not None,
            progress=not output.quiet,
        )
    except (DivergenceError, Interrupted) as err:
        status = "diverged" if isinstance(err, DivergenceError) else "interrupted"
        error = err
    except Exception as err:
        if store is not None:
            store.write_summary({"status": "failed", "error": repr(err)})
        raise
    if store is None:
        if error is not None:
            raise error
        assert result is not None  # train returned: no error
        return result
    ds, _ = load(store.path)
    logged = int(ds["step"].values[-1]) if "step" in ds.sizes and ds.sizes["step"] else None
    summary = {"status": status, "steps_logged": logged}
    if isinstance(result, TrainResult):
        summary.update(compile_seconds=result.compile_seconds, run_seconds=result.run_seconds)
    if error is not None:
        summary["error"] = str(error)
    summary.update(summarize(ds))
    store.write_summary(summary)
    if error is not None:
        raise error
    return store.path
