"""Noisy mean-field transformer (Isobe, Inoue, Imaizumi, "Training-Induced Escape from Token
Clustering in a Mean-Field Formulation of Transformers", arXiv:2605.07772; spec ``mean_field.md``,
reconstruction [derived] in §3 and §5; verdicts in ``docs/mean_field_verification.md``).

Tokens are particles on the sphere; depth ``t`` is time. With ``W = 0`` the mean-field density
follows the Wasserstein gradient flow of the entropy-regularised interaction energy (spec §3, §5.1)

    F_tau(mu) = -1/(2 beta) iint e^{beta <x, A y>} dmu dmu + tau int mu log mu,

on S^1 written in the angle: the density ``rho`` is w.r.t. ``d theta`` (uniform = 1/(2 pi)), the
velocity of a token is ``d/d theta U(theta)`` with ``U = (1/beta) int e^{beta <x, A y>} rho(y)``,
and the noise ``sqrt(2 tau) dB`` has generator ``tau d^2/d theta^2``.

What is here (sympy + numpy + mpmath; no jax):

* the kernel's Fourier modes on S^1 for ``A = diag(1, a)`` (Jacobi-Anger), which the particle code
  uses to evaluate the attention sum exactly (to a stated truncation) in O(N K) work;
* the clustering threshold: Fourier linearisation at the uniform state on S^1 (``r_k``,
  ``tau_c = I_1(beta)/beta``), Funk-Hecke on S^{d-1}, and the weakly nonlinear (Landau) expansion
  of the stationary equation, which decides whether the transition is continuous or
  discontinuous (a tricritical ``beta_* ~ 2.4``);
* stationary states of the self-consistency ``rho ∝ exp(U[rho]/tau)`` by damped fixed-point
  iteration (the mean-field ``r_1`` against ``tau``);
* the energy of the uniform state and along the von Mises family, and the dissipation identity;
* clustering order parameters;
* restoring rates of point clusters (spec §5.4) and the scalar linear-quadratic turnpike of §5.5
  (optimal control, Gramian, escape amplitude, terminal-layer width).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, cast

import mpmath as mp
import numpy as np
import sympy as sp

from theory.validation import require

theta, phi, beta, tau, eps = sp.symbols("theta phi beta tau epsilon", real=True)
k = sp.Symbol("k", integer=True, positive=True)
kappa, lam, T, t, b, g, s, m_w, a = sp.symbols("kappa lambda T t b g s m_w a", positive=True)

ORDER_PARAMETER_RULE = (
    "r_k = |(1/N) sum_j e^{i k theta_j}|: r_1 for isotropic A (one cluster), "
    "r_2 for the two wells at +-e_1 of A = diag(1, a), a < 1"
)


MAX_KERNEL_EXPONENT = 700.0
"""the largest exponent beta <x, A y> of the attention kernel: e^700 is near float64's largest
number (its Bessel coefficients I_k(beta (1 + a) / 2) overflow beyond)."""


def validate_beta(value) -> float:
    require(
        math.isfinite(value) and 0 < value <= MAX_KERNEL_EXPONENT,
        "beta",
        value,
        f"an inverse temperature in (0, {MAX_KERNEL_EXPONENT:g}] (e^beta finite in float64)",
    )
    return float(value)


def validate_kernel(beta_value: float, a_value: float) -> None:
    """The kernel's largest exponent, ``beta max(1, a)``, at most ``MAX_KERNEL_EXPONENT``."""
    require(
        beta_value * max(1.0, a_value) <= MAX_KERNEL_EXPONENT,
        "a",
        a_value,
        f"at most {MAX_KERNEL_EXPONENT:g} / beta = {MAX_KERNEL_EXPONENT / beta_value:.4g} "
        f"(e^(beta a) finite in float64)",
    )


def validate_tau(value) -> float:
    require(math.isfinite(value) and value >= 0, "tau", value, "a noise level >= 0")
    return float(value)


def validate_a(value) -> float:
    require(
        math.isfinite(value) and value > 0,
        "a",
        value,
        "the second eigenvalue of A = diag(1, a): a number > 0 (A positive definite)",
    )
    return float(value)


def besseli(order, x) -> float:
    """Modified Bessel function ``I_order(x)`` (mpmath), as a float."""
    return float(mp.besseli(order, x))


