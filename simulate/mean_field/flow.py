"""Particles of the noisy mean-field transformer (spec ``mean_field.md`` §3; theory in
``theory.mean_field.energy``): N tokens on S^{d-1}, depth t in [0, T], Euler-Maruyama in
``lax.scan``.

    dX^i = P_{X^i} [ (1/N) sum_j e^{beta <X^i, A X^j>} A X^j + W_t sigma(X^i) ] dt
           + sqrt(2 tau) dB^S(X^i),

``A`` symmetric positive definite, ``sigma(x) = (1, x, x_1^2 - x_2^2, 2 x_1 x_2)`` (m = d + 3;
on S^1 this is the spec's ``(1, cos, sin, cos 2, sin 2)``), ``W_t`` piecewise constant on depth
bins.

Two integrators of the same SDE:

* ``circle_flow`` (S^1, ``A = diag(1, a)``) in the angle: ``theta += v dt + sqrt(2 tau dt) xi``
  (additive noise: exact Brownian increments on the circle). The attention velocity
  ``v = d/dtheta U``, ``U(theta) = (1/(N beta)) sum_j e^{beta <x(theta), A x_j>}``, is evaluated
  through the kernel's Fourier modes (``theory.mean_field.energy.kernel_modes``: Jacobi-Anger,
  truncated with relative error <= 1e-13): ``U = sum_{m,n} (P_{mn} cos m theta <cos n phi> + Q_{mn}
  sin m theta <sin n phi>)/beta`` with the token averages ``<.>`` (the ``cos m theta``, ``sin m
  theta`` as products of ``e^{i theta}``, :func:`harmonics`): O(N K) work instead of
  O(N^2), equal to the direct sum to rounding (tested), which is what makes N = 2048 and
  training through hundreds of steps affordable on a CPU.
* ``sphere_flow`` (any S^{d-1}, any symmetric ``A``): the direct O(N^2) sum, step
  ``X <- normalise(X + P_X drift dt + sqrt(2 tau dt) P_X xi)``. The renormalisation supplies the
  Ito correction ``-(d-1) tau X dt`` of spherical Brownian motion
  (``|X + s P xi|^{-1} = 1 - s^2 |P xi|^2/2 + ...``, ``E |P xi|^2 = d - 1``), so that
  ``E <X_t, X_0> = e^{-(d-1) tau t}`` without interaction (tested).

Noise is passed in as arrays (``(steps, N)`` or ``(steps, N, d)`` standard normals) so that a
training run can hold it fixed (common random numbers, spec §2). The step is wrapped in
``jax.checkpoint`` so reverse-mode through the scan stores only the particle positions.

Why not diffrax (issue 13 item 5, measured on the quick settings, float32, 2 shared CPU cores
under load): ``diffrax.Euler`` on ``MultiTerm(ODETerm, ControlTerm(diagonal, path))`` gives the
same statistics (late ``r_1`` within 0.2-1.8 standard errors over 8 seeds, at tau/tau_c = 0.9
and 1.1), but the training gradient (value and gradient of the terminal loss, 16 draws, N = 256,
128 steps) took 1.49 s against 0.49 s for this loop with ``VirtualBrownianTree`` (3x slower),
and ``UnsafeBrownianPath`` cannot be reverse-differentiated. Forward only (the threshold runs,
2 ratios x 8 seeds, N = 512, 2000 steps) ``UnsafeBrownianPath`` took 7.8-8.8 s against 6.6-11.8 s
(no gain beyond the noise) and ``VirtualBrownianTree`` 19.2 s against 6.6 s; switching would
also change every stored Brownian draw (the README's numbers). So the loop stays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np

from theory.mean_field.energy import kernel_modes


class CircleKernel(NamedTuple):
    """Fourier modes of ``e^{beta <x(theta), A x(phi)>}/beta`` on S^1 folded onto ``m, n >= 0``:
    ``sum_{m,n} P[m, n] cos(m theta) cos(n phi) + Q[m, n] sin(m theta) sin(n phi)`` (a pytree:
    vmappable over beta)."""

    modes: jax.Array
    """mode numbers 0..K (K + 1,), as floats."""
    cos_coeffs: jax.Array
    """P / beta (K + 1, K + 1)."""
    sin_coeffs: jax.Array
    """Q / beta (K + 1, K + 1)."""


def circle_kernel(
    beta: float,
    a: float = 1.0,
    k_plus: int | None = None,
    k_minus: int | None = None,
    tol: float = 1e-13,
) -> CircleKernel:
    """Fold ``theory.mean_field.energy.kernel_modes`` (modes -K..K, ``C[m, n] e^{i m theta} e^{-i n
    phi}``, real with ``C[-m, -n] = C[m, n]``; truncation ``tol``) onto non-negative modes:
    ``Re e^{i(m theta - n phi)} = cos m theta cos n phi + sin m theta sin n phi``, so
    ``P[|m|, |n|] += C[m, n]`` and ``Q[|m|, |n|] += sign(m n) C[m, n]``."""
    km = kernel_modes(beta, a, k_plus, k_minus, tol)
    top = km.k_plus + km.k_minus
    P = np.zeros((top + 1, top + 1))
    Q = np.zeros((top + 1, top + 1))
    for i, m in enumerate(km.modes):
        np.add.at(P[abs(m)], np.abs(km.modes), km.coeffs[i])
        np.add.at(Q[abs(m)], np.abs(km.modes), np.sign(m) * np.sign(km.modes) * km.coeffs[i])
    return CircleKernel(jnp.arange(top + 1.0), jnp.asarray(P / beta), jnp.asarray(Q / beta))


def cast_kernel(kernel: CircleKernel, dtype) -> CircleKernel:
    return CircleKernel(*(x.astype(dtype) for x in kernel))


# --- S^1 in the angle ----------------------------------------------------------------------------
def harmonics(theta: jax.Array, modes: int) -> tuple[jax.Array, jax.Array]:
    """``(cos m theta, sin m theta)`` for m = 0..modes-1, each (modes, N), from one cosine and one
    sine per token by ``e^{i(m+1) theta} = e^{i m theta} e^{i theta}``. The trigonometric
    functions of every mode were half of a training step (profile of the mean-field default);
    the product keeps the phase error at m times that of ``theta`` itself, as ``cos(m theta)``
    has from rounding ``m theta``."""
    c1, s1 = jnp.cos(theta), jnp.sin(theta)

    def next_mode(cs, _):
        c, s = cs
        return (c * c1 - s * s1, s * c1 + c * s1), cs

    # a scan rather than unrolled products: unrolled, the gradient took as long as the trig
    _, (C, S) = jax.lax.scan(
        next_mode, (jnp.ones_like(theta), jnp.zeros_like(theta)), None, length=modes
    )
    return C, S


def circle_potential(
    theta: jax.Array, kernel: CircleKernel, at: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """``(U, U')``: attention potential and velocity of the tokens ``theta`` at their own
    positions, or at the angles ``at``."""
    m = kernel.modes
    C, S = harmonics(theta, m.shape[0])  # (K + 1, N); elementwise sums below fuse (no matvec)
    alpha = kernel.cos_coeffs @ jnp.mean(C, axis=1)
    gamma = kernel.sin_coeffs @ jnp.mean(S, axis=1)
    mg, ma = m * gamma, m * alpha
    if at is not None:
        # the angles ``at`` may be wider than the tokens: evaluate there in their dtype
        dtype = np.promote_types(theta.dtype, at.dtype)
        m, alpha, gamma, mg, ma = (y.astype(dtype) for y in (m, alpha, gamma, mg, ma))
        ang = m[:, None] * at[None, :].astype(dtype)
        C, S = jnp.cos(ang), jnp.sin(ang)
    U = jnp.sum(alpha[:, None] * C + gamma[:, None] * S, axis=0)
    v = jnp.sum(mg[:, None] * C - ma[:, None] * S, axis=0)
    return U, v


def circle_potential_direct(theta: jax.Array, beta: float, a: float = 1.0):
    """The same by the direct O(N^2) sum (reference for tests)."""
    dth = theta[:, None]
    x = jnp.stack([jnp.cos(theta), a * jnp.sin(theta)], -1)  # A x_j
    G = jnp.exp(beta * (jnp.cos(dth) * x[None, :, 0] + jnp.sin(dth) * x[None, :, 1]))
    U = jnp.mean(G, axis=1) / beta
    v = jnp.mean(G * (-jnp.sin(dth) * x[None, :, 0] + jnp.cos(dth) * x[None, :, 1]), axis=1)
    return U, v


def circle_features(theta: jax.Array) -> jax.Array:
    """``sigma(theta) = (1, cos, sin, cos 2, sin 2)`` (N, 5)."""
    return jnp.stack(
        [
            jnp.ones_like(theta),
            jnp.cos(theta),
            jnp.sin(theta),
            jnp.cos(2 * theta),
            jnp.sin(2 * theta),
        ],
        -1,
    )


def circle_ffn_velocity(theta: jax.Array, W: jax.Array) -> jax.Array:
    """Tangential component ``<x'(theta), W sigma(theta)>`` of the FFN, ``W`` of shape (2, 5)."""
    f = circle_features(theta) @ W.T
    return -jnp.sin(theta) * f[:, 0] + jnp.cos(theta) * f[:, 1]


def _scan_saved(step, state, inputs, save_every: int, observe):
    """Run ``step`` over ``inputs`` (leading axis = steps), returning ``observe(state)`` at t = 0
    and after every ``save_every`` steps."""
    n = jax.tree_util.tree_leaves(inputs)[0].shape[0]
    grouped = jax.tree_util.tree_map(
        lambda x: x.reshape(n // save_every, save_every, *x.shape[1:]), inputs
    )

    def block(carry, block_inputs):
        carry, _ = jax.lax.scan(lambda c, i: (step(c, i), None), carry, block_inputs)
        return carry, observe(carry)

    final, saved = jax.lax.scan(block, state, grouped)
    first = jax.tree_util.tree_map(lambda x: x[None], observe(state))
    return final, jax.tree_util.tree_map(lambda a0, rest: jnp.concatenate([a0, rest]), first, saved)


def circle_flow(
    theta0: jax.Array,
    noise: jax.Array,
    kernel: CircleKernel,
    tau,
    dt,
    W: jax.Array | None = None,
    save_every: int = 1,
    observe: Callable[[jax.Array], object] = lambda th: th,
):
    """Euler-Maruyama on S^1: ``theta0`` (N,), ``noise`` (steps, N) standard normals, ``W`` per
    step (steps, 2, 5) or ``None`` (no FFN). Returns ``observe(theta)`` at t = 0, save_every dt,
    ..., steps dt (``steps`` a multiple of ``save_every``)."""
    scale = jnp.sqrt(2 * tau * dt)

    @jax.checkpoint
    def step(th, inp):
        xi, Wn = inp
        v = circle_potential(th, kernel)[1]
        if Wn is not None:
            v = v + circle_ffn_velocity(th, Wn)
        return th + v * dt + scale * xi

    _, saved = _scan_saved(step, theta0, (noise, W), save_every, observe)
    return saved


def circle_flow_keyed(
    theta0: jax.Array,
    key: jax.Array,
    steps: int,
    kernel: CircleKernel,
    tau,
    dt,
    save_every: int = 1,
    observe: Callable[[jax.Array], object] = lambda th: th,
):
    """``circle_flow`` without FFN whose Brownian increments are drawn step by step
    (``normal(fold_in(key, n))``), so that long runs never hold a (steps, N) noise array."""
    scale = jnp.sqrt(2 * tau * dt)

    def step(th, n):
        xi = jax.random.normal(jax.random.fold_in(key, n), th.shape, th.dtype)
        return th + circle_potential(th, kernel)[1] * dt + scale * xi

    _, saved = _scan_saved(step, theta0, jnp.arange(steps), save_every, observe)
    return saved


# --- S^{d-1} with projection and renormalisation ------------------------------------------------
def sphere_features(X: jax.Array) -> jax.Array:
    """``sigma(x) = (1, x, x_1^2 - x_2^2, 2 x_1 x_2)`` (N, d + 3)."""
    ones = jnp.ones(X.shape[:-1] + (1,), X.dtype)
    quad = jnp.stack([X[..., 0] ** 2 - X[..., 1] ** 2, 2 * X[..., 0] * X[..., 1]], -1)
    return jnp.concatenate([ones, X, quad], -1)


def project(X: jax.Array, V: jax.Array) -> jax.Array:
    """``P_X V = V - <X, V> X`` row by row."""
    return V - jnp.sum(X * V, -1, keepdims=True) * X


def sphere_attention(X: jax.Array, A: jax.Array, beta) -> jax.Array:
    """``(1/N) sum_j e^{beta <x_i, A x_j>} A x_j`` (not yet projected)."""
    AX = X @ A
    G = jnp.exp(beta * X @ AX.T)
    return G @ AX / X.shape[0]


def sphere_velocity(X: jax.Array, A: jax.Array, beta, W: jax.Array | None = None) -> jax.Array:
    v = sphere_attention(X, A, beta)
    if W is not None:
        v = v + sphere_features(X) @ W.T
    return project(X, v)


def sphere_interaction_energy(X: jax.Array, A: jax.Array, beta) -> jax.Array:
    """``-1/(2 beta N^2) sum_ij e^{beta <x_i, A x_j>}``."""
    return -jnp.mean(jnp.exp(beta * X @ (X @ A).T)) / (2 * beta)


def sphere_flow(
    X0: jax.Array,
    noise: jax.Array,
    A: jax.Array,
    beta,
    tau,
    dt,
    W: jax.Array | None = None,
    save_every: int = 1,
    observe: Callable[[jax.Array], object] = lambda X: X,
):
    """Euler-Maruyama on S^{d-1} by projection and renormalisation: ``X0`` (N, d) unit rows,
    ``noise`` (steps, N, d), ``W`` per step (steps, d, d + 3) or ``None``."""
    scale = jnp.sqrt(2 * tau * dt)

    @jax.checkpoint
    def step(X, inp):
        xi, Wn = inp
        Y = X + sphere_velocity(X, A, beta, Wn) * dt + scale * project(X, xi)
        return Y / jnp.linalg.norm(Y, axis=-1, keepdims=True)

    _, saved = _scan_saved(step, X0, (noise, W), save_every, observe)
    return saved


def uniform_sphere(key: jax.Array, n: int, dim: int) -> jax.Array:
    X = jax.random.normal(key, (n, dim))
    return X / jnp.linalg.norm(X, axis=-1, keepdims=True)


def to_angle(X: jax.Array) -> jax.Array:
    """Angle of the projection on span(e_1, e_2) (the S^1 coordinate for d = 2)."""
    return jnp.arctan2(X[..., 1], X[..., 0])


# --- observables ----------------------------------------------------------------------------------
def order_parameter(theta: jax.Array, mode: int = 1) -> jax.Array:
    """``r_k = |(1/N) sum_j e^{i k theta_j}|``."""
    # theta as the complex dtype of its precision (what 1j * theta promoted to implicitly)
    return jnp.abs(
        jnp.mean(jnp.exp(1j * mode * theta.astype(np.result_type(theta.dtype, np.complex64))))
    )


def angle_density(theta: jax.Array, bins: int) -> jax.Array:
    """Histogram density of ``theta mod 2 pi`` on ``bins`` equal cells of [0, 2 pi) (per radian)."""
    idx = jnp.floor(jnp.mod(theta, 2 * jnp.pi) / (2 * jnp.pi) * bins).astype(jnp.int32)
    counts = jnp.bincount(jnp.clip(idx, 0, bins - 1), length=bins)
    return counts / theta.shape[0] * bins / (2 * jnp.pi)


class EntropyEstimator(NamedTuple):
    """Von Mises kernel density estimate on a uniform grid: ``rho(g) = (1/N) sum_j
    e^{kappa (cos(g - theta_j) - 1)} / (2 pi e^{-kappa} I_0(kappa))``."""

    grid: jax.Array
    kappa: float
    log_norm: float


def entropy_estimator(kappa: float = 200.0, points: int = 512) -> EntropyEstimator:
    # log(2 pi e^{-kappa} I_0(kappa)); mpmath, as I_0 overflows a float for kappa > ~700
    log_norm = float(mp.log(2 * mp.pi * mp.besseli(0, kappa))) - kappa
    return EntropyEstimator(jnp.linspace(0, 2 * np.pi, points, endpoint=False), kappa, log_norm)


def _kde(theta: jax.Array, est: EntropyEstimator):
    """KDE ``rho`` and ``rho'`` on the grid."""
    dtype = np.promote_types(est.grid.dtype, theta.dtype)  # the grid may be wider than theta
    d = est.grid[:, None].astype(dtype) - theta[None, :].astype(dtype)
    e = jnp.exp(est.kappa * (jnp.cos(d) - 1))
    norm = jnp.exp(-est.log_norm)
    return jnp.mean(e, axis=1) * norm, jnp.mean(-est.kappa * jnp.sin(d) * e, axis=1) * norm


def kde_entropy(theta: jax.Array, est: EntropyEstimator) -> jax.Array:
    """``int rho log rho d theta`` of the von Mises KDE (rectangle rule on the grid: spectral)."""
    rho, _ = _kde(theta, est)
    return jnp.sum(rho * jnp.log(jnp.maximum(rho, 1e-300))) * (2 * jnp.pi / est.grid.size)


def circle_energy(theta: jax.Array, kernel: CircleKernel, tau, est: EntropyEstimator):
    """``(F_tau, interaction)`` of the particles: the interaction term exactly
    (``-(1/2) mean_i U(theta_i)``), the entropy from the KDE."""
    inter = -0.5 * jnp.mean(circle_potential(theta, kernel)[0])
    entropy = tau * kde_entropy(theta, est)
    return inter.astype(np.promote_types(inter.dtype, entropy.dtype)) + entropy, inter


def circle_energy_rates(
    theta: jax.Array, kernel: CircleKernel, tau, est: EntropyEstimator, W: jax.Array | None = None
):
    """The two terms of the dissipation identity (spec §5.1) for the KDE density ``rho``:
    ``(int rho |d/dtheta dF/drho|^2, int rho u d/dtheta dF/drho)`` with
    ``d/dtheta dF/drho = -U' + tau rho'/rho`` and ``u`` the FFN velocity (``W`` of shape (2, 5),
    or ``None``); ``dF/dt = -first + second``."""
    rho, drho = _kde(theta, est)
    flux = -rho * circle_potential(theta, kernel, est.grid)[1] + tau * drho  # rho d(dF/drho)
    safe = rho > 1e-12
    dissipation = jnp.sum(jnp.where(safe, flux**2 / jnp.where(safe, rho, 1.0), 0.0))
    h = 2 * jnp.pi / est.grid.size
    if W is None:
        return dissipation * h, jnp.zeros((), theta.dtype)
    W = W.astype(np.promote_types(W.dtype, est.grid.dtype))  # the grid may be wider than W
    return dissipation * h, jnp.sum(circle_ffn_velocity(est.grid, W) * flux) * h


def rayleigh_rate(theta: jax.Array, kernel: CircleKernel, direction: jax.Array) -> jax.Array:
    """``-u^T J u / u^T u`` with ``J`` the Jacobian of the deterministic attention velocity at the
    configuration ``theta``: the relaxation rate along the perturbation ``u`` (spec §5.4)."""
    jvp = jax.jvp(lambda th: circle_potential(th, kernel)[1], (theta,), (direction,))[1]
    return -jnp.dot(direction, jvp) / jnp.dot(direction, direction)
