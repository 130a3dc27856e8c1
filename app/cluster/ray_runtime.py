"""Connecting to Ray, once per process."""

from __future__ import annotations

import threading

NAMESPACE = "recall"
_lock = threading.Lock()


def ensure_ray(address: str) -> None:
    """``ray.init`` unless this process is already connected (tests start one local Ray per session).

    ``address='local'`` starts a private local Ray (one machine, for trying cluster mode out);
    anything else is handed to ``ray.init(address=...)`` ('auto', 'ray://head:10001', ...).
    """
    import ray

    with _lock:
        if ray.is_initialized():
            return
        if address == "local":
            ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
