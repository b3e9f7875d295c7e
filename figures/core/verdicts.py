"""Predictions beside measurements, each with the tolerance its figure declares next to its rule,
and the verdict that follows (the report's top table, issue 16).

A figure declares ``predictions(summary) -> list[Prediction]``: which numbers of its own
summary.json are a prediction and the measurement it stands beside. ``Figure.run`` stores the
rows, verdicts included, in summary.json under ``"predictions"``; the report reads them from
there, so no verdict is ever typed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

VERDICTS = ("agrees", "disagrees", "not measured")
"""``not measured``: the measurement is missing (a stage never reached within the horizon) or
the prediction is not finite."""


@dataclass(frozen=True)
class Prediction:
    """One predicted number beside the measured one.

    ``scale="ratio"``: agrees when ``|measured / predicted - 1| <= tolerance`` (stage times,
    rates, levels far from 0). ``scale="factor"``: agrees when measured and predicted are within
    a factor ``tolerance`` of each other either way (scaling laws: ``tolerance=2``).
    ``scale="difference"``: agrees when ``|measured - predicted| <= tolerance`` (success rates,
    fractions, levels near 0)."""

    quantity: str
    """what is predicted, in the paper's words and symbol, with its unit (``t_2 (ODE time)``)."""
    predicted: float
    measured: float
    tolerance: float
    rule: str
    """how the measured value is measured and why this tolerance (one sentence)."""
    scale: Literal["ratio", "factor", "difference"] = "ratio"

    def verdict(self) -> str:
        if not (_finite(self.predicted) and _finite(self.measured)):
            return "not measured"
        measured, predicted = _number(self.measured), _number(self.predicted)
        if self.scale == "difference":
            return _agrees(abs(measured - predicted) <= self.tolerance)
        if predicted == 0:
            return "not measured"
        ratio = measured / predicted
        if self.scale == "factor":
            # a ratio of 0 or of the other sign is off by more than any factor
            return _agrees(ratio > 0 and max(ratio, 1 / ratio) <= self.tolerance)
        return _agrees(abs(ratio - 1) <= self.tolerance)

    def row(self) -> dict:
        """The JSON row stored in summary.json."""
        ratio = (
            self.measured / self.predicted
            if _finite(self.predicted) and _finite(self.measured) and self.predicted != 0
            else math.nan
        )
        return {
            "quantity": self.quantity,
            "predicted": _number(self.predicted),
            "measured": _number(self.measured),
            "ratio": ratio,
            "scale": self.scale,
            "tolerance": float(self.tolerance),
            "rule": self.rule,
            "verdict": self.verdict(),
        }


def no_predictions(summary: dict) -> list[Prediction]:
    """A figure that illustrates (a sandbox, a density) and predicts no number."""
    return []


def prediction_rows(predictions: Sequence[Prediction]) -> list[dict]:
    return [p.row() for p in predictions]


def _agrees(within: bool) -> str:
    return "agrees" if within else "disagrees"


def _number(x) -> float:
    """A summary value as a float: None (JSON null) and non-numbers are NaN."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _finite(x) -> bool:
    return math.isfinite(_number(x))
