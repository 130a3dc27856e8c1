"""Hand-computed cases for every metric; the arithmetic is in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.eval import metrics as m

# One query, five retrieved documents; three relevant documents in the qrels, one of which
# (d6) was never retrieved. Gains are graded: d3 is highly relevant.
RANKING = ["d1", "d2", "d3", "d4", "d5"]
QRELS = {"d1": 1, "d2": 0, "d3": 2, "d6": 1}


def test_precision_at_k_divides_by_k_even_past_the_end():
    assert m.precision_at_k(RANKING, QRELS, 1) == 1.0  # d1 relevant
    assert m.precision_at_k(RANKING, QRELS, 5) == pytest.approx(2 / 5)  # d1, d3
    assert m.precision_at_k(RANKING, QRELS, 10) == pytest.approx(2 / 10)  # trec_eval P_10 on a short list


def test_average_precision_divides_by_all_relevant():
    # hits at ranks 1 and 3: P@1 = 1, P@3 = 2/3; |relevant| = 3 (d6 counts as precision 0)
    # AP = (1 + 2/3) / 3 = 5/9
    assert m.average_precision(RANKING, QRELS) == pytest.approx(5 / 9)
    # map@2 only sees rank 1: (1) / 3
    assert m.average_precision(RANKING, QRELS, k=2) == pytest.approx(1 / 3)


def test_mp1_is_precision_at_first_hit():
    assert m.precision_at_first_hit(RANKING, QRELS) == 1.0
    # first hit at rank 2 -> 1/2 (paper 000: MP@1 = 0.3 means the first hit near rank 3)
    assert m.precision_at_first_hit(["d2", "d3"], QRELS) == pytest.approx(0.5)
    assert m.precision_at_first_hit(["d2", "d4"], QRELS) == 0.0


def test_paper_004_precision_at_n_and_mean_precision_to_n():
    # N = 3 relevant; top 3 = d1 (rel), d2, d3 (rel) -> P@N = 2/3
    assert m.precision_at_n(RANKING, QRELS) == pytest.approx(2 / 3)
    # eq. 13: (P@1 + P@2 + P@3) / 3 = (1 + 1/2 + 2/3) / 3 = 13/18
    assert m.mean_precision_to_n(RANKING, QRELS) == pytest.approx(13 / 18)
    # a one-document ranking: P@1 = 1, P@2 = 1/2, P@3 = 1/3 -> 11/18
    assert m.mean_precision_to_n(["d1"], QRELS) == pytest.approx(11 / 18)


def test_recall_hit_and_rank():
    assert m.recall_at_k(RANKING, QRELS, 5) == pytest.approx(2 / 3)
    assert m.hit_at_k(["d2", "d3"], QRELS, 1) == 0.0
    assert m.hit_at_k(["d2", "d3"], QRELS, 2) == 1.0
    assert m.first_relevant_rank(["d2", "d4", "d3"], QRELS) == 3.0
    assert m.first_relevant_rank(["d2"], QRELS) == math.inf


def test_graded_metrics():
    # AG@5 = (1 + 0 + 2 + 0 + 0) / 5
    assert m.average_gain_at_k(RANKING, QRELS, 5) == pytest.approx(0.6)
    # paper 003 weights: gain 1 -> 0.5, gain 2 -> 1.0: (0.5 + 1.0) / 5
    assert m.weighted_precision_at_k(RANKING, QRELS, 5) == pytest.approx(0.3)
    # DCG@5 = 1/log2(2) + 2/log2(4) = 2; IDCG@5 = 2/log2(2) + 1/log2(3) + 1/log2(4) = 3.130930
    assert m.ndcg_at_k(RANKING, QRELS, 5) == pytest.approx(2 / (2 + 1 / math.log2(3) + 0.5))


def test_queries_without_relevant_documents_score_zero():
    empty = {"d1": 0}
    for fn in (m.average_precision, m.precision_at_n, m.mean_precision_to_n, m.precision_at_first_hit):
        assert fn(RANKING, empty) == 0.0
    assert m.ndcg_at_k(RANKING, empty, 5) == 0.0
    assert m.recall_at_k(RANKING, empty, 5) == 0.0


def test_temporal_iou_and_segment_metrics():
    truth = {"v1": [(10.0, 20.0)]}
    segments = [("v1", 12.0, 22.0), ("v2", 10.0, 20.0), ("v1", 10.0, 20.0)]
    # overlap 12..20 = 8, union 10..22 = 12 -> 2/3; other item -> 0; exact span -> 1
    assert m.temporal_iou((12, 22), (10, 20)) == pytest.approx(2 / 3)
    assert m.temporal_iou((0, 5), (5, 9)) == 0.0
    assert [m.segment_relevance(s, truth) for s in segments] == pytest.approx([2 / 3, 0.0, 1.0])
    # running max of r: 2/3, 2/3, 1 -> AxIoU@3 = (2/3 + 2/3 + 1) / 3 = 7/9
    assert m.axiou_at_k(segments, truth, 3) == pytest.approx(7 / 9)
    assert m.axiou_at_k(segments, truth, 1) == pytest.approx(2 / 3)
    # past the list the running max stays 1: (2/3 + 2/3 + 1 + 1 + 1) / 5 = 13/15
    assert m.axiou_at_k(segments, truth, 5) == pytest.approx(13 / 15)
    assert m.recall_at_k_theta(segments, truth, 1, 0.5) == 1.0
    assert m.recall_at_k_theta(segments, truth, 1, 0.7) == 0.0
    assert m.recall_at_k_theta(segments, truth, 3, 0.7) == 1.0
    assert m.axiou_at_k([], truth, 3) == 0.0


def test_evaluate_uses_qrels_queries_and_aggregates():
    rankings = {"q1": RANKING, "q_unjudged": ["d1"]}
    qrels = {"q1": QRELS, "q2": {"d9": 1}}  # q2 has no answer in the run -> scores 0
    qids, per_query = m.evaluate(rankings, qrels, ["map", "P@5", "median_rank", "mean_rank"])
    assert qids == ["q1", "q2"]
    np.testing.assert_allclose(per_query["map"], [5 / 9, 0.0])
    np.testing.assert_allclose(per_query["P@5"], [0.4, 0.0])
    summary = m.aggregate(per_query)
    assert summary["map"] == pytest.approx(5 / 18)
    assert summary["median_rank"] == math.inf  # median of [1, inf]
    assert summary["mean_rank"] == math.inf


def test_text_to_image_ranks_follow_open_clip():
    # three captions, one target image each, found at ranks 1, 3 and 4
    rankings = {"c1": ["i1", "i2"], "c2": ["i1", "i3", "i2"], "c3": ["i1", "i2", "i4", "i3"]}
    qrels = {"c1": {"i1": 1}, "c2": {"i2": 1}, "c3": {"i3": 1}}
    _, per_query = m.evaluate(rankings, qrels, ["R@1", "R@3", "mean_rank", "median_rank"])
    summary = m.aggregate(per_query)
    assert summary["R@1"] == pytest.approx(1 / 3) and summary["R@3"] == pytest.approx(2 / 3)
    assert summary["mean_rank"] == pytest.approx((1 + 3 + 4) / 3)
    assert summary["median_rank"] == 3.0


@pytest.mark.parametrize("name", ["P@0", "P@x", "foo", "ndcg@", "bogus@3"])
def test_unknown_metric_names_are_refused(name):
    with pytest.raises(ValueError):
        m.metric_function(name)


def test_every_default_cli_metric_is_known():
    from app.eval.cli import DEFAULT_METRICS

    for name in DEFAULT_METRICS:
        assert m.metric_function(name)(RANKING, QRELS) >= 0


def test_report_curves_by_hand():
    from app.eval.report import interpolated_precision_recall, mp_at_k_curve, per_class_precision

    rankings = {"q": ["r1", "n1", "r2"]}
    qrels = {"q": {"r1": 1, "r2": 1}}
    # precision 1, 1/2, 2/3 at recall 1/2, 1/2, 1: interpolated precision is 1 up to recall 0.5,
    # then the best precision reaching recall >= 0.6 is 2/3
    np.testing.assert_allclose(interpolated_precision_recall(rankings, qrels), [1.0] * 6 + [2 / 3] * 5)
    np.testing.assert_allclose(mp_at_k_curve(rankings, qrels, 4), [1.0, 0.5, 2 / 3, 0.5])
    assert per_class_precision(rankings, qrels, {"q": "dog"}, 2) == {"dog": 0.5}
