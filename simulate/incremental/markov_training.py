"""Experiment ``markov``: a transformer trained on the high-order Markov chain of the
incremental-learning paper (spec incremental.md §2-4, §6, §8).

Models: the minimal (§3.1) or full (§3.2) transformer, one or two layers, optionally as a learned
c-gram baseline (attention restricted to the last c tokens, §2.3, §8.7). Data: online (fresh
sequences every step) or a finite training set. Optimisers: AdamW, SGD with momentum, or plain
gradient descent. Defaults: the online run of the paper's Figs. 6-7 (minimal model, q = 1e-9,
W_V = 0, 512 fresh sequences per step, AdamW lr 0.08, weight decay 0.01, clipping at 1).

Logged every ``log_every`` steps (§6): validation loss and the loss on a fixed train probe,
KL(p_ref || p_model) for every truncated teacher A*_{1:k} and every learned c-gram baseline, the
attention mass of each head on each lag block (last query, and averaged over the generated
queries), the mean attention map, the value alignment <V_h, A*_k / ||A*_k||_F> (minimal model) and
the head-asymmetry norm max_{h,h'} ||W_Q^h - W_Q^h'||_F.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr
from jax.typing import DTypeLike
from numpy.typing import ArrayLike

from simulate.incremental.full_transformer import MAX_LENGTH, WIDTH, FullTransformer
from simulate.incremental.markov_task import (
    MarkovSetting,
    sample_sequences,
    teacher,
    teacher_log_probs,
)
from simulate.incremental.minimal_transformer import MinimalTransformer, init_minimal
from simulate.measure.stages import first_crossing, midpoints
from simulate.runner import RunOptions, RunOutput, Seeds, run_experiment
from simulate.side_by_side import run_side_by_side
from simulate.store import RunStore, jsonable, read_summary
from simulate.train import Problem, TrainResult, epoch_minibatches
from theory.validation import require

NAME = "markov"

PAPER_ADAMW_LR = {
    ("minimal", 1): 0.08,
    ("minimal", 2): 0.04,
    ("full", 1): 0.003,
    ("full", 2): 0.001,
}
"""AdamW learning rates of the paper (§4)."""
PLAIN_LR = {"sgd": 0.2, "gd": 0.2}
"""SGD: the paper's appendix value (§4); GD: the same, a project choice."""
FLOAT64_BELOW = 1e-6
"""query scales 0 < q below this train in float64 under ``precision = auto`` (§8.6)."""
OPTIMIZER_OPTIONS = {
    "momentum": ("sgd",),
    "weight_decay": ("adamw",),
    "beta1": ("adamw",),
    "beta2": ("adamw",),
    "clip": ("adamw", "sgd"),
}
"""the optimizers each optimizer-specific option applies to (set away from its default with any
other it would be silently ignored)."""
TEACHER_FIELDS = (*(f.name for f in fields(MarkovSetting)), "teacher_seed")
"""what a baseline must share with the student."""


