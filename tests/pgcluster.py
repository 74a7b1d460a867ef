"""A Postgres cluster of a test's own, in a folder on a spare port (initdb, as the `postgres`
user), for tests that stop or restart the server: the shared server is never touched."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = (
    Path("/usr/lib/postgresql")
    / (
        sorted(os.listdir("/usr/lib/postgresql"))[-1]
        if Path("/usr/lib/postgresql").exists()
        else "15"
    )
    / "bin"
)


class Cluster:
    """A Postgres cluster in a folder, owned by the `postgres` user, on a free port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = _free_port()
        self.options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder}"
        )

    def _as_postgres(self, *command: str) -> None:
        prefix = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        done = subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._as_postgres(
            str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
        )
        self._pg_ctl("start")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def restart_immediately(self) -> None:
        self._pg_ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        """Stop the server at once, as a crash does: every connection is cut, and new ones are
        refused until `start_again`."""
        self._pg_ctl("stop", "-m", "immediate")

    def start_again(self) -> None:
        self._pg_ctl("start")

    def _pg_ctl(self, *action: str) -> None:
        log = str(self.folder / "server.log")
        self._as_postgres(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", self.options, "-l", log, "-w", *action
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def throwaway_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster for one test, removed after it; a failure in CI, a skip elsewhere, where this
    machine has no Postgres server binaries."""
    if not (BIN / "initdb").exists():
        message = f"no Postgres server binaries under {BIN}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = Cluster(Path("/tmp") / f"remit-pg-{tmp_path.name}-{os.getpid()}")
    yield server
    try:
        server.stop()
    finally:
        shutil.rmtree(server.folder, ignore_errors=True)
