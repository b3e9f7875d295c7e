"""Figure incremental-timing, training half (spec incremental.md §7 incremental-timing (ii), §5.6;
issue 17 item 4).

The minimal transformer is trained online with AdamW (W_V = 0, W_Q ~ U(-q, q)) over a grid of
query-init scales q and importance ratios m, seeds vmapped. Its stage boundaries (in steps) are
measured from the validation loss (stage 1) and the KL ladder (stages 2, 3), and predicted by the
reduced head system (``theory.incremental.heads``, logit metric) integrated from each network's own
initial positional logits. AdamW has no exact time map to the reduced flow. The map is derived per
grid point and seed, with no constant fitted to a run: the step at which the heads split to first
order in q (``simulate.incremental.tangent_split``: the run's head differences carried along its
exactly symmetric twin by every AdamW step's tangent map) over the reduced system's split time.
Beside it, the old predictor: one factor calibrated on the measured boundaries at the grid point
nearest the paper's default (q = 1e-9, m = 1.7) and used unchanged elsewhere. With
``sequential_stages``, stage 3 is also predicted from each run's own state at its measured t_2 by
AdamW's expected-moment map (``simulate.incremental.adam_later_stages``), nothing fitted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from figures.core.output import finite_mean, format_table
from figures.core.verdicts import Prediction
from simulate.incremental import markov_training
from simulate.incremental.adam_later_stages import SEQUENTIAL_RULE, sequential_stages
from simulate.incremental.adam_moments import TEACHER_RULE as STAGE_ONE_RULE
from simulate.incremental.adam_moments import stage_one_by_teacher
from simulate.incremental.head_ode import OdeBatch, plateau_levels, solve
from simulate.incremental.markov_reduction import (
    ODE_SPLIT_RULE,
    PREDICTION_RULE,
    initial_positional_logits,
    ode_split_times,
    reduced_setting,
)
from simulate.incremental.markov_training import (
    APART_RULE,
    SPLIT_RULE,
    MarkovTrainConfig,
    apart_step,
    split_step,
)
from simulate.incremental.tangent_split import TANGENT_SPLIT_RULE, tangent_splits
from simulate.incremental.training_stages import (
    CALIBRATION_RULE,
    STAGE_RULE,
    TIME_MAP_RULE,
    calibration_point,
    stored_stage_boundaries,
    time_factor,
)
from simulate.runner import RunOutput
from simulate.side_by_side import After
from simulate.store import load, read_summary
from theory.validation import require

QUICK = {
    "q": (1e-3, 1e-7),
    "m": (1.5, 1.7),
    "seeds": 1,
    "batch": 256,
    "validation": 256,
    "steps": 1000,
}
"""CPU-sized grid. d stays 50: at d = 20 the truncated teacher A*_1 of teacher seed 0 is worse than
uniform prediction (validation loss 3.35 > ln 20 at m = 1.7), so the stage-1 midpoint lies above
the initial loss and the KL ladder starts at A*_{1:3}."""
ODE_SAVES = 400
"""saved times of the reduced system (log grid): the split time is interpolated between them."""


@dataclass(frozen=True)
class TrainingGrid:
    """Minimal transformer trained online on the Markov chain over a (q, m) grid (spans 2, 2, 2)."""

    q: tuple[float, ...] = (1e-3, 1e-5, 1e-7, 1e-9)
    """query-init scales q (> 0; W_Q ~ U(-q, q), W_V = 0; float64 training below 1e-6)."""
    m: tuple[float, ...] = (1.3, 1.5, 1.7)
    """importance ratios m (dimensionless, > 1)."""
    seeds: int = 3
    """training seeds per grid point, vmapped."""
    vocab: int = 50
    """d, vocabulary size."""
    batch: int = 512
    """fresh sequences per step (online)."""
    validation: int = 512
    """validation sequences."""
    steps: int = 1500
    """optimizer steps per run (a multiple of 100)."""
    log_every: int = 5
    """steps between logged rows (the stage-1 boundary comes within tens of steps)."""
    t_max: float = 2e4
    """horizon of the reduced system, in ODE time units."""
    sequential_stages: bool = False
    """also predict stage k >= 3 of every run and seed from its state at the measured t_{k-1}
    (``SEQUENTIAL_RULE``). Off by default: the map takes 2048 per-sequence gradients a step,
    0.35 s a step in float32 and 1.1 s in float64 at the quick setting, about 2 to 6 min a run."""

    def __post_init__(self):
        require(
            len(self.q) > 0 and all(x > 0 for x in self.q),
            "train.q",
            self.q,
            "one or more query-init scales > 0",
        )
        require(
            len(self.m) > 0 and all(x > 1 for x in self.m),
            "train.m",
            self.m,
            "one or more importance ratios > 1",
        )
        require(self.t_max > 0, "train.t_max", self.t_max, "an ODE time > 0")
        self.config(self.q[0], self.m[0])  # validates the sizes

    def configs(self) -> list[MarkovTrainConfig]:
        """Every grid point's run, q major then m (``_points`` order)."""
        return [self.config(self.q[i], self.m[j]) for i, j in _points(self)]

    def config(self, q: float, m: float) -> MarkovTrainConfig:
        return MarkovTrainConfig(
            vocab=self.vocab,
            m=m,
            query_scale=q,
            batch=self.batch,
            validation=self.validation,
            steps=self.steps,
            log_every=self.log_every,
            chunk=100,
            seeds=self.seeds,
        )


