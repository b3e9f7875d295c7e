"""The ``stagewise`` command line (ARCHITECTURE §3): list, derive, figure, compare, run, sweep,
reproduce, report.

Every command and every figure, comparison, experiment and derivation is a tyro subcommand, built
from the registries (``figures.registry``, ``simulate.experiments``, ``figures.derive``), so each
answers ``--help``. A command line that names its figure, comparison or experiment right after the
command (``figure ID ...``, ``run NAME ...``) is parsed by that subcommand alone, and only its
module is imported (``_named``). Bad input ends in one line on stderr and exit code 2: parse
errors through tyro's parse-error hook, configuration errors (``theory.validation.ConfigError``)
raised by the configs' validation before anything is compiled.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import tyro
from tyro import _errors as tyro_errors  # tyro's parse-error hook (pinned tyro range)

from figures.core.options import Flat
from theory.validation import ConfigError, require

GROUP_FIELDS = {"stagewise": "command", "figure": "figure", "compare": "comparison"}
GROUP_FIELDS |= {"run": "experiment", "sweep": "experiment", "derive": "system"}
"""the field an unknown subcommand names in the one-line error, by the command it follows."""


def _group_of(argv: list[str], token: str | None, prog: str) -> str:
    """The command whose subcommand ``token`` was meant to be (tyro reports an unknown or missing
    subcommand at the level above): the word before it on the command line."""
    words = [a for a in argv if not a.startswith("-")]
    if token is None:
        return words[-1] if words and words[-1] in GROUP_FIELDS else prog.split()[-1]
    i = words.index(token) if token in words else -1
    return words[i - 1] if i >= 1 and words[i - 1] in GROUP_FIELDS else prog.split()[-1]


def _one_line(
    event: tyro_errors.ParseErrorEvent, choices: dict[str, list[str]], argv: list[str]
) -> None:
    """Parse-error hook: tyro's event as one ``field = value: what is wrong`` line instead of
    tyro's multi-line box. ``choices``: the subcommand names of each command."""
    group = event.prog.split()[-1]
    if isinstance(event, tyro_errors.UnrecognizedArgs):
        first = event.tokens[0] if event.tokens else ""
        if first and not first.startswith("-"):
            group = _group_of(argv, first, event.prog)
    elif isinstance(event, tyro_errors.MissingSubcommand):
        group = _group_of(argv, None, event.prog)
    prog = event.prog if group in event.prog.split() else f"stagewise {group}"
    hint = f"see '{prog.replace('stagewise stagewise', 'stagewise')} --help'"
    if isinstance(event, tyro_errors.UnrecognizedArgs):
        first = event.tokens[0] if event.tokens else ""
        if first and not first.startswith("-") and group in GROUP_FIELDS:
            field, value = GROUP_FIELDS[group], first
            what = f"one of {', '.join(choices.get(group, []))}"
        else:
            field, value, what = "arguments", " ".join(event.tokens), "unrecognized"
    elif isinstance(event, tyro_errors.InvalidChoice):
        field = event.argument.lowered.name_or_flags[0].lstrip("-")
        value, what = event.value, f"one of {', '.join(event.choices)}"
    elif isinstance(event, tyro_errors.InstantiationFailure):
        field = (
            event.argument.lowered.name_or_flags[0].lstrip("-") if event.argument else "arguments"
        )
        quoted = re.findall(r"'([^']*)'", event.message)
        first = event.message.strip().splitlines()[0] if event.message.strip() else ""
        # tyro lists the error of every type of a union on lines of their own: name the types
        union = re.match(r"no type matching (.*) could be instantiated", first)
        value = quoted[-1] if quoted else None
        what = f"not a value of type {union.group(1)}" if union else first or "not accepted"
    elif isinstance(event, tyro_errors.MissingSubcommand):
        field, value = GROUP_FIELDS.get(group, group), None
        what = f"required: one of {', '.join(choices.get(group, []))}"
    elif isinstance(event, tyro_errors.MissingArgs):
        names = [a.arg.lowered.name_or_flags[0] for a in event.missing_arguments]
        field, value, what = "arguments", None, f"missing {', '.join(names)}"
    elif isinstance(event, tyro_errors.BadValue):
        field = event.argument.lowered.name_or_flags[0].lstrip("-")
        value, what = event.offending_value, "not accepted"
    else:
        field, value, what = "arguments", None, type(event).__name__
    raise ConfigError(field, value, f"{what} ({hint})")


