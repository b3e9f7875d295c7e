"""How fast AdamW, SGD with momentum or GD split the heads of the minimal transformer on the Markov
chain at the stage-1 plateau, the optimizer linearised with its coefficients frozen at one step
(issue 17 item 4; ``theory.incremental.splitting``; spec incremental.md §3.1, §4, §5.3; when the
heads split, to first order with nothing frozen: ``simulate.incremental.tangent_split``).

The exactly symmetric copy of a run (``q = 0``, float64) is trained with the run's own optimizer
to a step of the plateau; there the most negative eigenvalue of ``P^(1/2) H_a P^(1/2)`` (``H_a``
the Hessian of the cross-entropy in one head-splitting direction, ``P`` AdamW's preconditioner
``1 / (sqrt(v_hat) + eps)`` read from the copy's state, the identity for SGD and GD) gives
``mu = -lr * eigenvalue`` and ``theory.incremental.splitting.splitting_rate`` the growth per
step. At a symmetric point the Hessian's
blocks are the same for every pair of heads, so heads 1 and 2 moving apart (the others fixed)
carry the whole spectrum of ``H_a``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpy.typing import ArrayLike
from scipy.sparse.linalg import LinearOperator, eigsh

from simulate.incremental.markov_task import sample_sequences
from simulate.incremental.markov_training import (
    MarkovTrainConfig,
    _nll,
    log_probs,
    markov_data,
    optimizer,
    positional_part,
    problem,
)
from simulate.measure.fits import linear_slope
from simulate.train import optimizer_step, seed_streams, step_data
from theory.incremental.splitting import splitting_rate
from theory.validation import require

ADAM_EPS = 1e-8
"""eps of ``optax.adamw``'s default, which the markov trainer uses."""
LANCZOS_TOL = 1e-2
"""relative accuracy asked of the eigenvalue: 1%, far inside what the linearisation misses by
(measured on the head-dynamics quick run's split, 2026-12-02: the same to 0.1 step as with 1e-4,
in 74 s instead of 105 s)."""
LANCZOS_VECTORS = 8
"""Lanczos vectors per restart (ARPACK's ncv; its default is 20). Each eigenvalue after the first
starts from the previous step's eigenvector (the plateau moves slowly), the first from a fixed
random vector, so the rates are the same from run to run (with ARPACK's own random start they
were not). Seven eigenvalues along a plateau took 103 Hessian-vector products
instead of 157 (each 0.46 s: 2048 sequences in float64)."""
PROBE_KEY = 7
"""key of the sequences the Hessian is averaged over (drawn from the run's teacher)."""
RATE_RULE = (
    "predicted: mu = -lr x the most negative eigenvalue of P^1/2 H_a P^1/2 (H_a: Hessian of the "
    "cross-entropy on fresh teacher sequences in the direction of heads 1 and 2 moving apart; "
    "P = 1/(sqrt(v_hat) + eps) from AdamW's state, the identity for SGD and GD) on the exactly "
    "symmetric copy of the run (q = 0, float64, same seed and optimizer) at the given step, then "
    "r = ln z, z the larger root of z^2 - (1 - lr wd + beta1 + mu (1 - beta1)) z + beta1 (1 - lr "
    "wd) (AdamW) or z^2 - (1 + beta + mu) z + beta (SGD, momentum beta; GD: beta = 0)"
)
SPLIT_MARGIN = 50
"""steps before the head split left out of the measured window: the split saturates there."""
MEASURED_RATE_RULE = (
    "measured: least-squares slope of ln(head asymmetry) (max over head pairs of ||W_Q^h - "
    "W_Q^h'||_F) against the step over the logged steps from the middle of the plateau, "
    f"(t_1 + t_split) / 2, to {SPLIT_MARGIN} steps before the head split t_split"
)


