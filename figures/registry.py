"""Figure registry: every figure id of ../shared/papers/README.md, with its status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    id: str
    paper: str
    description: str
    config: type | None = None
    run: Callable | None = None

    @property
    def implemented(self) -> bool:
        return self.run is not None


def _implemented() -> dict[str, Figure]:
    from figures import incremental_head_dynamics, incremental_ode, incremental_timing
    from figures.head_config import HeadOdeConfig

    return {
        "incremental-ode": Figure("incremental-ode", "incremental",
                                  "reduced head ODE: attention, values, loss with predicted stages "
                                  "(paper Fig. 10)", HeadOdeConfig, incremental_ode.run),
        "incremental-timing": Figure("incremental-timing", "incremental",
                                     "predicted vs measured stage times across eps and m, both "
                                     "metrics (ODE half)", incremental_timing.TimingConfig,
                                     incremental_timing.run),
        "incremental-head-dynamics": Figure(
            "incremental-head-dynamics", "incremental",
            "minimal transformer's head attention and value alignment per block, with the "
            "reduced ODE (rebuttal Fig. B)", incremental_head_dynamics.HeadDynamicsConfig,
            incremental_head_dynamics.run),
    }


PLANNED = {
    "incremental": ["incremental-minimal", "incremental-full", "incremental-init-scale",
                    "incremental-importance", "incremental-dataset-size"],
    "focus-dilution": ["focus-dilution-stages", "focus-dilution-same-pi",
                       "focus-dilution-embedding-pca", "focus-dilution-entropy-cycles",
                       "focus-dilution-timing", "focus-dilution-symmetry-breaking",
                       "focus-dilution-text"],
    "clustering-head": ["clustering-head-sandbox", "clustering-head-attention",
                        "clustering-head-loss-spike", "clustering-head-finetune",
                        "clustering-head-ablations", "clustering-head-fixed-point"],
    "emergence": ["emergence-linear-map", "emergence-sparsity", "emergence-ca-plateau",
                  "emergence-heads-vs-dim", "emergence-mixer", "emergence-times"],
    "mean-field": ["mean-field-density", "mean-field-control-norm", "mean-field-energy",
                   "mean-field-escape", "mean-field-threshold"],
}


def all_figures() -> dict[str, Figure]:
    figures = _implemented()
    for paper, ids in PLANNED.items():
        for fid in ids:
            figures.setdefault(fid, Figure(fid, paper, "not implemented yet"))
    return figures
