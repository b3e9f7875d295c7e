"""Figure clustering-head-finetune: curriculum p = 2 -> p = 3 against p = 3 from scratch (spec
clustering_head.md §7 clustering-head-finetune, §5.5, §5.1).

Every seed of the clustering-head experiment (V_e = 3, paper defaults) is first trained on p = 2;
the fine-tuning arm continues from the final weights of the same seed id on p = 3 (``init_from``),
the scratch arm trains the same seed ids on p = 3 from the paper's random init, for the same number
of epochs (``pretrain_init`` and the p = 3 ``lr`` are options; --quick uses the paper's ideal init
for p = 2 and lr 3e-2 on p = 3, see ``QUICK``; stored complete runs are reused). Drawn: (a) training
loss of both arms (median over seeds thick, each seed faint, log scale); (b) test accuracy, with the
success level 0.98; (c) the fraction of seeds that succeeded by each epoch (success: test accuracy >
0.98, at the final epoch for the reported rates); (d)-(e) for the shown seed (the first seed whose
fine-tuning succeeds, else the first seed), the p = 3 training-set sequence embeddings xi by class
over the decision regions argmax_y p(y | xi) of the read-out, at fine-tuning epoch 0 and at the
final epoch, with the centroids of the 21 first-k histograms (the clusters of a clustering head,
binom(k + p - 1, p - 1), §5.1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from figures.core.regions import draw_regions, region_grid
from figures.core.verdicts import Prediction
from simulate.clustering_head.model import ClusteringHead
from simulate.clustering_head.outcomes import first_success_epoch
from simulate.clustering_head.task import draw_data, histogram_index
from simulate.clustering_head.training import (
    SUCCESS_ACCURACY,
    WEIGHTS,
    ClusteringSetting,
    cluster_quality,
    model_at,
    run_or_reuse,
)
from simulate.store import load
from theory.clustering_head.symmetry import cluster_count
from theory.validation import require

FIGURE_ID = "clustering-head-finetune"
ARMS = ("finetune", "scratch")
QUICK = {"seeds": 8, "pretrain_epochs": 60, "epochs": 100, "pretrain_init": "ideal", "lr": 3e-2}
"""--quick: fewer seeds and epochs; the p = 2 head from the paper's ideal init (which learns p = 2
within tens of epochs on CPU) and lr 3e-2 on p = 3 (in the paper's lr grid [1e-4, 1])."""
PRETRAIN_LR = ClusteringSetting().lr
"""the p = 2 run keeps the paper's learning rate."""


@dataclass(frozen=True)
class FinetuneConfig(FigureOptions):
    """Pre-train on p = 2, then fine-tune on p = 3 vs p = 3 from scratch (default: the paper's
    1000 + 1000 epochs; 16 seeds; --quick: 8 seeds, 60 (ideal init) + 100 epochs, lr 3e-2 on
    p = 3)."""

    train: Annotated[ClusteringSetting, Flat] = ClusteringSetting(
        modulus=3, seeds=16, epochs=1000, epochs_per_chunk=100, hessian_iterations=0
    )
    """the p = 3 run of each arm (same seed ids in every arm; its lr is the p = 3 Adam learning
    rate); the p = 2 pretraining is the same with modulus 2, the paper's lr 3e-3 and
    pretrain_init."""
    pretrain_epochs: int = 1000
    """epochs of 64 steps on p = 2 before fine-tuning (a multiple of 10)."""
    pretrain_init: Literal["random", "ideal"] = "random"
    """init of the p = 2 run: the paper's random init, or its ideal init (P[t] = (0, +-1))."""

    def __post_init__(self) -> None:
        require(
            self.pretrain_init in ("random", "ideal"),
            "pretrain_init",
            self.pretrain_init,
            "random or ideal",
        )
        value = self.pretrain_epochs
        require(
            value >= 10 and value % 10 == 0, "pretrain_epochs", value, "a multiple of 10, >= 10"
        )
        self.setting()  # the runs as resolved (--quick included) are valid before any compute

    def setting(self) -> FinetuneConfig:
        """The configuration actually run (--quick: ``QUICK``)."""
        if not self.quick:
            return self
        epochs = QUICK["epochs"]
        train = self.quick_setting(
            "train",
            {
                "seeds": QUICK["seeds"],
                "epochs": epochs,
                "epochs_per_chunk": epochs // 10,
                "lr": QUICK["lr"],
            },
        )
        return replace(
            self,
            quick=False,
            train=train,
            pretrain_epochs=self.quick_or("pretrain_epochs", QUICK["pretrain_epochs"]),
            pretrain_init=self.quick_or("pretrain_init", QUICK["pretrain_init"]),
        )

    def pretraining(self) -> ClusteringSetting:
        """The p = 2 run the fine-tuning arm starts from (of ``setting()``)."""
        cfg = self.setting()
        return replace(
            cfg.train,
            modulus=2,
            lr=PRETRAIN_LR,
            init=cfg.pretrain_init,
            epochs=cfg.pretrain_epochs,
            epochs_per_chunk=cfg.pretrain_epochs // 10,
            hessian_iterations=0,
            preconditioned_sharpness=False,
            init_from=None,
        )

    def arm(self, name: str, run_dir: Path) -> ClusteringSetting:
        """The p = 3 run of arm ``name`` (finetune: from the pretraining run stored in
        ``run_dir/pretrain``)."""
        p3 = replace(self.setting().train, init="random", init_from=None)
        return replace(p3, init_from=run_dir / "pretrain") if name == "finetune" else p3


def _frame_model(data: xr.Dataset, frame: int) -> ClusteringHead:
    return model_at(data[list(WEIGHTS)].isel(frame=frame).expand_dims(seed=[0], step=[0]), 0, 0)


def _per_class_recall(model: ClusteringHead, x, y, modulus: int) -> list[float]:
    pred = np.asarray(jnp.argmax(jax.vmap(model)(x), axis=1))
    return [float((pred[y == c] == c).mean()) for c in range(modulus)]


def compute(cfg: FinetuneConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    pre = run_or_reuse(cfg.pretraining(), cfg.run_output(run_dir, "pretrain"))
    stores = {"pretrain": load(pre)[0]}
    for name in ARMS:
        stores[name] = load(run_or_reuse(cfg.arm(name, run_dir), cfg.run_output(run_dir, name)))[0]
    p3 = cfg.arm("scratch", run_dir)
    spe = p3.steps_per_epoch
    arm_ds = [stores[a] for a in ARMS]
    epochs = arm_ds[0]["step"].values // spe
    curves = {
        name: (("arm", "seed", "epoch"), np.stack([d[name].values for d in arm_ds]))
        for name in ("train_loss", "test_loss", "train_accuracy", "test_accuracy")
    }
    success = curves["test_accuracy"][1][:, :, -1] > SUCCESS_ACCURACY
    tuned = stores["finetune"]
    shown = int(np.argmax(success[0])) if success[0].any() else 0
    data3 = draw_data(p3)
    test_y = np.asarray(data3.test_labels)
    recall = {
        f: np.array(
            [
                _per_class_recall(model_at(tuned, s, f), data3.test, test_y, 3)
                for s in range(tuned.sizes["seed"])
            ]
        )
        for f in (0, -1)
    }
    weights = (
        tuned[list(WEIGHTS)]
        .isel(seed=shown, step=[0, -1])
        .rename(step="frame")
        .drop_vars(["seed", "frame"], errors="ignore")
    )
    frames = [int(epochs[0]), int(epochs[-1])]
    groups = histogram_index(data3.train, p3.sparsity, p3.modulus)
    xi = np.stack(
        [
            np.asarray(jax.vmap(model_at(tuned, shown, f).sequence_embedding)(data3.train))
            for f in (0, -1)
        ]
    )
    data = xr.Dataset(
        {
            **curves,
            **{n: weights[n] for n in WEIGHTS},
            "train_embedding": (("frame", "sample", "dim"), xi),
            "train_label": (("sample",), np.asarray(data3.train_labels)),
            "train_histogram": (("sample",), groups),
        },
        coords={
            "arm": list(ARMS),
            "seed": arm_ds[0]["seed"].values,
            "epoch": epochs,
            "frame": frames,
        },
    )
    pre_acc = stores["pretrain"]["test_accuracy"].values[:, -1]
    first = {
        a: first_success_epoch(curves["test_accuracy"][1][i], epochs) for i, a in enumerate(ARMS)
    }
    summary = {
        "success_rule": f"final test accuracy > {SUCCESS_ACCURACY}",
        "seeds": p3.seeds,
        "pretrain_epochs": cfg.pretraining().total_epochs,
        "epochs": p3.total_epochs,
        "lr": p3.lr,
        "pretrain_init": cfg.pretraining().init,
        "pretrain_lr": cfg.pretraining().lr,
        "sparsity": p3.sparsity,
        "modulus": p3.modulus,
        "histogram_clusters": cluster_count(p3.sparsity, p3.modulus),
        "classes": p3.modulus,
        "pretrain_success_per_seed": (pre_acc > SUCCESS_ACCURACY).tolist(),
        "pretrain_success_rate": float((pre_acc > SUCCESS_ACCURACY).mean()),
        **{f"{a}_success_per_seed": success[i].tolist() for i, a in enumerate(ARMS)},
        **{f"{a}_success_rate": float(success[i].mean()) for i, a in enumerate(ARMS)},
        **{
            f"{a}_final_test_accuracy": curves["test_accuracy"][1][i][:, -1]
            for i, a in enumerate(ARMS)
        },
        **{f"{a}_final_train_loss": curves["train_loss"][1][i][:, -1] for i, a in enumerate(ARMS)},
        **{f"{a}_first_success_epoch": first[a] for a in ARMS},
        **{
            f"{a}_median_first_success_epoch": float(np.nanmedian(first[a]))
            if np.isfinite(first[a]).any()
            else float("nan")
            for a in ARMS
        },
        "shown_seed": int(arm_ds[0]["seed"].values[shown]),
        "shown_seed_rule": "first seed whose fine-tuning succeeds, else the first seed",
        "finetune_class_recall_epoch0": recall[0],
        "finetune_class_recall_final": recall[-1],
        "new_class_recall_epoch0_mean": float(recall[0][:, 2].mean()),
        "new_class_recall_final_mean": float(recall[-1][:, 2].mean()),
        "shown_cluster_quality": [float(cluster_quality(xi[f], groups)) for f in range(2)],
        "shown_occupied_histograms": len(np.unique(groups)),
        "frames": frames,
    }
    return data, summary


def _regions(ax, model: ClusteringHead, xi, y, groups, classes: int, title: str) -> None:
    gx, gy, grid = region_grid(xi, 120, pad=0.3)
    logits = jax.vmap(lambda v: model.token @ model.ffn(v))(jnp.asarray(grid))
    prob = np.asarray(jax.nn.softmax(logits))[:, :classes]
    draw_regions(ax, gx, gy, prob, line=classes - 1, alpha=0.18, linewidth=0.7)
    for c in range(classes):
        ax.scatter(*xi[y == c].T, s=4, c=f"C{c}", label=f"class {c}")
    centroids = np.stack([xi[groups == g].mean(0) for g in np.unique(groups)])
    ax.scatter(
        *centroids.T,
        s=30,
        facecolors="none",
        edgecolors="k",
        lw=0.8,
        label=f"{len(centroids)} histogram centroids",
    )
    ax.set(xlabel="xi_1", ylabel="xi_2", title=title)
    ax.legend(fontsize=7, markerscale=2, loc="best")


def plot(data: xr.Dataset, summary: dict):
    fig = plt.figure(figsize=(20, 9))
    grid = fig.add_gridspec(2, 3)
    epoch = data["epoch"].values
    panels = [
        ("train_loss", "training loss (nats)", "log"),
        ("test_accuracy", "test accuracy", "linear"),
    ]
    for col, (name, label, scale) in enumerate(panels):
        ax = fig.add_subplot(grid[0, col])
        for i, arm in enumerate(ARMS):
            values = data[name].values[i]
            ax.plot(epoch, values.T, color=f"C{i}", lw=0.5, alpha=0.3)
            ax.plot(
                epoch,
                np.median(values, 0),
                color=f"C{i}",
                lw=2,
                label=f"{arm} (median of {values.shape[0]} seeds)",
            )
        if name == "test_accuracy":
            ax.axhline(SUCCESS_ACCURACY, color="gray", ls="--", label="success 0.98")
            ax.axhline(1 / summary["classes"], color="gray", ls=":", label="chance 1/3")
        else:
            ax.axhline(np.log(summary["classes"]), color="gray", ls=":", label="ln 3")
        ax.set(
            xlabel="epoch on p = 3 (64 steps)",
            ylabel=label,
            yscale=scale,
            title=f"{label}: fine-tuned from p = 2 vs from scratch",
        )
        ax.legend(fontsize=8)
    ax = fig.add_subplot(grid[0, 2])
    for i, arm in enumerate(ARMS):
        done = np.maximum.accumulate(data["test_accuracy"].values[i] > SUCCESS_ACCURACY, axis=1)
        ax.step(
            epoch,
            done.mean(0),
            where="post",
            color=f"C{i}",
            lw=2,
            label=f"{arm}: final {summary[f'{arm}_success_rate']:.2f}",
        )
    ax.set(
        xlabel="epoch on p = 3 (64 steps)",
        ylabel="fraction of seeds",
        title="seeds that reached test accuracy > 0.98",
        ylim=(-0.02, 1.02),
    )
    ax.legend(fontsize=8)
    xi = data["train_embedding"].values
    y, groups = data["train_label"].values, data["train_histogram"].values
    for f in range(2):
        ax = fig.add_subplot(grid[1, f])
        _regions(
            ax,
            _frame_model(data, f),
            xi[f],
            y,
            groups,
            summary["classes"],
            f"seed {summary['shown_seed']}, fine-tuning epoch {summary['frames'][f]}: xi and "
            f"regions (lines: p(y = 2 | xi)), Q = {summary['shown_cluster_quality'][f]:.2f}",
        )
    ax = fig.add_subplot(grid[1, 2])
    labels = ["class 0", "class 1", "class 2 (new)"]
    width = 0.35
    for f, key in enumerate(("finetune_class_recall_epoch0", "finetune_class_recall_final")):
        recall = np.asarray(summary[key], float)
        ax.bar(
            np.arange(3) + (f - 0.5) * width,
            recall.mean(0),
            width,
            yerr=recall.std(0),
            label=f"fine-tuning epoch {summary['frames'][f]}",
        )
    ax.set(
        xticks=range(3),
        xticklabels=labels,
        ylabel="test recall (mean +- std over seeds)",
        title="per-class recall of the fine-tuned models",
        ylim=(0, 1.05),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def report(summary: dict) -> str:
    rows = [
        [
            a,
            summary[f"{a}_success_rate"],
            summary[f"{a}_median_first_success_epoch"],
            float(np.median(summary[f"{a}_final_test_accuracy"])),
            float(np.median(summary[f"{a}_final_train_loss"])),
        ]
        for a in ARMS
    ]
    return (
        format_table(
            [
                "arm (p = 3)",
                "success rate",
                "median first success epoch",
                "median final test acc",
                "median final train loss",
            ],
            rows,
        )
        + f"\n{summary['seeds']} seeds, {summary['pretrain_epochs']} epochs on p = 2 "
        f"({summary['pretrain_init']} init, lr {summary['pretrain_lr']:.3g}, success rate "
        f"{summary['pretrain_success_rate']:.3g}) then {summary['epochs']} epochs on p = 3 "
        f"at lr {summary['lr']:.3g}; new class recall (fine-tuned) "
        f"{summary['new_class_recall_epoch0_mean']:.3g} at epoch 0 -> "
        f"{summary['new_class_recall_final_mean']:.3g} at the end; "
        f"{summary['histogram_clusters']} first-k histograms for p = 3"
    )


SUCCESS_RATE_TOLERANCE = 0.1
"""success rates agree within 0.1 (about one seed in ten)."""


def predictions(summary: dict) -> list[Prediction]:
    """[derived] §7: fine-tuning succeeds at least as often as training from scratch. The claim
    is one-sided, so the row is the shortfall max(0, scratch - fine-tuned), predicted 0."""
    finetune, scratch = summary["finetune_success_rate"], summary["scratch_success_rate"]
    return [
        Prediction(
            f"success-rate shortfall of fine-tuning p = 2 -> 3 below p = 3 from scratch, "
            f"max(0, scratch - fine-tuned), {summary['seeds']} seeds x {summary['epochs']} epochs "
            f"(fine-tuned {finetune:.3g}, scratch {scratch:.3g})",
            0.0,
            max(0.0, scratch - finetune),
            SUCCESS_RATE_TOLERANCE,
            "success: final test accuracy > 0.98 on p = 3; 'at least as often' is one-sided, so a "
            "fine-tuned rate above scratch is a shortfall of 0; success rates within 0.1",
            "difference",
        )
    ]


FIGURE = Figure(
    id=FIGURE_ID,
    paper="clustering-head",
    description="curriculum p = 2 -> p = 3 vs p = 3 from scratch: loss, accuracy and success "
    "rates of both arms, decision regions and the 21 histogram clusters at fine-tuning start/end",
    config=FinetuneConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read="Top row, both arms on p = 3 (blue: fine-tuned from the p = 2 run of the same "
    "seed; orange: from scratch), the median over seeds thick and each seed faint: training loss "
    "(log, with ln 3), test accuracy (with the success level 0.98 and chance 1/3), and the "
    "fraction of seeds that have passed 0.98 by each epoch. Bottom: for the shown seed, the p = 3 "
    "training-set sequence embeddings xi by class over the read-out's decision regions (lines: p(y "
    "= 2 | xi)) at fine-tuning epoch 0 and at the last epoch, with the centroids of the 21 first-k "
    "histograms (the clusters of a clustering head, §5.1) and the cluster quality Q in the title "
    "(0: every histogram collapsed to a point); and the per-class test recall of the fine-tuned "
    "models at both epochs (class 2 is the new one). The curriculum helps when the blue success "
    "fraction ends at or above the orange.",
    predictions=predictions,
)
