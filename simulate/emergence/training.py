"""Experiment ``emergence``: a causal transformer (or causal MLP-Mixer) trained on the linear map
mod 2 or on cellular automata (spec emergence.md §2-4, §6).

Defaults are the project's [derived] protocol of §4: AdamW lr 1e-3, 200-step linear warm-up then
constant, weight decay 0.01, float32 parameters, fresh samples every step, batch 256 sequences
(linear map) or 8192 tokens (CA), seeds vmapped.

Logged every ``log_every`` steps on a fixed evaluation set (drawn from key(task_seed) fold 1):
aggregate loss over the loss positions; ``cell_loss`` per output cell i (the loss of cell i
averaged over the predicted states t >= 1); ``attention_entropy`` per layer and head
(-sum_k a log a, averaged over the queries that predict states t >= 1 and over sequences);
``pattern_mass`` per first-layer head and cell (attention mass on the true pattern, averaged the
same way); linear map only, ``attention_block`` per first-layer head (head, cell, key_cell):
attention of the query predicting cell i of state t + 1 on cell j of state t, averaged over
sequences and transitions t (for two states: the x_1 -> x_0 block, to set beside M).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from simulate.emergence import tasks
from simulate.emergence.measurements import (
    EMERGENCE_RULE,
    PLATEAU_RULE,
    SUCCESS_RULE,
    emergence_times,
    plateau_length,
    solved,
)
from simulate.emergence.models import CausalMixer, CausalTransformer
from simulate.runner import RunOptions, RunOutput, Seeds, run_experiment
from simulate.store import load
from simulate.train import Problem, TrainResult
from theory.validation import require

NAME = "emergence"
FLOAT32_MAX = float(np.finfo(np.float32).max)
"""the attention bias is added to float32 logits."""


@dataclass(frozen=True)
class EmergenceConfig(RunOptions):
    """Transformer or Mixer on the linear map mod 2 / cellular automata (spec §4 defaults)."""

    task: Literal["linear_map", "ca"] = "linear_map"
    """linear_map: x_{t+1} = M x_t mod 2 (fixed M); ca: lookup table on 3-cell neighbourhoods,
    one table per sequence."""
    S: int = 16
    """state size (cells per state)."""
    s: int = 3
    """ones per row of M (linear map)."""
    states: int | None = None
    """states per sequence; None: 2 (linear map) or 5 (CA)."""
    alphabet: int = 4
    """K, cell states of the CA (the linear map is binary)."""
    model: Literal["transformer", "mixer"] = "transformer"
    """causal transformer or causal MLP-Mixer."""
    layers: int = 1
    """layers (1 or 2)."""
    heads: int = 8
    """H, attention heads."""
    head_dim: int = 8
    """d_h; the width is H d_h (also the Mixer's width)."""
    attention_bias: float = 0.0
    """c: add c to the first layer's logits on the true pattern (0: no intervention)."""
    lr: float = 1e-3
    """AdamW peak learning rate."""
    warmup: int = 200
    """steps of linear learning-rate warm-up."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    batch: int | None = None
    """sequences per step; None: 256 (linear map) or 8192 tokens' worth (CA)."""
    eval_batch: int = 256
    """fixed evaluation sequences."""
    task_seed: int = 0
    """seed of M and of the evaluation set."""
    steps: int = 5000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 50
    """steps between logged rows."""
    chunk: int = 500
    """steps per compiled chunk (a multiple of log_every)."""
    seeds: int = 3
    """training seeds, vmapped."""

    def __post_init__(self) -> None:
        RunOptions.__post_init__(self)
        Seeds.check_seed("task_seed", self.task_seed)
        require(self.task in ("linear_map", "ca"), "task", self.task, "linear_map or ca")
        if self.task == "linear_map":
            tasks.check_linear_map(self.S, self.s, self.n_states)
        else:
            tasks.check_ca(self.S, self.alphabet, self.n_states)
        require(self.model in ("transformer", "mixer"), "model", self.model, "transformer or mixer")
        require(self.layers in (1, 2), "layers", self.layers, "1 or 2")
        require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        require(self.head_dim >= 1, "head_dim", self.head_dim, "an integer >= 1")
        require(
            abs(self.attention_bias) <= FLOAT32_MAX,
            "attention_bias",
            self.attention_bias,
            f"a logit bias |c| <= {FLOAT32_MAX:.4g}, finite in float32 (0: off)",
        )
        require(
            self.model == "transformer" or self.attention_bias == 0,
            "attention_bias",
            self.attention_bias,
            "0 for the mixer (it has no attention)",
        )
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a learning rate > 0")
        require(self.warmup >= 0, "warmup", self.warmup, "steps >= 0")
        require(
            math.isfinite(self.weight_decay) and self.weight_decay >= 0,
            "weight_decay",
            self.weight_decay,
            "a finite value >= 0",
        )
        require(
            self.batch is None or self.batch >= 1, "batch", self.batch, "None or an integer >= 1"
        )
        require(self.eval_batch >= 1, "eval_batch", self.eval_batch, "an integer >= 1")

    @property
    def n_states(self) -> int:
        return self.states if self.states is not None else (2 if self.task == "linear_map" else 5)

    @property
    def vocab(self) -> int:
        return 2 if self.task == "linear_map" else self.alphabet

    @property
    def length(self) -> int:
        return self.n_states * self.S

    @property
    def sequences_per_step(self) -> int:
        if self.batch is not None:
            return self.batch
        return 256 if self.task == "linear_map" else max(1, 8192 // self.length)

    @property
    def loss_start(self) -> int:
        """First target index (into seq[1:]) that enters the loss: all for the linear map,
        the tokens after x_0 for the CA."""
        return 0 if self.task == "linear_map" else self.S - 1

    def loss_floor(self) -> float:
        if self.task == "linear_map":
            return tasks.linear_map_floor(self.S, self.n_states)
        return tasks.ca_loss_floor(self.S, self.alphabet, self.n_states, samples=500)


def task_data(
    cfg: EmergenceConfig,
) -> tuple[jax.Array | None, np.ndarray, Callable[[jax.Array, int], jax.Array], jax.Array]:
    """(M or None, pattern B (T-1, T-1), sampler key -> batch, fixed evaluation set)."""
    key = jax.random.PRNGKey(cfg.task_seed)
    if cfg.task == "linear_map":
        M = tasks.linear_map(cfg.S, cfg.s, jax.random.fold_in(key, 0))
        B = tasks.linear_map_pattern(M, cfg.n_states)

        def sample(k: jax.Array, n: int) -> jax.Array:
            return tasks.sample_linear_map(M, k, n, cfg.n_states)
    else:
        M = None
        B = tasks.ca_pattern(cfg.S, cfg.n_states)

        def sample(k: jax.Array, n: int) -> jax.Array:
            return tasks.sample_ca(k, n, cfg.S, cfg.alphabet, cfg.n_states)

    return M, B, sample, sample(jax.random.fold_in(key, 1), cfg.eval_batch)


def build_model(cfg: EmergenceConfig, key: jax.Array) -> CausalTransformer | CausalMixer:
    if cfg.model == "mixer":
        return CausalMixer(
            cfg.vocab, cfg.length - 1, layers=cfg.layers, width=cfg.heads * cfg.head_dim, key=key
        )
    return CausalTransformer(
        cfg.vocab,
        cfg.length - 1,
        layers=cfg.layers,
        heads=cfg.heads,
        head_dim=cfg.head_dim,
        key=key,
    )


def optimizer(cfg: EmergenceConfig) -> optax.GradientTransformation:
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, cfg.lr, max(cfg.warmup, 1)), optax.constant_schedule(cfg.lr)],
        [max(cfg.warmup, 1)],
    )
    return optax.adamw(schedule, weight_decay=cfg.weight_decay)