@dataclass(frozen=True)
class ListCommand:
    """Figures, comparisons, experiments and derivations, one line each."""


@dataclass(frozen=True)
class SweepOptions:
    """A parameter grid over an experiment (seeds vmapped inside each run)."""

    grid: Annotated[tuple[tuple[str, ...], ...], tyro.conf.UseAppendAction] = ()
    """KEY=V1,V2,...: a config field and its values; several items after one --grid, or --grid
    repeated (all items merge; the cartesian product of all items is run)."""
    executor: Literal["local", "ray"] = "local"
    """local: parallel worker processes; ray: Ray tasks (needs stagewise[ray])."""
    address: str | None = None
    """Ray cluster address (e.g. 127.0.0.1:6379); default: start a private local Ray instance."""
    workers: int = 2
    """parallel worker processes (local) or CPUs of a private Ray instance."""
    out: Path | None = None
    """sweep directory (default: runs/sweep-EXPERIMENT/YYYYmmdd-HHMMSS-HASH, printed)."""
    variable: str | None = None
    """variable drawn in the aggregate figure (dims seed, step); None: the experiment's loss
    (``loss``, else its validation or test loss)."""
    overwrite: bool = False
    """run into OUT even if it holds a previous sweep (its points are replaced); without it a
    non-empty OUT is refused before any point runs."""


@dataclass(frozen=True)
class ReproduceOptions:
    """Every figure and comparison (or the chosen ones) into OUT/<id>/, then the report."""

    quick: bool = False
    """the CPU-sized setting of every figure (each figure's --quick)."""
    paper: tuple[str, ...] = ()
    """only the figures of these papers (wing names, as in 'stagewise list')."""
    only: tuple[str, ...] = ()
    """only these figure ids (a comparison's id is compare-NAME)."""
    out: Path | None = None
    """reproduction directory (default: runs/reproduce-quick with --quick, else runs/reproduce);
    running the same command again reuses the complete figures and resumes the others."""
    executor: Literal["local", "ray"] = "local"
    """local: one worker process per figure; ray: one Ray task per figure (needs stagewise[ray])."""
    address: str | None = None
    """Ray cluster address (e.g. 127.0.0.1:6379); default: start a private local Ray instance."""
    workers: int | None = None
    """figures run at once (default: the core count); with ray and no address, the CPUs of the
    private instance."""
    force: bool = False
    """recompute figures whose directory holds a complete run (or another figure's run)."""
    quiet: bool = False
    """no progress display."""


@dataclass(frozen=True)
class ReportCommand:
    """Rebuild DIR/index.html and DIR/REPORT.md from the stored runs; nothing is recomputed."""

    dir: Annotated[Path, tyro.conf.Positional]
    """a reproduction directory (stagewise reproduce --out), or any --out of stagewise figure."""


def _choice(name: str, description: str, fields: list[tuple[str, Any, Any]]) -> Any:
    """A subcommand ``name``: a dataclass of the given (flattened) fields."""
    cls = make_dataclass(
        name.replace("-", "_"),
        [(f, Annotated[t, Flat], field(default=d)) for f, t, d in fields],
        frozen=True,
    )
    cls.__doc__ = description
    cls.command_name = name  # type: ignore[attr-defined]
    return Annotated[cls, tyro.conf.subcommand(name, description=description)]


def _group(name: str, description: str, choices: Sequence[Any]) -> Any:
    """A command ``name`` whose target is one of ``choices`` (tyro makes subcommands of a union
    of two or more; the --help walk in tests/test_cli.py fails if a command has only one)."""
    target = Union[tuple(choices)]  # noqa: UP007
    cls = make_dataclass(name, [("target", Annotated[target, Flat])], frozen=True)
    cls.__doc__ = description
    return Annotated[cls, tyro.conf.subcommand(name, description=description)]


