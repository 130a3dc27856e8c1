"""`recall serve` as a separate process on a free port (cluster tests run several on one catalog)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

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


def _command(data_dir, catalog_url: str, port: int, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    # no RAY_* from this process: an in-process ray.init() (the API tests' Ray backend) sets RAY_AUTH_MODE=token and
    # more in os.environ, which would make a serve process joining an open head send a token it does not have
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    environ = {**inherited, "RECALL_DATA_DIR": str(data_dir), "RECALL_CATALOG_URL": catalog_url, "HF_HUB_OFFLINE": "1",
               "RECALL_ENCODERS__DEFAULT_AUDIO": "audio-baseline", "RECALL_ENCODERS__DEFAULT_IMAGE": "image-baseline",
               "RECALL_TORCH_THREADS": "1", **env}
    return [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)], environ


def serve(data_dir, catalog_url: str, timeout: float = 90.0, **env: str) -> Served:
    port = free_port()
    cmd, environ = _command(data_dir, catalog_url, port, env)
    # its output goes to a file beside the data directory, quoted when it fails to start
    log_path = Path(data_dir).parent / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=environ, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"recall serve exited with {proc.returncode}:\n{_tail(log_path)}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Served(proc, url)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"recall serve did not become ready:\n{_tail(log_path)}")


def serve_exit(data_dir, catalog_url: str, timeout: float = 120.0, **env: str) -> subprocess.CompletedProcess:
    """Run `recall serve` expecting it to stop by itself at start; its output as text."""
    cmd, environ = _command(data_dir, catalog_url, free_port(), env)
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=timeout)


def _tail(path: Path, size: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""
