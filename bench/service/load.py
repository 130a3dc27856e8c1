"""A bounded async HTTP load generator (httpx) for the running service.

Closed loop: ``concurrency`` clients each send a request, wait for the answer, send the next.
The run stops after ``total`` requests or ``max_seconds``, whichever comes first, so it is always
bounded. Request bodies are built once up front (a multipart body is plain bytes with its
boundary in the content type), so the generator spends its CPU on HTTP, not on encoding forms:
on a 2-core machine the client shares the cores with the server, and its own CPU time is
reported next to the results so the reader can tell.

    python -m bench.service.load --url http://127.0.0.1:8000 --collection clips --file q.wav -c 16 -n 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np


@dataclass(frozen=True)
class Req:
    """One prepared request."""

    method: str
    path: str
    content: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def multipart(files: dict[str, tuple[str, bytes, str]], fields: dict[str, str] | None = None) -> tuple[bytes, str]:
    """(body, content type) of a multipart/form-data request, built once."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in (fields or {}).items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data, ctype) in files.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\nContent-Type: {ctype}\r\n\r\n'
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def search_file_request(collection: str, filename: str, data: bytes, k: int = 10, ctype: str = "application/octet-stream") -> Req:
    body, content_type = multipart({"file": (filename, data, ctype)}, {"k": str(k)})
    return Req("POST", f"/v1/collections/{collection}/search", body, {"content-type": content_type})


def json_request(path: str, payload: dict[str, Any]) -> Req:
    return Req("POST", path, json.dumps(payload).encode(), {"content-type": "application/json"})


def percentiles(ms: list[float]) -> dict[str, float]:
    if not ms:
        return {"n": 0}
    a = np.asarray(ms)
    return {"n": len(ms), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean()), "max_ms": float(a.max())}


class RawConnection:
    """One keep-alive HTTP/1.1 connection speaking just enough of the protocol for this load:
    prepared request bytes out, status + Content-Length body back. Used with ``client="raw"``
    because httpx spends ~2 ms of CPU per request (9 ms with 64 connections), which on a 2-core
    machine is CPU the server under test does not get."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, req: Req) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = [f"{req.method} {req.path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(req.content)}"]
        head += [f"{k}: {v}" for k, v in req.headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + req.content)
        status_line = await self.reader.readuntil(b"\r\n")
        headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        length = next((int(line.split(":", 1)[1]) for line in headers.split("\r\n") if line.startswith("content-length:")), 0)
        body = await self.reader.readexactly(length)
        if "connection: close" in headers:
            await self.close()
        return int(status_line.split()[1]), body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def run_load(
    url: str, requests: list[Req], concurrency: int, total: int, max_seconds: float = 30.0,
    client: httpx.AsyncClient | None = None, keep_latencies: bool = False, kind: str = "httpx",
) -> dict[str, Any]:
    """Send ``requests`` round-robin from ``concurrency`` closed-loop clients; latency and q/s.

    ``kind``: "httpx" (an ``httpx.AsyncClient``) or "raw" (:class:`RawConnection`, one per client).
    """
    own = kind == "httpx" and client is None
    if kind == "httpx":
        client = client or httpx.AsyncClient(base_url=url, timeout=60.0, limits=httpx.Limits(
            max_connections=concurrency, max_keepalive_connections=concurrency))
    parsed = httpx.URL(url)
    tally = _Tally()
    counter = iter(range(total))
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        # one keep-alive connection per client for "raw"; httpx pools its own
        conn = RawConnection(parsed.host, parsed.port or 80) if kind == "raw" else None
        try:
            for i in counter:
                if time.perf_counter() > deadline:
                    return
                req = requests[i % len(requests)]
                t = time.perf_counter()
                try:
                    if conn is not None:
                        status, body = await asyncio.wait_for(conn.request(req), 60)
                    else:
                        answer = await client.request(req.method, req.path, content=req.content, headers=req.headers)
                        status, body = answer.status_code, answer.content
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, httpx.HTTPError) as exc:
                    tally.errors[type(exc).__name__] = tally.errors.get(type(exc).__name__, 0) + 1
                    if conn is not None:
                        await conn.close()  # the next request opens a fresh connection
                    continue
                tally.record((time.perf_counter() - t) * 1000, status, body)
        finally:
            if conn is not None:
                await conn.close()

    cpu = time.process_time()
    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if own:
            await client.aclose()
    return tally.summary(concurrency, time.perf_counter() - started, time.process_time() - cpu, kind, keep_latencies)


@dataclass
class _Tally:
    """What the clients saw: latencies of the 200s, the server's own timings, errors by kind."""

    latencies: list[float] = field(default_factory=list)
    server: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    def record(self, ms: float, status: int, body: bytes) -> None:
        if status != 200:
            self.errors[str(status)] = self.errors.get(str(status), 0) + 1
            return
        self.latencies.append(ms)
        for key, value in json.loads(body).get("timings", {}).items():
            self.server.setdefault(key, []).append(value)

    def summary(self, concurrency: int, wall: float, client_cpu: float, kind: str, keep_latencies: bool) -> dict[str, Any]:
        extra = {"latencies_ms": self.latencies} if keep_latencies else {}
        return {**extra, "concurrency": concurrency, **percentiles(self.latencies), "errors": self.errors,
                "queries_per_s": len(self.latencies) / wall, "wall_s": wall, "client_cpu_s": client_cpu,
                "client": kind, "server_timings_p50_ms": {k: float(np.percentile(v, 50)) for k, v in self.server.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--collection", required=True)
    parser.add_argument("--file", type=Path, help="query by this example file (multipart)")
    parser.add_argument("--text", help="or query an image collection by this text")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("-n", "--requests", type=int, default=200, help="per concurrency level")
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--client", choices=["httpx", "raw"], default="httpx")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if bool(args.file) == bool(args.text):
        parser.error("give --file or --text")
    if args.file:
        req = search_file_request(args.collection, args.file.name, args.file.read_bytes(), args.k)
    else:
        req = json_request(f"/v1/collections/{args.collection}/search", {"text": args.text, "k": args.k})
    rows = [asyncio.run(run_load(args.url, [req], c, args.requests, args.max_seconds, kind=args.client)) for c in args.concurrency]
    print(json.dumps(rows, indent=2))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
