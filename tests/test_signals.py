"""``simulate.signals``: the first SIGINT/SIGTERM is a flag, a second one stops the process."""

import signal
import subprocess
import sys
import time

import pytest

from simulate import signals

# a process that waits inside a catcher, as a chunk blocked in native code would
WAITER = """
import sys, time
from simulate import signals
with signals.catching():
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
"""


@pytest.mark.parametrize(
    "first,second",
    [
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGTERM),
    ],
)
def test_a_second_signal_stops_at_once(first, second):
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(first)
        assert proc.stderr is not None
        line = proc.stderr.readline().strip()
        assert line.startswith(f"stagewise: {first.name} received, stopping after the chunk")
        time.sleep(0.3)
        assert proc.poll() is None, "the first signal must only set the flag"
        proc.send_signal(second)
        assert proc.wait(timeout=30) == -second
    finally:
        proc.kill()
        proc.wait()


def test_nested_catchers_keep_the_default_until_the_outermost_leaves():
    originals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals.catching():
        with signals.catching():
            signals._handle(signal.SIGINT, None)
            assert signals.received() == signal.SIGINT
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signals.received() == signal.SIGINT
    assert signals.received() is None
    assert {s: signal.getsignal(s) for s in originals} == originals


def test_without_a_signal_each_catcher_restores_what_it_replaced():
    originals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals.catching():
        outer = signal.getsignal(signal.SIGINT)
        assert outer is not originals[signal.SIGINT]
        with signals.catching():
            pass
        assert signal.getsignal(signal.SIGINT) is outer
    assert {s: signal.getsignal(s) for s in originals} == originals
