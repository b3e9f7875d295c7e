"""The word-level text corpus (``simulate.focus_dilution.text_corpus``)."""

import numpy as np
import pytest

from simulate.focus_dilution.text_corpus import (
    NEWLINE,
    UNKNOWN,
    build_corpus,
    bundled_text,
    load_corpus,
    tokenize,
)
from theory.validation import ConfigError

D, M, MK = 4, 3, 2


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
