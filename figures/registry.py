"""The figure registry: every figure id of ``../shared/papers/README.md`` and every comparison,
collected from the ``FIGURE`` each module of a paper wing declares (``figures.core.figure``).

A figure's module follows from its id (``find``): ``<wing>-<name>`` is declared by
``figures.<wing>.<name>`` and the comparison ``compare-<wing>`` by ``figures.<wing>.compare``
(dashes for underscores), so one figure is found by importing its own module alone. ``stagewise
list`` reads every figure's id, paper and description from the modules' source (``listed``) and
imports none of them."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from figures.core import naming

if TYPE_CHECKING:
    from figures.core.figure import Figure

WINGS = ("incremental", "focus_dilution", "clustering_head", "emergence", "mean_field")
"""the paper wings of ``figures``, in the order ``stagewise list`` shows them."""


@cache
def declared() -> tuple[Figure, ...]:
    """Every ``FIGURE`` declared by a module of a paper wing, wing by wing, in module order."""
    from figures.core.figure import Figure  # matplotlib's figure module: not for listed()

    found = []
    for wing in WINGS:
        package = importlib.import_module(f"figures.{wing}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"figures.{wing}.{info.name}")
            figure = getattr(module, "FIGURE", None)
            if isinstance(figure, Figure):
                found.append(figure)
    return tuple(found)


@dataclass(frozen=True)
class Listed:
    """A figure as ``stagewise list`` shows it: the literal id, paper, description and kind of
    its module's ``FIGURE = Figure(...)``."""

    id: str
    paper: str
    description: str
    kind: str = "figure"

    @property
    def command_name(self) -> str:
        return naming.command_name(self.id, self.kind)


LISTED_FIELDS = ("id", "paper", "description")
"""``Figure``'s first fields, which its declarations give as literal strings."""


def _listed_in(path: Path) -> Listed | None:
    """The ``FIGURE = Figure(...)`` assignment of the module at ``path``, read from its source;
    None when it declares none. Its id, paper, description and kind are literal strings or
    module-level names bound to one (``FIGURE_ID``); any other declaration is an error, not a
    figure left out of the list."""
    literals: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Name):
            continue
        if isinstance(value, ast.Constant):
            literals[target.id] = value.value
        if target.id != "FIGURE" or not isinstance(value, ast.Call):
            continue
        given = dict(zip(LISTED_FIELDS, value.args))
        given |= {k.arg: k.value for k in value.keywords if k.arg in (*LISTED_FIELDS, "kind")}
        values: dict[str, str] = {}
        for field, arg in given.items():
            text = arg.value if isinstance(arg, ast.Constant) else None
            text = literals.get(arg.id) if isinstance(arg, ast.Name) else text
            if not isinstance(text, str):
                raise TypeError(f"{path}: FIGURE's {', '.join(given)} must be literal strings")
            values[field] = text
        return Listed(**values)
    return None


@cache
def listed() -> tuple[Listed, ...]:
    """What ``declared`` holds, in its order, read from the modules' source without importing
    them (every figure module imports its wing's simulations: 2-3 s for all of them)."""
    found = []
    for wing in WINGS:
        spec = importlib.util.find_spec(f"figures.{wing}")
        assert spec is not None and spec.submodule_search_locations is not None
        for folder in map(Path, spec.submodule_search_locations):
            for info in pkgutil.iter_modules([str(folder)]):
                source = (
                    folder / info.name / "__init__.py" if info.ispkg else folder / f"{info.name}.py"
                )
                entry = _listed_in(source)
                if entry is not None:
                    found.append(entry)
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
        if figure_id == f"{naming.COMPARISON_PREFIX}{dashed}":
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
    wanted = naming.figure_id(name, kind)
    module = module_of(wanted)
    if module is None:
        return None
    from figures.core.figure import Figure

    figure = getattr(importlib.import_module(module), "FIGURE", None)
    if isinstance(figure, Figure) and figure.id == wanted and figure.kind == kind:
        return figure
    return None
