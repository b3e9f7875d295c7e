"""The report as one static HTML page (issue 16, item 2): opens from disk, with no server,
script, network request or external stylesheet; every link is relative and every text escaped."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from urllib.parse import quote

from figures.report.document import (
    TITLE,
    Block,
    Details,
    Heading,
    Image,
    Items,
    Paragraph,
    Pre,
)
from figures.report.tables import Cell, Table

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1300px;
       padding: 0 1em; color: #1f2328; }
h1, h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
h3 { margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 6px; text-align: left; vertical-align: top; }
td.long { overflow-wrap: anywhere; min-width: 12em; }
th { background: #f6f8fa; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; border: 1px solid #d0d7de; }
.mark { padding: 0 .3em; border-radius: 3px; }
.mark-agrees, .mark-confirmed, .mark-complete, .mark-reused { background: #dafbe1; color: #116329; }
.mark-disagrees, .mark-failed, .mark-unreadable { background: #ffebe9; color: #a40e26; }
.mark-corrected, .mark-interrupted { background: #fff8c5; color: #7d4e00; }
.mark-not-measured, .mark-open, .mark-not-run { background: #eaeef2; color: #57606a; }
"""


LONG_WORD = 40
"""characters of a word beyond which a table cell may break it anywhere."""


def render(blocks: Sequence[Block]) -> str:
    body = "\n".join(_block(b) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(TITLE)}</title>\n<style>{STYLE}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def mark_class(mark: str) -> str:
    """The CSS class of a verdict or status (``not measured`` -> ``mark-not-measured``)."""
    return "mark mark-" + re.sub(r"[^a-z0-9]+", "-", mark.lower()).strip("-")


def _href(href: str) -> str:
    return _e(quote(href, safe="/#"))


def _cell(cell: Cell) -> str:
    text = _e(cell.text)
    if cell.mark is not None:
        text = f'<span class="{mark_class(cell.mark)}">{text}</span>'
    if cell.href is not None:
        text = f'<a href="{_href(cell.href)}">{text}</a>'
    return text


def _td(cell: Cell) -> str:
    # a test node id or path is one long word: let it break anywhere rather than widen the table
    long = any(len(word) > LONG_WORD for word in cell.text.split())
    return f'<td class="long">{_cell(cell)}</td>' if long else f"<td>{_cell(cell)}</td>"


def _table(table: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in table.header)
    rows = "\n".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in table.rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>"


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        anchor = f' id="{_e(block.anchor)}"' if block.anchor else ""
        return f"<h{block.level}{anchor}>{_e(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return "<p>" + "".join(_cell(c) for c in block.parts) + "</p>"
    if isinstance(block, Items):
        items = "".join("<li>" + "".join(_cell(c) for c in i) + "</li>" for i in block.items)
        return f"<ul>{items}</ul>"
    if isinstance(block, Pre):
        return f"<pre>{_e(block.text)}</pre>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return f'<p><img src="{_href(block.src)}" alt="{_e(block.alt)}"></p>'
    if isinstance(block, Details):
        inner = "\n".join(_block(b) for b in block.blocks)
        return f"<details><summary>{_e(block.summary)}</summary>\n{inner}\n</details>"
    raise TypeError(f"not a report block: {block!r}")
