"""Chunked, vmapped training through the run store (ARCHITECTURE §2, Trainer).

A run is a sequence of chunks; each chunk is one compiled program (``jax.jit`` of ``jax.vmap`` over
seeds of a ``lax.scan`` over logged rows of a ``lax.scan`` over steps). Between chunks the logged
rows are appended to the store and the whole state (parameters, optimizer state, PRNG keys, step)
is checkpointed, so SIGINT/SIGTERM or an exception loses at most the chunk in flight, and a resumed
run continues with bit-identical state.
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from simulate import program_store, side_by_side, signals
from simulate.store import RunStore

INIT, NOISE, DATA = 0, 1, 2
"""Tags folded into each seed's key: separate streams for initialisation, noise and data."""

State = tuple[Any, Any, jax.Array, jax.Array, jax.Array, jax.Array]
"""The trainer's state, every leaf stacked over seeds: (params, opt_state, data key, step,
first non-finite step or -1, its kind: 0 loss, 1 parameters, -1 none)."""


@dataclass(frozen=True)
class Problem:
    """What the trainer needs of an experiment, for one seed (the trainer vmaps over seeds).

    ``init(init_key, noise_key) -> params``; ``loss_and_direction(params, data_key) -> (loss, g)``
    where the update follows ``-g`` through the optimizer (``g`` is the gradient, or minus the
    vector field of a non-Euclidean flow); ``observe(params) -> {name: array}`` with the extra dims
    of each observable in ``dims``, or ``observe(params, opt_state)`` when ``observe_optimizer``
    (observables that need the optimizer's state, e.g. Adam's second moment).

    With ``draw_interval``, ``draw_interval(data_key)`` draws the data of a whole logged interval
    at once, every leaf with a leading axis of the schedule's ``log_every`` (one shuffle of a
    training set cut into minibatches: a data loader's epoch), and ``loss_and_direction`` gets
    the step's slice of it in place of a key. With ``draw_step``, ``draw_step(key, step) -> (key,
    data)`` draws step ``step``'s data from the run's data key and returns the key the next step
    gets (by default the trainer splits the key at every step): a data loader's epoch of k steps
    keeps one key for its k steps, recomputes its permutation from it at each of them and moves to
    a new key after the last, so epochs need not line up with logged intervals and the state
    carries nothing but the key; ``loss_and_direction`` gets the data in place of a key."""

    init: Callable[[jax.Array, jax.Array], Any]
    loss_and_direction: Callable[[Any, Any], tuple[jax.Array, Any]]
    observe: Callable[..., dict[str, jax.Array]]
    """``observe(params)``, or ``observe(params, opt_state)`` when ``observe_optimizer``."""
    dims: dict[str, tuple[str, ...]]
    coords: dict[str, Any] = field(default_factory=dict)
    observe_optimizer: bool = False
    draw_interval: Callable[[jax.Array], Any] | None = None
    draw_step: Callable[[jax.Array, jax.Array], tuple[jax.Array, Any]] | None = None

    def __post_init__(self):
        if self.draw_interval is not None and self.draw_step is not None:
            raise ValueError("a problem draws its data per interval or per step, not both")

    def observation(self, params: Any, opt_state: Any) -> dict[str, jax.Array]:
        """The logged observables of one seed's state."""
        return self.observe(params, opt_state) if self.observe_optimizer else self.observe(params)


@dataclass(frozen=True)
class Schedule:
    """How many steps, how often a row is logged, how many steps one compiled chunk runs."""

    steps: int
    """total optimizer steps."""
    log_every: int
    """steps between logged rows."""
    chunk: int
    """steps per compiled chunk (a multiple of log_every dividing steps)."""


class DivergenceError(RuntimeError):
    """A seed's loss or parameters became non-finite; the rows logged before it are kept."""

    def __init__(self, step: int, quantity: str, seed: int):
        self.step, self.quantity, self.seed = step, quantity, seed
        super().__init__(
            f"diverged at step {step}: non-finite {quantity} (seed {seed}); "
            "the rows logged before it are kept"
        )


class Interrupted(RuntimeError):
    """SIGINT or SIGTERM arrived; the run stopped after the chunk in flight was checkpointed."""

    def __init__(self, signum: int, step: int):
        self.signum, self.step = signum, step
        super().__init__(
            f"interrupted by {signal.Signals(signum).name} after step {step}; resume with --resume"
        )