@dataclass(frozen=True)
class MarkovTrainConfig(MarkovSetting, RunOptions):
    """A transformer trained on the Markov chain (default: paper Figs. 6-7, online)."""

    model: Literal["minimal", "full"] = "minimal"
    """architecture: the minimal transformer (§3.1) or the full post-LN transformer (§3.2)."""
    layers: int = 1
    """attention layers (1 or 2)."""
    heads: int = 3
    """H, attention heads (a divisor of the full model's width 255)."""
    attention: Literal["full", "positional"] = "full"
    """minimal model: full trains all of W_Q and W_V; positional trains only W_Q's
    position-position block and W_V's token-to-logit block (spec §5.1 assumptions (b)-(c) made
    structural: attention by position alone, values in token space), the rest stays at its
    initial value."""
    context: int | None = None
    """c: train a c-gram baseline that reads only the last c tokens (1 <= c <= L); None: all."""
    query_scale: float | None = 1e-9
    """q: W_Q ~ U(-q, q) with W_V = 0 (q = 0: identical heads); None: Xavier (default init)."""
    optimizer: Literal["adamw", "sgd", "gd"] = "adamw"
    """adamw: clip + AdamW; sgd: clip + SGD with momentum; gd: plain gradient descent, no clip,
    decay or momentum (gradient flow discretised, time = steps x lr, when the minibatch is the
    whole training set: train_size <= batch)."""
    lr: float | None = None
    """learning rate; None: the paper's (AdamW: minimal 0.08, full 0.003, 2-layer minimal 0.04,
    2-layer full 0.001; SGD 0.2) or 0.2 for gd (project choice)."""
    momentum: float = 0.9
    """SGD momentum (optimizer = sgd)."""
    weight_decay: float = 0.01
    """AdamW weight decay (optimizer = adamw)."""
    beta1: float = 0.9
    """AdamW's first-moment decay (optimizer = adamw)."""
    beta2: float = 0.999
    """AdamW's second-moment decay (optimizer = adamw): it remembers squared gradients for about
    1 / (1 - beta2) steps, longer than the plateaus of the quick runs."""
    clip: float = 1.0
    """gradient clipping at this global norm (adamw, sgd)."""
    train_size: int | None = None
    """n: a fixed training set of n sequences (drawn once from the teacher, shared by all seeds);
    None: online, fresh sequences every step."""
    batch: int = 512
    """sequences per step; with a training set of n, min(batch, n), drawn as --minibatches says."""
    minibatches: Literal["epoch", "step"] = "epoch"
    """with a training set of n > batch: epoch: one permutation of the n sequences per epoch, cut
    into ceil(n / batch) minibatches, the last one short when batch does not divide n (the
    official code's RandomSampler without replacement; 3 steps per epoch at n = 9000); step:
    batch distinct sequences drawn anew at every step, independently across steps (stagewise's
    rule before 2026-12-07)."""
    validation: int = 512
    """validation sequences (fixed, drawn once from the teacher)."""
    precision: Literal["auto", "float32", "float64"] = "auto"
    """parameter dtype; auto: float64 when 0 < q < 1e-6 (symmetry breaking lost in float32),
    else float32."""
    baselines: tuple[Path, ...] = ()
    """run directories of trained c-gram baselines (same task and teacher) to measure KL to."""
    teacher_seed: int = 0
    """seed of the teacher matrices, validation set and training set."""
    steps: int = 2000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 10
    """steps between logged rows."""
    chunk: int = 100
    """steps per compiled chunk and checkpoint (a multiple of log_every)."""
    seeds: int = 1
    """training seeds (initialisation and data order), vmapped."""

    def __post_init__(self) -> None:
        MarkovSetting.__post_init__(self)
        RunOptions.__post_init__(self)
        Seeds.check_seed("teacher_seed", self.teacher_seed)
        # a resumed config comes back from JSON with strings
        object.__setattr__(self, "baselines", tuple(Path(p) for p in self.baselines))
        require(self.model in ("minimal", "full"), "model", self.model, "minimal or full")
        require(self.layers in (1, 2), "layers", self.layers, "1 or 2")
        require(self.heads >= 1, "heads", self.heads, "an integer >= 1")
        if self.model == "full":
            require(
                WIDTH % self.heads == 0,
                "heads",
                self.heads,
                f"a divisor of the full model's width {WIDTH}",
            )
            require(
                self.length - 1 <= MAX_LENGTH,
                "generated",
                self.generated,
                f"at most {MAX_LENGTH + 1} - w = {MAX_LENGTH + 1 - self.window} tokens "
                f"(the full model has {MAX_LENGTH} positions)",
            )
        require(
            self.context is None or 1 <= self.context <= self.length - 1,
            "context",
            self.context,
            f"None or a window 1 <= c <= L = {self.length - 1}",
        )
        require(
            self.query_scale is None or (math.isfinite(self.query_scale) and self.query_scale >= 0),
            "query_scale",
            self.query_scale,
            "a scale >= 0, or None for Xavier",
        )
        require(
            self.optimizer in ("adamw", "sgd", "gd"),
            "optimizer",
            self.optimizer,
            "adamw, sgd or gd",
        )
        require(
            self.lr is None or (math.isfinite(self.lr) and self.lr > 0),
            "lr",
            self.lr,
            "a learning rate > 0, or None for the paper's",
        )
        for name in ("momentum", "beta1", "beta2"):
            value = getattr(self, name)
            require(0 <= value < 1, name, value, "a value in [0, 1)")
        require(
            self.attention in ("full", "positional"),
            "attention",
            self.attention,
            "full or positional",
        )
        require(
            self.attention == "full" or self.model == "minimal",
            "attention",
            self.attention,
            "full (positional attention is an option of the minimal model, not of model = full)",
        )
        require(
            math.isfinite(self.weight_decay) and self.weight_decay >= 0,
            "weight_decay",
            self.weight_decay,
            "a finite value >= 0",
        )
        require(
            math.isfinite(self.clip) and self.clip > 0,
            "clip",
            self.clip,
            "a finite global norm > 0",
        )
        defaults = {f.name: f.default for f in fields(MarkovTrainConfig)}
        for name, users in OPTIMIZER_OPTIONS.items():
            require(
                self.optimizer in users or getattr(self, name) == defaults[name],
                name,
                getattr(self, name),
                f"its default {defaults[name]} with optimizer = {self.optimizer} "
                f"(it applies to {' and '.join(users)} only)",
            )
        require(
            self.train_size is None or self.train_size >= 1,
            "train_size",
            self.train_size,
            "None (online) or an integer >= 1",
        )
        require(
            self.minibatches in ("epoch", "step"), "minibatches", self.minibatches, "epoch or step"
        )
        require(self.batch >= 1, "batch", self.batch, "an integer >= 1")
        require(self.validation >= 1, "validation", self.validation, "an integer >= 1")
        require(
            self.precision in ("auto", "float32", "float64"),
            "precision",
            self.precision,
            "auto, float32 or float64",
        )
        contexts = [self._check_baseline(p) for p in self.baselines]
        require(
            len(set(contexts)) == len(contexts),
            "baselines",
            [str(p) for p in self.baselines],
            "baselines of distinct contexts c",
        )

    def _check_baseline(self, path: Path) -> int:
        """The context c of a stored baseline run, after checking it fits this student."""
        what = "a complete markov c-gram run directory"
        require(
            (path / "config.json").exists() and (path / "summary.json").exists(),
            "baselines",
            str(path),
            what,
        )
        stored = json.loads((path / "config.json").read_text())
        summary = read_summary(path)
        conf = stored["config"]
        require(
            stored.get("experiment") == NAME
            and conf.get("context") is not None
            and summary.get("status") == "complete",
            "baselines",
            str(path),
            what,
        )
        mine = jsonable({name: getattr(self, name) for name in TEACHER_FIELDS})
        differ = [name for name in TEACHER_FIELDS if conf.get(name) != mine[name]]
        require(
            not differ,
            "baselines",
            str(path),
            f"a baseline of the same task and teacher (differs in {', '.join(differ)})",
        )
        return int(conf["context"])

    def task(self) -> MarkovSetting:
        return MarkovSetting(**{f.name: getattr(self, f.name) for f in fields(MarkovSetting)})

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        if self.optimizer == "adamw":
            return PAPER_ADAMW_LR[self.model, self.layers]
        return PLAIN_LR[self.optimizer]

    @property
    def dtype(self) -> DTypeLike:
        if self.precision == "auto":
            tiny = self.query_scale is not None and 0 < self.query_scale < FLOAT64_BELOW
            return jnp.float64 if tiny else jnp.float32
        return jnp.dtype(self.precision).type

    @property
    def minibatch(self) -> int:
        return self.batch if self.train_size is None else min(self.batch, self.train_size)

    @property
    def shuffled(self) -> bool:
        """Minibatches are cut from one permutation of the training set per epoch."""
        return (
            self.train_size is not None
            and self.batch < self.train_size
            and self.minibatches == "epoch"
        )

    @property
    def steps_per_epoch(self) -> int:
        """ceil(n / minibatch) with a training set, else 1 (every step draws fresh data)."""
        return 1 if self.train_size is None else -(-self.train_size // self.minibatch)


def build_model(cfg: MarkovTrainConfig, key: jax.Array) -> MinimalTransformer | FullTransformer:
    """The initial model of ``cfg`` (parameters in ``cfg.dtype``)."""
    if cfg.model == "minimal":
        return init_minimal(
            key,
            cfg.heads,
            cfg.vocab,
            cfg.length - 1,
            cfg.query_scale,
            cfg.dtype,
            layers=cfg.layers,
            context=cfg.context,
        )
    return FullTransformer(
        cfg.vocab,
        key=key,
        layers=cfg.layers,
        heads=cfg.heads,
        context=cfg.context,
        query_scale=cfg.query_scale,
        dtype=cfg.dtype,
    )


def positional_part(tree: Any, params: Any = None) -> Any:
    """``tree`` (a MinimalTransformer's gradient or update) with only W_Q's position-position
    block and W_V's token-to-logit block kept, every other entry zero: what ``attention =
    positional`` trains (``params``: unused, optax's stateless signature)."""
    del params
    d, D = tree.vocab, tree.WQ.shape[-1]
    query = jnp.zeros((D, D), tree.WQ.dtype).at[d:, d:].set(1)
    value = jnp.zeros((D, D), tree.WV.dtype).at[:d, :d].set(1)
    return eqx.tree_at(lambda t: (t.WQ, t.WV), tree, (tree.WQ * query, tree.WV * value))


def optimizer(cfg: MarkovTrainConfig, eps_root: float = 0.0) -> optax.GradientTransformation:
    """The optimizer of ``cfg``; with positional attention the gradient is masked before it
    (clipping and Adam's moments see the trained entries only) and the update after it
    (weight decay would move the frozen entries). ``eps_root``: added to AdamW's ``v_hat`` under
    the square root (optax's; 0 in training)."""
    inner = _optimizer(cfg, eps_root)
    if cfg.attention == "full":
        return inner
    mask = optax.stateless(positional_part)
    return optax.chain(mask, inner, mask)


def _optimizer(cfg: MarkovTrainConfig, eps_root: float) -> optax.GradientTransformation:
    lr = cfg.learning_rate
    if cfg.optimizer == "adamw":
        return optax.chain(
            optax.clip_by_global_norm(cfg.clip),
            optax.adamw(
                lr,
                b1=cfg.beta1,
                b2=cfg.beta2,
                eps_root=eps_root,
                weight_decay=cfg.weight_decay,
            ),
        )
    if cfg.optimizer == "sgd":
        return optax.chain(
            optax.clip_by_global_norm(cfg.clip), optax.sgd(lr, momentum=cfg.momentum)
        )
    return optax.sgd(lr)


@dataclass(frozen=True)
class MarkovData:
    """Teacher A* and the fixed sequence sets of one teacher seed."""

    task: MarkovSetting
    A: jax.Array
    validation: jax.Array
    """from key(teacher_seed) folded with 1."""
    train: jax.Array | None
    """the training set, from the fold with 2 (None: online)."""
    probe: jax.Array
    """the train probe: the first min(n, validation) training sequences, or (online) fresh
    sequences from the fold with 3."""


def markov_data(cfg: MarkovTrainConfig) -> MarkovData:
    task = cfg.task()
    A, val, train, probe = _draw_data(task, cfg.teacher_seed, cfg.validation, cfg.train_size)
    return MarkovData(task, A, val, train, probe)


@partial(jax.jit, static_argnums=(0, 2, 3))
def _draw_data(task: MarkovSetting, teacher_seed, validation: int, train_size: int | None):
    # one compiled program (the baselines and the student of one task share it)
    key = jax.random.PRNGKey(teacher_seed)
    A = teacher(task, key)
    val = sample_sequences(task, A, jax.random.fold_in(key, 1), validation)
    if train_size is None:
        return A, val, None, sample_sequences(task, A, jax.random.fold_in(key, 3), validation)
    train = sample_sequences(task, A, jax.random.fold_in(key, 2), train_size)
    return A, val, train, train[: min(train_size, validation)]


def _nll(logp, targets, weight=None):
    """Mean negative log-likelihood over sequences and positions (sequences weighted by
    ``weight`` and divided by its sum, when given)."""
    picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)
    if weight is None:
        return -jnp.mean(picked)
    return -jnp.sum(weight * jnp.mean(picked, axis=(1, 2))) / jnp.sum(weight)


