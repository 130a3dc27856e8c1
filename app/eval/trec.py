"""TREC run and qrels files, plus a segment-run format for time spans.

Formats (whitespace-separated, one record per line):

* run:          ``qid Q0 docno rank score run_id``  (trec_eval)
* qrels:        ``qid 0 docno gain``                 (graded gains are integers, 0 = not relevant)
* segment run:  ``qid item start end score``         (seconds; best first within a query)
* segment truth:``qid item start end``               (ground-truth spans)

trec_eval ignores the rank column and re-sorts each query by score (ties broken by docno in
decreasing order), so :func:`write_run` makes scores strictly decreasing in rank order: what we
wrote is then exactly what trec_eval, ranx or pytrec_eval will evaluate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from app.eval.metrics import Segment, Span

Run = dict[str, dict[str, float]]  # qid -> docno -> score
Qrels = dict[str, dict[str, int]]  # qid -> docno -> gain


def rankings_from_run(run: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
    """Ranked docno lists, sorted the way trec_eval does: score descending, then docno descending."""
    return {qid: sorted(docs, key=lambda d: (docs[d], d), reverse=True) for qid, docs in run.items()}


def distinct_scores(scores: Sequence[float]) -> list[float]:
    """Scores in rank order made strictly decreasing, changing only tied or out-of-order values.

    A tie at rank i is replaced by a value just below rank i-1's score (step 1e-6 relative), so
    a tool that re-sorts by score keeps our order.
    """
    out: list[float] = []
    for score in scores:
        score = float(score)
        if out and not score < out[-1]:
            score = out[-1] - 1e-6 * max(1.0, abs(out[-1]))
        out.append(score)
    return out


def _format_score(score: float) -> str:
    return f"{score:.10g}"


def write_run(path: str | Path, rankings: Mapping[str, Sequence[tuple[str, float]]], run_id: str = "recall") -> None:
    """Write a TREC run.

    Args:
        path: output file.
        rankings: qid -> [(docno, score), ...] best first; scores may tie (they are made distinct).
        run_id: last column; also the name `recall eval` uses for the system.

    Raises:
        ValueError: for ids containing whitespace, which would corrupt the columns.
    """
    lines = []
    for qid in sorted(rankings):
        docs = list(rankings[qid])
        scores = distinct_scores([score for _, score in docs])
        # distinct_scores can push two tiny scores within formatting precision of each other
        formatted = [_format_score(s) for s in scores]
        if len(set(formatted)) != len(formatted):
            formatted = [_format_score(float(len(docs) - i)) for i in range(len(docs))]
        for rank, ((doc, _), score_text) in enumerate(zip(docs, formatted), start=1):
            _check_token(qid, "qid")
            _check_token(doc, "docno")
            lines.append(f"{qid} Q0 {doc} {rank} {score_text} {run_id}")
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""))


def read_run(path: str | Path) -> tuple[Run, str]:
    """Read a TREC run. Returns (qid -> docno -> score, run_id of the first line or the file stem).

    Raises:
        ValueError: on a malformed line or a document listed twice for one query.
    """
    run: Run = {}
    run_id = ""
    for lineno, fields in _records(path):
        if len(fields) != 6:
            raise ValueError(f"{path}:{lineno}: expected 'qid Q0 docno rank score run_id', got {len(fields)} fields")
        qid, _, doc, _, score, rid = fields
        run_id = run_id or rid
        docs = run.setdefault(qid, {})
        if doc in docs:
            raise ValueError(f"{path}:{lineno}: document {doc} appears twice for query {qid}")
        docs[doc] = _parse_float(score, path, lineno)
    return run, run_id or Path(path).stem


def write_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """Write qrels (``qid 0 docno gain``), queries and documents in sorted order."""
    lines = [f"{qid} 0 {doc} {int(gain)}" for qid in sorted(qrels) for doc, gain in sorted(qrels[qid].items())]
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""))


def read_qrels(path: str | Path) -> Qrels:
    """Read qrels with integer (graded) gains; a later line for the same pair overrides an earlier one."""
    qrels: Qrels = {}
    for lineno, fields in _records(path):
        if len(fields) != 4:
            raise ValueError(f"{path}:{lineno}: expected 'qid 0 docno gain', got {len(fields)} fields")
        qid, _, doc, gain = fields
        try:
            qrels.setdefault(qid, {})[doc] = int(gain)
        except ValueError as exc:
            raise ValueError(f"{path}:{lineno}: gain must be an integer, got {gain!r}") from exc
    return qrels


def write_segment_run(path: str | Path, segments: Mapping[str, Sequence[tuple[Segment, float]]]) -> None:
    """Write ``qid item start end score`` lines; qid -> [((item, start, end), score), ...] best first."""
    lines = []
    for qid in sorted(segments):
        for (item, start, end), score in segments[qid]:
            _check_token(item, "item")
            lines.append(f"{qid} {item} {start:.3f} {end:.3f} {_format_score(score)}")
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""))


def read_segment_run(path: str | Path) -> dict[str, list[tuple[Segment, float]]]:
    """Read a segment run; each query's segments come back sorted by score, best first (stable)."""
    out: dict[str, list[tuple[Segment, float]]] = {}
    for lineno, fields in _records(path):
        if len(fields) != 5:
            raise ValueError(f"{path}:{lineno}: expected 'qid item start end score', got {len(fields)} fields")
        qid, item, start, end, score = fields
        seg = (item, _parse_float(start, path, lineno), _parse_float(end, path, lineno))
        out.setdefault(qid, []).append((seg, _parse_float(score, path, lineno)))
    return {qid: sorted(segs, key=lambda s: -s[1]) for qid, segs in out.items()}


def read_segment_truth(path: str | Path) -> dict[str, dict[str, list[Span]]]:
    """Read ground-truth spans ``qid item start end`` -> qid -> item -> [(start, end), ...]."""
    out: dict[str, dict[str, list[Span]]] = {}
    for lineno, fields in _records(path):
        if len(fields) != 4:
            raise ValueError(f"{path}:{lineno}: expected 'qid item start end', got {len(fields)} fields")
        qid, item, start, end = fields
        out.setdefault(qid, {}).setdefault(item, []).append((_parse_float(start, path, lineno), _parse_float(end, path, lineno)))
    return out


def _records(path: str | Path) -> Iterable[tuple[int, list[str]]]:
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            fields = line.split()
            if fields and not fields[0].startswith("#"):
                yield lineno, fields


def _parse_float(text: str, path: str | Path, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise ValueError(f"{path}:{lineno}: not a number: {text!r}") from exc
    if math.isnan(value):
        raise ValueError(f"{path}:{lineno}: NaN score")
    return value


def _check_token(token: str, what: str) -> None:
    if not token or any(ch.isspace() for ch in token):
        raise ValueError(f"{what} must be a non-empty token without whitespace, got {token!r}")
