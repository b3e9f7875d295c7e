"""Figure mean-field-threshold: clustering onset against the noise level (spec ``mean_field.md``
§7 mean-field-threshold, §5.3; theory in ``theory.mean_field.energy``).

Isotropic attention (A = I) on S^1, no FFN (W = 0), float64 by default. (a) The long-depth order
parameter ``r_1`` against ``tau/tau_c(beta)`` for several ``beta``, from a uniform start and from a
clustered start (hysteresis), with the derived threshold ``tau_c = I_1(beta)/beta`` and the
mean-field stationary branch. (b) The initial growth rate of Fourier mode 1, measured from a
slightly perturbed uniform (lattice) state with common noise and antithetic perturbations,
against the line ``I_1(beta)/beta - tau``. (c) ``r_1`` against depth for the middle ``beta``.

Depth and steps are set in units of ``1/tau_c(beta)``: the growth rate of mode 1 is
``tau_c - tau``, so every ``beta`` gets the same number of e-folds at the same ``tau/tau_c``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.mean_field import flow as mff
from theory.mean_field.energy import (
    besseli,
    landau_amplitude,
    spinodal_tau,
    stationary_order_parameter,
    tau_c,
    tau_c_euler,
    tricritical_beta,
    uniform_order_parameter_mean,
    validate_beta,
)
from theory.validation import require

FIGURE_ID = "mean-field-threshold"
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


@dataclass(frozen=True)
class ThresholdConfig:
    """Clustering onset of the isotropic noisy model on S^1 (project setting, spec §7)."""

    betas: tuple[float, ...] = (1.0, 2.0, 4.0)
    """inverse attention temperatures."""
    tau_ratios: tuple[float, ...] = (0.6, 0.8, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.2, 1.5)
    """noise levels as multiples of tau_c(beta) (increasing)."""
    tokens: int = 2048
    """N, tokens of the long-depth runs."""
    seeds: int = 1
    """noise seeds of the long-depth runs (vmapped)."""
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
    """integrate in float64 (quick: float32)."""
    seed: int = 0
    """first noise seed."""
    quick: bool = False
    """CPU-sized: N = 512, 8 noise levels, depth 100/tau_c, step 0.05/tau_c, float32."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/mean-field-threshold/)."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""
    quiet: bool = False
    """no progress output."""

    def __post_init__(self):
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
        for name in ("seeds", "rate_seeds"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
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

    def resolved(self) -> ThresholdConfig:
        if not self.quick:
            return self
        return replace(
            self,
            tokens=512,
            tau_ratios=(0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.5),
            depth_units=100.0,
            dt_units=0.05,
            rate_tokens=512,
            rate_seeds=8,
            float64=False,
            quick=False,
        )

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def _dtype(cfg):
    return jnp.float64 if cfg.float64 else jnp.float32


def _kernel(cfg, beta):
    return mff.cast_kernel(
        mff.circle_kernel(beta, 1.0, tol=1e-13 if cfg.float64 else 1e-7), _dtype(cfg)
    )


def long_runs(cfg: ThresholdConfig, beta: float):
    """r_1 along depth: (tau, init [uniform, cluster], seed, saved depth) and the depth grid in
    units of 1/tau_c."""
    dtype, tc, N = _dtype(cfg), tau_c(beta), cfg.tokens
    steps = round(cfg.depth_units / cfg.dt_units)
    save = max(1, steps // 200)
    steps -= steps % save
    kernel = _kernel(cfg, beta)

    def one(ratio, cluster, key):
        k_init, k_noise = jax.random.split(key)
        uniform = jax.random.uniform(k_init, (N,), dtype, 0, 2 * jnp.pi)
        bump = cfg.cluster_spread * jax.random.normal(k_init, (N,), dtype)
        th0 = jnp.where(cluster, bump, uniform)
        return mff.circle_flow_keyed(
            th0, k_noise, steps, kernel, ratio * tc, cfg.dt_units / tc, save, mff.order_parameter
        )

    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(cfg.seed, cfg.seed + cfg.seeds))
    program = jax.jit(
        jax.vmap(jax.vmap(jax.vmap(one, (None, None, 0)), (None, 0, None)), (0, None, None))
    )
    r1 = program(jnp.asarray(cfg.tau_ratios, dtype), jnp.asarray([False, True]), keys)
    return np.asarray(r1, float), cfg.dt_units * save * np.arange(steps // save + 1)


def growth_rates(cfg: ThresholdConfig, beta: float):
    """Measured growth rate of mode 1 per tau ratio (``RATE_RULE``) and D(t)/D(0)."""
    dtype, tc, N = _dtype(cfg), tau_c(beta), cfg.rate_tokens
    steps = round(cfg.rate_window / cfg.rate_dt_units)
    save = max(1, steps // 40)
    steps -= steps % save
    kernel = _kernel(cfg, beta)
    lattice = 2 * jnp.pi * (jnp.arange(N, dtype=dtype) + 0.5) / N

    def one(ratio, key):
        def z1(sign):
            th0 = lattice - sign * cfg.rate_eps * jnp.sin(lattice)
            return mff.circle_flow_keyed(
                th0,
                key,
                steps,
                kernel,
                ratio * tc,
                cfg.rate_dt_units / tc,
                save,
                lambda th: jnp.mean(jnp.cos(th)),
            )

        return (z1(1.0) - z1(-1.0)) / 2

    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(cfg.seed, cfg.seed + cfg.rate_seeds) + 10_000)
    program = jax.jit(jax.vmap(lambda r: jnp.mean(jax.vmap(lambda k: one(r, k))(keys), axis=0)))
    D = np.asarray(program(jnp.asarray(cfg.tau_ratios, dtype)), float)
    t = cfg.rate_dt_units / tc * save * np.arange(steps // save + 1)
    rates = np.array([np.polyfit(t, np.log(np.maximum(d, 1e-300)), 1)[0] for d in D])
    return rates, D / D[:, :1], t * tc


def measured_transition(ratios, r1, level: float) -> float:
    """``CLUSTER_RULE``: interpolated crossing of ``level`` by ``r1`` (against increasing ratios)
    after the last clustered point; nan if there is no clustered point followed by an
    unclustered one."""
    ratios, r1 = np.asarray(ratios, float), np.asarray(r1, float)
    above = r1 > level
    if not above[0] or above.all():
        return float("nan")
    i = int(np.argmin(above)) - 1  # last clustered point before the first unclustered one
    return float(ratios[i] + (ratios[i + 1] - ratios[i]) * (r1[i] - level) / (r1[i] - r1[i + 1]))


def susceptibility_fit(ratios, r1_sq, n_tokens: int, start: float) -> float:
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


def compute(cfg: ThresholdConfig) -> tuple[xr.Dataset, dict]:
    run = cfg.resolved()
    ratios = np.asarray(run.tau_ratios)
    r1_series, late, late_sq, rates, rate_curves = [], [], [], [], []
    per_beta = {}
    fine = np.linspace(min(ratios[0], 0.5), max(ratios[-1], 1.2), 41)
    theory = []
    for beta in run.betas:
        r1, depth = long_runs(run, beta)
        window = depth >= run.average_from * depth[-1]
        avg = r1[..., window].mean(-1).mean(-1)  # (tau, init)
        avg_sq = (r1[..., window] ** 2).mean(-1).mean(-1)
        rate, curve, t_rate = growth_rates(run, beta)
        tc = tau_c(beta)
        r1_series.append(r1.mean(2))
        late.append(avg)
        late_sq.append(avg_sq)
        rates.append(rate / tc)
        rate_curves.append(curve)
        theory.append([stationary_order_parameter(beta, f * tc) for f in fine])
        onset = measured_transition(ratios, avg[:, 0], run.cluster_threshold)
        slope, intercept = np.polyfit(ratios, rate / tc, 1)
        below, above = ratios < 1, ratios > 1
        per_beta[f"{beta:g}"] = {
            # derived here: Funk-Hecke at d = 2 (theory.mean_field.energy.tau_c); spec §5.3: I_1/beta
            "tau_c": tc,
            "tau_c_spec": besseli(1, beta) / beta,
            "tau_c_euler_ratio": tau_c_euler(beta, run.dt_units / tc) / tc,
            "measured_transition_ratio": onset,
            "measured_transition_tau": onset * tc,
            "relative_error": onset - 1.0,
            "susceptibility_tau_c_ratio": susceptibility_fit(
                ratios, avg_sq[:, 0], run.tokens, onset if math.isfinite(onset) else 1.0
            ),
            "rate_zero_ratio": float(-intercept / slope),
            "rate_slope": float(slope),
            "clustered_below_uniform_start": bool(np.all(avg[below, 0] > run.cluster_threshold)),
            "unclustered_above_uniform_start": bool(np.all(avg[above, 0] <= run.cluster_threshold)),
            "clustered_above_cluster_start": [
                float(x) for x in ratios[above & (avg[:, 1] > run.cluster_threshold)]
            ],
            "landau_amplitude": landau_amplitude(beta),
            "transition": "continuous" if landau_amplitude(beta) > 0 else "discontinuous",
            "spinodal_ratio": spinodal_tau(beta, tol=1e-4) / tc
            if landau_amplitude(beta) < 0
            else 1.0,
        }
    data = xr.Dataset(
        {
            "r1": (("beta", "tau_ratio", "init", "depth_units"), np.stack(r1_series)),
            "r1_late": (("beta", "tau_ratio", "init"), np.stack(late)),
            "r1_late_sq": (("beta", "tau_ratio", "init"), np.stack(late_sq)),
            "rate": (("beta", "tau_ratio"), np.stack(rates)),
            "rate_curve": (("beta", "tau_ratio", "rate_time"), np.stack(rate_curves)),
            "theory_r1": (("beta", "fine_ratio"), np.asarray(theory)),
        },
        coords={
            "beta": np.asarray(run.betas),
            "tau_ratio": ratios,
            "init": [0, 1],
            "depth_units": depth,
            "rate_time": t_rate,
            "fine_ratio": fine,
        },
    )
    summary = {
        "cluster_rule": CLUSTER_RULE,
        "rate_rule": RATE_RULE,
        "init": {"0": "uniform start", "1": "clustered start"},
        "cluster_threshold": run.cluster_threshold,
        "tokens": run.tokens,
        "uniform_r1_finite_N": uniform_order_parameter_mean(run.tokens),
        "tricritical_beta": tricritical_beta(),
        "float64": run.float64,
        "depth_units": run.depth_units,
        "dt_units": run.dt_units,
        "per_beta": per_beta,
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            b,
            v["tau_c"],
            v["tau_c_euler_ratio"],
            v["measured_transition_ratio"],
            v["susceptibility_tau_c_ratio"],
            v["rate_zero_ratio"],
            v["rate_slope"],
            v["transition"],
            v["spinodal_ratio"],
        ]
        for b, v in summary["per_beta"].items()
    ]
    table = format_table(
        [
            "beta",
            "tau_c",
            "Euler tau_c/tau_c",
            "measured/tau_c",
            "suscept. fit/tau_c",
            "rate zero/tau_c",
            "rate slope",
            "transition",
            "spinodal/tau_c",
        ],
        rows,
    )
    return (
        f"clustering threshold, N = {summary['tokens']} "
        f"(tau_c = I_1(beta)/beta; rule: {summary['cluster_rule']})\n{table}"
    )


def run(cfg: ThresholdConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    betas = data["beta"].values
    ratios = data["tau_ratio"].values
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(betas)))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    for i, b in enumerate(betas):
        ax.plot(
            ratios,
            data["r1_late"].values[i, :, 0],
            "o-",
            color=colors[i],
            label=rf"$\beta={b:g}$, uniform start",
        )
        ax.plot(
            ratios,
            data["r1_late"].values[i, :, 1],
            "s",
            mfc="none",
            color=colors[i],
            label=rf"$\beta={b:g}$, clustered start",
        )
        ax.plot(
            data["fine_ratio"].values, data["theory_r1"].values[i], color=colors[i], lw=0.8, ls="--"
        )
        onset = summary["per_beta"][f"{b:g}"]["measured_transition_ratio"]
        if isinstance(onset, float) and math.isfinite(onset):
            ax.axvline(onset, color=colors[i], ls=":", lw=1)
    ax.axvline(1.0, color="k", lw=1.2, label=r"$\tau_c=I_1(\beta)/\beta$")
    ax.axhline(
        summary["cluster_threshold"],
        color="grey",
        ls="-.",
        lw=0.8,
        label=r"$r_*$ (clustering rule)",
    )
    ax.axhline(
        summary["uniform_r1_finite_N"],
        color="grey",
        ls=":",
        lw=0.8,
        label=r"uniform, finite $N$: $\sqrt{\pi/4N}$",
    )
    ax.plot([], [], "k--", lw=0.8, label="mean field, stationary (clustered branch)")
    ax.plot([], [], "k:", lw=1, label="measured transition")
    ax.set(
        xlabel=r"noise $\tau/\tau_c(\beta)$",
        ylabel=r"$r_1$ (late-depth average)",
        title=f"(a) order parameter, N = {summary['tokens']}",
        ylim=(0, 1.02),
    )
    ax.legend(fontsize=6.5, loc="lower left")
    ax = axes[1]
    for i, b in enumerate(betas):
        ax.plot(ratios, data["rate"].values[i], "o", color=colors[i], label=rf"$\beta={b:g}$")
    x = np.linspace(ratios[0], ratios[-1], 10)
    ax.plot(x, 1 - x, "k-", lw=1, label=r"$(I_1(\beta)/\beta-\tau)/\tau_c = 1-\tau/\tau_c$")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(1, color="k", lw=0.5)
    ax.set(
        xlabel=r"noise $\tau/\tau_c(\beta)$",
        ylabel=r"growth rate of mode 1 $/\tau_c$",
        title="(b) linear growth rate from a perturbed uniform state",
    )
    ax.legend(fontsize=7)
    ax = axes[2]
    mid = len(betas) // 2
    shades = plt.cm.coolwarm(np.linspace(0, 1, len(ratios)))
    for j, r in enumerate(ratios):
        ax.plot(
            data["depth_units"].values,
            data["r1"].values[mid, j, 0],
            color=shades[j],
            lw=0.9,
            label=rf"$\tau/\tau_c={r:g}$",
        )
    ax.set(
        xlabel=r"depth $t\,\tau_c$",
        ylabel=r"$r_1$ (uniform start)",
        title=rf"(c) $r_1$ along depth, $\beta={betas[mid]:g}$",
        ylim=(0, 1.02),
    )
    ax.legend(fontsize=6, ncol=2)
    fig.suptitle("Noisy mean-field attention on $S^1$, A = I, W = 0: clustering threshold")
    fig.tight_layout()
    return fig
