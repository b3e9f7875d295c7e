"""diffrax solves that JAX's persistent compilation cache can keep.

diffrax checks a save grid (``SaveAt(ts=...)``: increasing, inside [t0, t1]) with equinox's
``error_if``, which raises through a host callback when its predicate is only known at run
time, and JAX never writes a program with a host callback to the persistent cache. Such a
program is traced and compiled again in every process: the head ODE's trajectory batch 3.2-3.7 s
with the cache warm. equinox's ``EQX_ON_ERROR=nan`` turns the checks into a NaN result instead,
but the variable is read once per process and would silence every check of every program, among
them the root finder of the crossing events. So the setting is changed only while a grid-saving
solve is traced, and its callers check in Python what the checks checked (the grid) and what
``throw=True`` would have raised (``sol.result``, with ``throw=False``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_SETTING = "EQX_ON_ERROR"
"""equinox's module global that its ``error_if`` reads when a check is traced."""
_ONE_AT_A_TIME = threading.Lock()
"""Side-by-side runs (threads) may solve at the same time; interleaved, one would restore the
setting under the other or leave it changed for good."""


@contextmanager
def grid_checks_without_callback() -> Iterator[None]:
    """Programs traced inside turn a failed equinox check into NaN instead of a host callback.

    Reaches equinox's module setting (``equinox._errors.EQX_ON_ERROR``, what the environment
    variable sets); where a release moves it this does nothing and the programs stay correct,
    compiled in every process. One thread at a time; a program another thread traces meanwhile
    outside this gets the setting too (what runs beside a solve here, training steps and the
    crossing events, has no equinox check left at run time). jit keeps one trace per argument
    signature, and so does equinox for each check (by its message and shapes): a solve or a
    grid check traced before outside this is reused as it was (a host callback), and a grid
    check traced inside stays NaN-valued for grids of its length for the rest of the process
    (only diffrax's grid checks, of grids the callers check themselves)."""
    try:
        errors = importlib.import_module("equinox._errors")
    except ImportError:  # pragma: no cover - a later equinox
        errors = None
    if not hasattr(errors, _SETTING):  # pragma: no cover - a later equinox
        yield
        return
    with _ONE_AT_A_TIME:
        before = getattr(errors, _SETTING)
        setattr(errors, _SETTING, "nan")
        try:
            yield
        finally:
            setattr(errors, _SETTING, before)
