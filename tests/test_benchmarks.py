"""The benchmark harness (``python -m benchmarks``): its table, its FLOP count, its ODE rows.
Behaviour only: no timed assertions (issue 15)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import jax

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


def test_analytic_flop_count_of_a_tiny_minimal_transformer_step_is_near_xla_count():
    """The analytic count (6 x parameters x tokens + attention) against XLA's cost analysis of
    the same compiled step. At these sizes (vocabulary 2, T = 31) attention is about half the
    count, and XLA's count is 0.77 of it (the analytic count is an estimate: it leaves out
    softmax, loss, sampling and the optimizer, and XLA may simplify matmul work whose result the
    read-out does not use). The band [0.6, 1.3] fails
    on a wrong term: without attention the ratio is 1.49, counting the forward pass only gives
    2.3, and counting attention twice gives 0.51."""
    cfg = paper_config("minimal", batch=32, vocab=2, blocks=(1, 1), generated=30)
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
