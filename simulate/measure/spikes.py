"""Loss spikes and the stability threshold of the sharpness (spec clustering_head.md §5.4, §7
clustering-head-loss-spike).

Stability threshold. Adam's step is x_{t+1} = x_t - lr P^{-1} m_{t+1} with the gradient EMA
m_{t+1} = beta1 m_t + (1 - beta1) g_t and P = (1 - beta1^t) diag(sqrt(v_hat) + eps) (see
``simulate.clustering_head.training.adam_preconditioner``). Freeze P (it moves slowly,
beta2 = 0.999) and take a quadratic loss; along an eigenvector of P^{-1} H with eigenvalue a,
substituting m_{t+1} = (x_t - x_{t+1}) / lr gives

    x_{t+1} = (1 + beta1 - c) x_t - beta1 x_{t-1},    c = lr (1 - beta1) a,

whose characteristic roots lie inside the unit circle iff 0 < c < 2 (1 + beta1) (Jury criterion;
at c = 2 (1 + beta1) a root sits at -1). Hence the iteration is stable iff

    a = lambda_1(P^{-1} H) < (2 + 2 beta1) / ((1 - beta1) lr)    (= 38 / lr for beta1 = 0.9),

the threshold of Cohen et al. 2022 ("Adaptive gradient methods at the edge of stability"); beta1 = 0
gives plain GD's 2 / lr on the raw sharpness lambda_1(H).

Spike rule (``SpikeRule``): epoch e is a spike epoch when the training loss jumps by more than
``factor`` within one epoch, loss(e) > factor x loss(e - 1); runs of consecutive spike epochs are
merged into one spike, dated by its first epoch (the onset). For each spike the observables are read
at the onset e and the epoch before it, e - 1 ("at / just before"), and compared with their median
over the ``window`` epochs before e - 1 (the baseline):
- min ||xi|| dip: min over {e-1, e} of min_x ||xi(x)|| < ``dip_fraction`` x baseline;
- sharpness jump: max over {e-1, e} of the sharpness > its stability threshold, or >
  ``jump_factor`` x baseline;
- gradient-norm burst: max over {e-1, e} of ||grad|| > ``jump_factor`` x baseline.
Without a baseline (e = 1, or only NaN before) only the absolute threshold can make a coincidence.
Reading e - 1 alone (``BEFORE``) asks whether the observable announced the spike (a precursor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.validation import require


def stability_threshold(lr: float, beta1: float = 0.0) -> float:
    """(2 + 2 beta1) / ((1 - beta1) lr): the largest stable lambda_1(P^{-1} H) of Adam-style
    preconditioned heavy ball with EMA momentum beta1 (beta1 = 0: GD's 2 / lr on lambda_1(H))."""
    return (2 + 2 * beta1) / ((1 - beta1) * lr)


@dataclass(frozen=True)
class SpikeRule:
    """The documented spike detector and its coincidence rules (module docstring)."""

    factor: float = 3.0
    """a spike epoch: training loss(e) > factor x loss(e - 1)."""
    window: int = 20
    """W, epochs before e - 1 whose median is the baseline of an observable."""
    dip_fraction: float = 0.5
    """min ||xi|| dip: below this fraction of its baseline."""
    jump_factor: float = 2.0
    """sharpness jump / gradient-norm burst: above this multiple of the baseline."""

    def __post_init__(self):
        require(self.factor > 1, "factor", self.factor, "a loss ratio > 1")
        require(self.window >= 1, "window", self.window, "an integer >= 1")
        require(
            0 < self.dip_fraction < 1, "dip_fraction", self.dip_fraction, "a fraction in (0, 1)"
        )
        require(self.jump_factor > 1, "jump_factor", self.jump_factor, "a ratio > 1")


def detect_spikes(loss, factor: float = 3.0) -> np.ndarray:
    """Onset epochs (indices into ``loss``) of the spikes of one loss curve: e with
    loss[e] > factor x loss[e - 1], consecutive such epochs merged into their first."""
    loss = np.asarray(loss, float)
    jump = np.zeros(len(loss), bool)
    jump[1:] = loss[1:] > factor * loss[:-1]
    return np.nonzero(jump & ~np.concatenate([[False], jump[:-1]]))[0]


def baseline(series, onset: int, window: int) -> float:
    """Median of ``series`` over the ``window`` epochs before onset - 1 (NaN if there are none)."""
    before = np.asarray(series, float)[max(0, onset - 1 - window) : max(0, onset - 1)]
    before = before[np.isfinite(before)]
    return float(np.median(before)) if len(before) else float("nan")


AT_OR_BEFORE, BEFORE = (1, 0), (1,)
"""epochs read for a spike at e, as offsets o of the epochs e - o: e - 1 and e (the rule), or
e - 1 alone (a precursor)."""


def _around(series, onset: int, offsets) -> np.ndarray:
    """The finite values of ``series`` at epochs e - o for o in ``offsets``."""
    series = np.asarray(series, float)
    near = series[[onset - o for o in offsets if 0 <= onset - o < len(series)]]
    return near[np.isfinite(near)]


def dips(series, onsets, window: int, fraction: float, offsets=AT_OR_BEFORE) -> np.ndarray:
    """Per onset: does ``series`` fall below ``fraction`` x its baseline at e - 1 or e (or at the
    epochs given by ``offsets``)?"""
    return np.array(
        [
            len(_around(series, e, offsets)) > 0
            and _around(series, e, offsets).min() < fraction * baseline(series, e, window)
            for e in onsets
        ],
        bool,
    )


def bursts(
    series, onsets, window: int, factor: float, threshold: float = np.inf, offsets=AT_OR_BEFORE
) -> np.ndarray:
    """Per onset: does ``series`` exceed ``threshold``, or ``factor`` x its baseline, at e - 1 or
    e (or at the epochs given by ``offsets``)?"""
    return np.array(
        [
            len(_around(series, e, offsets)) > 0
            and _around(series, e, offsets).max()
            > np.fmin(threshold, factor * baseline(series, e, window))
            for e in onsets
        ],
        bool,
    )
