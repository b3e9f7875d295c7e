"""``stagewise derive incremental``: the reduced head system (spec incremental.md §5) as text or
LaTeX; the computations are ``theory.incremental.heads`` and ``theory.incremental.stages``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from simulate.incremental.head_ode import plateau_levels
from simulate.incremental.head_options import HeadSystemOptions
from theory.gradient_flow import classify_spectrum
from theory.incremental.heads import HeadSystem
from theory.incremental.later_stages import (
    APRIORI_RULE,
    SEQUENTIAL_RULE,
    apriori_stage_times,
    covers,
    mixed_stage_point,
)
from theory.incremental.setting import METRICS
from theory.incremental.splitting import characteristic_polynomial
from theory.incremental.splitting import z as splitting_z
from theory.incremental.stages import (
    escape_integral,
    first_escape_time_expr,
    lumped_mass_rate,
    predict_stages,
    vertex_decay_coefficient,
)
from theory.validation import require


@dataclass(frozen=True)
class DeriveConfig(HeadSystemOptions):
    """Derivation of the reduced head system (the system options of incremental-ode)."""

    latex: bool = False
    """print LaTeX instead of text."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # the symbolic field has one term per lag: T = 200 prints in ~10 s, T = 1000 in minutes
        require(
            self.window <= MAX_WINDOW,
            "window",
            self.window,
            f"a window T <= {MAX_WINDOW} for the symbolic derivation",
        )
        # H = 30 takes ~12 s, 8 blocks ~20 s: the symbolic system grows with both
        require(
            self.heads <= MAX_HEADS,
            "heads",
            self.heads,
            f"H <= {MAX_HEADS} heads for the symbolic derivation",
        )
        require(
            len(self.blocks) <= MAX_BLOCKS,
            "blocks",
            self.blocks,
            f"at most {MAX_BLOCKS} blocks for the symbolic derivation",
        )


MAX_WINDOW = 256
"""the longest window the symbolic derivation takes."""
MAX_HEADS = 32
"""the most heads the symbolic derivation takes."""
MAX_BLOCKS = 8
"""the most lag blocks the symbolic derivation takes."""


def derive(cfg: DeriveConfig) -> str:
    setting = cfg.setting()
    hs = HeadSystem(setting)
    vals = hs.parameter_values()
    show = sp.latex if cfg.latex else sp.sstr
    lines = [
        (
            f"Reduced head system: H = {setting.heads}, blocks = {setting.blocks}, "
            f"T = {setting.window}, m_j = {setting.importance_values}, metric = {setting.metric}"
        ),
        "loss  L = 1/2 ||G - sum_k v_k s_k^T||_F^2,  s_k = softmax(theta_k)",
        "field v_k' = R s_k;  replicator: theta_k' = R^T v_k;  logit: theta_k' = J(s_k) R^T v_k",
        f"G = {show(hs.G[:, : sum(setting.blocks) + 1])}  (first lags shown)",
        "symmetric subspace invariant: "
        + ", ".join(
            f"{m}: {hs.symmetric_subspace_is_invariant(m)}" for m in METRICS if setting.window <= 12
        )
        if setting.window <= 12
        else "symmetric subspace invariance: checked symbolically in the tests (small T)",
        "",
        "Plateau levels (loss at the stage fixed points):",
    ]
    for k, L in enumerate(hs.plateau_levels()):
        lines.append(f"  L_{k} = {show(L)} = {float(L.xreplace(vals)):.6g}")
    lines.append("")
    lines.append("Fixed points of the symmetric system (all heads on block j):")
    for j, point in hs.symmetric_fixed_points():
        ev = hs.tangent_spectrum(point)
        re = np.sort(ev.real)
        zeros = int(np.sum(np.abs(re) < 1e-6))
        m_eff = [
            setting.importance_values[i] * setting.alpha_values[setting.lags(i)[0]]
            for i in range(setting.h)
        ]
        cs = {
            i + 1: vertex_decay_coefficient(setting.heads, m_eff[j], m_eff[i])
            for i in range(setting.h)
            if i != j
        }
        second = (
            "stable at second order"
            if all(c < 0 for c in cs.values())
            else "unstable at second order along block(s) "
            + ", ".join(str(i) for i, c in cs.items() if c > 0)
        )
        lines.append(
            f"  block {j + 1}: loss {show(hs.loss_at(point))}; spectrum on the tangent "
            f"space: {classify_spectrum(ev, 1e-6).value} ({zeros} zero eigenvalues, "
            f"most negative {re[0]:.4g}, largest {re[-1]:.3g}); centre-manifold "
            f"coefficients c = {', '.join(f'{c:.4g}' for c in cs.values())}: {second}"
        )
    lines.append(
        "  (float64 eigenvalues of the exact Jacobian; the zero modes include the "
        "head-splitting value redistribution, so no escape rate lambda exists)"
    )
    lines.append("")
    lines.append("Stage 1, escape from uniform attention (block mass p' = g(p) Delta(t)):")
    for metric in METRICS:
        lines.append(
            f"  {metric}: g(p) = {show(lumped_mass_rate(metric))}; "
            f"int dp/g = {show(escape_integral(metric))}; "
            f"t_1 = {show(first_escape_time_expr(metric))}"
        )
    m = setting.importance_values
    if setting.h >= 2 and all(b == 1 for b in setting.blocks):
        c = vertex_decay_coefficient(setting.heads, m[0], m[1])
        lines += [
            "",
            "Competitive plateau (vertex law, singleton blocks):",
            (
                f"  symmetric off-vertex mass: s_2' = c s_2^2 with c = {c:.6g} "
                f"(= -(m_1^2 - m_2^2)/H)"
            ),
            f"  head-splitting growth: ln a ~ 2 sqrt(kappa t), kappa = m_2^2/|c| = "
            f"{m[1] ** 2 / abs(c):.6g}; plateau ~ (ln 1/eps)^2/(4 kappa)"
            + (" x T" if setting.metric == "logit" else ""),
        ]
    lines += ["", f"Predicted stages for eps = {cfg.noise:.3g}:"]
    stages = predict_stages(setting, cfg.noise)
    for p in stages:
        t = "not derived" if p.time is None else f"{p.time:.6g}"
        lines.append(
            f"  stage {p.stage}: block {p.block + 1}, L {p.plateau_before:.6g} -> "
            f"{p.plateau_after:.6g}, t = {t}  [{p.rule}]"
        )
    if covers(setting) and setting.h >= 2 and setting.heads >= 2:
        lines += _later_stages(hs, cfg.noise, [p.time for p in stages], show)
    return "\n".join(lines + _optimizer_split(show))


