"""The chunked trainer through the run store: determinism, resume, divergence, failures,
progress, and the heads-gd experiment's stage summary."""

import re

import jax
import numpy as np
import optax
import pytest

from simulate.incremental.head_training import HeadTrainConfig, problem, run
from simulate.runner import RunOutput
from simulate.store import RunStore, load, read_summary
from simulate.train import Problem, Schedule, _chunk_program, seed_streams, step_data, train
from tests.checkpoints import losing_checkpoint

SMALL = {
    "heads": 2,
    "blocks": (1, 1),
    "window": 6,
    "m": 1.7,
    "lr": 0.01,
    "steps": 600,
    "chunk": 200,
    "log_every": 50,
    "seeds": 2,
}


def cfg_(**kw):
    return HeadTrainConfig(**{**SMALL, **kw})


def out_(tmp_path, name, **kw):
    """A quiet run into ``tmp_path / name``."""
    return RunOutput(**{"out": tmp_path / name, "quiet": True, **kw})


def test_two_runs_with_one_seed_are_identical(tmp_path):
    a, _ = load(run(cfg_(seeds=1), out_(tmp_path, "a")))
    b, _ = load(run(cfg_(seeds=1), out_(tmp_path, "b")))
    for v in a.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values)
    c, _ = load(run(cfg_(seeds=1, seed=1), out_(tmp_path, "c")))
    assert not np.array_equal(a["value"].values, c["value"].values)


def test_seed_streams_are_separate_and_recorded(tmp_path):
    streams = seed_streams([0, 1])
    flat = [np.asarray(streams[k][i]).tobytes() for k in streams for i in range(2)]
    assert len(set(flat)) == len(flat)
    path = run(cfg_(), out_(tmp_path, "s"))
    config = RunStore(path).config()
    assert config["seeds"]["seed_ids"] == [0, 1]
    assert set(config["seeds"]["streams"]) == {"init", "noise", "data"}
    # the experiment's config and where it was written are stored apart
    assert "out" not in config["config"] and config["config"]["lr"] == SMALL["lr"]
    assert config["output"]["out"] == str(tmp_path / "s") and config["output"]["quiet"] is True


def test_trajectory_has_named_dims_and_a_row_every_log_every(tmp_path):
    ds, config = load(run(cfg_(), out_(tmp_path, "d")))
    assert ds["block_mass"].dims == ("seed", "step", "head", "block")
    np.testing.assert_array_equal(ds["step"].values, np.arange(0, 601, 50))
    assert config["config"]["lr"] == SMALL["lr"]
    np.testing.assert_allclose(ds["block_mass"].sum("block").values <= 1 + 1e-12, True)


def test_resume_after_a_crash_between_append_and_checkpoint(tmp_path, monkeypatch):
    full, _ = load(run(cfg_(), out_(tmp_path, "full")))
    # checkpoints at step 0 (before row 0), 200, then 400 is lost
    with losing_checkpoint(monkeypatch, 3), pytest.raises(OSError):
        run(cfg_(), out_(tmp_path, "crash"))
    crashed, _ = load(tmp_path / "crash")  # readable after the exception
    assert crashed.sizes["step"] == 9  # rows 0..400: the failed chunk's rows are on disk
    _, step, rows = RunStore(tmp_path / "crash").load_checkpoint()
    assert (step, rows) == (200, 5)
    summary = read_summary(tmp_path / "crash")
    assert summary["status"] == "failed"
    ds, _ = load(run(cfg_(), out_(tmp_path, "crash", resume=tmp_path / "crash")))
    for v in full.data_vars:
        np.testing.assert_array_equal(ds[v].values, full[v].values)
    # the resumed run's final state is the uninterrupted run's, bit for bit
    done, step, _ = RunStore(tmp_path / "crash").load_checkpoint()
    want, want_step, _ = RunStore(tmp_path / "full").load_checkpoint()
    assert step == want_step == SMALL["steps"] and len(done) == len(want)
    for a, b in zip(done, want):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_resuming_a_complete_run_changes_nothing(tmp_path):
    path = run(cfg_(), out_(tmp_path, "done"))
    before, _ = load(path)
    assert run(cfg_(), out_(tmp_path, "done", resume=path)) == path
    after, _ = load(path)
    for v in before.data_vars:
        np.testing.assert_array_equal(before[v].values, after[v].values)
    assert read_summary(path)["status"] == "complete"


