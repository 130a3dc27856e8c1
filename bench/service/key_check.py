"""What checking an API key costs: the stored SHA-256 (what the service does) against scrypt and PBKDF2.

Also the whole guard (key lookup, scope, token bucket) on one request's path, without HTTP. One
thread, a few hundred checks each; writes bench/results/key_check.json.

    python -m bench.service.key_check
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from starlette.datastructures import Headers

from app.api.auth import Guard
from app.api.rate_limit import RateLimiter
from app.usecases.keys import KeyFile, KeyRing

OUT = Path(__file__).resolve().parents[1] / "results" / "key_check.json"


def per_call_us(fn, n: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    key = b"rk_0123abcd_" + os.urandom(32).hex().encode()
    salt = os.urandom(16)
    with tempfile.TemporaryDirectory() as tmp:
        keys = KeyFile(Path(tmp) / "keys.json")
        for _ in range(100):  # a file with 100 keys
            keys.create("read,write")
        presented, _ = keys.create("read")
        guard = Guard(KeyRing(keys), RateLimiter(rate=1e9, burst=10**9))
        headers = Headers({"x-api-key": presented})
        results = {
            "sha256_us": per_call_us(lambda: hashlib.sha256(key).digest(), 20000),
            "pbkdf2_sha256_600k_us": per_call_us(lambda: hashlib.pbkdf2_hmac("sha256", key, salt, 600_000), 3),
            "scrypt_n16384_r8_p1_us": per_call_us(lambda: hashlib.scrypt(key, salt=salt, n=16384, r=8, p=1), 5),
            "guard_check_us": per_call_us(lambda: guard.check("POST", "/v1/collections/c/search", headers, "127.0.0.1"), 5000),
            "keys_in_file": 101,
        }
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average": os.getloadavg()}
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
