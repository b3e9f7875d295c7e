"""Experiment ``markov-minimal``: the minimal transformer trained online on the high-order Markov
chain (spec incremental.md §2-4; defaults: the online run of the paper's Figs. 6-7, q = 1e-9,
W_V = 0, 512 fresh sequences per step, AdamW lr 0.08, weight decay 0.01, clipping at 1).

Logged every ``log_every`` steps on a fixed validation set: loss, KL(p_{A*_{1:k}} || p_model) for
every truncated teacher, attention mass of each head on each lag block from the last query, and
the value alignment <V_h, A*_k / ||A*_k||_F>.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.markov_task import (
    MarkovSetting,
    sample_sequences,
    teacher,
    teacher_log_probs,
)
from simulate.minimal_transformer import init_minimal
from simulate.runner import RunOptions, run_experiment
from simulate.train import Problem
from theory.validation import require

NAME = "markov-minimal"


@dataclass(frozen=True)
class MarkovMinimalConfig(MarkovSetting, RunOptions):
    """Minimal transformer, online training on the Markov chain (paper Figs. 6-7 setting)."""

    heads: int = 3
    """H, attention heads."""
    query_scale: float | None = 1e-9
    """q: W_Q ~ U(-q, q) with W_V = 0; None for Xavier-uniform W_Q and W_V."""
    lr: float = 0.08
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    clip: float = 1.0
    """gradient clipping at this global norm."""
    batch: int = 512
    """fresh sequences per step."""
    validation: int = 512
    """validation sequences (fixed, drawn once from the teacher)."""
    teacher_seed: int = 0
    """seed of the teacher matrices and of the validation set."""
    steps: int = 2000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 10
    """steps between logged rows."""
    chunk: int = 100
    """steps per compiled chunk and checkpoint (a multiple of log_every)."""
    seeds: int = 1
    """training seeds (initialisation and data), vmapped."""
    out: Path = Path("runs/markov-minimal")
    """run directory."""

    def __post_init__(self):
        MarkovSetting.__post_init__(self)
        RunOptions.__post_init__(self)
        require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        require(self.query_scale is None or self.query_scale >= 0, "query_scale",
                self.query_scale, "a scale >= 0, or None for Xavier")
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a learning rate > 0")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a value >= 0")
        require(self.clip > 0, "clip", self.clip, "a global norm > 0")
        require(self.batch >= 1, "batch", self.batch, "an integer >= 1")
        require(self.validation >= 1, "validation", self.validation, "an integer >= 1")

    def task(self) -> MarkovSetting:
        return MarkovSetting(**{f.name: getattr(self, f.name) for f in fields(MarkovSetting)})


def _nll(logp, targets):
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def yardstick_losses(task: MarkovSetting, A, sequences) -> np.ndarray:
    """Validation loss of uniform prediction (ln d) and of each truncated teacher A*_{1:k}."""
    targets = sequences[:, task.window:]
    return np.array([math.log(task.vocab)] + [
        float(_nll(teacher_log_probs(task, A, sequences, k), targets))
        for k in range(1, task.h + 1)])


def problem(cfg: MarkovMinimalConfig):
    task = cfg.task()
    key = jax.random.PRNGKey(cfg.teacher_seed)
    A = teacher(task, key)
    val = sample_sequences(task, A, jax.random.fold_in(key, 1), cfg.validation)
    w, L = task.window, task.length - 1
    ref = jnp.stack([teacher_log_probs(task, A, val, k) for k in range(1, task.h + 1)])
    A_hat = A / jnp.linalg.norm(A, axis=(1, 2), keepdims=True)
    order = np.argsort(-task.importances(), kind="stable")
    lag_block = np.zeros((L, task.h))  # key position of the last query -> block of its lag
    start = 0
    for k, b in enumerate(task.blocks):
        for i in range(start + 1, start + b + 1):
            lag_block[L - i, k] = 1.0  # the last output (position L-1) predicts token L
        start += b
    lag_block = jnp.asarray(lag_block)

    def predict(model, seqs):
        logits = jax.vmap(model)(seqs[:, :-1])[:, w - 1:]
        return jax.nn.log_softmax(logits)

    def init(init_key, noise_key):
        del noise_key
        return init_minimal(init_key, cfg.heads, task.vocab, L, cfg.query_scale)

    def loss_and_direction(model, data_key):
        seqs = sample_sequences(task, A, data_key, cfg.batch)
        return jax.value_and_grad(lambda m: _nll(predict(m, seqs), seqs[:, w:]))(model)

    def observe(model):
        logp = predict(model, val)
        kl = jnp.mean(jnp.sum(jnp.exp(ref) * (ref - logp[None]), axis=-1), axis=(1, 2))
        last = jax.vmap(lambda s: model.attention(s[:-1])[:, -1])(val).mean(0)  # (H, L)
        return {"val_loss": _nll(logp, val[:, w:]), "kl_yardstick": kl[order.argsort()],
                "block_mass": last @ lag_block,
                "value_alignment": jnp.einsum("hab,kab->hk", model.WV[:, :task.vocab,
                                                                        :task.vocab], A_hat)}

    dims = {"val_loss": (), "kl_yardstick": ("yardstick",), "block_mass": ("head", "block"),
            "value_alignment": ("head", "block")}
    coords = {"yardstick": np.arange(1, task.h + 1), "head": np.arange(1, cfg.heads + 1),
              "block": np.arange(1, task.h + 1)}
    return Problem(init, loss_and_direction, observe, dims, coords), (task, A, val)


LADDER_RULE = ("ladder step k (k >= 2): first logged step from which on the truncated teacher "
               "closest in KL is A*_{1:j} with j >= k (the trajectory has left classes < k)")
SPLIT_RULE = "first logged step at which two heads' block masses differ by more than 0.1"


def ladder_steps(steps, kl) -> list[float]:
    """Per ``LADDER_RULE``, for k = 2..h; nan when class k is never reached for good."""
    closest = np.argmin(kl, axis=-1) + 1
    out = []
    for k in range(2, kl.shape[-1] + 1):
        below = np.nonzero(closest < k)[0]
        first = 0 if below.size == 0 else below[-1] + 1
        out.append(float(steps[first]) if first < len(steps) else float("nan"))
    return out


def split_step(steps, block_mass) -> float:
    """Per ``SPLIT_RULE``; ``block_mass`` is (step, head, block)."""
    spread = np.max(block_mass, axis=1) - np.min(block_mass, axis=1)
    hit = np.nonzero(np.max(spread, axis=-1) > 0.1)[0]
    return float(steps[hit[0]]) if hit.size else float("nan")


def run(cfg: MarkovMinimalConfig):
    """Run (or resume) the experiment into ``cfg.out``; returns the run directory."""
    prob, (task, A, val) = problem(cfg)
    optimizer = optax.chain(optax.clip_by_global_norm(cfg.clip),
                            optax.adamw(cfg.lr, weight_decay=cfg.weight_decay))

    def summarize(ds):
        yard = yardstick_losses(task, A, val)
        steps = ds["step"].values
        return {"yardstick_losses": {"uniform": yard[0],
                                     **{f"A*_1:{k}": yard[k] for k in range(1, task.h + 1)}},
                "ladder_rule": LADDER_RULE,
                "ladder_steps_per_seed": [ladder_steps(steps, kl)
                                          for kl in ds["kl_yardstick"].values],
                "heads_split_rule": SPLIT_RULE,
                "heads_split_step_per_seed": [split_step(steps, m)
                                              for m in ds["block_mass"].values],
                "final_val_loss": ds["val_loss"].isel(step=-1).values,
                "final_kl_yardstick": ds["kl_yardstick"].isel(step=-1).values}

    return run_experiment(NAME, cfg, prob, optimizer, summarize,
                          seeds={"teacher_seed": cfg.teacher_seed,
                                 "teacher_rule": "teacher and validation set from "
                                                 "key(teacher_seed) and its fold_in 1"})
