"""Figure incremental-ode: the reduced head ODE (paper Fig. 10; spec incremental.md §7).

Row 1: attention s_{k,i} of each head on the first lags; row 2: value coordinates v_{k,j};
row 3: total and per-(feature, lag) loss. Log time throughout, with the derived plateau levels
(horizontal) and the predicted (dashed) and measured (dotted) stage times on the same axes, and
the eps = 0 run (exactly equal heads) that stalls on the competitive plateau.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from figures.incremental.ode_config import HeadOdeConfig
from simulate.incremental.head_ode import initial_logits, plateau_levels, solve
from simulate.incremental.lumped_escape import lumped_escape_time
from simulate.measure.stages import RULE, STAGE1_EVENT, lead_mass_time, measured_plateaus
from theory.incremental.heads import HeadSetting, head_system
from theory.incremental.later_stages import (
    APRIORI_RULE,
    SEQUENTIAL_RULE,
    apriori_stage_times,
    covers,
    own_start_stage_times,
    sequential_run_times,
)
from theory.incremental.stages import predict_stages


def compute(cfg: HeadOdeConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    """Solve the ODE (noisy seeds, the untied eps = 0 start, the symmetric subspace) and measure
    the stages; returns the data the figure draws and the summary."""
    setting = cfg.setting()
    seeds = cfg.noise_seeds
    seed_ids = [cfg.seed + i for i in range(seeds)]
    levels = plateau_levels(setting)
    # one batch, one program: the noisy seeds, the untied eps = 0 start, the symmetric subspace
    batch = solve(
        setting,
        [cfg.noise] * seeds + [0.0, 0.0],
        seed_ids + [cfg.seed, cfg.seed],
        cfg.horizon,
        n_save=600 if cfg.quick else 2000,
        levels=levels,
        symmetric=[False] * (seeds + 1) + [True],
    )
    untied, sym = seeds, seeds + 1
    lead = head_system(setting).ladder()[0]
    pred = predict_stages(setting, cfg.noise, t1=lumped_escape_time(setting, lead))
    t1_closed = predict_stages(setting, cfg.noise)[0].time
    ts = batch.ts
    boundaries = batch.crossings[:seeds]
    mass_t1 = np.array([lead_mass_time(ts, batch.s[b], setting.lags(lead)) for b in range(seeds)])
    # each stage is measured at the event its prediction is about
    measured = np.concatenate([mass_t1[:, None], boundaries[:, 1:]], axis=1)
    plateaus = np.array([measured_plateaus(ts, batch.loss[b], boundaries[b]) for b in range(seeds)])
    untied_spread = float(np.max(np.abs(batch.s[untied] - batch.s[untied][:, :1, :])))
    K = len(pred)
    later = _later_stages(setting, cfg, batch, levels, K) if covers(setting) else {}
    data = xr.Dataset(
        {
            "attention": (("seed", "time", "head", "lag"), batch.s[:seeds]),
            "value": (("seed", "time", "head", "feature"), batch.v[:seeds]),
            "loss": (("seed", "time"), batch.loss[:seeds]),
            "entry_loss": (("seed", "time", "feature", "lag"), batch.entry_loss[:seeds]),
            "loss_symmetric_eps0": (("time",), batch.loss[sym]),
            "loss_untied_eps0": (("time",), batch.loss[untied]),
            "plateau_level": (("level",), np.asarray(levels)),
            "predicted_time": (("stage",), np.array([p.time for p in pred], float)),
            "measured_time": (("seed", "stage"), measured),
            **{f"{name}_time": (dims, value) for name, (dims, value) in later.items()},
        },
        coords={
            "seed": seed_ids,
            "time": ts,
            "head": np.arange(1, setting.heads + 1),
            "lag": np.arange(1, setting.window + 1),
            "feature": np.arange(1, setting.h + 1),
            "level": np.arange(K + 1),
            "stage": np.arange(1, K + 1),
        },
    )

    stages = []
    for p in pred:
        k = p.stage
        m_k = float(np.nanmean(measured[:, k - 1]))
        entry = {
            "stage": k,
            "block": p.block + 1,
            "plateau_derived": p.plateau_after,
            "plateau_measured": float(np.nanmean(plateaus[:, k - 1])),
            "event": STAGE1_EVENT if k == 1 else "loss midpoint",
            "predicted_time": p.time,
            "prediction_rule": p.rule,
            "measured_time": m_k,
            "measured_time_per_seed": measured[:, k - 1],
            "measured_over_predicted": m_k / p.time if np.isfinite(p.time) else float("nan"),
            "loss_midpoint_time": float(np.nanmean(boundaries[:, k - 1])),
        }
        if k == 1:
            entry["closed_form_predicted_time"] = t1_closed
        if later:
            entry["loss_midpoint_median_time"] = float(np.nanmedian(boundaries[:, k - 1]))
        for name, (_, value) in later.items():
            finite = value[..., k - 1][np.isfinite(value[..., k - 1])]
            t = float(np.median(finite)) if finite.size else float("nan")  # stage 1: no sequential
            entry[f"{name}_time"] = t
            entry[f"{name}_measured_over_predicted"] = entry["loss_midpoint_median_time"] / t
        stages.append(entry)
    summary = {
        "setting": setting.__dict__,
        "eps": cfg.noise,
        "seeds": seed_ids,
        "t_max": cfg.horizon,
        "plateau_levels_derived": levels,
        "later_stage_rules": {"apriori": APRIORI_RULE, "sequential": SEQUENTIAL_RULE}
        if later
        else {},
        "stage_time_rule": f"stage 1: {STAGE1_EVENT}; stages >= 2: "
        + RULE
        + "; loss crossings located by diffrax events",
        "stages": stages,
        "stall_eps0": {
            "final_loss": float(batch.loss[sym, -1]),
            "plateau_L1": levels[1],
            "loss_crossings": batch.crossings[sym],
            "integrated_on": "the symmetric subspace (heads tied)",
        },
        "eps0_untied_float64": {
            "note": _untied_note(untied_spread),
            "max_head_attention_difference": untied_spread,
            "loss_crossings": batch.crossings[untied],
            "final_loss": float(batch.loss[untied, -1]),
        },
        "final_attention_mass_head_by_block_seed0": [
            [float(batch.s[0, -1, k, list(setting.lags(j))].sum()) for j in range(setting.h)]
            for k in range(setting.heads)
        ],
        "compile_seconds": batch.compile_seconds,
        "run_seconds": batch.run_seconds,
    }
    return data, summary


def _untied_note(spread: float) -> str:
    """What the untied eps = 0 run showed: the heads start equal, and only the solver's round-off
    could tell them apart for the head-splitting mode to amplify."""
    if spread > 0:
        return (
            "all heads start equal but the solver's stage sums round them differently; "
            f"the head-splitting mode amplifies the round-off (heads differ by {spread:.1e})"
        )
    return (
        "all heads start equal and stay bitwise equal: the solver rounds every head alike, "
        "so the untied run stalls at L_1 as the tied one does"
    )


def _later_stages(setting: HeadSetting, cfg: HeadOdeConfig, batch, levels, K: int) -> dict:
    """(dims, times) of the later-stage predictors (``theory.incremental.later_stages``): the
    a-priori lumped window, the same from each seed's own initial logits, and the sequential
    predictor from the saved state nearest each seed's measured t_{k-1}."""
    seeds = cfg.noise_seeds
    theta0 = np.asarray(
        initial_logits(setting, np.full(seeds, cfg.noise), [cfg.seed + i for i in range(seeds)])
    )
    own = [own_start_stage_times(setting, theta0[b], levels, cfg.horizon) for b in range(seeds)]
    sequential = [
        sequential_run_times(setting, batch.ts, batch.s[b], batch.v[b], batch.crossings[b])
        for b in range(seeds)
    ]
    return {
        "apriori": (("stage",), apriori_stage_times(setting, cfg.noise, levels, cfg.horizon)),
        "own_start": (("seed", "stage"), np.array(own)),
        "sequential": (("seed", "stage"), np.array(sequential)),
    }