def jobs(
    grid: TrainingGrid, out: Path, quiet: bool, first: int = 0
) -> list[Callable[[], Any] | After]:
    """The training half's work, to run side by side (``collect`` reads the results in this
    order): the reduced system from every network's initial logits (one vmapped solve), one
    tangent per (m, seed) serving every q (each longer than a run, so early), every grid point's
    run (seeds vmapped), then every grid point's stage 1 from AdamW's expected moments (short, so
    last: they fill the devices while the last runs finish), and with ``sequential_stages`` every
    run's later stages from its own state, each once its run has finished; ``first`` is the index
    of the first of these jobs in the caller's list (the runs' indices are needs)."""
    qs, ms = list(grid.q), list(grid.m)
    seeds = grid.config(qs[0], ms[0]).seed_ids
    runs_at = first + 1 + len(ms) * len(seeds)
    return [
        partial(_reduced, grid),
        *(
            partial(tangent_splits, grid.config(qs[0], m), qs, s, until_apart=True)
            for m in ms
            for s in seeds
        ),
        *(
            partial(
                markov_training.run,
                cfg,
                RunOutput(out=Path(out) / f"q={cfg.query_scale:g}_m={cfg.m:g}", quiet=quiet),
            )
            for cfg in grid.configs()
        ),
        *(partial(stage_one_by_teacher, cfg) for cfg in grid.configs()),
        *(
            After((runs_at + n,), partial(sequential_stages, cfg))
            for n, cfg in enumerate(grid.configs())
            if grid.sequential_stages
        ),
    ]


def _points(grid: TrainingGrid) -> list[tuple[int, int]]:
    return list(itertools.product(range(len(grid.q)), range(len(grid.m))))


def _reduced(grid: TrainingGrid) -> OdeBatch:
    """The reduced system (logit metric) from the initial positional logits of every grid point
    and seed, in ``_points`` then seed order."""
    configs = grid.configs()
    settings = [reduced_setting(cfg) for cfg in configs]
    n = len(configs) * grid.seeds
    return solve(
        settings[0],  # blocks, window and heads; the importances ride in the targets
        np.zeros(n),
        np.zeros(n, int),
        grid.t_max,
        n_save=ODE_SAVES,
        targets=np.stack([s.target() for s in settings for _ in range(grid.seeds)]),
        levels=np.stack([plateau_levels(s) for s in settings for _ in range(grid.seeds)]),
        theta0=np.concatenate([initial_positional_logits(cfg) for cfg in configs]),
    )


