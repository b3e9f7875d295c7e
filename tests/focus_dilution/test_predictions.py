"""The predictions the focus-dilution figures put beside their measurements (issue 16): each
figure's rows pick the summary's predicted and measured numbers, and the verdict follows from the
tolerance it declares. The summaries have the shape of each figure's compute, with the predicted
numbers from the theory's closed forms (``theory.focus_dilution``) and measured numbers placed
inside, outside or missing from the tolerance; every test runs on the summary as compute returns
it (numpy) and as summary.json stores it (nan as "nan"). The figures run in full in
test_figures.py (slow)."""

import importlib
import json
import math
import pkgutil

import numpy as np
import pytest

import figures.focus_dilution
from figures.core.verdicts import no_predictions
from figures.focus_dilution import (
    common,
    compare,
    embedding_pca,
    entropy_cycles,
    same_pi,
    stages,
    symmetry_breaking,
    timing,
)
from simulate.store import jsonable
from theory.focus_dilution.manifold import predicted_stage_times, redistribution_response
from theory.focus_dilution.population import transition_matrix
from theory.focus_dilution.stages import (
    entropy,
    second_critical_point,
    stage_one_rate,
    stage_two_rate,
)

PI = np.array([0.75, 0.19, 0.05, 0.01])
P = transition_matrix(PI, 0.5)
EPS = 1e-3
IN, OUT, MISSING = "agrees", "disagrees", "not measured"
NAN = float("nan")


def _predicted(P=P, seeds: int = 1) -> dict:
    """``simulate.focus_dilution.predictions.predictions`` from the closed forms; mu_IV, L_IV,
    the Stage-III delay and the onsets with offsets need the reduced flow (diffrax compiles), so
    they are stand-ins distinct from every other number (the rows' choice of number is under
    test, not the theory)."""
    sigma, c = stage_one_rate(PI), stage_two_rate(PI, P)
    mu_IV, delay = sigma * c, 2.0
    times = predicted_stage_times(PI, P, EPS, mu_IV)
    onsets = [times.t_I, times.t_II, times.t_II + delay, times.t_IV]
    H = float(entropy(PI))
    return {
        "sigma": sigma,
        "c": c,
        "two_c": 2 * c,
        "mu_IV": mu_IV,
        "g": float(second_critical_point(PI).g),
        "ln_d": math.log(PI.size),
        "H_pi": H,
        "L_IV": 0.9 * H,
        "onsets": onsets,
        "stage_three_delay": delay,
        "onsets_offset_per_seed": np.array(
            [[0.87 * t + 0.01 * s for t in onsets] for s in range(seeds)]
        ),
    }


def _measured(predicted, tolerance: float, verdicts, scale: str = "ratio") -> np.ndarray:
    """Measured numbers that sit half the tolerance off ``predicted`` (IN), twice (OUT) or are
    missing (MISSING)."""
    out = []
    for p, v in zip(predicted, verdicts):
        off = {IN: 0.5, OUT: 2.0, MISSING: NAN}[v] * tolerance
        out.append(p * (1 + off) if scale == "ratio" else p + off)
    return np.asarray(out)


def _expect(predicted, tolerance: float, verdicts, scale: str = "ratio") -> list[tuple]:
    measured = _measured(predicted, tolerance, verdicts, scale)
    return list(zip(np.asarray(predicted, float), measured, verdicts))


def _stored(summary: dict) -> dict:
    """The summary as summary.json holds it."""
    return json.loads(json.dumps(jsonable(summary)))


@pytest.fixture(params=["as computed", "as stored"])
def form(request):
    return (lambda s: s) if request.param == "as computed" else _stored


def _check(rows, expected: list[tuple]) -> None:
    """Each row's predicted and measured number and its verdict, in order."""
    got = [(r.row()["predicted"], r.row()["measured"], r.verdict()) for r in rows]
    assert len(got) == len(expected)
    for (p, m, v), (ep, em, ev) in zip(got, expected):
        assert p == pytest.approx(ep, rel=1e-12)
        assert m == pytest.approx(em, rel=1e-12, nan_ok=True)
        assert v == ev


