"""The run store: config/trajectory/checkpoint layout, load, truncation on resume."""

import json

import numpy as np
import pytest
import xarray as xr

from simulate.store import RunStore, git_revision, load, versions


def _chunk(steps, seeds=(0, 1)):
    steps = np.asarray(steps)
    return xr.Dataset(
        {"loss": (("seed", "step"), np.add.outer(np.asarray(seeds, float), steps))},
        coords={"seed": list(seeds), "step": steps},
    )


def test_create_append_load(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {"lr": 0.1}, {"seed_ids": [0, 1]})
    store.append(_chunk([0]))
    store.append(_chunk([10, 20]))
    ds, config = load(store.path)
    assert ds.sizes == {"seed": 2, "step": 3}
    np.testing.assert_array_equal(ds["loss"].values, _chunk([0, 10, 20])["loss"].values)
    assert config["experiment"] == "demo" and config["config"] == {"lr": 0.1}
    assert config["seeds"] == {"seed_ids": [0, 1]}
    assert set(config["versions"]) >= {"python", "jax", "jaxlib", "diffrax", "sympy", "numpy"}
    assert config["versions"] == versions()
    assert "command" in config and "git_revision" in config


def test_checkpoint_roundtrip_and_truncate(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.append(_chunk([0, 10]))
    leaves = [np.arange(3.0), np.array([7], np.uint32), np.array(2.5)]
    store.save_checkpoint(leaves, step=10, rows=2)
    store.append(_chunk([20]))  # a chunk logged after the last checkpoint (crash before it)
    got, step, rows = store.load_checkpoint()
    assert (step, rows) == (10, 2)
    for a, b in zip(got, leaves):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    store.truncate(rows)
    assert store.rows() == 2
    assert not (store.path / "checkpoint.tmp").exists()


def test_recreate_clears_a_previous_run(tmp_path):
    store = RunStore(tmp_path / "run")
    store.create("demo", {}, {})
    store.append(_chunk([0, 10]))
    store.write_summary({"status": "complete", "x": float("nan")})
    assert json.loads((store.path / "summary.json").read_text())["x"] == "nan"
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
    with pytest.raises((FileNotFoundError, OSError, ValueError, KeyError)):
        load(store.path)
