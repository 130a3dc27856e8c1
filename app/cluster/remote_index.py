"""A collection's index as ``RECALL_INDEX_SHARDS`` Ray shard actors, behind the in-process interface.

The search pipeline and the shared scans use this exactly as they use
:class:`~app.storage.index_store.CollectionIndex`: ``.binary`` / ``.float`` answer
``search(queries, k)`` (scattered to every shard, merged under the tie rule of
app/cluster/topk.py), ``reconstruct(ids)`` and ``len()``. The API process holds no vectors;
it only remembers the latest catalog sequence it has seen (``required_seq``) and sends it with
every call, and each shard replays the catalog up to it before answering.

A shard that does not answer (killed, restarting, its node gone, or slower than
``RECALL_CLUSTER__SHARD_TIMEOUT_S``, 10 s) fails the search with 503 and a reason naming the shard, or, when the
request asks for it (``"partial": true``), gives the merged answer of the other shards marked
``partial``; never a silently short list (see :meth:`RemoteCollectionIndex.shards_missed`). Shard actors are named, detached and restarted by Ray without limit, so every API
process finds the same actors, and a restarted one loads its snapshot and replays the catalog's
writes since (app/cluster/shard_actor.py).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from app.cluster.ray_runtime import GATE, NAMESPACE, Reconnecting, ensure_ray, require_head
from app.cluster.topk import merge_topk
from app.errors import RetryLater, Unhealthy
from app.index import BinaryIndex, FloatIndex
from app.storage.records import Collection

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 1800.0  # a new or restarted shard rebuilding its partition from PostgreSQL
RETRY_AFTER_S = 2  # what a 503 for a missing shard tells the client: a restart from a snapshot takes seconds


def _miss_reason(exc: BaseException) -> str:
    """Why a shard call failed, for the 503's message."""
    from ray import exceptions as rex

    if isinstance(exc, rex.GetTimeoutError):
        return "did not answer in time"
    cause = getattr(exc, "cause", None)
    if type(cause).__name__ == "CatalogUnavailable":  # the shard could not replay: PostgreSQL is unreachable
        return "could not reach the PostgreSQL catalog to catch up"
    return f"is unavailable ({type(exc).__name__})"


def catalog_prefix(catalog_url: str) -> str:
    """The name prefix of every shard actor of one catalog (the URL's host/database part, hashed)."""
    return f"shard:{hashlib.sha1(catalog_url.split('@')[-1].encode()).hexdigest()[:10]}:"


def actor_name(catalog_url: str, collection: Collection, number: int, count: int) -> str:
    """Stable across API processes; new when the collection is recreated or the shard count changes."""
    return f"{catalog_prefix(catalog_url)}{collection.name}:{collection.created_at!r}:{number}/{count}"


class ClusterFull(RetryLater):
    """No Ray node has room for a collection's new shard actors: 503 at once, instead of a request that waits."""

    code = "cluster_full"

    def __init__(self, message: str) -> None:
        super().__init__(message, 30, details={"reason": "no_room_for_shard_actors"})


def require_room(names: list[str], shard_cpus: float) -> None:
    """Raise :class:`ClusterFull` when the shard actors still to be started need more CPU than the cluster has free.

    A detached actor that no node can place waits in Ray, unplaced, for ever; its collection's opening
    waited BUILD_TIMEOUT_S (30 minutes) for the first sync, holding the lock every request of the process
    takes first, so one collection too many froze the whole API (found by the cluster fuzz: every route,
    /healthz included, timed out). Actors that exist already (another process opened them) need nothing.
    ``ray.available_resources`` lags by up to a heartbeat, so two processes opening at once can still
    both pass; the check is for the common case, a cluster that is simply full.
    """
    import ray

    def exists(name: str) -> bool:
        try:
            ray.get_actor(name, namespace=NAMESPACE)
            return True
        except ValueError:
            return False

    new = [name for name in names if not exists(name)]
    if not new or shard_cpus <= 0:
        return
    free = float(ray.available_resources().get("CPU", 0.0))
    need = len(new) * shard_cpus
    if need > free + 1e-9:
        raise ClusterFull(
            f"the Ray cluster has {free:g} CPU free and this collection's {len(new)} new shard actors need "
            f"{need:g} (cluster.shard_cpus = {shard_cpus:g} each): delete collections you no longer need, add Ray "
            "nodes or CPUs, or lower cluster.shard_cpus; nothing was changed")