@dataclass
class TrainResult:
    """What ``train`` returns: the rows it logged and where the time went."""

    dataset: xr.Dataset
    """rows logged by this call (on resume: the rows after the checkpoint)."""
    compile_seconds: float
    run_seconds: float


def seed_streams(seed_ids: Sequence[int]) -> dict[str, jax.Array]:
    """Per seed id: independent init, noise and data keys (``fold_in`` of the seed's key)."""
    return _seed_streams(np.asarray(seed_ids, dtype=np.uint32))


# one program: eager, the key derivation was four (a conversion, the seed hash, the fold-ins),
# each traced, lowered and looked up in the compilation cache by every process
@jax.jit
def _seed_streams(seed_ids: jax.Array) -> dict[str, jax.Array]:
    base = jax.vmap(jax.random.PRNGKey)(seed_ids)
    return {
        name: jax.vmap(lambda k, t=tag: jax.random.fold_in(k, t))(base)
        for name, tag in (("init", INIT), ("noise", NOISE), ("data", DATA))
    }


def shard_seeds(state: Any) -> Any:
    """``state`` with its leading seed axis split over as many devices as divide it evenly (the
    CPU's cores, see ``simulate.runtime.use_cpu_cores``, or the one device of a run side by side
    with others, ``simulate.side_by_side``); seeds are independent, so the chunk program then runs
    each device's seeds on its own core without communication."""
    n = jax.tree_util.tree_leaves(state)[0].shape[0]
    devices = side_by_side.devices()
    count = max(k for k in range(1, len(devices) + 1) if n % k == 0)
    if count == 1:
        return state
    mesh = Mesh(np.asarray(devices[:count]), ("seed",))
    # split on the host: resharding device arrays compiled a program per leaf shape (3-9 a run)
    return jax.device_put(jax.device_get(state), NamedSharding(mesh, PartitionSpec("seed")))


