"""Figure focus-dilution-text: attention of tracked query tokens on real text over training (spec
``focus_dilution.md`` §7 focus-dilution-text, experiments E/F; §2.2).

The one-layer attention model of spec §3.2 (the ``focus-dilution`` experiment with
``source = text``) trained with Adam on a word-level corpus: by default the English reference text
that ships with CPython (``simulate.focus_dilution.text_corpus``), or any local file given with
``--text PATH`` (e.g. WikiText or TinyStories). For each tracked query (``continue`` as in the
paper's WikiText panel, the TinyStories queries ``the``, comma, ``a``, ``been``, and the paragraph
break): the
attention mass on its top key types (ranked by their largest mass during training) and on all other
types, stacked, and the entropy of the attention over key types. Yardsticks on the loss panel:
``ln V`` (uniform) and the unigram entropy ``H(pi_hat)``. A query "focuses" while one key type
holds most of its attention and "dilutes" while the entropy rises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import numpy as np
import xarray as xr

from figures.core.figure import Figure
from figures.core.options import FigureOptions, Flat
from figures.core.output import format_table
from simulate.focus_dilution import training
from simulate.focus_dilution.measure import FOCUS_LEVEL, focus_phases
from simulate.focus_dilution.text_corpus import load_corpus
from simulate.store import load, read_summary
from theory.validation import require

FIGURE_ID = "focus-dilution-text"
TOP_KEYS = 5
"""key types drawn per query (ranked by their largest mass during training)."""
QUICK = {"vocab": 500, "context": 32, "width": 16, "batch": 64, "steps": 600}
"""--quick: the training run's CPU-sized setting."""