def _first_nonfinite_step(cfg):
    """Independent replay of the same updates, one step at a time, without the trainer."""
    prob, opt = problem(cfg), optax.sgd(cfg.lr)
    keys = seed_streams(cfg.seed_ids)
    first = None
    for i in range(cfg.seeds):
        params = prob.init(keys["init"][i], keys["noise"][i])
        state, key = opt.init(params), keys["data"][i]
        for step in range(cfg.steps):
            key, sub = jax.random.split(key)
            loss, g = prob.loss_and_direction(params, sub)
            if not np.isfinite(float(loss)):
                first = step if first is None else min(first, step)
                break
            updates, state = opt.update(g, state, params)
            params = optax.apply_updates(params, updates)
    return first


def test_divergence_stops_at_the_first_nonfinite_step_and_keeps_the_data(tmp_path):
    from simulate.train import DivergenceError

    cfg = cfg_(metric="logit", lr=50.0, steps=400, chunk=50, log_every=10)
    output = out_(tmp_path, "div")
    expected = _first_nonfinite_step(cfg)
    assert expected is not None and cfg.chunk < expected < cfg.steps  # in a later chunk
    with pytest.raises(DivergenceError) as info:
        run(cfg, output)
    assert info.value.step == expected and info.value.quantity == "loss"
    ds, _ = load(output.out)
    assert ds["step"].values[-1] < expected
    assert ds["step"].values[-1] >= expected - cfg.log_every
    assert np.all(np.isfinite(ds["loss"].values))
    summary = read_summary(output.out)
    assert summary["status"] == "diverged" and str(expected) in summary["error"]


def test_progress_bar_shows_steps_and_loss(tmp_path, capsys):
    run(cfg_(), out_(tmp_path, "p", quiet=False))
    err = capsys.readouterr().err
    assert "600/600" in err and "loss=" in err


def test_stage_summary_beside_the_theory(tmp_path):
    cfg = HeadTrainConfig(
        heads=3,
        window=40,
        m=1.7,
        steps=20000,
        chunk=5000,
        log_every=100,
        seeds=2,
    )
    summary = read_summary(run(cfg, out_(tmp_path, "stages")))
    first, second = summary["stages"][:2]
    assert first["measured_over_predicted"] == pytest.approx(1.0, abs=0.05)
    assert 0.8 < second["measured_over_predicted"] < 1.25
    ds, _ = load(tmp_path / "stages")
    level = summary["plateau_levels_derived"][2]
    assert float(ds["loss"].isel(step=-1).mean()) == pytest.approx(level, rel=1e-2)


def test_store_off_writes_nothing(tmp_path):
    result = run(cfg_(), out_(tmp_path, "none", store=False))
    assert not (tmp_path / "none").exists()
    assert result.dataset.sizes["step"] == SMALL["steps"] // SMALL["log_every"] + 1


def _data_problem(target):
    """A least-squares problem closing over its data set ``target``, as every experiment does."""
    target = jax.numpy.asarray(target)

    def loss_and_direction(w, key):
        del key
        return jax.value_and_grad(lambda w: ((w.sum() - target) ** 2).mean())(w)

    return Problem(
        lambda k, n: jax.numpy.zeros(3),
        loss_and_direction,
        lambda w: {"fit": (w.sum() - target).mean()},
        {"fit": ()},
    )


def test_problems_differing_only_in_their_data_share_one_program(tmp_path):
    """The data a problem closes over is an argument of the compiled chunk, not a constant in it:
    a sweep's runs (seeds' data sets, teachers) reuse one compiled program and cache entry."""
    schedule = Schedule(steps=20, log_every=5, chunk=20)
    rng = np.random.default_rng(0)
    texts, identities, fits = [], [], []
    for target in (rng.normal(size=500), rng.normal(size=500) + 3.0):
        problem_ = _data_problem(target)
        state = (
            jax.numpy.zeros((1, 3)),
            jax.vmap(optax.sgd(0.1).init)(jax.numpy.zeros((1, 3))),
            seed_streams([0])["data"],
            *(jax.numpy.zeros(1, jax.numpy.int32) for _ in range(3)),
        )
        program, consts, identity = _chunk_program(problem_, optax.sgd(0.1), schedule, state)
        texts.append(program.lower(consts, state, True).as_text())
        identities.append(identity)
        result = train(problem_, optax.sgd(0.1), schedule, [0], None, progress=False)
        fits.append(float(result.dataset["fit"].values[0, -1]))
        # gradient descent on the sum w_1 + w_2 + w_3 converges to the data's mean
        assert abs(fits[-1]) < 1e-3 * max(1.0, abs(target.mean()))
    assert texts[0] == texts[1]
    assert identities[0] == identities[1]  # one entry of the program store too
    # the data set as a literal, as a program closing over it is lowered
    literal = re.compile(r"constant dense<[^>]*> : tensor<500xf64>")
    closing_over = jax.jit(lambda w: _data_problem(target).loss_and_direction(w, None))
    assert literal.search(closing_over.lower(jax.numpy.zeros(3)).as_text())
    assert not literal.search(texts[0])


