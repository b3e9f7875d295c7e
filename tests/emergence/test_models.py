"""simulate.emergence.models: causality of the transformer and the Mixer, the attention-bias
intervention (linear map and CA), and the parameter count (spec emergence.md §3, §5.4)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.emergence import tasks
from simulate.emergence.models import (
    MIN_POSITIONS,
    CausalMixer,
    CausalTransformer,
    parameter_count,
)
from simulate.emergence.tasks import ca_bias_mass, ca_pattern


def _models():
    key = jax.random.PRNGKey(0)
    return [
        CausalTransformer(2, 15, layers=1, heads=2, head_dim=4, key=key),
        CausalTransformer(2, 15, layers=2, heads=2, head_dim=4, key=key),
        CausalMixer(2, 15, layers=2, width=8, key=key),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_models_are_causal(index):
    model = _models()[index]
    x = jnp.asarray(np.random.default_rng(0).integers(0, 2, 15))
    y = x.at[9].set(1 - x[9])
    a, b = model(x), model(y)
    assert a.shape == (15, 2)
    np.testing.assert_allclose(a[:9], b[:9], atol=1e-6)
    assert not np.allclose(a[9:], b[9:])


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), layers=st.sampled_from([1, 2]))
def test_a_short_sequence_padded_to_min_positions_gives_the_unpadded_model(seed, layers):
    """Seven positions (the linear map at S = 4) run padded to MIN_POSITIONS = 8: logits,
    attention (with the bias) and the gradient of the loss are the unpadded model's."""
    key = jax.random.PRNGKey(seed)
    model = CausalTransformer(2, 7, layers=layers, heads=2, head_dim=4, key=key)
    x = jax.random.randint(jax.random.fold_in(key, 1), (7,), 0, 2)
    bias = jax.random.normal(jax.random.fold_in(key, 2), (7, 7))
    assert MIN_POSITIONS > 7

    def loss(m, positions):
        logits, _ = m.padded_logits_and_attention(x, bias, positions)
        return jax.nn.logsumexp(logits, axis=-1).sum() - logits[jnp.arange(7), x].sum()

    padded = model.logits_and_attention(x, bias)
    plain = model.padded_logits_and_attention(x, bias, 0)
    programs = [
        str(jax.make_jaxpr(lambda t, p=p: model.padded_logits_and_attention(t, bias, p))(x))
        for p in (MIN_POSITIONS, 0)
    ]
    assert "pad[" in programs[0] and "pad[" not in programs[1]  # the padding is there
    for a, b in zip(padded, plain):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    grads = [eqx.filter_grad(loss)(model, p) for p in (MIN_POSITIONS, 0)]
    for a, b in zip(*(jax.tree_util.tree_leaves(g) for g in grads)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_sequences_of_min_positions_or_more_are_not_padded():
    """From MIN_POSITIONS positions on the forward pass is the unpadded one, op for op."""
    model = _models()[1]
    x = jnp.zeros(15, jnp.int32)
    texts = [
        str(jax.make_jaxpr(lambda t, p=p: model.padded_logits_and_attention(t, None, p))(x))
        for p in (MIN_POSITIONS, 0)
    ]
    assert texts[0] == texts[1]


def test_attention_bias_moves_mass_to_the_pattern():
    model = _models()[1]
    M = np.asarray(tasks.linear_map(8, 3, jax.random.PRNGKey(3)))
    B = jnp.asarray(tasks.linear_map_pattern(M, 2))
    x = jnp.asarray(np.random.default_rng(1).integers(0, 2, 15))
    _, plain = model.logits_and_attention(x)
    _, biased = model.logits_and_attention(x, 5.0 * B)

    def mass(a):
        return float((a[0, :, 7:] * B[7:].astype(a.dtype)).sum(-1).mean())

    assert mass(biased) > mass(plain) + 0.3
    np.testing.assert_allclose(biased[0, :, :7], plain[0, :, :7], atol=1e-6)  # no pattern there


def test_bias_puts_the_predicted_mass_on_the_neighbourhood():
    S, n, K, c = 6, 3, 2, 3.0
    model = eqx.filter_jit(
        lambda k: CausalTransformer(K, n * S - 1, layers=1, heads=2, head_dim=4, key=k)
    )(jax.random.PRNGKey(0))
    # zero query/key/value maps: every logit equal, so only the bias shapes the attention
    flat = eqx.tree_at(lambda m: m.qkv, model, [jnp.zeros_like(w) for w in model.qkv])
    B = ca_pattern(S, n)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, K, n * S - 1))
    attention = eqx.filter_jit(flat.logits_and_attention)
    attn = np.asarray(attention(tokens, jnp.asarray(c * B))[1][0])
    queries = slice(S - 1, n * S - 1)  # the queries predicting states t >= 1
    mass = (attn[:, queries] * B[queries]).sum(-1)
    assert mass.mean() == pytest.approx(ca_bias_mass(S, c, n), rel=1e-5)
    assert ca_bias_mass(S, 0.0, n) < mass.mean()


def test_parameter_count_depends_on_width_only():
    assert parameter_count(8, 4, 11) == parameter_count(1, 32, 11) == parameter_count(4, 8, 11)
    d = 32
    assert parameter_count(8, 4, 11) == 2 * d + 11 * d + 12 * d * d + 2 * d
