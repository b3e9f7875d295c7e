"""Property tests of the clustering-head symmetric subspace S (issue 17 item 5; spec
clustering_head.md §5.2, theory/clustering_head/symmetry.py) over the sequence length L, the
sparsity k and the modulus p.

G = Sigma_k x Sigma_{L-k} permutes the rows of the positional embeddings P within the first k
positions and within the last L - k; S = {P[1] = ... = P[k], P[k+1] = ... = P[L]} = Fix(G). The
statements about the risk are about the population risk R (mean cross-entropy over all p^L
sequences, a G-invariant data set), in float64. Each test names, in a comment, the mutation it
catches."""

from __future__ import annotations

import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simulate.clustering_head.model import ClusteringHead, init_clustering_head, rms_norm
from simulate.clustering_head.task import all_sequences, histograms, labels
from simulate.clustering_head.training import cross_entropy
from theory.clustering_head import symmetry as cs

FAST = settings(max_examples=8, derandomize=True, deadline=None)
CHEAP = settings(max_examples=40, derandomize=True, deadline=None)
MANY = settings(max_examples=100, derandomize=True, deadline=None)

WIDTH = 3
"""FFN width m of the test models (the symmetry does not involve the FFN)."""
MODEL_LENGTHS = (3, 4)
"""L of the model tests: L >= 3 so that a block of size >= 2 exists; each (L, p) is one compile."""

# One compiled function per input shape (L, p), shared by every example and test of that shape.
_risk_and_gradient = jax.jit(jax.value_and_grad(cross_entropy))
_embeddings = jax.jit(lambda model, x: jax.vmap(model.sequence_embedding)(x))

coordinates = st.floats(-3.0, 3.0, allow_nan=False, allow_subnormal=False)


@st.composite
def length_and_sparsity(draw, lengths=(1, 6)):
    length = draw(st.integers(*lengths))
    return length, draw(st.integers(1, length))


@st.composite
def model_cases(draw, lengths=MODEL_LENGTHS):
    """(L, k, p, parameter seed, an element g of G drawn as one permutation per block)."""
    length, k = draw(length_and_sparsity(lengths))
    p = draw(st.sampled_from([2, 3]))
    seed = draw(st.integers(0, 2**31 - 1))
    first = draw(st.permutations(range(k)))
    rest = draw(st.permutations(range(k, length)))
    return length, k, p, seed, np.array(list(first) + list(rest))


def blocks(length: int, k: int) -> list[range]:
    return [b for b in (range(k), range(k, length)) if len(b) > 0]


def tie_constraints(length: int, k: int) -> np.ndarray:
    """The definition of S as equations on the rows of P: P[t] - P[t+1] = 0 inside each block."""
    rows = []
    for block in blocks(length, k):
        for t in list(block)[:-1]:
            row = np.zeros(length)
            row[t], row[t + 1] = 1.0, -1.0
            rows.append(row)
    return np.array(rows).reshape(-1, length)


def block_preserving_permutations(length: int, k: int) -> set[tuple[int, ...]]:
    """G from its definition: every permutation of 0..L-1 that maps the first k positions onto
    themselves (brute force over all L!)."""
    return {g for g in itertools.permutations(range(length)) if set(g[:k]) == set(range(k))}


def permutation_matrix(g) -> np.ndarray:
    """(Q P) = P[g]: the action of g on the rows of P."""
    return np.eye(len(g))[list(g)]


@functools.lru_cache
def population(length: int, k: int, p: int):
    x = jnp.asarray(all_sequences(length, p))
    return x, labels(x, k, p)


def risk(model: ClusteringHead, x, y) -> float:
    return float(_risk_and_gradient(model, x, y)[0])


def risk_gradient(model: ClusteringHead, x, y) -> ClusteringHead:
    return _risk_and_gradient(model, x, y)[1]


def random_model(length: int, p: int, seed: int) -> ClusteringHead:
    """Random float64 parameters (the paper's init scales, V_e = p + 1 as in the paper)."""
    return init_clustering_head(jax.random.PRNGKey(seed), p + 1, length, WIDTH, 2, jnp.float64)


def with_positions(model: ClusteringHead, position) -> ClusteringHead:
    return eqx.tree_at(lambda m: m.position, model, jnp.asarray(position))


def tied(model: ClusteringHead, k: int) -> ClusteringHead:
    """A random point of S: each block's rows replaced by one random row of that block."""
    P = np.asarray(model.position)
    return with_positions(model, np.where(np.arange(len(P))[:, None] < k, P[0], P[-1]))


# -- the projector ------------------------------------------------------------------------------


