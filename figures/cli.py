"""The ``stagewise`` command line (ARCHITECTURE §3): list, derive, figure, compare, run, sweep."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import tyro

from theory.validation import ConfigError, require

USAGE = (
    "usage: stagewise {list,derive,figure,compare,run,sweep} ... "
    "(stagewise COMMAND --help for options)"
)


def _fail(message: str) -> int:
    print(f"stagewise: error: {message}", file=sys.stderr)
    return 2


BOX = "│╭╮╰╯─┃━"


def parse(config_type, args: list[str], prog: str):
    """``tyro.cli`` whose parse errors become one line (tyro draws a multi-line box)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(config_type, args=args, prog=prog)
    except SystemExit as exit_:
        if exit_.code in (0, None):
            raise
        lines = [
            ln.strip(BOX + " ")
            for ln in captured.getvalue().splitlines()
            if not ln.lstrip().startswith("╭")
        ]  # the box's title line
        lines = [ln for ln in lines if ln]
        message = lines[0] if lines else f"could not parse {' '.join(args)}"
        for ln in lines[1:]:  # the message may wrap; the box's next section starts with a rule
            if not ln or ln.startswith(("Argument helptext", "For full helptext")):
                break
            if ln.startswith(("-", "Perhaps")):
                break
            message += " " + ln
        raise ConfigError("arguments", " ".join(args), message) from None


def _list() -> int:
    from figures.derive import SYSTEMS
    from figures.registry import all_figures

    for fig in all_figures().values():
        print(f"{fig.id:36s} {fig.paper:16s} {fig.description}")
    print(f"derive systems: {', '.join(SYSTEMS)}")
    from simulate.experiments import EXPERIMENTS

    for exp in EXPERIMENTS.values():
        print(f"experiment {exp.name:25s} {exp.description}")
    return 0


def _derive(args: list[str]) -> int:
    from figures.derive import SYSTEMS, DeriveConfig, derive

    if not args or args[0] not in SYSTEMS:
        got = args[0] if args else "(none)"
        return _fail(f"system = {got!r}: one of {', '.join(SYSTEMS)}")
    cfg = parse(DeriveConfig, args[1:], f"stagewise derive {args[0]}")
    print(derive(cfg))
    return 0


def _figure(args: list[str]) -> int:
    from figures.registry import all_figures

    figures = all_figures()
    if not args or args[0] not in figures:
        got = args[0] if args else "(none)"
        return _fail(f"figure = {got!r}: unknown figure id; one of {', '.join(figures)}")
    fig = figures[args[0]]
    cfg = parse(fig.config, args[1:], f"stagewise figure {fig.id}")
    fig.run(cfg)
    return 0


def _compare(args: list[str]) -> int:
    from figures.registry import comparisons

    known = comparisons()
    if not args or args[0] not in known:
        got = args[0] if args else "(none)"
        return _fail(f"comparison = {got!r}: one of {', '.join(known)}")
    config, run_comparison = known[args[0]]
    run_comparison(parse(config, args[1:], f"stagewise compare {args[0]}"))
    return 0


def _experiment(name: str | None):
    from simulate.experiments import EXPERIMENTS

    if name not in EXPERIMENTS:
        raise ConfigError("experiment", name or "(none)", f"one of {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def _run(args: list[str]) -> int:
    from simulate.experiments import resumed_config
    from simulate.train import DivergenceError, Interrupted

    exp = _experiment(args[0] if args else None)
    cfg = parse(exp.config, args[1:], f"stagewise run {exp.name}")
    if cfg.resume is not None:
        require(
            (cfg.resume / "config.json").exists(),
            "resume",
            str(cfg.resume),
            "a run directory holding config.json",
        )
        cfg = resumed_config(exp, cfg.resume, cfg.quiet)
    try:
        path = exp.run(cfg)
    except DivergenceError as err:
        print(f"stagewise: {err}", file=sys.stderr)
        return 1
    except Interrupted as err:
        print(f"stagewise: {err}", file=sys.stderr)
        return 128 + err.signum
    print(f"wrote {path}")
    print(_success_line(path), end="")
    return 0


def _success_line(path) -> str:
    """'success: n/N seeds (rule)' when the experiment records a success flag per seed."""
    summary = json.loads((Path(path) / "summary.json").read_text())
    flags = summary.get("success_per_seed")
    if flags is None:
        return ""
    return f"success: {sum(flags)}/{len(flags)} seeds ({summary['success_rule']})\n"


def _sweep(args: list[str]) -> int:
    from figures.sweep_cli import sweep_main

    return sweep_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {
        "list": lambda a: _list(),
        "derive": _derive,
        "figure": _figure,
        "compare": _compare,
        "run": _run,
        "sweep": _sweep,
    }
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] not in commands:
        return _fail(f"command = {argv[0]!r}: one of {', '.join(commands)}")
    from simulate.cache import enable_compilation_cache

    enable_compilation_cache()
    try:
        return commands[argv[0]](argv[1:])
    except ConfigError as err:
        return _fail(str(err))


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
