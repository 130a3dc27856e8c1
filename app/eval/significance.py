"""Paired significance tests over per-query scores.

* Wilcoxon signed-rank test (paper 003 compares rankings with it, two-sided).
* Paired randomisation (permutation) test: Smucker, Allan and Carterette, "A Comparison of
  Statistical Significance Tests for Information Retrieval Evaluation", CIKM '07 -- the test
  they recommend for IR, and the one ranx defaults to.
* Friedman test over several systems followed by Tukey's HSD on the within-query ranks, the
  MIREX procedure paper 001 describes.

Every function takes per-query arrays aligned by query (same order for every system).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def _paired(control: Sequence[float], treatment: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(control, dtype=float)
    b = np.asarray(treatment, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores must be two 1-d arrays of equal length, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("need at least one query")
    return a, b


def wilcoxon_test(control: Sequence[float], treatment: Sequence[float], alpha: float = 0.05) -> tuple[float, bool]:
    """Two-sided Wilcoxon signed-rank test on paired per-query scores (scipy).

    Zero differences are dropped (Wilcoxon's original treatment, scipy's ``zero_method="wilcox"``).
    When every difference is zero there is no evidence of a difference: p = 1.

    Returns:
        (p_value, p_value < alpha)
    """
    a, b = _paired(control, treatment)
    if np.all(a == b):
        return 1.0, False
    p_value = float(stats.wilcoxon(a, b, zero_method="wilcox", alternative="two-sided").pvalue)
    return p_value, p_value < alpha


def paired_randomization_test(
    control: Sequence[float],
    treatment: Sequence[float],
    n_permutations: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, bool]:
    """Two-sided paired randomisation test on the mean difference (Smucker et al., CIKM '07).

    Under the null hypothesis the two systems' labels are exchangeable within each query, so
    each per-query difference keeps or flips its sign with probability 1/2. The p-value is the
    share of random sign assignments whose |mean difference| reaches the observed one, counting
    the observed assignment itself: p = (1 + hits) / (1 + n_permutations), never exactly 0.

    Args:
        control: per-query scores of the baseline.
        treatment: per-query scores of the new system, same query order.
        n_permutations: random sign assignments to draw.
        seed: seed of the generator, so a report is reproducible.
        alpha: significance level.

    Returns:
        (p_value, p_value < alpha)
    """
    a, b = _paired(control, treatment)
    if n_permutations < 1:
        raise ValueError("n_permutations must be >= 1")
    diffs = b - a
    observed = abs(diffs.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, min(n_permutations, 2_000_000 // diffs.size))  # bound memory on large query sets
    done = 0
    while done < n_permutations:
        n = min(chunk, n_permutations - done)
        signs = rng.integers(0, 2, size=(n, diffs.size), dtype=np.int8) * 2 - 1
        permuted = np.abs(signs @ diffs) / diffs.size
        # tolerance: the identity permutation must count as a hit despite float rounding
        hits += int(np.count_nonzero(permuted >= observed - 1e-12))
        done += n
    p_value = (1 + hits) / (1 + n_permutations)
    return p_value, p_value < alpha


@dataclass(frozen=True)
class FriedmanResult:
    """Friedman test over systems plus Tukey HSD on mean within-query ranks."""

    statistic: float
    p_value: float
    mean_ranks: dict[str, float]  # rank 1 = best system on a query (higher score)
    critical_difference: float  # minimum |mean rank difference| that is significant at alpha
    pairwise_p: dict[tuple[str, str], float]


def friedman_tukey(scores: Mapping[str, Sequence[float]], alpha: float = 0.05) -> FriedmanResult:
    """Friedman test with Tukey's HSD multiple comparison on ranks (MIREX, paper 001).

    Each query ranks the systems (average ranks for ties). Friedman's chi-square tests whether
    any mean rank differs. Tukey's HSD then compares mean ranks pairwise with the studentized
    range distribution with infinite degrees of freedom and standard error
    sqrt(m (m + 1) / (12 n)) for m systems and n queries (the large-sample procedure of
    MATLAB's ``multcompare`` on Friedman statistics, which MIREX uses).

    Raises:
        ValueError: fewer than three systems or unequal lengths.
    """
    names = list(scores)
    if len(names) < 3:
        raise ValueError("Friedman needs at least three systems; use a paired test for two")
    matrix = np.column_stack([np.asarray(scores[n], dtype=float) for n in names])  # (n_queries, m)
    n_queries, m = matrix.shape
    if np.all(matrix == matrix[:, :1]):
        statistic, p_value = 0.0, 1.0  # scipy divides by zero when every query ties all systems
    else:
        result = stats.friedmanchisquare(*matrix.T)
        statistic, p_value = float(result.statistic), float(result.pvalue)
    ranks = stats.rankdata(-matrix, axis=1)  # rank 1 = highest score
    mean_ranks = ranks.mean(axis=0)
    standard_error = np.sqrt(m * (m + 1) / (12.0 * n_queries))
    critical = float(stats.studentized_range.ppf(1 - alpha, m, np.inf) * standard_error)
    pairwise = {}
    for i, j in itertools.combinations(range(m), 2):
        q = abs(mean_ranks[i] - mean_ranks[j]) / standard_error
        pairwise[(names[i], names[j])] = float(stats.studentized_range.sf(q, m, np.inf))
    return FriedmanResult(
        statistic=statistic,
        p_value=p_value,
        mean_ranks={n: float(r) for n, r in zip(names, mean_ranks)},
        critical_difference=critical,
        pairwise_p=pairwise,
    )
