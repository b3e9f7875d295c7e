"""``stagewise derive mean-field``: clustering threshold, mode rates, the energy and the Landau
expansion of the noisy mean-field transformer (spec ``mean_field.md`` §3, §5.1-5.3; computations in
``theory.mean_field.energy``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import sympy as sp

from theory.mean_field import energy as th
from theory.validation import require

MAX_MODES = 1000
"""the most modes whose rates the derivation prints."""


@dataclass(frozen=True)
class MeanFieldDeriveConfig:
    """Isotropic (A = I) noisy mean-field dynamics on the sphere S^{dim-1}."""

    beta: float = 1.0
    """inverse temperature of the attention, > 0."""
    tau: float = 0.3
    """noise level, >= 0."""
    dim: int = 2
    """token dimension d >= 2 (tokens on S^{d-1}; the Fourier and Landau analyses are S^1)."""
    modes: int = 3
    """number of Fourier / spherical-harmonic modes whose rates are printed, >= 1."""
    latex: bool = False
    """print LaTeX instead of text."""

    def __post_init__(self) -> None:
        th.validate_beta(self.beta)
        th.validate_tau(self.tau)
        require(self.dim >= 2, "dim", self.dim, "an integer >= 2")
        # one rate line per mode: 1000 print in seconds, 2^32 never finish
        require(
            1 <= self.modes <= MAX_MODES, "modes", self.modes, f"an integer in [1, {MAX_MODES}]"
        )


def derive(cfg: MeanFieldDeriveConfig) -> str:
    show = sp.latex if cfg.latex else sp.sstr
    at = {th.beta: cfg.beta, th.tau: cfg.tau}
    lin = th.linearised_rate_derivation()
    threshold = th.threshold_circle_expr()
    tc = th.tau_c(cfg.beta)
    tc_sphere = th.tau_c(cfg.beta, cfg.dim)
    lines = [
        f"Noisy mean-field transformer, A = I: beta = {cfg.beta:.6g}, tau = {cfg.tau:.6g}, "
        f"d = {cfg.dim}",
        "",
        "Linearisation at the uniform state on S^1 (perturbation eps cos(k theta)):",
        f"  U_1 = {show(lin['U1'])}",
        f"  rate r_k = {show(lin['rate'])}",
    ]
    for mode in range(1, cfg.modes + 1):
        lines.append(f"    r_{mode} = {th.mode_rate(mode, cfg.beta, cfg.tau):.6g}")
    lines += [
        f"  threshold (r_1 = 0): tau_c = {show(threshold)} = {tc:.6g}",
        f"  tau = {cfg.tau:.6g} is {'below' if cfg.tau < tc else 'above'} tau_c: the uniform "
        f"state is {'unstable (clustering)' if cfg.tau < tc else 'linearly stable'}",
        "",
        f"Sphere S^{cfg.dim - 1} (Funk-Hecke): tau_c = Gamma(d/2) 2^(d/2-1) I_(d/2)(beta)/"
        f"beta^(d/2) = {tc_sphere:.6g}",
    ]
    for ell in range(1, cfg.modes + 1):
        lines.append(
            f"    degree {ell}: lambda_l = {th.funk_hecke_closed_form(ell, cfg.dim, cfg.beta):.6g},"
            f" rate {th.sphere_mode_rate(ell, cfg.dim, cfg.beta, cfg.tau):.6g}"
        )
    uniform = th.uniform_energy_expr()
    small = th.von_mises_energy_small_kappa()

    def vm(kappa: float) -> float:
        return th.von_mises_energy(kappa, cfg.beta, cfg.tau)

    lines += [
        "",
        "Energy F_tau(mu) = -1/(2 beta) iint e^{beta <x, y>} dmu dmu + tau int mu log mu:",
        f"  uniform state: F_tau = {show(uniform)} = {float(uniform.subs(at)):.6g}",
        f"  von Mises family rho ~ e^(kappa cos theta): F(kappa) - F(0) = {show(small)} + "
        "O(kappa^4)",
        f"    F(0.5) - F(0) = {vm(0.5) - vm(0.0):.6g}",
    ]
    landau = th.landau_derivation()
    a2 = landau["a2"]
    amplitude = cast(sp.Expr, landau["amplitude"])
    c = th.landau_amplitude(cfg.beta)
    lines += [
        "",
        "Landau expansion near tau_c (S^1): r_1^2 = c (tau_c/tau - 1),",
        f"  c = {show(amplitude)},  {show(a2)} = 2 I_2(beta)/I_1(beta):  c = {c:.6g} "
        f"({'continuous' if c > 0 else 'discontinuous'} transition)",
        f"  tricritical beta_* (I_2/I_1 = 1/2) = {th.tricritical_beta():.6g}",
    ]
    return "\n".join(lines)
