"""Drawing helpers every paper wing shares: measured stages shaded, predicted times marked, a
fitted slope drawn through its points."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from numpy.typing import ArrayLike

STAGE_COLORS = ("#fde0c5", "#d5ead5", "#d4e1f5", "#eddcf2", "#f5e6b8", "#dcdcdc")
"""background colour of stage k (cycled)."""


def shade_stages(
    ax: Axes,
    onsets: ArrayLike,
    end: float,
    names: Sequence[str] | None = None,
    label: bool = True,
    text: bool = False,
) -> None:
    """Shade stage k from its onset to the next finite onset (the last one to ``end``).

    ``onsets``: measured stage onsets (nan = stage never reached, skipped); ``names``: stage
    names (default 1, 2, ...); ``label``: legend entries "stage NAME (measured)"; ``text``: the
    stage name written at the top of its band instead (not on a sliver)."""
    onsets = [float(t) for t in np.asarray(onsets, dtype=float)]
    names = list(names) if names is not None else [str(k + 1) for k in range(len(onsets))]
    for k, start in enumerate(onsets):
        stop = next((t for t in onsets[k + 1 :] if math.isfinite(t)), end)
        if not (math.isfinite(start) and stop > start):
            continue
        ax.axvspan(
            start,
            stop,
            color=STAGE_COLORS[k % len(STAGE_COLORS)],
            alpha=0.6,
            lw=0,
            zorder=0,
            label=f"stage {names[k]} (measured)" if label else None,
        )
        if text and stop - start > 0.08 * end:
            ax.text(
                (start + stop) / 2,
                0.98,
                f"stage {names[k]}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=7,
            )


def mark_times(
    ax: Axes,
    times: ArrayLike,
    names: Sequence[str] | None = None,
    legend: str | None = "predicted",
) -> None:
    """Dashed vertical lines at predicted times (nan: none), each annotated with its name."""
    for k, t in enumerate(np.asarray(times, dtype=float)):
        if not math.isfinite(t):
            continue
        ax.axvline(t, color="k", ls="--", lw=0.8, label=legend if k == 0 else None)
        if names is not None:
            ax.annotate(
                names[k],
                (t, 1.0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def draw_slope(
    ax: Axes, x: ArrayLike, slope: float, anchor: tuple[float, float], label: str, log: bool = False
) -> None:
    """A reference line of the given slope through ``anchor`` over the range of ``x`` (on log-log
    axes when ``log``: ``y = y0 (x / x0)^slope``)."""
    x = np.asarray(x, dtype=float)
    x = np.array([np.nanmin(x), np.nanmax(x)])
    x0, y0 = anchor
    y = y0 * (x / x0) ** slope if log else y0 + slope * (x - x0)
    ax.plot(x, y, "k:", lw=1.0, label=label)
