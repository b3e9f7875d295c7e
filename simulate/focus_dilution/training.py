"""Experiment ``focus-dilution``: the one-layer attention model of Chen, Lin, Xu, Luo, "Focus and
Dilution", arXiv:2605.01199, trained on sampled sequences (spec ``focus_dilution.md`` §3.2-3.3, §4,
§6; figures focus-dilution-text and ``stagewise compare focus-dilution``).

Model (spec §3.2): embedding ``W0`` (vocab x m), query/key ``WQ, WK`` (m x m_k), output ``W1``
(m x vocab); no residual, value matrix, positional encoding or LayerNorm. The last token ``x_s``
attends to every position ``j <= s`` (itself included) with a softmax over positions of
``s_qk (W0[x_s] WQ) . (W0[x_j] WK)``; the output is the attention-weighted embedding times ``W1``,
trained by cross-entropy on the next token only. Entries start i.i.d. ``N(0, eps^2)``.

Data: ``markov`` draws sequences of the chain ``P = lambda I + (1 - lambda) 1 pi^T`` with
``x_1 ~ pi`` (stationary, so a finite context is an unbiased sample of ``pi``), ``s + 1`` tokens
each, as a fixed training set of ``train_size`` sequences (or fresh ones every step), read by the
model through each context's token-type counts (:func:`type_logits`, the same function); ``text``
reads windows of ``s + 1`` tokens at random offsets of a word-level corpus
(``simulate.focus_dilution.text_corpus``: the bundled CPython reference text, or a local file).
Optimisers: plain gradient descent (full batch on the training set: the empirical gradient flow
discretised, time = steps x lr) or Adam.

Logged (spec §6): validation loss; for Markov data the empirical attention map by query and key
type (mass on each key type averaged over the validation sequences ending in each query type), its
per-query entropy and focus mass, together with the population observables of the same parameters
(``simulate.focus_dilution.flow.observables``: population loss, singular values, alignments, token
norms, ``W0``); for text, the key-type attention distribution and entropy of each tracked query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr

from simulate.focus_dilution.flow import (
    OBS_DIMS,
    initial_parameters,
    observables,
    singular_values,
)
from simulate.focus_dilution.measure import ONSET_RULES, run_onsets
from simulate.focus_dilution.text_corpus import Corpus, check_text_file, load_corpus, tokenize
from simulate.runner import RunOptions, RunOutput, Seeds, run_experiment
from simulate.train import Problem, TrainResult
from theory.focus_dilution.population import (
    Parameters,
    transition_matrix,
    validate_pi,
)
from theory.focus_dilution.stages import entropy
from theory.validation import require

NAME = "focus-dilution"
TEXT_QUERIES = ("continue", "the", ",", "a", "been", "<nl>")
"""spec §7: the WikiText query "continue", the TinyStories queries [the, comma, a, been] (and
"full", rare in the bundled text), plus the paragraph break."""


SOURCE_OPTIONS = {
    "markov": ("pi", "lam", "train_size"),
    "text": ("text", "vocab", "queries", "probe"),
}
"""the options only one source reads (set away from its default with the other, an error)."""


ADAM_EPS = 1e-8
"""Adam's default eps (optax's)."""


@dataclass(frozen=True)
class FocusDilutionConfig(RunOptions):
    """One-layer attention model (spec §3.2) on sampled Markov sequences or on real text."""

    source: Literal["markov", "text"] = "markov"
    """markov: the chain of spec §2.1; text: a word-level corpus (bundled, or --text PATH)."""
    pi: tuple[float, ...] = (0.75, 0.19, 0.05, 0.01)
    """stationary law of the chain (markov; spec §2.3 default), entries > 0 summing to 1."""
    lam: float = 0.5
    """lambda, repeat probability of the chain in [0, 1) (markov)."""
    context: int | None = None
    """s, positions the last token attends to (itself included); None: 256 (markov) or 64
    (text)."""
    train_size: int | None = 2048
    """markov: a fixed training set of this many sequences (drawn once); None: fresh sequences
    every step."""
    batch: int | None = None
    """sequences per step; None: the whole training set (markov; online: 512) or 128 (text)."""
    width: int | None = None
    """m, embedding width; None: 16 (markov) or 32 (text)."""
    key_width: int | None = None
    """m_k, query/key width; None: the embedding width."""
    qk_scale: float = 1.0
    """factor on the attention logits (1, or 1/sqrt(m_k); spec §3.2)."""
    init_scale: float = 1e-3
    """eps: every parameter entry starts i.i.d. N(0, eps^2)."""
    optimizer: Literal["gd", "adam"] = "gd"
    """gd: plain gradient descent (time = steps x lr); adam: Adam (no time map)."""
    lr: float = 0.05
    """learning rate (gd: the time step of the discretised flow)."""
    adam_eps: float = ADAM_EPS
    """Adam's eps, added to sqrt(v_hat) (optax's default; adam only): when it dominates
    sqrt(v_hat), Adam is gradient descent with step lr / eps."""
    validation: int = 1024
    """validation sequences (markov) or windows (text), fixed, drawn once."""
    data_seed: int = 0
    """seed of the training and validation data (shared by all training seeds)."""
    text: Path | None = None
    """text: a local UTF-8 text file (e.g. WikiText, TinyStories); None: the bundled text."""
    vocab: int = 2000
    """text: vocabulary size, the most frequent types plus <unk>."""
    queries: tuple[str, ...] = TEXT_QUERIES
    """text: tracked query tokens (those outside the vocabulary are skipped)."""
    probe: int = 64
    """text: windows ending in each tracked query used to measure its attention."""
    steps: int = 8000
    """optimizer steps (a multiple of chunk)."""
    log_every: int = 20
    """steps between logged rows."""
    chunk: int = 1000
    """steps per compiled chunk and checkpoint (a multiple of log_every)."""
    seeds: int = 1
    """training seeds (initialisation; the data are shared), vmapped."""

    def __post_init__(self):
        RunOptions.__post_init__(self)
        Seeds.check_seed("data_seed", self.data_seed)
        object.__setattr__(self, "pi", tuple(float(p) for p in self.pi))
        require(self.source in ("markov", "text"), "source", self.source, "markov or text")
        if self.text is not None:
            # a text file means the text source: markov, the default, cannot have been meant
            object.__setattr__(self, "source", "text")
            object.__setattr__(self, "text", Path(self.text))
            check_text_file(self.text)
        defaults = {f.name: f.default for f in fields(FocusDilutionConfig)}
        for name in SOURCE_OPTIONS["markov" if self.source == "text" else "text"]:
            require(
                getattr(self, name) == defaults[name],
                name,
                getattr(self, name),
                f"its default {defaults[name]!r} with source = {self.source} "
                f"(it applies to the {'markov' if self.source == 'text' else 'text'} source only)",
            )
        validate_pi(self.pi)
        # named after the option --lam (theory's validate_lambda names it lambda)
        require(0 <= self.lam < 1, "lam", self.lam, "lambda, a repeat probability in [0, 1)")
        require(
            self.context is None or self.context >= 1,
            "context",
            self.context,
            "None or a context length >= 1",
        )
        require(
            self.train_size is None or self.train_size >= 1,
            "train_size",
            self.train_size,
            "None (online) or an integer >= 1",
        )
        require(
            self.batch is None or self.batch >= 1, "batch", self.batch, "None or an integer >= 1"
        )
        for name in ("width", "key_width"):
            value = getattr(self, name)
            require(value is None or value >= 1, name, value, "None or an integer >= 1")
        require(
            math.isfinite(self.qk_scale) and self.qk_scale > 0,
            "qk_scale",
            self.qk_scale,
            "a factor > 0",
        )
        require(0 < self.init_scale < 1, "init_scale", self.init_scale, "eps in (0, 1)")
        require(self.optimizer in ("gd", "adam"), "optimizer", self.optimizer, "gd or adam")
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a learning rate > 0")
        require(
            math.isfinite(self.adam_eps) and self.adam_eps > 0,
            "adam_eps",
            self.adam_eps,
            "a finite value > 0",
        )
        require(
            self.optimizer == "adam" or self.adam_eps == ADAM_EPS,
            "adam_eps",
            self.adam_eps,
            f"its default {ADAM_EPS:g} with optimizer gd (it applies to adam only)",
        )
        require(self.validation >= 1, "validation", self.validation, "an integer >= 1")
        require(self.vocab >= 2, "vocab", self.vocab, "at least 2 types")
        require(self.probe >= 1, "probe", self.probe, "an integer >= 1")

    @property
    def s(self) -> int:
        return self.context or (256 if self.source == "markov" else 64)

    @property
    def m(self) -> int:
        return self.width or (16 if self.source == "markov" else 32)

    @property
    def m_k(self) -> int:
        return self.key_width or self.m

    @property
    def minibatch(self) -> int:
        if self.batch is not None:
            return self.batch if self.train_size is None else min(self.batch, self.train_size)
        if self.source == "text":
            return 128
        return 512 if self.train_size is None else self.train_size

    @property
    def time_per_step(self) -> float:
        """ODE time per step: lr under gd, 1 (steps) under Adam."""
        return self.lr if self.optimizer == "gd" else 1.0

    def chain(self) -> tuple[np.ndarray, np.ndarray]:
        pi = validate_pi(self.pi)
        return pi, transition_matrix(pi, self.lam)


# --- the model (spec §3.2) ------------------------------------------------------------------------
def last_token_logits(params: Parameters, X, qk_scale: float = 1.0):
    """Logits for the token after ``X`` (``n x s`` ids) and the attention of the last position over
    the ``s`` positions. A position's score depends on its token only, so the scores are computed
    once per type, ``(W0[x_s] WQ) (W0 WK)^T``, and gathered at the positions; the value
    ``sum_j a_j W0[x_j]`` is the attention summed by type times ``W0``. This is the same function as
    the position-by-position model (checked in the tests), at ``O(n (s + vocab m))`` cost."""
    W0, WQ, WK, W1 = params
    type_scores = qk_scale * (W0[X[:, -1]] @ WQ) @ (W0 @ WK).T
    attention = jax.nn.softmax(jnp.take_along_axis(type_scores, X, axis=1), axis=-1)
    return key_type_mass(attention, X, W0.shape[0]) @ W0 @ W1, attention


def cross_entropy(logits, target):
    """Mean cross-entropy of the next tokens ``target`` (n,) under ``logits`` (n, vocab)."""
    log_p = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_p, target[:, None], axis=-1))


def next_token_loss(params: Parameters, seqs, qk_scale: float = 1.0):
    """Cross-entropy of the last token of each ``s + 1`` sequence given the first ``s``."""
    logits, _ = last_token_logits(params, seqs[:, :-1], qk_scale)
    return cross_entropy(logits, seqs[:, -1])


def key_type_mass(attention, X, vocab: int):
    """Attention of each sequence's last position summed by key type: ``(n, vocab)``."""
    return jax.vmap(lambda a, x: jnp.zeros(vocab, a.dtype).at[x].add(a))(attention, X)


