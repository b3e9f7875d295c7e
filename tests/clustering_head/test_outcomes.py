"""Success rates, Wilson intervals and the ablation grid of clustering-head runs
(simulate.clustering_head.outcomes; spec clustering_head.md §4, §5.5)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from simulate.clustering_head.outcomes import (
    PAPER,
    ablation_points,
    learning_rates,
    off_default,
    wilson_interval,
)

counts = st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))


@given(counts)
def test_wilson_interval_brackets_the_observed_rate(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


@given(counts)
def test_wilson_interval_is_symmetric_under_swapping_success_and_failure(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    lo_swapped, hi_swapped = wilson_interval(n - k, n)
    np.testing.assert_allclose([lo, hi], [1 - hi_swapped, 1 - lo_swapped], atol=1e-12)


@given(counts)
def test_wilson_interval_narrows_with_four_times_the_seeds(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    lo4, hi4 = wilson_interval(4 * k, 4 * n)
    assert hi4 - lo4 < hi - lo


def test_wilson_interval_matches_the_closed_form_at_half():
    # k = n/2: centre 1/2, half-width z sqrt(1/4n + z^2/4n^2) / (1 + z^2/n)
    z, n = 1.959963984540054, 32
    lo, hi = wilson_interval(16, n)
    half = z * np.sqrt(1 / (4 * n) + z**2 / (4 * n**2)) / (1 + z**2 / n)
    np.testing.assert_allclose([lo, hi], [0.5 - half, 0.5 + half], rtol=1e-12)


def test_learning_rates_are_log_spaced_over_the_range():
    lrs = learning_rates(10, 1e-4, 1.0)
    assert len(lrs) == 10
    np.testing.assert_allclose([lrs[0], lrs[-1]], [1e-4, 1.0])
    np.testing.assert_allclose(np.diff(np.log(lrs)), np.log(1e4) / 9)


def test_off_default_drops_the_default_and_repeats():
    assert off_default([128, 8, 32, 8], 32) == [8, 128]
    assert off_default([2048], 32) == [2048]
    assert off_default([1e-4, 3e-3 * (1 + 1e-12)], 3e-3) == [1e-4]


def test_points_differ_from_the_default_in_one_coordinate():
    lrs, batches, widths = learning_rates(10, 1e-4, 1.0), (8, 32, 128, 2048), (4, 8, 32, 128)
    points = ablation_points(lrs, batches, widths)
    default = {"lr": PAPER.lr, "batch": PAPER.batch, "width": PAPER.width}
    assert points[0] == {"axis": "default", **default}
    # 10 lrs (none is 3e-3) + 3 other batches + 3 other widths, the default once
    assert len(points) == 1 + 10 + 3 + 3
    for p in points[1:]:
        changed = [a for a in default if not np.isclose(p[a], default[a])]
        assert changed == [p["axis"]]
    assert sorted(p["batch"] for p in points if p["axis"] == "batch") == [8, 128, 2048]