def problem(cfg: EmergenceConfig) -> Problem:
    _, B, sample, evals = task_data(cfg)
    S, T, start = cfg.S, cfg.length, cfg.loss_start
    bias = jnp.asarray(cfg.attention_bias * B, jnp.float32) if cfg.attention_bias else None
    out_q = slice(S - 1, T - 1)  # queries predicting states t >= 1
    pattern = jnp.asarray(B[out_q].reshape(cfg.n_states - 1, S, T - 1), jnp.float32)
    transformer = cfg.model == "transformer"
    # the full block grows as H S^2 per logged row: kept for the linear map, whose figure draws it
    block = transformer and cfg.task == "linear_map"

    def token_losses(model, seqs):
        logits = jax.vmap(lambda x: model(x, bias))(seqs[:, :-1])
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, seqs[:, 1:, None], axis=-1)[..., 0]  # (n, T-1)

    def init(init_key, noise_key):
        del noise_key
        return build_model(cfg, init_key)

    def loss_and_direction(model, data_key):
        seqs = sample(data_key, cfg.sequences_per_step)
        return jax.value_and_grad(lambda m: token_losses(m, seqs)[:, start:].mean())(model)

    def observe(model):
        nll = token_losses(model, evals).mean(0)  # (T-1,)
        cells = nll[out_q].reshape(cfg.n_states - 1, S).mean(0)
        obs = {"loss": nll[start:].mean(), "cell_loss": cells}
        if transformer:
            attn = jax.vmap(lambda x: model.logits_and_attention(x, bias)[1])(evals[:, :-1])
            a = attn[:, :, :, out_q]  # (n, layers, H, queries, keys)
            ent = -jnp.sum(jnp.where(a > 0, a * jnp.log(jnp.where(a > 0, a, 1.0)), 0.0), -1)
            obs["attention_entropy"] = ent.mean((0, 3))
            first = a[:, 0].mean(0).reshape(cfg.heads, cfg.n_states - 1, S, T - 1)
            obs["pattern_mass"] = jnp.einsum("htik,tik->hi", first, pattern) / (cfg.n_states - 1)
            if block:
                obs["attention_block"] = jnp.stack(
                    [first[:, t, :, t * S : (t + 1) * S] for t in range(cfg.n_states - 1)]
                ).mean(0)
        return obs

    dims = {"loss": (), "cell_loss": ("cell",)}
    coords = {"cell": np.arange(S)}
    if transformer:
        dims.update(attention_entropy=("layer", "head"), pattern_mass=("head", "cell"))
        coords.update(layer=np.arange(1, cfg.layers + 1), head=np.arange(1, cfg.heads + 1))
    if block:
        dims["attention_block"] = ("head", "cell", "key_cell")
        coords["key_cell"] = np.arange(S)
    return Problem(init, loss_and_direction, observe, dims, coords)