LEVEL_TOLERANCE = 1e-2
"""plateau levels L_k, in loss units: the trajectory passes each fixed point at a distance set by
eps and the level is read where the loss is flattest; the figure's test holds them to 1e-2."""
STALL_TOLERANCE = 1e-3
"""relative: on the symmetric subspace the eps = 0 run ends on the fixed point of level L_1 (the
figure's test holds it to 1e-3)."""
STAGE_LAW_TOLERANCE = 0.3
"""stages >= 2, centre-manifold plateau law: the README claims stage 2 within 30% (replicator)."""
LATER_STAGE_TOLERANCE = 0.1
"""stages >= 2, a-priori and sequential predictors: issue 17's target, 10%."""
CLOSED_FORM_TOLERANCE = 0.5
"""the closed-form t_1 (values frozen at linear growth) is a leading-order estimate: within a factor
2 from below (ratio 0.5; a factor 1.5 above, the ratio scale being one-sided)."""


def stage1_tolerance(m: float) -> float:
    """The lumped symmetric system's t_1 claim (README, "What the theory says"): within 5% of the
    full ODE for m >= 1.5, 16% at m = 1.3, where the dropped blocks are nearly as strong."""
    return 0.05 if m >= 1.5 else 0.16


def lead_ratio(setting: dict) -> float:
    """m_1 / m_2 of a stored setting: how much the lead block outweighs the next one."""
    values = setting.get("importances")
    if values and len(values) >= 2:
        return float(values[0]) / float(values[1])
    return float(setting["m"])


