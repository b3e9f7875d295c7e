"""Reduced head dynamics of Yüksel, Alvarez Lucendo & Flammarion, "Incremental learning of sparse
attention patterns in transformers" (arXiv:2602.19143); spec ``incremental.md`` §5.

Heads ``k = 1..H`` carry values ``v_k`` in R^h and attention ``s_k = softmax(theta_k)`` over ``T``
lags. With residual ``R = G - sum_k v_k s_k^T`` and target ``G_{j,i} = m_j alpha_i [i in I(j)]``:

    L = 1/2 ||R||_F^2                               (§5.1)
    v_k'     = R s_k
    theta_k' = R^T v_k          replicator metric   (Variant A, s_k' = J(s_k) R^T v_k; paper Fig.
    10)
    theta_k' = J(s_k) R^T v_k   logit metric        (Variant B, s_k' = J(s_k)^2 R^T v_k)

with ``J(s) = diag(s) - s s^T``. The symbolic field is written in ``(v, s)`` coordinates, where it
is
polynomial; the simplex constraint ``sum_i s_{k,i} = 1`` is declared as a linear invariant.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache, cached_property
from typing import cast

import numpy as np
import sympy as sp

from theory.gradient_flow import GradientFlow, simplex_metric
from theory.incremental.setting import METRIC_POWER, HeadSetting
from theory.validation import require


class HeadSystem:
    """The reduced head system in symbols: importances ``m_j`` and weights ``alpha_i`` stay
    symbolic; the shape (H, blocks, T) is that of ``setting``."""

    def __init__(self, setting: HeadSetting) -> None:
        self.setting = setting
        H, h, T = setting.heads, setting.h, setting.window
        nb = sum(setting.blocks)
        self.m = sp.symbols(f"m_1:{h + 1}", positive=True)
        self.alpha = sp.symbols(f"alpha_1:{nb + 1}", positive=True)
        self.v = sp.Matrix(H, h, lambda k, j: sp.Symbol(f"v_{k + 1}_{j + 1}", real=True))
        self.s = sp.Matrix(H, T, lambda k, i: sp.Symbol(f"s_{k + 1}_{i + 1}", nonnegative=True))

    # --- the loss and the two flows -------------------------------------------------------
    @cached_property
    def G(self) -> sp.Matrix:
        st = self.setting
        G = sp.zeros(st.h, st.window)
        for j in range(st.h):
            for i in st.lags(j):
                G[j, i] = self.m[j] * self.alpha[i]
        return G

    def residual(self) -> sp.Matrix:
        return self.G - self.v.T * self.s

    @cached_property
    def loss(self) -> sp.Expr:
        R = self.residual()
        # sympy types matrix entries as ``MatrixElement | list``; R's entries are expressions
        return sp.Rational(1, 2) * sum(cast(sp.Expr, r) ** 2 for r in R)

    @property
    def state(self) -> tuple[sp.Symbol, ...]:
        # sympy matrices iterate (row-major) through __getitem__; their entries here are symbols
        return tuple(cast(Iterable[sp.Symbol], self.v)) + tuple(cast(Iterable[sp.Symbol], self.s))

    def flow(self, metric: str | None = None) -> GradientFlow:
        """The gradient flow in (v, s) coordinates under the replicator or the logit metric."""
        metric = metric or self.setting.metric
        power = METRIC_POWER[metric]
        st = self.setting
        H, h, T = st.heads, st.h, st.window
        blocks = [sp.eye(H * h)] + [simplex_metric(self.s.row(k).T, power) for k in range(H)]
        C = sp.zeros(H, H * h + H * T)
        for k in range(H):
            for i in range(T):
                C[k, H * h + k * T + i] = 1
        return GradientFlow(self.state, self.loss, sp.diag(*blocks), C)

    def parameter_values(self) -> dict:
        """Symbol -> exact rational value of the setting's m_j and alpha_i."""
        st = self.setting
        # nsimplify's default guess turns e.g. 3.611328125 into a product of surds
        vals = {m: sp.nsimplify(x, rational=True) for m, x in zip(self.m, st.importance_values)}
        vals.update(
            {a: sp.nsimplify(x, rational=True) for a, x in zip(self.alpha, st.alpha_values)}
        )
        return vals

    # --- fixed points ----------------------------------------------------------------------
    def clustered_point(self, assignment: tuple[int, ...]) -> dict:
        """Fixed point where head k attends block ``assignment[k]`` with s_k proportional to alpha
        on that block, and the heads sharing a block split its value m_j ||alpha_I(j)||_1 equally
        (one point of a continuum: any split with the same sum is a fixed point too)."""
        st = self.setting
        require(
            len(assignment) == st.heads and all(0 <= j < st.h for j in assignment),
            "assignment",
            assignment,
            f"one block index in [0, {st.h}) per head",
        )
        point = {x: sp.Integer(0) for x in self.state}
        for k, j in enumerate(assignment):
            n_j = assignment.count(j)
            mass = sum(self.alpha[i] for i in st.lags(j))
            for i in st.lags(j):
                point[cast(sp.Symbol, self.s[k, i])] = self.alpha[i] / mass
            point[cast(sp.Symbol, self.v[k, j])] = self.m[j] * mass / n_j
        return point

    def symmetric_fixed_points(self) -> list[tuple[int, dict]]:
        """Fixed points of the symmetric (all heads equal) system: all heads on one block."""
        return [(j, self.clustered_point((j,) * self.setting.heads)) for j in range(self.setting.h)]

    def loss_at(self, point: dict) -> sp.Expr:
        return cast(sp.Expr, sp.simplify(self.loss.xreplace(point)))

    def loss_value_at(self, point: dict) -> sp.Expr:
        """The loss at ``point`` for the setting's m_j and alpha_i: an exact number, with no
        symbolic simplification on the way (what numerical callers need)."""
        return cast(sp.Expr, self.loss.xreplace(point).xreplace(self.parameter_values()))

    def ladder(self) -> tuple[int, ...]:
        """Blocks in the order they are learned: by the loss of the symmetric fixed point on each
        block, lowest first (blockwise Cauchy-Schwarz, spec §5.3: j* = argmax m_j
        ||alpha_I(j)||)."""
        return self._ladder

    @cached_property
    def _ladder(self) -> tuple[int, ...]:
        # every stage point asks for it
        levels = [float(self.loss_value_at(p)) for _, p in self.symmetric_fixed_points()]
        return tuple(int(j) for j in np.argsort(levels, kind="stable"))

    def stage_point(self, k: int) -> dict:
        """The fixed point after stage k: the first k ladder blocks captured, the most important
        one by the H - k + 1 heads that have not split off, the others by one head each."""
        st = self.setting
        ladder = self.ladder()
        if k == 0:
            return {
                **{x: sp.Integer(0) for x in self.v},
                **{x: sp.Rational(1, st.window) for x in self.s},
            }
        assignment = [ladder[0]] * (st.heads - k + 1) + list(ladder[1:k])
        return self.clustered_point(tuple(assignment))

    def stage_count(self) -> int:
        return min(self.setting.heads, self.setting.h)

    def plateau_levels(self) -> list[sp.Expr]:
        """L_0 (values zero) and the loss L_k at each stage fixed point, k = 1..min(H, h)."""
        return list(self._plateau_levels)

    @cached_property
    def _plateau_levels(self) -> tuple[sp.Expr, ...]:
        return tuple(self.loss_at(self.stage_point(k)) for k in range(self.stage_count() + 1))

    def plateau_values(self) -> list[sp.Expr]:
        """``plateau_levels`` for the setting's m_j and alpha_i: exact numbers."""
        return [self.loss_value_at(self.stage_point(k)) for k in range(self.stage_count() + 1)]

    def symmetric_subspace_is_invariant(self, metric: str | None = None) -> bool:
        """Setting every head equal to head 1 makes every head's field equal to head 1's."""
        st = self.setting
        f = self.flow(metric).field
        on = {}
        for k in range(1, st.heads):
            on.update({self.v[k, j]: self.v[0, j] for j in range(st.h)})
            on.update({self.s[k, i]: self.s[0, i] for i in range(st.window)})
        Hh, T = st.heads * st.h, st.window
        f = f.xreplace(on)
        for k in range(1, st.heads):
            for j in range(st.h):
                if sp.expand(f[k * st.h + j] - f[j]) != 0:
                    return False
            for i in range(T):
                if sp.expand(f[Hh + k * T + i] - f[Hh + i]) != 0:
                    return False
        return True

    # --- spectra ---------------------------------------------------------------------------
    def point_arrays(self, point: dict) -> tuple[np.ndarray, np.ndarray]:
        """(v, s) arrays of a symbolic point, evaluated at the setting's parameters."""
        vals = self.parameter_values()
        v = np.array(self.v.xreplace(point).xreplace(vals).tolist(), dtype=float)
        s = np.array(self.s.xreplace(point).xreplace(vals).tolist(), dtype=float)
        return v, s

    def tangent_spectrum(self, point: dict, metric: str | None = None) -> np.ndarray:
        """Eigenvalues of the Jacobian at ``point`` on the tangent space of the simplices."""
        v, s = self.point_arrays(point)
        jac = field_jacobian(
            self.setting.target(), v, s, METRIC_POWER[metric or self.setting.metric]
        )
        H, h = v.shape
        B = tangent_basis(H, h, s.shape[1])
        return np.linalg.eigvals(B.T @ jac @ B)


