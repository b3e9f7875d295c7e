"""Epochs per second of the ``clustering-head`` experiment at the paper setting (spec
clustering_head.md §4: p = 2, L = 12, m = 32, batch 32 = 64 steps per epoch, Adam 3e-3): one seed
vs vmapped seeds, with and without the per-epoch top-Hessian-eigenvalue logging (power iteration),
under each minibatch rule (one shuffle per epoch, the default; an independent subset per step, the
rule before 2026-12-07, as the baseline beside it), nothing stored; compile time is reported apart
from run time.

Usage: python benchmarks/clustering_epochs.py [SEEDS ...] [--epochs N] [--hessian-iterations H ...]
       [--minibatches epoch|step ...]
"""

from __future__ import annotations

import argparse
from typing import Literal

from simulate.clustering_head.training import ClusteringConfig, optimizer, problem
from simulate.runtime import use_float64, use_unrolled_threefry
from simulate.train import train


def epochs_per_second(
    seeds: int, epochs: int, hessian_iterations: int, minibatches: Literal["epoch", "step"]
) -> tuple[float, float]:
    """(epochs per second of the whole vmapped run, compile seconds of the chunk program)."""
    cfg = ClusteringConfig(
        seeds=seeds,
        epochs=epochs,
        epochs_per_chunk=epochs,
        hessian_iterations=hessian_iterations,
        minibatches=minibatches,
    )
    result = train(problem(cfg), optimizer(cfg), cfg.schedule, cfg.seed_ids, None, progress=False)
    return epochs / result.run_seconds, result.compile_seconds


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    use_unrolled_threefry()
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--hessian-iterations",
        type=int,
        nargs="*",
        default=[0, 20],
        help="power-iteration steps per logged epoch (0: Hessian not logged)",
    )
    parser.add_argument(
        "--minibatches",
        choices=["epoch", "step"],
        nargs="*",
        default=["epoch", "step"],
        help="minibatch rules to time, in this order (epoch: one shuffle per epoch; step: an "
        "independent subset per step)",
    )
    args = parser.parse_args()
    steps_per_epoch = ClusteringConfig().steps_per_epoch
    for h in args.hessian_iterations:
        for n in args.seeds:
            for rule in args.minibatches:
                rate, compile_s = epochs_per_second(n, args.epochs, h, rule)
                print(
                    f"minibatches={rule} hessian_iterations={h} seeds={n}: {rate:.2f} epochs/s "
                    f"({rate * n:.1f} seed-epochs/s, {rate * steps_per_epoch:.0f} steps/s), "
                    f"compile {compile_s:.1f} s, {args.epochs} epochs"
                )
