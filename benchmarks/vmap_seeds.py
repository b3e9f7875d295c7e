"""One vmapped solve of 64 noise seeds against 64 single solves of one compiled program
(reduced head ODE, paper setting). Run: python benchmarks/vmap_seeds.py
"""

import time

import numpy as np

from simulate.incremental.head_ode import solve
from simulate.runtime import use_float64, use_unrolled_threefry
from theory.incremental.heads import HeadSetting


def main(n: int = 64, t_max: float = 500.0):
    setting = HeadSetting()
    eps = setting.window * 1e-6
    batch = solve(setting, [eps] * n, np.arange(n), t_max, n_save=400)
    print(
        f"{n} seeds vmapped: compile {batch.compile_seconds:.2f} s, run {batch.run_seconds:.2f} s"
    )

    first = solve(setting, [eps], [0], t_max, n_save=400)  # compiles the one-seed programs
    start = time.perf_counter()
    for k in range(n):
        solve(setting, [eps], [k], t_max, n_save=400)
    print(
        f"{n} single solves: compile {first.compile_seconds:.2f} s once, "
        f"run {time.perf_counter() - start:.2f} s"
    )


if __name__ == "__main__":
    use_float64()  # as every stagewise entry point (float64 used to be switched on at import)
    use_unrolled_threefry()
    main()
