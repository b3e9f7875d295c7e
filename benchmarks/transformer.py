"""One training step of the markov experiment's transformers (``simulate.incremental
.markov_training``: the trainer's step without its logging), and its FLOP count.

Analytic count (the issue's): 6 x parameters x tokens for the forward and backward matmuls, plus
attention, 2 x 2 x T^2 x d per layer per sequence forward (scores and weighted sum), x 3 for
forward + backward. Parameters: those that multiply activations; gathered tables are left out (as
in Kaplan et al.'s count): the full model's token and position embeddings, and the minimal
model's first-layer W_Q and W_V, which meet one-hot inputs and are read by columns
(``simulate.incremental.minimal_transformer``), so that layer's scores are gathers and only its
weighted sum of values is counted. Tokens: batch x T with T = L - 1 input positions (logits are
computed at every position). d: the attention width summed over heads (full: 255). The causal
mask is not subtracted: XLA computes the masked half too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from simulate.incremental.full_transformer import FullTransformer
from simulate.incremental.markov_training import MarkovTrainConfig, optimizer, problem
from simulate.train import optimizer_step, step_data

PAPER_BATCH = 3000


def paper_config(model: str, batch: int = PAPER_BATCH, **kw) -> MarkovTrainConfig:
    """The paper's markov setting (d = 50, blocks (2, 2, 2)) in float32; the full model with its
    default (Xavier) initialisation."""
    extra: dict[str, Any] = {"query_scale": None} if model == "full" else {}
    return MarkovTrainConfig(
        model=model,  # type: ignore[arg-type]
        batch=batch,
        precision="float32",
        steps=1,
        log_every=1,
        chunk=1,
        **extra,
        **kw,
    )


@dataclass
class Step:
    """A jitted training step ``(params, opt_state, data) -> (params, opt_state, loss)``, the
    state to start it from and one step's data: a data key, or, for a problem that draws a logged
    interval at once (``Problem.draw_interval``) or a step's data from the run's key
    (``Problem.draw_step``), the first step's data, made outside the step so that its FLOP count
    is the step's own."""

    fn: Callable
    params: Any
    opt_state: Any
    model: Any
    data: Any


def training_step(cfg: MarkovTrainConfig) -> Step:
    return step_of(problem(cfg), optimizer(cfg))


def step_of(prob: Any, opt: Any) -> Step:
    """The jitted training step of any experiment's problem and optimizer."""
    k_init, k_noise = jax.random.split(jax.random.PRNGKey(0))
    params = prob.init(k_init, k_noise)

    step = partial(optimizer_step, prob.loss_and_direction, opt)
    data = jax.random.PRNGKey(1)
    if prob.draw_interval is not None:
        data = jax.tree_util.tree_map(lambda x: x[0], prob.draw_interval(data))
    elif prob.draw_step is not None:
        data = step_data(prob, data, 0)[1]
    return Step(jax.jit(step), params, opt.init(params), params, data)


def matmul_parameters(model: Any) -> int:
    """Parameters that multiply activations: all but gathered tables (the full model's token and
    position embeddings; the minimal model's first-layer W_Q and W_V, which act on one-hot
    inputs and are read by columns)."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
    total = sum(x.size for x in leaves)
    if isinstance(model, FullTransformer):
        return int(total - model.encoder.size - model.positional.size)
    WQ, WV = model.stacked()
    return int(total - WQ[0].size - WV[0].size)


def attention_flops(cfg: MarkovTrainConfig, model: Any) -> int:
    """Forward attention FLOPs of one sequence: 2 x 2 x T^2 x d per layer (scores and weighted
    sum; d the attention width over all heads), except the minimal model's first layer, whose
    scores are gathered and whose weighted sum is 2 x T^2 x H x (rows of W_V read: d tokens for
    one layer, all D for the residual of two)."""
    T = cfg.length - 1
    if isinstance(model, FullTransformer):
        width = model.blocks[0].WQ.shape[0] * model.blocks[0].WQ.shape[2]
        return cfg.layers * 2 * 2 * T**2 * int(width)
    D = int(model.WQ.shape[-1])
    rows = cfg.vocab if cfg.layers == 1 else D
    return 2 * T**2 * cfg.heads * rows + (cfg.layers - 1) * 2 * 2 * T**2 * cfg.heads * D


def analytic_flops(cfg: MarkovTrainConfig, model: Any) -> float:
    """FLOPs of one step by the count of the module docstring."""
    tokens = cfg.batch * (cfg.length - 1)
    return 6.0 * matmul_parameters(model) * tokens + 3 * cfg.batch * attention_flops(cfg, model)


def xla_flops(compiled: Any) -> float:
    """XLA's own FLOP count of a compiled program (``cost_analysis()["flops"]``)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older JAX: one dict per device
        cost = cost[0]
    return float(cost["flops"])


def lowered(step: Step) -> Any:
    return step.fn.lower(step.params, step.opt_state, step.data)


def dot_operands(n: int) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return (
        jax.random.normal(k1, (n, n), jnp.float32),
        jax.random.normal(k2, (n, n), jnp.float32),
    )
