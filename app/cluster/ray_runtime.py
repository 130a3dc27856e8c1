"""Connecting to Ray, once per process, and again when its head was restarted.

A Ray head that comes back after being lost is a new cluster (its GCS keeps no state without
Redis): the handles this process holds name actors that no longer exist, and Ray refuses new
calls from the old connection (WrongClusterID). :func:`reconnect` drops the connection and joins
the new head; :data:`GATE` keeps calls out meanwhile (a call made while Ray is not connected would
start a private local Ray instead), and those calls count as missing shards (503).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from app.settings import ClusterSettings

NAMESPACE = "recall"
_lock = threading.Lock()


def ensure_ray(address: str, cluster: ClusterSettings | None = None) -> None:
    """``ray.init`` unless this process is already connected (tests start one local Ray per session).

    ``address='local'`` starts a private local Ray (one machine, for trying cluster mode out);
    anything else is joined by address ('auto', 'head:6379', 'ray://head:10001', ...) with the
    token and node address of ``cluster`` (app/cluster/ray_connect.py). `recall serve` calls this
    at start with its settings, so a head it cannot join stops it there with
    :class:`~app.cluster.ray_connect.RayHeadUnavailable`; later calls find Ray connected.
    """
    from app.cluster.ray_connect import init_ray

    with _lock:
        ray = sys.modules.get("ray")  # not imported yet: init_ray sets Ray's variables before it is
        if ray is not None and ray.is_initialized():
            return
        init_ray(address, cluster if cluster is not None else ClusterSettings(), NAMESPACE)


class Reconnecting(RuntimeError):
    """Ray is being reconnected to a restarted head: no call can be made right now."""


class _Gate:
    """Calls into Ray pass while it is open; :func:`reconnect` closes it, waiting for the calls in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0
        self._closed = False

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

    def close(self, wait_s: float) -> None:
        """Refuse new calls and wait (bounded) for those in flight: calls to a lost head time out."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._calls == 0, timeout=wait_s)

    def open(self) -> None:
        with self._cond:
            self._closed = False


GATE = _Gate()


def reconnect(address: str, cluster: ClusterSettings, wait_s: float = 30.0) -> None:
    """Leave the lost cluster and join the head at ``address`` again (the API process stays up).

    The gate stays closed if joining fails (the head not ready yet): the caller tries again later,
    and no call reaches an unconnected Ray meanwhile.
    """
    import ray

    GATE.close(wait_s)
    with _lock:
        ray.shutdown()
    ensure_ray(address, cluster)
    GATE.open()
