"""Turning points of a measured curve: its local extrema that stand out by a prominence, in
alternating order (a minimum, then a maximum, ...). The focus-dilution figures count them on the
attention entropy ``H_q(t)``: down-up-down is one cycle of focus, dilution and renewed focus.

The extrema are ``scipy.signal.find_peaks`` peaks of ``y`` (maxima) and of ``-y`` (minima) whose
topographic prominence exceeds ``TURN_PROMINENCE``: the curve falls (rises) by at least that much
on both sides of the extremum before it reaches a more extreme value or the end of the record.
End points are never turning points."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.signal import find_peaks

TURN_PROMINENCE = 0.05
"""nats: an entropy extremum counts as a turn when the curve moves at least this much away from
it on both sides before turning again."""
TURN_RULE = f"extrema of H_q(t) with prominence {TURN_PROMINENCE} nats (scipy.signal.find_peaks)"

Turn = tuple[int, Literal["min", "max"]]


def turning_points(values: ArrayLike, prominence: float = TURN_PROMINENCE) -> list[Turn]:
    """Alternating extrema of a curve, ``[(index, "min" | "max")]`` in order of index: the peaks of
    ``values`` and of ``-values`` with prominence above ``prominence``. Where two extrema of the
    same kind follow each other (no prominent extremum of the other kind between them), the more
    extreme one is kept."""
    y = np.asarray(values, float)
    if y.size < 3:
        return []
    maxima, _ = find_peaks(y, prominence=prominence)
    minima, _ = find_peaks(-y, prominence=prominence)
    tops: list[Turn] = [(int(i), "max") for i in maxima]
    bottoms: list[Turn] = [(int(i), "min") for i in minima]
    candidates = sorted(tops + bottoms)
    turns: list[Turn] = []
    for i, kind in candidates:
        if turns and turns[-1][1] == kind:
            j = turns[-1][0]
            more_extreme = y[i] > y[j] if kind == "max" else y[i] < y[j]
            if more_extreme:
                turns[-1] = (i, kind)
            continue
        turns.append((i, kind))
    return turns
