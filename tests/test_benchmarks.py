"""The benchmark harness (``python -m benchmarks``): its table, its FLOP count, its ODE rows.
Behaviour only: no timed assertions (issue 15)."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ is not an installed package (pyproject installs theory, simulate, figures) and
# pytest's importlib mode leaves the repository root off sys.path
sys.path.insert(0, str(ROOT))

from benchmarks.table import COLUMNS, Row, format_table, write_json  # noqa: E402
from benchmarks.transformer import (  # noqa: E402
    analytic_flops,
    lowered,
    paper_config,
    training_step,
    xla_flops,
)


def test_table_prints_header_and_one_line_per_row_and_json_has_the_same_rows(tmp_path):
    rows = [
        Row("a", "one", 1.5, "s", 3.0, 2.0, "note"),
        Row("b", "two", float("nan"), "GiB"),
    ]
    text = format_table(rows).splitlines()
    assert text[0].split() == list(COLUMNS)
    assert len(text) == 2 + len(rows)  # header, rule, rows
    assert "-" in text[3].split()  # no baseline is printed as '-'
    write_json(rows, tmp_path / "t.json", {"mode": "test"})
    payload = json.loads((tmp_path / "t.json").read_text())
    assert payload["columns"] == list(COLUMNS)
    assert payload["meta"] == {"mode": "test"}
    assert [set(r) for r in payload["rows"]] == [set(COLUMNS)] * 2
    assert payload["rows"][0]["ratio"] == 2.0
    assert payload["rows"][1]["value"] == "nan"  # JSON has no nan: written as a string
    assert payload["rows"][1]["baseline"] is None


@pytest.mark.parametrize("model", ["minimal", "full"])
def test_analytic_flop_count_of_a_small_transformer_step_is_near_xla_count(model):
    """The analytic count (6 x parameters x tokens + attention, gathered tables left out) against
    XLA's cost analysis of the same compiled step, at the paper's vocabulary and batch 32: 1.19
    (minimal: one layer of gathers and a weighted sum of values; the count leaves out softmax,
    loss, sampling and the optimizer, a fifth of XLA's count here) and 1.04 (full). The band
    [0.6, 1.3] fails on a wrong count: the dense count of the one-hot products that the minimal
    model no longer computes gives 0.10, and counting the forward pass only gives 3.6 (minimal)
    and 3.1 (full)."""
    cfg = paper_config(model, batch=32)
    step = training_step(cfg)
    xla = xla_flops(lowered(step).compile())
    analytic = analytic_flops(cfg, step.model)
    assert 0.6 < xla / analytic < 1.3
    # the step it counts runs: finite loss after one step
    _, _, loss = step.fn(step.params, step.opt_state, jax.random.PRNGKey(0))
    assert math.isfinite(float(loss))


def test_quick_ode_benchmark_writes_the_ode_rows_with_scipy_baseline_and_agreement(tmp_path):
    out = tmp_path / "x.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "ode", "--quick", "--tiny", "--out", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    compare = [r for r in rows if r["measurement"] == "head ODE vs scipy RK45"]
    compiles = [r for r in rows if r["measurement"] == "head ODE compile"]
    assert compare and compiles
    for r in compare:
        assert r["value"] > 0 and r["baseline"] > 0
        assert math.isclose(r["ratio"], r["baseline"] / r["value"])
        assert "(agree)" in r["note"]  # both solvers reach the same state at t_end
    assert all(r["value"] > 0 and r["baseline"] is None for r in compiles)
    assert "head ODE vs scipy RK45" in proc.stdout  # the table is printed too


def test_seed_scaling_records_running_out_of_memory_and_goes_on(monkeypatch):
    """A seed count that exhausts memory ends its trainer's rows with a nan row saying so; the
    next trainer is still measured (the full run used to stop at mean-field's 32 seeds)."""
    from benchmarks import seeds

    def hungry(n, steps):
        if n >= 8:
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory allocating 1 bytes."
            )
        return 10.0, 0.5

    def fine(n, steps):
        return 10.0 / n, 0.5

    monkeypatch.setattr(seeds, "TRAINERS", {"hungry": (hungry, 2, "a"), "fine": (fine, 2, "b")})
    rows = seeds.measure("full")
    assert [r.setting.split(",")[0] for r in rows] == ["hungry", "hungry", "fine", "fine", "fine"]
    assert math.isnan(rows[1].value) and "RESOURCE_EXHAUSTED" in rows[1].note
    assert [r.value for r in rows[2:]] == [10.0, 10.0, 10.0]

    def broken(n, steps):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(seeds, "TRAINERS", {"broken": (broken, 2, "c")})
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        seeds.measure("full")


def test_paper_projection_times_the_paper_run_shortened_and_scales_to_its_steps(monkeypatch):
    """The probe keeps the run's step (sizes, seeds) and logging and only shortens it; the
    projection scales the probe's run time by steps / probe steps and counts every seed-step."""
    import simulate.train
    from benchmarks.paper import probe, run_projection, step_flops
    from simulate.emergence.training import EmergenceConfig

    cfg = EmergenceConfig(S=4, heads=1, head_dim=2, batch=8, eval_batch=8, seeds=2)
    cfg = dataclasses.replace(cfg, steps=40, log_every=10, chunk=20)
    short = probe(cfg, 2)
    same = ("S", "heads", "head_dim", "batch", "eval_batch", "seeds", "log_every", "lr")
    assert all(getattr(short, f) == getattr(cfg, f) for f in same)
    assert (short.steps, short.chunk) == (20, 10)
    # a probe timed at 3 s for its 20 steps projects 6 s for the run's 40 (the trainer stubbed:
    # the python -m benchmarks --quick --only paper run times a real one)
    timed = simulate.train.TrainResult(None, compile_seconds=1.0, run_seconds=3.0)
    monkeypatch.setattr(simulate.train, "train", lambda *args, **kwargs: timed)
    assert run_projection(cfg, 2) == (6.0, 1.0, 80.0)
    # XLA's count grows with the batch: twice the sequences, about twice the step's work
    ratio = step_flops(dataclasses.replace(cfg, batch=16)) / step_flops(cfg)
    assert 1.6 < ratio < 2.1


def test_paper_projection_of_an_incremental_figure_probes_its_runs_at_their_own_step():
    """incremental-full is its two learned baselines (4- and 8-gram: spans 4, 4, 4) and the
    student the figure trains; a probe keeps a run's sizes and log rate and shortens it to chunks
    of MARKOV_PROBE_STEPS, a baseline (one log per 100 steps) logs once per chunk."""
    from benchmarks.paper import FIGURES, MARKOV_PROBE_STEPS, probe
    from figures.incremental.full import FullConfig

    *baselines, student = FIGURES["incremental-full"]()
    assert student == FullConfig().training()
    assert [b.context for b in baselines] == [4, 8] and all(b.model == "full" for b in baselines)
    short = probe(student, 2)
    same = ("model", "vocab", "train_size", "batch", "validation", "seeds", "log_every", "lr")
    assert all(getattr(short, f) == getattr(student, f) for f in same)
    assert (short.steps, short.chunk) == (2 * MARKOV_PROBE_STEPS, MARKOV_PROBE_STEPS)
    assert baselines[0].log_every > MARKOV_PROBE_STEPS
    assert probe(baselines[0], 1).log_every == MARKOV_PROBE_STEPS
    # mean-field-escape: one run per (beta, tau), each on the mean-field trainer
    from benchmarks.paper import _experiment
    from figures.mean_field.escape import EscapeConfig
    from simulate.mean_field import training as mean_field

    escape = FIGURES["mean-field-escape"]()
    assert [(c.beta, c.tau) for c in escape] == EscapeConfig().cases()
    assert _experiment(escape[0]) == (mean_field.problem, mean_field.optimizer)


def test_paper_family_can_be_restricted_to_one_figure_and_rejects_unknown_ids(capsys):
    from benchmarks.__main__ import selection

    assert selection(["paper:emergence-times"]) == (["paper"], None, ["emergence-times"])
    assert selection(["paper"]) == (["paper"], None, None)
    with pytest.raises(SystemExit):
        selection(["paper:incremental-ode"])  # not a figure the paper family projects
    assert "paper:incremental-ode" in capsys.readouterr().err


def test_a_paper_run_that_dies_is_reported_with_its_memory_and_the_table_goes_on():
    """Each run is probed in its own process: one that fails (here: an index past the figure's
    runs; on the machine, the out-of-memory killer) gives no result and its peak memory."""
    from benchmarks.paper import isolated

    result, peak_gib = isolated("emergence-linear-map", 99)
    assert result is None and 0 < peak_gib < 64


def test_the_paper_projection_counts_a_shuffled_clustering_step_by_its_minibatch():
    """A problem that draws an epoch at once (``Problem.draw_interval``) is counted on one step's
    slice of the draw: forward and backward grow with the batch, Adam's update does not."""
    from benchmarks.paper import step_flops
    from simulate.clustering_head.training import ClusteringConfig

    small = ClusteringConfig(
        length=8, sparsity=3, train_size=128, test_size=64, hessian_iterations=0
    )
    ratio = step_flops(dataclasses.replace(small, batch=64)) / step_flops(small)
    assert 1.8 < ratio < 2.0


def test_the_paper_projection_counts_a_shuffled_markov_step_by_its_minibatch():
    """A problem that draws a step's data from the run's key (``Problem.draw_step``: the Markov
    chain's shuffled epochs) is counted on that step's minibatch: doubling it doubles the
    forward and backward, not the permutation of the training set or AdamW's update."""
    from benchmarks.paper import step_flops
    from simulate.incremental.markov_training import MarkovTrainConfig

    small = MarkovTrainConfig(vocab=8, blocks=(2, 2), train_size=512, batch=64, validation=32)
    assert small.shuffled
    ratio = step_flops(dataclasses.replace(small, batch=128)) / step_flops(small)
    assert 1.8 < ratio < 2.05
