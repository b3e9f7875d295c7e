"""What the trained mean-field figures share (spec ``mean_field.md`` §7): the figure config built on
the experiment's (``simulate.mean_field.training.MeanFieldConfig``), its quick setting, the
training run in a subdirectory of the figure's run directory, and the linear-response yardsticks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from simulate.mean_field import training as mean_field_training
from simulate.mean_field.training import MeanFieldConfig
from simulate.store import load

QUICK = {
    "tokens": 256,
    "dt": 0.0625,
    "bins": 32,
    "save_every": 2,
    "steps": 200,
    "chunk": 200,
    "log_every": 50,
    "seeds": 1,
}
"""CPU setting of every trained mean-field figure: N = 256, 128 Euler steps of 1/16 (4 per depth
bin), 200 Adam steps, one seed."""


@dataclass(frozen=True)
class TrainedFigureConfig(MeanFieldConfig):
    """A figure over the mean-field training experiment (spec §4 defaults)."""

    out: Path = Path("runs")
    """output directory (the figure goes to OUT/FIGURE_ID/, its training runs below it)."""
    quick: bool = False
    """CPU-sized: N = 256, depth step 1/16, 200 Adam steps, one seed."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def training(self, run_dir: Path, name: str = "training", **overrides) -> MeanFieldConfig:
        """The experiment config this figure trains, into ``run_dir/name``."""
        base = {f.name: getattr(self, f.name) for f in fields(MeanFieldConfig)}
        cfg = MeanFieldConfig(**{**base, "out": run_dir / name})
        if self.quick:
            cfg = replace(cfg, **QUICK)
        return replace(cfg, **overrides) if overrides else cfg


def train(cfg: MeanFieldConfig):
    """Run the experiment and load what it stored: ``(dataset, summary)``."""
    import json

    mean_field_training.run(cfg)
    ds, _ = load(cfg.out)
    return ds, json.loads((cfg.out / "summary.json").read_text())


def linear_response(cfg: MeanFieldConfig) -> dict:
    """Seed-averaged ``||G_t||`` per bin and Gramian ``int ||G_t||^2 dt`` at ``W = 0``
    (``simulate.mean_field.training.linear_response``), and the restoring rate of the escape
    mode (``restoring_rate``, S^1)."""
    runs = [mean_field_training.linear_response(cfg, s) for s in cfg.seed_ids]
    out = {
        "gradient_norm": np.mean([r["gradient_norm"] for r in runs], axis=0),
        "gramian": float(np.mean([r["gramian"] for r in runs])),
    }
    if cfg.dim == 2:
        out["kappa"] = float(
            np.mean([mean_field_training.restoring_rate(cfg, s) for s in cfg.seed_ids])
        )
    return out


def fit_rate(depth_centres, norms, depth: float, window: float) -> float:
    """``kappa`` of ``||W_t|| ∝ e^{-kappa (T - t)}``: least-squares slope of ``log ||W_b||`` over
    the bins in the last ``window`` of the depth."""
    t, n = np.asarray(depth_centres, float), np.asarray(norms, float)
    sel = (t >= depth - window) & (n > 0)
    if sel.sum() < 2:
        return float("nan")
    return float(np.polyfit(t[sel], np.log(n[sel]), 1)[0])
