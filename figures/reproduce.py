"""``stagewise reproduce`` and ``stagewise report DIR`` (issue 16, items 1 and 3).

Every registered figure and comparison (or those of ``--paper`` / ``--only``) runs into
``DIR/<id>/`` as an independent job (``figures.reproduce_executors``), through the run store: a
figure whose directory holds a complete run of the same options is reused (``--force`` recomputes
it), an interrupted one resumes. ``DIR/reproduce.json`` records each figure's status, wall time,
error and command, merged with the records of earlier reproductions into ``DIR``; the report
(``figures.report.build.write_report``) is written from the stored runs at the end.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from figures.core.figure import Figure
from figures.reproduce_executors import Executor, Job, error_text, executor, outcome
from figures.reproduce_progress import Progress
from simulate.store import RunLock, check_output, git_revision, read_json, read_summary, write_json
from theory.validation import require

RECORD = "reproduce.json"
SUCCESS = ("complete", "reused")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What this reproduction does with each chosen figure."""

    records: dict[str, dict]
    """id -> its record (status "reused", "failed" when it cannot start, else "not run")."""
    jobs: list[Job]
    expected: dict[str, float | None]
    """id of each job -> its recorded wall time (for the ETA), None when never timed."""


def default_out(quick: bool) -> Path:
    """A fixed directory per setting, so that running the same command again resumes it."""
    return Path("runs/reproduce-quick" if quick else "runs/reproduce")


