"""Issue 14's cases, one named test each: no run is destroyed, no option is silently dropped on
replot or resume, damaged run files and bad output paths are one line (exit 2) before anything is
computed, an interrupted figure resumes from its stored sub-runs.

Runs here are tiny heads-gd runs (``SMALL``) driven through ``figures.cli.main`` in-process."""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import figures.core.figure
import simulate.runner
from figures.cli import _figure, main
from figures.core.figure import Figure
from figures.core.options import FigureOptions
from figures.registry import all_figures
from simulate.experiments import EXPERIMENTS
from simulate.store import LOCK, RunLock, RunStore, jsonable, load, read_summary
from simulate.train import Interrupted
from theory.validation import ConfigError

TINY = ["--steps", "40", "--chunk", "10", "--log-every", "5", "--seeds", "2"]
SMALL = [*TINY, "--quiet"]


def _one_error_line(capsys, *words):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("stagewise: error: ") and "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _snapshot(path):
    return {
        p.relative_to(path): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def stored_run(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "heads-gd", *SMALL, "--out", str(out)]) == 0
    return out


def test_run_into_an_existing_run_is_refused_and_the_run_kept(stored_run, capsys):
    before = _snapshot(stored_run)
    assert main(["run", "heads-gd", *SMALL, "--out", str(stored_run)]) == 2
    _one_error_line(capsys, "out = ", "--overwrite", "--resume")
    assert _snapshot(stored_run) == before


def test_overwrite_replaces_an_existing_run(stored_run, capsys):
    assert main(["run", "heads-gd", *SMALL, "--lr", "0.5", "--out", str(stored_run)]) == 2
    capsys.readouterr()
    argv = ["run", "heads-gd", *SMALL, "--lr", "0.5", "--out", str(stored_run), "--overwrite"]
    assert main(argv) == 0
    assert RunStore(stored_run).config()["config"]["lr"] == 0.5


def test_run_into_a_foreign_non_empty_directory_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("my notes")
    assert main(["run", "heads-gd", *SMALL, "--out", str(tmp_path)]) == 2
    _one_error_line(capsys, "out = ", "--overwrite")
    assert (tmp_path / "notes.txt").read_text() == "my notes"
    assert not (tmp_path / "config.json").exists()


def test_default_run_directories_are_unique_and_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "heads-gd", *SMALL]) == 0
    assert main(["run", "heads-gd", *SMALL]) == 0
    runs = sorted((tmp_path / "runs" / "heads-gd").iterdir())
    assert len(runs) == 2
    out = capsys.readouterr().out
    for run in runs:
        assert f"run directory: {run.relative_to(tmp_path)}" in out
        assert read_summary(run)["status"] == "complete"


def test_a_live_lock_stops_a_second_writer_and_a_stale_one_is_taken_over(tmp_path, capsys):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK).write_text(f"{sleeper.pid}\n")
        with pytest.raises(ConfigError, match=f"pid {sleeper.pid} is writing it"):
            RunLock(tmp_path).__enter__()
        assert main(["run", "heads-gd", *SMALL, "--out", str(tmp_path), "--overwrite"]) == 2
        _one_error_line(capsys, "locked by another process")
    finally:
        sleeper.kill()
        sleeper.wait()
    with RunLock(tmp_path):  # its process is gone: the lock is stale
        assert (tmp_path / LOCK).read_text().strip() == str(os.getpid())
    assert not (tmp_path / LOCK).exists()


def test_sweep_into_an_existing_directory_is_refused_before_any_point(tmp_path, capsys):
    (tmp_path / "sweep.json").write_text("{}")
    argv = ["sweep", "heads-gd", *TINY, "--grid", "m=1.7,1.9", "--out", str(tmp_path)]
    assert main(argv) == 2
    _one_error_line(capsys, "--overwrite")
    assert not any(tmp_path.glob("point-*"))