def measured_rate(steps, asymmetry, t_1: float, t_split: float) -> tuple[float, list[float]]:
    """The slope of ln(head asymmetry) over the logged steps of ``MEASURED_RATE_RULE``'s window,
    and the window; nan with fewer than 3 logged steps in it (or no split)."""
    lo, hi = 0.5 * (t_1 + t_split), t_split - SPLIT_MARGIN
    steps, asymmetry = np.asarray(steps, float), np.asarray(asymmetry, float)
    inside = (steps >= lo) & (steps <= hi)
    if not (math.isfinite(t_1) and math.isfinite(t_split)) or inside.sum() < 3:
        return float("nan"), [lo, hi]
    return linear_slope(steps[inside], np.log(asymmetry[inside])), [lo, hi]


@dataclass(frozen=True)
class SplittingRate:
    """The head-splitting growth of the run's optimizer at one step of the symmetric plateau."""

    step: int
    """step of the symmetric copy at which the Hessian and the preconditioner are read."""
    eigenvalue: float
    """most negative eigenvalue of P^1/2 H_a P^1/2."""
    mu: float
    """-lr x eigenvalue: growth per step of preconditioned gradient descent."""
    rate: float
    """r = ln z per step, with the optimizer's momentum and decay
    (theory.incremental.splitting)."""


def symmetric_copy(cfg: MarkovTrainConfig) -> MarkovTrainConfig:
    """The run's exactly symmetric twin: q = 0 (identical heads, W_V = 0), float64, one seed."""
    return replace(cfg, query_scale=0.0, precision="float64", seeds=1, baselines=())


def states_at(cfg: MarkovTrainConfig, steps: list[int]):
    """Parameters and optimizer state of ``cfg`` (one seed) at each of ``steps``, one scan per
    stretch between them: the trainer's step on the same data keys, without its logging and
    divergence checks (``simulate.train`` keeps only the last state of a run, and the twin's is
    needed at every step asked)."""
    prob, opt = problem(cfg), optimizer(cfg)
    keys = seed_streams([cfg.seed])
    params = prob.init(keys["init"][0], keys["noise"][0])

    def one(carry, _):
        params, state, key, step = carry
        key, data = step_data(prob, key, step)
        params, state, _ = optimizer_step(prob.loss_and_direction, opt, params, state, data)
        return (params, state, key, step + 1), None

    @partial(jax.jit, static_argnums=1)
    def advance(carry, length):
        return jax.lax.scan(one, carry, None, length=length)[0]

    carry, done = (params, opt.init(params), keys["data"][0], jnp.int32(0)), 0
    for step in steps:
        carry, done = advance(carry, step - done), step
        yield carry[0], carry[1]


def _preconditioner(state: Any, beta2: float):
    """AdamW's 1 / (sqrt(v_hat) + eps) per parameter and the mask of the entries it has moved
    (v = 0: a gradient that was exactly zero all along, an entry the linearisation leaves out)."""
    nu = optax.tree_utils.tree_get(state, "nu")
    count = optax.tree_utils.tree_get(state, "count")
    v_hat = jax.tree.map(lambda v: v / (1 - beta2 ** count.astype(v.dtype)), nu)
    return (
        jax.tree.map(lambda v: 1 / (jnp.sqrt(v) + ADAM_EPS), v_hat),
        jax.tree.map(lambda v: v > 0, v_hat),
    )


def splitting_rates(
    cfg: MarkovTrainConfig, steps: ArrayLike, probe: int = 2048, tol: float = LANCZOS_TOL
) -> list[SplittingRate]:
    """``SplittingRate`` at each of ``steps`` (ascending) of the symmetric copy of ``cfg``."""
    return list(_rates_along(cfg, steps, probe, tol))


