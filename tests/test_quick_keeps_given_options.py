"""--quick changes only the options left at their defaults (issue 14 item 3): an option given on
the command line keeps its value under --quick. Checked through the config objects (no training):
each case gives one option a value that the figure's quick setting would otherwise replace and
reads it back through the method the figure's compute uses."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from figures.clustering_head import ablations, attention, finetune, fixed_point, loss_spike, sandbox
from figures.core.options import FigureOptions
from figures.emergence import ca_plateau, heads_vs_dim, linear_map, mixer, sparsity, times
from figures.focus_dilution import compare as focus_compare
from figures.focus_dilution import (
    embedding_pca,
    entropy_cycles,
    same_pi,
    stages,
    symmetry_breaking,
    text,
)
from figures.focus_dilution import timing as focus_timing
from figures.incremental import compare as incremental_compare
from figures.incremental import dataset_size, full, head_dynamics, init_scale, minimal, ode
from figures.incremental import timing as incremental_timing
from figures.mean_field import density, escape, threshold
from simulate.runner import Seeds


def test_compare_incremental_quick_keeps_given_seeds():
    config = incremental_compare.FIGURE.config
    assert config(quick=True, flow=Seeds(seeds=5)).regression("positional").seeds == 5
    assert config(quick=True).regression("positional").seeds == 2


def _quick(module, **given):
    """The figure's config under --quick with the options ``given``."""
    return module.FIGURE.config(quick=True, **given)


def _nested(module, field: str, **changes):
    """The figure's default nested config ``field`` with ``changes`` (options given)."""
    return replace(getattr(module.FIGURE.config(), field), **changes)