def test_single_value_grid_runs_its_one_point(tmp_path, capsys):
    argv = ["sweep", "heads-gd", *TINY, "--grid", "m=1.7", "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    assert read_summary(tmp_path / "s" / "point-000")["status"] == "complete"


def test_unknown_sweep_option_is_one_line(capsys):
    assert main(["sweep", "heads-gd", "--no-such-option", "3"]) == 2
    _one_error_line(capsys, "--no-such-option")


def _no_writing(*args):
    raise AssertionError("the figure started before its output path was checked")


@pytest.mark.parametrize("where", ["existing file", "below a file"])
def test_figure_output_path_is_checked_before_compute(tmp_path, monkeypatch, capsys, where):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = blocker if where == "existing file" else blocker / "sub"
    monkeypatch.setattr(figures.core.figure, "RunLock", _no_writing)
    assert main(["figure", "incremental-ode", "--quick", "--out", str(out / "x")]) == 2
    _one_error_line(capsys, "out = ", "file")


def test_figure_into_a_finished_figure_of_the_same_options_points_to_replot(tmp_path, capsys):
    out, cfg = _stored_ode_figure(tmp_path)
    argv = ["figure", "incremental-ode", "--quick", "--out", str(out)]
    assert main(argv) == 2
    _one_error_line(capsys, "--replot", "--overwrite")


def _stored_ode_figure(tmp_path, summary_text=None):
    """A stored incremental-ode figure run of the quick setting at m = 1.7, written through the
    store as ``Figure.run`` writes one (the data are placeholders: only the checks are tested)."""
    cfg_type = all_figures()["incremental-ode"].config
    cfg = cfg_type(out=tmp_path, quick=True)
    out = tmp_path / "incremental-ode"
    store = RunStore(out)
    store.create("incremental-ode", jsonable(dataclasses.asdict(cfg)), {})
    store.write(xr.Dataset({"loss": ("step", np.zeros(3))}, coords={"step": [0, 1, 2]}))
    store.write_summary({"m": 1.7})
    if summary_text is not None:
        (out / "summary.json").write_text(summary_text)
    return out, cfg


def test_replot_with_options_that_differ_from_the_stored_run_names_them(tmp_path, capsys):
    out, cfg = _stored_ode_figure(tmp_path)
    argv = ["figure", "incremental-ode", "--replot", "--out", str(out)]
    assert main([*argv, "--m", "2.0", "--metric", "logit"]) == 2
    _one_error_line(capsys, "replot = ", f"m = {cfg.m!r} (given 2.0)", "(given 'logit')")


@pytest.mark.parametrize(
    "text,what", [("", "summary.json: empty"), ('{"m": 1.', "summary.json: not valid JSON")]
)
def test_replot_of_a_corrupt_summary_is_one_line_naming_it(tmp_path, capsys, text, what):
    out, _ = _stored_ode_figure(tmp_path, summary_text=text)
    assert main(["figure", "incremental-ode", "--replot", "--quick", "--out", str(out)]) == 2
    _one_error_line(capsys, what)


def test_resume_refuses_changed_options_by_name(stored_run, capsys):
    before = _snapshot(stored_run)
    assert main(["run", "heads-gd", "--resume", str(stored_run), "--lr", "0.5"]) == 2
    _one_error_line(capsys, "resume = ", "lr = ", "-> 0.5")
    assert main(["run", "heads-gd", "--resume", str(stored_run), "--steps", "20"]) == 2
    _one_error_line(capsys, "steps = 20", "larger than the stored run's 40")
    assert _snapshot(stored_run) == before


def test_resume_with_more_steps_trains_on_to_the_longer_run(stored_run, tmp_path):
    """40 steps, then --resume --steps 80, equals 80 steps run in one go, bit for bit."""
    assert main(["run", "heads-gd", "--resume", str(stored_run), "--steps", "80", "--quiet"]) == 0
    longer = tmp_path / "longer"
    assert main(["run", "heads-gd", *SMALL, "--steps", "80", "--out", str(longer)]) == 0
    resumed, config = load(stored_run)
    reference, _ = load(longer)
    assert config["config"]["steps"] == 80 and int(resumed["step"][-1]) == 80
    xr.testing.assert_identical(resumed, reference)


def _truncate(path):
    path.write_text(path.read_text()[: len(path.read_text()) // 2])


DAMAGE = {
    "truncated config.json": ("config.json", _truncate, "config.json: not valid JSON"),
    "keyless config.json": ("config.json", lambda p: p.write_text("{}"), "lacks the key"),
    "corrupt checkpoint meta": ("checkpoint/meta.json", _truncate, "meta.json: not valid JSON"),
    "missing checkpoint": ("checkpoint", shutil.rmtree, "checkpoint: missing"),
    "missing trajectory": ("trajectory.zarr", shutil.rmtree, "trajectory.zarr: missing"),
    "corrupt state": ("checkpoint/state.eqx", _truncate, "state.eqx: corrupt"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resume_of_a_damaged_run_is_one_line_naming_the_file(stored_run, capsys, case):
    name, damage, what = DAMAGE[case]
    if case == "corrupt state":
        (stored_run / name).write_bytes((stored_run / name).read_bytes()[:50])
    else:
        damage(stored_run / name)
    assert main(["run", "heads-gd", "--resume", str(stored_run), "--quiet"]) == 2
    _one_error_line(capsys, what)


def test_interrupted_figure_is_one_line_and_the_same_command_resumes_it(tmp_path, monkeypatch):
    """A figure with two training sub-runs gets SIGINT in its second; exit 130 with a line that
    says how to resume (the same command: figures have no --resume); the same call again reuses
    the first sub-run, resumes the second from its checkpoint and completes it, bit for bit."""
    experiment = EXPERIMENTS["heads-gd"]
    small = experiment.config(steps=40, chunk=10, log_every=5, seeds=2)

    def compute(cfg, run_dir):
        for name in ("first", "second"):
            experiment.run(small, cfg.run_output(run_dir, name))
        return xr.Dataset({n: load(run_dir / n)[0]["loss"] for n in ("first", "second")}), {}

    armed = [True]
    real_save = RunStore.save_checkpoint

    def save_then_interrupt(self, state, step, rows):
        real_save(self, state, step, rows)
        if self.path.name == "second" and step == 20 and armed[0]:
            armed[0] = False
            os.kill(os.getpid(), signal.SIGINT)  # caught by the training loop's handler

    resumes = []
    real_train = simulate.runner.train

    def recording_train(*args, **kwargs):
        resumes.append(kwargs["resume"])
        return real_train(*args, **kwargs)

    monkeypatch.setattr(RunStore, "save_checkpoint", save_then_interrupt)
    monkeypatch.setattr(simulate.runner, "train", recording_train)
    figure = Figure("demo-two-runs", "incremental", "demo", FigureOptions, compute, _plot, str)
    cfg = FigureOptions(out=tmp_path, quiet=True)
    assert _figure(figure, cfg) == 130
    run_dir = tmp_path / "demo-two-runs"
    assert read_summary(run_dir / "second")["status"] == "interrupted"
    assert _figure(figure, cfg) == 0
    assert resumes == [False, False, True]  # first reused, second resumed
    xr.testing.assert_identical(load(run_dir / "first")[0], load(run_dir / "second")[0])


def _plot(data, summary):
    import matplotlib.pyplot as plt

    return plt.figure()


def test_interrupt_message_names_the_same_command_not_resume(tmp_path, capsys, monkeypatch):
    def compute(cfg, run_dir):
        raise Interrupted(signal.SIGINT, 0)

    figure = Figure("demo-stop", "incremental", "demo", FigureOptions, compute, _plot, str)
    assert _figure(figure, FigureOptions(out=tmp_path)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run the same command again" in err[0] and "--resume" not in err[0]
