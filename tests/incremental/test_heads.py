"""Tests of theory.incremental.heads: fixed points, plateau levels, symmetric subspace, Jacobian and
validation."""

import itertools
from functools import cache

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.gradient_flow import FixedPointKind, GradientFlow, classify_spectrum
from theory.incremental.heads import (
    METRIC_POWER,
    HeadSetting,
    HeadSystem,
    field_jacobian,
    head_system,
    tangent_basis,
)
from theory.incremental.setting import METRICS
from theory.validation import ConfigError

SETTINGS = settings(max_examples=15, deadline=None)
WINDOW = 6
# multiples of 1/4 are exact in binary, so nsimplify recovers them exactly
quarters = st.integers(1, 12).map(lambda n: n / 4)


@cache
def _system(heads, blocks, window):
    """The symbolic system depends on the shape only (m and alpha stay symbols)."""
    return HeadSystem(HeadSetting(heads=heads, blocks=blocks, window=window))


@cache
def _flow(heads, blocks, window, metric) -> GradientFlow:
    flow = _system(heads, blocks, window).flow(metric)
    flow.field  # noqa: B018 (build once)
    return flow


def _symbols(hs):
    return list(hs.m), list(hs.alpha)


def _evaluate(point, vals):
    """Point values may contain m and alpha: substitute them, then merge the parameters."""
    return {**{x: sp.sympify(e).xreplace(vals) for x, e in point.items()}, **vals}


@st.composite
def head_settings(draw, heads=st.sampled_from([2, 3])):  # noqa: B008  (hypothesis idiom)
    H = draw(heads)
    blocks = tuple(draw(st.lists(st.integers(1, 2), min_size=2, max_size=2)))
    importances = tuple(draw(st.lists(quarters, min_size=2, max_size=2)))
    alpha = tuple(draw(st.lists(quarters, min_size=sum(blocks), max_size=sum(blocks))))
    return HeadSetting(heads=H, blocks=blocks, window=WINDOW, importances=importances, alpha=alpha)


def _expected_levels(setting):
    """L_k from first principles: stage k removes the k largest block losses
    w_j = 1/2 m_j^2 ||alpha_I(j)||_2^2 (blockwise Cauchy-Schwarz, spec §5.3)."""
    w = [
        0.5
        * setting.importance_values[j] ** 2
        * sum(setting.alpha_values[i] ** 2 for i in setting.lags(j))
        for j in range(setting.h)
    ]
    desc = sorted(w, reverse=True)
    K = min(setting.heads, setting.h)
    return [sum(w) - sum(desc[:k]) for k in range(K + 1)]


@SETTINGS
@given(head_settings())
def test_stage_points_are_zeros_of_both_fields_with_the_plateau_loss(setting):
    hs = HeadSystem(setting)
    vals = hs.parameter_values()
    levels = [float(L.xreplace(vals)) for L in hs.plateau_levels()]
    expected = _expected_levels(setting)
    np.testing.assert_allclose(levels, expected, rtol=1e-12, atol=1e-12)
    assert all(a >= b for a, b in itertools.pairwise(levels))
    assert levels[0] == pytest.approx(0.5 * float(np.sum(setting.target() ** 2)), rel=1e-12)
    if setting.heads >= setting.h:
        assert levels[-1] == 0
    for metric in METRICS:
        flow = _flow(setting.heads, setting.blocks, setting.window, metric)
        for k in range(1, hs.stage_count() + 1):
            point = _evaluate(hs.stage_point(k), vals)
            assert flow.is_fixed_point(point), (metric, k)
            assert float(hs.loss.xreplace(point)) == pytest.approx(levels[k], rel=1e-12, abs=1e-12)
        # stage 0 (uniform attention, zero values) is not a fixed point: the values grow
        assert not flow.is_fixed_point(_evaluate(hs.stage_point(0), vals))


@pytest.mark.parametrize("value", [0.75, 1.7, 3.611328125, 0.1])
def test_parameter_values_are_the_settings_floats_as_rationals(value):
    """``parameter_values`` is the float itself as a rational, not a closed form guessed near it
    (sympy's default ``nsimplify`` returns a product of surds for 3.611328125 = 1849/512)."""
    hs = HeadSystem(HeadSetting(heads=2, blocks=(1, 2), importances=(value, 1.0), alpha=(1.0,) * 3))
    vals = hs.parameter_values()
    assert vals[hs.m[0]].is_Rational and float(vals[hs.m[0]]) == value


@SETTINGS
@given(head_settings())
def test_plateau_values_are_the_symbolic_levels_at_the_settings_numbers(setting):
    """The numeric path (the loss evaluated at the numbers, no simplification) is exact: the same
    rationals as the simplified symbolic levels with the numbers put in, and the same ladder."""
    hs = HeadSystem(setting)
    vals = hs.parameter_values()
    assert hs.plateau_values() == [L.xreplace(vals) for L in hs.plateau_levels()]
    symbolic = [float(hs.loss_at(p).xreplace(vals)) for _, p in hs.symmetric_fixed_points()]
    assert hs.ladder() == tuple(int(j) for j in np.argsort(symbolic, kind="stable"))


