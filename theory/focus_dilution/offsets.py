"""The O(1) offsets of the focus-dilution stage onsets (Chen, Lin, Xu, Luo, "Focus and Dilution",
arXiv:2605.01199; spec ``focus_dilution.md`` §5.1-5.5; issue 17 item 3).

Each of Stages I, II and IV is the escape from a critical point along one unstable mode of rate
``sigma``, ``c``, ``mu_IV``. In the linear regime the mode's amplitude is ``A e^{rate (t - t0)}``,
and the onset rule fires when that extrapolated amplitude reaches a level ``a*`` fixed by the
stage's nonlinear solution, so

    t_I   = ln(a_I* / A_I) / sigma,
    t_II  = t_I + ln(a_II* / (G_I A_II)) / c,
    t_III = t_II + Delta_III,
    t_IV  = t_III + ln(a_IV* / A_IV) / mu_IV.

The leading order (``simulate.focus_dilution.predictions.PREDICTION_RULE``) is ``A = eps``,
``a* = G_I = 1``. The amplitudes are projections of the initial parameters (closed forms here):

* ``A_I = ||W0^T a + W1 b|| / 2``: at the origin ``x = W0^T a``, ``y = W1 b`` obey
  ``x' = sigma y``, ``y' = sigma x``, so ``(x + y)/2`` grows as ``e^{sigma t}`` along
  ``alpha = (x0 + y0)/||x0 + y0||``, the direction ``W0``'s rows condense onto (spec §5.2);
  ``||x0 + y0|| ~ eps sqrt(2m)``.
* ``A_II = ||(WQ + WK)^T alpha|| / 2``: ``q = WQ^T alpha``, ``k = WK^T alpha`` obey
  ``q' = c(t) k``, ``k' = c(t) q`` with ``c(t) = -gamma^T G_Phi gamma`` all along Stage I (spec
  §5.3), so ``(q + k)/2`` grows along ``alpha_t = (q0 + k0)/||q0 + k0||``. ``c(t)`` rises from 0
  to ``c`` during Stage I: the carry-over ``G_I = lim exp(int_0^t c - c (t - t_I))`` is the gain
  by ``t_I`` beyond the plateau's ``e^{c (t - t_I)}``.
* ``A_IV = ||h^T Z||``: the seeds ``z = (W0 a2; W1^T a2, a2^T WQ alpha_t, a2^T WK alpha_t)``
  along an orthonormal basis ``a2`` of ``alpha``'s complement evolve by the transverse linearisation
  ``[[0, -B], [-B^T, 0]]`` of ``theory.focus_dilution.manifold`` along the reduced trajectory.
  At the origin ``B = -sigma [a b^T, 0, 0]``: the growing part of ``z`` is
  ``(a.v + b.w) = (x0 + y0).a2 = 0`` by the choice of ``alpha``, the decaying part dies, so only
  the neutral part ``Pi_0 z`` carries over (``origin_neutral_projector``). ``h`` maps it to the
  amplitude of the Stage-IV mode ``r`` (``stage_four_mode``) at ``t_III``.

The reduced-flow numbers ``a_I*``, ``G_I``, ``a_II*``, ``Delta_III``, ``a_IV*`` and ``h``
(``StageConstants``) depend on ``pi`` and ``P`` only; they are integrated with diffrax in
``simulate.focus_dilution.offsets``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from theory.focus_dilution.manifold import transverse_coupling
from theory.focus_dilution.population import Parameters, validate_pi
from theory.focus_dilution.stages import condensation_directions
from theory.validation import require


# --- the amplitudes each linear regime starts from ------------------------------------------------
class InitialAmplitudes(NamedTuple):
    """Projections of the initial parameters on the unstable modes (module docstring)."""

    stage_one: float
    """``A_I = ||W0^T a + W1 b|| / 2``."""
    stage_two: float
    """``A_II = ||(WQ + WK)^T alpha|| / 2``."""
    transverse: np.ndarray
    """``Pi_0 Z``: neutral parts of the transverse seeds, ``(2d + 2, number of seeds)``."""
    alpha: np.ndarray | None = None
    """Stage-I direction in ``R^m`` (None for the typical amplitudes)."""
    alpha_t: np.ndarray | None = None
    """Stage-II direction in ``R^{m_k}`` (None for the typical amplitudes)."""


def origin_neutral_projector(pi) -> np.ndarray:
    """Projector on the kernel of the transverse linearisation at the origin: removes the
    components ``a.v`` and ``b.w`` of ``z = (v; w, s, t)`` (``B(0) = -sigma [a b^T, 0, 0]``)."""
    a, b = condensation_directions(validate_pi(pi))
    d = a.size
    growing = np.zeros((2, 2 * d + 2))
    growing[0, :d], growing[1, d : 2 * d] = a, b
    return np.eye(2 * d + 2) - growing.T @ growing


def complement_basis(u: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the complement of the unit vector ``u`` (columns, ``n x (n-1)``)."""
    Q, _ = np.linalg.qr(np.column_stack([u, np.eye(u.size)]))
    return Q[:, 1 : u.size]


