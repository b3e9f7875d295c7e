"""SIGINT/SIGTERM as a flag that training checks between chunks (ARCHITECTURE §3: a run loses at
most the chunk in flight).

Only the main thread may install signal handlers. A run in another thread (one of a figure's
sub-runs side by side, ``simulate.side_by_side``) reads the flag of the main thread's catcher.

The first signal only sets the flag; the handler then gives both signals back to their default
action, so a second one ends the process at once. A chunk blocked in native code never reaches its
boundary, and the user must still be able to stop it; the run store survives that as it survives
SIGKILL (``tests/test_kill.py``).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []
"""the signals received while a catcher was installed (cleared when the outermost one leaves)."""
_depth = 0


def _handle(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    for s in _SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    # stderr may be closed or a broken pipe; the flag is what matters
    with suppress(OSError):
        name = signal.Signals(signum).name
        print(
            f"stagewise: {name} received, stopping after the chunk in flight "
            "(send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )


@contextmanager
def catching() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM set the flag instead of raising, and a second signal ends the
    process; outside the main thread this relies on the main thread's catcher."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _handle) for s in _SIGNALS}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        # an outer catcher whose signal came must keep the default action until it leaves too
        if _depth == 0 or not _received:
            for s, h in old.items():
                signal.signal(s, h)
        if _depth == 0:
            _received.clear()


def received() -> int | None:
    """The first signal caught by the current catcher, or None."""
    return _received[0] if _received else None
