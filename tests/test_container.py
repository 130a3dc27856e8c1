"""Container files: no Docker engine runs here, so check what can be checked without one.

The compose file and the Dockerfile are parsed and their contract asserted (port, volume, data
dir, pinned CPU torch, non-root user, readiness healthcheck, one worker). The entrypoint and the
healthcheck probe are executed for real: the entrypoint with a fake `recall` on PATH, the probe
against a throwaway HTTP server.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


# --- Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        instructions.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return instructions


def index_of(instructions: list[tuple[str, str]], keyword: str, needle: str = "") -> int:
    for position, (name, args) in enumerate(instructions):
        if name == keyword and needle in args:
            return position
    raise AssertionError(f"no {keyword} containing {needle!r} in the Dockerfile")


def test_dockerfile_base_and_system_packages() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    apt = instructions[index_of(instructions, "RUN", "apt-get install")][1]
    assert "--no-install-recommends" in apt
    assert {"ffmpeg", "libsndfile1", "espeak-ng"} <= set(apt.split())


def test_dockerfile_installs_pinned_cpu_torch_before_dependencies_and_code() -> None:
    instructions = dockerfile_instructions()
    torch = index_of(instructions, "RUN", "torch==2.13.0")
    assert "--index-url https://download.pytorch.org/whl/cpu" in instructions[torch][1]
    copy_lock = index_of(instructions, "COPY", "requirements.lock")
    copy_pyproject = index_of(instructions, "COPY", "pyproject.toml")
    dependencies = index_of(instructions, "RUN", "-r /tmp/requirements.txt")
    copy_code = index_of(instructions, "COPY", "app")
    # Cached layers: the lock, torch, then dependencies keyed on pyproject and the lock, then the code.
    assert copy_lock < torch < copy_pyproject < dependencies < copy_code
    # both installs are held to the lock make and CI use, and the lock pins the same torch
    assert "-c requirements.lock" in instructions[torch][1] and "-c requirements.lock" in instructions[dependencies][1]
    # (its line also carries the CPU wheel's hash: tests/test_supply_chain.py)
    assert "torch==2.13.0" in [line.split(" ")[0] for line in (ROOT / "requirements.lock").read_text().splitlines()]
    assert instructions[copy_pyproject][1].split() == ["pyproject.toml", "./"]
    assert "--no-deps" in instructions[index_of(instructions, "RUN", "pip install --no-deps")][1]


def test_dockerfile_runs_as_non_root_with_data_volume() -> None:
    instructions = dockerfile_instructions()
    users = [args for name, args in instructions if name == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    assert index_of(instructions, "USER") < index_of(instructions, "ENTRYPOINT")
    env = " ".join(args for name, args in instructions if name == "ENV").split()
    assert "RECALL_DATA_DIR=/data" in env
    assert "HF_HUB_OFFLINE=1" in env
    assert "RECALL_HOST=0.0.0.0" in env  # inside a container, 127.0.0.1 is unreachable from outside
    assert ("VOLUME", '["/data"]') in instructions
    assert ("EXPOSE", "8000") in instructions


def test_dockerfile_healthcheck_probes_readiness() -> None:
    instructions = dockerfile_instructions()
    healthcheck = instructions[index_of(instructions, "HEALTHCHECK")][1]
    assert json.loads(healthcheck.split(" CMD ", 1)[1]) == ["python", "/app/docker/healthcheck.py"]
    assert "--start-period=" in healthcheck  # model loading must not count as failures
    assert "/readyz" in HEALTHCHECK.read_text()


def test_dockerfile_entrypoint_and_single_worker() -> None:
    instructions = dockerfile_instructions()
    assert ("ENTRYPOINT", '["/app/docker/entrypoint.sh"]') in instructions
    assert ("WORKDIR", "/app") in instructions
    assert ("CMD", '["recall", "serve"]') in instructions
    # One uvicorn worker per container: nothing may ask for more, nor swap in gunicorn.
    for path in (ROOT / "Dockerfile", ROOT / "docker-compose.yml", ENTRYPOINT):
        text = path.read_text()
        assert "--workers" not in text and "gunicorn" not in text, path


def test_files_the_image_copies_are_not_dockerignored() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    instructions = dockerfile_instructions()
    sources = [args.split()[0] for name, args in instructions if name == "COPY"]
    assert {"pyproject.toml", "requirements.lock", "app", "recall", "docker"} <= set(sources)
    for source in sources:
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in patterns), source
    for needed in ("pyproject.toml", "app", "docker/entrypoint.sh", "docker/healthcheck.py"):
        assert (ROOT / needed).exists(), needed


# --- docker-compose.yml ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_service() -> dict[str, object]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "recall-data" in compose["volumes"]
    service: dict[str, object] = compose["services"]["recall"]
    return service


def test_compose_builds_and_serves_on_port_8000(compose_service: dict[str, object]) -> None:
    assert compose_service["build"] == "."
    assert compose_service["ports"] == ["8000:8000"]
    assert compose_service["command"] == ["recall", "serve"]
    assert compose_service["restart"] == "unless-stopped"


def test_compose_keeps_data_in_a_named_volume(compose_service: dict[str, object]) -> None:
    assert compose_service["volumes"] == ["recall-data:/data"]
    environment = compose_service["environment"]
    assert isinstance(environment, dict)
    assert environment["RECALL_DATA_DIR"] == "/data"
    assert environment["RECALL_DEVICE"] == "cpu"
    # An empty RECALL_API_KEYS would be parsed as a (broken) value; unset means "no keys".
    assert "RECALL_API_KEYS" not in environment


def test_compose_healthcheck_uses_the_readiness_probe(compose_service: dict[str, object]) -> None:
    healthcheck = compose_service["healthcheck"]
    assert isinstance(healthcheck, dict)
    assert healthcheck["test"] == ["CMD", "python", "/app/docker/healthcheck.py"]


# --- docker/entrypoint.sh --------------------------------------------------------------------


def test_entrypoint_is_valid_posix_sh_and_executable() -> None:
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert "set -eu" in ENTRYPOINT.read_text()


@pytest.fixture
def fake_recall_env(tmp_path: Path) -> dict[str, str]:
    """Environment with a `recall` on PATH that prints its PID and arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "recall"
    fake.write_text('#!/bin/sh\necho "pid=$$ args=$*"\n')
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECALL_DATA_DIR": str(tmp_path / "data")}


