"""Where the figures of ``stagewise reproduce`` run (issue 16, item 1): one job per figure, in a
worker process of its own (``local``) or as a Ray task (``ray``).

A job calls ``Figure.run`` (which resumes an interrupted run of the same options) with its output
sent to a log file, and returns an outcome ``{"status", "wall_seconds", "error"}`` instead of
raising: a failed figure never stops the others. Local workers are spawned processes (JAX is not
fork-safe), one per figure, in a process group of their own: the terminal's Ctrl-C reaches the
parent only, which decides what the running figures receive (``interrupt``, ``kill``); a worker
that dies without reporting (killed, out of memory) fails its figure alone, where a broken
``ProcessPoolExecutor`` would fail every figure still queued.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal, Protocol

from figures.core.options import FigureOptions

TRACEBACK_LINES = 12
"""lines of the traceback kept in a failed figure's error (its log holds all of it)."""


@dataclass(frozen=True)
class Job:
    """One figure to run: its id, the module declaring it, its options (out, quick, overwrite,
    replot set) and its log."""

    figure_id: str
    module: str
    """the worker imports this module only, not the whole registry (seconds per figure)."""
    cfg: FigureOptions
    log: Path
    success: Literal["complete", "reused"] = "complete"
    """the status a run that succeeds records: computed, or a stored run redrawn (``replot``)."""


def outcome(status: str, wall_seconds: float | None = None, error: str | None = None) -> dict:
    return {"status": status, "wall_seconds": wall_seconds, "error": error}


def error_text(err: BaseException, note: str = "") -> str:
    """``Type: message`` (and ``note``) on the first line, then the tail of the traceback."""
    frames = "".join(traceback.format_tb(err.__traceback__)).rstrip().splitlines()
    return "\n".join([f"{type(err).__name__}: {err}{note}", *frames[-TRACEBACK_LINES:]])


def run_job(job: Job, cpu_devices: int = 1) -> dict:
    """Run one figure in this process and return its outcome (the entry point of a worker
    process or a Ray task: picklable, module level). The process is set up as the command line
    sets its own: float64, the compilation cache, matplotlib's Agg backend, and ``cpu_devices``
    JAX CPU devices (its share of the cores) unless ``$STAGEWISE_CPU_DEVICES`` says otherwise."""
    import importlib

    import matplotlib

    from simulate.runtime import CPU_DEVICES, configure
    from simulate.train import Interrupted

    matplotlib.use("Agg")
    os.environ.setdefault(CPU_DEVICES, str(cpu_devices))
    configure()
    figure = importlib.import_module(job.module).FIGURE
    assert figure.id == job.figure_id  # the module the registry found it in
    started = time.perf_counter()
    try:
        with _logged(job.log):
            figure.run(job.cfg)
    except (KeyboardInterrupt, Interrupted) as err:
        # a training run checkpointed before it stopped: the next reproduce resumes it
        what = str(err) or "interrupted by SIGINT"
        return outcome("not run", None, f"{type(err).__name__}: {what}; reproduce again resumes it")
    except Exception as err:  # any failure is this figure's, recorded, and the others go on
        return outcome("failed", time.perf_counter() - started, error_text(err))
    return outcome(job.success, time.perf_counter() - started)


@contextmanager
def _logged(path: Path) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors too: compilers and C libraries write
    there) go to ``path`` for the duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class Executor(Protocol):
    """Runs jobs; ``wait`` returns the jobs that ended with their outcomes."""

    def submit(self, job: Job) -> None: ...
    def wait(self, timeout: float) -> list[tuple[Job, dict]]: ...
    def interrupt(self) -> None: ...
    def kill(self) -> list[Job]: ...


def _child(job: Job, conn: Connection, cpu_devices: int) -> None:
    os.setpgrp()  # Ctrl-C at the terminal goes to the parent, which forwards it (interrupt)
    conn.send(run_job(job, cpu_devices))
    conn.close()


class LocalExecutor:
    """Each job in a spawned worker process of its own, with ``cpu_devices`` JAX CPU devices."""

    def __init__(self, cpu_devices: int) -> None:
        self.cpu_devices = cpu_devices
        self.context = multiprocessing.get_context("spawn")  # fork after JAX started is unsafe
        self.running: dict[Connection, tuple[Job, Any]] = {}

    def submit(self, job: Job) -> None:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_child, args=(job, send, self.cpu_devices), daemon=False
        )
        process.start()
        send.close()  # the child's end: a child that dies closes the pipe, and recv sees EOF
        self.running[receive] = (job, process)

    def wait(self, timeout: float) -> list[tuple[Job, dict]]:
        ended = []
        for conn in wait(list(self.running), timeout):
            assert isinstance(conn, Connection)  # wait returns the connections it was given
            job, process = self.running[conn]  # still running for kill() until it is received
            try:
                result = conn.recv()
            except EOFError:
                process.join()
                result = outcome("failed", None, _died(process.exitcode))
            process.join()
            conn.close()
            del self.running[conn]
            ended.append((job, result))
        return ended

    def interrupt(self) -> None:
        for _, process in self.running.values():
            _signal(process.pid, signal.SIGINT)

    def kill(self) -> list[Job]:
        jobs = []
        for conn, (job, process) in list(self.running.items()):
            _signal(process.pid, signal.SIGTERM)  # a training run checkpoints on SIGTERM too
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
                process.join()
            conn.close()
            jobs.append(job)
        self.running.clear()
        return jobs


def _signal(pid: int | None, signum: int) -> None:
    if pid is not None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _died(exitcode: int | None) -> str:
    how = (
        f"killed by {signal.Signals(-exitcode).name}"
        if exitcode is not None and exitcode < 0
        else f"exit code {exitcode}"
    )
    return f"WorkerDied: the worker process ended ({how}) before it reported"


class RayExecutor:
    """Each job a Ray task (one CPU, so one JAX CPU device) on the cluster ``connect_ray``
    connected to."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.task = ray.remote(num_cpus=1)(run_job)
        self.running: dict[Any, Job] = {}

    def submit(self, job: Job) -> None:
        self.running[self.task.remote(job)] = job

    def wait(self, timeout: float) -> list[tuple[Job, dict]]:
        if not self.running:
            return []
        refs = list(self.running)
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        ended = []
        for ref in ready:
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.TaskCancelledError:
                result = outcome("not run", None, "TaskCancelledError: interrupted")
            except self.ray.exceptions.RayError as err:  # the worker died, or Ray itself failed
                result = outcome("failed", None, error_text(err))
            ended.append((self.running.pop(ref), result))
        return ended

    def interrupt(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref)  # a KeyboardInterrupt inside the task

    def kill(self) -> list[Job]:
        for ref in self.running:
            self.ray.cancel(ref, force=True)
        jobs = list(self.running.values())
        self.running.clear()
        return jobs


@contextmanager
def executor(name: str, address: str | None, workers: int) -> Iterator[Executor]:
    """The executor ``name`` ("local" or "ray"; Ray at ``address`` or a private instance of
    ``workers`` CPUs), released on exit. Local workers share the cores: each process gets
    cores // workers JAX CPU devices."""
    if name == "local":
        yield LocalExecutor(max(1, len(os.sched_getaffinity(0)) // workers))
        return
    from simulate.sweep import connect_ray

    with connect_ray(address, workers) as ray:
        yield RayExecutor(ray)
