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
from functools import cache
from pathlib import Path

import numpy as np

from theory.validation import ConfigError, require

UNKNOWN = "<unk>"
NEWLINE = "<nl>"
BUNDLED = "pydoc_data.topics (CPython's English reference texts for help())"
MIN_LETTERS = 10
"""prose has at least this many distinct letters (random bytes that happen to decode do not)."""
MAX_CONTROL_FRACTION = 0.01
"""prose has at most this fraction of control characters (tab, line breaks, form feed aside)."""
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
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


def check_text_file(path: Path) -> None:
    """Raise a ``ConfigError`` naming ``path`` unless it is a readable file of UTF-8 prose."""
    path = Path(path)
    require(path.is_file(), "text", str(path), "a readable local text file")
    stat = path.stat()
    _check_text(str(path), str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@cache
def _check_text(path: str, resolved: str, mtime_ns: int, size: int) -> None:
    """``check_text_file`` once per file version (configs are rebuilt several times per run)."""
    del mtime_ns, size  # the cache key: a changed file is checked again
    try:
        data = Path(resolved).read_bytes()
    except OSError as err:
        raise ConfigError("text", path, f"a readable local text file ({err.strerror})") from None
    require(len(data) > 0, "text", path, "a UTF-8 text file with prose (this one is empty)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "text", path, f"a UTF-8 text file (byte {err.start} is not UTF-8: {err.reason})"
        ) from None
    control = len(_CONTROL.findall(text))
    require(
        control <= MAX_CONTROL_FRACTION * len(text),
        "text",
        path,
        f"prose: at most {MAX_CONTROL_FRACTION:.0%} control characters (this file has "
        f"{control} of {len(text)}: binary data?)",
    )
    letters = sum(1 for c in set(text) if c.isalpha())
    require(
        letters >= MIN_LETTERS,
        "text",
        path,
        f"prose: at least {MIN_LETTERS} distinct letters (this file has {letters})",
    )


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
        check_text_file(path)
        text, source = Path(path).read_text(encoding="utf-8"), str(path)
    tokens = tokenize(text)
    require(
        len(tokens) >= min_tokens,
        "text",
        source,
        f"a text of at least {min_tokens} tokens (this one has {len(tokens)})",
    )
    return build_corpus(tokens, vocab, source)
