"""A figure's run directory and files: where it goes, reading a stored figure run back for
``--replot``, saving the drawing as PNG + PDF, and the plain-text tables of the reports."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from numpy.typing import ArrayLike

from simulate.store import load, read_summary
from theory.validation import require


def figure_dir(out: Path, figure_id: str) -> Path:
    """Where a figure's run goes: ``out/<figure_id>/``, or ``out`` itself when it already ends in
    the id (so ``--replot --out runs/<figure_id>`` works)."""
    return out if out.name == figure_id else out / figure_id


def load_figure_data(out: Path, figure_id: str):
    """(Dataset, config.json, summary.json) of a stored figure run, for ``--replot``."""
    require(
        (out / "summary.json").exists() and (out / "trajectory.zarr").exists(),
        "replot",
        str(out),
        f"a directory written by 'stagewise figure {figure_id}'",
    )
    data, config = load(out)
    require(
        config.get("experiment") == figure_id,
        "replot",
        str(out),
        f"a run directory of figure {figure_id!r}",
    )
    return data, config, read_summary(out)


def save_figure(out: Path, figure_id: str, fig) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{figure_id}.png", out / f"{figure_id}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def finite_mean(values: ArrayLike) -> float:
    """Mean of the finite entries of ``values`` (seeds whose rule found nothing are nan); nan
    where none is finite, without numpy's empty-slice warning on a report's table."""
    x = np.asarray(values, float)
    finite = x[np.isfinite(x)]
    return float(finite.mean()) if finite.size else float("nan")


def format_table(header: list[str], rows: list[list]) -> str:
    def fmt(x):
        if isinstance(x, str) and x in ("nan", "inf"):  # as stored in JSON
            x = float(x)
        if isinstance(x, float):
            return "-" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.4g}")
        return "-" if x is None else str(x)

    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


STAGE_COLUMNS = {
    "stage": "stage",
    "level_predicted": "level pred",
    "level_measured": "level meas",
    "start_predicted": "start pred (t)",
    "start_measured": "start meas (t)",
    "ratio": "meas/pred",
    "ratio_min": "min",
    "ratio_max": "max",
}
"""the columns of a predicted-vs-measured stage table: summary key -> header."""


def stage_table(rows: list[dict]) -> str:
    """The predicted-vs-measured stage table of a comparison (one row per stage)."""
    return format_table(list(STAGE_COLUMNS.values()), [[r[k] for k in STAGE_COLUMNS] for r in rows])
