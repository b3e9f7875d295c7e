"""A figure's independent runs side by side, one JAX CPU device each.

XLA:CPU runs the small ops of a training step on one core, and a figure's runs (the points of a
sweep, its c-gram baselines) do not depend on each other, so with D devices
(``simulate.runtime.use_cpu_cores``) D of them run at a time, each in a thread pinned to its own
device; seeds inside such a run stay on that device. SIGINT/SIGTERM reach the main thread's
catcher (``simulate.signals``): every running run checkpoints after its chunk in flight and
stops, and the runs not yet started are not started.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import jax

from simulate import signals

T = TypeVar("T")

_local = threading.local()


def devices() -> list[Any]:
    """The devices the current run may use: its own inside a side-by-side job, else all."""
    return getattr(_local, "devices", None) or jax.devices()


@contextmanager
def _pinned(device: Any) -> Iterator[None]:
    _local.devices = [device]
    try:
        with jax.default_device(device):
            yield
    finally:
        _local.devices = None


def run_side_by_side(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Each job's result, in order; as many jobs at a time as ``devices()``. The first error is
    raised once the running jobs have stopped; jobs not yet started are then skipped."""
    pool_devices = devices()
    if len(pool_devices) == 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    free: queue.Queue[Any] = queue.Queue()
    for device in pool_devices:
        free.put(device)

    stop = threading.Event()  # a job failed or a signal came: start no further job

    def pinned(job: Callable[[], T]) -> T:
        device = free.get()
        try:
            if stop.is_set() or signals.received() is not None:
                raise CancelledError
            with _pinned(device):
                return job()
        except BaseException:
            stop.set()
            raise
        finally:
            free.put(device)

    with signals.catching(), ThreadPoolExecutor(len(pool_devices)) as pool:
        futures: list[Future[T]] = [pool.submit(pinned, job) for job in jobs]
        errors = [future.exception() for future in futures]
    # the error that stopped the others, not the cancellations it caused
    error = next((e for e in errors if e and not isinstance(e, CancelledError)), None)
    if error is not None:
        raise error
    return [future.result() for future in futures]
