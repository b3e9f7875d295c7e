"""The house's rules (ARCHITECTURE §1), read from the imports of every module: theory <- simulate
<- figures, theory without jax, paper wings that never import each other, no import cycle,
nothing switched on at import, and tests that take statistics from below the figures."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("theory", "simulate", "figures")
WINGS = ("incremental", "focus_dilution", "clustering_head", "emergence", "mean_field")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute module names imported anywhere in the file (``from a.b import c`` gives a.b and
    a.b.c, since c may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


SOURCES = {_module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_layers_and_wings(module):
    layer = module.split(".")[0]
    imported = _imports(SOURCES[module])
    forbidden = {"theory": ("simulate", "figures", "jax"), "simulate": ("figures",)}
    for name in imported:
        top = name.split(".")[0]
        assert top not in forbidden.get(layer, ()), f"{module} imports {name}"
        if top in LAYERS and _wing(name) and _wing(module):
            assert _wing(name) == _wing(module), f"wing {module} imports wing {name}"


def _graph() -> dict[str, set[str]]:
    return {m: {n for n in _imports(p) if n in SOURCES and n != m} for m, p in SOURCES.items()}


def test_no_import_cycle():
    graph, state, path = _graph(), {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in graph[m]:
            if state.get(n) == "open":
                pytest.fail("import cycle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m)


def test_importing_the_packages_changes_no_setting():
    """Importing every module leaves JAX in float32 and matplotlib's backend untouched."""
    code = (
        "import jax, matplotlib\n"
        "backend = matplotlib.rcParams._get_backend_or_none()\n"
        "import importlib\n"
        f"for m in {sorted(SOURCES)!r}:\n"
        "    importlib.import_module(m)\n"
        "assert not jax.config.jax_enable_x64, 'float64 switched on at import'\n"
        "assert matplotlib.rcParams._get_backend_or_none() == backend, 'backend set at import'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]


ALLOWED_FROM_FIGURE_MODULES = {"FIGURE", "QUICK"}
"""what a test may take from a figure module of a wing: its declaration (to run it), its config
class and its quick setting; statistics and rules come from simulate or theory."""
DRAWING = {"animate", "animation_epochs", "draw_frame", "SandboxContext"}
DRAWING |= {"SIMPLEX_CORNERS", "simplex_projection"}
"""drawing helpers whose pictures (frames, animation, simplex panel) the sandbox tests check."""


@pytest.mark.parametrize(
    "test_file", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py"))
)
def test_tests_take_measurements_from_below_the_figures(test_file):
    for node in ast.walk(ast.parse((ROOT / test_file).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and _wing(node.module):
            if node.module.startswith("figures."):
                # a figure module itself (from figures.<wing> import density) is a declaration
                names = {a.name for a in node.names if f"{node.module}.{a.name}" not in SOURCES}
                extra = {
                    n
                    for n in names - ALLOWED_FROM_FIGURE_MODULES - DRAWING
                    if not n.endswith(("Config", "Options"))
                }
                assert not extra, f"{test_file} imports {sorted(extra)} from {node.module}"