def initial_amplitudes(theta0: Parameters, pi) -> InitialAmplitudes:
    """The amplitudes of one initialisation ``theta0 = (W0, WQ, WK, W1)`` (module docstring)."""
    pi = validate_pi(pi)
    W0, WQ, WK, W1 = (np.asarray(w, dtype=float) for w in theta0)
    require(W0.shape[0] == pi.size, "init", W0.shape, f"W0 with {pi.size} rows (one per token)")
    require(W0.shape[1] >= 2, "init", W0.shape, "an embedding width m >= 2")
    a, b = condensation_directions(pi)
    x_plus_y = W0.T @ a + W1 @ b
    alpha = x_plus_y / np.linalg.norm(x_plus_y)
    q_plus_k = (WQ + WK).T @ alpha
    alpha_t = q_plus_k / np.linalg.norm(q_plus_k)
    A2 = complement_basis(alpha)
    Z = np.concatenate(
        [W0 @ A2, W1.T @ A2, (alpha_t @ WQ.T @ A2)[None], (alpha_t @ WK.T @ A2)[None]]
    )
    return InitialAmplitudes(
        stage_one=float(np.linalg.norm(x_plus_y) / 2),
        stage_two=float(np.linalg.norm(q_plus_k) / 2),
        transverse=origin_neutral_projector(pi) @ Z,
        alpha=alpha,
        alpha_t=alpha_t,
    )


def typical_amplitudes(pi, eps: float, m: int, m_k: int) -> InitialAmplitudes:
    """Root-mean-square amplitudes of an ``N(0, eps^2)`` initialisation: ``x0 + y0 ~
    N(0, 2 eps^2 I_m)`` gives ``A_I = eps sqrt(m/2)``, likewise ``A_II = eps sqrt(m_k/2)``; the
    ``m - 1`` neutral seeds have i.i.d. ``N(0, eps^2)`` entries on the range of ``Pi_0``, so
    ``E ||h^T Z||^2 = (m - 1) eps^2 ||Pi_0 h||^2``: ``Z = eps sqrt(m - 1) Pi_0`` has that norm."""
    require(0 < eps < 1, "eps", eps, "an init scale in (0, 1)")
    require(m >= 2, "m", m, "an embedding width >= 2")
    require(m_k >= 1, "m_k", m_k, "a key width >= 1")
    return InitialAmplitudes(
        stage_one=eps * math.sqrt(m / 2),
        stage_two=eps * math.sqrt(m_k / 2),
        transverse=eps * math.sqrt(m - 1) * origin_neutral_projector(pi),
    )


# --- the Stage-IV mode (spec §5.5) ----------------------------------------------------------------
def stage_four_mode(x, pi, P) -> tuple[float, np.ndarray]:
    """``(mu_IV, r)`` at a manifold point ``x``: the transverse matrix ``[[0, -B], [-B^T, 0]]`` is
    symmetric with top eigenvalue ``||B||_2`` and unit eigenvector ``r = (u_1; -v_1)/sqrt(2)``
    (``u_1``, ``v_1`` the top singular vectors of ``B``), so the amplitude of a seed ``z`` along
    the mode is ``r . z``."""
    U, S, Vt = np.linalg.svd(transverse_coupling(x, pi, P))
    return float(S[0]), np.concatenate([U[:, 0], -Vt[0]]) / math.sqrt(2)


