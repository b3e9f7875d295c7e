"""Command-line configuration of the incremental-ode figure (incremental.md §5.2, §7)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from figures.core.output import figure_dir
from simulate.incremental.head_options import HeadSystemOptions
from theory.validation import require


@dataclass(frozen=True)
class HeadOdeConfig(HeadSystemOptions):
    """Reduced head ODE: paper Fig. 10 setting by default."""

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
        super().__post_init__()
        require(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(self.t_max is None or self.t_max > 0, "t_max", self.t_max, "a time > 0")

    @property
    def horizon(self) -> float:
        if self.t_max is not None:
            return self.t_max
        return 500.0 if self.metric == "replicator" else 2e4

    def run_dir(self, figure_id: str) -> Path:
        return figure_dir(self.out, figure_id)
