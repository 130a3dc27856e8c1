"""Connecting to Ray, once per process."""

from __future__ import annotations

import sys
import threading

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