# --- the kernel on S^1 and its Fourier modes (Jacobi-Anger) ---------------------------------------
def jacobi_anger_coefficient(n: int, x: float) -> float:
    """``(1/2 pi) int_0^{2 pi} e^{x cos psi} cos(n psi) d psi`` by quadrature; equals ``I_n(x)``,
    the identity ``e^{x cos psi} = I_0(x) + 2 sum_n I_n(x) cos(n psi)`` used throughout."""
    return float(
        mp.quad(lambda p: mp.exp(x * mp.cos(p)) * mp.cos(n * p), [0, mp.pi, 2 * mp.pi])
        / (2 * mp.pi)
    )


def fourier_cutoff(x: float, tol: float = 1e-13) -> int:
    """Smallest ``K`` with ``sum_{|n| > K} |I_n(x)| <= tol I_0(|x|)``: truncating the Jacobi-Anger
    series there changes ``e^{x cos psi}`` by at most ``tol`` relative to its mean."""
    x = abs(float(x))
    if x == 0:
        return 0
    i0, K = besseli(0, x), 0
    # I_n decreases in n > 0, and I_{n+1}/I_n < x / (2(n+1)), so the tail is bounded by a
    # geometric series once x/(2(n+1)) < 1/2.
    while True:
        tail = 2 * besseli(K + 1, x)
        ratio = x / (2 * (K + 2))
        if ratio < 0.5 and tail / (1 - ratio) <= tol * i0:
            return K
        K += 1


class KernelModes(NamedTuple):
    """``e^{beta <x(theta), A x(phi)>} = sum_{m, n} C[m, n] e^{i m theta} e^{-i n phi}`` for
    ``A = diag(1, a)``, modes ``m, n`` in ``modes`` (truncated; error bound ``tol``)."""

    modes: np.ndarray
    coeffs: np.ndarray
    k_plus: int
    k_minus: int


def kernel_modes(
    beta_value: float,
    a_value: float = 1.0,
    k_plus: int | None = None,
    k_minus: int | None = None,
    tol: float = 1e-13,
) -> KernelModes:
    """Fourier modes of the attention kernel on S^1 with ``A = diag(1, a)``.

    ``<x(theta), A x(phi)> = b_+ cos(theta - phi) + b_- cos(theta + phi)`` (times ``1/beta``) with
    ``b_pm = beta (1 pm a)/2``; Jacobi-Anger on both factors gives
    ``sum_{k,l} I_k(b_+) I_l(b_-) e^{i(k+l) theta} e^{-i(k-l) phi}``, i.e. ``C[m, n] = I_k(b_+)
    I_l(b_-)`` with ``k = (m+n)/2``, ``l = (m-n)/2``. Cutoffs ``k_plus``, ``k_minus`` default to
    ``fourier_cutoff`` of ``b_+``, ``b_-`` (give them to fix the shapes across a sweep)."""
    beta_value, a_value = validate_beta(beta_value), validate_a(a_value)
    validate_kernel(beta_value, a_value)
    bp, bm = beta_value * (1 + a_value) / 2, beta_value * (1 - a_value) / 2
    kp = fourier_cutoff(bp, tol) if k_plus is None else int(k_plus)
    km = fourier_cutoff(bm, tol) if k_minus is None else int(k_minus)
    top = kp + km
    modes = np.arange(-top, top + 1)
    ip = {j: besseli(abs(j), bp) for j in range(-kp, kp + 1)}
    # I_{-l} = I_l and I_l(-x) = (-1)^l I_l(x) (b_- < 0 when a > 1)
    im = {j: (-1 if bm < 0 and j % 2 else 1) * besseli(abs(j), abs(bm)) for j in range(-km, km + 1)}
    coeffs = np.zeros((modes.size, modes.size))
    for kk in range(-kp, kp + 1):
        for ll in range(-km, km + 1):
            coeffs[kk + ll + top, kk - ll + top] += ip[kk] * im[ll]
    return KernelModes(modes, coeffs, kp, km)


def interaction_kernel(theta_x, theta_y, beta_value: float, a_value: float = 1.0):
    """``e^{beta <x, A y>}`` for angles (numpy, broadcasting): the direct sum the modes replace."""
    return np.exp(
        beta_value
        * (np.cos(theta_x) * np.cos(theta_y) + a_value * np.sin(theta_x) * np.sin(theta_y))
    )


