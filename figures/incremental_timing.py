"""Figure incremental-timing, ODE half: predicted vs measured stage times of the reduced head system
across the symmetry-breaking scale eps and the importance ratio m, for both metrics
(spec incremental.md §7 incremental-timing, §5.6; predictions from ``theory.head_stages``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from figures.incremental_ode import STAGE1_EVENT, lead_mass_time
from figures.output import format_table, write_outputs
from simulate.head_ode import plateau_levels, solve
from simulate.lumped_escape import lumped_escape_time
from simulate.stages import RULE
from theory.head_stages import predict_stages, vertex_decay_coefficient
from theory.heads import METRICS, HeadSetting
from theory.validation import require

FIGURE_ID = "incremental-timing"


@dataclass
class TimingConfig:
    """ODE timing sweep (paper Fig. 10 system; eps and m grids of the spec)."""

    eps: tuple[float, ...] = (1e-3, 1e-6, 1e-9, 1e-12)
    """initial logit-noise scales (dimensionless, > 0)."""
    m: tuple[float, ...] = (1.3, 1.5, 1.7, 2.0)
    """importance ratios m (dimensionless, > 1 so that the blocks are ordered)."""
    metrics: tuple[str, ...] = METRICS
    """metrics to sweep: replicator and/or logit."""
    heads: int = 3
    """H, number of heads."""
    window: int = 40
    """T, number of lags."""
    seeds: int = 3
    """noise seeds per (m, eps), vmapped."""
    seed: int = 0
    """first noise seed."""
    quick: bool = False
    """CPU-sized sweep: m in {1.5, 2.0}, eps in {1e-3, 1e-6, 1e-9}, one seed."""
    out: Path = Path("runs")
    """output directory."""
    quiet: bool = False
    """no progress bar."""

    def __post_init__(self):
        require(len(self.eps) > 0 and all(e > 0 for e in self.eps), "eps", self.eps,
                "one or more noise scales > 0")
        require(len(self.m) > 0 and all(x > 1 for x in self.m), "m", self.m,
                "one or more importance ratios > 1")
        require(all(x in METRICS for x in self.metrics), "metrics", self.metrics,
                f"a subset of {METRICS}")
        require(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        HeadSetting(heads=self.heads, window=self.window)

    def grid(self):
        if self.quick:
            return (1.5, 2.0), (1e-3, 1e-6, 1e-9), 1
        return self.m, self.eps, self.seeds

    def run_dir(self) -> Path:
        return self.out if self.out.name == FIGURE_ID else self.out / FIGURE_ID


def asymptotic_sqrt_slope(setting: HeadSetting) -> float:
    """Derived d sqrt(t_2 - t_1) / d ln(1/eps) as eps -> 0: 1/(2 sqrt(kappa)), times sqrt(T) under
    the logit metric, kappa = m_2^2 / |c_2| (``theory.head_stages``)."""
    m = setting.importance_values
    c = vertex_decay_coefficient(setting.heads, m[0], m[1])
    slope = 1 / (2 * math.sqrt(m[1] ** 2 / abs(c)))
    return slope * (math.sqrt(setting.window) if setting.metric == "logit" else 1.0)


def run(cfg: TimingConfig) -> dict:
    ms, epss, n_seeds = cfg.grid()
    records, slopes, timing = [], [], {}
    for metric in cfg.metrics:
        base = HeadSetting(heads=cfg.heads, window=cfg.window, metric=metric)
        combos = [(m, e, cfg.seed + k) for m in ms for e in epss for k in range(n_seeds)]
        settings = {m: replace(base, m=m) for m in ms}
        t1 = {m: lumped_escape_time(settings[m]) for m in ms}
        preds = {(m, e): predict_stages(settings[m], e, t1=t1[m]) for m in ms for e in epss}
        t_max = 2.0 * max(p.time for ps in preds.values() for p in ps if math.isfinite(p.time))
        batch = solve(base, [c[1] for c in combos], [c[2] for c in combos], t_max, n_save=400,
                      targets=np.stack([settings[c[0]].target() for c in combos]),
                      levels=np.stack([plateau_levels(settings[c[0]]) for c in combos]),
                      progress=not cfg.quiet)
        timing[metric] = {"trajectories": len(combos), "t_max": t_max,
                          "compile_seconds": batch.compile_seconds,
                          "run_seconds": batch.run_seconds}
        for (m, e, seed), crossing, s in zip(combos, batch.crossings, batch.s):
            for p in preds[(m, e)]:
                # each stage is measured at the event its prediction is about
                measured = (lead_mass_time(batch.ts, s, settings[m].lags(p.block)) if p.stage == 1
                            else float(crossing[p.stage - 1]))
                records.append({"metric": metric, "m": m, "eps": e, "seed": seed,
                                "stage": p.stage, "predicted": p.time, "measured": measured,
                                "loss_midpoint": float(crossing[p.stage - 1])})
        for m in ms:
            delays = [np.nanmean([r["measured"] for r in records if r["metric"] == metric
                                  and r["m"] == m and r["eps"] == e and r["stage"] == 2])
                      - np.nanmean([r["measured"] for r in records if r["metric"] == metric
                                    and r["m"] == m and r["eps"] == e and r["stage"] == 1])
                      for e in epss]
            fit = np.polyfit(np.log(1 / np.asarray(epss)), np.sqrt(delays), 1)[0]
            slopes.append({"metric": metric, "m": m, "fitted_sqrt_slope": float(fit),
                           "derived_asymptotic_sqrt_slope": asymptotic_sqrt_slope(settings[m])})
    rows = _table_rows(records)
    print(format_table(["metric", "m", "eps", "stage", "t predicted", "t measured",
                        "measured/pred"], rows))
    print(format_table(["metric", "m", "fitted d sqrt(t2-t1)/d ln(1/eps)", "derived (eps->0)"],
                       [[s["metric"], s["m"], s["fitted_sqrt_slope"],
                         s["derived_asymptotic_sqrt_slope"]] for s in slopes]))
    fig = plot(records, slopes, cfg.metrics, ms, epss)
    summary = {"stage_time_rule": f"stage 1: {STAGE1_EVENT}; stages >= 2: {RULE}",
               "grid": {"m": ms, "eps": epss, "seeds": n_seeds, "heads": cfg.heads,
                        "window": cfg.window},
               "rows": [dict(zip(["metric", "m", "eps", "stage", "predicted", "measured",
                                  "measured_over_predicted"], r)) for r in rows],
               "sqrt_slopes": slopes, "timing": timing, "records": records}
    paths = write_outputs(cfg.run_dir(), FIGURE_ID, fig, summary)
    for metric, t in timing.items():
        print(f"{metric}: {t['trajectories']} trajectories vmapped, compile "
              f"{t['compile_seconds']:.2f} s, run {t['run_seconds']:.2f} s")
    print("wrote " + ", ".join(str(p) for p in paths))
    return summary


def _table_rows(records):
    keys = sorted({(r["metric"], r["m"], r["eps"], r["stage"]) for r in records},
                  key=lambda k: (k[0], k[1], -k[2], k[3]))
    rows = []
    for key in keys:
        sel = [r for r in records if (r["metric"], r["m"], r["eps"], r["stage"]) == key]
        pred = sel[0]["predicted"]
        meas = float(np.nanmean([r["measured"] for r in sel]))
        rows.append([*key, pred, meas, meas / pred if math.isfinite(pred) else float("nan")])
    return rows


def plot(records, slopes, metrics, ms, epss):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(metrics), 3, figsize=(14, 4.2 * len(metrics)), squeeze=False)
    colors = dict(zip(ms, plt.cm.plasma(np.linspace(0, 0.85, len(ms)))))
    L = np.log(1 / np.asarray(epss))
    for row, metric in zip(axes, metrics):
        rec = [r for r in records if r["metric"] == metric]

        def times(m, e, stage, key, rec=rec):
            return np.array([r[key] for r in rec if r["m"] == m and r["eps"] == e
                             and r["stage"] == stage])

        ax = row[0]
        m_fine = np.asarray(ms)
        t1_pred = [times(m, epss[0], 1, "predicted")[0] for m in ms]
        ax.plot(m_fine, t1_pred, "k--", label="predicted $t_1$ (lumped symmetric system)")
        for m in ms:
            for e in epss:
                ax.plot(np.full(len(times(m, e, 1, "measured")), m), times(m, e, 1, "measured"),
                        "o", color=colors[m], ms=4)
        ax.plot([], [], "o", color="grey", label="measured (all eps, seeds)")
        ax.set(xscale="log", yscale="log", xlabel="importance ratio m",
               ylabel="stage-1 time $t_1$ (ODE time)",
               title=f"{metric}: $t_1$ (lead-block mass 1/2) against m")
        ax.set_xticks(list(ms), [f"{m:g}" for m in ms])
        ax.minorticks_off()
        ax.legend(fontsize=8)
        for col, stage in ((1, 2), (2, 3)):
            ax = row[col]
            for m in ms:
                pred = [times(m, e, stage, "predicted")[0] - times(m, e, stage - 1, "predicted")[0]
                        for e in epss]
                meas = [times(m, e, stage, "measured") - times(m, e, stage - 1, "measured")
                        for e in epss]
                ax.plot(L, pred, "--", color=colors[m])
                for x, y in zip(L, meas):
                    ax.plot(np.full(len(y), x), y, "o", color=colors[m], ms=4)
                ax.plot([], [], "o--", color=colors[m], label=f"m = {m}")
            ax.set(yscale="log", xlabel="ln(1/eps)",
                   ylabel=f"$t_{stage} - t_{stage - 1}$ (ODE time)",
                   title=f"{metric}: plateau before stage {stage} (dashed: predicted)")
            ax.legend(fontsize=8)
    fig.suptitle("Reduced head ODE: predicted (dashed) vs measured (dots) stage times")
    fig.tight_layout()
    return fig
