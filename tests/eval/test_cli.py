"""Every `recall eval` subcommand on the small fixture in tests/eval/data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.eval import cli
from app.eval.trec import read_qrels, read_run, read_segment_run

DATA = Path(__file__).parent / "data"
RUNS = [str(DATA / f"run_{name}.txt") for name in "abc"]
QRELS = str(DATA / "qrels.txt")


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="recall")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *argv])
    return args.func(args)


def test_score_json_has_aggregate_and_per_query(capsys):
    assert _main(["score", RUNS[0], QRELS, "--format", "json", "--metrics", "map,P@5,ndcg@10"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"aggregate", "per_query"}
    assert set(out["aggregate"]) == {"map", "P@5", "ndcg@10"}
    assert sorted(out["per_query"]) == [f"q{i}" for i in range(1, 7)]
    # the aggregate is the mean of the per-query values
    assert out["aggregate"]["P@5"] == pytest.approx(np.mean([v["P@5"] for v in out["per_query"].values()]))
    # q1 by hand from the fixture files: P@5 = relevant among the first five documents / 5
    run, _ = read_run(RUNS[0])
    qrels = read_qrels(QRELS)
    top5 = sorted(run["q1"], key=run["q1"].get, reverse=True)[:5]
    assert out["per_query"]["q1"]["P@5"] == pytest.approx(sum(qrels["q1"].get(d, 0) > 0 for d in top5) / 5)


def test_score_table_lists_queries_and_the_mean(capsys):
    assert _main(["score", RUNS[0], QRELS, "--per-query"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["query", "map", "MP@1"]
    assert [line.split()[0] for line in lines[1:]] == [f"q{i}" for i in range(1, 7)] + ["all"]


def test_score_refuses_unknown_metric(capsys):
    assert _main(["score", RUNS[0], QRELS, "--metrics", "nonsense"]) == 2


def test_compare_reports_pairs_and_friedman(capsys):
    assert _main(["compare", *RUNS, "--qrels", QRELS, "--metric", "ndcg@10", "--n-permutations", "500", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(p["a"], p["b"]) for p in out["pairs"]] == [("run_a", "run_b"), ("run_a", "run_c"), ("run_b", "run_c")]
    assert all(0 < p["p_randomization"] <= 1 and 0 < p["p_wilcoxon"] <= 1 for p in out["pairs"])
    assert set(out["friedman"]["mean_ranks"]) == {"run_a", "run_b", "run_c"}
    assert _main(["compare", *RUNS[:2], "--qrels", QRELS, "--n-permutations", "200"]) == 0
    assert "run_a vs run_b" in capsys.readouterr().out


def test_judge_records_judgments_and_reaches_full_confidence(tmp_path, capsys):
    judgments = tmp_path / "judgments.txt"
    assert _main(["judge", *RUNS, "--judgments", str(judgments), "--k", "3", "--next", "4", "--format", "json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["judged"] == 0 and len(first["next"]) == 4
    proposal = first["next"][0]
    gain = str(read_qrels(QRELS)[proposal["qid"]].get(proposal["doc"], 0))
    argv = ["judge", *RUNS, "--judgments", str(judgments), "--k", "3", "--format", "json"]
    assert _main([*argv, "--record", proposal["qid"], proposal["doc"], gain]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["judged"] == 1
    assert judgments.read_text().split() == [proposal["qid"], "0", proposal["doc"], gain]
    # judging the whole pool from the full qrels leaves no uncertainty
    judgments.write_text(Path(QRELS).read_text())
    assert _main(argv) == 0
    last = json.loads(capsys.readouterr().out)
    assert last["confidence"] == 1.0 and last["next"] == []
    ordinal = [*argv, "--gain-model", "ordinal"]
    judgments.write_text("".join(f"q{i} 0 {d} {read_qrels(QRELS)[f'q{i}'].get(d, 0)}\n" for i in (1, 2) for d in ("d01", "d05", "d09")))
    assert _main(ordinal) == 0
    partial = json.loads(capsys.readouterr().out)
    assert partial["judged"] >= 1 and 0.5 <= partial["confidence"] <= 1.0
    assert _main([*argv[:-2], "--record", "q1", "d01", "7"]) == 2  # not a level
    assert _main([*argv, "--levels", "0,1"]) == 2  # the qrels hold gains of 2


def test_report_writes_html_and_markdown_with_plots(tmp_path, capsys):
    rng = np.random.default_rng(0)
    embeddings = tmp_path / "emb.npz"
    labels = np.repeat(["dog", "rain", "bell"], 10)
    vectors = rng.standard_normal((30, 8)) + np.repeat(np.eye(8)[:3] * 4, 10, axis=0)
    np.savez(embeddings, vectors=vectors, labels=labels)
    out = tmp_path / "report"
    argv = ["report", *RUNS, "--qrels", QRELS, "--out", str(out), "--query-classes", str(DATA / "classes.csv"),
            "--embeddings", str(embeddings), "--k-max", "10", "--mtc-k", "3"]
    assert _main(argv) == 0
    page = (out / "index.html").read_text()
    for png in ("mp_at_k.png", "precision_recall.png", "per_class.png", "tsne.png", "mtc_confidence.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and png in page
    assert "run_b" in page and "MTC (AG@3" in page
    assert sum(p.stat().st_size for p in out.glob("*.png")) < 400_000
    assert _main(["report", *RUNS[:2], "--qrels", QRELS, "--out", str(out), "--format", "md", "--mtc-k", "0"]) == 0
    assert "![MP@K against K](mp_at_k.png)" in (out / "index.md").read_text()


def _fake_service(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers.get("X-API-Key") != "secret":
            return httpx.Response(401, json={"error": "bad key", "error_type": "unauthorized"})
        assert request.url.path == "/v1/collections/sounds/search"
        results = [
            {"id": "d03", "rank": 2, "score": 0.5, "distance": 0.5, "metadata": {},
             "segments": [{"start": 1.0, "end": 2.0, "distance": 0.5}]},
            {"id": "d07", "rank": 1, "score": 0.9, "distance": 0.1, "metadata": {},
             "segments": [{"start": 0.0, "end": 1.0, "distance": 0.1}, {"start": 4.0, "end": 5.0, "distance": 0.3}]},
        ]
        return httpx.Response(200, json={"results": results, "timings": {"total_ms": 1.0}})

    return httpx.MockTransport(handler)


def test_run_queries_the_api_and_writes_run_and_segments(tmp_path, monkeypatch, capsys):
    (tmp_path / "clip.wav").write_bytes(b"RIFF fake audio")
    manifest = tmp_path / "queries.csv"
    manifest.write_text("qid,path,item_id,text\nqa,,d03,\nqb,,,a dog barking\nqc,clip.wav,,\n")
    seen: list[httpx.Request] = []
    transport = _fake_service(seen)
    monkeypatch.setattr(cli, "make_client", lambda url, headers, timeout: httpx.Client(base_url=url, headers=headers, transport=transport))
    out = tmp_path / "run.txt"
    argv = ["run", "--collection", "sounds", "--queries", str(manifest), "--api-key", "secret", "--k", "2", "--out", str(out)]
    assert _main(argv) == 0
    bodies = [request.content for request in seen]
    assert json.loads(bodies[0]) == {"item_id": "d03", "k": 2}
    assert json.loads(bodies[1]) == {"text": "a dog barking", "k": 2}
    assert b'name="file"' in bodies[2] and b"RIFF fake audio" in bodies[2] and seen[2].headers["content-type"].startswith("multipart/form-data")
    run, run_id = read_run(out)
    assert run_id == "run" and sorted(run) == ["qa", "qb", "qc"]
    assert sorted(run["qa"], key=run["qa"].get, reverse=True) == ["d07", "d03"]  # ordered by the service's rank
    segments = read_segment_run(tmp_path / "run.txt.segments")
    assert [seg for seg, _ in segments["qa"]] == [("d07", 0.0, 1.0), ("d07", 4.0, 5.0), ("d03", 1.0, 2.0)]
    # a wrong key is an error exit, not a crash or an empty run
    assert _main([*argv[:-4], "--api-key", "wrong", "--out", str(tmp_path / "x.txt")]) == 1
    assert "HTTP 401" in capsys.readouterr().err
    # search options are passed through when given, in JSON and in the multipart form
    seen.clear()
    assert _main([*argv, "--mode", "binary", "--item-distance", "min"]) == 0
    assert json.loads(seen[0].content) == {"item_id": "d03", "k": 2, "mode": "binary", "item_distance": "min"}
    assert b'name="item_distance"\r\n\r\nmin' in seen[2].content


def test_recall_cli_entry_point_dispatches_eval_score():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    completed = subprocess.run(
        [sys.executable, "-m", "app.cli", "eval", "score", RUNS[1], QRELS, "--format", "json", "--metrics", "map,P@5"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    out = json.loads(completed.stdout)
    assert set(out["aggregate"]) == {"map", "P@5"} and len(out["per_query"]) == 6


def test_manifest_rows_must_name_exactly_one_query(tmp_path):
    from app.eval.runner import read_manifest

    good = tmp_path / "ok.csv"
    good.write_text("qid,path,text\nq1,sub/a.wav,\nq2,,hello\n")
    queries = read_manifest(good)
    assert [(q.qid, q.kind) for q in queries] == [("q1", "path"), ("q2", "text")]
    assert queries[0].value == str((tmp_path / "sub" / "a.wav").resolve())
    for content in ("qid,path,text\nq1,a.wav,hi\n", "qid,text\nq1,\n", "qid,text\nq1,a\nq1,b\n", "id,text\nq1,a\n"):
        bad = tmp_path / "bad.csv"
        bad.write_text(content)
        with pytest.raises(ValueError):
            read_manifest(bad)