# --- clustering threshold (spec §5.3) ------------------------------------------------------------
def linearised_rate_derivation() -> dict[str, sp.Expr]:
    """Linearise the S^1 Fokker-Planck equation ``rho_t = -(rho U')' + tau rho''`` (A = I) at the
    uniform state ``rho_0 = 1/(2 pi)``, perturbation ``eps cos(k theta)``.

    Jacobi-Anger: ``int e^{beta cos(theta - phi)} cos(k phi) d phi = 2 pi I_k(beta) cos(k theta)``,
    so ``U_1 = (eps/beta) 2 pi I_k(beta) cos(k theta)``; ``U_0`` is constant, so the linear part is
    ``-rho_0 U_1'' + tau rho_1''``. Returns the pieces and ``rate`` = growth rate of mode ``k``."""
    rho0 = 1 / (2 * sp.pi)
    rho1 = eps * sp.cos(k * theta)
    U1 = eps * 2 * sp.pi * sp.besseli(k, beta) / beta * sp.cos(k * theta)
    rhs = -sp.diff(rho0 * sp.diff(U1, theta), theta) + tau * sp.diff(rho1, theta, 2)
    rate = sp.simplify(rhs / rho1)
    return {"rho1": rho1, "U1": U1, "linear_rhs": rhs, "rate": rate}


def mode_rate(mode: int, beta_value: float, tau_value: float) -> float:
    """``r_k = k^2 (I_k(beta)/beta - tau)`` (S^1, A = I)."""
    return mode**2 * (besseli(mode, beta_value) / beta_value - tau_value)


def threshold_circle_expr() -> sp.Expr:
    """``tau_c``: the noise at which the first Fourier mode stops growing (solves ``r_1 = 0``)."""
    rate = linearised_rate_derivation()["rate"].subs(k, 1)
    (root,) = sp.solve(sp.Eq(rate, 0), tau)
    return root


def tau_c(beta_value: float, dim: int = 2) -> float:
    """Clustering threshold of the isotropic model (A = I) on S^{dim-1}:
    ``Gamma(d/2) 2^{d/2-1} I_{d/2}(beta) / beta^{d/2}`` (= ``I_1(beta)/beta`` on S^1)."""
    beta_value = validate_beta(beta_value)
    require(dim >= 2, "dim", dim, "an integer >= 2")
    h = dim / 2
    return float(
        mp.gamma(h) * mp.power(2, h - 1) * mp.besseli(h, beta_value) / mp.power(beta_value, h)
    )


def tau_c_euler(beta_value: float, dt: float) -> float:
    """Threshold of the Euler-Maruyama scheme on S^1 with step ``dt``: per step the drift
    multiplies mode 1 by ``1 + dt I_1(beta)/beta`` (linear order) and the exact Gaussian angle
    increment by ``e^{-tau dt}``, so mode 1 is neutral at ``tau = ln(1 + dt I_1/beta)/dt``
    ``= tau_c (1 - dt tau_c/2 + ...)``."""
    rate = besseli(1, beta_value) / beta_value
    return math.log1p(dt * rate) / dt


def funk_hecke_eigenvalue(ell: int, dim: int, beta_value: float) -> float:
    """``lambda_l``: ``int e^{beta <x, y>} Y_l(y) dsigma(y) = lambda_l Y_l(x)`` for the normalised
    surface measure on S^{dim-1}, by quadrature of the Funk-Hecke formula (Gegenbauer
    ``C_l^{(d-2)/2}(t)/C_l^{(d-2)/2}(1)``, weight ``(1-t^2)^{(d-3)/2}``; Chebyshev for d = 2)."""
    al = (dim - 2) / 2

    def legendre(tt):
        if dim == 2:
            return mp.chebyt(ell, tt)
        return mp.gegenbauer(ell, al, tt) / mp.gegenbauer(ell, al, 1)

    # t = cos(psi): the weight (1 - t^2)^{(d-3)/2} dt becomes sin(psi)^{d-2} dpsi (no endpoint
    # singularity for d = 2)
    def w(p):
        return mp.sin(p) ** (dim - 2)

    # mp.quad returns a (value, error) pair only with error=True: a number here
    num = mp.mpf(
        mp.quad(
            lambda p: mp.exp(beta_value * mp.cos(p)) * legendre(mp.cos(p)) * w(p),
            [0, mp.pi / 2, mp.pi],
        )
    )
    den = mp.mpf(mp.quad(w, [0, mp.pi / 2, mp.pi]))
    return float(num / den)


