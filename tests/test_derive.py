"""``stagewise derive PAPER``: every paper's derivation prints the theory's numbers, answers
``--latex`` with LaTeX, and rejects a bad value with one line."""

import math

import numpy as np
import pytest
import sympy as sp

from figures.cli import main
from figures.derive import SYSTEMS
from theory.clustering_head import symmetry
from theory.emergence import levels
from theory.focus_dilution.manifold import predicted_stage_times
from theory.focus_dilution.population import transition_matrix
from theory.focus_dilution.stages import (
    entropy,
    second_critical_point,
    stage_one_rate,
    stage_two_rate,
)
from theory.incremental.splitting import characteristic_polynomial, z
from theory.mean_field import energy


def _derive(capsys, *argv: str) -> str:
    assert main(["derive", *argv]) == 0
    return capsys.readouterr().out


def test_every_paper_has_a_derivation():
    assert {"incremental", "focus-dilution", "clustering-head", "emergence", "mean-field"} <= set(
        SYSTEMS
    )


def test_incremental_prints_the_optimizers_split_polynomials(capsys):
    out = _derive(capsys, "incremental")
    for momentum in ("ema", "heavy_ball"):
        poly = sp.collect(characteristic_polynomial(momentum), z)
        assert str(poly) in out
    assert "AdamW" in out and "SGD with momentum" in out


def test_focus_dilution_prints_rates_plateaus_and_onset_slopes(capsys):
    pi, lam, eps = (0.7, 0.2, 0.1), 0.4, 1e-2
    out = _derive(
        capsys, "focus-dilution", "--pi", *map(str, pi), "--lam", str(lam), "--eps", "0.01"
    )
    P = transition_matrix(np.array(pi), lam)
    sigma, c = float(stage_one_rate(pi)), float(stage_two_rate(pi, P))
    per_log = predicted_stage_times(pi, P, math.exp(-1), 0.0)
    times = predicted_stage_times(pi, P, eps, 0.0)
    for value in (
        math.log(len(pi)),
        float(entropy(pi)),
        sigma,
        c,
        2 * c,
        float(second_critical_point(pi).g),
        per_log.t_I,
        per_log.t_II,
        times.t_I,
        times.t_II,
    ):
        assert f"{value:.6g}" in out, value
    assert "mu_IV = " in out and "Stage IV" in out


def test_clustering_head_prints_the_symmetric_subspace(capsys):
    out = _derive(capsys, "clustering-head", "--length", "6", "--sparsity", "3", "--modulus", "3")
    assert f"|G| = k! (L - k)! = {symmetry.group_order(6, 3)}" in out
    assert f"dim S = {symmetry.subspace_dimension(6, 3, 2)}" in out
    assert f"= {symmetry.cluster_count(3, 3)}" in out
    assert symmetry.STATIONARITY in out
    assert "Pi^2 = Pi: True" in out and "for every generator g: True" in out


def test_emergence_prints_floor_steps_search_space_and_bias(capsys):
    out = _derive(capsys, "emergence", "--S", "10", "--n", "3", "--s", "2", "--heads", "4")
    at = {levels.S: 10, levels.n: 3}
    assert f"{float(levels.linear_map_floor_expr().subs(at)):.6g}" in out
    assert f"{float(levels.step_height_expr().subs(at)):.6g}" in out
    assert f"{levels.search_space_log(10, 2):.6g}" in out
    assert f"s = {', '.join(map(str, levels.hardest_sparsities(10)))}" in out
    mass = levels.bias_mass_expr().subs({levels.c: 2.0, levels.s: 2, levels.keys: 10})
    assert f"{float(mass):.6g}" in out


def test_mean_field_prints_thresholds_rates_and_landau(capsys):
    beta, tau = 3.0, 0.5
    out = _derive(capsys, "mean-field", "--beta", "3", "--tau", "0.5", "--dim", "3")
    for value in (
        energy.tau_c(beta),
        energy.tau_c(beta, 3),
        energy.mode_rate(1, beta, tau),
        energy.sphere_mode_rate(1, 3, beta, tau),
        energy.landau_amplitude(beta),
        energy.tricritical_beta(),
    ):
        assert f"{value:.6g}" in out, value
    assert "discontinuous" in out  # beta = 3 > beta_*


@pytest.mark.parametrize("paper", ["focus-dilution", "clustering-head", "emergence", "mean-field"])
def test_latex(paper, capsys):
    out = _derive(capsys, paper, "--latex")
    assert any(cmd in out for cmd in (r"\frac", r"\sqrt", r"\log", r"\operatorname", r"\left"))


@pytest.mark.parametrize(
    "argv,field",
    [
        (["focus-dilution", "--pi", "0.5", "0.6"], "pi"),
        (["focus-dilution", "--lam", "1.5"], "lam"),
        (["clustering-head", "--sparsity", "20"], "sparsity"),
        (["emergence", "--s", "0"], "s"),
        (["mean-field", "--beta", "-1"], "beta"),
    ],
)
def test_bad_value_is_one_line(argv, field, capsys):
    assert main(["derive", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"stagewise: error: {field} = ")


@pytest.mark.parametrize(
    "argv,field",
    [
        (["incremental", "--window", "1000"], "window"),
        (["incremental", "--heads", "1000000"], "heads"),
        (["incremental", "--blocks", *["1"] * 9], "blocks"),
        (["clustering-head", "--length", "2147483648"], "length"),
        (["emergence", "--S", "100000"], "S"),
        (["mean-field", "--modes", "4294967296"], "modes"),
    ],
)
def test_derivation_sizes_the_algebra_cannot_take_are_one_line(argv, field, capsys):
    """Sizes the fuzz found hanging or crashing the symbolic derivations are refused up front."""
    assert main(["derive", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stagewise: error: {field} = ")
