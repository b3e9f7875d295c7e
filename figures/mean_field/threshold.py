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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from simulate.mean_field.threshold import (
    CLUSTER_RULE,
    RATE_RULE,
    SEED_RULE,
    ThresholdSetting,
    growth_rates,
    long_runs,
    measured_transition,
    rate_line,
    susceptibility_fit,
)
from theory.mean_field.energy import (
    besseli,
    landau_amplitude,
    spinodal_tau,
    stationary_order_parameter,
    tau_c,
    tau_c_euler,
    tricritical_beta,
    uniform_order_parameter_mean,
)

QUICK = {
    "tokens": 512,
    "tau_ratios": (0.6, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.5),
    "depth_units": 100.0,
    "dt_units": 0.05,
    "rate_tokens": 512,
    "rate_seeds": 8,
    "float64": False,
}
"""CPU setting: N = 512, 8 noise levels, depth 100/tau_c, step 0.05/tau_c, 8 growth-rate seeds,
float32."""


@dataclass(frozen=True)
class ThresholdConfig(FigureOptions):
    """Clustering onset of the isotropic noisy model on S^1 (project setting, spec §7); quick:
    N = 512, 8 noise levels, depth 100/tau_c, step 0.05/tau_c, float32."""

    setting: Annotated[ThresholdSetting, Flat] = ThresholdSetting()
    """the runs (project setting)."""

    def resolved(self) -> ThresholdSetting:
        """The setting that runs: ``setting``, or its quick version with ``--quick``."""
        return self.quick_setting("setting", QUICK)


def compute(cfg: ThresholdConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    del run_dir  # nothing is stored below the figure's own run
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
        slope, zero = rate_line(ratios, rate / tc)
        below, above = ratios < 1, ratios > 1
        per_beta[f"{beta:g}"] = {
            # derived here: Funk-Hecke at d = 2 (theory.mean_field.energy.tau_c);
            # spec §5.3: I_1/beta
            "tau_c": tc,
            "tau_c_spec": besseli(1, beta) / beta,
            "tau_c_euler_ratio": tau_c_euler(beta, run.dt_units / tc) / tc,
            "measured_transition_ratio": onset,
            "measured_transition_tau": onset * tc,
            "relative_error": onset - 1.0,
            "susceptibility_tau_c_ratio": susceptibility_fit(
                ratios, avg_sq[:, 0], run.tokens, onset if math.isfinite(onset) else 1.0
            ),
            "rate_zero_ratio": zero,
            "rate_slope": slope,
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
            # panel (a) at the grid's noise levels: measured from a uniform start, mean field
            "r1_uniform_start": avg[:, 0],
            "r1_stationary": [stationary_order_parameter(beta, f * tc) for f in ratios],
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
        "seed_rule": SEED_RULE,
        "init": {"0": "uniform start", "1": "clustered start"},
        "cluster_threshold": run.cluster_threshold,
        "tokens": run.tokens,
        "uniform_r1_finite_N": uniform_order_parameter_mean(run.tokens),
        "tricritical_beta": tricritical_beta(),
        "float64": run.float64,
        "depth_units": run.depth_units,
        "dt_units": run.dt_units,
        "tau_ratios": ratios,
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


THRESHOLD_TOLERANCE = 0.05
"""a measured threshold against tau_c: within 5%, the quick grid's step about tau_c (the Euler
step alone shifts it by -dt tau_c/2, -2.4% in --quick)."""
SLOPE_TOLERANCE = 0.1
"""the mode-1 rate's slope against -1: the linearisation is exact for N -> oo, dt -> 0; 10% for
finite N and the Euler step."""
BRANCH_TOLERANCE = 0.05
"""r_1 against the mean-field stationary branch: within 0.05, about the finite-N fluctuation
sqrt(pi/4N) of r_1 at N = 512."""


def predictions(summary: dict) -> list[Prediction]:
    """Per beta (§5.3): the measured clustering transition, the susceptibility fit and the zero
    of the mode-1 growth rate against tau_c = I_1(beta)/beta, the rate's slope against -1, and
    the late-depth r_1 below tau_c against the mean-field stationary branch."""
    rows = []
    ratios = np.asarray(summary.get("tau_ratios", []), float)
    for beta, v in summary["per_beta"].items():
        rows += [
            Prediction(
                f"{what}, beta = {beta}, N = {summary['tokens']}: tau_c = I_1(beta)/beta "
                "(units of tau_c)",
                1.0,
                v[key],
                THRESHOLD_TOLERANCE,
                f"{how}; within 5%, the grid step about tau_c",
            )
            for what, key, how in (
                (
                    "clustering transition from a uniform start",
                    "measured_transition_ratio",
                    "CLUSTER_RULE (late r_1 crossing r_*, interpolated on the tau grid)",
                ),
                (
                    "susceptibility fit 1/(N <r_1^2>) = 1 - tau_c/tau above the transition",
                    "susceptibility_tau_c_ratio",
                    "least squares on the unclustered noise levels",
                ),
                (
                    "zero of the mode-1 growth rate",
                    "rate_zero_ratio",
                    "RATE_RULE rates, zero of their straight-line fit",
                ),
            )
        ]
        rows.append(
            Prediction(
                f"slope of the mode-1 growth rate / tau_c against tau/tau_c, beta = {beta}: -1",
                -1.0,
                v["rate_slope"],
                SLOPE_TOLERANCE,
                "RATE_RULE rates, slope of their straight-line fit; rate I_1(beta)/beta - tau "
                "for N -> oo: within 10%",
            )
        )
        measured = np.asarray(v.get("r1_uniform_start", []), float)
        branch = np.asarray(v.get("r1_stationary", []), float)
        rows += [
            Prediction(
                f"late-depth r_1 from a uniform start at tau = {ratio:g} tau_c, beta = {beta}, "
                f"N = {summary['tokens']}: mean-field stationary branch",
                branch[j],
                measured[j],
                BRANCH_TOLERANCE,
                "r_1 averaged over the late depth and seeds (CLUSTER_RULE's average); within "
                "0.05, about the finite-N fluctuation of r_1",
                "difference",
            )
            for j, ratio in enumerate(ratios)
            if ratio < 1 and j < min(measured.size, branch.size)
        ]
    return rows


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


FIGURE = Figure(
    id="mean-field-threshold",
    paper="mean-field",
    description="clustering onset r_1 vs tau/tau_c with tau_c = I_1(beta)/beta, mode-1 growth rate",
    config=ThresholdConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read="(a) The late-depth order parameter r_1 against the noise tau/tau_c(beta), one "
    "colour per beta: circles from a uniform start, open squares from a clustered start "
    "(hysteresis), dashed the mean-field stationary (clustered) branch; black: the derived "
    "threshold tau_c = I_1(beta)/beta, coloured dotted: the measured transitions, grey "
    "dash-dotted: the clustering rule's r_*, grey dotted: the finite-N level sqrt(pi/4N) of a "
    "uniform state. r_1 is O(1) below tau_c and O(N^-1/2) above. (b) The growth rate of Fourier "
    "mode 1 from a slightly perturbed uniform state, in units of tau_c, against tau/tau_c, beside "
    "the line 1 - tau/tau_c: it should cross zero at tau_c with slope -1. (c) r_1 along the depth "
    "(units 1/tau_c) for the middle beta, one colour per noise level: growth and saturation below "
    "tau_c, none above.",
    predictions=predictions,
)
