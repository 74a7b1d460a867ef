"""A decision or a start begins its run at once, not at the next poll of the run's queue: the
fork (or the enqueue) rings the queue's doorbell, in the deciding (starting) process and, on
Postgres, through `NOTIFY` in every worker listening (`ops/wake.py`). Nothing depends on a ring: without one, the poll carries the
run on, and a listening connection that is lost is made again.

Each worker here polls its queues every `LONG_POLL` seconds, so a run that carries on well
within that was started by a ring. The decider in another process is this module run as a
script (`python -m`), and so is the starter.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.app import App, Queue
from remit.core.database import Database
from remit.core.outbox import Doorbell, Resumer
from remit.core.runs import RunStore
from remit.ops.pause import UNUSED_QUEUE_POLL
from remit.ops.wake import APPLICATION_NAME
from remit.people.approvals import Approval, Approvals
from remit.testing import Harness
from tests.conftest import postgres_admin_url
from tests.support import REFUND, FakeShop, make_app
from tests.support import shop as shop_connector

ROOT = Path(__file__).resolve().parents[2]
DECIDER = "tests.integration.test_wake"  # this module, run as a decider of its own

# Seconds between a test worker's polls of its queues: no test here waits for one, but the one
# that shows a run carries on without a ring.
LONG_POLL = 60.0
# Seconds within which a run carries on when a ring started it: far less than LONG_POLL (a
# resume takes a fraction of a second), and far more than a loaded machine needs.
WITHIN = 10.0


def waiting_runs(url: str, shop: FakeShop, count: int = 1) -> list[tuple[str, Approval]]:
    """`count` refund runs waiting at their gate, their attempts ended; the worker that ran
    them (polling often) has stopped."""
    with Harness(make_app(), database_url=url, implementations={"shop": shop}) as h:
        runs = [h.start("refund", {"sku": "sku-1", "quantity": 2}).run_id for _ in range(count)]
        waiting = [(run_id, h.gate(run_id)) for run_id in runs]
        for run_id in runs:
            h.wait_attempt_ended(run_id, 1)
    return waiting


def long_polling(url: str, shop: FakeShop) -> Harness:
    return Harness(
        make_app(), database_url=url, implementations={"shop": shop}, poll_interval=LONG_POLL
    )


def carried_on(h: Harness, run_id: str, gate: Approval) -> None:
    """The run finished past its gate within `WITHIN` seconds of its decision."""
    done = h.wait(run_id, timeout=WITHIN)
    assert (done.status, done.attempt) == ("done", 2), done.error
    assert (done.output["status"], done.output["quantity"]) == ("approved", 2)
    decided_at = h.approvals.get(gate.id).decided_at
    assert done.finished_at is not None
    assert decided_at is not None
    assert (done.finished_at - decided_at).total_seconds() < WITHIN


def _decide(url: str, approval_id: str) -> None:
    """Decide `approval_id` as a process with no worker would (the CLI, another API server)."""
    app = make_app()
    db = Database(url, pool_size=2)
    client = db.client(app.name)
    try:
        Approvals(db, client, app.approval_types).decide(
            approval_id, "approved", by="user:ops", via="cli", decision_key=f"k:{approval_id}"
        )
    finally:
        client.destroy()
        db.dispose()


def _start(url: str) -> None:
    """Start a refund run as a process with no worker would, and print its id."""
    app = make_app()
    db = Database(url, pool_size=2)
    client = db.client(app.name)
    try:
        run = RunStore(db, app=app.name).start(
            client, app.workflow("refund"), {"sku": "sku-1", "quantity": 2}, started_by="user:ops"
        )
        print(run.run_id)
    finally:
        client.destroy()
        db.dispose()


def in_another_process(*args: str) -> str:
    """Run this module as a script with `args` (`decide URL ID`, `start URL`): what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", DECIDER, *args],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def decide_in_another_process(url: str, approval_id: str) -> None:
    in_another_process("decide", url, approval_id)


def decide_as_another_process(h: Harness, approval_id: str) -> None:
    """Decide `approval_id` from this process as another process would: its fork rings a
    doorbell no queue thread here waits on, so only what reaches the worker through the
    database (or its poll) can start the run."""
    deciding = Approvals(h.worker.db, h.worker.client, h.app.approval_types)
    deciding.resumer = Resumer(h.worker.db, h.worker.client, bell=Doorbell())
    deciding.decide(
        approval_id, "approved", by="user:ops", via="cli", decision_key=f"k:{approval_id}"
    )


def postgres_only(url: str) -> None:
    if url.startswith("sqlite"):
        pytest.skip("SQLite has no NOTIFY: a fork made in another process waits for the poll")


def listening(url: str) -> list[int]:
    """The backend pids of the connections listening for forks on the database at `url`."""
    admin = sa.create_engine(postgres_admin_url())
    try:
        with admin.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT pid FROM pg_stat_activity "
                        "WHERE datname = :name AND application_name = :listener"
                    ),
                    {"name": sa.make_url(url).database, "listener": APPLICATION_NAME},
                ).scalars()
            )
    finally:
        admin.dispose()


def terminate(pids: list[int]) -> None:
    admin = sa.create_engine(postgres_admin_url())
    try:
        with admin.connect() as conn:
            for pid in pids:
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            conn.commit()
    finally:
        admin.dispose()


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {timeout}s"
        time.sleep(0.02)


@pytest.fixture
def shop() -> FakeShop:
    return FakeShop()


