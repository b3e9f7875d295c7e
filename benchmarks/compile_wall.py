"""Compile time, cold and with the persistent cache warm, and wall time of each ``--quick`` figure
and comparison: ``stagewise figure ID --quick --quiet --out DIR`` (``stagewise compare NAME`` for
a comparison) run in a subprocess twice with one fresh ``STAGEWISE_CACHE_DIR``, cold and then
warm. Compile seconds are those the run records: the sum of every ``compile_seconds`` and
``*_compile_seconds`` entry of the summary.json files it writes (the figure's own and its
sub-runs'). Ratio: cold / warm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.table import Row

MAIN_JOB = "compare-incremental"
"""the issue's main job, ``stagewise compare incremental --quick``."""
QUICK_IDS = ("incremental-ode",)
"""what --quick runs (the whole set takes over an hour)."""
TIMEOUT = 3 * 3600
"""seconds one figure run may take before it is reported as timed out."""


def all_ids() -> list[str]:
    """Every figure id, then every comparison's (``compare-NAME``)."""
    from figures.registry import all_figures, comparisons

    return [*all_figures(), *(f"compare-{name}" for name in comparisons())]


def command(figure_id: str, out: Path) -> list[str]:
    if figure_id.startswith("compare-"):
        sub = ["compare", figure_id.removeprefix("compare-")]
    else:
        sub = ["figure", figure_id]
    cli = "from figures.cli import run; run()"
    return [sys.executable, "-c", cli, *sub, "--quick", "--quiet", "--out", str(out)]


def recorded_compile_seconds(out: Path) -> float:
    """Sum of the compile seconds recorded in the summary.json files under ``out``."""

    def collect(node) -> float:
        if isinstance(node, dict):
            return sum(
                float(v)
                if isinstance(v, int | float)
                and (k == "compile_seconds" or k.endswith("_compile_seconds"))
                else collect(v)
                for k, v in node.items()
            )
        if isinstance(node, list):
            return sum(collect(v) for v in node)
        return 0.0

    return sum(collect(json.loads(p.read_text())) for p in out.rglob("summary.json"))


def timed_run(figure_id: str, out: Path, cache: Path) -> tuple[float, float, str]:
    """(wall seconds, recorded compile seconds, failure or '') of one figure run."""
    env = {**os.environ, "STAGEWISE_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command(figure_id, out), env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, float("nan"), f"timed out after {TIMEOUT} s"
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        return wall, float("nan"), f"exit {proc.returncode}: {last}"
    return wall, recorded_compile_seconds(out), ""


def measure_ids(ids: list[str]) -> list[Row]:
    rows = []
    for figure_id in ids:
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "cache"
            cold = timed_run(figure_id, Path(tmp) / "cold", cache)
            warm = timed_run(figure_id, Path(tmp) / "warm", cache)
        failed = "; ".join(f"{what} {r[2]}" for what, r in (("cold", cold), ("warm", warm)) if r[2])
        main = " (the main job)" if figure_id == MAIN_JOB else ""
        pairs = (("wall", cold[0], warm[0]), ("compile (recorded)", cold[1], warm[1]))
        for what, cold_s, warm_s in pairs:
            rows.append(
                Row(
                    f"quick figure {what}",
                    f"{figure_id} --quick{main}, warm cache (baseline: cold)",
                    warm_s,
                    "s",
                    cold_s,
                    cold_s / warm_s if warm_s > 0 else float("nan"),
                    failed or "ratio: cold / warm",
                )
            )
    return rows


def measure(mode: str, ids: list[str] | None = None) -> list[Row]:
    if ids is None:
        ids = list(QUICK_IDS) if mode == "quick" else all_ids()
    return measure_ids(ids)
