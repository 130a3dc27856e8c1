"""The cluster service the fuzz runs against (``python -m bench.reliability.fuzz --cluster``).

``recall serve`` in its own process on a PostgreSQL catalog and Ray index shard actors, with PostgreSQL and a
Ray head started on 127.0.0.1 for the run as the cluster tests start them (needs the postgresql Debian package).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from bench.reliability.fuzz_seed import KEY, MAX_UPLOAD_BYTES, SYNC_INGEST_FILES


@contextlib.contextmanager
def cluster_service(tmp: Path) -> Iterator[str]:
    """``recall serve`` in cluster mode (PostgreSQL catalog, Ray shard actors) with the fuzz's settings; its URL."""
    from tests.cluster.pg_server import PgServer
    from tests.cluster.ray_head import RayHead
    from tests.cluster.serve import serve

    pg, head, api = PgServer().start(), None, None
    try:
        head = RayHead(cpus=4).start()
        # 0.1 CPU per shard actor (default 0.25): room for 20 collections of 2 shards on the 4 declared CPUs, the 3
        # seeded ones and what the cases create between two prunes; past that creates answer 503 cluster_full,
        # right for a full cluster but counted as server errors by the fuzz (649 of them on 2026-11-27)
        api = serve(tmp / "data", pg.new_database(), **head.env(), RECALL_INDEX__SHARDS="2", RECALL_CLUSTER__SHARD_CPUS="0.1",
                    RECALL_API_KEYS=KEY, RECALL_LIMITS__MAX_UPLOAD_BYTES=str(MAX_UPLOAD_BYTES),
                    RECALL_LIMITS__SYNC_INGEST_FILES=str(SYNC_INGEST_FILES))
        yield api.url
    finally:
        for stop in (api and api.kill, head and head.stop, pg.stop):
            if stop:
                stop()
