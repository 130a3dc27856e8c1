"""Connecting to Ray once per process, leaving a head that is lost, and joining it again when it is back.

A Ray head that comes back after being lost is a new cluster (its GCS keeps no state without
Redis): the handles this process holds name actors that no longer exist, and Ray refuses new
calls from the old connection (WrongClusterID). :func:`reconnect` drops the connection and joins
the new head; :data:`GATE` keeps calls out meanwhile (a call made while Ray is not connected would
start a private local Ray instead), and those calls count as missing shards (503).

A head that stays away is a different danger: the core worker Ray runs inside this process ends
the whole process (``std::_Exit``, "Failed to connect to GCS within 60 seconds") once its GCS has
been unreachable for ``gcs_rpc_server_reconnect_timeout_s`` (60 s; Ray reads
``RAY_gcs_rpc_server_reconnect_timeout_s``). :func:`disconnect` leaves the lost cluster before that
(``ray.shutdown()``, which with the head gone takes about 5 s here): with no core worker left,
nothing can end the process however long the outage lasts, and the gate stays closed until
:func:`reconnect` succeeds. Each successful join counts one :func:`generation`; actor handles made
under an older one are reopened by their owners (shards by reopening their collection,
embedding workers by app/cluster/embedding.py).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from app.errors import RetryLater
from app.settings import ClusterSettings

NAMESPACE = "recall"
RETRY_AFTER_S = 2  # what a 503 for a lost head tells the client (the head watch probes every 2 s)
GCS_TIMEOUT_VARIABLE = "RAY_gcs_rpc_server_reconnect_timeout_s"
GCS_TIMEOUT_DEFAULT_S = 60.0
_lock = threading.Lock()
_generation = 0
_head_lost = threading.Event()


class RayUnavailable(RetryLater):
    """The Ray head cannot be reached: what needs it answers 503 with Retry-After until it is rejoined."""

    code = "ray_unavailable"

    def __init__(self, needed_for: str) -> None:
        super().__init__(
            f"the Ray head cannot be reached, and {needed_for} runs on it; nothing was stored: the service rejoins "
            f"the head by itself once it is back, retry in {RETRY_AFTER_S} s", RETRY_AFTER_S,
            details={"reason": "ray_head_unreachable", "retry_after_s": RETRY_AFTER_S})


def generation() -> int:
    """How many times this process has joined a Ray cluster; it changes when a restarted head is rejoined."""
    return _generation


def gcs_timeout_s() -> float:
    """Ray's limit on a lost GCS before its core worker ends this process (read by Ray from the same variable)."""
    try:
        value = float(os.environ.get(GCS_TIMEOUT_VARIABLE, GCS_TIMEOUT_DEFAULT_S))
    except ValueError:
        return GCS_TIMEOUT_DEFAULT_S
    return value if value > 0 else GCS_TIMEOUT_DEFAULT_S


def connected() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def mark_head_lost(lost: bool) -> None:
    """Set by the head watch: calls that would wait on the head's actors give up at once (503) while it is set."""
    _head_lost.set() if lost else _head_lost.clear()


def head_lost() -> bool:
    return _head_lost.is_set()


def require_head(needed_for: str) -> None:
    """Raise :class:`RayUnavailable` (503, Retry-After) while the head is lost or left, before anything is changed:
    for operations that must not half happen (a sharded collection created or deleted, app/cluster/shard_lifecycle.py).

    The head watch marks a lost head up to one probe interval late, so the GCS port is tried here too (a
    connect, ~1 ms): a call that needs the GCS (creating or killing an actor) would otherwise wait on a dead head."""
    if head_lost() or GATE.closed or not gcs_answers():
        raise RayUnavailable(needed_for)


def gcs_answers(timeout_s: float = 1.0) -> bool:
    """Whether the GCS this process is joined to accepts a connection (True when there is none to try:
    not joined yet, or Ray Client)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return True
    try:
        host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
    except Exception:  # noqa: BLE001 - Ray Client has no GCS address to try
        return True
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        return True
    except (OSError, ValueError):
        return False


def ensure_ray(address: str, cluster: ClusterSettings | None = None) -> None:
    """``ray.init`` unless this process is already connected (tests start one local Ray per session).

    ``address='local'`` starts a private local Ray (one machine, for trying cluster mode out);
    anything else is joined by address ('auto', 'head:6379', 'ray://head:10001', ...) with the
    token and node address of ``cluster`` (app/cluster/ray_connect.py). `recall serve` calls this
    at start with its settings, so a head it cannot join stops it there with
    :class:`~app.cluster.ray_connect.RayHeadUnavailable`; later calls find Ray connected. While this
    process has left a lost head (:func:`disconnect`), it raises :class:`RayUnavailable` (503)
    instead: only the head watch joins again.
    """
    if GATE.closed:
        raise RayUnavailable("opening a sharded collection")
    with _lock:
        if not connected():  # not imported yet: init_ray sets Ray's variables before it is
            _join(address, cluster)


def _join(address: str, cluster: ClusterSettings | None) -> None:
    global _generation
    from app.cluster.ray_connect import init_ray

    init_ray(address, cluster if cluster is not None else ClusterSettings(), NAMESPACE)
    _generation += 1
    _auto_connect(os.environ.get("RAY_ENABLE_AUTO_CONNECT", "") != "0")  # Ray's own default again


def _auto_connect(on: bool) -> None:
    """Whether a Ray call made while not connected starts a private local Ray (Ray's default) or raises."""
    hook = sys.modules.get("ray._private.auto_init_hook")
    if hook is not None:
        hook.enable_auto_connect = on


class Reconnecting(RuntimeError):
    """Ray is being reconnected to a restarted head, or has left a lost one: no call can be made right now."""


class _Gate:
    """Calls into Ray pass while it is open; :func:`reconnect` closes it, waiting for the calls in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """Also read by calls in flight that wait in steps (embedding), so they end before Ray is shut down."""
        return self._closed

    @contextmanager
    def use(self) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise Reconnecting("Ray is reconnecting to its restarted head")
            self._calls += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls -= 1
                self._cond.notify_all()

    def close(self, wait_s: float) -> bool:
        """Refuse new calls and wait (bounded) for those in flight: calls to a lost head time out.
        Whether every call in flight ended."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._calls == 0, timeout=wait_s)

    def open(self) -> None:
        with self._cond:
            self._closed = False


GATE = _Gate()


def disconnect(wait_s: float) -> None:
    """Leave a head that cannot be reached, before Ray's own timeout ends the process (see the module's doc).

    The gate stays closed: sharded searches answer 503, Ray-bound encodes 503, until :func:`reconnect`.
    """
    GATE.close(wait_s)
    with _lock:
        _auto_connect(False)  # a stray call past the gate raises instead of starting a private local Ray
        if connected():
            import ray

            ray.shutdown()


def reconnect(address: str, cluster: ClusterSettings, wait_s: float = 30.0) -> None:
    """Leave the lost cluster (if not left already) and join the head at ``address`` again (the API process stays up).

    The gate stays closed if joining fails (the head not ready yet): the caller tries again later,
    and no call reaches an unconnected Ray meanwhile.
    """
    GATE.close(wait_s)
    with _lock:
        if connected():
            import ray

            ray.shutdown()
        _join(address, cluster)
    GATE.open()
