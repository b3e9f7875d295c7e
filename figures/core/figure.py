"""What a figure module declares (``FIGURE = Figure(...)``) and the life of a figure: compute
into the run store (or, with ``--replot``, read the stored data), draw from those data only, save
PNG + PDF, print the report. The registry collects the declarations; nothing else lists them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import xarray as xr
from matplotlib.figure import Figure as MplFigure

from figures.core.naming import command_name
from figures.core.options import FigureOptions
from figures.core.output import figure_dir, load_figure_data, save_figure
from figures.core.verdicts import Prediction, no_predictions, prediction_rows
from simulate.runner import changed_options
from simulate.store import RunLock, RunStore, check_output, clear_run_dir, jsonable
from theory.validation import ConfigError, require

Compute = Callable[[Any, Path], tuple[xr.Dataset, dict]]
"""``compute(cfg, run_dir) -> (data, summary)``: runs what the figure needs (sub-runs below
``run_dir``) and returns the data it draws and the numbers it reports."""
Plot = Callable[[xr.Dataset, dict], MplFigure]
Report = Callable[[dict], str]
Predictions = Callable[[dict], list[Prediction]]
Extra = Callable[[Any, Path, xr.Dataset, dict], list[Path]]
"""``extra(cfg, run_dir, data, summary) -> paths``: further outputs drawn from the stored data
(an animation, say)."""


@dataclass(frozen=True)
class Figure:
    """One figure id of ``../shared/papers/README.md`` (or a comparison) and how to make it."""

    id: str
    """figure id, e.g. ``incremental-ode``; a comparison's is ``compare-<name>``."""
    paper: str
    """the paper's wing: incremental, focus-dilution, clustering-head, emergence, mean-field."""
    description: str
    """one line for ``stagewise list``."""
    config: type[FigureOptions]
    compute: Compute
    plot: Plot
    report: Report
    extra: Extra | None = None
    kind: Literal["figure", "comparison"] = "figure"
    how_to_read: str = ""
    """what to look at in the drawing (the README's "how to read it"), for the report."""
    predictions: Predictions = no_predictions
    """which numbers of the summary are predictions beside measurements, with the tolerance of
    each verdict (``figures.core.verdicts``)."""

    @property
    def command_name(self) -> str:
        """The name on the command line (``figures.core.naming``)."""
        return command_name(self.id, self.kind)

    def run_dir(self, cfg: FigureOptions) -> Path:
        return figure_dir(cfg.out, self.id)

    def run(self, cfg: FigureOptions) -> dict:
        """Compute (or read back) the data, draw, save and report. Returns the summary."""
        out = self.run_dir(cfg)
        if cfg.replot:
            data, config, summary = load_figure_data(out, self.id)
            changed = {
                k: v
                for k, v in changed_options(cfg, self.config(), config["config"]).items()
                if k not in PRESENTATION
            }
            require(
                not changed,
                "replot",
                str(out),
                "a stored run made with the given options; it has "
                + _describe(changed)
                + " (drop those options to redraw it, or recompute without --replot)",
            )
            summary = self.store_verdicts(out, summary)
        else:
            data, summary = self._compute(cfg, out)
        paths = save_figure(out, self.id, self.plot(data, summary))
        if self.extra is not None:
            paths += self.extra(cfg, out, data, summary)
        print(self.report(summary))
        print("wrote " + ", ".join(str(p) for p in [*paths, out / "summary.json"]))
        return summary

    def _compute(self, cfg: FigureOptions, out: Path) -> tuple[xr.Dataset, dict]:
        """Compute into ``out``: a fresh directory, or the same figure's run that an interrupt
        or kill cut short (its finished sub-runs are reused, the others resumed)."""
        status = self.stored(cfg)
        require(
            status != "complete" or cfg.overwrite,
            "out",
            str(out),
            "holds this figure already (same options): --replot redraws it, --overwrite "
            "recomputes it",
        )
        resuming = status == "interrupted" and not cfg.overwrite
        if not resuming:
            check_output(out, cfg.overwrite)  # before anything is computed
        with RunLock(out):
            store = RunStore(out)
            if not resuming:
                clear_run_dir(out)
                store.create(self.id, dataclasses.asdict(cfg), {})
            started = time.perf_counter()
            data, summary = self.compute(cfg, out)
            # a resumed figure counts only this process's part; sub-runs record their own
            summary["wall_seconds"] = time.perf_counter() - started
            seed_ids = data["seed"].values.tolist() if "seed" in data.coords else []
            store.update_config(seeds={"seed_ids": seed_ids})
            summary["predictions"] = prediction_rows(self.predictions(summary))
            store.write(data)
            store.write_summary(summary)
        return data, summary

    def stored(self, cfg: FigureOptions) -> Literal["complete", "interrupted"] | None:
        """What the run directory of ``cfg`` holds of this figure made with the same options:
        'complete', 'interrupted' (a run that resumes), or None (nothing of it)."""
        settings = _settings(jsonable(dataclasses.asdict(cfg)))
        return _stored(self.run_dir(cfg), self.id, settings)

    def store_verdicts(self, out: Path, summary: dict) -> dict:
        """The summary with its ``predictions`` rows as this figure's rules give them from the
        stored numbers, written back to ``out/summary.json`` when they were missing or differ
        (a run made before its figure declared them); nothing is recomputed."""
        rows = jsonable(prediction_rows(self.predictions(summary)))
        if summary.get("predictions") != rows:
            summary = {**summary, "predictions": rows}
            RunStore(out).write_summary(summary)
        return summary


PRESENTATION = ("out", "replot", "quiet", "overwrite")
"""FigureOptions fields that change where and how a figure is shown, not what it computes."""


def _settings(config: dict) -> dict:
    """A stored figure config without its presentation fields."""
    return {k: v for k, v in config.items() if k not in PRESENTATION}


def _stored(out: Path, figure_id: str, settings: dict) -> Literal["complete", "interrupted"] | None:
    """'complete' or 'interrupted' for a run of this figure with these settings in ``out``, None
    for anything else (an empty or missing directory, another figure, other options)."""
    try:
        stored = RunStore(out).config()
    except (OSError, ValueError, ConfigError):
        return None
    if stored.get("experiment") != figure_id or _settings(stored.get("config", {})) != settings:
        return None
    return "complete" if (out / "summary.json").exists() else "interrupted"


def _describe(changed: dict) -> str:
    return ", ".join(f"{k} = {old!r} (given {new!r})" for k, (old, new) in changed.items())