def funk_hecke_closed_form(ell: int, dim: int, beta_value: float) -> float:
    """``Gamma(d/2) (2/beta)^{d/2-1} I_{l+d/2-1}(beta)``, the closed form of ``lambda_l``."""
    h = dim / 2
    return float(
        mp.gamma(h) * mp.power(2 / mp.mpf(beta_value), h - 1) * mp.besseli(ell + h - 1, beta_value)
    )


def sphere_mode_rate(ell: int, dim: int, beta_value: float, tau_value: float) -> float:
    """Growth rate of the degree-``ell`` spherical harmonic at the uniform state on S^{dim-1}:
    ``l (l + d - 2) (lambda_l / beta - tau)`` (``-Delta Y_l = l(l+d-2) Y_l``)."""
    return (
        ell
        * (ell + dim - 2)
        * (funk_hecke_closed_form(ell, dim, beta_value) / beta_value - tau_value)
    )


# --- weakly nonlinear analysis of the stationary equation ----------------------------------------
def _constant_term(expr: sp.Expr, z: sp.Symbol) -> sp.Expr:
    poly = sp.Poly(sp.expand(expr * z**40), z)
    return poly.coeff_monomial(z**40)


@lru_cache(maxsize=1)
def landau_derivation() -> dict[str, sp.Basic]:
    """Landau expansion of the self-consistency on S^1 (A = I) near ``tau_c``.

    Stationary states: ``rho ∝ exp(x_1 cos theta + x_2 cos 2 theta + ...)`` with
    ``x_k = a_k r_k``, ``a_k = 2 I_k(beta)/(beta tau)``, ``r_k = <cos k theta>_rho`` (the mode
    ``x_3`` enters ``r_1`` only at fifth order). With ``a_1 = 2(1 + delta)``, ``delta = tau_c/tau
    - 1``, and ``a_2`` at ``tau_c`` (``= 2 I_2/I_1``), the branch is ``r_1^2 = c delta`` with
    ``c = (2 - a_2)/(1 - a_2)``: continuous (supercritical) iff ``a_2 < 1``, i.e.
    ``I_2(beta)/I_1(beta) < 1/2``."""
    x1, x2, z, sc = sp.symbols("x_1 x_2 z s")
    a2, delta = sp.symbols("a_2 delta", real=True)
    cos1, cos2 = (z + 1 / z) / 2, (z**2 + z**-2) / 2
    expo = sc * x1 * cos1 + sc**2 * x2 * cos2  # x_2 ~ x_1^2
    series = sum(expo**n / sp.factorial(n) for n in range(5))
    Z = _constant_term(sp.expand(series), z)  # <exp(...)> over theta, to O(s^4)
    logZ = sp.series(sp.log(Z), sc, 0, 5).removeO()
    # r_k = d log Z / d(scaled x_k): r_1 = O(s), r_2 = O(s^2)
    r1 = sp.expand(sp.diff(logZ, x1) / sc)
    r2 = sp.expand(sp.diff(logZ, x2) / sc**2)
    # x_2 = a_2 r_2 at leading order: x_2 = a_2 (x_2/2 + x_1^2/8)
    x2_sol = sp.solve(sp.Eq(x2, a2 * r2.coeff(sc, 2)), x2)[0]
    # x_1 = a_1 r_1 divided by x_1: 1 = a_1 (1/2 + s^2 (...)), a_1 = 2 (1 + delta)
    ratio = sp.expand(sp.expand(r1 / (sc * x1)).subs(x2, x2_sol))
    X = sp.Symbol("X")  # x_1^2
    c0, c2 = (cast(sp.Expr, ratio.coeff(sc, n)) for n in (0, 2))  # coefficients: expressions
    eq = sp.expand(2 * (1 + delta) * (c0 + c2.subs(x1**2, X)) - 1)
    x1sq = sp.solve(sp.Eq(eq, 0), X)[0]
    x1sq_lead = sp.series(x1sq, delta, 0, 2).removeO()
    r1sq = sp.simplify(x1sq_lead / 4)  # r_1 = x_1/2 at leading order
    coefficient = sp.factor(sp.simplify(r1sq / delta))
    return {
        "r1_series": r1,
        "r2_series": r2,
        "x2": x2_sol,
        "r1_squared": r1sq,
        "amplitude": coefficient,
        "a2": a2,
        "delta": delta,
    }


