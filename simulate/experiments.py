"""Registry of the experiments ``stagewise run`` and ``stagewise sweep`` know.

An experiment is a config class (its options: what it computes) and ``run(cfg, output)``
(``output``: where it is written; ``simulate.runner.RunOutput``)."""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from simulate.runner import RunOptions, RunOutput, changed_options
from simulate.store import RunFileError, RunStore
from simulate.train import TrainResult
from theory.validation import ConfigError

C = TypeVar("C", bound=RunOptions)


@dataclass(frozen=True)
class Experiment(Generic[C]):
    """One experiment of ``stagewise run``: its name, a one-line description (``stagewise
    list``), its config class and ``run(cfg, output)``, which returns the run directory (or the
    in-memory result when ``output.store`` is off)."""

    name: str
    description: str
    config: type[C]
    run: Callable[[C, RunOutput], Path | TrainResult]


@dataclass(frozen=True)
class Entry:
    """An experiment as the registry knows it before importing it: the module that defines it
    (its ``NAME``, its ``run``) and the name of its config class there."""

    name: str
    description: str
    module: str
    config: str

    def load(self) -> Experiment[Any]:
        module = importlib.import_module(self.module)
        return Experiment(self.name, self.description, getattr(module, self.config), module.run)


class Experiments(Mapping[str, Experiment[Any]]):
    """The experiments by name. An experiment's module is imported when the experiment is first
    looked up, so ``stagewise run NAME`` and a sweep's workers import NAME's module alone (all
    seven took 1.3-1.8 s more than one of the small ones); names and descriptions need no
    import. Assigning an entry replaces the experiment (tests stub ``run`` so)."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = {e.name: e for e in entries}
        self._loaded: dict[str, Experiment[Any]] = {}

    def __getitem__(self, name: str) -> Experiment[Any]:
        if name not in self._loaded:
            self._loaded[name] = self.entries[name].load()
        return self._loaded[name]

    def __setitem__(self, name: str, experiment: Experiment[Any]) -> None:
        if name not in self.entries:
            raise KeyError(name)
        self._loaded[name] = experiment

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


EXPERIMENTS = Experiments(
    [
        Entry(
            "heads-gd",
            "reduced head system trained step by step (Euler/GD/Adam) through the run store",
            "simulate.incremental.head_training",
            "HeadTrainConfig",
        ),
        Entry(
            "markov",
            "minimal or full transformer (1-2 layers, c-gram baselines) trained on the high-order "
            "Markov chain, online or on a finite set (paper Figs. 1-7)",
            "simulate.incremental.markov_training",
            "MarkovTrainConfig",
        ),
        Entry(
            "regression-minimal",
            "minimal transformer on the regression variant under gradient flow, with the reduced "
            "state and the reduction's assumptions logged",
            "simulate.incremental.regression_training",
            "RegressionConfig",
        ),
        Entry(
            "focus-dilution",
            "one-layer attention model of the focus-dilution paper on sampled Markov sequences or "
            "real text (GD or Adam), with the population observables logged",
            "simulate.focus_dilution.training",
            "FocusDilutionConfig",
        ),
        Entry(
            "mean-field",
            "noisy mean-field transformer (tokens on the sphere, fixed attention) with a trained "
            "depth-dependent FFN W_t sigma(x), L2-regularised, Adam through the SDE",
            "simulate.mean_field.training",
            "MeanFieldConfig",
        ),
        Entry(
            "clustering-head",
            "2-D clustering-head model (one query, RMS norm, residual FFN) on sparse modular "
            "addition, Adam, weights logged every epoch (clustering-head paper)",
            "simulate.clustering_head.training",
            "ClusteringConfig",
        ),
        Entry(
            "emergence",
            "causal transformer (1-2 layers, attention-bias option) or causal MLP-Mixer on the "
            "linear map mod 2 or cellular automata, per-cell losses and head entropies logged",
            "simulate.emergence.training",
            "EmergenceConfig",
        ),
    ]
)


CONTINUABLE = ("steps", "epochs")
"""The options ``--resume`` accepts, each only larger than the stored run's: train on."""


def resumed_config(experiment: Experiment[C], run_dir: Path, given: C | None = None) -> C:
    """The config a stored run of ``experiment`` was started with (the ``config`` entry of
    ``run_dir/config.json``); the caller resumes it with ``RunOutput(out=run_dir,
    resume=run_dir)``.

    ``given``: the config the command line parsed with the stored run's config as its defaults
    (``figures.cli``), so every field that differs from the stored run was given. None must
    differ, except a larger ``--steps`` (``--epochs``), which continues training
    to the new horizon (with a schedule that spans the run, such as mean-field's cosine decay,
    the remaining steps follow the longer run's schedule). Anything else is refused by name."""
    if not (Path(run_dir) / "config.json").is_file():
        raise ConfigError("resume", str(run_dir), "a run directory (one with a config.json)")
    stored = RunStore(run_dir).config()
    if stored["experiment"] != experiment.name:
        raise ConfigError(
            "resume",
            str(run_dir),
            f"a run directory of experiment {experiment.name!r} "
            f"(this one is {stored['experiment']!r})",
        )
    try:
        cfg = _from_json(experiment.config, stored["config"])
    except (TypeError, ValueError, KeyError) as err:
        raise RunFileError(Path(run_dir) / "config.json", f"config unusable ({err})") from None
    if given is None:
        return cfg
    changed = changed_options(given, cfg, stored["config"])
    longer = {k: changed.pop(k) for k in CONTINUABLE if k in changed}
    if changed:
        raise ConfigError(
            "resume",
            str(run_dir),
            "continues the stored run as it was started; only a larger --steps may be given "
            "(changed: "
            + ", ".join(f"{k} = {old!r} -> {new!r}" for k, (old, new) in changed.items())
            + ")",
        )
    for name, (old, new) in longer.items():
        if old is not None and new <= old:
            raise ConfigError(name, new, f"larger than the stored run's {old} (--resume trains on)")
    return dataclasses.replace(cfg, **{k: new for k, (_, new) in longer.items()})


def _from_json(config: type[Any], values: dict) -> Any:
    """An instance of the dataclass ``config`` from its JSON form (``dataclasses.asdict``)."""
    hints = typing.get_type_hints(config)
    kept = {
        f.name: _value(hints[f.name], values[f.name])
        for f in dataclasses.fields(config)
        if f.init and f.name in values
    }
    return config(**kept)


def _value(hint: Any, value: Any) -> Any:
    """A JSON value back as the type ``hint`` names: tuples from lists, paths from strings,
    nested dataclasses from dicts (``X | None`` as ``X`` unless the value is null)."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _value(options[0], value) if len(options) == 1 else value
    if hint is Path:
        return Path(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and isinstance(value, dict):
        return _from_json(hint, value)
    if isinstance(value, list):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        if origin is tuple and len(args) == len(value):
            return tuple(_value(a, v) for a, v in zip(args, value))
        return tuple(value)
    return value
