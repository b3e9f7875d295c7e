"""The run store: config/trajectory/checkpoint layout, load, truncation on resume."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.store import (
    RunFileError,
    RunStore,
    _append_rows,
    git_revision,
    load,
    read_summary,
    versions,
)


def _chunk(steps, seeds=(0, 1)):
    steps = np.asarray(steps)
    return xr.Dataset(
        {"loss": (("seed", "step"), np.add.outer(np.asarray(seeds, float), steps))},
        coords={"seed": list(seeds), "step": steps},
    )


def test_create_append_load(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {"lr": 0.1}, {"seed_ids": [0, 1]}, output={"out": store.path})
    store.append(_chunk([0]))
    store.append(_chunk([10, 20]))
    ds, config = load(store.path)
    assert ds.sizes == {"seed": 2, "step": 3}
    np.testing.assert_array_equal(ds["loss"].values, _chunk([0, 10, 20])["loss"].values)
    assert config["experiment"] == "demo" and config["config"] == {"lr": 0.1}
    assert config["seeds"] == {"seed_ids": [0, 1]}
    assert config["output"] == {"out": str(store.path)}
    assert set(config["versions"]) >= {"python", "jax", "jaxlib", "diffrax", "sympy", "numpy"}
    assert config["versions"] == versions()
    assert "command" in config and "git_revision" in config


def test_checkpoint_roundtrip_and_truncate(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.append(_chunk([0, 10]))
    state = {
        "params": (np.arange(3.0), jnp.asarray([[1.5, -2.0]])),
        "key": np.array([7, 9], np.uint32),
        "step": jnp.asarray(2, jnp.int32),
        "scale": np.array(2.5),
    }
    store.save_checkpoint(state, step=10, rows=2)
    assert sorted(p.name for p in store.checkpoint_path.iterdir()) == ["meta.json", "state.eqx"]
    store.append(_chunk([20]))  # a chunk logged after the last checkpoint (crash before it)
    got, step, rows = store.load_checkpoint(like=state)
    assert (step, rows) == (10, 2)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(state)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(state)):
        assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()  # bit for bit
    # without a template: every leaf in tree order, as numpy arrays
    leaves, step, rows = store.load_checkpoint()
    assert (step, rows) == (10, 2)
    want = jax.tree_util.tree_leaves(state)
    assert len(leaves) == len(want)
    for a, b in zip(leaves, want):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    store.truncate(rows)
    assert store.rows() == 2
    assert not (store.path / "checkpoint.tmp").exists()


def test_checkpoint_is_checked_against_the_template(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    state = (np.zeros(3), np.zeros(2, np.int32))
    store.save_checkpoint(state, step=5, rows=1)
    # a checkpoint that does not fit the state is a damaged run: one line naming state.eqx
    with pytest.raises(RunFileError, match=r"state\.eqx: corrupt .*shape"):
        store.load_checkpoint(like=(np.zeros(4), np.zeros(2, np.int32)))
    with pytest.raises(RunFileError, match=r"state\.eqx: corrupt .*dtype"):
        store.load_checkpoint(like=(np.zeros(3), np.zeros(2, np.int64)))
    with pytest.raises(RunFileError, match="more leaves"):
        store.load_checkpoint(like=(np.zeros(3),))
    shapes = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
    got, _, _ = store.load_checkpoint(like=shapes)
    assert all(isinstance(x, jax.Array) for x in got)


def test_checkpoint_interrupted_between_the_renames(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.save_checkpoint([np.arange(2.0)], step=1, rows=1)
    store.save_checkpoint([np.arange(2.0) + 1], step=2, rows=2)
    assert not (store.path / "checkpoint.old").exists()
    # the state an interruption after "checkpoint -> checkpoint.old" leaves behind
    (store.path / "checkpoint").rename(store.path / "checkpoint.old")
    got, step, rows = store.load_checkpoint(like=[np.zeros(2)])
    assert (step, rows) == (2, 2)
    np.testing.assert_array_equal(got[0], [1.0, 2.0])


def test_recreate_clears_a_previous_run(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.append(_chunk([0, 10]))
    store.write_summary({"status": "complete", "x": float("nan")})
    assert read_summary(store.path)["x"] == "nan"
    store.create("demo", {}, {})
    assert store.rows() == 0 and not (store.path / "summary.json").exists()


def test_git_revision_is_recorded():
    rev = git_revision()
    assert rev is None or len(rev.split("+")[0]) == 40


@pytest.mark.parametrize("missing", ["config.json", "trajectory.zarr"])
def test_load_needs_the_run_files(tmp_path, missing):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.append(_chunk([0]))
    target = store.path / missing
    if target.is_dir():
        import shutil

        shutil.rmtree(target)
    else:
        target.unlink()
    with pytest.raises(RunFileError, match=rf"{missing}: missing"):
        load(store.path)


def test_a_whole_trajectory_without_steps_loads_back(tmp_path):
    """``write`` (a figure's ODE data on a time grid) commits the whole dataset, not 0 rows."""
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    data = xr.Dataset({"loss": ("time", np.linspace(1.0, 0.0, 5))}, coords={"time": np.arange(5)})
    store.write(data)
    xr.testing.assert_identical(load(store.path)[0], data)


def _typed_chunk(start: int, floats, ints, flags) -> xr.Dataset:
    """Three rows of every dtype a trainer logs, along ``step`` in either axis position, with a
    coordinate along ``step`` and a variable without it."""
    return xr.Dataset(
        {
            "loss": (("seed", "step"), np.asarray(floats, np.float32).reshape(2, 3)),
            "norms": (("step", "seed"), np.asarray(floats, np.float64).reshape(3, 2)),
            "events": (("seed", "step"), np.asarray(ints, np.int64).reshape(2, 3)),
            "counts": (("seed", "step"), np.abs(np.asarray(ints)).astype(np.uint32).reshape(2, 3)),
            "done": (("seed", "step"), np.asarray(flags, bool).reshape(2, 3)),
            "scale": ("seed", np.arange(2.0)),
        },
        coords={
            "seed": [4, 5],
            "step": start + np.arange(3),
            "time": ("step", start + 0.5 * np.arange(3)),
        },
    )


def _files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(width=32, allow_infinity=True), min_size=6, max_size=6),
        min_size=3,
        max_size=3,
    ),
    st.lists(
        st.lists(st.integers(-(2**40), 2**40), min_size=6, max_size=6), min_size=3, max_size=3
    ),
    st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=3, max_size=3),
)
def test_appended_rows_are_the_bytes_xarray_appends(tmp_path_factory, floats, ints, flags):
    """``RunStore.append`` writes later chunks itself (all arrays in one go): the files on disk
    are those of xarray's ``to_zarr(append_dim="step")``, byte for byte."""
    chunks = [_typed_chunk(3 * i, f, n, b) for i, (f, n, b) in enumerate(zip(floats, ints, flags))]
    ours, theirs = (RunStore(tmp_path_factory.mktemp(name)) for name in ("ours", "xarray"))
    for store in (ours, theirs):
        store.create("demo", {}, {})
        store.append(chunks[0], rows_per_chunk=2)
    for chunk in chunks[1:]:
        assert _append_rows(ours.trajectory_path, chunk)
        chunk.to_zarr(theirs.trajectory_path, append_dim="step", consolidated=False)
    assert _files(ours.trajectory_path) == _files(theirs.trajectory_path)


def test_a_chunk_that_does_not_match_the_stored_arrays_is_left_to_xarray(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    first = _typed_chunk(0, np.arange(6.0), np.arange(6), np.ones(6))
    store.append(first)
    extra = _typed_chunk(3, np.arange(6.0), np.arange(6), np.ones(6))
    extra["new"] = extra["loss"] * 2
    retyped = _typed_chunk(3, np.arange(6.0), np.arange(6), np.ones(6))
    retyped["loss"] = retyped["loss"].astype(np.float64)
    for chunk in (extra, retyped, first.drop_vars("done")):
        assert not _append_rows(store.trajectory_path, chunk)
    assert load(store.path)[0].sizes["step"] == 3  # nothing was written
    store.append(retyped)  # xarray appends it, casting to the stored dtype
    np.testing.assert_array_equal(load(store.path)[0]["loss"].values[:, 3:], retyped["loss"].values)
