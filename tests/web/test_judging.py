"""The page's judgment store writes files the evaluation toolkit reads as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main as recall_main
from app.errors import InvalidInput
from app.eval.trec import read_qrels, read_run
from app.usecases.judging import JudgmentStore, docno, item_id


def test_docno_escapes_whitespace_and_percent_reversibly() -> None:
    for raw in ("plain-id.wav", "two words.wav", "tab\there", "50% done", "dir/a b/c"):
        token = docno(raw)
        assert not any(ch.isspace() for ch in token)
        assert item_id(token) == raw
    assert docno("a b%") == "a%20b%25"


def test_runs_and_judgments_feed_recall_eval_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = JudgmentStore(tmp_path / "judgments")
    store.record_runs("c", "q1", {"binary": [("x y", 0.9), ("b", 0.5)], "float": [("c", 0.8), ("x y", 0.7)]}, query="first")
    store.record_runs("c", "q2", {"binary": [("b", 0.6)], "float": [("b", 0.9)]})
    # re-running a query replaces its ranking and keeps the other queries'
    store.record_runs("c", "q1", {"binary": [("x y", 0.95), ("b", 0.4)], "float": [("c", 0.8), ("x y", 0.7)]})
    store.record("c", "q1", "x y", 2, query="first")
    store.record("c", "q1", "c", 0)

    run, run_id = read_run(tmp_path / "judgments" / "c" / "binary.run")
    assert run_id == "binary" and run == {"q1": {"x%20y": 0.95, "b": 0.4}, "q2": {"b": 0.6}}
    assert read_qrels(tmp_path / "judgments" / "c.qrels") == {"q1": {"x%20y": 2, "c": 0}}
    assert (tmp_path / "judgments" / "c" / "queries.tsv").read_text() == "q1\tfirst\n"

    ours = store.confidence("c", k=2)
    runs = sorted(str(p) for p in (tmp_path / "judgments" / "c").glob("*.run"))
    code = recall_main(["eval", "judge", *runs, "--judgments", str(tmp_path / "judgments" / "c.qrels"), "--k", "2", "--format", "json"])
    assert code == 0
    theirs = json.loads(capsys.readouterr().out)
    assert theirs["confidence"] == pytest.approx(ours["confidence"])
    assert theirs["system_means"] == pytest.approx(ours["system_means"])
    # by hand: AG@2 summed over 2 queries / (2 * 2). binary: q1 x y=2 + b (unjudged, E=1), q2 b (E=1) -> 4/4 = 1.0;
    # float: q1 c=0 + x y=2, q2 b (E=1) -> 3/4 = 0.75
    assert ours["system_means"] == pytest.approx({"binary": 1.0, "float": 0.75})
    assert ours["judged_in_pool"] == 2 and ours["queries"] == 2


def test_bad_grades_qids_and_names_are_refused(tmp_path: Path) -> None:
    store = JudgmentStore(tmp_path)
    with pytest.raises(InvalidInput, match="grade"):
        store.record("c", "q1", "a", 5)
    with pytest.raises(InvalidInput, match="qid"):
        store.record("c", "has space", "a", 1)
    with pytest.raises(InvalidInput, match="configuration name"):
        store.record_runs("c", "q1", {"bad name": [("a", 1.0)]})
    assert not (tmp_path / "c.qrels").exists()
