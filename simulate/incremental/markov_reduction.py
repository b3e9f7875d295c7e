"""The reduced head system of a Markov-chain transformer run (spec incremental.md §5.8, §7): the
same heads, blocks and importances over the lags the last query sees, started from the network's
initial positional logits."""

from __future__ import annotations

import itertools
import math
from typing import cast

import jax
import numpy as np
from numpy.typing import ArrayLike

from simulate.incremental.head_ode import solve
from simulate.incremental.markov_training import (
    SPLIT_MASS,
    MarkovTrainConfig,
    build_model,
    head_gaps,
)
from simulate.incremental.minimal_transformer import MinimalTransformer
from simulate.measure.stages import RULE as ODE_STAGE_RULE
from simulate.measure.stages import first_crossing
from simulate.train import seed_streams
from theory.incremental.heads import HeadSetting

PREDICTION_RULE = (
    "reduced head system (theory.incremental.heads, logit metric) with the task's blocks and "
    "importances c_k over the L lags the last query sees, v(0) = 0, theta(0) = the "
    "network's initial positional logits W_Q^k[d + L - i, d + L - 1] / sqrt(D) "
    f"(i = 1..L) of the same seed; stage k: {ODE_STAGE_RULE}"
)
ODE_SPLIT_RULE = (
    "the reduced system's heads split: first time two heads' block masses differ by more than "
    f"{SPLIT_MASS}; all apart: first time every two heads differ by more than {SPLIT_MASS} on "
    "some block (log-linear interpolation between saved times)"
)


def _minimal(cfg: MarkovTrainConfig, key: jax.Array) -> MinimalTransformer:
    """The initial model of ``cfg`` (the minimal transformer: the reduction reads its W_Q)."""
    return cast(MinimalTransformer, build_model(cfg, key))


def positional_logits(WQ: ArrayLike, vocab: int) -> np.ndarray:
    """theta_{k,i} = W_Q^k[d + L - i, d + L - 1] / sqrt(D): the last query's positional logit on
    lag i = 1..L (key position L - i; L positions, D = d + L); ``WQ`` (..., H, D, D), float64."""
    WQ = np.asarray(WQ, dtype=np.float64)
    D = WQ.shape[-1]
    L = D - vocab
    return WQ[..., vocab + L - np.arange(1, L + 1), vocab + L - 1] / math.sqrt(D)


def initial_positional_logits(cfg: MarkovTrainConfig) -> np.ndarray:
    """``positional_logits`` of each seed's initial model, as the trainer draws it: (seeds, H,
    L)."""
    keys = seed_streams(cfg.seed_ids)["init"]
    return positional_logits(jax.vmap(lambda k: _minimal(cfg, k).WQ)(keys), cfg.vocab)


def mapped_logits(cfg: MarkovTrainConfig) -> np.ndarray:
    """The last query's positional logits theta_{k,i} = W_Q^k[d + L - i, d + L - 1] / sqrt(D) at
    initialisation (seed ``cfg.seed``), lags i = 1..L (L = positions; the last output, at L - 1,
    predicts token L)."""
    WQ = np.asarray(_minimal(cfg, seed_streams([cfg.seed])["init"][0]).WQ)
    d, L = cfg.vocab, cfg.task().length - 1
    return WQ[:, d + L - np.arange(1, L + 1), d + L - 1] / math.sqrt(d + L)


def reduced_setting(cfg: MarkovTrainConfig, metric: str = "logit") -> HeadSetting:
    """Same heads, blocks and importances c_k, over the L - 1 lags the last query sees."""
    task = cfg.task()
    return HeadSetting(
        heads=cfg.heads,
        blocks=tuple(cfg.blocks),
        window=task.length - 1,
        importances=tuple(task.importances()),
        metric=metric,
    )


def ode_block_mass(cfg: MarkovTrainConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reduced system (replicator metric) of the same blocks and importances over the L lags
    the last query sees, from noise eps = q (or T x 1e-6): times, block mass (time, head, block)
    and values (time, head, feature)."""
    setting = HeadSetting(
        heads=cfg.heads,
        blocks=tuple(cfg.blocks),
        window=cfg.length - 1,
        importances=tuple(cfg.task().importances()),
        metric="replicator",
    )
    eps = cfg.query_scale if cfg.query_scale else setting.window * 1e-6
    batch = solve(setting, [eps], [cfg.seed], t_max=5000.0, n_save=1500)
    return batch.ts, batch.s[0] @ setting.block_indicator(), batch.v[0]


def ode_split_times(setting: HeadSetting, ts: ArrayLike, s: ArrayLike) -> np.ndarray:
    """``ODE_SPLIT_RULE`` per trajectory of ``s`` (batch, time, head, lag) saved at ``ts``:
    (batch, 2), the heads' split and the time every two heads are apart."""
    gaps = head_gaps(np.asarray(s) @ setting.block_indicator())  # (batch, time) each
    return np.array([[first_crossing(ts, -g, -SPLIT_MASS) for g in pair] for pair in zip(*gaps)])


def match_heads(train_final: np.ndarray, ode_final: np.ndarray) -> tuple[int, ...]:
    """Permutation of ODE heads closest (least squares) to the trained heads' final block masses
    (head, block)."""
    H = train_final.shape[0]
    return min(
        itertools.permutations(range(H)),
        key=lambda p: float(np.sum((train_final - ode_final[list(p)]) ** 2)),
    )
