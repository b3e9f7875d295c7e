"""Clustering onset of the noisy model against the noise level (spec ``mean_field.md`` §5.3, §7
mean-field-threshold; theory in ``theory.mean_field.energy``): the simulations and the rules that
turn them into a measured transition and a measured growth rate.

Isotropic attention (A = I) on S^1, no FFN (W = 0). ``long_runs``: the order parameter ``r_1``
along a long depth from a uniform start and from a clustered start (hysteresis).
``growth_rates``: the initial growth rate of Fourier mode 1 from a slightly perturbed uniform
(lattice) state with common noise and antithetic perturbations. Depth and steps are set in units
of ``1/tau_c(beta)``: the growth rate of mode 1 is ``tau_c - tau``, so every ``beta`` gets the
same number of e-folds at the same ``tau/tau_c``.

Seeds: noise key ``PRNGKey(seed + s)`` for the long runs (split into an initial-token key and a
Brownian key), ``PRNGKey(seed + s + 10_000)`` for the growth-rate runs (``SEED_RULE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from simulate.mean_field import flow as mff
from simulate.measure.fits import exponential_rate
from simulate.runner import Seeds
from theory.mean_field.energy import tau_c, validate_beta
from theory.validation import require

CLUSTER_RULE = (
    "clustered iff the depth average of r_1 over the last (1 - average_from) of the "
    "depth exceeds cluster_threshold; measured transition = linear interpolation of "
    "that average (uniform start) across cluster_threshold between the last clustered "
    "and the first unclustered tau"
)
RATE_RULE = (
    "rate = least-squares slope of log D(t), D = seed mean of (Re Z_1^+ - Re Z_1^-)/2 "
    "from lattice starts theta = phi -+ eps sin(phi) under common noise, over "
    "[0, rate_window/tau_c]"
)
SEED_RULE = (
    "long runs: PRNGKey(seed + s) split into (initial tokens, Brownian increments); "
    "growth-rate runs: PRNGKey(seed + s + 10000) for the Brownian increments"
)
RATE_SEED_OFFSET = 10_000
"""offset of the growth-rate runs' seeds from the long runs' (``SEED_RULE``)."""
LONG_RUN_SAVES = 200
"""about this many saved depth points per long run."""
RATE_RUN_SAVES = 40
"""about this many saved points per growth-rate run."""


@dataclass(frozen=True)
class ThresholdSetting(Seeds):
    """Clustering onset of the isotropic noisy model on S^1 (project setting, spec §7)."""

    seeds: int = 1
    """noise seeds of the long-depth runs (vmapped)."""
    betas: tuple[float, ...] = (1.0, 2.0, 4.0)
    """inverse attention temperatures."""
    tau_ratios: tuple[float, ...] = (0.6, 0.8, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.2, 1.5)
    """noise levels as multiples of tau_c(beta) (increasing)."""
    tokens: int = 2048
    """N, tokens of the long-depth runs."""
    depth_units: float = 150.0
    """depth of the long runs, in units of 1/tau_c(beta)."""
    dt_units: float = 0.04
    """Euler-Maruyama step, in units of 1/tau_c(beta) (shifts the threshold by about
    -dt tau_c/2, see theory.mean_field.energy.tau_c_euler)."""
    average_from: float = 0.5
    """r_1 is averaged over depth >= average_from x depth."""
    cluster_threshold: float = 0.2
    """r_*: clustered iff the averaged r_1 exceeds it (finite N: a uniform state has
    E r_1 = sqrt(pi/(4N)), enhanced by 1/sqrt(1 - tau_c/tau) near tau_c)."""
    cluster_spread: float = 0.3
    """angular standard deviation (rad) of the clustered start."""
    rate_tokens: int = 2048
    """N of the growth-rate runs."""
    rate_seeds: int = 16
    """noise seeds of the growth-rate runs."""
    rate_window: float = 2.0
    """fit window of the growth rate, in units of 1/tau_c."""
    rate_dt_units: float = 0.01
    """Euler-Maruyama step of the growth-rate runs, in units of 1/tau_c."""
    rate_eps: float = 0.1
    """lattice perturbation theta = phi -+ eps sin(phi) (mode-1 amplitude eps/2)."""
    float64: bool = True
    """integrate in float64."""

    def __post_init__(self) -> None:
        Seeds.__post_init__(self)
        require(len(self.betas) >= 1, "betas", self.betas, "one or more inverse temperatures")
        for b in self.betas:
            validate_beta(b)
        r = self.tau_ratios
        require(
            len(r) >= 2 and all(x > 0 for x in r) and list(r) == sorted(set(r)),
            "tau_ratios",
            r,
            "two or more increasing ratios > 0",
        )
        for name in ("tokens", "rate_tokens"):
            require(getattr(self, name) >= 16, name, getattr(self, name), "an integer >= 16")
        require(self.rate_seeds >= 1, "rate_seeds", self.rate_seeds, "an integer >= 1")
        for name in (
            "depth_units",
            "dt_units",
            "rate_window",
            "rate_dt_units",
            "rate_eps",
            "cluster_spread",
        ):
            v = getattr(self, name)
            require(math.isfinite(v) and v > 0, name, v, "a number > 0")
        require(
            self.dt_units <= self.depth_units / 10,
            "dt_units",
            self.dt_units,
            f"a step <= depth_units/10 = {self.depth_units / 10}",
        )
        require(
            self.rate_dt_units <= self.rate_window / 10,
            "rate_dt_units",
            self.rate_dt_units,
            f"a step <= rate_window/10 = {self.rate_window / 10}",
        )
        require(
            0 <= self.average_from < 1, "average_from", self.average_from, "a fraction in [0, 1)"
        )
        require(
            0 < self.cluster_threshold < 1,
            "cluster_threshold",
            self.cluster_threshold,
            "an order-parameter level in (0, 1)",
        )
        require(self.rate_eps < 1, "rate_eps", self.rate_eps, "a perturbation in (0, 1)")

    @property
    def dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.float64 if self.float64 else jnp.float32)

    def kernel(self, beta: float) -> mff.CircleKernel:
        """The isotropic kernel's Fourier modes, truncated at the working precision."""
        kernel = mff.circle_kernel(beta, 1.0, tol=1e-13 if self.float64 else 1e-7)
        return mff.cast_kernel(kernel, self.dtype)