@SETTINGS
@given(head_settings(), st.data())
def test_every_clustered_point_is_a_fixed_point(setting, data):
    hs = HeadSystem(setting)
    vals = hs.parameter_values()
    assignment = tuple(
        data.draw(
            st.lists(st.integers(0, setting.h - 1), min_size=setting.heads, max_size=setting.heads)
        )
    )
    point = _evaluate(hs.clustered_point(assignment), vals)
    w = [
        0.5
        * setting.importance_values[j] ** 2
        * sum(setting.alpha_values[i] ** 2 for i in setting.lags(j))
        for j in range(setting.h)
    ]
    expected_loss = sum(w[j] for j in range(setting.h) if j not in assignment)
    assert float(hs.loss.xreplace(point)) == pytest.approx(expected_loss, rel=1e-12, abs=1e-12)
    for metric in METRICS:
        assert _flow(setting.heads, setting.blocks, setting.window, metric).is_fixed_point(point)
    # moving one head's attention off its block is not a fixed point
    k, j = 0, assignment[0]
    lag = hs.setting.lags(j)[0]
    other = next(i for i in range(setting.window) if i not in hs.setting.lags(j))
    moved = dict(point)
    moved[hs.s[k, lag]] = point[hs.s[k, lag]] - sp.Rational(1, 10) * point[hs.s[k, lag]]
    moved[hs.s[k, other]] = sp.Rational(1, 10) * point[hs.s[k, lag]]
    assert not _flow(setting.heads, setting.blocks, setting.window, "replicator").is_fixed_point(
        moved
    )


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("shape", [(2, (1, 1), 4), (3, (1, 2), 5)])
def test_symmetric_subspace_is_invariant(shape, metric):
    assert _system(*shape).symmetric_subspace_is_invariant(metric)


class _AsymmetricSystem(HeadSystem):
    """A system whose loss favours head 1 (a term linear in v_11): not head-permutation
    symmetric."""

    def flow(self, metric=None):
        f = super().flow(metric)
        return GradientFlow(f.state, f.loss + self.v[0, 0], f.metric, f.invariants)


@pytest.mark.parametrize("metric", METRICS)
def test_symmetric_subspace_check_can_fail(metric):
    hs = _AsymmetricSystem(HeadSetting(heads=2, blocks=(1, 1), window=4))
    assert not hs.symmetric_subspace_is_invariant(metric)


@pytest.mark.parametrize("metric", METRICS)
def test_field_differs_between_unequal_heads(metric):
    """Off the symmetric subspace the heads' fields differ (so the invariance check is not
    vacuous)."""
    hs = _system(2, (1, 1), 4)
    rng = np.random.default_rng(3)
    m, a = _symbols(hs)
    point = dict(zip(m + a, [sp.Rational(3, 2), 1, 1, 1]))
    point.update({x: sp.Rational(int(rng.integers(1, 9)), 8) for x in hs.v})
    for k in range(2):
        raw = rng.integers(1, 9, size=4)
        point.update({hs.s[k, i]: sp.Rational(int(raw[i]), int(raw.sum())) for i in range(4)})
    f = _flow(2, (1, 1), 4, metric).field_at(point)
    assert any(sp.simplify(f[j] - f[2 + j]) != 0 for j in range(2))


def _random_point(rng, hs):
    st_ = hs.setting
    H, h, T = st_.heads, st_.h, st_.window
    v = rng.normal(size=(H, h))
    s = rng.dirichlet(np.ones(T), size=H)
    m = rng.uniform(0.5, 2.0, size=h)
    alpha = rng.uniform(0.5, 2.0, size=sum(st_.blocks))
    return v, s, m, alpha


def _target(setting, m, alpha):
    G = np.zeros((setting.h, setting.window))
    for j in range(setting.h):
        for i in setting.lags(j):
            G[j, i] = m[j] * alpha[i]
    return G


