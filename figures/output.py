"""A figure's run directory: the data it draws go through the run store (config.json,
trajectory.zarr, summary.json), the drawing is saved as PNG + PDF beside them, and re-plotting
reads the store instead of recomputing."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from simulate.store import RunStore, load
from theory.validation import require


def figure_dir(out: Path, figure_id: str) -> Path:
    """Where a figure's run goes: ``out/<figure_id>/``, or ``out`` itself when it already ends in
    the id (so ``--replot --out runs/<figure_id>`` works)."""
    return out if out.name == figure_id else out / figure_id


def store_figure_data(out: Path, figure_id: str, cfg, seeds: dict, data, summary: dict) -> None:
    store = RunStore(out)
    store.create(figure_id, dataclasses.asdict(cfg), seeds)
    store.write(data)
    store.write_summary(summary)


def load_figure_data(out: Path, figure_id: str):
    """(Dataset, config.json, summary.json) of a stored figure run, for ``--replot``."""
    require((out / "summary.json").exists() and (out / "trajectory.zarr").exists(), "replot",
            str(out), f"a directory written by 'stagewise figure {figure_id}'")
    data, config = load(out)
    require(config.get("experiment") == figure_id, "replot", str(out),
            f"a run directory of figure {figure_id!r}")
    return data, config, json.loads((out / "summary.json").read_text())


def run_figure(figure_id: str, cfg, out: Path, compute, plot, report) -> dict:
    """The life of a figure: ``compute(cfg) -> (data, summary)`` into the run store (or, with
    ``cfg.replot``, the stored data), ``plot(data, summary)`` from those data only, and
    ``report(summary)`` on stdout. Returns the summary."""
    if cfg.replot:
        data, _, summary = load_figure_data(out, figure_id)
    else:
        data, summary = compute(cfg)
        seed_ids = data["seed"].values.tolist() if "seed" in data.coords else [cfg.seed]
        store_figure_data(out, figure_id, cfg, {"seed_ids": seed_ids}, data, summary)
    paths = save_figure(out, figure_id, plot(data, summary))
    print(report(summary))
    print("wrote " + ", ".join(str(p) for p in [*paths, out / "summary.json"]))
    return summary


def save_figure(out: Path, figure_id: str, fig) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{figure_id}.png", out / f"{figure_id}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


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