def collect(grid: TrainingGrid, done: Sequence[Any]) -> tuple[xr.Dataset, dict]:
    """From the results of ``jobs``: measure every run's stage boundaries, split and all-apart
    steps, and map the reduced system's times to steps twice: by the derived map
    (``TIME_MAP_RULE``) and by the old calibrated factor (``CALIBRATION_RULE``)."""
    qs, ms = list(grid.q), list(grid.m)
    points = _points(grid)
    n_tangents = len(ms) * grid.seeds
    ode, tangents = done[0], done[1 : 1 + n_tangents]
    paths = done[1 + n_tangents : 1 + n_tangents + len(points)]
    after_runs = 1 + n_tangents + len(points)
    stage_one = np.array(done[after_runs : after_runs + len(points)]).reshape(len(qs), len(ms), -1)
    sequential = done[after_runs + len(points) :]
    setting = reduced_setting(grid.config(qs[0], ms[0]))
    # (m x seed, q, split/apart) -> (q, m, seed, split/apart)
    first = np.array([[(f.split, f.apart) for f in fs] for fs in tangents])
    first = first.reshape(len(ms), grid.seeds, len(qs), 2).transpose(2, 0, 1, 3)
    split = np.full(first.shape, np.nan)  # measured (q, m, seed, split/apart)
    # (q, m, seed, stage): points are q-major
    measured = np.stack([stored_stage_boundaries(path) for path in paths]).reshape(
        len(qs), len(ms), grid.seeds, -1
    )
    runs, dtypes = {}, {}
    for (i, j), path in zip(points, paths, strict=True):
        ds, _ = load(path)
        summary = read_summary(path)
        steps = ds["step"].values
        for s in range(grid.seeds):
            mass = ds["block_mass"].values[s]
            split[i, j, s] = split_step(steps, mass), apart_step(steps, mass)
        dtypes[f"q={qs[i]:g}, m={ms[j]:g}"] = summary["dtype"]
        runs[f"q={qs[i]:g}, m={ms[j]:g}"] = str(path)
    shape = (len(qs), len(ms), grid.seeds)
    ode_time = ode.crossings.reshape(*shape, -1)
    ode_split = ode_split_times(setting, ode.ts, ode.s).reshape(*shape, 2)
    scale = first[..., 0] / ode_split[..., 0]  # steps per unit ODE time, per point and seed
    predicted = ode_time * scale[..., None]
    i_q, i_m = calibration_point(qs, ms)
    factor = time_factor(measured[i_q, i_m], ode_time[i_q, i_m])
    calibrated = ode_time * factor
    from_state = np.full(measured.shape, np.nan)  # (q, m, seed, stage): stages >= 3 only
    for (i, j), per_seed in zip(points, sequential, strict=False):
        from_state[i, j, :, 2:] = per_seed
    dims = ("train_q", "train_m", "train_seed", "train_stage")
    data = xr.Dataset(
        {
            "train_measured_step": (dims, measured),
            "train_predicted_step": (dims, predicted),
            "train_calibrated_step": (dims, calibrated),
            "train_ode_time": (dims, ode_time),
            "train_split_measured": (dims[:3], split[..., 0]),
            "train_split_first_order": (dims[:3], first[..., 0]),
            "train_ode_split_time": (dims[:3], ode_split[..., 0]),
            "train_apart_measured": (dims[:3], split[..., 1]),
            "train_apart_first_order": (dims[:3], first[..., 1]),
            "train_ode_apart_time": (dims[:3], ode_split[..., 1]),
            "train_steps_per_ode_time": (dims[:3], scale),
            "train_stage_one_expected_moments": (dims[:3], stage_one),
            **({"train_sequential_step": (dims, from_state)} if sequential else {}),
        },
        coords={
            "train_q": qs,
            "train_m": ms,
            "train_seed": np.arange(grid.seeds),
            "train_stage": np.arange(1, measured.shape[-1] + 1),
        },
    )
    rows = []
    for (i, j), k in itertools.product(points, range(measured.shape[-1])):
        meas, pred, cal = measured[i, j, :, k], predicted[i, j, :, k], calibrated[i, j, :, k]
        row = {
            "q": qs[i],
            "m": ms[j],
            "stage": k + 1,
            "measured_step": finite_mean(meas),
            "measured_per_seed": meas.tolist(),
            "predicted_step": finite_mean(pred),
            "predicted_over_measured": finite_mean(pred) / finite_mean(meas),
            "calibrated_step": finite_mean(cal),
            "calibrated_over_measured": finite_mean(cal) / finite_mean(meas),
            "ode_time": finite_mean(ode_time[i, j, :, k]),
        }
        if k == 0:
            em = stage_one[i, j]
            row.update(
                {
                    "expected_moments_step": finite_mean(em),
                    "expected_moments_per_seed": em.tolist(),
                    "expected_moments_over_measured": finite_mean(em) / finite_mean(meas),
                }
            )
        else:
            # durations per seed, then the mean: t_k - t_{k-1} of the same run
            dur_meas = finite_mean(meas - measured[i, j, :, k - 1])
            dur_pred = finite_mean(pred - predicted[i, j, :, k - 1])
            row.update(
                {
                    "measured_duration_steps": dur_meas,
                    "predicted_duration_steps": dur_pred,
                    "duration_predicted_over_measured": dur_pred / dur_meas,
                }
            )
        if sequential and k >= 2:
            seq = from_state[i, j, :, k]
            # from the measured t_{k-1}: the duration is the map's part
            dur_seq = finite_mean(seq - measured[i, j, :, k - 1])
            row.update(
                {
                    "sequential_step": finite_mean(seq),
                    "sequential_per_seed": seq.tolist(),
                    "sequential_over_measured": finite_mean(seq) / finite_mean(meas),
                    "sequential_duration_steps": dur_seq,
                    "sequential_duration_over_measured": dur_seq / row["measured_duration_steps"],
                }
            )
        rows.append(row)
    split_rows = [
        {
            "q": qs[i],
            "m": ms[j],
            "measured_split": finite_mean(split[i, j, :, 0]),
            "measured_per_seed": split[i, j, :, 0].tolist(),
            "first_order_split": finite_mean(first[i, j, :, 0]),
            "first_order_per_seed": first[i, j, :, 0].tolist(),
            "first_order_over_measured": finite_mean(first[i, j, :, 0])
            / finite_mean(split[i, j, :, 0]),
            "ode_split_time": finite_mean(ode_split[i, j, :, 0]),
            "steps_per_ode_time": finite_mean(scale[i, j]),
            "measured_apart": finite_mean(split[i, j, :, 1]),
            "first_order_apart": finite_mean(first[i, j, :, 1]),
            "ode_apart_time": finite_mean(ode_split[i, j, :, 1]),
        }
        for i, j in points
    ]
    summary = {
        "stage_rule": STAGE_RULE,
        "prediction_rule": PREDICTION_RULE,
        "time_map_rule": TIME_MAP_RULE,
        "split_rule": SPLIT_RULE,
        "apart_rule": APART_RULE,
        "first_order_split_rule": TANGENT_SPLIT_RULE,
        "stage_one_rule": STAGE_ONE_RULE,
        **({"sequential_rule": SEQUENTIAL_RULE} if sequential else {}),
        "ode_split_rule": ODE_SPLIT_RULE,
        "calibration_rule": CALIBRATION_RULE,
        "calibration_point": {"q": qs[i_q], "m": ms[i_m]},
        "steps_per_ode_time_calibrated": factor,
        "rows": rows,
        "split_rows": split_rows,
        "dtypes": dtypes,
        "runs": runs,
        "grid": {
            "q": qs,
            "m": ms,
            "seeds": grid.seeds,
            "vocab": grid.vocab,
            "batch": grid.batch,
            "steps": grid.steps,
        },
        "ode_compile_seconds": ode.compile_seconds,
        "ode_run_seconds": ode.run_seconds,
    }
    return data, summary


