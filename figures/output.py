"""Writing a figure's outputs: PNG + PDF + summary.json in one run directory."""

from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else str(x)  # JSON has no nan/inf: "nan", "inf"
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, Path):
        return str(x)
    return x


def versions() -> dict:
    import diffrax
    import jax
    import sympy

    return {"python": platform.python_version(), "jax": jax.__version__,
            "diffrax": diffrax.__version__, "sympy": sympy.__version__, "numpy": np.__version__}


def write_outputs(out: Path, figure_id: str, fig, summary: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{figure_id}.png", out / f"{figure_id}.pdf", out / "summary.json"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    summary = {"figure": figure_id, "command": " ".join(sys.argv), "versions": versions(),
               **summary}
    paths[2].write_text(json.dumps(_jsonable(summary), indent=2) + "\n")
    return paths


def format_table(header: list[str], rows: list[list]) -> str:
    def fmt(x):
        if isinstance(x, float):
            return "-" if math.isnan(x) else ("inf" if math.isinf(x) else f"{x:.4g}")
        return "-" if x is None else str(x)

    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
