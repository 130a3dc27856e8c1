"""Shared fixtures: settings in a temp dir, the app with its lifespan running, media makers."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402

# Tests needing a system package skip with the reason when it is missing, and CI fails on such
# skips: pytest finds these hooks by their names in this module (see tests/system_deps.py).
from tests.system_deps import (  # noqa: E402, F401
    pytest_configure,
    require_system,
    pytest_runtest_logreport,
    pytest_runtest_setup,
    pytest_sessionfinish,
    pytest_terminal_summary,
)


def make_settings(tmp_path, **overrides) -> Settings:
    """Settings isolated in tmp_path, with the training-free encoders (fast, deterministic)."""
    base = {
        "data_dir": tmp_path / "data",
        "encoders": {"default_audio": "audio-baseline", "default_image": "image-baseline"},
    }
    base.update(overrides)
    return Settings(**base)


# --- catalog backends: the API contract tests run against the embedded SQLite catalog and PostgreSQL ---

BACKEND_PARAMETRISED = ("tests/api/",)
# these also run with the index on Ray shard actors (2 per collection); a shard actor is a process,
# so the whole API suite on Ray would cost minutes: search and collections carry the sharded contract
RAY_PARAMETRISED = ("tests/api/test_search.py", "tests/api/test_collections.py")


def pytest_generate_tests(metafunc) -> None:
    # only the API contract tests take both backends; elsewhere `settings` stays the embedded default
    if "catalog_backend" in metafunc.fixturenames and any(part in metafunc.definition.nodeid for part in BACKEND_PARAMETRISED):
        ray = any(part in metafunc.definition.nodeid for part in RAY_PARAMETRISED)
        metafunc.parametrize("catalog_backend", ["sqlite", "postgres", *(["ray"] if ray else [])], indirect=True)


@pytest.fixture
def catalog_backend(request) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL 15 per test session (tests/cluster/pg_server.py)."""
    from tests.cluster.pg_server import BIN, PgServer, available

    require_system("postgresql")  # skipped with the package named when missing; fails under CI
    if not available():
        pytest.skip(f"PostgreSQL binaries not usable in {BIN}")
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> Iterator[str]:
    """A fresh, empty PostgreSQL namespace for one test; its shard actors end with it."""
    url = pg_server.new_database()
    yield url
    end_shard_actors(url)


def end_shard_actors(catalog_url: str) -> None:
    """Shard actors are detached (they outlive an API process) and each holds a share of the session Ray's 2
    CPUs: left running, a few tests' worth would leave none for the next test's shards, which then wait forever."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    from app.cluster.ray_runtime import NAMESPACE
    from app.cluster.remote_index import catalog_prefix

    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["name"].startswith(catalog_prefix(catalog_url)):
            try:
                ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)
            except ValueError:  # gone meanwhile
                pass


@pytest.fixture
def backend_overrides(catalog_backend, request):
    """Settings overrides selecting the catalog backend (for tests that build their own settings)."""
    if catalog_backend == "sqlite":
        yield {}
        return
    url = request.getfixturevalue("pg_url")
    if catalog_backend == "postgres":
        yield {"catalog_url": url}
        return
    request.getfixturevalue("ray_session")  # the session Ray the shards run on
    # a shard replays the catalog before its first answer: on a 2-core CI machine running the whole suite
    # that took over the service's 10 s once (a 503); the tests check answers, not that deadline
    yield {"catalog_url": url, "ray_address": "auto", "index_shards": 2, "cluster": {"shard_timeout_s": 60.0}}
    # its shard actors end with pg_url


@pytest.fixture
def settings(tmp_path, backend_overrides) -> Settings:
    return make_settings(tmp_path, **backend_overrides)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def tone_wav(freq: float = 440.0, seconds: float = 1.0, rate: int = 16000, fmt: str = "WAV", amp: float = 0.3) -> bytes:
    """A sine tone as encoded bytes."""
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format=fmt)
    return buf.getvalue()


def wave_bytes(wave: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave.astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def png_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 48), stripes: bool = False) -> bytes:
    array = np.zeros((size[1], size[0], 3), np.uint8)
    array[:] = color
    if stripes:
        array[::4] = 255 - np.asarray(color)
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def error_of(response) -> dict:
    """The one error shape, asserted: {"error": {"code", "message"}}."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str), body
    assert "Traceback" not in body["error"]["message"]
    return body["error"]


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole test session: starting Ray costs seconds and memory.

    It declares 8 CPUs on the 2-core machine: Ray's CPUs only place actors (each shard reserves 0.25, an
    embedding worker up to 1), and with 2 a few shard actors still ending from earlier tests were enough to
    leave a later test's new shards unplaced, waiting forever."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=8, include_dashboard=False, namespace="recall", log_to_driver=False)
    yield ray
    ray.shutdown()
