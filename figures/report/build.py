"""``stagewise report DIR`` and the end of ``stagewise reproduce`` (issue 16, item 2): write
``DIR/index.html`` and its Markdown twin ``DIR/REPORT.md`` from the stored runs, recomputing
nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from figures.core.figure import Figure
from figures.registry import declared
from figures.report import derived, document, html, markdown
from figures.report.collect import collect


def write_report(out: Path, registered: Sequence[Figure] | None = None) -> tuple[Path, Path]:
    """Write the report of the reproduction in ``out`` over ``registered`` (default: every
    registered figure and comparison); returns the paths of index.html and REPORT.md."""
    figures = declared() if registered is None else registered
    blocks = document.build(collect(out, figures), derived.DERIVED)
    paths = out / "index.html", out / "REPORT.md"
    paths[0].write_text(html.render(blocks), encoding="utf-8")
    paths[1].write_text(markdown.render(blocks), encoding="utf-8")
    return paths