def long_runs(setting: ThresholdSetting, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """``r_1`` along depth, shape (tau ratio, init [uniform, clustered], seed, saved depth), and
    the saved depths in units of ``1/tau_c``."""
    dtype, tc, N = setting.dtype, tau_c(beta), setting.tokens
    steps = round(setting.depth_units / setting.dt_units)
    save = max(1, steps // LONG_RUN_SAVES)
    steps -= steps % save
    kernel = setting.kernel(beta)

    def one(ratio: jax.Array, cluster: jax.Array, key: jax.Array) -> jax.Array:
        k_init, k_noise = jax.random.split(key)
        uniform = jax.random.uniform(k_init, (N,), dtype, 0, 2 * jnp.pi)
        bump = setting.cluster_spread * jax.random.normal(k_init, (N,), dtype)
        th0 = jnp.where(cluster, bump, uniform)
        dt = setting.dt_units / tc
        return mff.circle_flow_keyed(
            th0, k_noise, steps, kernel, ratio * tc, dt, save, mff.order_parameter
        )

    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(setting.seed, setting.seed + setting.seeds))
    program = jax.jit(
        jax.vmap(jax.vmap(jax.vmap(one, (None, None, 0)), (None, 0, None)), (0, None, None))
    )
    r1 = program(jnp.asarray(setting.tau_ratios, dtype), jnp.asarray([False, True]), keys)
    return np.asarray(r1, float), setting.dt_units * save * np.arange(steps // save + 1)


def growth_rates(
    setting: ThresholdSetting, beta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Measured growth rate of mode 1 per tau ratio (``RATE_RULE``), ``D(t)/D(0)`` per ratio,
    and the saved times in units of ``1/tau_c``."""
    dtype, tc, N = setting.dtype, tau_c(beta), setting.rate_tokens
    steps = round(setting.rate_window / setting.rate_dt_units)
    save = max(1, steps // RATE_RUN_SAVES)
    steps -= steps % save
    kernel = setting.kernel(beta)
    lattice = 2 * jnp.pi * (jnp.arange(N, dtype=dtype) + 0.5) / N

    def one(ratio: jax.Array, key: jax.Array) -> jax.Array:
        def z1(sign: float) -> jax.Array:
            th0 = lattice - sign * setting.rate_eps * jnp.sin(lattice)
            return mff.circle_flow_keyed(
                th0,
                key,
                steps,
                kernel,
                ratio * tc,
                setting.rate_dt_units / tc,
                save,
                lambda th: jnp.mean(jnp.cos(th)),
            )

        return (z1(1.0) - z1(-1.0)) / 2

    first = setting.seed + RATE_SEED_OFFSET
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(first, first + setting.rate_seeds))
    program = jax.jit(jax.vmap(lambda r: jnp.mean(jax.vmap(lambda k: one(r, k))(keys), axis=0)))
    D = np.asarray(program(jnp.asarray(setting.tau_ratios, dtype)), float)
    t = setting.rate_dt_units / tc * save * np.arange(steps // save + 1)
    rates = np.array([exponential_rate(t, d) for d in D])
    return rates, D / D[:, :1], t * tc


def measured_transition(ratios: ArrayLike, r1: ArrayLike, level: float) -> float:
    """``CLUSTER_RULE``: interpolated crossing of ``level`` by ``r1`` (against increasing ratios)
    after the last clustered point; nan if there is no clustered point followed by an
    unclustered one."""
    ratios, r1 = np.asarray(ratios, float), np.asarray(r1, float)
    above = r1 > level
    if not above[0] or above.all():
        return float("nan")
    i = int(np.argmin(above)) - 1  # last clustered point before the first unclustered one
    return float(ratios[i] + (ratios[i + 1] - ratios[i]) * (r1[i] - level) / (r1[i] - r1[i + 1]))


def susceptibility_fit(ratios: ArrayLike, r1_sq: ArrayLike, n_tokens: int, start: float) -> float:
    """``tau_c/tau`` from the fluctuations above the transition: ``1/(N <r_1^2>) = 1 -
    tau_c/tau`` (``theory.mean_field.energy.uniform_order_parameter_mean``) fitted linearly in
    ``1/tau`` over ratios > ``start``; returns the fitted ``tau_c`` in units of the derived one
    (nan with fewer than two points)."""
    ratios, r1_sq = np.asarray(ratios, float), np.asarray(r1_sq, float)
    sel = ratios > start
    if sel.sum() < 2:
        return float("nan")
    slope, intercept = np.polyfit(1 / ratios[sel], 1 / (n_tokens * r1_sq[sel]), 1)
    return float(-slope / intercept) if intercept > 0 else float("nan")


def rate_line(ratios: ArrayLike, rates: ArrayLike) -> tuple[float, float]:
    """``(slope, zero)`` of the least-squares line of the growth rates (in units of ``tau_c``)
    against ``tau/tau_c``: the theory line ``1 - tau/tau_c`` has slope -1 and its zero at 1."""
    slope, intercept = np.polyfit(np.asarray(ratios, float), np.asarray(rates, float), 1)
    return float(slope), float(-intercept / slope)
