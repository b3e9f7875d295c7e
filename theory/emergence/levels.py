"""Loss levels, search-space size and the lottery model of emergence
(spec emergence.md §2.1, §5.1-5.5; every statement [derived], the paper gives no equations).

- Linear-map floor (§2.1, §5.5.1): a sequence of n states x_0, M x_0, ... (S binary cells each) has
  n S - 1 predicted tokens; only the S - 1 tokens of x_0 after the first are random (ln 2 each), the
  later states are functions of the context, so L_min(S, n) = (S - 1) ln 2 / (n S - 1).
- Staircase (§5.1, §5.5.2): a learned output cell removes its ln 2 from each of the n - 1 later
  states, a drop of (n - 1) ln 2 / (n S - 1) of the aggregate loss; with per-cell emergence times
  T_i the expected aggregate loss is L_min + step * sum_i P(T_i > t).
- Search space (§5.2, §5.5.3): C(S, s) candidate supports per output cell, largest at s = S/2,
  symmetric under s -> S - s.
- Lottery (§5.3, §5.5.4): H heads searching independently, each with survival Fbar_1(t), give
  the first success with survival Fbar_H = Fbar_1^H; for exponential times with rate lambda the
  q-quantile is ln(1 / (1 - q)) / (H lambda), so the median falls like 1/H. Applied cell by cell
  from a measured reference H0: Fbar_{i,H} = Fbar_{i,H0}^(H/H0), pooled over the cells (the
  fraction of (seed, cell) not emerged) or multiplied (every cell of a run emerged).
- Attention bias (§5.4): c added to the logits of the s true keys among n equal logits puts mass
  e^c s / (e^c s + n - s) on the true support.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike

S, n, s, t, u, H, lam, c, keys = sp.symbols("S n s t u H lambda c n_keys", positive=True)
"""u: a survival level 1 - q of the q-quantile."""


def linear_map_floor_expr() -> sp.Expr:
    """L_min(S, n): Bayes loss per predicted token, from the count of random tokens."""
    random_tokens = S - 1
    predicted_tokens = n * S - 1
    return random_tokens * sp.log(2) / predicted_tokens


def step_height_expr() -> sp.Expr:
    """Drop of the aggregate loss when one output cell is learned in every later state."""
    return (n - 1) * sp.log(2) / (n * S - 1)


def expected_staircase(floor: float, step: float, survival_per_cell: ArrayLike) -> float:
    """E[L(t)] = L_min + step * sum_i P(T_i > t), survival_per_cell = (P(T_i > t))_i."""
    return floor + step * float(np.sum(survival_per_cell))


def search_space_log(S_: int, s_: int) -> float:
    """ln C(S, s), the per-cell search-space size of the linear map (§5.2)."""
    return float(sp.log(sp.binomial(S_, s_)))


def hardest_sparsities(S_: int) -> list[int]:
    """argmax_s C(S, s): floor(S/2) and ceil(S/2)."""
    sizes = {k: sp.binomial(S_, k) for k in range(S_ + 1)}
    top = max(sizes.values())
    return [k for k, v in sizes.items() if v == top]


def lottery_survival(
    survival_reference: ArrayLike, heads_reference: ArrayLike, heads: ArrayLike
) -> np.ndarray:
    """Fbar_H = Fbar_{H0}^(H / H0): the survival of H independent searchers from that of H0
    (elementwise, broadcast)."""
    reference = np.asarray(survival_reference, float)
    return reference ** (np.asarray(heads, float) / np.asarray(heads_reference, float))


def lottery_success(
    survival_reference: ArrayLike, heads_reference: ArrayLike, heads: ArrayLike
) -> np.ndarray:
    """P(emerged by t) = 1 - Fbar_{H0}(t)^(H / H0) (elementwise, broadcast)."""
    return 1 - lottery_survival(survival_reference, heads_reference, heads)


def lottery_pooled_survival(
    cell_survival_reference: ArrayLike, heads_reference: ArrayLike, heads: ArrayLike
) -> np.ndarray:
    """Lottery model cell by cell, pooled over the cells (last axis): mean_i Fbar_{i,H0}^(H/H0),
    the fraction of (seed, cell) not emerged with H heads."""
    return np.mean(lottery_survival(cell_survival_reference, heads_reference, heads), axis=-1)


def lottery_run_cdf(
    cell_survival_reference: ArrayLike, heads_reference: ArrayLike, heads: ArrayLike
) -> np.ndarray:
    """Lottery model for independent cells (last axis): P(every cell emerged) =
    prod_i (1 - Fbar_{i,H0}^(H/H0))."""
    return np.prod(lottery_success(cell_survival_reference, heads_reference, heads), axis=-1)


def exponential_quantile_expr() -> sp.Expr:
    """The q-quantile t with Fbar_1(t)^H = u = 1 - q for Fbar_1 = exp(-lambda t), by sympy."""
    (root,) = sp.solve(sp.Eq(sp.exp(-lam * t) ** H, u), t)
    return sp.simplify(root)


def bias_mass_expr() -> sp.Expr:
    """Attention mass on the s true keys among n_keys equal logits when c is added to them."""
    return sp.exp(c) * s / (sp.exp(c) * s + keys - s)