# ---- one test per figure ------------------------------------------------------------------------
def test_stages_rows_are_onsets_rates_plateaus_and_g_per_seed(form):
    pred = _predicted()
    rates = ("sigma", "c", "mu_IV")
    levels = [pred[k] for k, _ in common.PLATEAUS]
    plan = {  # per seed: onset, rate, plateau and g verdicts
        0: ([IN, OUT, IN, MISSING], [MISSING, IN, OUT], [IN, IN, OUT], [IN]),
        5: ([OUT, IN, IN, IN], [IN, IN, IN], [IN, OUT, IN], [OUT]),
    }
    summary = {"predicted": pred, "setting": {"seeds": list(plan)}}
    summary["onsets_per_seed"] = np.stack(
        [_measured(pred["onsets"], common.ONSET_TOLERANCE, v[0]) for v in plan.values()]
    )
    summary["rates_per_seed"] = [
        dict(zip(rates, _measured([pred[k] for k in rates], common.RATE_TOLERANCE, v[1])))
        for v in plan.values()
    ]
    summary["plateaus_per_seed"] = [
        _measured(levels, common.PLATEAU_TOLERANCE, v[2]).tolist() for v in plan.values()
    ]
    summary["g_measured_per_seed"] = [
        float(_measured([pred["g"]], stages.G_TOLERANCE, v[3])[0]) for v in plan.values()
    ]
    expected = []
    for v in plan.values():
        expected += _expect(pred["onsets"], common.ONSET_TOLERANCE, v[0])
        expected += _expect([pred[k] for k in rates], common.RATE_TOLERANCE, v[1])
        expected += _expect(levels, common.PLATEAU_TOLERANCE, v[2])
        expected += _expect([pred["g"]], stages.G_TOLERANCE, v[3])
    rows = stages.FIGURE.predictions(form(summary))
    _check(rows, expected)
    assert all("seed 5" in r.quantity for r in rows[11:])


def test_same_pi_rows_are_each_chains_onsets_and_the_stage_one_spread(form):
    chains = {"lazy lambda = 0.5": P, "lazy lambda = 0.8": transition_matrix(PI, 0.8)}
    plan = [[IN, IN, OUT, IN], [MISSING, IN, IN, OUT]]
    rows, expected = [], []
    for (name, chain), verdicts in zip(chains.items(), plan):
        pred = _predicted(chain)
        rows.append(
            {
                "chain": name,
                "c_P": pred["c"],
                "mu_IV": pred["mu_IV"],
                "predicted_onsets": pred["onsets"],
                "measured_onsets": _measured(pred["onsets"], common.ONSET_TOLERANCE, verdicts),
                "four_stages_in_order": MISSING not in verdicts,
            }
        )
        expected += _expect(pred["onsets"], common.ONSET_TOLERANCE, verdicts)
    t_I = rows[0]["predicted_onsets"][0]
    assert rows[1]["predicted_onsets"][0] == t_I  # sigma depends on pi only
    spread = _measured([0.0], same_pi.SPREAD_TOLERANCE, [OUT], "difference")[0]
    summary = {"rows": rows, "sigma": stage_one_rate(PI), "stage_one_spread": spread * t_I}
    expected.append((0.0, spread, OUT))
    _check(same_pi.FIGURE.predictions(form(summary)), expected)


def test_embedding_pca_rows_are_d_per_kappa_and_onsets_per_seed(form):
    pred = _predicted()
    k_D = redistribution_response(PI, P).D_per_kappa
    plan = {1: ([IN], [IN, IN, MISSING, OUT]), 2: ([OUT], [IN, IN, IN, IN])}
    summary = {
        "predicted": pred,
        "setting": {"seeds": list(plan)},
        "D_per_kappa_predicted": k_D,
        "D_per_kappa_measured_per_seed": [
            float(_measured([k_D], embedding_pca.D_TOLERANCE, v[0])[0]) for v in plan.values()
        ],
        "onsets_per_seed": np.stack(
            [_measured(pred["onsets"], common.ONSET_TOLERANCE, v[1]) for v in plan.values()]
        ),
    }
    expected = []
    for v in plan.values():
        expected += _expect([k_D], embedding_pca.D_TOLERANCE, v[0])
        expected += _expect(pred["onsets"], common.ONSET_TOLERANCE, v[1])
    _check(embedding_pca.FIGURE.predictions(form(summary)), expected)


def test_entropy_cycles_rows_are_the_first_cycles_onsets_per_seed(form):
    pred = _predicted()
    plan = {0: [IN, OUT, IN, IN], 1: [IN, IN, MISSING, IN]}
    summary = {
        "predicted": pred,
        "setting": {"seeds": list(plan)},
        "onsets_per_seed": np.stack(
            [_measured(pred["onsets"], common.ONSET_TOLERANCE, v) for v in plan.values()]
        ),
    }
    expected = [
        e for v in plan.values() for e in _expect(pred["onsets"], common.ONSET_TOLERANCE, v)
    ]
    _check(entropy_cycles.FIGURE.predictions(form(summary)), expected)


