"""Options shared by every command that sets up the reduced head system (incremental.md §5.2;
defaults: the paper's Fig. 10 setting): the system of ``theory.incremental.heads.HeadSetting`` plus
its
symmetry-breaking noise."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from theory.incremental.setting import HeadSetting
from theory.validation import require

PAPER_S_NOISE = 1e-6
"""The paper's Fig. 10 attention noise: s_k(0) = 1/T + 1e-6 xi (spec §5.2)."""


@dataclass(frozen=True)
class HeadSystemOptions(HeadSetting):
    eps: float | None = None
    """std of the initial logit noise (dimensionless); default T x 1e-6, the paper's s-noise."""

    def __post_init__(self):
        super().__post_init__()
        # the stage law runs on ln(1/eps): eps >= 1 would give a plateau of negative length
        require(
            self.eps is None or (math.isfinite(self.eps) and 0 <= self.eps < 1),
            "eps",
            self.eps,
            "a noise scale in [0, 1) (0: exactly equal heads)",
        )

    def setting(self) -> HeadSetting:
        return HeadSetting(**{f.name: getattr(self, f.name) for f in fields(HeadSetting)})

    @property
    def noise(self) -> float:
        return self.window * PAPER_S_NOISE if self.eps is None else self.eps