def predictions(summary: dict) -> list[Prediction]:
    """Plateau levels, stage times (lumped t_1, closed-form t_1, the plateau law for later stages)
    and the eps = 0 stall beside the ODE's own measurements (mean over the noise seeds)."""
    setting = summary["setting"]
    m = lead_ratio(setting)
    where = f"{setting['metric']}, m = {m:g}, eps = {float(summary['eps']):.1e}"
    stages = summary["stages"]
    rows = [
        Prediction(
            f"L_{st['stage']}, plateau after stage {st['stage']} (loss), {where}",
            st["plateau_derived"],
            st["plateau_measured"],
            LEVEL_TOLERANCE,
            "derived: loss at the clustered fixed point; measured: the loss where its log-time "
            "slope is smallest between crossings; 1e-2 as the figure's test holds it",
            "difference",
        )
        for st in stages
    ]
    first = stages[0]
    rows += [
        Prediction(
            f"t_1 (ODE time), lumped symmetric system, {where}",
            first["predicted_time"],
            first["measured_time"],
            stage1_tolerance(m),
            f"measured: {STAGE1_EVENT}; the README claims the lumped system within 5% for "
            "m >= 1.5, 16% at m = 1.3",
        ),
        Prediction(
            f"t_1 (ODE time), closed form, {where}",
            first["closed_form_predicted_time"],
            first["measured_time"],
            CLOSED_FORM_TOLERANCE,
            f"measured: {STAGE1_EVENT}; values frozen at linear growth, a leading-order "
            "estimate: 50%",
        ),
    ]
    rows += [
        Prediction(
            f"t_{st['stage']} (ODE time), {where}",
            st["predicted_time"],
            st["measured_time"],
            STAGE_LAW_TOLERANCE,
            f"measured: {RULE}; predicted: {st['prediction_rule']}; 30% as the README claims "
            "for stage 2",
        )
        for st in stages[1:]
    ]
    rules = summary.get("later_stage_rules", {})
    rows += [
        Prediction(
            f"t_{st['stage']} (ODE time), {label}, {where}, median over seeds",
            st[f"{name}_time"],
            st["loss_midpoint_median_time"],
            LATER_STAGE_TOLERANCE,
            f"measured: {RULE}; predicted: {rules[name]}; 10%, issue 17's target",
        )
        for st in stages[1:]
        for name, label in (("apriori", "a-priori"), ("sequential", "sequential"))
        if name in rules
    ]
    stall = summary["stall_eps0"]
    rows.append(
        Prediction(
            "final loss at eps = 0 on the symmetric subspace (stall at L_1)",
            stall["plateau_L1"],
            stall["final_loss"],
            STALL_TOLERANCE,
            "equal heads stay equal and stop at the competitive fixed point of level L_1; "
            "1e-3 as the figure's test holds it",
        )
    )
    return rows


