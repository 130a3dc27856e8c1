"""Index kinds for binary codes: recall@10 against exact flat search, query latency, build time.

Writes ``bench/results/index_kinds.json``. Each size and code length is one block in which every
kind is built and queried in the same run, so speed-ups over flat are same-run ratios.

The codes are clustered, as embeddings are (uniform random bits have no neighbourhood structure
at all: every approximate index looks useless on them): vectors from a Gaussian mixture in 128-d
with Zipf-weighted centres, turned into codes by the sign of random projections (SimHash), which
is how a sign-of-embedding code relates to its embedding. Half the queries are fresh draws from
the mixture, half are stored vectors with noise added (query by example: the same sound again,
recorded differently).

Recall@10 is tie-tolerant: a returned code counts when its true Hamming distance is at most the
10th true distance (Hamming distances tie often, and any of the tied codes is a right answer).

    python -m bench.index.index_kinds                       # 1e5 and 1e6 codes, 256 and 512 bits
    python -m bench.index.index_kinds --sizes 20000 --bits 256 --queries 50 --no-hnsw --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from app.index import AdaptiveBinaryIndex, BinaryIndex, BinaryIVF
from app.index.kinds import IndexSpec, auto_nlist, default_nprobe
from bench.index._measure import K, latencies, relabel, tie_tolerant_recall

DIM = 128
OUT = Path(__file__).resolve().parents[1] / "results" / "index_kinds.json"


# --- data ---------------------------------------------------------------------------------------

class Mixture:
    """A Gaussian mixture in ``dim`` dimensions and a SimHash projection to ``bits`` bits."""

    def __init__(self, bits: int, seed: int = 0, centres: int = 2048, spread: float = 1.0, dim: int = DIM) -> None:
        rng = np.random.default_rng(seed)
        self.centres = rng.standard_normal((centres, dim)).astype(np.float32)
        weights = 1.0 / np.arange(1, centres + 1) ** 0.8  # a few common sounds, a long tail of rare ones
        self.weights = weights / weights.sum()
        self.projection = rng.standard_normal((dim, bits)).astype(np.float32)
        self.spread = spread
        self.seed = seed

    def vectors(self, n: int, rng: np.random.Generator) -> np.ndarray:
        labels = rng.choice(len(self.centres), n, p=self.weights)
        return self.centres[labels] + self.spread * rng.standard_normal((n, self.centres.shape[1])).astype(np.float32)

    def codes_of(self, vectors: np.ndarray) -> np.ndarray:
        return np.packbits(vectors @ self.projection > 0, axis=1, bitorder="little")

    def database(self, n: int, chunk: int = 100_000) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, a sample of 1000 of their vectors with row numbers)`` in chunks (10^6 x 128 floats stay off the heap)."""
        rng = np.random.default_rng(self.seed + 1)
        parts, keep_rows, keep = [], [], []
        for start in range(0, n, chunk):
            x = self.vectors(min(chunk, n - start), rng)
            parts.append(self.codes_of(x))
            if start == 0:
                keep = x[: min(1000, len(x))]
        return np.concatenate(parts), keep

    def queries(self, n: int, stored: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng(self.seed + 2)
        fresh = self.vectors(n - n // 2, rng)
        echoes = stored[rng.integers(0, len(stored), n // 2)] + 0.5 * self.spread * rng.standard_normal((n // 2, stored.shape[1])).astype(np.float32)
        return self.codes_of(np.concatenate([fresh, echoes]))


def clustered_codes(n: int, bits: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(database codes, query codes)`` of the bench's mixture (also used by the tests)."""
    mixture = Mixture(bits, seed=seed, centres=max(16, min(2048, n // 50)))
    codes, stored = mixture.database(n)
    return codes, mixture.queries(queries, stored)


# --- measuring ----------------------------------------------------------------------------------

def run_block(n: int, bits: int, n_queries: int, hnsw: bool, multihash: bool, nprobes: list[int]) -> dict[str, Any]:
    t = time.perf_counter()
    codes, queries = clustered_codes(n, bits, n_queries)
    ids = np.arange(n, dtype=np.int64) * 3 + 7  # ids that are not row numbers
    block: dict[str, Any] = {"windows": n, "bits": bits, "queries": n_queries, "data_s": time.perf_counter() - t, "runs": []}

    t = time.perf_counter()
    flat = BinaryIndex(bits, shards=2)
    flat.add(ids, codes)
    flat_build = time.perf_counter() - t
    stats, true_d, _ = latencies(lambda q: flat.search(q, K), queries)
    block["flat"] = {"kind": "flat", "build_s": flat_build, "recall_at_10": 1.0, **stats, "memory_bytes": flat.memory_bytes()}
    block["contrast"] = {"mean_d1": float(true_d[:, 0].mean()), "mean_d10": float(true_d[:, K - 1].mean()),
                         "median_random_pair": float(np.median(np.unpackbits(codes[:500] ^ codes[500:1000], axis=1).sum(axis=1)))}

    def record(kind: str, params: dict[str, Any], build_s: float, search, memory: int | None) -> None:
        stats, got_d, got_ids = latencies(search, queries)
        row = {"kind": kind, **params, "build_s": build_s, "recall_at_10": tie_tolerant_recall(true_d, got_d, got_ids),
               **stats, "speedup_p50_vs_flat": block["flat"]["p50_ms"] / stats["p50_ms"]}
        if memory is not None:
            row["memory_bytes"] = memory
        block["runs"].append(row)
        print(json.dumps({"windows": n, "bits": bits, **row}), flush=True)

    # IVF as the service builds it (app/index/ivf.py: sampled training), at the service's nlist and a quarter of it
    for nlist in sorted({auto_nlist(n) // 4, auto_nlist(n)}):
        if n < 39 * nlist:
            continue
        t = time.perf_counter()
        ivf = BinaryIVF.train(codes, nlist)
        ivf.add(ids, codes)
        build = time.perf_counter() - t
        for nprobe in sorted({*(p for p in nprobes if p <= nlist), default_nprobe(nlist, n)}):
            record("ivf", {"nlist": nlist, "nprobe": nprobe, "default": nprobe == default_nprobe(nlist, n) and nlist == auto_nlist(n)},
                   build, lambda q, ivf=ivf, p=nprobe: ivf.search(q, K, p), ivf.memory_bytes())
        if nlist == auto_nlist(n):  # what a delete costs without a direct map (app/index/ivf.py)
            gone = ids[np.random.default_rng(3).choice(n, 100, replace=False)]
            t = time.perf_counter()
            ivf.remove(gone)
            block["ivf_remove_100_ms"] = (time.perf_counter() - t) * 1000
        del ivf

    if hnsw:
        t = time.perf_counter()
        graph = faiss.IndexBinaryHNSW(bits, 32)
        graph.add(codes)
        build = time.perf_counter() - t
        for ef in (16, 32, 64, 128):
            graph.hnsw.efSearch = ef
            record("hnsw", {"M": 32, "efSearch": ef}, build,
                   lambda q, g=graph: relabel(g.search(q, K), ids), n * (bits // 8 + 2 * 32 * 4))
        del graph

    if multihash:
        for nhash, b, nflip in ((8, 16, 1), (8, 16, 2), (16, 16, 2)):
            if b * nhash > bits:
                continue
            t = time.perf_counter()
            mh = faiss.IndexBinaryMultiHash(bits, nhash, b)
            mh.add(codes)
            build = time.perf_counter() - t
            mh.nflip = nflip
            record("multihash", {"nhash": nhash, "b": b, "nflip": nflip}, build, lambda q, m=mh: relabel(m.search(q, K), ids), None)
            del mh
    return block


def wrapper_overhead(n: int, bits: int, rounds: int = 4000) -> dict[str, Any]:
    """Same-run A/B: one query through BinaryIndex.search and through AdaptiveBinaryIndex.search while flat
    answers (a collection under the automatic threshold), interleaved call by call."""
    codes, queries = clustered_codes(n, bits, 200)
    ids = np.arange(n, dtype=np.int64)
    plain = BinaryIndex(bits, shards=2)
    plain.add(ids, codes)
    wrapped = AdaptiveBinaryIndex(bits, shards=2, spec=IndexSpec("auto"), auto_windows=10**9)
    wrapped.add(ids, codes)
    times: dict[str, list[float]] = {"BinaryIndex": [], "AdaptiveBinaryIndex (flat answering)": []}
    for i in range(rounds):
        q = queries[i % len(queries) : i % len(queries) + 1]
        for name, index in (("BinaryIndex", plain), ("AdaptiveBinaryIndex (flat answering)", wrapped))[:: 1 if i % 2 else -1]:
            t = time.perf_counter()
            index.search(q, K)
            times[name].append((time.perf_counter() - t) * 1000)
    out = {name: {"p50_ms": float(np.median(v)), "mean_ms": float(np.mean(v))} for name, v in times.items()}
    a, b = out["BinaryIndex"]["p50_ms"], out["AdaptiveBinaryIndex (flat answering)"]["p50_ms"]
    return {"windows": n, "bits": bits, "rounds": rounds, **out, "p50_ratio": b / a}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--bits", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--no-hnsw", action="store_true")
    parser.add_argument("--no-multihash", action="store_true")
    parser.add_argument("--overhead-only", action="store_true", help="only the flat-path A/B (wrapper_overhead) at each size")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.overhead_only:
        rows = [wrapper_overhead(n, bits) for n in args.sizes for bits in args.bits]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "faiss": faiss.__version__}, "overhead": rows}, indent=1))
        print(json.dumps(rows, indent=1))
        return {"overhead": rows}
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__},
        "k": K, "recall": "tie-tolerant recall@10 against exact flat search", "blocks": [],
    }
    for n in args.sizes:
        for bits in args.bits:
            result["blocks"].append(run_block(n, bits, args.queries, not args.no_hnsw, not args.no_multihash, args.nprobe))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
