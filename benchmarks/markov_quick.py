"""markov training at the incremental figures' --quick settings: steps per second of one seed,
logging included, compile apart (``simulate.train.train`` without a store). The rows are the
training runs that dominate the quick incremental figures' wall time: the float64 student of
incremental-minimal / -importance (d = 50, q = 1e-9), a float32 student (q = 1e-3, as in
incremental-timing), the 12-gram minimal baseline of incremental-dataset-size and the full
transformer with its 8-gram baseline of incremental-full.

Run: python -m benchmarks.markov_quick [--steps 100]
"""

import argparse
import os
import tempfile

from benchmarks.markov_training import timed
from simulate.incremental.markov_training import MarkovTrainConfig
from simulate.runtime import use_float64, use_unrolled_threefry

SETTINGS = {
    "minimal float64 (incremental-importance)": {"log_every": 5},
    "minimal float32 q = 1e-3 (incremental-timing)": {"log_every": 5, "query_scale": 1e-3},
    "minimal 12-gram baseline (incremental-dataset-size)": {
        "vocab": 20,
        "blocks": (4, 4, 4),
        "batch": 512,
        "validation": 512,
        "context": 12,
    },
    "full (incremental-full)": {
        "vocab": 20,
        "blocks": (4, 4, 4),
        "model": "full",
        "query_scale": None,
        "batch": 128,
    },
    "full 8-gram baseline (incremental-full)": {
        "vocab": 20,
        "blocks": (4, 4, 4),
        "model": "full",
        "query_scale": None,
        "batch": 128,
        "context": 8,
    },
}
"""name: MarkovTrainConfig fields on top of d = 50, batch 256, validation 256, log every 10."""


def steps_per_second(steps: int, **kw) -> tuple[float, float]:
    """(steps per second, compile seconds) of one seed."""
    kw = {"vocab": 50, "batch": 256, "validation": 256, "log_every": 10, **kw}
    compile_s, run_s = timed(MarkovTrainConfig(**kw, steps=steps, chunk=steps), [0])
    return steps / run_s, compile_s


def main(steps: int) -> None:
    print(f"{'setting':55s} {'compile s':>9s} {'steps/s':>8s}")
    for name, kw in SETTINGS.items():
        rate, compile_s = steps_per_second(steps, **kw)
        print(f"{name:55s} {compile_s:9.2f} {rate:8.2f}", flush=True)


if __name__ == "__main__":
    use_float64()
    use_unrolled_threefry()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per setting")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["STAGEWISE_CACHE_DIR"] = cache
        from simulate.runtime import enable_compilation_cache

        enable_compilation_cache()
        main(args.steps)
