"""A tiny ``heads-gd`` run with many small chunks, for the kill tests (``tests/test_kill.py``).

``run(out, resume)`` runs (or resumes) it into ``out`` through ``simulate.runner.run_experiment``
(with an empty summary: the stage predictions of heads-gd take seconds of sympy). The tests start
it in a process forked from a forkserver that has jax and the experiment imported already, so a
start costs a fork rather than an interpreter and a jax import, and kill it with SIGKILL.
"""

from __future__ import annotations

import gc
from pathlib import Path

from simulate.incremental import head_training
from simulate.runner import RunOutput, run_experiment

CONFIG = head_training.HeadTrainConfig(steps=50, chunk=10, log_every=5, seeds=2)
"""5 chunks of 2 logged rows each: most of a run is spent writing the store."""

# the forkserver imports this module (and jax with it) before it forks the runs: frozen, those
# objects are left out of the children's collections, whose first full one took 0.16 s of a
# 0.6 s run
gc.freeze()


def run(out: str, resume: bool) -> None:
    from simulate.runtime import configure

    configure()
    path = Path(out)
    output = RunOutput(out=path, resume=path if resume else None, quiet=True)
    cfg = CONFIG
    problem, optimizer = head_training.problem(cfg), head_training.optimizer(cfg)
    run_experiment(head_training.NAME, cfg, output, problem, optimizer, lambda ds: {})
