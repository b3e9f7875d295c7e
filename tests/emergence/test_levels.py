"""theory.emergence.levels: loss levels, search space, lottery model (per searcher, pooled over
cells, per run) and bias mass (spec emergence.md §5), checked against the simulation code,
sampled minima and softmax numerics."""

import itertools
import math

import jax
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulate.emergence import tasks
from theory.emergence import levels as th
from theory.emergence.levels import lottery_pooled_survival, lottery_run_cdf

survivals = arrays(np.float64, 6, elements=st.floats(0, 1))


@given(st.integers(2, 64), st.integers(2, 6))
def test_step_heights_add_up_to_ln2(S, n):
    values = {th.S: S, th.n: n}
    floor = th.linear_map_floor_expr().subs(values)
    step = th.step_height_expr().subs(values)
    # nothing learned: the floor plus every cell's step is the uniform predictor's ln 2
    assert sp.simplify(floor + S * step - sp.log(2)) == 0


def test_floor_rises_to_ln2_over_n_with_state_size():
    floor = th.linear_map_floor_expr()
    assert sp.simplify(sp.limit(floor, th.S, sp.oo) - sp.log(2) / th.n) == 0
    assert sp.simplify(sp.diff(floor, th.S) * (th.n * th.S - 1) ** 2 - (th.n - 1) * sp.log(2)) == 0


def test_floor_is_the_loss_of_the_bayes_predictor_on_sampled_sequences():
    S, n = 6, 3
    M = tasks.linear_map(S, 2, jax.random.PRNGKey(0))
    seqs = np.asarray(tasks.sample_linear_map(M, jax.random.PRNGKey(1), 512, n))
    # Bayes predictor: x_0 tokens 1/2 each, later tokens the deterministic M x_{t-1}
    predicted = seqs[:, 1:]
    known = np.zeros_like(predicted, bool)
    known[:, S - 1 :] = True
    expected = np.asarray(
        (np.asarray(M) @ seqs[:, :-S].reshape(-1, n - 1, S).transpose(0, 2, 1) % 2)
        .transpose(0, 2, 1)
        .reshape(len(seqs), -1)
    )
    assert np.array_equal(predicted[:, S - 1 :], expected)
    loss = np.where(known, 0.0, math.log(2)).mean()
    assert math.isclose(loss, tasks.linear_map_floor(S, n), rel_tol=1e-12)


@given(st.integers(1, 40))
def test_search_space_is_largest_at_half_density_and_complement_symmetric(S):
    assert th.hardest_sparsities(S) == sorted({S // 2, (S + 1) // 2})
    for s in range(S + 1):
        assert math.isclose(th.search_space_log(S, s), th.search_space_log(S, S - s))


def test_exponential_lottery_quantiles_match_sampled_minima():
    expr = th.exponential_quantile_expr()
    assert sp.simplify(expr + sp.log(th.u) / (th.H * th.lam)) == 0
    rng = np.random.default_rng(0)
    for heads in (1, 4, 16):
        minima = rng.exponential(1 / 0.01, size=(20000, heads)).min(1)
        for quantile in (0.25, 0.5, 0.9):
            predicted = float(expr.subs({th.u: 1 - quantile, th.H: heads, th.lam: 0.01}))
            assert math.isclose(np.quantile(minima, quantile), predicted, rel_tol=0.05)


@settings(deadline=None)
@given(st.floats(0.01, 0.99), st.integers(1, 8), st.integers(1, 64))
def test_lottery_success_is_monotone_in_heads_and_exact_at_the_reference(surv, h0, h):
    assert math.isclose(th.lottery_success(surv, h0, h0), 1 - surv)
    assert th.lottery_success(surv, h0, h + 1) >= th.lottery_success(surv, h0, h)
    assert math.isclose(th.lottery_survival(surv, h0, 2 * h), th.lottery_survival(surv, h0, h) ** 2)


@given(st.floats(0.0, 6.0), st.integers(1, 5), st.integers(6, 300))
def test_bias_mass_is_the_softmax_mass_of_the_biased_keys(bias, support, n_keys):
    logits = np.zeros(n_keys)
    logits[:support] = bias
    a = np.exp(logits - logits.max())
    a /= a.sum()
    mass = th.bias_mass_expr().subs({th.c: bias, th.s: support, th.keys: n_keys})
    assert math.isclose(a[:support].sum(), float(mass), rel_tol=1e-9)


@settings(max_examples=50, deadline=None)
@given(survivals, st.sampled_from([1, 2, 4]))
def test_pooled_lottery_success_is_monotone_in_heads_and_exact_at_h0(fbar, H0):
    success = [1 - lottery_pooled_survival(fbar, H0, H) for H in (H0, 2 * H0, 4 * H0, 8 * H0)]
    assert success[0] == pytest.approx(1 - fbar.mean())  # H = H0 reproduces its own estimate
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(success))
    assert all(-1e-12 <= p <= 1 + 1e-12 for p in success)


@settings(max_examples=50, deadline=None)
@given(survivals, st.sampled_from([1, 2]))
def test_lottery_run_cdf_is_monotone_and_below_every_cell(fbar, H0):
    runs = [lottery_run_cdf(fbar, H0, H) for H in (H0, 2 * H0, 4 * H0)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(runs))
    # every cell must have emerged: never likelier than the least likely cell
    assert runs[0] <= (1 - fbar).min() + 1e-12
    assert runs[0] == pytest.approx(np.prod(1 - fbar))


def test_lottery_of_exponential_times_halves_the_median():
    # Fbar_1(t) = exp(-t / tau) for every cell: H heads give exp(-H t / tau)
    t = np.linspace(0, 5, 11)
    fbar = np.exp(-t)[:, None] * np.ones((1, 3))
    np.testing.assert_allclose(lottery_pooled_survival(fbar, 1, 2), np.exp(-2 * t))
