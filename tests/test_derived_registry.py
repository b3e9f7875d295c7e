"""The report's table of [derived] statements (figures/report/derived.py; issue 16 item 2): every
check names a test that exists, the statuses are the three allowed ones with a reason where
needed, and every [derived] tag of the specs is claimed by an entry or said to state nothing."""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from figures.derive import SYSTEMS
from figures.report.derived import DERIVED, NOT_STATEMENTS

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT.parent / "shared" / "papers"
PAPERS = ("incremental", "focus-dilution", "clustering-head", "emergence", "mean-field")
TAG = re.compile(r"\[[^\[\]]*\bderived\b[^\[\]]*\]")
"""a bracketed provenance tag naming "derived": [derived], [derived; ...], [review + derived]."""
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
DERIVATION = re.compile(r"stagewise derive ([\w-]+)")


@cache
def _test_functions(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    )


def _spec_file(paper: str) -> str:
    return paper.replace("-", "_") + ".md"


def _flat(text: str) -> str:
    """Whitespace-insensitive matching: the specs wrap their lines anywhere."""
    return re.sub(r"\s+", " ", text)


def test_every_test_named_in_a_check_is_a_test_function_of_its_file():
    missing = [
        (e.statement, f"{path}::{name}")
        for e in DERIVED
        for path, name in NODE.findall(e.check)
        if not (ROOT / path).is_file() or name not in _test_functions(path)
    ]
    assert not missing


def test_every_derivation_named_in_a_check_is_a_stagewise_derive_paper():
    named = {paper for e in DERIVED for paper in DERIVATION.findall(e.check)}
    assert named <= set(SYSTEMS)


def test_statuses_are_the_allowed_ones_and_confirmed_ones_name_their_check():
    assert {e.status for e in DERIVED} == {"confirmed", "corrected", "open"}
    unchecked = [
        e.statement
        for e in DERIVED
        if e.status == "confirmed" and not (NODE.search(e.check) or DERIVATION.search(e.check))
    ]
    assert not unchecked


def test_corrected_and_open_statements_say_why():
    silent = [e.statement for e in DERIVED if e.status != "confirmed" and not e.note.strip()]
    assert not silent


def test_every_paper_has_statements_each_with_its_section_and_tag():
    assert {e.paper for e in DERIVED} == set(PAPERS)
    assert all(e.section.startswith("§") and e.statement and e.tag for e in DERIVED)
    keys = [(e.paper, e.statement) for e in DERIVED]
    assert len(keys) == len(set(keys))


@pytest.mark.skipif(
    not SPECS.is_dir(), reason="the paper specs (../shared/papers) are not beside this clone"
)
def test_every_derived_tag_of_the_specs_is_claimed_by_entries_or_states_nothing():
    """Each entry's tag quote (and each quote of NOT_STATEMENTS) occurs once in its spec and
    contains exactly one [derived] tag; per spec, the tags so claimed are all of its tags."""
    quotes: dict[str, dict[str, str]] = {}
    for e in DERIVED:
        quotes.setdefault(_spec_file(e.paper), {})[e.tag] = "entry"
    for spec, quote, _why in NOT_STATEMENTS:
        assert quotes.setdefault(spec, {}).setdefault(quote, "none") == "none", quote
    assert set(quotes) == {p.name for p in SPECS.glob("*.md")}
    for spec, claims in quotes.items():
        text = _flat((SPECS / spec).read_text())
        tags = [m.span() for m in TAG.finditer(text)]
        claimed: dict[tuple[int, int], str] = {}
        for quote in claims:
            flat = _flat(quote)
            hits = [m.start() for m in re.finditer(re.escape(flat), text)]
            assert len(hits) == 1, (spec, quote, len(hits))
            inside = [t for t in tags if hits[0] <= t[0] and t[1] <= hits[0] + len(flat)]
            assert len(inside) == 1, (spec, quote, inside)
            assert inside[0] not in claimed, (spec, quote, claimed.get(inside[0]))
            claimed[inside[0]] = quote
        unclaimed = [text[max(0, a - 60) : b] for a, b in tags if (a, b) not in claimed]
        assert not unclaimed, (spec, unclaimed)
        assert len(claimed) == len(tags)
