"""Minimal Test Collections for AG@k (Urbano and Schedl, paper 001, sections 3-5).

Gains of unjudged query-document pairs are random variables (see ``gain_models``). Then

* E[AG@k] and Var[AG@k] follow eq. 2, and for two systems A, B the difference follows eq. 4;
  over a query set, eq. 5 averages: E = (1/(k|Q|)) sum_i E[G_i] d_i and
  Var = (1/(k|Q|))^2 sum_i Var[G_i] d_i^2 with d_i = I(A_i <= k) - I(B_i <= k);
* the confidence in the sign of the difference is C_AB = max(P(D <= 0), 1 - P(D <= 0)) with
  P(D <= 0) = Phi(-E / sqrt(Var)) (eq. 6-7; the paper prints Phi(E / sqrt(Var)), which is
  P(D >= 0), but C_AB takes the max of both tails so the confidence is the same; when Var = 0
  the difference is known exactly and C_AB = 1, even for a tie);
* Algorithm 1 judges the unjudged pair with the largest weight w_i (eq. 8), the number of
  system pairs whose difference it enters. With S systems of which c_i retrieved pair i,
  w_i = c_i (S - c_i); ties are broken by larger Var[G_i], then by a seeded random order.

Judging updates the estimates incrementally: E per system and the (S, S) matrix of summed
variances change by one rank-one term per judgment, so a full simulation costs O(S^2) per step.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from app.eval.gain_models import moments, uniform_probabilities
from app.eval.judging_pool import JudgingPool, build_pool  # noqa: F401 (build_pool: re-exported, part of MTC's API)


# Var[G_i] is at most (max level)^2 / 4; 12 decimals keep every real difference between pairs
# and drop float residue (about 1e-16).
VARIANCE_DECIMALS = 12


@dataclass(frozen=True)
class PairEstimate:
    """Estimated mean difference in AG@k between two systems (A minus B) and its confidence."""

    system_a: str
    system_b: str
    expected_difference: float
    variance: float
    confidence: float


class MinimalTestCollection:
    """Estimates of every system's mean AG@k from a partial set of judgments.

    Args:
        pool: the pooled pairs (:func:`build_pool`).
        levels: the relevance levels L, e.g. (0, 1) or (0, 1, 2).
        probabilities: (n_pairs, |L|) gain distributions of unjudged pairs; uniform if None.
        seed: seed of the random tie-break between pairs of equal weight and variance.
    """

    def __init__(self, pool: JudgingPool, levels: Sequence[float], probabilities: np.ndarray | None = None, seed: int = 0) -> None:
        self.pool = pool
        self.levels = tuple(float(level) for level in levels)
        self._m = pool.membership.astype(float)
        self._scale = 1.0 / (pool.k * len(pool.queries))
        self.judged = np.zeros(len(pool), dtype=bool)
        self.gains = np.full(len(pool), np.nan)
        self._index = {pair: i for i, pair in enumerate(pool.pairs)}
        n_systems = len(pool.systems)
        retrieved_by = pool.membership.sum(axis=0)
        self.weights = retrieved_by * (n_systems - retrieved_by)
        self._tiebreak = np.random.default_rng(seed).permutation(len(pool))
        self.set_probabilities(uniform_probabilities(len(pool), self.levels) if probabilities is None else probabilities)

    # ------------------------------------------------------------ state

    def set_probabilities(self, probabilities: np.ndarray) -> None:
        """Replace the gain distributions of all unjudged pairs (judged pairs stay fixed)."""
        if probabilities.shape != (len(self.pool), len(self.levels)):
            raise ValueError(f"probabilities must be ({len(self.pool)}, {len(self.levels)}), got {probabilities.shape}")
        expectation, variance = moments(probabilities, self.levels)
        self.expectation = np.where(self.judged, self.gains, expectation)
        self.variance = np.where(self.judged, 0.0, variance)
        self._recompute()

    def _recompute(self) -> None:
        self._system_mean = self._scale * (self._m @ self.expectation)
        self._variance_sums = self._scale**2 * ((self._m * self.variance) @ self._m.T)
        # judge order: weight, then variance, then the seeded random order, all descending.
        # Variances equal in exact arithmetic (same features, same model) can differ in the last
        # bits, and which of them wins then hangs on rounding noise (a fit differing by 1e-9
        # between scipy releases changed a whole judging run); rounded, they tie for real and the
        # seeded order decides.
        self._order = np.lexsort((self._tiebreak, -np.round(self.variance, VARIANCE_DECIMALS), -self.weights))
        self._cursor = 0

    def judge(self, pair_index: int, gain: float) -> None:
        """Record the true gain of one pooled pair (Algorithm 1: E[G] <- gain, Var[G] <- 0)."""
        if float(gain) not in self.levels:
            raise ValueError(f"gain {gain} is not one of the levels {self.levels}")
        column = self._m[:, pair_index]
        self._system_mean += self._scale * column * (gain - self.expectation[pair_index])
        self._variance_sums -= self._scale**2 * self.variance[pair_index] * np.outer(column, column)
        self.expectation[pair_index] = gain
        self.variance[pair_index] = 0.0
        self.gains[pair_index] = gain
        self.judged[pair_index] = True

    def record(self, qid: str, doc: str, gain: float) -> bool:
        """Judge a pair by ids; returns False (and changes nothing) when no system pooled it."""
        pair_index = self._index.get((qid, doc))
        if pair_index is None:
            return False
        self.judge(pair_index, gain)
        return True

    def next_pairs(self, n: int = 1) -> list[int]:
        """The next ``n`` unjudged pairs to judge, best first; pairs of weight 0 are never proposed.

        A pair every system (or no system) retrieved enters no difference, so judging it cannot
        change any confidence.
        """
        chosen = []
        position = self._cursor
        while len(chosen) < n and position < len(self._order):
            i = int(self._order[position])
            position += 1
            if self.weights[i] == 0:
                break  # sorted by weight: the rest are all zero
            if not self.judged[i]:
                chosen.append(i)
        return chosen

    def next_pair(self) -> int | None:
        """The single best unjudged pair (Algorithm 1's argmax), or None when none has weight."""
        while self._cursor < len(self._order):
            i = int(self._order[self._cursor])
            if self.weights[i] == 0:
                return None
            if not self.judged[i]:
                return i
            self._cursor += 1
        return None

    # ------------------------------------------------------------ estimates

    def system_means(self) -> dict[str, float]:
        """E[mean AG@k] of every system over the queries."""
        return {name: float(v) for name, v in zip(self.pool.systems, self._system_mean)}

    def _pair_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        a, b = np.triu_indices(len(self.pool.systems), k=1)
        v = self._variance_sums
        expected = self._system_mean[a] - self._system_mean[b]
        variance = np.maximum(v[a, a] + v[b, b] - 2 * v[a, b], 0.0)
        return a, b, expected, variance

    def pairwise(self) -> list[PairEstimate]:
        """Estimate (eq. 5) and confidence (eq. 7) for every pair of systems, A before B in pool order."""
        a, b, expected, variance = self._pair_arrays()
        confidence = sign_confidences(expected, variance)
        names = self.pool.systems
        return [
            PairEstimate(names[i], names[j], float(e), float(v), float(c))
            for i, j, e, v, c in zip(a, b, expected, variance, confidence)
        ]

    def mean_confidence(self) -> float:
        """Confidence in the ranking: the mean of C_AB over all system pairs (Algorithm 1's stop rule)."""
        _, _, expected, variance = self._pair_arrays()
        return float(sign_confidences(expected, variance).mean())


def sign_confidences(expected: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """C = max(P(D <= 0), 1 - P(D <= 0)) for D ~ Normal(expected, variance), elementwise (eq. 6-7).

    With zero variance D is known: P(D <= 0) is 1 or 0 and the confidence is 1.
    """
    expected = np.asarray(expected, dtype=float)
    variance = np.asarray(variance, dtype=float)
    # variances this small are rounding residue of the incremental updates, not uncertainty
    known = variance <= 1e-18
    z = -expected / np.sqrt(np.where(known, 1.0, variance))
    p_not_positive = ndtr(z)
    return np.where(known, 1.0, np.maximum(p_not_positive, 1.0 - p_not_positive))


def truth_gains(pool: JudgingPool, qrels: Mapping[str, Mapping[str, float]]) -> np.ndarray:
    """True gain of every pooled pair from full judgments (unjudged in qrels = 0)."""
    return np.array([float(qrels.get(q, {}).get(d, 0)) for q, d in pool.pairs])


def ranking_accuracy(estimated: Mapping[str, float], true: Mapping[str, float]) -> tuple[float, float, int]:
    """Share of system pairs whose estimated sign of difference matches the truth (paper 001, 5).

    Pairs tied in the truth have no right order and are left out. A pair the estimate ties
    counts as not correct for accuracy and as neither correct nor incorrect for tau.

    Returns:
        (accuracy = correct / total, Kendall tau = (correct - incorrect) / total, total pairs compared)
    """
    correct = incorrect = total = 0
    for a, b in itertools.combinations(list(true), 2):
        true_diff = true[a] - true[b]
        if abs(true_diff) < 1e-12:
            continue
        estimated_sign = np.sign(estimated[a] - estimated[b])
        if estimated_sign == np.sign(true_diff):
            correct += 1
        elif estimated_sign != 0:  # an estimated tie is neither right nor wrong for tau
            incorrect += 1
        total += 1
    if total == 0:
        return 1.0, 1.0, 0
    return correct / total, (correct - incorrect) / total, total
