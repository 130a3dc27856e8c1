"""Made-up words: distinct, never a keyword of the evaluation data, seeded; a small run writes a readable manifest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.training.audio.data import read_manifest
from app.training.synthesis.pseudowords import pseudo_words, synthesise_pseudowords
from app.training.synthesis.speech import RESERVED


def test_pseudo_words_are_distinct_seeded_and_not_reserved() -> None:
    words = pseudo_words(300, np.random.default_rng(0))
    assert len(set(words)) == 300 and not set(words) & RESERVED
    assert all(4 <= len(w) <= 7 for w in words)
    assert words == pseudo_words(300, np.random.default_rng(0))


@pytest.mark.system("espeak-ng")  # skipped with the package named when missing (tests/system_deps.py)
def test_small_run_gives_a_manifest_with_one_label_per_language_and_word(tmp_path: Path) -> None:
    manifest = synthesise_pseudowords(tmp_path / "pw", words_per_language=2, voices=2, sample_rate=8000, seed=1,
                                      languages=("de", "es"))
    records = read_manifest(manifest)
    assert len(records) == 8
    labels = {r.label for r in records}
    assert len(labels) == 4 and all(label.startswith(("pw:de:", "pw:es:")) for label in labels)
    # each label is said by two different voices
    for label in labels:
        assert len({r.speaker for r in records if r.label == label}) == 2
