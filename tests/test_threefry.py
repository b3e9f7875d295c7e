"""The unrolled Threefry lowering of ``simulate.runtime.use_unrolled_threefry`` (set for the
suite in ``conftest.py``, as every entry point sets it): the hash keeps Random123's known answers
and agrees with a plain numpy Threefry-2x32 on any key and counter, and a draw compiles without
the loop it replaces."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.random import threefry_2x32

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry_reference(key: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011), in numpy uint32 arithmetic."""
    ks = [key[0], key[1], key[0] ^ key[1] ^ np.uint32(0x1BD11BDA)]
    x = [count[0] + ks[0], count[1] + ks[1]]
    for block in range(5):
        for r in ROTATIONS[block % 2]:
            x[0] = x[0] + x[1]
            x[1] = ((x[1] << np.uint32(r)) | (x[1] >> np.uint32(32 - r))) ^ x[0]
        x[0] = x[0] + ks[(block + 1) % 3]
        x[1] = x[1] + ks[(block + 2) % 3] + np.uint32(block + 1)
    return np.array(x, np.uint32)


hash_jit = jax.jit(threefry_2x32)


def test_known_answers_of_random123():
    cases = [
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0x1CB996FC, 0xBB002BE7)),
    ]
    for key, count, expected in cases:
        out = hash_jit(np.uint32(key), np.uint32(count))
        assert [int(v) for v in out] == list(expected)


words = st.integers(0, 2**32 - 1)


@settings(max_examples=30, deadline=None)
@given(st.tuples(words, words), st.lists(words, min_size=8, max_size=8))
def test_hash_agrees_with_numpy_threefry(key, counts):
    key = np.array(key, np.uint32)
    count = np.array(counts, np.uint32).reshape(2, 4)
    with np.errstate(over="ignore"):
        expected = threefry_reference(key, count)
    np.testing.assert_array_equal(np.asarray(hash_jit(key, count)), expected)


def test_a_draw_compiles_without_a_loop():
    draw = jax.jit(lambda key: jax.random.uniform(key, (2048,), jnp.float32))
    hlo = draw.lower(jax.random.PRNGKey(0)).compile().as_text()
    assert " while(" not in hlo
