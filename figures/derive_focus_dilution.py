"""``stagewise derive focus-dilution``: the population model of spec ``focus_dilution.md`` §3.3 and
its four stage linearisations (§5.2-5.5), with the numbers at one setting, and the O(1) offsets
of the stage onsets (issue 17 item 3).

Closed forms: ``theory.focus_dilution.population``, ``.stages``, ``.manifold`` and ``.offsets``.
The Stage-IV rest point and the offsets' firing levels need the reduced flow integrated (diffrax,
``simulate.focus_dilution.offsets``), imported only when the derivation runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy as sp

from theory.focus_dilution.manifold import (
    manifold_parameters,
    predicted_stage_times,
    redistribution_response,
    rest_point,
)
from theory.focus_dilution.offsets import (
    StageConstants,
    offset_onsets,
    offset_terms,
    origin_neutral_projector,
    stage_four_amplitude,
    typical_amplitudes,
)
from theory.focus_dilution.population import (
    Parameters,
    parameter_loss,
    pi_symbols,
    transition_matrix,
    validate_pi,
)
from theory.focus_dilution.stages import (
    attention_block_spectrum,
    condensation_directions,
    entropy,
    origin_gradient,
    second_critical_point,
    stage_one_rate,
    stage_one_solution,
    stage_two_rate,
    stage_two_rate_closed_form,
    symmetric_family_rates,
)
from theory.gradient_flow import escape_time
from theory.validation import require


@dataclass(frozen=True)
class FocusDilutionDeriveConfig:
    """Population model of one attention head on the Markov chain P = lambda I + (1 - lambda) 1
    pi^T and its stage linearisations."""

    pi: tuple[float, ...] = (0.75, 0.19, 0.05, 0.01)
    """stationary law of the chain (spec §2.3 default): non-uniform, entries > 0 summing to 1."""
    lam: float = 0.5
    """lambda, repeat probability of the chain in (0, 1) (Stage II needs lambda > 0)."""
    eps: float = 1e-3
    """init scale of the predicted stage onsets, in (0, 1)."""
    width: int = 16
    """m, embedding width (the offsets' typical initial amplitudes)."""
    key_width: int = 16
    """m_k, query/key width (the offsets' typical initial amplitudes)."""
    latex: bool = False
    """print LaTeX instead of text."""

    def __post_init__(self) -> None:
        validate_pi(self.pi)
        second_critical_point(self.pi)  # a non-uniform pi (else no theta_c^1)
        require(0 < self.lam < 1, "lam", self.lam, "a repeat probability in (0, 1)")
        require(0 < self.eps < 1, "eps", self.eps, "an init scale in (0, 1)")
        require(2 <= self.width <= 4096, "width", self.width, "an embedding width in [2, 4096]")
        require(1 <= self.key_width <= 4096, "key_width", self.key_width, "a width in [1, 4096]")


def _vector(values) -> str:
    return "(" + ", ".join(f"{float(v):.6g}" for v in values) + ")"


def derive(cfg: FocusDilutionDeriveConfig) -> str:
    # diffrax / jax: only when run
    from simulate.focus_dilution.offsets import PROBE, stage_constants

    show = sp.latex if cfg.latex else sp.sstr
    pi = validate_pi(cfg.pi)
    d = pi.size
    P = transition_matrix(pi, cfg.lam)
    pi_s = pi_symbols(d, normalised=False)
    lam_s, eps_s, t_s, x0, y0 = sp.symbols("lambda epsilon t x_0 y_0", positive=True)
    sigma_s, c_s = sp.symbols("sigma c", positive=True)
    lines = [
        f"Focus and dilution, population model: d = {d}, pi = {_vector(pi)}, "
        f"lambda = {cfg.lam:.6g}, eps = {cfg.eps:.3g}",
        f"P = {show(transition_matrix(pi_s, lam_s))}",
        f"  = {show(sp.Matrix(P).applyfunc(lambda v: sp.Float(v, 6)))}",
        "loss L(M, Phi) = -sum_q pi_q sum_k P_qk log S_qk,  S = rowsoftmax(A M),  "
        "A_qk = pi_k e^{Phi_qk} / sum_l pi_l e^{Phi_ql},  M = W0 W1,  Phi = W0 WQ WK^T W0^T",
        "",
        "Plateau levels:",
    ]
    zero = Parameters(np.zeros((d, 1)), np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, d)))
    L_0 = float(parameter_loss(zero, pi, P))
    lines.append(f"  origin (uniform prediction): L = {show(sp.log(d))} = {L_0:.6g}")
    lines.append(f"  theta_c^1 (unigram prediction): L = H(pi) = {show(entropy(pi_s))}")
    lines.append(f"    = {float(entropy(pi)):.6g}")

    # Stage I: the origin (spec §5.2)
    sigma = float(stage_one_rate(pi))
    a, b = condensation_directions(pi)
    x_t, y_t = stage_one_solution(x0, y0, sigma_s, t_s)
    lines += [
        "",
        "Stage I, linearisation at the origin (G_Phi(0) = 0):",
        f"  G_M(0) = pi (u - pi)^T = {show(origin_gradient(pi_s))}",
        f"  sigma = ||pi|| ||pi - u|| = {show(stage_one_rate(pi_s))}",
        f"    = {sigma:.6g}",
        f"  a = pi/||pi|| = {_vector(a)},  b = (pi - u)/||pi - u|| = {_vector(b)}",
        f"  x = W0^T a, y = W1 b:  x = {show(x_t)},  y = {show(y_t)}",
    ]

    # theta_c^1 and Stage II (spec §5.2-5.3)
    point = second_critical_point(pi)
    c = float(stage_two_rate(pi, P))
    c_closed = float(stage_two_rate_closed_form(pi, cfg.lam))
    sigma_family, c_family = symmetric_family_rates()
    lines += [
        "",
        "Second critical point theta_c^1: W0 = gamma alpha^T, W1 = alpha beta^T, WQ = WK = 0",
        "  g^2 = ||l||/||pi||, l = log pi - mean(log pi):  "
        f"g = {show(second_critical_point(pi_s).g)}",
        f"    = {float(point.g):.6g}",
        f"  gamma = {_vector(point.gamma)},  beta = {_vector(point.beta)}",
        "",
        "Stage II, attention growth at theta_c^1:",
        "  c = -gamma^T G_Phi gamma = Var_pi(gamma) Cov_pi(gamma, P beta) "
        f"= {c:.6g}  (lazy-chain closed form: {c_closed:.6g})",
        f"  (WQ, WK) block of the Jacobian: eigenvalues "
        f"{_vector(sorted(set(attention_block_spectrum(c, 1, 1))))} (+-c, indefinite)",
        f"  ||WQ WK^T|| grows at 2c = {2 * c:.6g}",
        "  symmetric family pi = (pi_1, r, ..., r), r = (1 - pi_1)/(d - 1):",
        f"    sigma = {show(sigma_family)}",
        f"    c = {show(c_family)}",
    ]
    rest = pi[1:]
    if np.allclose(rest, rest[0]):
        named = {"pi_1": pi[0], "d": d, "lambda": cfg.lam}
        free = sigma_family.free_symbols | c_family.free_symbols
        values = {sym: named[sym.name] for sym in free}
        lines.append(
            f"    at pi_1 = {pi[0]:.6g}: sigma = {float(sigma_family.subs(values)):.6g}, "
            f"c = {float(c_family.subs(values)):.6g}"
        )

    # Stage III (spec §5.4)
    red = redistribution_response(pi, P)
    lines += [
        "",
        "Stage III, mass redistribution on the rank-one manifold (forced by kappa ~ e^{2ct}):",
        f"  D = gamma_h - pi_h sum_i gamma_i ~ k_D kappa: rate {red.rate:.6g}, "
        f"k_D = {red.D_per_kappa:.6g}",
    ]

    # Stage IV (spec §5.5): the rest point of the reduced run of the offsets below
    constants = stage_constants(pi, P)
    four = rest_point(constants.rest_state, pi, P)
    L_IV = float(parameter_loss(manifold_parameters(four.state, 1, 1), pi, P))
    lines += [
        "",
        "Stage IV, rest point of the manifold flow reached from theta_c^1:",
        f"  L = {L_IV:.6g},  ||G_M|| = {np.linalg.norm(four.G_M, 2):.3g}, "
        f"||G_Phi|| = {np.linalg.norm(four.G_Phi, 2):.3g}, residual {four.residual:.1e}",
        f"  transverse rate ||B||_2 = {four.transverse_rate:.6g}, tangential rate "
        f"{four.tangential_rate:.3g}:  mu_IV = {four.rate:.6g}",
        f"  unstable embedding direction v = {_vector(four.direction)}",
    ]

    # predicted onsets (spec §5.1-5.5)
    times = predicted_stage_times(pi, P, cfg.eps, four.rate)
    per_log = predicted_stage_times(pi, P, math.exp(-1), four.rate)  # ln(1/eps) = 1: the slopes
    t_I = escape_time(eps_s, sigma_s)
    t_II = t_I + escape_time(eps_s, c_s)
    lines += [
        "",
        "Predicted stage onsets (leading order in ln(1/eps); intercepts not predicted):",
        f"  t_I = {show(t_I)}:  slope 1/sigma = {per_log.t_I:.6g}, t_I = {times.t_I:.6g}",
        f"  t_II = {show(t_II)}:  slope 1/sigma + 1/c = {per_log.t_II:.6g}, "
        f"t_II = {times.t_II:.6g}",
        (
            f"  t_IV = t_II + ln(1/eps_perp)/mu_IV:  slope {per_log.t_IV:.6g}, "
            f"t_IV = {times.t_IV:.6g}  (eps_perp = eps)"
            if math.isfinite(times.t_IV)
            else "  t_IV = inf: mu_IV = 0, the degenerate stall (symmetric low-frequency tokens)"
        ),
    ]
    leading = [times.t_I, times.t_II, times.t_II + constants.delay_III, times.t_IV]
    lines += _offsets(cfg, constants, PROBE, leading)
    return "\n".join(lines)


