"""Loss spikes of clustering-head fine-tuning runs (spec clustering_head.md §5.4, §7
clustering-head-loss-spike): every spike of every seed with its observables at / just before the
onset and the coincidence flags of the rules of ``simulate.measure.spikes``, the base rates of those
flags at the non-spike epochs, and the fractions of spikes with each flag."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulate.clustering_head.training import ADAM_B1
from simulate.measure.spikes import (
    AT_OR_BEFORE,
    BEFORE,
    SpikeRule,
    bursts,
    detect_spikes,
    dips,
    stability_threshold,
)

SERIES = (
    "train_loss",
    "gradient_norm",
    "min_embedding_norm",
    "curvature_bound",
    "hessian_top",
    "preconditioned_sharpness",
)
"""the logged per-epoch observables of the fine-tuning run kept by the figure."""
FLAGS = (
    "min_norm_dip",
    "preconditioned_sharpness_jump",
    "raw_sharpness_jump",
    "dip_and_sharpness_jump",
    "gradient_burst",
)
"""the coincidence flags of a spike (``simulate.measure.spikes`` rules)."""


def spike_table(
    series: dict[str, np.ndarray], rule: SpikeRule, lr: float, beta1: float = ADAM_B1
) -> list[dict]:
    """Every spike of every seed (rows of the arrays in ``series``) with its observables at e - 1
    and e and the coincidence flags of ``simulate.measure.spikes``."""
    gd, adam = stability_threshold(lr), stability_threshold(lr, beta1)
    rows = []
    for s, loss in enumerate(series["train_loss"]):
        onsets = detect_spikes(loss, rule.factor)
        one = {k: v[s] for k, v in series.items()}
        flags = _flags(one, onsets, rule, gd, adam, AT_OR_BEFORE)
        early = _flags(one, onsets, rule, gd, adam, BEFORE)
        for i, e in enumerate(onsets):
            row = {"seed_index": s, "onset": int(e), "loss_ratio": float(loss[e] / loss[e - 1])}
            for name in SERIES:
                row[f"{name}_before"] = float(series[name][s, e - 1])
                row[f"{name}_at"] = float(series[name][s, e])
            rows.append(
                row
                | {k: bool(v[i]) for k, v in flags.items()}
                | {f"{k}_before": bool(v[i]) for k, v in early.items()}
            )
    return rows


def _flags(
    one: dict[str, np.ndarray],
    onsets: np.ndarray,
    rule: SpikeRule,
    gd: float,
    adam: float,
    offsets: Sequence[int],
) -> dict[str, np.ndarray]:
    w, f = rule.window, rule.jump_factor
    dip = dips(one["min_embedding_norm"], onsets, w, rule.dip_fraction, offsets)
    jump = bursts(one["preconditioned_sharpness"], onsets, w, f, adam, offsets)
    return {
        "min_norm_dip": dip,
        "preconditioned_sharpness_jump": jump,
        "raw_sharpness_jump": bursts(one["hessian_top"], onsets, w, f, gd, offsets),
        "dip_and_sharpness_jump": dip & jump,
        "gradient_burst": bursts(one["gradient_norm"], onsets, w, f, np.inf, offsets),
    }


def base_rates(
    series: dict[str, np.ndarray],
    rule: SpikeRule,
    lr: float,
    beta1: float = ADAM_B1,
    offsets: Sequence[int] = AT_OR_BEFORE,
) -> dict[str, float]:
    """The coincidence rules applied to every epoch e >= 2 that is not a spike onset, in the seeds
    that have a spike (the same runs, so seeds stuck at chance do not dilute the control): how
    often each flag fires without a spike."""
    gd, adam = stability_threshold(lr), stability_threshold(lr, beta1)
    hits: dict[str, list] = {k: [] for k in FLAGS}
    for s, loss in enumerate(series["train_loss"]):
        onsets = set(detect_spikes(loss, rule.factor).tolist())
        if not onsets:
            continue
        quiet = np.array([e for e in range(2, len(loss)) if e not in onsets], int)
        one = {k: v[s] for k, v in series.items()}
        for k, v in _flags(one, quiet, rule, gd, adam, offsets).items():
            hits[k].extend(v.tolist())
    return {k: float(np.mean(v)) if v else float("nan") for k, v in hits.items()}


def fractions(spikes: list[dict], suffix: str = "") -> dict[str, float]:
    """Fraction of ``spikes`` with each coincidence flag (``suffix`` "_before": read at e - 1
    alone); NaN without spikes."""
    return {
        k: float(np.mean([r[k + suffix] for r in spikes])) if spikes else float("nan")
        for k in FLAGS
    }


def rule_text(rule: SpikeRule) -> dict:
    """The spike rule and the coincidence rules in words (summary.json entries)."""
    return {
        "spike_rule": f"epoch e is a spike epoch when train loss(e) > {rule.factor} x loss(e-1); "
        "consecutive spike epochs merged into the first (onset)",
        "coincidence_rules": {
            "window": "observables read at e-1 and e; baseline = median over the "
            f"{rule.window} epochs before e-1",
            "min_norm_dip": f"min ||xi|| < {rule.dip_fraction} x baseline",
            "preconditioned_sharpness_jump": f"lambda_1(P^-1 H) > 38/lr or > {rule.jump_factor} "
            "x baseline",
            "raw_sharpness_jump": f"lambda_1(H) > 2/lr or > {rule.jump_factor} x baseline",
            "gradient_burst": f"||grad|| > {rule.jump_factor} x baseline",
        },
    }
