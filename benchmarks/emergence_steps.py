"""Steps per second of the ``emergence`` experiment (linear map, spec emergence.md §7 settings):
one seed vs vmapped seeds, nothing stored, compile time excluded.

Usage: python benchmarks/emergence_steps.py [SEEDS ...] [--steps N] [--S S] [--batch B]
"""

from __future__ import annotations

import argparse

from simulate.emergence_training import EmergenceConfig, optimizer, problem
from simulate.train import train


def steps_per_second(seeds: int, steps: int, S: int, batch: int) -> tuple[float, float]:
    cfg = EmergenceConfig(S=S, s=3, batch=batch, seeds=seeds, steps=steps, chunk=steps,
                          log_every=steps, quiet=True, store=False)
    result = train(problem(cfg), optimizer(cfg), cfg.schedule, cfg.seed_ids, None,
                   progress=False)
    return steps / result.run_seconds, result.compile_seconds


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--S", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    for n in args.seeds:
        rate, compile_s = steps_per_second(n, args.steps, args.S, args.batch)
        print(f"S={args.S} batch={args.batch} seeds={n}: {rate:.2f} steps/s "
              f"({rate * n:.2f} seed-steps/s), compile {compile_s:.1f} s")