def _kl(ref, logp):
    """KL(p_ref || p_model) averaged over sequences and positions; ``ref`` (K, n, gen, d)."""
    return jnp.mean(jnp.sum(jnp.exp(ref) * (ref - logp[None]), axis=-1), axis=(1, 2))


def log_probs(
    model: Callable[..., jax.Array],
    task: MarkovSetting,
    seqs: jax.Array,
    key: jax.Array | None = None,
) -> jax.Array:
    """log p_model(. | x_{<t}) at the generated positions: (n, generated, d)."""
    return window_log_probs(model, task.window, seqs, key)


def window_log_probs(
    model: Callable[..., jax.Array], window: int, seqs: jax.Array, key: jax.Array | None = None
) -> jax.Array:
    """``log_probs`` with the task reduced to its window w (the positions after the first w are
    generated), so that a program built on it does not depend on the teacher's other settings."""
    keys = None if key is None else jax.random.split(key, seqs.shape[0])
    logits = jax.vmap(lambda s, k: model(s, key=k))(seqs[:, :-1], keys)
    return jax.nn.log_softmax(logits[:, window - 1 :])


_log_probs = eqx.filter_jit(log_probs)


@partial(jax.jit, static_argnums=0)
def _references(task: MarkovSetting, A, seqs):
    """log p of every truncated teacher A*_{1:k}, k = 1..h: (h, n, generated, d)."""
    return jnp.stack([teacher_log_probs(task, A, seqs, k) for k in range(1, task.h + 1)])


