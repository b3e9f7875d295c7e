"""Options shared by every command that sets up the reduced head system (incremental.md §5.2;
defaults: the paper's Fig. 10 setting)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from theory.heads import HeadSetting
from theory.validation import require

PAPER_S_NOISE = 1e-6
"""The paper's Fig. 10 attention noise: s_k(0) = 1/T + 1e-6 xi (spec §5.2)."""


@dataclass
class HeadSystemOptions:
    """The reduced head system and its symmetry-breaking noise."""

    heads: int = 3
    """H, number of heads."""
    blocks: tuple[int, ...] = (1, 1, 1)
    """|I(j)|, lag-block sizes, most recent first (lags)."""
    window: int = 40
    """T, number of lags attended over."""
    m: float = 1.7
    """importance ratio m (dimensionless); m_j = m^(h-j)."""
    importances: tuple[float, ...] | None = None
    """explicit importances m_j, one per block (dimensionless; overrides m)."""
    alpha: tuple[float, ...] | None = None
    """within-block weights alpha_i, one per lag in the blocks (default 1)."""
    metric: str = "replicator"
    """replicator (theta' = R^T v, Variant A, paper Fig. 10) or logit (theta' = J(s) R^T v)."""
    eps: float | None = None
    """std of the initial logit noise (dimensionless); default T x 1e-6, the paper's s-noise."""

    def __post_init__(self):
        require(self.eps is None or (math.isfinite(self.eps) and self.eps >= 0), "eps", self.eps,
                "a noise scale >= 0")
        self.setting()  # validates the system's own fields

    def setting(self) -> HeadSetting:
        return HeadSetting(heads=self.heads, blocks=tuple(self.blocks), window=self.window,
                           m=self.m, importances=self.importances, alpha=self.alpha,
                           metric=self.metric)

    @property
    def noise(self) -> float:
        return self.window * PAPER_S_NOISE if self.eps is None else self.eps
