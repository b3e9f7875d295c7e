"""The Markov task and the minimal transformer: teacher structure, sampler against the teacher's
conditionals, truncated teachers, causality, and the paper's ideal solution reproducing the
teacher."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.incremental.markov_task import (
    MarkovSetting,
    bayes_loss,
    context_logits,
    contexts,
    sample_sequences,
    teacher,
    teacher_log_probs,
)
from simulate.incremental.minimal_transformer import MinimalTransformer, init_minimal
from theory.validation import ConfigError

SMALL = MarkovSetting(vocab=6, blocks=(1, 2), m=1.5, tau=0.5, generated=4)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), m=st.floats(1.0, 3.0))
def test_teacher_blocks_are_scaled_orthogonal_matrices(seed, m):
    s = MarkovSetting(vocab=6, blocks=(1, 2), m=m)
    A = np.asarray(teacher(s, jax.random.PRNGKey(seed)))
    for k, c in enumerate(s.importances()):
        np.testing.assert_allclose(A[k].T @ A[k], c**2 * np.eye(6), atol=1e-9)
    assert s.importances()[0] == pytest.approx(m)  # most recent block is the most important


def test_frobenius_orthogonal_teacher():
    s = MarkovSetting(vocab=6, blocks=(1, 1, 1), m=1.5, frobenius_orthogonal=True)
    A = np.asarray(teacher(s, jax.random.PRNGKey(3)))
    gram = np.einsum("iab,jab->ij", A, A)
    np.testing.assert_allclose(gram, np.diag(6 * s.importances() ** 2), atol=1e-9)
    plain = np.asarray(
        teacher(MarkovSetting(vocab=6, blocks=(1, 1, 1), m=1.5), jax.random.PRNGKey(3))
    )
    assert abs(np.einsum("ab,ab->", plain[0], plain[1])) > 1e-6  # not orthogonal by itself


def test_sampler_follows_the_teacher_conditionals():
    A = teacher(SMALL, jax.random.PRNGKey(0))
    seqs = np.asarray(sample_sequences(SMALL, A, jax.random.PRNGKey(1), 40000))
    ctx = np.asarray(contexts(SMALL, seqs))[:, 0]  # context of the first generated token
    target = seqs[:, SMALL.window]
    want = np.array([0, 1, 2])  # x_{t-1}, x_{t-2}, x_{t-3}
    rows = np.all(ctx == want, axis=1)
    assert rows.sum() > 100
    freq = np.bincount(target[rows], minlength=6) / rows.sum()
    p = np.asarray(jax.nn.softmax(context_logits(SMALL, A, jnp.asarray(want))))
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p * (1 - p) / rows.sum()).max() + 1e-3)


def test_truncated_teachers_drop_the_weakest_blocks():
    A = teacher(SMALL, jax.random.PRNGKey(0))
    ctx = jnp.asarray([[0, 1, 2]])
    only_first = context_logits(SMALL, A, ctx, blocks=1)
    np.testing.assert_allclose(only_first[0], A[0][:, 0] / SMALL.tau, atol=1e-12)
    full = context_logits(SMALL, A, ctx)
    np.testing.assert_allclose(
        full[0], (A[0][:, 0] + A[1][:, 1] + A[1][:, 2]) / SMALL.tau, atol=1e-12
    )
    reversed_ = MarkovSetting(**{**SMALL.__dict__, "reversed_importance": True})
    np.testing.assert_allclose(
        context_logits(reversed_, A, ctx, blocks=1)[0],
        (A[1][:, 1] + A[1][:, 2]) / SMALL.tau,
        atol=1e-12,
    )


def test_model_is_causal():
    model = init_minimal(jax.random.PRNGKey(0), 2, 6, 8, None)
    tokens = jnp.asarray([1, 2, 3, 4, 5, 0, 1, 2])
    changed = tokens.at[5].set(3)
    np.testing.assert_allclose(model(tokens)[:5], model(changed)[:5], atol=1e-12)
    assert not np.allclose(model(tokens)[5:], model(changed)[5:])


def test_ideal_solution_reproduces_the_teacher_and_reaches_the_bayes_loss():
    """Paper Fig. 1 'ideal attention': head k attends uniformly to block k, W_V^k = |I(k)| A*_k/tau
    (alpha = 1)."""
    s = SMALL
    A = np.asarray(teacher(s, jax.random.PRNGKey(0)))
    d, L = s.vocab, s.length - 1
    D = d + L
    beta = 60.0 * np.sqrt(D)  # attention off the block ~ exp(-60)
    WQ, WV = np.zeros((s.h, D, D)), np.zeros((s.h, D, D))
    start = 0
    for k, b in enumerate(s.blocks):
        for t in range(L):  # the output at position t predicts token t+1: lag i is position t+1-i
            for i in range(start + 1, start + b + 1):
                if t + 1 - i >= 0:
                    WQ[k, d + t + 1 - i, d + t] = beta
        WV[k, :d, :d] = b * A[k] / s.tau
        start += b
    model = MinimalTransformer(jnp.asarray(WQ), jnp.asarray(WV), d)
    seqs = sample_sequences(s, jnp.asarray(A), jax.random.PRNGKey(2), 64)
    logits = jax.vmap(model)(seqs[:, :-1])[:, s.window - 1 :]
    want = context_logits(s, jnp.asarray(A), contexts(s, seqs))
    np.testing.assert_allclose(logits, want, atol=1e-9)
    nll = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), seqs[:, s.window :, None], -1))
    assert float(nll) == pytest.approx(float(bayes_loss(s, jnp.asarray(A), seqs)), abs=1e-9)
    assert teacher_log_probs(s, jnp.asarray(A), seqs).shape == (64, s.generated, d)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"vocab": 1}, "vocab"),
        ({"tau": 0.0}, "tau"),
        ({"blocks": (0, 2)}, "blocks"),
        ({"alpha": (1.0,)}, "alpha"),
        ({"m": -1.0}, "m"),
    ],
)
def test_bad_settings(kwargs, field):
    with pytest.raises(ConfigError) as err:
        MarkovSetting(**kwargs)
    assert err.value.field == field


def test_the_teacher_hands_lapack_one_matrix_at_a_time():
    """Two side-by-side runs drawing their teachers at once with a batched SVD of the h blocks
    hung XLA:CPU's intra-op pool (``simulate.one_matrix``): the compiled teacher hands LAPACK one
    d x d matrix per call, and Q_k is still orthogonal."""
    s = MarkovSetting(vocab=7, blocks=(1, 1, 1), m=1.5)
    draw = jax.jit(teacher, static_argnums=0)
    calls = [
        line
        for line in draw.lower(s, jax.random.PRNGKey(0)).as_text().splitlines()
        if "gesdd" in line
    ]
    assert calls and all("tensor<7x7xf64>" in line for line in calls), calls
    Q = np.asarray(draw(s, jax.random.PRNGKey(0))) / np.asarray(s.importances())[:, None, None]
    for q in Q:
        np.testing.assert_allclose(q @ q.T, np.eye(7), atol=1e-12)
