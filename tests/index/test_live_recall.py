"""Recall measured on live queries: the figure against brute force, deleted ids never counting, the background
measurement, and GET /v1/collections/{name} showing it (null while flat answers)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.index import AdaptiveBinaryIndex, IndexSpec
from app.index.exact import hamming_distances
from app.index.quality import live_recall
from app.index.quality.live_recall import LiveRecall
from bench.index.index_kinds import clustered_codes

BITS = 256
K = 10


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, queries = clustered_codes(12_000, BITS, 40, seed=11)
    ids = np.arange(len(codes), dtype=np.int64) * 5 + 3
    return ids, codes, queries[:40]


def ivf_index(ids: np.ndarray, codes: np.ndarray, **sampling) -> AdaptiveBinaryIndex:
    """An IVF of 16 lists probed one list at a time by default: recall below 1, so a wrong figure shows."""
    index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("ivf", nlist=16, nprobe=1))
    index.add(ids, codes)
    assert index.maybe_build(background=False) and index.answering == "ivf"
    index.live_recall = LiveRecall(**{"every": 1, "size": 1000, "interval_s": float("inf"), **sampling})
    return index


def brute_force_recall(index: AdaptiveBinaryIndex, live_ids: np.ndarray, live_codes: np.ndarray, queries: np.ndarray,
                       nprobe: int | None = None) -> float:
    """Tie-tolerant recall@10 of the IVF's answers, every distance computed by numpy over the live codes."""
    exact = hamming_distances(queries, live_codes)
    kth = np.sort(exact, axis=1)[:, K - 1]
    got = index.ivf.search(queries, K, nprobe)[1]
    column = {int(i): c for c, i in enumerate(live_ids)}
    hits = [sum(exact[q, column[int(i)]] <= kth[q] for i in row if int(i) in column) for q, row in enumerate(got)]
    return float(np.mean(np.minimum(hits, K) / K))


def test_recall_of_sampled_queries_equals_brute_force(data) -> None:
    ids, codes, queries = data
    index = ivf_index(ids, codes)
    assert index.describe()["recall"] is None  # nothing measured yet
    for row in range(len(queries)):
        index.search(queries[row : row + 1], K)  # one live query at a time, all sampled (every=1)
    measured = index.measure_recall()
    expected = brute_force_recall(index, ids, codes, queries)
    assert 0.3 < expected < 0.99  # one list of 16: recall < 1 is visible
    assert measured["recall_at_10"] == pytest.approx(expected, abs=1e-12)
    assert measured["queries"] == len(queries) and measured["skipped"] == 0 and measured["nprobes"] is None
    assert index.describe()["recall"] == measured
    # a query's nprobe override is re-run at that nprobe: all 16 lists is exact
    index.live_recall = LiveRecall(every=1, size=1000, interval_s=float("inf"))
    index.search(queries, K, nprobe=16)
    full = index.measure_recall()
    assert full["recall_at_10"] == 1.0 and full["nprobes"] == [16] and full["queries"] == len(queries)


def test_sampling_keeps_one_in_every_and_only_the_most_recent(data) -> None:
    ids, codes, queries = data
    index = ivf_index(ids, codes, every=4, size=5)
    index.search(queries[:10], K)  # a batch counts row by row: rows 4 and 8 (1-based)
    index.search(queries[10:20], K)  # 12, 16, 20
    ring = list(index.live_recall._ring)
    assert [code.tobytes() for code, _ in ring] == [queries[i].tobytes() for i in (3, 7, 11, 15, 19)]
    index.search(queries[20:24], K)
    assert len(index.live_recall._ring) == 5 and index.live_recall._ring[-1][0].tobytes() == queries[23].tobytes()