def test_a_decision_starts_its_run_without_waiting_for_the_queues_poll(
    database_url: str, shop: FakeShop
) -> None:
    ((run_id, gate),) = waiting_runs(database_url, shop)
    with long_polling(database_url, shop) as h:
        h.decide(gate.id, "approved")
        carried_on(h, run_id, gate)
        stopping = time.monotonic()
    # The queue threads stop at once, not at the end of the interval they were waiting out.
    assert time.monotonic() - stopping < LONG_POLL / 2
    # The read before the gate ran once, on attempt 1: the fork started past it.
    assert shop.reads == 1


def test_a_decision_in_another_process_starts_the_run_through_postgres(
    database_url: str, shop: FakeShop
) -> None:
    postgres_only(database_url)
    ((run_id, gate),) = waiting_runs(database_url, shop)
    with long_polling(database_url, shop) as h:
        wait_for("listening", lambda: listening(database_url))
        decide_in_another_process(database_url, gate.id)
        carried_on(h, run_id, gate)


def test_a_start_begins_its_run_without_waiting_for_the_queues_poll(
    database_url: str, shop: FakeShop
) -> None:
    with long_polling(database_url, shop) as h:
        began = time.monotonic()
        run_id = h.start("refund", {"sku": "sku-1", "quantity": 2}).run_id
        h.gate(run_id, timeout=WITHIN)
        assert time.monotonic() - began < WITHIN
    assert shop.reads == 1


def test_a_start_in_another_process_begins_its_run_through_postgres(
    database_url: str, shop: FakeShop
) -> None:
    postgres_only(database_url)
    with long_polling(database_url, shop) as h:
        wait_for("listening", lambda: listening(database_url))
        began = time.monotonic()
        run_id = in_another_process("start", database_url)
        h.gate(run_id, timeout=WITHIN)
        assert time.monotonic() - began < WITHIN


def test_without_a_ring_the_poll_starts_the_run(database_url: str, shop: FakeShop) -> None:
    """On SQLite, a fork made in another process rings nothing here: the poll (every second
    in this test) starts the run."""
    if not database_url.startswith("sqlite"):
        pytest.skip("on Postgres the fork is announced to every worker: see the tests below")
    ((run_id, gate),) = waiting_runs(database_url, shop)
    with Harness(
        make_app(), database_url=database_url, implementations={"shop": shop}, poll_interval=1.0
    ) as h:
        decide_as_another_process(h, gate.id)
        done = h.wait(run_id, timeout=30)
        assert (done.status, done.attempt) == ("done", 2), done.error


def test_a_queue_no_workflow_runs_on_is_polled_seldom_and_still_served(
    database_url: str, shop: FakeShop
) -> None:
    """Every workflow of this app runs on `default`; its queue `spare` is polled every
    `UNUSED_QUEUE_POLL` seconds, not every poll interval. A run left queued there (as a deploy
    that moved its workflow to another queue leaves it) is served all the same, with no ring."""
    base = make_app()
    app = App(
        name=base.name,
        workflows=list(base.workflows.values()),
        connectors=[shop_connector],
        approvals=[REFUND],
        queues=[Queue("spare")],
    )
    db = Database(database_url, pool_size=2)
    db.prepare()
    client = db.client(app.name)
    try:
        run = RunStore(db, app=app.name).start(
            client, app.workflow("refund"), {"sku": "sku-1", "quantity": 2}, started_by="test"
        )
        dbos_status = "workflow_status" if db.is_sqlite else "dbos.workflow_status"
        with db.begin() as conn:  # moved to `spare` as it waits: nothing rings `spare`
            conn.execute(
                sa.text(
                    f"UPDATE {dbos_status} SET queue_name = 'shop:spare' WHERE workflow_uuid = :id"
                ),
                {"id": run.workflow_id},
            )
        with Harness(app, database_url=database_url, implementations={"shop": shop}) as h:
            polls = {q.name: q.polling_interval_sec for q in client.list_queues()}
            assert polls == {"shop:default": 0.05, "shop:spare": UNUSED_QUEUE_POLL}
            h.gate(run.run_id, timeout=WITHIN)
    finally:
        client.destroy()
        db.dispose()


def test_a_lost_listening_connection_loses_no_resume_and_is_made_again(
    database_url: str, shop: FakeShop
) -> None:
    postgres_only(database_url)
    (first, first_gate), (second, second_gate) = waiting_runs(database_url, shop, count=2)
    with long_polling(database_url, shop) as h:
        wait_for("listening", lambda: listening(database_url))
        lost = listening(database_url)
        # The connection is cut, and for as long as the decision takes it stays cut: each new
        # one is cut as soon as it shows.
        cutting = threading.Event()

        def cut() -> None:
            while not cutting.is_set():
                terminate(listening(database_url))
                cutting.wait(0.005)

        cutter = threading.Thread(target=cut, daemon=True)
        terminate(lost)
        wait_for("cut", lambda: not set(listening(database_url)) & set(lost))
        cutter.start()
        try:
            decide_as_another_process(h, first_gate.id)
        finally:
            cutting.set()
            cutter.join()
        # Its announcement was lost; once listening again, the worker polls every queue.
        carried_on(h, first, first_gate)

        wait_for("listening again", lambda: listening(database_url))
        assert not set(listening(database_url)) & set(lost)
        decide_as_another_process(h, second_gate.id)
        carried_on(h, second, second_gate)


if __name__ == "__main__":
    {"decide": _decide, "start": _start}[sys.argv[1]](*sys.argv[2:])