def _rates_along(cfg: MarkovTrainConfig, steps: ArrayLike, probe: int, tol: float):
    """``splitting_rates`` one step at a time (the twin trains on only as far as asked)."""
    require(cfg.model == "minimal", "model", cfg.model, "minimal (the head-splitting rate)")
    require(cfg.layers == 1, "layers", cfg.layers, "1 (the head-splitting rate)")
    require(cfg.heads >= 2, "heads", cfg.heads, "at least 2 heads to split")
    steps = [int(s) for s in np.atleast_1d(steps)]
    require(
        all(s >= 1 for s in steps) and steps == sorted(steps),
        "steps",
        steps,
        "ascending steps >= 1",
    )
    twin = symmetric_copy(cfg)
    data = markov_data(twin)
    task, w = data.task, data.task.window
    seqs = sample_sequences(task, data.A, jax.random.PRNGKey(PROBE_KEY), probe)
    grad = jax.jit(jax.grad(lambda m: _nll(log_probs(m, task, seqs), seqs[:, w:])))
    split = jnp.zeros(cfg.heads).at[0].set(1).at[1].set(-1) / math.sqrt(2)
    lr = cfg.learning_rate

    def tangent(model, y_q, y_v):
        """heads 1 and 2 moved by +-(y_q, y_v) / sqrt(2), the others kept."""
        return eqx.tree_at(
            lambda m: (m.WQ, m.WV),
            model,
            (split[:, None, None] * y_q, split[:, None, None] * y_v),
        )

    @jax.jit
    def hvp(model, y_q, y_v):
        hv = jax.jvp(grad, (model,), (tangent(model, y_q, y_v),))[1]
        return jnp.tensordot(split, hv.WQ, 1), jnp.tensordot(split, hv.WV, 1)

    start_vector = None
    for step, (model, state) in zip(steps, states_at(twin, steps)):
        D = model.WQ.shape[-1]
        if start_vector is None:
            start_vector = np.random.default_rng(PROBE_KEY).standard_normal(2 * D * D)
        if cfg.optimizer == "adamw":
            pre, moved = _preconditioner(state, cfg.beta2)
            # one head's entries (the twin's heads are identical): P^1/2 on the moved ones
            root = np.concatenate(
                [
                    np.where(np.asarray(mv[0]), np.sqrt(np.asarray(p[0])), 0.0).ravel()
                    for p, mv in ((pre.WQ, moved.WQ), (pre.WV, moved.WV))
                ]
            )
        else:  # P = I on the entries the optimizer trains
            ones = eqx.tree_at(
                lambda m: (m.WQ, m.WV), model, (jnp.ones_like(model.WQ), jnp.ones_like(model.WV))
            )
            trained = positional_part(ones) if cfg.attention == "positional" else ones
            root = np.concatenate(
                [np.asarray(trained.WQ[0]).ravel(), np.asarray(trained.WV[0]).ravel()]
            )

        def matvec(y, model=model, root=root, D=D):
            y = np.asarray(y).ravel() * root
            hq, hv = hvp(
                model, jnp.asarray(y[: D * D].reshape(D, D)), jnp.asarray(y[D * D :].reshape(D, D))
            )
            return np.concatenate([np.asarray(hq).ravel(), np.asarray(hv).ravel()]) * root

        # scipy's stubs type the abstract base's constructor and an integer tol
        op = cast(Any, LinearOperator)((2 * D * D,) * 2, matvec=matvec, dtype=np.float64)
        lowest, vectors = eigsh(
            op, k=1, which="SA", tol=cast(Any, tol), ncv=LANCZOS_VECTORS, v0=start_vector
        )
        eigenvalue, v = float(lowest[0]), vectors[:, 0]
        start_vector = v
        mu = -lr * eigenvalue
        yield SplittingRate(step, eigenvalue, mu, _rate(cfg, mu) if mu > 0 else float("nan"))


def _rate(cfg: MarkovTrainConfig, mu: float) -> float:
    """``splitting_rate`` with the momentum and decay of ``cfg``'s optimizer."""
    if cfg.optimizer == "adamw":
        return splitting_rate(mu, cfg.beta1, cfg.learning_rate * cfg.weight_decay, "ema")
    momentum = cfg.momentum if cfg.optimizer == "sgd" else 0.0
    return splitting_rate(mu, momentum, 0.0, "heavy_ball")
