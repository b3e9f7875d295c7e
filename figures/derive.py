"""``stagewise derive SYSTEM``: the registry of the papers' derivations.

Each paper's derivation, text or LaTeX, lives in ``figures.derive_<paper>`` (incremental,
focus_dilution, clustering_head, emergence, mean_field) and is imported when first used, so that
``stagewise list`` and ``stagewise --help`` import no sympy."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Derivation:
    """One ``stagewise derive`` system: its name and one-line description (``stagewise list``),
    and the module ``figures.derive_<module>`` that holds its options ``config`` and the text it
    prints, ``derive(cfg)``."""

    name: str
    description: str
    module: str
    config_name: str

    @property
    def config(self) -> type:
        return getattr(self._module(), self.config_name)

    @property
    def derive(self) -> Callable[[Any], str]:
        return self._module().derive

    def _module(self) -> Any:
        return importlib.import_module(f"figures.derive_{self.module}")


SYSTEMS = {
    s.name: s
    for s in (
        Derivation(
            "incremental",
            "reduced head system: field, fixed points, spectra, plateau levels, predicted stages",
            "incremental",
            "DeriveConfig",
        ),
        Derivation(
            "focus-dilution",
            "population model, stage I-IV linearisations, plateaus, rates, onsets vs ln(1/eps)",
            "focus_dilution",
            "FocusDilutionDeriveConfig",
        ),
        Derivation(
            "clustering-head",
            "symmetric subspace of sparse modular addition: invariance, clusters, normalisation",
            "clustering_head",
            "ClusteringHeadDeriveConfig",
        ),
        Derivation(
            "emergence",
            "linear-map floor, step heights, search space C(S, s), lottery model, bias mass",
            "emergence",
            "EmergenceDeriveConfig",
        ),
        Derivation(
            "mean-field",
            "clustering threshold tau_c, mode rates, energy F_tau, Landau expansion, tricritical "
            "beta",
            "mean_field",
            "MeanFieldDeriveConfig",
        ),
    )
}
