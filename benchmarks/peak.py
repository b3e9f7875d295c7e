"""The machine's float32 matmul peak (a large ``jnp.dot`` timed in this run, FLOP/s = 2 n^3 / t)
and the markov transformers' training step at the paper batch of 3000 (float32) as a fraction of
it. The fraction uses the analytic count of ``benchmarks.transformer``; XLA's own count
(``cost_analysis()["flops"]``) is given beside it. Ratio: achieved / peak FLOP/s."""

from __future__ import annotations

import time

import jax

from benchmarks.table import Row
from benchmarks.transformer import (
    PAPER_BATCH,
    analytic_flops,
    dot_operands,
    lowered,
    paper_config,
    training_step,
    xla_flops,
)

SIZES = {
    # (matmul n, dot repeats, models, timed steps)
    "full": (2048, 5, ("minimal", "full"), 10),
    "quick": (1024, 5, ("minimal",), 3),
}


def best_seconds(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls of ``fn`` (after one untimed warm-up call)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_peak(n: int, repeats: int) -> float:
    """float32 FLOP/s of an n x n by n x n ``jnp.dot``."""
    a, b = dot_operands(n)
    dot = jax.jit(jax.numpy.dot)
    return 2.0 * n**3 / best_seconds(lambda: dot(a, b), repeats)


def step_seconds(model: str, steps: int, batch: int = PAPER_BATCH):
    """(seconds per step, compile seconds, analytic FLOPs, XLA FLOPs) of one training step."""
    cfg = paper_config(model, batch)
    step = training_step(cfg)
    start = time.perf_counter()
    compiled = lowered(step).compile()
    compile_s = time.perf_counter() - start
    keys = jax.random.split(jax.random.PRNGKey(1), steps + 1)
    params, opt_state = step.params, step.opt_state
    params, opt_state, loss = compiled(params, opt_state, keys[0])  # warm-up
    jax.block_until_ready(loss)
    start = time.perf_counter()
    for k in keys[1:]:
        params, opt_state, loss = compiled(params, opt_state, k)
    jax.block_until_ready((params, loss))
    per_step = (time.perf_counter() - start) / steps
    return per_step, compile_s, analytic_flops(cfg, step.model), xla_flops(compiled)


def measure(mode: str) -> list[Row]:
    n, repeats, models, steps = SIZES[mode]
    peak = matmul_peak(n, repeats)
    rows = [
        Row("float32 matmul peak", f"jnp.dot {n}x{n}, best of {repeats}", peak / 1e9, "GFLOP/s")
    ]
    for model in models:
        per_step, compile_s, analytic, xla = step_seconds(model, steps)
        achieved = analytic / per_step
        rows.append(
            Row(
                "transformer step vs peak",
                f"markov {model}, batch {PAPER_BATCH}, float32, {steps} steps",
                achieved / 1e9,
                "GFLOP/s",
                peak / 1e9,
                achieved / peak,
                f"analytic count used: {analytic:.3g} FLOP/step (XLA count {xla:.3g}: "
                f"{xla / per_step / peak:.2f} of peak); {per_step * 1e3:.0f} ms/step, "
                f"compile {compile_s:.1f} s apart",
            )
        )
    return rows
