"""The report's Markdown twin, ``REPORT.md`` (issue 16, item 2): the same blocks as the page,
images and files as relative links, text escaped so that no symbol of a rule or a quantity
(``A*_1``, ``<=``, ``|``) turns into Markdown or HTML."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote

from figures.report.document import Block, Details, Heading, Image, Items, Paragraph, Pre
from figures.report.tables import Cell, Table

SPECIAL = re.compile(r"([\\`*\[\]<>|#~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
"""characters that can start markup inside a line (CommonMark escapes them with a backslash);
an underscore inside a word (``t_1``) cannot."""


def render(blocks: Sequence[Block]) -> str:
    return "\n\n".join(_block(b) for b in blocks) + "\n"


def escape(text: str) -> str:
    return SPECIAL.sub(r"\\\1", re.sub(r"\s+", " ", text))


def _href(href: str) -> str:
    return quote(href, safe="/#")


def _cell(cell: Cell) -> str:
    text = escape(cell.text)
    if cell.href is not None:
        return f"[{text}]({_href(cell.href)})"
    return text


def _table(table: Table) -> str:
    lines = ["| " + " | ".join(escape(h) for h in table.header) + " |"]
    lines.append("|" + "---|" * len(table.header))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        anchor = f'<a id="{block.anchor}"></a>\n' if block.anchor else ""
        return f"{anchor}{'#' * block.level} {escape(block.text)}"
    if isinstance(block, Paragraph):
        return "".join(_cell(c) for c in block.parts)
    if isinstance(block, Items):
        return "\n".join("- " + "".join(_cell(c) for c in item) for item in block.items)
    if isinstance(block, Pre):
        return _fence(block.text)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return f"![{escape(block.alt)}]({_href(block.src)})"
    if isinstance(block, Details):
        return "\n\n".join([escape(block.summary) + ":", *(_block(b) for b in block.blocks)])
    raise TypeError(f"not a report block: {block!r}")
