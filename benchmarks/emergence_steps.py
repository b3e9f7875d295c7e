"""Steps per second of the ``emergence`` experiment (linear map, spec emergence.md §7 settings):
one seed vs vmapped seeds, nothing stored, compile time excluded.

Usage: python benchmarks/emergence_steps.py [SEEDS ...] [--steps N] [--S S] [--batch B]
       [--heads H] [--head-dim D]

The spec's setting is the default (S = 16, batch 256, H = 8, d_h = 8); the quick setting of
emergence-times is ``--S 6 --batch 64 --heads 8 --head-dim 4``.
"""

from __future__ import annotations

import argparse

from simulate.emergence.training import EmergenceConfig, optimizer, problem
from simulate.runtime import use_float64, use_unrolled_threefry
from simulate.train import train


def steps_per_second(
    seeds: int, steps: int, S: int, batch: int, heads: int = 8, head_dim: int = 8
) -> tuple[float, float]:
    cfg = EmergenceConfig(
        S=S,
        s=3,
        batch=batch,
        heads=heads,
        head_dim=head_dim,
        seeds=seeds,
        steps=steps,
        chunk=steps,
        log_every=steps,
    )
    result = train(problem(cfg), optimizer(cfg), cfg.schedule, cfg.seed_ids, None, progress=False)
    return steps / result.run_seconds, result.compile_seconds


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    use_unrolled_threefry()
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--S", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=8)
    args = parser.parse_args()
    for n in args.seeds:
        rate, compile_s = steps_per_second(
            n, args.steps, args.S, args.batch, args.heads, args.head_dim
        )
        print(
            f"S={args.S} batch={args.batch} H={args.heads} d_h={args.head_dim} seeds={n}: "
            f"{rate:.2f} steps/s "
            f"({rate * n:.2f} seed-steps/s), compile {compile_s:.1f} s"
        )
