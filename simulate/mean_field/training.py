"""Experiment ``mean-field``: the noisy mean-field transformer with a trained, depth-dependent,
parameter-linear FFN (spec ``mean_field.md`` §2-4; particles in ``simulate.mean_field.flow``).

Control problem (spec §3): ``W_t`` piecewise constant on ``bins`` equal depth bins,

    J(W) = G(mu_T) + lambda/2 int_0^T ||W_t||_F^2 dt,

``G(mu) = -int <x, e_2> dmu`` (``target = "direction"``, spec §2 (a)) or
``-(1/N) sum_i y_i <X_T^i, e_2>`` with ``y_i = sign <X_0^i, e_2>`` (``"labels"``, §2 (b)). The
gradient is reverse-mode autodiff through the Euler-Maruyama scan, with a fresh draw of initial
tokens and Brownian increments every step (default) or one draw held fixed per seed (common
random numbers, spec §2); Adam from ``W = 0``. The lambdas of one run are trained side by side
on the same tokens and noise: the objective is the sum of the per-lambda ``J``, whose gradient
is the per-lambda gradient block by block, and Adam is elementwise, so each lambda's run is
exactly the run it would be alone.

Logged per lambda (dims ``lam``, ``bin``, ``depth``, ``angle``, ``particle``): ``J``, the terminal
loss and the regulariser; ``W`` and ``||W_b||_F``; along depth (every ``save_every`` steps) the
escape observable ``<x, e_2>``, ``r_1``, ``r_2``, the energy ``F_tau`` (S^1: interaction exact,
entropy by a von Mises KDE of concentration ``kde_kappa``, and the two terms of the dissipation
identity on that KDE; S^{d-1}: interaction only), the token density of the angle and a few
sample paths; the terminal loss on a held-out draw of tokens and noise. Step 0 is the untrained
flow (``W = 0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulate.mean_field import flow as mff
from simulate.runner import RunOptions, RunOutput, run_experiment
from simulate.train import Problem, TrainResult, seed_streams
from theory.mean_field.energy import (
    terminal_width,
    validate_a,
    validate_beta,
    validate_kernel,
    validate_tau,
)
from theory.validation import require

NAME = "mean-field"
ESCAPE_RULE = (
    "escape = G(mu_T; W = 0) - G(mu_T; W), same tokens and noise (direction target: "
    "Delta_T = int <x, e_2> dmu_T trained - untrained)"
)
WIDTH_RULE = (
    "terminal-layer width: depth at the output holding 90% of int_{T/2}^T ||W_t||^2 dt "
    "(the second half, so that an initial arc does not count)"
)


MAX_EULER_STEPS = 10**6
"""the most Euler steps depth / dt of one forward pass (beyond, no run ends; at depth = 1e308
the step count overflows)."""


@dataclass(frozen=True)
class MeanFieldConfig(RunOptions):
    """Noisy mean-field transformer, trained FFN (spec mean_field.md §4 defaults)."""

    dim: int = 2
    """d: tokens on S^{d-1}; 2 integrates the angle with the Fourier attention sum, >= 3 the
    projected direct sum."""
    tokens: int = 512
    """N, tokens (particles)."""
    beta: float = 2.0
    """inverse attention temperature."""
    a: float = 0.5
    """A = diag(1, a, ..., a): the other eigenvalues of A (top eigenvalue 1, e_1)."""
    tau: float = 0.05
    """noise level tau (generator tau Laplacian)."""
    depth: float = 8.0
    """T, depth (time units)."""
    dt: float = 0.025
    """Euler-Maruyama depth step (depth/dt steps, a multiple of bins and save_every)."""
    bins: int = 32
    """depth bins of the piecewise-constant W_t."""
    lambdas: tuple[float, ...] = (1e-3, 1e-2, 1e-1)
    """lambda, L2 weights of int ||W_t||^2 (trained side by side)."""
    target: Literal["direction", "labels"] = "direction"
    """terminal loss: direction -<x, e_2>; labels -y <x, e_2>, y = sign <X_0, e_2>."""
    noise: Literal["fixed", "fresh"] = "fresh"
    """fresh: a new draw of tokens and Brownian increments every step (stochastic gradient of
    the expected objective); fixed: one draw per seed for the whole run (common random numbers,
    spec §2: J is a smooth function of W, but at N <= 512 the optimum over-fits that draw for
    lambda ~ 0.1-1, see docs/mean_field_verification.md). Logged rows always use the seed's
    draw, and a held-out draw."""
    lr: float = 0.05
    """Adam step size at the start, for lambda <= 1; lambda > 1 uses lr/lambda (the optimum
    scales as 1/lambda there, and Adam's steps are ~lr per entry whatever the gradient)."""
    adam_eps: float = 1e-3
    """Adam's epsilon: gradients below it get SGD-like steps. The terminal-loss gradient decays
    like e^{-kappa (T - t)} across depth; with the usual 1e-8 Adam gives the first layers, whose
    gradient is ~1e-6 of the last ones', full-size steps."""
    lr_end: float = 5e-4
    """Adam step size at the last step (cosine decay from lr; = lr for a constant step): the
    objective is deterministic (fixed noise), and a constant Adam step keeps every W entry
    jittering at ~lr around the optimum."""
    float64: bool = False
    """integrate in float64 (default float32, ~3x faster; agreement checked in the tests)."""
    save_every: int = 5
    """Euler steps between recorded depth points."""
    angle_bins: int = 64
    """cells of the token density over the angle."""
    kde_kappa: float = 200.0
    """concentration of the von Mises KDE of the entropy (S^1; bandwidth ~ kappa^-1/2 rad)."""
    paths: int = 8
    """sample token paths recorded."""
    steps: int = 1000
    """Adam steps (a multiple of chunk)."""
    log_every: int = 50
    """steps between logged rows."""
    chunk: int = 500
    """steps per compiled chunk (a multiple of log_every)."""
    seeds: int = 3
    """noise seeds (tokens and Brownian increments), vmapped."""

    def __post_init__(self):
        RunOptions.__post_init__(self)
        require(self.dim >= 2, "dim", self.dim, "an integer >= 2 (tokens on S^{dim-1})")
        require(self.tokens >= 2, "tokens", self.tokens, "an integer >= 2")
        validate_beta(self.beta)
        validate_a(self.a)
        validate_kernel(self.beta, self.a)
        validate_tau(self.tau)
        require(math.isfinite(self.depth) and self.depth > 0, "depth", self.depth, "a depth > 0")
        require(
            math.isfinite(self.dt) and 0 < self.dt <= self.depth,
            "dt",
            self.dt,
            f"a step in (0, depth = {self.depth}]",
        )
        n = self.depth / self.dt
        require(
            n <= MAX_EULER_STEPS,
            "depth",
            self.depth,
            f"a depth <= {MAX_EULER_STEPS:g} x dt = {MAX_EULER_STEPS * self.dt:g} "
            f"(at most {MAX_EULER_STEPS:g} Euler steps of dt = {self.dt:g})",
        )
        require(
            abs(n - round(n)) < 1e-9,
            "dt",
            self.dt,
            f"a divisor of depth = {self.depth} (depth/dt steps)",
        )
        require(
            self.bins >= 1 and self.n_steps % self.bins == 0,
            "bins",
            self.bins,
            f"a divisor of the {self.n_steps} Euler steps",
        )
        require(
            self.save_every >= 1 and self.n_steps % self.save_every == 0,
            "save_every",
            self.save_every,
            f"a divisor of the {self.n_steps} Euler steps",
        )
        require(
            len(self.lambdas) >= 1 and all(math.isfinite(x) and x > 0 for x in self.lambdas),
            "lambdas",
            self.lambdas,
            "one or more L2 weights > 0",
        )
        require(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a step > 0")
        require(
            math.isfinite(self.adam_eps) and self.adam_eps > 0,
            "adam_eps",
            self.adam_eps,
            "a number > 0",
        )
        require(
            math.isfinite(self.lr_end) and 0 < self.lr_end <= self.lr,
            "lr_end",
            self.lr_end,
            f"a step in (0, lr = {self.lr}]",
        )
        require(self.angle_bins >= 2, "angle_bins", self.angle_bins, "an integer >= 2")
        require(
            math.isfinite(self.kde_kappa) and self.kde_kappa > 0,
            "kde_kappa",
            self.kde_kappa,
            "a finite concentration > 0",
        )
        require(
            0 <= self.paths <= self.tokens,
            "paths",
            self.paths,
            f"an integer in [0, tokens = {self.tokens}]",
        )

    @property
    def n_steps(self) -> int:
        return round(self.depth / self.dt)

    @property
    def features(self) -> int:
        return 5 if self.dim == 2 else self.dim + 3

    @property
    def bin_width(self) -> float:
        return self.depth / self.bins

    def depth_points(self) -> np.ndarray:
        return self.dt * self.save_every * np.arange(self.n_steps // self.save_every + 1)

    def bin_centres(self) -> np.ndarray:
        return (np.arange(self.bins) + 0.5) * self.bin_width


class Flow:
    """The particle flow of one configuration, for one seed: tokens and noise from the seed's
    keys, ``run(W, observe)`` integrates with ``W`` (bins, d, m) or ``None``."""

    def __init__(self, cfg: MeanFieldConfig):
        self.cfg = cfg
        self.dtype = jnp.float64 if cfg.float64 else jnp.float32
        d = cfg.dim
        if d == 2:
            # truncate the kernel's Fourier series at the working precision
            tol = 1e-13 if cfg.float64 else 1e-7
            self.kernel = mff.cast_kernel(mff.circle_kernel(cfg.beta, cfg.a, tol=tol), self.dtype)
            self.entropy = mff.entropy_estimator(cfg.kde_kappa)
        self.A = jnp.diag(jnp.asarray([1.0] + [cfg.a] * (d - 1), self.dtype))

    def initial(self, keys):
        """Initial tokens (uniform on the sphere) and the fixed Brownian increments, drawn in
        float64 whatever the working precision (so float32 and float64 runs share them)."""
        cfg = self.cfg
        init_key, noise_key = keys[0], keys[1]
        if cfg.dim == 2:
            x0 = jax.random.uniform(init_key, (cfg.tokens,), jnp.float64, 0, 2 * jnp.pi)
            noise = jax.random.normal(noise_key, (cfg.n_steps, cfg.tokens), jnp.float64)
        else:
            x0 = mff.uniform_sphere(init_key, cfg.tokens, cfg.dim)
            noise = jax.random.normal(noise_key, (cfg.n_steps, cfg.tokens, cfg.dim), jnp.float64)
        return x0.astype(self.dtype), noise.astype(self.dtype)

    def angle(self, x):
        return x if self.cfg.dim == 2 else mff.to_angle(x)

    def e2(self, x):
        return jnp.sin(x) if self.cfg.dim == 2 else x[..., 1]

    def run(self, W, keys, observe=None, save_every: int | None = None):
        cfg = self.cfg
        x0, noise = self.initial(keys)
        W_steps = (
            None if W is None else jnp.repeat(W.astype(self.dtype), cfg.n_steps // cfg.bins, axis=0)
        )
        save = save_every or cfg.n_steps
        obs = observe or (lambda x: x)
        if cfg.dim == 2:
            return mff.circle_flow(x0, noise, self.kernel, cfg.tau, cfg.dt, W_steps, save, obs)
        return mff.sphere_flow(x0, noise, self.A, cfg.beta, cfg.tau, cfg.dt, W_steps, save, obs)

    def terminal_loss(self, W, keys):
        """``G(mu_T)`` for ``W`` (bins, d, m) or ``None``."""
        x0, _ = self.initial(keys)
        xT = self.run(W, keys)[-1]
        if self.cfg.target == "direction":
            return -jnp.mean(self.e2(xT))
        return -jnp.mean(jnp.sign(self.e2(x0)) * self.e2(xT))

    def objective(self, W, keys, lam):
        """``(J, (G, regulariser))``."""
        G = self.terminal_loss(W, keys)
        reg = 0.5 * lam * self.cfg.bin_width * jnp.sum(W.astype(self.dtype) ** 2)
        return G + reg, (G, reg)

    def depth_controls(self, W):
        """``W`` in force at each saved depth point (the bin of the step starting there; the last
        bin at t = T)."""
        cfg = self.cfg
        steps = np.minimum(np.arange(0, cfg.n_steps + 1, cfg.save_every), cfg.n_steps - 1)
        return W[steps // (cfg.n_steps // cfg.bins)]

    def observe_depth(self, x, W):
        """Observables of one token configuration at one depth, ``W`` the control there."""
        cfg = self.cfg
        th = self.angle(x)
        out = {
            "e2": jnp.mean(self.e2(x)),
            "r1": mff.order_parameter(th, 1),
            "r2": mff.order_parameter(th, 2),
            "density": mff.angle_density(th, cfg.angle_bins),
            "paths": th[: cfg.paths],
        }
        if cfg.dim == 2:
            out["energy"], out["interaction"] = mff.circle_energy(
                x, self.kernel, cfg.tau, self.entropy
            )
            out["dissipation"], out["control_work"] = mff.circle_energy_rates(
                x, self.kernel, cfg.tau, self.entropy, W
            )
        else:
            out["interaction"] = mff.sphere_interaction_energy(x, self.A, cfg.beta)
        return out

    def observe_flow(self, W, keys):
        """Observables along depth (saved every ``save_every`` steps) of the flow with ``W``."""
        states = self.run(W, keys, save_every=self.cfg.save_every)
        controls = self.depth_controls(W.astype(self.dtype))
        # one depth at a time: vmapped over depth, the pairwise (N x N) energies of every saved
        # depth were held at once (26.8 GB for 32 seeds at the default N = 512)
        return jax.lax.map(lambda a: self.observe_depth(*a), (states, controls))


def heldout_keys(keys):
    """A second, independent draw of tokens and noise for a seed (``fold_in`` 1 of its keys)."""
    return jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)


def problem(cfg: MeanFieldConfig) -> Problem:
    flow = Flow(cfg)
    lams = jnp.asarray(cfg.lambdas, flow.dtype)
    L, d, m = len(cfg.lambdas), cfg.dim, cfg.features

    def init(init_key, noise_key):
        return {
            "W": jnp.zeros((L, cfg.bins, d, m), flow.dtype),
            "keys": jnp.stack([init_key, noise_key]),
        }

    def total(W, keys):
        J, aux = jax.vmap(flow.objective, in_axes=(0, None, 0))(W, keys, lams)
        return jnp.sum(J), (J, aux)

    def loss_and_direction(params, data_key):
        keys = params["keys"] if cfg.noise == "fixed" else jax.random.split(data_key)
        (loss, _), g = jax.value_and_grad(total, has_aux=True)(params["W"], keys)
        return loss, {"W": g, "keys": jnp.zeros_like(params["keys"])}

    def observe(params):
        W, keys = params["W"], params["keys"]
        J, (G, reg) = jax.vmap(flow.objective, in_axes=(0, None, 0))(W, keys, lams)
        held = jax.vmap(flow.terminal_loss, in_axes=(0, None))(W, heldout_keys(keys))
        along = jax.vmap(flow.observe_flow, in_axes=(0, None))(W, keys)
        return {
            "loss": jnp.sum(J),
            "J": J,
            "terminal_loss": G,
            "regulariser": reg,
            "heldout_terminal_loss": held,
            "W": W,
            "control_norm": jnp.sqrt(jnp.sum(W**2, axis=(-2, -1))),
            **along,
        }

    dims = {
        "loss": (),
        "J": ("lam",),
        "terminal_loss": ("lam",),
        "regulariser": ("lam",),
        "heldout_terminal_loss": ("lam",),
        "W": ("lam", "bin", "row", "feature"),
        "control_norm": ("lam", "bin"),
        "e2": ("lam", "depth"),
        "r1": ("lam", "depth"),
        "r2": ("lam", "depth"),
        "density": ("lam", "depth", "angle"),
        "paths": ("lam", "depth", "particle"),
        "interaction": ("lam", "depth"),
    }
    if cfg.dim == 2:
        dims.update(
            energy=("lam", "depth"), dissipation=("lam", "depth"), control_work=("lam", "depth")
        )
    coords = {
        "lam": np.asarray(cfg.lambdas),
        "bin": cfg.bin_centres(),
        "depth": cfg.depth_points(),
        "angle": (np.arange(cfg.angle_bins) + 0.5) * 2 * np.pi / cfg.angle_bins,
        "row": np.arange(d),
        "feature": np.arange(m),
        "particle": np.arange(cfg.paths),
    }
    return Problem(init, loss_and_direction, observe, dims, coords)


def step_scale(cfg: MeanFieldConfig) -> np.ndarray:
    """Per-lambda factor on the Adam step: ``min(1, 1/lambda)``."""
    return np.minimum(1.0, 1.0 / np.asarray(cfg.lambdas))


def optimizer(cfg: MeanFieldConfig):
    """Adam on ``W`` (cosine-decayed step, scaled per lambda by ``step_scale``); the seed's keys
    ride along in the parameters, frozen."""
    schedule = optax.cosine_decay_schedule(cfg.lr, cfg.steps, alpha=cfg.lr_end / cfg.lr)
    scale = jnp.asarray(step_scale(cfg))[:, None, None, None]

    def scale_updates(updates, state, params=None):
        del params
        return jax.tree_util.tree_map(lambda u: u * scale.astype(u.dtype), updates), state

    per_lambda = optax.GradientTransformation(lambda params: optax.EmptyState(), scale_updates)
    adam = optax.chain(optax.adam(schedule, eps=cfg.adam_eps), per_lambda)
    return optax.multi_transform(
        {"adam": adam, "fixed": optax.set_to_zero()}, {"W": "adam", "keys": "fixed"}
    )


def profile_summary(norms, depth: float) -> dict:
    """Statistics of one control profile ``||W_b||`` (bins of equal width): peak depth, the
    terminal-layer width (``WIDTH_RULE``: over the second half of the depth, so that an initial
    arc does not count), and the shares of ``int ||W||^2`` in the last and in the first quarter
    of the depth."""
    norms = np.asarray(norms, float)
    sq = norms**2
    h = depth / norms.size
    quarter = max(1, norms.size // 4)
    total = sq.sum()
    return {
        "peak_depth": float((np.argmax(norms) + 0.5) * h),
        "width90": terminal_width(sq[norms.size // 2 :], depth / 2, 0.9),
        "last_quarter_share": float(sq[-quarter:].sum() / total) if total > 0 else float("nan"),
        "first_quarter_share": float(sq[:quarter].sum() / total) if total > 0 else float("nan"),
    }


def escape(ds, heldout: bool = False):
    """Escape per (seed, step, lam): the decrease of the terminal loss from its ``W = 0`` value
    (step 0), on the training draw or the held-out draw; for the direction target this is
    ``Delta_T`` of ``ESCAPE_RULE``."""
    G = ds["heldout_terminal_loss" if heldout else "terminal_loss"]
    return G.isel(step=0) - G


def summarize(cfg: MeanFieldConfig, ds) -> dict:
    first, last = ds.isel(step=0), ds.isel(step=-1)
    esc, held = escape(ds).isel(step=-1), escape(ds, heldout=True).isel(step=-1)
    per_lam = {}
    for i, lam in enumerate(cfg.lambdas):
        norms = last["control_norm"].isel(lam=i).mean("seed").values
        per_lam[f"{lam:g}"] = {
            "J": float(last["J"].isel(lam=i).mean()),
            "terminal_loss": float(last["terminal_loss"].isel(lam=i).mean()),
            "regulariser": float(last["regulariser"].isel(lam=i).mean()),
            "escape": float(esc.isel(lam=i).mean()),
            "escape_std": float(esc.isel(lam=i).std()),
            "heldout_escape": float(held.isel(lam=i).mean()),
            **profile_summary(norms, cfg.depth),
        }
    return {
        "escape_rule": ESCAPE_RULE,
        "width_rule": WIDTH_RULE,
        "untrained_terminal_e2": float(first["e2"].isel(depth=-1).mean()),
        "untrained_terminal_r2": float(first["r2"].isel(depth=-1).mean()),
        "per_lambda": per_lam,
    }


def run(cfg: MeanFieldConfig, output: RunOutput = RunOutput()) -> Path | TrainResult:
    """Run (or resume) into ``output.out``; returns the run directory (the ``TrainResult`` when
    ``output.store`` is off)."""
    return run_experiment(
        NAME,
        cfg,
        output,
        problem(cfg),
        optimizer(cfg),
        lambda ds: summarize(cfg, ds),
        seeds={
            "noise_rule": "tokens from the seed's init key, Brownian "
            "increments from its noise key; both fixed for "
            "the whole run"
        },
    )


# --- analysis of the W = 0 flow -------------------------------------------------------------------
def linear_response(cfg: MeanFieldConfig, seed: int) -> dict:
    """Gradient of the terminal loss at ``W = 0`` per depth bin, ``g_b = dG/dW_b`` (spec §5.6:
    the adjoint formula ``int P_x grad phi_t sigma^T dmu_t`` on particles), and what it predicts
    for large ``lambda``: ``W_b ≈ -g_b/(lambda h)``, escape ``Delta_T ≈ sum_b ||g_b||^2/(lambda
    h) = int ||G_t||^2 dt / lambda`` with ``G_t = g_b/h`` (the Gramian ``p^T Gamma_T p`` of §5.5 in
    pathwise form)."""
    flow = Flow(cfg)
    streams = seed_streams([seed])
    keys = jnp.stack([streams["init"][0], streams["noise"][0]])
    W0 = jnp.zeros((cfg.bins, cfg.dim, cfg.features), flow.dtype)
    g = np.asarray(jax.jit(jax.grad(flow.terminal_loss))(W0, keys), float)
    h = cfg.bin_width
    density = np.sqrt(np.sum(g**2, axis=(-2, -1))) / h  # ||G_t|| per bin
    gram = float(np.sum(g**2) / h)
    return {"gradient_norm": density, "gramian": gram}


def restoring_rate(cfg: MeanFieldConfig, seed: int, from_depth: float | None = None) -> float:
    """Relaxation rate of the mode the direction target excites (spec §5.4): the Rayleigh
    quotient ``-u^T J u / u^T u`` of the attention-velocity Jacobian along ``u_i = cos theta_i``
    (the gradient of ``-<x, e_2>``), averaged over the saved ``W = 0`` configurations at depth
    >= ``from_depth`` (default T/2). S^1 only."""
    require(cfg.dim == 2, "dim", cfg.dim, "2 (the restoring rate is computed on S^1)")
    flow = Flow(cfg)
    streams = seed_streams([seed])
    keys = jnp.stack([streams["init"][0], streams["noise"][0]])
    states = flow.run(None, keys, save_every=cfg.save_every)
    depth = cfg.depth_points()
    late = states[depth >= (cfg.depth / 2 if from_depth is None else from_depth)]
    rates = jax.vmap(lambda th: mff.rayleigh_rate(th, flow.kernel, jnp.cos(th)))(late)
    return float(jnp.mean(rates))


def mean_linear_response(cfg: MeanFieldConfig) -> dict:
    """Seed means of ``linear_response`` (``gradient_norm`` ``||G_t||`` per bin and ``gramian``
    ``int ||G_t||^2 dt`` at ``W = 0``) and, on S^1, of the restoring rate of the escape mode
    (``kappa``, ``restoring_rate``): the yardsticks of the trained figures."""
    runs = [linear_response(cfg, s) for s in cfg.seed_ids]
    out = {
        "gradient_norm": np.mean([r["gradient_norm"] for r in runs], axis=0),
        "gramian": float(np.mean([r["gramian"] for r in runs])),
    }
    if cfg.dim == 2:
        out["kappa"] = float(np.mean([restoring_rate(cfg, s) for s in cfg.seed_ids]))
    return out
