"""The spike detector of simulate.measure.spikes and the clustering-head spike table, coincidences
and base rates (simulate.clustering_head.spikes; spec clustering_head.md §5.4)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.clustering_head.spikes import base_rates, fractions, spike_table
from simulate.measure.spikes import (
    BEFORE,
    SpikeRule,
    baseline,
    bursts,
    detect_spikes,
    dips,
    stability_threshold,
)

# ---- spike detector and coincidences ---------------------------------------------------------


def test_spikes_are_jumps_above_the_factor_merged_into_their_onset():
    loss = np.array([1.0, 0.5, 0.2, 0.1, 0.5, 2.0, 0.3, 0.05, 0.12, 0.03, 0.2])
    assert detect_spikes(loss).tolist() == [4, 10]  # 4 -> 5 merged; 0.05 -> 0.12 is 2.4x
    assert detect_spikes(loss, factor=2.0).tolist() == [4, 8, 10]
    assert detect_spikes(np.ones(5)).tolist() == []


@settings(max_examples=30, deadline=None)
@given(rate=st.floats(1e-3, 0.1), onset=st.integers(2, 48), jump=st.floats(3.5, 100.0))
def test_one_jump_on_a_decreasing_curve_is_one_spike(rate, onset, jump):
    loss = np.exp(-rate * np.arange(50))
    assert detect_spikes(loss).size == 0
    loss[onset:] *= jump
    assert detect_spikes(loss).tolist() == [onset]


def test_dips_and_bursts_read_the_epochs_at_and_before_the_onset():
    norm = np.ones(40)
    norm[29] = 0.3  # e - 1 of a spike at 30
    assert dips(norm, [30, 20], window=10, fraction=0.5).tolist() == [True, False]
    assert baseline(norm, 30, 10) == 1.0 and np.isnan(baseline(norm, 1, 10))
    sharp = np.full(40, 10.0)
    sharp[0] = np.nan
    sharp[30] = 25.0
    assert bursts(sharp, [30, 20], 10, 2.0).tolist() == [True, False]
    assert bursts(sharp, [20], 10, 2.0, threshold=9.0).tolist() == [True]
    assert bursts(sharp, [1], 10, 2.0).tolist() == [False]  # no baseline, no threshold
    assert bursts(sharp, [30, 31], 10, 2.0, offsets=BEFORE).tolist() == [False, True]


def test_spike_table_counts_coincidences_and_base_rates():
    epochs, lr = 60, 0.01
    loss = np.exp(-0.05 * np.arange(epochs))[None].repeat(2, 0)
    loss[0, 40:] *= 10.0  # seed 0: one spike at 40
    series = {
        "train_loss": loss,
        "gradient_norm": np.ones((2, epochs)),
        "min_embedding_norm": np.ones((2, epochs)),
        "curvature_bound": np.ones((2, epochs)),
        "hessian_top": np.ones((2, epochs)),
        "preconditioned_sharpness": np.ones((2, epochs)),
    }
    series["min_embedding_norm"][0, 39] = 0.1
    series["gradient_norm"][0, 40] = 5.0
    series["preconditioned_sharpness"][:, 10] = 10 * stability_threshold(lr, 0.9)
    rows = spike_table(series, SpikeRule(), lr)
    assert [(r["seed_index"], r["onset"]) for r in rows] == [(0, 40)]
    assert rows[0]["min_norm_dip"] and rows[0]["gradient_burst"]
    # the dip at e - 1 announces the spike; the gradient burst at e does not
    assert rows[0]["min_norm_dip_before"] and not rows[0]["gradient_burst_before"]
    assert fractions(rows, "_before")["gradient_burst"] == 0.0
    assert not rows[0]["preconditioned_sharpness_jump"] and not rows[0]["dip_and_sharpness_jump"]
    assert fractions(rows)["min_norm_dip"] == 1.0 and np.isnan(fractions([])["gradient_burst"])
    rates = base_rates(series, SpikeRule(), lr)
    quiet = epochs - 2 - 1  # seed 0's epochs >= 2 that are no onset (seed 1 has no spike)
    # the excursion at epoch 10 is read by e = 10 and e = 11; the dip at 39 by e = 39
    assert rates["preconditioned_sharpness_jump"] == 2 / quiet
    assert rates["min_norm_dip"] == 1 / quiet
    assert np.isnan(
        base_rates({k: v[1:] for k, v in series.items()}, SpikeRule(), lr)["gradient_burst"]
    )