def _softmax_metric(s: np.ndarray, power: int) -> np.ndarray:
    J = np.diag(s) - np.outer(s, s)
    return np.linalg.matrix_power(J, power)


def field_jacobian(G: np.ndarray, v: np.ndarray, s: np.ndarray, power: int) -> np.ndarray:
    """Jacobian of the (v, s) field in matrix form, state ordered as ``(v.ravel(), s.ravel())``.

    Blocks (R = G - v^T s, f_k = R^T v_k, M_k = J(s_k)^p):
      dv_k'/dv_l = -(s_l . s_k) I,   dv_k'/ds_l = delta_kl R - v_l s_k^T,
      ds_k'/dv_l = M_k (delta_kl R^T - s_l v_k^T),
      ds_k'/ds_l = delta_kl (dM_k/ds_k) f_k - (v_l . v_k) M_k.
    Checked against the symbolic Jacobian of ``GradientFlow`` in the tests."""
    H, h = v.shape
    T = s.shape[1]
    R = G - v.T @ s
    n = H * h + H * T
    jac = np.zeros((n, n))

    def vi(k: int) -> slice:
        return slice(k * h, (k + 1) * h)

    def si(k: int) -> slice:
        return slice(H * h + k * T, H * h + (k + 1) * T)

    for k in range(H):
        Jk = np.diag(s[k]) - np.outer(s[k], s[k])
        Mk = np.linalg.matrix_power(Jk, power)
        f = R.T @ v[k]
        # d(M f)/ds_k with f fixed: dJ/ds_i f = e_i f_i - e_i (s.f) - s f_i
        dJf = np.diag(f - s[k] @ f) - np.outer(s[k], f)
        if power == 1:
            dMf = dJf
        else:
            Jf = Jk @ f
            dJJf = np.diag(Jf - s[k] @ Jf) - np.outer(s[k], Jf)
            dMf = dJJf + Jk @ dJf
        for l in range(H):
            jac[vi(k), vi(l)] = -(s[l] @ s[k]) * np.eye(h)
            jac[vi(k), si(l)] = (R if k == l else 0) - np.outer(v[l], s[k])
            jac[si(k), vi(l)] = Mk @ ((R.T if k == l else 0) - np.outer(s[l], v[k]))
            jac[si(k), si(l)] = (dMf if k == l else 0) - (v[l] @ v[k]) * Mk
    return jac


def tangent_basis(H: int, h: int, T: int) -> np.ndarray:
    """Orthonormal basis of {(dv, ds): sum_i ds_{k,i} = 0 for every head}."""
    C = np.zeros((H, H * h + H * T))
    for k in range(H):
        C[k, H * h + k * T : H * h + (k + 1) * T] = 1.0
    _, _, vt = np.linalg.svd(C)
    return vt[H:].T


@cache
def head_system(setting: HeadSetting) -> HeadSystem:
    """The ``HeadSystem`` of ``setting``, built once per process: a sweep asks for the same
    setting's ladder and plateau levels once per trajectory, and each costs sympy simplifications
    (incremental-timing --quick asked for them 48 times, 49 s)."""
    return HeadSystem(setting)
