"""simulate.program_store: a program is traced once per machine and loaded by later processes."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulate import program_store

PROBE = textwrap.dedent(
    """
    from functools import partial

    import jax
    import jax.numpy as jnp

    TRACED = []


    @partial(jax.jit, static_argnames=("steps",))
    def growth(x, rate, *, steps):
        TRACED.append(steps)

        def step(c, _):
            return c * RATE + rate * jnp.sin(c), None

        return {"end": jax.lax.scan(step, x, None, length=steps)[0]}


    RATE = 1.01
    """
)

RUN = textwrap.dedent(
    """
    import json, sys
    from simulate.runtime import configure
    configure()
    import jax, jax.numpy as jnp
    from simulate import program_store
    import probe

    x, rate = jnp.linspace(0.0, 1.0, 6), 0.25
    with jax.default_device(jax.devices()[int(sys.argv[1])]):
        y = program_store.compiled(probe.growth, (x, rate), {"steps": 40})(x, rate)["end"]
    traced = len(probe.TRACED)
    plain = probe.growth(x, rate, steps=40)["end"]
    print(json.dumps({"traced": traced, "devices": [d.id for d in y.devices()],
                      "y": y.tolist(), "plain": plain.tolist()}))
    """
)


def _run(tmp_path, device):
    env = {
        **os.environ,
        "STAGEWISE_CPU_DEVICES": "2",
        "STAGEWISE_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
    }
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(device)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def test_a_stored_program_is_loaded_untraced_until_its_source_changes(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    first, second = _run(tmp_path, 0), _run(tmp_path, 1)
    assert first["traced"] == 1 and second["traced"] == 0
    # the loaded program runs where its caller runs, and computes what jax.jit does, bitwise
    assert first["devices"] == [0] and second["devices"] == [1]
    assert first["y"] == second["y"] == first["plain"]
    assert len(list((tmp_path / "cache" / "exported").glob("*.jaxexport"))) == 1

    (tmp_path / "probe.py").write_text(PROBE.replace("RATE = 1.01", "RATE = 1.02"))
    changed = _run(tmp_path, 0)
    assert changed["traced"] == 1
    assert changed["y"] == changed["plain"] != first["y"]


@jax.jit
def _scaled_sum(x, y):
    return {"sum": (2.0 * x + y).sum(axis=-1), "pair": (x, y)}


def test_the_key_names_shapes_dtypes_static_arguments_and_source(monkeypatch):
    x, y = jnp.ones((2, 3)), jnp.zeros((2, 3))
    base = program_store.key(_scaled_sum, (x, y), {})
    assert program_store.key(_scaled_sum, (x + 1, y), {}) == base  # values are arguments
    others = [
        program_store.key(_scaled_sum, (jnp.ones((3, 3)), y), {}),
        program_store.key(_scaled_sum, (x.astype(jnp.float32), y), {}),
        program_store.key(_scaled_sum, (x, 0.0), {}),
        program_store.key(_scaled_sum, ((x,), y), {}),
        program_store.key(_scaled_sum, (x, y), {"n": 2}),
    ]
    monkeypatch.setattr(program_store, "package_digest", lambda: "edited")
    others.append(program_store.key(_scaled_sum, (x, y), {}))
    assert len({base, *others}) == len(others) + 1


def test_a_damaged_entry_is_exported_again(tmp_path, monkeypatch):
    monkeypatch.setenv("STAGEWISE_CACHE_DIR", str(tmp_path))
    x, y = jnp.arange(6.0).reshape(2, 3), jnp.ones((2, 3))
    path = tmp_path / "exported" / f"{program_store.key(_scaled_sum, (x, y), {})}.jaxexport"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a program")
    out = program_store.compiled(_scaled_sum, (x, y))(x, y)
    np.testing.assert_array_equal(out["sum"], _scaled_sum(x, y)["sum"])
    assert jax.export.deserialize(bytearray(path.read_bytes())).in_avals
    assert not list(path.parent.glob("*.part"))


@pytest.mark.parametrize("shape", [(2, 3), (4, 1)])
def test_compiled_takes_the_caller_s_argument_tree(tmp_path, monkeypatch, shape):
    monkeypatch.setenv("STAGEWISE_CACHE_DIR", str(tmp_path))
    x, y = jnp.full(shape, 0.5), jnp.arange(float(np.prod(shape))).reshape(shape)
    out = program_store.compiled(_scaled_sum, (x, y))(x, y)
    expected = _scaled_sum(x, y)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_array_equal(a, b)
