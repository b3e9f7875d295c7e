"""How fast AdamW, SGD with momentum or GD split the heads of the minimal transformer on the Markov
chain at the stage-1 plateau, and when the heads split (issue 17 item 4;
``theory.incremental.splitting``; spec incremental.md §3.1, §4, §5.3).

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
    SPLIT_MASS,
    MarkovTrainConfig,
    _nll,
    build_model,
    log_probs,
    markov_data,
    optimizer,
    positional_part,
    problem,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from simulate.measure.fits import linear_slope
from simulate.train import seed_streams
from theory.incremental.splitting import splitting_rate
from theory.validation import require

ADAM_EPS = 1e-8
"""eps of ``optax.adamw``'s default, which the markov trainer uses."""
LANCZOS_TOL = 1e-2
"""relative accuracy asked of the eigenvalue: 1%, far inside what the linearisation misses by;
the head-dynamics quick split is 354.1 steps with it as with 1e-4, in 74 s instead of 105 s."""
LANCZOS_VECTORS = 8
"""Lanczos vectors per restart (ARPACK's ncv; its default is 20). Each eigenvalue after the first
starts from the previous step's eigenvector (the plateau moves slowly), the first from a fixed
random vector, so the rates are the same from run to run (ARPACK's own random start made the
head-dynamics quick split vary by 0.05 steps). That split reads seven eigenvalues: 103
Hessian-vector products instead of 157 (each 0.46 s: 2048 sequences in float64), split 354.03
against 354.15-354.20 steps."""
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
    initial_amplitude: float
    """|c_0|: the run's own initial head difference (heads 1 and 2) along this direction."""
    split_amplitude: float
    """the amplitude along this direction at which the last query's block masses of heads 1
    and 2 differ by ``SPLIT_MASS`` (first order)."""


def symmetric_copy(cfg: MarkovTrainConfig) -> MarkovTrainConfig:
    """The run's exactly symmetric twin: q = 0 (identical heads, W_V = 0), float64, one seed."""
    return replace(cfg, query_scale=0.0, precision="float64", seeds=1, baselines=())


def _states_at(cfg: MarkovTrainConfig, steps: list[int]):
    """Parameters and optimizer state of ``cfg`` (one seed) at each of ``steps``, one scan per
    stretch between them: the trainer's step on the same data keys, without its logging and
    divergence checks (``simulate.train`` keeps only the last state of a run, and the twin's is
    needed at every step asked)."""
    prob, opt = problem(cfg), optimizer(cfg)
    keys = seed_streams([cfg.seed])
    params = prob.init(keys["init"][0], keys["noise"][0])

    def one(carry, _):
        params, state, key = carry
        key, sub = jax.random.split(key)
        _, grad = prob.loss_and_direction(params, sub)
        updates, state = opt.update(grad, state, params)
        return (optax.apply_updates(params, updates), state, key), None

    @partial(jax.jit, static_argnums=1)
    def advance(carry, length):
        with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
            return jax.lax.scan(one, carry, None, length=length)[0]

    carry, done = (params, opt.init(params), keys["data"][0]), 0
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
    mass = problem(twin, data).observe

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

    @jax.jit
    def mass_split(model, y_q, y_v):
        """d(block mass of head 1 - head 2) of the last query along (y_q, y_v)."""
        dm = jax.jvp(lambda m: mass(m)["block_mass"][0], (model,), (tangent(model, y_q, y_v),))[1]
        return dm[0] - dm[1]

    start = cast(MinimalTransformer, build_model(cfg, seed_streams([cfg.seed])["init"][0]))
    start_split = np.concatenate(
        [np.asarray(x[0] - x[1], np.float64).ravel() / math.sqrt(2) for x in (start.WQ, start.WV)]
    )

    start_vector = np.random.default_rng(PROBE_KEY).standard_normal(start_split.size)
    for step, (model, state) in zip(steps, _states_at(twin, steps)):
        D = model.WQ.shape[-1]
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
        rate = _rate(cfg, mu) if mu > 0 else float("nan")
        # the mode of y' = -lr P H y is P^1/2 v; its left partner P^-1/2 v picks the amplitude
        # (v vanishes on the unmoved entries, where root = 0)
        moved_entries = root > 0
        amplitude = abs(
            float(v[moved_entries] @ (start_split[moved_entries] / root[moved_entries]))
        )
        mode = root * v
        response = np.asarray(
            mass_split(
                model,
                jnp.asarray(mode[: D * D].reshape(D, D)),
                jnp.asarray(mode[D * D :].reshape(D, D)),
            )
        )
        yield SplittingRate(
            step,
            eigenvalue,
            mu,
            rate,
            amplitude,
            SPLIT_MASS / float(np.max(np.abs(response))),
        )


def _rate(cfg: MarkovTrainConfig, mu: float) -> float:
    """``splitting_rate`` with the momentum and decay of ``cfg``'s optimizer."""
    if cfg.optimizer == "adamw":
        return splitting_rate(mu, cfg.beta1, cfg.learning_rate * cfg.weight_decay, "ema")
    momentum = cfg.momentum if cfg.optimizer == "sgd" else 0.0
    return splitting_rate(mu, momentum, 0.0, "heavy_ball")


SPLIT_GRID = (10, 25, 50, 100, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3200, 4800, 6400)
"""steps at which ``predict_split`` reads the rate (the early ones follow stage 1)."""
SPLIT_PREDICTION_RULE = (
    "a-priori: the split between heads 1 and 2 of the run's own initialisation, projected on the "
    "most unstable direction of the linearised AdamW at the first grid step (left eigenvector), "
    "grows by e^(integral of r) (r read on the symmetric twin at the grid steps, linear between "
    f"them); the heads split when its first-order block-mass difference reaches {SPLIT_MASS}"
)


def predict_split(
    cfg: MarkovTrainConfig,
    grid: ArrayLike = SPLIT_GRID,
    probe: int = 2048,
    tol: float = LANCZOS_TOL,
) -> tuple[float, list[SplittingRate]]:
    """The a-priori head-split step of ``cfg`` (``SPLIT_PREDICTION_RULE``) and the rates it read:
    the twin trains along ``grid`` (up to ``cfg.steps``) only until the split is reached."""
    steps = [int(g) for g in np.atleast_1d(grid) if g <= cfg.steps]
    rates: list[SplittingRate] = []
    for at in _rates_along(cfg, steps, probe, tol):
        rates.append(at)
        if math.isfinite(predicted_split(rates)):
            break
    return predicted_split(rates), rates


def predicted_split(rates: list[SplittingRate]) -> float:
    """First step at which the split grown from its initial amplitude (along the first
    ``rates`` step's direction) reaches the split amplitude: ln a(t) = ln a_0 + integral of r
    (linear between the steps, r constant before the first); nan if not within the last."""
    steps = np.array([0.0] + [r.step for r in rates])
    r = np.array([rates[0].rate] + [x.rate for x in rates])
    grown = np.log(rates[0].initial_amplitude) + np.concatenate(
        [[0.0], np.cumsum(0.5 * (r[1:] + r[:-1]) * np.diff(steps))]
    )
    needed = np.log([rates[0].split_amplitude] + [x.split_amplitude for x in rates])
    gap = grown - needed
    above = np.nonzero(gap >= 0)[0]
    if above.size == 0 or not np.all(np.isfinite(r)):
        return float("nan")
    i = int(above[0])
    if i == 0:
        return 0.0
    return float(steps[i - 1] + (steps[i] - steps[i - 1]) * -gap[i - 1] / (gap[i] - gap[i - 1]))
