"""What the trained mean-field figures share (spec ``mean_field.md`` §7): the figure options with
the experiment's config nested (``simulate.mean_field.training.MeanFieldConfig``), its quick
setting, and the training run in a subdirectory of the figure's run directory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar

import xarray as xr

from figures.core.options import FigureOptions, Flat
from simulate.mean_field import training as mean_field_training
from simulate.mean_field.training import MeanFieldConfig
from simulate.side_by_side import run_side_by_side
from simulate.store import load, read_summary

QUICK = {
    "tokens": 256,
    "dt": 0.0625,
    "bins": 32,
    "save_every": 2,
    "steps": 200,
    "chunk": 200,
    "log_every": 50,
    "seeds": 1,
}
"""CPU setting of every trained mean-field figure: N = 256, 128 Euler steps of 1/16 (4 per depth
bin), 200 Adam steps, one seed."""


@dataclass(frozen=True)
class TrainedFigureOptions(FigureOptions):
    """A figure over the mean-field training experiment; quick: N = 256, depth step 1/16,
    200 Adam steps, one seed."""

    train: Annotated[MeanFieldConfig, Flat] = MeanFieldConfig()
    """the training run (spec §4 defaults)."""
    quick_train: ClassVar[Mapping[str, Any]] = QUICK
    """the quick setting of ``train`` (a figure may change it)."""

    def __post_init__(self) -> None:
        self.training()  # the run as resolved (--quick included) is valid before any compute

    def training(self, **overrides) -> MeanFieldConfig:
        """The experiment config this figure trains: ``train``, in the quick setting with
        ``--quick``, then ``overrides``."""
        cfg = self.quick_setting("train", self.quick_train)
        return replace(cfg, **overrides) if overrides else cfg


def train(
    options: FigureOptions, cfg: MeanFieldConfig, run_dir: Path, name: str = "training"
) -> tuple[xr.Dataset, dict]:
    """Run the experiment into ``run_dir/name`` and load what it stored: ``(dataset, summary)``."""
    return train_all(options, [(cfg, name)], run_dir)[0]


def train_all(
    options: FigureOptions, runs: Sequence[tuple[MeanFieldConfig, str]], run_dir: Path
) -> list[tuple[xr.Dataset, dict]]:
    """``train`` of each (config, name), the runs side by side on the CPU's devices
    (``simulate.side_by_side``): the quick escape figure's three one-seed runs take 70 s
    against 101 s one after the other."""
    outputs = [options.run_output(run_dir, name) for _, name in runs]
    run_side_by_side(
        [partial(mean_field_training.run, cfg, out) for (cfg, _), out in zip(runs, outputs)]
    )
    return [(load(out.path)[0], read_summary(out.path)) for out in outputs]
