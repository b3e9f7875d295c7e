"""The Markov-chain models (minimal and full transformer, one or two layers, c-gram windows):
the one-layer minimal formula, causality, the context window, exact head symmetry, the full
model's initialisation and dropout, attention shapes."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from simulate.incremental.full_transformer import FullTransformer
from simulate.incremental.markov_training import head_asymmetry
from simulate.incremental.minimal_transformer import evaluate, init_minimal

VOCAB, N = 6, 9
TOKENS = jnp.asarray([1, 2, 3, 4, 5, 0, 1, 2, 3])


def make(kind: str, layers: int, context=None, query_scale=None, seed=0):
    key = jax.random.PRNGKey(seed)
    if kind == "minimal":
        return init_minimal(key, 2, VOCAB, N, query_scale, layers=layers, context=context)
    return FullTransformer(
        VOCAB,
        key=key,
        layers=layers,
        heads=3,
        width=12,
        mlp=8,
        max_length=N,
        context=context,
        query_scale=query_scale,
        dtype=jnp.float64,
    )


MODELS = list(itertools.product(["minimal", "full"], [1, 2]))


def test_one_layer_minimal_model_is_the_paper_formula():
    """a_k(t,s) = softmax_{s<=t}(D^{-1/2} (W_Q^k z_t)^T z_s), logits_t = [sum a W_V z]_{1:d}."""
    model = make("minimal", 1)
    assert model.WQ.shape == model.WV.shape == (2, VOCAB + N, VOCAB + N)
    z = np.concatenate([np.eye(VOCAB)[np.asarray(TOKENS)], np.eye(N)], axis=1)
    WQ, WV = np.asarray(model.WQ), np.asarray(model.WV)
    logits = np.zeros((N, VOCAB))
    for k in range(2):
        for t in range(N):
            s = (z[: t + 1] @ (WQ[k] @ z[t])) / np.sqrt(z.shape[1])
            a = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            logits[t] += (WV[k] @ (a @ z[: t + 1]))[:VOCAB]
    np.testing.assert_allclose(model(TOKENS), logits, atol=1e-12)


def test_two_layer_minimal_model_stacks_a_residual_layer():
    model = make("minimal", 2)
    assert model.WQ.shape == (2, 2, VOCAB + N, VOCAB + N) and model.layers == 2
    first = type(model)(model.WQ[0], model.WV[0], VOCAB)
    second = type(model)(model.WQ[1], model.WV[1], VOCAB)
    z = first.inputs(TOKENS)
    a1 = first.attention(TOKENS)[0]
    u = z + jnp.einsum("hts,hde,se->td", a1, first.WV, z)
    scores = jnp.einsum("hde,te,sd->hts", second.WQ, u, u) / np.sqrt(z.shape[1])
    a2 = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((N, N), bool)), scores, -jnp.inf))
    want = jnp.einsum("hts,hde,se->td", a2, second.WV, u)[:, :VOCAB]
    np.testing.assert_allclose(model(TOKENS), want, atol=1e-12)


@pytest.mark.parametrize("kind,layers", MODELS)
@pytest.mark.parametrize("context", [None, 3])
def test_models_are_causal(kind, layers, context):
    model = make(kind, layers, context)
    changed = TOKENS.at[5].set(3)
    np.testing.assert_array_equal(model(TOKENS)[:5], model(changed)[:5])
    assert not np.allclose(model(TOKENS)[5], model(changed)[5])


@pytest.mark.parametrize("kind,layers", MODELS)
def test_context_window_reads_only_the_last_c_tokens(kind, layers):
    c, t = 3, 7
    model = make(kind, layers, context=c)
    out = model(TOKENS)[t]
    for s in range(t - c + 1):  # positions s <= t - c: lags > c of the token t predicts
        np.testing.assert_allclose(
            model(TOKENS.at[s].set((TOKENS[s] + 1) % VOCAB))[t], out, atol=1e-12
        )
    for s in range(t - c + 1, t + 1):
        assert not np.allclose(model(TOKENS.at[s].set((TOKENS[s] + 1) % VOCAB))[t], out)
    # without the window the oldest token does matter
    free = make(kind, layers)
    assert not np.allclose(free(TOKENS.at[0].set(5))[t], free(TOKENS)[t])


def test_one_layer_window_is_the_lag_mask():
    c = 3
    model = make("minimal", 1, context=c)
    z = model.inputs(TOKENS)
    scores = jnp.einsum("hde,te,sd->hts", model.WQ, z, z) / np.sqrt(z.shape[1])
    t, s = np.arange(N)[:, None], np.arange(N)[None, :]
    want = jax.nn.softmax(jnp.where((s <= t) & (s > t - c), scores, -jnp.inf))
    np.testing.assert_allclose(model.attention(TOKENS)[0], want, atol=1e-12)


@pytest.mark.parametrize("kind", ["minimal", "full"])
@pytest.mark.parametrize("c", [1, 3, N])
def test_one_layer_lag_mask_equals_the_truncated_window(kind, c):
    """One layer runs the c-gram class as one masked pass; evaluating every window of c tokens on
    its own (the two-layer path) gives the same logits and attention."""
    model = make(kind, 1, context=c)
    windowed = evaluate(model.forward, TOKENS, c, layers=2)  # force the per-window path
    for got, want in zip(model.logits_and_attention(TOKENS), windowed, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("kind,layers", MODELS)
@pytest.mark.parametrize("context", [None, 4])
def test_attention_is_a_causal_distribution(kind, layers, context):
    a = np.asarray(make(kind, layers, context).attention(TOKENS))
    assert a.shape == (layers, 2 if kind == "minimal" else 3, N, N)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-12)
    assert np.all(a >= 0) and np.all(np.triu(a, 1) == 0)
    if context is not None:
        assert np.all(np.tril(a, -context) == 0)


@pytest.mark.parametrize("layers", [1, 2])
def test_equal_heads_stay_bitwise_equal_under_adamw(layers):
    """q = 0, W_V = 0: the heads are exactly symmetric, and AdamW keeps them so."""
    model = make("minimal", layers, query_scale=0.0)
    seqs = jax.random.randint(jax.random.PRNGKey(1), (16, N + 1), 0, VOCAB)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.08, weight_decay=0.01))

    def loss(m):
        logp = jax.nn.log_softmax(jax.vmap(m)(seqs[:, :-1]))
        return -jnp.mean(jnp.take_along_axis(logp, seqs[:, 1:, None], -1))

    @jax.jit
    def step(m, state):
        g = jax.grad(loss)(m)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes a float with its int count
            updates, state = opt.update(g, state, m)
        return optax.apply_updates(m, updates), state

    state = opt.init(model)
    start = loss(model)
    for _ in range(5):
        model, state = step(model, state)
    WQ, WV = model.stacked()
    assert float(jnp.abs(WQ).max()) > 0 and float(jnp.abs(WV).max()) > 0 and loss(model) < start
    assert float(head_asymmetry(model.head_queries())) == 0.0
    np.testing.assert_array_equal(WQ[:, 0], WQ[:, 1])
    np.testing.assert_array_equal(WV[:, 0], WV[:, 1])
    assert float(head_asymmetry(make("minimal", layers, query_scale=1e-3).head_queries())) > 0


def test_full_model_initialisation():
    model = FullTransformer(VOCAB, key=jax.random.PRNGKey(0), layers=2)
    assert model.encoder.shape == (255, VOCAB) and model.decoder.shape == (VOCAB, 255)
    for W in (model.encoder, model.decoder):
        assert float(jnp.linalg.norm(W, ord=2)) == pytest.approx(1.0, abs=1e-6)
    block = model.blocks[0]
    assert block.WQ.shape == (3, 255, 85) and block.WO.shape == (3, 85, 255)
    assert model.positional.shape == (50, 255) and model.layers == 2
    assert model.head_queries().shape == (3, 255, 85)
    small = FullTransformer(VOCAB, key=jax.random.PRNGKey(0), query_scale=1e-3)
    assert float(jnp.abs(small.blocks[0].WQ).max()) <= 1e-3
    assert float(jnp.abs(small.blocks[0].WV).max()) == 0.0
    assert float(jnp.abs(small.blocks[0].WK).max()) > 1e-2  # K, O keep the default init


def test_full_model_dropout_only_with_a_key():
    model = make("full", 1)
    a, b = model(TOKENS, key=jax.random.PRNGKey(1)), model(TOKENS, key=jax.random.PRNGKey(2))
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(model(TOKENS), model(TOKENS))
    np.testing.assert_array_equal(model(TOKENS, key=jax.random.PRNGKey(1)), a)
    no_dropout = FullTransformer(
        VOCAB,
        key=jax.random.PRNGKey(0),
        width=12,
        mlp=8,
        max_length=N,
        dropout=0.0,
        dtype=jnp.float64,
    )
    np.testing.assert_array_equal(no_dropout(TOKENS, key=jax.random.PRNGKey(1)), no_dropout(TOKENS))