TOLERANCE = 0.25
"""relative: issue 17's target for the stage durations of AdamW training, no fitted constant."""


def predictions(part: dict) -> list[Prediction]:
    """At every grid point (nothing is fitted, so none is left out): the heads' split step to first
    order in q against the run's, each stage boundary and each stage duration t_k - t_{k-1} by the
    derived time map against the measured ones (seed means)."""
    where = "q = {q:g}, m = {m:g}, mean over seeds"
    out = [
        Prediction(
            f"training heads split (steps), {where.format(q=float(r['q']), m=float(r['m']))}",
            r["first_order_split"],
            r["measured_split"],
            TOLERANCE,
            f"measured: {SPLIT_RULE}; predicted: {TANGENT_SPLIT_RULE}",
        )
        for r in part.get("split_rows", [])
    ]
    rule = f"measured: {STAGE_RULE}; predicted: reduced system x {TIME_MAP_RULE}"
    for r in part["rows"]:
        at = where.format(q=float(r["q"]), m=float(r["m"]))
        out.append(
            Prediction(
                f"training stage {r['stage']} boundary (steps), {at}",
                r["predicted_step"],
                r["measured_step"],
                TOLERANCE,
                rule,
            )
        )
        if "expected_moments_step" in r:
            out.append(
                Prediction(
                    f"training stage 1 boundary (steps) from AdamW's expected moments, {at}",
                    r["expected_moments_step"],
                    r["measured_step"],
                    TOLERANCE,
                    f"measured: {STAGE_RULE}; predicted: {STAGE_ONE_RULE}",
                )
            )
        if "measured_duration_steps" in r:
            out.append(
                Prediction(
                    f"training stage {r['stage']} duration t_{r['stage']} - t_{r['stage'] - 1} "
                    f"(steps), {at}",
                    r["predicted_duration_steps"],
                    r["measured_duration_steps"],
                    TOLERANCE,
                    rule,
                )
            )
        if "sequential_duration_steps" in r:
            out.append(
                Prediction(
                    f"training stage {r['stage']} duration t_{r['stage']} - t_{r['stage'] - 1} "
                    f"(steps) from the run's state at t_{r['stage'] - 1}, {at}",
                    r["sequential_duration_steps"],
                    r["measured_duration_steps"],
                    TOLERANCE,
                    f"measured: {STAGE_RULE}; predicted: {SEQUENTIAL_RULE}",
                )
            )
    return out