def yardstick_losses(task: MarkovSetting, A: jax.Array, sequences: jax.Array) -> np.ndarray:
    """Validation loss of uniform prediction (ln d) and of each truncated teacher A*_{1:k}."""
    return np.concatenate([[math.log(task.vocab)], np.asarray(_teacher_losses(task, A, sequences))])


# one program: eager, the h teachers' losses were about 25 programs (each operation at each
# shape), traced and looked up in the compilation cache by every process
@partial(jax.jit, static_argnums=0)
def _teacher_losses(task: MarkovSetting, A, sequences):
    targets = sequences[:, task.window :]
    return jnp.stack(
        [_nll(teacher_log_probs(task, A, sequences, k), targets) for k in range(1, task.h + 1)]
    )


def lag_blocks(task: MarkovSetting) -> np.ndarray:
    """M (generated, L, h): M[q, s, k] = 1 when key s is at a lag of block k from the q-th
    generated query (output position w-1+q predicts token w+q; lag i is key w+q-i)."""
    M = np.zeros((task.generated, task.length - 1, task.h))
    start = 0
    for k, b in enumerate(task.blocks):
        for q in range(task.generated):
            for i in range(start + 1, start + b + 1):
                M[q, task.window + q - i, k] = 1.0
        start += b
    return M


