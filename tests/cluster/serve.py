"""`recall serve` as a separate process on a free port (cluster tests run several on one catalog)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no shutdown code runs
        self.proc.wait()


def serve(data_dir, catalog_url: str, timeout: float = 90.0, **env: str) -> Served:
    port = free_port()
    environ = {**os.environ, "RECALL_DATA_DIR": str(data_dir), "RECALL_CATALOG_URL": catalog_url, "HF_HUB_OFFLINE": "1",
               "RECALL_ENCODERS__DEFAULT_AUDIO": "audio-baseline", "RECALL_ENCODERS__DEFAULT_IMAGE": "image-baseline",
               "RECALL_TORCH_THREADS": "1", **env}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"recall serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Served(proc, url)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("recall serve did not become ready")
