"""Experiment ``heads-gd``: the reduced head system of incremental.md §5.2 trained step by step
through the run store.

With ``optimizer='sgd'`` and the replicator metric each step is an explicit Euler step of the
paper's Fig. 10 ODE (``dt = lr``, the authors' dt = 0.005 for 1e5 steps); with the logit metric it
is gradient descent on (v, theta). Momentum and Adam precondition the same direction. Stage times
are predicted by ``theory.head_stages`` in ODE time and reported in steps (``t / lr``; sgd only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import optax

from simulate.head_field import logit_field, loss
from simulate.head_options import HeadSystemOptions
from simulate.lumped_escape import lumped_escape_time
from simulate.stages import RULE, STAGE1_EVENT, first_crossing, lead_mass_time, midpoints
from simulate.store import RunStore, load
from simulate.train import DivergenceError, Interrupted, Problem, Schedule, seed_streams, train
from theory.head_stages import predict_stages
from theory.heads import HeadSystem
from theory.validation import require

NAME = "heads-gd"
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class HeadTrainConfig(HeadSystemOptions):
    """Reduced head system trained by an optimizer (defaults: paper Fig. 10, Euler dt = 0.005)."""

    optimizer: str = "sgd"
    """sgd (Euler steps of the flow), momentum (0.9) or adam."""
    lr: float = 0.005
    """learning rate = Euler step in ODE time units (> 0)."""
    steps: int = 100_000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 100
    """steps between logged rows."""
    chunk: int = 10_000
    """steps per compiled chunk and checkpoint (a multiple of log_every)."""
    seeds: int = 4
    """number of seeds, vmapped in one compiled program."""
    seed: int = 0
    """first seed; seed ids are seed, seed+1, ..."""
    out: Path = Path("runs/heads-gd")
    """run directory."""
    resume: Path | None = None
    """continue the run stored in this directory from its last checkpoint."""
    quiet: bool = False
    """no progress bar."""
    store: bool = field(default=True)
    """write the run store (off only for overhead measurements)."""

    def __post_init__(self):
        super().__post_init__()
        require(self.optimizer in OPTIMIZERS, "optimizer", self.optimizer, f"one of {OPTIMIZERS}")
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a finite learning rate > 0")
        require(self.steps >= 1, "steps", self.steps, "an integer >= 1")
        require(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
        require(self.chunk >= 1 and self.chunk % self.log_every == 0, "chunk", self.chunk,
                f"a positive multiple of log_every = {self.log_every}")
        require(self.steps % self.chunk == 0, "steps", self.steps,
                f"a multiple of chunk = {self.chunk}")
        require(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")

    @property
    def seed_ids(self) -> list[int]:
        return list(range(self.seed, self.seed + self.seeds))


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
        return {"loss": loss(G, params["v"], s), "block_mass": s @ block_of,
                "value": params["v"],
                "head_asymmetry": jnp.max(jnp.abs(s[:, None, :] - s[None, :, :]))}

    dims = {"loss": (), "block_mass": ("head", "block"), "value": ("head", "feature"),
            "head_asymmetry": ()}
    coords = {"head": np.arange(1, H + 1), "block": np.arange(1, h + 1),
              "feature": np.arange(1, h + 1)}
    return Problem(init, loss_and_direction, observe, dims, coords)


def optimizer(cfg: HeadTrainConfig):
    if cfg.optimizer == "sgd":
        return optax.sgd(cfg.lr)
    if cfg.optimizer == "momentum":
        return optax.sgd(cfg.lr, momentum=0.9)
    return optax.adam(cfg.lr)


def stage_summary(cfg: HeadTrainConfig, ds) -> dict:
    """Measured stage steps (stage 1: lead-block mass 1/2; later: loss midpoints of the derived
    plateau levels) beside the theory's predictions in steps (sgd: t / lr)."""
    setting = cfg.setting()
    hs = HeadSystem(setting)
    vals = hs.parameter_values()
    levels = [float(L.xreplace(vals)) for L in hs.plateau_levels()]
    lead = hs.ladder()[0]
    steps = ds["step"].values.astype(float)
    loss_ = ds["loss"].values
    mass = ds["block_mass"].sel(block=[lead + 1]).values  # (seed, step, head, 1)
    measured = []
    for b in range(loss_.shape[0]):
        row = [lead_mass_time(steps, mass[b], [0])]
        row += [first_crossing(steps, loss_[b], c) for c in midpoints(levels)[1:]]
        measured.append(row)
    measured = np.array(measured)
    if cfg.optimizer == "sgd":
        preds = predict_stages(setting, cfg.noise, t1=lumped_escape_time(setting, lead))
        predicted = [p.time / cfg.lr for p in preds]
    else:
        predicted = [None] * measured.shape[1]
    stages = []
    for k in range(measured.shape[1]):
        mean = float(np.nanmean(measured[:, k])) if np.any(np.isfinite(measured[:, k])) else math.nan
        stages.append({"stage": k + 1, "plateau_derived": levels[k + 1],
                       "predicted_step": predicted[k], "measured_step": mean,
                       "measured_step_per_seed": measured[:, k],
                       "measured_over_predicted": mean / predicted[k] if predicted[k] else None})
    return {"plateau_levels_derived": levels, "stages": stages,
            "stage_rule": f"stage 1: {STAGE1_EVENT}; later: {RULE} "
                          "(steps; predictions t/lr for sgd only)"}


def run(cfg: HeadTrainConfig) -> Path:
    """Run (or resume) the experiment into ``cfg.out``; returns the run directory."""
    store = RunStore(cfg.resume or cfg.out) if cfg.store else None
    if store is not None and not cfg.resume:
        keys = seed_streams(cfg.seed_ids)
        store.create(NAME, asdict(cfg), {
            "seed_ids": cfg.seed_ids,
            "streams": {k: np.asarray(v) for k, v in keys.items()},
            "rule": "key(seed) folded with 0 (init), 1 (noise), 2 (data)"})
    status, error = "complete", None
    try:
        result = train(problem(cfg), optimizer(cfg), Schedule(cfg.steps, cfg.log_every, cfg.chunk),
                       cfg.seed_ids, store, resume=cfg.resume is not None,
                       progress=not cfg.quiet)
    except DivergenceError as err:
        status, error, result = "diverged", err, None
    except Interrupted as err:
        status, error, result = "interrupted", err, None
    except Exception as err:
        status, error, result = "failed", err, None
        if store is not None:
            store.write_summary({"status": status, "error": repr(err)})
        raise
    if store is None:
        if error is not None:
            raise error
        return result
    ds, _ = load(store.path)
    summary = {"status": status, "steps_logged": int(ds["step"].values[-1]),
               "final_loss": ds["loss"].isel(step=-1).values}
    if result is not None:
        summary.update(compile_seconds=result.compile_seconds, run_seconds=result.run_seconds)
    if error is not None:
        summary["error"] = str(error)
    summary.update(stage_summary(cfg, ds))
    store.write_summary(summary)
    if error is not None:
        raise error
    return store.path
