"""Figures of the focus-dilution paper (spec ``focus_dilution.md`` §7) and ``stagewise compare
focus-dilution``: every figure id in --quick mode through the CLI (slow), the claimed effect read
from its summary.json; bad input. (The statistics are tested in test_measure.py.)"""

import itertools
import warnings

import numpy as np
import pytest

from figures.cli import main
from simulate.focus_dilution.text_corpus import bundled_text
from simulate.store import read_summary


def _run(tmp_path, *args) -> dict:
    assert main([*args, "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    figure_id = args[1] if args[0] == "figure" else f"compare-{args[1]}"
    out = tmp_path / figure_id
    assert (out / f"{figure_id}.png").exists() and (out / f"{figure_id}.pdf").exists()
    return read_summary(out)


def _f(x) -> float:
    return float(x)  # summary.json stores nan/inf as strings


def test_bad_input_fails_with_exit_code_two(tmp_path, capsys):
    assert main(["figure", "focus-dilution-stages", "--eps", "2", "--out", str(tmp_path)]) == 2
    assert main(["figure", "focus-dilution-text", "--text", str(tmp_path / "missing.txt")]) == 2
    assert main(["figure", "focus-dilution-symmetry-breaking", "--deltas", "0", "0.5"]) == 2
    assert main(["compare", "focus-dilution", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert "eps = 2.0" in err and "text = " in err and "deltas" in err


def test_stages_report_reads_an_empty_rate_window_as_nan_without_a_warning():
    """At the paper's eps the rate rule's window can be empty in every seed (paper setting,
    2026-12-07); the report's table then marks it as missing, and numpy's empty-slice warning
    stays out."""
    from figures.focus_dilution.stages import FIGURE

    nan = float("nan")
    predicted = {"onsets": [1.0, 2.0, 3.0, 4.0], "g": 1.0}
    predicted |= dict.fromkeys(("sigma", "c", "mu_IV", "ln_d", "H_pi", "L_IV"), 1.0)
    summary = {
        "predicted": predicted,
        "onsets_per_seed": [[1.0, 2.0, 3.0, 4.0]] * 2,
        "rates_per_seed": [{"sigma": 1.0, "c": "nan", "mu_IV": "nan"}] * 2,
        "plateaus_per_seed": [[1.0, 1.0, nan]] * 2,
        "g_measured_per_seed": [1.0, 1.0],
        "setting": {"pi": [0.5, 0.5], "eps": 1e-3},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = FIGURE.report(summary)
    rate_c = next(line for line in text.splitlines() if "rate c" in line)
    assert rate_c.split()[-2:] == ["-", "-"]  # the table's mark for nan


# ---- every figure id, quick (slow) ----------------------------------------------------------
@pytest.mark.slow
def test_stages_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-stages")
    assert s["flow_compile_seconds"] > 0 and s["flow_run_seconds"] > 0
    pred = s["predicted"]
    on = np.asarray(s["onsets_per_seed"], float)
    assert np.all(np.isfinite(on)) and all(s["stage_order_ok"])
    levels = np.asarray(s["plateaus_per_seed"], float)
    np.testing.assert_allclose(levels[:, 1], pred["H_pi"], rtol=0.01)  # unigram plateau
    np.testing.assert_allclose(levels[:, 2], pred["L_IV"], rtol=0.01)  # Stage-IV rest point
    for r in s["rates_per_seed"]:
        assert _f(r["c"]) == pytest.approx(pred["c"], rel=0.05)
        assert _f(r["mu_IV"]) == pytest.approx(pred["mu_IV"], rel=0.06)
    assert np.mean(s["g_measured_per_seed"]) == pytest.approx(pred["g"], rel=0.05)


@pytest.mark.slow
def test_timing_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-timing")
    for key in ("slope_I", "slope_II"):
        assert _f(s[key]["measured"]) == pytest.approx(s[key]["predicted"], rel=0.10)
    r = s["rates_at_smallest_eps"]
    assert r["eps"] <= 1e-6
    assert _f(r["sigma_measured"]) == pytest.approx(r["sigma_predicted"], rel=0.05)
    assert _f(r["c_measured"]) == pytest.approx(r["c_predicted"], rel=0.05)
    measured = np.asarray(s["onsets_per_run"], float)
    ratio = measured / np.asarray(s["onsets_offset_per_run"], float)
    reached = np.isfinite(measured)
    assert reached[:, :3].all() and np.all(np.abs(ratio[reached] - 1) <= 0.1)  # issue 17


@pytest.mark.slow
def test_symmetry_breaking_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-symmetry-breaking")
    stall = s["stall"]
    assert abs(stall["slope"]) < 1e-6 and abs(stall["loss_end"] - stall["L_IV"]) < 1e-8
    rows = [r for r in s["rows"] if r["delta"] > 0]
    for r in rows:
        assert _f(r["rate_measured"]) == pytest.approx(r["mu_IV"], rel=0.05)
    ratios = [_f(r["rate_over_delta_measured"]) for r in sorted(rows, key=lambda r: r["delta"])]
    # rate / delta decreases toward k_delta as delta -> 0, and its steps shrink (levels off)
    assert all(a < b for a, b in itertools.pairwise(ratios))
    steps = np.diff(ratios)
    assert all(a < b for a, b in itertools.pairwise(steps))
    assert ratios[0] == pytest.approx(s["k_delta"], rel=0.15)


@pytest.mark.slow
def test_same_pi_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-same-pi")
    rows = s["rows"]
    assert all(r["four_stages_in_order"] for r in rows)
    assert s["stage_one_spread"] < 0.01 * rows[0]["predicted_onsets"][0]  # sigma from pi only
    by_c = sorted(rows, key=lambda r: r["c_P"])
    assert all(
        _f(a["measured_onsets"][1]) > _f(b["measured_onsets"][1])
        for a, b in itertools.pairwise(by_c)
    )  # larger c_P: earlier Stage II


@pytest.mark.slow
def test_embedding_pca_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-embedding-pca")
    assert np.asarray(s["explained_variance_per_seed"])[:, 0].min() > 0.5
    for ratio in s["D_per_kappa_measured_per_seed"]:
        assert _f(ratio) == pytest.approx(s["D_per_kappa_predicted"], rel=0.05)
    # Stage III: a low-frequency embedding retracts from its peak
    assert np.asarray(s["norm_retraction_per_seed"])[:, 1:].max() > 0.2


@pytest.mark.slow
def test_entropy_cycles_figure(tmp_path):
    s = _run(tmp_path, "figure", "focus-dilution-entropy-cycles")
    turns = s["entropy_turns_per_seed"][0]
    kinds = [[k for _, k in q] for q in turns]
    # the frequent query focuses then dilutes; another query dilutes then focuses again
    assert kinds[0][:2] == ["min", "max"]
    assert any(q[:2] == ["max", "min"] for q in kinds[1:])
    assert sum(len(q) for q in kinds) >= 5


@pytest.mark.slow
def test_text_figure_on_the_bundled_text_and_on_a_file(tmp_path):
    s = _run(tmp_path / "bundled", "figure", "focus-dilution-text")
    assert s["source_text"].startswith("pydoc_data.topics")
    assert {q["query"] for q in s["queries"]} >= {"the", ",", "a", "continue"}
    for q in s["queries"]:  # focus: the attention entropy over key types falls
        assert q["entropy_min"] < 0.5 * q["entropy_start"]
    assert s["final_val_loss"] < s["ln_vocab"]
    path = tmp_path / "my_text.txt"
    path.write_text(bundled_text()[:60000])
    s = _run(tmp_path / "file", "figure", "focus-dilution-text", "--text", str(path))
    assert s["source_text"] == str(path)
    assert s["final_val_loss"] < s["ln_vocab"]


@pytest.mark.slow
def test_compare_focus_dilution(tmp_path):
    s = _run(tmp_path, "compare", "focus-dilution")
    pop = s["population_flow"]["rows"]
    assert [r["stage"] for r in pop] == ["I", "II", "III", "IV"]
    for r in pop:
        if r["stage"] in ("I", "II", "IV"):
            assert _f(r["level_measured"]) == pytest.approx(r["level_predicted"], rel=0.01)
        assert abs(_f(r["ratio_offset"]) - 1) <= 0.1  # issue 17: onsets with offsets
    gd = s["finite_gd"]
    on = np.asarray(gd["onsets_per_seed"], float)
    assert np.all(np.isfinite(on)) and np.all(np.diff(on, axis=1) > 0)  # four stages in order
    ratio = np.asarray(gd["onset_over_population_flow_same_init"], float)
    assert np.all(np.abs(ratio - 1) < 0.25)