def landau_amplitude(beta_value: float) -> float:
    """``c`` in ``r_1^2 ≈ c (tau_c/tau - 1)`` just below ``tau_c``; negative ⇒ discontinuous."""
    d = landau_derivation()
    a2v = 2 * besseli(2, beta_value) / besseli(1, beta_value)
    return float(cast(sp.Expr, d["amplitude"].subs(d["a2"], a2v)))  # subs is typed as Basic


def tricritical_beta() -> float:
    """``beta_*``: ``I_2(beta)/I_1(beta) = 1/2``; continuous transition below, discontinuous
    (hysteresis) above."""
    return float(mp.findroot(lambda x: mp.besseli(2, x) / mp.besseli(1, x) - 0.5, 2.4))


def stationary_modes(
    beta_value: float,
    tau_value: float,
    r_start: float = 0.9,
    modes: int = 32,
    grid: int = 2048,
    damping: float = 0.5,
    iterations: int = 20000,
    tol: float = 1e-12,
) -> np.ndarray:
    """A stationary state of S^1 (A = I) with mirror symmetry: ``r_k = <cos k theta>`` solving
    ``rho ∝ exp(sum_k a_k r_k cos k theta)`` by damped fixed-point iteration from the von Mises
    state with ``r_1 = r_start`` (quadrature on a uniform grid: spectrally accurate). From a
    clustered start it lands on the stable clustered branch where one exists, else on uniform."""
    beta_value, tau_value = validate_beta(beta_value), validate_tau(tau_value)
    require(tau_value > 0, "tau", tau_value, "a noise level > 0")
    th = 2 * np.pi * np.arange(grid) / grid
    ks = np.arange(1, modes + 1)
    cos = np.cos(np.outer(ks, th))
    ak = np.array([2 * besseli(int(kk), beta_value) for kk in ks]) / (beta_value * tau_value)
    x = np.zeros(modes)
    x[0] = 2 * r_start  # a von Mises state of moderate concentration
    r = np.zeros(modes)
    for _ in range(iterations):
        e = x @ cos
        w = np.exp(e - e.max())
        r_new = cos @ w / w.sum()
        r = r_new if not r.any() else (1 - damping) * r + damping * r_new
        x_new = ak * r
        if np.max(np.abs(x_new - x)) < tol:
            x = x_new
            break
        x = x_new
    return r


def stationary_order_parameter(beta_value: float, tau_value: float, r_start: float = 0.9) -> float:
    """Mean-field ``r_1`` of the stationary state reached from a clustered start (0: uniform)."""
    return float(abs(stationary_modes(beta_value, tau_value, r_start)[0]))


def spinodal_tau(beta_value: float, tol: float = 1e-6) -> float:
    """Largest ``tau`` at which a clustered stationary state exists (bisection on the fixed-point
    solve); ``= tau_c`` for a continuous transition, ``> tau_c`` for a discontinuous one."""
    tc = tau_c(beta_value)
    lo, hi = 0.5 * tc, 2.0 * tc
    while hi - lo > tol * tc:
        mid = (lo + hi) / 2
        if stationary_order_parameter(beta_value, mid) > 1e-3:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --- energy (spec §5.1-5.2) -----------------------------------------------------------------------
def uniform_energy_expr() -> sp.Expr:
    """``F_tau(uniform)`` on S^1, A = I, density ``1/(2 pi)`` w.r.t. ``d theta``."""
    rho = 1 / (2 * sp.pi)
    interaction = -1 / (2 * beta) * rho**2 * (2 * sp.pi) * 2 * sp.pi * sp.besseli(0, beta)
    entropy = tau * sp.integrate(rho * sp.log(rho), (theta, 0, 2 * sp.pi))
    return sp.simplify(interaction + entropy)


