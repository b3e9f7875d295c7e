"""What the focus-dilution figures share (spec ``focus_dilution.md`` §4, §6, §7): the population
flow setting, the theory's predictions for it, and the drawing of stages and predictions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulate.focus_dilution.flow import (
    ONSET_RULES,
    manifold_trajectory,
    redistribution,
    stage_four_point,
)
from theory.focus_dilution.manifold import manifold_parameters, predicted_stage_times
from theory.focus_dilution.population import (
    attention,
    parameter_loss,
    transition_matrix,
    validate_pi,
)
from theory.focus_dilution.stages import entropy, second_critical_point
from theory.validation import require

PI_DEFAULT = (0.75, 0.19, 0.05, 0.01)
"""spec §2.3 / §7 synthetic experiment A."""
STAGES = ("I", "II", "III", "IV")
STAGE_COLORS = ("#dbe9f6", "#fde0c5", "#d9f0d3", "#eadcf0")
TOKEN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


@dataclass(frozen=True)
class FlowSetting:
    """Population gradient flow of spec §4 (shared fields of the flow figures)."""

    pi: tuple[float, ...] = PI_DEFAULT
    """stationary law pi (entries > 0 summing to 1); token 0 is the most frequent."""
    lam: float = 0.5
    """lambda, repeat probability of P = lambda I + (1 - lambda) 1 pi^T, in [0, 1)."""
    eps: float = 1e-3
    """init scale: every entry of W0, WQ, WK, W1 starts i.i.d. N(0, eps^2)."""
    seeds: int = 3
    """init seeds (vmapped in one compiled program)."""
    seed: int = 0
    """first init seed."""
    width: int = 16
    """m, embedding width."""
    key_width: int = 16
    """m_k, query/key width."""
    samples: int = 1500
    """saved time points per run."""
    quick: bool = False
    """CPU-sized setting (see the figure's help)."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/FIGURE_ID/)."""
    quiet: bool = False
    """no progress bar."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        object.__setattr__(self, "pi", tuple(float(p) for p in self.pi))
        validate_pi(self.pi)
        require(0 <= self.lam < 1, "lam", self.lam, "a repeat probability in [0, 1)")
        require(0 < self.eps < 1, "eps", self.eps, "an init scale in (0, 1)")
        require(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(
            self.width >= 2,
            "width",
            self.width,
            "an embedding width >= 2 (Stage IV opens a second embedding direction)",
        )
        require(self.key_width >= 1, "key_width", self.key_width, "an integer >= 1")
        require(self.samples >= 10, "samples", self.samples, "at least 10 saved times")

    def chain(self):
        pi = validate_pi(self.pi)
        return pi, transition_matrix(pi, self.lam)

    def seed_ids(self, n: int | None = None) -> list[int]:
        return list(range(self.seed, self.seed + (n or self.seeds)))


def stage_three_delay(pi, P) -> float:
    """Time from onset II to onset III along the reduced manifold flow (spec §5.4) from
    ``theta_c^1``: Stage III is not an escape, so its delay after Stage II is ``O(1)`` in ``eps`` and
    is read off the reduced system (onset rules of ``ONSET_RULES`` with the manifold attention)."""
    ts, xs = manifold_trajectory(pi, P, kappa_seed=1e-4, rest_tol=1e-8)
    h = int(np.argmax(pi))
    A = np.array([attention(pi, x[-2] * x[-1] * np.outer(x[: pi.size], x[: pi.size])) for x in xs])
    H = (-np.sum(A * np.log(np.clip(A, 1e-300, None)), axis=-1)).max(axis=-1)
    focus = A[:, h, h]
    k2 = int(np.argmax(focus > (pi[h] + 1) / 2))
    after = np.nonzero(H[k2:] > entropy(pi))[0]
    if not focus.max() > (pi[h] + 1) / 2 or after.size == 0:
        return math.nan
    return float(ts[k2 + after[0]] - ts[k2])


def predictions(pi, P, eps: float, qk_scale: float = 1.0) -> dict:
    """The theory's numbers for one setting (spec §5): rates, ``theta_c^1``, the Stage-IV rest point
    of the manifold flow, plateau levels and stage onsets (``t_III = t_II +`` the reduced-flow
    delay)."""
    pi = validate_pi(pi)
    point = stage_four_point(pi, P)
    times = predicted_stage_times(pi, P, eps, point.rate, qk_scale=qk_scale)
    L_IV = float(parameter_loss(manifold_parameters(point.state, 1, 1), pi, P))
    delay = stage_three_delay(pi, P)
    return {
        "sigma": times.sigma,
        "c": times.c,
        "two_c": 2 * times.c,
        "mu_IV": times.mu_IV,
        "g": float(second_critical_point(pi).g),
        "ln_d": math.log(pi.size),
        "H_pi": float(entropy(pi)),
        "L_IV": L_IV,
        "onsets": [times.t_I, times.t_II, times.t_II + delay, times.t_IV],
        "stage_three_delay": delay,
        "rule": "t_I = ln(1/eps)/sigma, t_II = t_I + ln(1/eps)/c, t_III = t_II + (onset III - "
        "onset II on the reduced manifold flow), t_IV = t_II + ln(1/eps)/mu_IV "
        "(eps_perp = eps; intercepts O(1), not predicted)",
    }


def onset_rules() -> dict:
    return dict(ONSET_RULES)


def shade_stages(ax, onsets, t_end: float, label: bool = True) -> None:
    """Shade the measured stages: stage k from its onset to the next (the last to ``t_end``)."""
    onsets = np.asarray(onsets, dtype=float)
    edges = [*list(onsets), t_end]
    for k in range(len(onsets)):
        a, b = edges[k], next((e for e in edges[k + 1 :] if np.isfinite(e)), t_end)
        if np.isfinite(a) and b > a:
            ax.axvspan(
                a,
                b,
                color=STAGE_COLORS[k],
                alpha=0.6,
                lw=0,
                label=f"stage {STAGES[k]} (measured)" if label else None,
            )


def mark_predicted(ax, onsets, label: bool = True) -> None:
    """Vertical dashed lines at the predicted onsets (nan, or "nan" from summary.json: none)."""
    for k, t in enumerate(np.asarray(onsets, dtype=float)):
        if np.isfinite(t):
            ax.axvline(
                t,
                color="k",
                ls="--",
                lw=0.8,
                label="predicted onsets" if label and k == 0 else None,
            )
            ax.annotate(
                STAGES[k],
                (t, 1.0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def measured_plateau(ts, loss, a: float, b: float) -> float:
    """Loss where ``|dL/dt|`` is smallest strictly between times ``a`` and ``b`` (nan if no
    saved time lies there)."""
    ts, loss = np.asarray(ts, float), np.asarray(loss, float)
    idx = np.nonzero((ts > a) & (ts < b))[0]
    if idx.size < 3 or not (np.isfinite(a) and np.isfinite(b)):
        return math.nan
    slope = np.abs(np.gradient(loss[idx], ts[idx]))
    return float(loss[idx[np.argmin(slope)]])


def plateaus(ts, loss, onsets) -> list[float]:
    """Measured loss plateaus before stages I, II and IV: ``L(0)`` (the start, ``ln d``), the
    flattest point between onsets I and II (``H(pi)``) and between onsets III and IV (the Stage-IV
    rest point)."""
    t1, t2, t3, t4 = onsets
    return [
        float(np.asarray(loss)[0]),
        measured_plateau(ts, loss, t1, t2),
        measured_plateau(ts, loss, t3, t4),
    ]


def growth_of_D(run, onset_one: float) -> np.ndarray:
    """``D(t) - D(onset I)``: the redistribution coordinate (spec §5.4) less the ``O(eps)`` offset
    that the random initialisation leaves in it at the end of Stage I."""
    D = redistribution(run)
    return D - np.interp(onset_one, run["time"].values, D) if np.isfinite(onset_one) else D
