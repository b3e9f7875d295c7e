"""``stagewise run``: interruption and resume, bad input, the persistent compilation cache."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from figures.cli import main
from simulate.store import load, read_summary

# 10 chunks of 2000 steps, about 0.3 s each here: a signal sent once the first checkpoint is
# written lands seconds before the run would end
STEPS = 20000
ARGS = ["--steps", str(STEPS), "--chunk", "2000", "--log-every", "200", "--seeds", "2", "--quiet"]


def _cli(args, env, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "figures.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "STAGEWISE_CACHE_DIR": str(tmp_path_factory.mktemp("jax-cache"))}


def _wait_for_checkpoint(run_dir, timeout=120):
    meta = run_dir / "checkpoint" / "meta.json"
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if json.loads(meta.read_text())["step"] > 0:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise TimeoutError("no checkpoint written")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, env):
    """The run of ``ARGS`` without interruption (one for both signals)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "full"
    assert _cli(["run", "heads-gd", *ARGS, "--out", str(out)], env).wait(timeout=300) == 0
    return out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_is_readable_and_resumes_to_the_uninterrupted_values(
    tmp_path, env, signum, uninterrupted
):
    cut = tmp_path / "cut"
    proc = _cli(["run", "heads-gd", *ARGS, "--out", str(cut)], env)
    _wait_for_checkpoint(cut)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum
    assert err.strip().splitlines()[-1].startswith(f"stagewise: interrupted by {signum.name}")
    partial, config = load(cut)
    summary = read_summary(cut)
    assert summary["status"] == "interrupted"
    steps = partial["step"].values
    assert 0 < steps[-1] < STEPS and steps[-1] == summary["steps_logged"]
    assert config["config"]["steps"] == STEPS

    resumed = _cli(["run", "heads-gd", "--resume", str(cut), "--quiet"], env)
    assert resumed.wait(timeout=300) == 0
    a, _ = load(cut)
    b, _ = load(uninterrupted)
    assert a.sizes == b.sizes
    for v in b.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values)
    assert read_summary(cut)["status"] == "complete"


BAD = [
    (["run", "heads-gd", "--lr", "-0.1"], "lr"),
    (["run", "heads-gd", "--lr", "nan"], "lr"),
    (["run", "heads-gd", "--steps", "0"], "steps"),
    (["run", "heads-gd", "--steps", "1500", "--chunk", "1000"], "steps"),
    (["run", "heads-gd", "--chunk", "150", "--log-every", "100"], "chunk"),
    (["run", "heads-gd", "--log-every", "0"], "log_every"),
    (["run", "heads-gd", "--seeds", "0"], "seeds"),
    (["run", "heads-gd", "--seed", "-3"], "seed"),
    (["run", "heads-gd", "--eps", "-1e-3"], "eps"),
    (["run", "heads-gd", "--optimizer", "lbfgs"], "optimizer"),
    (["run", "heads-gd", "--metric", "euclid"], "metric"),
    (["run", "heads-gd", "--m", "0"], "m"),
    (["run", "heads-gd", "--heads", "0"], "heads"),
    (["run", "heads-gd", "--blocks", "30", "30"], "blocks"),
    (["run", "heads-gd", "--window", "1"], "window"),
    (["run", "heads-gd", "--steps", "many"], "steps"),
    (["run", "heads-gd", "--no-such-flag", "1"], "arguments"),
    (["run", "heads-gd", "--resume", "/nonexistent/run"], "resume"),
    (["run", "no-such-experiment"], "experiment"),
]


@pytest.mark.parametrize("argv,field", BAD)
def test_bad_input_is_one_line_and_exit_2(argv, field, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stagewise: error: {field} = ")
    assert "Traceback" not in captured.err


def test_persistent_compilation_cache_is_used_by_a_second_call(tmp_path):
    """The first call writes its programs to the cache; the same call again compiles nothing new
    (every program is a cache hit, so no entry is added). Speed is the benchmark's business."""
    cache = tmp_path / "cache"
    env = {**os.environ, "STAGEWISE_CACHE_DIR": str(cache)}
    small = ["run", "heads-gd", "--steps", "2000", "--chunk", "1000", "--quiet"]
    entries = []
    for name in ("first", "second"):
        proc = _cli([*small, "--out", str(tmp_path / name)], env)
        assert proc.wait(timeout=300) == 0
        assert read_summary(tmp_path / name)["status"] == "complete"
        entries.append(sorted(p.name for p in cache.rglob("*") if p.is_file()))
    assert entries[0], "the first call cached no program"
    assert entries[1] == entries[0], "the second call compiled a program the cache should hold"


def test_run_prints_the_success_count_of_the_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "clustering-head",
                "--epochs",
                "2",
                "--epochs-per-chunk",
                "2",
                "--hessian-iterations",
                "0",
                "--seeds",
                "2",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    flags = read_summary(out)["success_per_seed"]
    assert f"success: {sum(flags)}/2 seeds (final test accuracy > 0.98)" in capsys.readouterr().out


def test_runs_without_a_success_flag_print_no_success_line(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "heads-gd",
                "--steps",
                "200",
                "--chunk",
                "100",
                "--log-every",
                "100",
                "--quiet",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    assert "success:" not in capsys.readouterr().out
