"""TREC run / qrels / segment files: round trips, trec_eval ordering, malformed input."""

from __future__ import annotations

import pytest

from app.eval import trec


def test_run_round_trip_keeps_order_and_makes_ties_distinct(tmp_path):
    rankings = {
        "q2": [("b", 0.5), ("a", 0.5), ("c", 0.5)],  # three-way tie: our order must survive
        "q1": [("x", 3.0), ("y", 2.0)],
    }
    path = tmp_path / "run.txt"
    trec.write_run(path, rankings, run_id="sys1")
    lines = path.read_text().splitlines()
    assert lines[0].split() == ["q1", "Q0", "x", "1", "3", "sys1"]
    run, run_id = trec.read_run(path)
    assert run_id == "sys1"
    # trec_eval re-sorts by score: the written scores must reproduce our order exactly
    assert trec.rankings_from_run(run) == {"q1": ["x", "y"], "q2": ["b", "a", "c"]}
    scores = [run["q2"][d] for d in ("b", "a", "c")]
    assert scores[0] > scores[1] > scores[2]
    assert scores[0] == 0.5  # the first of a tie keeps its value


def test_rankings_break_score_ties_by_docno_descending_like_trec_eval():
    assert trec.rankings_from_run({"q": {"a": 1.0, "c": 1.0, "b": 2.0}}) == {"q": ["b", "c", "a"]}


def test_distinct_scores_only_changes_ties_and_inversions():
    assert trec.distinct_scores([3.0, 2.0, 1.0]) == [3.0, 2.0, 1.0]
    out = trec.distinct_scores([1.0, 1.0, 2.0])
    assert out[0] == 1.0 and out[0] > out[1] > out[2]


def test_qrels_round_trip_graded(tmp_path):
    qrels = {"q1": {"d1": 2, "d2": 0}, "q2": {"d9": 1}}
    path = tmp_path / "qrels.txt"
    trec.write_qrels(path, qrels)
    assert path.read_text().splitlines() == ["q1 0 d1 2", "q1 0 d2 0", "q2 0 d9 1"]
    assert trec.read_qrels(path) == qrels


def test_segment_run_and_truth_round_trip(tmp_path):
    segments = {"q1": [(("rec1", 1.5, 3.0), -0.1), (("rec2", 0.0, 1.0), -0.4)]}
    path = tmp_path / "run.segments"
    trec.write_segment_run(path, segments)
    assert path.read_text().splitlines()[0] == "q1 rec1 1.500 3.000 -0.1"
    assert trec.read_segment_run(path) == segments
    truth_path = tmp_path / "truth.txt"
    truth_path.write_text("q1 rec1 1.0 2.0\nq1 rec1 5 6\n")
    assert trec.read_segment_truth(truth_path) == {"q1": {"rec1": [(1.0, 2.0), (5.0, 6.0)]}}


@pytest.mark.parametrize(
    "content",
    ["q1 Q0 d1 1 0.5\n", "q1 Q0 d1 1 abc run\n", "q1 Q0 d1 1 0.5 r\nq1 Q0 d1 2 0.4 r\n", "q1 Q0 d1 1 nan r\n"],
)
def test_malformed_runs_are_refused(tmp_path, content):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ValueError):
        trec.read_run(path)


def test_ids_with_whitespace_are_refused(tmp_path):
    with pytest.raises(ValueError):
        trec.write_run(tmp_path / "r.txt", {"q1": [("a doc", 1.0)]})