# --- the onsets with their offsets ----------------------------------------------------------------
class StageConstants(NamedTuple):
    """The reduced flow's numbers for one chain (``pi``, ``P``): rates, the firing amplitudes
    ``a*`` of the onset rules, the Stage-I carry-over gain ``G_I`` of the attention mode, the
    Stage-III delay and the Stage-IV carry-over functional ``h`` (module docstring)."""

    sigma: float
    c: float
    mu_IV: float
    """the transverse Stage-IV rate; 0 at the stall, nan where the rest point is left along a
    faster in-manifold mode (``theory.focus_dilution.manifold``: larger ``lambda``)."""
    fire_I: float
    gain_I: float
    fire_II: float
    delay_III: float
    fire_IV: float
    """nan where no transverse Stage IV was derived (``mu_IV = 0``, the stall: ``t_IV = inf``;
    ``mu_IV`` nan, or no Stage III: ``t_IV`` nan)."""
    carry_IV: np.ndarray
    """``h`` (length ``2d + 2``): ``A_IV = ||h^T Z||`` for neutral seeds ``Z``."""
    rest_state: np.ndarray | None = None
    """the Stage-IV rest point the reduced flow comes to (manifold state), where it was run."""


class OffsetOnsets(NamedTuple):
    """Onsets I-IV with their offsets, the Stage-IV amplitude they used and the stage durations
    split into leading order ``ln(1/eps)/rate`` and offset ``ln(a* eps/A)/rate``."""

    t_I: float
    t_II: float
    t_III: float
    t_IV: float
    A_IV: float

    @property
    def onsets(self) -> list[float]:
        return [self.t_I, self.t_II, self.t_III, self.t_IV]


def stage_four_amplitude(constants: StageConstants, amplitudes: InitialAmplitudes) -> float:
    """``A_IV = ||h^T Pi_0 Z||``: the Stage-IV mode's amplitude at ``t_III`` (norm over the seeds:
    the mode grows along the combination of directions ``a2`` that carries most of it)."""
    return float(np.linalg.norm(constants.carry_IV @ amplitudes.transverse))


def escape(start: float, fire: float, rate: float) -> float:
    """``ln(fire / start) / rate``: time for a mode of ``rate`` to grow from amplitude ``start``
    to the extrapolated amplitude ``fire`` at which its onset rule fires; ``inf`` for a zero rate
    (no escape: the stall), nan for a nan firing level (the rule was not derived)."""
    if rate <= 0:  # (False for a nan rate)
        return math.inf
    if not (math.isfinite(fire) and start > 0):
        return math.nan
    return math.log(fire / start) / rate


def offset_onsets(constants: StageConstants, amplitudes: InitialAmplitudes) -> OffsetOnsets:
    """``t_I ... t_IV`` by the module docstring's formulas."""
    k = constants
    t_I = escape(amplitudes.stage_one, k.fire_I, k.sigma)
    t_II = t_I + escape(k.gain_I * amplitudes.stage_two, k.fire_II, k.c)
    t_III = t_II + k.delay_III
    A_IV = stage_four_amplitude(k, amplitudes)
    return OffsetOnsets(t_I, t_II, t_III, t_III + escape(A_IV, k.fire_IV, k.mu_IV), A_IV)


def offset_terms(constants: StageConstants, amplitudes: InitialAmplitudes, eps: float) -> dict:
    """Each escape's offset against the leading order ``ln(1/eps)/rate``, split into the start
    (``ln(eps/A)/rate``) and the firing level (``ln(a*)/rate``) (``derive`` prints them)."""
    k = constants
    A_IV = stage_four_amplitude(k, amplitudes)
    out = {
        "I": (math.log(eps / amplitudes.stage_one) / k.sigma, math.log(k.fire_I) / k.sigma),
        "II": (
            math.log(eps / (k.gain_I * amplitudes.stage_two)) / k.c,
            math.log(k.fire_II) / k.c,
        ),
    }
    if k.mu_IV > 0 and math.isfinite(k.fire_IV) and A_IV > 0:
        out["IV"] = (math.log(eps / A_IV) / k.mu_IV, math.log(k.fire_IV) / k.mu_IV)
    return out
