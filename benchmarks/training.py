"""heads-gd timings: the run store's overhead, and 16 vmapped seeds against 16 sequential runs.

Run: python benchmarks/training.py   (paper setting: 1e5 Euler steps, chunks of 1e4 steps)
"""

import tempfile
import time
from pathlib import Path

from simulate.incremental.head_training import HeadTrainConfig, optimizer, problem
from simulate.runtime import use_float64, use_unrolled_threefry
from simulate.store import RunStore
from simulate.train import Schedule, train


def timed(cfg, seed_ids, store=None):
    start = time.perf_counter()
    result = train(
        problem(cfg),
        optimizer(cfg),
        Schedule(cfg.steps, cfg.log_every, cfg.chunk),
        seed_ids,
        store,
        progress=False,
    )
    return time.perf_counter() - start, result


def main():
    cfg = HeadTrainConfig(seeds=16)
    seeds = list(range(16))
    with tempfile.TemporaryDirectory() as tmp:
        timed(cfg, seeds)  # first compile, so both timings below see the same caches
        store = RunStore(Path(tmp) / "run")
        store.create("heads-gd", {}, {})
        with_store, _r1 = timed(cfg, seeds, store)
    without, r2 = timed(cfg, seeds)
    print(
        f"16 seeds x {cfg.steps} steps, {cfg.steps // cfg.chunk} chunks: with store "
        f"{with_store:.2f} s, without {without:.2f} s (store overhead "
        f"{with_store - without:+.2f} s; compile {r2.compile_seconds:.2f} s, "
        f"run {r2.run_seconds:.2f} s)"
    )
    runs = [timed(cfg, [s])[1] for s in seeds]
    seq = sum(r.run_seconds for r in runs)
    print(
        f"run time, excluding compile: 16 seeds vmapped {r2.run_seconds:.2f} s; 16 sequential "
        f"one-seed runs {seq:.2f} s (speed-up {seq / r2.run_seconds:.1f}x)"
    )


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    use_unrolled_threefry()
    main()