def _all_finite(tree: Any) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(x))
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _hoisted(fn: Callable, *example: Any) -> tuple[Callable, list[jax.Array], str | None, Any]:
    """``fn`` traced once at ``example``, as ``(converted, consts, text, shape)`` with
    ``converted(consts, *args) == fn(*args)``: the arrays ``fn`` closes over (a problem's data
    sets, teachers, reference tables) become arguments of the compiled program instead of
    constants in it, so runs that differ only in those values (seeds' data, a sweep's teachers)
    share one program and its persistent-cache entry, and XLA does not compile megabytes of
    literals (markov quick: 12 MB). ``text``: its output tree and jaxpr, which with the consts'
    shapes name everything ``converted`` computes (``program_store.jaxpr_text``); ``shape``: its
    result's shapes and dtypes."""
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(*example)
    out_tree = jax.tree_util.tree_structure(shape)

    def converted(consts, *args):
        with_consts = jax.extend.core.ClosedJaxpr(closed.jaxpr, consts)
        flat = jax.extend.core.jaxpr_as_fun(with_consts)(*jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(out_tree, flat)

    text = program_store.jaxpr_text(closed)
    return converted, list(closed.consts), text and f"{out_tree}\n{text}", shape


def _update_text(
    optimizer: optax.GradientTransformation, g: Any, opt_state: Any, params: Any
) -> str | None:
    """The optimizer's update as the chunk inlines it, as text: its jaxpr at one seed's shapes
    and a digest of the arrays it closes over (which the chunk compiles as constants)."""
    with jax.numpy_dtype_promotion("standard"):
        closed, shape = jax.make_jaxpr(optimizer.update, return_shape=True)(g, opt_state, params)
    digest = hashlib.sha256()
    for const in closed.consts:
        value = np.asarray(const)
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(value.tobytes())
    text = program_store.jaxpr_text(closed)
    return text and f"{jax.tree_util.tree_structure(shape)}\n{text}\n{digest.hexdigest()}"


def epoch_minibatches(
    key: jax.Array, n: int, batch: int, dtype: Any
) -> tuple[jax.Array, jax.Array]:
    """A data loader's epoch over ``n`` training rows: ``(order, weight)``, each (ceil(n / batch),
    batch), one permutation of the rows cut into minibatches; when the batch does not divide n
    the last one is padded with row 0 at weight 0 (its real rows weigh 1)."""
    steps = -(-n // batch)
    shuffle = jax.random.permutation(key, n)
    order = jnp.concatenate([shuffle, jnp.zeros(steps * batch - n, shuffle.dtype)])
    weight = (jnp.arange(steps * batch) < n).astype(dtype)
    return order.reshape(steps, batch), weight.reshape(steps, batch)


def step_data(problem: Problem, key: jax.Array, step: jax.Array | int) -> tuple[jax.Array, Any]:
    """``(key, data)``: the data of step ``step`` drawn from the run's data key ``key`` as the
    trainer draws it, and the key of the next step, for code that replays a run's steps outside
    the trainer (``Problem.draw_step``, or by default a split of the key)."""
    if problem.draw_interval is not None:
        raise ValueError("a problem that draws whole intervals is replayed by the trainer only")
    if problem.draw_step is not None:
        return problem.draw_step(key, jnp.asarray(step, jnp.int32))
    key, data = jax.random.split(key)
    return key, data


def optimizer_step(
    loss_and_direction: Callable,
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    data: Any,
) -> tuple[Any, Any, jax.Array]:
    """One training step as the trainer takes it: the loss and direction on the step's data (its
    key, or its slice of ``Problem.draw_interval``), the optimizer's update, the new parameters;
    ``(params, opt_state, loss)``."""
    loss, g = loss_and_direction(params, data)
    # optax's Adam bias correction computes python-float ** int32 count, which strict dtype
    # promotion rejects; the third-party update is traced under standard promotion.
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = optimizer.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _initial_state(
    problem: Problem, optimizer: optax.GradientTransformation, keys: dict[str, jax.Array]
) -> State:
    """Every seed's starting ``State`` from its keys, built by one program (eager, the optimizer's
    init and the counters were a program per operation and shape, in every process)."""

    def build(init_keys, noise_keys, data_keys):
        params = jax.vmap(problem.init)(init_keys, noise_keys)
        counters = jnp.zeros(data_keys.shape[0], jnp.int32)
        return (
            params,
            jax.vmap(optimizer.init)(params),
            data_keys,
            counters,
            counters - 1,
            counters - 1,
        )

    return jax.jit(build)(keys["init"], keys["noise"], keys["data"])


def _chunk_program(
    problem: Problem,
    optimizer: optax.GradientTransformation,
    schedule: Schedule,
    state: State,
) -> tuple[Callable, Any, tuple[str | None, ...]]:
    """``(program, consts, identity)``: ``program(consts, state, first) -> (state, rows)`` runs
    one chunk of every seed and returns its ``chunk // log_every + 1`` rows, the first of them the
    state the chunk starts from (wanted at the run's start only: ``first``; later chunks start
    where the previous one's last row was taken, and their first row is left uncomputed).
    ``consts`` are the problem's hoisted arrays (see ``_hoisted``). ``identity``: what the
    program's trace reads besides its arguments (the problem's and optimizer's jaxprs and the
    schedule), the key of ``simulate.program_store``."""
    # shapes only: the problem is traced, never run, at one seed's state
    one = jax.eval_shape(lambda s: jax.tree_util.tree_map(lambda x: x[0], s), state)
    step_shape, draw, draw_consts, draw_text = one[2], None, [], ""
    if problem.draw_interval is not None:
        draw, draw_consts, draw_text, interval = _hoisted(problem.draw_interval, one[2])
        lengths = {x.shape[0] for x in jax.tree_util.tree_leaves(interval)}
        if lengths != {schedule.log_every}:
            raise ValueError(
                f"draw_interval gives leading axes {sorted(lengths)}, "
                f"expected the {schedule.log_every} steps of a logged interval"
            )
        step_shape = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), interval
        )
    elif problem.draw_step is not None:
        draw, draw_consts, draw_text, (_, step_shape) = _hoisted(problem.draw_step, one[2], one[3])
    loss_and_direction, ld_consts, ld_text, (_, direction) = _hoisted(
        problem.loss_and_direction, one[0], step_shape
    )
    observation, obs_consts, obs_text, row_shapes = _hoisted(problem.observation, one[0], one[1])
    identity = (
        ld_text,
        obs_text,
        _update_text(optimizer, direction, one[1], one[0]),
        f"log_every={schedule.log_every} chunk={schedule.chunk}",
        *([draw_text] if draw is not None else []),
    )
    rows = schedule.chunk // schedule.log_every

    def one_step(consts, carry, data):
        ld, dr = consts
        params, opt_state, key, step, bad, bad_kind = carry
        if problem.draw_step is not None:
            assert draw is not None  # hoisted above
            key, data = draw(dr, key, step)
        elif data is None:  # the step draws its own data from the key
            key, data = jax.random.split(key)
        params, opt_state, loss = optimizer_step(
            partial(loss_and_direction, ld), optimizer, params, opt_state, data
        )
        loss_ok, params_ok = jnp.isfinite(loss), _all_finite(params)
        first = (bad < 0) & ~(loss_ok & params_ok)
        bad = jnp.where(first, step, bad)
        bad_kind = jnp.where(first, jnp.where(loss_ok, 1, 0), bad_kind)
        return (params, opt_state, key, step + 1, bad, bad_kind)

    def chunk(consts, carry, first):
        ld, obs, dr = consts

        def steps(carry):
            if problem.draw_interval is None:
                carry, _ = jax.lax.scan(
                    lambda c, _: (one_step((ld, dr), c, None), None),
                    carry,
                    None,
                    length=schedule.log_every,
                )
                return carry
            assert draw is not None  # hoisted above
            key, sub = jax.random.split(carry[2])
            carry, _ = jax.lax.scan(
                lambda c, d: (one_step((ld, dr), c, d), None),
                (*carry[:2], key, *carry[3:]),
                draw(dr, sub),
            )
            return carry

        # row k is taken before the steps of interval k, so that the run's initial row comes
        # from the observation the chunk compiles anyway rather than from a program of its own
        # (a second compile of the observables: 3.2 of 12.9 s of a small clustering-head run);
        # both predicates are unbatched, so each cond runs one branch
        def log_row(carry, k):
            row = jax.lax.cond(
                (k > 0) | first,
                lambda c: observation(obs, c[0], c[1]),
                lambda c: jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), row_shapes),
                carry,
            )
            return jax.lax.cond(k < rows, steps, lambda c: c, carry), row

        return jax.lax.scan(log_row, carry, jnp.arange(rows + 1))

    consts = (ld_consts, obs_consts, draw_consts)
    if jax.tree_util.tree_leaves(state)[0].shape[0] > 1:  # seeds
        return jax.jit(jax.vmap(chunk, in_axes=(None, 0, None))), consts, identity

    # vmap over a single seed still batches every gather and scatter of the step, and on the CPU
    # the batched forms cost up to 3x the plain ones (clustering-head evaluation: 10.9 ms against
    # 3.3 ms), so one seed runs the unbatched chunk with the seed axis taken off and put back
    def one_seed(consts, state, first):
        state, rows = chunk(consts, jax.tree_util.tree_map(lambda x: x[0], state), first)
        return jax.tree_util.tree_map(lambda x: x[None], (state, rows))

    return jax.jit(one_seed), consts, identity


