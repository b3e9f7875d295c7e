"""Figure focus-dilution-entropy-cycles: attention entropy and embedding norms over more than one
focus-dilution cycle (spec ``focus_dilution.md`` §7 focus-dilution-entropy-cycles, experiment D;
theory §5.3-5.5).

Top: per-query attention entropy ``H_q(t)`` with the reference levels ``H(pi)`` (unfocused) and
``ln d`` (uniform); bottom: per-token embedding norms ``||W0[k, :]||`` and the singular values of W0
(a new one grows at each cycle). The turning points of every ``H_q`` (local extrema with
prominence above ``TURN_PROMINENCE``) are counted: down-up-down is one cycle of focus, dilution and
renewed focus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from figures.focus_dilution.common import (
    TOKEN_COLORS,
    FlowSetting,
    mark_predicted,
    onset_rules,
    predictions,
    shade_stages,
)
from simulate.focus_dilution.flow import run_onsets, solve_flow, time_grid
from theory.validation import require

FIGURE_ID = "focus-dilution-entropy-cycles"
TURN_PROMINENCE = 0.05
"""nats: an entropy extremum counts as a turn when the curve moves at least this much away from
it on both sides before turning again."""


@dataclass(frozen=True)
class CyclesConfig(FlowSetting):
    """Default pi, lambda = 0.5, eps = 1e-3, 3 seeds, horizon t = 3000 (two cycles). --quick:
    one seed, t = 2500, 1000 saved times."""

    t_max: float = 3000.0
    """horizon (gradient-flow time)."""
    samples: int = 2000
    """saved time points per run."""

    def __post_init__(self):
        FlowSetting.__post_init__(self)
        require(self.t_max > 0, "t_max", self.t_max, "a horizon > 0")

    def run_dir(self):
        return figure_dir(self.out, FIGURE_ID)


def turning_points(values, prominence: float = TURN_PROMINENCE) -> list[tuple[int, str]]:
    """Alternating extrema of a curve: ``(index, "min" | "max")``. A candidate extremum is kept
    once the curve has moved ``prominence`` away from it (zig-zag rule); the end points are not
    extrema."""
    y = np.asarray(values, float)
    turns: list[tuple[int, str]] = []
    lo_i = hi_i = 0
    direction = 0  # +1 rising, -1 falling, 0 not yet known
    for i in range(1, y.size):
        if y[i] > y[hi_i]:
            hi_i = i
        if y[i] < y[lo_i]:
            lo_i = i
        if direction >= 0 and y[hi_i] - y[i] > prominence:
            if direction > 0:
                turns.append((hi_i, "max"))
            direction, lo_i = -1, i
        elif direction <= 0 and y[i] - y[lo_i] > prominence:
            if direction < 0:
                turns.append((lo_i, "min"))
            direction, hi_i = 1, i
    return turns


def compute(cfg: CyclesConfig) -> tuple[xr.Dataset, dict]:
    pi, P = cfg.chain()
    pred = predictions(pi, P, cfg.eps)
    n_seeds, samples, t_max = (
        (1, 1000, 2500.0) if cfg.quick else (cfg.seeds, cfg.samples, cfg.t_max)
    )
    seeds = cfg.seed_ids(n_seeds)
    data = solve_flow(
        pi,
        P,
        [cfg.eps] * n_seeds,
        seeds,
        time_grid(t_max, samples),
        m=cfg.width,
        m_k=cfg.key_width,
        progress=not cfg.quiet,
    )
    onsets = run_onsets(data)
    data = data[
        ["attention_entropy", "token_norm", "sv_W0", "loss", "focus_mass", "pi", "solver_steps"]
    ]
    data["onset"] = (("run", "stage"), onsets)
    data = data.assign_coords(stage=["I", "II", "III", "IV"])
    turns = []
    for r in range(n_seeds):
        ts = data["time"].values[r]
        turns.append(
            [
                [
                    (float(ts[i]), kind)
                    for i, kind in turning_points(data["attention_entropy"].values[r, :, q])
                ]
                for q in range(pi.size)
            ]
        )
    norm_turns = [
        [len(turning_points(data["token_norm"].values[r, :, k])) for k in range(pi.size)]
        for r in range(n_seeds)
    ]
    summary = {
        "setting": {
            "pi": cfg.pi,
            "lambda": cfg.lam,
            "eps": cfg.eps,
            "seeds": seeds,
            "t_max": t_max,
            "m": cfg.width,
            "m_k": cfg.key_width,
        },
        "predicted": pred,
        "onset_rules": onset_rules(),
        "onsets_per_seed": onsets,
        "turn_rule": f"zig-zag extrema of H_q(t) with prominence {TURN_PROMINENCE} nats",
        "entropy_turns_per_seed": turns,
        "entropy_turn_counts_per_seed": [[len(v) for v in t] for t in turns],
        "norm_turn_counts_per_seed": norm_turns,
        "final_sigma_W0": data["sv_W0"].values[:, -1],
        "solver_steps": data["solver_steps"].values,
    }
    return data, summary


def report(summary: dict) -> str:
    rows = []
    for s, turns in zip(summary["setting"]["seeds"], summary["entropy_turns_per_seed"]):
        for q, tp in enumerate(turns):
            rows.append([f"seed {s}", f"query {q}", " ".join(f"{k}@{t:.0f}" for t, k in tp) or "-"])
    return (
        f"{FIGURE_ID}: turning points of the attention entropy H_q(t) up to t = "
        f"{summary['setting']['t_max']:g}\n"
        + format_table(["run", "query", "turns (min/max @ t)"], rows)
    )


def run(cfg: CyclesConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    pred = summary["predicted"]
    run = data.isel(run=0)
    ts = run["time"].values
    pi = run["pi"].values
    fig, (ax_h, ax_n) = plt.subplots(2, 1, figsize=(13, 9), sharex=True)
    for ax in (ax_h, ax_n):
        shade_stages(ax, run["onset"].values, ts[-1], label=ax is ax_h)
        mark_predicted(ax, pred["onsets"], label=ax is ax_h)
    turns = summary["entropy_turns_per_seed"][0]
    for q in range(data.sizes["query"]):
        H = run["attention_entropy"].values[:, q]
        ax_h.plot(ts, H, color=TOKEN_COLORS[q % 6], label=f"$H_{q}$ (pi = {pi[q]:g})")
        for t, kind in turns[q]:
            ax_h.plot(
                t,
                np.interp(t, ts, H),
                "v" if kind == "min" else "^",
                color=TOKEN_COLORS[q % 6],
                ms=7,
                mec="k",
            )
    ax_h.axhline(pred["H_pi"], color="grey", ls="--", lw=0.9, label=f"H(pi) = {pred['H_pi']:.3f}")
    ax_h.axhline(pred["ln_d"], color="grey", ls=":", lw=0.9, label=f"ln d = {pred['ln_d']:.3f}")
    ax_h.set(
        ylabel="attention entropy (nats)",
        title="per-query attention entropy (triangles: counted turning points)",
    )
    ax_h.legend(fontsize=7, ncol=2)
    for k in range(data.sizes["token"]):
        ax_n.plot(
            ts, run["token_norm"].values[:, k], color=TOKEN_COLORS[k % 6], label=rf"$\|W_0[{k}]\|$"
        )
    for i, ls in enumerate(("-", "--", ":")):
        ax_n.plot(
            ts, run["sv_W0"].values[:, i], color="k", ls=ls, lw=0.8, label=rf"$\sigma_{i + 1}(W_0)$"
        )
    ax_n.set(
        yscale="log",
        xlabel="t (gradient-flow time)",
        ylabel="norm",
        title="embedding norms per token and singular values of W0",
    )
    ax_n.legend(fontsize=7, ncol=2)
    fig.suptitle(
        f"Focus-dilution cycles: pi = {np.round(pi, 4).tolist()}, eps = "
        f"{float(run['eps']):g}, seed {int(run['seed'])}"
    )
    fig.tight_layout()
    return fig
