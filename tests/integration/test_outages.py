"""The database goes away in the middle of twenty runs, for 5 s and for 60 s: every run
completes, and every write reaches the vendor once.

On Postgres the test's own server (`tests/pgcluster.py`) is stopped at once, as a crash stops
it, and started again: every connection is cut and new ones are refused meanwhile. On SQLite
another process holds the file's write lock for the same time, as a long transaction, a backup
or a migration by some other tool does: every write waits, and gives up after the 30-second busy
timeout while the outage lasts longer.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from remit.core.database import Database
from tests.conftest import BACKENDS
from tests.pgcluster import Cluster
from tests.processes import Workers

pytestmark = [pytest.mark.crash, pytest.mark.slow]

RUNS = 20


@contextmanager
def _database(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Callable[[float], None]]]:
    """A database URL, and a function that takes the database away for so many seconds."""
    if backend == "sqlite":
        path = tmp_path / "remit.sqlite"

        def lock_out(seconds: float) -> None:
            holder = sqlite3.connect(path, timeout=30, isolation_level=None)
            try:
                holder.execute("BEGIN EXCLUSIVE")
                time.sleep(seconds)
                holder.execute("ROLLBACK")
            finally:
                holder.close()

        yield f"sqlite:///{path}", lock_out
        return
    cluster: Cluster = request.getfixturevalue("cluster")

    def stop_for(seconds: float) -> None:
        cluster.stop()
        time.sleep(seconds)
        cluster.start_again()

    yield cluster.start(), stop_for


@pytest.mark.parametrize("seconds", [5, 60])
@pytest.mark.parametrize("backend", BACKENDS)
def test_runs_carry_on_across_a_database_outage(
    backend: str, seconds: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with _database(backend, tmp_path, request) as (url, outage):
        workers = Workers(
            url,
            tmp_path,
            CRASH_JITTER_MS="300",
            CRASH_NEEDS_TOKEN="1",
            REMIT_SECRET_KEY=Fernet.generate_key().decode(),
            REMIT_LOG_LEVEL="WARNING",
        )
        try:
            # Every call reads the stored credential, and every step the stored secrets (to
            # redact them), from the database: at least every 5 s, during the outage too.
            workers.remit("secrets", "set", "BANK_TOKEN", input="tok-outage\n")
            procs = [workers.start("o0"), workers.start("o1")]
            for proc in procs:
                workers.wait_serving(proc)
            run_ids = workers.start_settles(RUNS)
            deadline = time.monotonic() + 60
            while not workers.effects():
                assert time.monotonic() < deadline, workers.logs()
                time.sleep(0.05)

            time.sleep(1)  # into the runs: the bank takes up to 0.3 s twice a call
            done_before = len(workers.runs.list(status="done", limit=RUNS))
            assert done_before < RUNS  # the outage falls in the middle of the runs
            outage(seconds)

            deadline = time.monotonic() + 240
            while len(workers.runs.list(status="done", limit=RUNS)) < RUNS:
                statuses = Counter(run.status for run in workers.runs.list(limit=RUNS))
                failed = workers.runs.list(status="failed", limit=RUNS)
                assert not failed, [run.error for run in failed]
                assert time.monotonic() < deadline, f"{statuses}\n{workers.logs()}"
                assert all(proc.poll() is None for proc in procs), workers.logs()
                time.sleep(0.5)
            assert workers.tasks().list(status=None) == []  # no person was asked about a call
            applied = Counter(effect["idempotency_key"] for effect in workers.effects())
            assert {key: n for key, n in applied.items() if n > 1} == {}
            assert len(applied) == 3 * len(run_ids)
        finally:
            workers.close()


def test_a_started_worker_waits_for_the_server_to_take_connections_again(
    cluster: Cluster,
) -> None:
    """Any read of a started worker's, not only those written to retry, waits out a server that
    refuses connections; a process that has not asked to (a command) fails at once."""
    url = cluster.start()
    waiting, failing = Database(url, pool_size=1), Database(url, pool_size=1)
    waiting.wait_out_outages()
    try:
        cluster.stop()
        with pytest.raises(sa.exc.OperationalError), failing.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        back = threading.Timer(3, cluster.start_again)
        back.start()
        began = time.monotonic()
        with waiting.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        back.join()
        assert time.monotonic() - began >= 3
    finally:
        waiting.dispose()
        failing.dispose()
