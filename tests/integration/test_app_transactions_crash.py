"""`ctx.transaction` under SIGKILL: N runs book N rows in the app's own table, never N+1.

A worker is killed inside the transaction (it rolls back; the next attempt writes once),
after it (its step is recorded; nothing is written again), and at random moments while runs
go, as the crash matrix does; restarted, every run finishes with exactly one row.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.app import load_app
from tests.processes import CRASH_APP, Workers

pytestmark = pytest.mark.crash


@pytest.fixture
def crash(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(database_url, tmp_path)
    with workers.db.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE crash_bookings (run_id VARCHAR(100), invoice VARCHAR(50), amount INT)"
            )
        )
    yield workers
    workers.close()


def bookings(crash: Workers) -> Counter[str]:
    with crash.db.engine.connect() as conn:
        return Counter(conn.execute(sa.text("SELECT run_id FROM crash_bookings")).scalars())


def start_books(crash: Workers, count: int, first: int = 0) -> list[str]:
    app = load_app(CRASH_APP)
    client = crash.db.client(app.name)
    try:
        starts = crash.runs.naming(None, app=app.name)
        return [
            starts.start(
                client, app.workflow("book"), {"invoice": f"INV-{n}", "amount": n}, started_by="t"
            ).run_id
            for n in range(first, first + count)
        ]
    finally:
        client.destroy()


@pytest.mark.parametrize("point", ["booking", "booked"])
def test_killed_inside_or_after_the_transaction_the_run_books_one_row(
    crash: Workers, point: str
) -> None:
    crash.hold_at(point)
    [run_id] = start_books(crash, 1)
    crash.kill_when_reached(crash.start(), point)
    # Inside the transaction nothing committed; after it, the row and the step's record did.
    assert bookings(crash) == (Counter() if point == "booking" else Counter({run_id: 1}))

    crash.start()
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    assert run.output == {"invoice": "INV-0"}
    assert bookings(crash) == Counter({run_id: 1})


def test_workers_killed_at_random_moments_leave_one_row_per_run(crash: Workers) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    crash.env["CRASH_JITTER_MS"] = "40"
    # Killed this often, an attempt may be cut more often than a real one ever is: the bound on
    # recoveries is tested on its own (test_recoveries.py); here every run must get through.
    crash.env["REMIT_MAX_RECOVERIES"] = "1000"
    proc = crash.start()
    crash.wait_serving(proc)
    run_ids: list[str] = []
    kills = 0
    stop_at = time.monotonic() + 15
    # Runs arrive while the worker dies, so kills land in the middle of their transactions.
    while time.monotonic() < stop_at:
        run_ids += start_books(crash, rng.randint(2, 4), first=len(run_ids))
        time.sleep(rng.uniform(0.2, 0.9))
        proc.kill()
        proc.wait(10)
        kills += 1
        proc = crash.start()
    runs = [crash.wait_finished(run_id, timeout=120) for run_id in run_ids]

    unfinished = [(r.run_id, r.status, r.error) for r in runs if r.status != "done"]
    assert unfinished == [], f"seed {seed}"
    assert bookings(crash) == Counter(dict.fromkeys(run_ids, 1)), f"seed {seed}, {kills} kills"


def test_a_cold_worker_taking_many_bookings_at_once_never_waits_out_the_write_lock(
    crash: Workers,
) -> None:
    # More runs than the engine pools connections (15), all dequeued by one worker that has not
    # yet read the app's stored secrets. A transaction that took a second connection while it
    # held SQLite's write lock would wait for one the others, each waiting for that lock, hold.
    run_ids = start_books(crash, 150)
    crash.env["CRASH_JITTER_MS"] = "40"
    crash.start()
    runs = [crash.wait_finished(run_id, timeout=240) for run_id in run_ids]

    assert [r.run_id for r in runs if r.status != "done"] == []
    assert bookings(crash) == Counter(dict.fromkeys(run_ids, 1))
    # SQLite's busy timeout is 30 s: "database is locked" means one wait lasted all of it.
    assert "database is locked" not in crash.log(0), crash.logs()
