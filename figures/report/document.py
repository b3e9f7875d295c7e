"""The report as a sequence of blocks (headings, paragraphs, tables, preformatted text, images),
built once from the collected reproduction and written by ``html`` and ``markdown``, so the page
and its Markdown twin hold the same content (issue 16, item 2)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from figures.report import tables
from figures.report.collect import STORED, FigureRecord, Reproduction
from figures.report.derived import DerivedStatement
from figures.report.tables import Cell, Table


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass(frozen=True)
class Paragraph:
    parts: tuple[Cell, ...]


@dataclass(frozen=True)
class Items:
    """A bulleted list, one paragraph per item."""

    items: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Pre:
    text: str


@dataclass(frozen=True)
class Image:
    src: str
    alt: str


@dataclass(frozen=True)
class Details:
    """Content the page folds away (a figure's full config)."""

    summary: str
    blocks: tuple[Block, ...]


Block = Heading | Paragraph | Items | Pre | Table | Image | Details

TITLE = "stagewise reproduction report"


def build(reproduction: Reproduction, derived: Sequence[DerivedStatement]) -> list[Block]:
    papers = reproduction.papers()
    blocks: list[Block] = [Heading(1, TITLE), *_overview(reproduction)]
    blocks += _predictions(reproduction)
    blocks += _derived(derived, papers)
    for paper in papers:
        blocks.append(Heading(2, f"Paper: {paper}", tables.paper_anchor(paper)))
        for record in reproduction.of_paper(paper):
            blocks += _figure(record)
    return blocks


def _text(*parts: str | Cell) -> Paragraph:
    return Paragraph(tuple(p if isinstance(p, Cell) else Cell(p) for p in parts))


def _counts(counts: dict[str, int]) -> list[Cell]:
    cells: list[Cell] = []
    for i, (name, n) in enumerate(counts.items()):
        cells += [Cell(", " if i else ""), Cell(f"{n} {name}", mark=name)]
    return cells


def _overview(reproduction: Reproduction) -> Iterable[Block]:
    figures, name = reproduction.figures, reproduction.out.resolve().name
    yield _text(
        f"{len(figures)} registered figures and comparisons in {name}/: ",
        *_counts(tables.status_counts(reproduction)),
        ".",
    )
    run = reproduction.run
    if run is not None:
        mode = "quick" if run.get("quick") else "paper setting"
        yield _text(
            f"stagewise reproduce ({mode}, executor {run.get('executor')}): started "
            f"{run.get('started')}, finished {run.get('finished')}, git revision "
            f"{run.get('git_revision')}."
        )
    else:
        yield _text("No reproduce.json: the statuses are read from the stored runs.")
    if reproduction.run_error:
        yield _text(f"reproduce.json could not be read: {reproduction.run_error}")
    yield Items(
        tuple(
            (
                Cell(paper, href="#" + tables.paper_anchor(paper)),
                Cell(": "),
                *(
                    part
                    for i, r in enumerate(reproduction.of_paper(paper))
                    for part in (
                        Cell(", " if i else ""),
                        Cell(r.id, href="#" + tables.figure_anchor(r.id)),
                        Cell(f" ({r.status})", mark=r.status),
                    )
                ),
            )
            for paper in reproduction.papers()
        )
    )


def _predictions(reproduction: Reproduction) -> Iterable[Block]:
    rows = [row for _, row in reproduction.predictions()]
    yield Heading(2, "Predictions beside measurements", "predictions")
    yield _text(f"{len(rows)} predictions: ", *_counts(tables.verdict_counts(rows)), ".")
    yield _text(
        "p: predicted, m: measured. Each figure declares which numbers of its summary.json are a "
        "prediction and a measurement, the rule of the measurement and the tolerance of the "
        "verdict; the verdicts here are those stored in each figure's summary.json."
    )
    if rows:
        yield tables.all_predictions(reproduction)


def _derived(statements: Sequence[DerivedStatement], papers: Sequence[str]) -> Iterable[Block]:
    yield Heading(2, "[derived] statements of the specs", "derived")
    yield _text(f"{len(statements)} statements: ", *_counts(tables.derived_counts(statements)), ".")
    if statements:
        yield tables.derived(statements, papers)


def _figure(record: FigureRecord) -> Iterable[Block]:
    figure = record.figure
    yield Heading(3, record.id, tables.figure_anchor(record.id))
    times = (
        f"; wall time {tables.seconds(record.wall_seconds)}, compile time "
        f"{tables.seconds(record.compile_seconds)}"
        if (record.wall_seconds, record.compile_seconds) != (None, None)
        else ""
    )
    yield _text("status: ", Cell(record.status, mark=record.status), times + ".")
    if record.error:
        yield _text("error:")
        yield Pre(record.error)
    if record.status not in STORED:
        verb = "resume" if record.status == "interrupted" else "run"
        yield _text(f"{verb} it with:")
        yield Pre(record.command or "")
    yield _text(figure.description)
    if record.png:
        yield Image(record.png, f"{record.id} (PNG)")
    links = [(name, href) for name, href in (("PDF", record.pdf), ("PNG", record.png)) if href]
    links += [(path.rsplit("/", 1)[-1], path) for path in record.others]
    if links:
        parts = [Cell("files: ")]
        for i, (name, href) in enumerate(links):
            parts += [Cell(", " if i else ""), Cell(name, href=href)]
        yield Paragraph(tuple(parts))
    if figure.how_to_read:
        yield _text("How to read it: " + figure.how_to_read)
    if record.report_text is not None:
        yield Pre(record.report_text)
    yield from _figure_predictions(record)
    if record.sub_runs:
        yield tables.sub_runs(record)
    yield from _provenance(record.config)


def _figure_predictions(record: FigureRecord) -> Iterable[Block]:
    if record.predictions_error:
        yield _text(f"prediction rules unavailable: {record.predictions_error}")
    if record.predictions:
        yield _text("predictions: ", *_counts(tables.verdict_counts(record.predictions)), ".")
        yield tables.figure_predictions(record)
    elif record.summary is not None:
        yield _text("predictions: none declared (this figure illustrates, it predicts no number).")


def _provenance(config: dict | None) -> Iterable[Block]:
    if config is None:
        return
    command = config.get("command")
    yield _text(
        f"provenance: git revision {config.get('git_revision')}, created "
        f"{config.get('created')}, command line: "
        + (shlex.join(map(str, command)) if isinstance(command, list) else str(command))
    )
    yield _text("seeds: " + json.dumps(config.get("seeds"), sort_keys=True))
    yield tables.versions(config)
    yield Details("config", (Pre(json.dumps(config.get("config"), indent=2)),))
