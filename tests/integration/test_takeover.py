"""Many workers on one database: a dead worker's attempts are taken over, once, by a live one;
a live worker's never are."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remit.core.database import Database
from remit.ops.registry import WorkerRegistry, state
from tests.processes import Workers

# Half a minute or more of worker processes: `make check` leaves these to `make test`.
pytestmark = pytest.mark.slow

FAST = {"REMIT_HEARTBEAT_INTERVAL": "0.25", "REMIT_DEAD_AFTER": "2"}


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    procs = Workers(database_url, tmp_path, **FAST)
    yield procs
    procs.close()


def start_payout(workers: Workers) -> str:
    return workers.remit("start", "payout", "--input", '{"account": "acc-1", "amount": 100}')


def held_run(workers: Workers) -> tuple[subprocess.Popen[bytes], str]:
    """Worker `wa`, holding a payout at its `between` step until released."""
    workers.hold_at("between")
    a = workers.start("wa")
    run_id = start_payout(workers)
    workers.wait_reached("between", a)
    return a, run_id


def executor_of(workers: Workers, run_id: str) -> str:
    client = workers.db.client("crash-app")
    try:
        return str(client.retrieve_workflow(f"{run_id}:1").get_status().executor_id)
    finally:
        client.destroy()


def assert_each_write_once(workers: Workers, run_id: str) -> None:
    keys = [e["idempotency_key"] for e in workers.effects()]
    assert sorted(keys) == [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]


def test_a_dead_workers_run_is_taken_over_and_completes(workers: Workers) -> None:
    a, run_id = held_run(workers)
    b = workers.start("wb")
    workers.wait_serving(b)
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    workers.release("between")

    run = workers.wait_finished(run_id)

    assert run.status == "done", run.error
    assert executor_of(workers, run_id) == "wb"
    assert_each_write_once(workers, run_id)
    rows = {row.executor_id: row for row in WorkerRegistry(workers.db).list()}
    assert rows["wa"].taken_over_by == "wb"
    listed = workers.remit("workers")
    assert "taken over by wb" in listed
    assert "live" in listed
    workers.wait_in_log(1, "took over worker wa: 1 attempts back on their queues")


def test_several_workers_noticing_at_once_take_over_once(workers: Workers) -> None:
    a, run_id = held_run(workers)
    others = [workers.start("wb"), workers.start("wc")]
    for proc in others:
        workers.wait_serving(proc)
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    workers.release("between")

    run = workers.wait_finished(run_id)

    assert run.status == "done", run.error
    assert_each_write_once(workers, run_id)
    rows = {row.executor_id: row for row in WorkerRegistry(workers.db).list()}
    taker = {"wb": 1, "wc": 2}[str(rows["wa"].taken_over_by)]
    workers.wait_in_log(taker, "took over worker wa")
    assert "took over worker wa" not in workers.log(3 - taker)  # the other one did not


def test_a_live_workers_run_is_never_taken(workers: Workers) -> None:
    (workers.hold_dir / "slow-between").write_text("5")  # longer than the 2 s bound
    a = workers.start("wa")
    run_id = start_payout(workers)
    workers.wait_reached("between", a)
    workers.wait_serving(workers.start("wb"))

    run = workers.wait_finished(run_id)

    assert run.status == "done", run.error
    assert executor_of(workers, run_id) == "wa"
    assert_each_write_once(workers, run_id)
    rows = {row.executor_id: row for row in WorkerRegistry(workers.db).list()}
    assert rows["wa"].taken_over_by is None
    assert "took over" not in workers.log(1)


def test_a_stalled_worker_that_was_taken_over_stops(workers: Workers) -> None:
    a, run_id = held_run(workers)
    workers.wait_serving(workers.start("wb"))
    workers.stall(a)  # alive, but silent past the bound
    workers.release("between")

    run = workers.wait_finished(run_id)
    assert run.status == "done", run.error
    assert executor_of(workers, run_id) == "wb"

    a.send_signal(signal.SIGCONT)
    assert a.wait(20) == 75, workers.log(0)
    assert "declared dead and taken over" in workers.log(0)
    assert_each_write_once(workers, run_id)


class Frozen:
    """A clock that says what it is told."""

    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def test_of_many_claimers_exactly_one_wins(database_url: str) -> None:
    db = Database(database_url)
    db.prepare()
    try:
        then = datetime(2026, 11, 1, tzinfo=UTC)
        WorkerRegistry(db, clock=Frozen(then)).register("w-dead", app="x", version="v")
        registry = WorkerRegistry(db)
        won: list[str] = []

        def claim(by: str) -> None:
            if registry.claim("w-dead", by=by, dead_after=timedelta(seconds=30)):
                won.append(by)

        threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1
        row = registry.list()[0]
        assert row.taken_over_by == won[0]
        assert state(row, now=datetime.now(UTC), dead_after=timedelta(seconds=30)) == "taken over"
        # The claimed worker's heartbeat is refused: it must stop.
        assert registry.heartbeat("w-dead") is False
        # Registering again (a restart with the same id) makes it live.
        registry.register("w-dead", app="x", version="v")
        assert registry.heartbeat("w-dead") is True
    finally:
        db.dispose()
