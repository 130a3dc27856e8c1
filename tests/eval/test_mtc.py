"""Minimal Test Collections checked against brute-force enumeration and simulations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import norm

from app.eval.gain_models import OrdinalGainModel, output_features
from app.eval.mtc import MinimalTestCollection, build_pool, ranking_accuracy, sign_confidences
from app.eval.mtc_simulation import fit_prior_model, simulate_mtc

TINY = {
    "A": {"q1": ["a", "b", "c"], "q2": ["x", "y"]},
    "B": {"q1": ["b", "d", "a"], "q2": ["z", "x"]},
    "C": {"q1": ["a", "b"], "q2": ["y", "x"]},
}


def _ag(ranking, gains, k):
    return sum(gains.get(doc, 0) for doc in ranking[:k]) / k


def test_pool_and_weights_follow_eq_8():
    pool = build_pool(TINY, k=2)
    assert sorted(pool.pairs) == sorted([("q1", "a"), ("q1", "b"), ("q1", "d"), ("q2", "x"), ("q2", "y"), ("q2", "z")])
    mtc = MinimalTestCollection(pool, (0, 1))
    for i, (qid, doc) in enumerate(pool.pairs):
        # eq. 8 literally: sum over system pairs of (I(A_i <= k) - I(B_i <= k))^2
        inside = {s: doc in TINY[s][qid][:2] for s in TINY}
        expected = sum((inside[a] - inside[b]) ** 2 for a, b in itertools.combinations(TINY, 2))
        assert mtc.weights[i] == expected
    # ("q1", "b") is in every top 2: it can never separate two systems
    assert mtc.weights[pool.pairs.index(("q1", "b"))] == 0
    assert ("q1", "b") not in [pool.pairs[i] for i in mtc.next_pairs(10)]


def test_expectation_and_variance_match_enumeration_of_all_gain_assignments():
    levels = (0, 1, 2)
    pool = build_pool(TINY, k=2)
    mtc = MinimalTestCollection(pool, levels)
    mtc.record("q2", "x", 2)  # one judged pair: its gain is fixed in every assignment
    free = [p for p in pool.pairs if p != ("q2", "x")]
    differences = {pair: [] for pair in itertools.combinations(TINY, 2)}
    # uniform prior: every assignment of the 5 free gains is equally likely (3^5 = 243)
    for assignment in itertools.product(levels, repeat=len(free)):
        gains = {("q2", "x"): 2} | dict(zip(free, assignment))
        means = {}
        for s in TINY:
            per_query = [_ag(TINY[s][q], {d: g for (qq, d), g in gains.items() if qq == q}, 2) for q in ("q1", "q2")]
            means[s] = np.mean(per_query)
        for a, b in differences:
            differences[(a, b)].append(means[a] - means[b])
    for estimate in mtc.pairwise():
        values = np.array(differences[(estimate.system_a, estimate.system_b)])
        assert estimate.expected_difference == pytest.approx(values.mean(), abs=1e-12)
        assert estimate.variance == pytest.approx(values.var(), abs=1e-12)


def test_sign_confidence_is_the_normal_tail_and_one_when_known():
    # E = 0.1, sd = 0.1: P(D <= 0) = Phi(-1) = 0.1587 -> C = 0.8413
    np.testing.assert_allclose(sign_confidences([0.1, -0.1], [0.01, 0.01]), [norm.cdf(1.0)] * 2)
    np.testing.assert_allclose(sign_confidences([0.0, 0.3, 0.0], [0.0, 0.0, 1.0]), [1.0, 1.0, 0.5])


def _synthetic(seed=0, n_queries=40, n_docs=30):
    """Systems of decreasing quality: scores = gain + noise with growing noise."""
    rng = np.random.default_rng(seed)
    qrels = {f"q{q}": {f"d{d}": int(rng.choice([0, 0, 1, 2])) for d in range(n_docs)} for q in range(n_queries)}
    runs = {}
    for name, noise in [("good", 0.4), ("fair", 1.0), ("poor", 2.5), ("bad", 6.0)]:
        runs[name] = {}
        for q, gains in qrels.items():
            scores = {d: g + noise * rng.standard_normal() for d, g in gains.items()}
            runs[name][q] = sorted(scores, key=lambda d: -scores[d])
    return runs, qrels


def test_confidence_is_one_and_order_exact_when_everything_is_judged():
    runs, qrels = _synthetic()
    pool = build_pool(runs, k=5)
    mtc = MinimalTestCollection(pool, (0, 1, 2))
    for qid, doc in pool.pairs:
        mtc.record(qid, doc, qrels[qid][doc])
    assert mtc.mean_confidence() == 1.0
    truth = {s: np.mean([_ag(runs[s][q], qrels[q], 5) for q in qrels]) for s in runs}
    for name, mean in mtc.system_means().items():
        assert mean == pytest.approx(truth[name], abs=1e-12)


def test_incremental_updates_equal_a_full_recomputation():
    runs, qrels = _synthetic(seed=1, n_queries=10)
    pool = build_pool(runs, k=5)
    mtc = MinimalTestCollection(pool, (0, 1, 2))
    for i in mtc.next_pairs(25):
        mtc.judge(i, qrels[pool.pairs[i][0]][pool.pairs[i][1]])
    before = [(p.expected_difference, p.variance) for p in mtc.pairwise()]
    mtc.set_probabilities(np.full((len(pool), 3), 1 / 3))  # recomputes every sum from scratch
    after = [(p.expected_difference, p.variance) for p in mtc.pairwise()]
    np.testing.assert_allclose(before, after, atol=1e-12)


def test_simulated_mtc_gets_the_sign_of_two_systems_right_with_fewer_judgments():
    runs, qrels = _synthetic(seed=2)
    pool = build_pool({"fair": runs["fair"], "poor": runs["poor"]}, k=5)
    result = simulate_mtc(pool, qrels, (0, 1, 2), stop_at_target=True)
    assert result.true_means["fair"] > result.true_means["poor"]
    assert result.at_target.confidence >= 0.95
    assert result.estimated_means_at_target["fair"] > result.estimated_means_at_target["poor"]
    # exhaustive judging would need every pair one system retrieved and the other did not
    assert result.judgments_at_target < 0.5 * result.pool_size


def test_simulated_mtc_on_four_systems_uniform_and_ordinal_prior():
    runs, qrels = _synthetic(seed=2)
    pool = build_pool(runs, k=5)
    uniform = simulate_mtc(pool, qrels, (0, 1, 2))
    assert uniform.judgments_at_target < 0.5 * uniform.pool_size
    # with a uniform prior, 95% mean confidence still leaves the close pair (poor 1.10 vs bad
    # 1.00) open: 5 of 6 pairs are right at that point
    assert uniform.at_target.accuracy >= 5 / 6
    assert uniform.trace[-1].confidence == 1.0 and uniform.trace[-1].accuracy == 1.0
    # an ordinal model fitted on another collection (the paper's L_output) needs fewer
    # judgments and gets every pair right here; with no judgments at all it is already right
    other_runs, other_qrels = _synthetic(seed=12)
    prior = fit_prior_model(build_pool(other_runs, k=5), other_qrels, (0, 1, 2))
    ordinal = simulate_mtc(pool, qrels, (0, 1, 2), gain_model="ordinal", prior_model=prior)
    assert ordinal.judgments_at_target < uniform.judgments_at_target
    assert ordinal.at_target.accuracy == 1.0
    assert ordinal.no_judgments.accuracy == 1.0 and ordinal.no_judgments.confidence > 0.8
    assert uniform.no_judgments.confidence == 0.5  # a uniform prior cannot rank without judgments


def test_ordinal_model_probabilities_match_statsmodels():
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    runs, qrels = _synthetic(seed=4, n_queries=15)
    pool = build_pool(runs, k=5)
    features = output_features(pool)
    labels = np.array([qrels[q][d] for q, d in pool.pairs])
    model = OrdinalGainModel((0, 1, 2)).fit(features, labels)
    z = (features - features.mean(0)) / features.std(0)
    reference = OrderedModel(labels, z, distr="logit").fit(method="bfgs", disp=False, maxiter=200).predict(z)
    np.testing.assert_allclose(model.predict_proba(features), reference, atol=1e-6)
    # documents many systems put high are more likely relevant
    probs = model.predict_proba(features)
    assert probs[features[:, 0] == 1.0, 2].mean() > probs[features[:, 0] < 0.5, 2].mean()


def test_ordinal_model_falls_back_to_smoothed_frequencies_with_one_level():
    model = OrdinalGainModel((0, 1, 2)).fit(np.random.default_rng(0).random((6, 3)), [1] * 6)
    # Laplace counts (1, 7, 1) / 9
    np.testing.assert_allclose(model.predict_proba(np.zeros((2, 3))), [[1 / 9, 7 / 9, 1 / 9]] * 2)


def test_ranking_accuracy_and_tau():
    true = {"a": 3.0, "b": 2.0, "c": 1.0}
    assert ranking_accuracy({"a": 3, "b": 2, "c": 1}, true) == (1.0, 1.0, 3)
    # one of three pairs swapped (b, c): accuracy 2/3, tau (2 - 1) / 3
    accuracy, tau, total = ranking_accuracy({"a": 3, "b": 1, "c": 2}, true)
    assert (accuracy, tau, total) == pytest.approx((2 / 3, 1 / 3, 3))