@dataclass(frozen=True)
class Commands:
    """Everything the command line can do, and what runs each choice."""

    parser: Any
    actions: dict[type, Callable[[Any], int]]
    choices: dict[str, list[str]]
    """the subcommand names of each command ("stagewise" for the top level)."""


def _figure_command(figure) -> tuple[Any, Callable[[Any], int]]:
    """The subcommand of a figure or comparison, and what runs it."""
    choice = _choice(
        figure.command_name, figure.description, [("config", figure.config, figure.config())]
    )
    return choice, lambda cmd: _figure(figure, cmd.config)


def _run_command(experiment, defaults: Any = None) -> tuple[Any, Callable[[Any], int]]:
    """``run NAME``: the experiment's options (from ``defaults``, a resumed run's config, when
    given) and the run directory's, and what runs it."""
    from simulate.runner import RunOutput

    config = experiment.config() if defaults is None else defaults
    choice = _choice(
        experiment.name,
        experiment.description,
        [("experiment", experiment.config, config), ("output", RunOutput, RunOutput())],
    )
    return choice, lambda cmd: _run(experiment, cmd.experiment, cmd.output)


def _sweep_command(experiment) -> tuple[Any, Callable[[Any], int]]:
    """``sweep NAME``: the experiment's options and the sweep's, and what runs it."""
    choice = _choice(
        experiment.name,
        experiment.description,
        [
            ("experiment", experiment.config, experiment.config()),
            ("options", SweepOptions, SweepOptions()),
        ],
    )
    return choice, lambda cmd: _sweep(experiment, cmd.experiment, cmd.options)


def _derive_command(system) -> tuple[Any, Callable[[Any], int]]:
    """``derive NAME``: the derivation's options, and what prints it."""
    choice = _choice(system.name, system.description, [("config", system.config, system.config())])
    return choice, lambda cmd: _derive(system, cmd.config)


def commands(run_defaults: dict[str, Any] | None = None, only: str | None = None) -> Commands:
    """The command tree, built from the registries: figures, comparisons, experiments (run and
    sweep) and derivations, each a subcommand with its config's options. ``run_defaults``: the
    config an experiment's ``run`` starts from instead of its default (a resumed run's own).
    ``only``: the command line's first word; when it names a command, the tree holds that
    command alone with its subcommands, so that ``stagewise run`` imports no figure module and
    ``stagewise figure`` no derivation (a command line that names one command never reaches
    another); "" (a line of options alone, ``stagewise --help``) keeps every command but none of
    their subcommands, which such a line never reaches either; ``choices`` still names every
    command at the top level."""
    actions: dict[type, Callable[[Any], int]] = {}

    def choices(made: Iterable[tuple[Any, Callable[[Any], int]]]) -> list[Any]:
        out = []
        for choice, act in made:
            actions[choice.__origin__] = act
            out.append(choice)
        return out

    def figures() -> list[Any]:
        from figures.registry import all_figures

        return choices(_figure_command(f) for f in all_figures().values())

    def compares() -> list[Any]:
        from figures.registry import comparisons

        return choices(_figure_command(f) for f in comparisons().values())

    def runs() -> list[Any]:
        from simulate.experiments import EXPERIMENTS

        defaults = run_defaults or {}
        return choices(_run_command(e, defaults.get(e.name)) for e in EXPERIMENTS.values())

    def sweeps() -> list[Any]:
        from simulate.experiments import EXPERIMENTS

        return choices(_sweep_command(e) for e in EXPERIMENTS.values())

    def derives() -> list[Any]:
        from figures.derive import SYSTEMS

        return choices(_derive_command(s) for s in SYSTEMS.values())

    groups = [
        ("figure", "reproduce one figure (PNG + PDF + summary.json in OUT/<id>/)", figures),
        ("compare", "predicted vs measured stage times: table, figure, summary.json", compares),
        ("run", "run one experiment into a run directory (resumable)", runs),
        ("sweep", "an experiment over a parameter grid, locally or on Ray", sweeps),
        ("derive", "print a paper's derivation (text or --latex)", derives),
    ]
    top = [Annotated[ListCommand, tyro.conf.subcommand("list", description=ListCommand.__doc__)]]
    names = {"stagewise": ["list", *(name for name, _, _ in groups), "reproduce", "report"]}
    actions[ListCommand] = lambda cmd: _list()
    actions[ReproduceOptions] = _reproduce
    actions[ReportCommand] = _report
    for name, description, build in groups:
        if only in names["stagewise"] and only != name:
            continue
        if only == "":
            bare = make_dataclass(name, [], frozen=True)
            top.append(Annotated[bare, tyro.conf.subcommand(name, description=description)])
            continue
        group = build()
        names[name] = [c.__origin__.command_name for c in group]
        command = _group(name, description, group)
        actions[command.__origin__] = lambda cmd: actions[type(cmd.target)](cmd.target)
        top.append(command)
    for command, name, description in (
        (
            ReproduceOptions,
            "reproduce",
            "every figure, locally or on Ray, plus the HTML/Markdown report",
        ),
        (ReportCommand, "report", "rebuild the report (index.html, REPORT.md) from stored runs"),
    ):
        top.append(Annotated[command, tyro.conf.subcommand(name, description=description)])
    return Commands(Union[tuple(top)], actions, names)  # noqa: UP007


