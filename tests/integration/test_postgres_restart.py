"""Postgres restarts under load (`pg_ctl restart -m immediate`, a crash of the server): every
run completes with no manual action.

The test starts a throwaway cluster of its own (`tests/pgcluster.py`), so the shared server is
never restarted. Postgres only: SQLite has no server to restart.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.pgcluster import Cluster
from tests.processes import Workers

pytestmark = pytest.mark.crash


def test_every_run_completes_across_an_immediate_restart(cluster: Cluster, tmp_path: Path) -> None:
    url = cluster.start()
    workers = Workers(url, tmp_path, CRASH_JITTER_MS="60", REMIT_LOG_LEVEL="WARNING")
    try:
        procs = [workers.start("r0"), workers.start("r1")]
        for proc in procs:
            workers.wait_serving(proc)
        run_ids = workers.start_settles(60)
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