@CHEAP
@given(length_and_sparsity(), st.integers(1, 3))
def test_projector_is_orthogonal_with_rank_dim_S_from_the_tie_equations_and_burnside(case, d):
    """Pi^2 = Pi, Pi^T = Pi, and rank(Pi (x) I_d) = dim S computed twice from definitions: the
    null space of the tie equations, and dim Fix(G) = d * mean_g #fixed points(g) (Burnside)."""
    # catches: a projector that drops or adds a tie (rank off by d), a non-symmetric averaging
    # (oblique projector), and a wrong subspace_dimension (e.g. 2d also when k = L)
    length, k = case
    Pi = cs.symmetric_projector(length, k)
    assert np.allclose(Pi @ Pi, Pi, atol=1e-14) and np.array_equal(Pi, Pi.T)
    C = tie_constraints(length, k)
    dim_ties = d * (length - (np.linalg.matrix_rank(C) if len(C) else 0))
    G = block_preserving_permutations(length, k)
    dim_burnside = d * sum(int(np.sum(np.array(g) == np.arange(length))) for g in G) / len(G)
    rank = np.linalg.matrix_rank(np.kron(Pi, np.eye(d)))
    assert rank == dim_ties == dim_burnside == cs.subspace_dimension(length, k, d)
    # range(Pi) lies inside the null space of the ties (so with equal dimension it is S)
    assert np.allclose(C @ Pi, 0.0, atol=1e-14)


@CHEAP
@given(length_and_sparsity())
def test_complement_of_S_is_spanned_by_the_tie_differences(case):
    """S^perp = range(I - Pi) = span{e_t - e_{t+1}: t, t+1 in one block}, of dimension
    L - (number of blocks) per coordinate; G fixes no nonzero vector of it."""
    # catches: a projector whose complement keeps a block mean (I - Pi would not kill it), or
    # one that mixes the blocks (cross-block differences would enter the complement)
    length, k = case
    Pi = cs.symmetric_projector(length, k)
    C = tie_constraints(length, k)
    complement = np.eye(length) - Pi
    assert np.linalg.matrix_rank(complement) == length - len(blocks(length, k)) == len(C)
    if len(C):
        assert np.allclose(complement @ C.T, C.T, atol=1e-14)
    group_mean = np.mean([permutation_matrix(g) for g in cs.group_elements(length, k)], axis=0)
    assert np.allclose(group_mean @ complement, 0.0, atol=1e-14)


@st.composite
def tied_and_untied(draw):
    """(L, k, a tied P, the same P with one row of a block of size >= 2 moved, that row)."""
    length, k = draw(length_and_sparsity((3, 7)))
    values = draw(hnp.arrays(np.float64, (2, 2), elements=coordinates))
    P = np.where(np.arange(length)[:, None] < k, values[0], values[1])
    row = draw(st.sampled_from([t for b in blocks(length, k) if len(b) >= 2 for t in b]))
    shift = draw(hnp.arrays(np.float64, (2,), elements=coordinates).filter(lambda v: v @ v > 1e-4))
    moved = P.copy()
    moved[row] += shift
    return length, k, P, moved, row


@CHEAP
@given(tied_and_untied())
def test_projector_fixes_exactly_the_tied_configurations(case):
    """Pi P = P for a random tied P; a random untied P (one row of a tied P moved) is moved by
    Pi, by exactly the shift times (1 - 1/block size) on that row."""
    # catches: dropping one tie (the untied row would be left fixed) and a projector that is
    # not the identity on S (e.g. one that also averages across the blocks)
    length, k, P, moved, row = case
    Pi = cs.symmetric_projector(length, k)
    assert np.allclose(Pi @ P, P, atol=1e-14)
    assert cs.symmetry_defect(P, k) == 0.0
    size = k if row < k else length - k
    assert np.allclose((moved - Pi @ moved)[row], (moved - P)[row] * (1 - 1 / size), atol=1e-12)
    assert cs.symmetry_defect(Pi @ moved, k) < 1e-12 < cs.symmetry_defect(moved, k)


def test_projector_is_the_identity_when_every_block_has_one_row():
    # catches: a projector that ties positions across blocks when nothing is tied inside them
    assert np.array_equal(cs.symmetric_projector(2, 1), np.eye(2))
    assert np.array_equal(cs.symmetric_projector(1, 1), np.eye(1))


# -- the group --------------------------------------------------------------------------------


