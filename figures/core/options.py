"""The options every figure shares (ARCHITECTURE §3), declared once.

A figure's config subclasses ``FigureOptions`` and nests the config of the experiment it runs as
one field (flattened on the command line, so ``--lr`` reaches the experiment); seeds come from
that experiment's config, or from ``simulate.runner.Seeds`` where a figure runs no experiment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tyro

from simulate.runner import RunOutput

Flat = tyro.conf.arg(name="")
"""Marker for a nested config whose options appear without a prefix (``--lr``, not
``--train.lr``): ``train: Annotated[MarkovTrainConfig, Flat] = MarkovTrainConfig(...)``."""


@dataclass(frozen=True)
class FigureOptions:
    """Where a figure goes, its size, and whether it is recomputed."""

    out: Path = Path("runs")
    """output directory (the figure goes to OUT/<figure-id>/ unless OUT ends in that id)."""
    quick: bool = False
    """CPU-sized setting that keeps the figure's phenomenon (each figure says what it changes)."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""
    quiet: bool = False
    """no progress bar."""
    overwrite: bool = False
    """recompute into OUT/<figure-id>/ even if it holds a previous run (replacing it); without it
    a non-empty figure directory is refused before anything is computed."""

    def run_output(self, run_dir: Path, name: str = "training") -> RunOutput:
        """Where a training run of this figure goes: ``run_dir/name``, quiet when the figure is."""
        return RunOutput(out=Path(run_dir) / name, quiet=self.quiet, overwrite=self.overwrite)
