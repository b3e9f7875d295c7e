"""``python -m benchmarks [--quick] [--tiny] [--out FILE.json] [--only NAME ...]``: run the
benchmark families, print one table, optionally write it as JSON."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.table import Row, format_table, write_json

FAMILIES = ("ode", "peak", "seeds", "figures", "memory", "paper")


def family_measure(name: str) -> Callable[..., list[Row]]:
    """The family's ``measure(mode)`` (imported late: each pulls in its own experiments)."""
    if name == "ode":
        from benchmarks.ode import measure
    elif name == "peak":
        from benchmarks.peak import measure
    elif name == "seeds":
        from benchmarks.seeds import measure
    elif name == "figures":
        from benchmarks.compile_wall import measure
    elif name == "paper":
        from benchmarks.paper import measure
    else:
        from benchmarks.memory import measure
    return measure


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="about 3 minutes: smaller sizes, one row per family"
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-test sizes for the tests (the ODE family; numbers meaningless)",
    )
    parser.add_argument("--out", type=Path, help="also write the table as JSON here")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help=f"families ({', '.join(FAMILIES)}), figure ids (compare-NAME for a comparison) or "
        "paper:ID (the paper family for that figure only)",
    )
    return parser.parse_args(argv)


def selection(only: list[str] | None) -> tuple[list[str], list[str] | None, list[str] | None]:
    """(families to run, figure ids for the figures family or None for its default set, figure
    ids for the paper family or None for its default set)."""
    if not only:
        return list(FAMILIES), None, None
    from benchmarks.compile_wall import all_ids
    from benchmarks.paper import FIGURES

    ids = all_ids()
    paper_ids = [n.removeprefix("paper:") for n in only if n.startswith("paper:")]
    unknown = [n for n in only if n not in FAMILIES and n not in ids and not n.startswith("paper:")]
    unknown += [f"paper:{n}" for n in paper_ids if n not in FIGURES]
    if unknown:
        print(
            f"benchmarks: error: only = {unknown[0]}: one of {', '.join(FAMILIES)}, a figure id "
            f"or paper:ID with ID one of {', '.join(FIGURES)}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    figure_ids = [n for n in only if n in ids]
    families = [
        f
        for f in FAMILIES
        if f in only or (f == "figures" and figure_ids) or (f == "paper" and paper_ids)
    ]
    return (
        families,
        figure_ids if figure_ids and "figures" not in only else None,
        paper_ids if paper_ids and "paper" not in only else None,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    families, figure_ids, paper_ids = selection(args.only)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    # a fresh persistent cache: every compile timed here is cold, and the user's cache is left
    # alone (the figures family gives each figure its own)
    cache = tempfile.TemporaryDirectory(prefix="stagewise-bench-")
    os.environ["STAGEWISE_CACHE_DIR"] = cache.name
    from simulate.runtime import configure

    configure()
    import jax

    rows: list[Row] = []
    start = time.perf_counter()
    for name in families:
        print(f"benchmarks: {name} ...", file=sys.stderr, flush=True)
        measure = family_measure(name)
        if name == "figures":
            rows += measure("full" if mode == "full" else "quick", figure_ids)
        elif name == "paper":
            rows += measure("quick" if mode == "tiny" else mode, paper_ids)
        else:
            rows += measure(mode if name == "ode" or mode != "tiny" else "quick")
    cache.cleanup()
    print(format_table(rows))
    if args.out is not None:
        meta = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "mode": mode,
            "families": families,
            "seconds": time.perf_counter() - start,
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
        }
        write_json(rows, args.out, meta)


if __name__ == "__main__":
    main()
