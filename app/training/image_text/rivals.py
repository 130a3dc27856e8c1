"""The systems the image-text model is compared with: CCA (paper 003's baseline) and random order."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from sklearn.cross_decomposition import CCA
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from app.eval.metrics import evaluate


def fit_cca(text_features: np.ndarray, image_features: np.ndarray, n_components: int,
            max_iter: int = 1000, pca_dims: int = 96) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Fit CCA on paired (text, image) rows; return ``score(query_text, database_images)``.

    corr(T U, R V) -> max over U, V, as in the paper. Each view is standardised and reduced to
    its first ``pca_dims`` principal components first: with ~2000 pairs and 960 CNN features,
    CCA on the raw features overfits (finds perfectly correlated directions in noise) and
    scikit-learn's NIPALS iterations do not converge. Scores are cosines between the projected
    query and the projected images, so every canonical direction counts equally.

    Returns:
        A function mapping (q, text_dim) and (n, image_dim) arrays to (q, n) scores.
    """
    def reducer(x: np.ndarray):
        dims = min(pca_dims, x.shape[1], len(x) - 1)
        return make_pipeline(StandardScaler(), PCA(dims, random_state=0)).fit(np.asarray(x, np.float64))

    text_reducer, image_reducer = reducer(text_features), reducer(image_features)
    x, y = text_reducer.transform(text_features), image_reducer.transform(image_features)
    n_components = min(n_components, x.shape[1], y.shape[1], len(x) - 1)
    model = CCA(n_components=n_components, scale=True, max_iter=max_iter)
    model.fit(x, y)

    def score(query_text: np.ndarray, database_images: np.ndarray) -> np.ndarray:
        # transform(X, Y) projects both views; pair each query with a dummy image row, and
        # each image with a dummy text row, then keep the side that matters
        q = len(query_text)
        n = len(database_images)
        text_proj, _ = model.transform(text_reducer.transform(np.asarray(query_text, np.float64)),
                                       np.zeros((q, y.shape[1])))
        _, image_proj = model.transform(np.zeros((n, x.shape[1])),
                                        image_reducer.transform(np.asarray(database_images, np.float64)))
        text_proj /= np.maximum(np.linalg.norm(text_proj, axis=1, keepdims=True), 1e-12)
        image_proj /= np.maximum(np.linalg.norm(image_proj, axis=1, keepdims=True), 1e-12)
        return text_proj @ image_proj.T

    return score


def random_order_metrics(n_queries: int, n_documents: int, binary: dict, graded: dict, metrics: Sequence[str],
                         n_shuffles: int = 100, seed: int = 0) -> dict[str, np.ndarray]:
    """Per-query metrics of a random ranking, averaged over ``n_shuffles`` shuffles (as the paper does).

    Args:
        binary: qrels for R@K and rank (only the own photo relevant).
        graded: qrels for weighted precision (wP@K names).
    """
    rng = np.random.default_rng(seed)
    totals: dict[str, np.ndarray] = {m: np.zeros(n_queries) for m in metrics}
    for _ in range(n_shuffles):
        rankings = {f"q{q}": [f"d{d}" for d in rng.permutation(n_documents)] for q in range(n_queries)}
        for metric in metrics:
            qrels = graded if metric.startswith("wP") else binary
            _, values = evaluate(rankings, qrels, [metric])
            totals[metric] += values[metric]
    return {m: v / n_shuffles for m, v in totals.items()}
