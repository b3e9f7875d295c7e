"""Figure focus-dilution-text: attention of tracked query tokens on real text over training (spec
``focus_dilution.md`` §7 focus-dilution-text, experiments E/F; §2.2).

The one-layer attention model of spec §3.2 (the ``focus-dilution`` experiment with
``source = text``) trained with Adam on a word-level corpus: by default the English reference text
that ships with CPython (``simulate.focus_dilution.text_corpus``), or any local file given with ``--text PATH``
(e.g. WikiText or TinyStories). For each tracked query (``continue`` as in the paper's WikiText
panel, the TinyStories queries ``the``, comma, ``a``, ``been``, and the paragraph break): the
attention mass on its top key types (ranked by their largest mass during training) and on all other
types, stacked, and the entropy of the attention over key types. Yardsticks on the loss panel:
``ln V`` (uniform) and the unigram entropy ``H(pi_hat)``. A query "focuses" while one key type
holds most of its attention and "dilutes" while the entropy rises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import xarray as xr

from figures.core.output import figure_dir, format_table, run_figure
from simulate.focus_dilution import training
from simulate.focus_dilution.text_corpus import load_corpus
from simulate.store import load
from theory.validation import require

FIGURE_ID = "focus-dilution-text"
TOP_KEYS = 5
FOCUS_LEVEL = 0.5
"""a query is focused while its largest key type holds more than this attention mass."""


@dataclass(frozen=True)
class TextConfig:
    """One-layer attention model on real text, Adam (spec §7 CPU setting: a few thousand word
    types, context 64, m = m_k = 32, small init, a few thousand steps). --quick: vocabulary 500,
    context 32, m = m_k = 16, 64 windows per step, 600 steps."""

    text: Path | None = None
    """a local UTF-8 text file (WikiText, TinyStories, ...); None: the bundled CPython text."""
    vocab: int = 2000
    """vocabulary: the most frequent word types plus <unk>."""
    context: int = 64
    """s, tokens the last position attends to (itself included)."""
    width: int = 32
    """m = m_k, embedding and query/key width."""
    init_scale: float = 1e-3
    """eps: parameters start i.i.d. N(0, eps^2)."""
    optimizer: Literal["adam", "gd"] = "adam"
    """adam, or plain gradient descent."""
    lr: float = 3e-3
    """learning rate."""
    batch: int = 128
    """windows per step (uniform random offsets of the training text)."""
    steps: int = 3000
    """optimizer steps."""
    log_every: int = 20
    """steps between logged rows."""
    queries: tuple[str, ...] = training.TEXT_QUERIES
    """tracked query tokens (skipped if outside the vocabulary)."""
    seed: int = 0
    """init seed (the data seed is fixed at 0)."""
    quick: bool = False
    """CPU-sized run (see above)."""
    out: Path = Path("runs")
    """output directory (the figure goes to OUT/focus-dilution-text/)."""
    quiet: bool = False
    """no progress bar."""
    replot: bool = False
    """redraw the figure from the run stored in the output directory; nothing is recomputed."""

    def __post_init__(self):
        require(
            self.text is None or Path(self.text).is_file(),
            "text",
            str(self.text),
            "None (the bundled text) or a readable local text file",
        )
        require(self.vocab >= 10, "vocab", self.vocab, "at least 10 types")
        require(self.context >= 2, "context", self.context, "a context length >= 2")
        require(self.width >= 1, "width", self.width, "an integer >= 1")
        require(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
        require(
            self.steps >= self.log_every and self.steps % self.log_every == 0,
            "steps",
            self.steps,
            f"a positive multiple of log_every = {self.log_every}",
        )
        require(self.lr > 0, "lr", self.lr, "a learning rate > 0")

    def run_dir(self) -> Path:
        return figure_dir(self.out, FIGURE_ID)

    def training(self) -> training.FocusDilutionConfig:
        vocab, context, width, batch, steps = (
            (500, 32, 16, 64, 600)
            if self.quick
            else (self.vocab, self.context, self.width, self.batch, self.steps)
        )
        rows = steps // self.log_every
        chunk = self.log_every * math.gcd(rows, max(1, 1000 // self.log_every))
        return training.FocusDilutionConfig(
            source="text",
            text=self.text,
            vocab=vocab,
            context=context,
            width=width,
            key_width=width,
            init_scale=self.init_scale,
            optimizer=self.optimizer,
            lr=self.lr,
            batch=batch,
            steps=steps,
            log_every=self.log_every,
            chunk=chunk,
            seeds=1,
            seed=self.seed,
            queries=tuple(self.queries),
            validation=256,
            quiet=self.quiet,
            out=self.run_dir() / "training",
        )


def focus_phases(mass: np.ndarray, key_names, steps, level: float = FOCUS_LEVEL) -> list:
    """Maximal runs of logged steps during which one key type holds more than ``level`` of the
    query's attention: ``[(first step, last step, key)]``."""
    phases = []
    top = np.argmax(mass, axis=-1)
    focused = mass[np.arange(len(top)), top] > level
    start = None
    for i in range(len(top) + 1):
        same = i < len(top) and focused[i] and start is not None and top[i] == top[start]
        if start is not None and not same:
            phases.append((int(steps[start]), int(steps[i - 1]), str(key_names[top[start]])))
            start = None
        if i < len(top) and focused[i] and start is None:
            start = i
    return phases


def compute(cfg: TextConfig) -> tuple[xr.Dataset, dict]:
    tcfg = cfg.training()
    path = training.run(tcfg)
    ds, _ = load(path)
    stored = json.loads((Path(path) / "summary.json").read_text())
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


def run(cfg: TextConfig) -> dict:
    return run_figure(FIGURE_ID, cfg, cfg.run_dir(), compute, plot, report)


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
