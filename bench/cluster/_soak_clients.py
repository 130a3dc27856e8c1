"""The cluster soak's load and its accounting (bench/cluster/cluster_soak.py runs it).

``clients`` asyncio clients share one collection: each sends single-file ingests of new ids (a clip
of its own, made from the id, so it can be searched for later) or searches (by the clip of an
acknowledged id), ``ingest_share`` of the time ingests. Every answer is kept as an :class:`Answer`
(sent and done on the monotonic clock, status, Retry-After); an ingest answered 200 is an
acknowledged write, one that got no answer at all is uncertain (either state is right).

Fault windows: from a fault's start to the first success of each operation sent after the faulted
component was back, plus a margin. Latency "outside the windows" keeps only the requests whose
whole [sent, done] interval misses every window: a search queued behind a restarting shard is a
fault's cost, not the steady state's.
"""

from __future__ import annotations

import asyncio
import io
import random
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import soundfile as sf

RATE = 16000
CLIP_S = 0.5


def clip(item_id: str) -> bytes:
    """A 0.5 s WAV of three tones drawn from the id: distinct items, and the same bytes when asked again."""
    rng = np.random.default_rng(zlib.crc32(item_id.encode()))
    t = np.arange(int(CLIP_S * RATE)) / RATE
    freqs, amps = rng.uniform(150, 4000, 3), rng.uniform(0.05, 0.2, 3)
    wave = sum(a * np.sin(2 * np.pi * f * t) for f, a in zip(freqs, amps))
    buf = io.BytesIO()
    sf.write(buf, wave.astype(np.float32), RATE, format="WAV")
    return buf.getvalue()


@dataclass
class Answer:
    op: str  # "ingest" | "search"
    sent: float
    done: float
    status: int  # 0: no answer (connection error or timeout)
    retry_after: str | None
    code: str | None  # the error body's code, when refused


@dataclass
class Load:
    collection: str
    answers: list[Answer] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)

    async def _call(self, http: httpx.AsyncClient, op: str, path: str, **kwargs: Any) -> int:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            response = await http.post(path, **kwargs)
        except httpx.HTTPError:
            self.answers.append(Answer(op, sent, loop.time(), 0, None, None))
            return 0
        code = None
        if response.status_code != 200:
            try:
                code = response.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = response.text[:80]
        self.answers.append(Answer(op, sent, loop.time(), response.status_code, response.headers.get("retry-after"), code))
        return response.status_code

    async def client(self, n: int, http: httpx.AsyncClient, until: float, ingest_share: float) -> None:
        rng = random.Random(f"{self.collection}-{n}")
        loop = asyncio.get_running_loop()
        seq = 0
        while loop.time() < until:
            if rng.random() < ingest_share or not self.acknowledged:
                seq += 1
                item = f"{self.collection}-c{n}-{seq}"
                status = await self._call(http, "ingest", f"/v1/collections/{self.collection}/items",
                                          files={"files": (f"{item}.wav", clip(item))}, data={"ids": item})
                if status == 200:
                    self.acknowledged.append(item)
                elif status == 0:
                    self.uncertain.append(item)
            else:
                item = rng.choice(self.acknowledged)
                status = await self._call(http, "search", f"/v1/collections/{self.collection}/search",
                                          files={"file": ("q.wav", clip(item))}, data={"k": "5"})
            if status != 200:
                await asyncio.sleep(0.2)  # back off a little (less than Retry-After, to see recovery soon)


# --- accounting ---------------------------------------------------------------------------------


def close_windows(faults: list[dict[str, Any]], answers: list[Answer], arm_end: float, margin_s: float) -> None:
    """Give each fault (start, back) its window's end: the later of search's and ingest's first
    success sent after ``back``, plus ``margin_s`` (the arm's end when one never came)."""
    for fault in faults:
        firsts = {}
        for op in ("search", "ingest"):
            done = [a.done for a in answers if a.op == op and a.status == 200 and a.sent >= fault["back"]]
            firsts[op] = min(done) if done else None
        recovered = [t for t in firsts.values() if t is not None]
        fault["recovery_s"] = {op: None if t is None else round(t - fault["back"], 2) for op, t in firsts.items()}
        ends = recovered if len(recovered) == len(firsts) else [arm_end]
        fault["end"] = min(max(ends) + margin_s, arm_end)


def in_window(answer: Answer, faults: list[dict[str, Any]]) -> bool:
    return any(answer.sent < f["end"] and answer.done > f["start"] for f in faults)


def _percentiles(ms: list[float]) -> dict[str, Any]:
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "max_ms": round(max(ms), 1)}


def summarise(load: Load, faults: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """Latency outside the fault windows, and the answers by status inside and outside them."""
    out: dict[str, Any] = {}
    for op in ("search", "ingest"):
        mine = [a for a in load.answers if a.op == op]
        outside = [a for a in mine if not in_window(a, faults)]
        inside = [a for a in mine if in_window(a, faults)]
        out[op] = {
            "outside_windows": _percentiles([(a.done - a.sent) * 1000 for a in outside if a.status == 200]),
            "all_200s": _percentiles([(a.done - a.sent) * 1000 for a in mine if a.status == 200]),
            "statuses_outside_windows": _count(outside), "statuses_inside_windows": _count(inside),
        }
    refused = [a for a in load.answers if a.status != 200]
    windows_s = sum(f["end"] - f["start"] for f in faults)
    out["requests"] = len(load.answers)
    out["requests_per_s"] = round(len(load.answers) / (end - start), 1)
    out["fault_windows_s"] = round(windows_s, 1)
    out["share_of_time_in_windows"] = round(windows_s / (end - start), 3)
    out["server_errors_500"] = sum(1 for a in load.answers if a.status >= 500 and a.status != 503)
    out["refusals_outside_windows"] = sum(1 for a in refused if not in_window(a, faults))
    out["refusals_all_503_with_retry_after"] = all(a.status == 503 and a.retry_after for a in refused if a.status != 0)
    out["refusal_codes"] = dict(sorted(_tally(f"{a.status} {a.code}" for a in refused).items()))
    return out


def _count(answers: list[Answer]) -> dict[str, int]:
    return dict(sorted(_tally(str(a.status) for a in answers).items()))


def _tally(keys) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in keys:
        out[key] = out.get(key, 0) + 1
    return out


def slope_mb_per_min(samples: list[tuple[float, float]], warmup: float = 0.1) -> float | None:
    """Least-squares slope of (seconds, MB) after the first ``warmup`` of the samples."""
    kept = samples[int(len(samples) * warmup):]
    if len(kept) < 3:
        return None
    t, mb = np.array(kept).T
    return round(float(np.polyfit(t / 60.0, mb, 1)[0]), 2)
