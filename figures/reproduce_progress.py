"""The one progress display of ``stagewise reproduce`` (issue 16, item 1): figures done / running
/ failed, elapsed, and an ETA from each figure's recorded wall time (an earlier reproduction's, or
its stored summary's), or, for a figure never timed, the mean of the figures timed so far."""

from __future__ import annotations

import statistics
import sys
import time

from tqdm.auto import tqdm


def eta_seconds(
    pending: list[float | None],
    running: list[tuple[float | None, float]],
    measured: list[float],
    workers: int,
) -> float | None:
    """Seconds left: the expected wall times of the ``pending`` figures and what remains of the
    ``running`` ones ((expected, elapsed) pairs), shared by the workers that will run them; a
    figure without a recorded time counts as the mean of ``measured``. None while nothing is
    known to estimate with."""
    fallback = statistics.fmean(measured) if measured else None
    guess = [fallback if t is None else t for t in pending]
    for expected, elapsed in running:
        t = fallback if expected is None else expected
        guess.append(None if t is None else max(t - elapsed, 0.0))
    if None in guess:
        return None
    busy = min(workers, len(pending) + len(running))
    return sum(t for t in guess if t is not None) / busy if busy else 0.0


class Progress:
    """A tqdm bar over the figures; ``quiet`` turns it and its notes off."""

    def __init__(
        self, total: int, done: int, workers: int, expected: dict[str, float | None], quiet: bool
    ):
        self.workers, self.expected, self.quiet = workers, expected, quiet
        self.pending = list(expected)
        self.running: dict[str, float] = {}
        self.measured: list[float] = []
        self.failed = 0
        self.started = time.monotonic()
        self.bar = tqdm(
            total=total,
            initial=done,
            desc="reproduce",
            unit="figure",
            disable=quiet,
            dynamic_ncols=True,
            bar_format="{desc} |{bar:16}| {n_fmt}/{total_fmt} done{postfix}",  # postfix: ", ..."
        )
        self.refresh()

    def start(self, figure_id: str) -> None:
        self.pending.remove(figure_id)
        self.running[figure_id] = time.monotonic()
        self.refresh()

    def end(self, figure_id: str, status: str, wall_seconds: float | None) -> None:
        self.pending = [p for p in self.pending if p != figure_id]
        self.running.pop(figure_id, None)
        success = status in ("complete", "reused")
        if success and wall_seconds is not None:
            self.measured.append(wall_seconds)
        self.failed += status == "failed"
        took = "" if wall_seconds is None else f" ({wall_seconds:.0f} s)"
        self.note(f"{status} {figure_id}{took}")
        self.refresh(done=int(success))

    def note(self, line: str) -> None:
        if not self.quiet:
            self.bar.write(line, file=sys.stderr)

    def refresh(self, done: int = 0) -> None:
        """Redraw, with ``done`` more figures done."""
        now = time.monotonic()
        eta = eta_seconds(
            [self.expected[p] for p in self.pending],
            [(self.expected[r], now - t) for r, t in self.running.items()],
            self.measured,
            self.workers,
        )
        self.bar.set_postfix_str(
            f"{len(self.running)} running, {self.failed} failed, "
            f"elapsed {tqdm.format_interval(now - self.started)}, "
            f"ETA {'?' if eta is None else tqdm.format_interval(eta)}",
            refresh=False,
        )
        self.bar.update(done)  # redraws (at most every mininterval)

    def close(self) -> None:
        self.bar.close()