@pytest.mark.parametrize("metric", METRICS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_field_jacobian_matches_symbolic_jacobian(metric, seed):
    shape = (2, (1, 2), 5)
    hs = _system(*shape)
    flow = _flow(*shape, metric)
    rng = np.random.default_rng(seed)
    v, s, m, alpha = _random_point(rng, hs)
    point = {**dict(zip(hs.m, map(sp.Float, m))), **dict(zip(hs.alpha, map(sp.Float, alpha)))}
    point.update({x: sp.Float(val) for x, val in zip(hs.v, v.ravel())})
    point.update({x: sp.Float(val) for x, val in zip(hs.s, s.ravel())})
    symbolic = np.array(flow.jacobian_at(point).tolist(), dtype=float)
    numeric = field_jacobian(_target(hs.setting, m, alpha), v, s, METRIC_POWER[metric])
    np.testing.assert_allclose(numeric, symbolic, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("shape", [(2, (1, 1), 4), (3, (1, 1, 1), 5), (3, (1, 1), 4)])
def test_competitive_point_spectrum(shape, metric):
    """Stage-1 point: all H heads on the lead block. The tangent spectrum is degenerate (zeros from
    the vertex / head-splitting directions) and its negative part is the value relaxation, whose
    rate
    is the eigenvalue H ||s||^2 of the coupling dv_k'/dv_l = -(s_l . s_k) I.

    The zero eigenvalues sit in Jordan blocks (nilpotent directions), so float64 eigenvalues spread
    around 0 by ~sqrt(machine eps); the zero cluster is therefore separated at 1e-6 relative."""
    H, blocks, T = shape
    setting = HeadSetting(
        heads=H,
        blocks=blocks,
        window=T,
        importances=tuple(1.5 - 0.25 * j for j in range(len(blocks))),
        metric=metric,
    )
    hs = HeadSystem(setting)
    point = hs.stage_point(1)
    _v, s = hs.point_arrays(point)
    assert np.allclose(s, s[0])  # symmetric point
    spec = hs.tangent_spectrum(point)
    scale = np.max(np.abs(spec))
    assert classify_spectrum(spec, tol=1e-6) is FixedPointKind.DEGENERATE
    n_group = sum(1 for k in range(H) if np.allclose(s[k], s[0]))
    expected = -n_group * float(s[0] @ s[0])
    zero = np.abs(spec) < 1e-6 * scale
    relax = spec[~zero]
    assert zero.sum() == spec.size - setting.h, spec
    np.testing.assert_allclose(relax.real, expected, rtol=1e-10)
    np.testing.assert_allclose(relax.imag, 0, atol=1e-10 * scale)
    # the symbolic flow's spectrum on its declared invariants has the same relaxation part
    sym = hs.flow(metric).spectrum_at(_evaluate(point, hs.parameter_values()))
    assert np.sum(np.abs(sym) < 1e-6 * scale) == zero.sum()
    np.testing.assert_allclose(np.sort(sym[np.abs(sym) >= 1e-6 * scale].real), expected, rtol=1e-10)


def test_tangent_basis_spans_the_simplex_tangent_space():
    H, h, T = 2, 3, 4
    B = tangent_basis(H, h, T)
    assert B.shape == (H * h + H * T, H * h + H * (T - 1))
    np.testing.assert_allclose(B.T @ B, np.eye(B.shape[1]), atol=1e-12)
    for k in range(H):
        row = np.zeros(H * h + H * T)
        row[H * h + k * T : H * h + (k + 1) * T] = 1
        np.testing.assert_allclose(row @ B, 0, atol=1e-12)


def test_ladder_orders_blocks_by_captured_loss():
    # block 1 has two lags of weight 1 and m=1: 1/2 * 1 * 2 = 1 > block 0 (m=1.25, one lag: 0.78)
    setting = HeadSetting(heads=2, blocks=(1, 2), window=5, importances=(1.25, 1.0))
    w = [0.5 * 1.25**2, 0.5 * 1.0**2 * 2]
    assert HeadSystem(setting).ladder() == tuple(int(j) for j in np.argsort(w)[::-1])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"m": -1.0}, "m"),
        ({"m": 0.0}, "m"),
        ({"m": float("nan")}, "m"),
        ({"blocks": (3, 3), "window": 5}, "blocks"),
        ({"blocks": (0, 1)}, "blocks"),
        ({"blocks": ()}, "blocks"),
        ({"importances": (1.0, 0.0, 1.0)}, "importances"),
        ({"importances": (1.0, -2.0, 1.0)}, "importances"),
        ({"importances": (1.0, 1.0)}, "importances"),
        ({"alpha": (1.0, 0.0, 1.0)}, "alpha"),
        ({"alpha": (1.0, 1.0)}, "alpha"),
        ({"metric": "euclid"}, "metric"),
        ({"heads": 0}, "heads"),
        ({"window": 1, "blocks": (1,)}, "window"),
    ],
)
def test_setting_validation(kwargs, field):
    with pytest.raises(ConfigError) as info:
        HeadSetting(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field} = ")


def test_clustered_point_validation():
    hs = _system(2, (1, 1), 4)
    with pytest.raises(ConfigError, match="assignment"):
        hs.clustered_point((0, 2))
    with pytest.raises(ConfigError, match="assignment"):
        hs.clustered_point((0,))


def test_a_setting_given_lists_is_the_hashable_setting_of_tuples_and_shares_its_system():
    listed = HeadSetting(blocks=[1, 2], window=6, importances=[2.0, 1.0])
    tupled = HeadSetting(blocks=(1, 2), window=6, importances=(2.0, 1.0))
    assert listed == tupled and hash(listed) == hash(tupled)
    assert head_system(listed) is head_system(tupled)
    assert head_system(tupled).plateau_levels() == HeadSystem(tupled).plateau_levels()
