"""Figures incremental-full (paper Figs. 2-3) and incremental-dataset-size (paper Fig. 5): pure
helpers on constructed arrays, bad input, and the quick figures through the CLI (slow)."""

import numpy as np
import pytest

from figures.cli import main
from simulate.incremental.attention_maps import block_labels, composite_rgb, staircase_segments
from simulate.incremental.markov_task import MarkovSetting
from simulate.incremental.markov_training import lag_blocks
from simulate.incremental.training_stages import best_so_far, early_stopping, kl_rise, nearest_rows
from simulate.store import read_summary


def test_block_labels_follow_the_lags_of_each_query():
    labels = block_labels((4, 4, 4), generated=20)
    assert labels.shape == (20, 31)
    # query row q is output position 11 + q, predicting token 12 + q; lag i is key 12 + q - i
    for q in (0, 7, 19):
        for k, lags in enumerate([range(1, 5), range(5, 9), range(9, 13)], start=1):
            assert all(labels[q, 12 + q - i] == k for i in lags)
        assert np.count_nonzero(labels[q]) == 12
    M = lag_blocks(MarkovSetting(blocks=(4, 4, 4)))
    assert np.array_equal(labels > 0, M.sum(-1) > 0)


def test_staircase_outlines_each_region():
    labels = np.array([[0, 1, 1], [0, 0, 2]])
    segs = staircase_segments(labels)
    assert sorted(segs) == [1, 2]
    assert segs[1].shape == (6, 2, 2) and segs[2].shape == (4, 2, 2)  # the perimeters
    xs = segs[2][:, :, 0]
    ys = segs[2][:, :, 1]
    assert xs.min() == 1.5 and xs.max() == 2.5 and ys.min() == 0.5 and ys.max() == 1.5
    # a diagonal band of one cell per row: 4 edges per cell, none shared
    band = staircase_segments(np.eye(3, dtype=int))[1]
    assert len(band) == 12


def test_composite_puts_each_head_in_its_own_channel():
    maps = np.zeros((3, 2, 4))
    maps[0, :, 0] = 0.5
    maps[1, 0, 1] = 0.25
    maps[1, 1, :] = 0.25  # uniform row -> all ones after normalising the row
    img = composite_rgb(maps)
    assert img.shape == (2, 4, 3)
    assert np.allclose(img[:, 0, 0], 1.0) and np.allclose(img[:, 1:, 0], 0.0)
    assert np.allclose(img[0, :, 1], [0, 1, 0, 0]) and np.allclose(img[1, :, 1], 1.0)
    assert np.allclose(img[..., 2], 0.0)  # head 3 attends nowhere: zero row, no division error


def test_nearest_logged_rows_without_repeats():
    logged = np.arange(0, 310, 10)
    assert nearest_rows(logged, (0, 60, 300, 1000)) == [0, 6, 30]
    assert nearest_rows(logged, (64, 1)) == [0, 6]


def test_kl_rise_rule():
    steps = np.arange(6.0)
    rising = kl_rise(steps, np.array([3.0, 1.0, 0.8, 1.2, 1.5, 2.0]))
    assert rising["kl_A1_rises_after_stage1"] and rising["kl_A1_min_step"] == 2.0
    assert not kl_rise(steps, np.array([3.0, 2.0, 1.5, 1.2, 1.0, 0.9]))["kl_A1_rises_after_stage1"]


def test_best_so_far_is_a_running_minimum_skipping_nan():
    excess = np.array([[0.5, 0.3, np.nan, 0.4, 0.2], [1.0, 1.1, 0.9, 0.95, 0.92]])
    assert np.allclose(best_so_far(excess), [[0.5, 0.3, 0.3, 0.3, 0.2], [1.0, 1.0, 0.9, 0.9, 0.9]])


def test_early_stopping_picks_the_closest_baseline_at_the_best_step():
    steps = np.array([0.0, 10, 20, 30])
    val = np.array([3.0, 1.0, 0.8, 0.9])  # overfits after step 20
    kl = np.array([[1, 1, 1], [0.2, 0.5, 0.6], [0.3, 0.1, 0.4], [0.9, 0.6, 0.3]])
    es = early_stopping(steps, val, kl, np.array([4, 8, 12]))
    assert es["early_stopping_step"] == 20 and es["best_val_loss"] == 0.8
    assert es["closest_context_at_best"] == 8 and es["stage_at_best"] == 2


@pytest.mark.parametrize(
    "argv,field",
    [
        (["figure", "incremental-dataset-size", "--sizes", "0", "300"], "sizes"),
        (["figure", "incremental-full", "--map-steps", "-5"], "map_steps"),
        (["figure", "incremental-full", "--lr", "-1"], "lr"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, field, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stagewise: error: {field} = ")
    assert not any(tmp_path.iterdir())  # failed before training anything


@pytest.mark.slow
def test_incremental_full_quick_figure(tmp_path):
    assert main(["figure", "incremental-full", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    run_dir = tmp_path / "incremental-full"
    summary = read_summary(run_dir)
    assert (run_dir / "incremental-full.png").stat().st_size > 0
    assert summary["map_steps"] == [0, 60, 150, 300]
    # the learned 4- and 8-gram baselines were trained and measured against
    assert sorted(summary["baseline_val_losses"]) == ["4", "8"]
    # three stages on the learned-baseline ladder, in order
    stage2, stage3 = summary["baseline_ladder_steps"]
    assert 0 < stage2 < stage3 < 300
    # the KL to A*_1 rises after stage 1 (paper §5.8)
    assert summary["kl_A1_rises_after_stage1"]
    assert summary["final_val_loss"] < summary["baseline_val_losses"]["8"]


@pytest.mark.slow
def test_incremental_dataset_size_quick_figure(tmp_path):
    assert (
        main(["figure", "incremental-dataset-size", "--quick", "--quiet", "--out", str(tmp_path)])
        == 0
    )
    run_dir = tmp_path / "incremental-dataset-size"
    summary = read_summary(run_dir)
    assert (run_dir / "incremental-dataset-size.png").stat().st_size > 0
    assert [r["size"] for r in summary["per_size"]] == ["n=300", "n=1000", "n=3000", "online"]
    # the smallest set stops early in a smaller-context class than online (paper Fig. 5)
    assert summary["check"]["fewer_stages_with_smallest_n"]
    assert summary["check"]["stage_nondecreasing_in_n"]