def report(part: dict) -> str:
    cal = part["calibration_point"]
    head = (
        "training (minimal transformer, AdamW, online): predicted = ODE time x the derived time "
        "map (first-order split step / ODE split time, per point and seed); old = ODE time x "
        f"{part['steps_per_ode_time_calibrated']:.4g} steps per unit ODE time, calibrated at "
        f"q = {cal['q']:g}, m = {cal['m']:g}"
    )
    splits = format_table(
        [
            "q",
            "m",
            "split measured",
            "first order",
            "ratio",
            "ODE split",
            "steps/ODE time",
            "all apart measured",
            "first order",
            "ODE",
        ],
        [
            [
                r["q"],
                r["m"],
                r["measured_split"],
                r["first_order_split"],
                r["first_order_over_measured"],
                r["ode_split_time"],
                r["steps_per_ode_time"],
                r["measured_apart"],
                r["first_order_apart"],
                r["ode_apart_time"],
            ]
            for r in part["split_rows"]
        ],
    )
    table = format_table(
        [
            "q",
            "m",
            "stage",
            "measured",
            "predicted",
            "pred/meas",
            "old (calibrated)",
            "old/meas",
            "duration meas",
            "duration pred",
            "pred/meas",
        ],
        [
            [
                r["q"],
                r["m"],
                r["stage"],
                r["measured_step"],
                r["predicted_step"],
                r["predicted_over_measured"],
                r["calibrated_step"],
                r["calibrated_over_measured"],
                r.get("measured_duration_steps", "-"),
                r.get("predicted_duration_steps", "-"),
                r.get("duration_predicted_over_measured", "-"),
            ]
            for r in part["rows"]
        ],
    )
    stage_one = format_table(
        ["q", "m", "stage 1 measured", "expected moments", "ratio", "derived map", "ratio"],
        [
            [
                r["q"],
                r["m"],
                r["measured_step"],
                r["expected_moments_step"],
                r["expected_moments_over_measured"],
                r["predicted_step"],
                r["predicted_over_measured"],
            ]
            for r in part["rows"]
            if "expected_moments_step" in r
        ],
    )
    lines = [
        head,
        splits,
        table,
        f"stage 1 from AdamW's expected moments ({part['stage_one_rule']}):",
        stage_one,
    ]
    if "sequential_rule" in part:
        lines += [
            f"later stages from the run's own state ({part['sequential_rule']}):",
            format_table(
                [
                    "q",
                    "m",
                    "stage",
                    "measured",
                    "from state",
                    "ratio",
                    "duration",
                    "from state",
                    "ratio",
                ],
                [
                    [
                        r["q"],
                        r["m"],
                        r["stage"],
                        r["measured_step"],
                        r["sequential_step"],
                        r["sequential_over_measured"],
                        r["measured_duration_steps"],
                        r["sequential_duration_steps"],
                        r["sequential_duration_over_measured"],
                    ]
                    for r in part["rows"]
                    if "sequential_step" in r
                ],
            ),
        ]
    return "\n".join(lines)