def test_timing_rows_are_the_slopes_each_eps_mean_rates_and_both_onset_predictions(form):
    sigma, c = stage_one_rate(PI), stage_two_rate(PI, P)
    slopes = [1 / sigma, 1 / sigma + 1 / c]
    slope_meas = _measured(slopes, timing.SLOPE_TOLERANCE, [IN, OUT])
    eps = [1e-2, 1e-2, 1e-4, 1e-4]  # two seeds per eps; the rows take each eps's mean
    plan = {"sigma": [MISSING, IN], "c": [OUT, IN]}  # eps = 1e-2, 1e-4
    means = {k: _measured([sigma if k == "sigma" else c] * 2, 0.05, v) for k, v in plan.items()}
    spread = np.array([0.99, 1.01, 0.99, 1.01])  # seeds about each eps's mean
    runs = [
        {k: float(means[k][0 if e == 1e-2 else 1] * s) for k in plan} for e, s in zip(eps, spread)
    ]
    # onsets per eps: the rows take each eps's mean over its seeds, leading order then offsets
    leading = {1e-2: np.array(_predicted()["onsets"]), 1e-4: 1.3 * np.array(_predicted()["onsets"])}
    offset = {e: 0.9 * leading[e] for e in leading}
    onset_plan = {1e-2: [IN, OUT, IN, MISSING], 1e-4: [OUT, IN, IN, IN]}  # against the offsets
    measured = {
        e: _measured(offset[e], common.OFFSET_ONSET_TOLERANCE, v) for e, v in onset_plan.items()
    }
    summary = {
        "sigma": sigma,
        "c": c,
        "slope_I": {"predicted": slopes[0], "measured": slope_meas[0]},
        "slope_II": {"predicted": slopes[1], "measured": slope_meas[1]},
        "rates_per_run": runs,
        "eps_per_run": eps,
        "onsets_per_run": np.stack([measured[e] * s for e, s in zip(eps, spread)]),
        "onsets_leading_per_run": np.stack([leading[e] for e in eps]),
        "onsets_offset_per_run": np.stack([offset[e] for e in eps]),
    }
    expected = _expect(slopes, timing.SLOPE_TOLERANCE, [IN, OUT])
    expected += _expect([sigma] * 2, common.RATE_TOLERANCE, plan["sigma"])
    expected += _expect([c] * 2, common.RATE_TOLERANCE, plan["c"])
    for e in (1e-2, 1e-4):
        lead, meas = leading[e], measured[e]  # the seeds' spread 0.99, 1.01 averages out
        expected += [
            (
                p,
                m,
                MISSING if np.isnan(m) else IN if abs(m / p - 1) <= common.ONSET_TOLERANCE else OUT,
            )
            for p, m in zip(lead, meas)
        ]
        expected += _expect(offset[e], common.OFFSET_ONSET_TOLERANCE, onset_plan[e])
    rows = timing.FIGURE.predictions(form(summary))
    _check(rows, expected)
    assert "eps = 0.01" in rows[2].quantity and "eps = 0.0001" in rows[3].quantity
    assert "with offsets" in rows[10].quantity and "with offsets" not in rows[6].quantity


def test_symmetry_breaking_rows_are_escape_rates_plateaus_k_delta_and_the_stall(form):
    deltas = [0.0, 0.01, 0.02]
    # stand-ins for mu_IV(delta) (0 at the stall) and its limit k_delta: they need the reduced
    # flow's rest point
    mu = [0.0, 0.07 * deltas[1], 0.08 * deltas[2]]
    L_IV = [0.61, 0.62, 0.63]
    rate_plan, plateau_plan = [OUT, IN], [IN, MISSING]
    rate = np.r_[NAN, _measured(mu[1:], common.RATE_TOLERANCE, rate_plan)]
    plateau = np.r_[L_IV[0], _measured(L_IV[1:], common.PLATEAU_TOLERANCE, plateau_plan)]
    rows = [
        {
            "delta": d,
            "mu_IV": m,
            "L_IV": L,
            "rate_measured": r,
            "rate_over_delta_measured": r / d if d else NAN,
            "plateau_measured": p,
        }
        for d, m, L, r, p in zip(deltas, mu, L_IV, rate, plateau)
    ]
    slope = _measured([0.0], symmetry_breaking.STALL_SLOPE_TOLERANCE, [IN], "difference")[0]
    loss = _measured([L_IV[0]], symmetry_breaking.STALL_LOSS_TOLERANCE, [OUT], "difference")[0]
    ratio = rate[1] / deltas[1]  # rate / delta at the smallest delta > 0
    k_delta = ratio / (1 + symmetry_breaking.K_DELTA_TOLERANCE / 2)  # IN
    summary = {
        "rows": rows,
        "k_delta": k_delta,
        "stall": {"slope": slope, "L_IV": L_IV[0], "loss_end": loss, "t_end": 5e4},
    }
    expected = []
    for k in (1, 2):
        expected += _expect([mu[k]], common.RATE_TOLERANCE, [rate_plan[k - 1]])
        expected += _expect([L_IV[k]], common.PLATEAU_TOLERANCE, [plateau_plan[k - 1]])
    expected.append((k_delta, ratio, IN))
    expected += [(0.0, slope, IN), (L_IV[0], loss, OUT)]
    _check(symmetry_breaking.FIGURE.predictions(form(summary)), expected)


