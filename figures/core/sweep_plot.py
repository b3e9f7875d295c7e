"""Aggregate figure of a sweep (``stagewise sweep``): one curve per grid point, mean over seeds
with a 95% band, against the training step."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from theory.validation import ConfigError

Z95 = 1.96
"""Two-sided 95% normal quantile used for the band."""


def _plottable(ds: xr.Dataset, grid_keys: list[str]) -> list[str]:
    want = set(grid_keys) | {"seed", "step"}
    return [v for v in ds.data_vars if set(ds[v].dims) == want]


def default_variable(ds: xr.Dataset, grid_keys: list[str]) -> str:
    """The variable a sweep draws unless told: ``loss`` where the experiment logs one, else its
    held-out loss (a name with ``loss`` and ``val`` or ``test``: markov's ``val_loss``), else
    any loss, else its first (seed, step) variable."""
    names = _plottable(ds, grid_keys)
    losses = [n for n in names if "loss" in n]
    held_out = [n for n in losses if "val" in n or "test" in n]
    for choice in (["loss"] if "loss" in names else [], held_out, losses, names):
        if choice:
            return choice[0]
    raise ConfigError("variable", None, "a sweep with a variable of dims (grid keys, seed, step)")


def seed_statistics(da: xr.DataArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over ``seed`` and the 95% band ``mean -/+ 1.96 sd / sqrt(n)`` (sd with ddof=1).

    ``n`` counts the seeds with a finite value at each step; where ``n < 2`` the band has
    zero width. Returns (mean, lower, upper), each over ``step``.
    """
    n = da.count("seed")
    mean = da.mean("seed", skipna=True)
    sd = da.std("seed", ddof=1, skipna=True).where(n >= 2, 0.0)
    half = Z95 * sd / np.sqrt(n.where(n >= 1, 1))
    return mean.values, (mean - half).values, (mean + half).values


def aggregate_figure(ds: xr.Dataset, grid_keys: list[str], variable: str | None = None):
    """One line per grid point: the mean of ``variable`` over ``seed`` against ``step``, with a
    shaded 95% band for the mean, ``mean +/- 1.96 * sd / sqrt(n_seeds)`` (normal approximation,
    sample sd with ddof=1; see :func:`seed_statistics`). The y axis is logarithmic when every
    finite value of ``variable`` is positive. ``variable`` must have dims grid keys + seed + step;
    None: :func:`default_variable`.
    """
    grid_keys = list(grid_keys)
    variable = variable or default_variable(ds, grid_keys)
    allowed = _plottable(ds, grid_keys)
    if variable not in allowed:
        raise ConfigError(
            "variable",
            variable,
            "a variable with dims (grid keys, seed, step): " + ", ".join(allowed),
        )
    da = ds[variable]
    steps = da["step"].values
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for values in itertools.product(*(ds[k].values.tolist() for k in grid_keys)):
        point = dict(zip(grid_keys, values))
        mean, lower, upper = seed_statistics(da.sel(point))
        label = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()
        )
        (line,) = ax.plot(steps, mean, lw=1.5, label=label)
        ax.fill_between(steps, lower, upper, color=line.get_color(), alpha=0.25, lw=0)
    finite = da.values[np.isfinite(da.values)]
    if finite.size and (finite > 0).all():
        ax.set_yscale("log")
    n_seeds = da.sizes["seed"]
    ax.set_xlabel("step")
    ax.set_ylabel(variable)
    ax.set_title(f"{variable}: mean over {n_seeds} seeds, 95% band", fontsize=10)
    ax.legend(fontsize=8, title=", ".join(grid_keys), title_fontsize=8)
    return fig


def write_sweep_figure(
    ds: xr.Dataset, grid_keys: list[str], out: Path, variable: str | None = None
) -> list[Path]:
    """Save the aggregate figure as ``out/sweep.png`` and ``out/sweep.pdf``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig = aggregate_figure(ds, grid_keys, variable)
    paths = [out / "sweep.png", out / "sweep.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths
