"""The figure registry: every figure id of ``../shared/papers/README.md`` and every comparison,
collected from the ``FIGURE`` each module of a paper wing declares (``figures.core.figure``)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

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