def summarize(cfg: EmergenceConfig, M: jax.Array | None, ds: xr.Dataset) -> dict:
    steps = ds["step"].values
    times = emergence_times(steps, ds["cell_loss"].values, cfg.vocab)
    plateaus = [plateau_length(steps, curve, cfg.warmup) for curve in ds["loss"].values]
    floor = cfg.loss_floor()
    final = ds["loss"].isel(step=-1).values
    summary = {
        "loss_floor": floor,
        "initial_loss_ln_K": math.log(cfg.vocab),
        "emergence_rule": EMERGENCE_RULE,
        "plateau_rule": PLATEAU_RULE,
        "emergence_steps_per_seed": times,
        "run_emergence_rule": "step at which the last output cell emerged; inf when a "
        "cell never emerged within the budget",
        "run_emergence_step_per_seed": np.nanmax(np.where(np.isnan(times), np.inf, times), axis=-1),
        "plateau_level_per_seed": [p[0] for p in plateaus],
        "plateau_length_per_seed": [p[1] for p in plateaus],
        "final_loss_per_seed": final,
        "success_per_seed": solved(final, floor).tolist(),
        "success_rule": SUCCESS_RULE,
    }
    if M is not None:
        summary["M"] = np.asarray(M)
        summary["step_height"] = tasks.linear_map_step_height(cfg.S, cfg.n_states)
    return summary


def run(cfg: EmergenceConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) the experiment into ``output.out``; returns the run directory (the
    in-memory result when ``output.store`` is off)."""
    M = task_data(cfg)[0]
    return run_experiment(
        NAME,
        cfg,
        output,
        problem(cfg),
        optimizer(cfg),
        lambda ds: summarize(cfg, M, ds),
        seeds={
            "task_seed": cfg.task_seed,
            "task_rule": "M from key(task_seed) fold 0, evaluation set "
            "from fold 1; training batches from each seed's "
            "data stream",
        },
    )


def run_stored(cfg: EmergenceConfig, output: RunOutput) -> xr.Dataset:
    """Run the experiment into ``output.out`` (stored) and read its logged trajectory back."""
    require(output.store, "store", output.store, "True (the trajectory is read back)")
    path = run(cfg, output)
    assert isinstance(path, Path)
    return load(path)[0]