def _list() -> int:
    from figures.derive import SYSTEMS
    from figures.registry import listed
    from simulate.experiments import EXPERIMENTS

    for kind, word in (("figure", "figure"), ("comparison", "compare")):
        for fig in (f for f in listed() if f.kind == kind):
            print(f"{word:10s} {fig.command_name:36s} {fig.paper:16s} {fig.description}")
    for exp in EXPERIMENTS.entries.values():
        print(f"experiment {exp.name:36s} {'':16s} {exp.description}")
    for system in SYSTEMS.values():
        print(f"derive     {system.name:36s} {'':16s} {system.description}")
    return 0


def _figure(figure, cfg) -> int:
    from simulate.train import DivergenceError, Interrupted

    try:
        figure.run(cfg)
    except DivergenceError as err:
        print(f"stagewise: {err}", file=sys.stderr)
        return 1
    except Interrupted as err:
        name = signal.Signals(err.signum).name
        print(
            f"stagewise: interrupted by {name}; run the same command again to resume "
            "(finished sub-runs are reused)",
            file=sys.stderr,
        )
        return 128 + err.signum
    return 0


def _derive(system, cfg) -> int:
    print(system.derive(cfg))
    return 0


def _run(experiment, cfg, output) -> int:
    from dataclasses import replace

    from simulate.experiments import resumed_config
    from simulate.runner import default_run_dir
    from simulate.store import check_output, read_summary
    from simulate.train import DivergenceError, Interrupted

    if output.resume is not None:
        require(
            output.out is None or output.out == output.resume,
            "out",
            str(output.out),
            "left out with --resume (the run continues in its own directory)",
        )
        cfg = resumed_config(experiment, output.resume, given=cfg)
        output = replace(output, out=output.resume)
    else:
        if output.out is None:
            output = replace(output, out=default_run_dir(experiment.name, cfg))
        check_output(output.path, output.overwrite)  # before anything is computed
    print(f"run directory: {output.path}", flush=True)
    try:
        path = experiment.run(cfg, output)
    except DivergenceError as err:
        print(f"stagewise: {err}", file=sys.stderr)
        return 1
    except Interrupted as err:
        print(f"stagewise: {err}", file=sys.stderr)
        return 128 + err.signum
    print(f"wrote {path}")
    flags = read_summary(path).get("success_per_seed")
    if flags is not None:
        print(f"success: {sum(flags)}/{len(flags)} seeds ({read_summary(path)['success_rule']})")
    return 0


def _sweep(experiment, cfg, options: SweepOptions) -> int:
    from figures.sweep_cli import sweep

    return sweep(experiment, cfg, options)


