"""Figure incremental-head-dynamics: empirical head dynamics of the minimal transformer (authors'
rebuttal Fig. B; spec incremental.md §7), with the reduced head ODE drawn on the same axes.

Top: attention mass of each head on each lag block from the last query, against the training
step; dashed: the reduced ODE's block mass of the matched head, its time mapped to steps by one
fitted constant (the ratio of the head-splitting times). Bottom: value alignment
<V_h, A*_k / ||A*_k||_F> of each head with each block's teacher matrix.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, run_figure
from simulate.incremental import markov_training
from simulate.incremental.head_ode import solve
from simulate.incremental.markov_training import MarkovTrainConfig, split_step
from simulate.store import load
from theory.incremental.heads import HeadSetting

FIGURE_ID = "incremental-head-dynamics"


@dataclass(frozen=True)
class HeadDynamicsConfig(MarkovTrainConfig):
    """Minimal transformer, q = 1e-9, W_V = 0, Frobenius-orthogonal teacher, online 512/step."""

    frobenius_orthogonal: bool = True
    """Gram-Schmidt the teacher's Q_k in the Frobenius inner product (the authors' setting)."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/incremental-head-dynamics/)."""
    quick: bool = False
    """CPU-sized run: d = 20, 256 sequences per step, 1000 steps."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def training(self) -> MarkovTrainConfig:
        base = {f.name: getattr(self, f.name) for f in fields(MarkovTrainConfig)}
        cfg = MarkovTrainConfig(**{**base, "out": self.run_dir() / "training", "seeds": 1})
        if self.quick:
            cfg = replace(cfg, vocab=20, batch=256, validation=256, steps=1000)
        return cfg

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)


def _ode_block_mass(cfg: MarkovTrainConfig):
    """Reduced system of the same blocks and importances over the L lags the last query sees."""
    setting = HeadSetting(
        heads=cfg.heads,
        blocks=tuple(cfg.blocks),
        window=cfg.length - 1,
        importances=tuple(cfg.task().importances()),
        metric="replicator",
    )
    eps = cfg.query_scale if cfg.query_scale else setting.window * 1e-6
    batch = solve(setting, [eps], [cfg.seed], t_max=5000.0, n_save=1500)
    lag_block = np.zeros((setting.window, setting.h))
    for j in range(setting.h):
        lag_block[list(setting.lags(j)), j] = 1.0
    return batch.ts, batch.s[0] @ lag_block, batch.v[0]


def _match_heads(train_final, ode_final):
    """Permutation of ODE heads closest to the trained heads' final block masses."""
    H = train_final.shape[0]
    return min(
        itertools.permutations(range(H)),
        key=lambda p: np.sum((train_final - ode_final[list(p)]) ** 2),
    )


def compute(cfg: HeadDynamicsConfig) -> tuple[xr.Dataset, dict]:
    training = cfg.training()
    markov_training.run(training)
    ds, _ = load(training.out)
    run = ds.isel(seed=0, layer=0)  # the one-layer model's attention
    steps = run["step"].values
    ts, ode_mass, ode_value = _ode_block_mass(training)
    train_split = split_step(steps, run["block_mass"].values)
    ode_split = split_step(ts, ode_mass)
    scale = train_split / ode_split  # steps per unit of ODE time
    order = list(_match_heads(run["block_mass"].values[-1], ode_mass[-1]))
    data = xr.Dataset(
        {
            "block_mass": (("step", "head", "block"), run["block_mass"].values),
            "value_alignment": (("step", "head", "block"), run["value_alignment"].values),
            "val_loss": (("step",), run["val_loss"].values),
            "ode_block_mass": (("time", "head", "block"), ode_mass[:, order]),
            "ode_value": (("time", "head", "block"), ode_value[:, order]),
        },
        coords={
            "step": steps,
            "time": ts,
            "head": run["head"].values,
            "block": run["block"].values,
        },
    )
    summary = {
        "training_run": str(training.out),
        "split_rule": markov_training.SPLIT_RULE,
        "heads_split_step": train_split,
        "ode_heads_split_time": ode_split,
        "steps_per_ode_time": scale,
        "ode_head_order": order,
        "final_block_mass": run["block_mass"].values[-1],
        "final_value_alignment": run["value_alignment"].values[-1],
    }
    return data, summary


def report(summary: dict) -> str:
    return (
        f"heads split at step {summary['heads_split_step']:.0f} (training) and at ODE time "
        f"{summary['ode_heads_split_time']:.4g}: {summary['steps_per_ode_time']:.4g} steps per "
        "unit ODE time"
    )


def run(cfg: HeadDynamicsConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    H, h = data.sizes["head"], data.sizes["block"]
    steps = data["step"].values
    mapped = data["time"].values * float(summary["steps_per_ode_time"])
    colors = plt.cm.viridis(np.linspace(0, 0.85, h))
    fig, axes = plt.subplots(2, H, figsize=(4.2 * H, 7), sharex=True, squeeze=False)
    for k in range(H):
        ax = axes[0, k]
        for j in range(h):
            ax.plot(
                steps, data["block_mass"].values[:, k, j], color=colors[j], label=f"block {j + 1}"
            )
            ax.plot(mapped, data["ode_block_mass"].values[:, k, j], color=colors[j], ls="--", lw=1)
        ax.set(title=f"head {k + 1}: attention mass on each block", ylim=(-0.02, 1.02))
        ax = axes[1, k]
        for j in range(h):
            ax.plot(
                steps,
                data["value_alignment"].values[:, k, j],
                color=colors[j],
                label=f"block {j + 1}",
            )
        ax.axhline(0, color="grey", lw=0.5)
        ax.set(
            title=f"head {k + 1}: $\\langle V_{k + 1}, \\hat A^*_j\\rangle_F$",
            xlabel="training step",
        )
    split = float(summary["heads_split_step"])
    for ax in axes.ravel():
        ax.axvline(split, color="tab:red", ls=":", lw=1)
        ax.set_xlim(0, steps[-1])
    axes[0, 0].plot([], [], "k--", lw=1, label="reduced ODE, time x fitted constant")
    axes[0, 0].plot([], [], color="tab:red", ls=":", label="heads split (training)")
    axes[0, 0].legend(fontsize=7)
    axes[1, 0].legend(fontsize=7)
    axes[0, 0].set_ylabel("attention mass (last query)")
    axes[1, 0].set_ylabel("value alignment")
    fig.suptitle(
        "Minimal transformer: head dynamics on the Markov chain, with the reduced ODE "
        f"({float(summary['steps_per_ode_time']):.3g} steps per unit ODE time)"
    )
    fig.tight_layout()
    return fig
