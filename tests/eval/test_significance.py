"""Significance tests against exact enumeration and scipy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from app.eval.significance import friedman_tukey, paired_randomization_test, wilcoxon_test


def _exact_randomization_p(a, b):
    # all 2^n sign assignments of the paired differences, two-sided on |mean|
    diffs = np.asarray(b) - np.asarray(a)
    observed = abs(diffs.mean())
    means = [abs((np.array(signs) * diffs).mean()) for signs in itertools.product([-1, 1], repeat=len(diffs))]
    return np.mean(np.array(means) >= observed - 1e-12)


def test_randomization_test_approaches_exact_enumeration():
    a = np.array([0.2, 0.4, 0.1, 0.5, 0.3, 0.6, 0.2, 0.35, 0.4, 0.1])
    b = a + np.array([0.1, 0.05, 0.2, -0.05, 0.1, 0.15, 0.0, 0.1, 0.12, 0.08])
    exact = _exact_randomization_p(a, b)  # 1024 assignments
    p, significant = paired_randomization_test(a, b, n_permutations=20_000, seed=3)
    # Monte Carlo standard error at p ~ 0.01 with 20k draws is < 0.001
    assert p == pytest.approx(exact, abs=0.004)
    assert significant == (p < 0.05)
    assert paired_randomization_test(a, b, 2000, seed=3) == paired_randomization_test(a, b, 2000, seed=3)


def test_randomization_test_sees_no_difference_between_identical_systems():
    a = np.linspace(0, 1, 20)
    assert paired_randomization_test(a, a, 500, seed=0) == (1.0, False)


def test_wilcoxon_matches_scipy_and_handles_all_ties():
    rng = np.random.default_rng(0)
    a = rng.random(30)
    b = a + 0.1 + 0.05 * rng.standard_normal(30)
    p, significant = wilcoxon_test(a, b)
    assert p == pytest.approx(stats.wilcoxon(a, b).pvalue)
    assert significant
    assert wilcoxon_test(a, a) == (1.0, False)


def test_friedman_and_tukey_on_ranks():
    # 4 queries x 3 systems; C always best, A always worst -> mean ranks A=3, B=2, C=1
    scores = {"A": [0.1, 0.2, 0.1, 0.3], "B": [0.5, 0.4, 0.3, 0.5], "C": [0.9, 0.8, 0.7, 0.6]}
    result = friedman_tukey(scores)
    assert result.mean_ranks == {"A": 3.0, "B": 2.0, "C": 1.0}
    # Friedman chi2 = 12 / (n m (m+1)) * sum R_j^2 - 3 n (m+1) with rank sums 12, 8, 4:
    # 12 / (4*3*4) * (144 + 64 + 16) - 3*4*4 = 56 - 48 = 8
    assert result.statistic == pytest.approx(8.0)
    assert result.p_value == pytest.approx(stats.chi2.sf(8.0, 2))
    # HSD standard error sqrt(3*4 / (12*4)) = 0.5; A vs C: q = 2 / 0.5 = 4
    assert result.pairwise_p[("A", "C")] == pytest.approx(stats.studentized_range.sf(4.0, 3, np.inf))
    assert result.critical_difference == pytest.approx(stats.studentized_range.ppf(0.95, 3, np.inf) * 0.5)
    with pytest.raises(ValueError):
        friedman_tukey({"A": [1.0], "B": [2.0]})
