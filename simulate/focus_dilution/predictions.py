"""The theory's numbers for one focus-dilution setting (spec ``focus_dilution.md`` §5): the
Stage I-II rates, ``theta_c^1``, the Stage-IV rest point of the reduced manifold flow, the plateau
levels and the predicted stage onsets, by two rules side by side (issue 17 item 3): the leading
order in ``ln(1/eps)`` (``PREDICTION_RULE``) and, given the runs' initial parameters, the onsets
with their O(1) offsets (``OFFSET_RULE``; ``theory.focus_dilution.offsets``,
``simulate.focus_dilution.offsets``). The closed forms are in ``theory.focus_dilution``; this
module integrates the reduced flow (diffrax, ``simulate.focus_dilution.flow``) where a number needs
it (the Stage-IV point, the Stage-III delay)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from simulate.focus_dilution.flow import manifold_trajectory, stage_four_point
from simulate.focus_dilution.offsets import offset_onsets_of
from theory.focus_dilution.manifold import manifold_parameters, predicted_stage_times
from theory.focus_dilution.offsets import stage_four_amplitude
from theory.focus_dilution.population import (
    Parameters,
    attention,
    parameter_loss,
    validate_pi,
)
from theory.focus_dilution.stages import entropy, second_critical_point
from theory.validation import require

PREDICTION_RULE = (
    "t_I = ln(1/eps)/sigma, t_II = t_I + ln(1/eps)/c, t_III = t_II + (onset III - "
    "onset II on the reduced manifold flow), t_IV = t_II + ln(1/eps)/mu_IV "
    "(eps_perp = eps; intercepts O(1), not predicted)"
)
OFFSET_RULE = (
    "t_I = ln(a_I*/A_I)/sigma, t_II = t_I + ln(a_II*/(G_I A_II))/c, t_III = t_II + Delta_III, "
    "t_IV = t_III + ln(a_IV*/A_IV)/mu_IV: A_I, A_II, A_IV the run's initial parameters projected "
    "on each stage's unstable mode (A_IV carried over Stages I-III by the transverse "
    "linearisation), a* the mode's extrapolated amplitude where the onset rule fires and G_I the "
    "attention mode's gain during Stage I, from the reduced flow (no fitted constant)"
)


def stage_three_delay(pi: ArrayLike, P: ArrayLike) -> float:
    """Time from onset II to onset III along the reduced manifold flow (spec §5.4) from
    ``theta_c^1``: Stage III is not an escape, so its delay after Stage II is ``O(1)`` in ``eps``
    and is read off the reduced system (the onset rules of ``simulate.focus_dilution.measure``
    with the manifold attention)."""
    pi = validate_pi(pi)
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


def leading_onsets(
    pi: np.ndarray, P: ArrayLike, eps: float, mu_IV: float, delay: float, qk_scale: float = 1.0
) -> list[float]:
    """Onsets I-IV by ``PREDICTION_RULE`` at init scale ``eps`` (``delay``: the Stage-III delay)."""
    times = predicted_stage_times(pi, P, eps, mu_IV, qk_scale=qk_scale)
    return [times.t_I, times.t_II, times.t_II + delay, times.t_IV]


def predictions(
    pi: ArrayLike,
    P: ArrayLike,
    eps: float,
    qk_scale: float = 1.0,
    init: Parameters | None = None,
) -> dict:
    """The theory's numbers for one setting (spec §5): rates, ``theta_c^1``, the Stage-IV rest point
    of the manifold flow, plateau levels and stage onsets (``t_III = t_II +`` the reduced-flow
    delay; ``PREDICTION_RULE``). With ``init``, the initial parameters of a batch of runs (leading
    axis: runs), also the onsets with their offsets for each run (``OFFSET_RULE``; the reduced
    flow has no ``qk_scale``, so it must be 1)."""
    pi = validate_pi(pi)
    point = stage_four_point(pi, P)
    times = predicted_stage_times(pi, P, eps, point.rate, qk_scale=qk_scale)
    L_IV = float(parameter_loss(manifold_parameters(point.state, 1, 1), pi, P))
    delay = stage_three_delay(pi, P)
    out = {
        "sigma": times.sigma,
        "c": times.c,
        "two_c": 2 * times.c,
        "mu_IV": times.mu_IV,
        "g": float(second_critical_point(pi).g),
        "ln_d": math.log(pi.size),
        "H_pi": float(entropy(pi)),
        "L_IV": L_IV,
        "onsets": leading_onsets(pi, P, eps, point.rate, delay, qk_scale),
        "stage_three_delay": delay,
        "rule": PREDICTION_RULE,
    }
    if init is not None:
        require(qk_scale == 1, "qk_scale", qk_scale, "1 for the onsets with offsets")
        out.update(offset_predictions(pi, P, init))
    return out


def offset_predictions(pi: np.ndarray, P: ArrayLike, init: Parameters) -> dict:
    """``onsets_offset_per_seed`` (runs x 4), their mean ``onsets_offset``, each run's amplitudes
    and the reduced flow's constants (``OFFSET_RULE``)."""
    constants, amplitudes, onsets = offset_onsets_of(pi, P, init)
    return {
        "onsets_offset": np.mean(onsets, axis=0).tolist(),
        "onsets_offset_per_seed": onsets,
        "offset_amplitudes_per_seed": [
            {
                "A_I": a.stage_one,
                "A_II": a.stage_two,
                "A_IV": stage_four_amplitude(constants, a),
            }
            for a in amplitudes
        ],
        "offset_constants": {
            "fire_I": constants.fire_I,
            "gain_I": constants.gain_I,
            "fire_II": constants.fire_II,
            "delay_III": constants.delay_III,
            "fire_IV": constants.fire_IV,
        },
        "offset_rule": OFFSET_RULE,
    }
