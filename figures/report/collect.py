"""What the report shows of a reproduction directory (issue 16, item 2), read from the stored runs
only: each registered figure's status, its summary with the verdicts of its own rules, its times
and provenance. Nothing is recomputed; the renderers (``html``, ``markdown``) only lay this out.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from figures.core.figure import Figure
from simulate.store import RunFileError, read_json

REPRODUCE_JSON = "reproduce.json"
"""written by ``stagewise reproduce``: {quick, executor, started, finished, git_revision,
figures: {id: {status, wall_seconds, error, command}}}."""

STORED = ("complete", "reused")
"""statuses whose summary.json belongs to the reproduction."""


@dataclass(frozen=True)
class SubRun:
    path: str
    """relative to the figure's directory."""
    status: str
    compile_seconds: float | None
    run_seconds: float | None


@dataclass(frozen=True)
class FigureRecord:
    """One registered figure as the reproduction directory holds it."""

    figure: Figure
    status: str
    """complete, reused, failed, interrupted, not run (or unreadable: a damaged summary.json)."""
    error: str | None
    command: str | None
    """the command that runs (or resumes) it, shown when it is not complete."""
    summary: dict | None
    report_text: str | None
    """``figure.report(summary)``, or why it is unavailable."""
    predictions: tuple[dict, ...]
    """the rows of summary.json's ``predictions`` (verdicts by the figure's declared rules)."""
    predictions_error: str | None
    wall_seconds: float | None
    compile_seconds: float | None
    config: dict | None
    """config.json: config, seeds, versions, git revision, command line, created."""
    sub_runs: tuple[SubRun, ...]
    png: str | None
    """relative to the reproduction directory, as the page links it."""
    pdf: str | None
    others: tuple[str, ...]
    """further outputs of the figure (an animation, say), relative to the directory."""

    @property
    def id(self) -> str:
        return self.figure.id


@dataclass(frozen=True)
class Reproduction:
    out: Path
    run: dict | None
    """reproduce.json, when ``stagewise reproduce`` wrote one."""
    figures: tuple[FigureRecord, ...]
    run_error: str | None = None
    """why reproduce.json could not be read."""

    def papers(self) -> list[str]:
        """The papers in registry order."""
        return list(dict.fromkeys(r.figure.paper for r in self.figures))

    def of_paper(self, paper: str) -> list[FigureRecord]:
        return [r for r in self.figures if r.figure.paper == paper]

    def predictions(self) -> list[tuple[FigureRecord, dict]]:
        return [(r, row) for r in self.figures for row in r.predictions]


def collect(out: Path, registered: Sequence[Figure]) -> Reproduction:
    """Read ``out`` (``out/<id>/`` per figure, ``out/reproduce.json``) for every registered
    figure. A stored figure's prediction rows are recomputed from its summary by its rules and
    written back when they were missing (``Figure.store_verdicts``)."""
    run, run_error = None, None
    if (out / REPRODUCE_JSON).exists():
        try:
            run = read_json(out / REPRODUCE_JSON)
        except RunFileError as err:  # a damaged record must not hide the stored figures
            run_error = str(err)
    records = (run or {}).get("figures", {})
    quick = bool(run.get("quick")) if run else _stored_quick(out, registered)
    return Reproduction(
        out,
        run,
        tuple(_record(out, f, records.get(f.id), quick) for f in registered),
        run_error,
    )