class TypeBatch(NamedTuple):
    """Sequences of ``s + 1`` tokens reduced to what the model reads of them: the query
    ``x_s``, the count ``c_t`` of each token type among the ``s`` context positions, and the
    next token."""

    query: jax.Array
    counts: jax.Array
    target: jax.Array


# one program: eager, the vmapped count was about 25 programs, traced by every process
@partial(jax.jit, static_argnums=1)
def type_batch(seqs, vocab: int) -> TypeBatch:
    """``seqs`` (``n x (s + 1)`` ids) as a :class:`TypeBatch`."""
    X = seqs[:, :-1]
    counts = jax.vmap(lambda x: jnp.zeros(vocab).at[x].add(1.0))(X)
    return TypeBatch(X[:, -1], counts, seqs[:, -1])


def type_logits(params: Parameters, query, counts, qk_scale: float = 1.0):
    """:func:`last_token_logits` from the context's type counts: positions of one type share a
    score ``z_t``, so the attention summed by key type is ``softmax_t(z_t + ln c_t)`` (a type
    absent from the context gets none) and the value is that mass times ``W0``. The same
    function at ``O(n vocab m)`` cost instead of ``O(n s)``: for the Markov chain's few types the
    per-position gathers and their scatter-add transposes were almost all of a training step."""
    W0, WQ, WK, W1 = params
    type_scores = qk_scale * (W0[query] @ WQ) @ (W0 @ WK).T
    mass = jax.nn.softmax(type_scores + jnp.log(counts), axis=-1)
    return mass @ W0 @ W1, mass


