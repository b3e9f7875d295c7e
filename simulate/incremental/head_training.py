"""Experiment ``heads-gd``: the reduced head system of incremental.md §5.2 trained step by step
through the run store.

With ``optimizer='sgd'`` and the replicator metric each step is an explicit Euler step of the
paper's Fig. 10 ODE (``dt = lr``, the authors' dt = 0.005 for 1e5 steps); with the logit metric it
is gradient descent on (v, theta). Momentum and Adam precondition the same direction. Stage times
are predicted by ``theory.incremental.stages`` in ODE time and reported in steps (``t / lr``; sgd
only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from simulate.derived_store import on_disk
from simulate.incremental.head_field import logit_field, loss
from simulate.incremental.head_options import HeadSystemOptions
from simulate.measure.stages import RULE, STAGE1_EVENT, lead_mass_time, stage_times
from simulate.runner import RunOptions, RunOutput, run_experiment
from simulate.train import Problem, TrainResult
from theory.incremental.setting import HeadSetting
from theory.validation import require

NAME = "heads-gd"
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class HeadTrainConfig(HeadSystemOptions, RunOptions):
    """Reduced head system trained by an optimizer (defaults: paper Fig. 10, Euler dt = 0.005)."""

    optimizer: str = "sgd"
    """sgd (Euler steps of the flow), momentum (0.9) or adam."""
    lr: float = 0.005
    """learning rate = Euler step in ODE time units (> 0)."""

    def __post_init__(self) -> None:
        HeadSystemOptions.__post_init__(self)
        RunOptions.__post_init__(self)
        require(self.optimizer in OPTIMIZERS, "optimizer", self.optimizer, f"one of {OPTIMIZERS}")
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a finite learning rate > 0")


def problem(cfg: HeadTrainConfig) -> Problem:
    setting = cfg.setting()
    G = jnp.asarray(setting.target())
    H, h, T = setting.heads, setting.h, setting.window
    power = 1 if setting.metric == "replicator" else 2
    block_of = np.zeros((T, h))
    for j in range(h):
        block_of[list(setting.lags(j)), j] = 1.0
    block_of = jnp.asarray(block_of)

    def init(init_key, noise_key):
        del init_key  # values start at zero; only the logits carry noise
        return {"v": jnp.zeros((H, h)), "theta": cfg.noise * jax.random.normal(noise_key, (H, T))}

    def loss_and_direction(params, data_key):
        del data_key  # population loss: no data
        v, theta = params["v"], params["theta"]
        dv, dtheta = logit_field(G, v, theta, power)
        return loss(G, v, jax.nn.softmax(theta, -1)), {"v": -dv, "theta": -dtheta}

    def observe(params):
        s = jax.nn.softmax(params["theta"], -1)
        return {
            "loss": loss(G, params["v"], s),
            "block_mass": s @ block_of,
            "value": params["v"],
            "head_asymmetry": jnp.max(jnp.abs(s[:, None, :] - s[None, :, :])),
        }

    dims = {
        "loss": (),
        "block_mass": ("head", "block"),
        "value": ("head", "feature"),
        "head_asymmetry": (),
    }
    coords = {
        "head": np.arange(1, H + 1),
        "block": np.arange(1, h + 1),
        "feature": np.arange(1, h + 1),
    }
    return Problem(init, loss_and_direction, observe, dims, coords)


def optimizer(cfg: HeadTrainConfig) -> optax.GradientTransformation:
    if cfg.optimizer == "sgd":
        return optax.sgd(cfg.lr)
    if cfg.optimizer == "momentum":
        return optax.sgd(cfg.lr, momentum=0.9)
    return optax.adam(cfg.lr)


@cache
@on_disk(decode=lambda v: (list(v[0]), int(v[1])))
def derived_plateaus(setting: HeadSetting) -> tuple[list[float], int]:
    """The derived plateau levels and the lead block of ``setting`` (sympy: computed once per
    setting and machine, since every run and sweep point of a setting summarises with them)."""
    # imported here: sympy and diffrax take about a second to load, which a stored result spares
    from simulate.incremental.head_ode import plateau_levels
    from theory.incremental.heads import head_system

    return plateau_levels(setting), head_system(setting).ladder()[0]


@cache
@on_disk(decode=tuple)
def predicted_times(setting: HeadSetting, noise: float) -> tuple[float | None, ...]:
    """Predicted stage times (ODE time; None where not derived), once per setting, noise and
    machine."""
    # imported here, as in derived_plateaus (and scipy's integrators too)
    from simulate.incremental.lumped_escape import lumped_escape_time
    from theory.incremental.stages import predict_stages

    lead = derived_plateaus(setting)[1]
    preds = predict_stages(setting, noise, t1=lumped_escape_time(setting, lead))
    return tuple(p.time for p in preds)


def stage_summary(cfg: HeadTrainConfig, ds: xr.Dataset) -> dict:
    """Measured stage steps (stage 1: lead-block mass 1/2; later: loss midpoints of the derived
    plateau levels) beside the theory's predictions in steps (sgd: t / lr)."""
    setting = cfg.setting()
    levels, lead = derived_plateaus(setting)
    steps = ds["step"].values.astype(float)
    loss_ = ds["loss"].values
    mass = ds["block_mass"].sel(block=[lead + 1]).values  # (seed, step, head, 1)
    measured = []
    for b in range(loss_.shape[0]):
        row = [lead_mass_time(steps, mass[b], [0])]
        row += list(stage_times(steps, loss_[b], levels)[1:])
        measured.append(row)
    measured = np.array(measured)
    if cfg.optimizer == "sgd":
        # time None: stage not derived for this setting (non-singleton blocks)
        predicted: list[float | None] = [
            None if t is None else t / cfg.lr for t in predicted_times(setting, cfg.noise)
        ]
    else:
        predicted = [None] * measured.shape[1]
    stages = []
    for k in range(measured.shape[1]):
        mean = (
            float(np.nanmean(measured[:, k])) if np.any(np.isfinite(measured[:, k])) else math.nan
        )
        pred = predicted[k]
        stages.append(
            {
                "stage": k + 1,
                "plateau_derived": levels[k + 1],
                "predicted_step": pred,
                "measured_step": mean,
                "measured_step_per_seed": measured[:, k],
                "measured_over_predicted": mean / pred if pred else None,
            }
        )
    return {
        "plateau_levels_derived": levels,
        "stages": stages,
        "stage_rule": f"stage 1: {STAGE1_EVENT}; later: {RULE} "
        "(steps; predictions t/lr for sgd only)",
    }


def run(cfg: HeadTrainConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) the experiment into ``output.out``; returns the run directory."""

    def summarize(ds):
        return {"final_loss": ds["loss"].isel(step=-1).values, **stage_summary(cfg, ds)}

    return run_experiment(NAME, cfg, output, problem(cfg), optimizer(cfg), summarize)
