"""Survival curves of waiting times (emergence times, say) that may never happen within a budget.

A time is nan or inf when the event did not happen within the budget: it is right-censored at the
budget, not dropped. The curves are ``scipy.stats.ecdf`` (Kaplan-Meier) estimates with every
censored time placed at or after the last evaluated step and the last event, where Kaplan-Meier
reduces to the plain fractions: ``survival(t)`` = fraction of times that are > t (never counts as
not yet), ``cdf(t)`` = fraction <= t. So a CDF that stays below 1 at the budget is the fraction
that never happened.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import CensoredData, ecdf

NEVER_RULE = "nan or inf: never within the budget (right-censored at the budget)"


def survival(steps: ArrayLike, times: ArrayLike) -> np.ndarray:
    """Fraction of the entries of ``times`` (any shape; nan/inf: never) that have not happened by
    each of ``steps``: (step,)."""
    steps = np.asarray(steps, float)
    t = np.asarray(times, float).ravel()
    done = t[np.isfinite(t)]
    if done.size == t.size == 0:
        return np.full(steps.shape, np.nan)
    if done.size == 0:
        return np.ones(steps.shape)
    censor = max(float(done.max()), float(steps.max(initial=-np.inf)))
    never = np.full(t.size - done.size, censor)
    sample = CensoredData(uncensored=done, right=never) if never.size else done
    return np.asarray(ecdf(sample).sf.evaluate(steps), float)


def cdf(steps: ArrayLike, times: ArrayLike) -> np.ndarray:
    """Fraction of the entries of ``times`` (nan/inf: never) that happened at or before each
    of ``steps``: 1 - ``survival``."""
    return 1 - survival(steps, times)


def column_survival(steps: ArrayLike, times: ArrayLike) -> np.ndarray:
    """``survival`` of each column: ``times`` (sample, column) -> (step, column), e.g. the fraction
    of seeds in which output cell i has not emerged by each step."""
    t = np.asarray(times, float)
    return np.stack([survival(steps, t[:, i]) for i in range(t.shape[1])], axis=-1)
