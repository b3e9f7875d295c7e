"""The benchmark's one table: rows of (measurement, setting, value, unit, baseline, ratio, note),
printed as text and written as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

COLUMNS = ("measurement", "setting", "value", "unit", "baseline", "ratio", "note")


@dataclass(frozen=True)
class Row:
    """One measurement; ``baseline`` is the same work done another way, timed in the same run
    (None where there is none), and ``ratio`` says how the value compares with it (its meaning is
    given per family in the README and in ``note``)."""

    measurement: str
    setting: str
    value: float
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    note: str = ""


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def format_table(rows: list[Row]) -> str:
    """The rows as an aligned text table with a header line."""
    cells = [list(COLUMNS)] + [
        [
            r.measurement,
            r.setting,
            _number(r.value),
            r.unit,
            _number(r.baseline),
            _number(r.ratio),
            r.note,
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    numeric = {2, 4, 5}
    lines = [
        "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _jsonable(x: float | None) -> float | str | None:
    # JSON has no nan or inf: written as strings, as the run store does
    return x if x is None or math.isfinite(x) else str(x)


def write_json(rows: list[Row], path: Path, meta: dict) -> None:
    """``{"meta": ..., "columns": [...], "rows": [{column: value}, ...]}``."""
    records = [
        {
            k: _jsonable(v) if k in ("value", "baseline", "ratio") else v
            for k, v in asdict(r).items()
        }
        for r in rows
    ]
    payload = {"meta": meta, "columns": list(COLUMNS), "rows": records}
    Path(path).write_text(json.dumps(payload, indent=1) + "\n")
