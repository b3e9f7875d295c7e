"""The figure registry: every figure id of ``../shared/papers/README.md`` and every comparison,
collected from the ``FIGURE`` each module of a paper wing declares (``figures.core.figure``).

A figure's module follows from its id (``find``): ``<wing>-<name>`` is declared by
``figures.<wing>.<name>`` and the comparison ``compare-<wing>`` by ``figures.<wing>.compare``
(dashes for underscores), so one figure is found by importing its own module alone."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import cache
from typing import Literal

from figures.core.figure import Figure

WINGS = ("incremental", "focus_dilution", "clustering_head", "emergence", "mean_field")
"""the paper wings of ``figures``, in the order ``stagewise list`` shows them."""


@cache
def declared() -> tuple[Figure, ...]:
    """Every ``FIGURE`` declared by a module of a paper wing, wing by wing, in module order."""
    found = []
    for wing in WINGS:
        package = importlib.import_module(f"figures.{wing}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"figures.{wing}.{info.name}")
            figure = getattr(module, "FIGURE", None)
            if isinstance(figure, Figure):
                found.append(figure)
    return tuple(found)


def all_figures() -> dict[str, Figure]:
    """``stagewise figure ID``: the figures by id."""
    return {f.id: f for f in declared() if f.kind == "figure"}


def comparisons() -> dict[str, Figure]:
    """``stagewise compare NAME``: the predicted-vs-measured comparisons by name."""
    return {f.command_name: f for f in declared() if f.kind == "comparison"}


def module_of(figure_id: str) -> str | None:
    """The module the naming rule (module docstring) gives ``figure_id``; None when no wing
    fits or the module does not exist."""
    for wing in WINGS:
        dashed = wing.replace("_", "-")
        if figure_id == f"compare-{dashed}":
            leaf = "compare"
        elif figure_id.startswith(f"{dashed}-"):
            leaf = figure_id.removeprefix(f"{dashed}-").replace("-", "_")
        else:
            continue
        name = f"figures.{wing}.{leaf}"
        return name if leaf.isidentifier() and importlib.util.find_spec(name) else None
    return None


def find(kind: Literal["figure", "comparison"], name: str) -> Figure | None:
    """``stagewise figure NAME`` (``kind`` figure) or ``stagewise compare NAME`` (comparison),
    importing only the module the naming rule gives; None when that module declares no such
    figure (``declared`` then has every figure, and a test keeps the two in step)."""
    figure_id = f"compare-{name}" if kind == "comparison" else name
    module = module_of(figure_id)
    if module is None:
        return None
    figure = getattr(importlib.import_module(module), "FIGURE", None)
    if isinstance(figure, Figure) and figure.id == figure_id and figure.kind == kind:
        return figure
    return None