@CHEAP
@given(length_and_sparsity())
def test_group_elements_generators_and_order_match_the_definition_of_G(case):
    """group_elements is the set of block-preserving permutations (brute force over L!), of
    order k!(L-k)!; the adjacent in-block transpositions generate it; Pi is its average."""
    # catches: a group that lets one position change block, misses elements (order), or
    # generators that generate a subgroup; and a projector that is not the G-average
    length, k = case
    G = block_preserving_permutations(length, k)
    elements = [tuple(int(i) for i in g) for g in cs.group_elements(length, k)]
    assert set(elements) == G and len(elements) == len(G)
    assert cs.group_order(length, k) == len(G) == math.factorial(k) * math.factorial(length - k)
    generators = [tuple(int(i) for i in g) for g in cs.group_generators(length, k)]
    for g in generators:
        moved = [t for t in range(length) if g[t] != t]
        assert len(moved) == 2 and moved[1] == moved[0] + 1 and g in G
    closure, frontier = {tuple(range(length))}, [tuple(range(length))]
    while frontier:
        h = frontier.pop()
        for g in generators:
            gh = tuple(h[i] for i in g)
            if gh not in closure:
                closure.add(gh)
                frontier.append(gh)
    assert closure == G
    group_mean = np.mean([permutation_matrix(g) for g in G], axis=0)
    assert np.allclose(cs.symmetric_projector(length, k), group_mean, atol=1e-14)


# -- the risk -----------------------------------------------------------------------------------


def _invariance(case):
    length, k, p, seed, g = case
    model = random_model(length, p, seed)
    x, y = population(length, k, p)
    at_theta = risk(model, x, y)
    assert risk(with_positions(model, model.position[g]), x, y) == pytest.approx(
        at_theta, rel=1e-12
    )
    if k < length:
        # control: transpositions across the blocks are not in G and move R (the largest move,
        # as one swap alone can move it by as little as 1e-7 at the paper's init scales)
        moves = []
        for i, j in itertools.product(range(k), range(k, length)):
            swap = np.arange(length)
            swap[[i, j]] = [j, i]
            moves.append(abs(risk(with_positions(model, model.position[swap]), x, y) - at_theta))
        assert max(moves) > 1e-9


@FAST
@given(model_cases())
def test_population_risk_is_invariant_under_G_at_random_parameters(case):
    """R(gP) = R(P) for g in G at random (not symmetric) parameters; a cross-block swap moves
    R."""
    # catches: labels or a model that distinguish positions inside a block (e.g. a label that
    # reads position k+1, an attention that is not permutation-equivariant); the control catches
    # a risk that ignores P altogether
    _invariance(case)


@pytest.mark.slow
@MANY
@given(model_cases(lengths=(3, 6)))
def test_population_risk_is_invariant_under_G_many_examples(case):
    _invariance(case)


def _criticality(case):
    length, k, p, seed, _ = case
    x, y = population(length, k, p)
    Pi = cs.symmetric_projector(length, k)
    model = tied(random_model(length, p, seed), k)
    g = np.asarray(risk_gradient(model, x, y).position)
    assert np.linalg.norm(g) > 1e-8
    assert np.linalg.norm(g - Pi @ g) <= 1e-10 * np.linalg.norm(g)
    # control: off S (one row of a block of size >= 2 moved) the gradient leaves S
    row = 0 if k >= 2 else length - 1
    off = with_positions(model, model.position.at[row].add(jnp.array([0.5, -0.3])))
    g_off = np.asarray(risk_gradient(off, x, y).position)
    assert np.linalg.norm(g_off - Pi @ g_off) > 1e-6 * np.linalg.norm(g_off)


@FAST
@given(model_cases())
def test_population_gradient_at_a_point_of_S_lies_in_S(case):
    """Symmetric criticality: at a random theta in S, Pi grad_P R(theta) = grad_P R(theta) to
    1e-10 relative (the other parameters are fixed by G). So grad_P R = 0 iff its block sums,
    the gradient of R restricted to S, vanish: critical points of R|_S are critical points of
    R. Control: off S the gradient is not in S."""
    # catches: a projector that ties the wrong rows (e.g. blocks split at k+1), and a gradient
    # that is not G-equivariant; the control catches a projector that is the identity
    _criticality(case)


@pytest.mark.slow
@MANY
@given(model_cases(lengths=(3, 6)))
def test_population_gradient_at_a_point_of_S_lies_in_S_many_examples(case):
    _criticality(case)


def optimiser_step(optimiser: optax.GradientTransformation):
    """One compiled update theta <- theta + optimiser.update(grad) (one compile per shape)."""

    def step(model, state, gradient):
        # optax's bias correction mixes an int32 count with floats, which the suite's strict
        # promotion rejects (as in simulate.train)
        with jax.numpy_dtype_promotion("standard"):
            updates, state = optimiser.update(gradient, state)
        return optax.apply_updates(model, updates), state

    return jax.jit(step)


