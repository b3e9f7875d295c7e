"""Experiment ``clustering-head``: the 2-D clustering-head model trained on sparse modular addition
(spec clustering_head.md §3-4, §6).

Defaults are the paper's code: p = 2, V_e = 3, L = 12, k = 5, n = 2048 train / 2048 test, FFN width
32, Adam lr 3e-3 (default betas and eps, no weight decay), batch 32, 1000 epochs of 64 steps; seeds
are vmapped. Data modes: ``train`` (minibatches of the training set, by default one shuffle of it
per epoch as the official code's data loader draws them; full batch when batch >= n),
``population`` (full batch over all p^L sequences: the exact population loss) and ``fresh`` (new
i.i.d. sequences every step). ``init = ideal`` sets P[t] = (0, 1) for t <= k and (0, -1) for t > k.

Logged once per epoch (§6): train/test loss and accuracy, the first-block attention mass
A_k = sum_{t<=k} a_t (test mean), the probe-set attention map and sequence embeddings, the full
training-set gradient norm, min_x ||xi(x)|| over train and test, the normalisation curvature bound
sqrt(d) / min_x ||xi(x)|| (= the largest ||dN/dxi||_op, §5.4), the symmetry defect of P (§6), the
cluster quality Q of the test sequence embeddings by first-k histogram (§5.3), the
top Hessian eigenvalue of the training loss (power iteration with Hessian-vector products), and
every weight (so the sandbox frames can be redrawn at any epoch).

With ``preconditioned_sharpness`` also the Adam-preconditioned sharpness lambda_1(P^{-1} H) of the
training loss (Cohen et al. 2022, "Adaptive gradient methods at the edge of stability"), with
P = (1 - beta1^t) diag(sqrt(v_hat_t) + eps) built from Adam's second moment at the logged step t
(the trainer hands the optimizer state to the observer), by power iteration on the symmetric
P^{-1/2} H P^{-1/2} (same eigenvalues). Its stability threshold is (2 + 2 beta1) / ((1 - beta1) lr)
= 38 / lr for beta1 = 0.9, where the raw sharpness of plain GD is compared with 2 / lr (derivation
in ``simulate.measure.spikes``). At t = 0 Adam has no second moment yet and the value is NaN.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from simulate.clustering_head.model import ClusteringHead, ideal_positions, init_clustering_head
from simulate.clustering_head.task import (
    POPULATION_LIMIT,
    SMASetting,
    all_sequences,
    draw_data,
    histogram_index,
    labels,
    probe_set,
    sample_sequences,
)
from simulate.runner import RunOptions, RunOutput, Seeds, run_experiment
from simulate.store import jsonable, load, read_summary
from simulate.train import (
    DivergenceError,
    Problem,
    Schedule,
    TrainResult,
    epoch_minibatches,
    seed_streams,
)
from theory.validation import require

NAME = "clustering-head"
PAPER_EPOCHS = 1000
QUICK_EPOCHS = 150
"""--quick: a CPU-sized run (the rest of the paper's setting unchanged)."""
SUCCESS_ACCURACY = 0.98
"""a run succeeds when its final test accuracy exceeds this (§4)."""
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8
"""Adam's default betas and eps (the paper's optimizer)."""


@dataclass(frozen=True)
class ClusteringSetting(SMASetting, Seeds):
    """The clustering-head model on sparse modular addition and its training (default: the
    paper's setting). Figures nest this; the experiment's config adds ``quick``."""

    vocab: int = 3
    """V_e, token embeddings (>= p; 3 for p = 2 so that the model can be fine-tuned on p = 3)."""
    width: int = 32
    """m, FFN hidden units."""
    dim: int = 2
    """d, embedding dimension."""
    init: Literal["random", "ideal"] = "random"
    """random: the paper's init; ideal: the same with P[t] = (0, 1) for t <= k, (0, -1) after."""
    init_from: Path | None = None
    """fine-tuning / curriculum: start every seed from the final logged weights of the same seed id
    in this clustering-head run directory (same vocab, length, width, dim; overrides init)."""
    data: Literal["train", "population", "fresh"] = "train"
    """train: minibatches of the training set; population: full batch over all p^L sequences;
    fresh: new i.i.d. sequences every step."""
    lr: float = 3e-3
    """Adam learning rate (default betas and eps, no weight decay)."""
    batch: int = 32
    """sequences per step (data = train: drawn without replacement; >= n means full batch)."""
    minibatches: Literal["epoch", "step"] = "epoch"
    """data = train with batch < n: epoch, one shuffle of the training set per epoch cut into
    ceil(n / batch) minibatches, the last one short when batch does not divide n (the official
    code's PyTorch DataLoader with shuffle=True); step, an independent uniformly random subset of
    batch distinct rows every step (stagewise's rule before 2026-12-07, behind the README's
    clustering-head numbers marked so)."""
    epochs: int | None = None
    """epochs (steps per epoch = ceil(n / batch), 1 with data = population); None: the paper's
    1000 (150 with the experiment's quick)."""
    epochs_per_chunk: int = 50
    """epochs per compiled chunk and checkpoint (must divide the number of epochs)."""
    hessian_iterations: int = 20
    """power-iteration steps for the top Hessian eigenvalue at each logged epoch (0: not logged)."""
    preconditioned_sharpness: bool = False
    """also log lambda_1(P^{-1} H) with Adam's preconditioner P (as many power-iteration steps as
    hessian_iterations; compare with 38 / lr)."""
    precision: Literal["float32", "float64"] = "float32"
    """parameter and data dtype."""
    seeds: int = 1
    """training seeds (initialisation and batch order), vmapped."""

    def __post_init__(self) -> None:
        SMASetting.__post_init__(self)
        Seeds.__post_init__(self)
        require(
            self.vocab >= self.modulus, "vocab", self.vocab, f"an integer >= p = {self.modulus}"
        )
        require(self.width >= 1, "width", self.width, "an integer >= 1")
        require(self.dim >= 1, "dim", self.dim, "an integer >= 1")
        require(self.init in ("random", "ideal"), "init", self.init, "random or ideal")
        require(self.init != "ideal" or self.dim == 2, "dim", self.dim, "2 with init = ideal")
        require(
            self.data in ("train", "population", "fresh"),
            "data",
            self.data,
            "train, population or fresh",
        )
        require(
            self.data != "population" or self.population_size <= POPULATION_LIMIT,
            "data",
            self.data,
            f"population only when p^L <= {POPULATION_LIMIT}",
        )
        require(np.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a learning rate > 0")
        require(self.batch >= 1, "batch", self.batch, "an integer >= 1")
        require(
            self.minibatches in ("epoch", "step"), "minibatches", self.minibatches, "epoch or step"
        )
        require(
            self.epochs is None or self.epochs >= 1,
            "epochs",
            self.epochs,
            "None or an integer >= 1",
        )
        require(
            self.epochs_per_chunk >= 1 and self.total_epochs % self.epochs_per_chunk == 0,
            "epochs_per_chunk",
            self.epochs_per_chunk,
            f"a positive divisor of the number of epochs {self.total_epochs}",
        )
        require(
            self.hessian_iterations >= 0,
            "hessian_iterations",
            self.hessian_iterations,
            "an integer >= 0",
        )
        require(
            not self.preconditioned_sharpness or self.hessian_iterations >= 1,
            "hessian_iterations",
            self.hessian_iterations,
            "an integer >= 1 with preconditioned_sharpness",
        )
        require(
            self.precision in ("float32", "float64"),
            "precision",
            self.precision,
            "float32 or float64",
        )
        if self.init_from is not None:
            object.__setattr__(self, "init_from", Path(self.init_from))  # from JSON on resume
            self._check_init_from()

    def _check_init_from(self) -> None:
        path = self.init_from
        assert path is not None
        require(
            (path / "config.json").exists() and (path / "trajectory.zarr").exists(),
            "init_from",
            str(path),
            "a clustering-head run directory",
        )
        stored = json.loads((path / "config.json").read_text())
        require(
            stored.get("experiment") == NAME,
            "init_from",
            str(path),
            f"a run directory of experiment {NAME!r}",
        )
        for name in ("vocab", "length", "width", "dim"):
            require(
                stored["config"].get(name) == getattr(self, name),
                name,
                getattr(self, name),
                f"{stored['config'].get(name)!r}, as in the run of init_from = {str(path)!r}",
            )
        ids = stored["seeds"]["seed_ids"] if "seeds" in stored else None
        require(
            ids is None or set(self.seed_ids) <= set(ids),
            "seed",
            self.seed,
            f"seed ids {self.seed_ids} all stored in init_from (it has {ids})",
        )

    @property
    def total_epochs(self) -> int:
        return self.epochs if self.epochs is not None else PAPER_EPOCHS

    @property
    def minibatch(self) -> int:
        if self.data == "population":
            return self.population_size
        return min(self.batch, self.train_size) if self.data == "train" else self.batch

    @property
    def steps_per_epoch(self) -> int:
        return 1 if self.data == "population" else -(-self.train_size // self.minibatch)

    @property
    def schedule(self) -> Schedule:
        spe = self.steps_per_epoch
        return Schedule(self.total_epochs * spe, spe, self.epochs_per_chunk * spe)

    @property
    def dtype(self) -> type[jnp.floating]:
        return jnp.float64 if self.precision == "float64" else jnp.float32


@dataclass(frozen=True)
class ClusteringConfig(ClusteringSetting):
    """The clustering-head model on sparse modular addition (default: the paper's setting)."""

    quick: bool = False
    """CPU-sized run: 150 epochs unless epochs is given."""

    @property
    def total_epochs(self) -> int:
        if self.epochs is None and self.quick:
            return QUICK_EPOCHS
        return super().total_epochs


def build_model(cfg: ClusteringSetting, key) -> ClusteringHead:
    model = init_clustering_head(key, cfg.vocab, cfg.length, cfg.width, cfg.dim, cfg.dtype)
    if cfg.init == "ideal":
        model = eqx.tree_at(
            lambda m: m.position, model, ideal_positions(cfg.length, cfg.sparsity, cfg.dtype)
        )
    return model


def cross_entropy(model: ClusteringHead, x, y, weight=None):
    """Mean cross-entropy (nats) of the model on sequences x with labels y (weighted by
    ``weight`` and divided by its sum, when given)."""
    log_p = jnp.take_along_axis(jax.nn.log_softmax(jax.vmap(model)(x)), y[:, None], axis=1)
    if weight is None:
        return -jnp.mean(log_p)
    return -jnp.sum(weight * log_p[:, 0]) / jnp.sum(weight)


def accuracy(model: ClusteringHead, x, y):
    return jnp.mean(jnp.argmax(jax.vmap(model)(x), axis=1) == y)


def _scores(model: ClusteringHead, xi, y):
    """(mean cross-entropy, accuracy) from the sequence embeddings xi of sequences labelled y."""
    logits = jax.vmap(model.ffn)(xi) @ model.token.T
    log_p = jax.nn.log_softmax(logits)
    return (
        -jnp.mean(jnp.take_along_axis(log_p, y[:, None], axis=1)),
        jnp.mean(jnp.argmax(logits, axis=1) == y),
    )


def symmetry_defect(position, sparsity: int):
    """max_{t,t'<=k} ||P[t]-P[t']|| + max_{t,t'>k} ||P[t]-P[t']|| (§6)."""

    def spread(block):
        if block.shape[0] < 2:
            return jnp.zeros((), position.dtype)
        return jnp.max(jnp.linalg.norm(block[:, None] - block[None], axis=-1))

    return spread(position[:sparsity]) + spread(position[sparsity:])


def cluster_quality(points, groups, n_groups: int | None = None):
    """Q (§5.3) = mean over the groups present of the mean distance of their points to the group
    centroid, divided by the mean distance between distinct centroids (0: every group collapsed to
    one point). groups: integer labels < n_groups (None: max + 1, outside jit)."""
    points = jnp.asarray(points)
    groups = jnp.asarray(groups)
    n_groups = int(jnp.max(groups)) + 1 if n_groups is None else n_groups
    counts = jax.ops.segment_sum(jnp.ones(groups.shape, points.dtype), groups, n_groups)
    present = counts > 0
    size = jnp.maximum(counts, 1)
    centroids = jax.ops.segment_sum(points, groups, n_groups) / size[:, None]
    spread = (
        jax.ops.segment_sum(jnp.linalg.norm(points - centroids[groups], axis=-1), groups, n_groups)
        / size
    )
    within = jnp.sum(jnp.where(present, spread, 0.0)) / jnp.sum(present).astype(spread.dtype)
    pairs = present[:, None] & present[None] & jnp.triu(jnp.ones((n_groups, n_groups), bool), 1)
    gaps = jnp.linalg.norm(centroids[:, None] - centroids[None], axis=-1)
    return within / (jnp.sum(jnp.where(pairs, gaps, 0.0)) / jnp.sum(pairs).astype(gaps.dtype))


def top_hessian_eigenvalue(
    loss: Callable[[Any], jax.Array], params: Any, key: jax.Array, iterations: int
) -> jax.Array:
    """Largest-magnitude Hessian eigenvalue of ``loss`` at ``params``: ``optax.power_iteration``
    (``iterations`` steps, no early stop) on forward-over-reverse Hessian-vector products of the
    flattened parameters from a standard normal start; the Rayleigh quotient of the last iterate."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    grad = jax.grad(lambda f: loss(unravel(f)))

    def hvp(v: jax.Array) -> jax.Array:
        return jax.jvp(grad, (flat,), (v,))[1]

    v0 = jax.random.normal(key, flat.shape, flat.dtype)
    # optax's stub types a callable matrix as ArrayTree -> ArrayTree; hvp maps arrays to arrays
    matrix = cast(Callable[[Any], Any], hvp)
    eigenvalue, _ = optax.power_iteration(matrix, v0=v0, num_iters=iterations, error_tolerance=0.0)
    return jnp.asarray(eigenvalue)


def adam_preconditioner(
    opt_state: Any, b1: float = ADAM_B1, b2: float = ADAM_B2, eps: float = ADAM_EPS
) -> Any:
    """P = (1 - b1^t) (sqrt(v_t / (1 - b2^t)) + eps), a pytree like the parameters, from the
    ``optax.adam`` state after t steps: Adam's step is -lr P^{-1} m_t with m_t the gradient EMA
    (NaN at t = 0, before any second moment)."""
    adam = next(
        s
        for s in jax.tree_util.tree_leaves(
            opt_state, is_leaf=lambda s: isinstance(s, optax.ScaleByAdamState)
        )
        if isinstance(s, optax.ScaleByAdamState)
    )
    t = jnp.asarray(adam.count).astype(jnp.result_type(float))
    undefined = jnp.where(t > 0, 0.0, jnp.nan)
    return jax.tree_util.tree_map(
        lambda v: (
            (1 - b1**t)
            * (jnp.sqrt(v.astype(np.promote_types(v.dtype, t.dtype)) / (1 - b2**t)) + eps)
            + undefined
        ),
        adam.nu,
    )


def preconditioned_top_eigenvalue(loss, params, preconditioner, key, iterations: int):
    """Largest-magnitude eigenvalue of P^{-1} H (H the Hessian of ``loss`` at ``params``, P a
    positive diagonal given as a pytree like ``params``), by power iteration on the symmetric
    P^{-1/2} H P^{-1/2}."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    scale = 1.0 / jnp.sqrt(jax.flatten_util.ravel_pytree(preconditioner)[0].astype(flat.dtype))
    return top_hessian_eigenvalue(
        lambda u: loss(unravel(flat + scale * u)), jnp.zeros_like(flat), key, iterations
    )


def problem(cfg: ClusteringSetting) -> Problem:
    data = draw_data(cfg)
    k, p, L = cfg.sparsity, cfg.modulus, cfg.length
    train_x, train_y, test_x, test_y = data.train, data.train_labels, data.test, data.test_labels
    population = jnp.asarray(all_sequences(L, p)) if cfg.data == "population" else None
    probe, probe_hist = probe_set(cfg)
    probe = jnp.asarray(probe)
    test_histogram = jnp.asarray(histogram_index(np.asarray(test_x), k, p))
    hessian_key = jax.random.PRNGKey(cfg.data_seed + 7)

    if cfg.init_from is None:

        def init(init_key, noise_key):
            del noise_key
            return build_model(cfg, init_key)
    else:
        init = _stored_init(cfg)

    def draw(key):
        if cfg.data == "population":
            return population
        if cfg.data == "fresh":
            return sample_sequences(key, cfg.batch, L, p)
        if cfg.minibatch >= cfg.train_size:
            return train_x
        # A uniformly random subset of distinct rows, as choice(replace=False) draws, at 1/50 of
        # its cost (choice permutes all n rows by repeated sorts; this is one top-k of uniforms).
        scores = jax.random.uniform(key, (cfg.train_size,), jnp.float32)
        return train_x[jax.lax.top_k(scores, cfg.minibatch)[1]]

    def loss_and_direction(model, data_key):
        x = draw(data_key)
        return jax.value_and_grad(cross_entropy)(model, x, labels(x, k, p))

    def epoch(key):
        """One epoch's minibatches: a permutation of the training rows cut into steps, padded
        rows (when the batch does not divide n) weighted 0."""
        order, weight = epoch_minibatches(key, cfg.train_size, cfg.minibatch, cfg.dtype)
        return train_x[order], train_y[order], weight

    def loss_and_direction_on(model, batch):
        return jax.value_and_grad(cross_entropy)(model, *batch)

    def train_loss(model):
        if cfg.data == "population":
            return cross_entropy(model, population, labels(population, k, p))
        return cross_entropy(model, train_x, train_y)

    def observe(model, opt_state=None):
        loss, grad = jax.value_and_grad(train_loss)(model)
        # each set's forward pass once: xi, logits and attention are shared by the statistics
        xi_train = jax.vmap(model.sequence_embedding)(train_x)
        xi_test = jax.vmap(model.sequence_embedding)(test_x)
        train = _scores(model, xi_train, train_y)
        test = _scores(model, xi_test, test_y)
        xi_norm = jnp.linalg.norm(jnp.concatenate([xi_train, xi_test]), axis=-1)
        test_attention = jax.vmap(model.attention)(test_x)
        out = {
            "train_loss": train[0],
            "test_loss": test[0],
            "train_accuracy": train[1],
            "test_accuracy": test[1],
            "objective_loss": loss,
            "attention_mass": jnp.mean(jnp.sum(test_attention[:, :k], axis=1)),
            "probe_attention": jax.vmap(model.attention)(probe),
            "probe_embedding": jax.vmap(model.sequence_embedding)(probe),
            "gradient_norm": jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree_util.tree_leaves(grad))),
            "min_embedding_norm": jnp.min(xi_norm),
            "curvature_bound": jnp.sqrt(cfg.dim) / jnp.min(xi_norm),
            "symmetry_defect": symmetry_defect(model.position, k),
            "cluster_quality": cluster_quality(xi_test, test_histogram, cfg.histogram_count),
            "token_embedding": model.token,
            "position_embedding": model.position,
            "query": model.query,
            "value": model.value,
            "w1": model.w1,
            "b1": model.b1,
            "w2": model.w2,
            "b2": model.b2,
        }
        if cfg.hessian_iterations:
            out["hessian_top"] = top_hessian_eigenvalue(
                train_loss, model, hessian_key, cfg.hessian_iterations
            )
        if cfg.preconditioned_sharpness:
            out["preconditioned_sharpness"] = preconditioned_top_eigenvalue(
                train_loss,
                model,
                adam_preconditioner(opt_state),
                hessian_key,
                cfg.hessian_iterations,
            )
        return out

    scalars = (
        "train_loss",
        "test_loss",
        "train_accuracy",
        "test_accuracy",
        "objective_loss",
        "attention_mass",
        "gradient_norm",
        "min_embedding_norm",
        "curvature_bound",
        "symmetry_defect",
        "cluster_quality",
    )
    dims: dict[str, tuple[str, ...]] = dict.fromkeys(scalars, ())
    dims.update(
        probe_attention=("probe", "position"),
        probe_embedding=("probe", "dim"),
        token_embedding=("token_id", "dim"),
        position_embedding=("position", "dim"),
        query=("dim",),
        value=("dim", "dim_in"),
        w1=("unit", "dim"),
        b1=("unit",),
        w2=("dim", "unit"),
        b2=("dim",),
    )
    if cfg.hessian_iterations:
        dims["hessian_top"] = ()
    if cfg.preconditioned_sharpness:
        dims["preconditioned_sharpness"] = ()
    coords = {
        "probe": np.arange(len(probe)),
        "probe_histogram": ("probe", probe_hist),
        "position": np.arange(1, L + 1),
        "dim": np.arange(cfg.dim),
        "dim_in": np.arange(cfg.dim),
        "token_id": np.arange(cfg.vocab),
        "unit": np.arange(cfg.width),
    }
    shuffled = cfg.data == "train" and cfg.minibatch < cfg.train_size and cfg.minibatches == "epoch"
    return Problem(
        init,
        loss_and_direction_on if shuffled else loss_and_direction,
        observe,
        dims,
        coords,
        observe_optimizer=cfg.preconditioned_sharpness,
        draw_interval=epoch if shuffled else None,
    )


WEIGHTS = ("token_embedding", "position_embedding", "query", "value", "w1", "b1", "w2", "b2")
"""the logged weights, in the field order of ``ClusteringHead``."""


def model_at(ds, seed: int, step: int = -1) -> ClusteringHead:
    """The model whose weights were logged at row ``step`` of seed index ``seed``."""
    return ClusteringHead(*(jnp.asarray(ds[n].values[seed, step]) for n in WEIGHTS))


def model_at_epoch(data: xr.Dataset, epoch: int) -> ClusteringHead:
    """The model whose weights the figure data hold at ``epoch``."""
    return ClusteringHead(*(jnp.asarray(data[n].sel(epoch=epoch).values) for n in WEIGHTS))


def _stored_init(cfg: ClusteringSetting):
    """init(init_key, noise_key) returning the final weights of the stored run's seed whose init
    key is init_key (the trainer vmaps over keys, not seed ids)."""
    assert cfg.init_from is not None
    ds, _ = load(cfg.init_from)
    ids = ds["seed"].values.tolist()
    rows = [ids.index(i) for i in cfg.seed_ids]
    weights = [jnp.asarray(ds[n].values[rows, -1], cfg.dtype) for n in WEIGHTS]
    keys = seed_streams(cfg.seed_ids)["init"]

    def init(init_key, noise_key):
        del noise_key
        which = jnp.argmax(jnp.all(keys == init_key, axis=-1))
        return ClusteringHead(*(w[which] for w in weights))

    return init


def optimizer(cfg: ClusteringSetting):
    """Adam with the learning rate in its state (in the parameters' dtype) rather than in the
    compiled program, so that runs differing only in lr (the ablation's lr axis, an lr sweep)
    share one program."""
    return optax.inject_hyperparams(
        optax.adam, static_args=("b1", "b2", "eps"), hyperparam_dtype=np.dtype(cfg.dtype)
    )(learning_rate=cfg.lr, b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS)


def summarize(cfg: ClusteringSetting, ds) -> dict:
    """summary.json entries: final metrics and the success flag per seed."""
    steps = ds["step"].values
    final_acc = ds["test_accuracy"].isel(step=-1).values
    return {
        "steps_per_epoch": cfg.steps_per_epoch,
        "epochs": cfg.total_epochs,
        "epochs_logged": (steps // cfg.steps_per_epoch).tolist()[-1],
        "success_rule": f"final test accuracy > {SUCCESS_ACCURACY}",
        "success_per_seed": (final_acc > SUCCESS_ACCURACY).tolist(),
        "final_train_loss": ds["train_loss"].isel(step=-1).values,
        "final_test_loss": ds["test_loss"].isel(step=-1).values,
        "final_train_accuracy": ds["train_accuracy"].isel(step=-1).values,
        "final_test_accuracy": final_acc,
        "final_attention_mass": ds["attention_mass"].isel(step=-1).values,
        "max_symmetry_defect": ds["symmetry_defect"].max("step").values,
    }


def run(cfg: ClusteringSetting, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) the experiment into ``output.path``; returns the run directory (the
    in-memory result when ``output.store`` is off)."""
    return run_experiment(
        NAME,
        # run_experiment reads only .schedule and .seed_ids, which the epoch-based setting has
        cast(RunOptions, cfg),
        output,
        problem(cfg),
        optimizer(cfg),
        lambda ds: summarize(cfg, ds),
        seeds={
            "data_rule": "train and test sets from key(data_seed) folded "
            "with 1 and 2; probe suffixes from "
            "numpy default_rng(data_seed + 10000)",
            "minibatch_rule": (
                "data = train, minibatches = epoch: one permutation of the n training "
                "sequences per epoch (from the data key, split once an epoch) cut into "
                "ceil(n / batch) minibatches, the last one short when batch does not divide n"
                if cfg.minibatches == "epoch"
                else "data = train, minibatches = step: min(batch, n) distinct training "
                "sequences drawn uniformly each step, independently across steps (an epoch "
                "is ceil(n / batch) steps, not a shuffle)"
            ),
        },
    )


def run_stored(cfg: ClusteringSetting, output: RunOutput) -> Path:
    """``run`` into the run store (``output.store`` on); returns the run directory."""
    path = run(cfg, dataclasses.replace(output, store=True))
    assert isinstance(path, Path)
    return path


def _stored_status(cfg: ClusteringSetting, out: Path) -> str | None:
    """The status of the run of ``cfg`` already stored in ``out`` (None: none there, or another
    configuration)."""
    try:
        stored = json.loads((out / "config.json").read_text())["config"]
        status = read_summary(out)["status"]
    except (OSError, KeyError, ValueError):
        return None
    mine = jsonable(dataclasses.asdict(cfg))
    return status if all(stored.get(k) == v for k, v in mine.items()) else None


def run_or_reuse(cfg: ClusteringSetting, output: RunOutput) -> Path:
    """Run ``cfg`` into ``output.path``, reusing a complete (or diverged: deterministic) stored run
    of the same configuration and resuming an interrupted one; a divergence ends the run, whose
    stored rows are kept (status 'diverged' in its summary.json). Returns the run directory."""
    status = _stored_status(cfg, output.path)
    if status in ("complete", "diverged"):
        return output.path
    if status == "interrupted":
        output = dataclasses.replace(output, resume=output.path)
    try:
        run_stored(cfg, output)
    except DivergenceError:
        pass  # recorded as status 'diverged' in the run's summary.json
    return output.path