def _compiled_chunk(program: Callable, identity: tuple[str | None, ...], args: tuple) -> Callable:
    """``program`` compiled at ``args``, through ``simulate.program_store`` where ``identity``
    names it: warm, tracing and lowering the chunk were half its compile (a small
    clustering-head run: 0.86 of 1.66 s), and a stored export skips them."""
    entry = program_store.traced_key(identity, args)
    if entry is None:
        return program.lower(*args).compile()
    state_tree = jax.tree_util.tree_structure(args[1])

    def flat(consts, state, first):  # the store keeps results as lists and dicts of arrays
        state, rows = program(consts, state, first)
        return jax.tree_util.tree_leaves(state), rows

    executable = program_store.compiled_as(entry, flat, args)

    def call(*args):
        leaves, rows = executable(*args)
        return jax.tree_util.tree_unflatten(state_tree, leaves), rows

    return call


def _to_dataset(
    problem: Problem, rows: dict[str, np.ndarray], steps: ArrayLike, seed_ids: Sequence[int]
) -> xr.Dataset:
    data = {
        name: (("seed", "step", *problem.dims[name]), np.asarray(value))
        for name, value in rows.items()
    }
    return xr.Dataset(
        data, coords={"seed": np.asarray(seed_ids), "step": np.asarray(steps), **problem.coords}
    )


