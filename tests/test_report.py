"""The reproduction report (issue 16, items 2 and 4): ``figures.report.build.write_report`` over a
directory of stored figures. The figures here are small stand-ins run through the real
``Figure.run`` (run store, summary.json with the verdicts of their declared rules, PNG, PDF): the
fastest real figure takes about a minute in --quick, too long for the default suite. The page is
read back by parsing it, never from the report's own data structures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from PIL import Image

import figures.report.derived as derived_module
from figures.core.figure import Figure
from figures.core.options import FigureOptions
from figures.core.verdicts import Prediction
from figures.report.build import write_report
from figures.report.derived import DerivedStatement
from simulate.store import RunStore, read_summary

PAPER = "demo-paper"


def _compute(cfg, run_dir: Path):
    # a sub-run of its own, as the real figures' training runs are
    (run_dir / "ode").mkdir(parents=True, exist_ok=True)
    RunStore(run_dir / "ode").write_summary(
        {"status": "complete", "compile_seconds": 1.25, "run_seconds": 3.0}
    )
    t = np.linspace(0.0, 1.0, 16)
    data = xr.Dataset({"loss": (("t",), np.exp(-3 * t))}, coords={"t": t})
    summary = {
        "t1": {"predicted": 10.0, "measured": 11.0},
        "t2": {"predicted": 100.0, "measured": 180.0},
        "t3": {"predicted": 5.0, "measured": None},  # never reached within the horizon
        "success": {"predicted": 0.9, "measured": 0.5},
        "ode_compile_seconds": 0.5,
    }
    return data, summary


def _plot(data, summary):
    fig, ax = plt.subplots()
    ax.plot(data["t"], data["loss"])
    return fig


def _predictions(s: dict) -> list[Prediction]:
    rule = "loss midpoint between L_{k-1} & L_k, |t| <= T, A*_1 <b>"  # markup in every format
    return [
        Prediction(f"t_{k} (ODE time)", s[f"t{k}"]["predicted"], s[f"t{k}"]["measured"], 0.25, rule)
        for k in (1, 2, 3)
    ] + [
        Prediction(
            "success rate",
            s["success"]["predicted"],
            s["success"]["measured"],
            0.1,
            "fraction of seeds",
            "difference",
        )
    ]


def _report(s: dict) -> str:
    return f"t_1 measured {s['t1']['measured']}, predicted {s['t1']['predicted']}"


def _figure(figure_id: str) -> Figure:
    return Figure(
        figure_id,
        PAPER,
        f"{figure_id}: a stand-in with four predictions",
        FigureOptions,
        _compute,
        _plot,
        _report,
        how_to_read="Blue: the loss; the <dashed> lines are predicted.",
        predictions=_predictions,
    )


STORED, FAILED, NEVER, CUT = (_figure(f"demo-{n}") for n in ("stored", "failed", "never", "cut"))
REGISTERED = (STORED, FAILED, NEVER, CUT)
ERROR = "ValueError: eps = -1 <= 0 & <script>alert(1)</script>"


def _reproduction(out: Path) -> Path:
    """``out`` as ``stagewise reproduce --quick`` leaves it: one figure stored, one failed
    (recorded in reproduce.json), one never run, one interrupted (config.json only)."""
    STORED.run(FigureOptions(out=out, quiet=True))
    RunStore(out / CUT.id).create(CUT.id, {"quick": True}, {})
    figures = {
        STORED.id: {"status": "complete", "wall_seconds": 1.5, "error": None, "command": "x"},
        FAILED.id: {"status": "failed", "wall_seconds": 0.2, "error": ERROR, "command": "y"},
    }
    record = {
        "quick": True,
        "executor": "local",
        "started": "2026-12-01T10:00:00",
        "finished": "2026-12-01T10:05:00",
        "git_revision": "abc",
        "figures": figures,
    }
    (out / "reproduce.json").write_text(json.dumps(record))
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = _reproduction(tmp_path_factory.mktemp("reproduction"))
    write_report(out, REGISTERED)
    return out


class Page(HTMLParser):
    """What a browser would see: ids, references, tags, tables (with the heading above each)
    and the text of each section."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []
        self.tags: set[str] = set()
        self.tables: list[dict] = []
        self.text: dict[str, str] = {}
        self.section = ""
        self.cell: dict | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = {name: value or "" for name, value in attrs}
        self.tags.add(tag)
        if "id" in attrs:
            self.ids.add(attrs["id"])
            if re.fullmatch(r"h[1-6]", tag):
                self.section = attrs["id"]
        for name in ("href", "src"):
            if name in attrs:
                self.refs.append((tag, attrs[name]))
        if tag == "table":
            self.tables.append({"section": self.section, "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self.cell = {"text": "", "class": ""}
            self.tables[-1]["rows"][-1].append(self.cell)
        elif tag == "span" and self.cell is not None:
            self.cell["class"] += " " + attrs.get("class", "")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cell = None

    def handle_data(self, data):
        self.text[self.section] = self.text.get(self.section, "") + data
        if self.cell is not None:
            self.cell["text"] += data

    def table(self, section: str) -> list[dict]:
        """The first table of a section, as rows keyed by its header."""
        rows = next(t for t in self.tables if t["section"] == section)["rows"]
        header = [c["text"] for c in rows[0]]
        return [dict(zip(header, r)) for r in rows[1:]]


def _page(out: Path) -> Page:
    return Page((out / "index.html").read_text(encoding="utf-8"))


def _stored_rows(out: Path, figure: Figure) -> list[dict]:
    return read_summary(out / figure.id)["predictions"]


def _resolves(out: Path, ref: str, anchors: set[str]) -> bool:
    if ref.startswith("#"):
        return ref[1:] in anchors
    parsed = urlparse(ref)
    if parsed.scheme or parsed.netloc or ref.startswith("/"):
        return False  # the page must open from disk, relative links only
    target = (out / unquote(parsed.path)).resolve()
    return target.is_file() and target.is_relative_to(out.resolve())


def test_every_image_and_link_of_the_page_resolves_under_the_directory(report):
    page = _page(report)
    images = [ref for tag, ref in page.refs if tag == "img"]
    files = [ref for tag, ref in page.refs if tag == "a" and not ref.startswith("#")]
    assert images == [f"{STORED.id}/{STORED.id}.png"]
    assert f"{STORED.id}/{STORED.id}.pdf" in files
    unresolved = [ref for _, ref in page.refs if not _resolves(report, ref, page.ids)]
    assert unresolved == []


def test_every_image_and_link_of_the_markdown_resolves_under_the_directory(report):
    text = (report / "REPORT.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    refs = re.findall(r"\]\(([^)\s]+)\)", text)
    assert f"{STORED.id}/{STORED.id}.png" in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert f"{STORED.id}/{STORED.id}.pdf" in refs
    assert [ref for ref in refs if not _resolves(report, ref, anchors)] == []


def test_page_is_static_with_no_script_stylesheet_or_network_reference(report):
    page = _page(report)
    text = (report / "index.html").read_text(encoding="utf-8")
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    assert "url(" not in text and "@import" not in text and "://" not in text


def test_verdicts_on_the_page_are_those_of_each_summary_json(report):
    page = _page(report)
    stored = _stored_rows(report, STORED)
    assert {r["verdict"] for r in stored} == {"agrees", "disagrees", "not measured"}
    top = [
        (r["figure"]["text"], r["quantity"]["text"], r["verdict"]["text"], r["verdict"]["class"])
        for r in page.table("predictions")
    ]
    expected = [(STORED.id, r["quantity"], r["verdict"]) for r in stored]
    assert [t[:3] for t in top] == expected
    for *_, verdict, css in top:  # coloured by verdict
        assert "mark-" + verdict.replace(" ", "-") in css.split()
    section = page.table(f"fig-{STORED.id}")
    assert [(r["quantity"]["text"], r["verdict"]["text"]) for r in section] == [
        (r["quantity"], r["verdict"]) for r in stored
    ]
    counts = page.text["predictions"]
    for verdict in ("agrees", "disagrees", "not measured"):
        assert f"{sum(r['verdict'] == verdict for r in stored)} {verdict}" in counts


def test_verdicts_in_the_markdown_are_those_of_each_summary_json(report):
    text = (report / "REPORT.md").read_text(encoding="utf-8")
    table = text.split('<a id="predictions"></a>')[1].split("<a id=")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    cells = [
        [re.sub(r"\\(.)", r"\1", c).strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in lines
    ]
    header, rows = cells[0], cells[1:]
    shown = [(r[header.index("quantity")], r[header.index("verdict")]) for r in rows]
    assert shown == [(r["quantity"], r["verdict"]) for r in _stored_rows(report, STORED)]
    rule = _stored_rows(report, STORED)[0]["rule"]
    assert rows[0][header.index("rule")] == rule  # escaped, then read back unchanged


def test_figure_not_run_appears_as_not_run_with_the_command_to_run_it(report):
    page = _page(report)
    text = page.text[f"fig-{NEVER.id}"]
    assert "status: not run" in text
    assert f"stagewise figure {NEVER.id} --quick --out {report}" in text
    assert "status: interrupted" in page.text[f"fig-{CUT.id}"]
    assert "status: complete" in page.text[f"fig-{STORED.id}"]


def test_failed_figure_shows_its_error_from_reproduce_json_as_text(report):
    page = _page(report)
    assert "status: failed" in page.text[f"fig-{FAILED.id}"]
    assert ERROR in page.text[f"fig-{FAILED.id}"]  # escaped on the page, so read back as text
    assert "script" not in page.tags
    assert ERROR in (report / "REPORT.md").read_text(encoding="utf-8")


def test_figure_section_shows_how_to_read_tables_times_and_provenance(report):
    page = _page(report)
    text = page.text[f"fig-{STORED.id}"]
    assert STORED.how_to_read in text
    assert _report(read_summary(report / STORED.id)) in text
    # reproduce.json's wall time; compile: the figure's own and its sub-run's
    assert "wall time 1.5 s, compile time 1.8 s" in text
    config = json.loads((report / STORED.id / "config.json").read_text())
    assert f"git revision {config['git_revision']}" in text
    assert all(f"{k}{v}" in text for k, v in config["versions"].items() if v is not None)
    assert "seed_ids" in text


def test_summary_lacking_keys_shows_report_text_unavailable(report, tmp_path):
    out = shutil.copytree(report, tmp_path / "old")
    summary = read_summary(out / STORED.id)
    del summary["t1"]  # a summary from before the figure recorded t1
    RunStore(out / STORED.id).write_summary(summary)
    write_report(out, REGISTERED)
    text = _page(out).text[f"fig-{STORED.id}"]
    assert "report text unavailable: KeyError: 't1'" in text
    assert "prediction rules unavailable: KeyError: 't1'" in text


def test_damaged_summary_json_shows_the_figure_as_unreadable_naming_the_file(report, tmp_path):
    out = shutil.copytree(report, tmp_path / "damaged")
    (out / STORED.id / "summary.json").write_text('{"t1": ')  # cut short by a full disk
    write_report(out, REGISTERED)
    text = _page(out).text[f"fig-{STORED.id}"]
    assert "status: unreadable" in text
    assert f"{out / STORED.id / 'summary.json'}: not valid JSON" in text


def test_predictions_missing_from_an_old_summary_are_written_back_and_shown(report, tmp_path):
    out = shutil.copytree(report, tmp_path / "old")
    summary = read_summary(out / STORED.id)
    rows = summary.pop("predictions")
    RunStore(out / STORED.id).write_summary(summary)
    write_report(out, REGISTERED)
    assert read_summary(out / STORED.id)["predictions"] == rows
    shown = [r["verdict"]["text"] for r in _page(out).table("predictions")]
    assert shown == [r["verdict"] for r in rows]


def test_derived_statements_grouped_by_paper_with_counts_per_status(report, tmp_path, monkeypatch):
    statements = (
        DerivedStatement("other", "§1", "x <= y & <b>z</b>", "open", "", "no check yet"),
        DerivedStatement(PAPER, "§2", "t_1 ~ 1/m", "confirmed", "tests/a.py::test_t1"),
        DerivedStatement(PAPER, "§3", "t_2 linear", "corrected", "tests/a.py::test_t2", "quad"),
    )
    monkeypatch.setattr(derived_module, "DERIVED", statements)
    out = shutil.copytree(report, tmp_path / "copy")
    write_report(out, REGISTERED)
    page = _page(out)
    rows = page.table("derived")
    assert [(r["paper"]["text"], r["statement"]["text"], r["status"]["text"]) for r in rows] == [
        (s.paper, s.statement, s.status) for s in (statements[1], statements[2], statements[0])
    ]
    assert "1 confirmed, 1 corrected, 1 open" in page.text["derived"]


def test_every_registered_figure_has_a_section(tmp_path):
    from figures.registry import declared

    write_report(tmp_path)
    page = _page(tmp_path)
    for figure in declared():
        assert "status: not run" in page.text[f"fig-{figure.id}"]


def _chromium(url: str, tmp_path: Path, name: str) -> tuple[Path, list[str]]:
    """Render ``url`` headless to a PNG; returns it and the page's console messages (errors
    and uncaught exceptions are logged as ``...:CONSOLE...`` lines on stderr)."""
    shot = tmp_path / f"{name}.png"
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1400,3000",
            "--enable-logging=stderr",
            "--v=0",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return shot, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="chromium is not installed (.ci/run installs Debian's chromium with apt-get)",
)
def test_page_renders_in_headless_chromium_without_console_errors(report, tmp_path):
    canary = tmp_path / "canary.html"
    canary.write_text("<!DOCTYPE html><script>console.error('canary')</script>")
    _, logged = _chromium(canary.as_uri(), tmp_path, "canary")
    assert any("canary" in line for line in logged)  # the capture sees console errors
    shot, logged = _chromium((report / "index.html").as_uri(), tmp_path, "report")
    assert logged == []
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    colours = {tuple(p) for p in np.unique(pixels, axis=0)}
    assert len(colours) > 50  # text, tables and the figure's PNG drawn, not a blank page
    # the verdict colours of the stylesheet (agrees, disagrees) are on screen
    assert {(0xDA, 0xFB, 0xE1), (0xFF, 0xEB, 0xE9)} <= colours