def _interval_problem(length):
    """The parameters count the data they are given: each step adds its slice of the interval's
    draw, a permutation of 0..length-1 from the data key (a shuffled epoch), to ``w[0]``, one to
    ``w[1]``, and the slice times its place in the interval to ``w[2]`` (which shows the order)."""

    def loss_and_direction(w, item):
        item, place = item.astype(w.dtype), jax.numpy.mod(w[1], length)
        return w[0], -jax.numpy.stack([item, jax.numpy.ones_like(item), item * place])

    return Problem(
        lambda k, n: jax.numpy.zeros(3),
        loss_and_direction,
        lambda w: {"total": w[0], "steps": w[1], "ordered": w[2]},
        {"total": (), "steps": (), "ordered": ()},
        draw_interval=lambda key: jax.random.permutation(key, length),
    )


def test_an_interval_draw_gives_each_step_its_slice_once_per_interval():
    length, intervals = 6, 4
    schedule = Schedule(steps=length * intervals, log_every=length, chunk=2 * length)
    result = train(
        _interval_problem(length), optax.sgd(1.0), schedule, [0, 1], None, progress=False
    )
    per_interval = length * (length - 1) / 2  # every item of 0..length-1 once per interval
    expected = per_interval * np.arange(intervals + 1)
    orders = []
    for seed in range(2):
        np.testing.assert_array_equal(result.dataset["total"].values[seed], expected)
        np.testing.assert_array_equal(
            result.dataset["steps"].values[seed], length * np.arange(intervals + 1)
        )
        orders.extend(np.diff(result.dataset["ordered"].values[seed]).tolist())
    # each interval (and each seed) draws its own order: sum_i perm[i] * i differs between them
    assert len(set(orders)) > intervals


def test_an_interval_draw_of_the_wrong_length_is_refused():
    schedule = Schedule(steps=12, log_every=4, chunk=12)
    with pytest.raises(ValueError, match="expected the 4 steps"):
        train(_interval_problem(6), optax.sgd(1.0), schedule, [0], None, progress=False)


def _step_problem(epoch):
    """The parameters count what each step is given: ``draw_step`` hands step t the pair (t, a
    uniform number drawn from the key) and keeps the key for an epoch's steps; ``w[0]`` sums the
    steps, ``w[1]`` the numbers."""

    def draw_step(key, step):
        last = jax.numpy.mod(step, epoch) == epoch - 1
        next_key = jax.numpy.where(last, jax.random.split(key)[0], key)
        return next_key, (step, jax.random.uniform(key, dtype=jax.numpy.float64))

    def loss_and_direction(w, data):
        step, number = data
        return w[0], -jax.numpy.stack([step.astype(w.dtype), number])

    return Problem(
        lambda k, n: jax.numpy.zeros(2),
        loss_and_direction,
        lambda w: {"steps": w[0], "numbers": w[1]},
        {"steps": (), "numbers": ()},
        draw_step=draw_step,
    )


def test_a_step_draw_sees_the_global_step_across_chunks_and_carries_its_key():
    """Epochs of 3 steps, logged every 5 and chunked by 10: each step gets its own index, chunk
    after chunk, and the data key is the one ``draw_step`` returned (``step_data`` replays it)."""
    epoch, schedule = 3, Schedule(steps=30, log_every=5, chunk=10)
    problem_ = _step_problem(epoch)
    result = train(problem_, optax.sgd(1.0), schedule, [0, 1], None, progress=False)
    steps = result.dataset["step"].values
    for seed in range(2):
        np.testing.assert_array_equal(result.dataset["steps"].values[seed], steps * (steps - 1) / 2)
        key, numbers = seed_streams([seed])["data"][0], []
        for t in range(30):
            key, (_, number) = step_data(problem_, key, t)
            numbers.append(float(number))
        per_epoch = np.reshape(numbers, (-1, epoch))
        assert np.all(per_epoch == per_epoch[:, :1])  # one key for an epoch's steps
        assert len(set(per_epoch[:, 0])) == 30 // epoch  # a new one for every epoch
        np.testing.assert_allclose(
            result.dataset["numbers"].values[seed], np.concatenate([[0], np.cumsum(numbers)])[steps]
        )


def test_a_problem_drawing_per_interval_and_per_step_is_refused():
    with pytest.raises(ValueError, match="per interval or per step"):
        Problem(
            lambda k, n: jax.numpy.zeros(1),
            lambda w, d: (w[0], w),
            lambda w: {},
            {},
            draw_interval=lambda key: key,
            draw_step=lambda key, step: (key, step),
        )
