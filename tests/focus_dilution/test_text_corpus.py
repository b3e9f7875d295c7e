"""The word-level text corpus (``simulate.focus_dilution.text_corpus``)."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import settings

from simulate.focus_dilution.text_corpus import (
    NEWLINE,
    UNKNOWN,
    build_corpus,
    bundled_text,
    load_corpus,
    tokenize,
)
from theory.focus_dilution.population import (
    Parameters,
    reversible_transition,
    transition_matrix,
)
from theory.validation import ConfigError

D, M, MK = 4, 3, 2
PI = np.array([0.75, 0.19, 0.05, 0.01])
FAST = settings(max_examples=10, deadline=None)


def _pi(seed, d=D):
    raw = np.random.default_rng(seed).dirichlet(np.ones(d))
    pi = 0.02 + (1 - 0.02 * d) * raw
    return np.sort(pi / pi.sum())[::-1]


def _chain(seed, lam):
    pi = _pi(seed)
    if seed % 2:
        U = np.random.default_rng(seed + 1).uniform(size=(D, D))
        return pi, reversible_transition(pi, (U + U.T) / (2 * D))
    return pi, transition_matrix(pi, lam)


def _as_jax(theta):
    return Parameters(*(jnp.asarray(w) for w in theta))


# --- text corpus ---------------------------------------------------------------------------------
def test_tokenizer_and_truncated_vocabulary():
    tokens = tokenize("The cat's hat, the CAT.\n\nA 42 dogs!")
    assert tokens == [
        "the",
        "cat's",
        "hat",
        ",",
        "the",
        "cat",
        ".",
        NEWLINE,
        "a",
        "42",
        "dogs",
        "!",
    ]
    corpus = build_corpus(tokens, 4, "test")
    assert corpus.types[0] == UNKNOWN and corpus.types[1] == "the"
    assert corpus.vocab == 4 and corpus.ids.size == len(tokens)
    assert corpus.index("dogs") is None and np.sum(corpus.ids == 0) == len(tokens) - 2 - 2
    assert corpus.unigram().sum() == pytest.approx(1.0)


def test_bundled_text_is_english_prose_and_a_file_can_replace_it(tmp_path):
    text = bundled_text()
    assert len(tokenize(text)) > 40000
    corpus = load_corpus(None, 300)
    assert corpus.types[1:4].count("the") == 1  # "the" is among the most frequent words
    assert corpus.index("continue") is not None
    path = tmp_path / "story.txt"
    path.write_text("Once upon a time there was a cat. " * 200)
    mine = load_corpus(path, 50)
    assert mine.source == str(path) and mine.index("cat") is not None
    with pytest.raises(ConfigError, match="text"):
        load_corpus(tmp_path / "missing.txt", 50)