def test_compare_rows_are_flow_and_gd_against_both_predictions_gd_against_flow_and_adam(form):
    pred = _predicted()
    levels = [pred[k] for k, _ in common.PLATEAUS]
    flow_on = _measured(pred["onsets"], common.ONSET_TOLERANCE, [IN, IN, OUT, IN])[None]
    flow_lv = _measured(levels, common.PLATEAU_TOLERANCE, [IN, IN, IN])[None]
    gd_plan = [IN, OUT, IN, MISSING]
    gd_on = _measured(flow_on[0], compare.SAME_INIT_TOLERANCE, gd_plan)[None]
    gd_lv = _measured(levels, common.PLATEAU_TOLERANCE, [IN, OUT, IN])[None]
    adam_lv = _measured(levels, common.PLATEAU_TOLERANCE, [IN, OUT, MISSING])
    summary = {
        "setting": {"seeds": [3]},
        "predicted": pred,
        "population_flow": {
            "rows": compare._rows(pred, flow_on, flow_lv),
            "onsets_per_seed": flow_on,
        },
        "finite_gd": {"rows": compare._rows(pred, gd_on, gd_lv), "onsets_per_seed": gd_on},
        "finite_adam": {"plateaus": adam_lv},
    }
    offset = pred["onsets_offset_per_seed"][0]

    def against(predicted, measured, tolerance):
        return [
            (p, m, MISSING if np.isnan(m) else IN if abs(m / p - 1) <= tolerance else OUT)
            for p, m in zip(predicted, measured)
        ]

    expected = _expect(pred["onsets"], common.ONSET_TOLERANCE, [IN, IN, OUT, IN])
    expected += against(offset, flow_on[0], common.OFFSET_ONSET_TOLERANCE)
    expected += _expect(levels, common.PLATEAU_TOLERANCE, [IN, IN, IN])
    expected += against(pred["onsets"], gd_on[0], common.ONSET_TOLERANCE)
    expected += against(offset, gd_on[0], common.OFFSET_ONSET_TOLERANCE)
    expected += _expect(levels, common.PLATEAU_TOLERANCE, [IN, OUT, IN])
    expected += _expect(flow_on[0], compare.SAME_INIT_TOLERANCE, gd_plan)
    expected += _expect(levels, common.PLATEAU_TOLERANCE, [IN, OUT, MISSING])
    _check(compare.FIGURE.predictions(form(summary)), expected)


def test_every_focus_dilution_figure_says_how_to_read_it_and_only_text_predicts_nothing():
    package = figures.focus_dilution
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if hasattr(module, "FIGURE"):
            found[module.FIGURE.id] = module.FIGURE
    assert len(found) == 8  # the seven figure ids of the spec and the comparison
    for figure in found.values():
        assert len(figure.how_to_read.split()) > 20, figure.id
    silent = {i for i, f in found.items() if f.predictions is no_predictions}
    assert silent == {"focus-dilution-text"}  # qualitative: no theory number beside a measurement


def test_runs_stored_before_the_offsets_keep_their_leading_order_rows():
    """compare and timing summaries made before issue 17 (no offsets): the report recomputes
    their rows without offset rows instead of failing."""
    pred = _predicted()
    del pred["onsets_offset_per_seed"]
    on = np.array([pred["onsets"]])
    levels = np.array([[pred[k] for k, _ in common.PLATEAUS]])
    table = [
        {"stage": st, "start_predicted": p, "start_measured": m, "level_measured": lv}
        for st, p, m, lv in zip(common.STAGES, pred["onsets"], on[0], [*levels[0], NAN])
    ]
    summary = {
        "setting": {"seeds": [0]},
        "predicted": pred,
        "population_flow": {"rows": table, "onsets_per_seed": on},
        "finite_gd": {"rows": table, "onsets_per_seed": on},
        "finite_adam": {"plateaus": levels[0]},
    }
    rows = compare.FIGURE.predictions(summary)
    assert len(rows) == 2 * (4 + 3) + 4 + 3
    assert not any("with offsets" in r.quantity for r in rows)
    sigma, c = stage_one_rate(PI), stage_two_rate(PI, P)
    old = {
        "sigma": sigma,
        "c": c,
        "slope_I": {"predicted": 1 / sigma, "measured": 1 / sigma},
        "slope_II": {"predicted": 1 / sigma + 1 / c, "measured": 1 / sigma + 1 / c},
        "rates_per_run": [{"sigma": sigma, "c": c}],
        "eps_per_run": [EPS],
        "onsets_per_run": on,
    }
    assert len(timing.FIGURE.predictions(old)) == 4
