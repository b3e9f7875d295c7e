"""When the heads of the minimal transformer split, to first order in the query-init scale q: the
run's initial head differences carried along its exactly symmetric twin by the training step's
tangent map (issue 17 item 4; spec incremental.md §3.1, §4, §5.3).

The twin (``plateau_splitting.symmetric_copy``: q = 0, float64, one seed) trains with the run's own
optimizer on the run's own minibatches, and its heads, identical at the start, stay identical. The
run starts O(q) away from it, so to first order its parameters are ``theta_t = twin_t + J_t
delta_0``, ``delta_0`` the run's initialisation minus the twin's and ``J_t`` the Jacobian of the
first t training steps. Forward-mode differentiation of each step (``jax.jvp``) carries ``J_t
delta_0`` along with the twin: AdamW's preconditioner together with its response to the heads'
own gradients, the momentum, the bias corrections, the decay and the clipping, none of them frozen
(``theory.incremental.splitting`` reads ``P`` and ``H_a`` at one step and grows the split at that
step's rate). The last query's block masses of each head to first order, ``mass(twin_t) + d
mass . J_t delta_0``, then split by the rule the run's own split is measured by
(``markov_training.SPLIT_RULE``: two heads' masses more than ``SPLIT_MASS`` apart), at logged
steps of the run's own interval.

AdamW's ``sqrt(v)`` has no derivative at ``v = 0``, and some entries keep ``v = 0`` all along: the
query-key pairs the causal mask hides and the positions' value rows, which no loss reaches and
whose tangent is zero too. The twin's AdamW therefore takes ``sqrt(v + EPS_ROOT)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.incremental.markov_training import (
    SPLIT_MASS,
    MarkovTrainConfig,
    build_model,
    first_above,
    head_gaps,
    optimizer,
    problem,
)
from simulate.incremental.plateau_splitting import symmetric_copy
from simulate.measure.fits import linear_slope
from simulate.train import optimizer_step, seed_streams, step_data
from theory.validation import require

EPS_ROOT = 1e-30
"""added to AdamW's ``v_hat`` under the square root of the twin's optimizer (module docstring)."""
TANGENT_SPLIT_RULE = (
    "first-order (tangent) split: the run's initial head differences carried along its exactly "
    "symmetric twin (q = 0, float64, same seed, optimizer and minibatches) by the Jacobian-vector "
    "product of every training step; first logged step at which two heads' first-order block "
    f"masses (last query) differ by more than {SPLIT_MASS}"
)


@dataclass(frozen=True)
class TangentSplit:
    """The first-order head masses along the twin, up to the predicted split."""

    steps: np.ndarray
    """logged steps (every ``log_every`` of the run)."""
    spread: np.ndarray
    """first-order split: max over blocks of the largest minus the smallest head's first-order
    block mass."""
    split: float
    """``TANGENT_SPLIT_RULE``'s step; nan when the spread stays below ``SPLIT_MASS``."""
    apart: float = math.nan
    """``APART_RULE``'s step on the first-order masses (every two heads apart); nan when not
    reached within ``steps``."""

    def rate(self, lo: float, hi: float) -> float:
        """Least-squares slope of ln(spread) over the logged steps in [lo, hi] (per step)."""
        inside = (self.steps >= lo) & (self.steps <= hi) & (self.spread > 0)
        return linear_slope(self.steps[inside], np.log(self.spread[inside]))


def _zero_tangent(x):
    """Tangent zero of ``x`` (float0 for the optimizer's integer step count)."""
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


def tangent_split(cfg: MarkovTrainConfig, seed: int | None = None) -> TangentSplit:
    """``TANGENT_SPLIT_RULE`` for ``cfg``'s run of ``seed`` (default ``cfg.seed``)."""
    q = cfg.query_scale
    require(q is not None, "query_scale", q, "a query-init scale q (W_Q ~ U(-q, q), W_V = 0)")
    return tangent_splits(cfg, (cast(float, q),), seed)[0]