class RemoteCollectionIndex:
    def __init__(self, collection: Collection, actors: list[Any], timeout_s: float) -> None:
        self.collection = collection
        self.actors = actors
        self.timeout_s = timeout_s  # one search's wait for a shard (a restarting one queues calls) before it counts as missing
        self.required_seq = 0
        self._synced_seq = -1
        self._total = 0
        self._memory = 0
        self._lock = threading.Lock()
        self._failures: deque[tuple[float, float, tuple[tuple[int, str], ...]]] = deque(maxlen=1024)
        self.unsnapshotted = 0
        self.snapshots = False
        self.binary = _RemoteKind(self, "binary", BinaryIndex) if "binary" in collection.index_kinds else None
        self.float = _RemoteKind(self, "float", FloatIndex) if "float" in collection.index_kinds else None

    @classmethod
    def open(cls, collection: Collection, settings: Any) -> "RemoteCollectionIndex":
        import ray

        from app.cluster.shard_actor import ShardActor

        # a lost head would take the shard actors' creation and first sync (up to BUILD_TIMEOUT_S) with it: 503 now
        require_head("opening a sharded collection (its shard actors)")
        ensure_ray(settings.ray_address, settings.cluster)
        count = settings.index_shards
        remote = ray.remote(ShardActor)
        cluster = settings.cluster
        snapshot_dir = str(cluster.shard_snapshot_dir) if cluster.shard_snapshot_dir else None
        names = [actor_name(settings.catalog_url, collection, n, count) for n in range(count)]
        require_room(names, cluster.shard_cpus)
        actors = [
            remote.options(
                name=names[n], namespace=NAMESPACE, get_if_exists=True,
                lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=cluster.shard_cpus,
            ).remote(settings.catalog_url, collection, n, count, settings.index.shards, snapshot_dir,
                     cluster.shard_snapshot_s, names[n], settings.index.auto_ivf_windows)
            for n in range(count)
        ]
        self = cls(collection, actors, settings.cluster.shard_timeout_s)
        self._call("sync", 0, timeout=BUILD_TIMEOUT_S, strict=True)  # wait for the partitions to be built
        return self

    # --- scatter ------------------------------------------------------------------------------

    def _call(self, method: str, *args: Any, timeout: float | None = None, strict: bool = False) -> list[Any]:
        """Call every shard; a shard that fails or does not answer in time gives None.

        Each miss is recorded with the call's start and end (see :meth:`shards_missed`), so the
        request whose call it was answers 503 or a marked partial result, never a silently
        short list; ``strict`` raises at once instead.
        """
        import ray
        from ray import exceptions as rex

        start = time.monotonic()
        deadline = start + (self.timeout_s if timeout is None else timeout)
        results: list[Any] = []
        missing: list[tuple[int, str]] = []
        try:
            with GATE.use():
                refs = [getattr(actor, method).remote(*args) for actor in self.actors]
                for number, ref in enumerate(refs):
                    try:
                        results.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
                    except (rex.GetTimeoutError, rex.RayActorError, rex.RayTaskError, rex.RaySystemError) as exc:
                        ray.cancel(ref, force=False)
                        missing.append((number, _miss_reason(exc)))
                        results.append(None)
        except Reconnecting:  # the head was restarted: these actors are gone; the collection reopens shortly
            missing = [(n, "is being reopened on the restarted Ray head") for n in range(len(self.actors))]
            results = [None] * len(self.actors)
        if missing:
            with self._lock:
                self._failures.append((start, time.monotonic(), tuple(missing)))
            if strict:
                raise self._unavailable(missing)
        return results

    def _unavailable(self, missing: list[tuple[int, str]] | tuple[tuple[int, str], ...]) -> Unhealthy:
        number, reason = missing[0]
        error = Unhealthy(
            f"index shard {number + 1} of {len(self.actors)} of collection {self.collection.name!r} {reason}; it is "
            "restarted automatically from its snapshot and the catalog: retry shortly, or ask for a partial result "
            "with \"partial\": true",
            details={"missing_shards": sorted({m[0] + 1 for m in missing}), "shards": len(self.actors),
                     "retry_after_s": RETRY_AFTER_S},
        )
        error.headers = {"Retry-After": str(RETRY_AFTER_S)}  # sent by the HTTP edge (app/api/error_handlers.py)
        return error

    def shards_missed(self, since: float, until: float, allow_partial: bool) -> dict[str, Any] | None:
        """Whether a shard call made between two ``time.monotonic()`` readings missed shards.

        A request reads the clock before and after its search: its own shard calls lie inside
        that window (a batch containing its query starts after the query was submitted), so any
        miss inside the window may be its own. Then: 503 (``Unhealthy``), or with
        ``allow_partial`` the marker its response carries. Conservative: a miss by another
        request's call inside the window marks this one too.
        """
        with self._lock:
            misses = [m for start, end, found in self._failures if start >= since and end <= until for m in found]
        if not misses:
            return None
        if not allow_partial:
            raise self._unavailable(misses)
        numbers = sorted({m[0] + 1 for m in misses})
        return {"missing_shards": numbers, "shards": len(self.actors),
                "reason": "; ".join(sorted({f"shard {m[0] + 1} {m[1]}" for m in misses}))}

    def _refresh(self) -> None:
        target = self.required_seq
        if self._synced_seq >= target:
            return
        stats = self._call("sync", target)
        with self._lock:
            self._total = sum(s["segments"] for s in stats if s is not None)
            self._memory = sum(s["memory_bytes"] for s in stats if s is not None)
            if all(s is not None for s in stats):
                self._synced_seq = max(self._synced_seq, target)

    # --- the CollectionIndex interface -----------------------------------------------------------

    @property
    def applied_seq(self) -> int:
        return self.required_seq

    def catch_up(self, catalog: Any, target: int | None = None) -> int:
        """Remember the newest sequence seen; the shards replay up to it on their next call."""
        if target is None:
            target = catalog.last_seq(self.collection.name)
        with self._lock:
            self.required_seq = max(self.required_seq, target)
        return self.required_seq

    def apply_shared(self, write: Any, catalog: Any) -> None:
        with self._lock:
            self.required_seq = max(self.required_seq, write.seq)

    def indices(self) -> list[tuple[str, Any]]:
        return [(k, ix) for k, ix in (("binary", self.binary), ("float", self.float)) if ix is not None]

    def __len__(self) -> int:
        self._refresh()
        return self._total

    def memory_bytes(self) -> int:
        self._refresh()
        return self._memory

    def shard_stats(self) -> list[dict[str, Any]]:
        return self._call("stats", strict=True)

    def describe_index(self) -> dict[str, Any] | None:
        """Which index answers on each shard, for GET /v1/collections/{name} (app/cluster/index_report.py)."""
        from app.cluster.index_report import merge_shard_indices

        return merge_shard_indices(self.collection.index_spec, self._call("stats"))

    def snapshot(self, catalog: Any) -> None:
        """Nothing to write: the shards rebuild from the catalog."""

    def ensure_deletable(self) -> None:
        """Before the catalog row goes: its shard actors and their snapshots can only be removed through the head,
        so while it is lost the delete answers 503 ray_unavailable with nothing deleted (retry once it is back)."""
        require_head("deleting a sharded collection (its shard actors and their snapshots)")

    def delete_files(self) -> None:
        """The collection was deleted: its shard actors go too, their snapshots first."""
        retire_shards(self.actors)