def train(
    problem: Problem,
    optimizer: optax.GradientTransformation,
    schedule: Schedule,
    seed_ids: Sequence[int],
    store: RunStore | None,
    resume: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Run (or resume) a training run; with ``store=None`` nothing is written (for benchmarks).

    The state of every seed (stacked along a leading axis) is the tuple ``State``: parameters,
    optimizer state, data key, step, and the first non-finite step and its kind (-1: none)."""
    seed_ids = list(seed_ids)
    state = _initial_state(problem, optimizer, seed_streams(seed_ids))
    t0 = time.perf_counter()
    program, consts, identity = _chunk_program(problem, optimizer, schedule, state)
    tracing_seconds = time.perf_counter() - t0
    rows_done, step = 0, 0
    if resume:
        if store is None:
            raise ValueError("resume needs a run store")
        store.check_resumable()
        if store.has_checkpoint():
            state, step, rows_done = store.load_checkpoint(like=state)
        # else: killed before its first checkpoint, so nothing was logged; it starts from step 0
        store.truncate(rows_done)
        if step >= schedule.steps:  # the run was already complete
            return TrainResult(xr.Dataset(), 0.0, 0.0)
    first = rows_done == 0  # the initial row is not stored yet (a resume may have it already)
    if first and store is not None:
        # a checkpoint before the first row: committed rows always have one (a resume that
        # finds rows but no checkpoint is looking at a damaged run)
        store.save_checkpoint(state, 0, 0)
    pieces: list[xr.Dataset] = []
    state = shard_seeds(state)
    t0 = time.perf_counter()
    compiled = _compiled_chunk(program, identity, (consts, state, np.bool_(first)))
    compile_seconds = tracing_seconds + time.perf_counter() - t0
    run_seconds = 0.0
    per_row = schedule.log_every
    per_chunk = schedule.chunk // per_row
    bar = tqdm(
        total=schedule.steps, initial=step, disable=not progress, unit="step", dynamic_ncols=True
    )
    try:
        with signals.catching():
            while step < schedule.steps:
                t1 = time.perf_counter()
                state, rows = jax.block_until_ready(compiled(consts, state, np.bool_(first)))
                run_seconds += time.perf_counter() - t1
                skip = 0 if first else 1  # the uncomputed first row of a later chunk
                steps = step + per_row * np.arange(skip, per_chunk + 1)
                rows = {k: np.asarray(v)[:, skip:] for k, v in rows.items()}
                bad = np.asarray(state[4])
                if np.any(bad >= 0):
                    b = int(bad[bad >= 0].min())
                    who = int(np.nonzero(bad == b)[0][0])
                    quantity = "loss" if int(np.asarray(state[5])[who]) == 0 else "parameters"
                    keep = steps < b if quantity == "loss" else steps <= b
                    keep |= steps == 0  # the initial row is kept, whatever follows it
                    kept = _to_dataset(
                        problem, {k: v[:, keep] for k, v in rows.items()}, steps[keep], seed_ids
                    )
                    pieces.append(kept)
                    if store is not None and keep.any():
                        store.append(kept, rows_per_chunk=per_chunk)
                    raise DivergenceError(b, quantity, seed_ids[who])
                chunk_ds = _to_dataset(problem, rows, steps, seed_ids)
                pieces.append(chunk_ds)
                step = int(steps[-1])
                if store is not None:
                    store.append(chunk_ds, rows_per_chunk=per_chunk)
                    rows_done += len(steps)
                    store.save_checkpoint(state, step, rows_done)
                first = False
                bar.update(schedule.chunk)
                shown = next((k for k in rows if "loss" in k and rows[k].ndim == 2), None)
                if shown is not None:
                    bar.set_postfix({shown: f"{float(np.nanmean(rows[shown][:, -1])):.4g}"})
                signum = signals.received()
                if signum is not None and step < schedule.steps:
                    raise Interrupted(signum, step)
    finally:
        bar.close()
    return TrainResult(xr.concat(pieces, dim="step"), compile_seconds, run_seconds)