CASES = {
    # focus-dilution
    "compare-focus-dilution seeds": (
        lambda: _quick(focus_compare, train=_nested(focus_compare, "train", seeds=2)),
        lambda c: c.finite("gd", 30.0).seeds,
        2,
    ),
    "compare-focus-dilution adam_steps": (
        lambda: _quick(focus_compare, adam_steps=2000),
        lambda c: c.finite("adam", 30.0).steps,
        2000,
    ),
    "focus-dilution-text steps": (
        lambda: _quick(text, train=_nested(text, "train", steps=1000)),
        lambda c: c.training().steps,
        1000,
    ),
    "focus-dilution-same-pi lambdas": (
        lambda: _quick(same_pi, lambdas=(0.3, 0.6)),
        lambda c: [name for name in c.chains() if name.startswith("lazy")],
        ["lazy lambda = 0.3", "lazy lambda = 0.6"],
    ),
    "focus-dilution-same-pi mh_chains": (
        lambda: _quick(same_pi, mh_chains=3),
        lambda c: sum(name.startswith("MH") for name in c.chains()),
        3,
    ),
    "focus-dilution-same-pi samples": (
        lambda: _quick(same_pi, flow=_nested(same_pi, "flow", samples=900)),
        lambda c: c.sizes()[1],
        900,
    ),
    "focus-dilution-stages seeds": (
        lambda: _quick(stages, flow=_nested(stages, "flow", seeds=2)),
        lambda c: c.sizes(),
        (2, 800),
    ),
    "focus-dilution-embedding-pca samples": (
        lambda: _quick(embedding_pca, flow=_nested(embedding_pca, "flow", samples=900)),
        lambda c: c.sizes(),
        (1, 900),
    ),
    "focus-dilution-entropy-cycles t_max": (
        lambda: _quick(entropy_cycles, t_max=2000.0),
        lambda c: c.sizes(),
        (1, 1000, 2000.0),
    ),
    "focus-dilution-symmetry-breaking deltas": (
        lambda: _quick(symmetry_breaking, deltas=(0.0, 0.03)),
        lambda c: c.grid(),
        ((0.0, 0.03), 1, 600),
    ),
    "focus-dilution-timing seeds": (
        lambda: _quick(focus_timing, flow=_nested(focus_timing, "flow", seeds=2)),
        lambda c: c.grid(),
        ((1e-2, 1e-4, 1e-6), 2, 1200),
    ),
    # emergence
    "emergence-times lr": (
        lambda: _quick(times, train=_nested(times, "train", lr=1e-2)),
        lambda c: {t.lr for t in c.trainings().values()},
        {1e-2},
    ),
    "emergence-times head_counts": (
        lambda: _quick(times, head_counts=(1, 3)),
        lambda c: c.head_sweep(),
        [(6, 1), (6, 3)],
    ),
    "emergence-times sizes": (
        lambda: _quick(times, sizes=(8,)),
        lambda c: c.size_sweep(),
        [(8, 8)],
    ),
    "emergence-heads-vs-dim fixed_width": (
        lambda: _quick(heads_vs_dim, fixed_width=16),
        lambda c: [k for k in c.sweeps() if k.startswith("fixed")],
        ["fixed width 16"],
    ),
    "emergence-heads-vs-dim steps": (
        lambda: _quick(heads_vs_dim, train=_nested(heads_vs_dim, "train", steps=1000)),
        lambda c: {t.steps for t in c.trainings().values()},
        {1000},
    ),
    "emergence-linear-map seeds": (
        lambda: _quick(linear_map, train=_nested(linear_map, "train", seeds=4)),
        lambda c: c.training().seeds,
        4,
    ),
    "emergence-mixer sparsities": (
        lambda: _quick(mixer, sparsities=(3, 5)),
        lambda c: sorted({s for _, s in c.trainings()}),
        [3, 5],
    ),
    "emergence-sparsity sizes": (
        lambda: _quick(sparsity, sizes=(4,)),
        lambda c: sorted(c.trainings()),
        [(4, 1), (4, 2), (4, 3), (4, 4)],
    ),
    "emergence-ca-plateau tokens": (
        lambda: _quick(ca_plateau, tokens=2560),
        lambda c: c.trainings()[4, 0.0].batch,
        2560 // (4 * 5),
    ),
    # incremental
    "incremental-minimal steps": (
        lambda: _quick(minimal, train=_nested(minimal, "train", steps=1200)),
        lambda c: c.training().steps,
        1200,
    ),
    "incremental-minimal map_steps": (
        lambda: _quick(minimal, map_steps=(0, 100)),
        lambda c: c.maps_at(),
        (0, 100),
    ),
    "incremental-ode seeds": (
        lambda: _quick(ode, seeds=3),
        lambda c: c.noise_seeds,
        3,
    ),
    "incremental-timing m": (
        lambda: _quick(incremental_timing, m=(1.3,)),
        lambda c: c.grid()[0],
        (1.3,),
    ),
    "incremental-timing training seeds": (
        lambda: _quick(incremental_timing, train=_nested(incremental_timing, "train", seeds=2)),
        lambda c: (c.training_grid().seeds, c.training_grid().q),
        (2, (1e-3, 1e-7)),
    ),
    "incremental-full baseline_steps": (
        lambda: _quick(full, baseline_steps=200),
        lambda c: c.baseline_training().steps,
        200,
    ),
    "incremental-full map_steps": (
        lambda: _quick(full, map_steps=(0, 10)),
        lambda c: c.drawn_map_steps(),
        (0, 10),
    ),
    "incremental-dataset-size sizes": (
        lambda: _quick(dataset_size, sizes=(100,)),
        lambda c: c.settings()["sizes"],
        (100,),
    ),
    "incremental-dataset-size online_batch": (
        lambda: _quick(dataset_size, online_batch=64),
        lambda c: c.student(None).batch,
        64,
    ),
    "incremental-dataset-size validation": (
        lambda: _quick(dataset_size, train=_nested(dataset_size, "train", validation=128)),
        lambda c: c.student(300).validation,
        128,
    ),
    "incremental-init-scale batch": (
        lambda: _quick(init_scale, train=_nested(init_scale, "train", batch=128)),
        lambda c: c.base().batch,
        128,
    ),
    "incremental-head-dynamics vocab": (
        lambda: _quick(head_dynamics, train=_nested(head_dynamics, "train", vocab=30)),
        lambda c: c.training().vocab,
        30,
    ),
    # mean-field
    "mean-field-density tokens": (
        lambda: _quick(density, train=_nested(density, "train", tokens=128)),
        lambda c: c.training().tokens,
        128,
    ),
    "mean-field-escape steps": (
        lambda: _quick(escape, train=_nested(escape, "train", steps=1500)),
        lambda c: c.training(beta=2.0, tau=0.1).steps,
        1500,
    ),
    "mean-field-escape extra_betas": (
        lambda: _quick(escape, extra_betas=(1.0,)),
        lambda c: c.cases()[-1],
        (1.0, 0.05),
    ),
    "mean-field-threshold tokens": (
        lambda: _quick(threshold, setting=_nested(threshold, "setting", tokens=256)),
        lambda c: c.resolved().tokens,
        256,
    ),
    # clustering-head
    "clustering-head-fixed-point steps": (
        lambda: _quick(fixed_point, steps=500),
        lambda c: c.total_steps,
        500,
    ),
    "clustering-head-attention seeds": (
        lambda: _quick(attention, train=_nested(attention, "train", seeds=4)),
        lambda c: c.training().seeds,
        4,
    ),
    "clustering-head-sandbox frames": (
        lambda: _quick(sandbox, frames=(0, 5)),
        lambda c: c.plan()[1],
        (0, 5),
    ),
    "clustering-head-sandbox epochs": (
        lambda: _quick(sandbox, train=_nested(sandbox, "train", epochs=100)),
        lambda c: (c.plan()[0].epochs, c.plan()[1]),
        (100, (0, 10, 100)),
    ),
    "clustering-head-ablations widths": (
        lambda: _quick(ablations, widths=(8,)),
        lambda c: c.setting().widths,
        (8,),
    ),
    "clustering-head-ablations seeds": (
        lambda: _quick(ablations, train=_nested(ablations, "train", seeds=4)),
        lambda c: c.setting().train.seeds,
        4,
    ),
    "clustering-head-finetune pretrain_epochs": (
        lambda: _quick(finetune, pretrain_epochs=40),
        lambda c: c.pretraining().epochs,
        40,
    ),
    "clustering-head-finetune lr": (
        lambda: _quick(finetune, train=_nested(finetune, "train", lr=1e-2)),
        lambda c: c.setting().train.lr,
        1e-2,
    ),
    "clustering-head-loss-spike hessian_iterations": (
        lambda: _quick(loss_spike, train=_nested(loss_spike, "train", hessian_iterations=5)),
        lambda c: c.setting().train.hessian_iterations,
        5,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_quick_keeps_the_option_given_on_the_command_line(case):
    build, resolve, given = CASES[case]
    assert resolve(build()) == given


@dataclass(frozen=True)
class _Inner:
    a: int = 1
    b: int = 2


@dataclass(frozen=True)
class _Options(FigureOptions):
    inner: _Inner = _Inner()


def test_quick_helpers_apply_the_quick_values_only_to_options_left_at_their_defaults():
    assert _Options(quick=True).quick_or("inner.a", 10) == 10
    assert _Options(quick=True, inner=_Inner(a=5)).quick_or("inner.a", 10) == 5
    assert _Options().quick_or("inner.a", 10) == 1
    given = _Options(quick=True, inner=_Inner(a=5))
    assert given.quick_setting("inner", {"a": 10, "b": 20}) == _Inner(a=5, b=20)
    assert _Options().quick_setting("inner", {"a": 10, "b": 20}) == _Inner()
