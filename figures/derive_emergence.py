"""``stagewise derive emergence``: loss levels, search-space size, the lottery model and the
attention-bias mass of spec ``emergence.md`` §2.1, §5.1-5.5 (computations in
``theory.emergence.levels``)."""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from theory.emergence import levels as th
from theory.validation import require

MAX_STATES = 1024
"""the largest state size the derivation takes (S = 1000 prints in a few seconds)."""


@dataclass(frozen=True)
class EmergenceDeriveConfig:
    """Linear map mod 2 (x_{t+1} = M x_t, s ones per row of M) learned by H attention heads."""

    S: int = 16
    """state size (cells per state), >= 2."""
    n: int = 2
    """states per sequence, >= 2."""
    s: int = 3
    """ones per row of M, 1 <= s <= S."""
    heads: int = 8
    """H, attention heads searching in parallel (lottery model), >= 1."""
    bias: float = 2.0
    """c, the logit bias added to the s true keys among the S keys of the previous state."""
    latex: bool = False
    """print LaTeX instead of text."""

    def __post_init__(self) -> None:
        # the floors enumerate the S-state rows: S = 1e5 runs past a minute
        require(2 <= self.S <= MAX_STATES, "S", self.S, f"a state size in [2, {MAX_STATES}]")
        require(self.n >= 2, "n", self.n, "states per sequence >= 2")
        require(1 <= self.s <= self.S, "s", self.s, f"ones per row in 1..S = {self.S}")
        require(self.heads >= 1, "heads", self.heads, "an integer H >= 1")
        require(self.bias >= 0, "bias", self.bias, "a logit bias c >= 0")


def derive(cfg: EmergenceDeriveConfig) -> str:
    show = sp.latex if cfg.latex else sp.sstr
    at = {th.S: cfg.S, th.n: cfg.n}
    floor, step = th.linear_map_floor_expr(), th.step_height_expr()
    C = sp.binomial(th.S, th.s)
    hardest = th.hardest_sparsities(cfg.S)
    quantile = th.exponential_quantile_expr()
    median = sp.simplify(quantile.subs({th.u: sp.Rational(1, 2), th.H: cfg.heads}))
    mass = th.bias_mass_expr()
    mass_at = mass.subs({th.c: cfg.bias, th.s: cfg.s, th.keys: cfg.S})
    lines = [
        f"Linear map mod 2: S = {cfg.S}, n = {cfg.n}, s = {cfg.s}, H = {cfg.heads}",
        "",
        f"Bayes floor L_min(S, n) = {show(floor)} = {float(floor.subs(at)):.6g}",
        f"Step height (one output cell learned) = {show(step)} = {float(step.subs(at)):.6g}",
        f"  {cfg.S} steps from L_min + S step = {float((floor + cfg.S * step).subs(at)):.6g} "
        f"down to L_min",
        "",
        f"Search space per output cell C(S, s) = {show(C)} = {C.subs({th.S: cfg.S, th.s: cfg.s})}"
        f",  ln C = {th.search_space_log(cfg.S, cfg.s):.6g}",
        f"  hardest sparsities (argmax_s C(S, s)): s = {', '.join(map(str, hardest))}, "
        f"C = {C.subs({th.S: cfg.S, th.s: hardest[0]})}, "
        f"ln C = {th.search_space_log(cfg.S, hardest[0]):.6g}",
        "",
        "Lottery model: H independent heads, survival Fbar_H = Fbar_1^H",
        f"  exponential search times (rate lambda): q-quantile t = {show(quantile)} (u = 1 - q)",
        f"  median at H = {cfg.heads}: t = {show(median)}",
        f"  a reference survival of 1/2 with one head becomes "
        f"{float(th.lottery_survival(0.5, 1, cfg.heads)):.6g} with H = {cfg.heads}",
        "",
        f"Attention bias: mass on the s true keys = {show(mass)}",
        f"  at c = {cfg.bias:.6g}, s = {cfg.s}, n_keys = S = {cfg.S}: {float(mass_at):.6g}",
    ]
    return "\n".join(lines)