def _record(out: Path, figure: Figure, record: dict | None, quick: bool) -> FigureRecord:
    fig_dir = out / figure.id
    config, summary, error = None, None, None
    if (fig_dir / "config.json").exists():
        try:
            config = read_json(fig_dir / "config.json")
        except RunFileError as err:
            error = str(err)
    if (fig_dir / "summary.json").exists():
        status = "complete"
        try:
            summary = read_json(fig_dir / "summary.json")
        except RunFileError as err:
            status, error = "unreadable", str(err)
    else:
        status = "interrupted" if (fig_dir / "config.json").exists() else "not run"
    if record is not None:
        # a record of a stored figure whose summary is now missing or damaged yields to the files
        claimed = record.get("status")
        status = status if not claimed or (claimed in STORED and summary is None) else claimed
        error = record.get("error") or error
    rows, predictions_error = (), None
    if summary is not None:
        try:
            summary = figure.store_verdicts(fig_dir, summary)
        except Exception as err:  # a summary older than the figure's rules
            predictions_error = f"{type(err).__name__}: {err}"
        rows = tuple(r for r in summary.get("predictions", []) if isinstance(r, dict))
    wall = (record or {}).get("wall_seconds")
    if wall is None and summary is not None:
        wall = summary.get("wall_seconds")
    sub_runs = tuple(_sub_runs(fig_dir))
    return FigureRecord(
        figure=figure,
        status=status,
        error=error,
        command=(record or {}).get("command") or _command(out, figure, quick),
        summary=summary,
        report_text=_report_text(figure, summary),
        predictions=rows,
        predictions_error=predictions_error,
        wall_seconds=_seconds(wall),
        compile_seconds=_compile_seconds(summary, sub_runs),
        config=config,
        sub_runs=sub_runs,
        png=_relative(out, fig_dir / f"{figure.id}.png"),
        pdf=_relative(out, fig_dir / f"{figure.id}.pdf"),
        others=tuple(_others(out, fig_dir, figure.id)),
    )


def _report_text(figure: Figure, summary: dict | None) -> str | None:
    if summary is None:
        return None
    try:
        return figure.report(summary)
    except Exception as err:  # an old or partial summary lacks what the report reads
        return f"report text unavailable: {type(err).__name__}: {err}"


def _command(out: Path, figure: Figure, quick: bool) -> str:
    words = ["stagewise", "compare" if figure.kind == "comparison" else "figure"]
    words += [figure.command_name, *(["--quick"] if quick else []), "--out", str(out)]
    return shlex.join(words)


def _stored_quick(out: Path, registered: Iterable[Figure]) -> bool:
    """Without reproduce.json: quick when every stored figure was run with --quick."""
    flags = []
    for figure in registered:
        try:
            flags.append(bool(read_json(out / figure.id / "config.json")["config"]["quick"]))
        except (RunFileError, KeyError, TypeError):
            continue
    return bool(flags) and all(flags)


SKIPPED = (".zarr", "checkpoint", ".old", ".tmp")
"""directories below a figure that hold no sub-run (stored arrays, checkpoints, swaps)."""


def _sub_runs(fig_dir: Path) -> Iterable[SubRun]:
    """Every run directory below the figure's own (a summary.json of its own)."""
    if not fig_dir.is_dir():
        return
    for root, dirs, files in os.walk(fig_dir):
        dirs[:] = sorted(d for d in dirs if not any(s in d for s in SKIPPED))
        if Path(root) == fig_dir or "summary.json" not in files:
            continue
        try:
            summary = read_json(Path(root) / "summary.json")
        except RunFileError:
            summary = {"status": "unreadable"}
        yield SubRun(
            path=Path(root).relative_to(fig_dir).as_posix(),
            status=str(summary.get("status", "")),
            compile_seconds=_compile_seconds(summary, ()),
            run_seconds=_seconds(summary.get("run_seconds")),
        )


def _compile_seconds(summary: dict | None, sub_runs: Iterable[SubRun]) -> float | None:
    """Every ``compile_seconds`` and ``*_compile_seconds`` number of the summary (at any depth)
    and of its sub-runs, summed; None when none is recorded."""
    found = [s.compile_seconds for s in sub_runs if s.compile_seconds is not None]
    found += list(_compile_numbers(summary)) if summary is not None else []
    return math.fsum(found) if found else None


def _compile_numbers(node) -> Iterable[float]:
    if isinstance(node, dict):
        for key, value in node.items():
            compile_key = key == "compile_seconds" or str(key).endswith("_compile_seconds")
            if compile_key and _seconds(value) is not None:
                yield float(value)
            else:
                yield from _compile_numbers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _compile_numbers(value)


def _seconds(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _relative(out: Path, path: Path) -> str | None:
    return path.relative_to(out).as_posix() if path.is_file() else None


OUTPUTS = (".png", ".pdf", ".gif", ".mp4", ".webm", ".svg")


def _others(out: Path, fig_dir: Path, figure_id: str) -> Iterable[str]:
    if not fig_dir.is_dir():
        return
    main = {f"{figure_id}.png", f"{figure_id}.pdf"}
    for path in sorted(fig_dir.iterdir()):
        if path.is_file() and path.suffix in OUTPUTS and path.name not in main:
            yield path.relative_to(out).as_posix()
