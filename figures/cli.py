"""The ``stagewise`` command line (ARCHITECTURE §3): list, derive, figure."""

from __future__ import annotations

import sys

import tyro

from theory.validation import ConfigError

USAGE = "usage: stagewise {list,derive,figure} ... (stagewise COMMAND --help for options)"


def _fail(message: str) -> int:
    print(f"stagewise: error: {message}", file=sys.stderr)
    return 2


def _list() -> int:
    from figures.derive import SYSTEMS
    from figures.registry import all_figures

    for fig in all_figures().values():
        status = "ready  " if fig.implemented else "planned"
        print(f"{fig.id:36s} {status} {fig.paper:16s} {fig.description}")
    print(f"derive systems: {', '.join(SYSTEMS)}")
    return 0


def _derive(args: list[str]) -> int:
    from figures.derive import SYSTEMS, DeriveConfig, derive

    if not args or args[0] not in SYSTEMS:
        got = args[0] if args else "(none)"
        return _fail(f"system = {got!r}: one of {', '.join(SYSTEMS)}")
    cfg = tyro.cli(DeriveConfig, args=args[1:], prog=f"stagewise derive {args[0]}")
    print(derive(cfg))
    return 0


def _figure(args: list[str]) -> int:
    from figures.registry import all_figures

    figures = all_figures()
    if not args or args[0] not in figures:
        got = args[0] if args else "(none)"
        ready = ", ".join(f for f, fig in figures.items() if fig.implemented)
        return _fail(f"figure = {got!r}: unknown figure id; ready: {ready} "
                     "(stagewise list shows all)")
    fig = figures[args[0]]
    if not fig.implemented:
        return _fail(f"figure = {fig.id!r}: listed in the paper specs but not implemented yet")
    cfg = tyro.cli(fig.config, args=args[1:], prog=f"stagewise figure {fig.id}")
    fig.run(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"list": lambda a: _list(), "derive": _derive, "figure": _figure}
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] not in commands:
        return _fail(f"command = {argv[0]!r}: one of {', '.join(commands)}")
    try:
        return commands[argv[0]](argv[1:])
    except ConfigError as err:
        return _fail(str(err))


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
