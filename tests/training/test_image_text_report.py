"""Report pieces: graded qrels, re-ranking order, CCA and random-order rivals."""

from __future__ import annotations

import numpy as np
import pytest

from app.training.image_text.report import content_words, graded_qrels, rankings_from_scores, rerank_scores
from app.training.image_text.rivals import fit_cca, random_order_metrics


def test_content_words_drop_stop_words_and_plurals() -> None:
    assert content_words("Two dogs are playing on the grass.") == {"dog", "playing", "grass"}
    assert content_words("A glass of water") == {"glass", "water"}  # "ss" is not a plural


def test_graded_qrels_mark_own_photo_and_partly_relevant_ones() -> None:
    captions = [("a dog runs on the beach", "brown dog"), ("a dog sleeps on a beach towel",), ("a red bus",)]
    queries = [(0, "a dog on the beach"), (2, "red bus in town")]
    binary, graded = graded_qrels(queries, captions)
    assert binary == {"q0": {"d0": 2}, "q1": {"d2": 2}}
    # photo 1 shares "dog" and "beach" with query 0 (two words); photo 2 shares none
    assert graded == {"q0": {"d0": 2, "d1": 1}, "q1": {"d2": 2}}


class _HeadPrefersLastImage:
    """Stand-in encoder whose head scores image i as i / n (it prefers the last one)."""

    def rerank(self, text: str, image_floats: np.ndarray) -> np.ndarray:
        return np.arange(len(image_floats)) / len(image_floats)


def test_rerank_reorders_only_the_shortlist() -> None:
    stage1 = np.array([[0.9, 0.8, 0.7, 0.6, 0.5]])
    images = np.eye(5, dtype=np.float32)
    scores = rerank_scores(_HeadPrefersLastImage(), ["q"], stage1, images, r=3)
    # shortlist = documents 0, 1, 2 (stage-1 order); the head reverses it; 3 and 4 follow by stage 1
    assert rankings_from_scores(scores)["q0"] == ["d2", "d1", "d0", "d3", "d4"]


def test_random_order_matches_its_expectation() -> None:
    # one relevant document among n = 10: E[R@1] = 1/10, E[R@5] = 1/2, E[rank] = (n + 1) / 2 = 5.5
    binary = {f"q{q}": {"d3": 2} for q in range(20)}
    values = random_order_metrics(20, 10, binary, binary, ["R@1", "R@5", "mean_rank"], n_shuffles=400, seed=1)
    assert values["R@1"].mean() == pytest.approx(0.1, abs=0.02)
    assert values["R@5"].mean() == pytest.approx(0.5, abs=0.03)
    assert values["mean_rank"].mean() == pytest.approx(5.5, abs=0.2)


def test_cca_recovers_a_planted_shared_signal() -> None:
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(600, 3))
    text = np.hstack([latent @ rng.normal(size=(3, 8)), rng.normal(size=(600, 12))]) + 0.1 * rng.normal(size=(600, 20))
    image = np.hstack([latent @ rng.normal(size=(3, 10)), rng.normal(size=(600, 15))]) + 0.1 * rng.normal(size=(600, 25))
    score = fit_cca(text[:500], image[:500], n_components=3, pca_dims=20)
    scores = score(text[500:], image[500:])  # 100 unseen pairs: each text should find its image
    ranks = (scores > np.diag(scores)[:, None]).sum(axis=1) + 1
    assert np.median(ranks) <= 3  # chance would be ~50
