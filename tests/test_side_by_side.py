"""A figure's runs side by side, one JAX CPU device each (simulate.side_by_side): every run gets a
device of its own and the trajectory it gets alone; a run that needs others starts once they have
finished while independent runs fill the devices; SIGINT stops every running run after its chunk
in flight, leaves it resumable, and starts no further run."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from simulate.side_by_side import After, run_side_by_side
from simulate.store import RunStore, load, read_summary
from theory.validation import ConfigError

SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    from functools import partial
    from pathlib import Path
    from simulate.runtime import configure
    configure()
    from simulate import side_by_side
    from simulate.incremental.head_training import HeadTrainConfig, run
    from simulate.runner import RunOutput

    out, steps, jobs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    def job(i):
        seen = side_by_side.devices()
        cfg = HeadTrainConfig(heads=2, blocks=(1, 1), window=6, m=1.5 + 0.1 * i, lr=0.01,
                              steps=steps, chunk=200, log_every=50, seeds=2)
        run(cfg, RunOutput(out=out / f"run{i}", quiet=True, reuse=True))
        return [d.id for d in seen]

    seen = side_by_side.run_side_by_side([partial(job, i) for i in range(jobs)])
    print(json.dumps(seen), flush=True)
    """
)


def _start(tmp_path, out, devices, steps, jobs):
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {**os.environ, "STAGEWISE_CPU_DEVICES": str(devices)}
    cmd = [sys.executable, str(tmp_path / "script.py"), str(out), str(steps), str(jobs)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_each_run_has_its_own_device_and_its_trajectory_alone(tmp_path):
    together = _start(tmp_path, tmp_path / "two", 2, 400, 2)
    stdout, stderr = together.communicate(timeout=300)
    assert together.returncode == 0, stderr
    assert sorted(json.loads(stdout), key=lambda ids: ids[0]) == [[0], [1]]
    alone = _start(tmp_path, tmp_path / "one", 1, 400, 2)
    stdout, stderr = alone.communicate(timeout=300)
    assert alone.returncode == 0, stderr
    assert json.loads(stdout) == [[0], [0]]
    for i in range(2):
        a, _ = load(tmp_path / "two" / f"run{i}")
        b, _ = load(tmp_path / "one" / f"run{i}")
        for name in a.data_vars:  # one device each: the same program as alone, bit for bit
            np.testing.assert_array_equal(a[name].values, b[name].values)


def test_sigint_stops_every_running_run_resumably_and_starts_no_other(tmp_path):
    out = tmp_path / "runs"
    proc = _start(tmp_path, out, 2, 200_000, 3)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # both running runs have committed a chunk
        done = [RunStore(out / f"run{i}") for i in range(2)]
        if all(s.path.exists() and s.has_checkpoint() and s.rows() > 1 for s in done):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Interrupted" in stderr
    for i in range(2):
        assert read_summary(out / f"run{i}")["status"] == "interrupted"
    assert not (out / "run2").exists()  # the third run never started


AFTER_SCRIPT = textwrap.dedent(
    """
    import json
    import threading
    import time
    from simulate.runtime import configure
    configure()
    from simulate.side_by_side import After, devices, run_side_by_side

    log, lock = {}, threading.Lock()

    def job(name, seconds, *needed):
        start = time.monotonic()
        time.sleep(seconds)
        with lock:
            log[name] = (start, time.monotonic(), devices()[0].id)
        return [name, *needed]

    results = run_side_by_side(
        [
            lambda: job("slow", 1.5),
            lambda: job("quick", 0.0),
            After((0, 1), lambda *done: job("after", 0.0, *done)),
            lambda: job("filler", 0.0),
        ]
    )
    print(json.dumps({"results": results, "log": log}), flush=True)
    """
)


def test_a_job_that_needs_others_waits_for_them_while_others_fill_the_devices(tmp_path):
    (tmp_path / "after.py").write_text(AFTER_SCRIPT)
    env = {**os.environ, "STAGEWISE_CPU_DEVICES": "2"}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "after.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["results"] == [["slow"], ["quick"], ["after", ["slow"], ["quick"]], ["filler"]]
    log = out["log"]
    assert log["after"][0] >= max(log["slow"][1], log["quick"][1])
    # the filler, listed after the waiting job, took the device the quick job freed
    assert log["filler"][0] < log["slow"][1]
    assert {log["slow"][2], log["filler"][2]} == {0, 1}


def test_one_device_runs_the_jobs_in_order_with_their_needs():
    results = run_side_by_side([lambda: 2, lambda: 3, After((0, 1), lambda a, b: a * b)])
    assert results == [2, 3, 6]


def test_needs_must_name_earlier_jobs():
    with pytest.raises(ConfigError, match="earlier jobs"):
        run_side_by_side([After((1,), lambda x: x), lambda: 1])


def test_pinned_gives_its_device_and_restores_the_devices_it_found():
    # the head ODE pins its crossing solves inside a run that may itself be pinned to a device;
    # two CPU devices (the session's workers have one), so the outer pin is not all devices
    script = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_num_cpu_devices", 2)
        from simulate.side_by_side import devices, pinned
        outer = devices()
        assert len(outer) == 2
        with pinned(outer[0]):
            with pinned(outer[1]):
                assert devices() == [outer[1]]
            assert devices() == [outer[0]], devices()
        assert devices() == outer
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
