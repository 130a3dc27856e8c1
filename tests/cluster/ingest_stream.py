"""A stream of single-file ingests to one API process, for the tests that SIGKILL it mid-stream.

What was acknowledged (answered 200) is what the other process must then hold. A request that dies
with its process is not acknowledged; any other answer is kept in ``refused`` for the test to judge
(an assertion inside the thread would only end the thread, silently).
"""

from __future__ import annotations

import threading
import time

import httpx


class IngestStream(threading.Thread):
    def __init__(self, url: str, clips: dict[str, bytes], collection: str = "w", timeout: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.url, self.clips, self.collection, self.timeout = url, clips, collection, timeout
        self.acknowledged: list[str] = []
        self.refused: list[tuple[str, int, str]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=self.timeout) as client:
            for name, data in self.clips.items():
                if self._halt.is_set():
                    return
                try:
                    response = client.post(f"/v1/collections/{self.collection}/items",
                                           files={"files": (f"{name}.wav", data)}, data={"ids": name})
                except httpx.HTTPError:
                    return  # died mid-request: not acknowledged
                if response.status_code == 200:
                    self.acknowledged.append(name)
                else:
                    self.refused.append((name, response.status_code, response.text[:300]))

    def wait_for(self, count: int, seconds: float) -> None:
        """Until ``count`` ingests are acknowledged, the stream ends, or ``seconds`` pass."""
        deadline = time.time() + seconds
        while len(self.acknowledged) < count and self.is_alive() and time.time() < deadline:
            time.sleep(0.02)

    def finish(self) -> None:
        self._halt.set()
        self.join()
