"""SIGINT/SIGTERM as a flag that training checks between chunks (ARCHITECTURE §3: a run loses at
most the chunk in flight).

Only the main thread may install signal handlers. A run in another thread (one of a figure's
sub-runs side by side, ``simulate.side_by_side``) reads the flag of the main thread's catcher.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_received: list[int] = []
"""the signals received while a catcher was installed (cleared when the outermost one leaves)."""
_depth = 0


def _handle(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


@contextmanager
def catching() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM set the flag instead of raising; outside the main thread this
    relies on the main thread's catcher."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _handle) for s in (signal.SIGINT, signal.SIGTERM)}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for s, h in old.items():
            signal.signal(s, h)
        if _depth == 0:
            _received.clear()


def received() -> int | None:
    """The first signal caught by the current catcher, or None."""
    return _received[0] if _received else None
