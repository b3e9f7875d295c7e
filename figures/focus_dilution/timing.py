"""Figure focus-dilution-timing: stage onsets against ln(1/eps) and the Stage I-II growth rates
(spec ``focus_dilution.md`` §7 focus-dilution-timing; theory §5.2-5.3; issue 17 item 3).

(a) measured onsets of Stages I and II (every eps and seed) against ln(1/eps), with lines of the
predicted slopes 1/sigma and 1/sigma + 1/c through the mean of their points (the leading order
leaves the intercepts open) and the onsets with their O(1) offsets predicted from each run's
initial parameters (crosses); the fitted slopes in the legend; (b) ln ||WQ WK^T|| against t for
every eps with the predicted slope 2c drawn over each run's exponential window; (c) the same for
||(W0, W1)||, the distance from the origin, with slope sigma. The table puts every measured onset
I-IV (mean over seeds, per eps) beside the leading order and the onsets with offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from figures.focus_dilution.common import (
    RATE_RULE,
    RATE_TOLERANCE,
    STAGES,
    FlowSetting,
    check_horizon,
    flow_seconds,
    offset_onset_predictions,
    onset_predictions,
)
from simulate.focus_dilution.flow import initial_batch, solve_flow, time_grid
from simulate.focus_dilution.measure import (
    ONSET_RULES,
    RATE_WINDOW_RULE,
    measured_rates,
    run_onsets,
)
from simulate.focus_dilution.predictions import OFFSET_RULE, leading_onsets, predictions
from simulate.measure.fits import linear_slope
from theory.focus_dilution.stages import second_critical_point, stage_one_rate, stage_two_rate
from theory.validation import require

FIGURE_ID = "focus-dilution-timing"


@dataclass(frozen=True)
class TimingConfig(FigureOptions):
    """Default pi, lambda = 0.5; eps in {1e-2, ..., 1e-6} (--eps-grid; --eps is not used), 3 seeds
    each, float64, all runs in one vmapped diffrax program. --quick: eps in {1e-2, 1e-4, 1e-6}, one
    seed, 1200 saved times."""

    flow: Annotated[FlowSetting, Flat] = FlowSetting(seeds=3, samples=2000)
    """the population flow (its eps is not used: see --eps-grid)."""
    eps_grid: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
    """init scales (each in (0, 1))."""
    horizon: float = 1.3
    """integrate to this multiple of the predicted Stage-II onset at the smallest eps."""

    def __post_init__(self):
        require(
            len(self.eps_grid) >= 2 and all(0 < e < 1 for e in self.eps_grid),
            "eps_grid",
            self.eps_grid,
            "two or more init scales in (0, 1)",
        )
        check_horizon(self.horizon, "t_II")

    def grid(self) -> tuple[tuple[float, ...], int, int]:
        """Init scales, seeds per scale and saved times per run (--quick: 1e-2, 1e-4, 1e-6; 1;
        1200)."""
        return (
            tuple(self.quick_or("eps_grid", (1e-2, 1e-4, 1e-6))),
            self.quick_or("flow.seeds", 1),
            self.quick_or("flow.samples", 1200),
        )


def compute(cfg: TimingConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    pi, P = cfg.flow.chain()
    sigma, c = float(stage_one_rate(pi)), float(stage_two_rate(pi, P))
    g = float(second_critical_point(pi).g)
    eps_grid, n_seeds, samples = cfg.grid()
    t_max = cfg.horizon * (1 / sigma + 1 / c) * np.log(1 / min(eps_grid))
    eps = [e for e in eps_grid for _ in range(n_seeds)]
    seeds = [s for _ in eps_grid for s in cfg.flow.seed_ids[:n_seeds]]
    init = initial_batch(pi.size, cfg.flow.width, cfg.flow.key_width, eps, seeds)
    data = solve_flow(
        pi,
        P,
        eps,
        seeds,
        time_grid(t_max, samples),
        init=init,
    )
    # the offsets' constants do not depend on eps: one call predicts every run
    pred = predictions(pi, P, max(eps_grid), init=init)
    leading = np.array(
        [leading_onsets(pi, P, e, pred["mu_IV"], pred["stage_three_delay"]) for e in eps]
    )
    keep = [
        "loss",
        "sv_WQK",
        "outer_norm",
        "focus_mass",
        "attention_entropy",
        "sv_W0",
        "pi",
        "solver_steps",
    ]
    data = data[keep]
    onsets = run_onsets(data)
    data["onset"] = (("run", "stage"), onsets)
    data = data.assign_coords(stage=list(STAGES))
    rates = [measured_rates(data.isel(run=r), g) for r in range(len(eps))]
    L = np.log(1 / np.asarray(eps))
    smallest = [r for r, e in enumerate(eps) if e == min(eps_grid)]
    meas_sigma = float(np.mean([rates[r]["sigma"] for r in smallest]))
    meas_c = float(np.mean([rates[r]["c"] for r in smallest]))
    summary = {
        **flow_seconds(data),
        "setting": {
            "pi": cfg.flow.pi,
            "lambda": cfg.flow.lam,
            "eps": list(eps_grid),
            "seeds": n_seeds,
            "m": cfg.flow.width,
            "m_k": cfg.flow.key_width,
            "t_max": t_max,
        },
        "onset_rules": dict(ONSET_RULES),
        "rate_rule": RATE_WINDOW_RULE,
        "sigma": sigma,
        "c": c,
        "slope_I": {"predicted": 1 / sigma, "measured": linear_slope(L, onsets[:, 0])},
        "slope_II": {"predicted": 1 / sigma + 1 / c, "measured": linear_slope(L, onsets[:, 1])},
        "rates_at_smallest_eps": {
            "eps": min(eps_grid),
            "sigma_measured": meas_sigma,
            "sigma_predicted": sigma,
            "c_measured": meas_c,
            "c_predicted": c,
        },
        "rates_per_run": rates,
        "onsets_per_run": onsets,
        "onsets_leading_per_run": leading,
        "onsets_offset_per_run": pred["onsets_offset_per_seed"],
        "offset_rule": OFFSET_RULE,
        "offset_amplitudes_per_run": pred["offset_amplitudes_per_seed"],
        "offset_constants": pred["offset_constants"],
        "eps_per_run": eps,
        "solver_steps": data["solver_steps"].values,
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            name,
            summary[key]["predicted"],
            summary[key]["measured"],
            float(summary[key]["measured"]) / summary[key]["predicted"],
        ]
        for name, key in (
            ("d t_I / d ln(1/eps) (1/sigma)", "slope_I"),
            ("d t_II / d ln(1/eps) (1/sigma + 1/c)", "slope_II"),
        )
    ]
    r = summary["rates_at_smallest_eps"]
    rows += [
        [
            f"sigma at eps = {r['eps']:g}",
            r["sigma_predicted"],
            r["sigma_measured"],
            float(r["sigma_measured"]) / r["sigma_predicted"],
        ],
        [
            f"c at eps = {r['eps']:g}",
            r["c_predicted"],
            r["c_measured"],
            float(r["c_measured"]) / r["c_predicted"],
        ],
    ]
    text = (
        f"{FIGURE_ID}: onsets against ln(1/eps), eps = {summary['setting']['eps']}\n"
        + format_table(["quantity", "predicted", "measured", "meas/pred"], rows)
    )
    if "offset_rule" not in summary:  # a run stored before issue 17
        return text
    return (
        text
        + "\n\nStage onsets, mean over seeds (pred (offsets): "
        + summary["offset_rule"]
        + ")\n"
        + format_table(list(ONSET_COLUMNS), onset_rows(summary))
    )


ONSET_COLUMNS = (
    "eps",
    "stage",
    "start meas (t)",
    "pred (leading)",
    "meas/pred (leading)",
    "pred (offsets)",
    "meas/pred (offsets)",
)


def _per_eps(summary: dict) -> list[tuple[float, np.ndarray, np.ndarray, np.ndarray]]:
    """Per eps (largest first): the mean over its seeds of the measured, leading-order and
    with-offsets onsets (nan where a seed did not reach a stage)."""
    eps = np.asarray(summary["eps_per_run"], float)
    out = []
    for e in sorted(set(eps.tolist()), reverse=True):
        runs = eps == e
        measured = np.asarray(summary["onsets_per_run"], float)[runs]
        out.append(
            (
                e,
                np.mean(measured, axis=0),
                np.mean(np.asarray(summary["onsets_leading_per_run"], float)[runs], axis=0),
                np.mean(np.asarray(summary["onsets_offset_per_run"], float)[runs], axis=0),
            )
        )
    return out


def onset_rows(summary: dict) -> list[list]:
    """Table rows: eps, stage, measured, leading order, ratio, with offsets, ratio."""
    return [
        [e, stage, m[k], lead[k], m[k] / lead[k], off[k], m[k] / off[k]]
        for e, m, lead, off in _per_eps(summary)
        for k, stage in enumerate(STAGES)
    ]


SLOPE_TOLERANCE = 0.02
SLOPE_RULE = (
    "least-squares slope of the measured onsets against ln(1/eps) over every eps and seed; the "
    "O(1) intercept cancels, what is left are higher-order terms in eps: 2%, as the verification "
    "checks the slopes (stage_onsets_shift_by_the_predicted_slopes_in_log_eps)"
)


def predictions_of(summary: dict) -> list[Prediction]:
    """The slopes of onsets I and II against ln(1/eps); sigma and c at every eps (mean over
    seeds), as panels (b)-(c) draw them over each run's window; every onset at every eps (mean
    over seeds) against the leading order and against the onsets with offsets."""
    rows = [
        Prediction(
            f"d t_{stage} / d ln(1/eps) ({name}, gradient-flow time)",
            float(summary[key]["predicted"]),
            float(summary[key]["measured"]),
            SLOPE_TOLERANCE,
            SLOPE_RULE,
        )
        for stage, key, name in (("I", "slope_I", "1/sigma"), ("II", "slope_II", "1/sigma + 1/c"))
    ]
    eps = np.asarray(summary["eps_per_run"], float)
    for name in ("sigma", "c"):
        measured = np.array([float(r[name]) for r in summary["rates_per_run"]])
        rows += [
            Prediction(
                f"rate {name}, eps = {e:g} (1/time, mean over seeds)",
                float(summary[name]),
                float(np.mean(measured[eps == e])),
                RATE_TOLERANCE,
                RATE_RULE,
            )
            for e in sorted(set(eps.tolist()), reverse=True)
        ]
    if "onsets_offset_per_run" not in summary:  # a run stored before issue 17
        return rows
    for e, measured, leading, offset in _per_eps(summary):
        where = f", eps = {e:g}, mean over seeds"
        rows += onset_predictions(leading, measured, where)
        rows += offset_onset_predictions(offset, measured, where)
    return rows


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    eps = data["eps"].values
    L = np.log(1 / eps)
    onsets = data["onset"].values
    ax = axes[0]
    for k, (key, color, name) in enumerate(
        (("slope_I", "tab:blue", "I"), ("slope_II", "tab:red", "II"))
    ):
        ax.plot(
            L,
            onsets[:, k],
            "o",
            color=color,
            ms=5,
            label=f"onset {name} (fitted slope {summary[key]['measured']:.4g})",
        )
        slope = summary[key]["predicted"]
        ok = np.isfinite(onsets[:, k])
        intercept = np.mean(onsets[ok, k] - slope * L[ok])
        xs = np.linspace(0, L.max() * 1.05, 10)
        ax.plot(
            xs,
            intercept + slope * xs,
            "--",
            color=color,
            label=f"predicted slope {slope:.4g}" + (" (1/sigma)" if k == 0 else " (1/sigma + 1/c)"),
        )
        ax.plot(
            L,
            np.asarray(summary["onsets_offset_per_run"], float)[:, k],
            "x",
            color="k",
            ms=7,
            label="predicted with offsets (each run's init)" if k == 0 else None,
        )
    ax.set(xlabel="ln(1/eps)", ylabel="onset time t", title="(a) stage onsets against ln(1/eps)")
    ax.legend(fontsize=8)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(np.unique(eps))))
    color_of = dict(zip(sorted(np.unique(eps), reverse=True), colors))
    rates = summary["rates_per_run"]
    for ax, var, pred, window, title in (
        (
            axes[1],
            "qk",
            2 * summary["c"],
            "c_window",
            r"(b) $\|W_QW_K^\top\|_2$ with predicted slope $2c$ (dashed)",
        ),
        (
            axes[2],
            "outer",
            summary["sigma"],
            "sigma_window",
            r"(c) $\|(W_0,W_1)\|_F$ with predicted slope $\sigma$ (dashed)",
        ),
    ):
        seen = set()
        for r in range(data.sizes["run"]):
            ts = data["time"].values[r]
            y = data["sv_WQK"].values[r, :, 0] if var == "qk" else data["outer_norm"].values[r]
            e = float(eps[r])
            ax.plot(ts, y, color=color_of[e], lw=1, label=f"eps = {e:g}" if e not in seen else None)
            seen.add(e)
            a, b = (float(w) for w in rates[r][window])
            if np.isfinite(a) and np.isfinite(b):
                mid = 0.5 * (a + b)
                y_mid = float(np.exp(np.interp(mid, ts, np.log(y))))
                tt = np.linspace(a, b, 10)
                ax.plot(tt, y_mid * np.exp(pred * (tt - mid)), "k--", lw=1.4)
        ax.set(yscale="log", xlabel="t (gradient-flow time)", ylabel="norm", title=title)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Focus-dilution timing: population gradient flow against the Stage I-II "
        "linearisations (theory.focus_dilution.stages)"
    )
    fig.tight_layout()
    return fig


FIGURE = Figure(
    id=FIGURE_ID,
    paper="focus-dilution",
    description="stage onsets against ln(1/eps) with slopes 1/sigma and 1/sigma + 1/c; "
    "growth at 2c",
    config=TimingConfig,
    compute=compute,
    plot=plot,
    report=report,
    predictions=predictions_of,
    how_to_read=(
        "(a) Measured onsets of Stage I (blue) and Stage II (red), one dot per eps and seed, "
        "against ln(1/eps); the dashed lines have the predicted slopes 1/sigma and "
        "1/sigma + 1/c and pass through the mean of their points (the leading order leaves the "
        "O(1) intercepts open); the black crosses are the onsets with their offsets predicted "
        "from each run's initial parameters, intercept included; the legend gives the fitted "
        "slopes. Dots along the dashed lines confirm the Stage I-II linearisations, dots on the "
        "crosses the offsets. (b) ||WQ WK^T||_2 against t for each eps "
        "(colour) on a log scale, with black dashed segments of the predicted slope 2c over each "
        "run's fit window; (c) the same for ||(W0, W1)||_F with slope sigma (no segment where "
        "the rule's window is empty)."
    ),
)