def type_loss(params: Parameters, batch: TypeBatch, qk_scale: float = 1.0):
    """:func:`next_token_loss` of the sequences ``batch`` was made from."""
    logits, _ = type_logits(params, batch.query, batch.counts, qk_scale)
    return cross_entropy(logits, batch.target)


# --- data ----------------------------------------------------------------------------------------
@partial(jax.jit, static_argnums=(3, 4))
def sample_chain(key, pi, P, n: int, length: int):
    """``n`` sequences of ``length`` tokens of the chain ``P``, ``x_1 ~ pi``."""
    k0, k1 = jax.random.split(key)
    x0 = jax.random.categorical(k0, jnp.log(pi), shape=(n,))
    logP = jnp.log(P)

    def step(x, k):
        nxt = jax.random.categorical(k, logP[x])
        return nxt, nxt

    _, rest = jax.lax.scan(step, x0, jax.random.split(k1, length - 1))
    return jnp.concatenate([x0[:, None], rest.T], axis=1).astype(jnp.int32)


def random_windows(key, ids, n: int, length: int):
    """``n`` windows of ``length`` consecutive tokens at uniform random offsets of ``ids``."""
    starts = jax.random.randint(key, (n,), 0, ids.shape[0] - length + 1)
    return jax.vmap(lambda a: jax.lax.dynamic_slice(ids, (a,), (length,)))(starts)


