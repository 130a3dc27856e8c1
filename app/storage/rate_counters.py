"""Cluster-wide rate counters in the PostgreSQL catalog: one row per client, one statement per request.

Cluster mode runs several API processes on one catalog; a per-process token bucket would let a
client make ``replicas x rate`` requests. Here every process updates the same row instead.

The bucket is kept in its GCRA form (the generic cell rate algorithm, the same token bucket):
a row holds only ``tat``, the "theoretical arrival time" at which the client's bucket would be
full again. With ``T = 1 / rate``, a request at ``now`` is allowed when
``max(tat, now) + T - now <= burst * T`` (the bucket holds at least one token), and then
``tat`` moves to ``max(tat, now) + T``. That is a single conditional UPSERT: PostgreSQL's row lock
makes concurrent requests from every replica take turns on the row, so no token is spent twice.
Time is PostgreSQL's clock (``clock_timestamp()``), so replicas' clock skew does not matter.

A refused request changes nothing; its wait comes from the row as it was before the statement
(a CTE's main query reads the snapshot from before its data-modifying part), in the same round
trip. A row whose ``tat`` has passed is a full bucket, the same as no row: :meth:`prune`
deletes those, so the table holds only the clients active within the last ``burst / rate`` s.

The table is a cache, not data: it is created on first use (``CREATE UNLOGGED TABLE IF NOT
EXISTS``, no migration) and losing it only refills every bucket. UNLOGGED: its updates write no
WAL, so a request does not wait for a WAL flush (fsync) for its token; PostgreSQL empties the
table after a crash, which is the same as every bucket full. The connection is psycopg's async one, its
own (not the catalog's: a search must not wait behind an ingest's transaction for its token).
"""

from __future__ import annotations

from typing import Any

import psycopg

CREATE = "CREATE UNLOGGED TABLE IF NOT EXISTS rate_counters (client TEXT PRIMARY KEY, tat DOUBLE PRECISION NOT NULL)"

# %(t)s = 1 / rate, %(burst)s; allowed: the upsert returns a row; refused: the row as it was
TAKE = """
WITH now AS (SELECT extract(epoch FROM clock_timestamp())::double precision AS at),
up AS (
    INSERT INTO rate_counters AS r (client, tat) SELECT %(client)s, now.at + %(t)s FROM now
    ON CONFLICT (client) DO UPDATE SET tat = GREATEST(r.tat, (SELECT at FROM now)) + %(t)s
    WHERE GREATEST(r.tat, (SELECT at FROM now)) + %(t)s - (SELECT at FROM now) <= %(burst)s * %(t)s
    RETURNING r.tat
)
SELECT (SELECT count(*) FROM up) AS allowed,
       (SELECT tat FROM rate_counters WHERE client = %(client)s) AS tat_before,
       (SELECT at FROM now) AS now
"""

CREATE_LOCK = 0x52415445  # "RATE": the advisory lock the table's creation takes

PRUNE = "DELETE FROM rate_counters WHERE tat < extract(epoch FROM clock_timestamp())"


def wait_after_refusal(tat_before: float, now: float, rate: float, burst: int) -> float:
    """Seconds until the next token: when ``max(tat, now) + T - now <= burst * T`` holds again."""
    return max(1e-3, tat_before - now - (burst - 1) / rate)


class RateCounters:
    """The shared counters over one async connection; the caller serialises calls (one at a time)."""

    def __init__(self, url: str, connect_timeout_s: float) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._db: psycopg.AsyncConnection | None = None

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._db is None or self._db.closed or self._db.broken:
            db = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s)))
            async with db.transaction():  # replicas starting together: CREATE ... IF NOT EXISTS races otherwise
                await db.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
                await db.execute(CREATE)
            self._db = db
        return self._db

    async def take(self, client: str, rate: float, burst: int) -> float:
        """One token from ``client``'s cluster-wide bucket: 0.0 when allowed, else seconds to wait."""
        db = await self._connection()
        cur = await db.execute(TAKE, {"client": client, "t": 1.0 / rate, "burst": burst})
        allowed, tat_before, now = await cur.fetchone()  # type: ignore[misc]
        if allowed:
            return 0.0
        if tat_before is None:  # refused on a row another replica inserted after this statement's snapshot
            return 1.0 / rate
        return wait_after_refusal(float(tat_before), float(now), rate, burst)

    async def prune(self) -> int:
        db = await self._connection()
        cur = await db.execute(PRUNE)
        return cur.rowcount

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    def drop(self) -> None:
        """Forget a connection left in an unknown state (a timed-out statement); the next call reconnects."""
        db: Any = self._db
        self._db = None
        if db is not None:
            try:
                db.pgconn.finish()  # close the socket without awaiting a server that may not answer
            except Exception:  # noqa: BLE001 - already gone
                pass