def plot_row(axes, data: xr.Dataset) -> None:
    """Measured (dots, every seed) and predicted (dashed: derived time map; dotted: the old
    calibrated factor; dash-dotted diamonds: stage 1 from AdamW's expected moments; hollow
    squares: later stages from the run's own state, when computed; seed means) boundaries, with
    the heads' split (black: crosses measured, dashed first order): against ln(1/q) at the m
    nearest 1.7, against m at the q nearest 1e-9, and predicted against measured."""
    qs, ms = data["train_q"].values, data["train_m"].values
    i_q, i_m = calibration_point(qs, ms)
    meas, pred = data["train_measured_step"], data["train_predicted_step"]
    old = data["train_calibrated_step"]
    stages = data["train_stage"].values
    colors = dict(zip(stages, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for ax, dim, x, fixed, label in (
        (axes[0], "train_q", np.log(1 / qs), {"train_m": ms[i_m]}, "ln(1/q)"),
        (axes[1], "train_m", ms, {"train_q": qs[i_q]}, "importance ratio m"),
    ):
        for k in stages:
            m_k = meas.sel(fixed).sel(train_stage=k).transpose(dim, "train_seed").values
            p_k = pred.sel(fixed).sel(train_stage=k).mean("train_seed").values
            o_k = old.sel(fixed).sel(train_stage=k).mean("train_seed").values
            for xi, yi in zip(x, m_k):
                ax.plot(np.full(yi.size, xi), yi, "o", color=colors[k], ms=4)
            ax.plot(x, p_k, "--", color=colors[k], label=f"stage {k}")
            ax.plot(x, o_k, ":", color=colors[k], alpha=0.6)
        if "train_stage_one_expected_moments" in data:
            em = data["train_stage_one_expected_moments"].sel(fixed).mean("train_seed").values
            ax.plot(x, em, "-.", marker="d", color=colors[1], label="stage 1, expected moments")
        if "train_sequential_step" in data:
            for k in stages[2:]:
                seq = data["train_sequential_step"].sel(fixed).sel(train_stage=k)
                ax.plot(
                    x,
                    seq.mean("train_seed").values,
                    "s",
                    color=colors[k],
                    mfc="none",
                    ms=7,
                    label=f"stage {k}, expected moments from the run's t_{k - 1}",
                )
        if "train_split_measured" in data:
            s_meas = data["train_split_measured"].sel(fixed).transpose(dim, "train_seed").values
            s_first = data["train_split_first_order"].sel(fixed).mean("train_seed").values
            for xi, yi in zip(x, s_meas):
                ax.plot(np.full(yi.size, xi), yi, "x", color="k", ms=5)
            ax.plot(x, s_first, "--", color="k", lw=1, label="heads split (first order)")
        what = f"m = {ms[i_m]:g}" if dim == "train_q" else f"q = {qs[i_q]:g}"
        ax.set(yscale="log", xlabel=label, ylabel="stage boundary (steps)")
        ax.set_title(
            f"training, {what}:\nmeasured (dots), derived map (dashed), old calibrated (dotted)",
            fontsize=9,
        )
        ax.legend(fontsize=8)
    ax = axes[2]
    for k in stages:
        x_k = meas.sel(train_stage=k).values.ravel()
        ax.plot(
            x_k,
            pred.sel(train_stage=k).values.ravel(),
            "o",
            color=colors[k],
            ms=4,
            label=f"stage {k}, derived map",
        )
        ax.plot(
            x_k,
            old.sel(train_stage=k).values.ravel(),
            "o",
            mfc="none",
            color=colors[k],
            ms=5,
            label=f"stage {k}, old calibrated",
        )
    if "train_stage_one_expected_moments" in data:
        ax.plot(
            meas.sel(train_stage=1).values.ravel(),
            data["train_stage_one_expected_moments"].values.ravel(),
            "d",
            color=colors[1],
            ms=6,
            label="stage 1, expected moments",
        )
    if "train_sequential_step" in data:
        for k in stages[2:]:
            ax.plot(
                meas.sel(train_stage=k).values.ravel(),
                data["train_sequential_step"].sel(train_stage=k).values.ravel(),
                "s",
                color=colors[k],
                mfc="none",
                ms=7,
                label=f"stage {k}, expected moments from the run's t_{k - 1}",
            )
    finite = np.concatenate(
        [a.values[np.isfinite(a.values) & (a.values > 0)].ravel() for a in (meas, pred, old)]
    )
    if finite.size:
        lim = (finite.min() / 1.5, finite.max() * 1.5)
        ax.plot(lim, lim, "k:", lw=1, label="predicted = measured")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="measured boundary (steps)",
        ylabel="predicted boundary (steps)",
    )
    ax.set_title("training:\nderived time map (filled), old calibrated factor (hollow)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