@dataclass(frozen=True)
class TextConfig(FigureOptions):
    """One-layer attention model on real text, Adam (spec §7 CPU setting: a few thousand word
    types, context 64, m = m_k = 32, small init, a few thousand steps). --quick: vocabulary 500,
    context 32, m = m_k = 16, 64 windows per step, 600 steps."""

    train: Annotated[training.FocusDilutionConfig, Flat] = training.FocusDilutionConfig(
        source="text",
        vocab=2000,
        context=64,
        width=32,
        init_scale=1e-3,
        optimizer="adam",
        lr=3e-3,
        batch=128,
        steps=3000,
        log_every=20,
        chunk=20,
        seeds=1,
        validation=256,
    )
    """the training run (source text; one seed: --seeds is not used, --seed is the init seed, the
    data seed stays 0; --chunk is set from --steps and --log-every, about 1000 steps a chunk)."""

    def __post_init__(self):
        t = self.train
        require(t.source == "text", "source", t.source, "text")
        require(t.vocab >= 10, "vocab", t.vocab, "at least 10 types")
        require(t.s >= 2, "context", t.context, "a context length >= 2")
        self.training()  # the run as resolved (--quick included) is valid before any compute

    def training(self) -> training.FocusDilutionConfig:
        t = self.quick_setting("train", QUICK)
        rows = t.steps // t.log_every
        chunk = t.log_every * math.gcd(rows, max(1, 1000 // t.log_every))
        return replace(t, chunk=chunk, seeds=1)


def compute(cfg: TextConfig, run_dir: Path) -> tuple[xr.Dataset, dict]:
    tcfg = cfg.training()
    path = training.run(tcfg, cfg.run_output(run_dir))
    assert isinstance(path, Path)
    ds, _ = load(path)
    stored = read_summary(path)
    corpus = load_corpus(tcfg.text, tcfg.vocab)
    names = np.asarray(corpus.types)
    unigram = corpus.unigram()
    ranks = np.argsort(np.argsort(-unigram))  # 0 = most frequent type
    steps = ds["step"].values
    mass = ds["key_mass"].values[0]  # (step, tracked, key)
    ent = ds["key_entropy"].values[0]  # (step, tracked)
    tracked = list(ds["tracked"].values)
    top_ids = np.argsort(-mass.max(axis=0), axis=-1)[:, :TOP_KEYS]  # (tracked, rank)
    top_mass = np.take_along_axis(mass, top_ids[None], axis=-1)
    other = 1.0 - top_mass.sum(-1)
    data = xr.Dataset(
        {
            "loss": ("step", ds["loss"].values[0]),
            "top_mass": (("step", "tracked", "rank"), top_mass),
            "other_mass": (("step", "tracked"), other),
            "entropy": (("step", "tracked"), ent),
            "top_key": (("tracked", "rank"), top_ids),
            "top_key_rank": (("tracked", "rank"), ranks[top_ids]),
        },
        coords={"step": steps, "tracked": tracked, "rank": np.arange(1, TOP_KEYS + 1)},
    )
    queries = []
    for j, q in enumerate(tracked):
        phases = focus_phases(mass[:, j], names, steps)
        turns = np.diff(np.sign(np.diff(ent[:, j])))
        queries.append(
            {
                "query": q,
                "top_keys": names[top_ids[j]].tolist(),
                "top_key_frequency_ranks": ranks[top_ids[j]].tolist(),
                "focus_phases": phases,
                "entropy_start": float(ent[0, j]),
                "entropy_min": float(ent[:, j].min()),
                "entropy_end": float(ent[-1, j]),
                "entropy_sign_changes": int(np.count_nonzero(turns)),
            }
        )
    summary = {
        "source_text": corpus.source,
        "tokens": len(corpus.ids),
        "vocab": tcfg.vocab,
        "context": tcfg.s,
        "width": tcfg.m,
        "optimizer": tcfg.optimizer,
        "lr": tcfg.lr,
        "steps": tcfg.steps,
        "ln_vocab": math.log(tcfg.vocab),
        "unigram_entropy": stored["unigram_entropy"],
        "final_val_loss": float(ds["loss"].values[0, -1]),
        "focus_rule": f"focused on key k while p(k) > {FOCUS_LEVEL}",
        "queries": queries,
        "training_run": str(path),
    }
    return data, summary


def report(summary: dict) -> str:
    rows = [
        [
            q["query"],
            ", ".join(f"{k}({r})" for k, r in zip(q["top_keys"][:3], q["top_key_frequency_ranks"])),
            q["entropy_start"],
            q["entropy_min"],
            q["entropy_end"],
            "; ".join(f"{k} {a}-{b}" for a, b, k in q["focus_phases"]) or "-",
        ]
        for q in summary["queries"]
    ]
    return (
        f"{FIGURE_ID}: {summary['source_text']} ({summary['tokens']} tokens, V = "
        f"{summary['vocab']}, s = {summary['context']}); final validation loss "
        f"{summary['final_val_loss']:.4g} (ln V = {summary['ln_vocab']:.4g}, H(unigram) = "
        f"{summary['unigram_entropy']:.4g})\n"
        + format_table(
            [
                "query",
                "top keys (frequency rank)",
                "H start",
                "H min",
                "H end",
                "focus phases (key steps)",
            ],
            rows,
        )
    )


def plot(data: xr.Dataset, summary: dict):
    import matplotlib.pyplot as plt

    tracked = list(data["tracked"].values)
    n = len(tracked)
    cols = min(n, 3)
    rows = 2 * math.ceil(n / cols) + 1
    fig = plt.figure(figsize=(5.5 * cols, 2.6 * rows))
    grid = fig.add_gridspec(rows, cols)
    steps = data["step"].values
    info = {q["query"]: q for q in summary["queries"]}
    colors = plt.cm.tab10(np.arange(10))
    for j, q in enumerate(tracked):
        r, c = 2 * (j // cols), j % cols
        ax = fig.add_subplot(grid[r, c])
        stack = [data["top_mass"].values[:, j, k] for k in range(data.sizes["rank"])]
        labels = [
            f"'{k}' (rank {rk})"
            for k, rk in zip(info[q]["top_keys"], info[q]["top_key_frequency_ranks"])
        ]
        ax.stackplot(
            steps,
            *stack,
            data["other_mass"].values[:, j],
            labels=[*labels, "other keys"],
            colors=[*colors[: len(stack)], (0.85, 0.85, 0.85)],
        )
        ax.set(ylim=(0, 1), ylabel="attention mass", title=f"query '{q}'")
        ax.legend(fontsize=6, loc="upper right")
        ax2 = fig.add_subplot(grid[r + 1, c], sharex=ax)
        ax2.plot(steps, data["entropy"].values[:, j], "k")
        ax2.set(xlabel="step", ylabel="entropy over key types (nats)")
    ax = fig.add_subplot(grid[rows - 1, :])
    ax.plot(steps, data["loss"].values, "k", label="validation loss")
    ax.axhline(summary["ln_vocab"], color="grey", ls=":", label=f"ln V = {summary['ln_vocab']:.3f}")
    ax.axhline(
        summary["unigram_entropy"],
        color="tab:purple",
        ls="--",
        label=f"unigram entropy = {summary['unigram_entropy']:.3f}",
    )
    ax.set(xlabel="step", ylabel="loss (nats)", title="next-token loss")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"Attention of tracked queries on real text ({summary['source_text']}, "
        f"V = {summary['vocab']}, s = {summary['context']}, {summary['optimizer']})"
    )
    fig.tight_layout()
    return fig


FIGURE = Figure(
    id=FIGURE_ID,
    paper="focus-dilution",
    description="attention of tracked queries on real text (bundled CPython text or --text PATH)",
    config=TextConfig,
    compute=compute,
    plot=plot,
    report=report,
    how_to_read=(
        "For each tracked query token, two panels: its attention mass on its five top key types "
        "(ranked by their largest mass during training; the legend gives each key's frequency "
        "rank in the corpus) and on all other types (grey), stacked, against the step; below "
        "it, the entropy of its attention over key types. A query focuses while one key type "
        "holds most of its attention (entropy near 0) and dilutes while the entropy rises; the "
        "paper's pattern is focus on frequent keys first, then dilution, then new foci. Bottom: "
        "the validation loss with ln V (uniform, grey dotted) and the unigram entropy "
        "(purple dashed). The claim is qualitative: no predicted number is drawn."
    ),
)
