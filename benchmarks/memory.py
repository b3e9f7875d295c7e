"""Peak memory (maximum resident set) of the full transformer's training step at the paper batch
of 3000, float32, measured in a subprocess through ``resource.getrusage(RUSAGE_CHILDREN)
.ru_maxrss``, beside a subprocess that only imports JAX and runs one tiny op. Each child runs
under its own wrapper process, so nothing else this benchmark starts counts. Ratio: step / JAX
alone."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.table import Row

WRAPPER = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
JAX_ONLY = "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
STEPS = 2


def full_step(steps: int = STEPS) -> None:
    """Compile and run ``steps`` training steps of the full model (the measured child)."""
    import jax

    from benchmarks.transformer import paper_config, training_step
    from simulate.runtime import use_float64, use_unrolled_threefry

    use_float64()  # as every entry point; the step itself is float32
    use_unrolled_threefry()
    step = training_step(paper_config("full"))
    params, opt_state = step.params, step.opt_state
    for k in jax.random.split(jax.random.PRNGKey(1), steps):
        params, opt_state, loss = step.fn(params, opt_state, k)
    jax.block_until_ready((params, loss))


def peak_kib(code: str) -> int:
    """ru_maxrss (KiB on Linux) of ``python -c code`` run in a wrapper process."""
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def measure(mode: str) -> list[Row]:
    del mode  # one size: the paper's batch
    base = peak_kib(JAX_ONLY)
    step = peak_kib("from benchmarks.memory import full_step; full_step()")
    gib = 1024**2
    return [
        Row(
            "peak memory",
            f"markov full transformer, batch 3000, float32, {STEPS} steps (baseline: JAX alone)",
            step / gib,
            "GiB",
            base / gib,
            step / base,
            f"ratio: step / JAX alone; {(step - base) / gib:.2f} GiB above JAX alone",
        )
    ]
