"""A checkpoint lost on its way to disk, for the trainer's resume tests."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from simulate.store import RunStore


@contextmanager
def losing_checkpoint(monkeypatch: pytest.MonkeyPatch, nth: int) -> Iterator[None]:
    """Inside the block, the ``nth`` call (from 1) of ``RunStore.save_checkpoint`` raises
    ``OSError`` instead of writing; the others write as usual."""
    original = RunStore.save_checkpoint
    calls = {"n": 0}

    def flaky(self, state, step, rows):
        calls["n"] += 1
        if calls["n"] == nth:
            raise OSError("disk went away")
        return original(self, state, step, rows)

    monkeypatch.setattr(RunStore, "save_checkpoint", flaky)
    try:
        yield
    finally:
        monkeypatch.setattr(RunStore, "save_checkpoint", original)
