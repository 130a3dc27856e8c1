"""A throwaway PostgreSQL 15 server for the tests: initdb + pg_ctl in a temporary directory.

Started once per test session. PostgreSQL refuses to run as root, so under root (CI) the data
directory is handed to the ``postgres`` user and the server runs as that user. fsync is off for the
session's server: those tests kill API processes, never the database, and an fsync per commit would
only slow them. The PostgreSQL restart tests start their own server with fsync on (``durable=True``)
and restart it with :meth:`PgServer.restart`, leaving the shared one alone.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.system_deps import postgres_bin

# $RECALL_TEST_PG_BIN, else the newest /usr/lib/postgresql/*/bin (15 on Debian 12)
BIN = Path(postgres_bin() or os.environ.get("RECALL_TEST_PG_BIN") or "/usr/lib/postgresql/15/bin")


def available() -> bool:
    return (BIN / "initdb").is_file() and (BIN / "pg_ctl").is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, durable: bool = False) -> None:
        self.durable = durable  # fsync on: what a deployment runs, for tests that stop the server itself
        self.root = Path(tempfile.mkdtemp(prefix="recall-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        self._names = itertools.count()

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")

    def start(self) -> "PgServer":
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        self._pg_ctl_start()
        return self

    def _pg_ctl_start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
        self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def shut_down(self, mode: str) -> None:
        """``pg_ctl stop -m fast`` (clients disconnected, a clean checkpoint) or ``immediate`` (no
        checkpoint: the next start runs crash recovery from the WAL)."""
        self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def start_again(self) -> None:
        self._pg_ctl_start()

    def stop(self) -> None:
        try:
            self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """A fresh, empty namespace; returns a URL whose connections see only it.

        A schema per test rather than a database: CREATE DATABASE costs most of a second,
        CREATE SCHEMA a millisecond, and the catalog never names a schema.
        """
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.admin_url}?options=-csearch_path%3D{name}"