def tangent_splits(
    cfg: MarkovTrainConfig,
    scales: Sequence[float],
    seed: int | None = None,
    until_apart: bool = False,
) -> tuple[TangentSplit, ...]:
    """``TANGENT_SPLIT_RULE`` for ``cfg``'s run of ``seed`` (default ``cfg.seed``) at each query
    scale q of ``scales``, from one tangent: the twin (q = 0) is the same for every q and
    ``delta_0`` is q times the draw at q = 1 (W_Q ~ U(-q, q) = q U(-1, 1), W_V = 0), so the
    first-order masses are ``mass(twin_t) + q d mass . J_t delta_1``. The twin and the tangent
    advance one logged interval per compiled call and stop when every q has split (with
    ``until_apart``: has every two heads apart, ``markov_training.APART_RULE``) or at
    ``cfg.steps``."""
    require(cfg.model == "minimal", "model", cfg.model, "minimal (the first-order head split)")
    require(cfg.layers == 1, "layers", cfg.layers, "1 (the first-order head split)")
    require(cfg.heads >= 2, "heads", cfg.heads, "at least 2 heads to split")
    require(
        len(scales) > 0 and all(q >= 0 for q in scales),
        "query_scale",
        tuple(scales),
        "one or more query-init scales q >= 0",
    )
    seed = cfg.seed if seed is None else seed
    twin = replace(symmetric_copy(cfg), seed=seed)
    keys = seed_streams([seed])
    unit = build_model(replace(twin, query_scale=1.0), keys["init"][0])
    twin_start = build_model(twin, keys["init"][0])
    prob, opt = problem(twin), optimizer(twin, eps_root=EPS_ROOT)
    state = opt.init(cast(optax.Params, twin_start))
    delta = jax.tree.map(lambda a, b: a - b, unit, twin_start)

    def one(carry, _):
        params, state, d_params, d_state, key, step = carry
        key, data = step_data(prob, key, step)

        def update(params, state):
            return optimizer_step(prob.loss_and_direction, opt, params, state, data)[:2]

        (params, state), (d_params, d_state) = jax.jvp(update, (params, state), (d_params, d_state))
        return (params, state, d_params, d_state, key, step + 1), None

    def mass(model):
        return prob.observe(model)["block_mass"][0]  # (head, block), the last query

    @jax.jit
    def interval(carry):
        carry = jax.lax.scan(one, carry, None, length=cfg.log_every)[0]
        m, dm = jax.jvp(mass, (carry[0],), (carry[2],))
        return carry, m, dm

    q = np.asarray(scales, float)[:, None, None]
    carry = (
        twin_start,
        state,
        delta,
        jax.tree.map(_zero_tangent, state),
        keys["data"][0],
        jnp.int32(0),
    )
    steps, widest, narrowest = [], [], []
    gap = narrowest if until_apart else widest
    for step in range(cfg.log_every, cfg.steps + 1, cfg.log_every):
        carry, m, dm = interval(carry)
        wide, narrow = head_gaps(np.asarray(m) + q * np.asarray(dm))  # (scale,) each
        steps.append(step)
        widest.append(wide)
        narrowest.append(narrow)
        if np.all(np.max(gap, axis=0) > SPLIT_MASS):
            break
    steps = np.array(steps)
    return tuple(
        _split(steps, w, n, until_apart) for w, n in zip(np.array(widest).T, np.array(narrowest).T)
    )


def _split(
    steps: np.ndarray, widest: np.ndarray, narrowest: np.ndarray, until_apart: bool
) -> TangentSplit:
    """One scale's ``TangentSplit``: its trace cut at its split (or, ``until_apart``, at the
    step every two heads are apart)."""
    split, apart = (first_above(steps, g) for g in (widest, narrowest))
    end = apart if until_apart else split
    keep = steps <= end if math.isfinite(end) else np.ones(steps.shape, bool)
    return TangentSplit(steps[keep], widest[keep], split, apart)
