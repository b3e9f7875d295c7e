"""Figure focus-dilution-entropy-cycles: attention entropy and embedding norms over more than one
focus-dilution cycle (spec ``focus_dilution.md`` §7 focus-dilution-entropy-cycles, experiment D;
theory §5.3-5.5).

Top: per-query attention entropy ``H_q(t)`` with the reference levels ``H(pi)`` (unfocused) and
``ln d`` (uniform); bottom: per-token embedding norms ``||W0[k, :]||`` and the singular values of W0
(a new one grows at each cycle). The turning points of every ``H_q`` (local extrema with
prominence above ``TURN_PROMINENCE`` of ``simulate.measure.turning_points``) are counted:
down-up-down is one cycle of focus, dilution and renewed focus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.drawing import mark_times, shade_stages
from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.verdicts import Prediction
from figures.focus_dilution.common import (
    STAGES,
    TOKEN_COLORS,
    FlowSetting,
    flow_seconds,
    onset_predictions,
    solve_setting,
)
from simulate.focus_dilution.measure import ONSET_RULES, run_onsets
from simulate.focus_dilution.predictions import predictions
from simulate.measure.turning_points import TURN_RULE, turning_points
from theory.validation import require

FIGURE_ID = "focus-dilution-entropy-cycles"


@dataclass(frozen=True)
class CyclesConfig(FigureOptions):
    """Default pi, lambda = 0.5, eps = 1e-3, 3 seeds, horizon t = 3000 (two cycles). --quick:
    one seed, t = 2500, 1000 saved times."""

    flow: Annotated[FlowSetting, Flat] = FlowSetting(seeds=3, samples=2000)
    """the population flow (default pi, lambda = 0.5, eps = 1e-3)."""
    t_max: float = 3000.0
    """horizon (gradient-flow time)."""

    def __post_init__(self):
        require(
            math.isfinite(self.t_max) and self.t_max > 0,
            "t_max",
            self.t_max,
            "a finite horizon > 0",
        )

    def sizes(self) -> tuple[int, int, float]:
        """Seeds, saved times and horizon of the run (--quick: 1, 1000 and 2500)."""
        return (
            self.quick_or("flow.seeds", 1),
            self.quick_or("flow.samples", 1000),
            self.quick_or("t_max", 2500.0),
        )


def compute(cfg: CyclesConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    pi, P = cfg.flow.chain()
    pred = predictions(pi, P, cfg.flow.eps)
    n_seeds, samples, t_max = cfg.sizes()
    data = solve_setting(cfg.flow, pi, P, t_max, n_seeds, samples)
    onsets = run_onsets(data)
    data = data[
        ["attention_entropy", "token_norm", "sv_W0", "loss", "focus_mass", "pi", "solver_steps"]
    ]
    data["onset"] = (("run", "stage"), onsets)
    data = data.assign_coords(stage=list(STAGES))
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
        **flow_seconds(data),
        "setting": {
            "pi": cfg.flow.pi,
            "lambda": cfg.flow.lam,
            "eps": cfg.flow.eps,
            "seeds": cfg.flow.seed_ids[:n_seeds],
            "t_max": t_max,
            "m": cfg.flow.width,
            "m_k": cfg.flow.key_width,
        },
        "predicted": pred,
        "onset_rules": dict(ONSET_RULES),
        "onsets_per_seed": onsets,
        "turn_rule": TURN_RULE,
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


def predictions_of(summary: dict) -> list[Prediction]:
    """Per seed: the first cycle's onsets t_I-t_IV (the turning points after it are counted,
    not predicted)."""
    rows = []
    for s, onsets in zip(summary["setting"]["seeds"], summary["onsets_per_seed"]):
        rows += onset_predictions(summary["predicted"]["onsets"], onsets, f", seed {s}")
    return rows


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    pred = summary["predicted"]
    run = data.isel(run=0)
    ts = run["time"].values
    pi = run["pi"].values
    fig, (ax_h, ax_n) = plt.subplots(2, 1, figsize=(13, 9), sharex=True)
    for ax in (ax_h, ax_n):
        shade_stages(ax, run["onset"].values, ts[-1], names=STAGES, label=ax is ax_h)
        mark_times(
            ax, pred["onsets"], names=STAGES, legend="predicted onsets" if ax is ax_h else None
        )
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


FIGURE = Figure(
    id=FIGURE_ID,
    paper="focus-dilution",
    description="per-query attention entropy and embedding norms over two cycles (experiment D)",
    config=CyclesConfig,
    compute=compute,
    plot=plot,
    report=report,
    predictions=predictions_of,
    how_to_read=(
        "Top: attention entropy H_q of each query (its token's colour) against t, with H(pi) "
        "(grey dashed, the unfocused level) and ln d (grey dotted, uniform); triangles mark the "
        "counted turning points (down: a minimum, the query focuses; up: a maximum, it "
        "dilutes). Down-up-down is one cycle of focus, dilution and renewed focus; in the second "
        "cycle another query may take the focus. Bottom: embedding norms ||W0[k]|| per token "
        "(colours) and the singular values of W0 (black: solid 1st, dashed 2nd, dotted 3rd): "
        "low-frequency norms rise and fall, and a new singular value grows at each cycle. "
        "Shading: the measured stages of seed 0's first cycle; dashed verticals: the predicted "
        "onsets t_I-t_IV (leading order in ln(1/eps))."
    ),
)