def test_deleted_ids_never_count(data) -> None:
    ids, codes, queries = data
    index = ivf_index(ids, codes)
    index.search(queries, K)
    before = index.ivf.search(queries, K)[1]
    gone = np.unique(before[:, :3][before[:, :3] >= 0])  # the IVF's own best answers go
    index.remove(gone)
    keep = ~np.isin(ids, gone)
    measured = index.measure_recall()
    assert measured["recall_at_10"] == pytest.approx(brute_force_recall(index, ids[keep], codes[keep], queries), abs=1e-12)

    # a deletion racing the measurement: the answer still holds an id the exact scan no longer has; it is a miss
    recall = LiveRecall(every=1, size=10, interval_s=float("inf"))
    recall.offer(queries[:1], None)
    true_d, true_ids = index.flat.search(queries[:1], K)
    stale = int(gone[0])
    answer = lambda q, k, p: (true_d, np.concatenate([[stale], true_ids[0, 1:]])[None, :])  # noqa: E731
    result = recall.measure(answer, lambda q, k: index.flat.search(q, k), index._present)
    assert result["recall_at_10"] == pytest.approx(0.9)
    # an exact top 10 that loses an id before the check is left out, not scored
    vanishing = lambda found: index._present(found[found != true_ids[0, 0]])  # noqa: E731
    result = recall.measure(answer, lambda q, k: index.flat.search(q, k), vanishing)
    assert result["skipped"] == 1 and result["queries"] == 0 and result["recall_at_10"] is None


def test_flat_answers_have_no_recall_figure(data) -> None:
    ids, codes, queries = data
    index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("flat"))
    index.add(ids, codes)
    index.live_recall = LiveRecall(every=1, size=4, interval_s=0)
    index.search(queries, K)
    assert len(index.live_recall._ring) == 0 and index.measure_recall() is None and index.describe()["recall"] is None


def test_background_measurement_starts_from_the_query_path(data) -> None:
    ids, codes, queries = data
    index = ivf_index(ids, codes, size=8, interval_s=0, duty=1.0)
    for row in range(4):  # half the ring is new: the fourth search starts the measurement
        index.search(queries[row : row + 1], K)
    deadline = time.monotonic() + 30
    while index.describe()["recall"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    measured = index.describe()["recall"]
    assert measured["queries"] == 4 and not index.live_recall.running
    assert measured["recall_at_10"] == pytest.approx(brute_force_recall(index, ids, codes, queries[:4]), abs=1e-12)


def test_collection_stats_show_the_live_recall(tmp_path, monkeypatch) -> None:
    from app.index import kinds
    from app.main import create_app
    from tests.api.test_index_kinds_api import _ingest, _wait_for
    from tests.conftest import make_settings

    monkeypatch.setattr(kinds, "IVF_MIN_WINDOWS", 0)  # an IVF from 624 windows (16 lists x 39)
    for name, value in (("SAMPLE_EVERY", 1), ("SAMPLE_SIZE", 4), ("INTERVAL_S", 0.0), ("DUTY", 1.0)):
        monkeypatch.setattr(live_recall, name, value)
    with TestClient(create_app(make_settings(tmp_path))) as client:
        for name, index in (("f", {"kind": "flat"}), ("v", {"kind": "ivf", "nlist": 16, "nprobe": 1})):
            assert client.post("/v1/collections", json={"name": name, "modality": "audio", "index": index}).status_code == 201
        _ingest(client, "v", 6)
        assert _wait_for(client, "v", "ivf")["answering"] == "ivf"
        assert client.get("/v1/collections/v").json()["index"]["recall"] is None
        ids = [r["id"] for r in client.get("/v1/collections/v/items").json()["data"]]
        for item in ids:  # every list probed: the IVF answers the pipeline's deep rounds too (too deep for 1 of 16 lists)
            body = {"item_id": item, "k": 3, "mode": "binary", "nprobe": 16}
            assert client.post("/v1/collections/v/search", json=body).status_code == 200
        deadline = time.monotonic() + 30
        while (recall := client.get("/v1/collections/v").json()["index"]["recall"]) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert recall is not None and recall["queries"] >= 2 and recall["recall_at_10"] == 1.0 and recall["nprobes"] == [16]
        assert recall["measured_at"] <= time.time()
        assert client.get("/v1/collections/f").json()["index"]["recall"] is None
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert "recall" in schema["IndexPublic"]["properties"]
        assert {"recall_at_10", "queries", "measured_at"} <= set(schema["LiveRecallPublic"]["properties"])