def run_entrypoint(env: dict[str, str], *args: str) -> tuple[int, int, str, str]:
    """Run the entrypoint; returns (its pid, exit code, stdout, stderr)."""
    process = subprocess.Popen(
        ["sh", str(ENTRYPOINT), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = process.communicate(timeout=20)
    return process.pid, process.returncode, stdout.strip(), stderr.strip()


def test_entrypoint_execs_recall_serve_by_default(fake_recall_env: dict[str, str]) -> None:
    pid, code, stdout, _ = run_entrypoint(fake_recall_env)

    assert code == 0
    # Same PID: the shell exec'd recall, so SIGTERM from `docker stop` reaches the server.
    assert stdout == f"pid={pid} args=serve"
    assert Path(fake_recall_env["RECALL_DATA_DIR"]).is_dir()  # created on first start
    assert list(Path(fake_recall_env["RECALL_DATA_DIR"]).iterdir()) == []  # write probe removed


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["recall", "serve"], "serve"),
        (["--port", "9000"], "serve --port 9000"),
        (["ingest", "/in", "--collection", "songs"], "ingest /in --collection songs"),
        (["recall", "search", "q.wav", "--collection", "songs"], "search q.wav --collection songs"),
    ],
)
def test_entrypoint_routes_recall_commands(fake_recall_env: dict[str, str], args: list[str], expected: str) -> None:
    pid, code, stdout, _ = run_entrypoint(fake_recall_env, *args)

    assert code == 0
    assert stdout == f"pid={pid} args={expected}"


def test_entrypoint_passes_other_commands_through(fake_recall_env: dict[str, str]) -> None:
    _, code, stdout, _ = run_entrypoint(fake_recall_env, "sh", "-c", "echo hello from $0")

    assert code == 0
    assert stdout == "hello from sh"


def test_entrypoint_refuses_an_uncreatable_data_dir(fake_recall_env: dict[str, str]) -> None:
    env = {**fake_recall_env, "RECALL_DATA_DIR": "/dev/null/x"}  # a path under a file
    _, code, stdout, stderr = run_entrypoint(env)

    assert code == 1
    assert stdout == ""  # recall never started
    assert "cannot create the data directory '/dev/null/x' (RECALL_DATA_DIR)" in stderr
    assert "mount a volume" in stderr


def test_entrypoint_refuses_an_unwritable_data_dir(fake_recall_env: dict[str, str]) -> None:
    # /proc exists but accepts no new files, even for root (the tests may run as root, where
    # permission bits would not stop the write).
    env = {**fake_recall_env, "RECALL_DATA_DIR": "/proc"}
    _, code, stdout, stderr = run_entrypoint(env)

    assert code == 1
    assert stdout == ""
    assert f"the data directory '/proc' is not writable by uid {os.getuid()}" in stderr


def test_entrypoint_still_opens_a_shell_when_the_data_dir_is_broken(fake_recall_env: dict[str, str]) -> None:
    env = {**fake_recall_env, "RECALL_DATA_DIR": "/dev/null/x"}
    _, code, stdout, _ = run_entrypoint(env, "sh", "-c", "echo debugging")

    assert (code, stdout) == (0, "debugging")


# --- docker/healthcheck.py -------------------------------------------------------------------


@pytest.fixture
def readyz_server() -> Iterator[tuple[int, list[int]]]:
    """A local HTTP server whose /readyz answers the status at the front of the returned list."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            code = status[0] if self.path == "/readyz" else 404
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], status
    finally:
        server.shutdown()
        server.server_close()


def probe(port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECALL_PORT": str(port)}
    return subprocess.run([sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=20)


def test_healthcheck_passes_when_ready(readyz_server: tuple[int, list[int]]) -> None:
    port, _ = readyz_server
    assert probe(port).returncode == 0


def test_healthcheck_fails_while_not_ready(readyz_server: tuple[int, list[int]]) -> None:
    port, status = readyz_server
    status[0] = 503
    result = probe(port)
    assert result.returncode == 1
    assert "503" in result.stderr


def test_healthcheck_fails_when_nothing_listens() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and is closed now
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    result = probe(closed_port)
    assert result.returncode == 1
    assert "refused" in result.stderr.lower()


def test_healthcheck_command_matches_between_dockerfile_and_compose(compose_service: dict[str, object]) -> None:
    instructions = dockerfile_instructions()
    healthcheck = instructions[index_of(instructions, "HEALTHCHECK")][1]
    dockerfile_command = json.loads(healthcheck.split(" CMD ", 1)[1])  # exec form is a JSON array
    compose_healthcheck = compose_service["healthcheck"]
    assert isinstance(compose_healthcheck, dict)
    assert compose_healthcheck["test"] == ["CMD", *dockerfile_command]
