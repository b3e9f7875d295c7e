"""A checkpoint lost on its way to disk, for the trainer's resume tests."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import xarray as xr

from simulate.runner import RunOutput
from simulate.store import RunStore, load


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


def uninterrupted_and_resumed(
    run: Callable[..., Any], cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[xr.Dataset, xr.Dataset]:
    """The rows of ``run(cfg, output)`` straight through (in ``tmp_path / "full"``), and of the
    same run crashed by losing its third checkpoint (the first two: step 0 and the first chunk's
    end) and then resumed (in ``tmp_path / "crash"``)."""
    full, _ = load(run(cfg, RunOutput(out=tmp_path / "full", quiet=True)))
    with losing_checkpoint(monkeypatch, 3), pytest.raises(OSError):
        run(cfg, RunOutput(out=tmp_path / "crash", quiet=True))
    crash = tmp_path / "crash"
    resumed, _ = load(run(cfg, RunOutput(out=crash, quiet=True, resume=crash)))
    return full, resumed
