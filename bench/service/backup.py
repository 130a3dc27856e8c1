"""How long `recall backup` and `recall restore` take for a data directory of a given size.

Ingests ``items`` clips of ``seconds`` each (the training-free audio-baseline encoder, originals
kept) into a fresh data directory through the real app, then times backup, restore, and the start
of a service on the restored directory (which loads the copied index snapshots). Writes
bench/results/backup.json. Correctness is tested in tests/storage/test_backup.py, not here.

    python -m bench.service.backup                   # 400 clips of 2 s
    python -m bench.service.backup --items 50 --out /tmp/backup.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.storage.backup import backup, restore


def _clip(rng: np.random.Generator, seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    signal = 0.3 * np.sin(2 * np.pi * rng.uniform(200, 3000) * t) + 0.05 * rng.standard_normal(len(t))
    buf = io.BytesIO()
    sf.write(buf, signal.astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, encoders={"default_audio": "audio-baseline", "default_image": "image-baseline"})


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run(items: int, seconds: float, work: Path) -> dict:
    rng = np.random.default_rng(0)
    source = work / "data"
    with TestClient(create_app(_settings(source))) as client:
        assert client.post("/v1/collections", json={"name": "b", "modality": "audio"}).status_code == 201
        for start in range(0, items, 16):
            ids = [f"clip-{i}" for i in range(start, min(items, start + 16))]
            files = [("files", (f"{i}.wav", _clip(rng, seconds))) for i in ids]
            response = client.post("/v1/collections/b/items", files=files, data={"ids": ",".join(ids)})
            assert response.status_code == 200, response.text
    t0 = time.perf_counter()
    summary = backup(source, work / "backup")
    backup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    restore(work / "backup", work / "restored")
    restore_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with TestClient(create_app(_settings(work / "restored"))) as client:
        start_s = time.perf_counter() - t0
        count = client.get("/v1/collections/b").json()["items"]
    assert count == items
    total = _size(work / "backup")
    return {
        "items": items, "clip_seconds": seconds, "segments": summary["collections"]["b"]["segments"],
        "backup_bytes": total, "media_files": summary["media_files"], "backup_s": round(backup_s, 3),
        "backup_mb_per_s": round(total / 1e6 / backup_s, 1), "restore_s": round(restore_s, 3),
        "restored_service_start_s": round(start_s, 3), "rebuilt_indices": summary["rebuilt_indices"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "backup.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = run(args.items, args.seconds, Path(work))
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
