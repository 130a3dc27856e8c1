"""The TF-IDF fallback agrees with scikit-learn; the cache returns what the features return."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from app.encoders.image_text.text_features import CachedFeatures, TfidfFeatures, features_from_config, tokenise

SENTENCES = [
    "A red circle on the left",
    "two blue squares at the top",
    "A red square on a striped green background",
    "the circle is red, the background is blue",
]


def test_tfidf_matches_scikit_learn() -> None:
    ours = TfidfFeatures.fit(SENTENCES)
    reference = TfidfVectorizer()  # smooth idf, l2 norm, the same token pattern
    expected = reference.fit_transform(SENTENCES).toarray()
    assert ours.vocabulary == sorted(reference.vocabulary_, key=reference.vocabulary_.get)
    np.testing.assert_allclose(ours(SENTENCES), expected, atol=1e-6)
    # unseen words are ignored; a sentence of only unseen words is the zero vector, not NaN
    np.testing.assert_allclose(ours(["purple hexagon"]), 0.0)


def test_tfidf_round_trips_through_its_config() -> None:
    fitted = TfidfFeatures.fit(SENTENCES)
    rebuilt = features_from_config(fitted.config())
    np.testing.assert_array_equal(rebuilt(SENTENCES), fitted(SENTENCES))
    with pytest.raises(ValueError):
        features_from_config({"kind": "word2vec"})


def test_tokenise_lowercases_and_drops_one_letter_words() -> None:
    assert tokenise("A Red circle, 2 dogs!") == ["red", "circle", "dogs"]


def test_cache_returns_the_same_vectors(tmp_path) -> None:
    fitted = TfidfFeatures.fit(SENTENCES)
    cached = CachedFeatures(fitted, tmp_path)
    first = cached(SENTENCES[::-1])
    np.testing.assert_array_equal(first, fitted(SENTENCES[::-1]))
    assert list(tmp_path.iterdir())  # written to disk
    again = CachedFeatures(fitted, tmp_path)(SENTENCES[::-1])  # a fresh object reads the file
    np.testing.assert_array_equal(again, first)