def select(papers: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> list[Figure]:
    """The registered figures and comparisons of ``papers`` (wing names, as ``stagewise list``
    shows them) and ``only`` (figure ids), in registry order; all of them when both are empty."""
    from figures.registry import declared

    figures = declared()
    wings = list(dict.fromkeys(f.paper for f in figures))
    ids = [f.id for f in figures]
    for paper in papers:
        require(paper in wings, "paper", paper, "one of " + ", ".join(wings))
    for figure_id in only:
        require(figure_id in ids, "only", figure_id, "a figure id: one of " + ", ".join(ids))
    chosen = [
        f for f in figures if (not papers or f.paper in papers) and (not only or f.id in only)
    ]
    require(bool(chosen), "only", " ".join(only), f"ids of the papers chosen ({', '.join(papers)})")
    return chosen


def command(figure: Figure, quick: bool, out: Path) -> str:
    """The command that makes the same figure on its own."""
    verb = "compare" if figure.kind == "comparison" else "figure"
    return f"stagewise {verb} {figure.command_name}{' --quick' if quick else ''} --out {out}"


def plan(
    figures: list[Figure],
    out: Path,
    shown: Path,
    quick: bool,
    force: bool,
    previous: dict,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Plan:
    """Each figure's options and what to do with it. ``out`` absolute (workers and Ray tasks
    may run elsewhere), ``shown`` as the user gave it (in the commands recorded); ``previous``:
    an earlier reproduce.json of ``out`` ({} if none); ``overrides``: figure id -> option
    values replacing its defaults (a Python-only hook)."""
    records, jobs, expected = {}, [], {}
    timed = previous.get("figures", {}) if previous.get("quick") == quick else {}
    for figure in figures:
        record = {
            **outcome("not run"),
            "command": command(figure, quick, shown),
            "log": f"logs/{figure.id}.log",
        }
        records[figure.id] = record
        log = out / "logs" / f"{figure.id}.log"
        try:
            given = dict((overrides or {}).get(figure.id, {}))
            cfg = figure.config(**{"out": out, "quick": quick, "quiet": True, **given})
            cfg = dataclasses.replace(cfg, overwrite=force)
            stored = figure.stored(cfg)
            run_dir = figure.run_dir(cfg)
            if stored == "complete" and not force:
                summary = read_summary(run_dir)
                wall = timed.get(figure.id, {}).get("wall_seconds")
                wall = summary.get("wall_seconds") if wall is None else wall
                drawn = all((run_dir / f"{figure.id}.{ext}").exists() for ext in ("png", "pdf"))
                if drawn:
                    figure.store_verdicts(run_dir, summary)  # rules declared since it ran
                    records[figure.id] = {**record, "status": "reused", "wall_seconds": wall}
                    continue
                # killed between its summary and its drawing: redrawn, nothing recomputed
                replot = dataclasses.replace(cfg, replot=True)
                jobs.append(Job(figure.id, declaring_module(figure), replot, log, "reused"))
                expected[figure.id] = None
                continue
            if stored is None:
                check_output(run_dir, force)  # another figure's run or other options
        except Exception as err:  # this figure's options or stored run: the others go on
            hint = "" if force else " (stagewise reproduce --force recomputes it)"
            records[figure.id] = {**record, "status": "failed", "error": error_text(err, hint)}
            continue
        jobs.append(Job(figure.id, declaring_module(figure), cfg, log))
        wall = timed.get(figure.id, {}).get("wall_seconds")
        if wall is None and stored == "complete":
            wall = read_summary(run_dir).get("wall_seconds")
        expected[figure.id] = wall
    return Plan(records, jobs, expected)


def declaring_module(figure: Figure) -> str:
    """The module of ``figures`` whose ``FIGURE`` is ``figure`` (imported by the registry)."""
    return next(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("figures.") and getattr(module, "FIGURE", None) is figure
    )


def reproduce(
    quick: bool = False,
    papers: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    out: Path | None = None,
    executor_name: str = "local",
    address: str | None = None,
    workers: int | None = None,
    force: bool = False,
    quiet: bool = False,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> int:
    """Run the chosen figures into ``out`` and write the report; the exit code: 0 when every
    figure is complete or reused and the report is written, 1 otherwise, 128 + the signal
    number after SIGINT / SIGTERM (the figures not finished are recorded as not run)."""
    require(executor_name in ("local", "ray"), "executor", executor_name, "one of local, ray")
    require(
        address is None or executor_name == "ray", "address", address, "only with --executor ray"
    )
    workers = (os.cpu_count() or 1) if workers is None else workers
    require(workers >= 1, "workers", workers, "an integer >= 1")
    figures = select(papers, only)
    given = default_out(quick) if out is None else out
    out = given.resolve()
    require(not out.is_file(), "out", str(given), "a directory (it is a file)")
    previous = read_json(out / RECORD) if (out / RECORD).exists() else {}
    chosen = plan(figures, out, given, quick, force, previous, overrides)
    record = {
        "quick": quick,
        "executor": executor_name,
        "started": _now(),
        "finished": None,
        "git_revision": git_revision(),
        "figures": {**previous.get("figures", {}), **chosen.records},
    }
    print(f"reproduce directory: {given}", flush=True)
    with RunLock(out), executor(executor_name, address, workers) as pool:
        write_json(out / RECORD, record)
        signum = _run(chosen, pool, workers, quiet, out, record)
        record["finished"] = _now()
        write_json(out / RECORD, record)
    ok = _summarise(record["figures"], chosen.records, given)
    ok = _report(out) and ok
    return 128 + signum if signum else (0 if ok else 1)


def _run(
    chosen: Plan, pool: Executor, workers: int, quiet: bool, out: Path, record: dict
) -> int | None:
    """Run the jobs, at most ``workers`` at once, recording each outcome as it comes; the
    signal that stopped the reproduction, or None."""
    figures = record["figures"]
    done = sum(figures[i]["status"] in SUCCESS for i in chosen.records)
    # longest first (when known) keeps the workers busy to the end
    pending = sorted(chosen.jobs, key=lambda j: -(chosen.expected[j.figure_id] or 0.0))
    progress = Progress(len(chosen.records), done, workers, chosen.expected, quiet)
    for figure_id, entry in chosen.records.items():
        if entry["status"] == "failed":
            progress.end(figure_id, "failed", None)
    stop = _Stop()

    def finish(job: Job, result: dict) -> None:
        figures[job.figure_id] = {**figures[job.figure_id], **result}
        write_json(out / RECORD, record)
        progress.end(job.figure_id, result["status"], result["wall_seconds"])
        if result["status"] == "failed":
            progress.note(f"  {result['error'].splitlines()[0]} (log: {job.log})")

    try:
        with stop:  # after Ray's own handlers (ray.init), restored before Ray shuts down
            running = 0
            try:
                while pending or running:
                    while pending and running < workers and stop.signum is None:
                        job = pending.pop(0)
                        pool.submit(job)
                        running += 1
                        progress.start(job.figure_id)
                    if stop.signum is not None and not stop.forwarded:
                        pool.interrupt()  # each figure stops where it can resume
                        stop.forwarded = True
                    if not running:
                        break
                    for job, result in pool.wait(1.0):
                        running -= 1
                        finish(job, result)
                    progress.refresh()
            except KeyboardInterrupt:  # the second signal: no more waiting
                stop.signum = stop.signum or signal.SIGINT
                for job in pool.kill():
                    finish(job, outcome("not run", None, "Interrupted: killed by a second signal"))
    finally:
        progress.close()
    return stop.signum


class _Stop:
    """The first SIGINT or SIGTERM stops launching figures (the loop forwards it to the running
    ones, which stop where they can resume); a second one raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.forwarded = False

    def __enter__(self) -> _Stop:
        self.old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: object) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


def _summarise(figures: dict[str, dict], chosen: dict[str, dict], out: Path) -> bool:
    """Print the count of each status of the chosen figures and every failure; whether all
    are complete or reused."""
    statuses = [figures[i]["status"] for i in chosen]
    counts = ", ".join(
        f"{statuses.count(s)} {s}" for s in ("complete", "reused", "failed", "not run")
    )
    print(f"reproduce: {counts} -> {out / RECORD}")
    for figure_id in chosen:
        entry = figures[figure_id]
        if entry["status"] not in SUCCESS and entry["error"]:
            first = entry["error"].splitlines()[0]
            print(f"{entry['status']} {figure_id}: {first} (log: {out / entry['log']})")
    return all(s in SUCCESS for s in statuses)


def _report(out: Path) -> bool:
    """Write the report of ``out``; whether it was written."""
    try:
        index, markdown = write_report(out)
    except Exception as err:  # the runs are stored: `stagewise report DIR` can try again
        print(f"stagewise: report not written: {type(err).__name__}: {err}", file=sys.stderr)
        return False
    print(f"report: {index}, {markdown}")
    return True


def write_report(out: Path) -> tuple[Path, Path]:
    """``figures.report.build.write_report``: (index.html, REPORT.md) of ``out``."""
    from figures.report.build import write_report as build

    return build(out)


def rebuild_report(directory: Path) -> tuple[Path, Path]:
    """``stagewise report DIR``: the report rebuilt from the runs stored in ``directory`` (a
    reproduction's, or any ``--out`` of ``stagewise figure``), recomputing nothing."""
    from figures.registry import declared

    require(directory.is_dir(), "dir", str(directory), "an existing directory")
    held = (directory / RECORD).exists() or any((directory / f.id).is_dir() for f in declared())
    require(
        held,
        "dir",
        str(directory),
        f"a directory holding {RECORD} or a figure's run directory (stagewise reproduce --out)",
    )
    return write_report(directory)


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
