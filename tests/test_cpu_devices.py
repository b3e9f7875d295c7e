"""Seeds sharded over one JAX CPU device per core (simulate.runtime.use_cpu_cores,
simulate.train.shard_seeds): the same run on one device and on two gives the same trajectory,
and the state is split only along the seed axis, over as many devices as divide it; a program
compiled on one device is found in the persistent cache when it runs on another
(simulate.runtime.share_cache_between_devices)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from simulate.store import load

ARGS = ["--heads", "2", "--blocks", "1", "1", "--window", "6", "--steps", "400"]
ARGS += ["--chunk", "200", "--log-every", "50", "--quiet"]


def _stagewise(tmp_path, name: str, devices: int, *args: str) -> None:
    env = {**os.environ, "STAGEWISE_CPU_DEVICES": str(devices)}
    cmd = [sys.executable, "-m", "figures.cli", "run", "heads-gd", *ARGS, *args]
    subprocess.run([*cmd, "--out", str(tmp_path / name)], env=env, check=True)


def test_sharded_seeds_follow_the_one_device_trajectory(tmp_path):
    _stagewise(tmp_path, "one", 1, "--seeds", "4")
    _stagewise(tmp_path, "two", 2, "--seeds", "4")
    one, _ = load(tmp_path / "one")
    two, _ = load(tmp_path / "two")
    assert one.sizes == two.sizes
    for name in one.data_vars:  # the partitioned program may round differently, nothing more
        np.testing.assert_allclose(two[name].values, one[name].values, rtol=1e-6, atol=1e-9)


def test_state_is_split_along_the_seed_axis_only():
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from simulate.runtime import configure
        configure()
        from simulate.train import shard_seeds
        def devices(n):
            state = shard_seeds({"w": jnp.zeros((n, 3, 5)), "step": jnp.zeros(n, jnp.int32)})
            shards = state["w"].addressable_shards
            assert {s.data.shape[1:] for s in shards} == {(3, 5)}
            return len({s.device for s in shards})
        print(len(jax.devices()), devices(4), devices(3), devices(1))
        """
    )
    env = {**os.environ, "STAGEWISE_CPU_DEVICES": "2"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    )
    assert out.stdout.split() == ["2", "2", "1", "1"]


CACHED_ON = textwrap.dedent(
    """
    import json, sys
    from simulate.runtime import configure
    configure()
    import jax, jax.numpy as jnp

    def shared_program(x):
        return jnp.tanh(x @ x.T).sum(axis=0)

    device = jax.devices()[int(sys.argv[1])]
    with jax.default_device(device):
        y = jax.jit(shared_program)(jnp.arange(12.0).reshape(3, 4) / 10)
    print(json.dumps({"devices": [d.id for d in y.devices()], "y": y.tolist()}))
    """
)


def test_a_program_compiled_on_one_device_is_found_on_the_other(tmp_path):
    env = {**os.environ, "STAGEWISE_CPU_DEVICES": "2", "STAGEWISE_CACHE_DIR": str(tmp_path / "c")}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", CACHED_ON, str(device)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for device in (1, 0)
    ]
    assert [r["devices"] for r in runs] == [[1], [0]]
    assert runs[0]["y"] == runs[1]["y"]
    # the second process loaded the first one's program instead of writing its own
    assert len(list((tmp_path / "c").glob("jit_shared_program-*"))) == 1
