"""Theory of the noisy mean-field transformer (spec mean_field.md; ``theory.mean_field.energy``):
the threshold, the energy, the restoring rates and the LQ turnpike."""

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from theory.mean_field import energy as mf

FAST = settings(max_examples=15, deadline=None)
FEW = settings(max_examples=4, deadline=None)
betas = st.floats(0.3, 5.0)


# ---- theory: the threshold ---------------------------------------------------------------------


def test_linearised_rate_is_the_spec_formula_and_threshold_is_i1_over_beta():
    rate = mf.linearised_rate_derivation()["rate"]
    spec = mf.k**2 * (sp.besseli(mf.k, mf.beta) / mf.beta - mf.tau)
    assert sp.simplify(rate - spec) == 0
    assert sp.simplify(mf.threshold_circle_expr() - sp.besseli(1, mf.beta) / mf.beta) == 0


@FAST
@given(n=st.integers(0, 6), x=st.floats(0.1, 6.0))
def test_jacobi_anger_coefficients_are_bessel_i(n, x):
    assert mf.jacobi_anger_coefficient(n, x) == pytest.approx(special.iv(n, x), rel=1e-10)


@FAST
@given(beta=betas)
def test_threshold_values_and_mode_ordering(beta):
    tc = mf.tau_c(beta)
    assert tc == pytest.approx(special.iv(1, beta) / beta, rel=1e-12)
    assert mf.mode_rate(1, beta, 0.99 * tc) > 0 > mf.mode_rate(1, beta, 1.01 * tc)
    # I_k decreasing in k: mode 1 is the first to go unstable as tau decreases
    assert all(mf.mode_rate(k, beta, tc) < 0 for k in (2, 3, 4))


@FAST
@given(beta=betas, dim=st.integers(2, 5), ell=st.integers(1, 3))
def test_funk_hecke_closed_form_and_sphere_threshold(beta, dim, ell):
    quad = mf.funk_hecke_eigenvalue(ell, dim, beta)
    assert mf.funk_hecke_closed_form(ell, dim, beta) == pytest.approx(quad, rel=1e-8)
    assert mf.tau_c(beta, dim) == pytest.approx(
        mf.funk_hecke_eigenvalue(1, dim, beta) / beta, rel=1e-8
    )
    assert mf.sphere_mode_rate(1, dim, beta, mf.tau_c(beta, dim)) == pytest.approx(0, abs=1e-9)


def _spectral_rate(beta, tau, n=256, eps=1e-6):
    """Growth rate of cos(theta) at the uniform state from the S^1 Fokker-Planck equation by
    quadrature and FFT derivatives (no Fourier series of the kernel)."""
    th = 2 * np.pi * np.arange(n) / n
    h = 2 * np.pi / n
    freq = np.fft.fftfreq(n, 1 / n)

    def d(f):
        return np.real(np.fft.ifft(1j * freq * np.fft.fft(f)))

    rho = 1 / (2 * np.pi) + eps * np.cos(th)
    U = mf.interaction_kernel(th[:, None], th[None, :], beta) @ rho * h / beta
    rho_t = -d(rho * d(U)) + tau * d(d(rho))
    return np.sum(rho_t * np.cos(th)) * h / (np.pi * eps)


@FEW
@given(beta=betas, ratio=st.floats(0.5, 1.5))
def test_fourier_linearisation_matches_a_direct_spectral_computation(beta, ratio):
    tau = ratio * mf.tau_c(beta)
    assert _spectral_rate(beta, tau) == pytest.approx(mf.mode_rate(1, beta, tau), abs=1e-5)


def test_euler_maruyama_threshold_shift():
    tc = mf.tau_c(2.0)
    for dt in (0.1, 0.01):
        assert mf.tau_c_euler(2.0, dt) == pytest.approx(tc * (1 - dt * tc / 2), rel=dt**2 * 2)
    assert mf.tau_c_euler(2.0, 1e-7) == pytest.approx(tc, rel=1e-6)


def test_landau_expansion_against_the_stationary_equation():
    d = mf.landau_derivation()
    assert sp.simplify(d["amplitude"] - (2 - d["a2"]) / (1 - d["a2"])) == 0
    beta_star = mf.tricritical_beta()
    assert special.iv(2, beta_star) / special.iv(1, beta_star) == pytest.approx(0.5, rel=1e-10)
    for beta in (1.0, 2.0):  # continuous: r_1^2 = c delta + O(delta^2) below tau_c, 0 above
        c, tc = mf.landau_amplitude(beta), mf.tau_c(beta)
        assert c > 0
        ratio = [mf.stationary_order_parameter(beta, tc / (1 + d)) ** 2 / d for d in (2e-3, 1e-3)]
        assert 2 * ratio[1] - ratio[0] == pytest.approx(c, rel=0.01)  # Richardson, delta -> 0
        assert mf.stationary_order_parameter(beta, 1.01 * tc) < 1e-6
    # beta = 4 > beta_*: discontinuous, a clustered state survives above tau_c (hysteresis)
    assert mf.landau_amplitude(4.0) < 0
    assert mf.stationary_order_parameter(4.0, 1.03 * mf.tau_c(4.0)) > 0.5
    assert 1.0 < mf.spinodal_tau(4.0, tol=1e-3) / mf.tau_c(4.0) < 1.1