def query_windows(ids: np.ndarray, token: int, s: int, k: int) -> np.ndarray:
    """Up to ``k`` windows of ``s`` tokens ending in ``token`` (evenly spread over ``ids``)."""
    ends = np.nonzero(ids[s - 1 :] == token)[0] + s - 1
    if ends.size == 0:
        return np.zeros((0, s), np.int32)
    pick = ends[np.linspace(0, ends.size - 1, min(k, ends.size)).astype(int)]
    return np.stack([ids[e - s + 1 : e + 1] for e in pick]).astype(np.int32)


@dataclass(frozen=True)
class TextData:
    corpus: Corpus
    train: jax.Array
    validation: jax.Array
    queries: tuple[str, ...]
    """tracked queries found in the vocabulary and in the text."""
    probes: jax.Array
    """(query, probe, s) windows ending in each tracked query (repeated to ``probe`` rows)."""


def text_data(cfg: FocusDilutionConfig) -> TextData:
    corpus = load_corpus(cfg.text, cfg.vocab)
    train, held = corpus.split(0.9)
    s = cfg.s
    require(
        len(held) > s + 1 and len(train) > s + 1,
        "context",
        s,
        f"a context shorter than the held-out text ({len(held)} tokens)",
    )
    val = random_windows(
        jax.random.PRNGKey(cfg.data_seed), jnp.asarray(held), cfg.validation, s + 1
    )
    names, probes = [], []
    for q in cfg.queries:
        tokens = tokenize(q) if q != "<nl>" else ["<nl>"]
        idx = corpus.index(tokens[0]) if len(tokens) == 1 else None
        if idx is None:
            continue
        w = query_windows(held, idx, s, cfg.probe)
        if len(w) == 0:
            w = query_windows(train, idx, s, cfg.probe)
        if len(w) == 0:
            continue
        names.append(q)
        probes.append(w[np.arange(cfg.probe) % len(w)])
    require(
        len(names) > 0,
        "queries",
        cfg.queries,
        "at least one tracked query token that occurs in the text's vocabulary",
    )
    return TextData(corpus, jnp.asarray(train), val, tuple(names), jnp.asarray(np.stack(probes)))


# --- the experiment ------------------------------------------------------------------------------
def optimizer(cfg: FocusDilutionConfig):
    return optax.sgd(cfg.lr) if cfg.optimizer == "gd" else optax.adam(cfg.lr, eps=cfg.adam_eps)


def _entropy(p, axis=-1):
    return -jnp.sum(p * jnp.log(jnp.clip(p, 1e-300)), axis=axis)


