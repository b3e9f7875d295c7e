"""The experiment ``mean-field`` (``simulate.mean_field.training``): the flow of one config,
its gradient, float32 against float64, training through the run store, bad input, and the
control-profile statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simulate.mean_field import training as mft
from simulate.mean_field.measure import fit_rate
from simulate.runner import RunOutput
from simulate.store import load, read_summary
from simulate.train import seed_streams
from theory.mean_field import energy as mf
from theory.validation import ConfigError


def _keys(seed=0):
    s = seed_streams([seed])
    return jnp.stack([s["init"][0], s["noise"][0]])


def test_energy_decreases_along_the_untrained_flow_within_noise():
    cfg = mft.MeanFieldConfig(tokens=512, dt=0.0625, save_every=4, float64=True)
    flow = mft.Flow(cfg)
    F = np.asarray(flow.observe_flow(jnp.zeros((cfg.bins, 2, 5)), _keys())["energy"])
    decrease = F[0] - F.min()
    assert decrease > 0.3
    assert np.max(np.diff(F)) < 0.03 * decrease  # KDE/finite-N noise only
    assert F[-1] < F[0] - 0.9 * decrease


@pytest.fixture(scope="module")
def small_flow():
    cfg = mft.MeanFieldConfig(tokens=32, dt=0.0625, save_every=4, float64=True, noise="fixed")
    return cfg, mft.Flow(cfg)


def test_gradient_equals_a_finite_difference_with_fixed_noise(small_flow):
    cfg, flow = small_flow
    key = jax.random.PRNGKey(5)
    W = 0.3 * jax.random.normal(key, (cfg.bins, 2, 5))
    D = jax.random.normal(jax.random.fold_in(key, 1), W.shape)
    keys = _keys(1)

    def J(w):
        return flow.objective(w, keys, 0.1)[0]

    grad = jax.grad(J)(W)
    h = 1e-5
    fd = (J(W + h * D) - J(W - h * D)) / (2 * h)
    assert float(jnp.sum(grad * D)) == pytest.approx(float(fd), rel=1e-6)
    # the terminal gradient at W = 0 is largest near the output (turnpike, spec §5.5 (i))
    g0 = np.linalg.norm(np.asarray(jax.grad(flow.terminal_loss)(0 * W, keys)), axis=(1, 2))
    assert g0[-1] == g0.max()


def test_float32_agrees_with_float64():
    base = {"tokens": 128, "dt": 0.0625, "save_every": 4}
    W = 0.2 * jax.random.normal(jax.random.PRNGKey(2), (32, 2, 5))
    keys = _keys(2)
    G = [
        float(mft.Flow(mft.MeanFieldConfig(**base, float64=f)).terminal_loss(W, keys))
        for f in (False, True)
    ]
    assert G[0] == pytest.approx(G[1], abs=1e-3)


# ---- simulate: the experiment --------------------------------------------------------------------


def test_experiment_trains_through_the_run_store(tmp_path):
    cfg = mft.MeanFieldConfig(
        tokens=32,
        dt=0.125,
        bins=16,
        save_every=8,
        lambdas=(1e-2, 10.0),
        noise="fixed",
        steps=40,
        chunk=20,
        log_every=20,
        seeds=2,
    )
    out = mft.run(cfg, RunOutput(out=tmp_path / "run", quiet=True))
    assert not isinstance(out, mft.TrainResult)
    ds, config = load(out)
    assert config["experiment"] == "mean-field"
    assert ds["J"].dims == ("seed", "step", "lam") and ds.sizes["depth"] == 9
    J = ds["J"].values
    assert np.all(J[:, -1] < J[:, 0])  # Adam lowered J (fixed draw) for every seed and lambda
    assert np.all(ds["W"].values[:, 0] == 0)  # step 0 is the untrained flow
    summary = read_summary(out)
    assert summary["status"] == "complete"
    per = summary["per_lambda"]
    assert per["0.01"]["escape"] > per["10"]["escape"] > 0


def test_bad_configuration_fails_with_one_line():
    with pytest.raises(ConfigError, match="lambdas"):
        mft.MeanFieldConfig(lambdas=(-1.0,))
    with pytest.raises(ConfigError, match="bins"):
        mft.MeanFieldConfig(bins=33)
    with pytest.raises(ConfigError, match="beta"):
        mf.tau_c(-1.0)


def test_profile_statistics_of_a_terminal_layer():
    depth, kappa = 8.0, 2.0
    t = (np.arange(64) + 0.5) * depth / 64
    norms = np.exp(-kappa * (depth - t))
    stats = mft.profile_summary(norms, depth)
    assert stats["peak_depth"] == pytest.approx(t[-1])
    assert stats["last_quarter_share"] > 0.99 and stats["first_quarter_share"] < 1e-6
    assert stats["width90"] == pytest.approx(np.log(10) / (2 * kappa), rel=0.1)
    assert fit_rate(t, norms, depth, 2.0) == pytest.approx(kappa)