def report(summary: dict) -> str:
    rows = [
        [
            st["stage"],
            st["block"],
            st["plateau_derived"],
            st["plateau_measured"],
            "lead mass 1/2" if st["stage"] == 1 else st["event"],
            st["predicted_time"],
            st["measured_time"],
            st["measured_over_predicted"],
        ]
        for st in summary["stages"]
    ]
    stall, untied = summary["stall_eps0"], summary["eps0_untied_float64"]
    first = summary["stages"][0]
    return "\n".join(
        [
            format_table(
                [
                    "stage",
                    "block",
                    "L_k derived",
                    "L_k measured",
                    "event",
                    "t predicted",
                    "t measured",
                    "measured/pred",
                ],
                rows,
            ),
            (
                "stage 1: closed-form early-time prediction "
                f"{first['closed_form_predicted_time']:.4g} "
                f"(values frozen at linear growth), lumped symmetric system "
                f"{first['predicted_time']:.4g}, measured {first['measured_time']:.4g}"
            ),
            (
                f"eps = 0 (symmetric subspace): final loss {stall['final_loss']:.6g} "
                f"(L_1 = {stall['plateau_L1']:.6g}); untied float64 run: heads differ by "
                f"{untied['max_head_attention_difference']:.1e}, loss crossings "
                f"{np.round(np.asarray(untied['loss_crossings'], float), 2).tolist()}"
            ),
            *_later_report(summary),
            f"compile {summary['compile_seconds']:.2f} s, run {summary['run_seconds']:.2f} s",
        ]
    )


def _later_report(summary: dict) -> list[str]:
    """The later-stage predictors' table (medians over seeds), when they apply."""
    rules = summary.get("later_stage_rules", {})
    if not rules:
        return []
    names = ("apriori", "own_start", "sequential")
    rows = [
        [st["stage"], st["loss_midpoint_median_time"]]
        + [v for n in names for v in (st[f"{n}_time"], st[f"{n}_measured_over_predicted"])]
        for st in summary["stages"]
    ]
    header = ["stage", "t measured (median)", "a-priori", "meas/a-priori", "own start"]
    header += ["meas/own start", "sequential", "meas/sequential"]
    return [format_table(header, rows), *(f"{n}: {r}" for n, r in rules.items())]


