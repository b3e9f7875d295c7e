"""Command-line configuration of the reduced head system (incremental.md §5.2 settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from theory.heads import HeadSetting
from theory.validation import require

PAPER_S_NOISE = 1e-6
"""The paper's Fig. 10 attention noise: s_k(0) = 1/T + 1e-6 xi (spec §5.2)."""


@dataclass
class HeadOdeConfig:
    """Reduced head ODE: paper Fig. 10 setting by default."""

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
    metric: Literal["replicator", "logit"] = "replicator"
    """replicator: theta' = R^T v (Variant A, paper Fig. 10); logit: theta' = J(s) R^T v."""
    eps: float | None = None
    """std of the initial logit noise (dimensionless); default T x 1e-6, the paper's s-noise."""
    seeds: int = 4
    """number of noise seeds, solved as one vmapped program."""
    seed: int = 0
    """first noise seed."""
    t_max: float | None = None
    """horizon in ODE time units; default 500 (replicator, paper) or 2e4 (logit)."""
    quick: bool = False
    """CPU-sized run: one seed, coarser save grid."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/<figure-id>/ unless OUT ends in that id)."""
    quiet: bool = False
    """no progress bar."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        require(self.eps is None or self.eps >= 0, "eps", self.eps, "a noise scale >= 0")
        require(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(self.t_max is None or self.t_max > 0, "t_max", self.t_max, "a time > 0")
        self.setting()  # validates the system's own fields

    def setting(self) -> HeadSetting:
        return HeadSetting(heads=self.heads, blocks=tuple(self.blocks), window=self.window,
                           m=self.m, importances=self.importances, alpha=self.alpha,
                           metric=self.metric)

    @property
    def noise(self) -> float:
        return self.window * PAPER_S_NOISE if self.eps is None else self.eps

    @property
    def horizon(self) -> float:
        if self.t_max is not None:
            return self.t_max
        return 500.0 if self.metric == "replicator" else 2e4

    def run_dir(self, figure_id: str) -> Path:
        return self.out if self.out.name == figure_id else self.out / figure_id