def retire_shards(actors: list[Any]) -> bool:
    """Delete each shard's snapshots (waiting a few seconds at most), then end it for good; whether Ray could be asked.

    Never raises: it runs after the catalog row is gone, so a head lost in between leaves the actors to die
    with it, or, if it survives, to the orphan sweep run on rejoin (app/cluster/shard_lifecycle.py).
    """
    import ray

    try:
        with GATE.use():
            dropped = [actor.drop_snapshots.remote() for actor in actors]
            try:
                ray.wait(dropped, num_returns=len(dropped), timeout=5.0)
            except Exception:  # noqa: BLE001 - a shard already gone has nothing to drop here
                pass
            require_head("retiring shard actors")  # ray.kill goes through the GCS: never wait on a dead head
            for actor in actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
        return True
    except Exception as exc:  # noqa: BLE001 - Reconnecting, or Ray left: nothing can be asked of the head now
        log.warning("%d shard actor(s) not retired (%s: %s): left to the orphan sweep on rejoin",
                    len(actors), type(exc).__name__, exc)
        return False


class _RemoteKind:
    """One index kind across the shards."""

    # the search pipeline passes a query's IVF nprobe to an index that takes one (app/search/pipeline.py)
    takes_nprobe = True

    def __init__(self, owner: RemoteCollectionIndex, kind: str, cls: type) -> None:
        self.owner, self.kind, self.cls = owner, kind, cls
        self.dim = owner.collection.dim
        self.bits = owner.collection.bits

    def search(self, queries: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The merged top k; ``nprobe`` (binary) goes to every shard, each IVF probing that many of its own lists."""
        parts = self.owner._call("search", self.kind, np.ascontiguousarray(queries), int(k), self.owner.required_seq,
                                 None if nprobe is None or self.kind != "binary" else int(nprobe))
        answered = [(p[0], p[1]) for p in parts if p is not None]
        if not answered:  # every shard missing: an empty (and recorded) answer
            return (np.full((len(queries), int(k)), self.cls.PAD_VALUE, dtype=self.cls.SCORE_DTYPE),
                    np.full((len(queries), int(k)), -1, dtype=np.int64))
        return merge_topk(answered, int(k), ascending=self.cls.ASCENDING)

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of ``ids`` from whichever shard holds each; an id deleted since the scan gets zeros."""
        ids = np.asarray(ids, dtype=np.int64)
        parts = self.owner._call("reconstruct", self.kind, ids, self.owner.required_seq)
        width = self.owner.collection.dim if self.kind == "float" else self.owner.collection.bits // 8
        out = np.zeros((len(ids), width), dtype=np.float32 if self.kind == "float" else np.uint8)
        where = {int(i): n for n, i in enumerate(ids.tolist())}
        for part in parts:
            if part is not None:
                for sid, vector in zip(part[0].tolist(), part[1]):
                    out[where[sid]] = vector
        return out

    def reconstruct_present(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids some shard still holds, their vectors), in the order given."""
        ids = np.asarray(ids, dtype=np.int64)
        parts = self.owner._call("reconstruct", self.kind, ids, self.owner.required_seq)
        found: dict[int, np.ndarray] = {}
        for part in parts:
            if part is not None:
                found.update(zip(part[0].tolist(), part[1]))
        keep = np.asarray([i for i in ids.tolist() if i in found], dtype=np.int64)
        width = self.dim if self.kind == "float" else self.bits // 8
        dtype = np.float32 if self.kind == "float" else np.uint8
        vectors = np.stack([found[i] for i in keep.tolist()]).astype(dtype) if len(keep) else np.zeros((0, width), dtype)
        return keep, vectors

    def __contains__(self, segment_id: int) -> bool:
        # a shortlisted id was in its shard at scan time; reconstruct answers for those deleted since
        return True

    def __len__(self) -> int:
        return len(self.owner)

    def ids(self) -> np.ndarray:
        return np.sort(np.concatenate([np.asarray(p, dtype=np.int64) for p in self.owner._call("ids", self.kind, strict=True)]))

    def memory_bytes(self) -> int:
        return self.owner.memory_bytes()
