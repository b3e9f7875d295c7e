"""The trainer's chunk through ``simulate.program_store``: traced once per machine, loaded by later
processes, and never loaded for a problem, optimizer or schedule other than its own."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate import program_store
from simulate.one_matrix import one_matrix_at_a_time
from simulate.train import (
    Problem,
    Schedule,
    _chunk_program,
    _initial_state,
    seed_streams,
    train,
)

SCHEDULE = Schedule(steps=20, log_every=5, chunk=10)


def _problem(target, scale=1.0):
    """Least squares on a data set ``target`` (hoisted: an argument of the chunk) with a loss
    weight ``scale`` (a Python float: a literal of the chunk's program)."""
    target = jnp.asarray(target)

    def loss_and_direction(w, key):
        noise = 1e-3 * jax.random.normal(key, w.shape)
        return jax.value_and_grad(lambda w: scale * ((w.sum() - target) ** 2).mean())(w + noise)

    return Problem(
        lambda k, n: jax.random.normal(k, (3,)),
        loss_and_direction,
        lambda w: {"fit": (w.sum() - target).mean(), "w": w},
        {"fit": (), "w": ("coordinate",)},
    )


def _rows(problem, optimizer, seeds=(0, 1), schedule=SCHEDULE):
    result = train(problem, optimizer, schedule, list(seeds), None, progress=False)
    return {name: result.dataset[name].values for name in ("fit", "w")}


def _plain_rows(monkeypatch, problem, optimizer):
    """The rows with the chunk compiled by ``jax.jit`` alone, as before the store."""
    with monkeypatch.context() as m:
        m.setattr(program_store, "traced_key", lambda identity, args: None)
        return _rows(problem, optimizer)


def _same(a, b):
    return all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store and no executables loaded by this process."""
    monkeypatch.setenv("STAGEWISE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program_store, "_LOADED", {})
    return tmp_path / "exported"


def test_a_stored_chunk_is_loaded_untraced_and_computes_what_jit_does(store, monkeypatch):
    problem, optimizer = _problem(np.linspace(-1.0, 2.0, 50)), optax.adam(0.05)
    plain = _plain_rows(monkeypatch, problem, optimizer)
    stored = _rows(problem, optimizer)
    assert len(list(store.glob("*.jaxexport"))) == 1
    # a later process: nothing loaded yet, and exporting (tracing the chunk) is not allowed
    monkeypatch.setattr(program_store, "_LOADED", {})

    def no_export(*args, **kwargs):
        raise AssertionError("the chunk was traced again")

    monkeypatch.setattr(program_store.export, "export", no_export)
    loaded = _rows(problem, optimizer)
    assert _same(stored, plain) and _same(loaded, plain)


def test_a_stored_chunk_serves_problems_that_differ_only_in_their_data(store, monkeypatch):
    first, second = _problem(np.zeros(50)), _problem(np.full(50, 3.0))
    _rows(first, optax.sgd(0.05))
    loaded = _rows(second, optax.sgd(0.05))
    assert len(list(store.glob("*.jaxexport"))) == 1
    assert _same(loaded, _plain_rows(monkeypatch, second, optax.sgd(0.05)))


OTHERS = {
    "learning rate": lambda: (_problem(np.zeros(50)), optax.sgd(0.1), SCHEDULE),
    "optimizer": lambda: (_problem(np.zeros(50)), optax.adam(0.05), SCHEDULE),
    "literal": lambda: (_problem(np.zeros(50), 2.0), optax.sgd(0.05), SCHEDULE),
    "data shape": lambda: (_problem(np.zeros(60)), optax.sgd(0.05), SCHEDULE),
    "schedule": lambda: (_problem(np.zeros(50)), optax.sgd(0.05), Schedule(20, 10, 10)),
}


@pytest.mark.parametrize("other", OTHERS)
def test_a_chunk_is_never_loaded_for_another_program(store, monkeypatch, other):
    """Each change computes other rows: a key that missed it would load the first program and
    give the first program's rows."""
    _rows(_problem(np.zeros(50)), optax.sgd(0.05))
    problem, optimizer, schedule = OTHERS[other]()
    with monkeypatch.context() as m:
        m.setattr(program_store, "traced_key", lambda identity, args: None)
        plain = _rows(problem, optimizer, schedule=schedule)
    assert _same(_rows(problem, optimizer, schedule=schedule), plain)
    assert len(list(store.glob("*.jaxexport"))) == 2


def _entry(problem, optimizer):
    """The chunk's entry for two seeds of ``problem`` (the state as ``train`` builds it)."""
    state = _initial_state(problem, optimizer, seed_streams([0, 1]))
    _, consts, identity = _chunk_program(problem, optimizer, SCHEDULE, state)
    return program_store.traced_key(identity, (consts, state, np.bool_(True)))


finite = st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)


@settings(max_examples=15, deadline=None)
@given(a=finite, b=finite | st.just(0.0) | st.just(-0.0), lr=st.floats(1e-6, 1.0))
def test_entries_are_equal_exactly_when_the_literals_are(a, b, lr):
    """Literals and hyperparameters enter the key at full precision: values one rounding apart
    are other programs."""
    target = np.zeros(50)
    first = _entry(_problem(target, a), optax.sgd(lr))
    assert first is not None and first == _entry(_problem(target, a), optax.sgd(lr))
    same_bits = np.float64(a).tobytes() == np.float64(b).tobytes()  # 0.0 and -0.0 differ
    assert (first == _entry(_problem(target, b), optax.sgd(lr))) == same_bits
    after = float(np.nextafter(lr, 2.0))
    assert first != _entry(_problem(target, a), optax.sgd(after))


def _callback_sum(x):
    return jax.pure_callback(
        lambda v: np.asarray(v.sum(axis=-1)),
        jax.ShapeDtypeStruct(x.shape[:-1], x.dtype),
        x,
        vmap_method="expand_dims",
    )


def _foreign_rule(fn):
    batched = jax.custom_batching.custom_vmap(fn)

    @batched.def_vmap
    def rule(axis_size, in_batched, x):
        del axis_size, in_batched
        return jax.lax.map(batched, x), True

    return batched


def _singular_values(m):
    return jnp.linalg.svd(m, compute_uv=False)


@pytest.mark.parametrize(
    ("fn", "keyed"),
    [
        pytest.param(lambda m: jnp.tanh(m).sum(), True, id="plain"),
        # a batching rule of ours: its source is in the key
        pytest.param(one_matrix_at_a_time(_singular_values), True, id="our batching rule"),
        # the text shows a rule's name only
        pytest.param(_foreign_rule(_singular_values), False, id="foreign batching rule"),
        pytest.param(_callback_sum, False, id="callback"),
        pytest.param(
            lambda m: jnp.sum(jax.lax.map(_callback_sum, m)), False, id="callback in a sub-jaxpr"
        ),
    ],
)
def test_jaxpr_text_refuses_programs_that_run_unkeyed_python(fn, keyed):
    text = program_store.jaxpr_text(jax.make_jaxpr(fn)(jnp.eye(3)))
    assert (text is not None) == keyed


def test_a_problem_with_a_callback_trains_without_the_store(store, monkeypatch):
    base = _problem(np.zeros(50))

    def observe(w):
        return {"fit": _callback_sum(w), "w": w}

    problem = Problem(base.init, base.loss_and_direction, observe, base.dims)
    rows = _rows(problem, optax.sgd(0.05))
    assert not list(store.glob("*.jaxexport"))
    assert _same(rows, _plain_rows(monkeypatch, problem, optax.sgd(0.05)))