def head_asymmetry(queries: jax.Array) -> jax.Array:
    """max_{h,h'} ||W_Q^h - W_Q^h'||_F of per-head query weights (H, ...)."""
    diff = queries[:, None] - queries[None]
    return jnp.sqrt(jnp.max(jnp.sum(diff**2, axis=tuple(range(2, diff.ndim)))))


def baseline_contexts(task: MarkovSetting) -> tuple[int, ...]:
    """c_k = |I(1)| + ... + |I(k)| for k = 1..h (the last: the full window w)."""
    return tuple(int(c) for c in np.cumsum(task.blocks))


def stored_config(path: Path) -> MarkovTrainConfig:
    """The config a stored run of this experiment was started with (its config.json)."""
    stored = json.loads((Path(path) / "config.json").read_text())["config"]
    names = {f.name for f in fields(MarkovTrainConfig)}
    values: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in stored.items() if k in names
    }
    return MarkovTrainConfig(**values)


def load_baseline(path: Path) -> tuple[int | None, Any]:
    """(c, model) of a stored c-gram baseline: its seed-0 parameters at the last checkpoint."""
    bcfg = stored_config(path)
    shapes = jax.eval_shape(lambda k: build_model(bcfg, k), jax.random.PRNGKey(0))
    leaves, _, _ = RunStore(path).load_checkpoint()
    want = jax.tree_util.tree_leaves(shapes)
    params = [jnp.asarray(x[0]) for x in leaves[: len(want)]]  # the state tuple starts with params
    require(
        all(p.shape == w.shape and p.dtype == w.dtype for p, w in zip(params, want)),
        "baselines",
        str(path),
        "a checkpoint matching its config.json",
    )
    return bcfg.context, jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), params)