# one program: eager, the data's keys, sets and query counts were a dozen programs, traced by
# every process
@partial(jax.jit, static_argnums=(3, 4, 5))
def _chain_data(key, pi, P, validation: int, train_size: int | None, length: int):
    """The validation and (``train_size``) training sequences of ``markov_problem`` as type
    batches, the validation queries one-hot and their counts (at least 1)."""
    d = pi.shape[0]

    def types(fold, n):
        return type_batch(sample_chain(jax.random.fold_in(key, fold), pi, P, n, length), d)

    val = types(1, validation)
    query_onehot = jax.nn.one_hot(val.query, d)
    train = None if train_size is None else types(2, train_size)
    return val, train, query_onehot, jnp.maximum(query_onehot.sum(0), 1.0)


def markov_problem(cfg: FocusDilutionConfig) -> tuple[Problem, dict]:
    pi_np, P_np = cfg.chain()
    pi, P = jnp.asarray(pi_np), jnp.asarray(P_np)
    d, s = pi_np.size, cfg.s
    val_types, train_types, query_onehot, per_query = _chain_data(
        jax.random.PRNGKey(cfg.data_seed), pi, P, cfg.validation, cfg.train_size, s + 1
    )
    full_batch = train_types is not None and cfg.minibatch == cfg.train_size

    def init(init_key, noise_key):
        del noise_key
        return initial_parameters(init_key, d, cfg.m, cfg.m_k, cfg.init_scale)

    def draw(k) -> TypeBatch:
        if train_types is None:
            return type_batch(sample_chain(k, pi, P, cfg.minibatch, s + 1), d)
        if full_batch:
            return train_types
        rows = jax.random.choice(k, train_types.query.shape[0], (cfg.minibatch,), replace=False)
        return jax.tree.map(lambda a: a[rows], train_types)

    def loss_and_direction(params, data_key):
        return jax.value_and_grad(type_loss)(params, draw(data_key), cfg.qk_scale)

    def observe(params):
        pop = observables(params, pi, P, cfg.qk_scale)
        logits, mass = type_logits(params, val_types.query, val_types.counts, cfg.qk_scale)
        loss = cross_entropy(logits, val_types.target)
        A = query_onehot.T @ mass / per_query[:, None]
        out = {
            f"population_{k}": pop[k]
            for k in ("loss", "attention", "attention_entropy", "focus_mass")
        }
        out.update(
            {
                k: v
                for k, v in pop.items()
                if not k.startswith(("loss", "attention", "focus", "weighted"))
            }
        )
        out.update(
            loss=loss,
            attention=A,
            attention_entropy=_entropy(A),
            focus_mass=A[:, int(np.argmax(pi_np))],
        )
        if train_types is not None:
            head = jax.tree.map(lambda a: a[: cfg.validation], train_types)
            out["train_loss"] = type_loss(params, head, cfg.qk_scale)
        return out

    # the same split of the population observables as in observe(), read off their dims
    population = ("loss", "attention", "attention_entropy", "focus_mass")
    dims = {
        **{k: OBS_DIMS[k] for k in population},
        **{f"population_{k}": OBS_DIMS[k] for k in population},
        **{
            k: v
            for k, v in OBS_DIMS.items()
            if not k.startswith(("loss", "attention", "focus", "weighted"))
        },
    }
    if train_types is not None:
        dims["train_loss"] = ()
    coords = {
        "query": np.arange(d),
        "key": np.arange(d),
        "token": np.arange(d),
        "sv": np.arange(1, 4),
        "width": np.arange(cfg.m),
    }
    facts = {"empirical_query_counts": np.asarray(query_onehot.sum(0)).tolist()}
    return Problem(init, loss_and_direction, observe, dims, coords), facts


