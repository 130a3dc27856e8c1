"""API keys with scopes, stored hashed: the key file, key creation, and checking a presented key.

A key is ``rk_<id>_<secret>``: ``id`` (8 hex characters) names the key in the file, in logs and
in ``recall keys list``/``revoke``; ``secret`` is 32 random bytes (``secrets.token_urlsafe``). The
file keeps ``sha256(key)`` only, so a copy of the file (a backup, a leaked volume) lets nobody
call the service.

Why SHA-256 and not scrypt/PBKDF2: slow, salted hashes exist to make guessing *low-entropy*
passwords expensive. A key here carries 256 random bits, so no dictionary or precomputed table
can reach it and one fast hash is already out of brute force's reach; a slow hash would instead
cost every request tens of milliseconds of CPU (and hand an attacker a cheap way to burn it).
The stored hash is compared with :func:`hmac.compare_digest` (constant time).

Scopes are independent: ``read`` (search, list, get, job status), ``write`` (ingest, delete items,
judgments, demo data), ``admin`` (create and delete collections). A key holds any set of them, so
an uploader can hold ``write`` alone and a dashboard ``read`` alone. Keys listed in the
``RECALL_API_KEYS`` setting (plain text, the older form) hold every scope.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

SCOPES = ("read", "write", "admin")
PREFIX = "rk_"


@dataclass(frozen=True)
class KeyRecord:
    id: str
    hash: str  # "sha256:<hex>"
    scopes: frozenset[str]
    name: str = ""
    created_at: float = 0.0

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "scopes": sorted(self.scopes), "created_at": self.created_at}


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def parse_scopes(text: str | Iterable[str]) -> frozenset[str]:
    parts = [p.strip() for p in (text.replace("+", ",").split(",") if isinstance(text, str) else text)]
    scopes = frozenset(p for p in parts if p)
    unknown = scopes - set(SCOPES)
    if not scopes or unknown:
        raise ValueError(f"scopes must be a non-empty subset of {', '.join(SCOPES)}; got {sorted(scopes)}")
    return scopes


def key_id(key: str) -> str | None:
    """The id part of ``rk_<id>_<secret>``, or None for a key of another form."""
    if not key.startswith(PREFIX):
        return None
    ident, sep, _ = key[len(PREFIX):].partition("_")
    return ident if sep and ident else None


class KeyFile:
    """The JSON file of hashed keys (``RECALL_KEYS_FILE``, default ``<data_dir>/keys.json``).

    The service re-reads it when its modification time or size changes, so ``recall keys create``
    and ``revoke`` take effect on a running service without a restart.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        # Creating and revoking read, change and rewrite the whole file. Unserialised, two at once
        # lost one of the changes (an acknowledged key missing) or raced on the temporary file (a
        # 500, found by the fuzz: bench/reliability/fuzz.py). This lock serialises the threads of a process,
        # the flock of _changing() the processes sharing the file (the CLI, cluster replicas).
        self._write_lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._records: dict[str, KeyRecord] = {}

    def records(self) -> dict[str, KeyRecord]:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._records = self._read() if stamp is not None else {}
                self._stamp = stamp
            return self._records

    def _read(self) -> dict[str, KeyRecord]:
        data = json.loads(self.path.read_text() or "{}")
        records = {}
        for row in data.get("keys", []):
            record = KeyRecord(row["id"], row["hash"], parse_scopes(row["scopes"]), row.get("name", ""),
                               float(row.get("created_at", 0.0)))
            records[record.id] = record
        return records

    def _write(self, records: Iterable[KeyRecord]) -> None:
        rows = [{**r.public(), "hash": r.hash} for r in records]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        # owner-only: the hashes are not secrets, but which ids exist and their scopes are nobody else's business
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"keys": rows}, f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)  # readers see the old file or the new one, never half of one
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves the old file as it was, and no stray temporary
            raise

    @contextmanager
    def _changing(self) -> Iterator[dict[str, KeyRecord]]:
        """The current records, read under the locks that keep out every other change until the write."""
        with self._write_lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a lock file beside the key file (which os.replace swaps, so it cannot carry the lock itself)
            fd = os.open(self.path.with_name(f".{self.path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield dict(self._read()) if self.path.exists() else {}  # the file as it is now, not a cache
            finally:
                os.close(fd)  # releases the flock

    def create(self, scopes: Iterable[str] | str, name: str = "") -> tuple[str, KeyRecord]:
        """A new key: returns the key (shown once, never stored) and its stored record."""
        wanted = parse_scopes(scopes)
        with self._changing() as records:
            ident = secrets.token_hex(4)
            while ident in records:
                ident = secrets.token_hex(4)
            key = f"{PREFIX}{ident}_{secrets.token_urlsafe(32)}"
            record = KeyRecord(ident, hash_key(key), wanted, name, time.time())
            self._write([*records.values(), record])
        return key, record

    def revoke(self, ident: str) -> bool:
        with self._changing() as records:
            if records.pop(ident, None) is None:
                return False
            self._write(records.values())
        return True


@dataclass
class KeyRing:
    """Every key the service accepts: the key file's, and plain keys from settings (all scopes)."""

    file: KeyFile
    plain: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # plain keys are hashed once here, so checking them is the same constant-time hash compare
        self._plain = [KeyRecord(f"env-{n}", hash_key(k), frozenset(SCOPES)) for n, k in enumerate(self.plain)]

    @property
    def enabled(self) -> bool:
        return bool(self._plain) or bool(self.file.records())

    def check(self, presented: str) -> KeyRecord | None:
        """The record of a valid key, or None. Compares hashes in constant time; never the key itself."""
        digest = hash_key(presented).encode()
        ident = key_id(presented)
        record = self.file.records().get(ident) if ident is not None else None
        found = record if record is not None and hmac.compare_digest(digest, record.hash.encode()) else None
        # compare against every plain key without stopping early, so timing says nothing about which matched
        for candidate in self._plain:
            if hmac.compare_digest(digest, candidate.hash.encode()) and found is None:
                found = candidate
        return found