def problem(cfg: MarkovTrainConfig, data: MarkovData | None = None) -> Problem:
    data = data or markov_data(cfg)
    task, dtype = data.task, cfg.dtype
    w, G, L = task.window, task.generated, task.length - 1
    val, probe = data.validation, data.probe

    ref_val = _references(task, data.A, val).astype(dtype)
    ref_probe = _references(task, data.A, probe).astype(dtype)
    baselines = [load_baseline(p) for p in cfg.baselines]
    if baselines:
        base_val = jnp.stack([_log_probs(m, task, val) for _, m in baselines]).astype(dtype)
        base_probe = jnp.stack([_log_probs(m, task, probe) for _, m in baselines]).astype(dtype)
    M = jnp.asarray(lag_blocks(task), dtype)
    A_hat = (data.A / jnp.linalg.norm(data.A, axis=(1, 2), keepdims=True)).astype(dtype)

    def init(init_key, noise_key):
        del noise_key
        return build_model(cfg, init_key)

    def draw(key):
        if data.train is None:
            return sample_sequences(task, data.A, key, cfg.batch)
        assert cfg.train_size is not None  # a training set is drawn only when train_size is set
        pick = jax.random.choice(key, cfg.train_size, (cfg.minibatch,), replace=False)
        return data.train[pick]

    def loss_and_direction(model, data_key):
        batch_key, dropout_key = jax.random.split(data_key)
        seqs = draw(batch_key)
        dropout_key = dropout_key if cfg.model == "full" else None  # the minimal model has none
        return jax.value_and_grad(
            lambda m: _nll(log_probs(m, task, seqs, dropout_key), seqs[:, w:])
        )(model)

    steps, batch = cfg.steps_per_epoch, cfg.minibatch

    def epoch_step(key, step):
        """Step ``step``'s minibatch of its epoch (the epoch's permutation recomputed from the
        key the epoch keeps; padded rows weighted 0) and the key of the next step."""
        assert data.train is not None and cfg.train_size is not None  # shuffled: a training set
        shuffle_key, dropout_root, next_key = jax.random.split(key, 3)
        k = step % steps
        order, weight = epoch_minibatches(shuffle_key, cfg.train_size, batch, dtype)
        batch_data = (data.train[order[k]], weight[k], jax.random.fold_in(dropout_root, k))
        return jnp.where(k == steps - 1, next_key, key), batch_data

    def loss_and_direction_on(model, batch_data):
        seqs, weight, dropout_key = batch_data
        dropout_key = dropout_key if cfg.model == "full" else None
        return jax.value_and_grad(
            lambda m: _nll(log_probs(m, task, seqs, dropout_key), seqs[:, w:], weight)
        )(model)

    def observe(model):
        logits, attn = jax.vmap(model.logits_and_attention)(val[:, :-1])
        logp = jax.nn.log_softmax(logits[:, w - 1 :])
        probe_logp = log_probs(model, task, probe)
        amap = attn[:, :, :, w - 1 :].mean(0)  # (layers, H, G, L)
        out = {
            "val_loss": _nll(logp, val[:, w:]),
            "train_loss": _nll(probe_logp, probe[:, w:]),
            "kl_yardstick": _kl(ref_val, logp),
            "kl_yardstick_train": _kl(ref_probe, probe_logp),
            "block_mass": amap[:, :, -1] @ M[-1],
            "block_mass_mean": jnp.einsum("lhqs,qsk->lhk", amap, M) / G,
            "attention_map": amap,
            "head_asymmetry": head_asymmetry(model.head_queries()),
        }
        if baselines:
            out["kl_baseline"] = _kl(base_val, logp)
            out["kl_baseline_train"] = _kl(base_probe, probe_logp)
        if cfg.model == "minimal":
            V = model.stacked()[1][-1][:, : task.vocab, : task.vocab]
            out["value_alignment"] = jnp.einsum("hab,kab->hk", V, A_hat)
        return out

    dims = {
        "val_loss": (),
        "train_loss": (),
        "kl_yardstick": ("yardstick",),
        "kl_yardstick_train": ("yardstick",),
        "block_mass": ("layer", "head", "block"),
        "block_mass_mean": ("layer", "head", "block"),
        "attention_map": ("layer", "head", "query", "key"),
        "head_asymmetry": (),
    }
    if baselines:
        dims.update(kl_baseline=("baseline",), kl_baseline_train=("baseline",))
    if cfg.model == "minimal":
        dims["value_alignment"] = ("head", "block")
    coords = {
        "yardstick": np.arange(1, task.h + 1),
        "layer": np.arange(1, cfg.layers + 1),
        "head": np.arange(1, cfg.heads + 1),
        "block": np.arange(1, task.h + 1),
        "query": np.arange(w - 1, L),
        "key": np.arange(L),
    }
    if baselines:
        coords["baseline"] = np.array([c for c, _ in baselines])
    return Problem(
        init,
        loss_and_direction_on if cfg.shuffled else loss_and_direction,
        observe,
        dims,
        coords,
        draw_step=epoch_step if cfg.shuffled else None,
    )


LADDER_RULE = (
    "ladder step k (k >= 2): first logged step from which on the truncated teacher "
    "closest in KL is A*_{1:j} with j >= k (the trajectory has left classes < k)"
)
SPLIT_MASS = 0.1
"""block-mass difference above which two heads count as split."""
SPLIT_RULE = (
    "first logged step at which two heads' block masses (last query, first layer) "
    f"differ by more than {SPLIT_MASS}"
)
APART_RULE = (
    "first logged step at which every two heads' block masses (last query, first layer) "
    f"differ by more than {SPLIT_MASS} on some block"
)
STAGE_RULE = (
    "stage k starts at the first logged step where the validation loss falls below the "
    "midpoint of the class-(k-1) and class-k levels (class 0 = uniform, ln d; class k = "
    "the learned c_k-gram baseline's validation loss, k < h; the Bayes loss, k = h)"
)
EARLY_STOPPING_RULE = "best step: argmin of val_loss over the logged rows (early stopping)"