def von_mises_energy(
    kappa_value: float, beta_value: float, tau_value: float, modes: int | None = None
) -> float:
    """``F_tau`` of ``rho ∝ e^{kappa cos theta}`` (S^1, A = I):
    ``-(1/2 beta)(I_0(beta) + 2 sum_k I_k(beta) A_k(kappa)^2) + tau (kappa A_1(kappa)
    - log(2 pi I_0(kappa)))`` with ``A_k = I_k(kappa)/I_0(kappa)`` (= ``<cos k theta>``)."""
    K = modes or fourier_cutoff(beta_value, 1e-15) + 2
    i0k = mp.besseli(0, kappa_value)
    inter = mp.besseli(0, beta_value) + 2 * mp.fsum(
        mp.besseli(n, beta_value) * (mp.besseli(n, kappa_value) / i0k) ** 2 for n in range(1, K)
    )
    ent = kappa_value * mp.besseli(1, kappa_value) / i0k - mp.log(2 * mp.pi * i0k)
    return float(-inter / (2 * beta_value) + tau_value * ent)


def von_mises_energy_small_kappa() -> sp.Expr:
    """``F_tau(kappa) - F_tau(0)`` to ``O(kappa^2)``: ``kappa^2/4 (tau - I_1(beta)/beta)``, so the
    uniform state is a local minimum along the family iff ``tau > tau_c``."""
    A1 = kappa / 2  # I_1/I_0 = kappa/2 + O(kappa^3)
    inter = -1 / (2 * beta) * 2 * sp.besseli(1, beta) * A1**2
    log_i0 = kappa**2 / 4  # log I_0(kappa) = kappa^2/4 + O(kappa^4)
    ent = kappa * A1 - log_i0
    return sp.expand(inter + tau * ent)


def uniform_energy(beta_value: float, a_value: float, tau_value: float) -> float:
    """``F_tau(uniform)`` on S^1 for ``A = diag(1, a)``: only the ``(0, 0)`` mode of the kernel
    survives the double average, ``C[0, 0] = I_0(b_+) I_0(b_-)``, so
    ``-I_0(b_+) I_0(b_-)/(2 beta) - tau log(2 pi)`` (``= -I_0(beta)/(2 beta) - tau log 2 pi`` at
    ``a = 1``, spec §5.2)."""
    bp, bm = beta_value * (1 + a_value) / 2, beta_value * (1 - a_value) / 2
    return -besseli(0, bp) * besseli(0, abs(bm)) / (2 * beta_value) - tau_value * math.log(
        2 * math.pi
    )


def stationary_density(
    beta_value: float,
    a_value: float,
    tau_value: float,
    well_mass: float = 0.5,
    grid: int = 1024,
    damping: float = 0.5,
    iterations: int = 5000,
    tol: float = 1e-11,
) -> np.ndarray:
    """The two-well stationary density of the S^1 mean-field equation for ``A = diag(1, a)``
    (w.r.t. ``d theta`` on a uniform grid) with mass ``well_mass`` in the half circle of ``e_1``:
    ``rho ∝ exp(U[rho]/tau)`` on each half circle, by damped fixed-point iteration (direct
    quadrature of the kernel) from two bumps at ``0, pi``. The split is imposed because the
    dynamics conserves it for times ~ e^{barrier/tau} (the wells exchange mass only by rare
    crossings), while the bare iteration would drain one well."""
    require(0 < well_mass < 1, "well_mass", well_mass, "a fraction in (0, 1)")
    th = 2 * np.pi * np.arange(grid) / grid
    h = 2 * np.pi / grid
    K = interaction_kernel(th[:, None], th[None, :], beta_value, a_value) * h / beta_value
    right = np.cos(th) > 0
    target = np.where(right, well_mass, 1 - well_mass)

    def split(rho):
        mass_right = rho[right].sum() * h
        return rho * target / np.where(right, mass_right, rho.sum() * h - mass_right)

    rho = split(np.exp(10 * np.cos(th) ** 2))
    for _ in range(iterations):
        e = K @ rho / tau_value
        new = split(np.exp(e - e.max()))
        if np.max(np.abs(new - rho)) < tol * np.max(rho):
            return new
        rho = (1 - damping) * rho + damping * new
    return rho