def _optimizer_split(show) -> list[str]:
    """The linearised head split under AdamW and SGD (theory.incremental.splitting)."""
    lines = [
        "",
        "Training with an optimizer (theory.incremental.splitting): on the plateau the heads' "
        "difference follows gradient descent preconditioned by P = 1/(sqrt(v_hat) + eps) (AdamW; "
        "P = I for SGD) with the optimizer's momentum; along an eigenvector of P H_a with "
        "eigenvalue -mu/lr it grows like z^t, z the larger root of",
    ]
    for momentum, name in (("ema", "AdamW (c = lr wd)"), ("heavy_ball", "SGD with momentum")):
        poly = sp.collect(characteristic_polynomial(momentum), splitting_z)
        lines.append(f"  {name}: {show(poly)} = 0")
    lines.append("  so the plateau is ln(1/q)/ln z plus a part independent of q")
    return lines


def _later_stages(hs: HeadSystem, eps: float, vertex_times: list, show) -> list[str]:
    """Where each stage ends (the mixed critical sets) and the a-priori lumped-window times."""
    setting = hs.setting
    K = min(setting.heads, setting.h)
    masses = tuple(sp.Symbol(f"p_{j + 1}", positive=True) for j in range(1, K))
    point = mixed_stage_point(hs, masses[: K - 2]) if K > 2 else None
    lines = [
        "",
        "Later stages (theory.incremental.later_stages; singleton blocks):",
        "  every zero-sum head split toward every off-vertex lag j grows through every "
        "plateau, a'' = m_j^2 s_j(t) a: at t_{k-1} the split of lag k is far above eps, so the "
        "vertex law restarted from eps comes late",
        "  stage k ends on a continuum of critical points at loss L_k (any p_j in [0, 1)): the "
        "head that took lag j keeps mass p_j on the lead lag and value G_jj/(1 - p_j) on feature "
        "j; the heads left on the lead lag cancel its leak with -G_jj p_j/((1 - p_j) n)",
    ]
    if point is not None:
        for k in range(setting.heads):
            s_row = [point[hs.s[k, i]] for i in range(setting.h)]
            v_row = [point[hs.v[k, j]] for j in range(setting.h)]
            s_text, v_text = show(sp.Matrix([s_row])), show(sp.Matrix([v_row]))
            lines.append(
                f"    end of stage {K - 1}, head {k + 1}: s (target lags) = {s_text}, v = {v_text}"
            )
    lines += [f"  a-priori: {APRIORI_RULE}", f"  sequential: {SEQUENTIAL_RULE}"]
    finite = [t for t in vertex_times if t is not None and np.isfinite(t)]
    if eps > 0 and finite:
        prior = apriori_stage_times(setting, eps, plateau_levels(setting), 4 * max(finite))
        lines.append(
            f"  a-priori stage times for eps = {eps:.3g}: "
            + ", ".join(f"t_{k + 1} = {t:.6g}" for k, t in enumerate(prior))
        )
    return lines
