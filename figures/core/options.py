"""The options every figure shares (ARCHITECTURE §3), declared once.

A figure's config subclasses ``FigureOptions`` and nests the config of the experiment it runs as
one field (flattened on the command line, so ``--lr`` reaches the experiment); seeds come from
that experiment's config, or from ``simulate.runner.Seeds`` where a figure runs no experiment.

``--quick`` changes only the options left at their defaults: ``quick_or`` and ``quick_setting``
give an option given on the command line precedence over the quick setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        return RunOutput(out=Path(run_dir) / name, quiet=self.quiet, reuse=True)

    def quick_or(self, name: str, quick: Any) -> Any:
        """Option ``name`` (dotted for a nested config: ``"flow.seeds"``), or ``quick`` under
        --quick when the option was left at its default."""
        value = _get(self, name)
        return quick if self.quick and value == _default(type(self), name) else value

    def quick_setting(self, name: str, quick: Mapping[str, Any]) -> Any:
        """The nested config ``name`` with, under --quick, the values of ``quick`` for its
        options left at their defaults."""
        value = _get(self, name)
        if not self.quick:
            return value
        default = _default(type(self), name)
        kept = {k: v for k, v in quick.items() if getattr(value, k) == getattr(default, k)}
        return dataclasses.replace(value, **kept)


def _get(obj: Any, name: str) -> Any:
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _default(config: type, name: str) -> Any:
    """The default of the (dotted) field ``name`` of the dataclass ``config``."""
    head, _, rest = name.partition(".")
    field = {f.name: f for f in dataclasses.fields(config)}[head]
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        raise ValueError(f"{config.__name__}.{head} has no default")
    return _get(value, rest) if rest else value
