"""One vmapped solve of 64 noise seeds against 64 single solves of one compiled program
(reduced head ODE, paper setting). Run: python benchmarks/vmap_seeds.py
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from simulate.incremental.head_ode import (
    _solve_batch,
    initial_logits,
    log_grid,
    plateau_levels,
    solve,
)
from simulate.measure.stages import midpoints
from simulate.runtime import use_float64
from theory.incremental.heads import HeadSetting


def main(n: int = 64, t_max: float = 500.0):
    setting = HeadSetting()
    eps = setting.window * 1e-6
    batch = solve(setting, [eps] * n, np.arange(n), t_max, n_save=400)
    print(
        f"{n} seeds vmapped: compile {batch.compile_seconds:.2f} s, run {batch.run_seconds:.2f} s"
    )

    G = jnp.asarray(setting.target())[None]
    mids = jnp.asarray(midpoints(plateau_levels(setting)))[None]
    grid, tm = jnp.asarray(log_grid(t_max, 400)), jnp.asarray(t_max)
    theta = initial_logits(setting, np.full(n, eps), np.arange(n))
    kw = {"power": 1, "h": setting.h, "progress": False, "tied": 1}
    start = time.perf_counter()
    single = _solve_batch.lower(G, theta[:1], mids, grid, tm, **kw).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for k in range(n):
        jax.block_until_ready(single(G, theta[k : k + 1], mids, grid, tm))
    print(
        f"{n} single solves: compile {compile_s:.2f} s once, "
        f"run {time.perf_counter() - start:.2f} s"
    )


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    main()
