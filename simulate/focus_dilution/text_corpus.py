"""Real text for the focus-dilution text experiment (spec ``focus_dilution.md`` §2.2, §7
focus-dilution-text): a word-level tokeniser with a truncated vocabulary and an unknown token.

Default text (no download): the English reference texts that CPython ships for ``help()`` in
``pydoc_data.topics`` (the Language Reference sections on statements, expressions, the data model,
...), prose only: indented code and grammar blocks and reST underlines are dropped, leaving about
56,000 tokens on Python 3.11 (fixed by the interpreter's version). Any local UTF-8 text file (for
example a copy of WikiText or TinyStories) can be given instead by path; it is used as it is.

Tokens: words (letters with inner apostrophes, lower-cased), numbers, single punctuation marks, and
``<nl>`` for a line break ending a paragraph (the "whitespace" token the paper's WikiText query
focuses on, spec §7). Types outside the ``vocab - 1`` most frequent become ``<unk>``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from theory.validation import require

UNKNOWN = "<unk>"
NEWLINE = "<nl>"
BUNDLED = "pydoc_data.topics (CPython's English reference texts for help())"
_TOKEN = re.compile(r"\n\s*\n|[a-z]+(?:'[a-z]+)*|[0-9]+|[^\sa-z0-9]")


def bundled_text() -> str:
    """The default corpus: the prose lines of every ``pydoc_data.topics`` text (sorted topics);
    indented lines (code, grammar) and lines without a letter (reST underlines) are dropped."""
    from pydoc_data.topics import topics

    def prose(text: str) -> str:
        return "\n".join(
            line
            for line in text.splitlines()
            if not line.strip() or (not line[0].isspace() and re.search("[A-Za-z]", line))
        )

    return "\n\n".join(prose(topics[k]) for k in sorted(topics))


def tokenize(text: str) -> list[str]:
    """Lower-cased word, number and punctuation tokens; a blank line becomes ``<nl>``."""
    return [NEWLINE if t.startswith("\n") else t for t in _TOKEN.findall(text.lower())]


@dataclass(frozen=True)
class Corpus:
    """A tokenised text: ``ids`` (int array) over ``types`` (``types[0] = <unk>``, the rest by
    decreasing frequency), with the source it came from."""

    ids: np.ndarray
    types: tuple[str, ...]
    source: str

    @property
    def vocab(self) -> int:
        return len(self.types)

    def index(self, token: str) -> int | None:
        """Id of ``token`` (after tokenisation, e.g. ``","``), None if outside the vocabulary."""
        try:
            return self.types.index(token)
        except ValueError:
            return None

    def unigram(self) -> np.ndarray:
        """Empirical token frequencies ``pi_hat`` (``<unk>`` included)."""
        counts = np.bincount(self.ids, minlength=self.vocab).astype(float)
        return counts / counts.sum()

    def split(self, fraction: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """First ``fraction`` of the tokens for training, the rest held out."""
        cut = int(len(self.ids) * fraction)
        return self.ids[:cut], self.ids[cut:]


def build_corpus(tokens: list[str], vocab: int, source: str) -> Corpus:
    """Keep the ``vocab - 1`` most frequent types (ties broken alphabetically) plus ``<unk>``."""
    require(vocab >= 2, "vocab", vocab, "at least 2 types (one word and <unk>)")
    counts = Counter(tokens)
    kept = sorted(counts, key=lambda t: (-counts[t], t))[: vocab - 1]
    types = (UNKNOWN, *kept)
    lookup = {t: i for i, t in enumerate(types)}
    ids = np.fromiter((lookup.get(t, 0) for t in tokens), dtype=np.int32, count=len(tokens))
    return Corpus(ids, types, source)


def load_corpus(path: Path | None, vocab: int, min_tokens: int = 1000) -> Corpus:
    """The bundled text (``path=None``) or a local UTF-8 file, tokenised with ``vocab`` types."""
    if path is None:
        text, source = bundled_text(), BUNDLED
    else:
        path = Path(path)
        require(path.is_file(), "text", str(path), "a readable local text file")
        text, source = path.read_text(encoding="utf-8", errors="replace"), str(path)
    tokens = tokenize(text)
    require(
        len(tokens) >= min_tokens,
        "text",
        source,
        f"a text of at least {min_tokens} tokens (this one has {len(tokens)})",
    )
    return build_corpus(tokens, vocab, source)
