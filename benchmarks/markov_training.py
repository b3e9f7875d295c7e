"""markov timings at the paper's minimal setting (d = 50, spans [2,2,2], 3000 sequences per step,
AdamW, validation 512 logged every 10 steps or once at the end of shorter runs, no store):
compile time and steps per second of one seed (float64, the default q = 1e-9, and float32),
16 seeds vmapped in one program against 16 sequential one-seed runs, and the full transformer
at the same batch.

The persistent compilation cache goes to a fresh temporary directory, as the CLI would use one:
the first compile of each program is cold, the 15 later sequential runs load theirs.

Run: python benchmarks/markov_training.py [--steps 30] [--seed-steps 3] [--full-steps 3]
"""

import argparse
import os
import tempfile

from simulate.incremental.markov_training import MarkovTrainConfig, optimizer, problem
from simulate.runtime import use_float64, use_unrolled_threefry
from simulate.train import train

PAPER = {
    "vocab": 50,
    "blocks": (2, 2, 2),
    "batch": 3000,
    "optimizer": "adamw",
}


def timed(cfg: MarkovTrainConfig, seed_ids) -> tuple[float, float]:
    """(compile seconds, run seconds) of one trainer call without the store."""
    result = train(problem(cfg), optimizer(cfg), cfg.schedule, seed_ids, None, progress=False)
    return result.compile_seconds, result.run_seconds


def config(steps: int, **kw) -> MarkovTrainConfig:
    log_every = 10 if steps % 10 == 0 else steps
    return MarkovTrainConfig(**PAPER, steps=steps, chunk=steps, log_every=log_every, **kw)


def main(steps: int, seed_steps: int, full_steps: int):
    rows = []
    for kw in ({}, {"precision": "float32"}):
        cfg = config(steps, **kw)
        compile_s, run_s = timed(cfg, [0])
        rows.append(
            (f"minimal {cfg.dtype.__name__}, 1 seed, {steps} steps", compile_s, steps / run_s)
        )
    compile_s, vmapped = timed(config(seed_steps, seeds=16), list(range(16)))
    rows.append(
        (
            f"minimal float64, 16 seeds vmapped, {seed_steps} steps",
            compile_s,
            16 * seed_steps / vmapped,
        )
    )
    runs = [timed(config(seed_steps), [s]) for s in range(16)]
    sequential = sum(r for _, r in runs)
    rows.append(
        (
            f"minimal float64, 16 x 1 seed, {seed_steps} steps (mean compile)",
            sum(c for c, _ in runs) / 16,
            16 * seed_steps / sequential,
        )
    )
    full = config(full_steps, model="full", query_scale=None)
    compile_s, run_s = timed(full, [0])
    rows.append(
        (f"full {full.dtype.__name__}, 1 seed, {full_steps} steps", compile_s, full_steps / run_s)
    )

    print(f"{'setting':58s} {'compile s':>9s} {'seed-steps/s':>12s}")
    for name, c, rate in rows:
        print(f"{name:58s} {c:9.2f} {rate:12.2f}")
    print(
        f"16 seeds, run time without compile: vmapped {vmapped:.1f} s, sequential "
        f"{sequential:.1f} s (speed-up {sequential / vmapped:.2f}x)"
    )


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    use_unrolled_threefry()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps of the one-seed runs")
    parser.add_argument("--seed-steps", type=int, default=3, help="steps of the 16-seed runs")
    parser.add_argument("--full-steps", type=int, default=3, help="steps of the full model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["STAGEWISE_CACHE_DIR"] = cache
        from simulate.runtime import enable_compilation_cache

        enable_compilation_cache()
        main(args.steps, args.seed_steps, args.full_steps)
