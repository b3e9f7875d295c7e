"""Command-line configuration of the incremental-ode figure (incremental.md §5.2, §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from figures.core.options import FigureOptions
from simulate.incremental.head_options import HeadSystemOptions
from simulate.runner import Seeds
from theory.validation import require


@dataclass(frozen=True)
class HeadOdeConfig(FigureOptions, HeadSystemOptions, Seeds):
    """Reduced head ODE: paper Fig. 10 setting by default (quick: one seed, coarser save grid)."""

    t_max: float | None = None
    """horizon in ODE time units; default 500 (replicator, paper) or 2e4 (logit)."""

    def __post_init__(self):
        HeadSystemOptions.__post_init__(self)
        Seeds.__post_init__(self)
        require(
            self.t_max is None or (math.isfinite(self.t_max) and self.t_max > 0),
            "t_max",
            self.t_max,
            "a finite time > 0",
        )

    @property
    def noise_seeds(self) -> int:
        """Noisy starts solved (--quick: one)."""
        return self.quick_or("seeds", 1)

    @property
    def horizon(self) -> float:
        if self.t_max is not None:
            return self.t_max
        return 500.0 if self.metric == "replicator" else 2e4
