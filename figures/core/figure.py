"""What a figure module declares (``FIGURE = Figure(...)``) and the life of a figure: compute
into the run store (or, with ``--replot``, read the stored data), draw from those data only, save
PNG + PDF, print the report. The registry collects the declarations; nothing else lists them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import xarray as xr
from matplotlib.figure import Figure as MplFigure

from figures.core.options import FigureOptions
from figures.core.output import figure_dir, load_figure_data, save_figure
from simulate.store import RunLock, RunStore, check_output

Compute = Callable[[Any, Path], tuple[xr.Dataset, dict]]
"""``compute(cfg, run_dir) -> (data, summary)``: runs what the figure needs (sub-runs below
``run_dir``) and returns the data it draws and the numbers it reports."""
Plot = Callable[[xr.Dataset, dict], MplFigure]
Report = Callable[[dict], str]
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

    @property
    def command_name(self) -> str:
        """The name on the command line: the id, or for a comparison the name after compare-."""
        return self.id.removeprefix("compare-") if self.kind == "comparison" else self.id

    def run_dir(self, cfg: FigureOptions) -> Path:
        return figure_dir(cfg.out, self.id)

    def run(self, cfg: FigureOptions) -> dict:
        """Compute (or read back) the data, draw, save and report. Returns the summary."""
        out = self.run_dir(cfg)
        if cfg.replot:
            data, _, summary = load_figure_data(out, self.id)
        else:
            check_output(out, cfg.overwrite)  # before anything is computed
            with RunLock(out):
                data, summary = self.compute(cfg, out)
                seed_ids = data["seed"].values.tolist() if "seed" in data.coords else []
                store = RunStore(out)
                store.create(self.id, dataclasses.asdict(cfg), {"seed_ids": seed_ids})
                store.write(data)
                store.write_summary(summary)
        paths = save_figure(out, self.id, self.plot(data, summary))
        if self.extra is not None:
            paths += self.extra(cfg, out, data, summary)
        print(self.report(summary))
        print("wrote " + ", ".join(str(p) for p in [*paths, out / "summary.json"]))
        return summary
