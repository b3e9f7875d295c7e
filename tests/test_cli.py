"""Behaviour of the stagewise command line: every command and choice answers --help, listing,
derivation, bad input as one line."""

import re
from pathlib import Path

import numpy as np
import pytest

from figures.cli import main
from simulate.incremental.head_ode import plateau_levels
from theory.incremental.heads import HeadSetting, HeadSystem
from theory.incremental.later_stages import apriori_stage_times
from theory.incremental.stages import predict_stages

SPEC_README = Path(__file__).resolve().parents[2] / "shared" / "papers" / "README.md"


@pytest.mark.parametrize(
    "argv,field",
    [
        (["figure", "no-such-figure"], "figure"),
        (["compare", "no-such-comparison"], "comparison"),
        (["run"], "experiment"),
        (["figure", "incremental-ode", "--no-such-flag"], "arguments"),
        (["figure", "incremental-ode", "--metric", "euclid"], "metric"),
        (["figure", "incremental-ode", "--m", "two"], "m"),
        (["figure", "incremental-ode", "--eps", "-1"], "eps"),
        (["figure", "incremental-ode", "--blocks", "30", "20"], "blocks"),
        (["figure", "incremental-ode", "--importances", "1", "0", "1"], "importances"),
        (["figure", "incremental-ode", "--m", "-2"], "m"),
        (["figure", "incremental-timing", "--eps", "0"], "eps"),
        (["derive", "nothing"], "system"),
        (["frobnicate"], "command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stagewise: error: {field} = ")


def test_list_names_every_figure_of_the_specs(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    listed = {line.split()[1] for line in out.splitlines() if line.startswith("figure ")}
    if SPEC_README.exists():
        ids = set(re.findall(r"`([a-z]+(?:-[a-z]+)+)`", SPEC_README.read_text()))
        ids = {
            i
            for i in ids
            if i.split("-")[0] in {"incremental", "focus", "clustering", "emergence", "mean"}
        }
        assert ids and ids <= listed
    assert {"incremental-ode", "incremental-timing"} <= listed


def test_derive_prints_the_derived_plateaus(capsys):
    assert main(["derive", "incremental", "--window", "6", "--m", "1.5"]) == 0
    out = capsys.readouterr().out
    setting = HeadSetting(window=6, m=1.5)
    hs = HeadSystem(setting)
    for k, L in enumerate(hs.plateau_levels()):
        assert f"L_{k} = " in out and f"{float(L.xreplace(hs.parameter_values())):.6g}" in out
    assert "degenerate" in out


def test_derive_prints_the_later_stages_and_their_apriori_times(capsys):
    """The stage-3 end state (mixed critical set, symbolic p_2) and the lumped window's times,
    which are the theory's own numbers (compared with a direct call)."""
    assert main(["derive", "incremental", "--window", "6", "--m", "1.5", "--eps", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "continuum of critical points" in out and "p_2" in out
    setting = HeadSetting(window=6, m=1.5)
    line = next(x for x in out.splitlines() if "a-priori stage times" in x)
    shown = [float(part.split("=")[1]) for part in line.split(":", 1)[1].split(",")]
    vertex = [p.time for p in predict_stages(setting, 1e-3)]
    want = apriori_stage_times(setting, 1e-3, plateau_levels(setting), 4 * max(vertex))
    np.testing.assert_allclose(shown, want, rtol=1e-5)


def test_derive_latex(capsys):
    assert main(["derive", "incremental", "--window", "6", "--latex"]) == 0
    assert r"\alpha" in capsys.readouterr().out


def _help_lines() -> list[list[str]]:
    from figures.cli import commands

    cli = commands()
    lines = [["--help"]]
    for group, names in cli.choices.items():
        if group == "stagewise":
            lines += [[name, "--help"] for name in names]
        else:
            lines += [[group, name, "--help"] for name in names]
    return lines


def test_every_command_and_choice_answers_help(capsys):
    """``--help`` on the top level, every command, and every figure, comparison, experiment (run
    and sweep) and derivation: the help text and exit code 0."""
    lines = _help_lines()
    assert len(lines) > 50
    for argv in lines:
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code in (0, None), argv
        out = capsys.readouterr().out
        assert "usage: stagewise" in out and "--help" in out, argv


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("list", "figure", "compare", "run", "sweep", "derive"):
        assert f"• {command} " in out


def test_list_shows_figures_comparisons_experiments_and_derivations(capsys):
    from figures.derive import SYSTEMS
    from figures.registry import all_figures, comparisons
    from simulate.experiments import EXPERIMENTS

    assert main(["list"]) == 0
    rows = {tuple(line.split()[:2]) for line in capsys.readouterr().out.splitlines()}
    assert {("figure", f) for f in all_figures()} <= rows
    assert {("compare", c) for c in comparisons()} == {r for r in rows if r[0] == "compare"}
    assert {("experiment", e) for e in EXPERIMENTS} <= rows
    assert {("derive", s) for s in SYSTEMS} <= rows
    assert {"incremental", "focus-dilution"} <= set(comparisons())


def test_replot_needs_a_stored_run(tmp_path, capsys):
    assert main(["figure", "incremental-ode", "--replot", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("stagewise: error: replot = ")


@pytest.mark.parametrize(
    "argv",
    [
        ["--grid", "lr=0.004", "--grid", "m=1.7,1.9"],
        ["--grid", "lr=0.004", "m=1.7,1.9"],
    ],
)
def test_sweep_grid_items_merge_whether_repeated_or_listed(argv):
    import tyro

    from figures.cli import SweepOptions
    from figures.sweep_cli import grid_items

    assert grid_items(tyro.cli(SweepOptions, args=argv)) == ["lr=0.004", "m=1.7,1.9"]


def test_each_experiment_is_the_one_its_module_defines():
    """The registry's entries name, without importing them, the module and config class of each
    experiment: the module's own ``NAME`` and ``run``."""
    import importlib

    from simulate.experiments import EXPERIMENTS

    assert len(EXPERIMENTS) == 7
    for name, entry in EXPERIMENTS.entries.items():
        module = importlib.import_module(entry.module)
        experiment = EXPERIMENTS[name]
        assert module.NAME == name == experiment.name
        assert experiment.run is module.run
        assert experiment.config.__module__ == entry.module
    assert "nonexistent" not in EXPERIMENTS
    with pytest.raises(KeyError):
        EXPERIMENTS["nonexistent"]


def test_the_list_read_from_source_is_what_the_modules_declare():
    """``stagewise list`` reads the figures from their modules' source (``listed``): the same
    ids, papers, descriptions and kinds, in the same order, as importing them gives."""
    from figures.registry import declared, listed

    fields = ("id", "paper", "description", "kind")
    assert [tuple(getattr(f, k) for k in fields) for f in listed()] == [
        tuple(getattr(f, k) for k in fields) for f in declared()
    ]


@pytest.mark.parametrize(
    ("declaration", "readable"),
    [
        ('FIGURE_ID = "w-a"\nFIGURE = Figure(FIGURE_ID, "w", "d", C, f, kind="comparison")', True),
        ('FIGURE = Figure(id="w-a", paper="w", description="d " "e", config=C)', True),
        ('FIGURE = Figure("w-" + NAME, "w", "d", C)', False),
        ('FIGURE = Figure(FIGURE_ID, "w", "d", C)', False),  # a name bound to no literal
        ('FIGURE = Figure("w-a", "w", DESCRIPTION, C)\nDESCRIPTION = "d"', False),
    ],
)
def test_a_figure_declared_by_anything_but_literals_is_an_error(tmp_path, declaration, readable):
    from figures.registry import Listed, _listed_in

    path = tmp_path / "module.py"
    path.write_text(f"import x\n{declaration}\n")
    if readable:
        kind = "comparison" if "comparison" in declaration else "figure"
        assert _listed_in(path) == Listed("w-a", "w", "d" if kind == "comparison" else "d e", kind)
    else:
        with pytest.raises(TypeError, match="must be literal strings"):
            _listed_in(path)
    path.write_text("FIGURE_ID = 'w-a'\n")
    assert _listed_in(path) is None


def test_every_figure_is_found_by_its_id_and_nothing_else_is():
    from figures.registry import declared, find

    for figure in declared():
        assert find(figure.kind, figure.command_name) is figure
    assert find("comparison", "incremental").id == "compare-incremental"
    for kind, name in [
        ("figure", "compare-incremental"),  # a comparison, not a figure
        ("comparison", "incremental-ode"),
        ("figure", "incremental-ode-config"),  # a module without a FIGURE
        ("figure", "incremental-nonexistent"),
        ("figure", "incremental-"),
        ("figure", "incremental-ode.x"),
        ("figure", "nowing-ode"),
        ("figure", ""),
    ]:
        assert find(kind, name) is None, (kind, name)


@pytest.mark.parametrize(
    "argv",
    [
        ["figure", "incremental-ode", "--quick", "--eps", "1e-6", "--out", "o"],
        ["figure", "focus-dilution-stages", "--replot", "--seeds", "2"],
        ["compare", "focus-dilution", "--quick", "--quiet"],
        ["figure", "clustering-head-sandbox"],
        ["run", "clustering-head", "--seeds", "2", "--out", "o", "--quiet"],
        ["run", "heads-gd", "--lr", "0.5", "--no-store"],
        ["sweep", "emergence", "--grid", "seed=0,1", "--workers", "1"],
        ["derive", "focus-dilution", "--latex"],
    ],
)
def test_a_named_subcommand_parses_as_in_the_command_tree(argv, monkeypatch):
    """``figure ID``, ``compare NAME``, ``run NAME``, ``sweep NAME`` and ``derive NAME`` are
    parsed with that subcommand alone (``figures.cli._named``): the same config as the whole
    command tree gives."""
    import figures.cli

    seen = []
    for action in ("_figure", "_run", "_sweep", "_derive"):
        monkeypatch.setattr(figures.cli, action, lambda *args: seen.append(args))
    assert main(argv) is None
    monkeypatch.setattr(figures.cli, "_named", lambda argv, defaults: None)
    assert main(argv) is None
    alone, tree = seen
    assert alone[0] is tree[0] and alone[1:] == tree[1:]


def test_a_command_line_builds_only_the_command_it_names():
    """``stagewise run`` imports no figure module and ``stagewise derive`` no experiment (each
    costs seconds of imports at every start), ``stagewise --help`` and ``list`` neither, while the
    top level still names every command."""
    import json
    import subprocess
    import sys

    # with a line of options alone, `stagewise list` runs in the same interpreter
    code = (
        "import contextlib, io, json, sys; from figures.cli import commands, main; "
        "cli = commands(None, sys.argv[1])\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    sys.argv[1] or main(['list'])\n"
        "print(json.dumps(sorted(cli.choices))); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('figures.incremental.', "
        "'simulate.clustering_head.training', 'figures.derive_', 'sympy')))))"
    )
    seen = {}
    for word in ("run", "derive", ""):
        out = subprocess.run(
            [sys.executable, "-c", code, word], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        seen[word] = (json.loads(out[0]), json.loads(out[1]))
    assert seen["run"][0] == ["run", "stagewise"]
    assert "simulate.clustering_head.training" in seen["run"][1]
    assert not any(m.startswith(("figures.incremental.", "figures.derive")) for m in seen["run"][1])
    assert seen["derive"][0] == ["derive", "stagewise"]
    assert "simulate.clustering_head.training" not in seen["derive"][1]
    assert "figures.derive_incremental" in seen["derive"][1]
    # a line of options alone (``stagewise --help``) and `stagewise list`: none of the modules
    assert seen[""] == (["stagewise"], [])

    # `figure ID` imports ID's own module and no other wing's, `run NAME` NAME's module and no
    # other experiment's, `derive NAME` NAME's derivation and no other, and heads-gd's module no
    # sympy, scipy or diffrax (its summary imports them only to compute a prediction the derived
    # store lacks)
    code = (
        "import json, sys; import simulate.incremental.head_training; "
        "heavy = ('sympy', 'scipy.integrate', 'diffrax'); "
        "print(json.dumps([m for m in heavy if m in sys.modules])); "
        "from figures.cli import _named; "
        "assert _named(['figure', 'focus-dilution-stages'], {}) is not None; "
        "assert _named(['run', 'clustering-head'], {}) is not None; "
        "assert _named(['derive', 'emergence'], {}) is not None; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('figures.', "
        "'simulate.')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, imported = (json.loads(line) for line in out.stdout.splitlines())
    assert heavy == []
    assert {"figures.focus_dilution.stages", "simulate.clustering_head.training"} <= set(imported)
    assert "figures.focus_dilution.timing" not in imported
    others = ("incremental", "clustering_head", "emergence", "mean_field")
    assert not [m for m in imported if m.startswith("figures.") and m.split(".")[1] in others]
    derivations = [m for m in imported if m.startswith("figures.derive")]
    assert derivations == ["figures.derive", "figures.derive_emergence"]
    trainers = [m for m in imported if m.startswith("simulate.") and m.endswith("training")]
    assert trainers == ["simulate.clustering_head.training", "simulate.incremental.head_training"]