def plot(data: xr.Dataset, summary: dict):
    """Draw the figure from stored data only."""
    import matplotlib.pyplot as plt

    setting = HeadSetting(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in summary["setting"].items()}
    )
    H, h = setting.heads, setting.h
    ts = data["time"].values[1:]
    first = data.isel(seed=0, time=slice(1, None))
    show_lags = min(setting.window, sum(setting.blocks) + 1)
    fig = plt.figure(figsize=(4.2 * H, 9.5))
    grid = fig.add_gridspec(3, H)
    axes = np.array([[fig.add_subplot(grid[r, k]) for k in range(H)] for r in range(2)])
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(show_lags, h)))
    t_pred = data["predicted_time"].values
    t_meas = data["measured_time"].isel(seed=0).values

    t_prior = data["apriori_time"].values if "apriori_time" in data else []

    def stage_lines(ax):
        for t in t_pred:
            if np.isfinite(t):
                ax.axvline(t, color="k", ls="--", lw=0.8)
        for t in t_prior:
            if np.isfinite(t):
                ax.axvline(t, color="tab:blue", ls="-.", lw=0.8)
        for t in t_meas:
            if np.isfinite(t):
                ax.axvline(t, color="tab:red", ls=":", lw=1.0)

    for k in range(H):
        ax = axes[0, k]
        for i in range(show_lags):
            ax.plot(ts, first["attention"].values[:, k, i], color=colors[i], label=f"lag {i + 1}")
        ax.set_title(f"head {k + 1}: attention $s_{{{k + 1},i}}$")
        ax.set_ylim(-0.02, 1.02)
        stage_lines(ax)
        ax = axes[1, k]
        for j in range(h):
            ax.plot(ts, first["value"].values[:, k, j], color=colors[j], label=f"feature {j + 1}")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(f"head {k + 1}: value $v_{{{k + 1},j}}$")
        stage_lines(ax)
    axes[0, 0].legend(fontsize=7, loc="center left")
    axes[1, 0].legend(fontsize=7, loc="upper left")

    ax = fig.add_subplot(grid[2, :])
    ax.plot(ts, first["loss"].values, color="k", lw=2, label=f"loss, eps = {summary['eps']:.1e}")
    for b in range(1, data.sizes["seed"]):
        ax.plot(ts, data["loss"].values[b, 1:], color="k", lw=0.6, alpha=0.4)
    ax.plot(
        ts,
        data["loss_symmetric_eps0"].values[1:],
        color="tab:orange",
        lw=2,
        ls="-.",
        label="eps = 0 (equal heads, symmetric subspace): stall",
    )
    ax.plot(
        ts,
        data["loss_untied_eps0"].values[1:],
        color="tab:orange",
        lw=0.8,
        ls=":",
        label="eps = 0, untied heads in float64 ("
        + (
            "round-off breaks the symmetry)"
            if summary["eps0_untied_float64"]["max_head_attention_difference"] > 0
            else "heads stay bitwise equal)"
        ),
    )
    for j in range(h):
        for i in setting.lags(j):
            ax.plot(
                ts,
                first["entry_loss"].values[:, j, i],
                lw=0.8,
                color=colors[j],
                alpha=0.8,
                label=f"feature {j + 1}, lag {i + 1}" if len(setting.lags(j)) == 1 else None,
            )
    for k, L in enumerate(data["plateau_level"].values):
        ax.axhline(L, color="tab:blue", lw=0.8, ls=(0, (4, 2)))
        ax.annotate(f"$L_{k}$", (ts[0], L), color="tab:blue", va="bottom", fontsize=8)
    stage_lines(ax)
    ax.plot([], [], color="k", ls="--", lw=0.8, label="predicted stage time (vertex law)")
    if len(t_prior):
        ax.plot([], [], color="tab:blue", ls="-.", lw=0.8, label="a-priori (lumped window)")
    ax.plot(
        [],
        [],
        color="tab:red",
        ls=":",
        label="measured (seed 0; stage 1: lead-block mass 1/2, later: loss midpoint)",
    )
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xscale("log")
    ax.set_xlabel("ODE time t (log scale)")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    for a in axes.ravel():
        a.set_xscale("log")
        a.set_xlim(ax.get_xlim())
        a.set_xlabel("ODE time t (log scale)")
    m_text = ", ".join(f"{x:.3g}" for x in setting.importance_values)
    fig.suptitle(
        f"Reduced head ODE ({setting.metric} metric): H={H}, blocks={setting.blocks}, "
        f"T={setting.window}, $m_j$=({m_text}); seed {summary['seeds'][0]}"
    )
    fig.tight_layout()
    return fig


FIGURE = Figure(
    "incremental-ode",
    "incremental",
    "reduced head ODE: attention, values, loss with predicted stages (paper Fig. 10)",
    HeadOdeConfig,
    compute,
    plot,
    report,
    how_to_read=(
        "Top row: attention s_{k,i} of each head on the first lags; middle row: value "
        "coordinates v_{k,j}; bottom: total loss (black; other seeds thin grey) and the "
        "per-(feature, lag) losses, log time, symlog loss axis. Blue dashed lines: derived "
        "plateau levels L_k; black dashed: predicted stage times (stage 1 from the lumped "
        "symmetric system, later stages the vertex law restarted from eps); blue dash-dotted "
        "(singleton blocks): the a-priori lumped window of theory.incremental.later_stages, "
        "whose table also gives each seed's own start and the sequential predictor; red "
        "dotted: measured ones for seed 0 (stage 1: head-averaged "
        "attention mass on the lead block reaches 1/2; later stages: the loss crosses "
        "(L_{k-1}+L_k)/2, located by diffrax events). Orange dash-dotted: the eps = 0 run on "
        "the symmetric subspace stalls at L_1; the thin orange dotted line is the same start "
        "integrated without tying the heads, where float64 round-off breaks the symmetry."
    ),
    predictions=predictions,
)
