"""A Ray head started by `ray start --head` as its own process, as a deployment starts one.

Everything stays on loopback: on Linux Ray replaces a loopback ``--node-ip-address`` with the
machine's address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its single-machine mode), so
the head gets that variable and then binds 127.0.0.1 only; API processes joining it set
``RECALL_CLUSTER__NODE_IP=127.0.0.1``, which does the same on their side (app/cluster/ray_connect.py).

Its authentication mode is always said explicitly (``RAY_AUTH_MODE``): left unset, the head would
turn token authentication on if it found a ``~/.ray/auth_token``, which any earlier local
``ray.init()`` (this suite's own in-process Ray, for one) writes. It lives in its own process group
with a private temporary directory (sessions, sockets, logs), and is stopped by signalling that
group, never with ``ray stop``, which kills every Ray process on the machine, other runs' included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.cluster.serve import free_port

# the venv's own `ray` (the same Ray as the API processes'), else whichever is on PATH
RAY = Path(sys.executable).with_name("ray")
if not RAY.is_file():
    RAY = Path(shutil.which("ray") or RAY)
STARTED = "Ray runtime started"


class RayHead:
    def __init__(self, token: str | None = None, cpus: int = 4) -> None:
        self.token = token
        self.cpus = cpus  # logical CPUs: shard actors take 0.25, embedding workers embed_cpus each
        # short: Ray's unix sockets live under it and a socket path may not exceed 107 bytes
        self.root = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token_file(self) -> Path:
        return self.root / "auth_token"

    @property
    def log(self) -> Path:
        return self.root / "head.log"

    def env(self) -> dict[str, str]:
        """What a `recall serve` process needs to join this head (token file only with auth on)."""
        env = {"RECALL_RAY_ADDRESS": self.address, "RECALL_CLUSTER__NODE_IP": "127.0.0.1"}
        if self.token is not None:
            env["RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE"] = str(self.token_file)
        return env

    def start(self, timeout: float = 90.0) -> "RayHead":
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
        for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            env.pop(name, None)
        if self.token is None:
            env["RAY_AUTH_MODE"] = "disabled"  # said explicitly: the head of a deployment that opts out
        else:
            self.token_file.write_text(self.token)
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file))
        cmd = [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={self.port}",
               f"--temp-dir={self.root / 'ray'}", f"--num-cpus={self.cpus}", "--num-gpus=0",
               "--object-store-memory=200000000",  # not Ray's 30% of RAM: the machine is shared
               "--include-dashboard=false", "--disable-usage-stats"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.root)
        deadline = time.time() + timeout
        while STARTED not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.time() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                self.stop()
                raise AssertionError(f"ray start --head did not come up:\n{tail}")
            time.sleep(0.2)
        return self

    def kill(self) -> None:
        """SIGKILL every process of the head at once, as a lost machine would."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGKILL the whole group: the head holds nothing worth a graceful stop, and
        `ray start --block` takes ~20 s to drain on SIGTERM."""
        try:
            self.kill()
            if self.proc is not None:
                self.proc.wait()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # start_new_session: the group id is the `ray start` pid
        except ProcessLookupError:
            pass
