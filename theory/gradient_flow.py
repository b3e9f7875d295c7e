"""Gradient flows written symbolically, shared by every paper module (ARCHITECTURE §2).

A flow is ``x' = -M(x) grad L(x)`` for a loss ``L`` and a metric (preconditioner) ``M``; the
Euclidean flow has ``M = I``. Linear invariants ``C x' = 0`` (e.g. the mass of a probability
vector) are declared so that spectra are taken on the tangent space they leave free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike


class FixedPointKind(enum.StrEnum):
    """Kind of a fixed point, from the signs of the real parts of its spectrum."""

    SINK = "sink"
    SOURCE = "source"
    SADDLE = "saddle"
    DEGENERATE = "degenerate"


def classify_spectrum(eigenvalues: ArrayLike, tol: float = 1e-9) -> FixedPointKind:
    """Hyperbolic classification; any eigenvalue with |Re| <= tol (relative) makes it degenerate."""
    re = np.real(np.asarray(eigenvalues, dtype=complex))
    scale = max(1.0, float(np.max(np.abs(re)))) if re.size else 1.0
    if np.any(np.abs(re) <= tol * scale):
        return FixedPointKind.DEGENERATE
    if np.all(re < 0):
        return FixedPointKind.SINK
    if np.all(re > 0):
        return FixedPointKind.SOURCE
    return FixedPointKind.SADDLE


@overload
def escape_time(eps: float, rate: float) -> float: ...
@overload
def escape_time(eps: sp.Expr | float, rate: sp.Expr | float) -> sp.Expr | float: ...


def escape_time(eps: sp.Expr | float, rate: sp.Expr | float) -> sp.Expr | float:
    """Time to leave a hyperbolic saddle from distance eps along a mode of rate lambda:
    ``ln(1/eps) / lambda`` (exact when either argument is symbolic, else a float)."""
    if isinstance(eps, sp.Expr) or isinstance(rate, sp.Expr):
        return sp.log(sp.Integer(1) / sp.sympify(eps)) / rate
    return float(np.log(1.0 / eps) / rate)


def simplex_metric(s: sp.Matrix, power: int = 1) -> sp.Matrix:
    """Softmax Jacobian ``J(s) = diag(s) - s s^T`` raised to ``power``: the replicator (Shahshahani)
    metric for power 1, the metric of Euclidean gradient flow on the logits for power 2."""
    J = sp.diag(*s) - s * s.T
    return J**power


@dataclass(frozen=True, eq=False)
class GradientFlow:
    """``x' = -M(x) grad L(x)`` over the ordered state symbols ``x``.

    ``metric`` is ``M(x)`` (``None`` for Euclidean); ``invariants`` is a matrix ``C`` with
    ``C x' = 0`` identically, whose null space is the tangent space of the flow.
    """

    state: tuple[sp.Symbol, ...]
    loss: sp.Expr
    metric: sp.Matrix | None = None
    invariants: sp.Matrix | None = None

    @cached_property
    def gradient(self) -> sp.Matrix:
        """``grad L``, a column over ``state``."""
        return sp.Matrix([sp.diff(self.loss, x) for x in self.state])

    @cached_property
    def field(self) -> sp.Matrix:
        """The vector field ``-M grad L``."""
        g = self.gradient
        return -g if self.metric is None else -(self.metric * g)

    @cached_property
    def jacobian(self) -> sp.Matrix:
        """Jacobian of the field with respect to ``state``."""
        return self.field.jacobian(sp.Matrix(self.state))

    def field_at(self, point: dict) -> sp.Matrix:
        """The field at ``point`` ({symbol: value}), exactly."""
        return self.field.xreplace(point)

    def jacobian_at(self, point: dict) -> sp.Matrix:
        """The Jacobian at ``point`` ({symbol: value}), exactly."""
        return self.jacobian.xreplace(point)

    def is_fixed_point(self, point: dict) -> bool:
        """Whether every component of the field simplifies to 0 at ``point``."""
        return all(sp.simplify(c) == 0 for c in self.field_at(point).flat())

    def tangent_basis(self) -> np.ndarray:
        """Orthonormal basis (columns) of the null space of the invariants."""
        n = len(self.state)
        if self.invariants is None:
            return np.eye(n)
        C = np.array(self.invariants.tolist(), dtype=float)
        _, sv, vt = np.linalg.svd(C)
        rank = int(np.sum(sv > 1e-12))
        return vt[rank:].T

    def spectrum_at(self, point: dict) -> np.ndarray:
        """Eigenvalues of the exact Jacobian at ``point``, restricted to the tangent space.

        The Jacobian entries are exact; the eigenvalues are computed in float64 (a closed form is
        out of reach for the large matrices of the paper settings)."""
        jac = np.array(self.jacobian_at(point).evalf().tolist(), dtype=float)
        B = self.tangent_basis()
        return np.linalg.eigvals(B.T @ jac @ B)

    def classify(self, point: dict, tol: float = 1e-9) -> FixedPointKind:
        """Kind of the fixed point ``point`` from its tangent-space spectrum."""
        return classify_spectrum(self.spectrum_at(point), tol)

    def latex(self, names: dict | None = None) -> str:
        """One aligned line per coordinate: ``\\dot x_i = f_i(x)``."""
        opts = {"symbol_names": names} if names else {}
        rows = [
            rf"\dot{{{sp.latex(x, **opts)}}} &= "
            rf"{sp.latex(sp.factor_terms(f), **opts)}"
            for x, f in zip(self.state, self.field.flat())
        ]
        return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"
