"""The high-order Markov chain of the incremental-learning paper (spec incremental.md §2.1-2.3).

x_t ~ softmax(l_t / tau),  l_t = sum_k A*_k sum_{i in I(k)} alpha_i x_{t-i},  A*_k = c_k Q_k,
Q_k orthogonal (U V^T of a Gaussian matrix's SVD), c_k = m^(h-k) with block k = 1 the most recent
(reversed: the most important block farthest back). A sequence is ``w`` uniform tokens followed by
``generated`` tokens drawn autoregressively; the loss is taken on the generated ones only. The
truncated teachers A*_{1:k} keep the k most important blocks (the complexity-ladder yardsticks).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from simulate.one_matrix import one_matrix_at_a_time
from theory.incremental.setting import TARGET_RANGE, check_ratio
from theory.validation import require


@dataclass(frozen=True)
class MarkovSetting:
    vocab: int = 50
    """d, number of token types."""
    blocks: tuple[int, ...] = (2, 2, 2)
    """|I(k)|, lag-block sizes, most recent first; they tile lags 1..w."""
    m: float = 1.7
    """importance ratio m (dimensionless); c_k = m^(h-k)."""
    tau: float = 0.1
    """teacher temperature (dimensionless)."""
    alpha: tuple[float, ...] | None = None
    """within-block weights, one per lag of a block, shared by all blocks (default 1)."""
    generated: int = 20
    """tokens generated after the uniform prefix of w tokens (the loss positions)."""
    reversed_importance: bool = False
    """put the most important block farthest back."""
    frobenius_orthogonal: bool = False
    """Gram-Schmidt the Q_k in the Frobenius inner product (tr Q_i^T Q_j = 0), as in the
    authors' head-dynamics figure."""

    def __post_init__(self) -> None:
        require(self.vocab >= 2, "vocab", self.vocab, "an integer >= 2")
        blocks = self.blocks  # a local: pyright would narrow self.blocks to () after len() >= 1
        require(
            len(blocks) >= 1 and all(b >= 1 for b in blocks),
            "blocks",
            self.blocks,
            "one or more block sizes >= 1",
        )
        check_ratio("m", self.m, len(blocks))
        lo, hi = TARGET_RANGE
        # the teacher's logits are c_k / tau, c_k <= 1e150 by the range of m: finite in float64
        require(
            np.isfinite(self.tau) and lo <= self.tau <= hi,
            "tau",
            self.tau,
            f"a temperature in [{lo:g}, {hi:g}]",
        )
        require(self.generated >= 1, "generated", self.generated, "an integer >= 1")
        if self.alpha is not None:
            require(
                len(set(self.blocks)) == 1
                and len(self.alpha) == self.blocks[0]
                and all(a > 0 for a in self.alpha)
                and np.isfinite(sum(self.alpha)),  # normalised by their sum
                "alpha",
                self.alpha,
                "finite positive weights, one per lag of a block (all blocks of equal size)",
            )

    @property
    def h(self) -> int:
        return len(self.blocks)

    @property
    def window(self) -> int:
        """w, the lags the teacher reads."""
        return sum(self.blocks)

    @property
    def length(self) -> int:
        return self.window + self.generated

    def importances(self) -> np.ndarray:
        c = self.m ** (self.h - 1 - np.arange(self.h))
        return c[::-1].copy() if self.reversed_importance else c

    def lag_weights(self) -> np.ndarray:
        """W (h x w): W[k, i-1] = alpha_i for lag i in block k (weights normalised to sum 1 when
        given, as in the authors' generator; 1 by default)."""
        W = np.zeros((self.h, self.window))
        start = 0
        for k, b in enumerate(self.blocks):
            a = np.ones(b) if self.alpha is None else np.asarray(self.alpha) / sum(self.alpha)
            W[k, start : start + b] = a
            start += b
        return W


def teacher(setting: MarkovSetting, key: jax.Array) -> jnp.ndarray:
    """A* (h x d x d): c_k times an independent random orthogonal matrix (optionally made
    Frobenius-orthogonal across blocks)."""

    def orthogonal(k):
        return _orthogonal_factor(jax.random.normal(k, (setting.vocab, setting.vocab)))

    Q = jax.vmap(orthogonal)(jax.random.split(key, setting.h))
    if setting.frobenius_orthogonal:
        Q = _frobenius_gram_schmidt(Q)
    return jnp.asarray(setting.importances())[:, None, None] * Q


