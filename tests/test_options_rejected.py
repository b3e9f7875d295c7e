"""Options that used to be accepted and then ignored, or crash or mislead later (issue 14): each is
one ``stagewise: error:`` line with exit 2, raised while the config is built (before any
compile)."""

import dataclasses
import math
import types
import typing

import pytest

from figures.cli import main
from figures.registry import declared
from simulate.experiments import EXPERIMENTS
from simulate.focus_dilution.training import FocusDilutionConfig
from simulate.incremental.head_training import HeadTrainConfig
from simulate.incremental.markov_training import MarkovTrainConfig
from simulate.runner import Seeds
from theory.incremental.heads import HeadSetting
from theory.validation import ConfigError

PROSE = "The quick brown fox jumps over the lazy dog, and then it naps.\n\n" * 200


def _one_line_error(argv, capsys, field: str) -> str:
    """Run the command line; it must exit 2 with one error line naming ``field``."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stagewise: error: {field} = "), err
    return err[0]


# --- options that do not apply to the chosen optimizer ----------------------------------------
def test_weight_decay_with_gd_is_rejected(capsys):
    _one_line_error(
        ["run", "markov", "--optimizer", "gd", "--weight-decay", "0.5"], capsys, "weight_decay"
    )


@pytest.mark.parametrize(
    "optimizer,option,value",
    [
        ("gd", "weight_decay", 0.5),
        ("sgd", "weight_decay", 0.5),
        ("gd", "momentum", 0.5),
        ("adamw", "momentum", 0.5),
        ("gd", "clip", 2.0),
    ],
)
def test_markov_option_of_another_optimizer_is_rejected(optimizer, option, value):
    with pytest.raises(ConfigError) as err:
        MarkovTrainConfig(optimizer=optimizer, **{option: value})
    assert err.value.field == option


@pytest.mark.parametrize(
    "optimizer,options",
    [("adamw", {"weight_decay": 0.1, "clip": 2.0}), ("sgd", {"momentum": 0.5, "clip": 2.0})],
)
def test_markov_option_of_the_chosen_optimizer_is_accepted(optimizer, options):
    cfg = MarkovTrainConfig(optimizer=optimizer, **options)
    assert all(getattr(cfg, k) == v for k, v in options.items())


# --- the text source ---------------------------------------------------------------------------
def test_text_file_implies_the_text_source(tmp_path):
    path = tmp_path / "prose.txt"
    path.write_text(PROSE)
    cfg = FocusDilutionConfig(text=path)
    assert cfg.source == "text" and cfg.text == path


def test_markov_option_with_a_text_file_is_rejected(tmp_path, capsys):
    path = tmp_path / "prose.txt"
    path.write_text(PROSE)
    _one_line_error(["run", "focus-dilution", "--text", str(path), "--lam", "0.3"], capsys, "lam")


def test_text_option_with_the_markov_source_is_rejected(capsys):
    _one_line_error(["run", "focus-dilution", "--vocab", "100"], capsys, "vocab")


@pytest.mark.parametrize(
    "name,content,reason",
    [
        ("random.bin", bytes(range(256)) * 80, "not UTF-8"),
        ("empty.txt", b"", "empty"),
        ("controls.txt", ("word\x01" * 4000).encode(), "control characters"),
        ("few-letters.txt", b"aaa bbb " * 1000, "distinct letters"),
        ("missing.txt", None, "readable"),
        ("a-directory", "dir", "readable"),
    ],
)
def test_text_that_is_not_utf8_prose_is_rejected_naming_the_file(
    tmp_path, capsys, name, content, reason
):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    line = _one_line_error(["run", "focus-dilution", "--text", str(path)], capsys, "text")
    assert name in line and reason in line


# --- eps, horizons, seeds, importances -----------------------------------------------------------
def test_heads_eps_beyond_one_is_rejected(capsys):
    _one_line_error(["run", "heads-gd", "--eps", "1e300"], capsys, "eps")


@pytest.mark.parametrize("eps", [1.0, 2.0, -1e-3, math.nan, math.inf])
def test_heads_eps_outside_zero_one_is_rejected(eps):
    with pytest.raises(ConfigError, match="eps"):
        HeadTrainConfig(eps=eps)


def test_heads_eps_zero_equal_heads_is_accepted():
    assert HeadTrainConfig(eps=0.0).noise == 0.0


def test_timing_figure_eps_of_one_is_rejected(capsys):
    _one_line_error(["figure", "incremental-timing", "--eps", "1", "1e-3"], capsys, "eps")


@pytest.mark.parametrize("t_max", ["inf", "nan", "-1"])
def test_ode_figure_non_finite_or_negative_horizon_is_rejected(t_max, capsys):
    _one_line_error(["figure", "incremental-ode", "--t-max", t_max], capsys, "t_max")


HORIZONS = [
    (f.id, name)
    for f in declared()
    for name in ("t_max", "horizon", "stall_horizon")
    if name in {g.name for g in dataclasses.fields(f.config)}
]


@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
@pytest.mark.parametrize("figure,field", HORIZONS)
def test_figure_horizon_not_finite_and_positive_is_rejected(figure, field, value):
    config = next(f.config for f in declared() if f.id == figure)
    with pytest.raises(ConfigError) as err:
        config(**{field: value})
    assert err.value.field == field


def test_every_figure_horizon_is_covered():
    assert {"incremental-ode", "focus-dilution-stages", "compare-focus-dilution"} <= {
        f for f, _ in HORIZONS
    }


def test_seed_beyond_uint32_is_rejected(capsys):
    _one_line_error(["run", "heads-gd", "--seed", "5000000000"], capsys, "seed")


@pytest.mark.parametrize(
    "seed,seeds",
    [(-1, 1), (2**32, 1), (2**32 - 3, 4)],
)
def test_seed_ids_outside_uint32_are_rejected(seed, seeds):
    with pytest.raises(ConfigError, match="seed"):
        Seeds(seeds=seeds, seed=seed)


def test_last_uint32_seed_id_is_accepted():
    assert Seeds(seeds=4, seed=2**32 - 4).seed_ids[-1] == 2**32 - 1


@pytest.mark.parametrize("argv", [["run", "heads-gd"], ["figure", "incremental-ode"]])
def test_overflowing_importance_ratio_is_rejected_with_its_range(argv, capsys):
    line = _one_line_error([*argv, "--m", "1e308"], capsys, "m")
    assert "1e+75" in line


@pytest.mark.parametrize(
    "options,field",
    [
        ({"m": math.nan}, "m"),
        ({"m": math.inf}, "m"),
        ({"m": 1e76}, "m"),
        ({"m": 1e-76}, "m"),
        ({"importances": (1e200, 1.0, 1.0)}, "importances"),
        ({"alpha": (1e160, 1.0, 1.0)}, "alpha"),
    ],
)
def test_importances_outside_the_float64_range_are_rejected(options, field):
    with pytest.raises(ConfigError) as err:
        HeadSetting(**options)
    assert err.value.field == field


def test_markov_overflowing_importance_ratio_is_rejected(capsys):
    _one_line_error(["run", "markov", "--m", "1e308"], capsys, "m")


@pytest.mark.parametrize(
    "argv,field",
    [
        (["--beta", "1e308"], "beta"),
        (["--a", "1e308"], "a"),
        (["--depth", "1e308"], "depth"),
    ],
)
def test_mean_field_overflowing_kernel_or_depth_is_rejected(argv, field, capsys):
    _one_line_error(["run", "mean-field", *argv], capsys, field)


def test_markov_infinite_lag_weight_is_rejected():
    with pytest.raises(ConfigError) as err:
        MarkovTrainConfig(alpha=(math.inf, 1.0))
    assert err.value.field == "alpha"


# --- every float option of every experiment ------------------------------------------------------
def _float_kind(hint) -> str | None:
    """'float' for float (or float | None), 'tuple' for tuple[float, ...], else None."""
    if hint is float:
        return "float"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _float_kind(options[0]) if len(options) == 1 else None
    if origin is tuple and args and args[0] is float:
        return "tuple"
    return None


def _float_fields():
    for name, experiment in EXPERIMENTS.items():
        hints = typing.get_type_hints(experiment.config)
        for f in dataclasses.fields(experiment.config):
            kind = _float_kind(hints[f.name])
            if kind == "float" or (kind == "tuple" and f.default):
                yield name, f.name, kind


FLOAT_FIELDS = list(_float_fields())


def test_the_float_sweep_covers_every_experiment():
    assert {name for name, _, _ in FLOAT_FIELDS} == set(EXPERIMENTS)


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.parametrize("experiment,field,kind", FLOAT_FIELDS)
def test_non_finite_float_option_is_rejected(experiment, field, kind, value):
    config = EXPERIMENTS[experiment].config
    if kind == "tuple":
        default = next(f.default for f in dataclasses.fields(config) if f.name == field)
        value = (value, *default[1:])
    with pytest.raises(ConfigError) as err:
        config(**{field: value})
    assert err.value.field == field


def test_escape_extra_beta_overflowing_the_kernel_is_rejected_before_compute(capsys):
    """Each extra beta of mean-field-escape meets the config's a in e^(beta a): checked when the
    config is built, not when the kernel is first evaluated during compute."""
    argv = ["figure", "mean-field-escape", "--extra-betas", "600", "--a", "2.0"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagewise: error: a = 2.0: at most 700")
