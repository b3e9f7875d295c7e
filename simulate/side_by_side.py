"""A figure's runs side by side, one JAX CPU device each.

XLA:CPU runs the small ops of a training step on one core, and a figure's runs (the points of a
sweep, its c-gram baselines) mostly do not depend on each other, so with D devices
(``simulate.runtime.use_cpu_cores``) D of them run at a time, each in a thread pinned to its own
device; seeds inside such a run stay on that device. A run that needs others' results (a student
that measures its KL to trained baselines) is an ``After`` job: it starts once they have finished,
and the independent runs fill the devices meanwhile. SIGINT/SIGTERM reach the main thread's
catcher (``simulate.signals``): every running run checkpoints after its chunk in flight and
stops, and the runs not yet started are not started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import jax

from simulate import signals
from theory.validation import require

T = TypeVar("T")

_local = threading.local()


def devices() -> list[Any]:
    """The devices the current run may use: its own inside a side-by-side job, else all."""
    return getattr(_local, "devices", None) or jax.devices()


@contextmanager
def pinned(device: Any) -> Iterator[None]:
    """Within it, ``devices()`` is ``[device]`` and new arrays and programs go to ``device``."""
    saved = getattr(_local, "devices", None)
    _local.devices = [device]
    try:
        with jax.default_device(device):
            yield
    finally:
        _local.devices = saved


@dataclass(frozen=True)
class After(Generic[T]):
    """A job that needs the results of earlier jobs of the same ``run_side_by_side`` call: it is
    called as ``job(*their results)`` once they have finished."""

    needs: tuple[int, ...]
    job: Callable[..., T]


def run_side_by_side(jobs: Sequence[Callable[[], T] | After[T]]) -> list[T]:
    """Each job's result, in order; as many jobs at a time as ``devices()``. A free device takes
    the first job in list order whose needs have finished (so a caller lists a chain's jobs
    first). The first error is raised once the running jobs have stopped; jobs not yet started
    are then skipped."""
    needs = [job.needs if isinstance(job, After) else () for job in jobs]
    require(
        all(0 <= n < i for i, ns in enumerate(needs) for n in ns),
        "jobs",
        needs,
        "needs that name earlier jobs of the same call",
    )

    def call(i: int, results: dict[int, Any]) -> T:
        job = jobs[i]
        if isinstance(job, After):
            return job.job(*(results[n] for n in job.needs))
        return job()

    pool_devices = devices()
    results: dict[int, Any] = {}
    if len(pool_devices) == 1 or len(jobs) <= 1:
        for i in range(len(jobs)):
            results[i] = call(i, results)
        return [results[i] for i in range(len(jobs))]

    def call_on(i: int, device: Any) -> T:
        with pinned(device):
            return call(i, results)

    waiting, free = list(range(len(jobs))), list(pool_devices)
    running: dict[Future[T], tuple[int, Any]] = {}
    error: BaseException | None = None
    with signals.catching(), ThreadPoolExecutor(len(pool_devices)) as pool:
        while True:
            if error is None and signals.received() is None:
                for i in [i for i in waiting if all(n in results for n in needs[i])]:
                    if not free:
                        break
                    waiting.remove(i)
                    device = free.pop(0)
                    running[pool.submit(call_on, i, device)] = (i, device)
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                i, device = running.pop(future)
                free.append(device)
                failure = future.exception()
                if failure is None:
                    results[i] = future.result()
                elif error is None:
                    error = failure  # the error that stopped the others
    if error is not None:
        raise error
    if waiting:  # a signal came: the runs not started are not run
        raise CancelledError
    return [results[i] for i in range(len(jobs))]
