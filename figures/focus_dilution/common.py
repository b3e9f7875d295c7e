"""What the focus-dilution figures share (spec ``focus_dilution.md`` §4, §6, §7): the population
flow setting that the flow figures nest, the options of the one-cycle figures (stages,
embedding-pca), the stage names and the token colours. The theory's
predictions are in ``simulate.focus_dilution.predictions``, the measurement rules in
``simulate.focus_dilution.measure``; the tolerances of the verdicts that put one beside the other
(issue 16) are here, each with its reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.options import FigureOptions, Flat
from figures.core.verdicts import Prediction
from simulate.focus_dilution.flow import solve_flow, time_grid
from simulate.runner import Seeds
from theory.focus_dilution.population import transition_matrix, validate_pi
from theory.validation import require

PI_DEFAULT = (0.75, 0.19, 0.05, 0.01)
"""spec §2.3 / §7 synthetic experiment A."""
STAGES = ("I", "II", "III", "IV")
MAX_HORIZON = 100
"""the largest horizon multiple of a predicted stage onset a flow figure integrates to (far past
every stage; a huge multiple would overflow the integration time)."""


def check_horizon(value: float, of: str, field: str = "horizon", closed: bool = False) -> None:
    """``value``, a horizon as a multiple of ``of`` (e.g. t_IV), in (1, MAX_HORIZON] (in
    [1, MAX_HORIZON] when ``closed``): past the onset it is measured from, and finite."""
    low = 1 <= value if closed else 1 < value
    bracket = "[" if closed else "("
    require(
        low and value <= MAX_HORIZON,
        field,
        value,
        f"a multiple in {bracket}1, {MAX_HORIZON}] of {of}",
    )


TOKEN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


@dataclass(frozen=True)
class FlowSetting(Seeds):
    """Population gradient flow of spec §4 (the setting a flow figure nests; seeds are init
    seeds, vmapped in one compiled program)."""

    pi: tuple[float, ...] = PI_DEFAULT
    """stationary law pi (entries > 0 summing to 1); token 0 is the most frequent."""
    lam: float = 0.5
    """lambda, repeat probability of P = lambda I + (1 - lambda) 1 pi^T, in [0, 1)."""
    eps: float = 1e-3
    """init scale: every entry of W0, WQ, WK, W1 starts i.i.d. N(0, eps^2)."""
    width: int = 16
    """m, embedding width."""
    key_width: int = 16
    """m_k, query/key width."""
    samples: int = 1500
    """saved time points per run."""

    def __post_init__(self) -> None:
        Seeds.__post_init__(self)
        object.__setattr__(self, "pi", tuple(float(p) for p in self.pi))
        validate_pi(self.pi)
        require(0 <= self.lam < 1, "lam", self.lam, "a repeat probability in [0, 1)")
        require(0 < self.eps < 1, "eps", self.eps, "an init scale in (0, 1)")
        require(
            self.width >= 2,
            "width",
            self.width,
            "an embedding width >= 2 (Stage IV opens a second embedding direction)",
        )
        require(self.key_width >= 1, "key_width", self.key_width, "an integer >= 1")
        require(self.samples >= 10, "samples", self.samples, "at least 10 saved times")

    def chain(self) -> tuple[np.ndarray, np.ndarray]:
        pi = validate_pi(self.pi)
        return pi, transition_matrix(pi, self.lam)


@dataclass(frozen=True)
class OneCycleOptions(FigureOptions):
    """Options of a figure that follows one cycle of the population flow to a multiple of its
    predicted Stage-IV onset t_IV (focus-dilution-stages and -embedding-pca): default pi,
    lambda = 0.5, eps = 1e-3, 3 seeds. --quick: one seed, 800 saved times."""

    flow: Annotated[FlowSetting, Flat] = FlowSetting(seeds=3)
    """the population flow (synthetic experiment A)."""

    horizon: float = 1.6
    """integrate to this multiple of the predicted Stage-IV onset t_IV."""

    def __post_init__(self):
        check_horizon(self.horizon, "t_IV")

    def sizes(self) -> tuple[int, int]:
        """Seeds and saved times of the run (--quick: 1 and 800)."""
        return self.quick_or("flow.seeds", 1), self.quick_or("flow.samples", 800)


def flow_seconds(data: xr.Dataset) -> dict[str, float]:
    """The seconds a ``solve_flow`` call spent compiling (tracing included) and solving, as
    summary entries (``stagewise``'s benchmark sums every ``*_compile_seconds``)."""
    return {
        "flow_compile_seconds": float(data.attrs["compile_seconds"]),
        "flow_run_seconds": float(data.attrs["run_seconds"]),
    }


def solve_setting(
    setting: FlowSetting, pi, P, t_max: float, n_seeds: int, samples: int
) -> xr.Dataset:
    """The population flow of ``setting`` from its first ``n_seeds`` seeds at eps, saved at
    ``samples`` log-spaced times up to ``t_max``."""
    return solve_flow(
        pi,
        P,
        [setting.eps] * n_seeds,
        setting.seed_ids[:n_seeds],
        time_grid(t_max, samples),
        m=setting.width,
        m_k=setting.key_width,
    )


# --- verdicts (issue 16): the tolerance of each kind of prediction, with its reason ---------------
ONSET_TOLERANCE = 0.3
ONSET_RULE = (
    "onset by the summary's onset_rules against the leading order in ln(1/eps) (spec §5.2-5.5), "
    "whose O(1) terms are not predicted: the initial size eps sqrt(2m) alone (spec §5.2) shifts "
    "ln(1/size) by ln sqrt(2m) = 1.7 against ln(1/eps) = 6.9 (25%) at eps = 1e-3, m = 16; so 30%"
)
OFFSET_ONSET_TOLERANCE = 0.1
OFFSET_ONSET_RULE = (
    "onset by the summary's onset_rules against the onset with its O(1) offsets from the run's "
    "initial parameters (simulate.focus_dilution.predictions.OFFSET_RULE; nothing fitted); 10%, "
    "the target of issue 17 (the offsets were derived on the default pi, pi = (0.7, 0.1, 0.1, "
    "0.1) held out)"
)
RATE_TOLERANCE = 0.05
RATE_RULE = (
    "slope of ln y over the summary's rate_rule window against the linearisation's rate; 5%, "
    "the accuracy the verification claims for the rate fits (docs/focus_dilution_verification.md)"
)
PLATEAU_TOLERANCE = 0.01
PLATEAU_RULE = (
    "measured plateau by the summary's plateau rule (ln d: the loss at t = 0; the others: the "
    "flattest loss between two onsets) against the loss at the critical point the flow passes "
    "(exact); 1%, as the figures' tests assert"
)
PLATEAUS = (("ln_d", "ln d"), ("H_pi", "H(pi)"), ("L_IV", "L_IV (Stage-IV rest point)"))
"""the plateau levels a run leaves, in the order of ``simulate.focus_dilution.measure.plateaus``:
summary key and name."""


def onset_predictions(
    predicted, measured, where: str, time: str = "gradient-flow time"
) -> list[Prediction]:
    """Rows t_I ... t_IV: the predicted onsets beside the measured ones (``where`` names the run,
    e.g. ``", seed 0"``)."""
    return [
        Prediction(
            f"onset t_{stage}{where} ({time})", float(p), float(m), ONSET_TOLERANCE, ONSET_RULE
        )
        for stage, p, m in zip(STAGES, predicted, measured)
    ]


def offset_onset_predictions(
    predicted, measured, where: str, time: str = "gradient-flow time"
) -> list[Prediction]:
    """Rows t_I ... t_IV (offsets): the onsets with their offsets for one run beside its measured
    onsets (``where`` names the run, e.g. ``", seed 0"``)."""
    return [
        Prediction(
            f"onset t_{stage} with offsets{where} ({time})",
            float(p),
            float(m),
            OFFSET_ONSET_TOLERANCE,
            OFFSET_ONSET_RULE,
        )
        for stage, p, m in zip(STAGES, predicted, measured)
    ]


def plateau_predictions(predicted: dict, measured, where: str) -> list[Prediction]:
    """Rows ln d, H(pi), L_IV: the predicted loss levels (``predicted``, keyed as in
    ``PLATEAUS``) beside the measured plateaus, in that order."""
    return [
        Prediction(
            f"plateau {name}{where} (nats)",
            float(predicted[key]),
            float(m),
            PLATEAU_TOLERANCE,
            PLATEAU_RULE,
        )
        for (key, name), m in zip(PLATEAUS, measured)
    ]
