"""Container healthcheck: exit 0 when GET /readyz answers 200, 1 otherwise.

python:3.11-slim has no curl or wget, so Docker's HEALTHCHECK runs this with the image's Python.
Only the standard library is used so the probe starts fast and cannot break with the app.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    """Probe readiness on the port the server listens on (RECALL_PORT, default 8000)."""
    port = os.environ.get("RECALL_PORT", "8000")
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:  # 503 (HTTPError), refused, timeout
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
