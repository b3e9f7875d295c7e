"""Experiment ``regression-minimal``: the minimal transformer on the regression variant, trained by
gradient descent with a small step (gradient flow, tau = steps x lr), with the reduced state and the
reduction's assumptions logged (spec incremental.md §2.4, §3.1, §5.1;
``theory.incremental.reduction``).

Model (minimal, one query): ``z_s = [x_s; e_s]``, scores ``z_s^T W_Q^k z_q / sqrt(D)`` over all L
positions, ``yhat = sum_k sum_s a_k(s) [W_V^k z_s]_{1:d}``; loss ``1/2 ||y - yhat||^2`` summed over
the d outputs and averaged over sequences. Initialisation W_Q ~ U(-q, q), W_V = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.incremental.markov_task import MarkovSetting, teacher
from simulate.incremental.regression_task import lag_matrix, moment_error, sample_inputs, targets
from simulate.runner import RunOptions, RunOutput, Seeds, run_experiment
from simulate.train import Problem, TrainResult, seed_streams
from theory.incremental.reduction import ASSUMPTIONS, reduced_setting, reduced_state, value_scale
from theory.validation import require

NAME = "regression-minimal"


@dataclass(frozen=True)
class RegressionConfig(RunOptions):
    """Minimal transformer on the regression variant under gradient flow (project setting)."""

    vocab: int = 8
    """d, input dimension."""
    blocks: tuple[int, ...] = (1, 1, 1)
    """|I(k)|, lag-block sizes, most recent first."""
    m: float = 1.7
    """importance ratio m; A*_k = m^(h-k) Q_k with Frobenius-orthogonal orthogonal Q_k."""
    alpha: tuple[float, ...] | None = None
    """within-block weights, one per lag of a block (normalised to sum 1; default 1)."""
    length: int = 8
    """L, positions per sequence = T, the lags the query sees."""
    heads: int = 3
    """H, attention heads."""
    attention: Literal["positional", "full"] = "positional"
    """positional: only the position-position block of W_Q acts (the reviewers' "model
    minimality"; the reduction's assumption made structural); full: all of W_Q trains, as in the
    minimal transformer of spec §3.1."""
    query_scale: float = 1e-4
    """q: W_Q ~ U(-q, q), W_V = 0."""
    lr: float = 0.05
    """gradient-descent step; ODE time = steps x lr."""
    data: Literal["fixed", "fresh"] = "fixed"
    """fixed: one training set, full-batch gradient descent; fresh: a new batch every step."""
    batch: int = 512
    """sequences in the training set (fixed) or per step (fresh)."""
    whitened: bool = True
    """rescale every batch to exact unit second moment (see
    simulate.incremental.regression_task)."""
    validation: int = 512
    """validation sequences (whitened like the training data)."""
    teacher_seed: int = 0
    """seed of the teacher and of the fixed training and validation sets."""
    steps: int = 4000
    """gradient steps (a multiple of chunk)."""
    log_every: int = 10
    """steps between logged rows."""
    chunk: int = 1000
    """steps per compiled chunk (a multiple of log_every)."""
    seeds: int = 1
    """initialisation seeds, vmapped."""

    def __post_init__(self):
        RunOptions.__post_init__(self)
        Seeds.check_seed("teacher_seed", self.teacher_seed)
        self.task()  # validates vocab, blocks, m, alpha
        require(
            self.length >= sum(self.blocks),
            "length",
            self.length,
            f"an integer >= the teacher's window {sum(self.blocks)}",
        )
        require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        require(
            math.isfinite(self.query_scale) and self.query_scale >= 0,
            "query_scale",
            self.query_scale,
            "a scale >= 0",
        )
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a step > 0")
        dim = self.length * self.vocab
        for name in ("batch", "validation"):
            n = getattr(self, name)
            require(
                n >= 1 and (not self.whitened or n > dim),
                name,
                n,
                f"an integer > L d = {dim} (whitening needs a full-rank batch)"
                if self.whitened
                else "an integer >= 1",
            )

    def task(self) -> MarkovSetting:
        return MarkovSetting(
            vocab=self.vocab,
            blocks=self.blocks,
            m=self.m,
            alpha=self.alpha,
            frobenius_orthogonal=True,
        )

    @property
    def D(self) -> int:
        return self.vocab + self.length

    def reduced(self):
        """The reduced system (``theory.incremental.reduction.reduced_setting``) of this run."""
        task = self.task()
        norms = task.importances() * math.sqrt(self.vocab)  # ||c_k Q_k||_F, Q_k orthogonal
        weights = task.lag_weights()
        alpha = (
            None
            if self.alpha is None
            else tuple(
                float(weights[k, i]) for k in range(task.h) for i in np.nonzero(weights[k])[0]
            )
        )
        return reduced_setting(self.blocks, norms, alpha, self.heads, self.length, self.vocab)


def predict(params, x, positional: bool):
    """yhat (d,), attention and scores (H, L) of the query at L - 1 for one sequence x (L, d);
    ``positional`` keeps only the position-position block of W_Q."""
    L, d = x.shape
    z = jnp.concatenate([x, jnp.eye(L, dtype=x.dtype)], axis=-1)
    WQ = params["WQ"]
    if positional:
        WQ = WQ.at[:, :d].set(0.0).at[:, :, :d].set(0.0)
    scores = jnp.einsum("hab,sa,b->hs", WQ, z, z[-1]) / jnp.sqrt(z.shape[-1])
    a = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("hs,hab,sb->a", a, params["WV"][:, :d, :], z), a, scores


def mse(params, x, y, positional: bool):
    yhat = jax.vmap(lambda s: predict(params, s, positional)[0])(x)
    return 0.5 * jnp.mean(jnp.sum((y - yhat) ** 2, axis=-1))


def problem(cfg: RegressionConfig):
    task = cfg.task()
    d, L, H, D = cfg.vocab, cfg.length, cfg.heads, cfg.D
    key = jax.random.PRNGKey(cfg.teacher_seed)
    A = teacher(task, key)
    C = lag_matrix(task.lag_weights(), L)
    val_x = sample_inputs(jax.random.fold_in(key, 1), cfg.validation, L, d, cfg.whitened)
    train_x = sample_inputs(jax.random.fold_in(key, 2), cfg.batch, L, d, cfg.whitened)
    val_y, train_y = targets(A, C, val_x), targets(A, C, train_x)
    A_hat = A / jnp.linalg.norm(A, axis=(1, 2), keepdims=True)
    lag_block = jnp.asarray(C.T > 0, dtype=jnp.float64)  # (L, h): position -> its block
    positional = cfg.attention == "positional"

    def init(init_key, noise_key):
        del noise_key
        q = cfg.query_scale
        return {
            "WQ": jax.random.uniform(init_key, (H, D, D), jnp.float64, -q, q),
            "WV": jnp.zeros((H, D, D)),
        }

    def loss_and_direction(params, data_key):
        if cfg.data == "fixed":
            return jax.value_and_grad(mse)(params, train_x, train_y, positional)
        x = sample_inputs(data_key, cfg.batch, L, d, cfg.whitened)
        return jax.value_and_grad(mse)(params, x, targets(A, C, x), positional)

    def observe(params):
        _, a, scores = jax.vmap(lambda s: predict(params, s, positional))(val_x)
        pos = params["WQ"][:, d:, d + L - 1] / jnp.sqrt(D)  # (H, L) by key position
        V = params["WV"][:, :d, :d]
        v = jnp.einsum("hab,kab->hk", V, A_hat)
        off_span = V - jnp.einsum("hk,kab->hab", v, A_hat)
        WQ = params["WQ"]
        return {
            "val_loss": mse(params, val_x, val_y, positional),
            "block_mass": a.mean(0) @ lag_block,
            "reduced_block_mass": jax.nn.softmax(pos, -1) @ lag_block,
            "reduced_value": v / value_scale(D),
            "content_logit_rms": jnp.sqrt(jnp.mean((scores - pos[None]) ** 2)),
            "value_off_span": jnp.max(
                jnp.linalg.norm(off_span, axis=(1, 2))
                / jnp.maximum(jnp.linalg.norm(V, axis=(1, 2)), 1e-300)
            ),
            "value_position_norm": jnp.max(jnp.linalg.norm(params["WV"][:, :d, d:], axis=(1, 2))),
            "head_asymmetry": jnp.max(jnp.linalg.norm(WQ[:, None] - WQ[None], axis=(2, 3))),
        }

    dims = {
        "val_loss": (),
        "block_mass": ("head", "block"),
        "reduced_block_mass": ("head", "block"),
        "reduced_value": ("head", "block"),
        "content_logit_rms": (),
        "value_off_span": (),
        "value_position_norm": (),
        "head_asymmetry": (),
    }
    coords = {"head": np.arange(1, H + 1), "block": np.arange(1, task.h + 1)}
    overlap = np.einsum("iab,jab->ij", np.asarray(A_hat), np.asarray(A_hat)) - np.eye(task.h)
    constants = {
        "input_moment_error": float(moment_error(train_x)),
        "validation_moment_error": float(moment_error(val_x)),
        "feature_overlap": float(np.max(np.abs(overlap))),
    }
    return Problem(init, loss_and_direction, observe, dims, coords), constants


def initial_reduced_logits(cfg: RegressionConfig) -> np.ndarray:
    """theta_k(0) (seeds x H x T, lag order) of the reduced system: each seed's network
    initialisation through ``theory.incremental.reduction.reduced_state``."""
    prob, _ = problem(cfg)
    keys = seed_streams(cfg.seed_ids)
    params = jax.vmap(prob.init)(keys["init"], keys["noise"])
    A = teacher(cfg.task(), jax.random.PRNGKey(cfg.teacher_seed))
    _, theta = reduced_state(
        np.asarray(params["WQ"]), np.asarray(params["WV"]), np.asarray(A), cfg.vocab
    )
    return theta


def run(cfg: RegressionConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) into ``output.out``; returns the run directory."""
    prob, constants = problem(cfg)

    def summarize(ds):
        return {
            "time_map": "ODE time t = steps x lr (gradient flow); network loss = D x reduced "
            "loss; reduced values v' = <V, Ahat>/sqrt(D)",
            "D": cfg.D,
            "assumptions": [a.__dict__ for a in ASSUMPTIONS],
            "reduced_importances": list(cfg.reduced().importance_values),
            **constants,
            "max_content_logit_rms": float(ds["content_logit_rms"].max()),
            "max_value_off_span": float(ds["value_off_span"].max()),
            "max_value_position_norm": float(ds["value_position_norm"].max()),
            "final_val_loss": ds["val_loss"].isel(step=-1).values,
        }

    return run_experiment(
        NAME,
        cfg,
        output,
        prob,
        optax.sgd(cfg.lr),
        summarize,
        seeds={
            "teacher_seed": cfg.teacher_seed,
            "teacher_rule": "teacher, validation and fixed training set from "
            "key(teacher_seed) and its fold_in 1, 2",
        },
    )
