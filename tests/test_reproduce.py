"""``stagewise reproduce`` and ``stagewise report DIR`` (issue 16, items 1 and 3): both executors
give the same summaries, an interrupted reproduction resumes without recomputing what finished,
a failed figure is recorded while the others run, bad choices are one line and exit code 2.

The reproductions run two real figures of two papers (``mean-field-threshold``,
``emergence-linear-map``) at settings below their --quick ones, through reproduce's Python-only
``overrides``: a --quick figure takes one to two minutes on the 2 shared cores of CI, these take
seconds (each job still pays a worker process and its imports, so those tests are marked slow).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from figures.cli import main
from figures.reproduce import RECORD, reproduce
from figures.reproduce_progress import eta_seconds
from simulate.emergence.training import EmergenceConfig
from simulate.mean_field.threshold import ThresholdSetting

THRESHOLD, LINEAR_MAP = "mean-field-threshold", "emergence-linear-map"
TINY_TRAIN = EmergenceConfig(
    S=4,
    s=1,
    heads=2,
    head_dim=4,
    steps=100,
    log_every=50,
    chunk=100,
    seeds=1,
    warmup=10,
    batch=16,
    eval_batch=32,
)
TINY = {
    THRESHOLD: {
        "setting": ThresholdSetting(
            betas=(1.0,),
            tau_ratios=(0.6, 0.9, 1.1, 1.5),
            tokens=64,
            depth_units=10.0,
            dt_units=0.1,
            rate_tokens=64,
            rate_seeds=2,
        )
    },
    LINEAR_MAP: {"train": TINY_TRAIN},
}


def _reproduce(out: Path, overrides=TINY, **options) -> int:
    return reproduce(
        quick=True,
        only=tuple(overrides),
        out=out,
        workers=2,
        quiet=True,
        overrides=overrides,
        **options,
    )


def _record(out: Path) -> dict:
    return json.loads((out / RECORD).read_text())


def _numbers(summary, path: str = "") -> dict[str, float]:
    """Every number of a summary by its path, without the timings (they differ run to run)."""
    if isinstance(summary, dict):
        items = [(k, v) for k, v in summary.items() if "seconds" not in k]
    elif isinstance(summary, list):
        items = list(enumerate(summary))
    elif isinstance(summary, (int, float)) or summary in ("nan", "inf", "-inf"):
        return {path: float(summary)}
    else:
        return {}
    return {p: x for k, v in items for p, x in _numbers(v, f"{path}/{k}").items()}


def _summary(out: Path, figure_id: str) -> dict:
    return json.loads((out / figure_id / "summary.json").read_text())


def _check_report(out: Path) -> None:
    assert (out / "index.html").stat().st_size > 0 and (out / "REPORT.md").stat().st_size > 0


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reproduce") / "local"
    assert _reproduce(out, executor_name="local") == 0
    return out


@pytest.mark.slow
def test_local_and_ray_executors_give_the_same_summaries(local_run, tmp_path):
    out = tmp_path / "ray"
    assert _reproduce(out, executor_name="ray") == 0
    for run, executor in ((local_run, "local"), (out, "ray")):
        record = _record(run)
        assert record["executor"] == executor and record["quick"] is True
        assert {k: v["status"] for k, v in record["figures"].items()} == dict.fromkeys(
            TINY, "complete"
        )
        _check_report(run)
    for figure_id in TINY:
        local, ray = _numbers(_summary(local_run, figure_id)), _numbers(_summary(out, figure_id))
        assert local and local.keys() == ray.keys(), figure_id
        for key, x in local.items():
            assert x == ray[key] or (math.isnan(x) and math.isnan(ray[key])), (figure_id, key)


@pytest.mark.slow
def test_interrupted_reproduction_resumes_without_recomputing_finished_work(local_run, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(local_run, out)
    earlier = _record(out)["figures"]
    # LINEAR_MAP cut short after its training sub-run finished, THRESHOLD complete
    (out / LINEAR_MAP / "summary.json").unlink()
    kept = {
        path: path.stat().st_mtime_ns
        for path in (
            out / THRESHOLD / "summary.json",
            out / LINEAR_MAP / "training" / "summary.json",
        )
    }

    assert _reproduce(out, overrides={LINEAR_MAP: TINY[LINEAR_MAP]}) == 0
    record = _record(out)["figures"]
    assert record[LINEAR_MAP]["status"] == "complete"
    assert record[THRESHOLD] == earlier[THRESHOLD]  # not chosen this time: its record is kept
    assert (out / LINEAR_MAP / "summary.json").exists()

    assert _reproduce(out) == 0
    record = _record(out)["figures"]
    assert {k: v["status"] for k, v in record.items()} == dict.fromkeys(TINY, "reused")
    assert {path: path.stat().st_mtime_ns for path in kept} == kept  # nothing recomputed
    _check_report(out)


@pytest.mark.slow
def test_failed_figure_is_recorded_and_the_others_still_run(tmp_path):
    # a real failure: the training diverges (the first non-finite parameter stops it)
    diverging = {**TINY, LINEAR_MAP: {"train": dataclasses.replace(TINY_TRAIN, lr=1e30)}}
    assert _reproduce(tmp_path, overrides=diverging) == 1
    record = _record(tmp_path)["figures"]
    assert record[THRESHOLD]["status"] == "complete"
    failed = record[LINEAR_MAP]
    assert failed["status"] == "failed" and failed["wall_seconds"] is not None
    lines = failed["error"].splitlines()
    assert lines[0].startswith("DivergenceError: diverged at step")
    assert any(line.strip().startswith("File ") for line in lines[1:])  # the traceback's tail
    assert (tmp_path / failed["log"]).exists()
    _check_report(tmp_path)


@pytest.mark.slow
def test_report_command_rebuilds_the_report_from_stored_runs(local_run, capsys):
    summaries = {f: (local_run / f / "summary.json").stat().st_mtime_ns for f in TINY}
    (local_run / "index.html").unlink()
    assert main(["report", str(local_run)]) == 0
    assert capsys.readouterr().out.split() == [
        "wrote",
        f"{local_run / 'index.html'},",
        str(local_run / "REPORT.md"),
    ]
    _check_report(local_run)
    assert {f: (local_run / f / "summary.json").stat().st_mtime_ns for f in TINY} == summaries


def test_figure_that_cannot_start_is_recorded_failed_exit_1(tmp_path, capsys):
    damaged = tmp_path / THRESHOLD / "config.json"
    damaged.parent.mkdir()
    damaged.write_text("{")
    argv = ["reproduce", "--only", THRESHOLD, "--out", str(tmp_path), "--quick", "--quiet"]
    assert main(argv) == 1
    entry = _record(tmp_path)["figures"][THRESHOLD]
    assert entry["status"] == "failed" and "--force" in entry["error"].splitlines()[0]
    assert entry["command"] == f"stagewise figure {THRESHOLD} --quick --out {tmp_path}"
    assert damaged.read_text() == "{"  # another run is never overwritten without --force
    assert f"failed {THRESHOLD}: ConfigError" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--only", "no-such-figure"], "only"),
        (["--paper", "no-such-paper"], "paper"),
        (["--paper", "incremental", "--only", THRESHOLD], "only"),
        (["--address", "127.0.0.1:6379"], "address"),
        (["--workers", "0"], "workers"),
    ],
)
def test_bad_choice_is_one_line_exit_2(argv, field, tmp_path, capsys):
    assert main(["reproduce", "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stagewise: error: {field} = ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_unknown_paper_error_lists_the_papers(capsys):
    assert main(["reproduce", "--paper", "no-such-paper"]) == 2
    err = capsys.readouterr().err
    for wing in ("incremental", "focus-dilution", "clustering-head", "emergence", "mean-field"):
        assert wing in err


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_report_of_a_directory_without_runs_is_one_line_exit_2(kind, tmp_path, capsys):
    directory = tmp_path / "runs"
    if kind == "empty":
        directory.mkdir()
    assert main(["report", str(directory)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stagewise: error: dir = ") and err.count("\n") == 1


def test_eta_from_recorded_times_then_the_mean_measured_so_far():
    # two workers; pending 100 s and unknown; running for 30 s of an expected 50
    assert eta_seconds([100.0, None], [(50.0, 30.0)], [], workers=2) is None
    assert eta_seconds([100.0, None], [(50.0, 30.0)], [10.0, 30.0], 2) == (100 + 20 + 20) / 2
    assert eta_seconds([], [(None, 60.0)], [40.0], 2) == 0.0  # past its mean: nothing left
    assert eta_seconds([5.0, 5.0, 5.0], [], [], 2) == 15.0 / 2
