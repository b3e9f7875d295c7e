"""The report's tables as text cells, shared by the HTML page and its Markdown twin so that both
show the same numbers: the predictions beside measurements (all papers, and per figure), the
[derived] statements, the counts per verdict and status, the sub-runs and package versions."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from figures.core.verdicts import VERDICTS
from figures.report.collect import FigureRecord, Reproduction
from figures.report.derived import DerivedStatement

DERIVED_STATUSES = ("confirmed", "corrected", "open")


@dataclass(frozen=True)
class Cell:
    text: str
    href: str | None = None
    """a link (relative: a file of the reproduction or an anchor of the page)."""
    mark: str | None = None
    """a verdict or status, which the page colours."""


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


def figure_anchor(figure_id: str) -> str:
    return f"fig-{figure_id}"


def paper_anchor(paper: str) -> str:
    return f"paper-{paper}"


def number(x) -> str:
    """A summary number as shown (stored non-finite values are the strings "nan", "inf")."""
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        x = float(x)
    if isinstance(x, bool) or x is None:
        return "-" if x is None else str(x)
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.4g}"
    return str(x)


def tolerance(row: dict) -> str:
    """The tolerance with its scale: ``|m/p - 1| <= 0.25`` or ``|m - p| <= 0.1``."""
    tol = number(row.get("tolerance"))
    return f"|m/p - 1| <= {tol}" if row.get("scale") == "ratio" else f"|m - p| <= {tol}"


def seconds(x: float | None) -> str:
    if x is None:
        return "not recorded"
    return f"{x:.1f} s" if x < 120 else f"{x / 60:.1f} min ({x:.0f} s)"


def _prediction_cells(row: dict) -> tuple[Cell, ...]:
    verdict = str(row.get("verdict", "not measured"))
    return (
        Cell(str(row.get("quantity", ""))),
        Cell(number(row.get("predicted"))),
        Cell(number(row.get("measured"))),
        Cell(number(row.get("ratio"))),
        Cell(tolerance(row)),
        Cell(verdict, mark=verdict),
        Cell(str(row.get("rule", ""))),
    )


PREDICTION_HEADER = ("quantity", "predicted", "measured", "ratio", "tolerance", "verdict", "rule")


def all_predictions(reproduction: Reproduction) -> Table:
    """Every prediction row of every stored figure, papers and figures in registry order."""
    return Table(
        ("paper", "figure", *PREDICTION_HEADER),
        tuple(
            (
                Cell(record.figure.paper),
                Cell(record.id, href="#" + figure_anchor(record.id)),
                *_prediction_cells(row),
            )
            for record, row in reproduction.predictions()
        ),
    )


def figure_predictions(record: FigureRecord) -> Table:
    return Table(PREDICTION_HEADER, tuple(_prediction_cells(r) for r in record.predictions))


def verdict_counts(rows: Iterable[dict]) -> dict[str, int]:
    counts = Counter(str(r.get("verdict")) for r in rows)
    return {v: counts.get(v, 0) for v in VERDICTS} | {
        v: n for v, n in counts.items() if v not in VERDICTS
    }


def derived(statements: Sequence[DerivedStatement], papers: Sequence[str]) -> Table:
    """The [derived] statements grouped by paper (registry order, then any other)."""
    order = {p: i for i, p in enumerate(papers)}
    ranked = sorted(statements, key=lambda s: order.get(s.paper, len(order)))
    return Table(
        ("paper", "section", "statement", "status", "check", "note"),
        tuple(
            (
                Cell(s.paper),
                Cell(s.section),
                Cell(s.statement),
                Cell(s.status, mark=s.status),
                Cell(s.check),
                Cell(s.note),
            )
            for s in ranked
        ),
    )


def derived_counts(statements: Sequence[DerivedStatement]) -> dict[str, int]:
    counts = Counter(s.status for s in statements)
    return {s: counts.get(s, 0) for s in DERIVED_STATUSES} | {
        s: n for s, n in counts.items() if s not in DERIVED_STATUSES
    }


def status_counts(reproduction: Reproduction) -> dict[str, int]:
    return dict(Counter(r.status for r in reproduction.figures))


def sub_runs(record: FigureRecord) -> Table:
    return Table(
        ("sub-run", "status", "compile", "run"),
        tuple(
            (
                Cell(s.path),
                Cell(s.status),
                Cell(seconds(s.compile_seconds)),
                Cell(seconds(s.run_seconds)),
            )
            for s in record.sub_runs
        ),
    )


def versions(config: dict) -> Table:
    stored = config.get("versions") or {}
    return Table(
        ("package", "version"),
        tuple((Cell(str(k)), Cell(number(v))) for k, v in stored.items()),
    )


def counts_line(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items())
