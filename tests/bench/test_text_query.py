"""bench.service.text_quality's rule arithmetic (R@10, top-10 overlap, the verdict) and text_query_ab's medians."""

from __future__ import annotations

import numpy as np
import pytest

from bench.service import text_quality
from bench.service.text_query_ab import KEYS, medians


def test_recall_at_10_and_overlap_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    a = np.stack([rng.permutation(30) for _ in range(50)])
    b = np.stack([rng.permutation(30) for _ in range(50)])
    owners = rng.integers(0, 30, 50)
    assert text_quality.recall_at_10(a, owners) == pytest.approx(sum(o in list(r[:10]) for r, o in zip(a, owners)) / 50)
    brute = np.mean([sum(1 for x in r[:10] if x in list(s[:10])) / 10 for r, s in zip(a, b)])
    assert text_quality.top10_overlap(a, b) == pytest.approx(brute)
    assert text_quality.top10_overlap(a, a) == 1.0


def _orders(n_queries: int, n_images: int, owners: np.ndarray, misses: int, reorder_tail: bool) -> np.ndarray:
    """Each query's own image first, except the first ``misses`` queries (their own image last)."""
    rows = []
    for q, owner in enumerate(owners):
        rest = [i for i in range(n_images) if i != owner]
        row = rest + [owner] if q < misses else [owner] + rest
        if reorder_tail:  # same top 9 (own image first), the 10th swapped with the 11th: overlap 0.9
            row[9], row[10] = row[10], row[9]
        rows.append(row)
    return np.asarray(rows)


@pytest.mark.parametrize(("misses", "reorder", "met"), [(0, False, True), (1, True, True), (2, False, False)])
def test_the_rule_allows_a_drop_of_0_005_and_an_overlap_of_0_9(monkeypatch, misses: int, reorder: bool, met: bool) -> None:
    owners = np.arange(200) % 40  # 200 queries over 40 images, as the held-out photos
    unchanged = _orders(200, 40, owners, 0, False)
    changed = _orders(200, 40, owners, misses, reorder)
    fake = {"unchanged": {"stage1": unchanged, "rerank": unchanged}, "changed": {"stage1": changed, "rerank": changed}}
    monkeypatch.setattr(text_quality, "rankings", lambda encoder, texts, images: fake[encoder])
    result = text_quality.compare("unchanged", "changed", {"set": (np.zeros((40, 4)), ["t"] * 200, owners)})
    row = result["set"]["stage1"]
    assert row["R@10_drop"] == pytest.approx(misses / 200)
    assert result["rule_met"] is met and row["rule_met"] is met


def test_ab_medians_are_per_variant() -> None:
    def row(p50: float) -> dict:
        return {**{k: 0.0 for k in KEYS}, "p50_ms": p50}

    rounds = [{"variant": v, "one_client": row(p), "sixteen_clients": row(10 * p)}
              for v, p in (("half", 9.0), ("int8", 4.0), ("half", 7.0), ("int8", 6.0), ("half", 8.0))]
    assert medians(rounds, "half")["one_client"]["p50_ms"] == 8.0
    assert medians(rounds, "int8")["sixteen_clients"]["p50_ms"] == 50.0


def test_paired_difference_against_a_brute_force_median() -> None:
    from bench.latency.interleaved import paired

    rng = np.random.default_rng(1)
    before = rng.uniform(8, 12, 501)
    after = before - 0.7 + rng.normal(0, 0.3, 501)  # faster by ~0.7 ms, pair by pair
    row = paired(before, after)
    assert row["median_diff_ms"] == pytest.approx(float(np.median(after - before)))
    assert row["ci95_low_ms"] <= row["median_diff_ms"] <= row["ci95_high_ms"] < 0
    assert row["faster_share"] == pytest.approx(float(np.mean(after < before)))
    assert row["pairs"] == 501
    same = paired(before, before)
    assert same["median_diff_ms"] == 0 and same["faster_share"] == 0
    with pytest.raises(ValueError):
        paired([], [])


def test_alternate_takes_turns_request_by_request_and_reverses_each_pass() -> None:
    import asyncio
    import json

    from bench.latency.interleaved import alternate
    from bench.service.load import Req

    arrivals: list[tuple[str, bytes]] = []

    async def run() -> dict:
        async def serve(label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
                arrivals.append((label, await reader.readexactly(length)))
                body = json.dumps({"timings": {"total_ms": 1.0 if label == "a" else 2.0}}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
            writer.close()

        servers = {label: await asyncio.start_server(lambda r, w, label=label: serve(label, r, w), "127.0.0.1", 0)
                   for label in ("a", "b", "c")}
        urls = {label: ("127.0.0.1", s.sockets[0].getsockname()[1]) for label, s in servers.items()}
        requests = [Req("POST", "/x", str(i).encode()) for i in range(6)]
        try:
            return await alternate(urls, {label: requests for label in urls}, passes=4, warmup=2)
        finally:
            for s in servers.values():
                s.close()

    out = asyncio.run(run())
    order = [label for label, _ in arrivals]
    assert order == ["a", "b", "c", "c", "b", "a"] * 3
    # every server got the same requests in the same order, each once
    for label in "abc":
        assert [body for lab, body in arrivals if lab == label] == [str(i).encode() for i in range(6)]
    assert out["servers"]["a"]["n"] == 4  # the 2 warm-up requests are not counted
    assert out["servers"]["b"]["server_timings_p50_ms"] == {"total_ms": 2.0}
    assert set(out["paired"]) == {"b", "c"} and out["paired"]["b"]["pairs"] == 4