@one_matrix_at_a_time
def _orthogonal_factor(x: jax.Array) -> jax.Array:
    """U V^T of the SVD x = U S V^T (one LAPACK call per matrix: ``simulate.one_matrix``)."""
    u, _, vt = jnp.linalg.svd(x)
    return u @ vt


def _frobenius_gram_schmidt(Q):
    """Make tr(Q_i^T Q_j) = 0 for i != j, keeping ||Q_k||_F = sqrt(d) (that of an orthogonal
    matrix)."""
    out = []
    for q in Q:
        for p in out:
            q = q - jnp.sum(q * p) / jnp.sum(p * p) * p
        out.append(q * jnp.sqrt(q.shape[0] / jnp.sum(q * q)))
    return jnp.stack(out)


def context_logits(
    setting: MarkovSetting, A: jax.Array, context: jax.Array, blocks: int | None = None
) -> jax.Array:
    """Teacher logits l/tau for contexts ``context`` (..., w) of tokens ordered x_{t-1}..x_{t-w},
    keeping the ``blocks`` most important blocks (all by default): the truncated teacher."""
    return rows_logits(teacher_rows(setting, A, blocks), context)


def teacher_rows(setting: MarkovSetting, A: jax.Array, blocks: int | None = None) -> jax.Array:
    """rows[i, x] = sum_k W[k, i] A_k[:, x] / tau (w, d, d): what token x at lag i + 1 adds to the
    teacher's logits (A_k x is a column of A_k), over the ``blocks`` most important blocks."""
    W = jnp.asarray(setting.lag_weights())
    order = np.argsort(-setting.importances(), kind="stable")
    keep = np.zeros(setting.h)
    keep[order[: setting.h if blocks is None else blocks]] = 1.0
    return jnp.einsum("kw,kax->wxa", W * keep[:, None], A) / setting.tau


def rows_logits(rows: jax.Array, context: jax.Array) -> jax.Array:
    """The teacher's logits from its ``teacher_rows`` for contexts (..., w): a gather per context
    instead of one-hot products."""
    return jnp.sum(rows[jnp.arange(rows.shape[0]), context], axis=-2)


def sample_sequences(setting: MarkovSetting, A: jax.Array, key: jax.Array, n: int) -> jnp.ndarray:
    """n sequences (n x (w + generated)) of token ids."""
    return sample_from_rows(teacher_rows(setting, A), key, n, setting.generated)


def sample_from_rows(rows: jax.Array, key: jax.Array, n: int, generated: int) -> jnp.ndarray:
    """``sample_sequences`` from the teacher's ``teacher_rows``: a program that takes the teacher
    as an array serves every teacher of one shape."""
    window, vocab = rows.shape[0], rows.shape[1]
    k_prefix, k_gen = jax.random.split(key)
    prefix = jax.random.randint(k_prefix, (n, window), 0, vocab)

    def step(recent, k):  # recent: (n, w), most recent last
        token = jax.random.categorical(k, rows_logits(rows, recent[:, ::-1]))
        return jnp.concatenate([recent[:, 1:], token[:, None]], axis=1), token

    _, tokens = jax.lax.scan(step, prefix, jax.random.split(k_gen, generated))
    return jnp.concatenate([prefix, tokens.T], axis=1)


def contexts(setting: MarkovSetting, sequences: jax.Array) -> jnp.ndarray:
    """(n, generated, w) contexts x_{t-1}..x_{t-w} of every generated position."""
    w = setting.window
    idx = w + np.arange(setting.generated)[:, None] - 1 - np.arange(w)[None, :]
    return sequences[:, idx]


def teacher_log_probs(
    setting: MarkovSetting, A: jax.Array, sequences: jax.Array, blocks: int | None = None
) -> jax.Array:
    """log p(. | context) of the (truncated) teacher at each generated position: (n, gen, d)."""
    return jax.nn.log_softmax(context_logits(setting, A, contexts(setting, sequences), blocks))


def bayes_loss(setting: MarkovSetting, A: jax.Array, sequences: jax.Array) -> jnp.ndarray:
    """Mean teacher cross-entropy on the generated tokens (Monte Carlo estimate of the
    conditional entropy, the loss floor)."""
    logp = teacher_log_probs(setting, A, sequences)
    targets = sequences[:, setting.window :]
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))
