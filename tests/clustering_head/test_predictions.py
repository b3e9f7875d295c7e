"""The clustering-head figures' predictions beside measurements (issue 16): each figure's rows pick
the predicted and measured numbers of its own summary, and the verdict follows the declared
tolerance. Summaries come from the simulate/theory functions the figures' compute uses, at tiny
size (no training)."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from figures.clustering_head import (
    ablations,
    attention,
    finetune,
    fixed_point,
    loss_spike,
    sandbox,
)
from figures.core.verdicts import no_predictions, prediction_rows
from simulate.clustering_head.model import ClusteringHead, ideal_positions
from simulate.clustering_head.spikes import fractions, rule_text, spike_table
from simulate.clustering_head.training import ADAM_B1, SUCCESS_ACCURACY
from simulate.measure.spikes import SpikeRule, stability_threshold
from simulate.store import jsonable
from theory.clustering_head.symmetry import symmetry_defect

MODULES = (ablations, attention, finetune, fixed_point, loss_spike, sandbox)
L, K = 12, 5


def _follows_tolerance(row) -> bool:
    """Every clustering-head row is on the difference scale."""
    off = abs(row.measured - row.predicted)
    return row.scale == "difference" and row.verdict() == (
        "agrees" if off <= row.tolerance else "disagrees"
    )


def _same_rows_from_json(figure, summary) -> bool:
    """The rows from the summary as summary.json stores it (NaN as "nan"), as ``store_verdicts``
    recomputes them, equal the rows from the summary in memory."""
    stored = json.loads(json.dumps(jsonable(summary)))
    rows = jsonable(prediction_rows(figure.predictions(summary)))
    return jsonable(prediction_rows(figure.predictions(stored))) == rows


def test_every_clustering_head_figure_says_how_to_read_it():
    for module in MODULES:
        assert module.FIGURE.how_to_read.strip(), module.FIGURE.id


def test_ablations_predict_nothing():
    # the spec gives no closed-form prediction for the sweeps; 2/lr is only an axis
    assert ablations.FIGURE.predictions is no_predictions


def _attention_summary(initial, final, accuracy) -> dict:
    success = np.asarray(accuracy) > SUCCESS_ACCURACY
    return {
        "epochs": 200,
        "seeds": len(success),
        "sparsity": K,
        "length": L,
        "uniform_mass": K / L,
        "clustering_head_mass": 1.0,
        "success_per_seed": success.tolist(),
        "initial_mass_per_seed": np.asarray(initial),
        "mean_final_mass_successful": float(np.asarray(final)[success].mean())
        if success.any()
        else float("nan"),
    }


def test_attention_puts_k_over_l_at_init_and_one_at_the_end_beside_the_seeds_mass():
    summary = _attention_summary([0.40, 0.45, 0.38], [0.97, 0.55, 0.62], [0.99, 0.5, 0.99])
    start, end = attention.FIGURE.predictions(summary)
    assert start.predicted == summary["uniform_mass"]
    assert start.measured == pytest.approx(np.mean(summary["initial_mass_per_seed"]))
    assert end.predicted == summary["clustering_head_mass"]
    assert end.measured == summary["mean_final_mass_successful"]
    assert start.verdict() == "agrees" and end.verdict() == "disagrees"  # (0.97 + 0.62) / 2
    assert all(_follows_tolerance(r) for r in (start, end))
    failed = _attention_summary([0.4], [0.9], [0.5])
    assert attention.FIGURE.predictions(failed)[1].verdict() == "not measured"
    assert _same_rows_from_json(attention.FIGURE, failed)


def test_fixed_point_compares_the_population_defect_with_round_off_and_a_k_with_one():
    symmetric = np.asarray(ideal_positions(L, K), float)
    broken = symmetric + 1e-4 * np.random.default_rng(0).normal(size=symmetric.shape)
    defects = {
        "population": symmetry_defect(symmetric, K),
        "train-full-batch": symmetry_defect(broken, K),
        "minibatch": symmetry_defect(broken, K),
    }
    mass = {"population": 0.95, "train-full-batch": 0.7, "minibatch": 0.92}
    summary = {
        "rows": [
            {"run": r, "max_defect": defects[r], "final_attention_mass": mass[r], "steps": 300}
            for r in fixed_point.RUNS
        ],
        "roundoff_level": fixed_point.ROUNDOFF,
        "clustering_head_mass": fixed_point.CLUSTERING_HEAD_MASS,
    }
    defect, *heads = fixed_point.FIGURE.predictions(summary)
    assert (defect.predicted, defect.measured) == (0.0, defects["population"])
    assert defect.tolerance == summary["roundoff_level"] and defect.verdict() == "agrees"
    assert [h.measured for h in heads] == [mass[r] for r in fixed_point.RUNS]
    assert all(h.predicted == summary["clustering_head_mass"] for h in heads)
    assert [h.verdict() for h in heads] == ["agrees", "disagrees", "agrees"]
    summary["rows"][0]["max_defect"] = defects["train-full-batch"]  # (i) off S: disagrees
    assert fixed_point.FIGURE.predictions(summary)[0].verdict() == "disagrees"


def _finetune_summary(tuned, scratch) -> dict:
    rates = {
        arm: float((np.asarray(acc) > SUCCESS_ACCURACY).mean())
        for arm, acc in (("finetune", tuned), ("scratch", scratch))
    }
    return {
        "seeds": len(tuned),
        "epochs": 100,
        "finetune_success_rate": rates["finetune"],
        "scratch_success_rate": rates["scratch"],
    }


def test_finetune_row_is_the_shortfall_of_fine_tuning_below_scratch():
    better = _finetune_summary([0.99, 0.99, 0.5, 0.6], [0.99, 0.4, 0.5, 0.6])
    (row,) = finetune.FIGURE.predictions(better)
    # fine-tuning succeeding more often than scratch meets "at least as often": no shortfall
    assert (row.predicted, row.measured, row.verdict()) == (0.0, 0.0, "agrees")
    worse = _finetune_summary([0.5, 0.5, 0.5, 0.99], [0.99, 0.99, 0.99, 0.4])
    (row,) = finetune.FIGURE.predictions(worse)
    assert row.measured == pytest.approx(
        worse["scratch_success_rate"] - worse["finetune_success_rate"]
    )
    assert row.verdict() == "disagrees" and _follows_tolerance(row)


def _spike_summary(series: dict, lr: float) -> dict:
    rule = SpikeRule()
    spikes = spike_table(series, rule, lr)
    return {
        **rule_text(rule),
        "seeds": len(series["train_loss"]),
        "adam_threshold": stability_threshold(lr, ADAM_B1),
        "spike_count": len(spikes),
        "spikes": spikes,
        "coincidence_fractions": fractions(spikes),
    }


def test_loss_spike_rows_are_the_coincidence_fractions_of_the_spikes():
    epochs, lr = 60, 0.01
    loss = np.exp(-0.05 * np.arange(epochs))[None].repeat(2, 0)
    loss[0, 40:] *= 10.0  # seed 0: a spike at 40 with every coincidence
    loss[1, 30:] *= 10.0  # seed 1: a spike at 30 with a gradient burst only
    series = {
        name: np.ones((2, epochs))
        for name in (
            "gradient_norm",
            "min_embedding_norm",
            "curvature_bound",
            "hessian_top",
            "preconditioned_sharpness",
        )
    }
    series["train_loss"] = loss
    series["preconditioned_sharpness"][:, 0] = np.nan  # not logged at epoch 0
    series["min_embedding_norm"][0, 39] = 0.1
    series["gradient_norm"][0, 40] = series["gradient_norm"][1, 30] = 5.0
    series["preconditioned_sharpness"][0, 40] = 2 * stability_threshold(lr, ADAM_B1)
    summary = _spike_summary(series, lr)
    rows = loss_spike.FIGURE.predictions(summary)
    measured = [summary["coincidence_fractions"][f] for f in loss_spike.COINCIDENCES]
    assert [r.measured for r in rows[:-1]] == measured
    assert rows[-1].measured == 0.5  # one of the two spikes is above 38/lr
    assert all(r.predicted == 1.0 for r in rows)
    assert [r.verdict() for r in rows] == ["agrees", "disagrees", "disagrees", "disagrees"]
    assert all(_follows_tolerance(r) for r in rows)
    assert _same_rows_from_json(loss_spike.FIGURE, summary)
    calm = _spike_summary({**series, "train_loss": np.exp(-0.05 * np.arange(epochs))[None]}, lr)
    assert {r.verdict() for r in loss_spike.FIGURE.predictions(calm)} == {"not measured"}


def _first_block_head(query: float) -> ClusteringHead:
    """Equal first-block scores for both tokens: query +50 attends 1/k to t <= k (the §5.1 head),
    query -50 to the distractors only."""
    return ClusteringHead(
        token=jnp.array([[0.3, 0.0], [-0.3, 0.0], [0.0, 0.5]]),
        position=ideal_positions(L, K),
        query=jnp.array([0.0, query]),
        value=jnp.array([[1.0, 0.4], [-0.2, 0.8]]),
        w1=jnp.zeros((4, 2)),
        b1=jnp.zeros(4),
        w2=jnp.zeros((2, 4)),
        b2=jnp.zeros(2),
    )


def test_sandbox_rows_put_each_histogram_at_its_segment_fraction():
    train = np.random.default_rng(0).integers(0, 2, (512, L))
    base = {"sparsity": K, "epochs": 200, "seed": 6}
    segment = sandbox.cluster_segment(_first_block_head(50.0), train, K)
    rows = sandbox.FIGURE.predictions(base | segment)
    assert len(rows) == K + 2
    assert [r.predicted for r in rows[:-1]] == segment["cluster_fraction_predicted"]
    assert [r.measured for r in rows[:-1]] == segment["cluster_fraction_measured"]
    assert rows[-1].measured == max(segment["cluster_offset_measured"])
    # the ideal head puts every histogram on its §5.1 position
    assert {r.verdict() for r in rows} == {"agrees"}
    # attention on the distractors only: xi ignores the histogram, the clusters do not spread
    away = base | sandbox.cluster_segment(_first_block_head(-50.0), train, K)
    rows = sandbox.FIGURE.predictions(away)
    assert "disagrees" in {r.verdict() for r in rows} and all(_follows_tolerance(r) for r in rows)
    assert _same_rows_from_json(sandbox.FIGURE, away)
    assert sandbox.FIGURE.predictions(base) == []  # p != 2: no segment geometry
