"""Noisy mean-field transformer (spec mean_field.md): the theory of ``theory.mean_field.energy``, the
particle integrators of ``simulate.mean_field.flow`` and the experiment of
``simulate.mean_field.training``."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import simulate  # noqa: F401  (float64)
from simulate.mean_field import flow as mff
from simulate.mean_field import training as mft
from simulate.train import seed_streams
from theory.mean_field import energy as mf
from theory.validation import ConfigError

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


# ---- theory: restoring rates and the LQ turnpike --------------------------------------------------


def test_restoring_rates_closed_forms():
    r = mf.restoring_rates()
    e = sp.exp(mf.beta)
    assert sp.simplify(r["single"] - mf.m_w * e) == 0
    assert sp.simplify(r["rigid"] - mf.m_w * (1 - mf.a) * e) == 0
    assert (
        sp.simplify(r["opposing"] - (mf.m_w * (1 - mf.a) * e - (1 - mf.m_w) * (1 + mf.a) / e)) == 0
    )
    assert sp.simplify(r["co_rotating"] - (1 - mf.a) * (mf.m_w * e - (1 - mf.m_w) / e)) == 0


@pytest.mark.parametrize("beta, a, n0", [(2.0, 0.5, 32), (1.0, 0.3, 20), (3.0, 0.8, 50)])
def test_rayleigh_rate_of_two_point_clusters_is_the_opposing_rate(beta, a, n0):
    """Clusters of masses m (at e_1) and 1 - m (at -e_1) moved toward e_2: each relaxes at the
    opposing rate with its own mass, so the Rayleigh quotient is their mass-weighted mean."""
    theta = jnp.concatenate([jnp.zeros(n0), jnp.full(64 - n0, jnp.pi)])
    rate = mff.rayleigh_rate(theta, mff.circle_kernel(beta, a), jnp.cos(theta))
    m = n0 / 64
    expected = m * mf.opposing_rate(beta, a, m) + (1 - m) * mf.opposing_rate(beta, a, 1 - m)
    assert float(rate) == pytest.approx(expected, rel=1e-9)


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


# ---- simulate: particles -------------------------------------------------------------------------


@FEW
@given(seed=st.integers(0, 10**6), beta=st.floats(0.3, 4.0), a=st.floats(0.3, 1.5))
def test_fourier_attention_equals_the_direct_sum(seed, beta, a):
    theta = jax.random.uniform(jax.random.PRNGKey(seed), (64,), maxval=2 * np.pi)
    U, v = mff.circle_potential(theta, mff.circle_kernel(beta, a))
    U2, v2 = mff.circle_potential_direct(theta, beta, a)
    scale = math.exp(beta * max(1.0, a))
    np.testing.assert_allclose(U, U2, atol=1e-12 * scale)
    np.testing.assert_allclose(v, v2, atol=1e-12 * scale)


@FEW
@given(seed=st.integers(0, 10**6), beta=st.floats(0.3, 3.0), a=st.floats(0.3, 1.0))
def test_circle_and_sphere_velocities_agree_on_s1(seed, beta, a):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    theta = jax.random.uniform(k1, (32,), maxval=2 * np.pi)
    W = jax.random.normal(k2, (2, 5))
    X = jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
    tangent = jnp.stack([-jnp.sin(theta), jnp.cos(theta)], -1)
    sphere = jnp.sum(mff.sphere_velocity(X, jnp.diag(jnp.array([1.0, a])), beta, W) * tangent, -1)
    circle = mff.circle_potential(theta, mff.circle_kernel(beta, a))[1] + mff.circle_ffn_velocity(
        theta, W
    )
    np.testing.assert_allclose(sphere, circle, atol=1e-11)


def test_projection_keeps_tokens_on_the_sphere():
    key = jax.random.PRNGKey(3)
    X0 = mff.uniform_sphere(key, 64, 4)
    noise = jax.random.normal(jax.random.fold_in(key, 1), (200, 64, 4))
    W = jax.random.normal(jax.random.fold_in(key, 2), (200, 4, 7))
    A = jnp.diag(jnp.array([1.0, 0.7, 0.5, 0.3]))
    X = mff.sphere_flow(X0, noise, A, 2.0, 0.5, 0.05, W, save_every=10)
    np.testing.assert_allclose(jnp.linalg.norm(X, axis=-1), 1.0, atol=1e-12)
    V = jax.random.normal(key, X0.shape)
    np.testing.assert_allclose(jnp.sum(mff.project(X0, V) * X0, -1), 0.0, atol=1e-12)


def test_sphere_noise_is_brownian_motion_with_generator_tau_laplacian():
    """Without interaction (A = 0) E<X_t, X_0> = e^{-(d-1) tau t}: the renormalisation supplies
    the Ito correction of spherical Brownian motion."""
    d, tau, dt, steps, n = 3, 0.5, 0.02, 50, 3000
    key = jax.random.PRNGKey(0)
    X0 = mff.uniform_sphere(key, n, d)
    noise = jax.random.normal(jax.random.fold_in(key, 1), (steps, n, d))
    X = mff.sphere_flow(X0, noise, jnp.zeros((d, d)), 1.0, tau, dt, save_every=steps)
    overlap = np.asarray(jnp.sum(X[-1] * X0, -1))
    expected = math.exp(-(d - 1) * tau * dt * steps)
    assert abs(overlap.mean() - expected) < 3 * overlap.std() / math.sqrt(n)
    theta0 = jax.random.uniform(key, (n,), maxval=2 * np.pi)
    zero = mff.CircleKernel(jnp.zeros(1), jnp.zeros((1, 1)), jnp.zeros((1, 1)))
    th = mff.circle_flow(theta0, noise[..., 0], zero, tau, dt, save_every=steps)
    cos = np.asarray(jnp.cos(th[-1] - theta0))
    assert abs(cos.mean() - math.exp(-tau * dt * steps)) < 3 * cos.std() / math.sqrt(n)


def _keys(seed=0):
    s = seed_streams([seed])
    return jnp.stack([s["init"][0], s["noise"][0]])


def test_energy_decreases_along_the_untrained_flow_within_noise():
    cfg = mft.MeanFieldConfig(tokens=512, dt=0.0625, save_every=4, float64=True)
    flow = mft.Flow(cfg)
    F = np.asarray(flow.observe_flow(jnp.zeros((cfg.bins, 2, 5)), _keys())["energy"])
    decrease = F[0] - F.min()
    assert decrease > 0.3
    assert np.max(np.diff(F)) < 0.03 * decrease  # KDE/finite-N noise only
    assert F[-1] < F[0] - 0.9 * decrease


@pytest.fixture(scope="module")
def small_flow():
    cfg = mft.MeanFieldConfig(tokens=32, dt=0.0625, save_every=4, float64=True, noise="fixed")
    return cfg, mft.Flow(cfg)


def test_gradient_equals_a_finite_difference_with_fixed_noise(small_flow):
    cfg, flow = small_flow
    key = jax.random.PRNGKey(5)
    W = 0.3 * jax.random.normal(key, (cfg.bins, 2, 5))
    D = jax.random.normal(jax.random.fold_in(key, 1), W.shape)
    keys = _keys(1)

    def J(w):
        return flow.objective(w, keys, 0.1)[0]

    grad = jax.grad(J)(W)
    h = 1e-5
    fd = (J(W + h * D) - J(W - h * D)) / (2 * h)
    assert float(jnp.sum(grad * D)) == pytest.approx(float(fd), rel=1e-6)
    # the terminal gradient at W = 0 is largest near the output (turnpike, spec §5.5 (i))
    g0 = np.linalg.norm(np.asarray(jax.grad(flow.terminal_loss)(0 * W, keys)), axis=(1, 2))
    assert g0[-1] == g0.max()


def test_float32_agrees_with_float64():
    base = {"tokens": 128, "dt": 0.0625, "save_every": 4}
    W = 0.2 * jax.random.normal(jax.random.PRNGKey(2), (32, 2, 5))
    keys = _keys(2)
    G = [
        float(mft.Flow(mft.MeanFieldConfig(**base, float64=f)).terminal_loss(W, keys))
        for f in (False, True)
    ]
    assert G[0] == pytest.approx(G[1], abs=1e-3)


def test_order_parameter_and_density_observables():
    theta = jnp.asarray(np.random.default_rng(1).uniform(0, 2 * np.pi, 300))
    assert float(mff.order_parameter(theta, 2)) == pytest.approx(
        mf.order_parameter(np.asarray(theta), 2)
    )
    dens = mff.angle_density(theta, 16)
    assert float(jnp.sum(dens) * 2 * np.pi / 16) == pytest.approx(1.0)


# ---- simulate: the experiment ----------------------------------------------------------------------


def test_experiment_trains_through_the_run_store(tmp_path):
    cfg = mft.MeanFieldConfig(
        tokens=32,
        dt=0.125,
        bins=16,
        save_every=8,
        lambdas=(1e-2, 10.0),
        noise="fixed",
        steps=40,
        chunk=20,
        log_every=20,
        seeds=2,
        out=tmp_path / "run",
        quiet=True,
    )
    out = mft.run(cfg)
    from simulate.store import load

    ds, config = load(out)
    assert config["experiment"] == "mean-field"
    assert ds["J"].dims == ("seed", "step", "lam") and ds.sizes["depth"] == 9
    J = ds["J"].values
    assert np.all(J[:, -1] < J[:, 0])  # Adam lowered J (fixed draw) for every seed and lambda
    assert np.all(ds["W"].values[:, 0] == 0)  # step 0 is the untrained flow
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"
    per = summary["per_lambda"]
    assert per["0.01"]["escape"] > per["10"]["escape"] > 0


def test_bad_configuration_fails_with_one_line():
    with pytest.raises(ConfigError, match="lambdas"):
        mft.MeanFieldConfig(lambdas=(-1.0,))
    with pytest.raises(ConfigError, match="bins"):
        mft.MeanFieldConfig(bins=33)
    with pytest.raises(ConfigError, match="beta"):
        mf.tau_c(-1.0)
