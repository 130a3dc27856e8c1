"""Judgments made on the page, stored as files the evaluation toolkit reads directly.

Per collection, under ``<data_dir>/judgments/``:

* ``<collection>.qrels``: one ``qid 0 docno grade`` line per judgment (TREC qrels; a later line
  for the same pair overrides an earlier one, which is how :func:`app.eval.trec.read_qrels`
  reads it), appended and fsynced before the request is acknowledged: judgments are human
  work and must not be lost.
* ``<collection>/<system>.run``: the rankings of each compared configuration (TREC runs, one
  file per configuration such as ``binary`` or ``float``), rewritten atomically per query.
* ``<collection>/queries.tsv``: ``qid<TAB>description``, so a person can tell queries apart.

``recall eval judge <dir>/*.run --judgments <collection>.qrels`` works on these files as they
are; the confidence shown on the page is the same Minimal Test Collections estimate
(:class:`app.eval.mtc.MinimalTestCollection`, Urbano and Schedl).

Grades are 0 (not relevant), 1 (partly), 2 (relevant). Item ids may contain spaces, which the
whitespace-separated formats cannot hold, so document numbers escape whitespace and ``%``
as ``%XX``.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from app.errors import InvalidInput
from app.storage.disk_errors import disk_errors

LEVELS = (0, 1, 2)
SYSTEM_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
QID_MAX = 200


def docno(item_id: str) -> str:
    """An item id as a whitespace-free token (``%`` and whitespace become ``%XX``)."""
    return "".join(f"%{ord(ch):02X}" if ch.isspace() or ch == "%" else ch for ch in item_id)


def item_id(token: str) -> str:
    """Inverse of :func:`docno`."""
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), token)


def check_qid(qid: str) -> str:
    if not qid or len(qid) > QID_MAX or any(ch.isspace() or not ch.isprintable() for ch in qid):
        raise InvalidInput(f"qid {qid[:40]!r}: use 1-{QID_MAX} printable characters without spaces")
    return qid


def check_system(name: str) -> str:
    if not SYSTEM_PATTERN.match(name):
        raise InvalidInput(f"configuration name {name!r}: use 1-40 letters, digits, '_', '-' or '.'")
    return name


class JudgmentStore:
    """The judgment, run and query files of every collection under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()  # file appends and rewrites from concurrent requests

    def qrels_path(self, collection: str) -> Path:
        return self.root / f"{collection}.qrels"

    def runs_dir(self, collection: str) -> Path:
        return self.root / collection

    # --- judgments ------------------------------------------------------------------------

    def record(self, collection: str, qid: str, doc: str, grade: int, query: str | None = None) -> None:
        """Append one judgment (and the query's description when given); durable on return."""
        check_qid(qid)
        if grade not in LEVELS:
            raise InvalidInput(f"grade must be one of {list(LEVELS)} (0 not relevant, 1 partly, 2 relevant), got {grade}")
        with self._lock, disk_errors(self.root.parent):
            self.root.mkdir(parents=True, exist_ok=True)
            _append(self.qrels_path(collection), f"{qid} 0 {docno(doc)} {grade}\n")
            if query:
                self._remember_query(collection, qid, query)

    def judgments(self, collection: str, qid: str | None = None) -> list[dict[str, Any]]:
        """Current judgments (the last line per pair wins), optionally of one query."""
        path = self.qrels_path(collection)
        if not path.is_file():
            return []
        latest: dict[tuple[str, str], int] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if len(fields) == 4 and (qid is None or fields[0] == qid):
                latest[(fields[0], fields[2])] = int(fields[3])
        return [{"qid": q, "doc": item_id(d), "grade": g} for (q, d), g in sorted(latest.items())]

    def qrels(self, collection: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for row in self.judgments(collection):
            out.setdefault(row["qid"], {})[docno(row["doc"])] = row["grade"]
        return out

    # --- runs of compared configurations --------------------------------------------------

    def record_runs(self, collection: str, qid: str, rankings: Mapping[str, Sequence[tuple[str, float]]], query: str | None = None) -> None:
        """Store each configuration's ranking of one query, replacing an earlier one."""
        from app.eval.trec import read_run, write_run

        check_qid(qid)
        for system in rankings:
            check_system(system)
        with self._lock, disk_errors(self.root.parent):
            directory = self.runs_dir(collection)
            directory.mkdir(parents=True, exist_ok=True)
            for system, ranking in rankings.items():
                path = directory / f"{system}.run"
                run = read_run(path)[0] if path.is_file() else {}
                merged = {q: sorted(docs.items(), key=lambda d: -d[1]) for q, docs in run.items()}
                merged[qid] = [(docno(doc), float(score)) for doc, score in ranking]
                tmp = path.with_suffix(".tmp")
                try:
                    write_run(tmp, merged, run_id=system)
                    _fsync(tmp)
                    os.replace(tmp, path)  # readers never see half a run
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
            if query:
                self._remember_query(collection, qid, query)

    def rankings(self, collection: str) -> dict[str, dict[str, list[str]]]:
        """system -> qid -> ranked docnos, from the stored run files."""
        from app.eval.trec import rankings_from_run, read_run

        directory = self.runs_dir(collection)
        if not directory.is_dir():
            return {}
        return {path.stem: rankings_from_run(read_run(path)[0]) for path in sorted(directory.glob("*.run"))}

    def confidence(self, collection: str, k: int, systems: Sequence[str] | None = None, next_pairs: int = 5) -> dict[str, Any]:
        """MTC estimate of which configuration is better at AG@k, and how sure that is.

        Returns ``confidence: None`` with a ``reason`` when fewer than two configurations have runs.
        """
        rankings = self.rankings(collection)
        if systems:
            rankings = {name: rankings[name] for name in systems if name in rankings}
        judged = self.qrels(collection)
        base: dict[str, Any] = {"k": k, "systems": sorted(rankings), "judgments": sum(len(d) for d in judged.values())}
        if len(rankings) < 2:
            return {**base, "confidence": None, "reason": "compare two configurations (e.g. binary vs float) to estimate a confidence"}
        from app.eval.mtc import MinimalTestCollection, build_pool

        pool = build_pool(rankings, k)
        if not pool.queries:  # only empty rankings stored (they write no lines): nothing to compare yet
            return {**base, "confidence": None, "reason": "the stored rankings are all empty: store runs with results to compare"}
        mtc = MinimalTestCollection(pool, LEVELS)
        for qid, docs in judged.items():
            for doc, grade in docs.items():
                mtc.record(qid, doc, float(grade))  # judgments outside the pool change nothing
        pool = mtc.pool
        return {
            **base,
            "queries": len(pool.queries),
            "pool_pairs": len(pool),
            "judged_in_pool": int(mtc.judged.sum()),
            "confidence": mtc.mean_confidence(),
            "system_means": mtc.system_means(),
            "pairs": [vars(p) for p in mtc.pairwise()],
            "next": [{"qid": pool.pairs[i][0], "doc": item_id(pool.pairs[i][1])} for i in mtc.next_pairs(next_pairs)],
        }

    # --- helpers --------------------------------------------------------------------------

    def _remember_query(self, collection: str, qid: str, query: str) -> None:
        text = " ".join(query.split())[:300]  # one line, tab-free
        path = self.runs_dir(collection) / "queries.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        known = {line.split("\t", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()} if path.is_file() else set()
        if qid not in known:
            _append(path, f"{qid}\t{text}\n")


def _append(path: Path, line: str) -> None:
    # unbuffered, so that a failed write is not retried when the file closes
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            data = line.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except BaseException:
            # a torn line (disk full) would swallow the next judgment appended after it: cut it off
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
