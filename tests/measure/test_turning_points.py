"""Turning points by prominence (``simulate.measure.turning_points``)."""

import numpy as np

from simulate.measure.turning_points import TURN_PROMINENCE, turning_points


def test_turning_points_follow_a_zig_zag_with_prominence():
    t = np.linspace(0, 3 * np.pi, 601)
    y = np.cos(t) + 0.01 * np.sin(40 * t)  # small wiggles are not turns
    turns = turning_points(y, prominence=0.1)
    assert [k for _, k in turns] == ["min", "max"]
    np.testing.assert_allclose([t[i] for i, _ in turns], [np.pi, 2 * np.pi], atol=0.1)
    assert turning_points(np.linspace(0, 1, 50)) == []


def test_turns_alternate_and_ignore_the_end_points():
    y = np.array([0.0, 1.0, 0.5, 2.0, 0.0, 0.3])
    # 1.0 has prominence 0.5, a max; 0.5 a min of prominence 0.5; 2.0 a max; 0.0 a min (0.3 rise)
    assert turning_points(y, prominence=0.2) == [(1, "max"), (2, "min"), (3, "max"), (4, "min")]
    # with a larger prominence only the big excursion counts; end points never do
    assert turning_points(y, prominence=0.6) == [(3, "max")]
    assert turning_points(np.array([1.0, 0.0])) == []


def test_the_default_prominence_is_in_nats():
    y = np.concatenate(
        [np.linspace(1.0, 0.5, 50), np.linspace(0.5, 0.5 + 0.9 * TURN_PROMINENCE, 50)]
    )
    assert turning_points(y) == []
    y[-1] = 0.5 + 1.1 * TURN_PROMINENCE
    assert turning_points(y) == [(49, "min")]
