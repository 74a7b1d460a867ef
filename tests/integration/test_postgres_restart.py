"""Postgres restarts under load (`pg_ctl restart -m immediate`, a crash of the server): every
run completes with no manual action.

The test starts a throwaway cluster of its own on a spare port (initdb, as the `postgres` user),
so the shared server is never restarted. Postgres only: SQLite has no server to restart.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from remit.app import load_app
from tests.processes import CRASH_APP, Workers

pytestmark = pytest.mark.crash

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
        self._pg_ctl("stop", "-m", "immediate")

    def _pg_ctl(self, *action: str) -> None:
        log = str(self.folder / "server.log")
        self._as_postgres(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", self.options, "-l", log, "-w", *action
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
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


def test_every_run_completes_across_an_immediate_restart(cluster: Cluster, tmp_path: Path) -> None:
    url = cluster.start()
    workers = Workers(url, tmp_path, CRASH_JITTER_MS="60", REMIT_LOG_LEVEL="WARNING")
    try:
        procs = [workers.start("r0"), workers.start("r1")]
        for proc in procs:
            workers.wait_serving(proc)
        app = load_app(CRASH_APP)
        client = workers.db.client(app.name)
        try:
            run_ids = [
                workers.runs.naming(None, app=app.name)
                .start(
                    client,
                    app.workflow("settle"),
                    {"account": f"a{n}", "amount": 10 + n},
                    started_by="t",
                )
                .run_id
                for n in range(60)
            ]
        finally:
            client.destroy()
        deadline = time.monotonic() + 60
        while len(workers.runs.list(status="done", limit=100)) < 10:
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.1)

        in_flight = len(run_ids) - len(workers.runs.list(status="done", limit=100))
        cluster.restart_immediately()
        assert in_flight > 0  # the server went down under load, not after it

        deadline = time.monotonic() + 180
        while len(workers.runs.list(status="done", limit=100)) < len(run_ids):
            statuses = Counter(run.status for run in workers.runs.list(limit=100))
            assert time.monotonic() < deadline, f"{statuses}\n{workers.logs()}"
            assert not statuses.get("failed"), [r.error for r in workers.runs.list(status="failed")]
            assert all(proc.poll() is None for proc in procs), workers.logs()
            time.sleep(0.5)
        applied = Counter(effect["idempotency_key"] for effect in workers.effects())
        assert all(times == 1 for times in applied.values())
        assert len(applied) == 3 * len(run_ids)
    finally:
        workers.close()
