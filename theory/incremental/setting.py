"""The numbers of one reduced head system of "Incremental learning of sparse attention patterns
in transformers" (arXiv:2602.19143; spec ``incremental.md`` §5.1-5.2): heads H, lag blocks I(j),
window T, importances m_j, weights alpha_i and the metric. Numpy only, apart from
``theory.incremental.heads`` and its sympy, so that a run of the head system (``stagewise run
heads-gd``) starts without importing sympy when its derived numbers are stored
(``simulate.derived_store``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.validation import require

METRICS = ("replicator", "logit")
METRIC_POWER = {"replicator": 1, "logit": 2}
TARGET_RANGE = (1e-150, 1e150)
"""Bounds on every target entry m_j alpha_i: the loss and the stage formulas square them, and
float64 keeps a square (and sums of a few) finite and nonzero only in this range."""


def ratio_range(h: int) -> tuple[float, float]:
    """The importance ratios m whose importances m^(h-1), ..., m, 1 lie in ``TARGET_RANGE``."""
    k = max(h - 1, 1)
    return TARGET_RANGE[0] ** (1 / k), TARGET_RANGE[1] ** (1 / k)


def check_ratio(field: str, m: float, h: int) -> None:
    """``m`` is a finite importance ratio > 0 in ``ratio_range(h)`` (h blocks)."""
    lo, hi = ratio_range(h)
    require(
        math.isfinite(m) and lo <= m <= hi,
        field,
        m,
        f"an importance ratio in [{lo:.3g}, {hi:.3g}] for h = {h} blocks "
        f"(m^(h-1) squared must stay finite in float64)",
    )


@dataclass(frozen=True)
class HeadSetting:
    """Numbers of one reduced head system (defaults: paper Fig. 10, spec §5.2)."""

    heads: int = 3
    """H, number of attention heads."""
    blocks: tuple[int, ...] = (1, 1, 1)
    """|I(j)|, sizes of the lag blocks, most recent first; they tile lags 1..sum(blocks)."""
    window: int = 40
    """T, number of lags each head attends over."""
    m: float = 1.7
    """importance ratio; m_j = m^(h-j) unless ``importances`` is given."""
    importances: tuple[float, ...] | None = None
    """m_j per block (overrides ``m``)."""
    alpha: tuple[float, ...] | None = None
    """alpha_i within-block weights, one per lag in the blocks (default 1)."""
    metric: str = "replicator"
    """'replicator' (theta' = R^T v, Variant A) or 'logit' (theta' = J(s) R^T v, Variant B)."""

    def __post_init__(self) -> None:
        # tuples whatever sequence was given: a setting is hashable (``head_system`` caches by it)
        for name in ("blocks", "importances", "alpha"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        require(
            isinstance(self.heads, int) and self.heads >= 1, "heads", self.heads, "an integer >= 1"
        )
        require(
            len(self.blocks) >= 1 and all(isinstance(b, int) and b >= 1 for b in self.blocks),
            "blocks",
            self.blocks,
            "one or more integer block sizes >= 1",
        )
        require(
            isinstance(self.window, int) and self.window >= 2,
            "window",
            self.window,
            "an integer >= 2",
        )
        require(
            sum(self.blocks) <= self.window,
            "blocks",
            self.blocks,
            f"blocks must fit in the window: sum(blocks) <= window = {self.window}",
        )
        require(np.isfinite(self.m) and self.m > 0, "m", self.m, "a finite importance ratio > 0")
        if self.importances is not None:
            require(
                len(self.importances) == len(self.blocks)
                and all(np.isfinite(x) and x > 0 for x in self.importances),
                "importances",
                self.importances,
                f"{len(self.blocks)} finite values > 0, one per block",
            )
        if self.alpha is not None:
            require(
                len(self.alpha) == sum(self.blocks)
                and all(np.isfinite(a) and a > 0 for a in self.alpha),
                "alpha",
                self.alpha,
                f"{sum(self.blocks)} finite weights > 0, one per lag in the blocks",
            )
        require(self.metric in METRICS, "metric", self.metric, f"one of {METRICS}")
        self._check_target_range()

    def _check_target_range(self) -> None:
        """Every m_j alpha_i in ``TARGET_RANGE``, checked in logs (m^(h-1) itself may overflow)."""
        if self.importances is None:
            check_ratio("m", self.m, self.h)
            log_m = [(self.h - 1 - j) * math.log(self.m) for j in range(self.h)]
        else:
            log_m = [math.log(x) for x in self.importances]
        lo, hi = (math.log(x) for x in TARGET_RANGE)
        log_a = [math.log(a) for a in self.alpha_values]
        inside = all(lo <= log_m[j] + log_a[i] <= hi for j in range(self.h) for i in self.lags(j))
        field, value = (
            ("alpha", self.alpha) if self.alpha is not None else ("importances", self.importances)
        )
        require(
            inside,
            field,
            value,
            f"every target entry m_j alpha_i in [{TARGET_RANGE[0]:g}, {TARGET_RANGE[1]:g}]",
        )

    @property
    def h(self) -> int:
        return len(self.blocks)

    @property
    def importance_values(self) -> tuple[float, ...]:
        if self.importances is not None:
            return tuple(float(x) for x in self.importances)
        return tuple(float(self.m) ** (self.h - 1 - j) for j in range(self.h))

    @property
    def alpha_values(self) -> tuple[float, ...]:
        return tuple(float(a) for a in self.alpha) if self.alpha else (1.0,) * sum(self.blocks)

    def lags(self, j: int) -> range:
        """0-based lag indices of block j (0-based)."""
        start = sum(self.blocks[:j])
        return range(start, start + self.blocks[j])

    def block_indicator(self) -> np.ndarray:
        """(T x h): 1 where lag i lies in block j; attention over the lags times it is each
        block's mass."""
        indicator = np.zeros((self.window, self.h))
        for j in range(self.h):
            indicator[list(self.lags(j)), j] = 1.0
        return indicator

    def block_of_lag(self, i: int) -> int | None:
        for j in range(self.h):
            if i in self.lags(j):
                return j
        return None

    def target(self) -> np.ndarray:
        """G (h x T) in numbers."""
        G = np.zeros((self.h, self.window))
        a, m = self.alpha_values, self.importance_values
        for j in range(self.h):
            for i in self.lags(j):
                G[j, i] = m[j] * a[i]
        return G
