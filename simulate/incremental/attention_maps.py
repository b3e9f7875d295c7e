"""Attention maps of the Markov-chain transformers as arrays (spec incremental.md §7): the ideal
attention of paper Fig. 1, the lag-block label of each (query, key) cell with the outline of each
block, and the composite images that give each head one colour."""

from __future__ import annotations

import colorsys

import numpy as np
from numpy.typing import ArrayLike

from simulate.incremental.markov_task import MarkovSetting
from simulate.incremental.markov_training import lag_blocks

HEAD_COLORS = np.array(
    [
        [1.0, 0.0, 0.0],
        [0.0, 0.8, 0.0],
        [0.1, 0.3, 1.0],
        [1.0, 0.7, 0.0],
        [0.8, 0.0, 0.8],
        [0.0, 0.8, 0.8],
    ]
)
"""colour of head k in the minimal model's composite maps (RGB for three heads)."""
COMPOSITE_RULE = (
    "composite attention: head h -> colour channel h; each head's attention row "
    "(one query) divided by its maximum over keys"
)


def ideal_attention(task: MarkovSetting) -> np.ndarray:
    """(H = h, generated, L): head k attends uniformly to the lags of block k from each generated
    query (the solution of paper Fig. 1 'ideal attention')."""
    M = lag_blocks(task)
    return np.moveaxis(M / np.asarray(task.blocks, float), -1, 0)


def composite(maps: ArrayLike, scale: float) -> np.ndarray:
    """RGB image (query, key, 3) of per-head maps (H, query, key): head k in ``HEAD_COLORS[k]``,
    intensity attention / ``scale``, clipped to [0, 1]."""
    maps = np.clip(np.asarray(maps, float) / scale, 0, 1)
    return np.clip(np.einsum("hqk,hc->qkc", maps, HEAD_COLORS[: maps.shape[0]]), 0, 1)


def composite_rgb(maps: np.ndarray) -> np.ndarray:
    """(H, Q, K) attention maps -> (Q, K, 3) image per ``COMPOSITE_RULE`` (heads 1-3 red, green,
    blue; more heads get hues around the colour wheel)."""
    H = maps.shape[0]
    if H <= 3:
        colours = np.eye(3)[:H]
    else:
        colours = np.array([colorsys.hsv_to_rgb(k / H, 1.0, 1.0) for k in range(H)])
    peak = np.max(maps, axis=-1, keepdims=True)
    rows = np.divide(maps, peak, out=np.zeros_like(maps, dtype=float), where=peak > 0)
    return np.clip(np.einsum("hqk,hc->qkc", rows, colours), 0.0, 1.0)


def block_labels(blocks: tuple[int, ...], generated: int) -> np.ndarray:
    """(generated, L) map of query row x key: k where the key is at a lag of block k from the
    query, 0 elsewhere."""
    M = lag_blocks(MarkovSetting(blocks=tuple(blocks), generated=generated))
    return np.einsum("qsk,k->qs", M, np.arange(1, M.shape[-1] + 1)).astype(int)


def staircase_segments(labels: np.ndarray) -> dict[int, np.ndarray]:
    """Outline of each labelled region of a cell map: {k: (n, 2, 2) segments ((x0, y0), (x1, y1))}
    in cell coordinates (cell (row r, column c) spans x in c +- 1/2, y in r +- 1/2)."""
    padded = np.pad(labels, 1)
    out = {}
    for k in np.unique(labels[labels > 0]):
        inside = padded == k
        segs = []
        # a vertical edge between columns c-1 and c (padded) where exactly one side is inside
        rows, cols = np.nonzero(inside[:, 1:] != inside[:, :-1])
        segs += [((c - 0.5, r - 1.5), (c - 0.5, r - 0.5)) for r, c in zip(rows, cols)]
        rows, cols = np.nonzero(inside[1:, :] != inside[:-1, :])
        segs += [((c - 1.5, r - 0.5), (c - 0.5, r - 0.5)) for r, c in zip(rows, cols)]
        out[int(k)] = np.array(segs, dtype=float)
    return out