def energy_density_terms(rho, u, beta_value: float, tau_value: float, a_value: float = 1.0):
    """The dissipation identity on S^1 for a smooth density ``rho`` and control velocity ``u``
    sampled on a uniform grid. Returns ``(dF/dt, -int rho |(dF/drho)'|^2 + int rho u (dF/drho)')``
    where ``dF/dt = int (dF/drho) rho_t`` and ``rho_t = -(rho (U' + u))' + tau rho''`` is computed
    spectrally. The two agree for every ``rho`` iff the drift is the W2 gradient of ``F_tau``."""
    rho, u = np.asarray(rho, float), np.asarray(u, float)
    n = rho.size
    th = 2 * np.pi * np.arange(n) / n
    h = 2 * np.pi / n
    freq = np.fft.fftfreq(n, 1 / n)

    def deriv(f):
        return np.real(np.fft.ifft(1j * freq * np.fft.fft(f)))

    U = interaction_kernel(th[:, None], th[None, :], beta_value, a_value) @ rho * h / beta_value
    dF = -U + tau_value * (np.log(rho) + 1)
    rho_t = -deriv(rho * (deriv(U) + u)) + tau_value * deriv(deriv(rho))
    rate = np.sum(dF * rho_t) * h
    identity = (-np.sum(rho * deriv(dF) ** 2) + np.sum(rho * u * deriv(dF))) * h
    return float(rate), float(identity)


def energy_of_density(rho, beta_value: float, tau_value: float, a_value: float = 1.0) -> float:
    """``F_tau`` of a density sampled on a uniform grid of S^1 (rectangle rule: spectral)."""
    rho = np.asarray(rho, float)
    n = rho.size
    th = 2 * np.pi * np.arange(n) / n
    h = 2 * np.pi / n
    K = interaction_kernel(th[:, None], th[None, :], beta_value, a_value)
    inter = -(rho @ K @ rho) * h * h / (2 * beta_value)
    return float(inter + tau_value * np.sum(rho * np.log(rho)) * h)


# --- order parameters (spec §6) ----------------------------------------------------------------
def order_parameter(angles, mode: int = 1) -> float:
    """``r_k = |(1/N) sum_j e^{i k theta_j}|`` (numpy; the jax twin is in simulate)."""
    return float(np.abs(np.mean(np.exp(1j * mode * np.asarray(angles)))))


def uniform_order_parameter_mean(
    n_tokens: int, tau_value: float | None = None, tau_c_value: float | None = None
) -> float:
    """``E r_1`` of N tokens in the Gibbs state ``exp(N sum_k I_k r_k^2/(beta tau))`` above
    ``tau_c`` (mode 1 only): ``N r_1^2`` is exponential with mean ``1/(1 - tau_c/tau)`` (no
    interaction: mean 1), so ``E r_1 = sqrt(pi / (4 N (1 - tau_c/tau)))``."""
    chi = 1.0
    if tau_value is not None:
        require(tau_c_value is not None, "tau_c_value", tau_c_value, "tau_c, given with tau")
        chi = 1 / (1 - cast(float, tau_c_value) / tau_value)
    return math.sqrt(math.pi * chi / (4 * n_tokens))


# --- restoring rates of point clusters (spec §5.4) ------------------------------------------------
def cluster_velocity(displaced: sp.Expr, clusters: list[tuple[sp.Expr, sp.Expr]]) -> sp.Expr:
    """Velocity of a token at angle ``displaced`` from point clusters ``[(mass, angle), ...]``,
    ``A = diag(1, a)``, no noise: ``sum_c m_c e^{beta <x, A y_c>} <x', A y_c>``."""
    x = sp.Matrix([sp.cos(displaced), sp.sin(displaced)])
    dx = sp.Matrix([-sp.sin(displaced), sp.cos(displaced)])
    A = sp.diag(1, a)
    out: sp.Expr = sp.Integer(0)
    for mass, angle in clusters:
        y = A * sp.Matrix([sp.cos(angle), sp.sin(angle)])
        out += mass * sp.exp(beta * (x.T * y)[0]) * (dx.T * y)[0]
    return out


