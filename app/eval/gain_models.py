"""Distributions of unknown gains for Minimal Test Collections (paper 001, section 4).

An unjudged query-document pair has a gain G_i drawn from a distribution over the relevance
levels L. Two sources for that distribution:

* a uniform prior, P(G_i = l) = 1 / |L| (section 4.1; for L = {0, 1, 2}: E = 1, Var = 2/3);
* an ordinal (proportional-odds) logistic model, eq. 9-10, fitted on output-based features
  that exist without any judgment (section 4.2.1): the share of systems that retrieved the
  document in their top k (pSYS), its average normalised rank over systems (aRANK), and its
  best rank. The model can be fitted on another collection's judgments (ranking with no
  judgments at all, section 5.2) or refitted on the judgments made so far.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.eval.judging_pool import JudgingPool

FEATURE_NAMES = ("p_systems", "mean_rank", "best_rank")


def uniform_probabilities(n_pairs: int, levels: Sequence[float]) -> np.ndarray:
    """(n_pairs, |L|) matrix with every level equally likely."""
    return np.full((n_pairs, len(levels)), 1.0 / len(levels))


def output_features(pool: JudgingPool) -> np.ndarray:
    """Output-based features of every pooled pair, shape (n_pairs, 3), in FEATURE_NAMES order.

    Ranks are normalised by k; a system that did not retrieve the document in its top k counts
    as rank k + 1, so mean_rank is defined for every pair and stays in (0, (k+1)/k].
    """
    retrieved = pool.membership
    n_systems = retrieved.shape[0]
    # integer sums first, one division last: the features of two pairs with the same ranks in
    # another system order are then bit-identical (float means depend on summation order)
    ranks = np.where(retrieved, pool.ranks, pool.k + 1)
    return np.column_stack([
        retrieved.sum(axis=0) / n_systems, ranks.sum(axis=0) / (n_systems * pool.k), ranks.min(axis=0) / pool.k,
    ])


class OrdinalGainModel:
    """Proportional-odds logistic regression (statsmodels ``OrderedModel``) over gain levels.

    Features are standardised with the training mean and std before fitting, which keeps the
    optimiser well conditioned. When the training labels use a single level, or the fit fails
    (complete separation on tiny samples), the model falls back to the Laplace-smoothed label
    frequencies, so callers always get a valid distribution.
    """

    def __init__(self, levels: Sequence[float]) -> None:
        self.levels = np.asarray(sorted(levels), dtype=float)
        self._mean = np.zeros(0)
        self._std = np.ones(0)
        self._params: np.ndarray | None = None
        self._observed: np.ndarray = np.zeros(0, dtype=int)  # level indices seen in training
        self._fallback = np.full(len(self.levels), 1.0 / len(self.levels))

    def fit(self, features: np.ndarray, labels: Sequence[float]) -> OrdinalGainModel:
        """Fit on (n, d) features and the n true gains (each one of ``levels``).

        Raises:
            ValueError: a label that is not one of the levels.
        """
        from statsmodels.miscmodels.ordinal_model import OrderedModel

        x = np.asarray(features, dtype=float)
        y = np.asarray(labels, dtype=float)
        index = np.searchsorted(self.levels, y)
        if np.any(index >= len(self.levels)) or np.any(self.levels[np.minimum(index, len(self.levels) - 1)] != y):
            raise ValueError(f"labels must be among the levels {self.levels.tolist()}")
        counts = np.bincount(index, minlength=len(self.levels)) + 1.0
        self._fallback = counts / counts.sum()
        self._mean = x.mean(axis=0)
        self._std = np.where(x.std(axis=0) > 1e-9, x.std(axis=0), 1.0)
        self._params = None
        self._observed = np.unique(index)
        if self._observed.size < 2:
            return self
        z = (x - self._mean) / self._std
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence and overflow warnings on separable data
            try:
                result = OrderedModel(index, z, distr="logit").fit(method="bfgs", disp=False, maxiter=200)
                params = np.asarray(result.params, dtype=float)
            except (np.linalg.LinAlgError, ValueError):
                return self
        if np.all(np.isfinite(params)):
            self._params = params
        return self

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """(n, |L|) probabilities of each level; levels never seen in training get probability 0."""
        x = np.asarray(features, dtype=float)
        if self._params is None:
            return np.tile(self._fallback, (x.shape[0], 1))
        z = (x - self._mean) / self._std
        n_features = z.shape[1]
        beta = self._params[:n_features]
        # statsmodels parametrises thresholds as first value then log-increments
        raw = self._params[n_features:]
        thresholds = np.concatenate([[raw[0]], raw[0] + np.cumsum(np.exp(raw[1:]))])
        linear = z @ beta
        # P(G <= level j) = sigmoid(threshold_j - x.beta); eq. 10 differences the cumulative
        cumulative = 1.0 / (1.0 + np.exp(-(thresholds[None, :] - linear[:, None])))
        cumulative = np.column_stack([np.zeros(len(z)), cumulative, np.ones(len(z))])
        observed_probs = np.diff(cumulative, axis=1)
        probs = np.zeros((len(z), len(self.levels)))
        probs[:, self._observed] = observed_probs
        return probs


def moments(probabilities: np.ndarray, levels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """E[G_i] and Var[G_i] of eq. 1 for each row of an (n, |L|) probability matrix."""
    values = np.asarray(levels, dtype=float)
    expectation = probabilities @ values
    variance = np.maximum(probabilities @ values**2 - expectation**2, 0.0)
    return expectation, variance