def _offsets(cfg: FocusDilutionDeriveConfig, k: StageConstants, probe: float, leading) -> list[str]:
    """The onsets with their O(1) offsets (theory.focus_dilution.offsets) at the typical
    (root-mean-square) amplitudes of an N(0, eps^2) initialisation."""
    pi = validate_pi(cfg.pi)
    amps = typical_amplitudes(pi, cfg.eps, cfg.width, cfg.key_width)
    onsets = offset_onsets(k, amps)
    terms = offset_terms(k, amps, cfg.eps)
    h = origin_neutral_projector(pi) @ k.carry_IV
    lines = [
        "",
        "Onsets with their O(1) offsets (issue 17): each escape takes ln(a*/A)/rate, A the "
        "amplitude of its unstable mode at the previous onset, a* the mode's amplitude "
        "(extrapolated along its linear growth) where the onset rule fires; the leading order "
        "is A = eps, a* = 1",
        f"  amplitudes of an N(0, eps^2) init (root mean square, m = {cfg.width}, "
        f"m_k = {cfg.key_width}):",
        f"    Stage I at the origin: A_I = ||W0^T a + W1 b||/2 = eps sqrt(m/2) = "
        f"{amps.stage_one:.6g}  (x = W0^T a, y = W1 b: (x + y)/2 grows as e^(sigma t) along "
        "alpha = (x0 + y0)/||x0 + y0||)",
        f"    Stage II at theta_c^1: A_II = ||(WQ + WK)^T alpha||/2 = eps sqrt(m_k/2) = "
        f"{amps.stage_two:.6g}, carried through Stage I at the rate c(t) = -gamma^T G_Phi gamma: "
        f"gain G_I = lim exp(int_0^t c - c (t - t_I)) = {k.gain_I:.6g}",
        f"    Stage IV at the rest point: A_IV = ||h^T Pi_0 Z|| = eps sqrt(m - 1) ||Pi_0 h|| = "
        f"{stage_four_amplitude(k, amps):.6g}  (Z: seeds along the m - 1 directions "
        "orthogonal to alpha, Pi_0: their neutral part at the origin, h: the transverse "
        "linearisation [[0, -B], [-B^T, 0]] along Stages I-III, projected on the Stage-IV mode "
        f"at t_III; ||Pi_0 h|| = {np.linalg.norm(h):.6g})",
        f"  firing levels, from the reduced flow started at amplitude {probe:g}:",
        f"    a_I* = {k.fire_I:.6g}  (loss at the midpoint of [H(pi), ln d])",
        f"    a_II* = {k.fire_II:.6g}  (p_h(h) at the midpoint of [pi_h, 1])",
        f"    Delta_III = t_III - t_II = {k.delay_III:.6g}  (max_q H_q rises above H(pi))",
    ]
    if math.isfinite(k.fire_IV):
        lines.append(
            f"    a_IV* = {k.fire_IV:.6g}  (sigma_2(W0) = 1/2; the m = 2, m_k = 1 flow, an "
            "invariant subspace of the full one)"
        )
    lines += [
        "  t_I = ln(a_I*/A_I)/sigma,  t_II = t_I + ln(a_II*/(G_I A_II))/c,  "
        "t_III = t_II + Delta_III,  t_IV = t_III + ln(a_IV*/A_IV)/mu_IV",
        f"  at eps = {cfg.eps:.3g}: each escape's offset against its leading ln(1/eps)/rate "
        "(Stage III: no escape, its delay in both rules)",
        "  stage  start offset ln(eps/A)/rate  firing offset ln(a*)/rate  onset (leading)  "
        "onset (offsets)",
    ]
    for stage, onset, lead in zip(("I", "II", "III", "IV"), onsets.onsets, leading):
        start, fire = terms.get(stage, (math.nan, math.nan))
        lines.append(f"  {stage:>5}  {start:>27.4g}  {fire:>25.4g}  {lead:>15.6g}  {onset:>15.6g}")
    return lines
