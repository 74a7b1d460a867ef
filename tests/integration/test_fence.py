"""Every status write is fenced on the run's current attempt; the fence's locks, holds and
moves; cancel stops a run."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remit.core import fence
from remit.core.database import Database
from remit.core.errors import RemitError, RunMovedOn
from remit.core.runs import Run, RunStore
from remit.core.schema import resumes
from remit.core.schema import runs as runs_table
from remit.people.ending import cancel_run
from remit.testing import Harness
from tests.support import FakeShop, create_order, make_app, send_email


@pytest.fixture
def store(database_url: str) -> Iterator[tuple[Database, RunStore]]:
    db = Database(database_url)
    db.prepare()
    yield db, RunStore(db, app="shop")
    db.dispose()


def queued_run(db: Database, runs: RunStore) -> Run:
    """A run of `purchase` started with no worker to take it."""
    client = db.client("shop")
    try:
        return runs.start(client, make_app().workflow("purchase"), {"sku": "sku-1"}, started_by="t")
    finally:
        client.destroy()


def test_a_superseded_attempt_writes_nothing(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    run = queued_run(db, runs)
    with db.begin() as conn:
        assert runs.bump(conn, run.run_id) == (2, f"{run.run_id}:2")

    assert runs.claim(run.run_id, f"{run.run_id}:1", "v1") is False
    assert runs.conclude(run.run_id, f"{run.run_id}:1", "done", output={"x": 1}) is False
    assert runs.conclude(run.run_id, f"{run.run_id}:1", "failed", error="late") is False
    after = runs.get(run.run_id)
    assert (after.status, after.attempt, after.workflow_id) == ("queued", 2, f"{run.run_id}:2")
    assert (after.output, after.error, after.version) == (None, None, None)

    assert runs.claim(run.run_id, f"{run.run_id}:2", "v1") is True
    assert runs.get(run.run_id).status == "running"


def test_a_superseded_attempt_that_is_dequeued_runs_nothing(
    store: tuple[Database, RunStore], database_url: str
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    with db.begin() as conn:
        runs.bump(conn, run.run_id)

    with Harness(make_app(), database_url=database_url) as harness:
        handle = harness.worker.client.retrieve_workflow(f"{run.run_id}:1")
        assert handle.get_result() is None
        assert harness.steps(run.run_id, 1) == []
        # Attempt 2 was never enqueued: the reconciler's pass at start gives it to DBOS, and
        # it alone calls the shop.
        after = harness.wait(run.run_id)
        assert (after.status, after.attempt) == ("done", 2)
        assert {row.attempt for row in harness.ledger(run.run_id)} == {2}
        effects = harness.fake("shop", FakeShop).effects
        assert [e.op for e in effects] == ["shop.orders.create", "shop.emails.send"]


def test_an_attempt_superseded_mid_run_cannot_conclude(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = harness.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        with harness.worker.db.begin() as conn:
            harness.run_store.bump(conn, run.run_id)
        shop.gate.set()
        harness.worker.client.retrieve_workflow(f"{run.run_id}:1").get_result()

        after = harness.runs.get(run.run_id)
        assert (after.status, after.attempt, after.output) == ("queued", 2, None)
        # The call in flight finished; the attempt started no write after the bump.
        assert [r.op_id for r in harness.ledger(run.run_id)][-1] == create_order.id
        assert send_email.id not in [op_id for op_id, _ in shop.calls]


def test_concurrent_bumps_give_distinct_attempts(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    run = queued_run(db, runs)
    results: list[int] = []

    def bump() -> None:
        with db.begin() as conn:
            results.append(runs.bump(conn, run.run_id)[0])

    threads = [threading.Thread(target=bump) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [2, 3, 4, 5, 6, 7]
    assert runs.get(run.run_id).attempt == 7


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["bump", "claim", "done", "failed"]), st.integers(1, 4)),
        max_size=8,
    )
)
def test_only_the_current_attempt_ever_changes_the_run(
    store: tuple[Database, RunStore], steps: list[tuple[str, int]]
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    current, status = 1, "queued"
    for action, attempt in steps:
        before = runs.get(run.run_id)
        if action == "bump":
            if status in ("done", "failed"):
                continue
            with db.begin() as conn:
                runs.bump(conn, run.run_id)
            current, status = current + 1, "queued"
            continue
        wf_id = f"{run.run_id}:{attempt}"
        if action == "claim":
            wrote = runs.claim(run.run_id, wf_id, "v")
        else:
            wrote = runs.conclude(run.run_id, wf_id, action)  # type: ignore[arg-type]
        expected = attempt == current and status in ("queued", "running")
        assert wrote is expected
        after = runs.get(run.run_id)
        if wrote:
            status = "running" if action == "claim" else action
        else:
            assert (after.status, after.workflow_id, after.updated_at) == (
                before.status,
                before.workflow_id,
                before.updated_at,
            )
        assert (after.status, after.attempt) == (status, current)


def test_cancel_a_queued_run(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    client = db.client("shop")
    try:
        run = runs.start(client, make_app().workflow("purchase"), {"sku": "sku-1"}, started_by="t")
        cancelled = cancel_run(runs, client, run.run_id, by="t")
        assert cancelled.status == "cancelled"
        assert cancelled.finished_at is not None
        assert client.retrieve_workflow(run.workflow_id).get_status().status == "CANCELLED"
        # Cancelling again, or a finished run, changes nothing.
        assert cancel_run(runs, client, run.run_id, by="t").updated_at == cancelled.updated_at
    finally:
        client.destroy()


def test_cancel_a_running_run_stops_it_at_its_next_step(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = harness.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        assert harness.client.runs.cancel(run.run_id).status == "cancelled"
        shop.gate.set()
        status = harness.worker.client.retrieve_workflow(run.workflow_id)
        with pytest.raises(Exception, match="cancel"):
            status.get_result()

        after = harness.runs.get(run.run_id)
        assert after.status == "cancelled"
        assert after.output is None
        called = [op_id for op_id, _ in shop.calls]
        assert create_order.id in called
        assert send_email.id not in called


def test_advance_moves_a_locked_run_on_once_with_its_outbox_row(
    store: tuple[Database, RunStore],
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    assert runs.claim(run.run_id, run.workflow_id, "v1")
    assert runs.suspend(run.run_id, run.workflow_id, "waiting")
    now = runs.clock.now()
    with db.begin() as conn:
        locked = fence.lock(conn, run.run_id)
        assert locked is not None
        assert (locked.status, locked.attempt, locked.workflow_id) == (
            "waiting",
            1,
            run.workflow_id,
        )
        assert locked.on(run.workflow_id)
        assert not locked.on(run.workflow_id, ("sleeping",))
        resume = fence.advance(conn, locked, 3, now=now)
    assert (resume.workflow_id, resume.from_workflow_id, resume.from_step, resume.queue) == (
        f"{run.run_id}:2",
        run.workflow_id,
        3,
        run.queue,
    )
    after = runs.get(run.run_id)
    assert (after.status, after.attempt, after.workflow_id) == ("queued", 2, resume.workflow_id)
    with db.engine.connect() as conn:
        assert list(
            conn.execute(
                sa.select(resumes.c.workflow_id).where(resumes.c.run_id == run.run_id)
            ).scalars()
        ) == [resume.workflow_id]

    # A lock read before the move is out of date: moving on from it again is refused, and the
    # transaction writes nothing.
    with pytest.raises(RemitError, match="once per lock"), db.begin() as conn:
        fence.advance(conn, locked, 3, now=now)
    assert runs.get(run.run_id).attempt == 2
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(resumes)).scalar() == 1


def test_a_finished_run_has_no_next_attempt_but_a_retry_reopens_a_failed_one(
    store: tuple[Database, RunStore],
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    assert runs.conclude(run.run_id, run.workflow_id, "failed", error="no")
    with db.begin() as conn:
        locked = fence.lock(conn, run.run_id)
        assert locked is not None
        assert locked.finished
        with pytest.raises(RemitError, match="a finished run has no next attempt"):
            fence.next_attempt(conn, locked, now=runs.clock.now())
        assert fence.next_attempt(conn, locked, now=runs.clock.now(), reopen=True) == (
            2,
            f"{run.run_id}:2",
        )
    after = runs.get(run.run_id)
    assert (after.status, after.attempt, after.error, after.finished_at) == (
        "queued",
        2,
        None,
        None,
    )


def test_hold_lets_only_the_current_unfinished_attempt_on(
    store: tuple[Database, RunStore],
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    with db.begin() as conn:
        fence.hold(conn, run.run_id, run.workflow_id)
        with pytest.raises(RunMovedOn, match="is no longer on"):
            fence.hold(conn, run.run_id, f"{run.run_id}:2")
        with pytest.raises(RunMovedOn, match="is no longer on"):
            fence.hold(conn, "run_missing", "run_missing:1")
    with db.begin() as conn:
        locked = fence.lock(conn, run.run_id)
        assert locked is not None
        assert fence.cancel(conn, locked, now=runs.clock.now())
    with db.begin() as conn, pytest.raises(RunMovedOn, match="is cancelled"):
        fence.hold(conn, run.run_id, run.workflow_id)


def test_cancel_ends_a_locked_run_once_and_its_attempt_writes_nothing_after(
    store: tuple[Database, RunStore],
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    assert runs.claim(run.run_id, run.workflow_id, "v1")
    with db.begin() as conn:
        locked = fence.lock(conn, run.run_id)
        assert locked is not None
        assert fence.cancel(conn, locked, now=runs.clock.now())
    assert runs.conclude(run.run_id, run.workflow_id, "done", output={"x": 1}) is False
    assert runs.suspend(run.run_id, run.workflow_id, "waiting") is False
    cancelled = runs.get(run.run_id)
    assert (cancelled.status, cancelled.output) == ("cancelled", None)
    with db.begin() as conn:
        again = fence.lock(conn, run.run_id)
        assert again is not None
        assert fence.cancel(conn, again, now=runs.clock.now()) is False
    assert runs.get(run.run_id).updated_at == cancelled.updated_at


def test_lock_all_takes_the_runs_that_exist_and_is_current_picks_by_attempt(
    store: tuple[Database, RunStore],
) -> None:
    db, runs = store
    first, second = queued_run(db, runs), queued_run(db, runs)
    with db.begin() as conn:
        locked = fence.lock_all(conn, [second.run_id, "run_missing", first.run_id, first.run_id])
        assert sorted(locked) == sorted([first.run_id, second.run_id])
        fence.next_attempt(conn, locked[second.run_id], now=runs.clock.now())
    attempt_one = sa.literal(first.workflow_id)
    with db.engine.connect() as conn:
        current = conn.execute(
            sa.select(runs_table.c.run_id).where(fence.is_current(attempt_one))
        ).scalars()
        assert list(current) == [first.run_id]