def restoring_rates() -> dict[str, sp.Expr]:
    """Leading-order (small displacement ``eps``) relaxation rates, noise-free, cluster mass
    ``m_w`` at ``e_1`` and ``1 - m_w`` at ``-e_1``:

    * ``single``: one token displaced from the ``e_1`` cluster (the opposite well neglected);
    * ``rigid``: the whole ``e_1`` cluster rotated (one well only);
    * ``opposing``: both clusters displaced toward ``e_2`` (``+eps`` and ``pi - eps``), the mode a
      terminal cost ``-<x, e_2>`` excites;
    * ``co_rotating``: both clusters rotated by ``+eps``."""

    def rate(vel: sp.Expr) -> sp.Expr:
        slope = cast(sp.Expr, sp.diff(vel, eps).subs(eps, 0))  # subs is typed as Basic
        return cast(sp.Expr, sp.simplify(-slope))

    return {
        "single": rate(cluster_velocity(eps, [(m_w, sp.Integer(0))])),
        "rigid": rate(cluster_velocity(eps, [(m_w, eps)])),
        "opposing": rate(cluster_velocity(eps, [(m_w, eps), (1 - m_w, sp.pi - eps)])),
        "co_rotating": rate(cluster_velocity(eps, [(m_w, eps), (1 - m_w, sp.pi + eps)])),
    }


def opposing_rate(beta_value: float, a_value: float, mass: float = 0.5) -> float:
    """``m (1-a) e^beta - (1-m)(1+a) e^{-beta}``: the noise-free rate of the mode the direction
    target excites (``restoring_rates()['opposing']``)."""
    return mass * (1 - a_value) * math.exp(beta_value) - (1 - mass) * (1 + a_value) * math.exp(
        -beta_value
    )


# --- the linear-quadratic turnpike (spec §5.5) ----------------------------------------------------
def scalar_lq() -> dict[str, sp.Expr]:
    """``x' = -kappa x + b w``, cost ``g x_T + lambda/2 int_0^T w^2``.

    ``x_T = e^{-kappa T} x_0 + int e^{-kappa (T-t)} b w dt`` is linear in ``w``, so the cost is
    stationary iff ``g b e^{-kappa (T-t)} + lambda w = 0``. Returns the optimal control, its
    stationarity residual, the escape ``Delta x_T`` (= ``-g Gramian / lambda``), the Gramian, the
    width of the terminal layer holding a fraction ``q`` of ``int w^2`` and its large-``T``
    limit."""
    q = sp.Symbol("q", positive=True)
    w_star = -(g * b / lam) * sp.exp(-kappa * (T - t))
    stationarity = sp.simplify(g * b * sp.exp(-kappa * (T - t)) + lam * w_star)
    gramian = sp.integrate(b**2 * sp.exp(-2 * kappa * (T - t)), (t, 0, T))
    escape = sp.simplify(sp.integrate(sp.exp(-kappa * (T - t)) * b * w_star, (t, 0, T)))
    energy_last = sp.integrate(w_star**2, (t, T - s, T))
    energy_all = sp.integrate(w_star**2, (t, 0, T))
    width = sp.solve(sp.Eq(energy_last / energy_all, q), s)[0]
    width_limit = sp.limit(width, T, sp.oo)
    return {
        "control": w_star,
        "stationarity": stationarity,
        "gramian": sp.simplify(gramian),
        "escape": escape,
        "width": sp.simplify(width),
        "width_limit": sp.simplify(width_limit),
        "q": q,
    }


def lq_width(kappa_value: float, fraction: float = 0.9) -> float:
    """Large-``T`` width of the terminal layer holding ``fraction`` of ``int w^2`` in the scalar
    LQ problem: ``ln(1/(1 - fraction))/(2 kappa)`` (``scalar_lq()['width_limit']``)."""
    return math.log(1 / (1 - fraction)) / (2 * kappa_value)


def terminal_width(profile_sq, depth, fraction: float = 0.9) -> float:
    """Depth interval at the output holding ``fraction`` of ``int ||W_t||^2 dt`` for a piecewise
    constant profile (``profile_sq`` per bin, bins of equal width ending at ``depth``), linear
    inside the bin where the fraction is reached."""
    e = np.asarray(profile_sq, float)[::-1]
    total = e.sum()
    if total <= 0:
        return float("nan")
    h = depth / e.size
    cum = np.cumsum(e) / total
    j = int(np.searchsorted(cum, fraction))
    before = cum[j - 1] if j > 0 else 0.0
    return float(h * (j + (fraction - before) / (cum[j] - before)))
