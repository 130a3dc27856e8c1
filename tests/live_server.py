"""A real Recall service on a free local port, in a background thread (browser and client tests)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import uvicorn

from app.main import create_app
from app.settings import Settings


@contextmanager
def live_server(settings: Settings, startup_timeout: float = 60.0) -> Iterator[str]:
    """Run ``create_app(settings)`` under uvicorn and yield its base URL; stops it on exit."""
    # bind first and hand uvicorn the socket: no race for the port between choosing and binding
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="recall-live-server")
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the service stopped during startup; see the log above")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not start within {startup_timeout} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
