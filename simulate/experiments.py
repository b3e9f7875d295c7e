"""Registry of the experiments ``stagewise run`` and ``stagewise sweep`` know."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from simulate.clustering_head import training as clustering_training
from simulate.emergence import training as emergence_training
from simulate.focus_dilution import training as focus_dilution_training
from simulate.incremental import head_training, markov_training, regression_training
from simulate.mean_field import training as mean_field_training


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    config: type
    run: Callable


EXPERIMENTS = {
    head_training.NAME: Experiment(
        head_training.NAME,
        "reduced head system trained step by step (Euler/GD/Adam) through the run store",
        head_training.HeadTrainConfig,
        head_training.run,
    ),
    markov_training.NAME: Experiment(
        markov_training.NAME,
        "minimal or full transformer (1-2 layers, c-gram baselines) trained on the high-order "
        "Markov chain, online or on a finite set (paper Figs. 1-7)",
        markov_training.MarkovTrainConfig,
        markov_training.run,
    ),
    regression_training.NAME: Experiment(
        regression_training.NAME,
        "minimal transformer on the regression variant under gradient flow, with the reduced "
        "state and the reduction's assumptions logged",
        regression_training.RegressionConfig,
        regression_training.run,
    ),
    focus_dilution_training.NAME: Experiment(
        focus_dilution_training.NAME,
        "one-layer attention model of the focus-dilution paper on sampled Markov sequences or "
        "real text (GD or Adam), with the population observables logged",
        focus_dilution_training.FocusDilutionConfig,
        focus_dilution_training.run,
    ),
    mean_field_training.NAME: Experiment(
        mean_field_training.NAME,
        "noisy mean-field transformer (tokens on the sphere, fixed attention) with a trained "
        "depth-dependent FFN W_t sigma(x), L2-regularised, Adam through the SDE",
        mean_field_training.MeanFieldConfig,
        mean_field_training.run,
    ),
    clustering_training.NAME: Experiment(
        clustering_training.NAME,
        "2-D clustering-head model (one query, RMS norm, residual FFN) on sparse modular "
        "addition, Adam, weights logged every epoch (clustering-head paper)",
        clustering_training.ClusteringConfig,
        clustering_training.run,
    ),
    emergence_training.NAME: Experiment(
        emergence_training.NAME,
        "causal transformer (1-2 layers, attention-bias option) or causal MLP-Mixer on the "
        "linear map mod 2 or cellular automata, per-cell losses and head entropies logged",
        emergence_training.EmergenceConfig,
        emergence_training.run,
    ),
}


def resumed_config(experiment: Experiment, run_dir: Path, quiet: bool):
    """The config a stored run was started with, set to resume from ``run_dir``."""
    stored = json.loads((Path(run_dir) / "config.json").read_text())
    if stored["experiment"] != experiment.name:
        from theory.validation import ConfigError

        raise ConfigError(
            "resume",
            str(run_dir),
            f"a run directory of experiment {experiment.name!r} "
            f"(this one is {stored['experiment']!r})",
        )
    hints = typing.get_type_hints(experiment.config)
    values = {}
    for f in fields(experiment.config):
        if f.name not in stored["config"]:
            continue
        value = stored["config"][f.name]
        if isinstance(value, list):
            value = tuple(value)
        elif value is not None and hints[f.name] in (Path, Path | None):
            value = Path(value)
        values[f.name] = value
    values.update(resume=Path(run_dir), out=Path(run_dir), quiet=quiet)
    return experiment.config(**values)