# ---- theory: energy ----------------------------------------------------------------------------


@FAST
@given(beta=betas, tau=st.floats(0.01, 2.0))
def test_energy_of_the_uniform_state_and_the_von_mises_family(beta, tau):
    expr = mf.uniform_energy_expr()
    value = float(expr.subs({mf.beta: beta, mf.tau: tau}))
    assert value == pytest.approx(-special.iv(0, beta) / (2 * beta) - tau * math.log(2 * math.pi))
    assert mf.uniform_energy(beta, 1.0, tau) == pytest.approx(value)
    assert mf.von_mises_energy(0.0, beta, tau) == pytest.approx(value)
    kappa = 1e-3  # F(kappa) - F(0) = kappa^2/4 (tau - I_1/beta) + O(kappa^4)
    small = mf.von_mises_energy_small_kappa().subs({mf.kappa: kappa, mf.beta: beta, mf.tau: tau})
    assert mf.von_mises_energy(kappa, beta, tau) - value == pytest.approx(
        float(small), rel=1e-3, abs=1e-12
    )


@FAST
@given(beta=betas, a=st.floats(0.2, 1.0), tau=st.floats(0.01, 1.0))
def test_uniform_energy_anisotropic(beta, a, tau):
    rho = np.full(128, 1 / (2 * np.pi))
    assert mf.uniform_energy(beta, a, tau) == pytest.approx(mf.energy_of_density(rho, beta, tau, a))


@FAST
@given(
    c=st.lists(st.floats(-0.3, 0.3), min_size=6, max_size=6),
    beta=betas,
    a=st.floats(0.3, 1.0),
    tau=st.floats(0.01, 1.0),
)
def test_dissipation_identity_for_smooth_densities(c, beta, a, tau):
    th = 2 * np.pi * np.arange(128) / 128
    rho = np.exp(c[0] * np.cos(th) + c[1] * np.sin(2 * th) + c[2] * np.cos(3 * th))
    rho /= rho.sum() * 2 * np.pi / 128
    u = c[3] + c[4] * np.cos(th) + c[5] * np.sin(2 * th)
    rate, identity = mf.energy_density_terms(rho, u, beta, tau, a)
    assert rate == pytest.approx(identity, rel=1e-6, abs=1e-10)
    rate0, identity0 = mf.energy_density_terms(rho, 0 * u, beta, tau, a)
    assert rate0 == pytest.approx(identity0, rel=1e-6, abs=1e-10) and rate0 <= 1e-12


def test_two_well_stationary_state():
    rho = mf.stationary_density(2.0, 0.5, 0.05, 0.6)
    th = 2 * np.pi * np.arange(rho.size) / rho.size
    h = 2 * np.pi / rho.size
    assert np.sum(rho[np.cos(th) > 0]) * h == pytest.approx(0.6)
    assert abs(np.sum(rho * np.exp(2j * th)) * h) > 0.95  # two tight wells at 0, pi
    assert mf.energy_of_density(rho, 2.0, 0.05, 0.5) < mf.uniform_energy(2.0, 0.5, 0.05)


def test_uniform_order_parameter_mean_by_sampling():
    rng = np.random.default_rng(0)
    r = [mf.order_parameter(rng.uniform(0, 2 * np.pi, 512)) for _ in range(3000)]
    assert np.mean(r) == pytest.approx(mf.uniform_order_parameter_mean(512), rel=0.03)


# ---- theory: restoring rates and the LQ turnpike -------------------------------------------------


def test_restoring_rates_closed_forms():
    r = mf.restoring_rates()
    e = sp.exp(mf.beta)
    assert sp.simplify(r["single"] - mf.m_w * e) == 0
    assert sp.simplify(r["rigid"] - mf.m_w * (1 - mf.a) * e) == 0
    assert (
        sp.simplify(r["opposing"] - (mf.m_w * (1 - mf.a) * e - (1 - mf.m_w) * (1 + mf.a) / e)) == 0
    )
    assert sp.simplify(r["co_rotating"] - (1 - mf.a) * (mf.m_w * e - (1 - mf.m_w) / e)) == 0


def test_scalar_lq_turnpike():
    lq = mf.scalar_lq()
    assert lq["stationarity"] == 0
    vals = {mf.kappa: 1.7, mf.b: 0.8, mf.g: -1.0, mf.lam: 0.3, mf.T: 5.0}
    gram = float(lq["gramian"].subs(vals))
    assert gram == pytest.approx(0.64 * (1 - math.exp(-17)) / 3.4)
    assert float(lq["escape"].subs(vals)) == pytest.approx(gram / 0.3)  # -g Gamma / lambda
    assert float(lq["width_limit"].subs({mf.kappa: 1.7, lq["q"]: 0.9})) == pytest.approx(
        mf.lq_width(1.7, 0.9)
    )


def test_terminal_width_of_an_exponential_profile():
    depth, bins, kappa = 8.0, 800, 1.5
    t = (np.arange(bins) + 0.5) * depth / bins
    width = mf.terminal_width(np.exp(-2 * kappa * (depth - t)), depth, 0.9)
    assert width == pytest.approx(mf.lq_width(kappa, 0.9), rel=0.01)