def text_problem(cfg: FocusDilutionConfig, data: TextData) -> Problem:
    V, s = data.corpus.vocab, cfg.s
    probes = data.probes

    def init(init_key, noise_key):
        del noise_key
        return initial_parameters(init_key, V, cfg.m, cfg.m_k, cfg.init_scale)

    def loss_and_direction(params, data_key):
        seqs = random_windows(data_key, data.train, cfg.minibatch, s + 1)
        return jax.value_and_grad(next_token_loss)(params, seqs, cfg.qk_scale)

    def observe(params):
        W0, WQ, WK, _ = params

        def one_query(X):
            _, attention = last_token_logits(params, X, cfg.qk_scale)
            mass = key_type_mass(attention, X, V)
            return mass.mean(0), _entropy(mass).mean()

        mass, ent = jax.lax.map(one_query, probes)
        return {
            "loss": next_token_loss(params, data.validation, cfg.qk_scale),
            "key_mass": mass,
            "key_entropy": ent,
            "sv_W0": singular_values(W0)[:3],
            "sv_WQK": singular_values(WQ @ WK.T)[:3],
        }

    dims = {
        "loss": (),
        "key_mass": ("tracked", "key"),
        "key_entropy": ("tracked",),
        "sv_W0": ("sv",),
        "sv_WQK": ("sv",),
    }
    coords = {"tracked": list(data.queries), "key": np.arange(V), "sv": np.arange(1, 4)}
    return Problem(init, loss_and_direction, observe, dims, coords)


def as_runs(ds: xr.Dataset, cfg: FocusDilutionConfig) -> xr.Dataset:
    """A stored Markov training run in the layout of ``solve_flow``: dims ``(run, sample)``,
    ``time = step x time_per_step`` and ``pi``, so ``run_onsets`` applies."""
    out = ds.rename(seed="run", step="sample")
    steps = out["sample"].values
    out = out.drop_vars("sample").assign_coords(
        time=(
            ("run", "sample"),
            np.broadcast_to(steps * cfg.time_per_step, (out.sizes["run"], steps.size)).copy(),
        ),
        step=("sample", steps),
    )
    out["pi"] = (
        ("run", "token"),
        np.broadcast_to(np.asarray(cfg.pi), (out.sizes["run"], len(cfg.pi))).copy(),
    )
    return out


def summarize(cfg: FocusDilutionConfig, ds: xr.Dataset, facts: dict) -> dict:
    if cfg.source == "text":
        unigram = facts["unigram"]
        return {
            "source_text": facts["source"],
            "tokens": facts["tokens"],
            "vocab": cfg.vocab,
            "context": cfg.s,
            "tracked_queries": facts["queries"],
            "ln_vocab": math.log(cfg.vocab),
            "unigram_entropy": float(-(unigram * np.log(np.clip(unigram, 1e-300, None))).sum()),
            "final_val_loss": float(ds["loss"].isel(step=-1).mean()),
            "final_key_entropy": ds["key_entropy"].isel(step=-1).values,
        }
    runs = as_runs(ds, cfg)
    pi = np.asarray(cfg.pi)
    return {
        "onset_rules": ONSET_RULES,
        "time_unit": "steps x lr" if cfg.optimizer == "gd" else "steps",
        "onsets_per_seed": run_onsets(runs),
        "ln_d": math.log(pi.size),
        "unigram_entropy": float(entropy(pi)),
        "final_val_loss": ds["loss"].isel(step=-1).values,
        "final_population_loss": ds["population_loss"].isel(step=-1).values,
        **facts,
    }


def run(cfg: FocusDilutionConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) the experiment into ``output.out``; returns the run directory (the
    in-memory result when ``output.store`` is off)."""
    if cfg.source == "text":
        data = text_data(cfg)
        problem = text_problem(cfg, data)
        facts = {
            "source": data.corpus.source,
            "tokens": len(data.corpus.ids),
            "queries": list(data.queries),
            "unigram": data.corpus.unigram(),
        }
        seeds = {
            "data_seed": cfg.data_seed,
            "data_rule": "validation windows from key("
            "data_seed); training windows at uniform offsets from each step's data key",
        }
    else:
        problem, facts = markov_problem(cfg)
        seeds = {
            "data_seed": cfg.data_seed,
            "data_rule": "validation and training sequences "
            "from key(data_seed) folded with 1 and 2; x_1 ~ pi",
        }
    return run_experiment(
        NAME,
        cfg,
        output,
        problem,
        optimizer(cfg),
        lambda ds: summarize(cfg, ds, facts),
        seeds=seeds,
    )