def ladder_steps(steps: ArrayLike, kl: ArrayLike) -> list[float]:
    """Per ``LADDER_RULE``, for k = 2..h; nan when class k is never reached for good."""
    steps, kl = np.asarray(steps), np.asarray(kl)
    closest = np.argmin(kl, axis=-1) + 1
    out = []
    for k in range(2, kl.shape[-1] + 1):
        below = np.nonzero(closest < k)[0]
        first = 0 if below.size == 0 else below[-1] + 1
        out.append(float(steps[first]) if first < len(steps) else float("nan"))
    return out


def head_gaps(block_mass: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Over the heads of ``block_mass`` (..., head, block): the widest gap (max over blocks of the
    largest minus the smallest head's mass; ``SPLIT_RULE``) and the narrowest (min over pairs of
    heads of the max over blocks of their difference; ``APART_RULE``)."""
    mass = np.asarray(block_mass)
    widest = np.max(mass.max(axis=-2) - mass.min(axis=-2), axis=-1)
    pairs = itertools.combinations(range(mass.shape[-2]), 2)
    narrowest = np.min(
        [np.max(np.abs(mass[..., a, :] - mass[..., b, :]), axis=-1) for a, b in pairs], axis=0
    )
    return widest, narrowest


def split_step(steps: ArrayLike, block_mass: ArrayLike) -> float:
    """Per ``SPLIT_RULE``; ``block_mass`` is (step, head, block) or (step, layer, head, block)."""
    return first_above(steps, head_gaps(_first_layer(block_mass))[0])


def apart_step(steps: ArrayLike, block_mass: ArrayLike) -> float:
    """Per ``APART_RULE``; ``block_mass`` as in ``split_step``."""
    return first_above(steps, head_gaps(_first_layer(block_mass))[1])


def _first_layer(block_mass: ArrayLike) -> np.ndarray:
    block_mass = np.asarray(block_mass)
    return block_mass[:, 0] if block_mass.ndim == 4 else block_mass


def first_above(steps: ArrayLike, gap: ArrayLike) -> float:
    """The first of ``steps`` at which ``gap`` exceeds ``SPLIT_MASS`` (nan if none)."""
    hit = np.nonzero(np.asarray(gap) > SPLIT_MASS)[0]
    return float(np.asarray(steps)[hit[0]]) if hit.size else float("nan")


def summarize(cfg: MarkovTrainConfig, data: MarkovData, ds: xr.Dataset) -> dict:
    """summary.json entries of a run: yardsticks, ladder, head split, early stopping."""
    task = data.task
    yard = yardstick_losses(task, data.A, data.validation)
    steps = ds["step"].values
    val = ds["val_loss"].values
    best = np.argmin(np.where(np.isfinite(val), val, np.inf), axis=1)
    seeds = range(val.shape[0])
    summary = {
        "yardstick_losses": {
            "uniform": yard[0],
            **{f"A*_1:{k}": yard[k] for k in range(1, task.h + 1)},
        },
        "bayes_loss": yard[task.h],
        "learning_rate": cfg.learning_rate,
        "dtype": jnp.dtype(cfg.dtype).name,
        "ladder_rule": LADDER_RULE,
        "ladder_steps_per_seed": [ladder_steps(steps, kl) for kl in ds["kl_yardstick"].values],
        "heads_split_rule": SPLIT_RULE,
        "heads_split_step_per_seed": [split_step(steps, m) for m in ds["block_mass"].values],
        "early_stopping_rule": EARLY_STOPPING_RULE,
        "best_val_step_per_seed": [float(steps[b]) for b in best],
        "best_val_loss_per_seed": [float(val[i, b]) for i, b in zip(seeds, best)],
        "closest_yardstick_at_best_per_seed": [
            int(np.argmin(ds["kl_yardstick"].values[i, b])) + 1 for i, b in zip(seeds, best)
        ],
        "max_head_asymmetry_per_seed": ds["head_asymmetry"].max("step").values,
        "final_val_loss": ds["val_loss"].isel(step=-1).values,
        "final_train_loss": ds["train_loss"].isel(step=-1).values,
        "final_kl_yardstick": ds["kl_yardstick"].isel(step=-1).values,
    }
    if "kl_baseline" in ds:
        contexts = ds["baseline"].values
        summary["baselines"] = {int(c): str(p) for c, p in zip(contexts, cfg.baselines)}
        summary["closest_baseline_at_best_per_seed"] = [
            int(contexts[np.argmin(ds["kl_baseline"].values[i, b])]) for i, b in zip(seeds, best)
        ]
        levels = class_levels(task, summary["baselines"], yard[task.h])
        if levels is not None:
            summary["stage_rule"] = STAGE_RULE
            summary["class_levels"] = levels
            summary["stage_start_per_seed"] = [
                [first_crossing(steps, loss, c) for c in midpoints(levels)] for loss in val
            ]
    return summary


def class_levels(task: MarkovSetting, baselines: dict[int, str], bayes: float) -> list | None:
    """Loss levels of classes 0..h (``STAGE_RULE``): ln d, the final validation loss of the
    learned c_k-gram baseline for k < h, the Bayes loss; None without those baselines."""
    contexts = baseline_contexts(task)[:-1]
    if not all(c in baselines for c in contexts):
        return None
    learned = [float(read_summary(Path(baselines[c]))["final_val_loss"][0]) for c in contexts]
    return [math.log(task.vocab), *learned, float(bayes)]


def minibatch_rule(cfg: MarkovTrainConfig) -> str:
    """How a run of ``cfg`` draws its minibatches (``MarkovTrainConfig.minibatches``)."""
    finite = (
        "one permutation of the n sequences per epoch cut into ceil(n / batch) minibatches, "
        "the last one short when batch does not divide n (n <= batch: the whole set every step)"
        if cfg.minibatches == "epoch"
        else "min(batch, n) distinct sequences drawn uniformly each step, independently across "
        "steps"
    )
    return f"online: batch fresh sequences per step; training set of n: {finite}"


def run(cfg: MarkovTrainConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) the experiment into ``output.out``; returns the run directory."""
    data = markov_data(cfg)
    return run_experiment(
        NAME,
        cfg,
        output,
        problem(cfg, data),
        optimizer(cfg),
        lambda ds: summarize(cfg, data, ds),
        seeds={
            "teacher_seed": cfg.teacher_seed,
            "teacher_rule": "teacher, validation set, training set and "
            "online train probe from key(teacher_seed) and "
            "its fold_in 1, 2 and 3",
            "minibatch_rule": minibatch_rule(cfg),
        },
    )


def _matches(path: Path, cfg: MarkovTrainConfig) -> bool:
    """``path`` holds a complete run of ``cfg``."""
    try:
        stored = json.loads((path / "config.json").read_text())["config"]
        status = read_summary(path)["status"]
    except (OSError, KeyError, ValueError):
        return False
    mine = jsonable(dataclasses.asdict(cfg))
    return status == "complete" and all(stored.get(k) == v for k, v in mine.items())


def baseline_configs(
    cfg: MarkovTrainConfig, contexts: tuple[int, ...] | None = None
) -> dict[int, MarkovTrainConfig]:
    """The runs of the learned c-gram baselines of ``cfg``'s task by c (default c = c_1..c_h,
    the last the full-window model): ``cfg``'s settings, one seed each."""
    base: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in fields(MarkovTrainConfig)}
    return {
        c: MarkovTrainConfig(**{**base, "context": c, "baselines": (), "seeds": 1})
        for c in contexts or baseline_contexts(cfg.task())
    }


def baseline_jobs(
    cfg: MarkovTrainConfig, out: Path, contexts: tuple[int, ...] | None = None, quiet: bool = False
) -> tuple[tuple[Path, ...], dict[Path, Callable[[], Path]]]:
    """The run directories ``out/{c}-gram`` of ``baseline_configs`` and the training jobs of
    those not already complete there, by directory (a caller may run them beside other work,
    ``simulate.side_by_side``, and start what needs one of them once it is done)."""
    dirs, jobs = [], {}
    for c, bcfg in baseline_configs(cfg, contexts).items():
        path = Path(out) / f"{c}-gram"
        if not _matches(path, bcfg):
            jobs[path] = partial(run, bcfg, RunOutput(out=path, quiet=quiet))
        dirs.append(path)
    return tuple(dirs), jobs


def train_baselines(
    cfg: MarkovTrainConfig, out: Path, contexts: tuple[int, ...] | None = None, quiet: bool = False
) -> tuple[Path, ...]:
    """Train the baselines of ``baseline_jobs`` side by side, one per CPU device (a directory
    already holding the complete run is reused). Returns the run directories."""
    dirs, jobs = baseline_jobs(cfg, out, contexts, quiet)
    run_side_by_side(list(jobs.values()))
    return dirs