OPTIMISER_STEPS = [(opt, optimiser_step(opt)) for opt in (optax.sgd(0.5), optax.adam(0.05))]


@FAST
@given(model_cases())
def test_population_gradient_descent_and_adam_steps_stay_in_S(case):
    """S is invariant under full-population GD and Adam: three steps of each from a random
    point of S keep P tied (symmetry defect at rounding level) while moving it."""
    # catches: an update that treats equal gradient coordinates differently (Adam's
    # per-coordinate normalisation must map a tied gradient to a tied update), and any loss
    # term that breaks the tie (the defect would grow from the first step)
    length, k, p, seed, _ = case
    x, y = population(length, k, p)
    start = tied(random_model(length, p, seed), k)
    for optimiser, step in OPTIMISER_STEPS:
        model, state = start, optimiser.init(start)
        for _ in range(3):
            model, state = step(model, state, risk_gradient(model, x, y))
        P = np.asarray(model.position)
        assert cs.symmetry_defect(P, k) <= 1e-12 * np.abs(P).max()
        assert np.abs(P - np.asarray(start.position)).max() > 1e-6


@FAST
@given(model_cases())
def test_sequence_embedding_at_a_point_of_S_is_constant_on_G_orbits_of_inputs(case):
    """At theta in S, xi(x[g]) = xi(x) for g in G acting on the positions of x, so xi depends
    on the first-k and distractor histograms only; cluster_count(k, p) counts the first-k
    histograms (the G-orbits of first-k prefixes in the population)."""
    # catches: a point of S that still separates positions inside a block (a projector that
    # left a row free), and a cluster count that is not binom(k + p - 1, p - 1)
    length, k, p, seed, g = case
    x, _ = population(length, k, p)
    model = tied(random_model(length, p, seed), k)
    xi = np.asarray(_embeddings(model, x))
    assert np.allclose(np.asarray(_embeddings(model, x[:, g])), xi, rtol=1e-12, atol=1e-14)
    prefixes = {tuple(sorted(row)) for row in np.asarray(x[:, :k]).tolist()}
    assert cs.cluster_count(k, p) == len(prefixes) == len(histograms(k, p))


# -- the normalisation ----------------------------------------------------------------------------


_normalisation_jacobian = jax.jit(jax.jacfwd(lambda z: rms_norm(z, 0.0)))
"""dN/dxi of the model's normalisation without its 1e-5 (one compile per d)."""


@functools.lru_cache
def symbolic_operator_norm(d: int):
    xi, norm = cs.normalisation_operator_norm(d)
    return sp.lambdify(xi, norm)


@st.composite
def embedding_points(draw):
    d = draw(st.integers(1, 5))
    xi = draw(hnp.arrays(np.float64, (d,), elements=coordinates).filter(lambda v: v @ v > 1e-2))
    return d, xi


@settings(max_examples=20, derandomize=True, deadline=None)
@given(embedding_points())
def test_normalisation_jacobian_has_eigenvalue_0_along_xi_and_sqrt_d_over_norm_across(case):
    """dN/dxi of N(xi) = sqrt(d) xi / ||xi|| is symmetric with eigenvalue 0 on xi and
    sqrt(d)/||xi|| on the d - 1 directions orthogonal to xi, so ||dN/dxi||_op = sqrt(d)/||xi||
    for d >= 2 and 0 for d = 1, equal to normalisation_operator_norm's sympy value for every d
    (its structural derivation; sympy's general eigenvalues did not simplify at d = 4)."""
    # catches: a normalisation with a gain or the wrong sqrt(d) (eigenvalue scale), and an
    # operator norm formula in the wrong power of ||xi||
    d, xi = case
    J = np.asarray(_normalisation_jacobian(jnp.asarray(xi)))
    r = float(np.linalg.norm(xi))
    assert np.allclose(J, J.T, atol=1e-12)
    assert np.allclose(J @ xi, 0.0, atol=1e-12)
    expected = np.sort(np.r_[0.0, np.full(d - 1, math.sqrt(d) / r)])
    assert np.allclose(np.sort(np.linalg.eigvalsh(J)), expected, rtol=1e-10, atol=1e-12)
    symbolic = symbolic_operator_norm(d)(*xi)
    assert symbolic == pytest.approx(np.linalg.norm(J, 2), rel=1e-10, abs=1e-12)