def _reproduce(options: ReproduceOptions) -> int:
    from figures.reproduce import reproduce

    return reproduce(
        quick=options.quick,
        papers=options.paper,
        only=options.only,
        out=options.out,
        executor_name=options.executor,
        address=options.address,
        workers=options.workers,
        force=options.force,
        quiet=options.quiet,
    )


def _report(command: ReportCommand) -> int:
    from figures.reproduce import rebuild_report

    index, markdown = rebuild_report(command.dir)
    print(f"wrote {index}, {markdown}")
    return 0


def _resumed_defaults(argv: list[str]) -> dict[str, Any]:
    """For ``run EXPERIMENT --resume DIR``: the stored run's config as that experiment's
    defaults, so the options parsed are exactly the given ones over the stored run (an option
    given with another value is then a change ``--resume`` can name). Empty when the command
    line is anything else or DIR holds no readable run (``_run`` then names the problem)."""
    words = [a for a in argv if not a.startswith("-")]
    resume = [a.split("=", 1)[1] for a in argv if a.startswith("--resume=")]
    resume += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--resume"]
    if len(words) < 2 or words[0] != "run" or len(resume) != 1:
        return {}
    from simulate.experiments import EXPERIMENTS, resumed_config

    if words[1] not in EXPERIMENTS:
        return {}
    try:
        return {words[1]: resumed_config(EXPERIMENTS[words[1]], Path(resume[0]))}
    except ConfigError:
        return {}


FIGURE_COMMANDS: dict[str, Literal["figure", "comparison"]] = {
    "figure": "figure",
    "compare": "comparison",
}


def _named(
    argv: list[str], run_defaults: dict[str, Any]
) -> tuple[Any, Callable[[Any], int]] | None:
    """For ``figure ID``, ``compare NAME``, ``run NAME``, ``sweep NAME`` or ``derive NAME``
    followed by options: that one subcommand and what runs it, with only its own module imported
    (the command tree imports every figure module, about 2 s, every experiment's, 1.3-1.8 s, or
    every derivation's); None for any other command line, which the tree parses."""
    if len(argv) < 2:
        return None
    command, name = argv[0], argv[1]
    if command in FIGURE_COMMANDS:
        from figures.registry import find

        figure = find(FIGURE_COMMANDS[command], name)
        return None if figure is None else _figure_command(figure)
    if command in ("run", "sweep"):
        from simulate.experiments import EXPERIMENTS

        if name not in EXPERIMENTS:
            return None
        experiment = EXPERIMENTS[name]
        if command == "run":
            return _run_command(experiment, run_defaults.get(name))
        return _sweep_command(experiment)
    if command == "derive":
        from figures.derive import SYSTEMS

        return _derive_command(SYSTEMS[name]) if name in SYSTEMS else None
    return None


def _parse(parser: Any, args: list[str], prog: str, choices: dict[str, list[str]], argv: list[str]):
    """``tyro.cli`` with bad input turned into one ``ConfigError`` line (``_one_line``)."""
    with tyro_errors.on_parse_error(lambda event: _one_line(event, choices, argv)):
        return tyro.cli(parser, args=args, prog=prog, config=(tyro.conf.OmitSubcommandPrefixes,))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the chosen command; the exit code."""
    import matplotlib

    from simulate.runtime import configure

    matplotlib.use("Agg")
    configure()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        run_defaults = _resumed_defaults(argv)
        named = _named(argv, run_defaults)
        if named is not None:
            parser, action = named
            return action(_parse(parser, argv[2:], f"stagewise {argv[0]} {argv[1]}", {}, argv))
        words = [a for a in argv if not a.startswith("-")]
        cli = commands(run_defaults, words[0] if words else "")
        command = _parse(cli.parser, argv, "stagewise", cli.choices, argv)
        return cli.actions[type(command)](command)
    except ConfigError as err:
        print(f"stagewise: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGINT outside a training loop (which checkpoints and stops)
        print("stagewise: interrupted by SIGINT", file=sys.stderr)
        return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
