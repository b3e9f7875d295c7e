"""Symmetries of sparse modular addition and the clustering-head fixed points
(spec clustering_head.md §5.1, §5.2, §5.4, §5.6; all [derived], not the paper's statements).

- The invariance group G = Sigma_k x Sigma_{L-k} acts on the rows of the positional embeddings P
  (permuting the first k positions among themselves and the distractors among themselves). The data
  law and y are invariant, so the population loss R is G-invariant and grad R is G-equivariant.
- The symmetric subspace S = {P[1] = ... = P[k], P[k+1] = ... = P[L]} is the fixed space of G on P
  (all other parameters are fixed by G). Its orthogonal projector averages P within each block.
- Stationarity (symmetric criticality, finite group acting linearly): at theta in S, grad R(theta)
  is G-fixed, hence lies in S; so S is invariant under population gradient flow, full-population GD
  and Adam, and a critical point of R restricted to S is a critical point of R.
- A clustering head collapses the inputs onto at most binom(k + p - 1, p - 1) clusters (first-k
  histograms); a perfect one merges them into p clusters.
- The gain-free normalisation N(xi) = sqrt(d) xi / ||xi|| has ||dN/dxi||_op = sqrt(d) / ||xi||.

sympy and numpy only.
"""

from __future__ import annotations

import itertools
import math
from typing import cast

import numpy as np
import sympy as sp

from theory.validation import require

STATIONARITY = (
    "R(gP) = R(P) for g in Sigma_k x Sigma_{L-k} acting on the rows of P  =>  "
    "grad R(g theta) = g grad R(theta)  =>  for theta in S = Fix(G): grad R(theta) in S; "
    "S is invariant under population gradient flow, full-population GD and Adam, and "
    "critical points of R|_S are critical points of R (symmetric criticality)."
)


def _check(length: int, sparsity: int) -> None:
    require(length >= 1, "length", length, "an integer L >= 1")
    require(1 <= sparsity <= length, "sparsity", sparsity, f"an integer 1 <= k <= L = {length}")


def group_order(length: int, sparsity: int) -> int:
    """|G| = k! (L - k)!."""
    _check(length, sparsity)
    return math.factorial(sparsity) * math.factorial(length - sparsity)


def group_generators(length: int, sparsity: int) -> list[np.ndarray]:
    """Adjacent transpositions inside each block, as permutations of 0..L-1 (they generate G)."""
    _check(length, sparsity)
    gens = []
    for lo, hi in ((0, sparsity), (sparsity, length)):
        for t in range(lo, hi - 1):
            perm = np.arange(length)
            perm[[t, t + 1]] = perm[[t + 1, t]]
            gens.append(perm)
    return gens


def group_elements(length: int, sparsity: int):
    """Every element of G as a permutation of 0..L-1 (only for small L: |G| = k!(L-k)!)."""
    _check(length, sparsity)
    require(
        group_order(length, sparsity) <= 10**6,
        "length",
        length,
        "small enough that k!(L-k)! <= 1e6",
    )
    for first in itertools.permutations(range(sparsity)):
        for rest in itertools.permutations(range(sparsity, length)):
            yield np.array(first + rest)


def symmetric_projector(length: int, sparsity: int) -> np.ndarray:
    """The orthogonal projector Pi (L x L) onto S acting on the rows of P: Pi @ P averages the
    first k rows and the last L - k rows (the average of g P over G)."""
    _check(length, sparsity)
    Pi = np.zeros((length, length))
    Pi[:sparsity, :sparsity] = 1.0 / sparsity
    if length > sparsity:
        Pi[sparsity:, sparsity:] = 1.0 / (length - sparsity)
    return Pi


def subspace_dimension(length: int, sparsity: int, dim: int = 2) -> int:
    """dim S for P in R^{L x d}: d per block (d if k = L)."""
    _check(length, sparsity)
    return dim * (2 if length > sparsity else 1)


def symmetry_defect(position: np.ndarray, sparsity: int) -> float:
    """max_{t,t'<=k} ||P[t]-P[t']|| + max_{t,t'>k} ||P[t]-P[t']|| (spec §6); 0 exactly on S."""

    def spread(block):
        if len(block) < 2:
            return 0.0
        return float(np.max(np.linalg.norm(block[:, None] - block[None], axis=-1)))

    position = np.asarray(position, float)
    return spread(position[:sparsity]) + spread(position[sparsity:])


def cluster_count(sparsity: int, modulus: int) -> int:
    """binom(k + p - 1, p - 1): first-k histograms, the clusters of a clustering head (§5.1)."""
    require(sparsity >= 1, "sparsity", sparsity, "an integer k >= 1")
    require(modulus >= 2, "modulus", modulus, "an integer p >= 2")
    return math.comb(sparsity + modulus - 1, modulus - 1)


def cluster_geometry(sparsity: int) -> list[tuple[sp.Rational, int]]:
    """p = 2: an ideal clustering head puts the histogram with n_1 ones at the fraction n_1 / k of
    the segment from V z_0 to V z_1, with label n_1 mod 2 (§5.1): [(fraction, label)]."""
    require(sparsity >= 1, "sparsity", sparsity, "an integer k >= 1")
    # sympy's stub types Rational(p, q) as possibly NaN or zoo; with q = k >= 1 it is a Rational
    return [(cast(sp.Rational, sp.Rational(n1, sparsity)), n1 % 2) for n1 in range(sparsity + 1)]


def normalisation_jacobian(dim: int = 2):
    """(xi symbols, dN/dxi) of N(xi) = sqrt(d) xi / ||xi|| (the RMS norm without its epsilon)."""
    require(dim >= 1, "dim", dim, "an integer >= 1")
    symbols = sp.symbols(f"xi1:{dim + 1}", real=True)
    xi = sp.Matrix(symbols)
    r = sp.sqrt(sum(x**2 for x in symbols))
    return xi, (xi * (sp.sqrt(dim) / r)).jacobian(xi)


def normalisation_operator_norm(dim: int = 2):
    """||dN/dxi||_op = sqrt(d) / ||xi|| (§5.4), derived from the structure of the symbolic
    Jacobian: J xi = 0 and J = c (I - xi xi^T / ||xi||^2) with c read off a direction orthogonal
    to xi, both checked by simplification; J is then symmetric with eigenvalues 0 (on xi) and c
    (d - 1 times), so its operator norm is |c|. (sympy's general eigenvalues do not simplify at
    d = 4.) For d = 1, N is the sign and its derivative 0 away from xi = 0."""
    xi, J = normalisation_jacobian(dim)
    if dim == 1:
        r = sp.sqrt((xi.T * xi)[0])  # J r^3 = r^2 - xi^2: zero wherever r > 0
        require(sp.simplify(J[0, 0] * r**3) == 0, "dim", dim, "a Jacobian that vanishes off 0")
        return xi, sp.Integer(0)
    first, second = cast(sp.Expr, xi[0]), cast(sp.Expr, xi[1])
    across = sp.Matrix([second, -first, *([0] * (dim - 2))])  # orthogonal to xi
    c = sp.simplify((J * across)[0] / across[0])
    projection = sp.eye(dim) - xi * xi.T / (xi.T * xi)[0]
    require(
        sp.simplify(J - c * projection) == sp.zeros(dim, dim)
        and sp.simplify(J * xi).is_zero_matrix,
        "dim",
        dim,
        "a Jacobian of the form c (I - xi xi^T / ||xi||^2)",
    )
    return xi, sp.Abs(c)
